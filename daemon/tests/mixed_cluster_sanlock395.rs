//! A real sanlock 3.9.5 daemon (Debian 13's binary, run in a debootstrapped trixie chroot
//! by `scripts/debian-chroot.sh`, `-w 0`, private run dir) and lockd on this host share
//! one lockspace that sanlock 3.9.5 formatted on a loop device: both join with distinct
//! host_ids, each sees the other LIVE, an exclusive lease passes between them with the
//! busy code (-243) both ways, shared leases of both coexist (an exclusive request meets
//! -EAGAIN from either side), and a killed host's lease is taken by the other only after
//! host_dead_seconds (io_timeout 1: 8 + 60 s), in both directions.
//!
//! The sanlock side's clients are trixie's python3-sanlock 3.9.5 in the chroot; lockd's
//! are the host's python3-sanlock.
//!
//! Needs root, loop devices, debootstrap and network on first use (the chroot is cached
//! under /var/tmp/lockd-chroots/trixie); fails loudly naming what is missing.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdout, Stdio};
use std::time::Instant;

use common::sid::*;
use common::*;

const TRIXIE: &str = "trixie";
const RES_OFF: u64 = 1 << 20;

/// host_dead_seconds with io_timeout 1 and sanlock's fixed watchdog fire timeout 60.
const HOST_DEAD_S: f64 = 8.0 + 60.0;

/// When a dead host's lease may be taken, in seconds after the kill: not before
/// host_dead minus the up-to-2·io_timeout since its last renewal (and 1 s of rounding),
/// not after host_dead + 2·io_timeout + 1 s (plus 2 s for the 1 s retry loop and 1 s for
/// starting a client in the chroot).
const TAKEOVER_WINDOW_S: std::ops::RangeInclusive<f64> =
    (HOST_DEAD_S - 2.0 - 1.0)..=(HOST_DEAD_S + 2.0 + 1.0 + 3.0);

fn acquire_script(dev: &str, shared: bool) -> String {
    let sh = if shared { ", shared=True" } else { "" };
    format!(
        "import sanlock\nfd = sanlock.register()\ntry:\n    \
         sanlock.acquire(b'ls', b'r1', [(b'{dev}', {RES_OFF})], slkfd=fd{sh})\n    print('ok')\n    \
         sanlock.release(b'ls', b'r1', [(b'{dev}', {RES_OFF})], slkfd=fd)\n\
         except sanlock.SanlockException as e:\n    print('err', e.errno)\n"
    )
}

/// Holds r1 until its stdin gives a line (then releases, says so) or closes.
fn hold_script(dev: &str, shared: bool) -> String {
    let sh = if shared { ", shared=True" } else { "" };
    format!(
        "import sanlock, sys\nfd = sanlock.register()\n\
         sanlock.acquire(b'ls', b'r1', [(b'{dev}', {RES_OFF})], slkfd=fd{sh})\nprint('held', flush=True)\n\
         sys.stdin.readline()\n\
         sanlock.release(b'ls', b'r1', [(b'{dev}', {RES_OFF})], slkfd=fd)\nprint('released', flush=True)\n"
    )
}

/// python3-sanlock 3.9.5 in the chroot, against sanlock 3.9.5's run dir; trimmed stdout.
fn py395(sl: &Sanlock5, script: &str) -> String {
    let o = run(&mut in_chroot_of(
        TRIXIE,
        &[&sl.run_dir],
        &sl.run_dir,
        &["python3", "-c", script],
    ));
    assert!(o.status.success(), "python3-sanlock 3.9.5: {}", text(&o));
    stdout(&o).trim().to_string()
}

/// A lease holder through sanlock 3.9.5 (python3-sanlock 3.9.5 in the chroot); it exits
/// when its stdin closes (on drop).
struct Holder395 {
    child: Child,
    out: BufReader<ChildStdout>,
}

impl Holder395 {
    fn start(sl: &Sanlock5, dev: &str, shared: bool) -> Holder395 {
        let mut child = in_chroot_of(
            TRIXIE,
            &[&sl.run_dir],
            &sl.run_dir,
            &["python3", "-u", "-c", &hold_script(dev, shared)],
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("sanlock 3.9.5 holder");
        let mut out = BufReader::new(child.stdout.take().expect("stdout"));
        let mut line = String::new();
        out.read_line(&mut line).expect("read holder");
        assert_eq!(line.trim(), "held", "sanlock 3.9.5's client took r1");
        Holder395 { child, out }
    }

    fn release(mut self) {
        writeln!(self.child.stdin.as_mut().expect("stdin")).expect("tell holder");
        let mut line = String::new();
        self.out.read_line(&mut line).expect("read holder");
        assert_eq!(line.trim(), "released");
    }
}

impl Drop for Holder395 {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        if !wait_for(15, || matches!(self.child.try_wait(), Ok(Some(_)))) {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

fn lockd_holder(lk: &LockdDaemon, dev: &str, shared: bool) -> PyChild {
    let sh = if shared { ", shared=True" } else { "" };
    let mut c = lk.python_child(&format!(
        "import sanlock, time\nfd = sanlock.register()\n\
         sanlock.acquire(b'ls', b'r1', [(b'{dev}', {RES_OFF})], slkfd=fd{sh})\nprint('held')\ntime.sleep(600)\n"
    ));
    assert_eq!(c.line(), "held", "lockd's client took r1");
    c
}

fn sees_each_other(sl: &Sanlock5, lk: &LockdDaemon, dev: &str, lockd_host: u64, sl_host: u64) {
    let d = Path::new(dev);
    let gets = || text(&sl.cmd(d, &["sanlock", "client", "gets", "-h", "1"]));
    let prefix = format!("h {lockd_host} ");
    assert!(
        wait_for(30, || gets()
            .lines()
            .any(|l| l.starts_with(&prefix) && l.contains("LIVE"))),
        "sanlock 3.9.5 never saw lockd LIVE: {}",
        gets()
    );
    let want = format!("({sl_host}, 3)");
    assert!(
        wait_for(30, || {
            lk
            .python("import sanlock\nprint([(h['host_id'], h['flags']) for h in sanlock.get_hosts(b'ls')])")
            .contains(&want)
        }),
        "lockd never saw sanlock 3.9.5 LIVE"
    );
}

#[test]
fn sanlock_395_and_lockd_share_a_395_formatted_lockspace() {
    let (_s, lo, dev, sl, lk) = joined_pair("mixed395");
    let v = text(&sl.cmd(&lo.dev, &["sanlock", "version"]));
    assert!(v.contains("3.9.5"), "trixie's sanlock is 3.9.5: {v}");

    // sanlock 3.9.5's client holds r1: lockd's client gets IDLIVE (-243).
    let h = Holder395::start(&sl, &dev, false);
    assert_eq!(lk.python(&acquire_script(&dev, false)).trim(), "err -243");
    h.release();
    // lockd's client holds r1: sanlock 3.9.5's client gets -243; the owner is host 2.
    let mut lh = lockd_holder(&lk, &dev, false);
    assert_eq!(py395(&sl, &acquire_script(&dev, false)), "err -243");
    let owners = py395(
        &sl,
        &format!(
            "import sanlock\nprint([o['host_id'] for o in sanlock.read_resource_owners(b'ls', b'r1', [(b'{dev}', {RES_OFF})])])"
        ),
    );
    assert_eq!(owners, "[2]");
    lh.kill9();
    assert!(
        wait_for(10, || py395(&sl, &acquire_script(&dev, false)) == "ok"),
        "sanlock 3.9.5 could not take r1 after lockd's holder died"
    );

    // Shared leases of both hosts coexist. An exclusive request meets a local shared
    // holder with -EEXIST (python3-sanlock shows 17) on either daemon, and another
    // host's live shared holder with -EAGAIN (shown as 11), both ways.
    let sh5 = Holder395::start(&sl, &dev, true);
    let mut shl = lockd_holder(&lk, &dev, true);
    let owners_both = || {
        py395(
            &sl,
            &format!(
                "import sanlock\nprint(sorted(o['host_id'] for o in sanlock.read_resource_owners(b'ls', b'r1', [(b'{dev}', {RES_OFF})])))"
            ),
        )
    };
    assert_eq!(owners_both(), "[1, 2]", "both shared holders are on disk");
    assert_eq!(lk.python(&acquire_script(&dev, false)).trim(), "err 17");
    assert_eq!(py395(&sl, &acquire_script(&dev, false)), "err 17");
    shl.kill9();
    assert_eq!(lk.python(&acquire_script(&dev, false)).trim(), "err 11");
    let mut shl = lockd_holder(&lk, &dev, true);
    sh5.release();
    assert_eq!(py395(&sl, &acquire_script(&dev, false)), "err 11");
    shl.kill9();
    assert!(
        wait_for(10, || py395(&sl, &acquire_script(&dev, false)) == "ok"),
        "sanlock 3.9.5 could not take r1 exclusively after the shared holders left"
    );
    assert_eq!(lk.python(&acquire_script(&dev, false)).trim(), "ok");

    lk.python(&format!(
        "import sanlock\nsanlock.rem_lockspace(b'ls', 2, b'{dev}', 0)"
    ));
    sl.rem_lockspace(&dev, 1);
    drop(lk);
    drop(sl);
    drop(lo);
}

/// Acquires r1 the way lvmlockd does: retry while the result is IDLIVE (-243), at most
/// 120 s. Returns the final outcome and the seconds since the call.
fn timed_acquire(mut once: impl FnMut() -> String) -> (String, f64) {
    let t0 = Instant::now();
    loop {
        let outcome = once();
        if outcome != "err -243" || t0.elapsed().as_secs() > 120 {
            return (outcome, t0.elapsed().as_secs_f64());
        }
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
}

/// Both daemons on a fresh 3.9.5-formatted lockspace (sanlock host 1, lockd host 2),
/// each seeing the other LIVE.
fn joined_pair(tag: &str) -> (Scratch, Loop, String, Sanlock5, LockdDaemon) {
    require_python_sanlock();
    ensure_chroot_in(TRIXIE, &["python3-sanlock"]);
    let s = Scratch::new(tag);
    let file = s.file("backing", 8);
    let lo = Loop::attach(&file);
    let dev = lo.dev.display().to_string();
    let sl = Sanlock5::start_in(TRIXIE, &s, "host395");
    sl.format_ls_r1(&dev, RES_OFF);
    let lk = LockdDaemon::start(&s, "hostL", &[]);
    join_both_in(TRIXIE, &sl.run_dir, &lk, &dev);
    sees_each_other(&sl, &lk, &dev, 2, 1);
    (s, lo, dev, sl, lk)
}

// The two directions are two tests (each waits host_dead_seconds), so that they run at
// the same time.

#[test]
fn dead_sanlock_395_host_lease_is_taken_by_lockd_after_host_dead() {
    let (_s, lo, dev, mut sl, lk) = joined_pair("dead395a");
    // sanlock 3.9.5's client holds r1; the daemon dies with SIGKILL; lockd takes r1 only
    // after host_dead_seconds, and not much later.
    let h = Holder395::start(&sl, &dev, false);
    sl.kill9();
    drop(h);
    let (outcome, secs) = timed_acquire(|| lk.python(&acquire_script(&dev, false)).trim().into());
    eprintln!("lockd took the dead sanlock 3.9.5 host's lease after {secs:.1} s");
    assert_eq!(outcome, "ok", "lockd could not take the dead host's lease");
    assert!(
        TAKEOVER_WINDOW_S.contains(&secs),
        "lockd took the lease after {secs:.1} s (host_dead {HOST_DEAD_S} s)"
    );
    drop(sl);
    drop(lk);
    drop(lo);
}

#[test]
fn dead_lockd_host_lease_is_taken_by_sanlock_395_after_host_dead() {
    let (_s, lo, dev, sl, mut lk) = joined_pair("dead395b");
    // lockd's client holds r1; lockd dies with SIGKILL; sanlock 3.9.5 takes r1 only after
    // host_dead_seconds, and not much later.
    let mut lh = lockd_holder(&lk, &dev, false);
    let _ = lk.child.kill();
    let _ = lk.child.wait();
    lh.kill9();
    let (outcome, secs) = timed_acquire(|| py395(&sl, &acquire_script(&dev, false)));
    eprintln!("sanlock 3.9.5 took the dead lockd host's lease after {secs:.1} s");
    assert_eq!(
        outcome, "ok",
        "sanlock 3.9.5 could not take the dead lockd host's lease"
    );
    assert!(
        TAKEOVER_WINDOW_S.contains(&secs),
        "sanlock 3.9.5 took the lease after {secs:.1} s (host_dead {HOST_DEAD_S} s)"
    );
    lk.stop();
    drop(sl);
    drop(lo);
}
