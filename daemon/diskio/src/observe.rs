//! The process-wide I/O observer: told of every [`Disk`](crate::Disk) read and write when
//! it ends (the daemon feeds its metrics from it).
//!
//! Invariant: set at most once per process (the first [`set_observer`] wins), and called
//! on the I/O's calling thread after the I/O ended, never while any lock of this crate is
//! held. Without an observer nothing is recorded.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::disk::IoError;

/// Receives one finished I/O: `op` is `"read"` or `"write"`, `took` its latency
/// (submission to completion, as the caller waited), `outcome` `Ok(())` or
/// `Err("timeout")` ([`IoError::Timeout`](crate::IoError::Timeout))
/// or `Err("error")` (any other failure).
pub type IoObserver = fn(op: &'static str, took: Duration, outcome: Result<(), &'static str>);

static OBSERVER: OnceLock<IoObserver> = OnceLock::new();

/// Installs the process's observer; false when one was already installed (it stays).
pub fn set_observer(observer: IoObserver) -> bool {
    OBSERVER.set(observer).is_ok()
}

/// Feeds one I/O's latency or failure to the observer, if there is one.
pub(crate) fn record(op: &'static str, t0: Instant, r: Result<(), &IoError>) {
    let Some(observer) = OBSERVER.get() else {
        return;
    };
    let outcome = match r {
        Ok(()) => Ok(()),
        Err(IoError::Timeout { .. }) => Err("timeout"),
        Err(_) => Err("error"),
    };
    observer(op, t0.elapsed(), outcome);
}
