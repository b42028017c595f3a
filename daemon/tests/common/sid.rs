//! Debian unstable (sid) in a debootstrapped chroot (`scripts/debian-chroot.sh`, cached
//! under /var/tmp/lockd-chroots/sid): its sanlock 5.1.1 daemon and tools run beside lockd
//! on this host, sharing loop devices (/dev is bound) and run dirs (bound by path).
//! The same helpers serve other suites' chroots (trixie's sanlock 3.9.5): the `_in`
//! variants take the suite.
//! `LOCKD_CHROOT_SCRIPT` may name another copy of debian-chroot.sh.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use super::*;

pub const SUITE: &str = "sid";

pub fn chroot_script() -> PathBuf {
    let p = std::env::var_os("LOCKD_CHROOT_SCRIPT").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/debian-chroot.sh"),
        PathBuf::from,
    );
    assert!(
        p.exists(),
        "{} is missing: the sid chroot cannot be made",
        p.display()
    );
    p
}

/// Makes sure the sid chroot with sanlock 5.1.1 and `extra` packages exists (built and
/// cached on first use).
pub fn ensure_chroot(extra: &[&str]) {
    ensure_chroot_in(SUITE, extra);
}

/// Makes sure `suite`'s chroot with its sanlock and `extra` packages exists.
pub fn ensure_chroot_in(suite: &str, extra: &[&str]) {
    let out = run(Command::new("bash")
        .arg(chroot_script())
        .args(["ensure", suite, "sanlock"])
        .args(extra));
    assert!(
        out.status.success(),
        "debian-chroot.sh ensure {suite} sanlock {extra:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A command run inside the chroot with `binds` bind-mounted and `SANLOCK_RUN_DIR` set.
pub fn in_chroot(binds: &[&Path], run_dir: &Path, args: &[&str]) -> Command {
    in_chroot_of(SUITE, binds, run_dir, args)
}

/// [`in_chroot`] in `suite`'s chroot.
pub fn in_chroot_of(suite: &str, binds: &[&Path], run_dir: &Path, args: &[&str]) -> Command {
    let mut c = Command::new("bash");
    c.arg(chroot_script()).args(["run", suite]);
    for b in binds {
        c.arg("--bind").arg(b);
    }
    c.arg("--").args(args);
    c.env("SANLOCK_RUN_DIR", run_dir)
        .env("SANLOCK_PRIVILEGED", "0");
    c
}

/// sanlock 5.1.1 (its CLI, as host 1) and lockd (python3-sanlock, as host 2) join
/// lockspace `ls` on `dev` at once, io_timeout 1; panics unless both succeed.
pub fn join_both(sanlock_run_dir: &Path, lockd: &LockdDaemon, dev: &str) {
    join_both_in(SUITE, sanlock_run_dir, lockd, dev);
}

/// [`join_both`] with `suite`'s sanlock CLI as host 1.
pub fn join_both_in(suite: &str, sanlock_run_dir: &Path, lockd: &LockdDaemon, dev: &str) {
    let mut c = in_chroot_of(
        suite,
        &[sanlock_run_dir],
        sanlock_run_dir,
        &[
            "sanlock",
            "client",
            "add_lockspace",
            "-o",
            "1",
            "-s",
            &format!("ls:1:{dev}:0"),
        ],
    );
    let t = std::thread::spawn(move || run(&mut c));
    let joined = lockd.python(&format!(
        "import sanlock\nsanlock.add_lockspace(b'ls', 2, b'{dev}', 0, iotimeout=1)\nprint('joined')\n"
    ));
    assert_eq!(joined.trim(), "joined", "lockd joins lockspace ls on {dev}");
    let o = t.join().expect("join thread");
    assert!(
        o.status.success(),
        "{suite}'s sanlock add_lockspace: {}",
        text(&o)
    );
}

/// sanlock 5.1.1's `sanlock daemon -D -w 0` in the chroot, stopped on drop (by its
/// `shutdown -f 1` command, then by the PID in its pid file).
/// With [`Sanlock5::start_in`], another suite's sanlock (trixie's 3.9.5).
pub struct Sanlock5 {
    pub child: Child,
    pub run_dir: PathBuf,
    pub suite: &'static str,
}

impl Sanlock5 {
    pub fn start(s: &Scratch, host_name: &str) -> Sanlock5 {
        Sanlock5::start_in(SUITE, s, host_name)
    }

    /// `suite`'s sanlock daemon, run dir `run-sanlock-SUITE` and log `sanlock-SUITE.log`
    /// in the scratch dir (for sid: `run-sanlock5`, `sanlock5.log`).
    pub fn start_in(suite: &'static str, s: &Scratch, host_name: &str) -> Sanlock5 {
        let tag = if suite == SUITE {
            "5".to_string()
        } else {
            format!("-{suite}")
        };
        let run_dir = s.dir.join(format!("run-sanlock{tag}"));
        std::fs::create_dir_all(&run_dir).expect("run dir");
        let log_path = s.dir.join(format!("sanlock{tag}.log"));
        let log = std::fs::File::create(&log_path).expect("log");
        let child = in_chroot_of(
            suite,
            &[&run_dir],
            &run_dir,
            &[
                "sanlock", "daemon", "-D", "-w", "0", "-U", "root", "-G", "root", "-e", host_name,
            ],
        )
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("dup"))
        .stderr(log)
        .spawn()
        .expect("start a chroot's sanlock daemon");
        let sock = run_dir.join("sanlock.sock");
        assert!(
            wait_for(30, || std::os::unix::net::UnixStream::connect(&sock)
                .is_ok()),
            "{suite}'s sanlock daemon socket never appeared (log: {})",
            log_path.display()
        );
        Sanlock5 {
            child,
            run_dir,
            suite,
        }
    }

    /// `sanlock ARGS` in the chroot with `dev`'s directory and the run dir bound.
    pub fn cmd(&self, dev: &Path, args: &[&str]) -> std::process::Output {
        let _ = dev;
        run(&mut in_chroot_of(
            self.suite,
            &[&self.run_dir],
            &self.run_dir,
            args,
        ))
    }
}

impl Sanlock5 {
    /// This suite's `sanlock direct init` of lockspace `ls` (io_timeout 1) at offset 0 and
    /// of resource `ls:r1` at `res_off` on `dev`, each asserted.
    pub fn format_ls_r1(&self, dev: &str, res_off: u64) {
        let d = Path::new(dev);
        for (what, spec) in [
            ("-s", format!("ls:0:{dev}:0")),
            ("-r", format!("ls:r1:{dev}:{res_off}")),
        ] {
            let mut args = vec!["sanlock", "direct", "init", what, spec.as_str()];
            if what == "-s" {
                args.extend(["-o", "1"]);
            }
            let o = self.cmd(d, &args);
            assert!(
                o.status.success(),
                "{}'s init {what}: {}",
                self.suite,
                text(&o)
            );
        }
    }

    /// This suite's `sanlock client rem_lockspace -s ls:HOST_ID:DEV:0`, asserted.
    pub fn rem_lockspace(&self, dev: &str, host_id: u64) {
        let spec = format!("ls:{host_id}:{dev}:0");
        let o = self.cmd(
            Path::new(dev),
            &["sanlock", "client", "rem_lockspace", "-s", &spec],
        );
        assert!(
            o.status.success(),
            "{}'s rem_lockspace: {}",
            self.suite,
            text(&o)
        );
    }
}

impl Sanlock5 {
    /// Kills the daemon with SIGKILL (by the PID in its pid file): a host that crashed.
    pub fn kill9(&mut self) {
        let pid = std::fs::read_to_string(self.run_dir.join("sanlock.pid")).expect("sanlock.pid");
        let _ = Command::new("kill").args(["-KILL", pid.trim()]).status();
        assert!(
            wait_for(15, || matches!(self.child.try_wait(), Ok(Some(_)))),
            "sanlock 5.1.1 did not end after SIGKILL"
        );
    }
}

impl Drop for Sanlock5 {
    fn drop(&mut self) {
        let _ = run(&mut in_chroot_of(
            self.suite,
            &[&self.run_dir],
            &self.run_dir,
            &["sanlock", "client", "shutdown", "-f", "1"],
        ));
        if !wait_for(15, || matches!(self.child.try_wait(), Ok(Some(_)))) {
            if let Ok(pid) = std::fs::read_to_string(self.run_dir.join("sanlock.pid")) {
                let _ = Command::new("kill").args(["-KILL", pid.trim()]).status();
            }
            let _ = wait_for(10, || matches!(self.child.try_wait(), Ok(Some(_))));
        }
        let _ = self.child.wait();
    }
}

pub fn text(o: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}
