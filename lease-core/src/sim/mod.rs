//! The deterministic multi-host simulator behind `lockd-sim` (see `docs/algorithms.md`).
//!
//! One seed = one run: 2–16 hosts share one in-memory disk image holding a lockspace and a
//! few resource leases. Every host runs the real [`crate::delta`] and [`crate::paxos`] code
//! as futures over a simulated disk and clock; a single-threaded executor
//! advances virtual time from event to event, so a run is a pure function of its seed and
//! its configuration, and takes milliseconds of wall time.

pub mod checker;
pub mod cli;
pub mod fence;
mod host;
pub mod rng;
pub mod world;

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Waker};

use disk_format::area::{format_lockspace_area, format_resource_area, ResourceInit};
use disk_format::{Geometry, Name};

use self::checker::Holder;
use self::host::{lockspace_task, resource_params, worker_task, HostCtx};
use self::rng::Rng;
pub use self::world::Stats;
use self::world::{DiskFault, DiskFaultKind, Ev, SimClock, SimDisk, World};
use crate::delta::LockspaceParams;
use crate::monitor::HostMonitor;
use crate::paxos::PlantedBug;
use crate::reads::ReadMode;
use crate::timeouts;

/// The lowest of the far host_ids some hosts take: beyond the head that renewals read
/// while only host_ids up to 16 are in use (32 sectors).
const HIGH_HOST_ID_BASE: u64 = 40;

/// Clock rate bound: every host clock runs within ±this many parts per million.
pub const CLOCK_PPM_BOUND: i64 = 1_000;

/// What one simulation run looks like.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimConfig {
    /// Number of hosts (2..=16).
    pub hosts: usize,
    /// Virtual seconds to simulate.
    pub duration_s: u64,
    /// A deliberately broken algorithm, to prove the checker can fail.
    pub planted_bug: Option<PlantedBug>,
    /// Record a human-readable trace of leases and faults.
    pub trace: bool,
    /// lockd hosts' renewals read the head of the area (`crate::reads::ReadMode::Head`,
    /// experimental) instead of the whole of it; sanlock peers always read the whole.
    pub head_reads: bool,
    /// Resource leases on several disks (sanlock's num_disks): 2–4 disks drawn per seed,
    /// each failing (EIO) and stalling (past the I/O timeout) on its own and on single
    /// hosts' paths; the lockspace keeps a disk of its own.
    pub multi_disk: bool,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            hosts: 4,
            duration_s: 600,
            planted_bug: None,
            trace: false,
            head_reads: false,
            multi_disk: false,
        }
    }
}

/// Result of one seed.
#[derive(Debug, Clone)]
pub struct SimReport {
    /// The seed.
    pub seed: u64,
    /// Counters.
    pub stats: Stats,
    /// Invariant violations (empty = pass).
    pub violations: Vec<String>,
    /// The trace, when asked for.
    pub trace: Vec<String>,
}

/// Names a planted bug on the command line.
pub fn parse_planted_bug(name: &str) -> Option<PlantedBug> {
    match name {
        "skip-phase2" => Some(PlantedBug::SkipPhase2),
        "no-host-dead-wait" => Some(PlantedBug::NoHostDeadWait),
        "stale-known-hosts" => Some(PlantedBug::StaleKnownHosts),
        "own-name-short-delay" => Some(PlantedBug::OwnNameShortDelay),
        "no-shared-hold" => Some(PlantedBug::NoSharedHold),
        "skip-full-read" => Some(PlantedBug::SkipFullRead),
        "accept-minority" => Some(PlantedBug::AcceptMinority),
        _ => None,
    }
}

type Task = Pin<Box<dyn Future<Output = ()>>>;

struct Slot {
    host: usize,
    fut: Option<Task>,
}

struct HostPlan {
    host_id: u64,
    io_timeout: u16,
    stable_name: bool,
    /// Reads every dblock in each ballot, as a sanlock host does (a mixed cluster).
    read_all_dblocks: bool,
    /// Models a sanlock 3.8.5 peer's judgement of shared holders: from its cached view of
    /// their delta leases (`HostMonitor::sanlock_host_live`). (Whether it reads every
    /// dblock is drawn as for any host.)
    sanlock_peer: bool,
    /// Joins long after the others: its host_id is unused while they run ballots.
    late: bool,
    /// A host cloned from this host's image (same machine identity, same host_id
    /// configured): only its boot id tells its default name apart.
    clone_of: Option<usize>,
}

struct Runner {
    world: Rc<World>,
    cfg: SimConfig,
    geometry: Geometry,
    space: Name,
    watchdog_fire: u64,
    plans: Vec<HostPlan>,
    resources: usize,
    num_hosts: u64,
    /// Disks of each resource lease (1, or 2–4 with `multi_disk`) and the bytes between
    /// one disk's image and the next's in the world's image.
    lease_disks: usize,
    region_bytes: u64,
    tasks: Vec<Slot>,
    ctxs: Vec<Option<Rc<HostCtx>>>,
    /// Hosts whose lockspace failed: tasks stopped, waiting for their watchdog.
    doomed: Vec<bool>,
}

/// Runs one seed.
pub fn run_seed(seed: u64, cfg: &SimConfig) -> SimReport {
    let mut rng = Rng::new(seed);
    let hosts = cfg.hosts.clamp(2, 16);
    let geometry = Geometry::ALL[0];
    let resources = rng.range(2, 3) as usize;
    let watchdog_fire = [10, 20, 30, 60][rng.below(4) as usize];
    let mut plans: Vec<HostPlan> = (0..hosts)
        .map(|i| HostPlan {
            host_id: i as u64 + 1,
            io_timeout: rng.range(1, 3) as u16,
            stable_name: rng.below(2) == 0,
            read_all_dblocks: rng.below(4) == 0,
            sanlock_peer: false,
            late: i >= 1 && rng.below(3) == 0,
            clone_of: None,
        })
        .collect();
    // A third of the hosts model sanlock peers, drawn from a second generator so that the
    // main one draws in the same order as before they existed (recorded seeds replay).
    let mut peer_rng = Rng::new(seed ^ 0x5A4E_4C4F_434B_0001);
    for plan in &mut plans {
        plan.sanlock_peer = peer_rng.below(3) == 0;
    }
    // A sanlock 3.8.5 peer judges shared holders from its cache, which goes stale while
    // its own reads fail, for up to its fail time 8·D_p; it then calls a holder dead
    // after host_dead = 8·D_h + W without a change seen. With 8·D_p > 8·D_h + W that is
    // sanlock's own hazard (two sanlock hosts have it too; docs/migrating-from-sanlock.md
    // says which io_timeouts to avoid beside sanlock), so such a peer runs at the
    // shortest io_timeout of the run.
    let shortest_io = plans.iter().map(|p| p.io_timeout).min().unwrap_or(1);
    for plan in &mut plans {
        let fail_s = 8 * u64::from(plan.io_timeout);
        if plan.sanlock_peer && fail_s > 8 * u64::from(shortest_io) + watchdog_fire {
            plan.io_timeout = shortest_io;
        }
    }
    // A quarter of the hosts (never the first) take a host_id far beyond the others,
    // outside the head of the area that renewals read most of the time (`crate::reads`):
    // drawn from a third generator, for the same reason.
    let mut id_rng = Rng::new(seed ^ 0x5A4E_4C4F_434B_0002);
    for (i, plan) in plans.iter_mut().enumerate().skip(1) {
        if id_rng.below(4) == 0 {
            plan.host_id = HIGH_HOST_ID_BASE + 4 * i as u64 + id_rng.below(4);
        }
    }
    let rejoins: Vec<Vec<u64>> = (0..hosts)
        .map(|_| {
            (0..peer_rng.range(0, 3))
                .map(|_| peer_rng.range(20_000, cfg.duration_s * 1000))
                .collect()
        })
        .collect();
    // Sometimes the last host is a clone of the first: same image, so the same host_id,
    // the same daemon and the same io_timeout. (Two hosts on one host_id with different
    // io_timeouts can both join: a join waits 2·D of the record's previous owner after
    // its write, and the other's write may land up to its own, longer D later. Its
    // renewal finds the record taken and fails the lockspace; sanlock has the same rule.)
    if hosts >= 3 && rng.below(3) == 0 {
        let last = hosts - 1;
        plans[last].host_id = plans[0].host_id;
        plans[last].stable_name = plans[0].stable_name;
        plans[last].io_timeout = plans[0].io_timeout;
        plans[last].sanlock_peer = plans[0].sanlock_peer;
        plans[last].clone_of = Some(0);
    }
    let disk_bytes = (resources + 1) * geometry.align_bytes() as usize;
    // The multi-disk model's draws come from a generator of their own (recorded seeds of
    // the other models replay).
    let mut disk_rng = Rng::new(seed ^ 0x5A4E_4C4F_434B_0003);
    let lease_disks = if cfg.multi_disk {
        [2, 3, 3, 4][disk_rng.below(4) as usize]
    } else {
        1
    };
    // Region 0 holds the lockspace (and a single-disk model's leases); lease disk k of the
    // multi-disk model is region k, formatted the same way.
    let regions = if cfg.multi_disk { 1 + lease_disks } else { 1 };
    let world = Rc::new(World::new(rng.next_u64(), disk_bytes * regions, hosts));
    if cfg.trace {
        *world.trace.borrow_mut() = Some(Vec::new());
    }
    let space = Name::new("simls").unwrap_or(Name::EMPTY);
    // The host_ids a lockspace read covers and a resource lease has dblocks for: beyond
    // every host_id in use, and beyond the head that renewals read most of the time
    // (`crate::reads::head_sectors`: 32 sectors here), so that the whole-area reads and
    // the head reads differ. (Not the 2,000 of the real area: sanlock peers read it all
    // on every renewal, and the copies would cost most of a run's time.)
    let num_hosts = if plans.iter().any(|p| p.host_id > 16) {
        HIGH_HOST_ID_BASE + 4 * 16
    } else {
        40
    };
    {
        let mut disk = world.disk.borrow_mut();
        let f = format_lockspace_area(geometry, &space, plans[0].io_timeout);
        disk[..f.area.len()].copy_from_slice(&f.area);
        disk[..f.first_sector.len()].copy_from_slice(&f.first_sector);
        for region in 0..regions {
            for r in 0..resources {
                let area = format_resource_area(&ResourceInit {
                    geometry,
                    space_name: space,
                    resource_name: Name::new(&format!("res{r}")).unwrap_or(Name::EMPTY),
                    num_hosts,
                    clear_at_monotime_s: None,
                });
                let off = region * disk_bytes + (r + 1) * geometry.align_bytes() as usize;
                disk[off..off + area.len()].copy_from_slice(&area);
            }
        }
    }
    if cfg.multi_disk {
        schedule_disk_faults(&world, &mut disk_rng, lease_disks, hosts, cfg.duration_s);
    }
    let mut runner = Runner {
        world: world.clone(),
        cfg: SimConfig { hosts, ..*cfg },
        geometry,
        space,
        watchdog_fire,
        plans,
        resources,
        num_hosts,
        lease_disks,
        region_bytes: disk_bytes as u64,
        tasks: Vec::new(),
        ctxs: (0..hosts).map(|_| None).collect(),
        doomed: vec![false; hosts],
    };
    runner.schedule_faults(&mut rng);
    // Clean leaves followed by a quick rejoin: the window where a sanlock peer's cache
    // still shows the rejoined host's record free.
    for (h, times) in rejoins.iter().enumerate() {
        for &at in times {
            world.schedule(at, Ev::Leave(h));
        }
    }
    for h in 0..hosts {
        let at = if runner.plans[h].late {
            rng.range(10_000, cfg.duration_s * 500)
        } else {
            rng.range(0, 3_000)
        };
        world.schedule(at, Ev::Start(h));
    }
    runner.run();
    let stats = world.stats.borrow().clone();
    let violations = world.checker.borrow().violations().to_vec();
    let trace = world.trace.borrow_mut().take().unwrap_or_default();
    SimReport {
        seed,
        stats,
        violations,
        trace,
    }
}

/// The multi-disk model's faults: each lease disk down (EIO), stalled (past the I/O
/// timeout) or slow for a while, for every host, and single hosts' paths to a disk the
/// same way, overlapping freely (so hosts sometimes see different minorities, or no
/// majority at all).
fn schedule_disk_faults(world: &World, rng: &mut Rng, disks: usize, hosts: usize, duration_s: u64) {
    let end = duration_s * 1000;
    let mut faults = world.disk_faults.borrow_mut();
    let mut add = |host: Option<usize>, rng: &mut Rng| {
        let from = rng.range(5_000, end);
        let dur = rng.log_range(2_000, 90_000);
        let kind = match rng.below(3) {
            0 => DiskFaultKind::Down,
            1 => DiskFaultKind::Stall,
            _ => DiskFaultKind::Slow,
        };
        faults.push(DiskFault {
            host,
            disk: 1 + rng.below(disks as u64) as usize,
            from,
            until: from + dur,
            kind,
        });
    };
    for _ in 0..rng.range(1, 2 * disks as u64) {
        add(None, rng);
    }
    for h in 0..hosts {
        for _ in 0..rng.range(0, 4) {
            add(Some(h), rng);
        }
    }
    let n = faults.len() as u64;
    drop(faults);
    world.stats.borrow_mut().faults += n;
    for f in world.disk_faults.borrow().iter() {
        world.log(|| {
            format!(
                "lease disk {} {:?} for {} from {} ms to {} ms",
                f.disk,
                f.kind,
                f.host
                    .map_or("every host".to_string(), |h| format!("host{h}")),
                f.from,
                f.until
            )
        });
    }
}

impl Runner {
    fn schedule_faults(&self, rng: &mut Rng) {
        let end = self.cfg.duration_s * 1000;
        for h in 0..self.cfg.hosts {
            for _ in 0..rng.range(0, 2) {
                self.world.schedule(rng.range(10_000, end), Ev::Crash(h));
            }
            for _ in 0..rng.range(1, 5) {
                let dur = rng.log_range(1_000, 150_000);
                self.world
                    .schedule(rng.range(5_000, end), Ev::Pause(h, dur));
            }
            for _ in 0..rng.range(0, 2) {
                let dur = rng.log_range(2_000, 60_000);
                self.world
                    .schedule(rng.range(5_000, end), Ev::Storm(h, dur));
            }
            if rng.below(3) == 0 {
                self.world.schedule(rng.range(20_000, end), Ev::Leave(h));
            }
            for _ in 0..rng.range(0, 2) {
                self.world
                    .schedule(rng.range(10_000, end), Ev::DaemonCrash(h));
            }
        }
    }

    fn run(&mut self) {
        let end = self.cfg.duration_s * 1000;
        while let Some((at, ev)) = self.world.pop() {
            if at > end {
                break;
            }
            self.world.stats.borrow_mut().events += 1;
            match ev {
                Ev::Wake(t) => self.wake(t),
                Ev::Land { offset, data } => {
                    let mut disk = self.world.disk.borrow_mut();
                    let o = offset as usize;
                    disk[o..o + data.len()].copy_from_slice(&data);
                }
                Ev::WdTick(h, inc) => self.wd_tick(h, inc),
                Ev::WdFire(h, seq) => {
                    let fire = {
                        let hosts = self.world.hosts.borrow();
                        let rt = &hosts[h];
                        rt.up
                            && (rt.wd_armed || rt.wd_orphan_expire_local_ms.is_some())
                            && rt.wd_pet_seq == seq
                    };
                    if fire {
                        self.world.log(|| format!("host{h} WATCHDOG reset"));
                        self.world.stats.borrow_mut().watchdog_resets += 1;
                        self.reset(h);
                    }
                }
                Ev::Crash(h) => {
                    if self.world.hosts.borrow()[h].up {
                        self.world.log(|| format!("host{h} CRASH"));
                        self.world.fault();
                        self.reset(h);
                    }
                }
                Ev::Pause(h, dur) => {
                    self.world.log(|| format!("host{h} PAUSE {dur} ms"));
                    self.world.fault();
                    let mut hosts = self.world.hosts.borrow_mut();
                    hosts[h].paused_until = hosts[h].paused_until.max(at + dur);
                }
                Ev::Storm(h, dur) => {
                    self.world.log(|| format!("host{h} I/O STORM {dur} ms"));
                    self.world.fault();
                    let mut hosts = self.world.hosts.borrow_mut();
                    hosts[h].storm_until = hosts[h].storm_until.max(at + dur);
                }
                Ev::DaemonCrash(h) => self.daemon_crash(h),
                Ev::DaemonStart(h) => self.start_daemon(h),
                Ev::Leave(h) => {
                    if let Some(ctx) = &self.ctxs[h] {
                        if ctx.joined.get() && !self.doomed[h] {
                            self.world.fault();
                            ctx.leaving.set(true);
                        }
                    }
                }
                Ev::Start(h) => self.start(h),
            }
        }
    }

    fn host_paused(&self, h: usize) -> Option<u64> {
        let until = self.world.hosts.borrow()[h].paused_until;
        (until > self.world.now()).then_some(until)
    }

    fn wake(&mut self, t: usize) {
        let Some(slot) = self.tasks.get_mut(t) else {
            return;
        };
        let h = slot.host;
        let Some(mut fut) = slot.fut.take() else {
            return;
        };
        if let Some(until) = self.host_paused(h) {
            self.tasks[t].fut = Some(fut);
            self.world.schedule(until, Ev::Wake(t));
            return;
        }
        self.world.set_current(t);
        let mut cx = Context::from_waker(Waker::noop());
        if fut.as_mut().poll(&mut cx).is_pending() {
            self.tasks[t].fut = Some(fut);
        }
        self.world.set_current(usize::MAX);
        let Some(ctx) = self.ctxs[h].clone() else {
            return;
        };
        if ctx.failed.get() && !self.doomed[h] {
            // The lockspace failed: clients are killed, leases stay held on disk until
            // the watchdog resets the host.
            self.doomed[h] = true;
            self.world
                .log(|| format!("host{h} lockspace FAILED, waiting for watchdog"));
            self.drop_tasks(h);
        } else if ctx.left.get() {
            // A clean leave: the daemon stops and a new one starts on the same boot.
            self.drop_tasks(h);
            self.ctxs[h] = None;
            let at = self.world.now() + self.world.range(1_000, 20_000);
            self.world.schedule(at, Ev::DaemonStart(h));
        }
    }

    fn drop_tasks(&mut self, h: usize) {
        for s in self.tasks.iter_mut().filter(|s| s.host == h) {
            s.fut = None;
        }
    }

    fn spawn(&mut self, host: usize, fut: Task) {
        let id = self.tasks.len();
        self.tasks.push(Slot {
            host,
            fut: Some(fut),
        });
        self.world.schedule(self.world.now(), Ev::Wake(id));
    }

    fn reset(&mut self, h: usize) {
        {
            let mut hosts = self.world.hosts.borrow_mut();
            let rt = &mut hosts[h];
            rt.up = false;
            rt.wd_armed = false;
            rt.wd_orphan_expire_local_ms = None;
        }
        self.world.checker.borrow_mut().reset_host(h);
        self.drop_tasks(h);
        self.ctxs[h] = None;
        self.doomed[h] = false;
        // Down long enough for any write it issued to have landed or been dropped.
        let at = self.world.now() + self.world.range(20_000, 60_000);
        self.world.schedule(at, Ev::Start(h));
    }

    /// The daemon is killed; the host stays up. Its lease holders keep running (the
    /// checker keeps their holds), its wdmd registration stays armed with the last expiry,
    /// and a new daemon starts soon under the same name.
    fn daemon_crash(&mut self, h: usize) {
        if !self.world.hosts.borrow()[h].up || self.ctxs[h].is_none() {
            return;
        }
        self.world
            .log(|| format!("host{h} DAEMON KILLED, its lease holders keep running"));
        self.world.fault();
        {
            let mut hosts = self.world.hosts.borrow_mut();
            let rt = &mut hosts[h];
            if rt.wd_armed {
                let e = rt.wd_expire_local_ms;
                rt.wd_orphan_expire_local_ms =
                    Some(rt.wd_orphan_expire_local_ms.map_or(e, |o| o.min(e)));
            }
            rt.wd_armed = false;
        }
        self.drop_tasks(h);
        self.ctxs[h] = None;
        self.doomed[h] = false;
        let at = self.world.now() + self.world.range(100, 5_000);
        self.world.schedule(at, Ev::DaemonStart(h));
    }

    /// The host boots: new clock, new boot id, and a daemon.
    fn start(&mut self, h: usize) {
        let w = self.world.clone();
        {
            let mut hosts = w.hosts.borrow_mut();
            let rt = &mut hosts[h];
            if rt.up {
                return;
            }
            rt.up = true;
            rt.boot_id = w.rand(u64::MAX);
            rt.wd_armed = false;
            rt.wd_orphan_expire_local_ms = None;
            rt.wd_pet_seq += 1;
            rt.clock_offset_ms = w.range(1_000_000, 100_000_000);
            rt.ppm = w.range(0, 2 * CLOCK_PPM_BOUND as u64) as i64 - CLOCK_PPM_BOUND;
        }
        self.start_daemon(h);
    }

    /// A new daemon (incarnation) on a host that is up.
    fn start_daemon(&mut self, h: usize) {
        let w = self.world.clone();
        let (inc, boot_id) = {
            let mut hosts = w.hosts.borrow_mut();
            let rt = &mut hosts[h];
            if !rt.up || self.ctxs[h].is_some() {
                return;
            }
            rt.incarnation += 1;
            rt.wd_armed = false;
            (rt.incarnation, rt.boot_id)
        };
        self.doomed[h] = false;
        let plan = &self.plans[h];
        // lockd's default name: the machine's identity (shared by clones of one image)
        // and the boot id; stable across daemon restarts within one boot.
        let machine = plan.clone_of.unwrap_or(h) + 1;
        let name = if plan.stable_name {
            format!("host{machine}.boot{boot_id:016x}")
        } else {
            format!("host{machine}.{:016x}", w.rand(u64::MAX))
        };
        let params = LockspaceParams {
            space_name: self.space,
            disk_offset: 0,
            geometry: self.geometry,
            host_id: plan.host_id,
            host_name: Name::new(&name).unwrap_or(Name::EMPTY),
            io_timeout: plan.io_timeout,
            watchdog_fire: self.watchdog_fire,
            monitor_hosts: Some(self.num_hosts),
        };
        let resources = (0..self.resources)
            .map(|r| {
                let mut p = resource_params(
                    self.geometry,
                    &self.space,
                    r,
                    plan.io_timeout,
                    self.num_hosts,
                );
                if self.cfg.multi_disk {
                    // Disk 0 of the lease is region 1.
                    p.disk_offset += self.region_bytes;
                }
                p
            })
            .collect();
        let ctx = Rc::new(HostCtx {
            world: w.clone(),
            holder: Holder {
                host: h,
                incarnation: inc,
            },
            params,
            disk: SimDisk {
                world: w.clone(),
                host: h,
                index: 0,
            },
            lease_disks: if self.cfg.multi_disk {
                (1..=self.lease_disks)
                    .map(|index| SimDisk {
                        world: w.clone(),
                        host: h,
                        index,
                    })
                    .collect()
            } else {
                Vec::new()
            },
            clock: SimClock {
                world: w.clone(),
                host: h,
            },
            monitor: RefCell::new(self.monitor_for(plan)),
            generation: Cell::new(0),
            last_success_ms: Cell::new(0),
            joined: Cell::new(false),
            leaving: Cell::new(false),
            left: Cell::new(false),
            failed: Cell::new(false),
            active_workers: Cell::new(0),
            busy: RefCell::new(vec![false; self.resources]),
            resources,
            region_bytes: self.region_bytes,
            bug: self.cfg.planted_bug,
            requests: RefCell::new(Vec::new()),
            examine_seq: Cell::new(0),
            read_mode: if plan.sanlock_peer || !self.cfg.head_reads {
                ReadMode::Full
            } else {
                ReadMode::Head
            },
        });
        self.world.log(|| {
            format!(
                "host{h} START incarnation {inc} name {name} host_id {} io_timeout {}{}",
                plan.host_id,
                plan.io_timeout,
                if plan.sanlock_peer {
                    " (sanlock peer)"
                } else {
                    ""
                }
            )
        });
        self.ctxs[h] = Some(ctx.clone());
        self.spawn(h, Box::pin(lockspace_task(ctx.clone())));
        for _ in 0..2 {
            self.spawn(h, Box::pin(worker_task(ctx.clone())));
        }
        w.schedule(w.now(), Ev::WdTick(h, inc));
    }

    fn monitor_for(&self, plan: &HostPlan) -> HostMonitor {
        let mut m = HostMonitor::new(plan.host_id, self.watchdog_fire);
        m.set_read_known_hosts(!plan.read_all_dblocks);
        if plan.sanlock_peer {
            m.judge_shared_like_sanlock();
        }
        if self.cfg.planted_bug == Some(PlantedBug::StaleKnownHosts) {
            m.freeze_known_hosts();
        }
        m
    }

    /// wdmd: pet the watchdog while the lockspace's expiry is more than one test interval
    /// away; the device fires W seconds after the last pet.
    fn wd_tick(&mut self, h: usize, inc: u64) {
        let w = self.world.clone();
        {
            let hosts = w.hosts.borrow();
            if !hosts[h].up || hosts[h].incarnation != inc {
                return;
            }
        }
        if let Some(until) = self.host_paused(h) {
            w.schedule(until, Ev::WdTick(h, inc));
            return;
        }
        let interval_ms = timeouts::wdmd_test_interval(self.watchdog_fire) * 1000;
        let local = w.local_now(h);
        let pet = {
            let hosts = w.hosts.borrow();
            let rt = &hosts[h];
            let far = |expire_ms: u64| local + interval_ms < expire_ms;
            (!rt.wd_armed || far(rt.wd_expire_local_ms))
                && rt.wd_orphan_expire_local_ms.is_none_or(far)
        };
        if pet {
            let seq = {
                let mut hosts = w.hosts.borrow_mut();
                hosts[h].wd_pet_seq += 1;
                hosts[h].wd_pet_seq
            };
            w.schedule(w.now() + self.watchdog_fire * 1000, Ev::WdFire(h, seq));
        }
        let next = w.now() + w.global_dur(h, interval_ms);
        w.schedule(next, Ev::WdTick(h, inc));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn short() -> SimConfig {
        SimConfig {
            duration_s: 200,
            ..SimConfig::default()
        }
    }

    #[test]
    fn a_seed_replays_exactly() {
        let a = run_seed(7, &short());
        let b = run_seed(7, &short());
        assert_eq!(a.stats.events, b.stats.events);
        assert_eq!(a.stats.acquisitions, b.stats.acquisitions);
        assert_eq!(a.violations, b.violations);
        assert!(a.stats.acquisitions > 0);
        assert!(a.stats.faults > 0);
    }

    /// Seeds that once found a violation, with the host count they ran with. Each replays
    /// the same run as long as the simulator draws in the same order (a change to the
    /// fault model may move them; find new ones with `lockd-sim --seeds 5000`).
    /// * 905, 8 hosts: an exclusive acquire whose value another host committed returned
    ///   the shared holders of its own phase reads only, missing one the committing host
    ///   saw (paxos `read_shared_holders`): exclusive beside shared at t=22 s.
    ///
    /// (Seeds 3893/4 hosts and 4341/16 hosts found a join stalled past 8D between its
    /// write and its verify, reported joined with an expired lease; the paxos fix moved
    /// those runs, so `tests_delta::a_join_stalled_past_its_fail_time_renews_and_one_stalled_past_host_dead_fails`
    /// keeps that case.)
    /// * 14, 4 hosts: a clone (our host_id, another name) ended its long wait on the free
    ///   record of a host that had just left, and wrote it right after that host's no-wait
    ///   rejoin over its own released record: two incarnations with one (host_id,
    ///   generation). The no-wait path is gone (`delta::AcquirePath::ShortDelay`).
    #[test]
    fn seeds_that_found_bugs_stay_clean() {
        for (seed, hosts) in [(905, 8), (14, 4)] {
            let cfg = SimConfig {
                hosts,
                ..SimConfig::default()
            };
            let r = run_seed(seed, &cfg);
            assert!(r.violations.is_empty(), "seed {seed}: {:?}", r.violations);
        }
    }

    #[test]
    fn multi_disk_seeds_pass_and_accepting_a_minority_is_caught() {
        let cfg = SimConfig {
            multi_disk: true,
            ..short()
        };
        for seed in 1..=10 {
            let r = run_seed(seed, &cfg);
            assert!(r.violations.is_empty(), "seed {seed}: {:?}", r.violations);
            assert!(r.stats.acquisitions > 0, "seed {seed} acquired nothing");
        }
        let bad = SimConfig {
            planted_bug: parse_planted_bug("accept-minority"),
            ..cfg
        };
        let caught = (1..=100).any(|seed| !run_seed(seed, &bad).violations.is_empty());
        assert!(caught, "accept-minority was not caught");
    }

    #[test]
    fn clean_seeds_pass_and_planted_bugs_are_caught() {
        for seed in 1..=10 {
            let r = run_seed(seed, &short());
            assert!(r.violations.is_empty(), "seed {seed}: {:?}", r.violations);
        }
        for bug in [
            "skip-phase2",
            "no-host-dead-wait",
            "stale-known-hosts",
            "own-name-short-delay",
            "skip-full-read",
        ] {
            let cfg = SimConfig {
                planted_bug: parse_planted_bug(bug),
                ..short()
            };
            let caught = (1..=100).any(|seed| !run_seed(seed, &cfg).violations.is_empty());
            assert!(caught, "{bug} was not caught");
        }
        // The window of no-shared-hold (a sanlock peer's cache one renewal behind a quick
        // rejoin) is narrow: about one seed in a thousand of 200 s; these two found it
        // (`lockd-sim --seeds 4000 --duration 200 --plant-bug no-shared-hold`), and
        // `tests_paxos` replays the case step by step.
        let cfg = SimConfig {
            planted_bug: parse_planted_bug("no-shared-hold"),
            ..short()
        };
        for seed in [1522, 1655] {
            assert!(
                !run_seed(seed, &cfg).violations.is_empty(),
                "no-shared-hold was not caught by seed {seed}"
            );
            assert!(
                run_seed(seed, &short()).violations.is_empty(),
                "seed {seed}"
            );
        }
        assert_eq!(parse_planted_bug("nope"), None);
    }
}
