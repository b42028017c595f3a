//! lockd extensions (see `client_lib::ext`): the lease-loss watch and the leader query.
//!
//! A watch is a connection that sent `LOCKD_CMD_WATCH` for a pid. The core keeps the
//! registry (`lockd_core::watches`: who watches which pid, its bound, who may watch
//! whom) and names the recipients of every notice it gives ([`WatchTo`]); this module
//! keeps only each watch connection's stream and writes to it: a heartbeat every
//! [`HEARTBEAT_MS`] (from the `lockd-watch` thread, whose recipients and lease counts
//! come from the core's `Input::WatchTick`), and each loss or request notice, to exactly
//! the connections the core named.
//!
//! Invariants:
//! * a loss notice is written *before* the action it announces: the monitor runs the
//!   core's `LossNotice` effects ([`notify_loss_to`]) before the same step's kill orders
//!   (`crate::kill`); REM_LOCKSPACE's and a forced shutdown's LockspaceRemoved notice is
//!   an effect of the step that sets `kill_now`, run before the next tick can kill
//!   (`crate::paxos`); a request's notice ([`notify_requested_to`], the core's `RequestNotice`
//!   effect) before the kill orders of the same examine step;
//! * a watch's reply is written before any event: [`register`] steps the core and writes
//!   the reply while holding `watchers`, and keeps the stream under the same hold, so a
//!   notice that names the new watch waits for `watchers` until the reply is out;
//! * a notice goes to a stream only while it is the watch of the pid the core named
//!   (a slot number can be reused by a later connection);
//! * writing never blocks a decision for long: every watch stream has a short write
//!   timeout, and a watcher whose write fails is dropped, in the core too
//!   (`Input::WatchDropped`, stepped after `watchers` is let go);
//! * lock order: `watchers` → `core`, taken together only by [`register`]; everything
//!   else takes `watchers` alone, with no other lock held, and holds it during a whole
//!   message write so messages never interleave.

use std::sync::Arc;
use std::time::Duration;

use client_lib::ext::{LeaderInfo, WatchEvent, WatchKind, NO_DEADLINE};
use client_lib::proto::{SM_MAGIC, SM_PROTO};
use client_lib::wire::{self, Header, HEADER_LEN};
use disk_format::Name;
use lockd_core::{CoreRequest, Effect, Input, LeaseTimes, ReqKind, WatchBeat, WatchTo};
use tracing::{debug, info, warn};

use crate::server::Conn;
use crate::state::{Daemon, Watcher};
use crate::sync::lock;

/// Interval of heartbeats on a watch connection.
pub const HEARTBEAT_MS: u32 = 500;
/// A write to a watcher that takes longer than this drops the watcher.
const WRITE_TIMEOUT: Duration = Duration::from_millis(200);

/// `LOCKD_CMD_WATCH`: registers `conn` as a watch of `h.data` (0 = the caller's pid).
/// The core decides (only root may watch another user's process; at most
/// `lockd_core::MAX_WATCHES` at once).
pub fn handle_watch(d: &Arc<Daemon>, conn: &mut Conn, h: &Header) {
    let stream = match conn.stream.try_clone() {
        Ok(s) => s,
        Err(_) => {
            conn.reply(h, -libc::ENOMEM);
            return;
        }
    };
    let _ = stream.set_write_timeout(Some(WRITE_TIMEOUT));
    let ci = conn.ci;
    // A pid that does not fit (> i32::MAX) reads as negative: the core refuses it.
    let asked_pid = h.data as i32;
    let registered = register(d, ci, asked_pid, stream, |rv| {
        let mut r = h.result_reply(rv);
        if rv == 0 {
            r.data2 = HEARTBEAT_MS;
        }
        conn.send(&r.encode());
    });
    match registered {
        Ok(pid) => info!(ci, pid, "lease-loss watch registered"),
        Err((rv, why)) => info!(ci, asked_pid, rv, why, "lease-loss watch refused"),
    }
}

/// Connection `ci` asks the core to become a watch of `asked_pid` (0: its own process);
/// `answer(rv)` writes the reply. The step, the reply and keeping `stream` happen under
/// one hold of `watchers`, so no notice for the new watch can be written before its
/// reply. Returns the watched pid, or the refusal's code and reason.
pub(crate) fn register(
    d: &Daemon,
    ci: u32,
    asked_pid: i32,
    stream: std::os::unix::net::UnixStream,
    answer: impl FnOnce(i32),
) -> Result<i32, (i32, &'static str)> {
    let mut w = lock(&d.watchers);
    let (fx, pid) = {
        let mut core = lock(&d.core);
        let fx = core.step(
            crate::clock::now_s(),
            Input::Request {
                ci,
                req: CoreRequest::Watch { pid: asked_pid },
            },
        );
        (fx, core.watched_pid(ci))
    };
    let reply = match fx.as_slice() {
        [Effect::Reply { ci: to, reply }] if *to == ci && reply.kind == ReqKind::Watch => reply,
        other => panic!("WATCH gave effects other than its reply: {other:?}"),
    };
    answer(reply.rv);
    match pid {
        Some(pid) if reply.rv == 0 => {
            w.insert(ci, Watcher { pid, stream });
            Ok(pid)
        }
        _ => Err((reply.rv, reply.why.unwrap_or("refused"))),
    }
}

/// Forgets the stream of watch connection `ci` (its connection closed; the core ends
/// the watch with the client, `Input::Closed`).
pub fn connection_closed(d: &Daemon, ci: u32) {
    lock(&d.watchers).remove(&ci);
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

/// Writes `make(recipient)` to each recipient the core named that is still the watch of
/// that pid; drops the watches whose write fails (here, then in the core). Returns how
/// many were delivered.
fn send_to(d: &Daemon, to: &[WatchTo], make: impl Fn(&WatchTo) -> WatchEvent) -> usize {
    use std::io::Write;
    let mut delivered = 0;
    let mut dropped = Vec::new();
    {
        let mut w = lock(&d.watchers);
        for t in to {
            let Some(watcher) = w.get_mut(&t.ci).filter(|w| w.pid == t.pid) else {
                continue;
            };
            match watcher.stream.write_all(&event_message(&make(t))) {
                Ok(()) => delivered += 1,
                Err(e) => {
                    debug!(ci = t.ci, error = %e, "watch connection dropped");
                    w.remove(&t.ci);
                    dropped.push(t.ci);
                }
            }
        }
    }
    for ci in dropped {
        let fx = lock(&d.core).step(crate::clock::now_s(), Input::WatchDropped { ci });
        assert!(fx.is_empty(), "a dropped watch gave effects: {fx:?}");
    }
    delivered
}

/// A notice's deadlines from the lease times the core gave with it (`LeaseTimes`: the
/// lockspace's last renewal and when it expires): (kill escalation in ms, watchdog reset
/// in ms, renewal age in ms), from now. Without them (the lockspace is not here): no
/// deadline but the kill's.
pub fn deadlines(d: &Daemon, lease: Option<LeaseTimes>) -> (i64, i64, u64) {
    let Some(lease) = lease else {
        return (0, NO_DEADLINE, 0);
    };
    let now_ms = crate::clock::now_ms() as i64;
    let last_ms = (lease.last_success_s * 1000) as i64;
    let kill_in = (lease.expires_at_s * 1000) as i64 - now_ms;
    let wd_in = if d.cfg.use_watchdog {
        kill_in + i64::from(d.cfg.watchdog_fire_timeout_s) * 1000
    } else {
        NO_DEADLINE
    };
    (kill_in, wd_in, (now_ms - last_ms).max(0) as u64)
}

/// Announces to the watch connections `to` — those the core named in its `LossNotice`
/// effect — that their process's leases in `ls` are being lost (`kind` is
/// RenewalFailing, LockspaceFailed or LockspaceRemoved), with the lease's times the core
/// gave. Called before the effects that act on it.
pub fn notify_loss_to(
    d: &Daemon,
    ls: &Name,
    kind: WatchKind,
    to: &[WatchTo],
    lease: Option<LeaseTimes>,
) {
    if to.is_empty() {
        return;
    }
    let (mut kill_in, mut wd_in, age) = deadlines(d, lease);
    if kind == WatchKind::LockspaceRemoved {
        kill_in = 0;
        wd_in = NO_DEADLINE;
    }
    let n = send_to(d, to, |t| WatchEvent {
        kind,
        force_mode: 0,
        leases: 0,
        pid: t.pid,
        lockspace: *ls,
        resource: Name::EMPTY,
        lver: 0,
        kill_in_ms: kill_in,
        watchdog_in_ms: wd_in,
        renewal_age_ms: age,
    });
    if n > 0 {
        warn!(%ls, kind = kind.name(), watchers = n, kill_in_ms = kill_in,
              "lease-loss notice sent");
    }
}

/// Announces to the watch connections `to` — those the core named in its
/// `RequestNotice` effect — that another host requested resource `res` (held at `lver`)
/// with `force_mode`; the core's kill orders for them come right after.
pub fn notify_requested_to(
    d: &Daemon,
    ls: &Name,
    res: &Name,
    lver: u64,
    force_mode: u32,
    to: &[WatchTo],
    lease: Option<LeaseTimes>,
) {
    if to.is_empty() {
        return;
    }
    let (_, wd_in, age) = deadlines(d, lease);
    let n = send_to(d, to, |t| WatchEvent {
        kind: WatchKind::Requested,
        force_mode,
        leases: 0,
        pid: t.pid,
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

/// One heartbeat to every watch: the core names them and their processes' lease counts
/// (`Input::WatchTick`).
pub fn heartbeat(d: &Daemon) {
    if lock(&d.watchers).is_empty() {
        return;
    }
    let fx = lock(&d.core).step(crate::clock::now_s(), Input::WatchTick);
    for e in fx {
        match e {
            Effect::WatchBeats { beats } => send_beats(d, &beats),
            other => panic!("a watch tick gave an effect other than its beats: {other:?}"),
        }
    }
}

/// Writes the heartbeats the core gave ([`Effect::WatchBeats`]).
pub(crate) fn send_beats(d: &Daemon, beats: &[WatchBeat]) {
    let to: Vec<WatchTo> = beats
        .iter()
        .map(|b| WatchTo {
            ci: b.ci,
            pid: b.pid,
        })
        .collect();
    send_to(d, &to, |t| {
        let leases = beats.iter().find(|b| b.ci == t.ci).map_or(0, |b| b.leases);
        WatchEvent::heartbeat(t.pid, leases)
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
pub fn leader(
    d: &Daemon,
    caller: &crate::access::Caller,
    res: &wire::Resource,
) -> Result<LeaderInfo, crate::admin::AdminError> {
    let (head, owners) = crate::admin::read_resource_owners(d, caller, res)?;
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
            let obs = s.monitor(|m| lease_core::HostObserver::observation(m, owner.host_id));
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
