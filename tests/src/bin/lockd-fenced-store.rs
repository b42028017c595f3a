//! `lockd-fenced-store`: a store that enforces fencing tokens, and a writer for it — the
//! fencing-token pattern end to end in the leader-election tests.
//!
//! ```text
//! lockd-fenced-store serve --socket SOCK --log LOG
//! lockd-fenced-store write --socket SOCK --host NAME [--witness LOG --res RES] [--interval-ms N]
//! ```
//!
//! The store takes one line per request, `WRITE <token> <host> <t_ns>`, and answers
//! `OK` when `token` is at least the highest token it has accepted, else
//! `REJECT <highest>`. Every request is appended to LOG (`accepted`/`rejected` lines,
//! with the highest token so far), so a test can prove from LOG alone that no write with
//! a lower token was ever accepted after a higher one.
//!
//! The writer reads its token from `LOCKD_FENCING_TOKEN` (as `lockd elect` sets it),
//! writes every interval, and records its tenure in the mutual-exclusion witness log
//! (`start` with lver = token, `alive` after each accepted write, `end`, and `sigterm`
//! when told to stop). A rejected write ends it with status 3: a fenced writer stops.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use lockd_system_tests::witness;

fn arg_value(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn serve(args: &[String]) -> Result<()> {
    let socket = PathBuf::from(arg_value(args, "--socket").context("--socket")?);
    let log = PathBuf::from(arg_value(args, "--log").context("--log")?);
    let _ = std::fs::remove_file(&socket);
    let listener = UnixListener::bind(&socket).context("bind store socket")?;
    let highest = Arc::new(Mutex::new(0u64));
    for conn in listener.incoming() {
        let Ok(conn) = conn else { continue };
        let (highest, log) = (highest.clone(), log.clone());
        std::thread::spawn(move || {
            let _ = handle(conn, &highest, &log);
        });
    }
    Ok(())
}

fn handle(conn: UnixStream, highest: &Mutex<u64>, log: &Path) -> Result<()> {
    let mut out = conn.try_clone()?;
    for line in BufReader::new(conn).lines() {
        let line = line?;
        let f: Vec<&str> = line.split_whitespace().collect();
        let (token, host, t_ns) = match f.as_slice() {
            ["WRITE", t, h, ts] => match (t.parse::<u64>(), ts.parse::<u128>()) {
                (Ok(t), Ok(ts)) => (t, *h, ts),
                _ => {
                    writeln!(out, "ERROR bad request")?;
                    continue;
                }
            },
            _ => {
                writeln!(out, "ERROR bad request")?;
                continue;
            }
        };
        // The check and the log line under one lock: the log's order is the store's.
        let mut hi = highest.lock().unwrap_or_else(|p| p.into_inner());
        let accepted = token >= *hi;
        if accepted {
            *hi = token;
        }
        let record = format!(
            "{} token={token} host={host} t_ns={t_ns} highest={} store_ns={}\n",
            if accepted { "accepted" } else { "rejected" },
            *hi,
            witness::now_ns()
        );
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)?
            .write_all(record.as_bytes())?;
        drop(hi);
        if accepted {
            writeln!(out, "OK")?;
        } else {
            writeln!(
                out,
                "REJECT {}",
                *highest.lock().unwrap_or_else(|p| p.into_inner())
            )?;
        }
    }
    Ok(())
}

fn write(args: &[String]) -> Result<ExitCode> {
    let socket = PathBuf::from(arg_value(args, "--socket").context("--socket")?);
    let host = arg_value(args, "--host").context("--host")?;
    let witness_log = arg_value(args, "--witness").map(PathBuf::from);
    let res = arg_value(args, "--res").unwrap_or_else(|| "leader".to_string());
    let interval = Duration::from_millis(
        arg_value(args, "--interval-ms")
            .and_then(|v| v.parse().ok())
            .unwrap_or(100),
    );
    let token: u64 = std::env::var("LOCKD_FENCING_TOKEN")
        .context("LOCKD_FENCING_TOKEN is not set (run me under `lockd elect`)")?
        .parse()
        .context("LOCKD_FENCING_TOKEN is not a number")?;
    let term = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGTERM, term.clone())?;
    let note = |event: &str, extra: &str| {
        if let Some(w) = &witness_log {
            let _ = witness::append(w, &host, &res, event, extra);
        }
    };
    note("start", &format!("lver={token}"));
    let stream = UnixStream::connect(&socket).context("connect to store")?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut out = stream;
    loop {
        if term.load(Ordering::SeqCst) {
            note("sigterm", "");
            note("end", "");
            return Ok(ExitCode::SUCCESS);
        }
        writeln!(out, "WRITE {token} {host} {}", witness::now_ns())?;
        let mut answer = String::new();
        reader.read_line(&mut answer)?;
        match answer.split_whitespace().next() {
            Some("OK") => note("alive", ""),
            Some("REJECT") => {
                note(
                    "fenced",
                    &format!("answer={}", answer.trim().replace(' ', "_")),
                );
                note("end", "");
                eprintln!("store rejected token {token}: {}", answer.trim());
                return Ok(ExitCode::from(3));
            }
            _ => bail!("store answered {answer:?}"),
        }
        std::thread::sleep(interval);
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("serve") => serve(&args[1..]).map(|()| ExitCode::SUCCESS),
        Some("write") => write(&args[1..]),
        _ => {
            eprintln!("usage: lockd-fenced-store serve|write …");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(c) => c,
        Err(e) => {
            eprintln!("lockd-fenced-store: {e:#}");
            ExitCode::FAILURE
        }
    }
}
