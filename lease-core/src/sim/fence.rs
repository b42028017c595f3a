//! A model of storage fencing by SCSI-3 persistent reservations: a survivor may take a
//! failed holder's lease as soon as the holder's key is *confirmed* gone from the target
//! (PREEMPT answered, then READ KEYS no longer listing it while a reservation stands),
//! instead of waiting host_dead. It models the rules of the daemon's fence pass
//! (`daemon-core/src/fencing.rs`), not its code: hosts, the target and the network are
//! abstract, with one exclusive lease.
//!
//! # The target
//!
//! One logical unit that runs messages in arrival order; every message travels with its
//! own random latency, so a message sent later may arrive earlier — except that one
//! host's PR commands (REGISTER, RESERVE, PREEMPT, READ KEYS) arrive in the order it sent
//! them, as the daemon's fence thread sends one at a time and waits for its answer. It
//! enforces what SPC-3/SPC-4 say and tgt and LIO do:
//! - REGISTER AND IGNORE EXISTING KEY replaces the sender's key; key 0 unregisters it.
//!   Registering is never refused.
//! - A reservation is Write Exclusive – All Registrants (WE-AR), which stands while any
//!   registrant is left, or Write Exclusive – Registrants Only (WE-RO), held by the I_T
//!   nexus that made it and released when that nexus unregisters. RESERVE from an
//!   unregistered sender, or against another sender's WE-RO reservation, is a
//!   RESERVATION CONFLICT.
//! - PREEMPT from an unregistered sender, or naming a key no registration holds (another
//!   survivor removed it first), is a RESERVATION CONFLICT. Otherwise that registration
//!   goes; a WE-RO reservation its nexus held passes to the preempting one, a WE-AR
//!   reservation stays as it is, and where none stands none is made.
//! - A write (data, membership renewal or release, lease take or release) from a sender
//!   without a registration is refused with RESERVATION CONFLICT while a reservation
//!   stands; with no reservation every write lands.
//! - A data write the target accepted reaches its storage up to `DRAIN_MS` later. On the
//!   default target ([`FenceTarget::PlainPreempt`], as tgt) PREEMPT does not abort it:
//!   the target takes plain PREEMPT only. On [`FenceTarget::PreemptAndAbort`] (as LIO and
//!   nvmet) survivors send PREEMPT AND ABORT: the victim's registration goes at once (a
//!   key read meanwhile no longer lists it) and the answer comes once every write of the
//!   victim the target had accepted has reached the storage (aborted commands already at
//!   the backend complete first).
//! - READ KEYS and READ RESERVATION (one message here) are never refused.
//! - Multipath ([`FenceTarget::Multipath`], with PREEMPT AND ABORT as LIO): every host has
//!   a second I_T nexus, path b. Its REGISTER registers the key on both nexuses at once
//!   (the kernel's dm-multipath registers on every path or on none), a PREEMPT removes the
//!   key from every nexus that holds it, and each data write goes down path a or b. On a
//!   third of the seeds one host's path b holds a key of another scheme instead (as a
//!   multipath `reservation_key` or fence_scsi would register), which no fence of lockd's
//!   removes: while such a key is on the target, no fence is confirmed (the daemon's
//!   `device_confirms`), for it may be the victim's own path.
//! - A restart (no APTPL) loses every key and the reservation. Sessions stay; the lease
//!   and the membership records are data on the LUN and stay too.
//! - A host that boots logs in again: its old session ends and whatever still arrives
//!   from it is dropped (iSCSI session reinstatement).
//!
//! # The hosts
//!
//! A host boots with a new generation, hence a new key, and registers it. Then, every
//! second, it renews its membership (the delta lease, a write) and runs a fence pass that
//! reads the keys and the reservation; the join is complete once a renewal has landed.
//! The lease holder also writes under its lease version every second and releases the
//! lease after a while. A paused host does nothing, and reads what was answered meanwhile
//! when it resumes. A host holding nothing, with nothing in flight, sometimes leaves
//! cleanly: it releases its membership, reads the keys, and unregisters its key — unless
//! its key holds the WE-RO reservation, or is the last one while some member's key is
//! missing (a fenced host may still write), for the reservation would go with it; it
//! joins again later with a new generation.
//!
//! What a pass does with what it read:
//! - our key missing before the join is complete: the join failed (no lease, no member
//!   record: nobody preempted it) and starts again with a new generation;
//! - our key missing while no reservation stands, and our renewals never stood still for
//!   `GAP_MS` since `PR_LAG_MS` before a read last showed our key (a preempt decided
//!   before that read can land after it): nobody preempted us (a preempt leaves a
//!   reservation standing, and nobody preempts a host that renews) — the target lost its
//!   state. We register the same key again, once, and forget the keys we had seen: a key
//!   missing now may only be waiting to be registered again. The stillness is the host's
//!   own measure, by its own clock;
//! - our key missing otherwise: we are fenced (reset, then a new generation);
//! - no reservation: once every member that may be live (its renewal landed within
//!   `LIVE_MS`, the fail time: the daemon waits for a standing-still peer's key until it
//!   is DEAD) has a key, we make
//!   the reservation, WE-RO as the daemon makes it (tgt keeps one holder for WE-AR too,
//!   and points at a freed registration once that holder is preempted); nobody is
//!   preempted without one;
//! - no lease held or sought: a free lease is taken (a compare-and-swap of its version;
//!   disk Paxos abstracted), and so is the lease of a holder whose host renews with a
//!   newer generation (that generation is dead). A holder whose renewals stood still for
//!   `FAIL_MS` (as landed on the target) is fenced, with a reservation standing: PREEMPT
//!   of its generation's key, a read-back, and the take only if the key is gone while a
//!   reservation stands. A key seen since we joined or last found the target's state
//!   lost, and now gone while a reservation stands, is fenced already: the lease is
//!   taken. Either way the take waits `DRAIN_MS` first (the daemon's `fence_drain_ms`):
//!   the victim's writes the target accepted before the preempt land meanwhile — except
//!   after our own PREEMPT AND ABORT was answered, which came after they landed. A key
//!   found gone (another survivor's preempt, of either kind) waits the drain: that
//!   survivor's abort may still be under way.
//!
//! Every survivor fences, so two of them often preempt the same key at once and the
//! slower PREEMPT meets a RESERVATION CONFLICT. That survivor reads the keys again: its
//! own key there, the victim's key went by another's preempt, and the read-back decides
//! the take; its own key gone, the pass's rules above decide. A host whose write is
//! refused is fenced, or, before its join is complete, starts its join again.
//!
//! Faults: pauses of 1–60 s (the host resumes mid-work and writes under the old version),
//! half of them freezes that stop the host's own clock too (a stopped VM: its monotonic
//! clock does not count the stop, so the stillness it measures leaves the freeze out),
//! crashes, slow storage (latencies up to 20 s), target restarts (at least a minute
//! apart). A restart while a host whose key was preempted or lost still has its session
//! lets that host write until a reservation stands again, whatever the rules (no APTPL):
//! the model does not combine these faults, and such a restart waits until every such
//! host has registered again or logged in again.
//!
//! # Invariants
//!
//! - No overlap (checked at the target, as the VM bed's witness checks the LUN): once a
//!   write under lease version v has landed, no write under a version below v lands.
//! - No false fence: a host resets as fenced only when its key is gone because it was
//!   preempted, or after its renewals stood still for `GAP_MS` (it may have been
//!   preempted unseen). A reset while its key is registered, or after the target merely
//!   lost its state, is a violation ("false fence: ..."), except one the rules accept:
//!   the target lost the host's key (a restart) and a peer made the reservation without
//!   it, by the rules, because its renewals had not landed when the peer decided (a join
//!   during the restart). The host cannot tell that from a preempt (its own clock does
//!   not see a freeze); the run counts it as a `join_lockout`.
//!
//! # Planted bugs
//!
//! - `take-before-preempt-confirmed`: the survivor takes the lease as soon as it has
//!   *sent* the PREEMPT. Caught as an overlap.
//! - `preempt-conflict-means-fenced`: a RESERVATION CONFLICT on PREEMPT means we are
//!   fenced, so the slower of two survivors resets. Caught as a false fence.
//! - `holder-unregisters-at-leave`: the host holding the WE-RO reservation unregisters
//!   its key at a clean leave, so the reservation goes with it, and a fenced host's writes
//!   land until the next pass makes one again. Caught as an overlap.
//! - `take-without-drain`: the survivor takes the lease as soon as the fence is
//!   confirmed, while a write of the victim the target accepted before the preempt may
//!   still be on its way to the storage. Caught as an overlap.
//! - `empty-target-means-fenced`: our key missing means fenced, even on a target that
//!   holds no key and no reservation; a joining host makes the reservation as soon as it
//!   has registered, with its key alone, and a survivor makes one before a preempt where
//!   none stands (the pass makes none). After a target restart every host resets. Caught
//!   as false fences.
//! - `found-gone-skips-drain` (with `FenceTarget::PreemptAndAbort`): a key found gone
//!   counts as aborted, as if our own PREEMPT AND ABORT had removed it, and the lease is
//!   taken at once. Caught as an overlap: another survivor's abort was still waiting for
//!   the victim's accepted writes.
//! - `foreign-keys-ignored` (with `FenceTarget::Multipath`): a fence is confirmed though a
//!   key of another scheme is registered. Caught as an overlap: the victim's writes
//!   through its path b, registered with that key, land after the take.
//! - `key-lost-at-join-reregisters`: our key missing while a reservation stands is
//!   registered again when our own clock says our renewals never stood still and our key
//!   was last seen within `PR_LAG_MS` of our join (what would spare a host joining during a
//!   target restart its false fence). A host frozen soon after its join, preempted
//!   meanwhile, resumes with a short stillness by its own clock and writes again. Caught as
//!   an overlap (first on seed 73 with 4 hosts); the VM bed's `pr-holder-leaves` showed
//!   the same (107 writes of the frozen guest landed after the takeover).

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, VecDeque};

use super::rng::Rng;

/// A planted bug of the fence rules: the rule as it was before it was fixed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FenceBug {
    /// Take the lease right after sending PREEMPT, before it is answered and the keys
    /// are read back.
    TakeBeforePreemptConfirmed,
    /// Any RESERVATION CONFLICT on PREEMPT means this host is fenced.
    PreemptConflictMeansFenced,
    /// The holder of the WE-RO reservation unregisters its key at a clean leave (the
    /// reservation goes with it).
    HolderUnregistersAtLeave,
    /// Our key missing means fenced even when the target holds no key and no
    /// reservation; joiners make the reservation with their own key alone.
    EmptyTargetMeansFenced,
    /// Take the lease once the fence is confirmed, without waiting `DRAIN_MS` for the
    /// victim's writes the target accepted before the plain PREEMPT.
    TakeWithoutDrain,
    /// Our key missing while a reservation stands is taken for a loss by the target, and
    /// registered again, when our own clock says our renewals never stood still and our
    /// key was last seen within `PR_LAG_MS` of our join: the rule that would spare a
    /// host joining during a target restart its false fence.
    KeyLostAtJoinReregisters,
    /// On a target with PREEMPT AND ABORT, a victim key found gone (another survivor's
    /// preempt) is taken without the drain, as if our own abort had removed it.
    FoundGoneSkipsDrain,
    /// Keys of other schemes do not stop a fence's confirmation.
    ForeignKeysIgnored,
}

/// What the target does with a preempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FenceTarget {
    /// Plain PREEMPT only (PREEMPT AND ABORT refused), as tgt: the victim's accepted
    /// writes may land after the answer.
    #[default]
    PlainPreempt,
    /// PREEMPT AND ABORT, as LIO and nvmet: answered once the victim's accepted writes
    /// are done.
    PreemptAndAbort,
    /// PREEMPT AND ABORT, and two I_T nexuses per host (dm-multipath over LIO).
    Multipath,
}

impl FenceTarget {
    fn aborts(self) -> bool {
        self != FenceTarget::PlainPreempt
    }
}

/// Every planted bug of the fence model, by its `--plant-bug` name.
pub const FENCE_BUGS: [(&str, FenceBug); 8] = [
    (
        "take-before-preempt-confirmed",
        FenceBug::TakeBeforePreemptConfirmed,
    ),
    (
        "preempt-conflict-means-fenced",
        FenceBug::PreemptConflictMeansFenced,
    ),
    (
        "holder-unregisters-at-leave",
        FenceBug::HolderUnregistersAtLeave,
    ),
    (
        "empty-target-means-fenced",
        FenceBug::EmptyTargetMeansFenced,
    ),
    ("take-without-drain", FenceBug::TakeWithoutDrain),
    (
        "key-lost-at-join-reregisters",
        FenceBug::KeyLostAtJoinReregisters,
    ),
    ("found-gone-skips-drain", FenceBug::FoundGoneSkipsDrain),
    ("foreign-keys-ignored", FenceBug::ForeignKeysIgnored),
];

pub fn parse_fence_bug(name: &str) -> Option<FenceBug> {
    FENCE_BUGS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|&(_, bug)| bug)
}

/// How long after a host's decision its PR command (a RESERVE, a PREEMPT) may still reach
/// the target, and be followed by the answer of another host's read: the longest latency
/// (20 s), the 1 ms steps that keep a host's queued PR commands in order (a few), and an
/// answer's latency (under 20 ms), rounded up to a whole second. So a preempt decided on
/// a stillness that ended before a read showed the victim's key lands within this of
/// that read. (The daemon's window is 3·D of the slowest peer + 20 s: its peers decide
/// from reads up to 3·D old, and each PR command has a timeout.)
const PR_LAG_MS: u64 = 21_000;

/// A survivor fences a holder whose last renewal landed this long ago.
const FAIL_MS: u64 = 8_000;
/// A member whose last renewal landed within this may be live: no reservation is made
/// without its key (one made before would refuse its next renewal and fence it).
const LIVE_MS: u64 = FAIL_MS;
/// A host whose own renewals stood still this long (by what it knows: from the sending
/// of its last renewal known to have landed to the answer of the next), since
/// `PR_LAG_MS` before a read last showed its key, may have been preempted meanwhile.
const GAP_MS: u64 = 3_000;
/// Hosts act every tick.
const TICK_MS: u64 = 1_000;
/// The longest a data write the target accepted takes to reach its storage, and what a
/// survivor waits after a confirmed fence before it takes the lease (`fence_drain_ms`).
const DRAIN_MS: u64 = 2_000;
/// The chance, per tick and in thousandths, that a host holding nothing leaves.
const LEAVE_PERMILLE: u64 = 20;
/// Target restarts are at least this far apart.
const RESTART_SPACING_MS: u64 = 60_000;
const MAX_HOSTS: usize = 16;

/// lvmlockd's key format: a new generation, a new key.
fn key_of(host: usize, generation: u64) -> u64 {
    0x1000_0000_0000_0000 | (generation << 16) | (host as u64 + 1)
}

/// A key of another scheme on a host's path b (not lvmlockd's format: no host_id in it).
fn foreign_key_of(host: usize) -> u64 {
    0xabc0_0000_0000_0000 | (host as u64 + 1)
}

fn is_lvm_key(key: u64) -> bool {
    key >> 60 == 1
}

/// A host's path b nexus (path a's is the host's index).
fn path_b(host: usize) -> usize {
    host + MAX_HOSTS
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ResvType {
    /// Write Exclusive – Registrants Only.
    WeRo,
    /// Write Exclusive – All Registrants.
    WeAr,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Resv {
    kind: ResvType,
    /// The I_T nexus that made it, or that it passed to by a preempt.
    holder: usize,
    /// The hosts whose renewals had not landed within `LIVE_MS` when the RESERVE that
    /// made it was decided (bit per host): the rule let it be made without their keys.
    not_live: u16,
}

/// What a key read saw at the target: the key of each host's nexus (0: none) and
/// whether a reservation stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct View {
    /// Per I_T nexus: path a's at the host's index, path b's at [`path_b`].
    keys: [u64; 2 * MAX_HOSTS],
    resv: bool,
    /// The WE-RO reservation is held by the reader's registration.
    resv_ours: bool,
    why: Read,
}

/// What a key read is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Read {
    /// A fence pass.
    Pass,
    /// A fence's read-back (after PREEMPT, or after its RESERVATION CONFLICT).
    Confirm,
    /// A clean leave, before the key is unregistered.
    Leave,
}

impl View {
    fn has(&self, key: u64) -> bool {
        self.keys.contains(&key)
    }

    /// A key of another scheme is registered.
    fn has_foreign(&self) -> bool {
        self.keys.iter().any(|&k| k != 0 && !is_lvm_key(k))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Msg {
    Write {
        epoch: u64,
        /// Sent down path b (multipath only).
        via_b: bool,
    },
    /// The membership (delta lease) renewal, sent at `sent` (`sent_local` by the host's
    /// own clock).
    Renew {
        generation: u64,
        sent: u64,
        sent_local: u64,
    },
    /// The membership released (a clean leave).
    Leave {
        generation: u64,
    },
    /// REGISTER AND IGNORE EXISTING KEY; `key` 0 unregisters.
    Register {
        key: u64,
    },
    Reserve {
        kind: ResvType,
        /// [`Resv::not_live`] at the decision.
        not_live: u16,
    },
    Preempt {
        victim: u64,
        kind: ResvType,
        /// PREEMPT AND ABORT.
        abort: bool,
    },
    ReadKeys {
        why: Read,
    },
    Take {
        expect: u64,
        generation: u64,
    },
    Release {
        epoch: u64,
    },
}

impl Msg {
    /// A persistent reservation command (the fence thread's), not a data or lease write.
    fn is_pr_command(&self) -> bool {
        matches!(
            self,
            Msg::Register { .. } | Msg::Reserve { .. } | Msg::Preempt { .. } | Msg::ReadKeys { .. }
        )
    }
}

// A key read's answer carries every nexus's key (2 × 16): a model's event, copied
// freely; its size does not matter here.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reply {
    Ok(Msg),
    Conflict(Msg),
    Keys(View),
    Took(u64),
    Lost,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    Tick {
        host: usize,
        inc: u64,
    },
    Crash {
        host: usize,
    },
    Pause {
        host: usize,
        ms: u64,
    },
    Boot {
        host: usize,
    },
    /// The host's path to the lockspace's device holds its renewals for `ms` (they
    /// arrive after it), while its data writes, on another device, go on.
    RenewalStall {
        host: usize,
        ms: u64,
    },
    TargetRestart,
    /// A survivor's wait after a confirmed fence is over: it takes lease version
    /// `expect`.
    Drained {
        host: usize,
        inc: u64,
        expect: u64,
    },
}

#[allow(clippy::large_enum_variant)] // it holds a `Reply` (above)
#[derive(Debug, Clone, Copy)]
enum Item {
    Ev(Ev),
    Arrive {
        host: usize,
        session: u64,
        msg: Msg,
    },
    /// A data write the target accepted reaches its storage (`inc`: the sender's
    /// incarnation, for the answer).
    Land {
        host: usize,
        inc: u64,
        epoch: u64,
    },
    Back {
        host: usize,
        inc: u64,
        reply: Reply,
    },
}

#[derive(Default)]
struct Target {
    /// Registered key per host (its I_T nexus).
    keys: BTreeMap<usize, u64>,
    resv: Option<Resv>,
    /// The session each host is logged in with; older sessions' messages are dropped.
    session: BTreeMap<usize, u64>,
    /// Keys a PREEMPT removed (the model's record, not the target's).
    preempted: BTreeSet<u64>,
    /// Hosts whose key a PREEMPT removed or a restart lost, by the session they had then,
    /// until they register again (the model's record).
    keyless: BTreeMap<usize, u64>,
    /// The lease: its version and holder (host, generation).
    epoch: u64,
    holder: Option<(usize, u64)>,
    /// Membership records: each member's generation and when its last renewal landed.
    member_gen: BTreeMap<usize, u64>,
    last_renew_ms: BTreeMap<usize, u64>,
    /// The generation each host last left with (its later renewals are stale).
    left_gen: BTreeMap<usize, u64>,
    max_landed_epoch: u64,
    /// Per host, when the last of its writes the target accepted reaches the storage.
    accepted_land_until: BTreeMap<usize, u64>,
}

impl Target {
    fn registered(&self, host: usize) -> bool {
        self.keys.contains_key(&host)
    }

    /// Writes from an unregistered nexus are refused only while a reservation stands.
    fn may_write(&self, host: usize) -> bool {
        self.resv.is_none() || self.registered(host)
    }

    fn live(&self, host: usize, now: u64) -> bool {
        self.member_gen.contains_key(&host)
            && self
                .last_renew_ms
                .get(&host)
                .is_some_and(|&t| now < t + LIVE_MS)
    }
}

/// A fence under way: the victim's key, and the lease version to take.
#[derive(Debug, Clone, Copy)]
struct Fencing {
    victim: u64,
    expect: u64,
    /// Our PREEMPT AND ABORT of the victim was answered: its accepted writes are done.
    aborted: bool,
}

#[derive(Default, Clone)]
struct Host {
    up: bool,
    inc: u64,
    session: u64,
    generation: u64,
    key: u64,
    /// Registered and renewing.
    joined: bool,
    /// A renewal of this generation has landed: the join is complete.
    member: bool,
    /// The membership release sent, its answer awaited.
    leaving: bool,
    /// Left: joins again with a new generation at this time (once unregistered).
    rejoin_at: Option<u64>,
    paused_until: u64,
    /// Renewals sent before this arrive after it (`Ev::RenewalStall`).
    renewals_held_until: u64,
    holding: Option<u64>,
    hold_until: u64,
    writes_in_flight: u64,
    renews_in_flight: u64,
    fencing: Option<Fencing>,
    taking: bool,
    /// A pass's key read in flight.
    reading: bool,
    /// Our key registered again after the target lost it; not yet seen back.
    reregistering: bool,
    /// When (by the true time, and by our own clock) a pass of ours last saw our current
    /// key registered (0: not since we registered it).
    key_seen_at: u64,
    key_seen_at_local: u64,
    /// When (by our own clock) this generation's join completed (its first renewal known
    /// landed).
    member_at_local: u64,
    /// Time our own clock did not count: finished freezes (a stopped VM), and the current
    /// one (from, until).
    frozen_ms: u64,
    freeze: Option<(u64, u64)>,
    /// When our latest PR command reaches the target (they arrive in sending order).
    last_pr_arrival: u64,
    /// The keys this host has seen registered since it joined or last found that the
    /// target had lost its state.
    known: BTreeSet<u64>,
    /// The latest sending time of a renewal of ours known to have landed (true time, and
    /// by our own clock).
    renewed_sent: u64,
    renewed_sent_local: u64,
    /// Each landed renewal of this generation, by the true time and by our own clock:
    /// its answer's time and how long our record may have stood still before it (from the
    /// previous landed renewal's send to this answer). Kept while either clock's window
    /// (`PR_LAG_MS` before a read last showed our key) may still count it.
    stills: VecDeque<(Still, Still)>,
}

impl Host {
    /// Stops this host's clock from `now` to `until` (a freeze that overlaps the current
    /// one extends it; a finished one is added to `frozen_ms`).
    fn freeze_until(&mut self, now: u64, until: u64) {
        self.freeze = match self.freeze {
            Some((from, end)) if end >= now => Some((from, end.max(until))),
            Some((from, end)) => {
                self.frozen_ms += end - from;
                Some((now, until))
            }
            None => Some((now, until)),
        };
    }
}

/// One landed renewal's stillness by one clock ([`Host::stills`]).
#[derive(Debug, Clone, Copy)]
struct Still {
    end: u64,
    ms: u64,
}

/// The longest stillness in `stills` (each read by `clock`) that ended after `seen_at` −
/// `PR_LAG_MS`, or since the last landed renewal's send (`sent`) up to `now`, all by one
/// clock.
fn longest_still(
    stills: &VecDeque<(Still, Still)>,
    clock: fn(&(Still, Still)) -> Still,
    seen_at: u64,
    sent: u64,
    now: u64,
) -> u64 {
    let since = seen_at.saturating_sub(PR_LAG_MS);
    stills
        .iter()
        .map(clock)
        .filter(|st| st.end >= since)
        .map(|st| st.ms)
        .max()
        .unwrap_or(0)
        .max(now.saturating_sub(sent))
}

/// Counters of one run.
#[derive(Debug, Default, Clone)]
pub struct FenceStats {
    pub takes: u64,
    /// PREEMPTs sent.
    pub fences: u64,
    pub writes_landed: u64,
    pub writes_refused: u64,
    pub faults: u64,
    /// Hosts reset as fenced.
    pub fenced_resets: u64,
    /// Resets as fenced that nothing justified (each is also a violation).
    pub false_fences: u64,
    /// Resets as fenced of a host whose key the target lost (a restart) while it was not
    /// yet live to a peer whose reservation, made by the rules without its key, then
    /// refused it: not preempted, but it cannot tell (its own clock cannot prove it
    /// renewed: a freeze stops it), so it stops as fenced. Counted, not a violation.
    pub join_lockouts: u64,
    /// PREEMPTs answered RESERVATION CONFLICT because another survivor's preempt had
    /// removed the key first.
    pub double_preempts: u64,
    /// Clean leaves by the host holding the reservation (WE-RO) or that made it (WE-AR):
    /// its key kept (the rule), or unregistered (the planted bug).
    pub holder_leaves: u64,
    pub target_restarts: u64,
    /// Keys registered again after the target lost them.
    pub reregistrations: u64,
    /// Joins that failed (the key lost before the first renewal landed) and started again.
    pub failed_joins: u64,
    /// Clean leaves that kept the last key registered (a fenced host could still write).
    pub kept_keys: u64,
    /// Writes accepted before their sender's key was preempted that reached the storage
    /// after it (what the drain waits for).
    pub late_landings: u64,
    /// PREEMPT AND ABORTs of ours answered (a target that aborts): taken without the drain.
    pub aborts: u64,
}

/// The result of one seed.
#[derive(Debug, Clone)]
pub struct FenceReport {
    pub seed: u64,
    pub stats: FenceStats,
    pub violations: Vec<String>,
    pub trace: Vec<String>,
}

struct Model {
    rng: Rng,
    now: u64,
    seq: u64,
    queue: BinaryHeap<Reverse<(u64, u64, usize)>>,
    items: Vec<Item>,
    target: Target,
    hosts: Vec<Host>,
    bug: Option<FenceBug>,
    stats: FenceStats,
    violations: Vec<String>,
    trace: Option<Vec<String>>,
    last_restart: Option<u64>,
    target_kind: FenceTarget,
    /// Multipath: the host whose path b holds a key of another scheme, if any.
    foreign_host: Option<usize>,
}

/// Runs one seed of the fence model with `hosts` hosts for `duration_s` virtual seconds,
/// on a target that takes plain PREEMPT only.
pub fn run_fence_seed(
    seed: u64,
    hosts: usize,
    duration_s: u64,
    bug: Option<FenceBug>,
    trace: bool,
) -> FenceReport {
    run_fence_seed_on(
        FenceTarget::PlainPreempt,
        seed,
        hosts,
        duration_s,
        bug,
        trace,
    )
}

/// [`run_fence_seed`] on a target of the given kind.
pub fn run_fence_seed_on(
    target_kind: FenceTarget,
    seed: u64,
    hosts: usize,
    duration_s: u64,
    bug: Option<FenceBug>,
    trace: bool,
) -> FenceReport {
    let hosts = hosts.clamp(2, MAX_HOSTS);
    let mut m = Model::new(seed, hosts, bug, trace);
    m.target_kind = target_kind;
    if target_kind == FenceTarget::Multipath && m.rng.below(3) == 0 {
        m.foreign_host = Some(m.rng.below(hosts as u64) as usize);
    }
    let end = duration_s * 1000;
    for h in 0..hosts {
        let at = m.rng.range(0, 2_000);
        m.at(at, Item::Ev(Ev::Boot { host: h }));
        for _ in 0..m.rng.range(1, 4) {
            let at = m.rng.range(5_000, end.max(5_001));
            let ms = m.rng.log_range(1_000, 60_000);
            m.at(at, Item::Ev(Ev::Pause { host: h, ms }));
        }
        for _ in 0..m.rng.range(0, 2) {
            let at = m.rng.range(5_000, end.max(5_001));
            m.at(at, Item::Ev(Ev::Crash { host: h }));
        }
        for _ in 0..m.rng.range(0, 3) {
            let at = m.rng.range(5_000, end.max(5_001));
            let ms = m.rng.range(5_000, 20_000);
            m.at(at, Item::Ev(Ev::RenewalStall { host: h, ms }));
        }
    }
    for _ in 0..m.rng.range(0, 2) {
        let at = m.rng.range(20_000, end.max(20_001));
        m.at(at, Item::Ev(Ev::TargetRestart));
    }
    while let Some(Reverse((at, _, idx))) = m.queue.pop() {
        if at > end {
            break;
        }
        m.now = at;
        match m.items[idx] {
            Item::Ev(ev) => m.event(ev),
            Item::Arrive { host, session, msg } => m.arrive(host, session, msg),
            Item::Land { host, inc, epoch } => m.land(host, inc, epoch),
            Item::Back { host, inc, reply } => m.back(host, inc, reply),
        }
    }
    FenceReport {
        seed,
        stats: m.stats,
        violations: m.violations,
        trace: m.trace.unwrap_or_default(),
    }
}

fn stamp(ms: u64) -> String {
    format!("t={}.{:03}s", ms / 1000, ms % 1000)
}

impl Model {
    fn new(seed: u64, hosts: usize, bug: Option<FenceBug>, trace: bool) -> Model {
        Model {
            rng: Rng::new(seed),
            now: 0,
            seq: 0,
            queue: BinaryHeap::new(),
            items: Vec::new(),
            target: Target::default(),
            hosts: vec![Host::default(); hosts],
            bug,
            stats: FenceStats::default(),
            violations: Vec::new(),
            trace: trace.then(Vec::new),
            last_restart: None,
            target_kind: FenceTarget::PlainPreempt,
            foreign_host: None,
        }
    }

    fn at(&mut self, t: u64, item: Item) {
        self.seq += 1;
        self.items.push(item);
        self.queue
            .push(Reverse((t, self.seq, self.items.len() - 1)));
    }

    fn log(&mut self, line: impl FnOnce() -> String) {
        if let Some(t) = &mut self.trace {
            t.push(format!("{} {}", stamp(self.now), line()));
        }
    }

    fn has_bug(&self, bug: FenceBug) -> bool {
        self.bug == Some(bug)
    }

    /// No key of another scheme is registered (it may be the victim's through another
    /// path): a fence may be confirmed. Ignored under the planted bug.
    fn no_foreign_key(&self, view: &View) -> bool {
        !view.has_foreign() || self.has_bug(FenceBug::ForeignKeysIgnored)
    }

    /// The daemon reserves WE-RO (tgt keeps one holder even for WE-AR, and a preempt of
    /// that holder leaves it pointing at a freed registration).
    fn resv_type(&self) -> ResvType {
        ResvType::WeRo
    }

    /// Storage latency: mostly fast, sometimes slow, rarely very slow.
    fn latency(&mut self) -> u64 {
        match self.rng.below(100) {
            0..=79 => self.rng.range(1, 20),
            80..=96 => self.rng.log_range(20, 3_000),
            _ => self.rng.log_range(3_000, 20_000),
        }
    }

    fn send(&mut self, host: usize, msg: Msg) {
        let session = self.hosts[host].session;
        let from = match msg {
            Msg::Renew { .. } => self.now.max(self.hosts[host].renewals_held_until),
            _ => self.now,
        };
        let mut at = from + self.latency();
        if msg.is_pr_command() {
            // The daemon's fence thread sends one PR command at a time and waits for its
            // answer: a host's PR commands reach the target in the order it sent them.
            let h = &mut self.hosts[host];
            at = at.max(h.last_pr_arrival + 1);
            h.last_pr_arrival = at;
        }
        self.at(at, Item::Arrive { host, session, msg });
    }

    fn reply(&mut self, host: usize, reply: Reply) {
        let inc = self.hosts[host].inc;
        let at = self.now + self.rng.range(1, 20);
        self.at(at, Item::Back { host, inc, reply });
    }

    fn event(&mut self, ev: Ev) {
        match ev {
            Ev::Boot { host } => {
                let h = &mut self.hosts[host];
                let generation = h.generation + 1;
                *h = Host {
                    up: true,
                    paused_until: h.paused_until,
                    inc: h.inc + 1,
                    session: h.session + 1,
                    generation,
                    key: key_of(host, generation),
                    ..Host::default()
                };
                let (key, session, inc) = (h.key, h.session, h.inc);
                // Logging in again ends the old session at the target.
                self.target.session.insert(host, session);
                if self.foreign_host == Some(host) {
                    // Another scheme's key on our path b (a multipath reservation_key).
                    self.target.keys.insert(path_b(host), foreign_key_of(host));
                }
                self.log(|| format!("host{host} BOOT key 0x{key:x}"));
                self.register(host);
                let at = self.now + TICK_MS;
                self.at(at, Item::Ev(Ev::Tick { host, inc }));
            }
            Ev::Crash { host } => {
                if self.hosts[host].up {
                    self.stats.faults += 1;
                    self.reset(host, "CRASH");
                }
            }
            Ev::Pause { host, ms } => {
                self.stats.faults += 1;
                // Half the pauses stop the host's clock too (a stopped VM: its monotonic
                // clock does not count the stop), half do not (a stopped daemon).
                let freeze = self.rng.chance(500);
                let now = self.now;
                let h = &mut self.hosts[host];
                h.paused_until = h.paused_until.max(now + ms);
                if freeze {
                    h.freeze_until(now, now + ms);
                }
                let what = if freeze {
                    "FREEZE (clock stopped)"
                } else {
                    "PAUSE"
                };
                self.log(|| format!("host{host} {what} {ms} ms"));
            }
            Ev::Tick { host, inc } => self.tick(host, inc),
            Ev::RenewalStall { host, ms } => {
                self.stats.faults += 1;
                let h = &mut self.hosts[host];
                h.renewals_held_until = h.renewals_held_until.max(self.now + ms);
                self.log(|| format!("host{host} RENEWALS HELD {ms} ms"));
            }
            Ev::TargetRestart => self.target_restart(),
            Ev::Drained { host, inc, expect } => {
                let h = &self.hosts[host];
                if !h.up || h.inc != inc {
                    return;
                }
                if h.paused_until > self.now {
                    let at = h.paused_until;
                    self.at(at, Item::Ev(Ev::Drained { host, inc, expect }));
                    return;
                }
                let generation = h.generation;
                self.send(host, Msg::Take { expect, generation });
            }
        }
    }

    /// How long a data write the target accepted takes to reach its storage: mostly at
    /// once, at times up to `DRAIN_MS`.
    fn backend_ms(&mut self) -> u64 {
        match self.rng.below(100) {
            0..=79 => self.rng.range(0, 5),
            80..=94 => self.rng.log_range(5, 500),
            _ => self.rng.log_range(500, DRAIN_MS),
        }
    }

    /// A fence is confirmed: the lease is taken once the victim's accepted writes have
    /// reached the storage (`DRAIN_MS`), or at once under the planted bug.
    fn take_after_drain(&mut self, host: usize, expect: u64) {
        if self.has_bug(FenceBug::TakeWithoutDrain) {
            self.take(host, expect);
            return;
        }
        let h = &mut self.hosts[host];
        h.taking = true;
        let inc = h.inc;
        let at = self.now + DRAIN_MS;
        self.at(at, Item::Ev(Ev::Drained { host, inc, expect }));
    }

    /// A data write the target accepted reaches its storage; then it is answered.
    fn land(&mut self, host: usize, inc: u64, epoch: u64) {
        self.stats.writes_landed += 1;
        if self.target.keyless.contains_key(&host) {
            self.stats.late_landings += 1;
        }
        let max = self.target.max_landed_epoch;
        if epoch < max {
            self.violations.push(format!(
                "overlap: {} host{host}'s write under lease version {epoch} landed after a write under version {max}",
                stamp(self.now)
            ));
        }
        self.target.max_landed_epoch = max.max(epoch);
        let at = self.now + self.rng.range(1, 20);
        let reply = Reply::Ok(Msg::Write {
            epoch,
            via_b: false,
        });
        self.at(at, Item::Back { host, inc, reply });
    }

    fn target_restart(&mut self) {
        if let Some(last) = self
            .last_restart
            .filter(|&l| self.now < l + RESTART_SPACING_MS)
        {
            self.at(last + RESTART_SPACING_MS, Item::Ev(Ev::TargetRestart));
            return;
        }
        let t = &self.target;
        let open = t.keyless.iter().any(|(h, s)| t.session.get(h) == Some(s));
        if open {
            // A host that lost its key still has its session: not combined (see the
            // header).
            let at = self.now + TICK_MS;
            self.at(at, Item::Ev(Ev::TargetRestart));
            return;
        }
        self.last_restart = Some(self.now);
        self.stats.faults += 1;
        self.stats.target_restarts += 1;
        let t = &mut self.target;
        for h in t.keys.keys() {
            if let Some(&s) = t.session.get(h) {
                t.keyless.insert(*h, s);
            }
        }
        t.keys.clear();
        t.resv = None;
        self.log(|| "TARGET RESTART: every key and the reservation lost".into());
    }

    /// Registers the host's current key.
    fn register(&mut self, host: usize) {
        let now_local = self.local_now(host);
        let h = &mut self.hosts[host];
        h.member = false;
        // Away, we cannot know what the target lost meanwhile.
        h.known.clear();
        h.renewed_sent = self.now;
        h.renewed_sent_local = now_local;
        h.stills.clear();
        h.key_seen_at = 0;
        h.key_seen_at_local = 0;
        let key = h.key;
        self.send(host, Msg::Register { key });
    }

    /// The host goes down (crash, or reset after learning it was fenced) and boots later.
    fn reset(&mut self, host: usize, why: &str) {
        self.hosts[host].up = false;
        self.hosts[host].holding = None;
        self.log(|| format!("host{host} {why}: down"));
        let at = self.now + self.rng.range(5_000, 30_000);
        self.at(at, Item::Ev(Ev::Boot { host }));
    }

    /// How long our renewals truly stood still since `PR_LAG_MS` before a read last
    /// showed our key (the daemon's `FenceSt::stillness_since_s`: a peer's PREEMPT
    /// decided on a stillness that ended before that read can land after it). The
    /// checker's measure.
    fn gap(&self, host: usize) -> u64 {
        let h = &self.hosts[host];
        longest_still(&h.stills, |s| s.0, h.key_seen_at, h.renewed_sent, self.now)
    }

    /// The same stillness as the host itself measures it, with its own clock, which does
    /// not count a freeze: what its rules decide from.
    fn own_gap(&self, host: usize) -> u64 {
        let h = &self.hosts[host];
        let now = self.local_now(host);
        longest_still(
            &h.stills,
            |s| s.1,
            h.key_seen_at_local,
            h.renewed_sent_local,
            now,
        )
    }

    /// The host's own clock now: the true time less what its freezes stopped.
    fn local_now(&self, host: usize) -> u64 {
        let h = &self.hosts[host];
        let current = h
            .freeze
            .map_or(0, |(from, until)| self.now.min(until).saturating_sub(from));
        self.now - h.frozen_ms - current
    }

    /// Whether our key, found missing (`resv`: while a reservation stands), may have been
    /// lost by the target rather than preempted (the daemon's `FenceSt::keys_read`, rule
    /// 1): no reservation stands (a preempt leaves one) and our renewals never stood still
    /// for `GAP_MS` since `PR_LAG_MS` before a read last showed our key (nobody preempts a
    /// host that renews). With a reservation standing our key missing is always a fence:
    /// a host cannot measure its own stillness through a pause that stops its clock (a
    /// stopped VM), so the planted bug `key-lost-at-join-reregisters`, which trusts it, is
    /// caught when such a pause is followed by a preempt.
    fn may_be_lost_by_target(&self, host: usize, resv: bool) -> bool {
        let h = &self.hosts[host];
        let join_rule = self.has_bug(FenceBug::KeyLostAtJoinReregisters)
            && h.key_seen_at_local <= h.member_at_local + PR_LAG_MS;
        !self.has_bug(FenceBug::EmptyTargetMeansFenced)
            && self.own_gap(host) < GAP_MS
            && (!resv || join_rule)
    }

    /// The host resets as fenced. A reset that neither a preempt of its key nor a
    /// stillness of its renewals long enough to have hidden one explains is a false fence.
    fn fenced(&mut self, host: usize, why: &str) {
        self.stats.fenced_resets += 1;
        let key = self.hosts[host].key;
        let registered = self.target.keys.get(&host) == Some(&key);
        let preempted = self.target.preempted.contains(&key) && !registered;
        // A stillness the host measured itself is a true one too (its clock runs slow,
        // never fast), though over a window its freezes stretch: either excuses it.
        let still = self.gap(host).max(self.own_gap(host));
        let locked_out = !registered
            && self
                .target
                .resv
                .is_some_and(|r| r.not_live & (1 << host) != 0);
        if !preempted && still < GAP_MS && locked_out {
            self.stats.join_lockouts += 1;
            self.log(|| {
                format!("host{host} locked out by a reservation made while it was not yet live")
            });
        } else if !preempted && still < GAP_MS {
            self.stats.false_fences += 1;
            let what = if registered {
                "was still registered"
            } else {
                "was not preempted, only lost by the target, and its renewals never stood still"
            };
            let line = format!(
                "false fence: {} host{host} reset as fenced ({why}) while its key 0x{key:x} {what}",
                stamp(self.now)
            );
            self.violations.push(line);
        }
        self.reset(host, &format!("FENCED ({why})"));
    }

    /// The join lost its key before its first renewal landed (a target restart): no
    /// lease, no member record, so nobody preempted it. It starts again with a new
    /// generation.
    fn join_failed(&mut self, host: usize, why: &str) {
        self.stats.failed_joins += 1;
        let h = &mut self.hosts[host];
        h.joined = false;
        h.reregistering = false;
        h.generation += 1;
        h.key = key_of(host, h.generation);
        let key = h.key;
        self.log(|| format!("host{host} JOIN FAILED ({why}): joining again with key 0x{key:x}"));
        self.register(host);
    }

    fn tick(&mut self, host: usize, inc: u64) {
        let h = &self.hosts[host];
        if !h.up || h.inc != inc {
            return;
        }
        if h.paused_until > self.now {
            let at = h.paused_until;
            self.at(at, Item::Ev(Ev::Tick { host, inc }));
            return;
        }
        let (rejoin_at, joined, leaving, generation) =
            (h.rejoin_at, h.joined, h.leaving, h.generation);
        let at = self.now + TICK_MS;
        self.at(at, Item::Ev(Ev::Tick { host, inc }));
        if let Some(when) = rejoin_at {
            if self.now >= when {
                let h = &mut self.hosts[host];
                h.rejoin_at = None;
                h.generation += 1;
                h.key = key_of(host, h.generation);
                let key = h.key;
                self.log(|| format!("host{host} JOIN again, key 0x{key:x}"));
                self.register(host);
            }
            return;
        }
        if !joined || leaving {
            return;
        }
        let h = &self.hosts[host];
        let quiet = h.member
            && h.holding.is_none()
            && h.writes_in_flight == 0
            && h.renews_in_flight == 0
            && !h.taking
            && h.fencing.is_none()
            && !h.reregistering;
        let holds_at_target = self.target.holder.is_some_and(|(x, _)| x == host);
        if quiet && !holds_at_target && self.rng.chance(LEAVE_PERMILLE) {
            // A clean leave, once nothing of ours is in flight: the membership released
            // first, then the key.
            self.hosts[host].leaving = true;
            self.log(|| format!("host{host} LEAVE"));
            self.send(host, Msg::Leave { generation });
            return;
        }
        let sent = self.now;
        let sent_local = self.local_now(host);
        self.hosts[host].renews_in_flight += 1;
        self.send(
            host,
            Msg::Renew {
                generation,
                sent,
                sent_local,
            },
        );
        if let Some(epoch) = self.hosts[host].holding {
            if self.now >= self.hosts[host].hold_until && self.hosts[host].writes_in_flight == 0 {
                // The application stopped and its I/O completed: release.
                self.hosts[host].holding = None;
                self.log(|| format!("host{host} RELEASE epoch {epoch}"));
                self.send(host, Msg::Release { epoch });
            } else {
                self.hosts[host].writes_in_flight += 1;
                let via_b = self.target_kind == FenceTarget::Multipath && self.rng.below(2) == 0;
                self.send(host, Msg::Write { epoch, via_b });
            }
        }
        if !self.hosts[host].reading {
            self.hosts[host].reading = true;
            self.send(host, Msg::ReadKeys { why: Read::Pass });
        }
    }

    fn take(&mut self, host: usize, expect: u64) {
        self.hosts[host].taking = true;
        let generation = self.hosts[host].generation;
        self.send(host, Msg::Take { expect, generation });
    }

    fn preempt(&mut self, host: usize, victim_host: usize, victim: u64, expect: u64) {
        self.stats.fences += 1;
        self.hosts[host].fencing = Some(Fencing {
            victim,
            expect,
            aborted: false,
        });
        let abort = self.target_kind.aborts();
        self.log(|| {
            let what = if abort {
                "PREEMPT AND ABORT"
            } else {
                "PREEMPT"
            };
            format!("host{host} {what} host{victim_host} key 0x{victim:x}")
        });
        let kind = self.resv_type();
        self.send(
            host,
            Msg::Preempt {
                victim,
                kind,
                abort,
            },
        );
        if self.has_bug(FenceBug::TakeBeforePreemptConfirmed) {
            self.hosts[host].fencing = None;
            self.take(host, expect);
        }
    }

    fn arrive(&mut self, host: usize, session: u64, msg: Msg) {
        if self.target.session.get(&host) != Some(&session) {
            return; // the session ended: the target never runs it
        }
        let registered = self.target.registered(host);
        let reply = match msg {
            Msg::Register { key: 0 } => {
                self.unregister(host);
                Reply::Ok(msg)
            }
            Msg::Register { key } => {
                self.target.keys.insert(host, key);
                if self.target_kind == FenceTarget::Multipath {
                    if self.foreign_host == Some(host) {
                        // The other scheme registers its key on path b again once it
                        // is gone (multipathd, at the path's next check).
                        self.target
                            .keys
                            .entry(path_b(host))
                            .or_insert(foreign_key_of(host));
                    } else {
                        self.target.keys.insert(path_b(host), key);
                    }
                }
                self.target.keyless.remove(&host);
                Reply::Ok(msg)
            }
            Msg::Reserve { kind, not_live } => {
                let ok = match self.target.resv {
                    _ if !registered => false,
                    None => {
                        self.target.resv = Some(Resv {
                            kind,
                            holder: host,
                            not_live,
                        });
                        self.log(|| format!("host{host} RESERVED {kind:?}"));
                        true
                    }
                    Some(r) => r.kind == kind && (kind == ResvType::WeAr || r.holder == host),
                };
                if ok {
                    Reply::Ok(msg)
                } else {
                    Reply::Conflict(msg)
                }
            }
            Msg::Preempt {
                victim,
                kind,
                abort,
            } => {
                let (reply, victim_host) = self.preempt_at_target(host, victim, kind, msg);
                if let (Reply::Ok(_), true, Some(v)) = (reply, abort, victim_host) {
                    // Answered once the victim's accepted writes are done.
                    let done = self
                        .target
                        .accepted_land_until
                        .get(&v)
                        .copied()
                        .unwrap_or(0);
                    let inc = self.hosts[host].inc;
                    let at = self.now.max(done) + self.rng.range(1, 20);
                    self.at(at, Item::Back { host, inc, reply });
                    return;
                }
                reply
            }
            Msg::ReadKeys { why } => {
                let mut keys = [0; 2 * MAX_HOSTS];
                for (&h, &k) in &self.target.keys {
                    keys[h] = k;
                }
                let resv_ours = self
                    .target
                    .resv
                    .as_ref()
                    .is_some_and(|r| r.kind == ResvType::WeRo && r.holder == host);
                Reply::Keys(View {
                    keys,
                    resv: self.target.resv.is_some(),
                    resv_ours,
                    why,
                })
            }
            Msg::Write { via_b: true, .. }
                if self.target.resv.is_some() && !self.target.keys.contains_key(&path_b(host)) =>
            {
                self.stats.writes_refused += 1;
                Reply::Conflict(msg)
            }
            Msg::Write { via_b: false, .. }
            | Msg::Renew { .. }
            | Msg::Leave { .. }
            | Msg::Take { .. }
            | Msg::Release { .. }
                if !self.target.may_write(host) =>
            {
                if matches!(msg, Msg::Write { .. }) {
                    self.stats.writes_refused += 1;
                }
                Reply::Conflict(msg)
            }
            Msg::Write { epoch, .. } => {
                // Accepted: it reaches the storage later, whatever comes meanwhile.
                let inc = self.hosts[host].inc;
                let at = self.now + self.backend_ms();
                let until = self.target.accepted_land_until.entry(host).or_insert(0);
                *until = (*until).max(at);
                self.at(at, Item::Land { host, inc, epoch });
                return;
            }
            Msg::Renew { generation, .. } => {
                let t = &mut self.target;
                if t.left_gen.get(&host).is_none_or(|&g| g < generation)
                    && t.member_gen.get(&host).is_none_or(|&g| g <= generation)
                {
                    t.member_gen.insert(host, generation);
                    t.last_renew_ms.insert(host, self.now);
                }
                Reply::Ok(msg)
            }
            Msg::Leave { generation } => {
                let t = &mut self.target;
                if t.member_gen.get(&host) == Some(&generation) {
                    t.member_gen.remove(&host);
                    t.last_renew_ms.remove(&host);
                }
                t.left_gen.insert(host, generation);
                Reply::Ok(msg)
            }
            Msg::Take { expect, generation } => {
                let t = &mut self.target;
                if t.epoch == expect {
                    t.epoch += 1;
                    t.holder = Some((host, generation));
                    t.member_gen.insert(host, generation);
                    t.last_renew_ms.insert(host, self.now);
                    Reply::Took(t.epoch)
                } else {
                    Reply::Lost
                }
            }
            Msg::Release { epoch } => {
                let t = &mut self.target;
                if t.holder.map(|(x, _)| x) == Some(host) && t.epoch == epoch {
                    t.holder = None;
                }
                Reply::Ok(msg)
            }
        };
        self.reply(host, reply);
    }

    /// REGISTER with key 0 at the target: the registration goes, and with it a WE-RO
    /// reservation its nexus holds, or a WE-AR one when no registrant is left.
    fn unregister(&mut self, host: usize) {
        let t = &mut self.target;
        let Some(key) = t.keys.remove(&host) else {
            return;
        };
        if t.keys.get(&path_b(host)) == Some(&key) {
            t.keys.remove(&path_b(host));
        }
        let Some(r) = t.resv else {
            return;
        };
        if r.holder == host {
            self.stats.holder_leaves += 1;
        }
        let released = match r.kind {
            ResvType::WeRo => r.holder == host,
            ResvType::WeAr => t.keys.is_empty(),
        };
        if released {
            t.resv = None;
            self.log(|| format!("reservation {:?} released with host{host}'s key", r.kind));
        }
    }

    /// PREEMPT at the target: RESERVATION CONFLICT from an unregistered sender or for a
    /// key no registration holds; otherwise that registration goes, and a WE-RO
    /// reservation its nexus held passes to the sender.
    /// The answer, and the victim's host when its registration went.
    fn preempt_at_target(
        &mut self,
        host: usize,
        victim: u64,
        kind: ResvType,
        msg: Msg,
    ) -> (Reply, Option<usize>) {
        let t = &mut self.target;
        let registered = t.registered(host);
        let owner = t
            .keys
            .iter()
            .find(|&(_, &k)| k == victim)
            .map(|(&nexus, _)| nexus % MAX_HOSTS);
        let Some(v) = owner.filter(|_| registered) else {
            if registered && t.preempted.contains(&victim) {
                self.stats.double_preempts += 1;
            }
            return (Reply::Conflict(msg), None);
        };
        // Every nexus holding the key (both paths of a multipath host).
        t.keys.retain(|_, k| *k != victim);
        t.preempted.insert(victim);
        if let Some(&s) = t.session.get(&v) {
            t.keyless.insert(v, s);
        }
        if let Some(r) = t.resv {
            if r.kind == ResvType::WeRo && r.holder == v {
                t.resv = Some(Resv {
                    kind,
                    holder: host,
                    not_live: r.not_live,
                });
            }
        }
        (Reply::Ok(msg), Some(v))
    }

    fn back(&mut self, host: usize, inc: u64, reply: Reply) {
        let h = &self.hosts[host];
        if !h.up || h.inc != inc {
            return;
        }
        if h.paused_until > self.now {
            // A paused host reads its answers when it resumes.
            let at = h.paused_until;
            self.at(at, Item::Back { host, inc, reply });
            return;
        }
        match reply {
            Reply::Ok(Msg::Register { key }) => {
                let h = &mut self.hosts[host];
                if key == 0 {
                    h.rejoin_at = Some(self.now + self.rng.range(3_000, 30_000));
                } else if key == h.key && !h.joined && h.rejoin_at.is_none() {
                    h.joined = true;
                    if self.has_bug(FenceBug::EmptyTargetMeansFenced) {
                        // The joiner makes the reservation with its own key alone.
                        let kind = self.resv_type();
                        self.send(host, Msg::Reserve { kind, not_live: 0 });
                    }
                }
            }
            Reply::Ok(Msg::Leave { .. }) => {
                self.hosts[host].joined = false;
                self.send(host, Msg::ReadKeys { why: Read::Leave });
            }
            Reply::Ok(Msg::Renew {
                generation,
                sent,
                sent_local,
            }) => {
                let now = self.now;
                let now_local = self.local_now(host);
                let h = &mut self.hosts[host];
                h.renews_in_flight = h.renews_in_flight.saturating_sub(1);
                if generation == h.generation {
                    if !h.member {
                        h.member_at_local = now_local;
                    }
                    h.member = true;
                    h.stills.push_back((
                        Still {
                            end: now,
                            ms: now.saturating_sub(h.renewed_sent),
                        },
                        Still {
                            end: now_local,
                            ms: now_local.saturating_sub(h.renewed_sent_local),
                        },
                    ));
                    let since = h.key_seen_at.saturating_sub(PR_LAG_MS);
                    let since_local = h.key_seen_at_local.saturating_sub(PR_LAG_MS);
                    while h
                        .stills
                        .front()
                        .is_some_and(|(t, o)| t.end < since && o.end < since_local)
                    {
                        h.stills.pop_front();
                    }
                    h.renewed_sent = h.renewed_sent.max(sent);
                    h.renewed_sent_local = h.renewed_sent_local.max(sent_local);
                }
            }
            Reply::Ok(Msg::Write { .. }) => {
                let h = &mut self.hosts[host];
                h.writes_in_flight = h.writes_in_flight.saturating_sub(1);
            }
            Reply::Ok(Msg::Preempt { victim, abort, .. }) => {
                if let Some(f) = self.hosts[host]
                    .fencing
                    .as_mut()
                    .filter(|f| f.victim == victim)
                {
                    f.aborted = abort;
                    self.stats.aborts += u64::from(abort);
                    self.send(host, Msg::ReadKeys { why: Read::Confirm });
                }
            }
            Reply::Conflict(Msg::Preempt { victim, .. }) => {
                if self.has_bug(FenceBug::PreemptConflictMeansFenced) {
                    self.fenced(host, "PREEMPT refused");
                } else if self.hosts[host].fencing.is_some_and(|f| f.victim == victim) {
                    // Ours is gone, or the victim's: the keys tell which.
                    self.log(|| {
                        format!("host{host} PREEMPT of 0x{victim:x} refused: reading the keys")
                    });
                    self.send(host, Msg::ReadKeys { why: Read::Confirm });
                }
            }
            Reply::Conflict(Msg::Reserve { .. }) => {} // one stands, or we are not registered
            Reply::Conflict(Msg::Renew { generation, .. })
                if generation != self.hosts[host].generation =>
            {
                // A renewal of a join that failed since.
                let h = &mut self.hosts[host];
                h.renews_in_flight = h.renews_in_flight.saturating_sub(1);
            }
            Reply::Conflict(_) if !self.hosts[host].member => {
                self.join_failed(host, "first renewal refused");
            }
            Reply::Conflict(_) if self.may_be_lost_by_target(host, true) => {
                // Only under the planted bug `key-lost-at-join-reregisters` (with a
                // reservation standing the rule is otherwise a fence): a refused write
                // leaves the decision to the next pass, as that rule would have the
                // daemon's refused renewal do.
                if !self.hosts[host].reading {
                    self.hosts[host].reading = true;
                    self.send(host, Msg::ReadKeys { why: Read::Pass });
                }
            }
            Reply::Conflict(_) => {
                // A write refused: a reservation stands and our key is gone.
                self.fenced(host, "write refused");
            }
            Reply::Keys(view) => self.keys_seen(host, view),
            Reply::Took(epoch) => {
                self.stats.takes += 1;
                let hold = self.rng.range(2_000, 40_000);
                let h = &mut self.hosts[host];
                h.taking = false;
                h.holding = Some(epoch);
                h.hold_until = self.now + hold;
                self.log(|| format!("host{host} TOOK the lease, version {epoch}"));
            }
            Reply::Lost => self.hosts[host].taking = false,
            Reply::Ok(_) => {}
        }
    }

    /// A clean leave's key read: our key is unregistered, unless it holds the WE-RO
    /// reservation, or is the last one while some host may still write without its key
    /// (a member record whose generation's key is gone: a fenced host not yet back), for
    /// the reservation would go with it.
    fn leave_keys_seen(&mut self, host: usize, view: View) {
        let last = view
            .keys
            .iter()
            .enumerate()
            .all(|(x, &k)| x == host || k == 0);
        let keyless_writer = self
            .target
            .member_gen
            .iter()
            .any(|(&x, &g)| x != host && view.keys[x] != key_of(x, g));
        self.hosts[host].leaving = false;
        let holds = view.resv_ours && !self.has_bug(FenceBug::HolderUnregistersAtLeave);
        if holds {
            // Counted at the target when the key goes (the planted bug's leave).
            self.stats.holder_leaves += 1;
        }
        if holds || (last && keyless_writer) {
            self.stats.kept_keys += 1;
            self.log(|| {
                format!("host{host} LEFT, keeping its key (it holds the reservation, or it is the last while a fenced host may write)")
            });
            self.hosts[host].rejoin_at = Some(self.now + self.rng.range(3_000, 30_000));
        } else {
            self.send(host, Msg::Register { key: 0 });
        }
    }

    /// A key read's answer: a pass, or a fence's read-back.
    fn keys_seen(&mut self, host: usize, view: View) {
        match view.why {
            Read::Pass => self.hosts[host].reading = false,
            Read::Leave => return self.leave_keys_seen(host, view),
            Read::Confirm => {}
        }
        let h = &self.hosts[host];
        if !h.joined || h.leaving {
            return;
        }
        let key = h.key;
        if view.keys[host] != key && !h.member {
            self.join_failed(host, "key gone");
            return;
        }
        if view.keys[host] != key {
            self.hosts[host].fencing = None;
            if self.may_be_lost_by_target(host, view.resv) {
                // The target lost its state: nobody preempted us. Whatever we saw
                // registered before tells nothing any more: a key missing now may only
                // be waiting to be registered again.
                let h = &mut self.hosts[host];
                h.known.clear();
                if !h.reregistering {
                    h.reregistering = true;
                    self.stats.reregistrations += 1;
                    self.log(|| {
                        format!("host{host} key 0x{key:x} lost by the target: registering it again")
                    });
                    self.send(host, Msg::Register { key });
                }
            } else {
                self.fenced(host, "own key gone");
            }
            return;
        }
        let now_local = self.local_now(host);
        let h = &mut self.hosts[host];
        h.reregistering = false;
        h.key_seen_at = self.now;
        h.key_seen_at_local = now_local;
        h.known
            .extend(view.keys.iter().copied().filter(|&k| k != 0));
        if view.why == Read::Confirm {
            if let Some(f) = self.hosts[host].fencing.take() {
                if !view.has(f.victim) && view.resv && self.no_foreign_key(&view) {
                    self.log(|| format!("host{host} fence of 0x{:x} confirmed", f.victim));
                    let found_gone_taken_for_ours =
                        self.has_bug(FenceBug::FoundGoneSkipsDrain) && self.target_kind.aborts();
                    if f.aborted || found_gone_taken_for_ours {
                        self.take(host, f.expect);
                    } else {
                        self.take_after_drain(host, f.expect);
                    }
                } else {
                    self.log(|| format!("host{host} fence of 0x{:x} NOT confirmed", f.victim));
                }
            }
            return;
        }
        if !self.hosts[host].member {
            return; // the join is not complete: nothing is decided
        }
        let old_rules = self.has_bug(FenceBug::EmptyTargetMeansFenced);
        if !view.resv && !old_rules {
            let now = self.now;
            let all_keyed =
                (0..self.hosts.len()).all(|x| !self.target.live(x, now) || view.keys[x] != 0);
            if all_keyed {
                let kind = self.resv_type();
                let not_live = (0..self.hosts.len())
                    .filter(|&x| !self.target.live(x, now))
                    .fold(0u16, |m, x| m | 1 << x);
                self.send(host, Msg::Reserve { kind, not_live });
            }
        }
        let h = &self.hosts[host];
        if h.holding.is_some() || h.fencing.is_some() || h.taking {
            return;
        }
        let epoch = self.target.epoch;
        let Some((x, g)) = self.target.holder else {
            self.take(host, epoch);
            return;
        };
        if x == host && g == self.hosts[host].generation {
            return; // our own release is on its way
        }
        if self.target.member_gen.get(&x).is_some_and(|&m| m > g) {
            // The holder's host renews with a newer generation: that lease is dead.
            self.take(host, epoch);
            return;
        }
        let last = self.target.last_renew_ms.get(&x).copied().unwrap_or(0);
        if self.now < last + FAIL_MS {
            return;
        }
        let victim = key_of(x, g);
        if view.has(victim) {
            if view.resv {
                self.preempt(host, x, victim, epoch);
            } else if old_rules {
                let kind = self.resv_type();
                self.send(host, Msg::Reserve { kind, not_live: 0 });
                self.preempt(host, x, victim, epoch);
            }
        } else if view.resv
            && self.hosts[host].known.contains(&victim)
            && self.no_foreign_key(&view)
        {
            // Seen registered before, gone now while a reservation stands.
            self.log(|| format!("host{host} key 0x{victim:x} of host{x} already gone"));
            if self.has_bug(FenceBug::FoundGoneSkipsDrain) && self.target_kind.aborts() {
                self.take(host, epoch);
            } else {
                self.take_after_drain(host, epoch);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn add(total: &mut FenceStats, s: &FenceStats) {
        total.takes += s.takes;
        total.fences += s.fences;
        total.fenced_resets += s.fenced_resets;
        total.false_fences += s.false_fences;
        total.double_preempts += s.double_preempts;
        total.holder_leaves += s.holder_leaves;
        total.target_restarts += s.target_restarts;
        total.reregistrations += s.reregistrations;
        total.failed_joins += s.failed_joins;
        total.kept_keys += s.kept_keys;
        total.late_landings += s.late_landings;
    }

    #[test]
    fn clean_runs_have_no_violation_and_meet_every_situation() {
        let mut total = FenceStats::default();
        for seed in 1..=60 {
            let r = run_fence_seed(seed, 4, 600, None, false);
            assert!(r.violations.is_empty(), "seed {seed}: {:?}", r.violations);
            assert!(r.stats.takes > 0, "seed {seed}: nothing taken");
            add(&mut total, &r.stats);
        }
        assert!(total.fences > 0, "no run fenced a holder: {total:?}");
        assert!(total.fenced_resets > 0, "nobody was fenced: {total:?}");
        assert!(
            total.double_preempts > 0,
            "no preempt met another's: {total:?}"
        );
        assert!(
            total.holder_leaves > 0,
            "the reservation's holder never left: {total:?}"
        );
        assert!(
            total.target_restarts > 0,
            "the target never restarted: {total:?}"
        );
        assert!(
            total.reregistrations > 0,
            "no key registered again: {total:?}"
        );
        assert!(
            total.late_landings > 0,
            "no write landed after its sender's key was preempted: {total:?}"
        );
        assert_eq!(total.false_fences, 0);
    }

    #[test]
    fn clean_runs_with_two_and_eight_hosts_have_no_violation() {
        let mut total = FenceStats::default();
        for (hosts, seed) in [2, 8]
            .into_iter()
            .flat_map(|h| (1..=30).map(move |s| (h, s)))
        {
            let r = run_fence_seed(seed, hosts, 600, None, false);
            assert!(
                r.violations.is_empty(),
                "{hosts} hosts, seed {seed}: {:?}",
                r.violations
            );
            add(&mut total, &r.stats);
        }
        // With two hosts the survivor is often the last registrant when it leaves.
        assert!(total.kept_keys > 0, "no leave kept the last key: {total:?}");
    }

    /// The first seed up to `seeds` where `bug` gives a violation that starts with
    /// `prefix`.
    fn first_caught(bug: FenceBug, seeds: u64, prefix: &str) -> Option<u64> {
        (1..=seeds).find(|&seed| {
            run_fence_seed(seed, 4, 600, Some(bug), false)
                .violations
                .iter()
                .any(|v| v.starts_with(prefix))
        })
    }

    #[test]
    fn taking_before_the_preempt_is_confirmed_is_caught() {
        let seed = first_caught(FenceBug::TakeBeforePreemptConfirmed, 600, "overlap:");
        assert!(seed.is_some());
    }

    #[test]
    fn a_preempt_conflict_taken_for_a_fence_is_caught() {
        let seed = first_caught(FenceBug::PreemptConflictMeansFenced, 60, "false fence:");
        assert!(seed.is_some());
    }

    #[test]
    fn a_holder_unregistering_at_its_leave_is_caught() {
        // The window is one pass long (the next pass reserves again): rarer.
        let seed = first_caught(FenceBug::HolderUnregistersAtLeave, 600, "overlap:");
        assert!(seed.is_some());
    }

    #[test]
    fn a_take_without_the_drain_is_caught() {
        let seed = first_caught(FenceBug::TakeWithoutDrain, 600, "overlap:");
        assert!(seed.is_some());
    }

    #[test]
    fn an_empty_target_taken_for_a_fence_is_caught() {
        let seed = first_caught(FenceBug::EmptyTargetMeansFenced, 60, "false fence:");
        assert!(seed.is_some());
    }

    #[test]
    fn a_key_lost_under_a_reservation_registered_again_is_caught() {
        // A host frozen (its clock stopped) after its join, preempted meanwhile, finds
        // its stillness short when it resumes.
        let seed = first_caught(FenceBug::KeyLostAtJoinReregisters, 600, "overlap:");
        assert!(seed.is_some());
    }

    /// A host that joined while the target restarted, reserved out by a peer that did
    /// not see it live yet, stops as fenced: counted as a join lockout, not a false
    /// fence (seed found by a 200,000-seed run with 2 hosts).
    #[test]
    fn a_join_lockout_is_counted_not_taken_for_a_false_fence() {
        let r = run_fence_seed(1_011_058, 2, 600, None, false);
        assert!(r.violations.is_empty(), "{:?}", r.violations);
        assert_eq!(r.stats.join_lockouts, 1, "{:?}", r.stats);
        assert!(r.stats.fenced_resets >= r.stats.join_lockouts);
    }

    #[test]
    fn on_a_target_that_aborts_clean_runs_have_no_violation_and_take_after_the_abort() {
        let total = clean_runs_on(FenceTarget::PreemptAndAbort);
        assert!(
            total.double_preempts > 0,
            "no preempt met another's: {total:?}"
        );
    }

    #[test]
    fn a_key_found_gone_taken_without_the_drain_is_caught_on_a_target_that_aborts() {
        let bug = FenceBug::FoundGoneSkipsDrain;
        assert!(first_overlap_on(FenceTarget::PreemptAndAbort, bug, 3_000).is_some());
    }

    /// 60 clean seeds with 4 hosts on `target`: no violation, fences by PREEMPT AND ABORT,
    /// writes landing after their preempt; the summed stats.
    fn clean_runs_on(target: FenceTarget) -> FenceStats {
        let mut total = FenceStats::default();
        for seed in 1..=60 {
            let r = run_fence_seed_on(target, seed, 4, 600, None, false);
            assert!(r.violations.is_empty(), "seed {seed}: {:?}", r.violations);
            add(&mut total, &r.stats);
            total.aborts += r.stats.aborts;
        }
        assert!(total.aborts > 0, "no PREEMPT AND ABORT answered: {total:?}");
        assert!(
            total.late_landings > 0,
            "no accepted write landed after its preempt: {total:?}"
        );
        assert_eq!(total.false_fences, 0);
        total
    }

    /// The first seed up to `seeds` where `bug` on `target` gives an overlap.
    fn first_overlap_on(target: FenceTarget, bug: FenceBug, seeds: u64) -> Option<u64> {
        (1..=seeds).find(|&seed| {
            run_fence_seed_on(target, seed, 4, 600, Some(bug), false)
                .violations
                .iter()
                .any(|v| v.starts_with("overlap:"))
        })
    }

    /// A target of `kind` where `hosts` hosts registered generation 1's keys (on
    /// multipath `foreign`'s path b holds another scheme's key) and host 0 holds the WE-RO
    /// reservation.
    fn reserved_target(kind: FenceTarget, hosts: usize, foreign: Option<usize>) -> Model {
        let mut m = target_with(hosts);
        m.target_kind = kind;
        m.foreign_host = foreign;
        for h in 0..hosts {
            let register = Msg::Register { key: key_of(h, 1) };
            assert_eq!(run(&mut m, h, register), Reply::Ok(register));
        }
        let reserve = Msg::Reserve {
            kind: ResvType::WeRo,
            not_live: 0,
        };
        assert_eq!(run(&mut m, 0, reserve), Reply::Ok(reserve));
        m
    }

    /// Host 0's PREEMPT AND ABORT of `victim_host`'s key reaches the target now; the key
    /// is gone from every nexus at once.
    fn abort_preempt(m: &mut Model, victim_host: usize) {
        let victim = key_of(victim_host, 1);
        arrive_now(
            m,
            0,
            Msg::Preempt {
                victim,
                kind: ResvType::WeRo,
                abort: true,
            },
        );
        assert!(!m.target.keys.values().any(|&k| k == victim));
    }

    /// The answers queued for host `to`, with their times.
    fn queued_answers(m: &Model, to: usize) -> Vec<(u64, Reply)> {
        m.queue
            .iter()
            .filter_map(|Reverse((t, _, i))| match m.items[*i] {
                Item::Back { host, reply, .. } if host == to => Some((*t, reply)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn preempt_and_abort_is_answered_once_the_victims_accepted_writes_landed() {
        let mut m = reserved_target(FenceTarget::PreemptAndAbort, 2, None);
        // Host 1's write is accepted now and lands later.
        let write = Msg::Write {
            epoch: 1,
            via_b: false,
        };
        arrive_now(&mut m, 1, write);
        let lands_at = m.target.accepted_land_until[&1];
        abort_preempt(&mut m, 1);
        let answered_at = queued_answers(&m, 0)
            .into_iter()
            .filter(|(_, r)| matches!(r, Reply::Ok(Msg::Preempt { .. })))
            .map(|(t, _)| t)
            .max()
            .expect("an answer to the preempt");
        assert!(
            answered_at > lands_at,
            "answered at {answered_at}, the write lands at {lands_at}"
        );
    }

    #[test]
    fn on_multipath_clean_runs_have_no_violation_and_fence_through_both_nexuses() {
        clean_runs_on(FenceTarget::Multipath);
    }

    #[test]
    fn a_fence_confirmed_beside_a_key_of_another_scheme_is_caught_on_multipath() {
        let bug = FenceBug::ForeignKeysIgnored;
        assert!(first_overlap_on(FenceTarget::Multipath, bug, 2_000).is_some());
    }

    #[test]
    fn a_multipath_register_and_preempt_cover_both_nexuses_and_leave_a_foreign_key() {
        let mut m = reserved_target(FenceTarget::Multipath, 3, Some(2));
        assert_eq!(
            m.target.keys[&path_b(1)],
            key_of(1, 1),
            "path b registered with a"
        );
        assert_eq!(
            m.target.keys[&path_b(2)],
            foreign_key_of(2),
            "another scheme's key"
        );
        abort_preempt(&mut m, 1);
        abort_preempt(&mut m, 2);
        assert_eq!(
            m.target.keys[&path_b(2)],
            foreign_key_of(2),
            "no preempt of ours removes it"
        );
        // Host 1's writes are refused down both paths; host 2's path b still writes.
        for (h, via_b, refused) in [
            (1, false, true),
            (1, true, true),
            (2, false, true),
            (2, true, false),
        ] {
            arrive_now(&mut m, h, Msg::Write { epoch: 1, via_b });
            let conflict = queued_answers(&m, h).iter().any(
                |(_, r)| matches!(r, Reply::Conflict(Msg::Write { via_b: b, .. }) if *b == via_b),
            );
            assert_eq!(conflict, refused, "host{h} via_b={via_b}");
        }
        let view = match run(&mut m, 0, Msg::ReadKeys { why: Read::Confirm }) {
            Reply::Keys(v) => v,
            other => panic!("{other:?}"),
        };
        assert!(view.has_foreign() && !m.no_foreign_key(&view));
    }

    #[test]
    fn every_planted_bug_has_its_name() {
        for (name, bug) in FENCE_BUGS {
            assert_eq!(parse_fence_bug(name), Some(bug));
        }
        for (name, bug) in [
            (
                "take-before-preempt-confirmed",
                FenceBug::TakeBeforePreemptConfirmed,
            ),
            (
                "preempt-conflict-means-fenced",
                FenceBug::PreemptConflictMeansFenced,
            ),
            (
                "holder-unregisters-at-leave",
                FenceBug::HolderUnregistersAtLeave,
            ),
            (
                "empty-target-means-fenced",
                FenceBug::EmptyTargetMeansFenced,
            ),
            ("take-without-drain", FenceBug::TakeWithoutDrain),
            (
                "key-lost-at-join-reregisters",
                FenceBug::KeyLostAtJoinReregisters,
            ),
            ("found-gone-skips-drain", FenceBug::FoundGoneSkipsDrain),
            ("foreign-keys-ignored", FenceBug::ForeignKeysIgnored),
        ] {
            assert_eq!(parse_fence_bug(name), Some(bug), "{name}");
        }
        assert_eq!(parse_fence_bug("nope"), None);
        assert_eq!(parse_fence_bug("skip-phase2"), None);
    }

    /// Runs `msg` from `host` at the target now; its answer.
    /// Runs `msg` from `host` at the target now, leaving what it schedules queued.
    fn arrive_now(m: &mut Model, host: usize, msg: Msg) {
        let session = m.target.session[&host];
        m.arrive(host, session, msg);
    }

    fn run(m: &mut Model, host: usize, msg: Msg) -> Reply {
        arrive_now(m, host, msg);
        if let Some(&Item::Land { host, inc, epoch }) = m.items.last() {
            m.items.pop();
            m.land(host, inc, epoch);
        }
        let Some(Item::Back { reply, .. }) = m.items.pop() else {
            panic!("no answer to {msg:?}");
        };
        reply
    }

    fn target_with(hosts: usize) -> Model {
        let mut m = Model::new(1, hosts, None, false);
        for h in 0..hosts {
            m.target.session.insert(h, 1);
        }
        m
    }

    #[test]
    fn the_target_keeps_the_rules_of_spc() {
        let (k0, k1, k2) = (key_of(0, 1), key_of(1, 1), key_of(2, 1));
        let write = Msg::Write {
            epoch: 1,
            via_b: false,
        };
        let wear = ResvType::WeAr;
        let mut m = target_with(3);
        // No reservation: every write lands, registered or not.
        assert_eq!(run(&mut m, 2, write), Reply::Ok(write));
        for (h, k) in [(0, k0), (1, k1), (2, k2)] {
            run(&mut m, h, Msg::Register { key: k });
        }
        let reserve = Msg::Reserve {
            kind: wear,
            not_live: 0,
        };
        assert_eq!(run(&mut m, 0, reserve), Reply::Ok(reserve));
        // Two survivors preempt the same key: the slower meets a conflict.
        let preempt = Msg::Preempt {
            victim: k2,
            kind: wear,
            abort: false,
        };
        assert_eq!(run(&mut m, 0, preempt), Reply::Ok(preempt));
        assert_eq!(run(&mut m, 1, preempt), Reply::Conflict(preempt));
        assert_eq!(m.stats.double_preempts, 1);
        assert_eq!(run(&mut m, 2, write), Reply::Conflict(write));
        // WE-AR stands while a registrant is left, whoever made it.
        run(&mut m, 0, Msg::Register { key: 0 });
        assert_eq!(m.stats.holder_leaves, 1);
        assert!(m.target.resv.is_some());
        assert_eq!(run(&mut m, 2, write), Reply::Conflict(write));
        run(&mut m, 1, Msg::Register { key: 0 });
        assert!(m.target.resv.is_none());
        assert_eq!(run(&mut m, 2, write), Reply::Ok(write));

        // WE-RO goes with the key of the nexus holding it.
        let wero = ResvType::WeRo;
        let mut m = target_with(3);
        for (h, k) in [(0, k0), (1, k1)] {
            run(&mut m, h, Msg::Register { key: k });
        }
        let reserve = Msg::Reserve {
            kind: wero,
            not_live: 0,
        };
        assert_eq!(run(&mut m, 0, reserve), Reply::Ok(reserve));
        assert_eq!(run(&mut m, 1, reserve), Reply::Conflict(reserve));
        assert_eq!(run(&mut m, 2, write), Reply::Conflict(write));
        run(&mut m, 0, Msg::Register { key: 0 });
        assert!(m.target.resv.is_none());
        assert_eq!(run(&mut m, 2, write), Reply::Ok(write));
        // A preempt of the holder's key passes the reservation to the preempting nexus.
        run(&mut m, 0, Msg::Register { key: k0 });
        run(&mut m, 0, reserve);
        let preempt = Msg::Preempt {
            victim: k0,
            kind: wero,
            abort: false,
        };
        assert_eq!(run(&mut m, 1, preempt), Reply::Ok(preempt));
        assert_eq!(
            m.target.resv,
            Some(Resv {
                kind: wero,
                holder: 1,
                not_live: 0,
            })
        );
        // An unregistered sender can neither preempt nor reserve.
        let preempt = Msg::Preempt {
            victim: k1,
            kind: wero,
            abort: false,
        };
        assert_eq!(run(&mut m, 2, preempt), Reply::Conflict(preempt));
        assert_eq!(run(&mut m, 2, reserve), Reply::Conflict(reserve));

        // A restart waits while a preempted host keeps its session (host 0 here)...
        m.target_restart();
        assert_eq!(m.stats.target_restarts, 0);
        // ...and loses every key and the reservation.
        m.target.session.insert(0, 2);
        m.target_restart();
        assert!(m.target.keys.is_empty() && m.target.resv.is_none());
        assert_eq!(m.stats.target_restarts, 1);
    }

    #[test]
    fn a_seed_replays_exactly() {
        let a = run_fence_seed(9, 4, 300, None, true);
        let b = run_fence_seed(9, 4, 300, None, true);
        assert_eq!(a.trace, b.trace);
        assert!(!a.trace.is_empty());
    }
}
