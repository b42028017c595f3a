//! Delta leases: a host's claim on its host_id in a lockspace (sanlock `delta_lease.c`).
//!
//! A delta lease is one sector per host_id. The owner proves it is alive by rewriting its
//! sector with a new timestamp every 2·io_timeout; everyone else only watches whether the
//! record changes. Acquiring waits long enough that any previous owner has either shown
//! itself (the record changed → [`LeaseError::HostIdBusy`]) or been reset by its watchdog.

use disk_format::leader::{LeaderExpect, DELTA_DISK_MAGIC, LEADER_RECORD_LEN, LFL_DEAD_EXT};
use disk_format::{DeltaSector, FormatError, Geometry, LeaderKind, LeaderRecord, Name};

use crate::error::{IoOp, LeaseError};
use crate::io::{Clock, Disk};
use crate::sectors::HostSectors;
use crate::timeouts::{
    delta_acquire_held_wait, delta_short_delay, host_dead_seconds, id_renewal_fail_seconds,
    renewal_write_timeout,
};

/// Everything that identifies our delta lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockspaceParams {
    /// Lockspace name.
    pub space_name: Name,
    /// Byte offset of the lockspace area on its disk.
    pub disk_offset: u64,
    /// Sector and align size of the lockspace (see [`read_lockspace_geometry`]).
    pub geometry: Geometry,
    /// Our host_id (1..=max_hosts).
    pub host_id: u64,
    /// Our unique host name (`our_host_name`), written into the record.
    pub host_name: Name,
    /// Our io_timeout D in seconds (written to disk as `io_timeout & 0xff`).
    pub io_timeout: u16,
    /// Watchdog fire timeout W in seconds; the same on every host.
    pub watchdog_fire: u64,
    /// How many host sectors a renewal reads and monitors; `None` reads the whole area as
    /// sanlock does. Hosts beyond this count are not observed.
    pub monitor_hosts: Option<u64>,
}

impl LockspaceParams {
    fn check(&self) -> Result<(), LeaseError> {
        let max = self.geometry.max_hosts();
        if self.host_id == 0 || self.host_id > max {
            return Err(LeaseError::InvalidHostId {
                host_id: self.host_id,
                max_hosts: max,
            });
        }
        if self.io_timeout == 0 {
            return Err(LeaseError::Invalid("io_timeout must be at least 1 second"));
        }
        Ok(())
    }

    fn io_ms(&self) -> u64 {
        u64::from(self.io_timeout) * 1000
    }

    fn sector_offset(&self) -> u64 {
        self.disk_offset + (self.host_id - 1) * self.geometry.sector_bytes()
    }

    /// Byte offset of `host_id`'s delta sector on the disk.
    pub fn host_sector_offset(&self, host_id: u64) -> Option<u64> {
        disk_format::area::delta_sector_offset(self.geometry, host_id).map(|o| o + self.disk_offset)
    }

    fn expect(&self) -> LeaderExpect<'_> {
        LeaderExpect {
            sector_size: Some(self.geometry.sector_size.bytes()),
            space_name: Some(&self.space_name),
            resource_name: None,
        }
    }

    /// How many host sectors a read of the whole monitored area covers (the whole area
    /// when `monitor_hosts` is `None`, as sanlock reads it).
    pub fn monitored_sectors(&self) -> u64 {
        let max = self.geometry.max_hosts();
        match self.monitor_hosts {
            Some(n) => n.clamp(self.host_id, max),
            None => self.geometry.sectors_per_area(),
        }
    }
}

/// Which waits an acquire used (sanlock 3.9 logs the same distinction).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AcquirePath {
    /// Free (released cleanly), under any name — ours included: write, wait 2D, verify.
    ///
    /// sanlock 3.9 skips the wait and the verify over its own cleanly released record
    /// under its own name. lockd does not: a host configured with our host_id (a clone)
    /// that was in its long wait while we left sees the record free and writes it right
    /// after our no-wait write; with no verify both would run as one (host_id,
    /// generation). Found by the simulator (clones plus quick rejoins).
    ShortDelay,
    /// Not released (timestamp ≠ 0), under any name — ours included: wait max(8D+W, 8D),
    /// re-check, write, wait 2D, verify.
    ///
    /// sanlock skips the wait when the record carries our own name, which is safe only
    /// while every daemon start uses a new name (sanlock's default is a random UUID per
    /// start). With a name stable across starts, a record under our name that was not
    /// released may be (a) left by our own daemon that was killed while its lease holders
    /// still run — their host is fenced only when its watchdog fires, up to 8D+W later —
    /// or (b) renewed right now by another live host using the same name (a clone). Either
    /// way only the full wait proves the previous owner gone.
    LongDelay,
}

/// Our delta lease while we hold it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeltaState {
    /// The record we last wrote successfully.
    pub leader: LeaderRecord,
    /// Our clock (ms) when the timestamp of `leader` was taken: the last success.
    pub last_success_ms: u64,
    /// False after a failed renewal: the disk may hold either our previous or our attempted
    /// record, so the next renewal skips the whole-record comparison.
    pub last_renewal_ok: bool,
    /// How the lease was acquired.
    pub path: AcquirePath,
}

impl DeltaState {
    /// Our host generation (owner_generation of the delta lease).
    pub fn generation(&self) -> u64 {
        self.leader.owner_generation
    }
}

/// The event triple a renewal writes into write_id / write_generation / write_timestamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EventFields {
    /// Target host's generation.
    pub target_generation: u64,
    /// Event value.
    pub event: u64,
    /// Event data.
    pub data: u64,
}

/// What a renewal writes besides the timestamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RenewInput {
    /// Event fields.
    pub event: EventFields,
    /// The notification bitmap (bit h-1 for host_id h).
    pub bitmap: [u8; disk_format::delta::HOSTID_BITMAP_SIZE],
}

impl Default for RenewInput {
    fn default() -> Self {
        RenewInput {
            event: EventFields::default(),
            bitmap: [0; disk_format::delta::HOSTID_BITMAP_SIZE],
        }
    }
}

/// The lockspace as read by a renewal: `sectors[i]` is host_id i+1 (`None` if it did not
/// decode as a delta lease of this lockspace).
#[derive(Debug, Clone)]
pub struct LockspaceSnapshot {
    /// Our clock (s) when the read completed.
    pub read_at_s: u64,
    /// The same instant in ms (`read_at_s` is it in whole seconds).
    pub read_at_ms: u64,
    /// One entry per host_id read, from host_id 1.
    pub sectors: HostSectors,
    /// The read covered the whole monitored area ([`LockspaceParams::monitored_sectors`]),
    /// not only its head ([`crate::reads`]).
    pub whole_area: bool,
}

/// Reads the first delta record of the lockspace at `disk_offset` and derives its geometry
/// (sanlock `delta_read_lockspace_sizes`).
pub async fn read_lockspace_geometry<D: Disk>(
    disk: &D,
    disk_offset: u64,
    io_timeout: u16,
) -> Result<(Geometry, LeaderRecord), LeaseError> {
    let buf = disk
        .read(disk_offset, 4096, u64::from(io_timeout.max(1)) * 1000)
        .await
        .map_err(|e| LeaseError::io(IoOp::LeaderRead, e))?;
    let leader = LeaderRecord::decode(&buf[..LEADER_RECORD_LEN])?;
    if leader.magic != DELTA_DISK_MAGIC {
        return Err(FormatError::Magic {
            record: "delta lease",
            found: leader.magic,
            expected: DELTA_DISK_MAGIC,
        }
        .into());
    }
    if !LeaderKind::Delta.major_supported(leader.version) {
        return Err(FormatError::Version {
            record: "delta lease",
            found: leader.version,
            expected_major: disk_format::leader::DELTA_DISK_VERSION >> 16,
        }
        .into());
    }
    let g = Geometry::from_leader(leader.sector_size, leader.flags)?;
    Ok((g, leader))
}

/// Reads the sector of `host_id`'s delta lease: its offset and bytes (not verified).
async fn read_host_sector<D: Disk>(
    disk: &D,
    p: &LockspaceParams,
    host_id: u64,
) -> Result<(u64, D::Buf), LeaseError> {
    let off = p
        .host_sector_offset(host_id)
        .ok_or(LeaseError::InvalidHostId {
            host_id,
            max_hosts: p.geometry.max_hosts(),
        })?;
    let buf = disk
        .read(off, p.geometry.sector_bytes() as usize, p.io_ms())
        .await
        .map_err(|e| LeaseError::io(IoOp::LeaderRead, e))?;
    Ok((off, buf))
}

/// Reads and verifies one host's delta lease record.
pub async fn read_host_record<D: Disk>(
    disk: &D,
    p: &LockspaceParams,
    host_id: u64,
) -> Result<LeaderRecord, LeaseError> {
    let (_, buf) = read_host_sector(disk, p, host_id).await?;
    let leader = LeaderRecord::decode(&buf)?;
    leader.verify(LeaderKind::Delta, &p.expect())?;
    Ok(leader)
}

/// True when a delta-lease record shows that no host has ever joined with its host_id
/// since the lockspace was formatted: no owner, no generation, no timestamp. Every join
/// writes a non-zero owner_id and generation, and nothing but a new format clears them,
/// so a host that has ever held the host_id can never leave its record looking unused.
pub fn record_unused(l: &LeaderRecord) -> bool {
    l.owner_id == 0 && l.owner_generation == 0 && l.timestamp == 0
}

/// [`record_unused`] for a raw sector; a sector that does not decode counts as used.
pub fn sector_unused(sector: &[u8]) -> bool {
    LeaderRecord::decode(sector).is_ok_and(|l| record_unused(&l))
}

/// Reads the delta-lease sectors of host_ids `first ..= last` (1-based, `first <= last <=
/// max_hosts`) in one I/O.
async fn read_host_sectors<D: Disk>(
    disk: &D,
    p: &LockspaceParams,
    first: u64,
    last: u64,
) -> Result<D::Buf, LeaseError> {
    let offset = p
        .host_sector_offset(first)
        .ok_or(LeaseError::InvalidHostId {
            host_id: first,
            max_hosts: p.geometry.max_hosts(),
        })?;
    let len = ((last + 1 - first) * p.geometry.sector_bytes()) as usize;
    let buf = disk
        .read(offset, len, p.io_ms())
        .await
        .map_err(|e| LeaseError::io(IoOp::LeaderRead, e))?;
    if buf.len() < len {
        return Err(LeaseError::io(IoOp::LeaderRead, crate::io::IoError::Failed));
    }
    Ok(buf)
}

/// Reads the delta-lease sectors of host_ids `above + 1 ..= upto` (clamped to the
/// lockspace's max_hosts) in one I/O issued after this call, and tells whether every one
/// of them is still unused ([`sector_unused`]). This is the check that lets a paxos ballot
/// read only the dblocks of host_ids up to `above` (see `paxos`, "Reading only the hosts
/// that have joined").
pub async fn hosts_unused_above<D: Disk>(
    disk: &D,
    p: &LockspaceParams,
    above: u64,
    upto: u64,
) -> Result<bool, LeaseError> {
    let upto = upto.min(p.geometry.max_hosts());
    if upto <= above {
        return Ok(true);
    }
    let buf = read_host_sectors(disk, p, above + 1, upto).await?;
    let sector = p.geometry.sector_bytes() as usize;
    Ok(buf.chunks(sector).all(sector_unused))
}

/// Reads every delta-lease sector of the lockspace in one I/O and returns the host_ids
/// whose sector is in use (not [`sector_unused`]), ascending.
pub async fn used_host_ids<D: Disk>(disk: &D, p: &LockspaceParams) -> Result<Vec<u64>, LeaseError> {
    let buf = read_host_sectors(disk, p, 1, p.geometry.max_hosts()).await?;
    let sector = p.geometry.sector_bytes() as usize;
    Ok(buf
        .chunks(sector)
        .enumerate()
        .filter(|(_, s)| !sector_unused(s))
        .map(|(i, _)| i as u64 + 1)
        .collect())
}

async fn write_own<D: Disk>(
    disk: &D,
    p: &LockspaceParams,
    sector: &DeltaSector,
    timeout_ms: u64,
) -> Result<(), LeaseError> {
    let mut buf = vec![0u8; p.geometry.sector_bytes() as usize];
    sector.encode_into(&mut buf);
    disk.write(p.sector_offset(), &buf, timeout_ms)
        .await
        .map_err(|e| LeaseError::io(IoOp::LeaderWrite, e))
}

/// Acquires our host_id's delta lease (sanlock `delta_lease_acquire`, 3.9 waits).
///
/// 1. Read our sector and verify it.
/// 2. Choose the waits from (free?, our name?) — see [`AcquirePath`]: only a cleanly
///    released record (timestamp 0) may skip the long wait. The long path waits
///    max(8D+W, 8D) with D the *previous owner's* io_timeout, then re-reads: any change
///    other than becoming free means a live owner → [`LeaseError::HostIdBusy`].
/// 3. Write the record: timestamp now, our io_timeout, owner_id, generation + 1, our name.
/// 4. Wait 2D (previous owner's D), re-read, and require exactly our record, else
///    [`LeaseError::HostIdBusy`].
pub async fn acquire<D: Disk, C: Clock>(
    disk: &D,
    clock: &C,
    p: &LockspaceParams,
) -> Result<DeltaState, LeaseError> {
    acquire_inner(disk, clock, p, false).await
}

/// [`acquire`] with the pre-fix rule planted for the simulator: a record under our own
/// name that was not released takes the short path (what lockd did before issue 21, and
/// what sanlock does with its per-start names). The simulator must catch it.
#[cfg(feature = "sim")]
pub async fn acquire_planted_own_name_short_delay<D: Disk, C: Clock>(
    disk: &D,
    clock: &C,
    p: &LockspaceParams,
) -> Result<DeltaState, LeaseError> {
    acquire_inner(disk, clock, p, true).await
}

async fn acquire_inner<D: Disk, C: Clock>(
    disk: &D,
    clock: &C,
    p: &LockspaceParams,
    planted_own_name_short_delay: bool,
) -> Result<DeltaState, LeaseError> {
    p.check()?;
    let mut leader = read_host_record(disk, p, p.host_id).await?;
    // A record with a 5.x flag lockd does not implement (CAW, NO_TIMEOUT) is never
    // written: the join is refused before any write.
    leader.check_writable(LeaderKind::Delta)?;
    let other_io = if leader.io_timeout != 0 {
        u64::from(leader.io_timeout)
    } else {
        u64::from(p.io_timeout)
    };
    let free = leader.timestamp == 0;
    let same_name = leader.resource_name.same_as(&p.host_name);
    let path = match (free, same_name) {
        (true, _) => AcquirePath::ShortDelay,
        (false, true) if planted_own_name_short_delay => AcquirePath::ShortDelay,
        (false, _) => AcquirePath::LongDelay,
    };
    if path == AcquirePath::LongDelay {
        let wait = delta_acquire_held_wait(other_io, p.watchdog_fire);
        let before = leader;
        for _ in 0..wait {
            clock.sleep_ms(1000).await;
        }
        leader = read_host_record(disk, p, p.host_id).await?;
        if leader != before && leader.timestamp != 0 {
            return Err(LeaseError::HostIdBusy);
        }
        leader.check_writable(LeaderKind::Delta)?;
    }
    let now_ms = clock.now_ms();
    let mut new = leader;
    new.timestamp = (now_ms / 1000).max(1);
    new.io_timeout = p.io_timeout & 0xff;
    new.owner_id = p.host_id;
    new.owner_generation = leader.owner_generation.wrapping_add(1);
    new.resource_name = p.host_name;
    // A DEAD_EXT mark (and the setter stamp beside it) names the previous generation:
    // our new generation is alive, so the mark is not carried over.
    if new.flags & LFL_DEAD_EXT != 0 {
        new.flags &= !LFL_DEAD_EXT;
        new.unused1 = 0;
    }
    new.seal();
    assert!(
        new.timestamp != 0 && new.owner_id == p.host_id,
        "delta acquire: we would write a free record or another host_id's"
    );
    write_own(disk, p, &DeltaSector::from_leader(new), p.io_ms()).await?;
    for _ in 0..delta_short_delay(other_io) {
        clock.sleep_ms(1000).await;
    }
    let check = read_host_record(disk, p, p.host_id).await?;
    if check.encode() != new.encode() {
        return Err(LeaseError::HostIdBusy);
    }
    // The record we wrote is timed by every other host from its write, with our own
    // io_timeout D: it fails at 8D and may be taken at host_dead = 8D + W. The verify
    // wait (2D of the previous owner) can be longer than our 8D (an area recorded at
    // io_timeout 10 joined at 1, as sanlock joins it), and a stalled host (a paused VM, a
    // stopped daemon) can overrun it too. Either way the lease is not handed out with
    // that age: it is renewed first, from the record the verify just read, and the
    // renewal must be complete before host_dead of the write — before that instant no
    // other host writes our sector (its long wait is host_dead from a read of our
    // record), so the renewal cannot overwrite a successor. Past that, the join fails and
    // a retry takes the long path.
    let mut last_success_ms = now_ms;
    if clock.now_ms() >= now_ms + id_renewal_fail_seconds(u64::from(p.io_timeout)) * 1000 {
        let taken_at_ms =
            now_ms + host_dead_seconds(u64::from(p.io_timeout), p.watchdog_fire) * 1000;
        let renew_at_ms = clock.now_ms();
        if renew_at_ms + p.io_ms() > taken_at_ms {
            return Err(LeaseError::io(
                IoOp::LeaderWrite,
                crate::io::IoError::TimedOut,
            ));
        }
        let mut renewed = new;
        renewed.timestamp = (renew_at_ms / 1000).max(new.timestamp);
        renewed.seal();
        write_own(
            disk,
            p,
            &DeltaSector::from_leader(renewed),
            taken_at_ms - renew_at_ms,
        )
        .await?;
        if clock.now_ms() >= taken_at_ms {
            return Err(LeaseError::io(
                IoOp::LeaderWrite,
                crate::io::IoError::TimedOut,
            ));
        }
        new = renewed;
        last_success_ms = renew_at_ms;
    }
    // The lease handed out must not be expired already: a stall during the renewal above
    // ages it the same way, and a retry takes the long path.
    let fail_at_ms = last_success_ms + id_renewal_fail_seconds(u64::from(p.io_timeout)) * 1000;
    if clock.now_ms() >= fail_at_ms {
        return Err(LeaseError::io(
            IoOp::LeaderRead,
            crate::io::IoError::TimedOut,
        ));
    }
    Ok(DeltaState {
        leader: new,
        last_success_ms,
        last_renewal_ok: true,
        path,
    })
}

/// Renews our delta lease (sanlock `delta_lease_renew`).
///
/// Reads the monitored part of the lockspace in one I/O (timeout D), verifies our record
/// (corrupt results fail the lockspace: see [`LeaseError::is_corrupt`]), requires owner,
/// generation and name to be ours ([`LeaseError::RenewOwner`]) and, when the previous
/// renewal succeeded, the whole record to equal our last write ([`LeaseError::RenewDiff`]);
/// then writes our sector with a new timestamp, the event fields and the bitmap, with the
/// long write timeout host_dead_seconds. On success `state` is updated and the snapshot is
/// returned for [`crate::HostMonitor::observe`].
pub async fn renew<D: Disk, C: Clock>(
    disk: &D,
    clock: &C,
    p: &LockspaceParams,
    state: &mut DeltaState,
    input: &RenewInput,
) -> Result<LockspaceSnapshot, LeaseError> {
    renew_reading(disk, clock, p, state, input, p.monitored_sectors()).await
}

/// [`renew`], reading only the first `read_sectors` host sectors of the area (from
/// host_id 1; clamped to our own sector at least and the monitored area at most), as
/// [`crate::reads::RenewalReads`] plans.
pub async fn renew_reading<D: Disk, C: Clock>(
    disk: &D,
    clock: &C,
    p: &LockspaceParams,
    state: &mut DeltaState,
    input: &RenewInput,
    read_sectors: u64,
) -> Result<LockspaceSnapshot, LeaseError> {
    p.check()?;
    let sector = p.geometry.sector_bytes() as usize;
    let monitored = p.monitored_sectors();
    let count = read_sectors.clamp(p.host_id, monitored) as usize;
    let buf = match disk.read(p.disk_offset, count * sector, p.io_ms()).await {
        Ok(b) => b,
        Err(e) => {
            state.last_renewal_ok = false;
            return Err(LeaseError::io(IoOp::LeaderRead, e));
        }
    };
    let read_at_ms = clock.now_ms();
    if buf.len() < count * sector {
        state.last_renewal_ok = false;
        return Err(LeaseError::io(IoOp::LeaderRead, crate::io::IoError::Failed));
    }
    let own_at = (p.host_id - 1) as usize * sector;
    let own = LeaderRecord::decode(&buf[own_at..own_at + sector])?;
    own.verify(LeaderKind::Delta, &p.expect())?;
    // An external fencer declared us dead (sanlock 5.x `set_host DEAD_EXT`, or `lockd
    // set-host --dead`): others may already be taking our leases. Never overwrite the
    // mark; the lockspace fails now.
    if own.dead_ext() && own.owner_generation == state.leader.owner_generation {
        state.last_renewal_ok = false;
        return Err(LeaseError::RenewDeadExt);
    }
    own.check_writable(LeaderKind::Delta)?;
    if own.owner_id != p.host_id
        || own.owner_generation != state.leader.owner_generation
        || !own.resource_name.same_as(&p.host_name)
    {
        return Err(LeaseError::RenewOwner);
    }
    if state.last_renewal_ok && own.encode() != state.leader.encode() {
        return Err(LeaseError::RenewDiff);
    }
    let now_ms = clock.now_ms();
    // Our own record and our own monotonic clock: the timestamp we write never goes
    // back (it may repeat within one second), and owner and generation stay those of
    // our acquire. Nothing read from disk enters these.
    assert!(
        now_ms >= state.last_success_ms,
        "delta renew: the monotonic clock went back from {} ms to {now_ms} ms",
        state.last_success_ms
    );
    let mut new = state.leader;
    new.timestamp = (now_ms / 1000).max(1);
    assert!(
        new.timestamp >= state.leader.timestamp,
        "delta renew: our timestamp would go back from {} to {}",
        state.leader.timestamp,
        new.timestamp
    );
    new.io_timeout = p.io_timeout & 0xff;
    new.write_id = input.event.target_generation;
    new.write_generation = input.event.event;
    new.write_timestamp = input.event.data;
    new.seal();
    let out = DeltaSector {
        leader: new,
        bitmap: input.bitmap,
    };
    let wt = renewal_write_timeout(u64::from(p.io_timeout), p.watchdog_fire) * 1000;
    if let Err(e) = write_own(disk, p, &out, wt).await {
        state.last_renewal_ok = false;
        return Err(e);
    }
    assert!(
        new.owner_generation == state.leader.owner_generation
            && new.resource_name.same_as(&state.leader.resource_name),
        "delta renew: our record changed owner"
    );
    state.leader = new;
    state.last_success_ms = now_ms;
    state.last_renewal_ok = true;
    Ok(snapshot_of(p, buf, count, read_at_ms))
}

/// A read of the lockspace between renewals, for the host monitor only: the first
/// `read_sectors` host sectors (clamped as [`renew_reading`] clamps them), within
/// `timeout_ms`. Nothing is written and our delta state is untouched, so a failed or
/// timed-out read changes nothing but the monitor's freshness.
pub async fn observe_reading<D: Disk, C: Clock>(
    disk: &D,
    clock: &C,
    p: &LockspaceParams,
    read_sectors: u64,
    timeout_ms: u64,
) -> Result<LockspaceSnapshot, LeaseError> {
    p.check()?;
    let sector = p.geometry.sector_bytes() as usize;
    let count = read_sectors.clamp(p.host_id, p.monitored_sectors()) as usize;
    let buf = disk
        .read(p.disk_offset, count * sector, timeout_ms)
        .await
        .map_err(|e| LeaseError::io(IoOp::LeaderRead, e))?;
    let read_at_ms = clock.now_ms();
    if buf.len() < count * sector {
        return Err(LeaseError::io(IoOp::LeaderRead, crate::io::IoError::Failed));
    }
    Ok(snapshot_of(p, buf, count, read_at_ms))
}

/// The monitor's view of the first `count` host sectors of `buf` (from host_id 1), read
/// by a read that completed at `read_at_ms`. Monitoring checks only magic and lockspace
/// name, not the checksum: a sector that is not a delta lease of this lockspace is
/// `None` ([`HostSectors::get`]). The buffer is kept, not copied.
fn snapshot_of<B>(p: &LockspaceParams, buf: B, count: usize, read_at_ms: u64) -> LockspaceSnapshot
where
    B: std::ops::Deref<Target = [u8]> + Send + Sync + 'static,
{
    let sectors =
        HostSectors::of_read(buf, p.geometry.sector_bytes() as usize, count, p.space_name);
    LockspaceSnapshot {
        read_at_s: read_at_ms / 1000,
        read_at_ms,
        whole_area: sectors.len() as u64 >= p.monitored_sectors(),
        sectors,
    }
}

/// Releases our delta lease: rewrites our last record with timestamp 0 (bitmap cleared).
///
/// Done only when the last renewal succeeded — otherwise the disk may hold a record we
/// did not expect, and others must wait host_dead_seconds instead. Returns whether the
/// release was written.
pub async fn release<D: Disk>(
    disk: &D,
    p: &LockspaceParams,
    state: &DeltaState,
) -> Result<bool, LeaseError> {
    p.check()?;
    if !state.last_renewal_ok {
        return Ok(false);
    }
    let mut new = state.leader;
    new.timestamp = 0;
    new.seal();
    write_own(disk, p, &DeltaSector::from_leader(new), p.io_ms()).await?;
    Ok(true)
}

/// Marks `host_id`'s delta lease DEAD_EXT (sanlock 5.x `set_host`, lockd `set-host
/// --dead`): an external fencer vouches that this host generation no longer writes.
///
/// Refused, with nothing written, when: the host is us ([`LeaseError::Invalid`]); the
/// record is 3.x's version ([`LeaseError::VersionIncompat`], as sanlock 5.1.1); it names
/// another generation than `generation` (when non-zero; [`LeaseError::WrongGeneration`]);
/// it is free, or its timestamp is not `seen_timestamp` — it was renewed after the
/// caller last judged the host not alive ([`LeaseError::HostIdBusy`]); or it carries CAW
/// or NO_TIMEOUT. The rest of the sector (bitmap, timestamp, event fields) is kept: only
/// the flag, the setter stamp and the checksum change. Returns the record written.
///
/// The setter stamp is what sanlock 5.1.1's `set_host DEAD_EXT` writes (observed on disk:
/// setters host 1 generation 1 → `01 00 01 00`, host 4 generation 3 → `03 00 04 00`):
/// the field after the timestamp (`unused1`, offset 160) holds the setter's generation
/// (low 16 bits) at 160 and its host_id (16 bits) at 162, see [`dead_ext_stamp`]. Our
/// generation is read from our own record, which must name us ([`LeaseError::Invalid`]
/// otherwise: our lockspace is not ours to act for).
pub async fn mark_dead_ext<D: Disk>(
    disk: &D,
    p: &LockspaceParams,
    host_id: u64,
    generation: u64,
    seen_timestamp: u64,
) -> Result<LeaderRecord, LeaseError> {
    p.check()?;
    if host_id == p.host_id {
        return Err(LeaseError::Invalid("cannot mark our own host_id dead"));
    }
    let (off, buf) = read_host_sector(disk, p, host_id).await?;
    let sector = p.geometry.sector_bytes() as usize;
    if buf.len() < sector {
        return Err(LeaseError::io(IoOp::LeaderRead, crate::io::IoError::Failed));
    }
    let mut s = DeltaSector::decode(&buf)?;
    s.leader.verify(LeaderKind::Delta, &p.expect())?;
    if s.leader.version & disk_format::leader::VERSION_MAJOR_MASK
        != disk_format::leader::DELTA_DISK_VERSION_5 & disk_format::leader::VERSION_MAJOR_MASK
    {
        return Err(LeaseError::VersionIncompat);
    }
    s.leader.check_writable(LeaderKind::Delta)?;
    if generation != 0 && s.leader.owner_generation != generation {
        return Err(LeaseError::WrongGeneration {
            host_id,
            on_disk: s.leader.owner_generation,
            requested: generation,
        });
    }
    if s.leader.timestamp == 0 || s.leader.timestamp != seen_timestamp {
        return Err(LeaseError::HostIdBusy);
    }
    let own = read_host_record(disk, p, p.host_id).await?;
    if own.owner_id != p.host_id || own.timestamp == 0 {
        return Err(LeaseError::Invalid(
            "our own delta lease does not name us: not marking another host",
        ));
    }
    s.leader.flags |= LFL_DEAD_EXT;
    s.leader.unused1 = dead_ext_stamp(p.host_id, own.owner_generation);
    s.leader.seal();
    let mut out = buf[..sector].to_vec();
    let rest = out[disk_format::delta::DELTA_SECTOR_MIN..].to_vec();
    s.encode_into(&mut out);
    out[disk_format::delta::DELTA_SECTOR_MIN..].copy_from_slice(&rest);
    disk.write(off, &out, p.io_ms())
        .await
        .map_err(|e| LeaseError::io(IoOp::LeaderWrite, e))?;
    Ok(s.leader)
}

/// The setter stamp sanlock 5.1.1 writes into a DEAD_EXT record's `unused1` (offset 160,
/// little-endian): the setter's generation in bits 0..16 and its host_id in bits 16..32
/// (both truncated to 16 bits, the width 5.1.1 gives them; host_ids are at most 2000).
pub fn dead_ext_stamp(setter_host_id: u64, setter_generation: u64) -> u64 {
    ((setter_host_id & 0xffff) << 16) | (setter_generation & 0xffff)
}

/// How long after `state.last_success_ms` the lockspace fails (8D), in ms — the wdmd expiry.
pub fn fail_deadline_ms(p: &LockspaceParams, state: &DeltaState) -> u64 {
    state.last_success_ms + crate::timeouts::id_renewal_fail_seconds(u64::from(p.io_timeout)) * 1000
}

/// host_dead_seconds for a host whose record shows `io_timeout` (ours when 0).
pub fn other_host_dead_seconds(p: &LockspaceParams, io_timeout: u16) -> u64 {
    let io = if io_timeout == 0 {
        p.io_timeout
    } else {
        io_timeout
    };
    host_dead_seconds(u64::from(io), p.watchdog_fire)
}
