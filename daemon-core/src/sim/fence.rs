//! Storage fencing in the whole-daemon simulator: a model of the lockspace device's
//! SCSI-3 persistent reservations ([`PrTarget`]), the simulated disk as such a target
//! serves it ([`FencedDisk`]), and the daemon's fence executor over the model — the
//! join's registration, the leave's unregistration, and the fence thread's passes, which
//! step the core as `daemon/src/lockspace.rs` does: `FenceLook`, then for each action the
//! core asks for, in the order its steps give them, the PR commands and their answer
//! (`FenceKeysRead`, `PeerFenceDone`). The decisions are the core's (`crate::fencing`);
//! the rules this executor follows are the daemon's (`daemon/src/fence.rs`), with the
//! core's own pure functions (`device_plan`, `device_confirms`, `preempt_conflict`,
//! `join_must_wait`, `join_old_key`).
//!
//! The target: one device, one I_T nexus per host. REGISTER AND IGNORE EXISTING KEY
//! replaces the host's key (0 removes it); a plain REGISTER names the key it replaces
//! and is refused (RESERVATION CONFLICT) when another stands. The reservation is Write
//! Exclusive – Registrants Only, held by the nexus that made it, gone when that nexus
//! unregisters. PREEMPT from a registered nexus removes every registration of the victim
//! key (refused when none holds it) and passes the reservation to the preempter when the
//! victim held it. Reads are never refused. Not modelled: target restarts, a second path,
//! keys of another scheme, PREEMPT AND ABORT (every preempt waits the drain). A host's
//! PR command fails while its path to the storage is broken (a renewal fault).
//!
//! Invariants (what the checker's fencing checks rest on):
//! - a write from a host without a key is refused while a reservation stands (checked when
//!   the write is issued); a write issued earlier lands at most [`LANDING_MAX_MS`] later,
//!   and a preempt counts as confirmed only after [`DRAIN_MS`] ≥ that, so once a peer is
//!   confirmed fenced none of its writes lands any more;
//! - the checker hears of every change of the target's state ([`Sim::pr_apply`]): which
//!   hosts can no longer write, and which can again;
//! - every change of a delta record on the disk is noted when its write lands
//!   ([`Sim::note_landing`]), so that a preempt the core asks for can be checked against
//!   how long the victim's record really stood still ([`Sim::check_preempt_stillness`]).

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::future::Future;
use std::rc::Rc;

use disk_format::LeaderRecord;
use lease_core::io::{Clock, Disk, IoError};
use lease_core::sim::world::{SimClock, SimDisk};
use lease_core::timeouts;

use super::{ShellPlantedBug, Sim, WATCHDOG_FIRE_S};
use crate::fencing::{
    device_confirms, device_plan, join_must_wait, join_old_key, preempt_conflict, DevicePlan,
    FenceAction, FenceKey, FenceVerdict, KeysRead, PeerFenceOutcome, PreemptConflict,
    FRESH_READ_IO_TIMEOUTS, PREEMPT_FLOOR_IO_TIMEOUTS,
};
use crate::io::{Effect, Input};

/// The longest a write of the simulated disk takes from its issue to its landing
/// (lease-core's `SimDisk`: latencies up to 6 s; a write that timed out lands within its
/// timeout, which is shorter than its latency).
pub const LANDING_MAX_MS: u64 = 6_000;

/// The daemon's `fence_drain_ms` in the simulation: how long a preempt waits before its
/// read-back, so that the victim's writes the target accepted before it have landed.
pub const DRAIN_MS: u64 = LANDING_MAX_MS + 1;

/// What the daemon's add answers when fencing cannot be set up (`FENCE_JOIN_RV`,
/// -EOPNOTSUPP).
pub(super) const FENCE_JOIN_RV: i32 = -95;

/// How many times a join decides its registration again after its plain REGISTER was
/// refused (the daemon's `JOIN_REGISTER_TRIES`).
const JOIN_REGISTER_TRIES: usize = 4;

/// The key of `host_id` at `generation`, in the model's own format (the daemon's is
/// lvmlockd's); [`key_owner`] reads it back.
pub fn pr_key(host_id: u64, generation: u64) -> u64 {
    (generation << 16) | (host_id & 0xffff)
}

/// The host_id and generation a key of [`pr_key`]'s format names.
pub fn key_owner(raw: u64) -> (u64, u64) {
    (raw & 0xffff, raw >> 16)
}

/// How many changes of each delta record [`RecordChanges`] keeps.
const CHANGES_KEPT: usize = 32;

/// One host_id's delta record as landed writes changed it: the record (owner,
/// generation, timestamp) and when it changed (global ms), the latest [`CHANGES_KEPT`].
#[derive(Debug, Default)]
pub struct RecordChanges {
    record: Option<(u64, u64, u64)>,
    at_ms: VecDeque<u64>,
}

/// A PR command the target refused with RESERVATION CONFLICT.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conflict;

/// The lockspace device's persistent-reservation state (see the module header).
#[derive(Debug, Default)]
pub struct PrTarget {
    /// Each host's registered key, by host index.
    keys: BTreeMap<usize, u64>,
    /// The host whose nexus holds the reservation.
    holder: Option<usize>,
}

impl PrTarget {
    /// The registered keys, as the daemon hands a key list to the core.
    pub fn key_list(&self) -> Vec<FenceKey> {
        self.keys
            .values()
            .map(|&raw| FenceKey {
                raw,
                owner: Some(key_owner(raw)),
            })
            .collect()
    }

    pub fn reservation(&self) -> bool {
        self.holder.is_some()
    }

    pub fn key_of(&self, h: usize) -> Option<u64> {
        self.keys.get(&h).copied()
    }

    fn set_key(&mut self, h: usize, key: u64) {
        if key != 0 {
            self.keys.insert(h, key);
            return;
        }
        self.keys.remove(&h);
        if self.holder == Some(h) {
            self.holder = None;
        }
    }

    /// A plain REGISTER of host `h`: `new` replaces `old` (0: none), which must be the
    /// key its nexus holds.
    pub fn register(&mut self, h: usize, old: u64, new: u64) -> Result<(), Conflict> {
        if self.key_of(h).unwrap_or(0) != old {
            return Err(Conflict);
        }
        self.set_key(h, new);
        Ok(())
    }

    /// REGISTER AND IGNORE EXISTING KEY of host `h` (key 0 unregisters).
    pub fn register_ignore_existing(&mut self, h: usize, key: u64) {
        self.set_key(h, key);
    }

    /// RESERVE by host `h` with `key`: refused unless `key` is its registration and no
    /// other nexus holds the reservation.
    pub fn reserve(&mut self, h: usize, key: u64) -> Result<(), Conflict> {
        if self.key_of(h) != Some(key) {
            return Err(Conflict);
        }
        match self.holder {
            None => self.holder = Some(h),
            Some(x) if x == h => {}
            Some(_) => return Err(Conflict),
        }
        Ok(())
    }

    /// RELEASE by host `h` with `key`: only the holder's releases the reservation.
    pub fn release(&mut self, h: usize, key: u64) {
        if self.holder == Some(h) && self.key_of(h) == Some(key) {
            self.holder = None;
        }
    }

    /// PREEMPT by host `h` (registered as `our_key`) of every registration of `victim`.
    pub fn preempt(&mut self, h: usize, our_key: u64, victim: u64) -> Result<(), Conflict> {
        let doomed: Vec<usize> = self
            .keys
            .iter()
            .filter(|(_, &k)| k == victim)
            .map(|(&x, _)| x)
            .collect();
        if self.key_of(h) != Some(our_key) || doomed.is_empty() {
            return Err(Conflict);
        }
        for x in doomed {
            self.keys.remove(&x);
            if self.holder == Some(x) {
                self.holder = Some(h);
            }
        }
        Ok(())
    }

    /// Whether the target takes a write from host `h` now.
    pub fn may_write(&self, h: usize) -> bool {
        self.holder.is_none() || self.keys.contains_key(&h)
    }

    /// The hosts (of `hosts`) whose writes the target refuses now.
    pub fn cut_off(&self, hosts: usize) -> BTreeSet<usize> {
        (0..hosts).filter(|&h| !self.may_write(h)).collect()
    }

    /// Whether a key of `host_id` at `generation` or older is registered.
    pub fn holds_generation(&self, host_id: u64, generation: u64) -> bool {
        self.keys.values().any(|&k| {
            let (id, g) = key_owner(k);
            id == host_id && g <= generation
        })
    }
}

/// The simulated disk as the PR target serves it to one host: reads as lease-core's
/// `SimDisk`; a write refused with RESERVATION CONFLICT (after a millisecond) while a
/// reservation stands and the host has no key.
#[derive(Clone)]
pub struct FencedDisk {
    pub inner: SimDisk,
    pub target: Rc<RefCell<PrTarget>>,
}

impl Disk for FencedDisk {
    type Buf = Vec<u8>;

    fn read(
        &self,
        offset: u64,
        len: usize,
        timeout_ms: u64,
    ) -> impl Future<Output = Result<Vec<u8>, IoError>> {
        self.inner.read(offset, len, timeout_ms)
    }

    fn write(
        &self,
        offset: u64,
        data: &[u8],
        timeout_ms: u64,
    ) -> impl Future<Output = Result<(), IoError>> {
        let allowed = self.target.borrow().may_write(self.inner.host);
        let inner = self.inner.clone();
        let data = data.to_vec();
        async move {
            if !allowed {
                let clock = SimClock {
                    world: inner.world.clone(),
                    host: inner.host,
                };
                clock.sleep_ms(1).await;
                return Err(IoError::ReservationConflict);
            }
            inner.write(offset, &data, timeout_ms).await
        }
    }
}

impl Sim {
    /// A write of `data` landed at `offset` now: a delta sector whose record changed is
    /// noted.
    pub(super) fn note_landing(&self, offset: u64, data: &[u8]) {
        let sector = self.geometry.sector_bytes();
        if offset >= self.geometry.align_bytes() || !offset.is_multiple_of(sector) {
            return;
        }
        let end = data.len().min(sector as usize);
        let record = LeaderRecord::decode(&data[..end])
            .ok()
            .map(|l| (l.owner_id, l.owner_generation, l.timestamp));
        let mut all = self.record_changes.borrow_mut();
        let changes = all.entry(offset / sector + 1).or_default();
        if record.is_some() && changes.record == record {
            return;
        }
        changes.record = record;
        changes.at_ms.push_back(self.now_ms());
        if changes.at_ms.len() > CHANGES_KEPT {
            changes.at_ms.pop_front();
        }
    }

    /// Host `h`'s core asked to preempt `host_id`: the victim's record must have stood
    /// still on the disk for the floor, 6·D (D the larger io_timeout of the two), over a
    /// span that ended within our reads' freshness (3·D of ours, a second of rounding,
    /// 0.1 s for the clock rates).
    /// The core measures the stillness between the completions of our own reads, which
    /// this disk serves at completion, so the record stood still at least that long —
    /// less up to a second when the measure was seeded from the monitor's whole seconds
    /// (at our key's registration), and 0.2% for the hosts' clock rates.
    fn check_preempt_stillness(&self, h: usize, host_id: u64) {
        let (ours, victim) = (
            u64::from(self.hosts[h].io_timeout),
            self.hosts
                .get(host_id as usize - 1)
                .map_or(1, |v| u64::from(v.io_timeout)),
        );
        let floor_ms = PREEMPT_FLOOR_IO_TIMEOUTS * ours.max(victim) * 1000;
        let need_ms = (floor_ms - 1000) * 998 / 1000;
        let now = self.now_ms();
        let fresh_from = now.saturating_sub((FRESH_READ_IO_TIMEOUTS * ours + 1) * 1000 + 100);
        let all = self.record_changes.borrow();
        let changes: Vec<u64> = all
            .get(&host_id)
            .map_or_else(Vec::new, |c| c.at_ms.iter().copied().collect());
        let starts = std::iter::once(0).chain(changes.iter().copied());
        let ends = changes.iter().copied().chain(std::iter::once(now));
        let still = starts
            .zip(ends)
            .filter(|&(_, end)| end >= fresh_from)
            .any(|(start, end)| end - start >= need_ms);
        if !still {
            self.checker.borrow_mut().violate(
                now,
                format!(
                    "host{h}: host_id {host_id} preempted, its record not still for \
                     {need_ms} ms on the disk (changes at {changes:?} ms)"
                ),
            );
        }
    }

    /// Changes the PR target and tells the checker which hosts it refuses writes from now.
    pub(super) fn pr_apply<T>(&self, change: impl FnOnce(&mut PrTarget) -> T) -> T {
        let out = change(&mut self.pr.borrow_mut());
        let cut_off = self.pr.borrow().cut_off(self.hosts.len());
        self.checker
            .borrow_mut()
            .storage_cut_off(self.now_ms(), cut_off);
        out
    }

    /// One PR command's round trip from host `h` (a few ms): false when its path to the
    /// storage is broken (a renewal fault), and the command failed.
    async fn pr_command(&self, h: usize) -> bool {
        let ms = self.world.range(1, 20);
        self.sleep(h, ms).await;
        self.now_ms() >= self.hosts[h].renew_fail_until.get()
    }

    /// READ KEYS and READ RESERVATION of host `h` (None: its path is broken).
    async fn pr_read(&self, h: usize) -> Option<(Vec<FenceKey>, bool)> {
        if !self.pr_command(h).await {
            return None;
        }
        let t = self.pr.borrow();
        Some((t.key_list(), t.reservation()))
    }

    /// The core's verdict of a fence step on host `h` (a pass's, or a renewal read's):
    /// logged and checked — a peer confirmed fenced has no key of that generation or older
    /// on the device while a reservation stands.
    pub(super) fn fence_verdict(&self, h: usize, verdict: FenceVerdict) {
        self.world
            .log(|| format!("host{h} fence verdict {verdict:?}"));
        if let FenceVerdict::PeerFenced {
            host_id,
            generation,
            ..
        } = verdict
        {
            self.stats.borrow_mut().fences += 1;
            let (keyed, reserved) = {
                let t = self.pr.borrow();
                (t.holds_generation(host_id, generation), t.reservation())
            };
            if keyed || !reserved {
                self.checker.borrow_mut().violate(
                    self.now_ms(),
                    format!(
                        "host{h}: host_id {host_id} generation {generation} marked fenced while \
                         the device shows its key ({keyed}) or no reservation ({})",
                        !reserved
                    ),
                );
            }
        }
    }
}

/// Before the join's delta acquire (`prev`: our host_id's record as read now): registers
/// our key for the generation the acquire will write, after waiting host_dead when the
/// core's rule says so ([`join_must_wait`]). On the device, the new key replaces the key
/// the list showed for our host_id with a plain REGISTER naming it (then naming none, then
/// ignoring it), decided again from a fresh list after each refusal. The key, or None:
/// the path broke, a stop cut the wait short, or every try was refused.
pub(super) async fn register_for_join(
    sim: &Rc<Sim>,
    h: usize,
    prev: &LeaderRecord,
    stop: &Cell<bool>,
) -> Option<u64> {
    let host_id = sim.hosts[h].host_id;
    let key = pr_key(host_id, prev.owner_generation + 1);
    let mut waited = false;
    for attempt in 0..JOIN_REGISTER_TRIES {
        let (listed, reservation) = sim.pr_read(h).await?;
        if !waited && join_must_wait(prev.timestamp, reservation, &listed, host_id) {
            wait_host_dead(sim, h, prev, stop).await?;
            waited = true;
            continue;
        }
        let old = match attempt {
            _ if waited => None,
            0 => Some(join_old_key(&listed, host_id)),
            1 => Some(0),
            _ => None,
        };
        if !sim.pr_command(h).await {
            return None;
        }
        let Some(old) = old else {
            sim.pr_apply(|t| t.register_ignore_existing(h, key));
            return Some(key);
        };
        if sim.pr_apply(|t| t.register(h, old, key)).is_ok() {
            return Some(key);
        }
        sim.world
            .log(|| format!("host{h} fence: our previous key changed under the join"));
        let (listed, _) = sim.pr_read(h).await?;
        if join_must_wait(prev.timestamp, true, &listed, host_id) {
            wait_host_dead(sim, h, prev, stop).await?;
            waited = true;
        }
    }
    None
}

/// The host_dead wait of a join whose previous generation was not released and has no
/// key while a reservation stands; None when a stop (removal, shutdown) cut it short.
async fn wait_host_dead(sim: &Sim, h: usize, prev: &LeaderRecord, stop: &Cell<bool>) -> Option<()> {
    let io = if prev.io_timeout != 0 {
        u64::from(prev.io_timeout)
    } else {
        u64::from(sim.hosts[h].io_timeout)
    };
    let wait_s = timeouts::host_dead_seconds(io, WATCHDOG_FIRE_S);
    sim.world
        .log(|| format!("host{h} fence: waiting host_dead ({wait_s} s) before registering"));
    wait_unless_stopped(sim, h, wait_s * 1000, stop).await
}

/// Sleeps `ms` in steps of a second unless `stop` is set (then None).
async fn wait_unless_stopped(sim: &Sim, h: usize, ms: u64, stop: &Cell<bool>) -> Option<()> {
    let mut left = ms;
    while left > 0 {
        if stop.get() {
            return None;
        }
        let now = left.min(1_000);
        sim.sleep(h, now).await;
        left -= now;
    }
    (!stop.get()).then_some(())
}

/// The daemon's `confirm_generation`: after the acquire, the key must name the
/// generation it wrote; if not, that generation's key is registered. The new key, if any.
pub(super) async fn confirm_generation(
    sim: &Rc<Sim>,
    h: usize,
    generation: u64,
    key: u64,
) -> Option<u64> {
    let wanted = pr_key(sim.hosts[h].host_id, generation);
    if wanted == key || !sim.pr_command(h).await {
        return None;
    }
    sim.pr_apply(|t| t.register_ignore_existing(h, wanted));
    Some(wanted)
}

/// Removes our key `key` from the device unless it holds the reservation (which would go
/// with it), then tells the core (`FenceUnregistered`), as the daemon's
/// `fence_unregister`.
pub(super) async fn unregister(sim: &Rc<Sim>, h: usize, id: u32, key: u64) {
    if key != 0 && sim.pr_command(h).await {
        let held = sim.pr.borrow().holder == Some(h);
        if !held {
            let _ = sim.pr_apply(|t| t.register(h, key, 0));
        }
    }
    sim.input(h, Input::FenceUnregistered { id });
}

/// Whether a clean leave keeps our key `key` (the daemon's `keep_key_at_leave`): this
/// host fenced a peer while joined, or our key is the last on the device while another
/// host's delta lease is not free.
pub(super) fn keep_key_at_leave(sim: &Sim, h: usize, id: u32, key: u64) -> bool {
    let core = sim.hosts[h].core.borrow();
    let Some(core) = core.as_ref() else {
        return true;
    };
    if core.space_fence(id).is_some_and(|f| f.fenced_a_peer) {
        return true;
    }
    let our_host_id = sim.hosts[h].host_id;
    let now_s = sim.world.local_now(h) / 1000;
    let others = core.space_monitor(id).is_some_and(|m| {
        m.hosts(now_s)
            .iter()
            .any(|(host_id, o, _)| *host_id != our_host_id && o.timestamp != 0)
    });
    let keys: Vec<u64> = sim.pr.borrow().key_list().iter().map(|k| k.raw).collect();
    others && keys == [key]
}

/// The daemon's `preempt_peer`: every key of `host_id` at `generation` or older preempted
/// with `our_key` ([`device_plan`]; a newer key means it joined again), the drain waited
/// (a stop cuts it short: `Failed`), then the read-back ([`device_confirms`]). A
/// refused PREEMPT is told apart by the key list read after it ([`preempt_conflict`]).
async fn preempt_peer(
    sim: &Rc<Sim>,
    h: usize,
    (host_id, generation, our_key): (u64, u64, u64),
    stop: &Cell<bool>,
) -> PeerFenceOutcome {
    let Some((keys, reservation)) = sim.pr_read(h).await else {
        return PeerFenceOutcome::Failed;
    };
    let doomed = match device_plan(&keys, host_id, generation) {
        DevicePlan::Rejoined => return PeerFenceOutcome::Rejoined,
        DevicePlan::Preempt(doomed) => doomed,
    };
    if !doomed.is_empty() && !reservation {
        return PeerFenceOutcome::NotConfirmed;
    }
    let victim = pr_key(host_id, generation);
    let mut preempted = false;
    for key in doomed {
        if !sim.pr_command(h).await {
            return PeerFenceOutcome::Failed;
        }
        if sim.pr_apply(|t| t.preempt(h, our_key, key)).is_err() {
            let Some((after, _)) = sim.pr_read(h).await else {
                return PeerFenceOutcome::Failed;
            };
            let raws: Vec<u64> = after.iter().map(|k| k.raw).collect();
            match preempt_conflict(&raws, false, our_key) {
                PreemptConflict::VictimAlreadyGone => continue,
                PreemptConflict::WeAreFenced => return PeerFenceOutcome::Refused,
                PreemptConflict::Unknown => return PeerFenceOutcome::NotConfirmed,
            }
        }
        preempted |= key == victim;
    }
    if wait_unless_stopped(sim, h, DRAIN_MS, stop).await.is_none() {
        return PeerFenceOutcome::Failed;
    }
    let Some((after, reservation)) = sim.pr_read(h).await else {
        return PeerFenceOutcome::Failed;
    };
    if device_confirms(&after, false, reservation, host_id) {
        PeerFenceOutcome::Confirmed { preempted }
    } else {
        PeerFenceOutcome::NotConfirmed
    }
}

/// Carries out one action of a pass on host `h`'s lockspace `id`: the input that answers
/// it (`FenceKeysRead`, `PeerFenceDone`), if it has one.
async fn run_fence_action(
    sim: &Rc<Sim>,
    h: usize,
    id: u32,
    action: FenceAction,
    stop: &Cell<bool>,
) -> Option<Input<(), super::SimHeld>> {
    if !matches!(action, FenceAction::ReadKeys) {
        sim.world.log(|| format!("host{h} fence: {action:?}"));
    }
    match action {
        FenceAction::ReadKeys => {
            let read = match sim.pr_read(h).await {
                Some((keys, reservation)) => KeysRead::Keys { keys, reservation },
                None => KeysRead::Failed,
            };
            let read_at_ms = sim.clock(h).now_ms();
            Some(Input::FenceKeysRead {
                id,
                read,
                read_at_ms,
            })
        }
        FenceAction::Preempt {
            host_id,
            generation,
            our_key,
        } => {
            let outcome = if sim.cfg.shell_bug == Some(ShellPlantedBug::TakeBeforeConfirm) {
                PeerFenceOutcome::Confirmed { preempted: true }
            } else {
                preempt_peer(sim, h, (host_id, generation, our_key), stop).await
            };
            sim.world.log(|| {
                format!("host{h} fence: preempt of host_id {host_id} gen {generation}: {outcome:?}")
            });
            Some(Input::PeerFenceDone {
                id,
                host_id,
                generation,
                outcome,
            })
        }
        FenceAction::Reserve { our_key } => {
            if sim.pr_command(h).await && !sim.pr.borrow().reservation() {
                let _ = sim.pr_apply(|t| t.reserve(h, our_key));
            }
            None
        }
        FenceAction::Release { our_key } => {
            if sim.pr_command(h).await {
                sim.pr_apply(|t| t.release(h, our_key));
            }
            None
        }
        FenceAction::Reregister { our_key } => {
            if sim.pr_command(h).await {
                sim.pr_apply(|t| t.register_ignore_existing(h, our_key));
            }
            None
        }
    }
}

/// The fence thread of host `h`'s lockspace `id`, as the daemon's: once a second, until
/// the lockspace is being released, gone or lost, a pass — the core's look, then the PR
/// commands it asks for, each answered in the order the steps give them (a stop of the
/// lockspace cuts a preempt's drain short). Finding ourselves fenced ends it.
pub(super) async fn fence_thread(sim: Rc<Sim>, h: usize, id: u32, stop: Rc<Cell<bool>>) {
    loop {
        if sim.fence_pass_over(h, id) {
            return;
        }
        let mut todo: VecDeque<Effect<super::SimHeld>> =
            sim.fence_step(h, Input::FenceLook { id }).into();
        let mut fenced_here = false;
        while let Some(effect) = todo.pop_front() {
            match effect {
                Effect::Fence { action, .. } => {
                    if let Some(input) = run_fence_action(&sim, h, id, action, &stop).await {
                        todo.extend(sim.fence_step(h, input));
                    }
                }
                Effect::FenceVerdict { verdict, .. } => {
                    fenced_here |= matches!(verdict, FenceVerdict::WeAreFenced(_));
                }
                other => panic!("host{h}: a fence step gave {other:?}"),
            }
        }
        if fenced_here {
            return;
        }
        sim.sleep(h, 1_000).await;
    }
}

impl Sim {
    /// One step of a fence pass on host `h`: its effects, for the thread to carry out in
    /// order; its verdicts and preempts checked now, against the target and the disk as
    /// the step found them (the core applied them in this step).
    fn fence_step(
        &self,
        h: usize,
        input: Input<(), super::SimHeld>,
    ) -> Vec<Effect<super::SimHeld>> {
        let fx = self.step_effects(h, input);
        for e in &fx {
            match e {
                Effect::FenceVerdict { verdict, .. } => self.fence_verdict(h, *verdict),
                Effect::Fence {
                    action: FenceAction::Preempt { host_id, .. },
                    ..
                } => self.check_preempt_stillness(h, *host_id),
                _ => {}
            }
        }
        fx
    }

    /// Whether host `h`'s fence thread of lockspace `id` ends: no daemon, or the
    /// lockspace is being released, gone or lost (the daemon's check at each pass).
    fn fence_pass_over(&self, h: usize, id: u32) -> bool {
        self.hosts[h].core.borrow().as_ref().is_none_or(|c| {
            c.space_st(id)
                .is_none_or(|st| st.releasing || st.gone || st.lease_lost())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_target_refuses_writes_of_unkeyed_hosts_only_while_a_reservation_stands() {
        let mut t = PrTarget::default();
        let (a, b) = (pr_key(1, 1), pr_key(2, 1));
        t.register_ignore_existing(0, a);
        assert!(t.may_write(1), "no reservation: every write lands");
        assert_eq!(t.reserve(1, b), Err(Conflict), "an unregistered nexus");
        t.register(1, 0, b).unwrap();
        t.reserve(0, a).unwrap();
        assert_eq!(t.reserve(1, b), Err(Conflict), "held by another nexus");
        assert!(t.may_write(0) && t.may_write(1) && !t.may_write(2));
        // B preempts A, which held the reservation: it passes to B.
        t.preempt(1, b, a).unwrap();
        assert_eq!(t.cut_off(3), BTreeSet::from([0, 2]));
        assert_eq!(t.preempt(1, b, a), Err(Conflict), "the victim key is gone");
        assert!(!t.holds_generation(1, 1) && t.reservation());
        // A plain REGISTER naming a key that is gone is refused.
        assert_eq!(t.register(0, a, pr_key(1, 2)), Err(Conflict));
        t.register(0, 0, pr_key(1, 2)).unwrap();
        assert!(t.holds_generation(1, 2) && t.may_write(0));
        // The holder unregistering ends the reservation.
        t.register(1, b, 0).unwrap();
        assert!(!t.reservation() && t.may_write(2));
        assert_eq!(key_owner(pr_key(7, 42)), (7, 42));
    }
}
