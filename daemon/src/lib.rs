//! The lockd daemon: a sanlock-protocol server granting shared-storage leases.
//!
//! `run(config)` owns the process: it forks the helper (before any thread), locks its
//! memory (`mlock`, before any thread, so every thread stack is locked as it is made),
//! takes the pid-file lock in the run dir, binds `sanlock.sock` (mode 0660), then runs
//! the event loop (`reactor`: accepts connections, reads request headers, hands commands
//! to a bounded worker pool), the once-a-second monitor, and one renewal thread per
//! lockspace until shutdown. Every thread is started through [`threads`], with an
//! explicit small stack.
//!
//! All `unsafe` lives in `sys`; the rest of the crate denies it. Modules are `pub(crate)`
//! unless something outside the crate uses them: the binaries (`run`, `config`,
//! `observability`) and the tests that call handlers or read state directly (`admin`,
//! `lockspace`, `space`, `paxos`, `state`, `sync`, `tables`, `metrics`, `exporter`,
//! `threads`, `helper` for `Daemon::new`). No module imports one above it
//! (docs/architecture.md, "The daemon's modules, in layers"; `tests/module_graph.rs`).
#![deny(unsafe_code)]

pub mod access;
pub mod admin;
pub mod clock;
pub(crate) mod cmd;
pub mod cmd_error;
pub(crate) mod confirm;
pub(crate) mod dispatch;
pub mod exporter;
pub mod fence;
pub(crate) mod forpid;
pub mod helper;
pub(crate) mod inuse;
pub(crate) mod kill;
pub mod lockspace;
pub mod mailbox;
pub mod metrics;
pub mod netfs;
pub(crate) mod notify;
pub mod observability;
pub mod paxos;
pub(crate) mod permit;
pub mod planted;
pub(crate) mod pool;
pub(crate) mod reactor;
pub(crate) mod rindex;
pub(crate) mod server;
pub mod shutdown;
/// One lockspace's status and its transitions: the core's (`lockd_core::space_state`).
pub use lockd_core::space_state;
pub mod space;
pub mod state;
pub mod sync;
#[allow(unsafe_code)]
pub(crate) mod sys;
pub mod tables;
pub mod threads;
pub(crate) mod watch;
pub(crate) mod watchdog;

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::sync::Arc;

use thiserror::Error;
use tracing::{error, info, warn};

/// The configuration schema lives in `lockd-config` (shared with the CLI); the daemon's
/// modules name it `crate::config`.
pub use lockd_config as config;
pub use lockd_config::{Config, DaemonArgs, PID_FILE};
use observability::LogRing;
use state::Daemon;
use sync::lock;

/// STATUS `mlock_level` once current and future pages are locked (`sys::lock_memory`): sanlock's
/// level 2 (its level 1 is MCL_CURRENT alone, 0 no mlockall).
pub const MLOCK_LEVEL_ALL: u8 = 2;

/// Why the daemon could not start or run.
#[derive(Debug, Error)]
pub enum DaemonError {
    #[error("cannot create run dir {path}: {source}")]
    RunDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("another lockd daemon is running with run dir {path} (pid file locked)")]
    AlreadyRunning { path: PathBuf },
    #[error("pid file {path}: {source}")]
    PidFile {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot bind socket in {path}: {source}")]
    Socket {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot start helper process: {0}")]
    Helper(std::io::Error),
    #[error("cannot start thread: {0}")]
    Thread(std::io::Error),
    #[error("cannot set up signal handling: {0}")]
    Signals(std::io::Error),
    #[error("cannot listen for metrics on {addr}: {source}")]
    Metrics {
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot make the shutdown's wake (a socket pair): {0}")]
    ShutdownWake(std::io::Error),
    #[error("log file {path}: {source}")]
    LogFile {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Forks into the background (the parent exits 0), as sanlock does without -D.
fn daemonize(log_file: &std::path::Path) -> Result<(), DaemonError> {
    let log = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o640)
        .open(log_file)
        .map_err(|source| DaemonError::LogFile {
            path: log_file.to_path_buf(),
            source,
        })?;
    // SAFETY: `run` calls this first thing, before the helper fork and before any thread
    // is started (tracing's fmt subscriber starts none); `fork` also checks /proc.
    #[allow(unsafe_code)]
    let forked = unsafe { sys::fork() };
    match forked.map_err(DaemonError::Helper)? {
        sys::Forked::Parent { .. } => std::process::exit(0),
        sys::Forked::Child => sys::detach(&log).map_err(|source| DaemonError::LogFile {
            path: log_file.to_path_buf(),
            source,
        }),
    }
}

/// Waits until every lockspace has been removed.
pub fn wait_spaces_gone(d: &Daemon) {
    while !lock(&d.spaces).is_empty() {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// Runs the daemon until SHUTDOWN or SIGTERM/SIGINT. Must be called while the process is
/// single-threaded (it forks the helper first), with tracing already set up via
/// [`observability::init`] using `ring`.
pub fn run(cfg: Config, ring: Arc<LogRing>) -> Result<(), DaemonError> {
    stop_on_panic();
    if !cfg.foreground {
        daemonize(&cfg.log_file)?;
    }
    // The helper is forked first, while we are single-threaded.
    let helper = helper::Helper::start(&cfg.run_dir).map_err(DaemonError::Helper)?;
    // Locked after the helper fork (the helper, which only forwards orders, stays
    // unlocked: mlockall is not inherited) and before any thread starts, so every
    // thread's stack (small, see `threads`) is locked as it is made.
    let mlock_level = if cfg.mlock {
        if !sys::fix_malloc_mmap_threshold() {
            warn!("mallopt(M_MMAP_THRESHOLD) refused: freed buffers may stay locked");
        }
        match sys::lock_memory() {
            Ok(()) => MLOCK_LEVEL_ALL,
            Err(e) => {
                // As sanlock: a failed mlockall is logged, not fatal.
                warn!(
                    error = %e,
                    "mlockall failed: running with memory that \
                     can be swapped out (needs CAP_IPC_LOCK or a larger RLIMIT_MEMLOCK)"
                );
                0
            }
        }
    } else {
        info!("mlock = false: the daemon's memory is not locked");
        0
    };
    sys::ignore_sigpipe().map_err(DaemonError::Signals)?;
    // Two fds per client slot (the connection and the clone kept to shut it down), plus
    // disks, the io_uring rings and the log: ask for room well beyond that.
    let want_fds = (tables::MAX_CLIENTS as u64).saturating_mul(4);
    match sys::raise_nofile_limit(want_fds) {
        Ok(n) if n >= want_fds => {}
        Ok(n) => warn!(
            limit = n,
            want = want_fds,
            "RLIMIT_NOFILE is below what a full client table needs; connections may be \
             refused early"
        ),
        Err(e) => warn!(error = %e, "cannot raise RLIMIT_NOFILE"),
    }
    sys::block_signals().map_err(DaemonError::Signals)?;
    let running = start(cfg, Some(helper), ring, mlock_level, true)?;
    running.wait_and_stop();
    Ok(())
}

/// Makes a panic on any thread stop the process once it is reported: a panicking thread
/// may have left a transition half applied, and no thread may go on from there. Release
/// builds abort on panic anyway (`panic = "abort"`); this covers debug builds, which the
/// tests run.
fn stop_on_panic() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        report(info);
        eprintln!("lockd-daemon: a thread panicked; stopping the daemon");
        std::process::abort();
    }));
}

/// A daemon serving its socket, started by `start` (from [`run`], or inside a test
/// process by [`start_in_process`]).
pub struct Running {
    d: Arc<Daemon>,
    monitor: std::thread::JoinHandle<()>,
    listener_clone: std::os::unix::net::UnixListener,
    pid_path: PathBuf,
    /// Held open for its lock until the daemon has stopped.
    _pid_file: std::fs::File,
    made_run_dir: bool,
}

/// Starts the daemon inside the calling process, for tests: no helper process (so no
/// kill escalation: nothing is ever killed), no mlockall, no signal handling, no fork.
/// Everything else is the daemon `run` starts: the socket in `cfg.run_dir`, the event loop,
/// the monitor, the watch heartbeats, renewal threads per lockspace. Pair it with
/// `lockd_diskio::memory::install` to run it over in-memory disks.
pub fn start_in_process(cfg: Config, ring: Arc<LogRing>) -> Result<Running, DaemonError> {
    start(cfg, None, ring, 0, false)
}

/// The pid file in `run_dir`, locked for as long as it stays open and holding this
/// process's pid: another daemon on the same run dir is refused.
fn lock_pid_file(run_dir: &std::path::Path) -> Result<(PathBuf, std::fs::File), DaemonError> {
    let pid_path = run_dir.join(PID_FILE);
    let mut pid_file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o644)
        .open(&pid_path)
        .map_err(|source| DaemonError::PidFile {
            path: pid_path.clone(),
            source,
        })?;
    if sys::lock_file(&pid_file).is_err() {
        return Err(DaemonError::AlreadyRunning {
            path: run_dir.to_path_buf(),
        });
    }
    let _ = pid_file.set_len(0);
    let _ = writeln!(pid_file, "{}", std::process::id());
    Ok((pid_path, pid_file))
}

/// The start's log lines: the watchdog's setting, then the daemon's.
fn log_start(cfg: &Config, helper_pid: Option<i32>) {
    if cfg.use_watchdog {
        info!(
            wdmd_run_dir = %cfg.wdmd_run_dir.display(),
            fire_timeout = cfg.watchdog_fire_timeout_s,
            "watchdog on: every lockspace is armed in wdmd"
        );
    } else {
        warn!("watchdog is OFF (-w 0): lease holders are not fenced by a hardware watchdog");
    }
    info!(
        run_dir = %cfg.run_dir.display(),
        host_name = %cfg.host_name,
        io_timeout = cfg.io_timeout_s,
        helper_pid,
        "lockd daemon started"
    );
}

/// Binds the socket and starts the daemon's threads; returns once clients can connect.
fn start(
    cfg: Config,
    helper: Option<(helper::Helper, helper::StatusPipe)>,
    ring: Arc<LogRing>,
    mlock_level: u8,
    handle_signals: bool,
) -> Result<Running, DaemonError> {
    let (helper, helper_status) = helper.unzip();
    // Remembered so a clean exit can remove a run dir the daemon made (drop-in mode's
    // /run/sanlock must not linger for sanlock clients to find after lockd stops).
    let made_run_dir = !cfg.run_dir.exists();
    std::fs::create_dir_all(&cfg.run_dir).map_err(|source| DaemonError::RunDir {
        path: cfg.run_dir.clone(),
        source,
    })?;
    let (pid_path, pid_file) = match lock_pid_file(&cfg.run_dir) {
        Ok(locked) => locked,
        Err(e) => {
            if let Some(h) = &helper {
                let _ = sys::kill(h.pid, libc::SIGKILL);
            }
            return Err(e);
        }
    };
    let listener =
        server::bind(&cfg.run_dir, cfg.socket_gid).map_err(|source| DaemonError::Socket {
            path: cfg.run_dir.clone(),
            source,
        })?;
    let metrics_listener = match cfg.metrics_listen {
        Some(addr) => Some(
            std::net::TcpListener::bind(addr)
                .map_err(|source| DaemonError::Metrics { addr, source })?,
        ),
        None => None,
    };
    log_start(&cfg, helper.as_ref().map(|h| h.pid));
    let d = Arc::new(Daemon::new(cfg, helper, ring).map_err(DaemonError::ShutdownWake)?);
    d.mlock_level
        .store(mlock_level, std::sync::atomic::Ordering::Relaxed);
    let d_listen = d.clone();
    let listener_clone = listener.try_clone().map_err(|source| DaemonError::Socket {
        path: d.cfg.run_dir.clone(),
        source,
    })?;
    let reactor = Arc::new(
        reactor::Reactor::new().map_err(|source| DaemonError::Socket {
            path: d.cfg.run_dir.clone(),
            source,
        })?,
    );
    // Set once, here, before any client can connect.
    let _ = d.reactor.set(reactor.clone() as Arc<dyn state::EventLoop>);
    threads::spawn("lockd-reactor", move || {
        reactor::serve(d_listen, reactor, listener)
    })
    .map_err(DaemonError::Thread)?;
    let d_mon = d.clone();
    let monitor = threads::spawn("lockd-monitor", move || kill::monitor_loop(&d_mon))
        .map_err(DaemonError::Thread)?;
    let d_status = d.clone();
    if let Some(status) = helper_status {
        threads::spawn("lockd-helper-status", move || {
            helper::status_loop(status, &d_status.core)
        })
        .map_err(DaemonError::Thread)?;
    }
    let d_watch = d.clone();
    threads::spawn("lockd-watch", move || watch::heartbeat_loop(&d_watch))
        .map_err(DaemonError::Thread)?;
    if let Some(l) = metrics_listener {
        let d_metrics = d.clone();
        threads::spawn("lockd-metrics", move || exporter::serve(d_metrics, l))
            .map_err(DaemonError::Thread)?;
    }
    if handle_signals {
        spawn_signal_thread(d.clone())?;
    }
    // The socket was bound and is listening before the event loop started, so
    // clients connecting after READY=1 are accepted.
    d.notifier.ready(&d.summary().to_string());
    Ok(Running {
        d,
        monitor,
        listener_clone,
        pid_path,
        _pid_file: pid_file,
        made_run_dir,
    })
}

/// SIGTERM and SIGINT (blocked in every thread by `run`) are taken here.
fn spawn_signal_thread(d_sig: Arc<Daemon>) -> Result<(), DaemonError> {
    threads::spawn("lockd-signal", move || loop {
        let sig = match sys::wait_signal() {
            Ok(sig) => sig,
            Err(e) => {
                error!(error = %e, "sigwait failed: SIGTERM/SIGINT no longer handled");
                return;
            }
        };
        if sig == libc::SIGTERM || sig == libc::SIGINT {
            // As sanlock: a signal is a non-forced shutdown, ignored while lockspaces
            // exist (stopping would have to kill every lease holder). Use a forced
            // SHUTDOWN (`lockd shutdown -f`, `sanlock client shutdown -f 1`) for that.
            if lock(&d_sig.spaces).is_empty() {
                info!(sig, "signal: shutting down");
                d_sig.request_shutdown();
                return;
            }
            warn!(
                sig,
                "signal: shutdown ignored, lockspaces exist (use a forced shutdown)"
            );
        }
    })
    .map(|_| ())
    .map_err(DaemonError::Thread)
}

impl Running {
    /// Waits for a shutdown request (SHUTDOWN, a signal in [`run`], or
    /// [`Daemon::request_shutdown`]), for every lockspace to go, then closes the socket
    /// and every client connection and removes the pid file.
    pub fn wait_and_stop(self) {
        let Running {
            d,
            monitor,
            listener_clone,
            pid_path,
            _pid_file,
            made_run_dir,
        } = self;
        // Wait for shutdown, then for lockspaces to go (their threads release delta
        // leases).
        d.shutdown.wait();
        d.notifier.stopping("lockd stopping");
        wait_spaces_gone(&d);
        let _ = monitor.join();
        // Wake the reactor so it sees the shutdown flag, then close client connections.
        let _ = std::os::unix::net::UnixStream::connect(
            d.cfg.run_dir.join(client_lib::proto::SOCKET_NAME),
        );
        drop(listener_clone);
        if let Some(addr) = d.cfg.metrics_listen {
            // Wake the metrics listener too, so it sees the shutdown flag.
            let _ =
                std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_millis(200));
        }
        for c in lock(&d.core).clients.slots.values() {
            if let Some(s) = &c.stream {
                let _ = s.shutdown(std::net::Shutdown::Both);
            }
        }
        let _ = std::fs::remove_file(d.cfg.run_dir.join(client_lib::proto::SOCKET_NAME));
        // Still locked by us: no other daemon can have taken it over.
        let _ = std::fs::remove_file(&pid_path);
        if made_run_dir {
            // Only when empty: anything else in it is not ours to delete.
            let _ = std::fs::remove_dir(&d.cfg.run_dir);
        }
        if let Some(h) = d.helper.as_ref() {
            let _ = sys::kill(h.pid, libc::SIGTERM);
        }
        let left = lock(&d.core).resources.len();
        if left != 0 {
            // Only orphans of a failed lockspace can remain; they expire with our host_id.
            error!(left, "exiting with leases still recorded");
        }
        info!("lockd daemon stopped");
    }
}
