//! sanlock 5.x areas: delta 5.0 / paxos 7.0 records are used and keep their version;
//! the 5.x flags lockd does not implement (CAW, NO_TIMEOUT) are refused before any write;
//! DEAD_EXT frees a fenced owner's lease at once, fails the fenced host's own lockspace,
//! and is not carried into a new generation. Also here, on 3.x and 5.x areas alike:
//! storage fencing's mark (a generation whose reservation key was preempted) frees that
//! generation's leases at once, and only that generation's.

use std::cell::RefCell;

use disk_format::leader::{
    DELTA_DISK_VERSION_5, LFL_CAW, LFL_DEAD_EXT, LFL_NO_TIMEOUT, PAXOS_DISK_VERSION_7,
};
use disk_format::{DeltaSector, LeaderRecord};

use crate::delta::{self, DeltaState, LockspaceParams, RenewInput};
use crate::error::LeaseError;
use crate::exec::block_on;
use crate::monitor::HostMonitor;
use crate::paxos::{self, AcquireOptions, HostContext};
use crate::testutil::{ls_params, res_params, MemDisk, TestClock, RES_OFFSET};

/// Rewrites the record at `offset` through `f` (checksum redone).
fn edit(d: &MemDisk, offset: u64, f: impl Fn(&mut LeaderRecord)) {
    let mut sector = d.get(offset, 512);
    let mut l = LeaderRecord::decode(&sector).unwrap();
    f(&mut l);
    l.seal();
    l.encode_into(&mut sector);
    d.put(offset, &sector);
}

fn record(d: &MemDisk, offset: u64) -> LeaderRecord {
    LeaderRecord::decode(&d.get(offset, 512)).unwrap()
}

/// A formatted disk whose every delta record and the resource leader carry 5.x's versions.
fn v5_disk() -> MemDisk {
    let d = MemDisk::formatted();
    for h in 0..8 {
        edit(&d, h * 512, |l| l.version = DELTA_DISK_VERSION_5);
    }
    edit(&d, RES_OFFSET, |l| l.version = PAXOS_DISK_VERSION_7);
    d
}

struct Host {
    p: LockspaceParams,
    st: DeltaState,
    mon: RefCell<HostMonitor>,
}

impl Host {
    fn join(d: &MemDisk, c: &TestClock, id: u64) -> Host {
        let p = ls_params(id, &format!("host{id}"));
        let st = block_on(delta::acquire(d, c, &p)).unwrap();
        Host {
            mon: RefCell::new(HostMonitor::new(id, p.watchdog_fire)),
            p,
            st,
        }
    }

    fn renew(&mut self, d: &MemDisk, c: &TestClock) -> Result<(), LeaseError> {
        let snap = block_on(delta::renew(
            d,
            c,
            &self.p,
            &mut self.st,
            &RenewInput::default(),
        ))?;
        self.mon.borrow_mut().observe(snap.read_at_s, &snap.sectors);
        Ok(())
    }

    fn acquire(&self, d: &MemDisk, c: &TestClock) -> Result<paxos::Token, LeaseError> {
        let ctx = HostContext {
            lockspace_disk: d,
            lockspace: &self.p,
            generation: self.st.generation(),
            observer: &self.mon,
        };
        block_on(paxos::acquire(
            d,
            c,
            &ctx,
            &res_params(),
            &AcquireOptions::default(),
        ))
    }
}

fn advance(c: &TestClock, s: u64) {
    c.now_ms.set(c.now_ms.get() + s * 1000);
}

fn two_hosts(d: &MemDisk) -> (TestClock, Host, Host) {
    let c = TestClock::at_s(1000);
    let mut a = Host::join(d, &c, 1);
    let mut b = Host::join(d, &c, 2);
    for _ in 0..2 {
        advance(&c, 2);
        a.renew(d, &c).unwrap();
        b.renew(d, &c).unwrap();
    }
    (c, a, b)
}

#[test]
fn v5_lockspace_and_lease_are_shared_and_keep_their_versions() {
    let d = v5_disk();
    let (c, mut a, mut b) = two_hosts(&d);
    assert_eq!(record(&d, 0).version, DELTA_DISK_VERSION_5);
    assert_eq!(record(&d, 512).version, DELTA_DISK_VERSION_5);
    let t = b.acquire(&d, &c).unwrap();
    assert_eq!(record(&d, RES_OFFSET).version, PAXOS_DISK_VERSION_7);
    advance(&c, 2);
    b.renew(&d, &c).unwrap();
    a.renew(&d, &c).unwrap();
    assert_eq!(a.acquire(&d, &c).unwrap_err().sanlk_code(), -243, "IDLIVE");
    block_on(paxos::release(&d, &c, &t)).unwrap();
    a.acquire(&d, &c).unwrap();
    let l = record(&d, RES_OFFSET);
    assert_eq!((l.owner_id, l.version), (1, PAXOS_DISK_VERSION_7));
}

#[test]
fn caw_and_no_timeout_lockspaces_are_refused_before_any_write() {
    for (flag, code) in [(LFL_CAW, -281), (LFL_NO_TIMEOUT, -95)] {
        let d = v5_disk();
        edit(&d, 0, |l| l.flags |= flag);
        let before = d.get(0, 1 << 20);
        let c = TestClock::at_s(100);
        let e = block_on(delta::acquire(&d, &c, &ls_params(1, "hostA"))).unwrap_err();
        assert_eq!(e.sanlk_code(), code, "flag 0x{flag:x}: {e}");
        assert_eq!(d.get(0, 1 << 20), before, "nothing written");
    }
}

#[test]
fn caw_lease_is_refused_before_any_write() {
    let d = v5_disk();
    let (c, a, _b) = two_hosts(&d);
    edit(&d, RES_OFFSET, |l| l.flags |= LFL_CAW);
    let before = d.get(RES_OFFSET, 1 << 20);
    assert_eq!(a.acquire(&d, &c).unwrap_err().sanlk_code(), -281);
    assert_eq!(d.get(RES_OFFSET, 1 << 20), before, "nothing written");
}

#[test]
fn request_to_a_caw_lease_is_refused_before_any_write() {
    let d = v5_disk();
    let (c, a, _b) = two_hosts(&d);
    a.acquire(&d, &c).unwrap();
    edit(&d, RES_OFFSET, |l| l.flags |= LFL_CAW);
    let before = d.get(RES_OFFSET, 1 << 20);
    for lver in [paxos::RequestLver::Next, paxos::RequestLver::Exact(0)] {
        let e = block_on(paxos::request(&d, &res_params(), lver, 1)).unwrap_err();
        assert_eq!(e.sanlk_code(), -281, "{e}");
    }
    assert_eq!(d.get(RES_OFFSET, 1 << 20), before, "nothing written");
}

#[test]
fn owner_with_no_timeout_is_never_waited_out() {
    let d = v5_disk();
    let (c, mut a, b) = two_hosts(&d);
    b.acquire(&d, &c).unwrap();
    // B's record gains NO_TIMEOUT (a 5.x init_host -N 1), then B stops renewing.
    edit(&d, 512, |l| l.flags |= LFL_NO_TIMEOUT);
    for _ in 0..30 {
        advance(&c, 2);
        a.renew(&d, &c).unwrap();
    }
    let e = a.acquire(&d, &c).unwrap_err();
    assert_eq!(
        e,
        LeaseError::OwnedNoTimeout { owner_id: 2 },
        "never taken by waiting"
    );
    assert_eq!(e.sanlk_code(), -249);
    assert_eq!(record(&d, RES_OFFSET).owner_id, 2);
}

#[test]
fn dead_ext_owner_lease_is_taken_at_once_and_the_fenced_host_fails() {
    let d = v5_disk();
    let (c, mut a, mut b) = two_hosts(&d);
    b.acquire(&d, &c).unwrap();
    // B renews once more so A has just seen it alive, then an external fencer marks B's
    // generation dead.
    advance(&c, 2);
    b.renew(&d, &c).unwrap();
    a.renew(&d, &c).unwrap();
    let gen_b = b.st.generation();
    edit(&d, 512, |l| {
        l.flags |= LFL_DEAD_EXT;
        l.unused1 = 0x0001_0001;
    });
    let slept = c.slept_ms.get();
    let t = a.acquire(&d, &c).unwrap();
    assert!(c.slept_ms.get() - slept <= 1_000, "no host_dead wait");
    assert_eq!(t.lver(), 2);
    assert_eq!(record(&d, RES_OFFSET).owner_id, 1);
    // B's next renewal fails with RENEW_DEAD_EXT and does not overwrite the mark.
    advance(&c, 2);
    let e = b.renew(&d, &c).unwrap_err();
    assert_eq!(e, LeaseError::RenewDeadExt);
    assert_eq!(e.sanlk_code(), -263);
    assert!(e.is_corrupt());
    assert!(
        !block_on(delta::release(&d, &b.p, &b.st)).unwrap(),
        "no release write"
    );
    let l = record(&d, 512);
    assert!(l.dead_ext());
    assert_eq!(l.owner_generation, gen_b);
    // B joins again: a new generation, without the mark.
    let st = block_on(delta::acquire(&d, &c, &b.p)).unwrap();
    let l = record(&d, 512);
    assert_eq!(l.owner_generation, gen_b + 1);
    assert!(!l.dead_ext());
    assert_eq!(l.unused1, 0);
    assert_eq!(l.version, DELTA_DISK_VERSION_5);
    assert_eq!(st.leader, l);
    let _ = DeltaSector::decode(&d.get(512, 512)).unwrap();
}

#[test]
fn monitor_reports_a_dead_ext_host_dead_even_while_its_record_changes() {
    let d = v5_disk();
    let (c, mut a, mut b) = two_hosts(&d);
    let now = |c: &TestClock| c.now_ms.get() / 1000;
    assert_eq!(
        a.mon.borrow().state(2, now(&c)),
        Some(crate::monitor::HostState::Live)
    );
    // sanlock 5.1.1's set_host also re-stamps the timestamp: still DEAD.
    edit(&d, 512, |l| {
        l.flags |= LFL_DEAD_EXT;
        l.timestamp += 5;
    });
    advance(&c, 2);
    a.renew(&d, &c).unwrap();
    assert_eq!(
        a.mon.borrow().state(2, now(&c)),
        Some(crate::monitor::HostState::Dead)
    );
    assert!(a.mon.borrow().hosts(now(&c))[0].1.dead_ext);
    // B rejoins (a new generation, the mark cleared): LIVE again once seen renewing.
    assert!(b.renew(&d, &c).is_err());
    let mut b2 = Host::join(&d, &c, 2);
    for _ in 0..2 {
        advance(&c, 2);
        b2.renew(&d, &c).unwrap();
        a.renew(&d, &c).unwrap();
    }
    assert_eq!(
        a.mon.borrow().state(2, now(&c)),
        Some(crate::monitor::HostState::Live)
    );
}

#[test]
fn dead_ext_mark_stamps_the_setter_as_sanlock_511_does() {
    let d = v5_disk();
    let (c, mut a, b) = two_hosts(&d);
    // A joins again so that its generation (2) differs from its host_id (1).
    block_on(delta::release(&d, &a.p, &a.st)).unwrap();
    a.st = block_on(delta::acquire(&d, &c, &a.p)).unwrap();
    let gen_a = a.st.generation();
    assert_eq!(gen_a, 2);
    let before = d.get(512, 512);
    let l_b = record(&d, 512);
    let l = block_on(delta::mark_dead_ext(
        &d,
        &a.p,
        2,
        b.st.generation(),
        l_b.timestamp,
    ))
    .unwrap();
    let after = d.get(512, 512);
    assert!(l.dead_ext());
    // 5.1.1's layout: setter generation at 160 (u16), setter host_id at 162 (u16).
    assert_eq!(&after[160..168], &[2, 0, 1, 0, 0, 0, 0, 0]);
    assert_eq!(l.unused1, delta::dead_ext_stamp(1, 2));
    // Only the flags (8..12), the stamp (160..168) and the checksum (168..172) changed.
    for (i, (x, y)) in before.iter().zip(after.iter()).enumerate() {
        if !(8..12).contains(&i) && !(160..172).contains(&i) {
            assert_eq!(x, y, "byte {i} changed");
        }
    }
    assert_eq!(l.timestamp, l_b.timestamp, "the timestamp is kept");
    assert_eq!(delta::dead_ext_stamp(4, 3), 0x0004_0003);
    assert_eq!(
        delta::dead_ext_stamp(1, 0x1_0005),
        0x0001_0005,
        "16-bit generation"
    );
}

/// Storage fencing (the daemon's `fence` module) marks a peer generation fenced in the
/// monitor once its key is confirmed gone: that generation's exclusive lease is taken
/// without the host_dead wait, on a 3.x area too; a newer generation is not.
#[test]
fn fenced_owner_generation_is_taken_at_once_and_only_that_generation() {
    for v5 in [false, true] {
        let d = if v5 { v5_disk() } else { MemDisk::formatted() };
        let (c, mut a, mut b) = two_hosts(&d);
        b.acquire(&d, &c).unwrap();
        advance(&c, 2);
        b.renew(&d, &c).unwrap();
        a.renew(&d, &c).unwrap();
        // B stops renewing; A's monitor still calls it alive: IDLIVE without the mark.
        let now = |c: &TestClock| c.now_ms.get() / 1000;
        assert_eq!(a.acquire(&d, &c).unwrap_err().sanlk_code(), -243);
        // A mark of another generation changes nothing.
        assert!(!a.mon.borrow_mut().mark_fenced(2, b.st.generation() + 1));
        assert!(!a.mon.borrow_mut().mark_fenced(3, 1), "never observed");
        assert_eq!(a.acquire(&d, &c).unwrap_err().sanlk_code(), -243);
        assert!(a.mon.borrow_mut().mark_fenced(2, b.st.generation()));
        assert_eq!(
            a.mon.borrow().state(2, now(&c)),
            Some(crate::monitor::HostState::Dead)
        );
        let slept = c.slept_ms.get();
        let t = a.acquire(&d, &c).unwrap();
        assert!(
            c.slept_ms.get() - slept <= 1_000,
            "no host_dead wait (v5 {v5})"
        );
        assert_eq!(record(&d, RES_OFFSET).owner_id, 1);
        block_on(paxos::release(&d, &c, &t)).unwrap();
        // B rejoins with a new generation and takes the lease: the old mark does not
        // make the new generation dead.
        let mut b2 = Host::join(&d, &c, 2);
        for _ in 0..2 {
            advance(&c, 2);
            b2.renew(&d, &c).unwrap();
            a.renew(&d, &c).unwrap();
        }
        b2.acquire(&d, &c).unwrap();
        assert_eq!(
            a.mon.borrow().state(2, now(&c)),
            Some(crate::monitor::HostState::Live)
        );
        assert_eq!(a.acquire(&d, &c).unwrap_err().sanlk_code(), -243);
    }
}

/// A shared holder whose generation is fenced is not alive: an exclusive acquire over
/// its shared lease does not wait for it.
#[test]
fn fenced_shared_holder_is_not_alive() {
    let d = MemDisk::formatted();
    let (c, a, b) = two_hosts(&d);
    let now_s = c.now_ms.get() / 1000;
    let delta_b = record(&d, 512);
    let obs = a.mon.borrow().hosts(now_s)[0].1;
    assert!(HostMonitor::shared_holder_live(
        Some(obs),
        &delta_b,
        b.st.generation(),
        now_s,
        10
    ));
    assert!(a.mon.borrow_mut().mark_fenced(2, b.st.generation()));
    let obs = a.mon.borrow().hosts(now_s)[0].1;
    assert!(!HostMonitor::shared_holder_live(
        Some(obs),
        &delta_b,
        b.st.generation(),
        now_s,
        10
    ));
}
