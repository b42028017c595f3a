//! `lockd direct …`: read and write lease areas on storage without a daemon, byte
//! compatible with `sanlock direct`.

pub mod dump;
pub mod init;
pub mod pr;
pub mod read_leader;
pub mod rindex;

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use disk_format::leader::{LeaderRecord, DELTA_DISK_MAGIC, PAXOS_DISK_MAGIC};
use disk_format::scan::{describe, find_records, leader_align_bytes, FoundRecord};
use disk_format::{AlignSize, Geometry, SectorSize};

use crate::disk::CheckedDisk;

/// Picks the geometry from `-Z`/`-A` and the device, as sanlock does when a flag is
/// missing: sector size from the device (512 for files), align size by the old rule.
pub fn resolve_geometry(
    disk: &CheckedDisk,
    sector_flag: Option<u32>,
    align_flag: Option<&str>,
) -> Result<Geometry> {
    let sector = match sector_flag {
        Some(n) => match SectorSize::from_bytes(n) {
            Some(s) => s,
            None => bail!("sector size {n} is invalid: use 512 or 4096"),
        },
        None => match SectorSize::from_bytes(disk.sector_size()) {
            Some(s) => s,
            None => bail!(
                "{}: logical sector size {} is not supported (512 or 4096)",
                disk.path().display(),
                disk.sector_size()
            ),
        },
    };
    let geometry = match align_flag {
        Some(text) => {
            let Some(align) = AlignSize::parse(text) else {
                bail!("align size {text:?} is invalid: use 1M, 2M, 4M or 8M");
            };
            Geometry::new(sector, align).map_err(|_| {
                anyhow::anyhow!(
                    "sector size {} with align size {} is not a valid combination \
                     (valid: 512/1M, 4096/1M, 4096/2M, 4096/4M, 4096/8M)",
                    sector.bytes(),
                    align.label()
                )
            })?
        }
        None => Geometry::default_for(sector),
    };
    if geometry.sector_size.bytes() < disk.io_block() {
        bail!(
            "{}: the storage has {}-byte logical sectors; {}-byte lease sectors cannot be \
             written to it (use -Z {})",
            disk.path().display(),
            disk.io_block(),
            geometry.sector_size.bytes(),
            disk.io_block()
        );
    }
    Ok(geometry)
}

/// Refuses an offset that is not a multiple of the area's align size: lease areas start
/// at align-size boundaries, and an area written elsewhere overlaps two of them (the end
/// of one lease, with its ballots, and the start of the next).
pub fn refuse_misaligned(disk: &CheckedDisk, offset: u64, geometry: Geometry) -> Result<()> {
    if !offset.is_multiple_of(geometry.align_bytes()) {
        bail!(
            "{}: offset {offset} is not a multiple of the align size {} ({} bytes); lease \
             areas start at align-size boundaries, and an area written here would overlap \
             two of them",
            disk.path().display(),
            geometry.align_size.label(),
            geometry.align_bytes()
        );
    }
    Ok(())
}

/// Bytes read at a time while looking for records (one 8 MiB area at most).
const SCAN_CHUNK: u64 = 8 << 20;

/// The valid lease records (see `disk_format::scan`) in `[offset, offset + len)`, as far
/// as the storage reaches.
pub fn records_in(disk: &CheckedDisk, offset: u64, len: u64) -> Result<Vec<FoundRecord>> {
    let unit = u64::from(disk.io_block().max(512));
    let end = offset.saturating_add(len).min(disk.size());
    let end = end - end % unit;
    let mut found = Vec::new();
    let mut at = offset;
    while at < end {
        let n = (end - at).min(SCAN_CHUNK);
        let buf = disk.read(at, n as usize)?;
        found.extend(find_records(buf.as_slice(), at));
        at += n;
    }
    Ok(found)
}

/// Refuses to write `[offset, offset + len)` while it holds any valid lease record, unless
/// `force` (then it warns and names what is overwritten).
pub fn refuse_overwrite(disk: &CheckedDisk, offset: u64, len: u64, force: bool) -> Result<()> {
    let found = records_in(disk, offset, len)?;
    if found.is_empty() {
        return Ok(());
    }
    if !force {
        bail!(
            "{}: refusing to write over {}; use --force to overwrite",
            disk.path().display(),
            describe(&found)
        );
    }
    eprintln!(
        "lockd: warning: overwriting {} on {} (--force)",
        describe(&found),
        disk.path().display()
    );
    Ok(())
}

/// How long the local daemon may take to answer STATUS.
const DAEMON_REPLY_TIMEOUT: Duration = Duration::from_secs(5);

/// What identifies a disk whatever path names it: (0, rdev) of a block device, (dev,
/// ino) of a file.
fn disk_identity(path: &Path) -> Option<(u64, u64)> {
    let m = std::fs::metadata(path).ok()?;
    Some(if m.file_type().is_block_device() {
        (0, m.rdev())
    } else {
        (m.dev(), m.ino())
    })
}

/// The area at `offset` of `disk`: the align size its leader names, else 1 MiB.
fn area_len_at(disk: &CheckedDisk, offset: u64) -> u64 {
    let unit = disk.io_block().max(512) as usize;
    disk.read(offset, unit)
        .ok()
        .and_then(|b| LeaderRecord::decode(b.as_slice()).ok())
        .filter(|l| l.magic == DELTA_DISK_MAGIC || l.magic == PAXOS_DISK_MAGIC)
        .map_or(1 << 20, |l| leader_align_bytes(&l))
}

/// `--force` does not reach past the local daemon: when the daemon that `lockd` clients
/// talk to (its run dir as for `lockd status`) has joined a lockspace or holds a lease
/// whose area overlaps `[offset, offset + len)` of this disk, the write is refused. No
/// daemon answering (no socket) means nothing to check; one that answers but not STATUS
/// is an error (what it uses cannot be told).
pub fn refuse_local_daemon_use(disk: &CheckedDisk, offset: u64, len: u64) -> Result<()> {
    let run_dir = crate::client::ConnArgs {
        run_dir: None,
        json: false,
    }
    .run_dir();
    let Ok(client) = client_lib::Client::connect(&run_dir) else {
        return Ok(());
    };
    let records = client
        .set_read_timeout(Some(DAEMON_REPLY_TIMEOUT))
        .and_then(|()| client.status(4))
        .with_context(|| {
            format!(
                "the daemon at {} answers but not STATUS: cannot tell whether it uses this \
                 area; stop it or fix it before --force",
                run_dir.display()
            )
        })?;
    let me = disk_identity(disk.path());
    let overlaps = |start: u64, area: u64| {
        start < offset.saturating_add(len) && offset < start.saturating_add(area)
    };
    for r in &records {
        let mut areas: Vec<(String, String, u64)> = Vec::new();
        if let Some(ls) = &r.lockspace {
            areas.push((
                format!("has joined lockspace {} as host_id {}", ls.name, ls.host_id),
                ls.host_id_disk.path.to_text(),
                ls.host_id_disk.offset,
            ));
        }
        if let Some(res) = &r.resource {
            for d in &res.disks {
                areas.push((
                    format!(
                        "holds the lease {}:{}",
                        res.head.lockspace_name, res.head.name
                    ),
                    d.path.to_text(),
                    d.offset,
                ));
            }
        }
        for (what, path, start) in areas {
            let same = match (me, disk_identity(Path::new(&path))) {
                (Some(a), Some(b)) => a == b,
                _ => Path::new(&path) == disk.path(),
            };
            if same && overlaps(start, area_len_at(disk, start)) {
                bail!(
                    "{}: refusing even with --force: the local daemon ({}) {what} at offset \
                     {start}; release it or remove the lockspace first",
                    disk.path().display(),
                    run_dir.display()
                );
            }
        }
    }
    Ok(())
}
