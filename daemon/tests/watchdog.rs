//! lockd ↔ wdmd: a lockspace is armed in wdmd from the moment it is joined, re-armed after
//! every renewal with expiry = renewal + 8·io_timeout, disarmed when it is left, and a
//! daemon killed while armed gets its host reset by the (emulated) watchdog. Without a
//! working wdmd, `-w 1` refuses to join (SANLK_WD_ERROR), as sanlock does.
//!
//! Uses the workspace's `wdmd` and `wdmd-emulator` binaries (built by
//! `cargo test --workspace`; a missing one fails with a message).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use wdmd::client::{dump_debug, parse_dump_clients, DumpClient};

const FIRE_S: u32 = 5;

fn sibling_bin(name: &str) -> PathBuf {
    let p = Path::new(DAEMON).with_file_name(name);
    assert!(
        p.exists(),
        "{} is missing: build the workspace binaries (cargo test --workspace builds them)",
        p.display()
    );
    p
}

struct Kid(Child);
impl Drop for Kid {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// An emulated watchdog that kills `victim` when it fires, and a wdmd using it.
struct Watchdog {
    dir: PathBuf,
    wdmd_run: PathBuf,
    _emulator: Kid,
    wdmd: Kid,
}

impl Watchdog {
    fn start(s: &Scratch, victim: u32) -> Watchdog {
        let dir = s.dir.join("wd");
        std::fs::create_dir_all(&dir).unwrap();
        let wdmd_run = dir.join("wdmd");
        let emulator = Kid(Command::new(sibling_bin("wdmd-emulator"))
            .arg("--socket")
            .arg(dir.join("emu.sock"))
            .arg("--state")
            .arg(dir.join("emu.state"))
            .args([
                "--timeout",
                &FIRE_S.to_string(),
                "--kill",
                &format!("pid:{victim}"),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start wdmd-emulator"));
        assert!(
            wait_for(10, || dir.join("emu.sock").exists()),
            "emulator socket"
        );
        let wdmd = Kid(Command::new(sibling_bin("wdmd"))
            .arg("-D")
            .arg("-w")
            .arg(format!("emu:{}", dir.join("emu.sock").display()))
            .args(["--fire-timeout", &FIRE_S.to_string(), "--run-dir"])
            .arg(&wdmd_run)
            .arg("--marker")
            .arg(dir.join("wdmd.shm"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("wdmd.log")).unwrap())
            .spawn()
            .expect("start wdmd"));
        assert!(
            wait_for(10, || wdmd_run.join("wdmd.sock").exists()),
            "wdmd socket"
        );
        Watchdog {
            dir,
            wdmd_run,
            _emulator: emulator,
            wdmd,
        }
    }

    fn lockd_clients(&self) -> Vec<DumpClient> {
        let text = dump_debug(&self.wdmd_run).expect("wdmd dump");
        parse_dump_clients(&text)
            .into_iter()
            .filter(|c| c.name.starts_with("lockd_"))
            .collect()
    }

    fn state(&self) -> String {
        std::fs::read_to_string(self.dir.join("emu.state")).unwrap_or_default()
    }
}

fn config(s: &Scratch, wdmd_run: &Path) -> PathBuf {
    let p = s.dir.join("lockd-wd.toml");
    std::fs::write(
        &p,
        format!(
            "watchdog_fire_timeout = {FIRE_S}\nwdmd_run_dir = \"{}\"\n",
            wdmd_run.display()
        ),
    )
    .unwrap();
    p
}

fn add_lockspace(d: &LockdDaemon, spec: &str) -> String {
    stdout(&d.sanlock_client(&["add_lockspace", "-o", "1", "-s", spec]))
}

#[test]
fn no_wdmd_means_no_join() {
    require_tool("sanlock", "sanlock");
    let s = Scratch::new("wd-none");
    let img = s.file("ls.img", 2);
    init_lockspace("wdls", &img, 0);
    let cfg = config(&s, &s.dir.join("no-wdmd-here"));
    let d = LockdDaemon::start_args(&s, "hostW", &["-w", "1", "-c", cfg.to_str().unwrap()], &[]);
    let out = add_lockspace(&d, &format!("wdls:1:{}:0", img.display()));
    assert!(
        out.contains("done -203"),
        "expected SANLK_WD_ERROR: {out}\n{}",
        d.log_text()
    );
    let dump = Command::new("sanlock")
        .args(["direct", "dump", &img.display().to_string()])
        .output()
        .unwrap();
    // Nothing joined: no host record carries a timestamp.
    assert!(!String::from_utf8_lossy(&dump.stdout).contains("hostW"));
}

/// io_timeout 1 with W = 60: wdmd tests every 10 s and counts an expiry within one
/// interval as a failure, and the expiry is only 8 s ahead, so a healthy host would be
/// reset. The join is refused (-EINVAL) before wdmd is even asked, with a log line that
/// says why; io_timeout 2 gets past that check (and then meets the missing wdmd).
#[test]
fn an_io_timeout_the_watchdog_cannot_test_is_refused() {
    require_tool("sanlock", "sanlock");
    let s = Scratch::new("wd-fit");
    let img = s.file("ls.img", 2);
    init_lockspace("wdls", &img, 0);
    let cfg = s.dir.join("w60.toml");
    std::fs::write(
        &cfg,
        format!(
            "watchdog_fire_timeout = 60\nwdmd_run_dir = \"{}\"\n",
            s.dir.join("no-wdmd-here").display()
        ),
    )
    .unwrap();
    let d = LockdDaemon::start_args(&s, "hostW", &["-w", "1", "-c", cfg.to_str().unwrap()], &[]);
    let spec = format!("wdls:1:{}:0", img.display());
    let out = add_lockspace(&d, &spec);
    assert!(out.contains("done -22"), "{out}\n{}", d.log_text());
    assert!(
        d.log_text()
            .contains("io_timeout too short for this watchdog fire timeout"),
        "{}",
        d.log_text()
    );
    let out = stdout(&d.sanlock_client(&["add_lockspace", "-o", "2", "-s", &spec]));
    assert!(
        out.contains("done -203"),
        "io_timeout 2 passes the check: {out}"
    );
}

#[test]
fn lockspace_is_armed_renewed_and_disarmed() {
    require_tool("sanlock", "sanlock");
    let s = Scratch::new("wd-arm");
    let img = s.file("ls.img", 2);
    init_lockspace("wdls", &img, 0);
    let victim = Kid(Command::new("sleep").arg("1000").spawn().unwrap());
    let wd = Watchdog::start(&s, victim.0.id());
    let cfg = config(&s, &wd.wdmd_run);
    let mut d =
        LockdDaemon::start_args(&s, "hostW", &["-w", "1", "-c", cfg.to_str().unwrap()], &[]);
    let spec = format!("wdls:1:{}:0", img.display());
    let out = add_lockspace(&d, &spec);
    assert!(out.contains("done 0"), "{out}\n{}", d.log_text());

    let c = wd.lockd_clients();
    assert_eq!(c.len(), 1, "one wdmd connection per lockspace: {c:?}");
    assert_eq!(c[0].name, "lockd_wdls:1");
    assert!(c[0].refcount, "refcount set while joined");
    assert!(c[0].renewal > 0);
    assert_eq!(
        c[0].expire,
        c[0].renewal + 8,
        "expiry = renewal + 8·io_timeout"
    );
    let first = c[0].renewal;
    assert!(
        wait_for(8, || wd
            .lockd_clients()
            .first()
            .is_some_and(|c| c.renewal > first)),
        "renewals re-arm wdmd"
    );

    let out = stdout(&d.sanlock_client(&["rem_lockspace", "-s", &spec]));
    assert!(out.contains("done 0"), "{out}");
    assert!(
        wait_for(5, || wd.lockd_clients().iter().all(|c| c.expire == 0)),
        "left lockspace is disarmed: {:?}",
        wd.lockd_clients()
    );
    d.stop();
    // Nothing armed: a clean wdmd stop magic-closes the device and nothing fires.
    let pid = wd.wdmd.0.id();
    run(Command::new("kill").args(["-TERM", &pid.to_string()]));
    let mut wd = wd;
    let deadline = Instant::now() + Duration::from_secs(10);
    while wd.wdmd.0.try_wait().unwrap().is_none() {
        assert!(
            Instant::now() < deadline,
            "wdmd did not exit on SIGTERM with nothing armed"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(u64::from(FIRE_S) + 1));
    let state = wd.state();
    assert!(
        !state.contains("fire "),
        "nothing armed, nothing fires: {state}"
    );
    assert!(state.contains("magic-close"), "{state}");
    drop(victim);
}

#[test]
fn daemon_killed_while_armed_gets_the_host_reset() {
    require_tool("sanlock", "sanlock");
    let s = Scratch::new("wd-kill");
    let img = s.file("ls.img", 2);
    init_lockspace("wdls", &img, 0);
    let mut victim = Kid(Command::new("sleep").arg("1000").spawn().unwrap());
    let wd = Watchdog::start(&s, victim.0.id());
    let cfg = config(&s, &wd.wdmd_run);
    let mut d =
        LockdDaemon::start_args(&s, "hostW", &["-w", "1", "-c", cfg.to_str().unwrap()], &[]);
    let out = add_lockspace(&d, &format!("wdls:1:{}:0", img.display()));
    assert!(out.contains("done 0"), "{out}");
    let killed_at = Instant::now();
    run(Command::new("kill").args(["-KILL", &d.pid().to_string()]));
    // Expiry is at most 8 s away; the device fires W after wdmd's last pet.
    let limit = Duration::from_secs(8 + u64::from(FIRE_S) + 3);
    let mut fired = false;
    while killed_at.elapsed() < limit {
        if victim.0.try_wait().unwrap().is_some() {
            fired = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        fired,
        "the host was not reset within {limit:?}: {}",
        wd.state()
    );
    assert!(wd.state().contains("fire "), "{}", wd.state());
    d.stop();
}
