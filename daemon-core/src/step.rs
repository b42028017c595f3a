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
//!   [`Core::check_cheap`], in every build);
//! - the time a step is given never goes back: `now_s` is at least the last step's
//!   (asserted in every build; the shell reads its monotonic clock under the core's
//!   lock, so the order of its steps is the order of their times).

use std::collections::{BTreeMap, HashMap, HashSet};

use disk_format::Name;
use lease_core::monitor::HostMonitor;
use lease_core::timeouts;

use crate::clients::LeaseHold;
use crate::fencing::FenceSt;
use crate::io::{Effect, Input, LeaseTimes, OpId, SpacePlace, StatusSummary};
use crate::kill::examined_lease;
use crate::pending::{AdminCmd, Cmd, OpFor, PendingRequest};
use crate::space_state::{Phase, SpaceSt};
use crate::tables::Tables;
use crate::watches::Watches;

mod expiry;
mod lockspace_inputs;
mod shell_inputs;

use expiry::{expiry_pass, plant_examine_kills_lockspace, SpaceView};

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
    /// of the next ([`Input::ListSpace`]); `None` for the core's own and in tests.
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
    /// The time the last step was given ([`Core::step`] asserts it never goes back).
    pub(crate) last_now_s: u64,
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
            last_now_s: 0,
            watchdog_fire_s: 60,
            #[cfg(feature = "sim")]
            bug: None,
        }
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
    /// Each input goes to its path: the monitor's tick, a lockspace thread's report or
    /// fencing's (`lockspace_inputs`), a client's connection, request or end and the
    /// disk operations' completions (`commands`), an examined request, the watches.
    ///
    /// Panics when `now_s` is earlier than the last step's: every decision here (expiry,
    /// kill grace, release waits, examine periods) assumes time only goes forward.
    pub fn step(&mut self, now_s: u64, input: Input<S, H>) -> Vec<Effect<H>> {
        self.advance_time(now_s);
        let mut fx = Vec::new();
        match input {
            Input::Tick => self.tick(now_s, &mut fx),
            Input::RenewalOk {
                id,
                last_success_s,
                rec,
            } => self.renewal_ok(id, last_success_s, rec),
            Input::RenewalFailed { id, code, corrupt } => self.renewal_failed(id, code, corrupt),
            Input::HostsRead {
                id,
                read_at_ms,
                sectors,
                whole_area,
            } => self.hosts_read(now_s, id, read_at_ms, &sectors, whole_area, &mut fx),
            Input::FenceRegistered {
                id,
                key,
                preempt_cfg_s,
                acts,
            } => self.fence_registered(now_s, id, key, preempt_cfg_s, acts),
            Input::FenceUnregistered { id } => self.fence_unregistered(id),
            Input::FenceLook { id } => self.fence_look(now_s, id, &mut fx),
            Input::FenceKeysRead {
                id,
                read,
                read_at_ms,
            } => self.fence_keys_read(now_s, id, &read, read_at_ms, &mut fx),
            Input::PeerFenceDone {
                id,
                host_id,
                generation,
                outcome,
            } => self.peer_fence_done(id, host_id, generation, outcome, &mut fx),
            Input::JoinStarted { id, geometry } => self.join_started(now_s, id, geometry),
            Input::RenewalStarted { id } => self.renewal_started(now_s, id),
            Input::DeltaReleasing { id } => self.delta_releasing(id),
            Input::Connected {
                fd,
                pid,
                uid,
                stream,
                replacing_own,
            } => fx.push(self.connected(fd, pid, uid, stream, replacing_own)),
            Input::Request { ci, req } => self.request(now_s, ci, req, &mut fx),
            Input::Command { target, req } => self.begun_command(now_s, target, req, &mut fx),
            Input::DiskDone {
                op,
                result,
                failed_state,
            } => self.disk_done(now_s, op, result, failed_state, &mut fx),
            Input::JoinDone { ls, result } => self.join_done(now_s, ls, result, &mut fx),
            Input::Closed { ci } => self.client_gone(ci, &mut fx),
            Input::Examined {
                ls,
                name,
                lver,
                force_mode,
            } => fx = self.examined(&ls, &name, lver, force_mode),
            Input::KillpathEnded { pid, status } => self.tables.killpath_ended(pid, &status),
            Input::ReleaseTokens { ci, tokens, dying } => {
                self.release_tokens(ci, &tokens, dying, &mut fx);
            }
            Input::ReleaseOrphans { ls, name } => {
                self.release_orphans(&ls, &name, &mut fx);
            }
            Input::JoinEnded { id, result } => self.join_ended(now_s, id, result),
            Input::SetConfig {
                id,
                used_by_orphans,
                external_used,
            } => self.set_config(id, used_by_orphans, external_used),
            Input::LockspaceEnded { id } => self.lockspace_ended(id, &mut fx),
            Input::Shutdown => self.remove_all(&mut fx),
            Input::WatchTick => self.watch_tick(&mut fx),
            Input::WatchDropped { ci } => {
                self.watches.end(ci);
            }
            Input::RequestWritten { op, result } => {
                self.request_written(now_s, op, result, &mut fx);
            }
            Input::NoteCommand { ci, cmd } => self.tables.note_command(ci, cmd),
            Input::SetRestrict { ci, flags } => self.tables.set_restrict(ci, flags),
            Input::SetKillpath { ci, killpath } => fx.push(self.set_killpath(ci, killpath)),
            Input::StartCommand(target) => fx.push(self.start_command(target)),
            Input::FinishCommand { target } => fx.push(self.finish_command(target)),
            Input::AddPidClient { pid, uid, killpath } => {
                fx.push(self.pid_slot(pid, uid, killpath))
            }
            Input::DropFailedPidClient { ci } => fx.push(self.drop_failed_pid_client(ci)),
            Input::ListSpace(listing) => fx.push(self.list_space(listing)),
            Input::SetLvb { key, lvb } => fx.push(self.set_lvb(&key, &lvb)),
        }
        self.after_step(&mut fx);
        fx
    }

    /// [`Input::WatchTick`]: a heartbeat for every watch connection (none when no watch
    /// is open).
    fn watch_tick(&self, fx: &mut Vec<Effect<H>>) {
        if !self.watches.is_empty() {
            fx.push(Effect::WatchBeats {
                beats: self.watches.beats(&self.tables.clients),
            });
        }
    }

    /// Takes `now_s` as the step's time; panics when it is earlier than the last step's.
    fn advance_time(&mut self, now_s: u64) {
        assert!(
            now_s >= self.last_now_s,
            "Core::step: time went back, from {} s to {now_s} s (the shell must read its \
             monotonic clock under the core's lock)",
            self.last_now_s
        );
        self.last_now_s = now_s;
    }

    /// What every step ends with: its notices addressed to the watches their pids have
    /// now, its lockspaces' lease times stamped on them, and the invariant checks
    /// (skipped while a planted bug is active: then a broken invariant is the
    /// simulator's to report).
    fn after_step(&mut self, fx: &mut [Effect<H>]) {
        if self.active_bug() != Some(CorePlantedBug::NoticeMissesWatch) {
            // Every notice goes to the watches its pids have now, decided in the step
            // that gives it.
            self.watches.address(fx);
        }
        self.stamp_lease_times(fx);
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
    }

    /// [`Input::Connected`]: a slot for the connection ([`Effect::Accepted`]), or the
    /// reason there is none ([`Effect::Refused`]).
    fn connected(
        &mut self,
        fd: i32,
        pid: i32,
        uid: u32,
        stream: Option<S>,
        replacing_own: bool,
    ) -> Effect<H> {
        let added = if replacing_own {
            self.tables
                .clients
                .add_in_place_of_own(fd, pid, uid, stream)
        } else {
            self.tables.clients.add(fd, pid, uid, stream)
        };
        match added {
            Ok(ci) => Effect::Accepted { ci },
            Err(why) => Effect::Refused { why },
        }
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
        // Linear, not pairwise: this runs after every step, and a renewal of each of 100
        // lockspaces makes three steps.
        let mut live_names = HashSet::with_capacity(self.spaces.len());
        let mut ids = HashSet::with_capacity(self.spaces.len());
        for s in &self.spaces {
            // Names as sanlock compares them (`Name::same_as`: the bytes before the NUL).
            if !s.st.gone && !live_names.insert(s.name.as_bytes()) {
                return Err(format!("{:?}: listed twice", s.name));
            }
            if !ids.insert(s.id) {
                return Err(format!("{:?}: id {} listed twice", s.name, s.id));
            }
        }
        Ok(())
    }
}

/// How long an acquire waits for a release here of the same lease to end before it is
/// answered -EAGAIN: a release is a few sector I/Os, each bounded by the lockspace's io
/// timeout. The same wait for the core's ACQUIRE and the shell's.
pub fn release_wait_s(io_timeout_s: u64) -> u64 {
    4 * io_timeout_s.max(1)
}

#[cfg(test)]
mod tests;
