//! `lockd-killpath`: a libvirt-style killpath helper. lockd (or sanlock) runs it when a
//! registered client's lease must be given up, before any SIGTERM/SIGKILL; registered
//! with `lockd acquire --killpath /usr/sbin/lockd-killpath --killpath-args "…"` or
//! through the KILLPATH call (`sanlock_killpath`), as libvirt registers its helper.
//!
//! ```text
//! lockd-killpath [-l|--log FILE] [-t|--timeout SECS] [-r|--release [--run-dir DIR]] ACTION [PID]
//!   ACTION:  -c|--virsh-uri URI -d|--domain UUID -a|--action pause|destroy  (virsh suspend|destroy)
//!            -u|--unit UNIT                                                 (systemctl stop UNIT)
//!            -s|--signal SIG [-p|--pid PID]                                 (kill -SIG PID)
//! ```
//! With `--release`, once the action succeeded, the holder's leases are released through
//! the daemon (RELEASE with SANLK_REL_ALL for the pid), as libvirt releases a paused
//! guest's leases: the kill escalation then spares the holder.
//! PID (last, positional) is what the daemon appends with `SANLK_KILLPATH_PID`: the
//! lease holder's pid. `--signal` uses it when `--pid` is not given; the other actions
//! only log it. The daemon passes at most 8 arguments (the pid included) in at most 127
//! bytes: use the short options (`-cURI -dUUID -apause -r`) or `--opt=value`.
//!
//! One line per run goes to stderr (syslog style, the daemon's log when it ran us) and,
//! with `--log FILE`, is appended to FILE. Exit status, which lockd logs and shows as
//! `killpath_status=exit:N` in the client's STATUS: 0 done (a signalled process already
//! gone counts as done), 1 the action failed, 2 bad arguments, 3 the action timed out.

use std::fs::OpenOptions;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use clap::Parser;

use killpath_cli::{Cli, VmAction};

mod civil;
mod errtext;
mod killpath_cli;
#[allow(dead_code)] // lockd-killpath uses only a few of the lockd binary's wrappers
mod sys;

const EXIT_FAILED: u8 = 1;
const EXIT_USAGE: u8 = 2;
const EXIT_TIMEOUT: u8 = 3;

/// What one run did, for the log line and the exit status.
struct Outcome {
    what: String,
    result: std::result::Result<String, (u8, String)>,
}

/// Signal names accepted by `--signal` (with or without `SIG`).
const SIGNALS: &[(&str, i32)] = &[
    ("HUP", libc::SIGHUP),
    ("INT", libc::SIGINT),
    ("QUIT", libc::SIGQUIT),
    ("KILL", libc::SIGKILL),
    ("USR1", libc::SIGUSR1),
    ("USR2", libc::SIGUSR2),
    ("TERM", libc::SIGTERM),
    ("CONT", libc::SIGCONT),
    ("STOP", libc::SIGSTOP),
];

fn parse_signal(s: &str) -> Result<i32> {
    if let Ok(n) = s.parse::<i32>() {
        if (1..=64).contains(&n) {
            return Ok(n);
        }
        bail!("signal number {n} out of range 1..64");
    }
    let up = s.to_ascii_uppercase();
    let name = up.strip_prefix("SIG").unwrap_or(&up);
    SIGNALS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|&(_, v)| v)
        .with_context(|| {
            let names: Vec<&str> = SIGNALS.iter().map(|(n, _)| *n).collect();
            format!(
                "unknown signal {s:?} (a number or one of {})",
                names.join(", ")
            )
        })
}

fn parse_pid(s: &str, what: &str) -> Result<u32> {
    match s.parse::<u32>() {
        Ok(p) if p > 1 => Ok(p),
        _ => bail!("{what} {s:?} is not a process id (an integer above 1)"),
    }
}

/// UTC `YYYY-MM-DDTHH:MM:SS.mmmZ` (days-from-civil inverse, no time crate needed).
fn timestamp() -> String {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let secs = i64::try_from(d.as_secs()).unwrap_or(0);
    format!("{}.{:03}Z", civil::utc_seconds(secs), d.subsec_millis())
}

/// Runs a program with a deadline; Ok(stdout+stderr trimmed) on exit 0.
fn run_with_timeout(
    program: &str,
    args: &[&str],
    timeout: Duration,
) -> std::result::Result<String, (u8, String)> {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| (EXIT_FAILED, format!("cannot run {program}: {e}")))?;
    // Drain both pipes in threads so a chatty program cannot block on a full pipe.
    let drain = |r: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            if let Some(mut r) = r {
                let mut b = Vec::new();
                let _ = r.read_to_end(&mut b);
                s = String::from_utf8_lossy(&b).into_owned();
            }
            s
        })
    };
    let out = drain(
        child
            .stdout
            .take()
            .map(|r| Box::new(r) as Box<dyn Read + Send>),
    );
    let err = drain(
        child
            .stderr
            .take()
            .map(|r| Box::new(r) as Box<dyn Read + Send>),
    );
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err((
                    EXIT_TIMEOUT,
                    format!(
                        "{program} still running after {}s: killed",
                        timeout.as_secs()
                    ),
                ));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => return Err((EXIT_FAILED, format!("cannot wait for {program}: {e}"))),
        }
    };
    let mut text = out.join().unwrap_or_default();
    text.push_str(&err.join().unwrap_or_default());
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if status.success() {
        Ok(text)
    } else {
        Err((EXIT_FAILED, format!("{program} failed ({status}): {text}")))
    }
}

fn act(cli: &Cli) -> Result<Outcome> {
    let timeout = Duration::from_secs(cli.timeout.max(1));
    let holder = cli
        .holder_pid
        .as_deref()
        .map(|p| parse_pid(p, "appended holder pid"))
        .transpose()?;
    let holder_note = holder
        .map(|p| format!(" holder_pid={p}"))
        .unwrap_or_default();
    if let Some(uri) = &cli.virsh_uri {
        let (Some(domain), Some(action)) = (&cli.domain, cli.action) else {
            bail!("--virsh-uri needs --domain and --action");
        };
        let verb = match action {
            VmAction::Pause => "suspend",
            VmAction::Destroy => "destroy",
        };
        return Ok(Outcome {
            what: format!("virsh -c {uri} {verb} {domain}{holder_note}"),
            result: run_with_timeout("virsh", &["-c", uri, verb, domain], timeout),
        });
    }
    if let Some(unit) = &cli.unit {
        return Ok(Outcome {
            what: format!("systemctl stop {unit}{holder_note}"),
            result: run_with_timeout("systemctl", &["stop", "--", unit], timeout),
        });
    }
    if let Some(sig) = &cli.signal {
        let signo = parse_signal(sig)?;
        let pid = match (&cli.pid, holder) {
            (Some(p), _) => parse_pid(p, "--pid")?,
            (None, Some(p)) => p,
            (None, None) => bail!(
                "--signal needs --pid PID or the holder pid the daemon appends \
                 (register with SANLK_KILLPATH_PID)"
            ),
        };
        let result = match sys::send_signal(pid, signo) {
            Ok(()) => Ok("sent".to_string()),
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {
                Ok("process already gone".to_string())
            }
            Err(e) => Err((EXIT_FAILED, format!("kill: {e}"))),
        };
        return Ok(Outcome {
            what: format!("signal {signo} to pid {pid}{holder_note}"),
            result,
        });
    }
    bail!("no action: give --virsh-uri/--domain/--action, --unit or --signal")
}

/// Releases every lease of the holder pid through the daemon.
fn release(cli: &Cli) -> (String, std::result::Result<String, (u8, String)>) {
    let pid = match (&cli.pid, &cli.holder_pid) {
        (Some(p), _) | (None, Some(p)) => match parse_pid(p, "pid") {
            Ok(p) => p,
            Err(e) => {
                return (
                    "release".into(),
                    Err((EXIT_FAILED, errtext::error_line(&e))),
                )
            }
        },
        (None, None) => {
            return (
                "release".into(),
                Err((
                    EXIT_FAILED,
                    "--release needs the holder pid (register with SANLK_KILLPATH_PID)".into(),
                )),
            )
        }
    };
    let run_dir = cli
        .run_dir
        .clone()
        .or_else(|| std::env::var_os("LOCKD_RUN_DIR").map(PathBuf::from))
        .or_else(|| std::env::var_os("SANLOCK_RUN_DIR").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("/run/lockd"));
    let what = format!("release leases of pid {pid} via {}", run_dir.display());
    let rv = client_lib::Client::connect(&run_dir)
        .and_then(|mut c| c.release(pid as i32, client_lib::proto::SANLK_REL_ALL, &[]));
    let result = match rv {
        Ok(0) => Ok(format!("released leases of pid {pid}")),
        Ok(rv) => Err((
            EXIT_FAILED,
            format!("release for pid {pid}: daemon answered {rv}"),
        )),
        Err(e) => Err((EXIT_FAILED, format!("release for pid {pid}: {e}"))),
    };
    (what, result)
}

fn log_line(path: Option<&PathBuf>, line: &str) {
    eprintln!("{line}");
    if let Some(path) = path {
        let res = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .and_then(|mut f| f.write_all(format!("{line}\n").as_bytes()));
        if let Err(e) = res {
            eprintln!("lockd-killpath: cannot append to {}: {e}", path.display());
        }
    }
}

fn main() -> ExitCode {
    let me = std::process::id();
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            if matches!(
                e.kind(),
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion
            ) {
                let _ = e.print();
                return ExitCode::SUCCESS;
            }
            let args: Vec<String> = std::env::args().skip(1).collect();
            eprintln!(
                "{} lockd-killpath[{me}]: bad arguments {args:?}: {e}",
                timestamp()
            );
            return ExitCode::from(EXIT_USAGE);
        }
    };
    // Run by a helper that ignores SIGCHLD, we could not wait for virsh/systemctl.
    if let Err(e) = sys::restore_default_sigchld() {
        eprintln!("lockd-killpath: cannot reset SIGCHLD: {e}");
    }
    let outcome = act(&cli).map(|mut o| {
        if cli.release && o.result.is_ok() {
            let (what, result) = release(&cli);
            o.what.push_str(&format!(" + {what}"));
            o.result = match (o.result, result) {
                (Ok(a), Ok(b)) => Ok(if a.is_empty() { b } else { format!("{a}; {b}") }),
                (Ok(_), Err(e)) | (Err(e), _) => Err(e),
            };
        }
        o
    });
    let (code, line) = match outcome {
        Ok(Outcome {
            what,
            result: Ok(detail),
        }) => {
            let detail = if detail.is_empty() {
                String::new()
            } else {
                format!(": {detail}")
            };
            (0, format!("{what}: ok{detail}"))
        }
        Ok(Outcome {
            what,
            result: Err((code, why)),
        }) => (code, format!("{what}: FAILED: {why}")),
        Err(e) => (
            EXIT_USAGE,
            format!("bad arguments: {}", errtext::error_line(&e)),
        ),
    };
    log_line(
        cli.log.as_ref(),
        &format!("{} lockd-killpath[{me}]: {line} (exit {code})", timestamp()),
    );
    ExitCode::from(code)
}
