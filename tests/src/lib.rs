//! Shared helpers for system tests: scratch space on a filesystem that supports
//! O_DIRECT, loop devices, and real sanlock processes.
//!
//! Every helper that needs something from the machine (root, a command, a loop device)
//! fails the test with a message naming what is missing: a silent skip would be a pass
//! that never happened. Everything attached or started is detached or stopped on drop,
//! by device name or PID.

pub mod chaos_client;
pub mod module_graph;
pub mod testbed;
pub mod witness;

use std::ffi::OsStr;
use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

pub use tempfile::TempDir;

/// Fails the test unless running as root.
pub fn require_root(why: &str) {
    let out = Command::new("id").arg("-u").output().expect("run id -u");
    let uid = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert_eq!(uid, "0", "this test needs root ({why}); CI runs as root");
}

/// Fails the test unless `cmd` is on PATH.
pub fn require_command(cmd: &str, package: &str) -> PathBuf {
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {cmd}"))
        .output()
        .expect("run sh");
    let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(
        out.status.success() && !path.is_empty(),
        "this test needs `{cmd}` (apt-get install {package}); .ci/run installs it"
    );
    PathBuf::from(path)
}

/// A scratch directory under /var/tmp (ext4 here: O_DIRECT works; /tmp may be tmpfs).
pub fn scratch_dir() -> TempDir {
    tempfile::Builder::new()
        .prefix("lockd-test-")
        .tempdir_in("/var/tmp")
        .expect("create a scratch dir in /var/tmp")
}

/// Creates a sparse file of `bytes` bytes.
pub fn sparse_file(dir: &Path, name: &str, bytes: u64) -> PathBuf {
    let path = dir.join(name);
    let f = fs::File::create(&path).expect("create scratch file");
    f.set_len(bytes).expect("size scratch file");
    path
}

/// Runs a command and returns its output; panics with the command line if it cannot start.
pub fn run<I, S>(program: impl AsRef<OsStr>, args: I) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let program = program.as_ref();
    let args: Vec<_> = args
        .into_iter()
        .map(|a| a.as_ref().to_os_string())
        .collect();
    Command::new(program)
        .args(&args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program:?} {args:?}: {e}"))
}

/// Runs a command that must succeed; returns stdout.
pub fn run_ok<I, S>(program: impl AsRef<OsStr>, args: I) -> String
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let program = program.as_ref().to_os_string();
    let args: Vec<_> = args
        .into_iter()
        .map(|a| a.as_ref().to_os_string())
        .collect();
    let out = run(&program, &args);
    assert!(
        out.status.success(),
        "{program:?} {args:?} failed ({}):\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Reads a whole file (through the page cache; callers compare formatted bytes).
pub fn read_bytes(path: &Path, offset: u64, len: usize) -> Vec<u8> {
    use std::io::{Seek, SeekFrom};
    let mut f = fs::File::open(path).expect("open for compare");
    f.seek(SeekFrom::Start(offset)).expect("seek");
    let mut buf = vec![0u8; len];
    f.read_exact(&mut buf).expect("read for compare");
    buf
}

/// A loop device over a file, detached on drop.
pub struct LoopDevice {
    pub device: PathBuf,
}

impl LoopDevice {
    /// Attaches `file` with the given logical sector size (512 or 4096).
    pub fn attach(file: &Path, sector_size: u32) -> LoopDevice {
        require_root("losetup");
        require_command("losetup", "mount");
        let out = run(
            "losetup",
            [
                OsStr::new("-f"),
                OsStr::new("--show"),
                OsStr::new("--direct-io=on"),
                OsStr::new("--sector-size"),
                OsStr::new(&sector_size.to_string()),
                file.as_os_str(),
            ],
        );
        assert!(
            out.status.success(),
            "losetup failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let device = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        LoopDevice { device }
    }
}

impl Drop for LoopDevice {
    fn drop(&mut self) {
        let _ = Command::new("losetup").arg("-d").arg(&self.device).status();
    }
}

/// A real `sanlock daemon -D -w 0` in a private run dir, stopped by PID on drop.
pub struct SanlockDaemon {
    pub run_dir: TempDir,
    child: Child,
    log: PathBuf,
}

impl SanlockDaemon {
    /// Starts the daemon with host name `host_name` and waits for its socket.
    pub fn start(host_name: &str) -> SanlockDaemon {
        require_root("the sanlock daemon");
        let sanlock = require_command("sanlock", "sanlock");
        let run_dir = scratch_dir();
        let log = run_dir.path().join("daemon.log");
        let log_file = fs::File::create(&log).expect("create sanlock log");
        let child = Command::new(sanlock)
            .args([
                "daemon", "-D", "-w", "0", "-U", "root", "-G", "root", "-e", host_name,
            ])
            .env("SANLOCK_RUN_DIR", run_dir.path())
            .env("SANLOCK_PRIVILEGED", "0")
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().expect("dup log"))
            .stderr(log_file)
            .spawn()
            .expect("start sanlock daemon");
        let d = SanlockDaemon {
            run_dir,
            child,
            log,
        };
        let sock = d.run_dir.path().join("sanlock.sock");
        let deadline = Instant::now() + Duration::from_secs(10);
        while !sock.exists() {
            assert!(
                Instant::now() < deadline,
                "sanlock daemon did not create {} within 10 s; log:\n{}",
                sock.display(),
                d.log_text()
            );
            thread::sleep(Duration::from_millis(50));
        }
        d
    }

    /// Runs `sanlock client ARGS` against this daemon; returns (status ok, stdout+stderr).
    pub fn client(&self, args: &[&str]) -> (bool, String) {
        let out = Command::new("sanlock")
            .arg("client")
            .args(args)
            .env("SANLOCK_RUN_DIR", self.run_dir.path())
            .env("SANLOCK_PRIVILEGED", "0")
            .output()
            .expect("run sanlock client");
        let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.push_str(&String::from_utf8_lossy(&out.stderr));
        (out.status.success(), text)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn log_text(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for SanlockDaemon {
    fn drop(&mut self) {
        // SIGKILL by PID: the test's lockspace dies with it, which is what a crash does.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs the `lockd` CLI (`lockd_bin`) against the daemon whose run dir is `run_dir`;
/// returns (exit status ok, stdout followed by stderr).
pub fn lockd_cli(lockd_bin: &str, run_dir: &Path, args: &[&str]) -> (bool, String) {
    let out = Command::new(lockd_bin)
        .args(args)
        .env("LOCKD_RUN_DIR", run_dir)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {lockd_bin}: {e}"));
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

/// A `lockd daemon -D -w 0` started from the given `lockd` binary with its own run dir
/// under `dir`; stopped on drop with a forced shutdown, then SIGKILL by PID.
pub struct LockdProc {
    pub run_dir: PathBuf,
    child: Child,
}

impl LockdProc {
    pub fn start(lockd_bin: &str, dir: &Path, host_name: &str) -> LockdProc {
        let run_dir = dir.join(format!("run-{host_name}"));
        let log = fs::File::create(dir.join(format!("{host_name}.log"))).expect("lockd log");
        let child = Command::new(lockd_bin)
            .args([
                "daemon",
                "-D",
                "-w",
                "0",
                "-c",
                "/dev/null",
                "-o",
                "1",
                "-e",
                host_name,
            ])
            .arg("--run-dir")
            .arg(&run_dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("dup log"))
            .stderr(log)
            .spawn()
            .expect("start lockd daemon");
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::os::unix::net::UnixStream::connect(run_dir.join("sanlock.sock")).is_err() {
            assert!(
                Instant::now() < deadline,
                "lockd daemon socket never appeared in {}",
                run_dir.display()
            );
            thread::sleep(Duration::from_millis(50));
        }
        LockdProc { run_dir, child }
    }
}

impl Drop for LockdProc {
    fn drop(&mut self) {
        // SIGTERM is ignored while lockspaces exist: ask for a forced shutdown first.
        if let Ok(mut c) = client_lib::Client::connect(&self.run_dir) {
            let _ = c.shutdown(true, false);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Writes `data` at `offset` through the page cache and syncs (for corrupting test areas).
pub fn poke(path: &Path, offset: u64, data: &[u8]) {
    use std::io::{Seek, SeekFrom};
    let mut f = fs::OpenOptions::new()
        .write(true)
        .open(path)
        .expect("open to poke");
    f.seek(SeekFrom::Start(offset)).expect("seek");
    f.write_all(data).expect("poke");
    f.sync_all().expect("sync");
}

/// Shared lease storage for system tests: a loop device (512-byte sectors) over an 8 MiB
/// sparse file in `dir`, with lockspace `ls` (io_timeout 1) at offset 0 and each
/// `(resource, offset)` formatted by `lockd direct init`. Returns the loop device
/// (detached on drop) and its path.
pub fn lease_device(
    lockd_bin: &str,
    dir: &Path,
    ls: &str,
    resources: &[(&str, &str)],
) -> (LoopDevice, String) {
    let img = sparse_file(dir, "img", 8 << 20);
    let lo = LoopDevice::attach(&img, 512);
    let dev = lo.device.display().to_string();
    let (ok, out) = lockd_cli(
        lockd_bin,
        dir,
        &[
            "direct",
            "init",
            "-s",
            &format!("{ls}:0:{dev}:0"),
            "-o",
            "1",
        ],
    );
    assert!(ok, "direct init -s {ls}: {out}");
    for (name, off) in resources {
        let (ok, out) = lockd_cli(
            lockd_bin,
            dir,
            &["direct", "init", "-r", &format!("{ls}:{name}:{dev}:{off}")],
        );
        assert!(ok, "direct init -r {ls}:{name}: {out}");
    }
    (lo, dev)
}

/// Joins lockspace `ls` on `dev` as `host_id` through the daemon in `run_dir`
/// (io_timeout 1); panics with the CLI's output when that fails.
pub fn join_lockspace(lockd_bin: &str, run_dir: &Path, ls: &str, host_id: u64, dev: &str) {
    let (ok, out) = lockd_cli(
        lockd_bin,
        run_dir,
        &[
            "add-lockspace",
            "-s",
            &format!("{ls}:{host_id}:{dev}:0"),
            "-o",
            "1",
        ],
    );
    assert!(ok, "add-lockspace {ls} as host {host_id}: {out}");
}

/// The project's FUSE fault injector (`lockd-faultfs`, this crate's binary) over `backing`,
/// mounted at `dir/view-NAME` with its control socket beside it: one host's path to the
/// storage whose I/O can be delayed, stalled or failed (`set`). On drop a stall is
/// released (a process blocked in its I/O could not exit), then the view is unmounted
/// and the injector stopped by PID.
pub struct FaultFs {
    child: Child,
    mount: PathBuf,
    control: PathBuf,
}

impl FaultFs {
    /// Starts the injector; `bin_dir` is the target directory of the test's binaries,
    /// where `lockd-faultfs` is (built here with cargo when missing).
    pub fn start(dir: &Path, name: &str, backing: &Path, bin_dir: &Path) -> FaultFs {
        require_command("fusermount", "fuse3");
        assert!(
            Path::new("/dev/fuse").exists(),
            "/dev/fuse is missing (FUSE support needed)"
        );
        let bin = bin_dir.join("lockd-faultfs");
        if !bin.exists() {
            let st = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
                .args(["build", "--workspace", "--bins", "--examples"])
                .status()
                .expect("run cargo to build lockd-faultfs");
            assert!(st.success(), "building lockd-faultfs failed");
        }
        assert!(bin.exists(), "lockd-faultfs not found at {}", bin.display());
        let mount = dir.join(format!("view-{name}"));
        let control = dir.join(format!("faultfs-{name}.sock"));
        fs::create_dir_all(&mount).expect("faultfs mount point");
        let child = Command::new(&bin)
            .arg("--backing")
            .arg(backing)
            .arg("--mount")
            .arg(&mount)
            .arg("--control")
            .arg(&control)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start lockd-faultfs");
        let f = FaultFs {
            child,
            mount,
            control,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !(f.disk().exists() && std::os::unix::net::UnixStream::connect(&f.control).is_ok()) {
            assert!(Instant::now() < deadline, "faultfs view never appeared");
            thread::sleep(Duration::from_millis(50));
        }
        f
    }

    /// The view's file: the disk as this path sees it.
    pub fn disk(&self) -> PathBuf {
        self.mount.join("disk.img")
    }

    /// Sets the mode: `pass`, `delay MS`, `stall` or `eio`.
    pub fn set(&self, mode: &str) {
        let answer = self.command(mode).expect("faultfs control");
        assert!(answer.starts_with("ok"), "faultfs {mode}: {answer}");
    }

    fn command(&self, line: &str) -> std::io::Result<String> {
        use std::io::BufRead;
        let mut c = std::os::unix::net::UnixStream::connect(&self.control)?;
        writeln!(c, "{line}")?;
        let mut answer = String::new();
        std::io::BufReader::new(c).read_line(&mut answer)?;
        Ok(answer)
    }
}

impl Drop for FaultFs {
    fn drop(&mut self) {
        let _ = self.command("pass");
        let _ = Command::new("fusermount")
            .arg("-u")
            .arg(&self.mount)
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
        // Lazily, in case the first unmount failed; it says "Invalid argument" when the
        // view is already gone, which is the usual case.
        let _ = Command::new("fusermount")
            .args(["-u", "-z"])
            .arg(&self.mount)
            .stderr(Stdio::null())
            .status();
    }
}
