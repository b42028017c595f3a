//! `wdmd-emulator`: an emulated watchdog device for machines without one.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::Parser;
use wdmd::emulator::{Emulator, EmulatorConfig, KillTarget};

/// Emulated watchdog device: fires TIMEOUT seconds after the last keepalive
/// unless magic-closed, and "resets" its simulated host by SIGKILLing it.
/// wdmd uses it with `-w emu:SOCKET`.
#[derive(Debug, Parser)]
#[command(name = "wdmd-emulator", version)]
struct Args {
    /// Device socket to listen on.
    #[arg(long, value_name = "PATH")]
    socket: PathBuf,
    /// State file; one line per event (start, open, settimeout, magic-close,
    /// unclean-close, fire), each with mono= (CLOCK_MONOTONIC) and wall= (epoch) seconds.
    #[arg(long, value_name = "PATH")]
    state: PathBuf,
    /// Timeout before any SETTIMEOUT, seconds.
    #[arg(long, default_value_t = 60, value_name = "SEC")]
    timeout: u32,
    /// Largest timeout accepted by SETTIMEOUT.
    #[arg(long, default_value_t = 3600, value_name = "SEC")]
    max_timeout: u32,
    /// What a reset kills: pid:N (a PID namespace init kills its namespace),
    /// pgid:N, or pidns:N (every process in N's PID namespace). Repeatable.
    #[arg(long = "kill", value_name = "TARGET")]
    kill: Vec<String>,
    /// Exit after firing instead of staying as a disarmed device.
    #[arg(long)]
    exit_after_fire: bool,
}

fn run(a: Args) -> Result<()> {
    let targets = a
        .kill
        .iter()
        .map(|s| KillTarget::parse(s))
        .collect::<Result<Vec<_>, _>>()?;
    let mut emu = Emulator::new(EmulatorConfig {
        socket: a.socket,
        state_file: a.state,
        default_timeout: a.timeout,
        max_timeout: a.max_timeout,
        targets,
        exit_after_fire: a.exit_after_fire,
    })?;
    emu.run()?;
    Ok(())
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    match run(Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("wdmd-emulator: {e:#}");
            ExitCode::FAILURE
        }
    }
}
