//! `lockd direct dump PATH[:OFFSET[:SIZE]]`: walk lease areas and list every non-empty
//! record — lockspace host records, resource leaders with their shared holders and
//! request record, and rindex entries — as a table or as JSON.
//!
//! Areas are found by their magic at 1 MiB steps (the smallest align size); a
//! recognised area is skipped by its own align size. Records that fail verification are
//! listed with the reason rather than hidden, also when they look empty (timestamp 0).

use anyhow::{bail, Result};
use clap::Args;
use disk_format::area::{ballot_read_sectors, dblock_sector, REQUEST_SECTOR};
use disk_format::dblock::decode_dblock_sector;
use disk_format::leader::{
    LeaderExpect, LeaderKind, LeaderRecord, DELTA_DISK_MAGIC, PAXOS_DISK_CLEAR, PAXOS_DISK_MAGIC,
};
use disk_format::rindex::{RindexEntry, RindexHeader, RINDEX_DISK_MAGIC, RINDEX_ENTRY_LEN};
use disk_format::{DeltaSector, Geometry, RequestRecord};
use serde::Serialize;

use crate::disk::CheckedDisk;
use crate::spec::{area_end, AreaSpec};
use lockd_diskio::AlignedBuf;

const SCAN_STEP: u64 = 1 << 20;

/// Arguments of `lockd direct dump`.
#[derive(Debug, Args)]
pub struct DumpArgs {
    /// PATH[:OFFSET[:SIZE]] to scan (default: the whole device or file).
    pub target: String,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Serialize)]
pub struct HostRecord {
    pub host_id: u64,
    pub owner_id: u64,
    pub generation: u64,
    pub timestamp: u64,
    pub io_timeout: u16,
    pub host_name: String,
    pub bitmap_hosts: Vec<u64>,
    pub event: Option<[u64; 3]>,
    pub error: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct SharedHolder {
    pub host_id: u64,
    pub generation: u64,
}

#[derive(Debug, Serialize)]
pub struct DblockRow {
    pub host_id: u64,
    pub mbal: u64,
    pub bal: u64,
    pub inp: u64,
    pub inp2: u64,
    pub inp3: u64,
    pub lver: u64,
    pub released: bool,
    pub error: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct RequestRow {
    pub lver: u64,
    pub force_mode: u32,
}

#[derive(Debug, Serialize)]
pub struct EntryRow {
    pub index: u64,
    pub name: String,
    pub offset: u64,
    pub flags: u32,
}

#[derive(Debug, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Area {
    Lockspace {
        offset: u64,
        lockspace: String,
        geometry: String,
        sector_size: u32,
        align_size: u64,
        hosts: Vec<HostRecord>,
    },
    Resource {
        offset: u64,
        lockspace: String,
        resource: String,
        geometry: String,
        sector_size: u32,
        align_size: u64,
        cleared: bool,
        num_hosts: u64,
        owner_id: u64,
        owner_generation: u64,
        lver: u64,
        timestamp: u64,
        short_hold: bool,
        write_id: u64,
        write_generation: u64,
        write_timestamp: u64,
        shared: Vec<SharedHolder>,
        request: Option<RequestRow>,
        dblocks: Vec<DblockRow>,
        error: Option<String>,
    },
    Rindex {
        offset: u64,
        lockspace: String,
        geometry: String,
        max_resources: u32,
        entries: Vec<EntryRow>,
    },
    Damaged {
        offset: u64,
        error: String,
    },
}

pub fn run(args: &DumpArgs) -> Result<()> {
    let spec = AreaSpec::parse(&args.target)?;
    let disk = CheckedDisk::open(&spec.path, false)?;
    let areas = scan(&disk, spec.offset, spec.size)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&areas)?);
    } else {
        print_table(&spec, &areas);
    }
    let damaged: Vec<String> = areas.iter().flat_map(Area::damage).collect();
    if let Some(first) = damaged.first() {
        bail!("{} damaged record(s); first at {first}", damaged.len());
    }
    Ok(())
}

impl Area {
    /// Every record of the area that failed its checks, as "offset N[, what]: error".
    fn damage(&self) -> Vec<String> {
        match self {
            Area::Damaged { offset, error } => vec![format!("offset {offset}: {error}")],
            Area::Lockspace { offset, hosts, .. } => hosts
                .iter()
                .filter_map(|h| {
                    let e = h.error.as_ref()?;
                    Some(format!("offset {offset}, host_id {}: {e}", h.host_id))
                })
                .collect(),
            Area::Resource {
                offset,
                dblocks,
                error,
                ..
            } => error
                .iter()
                .map(|e| format!("offset {offset}, leader: {e}"))
                .chain(dblocks.iter().filter_map(|d| {
                    let e = d.error.as_ref()?;
                    Some(format!("offset {offset}, dblock {}: {e}", d.host_id))
                }))
                .collect(),
            Area::Rindex { .. } => Vec::new(),
        }
    }
}

/// Scans `[offset, offset+size)` and returns the recognised areas in order.
pub fn scan(disk: &CheckedDisk, offset: u64, size: Option<u64>) -> Result<Vec<Area>> {
    let unit = u64::from(disk.io_block());
    if !offset.is_multiple_of(unit) {
        bail!(
            "{}: offset {offset} is not a multiple of the {unit}-byte sector size",
            disk.path().display()
        );
    }
    let end = match size {
        Some(s) => offset.saturating_add(s).min(disk.size()),
        None => disk.size(),
    };
    if offset >= disk.size() {
        bail!(
            "{}: offset {offset} is at or past the end ({} bytes)",
            disk.path().display(),
            disk.size()
        );
    }
    let mut areas = Vec::new();
    let mut pos = offset;
    while pos < end {
        // pos < end <= size, so no underflow.
        let probe = 4096u64.min(disk.size() - pos) / unit * unit;
        if probe < 512 {
            break;
        }
        let head = disk.read(pos, probe as usize)?;
        let leader = LeaderRecord::decode(head.as_slice())?;
        let step = match leader.magic {
            DELTA_DISK_MAGIC | PAXOS_DISK_MAGIC | PAXOS_DISK_CLEAR | RINDEX_DISK_MAGIC => {
                match area_at(disk, pos, &leader, head.as_slice()) {
                    Ok((area, step)) => {
                        areas.push(area);
                        step
                    }
                    Err(e) => {
                        areas.push(Area::Damaged {
                            offset: pos,
                            error: format!("{e:#}"),
                        });
                        SCAN_STEP
                    }
                }
            }
            _ => SCAN_STEP,
        };
        pos = pos.saturating_add(step);
    }
    Ok(areas)
}

fn geometry_of(leader: &LeaderRecord) -> Result<Geometry> {
    Geometry::from_leader(leader.sector_size, leader.flags).map_err(|e| {
        anyhow::anyhow!(
            "leader records sector size {} and flags 0x{:x}: {e}",
            leader.sector_size,
            leader.flags
        )
    })
}

fn read_area(disk: &CheckedDisk, pos: u64, len: u64) -> Result<AlignedBuf> {
    if area_end(pos, len)? > disk.size() {
        bail!(
            "area at offset {pos} needs {len} bytes but the device ends after {} (truncated)",
            disk.size().saturating_sub(pos)
        );
    }
    Ok(disk.read(pos, len as usize)?)
}

fn area_at(
    disk: &CheckedDisk,
    pos: u64,
    leader: &LeaderRecord,
    head: &[u8],
) -> Result<(Area, u64)> {
    if leader.magic == RINDEX_DISK_MAGIC {
        return rindex_at(disk, pos, head);
    }
    let geometry = geometry_of(leader)?;
    let sector = geometry.sector_bytes();
    if leader.magic == DELTA_DISK_MAGIC {
        let area = read_area(disk, pos, geometry.align_bytes())?;
        let expect = LeaderExpect {
            sector_size: Some(geometry.sector_size.bytes()),
            space_name: Some(&leader.space_name),
            resource_name: None,
        };
        let mut hosts = Vec::new();
        for i in 0..geometry.max_hosts() {
            let s = &area.as_slice()[(i * sector) as usize..((i + 1) * sector) as usize];
            let rec = DeltaSector::decode(s)?;
            let l = rec.leader;
            let error = l
                .verify(LeaderKind::Delta, &expect)
                .err()
                .map(|e| e.to_string());
            // Only a record that passes its checks may be hidden as "never joined": a bad
            // checksum, magic or version with timestamp 0 is damage, and is listed.
            if error.is_none() && l.owner_id == 0 && l.timestamp == 0 {
                continue;
            }
            let bitmap_hosts = rec.hosts_in_bitmap();
            hosts.push(HostRecord {
                host_id: i + 1,
                owner_id: l.owner_id,
                generation: l.owner_generation,
                timestamp: l.timestamp,
                io_timeout: l.io_timeout,
                host_name: l.resource_name.to_text(),
                event: (l.write_generation != 0).then_some([
                    l.write_id,
                    l.write_generation,
                    l.write_timestamp,
                ]),
                bitmap_hosts,
                error,
            });
        }
        let area = Area::Lockspace {
            offset: pos,
            lockspace: leader.space_name.to_text(),
            geometry: geometry.label(),
            sector_size: geometry.sector_size.bytes(),
            align_size: geometry.align_bytes(),
            hosts,
        };
        return Ok((area, geometry.align_bytes()));
    }
    // Paxos lease (valid or cleared).
    let cleared = leader.magic == PAXOS_DISK_CLEAR;
    let error = if cleared {
        None
    } else {
        leader
            .verify(
                LeaderKind::Paxos,
                &LeaderExpect {
                    sector_size: Some(geometry.sector_size.bytes()),
                    ..LeaderExpect::default()
                },
            )
            .err()
            .map(|e| e.to_string())
    };
    let num_hosts = if leader.num_hosts == 0 || leader.num_hosts > geometry.max_hosts() {
        geometry.max_hosts()
    } else {
        leader.num_hosts
    };
    let read_sectors = ballot_read_sectors(num_hosts).min(geometry.sectors_per_area());
    let area = read_area(disk, pos, read_sectors * sector)?;
    let bytes = area.as_slice();
    let req_bytes = &bytes[(REQUEST_SECTOR * sector) as usize..];
    let req = RequestRecord::decode(req_bytes)?;
    let request =
        (req.verify().is_ok() && (req.lver != 0 || req.force_mode != 0)).then_some(RequestRow {
            lver: req.lver,
            force_mode: req.force_mode,
        });
    let mut shared = Vec::new();
    let mut dblocks = Vec::new();
    for host_id in 1..=num_hosts {
        let s = dblock_sector(host_id);
        if s >= read_sectors {
            break;
        }
        let sb = &bytes[(s * sector) as usize..((s + 1) * sector) as usize];
        let (d, m) = decode_dblock_sector(sb)?;
        if m.is_shared() {
            shared.push(SharedHolder {
                host_id,
                generation: m.generation,
            });
        }
        if !d.is_blank() || d.flags != 0 {
            dblocks.push(DblockRow {
                host_id,
                mbal: d.mbal,
                bal: d.bal,
                inp: d.inp,
                inp2: d.inp2,
                inp3: d.inp3,
                lver: d.lver,
                released: d.is_released(),
                error: d.verify().err().map(|e| e.to_string()),
            });
        }
    }
    let area = Area::Resource {
        offset: pos,
        lockspace: leader.space_name.to_text(),
        resource: leader.resource_name.to_text(),
        geometry: geometry.label(),
        sector_size: geometry.sector_size.bytes(),
        align_size: geometry.align_bytes(),
        cleared,
        num_hosts,
        owner_id: leader.owner_id,
        owner_generation: leader.owner_generation,
        lver: leader.lver,
        timestamp: leader.timestamp,
        short_hold: leader.flags & disk_format::leader::LFL_SHORT_HOLD != 0,
        write_id: leader.write_id,
        write_generation: leader.write_generation,
        write_timestamp: leader.write_timestamp,
        shared,
        request,
        dblocks,
        error,
    };
    Ok((area, geometry.align_bytes()))
}

fn rindex_at(disk: &CheckedDisk, pos: u64, head: &[u8]) -> Result<(Area, u64)> {
    let h = RindexHeader::decode(head)?;
    h.verify(None, Some(pos))?;
    let flags_as_leader = (h.flags & 0xF) << 4;
    let geometry = Geometry::from_leader(h.sector_size, flags_as_leader)?;
    let area = read_area(disk, pos, geometry.align_bytes())?;
    let bytes = &area.as_slice()[geometry.sector_bytes() as usize..];
    let max = (bytes.len() / RINDEX_ENTRY_LEN) as u64;
    let mut entries = Vec::new();
    for i in 0..u64::from(h.max_resources).min(max) {
        let e = RindexEntry::decode(&bytes[(i as usize) * RINDEX_ENTRY_LEN..])?;
        if !e.is_free() {
            entries.push(EntryRow {
                index: i,
                name: e.name.to_text(),
                offset: e.res_offset,
                flags: e.flags,
            });
        }
    }
    let area = Area::Rindex {
        offset: pos,
        lockspace: h.lockspace_name.to_text(),
        geometry: geometry.label(),
        max_resources: h.max_resources,
        entries,
    };
    Ok((area, geometry.align_bytes()))
}

fn print_table(spec: &AreaSpec, areas: &[Area]) {
    if areas.is_empty() {
        println!("{}: no lease areas found", spec.path.display());
        return;
    }
    for area in areas {
        match area {
            Area::Lockspace {
                offset,
                lockspace,
                geometry,
                hosts,
                ..
            } => {
                println!("{offset:>12}  lockspace {lockspace}  ({geometry})");
                if hosts.is_empty() {
                    println!("{:>14}no host has joined", "");
                    continue;
                }
                println!(
                    "{:>14}{:>7} {:>8} {:>10} {:>12} {:>4}  host_name",
                    "", "host_id", "owner", "generation", "timestamp", "io"
                );
                for h in hosts {
                    let state = match (&h.error, h.timestamp) {
                        (Some(_), _) => " (damaged)",
                        (None, 0) => " (free)",
                        (None, _) => "",
                    };
                    println!(
                        "{:>14}{:>7} {:>8} {:>10} {:>12} {:>4}  {}{state}{}",
                        "",
                        h.host_id,
                        h.owner_id,
                        h.generation,
                        h.timestamp,
                        h.io_timeout,
                        h.host_name,
                        h.error
                            .as_ref()
                            .map(|e| format!("  ERROR: {e}"))
                            .unwrap_or_default()
                    );
                }
            }
            Area::Resource {
                offset,
                lockspace,
                resource,
                geometry,
                cleared,
                owner_id,
                owner_generation,
                lver,
                timestamp,
                shared,
                request,
                error,
                ..
            } => {
                let owner = if *cleared {
                    "cleared (PAXOS_DISK_CLEAR)".to_string()
                } else if *timestamp != 0 {
                    format!("owner {owner_id} gen {owner_generation} timestamp {timestamp}")
                } else {
                    "free".to_string()
                };
                println!("{offset:>12}  resource {lockspace}:{resource}  ({geometry})  lver {lver}  {owner}");
                if !shared.is_empty() {
                    let list: Vec<String> = shared
                        .iter()
                        .map(|s| format!("{}/{}", s.host_id, s.generation))
                        .collect();
                    println!("{:>14}shared holders (host/gen): {}", "", list.join(" "));
                }
                if let Some(r) = request {
                    println!(
                        "{:>14}request: lver {} force_mode {}",
                        "", r.lver, r.force_mode
                    );
                }
                if let Some(e) = error {
                    println!("{:>14}ERROR: {e}", "");
                }
            }
            Area::Rindex {
                offset,
                lockspace,
                geometry,
                max_resources,
                entries,
            } => {
                println!("{offset:>12}  rindex {lockspace}  ({geometry})  max_resources {max_resources}  entries {}", entries.len());
                for e in entries {
                    println!("{:>14}{:>6} {:>14} {}", "", e.index, e.offset, e.name);
                }
            }
            Area::Damaged { offset, error } => {
                println!("{offset:>12}  DAMAGED: {error}");
            }
        }
    }
}
