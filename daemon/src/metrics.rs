//! Prometheus metrics: counters and histograms kept by the daemon, and the encoder of the
//! text exposition (format 0.0.4) that `crate::exporter` renders for `lockd metrics`
//! (extension command `LOCKD_CMD_METRICS`) and the optional HTTP listener.
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
//! - this module knows nothing of the daemon's state: per-lockspace values are read at
//!   render time by `crate::exporter`;
//! - a name or label from a client or a disk is escaped, so no client can forge a sample.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

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

    pub(crate) fn encode(&self, e: &mut Encoder, name: &str, labels: &[(&str, &str)]) {
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
    pub(crate) fn name(self) -> &'static str {
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
    pub(crate) const ALL: [KillStep; 3] =
        [KillStep::Killpath, KillStep::Sigterm, KillStep::Sigkill];

    pub(crate) fn name(self) -> &'static str {
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
    pub(crate) counts: Mutex<Counts>,
}

/// The registry's counters kept by key, under one lock (each update is one map entry).
#[derive(Debug, Default, Clone)]
pub(crate) struct Counts {
    /// Failed or timed-out storage I/Os, by operation ("read", "write") and kind.
    pub disk_errors: BTreeMap<(&'static str, &'static str), u64>,
    /// Acquires, converts and releases answered, by result code.
    pub results: BTreeMap<(Op, i32), u64>,
    /// Kill escalation steps sent to lease holders.
    pub kills: BTreeMap<KillStep, u64>,
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
        *lock(&self.counts).results.entry((op, rv)).or_insert(0) += 1;
    }

    /// Counts one kill escalation step sent to a lease holder.
    pub fn kill(&self, step: KillStep) {
        *lock(&self.counts).kills.entry(step).or_insert(0) += 1;
    }

    /// Records one storage I/O (`op` "read" or "write") and how it ended.
    pub fn disk_io(&self, op: &'static str, took: Duration, outcome: Result<(), &'static str>) {
        match outcome {
            Ok(()) if op == "read" => self.disk_read.observe(took),
            Ok(()) => self.disk_write.observe(took),
            Err(kind) => {
                *lock(&self.counts)
                    .disk_errors
                    .entry((op, kind))
                    .or_insert(0) += 1;
            }
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
}
