//! `lockd set-host --dead -s LS -i HOST_ID[:GEN]` (external fencing; the wire command of
//! sanlock 5.1's `sanlock_set_host(SANLK_SET_HOST_DEAD_EXT)`): refused while the host's
//! delta lease may still be renewed, refused on a 3.x-format area (-204, as sanlock
//! 5.1.1) and for another generation (-280), nothing written on any refusal; accepted
//! for a host seen FAIL on a 5.x-format area, which then carries the DEAD_EXT flag.

use std::path::Path;
use std::time::{Duration, Instant};

use disk_format::leader::{DELTA_DISK_VERSION_5, LFL_DEAD_EXT};
use disk_format::{LeaderRecord, Name};
use lockd_system_tests::{
    join_lockspace, lockd_cli, poke, read_bytes, run_ok, scratch_dir, sparse_file, LockdProc,
};

const LOCKD: &str = env!("CARGO_BIN_EXE_lockd");

/// Formats lockspace `ls` on `img` with lockd (3.4); with `v5`, rewrites the first 8 host
/// records as sanlock 5.x writes them (version 0x00050000).
fn format(img: &Path, ls: &str, v5: bool) {
    let p = img.display().to_string();
    run_ok(
        LOCKD,
        ["direct", "init", "-s", &format!("{ls}:0:{p}:0"), "-o", "1"],
    );
    if v5 {
        for h in 0..8u64 {
            let mut l = LeaderRecord::decode(&read_bytes(img, h * 512, 512)).unwrap();
            l.version = DELTA_DISK_VERSION_5;
            l.seal();
            poke(img, h * 512, &l.encode());
        }
    }
}

/// Writes host 2's record as a host that joined (generation 3) and then stopped.
fn stale_host2(img: &Path) {
    let mut l = LeaderRecord::decode(&read_bytes(img, 512, 512)).unwrap();
    l.owner_id = 2;
    l.owner_generation = 3;
    l.timestamp = 77;
    l.io_timeout = 1;
    l.resource_name = Name::new("gone").unwrap();
    l.seal();
    poke(img, 512, &l.encode());
}

fn set_host(run_dir: &Path, ls: &str, host: &str) -> (bool, String) {
    lockd_cli(
        LOCKD,
        run_dir,
        &["set-host", "-s", ls, "-i", host, "--dead"],
    )
}

/// Retries `set-host` while it answers -EBUSY (host 2 not yet seen FAIL: 8·io_timeout).
fn set_host_after_fail(run_dir: &Path, ls: &str, host: &str) -> (bool, String) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (ok, out) = set_host(run_dir, ls, host);
        if ok || !out.contains("-16") || Instant::now() > deadline {
            return (ok, out);
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[test]
fn set_host_dead_refusals_and_effect() {
    let dir = scratch_dir();
    let lk = LockdProc::start(LOCKD, dir.path(), "sethost");
    let run_dir = lk.run_dir.clone();

    // Arguments.
    for (args, want) in [
        (vec!["-i", "x"], "bad host_id"),
        (vec!["-i", "2:y"], "bad generation"),
        (vec!["-i", "0"], "host_id of 1 or more"),
    ] {
        let mut all = vec!["set-host", "-s", "ls3", "--dead"];
        all.extend_from_slice(&args);
        let (ok, out) = lockd_cli(LOCKD, &run_dir, &all);
        assert!(!ok && out.contains(want), "{args:?}: {out}");
    }
    let (ok, out) = lockd_cli(LOCKD, &run_dir, &["set-host", "-s", "ls3", "-i", "2"]);
    assert!(!ok && out.contains("--dead"), "without --dead: {out}");
    let (ok, out) = set_host(&run_dir, "nosuch", "2");
    assert!(!ok && out.contains("-2"), "unknown lockspace: {out}");

    // A 3.x-format lockspace (lockd's own format).
    let img3 = sparse_file(dir.path(), "ls3.img", 2 << 20);
    format(&img3, "ls3", false);
    stale_host2(&img3);
    join_lockspace(LOCKD, &run_dir, "ls3", 1, &img3.display().to_string());
    let before = read_bytes(&img3, 512, 512);
    let (ok, out) = set_host(&run_dir, "ls3", "2");
    assert!(!ok && out.contains("-16"), "not yet seen FAIL: {out}");
    let (ok, out) = set_host(&run_dir, "ls3", "1");
    assert!(!ok && out.contains("-22"), "our own host_id: {out}");
    let (ok, out) = set_host_after_fail(&run_dir, "ls3", "2");
    assert!(!ok && out.contains("-204"), "3.x area: {out}");
    assert_eq!(read_bytes(&img3, 512, 512), before, "nothing written");

    // A 5.x-format lockspace.
    let img5 = sparse_file(dir.path(), "ls5.img", 2 << 20);
    format(&img5, "ls5", true);
    stale_host2(&img5);
    join_lockspace(LOCKD, &run_dir, "ls5", 1, &img5.display().to_string());
    let before = read_bytes(&img5, 512, 512);
    let (ok, out) = set_host_after_fail(&run_dir, "ls5", "2:4");
    assert!(!ok && out.contains("-280"), "another generation: {out}");
    assert_eq!(read_bytes(&img5, 512, 512), before, "nothing written");
    let (ok, out) = set_host(&run_dir, "ls5", "2:3");
    assert!(ok, "set-host --dead on a FAIL host of a 5.x area: {out}");
    let after = LeaderRecord::decode(&read_bytes(&img5, 512, 512)).unwrap();
    let was = LeaderRecord::decode(&before).unwrap();
    assert_eq!(after.flags, was.flags | LFL_DEAD_EXT);
    assert_eq!(
        (after.owner_generation, after.timestamp, after.version),
        (3, 77, DELTA_DISK_VERSION_5)
    );
    after
        .verify(disk_format::LeaderKind::Delta, &Default::default())
        .unwrap();
    drop(lk);
}
