//! `wdmd`'s command line, in the library so `lockd man` can render wdmd(8) from it.

use std::path::PathBuf;

use clap::Parser;

use crate::{daemon, proto};

/// Watchdog multiplexer compatible with sanlock's wdmd (socket protocol of libwdmd).
#[derive(Debug, Parser)]
#[command(name = "wdmd", version)]
pub struct WdmdArgs {
    /// Print the daemon's debug state (DUMP_DEBUG) and exit.
    #[arg(short = 'd', long = "dump")]
    pub dump: bool,
    /// Print the path of a working watchdog device (disarmed again) and exit.
    #[arg(short = 'p', long = "probe")]
    pub probe: bool,
    /// Stay in the foreground and log to stderr.
    #[arg(short = 'D')]
    pub foreground: bool,
    /// Watchdog device to try first; `emu:/path/to/sock` for wdmd-emulator.
    #[arg(short = 'w', value_name = "PATH")]
    pub device: Option<String>,
    /// Allow test scripts (0 or 1).
    #[arg(short = 'S', value_name = "0|1", default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=1))]
    pub allow_scripts: u8,
    /// Scripts directory.
    #[arg(short = 's', value_name = "DIR", default_value = daemon::DEFAULT_SCRIPTS_DIR)]
    pub scripts_dir: PathBuf,
    /// Kill unfinished scripts after this many seconds (0 = never).
    #[arg(short = 'k', value_name = "SEC", default_value_t = 0)]
    pub kill_script_sec: u64,
    /// Group owning the socket (default: sanlock, if that group exists).
    #[arg(short = 'G', value_name = "GROUP")]
    pub group: Option<String>,
    /// Fire timeout for sanlock 3.8 clients and --probe (3.9 clients send their own).
    #[arg(long = "fire-timeout", value_name = "SEC", default_value_t = daemon::DEFAULT_FIRE_TIMEOUT,
          value_parser = clap::value_parser!(u32).range(1..=3600))]
    pub fire_timeout: u32,
    /// Run directory for the socket and pid file (libwdmd clients only use /run/wdmd).
    #[arg(long = "run-dir", env = "WDMD_RUN_DIR", value_name = "DIR", default_value = proto::DEFAULT_RUN_DIR)]
    pub run_dir: PathBuf,
    /// Start-up guard marker (default /dev/shm/wdmd, or RUN_DIR/wdmd.shm for another run dir).
    #[arg(long = "marker", value_name = "PATH")]
    pub marker: Option<PathBuf>,
}
