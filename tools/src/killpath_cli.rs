//! The command line of `lockd-killpath` (src/killpath.rs), in a module of its own so
//! that `lockd man` can write lockd-killpath(8) from the same definition.

use std::path::PathBuf;

use clap::{Parser, ValueEnum};

/// Killpath helper for lockd: stop a lease holder the way its owner wants (pause or
/// destroy a VM, stop a systemd unit, or signal a process) when its lease must go.
#[derive(Debug, Parser)]
#[command(name = "lockd-killpath", version)]
pub struct Cli {
    /// libvirt connection URI (with --domain and --action).
    #[arg(short = 'c', long = "virsh-uri", requires_all = ["domain", "action"])]
    pub virsh_uri: Option<String>,
    /// Domain UUID (or name) to act on.
    #[arg(short, long, requires = "virsh_uri")]
    pub domain: Option<String>,
    /// What to do to the domain: pause (virsh suspend) or destroy.
    #[arg(short, long, value_enum, requires = "virsh_uri")]
    pub action: Option<VmAction>,
    /// systemd unit to stop (systemctl stop UNIT).
    #[arg(short, long, conflicts_with_all = ["virsh_uri", "signal"])]
    pub unit: Option<String>,
    /// Signal to send, by name (TERM, SIGTERM) or number (15).
    #[arg(short, long, conflicts_with_all = ["virsh_uri", "unit"])]
    pub signal: Option<String>,
    /// Process to signal (default: the pid the daemon appends).
    #[arg(short, long, requires = "signal")]
    pub pid: Option<String>,
    /// Append the log line to this file too.
    #[arg(short, long)]
    pub log: Option<PathBuf>,
    /// Give up on virsh/systemctl after this many seconds (it is killed; exit 3).
    #[arg(short, long, default_value_t = 30)]
    pub timeout: u64,
    /// After the action succeeded, release every lease of the holder (the appended pid)
    /// through the daemon, as libvirt does when it pauses a guest: the daemon's kill
    /// escalation then leaves the holder alone, and a GRACEFUL requester gets the lease.
    #[arg(short, long)]
    pub release: bool,
    /// The daemon's run dir for --release (default: $LOCKD_RUN_DIR, which lockd sets for
    /// its killpaths, else $SANLOCK_RUN_DIR, else /run/lockd).
    #[arg(long = "run-dir")]
    pub run_dir: Option<PathBuf>,
    /// The lease holder's pid, appended by the daemon (SANLK_KILLPATH_PID).
    pub holder_pid: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum VmAction {
    Pause,
    Destroy,
}
