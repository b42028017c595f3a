//! Shared daemon state: clients (connections), lockspaces and locally held resources.
//!
//! Lock order (never take an earlier lock while holding a later one):
//! `tables` → `spaces` → `Space::st`; `watchers` is a leaf (taken alone). Disk I/O is never
//! done while holding any of these locks. The client and resource tables have one owner,
//! [`Tables`] (`crate::tables`), behind the one `tables` lock.

use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use disk_format::Name;

use crate::config::Config;
use crate::helper::Helper;
use crate::lockspace::Space;
use crate::notify::Notifier;
use crate::observability::LogRing;
use crate::tables::TablesLock;

/// Locks a mutex. A poisoned mutex means a thread panicked while holding it, possibly in
/// the middle of a transition, so the data it guards cannot be trusted: this panics
/// rather than recover it, and a panic stops the daemon (`panic = "abort"` in release,
/// the hook [`crate::run`] installs, and the pool's worker abort otherwise).
pub fn lock<L: Lock + ?Sized>(m: &L) -> L::Guard<'_> {
    m.lock_or_stop()
}

/// A lock [`lock`] takes: a plain mutex, or the tables' (`crate::tables::TablesLock`,
/// whose guard checks the tables' invariants in debug builds as it lets go).
pub trait Lock {
    type Guard<'a>
    where
        Self: 'a;
    fn lock_or_stop(&self) -> Self::Guard<'_>;
}

impl<T: ?Sized> Lock for Mutex<T> {
    type Guard<'a>
        = MutexGuard<'a, T>
    where
        T: 'a;
    fn lock_or_stop(&self) -> MutexGuard<'_, T> {
        match self.lock() {
            Ok(g) => g,
            Err(_) => poisoned(),
        }
    }
}

impl<L: Lock + ?Sized> Lock for Arc<L> {
    type Guard<'a>
        = L::Guard<'a>
    where
        L: 'a;
    fn lock_or_stop(&self) -> L::Guard<'_> {
        L::lock_or_stop(self)
    }
}

/// A guard a condition variable can wait with: it gives up its mutex guard for the wait
/// and is made again from the one the wait returns.
pub trait WaitGuard<'a, T: 'a>: Sized {
    fn into_mutex_guard(self) -> MutexGuard<'a, T>;
    fn from_mutex_guard(g: MutexGuard<'a, T>) -> Self;
}

impl<'a, T: 'a> WaitGuard<'a, T> for MutexGuard<'a, T> {
    fn into_mutex_guard(self) -> MutexGuard<'a, T> {
        self
    }
    fn from_mutex_guard(g: MutexGuard<'a, T>) -> Self {
        g
    }
}

/// Waits on `cond` with `guard` held; panics on a poisoned mutex, as [`lock`].
pub fn wait<'a, T: 'a, G: WaitGuard<'a, T>>(cond: &Condvar, guard: G) -> G {
    match cond.wait(guard.into_mutex_guard()) {
        Ok(g) => G::from_mutex_guard(g),
        Err(_) => poisoned(),
    }
}

/// Waits on `cond` with `guard` held for at most `dur`; panics on a poisoned mutex, as
/// [`lock`].
pub fn wait_timeout<'a, T: 'a, G: WaitGuard<'a, T>>(
    cond: &Condvar,
    guard: G,
    dur: std::time::Duration,
) -> (G, std::sync::WaitTimeoutResult) {
    match cond.wait_timeout(guard.into_mutex_guard(), dur) {
        Ok((g, r)) => (G::from_mutex_guard(g), r),
        Err(_) => poisoned(),
    }
}

#[cold]
pub(crate) fn poisoned() -> ! {
    panic!("a lock is poisoned: a thread panicked while holding it, mid-transition; stopping")
}

/// The client and resource tables' types, from the core (`lockd-core`), with the
/// daemon's connection handle and on-disk lease state filled in.
pub use lockd_core::{
    ClientToken, FsCreds, KillPath, Refused, Waiting, MAX_CLIENTS, MAX_CLIENTS_PER_UID,
    ROOT_RESERVED_SLOTS,
};
/// One connection slot (the stream: a clone of the connection, shut down at exit).
pub type ClientSlot = lockd_core::ClientSlot<UnixStream>;
/// All connection slots.
pub type Clients = lockd_core::Clients<UnixStream>;
/// A lease held on this host.
pub type LocalRes = lockd_core::LocalRes<crate::paxos::Held>;

/// Everything the daemon's threads share.
pub struct Daemon {
    pub cfg: Config,
    pub helper: Option<Helper>,
    pub notifier: Notifier,
    pub log: Arc<LogRing>,
    /// The client and resource tables: their one owner (`crate::tables`).
    pub tables: TablesLock,
    /// Notified (after the `tables` lock has recorded it) whenever a release on disk has
    /// ended: acquires of the same lease wait on it with the `tables` lock.
    pub released: Condvar,
    pub spaces: Mutex<Vec<Arc<Space>>>,
    /// Lease-loss watch connections (lockd extension); a leaf lock.
    pub watchers: Mutex<Vec<crate::watch::Watcher>>,
    pub shutdown: AtomicBool,
    pub shutdown_cond: Condvar,
    pub shutdown_mutex: Mutex<bool>,
    pub next_space_id: AtomicU32,
    pub next_token_id: AtomicU32,
    pub started_monotime: u64,
    /// STATUS `mlock_level`: [`crate::MLOCK_LEVEL_ALL`] once mlockall succeeded, else 0.
    pub mlock_level: std::sync::atomic::AtomicU8,
    /// The event loop serving the socket; set when the daemon starts serving (a `Daemon`
    /// built for handler tests has none).
    pub(crate) reactor: std::sync::OnceLock<Arc<crate::reactor::Reactor>>,
}

impl Daemon {
    pub fn new(cfg: Config, helper: Option<Helper>, log: Arc<LogRing>) -> Daemon {
        crate::metrics::observe_disk_io();
        Daemon {
            cfg,
            helper,
            notifier: Notifier::from_env(),
            log,
            tables: TablesLock::default(),
            released: Condvar::new(),
            spaces: Mutex::new(Vec::new()),
            watchers: Mutex::new(Vec::new()),
            shutdown: AtomicBool::new(false),
            shutdown_cond: Condvar::new(),
            shutdown_mutex: Mutex::new(false),
            next_space_id: AtomicU32::new(1),
            next_token_id: AtomicU32::new(1),
            started_monotime: lockd_diskio::monotime(),
            mlock_level: std::sync::atomic::AtomicU8::new(0),
            reactor: std::sync::OnceLock::new(),
        }
    }

    /// The lockspace with this name, in any phase.
    pub fn find_space(&self, name: &Name) -> Option<Arc<Space>> {
        lock(&self.spaces)
            .iter()
            .find(|s| s.name.same_as(name))
            .cloned()
    }

    /// What the daemon is doing, for sd_notify STATUS=: joined lockspaces, leases held
    /// (orphans included) and registered clients.
    pub fn summary(&self) -> crate::notify::Summary {
        let spaces: Vec<_> = lock(&self.spaces).clone();
        let lockspaces = spaces
            .iter()
            .filter(|s| s.snapshot_phase() == crate::lockspace::Phase::Joined)
            .count();
        let tables = lock(&self.tables);
        let leases = tables.resources.len();
        let clients = tables
            .clients
            .slots
            .values()
            .filter(|c| c.registered)
            .count();
        crate::notify::Summary {
            lockspaces,
            leases,
            clients,
            watchdog: self.cfg.use_watchdog,
        }
    }

    pub fn is_shutting_down(&self) -> bool {
        self.shutdown.load(Ordering::SeqCst)
    }

    /// Asks every thread to stop (`Running::wait_and_stop` says in which order).
    pub fn request_shutdown(&self) {
        self.shutdown.store(true, Ordering::SeqCst);
        let mut done = lock(&self.shutdown_mutex);
        *done = true;
        self.shutdown_cond.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[should_panic(expected = "a lock is poisoned")]
    fn a_poisoned_lock_panics_instead_of_recovering() {
        let m = std::sync::Arc::new(Mutex::new(0u32));
        let m2 = m.clone();
        let _ = std::thread::spawn(move || {
            let mut g = lock(&m2);
            *g = 1; // half of a two-field transition
            panic!("mid-transition on purpose");
        })
        .join();
        assert!(m.is_poisoned());
        drop(lock(&m));
    }
}
