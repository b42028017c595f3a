//! Lockspace commands: add-lockspace (with a live countdown on a terminal),
//! rem-lockspace, inq-lockspace, gets and host-status.

use std::io::{IsTerminal, Write};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Args;
use client_lib::proto::{
    SANLK_ADD_ASYNC, SANLK_HOST_DEAD, SANLK_HOST_FAIL, SANLK_HOST_FREE, SANLK_HOST_LIVE,
    SANLK_HOST_MASK, SANLK_HOST_UNKNOWN, SANLK_INQ_WAIT, SANLK_LSF_ADD, SANLK_LSF_REM,
    SANLK_REM_ASYNC, SANLK_REM_UNUSED,
};
use serde_json::json;

use super::{check_rv, lockspace_by_name, print_json, wire_lockspace, ConnArgs};

#[derive(Debug, Args)]
pub struct AddArgs {
    /// NAME:HOST_ID:PATH:OFFSET
    #[arg(short = 's', long = "lockspace")]
    pub lockspace: String,
    /// io_timeout in seconds for this lockspace (0 = the daemon's default).
    #[arg(short = 'o', long = "io-timeout", default_value_t = 0)]
    pub io_timeout_s: u32,
    /// Return at once; the join continues in the daemon (see inq-lockspace).
    #[arg(long = "async")]
    pub asynchronous: bool,
    #[command(flatten)]
    pub conn: ConnArgs,
}

#[derive(Debug, Args)]
pub struct RemArgs {
    /// NAME:HOST_ID:PATH:OFFSET
    #[arg(short = 's', long = "lockspace")]
    pub lockspace: String,
    /// Return at once; removal continues in the daemon.
    #[arg(long = "async")]
    pub asynchronous: bool,
    /// Refuse (EBUSY) if resources are still held instead of killing their holders.
    #[arg(long)]
    pub unused: bool,
    #[command(flatten)]
    pub conn: ConnArgs,
}

#[derive(Debug, Args)]
pub struct InqArgs {
    /// NAME:HOST_ID:PATH:OFFSET
    #[arg(short = 's', long = "lockspace")]
    pub lockspace: String,
    /// Block while a join or removal is in progress.
    #[arg(long)]
    pub wait: bool,
    #[command(flatten)]
    pub conn: ConnArgs,
}

#[derive(Debug, Args)]
pub struct GetsArgs {
    /// Also list each lockspace's hosts.
    #[arg(long)]
    pub hosts: bool,
    #[command(flatten)]
    pub conn: ConnArgs,
}

#[derive(Debug, Args)]
pub struct HostStatusArgs {
    /// Lockspace NAME (or a full NAME:HOST_ID:PATH:OFFSET).
    #[arg(short = 's', long = "lockspace")]
    pub lockspace: String,
    #[command(flatten)]
    pub conn: ConnArgs,
}

/// The name of a host state (`SANLK_HOST_*`).
pub fn host_state_name(flags: u32) -> &'static str {
    match flags & SANLK_HOST_MASK {
        SANLK_HOST_UNKNOWN => "UNKNOWN",
        SANLK_HOST_FREE => "FREE",
        SANLK_HOST_LIVE => "LIVE",
        SANLK_HOST_FAIL => "FAIL",
        SANLK_HOST_DEAD => "DEAD",
        _ => "?",
    }
}

pub fn add(a: &AddArgs) -> Result<()> {
    let ls = wire_lockspace(&a.lockspace)?;
    let name = ls.name.to_text();
    let started = Instant::now();
    let flags = if a.asynchronous { SANLK_ADD_ASYNC } else { 0 };
    let show_countdown = !a.asynchronous && !a.conn.json && std::io::stderr().is_terminal();
    let rv = if show_countdown {
        // The join blocks in the daemon for at least 2×io_timeout; show progress while
        // another thread waits for the real result.
        let mut client = a.conn.connect()?;
        let (tx, rx) = mpsc::channel();
        let ls2 = ls.clone();
        let io = a.io_timeout_s;
        thread::spawn(move || {
            let _ = tx.send(client.add_lockspace(&ls2, io, 0));
        });
        let d = if a.io_timeout_s == 0 {
            10
        } else {
            a.io_timeout_s
        };
        let mut err = std::io::stderr();
        loop {
            match rx.recv_timeout(Duration::from_millis(250)) {
                Ok(r) => {
                    let _ = write!(err, "\r\x1b[K");
                    break r?;
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    let _ = write!(
                        err,
                        "\r\x1b[Kjoining {name} as host_id {}: {:.0}s (usually ~{}s; up to {}s if host_id {} was held by a host that stopped)",
                        ls.host_id,
                        started.elapsed().as_secs_f64(),
                        2 * d + 1,
                        8 * d + 60,
                        ls.host_id
                    );
                    let _ = err.flush();
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    anyhow::bail!("add_lockspace {name}: the request thread ended without a result")
                }
            }
        }
    } else {
        a.conn
            .connect()?
            .add_lockspace(&ls, a.io_timeout_s, flags)?
    };
    let secs = started.elapsed().as_secs_f64();
    if a.conn.json {
        print_json(
            &json!({"op": "add_lockspace", "lockspace": name, "host_id": ls.host_id, "result": rv, "seconds": secs}),
        );
    }
    if rv == -libc::EEXIST && !a.conn.json {
        println!("lockspace {name} is already joined");
        return Ok(());
    }
    check_rv(&format!("add_lockspace {name}"), rv)?;
    if !a.conn.json {
        if a.asynchronous {
            println!(
                "joining lockspace {name} as host_id {} (async; check with inq-lockspace)",
                ls.host_id
            );
        } else {
            println!(
                "joined lockspace {name} as host_id {} in {secs:.1}s",
                ls.host_id
            );
        }
    }
    Ok(())
}

pub fn rem(a: &RemArgs) -> Result<()> {
    let ls = wire_lockspace(&a.lockspace)?;
    let mut flags = 0;
    if a.asynchronous {
        flags |= SANLK_REM_ASYNC;
    }
    if a.unused {
        flags |= SANLK_REM_UNUSED;
    }
    let rv = a.conn.connect()?.rem_lockspace(&ls, flags)?;
    if a.conn.json {
        print_json(&json!({"op": "rem_lockspace", "lockspace": ls.name.to_text(), "result": rv}));
    }
    check_rv(&format!("rem_lockspace {}", ls.name), rv)?;
    if !a.conn.json {
        println!("left lockspace {}", ls.name);
    }
    Ok(())
}

pub fn inq(a: &InqArgs) -> Result<()> {
    let ls = wire_lockspace(&a.lockspace)?;
    let flags = if a.wait { SANLK_INQ_WAIT } else { 0 };
    let rv = a.conn.connect()?.inq_lockspace(&ls, flags)?;
    let state = match rv {
        0 => "joined",
        r if r == -libc::EINPROGRESS => "in progress",
        r if r == -libc::ENOENT => "not joined",
        _ => "error",
    };
    if a.conn.json {
        print_json(&json!({"lockspace": ls.name.to_text(), "result": rv, "state": state}));
    } else {
        println!("lockspace {}: {state}", ls.name);
    }
    if state == "error" {
        check_rv(&format!("inq_lockspace {}", ls.name), rv)?;
    }
    Ok(())
}

/// GET_HOSTS, retrying while the daemon answers -EAGAIN: right after a join it has not
/// yet looked at the other hosts' records (it needs one renewal read).
fn hosts_of(conn: &ConnArgs, name: disk_format::Name) -> Result<Vec<client_lib::Host>> {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        match conn.connect()?.get_hosts(name, 0) {
            Err(client_lib::ClientError::Result { rv })
                if rv == -libc::EAGAIN && Instant::now() < deadline =>
            {
                thread::sleep(Duration::from_millis(200));
            }
            r => return r.with_context(|| format!("get_hosts {name}")),
        }
    }
}

pub fn gets(a: &GetsArgs) -> Result<()> {
    let spaces = a.conn.connect()?.get_lockspaces()?;
    let mut out = Vec::new();
    for ls in &spaces {
        let mut entry = json!({
            "lockspace": ls.name.to_text(),
            "host_id": ls.host_id,
            "path": ls.host_id_disk.path.to_text(),
            "offset": ls.host_id_disk.offset,
            "adding": ls.flags & SANLK_LSF_ADD != 0,
            "removing": ls.flags & SANLK_LSF_REM != 0,
        });
        if a.hosts {
            let hosts = hosts_of(&a.conn, ls.name)?;
            entry["hosts"] = hosts
                .iter()
                .map(|h| json!({"host_id": h.host_id, "generation": h.generation, "timestamp": h.timestamp, "io_timeout": h.io_timeout, "state": host_state_name(h.flags)}))
                .collect();
        }
        out.push(entry);
    }
    if a.conn.json {
        print_json(&serde_json::Value::Array(out));
        return Ok(());
    }
    if out.is_empty() {
        println!("no lockspaces");
    }
    for e in &out {
        let tag = if e["adding"] == true {
            " (joining)"
        } else if e["removing"] == true {
            " (leaving)"
        } else {
            ""
        };
        println!(
            "s {}:{}:{}:{}{tag}",
            e["lockspace"].as_str().unwrap_or(""),
            e["host_id"],
            e["path"].as_str().unwrap_or(""),
            e["offset"]
        );
        if let Some(hosts) = e["hosts"].as_array() {
            for h in hosts {
                println!(
                    "h {} gen {} timestamp {} {}",
                    h["host_id"],
                    h["generation"],
                    h["timestamp"],
                    h["state"].as_str().unwrap_or("")
                );
            }
        }
    }
    Ok(())
}

pub fn host_status(a: &HostStatusArgs) -> Result<()> {
    let ls = lockspace_by_name(&a.lockspace)?;
    let hosts = hosts_of(&a.conn, ls.name)?;
    if a.conn.json {
        let v: Vec<_> = hosts
            .iter()
            .map(|h| json!({"host_id": h.host_id, "generation": h.generation, "timestamp": h.timestamp, "io_timeout": h.io_timeout, "state": host_state_name(h.flags)}))
            .collect();
        print_json(&serde_json::Value::Array(v));
        return Ok(());
    }
    println!(
        "{:>7} {:>10} {:>12} {:>4}  state",
        "host_id", "generation", "timestamp", "io"
    );
    for h in hosts {
        println!(
            "{:>7} {:>10} {:>12} {:>4}  {}",
            h.host_id,
            h.generation,
            h.timestamp,
            h.io_timeout,
            host_state_name(h.flags)
        );
    }
    Ok(())
}
