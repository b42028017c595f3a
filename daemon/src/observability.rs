//! Logging: a tracing layer that keeps the most recent log text in a bounded ring for
//! LOG_DUMP, plus the subscriber set-up used by the daemon binary.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::prelude::*;
use tracing_subscriber::registry::LookupSpan;

/// Bytes of log text kept for LOG_DUMP (sanlock keeps 1 MiB).
pub const LOG_RING_BYTES: usize = 1024 * 1024;

/// A bounded ring of log lines.
#[derive(Debug, Default)]
pub struct LogRing {
    inner: Mutex<(VecDeque<String>, usize)>,
}

impl LogRing {
    pub fn push(&self, line: String) {
        let mut g = crate::sync::lock(&self.inner);
        g.1 += line.len() + 1;
        g.0.push_back(line);
        while g.1 > LOG_RING_BYTES {
            match g.0.pop_front() {
                Some(old) => g.1 -= old.len() + 1,
                None => break,
            }
        }
    }

    /// All kept lines, newline-terminated.
    pub fn dump(&self) -> Vec<u8> {
        let g = crate::sync::lock(&self.inner);
        let mut out = Vec::with_capacity(g.1);
        for l in &g.0 {
            out.extend_from_slice(l.as_bytes());
            out.push(b'\n');
        }
        out
    }
}

struct FieldText(String);

impl Visit for FieldText {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.0, " {value:?}");
        } else {
            let _ = write!(self.0, " {}={value:?}", field.name());
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        // Escaped: a string field may come from a client or a disk; a raw newline in it
        // would forge a log line.
        if field.name() == "message" {
            let _ = write!(self.0, " {}", value.escape_debug());
        } else {
            let _ = write!(self.0, " {}={value:?}", field.name());
        }
    }
}

/// The tracing layer feeding a [`LogRing`].
pub struct RingLayer {
    ring: Arc<LogRing>,
}

impl RingLayer {
    pub fn new(ring: Arc<LogRing>) -> RingLayer {
        RingLayer { ring }
    }
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for RingLayer {
    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let mut text = FieldText(format!(
            "{} {:5}",
            crate::clock::now_s(),
            event.metadata().level()
        ));
        if let Some(scope) = ctx.event_scope(event) {
            for span in scope.from_root() {
                let _ = write!(text.0, " {}", span.name());
                if let Some(f) = span
                    .extensions()
                    .get::<tracing_subscriber::fmt::FormattedFields<
                        tracing_subscriber::fmt::format::DefaultFields,
                    >>()
                {
                    let _ = write!(text.0, "{{{f}}}");
                }
            }
        }
        event.record(&mut text);
        self.ring.push(text.0);
    }
}

/// Installs the global subscriber: fmt to stderr (filter from `LOCKD_LOG`, default info)
/// plus the LOG_DUMP ring. Returns false if a subscriber was already installed.
pub fn init(ring: Arc<LogRing>) -> bool {
    let filter = tracing_subscriber::EnvFilter::try_from_env("LOCKD_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::registry()
        .with(filter)
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr())),
        )
        .with(RingLayer::new(ring))
        .try_init()
        .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_is_bounded() {
        let r = LogRing::default();
        for i in 0..3000 {
            r.push(format!("{i:0>1000}"));
        }
        let d = r.dump();
        assert!(d.len() <= LOG_RING_BYTES);
        assert!(d.len() > LOG_RING_BYTES - 2000);
        assert!(d.ends_with(b"2999\n"));
    }
}
