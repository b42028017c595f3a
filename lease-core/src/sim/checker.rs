//! The invariant checker: sees every hold in the simulation, from the outside.
//!
//! A holder is one incarnation of one simulated host. It holds a resource from the moment
//! its acquire returned success until it starts releasing it or is reset (crash or
//! watchdog); it holds its host_id from a successful delta acquire until it starts its
//! delta release or is reset.

use std::collections::{BTreeMap, BTreeSet};

use crate::paxos::Mode;

/// One incarnation of one host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Holder {
    /// Simulated host index.
    pub host: usize,
    /// Incarnation (bumped at each restart).
    pub incarnation: u64,
}

#[derive(Debug, Default)]
struct ResourceState {
    holders: BTreeMap<Holder, (Mode, u64)>,
    lvers: BTreeSet<u64>,
    max_lver: u64,
    max_ex_lver: u64,
}

/// Invariants: one exclusive holder, never exclusive beside shared, lver strictly
/// increasing per resource, no host_id held by two incarnations at once.
#[derive(Debug, Default)]
pub struct Checker {
    resources: BTreeMap<usize, ResourceState>,
    host_ids: BTreeMap<u64, Holder>,
    /// Per host_id, every (world ms, generation) at which a join on it completed.
    joins: BTreeMap<u64, Vec<(u64, u64)>>,
    violations: Vec<String>,
}

impl Checker {
    /// Empty checker.
    pub fn new() -> Checker {
        Checker::default()
    }

    /// Violations found so far.
    pub fn violations(&self) -> &[String] {
        &self.violations
    }

    fn violate(&mut self, now_ms: u64, msg: String) {
        self.violations
            .push(format!("t={}.{:03}s {msg}", now_ms / 1000, now_ms % 1000));
    }

    fn check_lver(&mut self, now_ms: u64, who: Holder, res: usize, mode: Mode, lver: u64) {
        let st = self.resources.entry(res).or_default();
        let mut msgs = Vec::new();
        if !st.lvers.insert(lver) {
            msgs.push(format!(
                "{who:?} got lver {lver} of resource {res} a second time"
            ));
        }
        match mode {
            Mode::Exclusive if lver <= st.max_lver => msgs.push(format!(
                "{who:?} got exclusive lver {lver} of resource {res}, not above {}",
                st.max_lver
            )),
            Mode::Shared if lver <= st.max_ex_lver => msgs.push(format!(
                "{who:?} got shared lver {lver} of resource {res}, not above exclusive {}",
                st.max_ex_lver
            )),
            _ => {}
        }
        st.max_lver = st.max_lver.max(lver);
        if mode == Mode::Exclusive {
            st.max_ex_lver = st.max_ex_lver.max(lver);
        }
        for m in msgs {
            self.violate(now_ms, m);
        }
    }

    fn check_conflicts(&mut self, now_ms: u64, who: Holder, res: usize, mode: Mode) {
        let st = self.resources.entry(res).or_default();
        let conflicts: Vec<(Holder, Mode)> = st
            .holders
            .iter()
            .filter(|(h, (m, _))| **h != who && (mode == Mode::Exclusive || *m == Mode::Exclusive))
            .map(|(h, (m, _))| (*h, *m))
            .collect();
        for (h, m) in conflicts {
            self.violate(
                now_ms,
                format!("{who:?} acquired resource {res} {mode:?} while {h:?} holds it {m:?}"),
            );
        }
    }

    /// A successful acquire returned `lver`.
    pub fn acquired(&mut self, now_ms: u64, who: Holder, res: usize, mode: Mode, lver: u64) {
        self.check_conflicts(now_ms, who, res, mode);
        self.check_lver(now_ms, who, res, mode, lver);
        let st = self.resources.entry(res).or_default();
        if st.holders.insert(who, (mode, lver)).is_some() {
            self.violate(
                now_ms,
                format!("{who:?} acquired resource {res} it already held"),
            );
        }
    }

    /// A successful convert to `mode`; a conversion to exclusive carries a new lver.
    pub fn converted(&mut self, now_ms: u64, who: Holder, res: usize, mode: Mode, lver: u64) {
        if mode == Mode::Exclusive {
            self.check_conflicts(now_ms, who, res, mode);
            self.check_lver(now_ms, who, res, mode, lver);
        }
        let st = self.resources.entry(res).or_default();
        if st.holders.insert(who, (mode, lver)).is_none() {
            self.violate(
                now_ms,
                format!("{who:?} converted resource {res} it did not hold"),
            );
        }
    }

    /// The holder starts releasing.
    pub fn released(&mut self, who: Holder, res: usize) {
        if let Some(st) = self.resources.get_mut(&res) {
            st.holders.remove(&who);
        }
    }

    /// Delta acquire of `host_id` succeeded.
    pub fn host_id_acquired(&mut self, now_ms: u64, who: Holder, host_id: u64) {
        if let Some(prev) = self.host_ids.insert(host_id, who) {
            if prev != who {
                self.violate(
                    now_ms,
                    format!("{who:?} acquired host_id {host_id} while {prev:?} holds it"),
                );
            }
        }
    }

    /// A join on `host_id` at `generation` completed at world time `now_ms` (its record
    /// landed before).
    pub fn host_joined(&mut self, now_ms: u64, host_id: u64, generation: u64) {
        self.joins
            .entry(host_id)
            .or_default()
            .push((now_ms, generation));
    }

    /// The view bound of renewal reads ([`crate::reads`]): `who` (host_id `our_host_id`)
    /// completed a renewal whose read, and those of its `full_every` renewals before it,
    /// were all issued at or after world time `window_start_ms`. One of them read the
    /// whole area, so its monitor must show every host_id that completed a join before
    /// that time at that join's generation or a later one (`seen(host_id)`: the generation
    /// our monitor holds, 0 = none).
    pub fn check_view(
        &mut self,
        now_ms: u64,
        who: Holder,
        our_host_id: u64,
        window_start_ms: u64,
        seen: impl Fn(u64) -> u64,
    ) {
        let mut msgs = Vec::new();
        for (&host_id, joins) in &self.joins {
            if host_id == our_host_id {
                continue;
            }
            let Some(&(at_ms, gen)) = joins.iter().rev().find(|&&(t, _)| t <= window_start_ms)
            else {
                continue;
            };
            let have = seen(host_id);
            if have < gen {
                msgs.push(format!(
                    "{who:?} does not see host_id {host_id} gen {gen} (joined at \
                     t={}.{:03}s; its view has gen {have}) after a full renewal-read cycle",
                    at_ms / 1000,
                    at_ms % 1000
                ));
            }
        }
        for m in msgs {
            self.violate(now_ms, m);
        }
    }

    /// Delta release of `host_id` starts.
    pub fn host_id_released(&mut self, who: Holder, host_id: u64) {
        if self.host_ids.get(&host_id) == Some(&who) {
            self.host_ids.remove(&host_id);
        }
    }

    /// The host was reset: every incarnation on it (the current daemon's and those of
    /// killed daemons whose lease holders were still running) loses every lease and its
    /// host_id.
    pub fn reset_host(&mut self, host: usize) {
        for st in self.resources.values_mut() {
            st.holders.retain(|h, _| h.host != host);
        }
        self.host_ids.retain(|_, h| h.host != host);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: Holder = Holder {
        host: 0,
        incarnation: 1,
    };
    const B: Holder = Holder {
        host: 1,
        incarnation: 1,
    };

    #[test]
    fn detects_double_exclusive_and_ex_beside_sh() {
        let mut c = Checker::new();
        c.acquired(0, A, 0, Mode::Exclusive, 1);
        assert!(c.violations().is_empty());
        c.acquired(1, B, 0, Mode::Exclusive, 2);
        assert_eq!(c.violations().len(), 1);
        c.released(A, 0);
        c.released(B, 0);
        c.acquired(2, A, 0, Mode::Shared, 3);
        c.acquired(3, B, 0, Mode::Shared, 4);
        assert_eq!(c.violations().len(), 1);
        c.released(B, 0);
        c.acquired(4, B, 0, Mode::Exclusive, 5);
        assert_eq!(c.violations().len(), 2);
    }

    #[test]
    fn detects_lver_reuse_and_decrease() {
        let mut c = Checker::new();
        c.acquired(0, A, 0, Mode::Exclusive, 4);
        c.released(A, 0);
        c.acquired(1, B, 0, Mode::Exclusive, 4);
        assert_eq!(c.violations().len(), 2);
        c.released(B, 0);
        c.acquired(2, B, 0, Mode::Exclusive, 3);
        assert_eq!(c.violations().len(), 3);
    }

    #[test]
    fn reset_and_host_ids() {
        let mut c = Checker::new();
        c.host_id_acquired(0, A, 1);
        c.acquired(0, A, 0, Mode::Exclusive, 1);
        c.reset_host(A.host);
        c.acquired(1, B, 0, Mode::Exclusive, 2);
        c.host_id_acquired(1, B, 1);
        assert!(c.violations().is_empty());
        c.host_id_acquired(2, A, 1);
        assert_eq!(c.violations().len(), 1);
    }

    #[test]
    fn a_killed_daemons_holders_hold_until_the_host_resets() {
        // Incarnation 1's daemon was killed; its holder still runs. Incarnation 2 on the
        // same host taking the lease is two holders, until the host resets.
        let a2 = Holder {
            host: 0,
            incarnation: 2,
        };
        let mut c = Checker::new();
        c.acquired(0, A, 0, Mode::Exclusive, 1);
        c.acquired(1, a2, 0, Mode::Exclusive, 2);
        assert_eq!(c.violations().len(), 1);
        c.reset_host(0);
        c.acquired(2, B, 0, Mode::Exclusive, 3);
        assert_eq!(c.violations().len(), 1);
    }
}
