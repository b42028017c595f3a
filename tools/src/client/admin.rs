//! Commands that act on other hosts or on lockspace settings: request (ask a lease's
//! holder to give it up), examine, set-event and set-config.

use anyhow::{bail, Result};
use clap::Args;
use client_lib::proto::{
    SANLK_REQUEST_NEXT_LVER, SANLK_REQ_FORCE, SANLK_REQ_GRACEFUL, SM_CMD_EXAMINE_LOCKSPACE,
    SM_CMD_EXAMINE_RESOURCE, SM_CMD_REQUEST, SM_CMD_SET_CONFIG, SM_CMD_SET_EVENT,
};
use client_lib::HostEvent;
use serde_json::json;

use super::{check_rv, lockspace_by_name, print_json, wire_resource, ConnArgs};

use client_lib::proto::{
    SANLK_SETEV_ALL_HOSTS, SANLK_SETEV_CLEAR_EVENT, SANLK_SETEV_CLEAR_HOSTID,
    SANLK_SETEV_CUR_GENERATION, SANLK_SETEV_REPLACE_EVENT,
};
/// `SANLK_CONFIG_*` values of SET_CONFIG.
const CONFIG_USED: u32 = 0x1;
const CONFIG_UNUSED: u32 = 0x2;
const CONFIG_USED_BY_ORPHANS: u32 = 0x4;
const CONFIG_UNUSED_BY_ORPHANS: u32 = 0x8;

#[derive(Debug, Args)]
pub struct RequestArgs {
    /// LOCKSPACE:NAME:PATH:OFFSET:LVER — the lease version wanted (above the held one).
    #[arg(short = 'r', long = "resource")]
    pub resource: String,
    /// Ask for the holder's current lver + 1 instead of giving :LVER.
    #[arg(long = "next-lver")]
    pub next_lver: bool,
    /// force (SIGKILL the holder), graceful (killpath or SIGTERM), or clear (remove a
    /// pending request).
    #[arg(short = 'f', long = "force-mode", value_parser = ["force", "graceful", "clear"])]
    pub force_mode: String,
    #[command(flatten)]
    pub conn: ConnArgs,
}

#[derive(Debug, Args)]
pub struct ExamineArgs {
    /// Examine the request record of this resource (LOCKSPACE:NAME:PATH:OFFSET).
    #[arg(
        short = 'r',
        long = "resource",
        conflicts_with = "lockspace",
        required_unless_present = "lockspace"
    )]
    pub resource: Option<String>,
    /// Examine every held resource of this lockspace.
    #[arg(short = 's', long = "lockspace")]
    pub lockspace: Option<String>,
    #[command(flatten)]
    pub conn: ConnArgs,
}

#[derive(Debug, Args)]
pub struct SetEventArgs {
    /// Lockspace NAME (or NAME:HOST_ID:PATH:OFFSET).
    #[arg(short = 's', long = "lockspace")]
    pub lockspace: String,
    /// Target host_id (0 with --all-hosts).
    #[arg(short = 'i', long = "host-id", default_value_t = 0)]
    pub host_id: u64,
    /// Target generation (0 with --cur-generation).
    #[arg(short = 'g', long = "generation", default_value_t = 0)]
    pub generation: u64,
    /// Event value (non-zero).
    #[arg(short = 'e', long = "event", default_value_t = 0)]
    pub event: u64,
    /// Data value.
    #[arg(short = 'd', long = "data", default_value_t = 0)]
    pub data: u64,
    /// Use the target's current generation.
    #[arg(long)]
    pub cur_generation: bool,
    /// Clear the target's bit.
    #[arg(long)]
    pub clear_hostid: bool,
    /// Clear the pending event.
    #[arg(long)]
    pub clear_event: bool,
    /// Replace a different pending event.
    #[arg(long)]
    pub replace_event: bool,
    /// Send to every host.
    #[arg(long)]
    pub all_hosts: bool,
    #[command(flatten)]
    pub conn: ConnArgs,
}

#[derive(Debug, Args)]
pub struct SetHostArgs {
    /// Lockspace NAME (or NAME:HOST_ID:PATH:OFFSET), joined by this host.
    #[arg(short = 's', long = "lockspace")]
    pub lockspace: String,
    /// The host to declare dead: HOST_ID, or HOST_ID:GENERATION to refuse if the host
    /// has rejoined since (another generation).
    #[arg(short = 'i', long = "host-id")]
    pub host: String,
    /// Declare the host dead (external fencing: it has been fenced and writes nothing
    /// more); its leases can then be taken at once. The only operation.
    #[arg(long, required = true)]
    pub dead: bool,
    #[command(flatten)]
    pub conn: ConnArgs,
}

#[derive(Debug, Args)]
pub struct SetConfigArgs {
    /// Lockspace NAME (or NAME:HOST_ID:PATH:OFFSET).
    #[arg(short = 's', long = "lockspace")]
    pub lockspace: String,
    /// 1: the lockspace counts as used (rem-lockspace refuses); 0: not.
    #[arg(short = 'u', long = "used", value_parser = ["0", "1"])]
    pub used: Option<String>,
    /// 1: orphan leases keep the lockspace in use; 0: not.
    #[arg(short = 'O', long = "used-by-orphans", value_parser = ["0", "1"])]
    pub used_by_orphans: Option<String>,
    #[command(flatten)]
    pub conn: ConnArgs,
}

fn report(conn: &ConnArgs, op: &str, rv: i32) -> Result<()> {
    if conn.json {
        print_json(&json!({"op": op, "result": rv}));
    }
    check_rv(op, rv)?;
    if !conn.json {
        println!("{op} done");
    }
    Ok(())
}

pub fn request(a: &RequestArgs) -> Result<()> {
    let r = wire_resource(&a.resource)?;
    let mode = match a.force_mode.as_str() {
        "force" => SANLK_REQ_FORCE,
        "graceful" => SANLK_REQ_GRACEFUL,
        _ => 0,
    };
    if mode != 0 && !a.next_lver && r.head.lver == 0 {
        bail!("give the wanted lease version as :LVER, or --next-lver");
    }
    let flags = if a.next_lver {
        SANLK_REQUEST_NEXT_LVER
    } else {
        0
    };
    let (h, _) = a
        .conn
        .connect()?
        .call(SM_CMD_REQUEST, flags, mode, 0, &r.encode())?;
    report(
        &a.conn,
        &format!("request {}:{}", r.head.lockspace_name, r.head.name),
        h.result(),
    )
}

pub fn examine(a: &ExamineArgs) -> Result<()> {
    let (cmd, payload, what) = match (&a.resource, &a.lockspace) {
        (Some(res), _) => {
            let r = wire_resource(res)?;
            let what = format!("examine {}:{}", r.head.lockspace_name, r.head.name);
            (SM_CMD_EXAMINE_RESOURCE, r.encode(), what)
        }
        (None, Some(ls)) => {
            let l = lockspace_by_name(ls)?;
            let what = format!("examine {}", l.name);
            (SM_CMD_EXAMINE_LOCKSPACE, l.encode(), what)
        }
        (None, None) => bail!("give -r RESOURCE or -s LOCKSPACE"),
    };
    let (h, _) = a.conn.connect()?.call(cmd, 0, 0, 0, &payload)?;
    report(&a.conn, &what, h.result())
}

pub fn set_event(a: &SetEventArgs) -> Result<()> {
    let ls = lockspace_by_name(&a.lockspace)?;
    let mut flags = 0;
    for (on, f) in [
        (a.cur_generation, SANLK_SETEV_CUR_GENERATION),
        (a.clear_hostid, SANLK_SETEV_CLEAR_HOSTID),
        (a.clear_event, SANLK_SETEV_CLEAR_EVENT),
        (a.replace_event, SANLK_SETEV_REPLACE_EVENT),
        (a.all_hosts, SANLK_SETEV_ALL_HOSTS),
    ] {
        if on {
            flags |= f;
        }
    }
    let mut payload = ls.encode();
    HostEvent {
        host_id: a.host_id,
        generation: a.generation,
        event: a.event,
        data: a.data,
    }
    .encode_into(&mut payload);
    let (h, _) = a
        .conn
        .connect()?
        .call(SM_CMD_SET_EVENT, flags, 0, 0, &payload)?;
    report(&a.conn, &format!("set_event {}", ls.name), h.result())
}

/// `lockd set-host --dead`: sanlock 5.1's `set_host(SANLK_SET_HOST_DEAD_EXT)`, the same
/// command and the same effect (the host's delta lease gets the DEAD_EXT flag). The
/// daemon refuses it for a host whose lease it still sees renewed.
pub fn set_host(a: &SetHostArgs) -> Result<()> {
    let ls = lockspace_by_name(&a.lockspace)?;
    let (id, gen) = match a.host.split_once(':') {
        Some((i, g)) => (i, g),
        None => (a.host.as_str(), "0"),
    };
    let host_id: u64 = id
        .parse()
        .map_err(|_| anyhow::anyhow!("bad host_id {id:?} in -i {}", a.host))?;
    let generation: u64 = gen
        .parse()
        .map_err(|_| anyhow::anyhow!("bad generation {gen:?} in -i {}", a.host))?;
    if host_id == 0 {
        bail!("-i needs a host_id of 1 or more");
    }
    if !a.dead {
        bail!("nothing to do: --dead is the only operation");
    }
    let mut payload = ls.encode();
    client_lib::wire::Host {
        host_id,
        generation,
        ..Default::default()
    }
    .encode_into(&mut payload);
    let (h, _) = a.conn.connect()?.call(
        client_lib::proto::SM_CMD_SET_HOST,
        0,
        client_lib::proto::SANLK_SET_HOST_DEAD_EXT,
        0,
        &payload,
    )?;
    report(
        &a.conn,
        &format!("set_host {} host {host_id} dead", ls.name),
        h.result(),
    )
}

pub fn set_config(a: &SetConfigArgs) -> Result<()> {
    let ls = lockspace_by_name(&a.lockspace)?;
    let mut changes = Vec::new();
    match a.used.as_deref() {
        Some("1") => changes.push(CONFIG_USED),
        Some(_) => changes.push(CONFIG_UNUSED),
        None => {}
    }
    match a.used_by_orphans.as_deref() {
        Some("1") => changes.push(CONFIG_USED_BY_ORPHANS),
        Some(_) => changes.push(CONFIG_UNUSED_BY_ORPHANS),
        None => {}
    }
    if changes.is_empty() {
        bail!("give --used 0|1 and/or --used-by-orphans 0|1");
    }
    for c in changes {
        let (h, _) = a
            .conn
            .connect()?
            .call(SM_CMD_SET_CONFIG, 0, c, 0, &ls.encode())?;
        report(
            &a.conn,
            &format!("set_config {} 0x{c:x}", ls.name),
            h.result(),
        )?;
    }
    Ok(())
}
