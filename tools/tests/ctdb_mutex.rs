//! `lockd-ctdb-mutex`, CTDB's cluster-lock helper, driven the way ctdbd drives it: the
//! test spawns it with stdout on a pipe, reads the one byte, and signals it by PID.
//! Daemons are real lockd daemons (io_timeout 1) on a loop device; the two-host case runs
//! two daemons, each joined with its own host_id, on the same device.
//!
//! `real_ctdb_cluster_failover_and_rejoin` runs this machine's ctdb, or, with
//! `LOCKD_CTDB_CHROOT=SUITE` (scripts/test-trixie.sh sets `trixie`), the ctdbd and ctdb of
//! that Debian release from its chroot (scripts/debian-chroot.sh: ctdbd is exec'd in it, so
//! the test still holds ctdbd's PID; the scratch dir and the helper's directory are bound
//! at the same paths; lockd's daemons run on the host).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use lockd_system_tests::{
    join_lockspace, lease_device, lockd_cli, scratch_dir, LockdProc, LoopDevice,
};

const LOCKD: &str = env!("CARGO_BIN_EXE_lockd");
const HELPER: &str = env!("CARGO_BIN_EXE_lockd-ctdb-mutex");

fn lockd(run_dir: &Path, args: &[&str]) -> (bool, String) {
    lockd_cli(LOCKD, run_dir, args)
}

/// Fields drop in order: daemons, loop device, then the scratch directory.
struct Setup {
    dir: PathBuf,
    dev: String,
    /// Host 1 (host_id 1); host 2 (host_id 2) when asked for.
    hosts: Vec<LockdProc>,
    _loop: LoopDevice,
    _tmp: tempfile::TempDir,
}

/// Lockspace `ct` at 0 and the lease `reclock` at 1M on a loop device; `n` daemons,
/// daemon i joined as host_id i+1.
fn setup(tag: &str, n: usize) -> Setup {
    let tmp = scratch_dir();
    let dir = tmp.path().to_path_buf();
    let (lo, dev) = lease_device(LOCKD, &dir, "ct", &[("reclock", "1M")]);
    let mut hosts = Vec::new();
    for i in 1..=n {
        let d = LockdProc::start(LOCKD, &dir, &format!("{tag}{i}"));
        join_lockspace(LOCKD, &d.run_dir, "ct", i as u64, &dev);
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

// ---------------------------------------------------------------------------------------
// A real CTDB cluster: three ctdbd from Debian's ctdb package on this machine (CTDB's own
// "local daemons" mode: CTDB_TEST_MODE, one CTDB_BASE per node, node addresses
// 127.0.0.11-13 on lo), each with its own lockd daemon (own run dir, own host_id) on one
// shared loop device, and `cluster lock = !lockd-ctdb-mutex …` (the same string on every
// node; the node's lockd is found through LOCKD_RUN_DIR in ctdbd's environment).

use std::os::unix::process::CommandExt;

/// lockd's timing in the cluster test: io_timeout D = 1, watchdog_fire_timeout W = 5.
const IO_TIMEOUT_S: u64 = 1;
const FIRE_TIMEOUT_S: u64 = 5;
/// CTDB's `leader timeout` (default 5 s): survivors start an election after this long
/// without a leader broadcast, and retry at this cadence while the lock is contended.
const CTDB_LEADER_TIMEOUT_S: u64 = 5;

/// Children of every process, from /proc.
fn descendants(pid: u32) -> Vec<u32> {
    let mut parent_of = Vec::new();
    if let Ok(rd) = std::fs::read_dir("/proc") {
        for e in rd.flatten() {
            let Ok(p) = e.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else {
                continue;
            };
            // pid (comm) state ppid …; comm may hold spaces: split after the last ')'.
            let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
                continue;
            };
            if let Some(pp) = rest
                .split_whitespace()
                .nth(1)
                .and_then(|s| s.parse::<u32>().ok())
            {
                parent_of.push((p, pp));
            }
        }
    }
    let mut out = Vec::new();
    let mut todo = vec![pid];
    while let Some(x) = todo.pop() {
        for &(c, pp) in &parent_of {
            if pp == x && !out.contains(&c) {
                out.push(c);
                todo.push(c);
            }
        }
    }
    out
}

fn alive(pid: u32) -> bool {
    // A zombie still has /proc/PID; count it as gone.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => !s
            .rsplit_once(')')
            .is_some_and(|(_, r)| r.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

fn kill_pid(pid: u32, sig: &str) {
    let _ = Command::new("kill")
        .args([&format!("-{sig}"), &pid.to_string()])
        .stderr(Stdio::null())
        .status();
}

/// The Debian release whose ctdb the cluster test runs (None: this machine's).
fn ctdb_chroot() -> Option<String> {
    std::env::var("LOCKD_CTDB_CHROOT")
        .ok()
        .filter(|s| !s.is_empty())
}

fn chroot_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/debian-chroot.sh")
}

/// `prog` as a command: here, or in the chroot of [`ctdb_chroot`] with `dir` and the
/// helper's directory bound; `exec`: the returned child's PID is `prog`'s own.
fn ctdb_command(prog: &str, dir: &Path, exec: bool) -> Command {
    let Some(suite) = ctdb_chroot() else {
        return Command::new(prog);
    };
    let mut c = Command::new(chroot_script());
    c.args(["run", &suite]);
    if exec {
        c.arg("--exec");
    }
    c.arg("--bind")
        .arg(dir)
        .arg("--bind")
        .arg(Path::new(HELPER).parent().expect("helper dir"))
        .arg("--")
        .arg(prog);
    c
}

struct CtdbNode {
    /// 1-based; pnn = n - 1; lockd host_id = n.
    n: usize,
    base: PathBuf,
    lockd_run: PathBuf,
    lockd: Option<Child>,
    ctdbd: Option<Child>,
    /// Every process this node's ctdbd started (ctdb-eventd, the recovery daemon, helpers).
    ctdbd_family: Vec<u32>,
}

struct Cluster {
    nodes: Vec<CtdbNode>,
    dir: PathBuf,
    dev: String,
    _loop: LoopDevice,
    _tmp: tempfile::TempDir,
}

impl Cluster {
    fn spec(&self) -> String {
        format!("ct:reclock:{}:1M", self.dev)
    }

    fn start_lockd(&mut self, k: usize) {
        let (dir, dev) = (self.dir.clone(), self.dev.clone());
        let node = &mut self.nodes[k];
        let n = node.n;
        let cfg = dir.join("lockd.toml");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join(format!("lockd-{n}.log")))
            .expect("lockd log");
        let child = Command::new(LOCKD)
            .args(["daemon", "-D", "-w", "0", "-o", "1"])
            .arg("-c")
            .arg(&cfg)
            .args(["-e", &format!("ctdbnode{n}")])
            .arg("--run-dir")
            .arg(&node.lockd_run)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("dup log"))
            .stderr(log)
            .process_group(0)
            .spawn()
            .expect("start lockd daemon");
        node.lockd = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::os::unix::net::UnixStream::connect(node.lockd_run.join("sanlock.sock")).is_err()
        {
            assert!(Instant::now() < deadline, "lockd {n} socket never appeared");
            std::thread::sleep(Duration::from_millis(50));
        }
        let t0 = Instant::now();
        let (ok, out) = lockd(
            &node.lockd_run,
            &["add-lockspace", "-s", &format!("ct:{n}:{dev}:0"), "-o", "1"],
        );
        assert!(ok, "add-lockspace node {n}: {out}");
        println!(
            "node {n}: lockd joined ct as host_id {n} in {:.1} s",
            t0.elapsed().as_secs_f64()
        );
    }

    fn start_ctdbd(&mut self, k: usize) {
        let dir = self.dir.clone();
        let node = &mut self.nodes[k];
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join(format!("ctdbd-{}.log", node.n)))
            .expect("ctdbd log");
        let child = ctdb_command("ctdbd", &dir, true)
            .arg("-i")
            .env("CTDB_TEST_MODE", "yes")
            .env("CTDB_BASE", &node.base)
            .env("LOCKD_RUN_DIR", &node.lockd_run)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("dup log"))
            .stderr(log)
            .process_group(0)
            .spawn()
            .expect("start ctdbd");
        node.ctdbd = Some(child);
    }

    /// `ctdb ARGS` against node k (bounded: -t 2, -T 5).
    fn ctdb(&self, k: usize, args: &[&str]) -> (bool, String) {
        let out = ctdb_command("ctdb", &self.dir, false)
            .args(["-t", "2", "-T", "5"])
            .args(args)
            .env("CTDB_TEST_MODE", "yes")
            .env("CTDB_BASE", &self.nodes[k].base)
            .stdin(Stdio::null())
            .output()
            .expect("run ctdb");
        let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.push_str(&String::from_utf8_lossy(&out.stderr));
        (out.status.success(), text)
    }

    /// (pnn → state) and the leader pnn from `ctdb status` on node k.
    fn status(&self, k: usize) -> Option<(Vec<String>, Option<usize>, String)> {
        let (ok, text) = self.ctdb(k, &["status"]);
        if !ok {
            return None;
        }
        let mut states = Vec::new();
        let mut leader = None;
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("pnn:") {
                let f: Vec<&str> = rest.split_whitespace().collect();
                states.push(f.get(2).copied().unwrap_or("?").to_string());
            } else if let Some(l) = line.strip_prefix("Leader:") {
                leader = l.trim().parse().ok();
            }
        }
        Some((states, leader, text))
    }

    fn lockd_holder(&self, k: usize) -> Option<serde_json::Value> {
        let (ok, out) = lockd(
            &self.nodes[k].lockd_run,
            &["leader", "-r", &self.spec(), "--json"],
        );
        if !ok {
            return None;
        }
        serde_json::from_str(&out).ok()
    }

    /// Waits until every node in `ks` shows all of `ks` OK and the same leader, and
    /// lockd (seen from each of them) shows that leader's host holding the lease live.
    /// Returns (leader pnn, token).
    fn wait_settled(&self, ks: &[usize], timeout: Duration) -> (usize, u64) {
        let deadline = Instant::now() + timeout;
        let mut last = String::new();
        loop {
            let mut agreed: Option<usize> = None;
            let mut good = true;
            for &k in ks {
                match self.status(k) {
                    Some((states, Some(l), text)) => {
                        let all_ok = ks.iter().all(|&j| states.get(j).is_some_and(|s| s == "OK"));
                        if !all_ok || agreed.is_some_and(|a| a != l) {
                            good = false;
                            last = text;
                        }
                        agreed = Some(l);
                    }
                    Some((_, None, text)) => {
                        good = false;
                        last = text;
                    }
                    None => {
                        good = false;
                        last = format!("ctdb status on node {} failed", k + 1);
                    }
                }
            }
            if let (true, Some(l)) = (good, agreed) {
                let holders: Vec<_> = ks.iter().filter_map(|&k| self.lockd_holder(k)).collect();
                if holders.len() == ks.len()
                    && holders
                        .iter()
                        .all(|h| h["host_id"] == (l + 1) as u64 && h["state"] == "live")
                {
                    return (l, holders[0]["token"].as_u64().unwrap_or(0));
                }
                last = format!("ctdb leader pnn {l}; lockd holders {holders:?}");
            }
            assert!(
                Instant::now() < deadline,
                "cluster did not settle within {timeout:?}: {last}"
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.join(name)).unwrap_or_default()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // ctdbd: SIGTERM (a clean shutdown; the leader's helper gets SIGTERM and
        // releases), then SIGKILL; then whatever it started, by PID.
        for node in &mut self.nodes {
            if let Some(mut c) = node.ctdbd.take() {
                node.ctdbd_family.extend(descendants(c.id()));
                kill_pid(c.id(), "TERM");
                let deadline = Instant::now() + Duration::from_secs(10);
                while Instant::now() < deadline && matches!(c.try_wait(), Ok(None)) {
                    std::thread::sleep(Duration::from_millis(50));
                }
                let _ = c.kill();
                let _ = c.wait();
            }
        }
        for node in &mut self.nodes {
            for &p in &node.ctdbd_family {
                if alive(p) {
                    kill_pid(p, "KILL");
                }
            }
        }
        for node in &mut self.nodes {
            if let Some(mut c) = node.lockd.take() {
                let family = descendants(c.id());
                if let Ok(mut cl) = client_lib::Client::connect(&node.lockd_run) {
                    let _ = cl.shutdown(true, false);
                }
                let deadline = Instant::now() + Duration::from_secs(10);
                while Instant::now() < deadline && matches!(c.try_wait(), Ok(None)) {
                    std::thread::sleep(Duration::from_millis(50));
                }
                let _ = c.kill();
                let _ = c.wait();
                for p in family {
                    if alive(p) {
                        kill_pid(p, "KILL");
                    }
                }
            }
        }
    }
}

fn cluster() -> Cluster {
    lockd_system_tests::require_root("ctdbd and loop devices");
    if let Some(suite) = ctdb_chroot() {
        let out = Command::new(chroot_script())
            .args(["ensure", &suite, "ctdb"])
            .output()
            .expect("run debian-chroot.sh");
        assert!(
            out.status.success(),
            "no {suite} chroot with ctdb: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    } else {
        lockd_system_tests::require_command("ctdbd", "ctdb");
        lockd_system_tests::require_command("ctdb", "ctdb");
    }
    let tmp = scratch_dir();
    let dir = tmp.path().to_path_buf();
    let (lo, dev) = lease_device(LOCKD, &dir, "ct", &[("reclock", "1M")]);
    std::fs::write(
        dir.join("lockd.toml"),
        format!("io_timeout = {IO_TIMEOUT_S}\nwatchdog_fire_timeout = {FIRE_TIMEOUT_S}\n"),
    )
    .unwrap();
    let nodes_file: String = (1..=3).map(|n| format!("127.0.0.1{n}\n")).collect();
    let mut nodes = Vec::new();
    for n in 1..=3 {
        let base = dir.join(format!("node{n}"));
        for sub in [
            "events/legacy",
            "run",
            "db/volatile",
            "db/persistent",
            "db/state",
        ] {
            std::fs::create_dir_all(base.join(sub)).unwrap();
        }
        std::fs::write(base.join("nodes"), &nodes_file).unwrap();
        let db = base.join("db");
        std::fs::write(
            base.join("ctdb.conf"),
            format!(
                "[logging]\n\tlog level = INFO\n\
                 [cluster]\n\tcluster lock = !{HELPER} ct:reclock:{dev}:1M\n\
                 \tnode address = 127.0.0.1{n}\n\
                 [database]\n\tvolatile database directory = {d}/volatile\n\
                 \tpersistent database directory = {d}/persistent\n\
                 \tstate database directory = {d}/state\n\
                 [failover]\n\tdisabled = true\n",
                d = db.display()
            ),
        )
        .unwrap();
        nodes.push(CtdbNode {
            n,
            base,
            lockd_run: dir.join(format!("lockd-run-{n}")),
            lockd: None,
            ctdbd: None,
            ctdbd_family: Vec::new(),
        });
    }
    Cluster {
        nodes,
        dir,
        dev,
        _loop: lo,
        _tmp: tmp,
    }
}

#[test]
fn real_ctdb_cluster_failover_and_rejoin() {
    let mut c = cluster();
    let (ok, version) = c.ctdb(0, &["version"]);
    println!(
        "ctdb {} ({})",
        version.trim(),
        ctdb_chroot().map_or("this machine".to_string(), |s| format!("{s} chroot"))
    );
    assert!(ok, "ctdb version: {version}");
    for k in 0..3 {
        c.start_lockd(k);
    }
    for k in 0..3 {
        c.start_ctdbd(k);
    }
    let t_start = Instant::now();
    let (l, token) = c.wait_settled(&[0, 1, 2], Duration::from_secs(90));
    println!(
        "cluster up in {:.1} s: leader pnn {l} (node {}), lockd holder host_id {} token {token}",
        t_start.elapsed().as_secs_f64(),
        l + 1,
        l + 1
    );
    let (ok, out) = c.ctdb((l + 1) % 3, &["leader"]);
    assert!(ok && out.trim() == l.to_string(), "ctdb leader: {out}");
    let ctdbd_log = c.log(&format!("ctdbd-{}.log", l + 1));
    assert!(
        ctdbd_log.contains("Cluster lock taken successfully")
            && ctdbd_log.contains(&format!("with fencing token {token}")),
        "the leader's ctdbd took the lock through the helper:\n{ctdbd_log}"
    );

    // The leader's host dies: kill -9 its ctdbd and its lockd daemon, by PID.
    let node = &mut c.nodes[l];
    let ctdbd = node.ctdbd.as_mut().unwrap();
    node.ctdbd_family = descendants(ctdbd.id());
    let lockd_child = node.lockd.as_mut().unwrap();
    let lockd_family = descendants(lockd_child.id());
    let t0 = Instant::now();
    let _ = ctdbd.kill();
    let _ = lockd_child.kill();
    let _ = ctdbd.wait();
    let _ = lockd_child.wait();
    node.ctdbd = None;
    node.lockd = None;
    let family = node.ctdbd_family.clone();
    let survivors: Vec<usize> = (0..3).filter(|&k| k != l).collect();
    // Follow the lease closely (every 100 ms, from a survivor's lockd): when the dead
    // holder's host is found dead, and when a survivor's helper takes the lease — the
    // moment that node's recovery daemon has the cluster lock and leads.
    let mut t_dead = None;
    let (t_lock, new_host) = loop {
        let v = c.lockd_holder(survivors[0]).unwrap_or_default();
        let took = t0.elapsed();
        if v["host_id"] == (l + 1) as u64 && v["state"] == "dead" && t_dead.is_none() {
            t_dead = Some(took);
        }
        if let Some(h) = v["host_id"].as_u64() {
            if h != (l + 1) as u64 && v["state"] == "live" {
                break (took, h);
            }
        }
        assert!(
            took < Duration::from_secs(90),
            "no new holder of the cluster lock 90 s after the kill: {v}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let (m, token2) = c.wait_settled(&survivors, Duration::from_secs(90));
    let settled = t0.elapsed();
    let host_dead = 8 * IO_TIMEOUT_S + FIRE_TIMEOUT_S;
    let bound = host_dead + 2 * IO_TIMEOUT_S + 2 * CTDB_LEADER_TIMEOUT_S;
    let settle_bound = bound + 10;
    println!(
        "failover: old holder found dead {}; node {new_host} took the cluster lock {:.1} s \
         after the kill (bound {bound} s = host_dead {host_dead} + 2·io_timeout + 2·leader \
         timeout); both survivors agree on leader pnn {m} (token {token2}) at {:.1} s \
         (bound {settle_bound} s: + recovery and ctdb's 2 s command timeouts)",
        t_dead.map_or("not seen".to_string(), |d| format!(
            "{:.1} s after the kill",
            d.as_secs_f64()
        )),
        t_lock.as_secs_f64(),
        settled.as_secs_f64()
    );
    assert_eq!(new_host, (m + 1) as u64, "the lock holder is CTDB's leader");
    assert!(
        t_lock <= Duration::from_secs(bound),
        "the cluster lock moved after {t_lock:?}, more than {bound} s"
    );
    assert!(
        settled <= Duration::from_secs(settle_bound),
        "the survivors agreed after {settled:?}, more than {settle_bound} s"
    );
    assert_ne!(m, l, "a new leader");
    assert!(token2 > token, "token grew: {token} → {token2}");
    // What the killed ctdbd started went away by itself (its helper included).
    let left: Vec<u32> = family.iter().copied().filter(|&p| alive(p)).collect();
    let left_lockd: Vec<u32> = lockd_family.iter().copied().filter(|&p| alive(p)).collect();
    assert!(
        left.is_empty(),
        "children of the killed ctdbd still running: {left:?}"
    );
    assert!(
        left_lockd.is_empty(),
        "children of the killed lockd still running: {left_lockd:?}"
    );

    // The node comes back: lockd first (same host_id), then ctdbd. It rejoins, the lock
    // stays with the new leader.
    let t1 = Instant::now();
    c.start_lockd(l);
    c.start_ctdbd(l);
    let (m2, token3) = c.wait_settled(&[0, 1, 2], Duration::from_secs(90));
    println!(
        "rejoin: node {} OK again {:.1} s after its restart; leader still pnn {m2}, token {token3}",
        l + 1,
        t1.elapsed().as_secs_f64()
    );
    assert_eq!(m2, m, "the lock stays with the new leader");
    assert_eq!(token3, token2, "no change of holder on rejoin");
    let (ok, out) = c.ctdb(l, &["status"]);
    assert!(
        ok && out.contains(&format!("pnn:{l} 127.0.0.1{} ", l + 1)),
        "{out}"
    );
    let rejoined_log = c.log(&format!("ctdbd-{}.log", l + 1));
    println!(
        "rejoined node's helper runs: {} contention answers logged",
        rejoined_log
            .matches("Unable to take cluster lock - contention")
            .count()
    );
}

#[test]
fn daemon_death_ends_the_helper() {
    let s = setup("cd", 1);
    let h = s.helper(1, &[]);
    assert_eq!(h.answer(ANSWER), Some(b'0'));
    s.wait_leader_state(1, "live", Duration::from_secs(5));
    let pid = std::fs::read_to_string(s.run_dir(1).join("lockd.pid"))
        .expect("lockd.pid")
        .trim()
        .to_string();
    let t0 = Instant::now();
    assert!(Command::new("kill")
        .args(["-9", &pid])
        .status()
        .unwrap()
        .success());
    let (code, err, rest) = h.finish(Duration::from_secs(10));
    println!(
        "helper exited {:.2} s after kill -9 of its daemon: {}",
        t0.elapsed().as_secs_f64(),
        err.trim()
    );
    assert_eq!(code, 1, "{err}");
    assert!(rest.is_empty(), "{rest:?}");
    assert!(err.contains("lost (daemon_gone)"), "{err}");
}
