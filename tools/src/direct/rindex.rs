//! `lockd direct format|lookup|update|rebuild -x LOCKSPACE:PATH:OFFSET`: the resource
//! index on storage without a daemon, as `sanlock direct` does it (lease-core `rindex`).
//!
//! Without a daemon there is no lockspace and no host_id, so nothing here takes the
//! index's internal lease: update and rebuild are only safe while no host uses the index
//! (sanlock's direct commands have the same rule). A refused operation writes nothing.
//!
//! `format` refuses an offset that is not a multiple of the align size and areas the local
//! daemon has joined or holds, and without `--force` refuses to write over valid lease
//! records in the two areas it writes (docs/operations.md, "Commands that write to disk").

use std::path::Path;

use anyhow::{anyhow, Result};
use clap::Args;
use client_lib::describe_rv;
use lease_core::exec::block_on;
use lease_core::rindex::{self, RindexError, RindexParams, RindexSlot, UpdateOp};
use lockd_diskio::BlockingDisk;
use serde_json::json;

use crate::disk::CheckedDisk;
use crate::spec::{RentrySpec, RindexSpec};

/// io_timeout of direct index I/O (sanlock's default).
const IO_TIMEOUT_S: u16 = 10;

#[derive(Debug, Args)]
pub struct DirectFormatArgs {
    /// The index: LOCKSPACE:PATH:OFFSET (OFFSET takes K/M/G).
    #[arg(short = 'x', long = "rindex")]
    pub rindex: String,
    /// Sector size (512 or 4096); default from the device.
    #[arg(short = 'Z', long = "sector-size")]
    pub sector_size: Option<u32>,
    /// Align size (1M, 2M, 4M, 8M); default from the sector size.
    #[arg(short = 'A', long = "align-size")]
    pub align_size: Option<String>,
    /// Number of slots (0 = 4096, capped by the geometry).
    #[arg(long = "max-resources", default_value_t = 0)]
    pub max_resources: u32,
    /// Format even though the two areas written (index and rindex_lease) hold valid lease
    /// records (a lockspace, resource leases, an index). Never allows an offset off the
    /// align-size boundary, nor areas the local daemon has joined or holds.
    #[arg(long)]
    pub force: bool,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct DirectLookupArgs {
    /// The index: LOCKSPACE:PATH:OFFSET.
    #[arg(short = 'x', long = "rindex")]
    pub rindex: String,
    /// NAME, :OFFSET or NAME:OFFSET; without it, the first free slot.
    #[arg(short = 'e', long = "entry")]
    pub entry: Option<String>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct DirectUpdateArgs {
    /// The index: LOCKSPACE:PATH:OFFSET.
    #[arg(short = 'x', long = "rindex")]
    pub rindex: String,
    /// NAME:OFFSET to add; with -z 1, [NAME]:OFFSET to remove.
    #[arg(short = 'e', long = "entry")]
    pub entry: String,
    /// 1 removes the entry (sanlock's -z).
    #[arg(short = 'z', long = "clear", default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=1))]
    pub clear: u8,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct DirectRebuildArgs {
    /// The index: LOCKSPACE:PATH:OFFSET.
    #[arg(short = 'x', long = "rindex")]
    pub rindex: String,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Opens the index's device for O_DIRECT I/O; failure carries the errno, as sanlock's.
fn open(op: &str, path: &Path) -> Result<BlockingDisk> {
    let disk = lockd_diskio::DirectDisk::open(path)
        .map_err(|e| coded(op, format!("{}: cannot open", path.display()), e.rv()))?;
    Ok(BlockingDisk::new(disk))
}

fn params(s: &RindexSpec) -> RindexParams {
    RindexParams {
        space_name: s.lockspace,
        disk_offset: s.offset,
        io_timeout: IO_TIMEOUT_S,
    }
}

/// "OP: what (SANLK_NAME, code)": one line, as the other direct commands fail.
fn coded(op: &str, what: impl std::fmt::Display, rv: i32) -> anyhow::Error {
    anyhow!("{op}: {what} ({}, {rv})", describe_rv(rv))
}

fn fail(op: &str, e: &RindexError) -> anyhow::Error {
    coded(op, e, e.sanlk_code())
}

/// The -x and -e arguments, parsed; a malformed one (e.g. a name over 48 bytes, which
/// sanlock would silently truncate) fails like an index error, with -EINVAL's code.
fn parse_args(op: &str, rindex: &str, entry: Option<&str>) -> Result<(RindexSpec, RentrySpec)> {
    let parsed =
        RindexSpec::parse(rindex).and_then(|s| Ok((s, RentrySpec::parse(entry.unwrap_or(""))?)));
    parsed.map_err(|e| coded(op, format!("{e:#}"), -libc::EINVAL))
}

fn print_entry(json: bool, op: &str, e: &RindexSlot) {
    if json {
        println!(
            "{}",
            json!({ "op": op, "name": e.name.to_text(), "offset": e.offset })
        );
    } else {
        let name = if e.name.is_empty() {
            "-".to_string()
        } else {
            e.name.to_text()
        };
        println!("name {name} offset {}", e.offset);
    }
}

pub fn format(a: &DirectFormatArgs) -> Result<()> {
    let (s, _) = parse_args("format", &a.rindex, None)?;
    let disk = open("format", &s.path)?;
    let geometry = {
        let probe = CheckedDisk::open(&s.path, false)?;
        let g = super::resolve_geometry(&probe, a.sector_size, a.align_size.as_deref())
            .map_err(|e| coded("format", format!("{e:#}"), -libc::EINVAL))?;
        super::refuse_misaligned(&probe, s.offset, g)
            .map_err(|e| coded("format", format!("{e:#}"), -libc::EINVAL))?;
        // The index area and the rindex_lease area after it.
        let len = 2 * g.align_bytes();
        super::refuse_local_daemon_use(&probe, s.offset, len)
            .and_then(|()| super::refuse_overwrite(&probe, s.offset, len, a.force))
            .map_err(|e| coded("format", format!("{e:#}"), -libc::EBUSY))?;
        g
    };
    let rx = block_on(rindex::format(
        &disk,
        &params(&s),
        geometry,
        a.max_resources,
    ))
    .map_err(|e| fail("format", &e))?;
    if a.json {
        println!(
            "{}",
            json!({
                "op": "format",
                "sector_size": geometry.sector_bytes(),
                "align_size": geometry.align_bytes(),
                "max_resources": rx.max_resources,
                "first_resource_offset": rx.slot_offset(0),
            })
        );
    } else {
        println!(
            "formatted resource index of {} at {}:{} ({}/{}, {} resources from offset {})",
            s.lockspace,
            s.path.display(),
            s.offset,
            geometry.sector_bytes(),
            geometry.align_size.label(),
            rx.max_resources,
            rx.slot_offset(0)
        );
    }
    Ok(())
}

pub fn lookup(a: &DirectLookupArgs) -> Result<()> {
    let (s, e) = parse_args("lookup", &a.rindex, a.entry.as_deref())?;
    let disk = open("lookup", &s.path)?;
    let name = (!e.name.is_empty()).then_some(&e.name);
    let found = block_on(rindex::lookup(&disk, &params(&s), name, e.offset))
        .map_err(|err| fail("lookup", &err))?;
    print_entry(a.json, "lookup", &found);
    Ok(())
}

pub fn update(a: &DirectUpdateArgs) -> Result<()> {
    let (s, e) = parse_args("update", &a.rindex, Some(&a.entry))?;
    let op = if a.clear == 1 {
        UpdateOp::Remove { offset: e.offset }
    } else {
        UpdateOp::Add {
            name: e.name,
            offset: e.offset,
        }
    };
    let disk = open("update", &s.path)?;
    let out =
        block_on(rindex::update(&disk, &params(&s), op)).map_err(|err| fail("update", &err))?;
    let shown = if a.clear == 1 {
        RindexSlot {
            name: e.name,
            offset: e.offset,
        }
    } else {
        out
    };
    if a.json {
        print_entry(true, if a.clear == 1 { "remove" } else { "add" }, &shown);
    } else {
        println!(
            "{} {} at offset {}",
            if a.clear == 1 { "removed" } else { "added" },
            if shown.name.is_empty() {
                "-".to_string()
            } else {
                shown.name.to_text()
            },
            shown.offset
        );
    }
    Ok(())
}

pub fn rebuild(a: &DirectRebuildArgs) -> Result<()> {
    let (s, _) = parse_args("rebuild", &a.rindex, None)?;
    let disk = open("rebuild", &s.path)?;
    let device_len = disk.disk.size();
    let found = block_on(rindex::rebuild_unlocked(&disk, &params(&s), device_len))
        .map_err(|e| fail("rebuild", &e))?;
    if a.json {
        let entries: Vec<_> = found
            .iter()
            .map(|e| json!({ "name": e.name.to_text(), "offset": e.offset }))
            .collect();
        println!("{}", json!({ "op": "rebuild", "entries": entries }));
    } else {
        println!("rebuilt: {} resources indexed", found.len());
        for e in &found {
            print_entry(false, "rebuild", e);
        }
    }
    Ok(())
}
