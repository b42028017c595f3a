//! Issue 21, item 5: operator commands that write lease areas never destroy a held lease
//! or a joined lockspace by accident, on a loop device with a live lockd daemon:
//! - `direct init` at an offset off the align-size boundary is refused, even with
//!   `--force`, and the held neighbour is left byte for byte;
//! - `direct init` and `direct format -x` over valid records need `--force`, are refused
//!   even with it while the local daemon joined or holds the area, and work with it once
//!   no daemon holds the lease;
//! - `lockd rindex format` refuses valid records without `--force`, and the daemon refuses
//!   to format over its own joined lockspace even with `--force` (-EBUSY).
//!
//! Needs root and `losetup`; missing ones fail the test with a message.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use lockd_system_tests::{
    join_lockspace, lease_device, lockd_cli, read_bytes, scratch_dir, LockdProc,
};

const LOCKD: &str = env!("CARGO_BIN_EXE_lockd");
const MIB: u64 = 1 << 20;

/// A `lockd acquire -r RES -- sleep 1000` holder, killed (by PID) on drop.
struct Holder {
    child: Child,
}

impl Holder {
    /// Starts the holder and waits until the daemon in `run_dir` holds `res` as host 1.
    fn start(run_dir: &Path, res: &str) -> Holder {
        let child = Command::new(LOCKD)
            .args(["acquire", "-r", res, "--", "sleep", "1000"])
            .env("LOCKD_RUN_DIR", run_dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start lockd acquire");
        let h = Holder { child };
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let (ok, out) = lockd_cli(LOCKD, run_dir, &["leader", "-r", res, "--json"]);
            if ok && out.contains("\"host_id\": 1") {
                return h;
            }
            assert!(Instant::now() < deadline, "{res} never became held: {out}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Ends the holder and waits until the daemon released `res` on disk.
    fn stop(mut self, run_dir: &Path, res: &str) {
        self.kill();
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let (ok, out) = lockd_cli(LOCKD, run_dir, &["leader", "-r", res, "--json"]);
            if ok && out.contains("\"host_id\": null") {
                return;
            }
            assert!(Instant::now() < deadline, "{res} never released: {out}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        self.kill();
    }
}

fn lockd(run_dir: &Path, args: &[&str]) -> (bool, String) {
    lockd_cli(LOCKD, run_dir, args)
}

/// Asserts a refusal whose message contains every one of `needles`.
fn assert_refused(what: &str, (ok, out): (bool, String), needles: &[&str]) {
    assert!(!ok, "{what}: accepted: {out}");
    for n in needles {
        assert!(out.contains(n), "{what}: {n:?} not in {out:?}");
    }
}

#[test]
fn unaligned_direct_init_is_refused_and_the_held_neighbour_kept() {
    let tmp = scratch_dir();
    let dir = tmp.path();
    let (_lo, dev) = lease_device(LOCKD, dir, "ug", &[("r1", "1M"), ("r2", "2M")]);
    let daemon = LockdProc::start(LOCKD, dir, "unaligned");
    join_lockspace(LOCKD, &daemon.run_dir, "ug", 1, &dev);
    let holder = Holder::start(&daemon.run_dir, &format!("ug:r1:{dev}:1M"));
    let before = read_bytes(Path::new(&dev), 0, (4 * MIB) as usize);
    // 1.5 MiB: the second half of r1's area (its ballots) and the start of r2's.
    for force in [false, true] {
        let res = format!("ug:x:{dev}:1536K");
        let ls = format!("ux:0:{dev}:1536K");
        for spec in [["-r", res.as_str()], ["-s", ls.as_str()]] {
            let mut args = vec!["direct", "init", spec[0], spec[1]];
            if force {
                args.push("--force");
            }
            assert_refused(
                &format!("{args:?}"),
                lockd(dir, &args),
                &["offset 1572864 is not a multiple of the align size 1M"],
            );
        }
    }
    assert!(
        read_bytes(Path::new(&dev), 0, (4 * MIB) as usize) == before,
        "a refused init changed the device"
    );
    // The lease is still held and readable as it was.
    let (ok, out) = lockd(
        &daemon.run_dir,
        &["leader", "-r", &format!("ug:r1:{dev}:1M"), "--json"],
    );
    assert!(ok && out.contains("\"host_id\": 1"), "{out}");
    drop(holder);
}

#[test]
fn direct_init_and_format_over_valid_records_need_force() {
    let tmp = scratch_dir();
    let dir = tmp.path();
    let (_lo, dev) = lease_device(LOCKD, dir, "fg", &[("r1", "2M")]);
    let daemon = LockdProc::start(LOCKD, dir, "formatguard");
    join_lockspace(LOCKD, &daemon.run_dir, "fg", 1, &dev);
    let res = format!("fg:r1:{dev}:2M");
    let holder = Holder::start(&daemon.run_dir, &res);
    let before = read_bytes(Path::new(&dev), 0, (8 * MIB) as usize);
    // An index at 1M writes [1M, 3M): r1's area at 2M, held.
    let x = format!("fg:{dev}:1M");
    assert_refused(
        "direct format over a held lease",
        lockd(dir, &["direct", "format", "-x", &x]),
        &[
            "refusing to write over resource fg:r1 leader at offset 2097152",
            "owner host_id 1",
            "use --force",
        ],
    );
    // An index at 0 would cover the lockspace.
    assert_refused(
        "direct format over a lockspace",
        lockd(dir, &["direct", "format", "-x", &format!("fg:{dev}:0")]),
        &["refusing to write over lockspace fg host_id 1 record at offset 0"],
    );
    // init over the held lease itself, and over an area holding only its ballots' copy.
    assert_refused(
        "direct init over a held lease",
        lockd(dir, &["direct", "init", "-r", &format!("fg:new:{dev}:2M")]),
        &["refusing to write over resource fg:r1"],
    );
    // An unaligned format is refused outright.
    assert_refused(
        "direct format unaligned",
        lockd(
            dir,
            &[
                "direct",
                "format",
                "-x",
                &format!("fg:{dev}:512K"),
                "--force",
            ],
        ),
        &["not a multiple of the align size"],
    );
    // --force does not reach past the local daemon that joined or holds the area.
    assert_refused(
        "direct format --force while the daemon holds r1",
        lockd(&daemon.run_dir, &["direct", "format", "-x", &x, "--force"]),
        &["refusing even with --force", "holds the lease fg:r1"],
    );
    assert_refused(
        "direct init --force over the joined lockspace",
        lockd(
            &daemon.run_dir,
            &["direct", "init", "-s", &format!("fg:0:{dev}:0"), "--force"],
        ),
        &["refusing even with --force", "has joined lockspace fg"],
    );
    assert!(
        read_bytes(Path::new(&dev), 0, (8 * MIB) as usize) == before,
        "a refused command changed the device"
    );
    // Once no daemon holds it, --force formats (and says what it overwrote).
    holder.stop(&daemon.run_dir, &res);
    let (ok, out) = lockd(
        &daemon.run_dir,
        &["rem-lockspace", "-s", &format!("fg:1:{dev}:0")],
    );
    assert!(ok, "rem-lockspace: {out}");
    drop(daemon);
    let (ok, out) = lockd(dir, &["direct", "format", "-x", &x, "--force"]);
    assert!(ok, "forced format: {out}");
    assert!(out.contains("overwriting resource fg:r1"), "{out}");
    let (ok, out) = lockd(dir, &["direct", "lookup", "-x", &x]);
    assert!(ok && out.contains("offset 3145728"), "{out}");
    // A fresh area is formatted without --force.
    let (ok, out) = lockd(dir, &["direct", "init", "-r", &format!("fg:r5:{dev}:5M")]);
    assert!(ok, "{out}");
}

#[test]
fn rindex_format_refuses_the_joined_lockspace_even_with_force() {
    let tmp = scratch_dir();
    let dir = tmp.path();
    let (_lo, dev) = lease_device(LOCKD, dir, "jg", &[]);
    let daemon = LockdProc::start(LOCKD, dir, "joinedguard");
    join_lockspace(LOCKD, &daemon.run_dir, "jg", 1, &dev);
    let before = read_bytes(Path::new(&dev), 0, MIB as usize);
    let x = format!("jg:{dev}:0");
    // The CLI sees the valid records first.
    assert_refused(
        "rindex format over the lockspace",
        lockd(&daemon.run_dir, &["rindex", "format", "-x", &x]),
        &[
            "refusing to write over lockspace jg host_id 1 record at offset 0",
            "--force",
        ],
    );
    // With --force the daemon itself refuses: it has joined that lockspace.
    assert_refused(
        "rindex format --force over the joined lockspace",
        lockd(&daemon.run_dir, &["rindex", "format", "-x", &x, "--force"]),
        &[
            "the daemon refuses to write there",
            "lockspace it has joined",
            "-16",
        ],
    );
    // Only the renewals of host 1's record may have changed that area.
    let after = read_bytes(Path::new(&dev), 0, MIB as usize);
    assert_eq!(
        after[512..],
        before[512..],
        "the lockspace area was written"
    );
    let (ok, out) = lockd(&daemon.run_dir, &["status"]);
    assert!(ok && out.contains("jg"), "{out}");
    // An index next to it, over free space, is fine.
    let (ok, out) = lockd(
        &daemon.run_dir,
        &["rindex", "format", "-x", &format!("jg:{dev}:1M")],
    );
    assert!(ok, "{out}");
}
