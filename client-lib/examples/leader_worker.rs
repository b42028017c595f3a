//! A leader-elected worker: the fencing-token pattern end to end.
//!
//! ```text
//! leader_worker --lease LS:NAME:PATH:OFFSET --store SOCK --host NAME
//!               [--run-dir DIR] [--writes N] [--interval-ms MS]
//! ```
//!
//! It campaigns for the lease through the local lockd daemon, and while it leads writes
//! `WRITE <token> <host> <time>` lines to a store (`lockd-fenced-store serve`) that
//! refuses any token lower than the highest it has accepted. It stops writing the moment
//! its leadership is no longer trusted (a loss notice from the daemon, or the daemon gone
//! or silent), and it stops for good if the store refuses it: some newer leader has
//! written, so this one must have been paused past its lease. After N writes it resigns,
//! so that another worker can take over.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use client_lib::{LeaderElection, LeaseSpec};

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn run() -> Result<ExitCode, Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let spec = LeaseSpec::parse(&arg(&args, "--lease").ok_or("--lease LS:NAME:PATH:OFFSET")?)?;
    let store = PathBuf::from(arg(&args, "--store").ok_or("--store SOCKET")?);
    let host = arg(&args, "--host").ok_or("--host NAME")?;
    let run_dir = arg(&args, "--run-dir")
        .map(PathBuf::from)
        .unwrap_or_else(client_lib::default_run_dir);
    let writes: u64 = arg(&args, "--writes").map_or(Ok(10), |v| v.parse())?;
    let interval =
        Duration::from_millis(arg(&args, "--interval-ms").map_or(Ok(100), |v| v.parse())?);

    let election = LeaderElection::new(spec, &run_dir).with_owner_name(&host);
    eprintln!("{host}: campaigning");
    let leadership = election.campaign(None)?;
    let token = leadership.token();
    eprintln!("{host}: leader with token {token}");

    let stream = UnixStream::connect(&store)?;
    let mut answers = BufReader::new(stream.try_clone()?);
    let mut out = stream;
    for _ in 0..writes {
        // Check before every write: a leader that was told it lost must not write.
        if let Some(notice) = leadership.lease().lost() {
            eprintln!(
                "{host}: leadership lost ({}); stopping",
                notice.reason.name()
            );
            return Ok(ExitCode::from(75));
        }
        let now = SystemTime::now().duration_since(UNIX_EPOCH)?.as_nanos();
        writeln!(out, "WRITE {token} {host} {now}")?;
        let mut answer = String::new();
        answers.read_line(&mut answer)?;
        if !answer.starts_with("OK") {
            eprintln!("{host}: store refused token {token}: {}", answer.trim());
            return Ok(ExitCode::from(3));
        }
        std::thread::sleep(interval);
    }
    leadership.resign()?;
    eprintln!("{host}: resigned after {writes} writes");
    Ok(ExitCode::SUCCESS)
}

fn main() -> ExitCode {
    match run() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("leader_worker: {e}");
            ExitCode::FAILURE
        }
    }
}
