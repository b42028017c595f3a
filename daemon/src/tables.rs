//! The client and resource tables are the core's (`lockd_core::tables`: the transitions,
//! their invariants and `check`); here they get the daemon's connection handle (a clone
//! of the client's socket, shut down at exit) and on-disk lease state
//! ([`Held`]: lease-core's token and who opened the disk).

use std::ops::Deref;
use std::os::unix::net::UnixStream;
use std::sync::{Mutex, MutexGuard};

pub use lockd_core::tables::{AcquireStart, CommandTarget, Key};

use crate::sync::{Lock, WaitGuard};
use lease_core::paxos::Token;

/// The client and resource tables' types, from the core (`lockd-core`), with the
/// daemon's connection handle and on-disk lease state filled in.
pub use lockd_core::{
    ClientToken, FsCreds, KillPath, Refused, Waiting, MAX_CLIENTS, MAX_CLIENTS_PER_UID,
    ROOT_RESERVED_SLOTS,
};
/// A lease held on this host: the core's `LocalRes` with the daemon's on-disk state.
pub type HeldRes = lockd_core::LocalRes<Held>;

/// The on-disk state of a held resource.
#[derive(Debug, Clone, Default)]
pub struct Held {
    pub token: Option<Token>,
    /// The client whose ACQUIRE opened the disk (None: root, or outside a command):
    /// every later open of this lease's disk (release, convert, examine) is made with the
    /// same rights (`crate::access`), so a path changed after the acquire reaches
    /// nothing that client could not.
    pub opened_by: Option<crate::access::Caller>,
}

impl lockd_core::LeaseHold for Held {
    fn lver(&self) -> u64 {
        Held::lver(self)
    }
    fn set_lvb(&mut self, data: &[u8]) -> Option<Result<(), lease_core::LeaseError>> {
        self.token.as_mut().map(|token| token.set_lvb(data))
    }
}

impl Held {
    pub fn lver(&self) -> u64 {
        self.token.as_ref().map_or(0, Token::lver)
    }

    pub fn sector_size(&self) -> u64 {
        self.token
            .as_ref()
            .map_or(0, |t| t.resource.geometry.sector_bytes())
    }

    pub fn align_size(&self) -> u64 {
        self.token
            .as_ref()
            .map_or(0, |t| t.resource.geometry.align_bytes())
    }
}

/// The client and resource tables (the core's `Tables`, each client slot holding a clone
/// of its connection, shut down at exit).
pub type LeaseTables = lockd_core::Tables<UnixStream, Held>;

/// The daemon's core (`lockd_core::Core`): the client and resource tables, the
/// lockspaces, and the disk operations it asked for and that have not completed yet.
/// Changed only by `step` (docs/architecture.md): the tables' transitions are the core's
/// own (`pub(crate)` in lockd-core).
pub type DaemonCore = lockd_core::Core<UnixStream, Held>;

/// The core behind its one lock (`crate::sync::lock(&d.core)`). In debug builds (the
/// tests') the guard runs [`lockd_core::Core::check`] (the tables' invariants, and every
/// disk operation in flight on a `busy` lease) each time it lets go of the lock
/// (dropped, or given up for a condvar wait) and panics on a broken invariant, which
/// stops the daemon: every test that drives the daemon also checks that no handler, and
/// no write outside the transitions, leaves the core inconsistent. Release builds leave
/// it to `Core::step`, the one place the tables change, which runs the cheap part,
/// [`lockd_core::Core::check_cheap`] (one pass over the resources, no allocation: never
/// two holders of an exclusive lease, among others), after every step while the table
/// is small and after every k-th once it is large ([`lockd_core::CHEAP_CHECK_RESOURCES`]).
#[derive(Debug)]
pub struct CoreLock(Mutex<DaemonCore>);

impl CoreLock {
    /// An empty core; `kill_grace_s` is the configuration's `kill_grace_seconds`.
    pub fn new(kill_grace_s: u64) -> CoreLock {
        #[allow(unused_mut)]
        let mut core = DaemonCore::new(kill_grace_s);
        #[cfg(feature = "planted-bugs")]
        if crate::planted::active(crate::planted::Bug::PreemptFloorFourIoTimeouts) {
            core.bug = Some(lockd_core::CorePlantedBug::PreemptFloorFourIoTimeouts);
        }
        CoreLock(Mutex::new(core))
    }
}

impl Default for CoreLock {
    fn default() -> CoreLock {
        CoreLock::new(u64::from(lockd_config::DEFAULT_KILL_GRACE_S))
    }
}

/// The core, locked (see [`CoreLock`]). It reads as the tables (`Deref`, no
/// `DerefMut`): [`CoreGuard::step`] runs an input through the core, and
/// [`CoreGuard::answer`] / [`CoreGuard::change`] step the shell's own inputs.
pub struct CoreGuard<'a>(Option<MutexGuard<'a, DaemonCore>>);

impl Lock for CoreLock {
    type Guard<'a> = CoreGuard<'a>;
    fn lock_or_stop(&self) -> CoreGuard<'_> {
        CoreGuard(Some(self.0.lock_or_stop()))
    }
}

impl CoreGuard<'_> {
    fn check(core: &DaemonCore) {
        if std::thread::panicking() {
            return;
        }
        if !cfg!(debug_assertions) {
            // Release builds: `Core::step`, the one place the core changes, runs the
            // cheap check itself; a second pass over the resources at each unlock of a
            // release build would only double its cost.
            return;
        }
        if let Err(broken) = core.check() {
            panic!("the client/resource tables broke an invariant: {broken}");
        }
    }

    fn core(&mut self) -> &mut DaemonCore {
        match &mut self.0 {
            Some(g) => g,
            None => unreachable!("a CoreGuard is emptied only as it is consumed"),
        }
    }

    /// [`lockd_core::Core::space_monitor`]: the host monitor of the daemon's lockspace
    /// `space_id`, which the core keeps.
    pub fn space_monitor(&self, space_id: u32) -> Option<&lease_core::monitor::HostMonitor> {
        match &self.0 {
            Some(g) => g.space_monitor(space_id),
            None => unreachable!("a CoreGuard is emptied only as it is consumed"),
        }
    }

    /// [`lockd_core::Core::space_fence`]: the fencing state of lockspace `space_id`.
    pub fn space_fence(&self, space_id: u32) -> Option<&lockd_core::fencing::FenceSt> {
        match &self.0 {
            Some(g) => g.space_fence(space_id),
            None => unreachable!("a CoreGuard is emptied only as it is consumed"),
        }
    }

    /// [`lockd_core::Core::space_st`]: the status of the daemon's lockspace `space_id`
    /// (`crate::space::Space::space_id`), which the core keeps.
    pub fn space_st(&self, space_id: u32) -> Option<&lockd_core::space_state::SpaceSt> {
        match &self.0 {
            Some(g) => g.space_st(space_id),
            None => unreachable!("a CoreGuard is emptied only as it is consumed"),
        }
    }

    /// [`lockd_core::Core::status_summary`].
    pub fn status_summary(&self) -> lockd_core::StatusSummary {
        match &self.0 {
            Some(g) => g.status_summary(),
            None => unreachable!("a CoreGuard is emptied only as it is consumed"),
        }
    }

    /// The pid watch connection `ci` watches ([`lockd_core::Watches::pid_of`]).
    pub fn watched_pid(&self, ci: u32) -> Option<i32> {
        match &self.0 {
            Some(g) => g.watches.pid_of(ci),
            None => unreachable!("a CoreGuard is emptied only as it is consumed"),
        }
    }

    /// [`lockd_core::Core::space_st_mut`]; tests only (`crate::space::Space::st_mut`).
    #[cfg(test)]
    pub fn space_st_mut(&mut self, space_id: u32) -> Option<&mut lockd_core::space_state::SpaceSt> {
        self.core().space_st_mut(space_id)
    }

    /// [`lockd_core::Core::step`] at lease time `now_s`: the effects, in order, for the
    /// caller to carry out after letting go of the lock.
    pub fn step(
        &mut self,
        now_s: u64,
        input: lockd_core::Input<UnixStream, Held>,
    ) -> Vec<lockd_core::Effect<Held>> {
        self.core().step(now_s, input)
    }

    /// Steps one of the shell's own inputs that has a value (`Input::StartCommand`, …)
    /// at the clock's time, read under the lock: its answer.
    pub fn answer(&mut self, input: lockd_core::Input<UnixStream, Held>) -> lockd_core::Answer {
        lockd_core::Answer::of(self.step(crate::clock::now_s(), input))
    }

    /// Steps one of the shell's own inputs that has no value (`Input::NoteCommand`,
    /// `Input::SetRestrict`) at the clock's time, read under the lock.
    pub fn change(&mut self, input: lockd_core::Input<UnixStream, Held>) {
        let fx = self.step(crate::clock::now_s(), input);
        assert!(
            fx.is_empty(),
            "a change of the shell's gave effects: {fx:?}"
        );
    }
}

impl Deref for CoreGuard<'_> {
    type Target = LeaseTables;
    fn deref(&self) -> &LeaseTables {
        match &self.0 {
            Some(g) => &g.tables,
            None => unreachable!("a CoreGuard is emptied only as it is consumed"),
        }
    }
}

impl Drop for CoreGuard<'_> {
    fn drop(&mut self) {
        if let Some(g) = &self.0 {
            CoreGuard::check(g);
        }
    }
}

impl<'a> WaitGuard<'a, DaemonCore> for CoreGuard<'a> {
    fn into_mutex_guard(mut self) -> MutexGuard<'a, DaemonCore> {
        let g = self
            .0
            .take()
            .unwrap_or_else(|| unreachable!("a CoreGuard is emptied only as it is consumed"));
        CoreGuard::check(&g);
        g
    }
    fn from_mutex_guard(g: MutexGuard<'a, DaemonCore>) -> Self {
        CoreGuard(Some(g))
    }
}

/// Test hooks only (`LOCKD_DEBUG_PANIC_IN_JOB=break-tables`, this module's tests): the
/// tables changed outside any step, as a buggy transition would, then let go of through
/// guard `g`, whose check (debug builds) must catch a broken invariant.
pub(crate) fn change_outside_step(g: CoreGuard<'_>, change: impl FnOnce(&mut LeaseTables)) {
    let mut core = g.into_mutex_guard();
    change(&mut core.tables);
    drop(CoreGuard::from_mutex_guard(core));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// In debug builds (tests), letting go of the tables with a broken invariant panics.
    #[test]
    #[should_panic(expected = "broke an invariant")]
    fn the_guard_checks_the_tables_as_it_lets_go() {
        let tables = CoreLock::default();
        let name = disk_format::Name::new("r").expect("name");
        change_outside_step(crate::sync::lock(&tables), |t| {
            let ci = t.clients.add(-1, 10, 1000, None).expect("a slot");
            t.clients
                .slots
                .get_mut(&ci)
                .expect("slot")
                .tokens
                .push(lockd_core::ClientToken {
                    token_id: 1,
                    ls: name,
                    name,
                    disks: Vec::new(),
                    shared: false,
                    persistent: false,
                    lver: 1,
                    acquired: 0,
                });
        });
    }

    /// A consistent table passes the check, also across a condvar wait.
    #[test]
    fn a_consistent_table_passes_the_guard() {
        let tables = CoreLock::default();
        let cond = std::sync::Condvar::new();
        let mut g = crate::sync::lock(&tables);
        let connected = lockd_core::Input::Connected {
            fd: -1,
            pid: 10,
            uid: 1000,
            stream: None,
            replacing_own: false,
        };
        assert!(matches!(
            g.step(0, connected).as_slice(),
            [lockd_core::Effect::Accepted { .. }]
        ));
        let (g, _) = crate::sync::wait_timeout(&cond, g, std::time::Duration::from_millis(1));
        assert_eq!(g.clients.slots.len(), 1);
    }
    /// The core answers with its own errno table (it does not link libc): the values
    /// must be the ones the daemon's other replies use.
    #[test]
    fn core_errno_values_are_libc_s() {
        use lockd_core::errno;
        for (core, libc) in [
            (errno::EPERM, libc::EPERM),
            (errno::ENOENT, libc::ENOENT),
            (errno::ESRCH, libc::ESRCH),
            (errno::EIO, libc::EIO),
            (errno::EAGAIN, libc::EAGAIN),
            (errno::EBUSY, libc::EBUSY),
            (errno::EEXIST, libc::EEXIST),
            (errno::EMFILE, libc::EMFILE),
            (errno::EALREADY, libc::EALREADY),
            (errno::EUCLEAN, libc::EUCLEAN),
            (errno::ENOSPC, libc::ENOSPC),
            (errno::EINPROGRESS, libc::EINPROGRESS),
            (errno::ECANCELED, libc::ECANCELED),
            (lockd_core::kill::SIGKILL, libc::SIGKILL),
            (lockd_core::kill::SIGTERM, libc::SIGTERM),
        ] {
            assert_eq!(core, libc);
        }
    }
}
