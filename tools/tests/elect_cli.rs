//! `lockd elect`, `lockd leader` and client-lib's `Lease`/`LeaderElection` against one
//! real lockd daemon on a loop device: tokens, exit statuses, loss notices (lockspace
//! removed, FORCE request, daemon killed), bad input with nothing held afterwards, and
//! the fencing store rejecting a stale token.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use client_lib::lease::release_orphans;
use client_lib::{ClientLeaseError, LeaderElection, Lease, LeaseAcquireOptions, LeaseSpec, Wait};
use lockd_system_tests::{
    join_lockspace, lease_device, lockd_cli, scratch_dir, LockdProc, LoopDevice,
};

const LOCKD: &str = env!("CARGO_BIN_EXE_lockd");

/// Fields drop in order: the daemon, the loop device, then the scratch directory.
struct Setup {
    dir: PathBuf,
    dev: String,
    daemon: Option<LockdProc>,
    run_dir: PathBuf,
    _loop: LoopDevice,
    _dir: tempfile::TempDir,
}

fn lockd(run_dir: &Path, args: &[&str]) -> (bool, String) {
    lockd_cli(LOCKD, run_dir, args)
}

/// A loop device with lockspace `el` at 0 and resources `lead` at 1M and `other` at 2M
/// (3M is left unformatted), a lockd daemon (io_timeout 1) joined as host_id 1.
fn setup(host: &str) -> Setup {
    let tmp = scratch_dir();
    let dir = tmp.path().to_path_buf();
    let (lo, dev) = lease_device(LOCKD, &dir, "el", &[("lead", "1M"), ("other", "2M")]);
    let daemon = LockdProc::start(LOCKD, &dir, host);
    let run_dir = daemon.run_dir.clone();
    join_lockspace(LOCKD, &run_dir, "el", 1, &dev);
    Setup {
        _dir: tmp,
        dir,
        dev,
        daemon: Some(daemon),
        run_dir,
        _loop: lo,
    }
}

impl Setup {
    fn spec(&self, name: &str, off: &str) -> String {
        format!("el:{name}:{}:{off}", self.dev)
    }

    fn leader_json(&self, name: &str, off: &str) -> serde_json::Value {
        let (ok, out) = lockd(
            &self.run_dir,
            &["leader", "-r", &self.spec(name, off), "--json"],
        );
        assert!(ok, "leader: {out}");
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("leader json {out:?}: {e}"))
    }

    fn elect(&self, grace: &str, script: &str) -> Child {
        Command::new(LOCKD)
            .args(["elect", "-r", &self.spec("lead", "1M"), "--grace", grace])
            .args(["--", "sh", "-c", script])
            .env("LOCKD_RUN_DIR", &self.run_dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start lockd elect")
    }

    fn wait_leader_state(&self, want: &str, timeout: Duration) -> serde_json::Value {
        let deadline = Instant::now() + timeout;
        loop {
            let v = self.leader_json("lead", "1M");
            if v["state"] == want {
                return v;
            }
            assert!(Instant::now() < deadline, "leader never became {want}: {v}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// Starts `lockd-fenced-store serve` in `dir`; returns it, its socket and its log.
fn start_store(store_bin: &Path, dir: &Path) -> (Child, PathBuf, PathBuf) {
    let sock = dir.join("store.sock");
    let log = dir.join("store.log");
    let server = Command::new(store_bin)
        .args(["serve", "--socket"])
        .arg(&sock)
        .arg("--log")
        .arg(&log)
        .spawn()
        .expect("start lockd-fenced-store");
    let deadline = Instant::now() + Duration::from_secs(5);
    while !sock.exists() {
        assert!(Instant::now() < deadline, "store socket never appeared");
        std::thread::sleep(Duration::from_millis(20));
    }
    (server, sock, log)
}

fn finish(child: Child, timeout: Duration) -> (i32, String) {
    let deadline = Instant::now() + timeout;
    let mut child = child;
    loop {
        if child.try_wait().expect("wait").is_some() {
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "process did not end within {timeout:?}: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().expect("output");
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    (out.status.code().unwrap_or(-1), text)
}

#[test]
fn elect_runs_command_with_token_and_returns_its_status() {
    let s = setup("elhost");
    let v = s.leader_json("lead", "1M");
    assert_eq!(v["state"], "none", "{v}");
    assert!(v["host_id"].is_null());
    let marker = s.dir.join("token");
    let script = format!(
        "echo $LOCKD_FENCING_TOKEN $LOCKD_LEASE > {}; sleep 2; exit 7",
        marker.display()
    );
    let child = s.elect("1", &script);
    let held = s.wait_leader_state("live", Duration::from_secs(10));
    assert_eq!(held["host_id"], 1, "{held}");
    assert_eq!(held["host_name"], "elhost", "{held}");
    let (code, out) = finish(child, Duration::from_secs(20));
    assert_eq!(code, 7, "elect must exit with the command's status: {out}");
    let written = std::fs::read_to_string(&marker).expect("command wrote its token");
    let mut f = written.split_whitespace();
    let token: u64 = f.next().unwrap().parse().unwrap();
    assert_eq!(f.next(), Some("el:lead"));
    assert_eq!(held["token"], token, "leader shows the command's token");
    // Released when the command ended; the next leader gets a greater token.
    s.wait_leader_state("none", Duration::from_secs(5));
    let child = s.elect(
        "1",
        &format!("echo $LOCKD_FENCING_TOKEN > {}", marker.display()),
    );
    let (code, out) = finish(child, Duration::from_secs(20));
    assert_eq!(code, 0, "{out}");
    let token2: u64 = std::fs::read_to_string(&marker)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(token2 > token, "tokens must grow: {token} then {token2}");
}

#[test]
fn elect_stops_command_when_lockspace_removed() {
    let s = setup("elrem");
    let term_marker = s.dir.join("got-term");
    let script = format!(
        "trap 'echo term > {}; exit 0' TERM; while :; do sleep 0.1; done",
        term_marker.display()
    );
    let child = s.elect("2", &script);
    s.wait_leader_state("live", Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(500));
    let (ok, out) = lockd(
        &s.run_dir,
        &["rem-lockspace", "-s", &format!("el:1:{}:0", s.dev)],
    );
    assert!(ok, "rem-lockspace: {out}");
    let (code, out) = finish(child, Duration::from_secs(15));
    assert_eq!(code, 75, "lost leadership exits 75: {out}");
    assert!(
        out.contains("leadership lost (lockspace_removed"),
        "the loss notice names its reason: {out}"
    );
    assert!(term_marker.exists(), "the command got SIGTERM: {out}");
}

/// The command learns the reason and the time left from LOCKD_LOSS_FILE, written before
/// its SIGTERM; `--json` prints the events and keeps the command's stdout off stdout.
#[test]
fn elect_tells_command_the_loss_reason_and_prints_json_events() {
    let s = setup("eljson");
    let loss_file = s.dir.join("loss.env");
    let seen = s.dir.join("seen-at-term");
    // A stale file from an earlier run must not be read as this run's reason.
    std::fs::write(&loss_file, "reason=stale\n").unwrap();
    let script = format!(
        "echo command-output; trap 'cat \"$LOCKD_LOSS_FILE\" > {}; exit 0' TERM; \
         while :; do sleep 0.1; done",
        seen.display()
    );
    let child = Command::new(LOCKD)
        .args([
            "elect",
            "-r",
            &s.spec("lead", "1M"),
            "--grace",
            "2",
            "--json",
        ])
        .arg("--loss-file")
        .arg(&loss_file)
        .args(["--", "sh", "-c", &script])
        .env("LOCKD_RUN_DIR", &s.run_dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start lockd elect");
    let v = s.wait_leader_state("live", Duration::from_secs(10));
    assert!(!loss_file.exists(), "the stale loss file was not removed");
    std::thread::sleep(Duration::from_millis(500));
    let (ok, out) = lockd(
        &s.run_dir,
        &["rem-lockspace", "-s", &format!("el:1:{}:0", s.dev)],
    );
    assert!(ok, "rem-lockspace: {out}");
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut child = child;
    while child.try_wait().expect("wait").is_none() {
        assert!(Instant::now() < deadline, "elect did not end");
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().expect("output");
    assert_eq!(out.status.code(), Some(75));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("command-output"),
        "command stdout goes to stderr: {stderr}"
    );
    let events: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON {l:?}: {e}")))
        .collect();
    let names: Vec<&str> = events
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["campaigning", "elected", "lost", "exited"],
        "{stdout}"
    );
    let token = events[1]["token"].as_u64().unwrap();
    assert_eq!(v["token"].as_u64(), Some(token));
    assert_eq!(events[2]["reason"], "lockspace_removed");
    assert_eq!(events[2]["token"].as_u64(), Some(token));
    assert_eq!(events[2]["kill_in_s"].as_f64(), Some(0.0));
    assert_eq!(events[3]["after_loss"], true);
    assert_eq!(events[3]["status"], 0);
    let told = std::fs::read_to_string(&seen).expect("the command read the loss file at SIGTERM");
    assert!(told.contains("reason=lockspace_removed\n"), "{told}");
    assert!(told.contains("kill_in_s=0.000\n"), "{told}");
    assert!(told.contains("watchdog_in_s=\n"), "{told}");
    assert!(told.contains(&format!("token={token}\n")), "{told}");
    assert!(told.contains("lease=el:lead\n"), "{told}");
}

/// A second `lockd elect` waiting for the lease shows in `lockd leader` and `lockd
/// status` as a candidate, not only the holder.
#[test]
fn leader_and_status_show_waiting_candidates() {
    let s = setup("elcand");
    let leader = s.elect("1", "trap 'exit 0' TERM; while :; do sleep 0.1; done");
    s.wait_leader_state("live", Duration::from_secs(10));
    let waiter = s.elect("1", "exit 0");
    let want = format!("elect-{}", waiter.id());
    let deadline = Instant::now() + Duration::from_secs(10);
    let v = loop {
        let v = s.leader_json("lead", "1M");
        let names: Vec<&str> = v["waiting_here"]
            .as_array()
            .map(|a| a.iter().filter_map(|c| c["name"].as_str()).collect())
            .unwrap_or_default();
        if names.contains(&want.as_str()) {
            break v;
        }
        assert!(Instant::now() < deadline, "{want} never shown waiting: {v}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(v["host_id"], 1, "{v}");
    let (ok, text) = lockd(&s.run_dir, &["leader", "-r", &s.spec("lead", "1M")]);
    assert!(ok, "{text}");
    assert!(
        text.contains(&format!("candidate on this host: pid {}", waiter.id())),
        "{text}"
    );
    let (ok, st) = lockd(&s.run_dir, &["status"]);
    assert!(ok, "{st}");
    assert!(
        st.lines()
            .any(|l| l.contains(&want) && l.contains("el:lead (")),
        "status shows the candidate: {st}"
    );
    for mut c in [leader, waiter] {
        let _ = c.kill();
        let _ = c.wait();
    }
}

#[test]
fn elect_stops_command_when_daemon_dies() {
    let mut s = setup("eldie");
    let script = "trap 'exit 0' TERM; while :; do sleep 0.1; done";
    let child = s.elect("1", script);
    s.wait_leader_state("live", Duration::from_secs(10));
    let cmd_pid = child.id();
    // Kill the daemon without warning.
    let daemon = s.daemon.take().unwrap();
    let pid_text = std::fs::read_to_string(s.run_dir.join("lockd.pid")).unwrap();
    let pid: i32 = pid_text.trim().parse().unwrap();
    let t0 = Instant::now();
    assert!(Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap()
        .success());
    let (code, out) = finish(child, Duration::from_secs(10));
    assert_eq!(code, 75, "{out}");
    assert!(
        out.contains("daemon_gone") || out.contains("daemon_silent"),
        "{out}"
    );
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "elect reacted in {:?}",
        t0.elapsed()
    );
    assert!(
        !Path::new(&format!("/proc/{cmd_pid}")).exists(),
        "elect itself is gone"
    );
    drop(daemon);
}

#[test]
fn bad_input_gives_clear_errors_and_holds_nothing() {
    let s = setup("elbad");
    // Unknown lockspace.
    let (ok, out) = lockd(
        &s.run_dir,
        &[
            "elect",
            "-r",
            &format!("nols:lead:{}:1M", s.dev),
            "--",
            "true",
        ],
    );
    assert!(!ok, "{out}");
    assert!(out.contains("acquire") && out.contains("(-28)"), "{out}");
    // Resource area never formatted.
    let (ok, out) = lockd(
        &s.run_dir,
        &["elect", "-r", &s.spec("nofmt", "3M"), "--", "true"],
    );
    assert!(!ok, "{out}");
    assert!(
        out.contains("SANLK_LEADER_MAGIC") || out.contains("(-223)"),
        "{out}"
    );
    // A command that does not exist: refused before campaigning.
    let (ok, out) = lockd(
        &s.run_dir,
        &[
            "elect",
            "-r",
            &s.spec("lead", "1M"),
            "--",
            "/nonexistent/cmd",
        ],
    );
    assert!(!ok, "{out}");
    assert!(out.contains("does not exist"), "{out}");
    let (ok, out) = lockd(
        &s.run_dir,
        &[
            "elect",
            "-r",
            &s.spec("lead", "1M"),
            "--",
            "no-such-command-xyz",
        ],
    );
    assert!(!ok, "{out}");
    assert!(out.contains("not found in PATH"), "{out}");
    // Malformed spec.
    let (ok, out) = lockd(&s.run_dir, &["elect", "-r", "el:lead", "--", "true"]);
    assert!(!ok && out.contains("invalid lease"), "{out}");
    let (ok, out) = lockd(&s.run_dir, &["leader", "-r", &s.spec("nofmt", "3M")]);
    assert!(
        !ok && out.contains("leader of el:nofmt") && out.contains("(-22)"),
        "{out}"
    );
    // Nothing held afterwards.
    let v = s.leader_json("lead", "1M");
    assert_eq!(v["state"], "none", "{v}");
    let (ok, out) = lockd(&s.run_dir, &["status", "--format", "sanlock"]);
    assert!(ok, "{out}");
    assert!(!out.contains("el:lead"), "no lease left in status: {out}");
}

#[test]
fn rust_lease_api_tokens_loss_and_release() {
    let s = setup("elapi");
    let spec = LeaseSpec::parse(&s.spec("other", "2M")).unwrap();
    let opts = LeaseAcquireOptions {
        run_dir: s.run_dir.clone(),
        wait: Wait::NoWait,
        ..LeaseAcquireOptions::default()
    };
    let first = Lease::acquire(&spec, &opts).expect("acquire");
    let t1 = first.token();
    assert!(t1 >= 1);
    assert!(first.is_trusted());
    // A second holder on the same host is refused at once with NoWait...
    match Lease::acquire(&spec, &opts) {
        Err(ClientLeaseError::Busy { .. }) => {}
        other => panic!("second acquire: {other:?}"),
    }
    // ... and times out with a timeout.
    let t_opts = LeaseAcquireOptions {
        wait: Wait::Timeout(Duration::from_millis(700)),
        ..opts.clone()
    };
    match Lease::acquire(&spec, &t_opts) {
        Err(ClientLeaseError::Timeout { .. }) => {}
        other => panic!("acquire with a timeout while held: {other:?}"),
    }
    drop(first); // releases
    let second = {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            match Lease::acquire(&spec, &opts) {
                Ok(l) => break l,
                Err(ClientLeaseError::Busy { .. }) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(100))
                }
                Err(e) => panic!("reacquire: {e}"),
            }
        }
    };
    assert!(second.token() > t1, "{} then {}", t1, second.token());
    // Convert to shared and back: the exclusive convert commits a newer version, and the
    // token follows it; a shared holder beside us would make the way back refused.
    let mut second = second;
    let t2 = second.token();
    second.convert(true).expect("convert to shared");
    assert!(second.is_shared());
    let t_shared = second.token();
    assert!(
        t_shared >= t2,
        "shared at {t_shared} after exclusive at {t2}"
    );
    second.convert(false).expect("convert back to exclusive");
    assert!(!second.is_shared());
    assert!(
        second.token() > t_shared,
        "exclusive again at {} after {t_shared}",
        second.token()
    );
    // Not acquired with the LVB: no value block to read or set.
    assert!(
        second.lvb(64).is_err(),
        "an LVB of a lease taken without it"
    );
    assert!(
        second.set_lvb(b"no").is_err(),
        "an LVB set on a lease taken without it"
    );
    // Loss notices of the Rust API are exercised through `lockd elect` (which is built
    // on it) here and in elect_bed.rs: a lease held by this test process would have the
    // daemon's kill escalation aimed at the test runner itself.
    second.release().expect("release");

    // The lease value block passes from holder to holder, written at the release.
    let lvb_opts = LeaseAcquireOptions {
        lvb: true,
        ..opts.clone()
    };
    let third = Lease::acquire(&spec, &lvb_opts).expect("acquire with the LVB");
    let before = third.lvb(64).expect("read the LVB");
    assert_eq!(before.len(), 64);
    assert!(
        before.iter().all(|b| *b == 0),
        "a new lease's LVB: {before:?}"
    );
    third
        .set_lvb(b"from the third holder")
        .expect("set the LVB");
    let seen = third.lvb(21).expect("read it back");
    assert_eq!(seen, b"from the third holder");
    third.release().expect("release");
    let fourth = Lease::acquire(&spec, &lvb_opts).expect("acquire with the LVB again");
    let passed = fourth.lvb(32).expect("read the LVB");
    assert_eq!(&passed[..21], b"from the third holder");
    assert!(passed[21..].iter().all(|b| *b == 0), "{passed:?}");
    fourth.release().expect("release");

    // A persistent lease left without a release stays this host's, as an orphan at the
    // same token: refused to a plain acquire, adopted on request, released on request.
    let persistent = LeaseAcquireOptions {
        persistent: true,
        ..opts.clone()
    };
    let adopt = LeaseAcquireOptions {
        adopt_orphan: true,
        ..persistent.clone()
    };
    let fifth = Lease::acquire(&spec, &persistent).expect("acquire persistent");
    let orphan_token = fifth.token();
    fifth.leave_as_orphan();
    let code = |r: Result<Lease, ClientLeaseError>| match r {
        Err(e) => e.code(),
        Ok(l) => panic!("acquired {l:?}"),
    };
    // The daemon orphans the lease when it sees the connection close; until then a plain
    // acquire finds it held here (-EEXIST). Once orphaned, it refuses one (-EUCLEAN).
    let wait_orphaned = || {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            match code(Lease::acquire(&spec, &opts)) {
                Some(-17) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50))
                }
                rv => break rv,
            }
        }
    };
    assert_eq!(
        wait_orphaned(),
        Some(-117),
        "an orphan refuses a plain acquire"
    );
    let adopted = Lease::acquire(&spec, &adopt).expect("adopt the orphan");
    assert_eq!(adopted.token(), orphan_token, "an orphan keeps its token");
    adopted.leave_as_orphan();
    assert_eq!(wait_orphaned(), Some(-117), "orphaned again");
    assert_eq!(
        release_orphans(&s.run_dir, &spec).expect("release orphans"),
        1
    );
    assert_eq!(release_orphans(&s.run_dir, &spec).expect("none left"), 0);
    assert_eq!(
        code(Lease::acquire(&spec, &adopt)),
        Some(-2),
        "no orphan to adopt (ENOENT)"
    );
    let sixth = Lease::acquire(&spec, &opts).expect("acquire after the orphan's release");
    assert!(sixth.token() > orphan_token);
    sixth.release().expect("release");
}

#[test]
fn leader_election_api_and_fenced_store() {
    let s = setup("elstore");
    let spec = LeaseSpec::parse(&s.spec("lead", "1M")).unwrap();
    let election = LeaderElection::new(spec, &s.run_dir);
    assert_eq!(election.leader().unwrap().host_id, 0);
    let lead = election
        .campaign(Some(Duration::from_secs(10)))
        .expect("elected");
    assert!(lead.is_leader());
    let info = election.leader().unwrap();
    assert_eq!(info.host_id, 1);
    assert_eq!(info.token, lead.token());
    assert_eq!(info.state_name(), "live");
    let old_token = lead.token();
    // etcd's Observe: the current leader first.
    let stop = std::sync::atomic::AtomicBool::new(false);
    let mut seen = Vec::new();
    election
        .observe(Duration::from_millis(100), &stop, |l| {
            seen.push(*l);
            false
        })
        .unwrap();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].token, old_token);
    assert_eq!(seen[0].host_name.to_text(), "elstore");
    lead.resign().expect("resign");
    assert_eq!(election.leader().unwrap().host_id, 0);
    let lead2 = election
        .campaign(Some(Duration::from_secs(10)))
        .expect("elected again");
    assert!(lead2.token() > old_token);

    // The store accepts the new token and then refuses the old one.
    let store_bin = Path::new(LOCKD)
        .parent()
        .unwrap()
        .join("lockd-fenced-store");
    assert!(store_bin.exists(), "build the workspace's bins first");
    let (mut server, sock, log) = start_store(&store_bin, &s.dir);
    let writer = |token: u64| {
        Command::new(&store_bin)
            .args(["write", "--host", "h1", "--socket"])
            .arg(&sock)
            .env("LOCKD_FENCING_TOKEN", token.to_string())
            .spawn()
            .unwrap()
    };
    let mut new_writer = writer(lead2.token());
    std::thread::sleep(Duration::from_millis(500));
    let _ = new_writer.kill();
    let _ = new_writer.wait();
    let status = writer(old_token).wait().unwrap();
    assert_eq!(status.code(), Some(3), "a stale writer is fenced off");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains(&format!("accepted token={}", lead2.token())),
        "{text}"
    );
    assert!(
        text.contains(&format!("rejected token={old_token}")),
        "{text}"
    );
    let _ = server.kill();
    let _ = server.wait();
}

#[test]
fn example_workers_take_turns_with_growing_tokens() {
    let s = setup("elworkers");
    let bin_dir = Path::new(LOCKD).parent().unwrap();
    let worker = bin_dir.join("examples/leader_worker");
    let store_bin = bin_dir.join("lockd-fenced-store");
    assert!(
        worker.exists() && store_bin.exists(),
        "build the workspace's bins and examples first (cargo build --workspace --bins --examples)"
    );
    let (mut server, sock, log) = start_store(&store_bin, &s.dir);
    let lease = s.spec("lead", "1M");
    let start = |name: &str| {
        Command::new(&worker)
            .args([
                "--lease", &lease, "--host", name, "--writes", "8", "--store",
            ])
            .arg(&sock)
            .arg("--run-dir")
            .arg(&s.run_dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (a, b) = (start("wa"), start("wb"));
    let (ca, oa) = finish(a, Duration::from_secs(60));
    let (cb, ob) = finish(b, Duration::from_secs(60));
    assert_eq!((ca, cb), (0, 0), "{oa}\n{ob}");
    let _ = server.kill();
    let _ = server.wait();
    let text = std::fs::read_to_string(&log).unwrap();
    let writes: Vec<(u64, String)> = text
        .lines()
        .map(|l| {
            assert!(l.starts_with("accepted "), "only accepted writes: {l}");
            let kv = |k: &str| {
                l.split_whitespace()
                    .find_map(|w| w.strip_prefix(&format!("{k}=")))
                    .unwrap()
                    .to_string()
            };
            (kv("token").parse().unwrap(), kv("host"))
        })
        .collect();
    assert_eq!(writes.len(), 16, "{text}");
    // One leader at a time: all of the first leader's writes, then all of the second's,
    // with a greater token.
    let first = &writes[0];
    assert!(writes[..8].iter().all(|w| w == first), "{text}");
    let second = &writes[8];
    assert!(writes[8..].iter().all(|w| w == second), "{text}");
    assert_ne!(first.1, second.1);
    assert!(second.0 > first.0, "{text}");
}

#[test]
fn python3_sanlock_reads_the_same_token() {
    let s = setup("elpy");
    // The docs/leader-election.md example, against lockd.
    let script = format!(
        r#"
import sanlock
fd = sanlock.register()
disks = [("{dev}", 1024 * 1024)]
sanlock.acquire(b"el", b"lead", disks, slkfd=fd)
token = sanlock.inquire(slkfd=fd)[0]["version"]
print("token", token)
import sys; sys.stdout.flush()
sys.stdin.readline()
sanlock.release(b"el", b"lead", disks, slkfd=fd)
"#,
        dev = s.dev
    );
    let mut py = Command::new("/usr/bin/python3")
        .arg("-c")
        .arg(&script)
        .env("SANLOCK_RUN_DIR", &s.run_dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 (apt-get install python3-sanlock)");
    let mut line = String::new();
    {
        use std::io::BufRead;
        let out = py.stdout.as_mut().unwrap();
        std::io::BufReader::new(out).read_line(&mut line).unwrap();
    }
    let token: u64 = line
        .trim()
        .strip_prefix("token ")
        .unwrap_or_else(|| panic!("python printed {line:?}"))
        .parse()
        .unwrap();
    let v = s.leader_json("lead", "1M");
    assert_eq!(v["token"], token, "{v}");
    assert_eq!(v["state"], "live", "{v}");
    drop(py.stdin.take());
    assert!(py.wait().unwrap().success());
    assert_eq!(s.leader_json("lead", "1M")["state"], "none");
}

/// A lockspace left while an orphan of it is held here: the removal releases the orphan
/// and ends (the chaos bed's leave faults met orphans left a moment before).
#[test]
fn rem_lockspace_with_an_orphan_releases_it_and_returns() {
    let s = setup("elorph");
    let spec = LeaseSpec::parse(&s.spec("other", "2M")).unwrap();
    let opts = LeaseAcquireOptions {
        run_dir: s.run_dir.clone(),
        persistent: true,
        ..LeaseAcquireOptions::default()
    };
    let lease = Lease::acquire(&spec, &opts).expect("acquire persistent");
    lease.leave_as_orphan();
    std::thread::sleep(Duration::from_millis(300));
    let t0 = Instant::now();
    let (ok, out) = lockd(
        &s.run_dir,
        &["rem-lockspace", "-s", &format!("el:1:{}:0", s.dev)],
    );
    let log = std::fs::read_to_string(s.dir.join("elorph.log")).unwrap_or_default();
    assert!(ok, "rem-lockspace: {out}\n{log}");
    assert!(
        t0.elapsed() < Duration::from_secs(10),
        "rem-lockspace took {:?}\n{log}",
        t0.elapsed()
    );
}
