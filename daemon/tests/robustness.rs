//! Malformed socket input never crashes the daemon or disturbs other clients; a second
//! daemon on the same run dir refuses to start; another uid cannot act on our leases;
//! sd_notify reaches a NOTIFY_SOCKET listener.

mod common;

use std::io::{Read, Write};
use std::os::unix::net::{UnixDatagram, UnixStream};
use std::process::Command;
use std::time::Duration;

use client_lib::proto::*;
use client_lib::wire::Header;
use client_lib::Client;
use common::*;

fn connect(d: &LockdDaemon) -> UnixStream {
    let s = UnixStream::connect(d.run_dir.join("sanlock.sock")).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    s
}

fn version_ok(d: &LockdDaemon) {
    let mut c = Client::connect(&d.run_dir).expect("connect");
    c.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    assert_eq!(c.version().expect("version"), 0x0308_0500);
}

fn header(cmd: u32, length: u32, data: u32, data2: u32) -> [u8; 32] {
    Header {
        magic: SM_MAGIC,
        version: SM_PROTO,
        cmd,
        cmd_flags: 0,
        length,
        seq: 0,
        data,
        data2,
    }
    .encode()
}

fn read_reply(s: &mut UnixStream) -> Header {
    let mut b = [0u8; 32];
    s.read_exact(&mut b).expect("reply");
    Header::decode(&b).expect("decode reply")
}

#[test]
fn malformed_messages_are_harmless() {
    let s = Scratch::new("malformed");
    let d = LockdDaemon::start(&s, "hostA", &[]);

    // Bad magic: ignored (no reply), connection stays usable.
    let mut c = connect(&d);
    let mut bad = header(SM_CMD_VERSION, 32, 0, 0);
    bad[0] ^= 0xFF;
    c.write_all(&bad).unwrap();
    c.write_all(&header(SM_CMD_VERSION, 32, 0, 0)).unwrap();
    let r = read_reply(&mut c);
    assert_eq!((r.cmd, r.data2), (SM_CMD_VERSION, 0x0308_0500));

    // A length that lies (4 GiB) on a registered-client command: an error reply.
    let mut c = connect(&d);
    c.write_all(&header(SM_CMD_ACQUIRE, u32::MAX, 1, u32::MAX))
        .unwrap();
    let r = read_reply(&mut c);
    assert_eq!(r.result(), -libc::EBUSY, "unregistered fd as target");

    // Too many resources: -E2BIG.
    let mut c = connect(&d);
    c.write_all(&header(SM_CMD_REGISTER, 32, 0, 0)).unwrap();
    c.write_all(&header(SM_CMD_ACQUIRE, 32, 9, u32::MAX))
        .unwrap();
    assert_eq!(read_reply(&mut c).result(), -libc::E2BIG);

    // A truncated payload followed by close: the daemon just drops the connection.
    let mut c = connect(&d);
    c.write_all(&header(SM_CMD_ADD_LOCKSPACE, 32 + 1104, 0, 0))
        .unwrap();
    c.write_all(&[7u8; 100]).unwrap();
    drop(c);

    // A stalled payload blocks only its own connection.
    let mut stalled = connect(&d);
    stalled
        .write_all(&header(SM_CMD_GET_HOSTS, 32 + 1104, 0, 0))
        .unwrap();
    stalled.write_all(&[1u8; 10]).unwrap();
    version_ok(&d);

    // resource num_disks 0 → -ERANGE.
    let mut c = connect(&d);
    c.write_all(&header(SM_CMD_READ_RESOURCE, 32 + 128, 0, 0))
        .unwrap();
    c.write_all(&[0u8; 128]).unwrap();
    assert_eq!(read_reply(&mut c).result(), -libc::ERANGE);

    // Commands lockd does not know (45 and 60: past sanlock 5.1.1's 44; 999 with a
    // payload): each is drained and answered -EOPNOTSUPP, never left waiting (sanlock
    // sends nothing), and the connection keeps serving.
    let mut c = connect(&d);
    for (cmd, payload) in [(45u32, 0usize), (60, 0), (999, 300)] {
        c.write_all(&header(cmd, 32 + payload as u32, 7, 0))
            .unwrap();
        c.write_all(&vec![0xA5u8; payload]).unwrap();
        let r = read_reply(&mut c);
        assert_eq!(
            (r.cmd, r.result(), r.length),
            (cmd, -libc::EOPNOTSUPP, 32),
            "unknown command {cmd}"
        );
    }
    c.write_all(&header(SM_CMD_VERSION, 32, 0, 0)).unwrap();
    assert_eq!(read_reply(&mut c).cmd, SM_CMD_VERSION);
    version_ok(&d);

    // 10,000 random messages over 500 connections (SHUTDOWN and SHUTDOWN_WAIT excluded:
    // they are legitimate requests to stop). The daemon keeps answering throughout.
    let mut x: u64 = 0x1234_5678_9abc_def1;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for conn_no in 0..500 {
        let mut c = connect(&d);
        c.set_write_timeout(Some(Duration::from_secs(2))).unwrap();
        let mut msg = Vec::new();
        for _ in 0..20 {
            let r = next();
            let mut cmd = (r % 45) as u32;
            if cmd == SM_CMD_SHUTDOWN || cmd == SM_CMD_SHUTDOWN_WAIT {
                cmd = SM_CMD_VERSION;
            }
            let magic_ok = r % 7 != 0;
            let mut h = header(
                cmd,
                (next() % 3000) as u32,
                (next() % 10) as u32,
                next() as u32,
            );
            if !magic_ok {
                h[0..4].copy_from_slice(&(next() as u32).to_ne_bytes());
            }
            msg.extend_from_slice(&h);
            let payload_len = (next() % 1500) as usize;
            msg.extend((0..payload_len).map(|_| next() as u8));
        }
        let _ = c.write_all(&msg);
        drop(c);
        if conn_no % 100 == 99 {
            version_ok(&d);
        }
    }
    version_ok(&d);
    drop(stalled);
    assert!(d.child.id() > 0);
    let mut d = d;
    assert!(
        matches!(d.child.try_wait(), Ok(None)),
        "daemon died:\n{}",
        tail(&d.log_text(), 30)
    );
    d.stop();
}

#[test]
fn one_daemon_per_run_dir() {
    let s = Scratch::new("pidlock");
    let d = LockdDaemon::start(&s, "hostA", &[]);
    let out = run(Command::new(DAEMON)
        .args([
            "-D",
            "-w",
            "0",
            "-e",
            "hostB",
            "-c",
            "/dev/null",
            "--run-dir",
        ])
        .arg(&d.run_dir));
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("another lockd daemon is running"), "{err}");
    version_ok(&d);
    let pid = std::fs::read_to_string(d.run_dir.join("lockd.pid")).unwrap();
    assert_eq!(pid.trim(), d.pid().to_string());
    let mode = std::fs::metadata(d.run_dir.join("sanlock.sock")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(mode.permissions().mode() & 0o777, 0o660);
    // The `sanlock` group (Debian's sanlock package creates it) owns the socket, as with
    // sanlock, so clients set up for sanlock can connect.
    use std::os::unix::fs::MetadataExt;
    let want_gid = lockd_daemon::config::group_to_gid("sanlock").unwrap_or(0);
    assert_eq!(mode.gid(), want_gid);
}

#[test]
fn other_uid_cannot_touch_our_leases() {
    require_tool("setpriv", "util-linux");
    require_python_sanlock();
    let s = Scratch::new("uid");
    let d = LockdDaemon::start(&s, "hostA", &[]);
    let mut holder = d.python_child(
        // REGISTER has no reply: the inquire round trip on the same connection (served after
        // it) makes sure the daemon has registered the pid before we print it.
        "import sanlock, os, time\nfd = sanlock.register()\nsanlock.inquire(slkfd=fd)\nprint(os.getpid())\ntime.sleep(600)\n",
    );
    let pid = holder.line();
    // Let uid 65534 reach the socket at all (the daemon's own check is what we test).
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        d.run_dir.join("sanlock.sock"),
        std::fs::Permissions::from_mode(0o666),
    )
    .unwrap();
    std::fs::set_permissions(&d.run_dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&s.dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let script = format!(
        "import sanlock\ntry:\n    sanlock.inquire(pid={pid})\n    print('allowed')\n\
         except sanlock.SanlockException as e:\n    print('errno', e.errno)\n"
    );
    let out = run(Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            PYTHON,
            "-c",
            &script,
        ])
        .env("SANLOCK_RUN_DIR", &d.run_dir));
    assert_eq!(stdout(&out).trim(), "errno 1", "{out:?}");
    // Root may.
    let out = d.python(&script);
    assert_eq!(out.trim(), "allowed");
    holder.kill9();
}

#[test]
fn sigterm_is_ignored_while_lockspaces_exist() {
    require_tool("sanlock", "sanlock");
    let s = Scratch::new("sigterm");
    let disk = s.file("disk", 4);
    init_lockspace("ls1", &disk, 0);
    let mut d = LockdDaemon::start(&s, "hostA", &[]);
    let mut c = Client::connect(&d.run_dir).unwrap();
    let ls = client_lib::Lockspace::new(
        disk_format::Name::new("ls1").unwrap(),
        1,
        &disk.display().to_string(),
        0,
    )
    .unwrap();
    assert_eq!(c.add_lockspace(&ls, 1, 0).unwrap(), 0);
    let pid = d.pid().to_string();
    let term = || Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(term().success());
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        matches!(d.child.try_wait(), Ok(None)),
        "SIGTERM must not stop a daemon with lockspaces"
    );
    assert!(d.log_text().contains("shutdown ignored"));
    let mut c = Client::connect(&d.run_dir).unwrap();
    assert_eq!(c.rem_lockspace(&ls, 0).unwrap(), 0);
    assert!(term().success());
    assert!(
        wait_for(10, || matches!(d.child.try_wait(), Ok(Some(_)))),
        "SIGTERM without lockspaces must stop it"
    );
}

#[test]
fn sd_notify_ready_and_status() {
    let s = Scratch::new("notify");
    let sock_path = s.dir.join("notify.sock");
    let listener = UnixDatagram::bind(&sock_path).expect("bind notify socket");
    listener
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let d = LockdDaemon::start(
        &s,
        "hostA",
        &[("NOTIFY_SOCKET", &sock_path.display().to_string())],
    );
    let mut buf = [0u8; 4096];
    let n = listener.recv(&mut buf).expect("sd_notify message");
    let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
    assert!(msg.contains("READY=1"), "{msg}");
    assert!(
        msg.contains("STATUS=") && msg.contains("watchdog off"),
        "{msg}"
    );
    let mut d = d;
    d.stop();
    let n = listener.recv(&mut buf).expect("stopping message");
    assert!(String::from_utf8_lossy(&buf[..n]).contains("STOPPING=1"));
}

#[test]
fn without_foreground_flag_the_daemon_detaches_and_logs_to_a_file() {
    let s = Scratch::new("detach");
    let run_dir = s.dir.join("run");
    let log = s.dir.join("lockd.log");
    let t0 = std::time::Instant::now();
    let out = run(Command::new(DAEMON)
        .args(["-w", "0", "-e", "hostA", "-c", "/dev/null", "--run-dir"])
        .arg(&run_dir)
        .arg("--log-file")
        .arg(&log));
    assert!(out.status.success(), "{out:?}");
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "the parent must return at once"
    );
    let sock = run_dir.join("sanlock.sock");
    assert!(
        wait_for(10, || UnixStream::connect(&sock).is_ok()),
        "detached daemon never listened"
    );
    let pid = std::fs::read_to_string(run_dir.join("lockd.pid"))
        .unwrap()
        .trim()
        .to_string();
    let mut c = Client::connect(&run_dir).unwrap();
    assert_eq!(c.version().unwrap(), 0x0308_0500);
    assert!(c.shutdown(true, false).is_ok());
    let gone = wait_for(10, || {
        !std::path::Path::new(&format!("/proc/{pid}")).exists()
    });
    if !gone {
        let _ = Command::new("kill").args(["-KILL", &pid]).status();
    }
    assert!(gone, "detached daemon did not exit on forced shutdown");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("lockd daemon started") && text.contains("watchdog is OFF"),
        "{text}"
    );
    assert!(
        !text.contains('\u{1b}'),
        "no terminal colours in the log file"
    );
}

/// A lockspace name and a disk path with newlines, sent by a client, are logged escaped
/// (stderr log and the LOG_DUMP ring): no forged log line appears.
#[test]
fn client_names_and_paths_are_escaped_in_the_log() {
    require_tool("sanlock", "sanlock");
    let s = Scratch::new("lognames");
    let d = LockdDaemon::start(&s, "hostA", &[]);
    let path = s.dir.join("no-such-disk\nFORGED-PATH line");
    let ls = client_lib::Lockspace::new(
        disk_format::Name::new("ls\nFORGED-NAME line").unwrap(),
        1,
        &path.display().to_string(),
        0,
    )
    .unwrap();
    let mut c = Client::connect(&d.run_dir).unwrap();
    assert!(c.add_lockspace(&ls, 1, 0).unwrap() < 0, "no such disk");
    assert!(
        wait_for(10, || d.log_text().contains("add_lockspace failed")),
        "{}",
        d.log_text()
    );
    let dump = stdout(&d.sanlock_client(&["log_dump"]));
    for (what, log) in [("stderr", d.log_text()), ("log_dump", dump)] {
        assert!(
            !log.lines().any(|l| l.starts_with("FORGED")),
            "{what}: forged line in\n{log}"
        );
        assert!(log.contains("ls\\nFORGED-NAME line"), "{what}:\n{log}");
        assert!(
            log.contains("no-such-disk\\nFORGED-PATH line"),
            "{what}:\n{log}"
        );
    }
}
