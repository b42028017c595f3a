//! What a daemon's answers say about deadlines: one snapshot from STATUS (daemon,
//! clients, lockspaces, resources), GET_HOSTS (host states) and HOST_STATUS (other hosts'
//! io_timeout and when we last saw them renew), and the fencing timeline computed with
//! lease-core's timeout formulas. Used by `lockd status` and `lockd explain`; works
//! against lockd and sanlock daemons alike (both answer these commands the same way;
//! fields a daemon does not report are `None`).

use std::collections::BTreeMap;

use anyhow::{Context, Result};
use client_lib::proto::{
    SANLK_RES_SHARED, SANLK_STATE_CLIENT, SANLK_STATE_DAEMON, SANLK_STATE_HOST,
    SANLK_STATE_LOCKSPACE, SANLK_STATE_RESOURCE,
};
use client_lib::StateRecord;
use disk_format::Name;
use lease_core::timeouts;
use serde::Serialize;

use super::lockspace::host_state_name;
use super::ConnArgs;

/// `key=value` pairs of a STATUS detail string.
pub fn details(text: &str) -> BTreeMap<&str, &str> {
    text.split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .collect()
}

fn num(d: &BTreeMap<&str, &str>, key: &str) -> Option<u64> {
    d.get(key).and_then(|v| v.parse().ok())
}

#[derive(Debug, Clone, Serialize)]
pub struct DaemonInfo {
    pub host_name: String,
    /// The daemon's monotonic clock (s) when it answered; every `*_mono` is on it.
    pub monotime: Option<u64>,
    pub io_timeout: Option<u64>,
    pub watchdog_fire_timeout: u64,
    pub kill_grace_seconds: u64,
    pub use_watchdog: bool,
    /// `version_str` of the daemon record: `lockd-X.Y.Z` from lockd, sanlock's own version
    /// from sanlock (which answers none of lockd's extension commands).
    #[serde(skip)]
    pub version: Option<String>,
}

impl DaemonInfo {
    /// The daemon is lockd (it answers lockd's extension commands, metrics among them).
    pub fn is_lockd(&self) -> bool {
        self.version
            .as_deref()
            .is_some_and(|v| v.starts_with("lockd-"))
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct HostInfo {
    pub host_id: u64,
    pub state: String,
    pub io_timeout: u64,
    pub generation: u64,
    pub timestamp: u64,
    /// When we last saw its delta lease change (daemon monotime), from HOST_STATUS.
    pub last_live_mono: Option<u64>,
    pub owner_name: Option<String>,
    pub ours: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct LockspaceInfo {
    pub name: String,
    pub host_id: u64,
    pub path: String,
    pub offset: u64,
    pub io_timeout: u64,
    pub renewal_last_success_mono: Option<u64>,
    pub space_dead: bool,
    /// False while the daemon cannot tell host states yet (GET_HOSTS -EAGAIN).
    pub hosts_known: bool,
    pub hosts: Vec<HostInfo>,
}

#[derive(Debug, Clone, Serialize)]
pub struct LeaseInfo {
    pub lockspace: String,
    pub resource: String,
    pub pid: i32,
    pub holder: String,
    pub mode: &'static str,
    pub lver: u64,
    /// When it was acquired (daemon monotime; lockd's `acquired=` detail, not sanlock's).
    pub acquired_mono: Option<u64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ClientInfo {
    pub pid: i32,
    pub name: String,
    pub leases: usize,
    /// `LOCKSPACE:NAME` of the lease this client is waiting for: its last acquire was
    /// refused because another holder has it (lockd's `waiting=` detail, not sanlock's).
    pub waiting: Option<String>,
    /// Seconds it has been waiting (from the daemon's monotonic clock).
    pub waiting_s: Option<u64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Snapshot {
    pub daemon: DaemonInfo,
    pub lockspaces: Vec<LockspaceInfo>,
    pub leases: Vec<LeaseInfo>,
    pub clients: Vec<ClientInfo>,
}

/// Reads one snapshot (several connections: STATUS and HOST_STATUS close after replying).
pub fn snapshot(conn: &ConnArgs, wait_hosts: bool) -> Result<Snapshot> {
    let records: Vec<StateRecord> = conn.connect()?.status(4).context("STATUS")?;
    let mut daemon = DaemonInfo {
        host_name: String::new(),
        monotime: None,
        io_timeout: None,
        watchdog_fire_timeout: timeouts::DEFAULT_WATCHDOG_FIRE_TIMEOUT,
        kill_grace_seconds: timeouts::DEFAULT_KILL_GRACE,
        use_watchdog: true,
        version: None,
    };
    let mut lockspaces = Vec::new();
    let mut leases = Vec::new();
    let mut clients = Vec::new();
    for r in &records {
        let d = details(&r.text);
        match r.state.kind {
            SANLK_STATE_DAEMON => {
                daemon.host_name = d
                    .get("our_host_name")
                    .map_or_else(|| r.state.name.to_text(), |s| s.to_string());
                daemon.monotime = num(&d, "monotime");
                daemon.io_timeout = num(&d, "io_timeout");
                if let Some(w) = num(&d, "watchdog_fire_timeout") {
                    daemon.watchdog_fire_timeout = w;
                }
                if let Some(g) = num(&d, "kill_grace_seconds") {
                    daemon.kill_grace_seconds = g;
                }
                daemon.use_watchdog = num(&d, "use_watchdog") != Some(0);
                daemon.version = d.get("version_str").map(|v| v.to_string());
            }
            SANLK_STATE_CLIENT => {
                let pid = r.state.data32 as i32;
                if pid > 0 {
                    clients.push(ClientInfo {
                        pid,
                        name: r.state.name.to_text(),
                        leases: 0,
                        waiting: d.get("waiting").map(|s| s.to_string()),
                        waiting_s: num(&d, "waiting_since").map(|since| {
                            daemon.monotime.map_or(0, |now| now.saturating_sub(since))
                        }),
                    });
                }
            }
            SANLK_STATE_LOCKSPACE => {
                let Some(ls) = &r.lockspace else { continue };
                lockspaces.push(LockspaceInfo {
                    name: ls.name.to_text(),
                    host_id: ls.host_id,
                    path: ls.host_id_disk.path.to_text(),
                    offset: ls.host_id_disk.offset,
                    io_timeout: num(&d, "io_timeout")
                        .or(daemon.io_timeout)
                        .unwrap_or(timeouts::DEFAULT_IO_TIMEOUT),
                    renewal_last_success_mono: num(&d, "renewal_last_success"),
                    space_dead: num(&d, "space_dead").is_some_and(|v| v != 0),
                    hosts_known: false,
                    hosts: Vec::new(),
                });
            }
            SANLK_STATE_RESOURCE => {
                let Some(res) = &r.resource else { continue };
                let flags = d
                    .get("flags")
                    .and_then(|f| u32::from_str_radix(f, 16).ok())
                    .unwrap_or(res.head.flags);
                leases.push(LeaseInfo {
                    lockspace: res.head.lockspace_name.to_text(),
                    resource: res.head.name.to_text(),
                    pid: r.state.data32 as i32,
                    holder: String::new(),
                    mode: if flags & SANLK_RES_SHARED != 0 {
                        "SH"
                    } else {
                        "EX"
                    },
                    lver: res.head.lver,
                    acquired_mono: num(&d, "acquired"),
                });
            }
            _ => {}
        }
    }
    for l in &mut leases {
        if let Some(c) = clients.iter_mut().find(|c| c.pid == l.pid) {
            c.leases += 1;
            l.holder.clone_from(&c.name);
        }
    }
    for ls in &mut lockspaces {
        let name = Name::new(&ls.name).context("lockspace name from the daemon")?;
        // -EAGAIN: the daemon has not read the other hosts' records yet (right after a
        // join); `explain` waits for them, `status` shows the hosts as not known yet.
        let deadline = std::time::Instant::now()
            + std::time::Duration::from_secs(if wait_hosts { 15 } else { 0 });
        let hosts = loop {
            match conn.connect()?.get_hosts(name, 0) {
                Err(client_lib::ClientError::Result { rv }) if rv == -libc::EAGAIN => {
                    if std::time::Instant::now() >= deadline {
                        break None;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(200));
                }
                r => break Some(r.with_context(|| format!("GET_HOSTS {}", ls.name))?),
            }
        };
        ls.hosts_known = hosts.is_some();
        let hosts = hosts.unwrap_or_default();
        let hs = conn.connect()?.host_status(name).unwrap_or_default();
        for h in hosts {
            let rec = hs.iter().find(|r| {
                r.state.kind == SANLK_STATE_HOST && u64::from(r.state.data32) == h.host_id
            });
            let d = rec.map(|r| details(&r.text)).unwrap_or_default();
            let ours = h.host_id == ls.host_id;
            // GET_HOSTS answers LIVE for our own host whatever our lease's state, as
            // sanlock does (lvmlockd counts on it); in a failed lockspace our delta lease
            // is lost, so status shows it as FAIL, as other hosts will soon see it.
            let state = if ours && ls.space_dead {
                "FAIL"
            } else {
                host_state_name(h.flags)
            };
            ls.hosts.push(HostInfo {
                host_id: h.host_id,
                state: state.to_string(),
                io_timeout: if h.io_timeout != 0 {
                    u64::from(h.io_timeout)
                } else {
                    num(&d, "io_timeout").unwrap_or(ls.io_timeout)
                },
                generation: h.generation,
                timestamp: h.timestamp,
                last_live_mono: num(&d, "last_live").filter(|v| *v != 0),
                owner_name: d.get("owner_name").map(|s| s.to_string()),
                ours,
            });
        }
    }
    Ok(Snapshot {
        daemon,
        lockspaces,
        leases,
        clients,
    })
}

/// The fencing timeline of one host, in seconds after its last successful renewal,
/// from lease-core's formulas (D = that host's io_timeout, W = watchdog fire timeout).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Timeline {
    pub io_timeout: u64,
    pub watchdog_fire_timeout: u64,
    pub kill_grace_seconds: u64,
    /// 2D.
    pub renew_every_s: u64,
    /// 6D.
    pub warn_at_s: u64,
    /// 8D: the lockspace fails, recovery (killpath or SIGTERM) starts.
    pub renewal_fails_at_s: u64,
    /// 8D + kill_grace: SIGKILL to holders still alive.
    pub kill_escalation_at_s: u64,
    /// Earliest reset: wdmd stops petting one test interval before the expiry 8D, the
    /// device fires W later (8D − test_interval(W) + W). `None` with the watchdog off.
    pub watchdog_fires_at_s: Option<u64>,
    /// host_dead = 8D + W: other hosts may take this host's leases.
    pub others_may_take_at_s: u64,
}

impl Timeline {
    pub fn new(io_timeout: u64, watchdog_fire: u64, kill_grace: u64, watchdog: bool) -> Timeline {
        let fail = timeouts::id_renewal_fail_seconds(io_timeout);
        Timeline {
            io_timeout,
            watchdog_fire_timeout: watchdog_fire,
            kill_grace_seconds: kill_grace,
            renew_every_s: timeouts::id_renewal_seconds(io_timeout),
            warn_at_s: timeouts::id_renewal_warn_seconds(io_timeout),
            renewal_fails_at_s: fail,
            kill_escalation_at_s: fail + kill_grace,
            watchdog_fires_at_s: watchdog.then(|| {
                (fail + watchdog_fire).saturating_sub(timeouts::wdmd_test_interval(watchdog_fire))
            }),
            others_may_take_at_s: timeouts::host_dead_seconds(io_timeout, watchdog_fire),
        }
    }

    /// (json key, label, offset) for each event, in time order.
    pub fn events(&self) -> Vec<(&'static str, &'static str, Option<u64>)> {
        vec![
            ("renew_every", "renew every", Some(self.renew_every_s)),
            ("warn_at", "warn at", Some(self.warn_at_s)),
            (
                "renewal_fails_at",
                "renewal fails at (killpath/SIGTERM)",
                Some(self.renewal_fails_at_s),
            ),
            (
                "kill_escalation_at",
                "kill escalation at (SIGKILL)",
                Some(self.kill_escalation_at_s),
            ),
            (
                "watchdog_fires_at",
                "watchdog fires at",
                self.watchdog_fires_at_s,
            ),
            (
                "others_may_take_at",
                "others may take the leases at",
                Some(self.others_may_take_at_s),
            ),
        ]
    }
}

/// Seconds from `now` until `anchor + offset` (negative: already past).
pub fn until(anchor: u64, offset: u64, now: u64) -> i64 {
    let at = i64::try_from(anchor.saturating_add(offset)).unwrap_or(i64::MAX);
    at.saturating_sub(i64::try_from(now).unwrap_or(i64::MAX))
}

/// Wall-clock time (UTC, RFC 3339) `secs_from_now` seconds from now.
pub fn wall_clock(secs_from_now: i64) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let t = i64::try_from(now)
        .unwrap_or(0)
        .saturating_add(secs_from_now);
    format!("{}Z", crate::civil::utc_seconds(t))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeline_defaults_match_fencing_doc() {
        // docs/fencing.md: D = 10, W = 60: warning T+60, recovery T+80, SIGKILL T+120,
        // watchdog from T+130, takeover T+140.
        let t = Timeline::new(10, 60, 40, true);
        assert_eq!(
            (
                t.renew_every_s,
                t.warn_at_s,
                t.renewal_fails_at_s,
                t.kill_escalation_at_s,
                t.watchdog_fires_at_s,
                t.others_may_take_at_s
            ),
            (20, 60, 80, 120, Some(130), 140)
        );
        // The test bed: D = 1, W = 5: recovery T+8, takeover T+13.
        let t = Timeline::new(1, 5, 2, false);
        assert_eq!((t.renewal_fails_at_s, t.watchdog_fires_at_s), (8, None));
        assert_eq!(t.others_may_take_at_s, 13);
    }

    #[test]
    fn details_and_clock() {
        let d = details("a=1 b=x io_timeout=10 junk");
        assert_eq!(num(&d, "io_timeout"), Some(10));
        assert_eq!(num(&d, "b"), None);
        assert_eq!(until(100, 8, 105), 3);
        assert_eq!(until(100, 8, 110), -2);
        assert_eq!(wall_clock(0).len(), 20);
    }
}
