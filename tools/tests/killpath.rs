//! `lockd-killpath`, run by lockd's helper as a registered client's killpath:
//!
//! * `killpath_acts_before_escalation`: two holders registered with
//!   `--killpath lockd-killpath --killpath-args "--signal=TERM --log=FILE"` on a lockspace
//!   whose storage (a `lockd-faultfs` FUSE view) stalls. The daemon runs the killpath
//!   first, for both; the holder that exits on SIGTERM gets nothing more, the one that
//!   ignores it gets SIGKILL from the daemon after the kill grace. The killpath's exit
//!   status is in the daemon log and in the client's STATUS (`killpath_status=exit:0`).
//! * `killpath_pauses_and_destroys_a_libvirt_guest`: a private libvirtd (its own mount
//!   namespace, socket in /run/lkvPID) runs a small TCG guest (64 MiB, no disk: it sits in
//!   SeaBIOS). A holder registered for the VM with `--action=pause`, then one with
//!   `--action=destroy`, each gets a GRACEFUL request from a second host: the daemon runs
//!   lockd-killpath, and `virsh domstate` says paused, then shut off.

use std::fs::{self, File};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use lockd_system_tests::{
    lockd_cli, require_command, require_root, run_ok, scratch_dir, sparse_file,
};

const LOCKD: &str = env!("CARGO_BIN_EXE_lockd");
const KILLPATH: &str = env!("CARGO_BIN_EXE_lockd-killpath");

/// A `lockd daemon -D -w 0 -o 1 -g GRACE` with its log in a file; forced shutdown, then
/// SIGKILL by PID on drop.
struct Daemon {
    child: Child,
    run: PathBuf,
    log: PathBuf,
}

impl Daemon {
    fn start(dir: &Path, name: &str, grace_s: u32) -> Daemon {
        let run = dir.join(format!("run-{name}"));
        let log = dir.join(format!("{name}.log"));
        let f = File::create(&log).expect("daemon log");
        let child = Command::new(LOCKD)
            .args([
                "daemon",
                "-D",
                "-w",
                "0",
                "-c",
                "/dev/null",
                "-o",
                "1",
                "-e",
                name,
            ])
            .arg("-g")
            .arg(grace_s.to_string())
            .arg("--run-dir")
            .arg(&run)
            .stdin(Stdio::null())
            .stdout(f.try_clone().expect("dup"))
            .stderr(f)
            .spawn()
            .expect("start lockd daemon");
        let deadline = Instant::now() + Duration::from_secs(10);
        while UnixStream::connect(run.join("sanlock.sock")).is_err() {
            assert!(Instant::now() < deadline, "daemon {name} did not start");
            thread::sleep(Duration::from_millis(50));
        }
        Daemon { child, run, log }
    }

    fn cli(&self, args: &[&str]) -> (bool, String) {
        lockd_cli(LOCKD, &self.run, args)
    }

    fn cli_ok(&self, args: &[&str]) -> String {
        let (ok, out) = self.cli(args);
        assert!(
            ok,
            "lockd {args:?}: {out}\ndaemon log:\n{}",
            self.log_text()
        );
        out
    }

    fn log_text(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.cli(&["shutdown", "-f"]);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A `lockd acquire … -- COMMAND` holder, killed by PID on drop.
struct Holder {
    child: Child,
    out: PathBuf,
}

impl Holder {
    fn start(d: &Daemon, res: &str, killpath_args: &str, command: &[&str], out: PathBuf) -> Holder {
        Holder::start_with(d, res, KILLPATH, killpath_args, command, out)
    }

    fn start_with(
        d: &Daemon,
        res: &str,
        killpath: &str,
        killpath_args: &str,
        command: &[&str],
        out: PathBuf,
    ) -> Holder {
        assert!(
            killpath_args.len() < 128,
            "killpath args too long: {killpath_args}"
        );
        let f = File::create(&out).expect("holder output");
        let child = Command::new(LOCKD)
            .args([
                "acquire",
                "-r",
                res,
                "--killpath",
                killpath,
                "--killpath-args",
            ])
            .arg(killpath_args)
            .arg("--")
            .args(command)
            .env("LOCKD_RUN_DIR", &d.run)
            .stdin(Stdio::null())
            .stdout(f.try_clone().expect("dup"))
            .stderr(f)
            .spawn()
            .expect("start holder");
        let mut h = Holder { child, out };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let text = fs::read_to_string(&h.out).unwrap_or_default();
            if text.contains("holding") {
                break;
            }
            if let Ok(Some(st)) = h.child.try_wait() {
                panic!("holder of {res} exited ({st}): {text}");
            }
            assert!(
                Instant::now() < deadline,
                "holder of {res} never held: {text}"
            );
            thread::sleep(Duration::from_millis(50));
        }
        h
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(st)) = self.child.try_wait() {
                return Some(st);
            }
            thread::sleep(Duration::from_millis(50));
        }
        None
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `lockd-faultfs` serving `backing` as MNT/disk.img; unmounted and stopped on drop.
struct FaultFs {
    child: Child,
    mnt: PathBuf,
    control: PathBuf,
}

impl FaultFs {
    fn start(dir: &Path, backing: &Path) -> FaultFs {
        let exe = std::env::current_exe().expect("current exe");
        let mut bin = exe.parent().expect("exe dir").to_path_buf();
        if bin.ends_with("deps") {
            bin.pop();
        }
        let faultfs = bin.join("lockd-faultfs");
        assert!(
            faultfs.exists(),
            "{} is missing: build it first (cargo build -p lockd-system-tests --bins)",
            faultfs.display()
        );
        let mnt = dir.join("mnt");
        fs::create_dir_all(&mnt).expect("mnt dir");
        let control = dir.join("fault.sock");
        let child = Command::new(&faultfs)
            .arg("--backing")
            .arg(backing)
            .arg("--mount")
            .arg(&mnt)
            .arg("--control")
            .arg(&control)
            .stdin(Stdio::null())
            .stdout(File::create(dir.join("faultfs.log")).expect("log"))
            .stderr(File::create(dir.join("faultfs.err")).expect("log"))
            .spawn()
            .expect("start lockd-faultfs");
        let deadline = Instant::now() + Duration::from_secs(10);
        while !(mnt.join("disk.img").exists() && control.exists()) {
            assert!(Instant::now() < deadline, "FUSE view did not appear");
            thread::sleep(Duration::from_millis(20));
        }
        FaultFs {
            child,
            mnt,
            control,
        }
    }

    fn disk(&self) -> String {
        self.mnt.join("disk.img").display().to_string()
    }

    fn set(&self, mode: &str) {
        let mut s = UnixStream::connect(&self.control).expect("fault control");
        writeln!(s, "{mode}").expect("fault command");
        let mut line = String::new();
        BufReader::new(s).read_line(&mut line).expect("fault reply");
        assert_eq!(line.trim(), "ok", "fault {mode}: {line}");
    }
}

impl Drop for FaultFs {
    fn drop(&mut self) {
        let _ = Command::new("fusermount3")
            .arg("-u")
            .arg("-z")
            .arg(&self.mnt)
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Lines of `text` containing every one of `words`.
fn lines_with<'a>(text: &'a str, words: &[&str]) -> Vec<(usize, &'a str)> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| words.iter().all(|w| l.contains(w)))
        .collect()
}

#[test]
fn killpath_acts_before_escalation() {
    require_root("FUSE view of the lease storage");
    require_command("fusermount3", "fuse3");
    let dir = scratch_dir();
    let img = sparse_file(dir.path(), "shared.img", 6 << 20);
    let p = img.display().to_string();
    run_ok(
        LOCKD,
        ["direct", "init", "-s", &format!("kp:0:{p}:0"), "-o", "1"],
    );
    run_ok(LOCKD, ["direct", "init", "-r", &format!("kp:stays:{p}:1M")]);
    run_ok(
        LOCKD,
        ["direct", "init", "-r", &format!("kp:leaves:{p}:2M")],
    );
    let view = FaultFs::start(dir.path(), &img);
    let disk = view.disk();
    // Kill grace 4 s: killpath at last renewal + 8 s, SIGKILL at + 12 s.
    let d = Daemon::start(dir.path(), "kphost", 4);
    d.cli_ok(&["add-lockspace", "-s", &format!("kp:1:{disk}:0"), "-o", "1"]);
    let kp_log = dir.path().join("killpath.log");
    let kp_args = format!("--signal=TERM --log={}", kp_log.display());
    let mut stays = Holder::start(
        &d,
        &format!("kp:stays:{disk}:1M"),
        &kp_args,
        &["sh", "-c", "trap '' TERM; exec sleep 1000"],
        dir.path().join("stays.out"),
    );
    let mut leaves = Holder::start(
        &d,
        &format!("kp:leaves:{disk}:2M"),
        &kp_args,
        &["sleep", "1000"],
        dir.path().join("leaves.out"),
    );
    // A third holder whose killpath lets it be (SIGCONT) and releases its leases, as
    // libvirt does for a guest it pauses: the escalation then spares it.
    run_ok(
        LOCKD,
        ["direct", "init", "-r", &format!("kp:spared:{p}:3M")],
    );
    let mut spared = Holder::start(
        &d,
        &format!("kp:spared:{disk}:3M"),
        &format!("-sCONT -r -l{}", kp_log.display()),
        &["sleep", "1000"],
        dir.path().join("spared.out"),
    );
    // A fourth whose killpath cannot be executed: the daemon records `noexec:2`, and the
    // holder is SIGKILLed after the grace like the one that stays.
    run_ok(
        LOCKD,
        ["direct", "init", "-r", &format!("kp:noexec:{p}:4M")],
    );
    let mut noexec = Holder::start_with(
        &d,
        &format!("kp:noexec:{disk}:4M"),
        "/nonexistent/lockd-killpath",
        "-sTERM",
        &["sleep", "1000"],
        dir.path().join("noexec.out"),
    );
    let (stays_pid, leaves_pid, spared_pid) = (stays.pid(), leaves.pid(), spared.pid());
    let noexec_pid = noexec.pid();

    view.set("stall");
    let t0 = Instant::now();
    // While the ignoring holder lives (between the killpath and SIGKILL), its STATUS
    // shows the killpath's exit status.
    let mut status_seen = String::new();
    let stays_end = {
        let deadline = Instant::now() + Duration::from_secs(40);
        loop {
            if let Ok(Some(st)) = stays.child.try_wait() {
                break Some(st);
            }
            if Instant::now() > deadline {
                break None;
            }
            let (_, out) = d.cli(&["status", "--format", "sanlock", "-D"]);
            if let Some(line) = out
                .lines()
                .find(|l| l.contains(&format!("pid={stays_pid} ")))
            {
                if line.contains("killpath_status=exit:0") {
                    status_seen = line.trim().to_string();
                }
            }
            thread::sleep(Duration::from_millis(200));
        }
    };
    let stays_after = t0.elapsed();
    let leaves_end = leaves.wait_exit(Duration::from_secs(5));
    view.set("pass");
    let log = d.log_text();
    let kp_text = fs::read_to_string(&kp_log).unwrap_or_default();
    let ctx = format!(
        "\n--- daemon log ---\n{log}\n--- killpath log ---\n{kp_text}\n--- stays ---\n{}",
        fs::read_to_string(&stays.out).unwrap_or_default()
    );
    eprintln!("{ctx}");
    eprintln!(
        "holder that stayed ended after {stays_after:?}: {stays_end:?}; the other: {leaves_end:?}"
    );

    // The holder that exits on the killpath's SIGTERM: killed by SIGTERM, nothing more.
    let leaves_end = leaves_end.expect("holder that leaves did not exit");
    assert_eq!(leaves_end.signal(), Some(libc::SIGTERM), "{ctx}");
    // The one that ignores it: SIGKILL, from the daemon, after the grace.
    let stays_end = stays_end.expect("holder that stays was never killed");
    assert_eq!(stays_end.signal(), Some(libc::SIGKILL), "{ctx}");
    // The helper acted first, for both, and said so.
    for pid in [stays_pid, leaves_pid] {
        let line = lines_with(&kp_text, &[&format!("signal 15 to pid {pid} "), "ok: sent"]);
        assert_eq!(line.len(), 1, "killpath log line for {pid}{ctx}");
        let run = lines_with(&log, &["running killpath", &format!("pid={pid} ")]);
        assert_eq!(run.len(), 1, "daemon ran the killpath once for {pid}{ctx}");
        let done = lines_with(
            &log,
            &["killpath finished", &format!("pid={pid} "), "status=exit:0"],
        );
        assert_eq!(
            done.len(),
            1,
            "daemon recorded the exit status for {pid}{ctx}"
        );
        assert!(run[0].0 < done[0].0, "{ctx}");
    }
    // SIGKILL followed for the one that stayed only, after its killpath.
    let kills_stays = lines_with(
        &log,
        &[
            "killing lease holder",
            &format!("pid={stays_pid} "),
            "sig=9",
        ],
    );
    assert!(!kills_stays.is_empty(), "no SIGKILL for {stays_pid}{ctx}");
    let run_stays = lines_with(&log, &["running killpath", &format!("pid={stays_pid} ")]);
    assert!(
        run_stays[0].0 < kills_stays[0].0,
        "SIGKILL before killpath{ctx}"
    );
    assert!(
        lines_with(
            &log,
            &["killing lease holder", &format!("pid={leaves_pid} ")]
        )
        .is_empty(),
        "the holder that left got a signal from the daemon{ctx}"
    );
    // The holder whose killpath is missing: the helper reported it, SIGKILL followed.
    let noexec_end = noexec.wait_exit(Duration::from_secs(5));
    assert_eq!(
        noexec_end.and_then(|s| s.signal()),
        Some(libc::SIGKILL),
        "noexec holder{ctx}"
    );
    assert_eq!(
        lines_with(
            &log,
            &[
                "killpath failed",
                &format!("pid={noexec_pid} "),
                "status=noexec:2"
            ]
        )
        .len(),
        1,
        "missing killpath recorded{ctx}"
    );
    // The spared holder: its killpath released its lease; no signal from the daemon, still
    // running, holding nothing.
    assert_eq!(
        lines_with(
            &kp_text,
            &[
                &format!("signal 18 to pid {spared_pid} "),
                "released leases of pid",
                "(exit 0)"
            ]
        )
        .len(),
        1,
        "spared holder's killpath line{ctx}"
    );
    assert!(
        lines_with(
            &log,
            &["killing lease holder", &format!("pid={spared_pid} ")]
        )
        .is_empty(),
        "the spared holder got a signal from the daemon{ctx}"
    );
    assert!(
        spared.child.try_wait().expect("try_wait").is_none(),
        "the spared holder is gone{ctx}"
    );
    let (_, inq) = d.cli(&["inquire", "-p", &spared_pid.to_string()]);
    assert!(inq.contains("holds no leases"), "inquire spared: {inq}");
    assert!(
        !status_seen.is_empty(),
        "STATUS never showed killpath_status=exit:0 for {stays_pid}{ctx}"
    );
    eprintln!("STATUS line: {status_seen}");
}

/// A libvirtd (and its virtlogd) of our own: a mount namespace with private
/// /run/libvirt, /var/lib/libvirt and /etc/libvirt/qemu, its socket in /run/lkvPID.
/// Domains are destroyed and undefined, then both daemons stopped by PID, on drop.
struct Libvirt {
    child: Child,
    dir: PathBuf,
    sock_dir: PathBuf,
    uri: String,
    domains: Vec<String>,
}

impl Libvirt {
    fn start(dir: &Path) -> Libvirt {
        let sock_dir = PathBuf::from(format!("/run/lkv{}", std::process::id()));
        fs::create_dir_all(&sock_dir).expect("socket dir");
        for sub in ["lib", "etc-qemu", "log"] {
            fs::create_dir_all(dir.join(sub)).expect("libvirt dirs");
        }
        for shared in ["/run/libvirt", "/var/lib/libvirt", "/etc/libvirt/qemu"] {
            fs::create_dir_all(shared).expect("mount points");
        }
        fs::write(
            dir.join("libvirtd.conf"),
            format!(
                "unix_sock_dir = \"{}\"\nunix_sock_rw_perms = \"0700\"\n\
                 unix_sock_ro_perms = \"0700\"\nauth_unix_rw = \"none\"\n\
                 auth_unix_ro = \"none\"\nlog_outputs = \"3:stderr\"\n",
                sock_dir.display()
            ),
        )
        .expect("libvirtd.conf");
        let d = dir.display();
        let script = format!(
            "set -e\n\
             mount -t tmpfs tmpfs /run/libvirt\n\
             mount --bind {d}/lib /var/lib/libvirt\n\
             mount --bind {d}/etc-qemu /etc/libvirt/qemu\n\
             virtlogd --pid-file {d}/virtlogd.pid > {d}/log/virtlogd.log 2>&1 &\n\
             exec libvirtd --pid-file {d}/libvirtd.pid --config {d}/libvirtd.conf\n"
        );
        let child = Command::new("unshare")
            .args([
                "--mount",
                "--propagation",
                "private",
                "--",
                "sh",
                "-c",
                &script,
            ])
            .stdin(Stdio::null())
            .stdout(File::create(dir.join("log/libvirtd.log")).expect("log"))
            .stderr(File::create(dir.join("log/libvirtd.err")).expect("log"))
            .spawn()
            .expect("start libvirtd");
        let uri = format!("qemu:///system?socket={}/libvirt-sock", sock_dir.display());
        let mut lv = Libvirt {
            child,
            dir: dir.to_path_buf(),
            sock_dir,
            uri,
            domains: Vec::new(),
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if lv.virsh(&["version"]).0 {
                break;
            }
            if let Ok(Some(st)) = lv.child.try_wait() {
                panic!(
                    "libvirtd exited ({st}): {}",
                    fs::read_to_string(dir.join("log/libvirtd.err")).unwrap_or_default()
                );
            }
            assert!(Instant::now() < deadline, "libvirtd did not answer in 60 s");
            thread::sleep(Duration::from_millis(200));
        }
        lv
    }

    fn virsh(&self, args: &[&str]) -> (bool, String) {
        let out = Command::new("virsh")
            .arg("-c")
            .arg(&self.uri)
            .args(args)
            .output()
            .expect("run virsh");
        let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.push_str(&String::from_utf8_lossy(&out.stderr));
        (out.status.success(), text.trim().to_string())
    }

    fn virsh_ok(&self, args: &[&str]) -> String {
        let (ok, out) = self.virsh(args);
        assert!(
            ok,
            "virsh {args:?}: {out}\nlibvirtd:\n{}",
            fs::read_to_string(self.dir.join("log/libvirtd.err")).unwrap_or_default()
        );
        out
    }

    fn domstate(&self, uuid: &str) -> String {
        self.virsh(&["domstate", uuid]).1
    }

    fn wait_state(&self, uuid: &str, want: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let s = self.domstate(uuid);
            if s == want || Instant::now() > deadline {
                return s;
            }
            thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Libvirt {
    fn drop(&mut self) {
        for dom in std::mem::take(&mut self.domains) {
            let _ = self.virsh(&["destroy", &dom]);
            let _ = self.virsh(&["undefine", &dom]);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Ok(pid) = fs::read_to_string(self.dir.join("virtlogd.pid")) {
            if let Ok(pid) = pid.trim().parse::<i32>() {
                let _ = Command::new("kill").arg(pid.to_string()).status();
            }
        }
        let _ = fs::remove_dir_all(&self.sock_dir);
    }
}

fn random_uuid() -> String {
    fs::read_to_string("/proc/sys/kernel/random/uuid")
        .expect("read a random uuid")
        .trim()
        .to_string()
}

#[test]
fn killpath_pauses_and_destroys_a_libvirt_guest() {
    require_root("libvirtd and qemu:///system");
    require_command("libvirtd", "libvirt-daemon-system");
    require_command("virtlogd", "libvirt-daemon-system");
    require_command("virsh", "libvirt-clients");
    require_command("qemu-system-x86_64", "qemu-system-x86");
    let dir = scratch_dir();
    let lv = Libvirt::start(&dir.path().join("libvirt"));
    let mut lv = lv;
    let uuid = random_uuid();
    let name = format!("lockd-kp-{}", std::process::id());
    let xml = dir.path().join("guest.xml");
    // TCG, 64 MiB, no disk: the guest sits in SeaBIOS, a running domain all the same.
    fs::write(
        &xml,
        format!(
            "<domain type='qemu'>\n  <name>{name}</name>\n  <uuid>{uuid}</uuid>\n\
             <memory unit='MiB'>64</memory>\n  <vcpu>1</vcpu>\n\
             <os><type arch='x86_64' machine='pc'>hvm</type><boot dev='hd'/></os>\n\
             <devices>\n    <emulator>/usr/bin/qemu-system-x86_64</emulator>\n\
             <video><model type='none'/></video>\n    <memballoon model='none'/>\n\
             </devices>\n</domain>\n"
        ),
    )
    .expect("guest xml");
    lv.virsh_ok(&["define", &xml.display().to_string()]);
    lv.domains.push(uuid.clone());
    let t = Instant::now();
    lv.virsh_ok(&["start", &uuid]);
    eprintln!("guest {name} {uuid} started in {:?}", t.elapsed());
    assert_eq!(lv.domstate(&uuid), "running");

    let img = sparse_file(dir.path(), "shared.img", 3 << 20);
    let p = img.display().to_string();
    run_ok(
        LOCKD,
        ["direct", "init", "-s", &format!("kv:0:{p}:0"), "-o", "1"],
    );
    run_ok(LOCKD, ["direct", "init", "-r", &format!("kv:vm:{p}:1M")]);
    let a = Daemon::start(dir.path(), "hosta", 40);
    let b = Daemon::start(dir.path(), "hostb", 40);
    a.cli_ok(&["add-lockspace", "-s", &format!("kv:1:{p}:0"), "-o", "1"]);
    b.cli_ok(&["add-lockspace", "-s", &format!("kv:2:{p}:0"), "-o", "1"]);
    let res = format!("kv:vm:{p}:1M");

    let mut paused_holder = None;
    for (round, action, want) in [(1, "pause", "paused"), (2, "destroy", "shut off")] {
        // Pause as libvirt pauses on lock failure: the guest stops, its lease is released
        // (short options, to stay within the killpath's 127 bytes). Destroy in long form.
        let args = if action == "pause" {
            format!("-c{} -d{uuid} -apause -r", lv.uri)
        } else {
            format!("--virsh-uri={} --domain={uuid} --action={action}", lv.uri)
        };
        // The holder stands for the VM (libvirt registers the QEMU process; here a
        // sleep that the killpath leaves alone, so only the VM's state changes).
        let holder = Holder::start(
            &a,
            &res,
            &args,
            &["sleep", "1000"],
            dir.path().join(format!("holder{round}.out")),
        );
        let hp = holder.pid();
        b.cli_ok(&["request", "-r", &res, "--next-lver", "-f", "graceful"]);
        let state = lv.wait_state(&uuid, want, Duration::from_secs(30));
        let log = a.log_text();
        eprintln!("round {round}: domstate {state:?}\n--- host a log ---\n{log}");
        assert_eq!(state, want, "after GRACEFUL with --action={action}");
        let verb = if action == "pause" {
            "suspend"
        } else {
            "destroy"
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut done = 0;
        while done == 0 && Instant::now() < deadline {
            done = lines_with(
                &a.log_text(),
                &["killpath finished", &format!("pid={hp} "), "status=exit:0"],
            )
            .len();
            thread::sleep(Duration::from_millis(100));
        }
        let log = a.log_text();
        assert_eq!(done, 1, "exit status of the killpath{log}");
        assert_eq!(
            lines_with(&log, &["lockd-killpath[", &format!("{verb} {uuid}"), "ok"]).len(),
            1,
            "the killpath's own log line (in the daemon's stderr){log}"
        );
        let (_, st) = a.cli(&["status", "--format", "sanlock", "-D"]);
        let line = st
            .lines()
            .find(|l| l.contains(&format!("pid={hp} ")))
            .unwrap_or_default();
        assert!(line.contains("killpath_status=exit:0"), "STATUS: {st}");
        eprintln!("STATUS: {}", line.trim());
        if action == "pause" {
            // Released by the killpath: the holder lives on, holding nothing.
            let (_, inq) = a.cli(&["inquire", "-p", &hp.to_string()]);
            assert!(inq.contains("holds no leases"), "inquire {hp}: {inq}{log}");
            assert_eq!(
                lines_with(
                    &log,
                    &["lockd-killpath[", &format!("released leases of pid {hp}")]
                )
                .len(),
                1,
                "release in the killpath's line{log}"
            );
            paused_holder = Some(holder);
        } else {
            drop(holder);
        }
        // The request was for lver+1: clear it so the next holder is not asked at once.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let (ok, out) = b.cli(&["request", "-r", &res, "-f", "clear"]);
            if ok || Instant::now() > deadline {
                eprintln!("clear request: {out}");
                break;
            }
            thread::sleep(Duration::from_millis(200));
        }
    }
    drop(paused_holder);
    let reason = lv.virsh_ok(&["domstate", &uuid, "--reason"]);
    eprintln!("final: {reason}");
    assert!(reason.contains("shut off"), "{reason}");
    lv.virsh_ok(&["undefine", &uuid]);
    lv.domains.clear();
}
