//! `lockd <command>`: client commands that talk to a running daemon over its
//! sanlock-compatible socket. They work against the lockd daemon and against a real
//! sanlock daemon alike (both speak the same protocol).
//!
//! Output is for people by default and JSON with `--json`. A failed command prints one
//! line naming the operation and the result code (`SANLK_*` name or errno) and exits 1.

pub mod admin;
pub mod daemon_cmds;
pub mod doctor;
pub mod elect;
pub mod lockspace;
pub mod lvb;
pub mod metrics;
pub mod resource;
pub mod rindex;
pub mod status;
pub mod timeline;

use std::path::PathBuf;

use anyhow::{bail, Result};
use clap::Args;
use client_lib::proto::SANLK_RES_SHARED;
use client_lib::{describe_rv, Client, DiskLocation, Lockspace, Resource, ResourceHead};
use disk_format::Name;

use crate::spec::{LockspaceSpec, ResourceSpec};

/// Where to find the daemon: `--run-dir`, else `$LOCKD_RUN_DIR`/`$SANLOCK_RUN_DIR`,
/// else `run_dir` of /etc/lockd/lockd.toml, else /run/lockd.
#[derive(Debug, Args, Clone)]
pub struct ConnArgs {
    /// Daemon run directory holding sanlock.sock.
    #[arg(long = "run-dir", global = true)]
    pub run_dir: Option<PathBuf>,
    /// Print JSON instead of text.
    #[arg(long, global = true)]
    pub json: bool,
}

impl ConnArgs {
    pub fn run_dir(&self) -> PathBuf {
        if let Some(d) = &self.run_dir {
            return d.clone();
        }
        if let Some(v) = std::env::var_os("LOCKD_RUN_DIR").filter(|v| !v.is_empty()) {
            return PathBuf::from(v);
        }
        if let Some(v) = std::env::var_os("SANLOCK_RUN_DIR").filter(|v| !v.is_empty()) {
            return PathBuf::from(v);
        }
        // Where the daemon's config puts it (drop-in mode: run_dir = "/run/sanlock").
        let cfg = std::path::Path::new(lockd_config::DEFAULT_CONFIG_PATH);
        if let Ok(Some(dir)) = lockd_config::load_file(cfg, false).map(|f| f.run_dir) {
            return dir;
        }
        client_lib::default_run_dir()
    }

    pub fn connect(&self) -> Result<Client> {
        Ok(Client::connect(&self.run_dir())?)
    }
}

/// Fails with "OP: NAME (CODE)" unless `rv` is 0.
pub fn check_rv(op: &str, rv: i32) -> Result<()> {
    if rv < 0 {
        bail!("{op}: {} ({rv})", describe_rv(rv));
    }
    Ok(())
}

/// A wire lockspace from `NAME:HOST_ID:PATH:OFFSET`.
pub fn wire_lockspace(text: &str) -> Result<Lockspace> {
    let s = LockspaceSpec::parse(text)?;
    Ok(Lockspace::new(
        s.name,
        s.host_id,
        &s.path.to_string_lossy(),
        s.offset,
    )?)
}

/// A wire lockspace naming only the lockspace (`NAME` or a full spec).
pub fn lockspace_by_name(text: &str) -> Result<Lockspace> {
    if text.contains(':') {
        return wire_lockspace(text);
    }
    Ok(Lockspace::new(Name::new(text)?, 0, "", 0)?)
}

/// A wire resource from `LS:RES:PATH:OFFSET[:PATH:OFFSET]…[:LVER|:SH]`.
pub fn wire_resource(text: &str) -> Result<Resource> {
    let r = ResourceSpec::parse(text)?;
    let mut flags = 0;
    if r.shared {
        flags |= SANLK_RES_SHARED;
    }
    if r.lver.is_some() {
        flags |= client_lib::proto::SANLK_RES_LVER;
    }
    Ok(Resource {
        head: ResourceHead {
            lockspace_name: r.lockspace,
            name: r.name,
            lver: r.lver.unwrap_or(0),
            data64: 0,
            data32: 0,
            unused: 0,
            flags,
            num_disks: r.disks.len() as u32,
        },
        disks: r
            .disks
            .iter()
            .map(|(path, offset)| DiskLocation::new(&path.to_string_lossy(), *offset))
            .collect::<Result<_, _>>()?,
    })
}

/// Prints a JSON value.
pub fn print_json(v: &serde_json::Value) {
    println!("{}", serde_json::to_string_pretty(v).unwrap_or_default());
}
