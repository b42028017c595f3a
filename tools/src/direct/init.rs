//! `lockd direct init`: format a lockspace or a resource lease area exactly as
//! `sanlock direct init` does.
//!
//! Safety rules (docs/operations.md, "Commands that write to disk"): the offset must be a
//! multiple of the align size (refused outright otherwise, even with `--force`); the local
//! daemon must not have joined or hold the area (asked with STATUS; refused even with
//! `--force`); and the area written must hold no valid lease record (a delta or paxos
//! leader, a written ballot, a resource-index header) unless `--force` is given.

use anyhow::{bail, Context, Result};
use clap::Args;
use disk_format::area::{format_lockspace_area, format_resource_area, ResourceInit};
use disk_format::Geometry;

use super::{refuse_local_daemon_use, refuse_misaligned, refuse_overwrite, resolve_geometry};
use crate::disk::CheckedDisk;
use crate::spec::{area_end, LockspaceSpec, ResourceSpec};

/// Arguments of `lockd direct init`.
#[derive(Debug, Args)]
pub struct InitArgs {
    /// Lockspace to format: NAME:0:PATH:OFFSET.
    #[arg(
        short = 's',
        long = "lockspace",
        conflicts_with = "resource",
        required_unless_present = "resource"
    )]
    pub lockspace: Option<String>,
    /// Resource lease to format: LOCKSPACE:NAME:PATH:OFFSET.
    #[arg(short = 'r', long = "resource")]
    pub resource: Option<String>,
    /// Sector size: 512 or 4096 (default: the device's logical sector size, 512 for files).
    #[arg(short = 'Z', long = "sector-size")]
    pub sector_size: Option<u32>,
    /// Area size: 1M, 2M, 4M or 8M (default: 1M for 512-byte sectors, 8M for 4096).
    #[arg(short = 'A', long = "align")]
    pub align: Option<String>,
    /// io_timeout in seconds recorded in a lockspace's host records (default 10).
    #[arg(short = 'o', long = "io-timeout")]
    pub io_timeout_s: Option<u16>,
    /// Number of host slots a resource uses (default: the geometry's max_hosts).
    #[arg(short = 'N', long = "num-hosts")]
    pub num_hosts: Option<u64>,
    /// Write a deliberately invalid (PAXOS_DISK_CLEAR) resource leader.
    #[arg(long = "clear", short = 'z')]
    pub clear: bool,
    /// Write even though the area holds valid lease records (a lockspace, a resource
    /// lease with its ballots, a resource index). Without it such an area is refused.
    /// Never allows an offset off the align-size boundary, nor an area the local daemon
    /// has joined or holds.
    #[arg(long)]
    pub force: bool,
}

pub fn run(args: &InitArgs) -> Result<()> {
    if let Some(text) = &args.lockspace {
        let spec = LockspaceSpec::parse(text)?;
        init_lockspace(args, &spec)
    } else if let Some(text) = &args.resource {
        let spec = ResourceSpec::parse(text)?;
        init_resource(args, &spec)
    } else {
        bail!("give -s LOCKSPACE or -r RESOURCE")
    }
}

fn open_checked(
    path: &std::path::Path,
    offset: u64,
    geometry_of: impl Fn(&CheckedDisk) -> Result<Geometry>,
) -> Result<(CheckedDisk, Geometry)> {
    let disk = CheckedDisk::open(path, true)?;
    let geometry = geometry_of(&disk)?;
    if !offset.is_multiple_of(geometry.sector_bytes())
        || !offset.is_multiple_of(u64::from(disk.io_block()))
    {
        bail!(
            "{}: offset {offset} is not a multiple of the {}-byte sector size",
            path.display(),
            geometry.sector_bytes()
        );
    }
    let end = area_end(offset, geometry.align_bytes())
        .with_context(|| format!("{}: no room for a lease area", path.display()))?;
    if disk.is_block_device() && end > disk.size() {
        bail!(
            "{}: a {}-byte area at offset {offset} goes past the end of the device ({} bytes)",
            path.display(),
            geometry.align_bytes(),
            disk.size()
        );
    }
    refuse_misaligned(&disk, offset, geometry)?;
    Ok((disk, geometry))
}

fn init_lockspace(args: &InitArgs, spec: &LockspaceSpec) -> Result<()> {
    if args.clear {
        bail!("--clear applies to resources only");
    }
    if args.num_hosts.is_some() {
        eprintln!("lockd: note: -N/--num-hosts applies to resources; a lockspace always has max_hosts slots");
    }
    let io_timeout_s = args
        .io_timeout_s
        .unwrap_or(disk_format::area::DEFAULT_IO_TIMEOUT_S);
    if io_timeout_s == 0 || io_timeout_s > 255 {
        bail!("io_timeout {io_timeout_s} is out of range (1..=255 seconds)");
    }
    let (disk, geometry) = open_checked(&spec.path, spec.offset, |d| {
        resolve_geometry(d, args.sector_size, args.align.as_deref())
    })?;
    refuse_local_daemon_use(&disk, spec.offset, geometry.align_bytes())?;
    refuse_overwrite(&disk, spec.offset, geometry.align_bytes(), args.force)?;
    let format = format_lockspace_area(geometry, &spec.name, io_timeout_s);
    let unit = geometry.sector_size.bytes();
    disk.write(spec.offset, &format.area, unit)?;
    disk.write(spec.offset, &format.first_sector, unit)?;
    println!(
        "initialized lockspace {:?} at {}:{} ({}, max_hosts {}, io_timeout {}s)",
        spec.name.to_text(),
        spec.path.display(),
        spec.offset,
        geometry.label(),
        geometry.max_hosts(),
        io_timeout_s
    );
    Ok(())
}

fn init_resource(args: &InitArgs, spec: &ResourceSpec) -> Result<()> {
    if args.io_timeout_s.is_some() {
        eprintln!(
            "lockd: note: -o/--io-timeout applies to lockspaces; resource leaders record none"
        );
    }
    if spec.lver.is_some() || spec.shared {
        bail!("a resource to format takes no :LVER or :SH suffix");
    }
    // Every disk of the lease checked before any is written (sanlock writes each and
    // fails on the first error); one geometry for all of them.
    let mut planned: Vec<(CheckedDisk, Geometry, u64, String)> =
        Vec::with_capacity(spec.disks.len());
    for (path, offset) in &spec.disks {
        let (disk, geometry) = open_checked(path, *offset, |d| {
            resolve_geometry(d, args.sector_size, args.align.as_deref())
        })?;
        refuse_local_daemon_use(&disk, *offset, geometry.align_bytes())?;
        refuse_overwrite(&disk, *offset, geometry.align_bytes(), args.force)?;
        if let Some((_, g0, _, first)) = planned.first() {
            if *g0 != geometry {
                bail!(
                    "{} is {} but {} is {}: the disks of a lease need one geometry",
                    path.display(),
                    geometry.label(),
                    first,
                    g0.label()
                );
            }
        }
        planned.push((disk, geometry, *offset, path.display().to_string()));
    }
    let clear_at = args.clear.then(lockd_diskio::monotime);
    for (disk, geometry, offset, path) in &planned {
        let init = ResourceInit {
            geometry: *geometry,
            space_name: spec.lockspace,
            resource_name: spec.name,
            num_hosts: args.num_hosts.unwrap_or(0),
            clear_at_monotime_s: clear_at,
        };
        let area = format_resource_area(&init);
        disk.write(*offset, &area, geometry.sector_size.bytes())?;
        println!(
            "initialized {}resource {:?} in lockspace {:?} at {}:{} ({}, max_hosts {})",
            if args.clear { "cleared " } else { "" },
            spec.name.to_text(),
            spec.lockspace.to_text(),
            path,
            offset,
            geometry.label(),
            geometry.max_hosts()
        );
    }
    Ok(())
}
