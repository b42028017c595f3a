//! `lockd-daemon`: runs the lockd daemon in the foreground (also `lockd daemon`).
use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use lockd_daemon::{observability, Config, DaemonArgs};

/// lockd daemon: sanlock-compatible shared-storage lease manager.
#[derive(Debug, Parser)]
#[command(name = "lockd-daemon", version, about)]
struct Cli {
    #[command(flatten)]
    args: DaemonArgs,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let ring = Arc::new(observability::LogRing::default());
    observability::init(ring.clone());
    let cfg = match Config::resolve(&cli.args, std::env::var_os("LOCKD_RUN_DIR").map(Into::into)) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("lockd-daemon: error: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Err(e) = lockd_daemon::planted::init() {
        eprintln!("lockd-daemon: error: {e}");
        return ExitCode::FAILURE;
    }
    match lockd_daemon::run(cfg, ring) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lockd-daemon: error: {e}");
            ExitCode::FAILURE
        }
    }
}
