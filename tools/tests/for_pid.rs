//! `lockd acquire --for-pid` and the libvirt hook built on it, against a real lockd
//! daemon on a loop device: leases held for a process that never registered, released when
//! it exits; its killpath (pid appended) run on a GRACEFUL request; refusals (no such pid,
//! a zombie, another user's process) with nothing held; and packaging/libvirt/qemu-hook
//! called the way libvirt calls it.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use lockd_system_tests::{
    join_lockspace, lease_device, lockd_cli, require_command, scratch_dir, LockdProc, LoopDevice,
};

const LOCKD: &str = env!("CARGO_BIN_EXE_lockd");

/// Fields drop in order: the daemon stops, the loop device is detached, then the scratch
/// directory with its backing file goes.
struct Setup {
    dir: PathBuf,
    dev: String,
    _daemon: LockdProc,
    run_dir: PathBuf,
    _loop: LoopDevice,
    _tmp: tempfile::TempDir,
}

fn setup(host: &str) -> Setup {
    let tmp = scratch_dir();
    let dir = tmp.path().to_path_buf();
    let (lo, dev) = lease_device(LOCKD, &dir, "fp", &[("vm1", "1M"), ("vm2", "2M")]);
    let daemon = LockdProc::start(LOCKD, &dir, host);
    let run_dir = daemon.run_dir.clone();
    join_lockspace(LOCKD, &run_dir, "fp", 1, &dev);
    Setup {
        _tmp: tmp,
        dir,
        dev,
        _daemon: daemon,
        run_dir,
        _loop: lo,
    }
}

impl Setup {
    fn lockd(&self, args: &[&str]) -> (bool, String) {
        lockd_cli(LOCKD, &self.run_dir, args)
    }

    fn res(&self, name: &str, off: &str) -> String {
        format!("fp:{name}:{}:{off}", self.dev)
    }

    fn state(&self, name: &str, off: &str) -> String {
        let (ok, out) = self.lockd(&["leader", "-r", &self.res(name, off), "--json"]);
        assert!(ok, "{out}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        v["state"].as_str().unwrap().to_string()
    }

    fn wait_state(&self, name: &str, off: &str, want: &str) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.state(name, off) != want {
            assert!(Instant::now() < deadline, "{name} never became {want}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

struct Sleeper(Child);

impl Sleeper {
    fn start(cmd: &mut Command) -> Sleeper {
        Sleeper(cmd.stdin(Stdio::null()).spawn().expect("start sleeper"))
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Sleeper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn leases_follow_the_process_life() {
    let s = setup("fphost");
    let mut p = Sleeper::start(Command::new("sleep").arg("1000"));
    let pid = p.pid().to_string();
    let (ok, out) = s.lockd(&[
        "acquire",
        "-r",
        &s.res("vm1", "1M"),
        "-r",
        &s.res("vm2", "2M"),
        "--for-pid",
        &pid,
    ]);
    assert!(ok, "{out}");
    let (ok, out) = s.lockd(&["inquire", "-p", &pid]);
    assert!(
        ok && out.contains("fp:vm1:") && out.contains("fp:vm2:"),
        "{out}"
    );
    assert_eq!(s.state("vm1", "1M"), "live");
    // The same lease again, or for the same pid again: refused, nothing changes.
    let (ok, out) = s.lockd(&["acquire", "-r", &s.res("vm1", "1M"), "--for-pid", &pid]);
    assert!(!ok && out.contains("(-17)"), "{out}");
    // The process exits: the daemon releases both leases.
    let _ = p.0.kill();
    let _ = p.0.wait();
    s.wait_state("vm1", "1M", "none");
    s.wait_state("vm2", "2M", "none");
}

#[test]
fn refusals_hold_nothing() {
    require_command("setpriv", "util-linux");
    let s = setup("fpbad");
    let res = s.res("vm1", "1M");
    // No such process.
    let (ok, out) = s.lockd(&["acquire", "-r", &res, "--for-pid", "999999999"]);
    assert!(!ok && out.contains("no such process"), "{out}");
    // A zombie: exited, not yet reaped by its parent.
    let mut z = Command::new("true").spawn().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let (ok, out) = s.lockd(&["acquire", "-r", &res, "--for-pid", &z.id().to_string()]);
    assert!(!ok && out.contains("(-3)"), "zombie: {out}");
    let _ = z.wait();
    // Another user's process, asked by a non-root caller: -EPERM. Let uid 65534 reach the
    // socket at all (the daemon's own check is what is tested).
    let sock = s.run_dir.join("sanlock.sock");
    std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o666)).unwrap();
    std::fs::set_permissions(&s.run_dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let root_proc = Sleeper::start(Command::new("sleep").arg("1000"));
    let as_nobody = |pid: u32| {
        Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", LOCKD])
            .args(["acquire", "-r", &res, "--for-pid", &pid.to_string()])
            .env("LOCKD_RUN_DIR", &s.run_dir)
            .output()
            .unwrap()
    };
    let out = as_nobody(root_proc.pid());
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && text.contains("another user"),
        "{text}"
    );
    assert_eq!(s.state("vm1", "1M"), "none", "nothing held after refusals");
    // The same caller may hold a lease for its own process, on a device it can open
    // (the daemon opens it with the caller's rights: group `disk` here).
    let own = Sleeper::start(Command::new("setpriv").args([
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "sleep",
        "1000",
    ]));
    std::thread::sleep(Duration::from_millis(200));
    let out = as_nobody(own.pid());
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && text.contains("(-13)"),
        "a device the caller cannot open: {text}"
    );
    assert_eq!(s.state("vm1", "1M"), "none");
    let _access = DiskGroupAccess::grant(&s.dev);
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534"])
        .arg(format!("--groups={}", disk_gid()))
        .arg(LOCKD)
        .args(["acquire", "-r", &res, "--for-pid", &own.pid().to_string()])
        .env("LOCKD_RUN_DIR", &s.run_dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(s.state("vm1", "1M"), "live");
    drop(own);
    s.wait_state("vm1", "1M", "none");
}

#[test]
fn killpath_runs_with_the_pid_on_a_graceful_request() {
    let s = setup("fpkill");
    let marker = s.dir.join("killpath.out");
    let script = s.dir.join("killpath.sh");
    std::fs::write(
        &script,
        format!("#!/bin/sh\necho \"$@\" >> {}\n", marker.display()),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let p = Sleeper::start(Command::new("sleep").arg("1000"));
    let pid = p.pid().to_string();
    let (ok, out) = s.lockd(&[
        "acquire",
        "-r",
        &s.res("vm1", "1M"),
        "--for-pid",
        &pid,
        "--killpath",
        &script.display().to_string(),
        "--killpath-args",
        "--action pause",
    ]);
    assert!(ok, "{out}");
    let (ok, out) = s.lockd(&[
        "request",
        "-r",
        &s.res("vm1", "1M"),
        "--next-lver",
        "-f",
        "graceful",
    ]);
    assert!(ok, "request: {out}");
    let (ok, out) = s.lockd(&["examine", "-s", "fp"]);
    assert!(ok, "examine: {out}");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(text) = std::fs::read_to_string(&marker) {
            assert_eq!(text.trim(), format!("--action pause {pid}"), "{text}");
            break;
        }
        assert!(Instant::now() < deadline, "killpath never ran");
        std::thread::sleep(Duration::from_millis(100));
    }
    // GRACEFUL runs the killpath instead of a signal: the process is still there.
    assert!(Path::new(&format!("/proc/{pid}")).exists());
}

/// Group `disk` (gid 6 on Debian).
fn disk_gid() -> u32 {
    lockd_config::group_to_gid("disk").expect("group disk")
}

/// Gives the device node udev's usual owner and mode (root:disk 0660; a container without
/// udev leaves loop nodes root:root 0600), restoring what it was on drop.
struct DiskGroupAccess {
    dev: PathBuf,
    was: (u32, u32, u32),
}

impl DiskGroupAccess {
    fn grant(dev: &str) -> DiskGroupAccess {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(dev).expect("device node");
        std::os::unix::fs::chown(dev, Some(0), Some(disk_gid())).unwrap();
        std::fs::set_permissions(dev, std::fs::Permissions::from_mode(0o660)).unwrap();
        DiskGroupAccess {
            dev: PathBuf::from(dev),
            was: (m.uid(), m.gid(), m.mode() & 0o7777),
        }
    }
}

impl Drop for DiskGroupAccess {
    fn drop(&mut self) {
        let (uid, gid, mode) = self.was;
        let _ = std::os::unix::fs::chown(&self.dev, Some(uid), Some(gid));
        let _ = std::fs::set_permissions(&self.dev, std::fs::Permissions::from_mode(mode));
    }
}

/// The killpath given with `--for-pid` by a non-root caller runs as that caller's uid
/// and groups, not as root (issue 21, item 3).
#[test]
fn killpath_of_a_non_root_caller_runs_as_its_uid() {
    require_command("setpriv", "util-linux");
    let s = setup("fpkilluid");
    // Let uid 65534 reach the socket, its killpath and an output directory.
    let sock = s.run_dir.join("sanlock.sock");
    std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o666)).unwrap();
    std::fs::set_permissions(&s.run_dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&s.dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out_dir = s.dir.join("out");
    std::fs::create_dir(&out_dir).unwrap();
    std::fs::set_permissions(&out_dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let marker = out_dir.join("killpath.ids");
    let script = s.dir.join("killpath.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\necho \"$(id -u) $(id -G)\" >> {}\n",
            marker.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let _access = DiskGroupAccess::grant(&s.dev);
    let gid = disk_gid();
    let own = Sleeper::start(Command::new("setpriv").args([
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "sleep",
        "1000",
    ]));
    std::thread::sleep(Duration::from_millis(200));
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534"])
        .arg(format!("--groups={gid}"))
        .arg(LOCKD)
        .args(["acquire", "-r", &s.res("vm1", "1M"), "--for-pid"])
        .arg(own.pid().to_string())
        .args(["--killpath", &script.display().to_string()])
        .env("LOCKD_RUN_DIR", &s.run_dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let res = s.res("vm1", "1M");
    let (ok, out) = s.lockd(&["request", "-r", &res, "--next-lver", "-f", "graceful"]);
    assert!(ok, "request: {out}");
    let (ok, out) = s.lockd(&["examine", "-s", "fp"]);
    assert!(ok, "examine: {out}");
    let deadline = Instant::now() + Duration::from_secs(10);
    let text = loop {
        if let Ok(text) = std::fs::read_to_string(&marker) {
            break text;
        }
        assert!(Instant::now() < deadline, "killpath never ran");
        std::thread::sleep(Duration::from_millis(100));
    };
    let ids: Vec<&str> = text.split_whitespace().collect();
    assert_eq!(ids.first(), Some(&"65534"), "killpath ran as: {text}");
    assert!(
        ids[1..].contains(&gid.to_string().as_str()),
        "groups: {text}"
    );
    assert!(!ids[1..].contains(&"0"), "root's group: {text}");
}

fn hook() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../packaging/libvirt/qemu-hook")
}

fn run_hook(s: &Setup, conf: &Path, piddir: &Path, domain: &str, op: &str) -> (bool, String) {
    let mut child = Command::new(hook())
        .args([domain, op, "begin", "-"])
        .env("LOCKD_BIN", LOCKD)
        .env("LOCKD_KILLPATH", "/nonexistent")
        .env("LOCKD_HOOK_CONF", conf)
        .env("LOCKD_LIBVIRT_PID_DIR", piddir)
        .env("LOCKD_RUN_DIR", &s.run_dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let xml = format!(
        "<domain type='qemu'>\n  <name>{domain}</name>\n  <uuid>6b1d3c1e-3f5a-4c6e-9b1a-0d2f1e3c4b5a</uuid>\n</domain>\n"
    );
    // The hook reads the XML only when it acts: a closed pipe is fine.
    let _ = child.stdin.take().unwrap().write_all(xml.as_bytes());
    let out = child.wait_with_output().unwrap();
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

#[test]
fn libvirt_hook_protects_a_domain() {
    let s = setup("fphook");
    let conf = s.dir.join("libvirt-leases.conf");
    std::fs::write(
        &conf,
        format!(
            "# test\nvm1 {}\nvm1-copy {}   # same disk as vm1\n",
            s.res("vm1", "1M"),
            s.res("vm1", "1M")
        ),
    )
    .unwrap();
    let piddir = s.dir.join("qemu");
    std::fs::create_dir_all(&piddir).unwrap();
    // "QEMU" of vm1 starts; libvirt calls the hook at "started".
    let q1 = Sleeper::start(Command::new("sleep").arg("1000"));
    std::fs::write(piddir.join("vm1.pid"), q1.pid().to_string()).unwrap();
    let (ok, out) = run_hook(&s, &conf, &piddir, "vm1", "prepare");
    assert!(
        ok && s.state("vm1", "1M") == "none",
        "other operations do nothing: {out}"
    );
    let (ok, out) = run_hook(&s, &conf, &piddir, "vm1", "started");
    assert!(ok, "{out}");
    assert_eq!(s.state("vm1", "1M"), "live");
    // A second domain on the same disk: its hook fails and kills its QEMU.
    let mut q2 = Command::new("sleep").arg("1000").spawn().unwrap();
    std::fs::write(piddir.join("vm1-copy.pid"), q2.id().to_string()).unwrap();
    let (ok, out) = run_hook(&s, &conf, &piddir, "vm1-copy", "started");
    assert!(!ok && out.contains("killing QEMU"), "{out}");
    let status = q2.wait().unwrap();
    assert!(!status.success(), "the second QEMU was killed");
    // A domain without leases, and a missing pid file.
    let (ok, out) = run_hook(&s, &conf, &piddir, "vm9", "started");
    assert!(ok, "{out}");
    std::fs::remove_file(piddir.join("vm1.pid")).unwrap();
    let (ok, out) = run_hook(&s, &conf, &piddir, "vm1", "started");
    assert!(!ok && out.contains("cannot read QEMU's pid"), "{out}");
    // vm1's QEMU exits: its lease is released by the daemon.
    drop(q1);
    s.wait_state("vm1", "1M", "none");
}

#[test]
fn lockspace_removal_kills_the_process_as_a_registered_client() {
    let s = setup("fprem");
    let mut p = Command::new("sleep").arg("1000").spawn().unwrap();
    let pid = p.id().to_string();
    let (ok, out) = s.lockd(&["acquire", "-r", &s.res("vm1", "1M"), "--for-pid", &pid]);
    assert!(ok, "{out}");
    let (ok, out) = s.lockd(&["rem-lockspace", "-s", &format!("fp:1:{}:0", s.dev)]);
    assert!(ok, "{out}");
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(st) = p.try_wait().unwrap() {
            break st;
        }
        assert!(Instant::now() < deadline, "the holder was not killed");
        std::thread::sleep(Duration::from_millis(100));
    };
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(libc::SIGKILL), "{status:?}");
}
