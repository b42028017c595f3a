//! `lockd acquire --lvb` and `lockd lvb get|set`, against lockd's daemon and against a
//! real sanlock 3.8 daemon: a command holding the lease sets the LVB, the value is on
//! disk after release, and the next holder reads it back; without a holder the CLI fails
//! with sanlock's code.

use std::path::{Path, PathBuf};
use std::time::Duration;

use lockd_system_tests::{lockd_cli, run_ok, scratch_dir, sparse_file, LockdProc, SanlockDaemon};

const LOCKD: &str = env!("CARGO_BIN_EXE_lockd");

fn lockd(run_dir: &Path, args: &[&str]) -> (bool, String) {
    lockd_cli(LOCKD, run_dir, args)
}

fn lockd_until_not_eagain(run_dir: &Path, args: &[&str]) -> (bool, String) {
    for _ in 0..50 {
        let (ok, out) = lockd(run_dir, args);
        if ok || !out.contains("(-11)") {
            return (ok, out);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    lockd(run_dir, args)
}

fn exercise(run_dir: &Path, img: &Path, kind: &str) {
    let p = img.display().to_string();
    let res = format!("lv:r1:{p}:1M");
    let (ok, out) = lockd(
        run_dir,
        &["add-lockspace", "-s", &format!("lv:1:{p}:0"), "-o", "1"],
    );
    assert!(ok, "{kind} add-lockspace: {out}");
    let lockd_bin = LOCKD;
    // The command holding the lease sets and reads the LVB through the daemon.
    let script = format!(
        "{lockd_bin} lvb set -r lv:r1 --value hello-{kind} && {lockd_bin} lvb get -r lv:r1"
    );
    let (ok, out) = lockd(
        run_dir,
        &["acquire", "--lvb", "-r", &res, "--", "sh", "-c", &script],
    );
    assert!(ok, "{kind} acquire --lvb -- set/get: {out}");
    assert!(out.contains(&format!("hello-{kind}")), "{kind}: {out}");
    // Released on exit: the next holder reads the value from disk. (The release runs
    // after the holder's connection closes; until it is done sanlock answers -EAGAIN —
    // lockd waits for it — so try again as a caller would.)
    let (ok, out) = lockd_until_not_eagain(
        run_dir,
        &[
            "acquire", "--lvb", "-r", &res, "--", lockd_bin, "lvb", "get", "-r", &res, "--json",
        ],
    );
    assert!(ok, "{kind} second holder: {out}");
    let json_start = out.find('{').expect("json output");
    // The JSON object of `lvb get`, followed by what `acquire` prints when it ends.
    let v: serde_json::Value = serde_json::Deserializer::from_str(&out[json_start..])
        .into_iter()
        .next()
        .expect("a JSON value")
        .expect("lvb get --json");
    assert_eq!(v["text"], format!("hello-{kind}"), "{kind}: {out}");
    // Nobody holds it once the release is done: both daemons answer -ENOENT.
    let mut attempt = lockd(run_dir, &["lvb", "get", "-r", "lv:r1"]);
    for _ in 0..50 {
        if !attempt.0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
        attempt = lockd(run_dir, &["lvb", "get", "-r", "lv:r1"]);
    }
    let (ok, out) = attempt;
    assert!(!ok, "{kind}: lvb get without a holder succeeded: {out}");
    assert!(out.contains("(-2)"), "{kind}: {out}");
    let (ok, out) = lockd(run_dir, &["lvb", "set", "-r", "lv:r1", "--hex", "0g"]);
    assert!(!ok && out.contains("not hex"), "{kind}: {out}");
    let (ok, out) = lockd(run_dir, &["rem-lockspace", "-s", &format!("lv:1:{p}:0")]);
    assert!(ok, "{kind} rem-lockspace: {out}");
}

fn formatted_image(dir: &Path, name: &str) -> PathBuf {
    let img = sparse_file(dir, name, 3 << 20);
    let p = img.display().to_string();
    run_ok(
        LOCKD,
        ["direct", "init", "-s", &format!("lv:0:{p}:0"), "-o", "1"],
    );
    run_ok(LOCKD, ["direct", "init", "-r", &format!("lv:r1:{p}:1M")]);
    img
}

#[test]
fn lvb_cli_against_lockd_and_sanlock() {
    let dir = scratch_dir();
    let lk = LockdProc::start(LOCKD, dir.path(), "lvb-cli");
    exercise(
        &lk.run_dir,
        &formatted_image(dir.path(), "lockd.img"),
        "lockd",
    );
    drop(lk);
    let sl = SanlockDaemon::start("lvb-cli-sanlock");
    exercise(
        sl.run_dir.path(),
        &formatted_image(dir.path(), "sanlock.img"),
        "sanlock",
    );
}
