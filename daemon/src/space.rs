//! One lockspace as this daemon holds it ([`Space`]): its identity, its I/O resources,
//! and the read-only views the commands and
//! metrics need (status records, GET_HOSTS). Its status ([`SpaceSt`]), host monitor and
//! fencing state are the core's
//! (`lockd_core::Core::space_st`, under the `core` lock), read and changed here through
//! [`Space::st`], a short hold of that lock; it is changed only by `Core::step`, from the
//! inputs the lockspace's thread and the commands give (`crate::lockspace`).
//!
//! Nothing here does I/O or takes the daemon's shared state but the core: joining,
//! renewing and removing a lockspace are `crate::lockspace`'s; the daemon lists its
//! lockspaces in `crate::state::Daemon::spaces`. Lock order inside a space: the core
//! (for the status and the monitor) is never held with another lock here; `event_fds`
//! is a leaf.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Condvar, Mutex, OnceLock};

use client_lib::proto::*;
use client_lib::wire::{self, State};
use disk_format::{Geometry, Name};
use lease_core::delta::{LockspaceParams, RenewInput};
use lease_core::monitor::{HostMonitor, HostState};
use lockd_diskio::BlockingDisk;

use crate::sync::lock;

pub use crate::space_state::{Phase, RenewalRec, SpaceSt};

/// A joined lockspace's disk, parameters and our generation in it: set once when the
/// join succeeds and read with no lock after (the lease I/O of every acquire needs them).
pub struct JoinedDisk {
    pub disk: BlockingDisk,
    pub params: LockspaceParams,
    /// Our host generation, from the join (the status's `host_generation`, which does
    /// not change after it).
    pub generation: u64,
}

/// One lockspace.
pub struct Space {
    pub space_id: u32,
    pub name: Name,
    pub host_id: u64,
    pub path: String,
    pub offset: u64,
    pub io_timeout: u32,
    /// The core, which keeps this lockspace's status under `space_id`.
    pub core: Arc<crate::tables::CoreLock>,
    /// Notified after a change of the status that a waiter may want (the add's result,
    /// removal, gone); waited on with the `core` lock.
    pub cond: Condvar,
    pub stop: Arc<AtomicBool>,
    /// Shared confirmation reads of known-hosts ballots (`crate::confirm`).
    pub confirm: crate::confirm::ConfirmReads,
    /// The lockspace disk and parameters, set once when the join succeeded and never
    /// changed after (lease I/O in this lockspace needs both).
    pub joined: OnceLock<JoinedDisk>,
    /// Connections registered with REG_EVENT (at most MAX_EVENT_FDS).
    pub event_fds: Mutex<Vec<std::os::unix::net::UnixStream>>,
    /// A rindex operation runs in this lockspace (sanlock allows one at a time).
    pub rindex_busy: AtomicBool,
    /// An examine thread runs for this lockspace (at most one at a time).
    pub examine_running: AtomicBool,
    /// Another examine was asked for while one ran: the running thread goes again.
    pub examine_pending: AtomicBool,
    /// The lockspace's storage is a network filesystem (read at the join).
    pub on_network_fs: AtomicBool,
    /// When the lease was found lost, its holders had files open on a network filesystem
    /// (`crate::netfs`).
    pub holders_on_network_fs: AtomicBool,
    /// When (daemon clock, ms) an asynchronous REM_LOCKSPACE was accepted; 0 for none.
    /// The lockspace stays listed "in progress" until `ASYNC_REMOVAL_SHOWN_MS` after it
    /// (`crate::lockspace`).
    pub async_rem_at_ms: std::sync::atomic::AtomicU64,
    /// Storage fencing (SCSI-3 PR), set at the join when the configuration names this
    /// lockspace (`crate::fence`).
    pub fence: OnceLock<Arc<crate::fence::SpaceFence>>,
    /// Duration of each successful renewal (metrics).
    pub renewal_hist: crate::metrics::Histogram,
    /// Failed renewal attempts (metrics).
    pub renewal_failures: std::sync::atomic::AtomicU64,
    /// Bytes of the lockspace area read by successful renewals (metrics).
    pub renewal_read_bytes: std::sync::atomic::AtomicU64,
    /// The client that added it (None: the daemon itself or a test): its disk is opened
    /// with that client's rights (`crate::access`).
    pub added_by: Option<crate::access::Caller>,
    /// The uid that added it (0 when `added_by` is None): who may remove it and change
    /// its settings under `client_privileges = "uid"`.
    pub added_by_uid: u32,
}

/// Why a lockspace command was refused. What sanlock's clients get is [`SpaceError::code`],
/// the one place these reasons meet errno values (the dispatcher logs the reason and sends
/// the code).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SpaceError {
    /// A missing, malformed or contradictory argument (-EINVAL).
    #[error("invalid argument: {0}")]
    Invalid(&'static str),
    /// No lockspace of that name (and disk, for INQ/REM) here (-ENOENT).
    #[error("no such lockspace")]
    NotFound,
    /// A lease command's lockspace is not joined here: absent, failed, being added or
    /// removed (-ENOSPC, as sanlock).
    #[error("the lockspace is not joined")]
    NotJoined,
    /// The lockspace is being added or removed (-EINPROGRESS).
    #[error("the lockspace is being added or removed")]
    InProgress,
    /// Refused for now; the same request may succeed later (-EAGAIN).
    #[error("try again: {0}")]
    Again(&'static str),
    /// The same lockspace is joined already (-EEXIST).
    #[error("the lockspace is joined already")]
    Exists,
    /// In use, or in a state that refuses the request (-EBUSY).
    #[error("busy: {0}")]
    Busy(&'static str),
    /// A resource of the daemon ran out: a thread, a file descriptor (-ENOMEM).
    #[error("out of resources: {0}")]
    NoResources(&'static str),
    /// All [`MAX_EVENT_FDS`] event registrations of the lockspace are in use (-ENOCSI, as
    /// sanlock).
    #[error("too many event registrations")]
    TooManyEventFds,
    /// The join or a disk operation ended with this code: a negative errno of the I/O, or
    /// one of sanlock's codes from lease-core (e.g. SANLK_HOSTID_BUSY).
    #[error("failed with code {0}")]
    Failed(i32),
}

/// Why joining a lockspace failed (ADD_LOCKSPACE's work, on the lockspace's thread,
/// `crate::lockspace`). [`JoinError::code`] is sanlock's number for it, which reaches the
/// ADD waiter through the lockspace's state (`add_result`) as [`SpaceError::Failed`].
#[derive(Debug, thiserror::Error)]
pub enum JoinError {
    /// The lease expiry (8·io_timeout) would always be within wdmd's test interval for
    /// the watchdog fire timeout, and wdmd would let the watchdog reset a healthy host
    /// (-EINVAL, before anything is opened or written).
    #[error(
        "io_timeout {io_timeout_s} s is too short for watchdog_fire_timeout {fire_timeout_s} s \
         (wdmd's test interval {test_interval_s} s)"
    )]
    IoTimeoutTooShort {
        io_timeout_s: u32,
        fire_timeout_s: u32,
        test_interval_s: u32,
    },
    /// The watchdog multiplexer cannot be used or armed (its sanlock code).
    #[error("watchdog: {0}")]
    Watchdog(#[from] crate::watchdog::WatchdogError),
    /// The lockspace's disk cannot be opened with the rights of the client that added it
    /// (-ENODEV whatever the reason, as sanlock answers: a missing path and one the client
    /// may not open look the same).
    #[error("cannot open the lockspace disk: {0}")]
    Open(#[from] lockd_diskio::DirectIoError),
    /// Reading the lockspace or acquiring our delta lease failed (lease-core's code).
    #[error("delta lease: {0}")]
    Lease(#[from] lease_core::LeaseError),
    /// A removal or forced shutdown stopped the join; its I/O was cut short (SANLK_ERROR,
    /// as sanlock's delta_lease_acquire answers, not the code of the I/O cut short).
    #[error("stopped by a removal or shutdown")]
    Aborted,
    /// The lockspace record's sector size is below the device's logical sector size: it
    /// cannot be read or written with O_DIRECT at its own spacing
    /// (SANLK_LEADER_SECTORSIZE).
    #[error("the record's sector size ({record_bytes} bytes) is below the device's ({device_bytes} bytes)")]
    SectorSize {
        record_bytes: u32,
        device_bytes: u32,
    },
    /// Our host_id is above the lockspace's number of hosts (SANLK_ADDLS_INVALID_HOSTID).
    #[error("host_id {host_id} is above the lockspace's {max_hosts} hosts")]
    HostIdTooLarge { host_id: u64, max_hosts: u64 },
    /// Storage fencing is configured for the lockspace but could not be set up
    /// (`crate::fence::FENCE_JOIN_RV`; SANLK_ERROR when the join was stopped meanwhile).
    #[error("storage fencing is configured for this lockspace but cannot be used: {0}")]
    Fence(#[source] crate::fence::FenceError),
    /// Our key could not be registered for the generation the join wrote; the delta lease
    /// was released again (`crate::fence::FENCE_JOIN_RV`).
    #[error("storage fencing cannot register our key for the joined generation: {0}")]
    FenceGeneration(#[source] crate::fence::FenceError),
}

impl JoinError {
    /// The result code sanlock's clients get for this failure.
    pub fn code(&self) -> i32 {
        use crate::fence::{FenceError, FENCE_JOIN_RV};
        match self {
            JoinError::IoTimeoutTooShort { .. } => -libc::EINVAL,
            JoinError::Watchdog(e) => e.sanlk_code(),
            JoinError::Open(_) => -libc::ENODEV,
            JoinError::Lease(e) => e.sanlk_code(),
            JoinError::Aborted => disk_format::rv::SANLK_ERROR,
            JoinError::SectorSize { .. } => disk_format::rv::SANLK_LEADER_SECTORSIZE,
            JoinError::HostIdTooLarge { .. } => disk_format::rv::SANLK_ADDLS_INVALID_HOSTID,
            JoinError::Fence(FenceError::Stopped) => disk_format::rv::SANLK_ERROR,
            JoinError::Fence(_) | JoinError::FenceGeneration(_) => FENCE_JOIN_RV,
        }
    }
}

impl SpaceError {
    /// The result code sanlock's clients get.
    pub fn code(self) -> i32 {
        match self {
            SpaceError::Invalid(_) => -libc::EINVAL,
            SpaceError::NotFound => -libc::ENOENT,
            SpaceError::NotJoined => -libc::ENOSPC,
            SpaceError::InProgress => -libc::EINPROGRESS,
            SpaceError::Again(_) => -libc::EAGAIN,
            SpaceError::Exists => -libc::EEXIST,
            SpaceError::Busy(_) => -libc::EBUSY,
            SpaceError::NoResources(_) => -libc::ENOMEM,
            SpaceError::TooManyEventFds => -libc::ENOCSI,
            SpaceError::Failed(code) => code,
        }
    }

    /// A result code as a result: 0 is success, anything else [`SpaceError::Failed`].
    pub fn from_code(code: i32) -> Result<(), SpaceError> {
        match code {
            0 => Ok(()),
            code => Err(SpaceError::Failed(code)),
        }
    }
}

/// Event listeners per lockspace (sanlock's MAX_EVENT_FDS).
pub const MAX_EVENT_FDS: usize = 32;

impl Space {
    /// Reads this lockspace's status in the core. A status the core no longer keeps
    /// (pruned long after the lockspace went) reads as [`SpaceSt::gone_for_good`].
    pub fn st<T>(&self, read: impl FnOnce(&SpaceSt) -> T) -> T {
        let core = lock(&self.core);
        match core.space_st(self.space_id) {
            Some(st) => read(st),
            None => read(&SpaceSt::gone_for_good()),
        }
    }

    /// Changes this lockspace's status in the core; `None` (nothing changed) once the
    /// core no longer keeps it. Tests only: the daemon changes a lockspace's status
    /// only through `Core::step` (`daemon/tests/module_graph.rs` checks it).
    #[cfg(test)]
    pub fn st_mut<T>(&self, change: impl FnOnce(&mut SpaceSt) -> T) -> Option<T> {
        let mut core = lock(&self.core);
        core.space_st_mut(self.space_id).map(change)
    }

    /// Reads this lockspace's host monitor, which the core keeps (what our renewals
    /// observed of the other hosts; changed only by `Core::step`), under a short hold of
    /// the core's lock. One the core no longer keeps reads as a monitor that has read
    /// nothing. That is the safe side: a ballot with no observation of an owner waits
    /// host_dead counted from now (lease-core's `wait_for_owner`), and nothing is seen
    /// fenced, so an empty monitor can only delay a takeover, never allow an early one.
    /// The caller must not hold the core's lock (it is not reentrant); the ballots run
    /// with no lock held.
    pub fn monitor<T>(&self, read: impl FnOnce(&HostMonitor) -> T) -> T {
        let core = lock(&self.core);
        match core.space_monitor(self.space_id) {
            Some(m) => read(m),
            None => read(&HostMonitor::new(self.host_id, 0)),
        }
    }

    /// What the next renewal needs to know from the core for its read (lease-core
    /// `reads`): the highest host_id our reads ever showed used, and whether fencing
    /// wants the whole area read (`FenceSt::wants_whole_reads`). A lockspace the core no
    /// longer keeps reads everything.
    pub fn renewal_read_view(&self) -> (u64, bool) {
        let core = lock(&self.core);
        match core.space_monitor(self.space_id) {
            Some(m) => (
                m.highest_ever_used(),
                core.space_fence(self.space_id)
                    .is_some_and(lockd_core::fencing::FenceSt::wants_whole_reads),
            ),
            None => (self.host_id, true),
        }
    }

    /// Our storage key in this lockspace (the core's `FenceSt::key`; 0: none registered,
    /// or not fenced).
    pub fn fence_key(&self) -> u64 {
        lock(&self.core)
            .space_fence(self.space_id)
            .map_or(0, |f| f.key)
    }

    /// What storage fencing's passes saw and did; `None` for a lockspace not fenced.
    pub fn fence_observed(&self) -> Option<lockd_core::fencing::FenceObserved> {
        lock(&self.core)
            .space_fence(self.space_id)
            .map(|f| f.seen_now)
    }

    /// Whether this host fenced a peer while joined (the core's `FenceSt::fenced_a_peer`).
    pub fn fenced_a_peer(&self) -> bool {
        lock(&self.core)
            .space_fence(self.space_id)
            .is_some_and(|f| f.fenced_a_peer)
    }

    pub fn snapshot_phase(&self) -> Phase {
        self.st(|st| st.phase)
    }

    pub fn wire_lockspace(&self, flags: u32) -> wire::Lockspace {
        let mut ls = wire::Lockspace {
            name: self.name,
            host_id: self.host_id,
            flags,
            pad: 0,
            host_id_disk: wire::DiskLocation::default(),
        };
        if let Ok(disk) = wire::DiskLocation::new(&self.path, self.offset) {
            ls.host_id_disk = disk;
        }
        ls
    }

    /// The lockspace's geometry, once joined.
    pub fn geometry(&self) -> Option<Geometry> {
        self.st(|st| st.geometry)
    }

    pub fn generation(&self) -> u64 {
        self.st(|st| st.host_generation)
    }

    pub fn is_dead(&self) -> bool {
        self.st(|st| st.space_dead)
    }

    /// sanlock's lockspace state text.
    pub fn status_text(&self, list: &str) -> String {
        self.st(|st| self.status_text_of(st, list))
    }

    fn status_text_of(&self, st: &SpaceSt, list: &str) -> String {
        format!(
            "list={} space_id={} io_timeout={} sector_size={} align_size={} host_generation={} \
             renew_fail={} space_dead={} killing_pids={} used_retries=0 external_used={} \
             used_by_orphans={} renewal_read_extend_sec={} set_max_sectors_kb=0 corrupt_result={} \
             acquire_last_result={} renewal_last_result={} acquire_last_attempt={} \
             acquire_last_success={} renewal_last_attempt={} renewal_last_success={}",
            list,
            self.space_id,
            self.io_timeout,
            st.geometry.map_or(0, |g| g.sector_bytes()),
            st.geometry.map_or(0, |g| g.align_bytes()),
            st.host_generation,
            u8::from(st.renew_fail),
            u8::from(st.space_dead),
            u8::from(st.space_dead),
            u8::from(st.external_used),
            u8::from(st.used_by_orphans),
            self.io_timeout,
            st.corrupt_result,
            st.acquire_last_result,
            st.renewal_last_result,
            st.acquire_last_attempt,
            st.acquire_last_success,
            st.renewal_last_attempt,
            st.renewal_last_success,
        )
    }

    /// HOST_STATUS records: every host we have observed, plus ourselves.
    pub fn host_state_records(&self, out: &mut Vec<u8>) {
        let now = crate::clock::now_s();
        let (gen, last) = self.st(|st| (st.host_generation, st.last_success_s));
        let observed = self.monitor(|m| m.hosts(now));
        let mut rows: Vec<(u64, String, u64)> = Vec::new();
        for (id, obs, _state) in observed {
            if obs.last_live_s == 0 && obs.owner_id == 0 {
                continue;
            }
            rows.push((
                id,
                format!(
                    "last_check={} last_live={} last_req=0 owner_id={} owner_generation={} \
                     timestamp={} io_timeout={} owner_name={}",
                    obs.last_check_s,
                    obs.last_live_s,
                    obs.owner_id,
                    obs.owner_generation,
                    obs.timestamp,
                    obs.io_timeout,
                    obs.host_name.to_text()
                ),
                obs.timestamp,
            ));
        }
        if gen != 0 {
            rows.push((
                self.host_id,
                format!(
                    "last_check={last} last_live={last} last_req=0 owner_id={} owner_generation={gen} \
                     timestamp={last} io_timeout={} owner_name={}",
                    self.host_id,
                    self.io_timeout,
                    self.joined
                        .get()
                        .map(|j| j.params.host_name.to_text())
                        .unwrap_or_default()
                ),
                last,
            ));
        }
        rows.sort_by_key(|r| r.0);
        for (id, text, ts) in rows {
            State::encode_with_text(SANLK_STATE_HOST, id as u32, ts, Name::EMPTY, &text, out);
        }
    }

    /// RENEWAL records, oldest first.
    pub fn renewal_records(&self, out: &mut Vec<u8>) {
        let renewals: Vec<RenewalRec> = self.st(|st| st.renewals.iter().copied().collect());
        for r in &renewals {
            let text = format!(
                "timestamp={} read_ms={} write_ms={} next_timeouts=0 next_errors=0",
                r.timestamp, r.read_ms, r.write_ms
            );
            State::encode_with_text(SANLK_STATE_RENEWAL, 0, r.timestamp, Name::EMPTY, &text, out);
        }
    }
}

/// The ballots' view of the monitor (`crate::confirm::SpaceObserver`): each question
/// reads the core's monitor under a short hold of its lock.
impl crate::confirm::MonitorView for Space {
    fn observation(&self, host_id: u64) -> Option<lease_core::monitor::HostObservation> {
        self.monitor(|m| lease_core::HostObserver::observation(m, host_id))
    }

    fn ballot_hosts_hint(&self) -> Option<u64> {
        self.monitor(lease_core::HostObserver::ballot_hosts_hint)
    }

    fn shared_grant_hold(&self) -> Option<u16> {
        self.monitor(lease_core::HostObserver::shared_grant_hold)
    }
}

impl Space {
    /// What the next renewal writes for the other hosts (the core's
    /// `SpaceSt::outgoing`, decided by SET_EVENT and REQUEST steps).
    pub(crate) fn renew_input(&self) -> RenewInput {
        let now = crate::clock::now_s();
        self.st(|st| st.outgoing.renew_input(now))
    }
}

impl Space {
    /// GET_HOSTS of this lockspace: `host_id` 0 = every host whose record has a timestamp
    /// (and us); -EAGAIN until the monitor has read the lockspace once.
    pub fn hosts(&self, host_id: u64) -> Result<Vec<wire::Host>, SpaceError> {
        let space = self;
        let now = crate::clock::now_s();
        let (gen, last) = space.st(|st| (st.host_generation, st.last_success_s));
        let observed = space.monitor(|mon| {
            (mon.checks() != 0).then(|| {
                mon.hosts(now)
                    .into_iter()
                    .map(|(id, obs, state)| (id, obs, state, mon.past_host_dead(&obs, now)))
                    .collect::<Vec<_>>()
            })
        });
        let Some(observed) = observed else {
            return Err(SpaceError::Again("the lockspace has not been read yet"));
        };
        let mut hosts = Vec::new();
        for (id, obs, state, past_host_dead) in observed {
            if host_id != 0 && id != host_id {
                continue;
            }
            if host_id == 0 && obs.timestamp == 0 {
                continue;
            }
            hosts.push(wire::Host {
                host_id: id,
                generation: obs.owner_generation,
                timestamp: obs.timestamp,
                io_timeout: u32::from(obs.io_timeout),
                // sanlock 5.x sets SANLK_HOST_DEAD_EXT beside the state of a marked host, and
                // SANLK_HOST_DEAD_SEC too once host_dead_seconds have passed (only then).
                flags: state as u32
                    | match (obs.dead_ext, past_host_dead) {
                        (false, _) => 0,
                        (true, false) => SANLK_HOST_DEAD_EXT,
                        (true, true) => SANLK_HOST_DEAD_EXT | SANLK_HOST_DEAD_SEC,
                    },
            });
        }
        if host_id == 0 || host_id == space.host_id {
            hosts.push(wire::Host {
                host_id: space.host_id,
                generation: gen,
                timestamp: last,
                io_timeout: space.io_timeout,
                flags: HostState::Live as u32,
            });
        }
        hosts.sort_by_key(|h| h.host_id);
        Ok(hosts)
    }
}

/// Last successful renewal (monotime s) of a lockspace.
pub fn last_success(space: &Space) -> u64 {
    space.st(|st| st.last_success_s)
}

#[cfg(test)]
mod tests {
    use super::{JoinError, SpaceError};

    #[test]
    fn each_refusal_has_the_code_sanlock_clients_get() {
        for (e, code) in [
            (SpaceError::Invalid("x"), -libc::EINVAL),
            (SpaceError::NotFound, -libc::ENOENT),
            (SpaceError::NotJoined, -libc::ENOSPC),
            (SpaceError::InProgress, -libc::EINPROGRESS),
            (SpaceError::Again("x"), -libc::EAGAIN),
            (SpaceError::Exists, -libc::EEXIST),
            (SpaceError::Busy("x"), -libc::EBUSY),
            (SpaceError::NoResources("x"), -libc::ENOMEM),
            (SpaceError::TooManyEventFds, -libc::ENOCSI),
            (SpaceError::Failed(-243), -243),
        ] {
            assert_eq!(e.code(), code, "{e}");
        }
        assert_eq!(SpaceError::from_code(0), Ok(()));
        assert_eq!(SpaceError::from_code(-5), Err(SpaceError::Failed(-5)));
    }

    #[test]
    fn each_join_failure_has_the_code_sanlock_clients_get() {
        use crate::fence::{FenceError, FENCE_JOIN_RV};
        use disk_format::rv;
        let open = lockd_diskio::DirectIoError::Open {
            path: "/dev/x".into(),
            source: std::io::Error::from_raw_os_error(libc::EACCES),
        };
        let cases: Vec<(JoinError, i32)> = vec![
            (
                JoinError::IoTimeoutTooShort {
                    io_timeout_s: 1,
                    fire_timeout_s: 60,
                    test_interval_s: 10,
                },
                -libc::EINVAL,
            ),
            // Whatever the open's own errno, as sanlock answers.
            (JoinError::Open(open), -libc::ENODEV),
            (
                JoinError::Lease(lease_core::LeaseError::HostIdBusy),
                lease_core::LeaseError::HostIdBusy.sanlk_code(),
            ),
            (JoinError::Aborted, rv::SANLK_ERROR),
            (
                JoinError::SectorSize {
                    record_bytes: 512,
                    device_bytes: 4096,
                },
                rv::SANLK_LEADER_SECTORSIZE,
            ),
            (
                JoinError::HostIdTooLarge {
                    host_id: 2001,
                    max_hosts: 2000,
                },
                rv::SANLK_ADDLS_INVALID_HOSTID,
            ),
            (JoinError::Fence(FenceError::Stopped), rv::SANLK_ERROR),
            (
                JoinError::Fence(FenceError::Key(lockd_scsi_pr::KeyError::HostId(0))),
                FENCE_JOIN_RV,
            ),
            (
                JoinError::FenceGeneration(FenceError::Stopped),
                FENCE_JOIN_RV,
            ),
        ];
        for (e, code) in cases {
            assert_eq!(e.code(), code, "{e}");
        }
        // The log line the operations guide tells operators to look for.
        assert!(JoinError::Fence(FenceError::Stopped)
            .to_string()
            .contains("storage fencing is configured for this lockspace but cannot be used"));
    }
}
