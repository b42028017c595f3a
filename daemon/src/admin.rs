//! Commands that read or format lease areas without holding anything: ALIGN,
//! WRITE/READ_LOCKSPACE, WRITE/READ_RESOURCE, READ_RESOURCE_OWNERS. They run on the
//! connection's thread with O_DIRECT I/O and sanlock's timeouts. Every disk is opened
//! with the rights of the client that named it (`crate::access`).
//!
//! The two formatting commands refuse (-EBUSY) to write over a lockspace this daemon has
//! joined or is joining, or a lease it holds (`crate::inuse`); other areas are written
//! as sanlock writes them.
//!
//! Every refusal is an [`AdminError`] saying why; [`AdminError::code`] is the one place
//! these reasons meet the numbers sanlock's clients get, and the protocol edge
//! (`dispatch.rs`, `cmd.rs`) logs the reason and replies the code
//! ([`AdminError::refused`]).

use std::path::Path;
use std::time::Duration;

use client_lib::proto::*;
use client_lib::wire;
use disk_format::area::{format_lockspace_area, format_resource_area, ResourceInit};
use disk_format::leader::{LEADER_RECORD_LEN, PAXOS_DISK_MAGIC};
use disk_format::FormatError;
use disk_format::{Geometry, LeaderKind, LeaderRecord, SectorSize};
use lease_core::exec::block_on;
use lease_core::paxos::{self, Mode, ResourceParams};
use lease_core::LeaseError;
use tracing::info;

use crate::access::{self, Caller, Need};
use crate::inuse::InUse;
use crate::state::Daemon;
use lockd_diskio::{BlockingDisk, DirectDisk, DirectIoError, EngineKind};

/// sanlock's write_init_io_timeout: formatting writes get 60 s.
const WRITE_INIT_TIMEOUT: Duration = Duration::from_secs(60);

/// Why a disk command was refused or failed. What sanlock's clients get is
/// [`AdminError::code`], the one place these reasons meet sanlock's numbers.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// A missing, malformed or contradictory argument, or sizes the storage or the
    /// record cannot do (-EINVAL).
    #[error("invalid argument: {0}")]
    Invalid(&'static str),
    /// A formatting command's sector flag without an align flag (or the reverse), or a
    /// pair that is not a geometry (-1, as sanlock's `sizes_from_flags`).
    #[error("the sector and align flags do not make a geometry")]
    SizeFlags,
    /// Something lockd does not do, refused before any I/O (-EOPNOTSUPP).
    #[error("not supported: {0}")]
    NotSupported(&'static str),
    /// The disk the client named cannot be opened with its rights: the open's own code
    /// (-EACCES, -ENOENT …).
    #[error("cannot open the disk: {0}")]
    Open(#[source] DirectIoError),
    /// A lockspace's disk has an empty path or cannot be opened (-ENODEV, as sanlock's
    /// WRITE_LOCKSPACE and READ_LOCKSPACE answer).
    #[error("no lockspace disk: {0}")]
    LockspaceDisk(#[source] Box<AdminError>),
    /// The write would overwrite a lockspace or lease this daemon uses (-EBUSY).
    #[error(transparent)]
    InUse(#[from] InUse),
    /// The area may be in use by another host (-EBUSY).
    #[error("busy: {0}")]
    Busy(&'static str),
    /// The area would end past the device's end (-ENOSPC; lvmlockd probes the end of
    /// the device with such a write).
    #[error("the area would end at byte {end_bytes}, past the device's {size_bytes} bytes")]
    PastEnd { end_bytes: u64, size_bytes: u64 },
    /// A read or write failed or timed out: its code (-errno, SANLK_AIO_TIMEOUT).
    #[error("{0}")]
    Io(#[source] DirectIoError),
    /// A record did not decode or verify, or may not be rewritten: sanlock's code for
    /// that check.
    #[error("{0}")]
    Record(#[source] FormatError),
    /// No valid delta lease where the lockspace should start (SANLK_LEADER_MAGIC, whatever
    /// check failed).
    #[error("no lockspace here: {0}")]
    NotLockspace(#[source] FormatError),
    /// No paxos leader at the resource's offset: the magic found (SANLK_LEADER_MAGIC).
    #[error("no resource lease here: magic 0x{0:08x}")]
    NotResource(u32),
    /// Reading the lease's owners failed: lease-core's sanlock code.
    #[error("{0}")]
    Lease(#[source] LeaseError),
}

impl AdminError {
    /// The result code sanlock's clients get.
    pub fn code(&self) -> i32 {
        match self {
            AdminError::Invalid(_) => -libc::EINVAL,
            AdminError::SizeFlags => -1,
            AdminError::NotSupported(_) => -libc::EOPNOTSUPP,
            AdminError::Open(e) | AdminError::Io(e) => e.rv(),
            AdminError::LockspaceDisk(_) => -libc::ENODEV,
            AdminError::InUse(_) | AdminError::Busy(_) => -libc::EBUSY,
            AdminError::PastEnd { .. } => -libc::ENOSPC,
            AdminError::Record(e) => e.sanlk_code(),
            AdminError::NotLockspace(_) | AdminError::NotResource(_) => {
                disk_format::rv::SANLK_LEADER_MAGIC
            }
            AdminError::Lease(e) => e.sanlk_code(),
        }
    }

    /// What the protocol edge replies for command `cmd`: the code, with the reason
    /// logged.
    pub(crate) fn refused(&self, cmd: u32) -> i32 {
        let code = self.code();
        info!(
            cmd = client_lib::proto::cmd_name(cmd),
            reason = %self,
            code,
            "disk command refused"
        );
        code
    }
}

/// Opens a disk a client named, with that client's rights (`crate::access`): read-only
/// for a non-root client when `need` is [`Need::Read`].
pub(crate) fn open(
    caller: &Caller,
    disk: &wire::DiskLocation,
    need: Need,
) -> Result<DirectDisk, AdminError> {
    let path = disk.path.to_text();
    if path.is_empty() {
        return Err(AdminError::Invalid("the disk path is empty"));
    }
    access::open_disk(Some(caller), Path::new(&path), need, EngineKind::SharedRing)
        .map_err(AdminError::Open)
}

/// Opens a lockspace's disk: an empty path or a disk that cannot be opened is -ENODEV,
/// as sanlock's WRITE_LOCKSPACE and READ_LOCKSPACE answer.
fn open_lockspace_disk(
    caller: &Caller,
    disk: &wire::DiskLocation,
    need: Need,
) -> Result<DirectDisk, AdminError> {
    open(caller, disk, need).map_err(|e| AdminError::LockspaceDisk(Box::new(e)))
}

/// Sector size and align size asked for in API flags, each `None` when not given (as
/// sanlock, each is taken separately). Two bits of one kind at once are -EINVAL.
fn requested_sizes(flags: u32) -> Result<(Option<u32>, Option<u64>), AdminError> {
    use disk_format::geometry::*;
    let sector = match flags & (API_SECTOR512 | API_SECTOR4K) {
        0 => None,
        API_SECTOR512 => Some(512),
        API_SECTOR4K => Some(4096),
        _ => return Err(AdminError::Invalid("two sector size flags")),
    };
    let align = match flags & (API_ALIGN1M | API_ALIGN2M | API_ALIGN4M | API_ALIGN8M) {
        0 => None,
        API_ALIGN1M => Some(1 << 20),
        API_ALIGN2M => Some(2 << 20),
        API_ALIGN4M => Some(4 << 20),
        API_ALIGN8M => Some(8 << 20),
        _ => return Err(AdminError::Invalid("two align size flags")),
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
pub(crate) fn geometry_for(disk: &DirectDisk, flags: u32) -> Result<Geometry, AdminError> {
    match Geometry::from_api_flags(flags) {
        Ok(Some(g)) => Ok(g),
        Ok(None) => Ok(Geometry::default_for(device_sector_size(disk)?)),
        Err(_) => Err(AdminError::Invalid(
            "the sector and align flags do not make a geometry",
        )),
    }
}

/// The device's sector size, when it is one sanlock's areas have (512 or 4096).
fn device_sector_size(disk: &DirectDisk) -> Result<SectorSize, AdminError> {
    SectorSize::from_bytes(disk.sector_size()).ok_or(AdminError::Invalid(
        "the device's sector size is neither 512 nor 4096 bytes",
    ))
}

/// The geometry WRITE_LOCKSPACE / WRITE_RESOURCE format with: as sanlock's
/// `sizes_from_flags`, a sector flag without an align flag (or the reverse) or a pair
/// that is not a valid geometry is -1.
fn format_geometry(disk: &DirectDisk, flags: u32) -> Result<Geometry, AdminError> {
    if Geometry::from_api_flags(flags).is_err() {
        return Err(AdminError::SizeFlags);
    }
    geometry_for(disk, flags)
}

/// ALIGN: the default area size for the disk (1 MiB for 512-byte sectors, 8 MiB for 4K),
/// which is the reply's result.
pub fn align(caller: &Caller, disk: &wire::DiskLocation) -> Result<i32, AdminError> {
    let d = open(caller, disk, Need::Read)?;
    Ok(Geometry::default_for(device_sector_size(&d)?).align_bytes() as i32)
}

/// WRITE_LOCKSPACE: format a lockspace area (two-step, as sanlock).
pub fn write_lockspace(
    d: &Daemon,
    caller: &Caller,
    ls: &wire::Lockspace,
    io_timeout: u32,
) -> Result<(), AdminError> {
    // sanlock 5.x NO_TIMEOUT lockspaces (leases that never expire; recovery only by
    // fencing) are not made by lockd, which has no storage fencing: refused before any
    // I/O rather than formatted without the flag the caller asked for.
    if ls.flags & SANLK_LSF_NO_TIMEOUT != 0 {
        return Err(AdminError::NotSupported("NO_TIMEOUT lockspaces"));
    }
    // An empty name is formatted as sanlock does (it is a name like any other on disk).
    let disk = open_lockspace_disk(caller, &ls.host_id_disk, Need::Write)?;
    let g = format_geometry(&disk, ls.flags)?;
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
        return Err(AdminError::Invalid(
            "the offset or sector size does not suit the storage",
        ));
    }
    // Never over a lockspace we joined or a lease we hold (no client can force it).
    let path = ls.host_id_disk.path.to_text();
    crate::inuse::refuse_if_in_use(d, "write_lockspace", &path, off, g.align_bytes())?;
    disk.write(off, &f.area, WRITE_INIT_TIMEOUT)
        .map_err(AdminError::Io)?;
    disk.write(off, &f.first_sector, WRITE_INIT_TIMEOUT)
        .map_err(AdminError::Io)?;
    info!(ls = %ls.name, offset = off, "lockspace area written");
    Ok(())
}

fn read_leader_sector(
    disk: &DirectDisk,
    offset: u64,
    len: u32,
    timeout: Duration,
) -> Result<LeaderRecord, AdminError> {
    let buf = disk
        .read(offset, len.max(512) as usize, timeout)
        .map_err(AdminError::Io)?;
    LeaderRecord::decode(&buf.as_slice()[..LEADER_RECORD_LEN]).map_err(AdminError::Record)
}

/// READ_LOCKSPACE: fills name and geometry flags from the host's delta record; returns
/// the record's io_timeout. As sanlock: the record is read in units of the requested sector
/// size (the storage's block size when none is given), so a sector size the storage
/// cannot do is -EINVAL; the leader's own sizes are not compared with the request.
pub fn read_lockspace(
    d: &Daemon,
    caller: &Caller,
    ls: &mut wire::Lockspace,
) -> Result<u32, AdminError> {
    read_lockspace_record(d, caller, ls).map(|rec| u32::from(rec.io_timeout))
}

/// READ_LOCKSPACE_HOST (5.x): as READ_LOCKSPACE (the io_timeout), plus the host's delta
/// lease as a `sanlk_host` (owner, generation, timestamp, io_timeout from the record;
/// flags 0, as sanlock 5.1.1 answers).
pub fn read_lockspace_host(
    d: &Daemon,
    caller: &Caller,
    ls: &mut wire::Lockspace,
) -> Result<(u32, wire::Host), AdminError> {
    let rec = read_lockspace_record(d, caller, ls)?;
    let host = wire::Host {
        host_id: rec.owner_id,
        generation: rec.owner_generation,
        timestamp: rec.timestamp,
        io_timeout: u32::from(rec.io_timeout),
        flags: 0,
    };
    Ok((u32::from(rec.io_timeout), host))
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
    caller: &Caller,
    ls: &wire::Lockspace,
    req: &LeaderRecord,
    io_timeout: u32,
) -> Result<(), AdminError> {
    if ls.flags & SANLK_LSF_NO_TIMEOUT != 0 {
        return Err(AdminError::NotSupported("NO_TIMEOUT lockspaces"));
    }
    let host_id = ls.host_id;
    if host_id == 0 {
        return Err(AdminError::Invalid("host_id 0"));
    }
    let mut probe = ls.clone();
    let old = read_lockspace_record(d, caller, &mut probe)?;
    old.check_writable(LeaderKind::Delta)
        .map_err(AdminError::Record)?;
    let g = Geometry::from_leader(old.sector_size, old.flags).map_err(AdminError::Record)?;
    let path = ls.host_id_disk.path.to_text();
    let joined = d
        .find_space(&ls.name)
        .filter(|s| s.path == path && s.offset == ls.host_id_disk.offset);
    let allowed = match &joined {
        Some(s) if s.host_id == host_id => false,
        Some(s) => {
            let now = crate::clock::now_s();
            let state = s.monitor(|m| m.state(host_id, now));
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
        return Err(AdminError::Busy("the host's delta lease may be in use"));
    }
    let disk = open_lockspace_disk(caller, &ls.host_id_disk, Need::Write)?;
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
        crate::clock::now_s().max(1)
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
    disk.write(off, &sector, timeout).map_err(AdminError::Io)?;
    info!(ls = %ls.name, host_id, generation = rec.owner_generation, "delta lease re-initialised");
    Ok(())
}

/// Reads and verifies the delta lease of `ls.host_id` (1 when 0) at `ls`'s disk, and
/// fills in `ls`'s name and flags (geometry, and 5.x's NO_TIMEOUT / USING_CAW from the
/// record, as sanlock 5.1.1 reports them).
fn read_lockspace_record(
    d: &Daemon,
    caller: &Caller,
    ls: &mut wire::Lockspace,
) -> Result<LeaderRecord, AdminError> {
    let disk = open_lockspace_disk(caller, &ls.host_id_disk, Need::Read)?;
    let (req_sector, _) = requested_sizes(ls.flags)?;
    let unit = req_sector.unwrap_or(disk.io_block());
    let timeout = Duration::from_secs(u64::from(d.cfg.io_timeout_s));
    let first = read_leader_sector(&disk, ls.host_id_disk.offset, unit, timeout)?;
    first
        .verify(LeaderKind::Delta, &Default::default())
        .map_err(AdminError::NotLockspace)?;
    let g = Geometry::from_leader(first.sector_size, first.flags).map_err(AdminError::Record)?;
    let host_id = ls.host_id.max(1);
    if host_id > g.max_hosts() {
        return Err(AdminError::Invalid(
            "host_id beyond the lockspace's host slots",
        ));
    }
    let rec = if host_id == 1 {
        first
    } else {
        let sector = req_sector.map_or(g.sector_bytes(), u64::from);
        let off = ls.host_id_disk.offset + (host_id - 1) * sector;
        read_leader_sector(&disk, off, sector as u32, timeout)?
    };
    rec.verify(LeaderKind::Delta, &Default::default())
        .map_err(AdminError::Record)?;
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

/// WRITE_RESOURCE: format a resource area, on each of its disks (1 to 4; every one must
/// be checked and written, as sanlock's init). `num_hosts` comes from header.data (quirk).
/// Empty lockspace and resource names are written as given, as sanlock does (vdsm clears
/// a lease with `write_resource(b"", b"", disks, clear=True)`).
pub fn write_resource(
    d: &Daemon,
    caller: &Caller,
    res: &wire::Resource,
    num_hosts: u32,
    clear: bool,
) -> Result<(), AdminError> {
    if res.disks.is_empty() || res.disks.len() > lease_core::disks::MAX_DISKS {
        return Err(AdminError::Invalid("a resource area is on 1 to 4 disks"));
    }
    // Every disk checked before any is written.
    let mut planned = Vec::with_capacity(res.disks.len());
    for wd in &res.disks {
        let disk = open(caller, wd, Need::Write)?;
        let g = format_geometry(&disk, res.head.flags)?;
        let off = wd.offset;
        // The area is written in one I/O of align bytes, so only the offset must suit the
        // storage (sanlock formats 512/1M areas on 4K storage the same way).
        if !off.is_multiple_of(g.sector_bytes()) || !off.is_multiple_of(u64::from(disk.io_block()))
        {
            return Err(AdminError::Invalid(
                "the offset does not suit the sector size or the storage",
            ));
        }
        // lvmlockd probes the end of the device: a write past it must fail with -ENOSPC.
        if disk.size() != 0 && off + g.align_bytes() > disk.size() {
            return Err(AdminError::PastEnd {
                end_bytes: off + g.align_bytes(),
                size_bytes: disk.size(),
            });
        }
        // Never over a lockspace we joined or a lease we hold (no client can force it).
        let path = wd.path.to_text();
        crate::inuse::refuse_if_in_use(d, "write_resource", &path, off, g.align_bytes())?;
        if planned.first().is_some_and(|(_, g0, _)| *g0 != g) {
            return Err(AdminError::Invalid(
                "the disks of a resource have different sector or align sizes",
            ));
        }
        planned.push((disk, g, off));
    }
    for (disk, g, off) in planned {
        let area = format_resource_area(&ResourceInit {
            geometry: g,
            space_name: res.head.lockspace_name,
            resource_name: res.head.name,
            num_hosts: u64::from(num_hosts),
            clear_at_monotime_s: clear.then(crate::clock::now_s),
        });
        disk.write(off, &area, WRITE_INIT_TIMEOUT)
            .map_err(AdminError::Io)?;
    }
    Ok(())
}

/// READ_RESOURCE: fills names, lver and geometry flags from the leader.
pub fn read_resource(
    d: &Daemon,
    caller: &Caller,
    res: &mut wire::Resource,
) -> Result<(), AdminError> {
    let wd = first_disk(res)?;
    let disk = open(caller, wd, Need::Read)?;
    // As sanlock: the requested sector size, else 4 KiB (enough for either size).
    let unit = requested_sizes(res.head.flags)?.0.unwrap_or(4096);
    let timeout = Duration::from_secs(u64::from(d.cfg.io_timeout_s));
    let leader = read_leader_sector(&disk, wd.offset, unit, timeout)?;
    if leader.magic != PAXOS_DISK_MAGIC {
        return Err(AdminError::NotResource(leader.magic));
    }
    leader
        .verify(LeaderKind::Paxos, &Default::default())
        .map_err(AdminError::Record)?;
    let g = Geometry::from_leader(leader.sector_size, leader.flags).map_err(AdminError::Record)?;
    res.head.lockspace_name = leader.space_name;
    res.head.name = leader.resource_name;
    res.head.lver = leader.lver;
    res.head.flags = (res.head.flags & !0x3F0) | g.api_flags();
    Ok(())
}

/// The first disk of a resource: the one its leader is read from.
fn first_disk(res: &wire::Resource) -> Result<&wire::DiskLocation, AdminError> {
    res.disks
        .first()
        .ok_or(AdminError::Invalid("the resource has no disk"))
}

/// READ_RESOURCE_OWNERS: the resource (names, lver, SHARED flag) and its holders.
pub fn read_resource_owners(
    d: &Daemon,
    caller: &Caller,
    res: &wire::Resource,
) -> Result<(wire::ResourceHead, Vec<wire::Host>), AdminError> {
    let wd = first_disk(res)?;
    let disk = open(caller, wd, Need::Read)?;
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
            .map_err(AdminError::Io)?;
        first = LeaderRecord::decode(&buf.as_slice()[..LEADER_RECORD_LEN])
            .map_err(AdminError::Record)?;
        let actual_align = leader_align(&first);
        if req_sector.is_some_and(|s| s != first.sector_size)
            || req_align.is_some_and(|a| a != actual_align)
        {
            return Err(AdminError::Invalid(
                "the requested sizes are not the leader's",
            ));
        }
        if (sector, align) == (first.sector_size, actual_align) {
            break;
        }
        if actual_align == 0 {
            return Err(AdminError::Invalid(
                "the leader's sector size has no align size",
            ));
        }
        if tries > 1 {
            return Err(AdminError::Invalid(
                "the leader's sizes changed between reads",
            ));
        }
        (sector, align) = (first.sector_size, actual_align);
    }
    let g = Geometry::from_leader(first.sector_size, first.flags)
        .map_err(|_| AdminError::Invalid("the leader's sizes are not a geometry"))?;
    let params = ResourceParams {
        space_name: res.head.lockspace_name,
        resource_name: res.head.name,
        disk_offset: wd.offset,
        geometry: g,
        io_timeout: d.cfg.io_timeout_s as u16,
        num_hosts_hint: 0,
    };
    let bd = BlockingDisk::new(disk);
    let (leader, owners) = block_on(paxos::read_owners(&bd, &params)).map_err(AdminError::Lease)?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use disk_format::rv;

    fn os(errno: i32) -> std::io::Error {
        std::io::Error::from_raw_os_error(errno)
    }

    #[test]
    fn each_refusal_has_the_code_sanlock_clients_get() {
        let open = || DirectIoError::Open {
            path: "/dev/x".into(),
            source: os(libc::EACCES),
        };
        let failed = DirectIoError::Failed {
            path: "/dev/x".into(),
            op: "read",
            offset: 0,
            source: os(libc::EIO),
        };
        let timeout = DirectIoError::Timeout {
            path: "/dev/x".into(),
            op: "write",
            offset: 0,
            timeout_ms: 10_000,
        };
        let magic = || FormatError::Magic {
            record: "leader",
            found: 0,
            expected: PAXOS_DISK_MAGIC,
        };
        let in_use = InUse {
            op: "write_resource",
            area: "resource lease ls:r held by this host".into(),
        };
        for (e, code) in [
            (AdminError::Invalid("x"), -libc::EINVAL),
            (AdminError::SizeFlags, -1),
            (AdminError::NotSupported("x"), -libc::EOPNOTSUPP),
            (AdminError::Open(open()), -libc::EACCES),
            (
                AdminError::LockspaceDisk(Box::new(AdminError::Open(open()))),
                -libc::ENODEV,
            ),
            (
                AdminError::LockspaceDisk(Box::new(AdminError::Invalid("x"))),
                -libc::ENODEV,
            ),
            (AdminError::InUse(in_use), -libc::EBUSY),
            (AdminError::Busy("x"), -libc::EBUSY),
            (
                AdminError::PastEnd {
                    end_bytes: 2 << 20,
                    size_bytes: 1 << 20,
                },
                -libc::ENOSPC,
            ),
            (AdminError::Io(failed), -libc::EIO),
            (AdminError::Io(timeout), rv::SANLK_AIO_TIMEOUT),
            (AdminError::Record(magic()), rv::SANLK_LEADER_MAGIC),
            (
                AdminError::Record(FormatError::Version {
                    record: "leader",
                    found: 0x0009_0001,
                    expected_major: 6,
                }),
                rv::SANLK_LEADER_VERSION,
            ),
            (AdminError::NotLockspace(magic()), rv::SANLK_LEADER_MAGIC),
            (
                AdminError::NotLockspace(FormatError::Checksum {
                    record: "leader",
                    stored: 1,
                    computed: 2,
                }),
                rv::SANLK_LEADER_MAGIC,
            ),
            (AdminError::NotResource(0), rv::SANLK_LEADER_MAGIC),
            (
                AdminError::Lease(LeaseError::Io {
                    op: lease_core::IoOp::LeaderRead,
                    timed_out: true,
                }),
                rv::SANLK_AIO_TIMEOUT,
            ),
            (
                AdminError::Lease(LeaseError::Format(magic())),
                rv::SANLK_LEADER_MAGIC,
            ),
        ] {
            assert_eq!(e.code(), code, "{e}");
        }
    }

    #[test]
    fn a_refusal_says_why() {
        let e = AdminError::LockspaceDisk(Box::new(AdminError::Invalid("the disk path is empty")));
        assert_eq!(
            e.to_string(),
            "no lockspace disk: invalid argument: the disk path is empty"
        );
        assert_eq!(
            AdminError::NotResource(0x1234).to_string(),
            "no resource lease here: magic 0x00001234"
        );
    }
}
