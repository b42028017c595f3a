//! `lockd log-dump` and `lockd renewal -s LS` (issue 21 item 9: the .deb removes the
//! `sanlock` package and with it `sanlock client log_dump` / `renewal`). Both commands
//! run against a real lockd daemon and a real sanlock 3.8 daemon, and their output is
//! compared with what `sanlock client` prints from the same daemon.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use lockd_system_tests::{lockd_cli, scratch_dir, sparse_file, LockdProc, SanlockDaemon};

const LOCKD: &str = env!("CARGO_BIN_EXE_lockd");

/// `sanlock client ARGS` against the daemon in `run_dir`: (ok, stdout).
fn sanlock_client(run_dir: &Path, args: &[&str]) -> (bool, String) {
    let out = Command::new("sanlock")
        .arg("client")
        .args(args)
        .env("SANLOCK_RUN_DIR", run_dir)
        .env("SANLOCK_PRIVILEGED", "0")
        .output()
        .expect("run sanlock client");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// `lockd ARGS` against the daemon in `run_dir`: (ok, stdout, stderr).
fn lockd(run_dir: &Path, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(LOCKD)
        .args(args)
        .env("LOCKD_RUN_DIR", run_dir)
        .output()
        .expect("run lockd");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The keys of one renewal line, in order, each with a number.
fn renewal_keys(line: &str) -> Vec<&str> {
    line.split(' ')
        .map(|kv| {
            let (k, v) = kv
                .split_once('=')
                .unwrap_or_else(|| panic!("not key=value: {kv:?} in {line:?}"));
            assert!(v.parse::<u64>().is_ok(), "not a number: {kv:?} in {line:?}");
            k
        })
        .collect()
}

const KEYS: [&str; 5] = [
    "timestamp",
    "read_ms",
    "write_ms",
    "next_timeouts",
    "next_errors",
];

#[test]
fn log_dump_and_renewal_as_sanlock_prints_them() {
    let tmp = scratch_dir();
    let dir = tmp.path();
    let sanlock = SanlockDaemon::start("hostS");
    let lockd_daemon = LockdProc::start(LOCKD, dir, "hostL");
    let daemons = [
        ("sanlock", sanlock.run_dir.path().to_path_buf()),
        ("lockd", lockd_daemon.run_dir.clone()),
    ];
    for (who, run_dir) in &daemons {
        let img = sparse_file(dir, &format!("{who}.img"), 4 << 20);
        let p = img.display().to_string();
        let (ok, out) = lockd_cli(
            LOCKD,
            dir,
            &[
                "direct",
                "init",
                "-s",
                &format!("rn{who}:0:{p}:0"),
                "-o",
                "1",
            ],
        );
        assert!(ok, "{out}");
        let (ok, out) = lockd_cli(
            LOCKD,
            run_dir,
            &[
                "add-lockspace",
                "-s",
                &format!("rn{who}:1:{p}:0"),
                "-o",
                "1",
            ],
        );
        assert!(ok, "{who}: {out}");
    }
    // io_timeout 1: a renewal every 2 s.
    std::thread::sleep(Duration::from_secs(7));

    for (who, run_dir) in &daemons {
        let ls = format!("rn{who}");
        // renewal: lockd prints exactly the lines sanlock's client prints.
        let (ok, ours, err) = lockd(run_dir, &["renewal", "-s", &ls]);
        assert!(ok, "{who}: lockd renewal: {err}");
        let (ok, theirs) = sanlock_client(run_dir, &["renewal", "-s", &ls]);
        assert!(ok, "{who}: sanlock client renewal: {theirs}");
        println!("{who}: lockd renewal:\n{ours}sanlock client renewal:\n{theirs}");
        let ours: Vec<&str> = ours.lines().collect();
        let theirs: Vec<&str> = theirs
            .lines()
            .filter(|l| l.starts_with("timestamp="))
            .collect();
        assert!(ours.len() >= 2, "{who}: {ours:?}");
        for line in ours.iter().chain(&theirs) {
            assert_eq!(renewal_keys(line), KEYS, "{who}: {line:?}");
        }
        // The same history: at most one renewal apart between the two reads.
        let common = ours.iter().filter(|l| theirs.contains(l)).count();
        assert!(
            common + 1 >= ours.len().min(theirs.len()),
            "{who}: {ours:?} vs {theirs:?}"
        );
        let ts: Vec<u64> = ours
            .iter()
            .map(|l| l[10..l.find(' ').unwrap()].parse().unwrap())
            .collect();
        assert!(ts.windows(2).all(|w| w[0] < w[1]), "{who}: {ts:?}");
        // --json: the same fields, as numbers.
        let (ok, json, err) = lockd(run_dir, &["renewal", "-s", &ls, "--json"]);
        assert!(ok, "{err}");
        let v: serde_json::Value = serde_json::from_str(&json).expect("renewal JSON");
        let rows = v.as_array().expect("an array");
        assert!(rows.len() >= 2, "{json}");
        for k in KEYS {
            assert!(rows[0][k].is_u64(), "{who}: {k} in {json}");
        }

        // log-dump: the daemon's recent log, which names the lockspace it joined; the
        // same text sanlock's client prints (both end with the newline it adds).
        let (ok, ours, err) = lockd(run_dir, &["log-dump"]);
        assert!(ok, "{who}: lockd log-dump: {err}");
        // (sanlock's client exits with the byte count as its status: not checked.)
        let (_, theirs) = sanlock_client(run_dir, &["log_dump"]);
        assert!(
            !theirs.trim().is_empty(),
            "{who}: sanlock client log_dump printed nothing"
        );
        assert!(
            ours.contains(&ls),
            "{who}: the log does not name {ls}:\n{ours}"
        );
        assert!(ours.ends_with('\n') && theirs.ends_with('\n'));
        // The log only grows between the two reads (sanlock's ring keeps 1 MiB): what
        // lockd printed, but for its last line, starts what sanlock's client printed.
        let head = &ours[..ours.trim_end().rfind('\n').unwrap_or(0)];
        assert!(
            theirs.starts_with(head),
            "{who}: log-dump differs from sanlock client log_dump"
        );
        println!(
            "{who}: log-dump {} bytes, sanlock client {} bytes",
            ours.len(),
            theirs.len()
        );
    }

    // A lockspace the daemon has not joined: an error, not an empty history.
    let (ok, out, err) = lockd(&daemons[1].1, &["renewal", "-s", "nosuch"]);
    assert!(!ok && out.is_empty(), "{out}{err}");
    assert!(err.starts_with("lockd: error: "), "{err}");
}
