//! Observation of other hosts' delta leases, and the host states sanlock reports.
//!
//! Each successful renewal read hands what it read to [`HostMonitor::observe_read`]: the
//! whole lockspace, or its head, which covers every record any read showed used
//! ([`HostMonitor::highest_ever_used`], [`crate::reads`]), so every host ever seen is
//! read at every renewal. A host is judged only from *our own* clock: when did we last
//! see its (owner, generation, timestamp) change. Timestamps written by other hosts are
//! never compared with ours.
//!
//! The monitor also holds shared grants back after our join ([`SharedHold`]) until every
//! live peer's own cached view of us is provably newer than our join: sanlock judges a
//! shared holder from that cache, so a grant made earlier could be judged dead.

use std::collections::BTreeMap;
use std::future::Future;

use disk_format::{DeltaSector, Name};

use crate::delta::{hosts_unused_above, LockspaceParams};
use crate::error::LeaseError;
use crate::io::Disk;
use crate::sectors::HostSectors;
use crate::timeouts::{host_dead_seconds, id_renewal_fail_seconds};

/// sanlock's host states (`SANLK_HOST_*`), with their numeric values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HostState {
    /// Seen, but not seen renewing yet, and not long enough to call it failed.
    Unknown = 1,
    /// The delta lease is free (timestamp 0).
    Free = 2,
    /// Renewed within id_renewal_fail seconds (or it is us).
    Live = 3,
    /// Not renewed for more than id_renewal_fail, not yet host_dead.
    Fail = 4,
    /// Not renewed for more than host_dead seconds: its watchdog has fired.
    Dead = 5,
}

/// What we know about one host_id's delta lease. Times are our monotonic seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostObservation {
    /// owner_id in the record.
    pub owner_id: u64,
    /// owner_generation in the record.
    pub owner_generation: u64,
    /// timestamp in the record (the owner's clock; only compared for change).
    pub timestamp: u64,
    /// The owner's io_timeout from the record (0 if never written).
    pub io_timeout: u16,
    /// The owner's host name.
    pub host_name: Name,
    /// When we first read this record.
    pub first_check_s: u64,
    /// When we last read this record.
    pub last_check_s: u64,
    /// When a read last found (owner, generation, timestamp) changed; 0 = never.
    pub last_live_s: u64,
    /// The record carries DEAD_EXT (sanlock 5.x `set_host`): an external fencer declared
    /// this generation dead. Such a held record is DEAD whatever its timestamp does.
    pub dead_ext: bool,
    /// The generation of this host that storage fencing removed from the storage (its
    /// persistent-reservation key preempted and the removal confirmed), 0 = none. That
    /// generation can no longer write, so it is DEAD for lease purposes at once; a newer
    /// generation (the host rejoined with a new key) is judged by time again.
    pub fenced_generation: u64,
}

impl HostObservation {
    /// True when storage fencing has removed exactly `generation` of this host.
    pub fn fenced(&self, generation: u64) -> bool {
        self.fenced_generation != 0 && self.fenced_generation == generation
    }

    /// True when our latest read saw the record change (sanlock: last_check == last_live).
    pub fn changed_at_last_check(&self) -> bool {
        self.last_live_s != 0 && self.last_live_s == self.last_check_s
    }
}

/// A request/event notification found in another host's delta lease: its bitmap has our
/// bit set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Notification {
    /// The host whose bitmap names us.
    pub from_host_id: u64,
    /// Its generation.
    pub from_generation: u64,
    /// write_id: the target generation of the event.
    pub target_generation: u64,
    /// write_generation: the event value (0 = no event, only an examine request).
    pub event: u64,
    /// write_timestamp: the event data.
    pub data: u64,
}

/// Source of host observations for paxos acquire (owner liveness) and shared-holder
/// liveness. Implemented by [`HostMonitor`] and by the usual shared wrappers around it.
pub trait HostObserver {
    /// Our observation of `host_id`'s delta lease, if our monitor has read it.
    fn observation(&self, host_id: u64) -> Option<HostObservation>;

    /// The highest host_id whose dblock a paxos ballot should read: every host_id above it
    /// had an unused delta-lease sector ([`crate::delta::sector_unused`]) in our latest
    /// lockspace read. `None` reads every dblock, as sanlock does. Only a hint: before
    /// committing, a ballot that read fewer dblocks confirms it with
    /// [`HostObserver::confirm_unused_above`].
    fn ballot_hosts_hint(&self) -> Option<u64> {
        None
    }

    /// Whether a fence mark may appear on an observation while an acquire waits on an
    /// owner (storage fencing runs beside this observer): the owner wait then looks for
    /// one ten times a second, in memory. The simulators' observers say no, so their
    /// owner waits sleep one second in one piece, as sanlock's.
    fn fence_marks_possible(&self) -> bool {
        false
    }

    /// Whether shared grants are held back after our join ([`SharedHold`]): `Some(the
    /// largest io_timeout of the peers still awaited)`, or `None` when they may be made.
    fn shared_grant_hold(&self) -> Option<u16> {
        None
    }

    /// Simulator only: judge shared holders as sanlock 3.8.5 does, from the cached
    /// observation alone ([`HostMonitor::sanlock_host_live`]), for a host that models a
    /// sanlock peer.
    #[cfg(feature = "sim")]
    #[doc(hidden)]
    fn judges_shared_from_cache(&self) -> bool {
        false
    }

    /// Confirms, with a read of the lockspace issued after this call, that every host_id in
    /// `above + 1 ..= upto` still has an unused delta-lease sector. The default reads them
    /// itself; the daemon shares one read among the acquires waiting at the same time.
    fn confirm_unused_above<L: Disk>(
        &self,
        disk: &L,
        space: &LockspaceParams,
        above: u64,
        upto: u64,
    ) -> impl Future<Output = Result<bool, LeaseError>> {
        hosts_unused_above(disk, space, above, upto)
    }
}

/// The observations by host_id. Dense, not a map: host_ids run from 1 to at most 2,000
/// (sanlock's max_hosts; a read never shows more sectors than its area has), and every
/// renewal read visits every sector of the area, so a lookup is one index.
#[derive(Debug, Clone, Default)]
struct HostTable {
    /// `by_id[i]` is host_id i+1.
    by_id: Vec<Option<HostObservation>>,
}

impl HostTable {
    fn slot(host_id: u64) -> Option<usize> {
        usize::try_from(host_id).ok()?.checked_sub(1)
    }

    fn get(&self, host_id: u64) -> Option<&HostObservation> {
        self.by_id.get(Self::slot(host_id)?)?.as_ref()
    }

    fn get_mut(&mut self, host_id: u64) -> Option<&mut HostObservation> {
        self.by_id.get_mut(Self::slot(host_id)?)?.as_mut()
    }

    /// Adds or replaces host_id's observation (host_id 1 or more: a sector's position).
    fn insert(&mut self, host_id: u64, h: HostObservation) {
        let i = Self::slot(host_id).expect("host_id 0 is never observed");
        if i >= self.by_id.len() {
            self.by_id.resize(i + 1, None);
        }
        self.by_id[i] = Some(h);
    }

    /// Every observation, ordered by host_id.
    fn iter(&self) -> impl DoubleEndedIterator<Item = (u64, &HostObservation)> {
        self.by_id
            .iter()
            .enumerate()
            .filter_map(|(i, h)| Some((i as u64 + 1, h.as_ref()?)))
    }
}

/// Per-lockspace record of every other host's delta lease.
#[derive(Debug, Clone)]
pub struct HostMonitor {
    our_host_id: u64,
    watchdog_fire: u64,
    hosts: HostTable,
    checks: u64,
    /// Our time (s) of the latest read observed (meaningful once `checks` > 0).
    last_read_s: u64,
    /// Our time (s) of the latest read of the whole area observed.
    last_full_read_s: Option<u64>,
    /// Whether ballots may read only the dblocks of host_ids that have joined.
    read_known_hosts: bool,
    /// Highest host_id whose sector looked used in the latest read (at least ours).
    highest_used: u64,
    /// Highest host_id whose sector any read showed used (0: none).
    highest_ever_used: u64,
    /// Simulator only: keep `highest_used` from the first read (a planted bug).
    #[cfg(feature = "sim")]
    freeze_known_hosts: bool,
    /// Simulator only: this host models a sanlock 3.8.5 peer's shared-holder judgement.
    #[cfg(feature = "sim")]
    sanlock_cached_liveness: bool,
    /// Shared grants held back after our join, `None` once every peer caught up.
    shared_hold: Option<SharedHold>,
}

/// Renewals a peer must be seen making, counted from our first lockspace read issued after
/// our join, before a shared grant of ours may be judged by it (see [`SharedHold`]).
pub const SHARED_HOLD_RENEWALS: u32 = 3;

/// Shared grants held back after our join.
///
/// sanlock 3.8.5 decides whether a shared holder is alive (`host_live()`, when it wants the
/// lease exclusive) from its *cached* view of the holder's delta lease, refreshed from the
/// read of each of its renewals, never from a fresh read. Just after our join that cache
/// can still show our record free (we left cleanly) or unwritten: it calls us dead, zeroes
/// our SHARED mode block and takes the lease exclusive while we hold it shared. lockd's
/// join can be faster than one sanlock renewal interval (no delay at all for our own
/// cleanly released record; 2D of the previous owner otherwise, shorter than the 2D of a
/// peer with a longer io_timeout), so the join alone does not cover it.
///
/// Rule: a shared grant (acquire, or convert to shared) waits until every peer that was
/// alive at our first lockspace read issued after the join (the *baseline*; the daemon
/// renews right after its join for it) has been seen renewing [`SHARED_HOLD_RENEWALS`]
/// times since,
/// or has left (free record), restarted (new generation) or died (our monitor: DEAD).
/// Why three: the first change may be a renewal whose read began before our join; the
/// second renewal's read began after the first one's write, so after our join, and sees
/// us; sanlock folds that read into its cache in its main loop after the renewal, and the
/// third change shows that renewal interval passed. A peer that joins after the baseline
/// reads us fresh. lockd peers judge shared holders from a fresh read of the delta lease
/// ([`HostMonitor::shared_holder_live`]) and need none of this, but peers cannot be told
/// apart on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedHold {
    /// Our time (s) at which the join completed (for reports).
    joined_s: u64,
    /// Per awaited peer: (generation, timestamp) last seen, renewals counted, io_timeout.
    /// `None` until the baseline read.
    awaited: Option<BTreeMap<u64, PeerCatchUp>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PeerCatchUp {
    generation: u64,
    timestamp: u64,
    renewals: u32,
    io_timeout: u16,
}

impl HostMonitor {
    /// A monitor for the lockspace in which we are `our_host_id`.
    pub fn new(our_host_id: u64, watchdog_fire: u64) -> HostMonitor {
        HostMonitor {
            our_host_id,
            watchdog_fire,
            hosts: HostTable::default(),
            checks: 0,
            last_read_s: 0,
            last_full_read_s: None,
            read_known_hosts: true,
            highest_used: our_host_id,
            highest_ever_used: 0,
            #[cfg(feature = "sim")]
            freeze_known_hosts: false,
            #[cfg(feature = "sim")]
            sanlock_cached_liveness: false,
            shared_hold: None,
        }
    }

    /// Starts holding shared grants back: our join completed at our time `joined_s` (see
    /// [`SharedHold`]). The next read observed is the baseline: the caller must feed only
    /// reads issued after this call (the lockspace thread joins, then renews; a read under
    /// way during the join would not do, however late it completes).
    pub fn hold_shared_after_join(&mut self, joined_s: u64) {
        self.shared_hold = Some(SharedHold {
            joined_s,
            awaited: None,
        });
    }

    /// `Some(the largest io_timeout among the peers still awaited)` while shared grants are
    /// held back (0 before the baseline read), `None` when they may be made.
    pub fn shared_hold(&self) -> Option<u16> {
        let hold = self.shared_hold.as_ref()?;
        Some(
            hold.awaited
                .as_ref()
                .map_or(0, |a| a.values().map(|p| p.io_timeout).max().unwrap_or(0)),
        )
    }

    /// Our time (s) of the join whose shared hold is still on, if one is.
    pub fn shared_hold_since_s(&self) -> Option<u64> {
        self.shared_hold.as_ref().map(|h| h.joined_s)
    }

    /// The host_ids a shared grant still waits for, with the renewals seen of each (empty
    /// when none waits; before the baseline read, empty too while the hold is on).
    pub fn shared_hold_awaiting(&self) -> Vec<(u64, u32)> {
        self.shared_hold
            .as_ref()
            .and_then(|h| h.awaited.as_ref())
            .map(|a| a.iter().map(|(&id, p)| (id, p.renewals)).collect())
            .unwrap_or_default()
    }

    /// Advances the shared hold with the read just folded in, made at our time `now_s`.
    fn advance_shared_hold(&mut self, now_s: u64) {
        let Some(hold) = self.shared_hold.as_mut() else {
            return;
        };
        match hold.awaited.as_mut() {
            None => {
                let mut awaited = BTreeMap::new();
                for (id, h) in self.hosts.iter() {
                    if h.timestamp == 0 || state_is_dead(self.watchdog_fire, h, now_s) {
                        continue;
                    }
                    awaited.insert(
                        id,
                        PeerCatchUp {
                            generation: h.owner_generation,
                            timestamp: h.timestamp,
                            renewals: 0,
                            io_timeout: h.io_timeout,
                        },
                    );
                }
                hold.awaited = Some(awaited);
            }
            Some(awaited) => {
                let hosts = &self.hosts;
                let w = self.watchdog_fire;
                awaited.retain(|id, p| {
                    let Some(h) = hosts.get(*id) else { return true };
                    if h.timestamp == 0
                        || h.owner_generation != p.generation
                        || state_is_dead(w, h, now_s)
                    {
                        return false;
                    }
                    if h.timestamp != p.timestamp {
                        p.timestamp = h.timestamp;
                        p.io_timeout = h.io_timeout;
                        p.renewals += 1;
                    }
                    p.renewals < SHARED_HOLD_RENEWALS
                });
            }
        }
        if hold.awaited.as_ref().is_some_and(BTreeMap::is_empty) {
            self.shared_hold = None;
        }
    }

    /// Simulator only: keep the known hosts of the first lockspace read forever (half of
    /// the planted bug `StaleKnownHosts`).
    #[cfg(feature = "sim")]
    #[doc(hidden)]
    pub fn freeze_known_hosts(&mut self) {
        self.freeze_known_hosts = true;
    }

    /// Simulator only: judge shared holders from the cache, as a sanlock 3.8.5 peer does.
    #[cfg(feature = "sim")]
    #[doc(hidden)]
    pub fn judge_shared_like_sanlock(&mut self) {
        self.sanlock_cached_liveness = true;
    }

    /// sanlock 3.8.5's `host_live()` exactly: from the cached observation alone, never a
    /// fresh read. Unknown or never checked → alive; a free record or a newer generation →
    /// dead; otherwise dead when no change was seen for host_dead_seconds. Used only by the
    /// simulator's model of a sanlock peer; lockd itself uses
    /// [`HostMonitor::shared_holder_live`].
    pub fn sanlock_host_live(
        obs: Option<HostObservation>,
        gen: u64,
        now_s: u64,
        watchdog_fire: u64,
    ) -> bool {
        let Some(h) = obs else { return true };
        if h.last_check_s == 0 {
            return true;
        }
        if h.timestamp == 0 || h.owner_generation > gen {
            return false;
        }
        let dead = host_dead_seconds(u64::from(h.io_timeout), watchdog_fire);
        now_s.saturating_sub(Self::age_base(&h)) <= dead
    }

    fn age_base(h: &HostObservation) -> u64 {
        if h.last_live_s == 0 {
            h.first_check_s
        } else {
            h.last_live_s
        }
    }

    /// Turns the known-hosts ballot reads on (the default) or off (every ballot reads
    /// every dblock, as sanlock does).
    pub fn set_read_known_hosts(&mut self, on: bool) {
        self.read_known_hosts = on;
    }

    /// Number of lockspace reads observed so far.
    pub fn checks(&self) -> u64 {
        self.checks
    }

    /// Our time (s) of the latest lockspace read observed; `None` before the first.
    pub fn last_read_s(&self) -> Option<u64> {
        (self.checks > 0).then_some(self.last_read_s)
    }

    /// Our time (s) of the latest read of the whole area observed; `None` before the
    /// first. Only such a read can show a host that joined beyond the head.
    pub fn last_full_read_s(&self) -> Option<u64> {
        self.last_full_read_s
    }

    /// The highest host_id whose record any of our reads showed used (written since the
    /// area was formatted), at least ours: what a head read must cover
    /// ([`crate::reads::head_sectors`]). A sector that once decoded as used counts even
    /// when a later read of it did not decode, so a host is never left out of the head
    /// by one bad read.
    pub fn highest_ever_used(&self) -> u64 {
        self.highest_ever_used.max(self.our_host_id)
    }

    /// Records one read of the whole lockspace made at our time `now_s`
    /// ([`HostMonitor::observe_read`]). Returns the notifications addressed to us.
    pub fn observe(&mut self, now_s: u64, sectors: &HostSectors) -> Vec<Notification> {
        self.observe_read(now_s, sectors, true)
    }

    /// [`HostMonitor::observe`] of a read that showed `sectors` (`sectors[i]`: host_id
    /// i+1, `None` when not a delta lease of the lockspace); for tests and simulators.
    pub fn observe_decoded(
        &mut self,
        now_s: u64,
        sectors: &[Option<DeltaSector>],
    ) -> Vec<Notification> {
        self.observe(now_s, &HostSectors::from_sectors(sectors))
    }

    /// Records one renewal read made at our time `now_s` of the area's first
    /// `sectors.len()` host sectors: the whole area (`whole_area`), or its head
    /// ([`crate::reads`]). Host_ids beyond a head keep what the last whole read showed.
    /// Returns the notifications addressed to us.
    pub fn observe_read(
        &mut self,
        now_s: u64,
        sectors: &HostSectors,
        whole_area: bool,
    ) -> Vec<Notification> {
        self.checks += 1;
        self.last_read_s = self.last_read_s.max(now_s);
        if whole_area {
            self.last_full_read_s = Some(self.last_full_read_s.unwrap_or(0).max(now_s));
        }
        let mut notes = Vec::new();
        #[cfg(feature = "sim")]
        let frozen = self.freeze_known_hosts && self.checks > 1;
        #[cfg(not(feature = "sim"))]
        let frozen = false;
        // Only a hint (the confirmation read decides), so a sector that is not a delta
        // lease of this lockspace (None: such as the sectors past max_hosts at the end of
        // the area) does not count: counting it would make every ballot read everything.
        let mut highest_in_read = 0;
        for (i, sector) in sectors.iter().enumerate() {
            let host_id = i as u64 + 1;
            let Some(v) = sector else { continue };
            let (owner_id, generation, timestamp) =
                (v.owner_id(), v.owner_generation(), v.timestamp());
            let unused = owner_id == 0 && generation == 0 && timestamp == 0;
            if !unused {
                highest_in_read = host_id;
                self.highest_ever_used = self.highest_ever_used.max(host_id);
            }
            if host_id == self.our_host_id {
                continue;
            }
            match self.hosts.get_mut(host_id) {
                None => {
                    self.hosts.insert(
                        host_id,
                        HostObservation {
                            owner_id,
                            owner_generation: generation,
                            timestamp,
                            // As sanlock: a record still as formatted (no owner, no
                            // generation, no timestamp) reports io_timeout 0.
                            io_timeout: if unused { 0 } else { v.io_timeout() },
                            host_name: v.resource_name(),
                            first_check_s: now_s,
                            last_check_s: now_s,
                            last_live_s: 0,
                            dead_ext: v.dead_ext(),
                            fenced_generation: 0,
                        },
                    );
                }
                Some(h) => {
                    if h.owner_id != owner_id
                        || h.owner_generation != generation
                        || h.timestamp != timestamp
                    {
                        h.owner_id = owner_id;
                        h.owner_generation = generation;
                        h.timestamp = timestamp;
                        h.io_timeout = v.io_timeout();
                        h.host_name = v.resource_name();
                        h.last_live_s = now_s;
                    }
                    h.last_check_s = now_s;
                    h.dead_ext = v.dead_ext();
                }
            }
            if timestamp != 0 && v.host_bit(self.our_host_id) {
                notes.push(Notification {
                    from_host_id: host_id,
                    from_generation: generation,
                    target_generation: v.write_id(),
                    event: v.write_generation(),
                    data: v.write_timestamp(),
                });
            }
        }
        // A head read that covers every sector held as used decides alone; a shorter one
        // (never planned: `reads::head_sectors` covers them) only adds.
        let highest_used = if whole_area || sectors.len() as u64 >= self.highest_used {
            highest_in_read
        } else {
            highest_in_read.max(self.highest_used)
        }
        .max(self.our_host_id);
        if !frozen {
            self.highest_used = highest_used;
        }
        self.advance_shared_hold(now_s);
        notes
    }

    /// State of `host_id` at our time `now_s` (sanlock 3.8 `get_host_flag`), or `None`
    /// before the first lockspace read (sanlock answers `-EAGAIN` then).
    pub fn state(&self, host_id: u64, now_s: u64) -> Option<HostState> {
        if self.checks == 0 {
            return None;
        }
        if host_id == self.our_host_id {
            return Some(HostState::Live);
        }
        let h = self.hosts.get(host_id)?;
        Some(self.state_of(h, now_s))
    }

    fn state_of(&self, h: &HostObservation, now_s: u64) -> HostState {
        state_of(self.watchdog_fire, h, now_s)
    }

    /// Records that storage fencing removed `generation` of `host_id` (its key preempted
    /// and confirmed gone from the storage). Only a host we have observed holding exactly
    /// that generation is marked; returns whether it was.
    pub fn mark_fenced(&mut self, host_id: u64, generation: u64) -> bool {
        match self.hosts.get_mut(host_id) {
            Some(h) if generation != 0 && h.owner_generation == generation => {
                h.fenced_generation = generation;
                true
            }
            _ => false,
        }
    }

    /// Seconds since the record last changed (or since our first read of it, when we
    /// never saw it change).
    fn age_s(h: &HostObservation, now_s: u64) -> u64 {
        let last = if h.last_live_s != 0 {
            h.last_live_s
        } else {
            h.first_check_s
        };
        now_s.saturating_sub(last)
    }

    /// True when host_dead_seconds (of the host's io_timeout) have passed since its record
    /// last changed: the host would be DEAD by time alone. sanlock 5.1.1 reports this
    /// beside DEAD_EXT as `SANLK_HOST_DEAD_SEC` (observed: a DEAD_EXT host's flags go from
    /// 0x15 to 0x35 once host_dead_seconds have passed; a host DEAD by time alone gets 0x5).
    pub fn past_host_dead(&self, h: &HostObservation, now_s: u64) -> bool {
        h.timestamp != 0
            && Self::age_s(h, now_s)
                > host_dead_seconds(u64::from(h.io_timeout), self.watchdog_fire)
    }

    /// Every observed host (not us) with its state, ordered by host_id.
    pub fn hosts(&self, now_s: u64) -> Vec<(u64, HostObservation, HostState)> {
        self.hosts
            .iter()
            .map(|(id, h)| (id, *h, self.state_of(h, now_s)))
            .collect()
    }

    /// Is a shared holder (mode-block generation `gen`) alive? `delta` is its delta lease as
    /// just read from disk, `obs` our monitor's record of it.
    ///
    /// sanlock's `host_live()`, made safe against a stale monitor: a free record on disk
    /// (the holder left cleanly, after releasing its leases) or a newer generation (it
    /// restarted) is dead; an unknown or stale observation (another generation or a free
    /// record our monitor has not re-read yet) is alive; otherwise dead only when no change
    /// was seen for host_dead_seconds of the holder's io_timeout.
    pub fn shared_holder_live(
        obs: Option<HostObservation>,
        delta: &disk_format::LeaderRecord,
        gen: u64,
        now_s: u64,
        w: u64,
    ) -> bool {
        if delta.timestamp == 0 || delta.owner_generation > gen {
            return false;
        }
        // sanlock 5.x marks: DEAD_EXT on this generation = fenced, dead now; NO_TIMEOUT =
        // never dead by time.
        if delta.dead_ext() && delta.owner_generation == gen {
            return false;
        }
        // Fenced by this host (its key preempted and confirmed gone): it cannot write.
        if obs.is_some_and(|h| h.fenced(gen) && delta.owner_generation == gen) {
            return false;
        }
        if delta.flags & disk_format::leader::LFL_NO_TIMEOUT != 0 {
            return true;
        }
        let Some(h) = obs else { return true };
        if h.last_check_s == 0 || h.timestamp == 0 || h.owner_generation != delta.owner_generation {
            return true;
        }
        if h.timestamp != delta.timestamp {
            return true;
        }
        let io = if h.io_timeout != 0 {
            h.io_timeout
        } else {
            delta.io_timeout
        };
        let dead = host_dead_seconds(u64::from(io), w);
        let last = if h.last_live_s == 0 {
            h.first_check_s
        } else {
            h.last_live_s
        };
        now_s.saturating_sub(last) <= dead
    }
}

/// State of an observed host at our time `now_s` (sanlock 3.8 `get_host_flag`).
fn state_of(watchdog_fire: u64, h: &HostObservation, now_s: u64) -> HostState {
    if h.timestamp == 0 {
        return HostState::Free;
    }
    if h.dead_ext || h.fenced(h.owner_generation) {
        return HostState::Dead;
    }
    let io = u64::from(h.io_timeout);
    let fail = id_renewal_fail_seconds(io);
    let dead = host_dead_seconds(io, watchdog_fire);
    let age = HostMonitor::age_s(h, now_s);
    if h.last_live_s == 0 && age <= fail {
        HostState::Unknown
    } else if age <= fail {
        HostState::Live
    } else if age > dead {
        HostState::Dead
    } else {
        HostState::Fail
    }
}

fn state_is_dead(watchdog_fire: u64, h: &HostObservation, now_s: u64) -> bool {
    state_of(watchdog_fire, h, now_s) == HostState::Dead
}

impl HostObserver for HostMonitor {
    fn observation(&self, host_id: u64) -> Option<HostObservation> {
        self.hosts.get(host_id).copied()
    }

    fn ballot_hosts_hint(&self) -> Option<u64> {
        (self.read_known_hosts && self.checks > 0).then_some(self.highest_used)
    }

    fn shared_grant_hold(&self) -> Option<u16> {
        self.shared_hold()
    }

    #[cfg(feature = "sim")]
    fn judges_shared_from_cache(&self) -> bool {
        self.sanlock_cached_liveness
    }
}

impl<T: HostObserver + ?Sized> HostObserver for &T {
    fn observation(&self, host_id: u64) -> Option<HostObservation> {
        (**self).observation(host_id)
    }

    fn ballot_hosts_hint(&self) -> Option<u64> {
        (**self).ballot_hosts_hint()
    }

    fn fence_marks_possible(&self) -> bool {
        (**self).fence_marks_possible()
    }

    fn shared_grant_hold(&self) -> Option<u16> {
        (**self).shared_grant_hold()
    }

    #[cfg(feature = "sim")]
    fn judges_shared_from_cache(&self) -> bool {
        (**self).judges_shared_from_cache()
    }

    fn confirm_unused_above<L: Disk>(
        &self,
        disk: &L,
        space: &LockspaceParams,
        above: u64,
        upto: u64,
    ) -> impl Future<Output = Result<bool, LeaseError>> {
        (**self).confirm_unused_above(disk, space, above, upto)
    }
}

impl<T: HostObserver + ?Sized> HostObserver for std::rc::Rc<T> {
    fn observation(&self, host_id: u64) -> Option<HostObservation> {
        (**self).observation(host_id)
    }

    fn ballot_hosts_hint(&self) -> Option<u64> {
        (**self).ballot_hosts_hint()
    }

    fn fence_marks_possible(&self) -> bool {
        (**self).fence_marks_possible()
    }

    fn shared_grant_hold(&self) -> Option<u16> {
        (**self).shared_grant_hold()
    }

    #[cfg(feature = "sim")]
    fn judges_shared_from_cache(&self) -> bool {
        (**self).judges_shared_from_cache()
    }

    fn confirm_unused_above<L: Disk>(
        &self,
        disk: &L,
        space: &LockspaceParams,
        above: u64,
        upto: u64,
    ) -> impl Future<Output = Result<bool, LeaseError>> {
        (**self).confirm_unused_above(disk, space, above, upto)
    }
}

impl<T: HostObserver + ?Sized> HostObserver for std::sync::Arc<T> {
    fn observation(&self, host_id: u64) -> Option<HostObservation> {
        (**self).observation(host_id)
    }

    fn ballot_hosts_hint(&self) -> Option<u64> {
        (**self).ballot_hosts_hint()
    }

    fn fence_marks_possible(&self) -> bool {
        (**self).fence_marks_possible()
    }

    fn shared_grant_hold(&self) -> Option<u16> {
        (**self).shared_grant_hold()
    }

    #[cfg(feature = "sim")]
    fn judges_shared_from_cache(&self) -> bool {
        (**self).judges_shared_from_cache()
    }

    fn confirm_unused_above<L: Disk>(
        &self,
        disk: &L,
        space: &LockspaceParams,
        above: u64,
        upto: u64,
    ) -> impl Future<Output = Result<bool, LeaseError>> {
        (**self).confirm_unused_above(disk, space, above, upto)
    }
}

impl<T: HostObserver> HostObserver for std::cell::RefCell<T> {
    fn observation(&self, host_id: u64) -> Option<HostObservation> {
        self.borrow().observation(host_id)
    }

    fn ballot_hosts_hint(&self) -> Option<u64> {
        self.borrow().ballot_hosts_hint()
    }

    fn fence_marks_possible(&self) -> bool {
        self.borrow().fence_marks_possible()
    }

    fn shared_grant_hold(&self) -> Option<u16> {
        self.borrow().shared_grant_hold()
    }

    #[cfg(feature = "sim")]
    fn judges_shared_from_cache(&self) -> bool {
        self.borrow().judges_shared_from_cache()
    }
}

/// A poisoned observer lock means a thread panicked while it changed what we know of the
/// other hosts: no decision may be taken from that half-changed state, so the caller
/// stops rather than recover it (the daemon's `panic = "abort"`).
impl<T: HostObserver> HostObserver for std::sync::Mutex<T> {
    fn observation(&self, host_id: u64) -> Option<HostObservation> {
        match self.lock() {
            Ok(g) => g.observation(host_id),
            Err(_) => panic!("the host observer's lock is poisoned: a thread panicked holding it"),
        }
    }

    fn ballot_hosts_hint(&self) -> Option<u64> {
        match self.lock() {
            Ok(g) => g.ballot_hosts_hint(),
            Err(_) => panic!("the host observer's lock is poisoned: a thread panicked holding it"),
        }
    }

    fn fence_marks_possible(&self) -> bool {
        match self.lock() {
            Ok(g) => g.fence_marks_possible(),
            Err(_) => panic!("the host observer's lock is poisoned: a thread panicked holding it"),
        }
    }

    fn shared_grant_hold(&self) -> Option<u16> {
        match self.lock() {
            Ok(g) => g.shared_grant_hold(),
            Err(_) => panic!("the host observer's lock is poisoned: a thread panicked holding it"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use disk_format::LeaderRecord;

    /// A poisoned observer is not read (no recovery of a half-changed state).
    #[test]
    #[should_panic(expected = "poisoned")]
    fn a_poisoned_observer_stops_the_caller() {
        let m = std::sync::Arc::new(std::sync::Mutex::new(HostMonitor::new(1, 60)));
        let m2 = m.clone();
        let _ = std::thread::spawn(move || {
            let _g = m2.lock();
            panic!("a panic while holding the observer");
        })
        .join();
        let _ = HostObserver::observation(&*m, 2);
    }

    fn sector(owner: u64, gen: u64, ts: u64, io: u16) -> Option<DeltaSector> {
        Some(DeltaSector::from_leader(LeaderRecord {
            owner_id: owner,
            owner_generation: gen,
            timestamp: ts,
            io_timeout: io,
            ..LeaderRecord::ZERO
        }))
    }

    /// A head read (lease-core `reads`) leaves the host_ids beyond it as the last whole
    /// read showed them; the head must cover every record ever seen used, even one whose
    /// latest read did not decode; only a whole read is a full one.
    #[test]
    fn a_head_read_keeps_what_lies_beyond_it_and_the_head_covers_every_used_record() {
        let mut m = HostMonitor::new(1, 10);
        let mut whole = vec![sector(0, 0, 0, 0); 64];
        whole[0] = sector(1, 1, 5, 1);
        whole[2] = sector(3, 1, 40, 1);
        m.observe_read(100, &HostSectors::from_sectors(&whole), true);
        assert_eq!(m.last_full_read_s(), Some(100));
        assert_eq!(m.highest_ever_used(), 3);
        // Host 3's sector does not decode in the next head read: it still counts.
        m.observe_read(
            102,
            &HostSectors::from_sectors(&[sector(1, 1, 7, 1), None, None]),
            false,
        );
        assert_eq!(m.highest_ever_used(), 3);
        assert_eq!(m.last_full_read_s(), Some(100));
        assert_eq!(m.last_read_s(), Some(102));
        // Host 50 joined beyond the head: unseen until a whole read, and never judged.
        m.observe_read(104, &HostSectors::from_sectors(&whole[..32]), false);
        assert_eq!(m.state(50, 104), Some(HostState::Free));
        whole[49] = sector(50, 1, 9, 1);
        m.observe_read(120, &HostSectors::from_sectors(&whole), true);
        assert_eq!(m.highest_ever_used(), 50);
        assert_eq!(m.state(50, 120), Some(HostState::Live));
        assert_eq!(m.last_full_read_s(), Some(120));
    }

    #[test]
    fn states_walk() {
        // D = 1 → fail 8, dead 8 + 10 = 18 with W = 10.
        let mut m = HostMonitor::new(1, 10);
        assert_eq!(m.state(2, 100), None);
        m.observe_decoded(
            100,
            &[sector(1, 1, 5, 1), sector(2, 3, 50, 1), sector(0, 0, 0, 1)],
        );
        assert_eq!(m.state(1, 100), Some(HostState::Live));
        assert_eq!(m.state(2, 100), Some(HostState::Unknown));
        assert_eq!(m.state(3, 100), Some(HostState::Free));
        assert_eq!(m.state(2, 109), Some(HostState::Fail));
        assert_eq!(m.state(2, 119), Some(HostState::Dead));
        m.observe_decoded(102, &[sector(1, 1, 7, 1), sector(2, 3, 52, 1)]);
        let o = m.observation(2).unwrap();
        assert!(o.changed_at_last_check());
        assert_eq!(m.state(2, 110), Some(HostState::Live));
        assert_eq!(m.state(2, 111), Some(HostState::Fail));
        assert_eq!(m.state(2, 121), Some(HostState::Dead));
        m.observe_decoded(104, &[sector(1, 1, 9, 1), sector(2, 3, 52, 1)]);
        assert!(!m.observation(2).unwrap().changed_at_last_check());
        assert_eq!(m.observation(2).unwrap().last_live_s, 102);
    }

    /// The shared hold: the first read after the join is the baseline; free and dead
    /// peers are not awaited; a peer is released by three renewals, a restart (new
    /// generation), leaving (free) or dying.
    #[test]
    fn shared_hold_waits_for_three_renewals_of_each_live_peer() {
        // Host 1 is us; 2 renews, 3 will restart, 4 will leave, 5 is free, 6 goes silent.
        let mut m = HostMonitor::new(1, 10);
        let all = |t2, g3, t4, t6| {
            [
                sector(1, 1, 1, 1),
                sector(2, 1, t2, 1),
                sector(3, g3, 7, 1),
                sector(4, 1, t4, 1),
                sector(5, 1, 0, 1),
                sector(6, 1, t6, 1),
            ]
        };
        m.observe_decoded(99, &all(10, 1, 10, 10));
        m.hold_shared_after_join(100);
        assert_eq!(m.shared_grant_hold(), Some(0));
        assert_eq!(m.shared_hold_since_s(), Some(100));
        assert_eq!(m.shared_hold_awaiting(), vec![], "no baseline yet");
        m.observe_decoded(101, &all(12, 1, 10, 10));
        let ids: Vec<u64> = m.shared_hold_awaiting().iter().map(|p| p.0).collect();
        assert_eq!(ids, vec![2, 3, 4, 6]);
        assert_eq!(m.shared_grant_hold(), Some(1));
        // 2 renews; 3 restarts; 4 leaves.
        m.observe_decoded(103, &all(13, 2, 0, 10));
        assert_eq!(m.shared_hold_awaiting(), vec![(2, 1), (6, 0)]);
        m.observe_decoded(105, &all(14, 2, 0, 10));
        m.observe_decoded(107, &all(15, 2, 0, 10));
        assert_eq!(
            m.shared_hold_awaiting(),
            vec![(6, 0)],
            "2 renewed three times"
        );
        // 6 silent past host_dead (8 + 10 s after our first read of it at 99).
        m.observe_decoded(117, &all(16, 2, 0, 10));
        assert!(m.shared_grant_hold().is_some());
        m.observe_decoded(118, &all(17, 2, 0, 10));
        assert_eq!(m.shared_grant_hold(), None, "6 is dead: nothing awaited");
        assert_eq!(m.shared_hold_awaiting(), vec![]);
    }

    /// Alone in the lockspace: the first read after the join ends the hold.
    #[test]
    fn shared_hold_with_no_peer_ends_at_the_baseline() {
        let mut m = HostMonitor::new(1, 10);
        m.hold_shared_after_join(50);
        m.observe_decoded(51, &[sector(1, 1, 50, 1), sector(0, 0, 0, 0)]);
        assert_eq!(m.shared_grant_hold(), None);
    }

    #[test]
    fn past_host_dead_follows_the_last_change() {
        // D = 1, W = 10 → dead 18 s after the last change.
        let mut m = HostMonitor::new(1, 10);
        m.observe_decoded(100, &[sector(1, 1, 5, 1), sector(2, 3, 50, 1)]);
        m.observe_decoded(102, &[sector(1, 1, 7, 1), sector(2, 3, 52, 1)]);
        let o = m.observation(2).unwrap();
        assert!(!m.past_host_dead(&o, 120));
        assert!(m.past_host_dead(&o, 121));
        m.observe_decoded(130, &[sector(1, 1, 9, 1), sector(2, 0, 0, 1)]);
        let free = m.observation(2).unwrap();
        assert!(
            !m.past_host_dead(&free, 200),
            "a free record is never DEAD_SEC"
        );
    }

    #[test]
    fn notifications_need_our_bit() {
        let mut m = HostMonitor::new(2, 60);
        let mut s = sector(3, 4, 10, 10).unwrap();
        s.leader.write_id = 9;
        s.leader.write_generation = 0x55;
        s.leader.write_timestamp = 0x66;
        assert!(m.observe_decoded(1, &[None, None, Some(s)]).is_empty());
        s.set_host_bit(2, true);
        let n = m.observe_decoded(2, &[None, None, Some(s)]);
        assert_eq!(
            n,
            vec![Notification {
                from_host_id: 3,
                from_generation: 4,
                target_generation: 9,
                event: 0x55,
                data: 0x66
            }]
        );
    }

    #[test]
    fn shared_holder_liveness() {
        let mut m = HostMonitor::new(1, 10);
        let rec = |gen, ts| LeaderRecord {
            owner_id: 2,
            owner_generation: gen,
            timestamp: ts,
            io_timeout: 1,
            ..LeaderRecord::ZERO
        };
        // Unknown to the monitor: alive, unless the disk says free or newer generation.
        assert!(HostMonitor::shared_holder_live(None, &rec(3, 50), 3, 0, 10));
        assert!(!HostMonitor::shared_holder_live(None, &rec(3, 0), 3, 0, 10));
        assert!(!HostMonitor::shared_holder_live(
            None,
            &rec(4, 50),
            3,
            0,
            10
        ));
        m.observe_decoded(100, &[None, sector(2, 3, 50, 1)]);
        let o = m.observation(2);
        // Never seen changing: dead only after host_dead (8 + 10) since the first check.
        assert!(HostMonitor::shared_holder_live(o, &rec(3, 50), 3, 118, 10));
        assert!(!HostMonitor::shared_holder_live(o, &rec(3, 50), 3, 119, 10));
        // The disk moved on since our monitor looked: alive.
        assert!(HostMonitor::shared_holder_live(o, &rec(3, 52), 3, 119, 10));
        // Monitor saw it free, disk shows it re-joined: alive (stale monitor).
        m.observe_decoded(101, &[None, sector(2, 3, 0, 1)]);
        assert!(HostMonitor::shared_holder_live(
            m.observation(2),
            &rec(3, 60),
            3,
            500,
            10
        ));
    }
}
