//! systemd notification through the `sd-notify` crate.
//!
//! * `READY=1` once `sanlock.sock` is listening ([`Notifier::ready`]);
//! * `STATUS=` lines saying what the daemon is doing ("2 lockspaces, 3 leases, 1 client;
//!   watchdog on"), sent again whenever the core's tick says it changed
//!   (`Effect::Status`, carried out by the monitor with [`Notifier::status_if_changed`]),
//!   plus one-off lines such as "joined lockspace X". The core sends a summary only when
//!   it changed; READY=1's own line is the one the core may not know was sent, so the
//!   first summary after READY=1 is dropped when it says the same;
//! * `WATCHDOG=1` keep-alives from the monitor loop every half of `WATCHDOG_USEC` when the
//!   service manager asked for them (`WatchdogSec=`, see [`Notifier::watchdog_interval`]);
//! * `STOPPING=1` at shutdown.
//!
//! Nothing is sent when `NOTIFY_SOCKET` is not set; send errors are logged, never fatal.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use sd_notify::NotifyState;

/// What the daemon is doing, for `STATUS=`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Summary {
    pub lockspaces: usize,
    pub leases: usize,
    pub clients: usize,
    pub watchdog: bool,
}

impl Summary {
    /// The core's summary ([`lockd_core::StatusSummary`]) with the watchdog setting.
    pub fn of(status: lockd_core::StatusSummary, watchdog: bool) -> Summary {
        Summary {
            lockspaces: status.lockspaces,
            leases: status.leases,
            clients: status.clients,
            watchdog,
        }
    }
}

fn plural(n: usize, one: &str) -> String {
    if n == 1 {
        format!("{n} {one}")
    } else {
        format!("{n} {one}s")
    }
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}, {}, {}; watchdog {}",
            plural(self.lockspaces, "lockspace"),
            plural(self.leases, "lease"),
            plural(self.clients, "client"),
            if self.watchdog { "on" } else { "off (-w 0)" }
        )
    }
}

/// A notifier; does nothing when `NOTIFY_SOCKET` was not set.
pub struct Notifier {
    enabled: bool,
    /// `WATCHDOG_USEC` when set for this process (`WATCHDOG_PID` unset or ours).
    watchdog: Option<Duration>,
    /// READY=1's status line, set once when it went out; STATUS= lines are held back
    /// until it has.
    ready_status: OnceLock<String>,
    /// The first summary after READY=1 was looked at (dropped if it repeated READY's).
    first_summary_seen: AtomicBool,
}

impl Notifier {
    /// Reads `NOTIFY_SOCKET`, `WATCHDOG_USEC` and `WATCHDOG_PID`. Call it in the process
    /// that will send (after daemonizing), as `WATCHDOG_PID` must name that process.
    pub fn from_env() -> Notifier {
        let enabled = std::env::var_os("NOTIFY_SOCKET").is_some_and(|s| !s.is_empty());
        let watchdog = sd_notify::watchdog_enabled().filter(|d| !d.is_zero());
        Notifier {
            enabled,
            watchdog: if enabled { watchdog } else { None },
            ready_status: OnceLock::new(),
            first_summary_seen: AtomicBool::new(false),
        }
    }

    fn send(&self, states: &[NotifyState]) {
        if !self.enabled {
            return;
        }
        if let Err(e) = sd_notify::notify(states) {
            tracing::warn!(error = %e, "sd_notify failed");
        }
    }

    /// `READY=1` with a first status line.
    pub fn ready(&self, status: &str) {
        self.send(&[NotifyState::Ready, NotifyState::Status(status)]);
        let _ = self.ready_status.set(status.to_string());
    }

    /// STATUS= lines wait for READY=1: the service manager's first message is READY.
    fn is_ready(&self) -> bool {
        self.ready_status.get().is_some()
    }

    /// A one-off `STATUS=` line (e.g. a join); the next summary change replaces it.
    pub fn status(&self, status: &str) {
        if !self.is_ready() {
            return;
        }
        self.send(&[NotifyState::Status(status)]);
    }

    /// Sends `STATUS=` with `summary`, a change the core saw (`Effect::Status`), unless it
    /// is the first after READY=1 and repeats READY's line.
    pub fn status_if_changed(&self, summary: &Summary) {
        let Some(ready_status) = self.ready_status.get() else {
            return;
        };
        let text = summary.to_string();
        if !self.first_summary_seen.swap(true, Ordering::SeqCst) && *ready_status == text {
            return;
        }
        self.send(&[NotifyState::Status(&text)]);
    }

    /// `STOPPING=1` with a status line.
    pub fn stopping(&self, status: &str) {
        self.send(&[NotifyState::Stopping, NotifyState::Status(status)]);
    }

    /// How often to send `WATCHDOG=1`: half of `WATCHDOG_USEC`, as sd_watchdog_enabled(3)
    /// recommends; `None` when the service manager did not ask for keep-alives.
    pub fn watchdog_interval(&self) -> Option<Duration> {
        self.watchdog.map(|d| d / 2)
    }

    /// One `WATCHDOG=1` keep-alive (nothing when the watchdog is not enabled).
    pub fn watchdog_ping(&self) {
        if self.watchdog.is_some() {
            self.send(&[NotifyState::Watchdog]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_text() {
        let s = Summary {
            lockspaces: 3,
            leases: 1,
            clients: 0,
            watchdog: true,
        };
        assert_eq!(
            s.to_string(),
            "3 lockspaces, 1 lease, 0 clients; watchdog on"
        );
        let s = Summary {
            lockspaces: 1,
            leases: 5,
            clients: 2,
            watchdog: false,
        };
        assert_eq!(
            s.to_string(),
            "1 lockspace, 5 leases, 2 clients; watchdog off (-w 0)"
        );
    }
}
