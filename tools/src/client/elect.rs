//! `lockd elect` (run a command while leader) and `lockd leader` (who leads now).
//!
//! `lockd elect -r LS:NAME:PATH:OFFSET [--grace S] -- CMD ARGS` campaigns for the lease
//! (client-lib's [`LeaderElection`]), then runs CMD with `LOCKD_FENCING_TOKEN` and
//! `LOCKD_LEASE` in its environment. The lease is held by this process (the registered
//! client), CMD is its child:
//! * CMD exits → release, exit with CMD's status (128+N for a signal N);
//! * the lease is lost (a loss notice, the daemon gone or silent) or this process gets
//!   SIGTERM/SIGINT/SIGHUP → SIGTERM to CMD at once, SIGKILL after `--grace`, exit
//!   [`EXIT_LOST`] without releasing (a release could block on failed storage; the daemon
//!   releases when our connection closes);
//! * this process dies → CMD gets SIGKILL (PR_SET_PDEATHSIG), so CMD never leads alone;
//! * the registration restricts SIGKILL: where the daemon would SIGKILL us (a FORCE
//!   request, the end of its kill escalation) it sends SIGTERM, which we handle as a loss,
//!   so CMD is stopped by us rather than orphaned.
//!
//! CMD is checked before campaigning: a program that cannot be found fails with nothing
//! held.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use client_lib::{LeaderElection, LeaseError, LeaseSpec};
use serde_json::json;

use super::{print_json, Conn};
use crate::sys;

/// Exit status of `lockd elect` when leadership was lost (or it was told to stop).
pub const EXIT_LOST: u8 = 75;

#[derive(Debug, Args)]
pub struct ElectArgs {
    /// The lease to campaign for: LOCKSPACE:NAME:PATH:OFFSET.
    #[arg(short = 'r', long = "resource")]
    pub resource: String,
    /// Seconds between SIGTERM and SIGKILL when leadership is lost.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(0..=3600))]
    pub grace: u64,
    /// Give up campaigning after this many seconds (default: wait forever).
    #[arg(long = "timeout")]
    pub timeout_s: Option<u64>,
    /// Command to run while leader (after `--`).
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
    #[command(flatten)]
    pub conn: Conn,
}

#[derive(Debug, Args)]
pub struct LeaderArgs {
    /// The lease: LOCKSPACE:NAME:PATH:OFFSET.
    #[arg(short = 'r', long = "resource")]
    pub resource: String,
    #[command(flatten)]
    pub conn: Conn,
}

/// Finds `program` as exec would: a path if it contains '/', else in $PATH.
fn resolve_program(program: &str) -> Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let executable = |p: &Path| {
        std::fs::metadata(p)
            .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            .unwrap_or(false)
    };
    if program.contains('/') {
        let p = PathBuf::from(program);
        if executable(&p) {
            return Ok(p);
        }
        bail!("command {program:?} does not exist or is not executable");
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        let p = dir.join(program);
        if executable(&p) {
            return Ok(p);
        }
    }
    bail!("command {program:?} not found in PATH");
}

fn exit_code_of(status: std::process::ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => u8::try_from(c).unwrap_or(1),
        (None, Some(sig)) => u8::try_from(128 + sig).unwrap_or(1),
        _ => 1,
    }
}

/// `lockd elect`. Returns the process exit code.
pub fn elect(a: &ElectArgs) -> Result<ExitCode> {
    let spec = LeaseSpec::parse(&a.resource)?;
    let Some((program, args)) = a.command.split_first() else {
        bail!("give the command to run as leader after `--`");
    };
    let program_path = resolve_program(program)?;
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGHUP,
    ] {
        signal_hook::flag::register(sig, stop.clone()).context("install signal handler")?;
    }
    let run_dir = a.conn.run_dir();
    let election = LeaderElection::new(spec.clone(), &run_dir)
        .with_owner_name(&format!("elect-{}", std::process::id()))
        // The daemon's SIGKILL (FORCE request, end of kill escalation) becomes SIGTERM
        // for us: we stop CMD (SIGTERM, then SIGKILL after --grace) and exit.
        .with_restrict(client_lib::proto::SANLK_RESTRICT_SIGKILL);
    eprintln!("lockd elect: campaigning for {}", spec.short());
    let deadline = a.timeout_s.map(|t| Instant::now() + Duration::from_secs(t));
    let leadership = loop {
        if stop.load(Ordering::SeqCst) {
            eprintln!("lockd elect: stopped by a signal before being elected");
            return Ok(ExitCode::from(EXIT_LOST));
        }
        // Short campaigns so that a signal is noticed while waiting.
        match election.campaign(Some(Duration::from_secs(1))) {
            Ok(l) => break l,
            Err(LeaseError::Timeout { .. }) => {
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    bail!("not elected within {} s", a.timeout_s.unwrap_or(0));
                }
            }
            Err(e) => return Err(e).context(format!("campaign for {}", spec.short())),
        }
    };
    let token = leadership.token();
    eprintln!(
        "lockd elect: leader of {} with fencing token {token}; running {program}",
        spec.short()
    );
    let lost = leadership.lease().loss_channel();
    let mut cmd = Command::new(&program_path);
    cmd.arg0(program)
        .args(args)
        .env("LOCKD_FENCING_TOKEN", token.to_string())
        .env("LOCKD_LEASE", spec.short());
    sys::kill_child_with_parent(&mut cmd);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            let _ = leadership.resign();
            bail!("cannot run {program}: {e} (lease released)");
        }
    };
    loop {
        if let Some(status) = child.try_wait().context("wait for command")? {
            let code = exit_code_of(status);
            match leadership.resign() {
                Ok(()) => eprintln!(
                    "lockd elect: {program} exited ({status}); released {}",
                    spec.short()
                ),
                Err(e) => eprintln!("lockd elect: {program} exited ({status}); release: {e}"),
            }
            return Ok(ExitCode::from(code));
        }
        let why = match lost.recv_timeout(Duration::from_millis(50)) {
            Ok(n) => Some(format!(
                "leadership lost ({}{}{})",
                n.reason.name(),
                n.kill_in
                    .map(|d| format!(", kill escalation in {:.1} s", d.as_secs_f64()))
                    .unwrap_or_default(),
                n.watchdog_in
                    .map(|d| format!(", watchdog in {:.1} s", d.as_secs_f64()))
                    .unwrap_or_default()
            )),
            Err(_) if stop.load(Ordering::SeqCst) => {
                // The daemon writes its notice before it signals: give it a moment to
                // name the reason.
                match lost.recv_timeout(Duration::from_millis(200)) {
                    Ok(n) => Some(format!(
                        "leadership lost ({}) and stopped by a signal",
                        n.reason.name()
                    )),
                    Err(_) => Some("stopped by a signal".to_string()),
                }
            }
            Err(_) => None,
        };
        let Some(why) = why else { continue };
        eprintln!(
            "lockd elect: {why}: SIGTERM to {program} (pid {})",
            child.id()
        );
        let _ = sys::send_signal(child.id(), libc::SIGTERM);
        let until = Instant::now() + Duration::from_secs(a.grace);
        loop {
            if child.try_wait().ok().flatten().is_some() {
                break;
            }
            if Instant::now() >= until {
                eprintln!(
                    "lockd elect: {program} still running after {} s: SIGKILL",
                    a.grace
                );
                let _ = child.kill();
                let _ = child.wait();
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // Exit without releasing: the daemon releases (or the lease expires) when our
        // registered connection closes, without this process blocking on storage.
        std::process::exit(i32::from(EXIT_LOST));
    }
}

/// `lockd leader`.
pub fn leader(a: &LeaderArgs) -> Result<()> {
    let spec = LeaseSpec::parse(&a.resource)?;
    let info = client_lib::lease::leader(&a.conn.run_dir(), &spec)
        .with_context(|| format!("leader of {}", spec.short()))?;
    let state = info.state_name();
    if a.conn.json {
        if info.host_id == 0 {
            print_json(&json!({
                "lease": spec.short(),
                "host_id": null,
                "host_name": null,
                "token": info.token,
                "state": state,
            }));
        } else {
            print_json(&json!({
                "lease": spec.short(),
                "host_id": info.host_id,
                "host_name": info.host_name.to_text(),
                "generation": info.generation,
                "token": info.token,
                "state": state,
                "shared": info.shared != 0,
            }));
        }
        return Ok(());
    }
    if info.host_id == 0 {
        println!("{}: no leader (last token {})", spec.short(), info.token);
    } else {
        let name = info.host_name.to_text();
        println!(
            "{}: host_id {} ({}) token {} state {}",
            spec.short(),
            info.host_id,
            if name.is_empty() { "?" } else { &name },
            info.token,
            state
        );
    }
    Ok(())
}
