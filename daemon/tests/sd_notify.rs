//! systemd notification: the daemon started with NOTIFY_SOCKET pointing at our own Unix
//! datagram socket and WATCHDOG_USEC=2000000 (as systemd does for `Type=notify` +
//! `WatchdogSec=2`). READY=1 is sent only once sanlock.sock accepts connections, STATUS=
//! lines follow what the daemon holds (lockspaces, leases, clients), WATCHDOG=1 arrives
//! at least every ~1 s (half of WATCHDOG_USEC), and STOPPING=1 at shutdown.

mod common;

use std::os::unix::net::{UnixDatagram, UnixStream};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use client_lib::{Client, DiskLocation, Lockspace, Resource, ResourceHead};
use common::*;
use disk_format::Name;

/// The daemon started by the test, killed (by pid) if still running when the test ends,
/// as it does when an assertion fails before the test's own forced shutdown; the helper
/// goes with it (PDEATHSIG).
struct DaemonProcess(std::process::Child);

impl Drop for DaemonProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// One datagram from the daemon and when it arrived.
struct Msg {
    at: Instant,
    text: String,
}

fn status_of(m: &Msg) -> Option<&str> {
    m.text.lines().find_map(|l| l.strip_prefix("STATUS="))
}

/// Waits up to `secs` for a message matching `f`, keeping every message seen in `all`.
fn wait_msg(
    rx: &mpsc::Receiver<Msg>,
    all: &mut Vec<(Instant, String)>,
    secs: u64,
    f: impl Fn(&Msg) -> bool,
) -> Option<Instant> {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        let Ok(m) = rx.recv_timeout(left) else { break };
        let hit = f(&m);
        all.push((m.at, m.text.clone()));
        if hit {
            return Some(m.at);
        }
    }
    None
}

#[test]
fn ready_status_watchdog_stopping() {
    let s = Scratch::new("sdnotify");
    let sock_dir = tempfile::tempdir().expect("temp dir for NOTIFY_SOCKET");
    let notify_path = sock_dir.path().join("notify.sock");
    let listener = UnixDatagram::bind(&notify_path).expect("bind NOTIFY_SOCKET");
    let (tx, rx) = mpsc::channel::<Msg>();
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 4096];
        while let Ok(n) = listener.recv(&mut buf) {
            let m = Msg {
                at: Instant::now(),
                text: String::from_utf8_lossy(&buf[..n]).into_owned(),
            };
            if tx.send(m).is_err() {
                return;
            }
        }
    });

    let run_dir = s.dir.join("run");
    let log = s.dir.join("lockd.log");
    let logf = std::fs::File::create(&log).expect("daemon log");
    let mut daemon = DaemonProcess(
        Command::new(DAEMON)
            .args(["-D", "-w", "0", "-c", "/dev/null", "-e", "hostA", "-o", "1"])
            .arg("--run-dir")
            .arg(&run_dir)
            .env("NOTIFY_SOCKET", &notify_path)
            .env("WATCHDOG_USEC", "2000000")
            .env_remove("WATCHDOG_PID")
            .stdin(Stdio::null())
            .stdout(logf.try_clone().expect("dup log"))
            .stderr(logf)
            .spawn()
            .expect("start lockd-daemon"),
    );
    let child = &mut daemon.0;
    let log_text = || std::fs::read_to_string(&log).unwrap_or_default();
    let mut all = Vec::new();

    // READY=1: the socket must accept connections the moment READY arrives.
    let sock = run_dir.join("sanlock.sock");
    let ready = wait_msg(&rx, &mut all, 15, |m| {
        m.text.lines().any(|l| l == "READY=1")
    });
    assert!(
        ready.is_some(),
        "no READY=1; got {all:?}\nlog:\n{}",
        log_text()
    );
    assert!(
        UnixStream::connect(&sock).is_ok(),
        "READY=1 sent before {} accepted connections",
        sock.display()
    );
    let first_status = all
        .iter()
        .rev()
        .find_map(|(_, t)| t.lines().find_map(|l| l.strip_prefix("STATUS=")))
        .map(str::to_string);
    assert_eq!(
        first_status.as_deref(),
        Some("0 lockspaces, 0 leases, 0 clients; watchdog off (-w 0)"),
        "READY=1 carries the first STATUS"
    );
    println!("READY message: {:?}", all.last().map(|(_, t)| t));

    // Watchdog keep-alives for a few seconds.
    let t0 = Instant::now();
    wait_msg(&rx, &mut all, 4, |_| false);
    let pings: Vec<Instant> = all
        .iter()
        .filter(|(at, t)| *at >= t0 && t.lines().any(|l| l == "WATCHDOG=1"))
        .map(|(at, _)| *at)
        .collect();
    assert!(
        pings.len() >= 3,
        "expected WATCHDOG=1 about every second for 4 s, got {} ({all:?})",
        pings.len()
    );
    let max_gap = pings
        .windows(2)
        .map(|w| w[1] - w[0])
        .max()
        .unwrap_or_default();
    println!("{} WATCHDOG=1 in 4 s, largest gap {max_gap:?}", pings.len());
    assert!(
        max_gap <= Duration::from_millis(1300),
        "WATCHDOG=1 gap {max_gap:?} exceeds half of WATCHDOG_USEC (1 s) by too much"
    );

    // STATUS changes after add_lockspace and after a lease is acquired.
    let disk = s.file("disk", 4);
    let path = disk.display().to_string();
    let ls_name = Name::new("sdls").unwrap();
    let ls = Lockspace::new(ls_name, 1, &path, 0).unwrap();
    let res = Resource {
        head: ResourceHead {
            lockspace_name: ls_name,
            name: Name::new("r").unwrap(),
            lver: 0,
            data64: 0,
            data32: 0,
            unused: 0,
            flags: 0,
            num_disks: 1,
        },
        disks: vec![DiskLocation::new(&path, 1 << 20).unwrap()],
    };
    let mut c = Client::connect(&run_dir).unwrap();
    assert_eq!(c.write_lockspace(&ls, 1).unwrap(), 0);
    assert_eq!(c.write_resource(&res, 0, false).unwrap(), 0);
    assert_eq!(c.add_lockspace(&ls, 1, 0).unwrap(), 0);
    let joined = wait_msg(&rx, &mut all, 10, |m| {
        status_of(m) == Some("1 lockspace, 0 leases, 0 clients; watchdog off (-w 0)")
    });
    assert!(
        joined.is_some(),
        "no STATUS with 1 lockspace after add_lockspace: {all:?}"
    );
    assert!(
        all.iter()
            .any(|(_, t)| t.contains("STATUS=joined lockspace sdls (watchdog off)")),
        "no join STATUS line: {all:?}"
    );
    let mut reg = Client::connect(&run_dir).unwrap();
    reg.register().unwrap();
    assert_eq!(
        reg.acquire(-1, 0, std::slice::from_ref(&res), None)
            .unwrap(),
        0
    );
    let held = wait_msg(&rx, &mut all, 10, |m| {
        status_of(m) == Some("1 lockspace, 1 lease, 1 client; watchdog off (-w 0)")
    });
    assert!(held.is_some(), "no STATUS with 1 lease, 1 client: {all:?}");
    let statuses: Vec<&str> = all
        .iter()
        .filter_map(|(_, t)| t.lines().find_map(|l| l.strip_prefix("STATUS=")))
        .collect();
    println!("STATUS lines: {statuses:#?}");
    // The core sends a summary only when it changed, and READY=1's own line is not
    // repeated by the first summary after it (`Notifier::status_if_changed`).
    assert!(
        statuses.windows(2).all(|w| w[0] != w[1]),
        "a STATUS line repeated the one before it: {statuses:#?}"
    );

    // STOPPING=1 at a forced shutdown; keep-alives continued meanwhile.
    drop(reg);
    let mut admin = Client::connect(&run_dir).unwrap();
    let _ = admin.shutdown(true, false);
    let stopping = wait_msg(&rx, &mut all, 15, |m| {
        m.text.lines().any(|l| l == "STOPPING=1")
    });
    assert!(stopping.is_some(), "no STOPPING=1: {all:?}");
    let deadline = Instant::now() + Duration::from_secs(15);
    let status = loop {
        if let Ok(Some(st)) = child.try_wait() {
            break Some(st);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        status.is_some_and(|s| s.success()),
        "daemon did not exit 0 after forced shutdown: {status:?}\nlog:\n{}",
        log_text()
    );
    let pings = all
        .iter()
        .filter(|(_, t)| t.lines().any(|l| l == "WATCHDOG=1"))
        .count();
    println!("total messages {}, WATCHDOG=1 {pings}", all.len());
}
