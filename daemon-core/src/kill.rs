//! Kill escalation for holders of leases in a failed or removed lockspace (sanlock
//! `kill_pids`), as decisions: which client gets what, now. The shell carries them out
//! (the daemon through its helper process) with no lock held.
//!
//! Per client, at most one order per second, at most [`KILL_COUNT_MAX`] orders:
//! - lockspace removed / forced shutdown: SIGKILL at once;
//! - failed lockspace, while now < last_success + id_renewal_fail + kill_grace: the
//!   client's killpath once (if set and grace > 0), else SIGTERM;
//! - afterwards: SIGKILL;
//! - RESTRICT_SIGKILL turns SIGKILL into SIGTERM; RESTRICT_SIGTERM turns SIGTERM into
//!   SIGKILL.
//!
//! Invariant ([`plan_kills`]): only a live client (pid > 0, not dead) holding a token of
//! the lockspace gets an order.
//!
//! A request from another host (sanlock `do_request`), once the shell has read the
//! lease's request record and found it asks for a newer lver ([`examined_lease`]):
//! - the lease's watchers first hear of it (one [`Effect::RequestNotice`]), then each
//!   live holder of *that lease* gets one order, with no escalation and no count;
//! - FORCE: SIGKILL (SIGTERM if the client restricted SIGKILL);
//! - GRACEFUL: the client's killpath if it has one, else SIGTERM (SIGKILL if SIGTERM is
//!   restricted);
//! - any other force mode: the notice and no order (sanlock logs it and does nothing).
//!
//! Invariant ([`examined_lease`]): an order goes only to a live client (pid > 0, not
//! dead) listed as a holder of the examined lease (as in sanlock, also one whose acquire
//! of several leases has taken this one and not ended yet), whose pid the notice before
//! it named; nothing happens to a lease that is busy (acquired, converted or released
//! on disk right now) or no longer held at the lver the record was compared with.

use client_lib::proto::{
    SANLK_REQ_FORCE, SANLK_REQ_GRACEFUL, SANLK_RESTRICT_SIGKILL, SANLK_RESTRICT_SIGTERM,
};
use disk_format::Name;

use crate::clients::LeaseHold;
use crate::io::Effect;
pub use crate::io::KillOrder;
use crate::tables::Tables;

/// sanlock's kill_count_max.
pub const KILL_COUNT_MAX: u32 = 100;

/// SIGKILL and SIGTERM on Linux (the core does not link libc; the daemon's unit test
/// `core_errno_values_are_libc_s` checks them).
pub const SIGKILL: i32 = 9;
pub const SIGTERM: i32 = 15;

/// What to do to one client now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KillAction {
    RunKillpath,
    Signal(i32),
    Nothing,
}

/// Everything the kill decision depends on.
#[derive(Debug, Clone, Copy)]
pub struct KillInput {
    /// Removal or forced shutdown: SIGKILL at once.
    pub kill_now: bool,
    pub now: u64,
    pub last_success: u64,
    pub fail_s: u64,
    pub grace_s: u64,
    pub has_killpath: bool,
    pub kill_count: u32,
    pub restricted: u32,
}

/// Decides the next kill action.
pub fn decide(k: KillInput) -> KillAction {
    let KillInput {
        kill_now,
        now,
        last_success,
        fail_s,
        grace_s,
        has_killpath,
        kill_count,
        restricted,
    } = k;
    let in_grace = !kill_now && now < last_success + fail_s + grace_s;
    let sig = if in_grace {
        if has_killpath && grace_s > 0 {
            return if kill_count == 0 {
                KillAction::RunKillpath
            } else {
                KillAction::Nothing
            };
        }
        SIGTERM
    } else {
        SIGKILL
    };
    let sig = match sig {
        SIGKILL if restricted & SANLK_RESTRICT_SIGKILL != 0 => SIGTERM,
        SIGTERM if restricted & SANLK_RESTRICT_SIGTERM != 0 => SIGKILL,
        s => s,
    };
    KillAction::Signal(sig)
}

/// One lockspace's side of a kill pass: [`KillInput`]'s lockspace fields.
#[derive(Debug, Clone, Copy)]
pub struct SpaceKill {
    pub kill_now: bool,
    pub now: u64,
    pub last_success: u64,
    pub fail_s: u64,
    pub grace_s: u64,
}

/// One pass of escalation over the holders of lockspace `ls`: the orders due now, with
/// each ordered client's `kill_count`/`kill_last` advanced (so a pass a second later
/// escalates).
pub fn plan_kills<S, H: LeaseHold>(
    tables: &mut Tables<S, H>,
    ls: &Name,
    space: SpaceKill,
) -> Vec<KillOrder> {
    let mut orders = Vec::new();
    let mut cis: Vec<u32> = tables.clients.slots.keys().copied().collect();
    cis.sort_unstable();
    for ci in cis {
        let Some(c) = tables.clients.slots.get_mut(&ci) else {
            continue;
        };
        if c.pid_dead || c.pid <= 0 || !c.tokens.iter().any(|t| t.ls.same_as(ls)) {
            continue;
        }
        if c.kill_count >= KILL_COUNT_MAX {
            if c.kill_count == KILL_COUNT_MAX {
                orders.push(KillOrder::Exhausted { ci, pid: c.pid });
                c.kill_count += 1;
            }
            continue;
        }
        if c.kill_count > 0 && space.now < c.kill_last + 1 {
            continue;
        }
        let action = decide(KillInput {
            kill_now: space.kill_now,
            now: space.now,
            last_success: space.last_success,
            fail_s: space.fail_s,
            grace_s: space.grace_s,
            has_killpath: c.killpath.is_some(),
            kill_count: c.kill_count,
            restricted: c.restricted,
        });
        match (action, &c.killpath) {
            (KillAction::Nothing, _) => continue,
            (KillAction::RunKillpath, Some(kp)) => orders.push(KillOrder::RunKillpath {
                ci,
                pid: c.pid,
                killpath: kp.clone(),
            }),
            // decide() asks for a killpath only when there is one.
            (KillAction::RunKillpath, None) => {}
            (KillAction::Signal(sig), _) => orders.push(KillOrder::Signal {
                ci,
                pid: c.pid,
                sig,
            }),
        }
        c.kill_count += 1;
        c.kill_last = space.now;
    }
    orders
}

/// What one holder of a requested lease gets (sanlock `do_request`): FORCE → SIGKILL,
/// or SIGTERM when SIGKILL is restricted; GRACEFUL → its killpath if it has one, else
/// SIGTERM, or SIGKILL when SIGTERM is restricted; any other force mode → nothing.
pub fn decide_request(force_mode: u32, has_killpath: bool, restricted: u32) -> KillAction {
    match force_mode {
        SANLK_REQ_FORCE if restricted & SANLK_RESTRICT_SIGKILL != 0 => KillAction::Signal(SIGTERM),
        SANLK_REQ_FORCE => KillAction::Signal(SIGKILL),
        SANLK_REQ_GRACEFUL if has_killpath => KillAction::RunKillpath,
        SANLK_REQ_GRACEFUL if restricted & SANLK_RESTRICT_SIGTERM != 0 => {
            KillAction::Signal(SIGKILL)
        }
        SANLK_REQ_GRACEFUL => KillAction::Signal(SIGTERM),
        _ => KillAction::Nothing,
    }
}

/// The effects of a request found on lease `ls:name`: the shell read its request record
/// while the lease was held at `lver` and found a newer lver asked for with
/// `force_mode`. In order: one [`Effect::RequestNotice`] naming the lease's live holder
/// pids, then one [`Effect::Kill`] per holder ([`decide_request`]), by slot number.
/// Nothing when the lease is not in the table, busy, held at another lver now (released
/// and taken again since the read: the request was not for this holding), or has no
/// live holder. The tables are only read: a request's order is not part of a
/// lockspace's kill escalation.
pub fn examined_lease<S, H: LeaseHold>(
    tables: &Tables<S, H>,
    ls: &Name,
    name: &Name,
    lver: u64,
    force_mode: u32,
) -> Vec<Effect<H>> {
    let Some(lr) = tables
        .resources
        .values()
        .find(|r| r.ls.same_as(ls) && r.name.same_as(name))
    else {
        return Vec::new();
    };
    if lr.busy || lr.orphan || lr.held.lver() != lver {
        return Vec::new();
    }
    let mut cis = lr.holders.clone();
    cis.sort_unstable();
    cis.dedup();
    let mut pids = Vec::new();
    let mut kills = Vec::new();
    for ci in cis {
        let Some(c) = tables.clients.slots.get(&ci) else {
            continue;
        };
        if c.pid <= 0 || c.pid_dead {
            continue;
        }
        // A holder whose acquire of several leases has not ended has no token yet, but
        // holds this lease on disk: it is ordered as the others (sanlock's holder of a
        // resource on its held list), and named by the notice before.
        pids.push(c.pid);
        let order = match (
            decide_request(force_mode, c.killpath.is_some(), c.restricted),
            &c.killpath,
        ) {
            (KillAction::Signal(sig), _) => KillOrder::Signal {
                ci,
                pid: c.pid,
                sig,
            },
            (KillAction::RunKillpath, Some(kp)) => KillOrder::RunKillpath {
                ci,
                pid: c.pid,
                killpath: kp.clone(),
            },
            // decide_request asks for a killpath only when there is one.
            (KillAction::RunKillpath, None) | (KillAction::Nothing, _) => continue,
        };
        kills.push(Effect::Kill { ls: *ls, order });
    }
    if pids.is_empty() {
        return Vec::new();
    }
    pids.sort_unstable();
    pids.dedup();
    let mut effects = vec![Effect::RequestNotice {
        ls: *ls,
        name: *name,
        lver,
        force_mode,
        pids,
        to: Vec::new(),
        lease: None,
    }];
    effects.append(&mut kills);
    effects
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clients::{ClientToken, KillPath};
    use crate::AcquireStart;

    /// A held lease's on-disk state in these tests: just its lver.
    #[derive(Debug, Clone, Default, PartialEq, Eq)]
    struct Held(u64);

    impl LeaseHold for Held {
        fn lver(&self) -> u64 {
            self.0
        }
    }

    const LVER: u64 = 7;

    fn name(s: &str) -> Name {
        Name::new(s).expect("name")
    }

    /// A registered client `pid` holding `ls:res` (shared or not) at [`LVER`], token and
    /// all; its slot number.
    fn holder(t: &mut Tables<(), Held>, pid: i32, ls: &str, res: &str, shared: bool) -> u32 {
        let ci = t.clients.add(-1, pid, 1000, None).expect("slot");
        t.clients.slots.get_mut(&ci).expect("slot").registered = true;
        let key = (name(ls), name(res));
        match t.start_acquire(ci, key, shared, 0, &[]) {
            Ok(AcquireStart::Disk) => {
                t.finish_acquire(key, ci, Ok(Held(LVER))).expect("held");
            }
            Ok(AcquireStart::Local { .. }) => {}
            Err(r) => panic!("acquire of {key:?} refused: {r:?}"),
        }
        t.record_tokens(
            ci,
            vec![ClientToken {
                token_id: ci + 1,
                ls: key.0,
                name: key.1,
                disks: Vec::new(),
                shared,
                persistent: false,
                lver: LVER,
                acquired: 1,
            }],
        )
        .expect("recorded");
        ci
    }

    fn examine(t: &Tables<(), Held>, res: &str, force_mode: u32) -> Vec<Effect<Held>> {
        examined_lease(t, &name("ls"), &name(res), LVER, force_mode)
    }

    fn killpath() -> KillPath {
        KillPath {
            path: "/usr/bin/true".into(),
            args: String::new(),
            with_pid: true,
            run_as: None,
        }
    }

    #[test]
    fn a_request_decides_as_sanlock_do_request() {
        use KillAction::{Nothing, RunKillpath, Signal};
        let (kill, term) = (SANLK_RESTRICT_SIGKILL, SANLK_RESTRICT_SIGTERM);
        // FORCE: SIGKILL, SIGTERM if SIGKILL is restricted; a killpath plays no part.
        assert_eq!(decide_request(SANLK_REQ_FORCE, false, 0), Signal(SIGKILL));
        assert_eq!(decide_request(SANLK_REQ_FORCE, true, 0), Signal(SIGKILL));
        assert_eq!(
            decide_request(SANLK_REQ_FORCE, false, kill),
            Signal(SIGTERM)
        );
        assert_eq!(
            decide_request(SANLK_REQ_FORCE, false, term),
            Signal(SIGKILL)
        );
        // GRACEFUL: the killpath, else SIGTERM, SIGKILL if SIGTERM is restricted.
        assert_eq!(decide_request(SANLK_REQ_GRACEFUL, true, 0), RunKillpath);
        assert_eq!(decide_request(SANLK_REQ_GRACEFUL, true, term), RunKillpath);
        assert_eq!(
            decide_request(SANLK_REQ_GRACEFUL, false, 0),
            Signal(SIGTERM)
        );
        assert_eq!(
            decide_request(SANLK_REQ_GRACEFUL, false, term),
            Signal(SIGKILL)
        );
        assert_eq!(
            decide_request(SANLK_REQ_GRACEFUL, false, kill),
            Signal(SIGTERM)
        );
        // No other force mode does anything.
        for mode in [0, 3, u32::MAX] {
            assert_eq!(decide_request(mode, true, 0), Nothing, "mode {mode}");
            assert_eq!(decide_request(mode, false, 0), Nothing, "mode {mode}");
        }
    }

    #[test]
    fn a_request_notifies_then_kills_the_holders_of_that_lease_only() {
        let mut t = Tables::default();
        let a = holder(&mut t, 101, "ls", "r", true);
        let b = holder(&mut t, 102, "ls", "r", true);
        holder(&mut t, 103, "ls", "other", false);
        holder(&mut t, 104, "ls2", "r", false);
        let fx = examine(&t, "r", SANLK_REQ_FORCE);
        assert_eq!(
            fx,
            vec![
                Effect::RequestNotice {
                    ls: name("ls"),
                    name: name("r"),
                    lver: LVER,
                    force_mode: SANLK_REQ_FORCE,
                    pids: vec![101, 102],
                    to: Vec::new(),
                    lease: None,
                },
                Effect::Kill {
                    ls: name("ls"),
                    order: KillOrder::Signal {
                        ci: a,
                        pid: 101,
                        sig: SIGKILL
                    }
                },
                Effect::Kill {
                    ls: name("ls"),
                    order: KillOrder::Signal {
                        ci: b,
                        pid: 102,
                        sig: SIGKILL
                    }
                },
            ]
        );
        // Nothing was counted: a request is no step of a lockspace's escalation.
        assert!(t.clients.slots.values().all(|c| c.kill_count == 0));
    }

    #[test]
    fn a_graceful_request_runs_the_killpath_or_signals_by_the_restrict_flags() {
        let mut t = Tables::default();
        let with_kp = holder(&mut t, 201, "ls", "r", true);
        let plain = holder(&mut t, 202, "ls", "r", true);
        let no_term = holder(&mut t, 203, "ls", "r", true);
        t.clients.slots.get_mut(&with_kp).expect("slot").killpath = Some(killpath());
        t.clients.slots.get_mut(&no_term).expect("slot").restricted = SANLK_RESTRICT_SIGTERM;
        let fx = examine(&t, "r", SANLK_REQ_GRACEFUL);
        assert!(
            matches!(&fx[0], Effect::RequestNotice { pids, force_mode: SANLK_REQ_GRACEFUL, .. } if pids == &[201, 202, 203])
        );
        let orders: Vec<&KillOrder> = fx[1..]
            .iter()
            .map(|e| match e {
                Effect::Kill { order, .. } => order,
                other => panic!("not a kill: {other:?}"),
            })
            .collect();
        assert_eq!(
            orders,
            vec![
                &KillOrder::RunKillpath {
                    ci: with_kp,
                    pid: 201,
                    killpath: killpath()
                },
                &KillOrder::Signal {
                    ci: plain,
                    pid: 202,
                    sig: SIGTERM
                },
                &KillOrder::Signal {
                    ci: no_term,
                    pid: 203,
                    sig: SIGKILL
                },
            ]
        );
        // FORCE on a client that restricted SIGKILL: SIGTERM.
        let mut t = Tables::default();
        let ci = holder(&mut t, 301, "ls", "r", false);
        t.clients.slots.get_mut(&ci).expect("slot").restricted = SANLK_RESTRICT_SIGKILL;
        assert_eq!(
            examine(&t, "r", SANLK_REQ_FORCE)[1],
            Effect::Kill {
                ls: name("ls"),
                order: KillOrder::Signal {
                    ci,
                    pid: 301,
                    sig: SIGTERM
                }
            }
        );
    }

    #[test]
    fn dead_and_pidless_holders_get_nothing_and_a_holder_mid_acquire_is_named_first() {
        let mut t = Tables::default();
        let dead = holder(&mut t, 401, "ls", "r", true);
        let pidless = holder(&mut t, 402, "ls", "r", true);
        let live = holder(&mut t, 403, "ls", "r", true);
        t.clients.slots.get_mut(&dead).expect("slot").pid_dead = true;
        t.clients.slots.get_mut(&pidless).expect("slot").pid = 0;
        // A client whose acquire of several leases has not ended: a holder in the
        // resource table, no token yet.
        let pending = t.clients.add(-1, 404, 1000, None).expect("slot");
        assert!(matches!(
            t.start_acquire(pending, (name("ls"), name("r")), true, 0, &[]),
            Ok(AcquireStart::Local { .. })
        ));
        let fx = examine(&t, "r", SANLK_REQ_FORCE);
        assert!(matches!(&fx[0], Effect::RequestNotice { pids, .. } if pids == &[403, 404]));
        let kill = |ci, pid| Effect::Kill {
            ls: name("ls"),
            order: KillOrder::Signal {
                ci,
                pid,
                sig: SIGKILL,
            },
        };
        assert_eq!(&fx[1..], &[kill(live, 403), kill(pending, 404)]);
        // With no live holder left: nothing at all, not even the notice.
        t.clients.slots.get_mut(&live).expect("slot").pid_dead = true;
        t.clients.slots.get_mut(&pending).expect("slot").pid_dead = true;
        assert_eq!(examine(&t, "r", SANLK_REQ_FORCE), Vec::new());
    }

    #[test]
    fn a_busy_retaken_or_unknown_lease_gets_nothing_and_an_unknown_mode_only_the_notice() {
        let mut t = Tables::default();
        holder(&mut t, 501, "ls", "r", false);
        assert_eq!(examine(&t, "nope", SANLK_REQ_FORCE), Vec::new());
        assert_eq!(
            examined_lease(&t, &name("ls2"), &name("r"), LVER, SANLK_REQ_FORCE),
            Vec::new()
        );
        // Held at another lver now: released and taken again since the record was read.
        assert_eq!(
            examined_lease(&t, &name("ls"), &name("r"), LVER - 1, SANLK_REQ_FORCE),
            Vec::new()
        );
        // An unknown force mode: the watchers hear of it, nobody is signalled.
        assert_eq!(
            examine(&t, "r", 9),
            vec![Effect::RequestNotice {
                ls: name("ls"),
                name: name("r"),
                lver: LVER,
                force_mode: 9,
                pids: vec![501],
                to: Vec::new(),
                lease: None,
            }]
        );
        // Being released (or converted) on disk: left alone.
        let key = (name("ls"), name("r"));
        t.resources.get_mut(&key).expect("held").busy = true;
        assert_eq!(examine(&t, "r", SANLK_REQ_FORCE), Vec::new());
    }

    #[test]
    fn escalation_schedule() {
        // Failed lockspace, D=1: fail 8 s, grace 40 s; last success at 100.
        let k = |kill_now, now, grace_s, has_killpath, kill_count, restricted| KillInput {
            kill_now,
            now,
            last_success: 100,
            fail_s: 8,
            grace_s,
            has_killpath,
            kill_count,
            restricted,
        };
        let f = |now, kp, count, restricted| decide(k(false, now, 40, kp, count, restricted));
        assert_eq!(f(108, false, 0, 0), KillAction::Signal(SIGTERM));
        assert_eq!(f(108, true, 0, 0), KillAction::RunKillpath);
        assert_eq!(f(109, true, 1, 0), KillAction::Nothing);
        assert_eq!(f(148, true, 5, 0), KillAction::Signal(SIGKILL));
        assert_eq!(
            f(148, false, 5, SANLK_RESTRICT_SIGKILL),
            KillAction::Signal(SIGTERM)
        );
        assert_eq!(
            f(110, false, 0, SANLK_RESTRICT_SIGTERM),
            KillAction::Signal(SIGKILL)
        );
        // Removal: SIGKILL at once, even with a killpath.
        assert_eq!(
            decide(k(true, 101, 40, true, 0, 0)),
            KillAction::Signal(SIGKILL)
        );
        // Grace 0: no killpath, SIGTERM until fail, then SIGKILL.
        assert_eq!(
            decide(k(false, 108, 0, true, 0, 0)),
            KillAction::Signal(SIGKILL)
        );
    }
}
