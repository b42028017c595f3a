//! The mutual-exclusion witness: every lease holder in the system tests appends what it
//! does to one shared log, and [`check`] proves from that log alone that no two holders
//! of a resource overlapped and that lease versions only grew.
//!
//! Log lines are `key=value` pairs, one event per `write(2)` with O_APPEND (atomic on a
//! local filesystem): `t_ns` (CLOCK_REALTIME, unaffected by time namespaces), `host`,
//! `pid`, `res`, `event` (`start`, `alive`, `end`, or a note such as `killpath`,
//! `sigterm`), and `lver` on `start`.
//!
//! A holder's interval runs from its `start` to its last sign of life (`end` or the last
//! `alive`). A holder killed without warning leaves no `end`, so its true end lies after
//! its last heartbeat: an overlap is reported only when a later holder *started before* an
//! earlier one's last sign of life — a certain violation, never a guess.

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::io::Write;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

/// Nanoseconds of CLOCK_REALTIME.
pub fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

/// Appends one event line.
pub fn append(log: &Path, host: &str, res: &str, event: &str, extra: &str) -> std::io::Result<()> {
    let line = format!(
        "t_ns={} host={host} pid={} res={res} event={event}{}{extra}\n",
        now_ns(),
        std::process::id(),
        if extra.is_empty() { "" } else { " " }
    );
    let mut f = OpenOptions::new().create(true).append(true).open(log)?;
    f.write_all(line.as_bytes())
}

/// One parsed log line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub t_ns: u128,
    pub host: String,
    pub pid: u32,
    pub res: String,
    pub event: String,
    pub lver: Option<u64>,
}

/// Parses a log; malformed lines are returned as errors with their line number.
pub fn parse(text: &str) -> Result<Vec<Event>, String> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let kv: BTreeMap<&str, &str> = line
            .split_whitespace()
            .filter_map(|w| w.split_once('='))
            .collect();
        let field = |k: &str| {
            kv.get(k)
                .copied()
                .ok_or_else(|| format!("line {}: missing {k}: {line:?}", i + 1))
        };
        out.push(Event {
            t_ns: field("t_ns")?
                .parse()
                .map_err(|_| format!("line {}: bad t_ns", i + 1))?,
            host: field("host")?.to_string(),
            pid: field("pid")?
                .parse()
                .map_err(|_| format!("line {}: bad pid", i + 1))?,
            res: field("res")?.to_string(),
            event: field("event")?.to_string(),
            lver: kv.get("lver").and_then(|v| v.parse().ok()),
        });
    }
    Ok(out)
}

/// One holder's tenure of one resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tenure {
    pub host: String,
    pub pid: u32,
    pub res: String,
    pub lver: u64,
    pub start_ns: u128,
    pub last_alive_ns: u128,
    pub ended_cleanly: bool,
}

/// The verdict over a whole log.
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub tenures: Vec<Tenure>,
    pub overlaps: Vec<String>,
    pub lver_violations: Vec<String>,
}

impl Report {
    pub fn ok(&self) -> bool {
        self.overlaps.is_empty() && self.lver_violations.is_empty()
    }
}

/// Builds tenures and checks mutual exclusion and lver growth per resource.
pub fn check(events: &[Event]) -> Report {
    let mut by_key: BTreeMap<(String, String, u32), Tenure> = BTreeMap::new();
    let mut order: Vec<(String, String, u32)> = Vec::new();
    for e in events {
        let key = (e.res.clone(), e.host.clone(), e.pid);
        match e.event.as_str() {
            "start" => {
                order.push(key.clone());
                by_key.insert(
                    key,
                    Tenure {
                        host: e.host.clone(),
                        pid: e.pid,
                        res: e.res.clone(),
                        lver: e.lver.unwrap_or(0),
                        start_ns: e.t_ns,
                        last_alive_ns: e.t_ns,
                        ended_cleanly: false,
                    },
                );
            }
            "alive" | "end" => {
                if let Some(t) = by_key.get_mut(&key) {
                    t.last_alive_ns = t.last_alive_ns.max(e.t_ns);
                    if e.event == "end" {
                        t.ended_cleanly = true;
                    }
                }
            }
            _ => {}
        }
    }
    let mut report = Report::default();
    let mut per_res: BTreeMap<String, Vec<Tenure>> = BTreeMap::new();
    for key in order {
        if let Some(t) = by_key.get(&key) {
            per_res.entry(t.res.clone()).or_default().push(t.clone());
        }
    }
    for (res, mut list) in per_res {
        list.sort_by_key(|t| t.start_ns);
        for (i, a) in list.iter().enumerate() {
            for b in &list[i + 1..] {
                if b.start_ns < a.last_alive_ns {
                    report.overlaps.push(format!(
                        "{res}: {}/{} (lver {}) started {:.3}s before {}/{} (lver {}) was last seen holding",
                        b.host,
                        b.pid,
                        b.lver,
                        (a.last_alive_ns - b.start_ns) as f64 / 1e9,
                        a.host,
                        a.pid,
                        a.lver
                    ));
                }
            }
            if i > 0 {
                let prev = &list[i - 1];
                if a.lver <= prev.lver {
                    report.lver_violations.push(format!(
                        "{res}: lver {} of {}/{} does not exceed lver {} of the previous holder {}/{}",
                        a.lver, a.host, a.pid, prev.lver, prev.host, prev.pid
                    ));
                }
            }
        }
        report.tenures.extend(list);
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(t: u128, host: &str, pid: u32, event: &str, lver: Option<u64>) -> Event {
        Event {
            t_ns: t,
            host: host.into(),
            pid,
            res: "r".into(),
            event: event.into(),
            lver,
        }
    }

    #[test]
    fn clean_handover_passes() {
        let log = vec![
            ev(10, "h1", 1, "start", Some(1)),
            ev(20, "h1", 1, "alive", None),
            ev(30, "h1", 1, "end", None),
            ev(40, "h2", 2, "start", Some(2)),
            ev(50, "h2", 2, "alive", None),
        ];
        let r = check(&log);
        assert!(r.ok(), "{r:?}");
        assert_eq!(r.tenures.len(), 2);
        assert!(r.tenures[0].ended_cleanly);
    }

    #[test]
    fn overlap_is_caught() {
        let log = vec![
            ev(10, "h1", 1, "start", Some(1)),
            ev(45, "h2", 2, "start", Some(2)),
            ev(50, "h1", 1, "alive", None),
        ];
        let r = check(&log);
        assert_eq!(r.overlaps.len(), 1, "{r:?}");
    }

    #[test]
    fn lver_must_grow() {
        let log = vec![
            ev(10, "h1", 1, "start", Some(3)),
            ev(20, "h1", 1, "end", None),
            ev(30, "h2", 2, "start", Some(3)),
        ];
        let r = check(&log);
        assert!(r.overlaps.is_empty());
        assert_eq!(r.lver_violations.len(), 1);
    }

    #[test]
    fn round_trip_through_text() {
        let dir = crate::scratch_dir();
        let log = dir.path().join("w.log");
        append(&log, "h1", "vm1", "start", "lver=4").unwrap();
        append(&log, "h1", "vm1", "alive", "").unwrap();
        let events = parse(&std::fs::read_to_string(&log).unwrap()).unwrap();
        assert_eq!(events.len(), 2);
        assert_eq!(events[0].lver, Some(4));
        assert_eq!(events[1].event, "alive");
        assert!(parse("t_ns=1 host=h pid=x res=r event=start").is_err());
    }
}
