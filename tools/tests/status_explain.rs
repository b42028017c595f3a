//! `lockd status` and `lockd explain` against real lockd daemons (LockdProc: `lockd
//! daemon -D -w 0`, watchdog fire timeout 60, kill grace 40): explain's offsets equal
//! lease-core's timeout formulas for io_timeout 1 and 2, and in a mixed lockspace the
//! other lockd host's timeline uses *its* io_timeout; status --json gives per-lockspace
//! deadlines consistent with those offsets, the table has no colour codes off a terminal,
//! and `--format sanlock` keeps sanlock's lines.

use lease_core::timeouts;
use lockd_system_tests::{lockd_cli, run_ok, scratch_dir, sparse_file, LockdProc};
use serde_json::Value;

const LOCKD: &str = env!("CARGO_BIN_EXE_lockd");
const W: u64 = 60;
const GRACE: u64 = 40;

fn json(run_dir: &std::path::Path, args: &[&str]) -> Value {
    let (ok, out) = lockd_cli(LOCKD, run_dir, args);
    assert!(ok, "lockd {args:?}: {out}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("lockd {args:?} JSON: {e}\n{out}"))
}

/// Checks one host's timeline object against lease-core for io_timeout `d`.
fn check_timeline(v: &Value, d: u64, watchdog: bool, what: &str) {
    let off = |k: &str| v[k]["after_last_renewal_s"].as_u64();
    let fail = timeouts::id_renewal_fail_seconds(d);
    assert_eq!(
        off("renew_every"),
        Some(timeouts::id_renewal_seconds(d)),
        "{what}"
    );
    assert_eq!(
        off("warn_at"),
        Some(timeouts::id_renewal_warn_seconds(d)),
        "{what}"
    );
    assert_eq!(off("renewal_fails_at"), Some(fail), "{what}");
    assert_eq!(off("kill_escalation_at"), Some(fail + GRACE), "{what}");
    assert_eq!(
        off("watchdog_fires_at"),
        watchdog.then(|| fail + W - timeouts::wdmd_test_interval(W)),
        "{what}"
    );
    assert_eq!(
        off("others_may_take_at"),
        Some(timeouts::host_dead_seconds(d, W)),
        "{what}"
    );
    // "from now" is the offset less the time since the last renewal (at most ~2D + 1).
    let in_s = v["renewal_fails_at"]["in_s"].as_i64().expect("in_s");
    let fail_i = i64::try_from(fail).unwrap();
    let renew_i = i64::try_from(timeouts::id_renewal_seconds(d)).unwrap();
    assert!(
        in_s <= fail_i && in_s >= fail_i - renew_i - 2,
        "{what}: renewal fails in {in_s}s, offset {fail}s"
    );
    assert!(
        v["renewal_fails_at"]["at"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z')),
        "{what}: wall-clock time"
    );
}

#[test]
fn explain_matches_lease_core_for_io_timeout_1_and_2() {
    let dir = scratch_dir();
    let img = sparse_file(dir.path(), "ls.img", 8 << 20);
    let p = img.display().to_string();
    for (ls, off) in [("one", "0"), ("two", "4M")] {
        run_ok(
            LOCKD,
            [
                "direct",
                "init",
                "-s",
                &format!("{ls}:0:{p}:{off}"),
                "-o",
                "1",
            ],
        );
    }
    let a = LockdProc::start(LOCKD, dir.path(), "hostA");
    for (ls, off, io) in [("one", "0", "1"), ("two", "4M", "2")] {
        let (ok, out) = lockd_cli(
            LOCKD,
            &a.run_dir,
            &[
                "add-lockspace",
                "-s",
                &format!("{ls}:1:{p}:{off}"),
                "-o",
                io,
            ],
        );
        assert!(ok, "add-lockspace {ls}: {out}");
    }
    for (ls, d) in [("one", 1u64), ("two", 2u64)] {
        let v = json(&a.run_dir, &["explain", "-s", ls, "--json"]);
        println!("explain {ls}: {}", v[0]["this_host"]);
        assert_eq!(v.as_array().map(Vec::len), Some(1), "{v}");
        assert_eq!(v[0]["lockspace"], ls);
        assert_eq!(v[0]["io_timeout"], d);
        assert_eq!(v[0]["watchdog_fire_timeout"], W);
        assert_eq!(v[0]["use_watchdog"], false);
        check_timeline(&v[0]["this_host"], d, false, &format!("{ls} (D={d})"));
        assert_eq!(v[0]["other_hosts"].as_array().map(Vec::len), Some(0));
    }
    // The human form has every event row.
    let (ok, text) = lockd_cli(LOCKD, &a.run_dir, &["explain", "-s", "two"]);
    assert!(ok, "{text}");
    println!("{text}");
    for row in [
        "renew every",
        "warn at",
        "renewal fails at",
        "kill escalation at",
        "watchdog fires at",
        "others may take the leases at",
        "T+16s",
        "T+76s",
    ] {
        assert!(text.contains(row), "explain lacks {row:?}:\n{text}");
    }
    let (ok, text) = lockd_cli(LOCKD, &a.run_dir, &["explain", "-s", "nosuch"]);
    assert!(!ok && text.contains("not joined"), "{text}");

    // status --json: deadlines per lockspace agree with the same formulas.
    let st = json(&a.run_dir, &["status", "--json"]);
    for (ls, d) in [("one", 1u64), ("two", 2u64)] {
        let l = st["lockspaces"]
            .as_array()
            .and_then(|a| a.iter().find(|l| l["name"] == ls))
            .unwrap_or_else(|| panic!("{ls} not in status: {st}"));
        let age = l["last_renewal_age_s"].as_i64().expect("age");
        let fails = l["renewal_fails_in_s"]
            .as_i64()
            .expect("renewal_fails_in_s");
        assert_eq!(
            fails + age,
            i64::try_from(timeouts::id_renewal_fail_seconds(d)).unwrap(),
            "{ls}: {l}"
        );
        assert!(l["watchdog_fires_in_s"].is_null(), "watchdog off: {l}");
        assert_eq!(
            l["others_may_take_in_s"].as_i64().unwrap() + age,
            i64::try_from(timeouts::host_dead_seconds(d, W)).unwrap()
        );
    }
    // The table: headers, no escape codes (stdout is a pipe here).
    let (ok, table) = lockd_cli(LOCKD, &a.run_dir, &["status"]);
    assert!(ok, "{table}");
    println!("{table}");
    for h in [
        "LOCKSPACES (2)",
        "FAILS_IN",
        "WATCHDOG_IN",
        "LEASES (0)",
        "CLIENTS",
    ] {
        assert!(table.contains(h), "status lacks {h}:\n{table}");
    }
    assert!(
        !table.contains('\x1b'),
        "colour codes off a terminal:\n{table}"
    );
    let (ok, lines) = lockd_cli(LOCKD, &a.run_dir, &["status", "--format", "sanlock"]);
    assert!(ok && lines.contains(&format!("s one:1:{p}:0")), "{lines}");
}

#[test]
fn explain_in_a_mixed_lockspace_uses_each_hosts_io_timeout() {
    let dir = scratch_dir();
    let img = sparse_file(dir.path(), "mixed.img", 4 << 20);
    let p = img.display().to_string();
    run_ok(
        LOCKD,
        ["direct", "init", "-s", &format!("mx:0:{p}:0"), "-o", "1"],
    );
    let a = LockdProc::start(LOCKD, dir.path(), "hostA");
    let b = LockdProc::start(LOCKD, dir.path(), "hostB");
    let (ok, out) = lockd_cli(
        LOCKD,
        &a.run_dir,
        &["add-lockspace", "-s", &format!("mx:1:{p}:0"), "-o", "1"],
    );
    assert!(ok, "{out}");
    let (ok, out) = lockd_cli(
        LOCKD,
        &b.run_dir,
        &["add-lockspace", "-s", &format!("mx:2:{p}:0"), "-o", "2"],
    );
    assert!(ok, "{out}");
    // Wait until A has seen B renew (LIVE, with B's io_timeout from its delta lease).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let v = loop {
        let v = json(&a.run_dir, &["explain", "-s", "mx", "--json"]);
        let live = v[0]["other_hosts"]
            .as_array()
            .is_some_and(|o| o.iter().any(|h| h["host_id"] == 2 && h["state"] == "LIVE"));
        if live {
            break v;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "host 2 never LIVE: {v}"
        );
        std::thread::sleep(std::time::Duration::from_millis(500));
    };
    println!("mixed explain from host 1: {v}");
    check_timeline(&v[0]["this_host"], 1, false, "host 1 (D=1)");
    let other = &v[0]["other_hosts"][0];
    assert_eq!(other["host_id"], 2);
    assert_eq!(other["io_timeout"], 2);
    check_timeline(other, 2, true, "host 2 seen from host 1 (D=2)");
    // And from B: its own D=2, host 1 with D=1.
    let v = json(&b.run_dir, &["explain", "-s", "mx", "--json"]);
    check_timeline(&v[0]["this_host"], 2, false, "host 2 (D=2)");
    let one = v[0]["other_hosts"]
        .as_array()
        .and_then(|o| o.iter().find(|h| h["host_id"] == 1))
        .unwrap_or_else(|| panic!("host 1 not seen from host 2: {v}"));
    assert_eq!(one["io_timeout"], 1);
    assert_eq!(
        one["others_may_take_at"]["after_last_renewal_s"],
        timeouts::host_dead_seconds(1, W)
    );
    let (ok, text) = lockd_cli(LOCKD, &a.run_dir, &["explain"]);
    assert!(
        ok && text.contains("host_id 2 (LIVE, hostB, io_timeout 2s)"),
        "{text}"
    );
    println!("{text}");
}

/// Issue 21 item 7: a lockspace that failed (our delta lease found overwritten) showed
/// our own host LIVE in `lockd status`. It shows FAIL now, in the table and in --json,
/// beside the lockspace's FAILED. The lockspace stays listed while its holder, which
/// ignores SIGTERM, waits for the kill grace.
#[test]
fn our_host_is_not_live_in_a_failed_lockspace() {
    let dir = scratch_dir();
    let img = sparse_file(dir.path(), "fail.img", 4 << 20);
    let p = img.display().to_string();
    run_ok(
        LOCKD,
        ["direct", "init", "-s", &format!("fl:0:{p}:0"), "-o", "1"],
    );
    run_ok(LOCKD, ["direct", "init", "-r", &format!("fl:r1:{p}:1M")]);
    let a = LockdProc::start(LOCKD, dir.path(), "hostA");
    let (ok, out) = lockd_cli(
        LOCKD,
        &a.run_dir,
        &["add-lockspace", "-s", &format!("fl:1:{p}:0"), "-o", "1"],
    );
    assert!(ok, "{out}");
    let mut holder = std::process::Command::new(LOCKD)
        .args(["acquire", "-r", &format!("fl:r1:{p}:1M"), "--"])
        .args(["sh", "-c", "trap '' TERM; exec sleep 120"])
        .env("LOCKD_RUN_DIR", &a.run_dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let v = json(&a.run_dir, &["status", "--json"]);
        if v["leases"].as_array().is_some_and(|l| !l.is_empty()) {
            let host = &v["lockspaces"][0]["hosts"][0];
            assert_eq!(host["state"], "LIVE", "a healthy lockspace: {v}");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "never held: {v}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    // Another host's record over ours: the next renewal finds its lease taken.
    let mut sector = vec![0u8; 512];
    sector[..4].copy_from_slice(&0x1212_1212u32.to_le_bytes());
    lockd_system_tests::poke(&img, 0, &sector);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    let v = loop {
        let v = json(&a.run_dir, &["status", "--json"]);
        if v["lockspaces"][0]["failed"] == true {
            break v;
        }
        assert!(std::time::Instant::now() < deadline, "never failed: {v}");
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    let ours: Vec<&Value> = v["lockspaces"][0]["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|h| h["ours"] == true)
        .collect();
    assert_eq!(ours.len(), 1, "{v}");
    assert_eq!(
        ours[0]["state"], "FAIL",
        "our host in a failed lockspace: {v}"
    );
    let (ok, text) = lockd_cli(LOCKD, &a.run_dir, &["status"]);
    assert!(ok, "{text}");
    assert!(
        text.contains("FAILED") && text.contains("1*:FAIL") && !text.contains("1*:LIVE"),
        "{text}"
    );
    let _ = holder.kill();
    let _ = holder.wait();
}
