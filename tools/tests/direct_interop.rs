//! `lockd direct` against the real sanlock 3.8 binary: identical bytes from `init` on
//! every geometry (files and loop devices), each tool reading the other's areas
//! (including a lockspace joined by a live sanlock daemon), and corrupt or wrong input
//! giving a one-line error while leaving the storage untouched.
//!
//! Needs root, `sanlock` and `losetup`; missing ones fail the test with a message.

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use lockd_system_tests::{
    poke, read_bytes, require_command, run, run_ok, scratch_dir, sparse_file, LoopDevice,
    SanlockDaemon,
};

const LOCKD: &str = env!("CARGO_BIN_EXE_lockd");
const MIB: u64 = 1 << 20;

/// (sector size, align label, align bytes) of the five geometries sanlock supports.
const GEOMETRIES: [(u32, &str, u64); 5] = [
    (512, "1M", MIB),
    (4096, "1M", MIB),
    (4096, "2M", 2 * MIB),
    (4096, "4M", 4 * MIB),
    (4096, "8M", 8 * MIB),
];

fn sanlock() -> std::path::PathBuf {
    require_command("sanlock", "sanlock")
}

fn lockd<I: IntoIterator<Item = S>, S: AsRef<std::ffi::OsStr>>(args: I) -> Output {
    run(LOCKD, args)
}

fn lockd_ok(args: &[&str]) -> String {
    run_ok(LOCKD, args)
}

fn whole_file(path: &Path) -> Vec<u8> {
    std::fs::read(path).expect("read file")
}

/// Asserts a failed command printed exactly one line on stderr containing `needle`.
fn assert_one_line_error(out: &Output, needle: &str) {
    assert!(!out.status.success(), "expected failure, got success");
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "expected one error line, got: {err:?}");
    assert!(
        lines[0].contains(needle),
        "error {:?} does not mention {needle:?}",
        lines[0]
    );
}

fn sanlock_init(args: &[String]) {
    let out = run(sanlock(), args);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("init done 0"),
        "sanlock {args:?}: {text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn geometry_flags(sector: u32, align: &str) -> Vec<String> {
    vec!["-Z".into(), sector.to_string(), "-A".into(), align.into()]
}

#[test]
fn init_matches_sanlock_byte_for_byte_on_files() {
    let dir = scratch_dir();
    for (sector, align, align_bytes) in GEOMETRIES {
        let ours = sparse_file(dir.path(), "ours", 3 * align_bytes);
        let theirs = sparse_file(dir.path(), "theirs", 3 * align_bytes);
        let flags = geometry_flags(sector, align);
        for (what, spec_of) in [
            (
                "-s",
                Box::new(|p: &Path| format!("ls1:0:{}:0", p.display()))
                    as Box<dyn Fn(&Path) -> String>,
            ),
            (
                "-r",
                Box::new(move |p: &Path| format!("ls1:res1:{}:{align_bytes}", p.display())),
            ),
        ] {
            let mut s: Vec<String> = vec![
                "direct".into(),
                "init".into(),
                what.into(),
                spec_of(&theirs),
            ];
            s.extend(flags.clone());
            sanlock_init(&s);
            let mut l: Vec<String> =
                vec!["direct".into(), "init".into(), what.into(), spec_of(&ours)];
            l.extend(flags.clone());
            let out = lockd(&l);
            assert!(
                out.status.success(),
                "lockd {l:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        assert!(
            whole_file(&ours) == whole_file(&theirs),
            "{sector}/{align}: lockd and sanlock wrote different bytes"
        );
        std::fs::remove_file(&ours).unwrap();
        std::fs::remove_file(&theirs).unwrap();
    }
}

#[test]
fn init_options_match_sanlock() {
    let dir = scratch_dir();
    let ours = sparse_file(dir.path(), "ours", 4 * MIB);
    let theirs = sparse_file(dir.path(), "theirs", 4 * MIB);
    let t = theirs.display().to_string();
    let o = ours.display().to_string();
    // io_timeout recorded in every host record; num_hosts in a resource leader.
    sanlock_init(&[
        "direct".into(),
        "init".into(),
        "-s".into(),
        format!("ls:0:{t}:0"),
        "-o".into(),
        "3".into(),
    ]);
    lockd_ok(&["direct", "init", "-s", &format!("ls:0:{o}:0"), "-o", "3"]);
    sanlock_init(&[
        "direct".into(),
        "init".into(),
        "-r".into(),
        format!("ls:r:{t}:1048576"),
        "-n".into(),
        "8".into(),
    ]);
    lockd_ok(&[
        "direct",
        "init",
        "-r",
        &format!("ls:r:{o}:1048576"),
        "-N",
        "8",
    ]);
    assert!(
        whole_file(&ours) == whole_file(&theirs),
        "-o/-N bytes differ"
    );

    // A cleared resource differs only in write_timestamp (monotonic time of the write).
    sanlock_init(&[
        "direct".into(),
        "init".into(),
        "-r".into(),
        format!("ls:c:{t}:2097152"),
        "-z".into(),
        "1".into(),
    ]);
    lockd_ok(&[
        "direct",
        "init",
        "-r",
        &format!("ls:c:{o}:2097152"),
        "--clear",
    ]);
    let a = read_bytes(&ours, 2 * MIB, MIB as usize);
    let b = read_bytes(&theirs, 2 * MIB, MIB as usize);
    assert_eq!(
        &a[..4],
        &0x1128_2016u32.to_le_bytes(),
        "PAXOS_DISK_CLEAR magic"
    );
    assert_eq!(
        a[..192],
        b[..192],
        "cleared leader differs before write_timestamp"
    );
    assert_eq!(a[200..], b[200..], "cleared area differs after the leader");
    assert_ne!(&a[192..200], &[0u8; 8], "write_timestamp must be stamped");
}

#[test]
fn init_matches_sanlock_on_loop_devices() {
    let dir = scratch_dir();
    for (sector, align, align_bytes) in GEOMETRIES {
        let size = 3 * align_bytes;
        let f_ours = sparse_file(dir.path(), "ours.img", size);
        let f_theirs = sparse_file(dir.path(), "theirs.img", size);
        {
            let ours = LoopDevice::attach(&f_ours, sector);
            let theirs = LoopDevice::attach(&f_theirs, sector);
            let d_o = ours.device.display().to_string();
            let d_t = theirs.device.display().to_string();
            let mut s = vec![
                "direct".into(),
                "init".into(),
                "-s".into(),
                format!("ls:0:{d_t}:0"),
            ];
            s.extend(geometry_flags(sector, align));
            sanlock_init(&s);
            let mut s = vec![
                "direct".into(),
                "init".into(),
                "-r".into(),
                format!("ls:r:{d_t}:{align_bytes}"),
            ];
            s.extend(geometry_flags(sector, align));
            sanlock_init(&s);
            let a = align.to_string();
            let z = sector.to_string();
            lockd_ok(&[
                "direct",
                "init",
                "-s",
                &format!("ls:0:{d_o}:0"),
                "-Z",
                &z,
                "-A",
                &a,
            ]);
            lockd_ok(&[
                "direct",
                "init",
                "-r",
                &format!("ls:r:{d_o}:{align_bytes}"),
                "-Z",
                &z,
                "-A",
                &a,
            ]);
        }
        assert!(
            whole_file(&f_ours) == whole_file(&f_theirs),
            "{sector}/{align} on loop devices: bytes differ"
        );
        std::fs::remove_file(&f_ours).unwrap();
        std::fs::remove_file(&f_theirs).unwrap();
    }
}

#[test]
fn default_geometry_follows_the_device_like_sanlock() {
    let dir = scratch_dir();
    for sector in [512u32, 4096] {
        let f_ours = sparse_file(dir.path(), "ours.img", 16 * MIB);
        let f_theirs = sparse_file(dir.path(), "theirs.img", 16 * MIB);
        {
            let ours = LoopDevice::attach(&f_ours, sector);
            let theirs = LoopDevice::attach(&f_theirs, sector);
            sanlock_init(&[
                "direct".into(),
                "init".into(),
                "-s".into(),
                format!("ls:0:{}:0", theirs.device.display()),
            ]);
            sanlock_init(&[
                "direct".into(),
                "init".into(),
                "-r".into(),
                format!("ls:r:{}:8388608", theirs.device.display()),
            ]);
            lockd_ok(&[
                "direct",
                "init",
                "-s",
                &format!("ls:0:{}:0", ours.device.display()),
            ]);
            lockd_ok(&[
                "direct",
                "init",
                "-r",
                &format!("ls:r:{}:8388608", ours.device.display()),
            ]);
        }
        let ours = whole_file(&f_ours);
        assert!(
            ours == whole_file(&f_theirs),
            "default geometry on {sector}-byte device differs"
        );
        // sector_size recorded in the leader follows the device.
        assert_eq!(&ours[12..16], &sector.to_le_bytes());
        std::fs::remove_file(&f_ours).unwrap();
        std::fs::remove_file(&f_theirs).unwrap();
    }
}

#[test]
fn sanlock_reads_areas_written_by_lockd() {
    let dir = scratch_dir();
    let f = sparse_file(dir.path(), "ls.img", 3 * MIB);
    let p = f.display().to_string();
    lockd_ok(&["direct", "init", "-s", &format!("lsA:0:{p}:0")]);
    lockd_ok(&["direct", "init", "-r", &format!("lsA:resA:{p}:1048576")]);
    let dump = run_ok(sanlock(), ["direct", "dump", &p]);
    assert!(
        dump.contains("lsA") && dump.contains("resA"),
        "sanlock dump: {dump}"
    );
    let rl = run_ok(
        sanlock(),
        ["direct", "read_leader", "-s", &format!("lsA:1:{p}:0")],
    );
    assert!(rl.contains("read_leader done 0"), "{rl}");
    let rl = run_ok(
        sanlock(),
        [
            "direct",
            "read_leader",
            "-r",
            &format!("lsA:resA:{p}:1048576"),
        ],
    );
    assert!(rl.contains("read_leader done 0"), "{rl}");
}

fn wait_for(what: &str, timeout: Duration, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !ok() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(200));
    }
}

struct KillOnDrop(Child);
impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn lockd_dump_shows_a_live_sanlock_owner() {
    let dir = scratch_dir();
    let f = sparse_file(dir.path(), "live.img", 3 * MIB);
    let p = f.display().to_string();
    sanlock_init(&[
        "direct".into(),
        "init".into(),
        "-s".into(),
        format!("live:0:{p}:0"),
        "-o".into(),
        "1".into(),
    ]);
    sanlock_init(&[
        "direct".into(),
        "init".into(),
        "-r".into(),
        format!("live:vm1:{p}:1048576"),
    ]);
    let daemon = SanlockDaemon::start("host-a.example");
    let (ok, text) = daemon.client(&["add_lockspace", "-o", "1", "-s", &format!("live:1:{p}:0")]);
    assert!(
        ok && text.contains("done 0"),
        "add_lockspace: {text}\n{}",
        daemon.log_text()
    );

    // A registered process holding vm1: `sanlock client command` registers, acquires, execs.
    let holder = Command::new(sanlock())
        .args([
            "client",
            "command",
            "-r",
            &format!("live:vm1:{p}:1048576"),
            "-c",
            "/bin/sleep",
            "120",
        ])
        .env("SANLOCK_RUN_DIR", daemon.run_dir.path())
        .env("SANLOCK_PRIVILEGED", "0")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn sanlock client command");
    let _holder = KillOnDrop(holder);

    let dump_json = || -> serde_json::Value {
        let out = lockd(["direct", "dump", &p, "--json"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("dump --json is JSON")
    };
    wait_for("vm1 to be owned by host 1", Duration::from_secs(30), || {
        let v = dump_json();
        v[1]["owner_id"] == 1 && v[1]["timestamp"].as_u64().unwrap_or(0) > 0
    });
    let v = dump_json();
    assert_eq!(v[0]["kind"], "lockspace");
    let host = &v[0]["hosts"][0];
    assert_eq!(host["host_id"], 1);
    assert_eq!(host["owner_id"], 1);
    assert_eq!(host["host_name"], "host-a.example");
    assert_eq!(host["io_timeout"], 1);
    assert!(host["generation"].as_u64().unwrap() >= 1);
    assert!(host["error"].is_null(), "live record verifies: {host}");
    let first_ts = host["timestamp"].as_u64().unwrap();
    assert!(first_ts > 0);
    assert_eq!(v[1]["kind"], "resource");
    assert_eq!(v[1]["resource"], "vm1");
    assert_eq!(v[1]["lver"], 1);
    assert_eq!(v[1]["owner_generation"], host["generation"]);
    // The owner keeps renewing (every 2 s with io_timeout 1): the timestamp moves.
    wait_for("a renewal", Duration::from_secs(15), || {
        dump_json()[0]["hosts"][0]["timestamp"]
            .as_u64()
            .unwrap_or(0)
            > first_ts
    });
    let table = lockd_ok(&["direct", "dump", &p]);
    assert!(
        table.contains("host-a.example") && table.contains("owner 1"),
        "{table}"
    );
}

#[test]
fn corrupt_records_are_named_and_nothing_is_written() {
    let dir = scratch_dir();
    let f = sparse_file(dir.path(), "c.img", 2 * MIB);
    let p = f.display().to_string();
    lockd_ok(&["direct", "init", "-s", &format!("ls:0:{p}:0")]);
    lockd_ok(&["direct", "init", "-r", &format!("ls:res:{p}:1048576")]);
    let pristine = whole_file(&f);

    // Flipped bit inside the checksummed part of the resource leader.
    let mut byte = read_bytes(&f, MIB + 33, 1);
    byte[0] ^= 0x04;
    poke(&f, MIB + 33, &byte);
    let out = lockd([
        "direct",
        "read-leader",
        "-r",
        &format!("ls:res:{p}:1048576"),
    ]);
    assert_one_line_error(&out, "SANLK_LEADER_CHECKSUM");
    let out = lockd(["direct", "dump", &p]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("ERROR") && table.contains("checksum"),
        "{table}"
    );
    // The refused formats below must not touch anything either.
    let corrupted = whole_file(&f);

    // Wrong magic in host 1's record.
    poke(&f, 0, &[0xde, 0xad, 0xbe, 0xef]);
    let out = lockd(["direct", "read-leader", "-s", &format!("ls:1:{p}:0")]);
    assert_one_line_error(&out, "SANLK_LEADER_MAGIC");
    poke(&f, 0, &pristine[..4]);

    // Wrong lockspace name.
    let out = lockd(["direct", "read-leader", "-s", &format!("other:1:{p}:0")]);
    assert_one_line_error(&out, "SANLK_LEADER_LOCKSPACE");

    // Unaligned offset.
    let out = lockd(["direct", "init", "-s", &format!("ls2:0:{p}:100")]);
    assert_one_line_error(&out, "not a multiple");
    // Invalid sector sizes and combinations.
    let out = lockd([
        "direct",
        "init",
        "-s",
        &format!("ls2:0:{p}:0"),
        "-Z",
        "1024",
        "--force",
    ]);
    assert_one_line_error(&out, "sector size 1024");
    let out = lockd([
        "direct",
        "init",
        "-s",
        &format!("ls2:0:{p}:0"),
        "-Z",
        "512",
        "-A",
        "8M",
        "--force",
    ]);
    assert_one_line_error(&out, "not a valid combination");
    // Names over 48 bytes.
    let long = "n".repeat(49);
    let out = lockd([
        "direct",
        "init",
        "-r",
        &format!("ls:{long}:{p}:1048576"),
        "--force",
    ]);
    assert_one_line_error(&out, "limit is 48");
    let out = lockd([
        "direct",
        "init",
        "-s",
        &format!("{long}:0:{p}:0"),
        "--force",
    ]);
    assert_one_line_error(&out, "limit is 48");
    // Formatting over a valid lockspace without --force.
    let out = lockd(["direct", "init", "-s", &format!("ls:0:{p}:0")]);
    assert_one_line_error(
        &out,
        "refusing to write over lockspace ls host_id 1 record at offset 0",
    );
    assert!(
        whole_file(&f) == corrupted,
        "a refused command changed the file"
    );

    // With --force it does format (and the resource is reformatted cleanly).
    lockd_ok(&[
        "direct",
        "init",
        "-r",
        &format!("ls:res:{p}:1048576"),
        "--force",
    ]);
    lockd_ok(&[
        "direct",
        "read-leader",
        "-r",
        &format!("ls:res:{p}:1048576"),
    ]);
}

#[test]
fn truncated_and_missing_storage_give_clear_errors() {
    let dir = scratch_dir();
    let f = sparse_file(dir.path(), "t.img", 2 * MIB);
    let p = f.display().to_string();
    lockd_ok(&["direct", "init", "-r", &format!("ls:res:{p}:1048576")]);
    // Cut the resource area short.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&f)
        .unwrap()
        .set_len(MIB + 64 * 1024)
        .unwrap();
    let before = whole_file(&f);
    let out = lockd(["direct", "dump", &p]);
    assert_one_line_error(&out, "truncated");
    let out = lockd([
        "direct",
        "read-leader",
        "-r",
        &format!("ls:res:{p}:2097152"),
    ]);
    assert_one_line_error(&out, "short read");
    assert!(whole_file(&f) == before);
    let out = lockd(["direct", "dump", "/var/tmp/does-not-exist-lockd"]);
    assert_one_line_error(&out, "cannot open");
}

#[test]
fn wrong_sector_size_for_a_4k_device_is_refused() {
    let dir = scratch_dir();
    let f = sparse_file(dir.path(), "4k.img", 16 * MIB);
    {
        let dev = LoopDevice::attach(&f, 4096);
        let d = dev.device.display().to_string();
        let out = lockd([
            "direct",
            "init",
            "-s",
            &format!("ls:0:{d}:0"),
            "-Z",
            "512",
            "-A",
            "1M",
        ]);
        assert_one_line_error(&out, "4096-byte logical sectors");
        // Past the end of the device.
        let out = lockd(["direct", "init", "-r", &format!("ls:r:{d}:{}", 12 * MIB)]);
        assert_one_line_error(&out, "past the end");
    }
    assert!(
        whole_file(&f).iter().all(|&b| b == 0),
        "refused init wrote to the device"
    );
}
