//! A real sanlock 3.8 daemon (host 1) and lockd (host 2) share one lockspace on a loop
//! device: each sees the other LIVE, and a resource lease passes between them with the
//! right contention errors both ways.

mod common;

use std::process::{Command, Stdio};

use common::*;

const RES_OFF: u64 = 1 << 20;

fn acquire_script(dev: &str) -> String {
    // Acquire r1 (exclusive), print the outcome, release, exit.
    [
        "import sanlock".to_string(),
        format!("D = b'{dev}'"),
        "fd = sanlock.register()".to_string(),
        "try:".to_string(),
        format!("    sanlock.acquire(b'ls', b'r1', [(D, {RES_OFF})], slkfd=fd)"),
        "    print('ok')".to_string(),
        format!("    sanlock.release(b'ls', b'r1', [(D, {RES_OFF})], slkfd=fd)"),
        "except sanlock.SanlockException as e:".to_string(),
        "    print('err', e.errno)".to_string(),
    ]
    .join("\n")
}

fn hold_script(dev: &str) -> String {
    format!(
        "import sanlock, sys\nD=b'{dev}'\nfd = sanlock.register()\n\
         sanlock.acquire(b'ls', b'r1', [(D, {RES_OFF})], slkfd=fd)\nprint('held', flush=True)\n\
         sys.stdin.readline()\n\
         sanlock.release(b'ls', b'r1', [(D, {RES_OFF})], slkfd=fd)\nprint('released', flush=True)\n"
    )
}

#[test]
fn sanlock_and_lockd_share_a_lockspace() {
    require_python_sanlock();
    let s = Scratch::new("mixed");
    let file = s.file("backing", 8);
    let lo = Loop::attach(&file);
    let dev = lo.dev.display().to_string();
    init_lockspace("ls", &lo.dev, 0);
    init_resource("ls", "r1", &lo.dev, RES_OFF);

    let sl = SanlockDaemon::start(&s, "hostB");
    let lk = LockdDaemon::start(&s, "hostA", &[]);
    join_sanlock_and_lockd(&sl, &lk, &dev);

    // Each sees the other LIVE (after two renewals of the other host).
    let sanlock_sees_lockd = wait_for(30, || {
        sl.client(&["gets", "-h", "1"])
            .lines()
            .any(|l| l.starts_with("h 2 ") && l.contains("LIVE"))
    });
    assert!(
        sanlock_sees_lockd,
        "sanlock never saw lockd LIVE: {}",
        sl.client(&["gets", "-h", "1"])
    );
    let lockd_sees_sanlock = wait_for(30, || {
        lk.python(
            "import sanlock\nprint([(h['host_id'], h['flags']) for h in sanlock.get_hosts(b'ls')])",
        )
        .contains("(1, 3)")
    });
    assert!(lockd_sees_sanlock, "lockd never saw sanlock LIVE");
    let gets = lk.sanlock_client(&["gets", "-h", "1"]);
    assert!(stdout(&gets).contains("h 1 gen 1"), "{}", stdout(&gets));

    // sanlock's client holds r1: lockd's client gets IDLIVE (-243), and vice versa.
    let mut holder = {
        let mut c = Command::new(PYTHON)
            .args(["-u", "-c", &hold_script(&dev)])
            .env("SANLOCK_RUN_DIR", &sl.run_dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("sanlock-side holder");
        let mut out = std::io::BufReader::new(c.stdout.take().expect("stdout"));
        let mut line = String::new();
        std::io::BufRead::read_line(&mut out, &mut line).expect("read");
        assert_eq!(line.trim(), "held");
        (c, out)
    };
    assert_eq!(lk.python(&acquire_script(&dev)).trim(), "err -243");
    {
        use std::io::Write;
        let stdin = holder.0.stdin.as_mut().expect("stdin");
        writeln!(stdin).expect("tell holder to release");
        let mut line = String::new();
        std::io::BufRead::read_line(&mut holder.1, &mut line).expect("read");
        assert_eq!(line.trim(), "released");
        let _ = holder.0.wait();
    }
    // Now lockd's client takes it, and sanlock's client is refused.
    let mut lholder = lk.python_child(&format!(
        "import sanlock, time\nD=b'{dev}'\nfd = sanlock.register()\n\
         sanlock.acquire(b'ls', b'r1', [(D, {RES_OFF})], slkfd=fd)\nprint('held')\ntime.sleep(600)\n"
    ));
    assert_eq!(lholder.line(), "held");
    assert_eq!(sl.python(&acquire_script(&dev)).trim(), "err -243");
    let owners = sl.python(&format!(
        "import sanlock\nprint([o['host_id'] for o in sanlock.read_resource_owners(b'ls', b'r1', [(b'{dev}', {RES_OFF})])])"
    ));
    assert_eq!(owners.trim(), "[2]");
    // lockd's holder dies; sanlock's client can then take the lease.
    lholder.kill9();
    assert!(
        wait_for(10, || sl.python(&acquire_script(&dev)).trim() == "ok"),
        "sanlock could not take the lease after lockd's holder died"
    );

    // Leave cleanly: both remove the lockspace (delta leases released on disk).
    lk.python(&format!(
        "import sanlock\nsanlock.rem_lockspace(b'ls', 2, b'{dev}', 0)"
    ));
    sl.python(&format!(
        "import sanlock\nsanlock.rem_lockspace(b'ls', 1, b'{dev}', 0)"
    ));
    drop(lk);
    drop(sl);
    drop(lo);
}

/// host_dead_seconds with io_timeout 1 and sanlock's fixed watchdog fire timeout 60.
const HOST_DEAD_S: f64 = 8.0 + 60.0;

/// When a dead host's lease may be taken, in seconds after the kill: not before
/// host_dead minus the up-to-2·io_timeout since its last renewal (and 1 s of rounding),
/// not after host_dead + 2·io_timeout + 1 s (plus 2 s for the test's 1 s retry loop).
const TAKEOVER_WINDOW_S: std::ops::RangeInclusive<f64> =
    (HOST_DEAD_S - 2.0 - 1.0)..=(HOST_DEAD_S + 2.0 + 1.0 + 2.0);

/// Acquires r1 through `run_dir`'s daemon the way lvmlockd does: retry while the result
/// is IDLIVE (-243: the owner looked alive at its last check), at most 120 s. Returns the
/// final outcome and the seconds since the call.
fn timed_acquire(run_dir: &std::path::Path, dev: &str) -> (String, f64) {
    let t0 = std::time::Instant::now();
    loop {
        let out = run(Command::new(PYTHON)
            .args(["-c", &acquire_script(dev)])
            .env("SANLOCK_RUN_DIR", run_dir));
        let outcome = stdout(&out).trim().to_string();
        if outcome != "err -243" || t0.elapsed().as_secs() > 120 {
            return (outcome, t0.elapsed().as_secs_f64());
        }
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
}

#[test]
fn dead_host_lease_is_taken_after_host_dead_seconds() {
    require_python_sanlock();
    let s = Scratch::new("hostdead");
    let file = s.file("backing", 8);
    let lo = Loop::attach(&file);
    let dev = lo.dev.display().to_string();
    init_lockspace("ls", &lo.dev, 0);
    init_resource("ls", "r1", &lo.dev, RES_OFF);
    let mut sl = SanlockDaemon::start(&s, "hostB");
    let mut lk = LockdDaemon::start(&s, "hostA", &[]);
    join_sanlock_and_lockd(&sl, &lk, &dev);
    assert!(
        wait_for(30, || sl
            .client(&["gets", "-h", "1"])
            .lines()
            .any(|l| l.starts_with("h 2 ") && l.contains("LIVE"))),
        "sanlock never saw lockd LIVE"
    );

    // 1. sanlock's client holds r1; sanlock dies with SIGKILL; lockd takes r1 only after
    //    host_dead_seconds, and not much later.
    let mut holder = Command::new(PYTHON)
        .args(["-u", "-c", &hold_script(&dev)])
        .env("SANLOCK_RUN_DIR", &sl.run_dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("sanlock-side holder");
    let mut hout = std::io::BufReader::new(holder.stdout.take().expect("stdout"));
    let mut line = String::new();
    std::io::BufRead::read_line(&mut hout, &mut line).expect("read");
    assert_eq!(line.trim(), "held");
    let _ = sl.child.kill();
    let _ = sl.child.wait();
    let _ = holder.kill();
    let _ = holder.wait();
    let (outcome, secs) = timed_acquire(&lk.run_dir, &dev);
    eprintln!("lockd took the dead sanlock host's lease after {secs:.1} s");
    assert_eq!(outcome, "ok", "lockd could not take the dead host's lease");
    assert!(
        TAKEOVER_WINDOW_S.contains(&secs),
        "lockd took the lease after {secs:.1} s (host_dead {HOST_DEAD_S} s)"
    );
    drop(sl);

    // 2. A new sanlock joins as host 1 again; lockd's client holds r1; lockd dies with
    //    SIGKILL; sanlock takes r1 after host_dead_seconds.
    let sl = SanlockDaemon::start(&s, "hostC");
    let rejoin = run(Command::new(PYTHON)
        .args([
            "-c",
            &format!("import sanlock\nsanlock.add_lockspace(b'ls', 3, b'{dev}', 0, iotimeout=1)"),
        ])
        .env("SANLOCK_RUN_DIR", &sl.run_dir));
    assert!(rejoin.status.success(), "sanlock rejoin: {rejoin:?}");
    assert!(
        wait_for(30, || sl
            .client(&["gets", "-h", "1"])
            .lines()
            .any(|l| l.starts_with("h 2 ") && l.contains("LIVE"))),
        "new sanlock never saw lockd LIVE"
    );
    let mut lholder = lk.python_child(&format!(
        "import sanlock, time\nD=b'{dev}'\nfd = sanlock.register()\n\
         sanlock.acquire(b'ls', b'r1', [(D, {RES_OFF})], slkfd=fd)\nprint('held')\ntime.sleep(600)\n"
    ));
    assert_eq!(lholder.line(), "held");
    let _ = lk.child.kill();
    let _ = lk.child.wait();
    lholder.kill9();
    let (outcome, secs) = timed_acquire(&sl.run_dir, &dev);
    eprintln!("sanlock took the dead lockd host's lease after {secs:.1} s");
    assert_eq!(
        outcome, "ok",
        "sanlock could not take the dead lockd host's lease"
    );
    assert!(
        TAKEOVER_WINDOW_S.contains(&secs),
        "sanlock took the lease after {secs:.1} s (host_dead {HOST_DEAD_S} s)"
    );
    lk.stop();
    drop(sl);
    drop(lo);
}

/// Starts a holder of r1 through `run_dir`'s daemon; returns it once it holds the lease.
fn start_holder(run_dir: &std::path::Path, dev: &str) -> std::process::Child {
    let mut c = Command::new(PYTHON)
        .args([
            "-u",
            "-c",
            &format!(
                "import sanlock, time\nD=b'{dev}'\nfd = sanlock.register()\n\
                 sanlock.acquire(b'ls', b'r1', [(D, {RES_OFF})], slkfd=fd)\nprint('held')\ntime.sleep(600)\n"
            ),
        ])
        .env("SANLOCK_RUN_DIR", run_dir)
        .stdout(Stdio::piped())
        .spawn()
        .expect("holder");
    let mut out = std::io::BufReader::new(c.stdout.take().expect("stdout"));
    let mut line = String::new();
    std::io::BufRead::read_line(&mut out, &mut line).expect("read");
    assert_eq!(line.trim(), "held");
    c
}

fn request_force(run_dir: &std::path::Path, dev: &str) {
    let out = run(Command::new(PYTHON)
        .args([
            "-c",
            &format!(
                "import sanlock\nsanlock.request(b'ls', b'r1', [(b'{dev}', {RES_OFF})], action=sanlock.REQ_FORCE)"
            ),
        ])
        .env("SANLOCK_RUN_DIR", run_dir));
    assert!(out.status.success(), "request failed: {out:?}");
}

fn wait_killed(c: &mut std::process::Child, secs: u64) -> bool {
    wait_for(secs, || matches!(c.try_wait(), Ok(Some(_))))
}

#[test]
fn forced_requests_cross_between_sanlock_and_lockd() {
    require_python_sanlock();
    let s = Scratch::new("request");
    let file = s.file("backing", 8);
    let lo = Loop::attach(&file);
    let dev = lo.dev.display().to_string();
    init_lockspace("ls", &lo.dev, 0);
    init_resource("ls", "r1", &lo.dev, RES_OFF);
    let sl = SanlockDaemon::start(&s, "hostB");
    let lk = LockdDaemon::start(&s, "hostA", &[]);
    join_sanlock_and_lockd(&sl, &lk, &dev);

    // lockd's client holds r1; sanlock's side asks with REQ_FORCE: lockd sees its bit in
    // sanlock's delta lease, reads the request record and SIGKILLs the holder.
    let mut holder = start_holder(&lk.run_dir, &dev);
    request_force(&sl.run_dir, &dev);
    assert!(
        wait_killed(&mut holder, 20),
        "lockd did not kill its holder on a forced request; log:\n{}",
        tail(&lk.log_text(), 30)
    );
    assert!(
        wait_for(20, || sl.python(&acquire_script(&dev)).trim() == "ok"),
        "sanlock could not take r1 after the forced request"
    );

    // And the other way: sanlock's holder, lockd's request.
    let mut holder = start_holder(&sl.run_dir, &dev);
    request_force(&lk.run_dir, &dev);
    assert!(
        wait_killed(&mut holder, 20),
        "sanlock did not kill its holder on lockd's request"
    );
    assert!(
        wait_for(20, || lk.python(&acquire_script(&dev)).trim() == "ok"),
        "lockd could not take r1 after its forced request"
    );
    lk.python(&format!(
        "import sanlock\nsanlock.rem_lockspace(b'ls', 2, b'{dev}', 0)"
    ));
    sl.python(&format!(
        "import sanlock\nsanlock.rem_lockspace(b'ls', 1, b'{dev}', 0)"
    ));
    drop(lk);
    drop(sl);
    drop(lo);
}

/// Listens for host events on `run_dir`'s daemon; prints each as `ev HOST GEN EVENT DATA FROM`.
fn event_listener(run_dir: &std::path::Path) -> PyChildOut {
    let mut c = Command::new(PYTHON)
        .args([
            "-u",
            "-c",
            &[
                "import sanlock, select",
                "fd = sanlock.reg_event(b'ls')",
                "print('ready')",
                "while True:",
                "    select.select([fd], [], [])",
                "    for e in sanlock.get_event(fd):",
                "        print('ev', e['host_id'], e['generation'], e['event'], e['data'], e['from_host_id'])",
            ]
            .join("\n"),
        ])
        .env("SANLOCK_RUN_DIR", run_dir)
        .stdout(Stdio::piped())
        .spawn()
        .expect("event listener");
    let out = std::io::BufReader::new(c.stdout.take().expect("stdout"));
    let mut l = PyChildOut { child: c, out };
    assert_eq!(l.line(), "ready");
    l
}

struct PyChildOut {
    child: std::process::Child,
    out: std::io::BufReader<std::process::ChildStdout>,
}

impl PyChildOut {
    fn line(&mut self) -> String {
        let mut s = String::new();
        std::io::BufRead::read_line(&mut self.out, &mut s).expect("read");
        s.trim().to_string()
    }
}

impl Drop for PyChildOut {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn host_events_cross_between_sanlock_and_lockd() {
    require_python_sanlock();
    let s = Scratch::new("events");
    let file = s.file("backing", 8);
    let lo = Loop::attach(&file);
    let dev = lo.dev.display().to_string();
    init_lockspace("ls", &lo.dev, 0);
    let sl = SanlockDaemon::start(&s, "hostB");
    let lk = LockdDaemon::start(&s, "hostA", &[]);
    join_sanlock_and_lockd(&sl, &lk, &dev);
    assert!(
        wait_for(30, || sl
            .client(&["gets", "-h", "1"])
            .lines()
            .any(|l| l.starts_with("h 2 ") && l.contains("LIVE"))),
        "sanlock never saw lockd LIVE"
    );

    // sanlock (host 1) → lockd (host 2).
    let mut on_lockd = event_listener(&lk.run_dir);
    sl.python("import sanlock\nsanlock.set_event(b'ls', 2, 0, 77, data=5, flags=1)");
    let got = on_lockd.line();
    assert!(got.starts_with("ev 2 1 77 5 1"), "lockd delivered {got:?}");

    // lockd (host 2) → sanlock (host 1).
    let mut on_sanlock = event_listener(&sl.run_dir);
    lk.python("import sanlock\nsanlock.set_event(b'ls', 1, 0, 88, data=6, flags=1)");
    let got = on_sanlock.line();
    assert!(
        got.starts_with("ev 1 1 88 6 2"),
        "sanlock delivered {got:?}"
    );
    // A different event within set_bitmap_seconds: -EBUSY unless REPLACE_EVENT (8).
    let out = lk.python(
        &[
            "import sanlock",
            "try:",
            "    sanlock.set_event(b'ls', 1, 0, 99)",
            "    print('set')",
            "except sanlock.SanlockException as e:",
            "    print('errno', e.errno)",
            "sanlock.set_event(b'ls', 1, 0, 99, flags=8)",
            "print('replaced')",
        ]
        .join("\n"),
    );
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        vec!["errno 16", "replaced"],
        "{out}"
    );
    drop(on_lockd);
    drop(on_sanlock);
    lk.python(&format!(
        "import sanlock\nsanlock.rem_lockspace(b'ls', 2, b'{dev}', 0)"
    ));
    sl.python(&format!(
        "import sanlock\nsanlock.rem_lockspace(b'ls', 1, b'{dev}', 0)"
    ));
    drop(lk);
    drop(sl);
    drop(lo);
}

/// An area formatted with sanlock's default io_timeout 10 (`sanlock direct init` without
/// `-o`) joined at io_timeout 1 by sanlock 3.8.5 (host 1) and lockd (host 2) at once. The
/// verify of a free record waits 2·10 s, longer than the joiner's own 8·1 s: both must
/// join after about 20 s, stay joined past 8 s more, renew at io_timeout 1, and see each
/// other LIVE. (lockd used to fail this join with -202 every time.)
#[test]
fn an_area_recorded_at_io_timeout_10_is_joined_at_1_by_sanlock_and_lockd() {
    require_python_sanlock();
    let s = Scratch::new("join10");
    let file = s.file("backing", 8);
    let lo = Loop::attach(&file);
    let dev = lo.dev.display().to_string();
    let out = run(Command::new("sanlock").args(["direct", "init", "-s", &format!("ls:0:{dev}:0")]));
    assert!(out.status.success(), "sanlock direct init -s: {out:?}");
    let sl = SanlockDaemon::start(&s, "hostB");
    let lk = LockdDaemon::start(&s, "hostA", &[]);
    let t0 = std::time::Instant::now();
    join_sanlock_and_lockd(&sl, &lk, &dev);
    let joined_s = t0.elapsed().as_secs_f64();
    eprintln!("both joined after {joined_s:.1} s");
    assert!(
        (20.0..40.0).contains(&joined_s),
        "the joins took {joined_s:.1} s; 2 x 10 s expected"
    );
    // Past 8·io_timeout after the join: still joined on both (renewing, not failed).
    std::thread::sleep(std::time::Duration::from_secs(10));
    let inq = |py: &dyn Fn(&str) -> String, host: u64| {
        py(&format!(
            "import sanlock\nprint(sanlock.inq_lockspace(b'ls', {host}, b'{dev}', 0))"
        ))
        .trim()
        .to_string()
    };
    assert_eq!(
        inq(&|sc| lk.python(sc), 2),
        "True",
        "lockd left the lockspace"
    );
    assert_eq!(
        inq(&|sc| sl.python(sc), 1),
        "True",
        "sanlock left the lockspace"
    );
    assert!(
        !lk.log_text().contains("lockspace failed"),
        "lockd's lockspace failed after its join:\n{}",
        tail(&lk.log_text(), 40)
    );
    assert!(
        wait_for(20, || sl
            .client(&["gets", "-h", "1"])
            .lines()
            .any(|l| l.starts_with("h 2 ") && l.contains("LIVE"))),
        "sanlock never saw lockd LIVE"
    );
    // lockd's record carries its own io_timeout 1 and owner 2, and renews every 2 s.
    let leader = |field: &str| -> u64 {
        let out = stdout(&run(Command::new("sanlock").args([
            "direct",
            "read_leader",
            "-s",
            &format!("ls:2:{dev}:0"),
        ])));
        out.lines()
            .find_map(|l| l.strip_prefix(&format!("{field} ")))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {field} in read_leader output:\n{out}"))
    };
    assert_eq!(leader("io_timeout"), 1);
    assert_eq!(leader("owner_id"), 2);
    let ts = leader("timestamp");
    assert!(
        wait_for(5, || leader("timestamp") > ts),
        "lockd's record was not renewed within 5 s"
    );
    sl.python(&format!(
        "import sanlock\nsanlock.rem_lockspace(b'ls', 1, b'{dev}', 0)"
    ));
    lk.python(&format!(
        "import sanlock\nsanlock.rem_lockspace(b'ls', 2, b'{dev}', 0)"
    ));
    drop(lk);
    drop(sl);
    drop(lo);
}

/// With `read_whole_lockspace = false` (experimental) lockd reads only the head of the
/// lockspace area on most renewals (lease-core `reads`: the host_ids ever used plus a
/// margin; the whole area every 16 renewals, 32 s at io_timeout 1). A sanlock 3.8.5 host joining at host_id 1500, far beyond the head, is
/// listed by lockd within one such cycle, and the forced request it makes at once reaches
/// lockd's holder, although the request bit in its delta lease is set for 6 s only: the
/// whole read that finds the new host examines lockd's leases.
#[test]
fn a_sanlock_host_joining_far_beyond_the_head_is_seen_and_heard_within_a_read_cycle() {
    require_python_sanlock();
    let s = Scratch::new("farhost");
    let file = s.file("backing", 8);
    let lo = Loop::attach(&file);
    let dev = lo.dev.display().to_string();
    init_lockspace("ls", &lo.dev, 0);
    init_resource("ls", "r1", &lo.dev, RES_OFF);
    let sl = SanlockDaemon::start(&s, "hostB");
    let cfg = s.dir.join("lockd.toml");
    std::fs::write(&cfg, "read_whole_lockspace = false\n").expect("write lockd.toml");
    let cfg = cfg.display().to_string();
    let lk = LockdDaemon::start_args(&s, "hostA", &["-c", &cfg], &[]);
    let add = |host: u64| {
        format!("import sanlock\nsanlock.add_lockspace(b'ls', {host}, b'{dev}', 0, iotimeout=1)\nprint('joined')\n")
    };
    assert_eq!(lk.python(&add(2)).trim(), "joined");
    let mut holder = start_holder(&lk.run_dir, &dev);
    // lockd's first renewal, right after its join, read the whole area; the next ones
    // read the head.
    std::thread::sleep(std::time::Duration::from_secs(5));
    assert_eq!(sl.python(&add(1500)).trim(), "joined");
    let joined = std::time::Instant::now();
    request_force(&sl.run_dir, &dev);
    let listed_by_lockd = || {
        lk.python(
            "import sanlock\nprint(any(h['host_id'] == 1500 for h in sanlock.get_hosts(b'ls')))",
        )
        .trim()
            == "True"
    };
    // One cycle of 16 renewals of 2 s, the renewal under way, and slack for the client.
    const BOUND_S: u64 = 40;
    assert!(
        wait_for(BOUND_S, listed_by_lockd),
        "lockd did not list host 1500 within {BOUND_S} s of its join; log:\n{}",
        tail(&lk.log_text(), 30)
    );
    let listed_s = joined.elapsed().as_secs_f64();
    assert!(
        wait_killed(&mut holder, 20),
        "lockd did not kill its holder on the forced request of host 1500; log:\n{}",
        tail(&lk.log_text(), 30)
    );
    let killed_s = joined.elapsed().as_secs_f64();
    eprintln!(
        "timeline: host 1500 joined at 0 s; listed by lockd at {listed_s:.1} s (bound \
         {BOUND_S} s); lockd's holder killed on its forced request at {killed_s:.1} s"
    );
    assert!(
        wait_for(20, || sl.python(&acquire_script(&dev)).trim() == "ok"),
        "sanlock could not take r1 after the forced request"
    );
    lk.python(&format!(
        "import sanlock\nsanlock.rem_lockspace(b'ls', 2, b'{dev}', 0)"
    ));
    sl.python(&format!(
        "import sanlock\nsanlock.rem_lockspace(b'ls', 1500, b'{dev}', 0)"
    ));
    drop(lk);
    drop(sl);
    drop(lo);
}
