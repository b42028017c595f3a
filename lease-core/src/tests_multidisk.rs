//! Disk Paxos on a lease with several disks (sanlock's `num_disks`): the majority rule for
//! every step, a failing or stalled minority, a failing majority, leaders a version apart,
//! shared mode blocks on every disk, and the request record and LVB on the first disk.
//! The lockspace lives on its own disk; the lease's disks are three (or four) others.

use disk_format::rv;
use disk_format::LeaderRecord;

use crate::disks::{LeaseDisks, Replicas};
use crate::error::LeaseError;
use crate::exec::block_on;
use crate::io::IoError;
use crate::paxos::{self, AcquireOptions, Mode, RequestLver, Token};
use crate::tests_paxos::{advance, ex, leader, sh, slot, two_hosts, Host};
use crate::testutil::{res_params, MemDisk, TestClock, RES_OFFSET};

fn disks(n: usize) -> Vec<MemDisk> {
    (0..n).map(|_| MemDisk::formatted()).collect()
}

fn replicas(r: &[MemDisk]) -> Replicas<'_, MemDisk> {
    Replicas::new(r.iter().map(|d| (d, RES_OFFSET)).collect()).unwrap()
}

fn acquire(
    h: &Host,
    ls: &MemDisk,
    r: &[MemDisk],
    c: &TestClock,
    opts: &AcquireOptions,
) -> Result<Token, LeaseError> {
    block_on(paxos::acquire(
        &replicas(r),
        c,
        &h.ctx(ls),
        &res_params(),
        opts,
    ))
}

fn release(r: &[MemDisk], c: &TestClock, t: &Token) -> Result<(), LeaseError> {
    block_on(paxos::release(&replicas(r), c, t))
}

/// The same leader (sanlock's comparison: the 152 bytes before the timestamp).
fn same(a: &LeaderRecord, b: &LeaderRecord) -> bool {
    a.encode()[..152] == b.encode()[..152]
}

#[test]
fn three_healthy_disks_hold_the_same_leader_and_dblocks() {
    let (ls, c, a, b) = two_hosts();
    let r = disks(3);
    let t = acquire(&a, &ls, &r, &c, &ex()).unwrap();
    assert_eq!(t.lver(), 1);
    for d in &r {
        let l = leader(d);
        assert_eq!((l.lver, l.owner_id, l.owner_generation), (1, 1, 1));
        assert!(same(&l, &leader(&r[0])));
        let (db, _) = slot(d, 1);
        assert_eq!((db.mbal, db.bal, db.inp, db.lver), (1, 1, 1, 1));
    }
    // B sees A's lease as held by a live host.
    let e = acquire(&b, &ls, &r, &c, &ex()).unwrap_err();
    assert!(matches!(e, LeaseError::IdLive { owner_id: 1, .. }), "{e:?}");
    release(&r, &c, &t).unwrap();
    for d in &r {
        assert_eq!(leader(d).timestamp, 0);
        assert!(slot(d, 1).0.is_released());
    }
    let t2 = acquire(&b, &ls, &r, &c, &ex()).unwrap();
    assert_eq!(t2.lver(), 2);
}

#[test]
fn a_failing_minority_is_survived_through_acquire_release_and_a_takeover() {
    let (ls, c, a, b) = two_hosts();
    let r = disks(3);
    r[2].fail_all.set(Some(IoError::Failed));
    let t = acquire(&a, &ls, &r, &c, &ex()).unwrap();
    assert_eq!(t.lver(), 1);
    assert_eq!(leader(&r[0]).owner_id, 1);
    assert_eq!(leader(&r[1]).owner_id, 1);
    assert_eq!(
        leader(&r[2]).timestamp,
        0,
        "the failed disk was never written"
    );
    // While A holds it, B (reading the same two disks) sees a live owner.
    assert!(matches!(
        acquire(&b, &ls, &r, &c, &ex()),
        Err(LeaseError::IdLive { .. })
    ));
    release(&r, &c, &t).unwrap();
    // The failed disk comes back a version behind and another fails: the two readable
    // disks disagree (lver 1 released on 0, the format's lver 0 on 2), and the newer one
    // stands for the lease (sanlock would fail with SANLK_LEADER_DIFF here).
    r[2].fail_all.set(None);
    r[1].fail_all.set(Some(IoError::Failed));
    let t2 = acquire(&b, &ls, &r, &c, &ex()).unwrap();
    assert_eq!(t2.lver(), 2);
    release(&r, &c, &t2).unwrap();
    r[1].fail_all.set(None);
    let t3 = acquire(&b, &ls, &r, &c, &ex()).unwrap();
    assert_eq!(t3.lver(), 3);
    for d in &r {
        assert_eq!(leader(d).owner_id, 2, "the commit rewrote every disk");
        assert!(same(&leader(d), &leader(&r[0])));
    }
}

#[test]
fn a_failing_majority_refuses_and_nothing_is_held() {
    let (ls, c, a, _b) = two_hosts();
    let r = disks(3);
    r[0].fail_all.set(Some(IoError::Failed));
    r[2].fail_all.set(Some(IoError::Failed));
    let e = acquire(&a, &ls, &r, &c, &ex()).unwrap_err();
    assert_eq!(e.sanlk_code(), rv::SANLK_LEADER_READ, "{e:?}");
    assert_eq!(leader(&r[1]).timestamp, 0);
    assert_eq!(slot(&r[1], 1).0.mbal, 0, "no ballot was written");
}

#[test]
fn dblock_writes_failing_on_a_majority_fail_the_ballot() {
    let (ls, c, a, _b) = two_hosts();
    let r = disks(3);
    let at = RES_OFFSET + disk_format::area::dblock_sector(1) * 512;
    r[0].fail_writes_at.borrow_mut().push(at);
    r[1].fail_writes_at.borrow_mut().push(at);
    let e = acquire(&a, &ls, &r, &c, &ex()).unwrap_err();
    assert_eq!(e.sanlk_code(), rv::SANLK_DBLOCK_WRITE, "{e:?}");
    for d in &r {
        assert_eq!(leader(d).timestamp, 0, "no leader was committed");
    }
}

#[test]
fn a_stalled_disk_is_dropped_once_and_not_waited_for_again() {
    let (ls, c, a, _b) = two_hosts();
    let r = disks(3);
    r[1].fail_all.set(Some(IoError::TimedOut));
    let reps = replicas(&r);
    let t = block_on(paxos::acquire(&reps, &c, &a.ctx(&ls), &res_params(), &ex())).unwrap();
    assert_eq!(reps.dropped_count(), 1);
    assert!(reps.dropped(1));
    // Dropped at the first read: nothing later was issued on it.
    assert_eq!(
        r[1].ops(),
        1,
        "one read issued on the stalled disk, then no more"
    );
    assert_eq!(t.lver(), 1);
    assert_eq!(leader(&r[0]).owner_id, 1);
    assert_eq!(leader(&r[2]).owner_id, 1);
}

#[test]
fn the_newest_leader_read_stands_and_a_released_one_first() {
    let (ls, c, a, b) = two_hosts();
    let r = disks(3);
    // Three different leaders: lver 0 (the format), 5 and 6: version 6 stands.
    for (d, lver) in [(&r[1], 5u64), (&r[2], 6)] {
        let mut l = leader(d);
        l.lver = lver;
        l.seal();
        d.put(RES_OFFSET, &l.encode());
    }
    let t = acquire(&a, &ls, &r, &c, &ex()).unwrap();
    assert_eq!(t.lver(), 7);
    // Version 7 held on disk 0, released on disk 1 (its owner's release reached only
    // that one), disk 2 failing: the released copy stands and B takes version 8.
    let mut released = leader(&r[0]);
    released.timestamp = 0;
    released.seal();
    r[1].put(RES_OFFSET, &released.encode());
    r[2].fail_all.set(Some(IoError::Failed));
    let tb = acquire(&b, &ls, &r, &c, &ex()).unwrap();
    assert_eq!(tb.lver(), 8);
    // Without the released copy, A's held version 7 stands: B sees a live owner.
    release(&r, &c, &tb).unwrap();
    r[2].fail_all.set(None);
    let ta = acquire(&a, &ls, &r, &c, &ex()).unwrap();
    assert_eq!(ta.lver(), 9);
    r[1].put(RES_OFFSET, &leader(&r[0]).encode());
    r[2].fail_all.set(Some(IoError::Failed));
    assert!(matches!(
        acquire(&b, &ls, &r, &c, &ex()),
        Err(LeaseError::IdLive { owner_id: 1, .. })
    ));
}

#[test]
fn two_of_four_disks_are_no_majority() {
    let (ls, c, a, _b) = two_hosts();
    let r = disks(4);
    r[0].fail_all.set(Some(IoError::Failed));
    r[3].fail_all.set(Some(IoError::Failed));
    assert!(acquire(&a, &ls, &r, &c, &ex()).is_err());
    r[3].fail_all.set(None);
    let t = acquire(&a, &ls, &r, &c, &ex()).unwrap();
    assert_eq!(t.lver(), 1, "3 of 4 is a majority");
}

#[test]
fn a_shared_mode_block_goes_to_every_disk_or_the_shared_acquire_fails() {
    let (ls, c, a, b) = two_hosts();
    let r = disks(3);
    let t = acquire(&a, &ls, &r, &c, &sh()).unwrap();
    assert_eq!(t.mode, Mode::Shared);
    for d in &r {
        assert!(slot(d, 1).1.is_shared(), "SHARED on every disk");
        assert_eq!(
            leader(d).timestamp,
            0,
            "the leader is released after a shared grant"
        );
    }
    // B cannot take it exclusive while A holds it shared.
    assert_eq!(
        acquire(&b, &ls, &r, &c, &ex()).unwrap_err(),
        LeaseError::Again
    );
    release(&r, &c, &t).unwrap();
    // With one disk failing, a shared grant cannot put its mode block everywhere.
    r[0].fail_all.set(Some(IoError::Failed));
    let e = acquire(&b, &ls, &r, &c, &sh()).unwrap_err();
    assert!(matches!(e, LeaseError::Io { .. }), "{e:?}");
    for d in &r[1..] {
        assert!(
            !slot(d, 2).1.is_shared(),
            "the failed grant left no SHARED block"
        );
        assert_eq!(leader(d).timestamp, 0, "and no owner");
    }
}

#[test]
fn the_request_record_and_the_lvb_live_on_the_first_disk() {
    let (ls, c, a, b) = two_hosts();
    let r = disks(3);
    let opts = AcquireOptions { lvb: true, ..ex() };
    let mut t = acquire(&a, &ls, &r, &c, &opts).unwrap();
    t.set_lvb(b"value").unwrap();
    let out = block_on(paxos::request(
        &replicas(&r),
        &res_params(),
        RequestLver::Next,
        disk_format::request::REQ_FORCE,
    ))
    .unwrap();
    assert_eq!((out.lver, out.owner_id), (2, Some(1)));
    assert_eq!(
        block_on(paxos::examine(&replicas(&r), &t)).unwrap(),
        Some(disk_format::request::REQ_FORCE)
    );
    release(&r, &c, &t).unwrap();
    let lvb_at = RES_OFFSET + disk_format::area::LVB_SECTOR * 512;
    assert_eq!(&r[0].get(lvb_at, 5), b"value");
    assert_eq!(
        r[1].get(lvb_at, 5),
        vec![0; 5],
        "sanlock keeps the LVB on disk 0 only"
    );
    advance(&c, 1);
    let t2 = acquire(&b, &ls, &r, &c, &opts).unwrap();
    assert_eq!(&t2.lvb().unwrap()[..5], b"value");
}

#[test]
fn read_owners_unions_the_shared_holders_of_every_disk() {
    let (ls, c, a, b) = two_hosts();
    let r = disks(3);
    let ta = acquire(&a, &ls, &r, &c, &sh()).unwrap();
    let tb = acquire(&b, &ls, &r, &c, &sh()).unwrap();
    let (_, owners) = block_on(paxos::read_owners(&replicas(&r), &res_params())).unwrap();
    let ids: Vec<u64> = owners.iter().map(|o| o.host_id).collect();
    assert_eq!(ids, vec![1, 2]);
    release(&r, &c, &ta).unwrap();
    release(&r, &c, &tb).unwrap();
}

/// `lockd-sim --model multi-disk` seed 118766 (4 hosts), step by step: the owner's
/// first attempt at a version was retracted (its dblock RELEASED) on one disk that then
/// missed the winning attempt's writes; another host committed the owner's value, so the
/// leader's write_id is not the owner. A third host must judge the owner by its newest
/// dblock, not by the stale RELEASED one, and find it alive.
#[test]
fn a_stale_released_dblock_of_a_retracted_attempt_does_not_free_a_held_lease() {
    let (ls, c, mut a, mut b) = two_hosts();
    let r = disks(3);
    let t = acquire(&a, &ls, &r, &c, &ex()).unwrap();
    let (won, mode) = slot(&r[0], 1);
    // Disk 1 shows the retracted first attempt: same version, lower mbal, RELEASED.
    let mut old = won;
    old.mbal = won.mbal - 1;
    old.bal = old.mbal;
    old.flags |= disk_format::dblock::DBLOCK_FL_RELEASED;
    old.seal();
    let mut sector = vec![0u8; 512];
    disk_format::dblock::encode_dblock_sector(&old, &mode, &mut sector);
    r[1].put(
        RES_OFFSET + disk_format::area::dblock_sector(1) * 512,
        &sector,
    );
    // Another host (write_id 3) committed A's value.
    for d in &r {
        let mut l = leader(d);
        l.write_id = 3;
        l.seal();
        d.put(RES_OFFSET, &l.encode());
    }
    advance(&c, 2);
    a.renew(&ls, &c);
    b.renew(&ls, &c);
    let e = acquire(&b, &ls, &r, &c, &ex()).unwrap_err();
    assert!(matches!(e, LeaseError::IdLive { owner_id: 1, .. }), "{e:?}");
    // Once A releases (its newest dblock RELEASED on a majority), B may take it.
    let t_lver = t.lver();
    for d in &r[..2] {
        let mut rel = won;
        rel.flags |= disk_format::dblock::DBLOCK_FL_RELEASED;
        rel.seal();
        disk_format::dblock::encode_dblock_sector(&rel, &mode, &mut sector);
        d.put(
            RES_OFFSET + disk_format::area::dblock_sector(1) * 512,
            &sector,
        );
    }
    let tb = acquire(&b, &ls, &r, &c, &ex()).unwrap();
    assert_eq!(tb.lver(), t_lver + 1);
}

/// Our value accepted in phase 2 of an attempt that never committed is on two disks; the
/// third has only that attempt's phase-1 copy (same mbal, no value). The next acquire
/// must keep the accepted value (phase 2's copy is our newest slot), commit it for that
/// version and take a fresh one; taking the phase-1 copy would erase the value from
/// every disk in the next phase 1.
#[test]
fn an_accepted_value_on_a_majority_is_kept_though_the_first_disk_missed_it() {
    let (ls, c, a, _b) = two_hosts();
    let r = disks(3);
    let (_, mode) = slot(&r[0], 1);
    let at = RES_OFFSET + disk_format::area::dblock_sector(1) * 512;
    let put = |d: &MemDisk, db: &disk_format::PaxosDblock| {
        let mut sector = vec![0u8; 512];
        disk_format::dblock::encode_dblock_sector(db, &mode, &mut sector);
        d.put(at, &sector);
    };
    let mut phase1 = disk_format::PaxosDblock {
        mbal: 1,
        lver: 1,
        ..Default::default()
    };
    phase1.seal();
    let mut phase2 = disk_format::PaxosDblock {
        mbal: 1,
        bal: 1,
        inp: 1,
        inp2: a.ctx(&ls).generation,
        inp3: 777,
        lver: 1,
        ..Default::default()
    };
    phase2.seal();
    put(&r[0], &phase1);
    put(&r[1], &phase2);
    put(&r[2], &phase2);
    let t = acquire(&a, &ls, &r, &c, &ex()).unwrap();
    assert_eq!(
        t.lver(),
        2,
        "version 1 went to the accepted value (an earlier attempt's), a fresh one to us"
    );
    assert_ne!(t.leader.timestamp, 777);
}
