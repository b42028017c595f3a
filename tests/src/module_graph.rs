//! A crate's module import graph, read from its source, for the tests that keep it
//! free of cycles (`daemon/tests/module_graph.rs`, `daemon-core/tests/module_graph.rs`,
//! which includes this file by `#[path]`: lockd-core does not depend on this crate).
//!
//! An edge `a → b` for each `crate::b` (also inside `use crate::{…}` groups) in
//! `src/a.rs` (or `src/a/…`), outside comments and outside `#[cfg(test)]` items (tests
//! may reach anywhere). [`layers`] places the modules in layers, each importing only
//! from layers below it, and fails naming every module in or above a cycle.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The source without `//` comments.
pub fn strip_comments(src: &str) -> String {
    src.lines()
        .map(|line| match line.find("//") {
            Some(i) => &line[..i],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The source without its `#[cfg(test)]` items (a module or function body in braces).
pub fn strip_test_items(src: &str) -> String {
    let mut out = String::new();
    let mut rest = src;
    while let Some(i) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..i]);
        let after = &rest[i..];
        let Some(open) = after.find('{') else {
            rest = "";
            break;
        };
        // A `#[cfg(test)] use …;` ends at its semicolon before any brace.
        if let Some(semi) = after.find(';') {
            if semi < open {
                rest = &after[semi + 1..];
                continue;
            }
        }
        let mut depth = 0usize;
        let mut end = after.len();
        for (j, c) in after[open..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = open + j + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

fn ident_at(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// The modules named after `crate::` in `src`.
pub fn imports(src: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut rest = src;
    while let Some(i) = rest.find("crate::") {
        let after = &rest[i + "crate::".len()..];
        if let Some(group) = after.strip_prefix('{') {
            // `crate::{a, b::c, d::{e, f}}`: the top-level names of the group.
            let mut depth = 1usize;
            let mut start = 0usize;
            let mut end = group.len();
            for (j, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            end = j;
                            break;
                        }
                    }
                    ',' if depth == 1 => {
                        found.insert(ident_at(group[start..j].trim()).to_string());
                        start = j + 1;
                    }
                    _ => {}
                }
            }
            found.insert(ident_at(group[start..end].trim()).to_string());
            rest = &group[end..];
        } else {
            found.insert(ident_at(after).to_string());
            rest = after;
        }
    }
    found.remove("");
    found
}

/// Each module of `src_dir` by name: `x.rs` and the `.rs` files of folder `x/` (its
/// submodules) together, except a folder's `tests.rs` (a test module, declared under
/// `#[cfg(test)]` by its parent).
pub fn module_sources(src_dir: &Path) -> BTreeMap<String, String> {
    let mut modules: BTreeMap<String, String> = BTreeMap::new();
    let mut entries: Vec<_> = std::fs::read_dir(src_dir)
        .expect("read the source folder")
        .map(|e| e.expect("dir entry").path())
        .collect();
    entries.sort();
    for path in entries {
        let name = path.file_stem().unwrap().to_string_lossy().to_string();
        let mut text = String::new();
        if path.is_dir() {
            let mut files: Vec<_> = std::fs::read_dir(&path)
                .expect("read module dir")
                .map(|f| f.expect("dir entry").path())
                .collect();
            files.sort();
            for f in files {
                if f.extension().is_some_and(|e| e == "rs")
                    && f.file_name().is_some_and(|n| n != "tests.rs")
                {
                    text.push_str(&std::fs::read_to_string(&f).expect("read source"));
                }
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            text = std::fs::read_to_string(&path).expect("read source");
        } else {
            continue;
        }
        modules.entry(name).or_default().push_str(&text);
    }
    modules
}

/// The import edges of the modules in `src_dir`, except the files and folders named in
/// `not_modules` (the crate root, binaries: nothing imports them as modules).
pub fn import_edges(src_dir: &Path, not_modules: &[&str]) -> BTreeMap<String, BTreeSet<String>> {
    let sources = module_sources(src_dir);
    let names: BTreeSet<String> = sources
        .keys()
        .filter(|n| !not_modules.contains(&n.as_str()))
        .cloned()
        .collect();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for name in &names {
        let code = strip_test_items(&strip_comments(&sources[name]));
        let deps = imports(&code)
            .into_iter()
            .filter(|d| d != name && names.contains(d))
            .collect();
        edges.insert(name.clone(), deps);
    }
    edges
}

/// The modules of `edges` in layers (each imports only from layers below it), printed
/// one line a layer; panics naming every module in or above an import cycle, with its
/// imports not yet placed.
pub fn layers(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    // Peel off the modules whose imports are all in lower layers.
    let mut placed: BTreeSet<String> = BTreeSet::new();
    let mut layers: Vec<Vec<String>> = Vec::new();
    loop {
        let layer: Vec<String> = edges
            .iter()
            .filter(|(n, deps)| !placed.contains(*n) && deps.iter().all(|d| placed.contains(d)))
            .map(|(n, _)| n.clone())
            .collect();
        if layer.is_empty() {
            break;
        }
        placed.extend(layer.iter().cloned());
        layers.push(layer);
    }
    for (i, layer) in layers.iter().enumerate() {
        println!("layer {i}: {}", layer.join(" "));
    }

    let left: Vec<&String> = edges.keys().filter(|n| !placed.contains(*n)).collect();
    if !left.is_empty() {
        let mut report = String::new();
        for n in &left {
            let in_cycle: Vec<&String> =
                edges[*n].iter().filter(|d| !placed.contains(*d)).collect();
            report.push_str(&format!("  {n} → {in_cycle:?}\n"));
        }
        panic!(
            "{} modules are in or above an import cycle (each with its imports not yet \
             placed):\n{report}",
            left.len()
        );
    }
    layers
}

/// The functions of `src` (rustfmt-formatted, comments and `#[cfg(test)]` items already
/// stripped) longer than `max_lines`, as `(name, lines)`: a function runs from its `fn`
/// line to the first later line that is its own indentation and `}`. A declaration
/// without a body (ending in `;`) and a function on one line are not measured.
pub fn long_functions(src: &str, max_lines: usize) -> Vec<(String, usize)> {
    let lines: Vec<&str> = src.lines().collect();
    let mut found = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let code = line.trim_start();
        let indent = &line[..line.len() - code.len()];
        let Some(name) = fn_name(code) else {
            i += 1;
            continue;
        };
        // Where the signature ends: a line ending in `{` (a body), `;` (none) or `}` (a
        // body on the same line).
        let Some(open) = (i..lines.len()).find(|&j| {
            let t = lines[j].trim_end();
            t.ends_with('{') || t.ends_with(';') || t.ends_with('}')
        }) else {
            break;
        };
        if !lines[open].trim_end().ends_with('{') {
            i = open + 1;
            continue;
        }
        let close = format!("{indent}}}");
        let end = (open + 1..lines.len())
            .find(|&j| lines[j].trim_end() == close)
            .unwrap_or(lines.len() - 1);
        let n = end - i + 1;
        if n > max_lines {
            found.push((name.to_string(), n));
        }
        i = end + 1;
    }
    found
}

/// The name after `fn` when `code` (a line without its indentation) starts a function:
/// `fn`, after any of `pub`, `pub(crate)`, `const`, `async`, `unsafe`.
fn fn_name(code: &str) -> Option<&str> {
    let mut rest = code;
    loop {
        if let Some(r) = rest.strip_prefix("fn ") {
            let name = ident_at(r.trim_start());
            return (!name.is_empty()).then_some(name);
        }
        let word = rest.split_whitespace().next()?;
        let qualifier = word == "pub"
            || (word.starts_with("pub(") && word.ends_with(')'))
            || matches!(word, "const" | "async" | "unsafe");
        if !qualifier {
            return None;
        }
        rest = rest[word.len()..].trim_start();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reader_finds_imports_and_skips_comments_and_tests() {
        let src = "use crate::{a, b::{c, d}, e::f};\n// crate::g\nfn x() { crate::h::y(); }\n\
                   #[cfg(test)]\nmod tests { use crate::i; }\n";
        let code = strip_test_items(&strip_comments(src));
        let got: Vec<String> = imports(&code).into_iter().collect();
        assert_eq!(got, ["a", "b", "e", "h"]);
    }

    #[test]
    fn long_functions_are_measured_from_fn_to_their_closing_brace() {
        let body = |n: usize| "    x();\n".repeat(n);
        let src = format!(
            "pub(crate) fn short() {{\n{}}}\n\
             trait T {{\n    fn declared(&self);\n    fn empty(&self) {{}}\n}}\n\
             impl S {{\n    pub const unsafe fn long<T>(\n        a: T,\n    ) -> T\n    \
             where\n        T: Copy,\n    {{\n{}    }}\n}}\n",
            body(3),
            body(5)
        );
        // `long` spans its signature (6 lines, to its `{`), 5 lines of body and its `}`.
        assert_eq!(long_functions(&src, 5), [("long".to_string(), 12)]);
        assert_eq!(long_functions(&src, 12), []);
        assert_eq!(
            long_functions(&src, 4),
            [("short".to_string(), 5), ("long".to_string(), 12)]
        );
    }

    #[test]
    #[should_panic(expected = "in or above an import cycle")]
    fn a_cycle_is_named() {
        let edge = |a: &str, b: &[&str]| {
            (
                a.to_string(),
                b.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>(),
            )
        };
        let edges = BTreeMap::from([edge("a", &[]), edge("b", &["a", "c"]), edge("c", &["b"])]);
        layers(&edges);
    }
}
