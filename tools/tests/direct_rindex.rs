//! `lockd direct format|lookup|update|rebuild -x` against `sanlock direct` on the same
//! input: identical bytes (one documented exception), each tool reads the other's
//! entries, and bad input gets sanlock's code with the file left unchanged.

use std::path::{Path, PathBuf};
use std::process::Command;

use lockd_system_tests::{require_command, scratch_dir, sparse_file, LoopDevice};

const LOCKD: &str = env!("CARGO_BIN_EXE_lockd");
const MIB: u64 = 1 << 20;

/// Builds a command line for one image.
type ArgsFor = Box<dyn Fn(&PathBuf) -> Vec<String>>;

/// (ok, stdout+stderr)
fn tool(bin: &str, args: &[&str]) -> (bool, String) {
    let out = Command::new(bin)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {bin}: {e}"));
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

/// sanlock's result code: the N of "ACTION done N".
fn sanlock_rv(args: &[&str]) -> (i32, String) {
    let (_, text) = tool("sanlock", args);
    let rv = text
        .lines()
        .find_map(|l| l.split_once(" done ")?.1.trim().parse().ok())
        .unwrap_or_else(|| panic!("no result in sanlock {args:?}: {text}"));
    (rv, text)
}

/// lockd's result code: 0 on success, else the code in "(NAME, CODE)" of its error line.
fn lockd_rv(args: &[&str]) -> (i32, String) {
    let (ok, text) = tool(LOCKD, args);
    if ok {
        return (0, text);
    }
    let rv = text
        .rsplit_once(", ")
        .and_then(|(_, t)| t.trim().trim_end_matches(')').parse().ok())
        .unwrap_or(i32::MIN);
    (rv, text)
}

/// "name N offset O" from either tool's lookup output.
fn entry(text: &str) -> (String, u64) {
    let line = text
        .lines()
        .find(|l| l.starts_with("name "))
        .unwrap_or_else(|| panic!("no entry in {text}"));
    let f: Vec<&str> = line.split_whitespace().collect();
    (f[1].to_string(), f[3].parse().expect("offset"))
}

fn bytes(p: &Path) -> Vec<u8> {
    std::fs::read(p).expect("read image")
}

/// Compares two images; the only bytes allowed to differ are 20..24 of the request
/// record (sector 1) of the rindex_lease at `lease_off`: sanlock's format writes that
/// sector from a buffer it does not clear, so they hold whatever was in its memory; lockd
/// writes zeros (sanlock never reads them: the request record's fields end at byte 20).
fn assert_same_but_request_pad(a: &Path, b: &Path, lease_off: u64, sector: u64) {
    let (x, y) = (bytes(a), bytes(b));
    assert_eq!(x.len(), y.len());
    let pad = (lease_off + sector + 20) as usize..(lease_off + sector + 24) as usize;
    for (i, (p, q)) in x.iter().zip(&y).enumerate() {
        if p != q && !pad.contains(&i) {
            panic!(
                "{} and {} differ at byte {i} ({p:#04x} vs {q:#04x})",
                a.display(),
                b.display()
            );
        }
    }
}

fn rx(path: &Path, off: u64) -> String {
    format!("ls1:{}:{off}", path.display())
}

#[test]
fn format_is_byte_identical_for_every_geometry() {
    require_command("sanlock", "sanlock");
    let dir = scratch_dir();
    for (z, a, align) in [
        ("512", "1M", MIB),
        ("4096", "1M", MIB),
        ("4096", "8M", 8 * MIB),
    ] {
        let s = sparse_file(dir.path(), &format!("s-{z}-{a}"), 4 * align);
        let l = sparse_file(dir.path(), &format!("l-{z}-{a}"), 4 * align);
        let (rv, text) = sanlock_rv(&["direct", "format", "-x", &rx(&s, align), "-Z", z, "-A", a]);
        assert_eq!(rv, 0, "sanlock format {z}/{a}: {text}");
        let (rv, text) = lockd_rv(&["direct", "format", "-x", &rx(&l, align), "-Z", z, "-A", a]);
        assert_eq!(rv, 0, "lockd format {z}/{a}: {text}");
        assert_same_but_request_pad(&s, &l, 2 * align, z.parse().unwrap());
    }
    // And on a loop device with 4096-byte logical sectors, geometry from the device.
    let s = sparse_file(dir.path(), "s-dev", 32 * MIB);
    let l = sparse_file(dir.path(), "l-dev", 32 * MIB);
    {
        let (ds, dl) = (LoopDevice::attach(&s, 4096), LoopDevice::attach(&l, 4096));
        let (rv, text) = sanlock_rv(&["direct", "format", "-x", &rx(&ds.device, 8 * MIB)]);
        assert_eq!(rv, 0, "sanlock format on 4K device: {text}");
        let (rv, text) = lockd_rv(&["direct", "format", "-x", &rx(&dl.device, 8 * MIB)]);
        assert_eq!(rv, 0, "lockd format on 4K device: {text}");
    }
    assert_same_but_request_pad(&s, &l, 16 * MIB, 4096);
}

#[test]
fn updates_and_rebuilds_match_and_each_tool_reads_the_other() {
    require_command("sanlock", "sanlock");
    let dir = scratch_dir();
    let s = sparse_file(dir.path(), "s", 12 * MIB);
    let l = sparse_file(dir.path(), "l", 12 * MIB);
    assert_eq!(sanlock_rv(&["direct", "format", "-x", &rx(&s, MIB)]).0, 0);
    assert_eq!(lockd_rv(&["direct", "format", "-x", &rx(&l, MIB)]).0, 0);
    let steps: [&[&str]; 5] = [
        &["-e", "vm1:3M"],
        &["-e", "vm2:4194304"],
        &["-e", "vm3:7M"],
        &["-e", "vm2:4M", "-z", "1"],
        &["-e", "vm4:4M"],
    ];
    for step in steps {
        let sx = rx(&s, MIB);
        let lx = rx(&l, MIB);
        let mut sa = vec!["direct", "update", "-x", sx.as_str()];
        sa.extend_from_slice(step);
        let mut la = vec!["direct", "update", "-x", lx.as_str()];
        la.extend_from_slice(step);
        let (a, ta) = sanlock_rv(&sa);
        let (b, tb) = lockd_rv(&la);
        assert_eq!((a, b), (0, 0), "update {step:?}: {ta} / {tb}");
    }
    assert_same_but_request_pad(&s, &l, 2 * MIB, 512);
    // Each tool reads the other's index.
    for (name, off) in [("vm1", 3 * MIB), ("vm4", 4 * MIB), ("vm3", 7 * MIB)] {
        let (rv, t) = lockd_rv(&["direct", "lookup", "-x", &rx(&s, MIB), "-e", name]);
        assert_eq!(
            (rv, entry(&t)),
            (0, (name.to_string(), off)),
            "lockd reads sanlock's"
        );
        let (rv, t) = sanlock_rv(&["direct", "lookup", "-x", &rx(&l, MIB), "-e", name]);
        assert_eq!(
            (rv, entry(&t)),
            (0, (name.to_string(), off)),
            "sanlock reads lockd's"
        );
    }
    let (_, t) = lockd_rv(&["direct", "lookup", "-x", &rx(&s, MIB)]);
    let (_, u) = sanlock_rv(&["direct", "lookup", "-x", &rx(&l, MIB)]);
    assert_eq!(entry(&t), ("-".to_string(), 5 * MIB), "first free slot");
    assert_eq!(entry(&u), entry(&t));

    // Rebuild from real leases: resource leases at 3M and 6M, index entries cleared.
    for img in [&s, &l] {
        for (name, off) in [("a1", "3M"), ("a2", "6M")] {
            let (ok, text) = tool(
                "sanlock",
                &[
                    "direct",
                    "init",
                    "-r",
                    &format!("ls1:{name}:{}:{}", img.display(), off),
                ],
            );
            assert!(ok, "sanlock direct init -r: {text}");
        }
    }
    assert_eq!(sanlock_rv(&["direct", "rebuild", "-x", &rx(&s, MIB)]).0, 0);
    let (rv, text) = lockd_rv(&["direct", "rebuild", "-x", &rx(&l, MIB)]);
    assert_eq!(rv, 0, "{text}");
    assert!(text.contains("2 resources"), "{text}");
    assert_same_but_request_pad(&s, &l, 2 * MIB, 512);
    let (_, t) = lockd_rv(&["direct", "lookup", "-x", &rx(&s, MIB), "-e", "a2"]);
    assert_eq!(entry(&t), ("a2".to_string(), 6 * MIB));
    let (rv, _) = lockd_rv(&["direct", "lookup", "-x", &rx(&s, MIB), "-e", "vm1"]);
    assert_eq!(rv, -2, "rebuild dropped entries without a lease");
}

#[test]
fn bad_input_gets_sanlock_codes_and_leaves_the_file_alone() {
    require_command("sanlock", "sanlock");
    let dir = scratch_dir();
    let s = sparse_file(dir.path(), "s", 8 * MIB);
    let l = sparse_file(dir.path(), "l", 8 * MIB);
    for p in [&s, &l] {
        let (ok, text) = tool(
            LOCKD,
            &[
                "direct",
                "format",
                "-x",
                &rx(p, MIB),
                "--max-resources",
                "2",
            ],
        );
        assert!(ok, "{text}");
        for (name, off) in [("f1", "3M"), ("f2", "4M")] {
            let (ok, text) = tool(
                LOCKD,
                &[
                    "direct",
                    "update",
                    "-x",
                    &rx(p, MIB),
                    "-e",
                    &format!("{name}:{off}"),
                ],
            );
            assert!(ok, "{text}");
        }
    }
    let wrong_ls = |p: &PathBuf| format!("other:{}:{MIB}", p.display());
    let not_formatted = |p: &PathBuf| format!("ls1:{}:{}", p.display(), 6 * MIB);
    let cases: Vec<(&str, ArgsFor)> = vec![
        (
            "lookup, other lockspace",
            Box::new(move |p| {
                vec![
                    "lookup".into(),
                    "-x".into(),
                    wrong_ls(p),
                    "-e".into(),
                    "f1".into(),
                ]
            }),
        ),
        (
            "lookup, no index there",
            Box::new(move |p| {
                vec![
                    "lookup".into(),
                    "-x".into(),
                    not_formatted(p),
                    "-e".into(),
                    "f1".into(),
                ]
            }),
        ),
        (
            "update, no index there",
            Box::new(move |p| {
                vec![
                    "update".into(),
                    "-x".into(),
                    not_formatted(p),
                    "-e".into(),
                    "x:3M".into(),
                ]
            }),
        ),
        (
            "lookup, unknown name",
            Box::new(|p| {
                vec![
                    "lookup".into(),
                    "-x".into(),
                    rx(p, MIB),
                    "-e".into(),
                    "nosuch".into(),
                ]
            }),
        ),
        (
            "lookup, full index",
            Box::new(|p| vec!["lookup".into(), "-x".into(), rx(p, MIB)]),
        ),
        (
            "update, unaligned offset",
            Box::new(|p| {
                vec![
                    "update".into(),
                    "-x".into(),
                    rx(p, MIB),
                    "-e".into(),
                    format!("x:{}", 3 * MIB + 512),
                ]
            }),
        ),
        (
            "update, no offset",
            Box::new(|p| {
                vec![
                    "update".into(),
                    "-x".into(),
                    rx(p, MIB),
                    "-e".into(),
                    "x".into(),
                ]
            }),
        ),
        (
            "lookup, name and wrong offset",
            Box::new(|p| {
                vec![
                    "lookup".into(),
                    "-x".into(),
                    rx(p, MIB),
                    "-e".into(),
                    "f1:4M".into(),
                ]
            }),
        ),
    ];
    println!("{:<32} {:>8} {:>8}", "case", "sanlock", "lockd");
    for (what, args) in &cases {
        let before = (bytes(&s), bytes(&l));
        let sa: Vec<String> = std::iter::once("direct".to_string())
            .chain(args(&s))
            .collect();
        let la: Vec<String> = std::iter::once("direct".to_string())
            .chain(args(&l))
            .collect();
        let (a, ta) = sanlock_rv(&sa.iter().map(String::as_str).collect::<Vec<_>>());
        let (b, tb) = lockd_rv(&la.iter().map(String::as_str).collect::<Vec<_>>());
        println!("{what:<32} {a:>8} {b:>8}");
        assert_ne!(a, 0, "{what}: sanlock accepted it: {ta}");
        assert_eq!(b, a, "{what}: sanlock said {ta}, lockd said {tb}");
        assert!(
            tb.lines().count() == 1 && tb.contains("lockd: error:"),
            "{what}: {tb}"
        );
        assert!(
            bytes(&s) == before.0 && bytes(&l) == before.1,
            "{what}: a file changed"
        );
    }
    // Checks sanlock does not make: an entry name over 48 bytes, an offset past the
    // index's slots. lockd refuses them and writes nothing.
    let before = bytes(&l);
    let long = "n".repeat(49);
    let (ok, t) = tool(
        LOCKD,
        &[
            "direct",
            "update",
            "-x",
            &rx(&l, MIB),
            "-e",
            &format!("{long}:3M"),
        ],
    );
    assert!(!ok && t.contains("name"), "{t}");
    let (rv, t) = lockd_rv(&["direct", "update", "-x", &rx(&l, MIB), "-e", "x:7M"]);
    assert_eq!(rv, -277, "offset outside the slots: {t}");
    assert!(bytes(&l) == before, "a refused update changed the file");
}
