//! Resource commands: acquire (for a pid, or for the life of a command), release,
//! inquire and convert.
//!
//! `lockd acquire -r RES … -- COMMAND ARGS` registers with the daemon, takes the leases
//! on that registration, then execs COMMAND in the same process: the registered pid *is*
//! the command, so the daemon's kill escalation reaches it, and the leases are released
//! when it exits (its registered connection closes). With one lease, COMMAND finds it in
//! `LOCKD_LEASE` (`LS:NAME`) and its fencing token (the lver) in `LOCKD_FENCING_TOKEN`,
//! as under `lockd elect`.
//!
//! `--timeout S` retries an acquire refused because someone else holds (or is taking)
//! the lease, until S seconds have passed; the error then names the holder as `lockd
//! leader` sees it. An acquire that meets a local release of the lease needs no retry:
//! the daemon waits for the release to end.

use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use client_lib::lease::{is_busy_code, LeaseSpec};
use client_lib::proto::{
    SANLK_ACQUIRE_LVB, SANLK_ACQUIRE_OWNER_NOWAIT, SANLK_KILLPATH_PID, SANLK_REL_ALL,
    SANLK_RESTRICT_SIGKILL, SANLK_RESTRICT_SIGTERM, SANLK_RES_SHARED, SM_CMD_CONVERT,
    SM_CMD_KILLPATH, SM_CMD_RESTRICT,
};
use client_lib::{describe_rv, Resource, ResourceHead};
use disk_format::Name;
use serde_json::json;

use super::{check_rv, print_json, wire_resource, ConnArgs};
use crate::sys;

#[derive(Debug, Args)]
pub struct AcquireArgs {
    /// LOCKSPACE:NAME:PATH:OFFSET[:LVER|:SH] (repeat for up to 8 resources).
    #[arg(short = 'r', long = "resource", required = true)]
    pub resources: Vec<String>,
    /// Acquire for this registered pid.
    #[arg(short = 'p', long = "pid", conflicts_with = "command")]
    pub pid: Option<i32>,
    /// Hold the leases for this process, which need not register (lockd only): the
    /// daemon releases them when it exits, and on lease loss runs --killpath (with the
    /// pid appended), then SIGTERM, then SIGKILL.
    #[arg(long = "for-pid", conflicts_with_all = ["command", "pid"])]
    pub for_pid: Option<i32>,
    /// Fail at once (SANLK_ACQUIRE_OWNED_RETRY) instead of waiting on an owner whose
    /// liveness is not yet known.
    #[arg(long)]
    pub nowait: bool,
    /// While the lease is held elsewhere (another host, or another process here), try
    /// again until S seconds have passed; then fail naming the holder ("held by host 1
    /// (hostA), live"). Without it a held lease fails at once.
    #[arg(long = "timeout", value_name = "S")]
    pub timeout: Option<u64>,
    /// Read the lease value block at acquire and write it back at release
    /// (`SANLK_ACQUIRE_LVB`); read and set it with `lockd lvb`.
    #[arg(long)]
    pub lvb: bool,
    /// Owner name recorded by the daemon (shown in status).
    #[arg(long = "owner-name")]
    pub owner_name: Option<String>,
    /// Program the daemon runs (instead of SIGTERM) when the lease must be given up.
    #[arg(long)]
    pub killpath: Option<String>,
    /// Arguments for the killpath program.
    #[arg(long = "killpath-args", default_value = "", allow_hyphen_values = true)]
    pub killpath_args: String,
    /// Forbid the daemon a signal when it must stop the command: `sigkill` (it then uses
    /// SIGTERM), `sigterm` (it then uses SIGKILL). Only with a command.
    #[arg(long, value_parser = ["sigkill", "sigterm"])]
    pub restrict: Option<String>,
    /// Command to run while holding the leases (after `--`). With one lease it finds the
    /// lease in LOCKD_LEASE (LS:NAME) and its fencing token in LOCKD_FENCING_TOKEN.
    #[arg(last = true)]
    pub command: Vec<String>,
    #[command(flatten)]
    pub conn: ConnArgs,
}

#[derive(Debug, Args)]
pub struct ReleaseArgs {
    /// LOCKSPACE:NAME:PATH:OFFSET (repeatable).
    #[arg(short = 'r', long = "resource")]
    pub resources: Vec<String>,
    /// Registered pid holding the leases.
    #[arg(short = 'p', long = "pid")]
    pub pid: i32,
    /// Release every lease of the pid.
    #[arg(long)]
    pub all: bool,
    #[command(flatten)]
    pub conn: ConnArgs,
}

#[derive(Debug, Args)]
pub struct InquireArgs {
    /// Registered pid.
    #[arg(short = 'p', long = "pid")]
    pub pid: i32,
    #[command(flatten)]
    pub conn: ConnArgs,
}

#[derive(Debug, Args)]
pub struct ConvertArgs {
    /// LOCKSPACE:NAME:PATH:OFFSET[:SH] — `:SH` converts to shared, without it to exclusive.
    #[arg(short = 'r', long = "resource")]
    pub resource: String,
    /// Registered pid holding the lease.
    #[arg(short = 'p', long = "pid")]
    pub pid: i32,
    #[command(flatten)]
    pub conn: ConnArgs,
}

fn owner_name(a: &AcquireArgs) -> Result<Option<Name>> {
    a.owner_name
        .as_deref()
        .map(Name::new)
        .transpose()
        .context("invalid owner name")
}

pub fn acquire(a: &AcquireArgs) -> Result<()> {
    let resources = a
        .resources
        .iter()
        .map(|t| wire_resource(t))
        .collect::<Result<Vec<_>>>()?;
    if resources.len() > 8 {
        bail!(
            "at most 8 resources per acquire ({} given)",
            resources.len()
        );
    }
    let mut flags = if a.nowait {
        SANLK_ACQUIRE_OWNER_NOWAIT
    } else {
        0
    };
    if a.lvb {
        flags |= SANLK_ACQUIRE_LVB;
    }
    let names: Vec<String> = resources
        .iter()
        .map(|r| format!("{}:{}", r.head.lockspace_name, r.head.name))
        .collect();
    if let Some(pid) = a.for_pid {
        let killpath = a.killpath.as_deref().map(|p| (p, a.killpath_args.as_str()));
        let rv = retry_while_held(a, &resources, || {
            Ok(a.conn
                .connect()?
                .acquire_for_pid(pid, flags, &resources, killpath)?)
        })?;
        if a.conn.json {
            print_json(&json!({"op": "acquire", "for_pid": pid, "resources": names, "result": rv}));
        }
        let why = match rv {
            -3 => " (no such process, or it has exited)",
            -1 => " (the process belongs to another user)",
            -17 => " (already held, or the process is registered itself)",
            _ => "",
        };
        check_rv(
            &format!("acquire {} for process {pid}{why}", names.join(" ")),
            rv,
        )?;
        if !a.conn.json {
            println!(
                "acquired {} for process {pid}; released when it exits",
                names.join(" ")
            );
        }
        return Ok(());
    }
    if let Some(pid) = a.pid {
        let owner = owner_name(a)?;
        let rv = retry_while_held(a, &resources, || {
            Ok(a.conn.connect()?.acquire(pid, flags, &resources, owner)?)
        })?;
        if a.conn.json {
            print_json(&json!({"op": "acquire", "pid": pid, "resources": names, "result": rv}));
        }
        check_rv(&format!("acquire {} for pid {pid}", names.join(" ")), rv)?;
        if !a.conn.json {
            println!("acquired {} for pid {pid}", names.join(" "));
        }
        return Ok(());
    }
    let Some((program, args)) = a.command.split_first() else {
        bail!("give -p PID, or a command to run while holding the leases after `--`");
    };
    // Register this process, then take the leases on the registered connection.
    let mut client = a.conn.connect()?;
    client.register()?;
    if let Some(path) = &a.killpath {
        let mut payload = vec![0u8; 256];
        let (p, g) = (path.as_bytes(), a.killpath_args.as_bytes());
        if p.len() >= 128 || g.len() >= 128 {
            bail!("killpath and its arguments must each be under 128 bytes");
        }
        payload[..p.len()].copy_from_slice(p);
        payload[128..128 + g.len()].copy_from_slice(g);
        let (h, _) = client.call(SM_CMD_KILLPATH, SANLK_KILLPATH_PID, 0, u32::MAX, &payload)?;
        check_rv("killpath", h.result())?;
    }
    let owner = owner_name(a)?;
    let rv = retry_while_held(a, &resources, || {
        Ok(client.acquire(-1, flags, &resources, owner)?)
    })?;
    check_rv(&format!("acquire {}", names.join(" ")), rv)?;
    if let Some(which) = &a.restrict {
        let flag = if which == "sigkill" {
            SANLK_RESTRICT_SIGKILL
        } else {
            SANLK_RESTRICT_SIGTERM
        };
        let (h, _) = client.call(SM_CMD_RESTRICT, flag, 0, u32::MAX, &[])?;
        check_rv("restrict", h.result())?;
    }
    if !a.conn.json {
        eprintln!(
            "lockd: holding {} while running {program} (pid {})",
            names.join(" "),
            std::process::id()
        );
    }
    let mut command = Command::new(program);
    command.args(args);
    // One lease: the command learns it and its fencing token, as under `lockd elect`.
    if let [r] = resources.as_slice() {
        let spec = lease_spec(r);
        command.env("LOCKD_LEASE", spec.short());
        match client_lib::lease::token_of(&mut client, &a.conn.run_dir(), &spec) {
            Ok(token) => {
                command.env("LOCKD_FENCING_TOKEN", token.to_string());
            }
            Err(e) => eprintln!("lockd: no fencing token for {}: {e}", spec.short()),
        }
    }
    // The registered connection must survive exec: the daemon releases the leases when
    // it closes, i.e. when the command exits.
    sys::clear_cloexec(client.stream().as_raw_fd())?;
    let err = command.exec();
    bail!("cannot run {program}: {err}")
}

/// The lease `r` names, as the Rust client's [`LeaseSpec`] (its first disk, then the rest).
fn lease_spec(r: &Resource) -> LeaseSpec {
    let mut disks = r.disks.iter().map(|d| (d.path.to_text(), d.offset));
    let (path, offset) = disks.next().unwrap_or_default();
    LeaseSpec {
        lockspace: r.head.lockspace_name,
        name: r.head.name,
        path,
        offset,
        more_disks: disks.collect(),
    }
}

/// Runs `attempt` (one ACQUIRE) and, with `--timeout S`, runs it again while the answer
/// says the lease is held or being taken by someone else ([`is_busy_code`]), until S
/// seconds have passed; then fails naming the holder of each lease. Returns the last
/// result otherwise (0, or a code that no wait can change).
fn retry_while_held(
    a: &AcquireArgs,
    resources: &[Resource],
    mut attempt: impl FnMut() -> Result<i32>,
) -> Result<i32> {
    let Some(secs) = a.timeout else {
        return attempt();
    };
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut pause = Duration::from_millis(100);
    loop {
        let rv = attempt()?;
        if rv >= 0 || !is_busy_code(rv) {
            return Ok(rv);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            bail!(
                "acquire {}: not acquired within {secs} s: {} ({} {rv})",
                resources
                    .iter()
                    .map(|r| format!("{}:{}", r.head.lockspace_name, r.head.name))
                    .collect::<Vec<_>>()
                    .join(" "),
                holders(&a.conn, resources),
                describe_rv(rv)
            );
        }
        std::thread::sleep(pause.min(left));
        pause = (pause * 2).min(Duration::from_secs(1));
    }
}

/// Who holds each of `resources` now, as `lockd leader` tells it: "held by host 1
/// (hostA), live" for one lease, each prefixed with its name for several.
fn holders(conn: &ConnArgs, resources: &[Resource]) -> String {
    let run_dir = conn.run_dir();
    let one = resources.len() == 1;
    resources
        .iter()
        .map(|r| {
            let name = format!("{}:{}", r.head.lockspace_name, r.head.name);
            let Some(disk) = r.disks.first() else {
                return format!("{name}: no disk");
            };
            let spec = LeaseSpec {
                lockspace: r.head.lockspace_name,
                name: r.head.name,
                path: disk.path.to_text(),
                offset: disk.offset,
                more_disks: r.disks[1..]
                    .iter()
                    .map(|d| (d.path.to_text(), d.offset))
                    .collect(),
            };
            let what = match client_lib::lease::leader(&run_dir, &spec) {
                Ok(info) if info.host_id == 0 => "held by no host now".to_string(),
                Ok(info) => {
                    let host = info.host_name.to_text();
                    format!(
                        "held by host {} ({}), {}",
                        info.host_id,
                        if host.is_empty() {
                            "name unknown"
                        } else {
                            &host
                        },
                        info.state_name()
                    )
                }
                Err(e) => format!("holder unknown ({e})"),
            };
            if one {
                what
            } else {
                format!("{name} {what}")
            }
        })
        .collect::<Vec<_>>()
        .join("; ")
}

pub fn release(a: &ReleaseArgs) -> Result<()> {
    let heads: Vec<ResourceHead> = a
        .resources
        .iter()
        .map(|t| wire_resource(t).map(|r| r.head))
        .collect::<Result<_>>()?;
    if heads.is_empty() && !a.all {
        bail!("give -r RESOURCE (repeatable) or --all");
    }
    let flags = if a.all { SANLK_REL_ALL } else { 0 };
    let rv = a.conn.connect()?.release(a.pid, flags, &heads)?;
    if a.conn.json {
        print_json(&json!({"op": "release", "pid": a.pid, "all": a.all, "result": rv}));
    }
    check_rv(&format!("release for pid {}", a.pid), rv)?;
    if !a.conn.json {
        println!("released for pid {}", a.pid);
    }
    Ok(())
}

pub fn inquire(a: &InquireArgs) -> Result<()> {
    let (rv, count, state) = a.conn.connect()?.inquire(a.pid)?;
    if a.conn.json {
        let list: Vec<&str> = state.split_whitespace().collect();
        print_json(&json!({"pid": a.pid, "result": rv, "count": count, "resources": list}));
    }
    check_rv(&format!("inquire pid {}", a.pid), rv)?;
    if !a.conn.json {
        if count == 0 {
            println!("pid {} holds no leases", a.pid);
        }
        for r in state.split_whitespace() {
            println!("{r}");
        }
    }
    Ok(())
}

pub fn convert(a: &ConvertArgs) -> Result<()> {
    let r = wire_resource(&a.resource)?;
    let mut head = r.head.clone();
    head.num_disks = 0;
    let mut payload = Vec::new();
    head.encode_into(&mut payload);
    let (h, _) = a
        .conn
        .connect()?
        .call(SM_CMD_CONVERT, 0, 0, a.pid as u32, &payload)?;
    let mode = if r.head.flags & SANLK_RES_SHARED != 0 {
        "shared"
    } else {
        "exclusive"
    };
    if a.conn.json {
        print_json(&json!({"op": "convert", "pid": a.pid, "mode": mode, "result": h.result()}));
    }
    check_rv(
        &format!("convert {}:{} to {mode}", head.lockspace_name, head.name),
        h.result(),
    )?;
    if !a.conn.json {
        println!(
            "converted {}:{} to {mode} for pid {}",
            head.lockspace_name, head.name, a.pid
        );
    }
    Ok(())
}
