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
