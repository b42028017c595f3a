//! `lockd doctor` finds each planted problem with the right level and exit status: no
//! daemon (FAIL, 2), a socket made 0666 (FAIL, 2), another host of the lockspace with a
//! different io_timeout (WARN, 1), a host name a restart would change (WARN, 1), no wdmd
//! for a daemon that uses the watchdog (FAIL, 2); and the checks that should pass on a
//! sane daemon do (daemon, socket, storage latency, geometry, io_timeouts, host name,
//! and wdmd once a wdmd over the emulated watchdog answers); the PR line says a loop device
//! has no persistent reservations.
//!
//! Needs root (loop device) and `mount` (losetup). Every daemon is stopped by PID.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use client_lib::{Client, Lockspace};
use disk_format::Name;
use lockd_system_tests::{require_root, scratch_dir, sparse_file, LoopDevice};
use serde_json::Value;

const LOCKD: &str = env!("CARGO_BIN_EXE_lockd");

/// A `lockd daemon -D` with chosen -w, config, host name and wdmd dir; stopped by PID.
struct Daemon {
    child: Child,
    run_dir: PathBuf,
}

impl Daemon {
    fn start(dir: &Path, name: &str, watchdog: &str, config: &Path, wdmd_dir: &Path) -> Daemon {
        let run_dir = dir.join(format!("run-{name}"));
        let log = std::fs::File::create(dir.join(format!("{name}.log"))).unwrap();
        let child = Command::new(LOCKD)
            .args(["daemon", "-D", "-w", watchdog, "-o", "1", "-e", name, "-c"])
            .arg(config)
            .arg("--run-dir")
            .arg(&run_dir)
            .env("WDMD_RUN_DIR", wdmd_dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start lockd daemon");
        let deadline = Instant::now() + Duration::from_secs(10);
        while Client::connect(&run_dir).is_err() {
            assert!(Instant::now() < deadline, "daemon {name} did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        Daemon { child, run_dir }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Ok(mut c) = Client::connect(&self.run_dir) {
            let _ = c.shutdown(true, false);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A child process killed by PID on drop.
struct Kid(Child);

impl Drop for Kid {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn wait_path(p: &Path) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !p.exists() {
        assert!(Instant::now() < deadline, "{} never appeared", p.display());
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The workspace's wdmd and wdmd-emulator, built if needed (as scripts/test-all.sh builds
/// before the tests, `--workspace --bins --examples`: the same features, nothing rebuilt).
fn wdmd_binaries() -> (PathBuf, PathBuf) {
    let st = Command::new(env!("CARGO"))
        .args(["build", "--workspace", "--bins", "--examples"])
        .status()
        .expect("run cargo to build wdmd");
    assert!(st.success(), "building wdmd failed");
    let dir = Path::new(LOCKD).parent().unwrap();
    (dir.join("wdmd"), dir.join("wdmd-emulator"))
}

/// Runs `lockd doctor --json ARGS`; returns (exit code, parsed report).
fn doctor(run_dir: &Path, config: &Path, wdmd_dir: &Path, extra: &[&str]) -> (i32, Value) {
    let out = Command::new(LOCKD)
        .arg("doctor")
        .arg("--json")
        .arg("--run-dir")
        .arg(run_dir)
        .arg("-c")
        .arg(config)
        .arg("--wdmd-run-dir")
        .arg(wdmd_dir)
        .args(["--watchdog-device", "/nonexistent/watchdog"])
        .args(extra)
        .output()
        .expect("run lockd doctor");
    let text = String::from_utf8_lossy(&out.stdout);
    let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| {
        panic!(
            "doctor --json is not JSON ({e}): {text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let code = out.status.code().expect("doctor exited by a signal");
    assert_eq!(
        v["exit_status"].as_i64(),
        Some(i64::from(code)),
        "exit status matches the report"
    );
    (code, v)
}

/// The levels of every check called `name` (one per lockspace for per-lockspace checks).
fn levels(v: &Value, name: &str) -> Vec<String> {
    v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["check"] == name)
        .map(|c| c["level"].as_str().unwrap().to_string())
        .collect()
}

fn detail(v: &Value, name: &str) -> String {
    v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["check"] == name)
        .map(|c| format!("{} | fix: {}", c["detail"], c["fix"]))
        .collect::<Vec<_>>()
        .join("\n")
}

fn show(label: &str, code: i32, v: &Value) {
    println!("--- {label}: exit {code}");
    for c in v["checks"].as_array().unwrap() {
        println!("{} {} {}", c["level"], c["check"], c["detail"]);
    }
}

#[test]
fn doctor_finds_each_planted_problem() {
    require_root("loop device, daemon run dirs");
    let dir = scratch_dir();
    let d = dir.path();
    let no_wdmd = d.join("no-wdmd");
    std::fs::create_dir_all(&no_wdmd).unwrap();
    let cfg_a = d.join("a.toml");
    std::fs::write(&cfg_a, "our_host_name = \"hostA\"\n").unwrap();
    let empty_cfg = d.join("empty.toml");
    std::fs::write(&empty_cfg, "").unwrap();

    // 1. No daemon.
    let (code, v) = doctor(&d.join("run-none"), &cfg_a, &no_wdmd, &[]);
    show("no daemon", code, &v);
    assert_eq!(code, 2);
    assert_eq!(levels(&v, "daemon"), ["FAIL"]);
    assert_eq!(levels(&v, "socket"), ["FAIL"]);
    assert!(detail(&v, "daemon").contains("no daemon answers"));

    // A sane daemon (-w 0) joined to a lockspace on a loop device.
    let img = sparse_file(d, "disk.img", 8 << 20);
    let lo = LoopDevice::attach(&img, 512);
    let dev = lo.device.display().to_string();
    let a = Daemon::start(d, "hostA", "0", &cfg_a, &no_wdmd);
    let ls_name = Name::new("dls").unwrap();
    let ls1 = Lockspace::new(ls_name, 1, &dev, 0).unwrap();
    let mut c = Client::connect(&a.run_dir).unwrap();
    assert_eq!(c.write_lockspace(&ls1, 1).unwrap(), 0);
    assert_eq!(c.add_lockspace(&ls1, 1, 0).unwrap(), 0);
    std::thread::sleep(Duration::from_secs(3));
    let (code, v) = doctor(&a.run_dir, &cfg_a, &no_wdmd, &[]);
    show("sane daemon, watchdog off", code, &v);
    for name in [
        "daemon",
        "socket",
        "storage",
        "geometry",
        "io_timeouts",
        "host_name",
    ] {
        assert_eq!(levels(&v, name), ["PASS"], "{name}: {}", detail(&v, name));
    }
    // A loop device has no persistent reservations: said, informational (PASS).
    assert_eq!(levels(&v, "pr"), ["PASS"], "{}", detail(&v, "pr"));
    assert!(
        detail(&v, "pr").contains("does not take SCSI commands"),
        "{}",
        detail(&v, "pr")
    );
    // With storage fencing configured for this lockspace, the same device is a FAIL (the
    // daemon would refuse to join it).
    let cfg_f = d.join("fenced.toml");
    std::fs::write(
        &cfg_f,
        "our_host_name = \"hostA\"\nfence = \"scsi-pr\"\nfence_lockspaces = [\"dls\"]\n",
    )
    .unwrap();
    let (_, vf) = doctor(&a.run_dir, &cfg_f, &no_wdmd, &[]);
    assert_eq!(levels(&vf, "pr"), ["FAIL"], "{}", detail(&vf, "pr"));
    assert!(
        detail(&vf, "pr").contains("fence = scsi-pr"),
        "{}",
        detail(&vf, "pr")
    );
    // -w 0: the watchdog being off, its device and wdmd missing are warnings, not failures.
    assert_eq!(levels(&v, "watchdog"), ["WARN"]);
    assert_eq!(levels(&v, "wdmd"), ["WARN"]);
    // The daemon locked its memory at start (mlock defaults to true; we are root).
    assert_eq!(levels(&v, "memory"), ["PASS"], "{}", detail(&v, "memory"));
    // What it reports is what is held in memory, a few MiB and at most the RSS, not
    // VmLck (which counted every lock-on-fault mapping: "VmLck 863204 kB" for 11 MB).
    let memory = detail(&v, "memory");
    let figure = |after: &str| -> f64 {
        let at = memory
            .find(after)
            .unwrap_or_else(|| panic!("no {after:?} in {memory}"));
        memory[at + after.len()..]
            .split(" MiB")
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no MiB figure after {after:?} in {memory}"))
    };
    let (locked, rss) = (figure("locked in memory "), figure("(of RSS "));
    println!("memory: locked {locked} MiB of RSS {rss} MiB");
    assert!(
        locked > 0.0 && locked <= rss + 0.1 && rss < 256.0,
        "locked {locked} MiB, RSS {rss} MiB: {memory}"
    );
    assert_eq!(code, 1, "worst is WARN");

    // 2. Socket mode 0666.
    let sock = a.run_dir.join("sanlock.sock");
    std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o666)).unwrap();
    let (code, v) = doctor(&a.run_dir, &cfg_a, &no_wdmd, &[]);
    show("socket 0666", code, &v);
    assert_eq!(levels(&v, "socket"), ["FAIL"]);
    assert!(detail(&v, "socket").contains("0666"));
    assert!(detail(&v, "socket").contains("chmod 0660"));
    assert_eq!(code, 2);
    std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o660)).unwrap();

    // 3. Another host in the lockspace with io_timeout 2 (ours is 1).
    let cfg_b = d.join("b.toml");
    std::fs::write(&cfg_b, "our_host_name = \"hostB\"\n").unwrap();
    let b = Daemon::start(d, "hostB", "0", &cfg_b, &no_wdmd);
    let ls2 = Lockspace::new(ls_name, 2, &dev, 0).unwrap();
    assert_eq!(
        Client::connect(&b.run_dir)
            .unwrap()
            .add_lockspace(&ls2, 2, 0)
            .unwrap(),
        0
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let hosts = Client::connect(&a.run_dir)
            .unwrap()
            .get_hosts(ls_name, 0)
            .unwrap_or_default();
        if hosts.iter().any(|h| h.host_id == 2 && h.io_timeout == 2) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "host A never saw host 2: {hosts:?}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let (code, v) = doctor(&a.run_dir, &cfg_a, &no_wdmd, &[]);
    show("other host io_timeout 2", code, &v);
    assert_eq!(levels(&v, "io_timeouts"), ["WARN"]);
    assert!(
        detail(&v, "io_timeouts").contains("host 2 io_timeout 2 s"),
        "{}",
        detail(&v, "io_timeouts")
    );
    assert_eq!(code, 1);
    drop(b);

    // 4. Unstable host name: the daemon runs as "hostA" (-e) but the config has no
    // our_host_name, so a restart would use the derived name.
    let (code, v) = doctor(&a.run_dir, &empty_cfg, &no_wdmd, &[]);
    show("host name not configured", code, &v);
    assert_eq!(levels(&v, "host_name"), ["WARN"]);
    assert!(
        detail(&v, "host_name").contains("\\\"hostA\\\""),
        "{}",
        detail(&v, "host_name")
    );
    assert!(detail(&v, "host_name").contains("our_host_name"));
    assert_eq!(code, 1);
    assert_eq!(c.rem_lockspace(&ls1, 0).unwrap(), 0);
    drop(a);

    // 5. No wdmd for a daemon that uses the watchdog (-w 1).
    let w = Daemon::start(d, "hostW", "1", &empty_cfg, &no_wdmd);
    let (code, v) = doctor(&w.run_dir, &empty_cfg, &no_wdmd, &[]);
    show("watchdog on, no wdmd", code, &v);
    assert_eq!(levels(&v, "watchdog"), ["PASS"]);
    assert_eq!(levels(&v, "wdmd"), ["FAIL"]);
    assert!(detail(&v, "wdmd").contains("no wdmd socket"));
    assert_eq!(levels(&v, "watchdog-dev"), ["FAIL"]);
    assert_eq!(code, 2);

    // 6. The same daemon with a wdmd that answers (over the workspace's emulated watchdog
    // device, whose victim is a `sleep` of ours) and the daemon's fire timeout (60 s).
    let (wdmd_bin, emu_bin) = wdmd_binaries();
    let victim = Kid(Command::new("sleep").arg("600").spawn().unwrap());
    let emu_sock = d.join("emu.sock");
    let _emu = Kid(Command::new(emu_bin)
        .arg("--socket")
        .arg(&emu_sock)
        .arg("--state")
        .arg(d.join("emu.state"))
        .args([
            "--timeout",
            "60",
            "--kill",
            &format!("pid:{}", victim.0.id()),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start wdmd-emulator"));
    wait_path(&emu_sock);
    let wdmd_run = d.join("wdmd-run");
    let _wdmd = Kid(Command::new(wdmd_bin)
        .arg("-D")
        .arg("-w")
        .arg(format!("emu:{}", emu_sock.display()))
        .args(["--fire-timeout", "60", "--run-dir"])
        .arg(&wdmd_run)
        .arg("--marker")
        .arg(d.join("wdmd.shm"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start wdmd"));
    wait_path(&wdmd_run.join("wdmd.sock"));
    let (code, v) = doctor(&w.run_dir, &empty_cfg, &wdmd_run, &[]);
    show("watchdog on, wdmd answering", code, &v);
    assert_eq!(levels(&v, "wdmd"), ["PASS"], "{}", detail(&v, "wdmd"));
    assert!(detail(&v, "wdmd").contains("fire timeout 60 s"));

    // The text form carries the same verdicts and a fix line under each problem.
    let out = Command::new(LOCKD)
        .arg("doctor")
        .arg("--run-dir")
        .arg(&w.run_dir)
        .arg("-c")
        .arg(&empty_cfg)
        .arg("--wdmd-run-dir")
        .arg(&no_wdmd)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    println!("--- text form:\n{text}");
    assert_eq!(out.status.code(), Some(2));
    assert!(text.contains("FAIL  wdmd"), "{text}");
    assert!(text.contains("fix: start wdmd"), "{text}");
    assert!(text.trim_end().ends_with("worst: FAIL"), "{text}");
}
