//! lockd extensions (see `client_lib::ext`): the lease-loss watch and the leader query.
//!
//! A watch is a connection that sent `LOCKD_CMD_WATCH` for a pid. From then on the daemon
//! writes to it: a heartbeat every [`HEARTBEAT_MS`] (from the `lockd-watch` thread), and a
//! loss notice whenever it decides a lease of that pid can no longer be trusted.
//!
//! Invariants:
//! * a loss notice is written *before* the action it announces: the monitor runs the
//!   core's `LossNotice` effects ([`notify_loss_to`]) before the same step's kill orders
//!   (`crate::kill`); REM_LOCKSPACE's and a forced shutdown's LockspaceRemoved notice is
//!   an effect of the step that sets `kill_now`, run before the next tick can kill
//!   (`crate::paxos`); a request's notice ([`notify_requested_to`], the core's `RequestNotice`
//!   effect) before the kill orders of the same examine step;
//! * writing never blocks a decision for long: every watch stream has a short write
//!   timeout, and a watcher whose write fails is dropped;
//! * `watchers` is a leaf lock: nothing else is locked while it is held, and it is held
//!   during a whole message write so messages never interleave.

use std::sync::Arc;
use std::time::Duration;

use client_lib::ext::{LeaderInfo, WatchEvent, WatchKind, NO_DEADLINE};
use client_lib::proto::{SM_MAGIC, SM_PROTO};
use client_lib::wire::{self, Header, HEADER_LEN};
use disk_format::Name;
use lease_core::timeouts;
use tracing::{debug, info, warn};

use crate::server::Conn;
use crate::space::Space;
use crate::state::{Daemon, Watcher};
use crate::sync::lock;

/// Interval of heartbeats on a watch connection.
pub const HEARTBEAT_MS: u32 = 500;
/// Most watch connections at once (each is also a client slot).
pub const MAX_WATCHERS: usize = 256;
/// A write to a watcher that takes longer than this drops the watcher.
const WRITE_TIMEOUT: Duration = Duration::from_millis(200);

/// `LOCKD_CMD_WATCH`: registers `conn` as a watch of `h.data` (0 = the caller's pid).
/// Only root may watch another user's process.
pub fn handle_watch(d: &Arc<Daemon>, conn: &mut Conn, h: &Header) {
    let pid = if h.data == 0 {
        conn.cred.pid
    } else {
        h.data as i32
    };
    if pid <= 0 {
        conn.reply(h, -libc::EINVAL);
        return;
    }
    if conn.cred.uid != 0 && pid != conn.cred.pid {
        let owner_uid = lock(&d.core)
            .clients
            .slots
            .values()
            .find(|c| c.registered && c.pid == pid)
            .map(|c| c.uid);
        if owner_uid != Some(conn.cred.uid) {
            conn.reply(h, -libc::EPERM);
            return;
        }
    }
    let stream = match conn.stream.try_clone() {
        Ok(s) => s,
        Err(_) => {
            conn.reply(h, -libc::ENOMEM);
            return;
        }
    };
    let _ = stream.set_write_timeout(Some(WRITE_TIMEOUT));
    {
        let mut w = lock(&d.watchers);
        if w.len() >= MAX_WATCHERS {
            drop(w);
            conn.reply(h, -libc::EMFILE);
            return;
        }
        // The reply goes out under the lock, so that no event can precede it.
        let mut r = h.result_reply(0);
        r.data2 = HEARTBEAT_MS;
        conn.send(&r.encode());
        w.push(Watcher {
            ci: conn.ci,
            pid,
            stream,
        });
    }
    info!(ci = conn.ci, pid, "lease-loss watch registered");
}

/// Forgets the watch of connection `ci` (its connection closed).
pub fn connection_closed(d: &Daemon, ci: u32) {
    lock(&d.watchers).retain(|w| w.ci != ci);
}

fn event_message(e: &WatchEvent) -> Vec<u8> {
    let h = Header {
        magic: SM_MAGIC,
        version: SM_PROTO,
        cmd: client_lib::ext::LOCKD_MSG_WATCH_EVENT,
        cmd_flags: 0,
        length: (HEADER_LEN + client_lib::ext::WATCH_EVENT_LEN) as u32,
        seq: 0,
        data: e.kind.code(),
        data2: 0,
    };
    let mut msg = h.encode().to_vec();
    msg.extend_from_slice(&e.encode());
    msg
}

/// Writes `make(pid)` to every watcher of a pid in `pids`; drops watchers that fail.
/// Returns how many notices were delivered.
fn send_to(d: &Daemon, pids: &[i32], make: impl Fn(i32) -> WatchEvent) -> usize {
    use std::io::Write;
    let mut delivered = 0;
    let mut w = lock(&d.watchers);
    w.retain_mut(|watcher| {
        if !pids.contains(&watcher.pid) {
            return true;
        }
        let msg = event_message(&make(watcher.pid));
        match watcher.stream.write_all(&msg) {
            Ok(()) => {
                delivered += 1;
                true
            }
            Err(e) => {
                debug!(ci = watcher.ci, error = %e, "watch connection dropped");
                false
            }
        }
    });
    delivered
}

/// Deadlines of a lockspace's holders, from its last successful renewal: (kill escalation
/// in ms, watchdog reset in ms, renewal age in ms).
pub fn deadlines(d: &Daemon, space: &Space) -> (i64, i64, u64) {
    let now_ms = crate::clock::now_ms() as i64;
    let last_ms = (crate::space::last_success(space) * 1000) as i64;
    let fail_ms = (timeouts::id_renewal_fail_seconds(u64::from(space.io_timeout)) * 1000) as i64;
    let kill_in = last_ms + fail_ms - now_ms;
    let wd_in = if d.cfg.use_watchdog {
        kill_in + i64::from(d.cfg.watchdog_fire_timeout_s) * 1000
    } else {
        NO_DEADLINE
    };
    (kill_in, wd_in, (now_ms - last_ms).max(0) as u64)
}

/// Announces to the watchers of `pids` — the holders the core named in its `LossNotice`
/// effect — that their leases in `space` are being lost (`kind` is RenewalFailing,
/// LockspaceFailed or LockspaceRemoved). Called before the effects that act on it.
pub fn notify_loss_to(d: &Daemon, space: &Space, kind: WatchKind, pids: &[i32]) {
    if pids.is_empty() {
        return;
    }
    let (mut kill_in, mut wd_in, age) = deadlines(d, space);
    if kind == WatchKind::LockspaceRemoved {
        kill_in = 0;
        wd_in = NO_DEADLINE;
    }
    let n = send_to(d, pids, |pid| WatchEvent {
        kind,
        force_mode: 0,
        leases: 0,
        pid,
        lockspace: space.name,
        resource: Name::EMPTY,
        lver: 0,
        kill_in_ms: kill_in,
        watchdog_in_ms: wd_in,
        renewal_age_ms: age,
    });
    if n > 0 {
        warn!(ls = %space.name, kind = kind.name(), watchers = n, kill_in_ms = kill_in,
              "lease-loss notice sent");
    }
}

/// Announces to the watchers of `pids` — the holders the core named in its
/// `RequestNotice` effect — that another host requested resource `res` (held at `lver`)
/// with `force_mode`; the core's kill orders for them come right after.
pub fn notify_requested_to(
    d: &Daemon,
    ls: &Name,
    res: &Name,
    lver: u64,
    force_mode: u32,
    pids: &[i32],
) {
    if pids.is_empty() {
        return;
    }
    let space = d.find_space(ls);
    let (_, wd_in, age) = space
        .as_deref()
        .map(|s| deadlines(d, s))
        .unwrap_or((0, NO_DEADLINE, 0));
    let n = send_to(d, pids, |pid| WatchEvent {
        kind: WatchKind::Requested,
        force_mode,
        leases: 0,
        pid,
        lockspace: *ls,
        resource: *res,
        lver,
        kill_in_ms: 0,
        watchdog_in_ms: wd_in,
        renewal_age_ms: age,
    });
    if n > 0 {
        warn!(ls = %ls, res = %res, force_mode, watchers = n, "lease-request notice sent");
    }
}

/// One heartbeat to every watcher (the `lockd-watch` thread's tick).
pub fn heartbeat(d: &Daemon) {
    let counts: Vec<(i32, u32)> = {
        let watched: Vec<i32> = lock(&d.watchers).iter().map(|w| w.pid).collect();
        if watched.is_empty() {
            return;
        }
        let tables = lock(&d.core);
        let clients = &tables.clients;
        watched
            .into_iter()
            .map(|pid| {
                let n: usize = clients
                    .slots
                    .values()
                    .filter(|c| c.pid == pid && !c.pid_dead)
                    .map(|c| c.tokens.len())
                    .sum();
                (pid, u32::try_from(n).unwrap_or(u32::MAX))
            })
            .collect()
    };
    let pids: Vec<i32> = counts.iter().map(|c| c.0).collect();
    send_to(d, &pids, |pid| {
        let leases = counts.iter().find(|c| c.0 == pid).map(|c| c.1).unwrap_or(0);
        WatchEvent::heartbeat(pid, leases)
    });
}

/// The `lockd-watch` thread: heartbeats until shutdown.
pub fn heartbeat_loop(d: &Arc<Daemon>) {
    while !d.is_shutting_down() {
        heartbeat(d);
        std::thread::sleep(Duration::from_millis(u64::from(HEARTBEAT_MS)));
    }
}

/// `LOCKD_CMD_LEADER`: reads the resource's leader record and answers who holds it, with
/// the holder's host name and state from our view of the lockspace.
pub fn leader(d: &Daemon, res: &wire::Resource) -> Result<LeaderInfo, crate::admin::AdminError> {
    let (head, owners) = crate::admin::read_resource_owners(d, res)?;
    let shared = u32::from(head.flags & client_lib::proto::SANLK_RES_SHARED != 0);
    let Some(owner) = owners.first() else {
        return Ok(LeaderInfo {
            host_id: 0,
            generation: 0,
            token: head.lver,
            host_state: 0,
            shared: 0,
            host_name: Name::EMPTY,
        });
    };
    let space = d.find_space(&res.head.lockspace_name);
    let (host_state, host_name) = match &space {
        Some(s) if owner.host_id == s.host_id => {
            let ours = s.generation();
            let state = if owner.generation < ours {
                // Our own earlier incarnation: it ended when we rejoined.
                client_lib::proto::SANLK_HOST_DEAD
            } else {
                client_lib::proto::SANLK_HOST_LIVE
            };
            (state, d.cfg.host_name)
        }
        Some(s) => {
            let obs = lease_core::HostObserver::observation(&*lock(&s.monitor), owner.host_id);
            let state = s
                .hosts(owner.host_id)
                .ok()
                .and_then(|h| {
                    h.first()
                        .map(|h| h.flags & client_lib::proto::SANLK_HOST_MASK)
                })
                .unwrap_or(client_lib::proto::SANLK_HOST_UNKNOWN);
            // A host_id re-joined under a newer generation: the holder's incarnation
            // is gone.
            let state = match obs {
                Some(o) if o.owner_generation > owner.generation => {
                    client_lib::proto::SANLK_HOST_DEAD
                }
                _ => state,
            };
            (state, obs.map(|o| o.host_name).unwrap_or(Name::EMPTY))
        }
        None => (client_lib::proto::SANLK_HOST_UNKNOWN, Name::EMPTY),
    };
    Ok(LeaderInfo {
        host_id: owner.host_id,
        generation: owner.generation,
        token: head.lver,
        host_state,
        shared,
        host_name,
    })
}
