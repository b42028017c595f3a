//! lockd-core's modules import each other without a cycle (issue 40): every module can be
//! read knowing only the modules below it. The inputs and effects (`io`) and the work in
//! flight (`pending`) sit low, so the step, the request path (`commands`), the kill
//! decision and the watches name them without importing each other.
//!
//! The graph is read from the source by the system tests' reader
//! (`tests/src/module_graph.rs`, included here by path: lockd-core takes no dependency
//! for it): an edge `a → b` for each `crate::b` in `src/a.rs` (or `src/a/…`), outside
//! comments and `#[cfg(test)]` items. The test prints the modules in layers and fails
//! naming every cycle.

use std::path::Path;

#[allow(dead_code)]
#[path = "../../tests/src/module_graph.rs"]
mod module_graph;

#[test]
fn core_modules_import_each_other_without_a_cycle() {
    let src_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    // lib.rs is the crate root that declares every module, bin/ the simulator's binary:
    // neither is a module others import.
    let edges = module_graph::import_edges(&src_dir, &["lib", "bin"]);
    let layers = module_graph::layers(&edges);
    assert!(layers.len() > 2, "the graph was read: {layers:?}");
    for leaf in ["clients", "errno", "events"] {
        assert!(
            layers[..2].iter().any(|l| l.iter().any(|m| m == leaf)),
            "{leaf} is a leaf: {layers:?}"
        );
    }
    for (module, below) in [("io", "step"), ("io", "commands"), ("pending", "step")] {
        assert!(
            !edges[module].contains(below),
            "{module} must not import {below}: {:?}",
            edges[module]
        );
    }
}

/// Issue 40: no function of lockd-core's (its simulator included), outside tests, is over
/// 100 lines.
#[test]
fn no_core_function_is_over_100_lines() {
    let src_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut long = Vec::new();
    let mut over_40 = 0;
    for (module, text) in module_graph::module_sources(&src_dir) {
        let code = module_graph::strip_test_items(&module_graph::strip_comments(&text));
        over_40 += module_graph::long_functions(&code, 40).len();
        for (name, n) in module_graph::long_functions(&code, 100) {
            long.push(format!("{module}::{name}: {n} lines"));
        }
    }
    assert!(
        over_40 > 5,
        "the functions were read ({over_40} over 40 lines)"
    );
    assert!(long.is_empty(), "functions over 100 lines: {long:#?}");
}
