//! The lease-loss watch registry (lockd extension, `client_lib::ext`): which connection
//! watches the leases of which process.
//!
//! A watch is a connection that sent `LOCKD_CMD_WATCH` for a pid. The core keeps the
//! registry and decides, in the step that gives a notice, which watch connections it
//! goes to ([`Watches::address`]): every [`Effect::LossNotice`] and
//! [`Effect::RequestNotice`] names its recipients ([`WatchTo`]), and the shell writes
//! to exactly those. The heartbeat's recipients and lease counts come from the core too
//! (`Input::WatchTick`, [`Effect::WatchBeats`]).
//!
//! Invariants (checked by [`Watches::check`], part of `Core::check`):
//! - at most [`MAX_WATCHES`] watches, one per connection;
//! - every watch belongs to a live client slot (a connection whose process has not been
//!   seen to die): a watch ends with its connection (`Input::Closed`, a pid exit) or when
//!   the shell could not write to it (`Input::WatchDropped`);
//! - a watched pid is positive.

use std::collections::BTreeMap;

use crate::clients::Clients;
use crate::io::Effect;
pub use crate::io::{WatchBeat, WatchTo};

/// Most watch connections at once (each is also a client slot).
pub const MAX_WATCHES: usize = 256;

/// Why a WATCH was refused (the code is sanlock-style: -EINVAL, -EPERM, -EMFILE).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchRefused {
    /// No pid to watch (the connection's pid is unknown, or the pid asked is not > 0).
    NoPid,
    /// A non-root caller asked to watch a process that is not its own uid's client.
    NotYours,
    /// [`MAX_WATCHES`] are open.
    Full,
}

impl WatchRefused {
    /// The reply code.
    pub fn code(self) -> i32 {
        match self {
            WatchRefused::NoPid => -crate::errno::EINVAL,
            WatchRefused::NotYours => -crate::errno::EPERM,
            WatchRefused::Full => -crate::errno::EMFILE,
        }
    }

    /// The reason, for the shell's log.
    pub fn why(self) -> &'static str {
        match self {
            WatchRefused::NoPid => "no process to watch",
            WatchRefused::NotYours => "the process is another user's",
            WatchRefused::Full => "too many watches",
        }
    }
}

/// The registry: watch connection → watched pid.
#[derive(Debug, Default)]
pub struct Watches {
    by_ci: BTreeMap<u32, i32>,
}

impl Watches {
    /// Connection `ci` of `clients` asks to watch `asked_pid` (0: its own process). Root
    /// may watch any process; another uid only its own process or a registered client of
    /// its uid. A connection watches one pid: a second WATCH on it moves the watch.
    pub fn register<S>(
        &mut self,
        clients: &Clients<S>,
        ci: u32,
        asked_pid: i32,
    ) -> Result<WatchTo, WatchRefused> {
        let Some(slot) = clients.slots.get(&ci).filter(|c| !c.pid_dead) else {
            return Err(WatchRefused::NoPid);
        };
        let pid = if asked_pid == 0 { slot.pid } else { asked_pid };
        if pid <= 0 {
            return Err(WatchRefused::NoPid);
        }
        if slot.uid != 0 && pid != slot.pid {
            let owner_uid = clients
                .slots
                .values()
                .find(|c| c.registered && c.pid == pid)
                .map(|c| c.uid);
            if owner_uid != Some(slot.uid) {
                return Err(WatchRefused::NotYours);
            }
        }
        if !self.by_ci.contains_key(&ci) && self.by_ci.len() >= MAX_WATCHES {
            return Err(WatchRefused::Full);
        }
        self.by_ci.insert(ci, pid);
        Ok(WatchTo { ci, pid })
    }

    /// The watch of connection `ci` ends (closed, its process died, a write failed).
    pub fn end(&mut self, ci: u32) -> bool {
        self.by_ci.remove(&ci).is_some()
    }

    /// The pid connection `ci` watches, if it is a watch.
    pub fn pid_of(&self, ci: u32) -> Option<i32> {
        self.by_ci.get(&ci).copied()
    }

    /// How many watches are open.
    pub fn len(&self) -> usize {
        self.by_ci.len()
    }

    /// Whether no watch is open.
    pub fn is_empty(&self) -> bool {
        self.by_ci.is_empty()
    }

    /// The watches of the processes in `pids`, in connection order.
    pub fn of(&self, pids: &[i32]) -> Vec<WatchTo> {
        self.by_ci
            .iter()
            .filter(|(_, pid)| pids.contains(pid))
            .map(|(&ci, &pid)| WatchTo { ci, pid })
            .collect()
    }

    /// Fills in the recipients of every notice among `fx` (given in this step, before
    /// any effect runs): the watches of the pids it names.
    pub fn address<H>(&self, fx: &mut [Effect<H>]) {
        for e in fx.iter_mut() {
            match e {
                Effect::LossNotice { pids, to, .. } | Effect::RequestNotice { pids, to, .. } => {
                    *to = self.of(pids);
                }
                _ => {}
            }
        }
    }

    /// One heartbeat per watch, with the number of leases its process holds now (its
    /// live clients' tokens).
    pub fn beats<S>(&self, clients: &Clients<S>) -> Vec<WatchBeat> {
        self.by_ci
            .iter()
            .map(|(&ci, &pid)| {
                let n: usize = clients
                    .slots
                    .values()
                    .filter(|c| c.pid == pid && !c.pid_dead)
                    .map(|c| c.tokens.len())
                    .sum();
                WatchBeat {
                    ci,
                    pid,
                    leases: u32::try_from(n).unwrap_or(u32::MAX),
                }
            })
            .collect()
    }

    /// The registry's invariants against the client table.
    pub fn check<S>(&self, clients: &Clients<S>) -> Result<(), String> {
        if self.by_ci.len() > MAX_WATCHES {
            return Err(format!(
                "{} watches, more than {MAX_WATCHES}",
                self.by_ci.len()
            ));
        }
        for (&ci, &pid) in &self.by_ci {
            if pid <= 0 {
                return Err(format!("watch {ci} of pid {pid}"));
            }
            match clients.slots.get(&ci) {
                Some(c) if !c.pid_dead => {}
                _ => return Err(format!("watch {ci} of pid {pid} has no live client slot")),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clients() -> Clients<()> {
        Clients::default()
    }

    #[test]
    fn a_watch_defaults_to_its_own_process_and_root_may_watch_any() {
        let mut c = clients();
        let own = c.add(-1, 500, 1000, None).expect("slot");
        let root = c.add(-1, 600, 0, None).expect("slot");
        let mut w = Watches::default();
        assert_eq!(w.register(&c, own, 0), Ok(WatchTo { ci: own, pid: 500 }));
        assert_eq!(
            w.register(&c, root, 4242),
            Ok(WatchTo {
                ci: root,
                pid: 4242
            })
        );
        assert_eq!(w.register(&c, root, -3), Err(WatchRefused::NoPid));
        assert_eq!(
            w.register(&c, 99, 0),
            Err(WatchRefused::NoPid),
            "no such slot"
        );
        assert_eq!(w.len(), 2);
        assert_eq!(w.check(&c), Ok(()));
    }

    #[test]
    fn a_user_watches_only_its_own_uids_registered_clients() {
        let mut c = clients();
        let mine = c.add(-1, 700, 1000, None).expect("slot");
        let theirs = c.add(-1, 701, 1001, None).expect("slot");
        let watcher = c.add(-1, 702, 1000, None).expect("slot");
        let mut w = Watches::default();
        assert_eq!(
            w.register(&c, watcher, 700),
            Err(WatchRefused::NotYours),
            "not registered yet"
        );
        c.slots.get_mut(&mine).expect("slot").registered = true;
        c.slots.get_mut(&theirs).expect("slot").registered = true;
        assert_eq!(
            w.register(&c, watcher, 700),
            Ok(WatchTo {
                ci: watcher,
                pid: 700
            })
        );
        assert_eq!(w.register(&c, watcher, 701), Err(WatchRefused::NotYours));
        assert_eq!(
            w.of(&[700]),
            vec![WatchTo {
                ci: watcher,
                pid: 700
            }]
        );
    }

    #[test]
    fn watches_are_bounded_and_a_second_watch_on_a_connection_moves_it() {
        let mut c = clients();
        let mut w = Watches::default();
        let cis: Vec<u32> = (0..=MAX_WATCHES as i32)
            .map(|i| c.add(-1, 10_000 + i, 0, None).expect("slot"))
            .collect();
        for &ci in &cis[..MAX_WATCHES] {
            w.register(&c, ci, 0).expect("room");
        }
        assert_eq!(w.register(&c, cis[MAX_WATCHES], 0), Err(WatchRefused::Full));
        assert_eq!(WatchRefused::Full.code(), -crate::errno::EMFILE);
        // Moving an existing watch needs no room.
        assert_eq!(
            w.register(&c, cis[0], 55),
            Ok(WatchTo {
                ci: cis[0],
                pid: 55
            })
        );
        assert_eq!(w.len(), MAX_WATCHES);
        assert!(w.end(cis[1]));
        assert!(!w.end(cis[1]));
        assert_eq!(
            w.register(&c, cis[MAX_WATCHES], 0).map(|t| t.pid),
            Ok(10_000 + MAX_WATCHES as i32)
        );
    }

    #[test]
    fn notices_are_addressed_to_the_watches_of_the_pids_they_name() {
        let mut c = clients();
        let a = c.add(-1, 1, 0, None).expect("slot");
        let b = c.add(-1, 2, 0, None).expect("slot");
        let a2 = c.add(-1, 3, 0, None).expect("slot");
        let mut w = Watches::default();
        w.register(&c, a, 100).expect("ok");
        w.register(&c, b, 200).expect("ok");
        w.register(&c, a2, 100).expect("ok");
        let mut fx: Vec<Effect<()>> = vec![
            Effect::LossNotice {
                ls: disk_format::Name::new("ls").expect("name"),
                kind: client_lib::ext::WatchKind::LockspaceFailed,
                pids: vec![100, 300],
                to: Vec::new(),
                lease: None,
            },
            Effect::Close { ci: 9 },
        ];
        w.address(&mut fx);
        assert!(matches!(&fx[0], Effect::LossNotice { to, .. }
            if to == &[WatchTo { ci: a, pid: 100 }, WatchTo { ci: a2, pid: 100 }]));
    }

    #[test]
    fn a_watch_of_a_dead_slot_breaks_the_check() {
        let mut c = clients();
        let ci = c.add(-1, 1, 0, None).expect("slot");
        let mut w = Watches::default();
        w.register(&c, ci, 0).expect("ok");
        c.slots.get_mut(&ci).expect("slot").pid_dead = true;
        assert!(w.check(&c).is_err());
        assert_eq!(w.register(&c, ci, 0), Err(WatchRefused::NoPid));
    }
}
