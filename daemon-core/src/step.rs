//! The core as one state machine: [`Core::step`] takes the time and one [`Input`] and
//! returns the [`Effect`]s the shell is to carry out, in order. It covers three paths of
//! the daemon: a lockspace's lease growing old and lost (the monitor's once-a-second tick
//! and the renewal outcomes that feed it); another host's request for a lease we hold,
//! once the shell has read its request record ([`Input::Examined`]: the holders' notice,
//! then their kill orders); and a client's requests — connect, register, add and remove
//! a lockspace, acquire (one or more leases, shared or exclusive), release, convert,
//! inquire — with the disk operations they need as effects whose completions come back
//! as inputs (`commands`). The daemon's shell lists its lockspaces here
//! ([`Core::add_space`]: the core keeps their statuses, renewal outcomes come as
//! inputs), drives the lost-lease path (the monitor's [`Input::Tick`]), the examine
//! path and every lease command through `step`, and carries out the effects in order,
//! with no lock held; the
//! simulator (`lockd-daemon-sim`, feature `sim`) drives the core through `step` alone
//! (issue 23, docs/architecture.md).
//!
//! Invariants:
//! - within one step's effects, every lease-loss notice comes before every kill order: a
//!   holder hears that its lease is going before anything is done to it; likewise a
//!   request's notice comes before the kill orders for that lease;
//! - a kill order names only a live client holding a token of a lockspace whose lease is
//!   lost or being removed, or (for a request) a client listed as a holder of the
//!   requested lease;
//! - a client is told its lease is released only after the disk release ended (its
//!   resource stays `busy`/`releasing` until then, so no local acquire slips in);
//! - a disk acquire that ends after its lockspace's lease was lost is released again and
//!   answered -ENOSPC: no client is given a lease it could not have been told about;
//! - every disk operation the core asks for is answered by exactly one [`Input::DiskDone`]
//!   (the core keeps it in `ops` until then);
//! - [`Core::check`] holds after every step (checked in debug builds; the cheap part,
//!   [`Core::check_cheap`], in every build).

use std::collections::{BTreeMap, HashMap, HashSet};

use disk_format::Name;
use lease_core::monitor::HostMonitor;
use lease_core::timeouts;

use crate::clients::LeaseHold;
use crate::fencing::{FenceSt, FenceVerdict};
use crate::io::{Effect, Input, LeaseTimes, OpId, StatusSummary};
use crate::kill::{examined_lease, plan_kills, KillOrder, SpaceKill};
use crate::pending::{AdminCmd, Cmd, OpFor, PendingRequest};
use crate::space_state::{Phase, SpaceSt};
use crate::tables::Tables;
use crate::watches::Watches;

/// One lockspace as the core keeps it: its id, name, status and io_timeout. A gone
/// lockspace (`st.gone`, in the daemon) keeps its entry for readers that still hold its
/// id, until [`Core::add_space`] prunes it ([`MAX_GONE_SPACES`]); only entries not gone
/// count as the lockspace of their name.
#[derive(Debug)]
pub struct CoreSpace {
    /// The shell's id for this lockspace (the daemon's `space_id`); the core's own
    /// ADD_LOCKSPACE numbers its lockspaces itself.
    pub id: u32,
    pub name: Name,
    pub st: SpaceSt,
    pub io_timeout_s: u64,
    /// Listed by the shell ([`Core::add_space`]), which joins, removes and retires it
    /// itself: the core's removal of lockspaces that can go (`finish_removals`) leaves
    /// it alone.
    pub listed_by_shell: bool,
    /// Where its delta leases are (ADD_LOCKSPACE's host_id and disk), for the admission
    /// of the next ([`Core::list_space`]); `None` for the core's own and in tests.
    pub place: Option<SpacePlace>,
    /// What our renewals observed of the other hosts' delta leases (lease-core's
    /// monitor: owner liveness for the ballots, GET_HOSTS, fencing's suspects); changed
    /// only by [`Input::HostsRead`] and by fencing's verdicts. A new listing starts with
    /// an empty one, the safe side: a ballot that has no observation of an owner waits
    /// host_dead from its own start, and no generation is marked fenced until a confirmed
    /// preempt ([`crate::fencing`]) in this lockspace's life.
    pub monitor: HostMonitor,
    /// Storage fencing's state, once the join registered our key
    /// ([`Input::FenceRegistered`]); `None` for a lockspace not fenced.
    pub fence: Option<FenceSt>,
    /// When we last asked for an examine of our leases because of a host's bit (by
    /// host_id, at most [`crate::events::MAX_EVENT_HOST_ID`]): at most once per
    /// `set_bitmap_seconds` per requesting host.
    pub last_examine: BTreeMap<u64, u64>,
}

/// Where a lockspace the shell lists keeps its delta leases: our host_id and the disk
/// area (path and offset) ADD_LOCKSPACE named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpacePlace {
    pub host_id: u64,
    pub path: String,
    pub offset: u64,
}

/// Why the core refused to list a lockspace the shell is adding (ADD_LOCKSPACE's
/// admission, [`Core::list_space`]); the shell maps each to sanlock's code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListRefused {
    /// A lockspace of that name is being removed (-EAGAIN: it may be added once gone).
    BeingRemoved,
    /// The same lockspace (name, host_id, disk) is being added (-EINPROGRESS).
    BeingAdded,
    /// The same lockspace is joined already (-EEXIST).
    Joined,
    /// A lockspace of that name is here with another host_id or disk (-EINVAL).
    OtherPlace,
    /// Another lockspace keeps its delta leases on that disk area (-EINVAL).
    DiskAreaTaken,
}

/// A bug planted on purpose, to prove that the whole-daemon simulator catches it. The
/// core consults it only with the `sim` feature (its `bug` field exists only then), so a
/// production build carries the name and none of the bugs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CorePlantedBug {
    /// A lost lockspace's kill orders come before the holders' loss notices.
    KillBeforeNotice,
    /// RELEASE is answered, and the resource freed in the table, before the disk release
    /// ends.
    ReleaseBeforeDisk,
    /// A disk acquire that ends after its lockspace's lease was lost is granted anyway.
    GrantInLostLockspace,
    /// A lost lockspace's kill pass also signals clients holding none of its leases.
    KillNonHolders,
    /// A request for one lease also kills the holders of the lockspace's other leases.
    ExamineKillsLockspace,
    /// A request's kill orders come before the holders' request notice.
    ExamineKillBeforeNotice,
    /// REM_LOCKSPACE kills the holders with no LockspaceRemoved notice first.
    RemovalWithoutNotice,
    /// Notices name the holders but go to none of their watch connections.
    NoticeMissesWatch,
    /// A REQUEST that found the lease's owner does not set the owner host's bit.
    RequestWithoutBit,
    /// Storage fencing preempts a peer standing still for 4·D already (the floor before
    /// issue 38's item 8) instead of [`crate::fencing::PREEMPT_FLOOR_IO_TIMEOUTS`]: a
    /// live peer whose renewals come 4–5.5·D apart gets fenced. The daemon's bed plants
    /// it too (`LOCKD_PLANTED_BUG=preempt-floor-4d`, `pr-delay-bursts-old-rule`).
    PreemptFloorFourIoTimeouts,
}

impl CorePlantedBug {
    /// Every planted bug with its command-line name.
    pub const ALL: [(&'static str, CorePlantedBug); 10] = [
        ("kill-before-notice", CorePlantedBug::KillBeforeNotice),
        ("release-before-disk", CorePlantedBug::ReleaseBeforeDisk),
        (
            "grant-in-lost-lockspace",
            CorePlantedBug::GrantInLostLockspace,
        ),
        ("kill-non-holders", CorePlantedBug::KillNonHolders),
        (
            "examine-kills-lockspace",
            CorePlantedBug::ExamineKillsLockspace,
        ),
        (
            "examine-kill-before-notice",
            CorePlantedBug::ExamineKillBeforeNotice,
        ),
        (
            "removal-without-notice",
            CorePlantedBug::RemovalWithoutNotice,
        ),
        ("notice-misses-watch", CorePlantedBug::NoticeMissesWatch),
        ("request-without-bit", CorePlantedBug::RequestWithoutBit),
        (
            "preempt-floor-4d",
            CorePlantedBug::PreemptFloorFourIoTimeouts,
        ),
    ];

    /// The bug named `name` on the command line.
    pub fn parse(name: &str) -> Option<CorePlantedBug> {
        Self::ALL.iter().find(|(n, _)| *n == name).map(|(_, b)| *b)
    }
}

impl CoreSpace {
    /// The lockspace as the expiry pass takes it.
    pub(crate) fn view(&mut self) -> SpaceView<'_> {
        SpaceView {
            name: self.name,
            st: &mut self.st,
            io_timeout_s: self.io_timeout_s,
        }
    }
}

/// Everything the core owns so far: the client/resource tables, the lockspaces, and the
/// requests and disk operations in progress.
#[derive(Debug)]
pub struct Core<S, H> {
    pub tables: Tables<S, H>,
    /// The lockspaces, in the order they were added (a tick visits them in this order).
    pub spaces: Vec<CoreSpace>,
    /// `kill_grace_seconds` of the configuration.
    pub kill_grace_s: u64,
    /// The command running for each client (at most one: `cmd_active`).
    pub(crate) cmds: HashMap<u32, Cmd>,
    /// Clients whose command the shell began ([`Input::Command`]): answered even when
    /// the client died meanwhile (the command may have come on another connection).
    pub(crate) begun: HashSet<u32>,
    /// Lockspace additions and removals waiting for their end, with who asked.
    pub(crate) admin: Vec<AdminCmd>,
    /// REQUESTs whose record write the shell runs ([`Effect::WriteRequest`]), by op.
    pub(crate) requests: HashMap<OpId, PendingRequest>,
    /// Disk operations asked for and not completed yet.
    pub(crate) ops: HashMap<OpId, OpFor>,
    pub(crate) next_op: OpId,
    /// The id of the next lockspace the core's own ADD_LOCKSPACE adds.
    pub(crate) next_space_id: u32,
    /// The summary the last [`Effect::Status`] gave (`None` before the first tick).
    pub(crate) last_status: Option<StatusSummary>,
    /// The lease-loss watches: which connection watches which process
    /// ([`crate::watches`]).
    pub watches: Watches,
    /// Steps since the last [`Core::check_cheap`] ([`CHEAP_CHECK_RESOURCES`]).
    steps_since_cheap_check: u64,
    /// The watchdog fire timeout the host monitors of the core's own lockspaces count
    /// host_dead with (the shell builds the monitors of those it lists itself).
    pub watchdog_fire_s: u64,
    #[cfg(feature = "sim")]
    pub bug: Option<CorePlantedBug>,
}

/// The resources a step's release-build check covers on average: with more in the
/// table, [`Core::check_cheap`] (a pass over all of them, 12-13 ns each) runs after
/// every k-th step only, k = resources / this, so a step pays about 3 µs for it
/// whatever the table's size, and a broken invariant is still found within k steps.
/// Debug builds and tests run the whole [`Core::check`] after every step.
pub const CHEAP_CHECK_RESOURCES: usize = 256;

/// After how many steps [`Core::step`] runs [`Core::check_cheap`] with `resources` in
/// the table: every step up to 2 × [`CHEAP_CHECK_RESOURCES`] - 1, then every k-th,
/// k = resources / [`CHEAP_CHECK_RESOURCES`].
pub fn cheap_check_every(resources: usize) -> u64 {
    (resources / CHEAP_CHECK_RESOURCES).max(1) as u64
}

/// How many gone lockspaces' entries the core keeps for late readers (the shell's
/// threads that still hold their id); [`Core::add_space`] prunes the oldest beyond it.
pub const MAX_GONE_SPACES: usize = 16;

impl<S, H: LeaseHold> Core<S, H> {
    /// A core with empty tables and no lockspace.
    pub fn new(kill_grace_s: u64) -> Core<S, H> {
        Core {
            tables: Tables::default(),
            spaces: Vec::new(),
            kill_grace_s,
            cmds: HashMap::new(),
            begun: HashSet::new(),
            admin: Vec::new(),
            requests: HashMap::new(),
            ops: HashMap::new(),
            next_op: 1,
            next_space_id: 1,
            last_status: None,
            watches: Watches::default(),
            steps_since_cheap_check: 0,
            watchdog_fire_s: 60,
            #[cfg(feature = "sim")]
            bug: None,
        }
    }

    /// The shell lists a lockspace it is adding (its join runs in the shell): the core
    /// keeps its status from now on, under `id`. The shell lists at most one lockspace of
    /// a name that is not gone, and never an id twice (asserted: a broken invariant, not
    /// input — the daemon checks ADD_LOCKSPACE's name under the same lock first). Before
    /// the new entry, the oldest gone entries are pruned down to `MAX_GONE_SPACES - 1`,
    /// so at most [`MAX_GONE_SPACES`] exist once this one has gone too.
    pub fn add_space(&mut self, id: u32, name: Name, io_timeout_s: u64) {
        let monitor = HostMonitor::new(0, self.watchdog_fire_s);
        self.insert_listed(id, name, None, io_timeout_s, monitor);
    }

    /// ADD_LOCKSPACE's admission, then the listing: the shell is adding lockspace `name`
    /// under `id`, with its delta leases at `place`. Refused, with nothing listed, when a
    /// lockspace here (not gone) has that name — being removed, being added or joined
    /// at the same place, or at another place — or another name on the same disk area
    /// (path and offset), in the order they were added (sanlock's `add_lockspace_start`
    /// checks). Otherwise listed as by [`Core::add_space`].
    pub fn list_space(
        &mut self,
        id: u32,
        name: Name,
        place: SpacePlace,
        io_timeout_s: u64,
        monitor: HostMonitor,
    ) -> Result<(), ListRefused> {
        for s in self.spaces.iter().filter(|s| !s.st.gone) {
            let same_disk = s
                .place
                .as_ref()
                .is_some_and(|p| p.path == place.path && p.offset == place.offset);
            if s.name.same_as(&name) {
                let identical =
                    same_disk && s.place.as_ref().map(|p| p.host_id) == Some(place.host_id);
                return Err(match s.st.phase {
                    Phase::Removing => ListRefused::BeingRemoved,
                    Phase::Adding if identical => ListRefused::BeingAdded,
                    Phase::Joined if identical => ListRefused::Joined,
                    _ => ListRefused::OtherPlace,
                });
            }
            if same_disk {
                return Err(ListRefused::DiskAreaTaken);
            }
        }
        self.insert_listed(id, name, Some(place), io_timeout_s, monitor);
        Ok(())
    }

    fn insert_listed(
        &mut self,
        id: u32,
        name: Name,
        place: Option<SpacePlace>,
        io_timeout_s: u64,
        monitor: HostMonitor,
    ) {
        assert!(
            self.space(&name).is_none() && self.spaces.iter().all(|s| s.id != id),
            "lockspace {name:?} (id {id}) listed twice"
        );
        let gone = self.spaces.iter().filter(|s| s.st.gone).count();
        let mut prune = gone.saturating_sub(MAX_GONE_SPACES - 1);
        self.spaces.retain(|s| {
            let drop_it = prune > 0 && s.st.gone;
            prune -= usize::from(drop_it);
            !drop_it
        });
        self.spaces.push(CoreSpace {
            id,
            name,
            st: SpaceSt::default(),
            io_timeout_s,
            listed_by_shell: true,
            place,
            monitor,
            fence: None,
            last_examine: BTreeMap::new(),
        });
    }

    /// The host monitor of lockspace `id` (`None` once the core no longer keeps it), to
    /// read: the shell's ballots, GET_HOSTS and metrics read it under the core's lock.
    pub fn space_monitor(&self, id: u32) -> Option<&HostMonitor> {
        self.spaces.iter().find(|s| s.id == id).map(|s| &s.monitor)
    }

    /// The fencing state of lockspace `id`, to read (`None`: not fenced, or gone).
    pub fn space_fence(&self, id: u32) -> Option<&FenceSt> {
        self.spaces
            .iter()
            .find(|s| s.id == id)
            .and_then(|s| s.fence.as_ref())
    }

    fn live_space_mut(&mut self, id: u32) -> Option<&mut CoreSpace> {
        self.spaces.iter_mut().find(|s| s.id == id && !s.st.gone)
    }

    /// Carries out a fencing verdict on lockspace `sp`: we are fenced → its lease is lost
    /// as a corrupt one (-EBADE, what the storage answers a fenced host), so our holders
    /// get the notice and are killed from the next tick on; a peer fenced → marked in the
    /// monitor (given only when the monitor did not have it yet). Why no two holders: a
    /// mark frees that peer generation's leases to our ballots at once, and
    /// `FenceSt::peer_done` gives `PeerFenced` only for a preempt the shell confirmed on
    /// every device (no key of the host left while a reservation stands), so the peer's
    /// processes can no longer write any lease sector.
    fn apply_fence_verdict(sp: &mut CoreSpace, v: FenceVerdict, fx: &mut Vec<Effect<H>>) {
        match v {
            FenceVerdict::WeAreFenced(_) => sp.st.renewal_failed(-crate::errno::EBADE, true),
            FenceVerdict::PeerFenced {
                host_id,
                generation,
                ..
            } => {
                if !sp.monitor.mark_fenced(host_id, generation) {
                    return;
                }
            }
            FenceVerdict::PeerNeverKeyed { .. }
            | FenceVerdict::PeerUnkeyed { .. }
            | FenceVerdict::FencedPeerRenews { .. }
            | FenceVerdict::StorageCleared { .. } => {}
        }
        fx.push(Effect::FenceVerdict {
            id: sp.id,
            ls: sp.name,
            verdict: v,
        });
    }

    /// The status of lockspace `id` (a gone one's until pruned; `None` after).
    pub fn space_st(&self, id: u32) -> Option<&SpaceSt> {
        self.spaces.iter().find(|s| s.id == id).map(|s| &s.st)
    }

    /// Gives every notice among `fx` its lockspace's lease times ([`LeaseTimes`]).
    fn stamp_lease_times(&self, fx: &mut [Effect<H>]) {
        for e in fx.iter_mut() {
            if let Effect::LossNotice { ls, lease, .. } | Effect::RequestNotice { ls, lease, .. } =
                e
            {
                *lease = self.space(ls).map(|s| LeaseTimes {
                    last_success_s: s.st.last_success_s,
                    expires_at_s: s.st.last_success_s
                        + timeouts::id_renewal_fail_seconds(s.io_timeout_s),
                });
            }
        }
    }

    /// The status of lockspace `id` while it is not gone.
    fn live_space_st_mut(&mut self, id: u32) -> Option<&mut SpaceSt> {
        self.space_st_mut(id).filter(|st| !st.gone)
    }

    /// The status of lockspace `id`, to change (`None` once pruned).
    pub fn space_st_mut(&mut self, id: u32) -> Option<&mut SpaceSt> {
        self.spaces
            .iter_mut()
            .find(|s| s.id == id)
            .map(|s| &mut s.st)
    }

    /// The expiry pass over the lockspaces not gone, with a planted bug (simulator).
    fn expiry_pass_of_live(&mut self, now_s: u64, bug: Option<CorePlantedBug>) -> Vec<Effect<H>> {
        let mut views: Vec<SpaceView<'_>> = self
            .spaces
            .iter_mut()
            .filter(|s| !s.st.gone)
            .map(CoreSpace::view)
            .collect();
        expiry_pass(&mut self.tables, &mut views, now_s, self.kill_grace_s, bug)
    }

    /// Whether a planted bug is active (then a broken invariant is the simulator's to
    /// report, not a panic).
    pub(crate) fn planted(&self, _bug: CorePlantedBug) -> bool {
        #[cfg(feature = "sim")]
        {
            self.bug == Some(_bug)
        }
        #[cfg(not(feature = "sim"))]
        {
            false
        }
    }

    fn any_planted(&self) -> bool {
        #[cfg(feature = "sim")]
        {
            self.bug.is_some()
        }
        #[cfg(not(feature = "sim"))]
        {
            false
        }
    }

    /// Applies `input` at `now_s` (monotonic seconds) and returns the effects, in order.
    pub fn step(&mut self, now_s: u64, input: Input<S, H>) -> Vec<Effect<H>> {
        let mut fx = Vec::new();
        match input {
            Input::Tick => self.tick(now_s, &mut fx),
            Input::RenewalOk {
                id,
                last_success_s,
                rec,
            } => {
                if let Some(st) = self.live_space_st_mut(id) {
                    st.renewal_ok(last_success_s, rec);
                }
            }
            Input::RenewalFailed { id, code, corrupt } => {
                if let Some(st) = self.live_space_st_mut(id) {
                    st.renewal_failed(code, corrupt);
                }
            }
            Input::HostsRead {
                id,
                read_at_s,
                sectors,
                whole_area,
            } => {
                if let Some(sp) = self.live_space_mut(id) {
                    let notes = sp.monitor.observe_read(read_at_s, &sectors, whole_area);
                    if let Some(f) = sp.fence.as_mut() {
                        for (host_id, h, _) in sp.monitor.hosts(now_s) {
                            let renewing = h.fenced(h.owner_generation)
                                && h.owner_id == host_id
                                && h.changed_at_last_check();
                            if renewing && f.alarm_fenced_renewing(host_id, h.owner_generation) {
                                fx.push(Effect::FenceVerdict {
                                    id,
                                    ls: sp.name,
                                    verdict: FenceVerdict::FencedPeerRenews {
                                        host_id,
                                        generation: h.owner_generation,
                                    },
                                });
                            }
                        }
                    }
                    if !notes.is_empty() {
                        let period = timeouts::set_bitmap_seconds(sp.io_timeout_s);
                        let mut examine = false;
                        for n in &notes {
                            if n.from_host_id == 0
                                || n.from_host_id > crate::events::MAX_EVENT_HOST_ID
                            {
                                continue;
                            }
                            let due = sp
                                .last_examine
                                .get(&n.from_host_id)
                                .is_none_or(|&t| now_s >= t + period);
                            if due {
                                sp.last_examine.insert(n.from_host_id, now_s);
                                examine = true;
                            }
                        }
                        fx.push(Effect::HostNotifications { id, notes, examine });
                    }
                }
            }
            Input::FenceRegistered {
                id,
                key,
                preempt_cfg_s,
                acts,
            } => {
                let old_floor = self.planted(CorePlantedBug::PreemptFloorFourIoTimeouts);
                if let Some(sp) = self.live_space_mut(id) {
                    let io_timeout_s = sp.io_timeout_s;
                    let f = sp
                        .fence
                        .get_or_insert_with(|| FenceSt::new(preempt_cfg_s, io_timeout_s));
                    f.acts = acts;
                    if old_floor {
                        f.preempt_floor_io_timeouts = 4;
                    }
                    f.registered(key);
                }
            }
            Input::FenceUnregistered { id } => {
                if let Some(f) = self.live_space_mut(id).and_then(|sp| sp.fence.as_mut()) {
                    f.unregistered();
                }
            }
            Input::FenceLook { id } => {
                if let Some(sp) = self.live_space_mut(id) {
                    let lost = sp.st.space_dead || sp.st.releasing;
                    if let Some(f) = sp.fence.as_mut().filter(|_| !lost) {
                        if let Some(action) = f.look(&sp.monitor, now_s) {
                            fx.push(Effect::Fence { id, action });
                        }
                    }
                }
            }
            Input::FenceKeysRead {
                id,
                read,
                read_at_ms,
            } => {
                if let Some(sp) = self.live_space_mut(id) {
                    if let Some(f) = sp.fence.as_mut() {
                        let max_peer_io_s = sp
                            .monitor
                            .hosts(now_s)
                            .iter()
                            .map(|(_, h, _)| u64::from(h.io_timeout))
                            .max()
                            .unwrap_or(0);
                        let gap_ms = sp
                            .st
                            .longest_renewal_gap_ms(f.stillness_since_s(max_peer_io_s), read_at_ms);
                        let mut actions = Vec::new();
                        let verdict = f.keys_read(&read, now_s, gap_ms, &mut actions);
                        fx.extend(
                            actions
                                .into_iter()
                                .map(|action| Effect::Fence { id, action }),
                        );
                        if let Some(v) = verdict {
                            Self::apply_fence_verdict(sp, v, &mut fx);
                        }
                    }
                }
            }
            Input::PeerFenceDone {
                id,
                host_id,
                generation,
                outcome,
            } => {
                if let Some(sp) = self.live_space_mut(id) {
                    let verdict = sp
                        .fence
                        .as_mut()
                        .and_then(|f| f.peer_done(host_id, generation, outcome));
                    if let Some(v) = verdict {
                        Self::apply_fence_verdict(sp, v, &mut fx);
                    }
                }
            }
            Input::JoinStarted { id, geometry } => {
                if let Some(st) = self.live_space_st_mut(id) {
                    st.geometry = Some(geometry);
                    st.acquire_last_attempt = now_s;
                }
            }
            Input::RenewalStarted { id } => {
                if let Some(st) = self.live_space_st_mut(id) {
                    st.renewal_last_attempt = now_s;
                }
            }
            Input::DeltaReleasing { id } => {
                if let Some(st) = self.live_space_st_mut(id) {
                    st.releasing = true;
                }
            }
            Input::Connected {
                fd,
                pid,
                uid,
                stream,
                replacing_own,
            } => {
                let added = if replacing_own {
                    self.tables
                        .clients
                        .add_in_place_of_own(fd, pid, uid, stream)
                } else {
                    self.tables.clients.add(fd, pid, uid, stream)
                };
                match added {
                    Ok(ci) => fx.push(Effect::Accepted { ci }),
                    Err(why) => fx.push(Effect::Refused { why }),
                }
            }
            Input::Request { ci, req } => self.request(now_s, ci, req, &mut fx),
            Input::Command { target, req } => self.begun_command(now_s, target, req, &mut fx),
            Input::DiskDone {
                op,
                result,
                failed_state,
            } => self.disk_done(now_s, op, result, failed_state, &mut fx),
            Input::JoinDone { ls, result } => self.join_done(now_s, ls, result, &mut fx),
            Input::Closed { ci } => self.client_gone(ci, &mut fx),
            Input::PidExit { pid } => {
                if let Some(ci) = self.tables.clients.by_pid(pid) {
                    self.client_gone(ci, &mut fx);
                    fx.push(Effect::Close { ci });
                }
            }
            Input::Examined {
                ls,
                name,
                lver,
                force_mode,
            } => fx = self.examined(&ls, &name, lver, force_mode),
            Input::KillpathEnded { pid, status } => {
                self.tables.killpath_ended(pid, &status);
            }
            Input::ReleaseTokens { ci, tokens, dying } => {
                for t in &tokens {
                    self.release_token(ci, t, dying, None, None, &mut fx);
                }
            }
            Input::ReleaseOrphans { ls, name } => {
                self.release_orphans(&ls, &name, &mut fx);
            }
            Input::JoinEnded { id, result } => self.join_ended(now_s, id, result),
            Input::SetConfig {
                id,
                used_by_orphans,
                external_used,
            } => {
                if let Some(st) = self.space_st_mut(id).filter(|st| !st.gone) {
                    st.used_by_orphans = used_by_orphans.unwrap_or(st.used_by_orphans);
                    st.external_used = external_used.unwrap_or(st.external_used);
                }
            }
            Input::LockspaceEnded { id } => self.lockspace_ended(id, &mut fx),
            Input::Shutdown => self.remove_all(&mut fx),
            Input::WatchTick => {
                if !self.watches.is_empty() {
                    fx.push(Effect::WatchBeats {
                        beats: self.watches.beats(&self.tables.clients),
                    });
                }
            }
            Input::WatchDropped { ci } => {
                self.watches.end(ci);
            }
            Input::RequestWritten { op, result } => {
                self.request_written(now_s, op, result, &mut fx);
            }
        }
        if self.active_bug() != Some(CorePlantedBug::NoticeMissesWatch) {
            // Every notice goes to the watches its pids have now, decided in the step
            // that gives it.
            self.watches.address(&mut fx);
        }
        self.stamp_lease_times(&mut fx);
        if !self.any_planted() {
            // Release builds: the cheap check, one pass over the resources, after every
            // step while the table is small, after every k-th step once it is large, so
            // that a step's share of it stays bounded (docs/performance.md, "Sixteenth
            // session: the core's step with many leases").
            self.steps_since_cheap_check += 1;
            if self.steps_since_cheap_check >= cheap_check_every(self.tables.resources.len()) {
                self.steps_since_cheap_check = 0;
                if let Err(broken) = self.check_cheap() {
                    panic!("the core broke an invariant: {broken}");
                }
            }
            if cfg!(debug_assertions) {
                if let Err(broken) = self.check() {
                    panic!("the core broke an invariant after a step: {broken}");
                }
            }
        }
        fx
    }

    /// The lockspace named `ls` that is not gone.
    pub(crate) fn space_mut(&mut self, ls: &Name) -> Option<&mut CoreSpace> {
        self.spaces
            .iter_mut()
            .find(|s| s.name.same_as(ls) && !s.st.gone)
    }

    /// The lockspace named `ls` that is not gone.
    pub(crate) fn space(&self, ls: &Name) -> Option<&CoreSpace> {
        self.spaces
            .iter()
            .find(|s| s.name.same_as(ls) && !s.st.gone)
    }

    /// Whether leases of `ls` may be acquired now: joined, its lease not lost, not being
    /// removed.
    pub fn space_usable(&self, ls: &Name) -> bool {
        self.space(ls).is_some_and(|s| {
            s.st.phase == Phase::Joined
                && !s.st.space_dead
                && !s.st.kill_now
                && s.st.corrupt_result == 0
        })
    }

    /// Every live lockspace's expiry check, then the kill pass of each whose lease is lost
    /// or being removed, in order (every [`Effect::LossNotice`] before the first
    /// [`Effect::Kill`]); then the lockspaces that can go (lost or removed, with no lease
    /// left in the table; not the shell's), and the ACQUIREs that waited for a release
    /// too long; last, the status summary when it changed ([`Effect::Status`]).
    fn tick(&mut self, now_s: u64, effects: &mut Vec<Effect<H>>) {
        let bug = self.active_bug();
        let mut fx = self.expiry_pass_of_live(now_s, bug);
        effects.append(&mut fx);
        self.finish_removals(effects);
        self.end_overdue_release_waits(now_s, effects);
        let status = self.status_summary();
        if self.last_status != Some(status) {
            self.last_status = Some(status);
            effects.push(Effect::Status(status));
        }
    }

    /// What the daemon is doing now ([`StatusSummary`]).
    pub fn status_summary(&self) -> StatusSummary {
        StatusSummary {
            lockspaces: self
                .spaces
                .iter()
                .filter(|s| !s.st.gone && s.st.phase == Phase::Joined)
                .count(),
            leases: self.tables.resources.len(),
            clients: self
                .tables
                .clients
                .slots
                .values()
                .filter(|c| c.registered)
                .count(),
        }
    }

    /// [`Input::Examined`]: [`crate::kill::examined_lease`], and the planted bugs of the
    /// request path.
    fn examined(&self, ls: &Name, name: &Name, lver: u64, force_mode: u32) -> Vec<Effect<H>> {
        let mut fx = examined_lease(&self.tables, ls, name, lver, force_mode);
        if self.planted(CorePlantedBug::ExamineKillsLockspace) && !fx.is_empty() {
            plant_examine_kills_lockspace(&self.tables, ls, &mut fx);
        }
        if self.planted(CorePlantedBug::ExamineKillBeforeNotice) && !fx.is_empty() {
            // The notice is the first effect: move it behind the kills.
            let notice = fx.remove(0);
            fx.push(notice);
        }
        fx
    }

    fn active_bug(&self) -> Option<CorePlantedBug> {
        #[cfg(feature = "sim")]
        {
            self.bug
        }
        #[cfg(not(feature = "sim"))]
        {
            None
        }
    }

    /// The core's invariants: the tables' ([`Tables::check`]); for each lockspace, a
    /// loss notice is marked given only for a lost lease or a removal; every command
    /// belongs to a live slot with a command active, and every disk operation in flight
    /// to a resource `busy` in the table.
    pub fn check(&self) -> Result<(), String> {
        self.tables.check()?;
        self.check_cheap()?;
        self.watches.check(&self.tables.clients)?;
        for s in &self.spaces {
            let ls = &s.name;
            if let Some(f) = &s.fence {
                f.check().map_err(|e| format!("{ls:?}: {e}"))?;
            }
            if s.st.loss_notified && !s.st.space_dead && !s.st.kill_now {
                // check_expiry marks the notice given in the same step that finds the
                // lease lost.
                return Err(format!("{ls:?}: loss notified for a lease not lost"));
            }
        }
        for (ci, cmd) in &self.cmds {
            match self.tables.clients.slots.get(ci) {
                Some(c) if c.cmd_active != 0 => {}
                _ => {
                    return Err(format!(
                        "client {ci}: a command {cmd:?} with no active slot"
                    ))
                }
            }
        }
        for ci in &self.begun {
            match self.tables.clients.slots.get(ci) {
                Some(c) if c.cmd_active != 0 => {}
                _ => return Err(format!("client {ci}: a begun command with no active slot")),
            }
        }
        for (op, what) in &self.ops {
            let key = what.key();
            match self.tables.resources.get(&key) {
                Some(lr) if lr.busy => {}
                _ => return Err(format!("disk op {op} on {key:?}, which is not busy")),
            }
        }
        Ok(())
    }

    /// The part of [`Core::check`] cheap enough for every step of a release build: the
    /// tables' [`Tables::check_cheap`], and at most one lockspace of each name.
    pub fn check_cheap(&self) -> Result<(), String> {
        self.tables.check_cheap()?;
        for (i, s) in self.spaces.iter().enumerate() {
            let earlier = &self.spaces[..i];
            if !s.st.gone
                && earlier
                    .iter()
                    .any(|o| !o.st.gone && o.name.same_as(&s.name))
            {
                return Err(format!("{:?}: listed twice", s.name));
            }
            if earlier.iter().any(|o| o.id == s.id) {
                return Err(format!("{:?}: id {} listed twice", s.name, s.id));
            }
        }
        Ok(())
    }
}

/// One lockspace's status, as the expiry pass of a tick takes it.
#[derive(Debug)]
pub(crate) struct SpaceView<'a> {
    pub name: Name,
    pub st: &'a mut SpaceSt,
    pub io_timeout_s: u64,
}

/// How long an acquire waits for a release here of the same lease to end before it is
/// answered -EAGAIN: a release is a few sector I/Os, each bounded by the lockspace's io
/// timeout. The same wait for the core's ACQUIRE and the shell's.
pub fn release_wait_s(io_timeout_s: u64) -> u64 {
    4 * io_timeout_s.max(1)
}

fn expiry_pass<S, H: LeaseHold>(
    tables: &mut Tables<S, H>,
    spaces: &mut [SpaceView<'_>],
    now_s: u64,
    kill_grace_s: u64,
    bug: Option<CorePlantedBug>,
) -> Vec<Effect<H>> {
    let mut dead = Vec::new();
    let mut notices = Vec::new();
    for s in spaces.iter_mut() {
        let ls = &s.name;
        let e = s.st.check_expiry(now_s, s.io_timeout_s);
        if let Some(kind) = e.notice {
            let pids = tables.holder_pids(ls, None);
            if !pids.is_empty() {
                notices.push(Effect::LossNotice {
                    ls: *ls,
                    kind,
                    pids,
                    to: Vec::new(),
                    lease: None,
                });
            }
        }
        if let Some(age_s) = e.failed_after_s {
            // Whether processes of this host held leases of it when it failed: their
            // writes may outlive them on a network filesystem (the shell keeps the
            // watchdog armed then).
            s.st.failed_with_holders = tables
                .resources
                .values()
                .any(|r| r.ls.same_as(ls) && !r.orphan);
            notices.push(Effect::LockspaceFailed {
                ls: *ls,
                age_s,
                corrupt: s.st.corrupt_result,
            });
        } else if let Some(age_s) = e.failing_for_s {
            notices.push(Effect::RenewalsFailing { ls: *ls, age_s });
        }
        if e.kill {
            dead.push((
                *ls,
                SpaceKill {
                    kill_now: s.st.kill_now,
                    now: now_s,
                    last_success: s.st.last_success_s,
                    fail_s: timeouts::id_renewal_fail_seconds(s.io_timeout_s),
                    grace_s: kill_grace_s,
                },
            ));
        }
    }
    let mut kills = Vec::new();
    for (ls, space) in dead {
        for order in plan_kills(tables, &ls, space) {
            kills.push(Effect::Kill { ls, order });
        }
        if bug == Some(CorePlantedBug::KillNonHolders) {
            plant_kill_non_holders(tables, &ls, &mut kills);
        }
    }
    let mut effects = Vec::new();
    if bug == Some(CorePlantedBug::KillBeforeNotice) {
        effects.append(&mut kills);
    }
    effects.append(&mut notices);
    effects.append(&mut kills);
    effects
}

fn plant_kill_non_holders<S, H: LeaseHold>(
    tables: &Tables<S, H>,
    ls: &Name,
    kills: &mut Vec<Effect<H>>,
) {
    let mut cis: Vec<u32> = tables.clients.slots.keys().copied().collect();
    cis.sort_unstable();
    for ci in cis {
        let c = &tables.clients.slots[&ci];
        if c.registered && c.pid > 0 && !c.pid_dead && c.kill_count == 0 && c.tokens.is_empty() {
            kills.push(Effect::Kill {
                ls: *ls,
                order: KillOrder::Signal {
                    ci,
                    pid: c.pid,
                    sig: crate::kill::SIGTERM,
                },
            });
        }
    }
}

/// The planted bug `examine-kills-lockspace`: after a request's orders, one more for
/// every other live client holding any lease of `ls` (what a decision that looked at the
/// lockspace rather than the lease would do).
fn plant_examine_kills_lockspace<S, H: LeaseHold>(
    tables: &Tables<S, H>,
    ls: &Name,
    fx: &mut Vec<Effect<H>>,
) {
    let mut cis: Vec<u32> = tables.clients.slots.keys().copied().collect();
    cis.sort_unstable();
    for ci in cis {
        let c = &tables.clients.slots[&ci];
        let ordered = fx.iter().any(|e| {
            matches!(e, Effect::Kill { order: KillOrder::Signal { ci: o, .. } | KillOrder::RunKillpath { ci: o, .. }, .. } if *o == ci)
        });
        if c.pid > 0 && !c.pid_dead && !ordered && c.tokens.iter().any(|t| t.ls.same_as(ls)) {
            fx.push(Effect::Kill {
                ls: *ls,
                order: KillOrder::Signal {
                    ci,
                    pid: c.pid,
                    sig: crate::kill::SIGKILL,
                },
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clients::{ClientToken, KillPath};
    use crate::fencing::PeerFenceOutcome;
    use crate::io::{CoreRequest, DiskOp};
    use crate::kill::{SIGKILL, SIGTERM};
    use crate::space_state::{Phase, RenewalRec};
    use client_lib::ext::WatchKind;

    #[derive(Debug, Clone, Default, PartialEq, Eq)]
    struct Held;

    impl LeaseHold for Held {
        fn lver(&self) -> u64 {
            1
        }
    }

    const IO_S: u64 = 10;

    fn name(s: &str) -> Name {
        Name::new(s).expect("name")
    }

    /// A core with lockspace `ls` joined at `t` and, for each `(pid, ls, res)`, a
    /// registered client holding that lease.
    fn core(spaces: &[&str], t: u64, holders: &[(i32, &str, &str)]) -> Core<(), Held> {
        let mut c = Core::new(40);
        for ls in spaces {
            let mut s = CoreSpace {
                id: c.spaces.len() as u32 + 1,
                name: name(ls),
                st: SpaceSt::default(),
                io_timeout_s: IO_S,
                listed_by_shell: false,
                place: None,
                monitor: HostMonitor::new(1, 60),
                fence: None,
                last_examine: BTreeMap::new(),
            };
            s.st.phase = Phase::Joined;
            s.st.add_result = Some(0);
            s.st.renewal_ok(t, rec(t));
            c.spaces.push(s);
        }
        for &(pid, ls, res) in holders {
            let ci = c.tables.clients.add(-1, pid, 1000, None).expect("slot");
            c.tables
                .clients
                .slots
                .get_mut(&ci)
                .expect("slot")
                .registered = true;
            let key = (name(ls), name(res));
            assert_eq!(
                c.tables.start_acquire(ci, key, false, 0, &[]),
                Ok(crate::AcquireStart::Disk)
            );
            c.tables.finish_acquire(key, ci, Ok(Held)).expect("held");
            c.tables
                .record_tokens(
                    ci,
                    vec![ClientToken {
                        token_id: 1,
                        ls: key.0,
                        name: key.1,
                        disks: Vec::new(),
                        shared: false,
                        persistent: false,
                        lver: 1,
                        acquired: t,
                    }],
                )
                .expect("recorded");
        }
        c.check().expect("a consistent start");
        // The status as it is now went out already: a tick's `Status` says a change.
        c.last_status = Some(c.status_summary());
        c
    }

    fn rec(t: u64) -> RenewalRec {
        RenewalRec {
            timestamp: t,
            read_ms: 1,
            write_ms: 0,
            write_sent_ms: t * 1000,
            ended_ms: t * 1000 + 1,
        }
    }

    fn first(effects: &[Effect<Held>], f: impl Fn(&Effect<Held>) -> bool) -> Option<usize> {
        effects.iter().position(f)
    }

    #[test]
    fn a_lost_lease_gives_the_notice_before_the_kill() {
        let fail = timeouts::id_renewal_fail_seconds(IO_S);
        let mut c = core(&["ls"], 100, &[(4242, "ls", "r1")]);
        // Young lease: nothing.
        assert_eq!(c.step(101, Input::Tick), Vec::new());
        // Renewals fail; at id_renewal_fail the lease is lost.
        c.step(
            110,
            Input::RenewalFailed {
                id: 1,
                code: -5,
                corrupt: false,
            },
        );
        let effects = c.step(100 + fail, Input::Tick);
        let notice = first(&effects, |e| {
            matches!(e, Effect::LossNotice { kind: WatchKind::LockspaceFailed, pids, .. } if pids == &[4242])
        })
        .expect("a LockspaceFailed notice");
        let kill = first(&effects, |e| {
            matches!(
                e,
                Effect::Kill {
                    order: KillOrder::Signal {
                        pid: 4242,
                        sig: SIGTERM,
                        ..
                    },
                    ..
                }
            )
        })
        .expect("a SIGTERM to the holder");
        assert!(notice < kill, "notice after kill: {effects:?}");
        assert!(effects
            .iter()
            .any(|e| matches!(e, Effect::LockspaceFailed { age_s, .. } if *age_s == fail)));
        // The notice is given once; escalation goes on once a second, SIGKILL after grace.
        let later = c.step(100 + fail + 1, Input::Tick);
        assert!(!later.iter().any(|e| matches!(e, Effect::LossNotice { .. })));
        let after_grace = c.step(100 + fail + 40, Input::Tick);
        assert!(after_grace.iter().any(|e| matches!(
            e,
            Effect::Kill {
                order: KillOrder::Signal {
                    pid: 4242,
                    sig: SIGKILL,
                    ..
                },
                ..
            }
        )));
    }

    #[test]
    fn every_notice_of_a_tick_comes_before_its_first_kill_and_only_holders_are_killed() {
        let fail = timeouts::id_renewal_fail_seconds(IO_S);
        // Two lockspaces failing at once, a holder in each, and a client of a third,
        // healthy lockspace that must not be touched.
        let mut c = core(
            &["a", "b", "ok"],
            100,
            &[(11, "a", "r"), (12, "b", "r"), (13, "ok", "r")],
        );
        c.step(
            100 + fail - 1,
            Input::RenewalOk {
                id: 3,
                last_success_s: 100 + fail - 1,
                rec: rec(100 + fail - 1),
            },
        );
        let effects = c.step(100 + fail, Input::Tick);
        let last_notice = effects
            .iter()
            .rposition(|e| matches!(e, Effect::LossNotice { .. }))
            .expect("notices");
        let first_kill = first(&effects, |e| matches!(e, Effect::Kill { .. })).expect("kills");
        assert!(last_notice < first_kill, "{effects:?}");
        let killed: Vec<i32> = effects
            .iter()
            .filter_map(|e| match e {
                Effect::Kill {
                    order: KillOrder::Signal { pid, .. },
                    ..
                } => Some(*pid),
                _ => None,
            })
            .collect();
        assert_eq!(killed, vec![11, 12]);
    }

    #[test]
    fn a_killpath_runs_first_within_the_grace_time() {
        let fail = timeouts::id_renewal_fail_seconds(IO_S);
        let mut c = core(&["ls"], 100, &[(77, "ls", "r")]);
        let kp = KillPath {
            path: "/usr/bin/true".into(),
            args: String::new(),
            with_pid: false,
            run_as: None,
        };
        for cl in c.tables.clients.slots.values_mut() {
            cl.killpath = Some(kp.clone());
        }
        let effects = c.step(100 + fail, Input::Tick);
        assert!(effects.iter().any(|e| matches!(
            e,
            Effect::Kill { order: KillOrder::RunKillpath { pid: 77, killpath, .. }, .. } if *killpath == kp
        )));
        // Nothing more until the grace time is over.
        assert!(!c
            .step(100 + fail + 1, Input::Tick)
            .iter()
            .any(|e| matches!(e, Effect::Kill { .. })));
    }

    /// A renewal's failure gives no effect (the loss is the next tick's decision), and
    /// the tick skips a gone lockspace (the daemon's, kept for late readers).
    #[test]
    fn a_renewal_failure_waits_for_the_tick_which_skips_a_gone_lockspace() {
        let fail = timeouts::id_renewal_fail_seconds(IO_S);
        let mut b = core(&["a", "b"], 100, &[(11, "a", "r"), (12, "b", "r")]);
        let fx = b.step(
            100 + fail - 5,
            Input::RenewalFailed {
                id: 1,
                code: -5,
                corrupt: true,
            },
        );
        assert!(fx.is_empty());
        assert_eq!(b.spaces[0].st.corrupt_result, -5);
        let mut c = core(&["a"], 100, &[]);
        c.spaces[0].st.gone = true;
        assert_eq!(
            c.step(100 + fail + 1, Input::Tick),
            vec![Effect::Status(StatusSummary::default())],
            "no lockspace joined any more, and nothing else"
        );
        assert!(
            c.space_st(1).is_some_and(|st| !st.space_dead),
            "a gone one is not checked"
        );
    }

    /// Fencing through the step: the renewal's read feeds the core's host monitor; a pass
    /// asks for the key list, then a preempt of the stalled peer; the confirmed preempt
    /// marks the peer's generation fenced in the monitor (what the ballots read), and
    /// the next pass leaves it alone. A key list without our key fails the lockspace:
    /// its holder's notice, then the kill, at the next tick.
    #[test]
    fn fencing_decides_in_the_step_and_marks_the_monitor_or_loses_our_lease() {
        use crate::fencing::{FenceAction, FenceKey, FenceVerdict, FencedBecause, KeysRead};
        use disk_format::{DeltaSector, LeaderRecord};
        let peer = DeltaSector::from_leader(LeaderRecord {
            owner_id: 2,
            owner_generation: 3,
            timestamp: 90,
            io_timeout: IO_S as u16,
            ..LeaderRecord::ZERO
        });
        let ours = FenceKey {
            raw: 0x1001,
            owner: Some((1, 1)),
        };
        let theirs = FenceKey {
            raw: 0x2003,
            owner: Some((2, 3)),
        };
        let setup = |c: &mut Core<(), Held>| {
            let fx = c.step(
                100,
                Input::HostsRead {
                    id: 1,
                    read_at_s: 100,
                    sectors: vec![None, Some(peer)],
                    whole_area: true,
                },
            );
            assert!(fx.is_empty(), "no bit of ours is set: {fx:?}");
            let fx = c.step(
                100,
                Input::FenceRegistered {
                    id: 1,
                    key: ours.raw,
                    preempt_cfg_s: 0,
                    acts: true,
                },
            );
            assert!(fx.is_empty());
        };
        let read_keys = Effect::Fence {
            id: 1,
            action: FenceAction::ReadKeys,
        };
        let t = 100 + timeouts::id_renewal_fail_seconds(IO_S);
        // Our own read at `t` finds host 2 still (a pass judges from a fresh read only).
        let reread = |c: &mut Core<(), Held>| {
            c.step(
                t,
                Input::HostsRead {
                    id: 1,
                    read_at_s: t,
                    sectors: vec![None, Some(peer)],
                    whole_area: true,
                },
            );
        };

        let mut c = core(&["ls"], 100, &[]);
        setup(&mut c);
        reread(&mut c);
        assert_eq!(
            c.step(t, Input::FenceLook { id: 1 }),
            vec![read_keys.clone()]
        );
        let fx = c.step(
            t,
            Input::FenceKeysRead {
                id: 1,
                read: KeysRead::Keys {
                    keys: vec![ours, theirs],
                    reservation: true,
                },
                read_at_ms: t * 1000,
            },
        );
        assert_eq!(
            fx,
            vec![Effect::Fence {
                id: 1,
                action: FenceAction::Preempt {
                    host_id: 2,
                    generation: 3,
                    our_key: ours.raw
                }
            }]
        );
        let fx = c.step(
            t,
            Input::PeerFenceDone {
                id: 1,
                host_id: 2,
                generation: 3,
                outcome: PeerFenceOutcome::Confirmed { preempted: true },
            },
        );
        assert!(matches!(
            fx.as_slice(),
            [Effect::FenceVerdict {
                verdict: FenceVerdict::PeerFenced {
                    host_id: 2,
                    generation: 3,
                    ..
                },
                ..
            }]
        ));
        let obs = lease_core::HostObserver::observation(c.space_monitor(1).unwrap(), 2).unwrap();
        assert!(obs.fenced(3), "the ballots see the generation fenced");
        // The next pass reads the keys and preempts nobody: a fenced generation is neither
        // a suspect nor a live peer.
        assert_eq!(
            c.step(t + 1, Input::FenceLook { id: 1 }),
            vec![read_keys.clone()]
        );
        let fx = c.step(
            t + 1,
            Input::FenceKeysRead {
                id: 1,
                read: KeysRead::Keys {
                    keys: vec![ours],
                    reservation: true,
                },
                read_at_ms: t * 1000,
            },
        );
        assert!(fx.is_empty(), "{fx:?}");
        // The fenced generation renews all the same (the storage still takes its writes):
        // the alarm, once.
        let read = |t: u64, timestamp: u64| {
            let mut renewed = peer;
            renewed.leader.timestamp = timestamp;
            Input::HostsRead {
                id: 1,
                read_at_s: t,
                sectors: vec![None, Some(renewed)],
                whole_area: true,
            }
        };
        let fx = c.step(t + 2, read(t + 2, 95));
        assert!(matches!(
            fx.as_slice(),
            [Effect::FenceVerdict {
                verdict: FenceVerdict::FencedPeerRenews {
                    host_id: 2,
                    generation: 3
                },
                ..
            }]
        ));
        assert!(c.step(t + 3, read(t + 3, 97)).is_empty());
        c.check().unwrap();

        let mut c = core(&["ls"], t - 1, &[(4242, "ls", "r")]);
        setup(&mut c);
        reread(&mut c);
        assert_eq!(c.step(t, Input::FenceLook { id: 1 }), vec![read_keys]);
        let fx = c.step(
            t,
            Input::FenceKeysRead {
                id: 1,
                read: KeysRead::Keys {
                    keys: vec![theirs],
                    reservation: true,
                },
                read_at_ms: t * 1000,
            },
        );
        assert!(matches!(
            fx.as_slice(),
            [Effect::FenceVerdict {
                verdict: FenceVerdict::WeAreFenced(FencedBecause::OurKeyGone),
                ..
            }]
        ));
        assert!(
            c.step(t, Input::FenceLook { id: 1 }).is_empty(),
            "no pass once fenced"
        );
        let fx = c.step(t + 1, Input::Tick);
        let notice = first(&fx, |e| {
            matches!(e, Effect::LossNotice { kind: WatchKind::LockspaceFailed, pids, .. } if pids == &[4242])
        })
        .expect("the holder's notice");
        let kill = first(&fx, |e| matches!(e, Effect::Kill { .. })).expect("the holder's kill");
        assert!(notice < kill, "{fx:?}");
        c.check().unwrap();
    }

    /// A host's bit in its renewal: the notification comes each time, the examine of our
    /// leases at most once per `set_bitmap_seconds` for that host.
    #[test]
    fn a_hosts_bit_asks_for_an_examine_at_most_once_per_bitmap_period() {
        use disk_format::{DeltaSector, LeaderRecord};
        let mut c = core(&["ls"], 100, &[]);
        let mut peer = DeltaSector::from_leader(LeaderRecord {
            owner_id: 2,
            owner_generation: 3,
            timestamp: 90,
            io_timeout: IO_S as u16,
            ..LeaderRecord::ZERO
        });
        peer.set_host_bit(1, true);
        let mut read = |t: u64| {
            let fx = c.step(
                t,
                Input::HostsRead {
                    id: 1,
                    read_at_s: t,
                    sectors: vec![None, Some(peer)],
                    whole_area: true,
                },
            );
            match fx.as_slice() {
                [Effect::HostNotifications {
                    id: 1,
                    notes,
                    examine,
                }] => {
                    assert_eq!(notes.len(), 1);
                    assert_eq!(notes[0].from_host_id, 2);
                    *examine
                }
                other => panic!("{other:?}"),
            }
        };
        let period = timeouts::set_bitmap_seconds(IO_S);
        assert!(read(100));
        assert!(!read(100 + period - 1));
        assert!(read(100 + period));
    }

    /// A lockspace the shell listed is the shell's to remove: a tick while it is being
    /// removed, with no lease left in it, gives no `LockspaceGone` and keeps it.
    #[test]
    fn a_lockspace_the_shell_listed_is_not_removed_by_the_core() {
        let mut c: Core<(), Held> = Core::new(40);
        c.add_space(7, name("ls"), IO_S);
        let st = c.space_st_mut(7).expect("listed");
        st.phase = Phase::Removing;
        st.kill_now = true;
        let fx = c.step(100, Input::Tick);
        assert!(
            !fx.iter().any(|e| matches!(e, Effect::LockspaceGone { .. })),
            "{fx:?}"
        );
        assert!(c.space_st(7).is_some_and(|st| !st.gone));
    }

    /// The disk operations among `fx`: (op, client, the lease's name).
    fn disk_ops(fx: &[Effect<Held>]) -> Vec<(OpId, Option<u32>, Name)> {
        fx.iter()
            .filter_map(|e| match e {
                Effect::Disk {
                    op,
                    client,
                    what: DiskOp::Release { key, .. },
                    ..
                } => Some((*op, *client, key.1)),
                _ => None,
            })
            .collect()
    }

    fn disk_done(c: &mut Core<(), Held>, t: u64, op: OpId) -> Vec<Effect<Held>> {
        c.step(
            t,
            Input::DiskDone {
                op,
                result: Ok(Held),
                failed_state: None,
            },
        )
    }

    /// A lost lockspace the shell listed is retired by the core once no lease of it is
    /// left: its orphans are released only after its last live holder went, then the
    /// tick retires it (phase Removing, `RetireLockspace` with the shell's id, once) and
    /// keeps its entry for the shell to unlist. SET_CONFIG's `used_by_orphans` keeps the
    /// orphans, and so the lockspace.
    #[test]
    fn a_lost_lockspace_of_the_shell_is_retired_after_its_holders_and_orphans() {
        for keep_orphans in [false, true] {
            let fail = timeouts::id_renewal_fail_seconds(IO_S);
            let mut c = core(&["a"], 100, &[(11, "a", "r"), (12, "a", "o")]);
            c.spaces[0].listed_by_shell = true;
            c.spaces[0].st.used_by_orphans = keep_orphans;
            let ci = |c: &Core<(), Held>, pid| c.tables.clients.by_pid(pid).expect("slot");
            // Pid 12's lease is persistent: its end leaves an orphan.
            let c12 = ci(&c, 12);
            c.tables.clients.slots.get_mut(&c12).expect("slot").tokens[0].persistent = true;
            assert!(disk_ops(&c.step(101, Input::Closed { ci: c12 })).is_empty());
            assert!(c.tables.resources[&(name("a"), name("o"))].orphan);
            // Lost: pid 11 is told and killed; the orphan stays while it lives.
            let fx = c.step(100 + fail, Input::Tick);
            assert!(
                fx.iter().any(|e| matches!(e, Effect::Kill { .. })),
                "{fx:?}"
            );
            assert!(disk_ops(&fx).is_empty(), "no orphan released yet: {fx:?}");
            // Pid 11 ends: its lease is released (its own client), nothing retired yet.
            let c11 = ci(&c, 11);
            let fx = c.step(100 + fail + 1, Input::Closed { ci: c11 });
            let [(op, Some(client), res)] = disk_ops(&fx)[..] else {
                panic!("one release of pid 11's lease: {fx:?}")
            };
            assert_eq!((client, res), (c11, name("r")));
            // That release's end lets the orphan go (no client), unless SET_CONFIG
            // keeps it.
            let fx = disk_done(&mut c, 100 + fail + 1, op);
            let retired = |fx: &[Effect<Held>]| {
                fx.iter()
                    .filter(
                        |e| matches!(e, Effect::RetireLockspace { ls, id: 1 } if *ls == name("a")),
                    )
                    .count()
            };
            if keep_orphans {
                assert!(disk_ops(&fx).is_empty() && retired(&fx) == 0, "{fx:?}");
                let fx = c.step(100 + fail + 30, Input::Tick);
                assert!(disk_ops(&fx).is_empty() && retired(&fx) == 0, "{fx:?}");
                assert_eq!(c.space_st(1).map(|st| st.phase), Some(Phase::Joined));
                continue;
            }
            let [(op, None, res)] = disk_ops(&fx)[..] else {
                panic!("one release of the orphan: {fx:?}")
            };
            assert_eq!(res, name("o"));
            assert_eq!(
                retired(&fx),
                0,
                "not while the orphan is on its way: {fx:?}"
            );
            // Nothing of it left once the orphan's release ended: retired then, once,
            // and kept listed for the shell.
            assert_eq!(retired(&disk_done(&mut c, 100 + fail + 2, op)), 1);
            assert_eq!(retired(&c.step(100 + fail + 3, Input::Tick)), 0);
            assert_eq!(
                c.space_st(1).map(|st| (st.phase, st.gone)),
                Some((Phase::Removing, false))
            );
            assert_eq!(retired(&c.step(100 + fail + 4, Input::Tick)), 0);
        }
    }

    /// The shell lists its lockspaces by id; a gone one's entry stays for late readers
    /// until [`MAX_GONE_SPACES`] newer gone ones push it out, and never counts as the
    /// lockspace of its name.
    #[test]
    fn the_shells_lockspaces_are_kept_by_id_and_gone_ones_pruned() {
        let mut c: Core<(), Held> = Core::new(40);
        let n = MAX_GONE_SPACES as u32 + 3;
        for id in 1..=n {
            c.add_space(id, name("ls"), IO_S);
            assert!(c.space(&name("ls")).is_some_and(|s| s.id == id));
            c.space_st_mut(id).expect("listed").gone = true;
            assert!(c.space(&name("ls")).is_none());
            c.check().expect("invariants");
        }
        c.add_space(n + 1, name("ls"), IO_S);
        let gone = c.spaces.iter().filter(|s| s.st.gone).count();
        assert_eq!(gone, MAX_GONE_SPACES - 1);
        assert!(c.space_st(1).is_none(), "the oldest gone one was pruned");
        assert!(c.space_st(n).is_some_and(|st| st.gone));
        assert!(c.space_st(n + 1).is_some_and(|st| !st.gone));
    }

    /// The shell's lockspace thread reports by id: a report for a gone lockspace (its
    /// fence thread's late verdict) touches neither it nor its successor of the same
    /// name; a renewal's time is the lease's, not the step's.
    #[test]
    fn lockspace_reports_go_by_id_and_a_gone_ones_are_ignored() {
        let mut c: Core<(), Held> = Core::new(40);
        c.add_space(1, name("ls"), IO_S);
        let g = disk_format::Geometry::ALL[0];
        assert!(c
            .step(100, Input::JoinStarted { id: 1, geometry: g })
            .is_empty());
        let st = c.space_st(1).expect("listed");
        assert_eq!((st.geometry, st.acquire_last_attempt), (Some(g), 100));
        c.step(130, Input::RenewalStarted { id: 1 });
        c.step(
            131,
            Input::RenewalOk {
                id: 1,
                last_success_s: 127,
                rec: rec(127),
            },
        );
        let st = c.space_st(1).expect("listed");
        assert_eq!((st.renewal_last_attempt, st.last_success_s), (130, 127));
        c.step(132, Input::DeltaReleasing { id: 1 });
        assert!(c.space_st(1).is_some_and(|st| st.releasing));
        c.space_st_mut(1).expect("listed").gone = true;
        c.add_space(2, name("ls"), IO_S);
        c.step(
            133,
            Input::RenewalFailed {
                id: 1,
                code: -EBADE_FOR_TEST,
                corrupt: true,
            },
        );
        c.step(133, Input::DeltaReleasing { id: 1 });
        assert!(c.space_st(1).is_some_and(|st| st.corrupt_result == 0));
        let successor = c.space_st(2).expect("listed");
        assert!(successor.corrupt_result == 0 && !successor.renew_fail && !successor.releasing);
    }
    const EBADE_FOR_TEST: i32 = 52;

    /// SET_EVENT and a REQUEST's host bit are the core's: what the next renewal writes
    /// follows them; an unknown lockspace or a bad host_id is refused with its reason.
    #[test]
    fn set_event_and_a_requests_bit_decide_what_the_renewals_write() {
        use crate::events::{HostEvent, SETEV_REPLACE_EVENT};
        let mut c: Core<(), Held> = Core::new(40);
        c.add_space(1, name("ls"), IO_S);
        let Effect::Accepted { ci } = c.step(
            100,
            Input::Connected {
                fd: -1,
                pid: 5,
                uid: 0,
                stream: None,
                replacing_own: false,
            },
        )[0] else {
            panic!("not accepted")
        };
        let he = |host_id, event| HostEvent {
            host_id,
            generation: 0,
            event,
            data: 9,
        };
        let set = |c: &mut Core<(), Held>, ls: &str, ev: HostEvent, flags| {
            let fx = c.step(
                100,
                Input::Request {
                    ci,
                    req: CoreRequest::SetEvent {
                        ls: name(ls),
                        he: ev,
                        flags,
                    },
                },
            );
            match &fx[..] {
                [Effect::Reply { reply, .. }] => (reply.rv, reply.why),
                other => panic!("{other:?}"),
            }
        };
        assert_eq!(set(&mut c, "ls", he(4, 1), 0), (0, None));
        assert_eq!(set(&mut c, "ls", he(4, 2), 0).0, -crate::errno::EBUSY);
        assert_eq!(set(&mut c, "ls", he(4, 2), SETEV_REPLACE_EVENT).0, 0);
        assert_eq!(set(&mut c, "nope", he(4, 2), 0).0, -crate::errno::ENOENT);
        assert_eq!(set(&mut c, "ls", he(2001, 2), 0).0, -crate::errno::EINVAL);
        // A REQUEST: refused until the lockspace is joined; then the shell writes the
        // record, and the owner it found gets its bit when the request asks for
        // something.
        let request = |c: &mut Core<(), Held>, force_mode| {
            c.step(
                100,
                Input::Request {
                    ci,
                    req: CoreRequest::RequestLease {
                        ls: name("ls"),
                        name: name("r"),
                        lver: 0,
                        next_lver: false,
                        force_mode,
                    },
                },
            )
        };
        let written = |c: &mut Core<(), Held>, fx: Vec<Effect<Held>>, result| {
            let [Effect::WriteRequest { op, ci: who, .. }] = fx[..] else {
                panic!("{fx:?}")
            };
            assert_eq!(who, ci);
            match &c.step(100, Input::RequestWritten { op, result })[..] {
                [Effect::Reply { reply, .. }] => reply.rv,
                other => panic!("{other:?}"),
            }
        };
        let refused = request(&mut c, 1);
        assert!(
            matches!(&refused[..], [Effect::Reply { reply, .. }] if reply.rv == -crate::errno::ENOSPC),
            "{refused:?}"
        );
        let st = c.space_st_mut(1).expect("listed");
        st.phase = Phase::Joined;
        st.add_result = Some(0);
        // Asks for nothing (lver 0, no force mode): no bit; a failed write: its code.
        let fx = request(&mut c, 0);
        assert_eq!(written(&mut c, fx, Ok(Some(7))), 0);
        let fx = request(&mut c, 1);
        assert_eq!(written(&mut c, fx, Err(-5)), -5);
        let fx = request(&mut c, 1);
        assert_eq!(written(&mut c, fx, Ok(Some(9))), 0);
        assert!(c.requests.is_empty());
        let input = c.space_st(1).expect("listed").outgoing.renew_input(100);
        assert_eq!((input.event.event, input.event.data), (2, 9));
        // Bits of host 4 (byte 0, bit 3) and host 9 (byte 1, bit 0).
        assert_eq!((input.bitmap[0], input.bitmap[1]), (1 << 3, 1));
    }

    /// ADD_LOCKSPACE's admission: a name here already (by phase and place), or a disk
    /// area taken by another name, refuses the listing and leaves nothing listed; a gone
    /// lockspace refuses nothing.
    #[test]
    fn a_lockspace_is_listed_only_where_no_other_is_by_name_or_disk_area() {
        let mut c: Core<(), Held> = Core::new(40);
        let at = |host_id: u64, path: &str, offset: u64| SpacePlace {
            host_id,
            path: path.into(),
            offset,
        };
        let list = |c: &mut Core<(), Held>, id, n, place| {
            c.list_space(id, n, place, IO_S, HostMonitor::new(1, 60))
        };
        assert_eq!(list(&mut c, 1, name("a"), at(1, "/dev/x", 0)), Ok(()));
        let refusals = [
            (name("a"), at(1, "/dev/x", 0), ListRefused::BeingAdded),
            (name("a"), at(2, "/dev/x", 0), ListRefused::OtherPlace),
            (name("a"), at(1, "/dev/y", 0), ListRefused::OtherPlace),
            (name("b"), at(1, "/dev/x", 0), ListRefused::DiskAreaTaken),
        ];
        for (n, place, why) in refusals.clone() {
            assert_eq!(list(&mut c, 9, n, place), Err(why));
        }
        c.space_st_mut(1).expect("listed").phase = Phase::Joined;
        assert_eq!(
            list(&mut c, 9, name("a"), at(1, "/dev/x", 0)),
            Err(ListRefused::Joined)
        );
        c.space_st_mut(1).expect("listed").phase = Phase::Removing;
        assert_eq!(
            list(&mut c, 9, name("a"), at(1, "/dev/x", 0)),
            Err(ListRefused::BeingRemoved)
        );
        assert_eq!(c.spaces.len(), 1, "a refusal lists nothing");
        // Another offset of the same disk is another area.
        assert_eq!(list(&mut c, 2, name("b"), at(1, "/dev/x", 1 << 20)), Ok(()));
        c.check().expect("invariants");
        // Once gone, its name and area are free again.
        c.space_st_mut(1).expect("listed").gone = true;
        assert_eq!(list(&mut c, 3, name("a"), at(1, "/dev/x", 0)), Ok(()));
        assert_eq!(c.space(&name("a")).map(|s| s.id), Some(3));
    }

    /// [`Input::Examined`] gives what [`examined_lease`] gives for the same tables (the
    /// daemon's form): the notice, then the kill order of the requested lease's holder
    /// only; and nothing once the lease is held at another lver.
    #[test]
    fn an_examined_request_steps_as_the_daemon_decides() {
        use client_lib::proto::SANLK_REQ_FORCE;
        let mut c = core(&["ls"], 100, &[(21, "ls", "r1"), (22, "ls", "r2")]);
        let input = |lver| Input::Examined {
            ls: name("ls"),
            name: name("r1"),
            lver,
            force_mode: SANLK_REQ_FORCE,
        };
        let mut direct = examined_lease(&c.tables, &name("ls"), &name("r1"), 1, SANLK_REQ_FORCE);
        // The step adds the lockspace's lease times (joined at 100).
        if let Some(Effect::RequestNotice { lease, .. }) = direct.first_mut() {
            *lease = Some(LeaseTimes {
                last_success_s: 100,
                expires_at_s: 100 + timeouts::id_renewal_fail_seconds(IO_S),
            });
        }
        let fx = c.step(101, input(1));
        assert_eq!(fx, direct);
        assert!(matches!(&fx[0], Effect::RequestNotice { pids, lver: 1, .. } if pids == &[21]));
        assert!(matches!(
            &fx[1..],
            [Effect::Kill {
                order: KillOrder::Signal {
                    pid: 21,
                    sig: SIGKILL,
                    ..
                },
                ..
            }]
        ));
        assert_eq!(c.step(102, input(2)), Vec::new());
    }

    /// sd_notify's STATUS= line: the first tick gives the summary, a tick gives it again
    /// only when it changed (a client registered, a lease taken, a lockspace joined).
    #[test]
    fn a_tick_gives_the_status_summary_when_it_changed() {
        let mut c = core(&["a"], 100, &[(11, "a", "r")]);
        c.last_status = None;
        let one = StatusSummary {
            lockspaces: 1,
            leases: 1,
            clients: 1,
        };
        assert_eq!(c.step(101, Input::Tick), vec![Effect::Status(one)]);
        assert_eq!(c.step(102, Input::Tick), Vec::new(), "unchanged");
        c.add_space(2, name("b"), IO_S);
        assert_eq!(
            c.step(103, Input::Tick),
            Vec::new(),
            "b is still being added"
        );
        c.space_st_mut(2).expect("listed").phase = Phase::Joined;
        c.space_st_mut(2).expect("listed").add_result = Some(0);
        c.space_st_mut(2).expect("listed").renewal_ok(103, rec(103));
        let two = StatusSummary {
            lockspaces: 2,
            ..one
        };
        assert_eq!(c.step(104, Input::Tick), vec![Effect::Status(two)]);
        assert_eq!(c.status_summary(), two);
    }

    /// The release-build check's schedule: every step while the table is small, every
    /// k-th step once it is large, so its cost per step stays about 256 resources' worth.
    #[test]
    fn the_cheap_check_runs_every_step_for_small_tables_and_every_kth_for_large() {
        assert_eq!(cheap_check_every(0), 1);
        assert_eq!(cheap_check_every(2 * CHEAP_CHECK_RESOURCES - 1), 1);
        assert_eq!(cheap_check_every(2 * CHEAP_CHECK_RESOURCES), 2);
        assert_eq!(cheap_check_every(10_000), 39);
        for n in [300, 1_000, 10_000, 100_000] {
            let per_step = n as u64 / cheap_check_every(n);
            assert!(
                per_step < 2 * CHEAP_CHECK_RESOURCES as u64,
                "{n} resources: {per_step} checked per step on average"
            );
        }
    }

    #[test]
    fn check_finds_a_notice_for_a_live_lease() {
        let mut c = core(&["ls"], 100, &[]);
        c.space_mut(&name("ls")).expect("ls").st.loss_notified = true;
        assert!(c.check().unwrap_err().contains("not lost"));
    }
}
