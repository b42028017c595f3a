//! A lockspace whose storage stalls (a hung SAN path, simulated with the project's FUSE
//! fault injector `lockd-faultfs`) enters recovery at id_renewal_fail = 8·io_timeout after
//! the last good renewal: the holder gets SIGTERM then, and SIGKILL when the kill grace
//! ends; its lease is dropped without disk I/O and the failed lockspace goes away.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

const RES_OFF: u64 = 1 << 20;

/// The fault injector built from this workspace (tests crate), built on demand.
fn faultfs_binary() -> PathBuf {
    let bin = Path::new(DAEMON).with_file_name("lockd-faultfs");
    if !bin.exists() {
        let st = Command::new(env!("CARGO"))
            .args([
                "build",
                "-p",
                "lockd-system-tests",
                "--bin",
                "lockd-faultfs",
            ])
            .status()
            .expect("run cargo to build lockd-faultfs");
        assert!(st.success(), "building lockd-faultfs failed");
    }
    assert!(bin.exists(), "lockd-faultfs not found at {}", bin.display());
    bin
}

/// A FUSE view of a backing image whose I/O can be stalled; unmounted on drop.
struct FaultFs {
    child: Child,
    mount: PathBuf,
    control: PathBuf,
}

impl FaultFs {
    fn start(s: &Scratch, backing: &Path) -> FaultFs {
        require_tool("fusermount", "fuse3");
        assert!(
            Path::new("/dev/fuse").exists(),
            "/dev/fuse is missing (FUSE support needed)"
        );
        let mount = s.dir.join("view");
        let control = s.dir.join("faultfs.sock");
        std::fs::create_dir_all(&mount).unwrap();
        let child = Command::new(faultfs_binary())
            .arg("--backing")
            .arg(backing)
            .arg("--mount")
            .arg(&mount)
            .arg("--control")
            .arg(&control)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start lockd-faultfs");
        let f = FaultFs {
            child,
            mount,
            control,
        };
        assert!(
            wait_for(10, || f.disk().exists()
                && UnixStream::connect(&f.control).is_ok()),
            "faultfs view never appeared"
        );
        f
    }

    fn disk(&self) -> PathBuf {
        self.mount.join("disk.img")
    }

    fn set(&self, mode: &str) {
        let mut c = UnixStream::connect(&self.control).expect("faultfs control");
        writeln!(c, "{mode}").unwrap();
        let mut line = String::new();
        BufReader::new(c).read_line(&mut line).unwrap();
        assert!(line.starts_with("ok"), "faultfs {mode}: {line}");
    }
}

impl Drop for FaultFs {
    fn drop(&mut self) {
        let _ = Command::new("fusermount")
            .arg("-u")
            .arg(&self.mount)
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = Command::new("fusermount")
            .args(["-u", "-z"])
            .arg(&self.mount)
            .status();
    }
}

#[test]
fn stalled_storage_enters_recovery_on_schedule() {
    require_tool("sanlock", "sanlock");
    require_python_sanlock();
    let s = Scratch::new("stall");
    let backing = s.file("backing", 8);
    init_lockspace("ls1", &backing, 0);
    init_resource("ls1", "res1", &backing, RES_OFF);
    let ffs = FaultFs::start(&s, &backing);
    let disk = ffs.disk();
    // Kill grace 3 s: SIGTERM at last_renewal + 8 s, SIGKILL at last_renewal + 11 s.
    let mut d = LockdDaemon::start_args(&s, "hostA", &["-g", "3"], &[]);
    d.python(&format!(
        "import sanlock\nsanlock.add_lockspace(b'ls1', 1, b'{}', 0, iotimeout=1)",
        disk.display()
    ));
    let mut holder = d.python_child(
        &[
            "import sanlock, signal, time, sys".to_string(),
            format!("D = b'{}'", disk.display()),
            "signal.signal(signal.SIGTERM, lambda *a: print('sigterm', flush=True))".to_string(),
            "fd = sanlock.register()".to_string(),
            format!("sanlock.acquire(b'ls1', b'res1', [(D, {RES_OFF})], slkfd=fd)"),
            "print('held', flush=True)".to_string(),
            "while True:".to_string(),
            "    time.sleep(0.1)".to_string(),
        ]
        .join("\n"),
    );
    assert_eq!(holder.line(), "held");
    // Let a renewal or two pass, then stall the storage.
    std::thread::sleep(Duration::from_secs(3));
    ffs.set("stall");
    let t0 = Instant::now();
    assert_eq!(holder.line(), "sigterm");
    let t_term = t0.elapsed().as_secs_f64();
    let status = loop {
        if let Some(st) = holder.child.try_wait().unwrap() {
            break st;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "holder was never SIGKILLed"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let t_kill = t0.elapsed().as_secs_f64();
    eprintln!("stall → SIGTERM after {t_term:.1} s, SIGKILL after {t_kill:.1} s");
    assert_eq!(status.signal(), Some(libc::SIGKILL));
    // The last good renewal was 0–2 s before the stall; checks run once a second.
    assert!((5.5..=9.5).contains(&t_term), "SIGTERM after {t_term:.1} s");
    assert!(
        (8.5..=12.5).contains(&t_kill),
        "SIGKILL after {t_kill:.1} s"
    );
    assert!(t_kill - t_term >= 2.0, "grace between SIGTERM and SIGKILL");
    let log = d.log_text();
    assert!(log.contains("lockspace failed"), "{}", tail(&log, 40));
    // With its holder gone the failed lockspace is removed (no disk I/O needed).
    let gone = wait_for(10, || {
        client_lib::Client::connect(&d.run_dir)
            .and_then(|mut c| c.get_lockspaces())
            .is_ok_and(|l| l.is_empty())
    });
    assert!(
        gone,
        "failed lockspace was not removed; log:\n{}",
        tail(&d.log_text(), 30)
    );
    ffs.set("pass");
    d.stop();
}
