//! `lockd rindex …`: the resource index through the daemon (sanlock's `client format|
//! create|delete|lookup|update|rebuild -x RINDEX`). Works against lockd and sanlock alike.
//!
//! RINDEX is `LOCKSPACE:PATH:OFFSET`, the entry `-e NAME[:OFFSET]`; offsets take a K/M/G
//! suffix. create, delete and rebuild need the lockspace joined on this host (they take
//! the index's internal lease); lookup and update too, unless `--no-lockspace`.

use anyhow::{bail, Result};
use clap::{Args, Subcommand};
use client_lib::proto::{SANLK_RXUP_ADD, SANLK_RXUP_REM, SANLK_RX_NO_LOCKSPACE};
use client_lib::{Rentry, Rindex};
use disk_format::{AlignSize, Geometry, Name, SectorSize};
use serde_json::json;

use super::{check_rv, print_json, ConnArgs};
use crate::spec::{RentrySpec, RindexSpec};

#[derive(Debug, Subcommand)]
pub enum RindexCommand {
    /// Write an empty index (and its internal lease) at RINDEX. Refuses an offset off the
    /// align size, valid lease records there (unless --force), and (the daemon, even with
    /// --force) a lockspace it has joined or a lease it holds.
    Format(FormatArgs),
    /// Create a resource lease in the first free slot whose area holds no valid lease
    /// record (held or not) and index it.
    Create(EntryArgs),
    /// Remove a resource from the index and clear its lease.
    Delete(EntryArgs),
    /// Find a resource by name, the name at an offset, or (no -e) the first free slot.
    Lookup(LookupArgs),
    /// Add (or with -z 1 remove) one index entry without touching leases.
    Update(UpdateArgs),
    /// Rewrite the index from the resource leases found on disk.
    Rebuild(RebuildArgs),
}

#[derive(Debug, Args)]
pub struct Target {
    /// The index: LOCKSPACE:PATH:OFFSET.
    #[arg(short = 'x', long = "rindex")]
    pub rindex: String,
    #[command(flatten)]
    pub conn: ConnArgs,
}

#[derive(Debug, Args)]
pub struct FormatArgs {
    #[command(flatten)]
    pub target: Target,
    /// Sector size (512 or 4096); default from the device.
    #[arg(short = 'Z', long = "sector-size")]
    pub sector_size: Option<u32>,
    /// Align size (1M, 2M, 4M, 8M); default from the sector size.
    #[arg(short = 'A', long = "align-size")]
    pub align_size: Option<String>,
    /// Number of slots (0 = 4096; capped by the geometry).
    #[arg(long = "max-resources", default_value_t = 0)]
    pub max_resources: u32,
    /// Format even though the two areas written (index and rindex_lease) hold valid lease
    /// records, or cannot be read to check. The daemon still refuses (-EBUSY) to write
    /// over a lockspace it has joined or a lease it holds; an offset off the align-size
    /// boundary is refused either way.
    #[arg(long)]
    pub force: bool,
}

#[derive(Debug, Args)]
pub struct EntryArgs {
    #[command(flatten)]
    pub target: Target,
    /// NAME[:OFFSET] of the resource.
    #[arg(short = 'e', long = "entry")]
    pub entry: String,
}

#[derive(Debug, Args)]
pub struct LookupArgs {
    #[command(flatten)]
    pub target: Target,
    /// NAME, :OFFSET or NAME:OFFSET; without it, the first free slot.
    #[arg(short = 'e', long = "entry")]
    pub entry: Option<String>,
    /// Read the index without the joined lockspace.
    #[arg(long = "no-lockspace")]
    pub no_lockspace: bool,
}

#[derive(Debug, Args)]
pub struct UpdateArgs {
    #[command(flatten)]
    pub target: Target,
    /// NAME:OFFSET to add, or :OFFSET / NAME:OFFSET to remove with -z 1.
    #[arg(short = 'e', long = "entry")]
    pub entry: String,
    /// 1 removes the entry at OFFSET (sanlock's -z).
    #[arg(short = 'z', long = "clear", default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=1))]
    pub clear: u8,
    /// Update the index without the joined lockspace.
    #[arg(long = "no-lockspace")]
    pub no_lockspace: bool,
}

#[derive(Debug, Args)]
pub struct RebuildArgs {
    #[command(flatten)]
    pub target: Target,
    /// Rebuild without the joined lockspace and without the internal lease (only safe
    /// when no host uses the index).
    #[arg(long = "no-lockspace")]
    pub no_lockspace: bool,
}

fn wire_rindex(text: &str) -> Result<Rindex> {
    let s = RindexSpec::parse(text)?;
    Ok(Rindex::new(
        s.lockspace,
        &s.path.to_string_lossy(),
        s.offset,
    )?)
}

fn wire_entry(text: Option<&str>) -> Result<Rentry> {
    match text {
        None => Ok(Rentry::new(Name::EMPTY, 0)),
        Some(t) => {
            let e = RentrySpec::parse(t)?;
            Ok(Rentry::new(e.name, e.offset))
        }
    }
}

/// The `SANLK_RIF_*` flags for -Z/-A (the same bits as lockspace flags).
fn geometry_flags(sector: Option<u32>, align: Option<&str>) -> Result<u32> {
    let (Some(sector), align) = (sector, align) else {
        if align.is_some() {
            bail!("-A needs -Z");
        }
        return Ok(0);
    };
    let Some(ss) = SectorSize::from_bytes(sector) else {
        bail!("sector size {sector} is invalid: use 512 or 4096");
    };
    let g = match align {
        None => Geometry::default_for(ss),
        Some(text) => {
            let Some(a) = AlignSize::parse(text) else {
                bail!("align size {text:?} is invalid: use 1M, 2M, 4M or 8M");
            };
            Geometry::new(ss, a).map_err(|_| {
                anyhow::anyhow!("{sector}-byte sectors with align size {text} is not valid")
            })?
        }
    };
    Ok(g.api_flags())
}

fn report_entry(conn: &ConnArgs, op: &str, rv: i32, e: &Rentry) -> Result<()> {
    if conn.json {
        print_json(&json!({
            "op": op,
            "result": rv,
            "name": e.name.to_text(),
            "offset": e.offset,
        }));
    }
    check_rv(op, rv)?;
    if !conn.json {
        let name = if e.name.is_empty() {
            "-".to_string()
        } else {
            e.name.to_text()
        };
        println!("{op}: name {name} offset {}", e.offset);
    }
    Ok(())
}

fn report(conn: &ConnArgs, op: &str, rv: i32) -> Result<()> {
    if conn.json {
        print_json(&json!({ "op": op, "result": rv }));
    }
    check_rv(op, rv)?;
    if !conn.json {
        println!("{op}: done");
    }
    Ok(())
}

/// Before asking the daemon to format: the offset must be a multiple of the align size,
/// and (unless `--force`) the two areas written must hold no valid lease record. The
/// check reads the storage from this process, so a caller who cannot read it is told to
/// use `--force` (the daemon's own refusal of areas it uses stays).
fn check_format_target(a: &FormatArgs) -> Result<()> {
    use crate::direct::{refuse_misaligned, refuse_overwrite, resolve_geometry};
    use crate::disk::CheckedDisk;
    let s = RindexSpec::parse(&a.target.rindex)?;
    let disk = match CheckedDisk::open(&s.path, false) {
        Ok(d) => d,
        Err(e) if a.force => {
            eprintln!(
                "lockd: warning: not checking {} for lease records ({e}); --force given",
                s.path.display()
            );
            return Ok(());
        }
        Err(e) => bail!(
            "{:#}: the areas cannot be checked for lease records before formatting; use \
             --force to format without the check",
            anyhow::Error::from(e)
        ),
    };
    let g = resolve_geometry(&disk, a.sector_size, a.align_size.as_deref())?;
    refuse_misaligned(&disk, s.offset, g)?;
    refuse_overwrite(&disk, s.offset, 2 * g.align_bytes(), a.force)
}

pub fn run(cmd: &RindexCommand) -> Result<()> {
    match cmd {
        RindexCommand::Format(a) => {
            let mut rx = wire_rindex(&a.target.rindex)?;
            rx.flags = geometry_flags(a.sector_size, a.align_size.as_deref())?;
            check_format_target(a)?;
            rx.max_resources = a.max_resources;
            let rv = a.target.conn.connect()?.format_rindex(&rx, 0)?;
            if rv == -libc::EBUSY && !a.target.conn.json {
                bail!(
                    "format: the daemon refuses to write there: the two areas overlap a \
                     lockspace it has joined or a lease it holds (remove it first; --force \
                     does not override this) ({}, {rv})",
                    client_lib::describe_rv(rv)
                );
            }
            report(&a.target.conn, "format", rv)
        }
        RindexCommand::Rebuild(a) => {
            let rx = wire_rindex(&a.target.rindex)?;
            let flags = if a.no_lockspace {
                SANLK_RX_NO_LOCKSPACE
            } else {
                0
            };
            let rv = a.target.conn.connect()?.rebuild_rindex(&rx, flags)?;
            report(&a.target.conn, "rebuild", rv)
        }
        RindexCommand::Create(a) => {
            let rx = wire_rindex(&a.target.rindex)?;
            let re = wire_entry(Some(&a.entry))?;
            if re.name.is_empty() {
                bail!("create needs a resource name (-e NAME)");
            }
            let (rv, out) = a
                .target
                .conn
                .connect()?
                .create_resource(&rx, 0, &re, 0, 0)?;
            // sanlock replies only the offset; show the name we asked for.
            report_entry(
                &a.target.conn,
                "create",
                rv,
                &Rentry::new(re.name, out.offset),
            )
        }
        RindexCommand::Delete(a) => {
            let rx = wire_rindex(&a.target.rindex)?;
            let re = wire_entry(Some(&a.entry))?;
            if re.name.is_empty() {
                bail!("delete needs a resource name (-e NAME[:OFFSET])");
            }
            let (rv, _) = a.target.conn.connect()?.delete_resource(&rx, 0, &re)?;
            report(&a.target.conn, "delete", rv)
        }
        RindexCommand::Lookup(a) => {
            let rx = wire_rindex(&a.target.rindex)?;
            let re = wire_entry(a.entry.as_deref())?;
            let flags = if a.no_lockspace {
                SANLK_RX_NO_LOCKSPACE
            } else {
                0
            };
            let (rv, out) = a.target.conn.connect()?.lookup_rindex(&rx, flags, &re)?;
            report_entry(&a.target.conn, "lookup", rv, &out)
        }
        RindexCommand::Update(a) => {
            let rx = wire_rindex(&a.target.rindex)?;
            let re = wire_entry(Some(&a.entry))?;
            let mut flags = if a.clear == 1 {
                SANLK_RXUP_REM
            } else {
                SANLK_RXUP_ADD
            };
            if a.no_lockspace {
                flags |= SANLK_RX_NO_LOCKSPACE;
            }
            let (rv, out) = a.target.conn.connect()?.update_rindex(&rx, flags, &re)?;
            report_entry(&a.target.conn, "update", rv, &out)
        }
    }
}
