//! Kill escalation for holders of leases in a failed or removed lockspace
//! (sanlock `kill_pids`), carried out by the helper so the daemon never blocks.
//!
//! Per client, at most one order per second, at most `KILL_COUNT_MAX` orders:
//! - lockspace removed / forced shutdown: SIGKILL at once;
//! - failed lockspace, while now < last_success + id_renewal_fail + kill_grace: the
//!   client's killpath once (if set and grace > 0), else SIGTERM;
//! - afterwards: SIGKILL;
//! - RESTRICT_SIGKILL turns SIGKILL into SIGTERM; RESTRICT_SIGTERM turns SIGTERM into
//!   SIGKILL.

use std::sync::Arc;

use client_lib::proto::{SANLK_RESTRICT_SIGKILL, SANLK_RESTRICT_SIGTERM};
use lease_core::timeouts;
use tracing::{error, warn};

use crate::lockspace::{self, Space};
use crate::state::{lock, Daemon};

/// sanlock's kill_count_max.
pub const KILL_COUNT_MAX: u32 = 100;

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

/// Decides the next kill action (pure; unit-tested).
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
        libc::SIGTERM
    } else {
        libc::SIGKILL
    };
    let sig = match sig {
        libc::SIGKILL if restricted & SANLK_RESTRICT_SIGKILL != 0 => libc::SIGTERM,
        libc::SIGTERM if restricted & SANLK_RESTRICT_SIGTERM != 0 => libc::SIGKILL,
        s => s,
    };
    KillAction::Signal(sig)
}

/// One pass of escalation over the holders of `space`.
pub fn kill_holders(d: &Arc<Daemon>, space: &Space) {
    let now = lockd_diskio::monotime();
    let (kill_now, last_success) = {
        let st = lock(&space.st);
        (st.kill_now, st.last_success_s)
    };
    let fail_s = timeouts::id_renewal_fail_seconds(u64::from(space.io_timeout));
    let grace_s = u64::from(d.cfg.kill_grace_s);
    let Some(helper) = d.helper.as_ref() else {
        return;
    };
    let mut tables = lock(&d.tables);
    let clients = &mut tables.clients;
    for c in clients.slots.values_mut() {
        if c.pid_dead || c.pid <= 0 || !c.tokens.iter().any(|t| t.ls.same_as(&space.name)) {
            continue;
        }
        if c.kill_count >= KILL_COUNT_MAX {
            if c.kill_count == KILL_COUNT_MAX {
                error!(pid = c.pid, ls = %space.name, "client is stuck: kill attempts exhausted");
                c.kill_count += 1;
            }
            continue;
        }
        if c.kill_count > 0 && now < c.kill_last + 1 {
            continue;
        }
        let action = decide(KillInput {
            kill_now,
            now,
            last_success,
            fail_s,
            grace_s,
            has_killpath: c.killpath.is_some(),
            kill_count: c.kill_count,
            restricted: c.restricted,
        });
        match action {
            KillAction::Nothing => continue,
            KillAction::RunKillpath => {
                if let Some(kp) = &c.killpath {
                    warn!(pid = c.pid, ls = %space.name, path = ?kp.path, args = ?kp.args, "running killpath");
                    helper.run_path(kp, c.pid);
                    crate::metrics::global().kill(crate::metrics::KillStep::Killpath);
                }
            }
            KillAction::Signal(sig) => {
                warn!(pid = c.pid, ls = %space.name, sig, "killing lease holder");
                helper.kill(c.pid, sig);
                crate::metrics::global().kill(crate::metrics::KillStep::from_signal(sig));
            }
        }
        c.kill_count += 1;
        c.kill_last = now;
    }
}

/// Reads the request record of every resource we hold in lockspace `ls` and acts on
/// requests for a newer lver: FORCE → SIGKILL the holders (SIGTERM if SIGKILL is
/// restricted); GRACEFUL → their killpath, else SIGTERM (SIGKILL if SIGTERM is restricted).
pub fn examine_lockspace(d: &Arc<Daemon>, ls: &disk_format::Name) {
    let held: Vec<_> = lock(&d.tables)
        .resources
        .values()
        .filter(|r| r.ls.same_as(ls) && !r.busy)
        .cloned()
        .collect();
    for lr in held {
        let mode = crate::paxos::examine(&lr);
        let Some(force_mode) = mode else { continue };
        let span = tracing::info_span!("resource", ls = %lr.ls, res = %lr.name);
        let _g = span.enter();
        warn!(force_mode, "lease requested by another host");
        // The holders' watchers hear of it before the holders are signalled.
        crate::watch::notify_requested(d, &lr.ls, &lr.name, lr.held.lver(), force_mode);
        let Some(helper) = d.helper.as_ref() else {
            return;
        };
        let tables = lock(&d.tables);
        let clients = &tables.clients;
        for ci in &lr.holders {
            let Some(c) = clients.slots.get(ci) else {
                continue;
            };
            if c.pid <= 0 || c.pid_dead {
                continue;
            }
            if force_mode == client_lib::proto::SANLK_REQ_FORCE {
                let sig = if c.restricted & SANLK_RESTRICT_SIGKILL != 0 {
                    libc::SIGTERM
                } else {
                    libc::SIGKILL
                };
                helper.kill(c.pid, sig);
            } else if let Some(kp) = &c.killpath {
                helper.run_path(kp, c.pid);
            } else {
                let sig = if c.restricted & SANLK_RESTRICT_SIGTERM != 0 {
                    libc::SIGKILL
                } else {
                    libc::SIGTERM
                };
                helper.kill(c.pid, sig);
            }
        }
    }
}

/// The daemon's once-a-second loop: our-lease checks and kill escalation.
pub fn monitor_loop(d: &Arc<Daemon>) {
    use std::time::{Duration, Instant};
    const CHECK_EVERY: Duration = Duration::from_millis(1000);
    // The systemd watchdog is fed from here, so a wedged monitor (the thread that fails
    // lockspaces and kills holders) gets the daemon restarted/reported by systemd.
    let wd_every = d.notifier.watchdog_interval();
    let tick = wd_every.map_or(CHECK_EVERY, |w| {
        w.clamp(Duration::from_millis(50), CHECK_EVERY)
    });
    let mut last_check: Option<Instant> = None;
    let mut last_ping: Option<Instant> = None;
    while !d.is_shutting_down() || !lock(&d.spaces).is_empty() {
        if let Some(every) = wd_every {
            if last_ping.is_none_or(|t| t.elapsed() + tick / 2 >= every) {
                d.notifier.watchdog_ping();
                last_ping = Some(Instant::now());
            }
        }
        if last_check.is_none_or(|t| t.elapsed() + tick / 2 >= CHECK_EVERY) {
            last_check = Some(Instant::now());
            for space in lockspace::check_our_leases(d) {
                kill_holders(d, &space);
            }
            if !d.is_shutting_down() {
                d.notifier.status_if_changed(&d.summary());
            }
        }
        std::thread::sleep(tick);
    }
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
        assert_eq!(f(108, false, 0, 0), KillAction::Signal(libc::SIGTERM));
        assert_eq!(f(108, true, 0, 0), KillAction::RunKillpath);
        assert_eq!(f(109, true, 1, 0), KillAction::Nothing);
        assert_eq!(f(148, true, 5, 0), KillAction::Signal(libc::SIGKILL));
        assert_eq!(
            f(148, false, 5, SANLK_RESTRICT_SIGKILL),
            KillAction::Signal(libc::SIGTERM)
        );
        assert_eq!(
            f(110, false, 0, SANLK_RESTRICT_SIGTERM),
            KillAction::Signal(libc::SIGKILL)
        );
        // Removal: SIGKILL at once, even with a killpath.
        assert_eq!(
            decide(k(true, 101, 40, true, 0, 0)),
            KillAction::Signal(libc::SIGKILL)
        );
        // Grace 0: no killpath, SIGTERM until fail, then SIGKILL.
        assert_eq!(
            decide(k(false, 108, 0, true, 0, 0)),
            KillAction::Signal(libc::SIGKILL)
        );
    }
}
