//! Kill escalation for holders of leases in a failed or removed lockspace
//! (sanlock `kill_pids`), carried out by the helper so the daemon never blocks. The
//! schedule and who gets what are the core's (`lockd_core::kill`: one order per client
//! per second at most, killpath or SIGTERM in the grace time, then SIGKILL, RESTRICT
//! flags); this module reads the clock, asks the core for the orders and hands them to
//! the helper with no lock held. It also reads request records (`examine_lockspace`)
//! and runs the monitor loop.

use std::sync::Arc;

use client_lib::proto::{SANLK_RESTRICT_SIGKILL, SANLK_RESTRICT_SIGTERM};
use lease_core::timeouts;
use tracing::{error, warn};

use crate::lockspace::{self, Space};
use crate::state::{lock, Daemon};

use lockd_core::kill::{plan_kills, KillOrder, SpaceKill};

/// One pass of escalation over the holders of `space`: the core plans it under the
/// tables lock (`lockd_core::kill::plan_kills`); the orders go to the helper after the
/// lock is released.
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
    let orders = plan_kills(
        &mut *lock(&d.tables),
        &space.name,
        SpaceKill {
            kill_now,
            now,
            last_success,
            fail_s,
            grace_s,
        },
    );
    for order in orders {
        match order {
            KillOrder::Exhausted { pid, .. } => {
                error!(pid, ls = %space.name, "client is stuck: kill attempts exhausted");
            }
            KillOrder::RunKillpath { pid, killpath, .. } => {
                warn!(pid, ls = %space.name, path = ?killpath.path, args = ?killpath.args, "running killpath");
                helper.run_path(&killpath, pid);
                crate::metrics::global().kill(crate::metrics::KillStep::Killpath);
            }
            KillOrder::Signal { pid, sig, .. } => {
                warn!(pid, ls = %space.name, sig, "killing lease holder");
                helper.kill(pid, sig);
                crate::metrics::global().kill(crate::metrics::KillStep::from_signal(sig));
            }
        }
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
