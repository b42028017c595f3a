//! A tick's expiry pass over the lockspaces (their lease growing old and lost), and the
//! planted bugs of the kill decisions (simulator only).
//!
//! Invariant: within the pass's effects, every lease-loss notice comes before every kill
//! order, and a kill order names only a live client holding a token of a lockspace whose
//! lease is lost or being removed ([`plan_kills`]).

use disk_format::Name;
use lease_core::timeouts;

use crate::clients::{ClientSlot, LeaseHold};
use crate::io::{Effect, KillOrder};
use crate::kill::{plan_kills, SpaceKill};
use crate::space_state::SpaceSt;
use crate::tables::Tables;

use super::CorePlantedBug;

/// One lockspace's status, as the expiry pass of a tick takes it.
#[derive(Debug)]
pub(crate) struct SpaceView<'a> {
    pub name: Name,
    pub st: &'a mut SpaceSt,
    pub io_timeout_s: u64,
}

/// Every lockspace's expiry check, then the kill pass of each whose lease is lost or
/// being removed: every notice (and log line) before the first kill order, unless the
/// planted bug `KillBeforeNotice` reverses them.
pub(super) fn expiry_pass<S, H: LeaseHold>(
    tables: &mut Tables<S, H>,
    spaces: &mut [SpaceView<'_>],
    now_s: u64,
    kill_grace_s: u64,
    bug: Option<CorePlantedBug>,
) -> Vec<Effect<H>> {
    let mut dead = Vec::new();
    let mut notices = Vec::new();
    for s in spaces.iter_mut() {
        let ls = &s.name;
        let e = s.st.check_expiry(now_s, s.io_timeout_s);
        if let Some(kind) = e.notice {
            let pids = tables.holder_pids(ls, None);
            if !pids.is_empty() {
                notices.push(Effect::LossNotice {
                    ls: *ls,
                    kind,
                    pids,
                    to: Vec::new(),
                    lease: None,
                });
            }
        }
        if let Some(age_s) = e.failed_after_s {
            // Whether processes of this host held leases of it when it failed: their
            // writes may outlive them on a network filesystem (the shell keeps the
            // watchdog armed then).
            s.st.failed_with_holders = tables
                .resources
                .values()
                .any(|r| r.ls.same_as(ls) && !r.orphan);
            notices.push(Effect::LockspaceFailed {
                ls: *ls,
                age_s,
                corrupt: s.st.corrupt_result,
            });
        } else if let Some(age_s) = e.failing_for_s {
            notices.push(Effect::RenewalsFailing { ls: *ls, age_s });
        }
        if e.kill {
            dead.push((
                *ls,
                SpaceKill {
                    kill_now: s.st.kill_now,
                    now: now_s,
                    last_success: s.st.last_success_s,
                    fail_s: timeouts::id_renewal_fail_seconds(s.io_timeout_s),
                    grace_s: kill_grace_s,
                },
            ));
        }
    }
    let mut kills = Vec::new();
    for (ls, space) in dead {
        for order in plan_kills(tables, &ls, space) {
            kills.push(Effect::Kill { ls, order });
        }
        if bug == Some(CorePlantedBug::KillNonHolders) {
            plant_kill_non_holders(tables, &ls, &mut kills);
        }
    }
    let mut effects = Vec::new();
    if bug == Some(CorePlantedBug::KillBeforeNotice) {
        effects.append(&mut kills);
    }
    effects.append(&mut notices);
    effects.append(&mut kills);
    effects
}

/// The planted bug `kill-non-holders`: a SIGTERM for every live registered client that
/// holds no lease and was never ordered.
fn plant_kill_non_holders<S, H: LeaseHold>(
    tables: &Tables<S, H>,
    ls: &Name,
    kills: &mut Vec<Effect<H>>,
) {
    for (ci, c) in slots_in_order(tables) {
        if c.registered && c.pid > 0 && !c.pid_dead && c.kill_count == 0 && c.tokens.is_empty() {
            kills.push(Effect::Kill {
                ls: *ls,
                order: KillOrder::Signal {
                    ci,
                    pid: c.pid,
                    sig: crate::kill::SIGTERM,
                },
            });
        }
    }
}

/// The planted bug `examine-kills-lockspace`: after a request's orders, one more for
/// every other live client holding any lease of `ls` (what a decision that looked at the
/// lockspace rather than the lease would do).
pub(super) fn plant_examine_kills_lockspace<S, H: LeaseHold>(
    tables: &Tables<S, H>,
    ls: &Name,
    fx: &mut Vec<Effect<H>>,
) {
    for (ci, c) in slots_in_order(tables) {
        let ordered = fx.iter().any(|e| {
            matches!(e, Effect::Kill { order: KillOrder::Signal { ci: o, .. } | KillOrder::RunKillpath { ci: o, .. }, .. } if *o == ci)
        });
        if c.pid > 0 && !c.pid_dead && !ordered && c.tokens.iter().any(|t| t.ls.same_as(ls)) {
            fx.push(Effect::Kill {
                ls: *ls,
                order: KillOrder::Signal {
                    ci,
                    pid: c.pid,
                    sig: crate::kill::SIGKILL,
                },
            });
        }
    }
}

/// The client slots by id, lowest first: the planted bugs' orders come in a
/// reproducible order.
fn slots_in_order<S, H>(tables: &Tables<S, H>) -> Vec<(u32, &ClientSlot<S>)> {
    let mut slots: Vec<(u32, &ClientSlot<S>)> = tables
        .clients
        .slots
        .iter()
        .map(|(ci, c)| (*ci, c))
        .collect();
    slots.sort_unstable_by_key(|(ci, _)| *ci);
    slots
}
