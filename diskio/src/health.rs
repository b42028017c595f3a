//! What this process has seen of each lease path's I/O: how many of its I/Os were given
//! up by their caller (timed out) and are still in the kernel, and when its last I/O
//! timed out. A lease on several disks skips a path that is *overdue* or *cooling down*
//! (see `lockd_diskio::ParallelDisk`), so a hung path costs one timeout, not one per
//! operation.
//!
//! Invariants:
//! - a path's `overdue` count is the number of its I/Os whose caller gave up and whose
//!   completion has not arrived; each [`IoTicket`] adds at most one and takes it back at
//!   its completion, whichever of the two comes first (a three-state atomic decides);
//! - an I/O that completed before its caller gave up ends the path's cool-down; an
//!   overdue I/O still in the kernel keeps the path [`sick`](PathHealth::sick) whatever
//!   else happens;
//! - entries are keyed by the path as the caller named it: two names of one device are
//!   two entries, which can only make a skip rarer, never wrongly skip a path that has
//!   not timed out.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use crate::sys::monotime_ms;

use lease_core::disks::COOL_DOWN_TIMEOUTS;

/// Paths this process opened lease storage on. Bounded by the distinct lease paths the
/// daemon was ever asked to open (an entry is 40 bytes and a path).
fn registry() -> &'static Mutex<HashMap<PathBuf, Arc<PathHealth>>> {
    static PATHS: OnceLock<Mutex<HashMap<PathBuf, Arc<PathHealth>>>> = OnceLock::new();
    PATHS.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The health record of `path`, shared by every open of it in this process.
pub fn of(path: &Path) -> Arc<PathHealth> {
    let mut paths = registry().lock().unwrap_or_else(PoisonError::into_inner);
    paths.entry(path.to_path_buf()).or_default().clone()
}

/// The health record of `path`, if this process ever opened it.
pub fn lookup(path: &Path) -> Option<Arc<PathHealth>> {
    let paths = registry().lock().unwrap_or_else(PoisonError::into_inner);
    paths.get(path).cloned()
}

/// Whether `path` is sick now ([`PathHealth::sick`]); a path never opened is not.
pub fn path_is_sick(path: &Path) -> bool {
    lookup(path).is_some_and(|h| h.sick())
}

/// One path's record.
#[derive(Debug, Default)]
pub struct PathHealth {
    overdue: AtomicUsize,
    /// CLOCK_MONOTONIC ms until which the path cools down (0: not cooling down).
    cool_until_ms: AtomicU64,
}

impl PathHealth {
    /// Whether an I/O given up on is still in the kernel, or the last timeout is recent.
    pub fn sick(&self) -> bool {
        self.overdue.load(Ordering::SeqCst) > 0
            || monotime_ms() < self.cool_until_ms.load(Ordering::SeqCst)
    }

    /// I/Os given up on and still in the kernel.
    pub fn overdue(&self) -> usize {
        self.overdue.load(Ordering::SeqCst)
    }

    /// Notes a timeout of an I/O (or a probe) that was given `timeout`.
    pub fn timed_out(&self, timeout: Duration) {
        let until = monotime_ms().saturating_add(
            (timeout.as_millis() as u64)
                .max(1)
                .saturating_mul(COOL_DOWN_TIMEOUTS),
        );
        self.cool_until_ms.fetch_max(until, Ordering::SeqCst);
    }

    /// Notes an I/O that completed in time: the cool-down ends.
    fn answered(&self) {
        self.cool_until_ms.store(0, Ordering::SeqCst);
    }
}

const RUNNING: u8 = 0;
const GIVEN_UP: u8 = 1;
const DONE: u8 = 2;

/// One I/O's part in its path's record: the submitter may give it up, the engine
/// finishes it.
#[derive(Debug)]
pub struct IoTicket {
    state: AtomicU8,
    path: Arc<PathHealth>,
}

impl IoTicket {
    /// A ticket for one I/O on the path of `path`.
    pub fn new(path: Arc<PathHealth>) -> Arc<IoTicket> {
        Arc::new(IoTicket {
            state: AtomicU8::new(RUNNING),
            path,
        })
    }

    /// The caller stopped waiting after `timeout`: the path is overdue until the I/O
    /// completes, and cools down.
    pub fn give_up(&self, timeout: Duration) {
        self.path.timed_out(timeout);
        self.path.overdue.fetch_add(1, Ordering::SeqCst);
        if self
            .state
            .compare_exchange(RUNNING, GIVEN_UP, Ordering::SeqCst, Ordering::SeqCst)
            .is_err()
        {
            // Completed (or given up) meanwhile: not in the kernel after all.
            self.path.overdue.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// The engine saw the I/O's completion; `timed_out` when the kernel cancelled it at
    /// its deadline. Only an I/O that completed before its caller gave up ends the
    /// path's cool-down: one that came back late says the path is slow.
    pub fn finished(&self, timed_out: bool, timeout: Duration) {
        let given_up = self.state.swap(DONE, Ordering::SeqCst) == GIVEN_UP;
        if given_up {
            self.path.overdue.fetch_sub(1, Ordering::SeqCst);
        }
        if timed_out {
            self.path.timed_out(timeout);
        } else if !given_up {
            self.path.answered();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_given_up_io_keeps_its_path_overdue_until_it_completes() {
        let h = Arc::new(PathHealth::default());
        let t = IoTicket::new(h.clone());
        assert!(!h.sick());
        t.give_up(Duration::from_millis(1));
        assert_eq!(h.overdue(), 1);
        assert!(h.sick());
        t.finished(false, Duration::from_millis(1));
        assert_eq!(h.overdue(), 0);
        std::thread::sleep(Duration::from_millis(COOL_DOWN_TIMEOUTS + 5));
        assert!(!h.sick(), "overdue no more, and cooled down");
        // A late completion does not end a cool-down; one in time does.
        let late = IoTicket::new(h.clone());
        late.give_up(Duration::from_secs(1));
        late.finished(false, Duration::from_secs(1));
        assert_eq!(h.overdue(), 0);
        assert!(h.sick(), "a late completion keeps the cool-down");
        IoTicket::new(h.clone()).finished(false, Duration::from_secs(1));
        assert!(!h.sick(), "an in-time completion ends the cool-down");
    }

    #[test]
    fn a_completion_before_the_give_up_leaves_nothing_overdue() {
        let h = Arc::new(PathHealth::default());
        let t = IoTicket::new(h.clone());
        t.finished(false, Duration::from_millis(1));
        t.give_up(Duration::from_secs(1));
        assert_eq!(h.overdue(), 0);
        assert!(h.sick(), "the timeout still starts a cool-down");
    }

    #[test]
    fn a_kernel_timeout_cools_the_path_down_for_its_multiple() {
        let h = Arc::new(PathHealth::default());
        IoTicket::new(h.clone()).finished(true, Duration::from_millis(20));
        assert!(h.sick());
        std::thread::sleep(Duration::from_millis(20 * COOL_DOWN_TIMEOUTS + 20));
        assert!(!h.sick());
    }

    #[test]
    fn paths_are_shared_by_name() {
        let a = of(Path::new("/nonexistent/health-test-a"));
        assert!(Arc::ptr_eq(
            &a,
            &of(Path::new("/nonexistent/health-test-a"))
        ));
        a.timed_out(Duration::from_secs(5));
        assert!(path_is_sick(Path::new("/nonexistent/health-test-a")));
        assert!(!path_is_sick(Path::new("/nonexistent/health-test-b")));
    }
}
