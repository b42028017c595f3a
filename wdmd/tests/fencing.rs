//! End-to-end tests: the real `wdmd` binary with a `wdmd-emulator` device in a
//! temporary run dir, a libwdmd-style client, and a victim process standing in
//! for the simulated host.

use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use wdmd::client::{self, OpenWatchdog, WdmdClient};
use wdmd::emulator::{read_state, StateEvent};
use wdmd::monotime;

const WDMD: &str = env!("CARGO_BIN_EXE_wdmd");
const EMU: &str = env!("CARGO_BIN_EXE_wdmd-emulator");

struct Bed {
    dir: tempfile::TempDir,
    emu: Child,
    wdmd: Option<Child>,
    victim: Child,
}

fn wait_for(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn wait_exit(c: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let start = Instant::now();
    loop {
        if let Some(st) = c.try_wait().expect("try_wait") {
            return Some(st);
        }
        if start.elapsed() >= limit {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

impl Bed {
    fn new() -> Bed {
        let dir = tempfile::Builder::new()
            .prefix("wdmd-test-")
            .tempdir_in("/var/tmp")
            .expect("tempdir");
        let victim = Command::new("sleep")
            .arg("1000")
            .spawn()
            .expect("spawn victim");
        let emu = Command::new(EMU)
            .arg("--socket")
            .arg(dir.path().join("emu.sock"))
            .arg("--state")
            .arg(dir.path().join("emu.state"))
            .arg("--kill")
            .arg(format!("pid:{}", victim.id()))
            .stderr(std::fs::File::create(dir.path().join("emu.log")).expect("log"))
            .spawn()
            .expect("spawn emulator");
        let bed = Bed {
            dir,
            emu,
            wdmd: None,
            victim,
        };
        wait_for("emulator start", Duration::from_secs(10), || {
            bed.events().iter().any(|e| e.event == "start")
        });
        bed
    }

    fn run_dir(&self) -> PathBuf {
        self.dir.path().join("run")
    }

    fn wdmd_cmd(&self, fire_timeout: u32) -> Command {
        let mut c = Command::new(WDMD);
        c.arg("-D")
            .arg("--run-dir")
            .arg(self.run_dir())
            .arg("-w")
            .arg(format!(
                "emu:{}",
                self.dir.path().join("emu.sock").display()
            ))
            .arg("--fire-timeout")
            .arg(fire_timeout.to_string());
        c
    }

    fn start_wdmd_with(&mut self, mut cmd: Command) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("wdmd.log"))
            .expect("log");
        let child = cmd.stderr(log).spawn().expect("spawn wdmd");
        self.wdmd = Some(child);
        let run = self.run_dir();
        wait_for("wdmd socket", Duration::from_secs(10), || {
            WdmdClient::connect(&run).is_ok()
        });
    }

    fn start_wdmd(&mut self, fire_timeout: u32) {
        let cmd = self.wdmd_cmd(fire_timeout);
        self.start_wdmd_with(cmd);
    }

    fn client(&self) -> WdmdClient {
        WdmdClient::connect(&self.run_dir()).expect("connect")
    }

    fn events(&self) -> Vec<StateEvent> {
        read_state(&self.dir.path().join("emu.state")).unwrap_or_default()
    }

    fn event(&self, name: &str) -> Option<StateEvent> {
        self.events().into_iter().find(|e| e.event == name)
    }

    fn wdmd_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("wdmd.log")).unwrap_or_default()
    }

    fn signal_wdmd(&self, sig: &str) {
        let pid = self.wdmd.as_ref().expect("wdmd running").id();
        let st = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(pid.to_string())
            .status()
            .expect("kill");
        assert!(st.success());
    }

    fn victim_alive(&mut self) -> bool {
        self.victim.try_wait().expect("try_wait").is_none()
    }

    /// Wait for the victim to die; assert it was SIGKILLed.
    fn expect_victim_killed(&mut self, limit: Duration) {
        let st = wait_exit(&mut self.victim, limit).unwrap_or_else(|| {
            panic!(
                "victim still alive; emulator state:\n{:#?}\nwdmd log:\n{}",
                self.events(),
                self.wdmd_log()
            )
        });
        assert_eq!(st.signal(), Some(libc_sigkill()), "victim status {st:?}");
    }
}

fn libc_sigkill() -> i32 {
    9
}

impl Drop for Bed {
    fn drop(&mut self) {
        if let Some(w) = self.wdmd.as_mut() {
            let _ = w.kill();
            let _ = w.wait();
        }
        let _ = self.emu.kill();
        let _ = self.emu.wait();
        let _ = self.victim.kill();
        let _ = self.victim.wait();
    }
}

/// The sanlock 3.9 sequence, then renewals stop: wdmd closes the device
/// unclean one test interval before the expiry and the emulator fires W
/// seconds after that last ping, killing the host.
#[test]
fn stopped_renewals_lead_to_unclean_close_and_reset() {
    let w = 3;
    let mut bed = Bed::new();
    bed.start_wdmd(60);
    let mut c = bed.client();
    assert_eq!(
        c.open_watchdog(w, Duration::from_secs(5)).unwrap(),
        OpenWatchdog::Granted(w)
    );
    c.register("lockd_ls1:1").unwrap();
    c.refcount_set().unwrap();
    let st = c.status().unwrap();
    assert_eq!(st.fire_timeout, w);
    assert_eq!(st.test_interval, 1, "3.9 rule: W < 10 -> 1 s");
    assert!(st.last_keepalive > 0);

    // Renew for 4 s with expiry renewal + 5 (warning at renewal + 4, leaving
    // slack for a loaded machine): no failure, no fire.
    let mut last = 0;
    for _ in 0..4 {
        last = monotime();
        c.test_live(last, last + 5).unwrap();
        std::thread::sleep(Duration::from_secs(1));
    }
    assert!(bed.event("unclean-close").is_none(), "{:#?}", bed.events());
    assert!(bed.victim_alive());
    let dump = client::dump_debug(&bed.run_dir()).unwrap();
    let armed: Vec<_> = client::parse_dump_clients(&dump)
        .into_iter()
        .filter(|d| d.name == "lockd_ls1:1")
        .collect();
    assert_eq!(armed.len(), 1, "{dump}");
    assert_eq!(armed[0].expire, last + 5, "{dump}");
    assert!(armed[0].refcount && !armed[0].dead);
    assert_eq!(armed[0].pid, std::process::id() as i32, "SO_PEERCRED pid");

    // Stop renewing.
    let expire = last + 5;
    bed.expect_victim_killed(Duration::from_secs(15));
    let close = bed.event("unclean-close").expect("unclean close recorded");
    let fire = bed.event("fire").expect("fire recorded");
    // Close (the last ping) happens at the "test warning", one interval early.
    assert!(
        close.mono >= (expire - 1) as f64 && close.mono < expire as f64 + 0.5,
        "close at {} for expiry {expire}",
        close.mono
    );
    let delay = fire.mono - close.mono;
    assert!(
        (2.9..3.6).contains(&delay),
        "fired {delay} s after last ping"
    );
    assert!(fire.mono <= (expire + u64::from(w)) as f64 + 0.5);
    assert!(
        fire.line.contains(&format!("killed={}", bed.victim.id())),
        "{}",
        fire.line
    );
    assert!(bed.event("magic-close").is_none());
    assert!(bed.wdmd_log().contains("test warning"));
}

/// wdmd SIGKILLed while a client is armed: the device is left open-unclean and
/// fires; a new wdmd refuses to start (it must not pet again).
#[test]
fn sigkill_of_wdmd_while_armed_resets_and_restart_is_refused() {
    let w = 3;
    let mut bed = Bed::new();
    bed.start_wdmd(60);
    let mut c = bed.client();
    assert_eq!(
        c.open_watchdog(w, Duration::from_secs(5)).unwrap(),
        OpenWatchdog::Granted(w)
    );
    c.register("lockd_ls2:1").unwrap();
    c.refcount_set().unwrap();
    let now = monotime();
    c.test_live(now, now + 60).unwrap();
    c.status().unwrap();
    let t_kill = wdmd::monotime_f64();
    bed.signal_wdmd("KILL");
    let st = wait_exit(bed.wdmd.as_mut().unwrap(), Duration::from_secs(5)).expect("wdmd died");
    assert_eq!(st.signal(), Some(9));
    bed.expect_victim_killed(Duration::from_secs(10));
    let close = bed.event("unclean-close").expect("unclean close");
    let fire = bed.event("fire").expect("fire");
    assert!(close.mono >= t_kill - 0.1 && close.mono < t_kill + 1.0);
    assert!((2.9..3.6).contains(&(fire.mono - close.mono)));

    // Restart with the same run dir: refused, nothing opened.
    let opens_before = bed.events().iter().filter(|e| e.event == "open").count();
    let out = bed.wdmd_cmd(60).output().expect("run wdmd");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not cleanly stopped"), "{err}");
    let probe = Command::new(WDMD)
        .arg("--probe")
        .arg("--run-dir")
        .arg(bed.run_dir())
        .output()
        .unwrap();
    assert_eq!(probe.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&probe.stderr).contains("cannot probe"));
    assert_eq!(
        bed.events().iter().filter(|e| e.event == "open").count(),
        opens_before
    );
}

/// SIGTERM is ignored while a refcount is set; after disarm + refcount clear
/// wdmd exits cleanly with the magic close and the emulator never fires.
/// A restart afterwards is allowed.
#[test]
fn clean_sigterm_with_nothing_armed_magic_closes() {
    let w = 3;
    let mut bed = Bed::new();
    bed.start_wdmd(60);
    let mut c = bed.client();
    assert_eq!(
        c.open_watchdog(w, Duration::from_secs(5)).unwrap(),
        OpenWatchdog::Granted(w)
    );
    c.register("lockd_ls3:1").unwrap();
    c.refcount_set().unwrap();
    let now = monotime();
    c.test_live(now, now + 30).unwrap();
    c.status().unwrap();

    bed.signal_wdmd("TERM");
    std::thread::sleep(Duration::from_millis(1500));
    assert!(
        bed.wdmd.as_mut().unwrap().try_wait().unwrap().is_none(),
        "wdmd must not exit while a refcount is set"
    );
    assert!(c.status().is_ok());

    c.test_live(0, 0).unwrap();
    c.refcount_clear().unwrap();
    let st = wait_exit(bed.wdmd.as_mut().unwrap(), Duration::from_secs(5)).expect("wdmd exits");
    assert!(st.success(), "{st:?}\n{}", bed.wdmd_log());
    wait_for("magic close", Duration::from_secs(2), || {
        bed.event("magic-close").is_some()
    });
    std::thread::sleep(Duration::from_secs(u64::from(w) + 2));
    assert!(bed.event("fire").is_none(), "{:#?}", bed.events());
    assert!(bed.victim_alive());
    assert!(
        !bed.run_dir().join("wdmd.shm").exists(),
        "marker removed on clean exit"
    );
    assert!(!bed.run_dir().join("wdmd.pid").exists());

    // Clean exit leaves no guard: a new wdmd starts.
    bed.start_wdmd(60);
    let s = bed.client().status().unwrap();
    assert_eq!(s.fire_timeout, 60);
    bed.signal_wdmd("TERM");
    let st = wait_exit(bed.wdmd.as_mut().unwrap(), Duration::from_secs(5)).expect("exit");
    assert!(st.success());
}

/// A 3.8-style client (no OPEN_WATCHDOG) arms with TEST_LIVE: the device is
/// opened with --fire-timeout. Its connection then closes while armed: wdmd
/// keeps testing the last expiry, the host is reset, and SIGTERM cannot make
/// wdmd exit (refcount kept).
#[test]
fn closed_armed_connection_keeps_being_tested() {
    let mut bed = Bed::new();
    bed.start_wdmd(4);
    {
        let mut c = bed.client();
        c.register("sanlock_ls4:1").unwrap();
        c.refcount_set().unwrap();
        let s = c.status().unwrap();
        assert_eq!(s.fire_timeout, 4);
        let now = monotime();
        c.test_live(now, now + 3).unwrap();
        c.status().unwrap();
        assert!(bed.event("open").is_some());
        assert!(bed
            .events()
            .iter()
            .any(|e| e.line.starts_with("settimeout timeout=4")));
    } // connection closed while armed
    std::thread::sleep(Duration::from_millis(300));
    let dump = client::dump_debug(&bed.run_dir()).unwrap();
    let d = client::parse_dump_clients(&dump);
    assert!(
        d.iter()
            .any(|c| c.name == "sanlock_ls4:1" && c.dead && c.expire > 0),
        "{dump}"
    );
    bed.signal_wdmd("TERM");
    bed.expect_victim_killed(Duration::from_secs(15));
    assert!(bed.wdmd.as_mut().unwrap().try_wait().unwrap().is_none());
    assert!(bed.wdmd_log().contains("client dead"));
}

/// The device is magic-closed while wdmd keeps running once no client uses it
/// (3.9 behaviour), and OPEN_WATCHDOG with 0 is refused.
#[test]
fn unused_device_is_closed_cleanly() {
    let mut bed = Bed::new();
    bed.start_wdmd(60);
    {
        let mut c = bed.client();
        assert_eq!(
            c.open_watchdog(0, Duration::from_secs(5)).unwrap(),
            OpenWatchdog::Refused
        );
        assert_eq!(
            c.open_watchdog(3, Duration::from_secs(5)).unwrap(),
            OpenWatchdog::Granted(3)
        );
        // A second request with another timeout gets the one in use.
        assert_eq!(
            c.open_watchdog(7, Duration::from_secs(5)).unwrap(),
            OpenWatchdog::Granted(3)
        );
        c.register("short").unwrap();
    }
    wait_for("magic close", Duration::from_secs(3), || {
        bed.event("magic-close").is_some()
    });
    std::thread::sleep(Duration::from_secs(4));
    assert!(bed.event("fire").is_none());
    assert!(bed.wdmd.as_mut().unwrap().try_wait().unwrap().is_none());
}

/// A failing test script stops the keepalives even though the client renews.
#[test]
fn failing_script_stops_keepalive() {
    use std::os::unix::fs::PermissionsExt;
    let mut bed = Bed::new();
    let scripts = bed.dir.path().join("wdmd.d");
    std::fs::create_dir(&scripts).unwrap();
    let flag = bed.dir.path().join("healthy");
    std::fs::write(&flag, "").unwrap();
    let script = scripts.join("check");
    std::fs::write(&script, format!("#!/bin/sh\ntest -e {}\n", flag.display())).unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut cmd = bed.wdmd_cmd(60);
    cmd.arg("-S").arg("1").arg("-s").arg(&scripts);
    bed.start_wdmd_with(cmd);
    let mut c = bed.client();
    assert_eq!(
        c.open_watchdog(3, Duration::from_secs(5)).unwrap(),
        OpenWatchdog::Granted(3)
    );
    c.register("lockd_ls5:1").unwrap();
    c.refcount_set().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut removed = false;
    let start = Instant::now();
    while bed.victim_alive() {
        assert!(Instant::now() < deadline, "no reset: {:#?}", bed.events());
        let now = monotime();
        let _ = c.test_live(now, now + 30);
        if !removed && start.elapsed() > Duration::from_secs(3) {
            assert!(bed.event("unclean-close").is_none(), "{:#?}", bed.events());
            std::fs::remove_file(&flag).unwrap();
            removed = true;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(removed);
    assert!(bed.event("fire").is_some());
    let dump = client::dump_debug(&bed.run_dir()).unwrap();
    assert!(dump.contains("script 0 name check"), "{dump}");
}

/// The plain CLI: --dump prints the header line, a bad device makes --probe fail.
#[test]
fn cli_dump_and_probe() {
    let mut bed = Bed::new();
    bed.start_wdmd(60);
    let out = Command::new(WDMD)
        .arg("--dump")
        .env("WDMD_RUN_DIR", bed.run_dir())
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("wdmd "), "{text}");
    assert!(text.contains("fire_timeout 60"), "{text}");

    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let probe = Command::new(WDMD)
        .arg("--probe")
        .arg("--run-dir")
        .arg(dir.path())
        .arg("-w")
        .arg("/nonexistent/watchdog")
        .output()
        .unwrap();
    assert_eq!(probe.status.code(), Some(1));
    let mut err = String::new();
    probe.stderr.as_slice().read_to_string(&mut err).unwrap();
    assert!(err.contains("no usable watchdog device"), "{err}");

    // An emulated device probes fine and is left disarmed.
    let emu_dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let sock = emu_dir.path().join("e.sock");
    let state = emu_dir.path().join("e.state");
    let mut emu = Command::new(EMU)
        .arg("--socket")
        .arg(&sock)
        .arg("--state")
        .arg(&state)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for("emu", Duration::from_secs(5), || state_has(&state, "start"));
    let probe = Command::new(WDMD)
        .arg("--probe")
        .arg("--run-dir")
        .arg(dir.path())
        .arg("-w")
        .arg(format!("emu:{}", sock.display()))
        .arg("--fire-timeout")
        .arg("5")
        .output()
        .unwrap();
    assert!(probe.status.success(), "{probe:?}");
    assert_eq!(
        String::from_utf8_lossy(&probe.stdout).trim(),
        format!("emu:{}", sock.display())
    );
    wait_for("probe magic close", Duration::from_secs(3), || {
        state_has(&state, "magic-close")
    });
    let _ = emu.kill();
    let _ = emu.wait();
}

fn state_has(p: &Path, ev: &str) -> bool {
    read_state(p)
        .map(|v| v.iter().any(|e| e.event == ev))
        .unwrap_or(false)
}

/// A client fails (device closed unclean), then disarms: the failure is over,
/// so a SIGTERM reopens the device and magic-closes it; nothing fires.
#[test]
fn disarm_after_failure_then_sigterm_is_clean() {
    let w = 3;
    let mut bed = Bed::new();
    bed.start_wdmd(60);
    let mut c = bed.client();
    assert_eq!(
        c.open_watchdog(w, Duration::from_secs(5)).unwrap(),
        OpenWatchdog::Granted(w)
    );
    c.register("lockd_ls6:1").unwrap();
    c.refcount_set().unwrap();
    let now = monotime();
    c.test_live(now.saturating_sub(10), now).unwrap();
    wait_for("unclean close", Duration::from_secs(5), || {
        bed.event("unclean-close").is_some()
    });
    c.test_live(0, 0).unwrap();
    c.refcount_clear().unwrap();
    c.status().unwrap();
    bed.signal_wdmd("TERM");
    let st = wait_exit(bed.wdmd.as_mut().unwrap(), Duration::from_secs(5)).expect("wdmd exits");
    assert!(st.success(), "{st:?}\n{}", bed.wdmd_log());
    wait_for("magic close", Duration::from_secs(2), || {
        bed.event("magic-close").is_some()
    });
    assert_eq!(bed.events().iter().filter(|e| e.event == "open").count(), 2);
    std::thread::sleep(Duration::from_secs(u64::from(w) + 1));
    assert!(bed.event("fire").is_none(), "{:#?}", bed.events());
    assert!(bed.victim_alive());
}

/// The emulator resets a whole simulated host living in its own PID namespace
/// (`unshare -pf`), wdmd included: every process of the namespace is killed.
#[test]
fn reset_kills_a_whole_pid_namespace_including_wdmd() {
    let dir = tempfile::Builder::new()
        .prefix("wdmd-pidns-")
        .tempdir_in("/var/tmp")
        .unwrap();
    let d = dir.path();
    let go = d.join("go");
    let run = d.join("run");
    let script = format!(
        "while [ ! -e {go} ]; do sleep 0.05; done\n\
         {wdmd} -D --run-dir {run} -w emu:{sock} 2>{log} &\n\
         sleep 1000 &\n\
         wait\n",
        go = go.display(),
        wdmd = WDMD,
        run = run.display(),
        sock = d.join("emu.sock").display(),
        log = d.join("wdmd.log").display(),
    );
    let mut host = Command::new("unshare")
        .args(["-pf", "sh", "-c", &script])
        .stderr(Stdio::null())
        .spawn()
        .expect("unshare");
    // The namespace's init is unshare's child.
    let children = format!("/proc/{0}/task/{0}/children", host.id());
    let mut init = 0;
    wait_for("namespace init", Duration::from_secs(5), || {
        init = std::fs::read_to_string(&children)
            .ok()
            .and_then(|s| s.split_whitespace().next().and_then(|p| p.parse().ok()))
            .unwrap_or(0);
        init > 0
    });
    // If an assertion fails, still end the simulated host (its init's death
    // kills the whole namespace).
    struct KillOnDrop(i32);
    impl Drop for KillOnDrop {
        fn drop(&mut self) {
            // Never "kill -9 0" (that is our own process group).
            if self.0 > 1 {
                let _ = Command::new("kill")
                    .arg("-9")
                    .arg(self.0.to_string())
                    .stderr(Stdio::null())
                    .status();
            }
        }
    }
    let mut guard = KillOnDrop(init);
    let state = d.join("emu.state");
    let mut emu = Command::new(EMU)
        .arg("--socket")
        .arg(d.join("emu.sock"))
        .arg("--state")
        .arg(&state)
        .arg("--kill")
        .arg(format!("pidns:{init}"))
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for("emu", Duration::from_secs(5), || state_has(&state, "start"));
    std::fs::write(&go, "").unwrap();
    wait_for("wdmd in namespace", Duration::from_secs(10), || {
        WdmdClient::connect(&run).is_ok()
    });
    let ns_pids = |init: i32| -> Vec<i32> {
        let ns = std::fs::read_link(format!("/proc/{init}/ns/pid")).ok();
        std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
            .filter(|p| ns.is_some() && std::fs::read_link(format!("/proc/{p}/ns/pid")).ok() == ns)
            .collect()
    };
    let before = ns_pids(init);
    assert!(before.len() >= 3, "init, wdmd, sleep: {before:?}");
    let mut c = WdmdClient::connect(&run).unwrap();
    assert_eq!(
        c.open_watchdog(3, Duration::from_secs(5)).unwrap(),
        OpenWatchdog::Granted(3)
    );
    c.register("lockd_ns:1").unwrap();
    c.refcount_set().unwrap();
    let now = monotime();
    c.test_live(now, now + 2).unwrap();
    let st = wait_exit(&mut host, Duration::from_secs(15)).expect("host reset");
    assert!(!st.success());
    guard.0 = 0; // the namespace is gone; don't signal a recycled pid
    assert!(state_has(&state, "fire"));
    for p in before {
        assert!(
            !Path::new(&format!("/proc/{p}")).exists()
                || std::fs::read_to_string(format!("/proc/{p}/stat"))
                    .map(|s| s.contains(") Z "))
                    .unwrap_or(true),
            "pid {p} survived the reset"
        );
    }
    let _ = emu.kill();
    let _ = emu.wait();
}

/// A 3.8-style client when the device cannot be opened: STATUS reports
/// fire_timeout 0 (sanlock then fails the lockspace instead of running
/// unprotected). An emulated -w never falls back to /dev/watchdog*.
#[test]
fn status_reports_zero_when_the_device_cannot_be_opened() {
    let mut bed = Bed::new();
    let mut cmd = Command::new(WDMD);
    cmd.arg("-D")
        .arg("--run-dir")
        .arg(bed.run_dir())
        .arg("-w")
        .arg(format!(
            "emu:{}",
            bed.dir.path().join("missing.sock").display()
        ));
    bed.start_wdmd_with(cmd);
    let mut c = bed.client();
    c.register("sanlock_ls7:1").unwrap();
    c.refcount_set().unwrap();
    assert_eq!(c.status().unwrap().fire_timeout, 0);
    let mut other = bed.client();
    assert_eq!(
        other.open_watchdog(3, Duration::from_secs(5)).unwrap(),
        OpenWatchdog::Refused
    );
    assert!(bed.wdmd_log().contains("cannot open the watchdog"));
    assert!(bed.event("open").is_none());
}
