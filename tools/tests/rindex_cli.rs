//! `lockd rindex format|create|lookup|update|delete|rebuild` through a daemon — lockd's
//! and a real sanlock 3.8 daemon's — with the same outputs and codes from both.

use std::path::Path;

use lockd_system_tests::{lockd_cli, run_ok, scratch_dir, sparse_file, LockdProc, SanlockDaemon};

const LOCKD: &str = env!("CARGO_BIN_EXE_lockd");
const MIB: u64 = 1 << 20;

fn lockd(run_dir: &Path, args: &[&str]) -> (bool, String) {
    lockd_cli(LOCKD, run_dir, args)
}

fn json(run_dir: &Path, args: &[&str]) -> serde_json::Value {
    let mut a = args.to_vec();
    a.push("--json");
    let (_, text) = lockd(run_dir, &a);
    let start = text
        .find('{')
        .unwrap_or_else(|| panic!("no JSON in {text}"));
    serde_json::Deserializer::from_str(&text[start..])
        .into_iter()
        .next()
        .expect("a JSON value")
        .expect("valid JSON")
}

/// Runs one sequence and returns what each step answered: (result, name, offset).
fn sequence(run_dir: &Path, img: &Path) -> Vec<(String, i64, String, u64)> {
    let p = img.display().to_string();
    let (ok, out) = lockd(
        run_dir,
        &["add-lockspace", "-s", &format!("rc:1:{p}:0"), "-o", "1"],
    );
    assert!(ok, "add-lockspace: {out}");
    let x = format!("rc:{p}:1M");
    let wrong = format!("zz:{p}:1M");
    let steps: Vec<(&str, Vec<&str>)> = vec![
        (
            "format",
            vec!["rindex", "format", "-x", &x, "--max-resources", "4"],
        ),
        ("create a", vec!["rindex", "create", "-x", &x, "-e", "a"]),
        ("create b", vec!["rindex", "create", "-x", &x, "-e", "b"]),
        ("lookup b", vec!["rindex", "lookup", "-x", &x, "-e", "b"]),
        (
            "lookup at 3M",
            vec!["rindex", "lookup", "-x", &x, "-e", ":3M"],
        ),
        ("lookup free", vec!["rindex", "lookup", "-x", &x]),
        (
            "update add m",
            vec!["rindex", "update", "-x", &x, "-e", "m:6M"],
        ),
        ("delete a", vec!["rindex", "delete", "-x", &x, "-e", "a"]),
        ("lookup a", vec!["rindex", "lookup", "-x", &x, "-e", "a"]),
        (
            "update rem m",
            vec!["rindex", "update", "-x", &x, "-e", ":6M", "-z", "1"],
        ),
        ("rebuild", vec!["rindex", "rebuild", "-x", &x]),
        (
            "lookup b again",
            vec!["rindex", "lookup", "-x", &x, "-e", "b"],
        ),
        (
            "lookup wrong lockspace",
            vec!["rindex", "lookup", "-x", &wrong, "-e", "b"],
        ),
    ];
    let mut out = Vec::new();
    for (what, args) in steps {
        let v = json(run_dir, &args);
        out.push((
            what.to_string(),
            v["result"].as_i64().unwrap_or(i64::MIN),
            v["name"].as_str().unwrap_or("").to_string(),
            v["offset"].as_u64().unwrap_or(0),
        ));
    }
    // Text output and a failure's one-line error.
    let (ok, text) = lockd(run_dir, &["rindex", "lookup", "-x", &x, "-e", "b"]);
    assert!(
        ok && text.contains(&format!("name b offset {}", 4 * MIB)),
        "{text}"
    );
    let (ok, text) = lockd(run_dir, &["rindex", "lookup", "-x", &x, "-e", "nosuch"]);
    assert!(
        !ok && text.contains("lookup:") && text.contains("(-2)"),
        "{text}"
    );
    let (ok, out_rem) = lockd(run_dir, &["rem-lockspace", "-s", &format!("rc:1:{p}:0")]);
    assert!(ok, "rem-lockspace: {out_rem}");
    out
}

fn image(dir: &Path, name: &str) -> std::path::PathBuf {
    let img = sparse_file(dir, name, 8 * MIB);
    let p = img.display().to_string();
    run_ok(
        LOCKD,
        ["direct", "init", "-s", &format!("rc:0:{p}:0"), "-o", "1"],
    );
    img
}

#[test]
fn rindex_cli_gives_the_same_answers_from_lockd_and_sanlock() {
    let dir = scratch_dir();
    let lk = LockdProc::start(LOCKD, dir.path(), "rindex-cli");
    let from_lockd = sequence(&lk.run_dir, &image(dir.path(), "lockd.img"));
    drop(lk);
    let sl = SanlockDaemon::start("rindex-cli-sanlock");
    let from_sanlock = sequence(sl.run_dir.path(), &image(dir.path(), "sanlock.img"));
    for (a, b) in from_sanlock.iter().zip(&from_lockd) {
        println!(
            "{:<24} sanlock {:?}  lockd {:?}",
            a.0,
            (a.1, &a.2, a.3),
            (b.1, &b.2, b.3)
        );
    }
    assert_eq!(from_lockd, from_sanlock);
    // Spot-check the answers themselves.
    let get = |w: &str| from_lockd.iter().find(|r| r.0 == w).cloned().unwrap();
    assert_eq!(get("create a").3, 3 * MIB);
    assert_eq!(get("lookup b").3, 4 * MIB);
    assert_eq!(get("lookup at 3M").2, "a");
    assert_eq!(get("lookup a").1, -2);
    assert_eq!(get("lookup b again").3, 4 * MIB);
    assert_eq!(get("lookup wrong lockspace").1, -2, "not joined");
}
