//! Disk Paxos resource leases (sanlock `paxos_lease.c` + the disk parts of `resource.c`).
//!
//! One ballot instance decides the owner of each lease version (`lver`). A host proposes
//! itself for `leader.lver + 1`; phase 1 claims a ballot number (`mbal`) in its own dblock
//! and reads everyone's, phase 2 writes the chosen input with `bal = mbal` and reads again;
//! surviving both phases without meeting a larger mbal or a newer lver means the value is
//! chosen, and the leader record is written as a cache of the result. Ownership is
//! `(host_id, generation)`; the owner's delta-lease renewals keep the lease alive, so a held
//! lease costs no I/O.
//!
//! # Reading only the hosts that have joined
//!
//! sanlock reads every dblock of the area (leader.num_hosts, 2000 by default: 1 MiB on
//! 512-byte sectors) in step A and in both ballot phases. lockd reads the dblocks of host_ids
//! `1..=k` only, where `k` is the highest host_id whose delta-lease sector our latest
//! lockspace read found in use ([`HostObserver::ballot_hosts_hint`]), and before it
//! commits (or accepts a commit of its value by another host) it confirms with one read
//! of the delta sectors `k+1..=num_hosts`, issued after its last ballot read, that all of
//! them are still unused ([`crate::delta::sector_unused`]: no owner, generation or
//! timestamp). If one is in use, the acquire starts over reading every dblock.
//!
//! Why this is as safe as reading everything: a host writes its dblock only while it holds
//! its host_id, and it first wrote its delta sector when it joined; that sector never looks
//! unused again (a join writes a non-zero owner and generation, and only a new format
//! clears them). So a host `h > k` that wrote a dblock of this area before our
//! confirmation read began is seen by that read, and we start over. Otherwise every write
//! of `h` comes after our confirmation read began, hence after all our ballot reads and
//! writes completed, and `h`'s reads (which follow its writes) see our dblock: of two
//! concurrent ballots at least one sees the other's, which is all Disk Paxos needs. Shared
//! holders are covered the same way: their SHARED mode block is a dblock write. Nothing
//! here depends on time or clocks. A sanlock host reads everything, so mixed lockspaces
//! keep the argument. The simulator runs it with late joiners and read-everything hosts
//! mixed in, and catches the planted bug `StaleKnownHosts` (no confirmation, hint frozen).
//!
//! Seen by clients: a corrupt dblock of a host_id that never joined is not read, so it
//! does not fail an acquire with `SANLK_DBLOCK_CHECKSUM` as it does in sanlock.

use std::cell::RefCell;

use disk_format::area::{ballot_read_sectors, lvb_inside_area, lvb_offset, REQUEST_SECTOR};
use disk_format::dblock::{
    decode_dblock_sector, encode_dblock_sector, DBLOCK_FL_RELEASED, MBLOCK_SHARED,
};
use disk_format::leader::{LeaderExpect, LFL_SHORT_HOLD};
use disk_format::{
    FormatError, Geometry, LeaderKind, LeaderRecord, ModeBlock, Name, PaxosDblock, RequestRecord,
};

use crate::delta::{read_host_record, LockspaceParams};
use crate::disks::{count_ok, gather, step_error, write_each, Answer, LeaseDisks};
use crate::error::{IoOp, LeaseError};
use crate::io::{Clock, Disk};
use crate::monitor::{HostMonitor, HostObserver};
use crate::timeouts::host_dead_seconds;

/// Identifies one resource lease area.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceParams {
    /// Lockspace name (must match the leader).
    pub space_name: Name,
    /// Resource name (must match the leader).
    pub resource_name: Name,
    /// Byte offset of the lease area on its disk.
    pub disk_offset: u64,
    /// Expected geometry (normally the lockspace's). If the leader records another one,
    /// acquire restarts with the leader's, as sanlock does.
    pub geometry: Geometry,
    /// Our io_timeout (seconds): the timeout of every I/O here.
    pub io_timeout: u16,
    /// How many dblocks the first read should cover; 0 reads the whole area as sanlock
    /// does. Reads are extended when the leader's num_hosts is larger.
    pub num_hosts_hint: u64,
}

impl ResourceParams {
    fn io_ms(&self) -> u64 {
        u64::from(self.io_timeout.max(1)) * 1000
    }
}

/// Lease mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Exclusive (the default).
    Exclusive,
    /// Shared (`SANLK_RES_SHARED`).
    Shared,
}

/// Deliberate algorithm bugs, used only by the simulator to prove that its checker can fail.
/// Only with the `sim` feature: production builds cannot carry them.
#[cfg(feature = "sim")]
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlantedBug {
    /// Commit after phase 1 without running phase 2.
    SkipPhase2,
    /// Take a lease whose owner merely looks dead, without waiting host_dead_seconds.
    NoHostDeadWait,
    /// Read only the dblocks of host_ids seen in use when the host joined, and commit
    /// without confirming that no other host_id has joined since.
    StaleKnownHosts,
    /// Delta acquire: take the short path over an unreleased record under our own name
    /// (the rule before issue 21), which lets a restarted daemon — or a clone using the
    /// same name — take the host_id while the previous owner's lease holders still run.
    OwnNameShortDelay,
    /// Shared acquire: grant at once after our join, without waiting for the peers'
    /// cached view of us to catch up (the rule before the shared hold).
    NoSharedHold,
    /// Renewals read only the head of the lockspace area, never the whole of it
    /// ([`crate::reads`]): a host that joins beyond the head is never seen.
    SkipFullRead,
    /// A lease on several disks: any one disk decides a step, not a majority
    /// ([`crate::disks::Replicas::plant_accept_minority`]).
    AcceptMinority,
}

/// Options of an acquire (the sanlock acquire flags that reach the disk algorithm).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcquireOptions {
    /// Exclusive or shared.
    pub mode: Mode,
    /// `SANLK_ACQUIRE_OWNER_NOWAIT`: fail with [`LeaseError::OwnedRetry`] instead of
    /// waiting for an owner whose liveness is not known.
    pub owner_nowait: bool,
    /// `SANLK_RES_LVER`: require this lver on disk.
    pub lver: Option<u64>,
    /// `SANLK_ACQUIRE_LVB`: read the lock value block.
    pub lvb: bool,
    /// `SANLK_RES_NUM_HOSTS`: commit this num_hosts in the leader.
    pub new_num_hosts: Option<u64>,
    /// Retries of a shared acquire that meets a SHORT_HOLD owner (sanlock `sh_retries`, 8).
    pub sh_retries: u32,
    /// Simulator only (feature `sim`).
    #[cfg(feature = "sim")]
    #[doc(hidden)]
    pub planted_bug: Option<PlantedBug>,
}

impl Default for AcquireOptions {
    fn default() -> Self {
        AcquireOptions {
            mode: Mode::Exclusive,
            owner_nowait: false,
            lver: None,
            lvb: false,
            new_num_hosts: None,
            sh_retries: 8,
            #[cfg(feature = "sim")]
            planted_bug: None,
        }
    }
}

/// Who we are in the lockspace, and how to judge other hosts.
pub struct HostContext<'a, L, O> {
    /// The disk holding the lockspace (to read an owner's delta lease).
    pub lockspace_disk: &'a L,
    /// Our lockspace (host_id, W, offsets).
    pub lockspace: &'a LockspaceParams,
    /// Our current host generation (from our delta lease).
    pub generation: u64,
    /// Our host monitor.
    pub observer: &'a O,
}

/// A held resource lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    /// The lease area (with the geometry actually used).
    pub resource: ResourceParams,
    /// Our host_id.
    pub host_id: u64,
    /// Our generation when acquired.
    pub generation: u64,
    /// Current mode.
    pub mode: Mode,
    /// The leader as committed by our acquire (its lver is the lease version we hold).
    pub leader: LeaderRecord,
    /// Our last ballot dblock.
    pub dblock: PaxosDblock,
    /// The LVB, when acquired with `lvb`.
    pub lvb: Option<Vec<u8>>,
    /// True when the LVB was changed and must be written at exclusive release.
    pub lvb_dirty: bool,
    /// Set when a convert failed half-way: the disk may show us as owner and/or shared
    /// holder, so release clears both (sanlock `R_ERASE_ALL`).
    pub erase_all: bool,
}

impl Token {
    /// The lease version we hold.
    pub fn lver(&self) -> u64 {
        self.leader.lver
    }

    /// The LVB contents, if acquired with `lvb`.
    pub fn lvb(&self) -> Option<&[u8]> {
        self.lvb.as_deref()
    }

    /// Replaces the LVB contents (written back at exclusive release or ex→sh convert).
    pub fn set_lvb(&mut self, data: &[u8]) -> Result<(), LeaseError> {
        let sector = self.resource.geometry.sector_bytes() as usize;
        if data.len() > sector {
            return Err(LeaseError::LvbTooBig);
        }
        let lvb = self
            .lvb
            .as_mut()
            .ok_or(LeaseError::Invalid("resource was not acquired with an LVB"))?;
        // As sanlock: only the bytes given are replaced; the rest of the LVB stays.
        lvb[..data.len()].copy_from_slice(data);
        self.lvb_dirty = true;
        Ok(())
    }
}

/// One holder reported by [`read_owners`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owner {
    /// host_id.
    pub host_id: u64,
    /// generation.
    pub generation: u64,
    /// Exclusive (the leader owner) or shared (a SHARED mode block).
    pub mode: Mode,
}

/// Outcome of [`request`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestOutcome {
    /// The lver written to the request record.
    pub lver: u64,
    /// The current owner, whose bit the caller should set in its delta-lease bitmap for
    /// set_bitmap_seconds so that the owner examines the lease.
    pub owner_id: Option<u64>,
}

/// Which lver a request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestLver {
    /// A specific lver (0 with force mode 0 clears the request record).
    Exact(u64),
    /// `SANLK_REQUEST_NEXT_LVER`: the current lver + 1.
    Next,
}

// ----------------------------------------------------------------------------------------
// Reading and writing, on one disk and on all the disks of a lease

#[derive(Clone)]
struct Area {
    leader: LeaderRecord,
    geometry: Geometry,
    max_mbal: u64,
    /// Our own slot's dblock as read.
    own: PaxosDblock,
    /// Largest lver in any valid dblock.
    max_lver: u64,
}

fn expect<'a>(res: &'a ResourceParams) -> LeaderExpect<'a> {
    LeaderExpect {
        sector_size: None,
        space_name: Some(&res.space_name),
        resource_name: Some(&res.resource_name),
    }
}

/// The answer whose leader stands for the lease: on one disk, that disk's (or its
/// error); on several, once a majority of the disks was read, the leader of the newest
/// lease version among them, a released one (timestamp 0) first. Otherwise the step's
/// error.
///
/// sanlock requires a majority of the disks to hold the same leader (the 152 bytes
/// before the timestamp) and fails with `SANLK_LEADER_DIFF` otherwise, which leaves a
/// lease unusable after two single-disk failures at different times (each leaves one
/// disk a version behind: found by `multi_disk.rs`). The newest version read is as safe:
/// every commit that succeeded wrote its leader to a majority, so a majority read sees
/// it or a newer one; the ballot that follows decides the next version whatever the
/// leader says (a stale leader only costs a restart or an `Other`); and a leader at that
/// version with timestamp 0 was written only by that version's owner, releasing it (or
/// retracting a ballot it did not keep).
fn chosen_leader<'a, S: LeaseDisks, T>(
    disks: &S,
    answers: &'a [Answer<T>],
    leader: impl Fn(&T) -> &LeaderRecord,
) -> Result<&'a T, LeaseError> {
    if !disks.quorum(count_ok(answers)) {
        return Err(step_error(answers, missing(IoOp::LeaderRead)));
    }
    let read = || answers.iter().filter_map(Answer::ok);
    let newest = read().map(|v| leader(v).lver).max();
    let at_newest = || read().filter(|v| Some(leader(v).lver) == newest);
    at_newest()
        .find(|v| leader(v).timestamp == 0)
        .or_else(|| at_newest().next())
        .ok_or_else(|| step_error(answers, missing(IoOp::LeaderRead)))
}

fn missing(op: IoOp) -> LeaseError {
    LeaseError::Io {
        op,
        timed_out: false,
    }
}

async fn read_leader_one<D: Disk>(
    disk: &D,
    offset: u64,
    res: &ResourceParams,
    g: Geometry,
) -> Result<LeaderRecord, LeaseError> {
    let buf = disk
        .read(offset, g.sector_bytes() as usize, res.io_ms())
        .await
        .map_err(|e| LeaseError::io(IoOp::LeaderRead, e))?;
    let leader = LeaderRecord::decode(&buf)?;
    leader.verify(LeaderKind::Paxos, &expect(res))?;
    Ok(leader)
}

/// The leader of a lease: on several disks, [`chosen_leader`]'s.
async fn read_leader_at<S: LeaseDisks>(
    disks: &S,
    res: &ResourceParams,
    g: Geometry,
) -> Result<LeaderRecord, LeaseError> {
    let answers = gather(disks, |i| {
        let (d, off) = disks.replica(i, res.disk_offset);
        read_leader_one(d, off, res, g)
    })
    .await;
    chosen_leader(disks, &answers, |l| l).copied()
}

/// Reads and verifies the leader record of a resource.
pub async fn read_leader<S: LeaseDisks>(
    disk: &S,
    res: &ResourceParams,
) -> Result<LeaderRecord, LeaseError> {
    read_leader_at(disk, res, res.geometry).await
}

/// The geometry a resource leader records, refused when it disagrees with the geometry in
/// use: the sector size must be the lockspace's (sanlock fails such a lease too, with a
/// dblock checksum error; writing our ballot at another sector spacing would put it
/// where hosts using the lockspace's geometry never look), and `num_hosts` dblocks must
/// fit in the leader's own area. The align size may differ: sanlock then restarts with
/// the leader's, and so do we.
fn leader_geometry(leader: &LeaderRecord, res: &ResourceParams) -> Result<Geometry, LeaseError> {
    let expected = res.geometry.sector_size.bytes();
    if leader.sector_size != expected {
        return Err(FormatError::SectorSize {
            record: "paxos leader",
            found: leader.sector_size,
            expected,
        }
        .into());
    }
    let g = Geometry::from_leader(leader.sector_size, leader.flags)?;
    if leader.num_hosts > g.max_hosts() {
        return Err(FormatError::NumHostsArea {
            num_hosts: leader.num_hosts,
            max_hosts: g.max_hosts(),
        }
        .into());
    }
    Ok(g)
}

fn check_num_hosts(leader: &LeaderRecord, host_id: u64) -> Result<(), LeaseError> {
    if leader.num_hosts < host_id
        || leader.max_hosts == 0
        || leader.max_hosts > 2000
        || leader.num_hosts > leader.max_hosts
    {
        return Err(FormatError::NumHosts {
            num_hosts: leader.num_hosts,
            host_id,
        }
        .into());
    }
    Ok(())
}

fn ballot_bytes(g: Geometry, num_hosts: u64) -> usize {
    let sectors = ballot_read_sectors(num_hosts.min(g.max_hosts())).min(g.sectors_per_area());
    (sectors * g.sector_bytes()) as usize
}

/// Step A on one disk: the whole lease (leader + every dblock), restarting with the
/// leader's geometry if it differs from the expected one.
async fn read_area_one<D: Disk>(
    disk: &D,
    offset: u64,
    res: &ResourceParams,
    host_id: u64,
    known_hosts: Option<u64>,
) -> Result<Area, LeaseError> {
    let mut g = res.geometry;
    for _ in 0..2 {
        let hint = match known_hosts {
            Some(k) => k,
            None if res.num_hosts_hint == 0 => g.max_hosts(),
            None => res.num_hosts_hint,
        };
        let mut buf = disk
            .read(offset, ballot_bytes(g, hint), res.io_ms())
            .await
            .map_err(|e| LeaseError::io(IoOp::LeaderRead, e))?;
        let leader = LeaderRecord::decode(&buf)?;
        leader.verify(LeaderKind::Paxos, &expect(res))?;
        // A CAW lease (sanlock 5.x) is updated with COMPARE AND WRITE by its hosts:
        // refused (SANLK_WRONG_CAW) before any ballot writes to it.
        leader.check_writable(LeaderKind::Paxos)?;
        let lg = leader_geometry(&leader, res)?;
        if lg != g {
            g = lg;
            continue;
        }
        check_num_hosts(&leader, host_id)?;
        let read_hosts = known_hosts.map_or(leader.num_hosts, |k| k.min(leader.num_hosts));
        let need = ballot_bytes(g, read_hosts);
        if buf.len() < need {
            buf = disk
                .read(offset, need, res.io_ms())
                .await
                .map_err(|e| LeaseError::io(IoOp::DblockRead, e))?;
        }
        let sector = g.sector_bytes() as usize;
        let mut max_mbal = 0;
        let mut own = PaxosDblock::default();
        let mut max_lver = 0;
        for q in 0..read_hosts as usize {
            let at = (2 + q) * sector;
            if at + sector > buf.len() {
                break;
            }
            let (d, _) = decode_dblock_sector(&buf[at..at + sector])?;
            d.verify()?;
            max_mbal = max_mbal.max(d.mbal);
            max_lver = max_lver.max(d.lver);
            if q as u64 + 1 == host_id {
                own = d;
            }
        }
        return Ok(Area {
            leader,
            geometry: g,
            max_mbal,
            own,
            max_lver,
        });
    }
    Err(FormatError::SectorSize {
        record: "paxos leader",
        found: g.sector_size.bytes(),
        expected: res.geometry.sector_size.bytes(),
    }
    .into())
}

/// Step A: [`read_area_one`] on every disk of the lease. The leader is
/// [`chosen_leader`]'s; the largest mbal and lver are over every disk read, and our own
/// dblock is our newest among them, by mbal then bal (sanlock takes it from the disk
/// with the largest mbal of any host).
async fn read_area<S: LeaseDisks>(
    disks: &S,
    res: &ResourceParams,
    host_id: u64,
    known_hosts: Option<u64>,
) -> Result<Area, LeaseError> {
    let answers = gather(disks, |i| {
        let (d, off) = disks.replica(i, res.disk_offset);
        read_area_one(d, off, res, host_id, known_hosts)
    })
    .await;
    let mut area = chosen_leader(disks, &answers, |x: &Area| &x.leader)?.clone();
    for a in answers.iter().filter_map(Answer::ok) {
        area.max_mbal = area.max_mbal.max(a.max_mbal);
        area.max_lver = area.max_lver.max(a.max_lver);
        // Our newest slot: the largest mbal, and at one mbal phase 2's copy (bal = mbal)
        // over phase 1's, so that a value we accepted is kept, not forgotten because the
        // disk read first missed our phase-2 write: the next phase 1 would then erase a
        // value that may have been chosen, and another could be chosen for the same lver
        // (`tests_multidisk::an_accepted_value_on_a_majority_is_kept_though_the_first_disk_missed_it`).
        if (a.own.mbal, a.own.bal) > (area.own.mbal, area.own.bal) {
            area.own = a.own;
        }
    }
    Ok(area)
}

fn slot_offset(offset: u64, g: Geometry, host_id: u64) -> u64 {
    offset + disk_format::area::dblock_sector(host_id) * g.sector_bytes()
}

async fn write_sector<D: Disk>(
    disk: &D,
    at: u64,
    buf: &[u8],
    res: &ResourceParams,
    op: IoOp,
) -> Result<(), LeaseError> {
    disk.write(at, buf, res.io_ms())
        .await
        .map_err(|e| LeaseError::io(op, e))
}

/// Writes our slot (dblock and mode block) on the lease's disks: a majority must take it;
/// every disk when it carries a SHARED mode block, as sanlock requires of a mode block
/// (its exclusive acquirers judge a shared holder alive from disk 0's copy alone).
async fn write_slot<S: LeaseDisks>(
    disks: &S,
    res: &ResourceParams,
    g: Geometry,
    host_id: u64,
    dblock: &PaxosDblock,
    mode: &ModeBlock,
) -> Result<(), LeaseError> {
    let mut buf = vec![0u8; g.sector_bytes() as usize];
    encode_dblock_sector(dblock, mode, &mut buf);
    let buf = &buf;
    write_each(
        disks,
        mode.is_shared(),
        |i| {
            let (d, off) = disks.replica(i, res.disk_offset);
            write_sector(d, slot_offset(off, g, host_id), buf, res, IoOp::DblockWrite)
        },
        missing(IoOp::DblockWrite),
    )
    .await
}

/// Writes the leader on the lease's disks; a majority must take it.
async fn write_leader<S: LeaseDisks>(
    disks: &S,
    res: &ResourceParams,
    g: Geometry,
    leader: &LeaderRecord,
) -> Result<(), LeaseError> {
    let mut buf = vec![0u8; g.sector_bytes() as usize];
    leader.encode_into(&mut buf);
    let buf = &buf;
    write_each(
        disks,
        false,
        |i| {
            let (d, off) = disks.replica(i, res.disk_offset);
            write_sector(d, off, buf, res, IoOp::LeaderWrite)
        },
        missing(IoOp::LeaderWrite),
    )
    .await
}

// ----------------------------------------------------------------------------------------
// The ballot

struct BallotCtx<'a> {
    res: &'a ResourceParams,
    g: Geometry,
    host_id: u64,
    generation: u64,
    /// How many dblocks (host_ids 1..=read_hosts) each ballot read covers: the leader's
    /// num_hosts, or fewer when reading only the hosts that have joined.
    read_hosts: u64,
    /// Our mode block during the ballot: SHARED when converting sh→ex, else zero.
    our_mode: ModeBlock,
    #[cfg(feature = "sim")]
    bug: Option<PlantedBug>,
}

struct BallotResult {
    dblock: PaxosDblock,
}

/// Our slot's contents across the ballots of one acquire, and the inputs we proposed.
struct Slot {
    /// What our slot holds (last written, or as read in step A).
    last: PaxosDblock,
    /// Fresh inputs (inp, inp2, inp3) proposed by this acquire.
    proposed: Vec<(u64, u64, u64)>,
}

enum BallotError {
    /// Abort (larger mbal / newer lver): back off and retry.
    Abort,
    /// Phase 1 read only the dblocks of the host_ids that had joined, and a host_id above
    /// them has joined since: run again reading every dblock (nothing of phase 2 written).
    Incomplete,
    /// Failure; `phase2` tells whether we might have been chosen.
    Fail { err: LeaseError, phase2: bool },
}

/// What one disk's ballot read gave: the accepted dblock with the largest bal.
type BallotSeen = Option<PaxosDblock>;

/// Reads the dblocks on one disk and applies the abort rules ([`LeaseError::DblockLver`],
/// [`LeaseError::DblockMbal`]). Hosts (other than us) whose slot carries a SHARED mode
/// block are added to `shared` as they are read, also those read before an abort.
async fn ballot_read_one<D: Disk>(
    disk: &D,
    offset: u64,
    c: &BallotCtx<'_>,
    ours: &PaxosDblock,
    shared: &RefCell<Vec<u64>>,
) -> Result<BallotSeen, LeaseError> {
    let buf = disk
        .read(offset, ballot_bytes(c.g, c.read_hosts), c.res.io_ms())
        .await
        .map_err(|e| LeaseError::io(IoOp::DblockRead, e))?;
    let sector = c.g.sector_bytes() as usize;
    let mut bk_max: Option<PaxosDblock> = None;
    for q in 0..c.read_hosts as usize {
        let at = (2 + q) * sector;
        if at + sector > buf.len() {
            break;
        }
        let Ok((bk, mb)) = decode_dblock_sector(&buf[at..at + sector]) else {
            continue;
        };
        if bk.verify().is_err() {
            continue;
        }
        let h = q as u64 + 1;
        if mb.is_shared() && h != c.host_id {
            let mut list = shared.borrow_mut();
            if !list.contains(&h) {
                list.push(h);
            }
        }
        if bk.lver < ours.lver {
            continue;
        }
        if bk.lver > ours.lver {
            return Err(LeaseError::DblockLver);
        }
        if bk.mbal > ours.mbal {
            return Err(LeaseError::DblockMbal);
        }
        if bk.inp == 0 || bk.bal == 0 {
            continue;
        }
        if bk_max.is_none_or(|m| bk.bal > m.bal) {
            bk_max = Some(bk);
        }
    }
    Ok(bk_max)
}

/// One ballot phase on one disk: our dblock written, then the dblocks read, in that order
/// on this disk (the read counts only after our write landed here).
async fn phase_one_disk<D: Disk>(
    disk: &D,
    offset: u64,
    c: &BallotCtx<'_>,
    ours: &PaxosDblock,
    (buf, shared): (&[u8], &RefCell<Vec<u64>>),
) -> Result<BallotSeen, LeaseError> {
    let at = slot_offset(offset, c.g, c.host_id);
    write_sector(disk, at, buf, c.res, IoOp::DblockWrite).await?;
    ballot_read_one(disk, offset, c, ours, shared).await
}

fn is_abort(a: &Answer<BallotSeen>) -> bool {
    matches!(
        a,
        Answer::Done(Err(LeaseError::DblockLver | LeaseError::DblockMbal))
    )
}

/// A ballot phase on every disk of the lease: it completes when a majority of the disks
/// took our dblock and were read after it without a reason to abort; any disk read with
/// a larger mbal or a newer lver aborts it at once. Returns the accepted dblock with the
/// largest bal over the disks read, and adds the shared holders seen to `shared`.
async fn ballot_phase<S: LeaseDisks>(
    disks: &S,
    c: &BallotCtx<'_>,
    ours: &PaxosDblock,
    shared: &mut Vec<u64>,
) -> Result<Option<PaxosDblock>, LeaseError> {
    let mut buf = vec![0u8; c.g.sector_bytes() as usize];
    encode_dblock_sector(ours, &c.our_mode, &mut buf);
    let seen = RefCell::new(std::mem::take(shared));
    let with = (buf.as_slice(), &seen);
    let answers = gather(disks, |i| {
        let (d, off) = disks.replica(i, c.res.disk_offset);
        phase_one_disk(d, off, c, ours, with)
    })
    .await;
    *shared = seen.into_inner();
    if let Some(Answer::Done(Err(e))) = answers.iter().find(|a| is_abort(a)) {
        return Err(e.clone());
    }
    if !disks.quorum(count_ok(&answers)) {
        return Err(step_error(&answers, missing(IoOp::DblockRead)));
    }
    let mut bk_max: Option<PaxosDblock> = None;
    for bk in answers.iter().filter_map(Answer::ok).flatten() {
        if bk_max.is_none_or(|m| bk.bal > m.bal) {
            bk_max = Some(*bk);
        }
    }
    Ok(bk_max)
}

/// Adds to `shared` every host (other than us) whose dblock carries a SHARED mode block,
/// reading the dblocks of all `num_hosts` hosts on every disk (a majority must be read).
async fn read_shared_holders<S: LeaseDisks>(
    disks: &S,
    c: &BallotCtx<'_>,
    num_hosts: u64,
    shared: &mut Vec<u64>,
) -> Result<(), LeaseError> {
    let answers = read_slots_each(disks, c.res, c.g, (num_hosts, SlotCheck::Verified)).await;
    if !disks.quorum(count_ok(&answers)) {
        return Err(step_error(&answers, missing(IoOp::DblockRead)));
    }
    for holders in answers.iter().filter_map(Answer::ok) {
        for &(h, _gen) in holders {
            if h != c.host_id && !shared.contains(&h) {
                shared.push(h);
            }
        }
    }
    Ok(())
}

/// Which slots [`shared_slots_one`] reports.
#[derive(Clone, Copy, PartialEq, Eq)]
enum SlotCheck {
    /// Only slots whose dblock decodes and verifies (a ballot's view).
    Verified,
    /// Every slot's mode block, failing on a sector that does not decode
    /// (`read_owners`, as sanlock's `read_resource_owners`).
    ModeBlocks,
}

/// The (host_id, generation) of every slot with a SHARED mode block among the first
/// `num_hosts`, on one disk.
async fn shared_slots_one<D: Disk>(
    disk: &D,
    offset: u64,
    res: &ResourceParams,
    g: Geometry,
    (num_hosts, check): (u64, SlotCheck),
) -> Result<Vec<(u64, u64)>, LeaseError> {
    let buf = disk
        .read(offset, ballot_bytes(g, num_hosts), res.io_ms())
        .await
        .map_err(|e| LeaseError::io(IoOp::DblockRead, e))?;
    let sector = g.sector_bytes() as usize;
    let mut out = Vec::new();
    for q in 0..num_hosts as usize {
        let at = (2 + q) * sector;
        if at + sector > buf.len() {
            break;
        }
        let (bk, mb) = match decode_dblock_sector(&buf[at..at + sector]) {
            Ok(d) => d,
            Err(_) if check == SlotCheck::Verified => continue,
            Err(e) => return Err(e.into()),
        };
        if mb.is_shared() && (check == SlotCheck::ModeBlocks || bk.verify().is_ok()) {
            out.push((q as u64 + 1, mb.generation));
        }
    }
    Ok(out)
}

/// [`shared_slots_one`] on every disk, until a majority answered.
async fn read_slots_each<S: LeaseDisks>(
    disks: &S,
    res: &ResourceParams,
    g: Geometry,
    which: (u64, SlotCheck),
) -> Vec<Answer<Vec<(u64, u64)>>> {
    gather(disks, |i| {
        let (d, off) = disks.replica(i, res.disk_offset);
        shared_slots_one(d, off, res, g, which)
    })
    .await
}

#[allow(clippy::too_many_arguments)]
async fn run_ballot<S: LeaseDisks, C: Clock, L: Disk, O: HostObserver>(
    disk: &S,
    clock: &C,
    c: &BallotCtx<'_>,
    (host, num_hosts, opts): (&HostContext<'_, L, O>, u64, &AcquireOptions),
    next_lver: u64,
    our_mbal: u64,
    shared: &mut Vec<u64>,
    slot: &mut Slot,
) -> Result<BallotResult, BallotError> {
    let fail = |err, phase2| BallotError::Fail { err, phase2 };
    let mut dblock = PaxosDblock {
        mbal: our_mbal,
        lver: next_lver,
        ..Default::default()
    };
    // Unlike sanlock, which zeroes bal and inp here, keep a value our slot already
    // accepted for this lver (as Disk Paxos does): it may have been chosen, and a ballot
    // that forgets it can choose another value for the same lver after a leader write
    // landed late and took the leader back to an older lver (found by the simulator).
    // Only a value accepted at a ballot below ours can be kept: our slot as read from disk
    // with bal above our mbal is corrupt (bal never exceeds mbal), and is dropped as
    // sanlock drops every value here.
    let prev = slot.last;
    if prev.lver == next_lver && prev.bal != 0 && prev.inp != 0 && prev.bal <= our_mbal {
        dblock.bal = prev.bal;
        dblock.inp = prev.inp;
        dblock.inp2 = prev.inp2;
        dblock.inp3 = prev.inp3;
    }
    dblock.seal();
    // Invariants of every phase-1 dblock we write, whatever the disk held: our mbal is
    // above every mbal of the area and of our earlier ballots (step C and the abort
    // path compute it so), and the ballot we accepted is never above the one we promised.
    assert!(
        dblock.mbal > prev.mbal,
        "paxos phase 1: our new mbal {} is not above the mbal {} our slot held",
        dblock.mbal,
        prev.mbal
    );
    assert!(
        dblock.mbal >= dblock.bal,
        "paxos phase 1: we would write bal {} above our mbal {}",
        dblock.bal,
        dblock.mbal
    );
    assert_eq!(
        dblock.lver, next_lver,
        "paxos phase 1: our dblock is for another lease version"
    );
    // Phase 1 (our slot may hold this dblock from here on, whatever the outcome).
    slot.last = dblock;
    let bk_max = match ballot_phase(disk, c, &dblock, shared).await {
        Ok(b) => b,
        Err(LeaseError::DblockLver | LeaseError::DblockMbal) => return Err(BallotError::Abort),
        Err(e) => return Err(fail(e, false)),
    };
    // Reading only the hosts that have joined: the value phase 2 writes must come from
    // every dblock, so confirm before it, not only before the commit, that no host_id
    // above those we read has ever joined. A phase 2 written from a partial read puts a
    // value with our high bal in our dblock; a host that joined beyond what we read may
    // have had its own value chosen already, and our bal then outranks it in every later
    // ballot, ours included: two values for one lver (found by `lockd-sim --model
    // head-reads`, seed 2003864 with 8 hosts). A host_id whose delta lease is unused
    // never wrote a dblock, so after the confirm our read is as good as a full one.
    match confirm_known_hosts(host, c, num_hosts, opts).await {
        Ok(true) => {}
        Ok(false) => return Err(BallotError::Incomplete),
        Err(e) => return Err(fail(e, false)),
    }
    match bk_max {
        Some(bk) => {
            dblock.inp = bk.inp;
            dblock.inp2 = bk.inp2;
            dblock.inp3 = bk.inp3;
        }
        None => {
            dblock.inp = c.host_id;
            dblock.inp2 = c.generation;
            dblock.inp3 = clock.now_s().max(1);
            slot.proposed.push((dblock.inp, dblock.inp2, dblock.inp3));
        }
    }
    dblock.bal = dblock.mbal;
    dblock.seal();
    #[cfg(feature = "sim")]
    if c.bug == Some(PlantedBug::SkipPhase2) {
        return Ok(BallotResult { dblock });
    }
    // Phase 2 (shared holders are counted from phase 1 only, as in sanlock).
    slot.last = dblock;
    match ballot_phase(disk, c, &dblock, &mut Vec::new()).await {
        Ok(_) => Ok(BallotResult { dblock }),
        Err(LeaseError::DblockLver | LeaseError::DblockMbal) => Err(BallotError::Abort),
        Err(e) => Err(fail(e, true)),
    }
}

// ----------------------------------------------------------------------------------------
// Acquire

struct Committed {
    leader: LeaderRecord,
    dblock: PaxosDblock,
    geometry: Geometry,
    shared: Vec<u64>,
}

struct AcquireFail {
    err: LeaseError,
    /// The leader that made us fail (for the SHORT_HOLD retry decision).
    leader: Option<LeaderRecord>,
}

impl From<LeaseError> for AcquireFail {
    fn from(err: LeaseError) -> Self {
        AcquireFail { err, leader: None }
    }
}

enum OwnerVerdict {
    Run,
    Restart,
}

/// Whether the owner of `cur` marked its dblock RELEASED: on one disk, its slot as read;
/// on several, its newest dblock among the disks read (the largest lease version, then
/// the largest mbal), which must be for `cur`'s version or a newer one. A disk that missed
/// the owner's later writes may still show an older dblock of the same version with the
/// flag, from an attempt the owner retracted before the one that won (found by `lockd-sim
/// --model multi-disk`, seed 118766 with 4 hosts: taken from a live owner). The flag on
/// any copy of the newest dblock counts: it is written only when that very attempt is
/// released or retracted. Read errors count as not released.
async fn owner_released<S: LeaseDisks>(
    disks: &S,
    res: &ResourceParams,
    g: Geometry,
    cur: &LeaderRecord,
) -> bool {
    let answers = gather(disks, |i| {
        let (d, off) = disks.replica(i, res.disk_offset);
        read_slot_one(d, slot_offset(off, g, cur.owner_id), res, g)
    })
    .await;
    let read = || answers.iter().filter_map(Answer::ok).map(|(d, _)| d);
    if disks.count() == 1 {
        return read().any(PaxosDblock::is_released);
    }
    let Some(newest) = read().map(|d| (d.lver, d.mbal)).max() else {
        return false;
    };
    newest.0 >= cur.lver
        && read()
            .filter(|d| (d.lver, d.mbal) == newest)
            .any(PaxosDblock::is_released)
}

/// One slot (dblock and mode block) on one disk, decoded but not verified.
async fn read_slot_one<D: Disk>(
    disk: &D,
    at: u64,
    res: &ResourceParams,
    g: Geometry,
) -> Result<(PaxosDblock, ModeBlock), LeaseError> {
    let buf = disk
        .read(at, g.sector_bytes() as usize, res.io_ms())
        .await
        .map_err(|e| LeaseError::io(IoOp::DblockRead, e))?;
    Ok(decode_dblock_sector(&buf)?)
}

/// Step B for a lease owned by another host: wait until its owner is shown alive
/// (IDLIVE), dead (host_dead_seconds without change, from our own observations), gone
/// (delta lease free or re-acquired), or the leader changes (restart).
async fn wait_for_owner<S: LeaseDisks, C: Clock, L: Disk, O: HostObserver>(
    disk: &S,
    clock: &C,
    host: &HostContext<'_, L, O>,
    res: &ResourceParams,
    g: Geometry,
    cur: &LeaderRecord,
    opts: &AcquireOptions,
) -> Result<OwnerVerdict, AcquireFail> {
    if !host.lockspace.space_name.same_as(&cur.space_name) {
        return Err(LeaseError::AcquireLockspace.into());
    }
    let w = host.lockspace.watchdog_fire;
    let hs = host
        .observer
        .observation(cur.owner_id)
        .filter(|h| h.owner_id == cur.owner_id && h.owner_generation == cur.owner_generation);
    let (wait_start, mut last_timestamp) = match hs {
        Some(h) if h.last_check_s != 0 && h.last_live_s != 0 => (h.last_live_s, h.timestamp),
        _ => (clock.now_s(), 0),
    };
    loop {
        let owner_delta = read_host_record(host.lockspace_disk, host.lockspace, cur.owner_id)
            .await
            .map_err(|e| AcquireFail {
                err: e,
                leader: Some(*cur),
            })?;
        if owner_delta.timestamp == 0 {
            return Ok(OwnerVerdict::Run);
        }
        if owner_delta.owner_id != cur.owner_id
            || owner_delta.owner_generation > cur.owner_generation
        {
            return Ok(OwnerVerdict::Run);
        }
        // sanlock 5.x marks: an external fencer declared exactly this owner generation
        // dead (DEAD_EXT: its leases are free at once, as on sanlock 5.1.1); a NO_TIMEOUT
        // owner never expires by time, so its lease is never taken by waiting.
        if owner_delta.dead_ext() && owner_delta.owner_generation == cur.owner_generation {
            return Ok(OwnerVerdict::Run);
        }
        // Storage fencing on this host removed exactly this owner generation's key from
        // the storage (preempt confirmed): it can no longer write, its leases are free.
        let fenced_by_us = || {
            owner_delta.owner_generation == cur.owner_generation
                && host
                    .observer
                    .observation(cur.owner_id)
                    .is_some_and(|h| h.owner_id == cur.owner_id && h.fenced(cur.owner_generation))
        };
        if fenced_by_us() {
            return Ok(OwnerVerdict::Run);
        }
        if owner_delta.flags & disk_format::leader::LFL_NO_TIMEOUT != 0 {
            return Err(AcquireFail {
                err: LeaseError::OwnedNoTimeout {
                    owner_id: cur.owner_id,
                },
                leader: Some(*cur),
            });
        }
        if last_timestamp == 0 {
            last_timestamp = owner_delta.timestamp;
        } else {
            let seen_change = host
                .observer
                .observation(cur.owner_id)
                .filter(|h| h.owner_id == cur.owner_id)
                .is_some_and(|h| h.changed_at_last_check());
            let alive = owner_delta.timestamp != last_timestamp || seen_change;
            if alive {
                if cur.write_id != cur.owner_id && owner_released(disk, res, g, cur).await {
                    return Ok(OwnerVerdict::Run);
                }
                return Err(AcquireFail {
                    err: LeaseError::IdLive {
                        owner_id: cur.owner_id,
                        owner_generation: cur.owner_generation,
                    },
                    leader: Some(*cur),
                });
            }
            #[cfg(feature = "sim")]
            if opts.planted_bug == Some(PlantedBug::NoHostDeadWait) {
                return Ok(OwnerVerdict::Run);
            }
            let owner_io = match hs {
                Some(h) if h.io_timeout != 0 => h.io_timeout,
                _ if owner_delta.io_timeout != 0 => owner_delta.io_timeout,
                _ => host.lockspace.io_timeout,
            };
            let dead = host_dead_seconds(u64::from(owner_io), w);
            if clock.now_s().saturating_sub(wait_start) > dead {
                return Ok(OwnerVerdict::Run);
            }
            if opts.owner_nowait {
                return Err(AcquireFail {
                    err: LeaseError::OwnedRetry {
                        owner_id: cur.owner_id,
                    },
                    leader: Some(*cur),
                });
            }
        }
        // A second until the owner is read again (sanlock's pace), looking every 100 ms
        // at our own monitor (memory, no I/O) for a fence of exactly this owner
        // generation, confirmed meanwhile: the same verdict as above, given as soon as
        // the mark is made rather than up to a second later.
        let slices = if host.observer.fence_marks_possible() {
            OWNER_WAIT_SLICES
        } else {
            1
        };
        for _ in 0..slices {
            clock.sleep_ms(1000 / slices).await;
            if slices > 1 && fenced_by_us() {
                return Ok(OwnerVerdict::Run);
            }
        }
        let tmp = read_leader_at(disk, res, g).await?;
        if tmp != *cur {
            return Ok(OwnerVerdict::Restart);
        }
    }
}

/// The owner wait's second is slept in this many slices, each followed by a look for a
/// fence mark of the owner.
const OWNER_WAIT_SLICES: u64 = 10;

/// Best-effort undo after a failure that may have left us chosen: mark our dblock released
/// and clear the leader if it names us and we wrote it.
async fn retract<S: LeaseDisks, C: Clock>(
    disk: &S,
    clock: &C,
    c: &BallotCtx<'_>,
    dblock: &PaxosDblock,
    next_lver: u64,
) {
    if let Ok(leader) = read_leader_at(disk, c.res, c.g).await {
        if leader.write_id == c.host_id
            && leader.owner_id == c.host_id
            && leader.owner_generation == c.generation
            && leader.lver == next_lver
            && leader.timestamp != 0
        {
            let mut l = leader;
            l.timestamp = 0;
            l.write_id = c.host_id;
            l.write_generation = c.generation;
            l.write_timestamp = clock.now_s();
            l.flags &= !LFL_SHORT_HOLD;
            l.seal();
            let _ = write_leader(disk, c.res, c.g, &l).await;
        }
    }
    // The RELEASED flag only after the leader write has completed: see `release`.
    let mut d = *dblock;
    d.flags |= DBLOCK_FL_RELEASED;
    let _ = write_slot(disk, c.res, c.g, c.host_id, &d, &c.our_mode).await;
}

/// After ballots that read only host_ids `1..=c.read_hosts`: reads the delta-lease sectors
/// of host_ids `c.read_hosts + 1 ..= num_hosts` and tells whether all are still unused.
/// `Ok(true)` at once when the ballots read every dblock.
async fn confirm_known_hosts<L: Disk, O: HostObserver>(
    host: &HostContext<'_, L, O>,
    c: &BallotCtx<'_>,
    num_hosts: u64,
    opts: &AcquireOptions,
) -> Result<bool, LeaseError> {
    #[cfg(feature = "sim")]
    if opts.planted_bug == Some(PlantedBug::StaleKnownHosts) {
        return Ok(true);
    }
    #[cfg(not(feature = "sim"))]
    let _ = opts;
    if c.read_hosts >= num_hosts {
        return Ok(true);
    }
    host.observer
        .confirm_unused_above(host.lockspace_disk, host.lockspace, c.read_hosts, num_hosts)
        .await
}

/// [`confirm_known_hosts`]; when the confirmation cannot be read, our possibly chosen
/// ballot is retracted before the error is returned.
async fn confirm_or_retract<S: LeaseDisks, C: Clock, L: Disk, O: HostObserver>(
    disk: &S,
    clock: &C,
    host: &HostContext<'_, L, O>,
    (ctx, num_hosts, opts): (&BallotCtx<'_>, u64, &AcquireOptions),
    last: &PaxosDblock,
    next_lver: u64,
) -> Result<bool, AcquireFail> {
    match confirm_known_hosts(host, ctx, num_hosts, opts).await {
        Ok(unused) => Ok(unused),
        Err(e) => {
            retract(disk, clock, ctx, last, next_lver).await;
            Err(e.into())
        }
    }
}

/// sanlock `paxos_lease_acquire`: steps A–E, returning the committed leader.
#[allow(clippy::too_many_arguments)]
async fn paxos_acquire<S: LeaseDisks, C: Clock, L: Disk, O: HostObserver>(
    disk: &S,
    clock: &C,
    host: &HostContext<'_, L, O>,
    res: &ResourceParams,
    opts: &AcquireOptions,
    our_mode: ModeBlock,
    shared_acquire: bool,
    slot_out: &mut Option<PaxosDblock>,
) -> Result<Committed, AcquireFail> {
    let host_id = host.lockspace.host_id;
    let gen = host.generation;
    if host_id == 0 {
        return Err(LeaseError::InvalidHostId {
            host_id,
            max_hosts: res.geometry.max_hosts(),
        }
        .into());
    }
    let mut slot = Slot {
        last: PaxosDblock::default(),
        proposed: Vec::new(),
    };
    // Shared holders seen by any phase 1 of this acquire (sanlock's shared_count).
    let mut seen_shared: Vec<u64> = Vec::new();
    // Read only the dblocks of host_ids that have joined, until a confirmation fails.
    let mut known_hosts_only = true;
    'restart: loop {
        let known_hosts = if known_hosts_only {
            host.observer.ballot_hosts_hint().map(|k| k.max(host_id))
        } else {
            None
        };
        // Step A.
        let area = read_area(disk, res, host_id, known_hosts).await?;
        let cur = area.leader;
        let g = area.geometry;
        // Step B.
        if let Some(want) = opts.lver {
            if cur.lver != want {
                return Err(LeaseError::AcquireLver {
                    on_disk: cur.lver,
                    requested: want,
                }
                .into());
            }
        }
        let ours = cur.owner_id == host_id && cur.owner_generation <= gen;
        // A dblock two or more versions ahead of the leader proves that the leader fell
        // behind: a commit written for an older version landed after newer ones (a race
        // sanlock's leader cache has with slow writes). Someone saw the leader at
        // `max_lver - 1`, so every version before that has ended; run the newest
        // instance again, which adopts its decision if one was made, and so repair
        // the leader instead of trusting the stale owner in it.
        let stale = area.max_lver >= cur.lver.saturating_add(2);
        if cur.timestamp != 0 && !ours && !stale {
            match wait_for_owner(disk, clock, host, res, g, &cur, opts).await? {
                OwnerVerdict::Run => {}
                OwnerVerdict::Restart => continue 'restart,
            }
        }
        // Step C.
        let next_lver = if stale {
            area.max_lver
        } else {
            cur.lver
                .checked_add(1)
                .ok_or(LeaseError::Invalid("lease version exhausted"))?
        };
        let mut our_mbal = if area.max_mbal == 0 {
            host_id
        } else {
            (area.max_mbal - area.max_mbal % cur.max_hosts)
                .checked_add(cur.max_hosts + host_id)
                .ok_or(LeaseError::Invalid("ballot numbers exhausted"))?
        };
        // host_id ≥ 1 (checked on entry) and max_hosts ≥ 1 (check_num_hosts), so this
        // holds for any area read from disk.
        assert!(
            our_mbal > area.max_mbal,
            "paxos step C: our mbal {our_mbal} is not above the largest on disk {}",
            area.max_mbal
        );
        let ctx = BallotCtx {
            res,
            g,
            host_id,
            generation: gen,
            read_hosts: known_hosts.map_or(cur.num_hosts, |k| k.min(cur.num_hosts)),
            our_mode,
            #[cfg(feature = "sim")]
            bug: opts.planted_bug,
        };
        let mut first = true;
        slot.last = area.own;
        // Step D.
        let ballot = loop {
            let tmp = if first {
                cur
            } else {
                read_leader_at(disk, res, g).await?
            };
            first = false;
            if tmp.lver == next_lver {
                if tmp.owner_id == host_id && tmp.owner_generation == gen {
                    let ours_now = slot
                        .proposed
                        .iter()
                        .any(|p| (p.1, p.2) == (tmp.owner_generation, tmp.timestamp));
                    if !ours_now {
                        // An earlier acquire's decision: take a fresh lease version.
                        continue 'restart;
                    }
                    // Another host committed our value. Our reads may have missed a
                    // shared holder that joined lately: confirm as before a commit.
                    let c = (&ctx, cur.num_hosts, opts);
                    if !confirm_or_retract(disk, clock, host, c, &slot.last, next_lver).await? {
                        known_hosts_only = false;
                        continue 'restart;
                    }
                    // Our own phase reads may also predate a SHARED mode block that the
                    // committing host saw (a shared holder that took the lease between
                    // our ballot and its commit): read every host's mode block again.
                    read_shared_holders(disk, &ctx, cur.num_hosts, &mut seen_shared).await?;
                    return Ok(Committed {
                        leader: tmp,
                        dblock: slot.last,
                        geometry: g,
                        shared: seen_shared,
                    });
                }
                return Err(AcquireFail {
                    err: LeaseError::Owned {
                        owner_id: tmp.owner_id,
                        owner_generation: tmp.owner_generation,
                    },
                    leader: Some(tmp),
                });
            }
            if tmp.lver > next_lver || tmp != cur {
                continue 'restart;
            }
            let r = run_ballot(
                disk,
                clock,
                &ctx,
                (host, cur.num_hosts, opts),
                next_lver,
                our_mbal,
                &mut seen_shared,
                &mut slot,
            )
            .await;
            *slot_out = Some(slot.last);
            match r {
                Ok(b) => break b,
                Err(BallotError::Incomplete) => {
                    known_hosts_only = false;
                    continue 'restart;
                }
                Err(BallotError::Abort) => {
                    clock.sleep_ms(clock.random_below(1000)).await;
                    our_mbal = our_mbal
                        .checked_add(cur.max_hosts)
                        .ok_or(LeaseError::Invalid("ballot numbers exhausted"))?;
                }
                Err(BallotError::Fail { err, phase2 }) => {
                    if phase2 {
                        retract(disk, clock, &ctx, &slot.last, next_lver).await;
                    }
                    return Err(err.into());
                }
            }
        };
        // Reading only the hosts that have joined: before committing, confirm that no
        // host_id above those we read has joined since (see the module header).
        let c = (&ctx, cur.num_hosts, opts);
        if !confirm_or_retract(disk, clock, host, c, &slot.last, next_lver).await? {
            known_hosts_only = false;
            continue 'restart;
        }
        // Step E: commit.
        let d = ballot.dblock;
        // The winning ballot is the one phase 2 wrote: accepted at our own mbal, for the
        // version this instance decides, which is newer than the leader we started from.
        assert!(
            d.bal == d.mbal && d.bal == our_mbal,
            "paxos commit: the winning dblock (mbal {}, bal {}) is not our ballot {our_mbal}",
            d.mbal,
            d.bal
        );
        assert!(
            d.lver == next_lver && next_lver > cur.lver,
            "paxos commit: lease version {} does not follow the leader's {}",
            d.lver,
            cur.lver
        );
        let mut new = cur;
        new.lver = d.lver;
        new.owner_id = d.inp;
        new.owner_generation = d.inp2;
        new.timestamp = d.inp3;
        new.write_id = host_id;
        new.write_generation = gen;
        new.write_timestamp = clock.now_s();
        if let Some(n) = opts.new_num_hosts {
            new.num_hosts = n;
        }
        if new.owner_id == host_id {
            if shared_acquire {
                new.flags |= LFL_SHORT_HOLD;
            } else {
                new.flags &= !LFL_SHORT_HOLD;
            }
        }
        new.seal();
        assert!(
            (new.owner_id, new.owner_generation, new.timestamp, new.lver)
                == (d.inp, d.inp2, d.inp3, d.lver),
            "paxos commit: the leader's owner {}:{} is not the winning ballot's value {}:{}",
            new.owner_id,
            new.owner_generation,
            d.inp,
            d.inp2
        );
        if let Err(e) = write_leader(disk, res, g, &new).await {
            retract(disk, clock, &ctx, &d, next_lver).await;
            return Err(e.into());
        }
        if new.owner_id == host_id && !slot.proposed.contains(&(d.inp, d.inp2, d.inp3)) {
            // We completed an earlier acquire's decision (the leader had fallen behind):
            // committed, now take a fresh lease version.
            continue 'restart;
        }
        if new.owner_id != host_id {
            return Err(AcquireFail {
                err: LeaseError::Other {
                    owner_id: new.owner_id,
                    owner_generation: new.owner_generation,
                },
                leader: Some(new),
            });
        }
        // We hold it only through a value this acquire proposed, so under our identity.
        assert!(
            new.owner_id == host_id && new.owner_generation == gen,
            "paxos commit: we return a lease owned by {}:{}, not by us ({host_id}:{gen})",
            new.owner_id,
            new.owner_generation
        );
        return Ok(Committed {
            leader: new,
            dblock: d,
            geometry: g,
            shared: seen_shared,
        });
    }
}

/// Waits while our monitor holds shared grants back after our join
/// ([`crate::monitor::SharedHold`]): until every live peer has been seen renewing often
/// enough that its own cached view of us is newer than our join. Gives up with
/// [`LeaseError::SharedHoldStuck`] after host_dead_seconds of the slowest awaited peer (or of our own
/// io_timeout): a peer silent that long is dead and no longer awaited, so a hold still on
/// means our own reads of the lockspace stopped; the client may retry.
async fn wait_shared_hold<C: Clock, L, O: HostObserver>(
    clock: &C,
    host: &HostContext<'_, L, O>,
) -> Result<(), LeaseError> {
    let start_s = clock.now_s();
    while let Some(peer_io) = host.observer.shared_grant_hold() {
        let io = u64::from(peer_io.max(host.lockspace.io_timeout));
        let limit_s = host_dead_seconds(io, host.lockspace.watchdog_fire);
        if clock.now_s().saturating_sub(start_s) > limit_s {
            return Err(LeaseError::SharedHoldStuck);
        }
        clock.sleep_ms(500).await;
    }
    Ok(())
}

/// Clears the slots of dead shared holders; returns how many are alive. On several
/// disks a holder's mode block is read on every disk (a majority must answer) and the
/// holder is judged by the SHARED mode block of the newest generation any of them shows.
async fn clear_dead_shared<S: LeaseDisks, C: Clock, L: Disk, O: HostObserver>(
    disk: &S,
    clock: &C,
    host: &HostContext<'_, L, O>,
    res: &ResourceParams,
    g: Geometry,
    holders: &[u64],
) -> Result<usize, LeaseError> {
    let mut live = 0;
    for &h in holders {
        let answers = gather(disk, |i| {
            let (d, off) = disk.replica(i, res.disk_offset);
            read_slot_one(d, slot_offset(off, g, h), res, g)
        })
        .await;
        if !disk.quorum(count_ok(&answers)) {
            return Err(step_error(&answers, missing(IoOp::DblockRead)));
        }
        let Some(mb) = answers
            .iter()
            .filter_map(Answer::ok)
            .map(|(_, mb)| *mb)
            .filter(|mb| mb.is_shared() && mb.generation != 0)
            .max_by_key(|mb| mb.generation)
        else {
            continue;
        };
        #[cfg(feature = "sim")]
        let from_cache = host.observer.judges_shared_from_cache();
        #[cfg(not(feature = "sim"))]
        let from_cache = false;
        let alive = if from_cache {
            HostMonitor::sanlock_host_live(
                host.observer.observation(h),
                mb.generation,
                clock.now_s(),
                host.lockspace.watchdog_fire,
            )
        } else {
            let delta = read_host_record(host.lockspace_disk, host.lockspace, h).await?;
            HostMonitor::shared_holder_live(
                host.observer.observation(h),
                &delta,
                mb.generation,
                clock.now_s(),
                host.lockspace.watchdog_fire,
            )
        };
        if alive {
            live += 1;
            continue;
        }
        let zero = vec![0u8; g.sector_bytes() as usize];
        let zero = &zero;
        write_each(
            disk,
            false,
            |i| {
                let (d, off) = disk.replica(i, res.disk_offset);
                write_sector(d, slot_offset(off, g, h), zero, res, IoOp::DblockWrite)
            },
            missing(IoOp::DblockWrite),
        )
        .await?;
    }
    Ok(live)
}

/// Clears the leader if we wrote it and it still is exactly `last` (sanlock
/// `paxos_lease_release`). Returns the leader written, or `None` when another host was the
/// writer (then our RELEASED dblock flag is what frees the lease).
#[allow(clippy::too_many_arguments)]
async fn release_leader<S: LeaseDisks, C: Clock>(
    disk: &S,
    clock: &C,
    res: &ResourceParams,
    g: Geometry,
    host_id: u64,
    generation: u64,
    last: &LeaderRecord,
    rename: Option<&Name>,
) -> Result<Option<LeaderRecord>, LeaseError> {
    let leader = read_leader_at(disk, res, g).await?;
    if leader.write_id != host_id {
        return Ok(None);
    }
    if leader.lver != last.lver {
        return Err(LeaseError::ReleaseLver);
    }
    if leader.timestamp == 0
        || leader.owner_id != host_id
        || leader.owner_generation != generation
        || leader.encode() != last.encode()
    {
        return Err(LeaseError::ReleaseOwner);
    }
    let mut l = leader;
    l.timestamp = 0;
    l.write_id = host_id;
    l.write_generation = generation;
    l.write_timestamp = clock.now_s();
    l.flags &= !LFL_SHORT_HOLD;
    if let Some(name) = rename {
        l.resource_name = *name;
    }
    l.seal();
    write_leader(disk, res, g, &l).await?;
    Ok(Some(l))
}

/// Clears the leader if it is ours ([`release_leader`]), and only then writes our slot with
/// the RELEASED flag and `mode`.
///
/// sanlock writes the RELEASED flag first. But the flag lets other hosts ballot for the
/// next lver while our leader write may still be in flight, and a late-landing leader
/// write then takes the lease back to an older lver (found by the simulator). Writing the
/// flag after the leader write completed closes that window; the on-disk states are the
/// same ones sanlock produces.
#[allow(clippy::too_many_arguments)]
async fn release_then_flag<S: LeaseDisks, C: Clock>(
    disk: &S,
    clock: &C,
    res: &ResourceParams,
    g: Geometry,
    host_id: u64,
    generation: u64,
    last: &LeaderRecord,
    dblock: &PaxosDblock,
    mode: &ModeBlock,
    rename: Option<&Name>,
) -> Result<Option<LeaderRecord>, LeaseError> {
    let cleared = release_leader(disk, clock, res, g, host_id, generation, last, rename).await;
    let mut d = *dblock;
    d.flags |= DBLOCK_FL_RELEASED;
    let flagged = write_slot(disk, res, g, host_id, &d, mode).await;
    let cleared = cleared?;
    flagged?;
    Ok(cleared)
}

/// The LVB sector, on the lease's first disk only (as sanlock keeps it).
async fn read_lvb<S: LeaseDisks>(
    disks: &S,
    res: &ResourceParams,
    g: Geometry,
) -> Result<Vec<u8>, LeaseError> {
    let (disk, offset) = disks.replica(0, res.disk_offset);
    disk.read(
        offset + lvb_offset(g),
        g.sector_bytes() as usize,
        res.io_ms(),
    )
    .await
    .map(|b| b.to_vec())
    .map_err(|e| LeaseError::io(IoOp::Other, e))
}

async fn write_lvb<S: LeaseDisks>(disks: &S, token: &Token) -> Result<(), LeaseError> {
    let Some(lvb) = &token.lvb else { return Ok(()) };
    let g = token.resource.geometry;
    let (disk, offset) = disks.replica(0, token.resource.disk_offset);
    disk.write(offset + lvb_offset(g), lvb, token.resource.io_ms())
        .await
        .map_err(|e| LeaseError::io(IoOp::Other, e))
}

/// Acquires a resource lease (sanlock `acquire_token` disk path).
///
/// Exclusive: a ballot for `lver + 1`; then, if the ballot saw SHARED mode blocks of other
/// hosts, dead holders' slots are cleared and any live one makes us release and return
/// [`LeaseError::Again`]. Shared: an exclusive ballot with `LFL_SHORT_HOLD`, then our slot
/// gets a SHARED mode block (dblock marked RELEASED) and the leader is released; a
/// SHORT_HOLD owner is retried `sh_retries` times with random 0–1 s sleeps before
/// [`LeaseError::ShRetry`].
///
/// Stricter than sanlock where its leader cache can fall behind under slow writes (see
/// `docs/algorithms.md`): phase 1 keeps our slot's accepted value for the same lver, a
/// leader behind the dblocks is repaired by balloting the newest lver, and a decision of
/// an earlier acquire of ours is committed but never returned as a new holding.
///
/// Errors: [`LeaseError::IdLive`] (owner alive), [`LeaseError::OwnedRetry`] (with
/// `owner_nowait`), [`LeaseError::Owned`] / [`LeaseError::Other`] (someone else won),
/// [`LeaseError::AcquireLver`], [`LeaseError::LvbUnsupported`] (LVB on a geometry whose LVB
/// sector is outside the area), I/O and format errors.
pub async fn acquire<S: LeaseDisks, C: Clock, L: Disk, O: HostObserver>(
    disk: &S,
    clock: &C,
    host: &HostContext<'_, L, O>,
    res: &ResourceParams,
    opts: &AcquireOptions,
) -> Result<Token, LeaseError> {
    if opts.lvb && !lvb_inside_area(res.geometry) {
        return Err(LeaseError::LvbUnsupported);
    }
    let host_id = host.lockspace.host_id;
    let gen = host.generation;
    let shared = opts.mode == Mode::Shared;
    #[cfg(feature = "sim")]
    let hold = opts.planted_bug != Some(PlantedBug::NoSharedHold);
    #[cfg(not(feature = "sim"))]
    let hold = true;
    if shared && hold {
        wait_shared_hold(clock, host).await?;
    }
    let mut retries = 0;
    let c = loop {
        let mut slot = None;
        match paxos_acquire(
            disk,
            clock,
            host,
            res,
            opts,
            ModeBlock::default(),
            shared,
            &mut slot,
        )
        .await
        {
            Ok(c) => break c,
            Err(f) => {
                let short = f.leader.is_some_and(|l| l.flags & LFL_SHORT_HOLD != 0);
                let contended = matches!(
                    f.err,
                    LeaseError::IdLive { .. } | LeaseError::Owned { .. } | LeaseError::Other { .. }
                );
                if shared && short && contended {
                    if retries < opts.sh_retries {
                        retries += 1;
                        clock.sleep_ms(clock.random_below(1000)).await;
                        continue;
                    }
                    return Err(LeaseError::ShRetry);
                }
                return Err(f.err);
            }
        }
    };
    let g = c.geometry;
    if opts.lvb && !lvb_inside_area(g) {
        return Err(LeaseError::LvbUnsupported);
    }
    let mut resource = res.clone();
    resource.geometry = g;
    let mut token = Token {
        resource,
        host_id,
        generation: gen,
        mode: opts.mode,
        leader: c.leader,
        dblock: c.dblock,
        lvb: None,
        lvb_dirty: false,
        erase_all: false,
    };
    if shared {
        let d = c.dblock;
        let mb = ModeBlock {
            flags: MBLOCK_SHARED,
            pad: 0,
            generation: gen,
        };
        let step = async {
            write_slot(disk, &token.resource, g, host_id, &d, &mb).await?;
            release_then_flag(
                disk,
                clock,
                &token.resource,
                g,
                host_id,
                gen,
                &c.leader,
                &d,
                &mb,
                None,
            )
            .await
        };
        if let Err(e) = step.await {
            // Undo: neither shared nor owner.
            let mut exc = token.clone();
            exc.mode = Mode::Exclusive;
            let _ = release(disk, clock, &exc).await;
            return Err(e);
        }
        token.dblock.flags |= DBLOCK_FL_RELEASED;
    } else if !c.shared.is_empty() {
        let live = clear_dead_shared(disk, clock, host, &token.resource, g, &c.shared).await;
        match live {
            Ok(0) => {}
            Ok(_) => {
                release(disk, clock, &token).await?;
                return Err(LeaseError::Again);
            }
            Err(e) => {
                let _ = release(disk, clock, &token).await;
                return Err(e);
            }
        }
    }
    if opts.lvb {
        match read_lvb(disk, &token.resource, g).await {
            Ok(b) => token.lvb = Some(b),
            Err(_) => token.lvb = Some(vec![0; g.sector_bytes() as usize]),
        }
    }
    Ok(token)
}

/// Releases a lease (sanlock `_release_token` + `paxos_lease_release`).
///
/// Exclusive: write the LVB if changed; re-read the leader and clear it (timestamp 0,
/// SHORT_HOLD off) only if we wrote it and it is unchanged; then rewrite our slot with the
/// RELEASED flag and a zero mode block. If another host committed us as owner, the
/// RELEASED flag alone frees the lease, so a newer leader is never clobbered; writing the
/// flag only after the leader write completed means nobody ballots past a leader write of
/// ours that is still in flight (sanlock writes the flag first). Shared: rewrite our slot
/// without the SHARED mode block. A token with `erase_all` gets both treatments.
///
/// Errors: [`LeaseError::ReleaseLver`] / [`LeaseError::ReleaseOwner`] when the leader
/// changed under us (the slot is still marked released), I/O errors (retry later).
pub async fn release<S: LeaseDisks, C: Clock>(
    disk: &S,
    clock: &C,
    token: &Token,
) -> Result<(), LeaseError> {
    release_renamed(disk, clock, token, None).await
}

/// [`release`], and when the leader is cleared by us (exclusive or half-converted token)
/// it is written with resource name `rename` (sanlock `SANLK_REL_RENAME`; lvmlockd renames
/// a freed lease at vgremove). A shared release, or a leader last written by another host,
/// keeps its name, exactly as sanlock does.
pub async fn release_renamed<S: LeaseDisks, C: Clock>(
    disk: &S,
    clock: &C,
    token: &Token,
    rename: Option<&Name>,
) -> Result<(), LeaseError> {
    let g = token.resource.geometry;
    let mut d = token.dblock;
    d.flags |= DBLOCK_FL_RELEASED;
    let zero = ModeBlock::default();
    let res = &token.resource;
    let (id, gen) = (token.host_id, token.generation);
    let last = &token.leader;
    if token.erase_all {
        return match release_then_flag(disk, clock, res, g, id, gen, last, &d, &zero, rename).await
        {
            Ok(_) | Err(LeaseError::ReleaseOwner | LeaseError::ReleaseLver) => Ok(()),
            Err(e) => Err(e),
        };
    }
    match token.mode {
        Mode::Shared => write_slot(disk, res, g, id, &d, &zero).await,
        Mode::Exclusive => {
            if token.lvb_dirty {
                write_lvb(disk, token).await?;
            }
            release_then_flag(disk, clock, res, g, id, gen, last, &d, &zero, rename).await?;
            Ok(())
        }
    }
}

/// Converts a held lease between modes (sanlock `convert_token`).
///
/// ex→sh: write the LVB if changed, write our SHARED mode block (dblock RELEASED), release
/// the leader. The token is shared from the call on: if this fails half-way the token
/// stays `Shared` with `erase_all` set, so that its release clears owner and mode block. sh→ex: a ballot that keeps our SHARED mode block, then live shared holders
/// make it release the leader and return [`LeaseError::Again`] (we stay shared); otherwise
/// our mode block is cleared. [`LeaseError::Already`] when already in `to`.
pub async fn convert<S: LeaseDisks, C: Clock, L: Disk, O: HostObserver>(
    disk: &S,
    clock: &C,
    host: &HostContext<'_, L, O>,
    token: &mut Token,
    to: Mode,
    owner_nowait: bool,
) -> Result<(), LeaseError> {
    if token.mode == to {
        return Err(LeaseError::Already);
    }
    if to == Mode::Shared {
        // While we wait the lease stays exclusive: nothing is changed on disk yet.
        wait_shared_hold(clock, host).await?;
    }
    let g = token.resource.geometry;
    let host_id = token.host_id;
    let gen = token.generation;
    let our_sh = ModeBlock {
        flags: MBLOCK_SHARED,
        pad: 0,
        generation: gen,
    };
    match to {
        Mode::Shared => {
            // From here on the lease is at most shared, whatever happens on disk.
            token.mode = Mode::Shared;
            let lvb_ok = if token.lvb_dirty {
                write_lvb(disk, token).await
            } else {
                Ok(())
            };
            token.lvb_dirty = false;
            let d = token.dblock;
            let step = async {
                lvb_ok?;
                write_slot(disk, &token.resource, g, host_id, &d, &our_sh).await?;
                let last = &token.leader;
                release_then_flag(
                    disk,
                    clock,
                    &token.resource,
                    g,
                    host_id,
                    gen,
                    last,
                    &d,
                    &our_sh,
                    None,
                )
                .await
            };
            match step.await {
                Ok(_) => {
                    token.dblock.flags |= DBLOCK_FL_RELEASED;
                    Ok(())
                }
                Err(e) => {
                    token.erase_all = true;
                    Err(e)
                }
            }
        }
        Mode::Exclusive => {
            let opts = AcquireOptions {
                owner_nowait,
                ..AcquireOptions::default()
            };
            let mut slot = None;
            let r = paxos_acquire(
                disk,
                clock,
                host,
                &token.resource,
                &opts,
                our_sh,
                false,
                &mut slot,
            )
            .await;
            // Our slot now holds the ballot's dblock: any later write of our slot (the
            // shared release) must keep it, or an accepted value could be forgotten.
            if let Some(d) = slot {
                token.dblock = d;
            }
            let c = r.map_err(|f| f.err)?;
            token.dblock = c.dblock;
            let live = clear_dead_shared(disk, clock, host, &token.resource, g, &c.shared).await;
            let live = match live {
                Ok(n) => n,
                Err(e) => {
                    if release_leader(
                        disk,
                        clock,
                        &token.resource,
                        g,
                        host_id,
                        gen,
                        &c.leader,
                        None,
                    )
                    .await
                    .is_err()
                    {
                        token.leader = c.leader;
                        token.erase_all = true;
                    }
                    return Err(e);
                }
            };
            if live > 0 {
                if let Err(e) = release_leader(
                    disk,
                    clock,
                    &token.resource,
                    g,
                    host_id,
                    gen,
                    &c.leader,
                    None,
                )
                .await
                {
                    token.leader = c.leader;
                    token.erase_all = true;
                    return Err(e);
                }
                return Err(LeaseError::Again);
            }
            token.leader = c.leader;
            token.dblock = c.dblock;
            token.mode = Mode::Exclusive;
            // We hold ex now; failing to clear our SHARED mode block only leaves a stale
            // marker that our release clears.
            let _ = write_slot(
                disk,
                &token.resource,
                g,
                host_id,
                &c.dblock,
                &ModeBlock::default(),
            )
            .await;
            Ok(())
        }
    }
}

/// The request record, on the lease's first disk only (as sanlock keeps it).
async fn read_request<S: LeaseDisks>(
    disks: &S,
    res: &ResourceParams,
    g: Geometry,
) -> Result<RequestRecord, LeaseError> {
    let (disk, offset) = disks.replica(0, res.disk_offset);
    let buf = disk
        .read(
            offset + REQUEST_SECTOR * g.sector_bytes(),
            g.sector_bytes() as usize,
            res.io_ms(),
        )
        .await
        .map_err(|e| LeaseError::io(IoOp::Other, e))?;
    let rr = RequestRecord::decode(&buf)?;
    rr.verify()?;
    Ok(rr)
}

/// Writes a request for the lease (sanlock `request_token`): the requested lver must be
/// above the held one ([`LeaseError::RequestOld`]) and not below a recorded request
/// ([`LeaseError::RequestLver`]). `Exact(0)` with force mode 0 clears the record.
pub async fn request<S: LeaseDisks>(
    disk: &S,
    res: &ResourceParams,
    lver: RequestLver,
    force_mode: u32,
) -> Result<RequestOutcome, LeaseError> {
    let g = res.geometry;
    let leader = read_leader_at(disk, res, g).await?;
    // A CAW lease's sectors are only ever changed with COMPARE AND WRITE by its owners:
    // no plain write to its request sector either.
    leader.check_writable(LeaderKind::Paxos)?;
    let owner_id = (leader.timestamp != 0).then_some(leader.owner_id);
    let (first, offset) = disk.replica(0, res.disk_offset);
    let off = offset + REQUEST_SECTOR * g.sector_bytes();
    let write = |rr: RequestRecord| async move {
        let mut buf = vec![0u8; g.sector_bytes() as usize];
        rr.encode_into(&mut buf);
        first
            .write(off, &buf, res.io_ms())
            .await
            .map_err(|e| LeaseError::io(IoOp::Other, e))
    };
    let want = match lver {
        RequestLver::Exact(0) if force_mode == 0 => {
            write(RequestRecord::FRESH).await?;
            return Ok(RequestOutcome { lver: 0, owner_id });
        }
        RequestLver::Exact(v) => v,
        RequestLver::Next => leader
            .lver
            .checked_add(1)
            .ok_or(LeaseError::Invalid("lease version exhausted"))?,
    };
    if want <= leader.lver {
        return Err(LeaseError::RequestOld);
    }
    let rr = read_request(disk, res, g).await?;
    if want < rr.lver {
        return Err(LeaseError::RequestLver);
    }
    write(RequestRecord {
        lver: want,
        force_mode,
        ..RequestRecord::FRESH
    })
    .await?;
    Ok(RequestOutcome {
        lver: want,
        owner_id,
    })
}

/// Examines a held lease for a request against it: returns the force mode
/// (`REQ_FORCE`/`REQ_GRACEFUL`) when the request record asks for an lver above ours.
pub async fn examine<S: LeaseDisks>(disk: &S, token: &Token) -> Result<Option<u32>, LeaseError> {
    let rr = read_request(disk, &token.resource, token.resource.geometry).await?;
    if rr.force_mode != 0 && rr.lver > token.lver() {
        return Ok(Some(rr.force_mode));
    }
    Ok(None)
}

/// The current holders of a lease (sanlock `read_resource_owners`): the leader owner when
/// held, plus every slot with a SHARED mode block (on several disks: on any disk read; a
/// majority must be read).
pub async fn read_owners<S: LeaseDisks>(
    disk: &S,
    res: &ResourceParams,
) -> Result<(LeaderRecord, Vec<Owner>), LeaseError> {
    let leader = read_leader_at(disk, res, res.geometry).await?;
    let g = leader_geometry(&leader, res)?;
    let answers = read_slots_each(disk, res, g, (leader.num_hosts, SlotCheck::ModeBlocks)).await;
    if !disk.quorum(count_ok(&answers)) {
        return Err(step_error(&answers, missing(IoOp::DblockRead)));
    }
    let mut owners = Vec::new();
    if leader.timestamp != 0 {
        owners.push(Owner {
            host_id: leader.owner_id,
            generation: leader.owner_generation,
            mode: Mode::Exclusive,
        });
    }
    let mut shared: Vec<(u64, u64)> = Vec::new();
    for (h, gen) in answers.iter().filter_map(Answer::ok).flatten() {
        match shared.iter_mut().find(|(x, _)| x == h) {
            Some(seen) => seen.1 = seen.1.max(*gen),
            None => shared.push((*h, *gen)),
        }
    }
    shared.sort_unstable();
    owners.extend(shared.into_iter().map(|(host_id, generation)| Owner {
        host_id,
        generation,
        mode: Mode::Shared,
    }));
    Ok((leader, owners))
}
