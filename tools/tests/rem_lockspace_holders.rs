//! REM_LOCKSPACE while a process holds a lease, seen from a second host: the holder is
//! killed, and the other host can take the lease only after the holder is dead — and then
//! at once, without waiting for host_dead. (lockd releases the held lease on disk once its
//! holder is gone; sanlock leaves it on disk and lets its released delta lease free it:
//! docs/daemon.md, "Differences from sanlock", argues why both are safe.)

use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lockd_system_tests::{lockd_cli, scratch_dir, sparse_file, LockdProc, LoopDevice};

const LOCKD: &str = env!("CARGO_BIN_EXE_lockd");

#[test]
fn second_host_takes_the_lease_only_after_the_holder_died() {
    let tmp = scratch_dir();
    let dir = tmp.path();
    let img = sparse_file(dir, "img", 4 << 20);
    let lo = LoopDevice::attach(&img, 512);
    let dev = lo.device.display().to_string();
    for args in [
        vec!["direct", "init", "-s", &format!("rh:0:{dev}:0"), "-o", "1"][..].to_vec(),
        vec!["direct", "init", "-r", &format!("rh:r1:{dev}:1M")],
    ] {
        let (ok, out) = lockd_cli(LOCKD, dir, &args);
        assert!(ok, "{out}");
    }
    let a = LockdProc::start(LOCKD, dir, "hostA");
    let b = LockdProc::start(LOCKD, dir, "hostB");
    for (d, id) in [(&a, 1), (&b, 2)] {
        let (ok, out) = lockd_cli(
            LOCKD,
            &d.run_dir,
            &[
                "add-lockspace",
                "-s",
                &format!("rh:{id}:{dev}:0"),
                "-o",
                "1",
            ],
        );
        assert!(ok, "{out}");
    }
    let res = format!("rh:r1:{dev}:1M");
    let mut holder = Command::new(LOCKD)
        .args(["acquire", "-r", &res, "--", "sleep", "1000"])
        .env("LOCKD_RUN_DIR", &a.run_dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Held by host A.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (ok, out) = lockd_cli(LOCKD, &b.run_dir, &["leader", "-r", &res, "--json"]);
        if ok && out.contains("\"host_id\": 1") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "host A never held the lease: {out}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // Host B tries again and again, from before the removal until it gets the lease.
    let got_at: Arc<Mutex<Option<Instant>>> = Arc::default();
    let (g2, b_run, res2) = (got_at.clone(), b.run_dir.clone(), res.clone());
    let taker = std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(40);
        while Instant::now() < deadline {
            let (ok, _) = lockd_cli(
                LOCKD,
                &b_run,
                &["acquire", "-r", &res2, "--nowait", "--", "true"],
            );
            if ok {
                *g2.lock().unwrap() = Some(Instant::now());
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    });
    std::thread::sleep(Duration::from_secs(2));
    assert!(got_at.lock().unwrap().is_none(), "B took a lease A holds");
    let rem_at = Instant::now();
    let (ok, out) = lockd_cli(
        LOCKD,
        &a.run_dir,
        &["rem-lockspace", "-s", &format!("rh:1:{dev}:0")],
    );
    assert!(ok, "{out}");
    let status = holder.wait().unwrap();
    let died_at = Instant::now();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(libc::SIGKILL), "{status:?}");
    taker.join().unwrap();
    let got = got_at
        .lock()
        .unwrap()
        .expect("host B never got the lease after the removal");
    // `died_at` is when we reaped the holder, at or after its death: B's success may
    // only come after the death, allowing the reap's own latency (< 100 ms).
    assert!(
        got + Duration::from_millis(100) >= died_at,
        "B got the lease {:?} before the holder died",
        died_at - got
    );
    assert!(
        got.duration_since(rem_at) < Duration::from_secs(8),
        "B waited {:?}: it should not need host_dead (13 s+)",
        got.duration_since(rem_at)
    );
    eprintln!(
        "rem-with-holder: holder dead {:?} after rem, B acquired {:?} after rem",
        died_at - rem_at,
        got - rem_at
    );
    drop(b);
    drop(a);
    drop(lo);
}

/// Runs `sanlock client add_lockspace -o 3` against the daemon in `run_dir`, removes the
/// lockspace 1 s into the join (which waits 2·io_timeout = 6 s), and returns the add's
/// result code ("add_lockspace_timeout done N") and the removal's output.
fn add_ended_by_rem(run_dir: &std::path::Path, ls: &str) -> (i32, String) {
    let client = |args: &[&str]| {
        let mut c = Command::new("sanlock");
        c.arg("client")
            .args(args)
            .env("SANLOCK_RUN_DIR", run_dir)
            .env("SANLOCK_PRIVILEGED", "0");
        c
    };
    let add = client(&["add_lockspace", "-s", ls, "-o", "3"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("sanlock client add_lockspace");
    std::thread::sleep(Duration::from_secs(1));
    let rem = client(&["rem_lockspace", "-s", ls]).output().unwrap();
    let rem_text = String::from_utf8_lossy(&rem.stdout).into_owned();
    let out = add.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let rv = text
        .lines()
        .find_map(|l| l.strip_prefix("add_lockspace_timeout done "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no result in {text:?} {:?}", out.stderr));
    (rv, rem_text)
}

/// Issue 21 item 7: an add_lockspace ended by rem_lockspace answered -220 (the code of
/// the read the removal cut short). sanlock answers SANLK_ERROR (-201) there
/// (`delta_lease_acquire` sees `external_remove` in its waits); lockd now does too. Both
/// daemons are run the same way and must answer the same.
#[test]
fn add_lockspace_ended_by_rem_lockspace_answers_as_sanlock() {
    let tmp = scratch_dir();
    let dir = tmp.path();
    let sanlock = lockd_system_tests::SanlockDaemon::start("hostS");
    let lockd = LockdProc::start(LOCKD, dir, "hostL");
    let mut results = Vec::new();
    for (who, run_dir) in [
        ("sanlock", sanlock.run_dir.path()),
        ("lockd", &lockd.run_dir),
    ] {
        let img = sparse_file(dir, &format!("{who}.img"), 4 << 20);
        let p = img.display().to_string();
        let (ok, out) = lockd_cli(
            LOCKD,
            dir,
            &["direct", "init", "-s", &format!("ab:0:{p}:0"), "-o", "3"],
        );
        assert!(ok, "{out}");
        let (rv, rem) = add_ended_by_rem(run_dir, &format!("ab:1:{p}:0"));
        println!("{who}: add_lockspace ended by rem_lockspace: {rv}; rem: {rem:?}");
        results.push(rv);
        // The lockspace is gone either way.
        let (ok, out) = lockd_cli(LOCKD, run_dir, &["gets"]);
        assert!(ok && !out.contains("ab"), "{who}: {out}");
    }
    assert_eq!(results[0], -201, "sanlock's answer");
    assert_eq!(results[1], results[0], "lockd answers as sanlock");
}
