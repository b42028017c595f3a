//! `lockd direct pr` on storage without persistent reservations (a loop device, a file, a
//! missing path): one clear error line, exit status 1, no panic, and the device's bytes
//! untouched, whatever the command. Needs root (losetup). The commands' success paths run
//! against a real SCSI target in the VM bed (scenario pr-basics of scripts/vmbed.sh).

use std::process::Output;

use lockd_system_tests::{run, scratch_dir, sparse_file, LoopDevice};

const LOCKD: &str = env!("CARGO_BIN_EXE_lockd");

fn lockd(args: &[&str]) -> Output {
    run(LOCKD, args)
}

/// Exit status 1, one stderr line starting "lockd: error", containing each of `needles`.
fn assert_refused(out: &Output, needles: &[&str]) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr: {err}");
    assert!(!err.contains("panicked"), "panic: {err}");
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "expected one error line, got: {err:?}");
    assert!(lines[0].starts_with("lockd: error: "), "{err}");
    for n in needles {
        assert!(lines[0].contains(n), "{:?} lacks {n:?}", lines[0]);
    }
}

#[test]
fn a_loop_device_has_no_persistent_reservations() {
    let dir = scratch_dir();
    let img = sparse_file(dir.path(), "img", 8 << 20);
    std::fs::write(&img, vec![0xa5u8; 8 << 20]).unwrap();
    let lo = LoopDevice::attach(&img, 512);
    let dev = lo.device.display().to_string();
    let why = "does not take SCSI commands (SG_IO";
    let out = lockd(&["direct", "pr", "probe", &dev]);
    assert_refused(&out, &["no persistent reservations", &dev, why]);
    assert!(
        out.stdout.is_empty(),
        "probe printed: {:?}",
        String::from_utf8_lossy(&out.stdout)
    );
    let key = "0x1000000000010001";
    for args in [
        vec!["read-keys", &dev],
        vec!["read-reservation", &dev],
        vec!["register", &dev, "--key", key],
        vec!["register", &dev, "--key", key, "--ignore-existing"],
        vec!["reserve", &dev, "--key", key],
        vec!["release", &dev, "--key", key],
        vec![
            "preempt",
            &dev,
            "--key",
            key,
            "--victim",
            "0x1000000000010002",
            "--abort",
        ],
        vec!["clear", &dev, "--key", key],
    ] {
        let mut all = vec!["direct", "pr"];
        all.extend(args.iter().copied());
        assert_refused(&lockd(&all), &[&dev, why]);
    }
    let json = lockd(&["direct", "pr", "probe", "--json", &dev]);
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).expect("probe --json");
    assert_eq!(v["supported"], false);
    assert!(v["interface"].is_null(), "{v}");
    assert!(v["error"].as_str().unwrap().contains(why), "{v}");
    // Each interface by hand: the error names the one asked for.
    assert_refused(
        &lockd(&["direct", "pr", "--interface", "block-pr", "read-keys", &dev]),
        &[&dev, "READ KEYS is not supported", "rejected it as invalid"],
    );
    assert_refused(
        &lockd(&["direct", "pr", "read-keys", "--interface", "sg-io", &dev]),
        &[&dev, why],
    );
    let json = lockd(&[
        "direct",
        "pr",
        "--interface",
        "sg-io",
        "probe",
        "--json",
        &dev,
    ]);
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).expect("probe --json");
    assert_eq!(v["interface"], "sg-io", "{v}");
    assert_eq!(v["supported"], false, "{v}");
    let out = lockd(&["direct", "pr", "--interface", "nvme", "probe", &dev]);
    assert_eq!(out.status.code(), Some(2), "a usage error");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("auto, block-pr or sg-io"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    drop(lo);
    assert!(
        std::fs::read(&img).unwrap().iter().all(|&b| b == 0xa5),
        "the device was written"
    );
}

#[test]
fn files_and_missing_paths() {
    let dir = scratch_dir();
    let img = sparse_file(dir.path(), "img", 1 << 20);
    let p = img.display().to_string();
    assert_refused(
        &lockd(&["direct", "pr", "read-keys", &p]),
        &[&p, "does not take SCSI commands", "Inappropriate ioctl"],
    );
    assert_refused(
        &lockd(&["direct", "pr", "probe", "/nonexistent/pr-device"]),
        &["/nonexistent/pr-device", "cannot open", "No such file"],
    );
}

#[test]
fn keys_and_arguments() {
    let out = lockd(&["direct", "pr", "key", "--host-id", "3", "--generation", "5"]);
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "0x1000000000050003\n");
    let out = lockd(&["direct", "pr", "key", "-i", "2000", "-g", "16777215"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "0x100000ffffff07d0\n");
    assert_refused(
        &lockd(&["direct", "pr", "key", "-i", "0", "-g", "1"]),
        &["host_id 0"],
    );
    assert_refused(
        &lockd(&["direct", "pr", "key", "-i", "1", "-g", "16777216"]),
        &["generation 16777216"],
    );
    // Argument errors are clap's (status 2), never a panic.
    for bad in [
        vec!["register", "/dev/null", "--key", "zz"],
        vec!["register", "/dev/null", "--key", "0x"],
        vec!["register", "/dev/null", "--key", "0x11112222333344445"],
        vec!["reserve", "/dev/null", "--key", "1", "--type", "shared"],
    ] {
        let mut all = vec!["direct", "pr"];
        all.extend(bad.iter().copied());
        let out = lockd(&all);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bad:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
    // Keys that cannot be meant are refused before the device is opened.
    assert_refused(
        &lockd(&["direct", "pr", "register", "/dev/null", "--key", "0"]),
        &["--key 0 unregisters"],
    );
    assert_refused(
        &lockd(&["direct", "pr", "preempt", "/dev/null", "-k", "5", "-v", "5"]),
        &["own --key"],
    );
    assert_refused(
        &lockd(&["direct", "pr", "preempt", "/dev/null", "-k", "5", "-v", "0"]),
        &["--victim 0"],
    );
    assert_refused(
        &lockd(&["direct", "pr", "clear", "/dev/null", "-k", "0"]),
        &["--key 0"],
    );
}
