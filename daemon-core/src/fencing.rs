//! Storage fencing's decisions (SCSI-3 persistent reservations, docs/fencing.md): the
//! state of one fenced lockspace ([`FenceSt`], kept with the lockspace in the core) and
//! what the shell's fence thread is to do next. The shell keeps only the devices and runs
//! the PR commands (`daemon/src/fence.rs`); it tells the core what it registered and
//! what it read, and the core decides whom to preempt, when a peer counts as fenced
//! (marked in the lockspace's host monitor, which lease-core's ballots consult), and when
//! this host has been fenced itself (the lockspace's lease is lost).
//!
//! A pass, once a second: `Input::FenceLook` → the suspects (peers whose delta lease has
//! missed renewals at our latest read of it) and the live peers, from the core's host
//! monitor → `Effect::Fence { ReadKeys }` → `Input::FenceKeysRead` (the lockspace
//! device's keys and whether a reservation stands) → one of: our key gone while a
//! reservation stands, or after our own renewals paused, → we are fenced; our key gone
//! with no reservation while we renewed all along → the storage lost it, `Reregister`; a
//! live peer without a key → `Release` (no reservation while it renews); no reservation →
//! `Reserve`; else `Preempt` for each suspect that has stood still for
//! [`FenceSt::preempt_after_s`] → the shell preempts and reads back ([`device_plan`],
//! [`device_confirms`], [`preempt_conflict`]) → `Input::PeerFenceDone`.
//!
//! Invariants:
//! - a peer generation is marked fenced only when the shell confirmed that no key of its
//!   host_id, and no key of another scheme, is left on any device while a reservation
//!   stands, and either our own PREEMPT removed that generation's key or a key list we
//!   read earlier showed it registered: a host that never registered is never taken for
//!   fenced (its leases wait host_dead);
//! - the reservation is asked for only while every live peer has a key, and a preempt only
//!   while one stands: a host that does not fence (sanlock, lockd without `scsi-pr`) is
//!   not locked out by us — except that a reservation is not released, even for a live
//!   peer without a key, while a held record without a key that is not live (a peer
//!   fenced, or standing still) is not yet past host_dead: the reservation may be all
//!   that keeps its processes' writes out, and our ballots may have taken its leases
//!   (the fence mark stays in the monitor);
//! - a peer is judged only from a fresh read of ours ([`FRESH_READ_IO_TIMEOUTS`]), by its
//!   age at that read, and no reservation is made without a fresh read of the whole
//!   area (an empty monitor, as between the join and the first renewal, proves nothing);
//! - nothing is decided before our key is registered or after we found ourselves fenced;
//! - the keys remembered are bounded: host_ids 1 to [`MAX_EVENT_HOST_ID`], at most
//!   [`SEEN_GENERATIONS`] generations each.

use std::collections::{BTreeMap, BTreeSet};

use lease_core::monitor::HostMonitor;
use lease_core::timeouts;

use crate::events::MAX_EVENT_HOST_ID;

/// Generations remembered per host_id (the newest).
pub const SEEN_GENERATIONS: usize = 4;

/// The shortest stillness, in io_timeouts, after which a peer may be preempted, whatever
/// `fence_preempt_s` says. A live host renews every 2·D, but a renewal whose read timed
/// out (D, then a retry 0.5 s later) and phases drifting against our reads put 4–5.5·D
/// between two renewals we see; 6·D is where sanlock starts warning that renewals fail.
/// The age compared with it is measured at our own latest read ([`FenceSt::look`]), so it
/// never exceeds the time since the peer's last renewal.
pub const PREEMPT_FLOOR_IO_TIMEOUTS: u64 = 6;

/// Whether a gap in our own renewals (`gap_ms`, from
/// [`crate::space_state::SpaceSt::longest_renewal_gap_ms`]: the longest our record can have
/// stood still on the storage, from a renewal's write being sent to the end of the next
/// one, or to the key read) is too short for any peer to have preempted us, our
/// io_timeout being `io_timeout_s` (D). A peer P preempts only after an age of
/// [`PREEMPT_FLOOR_IO_TIMEOUTS`]·max(D, D_P) whole seconds or more; the age is the
/// difference of the whole seconds at which P's reads completed, from the read that first
/// showed one of our renewals to a read that did not yet show the next. The first
/// completed after our record landed; the second was served before the next record
/// landed and completed less than D_P later (P's read timeout). So the age is at most the
/// landing gap plus D_P, rounded up: a gap of at most 5·D − 1 s keeps it under
/// 6·max(D, D_P) for a peer at any io_timeout (sanlock's 10 included; sanlock does not
/// preempt at all). A key of ours missing while no reservation stands after such a gap
/// was lost by the storage (a target restarted without persisted reservations, a
/// CLEAR), not preempted. A target outage longer than that, plus the time from our last
/// renewal to its start, cannot be told from a preempt followed by a restart: the host
/// then counts itself fenced (docs/fencing.md). Why a healthy host is not fenced and a
/// fenced one does not write again: VM bed `pr-target-restart` (D = 2), unit tests
/// `a_stall_rules_out_a_preempt_up_to_five_io_timeouts_less_a_second` and
/// `a_key_lost_by_the_storage_is_registered_again_unless_we_paused_long_enough_to_be_fenced`.
pub fn gap_rules_out_preempt(gap_ms: u64, io_timeout_s: u64) -> bool {
    let d_ms = io_timeout_s.max(1) * 1000;
    gap_ms + d_ms + 1000 <= PREEMPT_FLOOR_IO_TIMEOUTS * d_ms
}

/// How far before the pass that last saw our key the stillness of our record still
/// counts ([`FenceSt::stillness_since_s`]): a peer decides a preempt from its read of our
/// record up to [`FRESH_READ_IO_TIMEOUTS`] of its io_timeouts old, at its next pass, and
/// then sends a few PR commands, each bounded by the shell's command timeout. So a preempt
/// decided on a stillness that ended just before that pass can land after it; this slack
/// covers the pass and its commands.
pub const PREEMPT_LAG_SLACK_S: u64 = 20;

/// How old, in our io_timeouts, our own latest read of the lockspace may be for a pass to
/// judge anyone: renewals read every 2·D; an older view (our own pause, our reads timing
/// out) makes every peer look still, so nobody is preempted until a fresh read.
pub const FRESH_READ_IO_TIMEOUTS: u64 = 3;

/// One registered key as the shell read it: its value, and the host_id and generation
/// it names when it has lvmlockd's format (`None`: a key of another scheme).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FenceKey {
    pub raw: u64,
    pub owner: Option<(u64, u64)>,
}

/// A peer that has missed renewals, as one pass found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Suspect {
    pub host_id: u64,
    pub generation: u64,
    /// Seconds since we last saw its lease renewed (or first saw it).
    pub age_s: u64,
    /// The same age in ms, from the completion times of our reads
    /// ([`FenceSt::sighted`]); what the preempt rule compares.
    pub age_ms: u64,
    /// Its io_timeout, from its delta sector.
    pub io_timeout_s: u64,
    /// Our monitor has it DEAD (host_dead passed without a renewal).
    pub dead: bool,
}

/// The key list of the lockspace's device, read for a pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeysRead {
    /// The whole list, and whether a reservation stands (READ RESERVATION).
    Keys {
        keys: Vec<FenceKey>,
        reservation: bool,
    },
    /// The device's list did not fit the read: nothing is decided.
    Truncated,
    /// The read failed: nothing is decided.
    Failed,
}

/// How the shell's preempt of one peer generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerFenceOutcome {
    /// Every device read back with no key of the host and a reservation standing;
    /// `preempted`: our PREEMPT removed the generation's own key.
    Confirmed { preempted: bool },
    /// A newer generation of the host is registered: it joined again.
    Rejoined,
    /// A read-back still showed a key of the host, or no reservation, or was truncated.
    NotConfirmed,
    /// The storage refused our PREEMPT with a reservation conflict: our key is gone.
    Refused,
    /// A PR command failed otherwise (logged by the shell; tried again next pass).
    Failed,
}

/// Why this host counts as fenced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FencedBecause {
    /// Our key was missing from the lockspace device's list while a reservation stood.
    OurKeyGone,
    /// Our key was missing and no reservation stood, after our record may have stood
    /// still on the storage for `renewal_gap_ms` ms: too long to rule out a peer's
    /// preempt before the storage lost its reservation state
    /// ([`gap_rules_out_preempt`]).
    OurKeyGoneAfterAStall { renewal_gap_ms: u64 },
    /// Our PREEMPT met a reservation conflict.
    PreemptRefused,
}

/// What a fence step decided, for the shell to log or act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FenceVerdict {
    /// The device holds no reservation and not our key, and our record cannot have
    /// stood still long enough for a preempt (`renewal_gap_ms` at most,
    /// [`gap_rules_out_preempt`]): a target restarted without persisted reservations, or
    /// a clear. Our key is registered again; no peer can be confirmed fenced until a
    /// reservation stands again.
    StorageCleared { renewal_gap_ms: u64 },
    /// `host_id` at `generation` renews with no key of its host_id on the device (a host
    /// without fencing: sanlock, or lockd before `fence = "scsi-pr"` reaches it). The
    /// reservation is not made, or released, while it does: fencing is inactive and
    /// every lease waits host_dead, so that its writes are not refused (given once per
    /// generation).
    PeerUnkeyed { host_id: u64, generation: u64 },
    /// `host_id` at `generation`, marked fenced, renewed its delta lease since: the
    /// storage still takes its writes (a path or device outside the fence, a target that
    /// lost its PR state): an alarm, given once per generation. Its leases stay taken.
    FencedPeerRenews { host_id: u64, generation: u64 },
    /// This host is fenced: the lockspace's lease is lost (as a corrupt one).
    WeAreFenced(FencedBecause),
    /// `host_id` at `generation` is marked fenced: its leases may be taken now.
    PeerFenced {
        host_id: u64,
        generation: u64,
        age_s: u64,
    },
    /// `host_id` at `generation` had no key we ever saw: it is not fenced by the storage
    /// (given once per generation).
    PeerNeverKeyed { host_id: u64, generation: u64 },
}

/// What the next step of a pass is for the shell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FenceAction {
    /// Read the key list of the lockspace's device; answer with `Input::FenceKeysRead`.
    ReadKeys,
    /// Preempt every key of `host_id` at `generation` or older on every device, with
    /// `our_key`, and read them back; answer with `Input::PeerFenceDone`.
    Preempt {
        host_id: u64,
        generation: u64,
        our_key: u64,
    },
    /// Make the reservation (Write Exclusive – Registrants Only) with `our_key` on every
    /// device that has none: every live host's key is registered.
    Reserve { our_key: u64 },
    /// Release the reservation with `our_key` on every device: a live host has no key.
    Release { our_key: u64 },
    /// Register `our_key` again on every device (REGISTER AND IGNORE EXISTING KEY): the
    /// storage lost every key.
    Reregister { our_key: u64 },
}

/// What the fence passes of one lockspace saw and did (the metrics' source).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FenceObserved {
    /// Keys on the lockspace's device at the latest complete read.
    pub keys: u64,
    /// A reservation stood at that read.
    pub reservation: bool,
    /// Live peers without a key at that read (fencing inactive while non-zero).
    pub unkeyed_live_peers: u64,
    /// Preempts begun by this host.
    pub preempts: u64,
    /// Peer generations this host marked fenced.
    pub peers_fenced: u64,
    /// When (monotime s) this host last began a preempt; 0: never.
    pub last_preempt_s: u64,
}

/// The fencing state of one lockspace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FenceSt {
    /// Our registered key (0 before the join registered one, and after we left).
    pub key: u64,
    /// `fence_preempt_s` as configured (0: the fail time).
    pub preempt_cfg_s: u64,
    /// Our io_timeout.
    pub io_timeout_s: u64,
    /// Our key was found gone, or the storage refused us.
    pub fenced_here: bool,
    /// Generations seen registered on the lockspace's device, per host_id.
    seen: BTreeMap<u64, BTreeSet<u64>>,
    /// Generations found without a key we ever saw (warned about once).
    unkeyed: BTreeSet<(u64, u64)>,
    /// The suspects of the pass whose key read is awaited.
    pass: Vec<Suspect>,
    /// The live peers of the pass (renewing: not suspects, not fenced), by host_id and
    /// generation.
    live: Vec<(u64, u64)>,
    /// The peers of the pass whose record is held and not live (fenced, standing still,
    /// or not judged) and not yet past host_dead, by host_id: one without a key may be
    /// running still, kept out only by the reservation, which is then not released.
    may_be_kept_out: Vec<u64>,
    /// A held record of the pass could not be judged: our own latest read of it, or of
    /// the whole area, is too old or missing (our reads stalled; no renewal has read the
    /// area since the join), or we have not yet seen it change nor stand still 3·D (we
    /// just joined). Only our own reads' age counts here, measured in our io_timeout
    /// (we read every 2·D of ours), so peers at other io_timeouts change nothing. The pass cannot tell who is live, so it makes no reservation.
    /// Safe both ways: withholding a reservation only leaves leases waiting host_dead,
    /// as without fencing (no preempt is sent without one), and it cannot last: a fresh
    /// read comes with our next renewal, and a record read once becomes live at its next
    /// change or a suspect after 3·D still (tests
    /// `no_reservation_before_every_held_record_is_judged`,
    /// `no_reservation_while_a_still_peer_that_is_not_dead_has_no_key`,
    /// `no_reservation_before_a_fresh_read_of_the_whole_area`; VM bed `pr-mixed-sanlock`,
    /// `pr-rolling`; `pr-kill-daemon` still takes over in seconds).
    unjudged_peer: bool,
    /// Peer generations warned about as renewing without a key.
    unkeyed_live: BTreeSet<(u64, u64)>,
    /// Fenced peer generations seen renewing (alarmed once each).
    fenced_renewing: BTreeSet<(u64, u64)>,
    /// The storage was found to have lost our key and it was registered again (once,
    /// until a pass finds our key again).
    cleared: bool,
    /// When (monotime s) a pass last found our key on the device (0: not yet).
    key_seen_at_s: u64,
    /// This host marked a peer generation fenced (since the lockspace was joined).
    pub fenced_a_peer: bool,
    /// This host reserves and preempts (`fence = "scsi-pr"`); false: it only keeps its key
    /// registered and watches for its own fence (`"register-only"`).
    pub acts: bool,
    /// What the passes saw and did, for the metrics and the log.
    pub seen_now: FenceObserved,
    /// Preempts the shell runs now (by host_id, generation), with the age that
    /// started them.
    preempting: BTreeMap<(u64, u64), u64>,
    /// [`PREEMPT_FLOOR_IO_TIMEOUTS`]; lower only under a planted bug (the simulator's
    /// and the bed's `preempt-floor-4d`).
    pub preempt_floor_io_timeouts: u64,
    /// Each peer's record as our reads last showed it, timed in ms ([`FenceSt::sighted`]).
    sightings: BTreeMap<u64, Sighting>,
}

/// One peer's delta record as our reads showed it: which record, the completion time
/// (monotime ms) of the first read that showed it, and of the latest read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Sighting {
    record: (u64, u64, u64),
    since_ms: u64,
    last_ms: u64,
}

impl FenceSt {
    pub fn new(preempt_cfg_s: u64, io_timeout_s: u64) -> FenceSt {
        FenceSt {
            key: 0,
            preempt_cfg_s,
            io_timeout_s,
            fenced_here: false,
            seen: BTreeMap::new(),
            unkeyed: BTreeSet::new(),
            pass: Vec::new(),
            live: Vec::new(),
            may_be_kept_out: Vec::new(),
            unjudged_peer: false,
            unkeyed_live: BTreeSet::new(),
            fenced_renewing: BTreeSet::new(),
            cleared: false,
            key_seen_at_s: 0,
            fenced_a_peer: false,
            acts: true,
            seen_now: FenceObserved::default(),
            preempting: BTreeMap::new(),
            preempt_floor_io_timeouts: PREEMPT_FLOOR_IO_TIMEOUTS,
            sightings: BTreeMap::new(),
        }
    }

    /// A read of ours that completed at `read_at_ms` showed `host_id`'s record
    /// `(owner_id, owner_generation, timestamp)`. The stillness a preempt waits for is
    /// measured from these, in ms: from the first read that showed the record to the
    /// latest, as the monitor measures it in whole seconds (whose rounding could add or
    /// take up to a second). The first read completed after the record landed, so the
    /// age never exceeds how long the record stood still at the latest read's start,
    /// plus that read's time (at most the peer's io_timeout: the bound
    /// [`gap_rules_out_preempt`] allows for), so a live peer is never aged past the floor
    /// (test `the_preempt_waits_the_floor_in_ms_of_our_reads_not_in_whole_seconds`; VM bed
    /// `pr-delay-bursts`).
    pub fn sighted(&mut self, host_id: u64, record: (u64, u64, u64), read_at_ms: u64) {
        if host_id == 0 || host_id > MAX_EVENT_HOST_ID {
            return;
        }
        let s = self.sightings.entry(host_id).or_insert(Sighting {
            record,
            since_ms: read_at_ms,
            last_ms: read_at_ms,
        });
        if s.record != record {
            *s = Sighting {
                record,
                since_ms: read_at_ms,
                last_ms: read_at_ms,
            };
        }
        s.last_ms = s.last_ms.max(read_at_ms);
    }

    /// Sightings, for the records the monitor read before this state existed (or
    /// before a new key was registered), from the monitor's whole seconds: the first
    /// read that showed each (or first read it) to the latest.
    pub fn seed_sightings(&mut self, monitor: &HostMonitor, now_s: u64) {
        for (host_id, h, _) in monitor.hosts(now_s) {
            if host_id == 0 || host_id > MAX_EVENT_HOST_ID || self.sightings.contains_key(&host_id)
            {
                continue;
            }
            let since_s = if h.last_live_s != 0 {
                h.last_live_s
            } else {
                h.first_check_s
            };
            self.sightings.insert(
                host_id,
                Sighting {
                    record: (h.owner_id, h.owner_generation, h.timestamp),
                    since_ms: since_s * 1000,
                    last_ms: h.last_check_s.max(since_s) * 1000,
                },
            );
        }
    }

    /// How long `host_id`'s record `record` has stood still by our ms sightings, or
    /// `fallback_s` in ms when we have no sighting of that record.
    fn still_ms(&self, host_id: u64, record: (u64, u64, u64), fallback_s: u64) -> u64 {
        match self.sightings.get(&host_id) {
            Some(s) if s.record == record => s.last_ms - s.since_ms,
            _ => fallback_s * 1000,
        }
    }

    /// Our registered key (0 before the registration).
    pub fn our_key(&self) -> u64 {
        self.key
    }

    /// How long a peer with io_timeout `peer_io_s` must stand still before we preempt it:
    /// `fence_preempt_s` (0 = its fail time, 8·D), at least [`PREEMPT_FLOOR_IO_TIMEOUTS`]·D
    /// (D the larger of ours and its).
    pub fn preempt_after_s(&self, peer_io_s: u64) -> u64 {
        let d = self.io_timeout_s.max(peer_io_s);
        let wanted = if self.preempt_cfg_s == 0 {
            timeouts::id_renewal_fail_seconds(d)
        } else {
            self.preempt_cfg_s
        };
        wanted.max(self.preempt_floor_io_timeouts * d)
    }

    /// Our key is registered (a join, or a join that found another generation written).
    pub fn registered(&mut self, key: u64) {
        self.key = key;
        self.key_seen_at_s = 0;
        self.fenced_here = false;
        self.clear_pass();
        self.preempting.clear();
    }

    /// Our key was removed (a clean leave).
    pub fn unregistered(&mut self) {
        self.key = 0;
        self.clear_pass();
        self.preempting.clear();
    }

    /// Forgets what the last look noted for its key read.
    fn clear_pass(&mut self) {
        self.pass.clear();
        self.live.clear();
        self.may_be_kept_out.clear();
    }

    /// Whether a pass decides anything now.
    fn active(&self) -> bool {
        self.key != 0 && !self.fenced_here
    }

    /// Whether renewals should read the whole lockspace area, not only its head: while
    /// this host may make the reservation and the latest pass found none standing, a
    /// pass makes it only after a fresh whole read ([`FenceSt::look`]).
    pub fn wants_whole_reads(&self) -> bool {
        self.active() && self.acts && !self.seen_now.reservation
    }

    /// The fence thread's look, once a pass: `ReadKeys` whenever a pass decides anything
    /// (our key registered, not fenced), with the pass's suspects — the peers that missed
    /// at least one renewal (3·D) — and its live peers noted from `monitor` at `now_s`
    /// for [`FenceSt::keys_read`]. A peer's age is how long its
    /// record had stood still at our latest read of it (`last_check_s`), not at `now_s`,
    /// and a peer whose latest read is older than [`FRESH_READ_IO_TIMEOUTS`] of our
    /// io_timeouts is not judged: after our own pause or stalled reads our view is stale.
    pub fn look(&mut self, monitor: &HostMonitor, now_s: u64) -> Option<FenceAction> {
        self.clear_pass();
        self.unjudged_peer = false;
        if !self.active() {
            return None;
        }
        let fresh_s = FRESH_READ_IO_TIMEOUTS * self.io_timeout_s.max(1);
        // No read of the whole area since the join (the monitor is fed by renewals, the
        // first 2·D after it), or none lately: a peer that is live and unkeyed may be
        // missing from the monitor altogether, and a reservation now would lock it out
        // (the VM bed's pr-rolling and pr-mixed-sanlock: passes right after the join
        // reserved beside renewing sanlock and fence-less lockd hosts). Only a read of
        // the whole area counts: a renewal that read the head (lease-core `reads`) does
        // not show a host that joined beyond it; while no reservation stands the
        // renewals read the whole area ([`FenceSt::wants_whole_reads`]).
        if monitor
            .last_full_read_s()
            .is_none_or(|read_s| now_s.saturating_sub(read_s) > fresh_s)
        {
            self.unjudged_peer = true;
        }
        for (host_id, h, state) in monitor.hosts(now_s) {
            if h.timestamp == 0 || h.owner_id != host_id || h.owner_generation == 0 {
                continue;
            }
            if !monitor.past_host_dead(&h, now_s) {
                self.may_be_kept_out.push(host_id);
            }
            if h.fenced(h.owner_generation) {
                continue;
            }
            if now_s.saturating_sub(h.last_check_s) > fresh_s {
                self.unjudged_peer |= state != lease_core::monitor::HostState::Dead;
                continue;
            }
            let last = if h.last_live_s != 0 {
                h.last_live_s
            } else {
                h.first_check_s
            };
            let age_s = h.last_check_s.saturating_sub(last);
            let record = (h.owner_id, h.owner_generation, h.timestamp);
            let age_ms = self.still_ms(host_id, record, age_s);
            let io_timeout_s = u64::from(h.io_timeout).max(1);
            if age_s >= 3 * io_timeout_s.max(self.io_timeout_s) {
                self.pass.push(Suspect {
                    host_id,
                    generation: h.owner_generation,
                    age_s,
                    age_ms,
                    io_timeout_s,
                    dead: state == lease_core::monitor::HostState::Dead,
                });
            } else if h.last_live_s != 0 && !self.preempting_host(host_id) {
                self.live.push((host_id, h.owner_generation));
            } else if h.last_live_s == 0 {
                // Held, but not yet seen to change since we first read it (we joined
                // a moment ago): it may be live and unkeyed — a sanlock host, a host
                // not yet converted — and a reservation now would lock it out (the VM
                // bed's pr-rolling and pr-mixed-sanlock). Judged once it changes, or
                // once it stood still 3·D.
                self.unjudged_peer = true;
            }
        }
        self.may_be_kept_out
            .retain(|id| !self.live.iter().any(|&(l, _)| l == *id));
        Some(FenceAction::ReadKeys)
    }

    /// When a pass last found our key on the device (monotime s; 0: not since we
    /// registered it).
    pub fn key_seen_at_s(&self) -> u64 {
        self.key_seen_at_s
    }

    /// From when (monotime s) the stillness of our record given to
    /// [`FenceSt::keys_read`] must be measured: from before the pass that last saw our key
    /// by as long as a peer's preempt decided on an older read of ours can lag
    /// (`max_peer_io_timeout_s`: the longest io_timeout among the peers' records), so a
    /// preempt that landed after that pass is still accounted for; 0 (everything kept)
    /// when our key was not seen since we registered it.
    pub fn stillness_since_s(&self, max_peer_io_timeout_s: u64) -> u64 {
        let d = self.io_timeout_s.max(max_peer_io_timeout_s).max(1);
        self.key_seen_at_s
            .saturating_sub(FRESH_READ_IO_TIMEOUTS * d + PREEMPT_LAG_SLACK_S)
    }

    /// Whether to raise the alarm for a fenced generation seen renewing: once per
    /// generation, bounded like the other remembered generations.
    pub fn alarm_fenced_renewing(&mut self, host_id: u64, generation: u64) -> bool {
        self.fenced_renewing.len() < MAX_EVENT_HOST_ID as usize * SEEN_GENERATIONS
            && self.fenced_renewing.insert((host_id, generation))
    }

    fn preempting_host(&self, host_id: u64) -> bool {
        self.preempting.keys().any(|&(h, _)| h == host_id)
    }

    /// [`FenceSt::keys_read`] found no key of ours: the storage lost its keys (no
    /// reservation, and our renewals never stalled long enough for a preempt) → register
    /// again, once per loss; else we are fenced.
    fn our_key_missing(
        &mut self,
        reservation: bool,
        our_renewal_gap_ms: u64,
        actions: &mut Vec<FenceAction>,
    ) -> Option<FenceVerdict> {
        if !reservation && gap_rules_out_preempt(our_renewal_gap_ms, self.io_timeout_s) {
            // Once per loss: a REGISTER sent again and again could land late, after a
            // real preempt, and bring our key back. The keys seen before are
            // forgotten: a peer's key missing now may only wait to be registered
            // again, and must not count as fenced (`peer_done`).
            if std::mem::replace(&mut self.cleared, true) {
                return None;
            }
            self.seen.clear();
            actions.push(FenceAction::Reregister { our_key: self.key });
            return Some(FenceVerdict::StorageCleared {
                renewal_gap_ms: our_renewal_gap_ms,
            });
        }
        self.fenced_here = true;
        Some(FenceVerdict::WeAreFenced(if reservation {
            FencedBecause::OurKeyGone
        } else {
            FencedBecause::OurKeyGoneAfterAStall {
                renewal_gap_ms: our_renewal_gap_ms,
            }
        }))
    }

    /// The key list of the pass's read, in this order (`our_renewal_gap_ms`: the longest
    /// time our record may have stood still on the storage since a read last showed our
    /// key, up to this read):
    /// 1. our key missing while no reservation stands and our renewals never paused long
    ///    enough for a peer to preempt us ([`gap_rules_out_preempt`]): the storage lost
    ///    our key (a target restarted
    ///    without persisted reservations, or cleared) — no peer preempts a host that
    ///    renews, and a preempt leaves the reservation standing — so our key is
    ///    registered again ([`FenceVerdict::StorageCleared`]) and nothing else is done;
    /// 2. our key missing otherwise → we are fenced;
    /// 3. the keys are remembered; a live peer without a key of its host_id → the
    ///    reservation is not made ([`FenceVerdict::PeerUnkeyed`]), and released unless a
    ///    held record without a key, not live and not past host_dead, may be a peer it
    ///    keeps out that runs still (its leases may be ours by now); every live
    ///    peer keyed, and every standing-still peer not DEAD keyed too, our view of every
    ///    peer fresh, and no reservation → it is made;
    /// 4. with a reservation standing, every suspect old enough is to be preempted.
    pub fn keys_read(
        &mut self,
        read: &KeysRead,
        now_s: u64,
        our_renewal_gap_ms: u64,
        actions: &mut Vec<FenceAction>,
    ) -> Option<FenceVerdict> {
        let suspects = std::mem::take(&mut self.pass);
        let live = std::mem::take(&mut self.live);
        let may_be_kept_out = std::mem::take(&mut self.may_be_kept_out);
        if !self.active() {
            return None;
        }
        let KeysRead::Keys { keys, reservation } = read else {
            return None;
        };
        let reservation = *reservation;
        self.seen_now.keys = keys.len() as u64;
        self.seen_now.reservation = reservation;
        if !keys.iter().any(|k| k.raw == self.key) {
            return self.our_key_missing(reservation, our_renewal_gap_ms, actions);
        }
        self.key_seen_at_s = now_s;
        self.cleared = false;
        for k in keys {
            if let Some((host_id, generation)) = k.owner {
                self.remember(host_id, generation);
            }
        }
        let keyed = |host_id: u64| {
            keys.iter()
                .any(|k| k.owner.is_some_and(|(h, _)| h == host_id))
        };
        self.seen_now.unkeyed_live_peers = live.iter().filter(|&&(h, _)| !keyed(h)).count() as u64;
        let unkeyed = live.iter().copied().find(|&(h, _)| !keyed(h));
        if !self.acts {
            return None;
        }
        if let Some((host_id, generation)) = unkeyed {
            // Not while a peer without a key may run still, kept out by the reservation
            // alone (see the module's invariants).
            let keeps_one_out = may_be_kept_out.iter().any(|&h| !keyed(h));
            if reservation && !keeps_one_out {
                actions.push(FenceAction::Release { our_key: self.key });
            }
            let bounded = self.unkeyed_live.len() < MAX_EVENT_HOST_ID as usize * SEEN_GENERATIONS;
            return (bounded && self.unkeyed_live.insert((host_id, generation))).then_some(
                FenceVerdict::PeerUnkeyed {
                    host_id,
                    generation,
                },
            );
        }
        if !reservation {
            // A peer standing still (a suspect), not DEAD, without a key: after a target
            // lost its state every host's renewals stall together and the keys come back
            // one pass at a time, so a reservation made now would lock that peer out and
            // it would count itself fenced (seen on the VM bed, `pr-target-restart`).
            // Wait for its key, or for it to be DEAD; meanwhile leases wait host_dead, as
            // without fencing.
            // Nor while our own view of a peer is too old to judge it (our reads
            // stalled, as every host's do while a target restarts): it may be live and
            // unkeyed.
            if self.unjudged_peer || suspects.iter().any(|s| !s.dead && !keyed(s.host_id)) {
                return None;
            }
            actions.push(FenceAction::Reserve { our_key: self.key });
            return None;
        }
        for s in suspects {
            if s.age_ms < self.preempt_after_s(s.io_timeout_s) * 1000 {
                continue;
            }
            if self
                .preempting
                .insert((s.host_id, s.generation), s.age_s)
                .is_none()
            {
                self.seen_now.preempts += 1;
                self.seen_now.last_preempt_s = now_s;
                actions.push(FenceAction::Preempt {
                    host_id: s.host_id,
                    generation: s.generation,
                    our_key: self.key,
                });
            }
        }
        None
    }

    fn remember(&mut self, host_id: u64, generation: u64) {
        if host_id == 0 || host_id > MAX_EVENT_HOST_ID {
            return;
        }
        let gens = self.seen.entry(host_id).or_default();
        gens.insert(generation);
        while gens.len() > SEEN_GENERATIONS {
            gens.pop_first();
        }
    }

    fn seen(&self, host_id: u64, generation: u64) -> bool {
        self.seen
            .get(&host_id)
            .is_some_and(|g| g.contains(&generation))
    }

    /// The end of a peer's preempt. `Some(PeerFenced)` means: mark it fenced in the host
    /// monitor (the caller does, in the same step).
    pub fn peer_done(
        &mut self,
        host_id: u64,
        generation: u64,
        outcome: PeerFenceOutcome,
    ) -> Option<FenceVerdict> {
        let age_s = self.preempting.remove(&(host_id, generation))?;
        if !self.active() {
            return None;
        }
        match outcome {
            PeerFenceOutcome::Confirmed { preempted } => {
                if preempted || self.seen(host_id, generation) {
                    self.fenced_a_peer = true;
                    self.seen_now.peers_fenced += 1;
                    return Some(FenceVerdict::PeerFenced {
                        host_id,
                        generation,
                        age_s,
                    });
                }
                let bounded = self.unkeyed.len() < MAX_EVENT_HOST_ID as usize * SEEN_GENERATIONS;
                (bounded && self.unkeyed.insert((host_id, generation))).then_some(
                    FenceVerdict::PeerNeverKeyed {
                        host_id,
                        generation,
                    },
                )
            }
            PeerFenceOutcome::Refused => {
                self.fenced_here = true;
                Some(FenceVerdict::WeAreFenced(FencedBecause::PreemptRefused))
            }
            PeerFenceOutcome::Rejoined
            | PeerFenceOutcome::NotConfirmed
            | PeerFenceOutcome::Failed => None,
        }
    }

    /// The invariant check's part: bounded memory, no pass or preempt without a key.
    pub fn check(&self) -> Result<(), String> {
        if self.seen.len() > MAX_EVENT_HOST_ID as usize
            || self.seen.values().any(|g| g.len() > SEEN_GENERATIONS)
            || self.unkeyed_live.len() > MAX_EVENT_HOST_ID as usize * SEEN_GENERATIONS
            || self.fenced_renewing.len() > MAX_EVENT_HOST_ID as usize * SEEN_GENERATIONS
        {
            return Err("fencing remembers more keys than its bound".into());
        }
        if self.key == 0
            && !(self.pass.is_empty()
                && self.live.is_empty()
                && self.may_be_kept_out.is_empty()
                && self.preempting.is_empty())
        {
            return Err("a fence pass without our key".into());
        }
        Ok(())
    }
}

/// What a RESERVATION CONFLICT answering our PREEMPT means. SPC gives it both to a
/// preempter whose own key is gone and to a PREEMPT whose victim key is no longer
/// registered (another survivor's PREEMPT removed it first); the key list read after it
/// tells them apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PreemptConflict {
    /// Our key stands: the victim's key was already gone; go on to the read-back.
    VictimAlreadyGone,
    /// Our key is gone: we are fenced.
    WeAreFenced,
    /// The list was truncated: nothing can be said (the pass is tried again).
    Unknown,
}

/// [`PreemptConflict`] from the device's key list read after the conflict.
pub fn preempt_conflict(keys_after: &[u64], truncated: bool, our_key: u64) -> PreemptConflict {
    if keys_after.contains(&our_key) {
        PreemptConflict::VictimAlreadyGone
    } else if truncated {
        PreemptConflict::Unknown
    } else {
        PreemptConflict::WeAreFenced
    }
}

/// What to do on one device to fence `generation` of `host_id`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DevicePlan {
    /// A key of a newer generation is registered: the host joined again; fence nothing.
    Rejoined,
    /// Preempt these keys of the host (its generation's and any older one's).
    Preempt(Vec<u64>),
}

/// The plan for one device from its key list.
pub fn device_plan(keys: &[FenceKey], host_id: u64, generation: u64) -> DevicePlan {
    let mut doomed = Vec::new();
    for k in keys {
        match k.owner {
            Some((h, g)) if h == host_id && g > generation => return DevicePlan::Rejoined,
            // One PREEMPT per key: on a multipath map each path's I_T nexus lists the
            // same key, and a PREEMPT removes every registration holding it.
            Some((h, _)) if h == host_id && !doomed.contains(&k.raw) => doomed.push(k.raw),
            _ => {}
        }
    }
    DevicePlan::Preempt(doomed)
}

/// Whether one device's read-back confirms `host_id` fenced: the list whole, no key of
/// the host on it (a new generation's would let its processes write again), no key of
/// another scheme (a multipath `reservation_key`, fence_scsi's or mpathpersist's: it may
/// be the host's own, registered through another path, and we cannot tell whose), and a
/// reservation standing (without one every initiator may write).
pub fn device_confirms(
    keys: &[FenceKey],
    truncated: bool,
    reservation: bool,
    host_id: u64,
) -> bool {
    !truncated
        && reservation
        && !keys
            .iter()
            .any(|k| k.owner.is_none_or(|(h, _)| h == host_id))
}

/// Whether a join must wait host_dead before registering a new key: our previous
/// generation was left unreleased (`prev_timestamp` non-zero) and no key of our host_id
/// stands while a reservation does — fenced, or never registered — so processes of that
/// generation still on this host must be ended by the watchdog before a new registration
/// lets them write again.
pub fn join_must_wait(
    prev_timestamp: u64,
    reservation: bool,
    keys: &[FenceKey],
    host_id: u64,
) -> bool {
    prev_timestamp != 0
        && reservation
        && !keys
            .iter()
            .any(|k| k.owner.is_some_and(|(h, _)| h == host_id))
}

/// The key a join's plain REGISTER names as the one it replaces on the lockspace's device:
/// the newest key of our host_id on the list (registered by our previous generation), or
/// 0 when there is none (the target then registers only an initiator without a key).
pub fn join_old_key(keys: &[FenceKey], host_id: u64) -> u64 {
    keys.iter()
        .filter_map(|k| {
            k.owner
                .filter(|&(h, _)| h == host_id)
                .map(|(_, g)| (g, k.raw))
        })
        .max()
        .map_or(0, |(_, raw)| raw)
}

#[cfg(test)]
mod tests {
    use super::*;
    use disk_format::{DeltaSector, LeaderRecord};

    /// A key list read with a reservation standing.
    fn reserved(keys: Vec<FenceKey>) -> KeysRead {
        KeysRead::Keys {
            keys,
            reservation: true,
        }
    }

    fn key(h: u64, g: u64) -> FenceKey {
        FenceKey {
            raw: (h << 32) | g,
            owner: Some((h, g)),
        }
    }

    #[test]
    fn preempt_time_defaults_to_the_fail_time_and_never_undercuts_six_io_timeouts() {
        let f = |io, cfg| FenceSt::new(cfg, io);
        assert_eq!(f(1, 0).preempt_after_s(1), 8);
        assert_eq!(f(10, 0).preempt_after_s(10), 80);
        assert_eq!(f(1, 7).preempt_after_s(1), 7);
        // Configured shorter than 6·D: raised (a live peer's renewals can be 5.5·D apart).
        assert_eq!(f(1, 5).preempt_after_s(1), 6);
        assert_eq!(f(1, 2).preempt_after_s(1), 6);
        // A peer with a longer io_timeout is judged by its own D.
        assert_eq!(f(1, 5).preempt_after_s(3), 18);
    }

    #[test]
    fn a_conflict_on_preempt_is_our_fence_only_when_our_key_is_gone() {
        let (ours, other) = (key(1, 1).raw, key(3, 2).raw);
        assert_eq!(
            preempt_conflict(&[ours, other], false, ours),
            PreemptConflict::VictimAlreadyGone
        );
        assert_eq!(
            preempt_conflict(&[other], false, ours),
            PreemptConflict::WeAreFenced
        );
        assert_eq!(
            preempt_conflict(&[], false, ours),
            PreemptConflict::WeAreFenced
        );
        assert_eq!(
            preempt_conflict(&[other], true, ours),
            PreemptConflict::Unknown
        );
    }

    #[test]
    fn a_peer_is_judged_by_our_latest_read_and_not_at_all_when_our_reads_are_stale() {
        // Host 2 renewed at 100 and we read it unchanged until 103: 3 s still at our
        // latest read, however late the pass runs.
        let mut m = monitor_with_peer();
        reread(&mut m, 103);
        let mut f = FenceSt::new(5, 1);
        f.registered(key(1, 1).raw);
        assert_eq!(f.look(&m, 104), Some(FenceAction::ReadKeys));
        assert_eq!(f.pass[0].age_s, 3);
        // We paused (or our reads timed out) from 103 to 130: our view is stale, so no
        // one is a suspect (nor live), although host 2 looks 30 s old at now.
        assert_eq!(f.look(&m, 130), Some(FenceAction::ReadKeys));
        assert!(f.pass.is_empty() && f.live.is_empty());
        // Our first read after the pause shows host 2 renewed: live, not a suspect.
        let mut renewed = m.clone();
        renewed.observe_decoded(
            131,
            &[None, Some(DeltaSector::from_leader(peer_record(131)))],
        );
        f.look(&renewed, 131);
        assert!(f.pass.is_empty());
        assert_eq!(f.live, vec![(2, 3)]);
        // Had it stayed still, the fresh read makes it a suspect by its real age.
        reread(&mut m, 131);
        assert_eq!(f.look(&m, 131), Some(FenceAction::ReadKeys));
        assert_eq!(f.pass[0].age_s, 31);
    }

    #[test]
    fn the_preempt_waits_the_floor_in_ms_of_our_reads_not_in_whole_seconds() {
        // D = 1, floor 6 s. Our first read showing host 2's record completed at 100.9 s;
        // a read at 106.1 s shows it unchanged: 6 whole seconds apart, 5.2 s real.
        let rec = (2, 3, 100);
        let sectors = |at_s: u64| {
            let mut m = HostMonitor::new(1, 60);
            m.observe_decoded(
                100,
                &[None, Some(DeltaSector::from_leader(peer_record(100)))],
            );
            reread(&mut m, at_s);
            m
        };
        let mut f = FenceSt::new(5, 1);
        f.registered(key(1, 1).raw);
        f.sighted(2, rec, 100_900);
        f.sighted(2, rec, 106_100);
        let m = sectors(106);
        assert_eq!(f.look(&m, 106), Some(FenceAction::ReadKeys));
        assert_eq!((f.pass[0].age_s, f.pass[0].age_ms), (6, 5_200));
        let mut actions = Vec::new();
        f.keys_read(&reserved(vec![key(1, 1), key(2, 3)]), 106, 0, &mut actions);
        assert!(actions.is_empty(), "preempted at 5.2 s still: {actions:?}");
        // 6.05 s real at the read of 106.95 s: preempted.
        f.sighted(2, rec, 106_950);
        assert_eq!(f.look(&m, 106), Some(FenceAction::ReadKeys));
        f.keys_read(&reserved(vec![key(1, 1), key(2, 3)]), 106, 0, &mut actions);
        assert_eq!(
            actions,
            vec![FenceAction::Preempt {
                host_id: 2,
                generation: 3,
                our_key: key(1, 1).raw
            }]
        );
        // A renewal seen restarts the age; a record never sighted in ms (read before
        // this state existed) is aged from the monitor's seconds.
        f.sighted(2, (2, 3, 107), 107_900);
        assert_eq!(f.still_ms(2, (2, 3, 107), 9), 0);
        assert_eq!(f.still_ms(4, (4, 1, 50), 9), 9_000);
    }

    #[test]
    fn every_key_of_the_fenced_generation_or_older_goes_and_a_newer_one_stops_the_fence() {
        let other = FenceKey {
            raw: 0x1234,
            owner: None,
        };
        assert_eq!(
            device_plan(&[key(1, 4), key(3, 9), other], 2, 5),
            DevicePlan::Preempt(vec![])
        );
        assert_eq!(
            device_plan(&[key(1, 4), key(2, 5), key(2, 3)], 2, 5),
            DevicePlan::Preempt(vec![key(2, 5).raw, key(2, 3).raw])
        );
        assert_eq!(
            device_plan(&[key(2, 5), key(2, 6)], 2, 5),
            DevicePlan::Rejoined
        );
        // Multipath: each path's nexus lists the key; one PREEMPT removes them all.
        assert_eq!(
            device_plan(
                &[key(2, 5), key(1, 4), key(2, 5), key(2, 3), key(2, 3)],
                2,
                5
            ),
            DevicePlan::Preempt(vec![key(2, 5).raw, key(2, 3).raw])
        );
        assert!(device_confirms(&[key(1, 4)], false, true, 2));
        // A key of another scheme may be the victim's through another path.
        assert!(!device_confirms(&[key(1, 4), other], false, true, 2));
        assert!(!device_confirms(&[key(1, 4), key(2, 7)], false, true, 2));
        assert!(!device_confirms(&[key(1, 4)], true, true, 2));
        assert!(!device_confirms(&[key(1, 4)], false, false, 2));
        assert_eq!(
            join_old_key(&[key(2, 1), key(1, 3), key(1, 2)], 1),
            key(1, 3).raw
        );
        assert_eq!(join_old_key(&[key(2, 1), other], 1), 0);
        assert!(join_must_wait(5, true, &[key(2, 1)], 1));
        assert!(!join_must_wait(5, true, &[key(1, 1)], 1));
        assert!(!join_must_wait(0, true, &[], 1));
        assert!(!join_must_wait(5, false, &[], 1));
    }

    /// Host 2's record at generation 3 renewed at `timestamp`.
    fn peer_record(timestamp: u64) -> LeaderRecord {
        LeaderRecord {
            owner_id: 2,
            owner_generation: 3,
            timestamp,
            io_timeout: 1,
            ..LeaderRecord::ZERO
        }
    }

    /// A monitor (we are host 1) that saw host 2 at generation 3 renewed at time 100.
    fn monitor_with_peer() -> HostMonitor {
        let mut m = HostMonitor::new(1, 60);
        m.observe_decoded(
            100,
            &[None, Some(DeltaSector::from_leader(peer_record(100)))],
        );
        m
    }

    /// Our read at `now_s` finds host 2's record unchanged since 100.
    fn reread(m: &mut HostMonitor, now_s: u64) {
        m.observe_decoded(
            now_s,
            &[None, Some(DeltaSector::from_leader(peer_record(100)))],
        );
    }

    #[test]
    fn nothing_is_decided_before_our_key_is_registered_or_once_we_are_fenced() {
        let mut m = monitor_with_peer();
        reread(&mut m, 200);
        let mut f = FenceSt::new(0, 1);
        assert_eq!(f.look(&m, 200), None);
        f.registered(key(1, 1).raw);
        assert_eq!(f.look(&m, 200), Some(FenceAction::ReadKeys));
        let mut actions = Vec::new();
        // Our key is not on the list: we are fenced, and decide nothing more.
        assert_eq!(
            f.keys_read(&reserved(vec![key(2, 3)]), 0, 0, &mut actions),
            Some(FenceVerdict::WeAreFenced(FencedBecause::OurKeyGone))
        );
        assert!(actions.is_empty());
        assert_eq!(f.look(&m, 201), None);
        f.check().unwrap();
    }

    /// A preempt that did not complete (a PR command failed, or a removal or shutdown cut
    /// the drain short: the shell's `Failed`) marks nobody fenced; a later pass tries
    /// again.
    #[test]
    fn a_preempt_that_failed_marks_nobody_and_is_tried_again() {
        let ours = key(1, 1);
        let mut m = monitor_with_peer();
        let mut f = FenceSt::new(0, 1);
        f.registered(ours.raw);
        let preempt = FenceAction::Preempt {
            host_id: 2,
            generation: 3,
            our_key: ours.raw,
        };
        let mut actions = Vec::new();
        for t in [110, 111] {
            reread(&mut m, t);
            f.look(&m, t);
            actions.clear();
            f.keys_read(&reserved(vec![ours, key(2, 3)]), t, 0, &mut actions);
            assert_eq!(actions, vec![preempt], "at {t}");
            assert_eq!(f.peer_done(2, 3, PeerFenceOutcome::Failed), None);
            assert!(!f.fenced_a_peer);
        }
        f.check().unwrap();
    }

    #[test]
    fn a_peer_is_fenced_only_when_confirmed_and_its_key_was_ours_to_remove_or_seen() {
        let mut m = monitor_with_peer();
        let mut f = FenceSt::new(0, 1);
        f.registered(key(1, 1).raw);
        // Not old enough yet (the fail time is 8 s): the keys are read, nothing preempted.
        reread(&mut m, 104);
        assert_eq!(f.look(&m, 104), Some(FenceAction::ReadKeys));
        let mut actions = Vec::new();
        assert_eq!(
            f.keys_read(&reserved(vec![key(1, 1)]), 0, 0, &mut actions),
            None
        );
        assert!(actions.is_empty());
        // Old enough: preempted; a truncated read decides nothing.
        reread(&mut m, 110);
        assert_eq!(f.look(&m, 110), Some(FenceAction::ReadKeys));
        assert_eq!(f.keys_read(&KeysRead::Truncated, 0, 0, &mut actions), None);
        assert!(actions.is_empty());
        f.look(&m, 110);
        assert_eq!(
            f.keys_read(&reserved(vec![key(1, 1)]), 0, 0, &mut actions),
            None
        );
        let preempt = FenceAction::Preempt {
            host_id: 2,
            generation: 3,
            our_key: key(1, 1).raw,
        };
        assert_eq!(actions, vec![preempt]);
        // Confirmed, but its key was never seen and not ours to remove: not fenced (warned
        // once).
        let confirmed = PeerFenceOutcome::Confirmed { preempted: false };
        assert_eq!(
            f.peer_done(2, 3, confirmed),
            Some(FenceVerdict::PeerNeverKeyed {
                host_id: 2,
                generation: 3
            })
        );
        reread(&mut m, 111);
        f.look(&m, 111);
        actions.clear();
        f.keys_read(&reserved(vec![key(1, 1)]), 0, 0, &mut actions);
        assert_eq!(f.peer_done(2, 3, confirmed), None);
        // Seen registered in an earlier read: a confirmed removal fences it.
        reread(&mut m, 112);
        f.look(&m, 112);
        actions.clear();
        f.keys_read(&reserved(vec![key(1, 1), key(2, 3)]), 0, 0, &mut actions);
        assert_eq!(actions, vec![preempt]);
        assert_eq!(
            f.peer_done(2, 3, confirmed),
            Some(FenceVerdict::PeerFenced {
                host_id: 2,
                generation: 3,
                age_s: 12
            })
        );
        // An answer nobody asked for decides nothing.
        assert_eq!(f.peer_done(2, 3, confirmed), None);
        // A refused preempt: we are fenced.
        reread(&mut m, 113);
        f.look(&m, 113);
        actions.clear();
        f.keys_read(&reserved(vec![key(1, 1)]), 0, 0, &mut actions);
        assert_eq!(
            f.peer_done(2, 3, PeerFenceOutcome::Refused),
            Some(FenceVerdict::WeAreFenced(FencedBecause::PreemptRefused))
        );
        f.check().unwrap();
    }

    /// A pass at `now_s` after our read at `now_s` found host 2 renewed just then (live).
    fn live_peer_pass(f: &mut FenceSt, now_s: u64) {
        let mut m = monitor_with_peer();
        m.observe_decoded(
            now_s,
            &[None, Some(DeltaSector::from_leader(peer_record(now_s)))],
        );
        assert_eq!(f.look(&m, now_s), Some(FenceAction::ReadKeys));
    }

    #[test]
    fn the_reservation_is_made_only_while_every_live_peer_has_a_key() {
        let ours = key(1, 1);
        let mut f = FenceSt::new(0, 1);
        f.registered(ours.raw);
        let mut actions = Vec::new();
        let unreserved = |keys| KeysRead::Keys {
            keys,
            reservation: false,
        };
        // Host 2 renews without a key (sanlock, or lockd without fencing): no reservation
        // (it would refuse host 2's writes), warned once per generation.
        live_peer_pass(&mut f, 200);
        assert_eq!(
            f.keys_read(&unreserved(vec![ours]), 200, 0, &mut actions),
            Some(FenceVerdict::PeerUnkeyed {
                host_id: 2,
                generation: 3
            })
        );
        assert!(actions.is_empty());
        live_peer_pass(&mut f, 201);
        assert_eq!(
            f.keys_read(&unreserved(vec![ours]), 201, 0, &mut actions),
            None
        );
        assert!(actions.is_empty());
        // A reservation standing (made by a host converted earlier) is released.
        live_peer_pass(&mut f, 202);
        f.keys_read(&reserved(vec![ours]), 202, 0, &mut actions);
        assert_eq!(actions, vec![FenceAction::Release { our_key: ours.raw }]);
        // Once host 2 is keyed, the reservation is made.
        actions.clear();
        live_peer_pass(&mut f, 203);
        assert_eq!(
            f.keys_read(&unreserved(vec![ours, key(2, 3)]), 203, 0, &mut actions),
            None
        );
        assert_eq!(actions, vec![FenceAction::Reserve { our_key: ours.raw }]);
        actions.clear();
        live_peer_pass(&mut f, 204);
        f.keys_read(&reserved(vec![ours, key(2, 3)]), 204, 0, &mut actions);
        assert!(actions.is_empty());
        f.check().unwrap();
    }

    #[test]
    fn a_register_only_host_neither_reserves_nor_preempts_but_knows_its_own_fence() {
        let ours = key(1, 1);
        let mut m = monitor_with_peer();
        reread(&mut m, 120);
        let mut f = FenceSt::new(0, 1);
        f.acts = false;
        f.registered(ours.raw);
        let mut actions = Vec::new();
        f.look(&m, 120);
        let unreserved = KeysRead::Keys {
            keys: vec![ours, key(2, 3)],
            reservation: false,
        };
        assert_eq!(f.keys_read(&unreserved, 120, 0, &mut actions), None);
        f.look(&m, 121);
        assert_eq!(
            f.keys_read(&reserved(vec![ours, key(2, 3)]), 121, 0, &mut actions),
            None
        );
        assert!(actions.is_empty(), "{actions:?}");
        f.look(&m, 122);
        assert_eq!(
            f.keys_read(&reserved(vec![key(2, 3)]), 122, 0, &mut actions),
            Some(FenceVerdict::WeAreFenced(FencedBecause::OurKeyGone))
        );
    }

    #[test]
    fn no_suspect_is_preempted_without_a_reservation() {
        let ours = key(1, 1);
        let mut m = monitor_with_peer();
        reread(&mut m, 120);
        let mut f = FenceSt::new(0, 1);
        f.registered(ours.raw);
        let mut actions = Vec::new();
        f.look(&m, 120);
        let read = KeysRead::Keys {
            keys: vec![ours, key(2, 3)],
            reservation: false,
        };
        assert_eq!(f.keys_read(&read, 120, 0, &mut actions), None);
        assert_eq!(actions, vec![FenceAction::Reserve { our_key: ours.raw }]);
    }

    #[test]
    fn a_key_lost_by_the_storage_is_registered_again_unless_we_paused_long_enough_to_be_fenced() {
        let ours = key(1, 1);
        let mut f = FenceSt::new(0, 1);
        f.registered(ours.raw);
        let mut actions = Vec::new();
        let cleared = |keys| KeysRead::Keys {
            keys,
            reservation: false,
        };
        // A target restart: no key, no reservation, and we renewed all along.
        f.look(&monitor_with_peer(), 100);
        assert_eq!(
            f.keys_read(&cleared(vec![]), 100, 2_000, &mut actions),
            Some(FenceVerdict::StorageCleared {
                renewal_gap_ms: 2_000
            })
        );
        assert_eq!(actions, vec![FenceAction::Reregister { our_key: ours.raw }]);
        // Our REGISTER has not shown yet and another host registered again first: still
        // not a preempt (none stands); the REGISTER is not sent again (a late one could
        // land after a real preempt), and the keys seen before are forgotten.
        assert!(f.seen.is_empty());
        actions.clear();
        f.look(&monitor_with_peer(), 101);
        assert_eq!(
            f.keys_read(&cleared(vec![key(2, 3)]), 101, 2_000, &mut actions),
            None
        );
        assert!(actions.is_empty());
        assert!(!f.fenced_here);
        // Once our key is back, a later loss is handled again.
        f.look(&monitor_with_peer(), 102);
        f.keys_read(&cleared(vec![ours, key(2, 3)]), 102, 2_000, &mut actions);
        actions.clear();
        f.look(&monitor_with_peer(), 103);
        assert_eq!(
            f.keys_read(&cleared(vec![]), 103, 2_000, &mut actions),
            Some(FenceVerdict::StorageCleared {
                renewal_gap_ms: 2_000
            })
        );
        assert_eq!(actions, vec![FenceAction::Reregister { our_key: ours.raw }]);
        // Our record may have stood still 4 s at D = 1 (a renewal whose read timed out,
        // the next one late): a peer's age of it, plus its read's 1 s and the rounding,
        // stays under 6: still cleared (the loss above was already handled once: nothing
        // new is done).
        actions.clear();
        f.look(&monitor_with_peer(), 104);
        assert_eq!(
            f.keys_read(&cleared(vec![]), 104, 4_000, &mut actions),
            None
        );
        assert!(!f.fenced_here);
        // 4.001 s: a peer may have seen 6 s (its floor at D = 1), preempted us, and the
        // target may have lost its state after: we count as fenced.
        actions.clear();
        f.look(&monitor_with_peer(), 105);
        assert_eq!(
            f.keys_read(&cleared(vec![]), 105, 4_001, &mut actions),
            Some(FenceVerdict::WeAreFenced(
                FencedBecause::OurKeyGoneAfterAStall {
                    renewal_gap_ms: 4_001
                }
            ))
        );
        assert!(actions.is_empty());
        // Our key gone while a reservation stands: preempted, whatever our renewals did.
        let mut f = FenceSt::new(0, 1);
        f.registered(ours.raw);
        f.look(&monitor_with_peer(), 100);
        assert_eq!(
            f.keys_read(&reserved(vec![key(2, 3)]), 100, 0, &mut actions),
            Some(FenceVerdict::WeAreFenced(FencedBecause::OurKeyGone))
        );
    }

    #[test]
    fn the_stillness_counts_from_before_the_last_sight_of_our_key_by_a_preempt_s_lag() {
        let ours = key(1, 1);
        let mut f = FenceSt::new(0, 1);
        f.registered(ours.raw);
        // Not seen since the registration: every renewal kept counts.
        assert_eq!(f.stillness_since_s(10), 0);
        f.look(&monitor_with_peer(), 1000);
        f.keys_read(&reserved(vec![ours]), 1000, 0, &mut Vec::new());
        assert_eq!(f.key_seen_at_s(), 1000);
        // A peer's read may be 3·D old when it decides, D its own when longer than ours.
        assert_eq!(f.stillness_since_s(1), 1000 - 3 - PREEMPT_LAG_SLACK_S);
        assert_eq!(f.stillness_since_s(10), 1000 - 30 - PREEMPT_LAG_SLACK_S);
    }

    #[test]
    fn a_stall_rules_out_a_preempt_up_to_five_io_timeouts_less_a_second() {
        // The bound for our own D, against peers at D and at sanlock's 10.
        for (d, limit_ms) in [(1, 4_000), (2, 9_000), (10, 49_000)] {
            assert!(gap_rules_out_preempt(limit_ms, d));
            assert!(!gap_rules_out_preempt(limit_ms + 1, d));
            // The worst a peer at D_P can measure: the landing gap plus its read's
            // timeout, rounded up to whole seconds, under its floor 6·max(D, D_P).
            for d_p in [1, 2, 10, 60] {
                let worst_age_s = (limit_ms + d_p * 1000).div_ceil(1000);
                assert!(worst_age_s < PREEMPT_FLOOR_IO_TIMEOUTS * d.max(d_p));
            }
        }
    }

    /// A key list read with no reservation on the device.
    fn free(keys: Vec<FenceKey>) -> KeysRead {
        KeysRead::Keys {
            keys,
            reservation: false,
        }
    }

    /// No reservation is made while a peer that stands still (after a target restart,
    /// every host's renewals stall together) has no key and is not DEAD, nor while our
    /// own view of a peer is too old to judge it: its key may only be on its way back,
    /// and the reservation would lock it out. Once it has a key (seen by a fresh read),
    /// or once it is DEAD, the reservation is made.
    #[test]
    fn no_reservation_while_a_still_peer_that_is_not_dead_has_no_key() {
        let ours = key(1, 1);
        let mut f = FenceSt::new(0, 1);
        f.registered(ours.raw);
        let mut m = monitor_with_peer();
        let mut actions = Vec::new();
        // Host 2 unchanged for 4 s (a suspect: 3·D or more), far from host_dead (68 s).
        reread(&mut m, 104);
        f.look(&m, 104);
        assert_eq!(f.keys_read(&free(vec![ours]), 104, 1, &mut actions), None);
        assert!(
            actions.is_empty(),
            "reserved with a still peer unkeyed: {actions:?}"
        );
        // Its key is back, but our own latest read of it is 4 s old at D = 1 (our reads
        // stalled): not judged, so no reservation either.
        f.look(&m, 108);
        f.keys_read(&free(vec![ours, key(2, 3)]), 108, 1, &mut actions);
        assert!(
            actions.is_empty(),
            "reserved from a stale view: {actions:?}"
        );
        // A fresh read, its key there: reserved.
        reread(&mut m, 109);
        f.look(&m, 109);
        f.keys_read(&free(vec![ours, key(2, 3)]), 109, 1, &mut actions);
        assert_eq!(actions, vec![FenceAction::Reserve { our_key: ours.raw }]);
        // DEAD (host_dead 8 + 60 after 100) and still no key: reserved.
        actions.clear();
        reread(&mut m, 169);
        f.look(&m, 169);
        f.keys_read(&free(vec![ours]), 169, 1, &mut actions);
        assert_eq!(actions, vec![FenceAction::Reserve { our_key: ours.raw }]);
    }

    /// Our read at `now_s`: host 2 at generation 3 unchanged since 100 (fenced, or
    /// standing still), host 3 at generation 1 renewed at `now_s` (live).
    fn reread_with_live_host3(m: &mut HostMonitor, now_s: u64) {
        let host3 = LeaderRecord {
            owner_id: 3,
            owner_generation: 1,
            timestamp: now_s,
            io_timeout: 1,
            ..LeaderRecord::ZERO
        };
        m.observe_decoded(
            now_s,
            &[
                None,
                Some(DeltaSector::from_leader(peer_record(100))),
                Some(DeltaSector::from_leader(host3)),
            ],
        );
    }

    /// A live peer without a key does not make us release the reservation while a peer
    /// it keeps out may still run: host 2, fenced (its key preempted and confirmed gone)
    /// or standing still without a key, not yet past host_dead. Released, the
    /// reservation would let host 2's processes write again while our ballots take its
    /// leases (the fence mark stays in our monitor): two writers. Found by
    /// `lockd-daemon-sim --model fence --hosts 6`, seed 100868: a peer that had just
    /// left cleanly (its record free on disk, our read of it older, its key removed)
    /// looked live and unkeyed, and the release let a fenced host's shared holder write
    /// beside the exclusive holder our ballot then made. Once host 2 is past host_dead
    /// (its watchdog has fired), the reservation is released.
    #[test]
    fn no_release_while_a_peer_the_reservation_keeps_out_may_still_run() {
        let ours = key(1, 1);
        let mut f = FenceSt::new(0, 1);
        f.registered(ours.raw);
        let mut m = HostMonitor::new(1, 60);
        reread_with_live_host3(&mut m, 99);
        let mut actions = Vec::new();
        // Host 2 stood still 10 s: preempted, confirmed, marked fenced.
        reread_with_live_host3(&mut m, 110);
        f.look(&m, 110);
        f.keys_read(
            &reserved(vec![ours, key(2, 3), key(3, 1)]),
            110,
            0,
            &mut actions,
        );
        assert_eq!(actions.len(), 1, "{actions:?}");
        let done = f.peer_done(2, 3, PeerFenceOutcome::Confirmed { preempted: true });
        assert!(matches!(done, Some(FenceVerdict::PeerFenced { .. })));
        assert!(m.mark_fenced(2, 3));
        // Host 3 renews without a key now: warned, but the reservation stays.
        actions.clear();
        reread_with_live_host3(&mut m, 120);
        f.look(&m, 120);
        assert_eq!(
            f.keys_read(&reserved(vec![ours]), 120, 0, &mut actions),
            Some(FenceVerdict::PeerUnkeyed {
                host_id: 3,
                generation: 1
            })
        );
        assert!(actions.is_empty(), "released: {actions:?}");
        // Past host_dead (8 + 60 s after 100): released.
        reread_with_live_host3(&mut m, 169);
        f.look(&m, 169);
        f.keys_read(&reserved(vec![ours]), 169, 0, &mut actions);
        assert_eq!(actions, vec![FenceAction::Release { our_key: ours.raw }]);
        // The same for a peer standing still without a key that nobody marked here
        // (another survivor may have fenced it).
        let mut f = FenceSt::new(0, 1);
        f.registered(ours.raw);
        let mut m = HostMonitor::new(1, 60);
        reread_with_live_host3(&mut m, 99);
        reread_with_live_host3(&mut m, 120);
        actions.clear();
        f.look(&m, 120);
        f.keys_read(&reserved(vec![ours]), 120, 0, &mut actions);
        assert!(actions.is_empty(), "released: {actions:?}");
        f.check().unwrap();
    }

    /// Right after our join a held record we have read only once is neither live nor a
    /// suspect yet: no reservation until it is judged (seen to change: live, and then
    /// an unkeyed one stops the reservation), as a sanlock host or one without fencing
    /// would otherwise be locked out.
    #[test]
    fn no_reservation_before_every_held_record_is_judged() {
        let ours = key(1, 1);
        let mut f = FenceSt::new(0, 1);
        f.registered(ours.raw);
        let m = monitor_with_peer();
        let mut actions = Vec::new();
        f.look(&m, 100);
        f.keys_read(&free(vec![ours]), 100, 1, &mut actions);
        assert!(
            actions.is_empty(),
            "reserved with a peer not judged yet: {actions:?}"
        );
        // It renews (its record changed at our read of 102) and has no key: still none.
        let mut m = monitor_with_peer();
        m.observe_decoded(
            102,
            &[None, Some(DeltaSector::from_leader(peer_record(102)))],
        );
        f.look(&m, 102);
        f.keys_read(&free(vec![ours]), 102, 1, &mut actions);
        assert!(
            actions.is_empty(),
            "reserved beside a live unkeyed peer: {actions:?}"
        );
        // Keyed now: reserved.
        f.look(&m, 102);
        f.keys_read(&free(vec![ours, key(2, 3)]), 102, 1, &mut actions);
        assert_eq!(actions, vec![FenceAction::Reserve { our_key: ours.raw }]);
    }

    /// Between the join and the first renewal's read the monitor is empty: that is no
    /// proof that no peer lives, so no reservation; nor when our latest read of the area
    /// is stale (a peer may have joined since); a fresh read with only keyed peers then
    /// allows it.
    #[test]
    fn no_reservation_before_a_fresh_read_of_the_whole_area() {
        let ours = key(1, 1);
        let mut f = FenceSt::new(0, 1);
        f.registered(ours.raw);
        let mut actions = Vec::new();
        let mut m = HostMonitor::new(0, 60);
        assert_eq!(f.look(&m, 100), Some(FenceAction::ReadKeys));
        f.keys_read(&free(vec![ours]), 100, 1, &mut actions);
        assert!(actions.is_empty(), "reserved before any read: {actions:?}");
        // A read shows no other host: the reservation may be made.
        m.observe_decoded(101, &[None, None]);
        f.look(&m, 101);
        f.keys_read(&free(vec![ours]), 101, 1, &mut actions);
        assert_eq!(actions, vec![FenceAction::Reserve { our_key: ours.raw }]);
        // That read is 3·D + 1 old by 105: stale, so none again.
        actions.clear();
        f.look(&m, 105);
        f.keys_read(&free(vec![ours]), 105, 1, &mut actions);
        assert!(actions.is_empty(), "reserved on a stale read: {actions:?}");
        // Fresh head reads (lease-core `reads`) do not do: a host may have joined beyond
        // the head. While no reservation stands the renewals are asked for whole reads.
        assert!(f.wants_whole_reads());
        m.observe_read(
            106,
            &lease_core::sectors::HostSectors::from_sectors(&[None, None]),
            false,
        );
        f.look(&m, 106);
        f.keys_read(&free(vec![ours]), 106, 1, &mut actions);
        assert!(
            actions.is_empty(),
            "reserved after a head read: {actions:?}"
        );
        m.observe_read(
            107,
            &lease_core::sectors::HostSectors::from_sectors(&[None, None]),
            true,
        );
        f.look(&m, 107);
        f.keys_read(&free(vec![ours]), 107, 1, &mut actions);
        assert_eq!(actions, vec![FenceAction::Reserve { our_key: ours.raw }]);
        // Once a reservation stands, head reads do.
        actions.clear();
        f.look(&m, 108);
        f.keys_read(
            &KeysRead::Keys {
                keys: vec![ours],
                reservation: true,
            },
            108,
            1,
            &mut actions,
        );
        assert!(!f.wants_whole_reads());
    }

    #[test]
    fn remembered_keys_stay_bounded() {
        let mut f = FenceSt::new(0, 1);
        f.registered(1);
        for g in 1..100 {
            f.remember(7, g);
        }
        f.remember(MAX_EVENT_HOST_ID + 1, 1);
        f.remember(0, 1);
        assert_eq!(f.seen.len(), 1);
        assert!(f.seen(7, 99) && !f.seen(7, 95));
        f.check().unwrap();
    }
}
