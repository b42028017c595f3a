//! Acquires that meet another acquire or release of the same lease (issue 21, item 6),
//! with the real `lockd` binaries on files under /var/tmp:
//! - back-to-back holders (`lockd acquire -r RES -- true`, twenty times) all succeed: an
//!   acquire that finds the previous holder's release still running waits for it;
//! - an acquire that finds the lease being released here (its holder just exited)
//!   waits for that release, which another worker runs, then holds the lease;
//! - an acquire while another local acquire of the lease is in flight gets -EBUSY, as
//!   from a real sanlock 3.8 daemon (the first acquire is kept in flight by delaying the
//!   resource's I/O with the project's FUSE fault injector);
//! - `lockd acquire --timeout S` waits for a holder on another host to release, and when
//!   the time runs out names it: "held by host 1 (hostA), live".

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use lockd_system_tests::{
    lockd_cli, require_root, scratch_dir, sparse_file, FaultFs, LockdProc, SanlockDaemon,
};

const LOCKD: &str = env!("CARGO_BIN_EXE_lockd");

/// A child killed (by PID) on drop.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn lockd(run_dir: &Path, args: &[&str]) -> (bool, String) {
    lockd_cli(LOCKD, run_dir, args)
}

fn ok(run_dir: &Path, args: &[&str]) -> String {
    let (ok, out) = lockd(run_dir, args);
    assert!(ok, "lockd {}: {out}", args.join(" "));
    out
}

/// `lockd acquire -r RES -- COMMAND…` in the background against `run_dir`.
fn holder(run_dir: &Path, res: &str, command: &[&str]) -> Killed {
    Killed(
        Command::new(LOCKD)
            .args(["acquire", "-r", res, "--"])
            .args(command)
            .env("LOCKD_RUN_DIR", run_dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start holder"),
    )
}

/// Waits until `lockd leader` (through the daemon in `run_dir`) names host `host_id`.
fn wait_leader(run_dir: &Path, res: &str, host_id: u64) {
    let want = format!("\"host_id\": {host_id}");
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (ok, out) = lockd(run_dir, &["leader", "-r", res, "--json"]);
        if ok && out.contains(&want) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "lease never held by host {host_id}: {out}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Formats lockspace `ls` (io_timeout 1) at 0 and `r1` at 1 MiB in an 8 MiB file.
fn lease_file(dir: &Path) -> PathBuf {
    let img = sparse_file(dir, "img", 8 << 20);
    let p = img.display().to_string();
    ok(
        dir,
        &["direct", "init", "-s", &format!("ls:0:{p}:0"), "-o", "1"],
    );
    ok(dir, &["direct", "init", "-r", &format!("ls:r1:{p}:1M")]);
    img
}

#[test]
fn twenty_back_to_back_holders_all_get_the_lease() {
    let tmp = scratch_dir();
    let dir = tmp.path();
    let img = lease_file(dir);
    let p = img.display().to_string();
    let d = LockdProc::start(LOCKD, dir, "hostA");
    ok(
        &d.run_dir,
        &["add-lockspace", "-s", &format!("ls:1:{p}:0"), "-o", "1"],
    );
    let res = format!("ls:r1:{p}:1M");
    let failures: Vec<String> = (0..20)
        .filter_map(|i| {
            let (ok, out) = lockd(&d.run_dir, &["acquire", "-r", &res, "--", "true"]);
            (!ok).then(|| format!("try {i}: {out}"))
        })
        .collect();
    assert!(
        failures.is_empty(),
        "{} of 20 back-to-back acquires failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The lockspace file of [`lease_file`], and resource `r1` on an image of its own seen
/// through the fault injector: (lockspace image, injector, resource spec).
fn lease_file_and_faulty_resource(dir: &Path) -> (PathBuf, FaultFs, String) {
    let img = lease_file(dir);
    let backing = sparse_file(dir, "res.img", 2 << 20);
    ok(
        dir,
        &[
            "direct",
            "init",
            "-r",
            &format!("ls:r1:{}:0", backing.display()),
        ],
    );
    let fs = FaultFs::start(
        dir,
        "r1",
        &backing,
        Path::new(LOCKD).parent().expect("bin dir"),
    );
    let res = format!("ls:r1:{}:0", fs.disk().display());
    (img, fs, res)
}

/// With every I/O of the resource's disk delayed 500 ms, a first acquire stays in flight
/// for seconds; a second one meanwhile gets this daemon's answer. Returns that answer
/// (the `lockd acquire` output) and whether the first one then got the lease.
fn acquire_during_an_acquire(run_dir: &Path, dir: &Path, kind: &str) -> (String, bool) {
    let (img, fs, res) = lease_file_and_faulty_resource(dir);
    let p = img.display().to_string();
    ok(
        run_dir,
        &["add-lockspace", "-s", &format!("ls:1:{p}:0"), "-o", "1"],
    );
    fs.set("delay 500");
    let mut first = holder(run_dir, &res, &["sleep", "30"]);
    // The first acquire does several I/Os of 500 ms each: it is in flight from its start
    // (well within this pause) for seconds.
    std::thread::sleep(Duration::from_millis(800));
    let (second_ok, out) = lockd(run_dir, &["acquire", "-r", &res, "--", "true"]);
    assert!(!second_ok, "{kind}: the second acquire must fail: {out}");
    fs.set("pass");
    // The first acquire goes on to hold the lease: it is still running after a while.
    std::thread::sleep(Duration::from_secs(4));
    let first_holds = matches!(first.0.try_wait(), Ok(None));
    drop(first);
    // Leave the lockspace before the fault injector goes.
    std::thread::sleep(Duration::from_millis(500));
    let _ = lockd(run_dir, &["rem-lockspace", "-s", &format!("ls:1:{p}:0")]);
    (out, first_holds)
}

#[test]
fn an_acquire_racing_an_in_flight_acquire_gets_ebusy_as_from_sanlock() {
    require_root("FUSE mounts and the sanlock daemon");
    let tmp = scratch_dir();
    let lockd_dir = tmp.path().join("lockd");
    let sanlock_dir = tmp.path().join("sanlock");
    std::fs::create_dir_all(&lockd_dir).expect("dir");
    std::fs::create_dir_all(&sanlock_dir).expect("dir");
    let (lockd_out, lockd_first) = {
        let d = LockdProc::start(LOCKD, &lockd_dir, "hostA");
        acquire_during_an_acquire(&d.run_dir, &lockd_dir, "lockd")
    };
    let (sanlock_out, sanlock_first) = {
        let d = SanlockDaemon::start("hostA");
        acquire_during_an_acquire(d.run_dir.path(), &sanlock_dir, "sanlock")
    };
    assert!(
        sanlock_out.contains("(-16)"),
        "sanlock 3.8 answers -EBUSY: {sanlock_out}"
    );
    assert!(
        lockd_out.contains("(-16)"),
        "lockd must answer -EBUSY as sanlock does: {lockd_out}"
    );
    assert!(sanlock_first, "sanlock: the first acquire got the lease");
    assert!(lockd_first, "lockd: the first acquire got the lease");
}

/// An acquire that finds the lease being released here (its holder just exited) waits in
/// the core for that release, which another worker runs, and then takes the lease: the
/// release's end reaches the waiting acquire through its worker's mailbox. The
/// resource's I/O is delayed 400 ms (a release is three I/Os), so the second acquire
/// surely comes while the release is on its way; without the wait it would fail with
/// -EAGAIN.
#[test]
fn an_acquire_meeting_a_local_release_waits_for_it_then_holds_the_lease() {
    require_root("FUSE mounts");
    let tmp = scratch_dir();
    let dir = tmp.path();
    let (img, fs, res) = lease_file_and_faulty_resource(dir);
    let p = img.display().to_string();
    let d = LockdProc::start(LOCKD, dir, "hostA");
    ok(
        &d.run_dir,
        &["add-lockspace", "-s", &format!("ls:1:{p}:0"), "-o", "1"],
    );
    let go = dir.join("go");
    let wait_for_go = format!("while [ ! -e {} ]; do sleep 0.05; done", go.display());
    let mut first = holder(&d.run_dir, &res, &["sh", "-c", &wait_for_go]);
    wait_leader(&d.run_dir, &res, 1);
    fs.set("delay 400");
    // The holder exits: its release (three I/Os of 400 ms) starts on a worker.
    std::fs::write(&go, b"").expect("go file");
    let exited = first.0.wait().expect("holder exits");
    assert!(exited.success(), "the first holder ran: {exited:?}");
    std::thread::sleep(Duration::from_millis(300));
    let t0 = Instant::now();
    let (second_ok, out) = lockd(&d.run_dir, &["acquire", "-r", &res, "--", "true"]);
    let took = t0.elapsed();
    fs.set("pass");
    let log = std::fs::read_to_string(dir.join("hostA.log")).expect("daemon log");
    assert!(
        second_ok,
        "the second acquire waits for the release: {out}\n{log}"
    );
    let waited = log
        .find("waiting for a release of a lease here")
        .unwrap_or_else(|| panic!("the second acquire waited in the core:\n{log}"));
    let released = waited
        + log[waited..]
            .find("released")
            .unwrap_or_else(|| panic!("the release ended after the wait began:\n{log}"));
    let acquired = log.rfind("acquired").expect("the second acquire is logged");
    assert!(
        released < acquired,
        "the second acquire took the lease after the release ended:\n{log}"
    );
    eprintln!("second acquire (wait, then its own I/O at 400 ms each) took {took:?}");
    let _ = lockd(&d.run_dir, &["rem-lockspace", "-s", &format!("ls:1:{p}:0")]);
}

/// Two lockd hosts on one file: (tmp, A, B, resource spec), host A joined as 1, B as 2.
fn two_hosts() -> (lockd_system_tests::TempDir, LockdProc, LockdProc, String) {
    let tmp = scratch_dir();
    let dir = tmp.path();
    let img = lease_file(dir);
    let p = img.display().to_string();
    let a = LockdProc::start(LOCKD, dir, "hostA");
    let b = LockdProc::start(LOCKD, dir, "hostB");
    for (d, id) in [(&a, 1), (&b, 2)] {
        ok(
            &d.run_dir,
            &["add-lockspace", "-s", &format!("ls:{id}:{p}:0"), "-o", "1"],
        );
    }
    (tmp, a, b, format!("ls:r1:{p}:1M"))
}

#[test]
fn acquire_timeout_waits_for_the_holder_on_another_host_to_release() {
    let (_tmp, a, b, res) = two_hosts();
    let _h = holder(&a.run_dir, &res, &["sleep", "3"]);
    wait_leader(&a.run_dir, &res, 1);
    // Without --timeout: refused at once.
    let (ok_now, out) = lockd(&b.run_dir, &["acquire", "-r", &res, "--", "true"]);
    assert!(!ok_now, "held by host A: {out}");
    let first: serde_json::Value =
        serde_json::from_str(&ok(&a.run_dir, &["leader", "-r", &res, "--json"])).expect("json");
    let first_token = first["token"].as_u64().expect("the holder's token");
    let t0 = Instant::now();
    // The command learns its lease and fencing token, as under `lockd elect`.
    let (got, out) = lockd(
        &b.run_dir,
        &[
            "acquire",
            "--timeout",
            "30",
            "-r",
            &res,
            "--",
            "sh",
            "-c",
            "echo \"lease=$LOCKD_LEASE token=$LOCKD_FENCING_TOKEN\"",
        ],
    );
    assert!(got, "--timeout 30 must wait out the 3 s holder: {out}");
    assert!(
        t0.elapsed() < Duration::from_secs(25),
        "took {:?}",
        t0.elapsed()
    );
    let token: u64 = out
        .split_whitespace()
        .find_map(|w| w.strip_prefix("token="))
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("no fencing token for the command: {out}"));
    assert!(out.contains("lease=ls:r1 "), "{out}");
    assert!(
        token > first_token,
        "the token ({token}) follows the first holder's ({first_token})"
    );
}

#[test]
fn acquire_timeout_names_the_holder_when_it_runs_out() {
    let (_tmp, a, b, res) = two_hosts();
    let _h = holder(&a.run_dir, &res, &["sleep", "1000"]);
    wait_leader(&a.run_dir, &res, 1);
    let t0 = Instant::now();
    let (got, out) = lockd(
        &b.run_dir,
        &["acquire", "--timeout", "3", "-r", &res, "--", "true"],
    );
    let took = t0.elapsed();
    assert!(!got, "held all along: {out}");
    assert!(
        out.contains("not acquired within 3 s: held by host 1 (hostA), live"),
        "the error must name the holder: {out}"
    );
    assert!(
        took >= Duration::from_secs(3) && took < Duration::from_secs(15),
        "took {took:?}"
    );
}
