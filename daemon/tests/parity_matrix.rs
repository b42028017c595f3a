//! Parity matrix: the daemon-facing python3-sanlock calls (daemon/tests/py/parity.py:
//! write/read lockspace and resource, read_resource_owners, add/inq/rem lockspace,
//! acquire/release/inquire, set/get_lvb, request, get_hosts) against a real sanlock
//! 3.8 daemon and against lockd, on four storage kinds — a 512-byte loop device, a
//! 4096-byte loop device, a regular file on ext4 (/var/tmp), a regular file on ext4 made
//! over a 4096-byte loop device — each with the right geometry, a wrong sector size, a
//! wrong align size and empty names. Every daemon gets fresh zeroed storage of its own.
//! The test prints the table `call | variant | storage | sanlock | lockd` and fails on
//! any difference not listed, with its reason, under "Differences from sanlock" in
//! docs/daemon.md. Refused calls that could write report whether the area changed
//! (hashed before and after), so "nothing written" is compared too.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;
use lockd_system_tests::LoopDevice;

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/py/parity.py");
const DOC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/daemon.md");
const MIB: u64 = 1 << 20;

/// An ext4 filesystem on a 4096-byte-sector loop device, mounted under the scratch dir;
/// unmounted (then the loop device detached by its own guard) on drop.
struct Ext4On4k {
    mnt: PathBuf,
    _lo: LoopDevice,
}

impl Ext4On4k {
    fn new(s: &Scratch) -> Ext4On4k {
        require_tool("mkfs.ext4", "e2fsprogs");
        let img = s.file("ext4-4k.img", 256);
        let lo = LoopDevice::attach(&img, 4096);
        let out = run(Command::new("mkfs.ext4").args(["-q", "-F"]).arg(&lo.device));
        assert!(out.status.success(), "mkfs.ext4: {}", stdout(&out));
        let mnt = s.dir.join("mnt4k");
        std::fs::create_dir_all(&mnt).expect("mkdir mount point");
        let out = run(Command::new("mount").arg(&lo.device).arg(&mnt));
        assert!(
            out.status.success(),
            "mount: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ext4On4k { mnt, _lo: lo }
    }

    fn file(&self, name: &str) -> PathBuf {
        let p = self.mnt.join(name);
        let f = std::fs::File::create(&p).expect("create file on the 4K ext4");
        f.set_len(64 * MIB).expect("size file");
        p
    }
}

impl Drop for Ext4On4k {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.mnt).status();
    }
}

#[derive(Debug, Clone)]
struct Row {
    call: String,
    variant: String,
    result: String,
}

fn run_script(run_dir: &Path, disk: &Path, sector: u32, who: &str) -> Vec<Row> {
    let out = run(Command::new(PYTHON)
        .arg(SCRIPT)
        .arg(disk)
        .arg(sector.to_string())
        .env("SANLOCK_RUN_DIR", run_dir));
    assert!(
        out.status.success(),
        "parity.py against {who} on {} failed: {}\n{}",
        disk.display(),
        String::from_utf8_lossy(&out.stderr),
        stdout(&out)
    );
    stdout(&out)
        .lines()
        .map(|l| {
            let v: serde_json::Value =
                serde_json::from_str(l).unwrap_or_else(|e| panic!("bad line {l:?}: {e}"));
            Row {
                call: v["call"].as_str().unwrap_or_default().to_string(),
                variant: v["variant"].as_str().unwrap_or_default().to_string(),
                result: match &v["result"] {
                    serde_json::Value::String(s) => s.clone(),
                    other => other.to_string(),
                },
            }
        })
        .collect()
}

/// Allowed differences from docs/daemon.md: in the section "Differences from sanlock",
/// each bullet `- matrix: `CALL / VARIANT` on `STORAGE`[, `STORAGE`…]: reason`.
fn allowed_differences() -> Vec<(String, String)> {
    let doc = std::fs::read_to_string(DOC).expect("read docs/daemon.md");
    let section = doc
        .split("## Differences from sanlock")
        .nth(1)
        .expect("docs/daemon.md has a \"Differences from sanlock\" section");
    let section = section.split("\n## ").next().unwrap_or_default();
    let mut allowed = Vec::new();
    for line in section.lines() {
        let Some(rest) = line.trim_start().strip_prefix("- matrix: ") else {
            continue;
        };
        let ticks: Vec<&str> = rest.split('`').skip(1).step_by(2).collect();
        let (Some(key), reason) = (ticks.first(), rest.rsplit_once("`: ")) else {
            continue;
        };
        assert!(
            reason.is_some_and(|(_, r)| !r.trim().is_empty()),
            "difference without a reason in docs/daemon.md: {line}"
        );
        for storage in &ticks[1..] {
            allowed.push((key.to_string(), storage.to_string()));
        }
    }
    allowed
}

#[test]
fn python_sanlock_calls_match_sanlock_on_every_storage_kind_and_geometry() {
    require_python_sanlock();
    let s = Scratch::new("parity");
    let ext4 = Ext4On4k::new(&s);
    // Two of each storage kind: one for sanlock, one for lockd.
    let b512 = [s.file("l512-a", 64), s.file("l512-b", 64)];
    let b4k = [s.file("l4k-a", 64), s.file("l4k-b", 64)];
    let lo512: Vec<LoopDevice> = b512.iter().map(|f| LoopDevice::attach(f, 512)).collect();
    let lo4k: Vec<LoopDevice> = b4k.iter().map(|f| LoopDevice::attach(f, 4096)).collect();
    let kinds: Vec<(&str, u32, [PathBuf; 2])> = vec![
        (
            "512-loop",
            512,
            [lo512[0].device.clone(), lo512[1].device.clone()],
        ),
        (
            "4k-loop",
            4096,
            [lo4k[0].device.clone(), lo4k[1].device.clone()],
        ),
        (
            "ext4-file",
            512,
            [s.file("file-a", 64), s.file("file-b", 64)],
        ),
        (
            "4k-ext4-file",
            4096,
            [ext4.file("file-a"), ext4.file("file-b")],
        ),
    ];

    let sl = lockd_system_tests::SanlockDaemon::start("pm-sanlock");
    let lk = LockdDaemon::start(&s, "pm-lockd", &[]);
    let mut table = format!(
        "{:<21} | {:<22} | {:<12} | {:<44} | {:<44} | same\n",
        "call", "variant", "storage", "sanlock", "lockd"
    );
    let allowed = allowed_differences();
    let mut unexplained = Vec::new();
    let mut rows = 0;
    for (kind, sector, paths) in &kinds {
        let a = run_script(sl.run_dir.path(), &paths[0], *sector, "sanlock");
        let b = run_script(&lk.run_dir, &paths[1], *sector, "lockd");
        assert_eq!(a.len(), b.len(), "{kind}: different number of calls");
        for (x, y) in a.iter().zip(&b) {
            assert_eq!((&x.call, &x.variant), (&y.call, &y.variant), "{kind}");
            rows += 1;
            let key = format!("{} / {}", x.call, x.variant);
            let same = if x.result == y.result {
                "yes"
            } else if allowed.contains(&(key.clone(), kind.to_string())) {
                "documented"
            } else {
                unexplained.push(format!("{key} on {kind}"));
                "NO"
            };
            table.push_str(&format!(
                "{:<21} | {:<22} | {:<12} | {:<44} | {:<44} | {same}\n",
                x.call, x.variant, kind, x.result, y.result
            ));
        }
    }
    println!("{table}");
    println!("{rows} rows, {} unexplained", unexplained.len());
    assert!(rows > 200, "too few rows: {rows}");
    assert!(
        unexplained.is_empty(),
        "differences not listed in docs/daemon.md \"Differences from sanlock\": {unexplained:?}\n{table}\nlockd log:\n{}",
        tail(&lk.log_text(), 40)
    );
    drop(sl);
    drop(lk);
}
