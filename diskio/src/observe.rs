//! The process-wide I/O observer: told of every [`DirectDisk`](crate::DirectDisk) read and write when
//! it ends (the daemon feeds its metrics from it).
//!
//! Invariant: set at most once per process (the first [`set_observer`] wins), and called
//! on the I/O's calling thread after the I/O ended, never while any lock of this crate is
//! held. Without an observer nothing is recorded.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::disk::DirectIoError;

/// Receives one finished I/O: `op` is `"read"` or `"write"`, `took` its latency
/// (submission to completion, as the caller waited), `outcome` `Ok(())` or
/// `Err("timeout")` ([`DirectIoError::Timeout`])
/// or `Err("error")` (any other failure).
pub type IoObserver = fn(op: &'static str, took: Duration, outcome: Result<(), &'static str>);

static OBSERVER: OnceLock<IoObserver> = OnceLock::new();

/// Installs the process's observer; false when one was already installed (it stays).
pub fn set_observer(observer: IoObserver) -> bool {
    OBSERVER.set(observer).is_ok()
}

/// Feeds one I/O's latency or failure to the observer, if there is one.
pub(crate) fn record(op: &'static str, t0: Instant, r: Result<(), &DirectIoError>) {
    let Some(observer) = OBSERVER.get() else {
        return;
    };
    let outcome = match r {
        Ok(()) => Ok(()),
        Err(DirectIoError::Timeout { .. }) => Err("timeout"),
        Err(_) => Err("error"),
    };
    observer(op, t0.elapsed(), outcome);
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::test_support::scratch;
    use crate::{DirectDisk, EngineKind};

    static READS: AtomicUsize = AtomicUsize::new(0);
    static WRITES: AtomicUsize = AtomicUsize::new(0);
    static ERRORS: AtomicUsize = AtomicUsize::new(0);
    /// Timeouts of other tests of this binary (a stuck pipe's read).
    static TIMEOUTS: AtomicUsize = AtomicUsize::new(0);

    fn count(op: &'static str, _took: Duration, outcome: Result<(), &'static str>) {
        let counter = match (op, outcome) {
            ("read", Ok(())) => &READS,
            ("write", Ok(())) => &WRITES,
            (_, Err("error")) => &ERRORS,
            (_, Err("timeout")) => &TIMEOUTS,
            other => panic!("unexpected report {other:?}"),
        };
        counter.fetch_add(1, Ordering::SeqCst);
    }

    /// The observer sees successes per op and failures as "error" (other tests of this
    /// binary may add to the counts, never subtract).
    #[test]
    fn observer_sees_every_read_write_and_failure() {
        assert!(set_observer(count));
        assert!(!set_observer(count), "the first observer stays");
        let (_d, path) = scratch(1 << 20);
        let disk = DirectDisk::open_with(&path, EngineKind::Threads).unwrap();
        let (r0, w0, e0) = (
            READS.load(Ordering::SeqCst),
            WRITES.load(Ordering::SeqCst),
            ERRORS.load(Ordering::SeqCst),
        );
        let t = Duration::from_secs(5);
        disk.write(0, &[1u8; 4096], t).unwrap();
        disk.read(0, 4096, t).unwrap();
        disk.read(1 << 20, 4096, t).unwrap_err();
        assert!(READS.load(Ordering::SeqCst) > r0);
        assert!(WRITES.load(Ordering::SeqCst) > w0);
        assert!(ERRORS.load(Ordering::SeqCst) > e0);
    }
}
