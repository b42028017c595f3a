//! `lockd status` (a table, `--json`, or `--format sanlock`) and `lockd explain`.

use std::collections::BTreeMap;
use std::io::IsTerminal;

use anyhow::{bail, Result};
use clap::{Args, ValueEnum};
use serde_json::json;

use super::timeline::{self, until, wall_clock, Snapshot, Timeline};
use super::{print_json, ConnArgs};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StatusFormat {
    /// Tables: lockspaces with deadlines and hosts, leases, clients.
    Human,
    /// sanlock's `client status` lines (`daemon`, `p`, `s`, `r`).
    Sanlock,
}

#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// Only this lockspace (default: every joined lockspace).
    #[arg(short = 's', long = "lockspace", value_name = "NAME")]
    pub lockspace: Option<String>,
    #[command(flatten)]
    pub conn: ConnArgs,
}

/// ANSI colours, only when stdout is a terminal and NO_COLOR is not set.
struct Paint(bool);

impl Paint {
    fn detect() -> Paint {
        Paint(std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none())
    }
    fn state(&self, s: &str) -> String {
        let code = match s {
            "LIVE" => "32",
            "FAIL" => "33",
            "DEAD" => "31",
            _ => return s.to_string(),
        };
        self.wrap(code, s)
    }
    fn secs(&self, v: Option<i64>, warn_below: i64) -> String {
        match v {
            None => "-".into(),
            Some(v) if v <= 0 => self.wrap("31;1", &format!("{v}s")),
            Some(v) if v < warn_below => self.wrap("33", &format!("{v}s")),
            Some(v) => format!("{v}s"),
        }
    }
    fn wrap(&self, code: &str, s: &str) -> String {
        if self.0 {
            format!("\x1b[{code}m{s}\x1b[0m")
        } else {
            s.to_string()
        }
    }
}

/// Prints rows as left-aligned columns (widths from the text without colour codes).
fn table(head: &[&str], rows: &[Vec<String>]) {
    print!("{}", table_text(head, rows));
}

/// Rows as left-aligned columns, one line each (the head first), every line ending in
/// a newline.
fn table_text(head: &[&str], rows: &[Vec<String>]) -> String {
    fn visible(s: &str) -> usize {
        let mut n = 0;
        let mut esc = false;
        for c in s.chars() {
            match (esc, c) {
                (false, '\x1b') => esc = true,
                (true, 'm') => esc = false,
                (true, _) => {}
                _ => n += 1,
            }
        }
        n
    }
    let mut w: Vec<usize> = head.iter().map(|h| h.len()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            if i < w.len() {
                w[i] = w[i].max(visible(c));
            }
        }
    }
    let mut text = String::new();
    let mut line = |cells: Vec<String>| {
        let mut out = String::new();
        for (i, c) in cells.iter().enumerate() {
            out.push_str(c);
            if i + 1 < cells.len() {
                let pad = w.get(i).copied().unwrap_or(0);
                out.push_str(&" ".repeat(pad.saturating_sub(visible(c)) + 2));
            }
        }
        text.push_str(out.trim_end());
        text.push('\n');
    };
    line(head.iter().map(|h| h.to_string()).collect());
    for r in rows {
        line(r.clone());
    }
    text
}

fn our_timeline(s: &Snapshot, io_timeout: u64) -> Timeline {
    Timeline::new(
        io_timeout,
        s.daemon.watchdog_fire_timeout,
        s.daemon.kill_grace_seconds,
        s.daemon.use_watchdog,
    )
}

fn status_json(s: &Snapshot, fencing: &BTreeMap<String, Fencing>) -> serde_json::Value {
    let now = s.daemon.monotime;
    let lockspaces: Vec<_> = s
        .lockspaces
        .iter()
        .map(|ls| {
            let t = our_timeline(s, ls.io_timeout);
            let last = ls.renewal_last_success_mono;
            let when = |off: Option<u64>| match (last, now, off) {
                (Some(l), Some(n), Some(o)) => json!(until(l, o, n)),
                _ => serde_json::Value::Null,
            };
            let mut v = json!({
                "name": ls.name,
                "host_id": ls.host_id,
                "path": ls.path,
                "offset": ls.offset,
                "io_timeout": ls.io_timeout,
                "failed": ls.space_dead,
                "hosts_known": ls.hosts_known,
                "last_renewal_age_s": match (last, now) {
                    (Some(l), Some(n)) => json!(i64::try_from(n).unwrap_or(0) - i64::try_from(l).unwrap_or(0)),
                    _ => serde_json::Value::Null,
                },
                "renewal_fails_in_s": when(Some(t.renewal_fails_at_s)),
                "kill_escalation_in_s": when(Some(t.kill_escalation_at_s)),
                "watchdog_fires_in_s": when(t.watchdog_fires_at_s),
                "others_may_take_in_s": when(Some(t.others_may_take_at_s)),
                "hosts": ls.hosts,
            });
            if let Some(f) = fencing.get(&ls.name) {
                v["fencing"] = f.json();
            }
            v
        })
        .collect();
    json!({
        "daemon": s.daemon,
        "lockspaces": lockspaces,
        "leases": s.leases.iter().map(|l| {
            let mut v = serde_json::to_value(l).unwrap_or_default();
            v["held_for_s"] = match (l.acquired_mono, now) {
                (Some(a), Some(n)) => json!(n.saturating_sub(a)),
                _ => serde_json::Value::Null,
            };
            v
        }).collect::<Vec<_>>(),
        "clients": s.clients,
    })
}

fn status_human(s: &Snapshot, fencing: &BTreeMap<String, Fencing>) {
    let p = Paint::detect();
    let now = s.daemon.monotime;
    println!(
        "daemon {}: watchdog {}, io_timeout {}, watchdog_fire_timeout {}, kill_grace {}",
        s.daemon.host_name,
        if s.daemon.use_watchdog { "on" } else { "OFF" },
        s.daemon
            .io_timeout
            .map_or_else(|| "?".to_string(), |v| v.to_string()),
        s.daemon.watchdog_fire_timeout,
        s.daemon.kill_grace_seconds
    );
    println!();
    let rows: Vec<Vec<String>> = s
        .lockspaces
        .iter()
        .map(|ls| {
            let t = our_timeline(s, ls.io_timeout);
            let last = ls.renewal_last_success_mono;
            let when = |off: Option<u64>| match (last, now, off) {
                (Some(l), Some(n), Some(o)) => Some(until(l, o, n)),
                _ => None,
            };
            let age = match (last, now) {
                (Some(l), Some(n)) => format!("{}s ago", n.saturating_sub(l)),
                _ => "?".into(),
            };
            let hosts: Vec<String> = ls
                .hosts
                .iter()
                .map(|h| {
                    format!(
                        "{}{}:{}",
                        h.host_id,
                        if h.ours { "*" } else { "" },
                        p.state(&h.state)
                    )
                })
                .collect();
            let warn = i64::try_from(t.renewal_fails_at_s - t.warn_at_s).unwrap_or(0);
            vec![
                ls.name.clone(),
                ls.host_id.to_string(),
                ls.io_timeout.to_string(),
                if ls.space_dead {
                    p.wrap("31;1", "FAILED")
                } else {
                    age
                },
                p.secs(when(Some(t.renewal_fails_at_s)), warn),
                if t.watchdog_fires_at_s.is_some() {
                    p.secs(when(t.watchdog_fires_at_s), warn)
                } else {
                    "off".into()
                },
                if ls.hosts_known {
                    hosts.join(" ")
                } else {
                    "(not read yet)".into()
                },
            ]
        })
        .collect();
    println!("LOCKSPACES ({})", s.lockspaces.len());
    table(
        &[
            "NAME",
            "HOST_ID",
            "IO",
            "RENEWED",
            "FAILS_IN",
            "WATCHDOG_IN",
            "HOSTS (*=us)",
        ],
        &rows,
    );
    if let Some(text) = fencing_section(&p, s, fencing) {
        println!();
        print!("{text}");
    }
    println!();
    println!("LEASES ({})", s.leases.len());
    let rows: Vec<Vec<String>> = s
        .leases
        .iter()
        .map(|l| {
            vec![
                l.lockspace.clone(),
                l.resource.clone(),
                l.mode.to_string(),
                l.lver.to_string(),
                l.pid.to_string(),
                l.holder.clone(),
                match (l.acquired_mono, now) {
                    (Some(a), Some(n)) => format!("{}s", n.saturating_sub(a)),
                    _ => "-".into(),
                },
            ]
        })
        .collect();
    table(
        &[
            "LOCKSPACE",
            "RESOURCE",
            "MODE",
            "LVER",
            "PID",
            "HOLDER",
            "HELD_FOR",
        ],
        &rows,
    );
    println!();
    println!("CLIENTS ({})", s.clients.len());
    let rows: Vec<Vec<String>> = s
        .clients
        .iter()
        .map(|c| {
            vec![
                c.pid.to_string(),
                c.name.clone(),
                c.leases.to_string(),
                match (&c.waiting, c.waiting_s) {
                    (Some(w), Some(s)) => format!("{w} ({s}s)"),
                    (Some(w), None) => w.clone(),
                    _ => "-".to_string(),
                },
            ]
        })
        .collect();
    table(&["PID", "NAME", "LEASES", "WAITING_FOR"], &rows);
}

/// `lockd status` in the human or JSON form.
pub fn status(conn: &ConnArgs) -> Result<()> {
    let s = timeline::snapshot(conn, false)?;
    let fencing = fencing_of(conn, &s);
    if conn.json {
        print_json(&status_json(&s, &fencing));
    } else {
        status_human(&s, &fencing);
    }
    Ok(())
}

fn explain_host(
    t: &Timeline,
    anchor: Option<u64>,
    now: Option<u64>,
) -> (serde_json::Value, Vec<Vec<String>>) {
    let mut obj = serde_json::Map::new();
    let mut rows = Vec::new();
    obj.insert("timeline".into(), json!(t));
    for (key, label, off) in t.events() {
        let from_now = match (anchor, now, off) {
            (Some(a), Some(n), Some(o)) => Some(until(a, o, n)),
            _ => None,
        };
        obj.insert(
            key.into(),
            json!({
                "after_last_renewal_s": off,
                "in_s": from_now,
                "at": from_now.map(wall_clock),
            }),
        );
        rows.push(vec![
            label.to_string(),
            off.map_or_else(|| "- (watchdog off)".into(), |o| format!("T+{o}s")),
            from_now.map_or_else(|| "-".into(), |v| format!("{v:+}s")),
            from_now.map_or_else(|| "-".into(), wall_clock),
        ]);
    }
    (serde_json::Value::Object(obj), rows)
}

/// `lockd explain [-s LS]`.
pub fn explain(a: &ExplainArgs) -> Result<()> {
    let s = timeline::snapshot(&a.conn, true)?;
    let spaces: Vec<_> = s
        .lockspaces
        .iter()
        .filter(|ls| a.lockspace.as_deref().is_none_or(|n| n == ls.name))
        .collect();
    if spaces.is_empty() {
        match &a.lockspace {
            Some(n) => bail!("lockspace {n} is not joined"),
            None if !a.conn.json => {
                println!("no lockspace joined");
                return Ok(());
            }
            None => {}
        }
    }
    let now = s.daemon.monotime;
    let fencing = if spaces.is_empty() {
        BTreeMap::new()
    } else {
        fencing_of(&a.conn, &s)
    };
    let p = Paint::detect();
    let mut out = Vec::new();
    for ls in spaces {
        let fence = fencing.get(&ls.name);
        let ours = our_timeline(&s, ls.io_timeout);
        let (ours_json, ours_rows) = explain_host(&ours, ls.renewal_last_success_mono, now);
        let mut others = Vec::new();
        if !a.conn.json {
            println!(
                "lockspace {} (host_id {}, io_timeout {}s, watchdog_fire_timeout {}s, kill_grace {}s, watchdog {})",
                ls.name,
                ls.host_id,
                ls.io_timeout,
                s.daemon.watchdog_fire_timeout,
                s.daemon.kill_grace_seconds,
                if s.daemon.use_watchdog { "on" } else { "off" }
            );
            println!("this host: T = last renewal");
            table(&["EVENT", "AFTER T", "FROM NOW", "AT (UTC)"], &ours_rows);
            if let Some(f) = fence {
                println!();
                print!("{}", explain_fencing_text(&p, f));
            }
        }
        for h in ls.hosts.iter().filter(|h| !h.ours) {
            // Another host's watchdog and kill grace are its own; W must match on every
            // host, kill grace is assumed to be ours. T is when we last saw it renew.
            let t = Timeline::new(
                h.io_timeout,
                s.daemon.watchdog_fire_timeout,
                s.daemon.kill_grace_seconds,
                true,
            );
            let (j, rows) = explain_host(&t, h.last_live_mono, now);
            if !a.conn.json {
                println!();
                println!(
                    "host_id {} ({}{}, io_timeout {}s): T = when this host last saw it renew",
                    h.host_id,
                    h.state,
                    h.owner_name
                        .as_deref()
                        .map(|n| format!(", {n}"))
                        .unwrap_or_default(),
                    h.io_timeout
                );
                table(&["EVENT", "AFTER T", "FROM NOW", "AT (UTC)"], &rows);
            }
            let mut j = j;
            j["host_id"] = json!(h.host_id);
            j["state"] = json!(h.state);
            j["io_timeout"] = json!(h.io_timeout);
            others.push(j);
        }
        if !a.conn.json {
            println!();
        }
        let mut j = json!({
            "lockspace": ls.name,
            "host_id": ls.host_id,
            "io_timeout": ls.io_timeout,
            "watchdog_fire_timeout": s.daemon.watchdog_fire_timeout,
            "kill_grace_seconds": s.daemon.kill_grace_seconds,
            "use_watchdog": s.daemon.use_watchdog,
            "this_host": ours_json,
            "other_hosts": others,
        });
        if let Some(f) = fence {
            j["fencing"] = f.json();
        }
        out.push(j);
    }
    if a.conn.json {
        print_json(&serde_json::Value::Array(out));
    }
    Ok(())
}

// Storage fencing, from the daemon's metrics.
//
// lockd exports the fencing state of each lockspace it fences (`fence = "scsi-pr"`) as
// `lockd_fence_*` samples labelled `lockspace` (daemon/src/exporter.rs,
// `encode_fencing`); `status` and `explain` read them back from LOCKD_CMD_METRICS. A
// lockspace without fencing has no such sample and shows nothing; a sanlock daemon has
// no metrics and is not asked.

/// The storage fencing of one lockspace, as the daemon's latest fence pass saw it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Fencing {
    /// This host's registered key (`lockd_fence_key_info`); None before the join
    /// registered one, after a clean leave, or from a daemon that does not export it.
    pub our_key: Option<u64>,
    /// Keys registered on the lockspace's device (`lockd_fence_keys`).
    pub keys: u64,
    /// A reservation stands (`lockd_fence_reservation`).
    pub reservation: bool,
    /// Live hosts without a key (`lockd_fence_unkeyed_live_hosts`): while non-zero no
    /// reservation is held and nobody is fenced by the storage.
    pub unkeyed_live_hosts: u64,
    /// Peer generations this host confirmed fenced (`lockd_fence_peers_fenced_total`).
    pub peers_fenced: u64,
    /// Preempts this host began (`lockd_fence_preempts_total`).
    pub preempts: u64,
    /// Seconds since this host last began a preempt; None: never
    /// (`lockd_fence_last_preempt_age_seconds`).
    pub last_preempt_age_s: Option<u64>,
    /// This host is fenced (`lockd_fence_fenced_here`); None from a daemon that does not
    /// export it.
    pub fenced_here: Option<bool>,
}

impl Fencing {
    /// The key as lvmlockd and `lockd direct pr` print it.
    fn key_text(&self) -> Option<String> {
        self.our_key.map(|k| format!("0x{k:x}"))
    }

    /// What needs an operator's eye, one sentence each.
    fn warnings(&self) -> Vec<String> {
        let mut w = Vec::new();
        if self.fenced_here == Some(true) {
            w.push(
                "this host is fenced: its key is gone or the storage refused it; the \
                 lockspace fails and its holders lose their leases"
                    .to_string(),
            );
        }
        if self.unkeyed_live_hosts > 0 {
            w.push(format!(
                "{} live host{} without a key: no reservation is held and no host is fenced \
                 by the storage (takeover waits host_dead)",
                self.unkeyed_live_hosts,
                if self.unkeyed_live_hosts == 1 {
                    ""
                } else {
                    "s"
                }
            ));
        } else if !self.reservation && self.fenced_here != Some(true) {
            w.push(
                "no reservation stands: a failed host cannot be fenced (takeover waits \
                 host_dead)"
                    .to_string(),
            );
        }
        w
    }

    fn json(&self) -> serde_json::Value {
        json!({
            "our_key": self.key_text(),
            "keys": self.keys,
            "reservation": self.reservation,
            "unkeyed_live_hosts": self.unkeyed_live_hosts,
            "peers_fenced": self.peers_fenced,
            "preempts": self.preempts,
            "last_preempt_age_s": self.last_preempt_age_s,
            "fenced_here": self.fenced_here,
            "warnings": self.warnings(),
        })
    }
}

/// The `lockd_fence_*` families read back, in the order of [`FenceSlots`].
const FENCE_FAMILIES: [&str; 8] = [
    "lockd_fence_keys",
    "lockd_fence_reservation",
    "lockd_fence_unkeyed_live_hosts",
    "lockd_fence_preempts_total",
    "lockd_fence_peers_fenced_total",
    "lockd_fence_last_preempt_age_seconds",
    "lockd_fence_key_info",
    "lockd_fence_fenced_here",
];
/// The first five are exported for every fenced lockspace: one missing drops it.
const FENCE_REQUIRED: usize = 5;
/// Indexes into [`FENCE_FAMILIES`].
const KEYS: usize = 0;
const RESERVATION: usize = 1;
const UNKEYED: usize = 2;
const PREEMPTS: usize = 3;
const PEERS_FENCED: usize = 4;
const LAST_PREEMPT_AGE: usize = 5;
const KEY_INFO: usize = 6;
const FENCED_HERE: usize = 7;

/// One lockspace's samples as read: a value per family, or `bad` once a line of it
/// could not be read or came twice.
#[derive(Debug, Default)]
struct FenceSlots {
    values: [Option<u64>; FENCE_FAMILIES.len()],
    bad: bool,
}

/// The fencing of each lockspace in a Prometheus text exposition. Never panics: a
/// lockspace with a malformed or repeated `lockd_fence_*` line, or one missing a family
/// every fenced lockspace has, is left out; a malformed line that names no lockspace
/// that can be read leaves out every lockspace (it could be any one's). Other metrics
/// are not looked at.
pub fn parse_fencing(text: &str) -> BTreeMap<String, Fencing> {
    let mut spaces: BTreeMap<String, FenceSlots> = BTreeMap::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let name_end = line
            .find(|c: char| c == '{' || c.is_whitespace())
            .unwrap_or(line.len());
        let Some(family) = FENCE_FAMILIES.iter().position(|f| *f == &line[..name_end]) else {
            continue;
        };
        let Some((labels, rest)) = parse_labels(&line[name_end..]) else {
            return BTreeMap::new();
        };
        let Some(ls) = labels
            .iter()
            .find(|(k, _)| k == "lockspace")
            .map(|(_, v)| v.clone())
        else {
            return BTreeMap::new();
        };
        let slots = spaces.entry(ls).or_default();
        let value = parse_value(rest).and_then(|v| match family {
            // 0/1 gauges.
            RESERVATION | FENCED_HERE => (v <= 1).then_some(v),
            // An info metric: always 1, the key is the label.
            KEY_INFO => labels
                .iter()
                .find(|(k, _)| k == "key")
                .and_then(|(_, k)| k.strip_prefix("0x"))
                .and_then(|k| u64::from_str_radix(k, 16).ok())
                .filter(|_| v == 1),
            _ => Some(v),
        });
        match value {
            Some(v) if slots.values[family].is_none() => slots.values[family] = Some(v),
            _ => slots.bad = true,
        }
    }
    spaces
        .into_iter()
        .filter(|(_, s)| !s.bad && s.values[..FENCE_REQUIRED].iter().all(Option::is_some))
        .map(|(ls, s)| {
            let v = |i: usize| s.values[i].unwrap_or(0);
            let f = Fencing {
                keys: v(KEYS),
                reservation: v(RESERVATION) == 1,
                unkeyed_live_hosts: v(UNKEYED),
                preempts: v(PREEMPTS),
                peers_fenced: v(PEERS_FENCED),
                last_preempt_age_s: s.values[LAST_PREEMPT_AGE],
                our_key: s.values[KEY_INFO].filter(|k| *k != 0),
                fenced_here: s.values[FENCED_HERE].map(|x| x == 1),
            };
            (ls, f)
        })
        .collect()
}

/// The label set at the start of `s` (`{name="value",…}`, Prometheus escapes `\\`, `\"`,
/// `\n`; blanks around tokens), and the rest of `s`; no set: no labels. None when
/// malformed.
fn parse_labels(s: &str) -> Option<(Vec<(String, String)>, &str)> {
    let Some(mut rest) = s.trim_start().strip_prefix('{') else {
        return Some((Vec::new(), s));
    };
    let mut out: Vec<(String, String)> = Vec::new();
    loop {
        rest = rest.trim_start();
        if let Some(r) = rest.strip_prefix('}') {
            return Some((out, r));
        }
        let eq = rest.find('=')?;
        let name = rest[..eq].trim();
        let name_ok = name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !name_ok || out.iter().any(|(n, _)| n == name) {
            return None;
        }
        rest = rest[eq + 1..].trim_start().strip_prefix('"')?;
        let mut value = String::new();
        let mut chars = rest.char_indices();
        let end = loop {
            let (i, c) = chars.next()?;
            match c {
                '"' => break i,
                '\\' => match chars.next()?.1 {
                    '\\' => value.push('\\'),
                    '"' => value.push('"'),
                    'n' => value.push('\n'),
                    _ => return None,
                },
                c => value.push(c),
            }
        };
        out.push((name.to_string(), value));
        // `end` is the closing quote's byte index: one byte.
        rest = rest[end + 1..].trim_start();
        if let Some(r) = rest.strip_prefix(',') {
            rest = r;
        } else if !rest.starts_with('}') {
            return None;
        }
    }
}

/// A sample's value after its name and labels (an optional timestamp after it), as a
/// whole non-negative number. None when malformed.
fn parse_value(s: &str) -> Option<u64> {
    let mut parts = s.split_whitespace();
    let v = parts.next()?;
    if let Some(ts) = parts.next() {
        ts.parse::<i64>().ok()?;
    }
    if parts.next().is_some() {
        return None;
    }
    v.parse::<u64>().ok().or_else(|| {
        // Integral floats ("3.0", "1e3"), as other encoders may write them.
        let f: f64 = v.parse().ok()?;
        (f.is_finite() && f >= 0.0 && f.fract() == 0.0 && f < 9_007_199_254_740_992.0)
            .then_some(f as u64)
    })
}

/// The fencing of the daemon's fenced lockspaces. Empty against a sanlock daemon (not
/// asked: it ignores lockd's extension commands, and the question would wait for the
/// reply timeout), when no lockspace is joined, and when the metrics cannot be had or
/// read: fencing is extra information, never a reason for status or explain to fail.
fn fencing_of(conn: &ConnArgs, s: &Snapshot) -> BTreeMap<String, Fencing> {
    if !s.daemon.is_lockd() || s.lockspaces.is_empty() {
        return BTreeMap::new();
    }
    client_lib::lease::metrics(&conn.run_dir())
        .map(|text| parse_fencing(&text))
        .unwrap_or_default()
}

/// `lockd status`'s FENCING table and warnings, for the listed lockspaces that are
/// fenced; None when none is.
fn fencing_section(p: &Paint, s: &Snapshot, fencing: &BTreeMap<String, Fencing>) -> Option<String> {
    let fenced: Vec<(&str, &Fencing)> = s
        .lockspaces
        .iter()
        .filter_map(|ls| fencing.get(&ls.name).map(|f| (ls.name.as_str(), f)))
        .collect();
    if fenced.is_empty() {
        return None;
    }
    let rows: Vec<Vec<String>> = fenced
        .iter()
        .map(|(name, f)| {
            vec![
                (*name).to_string(),
                f.key_text().unwrap_or_else(|| "-".into()),
                f.keys.to_string(),
                if f.reservation {
                    "yes".into()
                } else {
                    p.wrap("33", "no")
                },
                if f.unkeyed_live_hosts > 0 {
                    p.wrap("33", &f.unkeyed_live_hosts.to_string())
                } else {
                    "0".into()
                },
                f.peers_fenced.to_string(),
                f.preempts.to_string(),
                f.last_preempt_age_s
                    .map_or_else(|| "never".into(), |a| format!("{a}s ago")),
                match f.fenced_here {
                    Some(true) => p.wrap("31;1", "FENCED"),
                    Some(false) => "ok".into(),
                    None => "?".into(),
                },
            ]
        })
        .collect();
    let mut text = format!("FENCING ({})\n", fenced.len());
    text.push_str(&table_text(
        &[
            "LOCKSPACE",
            "OUR_KEY",
            "KEYS",
            "RESERVED",
            "UNKEYED_LIVE",
            "PEERS_FENCED",
            "PREEMPTS",
            "LAST_PREEMPT",
            "THIS_HOST",
        ],
        &rows,
    ));
    for (name, f) in &fenced {
        for w in f.warnings() {
            text.push_str(&format!("{}: {name}: {w}\n", p.wrap("33", "warning")));
        }
    }
    Some(text)
}

/// `lockd explain`'s storage fencing block for one lockspace.
fn explain_fencing_text(p: &Paint, f: &Fencing) -> String {
    let rows = vec![
        vec![
            "this host's key".to_string(),
            f.key_text().unwrap_or_else(|| "- (none registered)".into()),
        ],
        vec![
            "this host fenced".to_string(),
            match f.fenced_here {
                Some(true) => p.wrap("31;1", "YES"),
                Some(false) => "no".into(),
                None => "? (not exported by this daemon)".into(),
            },
        ],
        vec!["keys registered".to_string(), f.keys.to_string()],
        vec![
            "reservation".to_string(),
            if f.reservation {
                "stands".into()
            } else {
                p.wrap("33", "none")
            },
        ],
        vec![
            "live hosts without a key".to_string(),
            if f.unkeyed_live_hosts > 0 {
                p.wrap("33", &f.unkeyed_live_hosts.to_string())
            } else {
                "0".into()
            },
        ],
        vec!["peers fenced".to_string(), f.peers_fenced.to_string()],
        vec!["preempts begun".to_string(), f.preempts.to_string()],
        vec![
            "last preempt".to_string(),
            f.last_preempt_age_s
                .map_or_else(|| "never".into(), |a| format!("{a}s ago")),
        ],
    ];
    let mut text = table_text(&["STORAGE FENCING (scsi-pr)", "AT THE LATEST PASS"], &rows);
    text.push_str(
        "a survivor preempts a host whose delta lease stood still for fence_preempt_s \
         (default 8·D) and may take its leases then, before \"others may take the leases at\"\n",
    );
    for w in f.warnings() {
        text.push_str(&format!("{}: {w}\n", p.wrap("33", "warning")));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::timeline::{DaemonInfo, HostInfo, LockspaceInfo};
    use lockd_daemon::exporter::{encode_fencing, FenceView};
    use lockd_daemon::metrics::Encoder;

    /// What the exporter writes for two fenced lockspaces (`encode_fencing` at monotime
    /// 1000): vg1 with its key, a reservation, one peer fenced after two preempts, the
    /// last begun 35 s before; vg2 fenced here, no reservation, one live host unkeyed,
    /// no key of ours any more, never preempted.
    const SAMPLE: &str = "\
# HELP lockd_lockspace_joined 1 when the lockspace is joined and alive, 0 while joining, failed or leaving.
# TYPE lockd_lockspace_joined gauge
lockd_lockspace_joined{lockspace=\"vg1\"} 1
lockd_lockspace_joined{lockspace=\"vg2\"} 1
lockd_lockspace_joined{lockspace=\"plain\"} 1
# HELP lockd_fence_keys Storage fencing (scsi-pr): keys registered on the lockspace's device at the latest pass.
# TYPE lockd_fence_keys gauge
lockd_fence_keys{lockspace=\"vg1\"} 2
lockd_fence_keys{lockspace=\"vg2\"} 1
# HELP lockd_fence_reservation Storage fencing: 1 when a reservation stood on the lockspace's device at the latest pass (fencing can act), 0 when none did.
# TYPE lockd_fence_reservation gauge
lockd_fence_reservation{lockspace=\"vg1\"} 1
lockd_fence_reservation{lockspace=\"vg2\"} 0
# HELP lockd_fence_unkeyed_live_hosts Storage fencing: live hosts without a key at the latest pass; while non-zero no reservation is held and no host is fenced by the storage.
# TYPE lockd_fence_unkeyed_live_hosts gauge
lockd_fence_unkeyed_live_hosts{lockspace=\"vg1\"} 0
lockd_fence_unkeyed_live_hosts{lockspace=\"vg2\"} 1
# HELP lockd_fence_key_info Storage fencing: this host's registered key (always 1; the key, in hex, is the `key` label; absent before the join registered one and after a clean leave).
# TYPE lockd_fence_key_info gauge
lockd_fence_key_info{lockspace=\"vg1\",key=\"0x1000000000050003\"} 1
# HELP lockd_fence_fenced_here Storage fencing: 1 when this host is fenced (its key was found gone, or the storage refused it), 0 otherwise.
# TYPE lockd_fence_fenced_here gauge
lockd_fence_fenced_here{lockspace=\"vg1\"} 0
lockd_fence_fenced_here{lockspace=\"vg2\"} 1
# HELP lockd_fence_preempts_total Storage fencing: preempts of a peer generation this host began.
# TYPE lockd_fence_preempts_total counter
lockd_fence_preempts_total{lockspace=\"vg1\"} 2
lockd_fence_preempts_total{lockspace=\"vg2\"} 0
# HELP lockd_fence_peers_fenced_total Storage fencing: peer generations this host confirmed fenced.
# TYPE lockd_fence_peers_fenced_total counter
lockd_fence_peers_fenced_total{lockspace=\"vg1\"} 1
lockd_fence_peers_fenced_total{lockspace=\"vg2\"} 0
# HELP lockd_fence_last_preempt_age_seconds Storage fencing: seconds since this host last began a preempt (absent: never).
# TYPE lockd_fence_last_preempt_age_seconds gauge
lockd_fence_last_preempt_age_seconds{lockspace=\"vg1\"} 35
# HELP lockd_leases_held Resource leases held on this host (orphans included), per lockspace.
# TYPE lockd_leases_held gauge
lockd_leases_held{lockspace=\"vg1\"} 0
";

    fn vg1() -> Fencing {
        Fencing {
            our_key: Some(0x1000_0000_0005_0003),
            keys: 2,
            reservation: true,
            unkeyed_live_hosts: 0,
            peers_fenced: 1,
            preempts: 2,
            last_preempt_age_s: Some(35),
            fenced_here: Some(false),
        }
    }

    fn vg2() -> Fencing {
        Fencing {
            our_key: None,
            keys: 1,
            reservation: false,
            unkeyed_live_hosts: 1,
            peers_fenced: 0,
            preempts: 0,
            last_preempt_age_s: None,
            fenced_here: Some(true),
        }
    }

    /// The same state through the daemon's own encoder.
    fn encoded(spaces: &[(&str, Fencing)], now: u64) -> String {
        let views: Vec<(&str, FenceView)> = spaces
            .iter()
            .map(|(name, f)| {
                let mut v = FenceView {
                    key: f.our_key.unwrap_or(0),
                    fenced_here: f.fenced_here == Some(true),
                    ..FenceView::default()
                };
                v.seen.keys = f.keys;
                v.seen.reservation = f.reservation;
                v.seen.unkeyed_live_peers = f.unkeyed_live_hosts;
                v.seen.preempts = f.preempts;
                v.seen.peers_fenced = f.peers_fenced;
                v.seen.last_preempt_s = f.last_preempt_age_s.map_or(0, |a| now - a);
                (*name, v)
            })
            .collect();
        let mut e = Encoder::default();
        encode_fencing(&mut e, now, &views);
        e.finish()
    }

    fn expected() -> BTreeMap<String, Fencing> {
        BTreeMap::from([("vg1".to_string(), vg1()), ("vg2".to_string(), vg2())])
    }

    #[test]
    fn fencing_is_read_from_the_exporters_lines() {
        assert_eq!(parse_fencing(SAMPLE), expected());
        // The sample is what the exporter writes, line for line.
        let fence_lines = |t: &str| -> Vec<String> {
            t.lines()
                .filter(|l| l.contains("lockd_fence_"))
                .map(str::to_string)
                .collect()
        };
        let enc = encoded(&[("vg1", vg1()), ("vg2", vg2())], 1000);
        assert_eq!(fence_lines(&enc), fence_lines(SAMPLE));
        assert_eq!(parse_fencing(&enc), expected());
    }

    #[test]
    fn a_lockspace_without_fencing_or_a_daemon_without_samples_shows_nothing() {
        // lockd with no fenced lockspace: the families' HELP and TYPE only.
        let none = encoded(&[], 1000);
        assert!(none.contains("# TYPE lockd_fence_keys gauge"), "{none}");
        assert_eq!(parse_fencing(&none), BTreeMap::new());
        assert_eq!(parse_fencing(""), BTreeMap::new());
        let f = parse_fencing(SAMPLE);
        assert!(!f.contains_key("plain"), "{f:?}");
        // An older daemon without our key and fenced_here: the rest still shows.
        let old: String = SAMPLE
            .lines()
            .filter(|l| !l.contains("key_info") && !l.contains("fenced_here"))
            .map(|l| format!("{l}\n"))
            .collect();
        let f = parse_fencing(&old);
        assert_eq!(f["vg1"].our_key, None);
        assert_eq!(f["vg1"].fenced_here, None);
        assert_eq!(f["vg1"].peers_fenced, 1);
        assert_eq!(f["vg2"].unkeyed_live_hosts, 1);
    }

    #[test]
    fn odd_label_values_round_trip_through_the_encoder() {
        for name in [
            "a\"b",
            "back\\slash",
            "sp ace",
            "new\nline",
            "comma,}{=",
            "ü",
        ] {
            let f = parse_fencing(&encoded(&[(name, vg1())], 1000));
            assert_eq!(f.get(name), Some(&vg1()), "{name:?}: {f:?}");
        }
        // Whitespace, a trailing comma, a timestamp and an integral float are accepted.
        let text = "lockd_fence_keys { key=\"x\" , lockspace = \"s\", } 3.0 1700000000\n\
                    lockd_fence_reservation{lockspace=\"s\"}1\r\n\
                    lockd_fence_unkeyed_live_hosts{lockspace=\"s\"} 0\n\
                    lockd_fence_preempts_total{lockspace=\"s\"} 1e1\n\
                    lockd_fence_peers_fenced_total{lockspace=\"s\"} 4\n";
        let f = parse_fencing(text);
        assert_eq!(f["s"].keys, 3);
        assert_eq!(f["s"].preempts, 10);
        assert_eq!(f["s"].peers_fenced, 4);
    }

    #[test]
    fn a_malformed_line_drops_its_lockspace_and_never_panics() {
        let replace = |from: &str, to: &str| {
            assert!(SAMPLE.contains(from), "{from}");
            parse_fencing(&SAMPLE.replacen(from, to, 1))
        };
        let only_vg2 = BTreeMap::from([("vg2".to_string(), vg2())]);
        // A bad value, a repeated line, a missing required family: vg1 is left out.
        for (from, to) in [
            ("{lockspace=\"vg1\"} 2", "{lockspace=\"vg1\"} two"),
            ("{lockspace=\"vg1\"} 2", "{lockspace=\"vg1\"} -2"),
            ("{lockspace=\"vg1\"} 2", "{lockspace=\"vg1\"} 2.5"),
            ("{lockspace=\"vg1\"} 2", "{lockspace=\"vg1\"} NaN"),
            ("{lockspace=\"vg1\"} 2", "{lockspace=\"vg1\"} 2 3 4"),
            ("{lockspace=\"vg1\"} 2", "{lockspace=\"vg1\"}"),
            (
                "{lockspace=\"vg1\"} 2",
                "{lockspace=\"vg1\"} 99999999999999999999999",
            ),
            (
                "reservation{lockspace=\"vg1\"} 1",
                "reservation{lockspace=\"vg1\"} 2",
            ),
            (
                "fenced_here{lockspace=\"vg1\"} 0",
                "fenced_here{lockspace=\"vg1\"} 7",
            ),
            ("key=\"0x1000000000050003\"", "key=\"1000000000050003\""),
            ("key=\"0x1000000000050003\"", "key=\"0xnothex\""),
            ("key=\"0x1000000000050003\"", "key=\"0x10000000000500030\""),
            (
                "key=\"0x1000000000050003\"} 1",
                "key=\"0x1000000000050003\"} 0",
            ),
            ("key=\"0x1000000000050003\"", "kee=\"0x1000000000050003\""),
            (
                "lockd_fence_keys{lockspace=\"vg1\"} 2\n",
                "lockd_fence_keys{lockspace=\"vg1\"} 2\nlockd_fence_keys{lockspace=\"vg1\"} 2\n",
            ),
            ("lockd_fence_preempts_total{lockspace=\"vg1\"} 2\n", ""),
        ] {
            assert_eq!(replace(from, to), only_vg2, "{from:?} -> {to:?}");
        }
        // A line whose lockspace cannot be read could be anyone's: nothing is shown.
        for (from, to) in [
            ("{lockspace=\"vg1\"} 2", "{lockspace=\"vg1} 2"),
            ("{lockspace=\"vg1\"} 2", "{lockspace=vg1} 2"),
            ("{lockspace=\"vg1\"} 2", "{lockspace=\"vg1\" 2"),
            ("{lockspace=\"vg1\"} 2", "{lockspace=\"v\\g1\"} 2"),
            (
                "{lockspace=\"vg1\"} 2",
                "{lockspace=\"vg1\",lockspace=\"vg2\"} 2",
            ),
            ("{lockspace=\"vg1\"} 2", "{9ls=\"vg1\"} 2"),
            ("{lockspace=\"vg1\"} 2", "{} 2"),
            ("{lockspace=\"vg1\"} 2", " 2"),
            ("{lockspace=\"vg1\"} 2", "{lockspace=\"vg1\"x} 2"),
        ] {
            assert_eq!(replace(from, to), BTreeMap::new(), "{from:?} -> {to:?}");
        }
        // Other metrics' odd lines do not matter.
        let f = replace(
            "lockd_leases_held{lockspace=\"vg1\"} 0",
            "lockd_leases_held{{{ ?",
        );
        assert_eq!(f, expected());
        // Every cut of the text and every byte replaced by a troublesome one: no panic.
        for (i, _) in SAMPLE.char_indices() {
            let _ = parse_fencing(&SAMPLE[..i]);
            for c in ["\"", "\\", "{", "}", "=", ",", " ", "\n", "é", "\u{0}"] {
                let mut t = SAMPLE.to_string();
                let end = i + t[i..].chars().next().map_or(0, char::len_utf8);
                t.replace_range(i..end, c);
                let _ = parse_fencing(&t);
            }
        }
    }

    fn snapshot(names: &[&str]) -> Snapshot {
        Snapshot {
            daemon: DaemonInfo {
                host_name: "hostA".into(),
                monotime: Some(100),
                io_timeout: Some(1),
                watchdog_fire_timeout: 60,
                kill_grace_seconds: 40,
                use_watchdog: false,
                version: Some("lockd-0.1.0".into()),
            },
            lockspaces: names
                .iter()
                .map(|n| LockspaceInfo {
                    name: (*n).to_string(),
                    host_id: 3,
                    path: "/dev/sdb".into(),
                    offset: 0,
                    io_timeout: 1,
                    renewal_last_success_mono: Some(99),
                    space_dead: false,
                    hosts_known: true,
                    hosts: vec![HostInfo {
                        host_id: 3,
                        state: "LIVE".into(),
                        io_timeout: 1,
                        generation: 5,
                        timestamp: 1,
                        last_live_mono: None,
                        owner_name: None,
                        ours: true,
                    }],
                })
                .collect(),
            leases: Vec::new(),
            clients: Vec::new(),
        }
    }

    #[test]
    fn status_shows_a_fencing_table_and_warnings_for_fenced_lockspaces_only() {
        let p = Paint(false);
        let f = parse_fencing(SAMPLE);
        let text = fencing_section(&p, &snapshot(&["plain", "vg1", "vg2"]), &f).unwrap();
        println!("{text}");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "FENCING (2)");
        let cols = |l: &str| l.split_whitespace().map(str::to_string).collect::<Vec<_>>();
        assert_eq!(
            cols(lines[1]),
            [
                "LOCKSPACE",
                "OUR_KEY",
                "KEYS",
                "RESERVED",
                "UNKEYED_LIVE",
                "PEERS_FENCED",
                "PREEMPTS",
                "LAST_PREEMPT",
                "THIS_HOST"
            ]
        );
        assert_eq!(
            cols(lines[2]),
            [
                "vg1",
                "0x1000000000050003",
                "2",
                "yes",
                "0",
                "1",
                "2",
                "35s",
                "ago",
                "ok"
            ]
        );
        assert_eq!(
            cols(lines[3]),
            ["vg2", "-", "1", "no", "1", "0", "0", "never", "FENCED"]
        );
        assert!(
            lines[4].starts_with("warning: vg2: this host is fenced"),
            "{text}"
        );
        assert!(
            lines[5].starts_with("warning: vg2: 1 live host without a key"),
            "{text}"
        );
        assert_eq!(lines.len(), 6, "no warning for vg1: {text}");
        assert!(!text.contains("plain") && !text.contains('\x1b'), "{text}");
        // Nothing fenced (or a sanlock daemon: no metrics): no section at all.
        assert_eq!(fencing_section(&p, &snapshot(&["plain"]), &f), None);
        assert_eq!(
            fencing_section(&p, &snapshot(&["vg1"]), &BTreeMap::new()),
            None
        );
        // No reservation without an unkeyed host is a warning of its own.
        let mut bare = vg1();
        bare.reservation = false;
        let text = fencing_section(
            &p,
            &snapshot(&["vg1"]),
            &BTreeMap::from([("vg1".to_string(), bare)]),
        )
        .unwrap();
        assert!(
            text.contains("warning: vg1: no reservation stands"),
            "{text}"
        );
        // Colours on a terminal.
        let text = fencing_section(&Paint(true), &snapshot(&["vg2"]), &f).unwrap();
        assert!(text.contains("\x1b[31;1mFENCED\x1b[0m"), "{text}");
    }

    #[test]
    fn status_json_has_fencing_only_in_fenced_lockspaces() {
        let s = snapshot(&["plain", "vg1", "vg2"]);
        let v = status_json(&s, &parse_fencing(SAMPLE));
        let ls = v["lockspaces"].as_array().unwrap();
        assert!(ls[0].get("fencing").is_none(), "{v}");
        assert_eq!(
            ls[1]["fencing"],
            json!({
                "our_key": "0x1000000000050003",
                "keys": 2,
                "reservation": true,
                "unkeyed_live_hosts": 0,
                "peers_fenced": 1,
                "preempts": 2,
                "last_preempt_age_s": 35,
                "fenced_here": false,
                "warnings": [],
            })
        );
        let f2 = &ls[2]["fencing"];
        assert_eq!(f2["our_key"], serde_json::Value::Null);
        assert_eq!(f2["fenced_here"], true);
        assert_eq!(f2["last_preempt_age_s"], serde_json::Value::Null);
        assert_eq!(f2["warnings"].as_array().map(Vec::len), Some(2), "{f2}");
        // Without metrics the JSON is what it always was.
        let v = status_json(&s, &BTreeMap::new());
        assert!(v["lockspaces"]
            .as_array()
            .unwrap()
            .iter()
            .all(|l| l.get("fencing").is_none()));
        assert!(v["daemon"].get("version").is_none(), "{v}");
    }

    #[test]
    fn explain_shows_each_fencing_value() {
        let f = parse_fencing(SAMPLE);
        // Compared with blanks collapsed (column widths are the table's business).
        let flat = |t: &str| -> String {
            t.lines()
                .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
                .collect::<Vec<_>>()
                .join("\n")
        };
        let text = flat(&explain_fencing_text(&Paint(false), &f["vg1"]));
        println!("{text}");
        for want in [
            "STORAGE FENCING (scsi-pr) AT THE LATEST PASS",
            "a survivor preempts a host",
            "this host's key 0x1000000000050003",
            "this host fenced no",
            "keys registered 2",
            "reservation stands",
            "live hosts without a key 0",
            "peers fenced 1",
            "preempts begun 2",
            "last preempt 35s ago",
        ] {
            assert!(text.contains(want), "lacks {want:?}:\n{text}");
        }
        assert!(!text.contains("warning"), "{text}");
        let text = flat(&explain_fencing_text(&Paint(false), &f["vg2"]));
        println!("{text}");
        for want in [
            "- (none registered)",
            "this host fenced YES",
            "reservation none",
            "live hosts without a key 1",
            "last preempt never",
            "warning: this host is fenced",
            "warning: 1 live host without a key",
        ] {
            assert!(text.contains(want), "lacks {want:?}:\n{text}");
        }
        let mut old = vg1();
        old.fenced_here = None;
        let text = explain_fencing_text(&Paint(false), &old);
        assert!(text.contains("? (not exported by this daemon)"), "{text}");
    }

    #[test]
    fn only_a_lockd_daemon_is_asked_for_metrics() {
        let mut s = snapshot(&["vg1"]);
        assert!(s.daemon.is_lockd());
        s.daemon.version = Some("3.8.5".into());
        assert!(!s.daemon.is_lockd());
        s.daemon.version = None;
        assert!(!s.daemon.is_lockd());
        // A sanlock daemon: nothing asked, nothing shown, no error (the run dir has no
        // socket, so asking would fail).
        let conn = ConnArgs {
            run_dir: Some("/nonexistent/lockd-test".into()),
            json: false,
        };
        assert_eq!(fencing_of(&conn, &s), BTreeMap::new());
        // A lockd daemon that cannot be reached for metrics: nothing either.
        s.daemon.version = Some("lockd-0.1.0".into());
        assert_eq!(fencing_of(&conn, &s), BTreeMap::new());
    }
}
