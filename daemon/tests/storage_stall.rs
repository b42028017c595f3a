//! A lockspace whose storage stalls (a hung SAN path, simulated with the project's FUSE
//! fault injector `lockd-faultfs`) enters recovery at id_renewal_fail = 8·io_timeout after
//! the last good renewal: the holder gets SIGTERM then, and SIGKILL when the kill grace
//! ends; its lease is dropped without disk I/O and the failed lockspace goes away.

mod common;

use std::os::unix::process::ExitStatusExt;
use std::time::{Duration, Instant};

use common::*;

const RES_OFF: u64 = 1 << 20;

#[test]
fn stalled_storage_enters_recovery_on_schedule() {
    require_tool("sanlock", "sanlock");
    require_python_sanlock();
    let s = Scratch::new("stall");
    let backing = s.file("backing", 8);
    init_lockspace("ls1", &backing, 0);
    init_resource("ls1", "res1", &backing, RES_OFF);
    let ffs = faultfs(&s, "a", &backing);
    let disk = ffs.disk();
    // Kill grace 3 s: SIGTERM at last_renewal + 8 s, SIGKILL at last_renewal + 11 s.
    let mut d = LockdDaemon::start_args(&s, "hostA", &["-g", "3"], &[]);
    d.python(&format!(
        "import sanlock\nsanlock.add_lockspace(b'ls1', 1, b'{}', 0, iotimeout=1)",
        disk.display()
    ));
    let mut holder = d.python_child(
        &[
            "import sanlock, signal, time, sys".to_string(),
            format!("D = b'{}'", disk.display()),
            "signal.signal(signal.SIGTERM, lambda *a: print('sigterm', flush=True))".to_string(),
            "fd = sanlock.register()".to_string(),
            format!("sanlock.acquire(b'ls1', b'res1', [(D, {RES_OFF})], slkfd=fd)"),
            "print('held', flush=True)".to_string(),
            "while True:".to_string(),
            "    time.sleep(0.1)".to_string(),
        ]
        .join("\n"),
    );
    assert_eq!(holder.line(), "held");
    // Let a renewal or two pass, then stall the storage.
    std::thread::sleep(Duration::from_secs(3));
    ffs.set("stall");
    let t0 = Instant::now();
    assert_eq!(holder.line(), "sigterm");
    let t_term = t0.elapsed().as_secs_f64();
    let status = loop {
        if let Some(st) = holder.child.try_wait().unwrap() {
            break st;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "holder was never SIGKILLed"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let t_kill = t0.elapsed().as_secs_f64();
    eprintln!("stall → SIGTERM after {t_term:.1} s, SIGKILL after {t_kill:.1} s");
    assert_eq!(status.signal(), Some(libc::SIGKILL));
    // The last good renewal was 0–2 s before the stall; checks run once a second.
    assert!((5.5..=9.5).contains(&t_term), "SIGTERM after {t_term:.1} s");
    assert!(
        (8.5..=12.5).contains(&t_kill),
        "SIGKILL after {t_kill:.1} s"
    );
    assert!(t_kill - t_term >= 2.0, "grace between SIGTERM and SIGKILL");
    let log = d.log_text();
    assert!(log.contains("lockspace failed"), "{}", tail(&log, 40));
    // With its holder gone the failed lockspace is removed (no disk I/O needed).
    let gone = wait_for(10, || {
        client_lib::Client::connect(&d.run_dir)
            .and_then(|mut c| c.get_lockspaces())
            .is_ok_and(|l| l.is_empty())
    });
    assert!(
        gone,
        "failed lockspace was not removed; log:\n{}",
        tail(&d.log_text(), 30)
    );
    ffs.set("pass");
    d.stop();
}
