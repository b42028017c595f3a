//! Storage fencing's configuration on a host without PR-capable storage (issue 24): a
//! lockspace named in `fence_lockspaces` whose device does not answer PERSISTENT RESERVE
//! (a loop device) is refused with -EOPNOTSUPP and a log line saying why, before anything
//! is written; a lockspace not named joins as always on the same daemon. What fencing
//! does on a real SCSI target (register, preempt, EBADE) runs in the VM bed
//! (`scripts/vmbed.sh pr-*`), since this host has no SCSI target of its own.

mod common;

use common::*;

#[test]
fn a_fenced_lockspace_on_a_device_without_pr_is_refused_before_any_write() {
    let scratch = Scratch::new("fencecfg");
    let img = scratch.file("disk.img", 8);
    let lo = Loop::attach(&img);
    init_lockspace("fls", &lo.dev, 0);
    init_lockspace("pls", &lo.dev, 1 << 20);
    let before = std::fs::read(&img).unwrap();
    let cfg = scratch.dir.join("lockd.toml");
    std::fs::write(
        &cfg,
        "fence = \"scsi-pr\"\nfence_lockspaces = [\"fls\"]\nfence_preempt_s = 5\n",
    )
    .unwrap();
    let d = LockdDaemon::start_args(&scratch, "hostA", &["-c", cfg.to_str().unwrap()], &[]);
    let out = d.sanlock_client(&[
        "add_lockspace",
        "-s",
        &format!("fls:1:{}:0", lo.dev.display()),
    ]);
    let text = stdout(&out);
    assert!(
        text.contains("-95"),
        "add_lockspace of a fenced lockspace on a loop device: {text}\n{}",
        tail(&d.log_text(), 30)
    );
    assert!(
        d.log_text()
            .contains("storage fencing is configured for this lockspace but cannot be used"),
        "{}",
        tail(&d.log_text(), 30)
    );
    let after = std::fs::read(&img).unwrap();
    assert!(before == after, "the refused join wrote to the disk");
    // The same daemon joins a lockspace fencing does not name.
    let out = d.sanlock_client(&[
        "add_lockspace",
        "-s",
        &format!("pls:1:{}:{}", lo.dev.display(), 1 << 20),
    ]);
    assert!(
        stdout(&out).contains("add_lockspace done 0"),
        "{}\n{}",
        stdout(&out),
        tail(&d.log_text(), 30)
    );
    let out = d.sanlock_client(&[
        "rem_lockspace",
        "-s",
        &format!("pls:1:{}:{}", lo.dev.display(), 1 << 20),
    ]);
    assert!(
        stdout(&out).contains("rem_lockspace done 0"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn a_bad_fence_setting_stops_the_daemon_with_a_clear_error() {
    let scratch = Scratch::new("fencebad");
    let cfg = scratch.dir.join("lockd.toml");
    std::fs::write(&cfg, "fence = \"scsi-pr\"\n").unwrap();
    let out = run(std::process::Command::new(DAEMON).args([
        "-D",
        "-w",
        "0",
        "-c",
        cfg.to_str().unwrap(),
        "--run-dir",
        scratch.dir.join("run").to_str().unwrap(),
    ]));
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("fence_lockspaces"), "{err}");
}
