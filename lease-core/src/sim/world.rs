//! Virtual time, the event queue, the shared disk image, and the per-host clocks and disks.
//!
//! Futures are polled only when an event for their task is due; leaf futures (a sleep, a
//! disk operation) register such an event with [`World::schedule_wake`] for the task being
//! polled, so no waker is needed.

use std::cell::{Cell, RefCell};
use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

use super::checker::Checker;
use super::rng::Rng;
use crate::disks::{PathState, COOL_DOWN_TIMEOUTS};
use crate::io::{Clock, Disk, IoError};

/// Something that happens at a virtual time.
#[derive(Debug)]
pub enum Ev {
    /// Poll a task.
    Wake(usize),
    /// A write reaches the disk.
    Land { offset: u64, data: Vec<u8> },
    /// wdmd's periodic test on a host.
    WdTick(usize, u64),
    /// The hardware watchdog of a host expires unless petted since (pet sequence number).
    WdFire(usize, u64),
    /// Fault: the host crashes.
    Crash(usize),
    /// Fault: the host's lease daemon is killed (kill -9) while the host stays up: its
    /// lease holders keep running and its wdmd registration keeps its last expiry.
    DaemonCrash(usize),
    /// Start a new daemon on a host that is up (after a daemon crash or a clean leave).
    DaemonStart(usize),
    /// Fault: the host stops for the given milliseconds.
    Pause(usize, u64),
    /// Fault: the host's I/O is very slow or failing for the given milliseconds.
    Storm(usize, u64),
    /// Fault: the host leaves the lockspace cleanly (and rejoins later).
    Leave(usize),
    /// Start a new incarnation of the host.
    Start(usize),
}

struct Scheduled {
    at: u64,
    seq: u64,
    ev: Ev,
}

impl PartialEq for Scheduled {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for Scheduled {}
impl PartialOrd for Scheduled {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Scheduled {
    fn cmp(&self, o: &Self) -> Ordering {
        // Reversed: BinaryHeap is a max-heap, we want the earliest first.
        (o.at, o.seq).cmp(&(self.at, self.seq))
    }
}

/// Per-host runtime state owned by the world (survives incarnations).
#[derive(Debug, Clone, Default)]
pub struct HostRt {
    pub clock_offset_ms: u64,
    /// Clock rate error in parts per million (|ppm| ≤ the configured bound).
    pub ppm: i64,
    pub paused_until: u64,
    pub storm_until: u64,
    pub incarnation: u64,
    pub up: bool,
    pub wd_armed: bool,
    /// wdmd expiry in the host's clock (ms).
    pub wd_expire_local_ms: u64,
    /// The earliest expiry (host clock, ms) of wdmd registrations left armed by killed
    /// daemons: wdmd stops petting when it nears, until the host resets.
    pub wd_orphan_expire_local_ms: Option<u64>,
    /// Changes at every boot (a host reset), not at a daemon restart; part of the default
    /// host name, so hosts cloned from one image get different names.
    pub boot_id: u64,
    pub wd_pet_seq: u64,
    /// What this host saw of its path to each lease disk of the multi-disk model (index
    /// 1..): the daemon's `lockd_diskio::health`.
    pub lease_paths: Vec<SimPath>,
}

/// One host's record of its path to one lease disk, as the daemon keeps it: windows
/// (world ms) in which a write it gave up on may still land, and the cool-down after
/// its last timeout (cleared by an I/O that completed in time).
#[derive(Debug, Clone, Default)]
pub struct SimPath {
    pub overdue: Vec<(u64, u64)>,
    pub cool_until: u64,
}

impl SimPath {
    /// The path as [`crate::disks::left_out`] sees it at `now`.
    pub fn state(&self, now: u64) -> PathState {
        let overdue = self
            .overdue
            .iter()
            .any(|&(from, until)| from <= now && now < until);
        PathState {
            overdue,
            cooling: overdue || now < self.cool_until,
        }
    }
}

/// Counters for the summary line.
#[derive(Debug, Default, Clone)]
pub struct Stats {
    /// Successful resource acquisitions.
    pub acquisitions: u64,
    /// Injected faults (crashes, pauses, storms, leaves, I/O errors and timeouts).
    pub faults: u64,
    /// Watchdog resets.
    pub watchdog_resets: u64,
    /// Forced requests written (owner's bit set in our bitmap).
    pub requests: u64,
    /// Holds ended early because examine found a forced request.
    pub forced_releases: u64,
    /// Successful delta acquisitions.
    pub joins: u64,
    /// Failed acquire attempts, by sanlock code.
    pub acquire_errors: std::collections::BTreeMap<i32, u64>,
    /// Events processed.
    pub events: u64,
}

pub struct World {
    now: Cell<u64>,
    seq: Cell<u64>,
    queue: RefCell<BinaryHeap<Scheduled>>,
    current_task: Cell<usize>,
    pub disk: RefCell<Vec<u8>>,
    pub rng: RefCell<Rng>,
    pub hosts: RefCell<Vec<HostRt>>,
    pub checker: RefCell<Checker>,
    pub stats: RefCell<Stats>,
    pub trace: RefCell<Option<Vec<String>>>,
    /// Faults of the lease disks of the multi-disk model (`SimConfig::lease_disks`).
    pub disk_faults: RefCell<Vec<DiskFault>>,
}

/// What a lease disk (or one host's path to it) does during a [`DiskFault`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiskFaultKind {
    /// Every I/O fails at once (EIO).
    Down,
    /// Every I/O outlasts its timeout (a write may still land, before the timeout or up
    /// to two timeouts after it).
    Stall,
    /// Every I/O is slow: from a quarter of its timeout to twice it.
    Slow,
}

/// A fault of one lease disk, for every host or for one host's path to it.
#[derive(Debug, Clone, Copy)]
pub struct DiskFault {
    /// The host whose path fails; `None`: the disk itself, for every host.
    pub host: Option<usize>,
    /// The disk ([`SimDisk::index`]).
    pub disk: usize,
    pub from: u64,
    pub until: u64,
    pub kind: DiskFaultKind,
}

impl World {
    /// Appends a line to the trace when tracing is on.
    pub fn log(&self, line: impl FnOnce() -> String) {
        if let Some(t) = self.trace.borrow_mut().as_mut() {
            let now = self.now();
            t.push(format!("{:>4}.{:03} {}", now / 1000, now % 1000, line()));
        }
    }

    pub fn new(seed: u64, disk_bytes: usize, hosts: usize) -> World {
        World {
            now: Cell::new(0),
            seq: Cell::new(0),
            queue: RefCell::new(BinaryHeap::new()),
            current_task: Cell::new(usize::MAX),
            disk: RefCell::new(vec![0; disk_bytes]),
            rng: RefCell::new(Rng::new(seed)),
            hosts: RefCell::new(vec![HostRt::default(); hosts]),
            checker: RefCell::new(Checker::new()),
            stats: RefCell::new(Stats::default()),
            trace: RefCell::new(None),
            disk_faults: RefCell::new(Vec::new()),
        }
    }

    /// The fault host `host`'s I/O to disk `disk` meets now, if any.
    fn disk_fault(&self, host: usize, disk: usize) -> Option<DiskFaultKind> {
        let now = self.now();
        self.disk_faults
            .borrow()
            .iter()
            .filter(|f| f.disk == disk && f.host.is_none_or(|h| h == host))
            .filter(|f| f.from <= now && now < f.until)
            .map(|f| f.kind)
            .max_by_key(|k| match k {
                DiskFaultKind::Down => 2,
                DiskFaultKind::Stall => 1,
                DiskFaultKind::Slow => 0,
            })
    }

    pub fn now(&self) -> u64 {
        self.now.get()
    }

    pub fn schedule(&self, at: u64, ev: Ev) {
        let seq = self.seq.get() + 1;
        self.seq.set(seq);
        self.queue.borrow_mut().push(Scheduled { at, seq, ev });
    }

    pub fn pop(&self) -> Option<(u64, Ev)> {
        let s = self.queue.borrow_mut().pop()?;
        self.now.set(self.now.get().max(s.at));
        Some((s.at, s.ev))
    }

    pub fn set_current(&self, task: usize) {
        self.current_task.set(task);
    }

    fn schedule_wake(&self, at: u64) {
        self.schedule(at, Ev::Wake(self.current_task.get()));
    }

    pub fn rand(&self, n: u64) -> u64 {
        self.rng.borrow_mut().below(n)
    }

    pub fn range(&self, lo: u64, hi: u64) -> u64 {
        self.rng.borrow_mut().range(lo, hi)
    }

    pub fn fault(&self) {
        self.stats.borrow_mut().faults += 1;
    }

    /// The host's monotonic clock at global time `g`.
    pub fn local_at(&self, host: usize, g: u64) -> u64 {
        let h = &self.hosts.borrow()[host];
        let skew = (i128::from(g) * i128::from(h.ppm)) / 1_000_000;
        (i128::from(h.clock_offset_ms) + i128::from(g) + skew).max(0) as u64
    }

    pub fn local_now(&self, host: usize) -> u64 {
        self.local_at(host, self.now())
    }

    /// Global duration of `ms` milliseconds of the host's clock (rounded up).
    pub fn global_dur(&self, host: usize, ms: u64) -> u64 {
        let ppm = self.hosts.borrow()[host].ppm;
        let num = u128::from(ms) * 1_000_000;
        let den = (1_000_000 + ppm).max(1) as u128;
        num.div_ceil(den) as u64
    }
}

/// Resolves at a global time.
struct Until {
    world: Rc<World>,
    at: u64,
    registered: bool,
}

impl Future for Until {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<()> {
        if self.world.now() >= self.at {
            return Poll::Ready(());
        }
        if !self.registered {
            self.registered = true;
            self.world.schedule_wake(self.at);
        }
        Poll::Pending
    }
}

fn until(world: &Rc<World>, at: u64) -> Until {
    Until {
        world: world.clone(),
        at,
        registered: false,
    }
}

/// A host's view of time.
#[derive(Clone)]
pub struct SimClock {
    pub world: Rc<World>,
    pub host: usize,
}

impl Clock for SimClock {
    fn now_ms(&self) -> u64 {
        self.world.local_now(self.host)
    }

    fn sleep_ms(&self, ms: u64) -> impl Future<Output = ()> {
        let at = self.world.now() + self.world.global_dur(self.host, ms);
        until(&self.world, at)
    }

    fn random_below(&self, n: u64) -> u64 {
        self.world.rand(n)
    }
}

/// Outcome of one simulated I/O, decided when it is issued.
struct IoPlan {
    done_at: u64,
    result: Result<(), IoError>,
    /// For writes: when the data lands (None: it never does).
    land_at: Option<u64>,
}

/// A host's path to the shared disk: latency, errors and timeouts come from here.
#[derive(Clone)]
pub struct SimDisk {
    pub world: Rc<World>,
    pub host: usize,
    /// Which disk: 0 for the lockspace's (and a single-disk lease's); 1.. for the lease
    /// disks of the multi-disk model, which have faults of their own.
    pub index: usize,
}

impl SimDisk {
    /// At an I/O's completion (`plan.done_at`, now) on a lease disk of the multi-disk
    /// model, notes it in this host's path record as the daemon's engine and waiter do: a
    /// timeout starts the cool-down and, for a write that has not landed, an overdue
    /// window until it lands; an I/O in time ends the cool-down.
    fn note_path(&self, plan: &IoPlan, timeout_ms: u64) {
        if self.index == 0 {
            return;
        }
        let now = self.world.now();
        let mut hosts = self.world.hosts.borrow_mut();
        let paths = &mut hosts[self.host].lease_paths;
        if paths.len() <= self.index {
            paths.resize(self.index + 1, SimPath::default());
        }
        let path = &mut paths[self.index];
        path.overdue.retain(|&(_, until)| until > now);
        match plan.result {
            Err(IoError::TimedOut) => {
                path.cool_until = path
                    .cool_until
                    .max(now + timeout_ms.max(1) * COOL_DOWN_TIMEOUTS);
                if let Some(land) = plan.land_at.filter(|&at| at > now) {
                    path.overdue.push((now, land));
                }
            }
            Ok(()) => path.cool_until = 0,
            Err(_) => {}
        }
    }

    fn plan(&self, write: bool, timeout_ms: u64) -> IoPlan {
        let w = &self.world;
        let now = w.now();
        if self.index > 0 {
            match w.disk_fault(self.host, self.index) {
                Some(DiskFaultKind::Down) => {
                    let t = now + w.rand(5) + 1;
                    return IoPlan {
                        done_at: t,
                        result: Err(IoError::Failed),
                        land_at: None,
                    };
                }
                Some(DiskFaultKind::Stall) => {
                    // A write given up on may land after its timeout: the device had it.
                    let land_at =
                        (write && w.rand(2) == 0).then(|| now + w.rand(3 * timeout_ms + 1));
                    return IoPlan {
                        done_at: now + timeout_ms,
                        result: Err(IoError::TimedOut),
                        land_at,
                    };
                }
                Some(DiskFaultKind::Slow) => {
                    let latency = w.range(timeout_ms / 4, timeout_ms * 2);
                    if latency <= timeout_ms {
                        return IoPlan {
                            done_at: now + latency,
                            result: Ok(()),
                            land_at: write.then_some(now + latency),
                        };
                    }
                    let land_at = (write && w.rand(2) == 0).then(|| now + latency);
                    return IoPlan {
                        done_at: now + timeout_ms,
                        result: Err(IoError::TimedOut),
                        land_at,
                    };
                }
                None => {}
            }
        }
        let storm = w.hosts.borrow()[self.host].storm_until > now;
        let mut rng = w.rng.borrow_mut();
        // Latency: mostly fast, sometimes slow, rarely beyond a few io_timeouts.
        let p = rng.below(1000);
        let latency = if storm {
            rng.range(500, 6_000)
        } else if p < 940 {
            // At least 1 ms: a write lands (an event) before its completion is seen.
            rng.range(1, 5)
        } else if p < 990 {
            rng.range(5, 1_500)
        } else {
            rng.range(1_000, 6_000)
        };
        let err_permille = if storm { 300 } else { 4 };
        let failed = rng.chance(err_permille);
        drop(rng);
        if failed {
            w.fault();
            let t = now + latency.min(timeout_ms);
            return IoPlan {
                done_at: t,
                result: Err(IoError::Failed),
                land_at: None,
            };
        }
        if latency > timeout_ms {
            w.fault();
            let done_at = now + timeout_ms;
            let land_at = if write && w.rand(2) == 0 {
                Some(now + w.rand(timeout_ms + 1))
            } else {
                None
            };
            return IoPlan {
                done_at,
                result: Err(IoError::TimedOut),
                land_at,
            };
        }
        IoPlan {
            done_at: now + latency,
            result: Ok(()),
            land_at: write.then_some(now + latency),
        }
    }
}

impl Disk for SimDisk {
    type Buf = Vec<u8>;

    fn read(
        &self,
        offset: u64,
        len: usize,
        timeout_ms: u64,
    ) -> impl Future<Output = Result<Vec<u8>, IoError>> {
        let this = self.clone();
        async move {
            let plan = this.plan(false, timeout_ms);
            until(&this.world, plan.done_at).await;
            this.note_path(&plan, timeout_ms);
            plan.result?;
            let disk = this.world.disk.borrow();
            let start = usize::try_from(offset).map_err(|_| IoError::Failed)?;
            let end = start.checked_add(len).ok_or(IoError::Failed)?;
            disk.get(start..end)
                .map(<[u8]>::to_vec)
                .ok_or(IoError::Failed)
        }
    }

    fn write(
        &self,
        offset: u64,
        data: &[u8],
        timeout_ms: u64,
    ) -> impl Future<Output = Result<(), IoError>> {
        let this = self.clone();
        let data = data.to_vec();
        async move {
            let len = this.world.disk.borrow().len() as u64;
            if offset
                .checked_add(data.len() as u64)
                .is_none_or(|e| e > len)
            {
                return Err(IoError::Failed);
            }
            let plan = this.plan(true, timeout_ms);
            if let Some(at) = plan.land_at {
                this.world.schedule(at, Ev::Land { offset, data });
            }
            until(&this.world, plan.done_at).await;
            this.note_path(&plan, timeout_ms);
            plan.result
        }
    }
}
