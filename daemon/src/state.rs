//! Shared daemon state: clients (connections), lockspaces and locally held resources.
//!
//! Lock order (never take an earlier lock while holding a later one):
//! `watchers` → `core` → `spaces` (`watchers` is taken before `core` only by a watch's
//! registration, `crate::watch::register`; else alone); `mailboxes` is a leaf (taken
//! alone), and so are the
//! event loop's `parked`, `pids` and `shares` (`crate::reactor`: none is held while
//! another lock is taken; the pid watches are checked against the tables by copying
//! them first). The helper's pipe is written with no lock held. Disk I/O is never
//! done while holding any of these locks. The client and resource tables, and the disk
//! operations the core asked for, and every lockspace's status, have one owner, the core
//! ([`DaemonCore`](crate::tables::DaemonCore)), behind the one `core` lock. A lockspace
//! is listed in `spaces` and in the core together, under both locks
//! ([`Daemon::list_space`]), and marked gone in the core as it leaves `spaces`.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};

use client_lib::wire;
use disk_format::Name;
use lease_core::monitor::HostMonitor;

use crate::config::Config;
use crate::helper::Helper;
use crate::mailbox::Mailboxes;
use crate::notify::Notifier;
use crate::observability::LogRing;
use crate::space::Space;
use crate::sync::lock;
use crate::tables::CoreLock;

/// The stream of one lease-loss watch connection (lockd extension, `crate::watch`);
/// the registry itself is the core's (`lockd_core::Watches`).
#[derive(Debug)]
pub struct Watcher {
    /// The pid whose leases are watched (as the core registered it).
    pub pid: i32,
    pub stream: std::os::unix::net::UnixStream,
}

/// What the handlers and the exporter ask of the event loop that runs them.
pub trait EventLoop: Send + Sync {
    /// Watches `pid` (through `pidfd`) for the connection-less slot `ci`: the slot's
    /// leases are released when the process exits.
    fn watch_pid(&self, ci: u32, pid: i32, pidfd: std::os::fd::OwnedFd) -> std::io::Result<()>;
    /// The worker pool's threads, busy and idle (None before the pool runs).
    fn pool_counts(&self) -> Option<crate::pool::PoolCounts>;
    /// Commands of non-root uids held back because their uid has its share of workers.
    fn jobs_over_share(&self) -> usize;
    /// Processes watched for exit (ACQUIRE for a pid).
    fn watched_pids(&self) -> usize;
}

/// Everything the daemon's threads share.
pub struct Daemon {
    pub cfg: Config,
    pub helper: Option<Helper>,
    pub notifier: Notifier,
    pub log: Arc<LogRing>,
    /// The core (`lockd_core::Core`): the client and resource tables and the disk
    /// operations in flight, behind one lock (`crate::tables::CoreLock`).
    pub core: Arc<CoreLock>,
    /// The core's effects for a client command that runs on another worker
    /// (`crate::mailbox`); a leaf lock.
    pub mailboxes: Mailboxes,
    pub spaces: Mutex<Vec<Arc<Space>>>,
    /// The streams of the lease-loss watch connections (lockd extension), by client
    /// slot; taken before `core` only when a watch registers (`crate::watch::register`),
    /// else alone.
    pub watchers: Mutex<std::collections::HashMap<u32, Watcher>>,
    /// The shutdown flag, and the wake of the threads that wait for it.
    pub shutdown: crate::shutdown::Shutdown,
    pub next_space_id: AtomicU32,
    pub started_monotime: u64,
    /// STATUS `mlock_level`: [`crate::MLOCK_LEVEL_ALL`] once mlockall succeeded, else 0.
    pub mlock_level: std::sync::atomic::AtomicU8,
    /// The event loop serving the socket (`crate::reactor`, which is built on this
    /// state, hence a trait object); set when the daemon starts serving (a `Daemon` built
    /// for handler tests has none).
    pub(crate) reactor: OnceLock<Arc<dyn EventLoop>>,
}

impl Daemon {
    /// Fails only when the shutdown's wake cannot be made (no file descriptor left).
    pub fn new(cfg: Config, helper: Option<Helper>, log: Arc<LogRing>) -> std::io::Result<Daemon> {
        crate::metrics::observe_disk_io();
        let core = CoreLock::new(u64::from(cfg.kill_grace_s));
        Ok(Daemon {
            cfg,
            helper,
            notifier: Notifier::from_env(),
            log,
            core: Arc::new(core),
            mailboxes: Mailboxes::default(),
            spaces: Mutex::new(Vec::new()),
            watchers: Mutex::new(std::collections::HashMap::new()),
            shutdown: crate::shutdown::Shutdown::new()?,
            next_space_id: AtomicU32::new(1),
            started_monotime: crate::clock::now_s(),
            mlock_level: std::sync::atomic::AtomicU8::new(0),
            reactor: OnceLock::new(),
        })
    }

    /// A new lockspace record (not yet listed in `spaces`), with the next space id.
    pub(crate) fn new_space(
        &self,
        ls: &wire::Lockspace,
        io_timeout: u32,
        added_by: Option<crate::access::Caller>,
    ) -> Space {
        Space {
            space_id: self.next_space_id.fetch_add(1, Ordering::Relaxed),
            name: ls.name,
            host_id: ls.host_id,
            path: ls.host_id_disk.path.to_text(),
            offset: ls.host_id_disk.offset,
            io_timeout,
            core: self.core.clone(),
            cond: Condvar::new(),
            stop: Arc::new(AtomicBool::new(false)),
            confirm: crate::confirm::ConfirmReads::default(),
            joined: OnceLock::new(),
            event_fds: Mutex::new(Vec::new()),
            rindex_busy: AtomicBool::new(false),
            examine_running: AtomicBool::new(false),
            examine_pending: AtomicBool::new(false),
            on_network_fs: AtomicBool::new(false),
            holders_on_network_fs: AtomicBool::new(false),
            async_rem_at_ms: std::sync::atomic::AtomicU64::new(0),
            fence: OnceLock::new(),
            renewal_hist: crate::metrics::Histogram::default(),
            renewal_failures: std::sync::atomic::AtomicU64::new(0),
            renewal_read_bytes: std::sync::atomic::AtomicU64::new(0),
            added_by_uid: added_by.as_ref().map_or(0, crate::access::Caller::uid),
            added_by,
        }
    }

    /// A daemon's state for unit tests: host `host_name`, io_timeout 1, no watchdog,
    /// helper, socket or configuration file.
    #[cfg(test)]
    pub(crate) fn for_tests(host_name: &str) -> Arc<Daemon> {
        let args = crate::DaemonArgs {
            foreground: true,
            use_watchdog: Some(0),
            host_name: Some(host_name.into()),
            io_timeout: Some(1),
            run_dir: Some(format!("/nonexistent/lockd-unit-{host_name}").into()),
            config: Some("/dev/null".into()),
            ..Default::default()
        };
        let cfg = crate::Config::resolve(&args, None).expect("config");
        Arc::new(Daemon::new(cfg, None, Arc::new(LogRing::default())).expect("daemon state"))
    }

    /// Lists `space` (new, from [`Daemon::new_space`]) in `spaces` and in the core, with
    /// a host monitor of this daemon's watchdog fire timeout and dblock reading, under
    /// both locks, if the core admits it (`lockd_core::Input::ListSpace`: no lockspace
    /// of that name, none on that disk area); a refusal leaves nothing listed.
    pub(crate) fn list_space(&self, space: &Arc<Space>) -> Result<(), lockd_core::ListRefused> {
        let mut core = lock(&self.core);
        let mut spaces = lock(&self.spaces);
        let mut monitor =
            HostMonitor::new(space.host_id, u64::from(self.cfg.watchdog_fire_timeout_s));
        monitor.set_read_known_hosts(!self.cfg.read_all_dblocks);
        let input = lockd_core::Input::ListSpace(lockd_core::SpaceListing {
            id: space.space_id,
            name: space.name,
            place: lockd_core::SpacePlace {
                host_id: space.host_id,
                path: space.path.clone(),
                offset: space.offset,
            },
            io_timeout_s: u64::from(space.io_timeout),
            monitor,
        });
        let lockd_core::Answer::Listed(listed) = core.answer(input) else {
            unreachable!("ListSpace is answered Listed")
        };
        listed?;
        spaces.push(space.clone());
        Ok(())
    }

    /// The lockspace with this name, in any phase.
    pub fn find_space(&self, name: &Name) -> Option<Arc<Space>> {
        lock(&self.spaces)
            .iter()
            .find(|s| s.name.same_as(name))
            .cloned()
    }

    /// The core's `Effect::RetireLockspace`: lockspace `id` lost its lease and no lease of
    /// it is left, so the core moved it to `Removing`; its thread stops renewing, leaves
    /// the delta lease on disk to expire, and unlists it (`lockspace::mark_gone`). No I/O
    /// and no lock but `spaces`: any thread that ran the core's step carries it out.
    pub fn retire_space(&self, ls: &Name, id: u32) {
        if self.stop_space_thread(id) {
            tracing::warn!(%ls, "failed lockspace removed: no lease holders left");
        }
    }

    /// The core's `Effect::StopLockspace`: lockspace `id` is being removed (REM_LOCKSPACE,
    /// a forced shutdown); its thread stops the join or the renewals, and once no lease
    /// of it is left releases the delta lease and unlists it. No I/O and no lock but
    /// `spaces`.
    pub fn stop_space(&self, ls: &Name, id: u32) {
        if self.stop_space_thread(id) {
            tracing::info!(%ls, "removing lockspace");
        }
    }

    /// Sets lockspace `id`'s stop flag and wakes its thread; false when it is not listed
    /// (any more).
    fn stop_space_thread(&self, id: u32) -> bool {
        let space = lock(&self.spaces)
            .iter()
            .find(|s| s.space_id == id)
            .cloned();
        let Some(s) = space else {
            return false;
        };
        s.stop.store(true, Ordering::SeqCst);
        s.cond.notify_all();
        true
    }

    /// What the daemon is doing, for sd_notify STATUS= (READY=1's first line): the
    /// core's summary (`Core::status_summary`: joined lockspaces, leases held, orphans
    /// included, registered clients) and the watchdog setting. Later lines come from
    /// the monitor's tick (`Effect::Status`).
    pub fn summary(&self) -> crate::notify::Summary {
        let status = lock(&self.core).status_summary();
        crate::notify::Summary::of(status, self.cfg.use_watchdog)
    }

    pub fn is_shutting_down(&self) -> bool {
        self.shutdown.is_requested()
    }

    /// Asks every thread to stop (`Running::wait_and_stop` says in which order).
    pub fn request_shutdown(&self) {
        self.shutdown.request();
    }
}
