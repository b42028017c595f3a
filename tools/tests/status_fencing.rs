//! `lockd status` and `lockd explain` show storage fencing (issue 38) only for lockspaces
//! the daemon fences, read from its metrics: against a lockd daemon whose lockspace is not
//! fenced they show nothing of it (text and --json) although the daemon exports the
//! `lockd_fence_*` families (HELP and TYPE only, `promtool`-clean); against a sanlock
//! daemon, which has no metrics and ignores lockd's extension commands, they do not ask
//! (so they do not wait for the extension reply timeout) and show nothing either.
//!
//! What a fenced lockspace shows (the FENCING table, explain's block, the JSON) is
//! unit-tested from the exporter's own lines (`client::status::tests`); a fenced
//! lockspace needs a SCSI target (the VM bed's `pr-*` scenarios).

use std::process::Command;
use std::time::{Duration, Instant};

use lockd_system_tests::{lockd_cli, run_ok, scratch_dir, sparse_file, LockdProc, SanlockDaemon};
use serde_json::Value;

const LOCKD: &str = env!("CARGO_BIN_EXE_lockd");

fn json(run_dir: &std::path::Path, args: &[&str]) -> Value {
    let (ok, out) = lockd_cli(LOCKD, run_dir, args);
    assert!(ok, "lockd {args:?}: {out}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("lockd {args:?} JSON: {e}\n{out}"))
}

/// Runs status and explain (text and JSON) against the daemon in `run_dir`, with the
/// lockspace `ls` joined: none shows fencing, and each answers well inside the 10 s a
/// lockd extension command may wait for its reply.
fn no_fencing_shown(run_dir: &std::path::Path, ls: &str) {
    for args in [
        &["status"][..],
        &["status", "--json"],
        &["explain", "-s", ls],
        &["explain", "-s", ls, "--json"],
    ] {
        let start = Instant::now();
        let (ok, out) = lockd_cli(LOCKD, run_dir, args);
        let took = start.elapsed();
        assert!(ok, "lockd {args:?}: {out}");
        println!("lockd {args:?} ({took:?}):\n{out}");
        assert!(
            took < Duration::from_secs(5),
            "lockd {args:?} took {took:?} (waited for metrics?)"
        );
        for word in ["FENCING", "fencing", "warning"] {
            assert!(!out.contains(word), "lockd {args:?} shows {word:?}:\n{out}");
        }
    }
    let st = json(run_dir, &["status", "--json"]);
    let l = &st["lockspaces"][0];
    assert_eq!(l["name"], ls, "{st}");
    assert!(l.get("fencing").is_none(), "{st}");
    let ex = json(run_dir, &["explain", "-s", ls, "--json"]);
    assert!(ex[0].get("fencing").is_none(), "{ex}");
}

#[test]
fn an_unfenced_lockspace_on_lockd_shows_no_fencing() {
    let dir = scratch_dir();
    let img = sparse_file(dir.path(), "ls.img", 4 << 20);
    let p = img.display().to_string();
    run_ok(
        LOCKD,
        ["direct", "init", "-s", &format!("nf:0:{p}:0"), "-o", "1"],
    );
    let a = LockdProc::start(LOCKD, dir.path(), "hostA");
    let (ok, out) = lockd_cli(
        LOCKD,
        &a.run_dir,
        &["add-lockspace", "-s", &format!("nf:1:{p}:0"), "-o", "1"],
    );
    assert!(ok, "add-lockspace: {out}");
    // The daemon exports the fencing families, our key's and fenced_here among them,
    // with no sample for a lockspace it does not fence.
    let (ok, metrics) = lockd_cli(LOCKD, &a.run_dir, &["metrics"]);
    assert!(ok, "{metrics}");
    for family in [
        "lockd_fence_keys",
        "lockd_fence_reservation",
        "lockd_fence_unkeyed_live_hosts",
        "lockd_fence_key_info",
        "lockd_fence_fenced_here",
        "lockd_fence_preempts_total",
        "lockd_fence_peers_fenced_total",
        "lockd_fence_last_preempt_age_seconds",
    ] {
        assert!(
            metrics.contains(&format!("# TYPE {family} ")),
            "{family} not exported:\n{metrics}"
        );
    }
    assert!(
        !metrics
            .lines()
            .any(|l| l.starts_with("lockd_fence_") && !l.starts_with('#')),
        "a fence sample for an unfenced lockspace:\n{metrics}"
    );
    if Command::new("promtool").arg("--version").output().is_ok() {
        let file = dir.path().join("metrics.txt");
        std::fs::write(&file, &metrics).unwrap();
        let out = Command::new("sh")
            .arg("-c")
            .arg(format!("promtool check metrics < {}", file.display()))
            .output()
            .expect("run promtool");
        assert!(
            out.status.success() && out.stdout.is_empty() && out.stderr.is_empty(),
            "promtool check metrics: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    } else {
        println!("promtool not installed: metrics not checked with it");
    }
    no_fencing_shown(&a.run_dir, "nf");
}

#[test]
fn a_sanlock_daemon_is_not_asked_for_fencing() {
    let dir = scratch_dir();
    let img = sparse_file(dir.path(), "sl.img", 4 << 20);
    let p = img.display().to_string();
    run_ok(
        LOCKD,
        ["direct", "init", "-s", &format!("sl:0:{p}:0"), "-o", "1"],
    );
    let daemon = SanlockDaemon::start("sl-host");
    let (ok, out) = lockd_cli(
        LOCKD,
        daemon.run_dir.path(),
        &["add-lockspace", "-s", &format!("sl:1:{p}:0"), "-o", "1"],
    );
    assert!(ok, "add-lockspace: {out}\n{}", daemon.log_text());
    no_fencing_shown(daemon.run_dir.path(), "sl");
}
