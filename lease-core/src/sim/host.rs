//! The programs a simulated host runs: its lockspace thread (join, renew, leave) and
//! client workers that acquire, hold, convert and release resource leases.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use disk_format::Geometry;

use super::checker::Holder;
use super::world::{SimClock, SimDisk, World};
use crate::delta::{self, LockspaceParams, RenewInput};
use crate::disks::{left_out, LeaseDisks, LeaseOn, PathState, Replicas};
use crate::io::Clock;
use crate::monitor::HostMonitor;
use crate::paxos::{self, AcquireOptions, HostContext, Mode, PlantedBug, ResourceParams};
use crate::reads::{ReadMode, RenewalReads};
use crate::timeouts;
use disk_format::request::REQ_FORCE;

/// State shared by the tasks of one incarnation of one host (its "memory").
pub(crate) struct HostCtx {
    pub world: Rc<World>,
    pub holder: Holder,
    pub params: LockspaceParams,
    /// The lockspace's disk (and a single-disk lease's).
    pub disk: SimDisk,
    /// The multi-disk model's lease disks (empty otherwise), `region_bytes` apart.
    pub lease_disks: Vec<SimDisk>,
    pub region_bytes: u64,
    pub clock: SimClock,
    pub monitor: RefCell<HostMonitor>,
    pub generation: Cell<u64>,
    pub last_success_ms: Cell<u64>,
    pub joined: Cell<bool>,
    pub leaving: Cell<bool>,
    pub left: Cell<bool>,
    pub failed: Cell<bool>,
    pub active_workers: Cell<usize>,
    pub busy: RefCell<Vec<bool>>,
    pub resources: Vec<ResourceParams>,
    pub bug: Option<PlantedBug>,
    /// Hosts whose bit we set in our delta-lease bitmap (requests), until our time (ms).
    pub requests: RefCell<Vec<(u64, u64)>>,
    /// Bumped when a renewal finds our bit in another host's bitmap.
    pub examine_seq: Cell<u64>,
    /// What our renewals read: the head, or the whole area (a sanlock peer).
    pub read_mode: ReadMode,
}

impl HostCtx {
    /// The disks of lease `res` for one operation.
    fn lease(&self, res: &ResourceParams) -> LeaseOn<'_, SimDisk> {
        if self.lease_disks.is_empty() {
            return LeaseOn::One(&self.disk);
        }
        let list = self
            .lease_disks
            .iter()
            .enumerate()
            .map(|(k, d)| (d, res.disk_offset + k as u64 * self.region_bytes))
            .collect();
        let on = match Replicas::new(list) {
            Ok(r) if self.bug == Some(PlantedBug::AcceptMinority) => {
                LeaseOn::Many(r.plant_accept_minority())
            }
            Ok(r) => LeaseOn::Many(r),
            Err(_) => return LeaseOn::One(&self.disk),
        };
        // The daemon's rule across operations: leave out what this host's path records
        // say (`lockd_diskio::health`, `disks::left_out`).
        let now = self.world.now();
        let states: Vec<PathState> = self
            .lease_disks
            .iter()
            .map(|d| {
                let hosts = self.world.hosts.borrow();
                hosts[self.holder.host]
                    .lease_paths
                    .get(d.index)
                    .map(|p| p.state(now))
                    .unwrap_or_default()
            })
            .collect();
        for (i, out) in left_out(&states).into_iter().enumerate() {
            if out {
                self.world
                    .log(|| format!("h{} leaves lease disk {} out", self.holder.host, i));
                on.drop_disk(i);
            }
        }
        on
    }

    fn io(&self) -> u64 {
        u64::from(self.params.io_timeout)
    }

    /// True while renewals are recent enough that sanlock would let clients acquire.
    fn lockspace_ok(&self) -> bool {
        self.joined.get()
            && !self.failed.get()
            && self.clock.now_ms()
                < self.last_success_ms.get() + timeouts::id_renewal_fail_seconds(self.io()) * 1000
    }

    fn arm_watchdog(&self, timestamp_s: u64) {
        let mut hosts = self.world.hosts.borrow_mut();
        let h = &mut hosts[self.holder.host];
        h.wd_armed = true;
        h.wd_expire_local_ms = (timestamp_s + timeouts::id_renewal_fail_seconds(self.io())) * 1000;
    }
}

/// The lockspace thread: acquire our host_id, renew every 2D, fail after 8D without a
/// successful renewal (or at once on a corrupt result), leave cleanly when asked.
pub(crate) async fn lockspace_task(ctx: Rc<HostCtx>) {
    let st = loop {
        let acquired = if ctx.bug == Some(PlantedBug::OwnNameShortDelay) {
            delta::acquire_planted_own_name_short_delay(&ctx.disk, &ctx.clock, &ctx.params).await
        } else {
            delta::acquire(&ctx.disk, &ctx.clock, &ctx.params).await
        };
        match acquired {
            Ok(st) => break st,
            Err(_) => {
                let ms = ctx.world.range(500, 5_000);
                ctx.clock.sleep_ms(ms).await;
            }
        }
    };
    let mut st = st;
    ctx.world.checker.borrow_mut().host_id_acquired(
        ctx.world.now(),
        ctx.holder,
        ctx.params.host_id,
    );
    ctx.world.stats.borrow_mut().joins += 1;
    ctx.world.log(|| {
        format!(
            "host{} JOINED host_id {} gen {} via {:?}",
            ctx.holder.host,
            ctx.params.host_id,
            st.generation(),
            st.path
        )
    });
    ctx.generation.set(st.generation());
    ctx.world.checker.borrow_mut().host_joined(
        ctx.world.now(),
        ctx.params.host_id,
        st.generation(),
    );
    ctx.last_success_ms.set(st.last_success_ms);
    ctx.arm_watchdog(st.leader.timestamp);
    ctx.monitor
        .borrow_mut()
        .hold_shared_after_join(ctx.clock.now_s());
    ctx.joined.set(true);
    let renew_ms = timeouts::id_renewal_seconds(ctx.io()) * 1000;
    let fail_ms = timeouts::id_renewal_fail_seconds(ctx.io()) * 1000;
    let area_sectors = ctx.params.monitored_sectors();
    let mut reads = RenewalReads::new(ctx.read_mode, ctx.params.geometry);
    if ctx.bug == Some(PlantedBug::SkipFullRead) {
        reads.plant_never_full();
    }
    // World times at which our latest successful renewals issued their reads: once
    // full_every + 1 of them started after a join, one read the whole area.
    let mut issued: std::collections::VecDeque<u64> = std::collections::VecDeque::new();
    loop {
        let now = ctx.clock.now_ms();
        let due = st.last_success_ms + renew_ms;
        if now < due {
            ctx.clock.sleep_ms(due - now).await;
        }
        if ctx.leaving.get() && ctx.active_workers.get() == 0 {
            ctx.world
                .checker
                .borrow_mut()
                .host_id_released(ctx.holder, ctx.params.host_id);
            let _ = delta::release(&ctx.disk, &ctx.params, &st).await;
            ctx.world.hosts.borrow_mut()[ctx.holder.host].wd_armed = false;
            ctx.left.set(true);
            return;
        }
        let mut input = RenewInput::default();
        {
            let now = ctx.clock.now_ms();
            let mut reqs = ctx.requests.borrow_mut();
            reqs.retain(|&(_, until)| until > now);
            for &(h, _) in reqs.iter() {
                let i = (h - 1) as usize;
                if let Some(b) = input.bitmap.get_mut(i / 8) {
                    *b |= 1 << (i % 8);
                }
            }
        }
        let read_sectors = reads.next_read_sectors(
            ctx.params.geometry,
            ctx.params.host_id,
            ctx.monitor.borrow().highest_ever_used(),
            area_sectors,
        );
        let issued_at = ctx.world.now();
        let renewed = delta::renew_reading(
            &ctx.disk,
            &ctx.clock,
            &ctx.params,
            &mut st,
            &input,
            read_sectors,
        )
        .await;
        match renewed {
            Ok(snap) => {
                reads.read_done(snap.sectors.len() as u64, area_sectors);
                let notes = ctx.monitor.borrow_mut().observe_read(
                    snap.read_at_s,
                    &snap.sectors,
                    snap.whole_area,
                );
                issued.push_back(issued_at);
                if issued.len() > reads.full_every() as usize + 1 {
                    issued.pop_front();
                }
                if issued.len() == reads.full_every() as usize + 1 {
                    let monitor = ctx.monitor.borrow();
                    ctx.world.checker.borrow_mut().check_view(
                        ctx.world.now(),
                        ctx.holder,
                        ctx.params.host_id,
                        issued[0],
                        |h| {
                            crate::HostObserver::observation(&*monitor, h)
                                .map_or(0, |o| o.owner_generation)
                        },
                    );
                }
                if !notes.is_empty() {
                    ctx.examine_seq.set(ctx.examine_seq.get() + 1);
                }
                ctx.last_success_ms.set(st.last_success_ms);
                ctx.arm_watchdog(st.leader.timestamp);
            }
            Err(e) if e.is_corrupt() => {
                ctx.failed.set(true);
                return;
            }
            Err(_) => ctx.clock.sleep_ms(500).await,
        }
        if ctx.clock.now_ms() >= st.last_success_ms + fail_ms {
            ctx.failed.set(true);
            return;
        }
    }
}

/// A client: repeatedly pick a resource, acquire it (ex or sh, sometimes with
/// OWNER_NOWAIT or an LVB), hold it, maybe convert, release.
pub(crate) async fn worker_task(ctx: Rc<HostCtx>) {
    ctx.active_workers.set(ctx.active_workers.get() + 1);
    worker_loop(&ctx).await;
    ctx.active_workers.set(ctx.active_workers.get() - 1);
}

async fn worker_loop(ctx: &Rc<HostCtx>) {
    let w = &ctx.world;
    loop {
        let pause = w.range(50, 2_000);
        ctx.clock.sleep_ms(pause).await;
        if ctx.leaving.get() {
            return;
        }
        if !ctx.lockspace_ok() {
            continue;
        }
        let r = w.rand(ctx.resources.len() as u64) as usize;
        if ctx.busy.borrow()[r] {
            continue;
        }
        ctx.busy.borrow_mut()[r] = true;
        one_cycle(ctx, r).await;
        ctx.busy.borrow_mut()[r] = false;
    }
}

async fn one_cycle(ctx: &Rc<HostCtx>, r: usize) {
    let w = &ctx.world;
    let res = &ctx.resources[r];
    let mode = if w.rand(100) < 30 {
        Mode::Shared
    } else {
        Mode::Exclusive
    };
    let opts = AcquireOptions {
        mode,
        owner_nowait: w.rand(100) < 20,
        lvb: w.rand(100) < 20,
        planted_bug: ctx.bug,
        ..AcquireOptions::default()
    };
    let host = HostContext {
        lockspace_disk: &ctx.disk,
        lockspace: &ctx.params,
        generation: ctx.generation.get(),
        observer: &ctx.monitor,
    };
    let mut token = match paxos::acquire(&ctx.lease(res), &ctx.clock, &host, res, &opts).await {
        Ok(t) => t,
        Err(e) => {
            w.log(|| format!("host{} acquire res{r} {mode:?} -> {e}", ctx.holder.host));
            if let crate::LeaseError::IdLive { .. } = e {
                if w.rand(100) < 25 {
                    request_lease(ctx, res).await;
                }
            }
            *w.stats
                .borrow_mut()
                .acquire_errors
                .entry(e.sanlk_code())
                .or_default() += 1;
            return;
        }
    };
    w.checker
        .borrow_mut()
        .acquired(w.now(), ctx.holder, r, token.mode, token.lver());
    w.stats.borrow_mut().acquisitions += 1;
    w.log(|| {
        format!(
            "host{} ACQUIRED res{r} {:?} lver {} gen {}",
            ctx.holder.host,
            token.mode,
            token.lver(),
            token.generation
        )
    });
    let hold = w.range(100, 8_000);
    hold_lease(ctx, &token, hold).await;
    if token.lvb.is_some() && token.mode == Mode::Exclusive {
        let data = w.range(1, u64::MAX - 1).to_le_bytes();
        let _ = token.set_lvb(&data);
    }
    if w.rand(100) < 15 && ctx.lockspace_ok() && !ctx.leaving.get() {
        let to = match token.mode {
            Mode::Exclusive => Mode::Shared,
            Mode::Shared => Mode::Exclusive,
        };
        if to == Mode::Shared {
            // A downgrade takes effect when asked for.
            w.checker
                .borrow_mut()
                .converted(w.now(), ctx.holder, r, to, token.lver());
        }
        let on = ctx.lease(&token.resource);
        let r_conv = paxos::convert(&on, &ctx.clock, &host, &mut token, to, true).await;
        w.log(|| {
            format!(
                "host{} convert res{r} -> {to:?}: {r_conv:?}",
                ctx.holder.host
            )
        });
        if r_conv.is_ok() && to == Mode::Exclusive {
            w.checker
                .borrow_mut()
                .converted(w.now(), ctx.holder, r, token.mode, token.lver());
        }
        if r_conv.is_ok() {
            let hold = w.range(100, 4_000);
            ctx.clock.sleep_ms(hold).await;
        }
    }
    w.checker.borrow_mut().released(ctx.holder, r);
    w.log(|| format!("host{} RELEASE res{r} {:?}", ctx.holder.host, token.mode));
    for _ in 0..3 {
        match paxos::release(&ctx.lease(&token.resource), &ctx.clock, &token).await {
            Ok(()) => break,
            Err(crate::LeaseError::Io { .. }) => {
                ctx.clock.sleep_ms(ctx.io() * 1000).await;
            }
            Err(_) => break,
        }
    }
}

/// Asks the owner of a lease to give it up: a forced request, then our bitmap names the
/// owner for set_bitmap_seconds.
async fn request_lease(ctx: &Rc<HostCtx>, res: &ResourceParams) {
    let w = &ctx.world;
    let out = paxos::request(&ctx.lease(res), res, paxos::RequestLver::Next, REQ_FORCE).await;
    w.log(|| {
        format!(
            "host{} request {:?}: {out:?}",
            ctx.holder.host,
            res.resource_name.to_text()
        )
    });
    if let Ok(paxos::RequestOutcome {
        owner_id: Some(owner),
        ..
    }) = out
    {
        let until = ctx.clock.now_ms() + timeouts::set_bitmap_seconds(ctx.io()) * 1000;
        ctx.requests.borrow_mut().push((owner, until));
        w.stats.borrow_mut().requests += 1;
    }
}

/// Holds a lease for `ms`, examining it whenever a renewal brought a notification; a
/// forced request for a newer version ends the hold early (the "client" is killed).
async fn hold_lease(ctx: &Rc<HostCtx>, token: &paxos::Token, ms: u64) {
    let start = ctx.clock.now_ms();
    let mut seen = ctx.examine_seq.get();
    while ctx.clock.now_ms() < start + ms {
        ctx.clock.sleep_ms(500).await;
        if ctx.examine_seq.get() != seen {
            seen = ctx.examine_seq.get();
            if let Ok(Some(_)) = paxos::examine(&ctx.lease(&token.resource), token).await {
                ctx.world.stats.borrow_mut().forced_releases += 1;
                ctx.world
                    .log(|| format!("host{} examine: forced release", ctx.holder.host));
                return;
            }
        }
    }
}

/// Parameters of one simulated lockspace and its resources.
pub(crate) fn resource_params(
    geometry: Geometry,
    space: &disk_format::Name,
    index: usize,
    io_timeout: u16,
    num_hosts: u64,
) -> ResourceParams {
    ResourceParams {
        space_name: *space,
        resource_name: disk_format::Name::new(&format!("res{index}"))
            .unwrap_or(disk_format::Name::EMPTY),
        disk_offset: (index as u64 + 1) * geometry.align_bytes(),
        geometry,
        io_timeout,
        num_hosts_hint: num_hosts,
    }
}
