//! `lockd-ctdb-mutex LS:NAME:PATH:OFFSET [--run-dir DIR] [--timeout S]`: CTDB's cluster
//! lock (recovery lock) as a lockd resource lease.
//!
//! Configured in ctdb.conf as
//! `cluster lock = !/usr/sbin/lockd-ctdb-mutex ctdb:reclock:/dev/sdX:1M`
//! (`recovery lock = …` in CTDB before 4.16). It speaks CTDB's mutex-helper contract
//! (samba `ctdb/doc/cluster_mutex_helper.txt`):
//!
//! * exactly one byte on stdout, no newline: `0` the lease is taken and held, `1` another
//!   holder has it (contention), `2` the acquire took longer than `--timeout`, `3` any
//!   other error (bad arguments, no daemon, the lockspace not joined by the local daemon,
//!   a refusal). Nothing else is ever written to stdout; messages go to stderr, which
//!   ctdbd puts in its log.
//! * after `0` it keeps running and holding the lease (this process is the registered
//!   holder, so lockd's kill escalation reaches it) until:
//!   - SIGTERM (ctdbd lets go of the lock): release, exit 0;
//!   - the lease is lost (a loss notice from the daemon: renewals failing, lockspace
//!     failed or removed, a FORCE/GRACEFUL request from another host; or the daemon gone
//!     or silent): exit 1 at once without releasing (a release could block on failed
//!     storage; the daemon drops the lease when our connection closes). ctdbd sees EOF on
//!     the pipe, which is how a helper says "lock lost";
//!   - the parent (ctdbd's recovery daemon) is gone: checked every 100 ms by comparing
//!     getppid() with the parent at start; release, exit 0. A helper started with parent
//!     pid 1 (its parent already died) writes `3` and exits.
//!
//! The lease is registered with SANLK_RESTRICT_SIGKILL: where the daemon would SIGKILL
//! the holder it sends SIGTERM, and the helper, having read the loss notice first,
//! exits without releasing. The fencing token (the lease's lver) is logged to stderr.
//! The daemon is found by `--run-dir`, else `$LOCKD_RUN_DIR`, else `$SANLOCK_RUN_DIR`,
//! else /run/lockd. All nodes must have the same `cluster lock` string (ctdbd compares
//! them), so per-node settings come from the environment (`LOCKD_RUN_DIR`).

#[path = "../ctdb_mutex_cli.rs"]
mod ctdb_mutex_cli;
#[path = "../errtext.rs"]
mod errtext;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};
use clap::Parser;
use client_lib::proto::SANLK_RESTRICT_SIGKILL;
use client_lib::{
    Client, ClientError, ClientLeaseError, Lease, LeaseAcquireOptions, LeaseSpec, Wait,
};
use ctdb_mutex_cli::Args;

/// One line to stderr (ctdbd's log) in a single write: `eprintln!` writes each piece of
/// its format separately to the unbuffered stderr, and ctdbd's own lines, written to the
/// same file, landed between the pieces.
macro_rules! say {
    ($($arg:tt)*) => {{
        let line = format!("{}\n", format_args!($($arg)*));
        let _ = std::io::stderr().write_all(line.as_bytes());
    }};
}

const PROG: &str = "lockd-ctdb-mutex";
/// How often the parent and the stop flag are looked at while holding.
const POLL: Duration = Duration::from_millis(100);

/// The byte written to ctdbd.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Taken,
    Contended,
    Timeout,
    Error,
}

impl Outcome {
    fn byte(self) -> u8 {
        match self {
            Outcome::Taken => b'0',
            Outcome::Contended => b'1',
            Outcome::Timeout => b'2',
            Outcome::Error => b'3',
        }
    }
}

/// Writes the one byte ctdbd reads, unbuffered.
fn answer(o: Outcome) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_all(&[o.byte()]).and_then(|()| out.flush()) {
        say!("{PROG}: cannot write to stdout: {e}");
    }
}

fn run_dir_of(a: &Args) -> PathBuf {
    if let Some(d) = &a.run_dir {
        return d.clone();
    }
    if let Some(v) = std::env::var_os("LOCKD_RUN_DIR").filter(|v| !v.is_empty()) {
        return PathBuf::from(v);
    }
    client_lib::default_run_dir()
}

/// Why taking the lease did not give a lease.
enum TakeError {
    Busy,
    Other(anyhow::Error),
}

/// Checks that the local daemon has joined the lease's lockspace, then acquires without
/// waiting on the owner.
fn take(spec: &LeaseSpec, run_dir: &std::path::Path) -> Result<Lease, TakeError> {
    let mut c = Client::connect(run_dir).map_err(|e| {
        TakeError::Other(anyhow!(
            "cannot reach the lockd daemon in {}: {e} (is it running?)",
            run_dir.display()
        ))
    })?;
    let spaces = match c.get_lockspaces() {
        Ok(v) => v,
        Err(ClientError::Result { rv }) if rv == -libc::ENOENT => Vec::new(),
        Err(e) => {
            return Err(TakeError::Other(
                anyhow!(e).context("list the daemon's lockspaces"),
            ))
        }
    };
    drop(c);
    if !spaces.iter().any(|ls| ls.name == spec.lockspace) {
        return Err(TakeError::Other(anyhow!(
            "lockspace {} is not joined by the lockd daemon in {} (join it first: \
             lockd add-lockspace -s {}:HOST_ID:PATH:OFFSET)",
            spec.lockspace,
            run_dir.display(),
            spec.lockspace
        )));
    }
    let opts = LeaseAcquireOptions {
        run_dir: run_dir.to_path_buf(),
        shared: false,
        wait: Wait::NoWait,
        owner_name: Some(format!("ctdb-mutex-{}", std::process::id())),
        restrict: SANLK_RESTRICT_SIGKILL,
        ..LeaseAcquireOptions::default()
    };
    match Lease::acquire(spec, &opts) {
        Ok(l) => Ok(l),
        Err(ClientLeaseError::Busy { .. }) => Err(TakeError::Busy),
        Err(e) => Err(TakeError::Other(
            anyhow!(e).context(format!("acquire {}", spec.short())),
        )),
    }
}

fn main() -> ExitCode {
    let args = match Args::try_parse() {
        Ok(a) => a,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
                let _ = e.print();
                return ExitCode::SUCCESS;
            }
            say!("{PROG}: {e}");
            answer(Outcome::Error);
            return ExitCode::from(3);
        }
    };
    match run(&args) {
        Ok(code) => code,
        Err(e) => {
            say!("{PROG}: {}", errtext::error_line(&e));
            ExitCode::from(3)
        }
    }
}

fn run(a: &Args) -> Result<ExitCode> {
    let parent = std::os::unix::process::parent_id();
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGHUP,
    ] {
        if let Err(e) = signal_hook::flag::register(sig, stop.clone()) {
            answer(Outcome::Error);
            return Err(e).context("install signal handler");
        }
    }
    if parent == 1 {
        answer(Outcome::Error);
        return Err(anyhow!("parent pid is 1: ctdbd is already gone"));
    }
    let spec = match LeaseSpec::parse(&a.lease) {
        Ok(s) => s,
        Err(e) => {
            answer(Outcome::Error);
            return Err(e.into());
        }
    };
    let run_dir = run_dir_of(a);

    // The acquire runs in a thread so that a hung daemon or storage gives `2` on time
    // (and SIGTERM is honoured while waiting). If we leave before it returns, our exit
    // closes its connections and the daemon drops whatever it got.
    let (tx, rx) = mpsc::channel();
    {
        let (spec, run_dir) = (spec.clone(), run_dir.clone());
        std::thread::Builder::new()
            .name("acquire".into())
            .spawn(move || {
                let _ = tx.send(take(&spec, &run_dir));
            })
            .map_err(|e| {
                answer(Outcome::Error);
                anyhow!("start acquire thread: {e}")
            })?;
    }
    let deadline = Instant::now() + Duration::from_secs(a.timeout_s);
    let lease = loop {
        match rx.recv_timeout(POLL) {
            Ok(Ok(l)) => break l,
            Ok(Err(TakeError::Busy)) => {
                // Contention: quiet (ctdbd runs the helper after every recovery on
                // every node and expects `1` there).
                answer(Outcome::Contended);
                return Ok(ExitCode::from(1));
            }
            Ok(Err(TakeError::Other(e))) => {
                answer(Outcome::Error);
                return Err(e);
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                answer(Outcome::Error);
                return Err(anyhow!("acquire thread ended without an answer"));
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
        if stop.load(Ordering::SeqCst) {
            say!(
                "{PROG}: stopped by a signal while acquiring {}",
                spec.short()
            );
            return Ok(ExitCode::SUCCESS);
        }
        if Instant::now() >= deadline {
            answer(Outcome::Timeout);
            say!(
                "{PROG}: {} not acquired within {} s (daemon in {} not answering?)",
                spec.short(),
                a.timeout_s,
                run_dir.display()
            );
            // Exit at once: the acquire thread may be blocked in the daemon.
            std::process::exit(2);
        }
    };
    let lost = lease.loss_channel();
    answer(Outcome::Taken);
    say!(
        "{PROG}: took cluster lock {} with fencing token {} (pid {}, parent {parent})",
        spec.short(),
        lease.token(),
        std::process::id()
    );
    loop {
        match lost.recv_timeout(POLL) {
            Ok(n) => {
                say!(
                    "{PROG}: cluster lock {} lost ({}): exiting",
                    spec.short(),
                    n.reason.name()
                );
                // No release: the daemon drops the lease when our connection closes,
                // without us blocking on storage that may have failed.
                std::process::exit(1);
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                say!("{PROG}: lost the lease watch of {}: exiting", spec.short());
                std::process::exit(1);
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
        if stop.load(Ordering::SeqCst) {
            // The daemon writes its loss notice before it signals: a SIGTERM that is the
            // daemon's (restricted) SIGKILL comes with a notice.
            if let Ok(n) = lost.recv_timeout(Duration::from_millis(200)) {
                say!(
                    "{PROG}: cluster lock {} lost ({}) and stopped by a signal: exiting",
                    spec.short(),
                    n.reason.name()
                );
                std::process::exit(1);
            }
            return release(lease, &spec, "stopped by a signal");
        }
        let now_parent = std::os::unix::process::parent_id();
        if now_parent != parent {
            return release(
                lease,
                &spec,
                &format!("parent {parent} is gone (now {now_parent})"),
            );
        }
    }
}

fn release(lease: Lease, spec: &LeaseSpec, why: &str) -> Result<ExitCode> {
    match lease.release() {
        Ok(()) => {
            say!("{PROG}: {why}: released {}", spec.short());
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            say!("{PROG}: {why}: release {}: {e}", spec.short());
            Ok(ExitCode::from(1))
        }
    }
}
