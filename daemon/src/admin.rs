//! Commands that read or format lease areas without holding anything: ALIGN,
//! WRITE/READ_LOCKSPACE, WRITE/READ_RESOURCE, READ_RESOURCE_OWNERS. They run on the
//! connection's thread with O_DIRECT I/O and sanlock's timeouts. Every disk is opened
//! with the rights of the client that named it (`crate::access`).
//!
//! The two formatting commands refuse (-EBUSY) to write over a lockspace this daemon has
//! joined or is joining, or a lease it holds (`crate::inuse`); other areas are written
//! as sanlock writes them.

use std::path::Path;
use std::time::Duration;

use client_lib::proto::*;
use client_lib::wire;
use disk_format::area::{format_lockspace_area, format_resource_area, ResourceInit};
use disk_format::leader::{LEADER_RECORD_LEN, PAXOS_DISK_MAGIC};
use disk_format::{Geometry, LeaderKind, LeaderRecord, SectorSize};
use lease_core::exec::block_on;
use lease_core::paxos::{self, Mode, ResourceParams};
use tracing::{info, warn};

use crate::access::{self, Need};
use crate::state::Daemon;
use crate::sync::lock;
use lockd_diskio::{BlockingDisk, DirectDisk, EngineKind};

/// sanlock's write_init_io_timeout: formatting writes get 60 s.
const WRITE_INIT_TIMEOUT: Duration = Duration::from_secs(60);

/// Opens a disk a client named, with that client's rights (`crate::access`): read-only
/// for a non-root client when `need` is [`Need::Read`].
pub(crate) fn open(disk: &wire::DiskLocation, need: Need) -> Result<DirectDisk, i32> {
    let path = disk.path.to_text();
    if path.is_empty() {
        return Err(-libc::EINVAL);
    }
    access::open_disk(Path::new(&path), need, EngineKind::SharedRing).map_err(|e| {
        warn!(error = %e, "cannot open disk");
        e.rv()
    })
}

/// Opens a lockspace's disk: an empty path or a disk that cannot be opened is -ENODEV,
/// as sanlock's WRITE_LOCKSPACE and READ_LOCKSPACE answer.
fn open_lockspace_disk(disk: &wire::DiskLocation, need: Need) -> Result<DirectDisk, i32> {
    open(disk, need).map_err(|_| -libc::ENODEV)
}

/// Sector size and align size asked for in API flags, each `None` when not given (as
/// sanlock, each is taken separately). Two bits of one kind at once are -EINVAL.
fn requested_sizes(flags: u32) -> Result<(Option<u32>, Option<u64>), i32> {
    use disk_format::geometry::*;
    let sector = match flags & (API_SECTOR512 | API_SECTOR4K) {
        0 => None,
        API_SECTOR512 => Some(512),
        API_SECTOR4K => Some(4096),
        _ => return Err(-libc::EINVAL),
    };
    let align = match flags & (API_ALIGN1M | API_ALIGN2M | API_ALIGN4M | API_ALIGN8M) {
        0 => None,
        API_ALIGN1M => Some(1 << 20),
        API_ALIGN2M => Some(2 << 20),
        API_ALIGN4M => Some(4 << 20),
        API_ALIGN8M => Some(8 << 20),
        _ => return Err(-libc::EINVAL),
    };
    Ok((sector, align))
}

/// The align size a leader says it has: its align flag, else the old rule (512 → 1 MiB,
/// 4096 → 8 MiB); 0 when the leader's sector size is neither.
fn leader_align(leader: &LeaderRecord) -> u64 {
    use disk_format::geometry::*;
    match leader.flags & LFL_ALIGN_MASK {
        LFL_ALIGN_1M => 1 << 20,
        LFL_ALIGN_2M => 2 << 20,
        LFL_ALIGN_4M => 4 << 20,
        LFL_ALIGN_8M => 8 << 20,
        _ => match leader.sector_size {
            512 => 1 << 20,
            4096 => 8 << 20,
            _ => 0,
        },
    }
}

/// True when writes of whole `g` sectors at `offset` suit the storage (O_DIRECT would
/// refuse the others with EINVAL); checked before anything is written.
fn writable_with(disk: &DirectDisk, g: Geometry, offset: u64) -> bool {
    let unit = u64::from(disk.io_block());
    g.sector_bytes().is_multiple_of(unit) && offset.is_multiple_of(unit)
}

/// The geometry from API flags, else sanlock's default for the device's sector size.
pub(crate) fn geometry_for(disk: &DirectDisk, flags: u32) -> Result<Geometry, i32> {
    match Geometry::from_api_flags(flags) {
        Ok(Some(g)) => Ok(g),
        Ok(None) => {
            let ss = SectorSize::from_bytes(disk.sector_size()).ok_or(-libc::EINVAL)?;
            Ok(Geometry::default_for(ss))
        }
        Err(_) => Err(-libc::EINVAL),
    }
}

/// The geometry WRITE_LOCKSPACE / WRITE_RESOURCE format with: as sanlock's
/// `sizes_from_flags`, a sector flag without an align flag (or the reverse) or a pair
/// that is not a valid geometry is -1.
fn format_geometry(disk: &DirectDisk, flags: u32) -> Result<Geometry, i32> {
    if Geometry::from_api_flags(flags).is_err() {
        return Err(-1);
    }
    geometry_for(disk, flags)
}

/// ALIGN: the default area size for the disk (1 MiB for 512-byte sectors, 8 MiB for 4K).
pub fn align(disk: &wire::DiskLocation) -> i32 {
    match open(disk, Need::Read) {
        Ok(d) => match SectorSize::from_bytes(d.sector_size()) {
            Some(ss) => Geometry::default_for(ss).align_bytes() as i32,
            None => -libc::EINVAL,
        },
        Err(rv) => rv,
    }
}

/// WRITE_LOCKSPACE: format a lockspace area (two-step, as sanlock).
pub fn write_lockspace(d: &Daemon, ls: &wire::Lockspace, io_timeout: u32) -> i32 {
    // sanlock 5.x NO_TIMEOUT lockspaces (leases that never expire; recovery only by
    // fencing) are not made by lockd, which has no storage fencing: refused before any
    // I/O rather than formatted without the flag the caller asked for.
    if ls.flags & SANLK_LSF_NO_TIMEOUT != 0 {
        warn!("write_lockspace with SANLK_LSF_NO_TIMEOUT refused: not implemented");
        return -libc::EOPNOTSUPP;
    }
    // An empty name is formatted as sanlock does (it is a name like any other on disk).
    let disk = match open_lockspace_disk(&ls.host_id_disk, Need::Write) {
        Ok(d) => d,
        Err(rv) => return rv,
    };
    let g = match format_geometry(&disk, ls.flags) {
        Ok(g) => g,
        Err(rv) => return rv,
    };
    let io = if io_timeout == 0 {
        d.cfg.io_timeout_s
    } else {
        io_timeout
    };
    let f = format_lockspace_area(g, &ls.name, io.min(255) as u16);
    let off = ls.host_id_disk.offset;
    // sanlock writes the area and then fails on the first-sector write where the storage
    // needs larger blocks; lockd refuses before writing anything (same -EINVAL).
    if !off.is_multiple_of(g.sector_bytes()) || !writable_with(&disk, g, off) {
        return -libc::EINVAL;
    }
    // Never over a lockspace we joined or a lease we hold (no client can force it).
    let path = ls.host_id_disk.path.to_text();
    if let Err(rv) =
        crate::inuse::refuse_if_in_use(d, "write_lockspace", &path, off, g.align_bytes())
    {
        return rv;
    }
    if let Err(e) = disk.write(off, &f.area, WRITE_INIT_TIMEOUT) {
        return e.rv();
    }
    if let Err(e) = disk.write(off, &f.first_sector, WRITE_INIT_TIMEOUT) {
        return e.rv();
    }
    info!(ls = %ls.name, offset = off, "lockspace area written");
    0
}

fn read_leader_sector(
    disk: &DirectDisk,
    offset: u64,
    len: u32,
    timeout: Duration,
) -> Result<LeaderRecord, i32> {
    let buf = disk
        .read(offset, len.max(512) as usize, timeout)
        .map_err(|e| e.rv())?;
    LeaderRecord::decode(&buf.as_slice()[..LEADER_RECORD_LEN]).map_err(|e| e.sanlk_code())
}

/// READ_LOCKSPACE: fills name and geometry flags from the host's delta record; returns
/// (result, io_timeout). As sanlock: the record is read in units of the requested sector
/// size (the storage's block size when none is given), so a sector size the storage
/// cannot do is -EINVAL; the leader's own sizes are not compared with the request.
pub fn read_lockspace(d: &Daemon, ls: &mut wire::Lockspace) -> (i32, u32) {
    match read_lockspace_record(d, ls) {
        Ok(rec) => (0, u32::from(rec.io_timeout)),
        Err(rv) => (rv, 0),
    }
}

/// READ_LOCKSPACE_HOST (5.x): as READ_LOCKSPACE, plus the host's delta lease as a
/// `sanlk_host` (owner, generation, timestamp, io_timeout from the record; flags 0, as
/// sanlock 5.1.1 answers).
pub fn read_lockspace_host(d: &Daemon, ls: &mut wire::Lockspace) -> (i32, u32, wire::Host) {
    match read_lockspace_record(d, ls) {
        Ok(rec) => (
            0,
            u32::from(rec.io_timeout),
            wire::Host {
                host_id: rec.owner_id,
                generation: rec.owner_generation,
                timestamp: rec.timestamp,
                io_timeout: u32::from(rec.io_timeout),
                flags: 0,
            },
        ),
        Err(rv) => (rv, 0, wire::Host::default()),
    }
}

/// INIT_LOCKSPACE_HOST (5.x `sanlock_init_lockspace_host`): rewrites the delta lease of
/// `ls.host_id` with the owner, generation, host name and timestamp of `req` (timestamp
/// 1 = now, as sanlock), io_timeout `io_timeout` (the default when 0), keeping the
/// record's version and geometry flags; a DEAD_EXT mark is dropped. lockd never writes a
/// CAW record (`SANLK_INIT_HOST_USE_CAW` is ignored, as by a sanlock configured
/// `use_compare_and_write = no`).
///
/// lockd's terms (sanlock 5.1.1 rewrites any record): nothing is written, with -EBUSY,
/// unless the host is not one that may be alive — if this daemon has joined the
/// lockspace, the host_id is not ours and our monitor sees it DEAD or FREE (or its record
/// was never used); otherwise the record must be free (timestamp 0), unused, or already
/// carry the host name being written (a host re-initialising its own lease before it
/// joins). NO_TIMEOUT (asked for, or on the record) is refused with -95 and a CAW record
/// with SANLK_WRONG_CAW.
pub fn init_lockspace_host(
    d: &Daemon,
    ls: &wire::Lockspace,
    req: &LeaderRecord,
    io_timeout: u32,
) -> i32 {
    if ls.flags & SANLK_LSF_NO_TIMEOUT != 0 {
        return -libc::EOPNOTSUPP;
    }
    let host_id = ls.host_id;
    if host_id == 0 {
        return -libc::EINVAL;
    }
    let mut probe = ls.clone();
    let old = match read_lockspace_record(d, &mut probe) {
        Ok(r) => r,
        Err(rv) => return rv,
    };
    if let Err(e) = old.check_writable(LeaderKind::Delta) {
        return e.sanlk_code();
    }
    let g = match Geometry::from_leader(old.sector_size, old.flags) {
        Ok(g) => g,
        Err(e) => return e.sanlk_code(),
    };
    let path = ls.host_id_disk.path.to_text();
    let joined = d
        .find_space(&ls.name)
        .filter(|s| s.path == path && s.offset == ls.host_id_disk.offset);
    let allowed = match &joined {
        Some(s) if s.host_id == host_id => false,
        Some(s) => {
            let state = lock(&s.monitor).state(host_id, lockd_diskio::monotime());
            lease_core::delta::record_unused(&old)
                || matches!(
                    state,
                    Some(lease_core::HostState::Dead | lease_core::HostState::Free)
                )
        }
        None => {
            old.timestamp == 0
                || lease_core::delta::record_unused(&old)
                || old.resource_name.same_as(&req.resource_name)
        }
    };
    if !allowed {
        warn!(
            ls = %ls.name,
            host_id,
            "init_lockspace_host refused: the host's delta lease may be in use"
        );
        return -libc::EBUSY;
    }
    let disk = match open_lockspace_disk(&ls.host_id_disk, Need::Write) {
        Ok(d) => d,
        Err(rv) => return rv,
    };
    let io = if io_timeout == 0 {
        d.cfg.io_timeout_s
    } else {
        io_timeout
    };
    let mut rec = old;
    rec.flags = old.flags & disk_format::geometry::LFL_ALIGN_MASK;
    rec.owner_id = host_id;
    rec.owner_generation = req.owner_generation;
    rec.resource_name = req.resource_name;
    rec.timestamp = if req.timestamp == 1 {
        lockd_diskio::monotime().max(1)
    } else {
        req.timestamp
    };
    rec.io_timeout = io.min(255) as u16;
    rec.unused1 = 0;
    rec.write_id = 0;
    rec.write_generation = 0;
    rec.write_timestamp = 0;
    rec.seal();
    let mut sector = vec![0u8; g.sector_bytes() as usize];
    disk_format::DeltaSector::from_leader(rec).encode_into(&mut sector);
    let off = ls.host_id_disk.offset + (host_id - 1) * g.sector_bytes();
    let timeout = Duration::from_secs(u64::from(d.cfg.io_timeout_s));
    if let Err(e) = disk.write(off, &sector, timeout) {
        return e.rv();
    }
    info!(ls = %ls.name, host_id, generation = rec.owner_generation, "delta lease re-initialised");
    0
}

/// Reads and verifies the delta lease of `ls.host_id` (1 when 0) at `ls`'s disk, and
/// fills in `ls`'s name and flags (geometry, and 5.x's NO_TIMEOUT / USING_CAW from the
/// record, as sanlock 5.1.1 reports them).
fn read_lockspace_record(d: &Daemon, ls: &mut wire::Lockspace) -> Result<LeaderRecord, i32> {
    let disk = open_lockspace_disk(&ls.host_id_disk, Need::Read)?;
    let (req_sector, _) = requested_sizes(ls.flags)?;
    let unit = req_sector.unwrap_or(disk.io_block());
    let timeout = Duration::from_secs(u64::from(d.cfg.io_timeout_s));
    let first = read_leader_sector(&disk, ls.host_id_disk.offset, unit, timeout)?;
    if first
        .verify(LeaderKind::Delta, &Default::default())
        .is_err()
    {
        return Err(disk_format::rv::SANLK_LEADER_MAGIC);
    }
    let g = Geometry::from_leader(first.sector_size, first.flags).map_err(|e| e.sanlk_code())?;
    let host_id = ls.host_id.max(1);
    if host_id > g.max_hosts() {
        return Err(-libc::EINVAL);
    }
    let rec = if host_id == 1 {
        first
    } else {
        let sector = req_sector.map_or(g.sector_bytes(), u64::from);
        let off = ls.host_id_disk.offset + (host_id - 1) * sector;
        read_leader_sector(&disk, off, sector as u32, timeout)?
    };
    rec.verify(LeaderKind::Delta, &Default::default())
        .map_err(|e| e.sanlk_code())?;
    ls.name = rec.space_name;
    // The host_id whose record was read (1 when the request said 0), as sanlock answers:
    // `sanlock client read -s NAME:0:PATH:OFF` prints NAME:1:PATH:OFF.
    ls.host_id = host_id;
    ls.flags = (ls.flags & !0x3F0) | g.api_flags();
    if rec.flags & disk_format::leader::LFL_NO_TIMEOUT != 0 {
        ls.flags |= client_lib::proto::SANLK_LSF_NO_TIMEOUT;
    }
    if rec.flags & disk_format::leader::LFL_CAW != 0 {
        ls.flags |= client_lib::proto::SANLK_LSF_USING_CAW;
    }
    Ok(rec)
}

/// WRITE_RESOURCE: format a resource area. `num_hosts` comes from header.data (quirk).
/// Empty lockspace and resource names are written as given, as sanlock does (vdsm clears
/// a lease with `write_resource(b"", b"", disks, clear=True)`).
pub fn write_resource(d: &Daemon, res: &wire::Resource, num_hosts: u32, clear: bool) -> i32 {
    if res.disks.len() != 1 {
        return -libc::EINVAL;
    }
    let disk = match open(&res.disks[0], Need::Write) {
        Ok(d) => d,
        Err(rv) => return rv,
    };
    let g = match format_geometry(&disk, res.head.flags) {
        Ok(g) => g,
        Err(rv) => return rv,
    };
    let off = res.disks[0].offset;
    // The area is written in one I/O of align bytes, so only the offset must suit the
    // storage (sanlock formats 512/1M areas on 4K storage the same way).
    if !off.is_multiple_of(g.sector_bytes()) || !off.is_multiple_of(u64::from(disk.io_block())) {
        return -libc::EINVAL;
    }
    // lvmlockd probes the end of the device: a write past it must fail with -ENOSPC.
    if disk.size() != 0 && off + g.align_bytes() > disk.size() {
        return -libc::ENOSPC;
    }
    // Never over a lockspace we joined or a lease we hold (no client can force it).
    let path = res.disks[0].path.to_text();
    if let Err(rv) =
        crate::inuse::refuse_if_in_use(d, "write_resource", &path, off, g.align_bytes())
    {
        return rv;
    }
    let area = format_resource_area(&ResourceInit {
        geometry: g,
        space_name: res.head.lockspace_name,
        resource_name: res.head.name,
        num_hosts: u64::from(num_hosts),
        clear_at_monotime_s: clear.then(lockd_diskio::monotime),
    });
    match disk.write(off, &area, WRITE_INIT_TIMEOUT) {
        Ok(()) => 0,
        Err(e) => e.rv(),
    }
}

/// READ_RESOURCE: fills names, lver and geometry flags from the leader.
pub fn read_resource(d: &Daemon, res: &mut wire::Resource) -> i32 {
    let Some(wd) = res.disks.first() else {
        return -libc::EINVAL;
    };
    let disk = match open(wd, Need::Read) {
        Ok(d) => d,
        Err(rv) => return rv,
    };
    // As sanlock: the requested sector size, else 4 KiB (enough for either size).
    let unit = match requested_sizes(res.head.flags) {
        Ok((s, _)) => s.unwrap_or(4096),
        Err(rv) => return rv,
    };
    let timeout = Duration::from_secs(u64::from(d.cfg.io_timeout_s));
    let leader = match read_leader_sector(&disk, wd.offset, unit, timeout) {
        Ok(l) => l,
        Err(rv) => return rv,
    };
    if leader.magic != PAXOS_DISK_MAGIC {
        return disk_format::rv::SANLK_LEADER_MAGIC;
    }
    if let Err(e) = leader.verify(LeaderKind::Paxos, &Default::default()) {
        return e.sanlk_code();
    }
    let g = match Geometry::from_leader(leader.sector_size, leader.flags) {
        Ok(g) => g,
        Err(e) => return e.sanlk_code(),
    };
    res.head.lockspace_name = leader.space_name;
    res.head.name = leader.resource_name;
    res.head.lver = leader.lver;
    res.head.flags = (res.head.flags & !0x3F0) | g.api_flags();
    0
}

/// READ_RESOURCE_OWNERS: the resource (names, lver, SHARED flag) and its holders.
pub fn read_resource_owners(
    d: &Daemon,
    res: &wire::Resource,
) -> Result<(wire::ResourceHead, Vec<wire::Host>), i32> {
    let wd = res.disks.first().ok_or(-libc::EINVAL)?;
    let disk = open(wd, Need::Read)?;
    let timeout = Duration::from_secs(u64::from(d.cfg.io_timeout_s));
    // As sanlock's read_resource_owners: read the area with the requested sizes (512 and
    // the old-rule align when not given); a requested size the leader does not have is
    // -EINVAL; sizes not given are taken from the leader and the area read again.
    let (req_sector, req_align) = requested_sizes(res.head.flags)?;
    let mut sector = req_sector.unwrap_or(512);
    let mut align = req_align.unwrap_or(if sector == 512 { 1 << 20 } else { 8 << 20 });
    let mut first;
    let mut tries = 0;
    loop {
        tries += 1;
        let buf = disk
            .read(wd.offset, align as usize, timeout)
            .map_err(|e| e.rv())?;
        first = LeaderRecord::decode(&buf.as_slice()[..LEADER_RECORD_LEN])
            .map_err(|e| e.sanlk_code())?;
        let actual_align = leader_align(&first);
        if req_sector.is_some_and(|s| s != first.sector_size)
            || req_align.is_some_and(|a| a != actual_align)
        {
            return Err(-libc::EINVAL);
        }
        if (sector, align) == (first.sector_size, actual_align) {
            break;
        }
        if actual_align == 0 || tries > 1 {
            return Err(-libc::EINVAL);
        }
        (sector, align) = (first.sector_size, actual_align);
    }
    let g = Geometry::from_leader(first.sector_size, first.flags).map_err(|_| -libc::EINVAL)?;
    let params = ResourceParams {
        space_name: res.head.lockspace_name,
        resource_name: res.head.name,
        disk_offset: wd.offset,
        geometry: g,
        io_timeout: d.cfg.io_timeout_s as u16,
        num_hosts_hint: 0,
    };
    let bd = BlockingDisk::new(disk);
    let (leader, owners) =
        block_on(paxos::read_owners(&bd, &params)).map_err(|e| e.sanlk_code())?;
    let mut head = res.head.clone();
    head.lver = leader.lver;
    head.flags = (head.flags & !0x3F0) | g.api_flags();
    if owners.iter().any(|o| o.mode == Mode::Shared) {
        head.flags |= SANLK_RES_SHARED;
    }
    head.num_disks = 0;
    let hosts = owners
        .iter()
        .map(|o| wire::Host {
            host_id: o.host_id,
            generation: o.generation,
            timestamp: if o.mode == Mode::Exclusive {
                leader.timestamp
            } else {
                0
            },
            io_timeout: 0,
            flags: 0,
        })
        .collect();
    Ok((head, hosts))
}
