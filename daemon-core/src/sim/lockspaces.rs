//! The simulated lockspace's life on each host, in the two forms the core knows:
//!
//! - the daemon's (`daemon/src/lockspace.rs`, `daemon/src/state.rs`): ADD_LOCKSPACE lists
//!   the lockspace (`Input::ListSpace`, admitted or refused by the core) and starts its
//!   thread, which steps `JoinStarted`, registers our storage key when the run fences
//!   (`FenceRegistered`), joins (lease-core's delta acquire) and answers the add
//!   (`JoinEnded`), starts the fence thread, then renews (`RenewalStarted`, `HostsRead`,
//!   `RenewalOk` / `RenewalFailed`) until the core stops it (`Effect::StopLockspace` for
//!   REM_LOCKSPACE and a forced shutdown, `Effect::RetireLockspace` for a lost lockspace
//!   with no lease left) and no lease of it is left in the table; then
//!   `DeltaReleasing`, the delta release when the last renewal succeeded (our key
//!   removed, `FenceUnregistered`, unless the leave keeps it), and `LockspaceEnded`,
//!   which answers a waiting REM_LOCKSPACE;
//! - the core's own (`CoreRequest::AddLockspace` → `Effect::JoinLockspace` →
//!   `Input::JoinDone`, `Effect::LockspaceGone`), which the core still keeps: one daemon
//!   start in four on runs without fencing, and every start of the `core-lockspaces`
//!   model (the simulator before the daemon's lifecycle was driven: its seeds replay).
//!
//! Either way an administrator adds the lockspace again 5–20 s after it ended.
//!
//! Invariants:
//! - the shell's thread steps its inputs in the daemon's order, each keyed by the
//!   lockspace's id, and ends with `LockspaceEnded` exactly once (a daemon restart drops
//!   it with the core);
//! - our delta lease is released only after a successful last renewal of a lease not
//!   lost, and only once no lease of the lockspace is left in the table;
//! - the checker hears when the lockspace becomes usable (its add answered 0) and when
//!   it stops being so (stopped, retired, gone).

use std::cell::Cell;
use std::rc::Rc;

use lease_core::delta::{self, DeltaState, LockspaceParams, RenewInput};
use lease_core::io::Clock;
use lease_core::sim::world::SimClock;
use lease_core::{timeouts, HostMonitor};

use super::fence::{self, FencedDisk};
use super::{Sim, WATCHDOG_FIRE_S};
use crate::io::{Answer, CoreRequest, Input, JoinedLease, ListRefused, SpaceListing, SpacePlace};
use crate::space_state::RenewalRec;

/// How long a removal's first step lasts at least (the daemon's `REMOVAL_CHECK_MS`).
const REMOVAL_CHECK_MS: u64 = 200;

/// A join cut short by a removal or a forced shutdown (`SANLK_ERROR`, as the daemon's
/// `JoinError::Aborted`).
const JOIN_ABORTED: i32 = disk_format::rv::SANLK_ERROR;

/// The lockspace a host's shell lists now: its id, and the flag its stop sets.
pub struct Listed {
    pub id: u32,
    pub stop: Rc<Cell<bool>>,
}

/// What a lockspace thread of the shell works with.
struct SpaceIo {
    id: u32,
    stop: Rc<Cell<bool>>,
    disk: FencedDisk,
    clock: SimClock,
    params: LockspaceParams,
}

/// What one renewal attempt came to.
enum Renewal {
    Renewed,
    /// The renewal's I/O failed.
    Failed,
    /// The host's path is broken (a renewal fault): failed with no I/O.
    Faulted,
}

impl Sim {
    /// An administrator's ADD_LOCKSPACE on host `h`, as this daemon start runs it.
    pub(super) fn add_lockspace(self: &Rc<Self>, h: usize) {
        if self.hosts[h].shell.get() {
            self.list_lockspace(h);
        } else {
            self.add_core_lockspace(h);
        }
    }

    /// The core's own ADD_LOCKSPACE (`CoreRequest::AddLockspace`).
    fn add_core_lockspace(self: &Rc<Self>, h: usize) {
        let Some(ci) = self.hosts[h].admin_ci.get() else {
            return;
        };
        let io = u64::from(self.hosts[h].io_timeout);
        self.request(
            h,
            ci,
            CoreRequest::AddLockspace {
                ls: self.space,
                host_id: self.hosts[h].host_id,
                io_timeout_s: io,
            },
        );
    }

    /// The daemon's ADD_LOCKSPACE: the admission and listing (`Input::ListSpace`), then
    /// the lockspace's thread. Every third add is sent twice at once (an impatient
    /// administrator): the second must be refused as being added.
    fn list_lockspace(self: &Rc<Self>, h: usize) {
        let host = &self.hosts[h];
        let Some(ci) = host.admin_ci.get() else {
            return;
        };
        self.note(h, ci, client_lib::proto::SM_CMD_ADD_LOCKSPACE);
        let id = self.next_space_id(h);
        let Some(Answer::Listed(listed)) = self.answer(h, Input::ListSpace(self.listing(h, id)))
        else {
            return;
        };
        if let Err(why) = listed {
            self.world
                .log(|| format!("host{h} ADD_LOCKSPACE refused: {why:?}"));
            self.add_later(h);
            return;
        }
        let stop = Rc::new(Cell::new(false));
        *host.listed.borrow_mut() = Some(Listed {
            id,
            stop: stop.clone(),
        });
        host.in_core.set(true);
        let adds = host.adds.get();
        host.adds.set(adds + 1);
        if adds % 3 == 2 {
            self.add_again(h, ci);
        }
        self.spawn(h, Box::pin(space_thread(self.clone(), h, id, stop)));
    }

    /// A second ADD_LOCKSPACE of the same lockspace while the first is being added: the
    /// core refuses it (`ListRefused::BeingAdded`, -EINPROGRESS) and lists nothing.
    fn add_again(self: &Rc<Self>, h: usize, ci: u32) {
        self.note(h, ci, client_lib::proto::SM_CMD_ADD_LOCKSPACE);
        let id = self.next_space_id(h);
        let again = self.answer(h, Input::ListSpace(self.listing(h, id)));
        if again != Some(Answer::Listed(Err(ListRefused::BeingAdded))) {
            self.checker.borrow_mut().violate(
                self.now_ms(),
                format!("host{h}: a second ADD_LOCKSPACE during the add answered {again:?}"),
            );
        }
    }

    fn next_space_id(&self, h: usize) -> u32 {
        let host = &self.hosts[h];
        let id = host.next_space_id.get();
        host.next_space_id.set(id + 1);
        id
    }

    /// What the shell lists for host `h`'s lockspace under `id`: one disk area, our
    /// host_id, a new host monitor.
    fn listing(&self, h: usize, id: u32) -> SpaceListing {
        let host = &self.hosts[h];
        SpaceListing {
            id,
            name: self.space,
            place: SpacePlace {
                host_id: host.host_id,
                path: "/dev/dsim".into(),
                offset: 0,
            },
            io_timeout_s: u64::from(host.io_timeout),
            monitor: HostMonitor::new(host.host_id, WATCHDOG_FIRE_S),
        }
    }

    /// The lockspace is added again 5–20 s from now, as an administrator would.
    pub(super) fn add_later(self: &Rc<Self>, h: usize) {
        let ms = self.world.range(5_000, 20_000);
        self.after(h, ms, move |sim| sim.add_lockspace(h));
    }

    /// The core stopped (REM_LOCKSPACE, forced shutdown) or retired (lost, no lease
    /// left) host `h`'s listed lockspace `id`: its thread stops, and nothing more may be
    /// granted in it.
    pub(super) fn stop_listed(&self, h: usize, id: u32) {
        self.checker.borrow_mut().space_down(h);
        let listed = self.hosts[h].listed.borrow();
        match listed.as_ref().filter(|l| l.id == id) {
            Some(l) => l.stop.set(true),
            None => self.checker.borrow_mut().violate(
                self.now_ms(),
                format!("host{h}: the core stopped lockspace {id}, which the shell does not run"),
            ),
        }
    }

    /// The join of host `h`'s lockspace `id` ended (`Input::JoinEnded`): the core's
    /// answer to the add (0: joined and usable from now on).
    fn join_ended(self: &Rc<Self>, h: usize, id: u32, result: Result<JoinedLease, i32>) -> i32 {
        self.input(h, Input::JoinEnded { id, result });
        let rv = self.hosts[h]
            .core
            .borrow()
            .as_ref()
            .and_then(|c| c.space_st(id).and_then(|st| st.add_result))
            .unwrap_or(-crate::errno::ENOENT);
        if rv == 0 {
            self.checker.borrow_mut().space_up(h);
        }
        rv
    }

    /// Host `h`'s lockspace thread of `id` has ended (`Input::LockspaceEnded`): the
    /// lockspace is gone, and added again later.
    fn listed_ended(self: &Rc<Self>, h: usize, id: u32) {
        self.input(h, Input::LockspaceEnded { id });
        self.checker.borrow_mut().space_down(h);
        let host = &self.hosts[h];
        host.listed.borrow_mut().take();
        host.in_core.set(false);
        self.world.log(|| format!("host{h} lockspace {id} ended"));
        self.add_later(h);
    }

    /// Whether host `h`'s lockspace `id` is lost (or gone from the core).
    fn listed_lost(&self, h: usize, id: u32) -> bool {
        self.hosts[h]
            .core
            .borrow()
            .as_ref()
            .is_none_or(|c| c.space_st(id).is_none_or(|st| st.lease_lost()))
    }

    /// Whether a lease of the lockspace is in host `h`'s table.
    fn space_in_use(&self, h: usize) -> bool {
        self.hosts[h]
            .core
            .borrow()
            .as_ref()
            .is_some_and(|c| c.tables.space_in_use(&self.space))
    }

    /// One renewal of host `h`'s delta lease in lockspace `id`, stepped as the daemon's
    /// renewal thread steps it: `RenewalStarted`, then `HostsRead` and `RenewalOk`, or
    /// `RenewalFailed` (at once, with no I/O, while the host's path is broken).
    async fn renew_once(
        self: &Rc<Self>,
        h: usize,
        id: u32,
        (disk, clock, params): (&FencedDisk, &SimClock, &LockspaceParams),
        st: &mut DeltaState,
    ) -> Renewal {
        self.input(h, Input::RenewalStarted { id });
        if self.now_ms() < self.hosts[h].renew_fail_until.get() {
            self.input(
                h,
                Input::RenewalFailed {
                    id,
                    code: -crate::errno::EIO,
                    corrupt: false,
                },
            );
            return Renewal::Faulted;
        }
        let started = clock.now_ms();
        // What the core's events and REQUEST bits put in our delta sector.
        let input = self.hosts[h]
            .core
            .borrow()
            .as_ref()
            .and_then(|c| c.space_st(id))
            .map_or_else(RenewInput::default, |st| {
                st.outgoing.renew_input(clock.now_ms() / 1000)
            });
        let renewed = delta::renew(disk, clock, params, st, &input).await;
        if self.report_renewal(h, id, renewed, st, clock, started) {
            Renewal::Renewed
        } else {
            Renewal::Failed
        }
    }

    /// A renewal's outcome into host `h`'s core, as the daemon's renewal thread reports
    /// it: the sectors read and the new lease time, or the failure (a write the storage
    /// refused, fenced, loses the lease at once, as a corrupt one). Whether it renewed.
    fn report_renewal(
        self: &Rc<Self>,
        h: usize,
        id: u32,
        renewed: Result<delta::LockspaceSnapshot, lease_core::LeaseError>,
        st: &DeltaState,
        clock: &SimClock,
        started: u64,
    ) -> bool {
        match renewed {
            Ok(snap) => {
                self.input(
                    h,
                    Input::HostsRead {
                        id,
                        read_at_ms: snap.read_at_ms,
                        sectors: snap.sectors,
                        whole_area: snap.whole_area,
                    },
                );
                self.input(
                    h,
                    Input::RenewalOk {
                        id,
                        last_success_s: st.last_success_ms / 1000,
                        rec: RenewalRec {
                            timestamp: st.leader.timestamp,
                            read_ms: clock.now_ms().saturating_sub(started),
                            write_ms: 0,
                            write_sent_ms: st.last_success_ms,
                            ended_ms: clock.now_ms(),
                        },
                    },
                );
                true
            }
            Err(e) => {
                self.input(
                    h,
                    Input::RenewalFailed {
                        id,
                        code: e.sanlk_code(),
                        corrupt: e.is_corrupt() || e.is_fenced(),
                    },
                );
                false
            }
        }
    }
}

/// An administrator removes the lockspace of host `h` at `at` (global ms): REM_LOCKSPACE,
/// waiting for its end (naming the lockspace the shell listed, as the daemon's matches
/// it by its disk); it is added again a while after it went.
pub(super) async fn remove_at(sim: Rc<Sim>, h: usize, at: u64) {
    sim.sleep(h, at.saturating_sub(sim.now_ms())).await;
    let host = &sim.hosts[h];
    let Some(ci) = host.admin_ci.get() else {
        return;
    };
    if !host.in_core.get() {
        return;
    }
    sim.world.log(|| format!("host{h} REM_LOCKSPACE"));
    let id = host.listed.borrow().as_ref().map(|l| l.id);
    sim.request(
        h,
        ci,
        CoreRequest::RemLockspace {
            ls: sim.space,
            id,
            unused_only: false,
            wait: true,
        },
    );
}

/// Host `h`'s join of the lockspace, tried again after a pause until it succeeds (the
/// core's own lifecycle).
async fn join_until_done(
    sim: &Sim,
    h: usize,
    disk: &FencedDisk,
    clock: &SimClock,
    params: &LockspaceParams,
) -> DeltaState {
    loop {
        match delta::acquire(disk, clock, params).await {
            Ok(st) => break st,
            Err(e) => {
                sim.world.log(|| format!("host{h} join: {e}"));
                let ms = sim.world.range(500, 3_000);
                clock.sleep_ms(ms).await;
            }
        }
    }
}

/// The shell's side of the core's own [`crate::io::Effect::JoinLockspace`]: the
/// delta-lease join, then renewals every id_renewal_seconds until the lockspace leaves
/// the core (released when it went cleanly) or the core finds its lease lost.
pub(super) async fn core_lockspace_task(sim: Rc<Sim>, h: usize) {
    let host = &sim.hosts[h];
    let Some(params) = host.params.borrow().clone() else {
        return;
    };
    let (disk, clock) = (sim.disk(h), sim.clock(h));
    let seq = host.join_seq.get();
    // The lockspace's id in the core: the join and the renewals report by it.
    let Some(id) = host
        .core
        .borrow()
        .as_ref()
        .and_then(|c| c.space(&sim.space).map(|s| s.id))
    else {
        return;
    };
    sim.input(
        h,
        Input::JoinStarted {
            id,
            geometry: params.geometry,
        },
    );
    let mut st = join_until_done(&sim, h, &disk, &clock, &params).await;
    host.generation.set(st.generation());
    sim.world
        .log(|| format!("host{h} JOINED gen {}", st.generation()));
    sim.input(
        h,
        Input::JoinDone {
            ls: sim.space,
            result: Ok(()),
        },
    );
    sim.checker.borrow_mut().space_up(h);
    sim.set_config(h, id);
    let io = u64::from(params.io_timeout);
    let renew_ms = timeouts::id_renewal_seconds(io) * 1000;
    loop {
        let now = clock.now_ms();
        let due = st.last_success_ms + renew_ms;
        if now < due {
            clock.sleep_ms(due - now).await;
        }
        if host.join_seq.get() != seq {
            return;
        }
        if !host.in_core.get() {
            if !host.gone_lost.get() {
                // Removed: our delta lease is released, as the daemon does.
                let _ = delta::release(&disk, &params, &st).await;
                sim.world.log(|| format!("host{h} delta lease released"));
            }
            return;
        }
        if sim.listed_lost(h, id) {
            // Other hosts must see it expire: no more renewals.
            return;
        }
        match sim
            .renew_once(h, id, (&disk, &clock, &params), &mut st)
            .await
        {
            Renewal::Renewed => {}
            Renewal::Failed => clock.sleep_ms(500).await,
            Renewal::Faulted => clock.sleep_ms(1_000).await,
        }
    }
}

/// The thread of host `h`'s listed lockspace `id` (the daemon's `space_thread`): the
/// join and its answer, the fence thread, renewals until stopped and unused, the leave.
async fn space_thread(sim: Rc<Sim>, h: usize, id: u32, stop: Rc<Cell<bool>>) {
    let Some(params) = sim.hosts[h].params.borrow().clone() else {
        return;
    };
    let io = SpaceIo {
        id,
        stop,
        disk: sim.disk(h),
        clock: sim.clock(h),
        params,
    };
    sim.input(
        h,
        Input::JoinStarted {
            id,
            geometry: io.params.geometry,
        },
    );
    let mut st = match join_listed(&sim, h, &io).await {
        Ok(st) => st,
        Err(rv) => {
            sim.world.log(|| format!("host{h} join failed: {rv}"));
            sim.join_ended(h, id, Err(rv));
            sim.listed_ended(h, id);
            return;
        }
    };
    sim.hosts[h].generation.set(st.generation());
    let lease = JoinedLease {
        generation: st.generation(),
        last_success_s: st.last_success_ms / 1000,
        write_sent_ms: st.last_success_ms,
        ended_ms: io.clock.now_ms(),
    };
    // Removed just as the join completed: answered -1, and released below.
    if sim.join_ended(h, id, Ok(lease)) == 0 {
        sim.world
            .log(|| format!("host{h} JOINED gen {} (lockspace {id})", st.generation()));
        sim.set_config(h, id);
    }
    let fenced = sim.hosts[h]
        .core
        .borrow()
        .as_ref()
        .is_some_and(|c| c.space_fence(id).is_some());
    if fenced {
        let thread = fence::fence_thread(sim.clone(), h, id, io.stop.clone());
        sim.spawn(h, Box::pin(thread));
    }
    renew_listed(&sim, h, &io, &mut st).await;
    leave_listed(&sim, h, &io, &st).await;
}

/// The join of a listed lockspace: our storage key registered first when the run fences
/// (`FenceRegistered`), then lease-core's delta acquire (a failure removes the key,
/// `FenceUnregistered`), then the key checked against the generation written. The
/// delta lease, or the add's answer (a stop before the acquire: `SANLK_ERROR`).
async fn join_listed(sim: &Rc<Sim>, h: usize, io: &SpaceIo) -> Result<DeltaState, i32> {
    let stopped = |code: i32| if io.stop.get() { JOIN_ABORTED } else { code };
    if io.stop.get() {
        return Err(JOIN_ABORTED);
    }
    let key = if sim.fencing {
        Some(register_key(sim, h, io).await.map_err(stopped)?)
    } else {
        None
    };
    let st = match delta::acquire(&io.disk, &io.clock, &io.params).await {
        Ok(st) => st,
        Err(e) => {
            if let Some(key) = key {
                fence::unregister(sim, h, io.id, key).await;
            }
            return Err(stopped(e.sanlk_code()));
        }
    };
    if let Some(key) = key {
        if let Some(new) = fence::confirm_generation(sim, h, st.generation(), key).await {
            sim.fence_registered(h, io.id, new);
        }
    }
    Ok(st)
}

/// Reads our host_id's record and registers the key of the generation the join will
/// write ([`fence::register_for_join`]), then tells the core.
async fn register_key(sim: &Rc<Sim>, h: usize, io: &SpaceIo) -> Result<u64, i32> {
    let host_id = sim.hosts[h].host_id;
    let prev = delta::read_host_record(&io.disk, &io.params, host_id)
        .await
        .map_err(|e| e.sanlk_code())?;
    let key = fence::register_for_join(sim, h, &prev, &io.stop)
        .await
        .ok_or(fence::FENCE_JOIN_RV)?;
    sim.fence_registered(h, io.id, key);
    Ok(key)
}

/// Renewals of a listed lockspace, as the daemon's `renew_loop`: the first right after
/// the join, then every id_renewal_seconds (500 ms after a failure); none once the lease
/// is lost. Returns once stopped, [`REMOVAL_CHECK_MS`] after the stop at least, with no
/// lease of the lockspace left in the table.
async fn renew_listed(sim: &Rc<Sim>, h: usize, io: &SpaceIo, st: &mut DeltaState) {
    let renew_ms = timeouts::id_renewal_seconds(u64::from(io.params.io_timeout)) * 1000;
    let mut next_attempt_ms = st.last_success_ms;
    let mut stop_seen_ms: Option<u64> = None;
    loop {
        let now_ms = io.clock.now_ms();
        if io.stop.get() {
            let seen = *stop_seen_ms.get_or_insert(now_ms);
            if now_ms >= seen + REMOVAL_CHECK_MS && !sim.space_in_use(h) {
                return;
            }
        }
        let lost = sim.listed_lost(h, io.id);
        if lost || now_ms < next_attempt_ms {
            let wait_ms = if lost || io.stop.get() {
                100
            } else {
                (next_attempt_ms - now_ms).clamp(1, 1_000)
            };
            io.clock.sleep_ms(wait_ms).await;
            continue;
        }
        let ios = (&io.disk, &io.clock, &io.params);
        next_attempt_ms = match sim.renew_once(h, io.id, ios, st).await {
            Renewal::Renewed => st.last_success_ms + renew_ms,
            Renewal::Failed | Renewal::Faulted => io.clock.now_ms() + 500,
        };
    }
}

/// The end of a listed lockspace's thread: `DeltaReleasing`; the delta release after a
/// successful last renewal of a lease not lost, with our key removed unless the leave
/// keeps it; then `LockspaceEnded`.
async fn leave_listed(sim: &Rc<Sim>, h: usize, io: &SpaceIo, st: &DeltaState) {
    let id = io.id;
    sim.input(h, Input::DeltaReleasing { id });
    let (lost, ok, key) = sim.hosts[h]
        .core
        .borrow()
        .as_ref()
        .and_then(|c| {
            let st = c.space_st(id)?;
            let key = c.space_fence(id).map(|f| f.our_key());
            Some((st.lease_lost(), st.last_renewal_ok, key))
        })
        .unwrap_or((true, false, None));
    if !lost && ok && st.last_renewal_ok {
        match delta::release(&io.disk, &io.params, st).await {
            Ok(true) => {
                sim.world.log(|| format!("host{h} delta lease released"));
                if let Some(key) = key {
                    if fence::keep_key_at_leave(sim, h, id, key) {
                        sim.world.log(|| format!("host{h} fence: our key stays"));
                    } else {
                        fence::unregister(sim, h, id, key).await;
                    }
                }
            }
            other => sim
                .world
                .log(|| format!("host{h} delta lease not released: {other:?}")),
        }
    }
    sim.listed_ended(h, id);
}

impl Sim {
    /// Host `h` registered storage key `key` for lockspace `id` (`FenceRegistered`).
    fn fence_registered(self: &Rc<Self>, h: usize, id: u32, key: u64) {
        let host = &self.hosts[h];
        let (acts, preempt_cfg_s) = (host.fence_acts, host.fence_preempt_s);
        self.input(
            h,
            Input::FenceRegistered {
                id,
                key,
                preempt_cfg_s,
                acts,
            },
        );
    }
}
