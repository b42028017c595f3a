//! The metrics exposition of this daemon: [`render`] reads the counters
//! (`crate::metrics`) and the daemon's state, and [`serve`] hands the text to scrapers
//! over HTTP (`metrics_listen`).
//!
//! Invariants:
//! - per-lockspace values (expiry, host states, leases held) are read from the daemon's
//!   state at render time, under the documented lock order (`core` → `spaces`; a
//!   lockspace's status is the core's), one lock at a time;
//! - the HTTP side is bounded: at most [`HTTP_MAX_CONNECTIONS`] connections at once, each
//!   with a read/write timeout, so a stalled scraper never holds the accepting loop.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::{debug, info, warn};

use crate::metrics::{global, Encoder, KillStep, Op, Registry, CONTENT_TYPE};
use crate::state::Daemon;
use crate::sync::lock;

/// Host states as GET_HOSTS reports them (SANLK_HOST_*), in label form.
const HOST_STATES: [(u32, &str); 5] = [
    (1, "unknown"),
    (2, "free"),
    (3, "live"),
    (4, "fail"),
    (5, "dead"),
];

/// Everything the renderer needs from one lockspace, read under its locks.
/// One gauge of a fenced lockspace's fencing observations.
type FenceGauge = fn(&lockd_core::fencing::FenceObserved) -> u64;

struct SpaceView {
    name: String,
    io_timeout_s: u64,
    joined: bool,
    renewal_age_s: Option<i64>,
    expiry_s: Option<i64>,
    hosts: [u64; HOST_STATES.len()],
    /// Peers a shared grant still waits for after our join; None: no hold.
    shared_hold_hosts: Option<u64>,
    leases: u64,
    space: Arc<crate::space::Space>,
}

/// The whole exposition for this daemon.
pub fn render(d: &Daemon) -> String {
    let g = global();
    let mut e = Encoder::default();
    let (connected, registered) = {
        let tables = lock(&d.core);
        let c = &tables.clients;
        let reg = c.slots.values().filter(|c| c.registered).count();
        (c.slots.len() as u64, reg as u64)
    };
    let spaces: Vec<Arc<crate::space::Space>> = lock(&d.spaces).clone();
    let mut leases_by_space: BTreeMap<String, u64> = BTreeMap::new();
    for r in lock(&d.core).resources.values() {
        *leases_by_space.entry(r.ls.to_text()).or_insert(0) += 1;
    }
    let now = crate::clock::now_s();
    let views: Vec<SpaceView> = spaces
        .iter()
        .map(|s| space_view(s, now, &leases_by_space))
        .collect();

    encode_daemon(&mut e, d, now, connected, registered);
    encode_lockspaces(&mut e, &views);
    encode_lockspace_timing(&mut e, &views);
    encode_leases(&mut e, now, &views);
    encode_results(&mut e, g);
    encode_kills_and_io(&mut e, g);
    e.finish()
}

/// The daemon's own families: build, uptime, clients, the worker pool and pid watches.
fn encode_daemon(e: &mut Encoder, d: &Daemon, now: u64, connected: u64, registered: u64) {
    e.family("lockd_build_info", "gauge", "lockd version (always 1).");
    e.sample_u64(
        "lockd_build_info",
        &[("version", env!("CARGO_PKG_VERSION"))],
        1,
    );
    e.family(
        "lockd_uptime_seconds",
        "gauge",
        "Seconds since the daemon started.",
    );
    e.sample_u64(
        "lockd_uptime_seconds",
        &[],
        now.saturating_sub(d.started_monotime),
    );
    e.family(
        "lockd_clients_connected",
        "gauge",
        "Client connections open now (sanlock client slots in use).",
    );
    e.sample_u64("lockd_clients_connected", &[], connected);
    e.family(
        "lockd_clients_registered",
        "gauge",
        "Registered clients (processes that may hold leases).",
    );
    e.sample_u64("lockd_clients_registered", &[], registered);
    if let Some(r) = d.reactor.get() {
        let pool = r.pool_counts().unwrap_or_default();
        e.family(
            "lockd_worker_threads",
            "gauge",
            "Worker threads running client commands (busy or idle).",
        );
        e.sample_u64("lockd_worker_threads", &[], pool.threads as u64);
        e.family(
            "lockd_worker_threads_idle",
            "gauge",
            "Worker threads waiting for a command.",
        );
        e.sample_u64("lockd_worker_threads_idle", &[], pool.idle as u64);
        e.family(
            "lockd_worker_jobs_queued",
            "gauge",
            "Commands waiting for a worker (all workers busy).",
        );
        e.sample_u64("lockd_worker_jobs_queued", &[], pool.queued as u64);
        e.family(
            "lockd_worker_jobs_over_share",
            "gauge",
            "Commands of non-root uids held back because their uid has its share of the \
             workers.",
        );
        e.sample_u64(
            "lockd_worker_jobs_over_share",
            &[],
            r.jobs_over_share() as u64,
        );
        e.family(
            "lockd_pid_watches",
            "gauge",
            "Processes whose leases are held for them (acquire --for-pid), watched for exit.",
        );
        e.sample_u64("lockd_pid_watches", &[], r.watched_pids() as u64);
    }
}

/// Per lockspace: how many there are, and each one's state and renewal figures.
fn encode_lockspaces(e: &mut Encoder, views: &[SpaceView]) {
    e.family(
        "lockd_lockspaces",
        "gauge",
        "Lockspaces known to the daemon (joining, joined or being removed).",
    );
    e.sample_u64("lockd_lockspaces", &[], views.len() as u64);

    e.family(
        "lockd_lockspace_joined",
        "gauge",
        "1 when the lockspace is joined and alive, 0 while joining, failed or leaving.",
    );
    for v in views {
        e.sample_u64(
            "lockd_lockspace_joined",
            &[("lockspace", &v.name)],
            u64::from(v.joined),
        );
    }
    e.family(
        "lockd_lockspace_io_timeout_seconds",
        "gauge",
        "The lockspace's io_timeout.",
    );
    for v in views {
        e.sample_u64(
            "lockd_lockspace_io_timeout_seconds",
            &[("lockspace", &v.name)],
            v.io_timeout_s,
        );
    }
    e.family(
        "lockd_lockspace_renewal_age_seconds",
        "gauge",
        "Seconds since the last successful renewal of our delta lease.",
    );
    for v in views {
        if let Some(age) = v.renewal_age_s {
            e.sample_i64(
                "lockd_lockspace_renewal_age_seconds",
                &[("lockspace", &v.name)],
                age,
            );
        }
    }
}

/// Per lockspace: the expiry countdown and the renewal and host figures that follow it.
fn encode_lockspace_timing(e: &mut Encoder, views: &[SpaceView]) {
    e.family(
        "lockd_lockspace_expiry_seconds",
        "gauge",
        "Seconds until our delta lease counts as failed (last renewal + 8 io_timeout); \
         at 0 the kill escalation starts.",
    );
    for v in views {
        if let Some(x) = v.expiry_s {
            e.sample_i64(
                "lockd_lockspace_expiry_seconds",
                &[("lockspace", &v.name)],
                x,
            );
        }
    }
    e.family(
        "lockd_lockspace_renewal_duration_seconds",
        "histogram",
        "Time one successful renewal took (read and write of the delta lease).",
    );
    for v in views {
        v.space.renewal_hist.encode(
            e,
            "lockd_lockspace_renewal_duration_seconds",
            &[("lockspace", &v.name)],
        );
    }
    e.family(
        "lockd_lockspace_renewal_failures_total",
        "counter",
        "Renewal attempts of our delta lease that failed.",
    );
    for v in views {
        e.sample_u64(
            "lockd_lockspace_renewal_failures_total",
            &[("lockspace", &v.name)],
            v.space.renewal_failures.load(Ordering::Relaxed),
        );
    }
    e.family(
        "lockd_lockspace_renewal_read_bytes_total",
        "counter",
        "Bytes of the lockspace area read by successful renewals (the head of the area on \
         most, the whole area periodically).",
    );
    for v in views {
        e.sample_u64(
            "lockd_lockspace_renewal_read_bytes_total",
            &[("lockspace", &v.name)],
            v.space.renewal_read_bytes.load(Ordering::Relaxed),
        );
    }
    e.family(
        "lockd_lockspace_hosts",
        "gauge",
        "Hosts of the lockspace by state, as GET_HOSTS reports them (this host included).",
    );
    for v in views {
        for (i, (_, state)) in HOST_STATES.iter().enumerate() {
            e.sample_u64(
                "lockd_lockspace_hosts",
                &[("lockspace", &v.name), ("state", state)],
                v.hosts[i],
            );
        }
    }
    e.family(
        "lockd_lockspace_shared_hold_hosts",
        "gauge",
        "Shared grants held back after this host's join: the peers still awaited (each must \
         be seen renewing three times so that a sanlock peer's cache has read the join; 0 \
         before the first read after the join). Absent when shared grants are not held.",
    );
    for v in views {
        if let Some(n) = v.shared_hold_hosts {
            e.sample_u64(
                "lockd_lockspace_shared_hold_hosts",
                &[("lockspace", &v.name)],
                n,
            );
        }
    }
}

/// Storage fencing per fenced lockspace, then the leases held per lockspace.
fn encode_leases(e: &mut Encoder, now: u64, views: &[SpaceView]) {
    let fenced: Vec<(&str, FenceView)> = views
        .iter()
        .filter_map(|v| fence_view(&v.space).map(|f| (v.name.as_str(), f)))
        .collect();
    encode_fencing(e, now, &fenced);
    e.family(
        "lockd_leases_held",
        "gauge",
        "Resource leases held on this host (orphans included), per lockspace.",
    );
    for v in views {
        e.sample_u64("lockd_leases_held", &[("lockspace", &v.name)], v.leases);
    }
}

/// Kill escalation steps, and storage I/O durations and errors.
fn encode_kills_and_io(e: &mut Encoder, g: &Registry) {
    e.family(
        "lockd_kill_escalations_total",
        "counter",
        "Kill escalation steps sent to lease holders (killpath runs, SIGTERM, SIGKILL).",
    );
    let counts = lock(&g.counts).clone();
    {
        let kills = &counts.kills;
        for step in KillStep::ALL {
            let n = kills.get(&step).copied().unwrap_or(0);
            e.sample_u64("lockd_kill_escalations_total", &[("step", step.name())], n);
        }
    }
    e.family(
        "lockd_disk_io_duration_seconds",
        "histogram",
        "Time one successful lease storage I/O took (O_DIRECT), by operation.",
    );
    g.disk_read
        .encode(e, "lockd_disk_io_duration_seconds", &[("op", "read")]);
    g.disk_write
        .encode(e, "lockd_disk_io_duration_seconds", &[("op", "write")]);
    e.family(
        "lockd_disk_io_errors_total",
        "counter",
        "Lease storage I/Os that failed or timed out, by operation and kind.",
    );
    {
        let errs = &counts.disk_errors;
        for op in ["read", "write"] {
            for kind in ["error", "timeout"] {
                let n = errs.get(&(op, kind)).copied().unwrap_or(0);
                e.sample_u64(
                    "lockd_disk_io_errors_total",
                    &[("op", op), ("kind", kind)],
                    n,
                );
            }
        }
    }
}

fn encode_results(e: &mut Encoder, g: &Registry) {
    let results = lock(&g.counts).results.clone();
    for (op, family, help) in [
        (
            Op::Acquire,
            "lockd_acquires_total",
            "ACQUIRE requests answered, by result code (0 = granted).",
        ),
        (
            Op::Release,
            "lockd_releases_total",
            "RELEASE requests answered, by result code (0 = released).",
        ),
    ] {
        e.family(family, "counter", help);
        // The success series always exists, so rate() works from the first scrape.
        let ok = results.get(&(op, 0)).copied().unwrap_or(0);
        e.sample_u64(family, &[("result", "0"), ("reason", "ok")], ok);
        for ((o, rv), n) in &results {
            if *o == op && *rv != 0 {
                let code = rv.to_string();
                let reason = client_lib::describe_rv(*rv);
                e.sample_u64(family, &[("result", &code), ("reason", &reason)], *n);
            }
        }
    }
    e.family(
        "lockd_failures_total",
        "counter",
        "Lease requests (acquire, convert, release) that failed, by operation and result code.",
    );
    for ((op, rv), n) in &results {
        if *rv < 0 {
            let code = rv.to_string();
            let reason = client_lib::describe_rv(*rv);
            e.sample_u64(
                "lockd_failures_total",
                &[("op", op.name()), ("result", &code), ("reason", &reason)],
                *n,
            );
        }
    }
}

/// The storage-fencing families: HELP and TYPE always, a sample per fenced lockspace
/// (`fenced`: lockspace name and its state; `now`: monotime s). `lockd status` and
/// `lockd explain` read these lines back (tools/src/client/status.rs).
pub fn encode_fencing(e: &mut Encoder, now: u64, fenced: &[(&str, FenceView)]) {
    let fence_gauges: [(&str, &str, FenceGauge); 3] = [
        (
            "lockd_fence_keys",
            "Storage fencing (scsi-pr): keys registered on the lockspace's device at the \
             latest pass.",
            |f| f.keys,
        ),
        (
            "lockd_fence_reservation",
            "Storage fencing: 1 when a reservation stood on the lockspace's device at the \
             latest pass (fencing can act), 0 when none did.",
            |f| u64::from(f.reservation),
        ),
        (
            "lockd_fence_unkeyed_live_hosts",
            "Storage fencing: live hosts without a key at the latest pass; while non-zero no \
             reservation is held and no host is fenced by the storage.",
            |f| f.unkeyed_live_peers,
        ),
    ];
    for (family, help, value) in fence_gauges {
        e.family(family, "gauge", help);
        for &(v, f) in fenced {
            e.sample_u64(family, &[("lockspace", v)], value(&f.seen));
        }
    }
    e.family(
        "lockd_fence_key_info",
        "gauge",
        "Storage fencing: this host's registered key (always 1; the key, in hex, is the \
         `key` label; absent before the join registered one and after a clean leave).",
    );
    for &(v, f) in fenced {
        if f.key != 0 {
            let key = format!("0x{:016x}", f.key);
            e.sample_u64(
                "lockd_fence_key_info",
                &[("lockspace", v), ("key", &key)],
                1,
            );
        }
    }
    e.family(
        "lockd_fence_fenced_here",
        "gauge",
        "Storage fencing: 1 when this host is fenced (its key was found gone, or the \
         storage refused it), 0 otherwise.",
    );
    for &(v, f) in fenced {
        e.sample_u64(
            "lockd_fence_fenced_here",
            &[("lockspace", v)],
            u64::from(f.fenced_here),
        );
    }
    e.family(
        "lockd_fence_preempts_total",
        "counter",
        "Storage fencing: preempts of a peer generation this host began.",
    );
    for &(v, f) in fenced {
        e.sample_u64(
            "lockd_fence_preempts_total",
            &[("lockspace", v)],
            f.seen.preempts,
        );
    }
    e.family(
        "lockd_fence_peers_fenced_total",
        "counter",
        "Storage fencing: peer generations this host confirmed fenced.",
    );
    for &(v, f) in fenced {
        e.sample_u64(
            "lockd_fence_peers_fenced_total",
            &[("lockspace", v)],
            f.seen.peers_fenced,
        );
    }
    e.family(
        "lockd_fence_last_preempt_age_seconds",
        "gauge",
        "Storage fencing: seconds since this host last began a preempt (absent: never).",
    );
    for &(v, f) in fenced {
        if f.seen.last_preempt_s != 0 {
            e.sample_u64(
                "lockd_fence_last_preempt_age_seconds",
                &[("lockspace", v)],
                now.saturating_sub(f.seen.last_preempt_s),
            );
        }
    }
}

/// A fenced lockspace's fencing state, read from the core under one lock: what the
/// latest pass observed, our key (0: none registered) and whether we are fenced.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FenceView {
    pub seen: lockd_core::fencing::FenceObserved,
    pub key: u64,
    pub fenced_here: bool,
}

/// None for a lockspace without storage fencing.
fn fence_view(s: &crate::space::Space) -> Option<FenceView> {
    lock(&s.core).space_fence(s.space_id).map(|f| FenceView {
        seen: f.seen_now,
        key: f.our_key(),
        fenced_here: f.fenced_here,
    })
}

fn space_view(s: &Arc<crate::space::Space>, now: u64, leases: &BTreeMap<String, u64>) -> SpaceView {
    let name = s.name.to_text();
    let io = u64::from(s.io_timeout);
    let (joined, last, gen, dead) = s.st(|st| {
        let joined = st.phase == crate::space::Phase::Joined && !st.space_dead;
        (joined, st.last_success_s, st.host_generation, st.space_dead)
    });
    let (renewal_age_s, expiry_s) = if last == 0 {
        (None, None)
    } else {
        let fail_at = last + lease_core::timeouts::id_renewal_fail_seconds(io);
        (
            Some(now as i64 - last as i64),
            Some(fail_at as i64 - now as i64),
        )
    };
    let mut hosts = [0u64; HOST_STATES.len()];
    let shared_hold_hosts = s.monitor(|mon| {
        mon.shared_hold_since_s()
            .map(|_| mon.shared_hold_awaiting().len() as u64)
    });
    s.monitor(|mon| {
        if mon.checks() > 0 {
            // As GET_HOSTS: hosts whose record has a timestamp, and ourselves as LIVE
            // (as FAIL once the lockspace failed, as `lockd status` shows it).
            for (id, obs, state) in mon.hosts(now) {
                if obs.timestamp == 0 || id == s.host_id {
                    continue;
                }
                if let Some(i) = HOST_STATES.iter().position(|(c, _)| *c == state as u32) {
                    hosts[i] += 1;
                }
            }
            if gen != 0 {
                hosts[if dead { 3 } else { 2 }] += 1;
            }
        }
    });
    SpaceView {
        leases: leases.get(&name).copied().unwrap_or(0),
        name,
        io_timeout_s: io,
        joined,
        renewal_age_s,
        expiry_s,
        hosts,
        shared_hold_hosts,
        space: s.clone(),
    }
}

/// Largest HTTP request head accepted (request line and headers).
const HTTP_MAX_REQUEST: usize = 8 * 1024;
/// How long a scraper may take to send its request and read the answer.
const HTTP_IO_TIMEOUT: Duration = Duration::from_secs(5);

/// Most HTTP connections served at once; a further one is answered `503` at once (by the
/// accepting thread, with a short write timeout) and closed.
pub const HTTP_MAX_CONNECTIONS: usize = 4;

/// How long the accepting thread may spend reading the request of a peer over the bound,
/// and writing it a `503`.
const HTTP_BUSY_WRITE_TIMEOUT: Duration = Duration::from_millis(200);

/// Serves `GET /metrics` on `listener` until shutdown. Each connection runs on a thread
/// of its own (a small stack, `threads::spawn`), at most [`HTTP_MAX_CONNECTIONS`] at
/// once, and every read and write has `HTTP_IO_TIMEOUT`: an idle or stalled peer holds
/// one of those threads for at most about twice that, never the accepting loop, so it
/// does not delay other scrapes; the bound keeps threads and memory fixed whatever
/// peers do.
pub fn serve(d: Arc<Daemon>, listener: TcpListener) {
    if let Ok(addr) = listener.local_addr() {
        info!(%addr, "metrics listener started");
    }
    let active = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    for conn in listener.incoming() {
        if d.is_shutting_down() {
            break;
        }
        match conn {
            Ok(stream) => serve_bounded(&d, &active, stream),
            Err(e) => {
                warn!(error = %e, "metrics accept failed");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

/// Counts a connection's thread as ended when dropped (also when it panicked).
struct Slot(Arc<std::sync::atomic::AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

fn serve_bounded(d: &Arc<Daemon>, active: &Arc<std::sync::atomic::AtomicUsize>, stream: TcpStream) {
    let taken = active.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
        (n < HTTP_MAX_CONNECTIONS).then_some(n + 1)
    });
    if taken.is_err() {
        let mut stream = stream;
        // Read what has come of the request first (briefly): closing a socket with
        // unread data resets it, and the peer would lose the 503.
        let _ = stream.set_read_timeout(Some(HTTP_BUSY_WRITE_TIMEOUT));
        let _ = stream.set_write_timeout(Some(HTTP_BUSY_WRITE_TIMEOUT));
        let mut buf = [0u8; 1024];
        let mut head = Vec::new();
        let deadline = Instant::now() + HTTP_BUSY_WRITE_TIMEOUT;
        while find_head_end(&head).is_none()
            && head.len() < HTTP_MAX_REQUEST
            && Instant::now() < deadline
        {
            match stream.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => head.extend_from_slice(&buf[..n]),
            }
        }
        let _ = respond(&mut stream, "503 Service Unavailable", "", "");
        debug!("metrics connections at their bound; answered 503");
        return;
    }
    let slot = Slot(active.clone());
    let d2 = d.clone();
    let spawned = crate::threads::spawn("lockd-metrics-http", move || {
        let _slot = slot;
        if let Err(e) = serve_one(&d2, stream) {
            debug!(error = %e, "metrics request failed");
        }
    });
    if let Err(e) = spawned {
        // The closure (and with it the slot and the stream) was dropped.
        warn!(error = %e, "cannot start a metrics connection thread");
    }
}

fn serve_one(d: &Daemon, mut stream: TcpStream) -> std::io::Result<()> {
    stream.set_read_timeout(Some(HTTP_IO_TIMEOUT))?;
    stream.set_write_timeout(Some(HTTP_IO_TIMEOUT))?;
    let deadline = Instant::now() + HTTP_IO_TIMEOUT;
    let mut buf = vec![0u8; HTTP_MAX_REQUEST];
    let mut got = 0;
    let head_end = loop {
        if let Some(p) = find_head_end(&buf[..got]) {
            break p;
        }
        if got == buf.len() {
            return respond(&mut stream, "431 Request Header Fields Too Large", "", "");
        }
        if Instant::now() > deadline {
            return respond(&mut stream, "408 Request Timeout", "", "");
        }
        match stream.read(&mut buf[got..]) {
            Ok(0) => return Ok(()),
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]);
    let request_line = head.lines().next().unwrap_or("");
    let mut parts = request_line.split(' ');
    let method = parts.next().unwrap_or("");
    let target = parts.next().unwrap_or("");
    let path = target.split('?').next().unwrap_or("");
    match (method, path) {
        ("GET", "/metrics") => respond(&mut stream, "200 OK", CONTENT_TYPE, &render(d)),
        ("HEAD", "/metrics") => respond(&mut stream, "200 OK", CONTENT_TYPE, ""),
        ("GET", "/") => respond(
            &mut stream,
            "200 OK",
            "text/plain; charset=utf-8",
            "lockd: metrics at /metrics\n",
        ),
        ("GET", _) | ("HEAD", _) => respond(&mut stream, "404 Not Found", "", ""),
        _ => respond(&mut stream, "405 Method Not Allowed", "", ""),
    }
}

fn find_head_end(b: &[u8]) -> Option<usize> {
    b.windows(4).position(|w| w == b"\r\n\r\n")
}

fn respond(stream: &mut TcpStream, status: &str, ctype: &str, body: &str) -> std::io::Result<()> {
    let mut msg = format!(
        "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    if !ctype.is_empty() {
        msg.push_str("Content-Type: ");
        msg.push_str(ctype);
        msg.push_str("\r\n");
    }
    msg.push_str("\r\n");
    msg.push_str(body);
    stream.write_all(msg.as_bytes())?;
    stream.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_head_end() {
        assert_eq!(find_head_end(b"GET / HTTP/1.1\r\n\r\n"), Some(14));
        assert_eq!(find_head_end(b"GET / HTTP/1.1\r\n"), None);
    }
}
