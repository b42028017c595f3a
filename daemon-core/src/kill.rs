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

use client_lib::proto::{SANLK_RESTRICT_SIGKILL, SANLK_RESTRICT_SIGTERM};
use disk_format::Name;

use crate::clients::{KillPath, LeaseHold};
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

/// One order of a kill pass, for the shell to carry out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KillOrder {
    /// Run this killpath for the client with this pid.
    RunKillpath {
        ci: u32,
        pid: i32,
        killpath: KillPath,
    },
    /// Send `sig` to the client's pid.
    Signal { ci: u32, pid: i32, sig: i32 },
    /// The client used up its [`KILL_COUNT_MAX`] orders (said once).
    Exhausted { ci: u32, pid: i32 },
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

#[cfg(test)]
mod tests {
    use super::*;

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
