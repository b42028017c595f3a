//! Daemon-wide commands: status, version, shutdown, log-dump, renewal.

use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;
use client_lib::proto::{
    SANLK_STATE_CLIENT, SANLK_STATE_DAEMON, SANLK_STATE_HOST, SANLK_STATE_LOCKSPACE,
    SANLK_STATE_RENEWAL, SANLK_STATE_RESOURCE,
};
use client_lib::{Client, StateRecord};
use serde_json::json;

use super::{check_rv, print_json, ConnArgs};
use crate::sys;

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Output form: tables with deadlines (human) or sanlock's lines (sanlock). With
    /// --json: the snapshot with deadlines (human) or the raw STATUS records (sanlock).
    #[arg(long = "format", value_enum, default_value = "human")]
    pub format: super::status::StatusFormat,
    /// Include the daemon's detail strings for every record (--format sanlock).
    #[arg(short = 'D', long = "details")]
    pub details: bool,
    #[command(flatten)]
    pub conn: ConnArgs,
}

#[derive(Debug, Args)]
pub struct VersionArgs {
    #[command(flatten)]
    pub conn: ConnArgs,
}

#[derive(Debug, Args)]
pub struct ShutdownArgs {
    /// Shut down even with lockspaces joined (their holders are killed).
    #[arg(short = 'f', long)]
    pub force: bool,
    /// Wait until the daemon process has exited (its lockspaces gone, its delta leases
    /// released).
    #[arg(short = 'w', long)]
    pub wait: bool,
    #[command(flatten)]
    pub conn: ConnArgs,
}

#[derive(Debug, Args)]
pub struct LogDumpArgs {
    #[command(flatten)]
    pub conn: ConnArgs,
}

#[derive(Debug, Args)]
pub struct RenewalArgs {
    /// The lockspace whose renewal history to show.
    #[arg(short = 's', long = "lockspace", value_name = "NAME")]
    pub lockspace: String,
    #[command(flatten)]
    pub conn: ConnArgs,
}

/// `lockd log-dump`: the daemon's in-memory recent log (LOG_DUMP), as sanlock's `client
/// log_dump` prints it (the text, then a newline).
pub fn log_dump(a: &LogDumpArgs) -> Result<()> {
    let text = a.conn.connect()?.log_dump()?;
    if a.conn.json {
        print_json(&json!({ "log": String::from_utf8_lossy(&text) }));
        return Ok(());
    }
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    out.write_all(&text)?;
    out.write_all(b"\n")?;
    Ok(())
}

/// `lockd renewal -s LS`: the lockspace's recent renewals (RENEWAL), one line each as
/// sanlock's `client renewal` prints them; --json gives the fields as numbers.
pub fn renewal(a: &RenewalArgs) -> Result<()> {
    let name = disk_format::Name::new(&a.lockspace)
        .with_context(|| format!("lockspace name {:?}", a.lockspace))?;
    let records = a.conn.connect()?.renewal(name)?;
    let lines = records
        .iter()
        .filter(|r| r.state.kind == SANLK_STATE_RENEWAL)
        .map(|r| r.text.as_str());
    if a.conn.json {
        let rows: Vec<serde_json::Value> = lines
            .map(|text| {
                let d = super::timeline::details(text);
                let mut row = serde_json::Map::new();
                for (k, v) in d {
                    let v = v.parse::<i64>().map_or_else(|_| json!(v), |n| json!(n));
                    row.insert(k.to_string(), v);
                }
                serde_json::Value::Object(row)
            })
            .collect();
        print_json(&serde_json::Value::Array(rows));
        return Ok(());
    }
    for text in lines {
        println!("{text}");
    }
    Ok(())
}

fn kind_name(kind: u32) -> &'static str {
    match kind {
        SANLK_STATE_DAEMON => "daemon",
        SANLK_STATE_CLIENT => "client",
        SANLK_STATE_LOCKSPACE => "lockspace",
        SANLK_STATE_RESOURCE => "resource",
        SANLK_STATE_HOST => "host",
        SANLK_STATE_RENEWAL => "renewal",
        _ => "other",
    }
}

fn record_json(r: &StateRecord) -> serde_json::Value {
    let mut v = json!({
        "kind": kind_name(r.state.kind),
        "name": r.state.name.to_text(),
        "data32": r.state.data32 as i32,
        "data64": r.state.data64,
        "detail": r.text,
    });
    if let Some(ls) = &r.lockspace {
        v["lockspace"] = json!({"name": ls.name.to_text(), "host_id": ls.host_id, "path": ls.host_id_disk.path.to_text(), "offset": ls.host_id_disk.offset});
    }
    if let Some(res) = &r.resource {
        v["resource"] = json!({
            "lockspace": res.head.lockspace_name.to_text(),
            "name": res.head.name.to_text(),
            "lver": res.head.lver,
            "flags": res.head.flags,
            "disks": res.disks.iter().map(|d| json!({"path": d.path.to_text(), "offset": d.offset})).collect::<Vec<_>>(),
        });
    }
    v
}

pub fn status(a: &StatusArgs) -> Result<()> {
    if a.format == super::status::StatusFormat::Human {
        return super::status::status(&a.conn);
    }
    let records = a.conn.connect()?.status(4)?;
    if a.conn.json {
        print_json(&serde_json::Value::Array(
            records.iter().map(record_json).collect(),
        ));
        return Ok(());
    }
    for r in &records {
        let line = match r.state.kind {
            SANLK_STATE_DAEMON => format!("daemon {}", r.state.name),
            SANLK_STATE_CLIENT => format!("p {} {}", r.state.data32 as i32, r.state.name),
            SANLK_STATE_LOCKSPACE => match &r.lockspace {
                Some(ls) => format!(
                    "s {}:{}:{}:{}",
                    ls.name,
                    ls.host_id,
                    ls.host_id_disk.path.to_text(),
                    ls.host_id_disk.offset
                ),
                None => format!("s {}", r.state.name),
            },
            SANLK_STATE_RESOURCE => match &r.resource {
                Some(res) => {
                    let disk = res
                        .disks
                        .first()
                        .map(|d| format!("{}:{}", d.path.to_text(), d.offset))
                        .unwrap_or_default();
                    format!(
                        "r {}:{}:{}:{} p {}",
                        res.head.lockspace_name, res.head.name, disk, res.head.lver, r.state.data32
                    )
                }
                None => format!("r {}", r.state.name),
            },
            k => format!("{} {}", kind_name(k), r.state.name),
        };
        println!("{line}");
        if a.details && !r.text.is_empty() {
            println!("    {}", r.text);
        }
    }
    Ok(())
}

pub fn version(a: &VersionArgs) -> Result<()> {
    let v = a.conn.connect()?.version()?;
    let text = format!("{}.{}.{}", v >> 24, (v >> 16) & 0xff, (v >> 8) & 0xff);
    if a.conn.json {
        print_json(
            &json!({"client": env!("CARGO_PKG_VERSION"), "daemon_protocol_version": text, "raw": v}),
        );
    } else {
        println!(
            "lockd {} (daemon reports sanlock-compatible version {text}, 0x{v:08x})",
            env!("CARGO_PKG_VERSION")
        );
    }
    Ok(())
}

/// How long `shutdown --wait` waits for the daemon process to go once it has answered
/// (it exits right after the answer; this bounds a daemon stuck in its last steps).
const EXIT_WAIT: Duration = Duration::from_secs(60);

/// Names of the lockspaces the daemon has (joined, being added or removed).
fn lockspace_names(conn: &ConnArgs) -> Result<Vec<String>> {
    Ok(conn
        .connect()?
        .get_lockspaces()?
        .iter()
        .map(|ls| ls.name.to_string())
        .collect())
}

/// Fails with why a non-forced shutdown is refused (-EBUSY) and what to do instead.
fn refuse_joined(a: &ShutdownArgs, names: &[String]) -> Result<()> {
    let rv = -libc::EBUSY;
    if a.conn.json {
        print_json(&json!({"op": "shutdown", "result": rv, "lockspaces": names}));
    }
    bail!(
        "shutdown refused ({rv}): lockspaces still joined: {}; remove them with `lockd \
         rem-lockspace` or use `lockd shutdown -f` (which kills the processes holding \
         leases in them)",
        names.join(", ")
    )
}

/// A pidfd for the daemon at the other end of `client`, taken before the shutdown request
/// so the pid cannot be reused meanwhile; None (with a warning) when the daemon's pid is
/// not visible here (another pid namespace) or cannot be watched.
fn daemon_pidfd(client: &Client) -> Option<(u32, std::os::fd::OwnedFd)> {
    let pid = match sys::peer_pid(client.stream()) {
        Ok(Some(pid)) => pid,
        Ok(None) => {
            eprintln!(
                "lockd: warning: the daemon's pid is not visible here; --wait returns when \
                 it answers, which may be just before its process exits"
            );
            return None;
        }
        Err(e) => {
            eprintln!("lockd: warning: cannot read the daemon's pid ({e}); --wait returns when it answers");
            return None;
        }
    };
    match sys::pidfd_open(pid) {
        Ok(fd) => Some((pid, fd)),
        Err(e) => {
            eprintln!(
                "lockd: warning: cannot watch daemon pid {pid} ({e}); --wait returns when \
                 it answers"
            );
            None
        }
    }
}

pub fn shutdown(a: &ShutdownArgs) -> Result<()> {
    // A non-forced shutdown is refused (silently, without --wait) while lockspaces exist:
    // say which, and what to do.
    if !a.force {
        let names = lockspace_names(&a.conn)?;
        if !names.is_empty() {
            return refuse_joined(a, &names);
        }
    }
    let mut client = a.conn.connect()?;
    let watch = if a.wait { daemon_pidfd(&client) } else { None };
    let rv = client.shutdown(a.force, a.wait)?;
    if rv == -libc::EBUSY && !a.force {
        // A lockspace was joined after the check above.
        let names = lockspace_names(&a.conn).unwrap_or_default();
        if !names.is_empty() {
            return refuse_joined(a, &names);
        }
    }
    if rv < 0 {
        if a.conn.json {
            print_json(&json!({"op": "shutdown", "result": rv}));
        }
        check_rv("shutdown", rv)?;
    }
    // SHUTDOWN_WAIT answers once the lockspaces are gone, just before the process exits:
    // --wait returns only when the process is gone.
    if let Some((pid, fd)) = &watch {
        if !sys::wait_pidfd(fd, EXIT_WAIT)? {
            bail!(
                "shutdown: the daemon (pid {pid}) answered but has not exited within {} s",
                EXIT_WAIT.as_secs()
            );
        }
    }
    if a.conn.json {
        print_json(&json!({"op": "shutdown", "result": rv, "exited": a.wait}));
    } else if a.wait {
        println!("daemon exited");
    } else {
        println!("shutdown requested");
    }
    Ok(())
}
