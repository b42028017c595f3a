//! Branch tests of disk Paxos over an instant in-memory disk: free lease, held by a live
//! host, held by a dead host, OWNER_NOWAIT, ballot collisions, lver mismatch, shared
//! holders live and dead, SHORT_HOLD retries, converts, release rules, request/examine
//! and the LVB.

use std::cell::RefCell;

use disk_format::area::{dblock_sector, LVB_SECTOR};
use disk_format::dblock::{decode_dblock_sector, encode_dblock_sector, MBLOCK_SHARED};
use disk_format::leader::LFL_SHORT_HOLD;
use disk_format::request::REQ_FORCE;
use disk_format::{Geometry, LeaderRecord, ModeBlock, PaxosDblock};

use crate::delta::{self, DeltaState, LockspaceParams, RenewInput};
use crate::error::LeaseError;
use crate::exec::block_on;
use crate::io::Clock;
use crate::monitor::{HostMonitor, HostObserver};
#[cfg(feature = "sim")]
use crate::paxos::PlantedBug;
use crate::paxos::{self, AcquireOptions, HostContext, Mode, RequestLver, ResourceParams};
use crate::testutil::{ls_params, res_params, MemDisk, TestClock, RES_OFFSET};

/// One simulated host: its lockspace membership and monitor.
pub(crate) struct Host {
    p: LockspaceParams,
    st: DeltaState,
    mon: RefCell<HostMonitor>,
}

impl Host {
    pub(crate) fn join(d: &MemDisk, c: &TestClock, id: u64) -> Host {
        let p = ls_params(id, &format!("host{id}"));
        let st = block_on(delta::acquire(d, c, &p)).unwrap();
        Host {
            mon: RefCell::new(HostMonitor::new(id, p.watchdog_fire)),
            p,
            st,
        }
    }

    /// Renews and feeds the monitor, as the lockspace thread does.
    pub(crate) fn renew(&mut self, d: &MemDisk, c: &TestClock) {
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

    pub(crate) fn ctx<'a>(
        &'a self,
        d: &'a MemDisk,
    ) -> HostContext<'a, MemDisk, RefCell<HostMonitor>> {
        HostContext {
            lockspace_disk: d,
            lockspace: &self.p,
            generation: self.st.generation(),
            observer: &self.mon,
        }
    }

    fn acquire(
        &self,
        d: &MemDisk,
        c: &TestClock,
        opts: &AcquireOptions,
    ) -> Result<paxos::Token, LeaseError> {
        block_on(paxos::acquire(d, c, &self.ctx(d), &res_params(), opts))
    }
}

pub(crate) fn ex() -> AcquireOptions {
    AcquireOptions::default()
}

pub(crate) fn sh() -> AcquireOptions {
    AcquireOptions {
        mode: Mode::Shared,
        ..AcquireOptions::default()
    }
}

pub(crate) fn leader(d: &MemDisk) -> LeaderRecord {
    LeaderRecord::decode(&d.get(RES_OFFSET, 512)).unwrap()
}

pub(crate) fn slot(d: &MemDisk, host_id: u64) -> (PaxosDblock, ModeBlock) {
    decode_dblock_sector(&d.get(RES_OFFSET + dblock_sector(host_id) * 512, 512)).unwrap()
}

pub(crate) fn advance(c: &TestClock, s: u64) {
    c.now_ms.set(c.now_ms.get() + s * 1000);
}

/// Host A (1) and B (2) in the lockspace, each having watched the other renew once.
pub(crate) fn two_hosts() -> (MemDisk, TestClock, Host, Host) {
    let d = MemDisk::formatted();
    let c = TestClock::at_s(1000);
    let mut a = Host::join(&d, &c, 1);
    let mut b = Host::join(&d, &c, 2);
    for _ in 0..2 {
        advance(&c, 2);
        a.renew(&d, &c);
        b.renew(&d, &c);
    }
    (d, c, a, b)
}

#[test]
fn free_lease_acquire_and_release() {
    let (d, c, a, _b) = two_hosts();
    let t = a.acquire(&d, &c, &ex()).unwrap();
    assert_eq!(t.lver(), 1);
    let l = leader(&d);
    assert_eq!((l.lver, l.owner_id, l.owner_generation), (1, 1, 1));
    assert_eq!(l.write_id, 1);
    assert_ne!(l.timestamp, 0);
    assert_eq!(l.flags & LFL_SHORT_HOLD, 0);
    let (db, _) = slot(&d, 1);
    assert_eq!((db.mbal, db.bal, db.inp, db.lver), (1, 1, 1, 1));
    block_on(paxos::release(&d, &c, &t)).unwrap();
    let l = leader(&d);
    assert_eq!(l.timestamp, 0);
    assert_eq!(l.lver, 1);
    assert!(slot(&d, 1).0.is_released());
    // Acquiring again takes the next version, with mbal above the largest seen.
    let t2 = a.acquire(&d, &c, &ex()).unwrap();
    assert_eq!(t2.lver(), 2);
    assert_eq!(t2.dblock.mbal, 2001);
}

#[test]
fn held_by_live_host_is_idlive() {
    let (d, c, mut a, mut b) = two_hosts();
    b.acquire(&d, &c, &ex()).unwrap();
    advance(&c, 2);
    b.renew(&d, &c);
    a.renew(&d, &c);
    let e = a.acquire(&d, &c, &ex()).unwrap_err();
    assert_eq!(
        e,
        LeaseError::IdLive {
            owner_id: 2,
            owner_generation: 1
        }
    );
    assert_eq!(e.sanlk_code(), -243);
    assert_eq!(leader(&d).owner_id, 2);
}

#[test]
fn owner_nowait_before_liveness_is_known() {
    let d = MemDisk::formatted();
    let c = TestClock::at_s(1000);
    let a = Host::join(&d, &c, 1);
    let b = Host::join(&d, &c, 2);
    b.acquire(&d, &c, &ex()).unwrap();
    let opts = AcquireOptions {
        owner_nowait: true,
        ..ex()
    };
    let e = a.acquire(&d, &c, &opts).unwrap_err();
    assert_eq!(e.sanlk_code(), -247);
}

#[test]
fn held_by_dead_host_waits_host_dead_then_takes_it() {
    let (d, c, mut a, b) = two_hosts();
    b.acquire(&d, &c, &ex()).unwrap();
    // B stops renewing; A keeps watching for a while.
    for _ in 0..3 {
        advance(&c, 2);
        a.renew(&d, &c);
    }
    let last_live = a.mon.borrow().observation(2).unwrap().last_live_s;
    let slept = c.slept_ms.get();
    let t = a.acquire(&d, &c, &ex()).unwrap();
    // host_dead = 8D + W = 18 s after the last change A saw.
    assert!(c.now_s() - last_live > 18);
    assert!(c.slept_ms.get() - slept >= 10_000, "it waited");
    assert_eq!(t.lver(), 2);
    assert_eq!(leader(&d).owner_id, 1);
}

#[cfg(feature = "sim")]
#[test]
fn planted_no_host_dead_wait_takes_a_live_looking_owner_early() {
    let (d, c, mut a, b) = two_hosts();
    b.acquire(&d, &c, &ex()).unwrap();
    // B misses one renewal (a pause): A's monitor sees no change at its last check.
    for _ in 0..2 {
        advance(&c, 2);
        a.renew(&d, &c);
    }
    let opts = AcquireOptions {
        planted_bug: Some(PlantedBug::NoHostDeadWait),
        ..ex()
    };
    let slept = c.slept_ms.get();
    a.acquire(&d, &c, &opts).unwrap();
    assert!(c.slept_ms.get() - slept <= 1_000);
}

#[test]
fn owner_with_newer_generation_is_gone() {
    let (d, c, a, b) = two_hosts();
    b.acquire(&d, &c, &ex()).unwrap();
    // B restarts: its host_id is re-acquired with generation 2.
    block_on(delta::release(&d, &b.p, &b.st)).unwrap();
    block_on(delta::acquire(&d, &c, &b.p)).unwrap();
    let slept = c.slept_ms.get();
    let t = a.acquire(&d, &c, &ex()).unwrap();
    assert_eq!(t.lver(), 2);
    assert_eq!(c.slept_ms.get(), slept);
}

#[test]
fn ballot_collision_backs_off_with_a_larger_mbal() {
    let (d, c, a, _b) = two_hosts();
    // Host 2 writes phase 1 with mbal 2 right after our phase-1 write.
    let mut theirs = PaxosDblock {
        mbal: 2,
        lver: 1,
        ..Default::default()
    };
    theirs.seal();
    let mut sector = vec![0u8; 512];
    encode_dblock_sector(&theirs, &ModeBlock::default(), &mut sector);
    d.inject_after(2, RES_OFFSET + dblock_sector(2) * 512, sector);
    let t = a.acquire(&d, &c, &ex()).unwrap();
    assert_eq!(t.dblock.mbal, 1 + 2000);
    assert_eq!(t.lver(), 1);
    assert_eq!(leader(&d).owner_id, 1);
}

#[test]
fn ballot_collision_adopts_an_accepted_value() {
    let (d, c, a, _b) = two_hosts();
    // Host 2 has already accepted itself at a larger ballot.
    let mut theirs = PaxosDblock {
        mbal: 2,
        bal: 2,
        inp: 2,
        inp2: 1,
        inp3: 77,
        lver: 1,
        ..Default::default()
    };
    theirs.seal();
    let mut sector = vec![0u8; 512];
    encode_dblock_sector(&theirs, &ModeBlock::default(), &mut sector);
    d.inject_after(2, RES_OFFSET + dblock_sector(2) * 512, sector);
    let e = a.acquire(&d, &c, &ex()).unwrap_err();
    assert_eq!(
        e,
        LeaseError::Other {
            owner_id: 2,
            owner_generation: 1
        }
    );
    let l = leader(&d);
    assert_eq!((l.lver, l.owner_id, l.timestamp, l.write_id), (1, 2, 77, 1));
}

#[cfg(feature = "sim")]
#[test]
fn planted_skip_phase2_commits_after_phase_one() {
    let (d, c, a, _b) = two_hosts();
    let opts = AcquireOptions {
        planted_bug: Some(PlantedBug::SkipPhase2),
        ..ex()
    };
    let ops = d.ops();
    a.acquire(&d, &c, &opts).unwrap();
    // read area, phase-1 write and read, the known-hosts confirmations (after phase 1 and
    // before the commit), commit: no phase 2.
    assert_eq!(d.ops() - ops, 6);
    assert_eq!(slot(&d, 1).0.bal, 0);
}

#[test]
fn lver_mismatch() {
    let (d, c, a, _b) = two_hosts();
    let opts = AcquireOptions {
        lver: Some(3),
        ..ex()
    };
    let e = a.acquire(&d, &c, &opts).unwrap_err();
    assert_eq!(
        e,
        LeaseError::AcquireLver {
            on_disk: 0,
            requested: 3
        }
    );
    assert_eq!(e.sanlk_code(), -240);
    let ok = AcquireOptions {
        lver: Some(0),
        ..ex()
    };
    let t = a.acquire(&d, &c, &ok).unwrap();
    // The leader moving on under a holder makes its release fail.
    let mut l = leader(&d);
    l.lver = 9;
    l.seal();
    d.put(RES_OFFSET, &l.encode());
    let e = block_on(paxos::release(&d, &c, &t)).unwrap_err();
    assert_eq!(e, LeaseError::ReleaseLver);
}

#[test]
fn shared_holders_live_block_exclusive_and_dead_ones_are_cleared() {
    let (d, c, mut a, mut b) = two_hosts();
    let ta = a.acquire(&d, &c, &sh()).unwrap();
    assert_eq!(ta.mode, Mode::Shared);
    assert_eq!(
        leader(&d).timestamp,
        0,
        "the leader is released after a shared acquire"
    );
    let (db, mb) = slot(&d, 1);
    assert!(db.is_released());
    assert_eq!((mb.flags, mb.generation), (MBLOCK_SHARED, 1));
    // A second shared holder is fine.
    let tb = b.acquire(&d, &c, &sh()).unwrap();
    let (_, owners) = block_on(paxos::read_owners(&d, &res_params())).unwrap();
    assert_eq!(owners.len(), 2);
    block_on(paxos::release(&d, &c, &tb)).unwrap();
    // A is alive: B cannot have it exclusive.
    advance(&c, 2);
    a.renew(&d, &c);
    b.renew(&d, &c);
    let e = b.acquire(&d, &c, &ex()).unwrap_err();
    assert_eq!(e, LeaseError::Again);
    assert_eq!(e.sanlk_code(), -11);
    assert!(slot(&d, 1).1.is_shared());
    assert_eq!(leader(&d).timestamp, 0);
    // A's host dies and restarts (new generation): its shared lease is gone.
    block_on(delta::acquire(&d, &c, &ls_params(1, "host1-reborn"))).unwrap_or_else(|_| {
        panic!("re-acquire of host 1");
    });
    let t = b.acquire(&d, &c, &ex()).unwrap();
    assert_eq!(t.mode, Mode::Exclusive);
    assert!(!slot(&d, 1).1.is_shared(), "dead holder's slot cleared");
    drop(ta);
}

#[test]
fn shared_acquire_retries_a_short_hold_then_gives_up() {
    let (d, c, mut a, mut b) = two_hosts();
    a.acquire(&d, &c, &ex()).unwrap();
    let mut l = leader(&d);
    l.flags |= LFL_SHORT_HOLD;
    l.seal();
    d.put(RES_OFFSET, &l.encode());
    advance(&c, 2);
    a.renew(&d, &c);
    b.renew(&d, &c);
    let opts = AcquireOptions {
        sh_retries: 2,
        ..sh()
    };
    let e = b.acquire(&d, &c, &opts).unwrap_err();
    assert_eq!(e, LeaseError::ShRetry);
    assert_eq!(e.sanlk_code(), -246);
}

#[test]
fn convert_both_ways() {
    let (d, c, a, _b) = two_hosts();
    let mut t = a.acquire(&d, &c, &ex()).unwrap();
    let e = block_on(paxos::convert(
        &d,
        &c,
        &a.ctx(&d),
        &mut t,
        Mode::Exclusive,
        false,
    ));
    assert_eq!(e.unwrap_err().sanlk_code(), -114);
    block_on(paxos::convert(
        &d,
        &c,
        &a.ctx(&d),
        &mut t,
        Mode::Shared,
        false,
    ))
    .unwrap();
    assert_eq!(t.mode, Mode::Shared);
    assert_eq!(leader(&d).timestamp, 0);
    assert!(slot(&d, 1).1.is_shared());
    block_on(paxos::convert(
        &d,
        &c,
        &a.ctx(&d),
        &mut t,
        Mode::Exclusive,
        false,
    ))
    .unwrap();
    assert_eq!(t.mode, Mode::Exclusive);
    assert_eq!(t.lver(), 2);
    assert!(!slot(&d, 1).1.is_shared());
    let l = leader(&d);
    assert_eq!((l.lver, l.owner_id), (2, 1));
    assert_ne!(l.timestamp, 0);
}

#[test]
fn release_leaves_a_leader_written_by_another_host() {
    let (d, c, mut a, mut b) = two_hosts();
    let t = a.acquire(&d, &c, &ex()).unwrap();
    // Host 2 finished the same ballot and rewrote the leader with itself as writer.
    let mut l = leader(&d);
    l.write_id = 2;
    l.seal();
    d.put(RES_OFFSET, &l.encode());
    block_on(paxos::release(&d, &c, &t)).unwrap();
    assert_eq!(leader(&d), l, "leader untouched");
    assert!(slot(&d, 1).0.is_released());
    // B sees A alive, but A's dblock says RELEASED: B may run a ballot.
    advance(&c, 2);
    a.renew(&d, &c);
    b.renew(&d, &c);
    let tb = b.acquire(&d, &c, &ex()).unwrap();
    assert_eq!(tb.lver(), 2);
}

#[test]
fn release_renamed_renames_only_a_leader_we_clear() {
    let (d, c, a, _b) = two_hosts();
    let new_name = disk_format::Name::new("#unused").unwrap();
    // Exclusive: the cleared leader carries the new name (lvmlockd's vgremove).
    let t = a.acquire(&d, &c, &ex()).unwrap();
    block_on(paxos::release_renamed(&d, &c, &t, Some(&new_name))).unwrap();
    let l = leader(&d);
    assert_eq!(l.resource_name, new_name);
    assert_eq!((l.timestamp, l.lver), (0, 1));
    assert_eq!(
        l.checksum,
        l.computed_checksum(),
        "renamed leader is sealed"
    );
    // Shared: the leader is not ours to rewrite, so the name stays.
    let res = res_params();
    let mut ctx_res = res.clone();
    ctx_res.resource_name = new_name;
    let host = a.ctx(&d);
    let ts = block_on(paxos::acquire(&d, &c, &host, &ctx_res, &sh())).unwrap();
    let before = leader(&d);
    let other = disk_format::Name::new("other").unwrap();
    block_on(paxos::release_renamed(&d, &c, &ts, Some(&other))).unwrap();
    assert_eq!(leader(&d).resource_name, before.resource_name);
}

#[test]
fn request_and_examine() {
    let (d, c, a, _b) = two_hosts();
    let t = a.acquire(&d, &c, &ex()).unwrap();
    let res = res_params();
    assert_eq!(block_on(paxos::examine(&d, &t)).unwrap(), None);
    let out = block_on(paxos::request(&d, &res, RequestLver::Next, REQ_FORCE)).unwrap();
    assert_eq!(out.lver, 2);
    assert_eq!(out.owner_id, Some(1));
    assert_eq!(block_on(paxos::examine(&d, &t)).unwrap(), Some(REQ_FORCE));
    let e = block_on(paxos::request(&d, &res, RequestLver::Exact(1), REQ_FORCE)).unwrap_err();
    assert_eq!(e.sanlk_code(), -272);
    block_on(paxos::request(&d, &res, RequestLver::Exact(5), REQ_FORCE)).unwrap();
    let e = block_on(paxos::request(&d, &res, RequestLver::Exact(3), REQ_FORCE)).unwrap_err();
    assert_eq!(e.sanlk_code(), -273);
    block_on(paxos::request(&d, &res, RequestLver::Exact(0), 0)).unwrap();
    assert_eq!(block_on(paxos::examine(&d, &t)).unwrap(), None);
}

#[test]
fn lvb_round_trip_and_unsafe_geometry_refused() {
    let (d, c, a, _b) = two_hosts();
    let opts = AcquireOptions { lvb: true, ..ex() };
    let mut t = a.acquire(&d, &c, &opts).unwrap();
    assert_eq!(t.lvb().unwrap(), &[0u8; 512][..]);
    assert_eq!(t.set_lvb(&[0u8; 513]).unwrap_err().sanlk_code(), -7);
    t.set_lvb(b"hello").unwrap();
    block_on(paxos::release(&d, &c, &t)).unwrap();
    assert_eq!(d.get(RES_OFFSET + LVB_SECTOR * 512, 5), b"hello".to_vec());
    let t2 = a.acquire(&d, &c, &opts).unwrap();
    assert_eq!(&t2.lvb().unwrap()[..5], b"hello");
    let four_k = ResourceParams {
        geometry: Geometry::ALL[1],
        ..res_params()
    };
    let ops = d.ops();
    let e = block_on(paxos::acquire(&d, &c, &a.ctx(&d), &four_k, &opts)).unwrap_err();
    assert_eq!(e, LeaseError::LvbUnsupported);
    assert_eq!(d.ops(), ops, "refused before any I/O");
}

#[test]
fn corrupt_dblock_and_wrong_names_fail() {
    let (d, c, a, _b) = two_hosts();
    // Host 2 has joined, so its dblock is read.
    let mut raw = d.get(RES_OFFSET + dblock_sector(2) * 512, 512);
    raw[0] = 9;
    d.put(RES_OFFSET + dblock_sector(2) * 512, &raw);
    assert_eq!(a.acquire(&d, &c, &ex()).unwrap_err().sanlk_code(), -214);
    let wrong = ResourceParams {
        resource_name: disk_format::Name::new("other").unwrap(),
        ..res_params()
    };
    let e = block_on(paxos::acquire(&d, &c, &a.ctx(&d), &wrong, &ex())).unwrap_err();
    assert_eq!(e.sanlk_code(), -227);
}

/// Rewrites the resource leader through `f`, with a valid checksum.
fn rewrite_leader(d: &MemDisk, f: impl FnOnce(&mut LeaderRecord)) {
    let mut l = leader(d);
    f(&mut l);
    l.seal();
    let mut sector = d.get(RES_OFFSET, 512);
    l.encode_into(&mut sector);
    d.put(RES_OFFSET, &sector);
}

/// A leader with a valid checksum whose sector size (4096) disagrees with the 512-byte
/// geometry of the lockspace in use is refused with SANLK_LEADER_SECTORSIZE, and nothing
/// is written (before: the ballot went to +12288 instead of +1536).
#[test]
fn leader_sector_size_other_than_the_geometry_in_use_is_refused() {
    let (d, c, a, _b) = two_hosts();
    rewrite_leader(&d, |l| l.sector_size = 4096);
    let before = d.bytes.borrow().clone();
    let e = a.acquire(&d, &c, &ex()).unwrap_err();
    assert_eq!(
        e.sanlk_code(),
        disk_format::rv::SANLK_LEADER_SECTORSIZE,
        "{e}"
    );
    assert!(*d.bytes.borrow() == before, "acquire wrote to the disk");
    let e = block_on(paxos::read_owners(&d, &res_params())).unwrap_err();
    assert_eq!(e.sanlk_code(), disk_format::rv::SANLK_LEADER_SECTORSIZE);
    // The geometry in use itself is fine: 512 again, and the lease is granted.
    rewrite_leader(&d, |l| l.sector_size = 512);
    assert_eq!(a.acquire(&d, &c, &ex()).unwrap().lver(), 1);
}

/// A leader whose num_hosts does not fit its own area (4K/1M has 250 slots) is refused
/// with SANLK_LEADER_NUMHOSTS instead of being read as if the area were larger.
#[test]
fn leader_num_hosts_past_the_area_is_refused() {
    let g = Geometry::ALL[1];
    let d = MemDisk::new(2 << 20);
    let area = disk_format::area::format_resource_area(&disk_format::area::ResourceInit {
        geometry: g,
        space_name: disk_format::Name::new("ls").unwrap(),
        resource_name: disk_format::Name::new("res").unwrap(),
        num_hosts: 0,
        clear_at_monotime_s: None,
    });
    d.put(RES_OFFSET, &area);
    let res = ResourceParams {
        geometry: g,
        ..res_params()
    };
    let (l, _) = block_on(paxos::read_owners(&d, &res)).unwrap();
    assert_eq!(l.num_hosts, g.max_hosts());
    let mut l = LeaderRecord::decode(&d.get(RES_OFFSET, 4096)).unwrap();
    l.num_hosts = g.max_hosts() + 1;
    l.max_hosts = 2000;
    l.seal();
    let mut sector = d.get(RES_OFFSET, 4096);
    l.encode_into(&mut sector);
    d.put(RES_OFFSET, &sector);
    let e = block_on(paxos::read_owners(&d, &res)).unwrap_err();
    assert_eq!(
        e.sanlk_code(),
        disk_format::rv::SANLK_LEADER_NUMHOSTS,
        "{e}"
    );
}

/// The release-build invariants check only our own state: a slot of ours on disk that no
/// correct host writes (bal far above mbal, valid checksum) is not a panic.
#[test]
fn forged_own_slot_with_bal_above_mbal_does_not_trip_an_invariant() {
    let (d, c, a, _b) = two_hosts();
    let mut forged = PaxosDblock {
        mbal: 1,
        bal: u64::MAX - 1,
        inp: 2,
        inp2: 1,
        inp3: 77,
        lver: 1,
        ..Default::default()
    };
    forged.seal();
    let mut sector = vec![0u8; 512];
    encode_dblock_sector(&forged, &ModeBlock::default(), &mut sector);
    d.put(RES_OFFSET + dblock_sector(1) * 512, &sector);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| a.acquire(&d, &c, &ex())));
    let t = r.expect("a forged dblock must not panic").expect("acquire");
    // The forged value was dropped, as sanlock drops it: we own version 1.
    assert_eq!((t.lver(), t.leader.owner_id), (1, 1));
    assert!(t.dblock.mbal >= t.dblock.bal);
}

// ----------------------------------------------------------------------------------------
// Reading only the dblocks of host_ids that have joined

/// Host 3's delta-lease sector as its join writes it.
fn joined_sector(d: &MemDisk, host_id: u64) -> Vec<u8> {
    let off = (host_id - 1) * 512;
    let mut l = LeaderRecord::decode(&d.get(off, 512)).unwrap();
    l.owner_id = host_id;
    l.owner_generation = 1;
    l.timestamp = 5000;
    l.resource_name = disk_format::Name::new(&format!("host{host_id}")).unwrap();
    l.seal();
    let mut buf = vec![0u8; 512];
    disk_format::DeltaSector::from_leader(l).encode_into(&mut buf);
    buf
}

/// A phase-2 dblock of `host_id` for lver 1: it accepted itself at ballot `mbal`.
fn accepted_dblock(host_id: u64, mbal: u64) -> Vec<u8> {
    let mut db = PaxosDblock {
        mbal,
        bal: mbal,
        inp: host_id,
        inp2: 1,
        inp3: 4242,
        lver: 1,
        ..PaxosDblock::default()
    };
    db.seal();
    let mut buf = vec![0u8; 512];
    encode_dblock_sector(&db, &ModeBlock::default(), &mut buf);
    buf
}

/// Host 1's acquire failed because it committed host 3's accepted value (`accepted_dblock`)
/// for lver 1: the leader names host 3 with that value's timestamp.
fn assert_host3_committed_for_lver1(d: &MemDisk, e: &LeaseError) {
    assert_eq!(
        *e,
        LeaseError::Other {
            owner_id: 3,
            owner_generation: 1
        }
    );
    let l = leader(d);
    assert_eq!((l.lver, l.owner_id, l.timestamp), (1, 3, 4242));
}

#[test]
fn ballots_read_only_the_hosts_that_have_joined() {
    let (d, c, a, _b) = two_hosts();
    assert_eq!(a.mon.borrow().ballot_hosts_hint(), Some(2));
    let before = d.bytes_read.get();
    let t = a.acquire(&d, &c, &ex()).unwrap();
    // Step A and the two ballot reads cover the leader, the request sector and two
    // dblocks; the confirmations, after phase 1 and before the commit, read the delta
    // sectors of host_ids 3..=8.
    assert_eq!(d.bytes_read.get() - before, 3 * 4 * 512 + 2 * 6 * 512);
    block_on(paxos::release(&d, &c, &t)).unwrap();
    // Off, step A and every ballot read all 8 dblocks, as sanlock, and nothing is confirmed.
    a.mon.borrow_mut().set_read_known_hosts(false);
    assert_eq!(a.mon.borrow().ballot_hosts_hint(), None);
    let before = d.bytes_read.get();
    assert_eq!(a.acquire(&d, &c, &ex()).unwrap().lver(), 2);
    // (sanlock rounds a ballot read up to a power of two sectors: 10 → 16)
    assert_eq!(d.bytes_read.get() - before, 3 * 16 * 512);
}

#[test]
fn a_corrupt_dblock_of_a_host_that_never_joined_is_not_read() {
    let (d, c, a, _b) = two_hosts();
    let mut raw = d.get(RES_OFFSET + dblock_sector(3) * 512, 512);
    raw[0] = 9;
    d.put(RES_OFFSET + dblock_sector(3) * 512, &raw);
    // sanlock (every dblock read) fails with -214; so do we with known-hosts reads off.
    a.mon.borrow_mut().set_read_known_hosts(false);
    assert_eq!(a.acquire(&d, &c, &ex()).unwrap_err().sanlk_code(), -214);
    a.mon.borrow_mut().set_read_known_hosts(true);
    assert_eq!(a.acquire(&d, &c, &ex()).unwrap().lver(), 1);
}

/// Host 3 joins after host 1's last lockspace read and runs a ballot for the same lease
/// version while host 1's ballot (which does not read dblock 3) is under way: by the time
/// host 1 confirms, host 3 has accepted its own value with a larger ballot. The
/// confirmation sees host 3's delta sector in use, host 1 starts over reading every
/// dblock, adopts host 3's value, and commits host 3 as owner: one value for lver 1.
#[test]
fn a_host_joining_mid_ballot_is_caught_by_the_confirmation() {
    let (d, c, a, _b) = two_hosts();
    assert_eq!(a.mon.borrow().ballot_hosts_hint(), Some(2));
    // Ops of host 1's acquire: 1 step A, 2-3 phase 1, 4-5 phase 2, 6 the confirmation.
    d.inject_after(5, 2 * 512, joined_sector(&d, 3));
    d.inject_after(
        5,
        RES_OFFSET + dblock_sector(3) * 512,
        accepted_dblock(3, 2003),
    );
    let e = a.acquire(&d, &c, &ex()).unwrap_err();
    assert_host3_committed_for_lver1(&d, &e);
}

/// Host 3 joined after host 1's last lockspace read, ran a ballot for lver 1 at a small
/// ballot number and had its value accepted (chosen: no other dblock was written), and
/// has not written the leader yet. Host 1's ballot reads dblocks 1..=2 only. It must not
/// write a phase 2 from that partial read: its value with its larger ballot would outrank
/// host 3's chosen one in every later ballot, its own included (two values for lver 1;
/// found by `lockd-sim --model head-reads`, seed 2003864, 8 hosts). The confirmation
/// after phase 1 sends it back to read every dblock, and it commits host 3's value.
#[test]
fn a_value_chosen_beyond_the_dblocks_read_is_kept() {
    let (d, c, a, _b) = two_hosts();
    assert_eq!(a.mon.borrow().ballot_hosts_hint(), Some(2));
    d.put(2 * 512, &joined_sector(&d, 3));
    d.put(RES_OFFSET + dblock_sector(3) * 512, &accepted_dblock(3, 3));
    // Host 2 promised a larger ballot meanwhile (phase 1 only), so host 1's ballot number
    // is larger than host 3's accepted one.
    let mut promise = PaxosDblock {
        mbal: 10,
        lver: 1,
        ..PaxosDblock::default()
    };
    promise.seal();
    let mut buf = vec![0u8; 512];
    encode_dblock_sector(&promise, &ModeBlock::default(), &mut buf);
    d.put(RES_OFFSET + dblock_sector(2) * 512, &buf);
    let e = a.acquire(&d, &c, &ex()).unwrap_err();
    assert_host3_committed_for_lver1(&d, &e);
    let (ours, _) = slot(&d, 1);
    assert!(
        ours.bal == 0 || ours.inp == 3,
        "host 1 accepted its own value for lver 1: {ours:?}"
    );
}

/// The same interleaving with the confirmation skipped (the planted bug): host 1 commits
/// itself for lver 1 although host 3 may have been chosen for it.
#[cfg(feature = "sim")]
#[test]
fn without_the_confirmation_a_host_joining_mid_ballot_is_missed() {
    let (d, c, a, _b) = two_hosts();
    let opts = AcquireOptions {
        planted_bug: Some(PlantedBug::StaleKnownHosts),
        ..ex()
    };
    d.inject_after(5, 2 * 512, joined_sector(&d, 3));
    d.inject_after(
        5,
        RES_OFFSET + dblock_sector(3) * 512,
        accepted_dblock(3, 2003),
    );
    let t = a.acquire(&d, &c, &opts).unwrap();
    assert_eq!(t.lver(), 1);
    assert_eq!(leader(&d).owner_id, 1);
    assert_eq!(
        slot(&d, 3).0.inp,
        3,
        "host 3 accepted another value for lver 1"
    );
}

/// A (lockd) left cleanly and its sanlock peer B cached A's record as free; A rejoins by
/// the short path (2D of A's io_timeout, shorter than a peer's renewal interval at a
/// longer io_timeout; B does not renew meanwhile). Returns A rejoined with its shared hold
/// on, B still caching A as free.
#[cfg(feature = "sim")]
fn rejoined_beside_a_sanlock_peer() -> (MemDisk, TestClock, Host, Host) {
    let (d, c, mut a, mut b) = two_hosts();
    b.mon.borrow_mut().judge_shared_like_sanlock();
    assert!(block_on(delta::release(&d, &a.p, &a.st)).unwrap());
    advance(&c, 2);
    b.renew(&d, &c);
    let cached = b.mon.borrow().observation(1).unwrap();
    assert_eq!(cached.timestamp, 0, "B's cache: A left");
    a.st = block_on(delta::acquire(&d, &c, &a.p)).unwrap();
    assert_eq!(a.st.path, delta::AcquirePath::ShortDelay);
    a.mon.borrow_mut().hold_shared_after_join(c.now_s());
    (d, c, a, b)
}

/// The hazard the shared hold closes, with the hold planted away: sanlock 3.8.5 judges a
/// shared holder from its cache, so a shared grant made before B's cache saw A's join
/// is zeroed by B's exclusive acquire, and both hold the lease.
#[cfg(feature = "sim")]
#[test]
fn without_the_shared_hold_a_sanlock_peer_takes_exclusive_beside_a_fresh_shared_grant() {
    let (d, c, a, b) = rejoined_beside_a_sanlock_peer();
    let planted = AcquireOptions {
        planted_bug: Some(PlantedBug::NoSharedHold),
        ..sh()
    };
    let ta = a.acquire(&d, &c, &planted).unwrap();
    assert_eq!(ta.mode, Mode::Shared);
    let tb = b.acquire(&d, &c, &ex()).unwrap();
    assert_eq!(tb.mode, Mode::Exclusive, "the violation the hold prevents");
    assert!(!slot(&d, 1).1.is_shared(), "B zeroed A's SHARED mode block");
}

/// With the hold, A's shared grant waits until B has been seen renewing three times after
/// A's baseline read; by then B's cache has A alive and B's exclusive acquire is refused.
#[cfg(feature = "sim")]
#[test]
fn a_shared_grant_after_a_join_waits_until_peers_have_seen_the_join() {
    let (d, c, mut a, mut b) = rejoined_beside_a_sanlock_peer();
    // No renewals meanwhile: the wait ends with a retryable error, nothing on disk.
    let e = a.acquire(&d, &c, &sh()).unwrap_err();
    assert_eq!(e, LeaseError::SharedHoldStuck);
    assert_eq!(e.sanlk_code(), -11);
    assert!(!slot(&d, 1).1.is_shared());
    assert_eq!(leader(&d).timestamp, 0);
    // A's first read after the join is the baseline; B then renews three times.
    advance(&c, 1);
    a.renew(&d, &c);
    assert_eq!(a.mon.borrow().shared_hold_awaiting(), vec![(2, 0)]);
    for n in 1..=3 {
        advance(&c, 2);
        b.renew(&d, &c);
        a.renew(&d, &c);
        let still = n < crate::monitor::SHARED_HOLD_RENEWALS;
        assert_eq!(a.mon.borrow().shared_grant_hold().is_some(), still, "{n}");
    }
    let ta = a.acquire(&d, &c, &sh()).unwrap();
    assert_eq!(ta.mode, Mode::Shared);
    let e = b.acquire(&d, &c, &ex()).unwrap_err();
    assert_eq!(e, LeaseError::Again, "B's cache now has A alive");
    assert!(slot(&d, 1).1.is_shared());
}

/// A convert to shared waits the same way; the lease stays exclusive meanwhile.
#[test]
fn a_convert_to_shared_after_a_join_waits_for_the_hold() {
    let (d, c, a, _b) = two_hosts();
    let mut t = a.acquire(&d, &c, &ex()).unwrap();
    a.mon.borrow_mut().hold_shared_after_join(c.now_s());
    let e = block_on(paxos::convert(
        &d,
        &c,
        &a.ctx(&d),
        &mut t,
        Mode::Shared,
        false,
    ))
    .unwrap_err();
    assert_eq!(e, LeaseError::SharedHoldStuck);
    assert_eq!(t.mode, Mode::Exclusive);
    assert_eq!(leader(&d).owner_id, 1, "still held exclusive on disk");
}
