//! A model of storage fencing by SCSI-3 persistent reservations (issue 24): a survivor may
//! take a failed holder's lease as soon as the holder's key is *confirmed* gone from the
//! target (PREEMPT acknowledged, then READ KEYS no longer listing it), instead of waiting
//! host_dead. This is a model of the rule, not of daemon code (the daemon does not fence
//! by PR yet): hosts, the target and the network are abstract, one exclusive lease.
//!
//! The target (one logical unit, Write Exclusive – Registrants Only) processes messages in
//! arrival order: a write, renewal or PR OUT from a host whose key is not registered is
//! refused (RESERVATION CONFLICT). Every message travels with its own random latency, so
//! a message sent later may arrive earlier. The lease itself is an atomic compare-and-swap
//! of its version at the target (disk Paxos abstracted; a taker must be registered).
//!
//! Hosts: the holder writes under its lease version and renews every second; survivors
//! that see the holder's last renewal (as landed on the target) older than the fail time
//! preempt its key, read the keys back, and take. A holder whose write or renewal is
//! refused knows it was fenced: it stops, is reset, and rejoins with a new generation
//! (a new key) on a new session; a reset ends the old session, and the target drops what
//! still arrives from it (iSCSI session reinstatement). Faults: pauses of 1–60 s (the host
//! resumes mid-work and writes under the old version), crashes, slow storage (latencies up
//! to 20 s).
//!
//! Invariant (checked at the target, what the VM bed's witness checks on the LUN): once a
//! write under lease version v has landed, no write under a version below v lands.
//! Planted bug `take-before-preempt-confirmed`: the survivor takes the lease as soon as it
//! has *sent* the preempt.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

use super::rng::Rng;

/// The fence rule's planted bug.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FenceBug {
    /// Take the lease right after sending PREEMPT, before it is acknowledged and the keys
    /// are read back.
    TakeBeforePreemptConfirmed,
}

pub fn parse_fence_bug(name: &str) -> Option<FenceBug> {
    match name {
        "take-before-preempt-confirmed" => Some(FenceBug::TakeBeforePreemptConfirmed),
        _ => None,
    }
}

/// A survivor fences a holder whose last renewal is this old.
const FAIL_MS: u64 = 8_000;
/// Hosts act every tick.
const TICK_MS: u64 = 1_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Msg {
    Write { epoch: u64 },
    Renew,
    Register { key: u64 },
    Preempt { victim: u64 },
    ReadKeys { victim: u64 },
    Take { expect: u64 },
    Release { epoch: u64 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reply {
    Ok(Msg),
    Conflict(Msg),
    KeyPresent(bool),
    Took(u64),
    Lost,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    Tick { host: usize, inc: u64 },
    Crash { host: usize },
    Pause { host: usize, ms: u64 },
    Boot { host: usize },
}

#[derive(Debug, Clone, Copy)]
enum Item {
    Ev(Ev),
    Arrive { host: usize, session: u64, msg: Msg },
    Back { host: usize, inc: u64, reply: Reply },
}

#[derive(Default)]
struct Target {
    /// Registered key per host (its I_T nexus).
    keys: BTreeMap<usize, u64>,
    /// The session each host is logged in with; older sessions' messages are dropped.
    session: BTreeMap<usize, u64>,
    epoch: u64,
    holder: Option<usize>,
    last_renew_ms: BTreeMap<usize, u64>,
    max_landed_epoch: u64,
}

#[derive(Default, Clone)]
struct Host {
    up: bool,
    inc: u64,
    session: u64,
    generation: u64,
    key: u64,
    joined: bool,
    paused_until: u64,
    holding: Option<u64>,
    hold_until: u64,
    writes_in_flight: u64,
    /// (victim key, lease version expected) while fencing.
    fencing: Option<(u64, u64)>,
    taking: bool,
}

/// Counters of one run.
#[derive(Debug, Default, Clone)]
pub struct FenceStats {
    pub takes: u64,
    pub fences: u64,
    pub writes_landed: u64,
    pub writes_refused: u64,
    pub faults: u64,
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
}

/// Runs one seed of the fence model with `hosts` hosts for `duration_s` virtual seconds.
pub fn run_fence_seed(
    seed: u64,
    hosts: usize,
    duration_s: u64,
    bug: Option<FenceBug>,
    trace: bool,
) -> FenceReport {
    let hosts = hosts.clamp(2, 16);
    let mut m = Model {
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
    };
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
    }
    while let Some(Reverse((at, _, idx))) = m.queue.pop() {
        if at > end {
            break;
        }
        m.now = at;
        match m.items[idx] {
            Item::Ev(ev) => m.event(ev),
            Item::Arrive { host, session, msg } => m.arrive(host, session, msg),
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

impl Model {
    fn at(&mut self, t: u64, item: Item) {
        self.seq += 1;
        self.items.push(item);
        self.queue
            .push(Reverse((t, self.seq, self.items.len() - 1)));
    }

    fn log(&mut self, line: impl FnOnce() -> String) {
        if let Some(t) = &mut self.trace {
            let now = self.now;
            t.push(format!("t={}.{:03}s {}", now / 1000, now % 1000, line()));
        }
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
        let at = self.now + self.latency();
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
                h.up = true;
                h.inc += 1;
                h.session += 1;
                h.generation += 1;
                // lvmlockd's key format: a new generation, a new key.
                h.key = 0x1000_0000_0000_0000 | (h.generation << 16) | (host as u64 + 1);
                h.joined = false;
                h.holding = None;
                h.fencing = None;
                h.taking = false;
                h.writes_in_flight = 0;
                let (key, session, inc) = (h.key, h.session, h.inc);
                // Logging in again ends the old session at the target.
                self.target.session.insert(host, session);
                self.log(|| format!("host{host} BOOT key 0x{key:x}"));
                self.send(host, Msg::Register { key });
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
                let h = &mut self.hosts[host];
                h.paused_until = h.paused_until.max(self.now + ms);
                self.log(|| format!("host{host} PAUSE {ms} ms"));
            }
            Ev::Tick { host, inc } => self.tick(host, inc),
        }
    }

    /// The host goes down (crash, or reset after learning it was fenced) and boots later.
    fn reset(&mut self, host: usize, why: &str) {
        self.hosts[host].up = false;
        self.hosts[host].holding = None;
        self.log(|| format!("host{host} {why}: down"));
        let at = self.now + self.rng.range(5_000, 30_000);
        self.at(at, Item::Ev(Ev::Boot { host }));
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
        let at = self.now + TICK_MS;
        self.at(at, Item::Ev(Ev::Tick { host, inc }));
        if let Some(epoch) = self.hosts[host].holding {
            if self.now >= self.hosts[host].hold_until && self.hosts[host].writes_in_flight == 0 {
                // The application stopped and its I/O completed: release.
                self.hosts[host].holding = None;
                self.log(|| format!("host{host} RELEASE epoch {epoch}"));
                self.send(host, Msg::Release { epoch });
                return;
            }
            self.hosts[host].writes_in_flight += 1;
            self.send(host, Msg::Write { epoch });
            self.send(host, Msg::Renew);
            return;
        }
        let h = &self.hosts[host];
        if !h.joined || h.fencing.is_some() || h.taking {
            return;
        }
        let (epoch, holder) = (self.target.epoch, self.target.holder);
        match holder {
            None => self.take(host, epoch),
            Some(x) if x == host => {}
            Some(x) => {
                let last = self.target.last_renew_ms.get(&x).copied().unwrap_or(0);
                if self.now < last + FAIL_MS {
                    return;
                }
                match self.target.keys.get(&x).copied() {
                    // Its key is already gone: it cannot write any more.
                    None => self.take(host, epoch),
                    Some(victim) => {
                        self.stats.fences += 1;
                        self.hosts[host].fencing = Some((victim, epoch));
                        self.log(|| format!("host{host} PREEMPT host{x} key 0x{victim:x}"));
                        self.send(host, Msg::Preempt { victim });
                        if self.bug == Some(FenceBug::TakeBeforePreemptConfirmed) {
                            self.hosts[host].fencing = None;
                            self.take(host, epoch);
                        }
                    }
                }
            }
        }
    }

    fn take(&mut self, host: usize, expect: u64) {
        self.hosts[host].taking = true;
        self.send(host, Msg::Take { expect });
    }

    fn arrive(&mut self, host: usize, session: u64, msg: Msg) {
        if self.target.session.get(&host) != Some(&session) {
            return; // the session ended: the target never runs it
        }
        let registered = self.target.keys.contains_key(&host);
        match msg {
            Msg::Register { key } => {
                self.target.keys.insert(host, key);
                self.reply(host, Reply::Ok(msg));
            }
            Msg::Write { epoch } => {
                if !registered {
                    self.stats.writes_refused += 1;
                    self.reply(host, Reply::Conflict(msg));
                    return;
                }
                self.stats.writes_landed += 1;
                if epoch < self.target.max_landed_epoch {
                    let (max, now) = (self.target.max_landed_epoch, self.now);
                    self.violations.push(format!(
                        "t={}.{:03}s host{host}'s write under lease version {epoch} landed after a write under version {max}",
                        now / 1000,
                        now % 1000
                    ));
                }
                self.target.max_landed_epoch = self.target.max_landed_epoch.max(epoch);
                self.reply(host, Reply::Ok(msg));
            }
            Msg::Renew => {
                if registered {
                    self.target.last_renew_ms.insert(host, self.now);
                    self.reply(host, Reply::Ok(msg));
                } else {
                    self.reply(host, Reply::Conflict(msg));
                }
            }
            Msg::Preempt { victim } => {
                if registered {
                    self.target.keys.retain(|_, k| *k != victim);
                    self.reply(host, Reply::Ok(msg));
                } else {
                    self.reply(host, Reply::Conflict(msg));
                }
            }
            Msg::ReadKeys { victim } => {
                let present = self.target.keys.values().any(|k| *k == victim);
                self.reply(host, Reply::KeyPresent(present));
            }
            Msg::Take { expect } => {
                if registered && self.target.epoch == expect {
                    self.target.epoch += 1;
                    self.target.holder = Some(host);
                    self.target.last_renew_ms.insert(host, self.now);
                    let e = self.target.epoch;
                    self.reply(host, Reply::Took(e));
                } else {
                    self.reply(host, Reply::Lost);
                }
            }
            Msg::Release { epoch } => {
                // Releasing writes the lease: refused, like any write, once fenced.
                if registered && self.target.holder == Some(host) && self.target.epoch == epoch {
                    self.target.holder = None;
                }
            }
        }
    }

    fn back(&mut self, host: usize, inc: u64, reply: Reply) {
        if !self.hosts[host].up || self.hosts[host].inc != inc {
            return;
        }
        match reply {
            Reply::Ok(Msg::Register { .. }) => self.hosts[host].joined = true,
            Reply::Ok(Msg::Write { .. }) => {
                let h = &mut self.hosts[host];
                h.writes_in_flight = h.writes_in_flight.saturating_sub(1);
            }
            Reply::Ok(Msg::Preempt { .. }) => {
                if let Some((victim, _)) = self.hosts[host].fencing {
                    self.send(host, Msg::ReadKeys { victim });
                }
            }
            Reply::KeyPresent(present) => {
                if let Some((victim, epoch)) = self.hosts[host].fencing.take() {
                    if present {
                        self.log(|| format!("host{host} preempt of 0x{victim:x} NOT confirmed"));
                    } else {
                        self.log(|| format!("host{host} preempt of 0x{victim:x} confirmed"));
                        self.take(host, epoch);
                    }
                }
            }
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
            Reply::Conflict(_) => {
                // RESERVATION CONFLICT: this host's key is gone, it has been fenced.
                // Lost-lease notice, kill escalation, then a reset; it rejoins only with a
                // new generation (a new key), never with the old one.
                self.reset(host, "FENCED (reservation conflict)");
            }
            Reply::Ok(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_runs_have_no_violation_and_do_fence() {
        let mut fences = 0;
        for seed in 1..=60 {
            let r = run_fence_seed(seed, 4, 600, None, false);
            assert!(r.violations.is_empty(), "seed {seed}: {:?}", r.violations);
            assert!(r.stats.takes > 0, "seed {seed}: nothing taken");
            fences += r.stats.fences;
        }
        assert!(fences > 0, "no run fenced a holder");
    }

    #[test]
    fn taking_before_the_preempt_is_confirmed_is_caught() {
        let bug = Some(FenceBug::TakeBeforePreemptConfirmed);
        let caught = (1..=60).any(|seed| {
            !run_fence_seed(seed, 4, 600, bug, false)
                .violations
                .is_empty()
        });
        assert!(caught);
        assert_eq!(parse_fence_bug("take-before-preempt-confirmed"), bug);
        assert_eq!(parse_fence_bug("nope"), None);
    }

    #[test]
    fn a_seed_replays_exactly() {
        let a = run_fence_seed(9, 4, 300, None, true);
        let b = run_fence_seed(9, 4, 300, None, true);
        assert_eq!(a.trace, b.trace);
    }
}
