//! One lockspace's status ([`SpaceSt`], kept by the core: `Core::spaces`) and the
//! transitions that change it: a renewal's outcome, posted by the lockspace's renewal
//! thread ([`SpaceSt::renewal_ok`], [`SpaceSt::renewal_failed`]: the daemon posts them
//! by the lockspace's id, the simulator through `Input::RenewalOk`/`RenewalFailed`), and the once-a-second look at our lease's age
//! ([`SpaceSt::check_expiry`], in the tick the monitor runs, `Input::Tick`). Each is a
//! plain
//! function of the status, the time and the timeouts: no I/O, no other lock, no clock
//! read inside, so the unit tests below run the lease's whole life (joined, renewals
//! failing, lost) in virtual seconds.
//!
//! Invariants:
//! - `space_dead` never goes back to false: a lost delta lease is not renewed again, other
//!   hosts must see it expire;
//! - the LockspaceFailed notice is given once (`loss_notified`), and before the verdict
//!   that makes the monitor kill the holders;
//! - at most [`RENEWAL_HISTORY`] renewal records are kept.

use std::collections::VecDeque;

use client_lib::ext::WatchKind;
use disk_format::Geometry;
use lease_core::timeouts;

/// Renewal history kept per lockspace (sanlock's renewal_history_size).
pub const RENEWAL_HISTORY: usize = 180;

/// Where a lockspace is in its life.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Phase {
    /// Joining (the default: a new lockspace has nothing on disk that is ours yet).
    #[default]
    Adding,
    Joined,
    Removing,
}

/// One renewal, for RENEWAL, and the instants that bound when its record landed.
#[derive(Debug, Clone, Copy)]
pub struct RenewalRec {
    pub timestamp: u64,
    pub read_ms: u64,
    pub write_ms: u64,
    /// Monotime ms taken just before the renewal's write was sent: the record landed no
    /// earlier.
    pub write_sent_ms: u64,
    /// Monotime ms when the renewal had ended: the record landed no later.
    pub ended_ms: u64,
}

/// Mutable lockspace state (kept by the core); the default is a lockspace being added.
#[derive(Debug, Default)]
pub struct SpaceSt {
    pub phase: Phase,
    pub add_result: Option<i32>,
    pub geometry: Option<Geometry>,
    pub host_generation: u64,
    pub last_success_s: u64,
    pub last_renewal_ok: bool,
    pub corrupt_result: i32,
    pub renew_fail: bool,
    /// Our lease is lost (failed renewals, corruption, or removal): holders are killed.
    pub space_dead: bool,
    /// The LockspaceFailed notice went to watchers (sent once per lockspace).
    pub loss_notified: bool,
    /// Processes of this host held leases of it when its lease was found lost (the
    /// shell keeps the watchdog armed when their writes may outlive them).
    pub failed_with_holders: bool,
    /// Set by rem_lockspace / forced shutdown: kill with SIGKILL at once.
    pub kill_now: bool,
    pub acquire_last_result: i32,
    pub renewal_last_result: i32,
    pub acquire_last_attempt: u64,
    pub acquire_last_success: u64,
    pub renewal_last_attempt: u64,
    pub renewal_last_success: u64,
    pub external_used: bool,
    pub used_by_orphans: bool,
    pub renewals: VecDeque<RenewalRec>,
    /// What our renewals carry to the other hosts (SET_EVENT's event, REQUEST's and
    /// SET_EVENT's bits).
    pub outgoing: crate::events::Outgoing,
    /// Removal's second step has begun: every holder is gone and the renewal thread has
    /// stopped to release the delta lease. Before it (removal requested, holders still
    /// being killed) INQ_LOCKSPACE still answers "joined", as sanlock does while the
    /// lockspace sits on its `spaces` list; after it, "in progress" until `gone`.
    pub releasing: bool,
    pub gone: bool,
}

/// What [`SpaceSt::check_expiry`] found; the monitor acts on it with no lock held.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Expiry {
    /// A lease-loss notice for the watchers, to be sent before any kill.
    pub notice: Option<WatchKind>,
    /// The lease was found lost just now, this many seconds after the last renewal.
    pub failed_after_s: Option<u64>,
    /// Renewals are failing: this many seconds since the last one (not lost yet).
    pub failing_for_s: Option<u64>,
    /// The holders are to be killed (lost lease or removal).
    pub kill: bool,
    /// A lost lockspace still listed as joined: it goes once its holders are gone.
    pub remove_when_unused: bool,
}

impl SpaceSt {
    /// The status a gone lockspace reads as once the core no longer keeps it
    /// (`Core::add_space` prunes old gone entries): removed, its add answered -ENOENT if
    /// it never was, its lease not to be used.
    pub fn gone_for_good() -> SpaceSt {
        SpaceSt {
            phase: Phase::Removing,
            add_result: Some(-crate::errno::ENOENT),
            space_dead: true,
            releasing: true,
            gone: true,
            ..SpaceSt::default()
        }
    }

    /// A renewal succeeded; `last_success_s` is its time (monotime s).
    pub fn renewal_ok(&mut self, last_success_s: u64, rec: RenewalRec) {
        self.last_success_s = last_success_s;
        self.last_renewal_ok = true;
        self.renewal_last_result = 1;
        self.renewal_last_success = last_success_s;
        self.renew_fail = false;
        self.renewals.push_back(rec);
        while self.renewals.len() > RENEWAL_HISTORY {
            self.renewals.pop_front();
        }
    }

    /// The longest time, in ms, our record may have stood still on the storage from
    /// `since_s` (monotime s) to `now_ms`: between two renewals kept in the history (the
    /// one before `since_s` included), from the first one's write being sent to the end
    /// of the next one (its record landed between those instants), and from the last
    /// one's write being sent to `now_ms`. No reader can have seen our record stand
    /// still longer than that. Without a renewal in the history (just joined) the
    /// lease's time in whole seconds (rounded down: earlier) is the start.
    pub fn longest_renewal_gap_ms(&self, since_s: u64, now_ms: u64) -> u64 {
        let last_sent_ms = self
            .renewals
            .back()
            .map_or(self.last_success_s * 1000, |r| r.write_sent_ms);
        let mut gap_ms = now_ms.saturating_sub(last_sent_ms);
        let mut prev_sent_ms: Option<u64> = None;
        for r in &self.renewals {
            if r.timestamp >= since_s {
                if let Some(p) = prev_sent_ms {
                    gap_ms = gap_ms.max(r.ended_ms.saturating_sub(p));
                }
            }
            prev_sent_ms = Some(r.write_sent_ms);
        }
        gap_ms
    }

    /// A renewal failed with sanlock code `code`; `corrupt` when our delta sector was
    /// found damaged or taken (then the lease is lost at the next check).
    pub fn renewal_failed(&mut self, code: i32, corrupt: bool) {
        self.renewal_last_result = code;
        self.last_renewal_ok = false;
        self.renew_fail = true;
        if corrupt {
            self.corrupt_result = code;
        }
    }

    /// Whether renewals must stop: the lease is lost (corrupt, or found expired), and
    /// other hosts must see it expire. A removal or shutdown requested afterwards does not
    /// bring it back: renewing a lease past its fail time, or releasing it, would let
    /// others take its leases sooner than host_dead while the holders' last writes may
    /// still be on their way.
    pub fn lease_lost(&self) -> bool {
        self.corrupt_result != 0 || self.space_dead
    }

    /// The monitor's look at our lease at `now_s` (monotime s): a lease older than
    /// id_renewal_fail (or corrupt) is lost — `space_dead` from then on; older than
    /// id_renewal_warn, its renewals are failing. A lockspace whose add has not
    /// succeeded has no lease to check: one still being added, and one removed while its
    /// join ran (phase Removing, never joined; its add is answered -1), which holds no
    /// lease and must not be logged as failed.
    pub fn check_expiry(&mut self, now_s: u64, io_timeout_s: u64) -> Expiry {
        let mut e = Expiry::default();
        if self.add_result != Some(0) {
            return e;
        }
        let fail_s = timeouts::id_renewal_fail_seconds(io_timeout_s);
        let warn_s = timeouts::id_renewal_warn_seconds(io_timeout_s);
        let age = now_s.saturating_sub(self.last_success_s);
        let lost = self.space_dead || self.corrupt_result != 0 || age >= fail_s;
        e.notice = if self.kill_now || (self.space_dead && self.loss_notified) {
            None
        } else if lost {
            self.loss_notified = true;
            Some(WatchKind::LockspaceFailed)
        } else if age >= warn_s {
            Some(WatchKind::RenewalFailing)
        } else {
            None
        };
        if !self.space_dead && (self.corrupt_result != 0 || age >= fail_s) {
            self.space_dead = true;
            e.failed_after_s = Some(age);
        } else if !self.space_dead && age >= warn_s {
            e.failing_for_s = Some(age);
        }
        e.kill = self.space_dead || self.kill_now;
        e.remove_when_unused = self.space_dead && !self.kill_now && self.phase == Phase::Joined;
        e
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const IO_S: u64 = 10;

    fn joined_at(t: u64) -> SpaceSt {
        let mut st = SpaceSt {
            phase: Phase::Joined,
            add_result: Some(0),
            ..SpaceSt::default()
        };
        st.renewal_ok(t, rec(t));
        st
    }

    fn rec(t: u64) -> RenewalRec {
        RenewalRec {
            timestamp: t,
            read_ms: 1,
            write_ms: 0,
            write_sent_ms: t * 1000 + 100,
            ended_ms: t * 1000 + 101,
        }
    }

    #[test]
    fn a_lease_ages_from_renewing_to_failing_to_lost_and_stays_lost() {
        let fail = timeouts::id_renewal_fail_seconds(IO_S);
        let warn = timeouts::id_renewal_warn_seconds(IO_S);
        assert!(warn < fail);
        let mut st = joined_at(100);
        assert_eq!(st.check_expiry(100 + warn - 1, IO_S), Expiry::default());
        st.renewal_failed(-crate::errno::EIO, false);
        let e = st.check_expiry(100 + warn, IO_S);
        assert_eq!(e.notice, Some(WatchKind::RenewalFailing));
        assert_eq!(e.failing_for_s, Some(warn));
        assert!(!e.kill && !st.space_dead && !st.lease_lost());
        let e = st.check_expiry(100 + fail, IO_S);
        assert_eq!(e.notice, Some(WatchKind::LockspaceFailed));
        assert_eq!(e.failed_after_s, Some(fail));
        assert!(e.kill && e.remove_when_unused && st.lease_lost());
        // The notice is given once; a late renewal does not bring the lease back.
        st.renewal_ok(100 + fail + 1, rec(100 + fail + 1));
        let e = st.check_expiry(100 + fail + 2, IO_S);
        assert_eq!(e.notice, None);
        assert_eq!(e.failed_after_s, None);
        assert!(e.kill && st.space_dead);
    }

    #[test]
    fn a_corrupt_sector_loses_the_lease_at_the_next_check_whatever_its_age() {
        let mut st = joined_at(100);
        st.renewal_failed(-223, true);
        assert!(st.lease_lost());
        let e = st.check_expiry(101, IO_S);
        assert_eq!(e.notice, Some(WatchKind::LockspaceFailed));
        assert_eq!(e.failed_after_s, Some(1));
        assert!(e.kill);
    }

    #[test]
    fn removal_kills_without_a_loss_notice_and_is_not_removed_twice() {
        let mut st = joined_at(100);
        st.kill_now = true;
        st.phase = Phase::Removing;
        let e = st.check_expiry(101, IO_S);
        assert_eq!(e.notice, None);
        assert!(e.kill && !e.remove_when_unused);
        assert!(
            !st.lease_lost(),
            "a lockspace being removed renews until its last renewal"
        );
    }

    #[test]
    fn the_longest_renewal_gap_runs_from_a_write_sent_to_the_next_renewal_s_end_or_now() {
        let mut st = joined_at(100);
        for t in [102, 104, 114, 116] {
            st.renewal_ok(t, rec(t));
        }
        // From the write sent at 104.100 to the end of the next renewal at 114.101.
        assert_eq!(st.longest_renewal_gap_ms(105, 117_000), 10_001);
        assert_eq!(st.longest_renewal_gap_ms(115, 117_000), 2_001);
        // No renewal since 116.100: the time since then counts.
        assert_eq!(st.longest_renewal_gap_ms(115, 130_000), 13_900);
        // A renewal whose write was sent at 120.0 and that ended at 120.5 counts to its end.
        st.renewal_ok(
            118,
            RenewalRec {
                timestamp: 118,
                read_ms: 2000,
                write_ms: 500,
                write_sent_ms: 120_000,
                ended_ms: 120_500,
            },
        );
        assert_eq!(st.longest_renewal_gap_ms(117, 121_000), 4_400);
        // Just joined (no renewal kept): from the lease's whole second.
        let mut fresh = SpaceSt {
            last_success_s: 200,
            ..SpaceSt::default()
        };
        assert_eq!(fresh.longest_renewal_gap_ms(0, 203_500), 3_500);
        fresh.renewal_ok(202, rec(202));
        assert_eq!(fresh.longest_renewal_gap_ms(0, 203_500), 1_400);
    }

    #[test]
    fn a_lost_lease_stays_lost_when_a_removal_comes_after() {
        // Found lost at 8D, then REM_LOCKSPACE (or a forced shutdown): renewals must not
        // restart, the lease must not be released and the watchdog stays armed when it
        // failed with holders (the shell reads `lease_lost` for all three).
        let mut st = joined_at(100);
        let e = st.check_expiry(100 + 8 * IO_S, IO_S);
        assert!(e.failed_after_s.is_some() && st.lease_lost());
        st.kill_now = true;
        st.phase = Phase::Removing;
        let e = st.check_expiry(100 + 8 * IO_S + 1, IO_S);
        assert!(e.kill);
        assert!(st.lease_lost(), "a removal brought a lost lease back");
    }

    #[test]
    fn a_lockspace_being_added_has_nothing_to_check() {
        let mut st = SpaceSt::default();
        assert_eq!(st.check_expiry(10_000, IO_S), Expiry::default());
        assert!(!st.space_dead);
    }

    #[test]
    fn a_lockspace_removed_during_its_join_is_neither_failing_nor_lost() {
        // REM_LOCKSPACE came while the join ran: phase Removing, kill_now, no renewal
        // ever; then the join ended and its add was answered -1.
        let mut st = SpaceSt {
            phase: Phase::Removing,
            kill_now: true,
            ..SpaceSt::default()
        };
        assert_eq!(st.check_expiry(10_000, IO_S), Expiry::default());
        st.add_result = Some(-1);
        assert_eq!(st.check_expiry(10_000, IO_S), Expiry::default());
        assert!(!st.space_dead && !st.lease_lost());
    }

    #[test]
    fn the_renewal_history_is_bounded() {
        let mut st = joined_at(0);
        for t in 1..=(RENEWAL_HISTORY as u64 + 50) {
            st.renewal_ok(t, rec(t));
        }
        assert_eq!(st.renewals.len(), RENEWAL_HISTORY);
        assert_eq!(st.renewals.front().unwrap().timestamp, 51);
        assert_eq!(st.renewal_last_success, RENEWAL_HISTORY as u64 + 50);
    }
}
