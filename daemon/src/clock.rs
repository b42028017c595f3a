//! The daemon's one reading of time for lease state. Every time value the shell keeps in
//! its tables or hands to lockd-core or lease-core (renewal times, the monitor's `now`,
//! token acquire times, STATUS ages, `waiting=` since, host event times, the log ring's
//! stamps) is read here: [`now_s`] and [`now_ms`], and lease-core's [`Clock`] for disk
//! Paxos and delta leases, [`lease_clock`].
//!
//! Invariants:
//! - monotonic: CLOCK_MONOTONIC, never wall-clock time, so a step of the host's clock
//!   moves no lease (sanlock's timestamps are monotonic seconds too);
//! - one clock: [`now_s`], [`now_ms`] and [`lease_clock`] read the same CLOCK_MONOTONIC, so
//!   a renewal's time, the monitor's `now` and a lease-core timeout compare;
//! - deadlines of local I/O (a socket write, an HTTP scrape, a worker's exit, a bounded
//!   wait) use `std::time::Instant` and never enter lease state.
//!
//! `daemon/tests/module_graph.rs` fails on a reading of lease time outside this module, so
//! a simulated or stepped clock can later replace this one in one place.
//!
//! [`Clock`]: lease_core::Clock

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use lockd_diskio::SystemClock;

/// Seconds of CLOCK_MONOTONIC: the unit of lockd-core's `now_s` and of sanlock's
/// timestamps.
pub fn now_s() -> u64 {
    lockd_diskio::monotime()
}

/// Milliseconds of CLOCK_MONOTONIC: lease-core's unit (renewal deadlines, latencies).
pub fn now_ms() -> u64 {
    lockd_diskio::monotime_ms()
}

/// Lease-core's clock; its sleeps end early once `stop` is set (a lockspace being
/// removed, the daemon shutting down).
pub fn lease_clock(stop: Arc<AtomicBool>) -> SystemClock {
    SystemClock::new(stop)
}

/// Lease-core's clock for operations nothing stops early (a client's acquire, release or
/// convert: each is bounded by its io_timeouts).
pub fn lease_clock_unstopped() -> SystemClock {
    lease_clock(Arc::new(AtomicBool::new(false)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use lease_core::Clock;

    #[test]
    fn the_three_readings_are_one_monotonic_clock() {
        let (s0, ms0) = (now_s(), now_ms());
        let lease_ms = lease_clock_unstopped().now_ms();
        let (s1, ms1) = (now_s(), now_ms());
        assert!(s0 <= s1 && ms0 <= lease_ms && lease_ms <= ms1);
        // Seconds and milliseconds agree (at most one second boundary between them).
        assert!(
            ms0 / 1000 >= s0 && ms1 / 1000 <= s1 + 1,
            "{s0} {ms0} {ms1} {s1}"
        );
    }
}
