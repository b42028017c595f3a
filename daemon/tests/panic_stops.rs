//! A panic inside the daemon stops it: a job that panics holding the core lock, or one
//! that leaves the tables with a broken invariant (the debug-build hook
//! `LOCKD_DEBUG_PANIC_IN_JOB=panic|break-tables`, standing for a bug in the middle of a
//! transition) ends the process with SIGABRT instead of the daemon serving on with the
//! tables half updated or its lock poisoned.

mod common;

use std::os::unix::process::ExitStatusExt;
use std::time::{Duration, Instant};

use client_lib::Client;
use common::*;

#[test]
fn a_panicking_job_ends_the_daemon() {
    let log = ends_with_sigabrt("panic");
    assert!(
        log.contains("a job panics holding the core lock"),
        "{}",
        tail(&log, 30)
    );
}

#[test]
fn a_broken_table_invariant_ends_the_daemon() {
    let log = ends_with_sigabrt("break-tables");
    assert!(
        log.contains("broke an invariant") && log.contains("held by nobody"),
        "{}",
        tail(&log, 30)
    );
}

/// Starts a daemon with the hook set to `how`, sends one request, and returns the log of
/// a daemon that then died of SIGABRT.
fn ends_with_sigabrt(how: &str) -> String {
    let scratch = Scratch::new(&format!("panic-stops-{how}"));
    let mut d = LockdDaemon::start(&scratch, "panic-host", &[("LOCKD_DEBUG_PANIC_IN_JOB", how)]);
    // The daemon serves its socket until a request reaches a worker.
    assert!(d.child.try_wait().expect("try_wait").is_none());
    let mut c = Client::connect(&d.run_dir).expect("connect");
    c.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    assert!(
        c.version().is_err(),
        "the request whose job panicked got a reply"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(s) = d.child.try_wait().expect("try_wait") {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "the daemon still runs 10 s after a job panicked; log:\n{}",
            tail(&d.log_text(), 30)
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let log = d.log_text();
    assert_eq!(
        status.signal(),
        Some(libc::SIGABRT),
        "status {status:?}; log:\n{}",
        tail(&log, 30)
    );
    assert!(log.contains("stopping"), "{}", tail(&log, 30));
    log
}
