//! Branch tests of the delta-lease algorithm over an instant in-memory disk.

use disk_format::{DeltaSector, LeaderRecord, Name};

use crate::delta::{self, AcquirePath, RenewInput};
use crate::error::LeaseError;
use crate::exec::block_on;
use crate::io::Clock;
use crate::testutil::{ls_params, MemDisk, TestClock};

fn record(d: &MemDisk, host_id: u64) -> LeaderRecord {
    LeaderRecord::decode(&d.get((host_id - 1) * 512, 512)).unwrap()
}

#[test]
fn fresh_acquire_short_delay_then_release_and_short_delay_again() {
    let d = MemDisk::formatted();
    let c = TestClock::at_s(100);
    let p = ls_params(1, "hostA");
    let st = block_on(delta::acquire(&d, &c, &p)).unwrap();
    assert_eq!(st.path, AcquirePath::ShortDelay);
    // 2D of the previous owner's io_timeout (1 s in the formatted record).
    assert_eq!(c.slept_ms.get(), 2000);
    let r = record(&d, 1);
    assert_eq!(r.owner_id, 1);
    assert_eq!(r.owner_generation, 1);
    assert_eq!(r.timestamp, 100);
    assert_eq!(r.resource_name, Name::new("hostA").unwrap());
    assert_eq!(r, st.leader);
    assert!(block_on(delta::release(&d, &p, &st)).unwrap());
    assert_eq!(record(&d, 1).timestamp, 0);
    // Our own cleanly released lease: the short delay and its verify (sanlock 3.9 skips
    // them under its own name; lockd does not, see `AcquirePath::ShortDelay`).
    let st2 = block_on(delta::acquire(&d, &c, &p)).unwrap();
    assert_eq!(st2.path, AcquirePath::ShortDelay);
    assert_eq!(c.slept_ms.get(), 4000);
    assert_eq!(st2.generation(), 2);
    // A clone (our host_id, another name) whose long wait ended on our free record writes
    // right after our write: the verify catches it.
    block_on(delta::release(&d, &p, &st2)).unwrap();
    let mut clone = record(&d, 1);
    clone.timestamp = 999;
    clone.owner_generation = 3;
    clone.resource_name = Name::new("clone").unwrap();
    clone.seal();
    let mut sector = vec![0u8; 512];
    disk_format::DeltaSector::from_leader(clone).encode_into(&mut sector);
    // Our acquire: read, write, then the clone's write lands.
    d.inject_after(2, 0, sector);
    let e = block_on(delta::acquire(&d, &c, &p)).unwrap_err();
    assert_eq!(e, LeaseError::HostIdBusy);
    assert_eq!(record(&d, 1).resource_name, Name::new("clone").unwrap());
    // Without the clone: joined again.
    let mut free = clone;
    free.timestamp = 0;
    free.seal();
    let mut sector = vec![0u8; 512];
    disk_format::DeltaSector::from_leader(free).encode_into(&mut sector);
    d.put(0, &sector);
    let st3 = block_on(delta::acquire(&d, &c, &p)).unwrap();
    assert_eq!(st3.path, AcquirePath::ShortDelay);
    assert_eq!(st3.generation(), 4);
}

#[test]
fn held_by_other_name_waits_host_dead_then_takes_it() {
    let d = MemDisk::formatted();
    let c = TestClock::at_s(100);
    block_on(delta::acquire(&d, &c, &ls_params(1, "old"))).unwrap();
    let before = c.slept_ms.get();
    let st = block_on(delta::acquire(&d, &c, &ls_params(1, "new"))).unwrap();
    assert_eq!(st.path, AcquirePath::LongDelay);
    // max(8D + W, 8D) = 8 + 10 with D = 1, then the 2D verify wait.
    assert_eq!(c.slept_ms.get() - before, 18_000 + 2_000);
    assert_eq!(st.generation(), 2);
}

#[test]
fn held_by_live_owner_is_busy() {
    let d = MemDisk::formatted();
    let c = TestClock::at_s(100);
    let old = block_on(delta::acquire(&d, &c, &ls_params(1, "old"))).unwrap();
    // The owner renews while we wait: the record changes after our first read.
    let mut renewed = old.leader;
    renewed.timestamp += 20;
    renewed.seal();
    let mut sector = vec![0u8; 512];
    DeltaSector::from_leader(renewed).encode_into(&mut sector);
    d.inject_after(1, 0, sector);
    let err = block_on(delta::acquire(&d, &c, &ls_params(1, "new"))).unwrap_err();
    assert_eq!(err, LeaseError::HostIdBusy);
    assert_eq!(err.sanlk_code(), -262);
}

#[test]
fn competitor_during_verify_is_busy() {
    let d = MemDisk::formatted();
    let c = TestClock::at_s(100);
    let mut theirs = record(&d, 1);
    theirs.owner_id = 1;
    theirs.owner_generation = 1;
    theirs.timestamp = 7;
    theirs.resource_name = Name::new("other").unwrap();
    theirs.seal();
    let mut sector = vec![0u8; 512];
    DeltaSector::from_leader(theirs).encode_into(&mut sector);
    // Read (op 1), our write (op 2), then the other host's write lands.
    d.inject_after(2, 0, sector);
    let err = block_on(delta::acquire(&d, &c, &ls_params(1, "hostA"))).unwrap_err();
    assert_eq!(err, LeaseError::HostIdBusy);
}

#[test]
fn renew_writes_timestamp_event_bitmap_and_sees_others() {
    let d = MemDisk::formatted();
    let c = TestClock::at_s(100);
    let pa = ls_params(1, "hostA");
    let pb = ls_params(2, "hostB");
    let mut a = block_on(delta::acquire(&d, &c, &pa)).unwrap();
    block_on(delta::acquire(&d, &c, &pb)).unwrap();
    c.now_ms.set(c.now_ms.get() + 5_000);
    let mut input = RenewInput::default();
    input.event.target_generation = 7;
    input.event.event = 0x55;
    input.event.data = 0x66;
    input.bitmap[0] = 0x02;
    let snap = block_on(delta::renew(&d, &c, &pa, &mut a, &input)).unwrap();
    let r = record(&d, 1);
    assert_eq!(r.timestamp, c.now_s());
    assert_eq!(
        (r.write_id, r.write_generation, r.write_timestamp),
        (7, 0x55, 0x66)
    );
    assert_eq!(d.get(256, 1), vec![0x02]);
    assert_eq!(snap.sectors.len(), 8);
    let b = snap.sectors.decoded(1).unwrap();
    assert_eq!(b.leader.owner_id, 2);
    assert!(
        snap.sectors.get(2).is_some(),
        "free sectors of the lockspace decode"
    );
    assert!(a.last_renewal_ok);
}

#[test]
fn renew_detects_owner_change_and_diff() {
    let d = MemDisk::formatted();
    let c = TestClock::at_s(100);
    let p = ls_params(1, "hostA");
    let mut st = block_on(delta::acquire(&d, &c, &p)).unwrap();
    // Same owner, same generation, other timestamp: RENEW_DIFF.
    let mut changed = st.leader;
    changed.timestamp += 1;
    changed.seal();
    let mut sector = vec![0u8; 512];
    DeltaSector::from_leader(changed).encode_into(&mut sector);
    d.put(0, &sector);
    let e = block_on(delta::renew(&d, &c, &p, &mut st, &RenewInput::default())).unwrap_err();
    assert_eq!(e, LeaseError::RenewDiff);
    assert!(e.is_corrupt());
    // Another host name took it: RENEW_OWNER.
    changed.resource_name = Name::new("thief").unwrap();
    changed.owner_generation += 1;
    changed.seal();
    DeltaSector::from_leader(changed).encode_into(&mut sector);
    d.put(0, &sector);
    let e = block_on(delta::renew(&d, &c, &p, &mut st, &RenewInput::default())).unwrap_err();
    assert_eq!(e.sanlk_code(), -260);
    // A corrupted record: checksum error.
    let mut raw = d.get(0, 512);
    raw[160] ^= 1;
    d.put(0, &raw);
    let e = block_on(delta::renew(&d, &c, &p, &mut st, &RenewInput::default())).unwrap_err();
    assert_eq!(e.sanlk_code(), -229);
    assert!(c.now_ms() > 0);
}

#[test]
fn failed_renewal_skips_release_and_bad_host_id_is_rejected() {
    let d = MemDisk::formatted();
    let c = TestClock::at_s(100);
    let p = ls_params(1, "hostA");
    let mut st = block_on(delta::acquire(&d, &c, &p)).unwrap();
    d.fail_writes_at.borrow_mut().push(0);
    let e = block_on(delta::renew(&d, &c, &p, &mut st, &RenewInput::default())).unwrap_err();
    assert_eq!(e.sanlk_code(), -221);
    assert!(!st.last_renewal_ok);
    assert!(!block_on(delta::release(&d, &p, &st)).unwrap());
    assert_ne!(record(&d, 1).timestamp, 0);
    let e = block_on(delta::acquire(&d, &c, &ls_params(2001, "x"))).unwrap_err();
    assert_eq!(e.sanlk_code(), -231);
}

#[test]
fn geometry_is_read_from_the_first_record() {
    let d = MemDisk::formatted();
    let (g, l) = block_on(delta::read_lockspace_geometry(&d, 0, 1)).unwrap();
    assert_eq!(g, disk_format::Geometry::ALL[0]);
    assert_eq!(l.space_name, Name::new("ls").unwrap());
    let e = block_on(delta::read_lockspace_geometry(
        &d,
        crate::testutil::RES_OFFSET,
        1,
    ))
    .unwrap_err();
    assert_eq!(e.sanlk_code(), -223);
}

#[test]
fn own_name_record_left_by_a_crash_takes_the_long_wait() {
    // Our daemon joined and was killed (no release: the record still has a timestamp).
    // Its lease holders may still run until the watchdog fires, so a restart under the
    // same stable name must wait max(8D + W, 8D) like any other unreleased record.
    let d = MemDisk::formatted();
    let c = TestClock::at_s(100);
    let p = ls_params(1, "hostA");
    let crashed = block_on(delta::acquire(&d, &c, &p)).unwrap();
    let before = c.slept_ms.get();
    let st = block_on(delta::acquire(&d, &c, &p)).unwrap();
    assert_eq!(st.path, AcquirePath::LongDelay);
    assert_eq!(c.slept_ms.get() - before, 18_000 + 2_000);
    assert_eq!(st.generation(), crashed.generation() + 1);
}

#[test]
fn own_name_record_renewed_by_a_clone_is_busy() {
    // Another live host uses our name (a clone of our image) and renews the record
    // while we wait: we must not take its host_id.
    let d = MemDisk::formatted();
    let c = TestClock::at_s(100);
    let p = ls_params(1, "cloned");
    let twin = block_on(delta::acquire(&d, &c, &p)).unwrap();
    let mut renewed = twin.leader;
    renewed.timestamp += 2;
    renewed.seal();
    let mut sector = vec![0u8; 512];
    DeltaSector::from_leader(renewed).encode_into(&mut sector);
    d.inject_after(1, 0, sector);
    let err = block_on(delta::acquire(&d, &c, &p)).unwrap_err();
    assert_eq!(err, LeaseError::HostIdBusy);
    assert_eq!(record(&d, 1).owner_generation, twin.generation());
}

/// A disk whose lockspace "ls" records io_timeout `io_timeout_s` in every free sector
/// (`lockd direct init -s` or `sanlock direct init` without `-o`: 10).
fn lockspace_recorded_at(io_timeout_s: u16) -> MemDisk {
    let d = MemDisk::new(2 << 20);
    let f = disk_format::area::format_lockspace_area(
        disk_format::Geometry::ALL[0],
        &Name::new("ls").unwrap(),
        io_timeout_s,
    );
    d.put(0, &f.area);
    d.put(0, &f.first_sector);
    d
}

#[test]
fn a_join_at_io_timeout_1_of_an_area_recorded_at_10_waits_20_s_and_renews_before_it_is_returned() {
    // The verify waits 2D of the record's io_timeout (20 s), longer than our own 8D
    // (8 s): the lease is renewed at the end of the wait and handed out fresh, as sanlock
    // 3.8.5 joins the same area. W = 60 (the default): host_dead of our write is 68 s.
    let d = lockspace_recorded_at(10);
    let c = TestClock::at_s(100);
    let mut p = ls_params(1, "hostA");
    p.watchdog_fire = 60;
    let st = block_on(delta::acquire(&d, &c, &p)).unwrap();
    assert_eq!(st.path, AcquirePath::ShortDelay);
    assert_eq!(c.slept_ms.get(), 20_000);
    assert_eq!(st.last_success_ms, 120_000);
    let r = record(&d, 1);
    assert_eq!(r, st.leader);
    assert_eq!(r.timestamp, 120);
    assert_eq!(r.io_timeout, 1);
    assert_eq!(r.owner_generation, 1);
    assert!(delta::fail_deadline_ms(&p, &st) > c.now_ms());
    // The renewed lease renews on as any other.
    c.now_ms.set(122_000);
    block_on(delta::renew(
        &d,
        &c,
        &p,
        &mut st.clone(),
        &RenewInput::default(),
    ))
    .unwrap();

    // With W = 10 host_dead of the write is 18 s, before the verify's end: the record
    // may be another host's by then, so the join fails and the write is not renewed.
    let d = lockspace_recorded_at(10);
    let c = TestClock::at_s(100);
    p.watchdog_fire = 10;
    let err = block_on(delta::acquire(&d, &c, &p)).unwrap_err();
    assert!(matches!(err, LeaseError::Io { .. }), "{err:?}");
    assert_eq!(record(&d, 1).timestamp, 100);
}

#[test]
fn a_join_whose_own_8d_is_longer_than_the_verify_wait_is_not_renewed() {
    // Our io_timeout 10 joining an area recorded at 1: 2 s of wait, no renewal needed.
    let d = lockspace_recorded_at(1);
    let c = TestClock::at_s(100);
    let mut p = ls_params(1, "hostA");
    p.io_timeout = 10;
    let st = block_on(delta::acquire(&d, &c, &p)).unwrap();
    assert_eq!(c.slept_ms.get(), 2_000);
    assert_eq!(st.last_success_ms, 100_000);
    assert_eq!(record(&d, 1).timestamp, 100);
}

#[test]
fn a_join_stalled_past_its_fail_time_renews_and_one_stalled_past_host_dead_fails() {
    // The short path's 2D verify wait takes 8D here (a stalled host, 16 s at D = 1,
    // W = 10): the record written at the start has aged past its fail time but not past
    // host_dead (18 s), when another host could take it; it is renewed, not handed out
    // expired.
    let d = MemDisk::formatted();
    let c = TestClock::at_s(100);
    c.stretch_sleeps(8);
    let p = ls_params(1, "hostA");
    let st = block_on(delta::acquire(&d, &c, &p)).unwrap();
    assert_eq!(st.last_success_ms, 116_000);
    assert_eq!(record(&d, 1).timestamp, 116);
    assert!(delta::fail_deadline_ms(&p, &st) > c.now_ms());

    // A stall of 20 s passes host_dead of the write: the join must fail, never write.
    let d = MemDisk::formatted();
    let c = TestClock::at_s(100);
    c.stretch_sleeps(10);
    let err = block_on(delta::acquire(&d, &c, &p)).unwrap_err();
    assert!(matches!(err, LeaseError::Io { .. }), "{err:?}");
    assert_eq!(
        record(&d, 1).timestamp,
        100,
        "the first write stays, not renewed"
    );
}
