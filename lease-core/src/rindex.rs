//! The resource index ("rindex"), byte-compatible with sanlock's `src/rindex.c`.
//!
//! Layout (see `docs/on-disk-format.md` and `disk_format::rindex`), all in one lockspace's
//! geometry, starting at `rx_offset`:
//!
//! ```text
//! rx_offset                      area 0: sector 0 header, 64-byte entries from byte `sector`
//! rx_offset + align              area 1: the internal paxos lease "rindex_lease"
//! rx_offset + 2·align + i·align  resource lease of entry i
//! ```
//!
//! Operations (sanlock's SM_CMD_*_RINDEX / *_RESOURCE, commands 35–40):
//! - [`format`]: header + zeroed entries (one write of the whole area), then the
//!   `rindex_lease` area.
//! - [`lookup`]: by name, by offset, both (SANLK_RINDEX_DIFF on mismatch) or neither (the
//!   first free slot).
//! - [`update`]: add or remove one entry, without touching resource leases and without the
//!   internal lease (as sanlock's `direct update`).
//! - [`create`] / [`delete`]: under the `rindex_lease` paxos lease (acquired with
//!   OWNER_NOWAIT, released on every path): format the resource lease and write the entry /
//!   clear the entry and rewrite the lease with `PAXOS_DISK_CLEAR`.
//! - [`rebuild`] (under the lease) and [`rebuild_unlocked`] (sanlock's `direct rebuild`):
//!   rewrite every entry from the resource leases found on disk.
//!
//! Every entry change is a single one-sector write built from the area as read, so other
//! entries of that sector are preserved. Where sanlock leaves input unchecked (an offset
//! below the first resource slot or past max_resources indexes outside its buffer) lockd
//! refuses with `SANLK_RINDEX_OFFSET`; where sanlock would silently create a second entry
//! with the same name (create, update-add) lockd refuses with `-EEXIST`; everything else
//! returns sanlock's codes ([`RindexError::sanlk_code`]).

use disk_format::area::{format_resource_area, ResourceInit};
use disk_format::leader::{LeaderRecord, PAXOS_DISK_MAGIC};
use disk_format::rindex::{
    RindexEntry, RindexHeader, RINDEX_DEFAULT_MAX_RESOURCES, RINDEX_DISK_MAGIC,
    RINDEX_DISK_VERSION, RINDEX_ENTRY_LEN, RINDEX_HEADER_LEN,
};
use disk_format::scan::find_records;
use disk_format::{rv, AlignSize, Geometry, Name, SectorSize};

use crate::error::LeaseError;
use crate::io::{Clock, Disk, IoError};
use crate::monitor::HostObserver;
use crate::paxos::{self, AcquireOptions, HostContext, ResourceParams};

/// Name of the internal paxos lease at `rx_offset + align_size`.
pub const RINDEX_LEASE_NAME: &str = "rindex_lease";

/// Bytes read to find the header before its sector size is known (sanlock reads 4 KiB).
const HEADER_PROBE_LEN: usize = 4096;

const ENOENT: i32 = 2;
const EIO: i32 = 5;
const EEXIST: i32 = 17;
const EINVAL: i32 = 22;

/// Where a resource index lives (sanlock's `struct sanlk_rindex`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RindexParams {
    /// Lockspace name; must match the header.
    pub space_name: Name,
    /// Byte offset of the rindex area (`rx_offset`); must match the header.
    pub disk_offset: u64,
    /// io_timeout in seconds for every I/O (0 is treated as 1).
    pub io_timeout: u16,
}

impl RindexParams {
    fn io_ms(&self) -> u64 {
        u64::from(self.io_timeout.max(1)) * 1000
    }
}

/// One resource of the index (sanlock's `struct sanlk_rentry`): empty name = free slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RindexSlot {
    /// Resource name (empty for a free slot).
    pub name: Name,
    /// Byte offset of the resource lease on the disk.
    pub offset: u64,
}

/// What [`update`] does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpdateOp {
    /// `SANLK_RXUP_ADD`: record `name` for the lease at `offset` (the slot is overwritten).
    Add {
        /// Resource name (non-empty).
        name: Name,
        /// Lease offset (a resource slot of this index).
        offset: u64,
    },
    /// `SANLK_RXUP_REM`: clear the entry of the lease at `offset`.
    Remove {
        /// Lease offset (a resource slot of this index).
        offset: u64,
    },
}

/// A verified rindex header and what follows from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VerifiedRindex {
    /// The header as read.
    pub header: RindexHeader,
    /// Sector and align size of the index (and of its leases).
    pub geometry: Geometry,
    /// Number of slots searched: the header's max_resources, or the geometry's cap when it
    /// is 0, never more than fit in the area.
    pub max_resources: u32,
}

impl VerifiedRindex {
    /// Byte offset of the resource lease of slot `i`.
    pub fn slot_offset(&self, i: u32) -> u64 {
        let a = self.geometry.align_bytes();
        self.header.rx_offset + 2 * a + u64::from(i) * a
    }

    /// Byte offset of the `rindex_lease` area.
    pub fn lease_offset(&self) -> u64 {
        self.header.rx_offset + self.geometry.align_bytes()
    }

    /// Byte position of entry `i` inside the rindex area.
    fn entry_pos(&self, i: u32) -> usize {
        self.geometry.sector_bytes() as usize + i as usize * RINDEX_ENTRY_LEN
    }

    /// The slot of a lease offset, checked as sanlock does (multiple of align size) and
    /// as sanlock does not (inside the index's slots).
    pub fn slot_of(&self, offset: u64) -> Result<u32, RindexError> {
        let a = self.geometry.align_bytes();
        if !offset.is_multiple_of(a) {
            return Err(RindexError::Offset(format!(
                "resource offset {offset} is not a multiple of the align size {a}"
            )));
        }
        let first = self.slot_offset(0);
        let slot = offset
            .checked_sub(first)
            .map(|d| d / a)
            .filter(|&s| s < u64::from(self.max_resources));
        match slot {
            Some(s) => Ok(s as u32),
            None => Err(RindexError::Offset(format!(
                "resource offset {offset} is outside the index's slots ({first} to {})",
                self.slot_offset(self.max_resources.saturating_sub(1))
            ))),
        }
    }

    /// Decodes entry `i` from the area bytes.
    fn entry(&self, area: &[u8], i: u32) -> RindexEntry {
        let p = self.entry_pos(i);
        // Invariant: max_resources is clamped so every entry lies inside the area.
        RindexEntry::decode(&area[p..p + RINDEX_ENTRY_LEN]).expect("entry inside the area")
    }

    fn lease_params(&self, p: &RindexParams) -> ResourceParams {
        ResourceParams {
            space_name: p.space_name,
            resource_name: rindex_lease_name(),
            disk_offset: self.lease_offset(),
            geometry: self.geometry,
            io_timeout: p.io_timeout,
            num_hosts_hint: 0,
        }
    }
}

/// Error of a rindex operation; [`RindexError::sanlk_code`] is what a sanlock client sees.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RindexError {
    /// No rindex header at the offset (SANLK_RINDEX_MAGIC).
    #[error(
        "no resource index here: header magic 0x{found:08x}, expected 0x{RINDEX_DISK_MAGIC:08x}"
    )]
    Magic {
        /// Magic found.
        found: u32,
    },
    /// Unsupported major version (SANLK_RINDEX_VERSION).
    #[error("unsupported resource index version 0x{found:08x} (expected major 0x0001)")]
    Version {
        /// Version found.
        found: u32,
    },
    /// The header names another lockspace (SANLK_RINDEX_LOCKSPACE).
    #[error("resource index belongs to lockspace {found:?}, not {expected:?}")]
    Lockspace {
        /// Name in the header.
        found: String,
        /// Name asked for.
        expected: String,
    },
    /// rx_offset in the header differs, or a resource offset is not a slot of this index
    /// (SANLK_RINDEX_OFFSET).
    #[error("{0}")]
    Offset(String),
    /// The slot at the given offset records another name (SANLK_RINDEX_DIFF).
    #[error("the entry at offset {offset} is {found:?}, not {expected:?}")]
    Diff {
        /// Name recorded in the slot (possibly empty).
        found: Name,
        /// Name asked for.
        expected: Name,
        /// The lease offset.
        offset: u64,
    },
    /// The header's sector size or align flag is not a valid geometry
    /// (SANLK_RINDEX_MAGIC: not a usable index).
    #[error("resource index header is corrupt: sector size {sector_size}, flags 0x{flags:x}")]
    Corrupt {
        /// sector_size field.
        sector_size: u32,
        /// flags field.
        flags: u32,
    },
    /// No entry with that name (-ENOENT).
    #[error("no resource {0:?} in the index")]
    NotFound(Name),
    /// No free slot (-ENOENT, as sanlock's search returns).
    #[error("the index is full ({max_resources} resources)")]
    Full {
        /// Slots of the index.
        max_resources: u32,
    },
    /// The name is already in the index (-EEXIST).
    #[error("resource {name:?} is already in the index at offset {offset}")]
    Exists {
        /// The name.
        name: Name,
        /// Its lease offset.
        offset: u64,
    },
    /// Bad argument (-EINVAL).
    #[error("invalid argument: {0}")]
    Invalid(&'static str),
    /// A read or write of the index failed (-EIO) or timed out (SANLK_AIO_TIMEOUT).
    #[error("{what} {}", if *timed_out { "timed out" } else { "failed" })]
    Io {
        /// What the I/O was.
        what: &'static str,
        /// True for a timeout.
        timed_out: bool,
    },
    /// Acquiring, releasing or formatting a paxos lease failed.
    #[error("rindex_lease: {0}")]
    Lease(#[from] LeaseError),
}

impl RindexError {
    /// sanlock's result code (negative).
    pub fn sanlk_code(&self) -> i32 {
        match self {
            RindexError::Magic { .. } | RindexError::Corrupt { .. } => rv::SANLK_RINDEX_MAGIC,
            RindexError::Version { .. } => rv::SANLK_RINDEX_VERSION,
            RindexError::Lockspace { .. } => rv::SANLK_RINDEX_LOCKSPACE,
            RindexError::Offset(_) => rv::SANLK_RINDEX_OFFSET,
            RindexError::Diff { .. } => rv::SANLK_RINDEX_DIFF,
            RindexError::NotFound(_) | RindexError::Full { .. } => -ENOENT,
            RindexError::Exists { .. } => -EEXIST,
            RindexError::Invalid(_) => -EINVAL,
            RindexError::Io {
                timed_out: true, ..
            } => rv::SANLK_AIO_TIMEOUT,
            RindexError::Io { .. } => -EIO,
            RindexError::Lease(e) => e.sanlk_code(),
        }
    }

    fn io(what: &'static str, e: IoError) -> RindexError {
        RindexError::Io {
            what,
            timed_out: e == IoError::TimedOut,
        }
    }
}

fn rindex_lease_name() -> Name {
    Name::new(RINDEX_LEASE_NAME).expect("constant name is valid")
}

/// max_resources as sanlock's format stores it: 0 → 4096, capped per geometry.
pub fn effective_max_resources(geometry: Geometry, requested: u32) -> u32 {
    let n = if requested == 0 {
        RINDEX_DEFAULT_MAX_RESOURCES
    } else {
        requested
    };
    n.min(geometry.rindex_max_resources_cap())
}

fn geometry_of(h: &RindexHeader) -> Result<Geometry, RindexError> {
    let corrupt = RindexError::Corrupt {
        sector_size: h.sector_size,
        flags: h.flags,
    };
    let sector = SectorSize::from_bytes(h.sector_size).ok_or(corrupt.clone())?;
    let align = match h.flags & 0xF {
        0x1 => AlignSize::M1,
        0x2 => AlignSize::M2,
        0x4 => AlignSize::M4,
        0x8 => AlignSize::M8,
        _ => return Err(corrupt),
    };
    Geometry::new(sector, align).map_err(|_| corrupt)
}

/// Verifies a header read at `p.disk_offset` (sanlock's `read_rindex_header` checks, in its
/// order, then the geometry).
pub fn verify_header(h: &RindexHeader, p: &RindexParams) -> Result<VerifiedRindex, RindexError> {
    if h.magic != RINDEX_DISK_MAGIC {
        return Err(RindexError::Magic { found: h.magic });
    }
    if h.version & 0xFFFF_0000 != RINDEX_DISK_VERSION & 0xFFFF_0000 {
        return Err(RindexError::Version { found: h.version });
    }
    if !h.lockspace_name.same_as(&p.space_name) {
        return Err(RindexError::Lockspace {
            found: h.lockspace_name.to_text(),
            expected: p.space_name.to_text(),
        });
    }
    if h.rx_offset != p.disk_offset {
        return Err(RindexError::Offset(format!(
            "resource index header records offset {}, not {}",
            h.rx_offset, p.disk_offset
        )));
    }
    let geometry = geometry_of(h)?;
    let fit = (geometry.align_bytes() - geometry.sector_bytes()) / RINDEX_ENTRY_LEN as u64;
    let max = if h.max_resources == 0 {
        geometry.rindex_max_resources_cap()
    } else {
        h.max_resources
    };
    Ok(VerifiedRindex {
        header: *h,
        geometry,
        max_resources: (u64::from(max).min(fit)) as u32,
    })
}

/// Reads and verifies the header.
pub async fn read_header<D: Disk>(
    disk: &D,
    p: &RindexParams,
) -> Result<VerifiedRindex, RindexError> {
    let buf = disk
        .read(p.disk_offset, HEADER_PROBE_LEN, p.io_ms())
        .await
        .map_err(|e| RindexError::io("reading the rindex header", e))?;
    let h = RindexHeader::decode(&buf[..RINDEX_HEADER_LEN]).map_err(|_| RindexError::Io {
        what: "reading the rindex header (short read)",
        timed_out: false,
    })?;
    verify_header(&h, p)
}

async fn read_area<D: Disk>(
    disk: &D,
    p: &RindexParams,
    rx: &VerifiedRindex,
) -> Result<Vec<u8>, RindexError> {
    let len = rx.geometry.align_bytes() as usize;
    let buf = disk
        .read(p.disk_offset, len, p.io_ms())
        .await
        .map_err(|e| RindexError::io("reading the rindex area", e))?;
    if buf.len() != len {
        return Err(RindexError::Io {
            what: "reading the rindex area (short read)",
            timed_out: false,
        });
    }
    Ok(buf.to_vec())
}

/// Reads the header and every slot (free ones included), for listing and checks.
pub async fn read_entries<D: Disk>(
    disk: &D,
    p: &RindexParams,
) -> Result<(VerifiedRindex, Vec<RindexEntry>), RindexError> {
    let rx = read_header(disk, p).await?;
    let area = read_area(disk, p, &rx).await?;
    let entries = (0..rx.max_resources).map(|i| rx.entry(&area, i)).collect();
    Ok((rx, entries))
}

fn find_name(rx: &VerifiedRindex, area: &[u8], name: &Name) -> Option<u32> {
    (0..rx.max_resources).find(|&i| {
        let e = rx.entry(area, i);
        !e.name.is_empty() && e.name.same_as(name)
    })
}

fn find_free(rx: &VerifiedRindex, area: &[u8]) -> Option<u32> {
    (0..rx.max_resources).find(|&i| rx.entry(area, i).is_free())
}

/// Writes the sector holding entry `i`, taken from `area` with that entry replaced.
async fn write_entry<D: Disk>(
    disk: &D,
    p: &RindexParams,
    rx: &VerifiedRindex,
    area: &mut [u8],
    i: u32,
    entry: &RindexEntry,
) -> Result<(), RindexError> {
    // Every caller found `i` among the searched slots, and max_resources never counts
    // more entries than the area read holds (verify_header caps it).
    assert!(
        i < rx.max_resources && rx.entry_pos(i) + RINDEX_ENTRY_LEN <= area.len(),
        "rindex: entry {i} is outside the {} searched slots / {}-byte area",
        rx.max_resources,
        area.len()
    );
    let pos = rx.entry_pos(i);
    entry.encode_into(&mut area[pos..pos + RINDEX_ENTRY_LEN]);
    let sector = rx.geometry.sector_bytes() as usize;
    let start = pos / sector * sector;
    disk.write(
        p.disk_offset + start as u64,
        &area[start..start + sector],
        p.io_ms(),
    )
    .await
    .map_err(|e| RindexError::io("writing a rindex entry", e))
}

fn new_entry(name: Name, offset: u64) -> RindexEntry {
    RindexEntry {
        res_offset: offset,
        flags: 0,
        unused: 0,
        name,
    }
}

/// Formats a resource index (sanlock `rindex_format`): the header with `max_resources`
/// (0 → 4096, capped per geometry) and zeroed entries in one write of the whole area, then
/// the `rindex_lease` paxos area at `rx_offset + align`. Overwrites whatever was there:
/// callers check first.
pub async fn format<D: Disk>(
    disk: &D,
    p: &RindexParams,
    geometry: Geometry,
    max_resources: u32,
) -> Result<VerifiedRindex, RindexError> {
    if p.space_name.is_empty() {
        return Err(RindexError::Invalid("empty lockspace name"));
    }
    if !p.disk_offset.is_multiple_of(geometry.sector_bytes()) {
        return Err(RindexError::Invalid(
            "rindex offset is not a multiple of the sector size",
        ));
    }
    let header = RindexHeader {
        magic: RINDEX_DISK_MAGIC,
        version: RINDEX_DISK_VERSION,
        flags: geometry.align_size.rindex_flag(),
        sector_size: geometry.sector_size.bytes(),
        max_resources: effective_max_resources(geometry, max_resources),
        unused: 0,
        rx_offset: p.disk_offset,
        lockspace_name: p.space_name,
    };
    let mut area = vec![0u8; geometry.align_bytes() as usize];
    header.encode_into(&mut area);
    disk.write(p.disk_offset, &area, p.io_ms())
        .await
        .map_err(|e| RindexError::io("writing the rindex area", e))?;
    let rx = verify_header(&header, p)?;
    let lease = format_resource_area(&ResourceInit {
        geometry,
        space_name: p.space_name,
        resource_name: rindex_lease_name(),
        num_hosts: 0,
        clear_at_monotime_s: None,
    });
    disk.write(rx.lease_offset(), &lease, p.io_ms())
        .await
        .map_err(|e| RindexError::io("writing the rindex_lease area", e))?;
    Ok(rx)
}

/// Looks up an entry (sanlock `rindex_lookup`):
/// - `name` and `offset == 0`: the slot with that name (-ENOENT if none);
/// - no name and `offset`: the name recorded for that slot (empty when free);
/// - `name` and `offset`: that slot, [`RindexError::Diff`] when it records another name;
/// - neither: the first free slot (-ENOENT when full).
pub async fn lookup<D: Disk>(
    disk: &D,
    p: &RindexParams,
    name: Option<&Name>,
    offset: u64,
) -> Result<RindexSlot, RindexError> {
    let rx = read_header(disk, p).await?;
    let area = read_area(disk, p, &rx).await?;
    let name = name.filter(|n| !n.is_empty());
    match (name, offset) {
        (None, 0) => match find_free(&rx, &area) {
            Some(i) => Ok(RindexSlot {
                name: Name::EMPTY,
                offset: rx.slot_offset(i),
            }),
            None => Err(RindexError::Full {
                max_resources: rx.max_resources,
            }),
        },
        (Some(n), 0) => match find_name(&rx, &area, n) {
            Some(i) => Ok(RindexSlot {
                name: *n,
                offset: rx.slot_offset(i),
            }),
            None => Err(RindexError::NotFound(*n)),
        },
        (None, off) => {
            let i = rx.slot_of(off)?;
            Ok(RindexSlot {
                name: rx.entry(&area, i).name,
                offset: off,
            })
        }
        (Some(n), off) => {
            let i = rx.slot_of(off)?;
            let found = rx.entry(&area, i).name;
            if found.same_as(n) {
                Ok(RindexSlot {
                    name: found,
                    offset: off,
                })
            } else {
                Err(RindexError::Diff {
                    found,
                    expected: *n,
                    offset: off,
                })
            }
        }
    }
}

/// Adds or removes one entry without touching resource leases and without the internal
/// lease (sanlock `rindex_update`, as `direct update` runs it). Add overwrites the slot of
/// `offset`; it is refused with -EEXIST when the name is recorded in another slot.
pub async fn update<D: Disk>(
    disk: &D,
    p: &RindexParams,
    op: UpdateOp,
) -> Result<RindexSlot, RindexError> {
    let rx = read_header(disk, p).await?;
    let mut area = read_area(disk, p, &rx).await?;
    match op {
        UpdateOp::Add { name, offset } => {
            if offset != 0 {
                rx.slot_of(offset)?;
            }
            if name.is_empty() || offset == 0 {
                return Err(RindexError::Invalid(
                    "adding an entry needs a name and an offset",
                ));
            }
            let i = rx.slot_of(offset)?;
            if let Some(j) = find_name(&rx, &area, &name) {
                if j != i {
                    return Err(RindexError::Exists {
                        name,
                        offset: rx.slot_offset(j),
                    });
                }
            }
            write_entry(disk, p, &rx, &mut area, i, &new_entry(name, offset)).await?;
            Ok(RindexSlot { name, offset })
        }
        UpdateOp::Remove { offset } => {
            if offset == 0 {
                return Err(RindexError::Invalid("removing an entry needs an offset"));
            }
            let i = rx.slot_of(offset)?;
            write_entry(disk, p, &rx, &mut area, i, &new_entry(Name::EMPTY, 0)).await?;
            Ok(RindexSlot {
                name: Name::EMPTY,
                offset: 0,
            })
        }
    }
}

/// Runs `body` while holding the `rindex_lease` (acquired with OWNER_NOWAIT as sanlock
/// does: a live holder fails the operation at once), and releases it whatever `body`
/// returned. A release failure is reported only when `body` succeeded.
async fn with_rindex_lease<D, C, L, O, T, F, Fut>(
    disk: &D,
    clock: &C,
    host: &HostContext<'_, L, O>,
    p: &RindexParams,
    rx: &VerifiedRindex,
    body: F,
) -> Result<T, RindexError>
where
    D: Disk,
    C: Clock,
    L: Disk,
    O: HostObserver,
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Result<T, RindexError>>,
{
    if !host.lockspace.space_name.same_as(&p.space_name) {
        return Err(RindexError::Invalid(
            "the host context is for another lockspace than the index",
        ));
    }
    let opts = AcquireOptions {
        owner_nowait: true,
        ..AcquireOptions::default()
    };
    let token = paxos::acquire(disk, clock, host, &rx.lease_params(p), &opts).await?;
    // The index is changed only under the rindex_lease, held exclusively by us.
    assert!(
        token.mode == paxos::Mode::Exclusive
            && token.leader.owner_id == host.lockspace.host_id
            && token.leader.owner_generation == host.generation,
        "rindex: changing the index without holding its lease"
    );
    let out = body().await;
    let released = paxos::release(disk, clock, &token).await;
    match (out, released) {
        (Ok(v), Ok(())) => Ok(v),
        (Ok(_), Err(e)) => Err(e.into()),
        (Err(e), _) => Err(e),
    }
}

/// Creates a resource (sanlock `rindex_create`): under the `rindex_lease`, find the first
/// free slot whose lease area can be written, format its paxos lease (`num_hosts` 0 =
/// max_hosts) and then write the entry. Returns the new entry. Errors: -EINVAL (empty
/// name), -EEXIST (name already indexed), -ENOENT (no usable free slot), lease errors
/// (e.g. SANLK_ACQUIRE_IDLIVE when another live host is in the middle of a create or
/// delete), header errors.
///
/// sanlock takes the first free *entry* whatever its lease area holds, so a lease that is
/// on disk but not indexed (made by `direct init`, or dropped from the index by `update
/// -z 1`) — possibly held at that moment — is formatted over. lockd skips a free slot
/// whose area holds any valid record (`disk_format::scan`: a paxos or delta leader, a
/// written ballot, an index header; a `PAXOS_DISK_CLEAR` leader left by delete is free)
/// and any slot `in_use(offset, len)` names (the daemon's own leases and lockspaces).
pub async fn create<D, C, L, O>(
    disk: &D,
    clock: &C,
    host: &HostContext<'_, L, O>,
    p: &RindexParams,
    name: &Name,
    num_hosts: u64,
    in_use: &dyn Fn(u64, u64) -> bool,
) -> Result<RindexSlot, RindexError>
where
    D: Disk,
    C: Clock,
    L: Disk,
    O: HostObserver,
{
    if name.is_empty() {
        return Err(RindexError::Invalid("empty resource name"));
    }
    let rx = read_header(disk, p).await?;
    with_rindex_lease(disk, clock, host, p, &rx, || async {
        let mut area = read_area(disk, p, &rx).await?;
        if let Some(j) = find_name(&rx, &area, name) {
            return Err(RindexError::Exists {
                name: *name,
                offset: rx.slot_offset(j),
            });
        }
        let i = find_usable_free(disk, p, &rx, &area, in_use)
            .await?
            .ok_or(RindexError::Full {
                max_resources: rx.max_resources,
            })?;
        let offset = rx.slot_offset(i);
        let lease = format_resource_area(&ResourceInit {
            geometry: rx.geometry,
            space_name: p.space_name,
            resource_name: *name,
            num_hosts,
            clear_at_monotime_s: None,
        });
        disk.write(offset, &lease, p.io_ms())
            .await
            .map_err(|e| RindexError::io("writing the new resource lease", e))?;
        write_entry(disk, p, &rx, &mut area, i, &new_entry(*name, offset)).await?;
        Ok(RindexSlot {
            name: *name,
            offset,
        })
    })
    .await
}

/// The first free slot whose lease area holds no valid record and is not `in_use`
/// (see [`create`]); `None` when there is none. Reads each candidate area whole.
async fn find_usable_free<D: Disk>(
    disk: &D,
    p: &RindexParams,
    rx: &VerifiedRindex,
    area: &[u8],
    in_use: &dyn Fn(u64, u64) -> bool,
) -> Result<Option<u32>, RindexError> {
    let len = rx.geometry.align_bytes();
    for i in (0..rx.max_resources).filter(|&i| rx.entry(area, i).is_free()) {
        let offset = rx.slot_offset(i);
        if in_use(offset, len) {
            continue;
        }
        let buf = disk
            .read(offset, len as usize, p.io_ms())
            .await
            .map_err(|e| RindexError::io("reading a free slot's lease area", e))?;
        if (buf.len() as u64) < len {
            // The device ends inside this slot: no lease fits here or after it.
            return Ok(None);
        }
        if find_records(&buf, offset).is_empty() {
            return Ok(Some(i));
        }
    }
    Ok(None)
}

/// Deletes a resource (sanlock `rindex_delete`): under the `rindex_lease`, clear the entry
/// named `name`, then rewrite its lease area with a `PAXOS_DISK_CLEAR` leader. `offset`
/// 0 means "wherever it is"; otherwise it must be that entry's offset
/// ([`RindexError::Diff`] if the entry lives elsewhere). Returns the entry as it was.
pub async fn delete<D, C, L, O>(
    disk: &D,
    clock: &C,
    host: &HostContext<'_, L, O>,
    p: &RindexParams,
    name: &Name,
    offset: u64,
) -> Result<RindexSlot, RindexError>
where
    D: Disk,
    C: Clock,
    L: Disk,
    O: HostObserver,
{
    if name.is_empty() {
        return Err(RindexError::Invalid("empty resource name"));
    }
    let rx = read_header(disk, p).await?;
    if offset != 0 {
        rx.slot_of(offset)?;
    }
    with_rindex_lease(disk, clock, host, p, &rx, || async {
        let mut area = read_area(disk, p, &rx).await?;
        let i = find_name(&rx, &area, name).ok_or(RindexError::NotFound(*name))?;
        let at = rx.slot_offset(i);
        if offset != 0 && offset != at {
            return Err(RindexError::Diff {
                found: rx.entry(&area, rx.slot_of(offset)?).name,
                expected: *name,
                offset,
            });
        }
        write_entry(disk, p, &rx, &mut area, i, &new_entry(Name::EMPTY, 0)).await?;
        let cleared = format_resource_area(&ResourceInit {
            geometry: rx.geometry,
            space_name: p.space_name,
            resource_name: *name,
            num_hosts: 0,
            clear_at_monotime_s: Some(clock.now_s()),
        });
        disk.write(at, &cleared, p.io_ms())
            .await
            .map_err(|e| RindexError::io("clearing the resource lease", e))?;
        Ok(RindexSlot {
            name: *name,
            offset: at,
        })
    })
    .await
}

async fn rebuild_scan<D: Disk>(
    disk: &D,
    p: &RindexParams,
    rx: &VerifiedRindex,
    device_len: u64,
) -> Result<Vec<RindexSlot>, RindexError> {
    let mut area = read_area(disk, p, rx).await?;
    let sector = rx.geometry.sector_bytes() as usize;
    area[sector..].fill(0);
    let mut found = Vec::new();
    for i in 0..rx.max_resources {
        let off = rx.slot_offset(i);
        if off + sector as u64 > device_len {
            break; // end of the device, as sanlock's -EMSGSIZE
        }
        let buf = disk
            .read(off, sector, p.io_ms())
            .await
            .map_err(|e| RindexError::io("reading a resource leader", e))?;
        // As sanlock (T_CHECK_EXISTS): only the magic decides, not the checksum.
        let Ok(leader) = LeaderRecord::decode(&buf) else {
            continue;
        };
        if leader.magic != PAXOS_DISK_MAGIC {
            continue;
        }
        let e = new_entry(leader.resource_name, off);
        let pos = rx.entry_pos(i);
        e.encode_into(&mut area[pos..pos + RINDEX_ENTRY_LEN]);
        found.push(RindexSlot {
            name: leader.resource_name,
            offset: off,
        });
    }
    disk.write(p.disk_offset, &area, p.io_ms())
        .await
        .map_err(|e| RindexError::io("writing the rebuilt rindex area", e))?;
    Ok(found)
}

/// Rebuilds the entries from the resource leases on disk (sanlock `rindex_rebuild`) under
/// the `rindex_lease`: every slot whose first sector holds a paxos leader magic gets an
/// entry with the leader's resource name, all others are cleared; the area is written
/// once. `device_len` (bytes) ends the scan at the end of the device. Returns the entries.
pub async fn rebuild<D, C, L, O>(
    disk: &D,
    clock: &C,
    host: &HostContext<'_, L, O>,
    p: &RindexParams,
    device_len: u64,
) -> Result<Vec<RindexSlot>, RindexError>
where
    D: Disk,
    C: Clock,
    L: Disk,
    O: HostObserver,
{
    let rx = read_header(disk, p).await?;
    with_rindex_lease(disk, clock, host, p, &rx, || {
        rebuild_scan(disk, p, &rx, device_len)
    })
    .await
}

/// [`rebuild`] without the internal lease, as `sanlock direct rebuild` (no lockspace):
/// only safe when no host uses the index.
pub async fn rebuild_unlocked<D: Disk>(
    disk: &D,
    p: &RindexParams,
    device_len: u64,
) -> Result<Vec<RindexSlot>, RindexError> {
    let rx = read_header(disk, p).await?;
    rebuild_scan(disk, p, &rx, device_len).await
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::future::Future;
    use std::pin::{pin, Pin};
    use std::task::{Context, Poll, Waker};

    use disk_format::area::format_lockspace_area;
    use disk_format::leader::PAXOS_DISK_CLEAR;

    use super::*;
    use crate::delta::{self, DeltaState, LockspaceParams, RenewInput};
    use crate::exec::block_on;
    use crate::monitor::HostMonitor;
    use crate::testutil::{MemDisk, TestClock};

    const MIB: u64 = 1 << 20;
    const RX: u64 = MIB;
    const G: Geometry = Geometry::ALL[0];

    fn n(s: &str) -> Name {
        Name::new(s).unwrap()
    }

    fn params() -> RindexParams {
        RindexParams {
            space_name: n("ls"),
            disk_offset: RX,
            io_timeout: 1,
        }
    }

    /// Lockspace "ls" at 0 and a rindex with `max` slots at 1 MiB (slots from 3 MiB).
    fn disk(max: u32) -> MemDisk {
        let d = MemDisk::new((3 + max as usize) << 20);
        let f = format_lockspace_area(G, &n("ls"), 1);
        d.put(0, &f.area);
        d.put(0, &f.first_sector);
        block_on(format(&d, &params(), G, max)).unwrap();
        d
    }

    struct Host {
        p: LockspaceParams,
        st: DeltaState,
        mon: RefCell<HostMonitor>,
    }

    impl Host {
        fn join(d: &MemDisk, c: &TestClock, id: u64) -> Host {
            let p = LockspaceParams {
                space_name: n("ls"),
                disk_offset: 0,
                geometry: G,
                host_id: id,
                host_name: n(&format!("host{id}")),
                io_timeout: 1,
                watchdog_fire: 10,
                monitor_hosts: Some(8),
            };
            let st = block_on(delta::acquire(d, c, &p)).unwrap();
            Host {
                mon: RefCell::new(HostMonitor::new(id, p.watchdog_fire)),
                p,
                st,
            }
        }

        fn renew(&mut self, d: &MemDisk, c: &TestClock) {
            let snap = block_on(delta::renew(
                d,
                c,
                &self.p,
                &mut self.st,
                &RenewInput::default(),
            ))
            .unwrap();
            self.mon.borrow_mut().observe(snap.read_at_s, &snap.sectors);
        }

        fn ctx<'a, D: Disk>(&'a self, d: &'a D) -> HostContext<'a, D, RefCell<HostMonitor>> {
            HostContext {
                lockspace_disk: d,
                lockspace: &self.p,
                generation: self.st.generation(),
                observer: &self.mon,
            }
        }
    }

    fn two_hosts(max: u32) -> (MemDisk, TestClock, Host, Host) {
        let d = disk(max);
        let c = TestClock::at_s(1000);
        let mut a = Host::join(&d, &c, 1);
        let mut b = Host::join(&d, &c, 2);
        for _ in 0..2 {
            c.now_ms.set(c.now_ms.get() + 2000);
            a.renew(&d, &c);
            b.renew(&d, &c);
        }
        (d, c, a, b)
    }

    fn entry_at(d: &MemDisk, i: u64) -> RindexEntry {
        RindexEntry::decode(&d.get(RX + 512 + 64 * i, 64)).unwrap()
    }

    fn leader_at(d: &MemDisk, off: u64) -> LeaderRecord {
        LeaderRecord::decode(&d.get(off, 512)).unwrap()
    }

    #[test]
    fn format_writes_header_zeroed_entries_and_the_rindex_lease() {
        let d = disk(4);
        let h = RindexHeader::decode(&d.get(RX, 80)).unwrap();
        assert_eq!(h.magic, RINDEX_DISK_MAGIC);
        assert_eq!(h.version, 0x0001_0002);
        assert_eq!((h.flags, h.sector_size, h.max_resources), (1, 512, 4));
        assert_eq!(h.rx_offset, RX);
        assert!(d.get(RX + 80, MIB as usize - 80).iter().all(|&b| b == 0));
        let l = leader_at(&d, 2 * MIB);
        assert_eq!(l.magic, PAXOS_DISK_MAGIC);
        assert_eq!(l.resource_name.to_text(), "rindex_lease");
        assert_eq!((l.num_hosts, l.max_hosts), (2000, 2000));
        // Defaults and caps of max_resources.
        assert_eq!(effective_max_resources(G, 0), 4096);
        assert_eq!(effective_max_resources(G, 99_999), 16000);
        assert_eq!(effective_max_resources(Geometry::ALL[4], 200_000), 128_000);
        for g in Geometry::ALL {
            let cap = g.rindex_max_resources_cap() as u64;
            assert!(g.sector_bytes() + 64 * cap <= g.align_bytes());
        }
        let bad = RindexParams {
            space_name: Name::EMPTY,
            ..params()
        };
        let e = block_on(format(&d, &bad, G, 0)).unwrap_err();
        assert_eq!(e.sanlk_code(), -22);
    }

    #[test]
    fn update_add_lookup_remove() {
        let d = disk(4);
        let p = params();
        let add = |name: &str, off| {
            block_on(update(
                &d,
                &p,
                UpdateOp::Add {
                    name: n(name),
                    offset: off,
                },
            ))
        };
        assert_eq!(add("r1", 3 * MIB).unwrap().offset, 3 * MIB);
        add("r2", 5 * MIB).unwrap();
        assert_eq!(entry_at(&d, 0).name.to_text(), "r1");
        assert_eq!(entry_at(&d, 0).res_offset, 3 * MIB);
        assert!(entry_at(&d, 1).is_free());
        assert_eq!(entry_at(&d, 2).name.to_text(), "r2");
        // The resource areas are untouched.
        assert!(d.get(3 * MIB, 512).iter().all(|&b| b == 0));

        let look = |name: Option<&str>, off| block_on(lookup(&d, &p, name.map(n).as_ref(), off));
        assert_eq!(look(Some("r2"), 0).unwrap().offset, 5 * MIB);
        assert_eq!(look(None, 0).unwrap().offset, 4 * MIB);
        assert_eq!(look(None, 3 * MIB).unwrap().name.to_text(), "r1");
        assert!(look(None, 4 * MIB).unwrap().name.is_empty());
        assert_eq!(look(Some("r1"), 3 * MIB).unwrap().name.to_text(), "r1");
        let e = look(Some("r2"), 3 * MIB).unwrap_err();
        assert_eq!(e.sanlk_code(), -278);
        assert!(matches!(e, RindexError::Diff { found, .. } if found.to_text() == "r1"));
        assert_eq!(look(Some("nope"), 0).unwrap_err().sanlk_code(), -2);
        assert_eq!(look(None, 3 * MIB + 512).unwrap_err().sanlk_code(), -277);
        assert_eq!(look(None, 2 * MIB).unwrap_err().sanlk_code(), -277);
        assert_eq!(look(None, 7 * MIB).unwrap_err().sanlk_code(), -277);

        let before = d.get(0, d.bytes.borrow().len());
        // Duplicate name elsewhere, missing offset, bad offsets: refused, nothing written.
        assert_eq!(add("r1", 4 * MIB).unwrap_err().sanlk_code(), -17);
        assert_eq!(add("r3", 0).unwrap_err().sanlk_code(), -22);
        assert_eq!(add("r3", 1234).unwrap_err().sanlk_code(), -277);
        assert_eq!(add("r3", MIB).unwrap_err().sanlk_code(), -277);
        let rm0 = block_on(update(&d, &p, UpdateOp::Remove { offset: 0 }));
        assert_eq!(rm0.unwrap_err().sanlk_code(), -22);
        assert_eq!(before, d.get(0, d.bytes.borrow().len()));
        // Re-adding the same name at its own slot is allowed (a repair).
        add("r1", 3 * MIB).unwrap();

        block_on(update(&d, &p, UpdateOp::Remove { offset: 3 * MIB })).unwrap();
        assert!(entry_at(&d, 0).is_free());
        assert_eq!(entry_at(&d, 2).name.to_text(), "r2");
        assert_eq!(look(Some("r1"), 0).unwrap_err().sanlk_code(), -2);
        assert_eq!(look(None, 0).unwrap().offset, 3 * MIB);
    }

    #[test]
    fn full_index_and_header_errors() {
        let d = disk(2);
        let p = params();
        for (name, off) in [("a", 3 * MIB), ("b", 4 * MIB)] {
            let op = UpdateOp::Add {
                name: n(name),
                offset: off,
            };
            block_on(update(&d, &p, op)).unwrap();
        }
        let e = block_on(lookup(&d, &p, None, 0)).unwrap_err();
        assert_eq!(e.sanlk_code(), -2);
        assert!(matches!(e, RindexError::Full { max_resources: 2 }));

        let other = RindexParams {
            space_name: n("other"),
            ..params()
        };
        let e = block_on(lookup(&d, &other, Some(&n("a")), 0)).unwrap_err();
        assert_eq!(e.sanlk_code(), -276);
        let moved = RindexParams {
            disk_offset: 0,
            ..params()
        };
        assert_eq!(
            block_on(lookup(&d, &moved, None, 0))
                .unwrap_err()
                .sanlk_code(),
            -274
        );
        let h = d.get(RX, 80);
        let mut bad = h.clone();
        bad[6] = 2; // major version 2
        d.put(RX, &bad);
        let e = block_on(lookup(&d, &p, None, 0)).unwrap_err();
        assert_eq!(e.sanlk_code(), -275);
        let mut bad = h.clone();
        bad[24] = 1; // rx_offset differs
        d.put(RX, &bad);
        assert_eq!(
            block_on(lookup(&d, &p, None, 0)).unwrap_err().sanlk_code(),
            -277
        );
        let mut bad = h.clone();
        bad[8] = 0x3; // two align flags
        d.put(RX, &bad);
        let e = block_on(update(&d, &p, UpdateOp::Remove { offset: 3 * MIB })).unwrap_err();
        assert_eq!(e.sanlk_code(), -274);
        d.put(RX, &h);
        assert_eq!(entry_at(&d, 0).name.to_text(), "a");
        // An I/O failure is reported, not hidden.
        d.fail_writes_at.borrow_mut().push(RX + 512);
        let e = block_on(update(&d, &p, UpdateOp::Remove { offset: 3 * MIB })).unwrap_err();
        assert_eq!(e.sanlk_code(), -5);
    }

    #[test]
    fn create_and_delete_under_the_rindex_lease() {
        let (d, c, a, b) = two_hosts(3);
        let p = params();
        let r = block_on(create(&d, &c, &a.ctx(&d), &p, &n("vm1"), 0, &|_, _| false)).unwrap();
        assert_eq!(r.offset, 3 * MIB);
        let l = leader_at(&d, 3 * MIB);
        assert_eq!(l.magic, PAXOS_DISK_MAGIC);
        assert_eq!(l.resource_name.to_text(), "vm1");
        assert_eq!(l.space_name.to_text(), "ls");
        assert_eq!(entry_at(&d, 0).name.to_text(), "vm1");
        // The internal lease was taken (lver 1) and released.
        let rl = leader_at(&d, 2 * MIB);
        assert_eq!((rl.lver, rl.timestamp), (1, 0));

        let r2 = block_on(create(&d, &c, &b.ctx(&d), &p, &n("vm2"), 8, &|_, _| false)).unwrap();
        assert_eq!(r2.offset, 4 * MIB);
        assert_eq!(leader_at(&d, 4 * MIB).num_hosts, 8);
        // Duplicate and empty names.
        let e = block_on(create(&d, &c, &a.ctx(&d), &p, &n("vm2"), 0, &|_, _| false)).unwrap_err();
        assert_eq!(e.sanlk_code(), -17);
        let e = block_on(create(&d, &c, &a.ctx(&d), &p, &Name::EMPTY, 0, &|_, _| {
            false
        }))
        .unwrap_err();
        assert_eq!(e.sanlk_code(), -22);
        // A failed operation still releases the internal lease.
        assert_eq!(leader_at(&d, 2 * MIB).timestamp, 0);

        block_on(create(&d, &c, &a.ctx(&d), &p, &n("vm3"), 0, &|_, _| false)).unwrap();
        let before = d.get(0, d.bytes.borrow().len());
        let e = block_on(create(&d, &c, &a.ctx(&d), &p, &n("vm4"), 0, &|_, _| false)).unwrap_err();
        assert_eq!(e.sanlk_code(), -2);
        let after = d.get(0, d.bytes.borrow().len());
        // Only the internal lease area changed (acquire + release).
        assert_eq!(before[..2 << 20], after[..2 << 20]);
        assert_eq!(before[3 << 20..], after[3 << 20..]);

        // Delete: unknown, wrong offset, then the real one.
        let e = block_on(delete(&d, &c, &b.ctx(&d), &p, &n("nope"), 0)).unwrap_err();
        assert_eq!(e.sanlk_code(), -2);
        let e = block_on(delete(&d, &c, &b.ctx(&d), &p, &n("vm2"), 3 * MIB)).unwrap_err();
        assert_eq!(e.sanlk_code(), -278);
        assert_eq!(entry_at(&d, 1).name.to_text(), "vm2");
        c.now_ms.set(c.now_ms.get() + 5000);
        let r = block_on(delete(&d, &c, &b.ctx(&d), &p, &n("vm2"), 0)).unwrap();
        assert_eq!(r.offset, 4 * MIB);
        assert!(entry_at(&d, 1).is_free());
        let l = leader_at(&d, 4 * MIB);
        assert_eq!(l.magic, PAXOS_DISK_CLEAR);
        assert_eq!(l.write_timestamp, c.now_s());
        // The freed slot is reused.
        let r = block_on(create(&d, &c, &a.ctx(&d), &p, &n("vm5"), 0, &|_, _| false)).unwrap();
        assert_eq!(r.offset, 4 * MIB);

        // A host of another lockspace is refused before anything is written.
        let mut other = Host::join(&d, &c, 3);
        other.p.space_name = n("x");
        let e = block_on(create(&d, &c, &other.ctx(&d), &p, &n("vm9"), 0, &|_, _| {
            false
        }))
        .unwrap_err();
        assert_eq!(e.sanlk_code(), -22);
    }

    #[test]
    fn create_never_formats_over_a_valid_lease_or_an_area_in_use() {
        let (d, c, a, _b) = two_hosts(4);
        let p = params();
        // An unindexed lease at slot 0 (3 MiB), e.g. made by `direct init` and held.
        let mut held = format_resource_area(&ResourceInit {
            geometry: G,
            space_name: n("ls"),
            resource_name: n("direct"),
            num_hosts: 0,
            clear_at_monotime_s: None,
        });
        let mut l = LeaderRecord::decode(&held).unwrap();
        (l.owner_id, l.owner_generation, l.lver, l.timestamp) = (2, 1, 1, 100);
        l.seal();
        l.encode_into(&mut held);
        d.put(3 * MIB, &held);
        // A lone written ballot in slot 1 (4 MiB): some lease's dblock.
        let mut db = disk_format::PaxosDblock {
            mbal: 1,
            bal: 1,
            inp: 2,
            inp2: 1,
            inp3: 100,
            lver: 1,
            ..Default::default()
        };
        db.seal();
        d.put(4 * MIB + 1024, &db.encode());
        let before = d.get(3 * MIB, 2 << 20);
        // Slot 2 (5 MiB) is in use by the caller.
        let slot2_in_use = |off: u64, len: u64| off < 5 * MIB + 1 && 5 * MIB < off + len;
        let r = block_on(create(&d, &c, &a.ctx(&d), &p, &n("new"), 0, &slot2_in_use)).unwrap();
        assert_eq!(r.offset, 6 * MIB, "slots 0-2 must be skipped");
        assert_eq!(
            d.get(3 * MIB, 2 << 20),
            before,
            "an occupied slot was written"
        );
        assert_eq!(entry_at(&d, 3).name.to_text(), "new");
        // No usable slot left: -ENOENT, nothing formatted.
        let e = block_on(create(&d, &c, &a.ctx(&d), &p, &n("more"), 0, &slot2_in_use)).unwrap_err();
        assert_eq!(e.sanlk_code(), -2);
        assert_eq!(d.get(3 * MIB, 2 << 20), before);
        // A deleted lease (PAXOS_DISK_CLEAR) is free space again.
        c.now_ms.set(c.now_ms.get() + 5000);
        block_on(delete(&d, &c, &a.ctx(&d), &p, &n("new"), 0)).unwrap();
        let r = block_on(create(
            &d,
            &c,
            &a.ctx(&d),
            &p,
            &n("again"),
            0,
            &slot2_in_use,
        ))
        .unwrap();
        assert_eq!(r.offset, 6 * MIB);
        // Without the caller's area, its slot is the first usable one.
        let r = block_on(create(&d, &c, &a.ctx(&d), &p, &n("last"), 0, &|_, _| false)).unwrap();
        assert_eq!(r.offset, 5 * MIB);
    }

    #[test]
    fn a_live_holder_of_the_rindex_lease_blocks_create() {
        let (d, c, mut a, mut b) = two_hosts(3);
        let p = params();
        let rx = block_on(read_header(&d, &p)).unwrap();
        let opts = AcquireOptions::default();
        let held = block_on(paxos::acquire(
            &d,
            &c,
            &b.ctx(&d),
            &rx.lease_params(&p),
            &opts,
        ))
        .unwrap();
        c.now_ms.set(c.now_ms.get() + 2000);
        a.renew(&d, &c);
        b.renew(&d, &c);
        let before = d.get(0, d.bytes.borrow().len());
        let e = block_on(create(&d, &c, &a.ctx(&d), &p, &n("vm1"), 0, &|_, _| false)).unwrap_err();
        assert_eq!(e.sanlk_code(), -243, "{e}");
        assert_eq!(before[..2 << 20], d.get(0, 2 << 20)[..]);
        assert!(entry_at(&d, 0).is_free());
        block_on(paxos::release(&d, &c, &held)).unwrap();
        block_on(create(&d, &c, &a.ctx(&d), &p, &n("vm1"), 0, &|_, _| false)).unwrap();
    }

    #[test]
    fn rebuild_recreates_entries_from_leases() {
        let (d, c, a, _b) = two_hosts(4);
        let p = params();
        for name in ["r0", "r1", "r2"] {
            block_on(create(&d, &c, &a.ctx(&d), &p, &n(name), 0, &|_, _| false)).unwrap();
        }
        block_on(delete(&d, &c, &a.ctx(&d), &p, &n("r1"), 0)).unwrap();
        let good = d.get(RX, MIB as usize);
        // Scramble the entries: rebuild restores exactly what create/delete left.
        d.put(RX + 512, &[0xAB; 512]);
        let found = block_on(rebuild(&d, &c, &a.ctx(&d), &p, 7 * MIB)).unwrap();
        let names: Vec<String> = found.iter().map(|r| r.name.to_text()).collect();
        assert_eq!(names, ["r0", "r2"]);
        assert_eq!(good, d.get(RX, MIB as usize));
        assert_eq!(leader_at(&d, 2 * MIB).timestamp, 0);
        // Unlocked, and ending at the end of the device.
        d.put(RX + 512, &[0; 512]);
        let found = block_on(rebuild_unlocked(&d, &p, 4 * MIB)).unwrap();
        assert_eq!(found.len(), 1);
        assert_eq!(entry_at(&d, 0).name.to_text(), "r0");
        assert!(entry_at(&d, 2).is_free());
    }

    // -------- concurrency: two hosts' creates interleaved at every disk operation --------

    /// A disk whose every operation first returns `Pending` once, so that a scheduler can
    /// switch hosts between any two I/Os.
    struct Stepping<'a> {
        inner: &'a MemDisk,
    }

    struct YieldOnce(bool);

    impl Future for YieldOnce {
        type Output = ();
        fn poll(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<()> {
            if self.0 {
                Poll::Ready(())
            } else {
                self.0 = true;
                Poll::Pending
            }
        }
    }

    impl Disk for Stepping<'_> {
        type Buf = Vec<u8>;

        async fn read(&self, offset: u64, len: usize, t: u64) -> Result<Vec<u8>, IoError> {
            YieldOnce(false).await;
            self.inner.read(offset, len, t).await
        }

        async fn write(&self, offset: u64, data: &[u8], t: u64) -> Result<(), IoError> {
            YieldOnce(false).await;
            self.inner.write(offset, data, t).await
        }
    }

    /// Runs two futures to completion, choosing which to poll next from `pattern`'s bits.
    fn interleave<A: Future, B: Future>(a: A, b: B, pattern: u64) -> (A::Output, B::Output) {
        let mut a = pin!(a);
        let mut b = pin!(b);
        let mut cx = Context::from_waker(Waker::noop());
        let (mut ra, mut rb) = (None, None);
        let mut step = 0u32;
        while ra.is_none() || rb.is_none() {
            // After 4096 steps run `a` alone: identical deterministic back-offs could
            // otherwise livelock two symmetric ballots forever.
            let scheduled = step >= 4096 || (pattern >> (step % 64)) & 1 == 1;
            let pick_a = rb.is_some() || (ra.is_none() && scheduled);
            step += 1;
            if pick_a {
                if let Poll::Ready(v) = a.as_mut().poll(&mut cx) {
                    ra = Some(v);
                }
            } else if let Poll::Ready(v) = b.as_mut().poll(&mut cx) {
                rb = Some(v);
            }
        }
        (ra.expect("done"), rb.expect("done"))
    }

    #[test]
    fn concurrent_creates_from_two_hosts_are_serialised_by_the_lease() {
        let mut both_won = 0;
        let mut one_lost = 0;
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for round in 0..40u64 {
            let (d, c, a, b) = two_hosts(4);
            let p = params();
            let sd = Stepping { inner: &d };
            // Patterns: strict alternation, long runs, and pseudo-random ones.
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let pattern = match round {
                0 => 0x5555_5555_5555_5555,
                1 => 0x0000_FFFF_0000_FFFF,
                _ => x,
            };
            let clock_a = TestClock::at_s(c.now_s());
            let clock_b = TestClock::at_s(c.now_s());
            let (ra, rb) = interleave(
                create(&sd, &clock_a, &a.ctx(&sd), &p, &n("va"), 0, &|_, _| false),
                create(&sd, &clock_b, &b.ctx(&sd), &p, &n("vb"), 0, &|_, _| false),
                pattern,
            );
            let ok: Vec<RindexSlot> = [&ra, &rb]
                .iter()
                .filter_map(|r| r.as_ref().ok().copied())
                .collect();
            for r in [&ra, &rb] {
                if let Err(e) = r {
                    assert!(
                        matches!(e, RindexError::Lease(_)),
                        "round {round}: only lease contention may fail a create: {e}"
                    );
                }
            }
            // Invariant: every success owns a distinct slot whose entry and lease agree,
            // and no other slot was touched.
            if ok.len() == 2 {
                assert_ne!(ok[0].offset, ok[1].offset, "round {round}: same slot twice");
                both_won += 1;
            } else {
                one_lost += 1;
            }
            let mut indexed = 0;
            for i in 0..4 {
                let e = entry_at(&d, i);
                if e.is_free() {
                    continue;
                }
                indexed += 1;
                let l = leader_at(&d, e.res_offset);
                assert_eq!(
                    l.resource_name, e.name,
                    "round {round}: entry {i} vs its lease"
                );
                assert!(ok
                    .iter()
                    .any(|r| r.offset == e.res_offset && r.name == e.name));
            }
            assert_eq!(indexed, ok.len(), "round {round}");
            // A create afterwards always works: the lease was released on every path.
            let later = TestClock::at_s(c.now_s() + 100);
            let r = block_on(create(
                &d,
                &later,
                &a.ctx(&d),
                &p,
                &n("after"),
                0,
                &|_, _| false,
            ));
            assert!(r.is_ok(), "round {round}: {r:?}");
        }
        assert!(both_won > 0, "some interleaving lets both creates succeed");
        eprintln!("both succeeded {both_won}, one lost the lease {one_lost}");
    }
}
