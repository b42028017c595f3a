//! A test bed of simulated hosts on one machine, sharing one lease image.
//!
//! Each host has its own PID and mount namespace (so a watchdog reset kills exactly that
//! host), its own wdmd and emulated watchdog, its own run directories and host name, and
//! its own FUSE view of the shared image (`lockd-faultfs`) whose I/O can be stalled or
//! failed while the other hosts' I/O goes on. Hosts run either the lockd daemon or the
//! real sanlock daemon (whose fixed `/run/wdmd` is bind-mounted onto the host's wdmd).
//!
//! Layout under the bed directory:
//! ```text
//! shared.img                the shared lease storage (backing file)
//! witness.log               the mutual-exclusion witness log of every holder
//! hostN/mnt/disk.img        hostN's view of shared.img (FUSE)
//! hostN/fault.sock          its fault control socket
//! hostN/run/                daemon run dir (sanlock.sock)
//! hostN/wdmd/               wdmd run dir (wdmd.sock)
//! hostN/emu.sock, emu.state the emulated watchdog and its event record
//! hostN/*.log               stderr of each process
//! ```
//! Every process the bed starts is stopped by PID when the bed is dropped; FUSE views are
//! unmounted.

use std::fs::{self, File};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::witness;

/// Kill grace of lockd hosts: SIGKILL follows the killpath or SIGTERM after this many
/// seconds, before the short test watchdog (W = 5) would fire.
pub const KILL_GRACE_S: u64 = 2;

/// Which daemon a simulated host runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostKind {
    Lockd,
    Sanlock,
}

/// Paths of the programs the bed runs.
#[derive(Debug, Clone)]
pub struct Programs {
    pub lockd: PathBuf,
    pub lockd_daemon: PathBuf,
    pub wdmd: PathBuf,
    pub emulator: PathBuf,
    pub faultfs: PathBuf,
    pub witness: PathBuf,
    pub testbed: PathBuf,
}

impl Programs {
    /// Finds the programs next to the running executable (target/<profile>/).
    pub fn beside_current_exe() -> Result<Programs> {
        let exe = std::env::current_exe()?;
        let mut dir = exe.parent().context("exe has no directory")?.to_path_buf();
        if dir.ends_with("deps") {
            dir.pop();
        }
        let p = |name: &str| -> Result<PathBuf> {
            let path = dir.join(name);
            if !path.exists() {
                bail!(
                    "{} is missing: build the workspace first (cargo build --workspace --bins)",
                    path.display()
                );
            }
            Ok(path)
        };
        Ok(Programs {
            lockd: p("lockd")?,
            lockd_daemon: p("lockd-daemon")?,
            wdmd: p("wdmd")?,
            emulator: p("wdmd-emulator")?,
            faultfs: p("lockd-faultfs")?,
            witness: p("lockd-witness")?,
            testbed: p("lockd-testbed")?,
        })
    }
}

/// A child process stopped by PID on drop.
pub struct Proc {
    pub child: Child,
    pub what: String,
}

impl Proc {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One simulated host.
pub struct BedHost {
    pub index: u32,
    pub name: String,
    pub kind: HostKind,
    pub dir: PathBuf,
    /// The namespace's init as seen from outside (the emulator's kill target).
    pub init_pid: u32,
    _unshare: Proc,
    _emulator: Proc,
    _faultfs: Proc,
}

/// The whole bed.
pub struct Bed {
    pub dir: PathBuf,
    _tmp: Option<tempfile::TempDir>,
    pub image: PathBuf,
    /// What the hosts' FUSE views read and write: the image, or a loop device over it.
    pub backing: PathBuf,
    pub log: PathBuf,
    pub io_timeout_s: u64,
    pub fire_timeout_s: u64,
    pub programs: Programs,
    pub hosts: Vec<BedHost>,
    pub lockspace: String,
    /// The loop device over the image (`new_on_loop`); detached after the hosts stop.
    loop_device: Option<crate::LoopDevice>,
}

fn wait_for_path(path: &Path, timeout: Duration, what: &str) -> Result<()> {
    let deadline = Instant::now() + timeout;
    while !path.exists() {
        if Instant::now() > deadline {
            bail!(
                "{what}: {} did not appear within {timeout:?}",
                path.display()
            );
        }
        thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

fn spawn_logged(cmd: &mut Command, log: &Path, what: &str) -> Result<Proc> {
    let f = File::create(log).with_context(|| format!("create {}", log.display()))?;
    let child = cmd
        .stdin(Stdio::null())
        .stdout(f.try_clone()?)
        .stderr(f)
        .spawn()
        .with_context(|| format!("start {what}"))?;
    Ok(Proc {
        child,
        what: what.to_string(),
    })
}

/// Outer PIDs of `pid`'s children.
pub fn children_of(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    if let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) {
        for t in tasks.flatten() {
            if let Ok(text) = fs::read_to_string(t.path().join("children")) {
                out.extend(
                    text.split_whitespace()
                        .filter_map(|c| c.parse::<u32>().ok()),
                );
            }
        }
    }
    out
}

fn comm(pid: u32) -> String {
    fs::read_to_string(format!("/proc/{pid}/comm"))
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// Wall-clock seconds (CLOCK_REALTIME), the bed's common time base.
pub fn wall_s() -> f64 {
    witness::now_ns() as f64 / 1e9
}

impl Bed {
    /// Creates the shared image (formatted lockspace at 0, `resources` at 1M, 2M, …).
    pub fn new(io_timeout_s: u64, fire_timeout_s: u64, resources: &[&str]) -> Result<Bed> {
        Bed::create(io_timeout_s, fire_timeout_s, resources, false)
    }

    /// As [`Bed::new`], with the shared storage a loop device (direct I/O, 512-byte
    /// sectors) over the image: every host's view reads and writes the device.
    pub fn new_on_loop(io_timeout_s: u64, fire_timeout_s: u64, resources: &[&str]) -> Result<Bed> {
        Bed::create(io_timeout_s, fire_timeout_s, resources, true)
    }

    fn create(
        io_timeout_s: u64,
        fire_timeout_s: u64,
        resources: &[&str],
        on_loop: bool,
    ) -> Result<Bed> {
        let programs = Programs::beside_current_exe()?;
        let tmp = tempfile::Builder::new()
            .prefix("lockd-testbed-")
            .tempdir_in("/var/tmp")?;
        let (dir, tmp) = if std::env::var_os("LOCKD_TESTBED_KEEP").is_some() {
            (tmp.keep(), None)
        } else {
            (tmp.path().to_path_buf(), Some(tmp))
        };
        let image = dir.join("shared.img");
        let f = File::create(&image)?;
        f.set_len(((resources.len() as u64) + 2) << 20)?;
        drop(f);
        let loop_device = on_loop.then(|| crate::LoopDevice::attach(&image, 512));
        let backing = loop_device
            .as_ref()
            .map(|l| l.device.clone())
            .unwrap_or_else(|| image.clone());
        let lockspace = "tb".to_string();
        let run = |args: &[&str]| -> Result<()> {
            let out = Command::new(&programs.lockd).args(args).output()?;
            if !out.status.success() {
                bail!("lockd {args:?}: {}", String::from_utf8_lossy(&out.stderr));
            }
            Ok(())
        };
        let img = backing.display().to_string();
        run(&[
            "direct",
            "init",
            "-s",
            &format!("{lockspace}:0:{img}:0"),
            "-o",
            &io_timeout_s.to_string(),
        ])?;
        for (i, r) in resources.iter().enumerate() {
            run(&[
                "direct",
                "init",
                "-r",
                &format!("{lockspace}:{r}:{img}:{}", (i as u64 + 1) << 20),
            ])?;
        }
        Ok(Bed {
            log: dir.join("witness.log"),
            dir,
            _tmp: tmp,
            image,
            backing,
            loop_device,
            io_timeout_s,
            fire_timeout_s,
            programs,
            hosts: Vec::new(),
            lockspace,
        })
    }

    /// Starts host `index` (its host_id): FUSE view, namespace init, emulator, wdmd and
    /// the daemon. Returns once the daemon's socket exists.
    pub fn start_host(&mut self, index: u32, kind: HostKind) -> Result<()> {
        self.start_host_named(index, kind, &format!("host{index}"))
    }

    /// As [`Bed::start_host`], with the daemon's host name (`-e`) given: `name` equal to
    /// another host's makes a clone of that host (one image, one configured name).
    pub fn start_host_named(&mut self, index: u32, kind: HostKind, name: &str) -> Result<()> {
        let name = name.to_string();
        let dir = self.dir.join(format!("host{index}"));
        for sub in ["mnt", "run", "wdmd"] {
            fs::create_dir_all(dir.join(sub))?;
        }
        let faultfs = spawn_logged(
            Command::new(&self.programs.faultfs)
                .arg("--backing")
                .arg(&self.backing)
                .arg("--mount")
                .arg(dir.join("mnt"))
                .arg("--control")
                .arg(dir.join("fault.sock")),
            &dir.join("faultfs.log"),
            "lockd-faultfs",
        )?;
        wait_for_path(
            &dir.join("mnt/disk.img"),
            Duration::from_secs(10),
            "FUSE view",
        )?;

        let kind_arg = match kind {
            HostKind::Lockd => "lockd",
            HostKind::Sanlock => "sanlock",
        };
        let unshare = spawn_logged(
            Command::new("unshare")
                .args([
                    "--pid",
                    "--fork",
                    "--mount",
                    "--propagation",
                    "private",
                    "--kill-child",
                ])
                .arg(&self.programs.testbed)
                .arg("host-init")
                .arg(&dir)
                .arg(kind_arg)
                .arg(&name)
                .arg(self.io_timeout_s.to_string())
                .arg(self.fire_timeout_s.to_string()),
            &dir.join("init.log"),
            "unshare host-init",
        )?;
        let deadline = Instant::now() + Duration::from_secs(10);
        let init_pid = loop {
            if let Some(&p) = children_of(unshare.pid()).first() {
                break p;
            }
            if Instant::now() > deadline {
                bail!("{name}: namespace init did not start");
            }
            thread::sleep(Duration::from_millis(20));
        };
        let emulator = spawn_logged(
            Command::new(&self.programs.emulator)
                .arg("--socket")
                .arg(dir.join("emu.sock"))
                .arg("--state")
                .arg(dir.join("emu.state"))
                .arg("--timeout")
                .arg(self.fire_timeout_s.to_string())
                .arg("--kill")
                .arg(format!("pid:{init_pid}")),
            &dir.join("emulator.log"),
            "wdmd-emulator",
        )?;
        wait_for_path(
            &dir.join("emu.sock"),
            Duration::from_secs(10),
            "emulator socket",
        )?;
        // Programs the init runs, then go.
        let mut go = File::create(dir.join("programs"))?;
        writeln!(go, "{}", self.programs.wdmd.display())?;
        writeln!(go, "{}", self.programs.lockd_daemon.display())?;
        drop(go);
        fs::rename(dir.join("programs"), dir.join("go"))?;
        wait_for_path(
            &dir.join("run/sanlock.sock"),
            Duration::from_secs(20),
            &format!("{name} daemon socket"),
        )
        .with_context(|| fs::read_to_string(dir.join("init.log")).unwrap_or_default())?;
        self.hosts.push(BedHost {
            index,
            name,
            kind,
            dir,
            init_pid,
            _unshare: unshare,
            _emulator: emulator,
            _faultfs: faultfs,
        });
        Ok(())
    }

    pub fn host(&self, index: u32) -> &BedHost {
        self.hosts
            .iter()
            .find(|h| h.index == index)
            .expect("host was started")
    }

    /// The host's path to the shared image.
    pub fn disk(&self, index: u32) -> String {
        self.host(index)
            .dir
            .join("mnt/disk.img")
            .display()
            .to_string()
    }

    /// Runs `lockd ARGS` against host `index`'s daemon (from outside its namespace).
    pub fn lockd(&self, index: u32, args: &[&str]) -> Result<String> {
        let h = self.host(index);
        let out = Command::new(&self.programs.lockd)
            .args(args)
            .env("LOCKD_RUN_DIR", h.dir.join("run"))
            .env("SANLOCK_RUN_DIR", h.dir.join("run"))
            .output()?;
        if !out.status.success() {
            bail!(
                "{}: lockd {args:?}: {}{}",
                h.name,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Joins the lockspace on host `index` as host_id `index`.
    pub fn join(&self, index: u32) -> Result<()> {
        self.join_as(index, index)
    }

    /// Joins the lockspace on host `index` as `host_id`.
    pub fn join_as(&self, index: u32, host_id: u32) -> Result<()> {
        let args = self.add_lockspace_args(index, host_id);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        self.lockd(index, &args)?;
        Ok(())
    }

    /// `lockd` arguments that join the lockspace on host `index` as `host_id`.
    pub fn add_lockspace_args(&self, index: u32, host_id: u32) -> Vec<String> {
        vec![
            "add-lockspace".to_string(),
            "-s".to_string(),
            format!("{}:{host_id}:{}:0", self.lockspace, self.disk(index)),
            "-o".to_string(),
            self.io_timeout_s.to_string(),
        ]
    }

    /// Starts `lockd ARGS` against host `index`'s daemon without waiting for it.
    pub fn lockd_spawn(&self, index: u32, args: &[&str], log: &Path) -> Result<Proc> {
        let h = self.host(index);
        let mut cmd = Command::new(&self.programs.lockd);
        cmd.args(args)
            .env("LOCKD_RUN_DIR", h.dir.join("run"))
            .env("SANLOCK_RUN_DIR", h.dir.join("run"));
        spawn_logged(&mut cmd, log, "lockd command")
    }

    /// Starts a new lockd daemon inside host `index`'s namespace with the host's name,
    /// config and run dir, as `host-init` started the first one (whose process must be
    /// gone: `old_pid` is waited for). Returns once the new daemon answers.
    pub fn restart_daemon(&self, index: u32, old_pid: u32) -> Result<Proc> {
        let h = self.host(index);
        let gone_by = Instant::now() + Duration::from_secs(10);
        while Path::new(&format!("/proc/{old_pid}")).exists() {
            if Instant::now() > gone_by {
                bail!("{}: the old daemon {old_pid} did not exit", h.name);
            }
            thread::sleep(Duration::from_millis(20));
        }
        let args: Vec<String> = [
            "-D",
            "-w",
            "1",
            "-e",
            &h.name,
            "-o",
            &self.io_timeout_s.to_string(),
            "-g",
            &KILL_GRACE_S.to_string(),
            "--run-dir",
            &h.dir.join("run").display().to_string(),
            "--config",
            &h.dir.join("lockd.toml").display().to_string(),
        ]
        .iter()
        .map(|a| a.to_string())
        .collect();
        let daemon = self.spawn_in_host(
            index,
            &self.programs.lockd_daemon,
            &args,
            &h.dir.join("daemon-restarted.log"),
        )?;
        let ready_by = Instant::now() + Duration::from_secs(20);
        while self.lockd(index, &["version"]).is_err() {
            if Instant::now() > ready_by {
                bail!(
                    "{}: the restarted daemon never answered: {}",
                    h.name,
                    fs::read_to_string(h.dir.join("daemon-restarted.log")).unwrap_or_default()
                );
            }
            thread::sleep(Duration::from_millis(50));
        }
        Ok(daemon)
    }

    /// Starts, inside host `index`'s namespace, a witness holder of resource `res`
    /// (the `slot`-th resource area). Returns the `nsenter` process.
    pub fn start_holder(
        &self,
        index: u32,
        res: &str,
        slot: u64,
        opts: &HolderOpts,
    ) -> Result<Proc> {
        let h = self.host(index);
        let spec = format!(
            "{}:{res}:{}:{}",
            self.lockspace,
            self.disk(index),
            slot << 20
        );
        let log = self.log.display().to_string();
        let mut cmd = Command::new("nsenter");
        cmd.arg("-t")
            .arg(h.init_pid.to_string())
            .args(["-p", "-m", "--"])
            .arg(&self.programs.lockd)
            .args(["acquire", "-r", &spec]);
        if opts.nowait {
            cmd.arg("--nowait");
        }
        if let Some(r) = &opts.restrict {
            cmd.args(["--restrict", r]);
        }
        let killpath_args = format!("note {log} {} {res} killpath", h.name);
        if opts.killpath {
            cmd.arg("--killpath")
                .arg(&self.programs.witness)
                .arg("--killpath-args")
                .arg(&killpath_args);
        }
        cmd.arg("--")
            .arg(&self.programs.witness)
            .args(["hold", "--log", &log, "--host", &h.name, "--res", res]);
        if opts.ignore_term {
            cmd.arg("--ignore-term");
        }
        cmd.env("LOCKD_RUN_DIR", h.dir.join("run"))
            .env("SANLOCK_RUN_DIR", h.dir.join("run"));
        let out = h.dir.join(format!("holder-{res}.log"));
        spawn_logged(&mut cmd, &out, "holder")
    }

    /// Starts `program ARGS` inside host `index`'s namespaces (so the host's watchdog
    /// reset ends it too), with the host's daemon run dir in LOCKD_RUN_DIR; its output
    /// goes to `log`.
    pub fn spawn_in_host(
        &self,
        index: u32,
        program: &Path,
        args: &[String],
        log: &Path,
    ) -> Result<Proc> {
        let h = self.host(index);
        let mut cmd = Command::new("nsenter");
        cmd.arg("-t")
            .arg(h.init_pid.to_string())
            .args(["-p", "-m", "--"])
            .arg(program)
            .args(args)
            .env("LOCKD_RUN_DIR", h.dir.join("run"))
            .env("SANLOCK_RUN_DIR", h.dir.join("run"));
        spawn_logged(&mut cmd, log, "process in host")
    }

    /// Sends a fault command to host `index`'s storage path.
    pub fn fault(&self, index: u32, command: &str) -> Result<()> {
        let mut s = UnixStream::connect(self.host(index).dir.join("fault.sock"))?;
        writeln!(s, "{command}")?;
        let mut line = String::new();
        BufReader::new(s).read_line(&mut line)?;
        if line.trim() != "ok" {
            bail!("fault {command}: {line}");
        }
        Ok(())
    }

    /// Outer pid of the daemon (lockd-daemon or sanlock) of host `index`.
    pub fn daemon_pid(&self, index: u32) -> Option<u32> {
        let h = self.host(index);
        let names: &[&str] = match h.kind {
            HostKind::Lockd => &["lockd-daemon"],
            HostKind::Sanlock => &["sanlock"],
        };
        children_of(h.init_pid)
            .into_iter()
            .find(|&p| names.contains(&comm(p).as_str()))
    }

    /// Outer pid of host `index`'s wdmd.
    pub fn wdmd_pid(&self, index: u32) -> Option<u32> {
        children_of(self.host(index).init_pid)
            .into_iter()
            .find(|&p| comm(p) == "wdmd")
    }

    /// True while host `index`'s namespace init runs. A reset init that is still
    /// waiting for its namespace to empty (a process stuck in I/O) has already released
    /// its memory, so its cmdline reads empty: that counts as reset.
    pub fn host_alive(&self, index: u32) -> bool {
        let pid = self.host(index).init_pid;
        fs::read(format!("/proc/{pid}/cmdline"))
            .map(|c| !c.is_empty())
            .unwrap_or(false)
    }

    /// Wall time at which host `index`'s emulated watchdog fired, if it did.
    pub fn watchdog_fired_at(&self, index: u32) -> Option<f64> {
        let text = fs::read_to_string(self.host(index).dir.join("emu.state")).ok()?;
        text.lines()
            .find(|l| l.starts_with("fire "))
            .and_then(|l| l.split_whitespace().find_map(|w| w.strip_prefix("wall=")))
            .and_then(|v| v.parse().ok())
    }

    /// Host `host_id`'s delta-lease timestamp, read from the backing image.
    pub fn delta_timestamp(&self, host_id: u32) -> Result<u64> {
        let f = fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(&self.backing)?;
        let mut v = vec![0u8; 8192];
        let start = v.as_ptr().align_offset(4096);
        let buf = &mut v[start..start + 512];
        f.read_exact_at(buf, u64::from(host_id - 1) * 512)?;
        let mut ts = [0u8; 8];
        ts.copy_from_slice(&buf[152..160]);
        Ok(u64::from_le_bytes(ts))
    }
}

/// How a witness holder behaves.
#[derive(Debug, Clone, Default)]
pub struct HolderOpts {
    pub nowait: bool,
    pub killpath: bool,
    pub ignore_term: bool,
    pub restrict: Option<String>,
}

impl Drop for Bed {
    fn drop(&mut self) {
        for h in &self.hosts {
            // Unmount the FUSE view before its server goes away.
            let _ = Command::new("fusermount3")
                .arg("-u")
                .arg("-z")
                .arg(h.dir.join("mnt"))
                .status();
        }
        // Proc drops kill emulator, unshare (and with it the namespace), faultfs.
        self.hosts.clear();
        // Only now may the loop device go: the FUSE servers had it open.
        self.loop_device.take();
    }
}

/// The init of a simulated host's namespace (`lockd-testbed host-init …`): waits for the
/// bed's go, starts wdmd on the emulated device and the daemon, then reaps forever.
pub fn host_init(
    dir: &Path,
    kind: &str,
    name: &str,
    io_timeout_s: &str,
    fire_s: &str,
) -> Result<()> {
    wait_for_path(&dir.join("go"), Duration::from_secs(30), "go file")?;
    let programs = fs::read_to_string(dir.join("go"))?;
    let mut lines = programs.lines();
    let wdmd = lines.next().context("go: wdmd path")?.to_string();
    let lockd_daemon = lines.next().context("go: lockd-daemon path")?.to_string();
    let wdmd_dir = dir.join("wdmd");
    let mut wd = Command::new(&wdmd);
    wd.arg("-D")
        .arg("-w")
        .arg(format!("emu:{}", dir.join("emu.sock").display()))
        .arg("--fire-timeout")
        .arg(fire_s)
        .arg("--run-dir")
        .arg(&wdmd_dir)
        .arg("--marker")
        .arg(dir.join("wdmd.shm"));
    let _wdmd = spawn_logged(&mut wd, &dir.join("wdmd.log"), "wdmd")?;
    wait_for_path(
        &wdmd_dir.join("wdmd.sock"),
        Duration::from_secs(10),
        "wdmd socket",
    )?;
    let run = dir.join("run");
    let mut daemon = match kind {
        "sanlock" => {
            // sanlock's wdmd socket path is fixed: give it this host's wdmd.
            fs::create_dir_all("/run/wdmd")?;
            let st = Command::new("mount")
                .arg("--bind")
                .arg(&wdmd_dir)
                .arg("/run/wdmd")
                .status()?;
            if !st.success() {
                bail!("bind-mount {} on /run/wdmd failed", wdmd_dir.display());
            }
            let mut c = Command::new("sanlock");
            c.args([
                "daemon", "-D", "-w", "1", "-U", "root", "-G", "root", "-e", name,
            ])
            .env("SANLOCK_RUN_DIR", &run)
            .env("SANLOCK_PRIVILEGED", "0");
            c
        }
        _ => {
            let config = dir.join("lockd.toml");
            fs::write(
                &config,
                format!(
                    "watchdog_fire_timeout = {fire_s}\nwdmd_run_dir = \"{}\"\n",
                    wdmd_dir.display()
                ),
            )?;
            let mut c = Command::new(&lockd_daemon);
            // A short kill grace so that SIGKILL (after the killpath or SIGTERM at
            // last_renewal + 8·D) comes before the short test watchdog fires.
            c.args(["-D", "-w", "1", "-e", name, "-o", io_timeout_s, "-g"])
                .arg(KILL_GRACE_S.to_string())
                .arg("--run-dir")
                .arg(&run)
                .arg("--config")
                .arg(&config)
                .env("WDMD_RUN_DIR", &wdmd_dir);
            c
        }
    };
    let _daemon = spawn_logged(&mut daemon, &dir.join("daemon.log"), "daemon")?;
    // PID 1: reap every orphan of this host until the bed (or the watchdog) ends us.
    loop {
        if reap_any_child().is_none() {
            thread::sleep(Duration::from_millis(200));
        }
    }
}

/// Waits for any child to exit; returns its pid, or None when there is no child (or the
/// wait was interrupted).
fn reap_any_child() -> Option<i32> {
    match nix::sys::wait::waitpid(None, None) {
        Ok(status) => status.pid().map(|p| p.as_raw()),
        Err(_) => None,
    }
}
