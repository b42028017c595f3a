//! Stopping the daemon (issue 21, items 4 and 8), with the real `lockd` binaries on a
//! file under /var/tmp:
//! - `lockd shutdown -f --wait` while a lease is held by a process that ignores SIGTERM:
//!   the holder is killed, the command returns within seconds, the daemon process is gone
//!   and its delta lease is released on disk (timestamp 0);
//! - `lockd shutdown` with lockspaces joined says which ones and what to do;
//! - `lockd shutdown --wait` returns only once the daemon process has exited.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use disk_format::leader::DELTA_DISK_MAGIC;
use disk_format::LeaderRecord;
use lockd_system_tests::{lockd_cli, read_bytes, require_root, scratch_dir, sparse_file};

const LOCKD: &str = env!("CARGO_BIN_EXE_lockd");

/// A `lockd daemon -D -w 0` child; stopped on drop (forced shutdown, then SIGKILL by PID).
struct Daemon {
    child: Child,
    run_dir: PathBuf,
    log: PathBuf,
}

impl Daemon {
    fn start(dir: &Path, host_name: &str) -> Daemon {
        let run_dir = dir.join(format!("run-{host_name}"));
        let log = dir.join(format!("{host_name}.log"));
        let logf = std::fs::File::create(&log).expect("create daemon log");
        let child = Command::new(LOCKD)
            .args(["daemon", "-D", "-w", "0", "-c", "/dev/null", "-o", "1"])
            .args(["-e", host_name, "--run-dir"])
            .arg(&run_dir)
            .stdin(Stdio::null())
            .stdout(logf.try_clone().expect("dup log"))
            .stderr(logf)
            .spawn()
            .expect("start lockd daemon");
        let d = Daemon {
            child,
            run_dir,
            log,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::os::unix::net::UnixStream::connect(d.run_dir.join("sanlock.sock")).is_err() {
            assert!(
                Instant::now() < deadline,
                "daemon socket never appeared; log:\n{}",
                d.log_text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        d
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Whether the daemon process has exited (it is reaped here if so).
    fn exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }

    fn cli(&self, args: &[&str]) -> (bool, String) {
        lockd_cli(LOCKD, &self.run_dir, args)
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if self.exited() {
            return;
        }
        if let Ok(mut c) = client_lib::Client::connect(&self.run_dir) {
            let _ = c.shutdown(true, false);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if self.exited() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A child killed (by PID) on drop.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs `lockd ARGS` against `run_dir`, failing the test (after killing it by PID) if it
/// runs longer than `limit`; returns (success, stdout+stderr, how long it ran).
fn cli_within(run_dir: &Path, args: &[&str], limit: Duration) -> (bool, String, Duration) {
    let t0 = Instant::now();
    let child = Command::new(LOCKD)
        .args(args)
        .env("LOCKD_RUN_DIR", run_dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run lockd");
    let pid = child.id().to_string();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(Ok(out)) => {
            let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
            text.push_str(&String::from_utf8_lossy(&out.stderr));
            (out.status.success(), text, t0.elapsed())
        }
        Ok(Err(e)) => panic!("`lockd {}`: {e}", args.join(" ")),
        Err(_) => {
            let _ = Command::new("kill").args(["-KILL", &pid]).status();
            panic!("`lockd {}` still running after {limit:?}", args.join(" "));
        }
    }
}

/// A lockspace `ls` (io_timeout 1) at offset 0 and resource `r1` at 1 MiB in an 8 MiB file.
fn lease_file(dir: &Path) -> PathBuf {
    let img = sparse_file(dir, "img", 8 << 20);
    let p = img.display().to_string();
    for args in [
        vec![
            "direct".to_string(),
            "init".into(),
            "-s".into(),
            format!("ls:0:{p}:0"),
            "-o".into(),
            "1".into(),
        ],
        vec![
            "direct".into(),
            "init".into(),
            "-r".into(),
            format!("ls:r1:{p}:1M"),
        ],
    ] {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (ok, out) = lockd_cli(LOCKD, dir, &args);
        assert!(ok, "lockd {}: {out}", args.join(" "));
    }
    img
}

/// Host 1's delta lease in `img`.
fn delta_lease(img: &Path) -> LeaderRecord {
    LeaderRecord::decode(&read_bytes(img, 0, 512)).expect("decode delta lease")
}

#[test]
fn forced_shutdown_with_a_held_lease_kills_the_holder_and_releases_the_delta_lease() {
    require_root("lockd daemon kills lease holders through its helper");
    let tmp = scratch_dir();
    let dir = tmp.path();
    let img = lease_file(dir);
    let p = img.display().to_string();
    let mut d = Daemon::start(dir, "hostA");
    let (ok, out) = d.cli(&["add-lockspace", "-s", &format!("ls:1:{p}:0"), "-o", "1"]);
    assert!(ok, "add-lockspace: {out}");
    let before = delta_lease(&img);
    assert_eq!(before.magic, DELTA_DISK_MAGIC);
    assert!(before.timestamp != 0, "joined: our delta lease is held");
    // The holder ignores SIGTERM (the ignored disposition survives exec).
    let res = format!("ls:r1:{p}:1M");
    let mut holder = Killed(
        Command::new(LOCKD)
            .args(["acquire", "-r", &res, "--", "sh", "-c"])
            .arg("trap '' TERM; exec sleep 1000")
            .env("LOCKD_RUN_DIR", &d.run_dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start holder"),
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (ok, out) = d.cli(&["leader", "-r", &res, "--json"]);
        if ok && out.contains("\"host_id\": 1") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "holder never got the lease: {out}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let (ok, out, took) = cli_within(
        &d.run_dir,
        &["shutdown", "-f", "--wait"],
        Duration::from_secs(30),
    );
    assert!(
        ok,
        "shutdown -f --wait: {out}\ndaemon log:\n{}",
        d.log_text()
    );
    assert!(
        took < Duration::from_secs(10),
        "shutdown -f --wait took {took:?}"
    );
    assert!(
        matches!(holder.0.try_wait(), Ok(Some(_))),
        "the holder outlived the forced shutdown"
    );
    assert!(
        d.exited(),
        "shutdown --wait returned while the daemon process still runs; log:\n{}",
        d.log_text()
    );
    let after = delta_lease(&img);
    assert_eq!(after.magic, DELTA_DISK_MAGIC);
    assert_eq!(
        after.timestamp, 0,
        "the delta lease must be released on disk: {after:?}"
    );
}

#[test]
fn shutdown_with_lockspaces_joined_names_them_and_says_what_to_do() {
    let tmp = scratch_dir();
    let dir = tmp.path();
    let img = sparse_file(dir, "img", 8 << 20);
    let p = img.display().to_string();
    let mut d = Daemon::start(dir, "hostA");
    for (name, off) in [("LS1", "0"), ("LS2", "4M")] {
        let (ok, out) = lockd_cli(
            LOCKD,
            dir,
            &[
                "direct",
                "init",
                "-s",
                &format!("{name}:0:{p}:{off}"),
                "-o",
                "1",
            ],
        );
        assert!(ok, "direct init {name}: {out}");
        let (ok, out) = d.cli(&[
            "add-lockspace",
            "-s",
            &format!("{name}:1:{p}:{off}"),
            "-o",
            "1",
        ]);
        assert!(ok, "add-lockspace {name}: {out}");
    }
    for args in [&["shutdown"][..], &["shutdown", "--wait"]] {
        let (ok, out, _) = cli_within(&d.run_dir, args, Duration::from_secs(10));
        assert!(!ok, "`lockd {}` must fail: {out}", args.join(" "));
        for want in [
            "lockspaces still joined: ",
            "LS1",
            "LS2",
            "lockd rem-lockspace",
            "lockd shutdown -f",
            "-16",
        ] {
            assert!(
                out.contains(want),
                "`lockd {}` says {out:?}, without {want:?}",
                args.join(" ")
            );
        }
        std::thread::sleep(Duration::from_millis(300));
        assert!(!d.exited(), "the daemon must keep running");
    }
    let (ok, out) = d.cli(&["gets", "--json"]);
    assert!(ok && out.contains("LS1") && out.contains("LS2"), "{out}");
}

#[test]
fn shutdown_wait_returns_only_after_the_daemon_process_exited() {
    let tmp = scratch_dir();
    let dir = tmp.path();
    for round in 0..3 {
        let mut d = Daemon::start(dir, &format!("host{round}"));
        let (ok, out, _) = cli_within(&d.run_dir, &["shutdown", "--wait"], Duration::from_secs(20));
        assert!(ok, "shutdown --wait: {out}");
        assert!(out.contains("daemon exited"), "{out}");
        assert!(
            d.exited(),
            "round {round}: `lockd shutdown --wait` returned while the daemon process still \
             runs; log:\n{}",
            d.log_text()
        );
    }
}

/// A non-root member of the socket's group may not shut the daemon down (issue 21
/// item 3): `lockd shutdown -f` without `--wait` must report the daemon's refusal
/// (sanlock's protocol has no reply to SHUTDOWN; lockd answers a refusal) instead of
/// "shutdown requested", and the daemon keeps running.
#[test]
fn a_non_root_shutdown_reports_the_refusal() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = scratch_dir();
    let dir = tmp.path();
    let gid = lockd_config::group_to_gid("sanlock").expect(
        "group `sanlock` is missing: install the Debian package `sanlock`, which creates it",
    );
    let mut d = Daemon::start(dir, "hostA");
    for p in [dir, d.run_dir.as_path()] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534"])
        .arg(format!("--groups={gid}"))
        .args([LOCKD, "shutdown", "-f", "--run-dir"])
        .arg(&d.run_dir)
        .output()
        .expect("run setpriv lockd shutdown");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !out.status.success(),
        "the member's shutdown succeeded: {text}"
    );
    assert!(!text.contains("shutdown requested"), "{text}");
    assert!(
        text.contains("-1"),
        "the refusal's code (-EPERM) is missing: {text}"
    );
    std::thread::sleep(Duration::from_secs(1));
    assert!(
        !d.exited(),
        "the member stopped the daemon; log:\n{}",
        d.log_text()
    );
}

/// What decides a stop in packaging/systemd/lockd.service: ExecStop= (with /usr/sbin/
/// pointing at the built `lockd`), KillMode= and SendSIGKILL= (systemd's defaults when
/// absent: control-group, yes).
struct StopSettings {
    exec_stop: Vec<String>,
    kill_mode: String,
    send_sigkill: bool,
}

fn unit_stop_settings() -> StopSettings {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../packaging/systemd/lockd.service"
    );
    let text = std::fs::read_to_string(path).expect("read lockd.service");
    let mut s = StopSettings {
        exec_stop: Vec::new(),
        kill_mode: "control-group".into(),
        send_sigkill: true,
    };
    for line in text.lines().map(str::trim) {
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        match key {
            "ExecStop" => {
                s.exec_stop = value
                    .split_whitespace()
                    .map(|w| w.replace("/usr/sbin/lockd", LOCKD))
                    .collect()
            }
            "KillMode" => s.kill_mode = value.to_string(),
            "SendSIGKILL" => s.send_sigkill = !matches!(value, "no" | "false" | "0" | "off"),
            _ => {}
        }
    }
    s
}

fn signal(pid: u32, sig: &str) {
    let _ = Command::new("kill")
        .args([&format!("-{sig}"), &pid.to_string()])
        .status();
}

/// Whether `pid` runs (exists and is not a zombie).
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(") ").map(|(_, rest)| !rest.starts_with('Z')))
        .unwrap_or(false)
}

/// `systemctl stop lockd` on a host with a lease held, as systemd carries it out with the
/// unit's own settings: ExecStop, then SIGTERM (to the processes KillMode names), then —
/// after TimeoutStopSec, compressed here to 2 s — SIGKILL unless SendSIGKILL=no. The
/// daemon, its helper and the holder must all survive with the lease held (as with
/// sanlock.service), and a forced shutdown must still work afterwards.
#[test]
fn a_systemd_stop_of_a_busy_host_leaves_the_daemon_its_helper_and_the_holder_running() {
    require_root("lockd daemon kills lease holders through its helper");
    let unit = unit_stop_settings();
    assert!(!unit.exec_stop.is_empty(), "lockd.service has an ExecStop=");
    let tmp = scratch_dir();
    let dir = tmp.path();
    let img = lease_file(dir);
    let p = img.display().to_string();
    let mut d = Daemon::start(dir, "hostA");
    let daemon_pid = d.child.id();
    let helpers = lockd_system_tests::testbed::children_of(daemon_pid);
    assert_eq!(helpers.len(), 1, "the daemon has one child, its helper");
    let helper = helpers[0];
    let (ok, out) = d.cli(&["add-lockspace", "-s", &format!("ls:1:{p}:0"), "-o", "1"]);
    assert!(ok, "add-lockspace: {out}");
    let res = format!("ls:r1:{p}:1M");
    let mut holder = Killed(
        Command::new(LOCKD)
            .args(["acquire", "-r", &res, "--", "sleep", "1000"])
            .env("LOCKD_RUN_DIR", &d.run_dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start holder"),
    );
    let held = |d: &Daemon| {
        let (ok, out) = d.cli(&["leader", "-r", &res, "--json"]);
        ok && out.contains("\"host_id\": 1")
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while !held(&d) {
        assert!(Instant::now() < deadline, "holder never got the lease");
        std::thread::sleep(Duration::from_millis(100));
    }
    // ExecStop: refused, with the reason in the journal.
    let (prog, args) = unit.exec_stop.split_first().expect("ExecStop program");
    let out = Command::new(prog)
        .args(args)
        .env("LOCKD_RUN_DIR", &d.run_dir)
        .output()
        .expect("run ExecStop");
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "ExecStop must fail: {text}");
    assert!(text.contains("lockspaces still joined: ls"), "{text}");
    // The signals systemd sends next.
    let targets = |mode: &str, sigkill: bool| -> Vec<u32> {
        match (mode, sigkill) {
            ("none", _) => vec![],
            ("process", _) | ("mixed", false) => vec![daemon_pid],
            _ => vec![daemon_pid, helper],
        }
    };
    for pid in targets(&unit.kill_mode, false) {
        signal(pid, "TERM");
    }
    std::thread::sleep(Duration::from_secs(2));
    if unit.send_sigkill {
        for pid in targets(&unit.kill_mode, true) {
            signal(pid, "KILL");
        }
    }
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        !d.exited(),
        "systemd's stop killed the daemon; log:\n{}",
        d.log_text()
    );
    assert!(running(helper), "systemd's stop killed the daemon's helper");
    assert!(
        matches!(holder.0.try_wait(), Ok(None)),
        "the holder must keep running"
    );
    assert!(held(&d), "the lease must still be held");
    // The operator's way out still works: the helper kills the holder.
    let (ok, out, _) = cli_within(
        &d.run_dir,
        &["shutdown", "-f", "--wait"],
        Duration::from_secs(30),
    );
    assert!(ok, "shutdown -f --wait: {out}\nlog:\n{}", d.log_text());
    assert!(matches!(holder.0.try_wait(), Ok(Some(_))), "holder killed");
    assert!(d.exited());
}

/// During a forced shutdown that cannot kill a holder (it restricted SIGKILL and ignores
/// SIGTERM), the holder's own requests are still answered, and the daemon never closes
/// its connection, which would release its lease while it runs. Once the holder is gone,
/// the shutdown completes.
#[test]
fn a_holder_that_survives_a_forced_shutdown_keeps_its_lease_and_is_answered() {
    require_root("lockd daemon kills lease holders through its helper");
    let out = Command::new("/usr/bin/python3")
        .args(["-c", "import sanlock"])
        .output()
        .expect("run /usr/bin/python3");
    assert!(
        out.status.success(),
        "python3-sanlock is missing: install the Debian package python3-sanlock"
    );
    let tmp = scratch_dir();
    let dir = tmp.path();
    let img = lease_file(dir);
    let p = img.display().to_string();
    let mut d = Daemon::start(dir, "hostA");
    let (ok, out) = d.cli(&["add-lockspace", "-s", &format!("ls:1:{p}:0"), "-o", "1"]);
    assert!(ok, "add-lockspace: {out}");
    // The holder: `lockd acquire --restrict sigkill` execs a python that ignores SIGTERM,
    // finds its registered connection (its only socket) and, when told, asks INQUIRE on it.
    let script = "import os, sys, time, sanlock\n\
                  fds = []\n\
                  for f in os.listdir('/proc/self/fd'):\n\
                  \x20   try:\n\
                  \x20       if os.readlink('/proc/self/fd/' + f).startswith('socket:'):\n\
                  \x20           fds.append(int(f))\n\
                  \x20   except OSError:\n\
                  \x20       pass\n\
                  print('ready', fds, flush=True)\n\
                  sys.stdin.readline()\n\
                  try:\n\
                  \x20   print('inquire', sanlock.inquire(slkfd=fds[0]), flush=True)\n\
                  except Exception as e:\n\
                  \x20   print('inquire-error', e, flush=True)\n\
                  time.sleep(1000)\n";
    let res = format!("ls:r1:{p}:1M");
    let mut holder = Killed(
        Command::new(LOCKD)
            .args([
                "acquire",
                "--restrict",
                "sigkill",
                "-r",
                &res,
                "--",
                "sh",
                "-c",
            ])
            .arg("trap '' TERM; exec /usr/bin/python3 -u -c \"$0\"")
            .arg(script)
            .env("LOCKD_RUN_DIR", &d.run_dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start holder"),
    );
    let mut lines = std::io::BufReader::new(holder.0.stdout.take().expect("holder stdout"));
    let mut line = String::new();
    std::io::BufRead::read_line(&mut lines, &mut line).expect("holder output");
    assert!(line.starts_with("ready ["), "holder: {line:?}");
    let lease =
        || LeaderRecord::decode(&read_bytes(&img, 1 << 20, 512)).expect("decode resource leader");
    assert!(
        lease().owner_id == 1 && lease().timestamp != 0,
        "held by host 1"
    );
    let (ok, out) = d.cli(&["shutdown", "-f"]);
    assert!(ok, "shutdown -f: {out}");
    // Long enough for the daemon's kill attempts (SIGTERM, ignored) to start.
    std::thread::sleep(Duration::from_secs(2));
    std::io::Write::write_all(holder.0.stdin.as_mut().expect("holder stdin"), b"go\n")
        .expect("tell the holder");
    line.clear();
    std::io::BufRead::read_line(&mut lines, &mut line).expect("holder output");
    assert!(
        line.starts_with("inquire [") && line.contains("'resource': b'r1'"),
        "the holder's INQUIRE during the shutdown must be answered: {line:?}\nlog:\n{}",
        d.log_text()
    );
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        matches!(holder.0.try_wait(), Ok(None)),
        "the holder still runs"
    );
    let held = lease();
    assert!(
        held.owner_id == 1 && held.timestamp != 0,
        "the lease of a running holder must stay held: {held:?}"
    );
    assert!(!d.exited(), "the shutdown waits for the holder");
    // The holder goes: the shutdown completes.
    let _ = holder.0.kill();
    let _ = holder.0.wait();
    let deadline = Instant::now() + Duration::from_secs(15);
    while !d.exited() {
        assert!(
            Instant::now() < deadline,
            "the daemon did not finish its shutdown after the holder died; log:\n{}",
            d.log_text()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(lease().timestamp, 0, "released once its holder died");
    assert_eq!(delta_lease(&img).timestamp, 0, "delta lease released");
}
