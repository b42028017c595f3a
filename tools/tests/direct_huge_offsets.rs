//! `lockd direct` given offsets and sizes near the top of the 64-bit range: every command
//! refuses them with a one-line error naming the offset, never panics on overflow, and
//! leaves the file as it was. Runs on a sparse file (no sanlock, no loop device).

use std::path::Path;
use std::process::Output;

use lockd_system_tests::{run, run_ok, scratch_dir, sparse_file};

const LOCKD: &str = env!("CARGO_BIN_EXE_lockd");
const MIB: u64 = 1 << 20;
/// The offset of the issue: u64::MAX rounded down to a 512-byte sector.
const WRAPS: &str = "18446744073709551104";
/// 2^63 - 512: a valid `off_t`, but an area there ends past the largest file offset.
const NEAR_MAX: &str = "9223372036854775296";

fn lockd(args: &[&str]) -> Output {
    run(LOCKD, args)
}

/// Exit status 1 (not a panic's 101), one stderr line naming `needle`, no panic text.
fn assert_refused(out: &Output, needle: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr: {err}");
    assert!(!err.contains("panicked"), "panic: {err}");
    let lines: Vec<&str> = err
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.contains("warning"))
        .collect();
    assert_eq!(lines.len(), 1, "expected one error line, got: {err:?}");
    assert!(lines[0].starts_with("lockd: error"), "{err}");
    assert!(lines[0].contains(needle), "{:?} lacks {needle:?}", lines[0]);
}

fn image(dir: &Path) -> std::path::PathBuf {
    let img = sparse_file(dir, "img", 8 * MIB);
    let p = img.display().to_string();
    run_ok(LOCKD, ["direct", "init", "-s", &format!("LS:0:{p}:0")]);
    run_ok(LOCKD, ["direct", "init", "-r", &format!("LS:R:{p}:1M")]);
    img
}

#[test]
fn init_refuses_huge_offsets() {
    let dir = scratch_dir();
    let img = image(dir.path());
    let before = std::fs::read(&img).unwrap();
    let p = img.display().to_string();
    for off in [WRAPS, NEAR_MAX] {
        for spec in [
            vec!["-s".to_string(), format!("LS:0:{p}:{off}")],
            vec!["-r".to_string(), format!("LS:R:{p}:{off}")],
        ] {
            let mut args = vec!["direct", "init"];
            args.extend(spec.iter().map(String::as_str));
            assert_refused(&lockd(&args), "largest file offset");
            let mut forced = args.clone();
            forced.push("--force");
            assert_refused(&lockd(&forced), "largest file offset");
        }
    }
    assert_eq!(std::fs::read(&img).unwrap(), before, "file changed");
}

#[test]
fn dump_refuses_huge_offsets() {
    let dir = scratch_dir();
    let img = image(dir.path());
    let p = img.display().to_string();
    assert_refused(
        &lockd(&["direct", "dump", &format!("{p}:{WRAPS}")]),
        "largest file offset",
    );
    // A valid off_t past the file: nothing to add, the plain "past the end" error.
    assert_refused(
        &lockd(&["direct", "dump", &format!("{p}:{NEAR_MAX}")]),
        "past the end",
    );
    // A huge size is clamped to the file, not added with overflow.
    let out = run_ok(
        LOCKD,
        ["direct", "dump", &format!("{p}:0:18446744073709551615")],
    );
    assert!(
        out.contains("lockspace LS") && out.contains("resource LS:R"),
        "{out}"
    );
    let out = run_ok(
        LOCKD,
        ["direct", "dump", &format!("{p}:1M:18446744073709551615")],
    );
    assert!(out.contains("resource LS:R"), "{out}");
}

#[test]
fn read_leader_refuses_huge_offsets_and_host_ids() {
    let dir = scratch_dir();
    let img = image(dir.path());
    let p = img.display().to_string();
    for off in [WRAPS, NEAR_MAX] {
        assert_refused(
            &lockd(&["direct", "read-leader", "-s", &format!("LS:1:{p}:{off}")]),
            "largest file offset",
        );
        assert_refused(
            &lockd(&["direct", "read-leader", "-r", &format!("LS:R:{p}:{off}")]),
            "largest file offset",
        );
    }
    assert_refused(
        &lockd(&[
            "direct",
            "read-leader",
            "-s",
            &format!("LS:18446744073709551615:{p}:0"),
        ]),
        "above max_hosts",
    );
}
