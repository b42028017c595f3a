//! `lockd direct format|lookup|update|rebuild -x` against `sanlock direct` on the same
//! input: identical bytes (one documented exception), each tool reads the other's
//! entries, and bad input gets sanlock's code with the file left unchanged.

use std::path::Path;
use std::process::Command;

use lockd_system_tests::{require_command, scratch_dir, sparse_file, LoopDevice};

const LOCKD: &str = env!("CARGO_BIN_EXE_lockd");
const MIB: u64 = 1 << 20;

/// Where a bad-input case points `-x` (the index is at 1M of each image).
#[derive(Clone, Copy)]
enum At {
    Index,
    OtherLockspace,
    Unformatted,
    NoFile,
}

fn rx_at(p: &Path, at: At) -> String {
    match at {
        At::Index => rx(p, MIB),
        At::OtherLockspace => format!("other:{}:{MIB}", p.display()),
        At::Unformatted => rx(p, 6 * MIB),
        At::NoFile => rx(&p.with_extension("missing"), MIB),
    }
}

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
/// Observed: 2 to 4 of those bytes differ from run to run, never any other byte. `a` is
/// sanlock's image, `b` lockd's.
fn assert_same_but_request_pad(a: &Path, b: &Path, lease_off: u64, sector: u64) {
    let (x, y) = (bytes(a), bytes(b));
    assert_eq!(x.len(), y.len());
    let pad = (lease_off + sector + 20) as usize..(lease_off + sector + 24) as usize;
    assert!(
        y[pad.clone()].iter().all(|&b| b == 0),
        "lockd wrote non-zero bytes in the request record's padding"
    );
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
    // "-" is a name, not "no name", for both (sanlock only prints "-" for an empty one).
    assert_eq!(
        sanlock_rv(&["direct", "lookup", "-x", &rx(&s, MIB), "-e", "-"]).0,
        -2
    );
    assert_eq!(
        lockd_rv(&["direct", "lookup", "-x", &rx(&l, MIB), "-e", "-"]).0,
        -2
    );
    let (rv, t) = lockd_rv(&[
        "direct",
        "lookup",
        "-x",
        &rx(&s, MIB),
        "-e",
        "vm3",
        "--json",
    ]);
    assert_eq!(rv, 0, "{t}");
    let j: serde_json::Value = serde_json::from_str(&t).expect("lookup --json");
    assert_eq!(
        (j["name"].as_str(), j["offset"].as_u64()),
        (Some("vm3"), Some(7 * MIB))
    );

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
    for (name, off) in [("a1", 3 * MIB), ("a2", 6 * MIB)] {
        let (_, t) = lockd_rv(&["direct", "lookup", "-x", &rx(&s, MIB), "-e", name]);
        assert_eq!(
            entry(&t),
            (name.to_string(), off),
            "lockd reads sanlock's rebuild"
        );
        let (_, t) = sanlock_rv(&["direct", "lookup", "-x", &rx(&l, MIB), "-e", name]);
        assert_eq!(
            entry(&t),
            (name.to_string(), off),
            "sanlock reads lockd's rebuild"
        );
    }
    // `lockd direct dump` shows the index (header and entries) of either image.
    for img in [&s, &l] {
        let out = lockd_rv(&[
            "direct",
            "dump",
            &format!("{}:{MIB}", img.display()),
            "--json",
        ]);
        assert_eq!(out.0, 0, "{}", out.1);
        let areas: serde_json::Value = serde_json::from_str(&out.1).expect("dump --json");
        let index = &areas[0];
        assert_eq!(index["kind"], "rindex", "{index}");
        assert_eq!(index["lockspace"], "ls1");
        assert_eq!(index["max_resources"], 4096);
        let listed: Vec<(String, u64)> = index["entries"]
            .as_array()
            .expect("entries")
            .iter()
            .map(|e| {
                (
                    e["name"].as_str().unwrap().to_string(),
                    e["offset"].as_u64().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            listed,
            [("a1".to_string(), 3 * MIB), ("a2".to_string(), 6 * MIB)]
        );
    }
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
    let unaligned = format!("x:{}", 3 * MIB + 512);
    let cases: [(&str, &str, At, &[&str]); 11] = [
        (
            "lookup, other lockspace",
            "lookup",
            At::OtherLockspace,
            &["-e", "f1"],
        ),
        (
            "lookup, no index there",
            "lookup",
            At::Unformatted,
            &["-e", "f1"],
        ),
        (
            "update, no index there",
            "update",
            At::Unformatted,
            &["-e", "x:3M"],
        ),
        ("lookup, no such file", "lookup", At::NoFile, &["-e", "f1"]),
        (
            "lookup, unknown name",
            "lookup",
            At::Index,
            &["-e", "nosuch"],
        ),
        ("lookup, full index", "lookup", At::Index, &[]),
        (
            "update, unaligned offset",
            "update",
            At::Index,
            &["-e", &unaligned],
        ),
        ("update, no offset", "update", At::Index, &["-e", "x"]),
        ("update, empty name", "update", At::Index, &["-e", ":3M"]),
        (
            "remove, no offset",
            "update",
            At::Index,
            &["-e", "f1", "-z", "1"],
        ),
        (
            "lookup, name and wrong offset",
            "lookup",
            At::Index,
            &["-e", "f1:4M"],
        ),
    ];
    println!("{:<32} {:>8} {:>8}", "case", "sanlock", "lockd");
    for (what, op, at, extra) in cases {
        let before = (bytes(&s), bytes(&l));
        let (sx, lx) = (rx_at(&s, at), rx_at(&l, at));
        let mut sa = vec!["direct", op, "-x", sx.as_str()];
        sa.extend_from_slice(extra);
        let mut la = vec!["direct", op, "-x", lx.as_str()];
        la.extend_from_slice(extra);
        let (a, ta) = sanlock_rv(&sa);
        let (b, tb) = lockd_rv(&la);
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
    // Input sanlock does not check (it truncates the name, writes or reads outside the
    // index's slots, indexes a name twice, formats with an invalid sector size): lockd
    // refuses with the code shown and writes nothing.
    let long = format!("{}:3M", "n".repeat(49));
    let lx = rx(&l, MIB);
    let refused: [(&str, &[&str], i32); 7] = [
        ("name over 48 bytes", &["update", "-e", &long], -22),
        ("offset below the slots", &["update", "-e", "x:2M"], -277),
        ("add past the slots", &["update", "-e", "x:7M"], -277),
        (
            "remove past the slots",
            &["update", "-e", ":5M", "-z", "1"],
            -277,
        ),
        ("lookup past the slots", &["lookup", "-e", ":7M"], -277),
        ("name already indexed", &["update", "-e", "f1:4M"], -17),
        ("sector size 1000", &["format", "-Z", "1000"], -22),
    ];
    for (what, args, code) in refused {
        let before = bytes(&l);
        let mut la = vec!["direct", args[0], "-x", lx.as_str()];
        la.extend_from_slice(&args[1..]);
        let (rv, t) = lockd_rv(&la);
        println!("{what:<32} {:>8} {rv:>8}", "-");
        assert_eq!(rv, code, "{what}: {t}");
        assert!(
            t.lines().count() == 1 && t.contains("lockd: error:"),
            "{what}: {t}"
        );
        assert!(bytes(&l) == before, "{what}: the file changed");
    }
}
