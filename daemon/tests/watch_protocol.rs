//! The lease-loss watch (`LOCKD_CMD_WATCH`) against a real daemon over its socket: the
//! reply and heartbeats of a watch, and each refusal the core decides (no pid, another
//! user's process, too many watches), with the watch bound freed again when a watch
//! connection closes.

mod common;

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::time::{Duration, Instant};

use client_lib::ext::{
    WatchEvent, WatchKind, LOCKD_CMD_WATCH, LOCKD_MSG_WATCH_EVENT, WATCH_EVENT_LEN,
};
use client_lib::wire::{Header, HEADER_LEN};
use client_lib::Client;
use common::*;

/// Opens a connection and sends WATCH for `data` (0: our own pid); returns the reply
/// header and the connection.
fn watch(d: &LockdDaemon, data: u32) -> (Header, Client) {
    let mut c = Client::connect(&d.run_dir).expect("connect");
    c.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    c.send(LOCKD_CMD_WATCH, 0, data, 0, &[])
        .expect("send WATCH");
    let h = c.recv_header().expect("WATCH reply");
    (h, c)
}

/// The next watch event on `c`.
fn next_event(c: &mut Client) -> WatchEvent {
    let mut buf = vec![0u8; HEADER_LEN + WATCH_EVENT_LEN];
    c.stream().read_exact(&mut buf).expect("a watch event");
    let h = Header::decode(&buf[..HEADER_LEN]).expect("event header");
    assert_eq!(h.cmd, LOCKD_MSG_WATCH_EVENT);
    WatchEvent::decode(&buf[HEADER_LEN..]).expect("event body")
}

#[test]
fn a_watch_is_answered_then_beats_and_its_refusals_are_the_cores() {
    let scratch = Scratch::new("watch-proto");
    let d = LockdDaemon::start(&scratch, "watchhost", &[]);
    let me = std::process::id() as i32;

    // Our own process: 0, the heartbeat interval in data2, then heartbeats naming us.
    let (h, mut own) = watch(&d, 0);
    assert_eq!((h.result(), h.data2), (0, 500), "{h:?}");
    let beat = next_event(&mut own);
    assert_eq!(
        (beat.kind, beat.pid, beat.leases),
        (WatchKind::Heartbeat, me, 0)
    );

    // A pid that is not > 0 (0xffffffff reads as -1): -EINVAL.
    let (h, _c) = watch(&d, u32::MAX);
    assert_eq!(h.result(), -libc::EINVAL);

    // The bound: MAX_WATCHES open (ours counts), the next is refused -EMFILE.
    let mut open = Vec::new();
    for _ in 1..lockd_core::MAX_WATCHES {
        let (h, c) = watch(&d, 0);
        assert_eq!(h.result(), 0);
        open.push(c);
    }
    let (h, _refused) = watch(&d, 0);
    assert_eq!(h.result(), -libc::EMFILE);
    // A watch connection closes: its place is free again once the daemon saw it.
    drop(open.pop());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (h, c) = watch(&d, 0);
        if h.result() == 0 {
            open.push(c);
            break;
        }
        assert_eq!(h.result(), -libc::EMFILE);
        assert!(
            Instant::now() < deadline,
            "a closed watch never freed its place"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(open);
    drop(own);

    // A non-root caller asking to watch root's process (the daemon itself): -EPERM. The
    // socket is opened to uid 65534 so that the daemon's own check is what answers.
    require_tool("setpriv", "util-linux");
    let sock = d.run_dir.join("sanlock.sock");
    std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o666)).expect("chmod");
    std::fs::set_permissions(&d.run_dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let script = format!(
        "import socket, struct\n\
         s = socket.socket(socket.AF_UNIX)\n\
         s.connect({sock:?})\n\
         s.sendall(struct.pack('=8I', 0x04282010, 1, {LOCKD_CMD_WATCH}, 0, 32, 0, {pid}, 0))\n\
         r = s.recv(32)\n\
         print(struct.unpack('=8I', r)[6])\n",
        sock = sock.display().to_string(),
        pid = d.pid(),
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    let out = loop {
        let out = Command::new("setpriv")
            .args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "/usr/bin/python3",
                "-c",
            ])
            .arg(&script)
            .output()
            .expect("run setpriv");
        // Wait for the watches closed above to leave the core (the bound).
        let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if text != (-libc::EMFILE as u32).to_string() || Instant::now() > deadline {
            break out;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        text,
        (-libc::EPERM as u32).to_string(),
        "uid 65534 watching root's daemon"
    );
    let log = d.log_text();
    assert!(
        log.contains("lease-loss watch refused") && log.contains("the process is another user's"),
        "the refusal's reason is logged: {}",
        tail(&log, 30)
    );
}
