//! `lockd`: the command-line tool of lockd.
#![deny(unsafe_code)]

mod civil;
mod client;
// Only their argument definitions, for `lockd man` (the binaries use the rest).
#[allow(dead_code)]
mod ctdb_mutex_cli;
mod direct;
mod disk;
mod errtext;
#[allow(dead_code)]
mod killpath_cli;
mod manpages;
mod spec;
mod sys;

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

/// lockd: a shared-storage lease manager compatible with sanlock.
///
/// `lockd direct ...` reads and writes lease areas on storage without a daemon; the other
/// commands talk to a running lockd (or sanlock) daemon through sanlock.sock in
/// LOCKD_RUN_DIR (default /run/lockd); `lockd daemon` runs the daemon.
#[derive(Debug, Parser)]
#[command(name = "lockd", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Read and write lease areas on storage directly, without a daemon.
    #[command(subcommand)]
    Direct(DirectCommand),
    /// Run the lockd daemon (as `lockd-daemon`; -D keeps it in the foreground).
    Daemon(lockd_config::DaemonArgs),
    /// Join a lockspace (acquire a host_id lease).
    AddLockspace(client::lockspace::AddArgs),
    /// Leave a lockspace.
    RemLockspace(client::lockspace::RemArgs),
    /// Ask whether a lockspace is joined.
    InqLockspace(client::lockspace::InqArgs),
    /// List joined lockspaces (and their hosts with --hosts).
    Gets(client::lockspace::GetsArgs),
    /// Show every host of a lockspace and its state (LIVE, FAIL, DEAD, …).
    HostStatus(client::lockspace::HostStatusArgs),
    /// Acquire resource leases for a pid, or for the life of a command (`-- CMD ARGS`).
    Acquire(client::resource::AcquireArgs),
    /// Release resource leases of a pid.
    Release(client::resource::ReleaseArgs),
    /// List the leases a pid holds.
    Inquire(client::resource::InquireArgs),
    /// Convert a held lease between shared and exclusive.
    Convert(client::resource::ConvertArgs),
    /// Ask the holder of a lease (on any host) to give it up at a newer version.
    Request(client::admin::RequestArgs),
    /// Make the daemon look at request records now.
    Examine(client::admin::ExamineArgs),
    /// Send a host event to other hosts of a lockspace.
    SetEvent(client::admin::SetEventArgs),
    /// Declare a host of a lockspace dead after it was fenced (external fencing, sanlock
    /// 5.1's set_host DEAD_EXT): its leases can be taken at once. Refused while its
    /// delta lease is still renewed.
    SetHost(client::admin::SetHostArgs),
    /// Change a lockspace's settings (used, used-by-orphans).
    SetConfig(client::admin::SetConfigArgs),
    /// Read or set the value block (LVB) of a lease held with `acquire --lvb`.
    #[command(subcommand)]
    Lvb(client::lvb::LvbCommand),
    /// Resource index through the daemon: format, create, delete, lookup, update, rebuild.
    #[command(subcommand)]
    Rindex(client::rindex::RindexCommand),
    /// Run a command while this host is the leader of a lease (fencing token in its
    /// environment); stop it when leadership is lost, telling it why (--loss-file).
    Elect(client::elect::ElectArgs),
    /// Show who leads (holds) a lease now, with its fencing token and host state, and
    /// the candidates waiting for it on this host.
    Leader(client::elect::LeaderArgs),
    /// Show lockspaces (with seconds until renewal failure and watchdog reset), hosts,
    /// leases and clients; `--format sanlock` for sanlock's lines.
    Status(client::daemon_cmds::StatusArgs),
    /// Explain the fencing timeline of each lockspace: when this host and each other host
    /// renews, warns, fails, escalates kills, is reset, and may lose its leases.
    Explain(client::status::ExplainArgs),
    /// Show the daemon's version.
    Version(client::daemon_cmds::VersionArgs),
    /// Stop the daemon.
    Shutdown(client::daemon_cmds::ShutdownArgs),
    /// Print a shell completion script (bash, zsh, fish, ...).
    Completions(manpages::CompletionsArgs),
    /// Generate the man pages: lockd(8) and one per subcommand, lockd-daemon(8),
    /// lockd-killpath(8), lockd-ctdb-mutex(8), wdmd(8), lockd.toml(5).
    Man(manpages::ManArgs),
    /// Print the daemon's in-memory recent log (sanlock's `client log_dump`).
    LogDump(client::daemon_cmds::LogDumpArgs),
    /// Print a lockspace's recent delta-lease renewals: timestamp, read_ms, write_ms,
    /// next_timeouts, next_errors (sanlock's `client renewal`).
    Renewal(client::daemon_cmds::RenewalArgs),
    /// Print the daemon's metrics (Prometheus text format 0.0.4).
    Metrics(client::metrics::MetricsArgs),
    /// Check this host's setup: PASS/WARN/FAIL with a fix each; exit 0/1/2 by the worst.
    Doctor(client::doctor::DoctorArgs),
}

#[derive(Debug, Subcommand)]
enum DirectCommand {
    /// Format a lockspace (-s) or a resource lease (-r). The offset must be a multiple of
    /// the align size; an area holding valid lease records needs --force.
    Init(direct::init::InitArgs),
    /// List every non-empty record in the lease areas of a device or file.
    Dump(direct::dump::DumpArgs),
    /// Print and verify one leader record.
    ReadLeader(direct::read_leader::ReadLeaderArgs),
    /// Format a resource index (-x LOCKSPACE:PATH:OFFSET). The offset must be a multiple
    /// of the align size; valid lease records in its two areas need --force.
    Format(direct::rindex::DirectFormatArgs),
    /// Look up a resource index entry by name, by offset, or the first free slot.
    Lookup(direct::rindex::DirectLookupArgs),
    /// Add or (-z 1) remove a resource index entry, without the index lease.
    Update(direct::rindex::DirectUpdateArgs),
    /// Rebuild a resource index from the leases on disk, without the index lease.
    Rebuild(direct::rindex::DirectRebuildArgs),
    /// Persistent reservations on a device (SCSI through SG_IO or the block PR ioctls,
    /// NVMe and dm-multipath through the block PR ioctls): probe, read-keys,
    /// read-reservation, register, reserve, release, preempt, clear; `key` prints
    /// lvmlockd's key format.
    Pr(direct::pr::PrArgs),
}

/// `lockd daemon`: the same entry point as the `lockd-daemon` binary.
fn run_daemon(args: &lockd_config::DaemonArgs) -> ExitCode {
    let ring = std::sync::Arc::new(lockd_daemon::observability::LogRing::default());
    lockd_daemon::observability::init(ring.clone());
    let run_dir_env = std::env::var_os("LOCKD_RUN_DIR").map(Into::into);
    let cfg = match lockd_config::Config::resolve(args, run_dir_env) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("lockd: error: {e}");
            return ExitCode::FAILURE;
        }
    };
    match lockd_daemon::run(cfg, ring) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lockd: error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn main() -> ExitCode {
    if let Err(e) = sys::restore_default_sigpipe() {
        eprintln!("lockd: warning: cannot restore the default SIGPIPE action: {e}");
    }
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Daemon(args) => return run_daemon(args),
        Command::Elect(a) => match client::elect::elect(a) {
            Ok(code) => return code,
            Err(e) => Err(e),
        },
        Command::Leader(a) => client::elect::leader(a),
        Command::Doctor(a) => match client::doctor::run(a) {
            Ok(code) => return code,
            Err(e) => Err(e),
        },
        Command::Direct(DirectCommand::Init(a)) => direct::init::run(a),
        Command::Direct(DirectCommand::Dump(a)) => direct::dump::run(a),
        Command::Direct(DirectCommand::ReadLeader(a)) => direct::read_leader::run(a),
        Command::Direct(DirectCommand::Format(a)) => direct::rindex::format(a),
        Command::Direct(DirectCommand::Lookup(a)) => direct::rindex::lookup(a),
        Command::Direct(DirectCommand::Update(a)) => direct::rindex::update(a),
        Command::Direct(DirectCommand::Rebuild(a)) => direct::rindex::rebuild(a),
        Command::Direct(DirectCommand::Pr(c)) => direct::pr::run(c),
        Command::AddLockspace(a) => client::lockspace::add(a),
        Command::RemLockspace(a) => client::lockspace::rem(a),
        Command::InqLockspace(a) => client::lockspace::inq(a),
        Command::Gets(a) => client::lockspace::gets(a),
        Command::HostStatus(a) => client::lockspace::host_status(a),
        Command::Acquire(a) => client::resource::acquire(a),
        Command::Release(a) => client::resource::release(a),
        Command::Inquire(a) => client::resource::inquire(a),
        Command::Convert(a) => client::resource::convert(a),
        Command::Request(a) => client::admin::request(a),
        Command::Examine(a) => client::admin::examine(a),
        Command::SetEvent(a) => client::admin::set_event(a),
        Command::SetHost(a) => client::admin::set_host(a),
        Command::SetConfig(a) => client::admin::set_config(a),
        Command::Rindex(c) => client::rindex::run(c),
        Command::Lvb(c) => client::lvb::run(c),
        Command::Status(a) => client::daemon_cmds::status(a),
        Command::Explain(a) => client::status::explain(a),
        Command::Version(a) => client::daemon_cmds::version(a),
        Command::Shutdown(a) => client::daemon_cmds::shutdown(a),
        Command::Completions(a) => manpages::completions(a, Cli::command()),
        Command::Man(a) => manpages::man(a, Cli::command()),
        Command::Metrics(a) => client::metrics::run(a),
        Command::LogDump(a) => client::daemon_cmds::log_dump(a),
        Command::Renewal(a) => client::daemon_cmds::renewal(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // One line: the chain of causes joined, as operators read it in logs.
            eprintln!("lockd: error: {}", errtext::error_line(&e));
            ExitCode::FAILURE
        }
    }
}
