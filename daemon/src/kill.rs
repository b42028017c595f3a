//! The monitor loop, and kill escalation for holders of leases in a failed or removed
//! lockspace (sanlock `kill_pids`), carried out by the helper so the daemon never blocks.
//! Once a second the monitor reads the clock and runs the core's tick (`Core::step` with
//! `Input::Tick`) over the tables and lockspace statuses the core keeps, under the core
//! lock only while it runs; it hands the effects of client commands to their workers
//! (an ACQUIRE that waited for a release too long is answered, `paxos::route`), then
//! carries out its own in the order the core gave them: loss notices (the watch
//! machinery), logs, kill orders (the helper). The schedule and who gets what are the
//! core's (`lockd_core::kill`: one order per client per second at most, killpath or
//! SIGTERM in the grace time, then SIGKILL, RESTRICT flags). The examine path goes the
//! same way ([`examine_lockspace`]): the daemon reads each held lease's request record
//! with no lock held, the core decides what a request for a newer lver does
//! (`Core::step` with `Input::Examined`, under the core lock only while it runs), and the
//! daemon carries out its effects in order: the request notice, then the kill orders.
//!
//! Invariants: within one pass, every watcher of a holder has been written its loss
//! notice (or, for a request, its request notice) before the first kill order of the
//! pass goes to the helper (the core's effect order, kept by running the effects one
//! after the other on one thread); no signal is sent and no killpath run while the
//! core lock is held.

use std::sync::Arc;

use lease_core::timeouts;
use tracing::{error, warn};

use crate::space::Space;
use crate::state::Daemon;
use crate::sync::lock;

use crate::tables::Held;
use lockd_core::kill::KillOrder;
use lockd_core::{Effect, Input};

/// The monitor's once-a-second pass over the lost-lease path: the core decides
/// ([`lost_lease_step`]), the daemon carries out the effects in the core's order
/// ([`run_effect`]: loss notices through the watch machinery, kill orders through the
/// helper, the retirement of a failed lockspace no lease holds any more, which the
/// core decides once its holders and orphans are gone, and sd_notify's STATUS= line when
/// the core's summary changed).
pub fn monitor_pass(d: &Arc<Daemon>) {
    let spaces: Vec<Arc<Space>> = lock(&d.spaces).clone();
    for effect in lost_lease_step(d, crate::clock::now_s) {
        run_effect(d, &spaces, effect);
    }
}

/// The core's step for the monitor's tick at the time `now_s` gives (`Input::Tick`: the
/// expiry check of the lockspaces not gone, the kill pass of the lost and removed ones,
/// the ACQUIREs that waited for a release too long answered): the effects for the
/// monitor, in the core's order; those of client commands went to their workers
/// (`paxos::hand_off_from_monitor`). The time is read under the core's lock, as for
/// every step (a step's time never goes back: `Core::step` asserts it). The core lock is
/// let go before this returns: no effect runs under it.
fn lost_lease_step(d: &Arc<Daemon>, now_s: impl FnOnce() -> u64) -> Vec<Effect<Held>> {
    let fx = {
        let mut core = lock(&d.core);
        core.step(now_s(), Input::Tick)
    };
    crate::paxos::hand_off_from_monitor(d, fx)
}

/// Why a kill order is carried out: a lost or removed lockspace's escalation (counted in
/// `lockd_kill_escalations_total`), or another host's request for one lease (not
/// counted there, docs/operations.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KillCause {
    Escalation,
    Request,
}

/// Carries out one effect of the monitor's step, with no lock held.
fn run_effect(d: &Arc<Daemon>, spaces: &[Arc<Space>], effect: Effect<Held>) {
    let space = |ls: &disk_format::Name| spaces.iter().find(|s| s.name.same_as(ls));
    match effect {
        Effect::LossNotice {
            ls,
            kind,
            to,
            lease,
            ..
        } if crate::planted::active(crate::planted::Bug::KillBeforeNotice) => {
            let d = d.clone();
            std::thread::spawn(move || {
                std::thread::sleep(std::time::Duration::from_secs(5));
                crate::watch::notify_loss_to(&d, &ls, kind, &to, lease);
            });
        }
        Effect::LossNotice {
            ls,
            kind,
            to,
            lease,
            ..
        } => crate::watch::notify_loss_to(d, &ls, kind, &to, lease),
        Effect::LockspaceFailed { ls, age_s, corrupt } => {
            error!(%ls, age = age_s, corrupt,
                   "lockspace failed: our delta lease is lost; killing lease holders");
            // Before any kill: where the holders write decides whether the watchdog stays
            // armed once they are gone (`lockspace::keep_armed_after_failure`).
            if let Some(s) = space(&ls) {
                let pids = lock(&d.core).holder_pids(&ls, None);
                if crate::netfs::holders_use_network_fs(&pids) {
                    warn!(%ls, "holders of the failed lockspace have files open on a network \
                                filesystem");
                    s.holders_on_network_fs
                        .store(true, std::sync::atomic::Ordering::SeqCst);
                }
            }
        }
        Effect::RenewalsFailing { ls, age_s } => {
            let io_timeout_s = space(&ls).map_or(0, |s| u64::from(s.io_timeout));
            let fail = timeouts::id_renewal_fail_seconds(io_timeout_s);
            warn!(%ls, age = age_s, "renewals failing; lockspace will fail at {fail} s");
        }
        Effect::Kill { ls, order } => run_kill_order(d, &ls, order, KillCause::Escalation),
        Effect::RetireLockspace { ls, id } => d.retire_space(&ls, id),
        // sd_notify's STATUS= line (not over the "stopping" line at shutdown).
        Effect::Status(status) if !d.is_shutting_down() => {
            let summary = crate::notify::Summary::of(status, d.cfg.use_watchdog);
            d.notifier.status_if_changed(&summary);
        }
        Effect::Status(_) => {}
        other => error!(effect = ?other, "the monitor's step gave an effect it does not give"),
    }
}

/// One kill order, handed to the helper (without a helper — a daemon started inside a
/// test process — nothing is killed).
fn run_kill_order(d: &Daemon, ls: &disk_format::Name, order: KillOrder, cause: KillCause) {
    let Some(helper) = d.helper.as_ref() else {
        return;
    };
    let count = |step| {
        if cause == KillCause::Escalation {
            crate::metrics::global().kill(step);
        }
    };
    match order {
        KillOrder::Exhausted { pid, .. } => {
            error!(pid, %ls, "client is stuck: kill attempts exhausted");
        }
        KillOrder::RunKillpath { pid, killpath, .. } => {
            warn!(pid, %ls, path = ?killpath.path, args = ?killpath.args, ?cause,
                  "running killpath");
            helper.run_path(&killpath, pid);
            count(crate::metrics::KillStep::Killpath);
        }
        KillOrder::Signal { pid, sig, .. } => {
            warn!(pid, %ls, sig, ?cause, "killing lease holder");
            helper.kill(pid, sig);
            count(crate::metrics::KillStep::from_signal(sig));
        }
    }
}

/// Reads the request record of every lease we hold in lockspace `ls` (with no lock
/// held) and, for each that another host asks for at a newer lver, runs the core's
/// decision ([`examine_step`]) and carries out its effects in order with no lock held:
/// the request notice to the holders' watchers, then one kill order per holder of that
/// lease (FORCE → SIGKILL, SIGTERM if SIGKILL is restricted; GRACEFUL → the killpath,
/// else SIGTERM, SIGKILL if SIGTERM is restricted; `lockd_core::kill::decide_request`).
pub fn examine_lockspace(d: &Arc<Daemon>, ls: &disk_format::Name) {
    let held: Vec<_> = lock(&d.core)
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
        for effect in examine_step(d, &lr.ls, &lr.name, lr.held.lver(), force_mode) {
            run_examine_effect(d, effect);
        }
    }
}

/// The core's step for a request found on lease `ls:name`, read while held at `lver`
/// (`Core::step` with `Input::Examined`, which runs `lockd_core::examined_lease` over
/// the tables). The core's lock is let go before this returns: no effect runs under it.
fn examine_step(
    d: &Daemon,
    ls: &disk_format::Name,
    name: &disk_format::Name,
    lver: u64,
    force_mode: u32,
) -> Vec<Effect<Held>> {
    let input = lockd_core::Input::Examined {
        ls: *ls,
        name: *name,
        lver,
        force_mode,
    };
    lock(&d.core).step(crate::clock::now_s(), input)
}

/// Carries out one effect of an examine step, with no lock held.
fn run_examine_effect(d: &Daemon, effect: Effect<Held>) {
    match effect {
        Effect::Kill { ls, order } => run_kill_order(d, &ls, order, KillCause::Request),
        Effect::RequestNotice {
            ls,
            name,
            lver,
            force_mode,
            to,
            lease,
            ..
        } => crate::watch::notify_requested_to(d, &ls, &name, lver, force_mode, &to, lease),
        other => error!(effect = ?other, "the examine step gave an effect it does not give"),
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
            monitor_pass(d);
        }
        std::thread::sleep(tick);
    }
}

#[cfg(test)]
mod tests {
    //! The daemon's side of "the notice before the kill": the monitor's step, run over a
    //! daemon's real tables, lockspace status and watch connections, gives effects whose
    //! loss notice is on the watcher's socket before the first kill order is reached.
    use super::*;
    use std::io::Read;
    use std::os::unix::net::UnixStream;

    use client_lib::ext::WatchKind;
    use client_lib::wire::{self, Header, HEADER_LEN};
    use disk_format::Name;
    use lockd_core::kill::SIGTERM;

    use crate::space::{Phase, RenewalRec};

    fn daemon() -> Arc<Daemon> {
        Daemon::for_tests("kill-unit")
    }

    /// Lockspace `ls` joined at `t` (io_timeout 1) and a registered client `pid` holding
    /// lease `ls:r` in it.
    fn joined_with_holder(d: &Arc<Daemon>, t: u64, pid: i32) -> Arc<Space> {
        let ls = Name::new("ls").expect("name");
        let wl = wire::Lockspace {
            name: ls,
            host_id: 1,
            flags: 0,
            pad: 0,
            host_id_disk: wire::DiskLocation {
                path: wire::PathField::new("/nonexistent/lockd-kill-unit/ids").expect("path"),
                ..Default::default()
            },
        };
        let space = Arc::new(d.new_space(&wl, 1, None));
        d.list_space(&space).expect("listed");
        space.st_mut(|st| {
            st.phase = Phase::Joined;
            st.add_result = Some(0);
            st.renewal_ok(
                t,
                RenewalRec {
                    timestamp: t,
                    read_ms: 1,
                    write_ms: 0,
                    write_sent_ms: t * 1000,
                    ended_ms: t * 1000 + 1,
                },
            );
        });
        hold(d, pid, (ls, Name::new("r").expect("name")), t);
        space
    }

    /// A registered client `pid` holding lease `key` exclusive, acquired through the
    /// core's steps at `t` (or the clock's time, when later).
    fn hold(d: &Daemon, pid: i32, key: (Name, Name), t: u64) {
        let now = || crate::clock::now_s().max(t);
        let mut core = lock(&d.core);
        let connected = lockd_core::Input::Connected {
            fd: -1,
            pid,
            uid: 0,
            stream: None,
            replacing_own: false,
        };
        let [Effect::Accepted { ci }] = core.step(now(), connected)[..] else {
            panic!("no slot")
        };
        let register = lockd_core::CoreRequest::Register;
        let req = |req| lockd_core::Input::Request { ci, req };
        assert!(core.step(now(), req(register)).is_empty());
        let acquire = lockd_core::CoreRequest::Acquire {
            res: vec![lockd_core::ResSpec::exclusive(key)],
            cmd_flags: 0,
            owner_name: Name::from_field(b""),
            opener: None,
        };
        let fx = core.step(now(), req(acquire));
        let [Effect::Disk { op, .. }] = fx[..] else {
            panic!("{fx:?}")
        };
        let done = lockd_core::Input::DiskDone {
            op,
            result: Ok(Held {
                token: None,
                opened_by: None,
            }),
            failed_state: None,
        };
        let fx = core.step(now(), done);
        assert!(
            matches!(&fx[..], [Effect::Reply { reply, .. }] if reply.rv == 0),
            "{fx:?}"
        );
    }

    /// A watch connection for `pid`, registered as the daemon registers one (a root
    /// connection's WATCH through the core); the peer's end returned (non-blocking).
    fn watch(d: &Daemon, pid: i32) -> UnixStream {
        let (ours, peer) = UnixStream::pair().expect("a socket pair");
        peer.set_nonblocking(true).expect("non-blocking");
        let fx = lock(&d.core).step(
            crate::clock::now_s(),
            lockd_core::Input::Connected {
                fd: -1,
                pid: 1,
                uid: 0,
                stream: None,
                replacing_own: false,
            },
        );
        let [Effect::Accepted { ci }] = fx[..] else {
            panic!("{fx:?}")
        };
        let mut answered = None;
        let watched = crate::watch::register(d, ci, pid, ours, |rv| answered = Some(rv));
        assert_eq!((watched, answered), (Ok(pid), Some(0)));
        peer
    }

    /// The watch events waiting on `peer` (non-blocking), as their kinds' codes.
    fn events_on(peer: &mut UnixStream) -> Vec<u32> {
        let mut buf = vec![0u8; 4096];
        let n = match peer.read(&mut buf) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => 0,
            Err(e) => panic!("reading the watch connection: {e}"),
        };
        let msg_len = HEADER_LEN + client_lib::ext::WATCH_EVENT_LEN;
        assert_eq!(n % msg_len, 0, "whole watch messages only: {n} bytes");
        buf[..n]
            .chunks(msg_len)
            .map(|m| Header::decode(&m[..HEADER_LEN]).expect("a header").data)
            .collect()
    }

    #[test]
    fn the_monitor_writes_the_loss_notice_before_it_reaches_the_first_kill() {
        const PID: i32 = 4242;
        let d = daemon();
        // Lease time from the daemon's clock: the watch's registration steps the core at
        // the clock's time, and a step's time never goes back.
        let t = crate::clock::now_s();
        let space = joined_with_holder(&d, t, PID);
        let mut peer = watch(&d, PID);
        let spaces = vec![space.clone()];
        let fail_s = timeouts::id_renewal_fail_seconds(1);

        // A young lease: no effect but the first status line.
        let young = crate::clock::now_s().max(t + 1);
        assert!(young < t + fail_s, "the test took {} s", young - t);
        let first = lost_lease_step(&d, || young);
        assert!(
            matches!(first.as_slice(), [Effect::Status(s)] if s.leases == 1),
            "{first:?}"
        );
        assert!(
            lost_lease_step(&d, || young).is_empty(),
            "no change, no status"
        );

        // At id_renewal_fail the lease is lost: the step gives the notice, the log and
        // the SIGTERM (grace time) in that order; when the daemon reaches the kill, the
        // notice is already on the watcher's socket.
        let effects = lost_lease_step(&d, || t + fail_s);
        assert!(
            matches!(effects.first(), Some(Effect::LossNotice { kind: WatchKind::LockspaceFailed, pids, .. }) if pids == &[PID]),
            "{effects:?}"
        );
        let mut kills = 0;
        let mut seen = Vec::new();
        for effect in effects {
            if let Effect::Kill { order, .. } = &effect {
                seen.extend(events_on(&mut peer));
                assert_eq!(
                    seen,
                    vec![WatchKind::LockspaceFailed.code()],
                    "the loss notice must be on the socket before the kill order runs"
                );
                assert!(matches!(
                    order,
                    KillOrder::Signal {
                        pid: PID,
                        sig: SIGTERM,
                        ..
                    }
                ));
                kills += 1;
            }
            run_effect(&d, &spaces, effect);
        }
        assert_eq!(kills, 1);
        assert!(space.is_dead());
        assert!(space.st(|st| st.failed_with_holders));

        // A second later: escalation goes on, the notice is not repeated.
        let effects = lost_lease_step(&d, || t + fail_s + 1);
        assert!(!effects
            .iter()
            .any(|e| matches!(e, Effect::LossNotice { .. })));
        assert!(effects.iter().any(|e| matches!(e, Effect::Kill { .. })));
        for effect in effects {
            run_effect(&d, &spaces, effect);
        }
        assert!(events_on(&mut peer).is_empty());
    }

    /// The examine path's step: a FORCE request found on `ls:r` gives the request notice,
    /// then one SIGKILL for the holder of `ls:r` only (not the holder of `ls:r2`); the
    /// tables lock is free when the effects come back, and the notice is on the
    /// watcher's socket before the kill order is reached.
    #[test]
    fn an_examined_request_notifies_then_kills_that_leases_holder_with_no_lock_held() {
        use client_lib::proto::SANLK_REQ_FORCE;
        use lockd_core::kill::SIGKILL;
        const PID: i32 = 4343;
        const OTHER: i32 = 4344;
        let d = daemon();
        joined_with_holder(&d, 100, PID);
        let ls = Name::new("ls").expect("name");
        hold(&d, OTHER, (ls, Name::new("r2").expect("name")), 100);
        let mut peer = watch(&d, PID);
        let r = Name::new("r").expect("name");
        let effects = examine_step(&d, &ls, &r, 0, SANLK_REQ_FORCE);
        // The core lock is free while the effects run: another thread takes it at once.
        let (tx, rx) = std::sync::mpsc::channel();
        let d2 = d.clone();
        std::thread::spawn(move || {
            drop(lock(&d2.core));
            let _ = tx.send(());
        });
        assert!(
            rx.recv_timeout(std::time::Duration::from_secs(10)).is_ok(),
            "the core lock is let go before any effect runs"
        );
        assert!(
            matches!(effects.first(), Some(Effect::RequestNotice { pids, force_mode: SANLK_REQ_FORCE, .. }) if pids == &[PID]),
            "{effects:?}"
        );
        let mut kills = Vec::new();
        for effect in effects {
            if let Effect::Kill { order, .. } = &effect {
                assert_eq!(
                    events_on(&mut peer),
                    vec![WatchKind::Requested.code()],
                    "the request notice must be on the socket before the kill order runs"
                );
                kills.push(order.clone());
            }
            run_examine_effect(&d, effect);
        }
        assert!(
            matches!(
                kills.as_slice(),
                [KillOrder::Signal {
                    pid: PID,
                    sig: SIGKILL,
                    ..
                }]
            ),
            "{kills:?}"
        );
        // Read at an lver the lease is no longer held at: nothing.
        assert!(examine_step(&d, &ls, &r, 5, SANLK_REQ_FORCE).is_empty());
    }
}
