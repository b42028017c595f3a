//! Lockspace failure: when our delta lease is lost (here: overwritten on disk, a corrupt
//! renewal result that fails the lockspace at once), lease holders are fenced on sanlock's
//! schedule — killpath (or SIGTERM) during the grace period, SIGKILL after it.

mod common;

use std::os::unix::process::ExitStatusExt;
use std::process::Command;
use std::time::Instant;

use common::*;

const RES_OFF: u64 = 1 << 20;

fn corrupt_host1_delta_lease(disk: &std::path::Path) {
    // Overwrite host 1's delta-lease sector with garbage (O_DIRECT, one 512-byte sector).
    let out = run(Command::new("dd")
        .args([
            "if=/dev/urandom",
            "bs=512",
            "count=1",
            "conv=notrunc",
            "oflag=direct,sync",
        ])
        .arg(format!("of={}", disk.display())));
    assert!(out.status.success(), "dd failed: {out:?}");
}

fn holder_script(disk: &std::path::Path, killpath: Option<&str>) -> String {
    let kp = killpath
        .map(|k| format!("sanlock.killpath(b'{k}', [b'fence', b'vm1'], slkfd=fd)\n"))
        .unwrap_or_default();
    format!(
        "import sanlock, os, time\nD=b'{d}'\nfd = sanlock.register()\n{kp}\
         sanlock.acquire(b'ls1', b'res1', [(D, {RES_OFF})], slkfd=fd)\n\
         print(os.getpid())\ntime.sleep(600)\n",
        d = disk.display()
    )
}

fn setup(tag: &str) -> (Scratch, std::path::PathBuf) {
    require_tool("sanlock", "sanlock");
    require_tool("dd", "coreutils");
    require_python_sanlock();
    let s = Scratch::new(tag);
    let disk = s.file("disk", 4);
    init_lockspace("ls1", &disk, 0);
    init_resource("ls1", "res1", &disk, RES_OFF);
    (s, disk)
}

#[test]
fn failed_lockspace_sigterm_then_lease_abandoned() {
    let (s, disk) = setup("recov-term");
    let d = LockdDaemon::start_args(&s, "hostA", &["-g", "3"], &[]);
    d.python(&format!(
        "import sanlock\nsanlock.add_lockspace(b'ls1', 1, b'{}', 0, iotimeout=1)",
        disk.display()
    ));
    let mut holder = d.python_child(&holder_script(&disk, None));
    holder.line();
    let t0 = Instant::now();
    corrupt_host1_delta_lease(&disk);
    // The next renewal (≤ 2 s) sees the corruption; the holder gets SIGTERM (no killpath).
    let status = wait_child(&mut holder, 15);
    assert_eq!(
        status.signal(),
        Some(libc::SIGTERM),
        "holder should die by SIGTERM"
    );
    assert!(t0.elapsed().as_secs() <= 10, "took {:?}", t0.elapsed());
    let log = d.log_text();
    assert!(log.contains("lockspace failed"), "{}", tail(&log, 30));
    // The lockspace is no longer usable for new leases.
    let out = d.python(&format!(
        "import sanlock\nfd = sanlock.register()\ntry:\n    sanlock.acquire(b'ls1', b'res1', [(b'{}', {RES_OFF})], slkfd=fd)\n    print('acquired')\nexcept sanlock.SanlockException as e:\n    print('errno', e.errno)\n",
        disk.display()
    ));
    assert_eq!(
        out.trim(),
        "errno 28",
        "ENOSPC expected on a failed lockspace"
    );
}

#[test]
fn failed_lockspace_killpath_then_sigkill_after_grace() {
    let (s, disk) = setup("recov-kp");
    let marker = s.dir.join("killpath.out");
    let script = s.dir.join("fence.sh");
    std::fs::write(
        &script,
        format!("#!/bin/sh\necho \"$@\" >> {}\n", marker.display()),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let d = LockdDaemon::start_args(&s, "hostA", &["-g", "3"], &[]);
    d.python(&format!(
        "import sanlock\nsanlock.add_lockspace(b'ls1', 1, b'{}', 0, iotimeout=1)",
        disk.display()
    ));
    let mut holder = d.python_child(&holder_script(&disk, Some(&script.display().to_string())));
    holder.line();
    let t0 = Instant::now();
    corrupt_host1_delta_lease(&disk);
    assert!(
        wait_for(10, || std::fs::read_to_string(&marker)
            .is_ok_and(|t| t.contains("fence vm1"))),
        "killpath did not run; log:\n{}",
        tail(&d.log_text(), 30)
    );
    // The killpath here does not kill; once the grace period (3 s past
    // id_renewal_fail from the last renewal) is over, SIGKILL follows.
    let status = wait_child(&mut holder, 30);
    assert_eq!(
        status.signal(),
        Some(libc::SIGKILL),
        "holder should die by SIGKILL"
    );
    assert!(t0.elapsed().as_secs() <= 20, "took {:?}", t0.elapsed());
    // The killpath ran exactly once.
    let runs = std::fs::read_to_string(&marker).unwrap().lines().count();
    assert_eq!(runs, 1);
}

fn wait_child(c: &mut PyChild, secs: u64) -> std::process::ExitStatus {
    let deadline = Instant::now() + std::time::Duration::from_secs(secs);
    loop {
        if let Some(st) = c.child.try_wait().expect("wait") {
            return st;
        }
        assert!(
            Instant::now() < deadline,
            "holder still alive after {secs} s"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}
