//! EXAMINE_LOCKSPACE sent in a loop (issue 14: "EXAMINE must not be able to start
//! unbounded threads"): the daemon examines a lockspace on at most one thread at a time,
//! so 400 pipelined EXAMINE commands, each of which reads the request record of 40 held
//! leases, add at most a few threads to the daemon. (Before, each command started a
//! thread of its own, and they piled up.)

mod common;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use client_lib::proto::*;
use client_lib::wire::{self, Header};
use common::*;
use disk_format::Name;

const RESOURCES: u64 = 40;
const EXAMINES: usize = 400;

fn threads_of(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

#[test]
fn examine_in_a_loop_starts_at_most_one_thread_per_lockspace() {
    require_python_sanlock();
    let s = Scratch::new("examine-bounded");
    let img = s.file("disk.img", RESOURCES + 2);
    let path = img.display().to_string();
    init_lockspace("LS", &img, 0);
    for r in 0..RESOURCES {
        init_resource("LS", &format!("r{r}"), &img, (r + 1) << 20);
    }
    let d = LockdDaemon::start(&s, "hostA", &[]);
    let mut holder = d.python_child(&format!(
        r#"
import sanlock, time
sanlock.add_lockspace(b"LS", 1, "{path}", 0, iotimeout=1)
fd = sanlock.register()
for r in range({RESOURCES}):
    sanlock.acquire(b"LS", b"r%d" % r, [("{path}", (r + 1) << 20)], slkfd=fd)
print("held", flush=True)
time.sleep(600)
"#
    ));
    assert_eq!(holder.line(), "held");
    std::thread::sleep(Duration::from_millis(500));
    let pid = d.pid();
    let baseline = threads_of(pid);
    assert!(baseline > 0, "cannot read the daemon's thread count");

    let stop = Arc::new(AtomicBool::new(false));
    let peak = Arc::new(AtomicU64::new(baseline));
    let sampler = {
        let (stop, peak) = (stop.clone(), peak.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                peak.fetch_max(threads_of(pid), Ordering::SeqCst);
                std::thread::sleep(Duration::from_micros(200));
            }
        })
    };
    let ls = wire::Lockspace::new(Name::new("LS").unwrap(), 0, &path, 0).unwrap();
    let mut one = Header {
        magic: SM_MAGIC,
        version: SM_PROTO,
        cmd: SM_CMD_EXAMINE_LOCKSPACE,
        cmd_flags: 0,
        length: (wire::HEADER_LEN + wire::LOCKSPACE_LEN) as u32,
        seq: 0,
        data: 0,
        data2: 0,
    }
    .encode()
    .to_vec();
    one.extend_from_slice(&ls.encode());
    let mut sock = UnixStream::connect(d.run_dir.join("sanlock.sock")).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let writer = {
        let mut w = sock.try_clone().unwrap();
        std::thread::spawn(move || {
            for _ in 0..EXAMINES {
                w.write_all(&one).unwrap();
            }
        })
    };
    let mut ok = 0;
    for _ in 0..EXAMINES {
        let mut reply = [0u8; wire::HEADER_LEN];
        sock.read_exact(&mut reply).unwrap();
        let h = Header::decode(&reply).unwrap();
        assert_eq!(h.data as i32, 0, "EXAMINE_LOCKSPACE failed");
        ok += 1;
    }
    writer.join().unwrap();
    // Let the examine thread finish the requests that came last.
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::SeqCst);
    sampler.join().unwrap();
    let peak = peak.load(Ordering::SeqCst);
    assert_eq!(ok, EXAMINES);
    assert!(
        peak <= baseline + 2,
        "{EXAMINES} EXAMINE commands raised the daemon's threads from {baseline} to {peak}"
    );
    // Every command reached the dispatcher (its debug line names it).
    let log = d.log_text();
    let seen = log.matches("examine_lockspace").count();
    assert!(
        seen >= EXAMINES,
        "only {seen} examine_lockspace commands in the daemon log:\n{}",
        tail(&log, 30)
    );
    holder.kill9();
}
