//! The `lockd` client commands against a real sanlock 3.8 daemon: the CLI speaks the
//! sanlock protocol, so it must drive sanlock exactly as it drives lockd. (The daemon
//! tests run the same commands against lockd's own daemon.)

use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use lockd_system_tests::{run, run_ok, scratch_dir, sparse_file, SanlockDaemon};

const LOCKD: &str = env!("CARGO_BIN_EXE_lockd");

struct Holder(Child);
impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits until the holder `lockd acquire -- CMD` says on stderr (the file `err`) that it
/// holds its leases. Only then may other connections name its pid: sanlock refuses a
/// registered client's own command with EBUSY while a command from another connection
/// (an `inquire -p PID` poll, say) targets that client, and the acquire would fail.
fn wait_until_holding(daemon: &SanlockDaemon, holder: &mut Holder, err: &std::path::Path) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let text = std::fs::read_to_string(err).unwrap_or_default();
        if text.contains("lockd: holding") {
            return;
        }
        let exited = holder.0.try_wait().expect("try_wait");
        assert!(
            exited.is_none() && Instant::now() < deadline,
            "the holder did not get its lease (exit: {exited:?}): {text}\ndaemon log:\n{}",
            daemon.log_text()
        );
        thread::sleep(Duration::from_millis(50));
    }
}

fn lockd(daemon: &SanlockDaemon, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(LOCKD)
        .args(args)
        .env("LOCKD_RUN_DIR", daemon.run_dir.path())
        .output()
        .expect("run lockd");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn lockd_ok(daemon: &SanlockDaemon, args: &[&str]) -> String {
    let (ok, out, err) = lockd(daemon, args);
    assert!(
        ok,
        "lockd {args:?} failed: {out}{err}\ndaemon log:\n{}",
        daemon.log_text()
    );
    out
}

#[test]
fn lockd_cli_drives_a_real_sanlock_daemon() {
    let dir = scratch_dir();
    let img = sparse_file(dir.path(), "cli.img", 3 << 20);
    let p = img.display().to_string();
    run_ok(
        LOCKD,
        ["direct", "init", "-s", &format!("cli:0:{p}:0"), "-o", "1"],
    );
    run_ok(LOCKD, ["direct", "init", "-r", &format!("cli:vm1:{p}:1M")]);
    let daemon = SanlockDaemon::start("cli-host");

    let v = lockd_ok(&daemon, &["version", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&v).unwrap();
    assert_eq!(v["raw"], 0x0308_0500u32, "Debian's sanlock is 3.8.5");

    let out = lockd_ok(
        &daemon,
        &["add-lockspace", "-s", &format!("cli:1:{p}:0"), "-o", "1"],
    );
    assert!(out.contains("joined lockspace cli as host_id 1"), "{out}");
    // A second join of the same lockspace is reported, not failed.
    let out = lockd_ok(
        &daemon,
        &["add-lockspace", "-s", &format!("cli:1:{p}:0"), "-o", "1"],
    );
    assert!(out.contains("already joined"), "{out}");
    let out = lockd_ok(&daemon, &["inq-lockspace", "-s", &format!("cli:1:{p}:0")]);
    assert!(out.contains("joined"), "{out}");

    let gets: serde_json::Value =
        serde_json::from_str(&lockd_ok(&daemon, &["gets", "--hosts", "--json"])).unwrap();
    assert_eq!(gets[0]["lockspace"], "cli");
    assert_eq!(gets[0]["hosts"][0]["host_id"], 1);
    assert_eq!(gets[0]["hosts"][0]["state"], "LIVE");
    assert_eq!(gets[0]["hosts"][0]["io_timeout"], 1);

    // Hold vm1 for the life of a command; the registered pid is the command itself.
    let res = format!("cli:vm1:{p}:1M");
    let holder_err = dir.path().join("holder.err");
    let holder = Command::new(LOCKD)
        .args([
            "acquire",
            "-r",
            &res,
            "--owner-name",
            "guest1",
            "--",
            "/bin/sleep",
            "60",
        ])
        .env("LOCKD_RUN_DIR", daemon.run_dir.path())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&holder_err).expect("holder stderr file"))
        .spawn()
        .expect("spawn lockd acquire -- sleep");
    let pid = holder.id();
    let mut holder = Holder(holder);
    wait_until_holding(&daemon, &mut holder, &holder_err);
    let (ok, inq, err) = lockd(&daemon, &["inquire", "-p", &pid.to_string()]);
    assert!(
        ok && inq.contains("cli:vm1"),
        "inquire -p {pid}: {inq}{err}"
    );
    assert!(inq.contains(&format!("cli:vm1:{p}:1048576:1")), "{inq}");
    // The command really is the registered holder: /proc shows sleep, not lockd.
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap();
    assert_eq!(comm.trim(), "sleep");

    let status = lockd_ok(&daemon, &["status", "--format", "sanlock"]);
    assert!(status.contains(&format!("s cli:1:{p}:0")), "{status}");
    assert!(
        status.contains("r cli:vm1:") && status.contains(&format!("p {pid}")),
        "{status}"
    );

    // The human table and --json read sanlock's answers too (deadlines from its
    // renewal_last_success and monotime, hosts from GET_HOSTS).
    let table = lockd_ok(&daemon, &["status"]);
    assert!(
        table.contains("LOCKSPACES (1)") && table.contains("guest1"),
        "{table}"
    );
    let st: serde_json::Value =
        serde_json::from_str(&lockd_ok(&daemon, &["status", "--json"])).unwrap();
    let ls = &st["lockspaces"][0];
    assert_eq!(ls["name"], "cli");
    let fails = ls["renewal_fails_in_s"]
        .as_i64()
        .expect("renewal_fails_in_s from sanlock");
    assert!(
        (0..=8).contains(&fails),
        "io_timeout 1: fails within 8 s: {ls}"
    );
    assert!(ls.get("watchdog_fires_in_s").is_some(), "{ls}");
    assert_eq!(st["leases"][0]["pid"], pid);
    assert_eq!(st["leases"][0]["holder"], "guest1");
    let ex: serde_json::Value =
        serde_json::from_str(&lockd_ok(&daemon, &["explain", "-s", "cli", "--json"])).unwrap();
    assert_eq!(
        ex[0]["this_host"]["renewal_fails_at"]["after_last_renewal_s"],
        8
    );

    // The on-disk leader agrees.
    let dump: serde_json::Value =
        serde_json::from_str(&run_ok(LOCKD, ["direct", "dump", &p, "--json"])).unwrap();
    assert_eq!(dump[1]["owner_id"], 1);
    assert_eq!(dump[1]["lver"], 1);

    // Shared and back.
    lockd_ok(
        &daemon,
        &[
            "convert",
            "-r",
            &format!("{res}:SH"),
            "-p",
            &pid.to_string(),
        ],
    );
    let (ok, _, err) = lockd(
        &daemon,
        &[
            "convert",
            "-r",
            &format!("{res}:SH"),
            "-p",
            &pid.to_string(),
        ],
    );
    assert!(
        !ok && err.contains("(-114)"),
        "converting to the mode already held is EALREADY: {err}"
    );
    lockd_ok(&daemon, &["convert", "-r", &res, "-p", &pid.to_string()]);

    lockd_ok(&daemon, &["release", "-r", &res, "-p", &pid.to_string()]);
    let out = lockd_ok(&daemon, &["inquire", "-p", &pid.to_string()]);
    assert!(out.contains("holds no leases"), "{out}");
    drop(holder);

    // Errors name the code: an unregistered pid is ESRCH (-3).
    let (ok, _, err) = lockd(&daemon, &["inquire", "-p", "999999"]);
    assert!(
        !ok && err.contains("(-3)") && err.lines().count() == 1,
        "{err}"
    );

    let out = lockd_ok(&daemon, &["rem-lockspace", "-s", &format!("cli:1:{p}:0")]);
    assert!(out.contains("left lockspace cli"), "{out}");
    let out = lockd_ok(&daemon, &["gets"]);
    assert!(out.contains("no lockspaces"), "{out}");
    let out = lockd_ok(&daemon, &["shutdown", "--wait"]);
    assert!(out.contains("daemon exited"), "{out}");
    let dump = run(LOCKD, ["direct", "dump", &p, "--json"]);
    let dump: serde_json::Value = serde_json::from_slice(&dump.stdout).unwrap();
    assert_eq!(
        dump[0]["hosts"][0]["timestamp"], 0,
        "rem-lockspace released the delta lease"
    );
}

#[test]
fn lockd_request_examine_and_events_against_a_real_sanlock_daemon() {
    let dir = scratch_dir();
    let img = sparse_file(dir.path(), "req.img", 3 << 20);
    let p = img.display().to_string();
    run_ok(
        LOCKD,
        ["direct", "init", "-s", &format!("rq:0:{p}:0"), "-o", "1"],
    );
    run_ok(LOCKD, ["direct", "init", "-r", &format!("rq:vm1:{p}:1M")]);
    let daemon = SanlockDaemon::start("req-host");
    lockd_ok(
        &daemon,
        &["add-lockspace", "-s", &format!("rq:1:{p}:0"), "-o", "1"],
    );
    let res = format!("rq:vm1:{p}:1M");
    let holder_err = dir.path().join("holder.err");
    let mut holder = Holder(
        Command::new(LOCKD)
            .args(["acquire", "-r", &res, "--", "/bin/sleep", "60"])
            .env("LOCKD_RUN_DIR", daemon.run_dir.path())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&holder_err).expect("holder stderr file"))
            .spawn()
            .expect("spawn holder"),
    );
    wait_until_holding(&daemon, &mut holder, &holder_err);
    let (ok, inq, err) = lockd(&daemon, &["inquire", "-p", &holder.0.id().to_string()]);
    assert!(ok && inq.contains("rq:vm1"), "inquire: {inq}{err}");
    // A request without a version is refused before anything is sent.
    let (ok, _, err) = lockd(&daemon, &["request", "-r", &res, "-f", "force"]);
    assert!(!ok && err.contains(":LVER"), "{err}");
    // An old version is refused by the daemon (SANLK_REQUEST_OLD).
    let (ok, _, err) = lockd(
        &daemon,
        &["request", "-r", &format!("{res}:1"), "-f", "force"],
    );
    assert!(!ok && err.contains("-272"), "{err}");
    lockd_ok(
        &daemon,
        &["request", "-r", &format!("{res}:2"), "-f", "force"],
    );
    let dump: serde_json::Value =
        serde_json::from_str(&run_ok(LOCKD, ["direct", "dump", &p, "--json"])).unwrap();
    assert_eq!(dump[1]["request"]["lver"], 2);
    assert_eq!(dump[1]["request"]["force_mode"], 1);
    // Examining the resource acts on the FORCE request: the holder is SIGKILLed.
    lockd_ok(&daemon, &["examine", "-r", &res]);
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(st) = holder.0.try_wait().unwrap() {
            break st;
        }
        assert!(
            Instant::now() < deadline,
            "FORCE request did not kill the holder"
        );
        thread::sleep(Duration::from_millis(100));
    };
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(9), "killed by SIGKILL: {status:?}");

    lockd_ok(
        &daemon,
        &[
            "set-event",
            "-s",
            "rq",
            "-i",
            "1",
            "--cur-generation",
            "-e",
            "7",
            "-d",
            "9",
        ],
    );
    lockd_ok(
        &daemon,
        &["set-config", "-s", "rq", "--used-by-orphans", "1"],
    );
    let (ok, _, err) = lockd(&daemon, &["set-config", "-s", "nosuchls", "--used", "1"]);
    assert!(
        !ok && err.contains("(-2)"),
        "unknown lockspace is ENOENT: {err}"
    );
    lockd_ok(&daemon, &["shutdown", "--force", "--wait"]);
}
