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
//!
//! CMD learns why it is stopped as a Rust caller would: with `--loss-file FILE` (given to
//! CMD as `LOCKD_LOSS_FILE`), the file is written — atomically, *before* the SIGTERM —
//! with `reason=`, `kill_in_s=`, `watchdog_in_s=` (empty when unknown), `lease=` and
//! `token=` lines; it is removed before campaigning so a stale reason is never read.
//! With `--json`, stdout carries one JSON event per line (`campaigning`, `elected` with
//! the token, `lost` with reason and seconds left, `exited` with the command's status)
//! and CMD's stdout goes to stderr so the stream stays parseable.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use client_lib::{ClientLeaseError, LeaderElection, LeaseSpec};
use serde_json::json;

use super::{print_json, ConnArgs};
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
    /// Write the loss reason and seconds left to this file before stopping the command
    /// (the command finds it in LOCKD_LOSS_FILE).
    #[arg(long = "loss-file", value_name = "FILE")]
    pub loss_file: Option<PathBuf>,
    /// Command to run while leader (after `--`).
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
    #[command(flatten)]
    pub conn: ConnArgs,
}

#[derive(Debug, Args)]
pub struct LeaderArgs {
    /// The lease: LOCKSPACE:NAME:PATH:OFFSET.
    #[arg(short = 'r', long = "resource")]
    pub resource: String,
    #[command(flatten)]
    pub conn: ConnArgs,
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

/// One JSON event line on stdout (`--json`).
fn event(json_out: bool, v: serde_json::Value) {
    if json_out {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{v}");
        let _ = out.flush();
    }
}

/// What the command is told when leadership ends: (reason, kill_in, watchdog_in).
type LossWhy = (String, Option<Duration>, Option<Duration>);

/// Writes the loss file atomically (a temporary file renamed over it).
fn write_loss_file(path: &Path, why: &LossWhy, lease: &str, token: u64) -> Result<()> {
    let secs = |d: Option<Duration>| {
        d.map(|d| format!("{:.3}", d.as_secs_f64()))
            .unwrap_or_default()
    };
    let text = format!(
        "reason={}\nkill_in_s={}\nwatchdog_in_s={}\nlease={lease}\ntoken={token}\n",
        why.0,
        secs(why.1),
        secs(why.2)
    );
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    std::fs::write(&tmp, text).with_context(|| format!("write {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("rename to {}", path.display()))?;
    Ok(())
}

fn secs_json(d: Option<Duration>) -> serde_json::Value {
    d.map_or(serde_json::Value::Null, |d| json!(d.as_secs_f64()))
}

/// `lockd elect`. Returns the process exit code.
pub fn elect(a: &ElectArgs) -> Result<ExitCode> {
    let spec = LeaseSpec::parse(&a.resource)?;
    let Some((program, args)) = a.command.split_first() else {
        bail!("give the command to run as leader after `--`");
    };
    let program_path = resolve_program(program)?;
    let json_out = a.conn.json;
    if let Some(f) = &a.loss_file {
        match std::fs::remove_file(f) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => bail!("cannot remove the old loss file {}: {e}", f.display()),
        }
    }
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
    event(
        json_out,
        json!({"event": "campaigning", "lease": spec.short(), "pid": std::process::id()}),
    );
    let deadline = a.timeout_s.map(|t| Instant::now() + Duration::from_secs(t));
    let leadership = loop {
        if stop.load(Ordering::SeqCst) {
            eprintln!("lockd elect: stopped by a signal before being elected");
            return Ok(ExitCode::from(EXIT_LOST));
        }
        // Short campaigns so that a signal is noticed while waiting.
        match election.campaign(Some(Duration::from_secs(1))) {
            Ok(l) => break l,
            Err(ClientLeaseError::Timeout { .. }) => {
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
    if let Some(f) = &a.loss_file {
        cmd.env("LOCKD_LOSS_FILE", f);
    }
    if json_out {
        // stdout is the event stream: the command writes to our stderr instead.
        use std::os::fd::AsFd;
        let err = std::io::stderr()
            .as_fd()
            .try_clone_to_owned()
            .context("duplicate stderr")?;
        cmd.stdout(err);
    }
    sys::kill_child_with_parent(&mut cmd);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            let _ = leadership.resign();
            bail!("cannot run {program}: {e} (lease released)");
        }
    };
    event(
        json_out,
        json!({"event": "elected", "lease": spec.short(), "token": token,
               "command_pid": child.id()}),
    );
    loop {
        if let Some(status) = child.try_wait().context("wait for command")? {
            let code = exit_code_of(status);
            let released = match leadership.resign() {
                Ok(()) => {
                    eprintln!(
                        "lockd elect: {program} exited ({status}); released {}",
                        spec.short()
                    );
                    true
                }
                Err(e) => {
                    eprintln!("lockd elect: {program} exited ({status}); release: {e}");
                    false
                }
            };
            event(
                json_out,
                json!({"event": "exited", "lease": spec.short(), "status": code,
                       "released": released, "after_loss": false}),
            );
            return Ok(ExitCode::from(code));
        }
        let notice = match lost.recv_timeout(Duration::from_millis(50)) {
            Ok(n) => Some((n, false)),
            Err(_) if stop.load(Ordering::SeqCst) => {
                // The daemon writes its notice before it signals: give it a moment to
                // name the reason.
                match lost.recv_timeout(Duration::from_millis(200)) {
                    Ok(n) => Some((n, true)),
                    Err(_) => None,
                }
            }
            Err(_) => None,
        };
        let (why, text): (LossWhy, String) = match notice {
            Some((n, by_signal)) => (
                (n.reason.name().to_string(), n.kill_in, n.watchdog_in),
                format!(
                    "leadership lost ({}{}{}){}",
                    n.reason.name(),
                    n.kill_in
                        .map(|d| format!(", kill escalation in {:.1} s", d.as_secs_f64()))
                        .unwrap_or_default(),
                    n.watchdog_in
                        .map(|d| format!(", watchdog in {:.1} s", d.as_secs_f64()))
                        .unwrap_or_default(),
                    if by_signal {
                        " and stopped by a signal"
                    } else {
                        ""
                    }
                ),
            ),
            None if stop.load(Ordering::SeqCst) => (
                ("stopped".to_string(), None, None),
                "stopped by a signal".to_string(),
            ),
            None => continue,
        };
        // The command is told before it is signalled.
        if let Some(f) = &a.loss_file {
            if let Err(e) = write_loss_file(f, &why, &spec.short(), token) {
                eprintln!("lockd elect: {e:#}");
            }
        }
        event(
            json_out,
            json!({"event": "lost", "lease": spec.short(), "token": token,
                   "reason": why.0, "kill_in_s": secs_json(why.1),
                   "watchdog_in_s": secs_json(why.2)}),
        );
        eprintln!(
            "lockd elect: {text}: SIGTERM to {program} (pid {})",
            child.id()
        );
        let _ = sys::send_signal(child.id(), libc::SIGTERM);
        let until = Instant::now() + Duration::from_secs(a.grace);
        let status = loop {
            if let Some(st) = child.try_wait().ok().flatten() {
                break Some(st);
            }
            if Instant::now() >= until {
                eprintln!(
                    "lockd elect: {program} still running after {} s: SIGKILL",
                    a.grace
                );
                let _ = child.kill();
                break child.wait().ok();
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        event(
            json_out,
            json!({"event": "exited", "lease": spec.short(),
                   "status": status.map(exit_code_of), "released": false,
                   "after_loss": true}),
        );
        // Exit without releasing: the daemon releases (or the lease expires) when our
        // registered connection closes, without this process blocking on storage.
        std::process::exit(i32::from(EXIT_LOST));
    }
}

/// The candidates waiting on this host for `lease` (`LOCKSPACE:NAME`): registered
/// clients whose last acquire of it was refused as busy.
fn local_candidates(conn: &ConnArgs, lease: &str) -> Result<Vec<super::timeline::ClientInfo>> {
    let snap = super::timeline::snapshot(conn, false)?;
    Ok(snap
        .clients
        .into_iter()
        .filter(|c| c.waiting.as_deref() == Some(lease))
        .collect())
}

/// `lockd leader`.
pub fn leader(a: &LeaderArgs) -> Result<()> {
    let spec = LeaseSpec::parse(&a.resource)?;
    let info = client_lib::lease::leader(&a.conn.run_dir(), &spec)
        .with_context(|| format!("leader of {}", spec.short()))?;
    let state = info.state_name();
    let waiting = local_candidates(&a.conn, &spec.short())?;
    if a.conn.json {
        let candidates: Vec<_> = waiting
            .iter()
            .map(|c| json!({"pid": c.pid, "name": c.name, "waiting_s": c.waiting_s}))
            .collect();
        if info.host_id == 0 {
            print_json(&json!({
                "lease": spec.short(),
                "host_id": null,
                "host_name": null,
                "token": info.token,
                "state": state,
                "waiting_here": candidates,
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
                "waiting_here": candidates,
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
    for c in &waiting {
        println!(
            "{}: candidate on this host: pid {} ({}) waiting {} s",
            spec.short(),
            c.pid,
            c.name,
            c.waiting_s.unwrap_or(0)
        );
    }
    Ok(())
}
