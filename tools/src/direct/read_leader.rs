//! `lockd direct read-leader -s LOCKSPACE | -r RESOURCE`: print one leader record with
//! every field, then verify it the way a joining host or an acquiring host would.

use anyhow::{bail, Result};
use clap::Args;
use disk_format::leader::{LeaderExpect, LeaderKind, LeaderRecord};
use disk_format::{rv, FormatError, Geometry};
use serde_json::json;

use crate::disk::CheckedDisk;
use crate::spec::{area_end, LockspaceSpec, ResourceSpec};

/// Arguments of `lockd direct read-leader`.
#[derive(Debug, Args)]
pub struct ReadLeaderArgs {
    /// Lockspace NAME:HOST_ID:PATH:OFFSET (host_id 0 reads host 1's record).
    #[arg(
        short = 's',
        long = "lockspace",
        conflicts_with = "resource",
        required_unless_present = "resource"
    )]
    pub lockspace: Option<String>,
    /// Resource LOCKSPACE:NAME:PATH:OFFSET[:PATH:OFFSET]... (each disk's leader).
    #[arg(short = 'r', long = "resource")]
    pub resource: Option<String>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: &ReadLeaderArgs) -> Result<()> {
    let (disks, kind, space, resource, host_id) = if let Some(t) = &args.lockspace {
        let s = LockspaceSpec::parse(t)?;
        (
            vec![(s.path, s.offset)],
            LeaderKind::Delta,
            s.name,
            None,
            s.host_id.max(1),
        )
    } else if let Some(t) = &args.resource {
        let r = ResourceSpec::parse(t)?;
        (r.disks, LeaderKind::Paxos, r.lockspace, Some(r.name), 0)
    } else {
        bail!("give -s LOCKSPACE or -r RESOURCE");
    };
    // A lease on several disks: each disk's leader, one after another, each under a
    // "disk N PATH:OFFSET" line (JSON: one object per disk with "disk", "path" and
    // "offset"); the first failure is reported after all were printed.
    let several = disks.len() > 1;
    let mut first_error = None;
    for (i, (path, offset)) in disks.iter().enumerate() {
        let at = several.then(|| (i, path.display().to_string(), *offset));
        if !args.json {
            if let Some((i, p, o)) = &at {
                println!("disk {i} {p}:{o}");
            }
        }
        let one = Target {
            path,
            offset: *offset,
            kind,
            space: &space,
            resource: resource.as_ref(),
            host_id,
        };
        if let Err(e) = read_one(&one, args.json, at.as_ref()) {
            first_error.get_or_insert(e);
        }
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// One leader to read and check.
struct Target<'a> {
    path: &'a std::path::Path,
    offset: u64,
    kind: LeaderKind,
    space: &'a disk_format::Name,
    resource: Option<&'a disk_format::Name>,
    host_id: u64,
}

fn read_one(t: &Target<'_>, json: bool, which: Option<&(usize, String, u64)>) -> Result<()> {
    let (path, offset, kind, host_id) = (t.path, t.offset, t.kind, t.host_id);
    let disk = CheckedDisk::open(path, false)?;
    let unit = disk.io_block();
    let first = disk.read(offset, unit.max(512) as usize)?;
    let first_leader = LeaderRecord::decode(first.as_slice())?;
    // Sector size comes from the first record; a bad one is reported by verify below.
    let geometry = Geometry::from_leader(first_leader.sector_size, first_leader.flags).ok();
    let leader = match (kind, geometry) {
        (LeaderKind::Delta, Some(g)) if host_id > 1 => {
            if host_id > g.max_hosts() {
                bail!(
                    "host_id {host_id} is above max_hosts {} of this {} lockspace",
                    g.max_hosts(),
                    g.label()
                );
            }
            // host_id is in 2..=max_hosts here, so the product is at most the area size.
            let at = area_end(offset, (host_id - 1) * g.sector_bytes())?;
            let buf = disk.read(at, g.sector_bytes().max(u64::from(unit)) as usize)?;
            LeaderRecord::decode(buf.as_slice())?
        }
        _ => first_leader,
    };
    let expect = LeaderExpect {
        sector_size: geometry.map(|g| g.sector_size.bytes()),
        space_name: Some(t.space),
        resource_name: t.resource,
    };
    let verdict = leader.verify(kind, &expect);
    print(&leader, json, &verdict, which);
    if let Err(e) = verdict {
        bail!("{} ({}): {e}", code_name(&e), e.sanlk_code());
    }
    Ok(())
}

fn code_name(e: &FormatError) -> &'static str {
    rv::name(e.sanlk_code()).unwrap_or("EINVAL")
}

fn print(
    l: &LeaderRecord,
    as_json: bool,
    verdict: &Result<(), FormatError>,
    disk: Option<&(usize, String, u64)>,
) {
    if as_json {
        let mut v = json!({
            "magic": format!("0x{:08x}", l.magic),
            "version": format!("0x{:08x}", l.version),
            "flags": l.flags,
            "sector_size": l.sector_size,
            "num_hosts": l.num_hosts,
            "max_hosts": l.max_hosts,
            "owner_id": l.owner_id,
            "owner_generation": l.owner_generation,
            "lver": l.lver,
            "space_name": l.space_name.to_text(),
            "resource_name": l.resource_name.to_text(),
            "timestamp": l.timestamp,
            "checksum": format!("0x{:08x}", l.checksum),
            "io_timeout": l.io_timeout,
            "write_id": l.write_id,
            "write_generation": l.write_generation,
            "write_timestamp": l.write_timestamp,
            "valid": verdict.is_ok(),
            "error": verdict.as_ref().err().map(|e| e.to_string()),
        });
        if let Some((i, path, offset)) = disk {
            v["disk"] = json!(i);
            v["path"] = json!(path);
            v["offset"] = json!(offset);
        }
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
        return;
    }
    println!("magic 0x{:08x}", l.magic);
    println!("version 0x{:08x}", l.version);
    println!("flags 0x{:x}", l.flags);
    println!("sector_size {}", l.sector_size);
    println!("num_hosts {}", l.num_hosts);
    println!("max_hosts {}", l.max_hosts);
    println!("owner_id {}", l.owner_id);
    println!("owner_generation {}", l.owner_generation);
    println!("lver {}", l.lver);
    println!("space_name {}", l.space_name);
    println!("resource_name {}", l.resource_name);
    println!("timestamp {}", l.timestamp);
    println!("checksum 0x{:08x}", l.checksum);
    println!("io_timeout {}", l.io_timeout);
    println!("write_id {}", l.write_id);
    println!("write_generation {}", l.write_generation);
    println!("write_timestamp {}", l.write_timestamp);
}
