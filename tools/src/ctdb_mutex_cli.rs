//! The command line of `lockd-ctdb-mutex` (src/bin/lockd-ctdb-mutex.rs), in a module of
//! its own so that `lockd man` can write lockd-ctdb-mutex(8) from the same definition.

use std::path::PathBuf;

use clap::Parser;

/// CTDB cluster-lock helper holding a lockd resource lease.
#[derive(Debug, Parser)]
#[command(name = "lockd-ctdb-mutex", version)]
pub struct Args {
    /// The lease: LOCKSPACE:NAME:PATH:OFFSET (formatted with `lockd direct init -r`;
    /// the lockspace joined by the local daemon).
    pub lease: String,
    /// Daemon run directory holding sanlock.sock (default: $LOCKD_RUN_DIR, else
    /// $SANLOCK_RUN_DIR, else /run/lockd).
    #[arg(long = "run-dir")]
    pub run_dir: Option<PathBuf>,
    /// Seconds the acquire may take before answering `2` (timeout); CTDB itself gives
    /// up after 120 s.
    #[arg(long = "timeout", default_value_t = 60,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub timeout_s: u64,
}
