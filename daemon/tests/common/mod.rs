//! Shared helpers for the daemon's system tests: scratch storage under /var/tmp (O_DIRECT
//! does not work on tmpfs), loop devices that are always detached, a lockd daemon child
//! that is always stopped by its PID, and the real Debian sanlock tools as clients.
//!
//! A missing tool fails the test with a message naming the package to install; nothing
//! is skipped silently.
#![allow(dead_code)]

pub mod sid;

pub use lockd_system_tests::FaultFs;

use std::io::{BufRead, BufReader};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub const DAEMON: &str = env!("CARGO_BIN_EXE_lockd-daemon");
pub const PYTHON: &str = "/usr/bin/python3";

/// Fails loudly unless `tool` is on PATH.
pub fn require_tool(tool: &str, package: &str) {
    let ok = Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {tool}"))
        .stdout(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    assert!(
        ok,
        "required tool `{tool}` is missing: install the Debian package `{package}`"
    );
}

/// Fails loudly unless the real python3-sanlock binding is importable.
pub fn require_python_sanlock() {
    let out = Command::new(PYTHON)
        .args(["-c", "import sanlock"])
        .output()
        .unwrap_or_else(|e| panic!("{PYTHON} cannot run ({e}): install `python3`"));
    assert!(
        out.status.success(),
        "python3-sanlock is missing (`import sanlock` failed: {}): install the Debian package \
         `python3-sanlock`",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A scratch directory under /var/tmp, removed on drop.
pub struct Scratch {
    pub dir: PathBuf,
}

impl Scratch {
    pub fn new(tag: &str) -> Scratch {
        let dir = PathBuf::from(format!("/var/tmp/lockd-test-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create scratch dir under /var/tmp");
        Scratch { dir }
    }

    /// A zero-filled file of `mib` MiB.
    pub fn file(&self, name: &str, mib: u64) -> PathBuf {
        let p = self.dir.join(name);
        let f = std::fs::File::create(&p).expect("create disk file");
        f.set_len(mib << 20).expect("size disk file");
        p
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A loop device over a file, detached on drop.
pub struct Loop {
    pub dev: PathBuf,
}

impl Loop {
    pub fn attach(file: &Path) -> Loop {
        require_tool("losetup", "mount");
        let out = Command::new("losetup")
            .args(["-f", "--show"])
            .arg(file)
            .output()
            .expect("run losetup");
        assert!(
            out.status.success(),
            "losetup -f --show failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let dev = String::from_utf8_lossy(&out.stdout).trim().to_string();
        assert!(
            dev.starts_with("/dev/loop"),
            "unexpected losetup output {dev:?}"
        );
        Loop {
            dev: PathBuf::from(dev),
        }
    }
}

impl Drop for Loop {
    fn drop(&mut self) {
        let _ = Command::new("losetup").arg("-d").arg(&self.dev).status();
    }
}

/// Runs a command, returning its output; panics if it cannot start.
pub fn run(cmd: &mut Command) -> Output {
    cmd.output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"))
}

/// `sanlock direct init -s NAME:0:PATH:OFFSET -o 1`.
pub fn init_lockspace(name: &str, path: &Path, offset: u64) {
    require_tool("sanlock", "sanlock");
    let out = run(Command::new("sanlock").args([
        "direct",
        "init",
        "-s",
        &format!("{name}:0:{}:{offset}", path.display()),
        "-o",
        "1",
    ]));
    assert!(
        out.status.success(),
        "sanlock direct init -s failed: {out:?}"
    );
}

/// `sanlock direct init -r LS:RES:PATH:OFFSET`.
pub fn init_resource(ls: &str, res: &str, path: &Path, offset: u64) {
    let out = run(Command::new("sanlock").args([
        "direct",
        "init",
        "-r",
        &format!("{ls}:{res}:{}:{offset}", path.display()),
    ]));
    assert!(
        out.status.success(),
        "sanlock direct init -r failed: {out:?}"
    );
}

/// A running lockd daemon, stopped (by PID) on drop.
pub struct LockdDaemon {
    pub child: Child,
    pub run_dir: PathBuf,
    pub log: PathBuf,
}

impl LockdDaemon {
    pub fn start(scratch: &Scratch, host_name: &str, extra_env: &[(&str, &str)]) -> LockdDaemon {
        LockdDaemon::start_args(scratch, host_name, &[], extra_env)
    }

    pub fn start_args(
        scratch: &Scratch,
        host_name: &str,
        extra_args: &[&str],
        extra_env: &[(&str, &str)],
    ) -> LockdDaemon {
        let run_dir = scratch.dir.join(format!("run-{host_name}"));
        let log = scratch.dir.join(format!("lockd-{host_name}.log"));
        let logf = std::fs::File::create(&log).expect("create daemon log");
        let mut cmd = Command::new(DAEMON);
        // -w 0 unless the test chooses the watchdog itself; -c /dev/null unless it gives a
        // config of its own.
        if !extra_args.contains(&"-w") {
            cmd.args(["-w", "0"]);
        }
        if !extra_args.contains(&"-c") {
            cmd.args(["-c", "/dev/null"]);
        }
        cmd.args(["-D", "-e", host_name, "-o", "1", "--run-dir"])
            .arg(&run_dir)
            .args(extra_args)
            .env("LOCKD_LOG", "debug")
            .stdin(Stdio::null())
            .stdout(logf.try_clone().expect("dup log"))
            .stderr(logf);
        for (k, v) in extra_env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().expect("start lockd-daemon");
        let d = LockdDaemon {
            child,
            run_dir,
            log,
        };
        d.wait_socket();
        d
    }

    fn wait_socket(&self) {
        let sock = self.run_dir.join("sanlock.sock");
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if UnixStream::connect(&sock).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!(
            "lockd socket {} never appeared; log:\n{}",
            sock.display(),
            self.log_text()
        );
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Environment for sanlock clients talking to this daemon.
    pub fn client_env(&self) -> (String, String) {
        ("SANLOCK_RUN_DIR".into(), self.run_dir.display().to_string())
    }

    /// Runs `sanlock client ARGS` against this daemon.
    pub fn sanlock_client(&self, args: &[&str]) -> Output {
        run(Command::new("sanlock")
            .arg("client")
            .args(args)
            .env("SANLOCK_RUN_DIR", &self.run_dir))
    }

    /// Runs a python3-sanlock script against this daemon; returns stdout, panics on failure.
    pub fn python(&self, script: &str) -> String {
        let out = run(Command::new(PYTHON)
            .args(["-c", script])
            .env("SANLOCK_RUN_DIR", &self.run_dir));
        assert!(
            out.status.success(),
            "python client failed: {}\nstdout: {}\ndaemon log tail:\n{}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout),
            tail(&self.log_text(), 40)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Starts a long-running python client; its stdout lines can be read with `PyChild`.
    pub fn python_child(&self, script: &str) -> PyChild {
        PyChild::spawn(script, &self.run_dir)
    }

    /// Stops the daemon: a forced SHUTDOWN (removes lockspaces, SIGKILLs holders), then
    /// SIGKILL by PID after 20 s.
    pub fn stop(&mut self) {
        if let Ok(Some(_)) = self.child.try_wait() {
            return;
        }
        if let Ok(mut c) = client_lib::Client::connect(&self.run_dir) {
            let _ = c.shutdown(true, false);
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for LockdDaemon {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Runs a python3-sanlock script against the daemon whose run dir is `run_dir` (lockd's
/// or sanlock's); returns its trimmed stdout, panics with its stderr on failure.
pub fn python_in(run_dir: &Path, script: &str) -> String {
    let out = run(Command::new(PYTHON)
        .args(["-c", script])
        .env("SANLOCK_RUN_DIR", run_dir));
    assert!(
        out.status.success(),
        "python client failed: {}
script:
{script}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A python client process, killed (by PID) on drop.
pub struct PyChild {
    pub child: Child,
    pub stdout: BufReader<std::process::ChildStdout>,
}

impl PyChild {
    /// Starts a long-running python client of the daemon whose run dir is `run_dir`.
    pub fn spawn(script: &str, run_dir: &Path) -> PyChild {
        let mut child = Command::new(PYTHON)
            .args(["-u", "-c", script])
            .env("SANLOCK_RUN_DIR", run_dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start python client");
        let stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        PyChild { child, stdout }
    }

    /// Next line of output (panics at EOF).
    pub fn line(&mut self) -> String {
        let mut s = String::new();
        let n = self.stdout.read_line(&mut s).expect("read python output");
        assert!(n > 0, "python client exited early");
        s.trim_end().to_string()
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for PyChild {
    fn drop(&mut self) {
        self.kill9();
    }
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Polls `f` every 100 ms until it returns true or `secs` pass.
pub fn wait_for(secs: u64, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

/// REM_LOCKSPACE once the test's own lease holders are gone: a plain REM_LOCKSPACE kills
/// the holders that remain (SIGKILL from the monitor's next tick, as sanlock), and the
/// holders are this test process, so closing their connections and removing at once
/// raced the daemon's releases of those connections (the test process was killed once
/// in CI). Asks with `SANLK_REM_UNUSED`, which is refused -EBUSY while a lease of the
/// lockspace is held, until it is answered otherwise (at most 30 s); returns that answer.
pub fn rem_lockspace_when_unused(c: &mut client_lib::Client, ls: &client_lib::Lockspace) -> i32 {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let rv = c
            .rem_lockspace(ls, client_lib::proto::SANLK_REM_UNUSED)
            .expect("REM_LOCKSPACE");
        if rv != -libc::EBUSY || Instant::now() >= deadline {
            return rv;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A real `sanlock daemon -D -w 0` with a private run dir, stopped by PID on drop.
pub struct SanlockDaemon {
    pub child: Child,
    pub run_dir: std::path::PathBuf,
}

impl SanlockDaemon {
    pub fn start(s: &Scratch, host_name: &str) -> SanlockDaemon {
        require_tool("sanlock", "sanlock");
        let run_dir = s.dir.join("run-sanlock");
        std::fs::create_dir_all(&run_dir).expect("sanlock run dir");
        let log = std::fs::File::create(s.dir.join("sanlock.log")).expect("sanlock log");
        let child = Command::new("sanlock")
            .args(["daemon", "-D", "-w", "0", "-e", host_name])
            .env("SANLOCK_RUN_DIR", &run_dir)
            .env("SANLOCK_PRIVILEGED", "0")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("dup"))
            .stderr(log)
            .spawn()
            .expect("start sanlock daemon");
        let sock = run_dir.join("sanlock.sock");
        assert!(
            wait_for(10, || std::os::unix::net::UnixStream::connect(&sock)
                .is_ok()),
            "sanlock daemon socket never appeared"
        );
        SanlockDaemon { child, run_dir }
    }

    pub fn python(&self, script: &str) -> String {
        let out = run(Command::new(PYTHON)
            .args(["-c", script])
            .env("SANLOCK_RUN_DIR", &self.run_dir));
        assert!(
            out.status.success(),
            "python client (sanlock side) failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub fn client(&self, args: &[&str]) -> String {
        stdout(&run(Command::new("sanlock")
            .arg("client")
            .args(args)
            .env("SANLOCK_RUN_DIR", &self.run_dir)))
    }
}

impl Drop for SanlockDaemon {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        if !wait_for(10, || matches!(self.child.try_wait(), Ok(Some(_)))) {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// Both daemons join lockspace `ls` on `dev` (sanlock host 1, lockd host 2) in parallel, at
/// io_timeout 1.
pub fn join_sanlock_and_lockd(sl: &SanlockDaemon, lk: &LockdDaemon, dev: &str) {
    let add = |host: u64| {
        format!("import sanlock\nsanlock.add_lockspace(b'ls', {host}, b'{dev}', 0, iotimeout=1)\nprint('joined')\n")
    };
    let t = {
        let script = add(1);
        let run_dir = sl.run_dir.clone();
        std::thread::spawn(move || {
            run(Command::new(PYTHON)
                .args(["-c", &script])
                .env("SANLOCK_RUN_DIR", run_dir))
        })
    };
    assert_eq!(lk.python(&add(2)).trim(), "joined");
    let out = t.join().expect("join thread");
    assert!(out.status.success(), "sanlock add_lockspace: {out:?}");
}

/// The `lockd` CLI, built next to the daemon by `cargo build --workspace --bins`.
pub fn lockd_cli() -> PathBuf {
    let p = Path::new(DAEMON).with_file_name("lockd");
    assert!(
        p.exists(),
        "{} is missing: run `cargo build -p lockd-tools --bin lockd` first",
        p.display()
    );
    p
}

/// lockd-faultfs over `backing` at `s.dir/view-NAME` (the system-tests crate's [`FaultFs`]).
pub fn faultfs(s: &Scratch, name: &str, backing: &Path) -> FaultFs {
    FaultFs::start(
        &s.dir,
        name,
        backing,
        Path::new(DAEMON).parent().expect("bin dir"),
    )
}
