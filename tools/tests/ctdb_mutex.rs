//! `lockd-ctdb-mutex`, CTDB's cluster-lock helper, driven the way ctdbd drives it: the
//! test spawns it with stdout on a pipe, reads the one byte, and signals it by PID.
//! Daemons are real lockd daemons (io_timeout 1) on a loop device; the two-host case runs
//! two daemons, each joined with its own host_id, on the same device.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use lockd_system_tests::{lockd_cli, scratch_dir, sparse_file, LockdProc, LoopDevice};

const LOCKD: &str = env!("CARGO_BIN_EXE_lockd");
const HELPER: &str = env!("CARGO_BIN_EXE_lockd-ctdb-mutex");

fn lockd(run_dir: &Path, args: &[&str]) -> (bool, String) {
    lockd_cli(LOCKD, run_dir, args)
}

struct Setup {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
    dev: String,
    /// Host 1 (host_id 1); host 2 (host_id 2) when asked for.
    hosts: Vec<LockdProc>,
    _loop: LoopDevice,
}

/// Lockspace `ct` at 0 and the lease `reclock` at 1M on a loop device; `n` daemons,
/// daemon i joined as host_id i+1.
fn setup(tag: &str, n: usize) -> Setup {
    let tmp = scratch_dir();
    let dir = tmp.path().to_path_buf();
    let img = sparse_file(&dir, "img", 8 << 20);
    let lo = LoopDevice::attach(&img, 512);
    let dev = lo.device.display().to_string();
    for args in [
        vec!["direct", "init", "-s", &format!("ct:0:{dev}:0"), "-o", "1"][..].to_vec(),
        vec!["direct", "init", "-r", &format!("ct:reclock:{dev}:1M")],
    ] {
        let (ok, out) = lockd(&dir, &args);
        assert!(ok, "{args:?}: {out}");
    }
    let mut hosts = Vec::new();
    for i in 1..=n {
        let d = LockdProc::start(LOCKD, &dir, &format!("{tag}{i}"));
        let (ok, out) = lockd(
            &d.run_dir,
            &["add-lockspace", "-s", &format!("ct:{i}:{dev}:0"), "-o", "1"],
        );
        assert!(ok, "add-lockspace host {i}: {out}");
        hosts.push(d);
    }
    Setup {
        _tmp: tmp,
        dir,
        dev,
        hosts,
        _loop: lo,
    }
}

impl Setup {
    fn spec(&self) -> String {
        format!("ct:reclock:{}:1M", self.dev)
    }

    fn run_dir(&self, host: usize) -> &Path {
        &self.hosts[host - 1].run_dir
    }

    fn leader(&self, host: usize) -> serde_json::Value {
        let (ok, out) = lockd(
            self.run_dir(host),
            &["leader", "-r", &self.spec(), "--json"],
        );
        assert!(ok, "leader: {out}");
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("leader json {out:?}: {e}"))
    }

    fn wait_leader_state(&self, host: usize, want: &str, timeout: Duration) -> serde_json::Value {
        let deadline = Instant::now() + timeout;
        loop {
            let v = self.leader(host);
            if v["state"] == want {
                return v;
            }
            assert!(Instant::now() < deadline, "leader never became {want}: {v}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Starts the helper as ctdbd does (stdout a pipe, stderr captured) against host
    /// `host`'s daemon (through LOCKD_RUN_DIR, as a ctdb.conf shared by all nodes would).
    fn helper(&self, host: usize, extra: &[&str]) -> Helper {
        Helper::spawn(&[&self.spec()], extra, Some(self.run_dir(host)))
    }
}

/// A helper process seen from ctdbd's side.
struct Helper {
    child: Child,
    byte: mpsc::Receiver<Option<u8>>,
    /// The stdout pipe after the first byte, to check nothing more comes.
    rest: mpsc::Receiver<Vec<u8>>,
}

fn read_pipe(
    mut out: ChildStdout,
    byte_tx: mpsc::Sender<Option<u8>>,
    rest_tx: mpsc::Sender<Vec<u8>>,
) {
    let mut b = [0u8; 1];
    let first = match out.read(&mut b) {
        Ok(1) => Some(b[0]),
        _ => None,
    };
    let _ = byte_tx.send(first);
    let mut rest = Vec::new();
    let _ = out.read_to_end(&mut rest);
    let _ = rest_tx.send(rest);
}

impl Helper {
    fn spawn(args: &[&str], extra: &[&str], run_dir: Option<&Path>) -> Helper {
        let mut cmd = Command::new(HELPER);
        cmd.args(args).args(extra);
        cmd.env_remove("LOCKD_RUN_DIR")
            .env_remove("SANLOCK_RUN_DIR");
        if let Some(d) = run_dir {
            cmd.env("LOCKD_RUN_DIR", d);
        }
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start lockd-ctdb-mutex");
        let out = child.stdout.take().expect("stdout pipe");
        let (btx, byte) = mpsc::channel();
        let (rtx, rest) = mpsc::channel();
        std::thread::spawn(move || read_pipe(out, btx, rtx));
        Helper { child, byte, rest }
    }

    /// The byte ctdbd would read (None: EOF without a byte).
    fn answer(&self, timeout: Duration) -> Option<u8> {
        self.byte
            .recv_timeout(timeout)
            .unwrap_or_else(|_| panic!("no answer from the helper within {timeout:?}"))
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([&format!("-{sig}"), &self.pid().to_string()])
            .status()
            .expect("run kill")
            .success();
        assert!(ok, "kill -{sig} {}", self.pid());
    }

    /// Waits for the exit; returns (exit code, stderr, extra stdout bytes after the first).
    fn finish(mut self, timeout: Duration) -> (i32, String, Vec<u8>) {
        let deadline = Instant::now() + timeout;
        let status = loop {
            if let Some(st) = self.child.try_wait().expect("wait") {
                break Some(st);
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut err = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            let _ = e.read_to_string(&mut err);
        }
        let Some(status) = status else {
            panic!("helper did not exit within {timeout:?}; stderr: {err}");
        };
        let rest = self
            .rest
            .recv_timeout(Duration::from_secs(5))
            .unwrap_or_default();
        (status.code().unwrap_or(-1), err, rest)
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

const ANSWER: Duration = Duration::from_secs(15);

#[test]
fn outcome_bytes_and_sigterm_release() {
    let s = setup("cm", 1);
    assert_eq!(s.leader(1)["state"], "none");

    // '0': taken, held while it runs, token logged.
    let a = s.helper(1, &[]);
    assert_eq!(a.answer(ANSWER), Some(b'0'));
    let held = s.wait_leader_state(1, "live", Duration::from_secs(5));
    assert_eq!(held["host_id"], 1, "{held}");
    let token = held["token"].as_u64().expect("token");

    // '1': a second helper while the first holds it; it exits at once.
    let b = s.helper(1, &[]);
    assert_eq!(b.answer(ANSWER), Some(b'1'));
    let (_, err, rest) = b.finish(Duration::from_secs(5));
    assert!(rest.is_empty(), "only one byte on stdout: {rest:?}");
    assert!(err.is_empty(), "contention is quiet on stderr: {err}");

    // SIGTERM: released, exit 0.
    a.signal("TERM");
    let (code, err, rest) = a.finish(Duration::from_secs(10));
    assert_eq!(code, 0, "{err}");
    assert!(rest.is_empty(), "only one byte on stdout: {rest:?}");
    assert!(
        err.contains(&format!("fencing token {token}")),
        "token logged to stderr: {err}"
    );
    assert!(err.contains("released"), "{err}");
    assert_eq!(s.leader(1)["state"], "none", "released on SIGTERM");

    // '1' when `lockd acquire -- sleep` holds it; '0' again once that ends, with a
    // greater token.
    let mut holder = Command::new(LOCKD)
        .args(["acquire", "-r", &s.spec(), "--", "sleep", "60"])
        .env("LOCKD_RUN_DIR", s.run_dir(1))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("lockd acquire");
    s.wait_leader_state(1, "live", Duration::from_secs(10));
    let c = s.helper(1, &[]);
    assert_eq!(c.answer(ANSWER), Some(b'1'));
    let _ = c.finish(Duration::from_secs(5));
    let _ = holder.kill();
    let _ = holder.wait();
    s.wait_leader_state(1, "none", Duration::from_secs(10));
    let d = s.helper(1, &[]);
    assert_eq!(d.answer(ANSWER), Some(b'0'));
    let v = s.wait_leader_state(1, "live", Duration::from_secs(5));
    assert!(v["token"].as_u64().unwrap() > token, "{v} after {token}");
    d.signal("TERM");
    let (code, err, _) = d.finish(Duration::from_secs(10));
    assert_eq!(code, 0, "{err}");
    assert_eq!(s.leader(1)["state"], "none");
}

#[test]
fn error_and_timeout_bytes() {
    let s = setup("ce", 1);
    // '3': the lockspace is not joined by the local daemon.
    let h = Helper::spawn(
        &[format!("nojoin:reclock:{}:1M", s.dev).as_str()],
        &[],
        Some(s.run_dir(1)),
    );
    assert_eq!(h.answer(ANSWER), Some(b'3'));
    let (code, err, _) = h.finish(Duration::from_secs(5));
    assert_eq!(code, 3);
    assert!(err.contains("lockspace nojoin is not joined"), "{err}");
    println!("not joined: {}", err.trim());

    // '3': no daemon in the run dir (given with --run-dir this time).
    let empty = s.dir.join("no-daemon");
    std::fs::create_dir_all(&empty).unwrap();
    let h = Helper::spawn(
        &[s.spec().as_str(), "--run-dir", empty.to_str().unwrap()],
        &[],
        None,
    );
    assert_eq!(h.answer(ANSWER), Some(b'3'));
    let (_, err, _) = h.finish(Duration::from_secs(5));
    assert!(err.contains("cannot reach the lockd daemon"), "{err}");
    println!("no daemon: {}", err.trim());

    // '3': bad input.
    let none: Vec<&str> = Vec::new();
    for bad in [
        vec!["ct:reclock"],
        none,
        vec!["ct:reclock:/dev/x:zz"],
        vec!["a", "b"],
    ] {
        let h = Helper::spawn(&bad, &[], Some(s.run_dir(1)));
        assert_eq!(h.answer(ANSWER), Some(b'3'), "{bad:?}");
        let (code, err, _) = h.finish(Duration::from_secs(5));
        assert_eq!(code, 3, "{bad:?}: {err}");
        assert!(!err.is_empty(), "{bad:?}: an error message");
    }

    // '3': the lease area was never formatted.
    let h = Helper::spawn(
        &[format!("ct:nofmt:{}:3M", s.dev).as_str()],
        &[],
        Some(s.run_dir(1)),
    );
    assert_eq!(h.answer(ANSWER), Some(b'3'));
    let (_, err, _) = h.finish(Duration::from_secs(5));
    assert!(err.contains("acquire ct:nofmt"), "{err}");

    // '2': the daemon does not answer (SIGSTOP) within --timeout.
    let pid = std::fs::read_to_string(s.run_dir(1).join("lockd.pid"))
        .expect("lockd.pid")
        .trim()
        .to_string();
    assert!(Command::new("kill")
        .args(["-STOP", &pid])
        .status()
        .unwrap()
        .success());
    let t0 = Instant::now();
    let h = s.helper(1, &["--timeout", "2"]);
    let byte = h.answer(ANSWER);
    let took = t0.elapsed();
    assert!(Command::new("kill")
        .args(["-CONT", &pid])
        .status()
        .unwrap()
        .success());
    assert_eq!(byte, Some(b'2'));
    assert!(
        took < Duration::from_secs(4),
        "timeout answered after {took:?}"
    );
    let (_, err, _) = h.finish(Duration::from_secs(5));
    assert!(err.contains("not acquired within 2 s"), "{err}");
    println!("timeout byte after {:.1} s", took.as_secs_f64());
    // Nothing held afterwards.
    let v = s.wait_leader_state(1, "none", Duration::from_secs(10));
    assert!(v["host_id"].is_null(), "{v}");
}

#[test]
fn parent_death_releases_the_lease() {
    let s = setup("cp", 1);
    // ctdbd stand-in: a shell that runs the helper as its child (the trailing command
    // keeps the shell from exec'ing the helper).
    let mut sh = Command::new("sh")
        .args([
            "-c",
            "\"$0\" \"$1\"; echo helper-ended >&2",
            HELPER,
            &s.spec(),
        ])
        .env("LOCKD_RUN_DIR", s.run_dir(1))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("sh");
    let mut out = sh.stdout.take().unwrap();
    let mut b = [0u8; 1];
    assert_eq!(out.read(&mut b).expect("read byte"), 1);
    assert_eq!(b[0], b'0');
    s.wait_leader_state(1, "live", Duration::from_secs(5));
    let pgrep = Command::new("pgrep")
        .args(["-P", &sh.id().to_string()])
        .output()
        .expect("pgrep");
    let helper_pid = String::from_utf8_lossy(&pgrep.stdout).trim().to_string();
    assert!(!helper_pid.is_empty(), "helper is the shell's child");
    let t0 = Instant::now();
    sh.kill().expect("kill -9 the parent");
    let _ = sh.wait();
    // The helper exits (EOF on the pipe) and releases.
    let mut rest = Vec::new();
    let _ = out.read_to_end(&mut rest);
    assert!(rest.is_empty(), "{rest:?}");
    while Path::new(&format!("/proc/{helper_pid}")).exists() {
        assert!(
            t0.elapsed() < Duration::from_secs(6),
            "helper {helper_pid} still running 6 s after its parent died"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let gone = t0.elapsed();
    println!(
        "helper exited {:.2} s after its parent's kill -9",
        gone.as_secs_f64()
    );
    assert_eq!(s.leader(1)["state"], "none", "released after parent death");
}

#[test]
fn force_request_from_another_host_ends_the_helper() {
    let s = setup("cf", 2);
    let a = s.helper(1, &[]);
    assert_eq!(a.answer(ANSWER), Some(b'0'));
    let held = s.wait_leader_state(2, "live", Duration::from_secs(10));
    assert_eq!(held["host_id"], 1, "host 2 sees host 1 holding: {held}");
    let token = held["token"].as_u64().unwrap();
    // Host 2 is refused while host 1 holds it.
    let b = s.helper(2, &[]);
    assert_eq!(b.answer(ANSWER), Some(b'1'));
    let _ = b.finish(Duration::from_secs(5));
    let t0 = Instant::now();
    let (ok, out) = lockd(
        s.run_dir(2),
        &["request", "-r", &s.spec(), "--next-lver", "-f", "force"],
    );
    assert!(ok, "request: {out}");
    let (code, err, _) = a.finish(Duration::from_secs(20));
    let took = t0.elapsed();
    println!(
        "helper on host 1 exited {:.1} s after the FORCE request (code {code}): {}",
        took.as_secs_f64(),
        err.trim()
    );
    assert_eq!(code, 1, "a lost lease exits 1: {err}");
    assert!(err.contains("lost (requested)"), "{err}");
    // Host 2 takes it now, with a greater token.
    let deadline = Instant::now() + Duration::from_secs(20);
    let c = loop {
        let c = s.helper(2, &[]);
        match c.answer(ANSWER) {
            Some(b'0') => break c,
            other => {
                let _ = c.finish(Duration::from_secs(5));
                assert!(
                    Instant::now() < deadline,
                    "host 2 never took the lease (last byte {other:?})"
                );
                std::thread::sleep(Duration::from_millis(500));
            }
        }
    };
    let v = s.wait_leader_state(2, "live", Duration::from_secs(5));
    assert_eq!(v["host_id"], 2, "{v}");
    assert!(v["token"].as_u64().unwrap() > token, "{v} after {token}");
    c.signal("TERM");
    let (code, err, _) = c.finish(Duration::from_secs(10));
    assert_eq!(code, 0, "{err}");
}
