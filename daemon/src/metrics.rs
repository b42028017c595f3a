//! Prometheus metrics: counters and histograms kept by the daemon, and the text exposition
//! (format 0.0.4) that `lockd metrics` (extension command `LOCKD_CMD_METRICS`) and the
//! optional HTTP listener (`metrics_listen`, see [`serve`]) hand out.
//!
//! The encoder is hand-written: the format is a few lines of text per sample, and the
//! crates that offer it (`prometheus`, `prometheus-client`) bring a registry, a global
//! default and several dependencies (protobuf, parking_lot …) into a process whose renewal
//! threads must stay small and predictable. What the format needs and this module does:
//! `# HELP` / `# TYPE` once per family before its samples, label values escaped (`\\`,
//! `\"`, `\n`), HELP text escaped (`\\`, `\n`), histogram buckets cumulative with a final
//! `le="+Inf"` equal to `_count`, and `_sum` / `_count` samples.
//!
//! Invariants:
//! - recording never blocks on I/O and never takes a daemon lock: histograms and the
//!   process-wide counters are atomics or a leaf mutex of their own;
//! - per-lockspace values (expiry, host states, leases held) are read from the daemon's
//!   state at render time, under the documented lock order (`tables` → `spaces` →
//!   `Space::st`), one lock at a time;
//! - a name or label from a client or a disk is escaped, so no client can forge a sample.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use tracing::{debug, info, warn};

use crate::state::Daemon;
use crate::sync::lock;

/// Bucket upper bounds (seconds) of the renewal and disk I/O latency histograms: 1 ms to
/// 10 s, so an io_timeout of 1..=10 s falls inside the range and slow storage shows.
pub const LATENCY_BUCKETS_S: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// The content type of the text exposition format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A latency histogram over [`LATENCY_BUCKETS_S`] (lock-free).
#[derive(Debug)]
pub struct Histogram {
    /// Observations per bucket (not cumulative); the last slot counts those above the
    /// largest bound.
    counts: [AtomicU64; LATENCY_BUCKETS_S.len() + 1],
    sum_us: AtomicU64,
    count: AtomicU64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: std::array::from_fn(|_| AtomicU64::new(0)),
            sum_us: AtomicU64::new(0),
            count: AtomicU64::new(0),
        }
    }
}

impl Histogram {
    /// Records one observation.
    pub fn observe(&self, d: Duration) {
        let s = d.as_secs_f64();
        let i = LATENCY_BUCKETS_S
            .iter()
            .position(|&b| s <= b)
            .unwrap_or(LATENCY_BUCKETS_S.len());
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        let us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        self.sum_us.fetch_add(us, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    /// Records an observation given in milliseconds.
    pub fn observe_ms(&self, ms: u64) {
        self.observe(Duration::from_millis(ms));
    }

    /// Number of observations so far.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    fn encode(&self, e: &mut Encoder, name: &str, labels: &[(&str, &str)]) {
        let mut cumulative = 0u64;
        let bucket = format!("{name}_bucket");
        for (i, bound) in LATENCY_BUCKETS_S.iter().enumerate() {
            cumulative += self.counts[i].load(Ordering::Relaxed);
            let le = format_float(*bound);
            let mut with_le: Vec<(&str, &str)> = labels.to_vec();
            with_le.push(("le", &le));
            e.sample_u64(&bucket, &with_le, cumulative);
        }
        cumulative += self.counts[LATENCY_BUCKETS_S.len()].load(Ordering::Relaxed);
        let mut with_le: Vec<(&str, &str)> = labels.to_vec();
        with_le.push(("le", "+Inf"));
        e.sample_u64(&bucket, &with_le, cumulative);
        // _sum after the buckets; _count equals the +Inf bucket (read once above), so a
        // scrape racing an observation is still self-consistent.
        let sum_s = self.sum_us.load(Ordering::Relaxed) as f64 / 1e6;
        e.sample_f64(&format!("{name}_sum"), labels, sum_s);
        e.sample_u64(&format!("{name}_count"), labels, cumulative);
    }
}

/// Which operation a result counter belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Op {
    Acquire,
    Convert,
    Release,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Acquire => "acquire",
            Op::Convert => "convert",
            Op::Release => "release",
        }
    }
}

/// What a kill escalation step did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum KillStep {
    Killpath,
    Sigkill,
    Sigterm,
}

impl KillStep {
    const ALL: [KillStep; 3] = [KillStep::Killpath, KillStep::Sigterm, KillStep::Sigkill];

    fn name(self) -> &'static str {
        match self {
            KillStep::Killpath => "killpath",
            KillStep::Sigkill => "sigkill",
            KillStep::Sigterm => "sigterm",
        }
    }

    /// The step for a signal number (SIGKILL or SIGTERM; anything else counts as SIGTERM).
    pub fn from_signal(sig: i32) -> KillStep {
        if sig == libc::SIGKILL {
            KillStep::Sigkill
        } else {
            KillStep::Sigterm
        }
    }
}

/// Process-wide counters and histograms (disk I/O is recorded where no [`Daemon`] is at
/// hand, so these live in one static).
#[derive(Debug, Default)]
pub struct Registry {
    pub disk_read: Histogram,
    pub disk_write: Histogram,
    disk_errors: Mutex<BTreeMap<(&'static str, &'static str), u64>>,
    results: Mutex<BTreeMap<(Op, i32), u64>>,
    kills: Mutex<BTreeMap<KillStep, u64>>,
}

static GLOBAL: OnceLock<Registry> = OnceLock::new();

/// The process-wide registry.
pub fn global() -> &'static Registry {
    GLOBAL.get_or_init(Registry::default)
}

/// Makes lockd-diskio report every storage read and write to [`Registry::disk_io`].
/// Idempotent; [`Daemon::new`](crate::state::Daemon::new) calls it.
pub fn observe_disk_io() {
    // false only when already installed: this is the one observer the daemon installs.
    let _ = lockd_diskio::set_observer(|op, took, outcome| global().disk_io(op, took, outcome));
}

impl Registry {
    /// Counts one acquire/convert/release answered with `rv` (0 = success).
    pub fn result(&self, op: Op, rv: i32) {
        *lock(&self.results).entry((op, rv)).or_insert(0) += 1;
    }

    /// Counts one kill escalation step sent to a lease holder.
    pub fn kill(&self, step: KillStep) {
        *lock(&self.kills).entry(step).or_insert(0) += 1;
    }

    /// Records one storage I/O (`op` "read" or "write") and how it ended.
    pub fn disk_io(&self, op: &'static str, took: Duration, outcome: Result<(), &'static str>) {
        match outcome {
            Ok(()) if op == "read" => self.disk_read.observe(took),
            Ok(()) => self.disk_write.observe(took),
            Err(kind) => *lock(&self.disk_errors).entry((op, kind)).or_insert(0) += 1,
        }
    }
}

/// Writes the text exposition format.
#[derive(Debug, Default)]
pub struct Encoder {
    out: String,
}

impl Encoder {
    /// Starts a family: `# HELP` and `# TYPE` lines.
    pub fn family(&mut self, name: &str, kind: &str, help: &str) {
        let help = help.replace('\\', "\\\\").replace('\n', "\\n");
        let _ = writeln!(self.out, "# HELP {name} {help}");
        let _ = writeln!(self.out, "# TYPE {name} {kind}");
    }

    fn labels(&mut self, labels: &[(&str, &str)]) {
        if labels.is_empty() {
            return;
        }
        self.out.push('{');
        for (i, (k, v)) in labels.iter().enumerate() {
            if i > 0 {
                self.out.push(',');
            }
            self.out.push_str(k);
            self.out.push_str("=\"");
            for c in v.chars() {
                match c {
                    '\\' => self.out.push_str("\\\\"),
                    '"' => self.out.push_str("\\\""),
                    '\n' => self.out.push_str("\\n"),
                    c => self.out.push(c),
                }
            }
            self.out.push('"');
        }
        self.out.push('}');
    }

    pub fn sample_u64(&mut self, name: &str, labels: &[(&str, &str)], v: u64) {
        self.out.push_str(name);
        self.labels(labels);
        let _ = writeln!(self.out, " {v}");
    }

    pub fn sample_i64(&mut self, name: &str, labels: &[(&str, &str)], v: i64) {
        self.out.push_str(name);
        self.labels(labels);
        let _ = writeln!(self.out, " {v}");
    }

    pub fn sample_f64(&mut self, name: &str, labels: &[(&str, &str)], v: f64) {
        self.out.push_str(name);
        self.labels(labels);
        let _ = writeln!(self.out, " {}", format_float(v));
    }

    pub fn finish(self) -> String {
        self.out
    }
}

/// A float as Prometheus parses it (`+Inf`, `-Inf`, `NaN`; Rust's Display otherwise,
/// which never uses an exponent).
fn format_float(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v == f64::INFINITY {
        "+Inf".into()
    } else if v == f64::NEG_INFINITY {
        "-Inf".into()
    } else {
        format!("{v}")
    }
}

/// Host states as GET_HOSTS reports them (SANLK_HOST_*), in label form.
const HOST_STATES: [(u32, &str); 5] = [
    (1, "unknown"),
    (2, "free"),
    (3, "live"),
    (4, "fail"),
    (5, "dead"),
];

/// Everything the renderer needs from one lockspace, read under its locks.
struct SpaceView {
    name: String,
    io_timeout_s: u64,
    joined: bool,
    renewal_age_s: Option<i64>,
    expiry_s: Option<i64>,
    hosts: [u64; HOST_STATES.len()],
    leases: u64,
    space: Arc<crate::space::Space>,
}

/// The whole exposition for this daemon.
pub fn render(d: &Daemon) -> String {
    let g = global();
    let mut e = Encoder::default();
    let (connected, registered) = {
        let tables = lock(&d.tables);
        let c = &tables.clients;
        let reg = c.slots.values().filter(|c| c.registered).count();
        (c.slots.len() as u64, reg as u64)
    };
    let spaces: Vec<Arc<crate::space::Space>> = lock(&d.spaces).clone();
    let mut leases_by_space: BTreeMap<String, u64> = BTreeMap::new();
    for r in lock(&d.tables).resources.values() {
        *leases_by_space.entry(r.ls.to_text()).or_insert(0) += 1;
    }
    let now = lockd_diskio::monotime();
    let views: Vec<SpaceView> = spaces
        .iter()
        .map(|s| space_view(s, now, &leases_by_space))
        .collect();

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
    for v in &views {
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
    for v in &views {
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
    for v in &views {
        if let Some(age) = v.renewal_age_s {
            e.sample_i64(
                "lockd_lockspace_renewal_age_seconds",
                &[("lockspace", &v.name)],
                age,
            );
        }
    }
    e.family(
        "lockd_lockspace_expiry_seconds",
        "gauge",
        "Seconds until our delta lease counts as failed (last renewal + 8 io_timeout); \
         at 0 the kill escalation starts.",
    );
    for v in &views {
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
    for v in &views {
        v.space.renewal_hist.encode(
            &mut e,
            "lockd_lockspace_renewal_duration_seconds",
            &[("lockspace", &v.name)],
        );
    }
    e.family(
        "lockd_lockspace_renewal_failures_total",
        "counter",
        "Renewal attempts of our delta lease that failed.",
    );
    for v in &views {
        e.sample_u64(
            "lockd_lockspace_renewal_failures_total",
            &[("lockspace", &v.name)],
            v.space.renewal_failures.load(Ordering::Relaxed),
        );
    }
    e.family(
        "lockd_lockspace_hosts",
        "gauge",
        "Hosts of the lockspace by state, as GET_HOSTS reports them (this host included).",
    );
    for v in &views {
        for (i, (_, state)) in HOST_STATES.iter().enumerate() {
            e.sample_u64(
                "lockd_lockspace_hosts",
                &[("lockspace", &v.name), ("state", state)],
                v.hosts[i],
            );
        }
    }
    e.family(
        "lockd_leases_held",
        "gauge",
        "Resource leases held on this host (orphans included), per lockspace.",
    );
    for v in &views {
        e.sample_u64("lockd_leases_held", &[("lockspace", &v.name)], v.leases);
    }

    encode_results(&mut e, g);

    e.family(
        "lockd_kill_escalations_total",
        "counter",
        "Kill escalation steps sent to lease holders (killpath runs, SIGTERM, SIGKILL).",
    );
    {
        let kills = lock(&g.kills);
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
        .encode(&mut e, "lockd_disk_io_duration_seconds", &[("op", "read")]);
    g.disk_write
        .encode(&mut e, "lockd_disk_io_duration_seconds", &[("op", "write")]);
    e.family(
        "lockd_disk_io_errors_total",
        "counter",
        "Lease storage I/Os that failed or timed out, by operation and kind.",
    );
    {
        let errs = lock(&g.disk_errors);
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
    e.finish()
}

fn encode_results(e: &mut Encoder, g: &Registry) {
    let results = lock(&g.results).clone();
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

fn space_view(s: &Arc<crate::space::Space>, now: u64, leases: &BTreeMap<String, u64>) -> SpaceView {
    let name = s.name.to_text();
    let io = u64::from(s.io_timeout);
    let (joined, last, gen, dead) = {
        let st = lock(&s.st);
        let joined = st.phase == crate::space::Phase::Joined && !st.space_dead;
        (joined, st.last_success_s, st.host_generation, st.space_dead)
    };
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
    {
        let mon = lock(&s.monitor);
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
    }
    SpaceView {
        leases: leases.get(&name).copied().unwrap_or(0),
        name,
        io_timeout_s: io,
        joined,
        renewal_age_s,
        expiry_s,
        hosts,
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
    fn histogram_buckets_are_cumulative_and_end_at_count() {
        let h = Histogram::default();
        h.observe_ms(0);
        h.observe_ms(3);
        h.observe_ms(3);
        h.observe(Duration::from_secs(100));
        let mut e = Encoder::default();
        h.encode(&mut e, "x_seconds", &[("ls", "a")]);
        let text = e.finish();
        assert!(
            text.contains("x_seconds_bucket{ls=\"a\",le=\"0.001\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("x_seconds_bucket{ls=\"a\",le=\"0.005\"} 3\n"),
            "{text}"
        );
        assert!(
            text.contains("x_seconds_bucket{ls=\"a\",le=\"30\"} 3\n"),
            "{text}"
        );
        assert!(
            text.contains("x_seconds_bucket{ls=\"a\",le=\"+Inf\"} 4\n"),
            "{text}"
        );
        assert!(text.contains("x_seconds_count{ls=\"a\"} 4\n"), "{text}");
        assert!(text.contains("x_seconds_sum{ls=\"a\"} 100.006\n"), "{text}");
    }

    #[test]
    fn labels_and_help_are_escaped() {
        let mut e = Encoder::default();
        e.family("m", "gauge", "a\\b\nc");
        e.sample_u64("m", &[("ls", "q\"x\\y\nz")], 1);
        assert_eq!(
            e.finish(),
            "# HELP m a\\\\b\\nc\n# TYPE m gauge\nm{ls=\"q\\\"x\\\\y\\nz\"} 1\n"
        );
    }

    #[test]
    fn floats_in_prometheus_form() {
        assert_eq!(format_float(f64::INFINITY), "+Inf");
        assert_eq!(format_float(f64::NEG_INFINITY), "-Inf");
        assert_eq!(format_float(f64::NAN), "NaN");
        assert_eq!(format_float(0.0025), "0.0025");
        assert_eq!(format_float(10.0), "10");
    }

    #[test]
    fn request_head_end() {
        assert_eq!(find_head_end(b"GET / HTTP/1.1\r\n\r\n"), Some(14));
        assert_eq!(find_head_end(b"GET / HTTP/1.1\r\n"), None);
    }
}
