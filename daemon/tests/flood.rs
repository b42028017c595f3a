//! Connection floods: 5,000 connections from one unprivileged uid, a table filled by four
//! such uids, 5,000 connections opened and closed by root in a loop and 5,000 held by
//! root. The daemon stays up, refuses what does not fit (closing it at once, with a
//! rate-limited log line), keeps root's reserve so `lockd status` and `sanlock client
//! status` are answered while the table is full, and works normally once the flooders
//! have gone. And 200 connections of one uid stalled in the middle of their payloads
//! hold only that uid's share of the worker pool; and a daemon out of file descriptors
//! (every accept failing with EMFILE) does not spin. And a uid whose idle connections
//! (connected, nothing sent) fill the table, or its share of it, is still served: its
//! oldest idle connection makes room for the new one.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

use common::*;
use lockd_daemon::tables::{MAX_CLIENTS, MAX_CLIENTS_PER_UID, ROOT_RESERVED_SLOTS};

/// Commands of one non-root uid on the workers at once (`reactor::MAX_WORKERS_PER_UID`,
/// private to the daemon).
const MAX_WORKERS_PER_UID: usize = 16;

/// Opens N connections to the socket, holds them, reports how many the daemon kept
/// ("held") and how many it closed or refused ("refused"), then closes them all when a
/// line arrives on stdin.
const FLOODER: &str = r#"
import errno, os, socket, sys, time
path, n = sys.argv[1], int(sys.argv[2])
socks, refused = [], 0
for _ in range(n):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
    except OSError:
        s.close()
        refused += 1
        continue
    socks.append(s)

def held_now():
    held = []
    for s in socks:
        s.setblocking(False)
        try:
            held.append(s.recv(1) != b'')
        except BlockingIOError:
            held.append(True)
        except OSError:
            held.append(False)
    return held

# A connection the daemon has not accepted yet also looks held: count until stable.
prev, deadline = None, time.time() + 60
while True:
    time.sleep(1)
    held = held_now()
    if held == prev or time.time() > deadline:
        break
    prev = held
keep = [s for s, h in zip(socks, held) if h]
for s, h in zip(socks, held):
    if not h:
        s.close()
print('held', len(keep), 'refused', refused + len(socks) - len(keep), flush=True)
sys.stdin.readline()
for s in keep:
    s.close()
print('closed', flush=True)
"#;

/// A python process holding connections to the daemon (one of the scripts above, run as
/// `uid` with an fd limit that fits `n` connections), killed on drop. It prints one line
/// once its connections are set, and closes them all when told.
struct ConnHolder {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl ConnHolder {
    /// Starts `script` with `sock`, `n` and `args`; returns it and its first line.
    fn start(script: &str, sock: &Path, uid: u32, n: usize, args: &[&str]) -> (Self, String) {
        let nofile = format!("--nofile={}", n + 64);
        let mut cmd = Command::new("prlimit");
        cmd.arg(&nofile);
        if uid != 0 {
            let id = uid.to_string();
            cmd.args(["setpriv", "--reuid", &id, "--regid", &id, "--clear-groups"]);
        }
        let mut child = cmd
            .args([PYTHON, "-c", script])
            .arg(sock)
            .arg(n.to_string())
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start python");
        let stdin = child.stdin.take().expect("stdin");
        let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let mut line = String::new();
        stdout.read_line(&mut line).expect("first line");
        (
            ConnHolder {
                child,
                stdin,
                stdout,
            },
            line,
        )
    }

    /// Closes every connection and waits for the process.
    fn close(mut self) {
        writeln!(self.stdin, "close").expect("tell the python process");
        let mut line = String::new();
        self.stdout
            .read_line(&mut line)
            .expect("connections closed");
        assert_eq!(line.trim(), "closed");
        let _ = self.child.wait();
    }
}

impl Drop for ConnHolder {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A flooding python process ([`FLOODER`]).
struct Flooder {
    conns: ConnHolder,
    held: usize,
    refused: usize,
}

impl Flooder {
    /// Floods `sock` with `n` connections as `uid` (root when 0); returns once the daemon
    /// has kept or refused every one.
    fn start(sock: &Path, uid: u32, n: usize) -> Flooder {
        let (conns, line) = ConnHolder::start(FLOODER, sock, uid, n, &[]);
        let w: Vec<&str> = line.split_whitespace().collect();
        assert!(
            w.len() == 4 && w[0] == "held" && w[2] == "refused",
            "flooder (uid {uid}) failed: {line:?}"
        );
        let held = w[1].parse().expect("held");
        let refused = w[3].parse().expect("refused");
        assert_eq!(
            held + refused,
            n,
            "uid {uid}: every connection is kept or refused"
        );
        Flooder {
            conns,
            held,
            refused,
        }
    }

    fn close(self) {
        self.conns.close();
    }
}

/// `lockd status` and `sanlock client status`, as root, both answered.
fn root_status_works(d: &LockdDaemon, when: &str) {
    let out = run(Command::new(lockd_cli())
        .arg("status")
        .arg("--run-dir")
        .arg(&d.run_dir));
    assert!(
        out.status.success(),
        "{when}: lockd status failed: {out:?}\nlog tail:\n{}",
        tail(&d.log_text(), 20)
    );
    let out = d.sanlock_client(&["status"]);
    assert!(
        out.status.success(),
        "{when}: sanlock client status failed: {out:?}\nlog tail:\n{}",
        tail(&d.log_text(), 20)
    );
}

fn daemon_alive(d: &mut LockdDaemon, when: &str) {
    assert!(
        matches!(d.child.try_wait(), Ok(None)),
        "{when}: the daemon exited; log tail:\n{}",
        tail(&d.log_text(), 40)
    );
}

/// Lets uid 65531..=65534 reach the socket (the daemon's limits are what we test).
fn open_socket_to_all(s: &Scratch, d: &LockdDaemon) {
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &Path, m| std::fs::set_permissions(p, std::fs::Permissions::from_mode(m));
    mode(&d.run_dir.join("sanlock.sock"), 0o666).unwrap();
    mode(&d.run_dir, 0o755).unwrap();
    mode(&s.dir, 0o755).unwrap();
}

/// A scratch dir with lockspace `ls` and resource `r1` on one file, and a lockd daemon
/// whose socket every uid may reach; fails first if a tool these tests use is missing.
fn daemon_with_one_resource(name: &str) -> (Scratch, PathBuf, LockdDaemon) {
    require_tool("setpriv", "util-linux");
    require_tool("prlimit", "util-linux");
    require_tool("sanlock", "sanlock");
    require_python_sanlock();
    let s = Scratch::new(name);
    let disk = s.file("disk", 4);
    init_lockspace("ls", &disk, 0);
    init_resource("ls", "r1", &disk, 1 << 20);
    let d = LockdDaemon::start(&s, "hostA", &[]);
    open_socket_to_all(&s, &d);
    (s, disk, d)
}

/// As root, through python3-sanlock: joins `ls`, acquires and releases `r1`; returns
/// what the script printed ("acquired released" when all went well).
fn join_acquire_release(d: &LockdDaemon, disk: &Path) -> String {
    let dp = disk.display();
    d.python(&format!(
        "import sanlock\n\
         sanlock.add_lockspace(b'ls', 1, b'{dp}', 0, iotimeout=1)\n\
         fd = sanlock.register()\n\
         sanlock.acquire(b'ls', b'r1', [(b'{dp}', {off})], slkfd=fd)\n\
         print('acquired')\n\
         sanlock.release(b'ls', b'r1', [(b'{dp}', {off})], slkfd=fd)\n\
         print('released')\n",
        off = 1u64 << 20
    ))
}

#[test]
fn connection_floods_leave_room_for_root() {
    let (_scratch, disk, mut d) = daemon_with_one_resource("flood");
    let sock = d.run_dir.join("sanlock.sock");
    let non_root = MAX_CLIENTS - ROOT_RESERVED_SLOTS;

    // One uid, 5,000 connections: it gets its share, the rest are refused.
    let nobody = Flooder::start(&sock, 65534, 5000);
    println!("uid 65534: held {} refused {}", nobody.held, nobody.refused);
    assert_eq!(nobody.held, MAX_CLIENTS_PER_UID);
    daemon_alive(&mut d, "one uid flooding");
    root_status_works(&d, "one uid flooding");

    // Three more uids fill every slot outside root's reserve.
    let mut others = Vec::new();
    for uid in [65533, 65532, 65531] {
        let f = Flooder::start(&sock, uid, 1000);
        println!("uid {uid}: held {} refused {}", f.held, f.refused);
        assert!(f.held <= MAX_CLIENTS_PER_UID && f.refused > 0);
        others.push(f);
    }
    let held: usize = nobody.held + others.iter().map(|f| f.held).sum::<usize>();
    assert_eq!(
        held, non_root,
        "non-root uids hold every slot but root's reserve"
    );
    let late = Flooder::start(&sock, 65530, 10);
    assert_eq!(
        (late.held, late.refused),
        (0, 10),
        "the table is full for uid 65530"
    );
    late.close();

    // The table is full for every uid but root: root's admin commands are answered.
    daemon_alive(&mut d, "table full");
    for _ in 0..3 {
        root_status_works(&d, "table full");
    }

    // Root opens and closes 5,000 connections in a loop.
    let mut connected = 0;
    for _ in 0..5000 {
        if UnixStream::connect(&sock).is_ok() {
            connected += 1;
        }
    }
    println!("root loop: {connected} of 5000 connects succeeded");
    assert_eq!(connected, 5000);
    daemon_alive(&mut d, "after root's connect loop");
    assert!(
        wait_for(10, || {
            run(Command::new(lockd_cli())
                .arg("status")
                .arg("--run-dir")
                .arg(&d.run_dir))
            .status
            .success()
        }),
        "root's slots came back after its connect loop"
    );
    root_status_works(&d, "after root's connect loop");

    // Root holding 5,000 gets at most the reserve, the rest are refused; once it closes
    // them, root is answered again.
    let root = Flooder::start(&sock, 0, 5000);
    println!("root: held {} refused {}", root.held, root.refused);
    assert!(root.held <= ROOT_RESERVED_SLOTS && root.refused >= 5000 - ROOT_RESERVED_SLOTS);
    daemon_alive(&mut d, "root flooding");
    root.close();
    assert!(wait_for(10, || d
        .sanlock_client(&["status"])
        .status
        .success()));
    root_status_works(&d, "after root closed its connections");

    // Refusals are logged, but not one line per connection.
    let log = d.log_text();
    let lines = log
        .lines()
        .filter(|l| l.contains("closing connection") && l.contains("refused="))
        .count();
    let refused = nobody.refused + others.iter().map(|f| f.refused).sum::<usize>() + 10;
    println!("{refused} non-root refusals, {lines} log lines about refusals");
    assert!(lines >= 1, "refusals are logged");
    assert!(lines <= 20, "refusal log lines are rate-limited: {lines}");
    assert!(log.contains("per-uid connection limit reached"));
    assert!(log.contains("client slots full"));

    // The flooders close everything: every uid is served again, leases work.
    nobody.close();
    for f in others {
        f.close();
    }
    daemon_alive(&mut d, "after the floods");
    let out = join_acquire_release(&d, &disk);
    assert_eq!(
        out.split_whitespace().collect::<Vec<_>>(),
        ["acquired", "released"]
    );
    let after = Flooder::start(&sock, 65534, 10);
    assert_eq!(
        (after.held, after.refused),
        (10, 0),
        "uid 65534 is served again"
    );
    after.close();
    root_status_works(&d, "after the floods");
    std::thread::sleep(Duration::from_millis(100));
    daemon_alive(&mut d, "end");
    d.stop();
}

/// `sanlock.get_lockspaces()` through python3-sanlock as `uid`: true when answered.
fn served_as(d: &LockdDaemon, uid: u32) -> bool {
    let id = uid.to_string();
    let out = run(Command::new("setpriv")
        .args([
            "--reuid",
            &id,
            "--regid",
            &id,
            "--clear-groups",
            PYTHON,
            "-c",
        ])
        .arg("import sanlock; sanlock.get_lockspaces(); print('served')")
        .env("SANLOCK_RUN_DIR", &d.run_dir));
    String::from_utf8_lossy(&out.stdout).trim() == "served"
}

/// Issue 21 item 7: root's own 2,000 idle connections (connected, nothing sent) took
/// every slot and `lockd status` failed. Now the oldest idle connection of the same uid
/// that has sent nothing gives way to a new one; a uid at its own bound is served the
/// same way, and never at another uid's expense.
#[test]
fn idle_connections_give_way_to_new_ones_of_their_uid() {
    let (_scratch, disk, mut d) = daemon_with_one_resource("idle");
    let sock = d.run_dir.join("sanlock.sock");

    // One uid at its bound with idle connections is still served.
    let nobody = Flooder::start(&sock, 65534, MAX_CLIENTS_PER_UID + 44);
    println!("uid 65534: held {} refused {}", nobody.held, nobody.refused);
    assert_eq!(nobody.held, MAX_CLIENTS_PER_UID);
    std::thread::sleep(Duration::from_millis(1100));
    assert!(
        served_as(&d, 65534),
        "uid 65534 with {} idle connections is not served; log tail:\n{}",
        MAX_CLIENTS_PER_UID,
        tail(&d.log_text(), 20)
    );

    // Root fills every slot left with 2,000 idle connections.
    let root = Flooder::start(&sock, 0, 2000);
    println!("root: held {} refused {}", root.held, root.refused);
    // The connection that served uid 65534 above closed one of its idle ones and then
    // ended: that uid holds one slot fewer than its bound.
    assert_eq!(root.held, MAX_CLIENTS - MAX_CLIENTS_PER_UID + 1);
    std::thread::sleep(Duration::from_millis(1100));
    daemon_alive(&mut d, "root's idle connections");
    for _ in 0..3 {
        root_status_works(&d, "root's 2,000 idle connections");
    }
    // Root's new connections took root's idle slots, not those of uid 65534: that uid,
    // at its bound, is still served only through its own idle connections.
    let late = Flooder::start(&sock, 65533, 5);
    assert_eq!(
        (late.held, late.refused),
        (0, 5),
        "the table is full of root's and uid 65534's connections"
    );
    late.close();
    assert!(served_as(&d, 65534), "uid 65534 is still served");
    let log = d.log_text();
    assert!(
        log.contains("closed the oldest idle connection"),
        "evictions are logged: {}",
        tail(&log, 20)
    );

    root.close();
    nobody.close();
    let out = join_acquire_release(&d, &disk);
    assert_eq!(
        out.split_whitespace().collect::<Vec<_>>(),
        ["acquired", "released"]
    );
    daemon_alive(&mut d, "end");
    d.stop();
}

/// Opens N connections, sends on each the first UPTO bytes of an ADD_LOCKSPACE request (40:
/// the whole header and 8 bytes of its payload; 16: half a header), says "ready" and
/// holds them until a line arrives on stdin.
const STALLER: &str = r#"
import socket, struct, sys
path, n, upto = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
socks = []
for _ in range(n):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    # magic, version SM_PROTO, cmd ADD_LOCKSPACE, flags, length, seq, data, data2
    msg = struct.pack('<8I', 0x04282010, 1, 2, 0, 32 + 1104, 0, 0, 0) + b'\0' * 8
    s.sendall(msg[:upto])
    socks.append(s)
print('ready', flush=True)
sys.stdin.readline()
for s in socks:
    s.close()
print('closed', flush=True)
"#;

/// Opens `n` connections of `uid` stalled by [`STALLER`] after `upto` bytes; returns once
/// they are all open, plus a second for the daemon to read what was sent.
fn stall(sock: &Path, uid: u32, n: usize, upto: usize) -> ConnHolder {
    let (conns, line) = ConnHolder::start(STALLER, sock, uid, n, &[&upto.to_string()]);
    assert_eq!(line.trim(), "ready", "staller (uid {uid}) failed");
    std::thread::sleep(Duration::from_secs(1));
    conns
}

/// A gauge of the daemon's, through `lockd metrics` (run as root).
fn gauge(d: &LockdDaemon, name: &str) -> u64 {
    let out = run(Command::new(lockd_cli())
        .arg("metrics")
        .arg("--run-dir")
        .arg(&d.run_dir));
    assert!(out.status.success(), "lockd metrics failed: {out:?}");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in:\n{text}"))
}

/// 200 connections of one unprivileged uid, each stalled in the middle of a request
/// payload (a worker waits up to the 10 s payload timeout for each), do not starve
/// everyone else: that uid gets a bounded share of the workers, so root's commands and a
/// lease acquire of another client are answered at once. With one shared FIFO of jobs
/// they would wait behind 200 stalled payloads (tens of seconds).
/// Before that, 200 connections of another uid stopped half-way through their headers
/// hold no worker at all.
#[test]
fn stalled_payloads_of_one_uid_do_not_starve_others() {
    let (_scratch, disk, mut d) = daemon_with_one_resource("stall");
    let sock = d.run_dir.join("sanlock.sock");

    // Half headers first: a connection stopped inside its header is parked in the event
    // loop and holds no worker at all.
    let half_headers = stall(&sock, 65533, 200, 16);
    let workers = gauge(&d, "lockd_worker_threads");
    println!("200 connections stalled inside their headers: {workers} worker threads");
    assert!(
        workers <= 4,
        "{workers} worker threads for connections that sent half a header"
    );

    let staller = stall(&sock, 65534, 200, 40);
    // 16 of its requests are on workers, waiting for their payloads; 184 wait their turn.
    let over_share = gauge(&d, "lockd_worker_jobs_over_share");
    let workers = gauge(&d, "lockd_worker_threads");
    println!("200 stalled payloads: {workers} worker threads, {over_share} jobs over share");
    assert_eq!(over_share, 200 - MAX_WORKERS_PER_UID as u64);
    assert!(
        workers <= MAX_WORKERS_PER_UID as u64 + 4,
        "{workers} worker threads"
    );
    let started = std::time::Instant::now();
    root_status_works(&d, "200 stalled payloads");
    let out = join_acquire_release(&d, &disk);
    let took = started.elapsed();
    println!("status, add_lockspace, acquire and release beside 200 stalled payloads: {took:?}");
    assert_eq!(
        out.split_whitespace().collect::<Vec<_>>(),
        ["acquired", "released"]
    );
    // add_lockspace alone takes 2·io_timeout + the join wait (about 2-3 s); the payload
    // timeout is 10 s, and 200 stalled requests ahead in one queue would be 40 s.
    assert!(
        took < Duration::from_secs(8),
        "other clients waited {took:?} behind the stalled payloads"
    );
    daemon_alive(&mut d, "200 stalled payloads");

    staller.close();
    half_headers.close();
    root_status_works(&d, "after the staller left");
    d.stop();
}

/// utime + stime of `pid`, all threads, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("read stat");
    // Fields after the command name (which may hold spaces) start after the last ')'.
    let rest = &stat[stat.rfind(')').expect("stat format") + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of stat, 12 and 13 after the name.
    fields[11].parse::<u64>().expect("utime") + fields[12].parse::<u64>().expect("stime")
}

/// When the daemon runs out of file descriptors, connections wait in the listen backlog
/// and every `accept` fails with EMFILE. The event loop must not spin on the listener,
/// which stays readable all that time: it pauses it and tries again on its next tick.
/// Once descriptors are free, the waiting connections are served.
#[test]
fn out_of_descriptors_the_event_loop_does_not_spin() {
    let (_scratch, _disk, mut d) = daemon_with_one_resource("emfile");
    let sock = d.run_dir.join("sanlock.sock");
    let pid = d.pid().to_string();
    // The soft limit only: lowering it needs no privilege, and raising it again up to
    // the hard limit does not either.
    let soft_limit = |n: &str| {
        let out = run(Command::new("prlimit")
            .args(["--pid", &pid])
            .arg(format!("--nofile={n}:")));
        assert!(out.status.success(), "prlimit: {out:?}");
    };
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).expect("limits");
    let soft_before = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3))
        .expect("Max open files")
        .to_string();
    // Room for what the daemon has open and a few connections; 100 root connections
    // (each slot takes two descriptors) leave most of them waiting in the backlog.
    soft_limit("64");
    let (flood, _report) = ConnHolder::start(FLOODER, &sock, 0, 100, &[]);
    let ticks_before = cpu_ticks(d.pid());
    std::thread::sleep(Duration::from_secs(3));
    let ticks = cpu_ticks(d.pid()) - ticks_before;
    let log = d.log_text();
    println!("3 s with accepts failing: {ticks} CPU ticks");
    assert!(
        log.contains("accept failed"),
        "the daemon never ran out of descriptors: {}",
        tail(&log, 20)
    );
    // A spinning loop takes a whole core: 300 ticks in 3 s.
    assert!(ticks < 60, "{ticks} CPU ticks in 3 s: the event loop spins");
    daemon_alive(&mut d, "out of descriptors");

    soft_limit(&soft_before);
    flood.close();
    assert!(
        wait_for(10, || d.sanlock_client(&["status"]).status.success()),
        "served again once descriptors are free"
    );
    root_status_works(&d, "descriptors free again");
    d.stop();
}
