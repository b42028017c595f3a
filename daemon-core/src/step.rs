//! The core as one state machine: [`Core::step`] takes the time and one [`Input`] and
//! returns the [`Effect`]s the shell is to carry out, in order. So far it covers one path
//! of the daemon, a lockspace's lease growing old and lost (the monitor's once-a-second
//! tick and the renewal outcomes that feed it); the rest of the daemon still calls the
//! transitions of [`crate::tables`] and [`crate::space_state`] directly (issue 23,
//! docs/architecture.md).
//!
//! Invariants:
//! - within one step's effects, every lease-loss notice comes before every kill order: a
//!   holder hears that its lease is going before anything is done to it;
//! - a kill order names only a live client holding a token of a lockspace whose lease is
//!   lost or being removed;
//! - [`Core::check`] holds after every step (checked in debug builds).

use client_lib::ext::WatchKind;
use disk_format::Name;
use lease_core::timeouts;

use crate::clients::LeaseHold;
use crate::kill::{plan_kills, KillOrder, SpaceKill};
use crate::space_state::{RenewalRec, SpaceSt};
use crate::tables::Tables;

/// One lockspace as the core keeps it: its name, status and io_timeout.
#[derive(Debug)]
pub struct CoreSpace {
    pub name: Name,
    pub st: SpaceSt,
    pub io_timeout_s: u64,
}

/// Everything the core owns so far: the client/resource tables and the lockspaces.
#[derive(Debug)]
pub struct Core<S, H> {
    pub tables: Tables<S, H>,
    /// The lockspaces, in the order they were added (a tick visits them in this order).
    pub spaces: Vec<CoreSpace>,
    /// `kill_grace_seconds` of the configuration.
    pub kill_grace_s: u64,
}

/// What happened, for [`Core::step`].
#[derive(Debug, Clone)]
pub enum Input {
    /// The monitor's periodic look at every lockspace's lease (once a second).
    Tick,
    /// A renewal of `ls` succeeded (its time is the step's `now_s`).
    RenewalOk { ls: Name, rec: RenewalRec },
    /// A renewal of `ls` failed with sanlock code `code`; `corrupt` when our delta
    /// sector was found damaged or taken.
    RenewalFailed { ls: Name, code: i32, corrupt: bool },
}

/// What the shell is to do, in the order given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// Tell the watchers of these holder pids that their leases in `ls` are going.
    LossNotice {
        ls: Name,
        kind: WatchKind,
        pids: Vec<i32>,
    },
    /// Log: our lease in `ls` was found lost, `age_s` after the last renewal.
    LockspaceFailed { ls: Name, age_s: u64, corrupt: i32 },
    /// Log: renewals of `ls` have failed for `age_s`.
    RenewalsFailing { ls: Name, age_s: u64 },
    /// A kill order for a holder of leases in `ls`.
    Kill { ls: Name, order: KillOrder },
}

impl<S, H: LeaseHold> Core<S, H> {
    /// A core with empty tables and no lockspace.
    pub fn new(kill_grace_s: u64) -> Core<S, H> {
        Core {
            tables: Tables::default(),
            spaces: Vec::new(),
            kill_grace_s,
        }
    }

    /// Applies `input` at `now_s` (monotonic seconds) and returns the effects, in order.
    pub fn step(&mut self, now_s: u64, input: Input) -> Vec<Effect> {
        let effects = match input {
            Input::Tick => self.tick(now_s),
            Input::RenewalOk { ls, rec } => {
                if let Some(s) = self.space_mut(&ls) {
                    s.st.renewal_ok(now_s, rec);
                }
                Vec::new()
            }
            Input::RenewalFailed { ls, code, corrupt } => {
                if let Some(s) = self.space_mut(&ls) {
                    s.st.renewal_failed(code, corrupt);
                }
                Vec::new()
            }
        };
        debug_assert_eq!(self.check(), Ok(()), "after a step");
        effects
    }

    fn space_mut(&mut self, ls: &Name) -> Option<&mut CoreSpace> {
        self.spaces.iter_mut().find(|s| s.name.same_as(ls))
    }

    /// Every lockspace's expiry check: first all the loss notices (and logs), then the
    /// kill orders for the lockspaces whose lease is lost or being removed.
    fn tick(&mut self, now_s: u64) -> Vec<Effect> {
        let mut effects = Vec::new();
        let mut dead = Vec::new();
        for s in &mut self.spaces {
            let ls = &s.name;
            let e = s.st.check_expiry(now_s, s.io_timeout_s);
            if let Some(kind) = e.notice {
                let pids = self.tables.holder_pids(ls, None);
                if !pids.is_empty() {
                    effects.push(Effect::LossNotice {
                        ls: *ls,
                        kind,
                        pids,
                    });
                }
            }
            if let Some(age_s) = e.failed_after_s {
                effects.push(Effect::LockspaceFailed {
                    ls: *ls,
                    age_s,
                    corrupt: s.st.corrupt_result,
                });
            } else if let Some(age_s) = e.failing_for_s {
                effects.push(Effect::RenewalsFailing { ls: *ls, age_s });
            }
            if e.kill {
                dead.push((
                    *ls,
                    SpaceKill {
                        kill_now: s.st.kill_now,
                        now: now_s,
                        last_success: s.st.last_success_s,
                        fail_s: timeouts::id_renewal_fail_seconds(s.io_timeout_s),
                        grace_s: self.kill_grace_s,
                    },
                ));
            }
        }
        for (ls, space) in dead {
            for order in plan_kills(&mut self.tables, &ls, space) {
                effects.push(Effect::Kill { ls, order });
            }
        }
        effects
    }

    /// The core's invariants: the tables' ([`Tables::check`]) and, for each lockspace, a
    /// loss notice is marked given only for a lost lease or a removal.
    pub fn check(&self) -> Result<(), String> {
        self.tables.check()?;
        for s in &self.spaces {
            let ls = &s.name;
            if s.st.loss_notified && !s.st.space_dead && !s.st.kill_now {
                // check_expiry marks the notice given in the same step that finds the
                // lease lost.
                return Err(format!("{ls:?}: loss notified for a lease not lost"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clients::{ClientToken, KillPath};
    use crate::kill::{SIGKILL, SIGTERM};
    use crate::space_state::Phase;

    #[derive(Debug, Clone, Default)]
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
                name: name(ls),
                st: SpaceSt::default(),
                io_timeout_s: IO_S,
            };
            s.st.phase = Phase::Joined;
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
        c
    }

    fn rec(t: u64) -> RenewalRec {
        RenewalRec {
            timestamp: t,
            read_ms: 1,
            write_ms: 0,
        }
    }

    fn first(effects: &[Effect], f: impl Fn(&Effect) -> bool) -> Option<usize> {
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
                ls: name("ls"),
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
                ls: name("ok"),
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

    #[test]
    fn check_finds_a_notice_for_a_live_lease() {
        let mut c = core(&["ls"], 100, &[]);
        c.space_mut(&name("ls")).expect("ls").st.loss_notified = true;
        assert!(c.check().unwrap_err().contains("not lost"));
    }
}
