//! Every timing formula sanlock derives from io_timeout (D) and the watchdog fire timeout (W).
//!
//! All values are whole seconds. Formulas that concern *another* host must be called with
//! that host's io_timeout, read from its delta lease ([`host_dead_seconds`] of an owner,
//! the delta acquire waits of a previous owner); formulas about ourselves take ours.

/// Default io_timeout (seconds).
pub const DEFAULT_IO_TIMEOUT: u64 = 10;
/// Default watchdog fire timeout W (seconds). Must be the same on every host.
pub const DEFAULT_WATCHDOG_FIRE_TIMEOUT: u64 = 60;
/// Default kill grace (seconds) when W ≥ 60 or it was configured explicitly.
pub const DEFAULT_KILL_GRACE: u64 = 40;
/// Default `write_init_io_timeout` (seconds) for formatting writes.
pub const WRITE_INIT_IO_TIMEOUT: u64 = 60;

/// Interval between renewals: 2D.
pub fn id_renewal_seconds(io_timeout: u64) -> u64 {
    2 * io_timeout
}

/// Renewals failing this long produce warnings: 6D.
pub fn id_renewal_warn_seconds(io_timeout: u64) -> u64 {
    6 * io_timeout
}

/// Renewals failing this long fail the lockspace (recovery starts); it is also the wdmd
/// expiry after the last good renewal: 8D.
pub fn id_renewal_fail_seconds(io_timeout: u64) -> u64 {
    8 * io_timeout
}

/// A host whose delta lease has not changed for this long has been reset by its watchdog:
/// 8D + W, with D the *other* host's io_timeout.
pub fn host_dead_seconds(other_io_timeout: u64, watchdog_fire: u64) -> u64 {
    id_renewal_fail_seconds(other_io_timeout) + watchdog_fire
}

/// The delta-lease paper's large delay: renewal interval + 6D = 8D.
pub fn delta_large_delay(other_io_timeout: u64) -> u64 {
    id_renewal_seconds(other_io_timeout) + 6 * other_io_timeout
}

/// Wait before taking a host_id held by another host name: max(host_dead, large delay).
pub fn delta_acquire_held_wait(other_io_timeout: u64, watchdog_fire: u64) -> u64 {
    host_dead_seconds(other_io_timeout, watchdog_fire).max(delta_large_delay(other_io_timeout))
}

/// Wait between writing our delta lease and verifying it: 2D of the previous owner.
pub fn delta_short_delay(other_io_timeout: u64) -> u64 {
    2 * other_io_timeout
}

/// How long a request/event bit stays set in our bitmap: 6D (sanlock `-b` overrides).
pub fn set_bitmap_seconds(io_timeout: u64) -> u64 {
    6 * io_timeout
}

/// Kill grace: `configured` if given, else 40 (3.8); 3.9 derives it from W when not set:
/// 40 if W ≥ 60, 15 if 30 ≤ W < 60, 0 if W < 30.
pub fn kill_grace_seconds(watchdog_fire: u64, configured: Option<u64>) -> u64 {
    match configured {
        Some(v) => v,
        None if watchdog_fire >= 60 => DEFAULT_KILL_GRACE,
        None if watchdog_fire >= 30 => 15,
        None => 0,
    }
}

/// Timeout of the renewal write: host_dead_seconds of ourselves (never abandoned early).
pub fn renewal_write_timeout(io_timeout: u64, watchdog_fire: u64) -> u64 {
    host_dead_seconds(io_timeout, watchdog_fire)
}

/// Extra wait to reap a timed-out renewal read before issuing a new one: D.
pub fn renewal_read_extend_seconds(io_timeout: u64) -> u64 {
    io_timeout
}

/// wdmd's test interval: 3.9 scales it with W (10 if W ≥ 60, 5 if ≥ 30, 2 if ≥ 10, else 1).
pub fn wdmd_test_interval(watchdog_fire: u64) -> u64 {
    match watchdog_fire {
        w if w >= 60 => 10,
        w if w >= 30 => 5,
        w if w >= 10 => 2,
        _ => 1,
    }
}

/// Expected bounds (min, max) of a delta acquire of a free lease: 2D / 5D.
pub fn delta_acquire_free_bounds(io_timeout: u64) -> (u64, u64) {
    (2 * io_timeout, 5 * io_timeout)
}

/// Expected bounds of a delta acquire of a held lease: max(8D+W, 8D) / that + 6D.
pub fn delta_acquire_held_bounds(io_timeout: u64, watchdog_fire: u64) -> (u64, u64) {
    let min = delta_acquire_held_wait(io_timeout, watchdog_fire);
    (min, min + 6 * io_timeout)
}

/// Expected maximum of a paxos acquire of a free lease: 6D.
pub fn paxos_acquire_free_max(io_timeout: u64) -> u64 {
    6 * io_timeout
}

/// Expected bounds of a paxos acquire of a lease held by a dead host: host_dead / + 7D.
pub fn paxos_acquire_held_bounds(io_timeout: u64, watchdog_fire: u64) -> (u64, u64) {
    let min = host_dead_seconds(io_timeout, watchdog_fire);
    (min, min + 7 * io_timeout)
}

/// All the formulas for one (D, W) pair, for callers that prefer a value over functions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// D, seconds.
    pub io_timeout: u64,
    /// W, seconds.
    pub watchdog_fire: u64,
}

impl Timeouts {
    /// Timeouts for io_timeout `d` and watchdog fire timeout `w`.
    pub fn new(io_timeout: u64, watchdog_fire: u64) -> Timeouts {
        Timeouts {
            io_timeout,
            watchdog_fire,
        }
    }

    /// 2D.
    pub fn id_renewal(&self) -> u64 {
        id_renewal_seconds(self.io_timeout)
    }
    /// 6D.
    pub fn id_renewal_warn(&self) -> u64 {
        id_renewal_warn_seconds(self.io_timeout)
    }
    /// 8D.
    pub fn id_renewal_fail(&self) -> u64 {
        id_renewal_fail_seconds(self.io_timeout)
    }
    /// 8D + W.
    pub fn host_dead(&self) -> u64 {
        host_dead_seconds(self.io_timeout, self.watchdog_fire)
    }
    /// 6D.
    pub fn set_bitmap(&self) -> u64 {
        set_bitmap_seconds(self.io_timeout)
    }
    /// wdmd test interval for W.
    pub fn wdmd_test_interval(&self) -> u64 {
        wdmd_test_interval(self.watchdog_fire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_defaults() {
        let t = Timeouts::new(10, 60);
        assert_eq!(t.id_renewal(), 20);
        assert_eq!(t.id_renewal_warn(), 60);
        assert_eq!(t.id_renewal_fail(), 80);
        assert_eq!(t.host_dead(), 140);
        assert_eq!(delta_large_delay(10), 80);
        assert_eq!(delta_acquire_held_wait(10, 60), 140);
        assert_eq!(delta_short_delay(10), 20);
        assert_eq!(t.set_bitmap(), 60);
        assert_eq!(kill_grace_seconds(60, None), 40);
        assert_eq!(renewal_write_timeout(10, 60), 140);
        assert_eq!(t.wdmd_test_interval(), 10);
        assert_eq!(delta_acquire_free_bounds(10), (20, 50));
        assert_eq!(delta_acquire_held_bounds(10, 60), (140, 200));
        assert_eq!(paxos_acquire_free_max(10), 60);
        assert_eq!(paxos_acquire_held_bounds(10, 60), (140, 210));
    }

    #[test]
    fn table_other_columns() {
        assert_eq!(host_dead_seconds(5, 30), 70);
        assert_eq!(kill_grace_seconds(30, None), 15);
        assert_eq!(kill_grace_seconds(20, None), 0);
        assert_eq!(kill_grace_seconds(20, Some(7)), 7);
        assert_eq!(wdmd_test_interval(30), 5);
        assert_eq!(wdmd_test_interval(10), 2);
        assert_eq!(wdmd_test_interval(5), 1);
        assert_eq!(host_dead_seconds(1, 60), 68);
        assert_eq!(delta_acquire_held_wait(1, 60), 68);
        assert_eq!(delta_acquire_held_wait(1, 0), 8);
    }
}
