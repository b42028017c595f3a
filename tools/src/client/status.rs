//! `lockd status` (a table, `--json`, or `--format sanlock`) and `lockd explain`.

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
    let line = |cells: Vec<String>| {
        let mut out = String::new();
        for (i, c) in cells.iter().enumerate() {
            out.push_str(c);
            if i + 1 < cells.len() {
                out.push_str(&" ".repeat(w[i].saturating_sub(visible(c)) + 2));
            }
        }
        println!("{}", out.trim_end());
    };
    line(head.iter().map(|h| h.to_string()).collect());
    for r in rows {
        line(r.clone());
    }
}

fn our_timeline(s: &Snapshot, io_timeout: u64) -> Timeline {
    Timeline::new(
        io_timeout,
        s.daemon.watchdog_fire_timeout,
        s.daemon.kill_grace_seconds,
        s.daemon.use_watchdog,
    )
}

fn status_json(s: &Snapshot) -> serde_json::Value {
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
            json!({
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
            })
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

fn status_human(s: &Snapshot) {
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
    if conn.json {
        print_json(&status_json(&s));
    } else {
        status_human(&s);
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
    let mut out = Vec::new();
    for ls in spaces {
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
        out.push(json!({
            "lockspace": ls.name,
            "host_id": ls.host_id,
            "io_timeout": ls.io_timeout,
            "watchdog_fire_timeout": s.daemon.watchdog_fire_timeout,
            "kill_grace_seconds": s.daemon.kill_grace_seconds,
            "use_watchdog": s.daemon.use_watchdog,
            "this_host": ours_json,
            "other_hosts": others,
        }));
    }
    if a.conn.json {
        print_json(&serde_json::Value::Array(out));
    }
    Ok(())
}
