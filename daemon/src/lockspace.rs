//! Lockspaces: join (delta acquire), renewal on a dedicated thread, host monitoring,
//! failure detection and removal.
//!
//! Each lockspace has its own thread that does nothing but delta-lease I/O, so client
//! traffic never delays a renewal. The daemon's monitor thread (every second, independent
//! of the renewal thread, so a renewal stuck in I/O is still noticed) checks our lease
//! against id_renewal_fail and drives kill escalation for failed or removed lockspaces.
//! The delta lease is released on disk only after a successful last renewal.
//! Removal has two steps, as sanlock's: first the holders are stopped while the lease is
//! still held and renewed (INQ_LOCKSPACE: joined; at least [`REMOVAL_CHECK_MS`]), then
//! the renewal thread stops and releases the lease (INQ_LOCKSPACE: in progress, WAIT
//! waits until it is gone; after an asynchronous REM at least until
//! [`ASYNC_REMOVAL_SHOWN_MS`] after it, as long as sanlock's shows it). The core decides the removal (REM_LOCKSPACE's refusals, the
//! orphans' release, the holders' notice before any kill, `kill_now`; a forced shutdown
//! likewise) and answers REM_LOCKSPACE when the thread reports its end
//! (`Input::LockspaceEnded`, [`mark_gone`]); this module matches the lockspace by its
//! disk and runs the thread.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use client_lib::proto::*;
use client_lib::wire;
use disk_format::Name;
use lease_core::delta::{self, DeltaState, LockspaceParams};
use lease_core::monitor::HostState;
use lease_core::reads::{ReadMode, RenewalReads};
use lease_core::timeouts;
use tracing::{error, info, info_span, warn};

use crate::state::Daemon;
use crate::sync::lock;
use crate::watchdog::LockspaceWatchdog;
use lease_core::exec::block_on;
use lockd_core::{CoreRequest, Effect, Input, JoinedLease, ListRefused};
use lockd_diskio::{BlockingDisk, EngineKind, SystemClock};

use crate::space::{
    JoinError, JoinedDisk, Phase, RenewalRec, Space, SpaceError, SpaceSt, MAX_EVENT_FDS,
};

/// ADD_LOCKSPACE.
pub fn add(
    d: &Arc<Daemon>,
    caller: &crate::access::Caller,
    ls: &wire::Lockspace,
    io_timeout: u32,
    flags: u32,
) -> Result<(), SpaceError> {
    if ls.name.is_empty() || ls.host_id == 0 || ls.host_id_disk.path.as_bytes().is_empty() {
        return Err(SpaceError::Invalid(
            "a name, a host_id and a path are needed",
        ));
    }
    if d.is_shutting_down() {
        return Err(SpaceError::Again("the daemon is shutting down"));
    }
    let io_timeout = if io_timeout == 0 {
        d.cfg.io_timeout_s
    } else {
        io_timeout.min(255)
    };
    let space = Arc::new(d.new_space(ls, io_timeout, Some(caller.clone())));
    d.list_space(&space).map_err(|refused| match refused {
        ListRefused::BeingRemoved => SpaceError::Again("a lockspace of that name is being removed"),
        ListRefused::BeingAdded => SpaceError::InProgress,
        ListRefused::Joined => SpaceError::Exists,
        ListRefused::OtherPlace => {
            SpaceError::Invalid("a lockspace of that name has another host_id or disk")
        }
        ListRefused::DiskAreaTaken => SpaceError::Invalid("another lockspace is on that disk area"),
    })?;
    let d2 = d.clone();
    let s2 = space.clone();
    let spawned = crate::threads::spawn(format!("lockd-ls{}", space.space_id), move || {
        space_thread(&d2, &s2)
    });
    if let Err(e) = spawned {
        error!(error = %e, "cannot start lockspace thread");
        finish_add(d, &space, Err(-libc::ENOMEM));
        mark_gone(d, &space);
        return Err(SpaceError::NoResources(
            "cannot start the lockspace's thread",
        ));
    }
    if flags & SANLK_ADD_ASYNC != 0 {
        return Ok(());
    }
    SpaceError::from_code(wait_add_result(&space))
}

fn wait_add_result(space: &Space) -> i32 {
    let mut core = lock(&space.core);
    loop {
        let st = core.space_st(space.space_id);
        if let Some(rv) = st.map_or(Some(-libc::ENOENT), |st| st.add_result) {
            return rv;
        }
        core = crate::sync::wait(&space.cond, core);
    }
}

/// The lockspace INQ/REM_LOCKSPACE name, as sanlock's `_search_space`: same name, same
/// path, same offset, and same host_id unless the request's host_id is 0.
fn find_matching(d: &Daemon, ls: &wire::Lockspace) -> Option<Arc<Space>> {
    let space = d.find_space(&ls.name)?;
    let same = space.path == ls.host_id_disk.path.to_text()
        && space.offset == ls.host_id_disk.offset
        && (ls.host_id == 0 || ls.host_id == space.host_id);
    same.then_some(space)
}

/// INQ_LOCKSPACE.
pub fn inq(d: &Arc<Daemon>, ls: &wire::Lockspace, flags: u32) -> Result<(), SpaceError> {
    let Some(space) = find_matching(d, ls) else {
        return Err(SpaceError::NotFound);
    };
    let (phase, releasing) = space.st(|st| (st.phase, st.releasing));
    match phase {
        Phase::Joined => Ok(()),
        // Removal requested, holders still being stopped: the delta lease is still held
        // and renewed, so the lockspace is still there (with or without WAIT), as on
        // sanlock, whose lockspace stays on its joined list until its pids are dead.
        Phase::Removing if !releasing => Ok(()),
        Phase::Adding if flags & SANLK_INQ_WAIT != 0 => {
            if wait_add_result(&space) == 0 {
                Ok(())
            } else {
                Err(SpaceError::NotFound)
            }
        }
        Phase::Removing if flags & SANLK_INQ_WAIT != 0 => {
            wait_gone(&space);
            Err(SpaceError::NotFound)
        }
        Phase::Adding | Phase::Removing => Err(SpaceError::InProgress),
    }
}

fn wait_gone(space: &Space) {
    let mut core = lock(&space.core);
    while core.space_st(space.space_id).is_some_and(|st| !st.gone) {
        core = crate::sync::wait(&space.cond, core);
    }
}

/// True when some client holds a resource in this lockspace.
pub fn space_in_use(d: &Daemon, name: &Name) -> bool {
    lock(&d.core).space_in_use(name)
}

/// REM_LOCKSPACE from connection `ci`. The shell matches the lockspace by its disk
/// (sanlock's rules, [`find_matching`]); the core decides the rest
/// (`CoreRequest::RemLockspace`): the refusals, the orphans' release, the holders'
/// LockspaceRemoved notice before any kill, and the stop of the lockspace's thread
/// (`Effect::StopLockspace`). Without `SANLK_REM_ASYNC` this worker waits for the
/// answer, which the core gives when the thread has ended (`Input::LockspaceEnded`,
/// [`mark_gone`]).
pub fn rem(d: &Arc<Daemon>, ci: u32, ls: &wire::Lockspace, flags: u32) -> Result<(), SpaceError> {
    let Some(space) = find_matching(d, ls) else {
        return Err(SpaceError::NotFound);
    };
    let req = CoreRequest::RemLockspace {
        ls: ls.name,
        id: Some(space.space_id),
        unused_only: flags & SANLK_REM_UNUSED != 0,
        wait: flags & SANLK_REM_ASYNC == 0,
    };
    let run = crate::paxos::run_request(d, ci, req);
    let mut replies = run.replies.into_iter();
    let (Some((to, reply)), None) = (replies.next(), replies.next()) else {
        panic!("the core gave REM_LOCKSPACE not exactly one answer");
    };
    assert_eq!(
        to, ci,
        "the core answered another connection's REM_LOCKSPACE"
    );
    match -reply.rv {
        0 => {
            if flags & SANLK_REM_ASYNC != 0 {
                let now_ms = crate::clock::now_ms().max(1);
                let _ = space.async_rem_at_ms.compare_exchange(
                    0,
                    now_ms,
                    Ordering::SeqCst,
                    Ordering::SeqCst,
                );
            }
            Ok(())
        }
        libc::ENOENT => Err(SpaceError::NotFound),
        libc::EINPROGRESS => Err(SpaceError::InProgress),
        libc::EBUSY => Err(SpaceError::Busy(reply.why.unwrap_or("in use"))),
        _ => Err(SpaceError::Failed(reply.rv)),
    }
}

/// Stops every lockspace (forced shutdown): the core removes each one not being removed
/// yet (`Input::Shutdown`: the holders' notice, SIGKILL from the next tick on), and its
/// thread stops.
pub fn stop_all(d: &Arc<Daemon>) {
    let run = crate::paxos::step_and_run(d, Input::Shutdown, &[]);
    assert!(run.replies.is_empty(), "a forced shutdown answers nobody");
}

/// A joined, live lockspace for resource operations ([`SpaceError::NotJoined`] otherwise:
/// `-ENOSPC`, as sanlock).
pub fn joined(d: &Daemon, name: &Name) -> Result<Arc<Space>, SpaceError> {
    let space = d.find_space(name).ok_or(SpaceError::NotJoined)?;
    if space.st(|st| st.phase != Phase::Joined || st.space_dead) {
        return Err(SpaceError::NotJoined);
    }
    Ok(space)
}

/// GET_LOCKSPACES.
pub fn get_lockspaces(d: &Daemon) -> Vec<wire::Lockspace> {
    // The statuses are the core's, whose lock comes before `spaces`: read them after
    // letting go of the list.
    let spaces: Vec<Arc<Space>> = lock(&d.spaces).clone();
    spaces
        .iter()
        .map(|s| {
            let flags = match s.snapshot_phase() {
                Phase::Adding => SANLK_LSF_ADD,
                Phase::Removing => SANLK_LSF_REM,
                Phase::Joined => 0,
            };
            s.wire_lockspace(flags)
        })
        .collect()
}

/// Lockspaces with their STATUS list name.
pub fn status_list(d: &Daemon) -> Vec<(Arc<Space>, &'static str)> {
    let spaces: Vec<Arc<Space>> = lock(&d.spaces).clone();
    spaces
        .iter()
        .map(|s| {
            let list = match s.snapshot_phase() {
                Phase::Adding => "add",
                Phase::Removing => "rem",
                Phase::Joined => "spaces",
            };
            (s.clone(), list)
        })
        .collect()
}

/// SET_CONFIG.
pub fn set_config(d: &Daemon, name: &Name, data: u32) -> Result<(), SpaceError> {
    let Some(space) = d.find_space(name) else {
        return Err(SpaceError::NotFound);
    };
    let (field_is_orphans, value) = match data {
        0x1 => (false, true),
        0x2 => (false, false),
        0x4 => (true, true),
        0x8 => (true, false),
        _ => return Err(SpaceError::Invalid("unknown SET_CONFIG value")),
    };
    let input = Input::SetConfig {
        id: space.space_id,
        used_by_orphans: field_is_orphans.then_some(value),
        external_used: (!field_is_orphans).then_some(value),
    };
    let fx = lock(&d.core).step(crate::clock::now_s(), input);
    assert!(fx.is_empty(), "SET_CONFIG gave effects: {fx:?}");
    Ok(())
}

/// GET_HOSTS: `host_id` 0 = every host whose record has a timestamp.
pub fn get_hosts(d: &Daemon, name: &Name, host_id: u64) -> Result<Vec<wire::Host>, SpaceError> {
    d.find_space(name)
        .ok_or(SpaceError::NotFound)?
        .hosts(host_id)
}

/// SET_HOST (5.x `sanlock_set_host`) and `lockd set-host --dead`: mark `host`'s delta
/// lease DEAD_EXT so its leases may be taken at once. Only `SANLK_SET_HOST_DEAD_EXT`
/// (header data) exists. lockd's terms, safer than sanlock 5.1.1's (which marks a host
/// whatever its state): the lockspace must be joined here, the host must not be us, and
/// our monitor must have seen its lease stop being renewed (state FAIL or DEAD), with the
/// record on disk still exactly as last seen; else -EBUSY (still renewing, or not seen
/// yet) or SANLK_HOSTID_BUSY (renewed since). A host in FAIL has stopped renewing but may
/// still run its holders until its watchdog fires (8·D + W after its last renewal): with
/// storage fencing acting here (`fence = "scsi-pr"`), its key is preempted first and the
/// mark written only when every device confirms it gone (else -EBUSY), so the leases the
/// mark frees are ones its holders can no longer write; without fencing the caller's word
/// that the host stopped is all there is (docs/fencing.md). A 3.x-format area gets
/// SANLK_VERSION_INCOMPAT (-204), another generation SANLK_WRONG_GENERATION (-280), as on
/// sanlock 5.1.1. Nothing is written on any refusal.
pub fn set_host(
    d: &Daemon,
    ls: &wire::Lockspace,
    host: &wire::Host,
    op: u32,
) -> Result<(), SpaceError> {
    if op != client_lib::proto::SANLK_SET_HOST_DEAD_EXT {
        return Err(SpaceError::Invalid(
            "SET_HOST knows only SANLK_SET_HOST_DEAD_EXT",
        ));
    }
    let Some(space) = d.find_space(&ls.name) else {
        return Err(SpaceError::NotFound);
    };
    if (ls.host_id != 0 && ls.host_id != space.host_id) || host.host_id == space.host_id {
        return Err(SpaceError::Invalid(
            "another host_id than ours is to be marked",
        ));
    }
    let now = crate::clock::now_s();
    let (state, obs) = space.monitor(|mon| {
        (
            mon.state(host.host_id, now),
            lease_core::HostObserver::observation(mon, host.host_id),
        )
    });
    let Some(obs) = obs else {
        return Err(SpaceError::Busy("the host's delta lease has not been seen"));
    };
    if !matches!(state, Some(HostState::Fail | HostState::Dead)) {
        warn!(
            host_id = host.host_id,
            ?state,
            "set_host DEAD_EXT refused: the host's delta lease is still renewed (or not seen)"
        );
        return Err(SpaceError::Busy("the host's delta lease is still renewed"));
    }
    let Some(joined) = space.joined.get() else {
        return Err(SpaceError::NotJoined);
    };
    // (Another generation asked for: `mark_dead_ext` refuses it below, with no fence.)
    if state == Some(HostState::Fail)
        && (host.generation == 0 || host.generation == obs.owner_generation)
    {
        fence_before_dead_ext(d, &space, host.host_id, obs.owner_generation)?;
    }
    match block_on(delta::mark_dead_ext(
        &joined.disk,
        &joined.params,
        host.host_id,
        host.generation,
        obs.timestamp,
    )) {
        Ok(l) => {
            info!(
                host_id = host.host_id,
                generation = l.owner_generation,
                "host marked DEAD_EXT: its leases may be taken now"
            );
            Ok(())
        }
        Err(e) => {
            warn!(host_id = host.host_id, error = %e, "set_host DEAD_EXT refused");
            Err(SpaceError::Failed(e.sanlk_code()))
        }
    }
}

/// SET_HOST on a host in FAIL, with storage fencing on this lockspace: preempts the
/// host's key at `generation` (and older) and requires the preempt confirmed on every
/// device. Not fenced here (fencing off, or `register-only`): nothing to do, the caller
/// vouches. Fenced ourselves, or no key yet: -EBUSY, as for any preempt we cannot make.
/// Why no stale write lands after the mark: the mark frees the host's leases at once, and
/// it is written only after every device confirmed the generation's key gone, so the
/// target refuses the host's writes (VM scenario `pr-set-host-fail`: 0 writes landed,
/// 31 without this fence).
fn fence_before_dead_ext(
    d: &Daemon,
    space: &Space,
    host_id: u64,
    generation: u64,
) -> Result<(), SpaceError> {
    let Some(fence) = space.fence.get() else {
        return Ok(());
    };
    let our_key = {
        let core = lock(&d.core);
        match core.space_fence(space.space_id) {
            Some(f) if !f.acts => return Ok(()),
            Some(f) if !f.fenced_here && f.our_key() != 0 => f.our_key(),
            _ => {
                warn!(
                    host_id,
                    "set_host DEAD_EXT refused: this host cannot fence now"
                );
                return Err(SpaceError::Busy(
                    "the host is in FAIL and this host cannot fence it now",
                ));
            }
        }
    };
    match fence.preempt_peer(host_id, generation, our_key, &space.stop) {
        lockd_core::fencing::PeerFenceOutcome::Confirmed { .. } => {
            info!(
                host_id,
                generation, "set_host: the host's key is preempted and confirmed gone"
            );
            Ok(())
        }
        outcome => {
            warn!(
                host_id,
                generation,
                ?outcome,
                "set_host DEAD_EXT refused: the host is in FAIL and its fence was not confirmed"
            );
            Err(SpaceError::Busy(
                "the host is in FAIL and its fence was not confirmed",
            ))
        }
    }
}

/// The join's end into the core (`Input::JoinEnded`), which answers the add (0; -1 when
/// a removal came during the join; the join's code) and moves a joined lockspace to
/// `Joined`; wakes the ADD_LOCKSPACE and INQ_LOCKSPACE waiters. Returns the answer.
fn finish_add(d: &Daemon, space: &Space, result: Result<JoinedLease, i32>) -> i32 {
    let rv = {
        let mut core = lock(&d.core);
        let input = Input::JoinEnded {
            id: space.space_id,
            result,
        };
        let fx = core.step(crate::clock::now_s(), input);
        assert!(fx.is_empty(), "a join's end gave effects: {fx:?}");
        core.space_st(space.space_id)
            .and_then(|st| st.add_result)
            .unwrap_or(-libc::ENOENT)
    };
    space.cond.notify_all();
    rv
}

/// The lockspace leaves `spaces` and is marked gone in the core, together (under both
/// locks, in the daemon's order).
fn mark_gone(d: &Daemon, space: &Arc<Space>) {
    let fx = {
        let mut core = lock(&d.core);
        lock(&d.spaces).retain(|s| !Arc::ptr_eq(s, space));
        core.step(
            crate::clock::now_s(),
            Input::LockspaceEnded { id: space.space_id },
        )
    };
    space.cond.notify_all();
    // The REM_LOCKSPACE answered here waits on its worker, through its mailbox.
    let here = crate::paxos::route(d, None, fx);
    assert!(
        here.is_empty(),
        "a lockspace's end gave effects for no command: {here:?}"
    );
}

/// What a successful join hands to the renewal loop.
type JoinResult = (
    BlockingDisk,
    LockspaceParams,
    DeltaState,
    Option<LockspaceWatchdog>,
);

/// Opens the disk and joins (delta acquire). With the watchdog on, the wdmd link is opened
/// before the acquire and armed right after it — before the lockspace is reported joined,
/// so no client can hold a lease in it unprotected.
fn join(d: &Daemon, space: &Space) -> Result<JoinResult, JoinError> {
    if d.cfg.use_watchdog {
        watchdog_fits(space.io_timeout, d.cfg.watchdog_fire_timeout_s)?;
    }
    let mut wd = if d.cfg.use_watchdog {
        Some(LockspaceWatchdog::open(
            &d.cfg.wdmd_run_dir,
            d.cfg.watchdog_fire_timeout_s,
        )?)
    } else {
        None
    };
    // A ring of its own, driven by this thread (diskio `EngineKind::Inline`): client-driven
    // I/O never queues in front of renewals, and a renewal's I/O needs no other thread.
    // With the rights of the client that added it (`crate::access`). A disk that cannot
    // be opened is -ENODEV, whatever the reason, as sanlock answers (so a missing path
    // and one the client may not open look the same); the log says why.
    let disk = crate::access::open_disk(
        space.added_by.as_ref(),
        std::path::Path::new(&space.path),
        crate::access::Need::Write,
        EngineKind::Inline,
    )?;
    // Read now, while the storage answered the open: on an unreachable hard-mounted NFS
    // server statfs would block.
    space.on_network_fs.store(
        is_network_fs(std::path::Path::new(&space.path)),
        Ordering::SeqCst,
    );
    // Joining aborts (every I/O fails, sleeps end) as soon as removal is requested.
    let bdisk = BlockingDisk {
        disk,
        abort: space.stop.clone(),
    };
    let clock = crate::clock::lease_clock(space.stop.clone());
    // A removal (or forced shutdown) during the join aborts its I/O and waits; the add
    // then answers SANLK_ERROR (-201), as sanlock's delta_lease_acquire does when it sees
    // `external_remove` or `external_shutdown` in its waits — not the code of the I/O
    // the abort cut short (a read error, -220).
    let aborted = |e: JoinError| {
        if space.stop.load(Ordering::SeqCst) {
            info!(error = %e, "join aborted by removal or shutdown");
            JoinError::Aborted
        } else {
            e
        }
    };
    let io = space.io_timeout as u16;
    let (geometry, _first) = block_on(delta::read_lockspace_geometry(&bdisk, space.offset, io))
        .map_err(|e| aborted(e.into()))?;
    geometry_fits(&geometry, bdisk.disk.sector_size(), space.host_id)?;
    let params = LockspaceParams {
        space_name: space.name,
        disk_offset: space.offset,
        geometry,
        host_id: space.host_id,
        host_name: d.cfg.host_name,
        io_timeout: io,
        watchdog_fire: u64::from(d.cfg.watchdog_fire_timeout_s),
        monitor_hosts: None,
    };
    report(
        space,
        Input::JoinStarted {
            id: space.space_id,
            geometry,
        },
    );
    // Storage fencing: our key for the generation the acquire writes is registered
    // before it, since a reservation refuses an unregistered host's writes.
    let fence = if d.cfg.fence.scsi_pr_for(&space.name) {
        Some(join_fence(d, space, &bdisk, &params).map_err(aborted)?)
    } else {
        None
    };
    let state = block_on(delta::acquire(&bdisk, &clock, &params)).map_err(|e| {
        if let Some(f) = &fence {
            fence_unregister(space, f);
        }
        aborted(e.into())
    })?;
    if let Some(f) = fence {
        confirm_join_fence(d, space, f, (&bdisk, &params, &state))?;
    }
    if let Some(w) = wd.as_mut() {
        let renewal_s = state.last_success_ms / 1000;
        let expire_s = delta::fail_deadline_ms(&params, &state) / 1000;
        if let Err(e) = w.arm(&space.name.to_text(), space.host_id, renewal_s, expire_s) {
            if let Err(re) = block_on(delta::release(&bdisk, &params, &state)) {
                warn!(error = %re, "delta lease release after a watchdog failure failed");
            }
            return Err(e.into());
        }
        info!(renewal_s, expire_s, "watchdog armed");
    }
    Ok((bdisk, params, state, wd))
}

/// A lockspace's geometry (read from its leader) against the device and our host_id. A
/// record whose sector size is below the device's logical sector size cannot be read or
/// written with O_DIRECT at its own spacing: refused as sanlock refuses a sector size
/// that disagrees with the geometry in use.
fn geometry_fits(
    geometry: &disk_format::Geometry,
    device_sector_bytes: u32,
    host_id: u64,
) -> Result<(), JoinError> {
    if geometry.sector_size.bytes() < device_sector_bytes {
        return Err(JoinError::SectorSize {
            record_bytes: geometry.sector_size.bytes(),
            device_bytes: device_sector_bytes,
        });
    }
    if host_id > geometry.max_hosts() {
        return Err(JoinError::HostIdTooLarge {
            host_id,
            max_hosts: geometry.max_hosts(),
        });
    }
    Ok(())
}

/// After the join's acquire: confirms that our key is registered for the generation it
/// wrote and keeps the fence in the lockspace; on failure, releases the delta lease just
/// taken and unregisters, refusing the join.
fn confirm_join_fence(
    d: &Daemon,
    space: &Space,
    f: Arc<crate::fence::SpaceFence>,
    (bdisk, params, state): (&BlockingDisk, &LockspaceParams, &DeltaState),
) -> Result<(), JoinError> {
    match f.confirm_generation(state.generation(), space.fence_key()) {
        Ok(None) => {}
        Ok(Some(key)) => fence_registered(d, space, key),
        Err(e) => {
            if let Err(re) = block_on(delta::release(bdisk, params, state)) {
                warn!(error = %re, "delta lease release after a fencing failure failed");
            }
            fence_unregister(space, &f);
            return Err(JoinError::FenceGeneration(e));
        }
    }
    let first = space.fence.set(f).is_ok();
    assert!(
        first,
        "lockspace {}: fencing set up twice",
        space.name.to_text()
    );
    Ok(())
}

/// Opens the lockspace's PR devices and registers our key for the coming generation
/// (`crate::fence`); any failure is logged and refuses the join.
fn join_fence(
    d: &Daemon,
    space: &Space,
    bdisk: &BlockingDisk,
    params: &LockspaceParams,
) -> Result<Arc<crate::fence::SpaceFence>, JoinError> {
    let cfg = &d.cfg.fence;
    let fence = crate::fence::SpaceFence::open(
        std::path::Path::new(&space.path),
        &cfg.devices_for(&space.name),
        space.host_id,
        u64::from(cfg.drain_ms),
    )
    .map_err(JoinError::Fence)?;
    let prev = block_on(delta::read_host_record(bdisk, params, space.host_id))?;
    let key = fence
        .register_for_join(
            &prev,
            u64::from(space.io_timeout),
            u64::from(d.cfg.watchdog_fire_timeout_s),
            &space.stop,
        )
        .map_err(JoinError::Fence)?;
    fence_registered(d, space, key);
    Ok(Arc::new(fence))
}

/// Tells the core our storage key `key` is registered (`Input::FenceRegistered`).
fn fence_registered(d: &Daemon, space: &Space, key: u64) {
    report(
        space,
        Input::FenceRegistered {
            id: space.space_id,
            key,
            preempt_cfg_s: u64::from(d.cfg.fence.preempt_s),
            acts: d.cfg.fence.acts_for(&space.name),
        },
    );
}

/// Removes our storage key (the core's) from the devices and tells the core.
fn fence_unregister(space: &Space, fence: &crate::fence::SpaceFence) {
    fence.unregister(space.fence_key());
    report(space, Input::FenceUnregistered { id: space.space_id });
}

/// The fence thread of a fenced lockspace: after each read of the lockspace, and at
/// least once a second, until the lockspace is being released or lost, a pass (`lockd_core::fencing`): the core's look at its host
/// monitor, then the PR commands it asks for, each answered with what they found, in
/// the order the steps give them. The core's verdicts are logged here; finding
/// ourselves fenced has failed the lockspace in the core already (its holders get the
/// loss notice, then kill escalation), and the thread ends.
fn fence_thread(space: &Arc<Space>, fence: &crate::fence::SpaceFence) {
    use lockd_core::fencing::FenceAction;
    let id = space.space_id;
    let step = |input| lock(&space.core).step(crate::clock::now_s(), input);
    loop {
        if space.st(|st| st.releasing || st.gone || st.lease_lost()) {
            return;
        }
        let mut todo: std::collections::VecDeque<_> = step(Input::FenceLook { id }).into();
        let mut fenced_here = false;
        while let Some(effect) = todo.pop_front() {
            match effect {
                Effect::Fence {
                    action: FenceAction::ReadKeys,
                    ..
                } => {
                    let read = fence.read_keys();
                    todo.extend(step(Input::FenceKeysRead {
                        id,
                        read,
                        read_at_ms: crate::clock::now_ms(),
                    }));
                }
                Effect::Fence {
                    action:
                        FenceAction::Preempt {
                            host_id,
                            generation,
                            our_key,
                        },
                    ..
                } => {
                    let outcome = if crate::planted::active(crate::planted::Bug::TakeBeforeConfirm)
                    {
                        lockd_core::fencing::PeerFenceOutcome::Confirmed { preempted: true }
                    } else {
                        fence.preempt_peer(host_id, generation, our_key, &space.stop)
                    };
                    todo.extend(step(Input::PeerFenceDone {
                        id,
                        host_id,
                        generation,
                        outcome,
                    }));
                }
                Effect::Fence {
                    action: FenceAction::Reserve { our_key },
                    ..
                } => fence.reserve(our_key),
                Effect::Fence {
                    action: FenceAction::Release { .. },
                    ..
                } if crate::planted::active(crate::planted::Bug::ReserveWithUnkeyedPeers) => {}
                Effect::Fence {
                    action: FenceAction::Release { our_key },
                    ..
                } => fence.release(our_key),
                Effect::Fence {
                    action: FenceAction::Reregister { our_key },
                    ..
                } => fence.reregister(our_key),
                Effect::FenceVerdict { verdict, .. } => {
                    fenced_here |= fence_verdict(space, fence, verdict);
                }
                other => panic!("a fence step gave an effect it does not give: {other:?}"),
            }
        }
        if fenced_here {
            return;
        }
        // The next pass: when a read of the lockspace (a renewal's or one between
        // renewals) has been taken into the core (`take_hosts_read` notifies), or a
        // second from now, or at a stop.
        let core = lock(&space.core);
        drop(crate::sync::wait_timeout(
            &space.cond,
            core,
            Duration::from_millis(1000),
        ));
    }
}

/// A fence verdict of the core, logged (and, with the planted bug, acted on); true when
/// it says this host has been fenced.
fn fence_verdict(
    space: &Space,
    fence: &crate::fence::SpaceFence,
    verdict: lockd_core::fencing::FenceVerdict,
) -> bool {
    use lockd_core::fencing::FenceVerdict;
    let mut fenced_here = false;
    match verdict {
        // Given by a renewal's read only (`renew_loop` logs it).
        FenceVerdict::FencedPeerRenews { .. } => {}
        FenceVerdict::StorageCleared { renewal_gap_ms } => error!(
            renewal_gap_ms,
            "storage fencing: the device holds no reservation and our key is gone \
             while our record cannot have stood still long enough for a peer to \
             preempt us: the storage lost its persistent reservation state (a target restart without persisted reservations, \
             or a clear), not a preempt; registering our key again. Until a \
             reservation stands again no host can be fenced by the storage"
        ),
        FenceVerdict::PeerUnkeyed {
            host_id,
            generation,
        } if crate::planted::active(crate::planted::Bug::ReserveWithUnkeyedPeers) => {
            warn!(
                host_id,
                generation, "PLANTED BUG: reserving with a live peer unkeyed"
            );
            fence.reserve(space.fence_key());
        }
        FenceVerdict::PeerUnkeyed {
            host_id,
            generation,
        } => warn!(
            host_id,
            generation,
            "storage fencing: this host renews its lease but has no key on the \
             storage (sanlock, or lockd without fence = \"scsi-pr\"): no reservation \
             is held while it does, so fencing is inactive and leases wait \
             host_dead"
        ),
        FenceVerdict::WeAreFenced(why) => {
            error!(
                ?why,
                "storage fencing: this host has been fenced (its key is gone from \
                 the storage, or the storage refused its preempt); its leases are \
                 lost"
            );
            fenced_here = true;
        }
        FenceVerdict::PeerFenced {
            host_id,
            generation,
            age_s,
        } => info!(
            host_id,
            generation,
            age_s,
            "storage fencing: host marked fenced (its key's removal confirmed); \
             its leases may be taken now"
        ),
        FenceVerdict::PeerNeverKeyed {
            host_id,
            generation,
        } => warn!(
            host_id,
            generation,
            "storage fencing: this host generation never had a key we saw: it \
             is not fenced by the storage; its leases wait host_dead"
        ),
    }
    fenced_here
}

/// Refuses (-EINVAL, before anything is opened or written) an io_timeout whose lease
/// expiry, 8·io_timeout after a renewal, is never more than wdmd's test interval ahead
/// for the fire timeout `w`: wdmd counts a lockspace whose expiry is within one test
/// interval as failed, so every test would fail and the watchdog would reset a healthy
/// host W seconds later (sanlock accepts it and the host is reset; seen in the VM bed
/// with io_timeout 1 and W = 60, test interval 10 s). Warns when the margin is too small
/// to hold just before every renewal (6·io_timeout): some tests fail, and a run of them
/// as long as W resets the host.
fn watchdog_fits(io_timeout_s: u32, w: u32) -> Result<(), JoinError> {
    let interval = wdmd::proto::test_interval_for(w);
    if 8 * io_timeout_s <= interval {
        error!(
            io_timeout_s,
            watchdog_fire_timeout_s = w,
            test_interval_s = interval,
            "io_timeout too short for this watchdog fire timeout: the lease expiry (8·io_timeout) \
             would always be within wdmd's test interval, and wdmd would let the watchdog reset \
             this healthy host; use a larger io_timeout or a smaller watchdog_fire_timeout \
             (test interval: 10 s for W >= 60, 5 s for 30..59, 2 s for 10..29, 1 s below)"
        );
        return Err(JoinError::IoTimeoutTooShort {
            io_timeout_s,
            fire_timeout_s: w,
            test_interval_s: interval,
        });
    }
    if 6 * io_timeout_s <= interval {
        warn!(
            io_timeout_s,
            watchdog_fire_timeout_s = w,
            test_interval_s = interval,
            "io_timeout is short for this watchdog fire timeout: just before each renewal the \
             lease expiry is within wdmd's test interval, so some watchdog tests fail"
        );
    }
    Ok(())
}

fn space_thread(d: &Arc<Daemon>, space: &Arc<Space>) {
    let span = info_span!("lockspace", ls = %space.name, host_id = space.host_id);
    let _g = span.enter();
    info!(path = ?space.path, offset = space.offset, io_timeout = space.io_timeout, "joining lockspace");
    let (bdisk, params, mut state, mut wd) = match join(d, space) {
        Ok(v) => v,
        Err(e) => {
            let rv = e.code();
            // The one place a join's failure is logged: its reason and sanlock's code; an
            // error when configuration or the storage cannot give what was asked for.
            match e {
                JoinError::Fence(_) | JoinError::FenceGeneration(_) | JoinError::Watchdog(_) => {
                    error!(error = %e, rv, "add_lockspace failed")
                }
                _ => warn!(error = %e, rv, "add_lockspace failed"),
            }
            finish_add(d, space, Err(rv));
            mark_gone(d, space);
            return;
        }
    };
    let first = space
        .joined
        .set(JoinedDisk {
            // Other threads' reads of the lockspace (an acquire's owner checks and
            // confirmations, set_host) go through the shared ring: the inline ring is
            // this thread's.
            disk: BlockingDisk {
                disk: bdisk.disk.on_engine(EngineKind::SharedRing),
                abort: Arc::new(AtomicBool::new(false)),
            },
            params: params.clone(),
            generation: state.generation(),
        })
        .is_ok();
    assert!(first, "lockspace {}: joined twice", space.name.to_text());
    let lease = JoinedLease {
        generation: state.generation(),
        last_success_s: state.last_success_ms / 1000,
        // `delta::acquire` takes last_success_ms just before the write the lease is timed
        // from.
        write_sent_ms: state.last_success_ms,
        ended_ms: crate::clock::now_ms(),
    };
    // Removed just as the join completed: the core answers -1 (sanlock's
    // add_lockspace_wait undoes the add in this window); the delta lease is released
    // below.
    if finish_add(d, space, Ok(lease)) == 0 {
        info!(generation = state.generation(), path = ?state.path, "lockspace joined");
        d.notifier.status(&format!(
            "joined lockspace {} (watchdog {})",
            space.name,
            if wd.is_some() { "armed" } else { "off" }
        ));
    }
    if let Some(f) = space.fence.get().cloned() {
        let s2 = space.clone();
        if let Err(e) = crate::threads::spawn(format!("lockd-fence{}", space.space_id), move || {
            fence_thread(&s2, &f)
        }) {
            // Without it we never preempt a failed peer (its leases wait host_dead, as
            // without fencing) and never notice our own key gone (our writes still fail).
            error!(error = %e, "cannot start the fence thread");
        }
    }
    // Renewals must keep going while lease holders are being killed; the abort flag only
    // cut short the join, so give renewals a disk that is not aborted.
    let run_disk = BlockingDisk {
        disk: bdisk.disk.clone(),
        abort: Arc::new(AtomicBool::new(false)),
    };
    let clock = crate::clock::lease_clock_unstopped();
    renew_loop(d, space, &run_disk, &clock, &params, &mut state, &mut wd);
    report(space, Input::DeltaReleasing { id: space.space_id });
    leave_watchdog(space, wd.take());
    release_at_leave(space, &run_disk, &params, &state);
    let async_rem_at_ms = space.async_rem_at_ms.load(Ordering::SeqCst);
    if async_rem_at_ms != 0 {
        // INQ_LOCKSPACE answers "in progress" meanwhile (`releasing`), as sanlock's does
        // while its main loop and lockspace thread wind the lockspace down.
        let until_ms = async_rem_at_ms + ASYNC_REMOVAL_SHOWN_MS;
        let now_ms = crate::clock::now_ms();
        if until_ms > now_ms {
            std::thread::sleep(Duration::from_millis(until_ms - now_ms));
        }
    }
    mark_gone(d, space);
    info!("lockspace removed");
}

/// At the lockspace's end (no holder left): disarms its watchdog connection, or keeps it
/// armed until the reset when the holders' writes may still be on their way.
fn leave_watchdog(space: &Space, mut wd: Option<LockspaceWatchdog>) {
    // No holder is left (renew_loop returns only then): the lockspace no longer needs
    // the watchdog — unless its holders' writes may still be on their way.
    if let Some(w) = wd.take_if(|_| keep_armed_after_failure(space)) {
        error!(
            path = %space.path,
            "the lockspace failed while its holders wrote to a network filesystem: a killed \
             process's writes stay queued in the kernel's client and are sent when the server \
             is reachable again, after other hosts may hold the leases; the watchdog stays \
             armed so that this host resets before host_dead"
        );
        lock(&AWAITING_RESET).push(w);
    }
    if let Some(w) = wd.take() {
        match w.disarm() {
            Ok(()) => info!("watchdog disarmed"),
            Err(e) => {
                warn!(error = %e, "watchdog disarm failed; wdmd keeps testing the last expiry")
            }
        }
    }
}

/// At the lockspace's end: releases our delta lease if its last renewal succeeded, then
/// unregisters our storage key unless it must stay.
fn release_at_leave(
    space: &Space,
    run_disk: &BlockingDisk,
    params: &LockspaceParams,
    state: &DeltaState,
) {
    let (dead, ok) = space.st(|st| (st.lease_lost(), st.last_renewal_ok));
    if !dead && ok && state.last_renewal_ok {
        match block_on(delta::release(run_disk, params, state)) {
            Ok(true) => {
                info!("delta lease released");
                if let Some(f) = space.fence.get() {
                    if keep_key_at_leave(space, f) {
                        // A host fenced meanwhile may still be alive (a paused guest) with
                        // its writes queued: were we the last registrant, removing our key
                        // would end a reservation it held and let them land. The
                        // key stays; our next join replaces it.
                        warn!(
                            "storage fencing: our key stays registered (this host fenced a \
                             peer, or its key is the last while another host's lease is not \
                             free) so that the reservation keeps a fenced host out"
                        );
                    } else {
                        fence_unregister(space, f);
                    }
                }
            }
            Ok(false) => warn!("delta lease left on disk (last renewal failed)"),
            Err(e) => warn!(error = %e, "delta lease release failed"),
        }
    } else {
        warn!("delta lease not released: last renewal did not succeed");
    }
}

/// Whether a clean leave keeps our storage key: this host fenced a peer while joined, or
/// our key is the last on the device while another host's delta lease is not free (it
/// may be a host another survivor fenced, then left).
fn keep_key_at_leave(space: &Space, fence: &crate::fence::SpaceFence) -> bool {
    if space.fenced_a_peer() {
        return true;
    }
    let now = crate::clock::now_s();
    let others = space.monitor(|mon| {
        mon.hosts(now)
            .iter()
            .any(|(host_id, h, _)| *host_id != space.host_id && h.timestamp != 0)
    });
    others && fence.ours_is_the_last_key(space.fence_key())
}

/// Watchdog connections of failed lockspaces that must end in a reset (see
/// [`keep_armed_after_failure`]): kept open, never disarmed, so wdmd stops petting at their
/// expiry and the device resets the host.
static AWAITING_RESET: Mutex<Vec<LockspaceWatchdog>> = Mutex::new(Vec::new());

/// Filesystem magic numbers (statfs `f_type`) of network filesystems whose client keeps a
/// killed process's writes queued and sends them later: NFS, SMB/CIFS (three magics), Ceph.
const NETWORK_FS_MAGICS: [u64; 5] = [0x6969, 0x517B, 0xFF53_4D42, 0xFE53_4D42, 0x00C3_6400];

/// True when a failed lockspace must not disarm the watchdog although its holders are
/// gone: its lease was found lost (a removal or shutdown asked for afterwards does not
/// change that) while processes held leases in it, and its storage, or a file its holders
/// had open when it failed (`crate::netfs`), is on a network filesystem. On a block device a process cannot exit while its
/// direct I/O is in flight, so its exit means its writes are done or failed. On NFS (seen
/// in the virtual-machine bed, scenario nfs-cut) the process dies at SIGKILL while its
/// write RPC stays queued in the client, and the write lands when the server is reachable
/// again — after host_dead, under another host's lease. Only a reset of this host drops
/// that queue, and it comes before host_dead: the expiry wdmd holds is this lockspace's.
fn keep_armed_after_failure(space: &Space) -> bool {
    if crate::planted::active(crate::planted::Bug::RemovalDisarms) && space.st(|st| st.kill_now) {
        warn!("PLANTED BUG: a removal after the failure disarms the watchdog");
        return false;
    }
    // `failed_with_holders` is set only when the lease was found lost; a removal or
    // shutdown that came after the failure (`kill_now`) does not clear it.
    space.st(|st| st.lease_lost() && st.failed_with_holders)
        && (space.on_network_fs.load(Ordering::SeqCst)
            || space.holders_on_network_fs.load(Ordering::SeqCst))
}

/// Whether `path` lies on a network filesystem ([`NETWORK_FS_MAGICS`]); a path whose
/// filesystem cannot be read counts as one (the safe answer).
fn is_network_fs(path: &std::path::Path) -> bool {
    match nix::sys::statfs::statfs(path) {
        Ok(st) => NETWORK_FS_MAGICS.contains(&(st.filesystem_type().0 as u64)),
        Err(_) => true,
    }
}

/// How long a removal's first step (holders stopped, lease still held and renewed) lasts
/// at least, even with no holder: the holders are checked again one monitor interval
/// after the stop, as sanlock checks its killed pids at its next recovery check (200 ms).
/// So a client that asks right after an asynchronous REM_LOCKSPACE finds the lockspace
/// still there on both daemons.
const REMOVAL_CHECK_MS: u64 = 200;

/// How long after an asynchronous REM_LOCKSPACE the lockspace stays listed at least, the
/// last part of it "in progress" (INQ_LOCKSPACE -EINPROGRESS; python3-sanlock's
/// `inq_lockspace` answers None): clients that poll after an asynchronous removal see the
/// same three answers on lockd as on sanlock 3.8.5 and 3.9.5, whose removal takes 2–3 s
/// of main-loop and lockspace-thread polling. A synchronous REM is answered as soon as
/// the lease is released.
const ASYNC_REMOVAL_SHOWN_MS: u64 = 2000;

fn renew_loop(
    d: &Arc<Daemon>,
    space: &Space,
    disk: &BlockingDisk,
    clock: &SystemClock,
    params: &LockspaceParams,
    state: &mut DeltaState,
    wd: &mut Option<LockspaceWatchdog>,
) {
    let io = u64::from(space.io_timeout);
    let renewal_ms = timeouts::id_renewal_seconds(io) * 1000;
    // What each renewal reads: the area's head, the whole area periodically (the first
    // renewal's read included) or on fencing's demand, or always the whole area.
    let area_sectors = params.monitored_sectors();
    let read_mode = if d.cfg.read_whole_lockspace {
        ReadMode::Full
    } else {
        ReadMode::Head
    };
    let mut reads = RenewalReads::new(read_mode, params.geometry);
    // The first renewal comes right after the join: its read is the first one issued
    // after the join, the baseline of the shared hold (lease-core `monitor::SharedHold`),
    // so shared grants on a host with no live peer wait one renewal, not 2D.
    let mut next_attempt_ms = state.last_success_ms;
    // When a stop was first seen: the loop ends no sooner than REMOVAL_CHECK_MS after it.
    let mut stop_seen_ms: Option<u64> = None;
    // A lockspace this host fences from (`fence = "scsi-pr"`) is also read half-way
    // between renewals, for the fence's view of its peers only (`observe_between`).
    let observes = space.fence.get().is_some() && d.cfg.fence.acts_for(&space.name);
    let mut observe_at_ms = u64::MAX;
    let mut last_read_sectors = area_sectors;
    loop {
        if stop_is_due(d, space, &mut stop_seen_ms) {
            return;
        }
        // A lost lease is not renewed again: other hosts must see it expire.
        let lost = space.st(SpaceSt::lease_lost);
        let now_ms = crate::clock::now_ms();
        if observes && !lost && now_ms >= observe_at_ms && now_ms < next_attempt_ms {
            observe_at_ms = u64::MAX;
            observe_between(d, space, disk, clock, params, last_read_sectors);
            continue;
        }
        if lost || now_ms < next_attempt_ms {
            let until_ms = if observes {
                next_attempt_ms.min(observe_at_ms)
            } else {
                next_attempt_ms
            };
            wait_until_due(space, lost, now_ms, until_ms);
            continue;
        }
        let t0 = crate::clock::now_ms();
        report(space, Input::RenewalStarted { id: space.space_id });
        let input = space.renew_input();
        let (highest_used, whole_wanted) = space.renewal_read_view();
        if whole_wanted {
            reads.request_full();
        }
        let read_sectors =
            reads.next_read_sectors(params.geometry, params.host_id, highest_used, area_sectors);
        let result = block_on(delta::renew_reading(
            disk,
            clock,
            params,
            state,
            &input,
            read_sectors,
        ));
        let t1 = crate::clock::now_ms();
        match result {
            Ok(snap) => {
                reads.read_done(snap.sectors.len() as u64, area_sectors);
                last_read_sectors = snap.sectors.len() as u64;
                space.renewal_read_bytes.fetch_add(
                    snap.sectors.len() as u64 * params.geometry.sector_bytes(),
                    Ordering::Relaxed,
                );
                if let Some(w) = wd.as_mut() {
                    extend_watchdog(w, params, state);
                }
                take_hosts_read(d, space, params, highest_used, snap, true);
                renewal_succeeded(space, state, t0, t1);
                next_attempt_ms = state.last_success_ms + renewal_ms;
                if observes {
                    observe_at_ms = state.last_success_ms + renewal_ms / 2;
                }
            }
            Err(e) => {
                renewal_failure(space, &e);
                // sanlock retries a failed renewal after 500 ms; no read between renewals
                // delays the retry.
                next_attempt_ms = crate::clock::now_ms() + 500;
                observe_at_ms = u64::MAX;
            }
        }
    }
}

/// Whether the renewal loop ends: a stop was asked for at least REMOVAL_CHECK_MS ago
/// (`stop_seen_ms` keeps when it was first seen) and no lease of the lockspace is held.
fn stop_is_due(d: &Daemon, space: &Space, stop_seen_ms: &mut Option<u64>) -> bool {
    if !space.stop.load(Ordering::SeqCst) {
        return false;
    }
    let now_ms = crate::clock::now_ms();
    let seen = *stop_seen_ms.get_or_insert(now_ms);
    now_ms >= seen + REMOVAL_CHECK_MS && !space_in_use(d, &space.name)
}

/// Sleeps until `until_ms` (the next renewal or read; at most 1 s, 100 ms once the lease
/// is lost or a stop was asked for, while holders still hold), woken early by a stop:
/// rem_lockspace, stop_all and the failed-lockspace removal notify `cond` after setting
/// `stop`. (A stop between the loop's check and the wait is seen at the next wake-up,
/// within a second.)
fn wait_until_due(space: &Space, lost: bool, now_ms: u64, until_ms: u64) {
    let wait_ms = if lost || space.stop.load(Ordering::SeqCst) {
        100
    } else {
        until_ms.saturating_sub(now_ms).clamp(1, 1000)
    };
    let core = lock(&space.core);
    drop(crate::sync::wait_timeout(
        &space.cond,
        core,
        Duration::from_millis(wait_ms),
    ));
}

/// After a renewal: the watchdog's expiry moved to the lease's new fail deadline.
fn extend_watchdog(w: &mut LockspaceWatchdog, params: &LockspaceParams, state: &DeltaState) {
    let renewal_s = state.last_success_ms / 1000;
    let expire_s = delta::fail_deadline_ms(params, state) / 1000;
    if let Err(e) = w.renewed(renewal_s, expire_s) {
        // wdmd is gone or broken: the device will fire on its own; keep renewing so the
        // lease stays valid until then.
        error!(error = %e, "cannot extend the watchdog expiry");
    }
}

/// A renewal that began at `t0_ms` and ended at `t1_ms`: reported to the core
/// (`Input::RenewalOk`, with the record RENEWAL shows) and timed in the histogram.
fn renewal_succeeded(space: &Space, state: &DeltaState, t0_ms: u64, t1_ms: u64) {
    // read_ms covers the whole renewal (read and write), as RENEWAL reports it.
    let rec = RenewalRec {
        timestamp: state.leader.timestamp,
        read_ms: t1_ms.saturating_sub(t0_ms),
        write_ms: 0,
        // Taken by `delta::renew` just before its write.
        write_sent_ms: state.last_success_ms,
        ended_ms: t1_ms,
    };
    report(
        space,
        Input::RenewalOk {
            id: space.space_id,
            last_success_s: state.last_success_ms / 1000,
            rec,
        },
    );
    space.renewal_hist.observe_ms(t1_ms.saturating_sub(t0_ms));
}

/// A failed renewal: logged, counted and reported to the core (`Input::RenewalFailed`).
/// Refused by the storage (our key preempted) is lost at once, as a corrupt lease: no
/// retry can succeed.
fn renewal_failure(space: &Space, e: &lease_core::LeaseError) {
    let code = e.sanlk_code();
    if e.is_fenced() {
        error!(
            error = %e,
            "renewal refused by the storage: this host has been fenced (its reservation key \
             was preempted); the lockspace's leases are lost"
        );
    } else {
        warn!(error = %e, rv = code, "renewal failed");
    }
    space
        .renewal_failures
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let corrupt = e.is_corrupt() || e.is_fenced();
    report(
        space,
        Input::RenewalFailed {
            id: space.space_id,
            code,
            corrupt,
        },
    );
}

/// A read between renewals of a lockspace this host fences from, fed to the host monitor
/// as a renewal's read is (`Input::HostsRead`), and the fence thread woken for a pass. A
/// peer's renewal is then seen within io_timeout of landing, not 2·io_timeout, and a
/// dead peer is preempted that much sooner after the fault (the fence's stillness rule
/// is unchanged: measured from our reads, it is never longer than the peer's real
/// stillness plus one read's time). The read is bounded to 0.8 io_timeout: it starts
/// one io_timeout after our renewal, so it ends before the next renewal is due; a failed or timed-out one is only logged
/// (renewals decide the lease; a missed read leaves the view as it was). Why it fences
/// no healthy host: it only makes our view fresher; the preempt still needs 6·D of
/// stillness between our reads, above a live host's 5.6·D worst gap (VM bed
/// `pr-delay-bursts`: longest gap 5.62 s, nobody preempted). Why no fenced host writes
/// again: a lease is still taken only after the fence is confirmed (`pr-kill-daemon`,
/// `pr-freeze-guest`: overlaps=0; fence model planted bug `take-before-preempt-confirmed`).
fn observe_between(
    d: &Arc<Daemon>,
    space: &Space,
    disk: &BlockingDisk,
    clock: &SystemClock,
    params: &LockspaceParams,
    read_sectors: u64,
) {
    let timeout_ms = (u64::from(space.io_timeout) * 800).max(100);
    let highest_used = space.renewal_read_view().0;
    match block_on(delta::observe_reading(
        disk,
        clock,
        params,
        read_sectors,
        timeout_ms,
    )) {
        Ok(snap) => {
            space.renewal_read_bytes.fetch_add(
                snap.sectors.len() as u64 * params.geometry.sector_bytes(),
                Ordering::Relaxed,
            );
            take_hosts_read(d, space, params, highest_used, snap, false);
        }
        Err(e) => tracing::debug!(error = %e, "read between renewals failed"),
    }
}

/// A read of the lockspace (a renewal's, or one between renewals) into the core: the
/// host monitor, host events, the fence's alarm; then the fence thread is woken, its
/// pass judging from this read. `highest_used` is what the core held before the read.
/// Host events go to REG_EVENT fds only from a renewal's read (`deliver_events`), so a
/// client sees them once per renewal while the sender's bit stays set, as from sanlock,
/// whether or not the lockspace is also read between renewals; the examine a bit asks
/// for is started from either read.
fn take_hosts_read(
    d: &Arc<Daemon>,
    space: &Space,
    params: &LockspaceParams,
    highest_used: u64,
    snap: delta::LockspaceSnapshot,
    deliver_events_now: bool,
) {
    let snap_whole = snap.whole_area;
    let fx = lock(&space.core).step(
        crate::clock::now_s(),
        Input::HostsRead {
            id: space.space_id,
            read_at_ms: snap.read_at_ms,
            sectors: snap.sectors,
            whole_area: snap.whole_area,
        },
    );
    space.cond.notify_all();
    // A whole read that found a host beyond the head we have been reading (lease-core
    // `reads`): it joined since our last whole read, and a forced request it made of us
    // meanwhile may have outlived the bit in its delta lease (set for 6·D only). Its
    // request record is on the resource itself: examine our leases once. (Reading the
    // whole area on every renewal, every bit is seen while it is set: nothing to catch
    // up.)
    if !d.cfg.read_whole_lockspace
        && snap_whole
        && space.renewal_read_view().0
            > lease_core::reads::head_sectors(
                params.geometry,
                params.host_id,
                highest_used,
                params.monitored_sectors(),
            )
    {
        info!("a host joined beyond the head of the area: examining our leases");
        examine_in_background(d, space);
    }
    for effect in fx {
        match effect {
            Effect::HostNotifications { notes, examine, .. } => {
                if examine {
                    examine_in_background(d, space);
                }
                if deliver_events_now {
                    deliver_events(space, &notes);
                }
            }
            Effect::FenceVerdict {
                verdict:
                    lockd_core::fencing::FenceVerdict::FencedPeerRenews {
                        host_id,
                        generation,
                    },
                ..
            } => error!(
                host_id,
                generation,
                "storage fencing: a host generation this host fenced renews its lease: the \
                 storage still takes its writes (a path or device outside the fence, or a \
                 target that lost its reservations); its leases were taken and it may be \
                 writing beside their new holders"
            ),
            other => panic!("a lockspace read gave an effect it does not give: {other:?}"),
        }
    }
}

/// What the lockspace's thread saw, into its status in the core (`Core::step`: the join
/// or a renewal beginning, a renewal's outcome, the delta release beginning). Keyed by
/// the lockspace's id: the core ignores a report for a gone lockspace, so the fence
/// thread's late verdict cannot fail a successor of the same name. No effect: whether
/// the lease is lost is the monitor's next tick's decision.
fn report(space: &Space, input: Input<std::os::unix::net::UnixStream, crate::tables::Held>) {
    let fx = lock(&space.core).step(crate::clock::now_s(), input);
    assert!(fx.is_empty(), "a lockspace report gave effects: {fx:?}");
}

/// Host events addressed to us (our bit set, non-zero event) go to every REG_EVENT fd;
/// a fd that cannot take the record without blocking is dropped, as sanlock does.
fn deliver_events(space: &Space, notes: &[lease_core::Notification]) {
    use std::io::Write;
    let mut fds = lock(&space.event_fds);
    for n in notes.iter().filter(|n| n.event != 0) {
        let cb = wire::EventCb {
            header: wire::Header {
                magic: SM_MAGIC,
                version: SM_CB_PROTO,
                cmd: SM_CB_GET_EVENT,
                cmd_flags: 0,
                length: wire::EVENT_CB_LEN as u32,
                seq: 0,
                data: 0,
                data2: 0,
            },
            event: wire::HostEvent {
                host_id: space.host_id,
                generation: n.target_generation,
                event: n.event,
                data: n.data,
            },
            from_host_id: n.from_host_id,
            from_generation: n.from_generation,
        }
        .encode();
        info!(
            from = n.from_host_id,
            event = n.event,
            data = n.data,
            "host event"
        );
        fds.retain_mut(|s| s.write_all(&cb).is_ok());
    }
}

/// SET_EVENT: the event our renewals carry, and whose bits they set. The core decides
/// (`CoreRequest::SetEvent`: the host_id's range, an event being sent, the flags); the
/// shell only reads the target's current generation for `SANLK_SETEV_CUR_GENERATION`
/// from its host monitor.
pub fn set_event(
    d: &Daemon,
    ci: u32,
    ls: &wire::Lockspace,
    he: &wire::HostEvent,
    flags: u32,
) -> Result<(), SpaceError> {
    if ls.name.is_empty() || he.host_id == 0 || he.host_id > lockd_core::events::MAX_EVENT_HOST_ID {
        return Err(SpaceError::Invalid(
            "a name and a host_id of 1 to 2000 are needed",
        ));
    }
    let Some(space) = d.find_space(&ls.name) else {
        return Err(SpaceError::NotFound);
    };
    let mut event = *he;
    if event.generation == 0 && flags & SANLK_SETEV_CUR_GENERATION != 0 {
        if let Some(o) = space.monitor(|m| lease_core::HostObserver::observation(m, he.host_id)) {
            event.generation = o.owner_generation;
        }
    }
    let fx = lock(&d.core).step(
        crate::clock::now_s(),
        Input::Request {
            ci,
            req: CoreRequest::SetEvent {
                ls: ls.name,
                he: event,
                flags,
            },
        },
    );
    match fx.as_slice() {
        [lockd_core::Effect::Reply { reply, .. }] => match reply.rv {
            0 => Ok(()),
            rv if rv == -libc::EBUSY => Err(SpaceError::Busy(reply.why.unwrap_or("busy"))),
            rv if rv == -libc::EINVAL => Err(SpaceError::Invalid(reply.why.unwrap_or("invalid"))),
            rv if rv == -libc::ENOENT => Err(SpaceError::NotFound),
            rv => Err(SpaceError::Failed(rv)),
        },
        other => panic!("SET_EVENT gave effects other than its reply: {other:?}"),
    }
}

/// Drops event fds whose client ended (wrote u32 1) or closed (sanlock `_clean_event_fds`).
fn clean_event_fds(space: &Space) -> usize {
    use std::io::Read;
    let mut fds = lock(&space.event_fds);
    let before = fds.len();
    fds.retain_mut(|s| {
        let mut end = [0u8; 4];
        match s.read(&mut end) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => true,
            Ok(4) => u32::from_ne_bytes(end) != 1,
            _ => false,
        }
    });
    before - fds.len()
}

/// REG_EVENT: keep a duplicate of this connection to send host events on.
pub fn reg_event(
    d: &Daemon,
    ls: &wire::Lockspace,
    stream: &std::os::unix::net::UnixStream,
) -> Result<(), SpaceError> {
    if ls.name.is_empty() {
        return Err(SpaceError::Invalid("a lockspace name is needed"));
    }
    let Some(space) = d.find_space(&ls.name) else {
        return Err(SpaceError::NotFound);
    };
    if lock(&space.event_fds).len() >= MAX_EVENT_FDS && clean_event_fds(&space) == 0 {
        return Err(SpaceError::TooManyEventFds);
    }
    let Ok(dup) = stream.try_clone() else {
        return Err(SpaceError::NoResources("cannot duplicate the connection"));
    };
    if dup.set_nonblocking(true).is_err() {
        return Err(SpaceError::Invalid(
            "the connection cannot be made non-blocking",
        ));
    }
    lock(&space.event_fds).push(dup);
    Ok(())
}

/// END_EVENT.
pub fn end_event(d: &Daemon, ls: &wire::Lockspace) -> Result<(), SpaceError> {
    if ls.name.is_empty() {
        return Err(SpaceError::Invalid("a lockspace name is needed"));
    }
    let Some(space) = d.find_space(&ls.name) else {
        return Err(SpaceError::NotFound);
    };
    clean_event_fds(&space);
    Ok(())
}

/// Examines our leases in `space` on the lockspace's examine thread, starting it if it is
/// not running (for a request bit from another host, or a client's EXAMINE command).
pub(crate) fn examine_in_background(d: &Arc<Daemon>, space: &Space) {
    // At most one examine thread per lockspace: a request that comes while one runs
    // makes it examine once more, so no number of requesting hosts can start more threads.
    space.examine_pending.store(true, Ordering::SeqCst);
    if space.examine_running.swap(true, Ordering::SeqCst) {
        return;
    }
    let d2 = d.clone();
    let name = space.name;
    let id = space.space_id;
    let started = crate::threads::spawn("lockd-examine", move || loop {
        while with_space(&d2, id, |s| s.examine_pending.swap(false, Ordering::SeqCst)) {
            crate::kill::examine_lockspace(&d2, &name);
        }
        with_space(&d2, id, |s| {
            s.examine_running.store(false, Ordering::SeqCst);
            false
        });
        // A request may have come between the last check and clearing `running`.
        let again = with_space(&d2, id, |s| {
            s.examine_pending.load(Ordering::SeqCst)
                && !s.examine_running.swap(true, Ordering::SeqCst)
        });
        if !again {
            break;
        }
    });
    if started.is_err() {
        space.examine_running.store(false, Ordering::SeqCst);
    }
}

/// Runs `f` on the lockspace with `space_id` if it still exists; false when it is gone.
fn with_space(d: &Daemon, space_id: u32, f: impl FnOnce(&Space) -> bool) -> bool {
    let space = lock(&d.spaces)
        .iter()
        .find(|s| s.space_id == space_id)
        .cloned();
    space.is_some_and(|s| f(&s))
}

#[cfg(test)]
mod network_fs_tests {
    use super::is_network_fs;

    #[test]
    fn local_and_unreadable_filesystems() {
        // The test machines' /var/tmp and /proc are local; a path that cannot be read
        // counts as a network filesystem (the safe answer). NFS itself is checked in the
        // virtual-machine bed (scenario nfs-cut), where guests have an NFS client.
        assert!(!is_network_fs(std::path::Path::new("/proc")));
        assert!(!is_network_fs(std::path::Path::new("/var/tmp")));
        assert!(is_network_fs(std::path::Path::new(
            "/nonexistent/lockd/lease"
        )));
    }
}

#[cfg(test)]
mod watchdog_fit_tests {
    use super::watchdog_fits;

    /// The refusal's code, or 0 when the io_timeout fits.
    fn fits(io_timeout_s: u32, w: u32) -> i32 {
        watchdog_fits(io_timeout_s, w).map_or_else(|e| e.code(), |()| 0)
    }

    #[test]
    fn io_timeouts_that_would_reset_a_healthy_host_are_refused() {
        // W = 60 tests every 10 s: io_timeout 1 (expiry 8 s ahead) always fails a test.
        assert_eq!(fits(1, 60), -libc::EINVAL);
        assert_eq!(fits(2, 60), 0, "16 s ahead at most, 12 s at least");
        assert_eq!(fits(10, 60), 0, "sanlock's defaults");
        // W = 10 tests every 2 s; W = 5 every second: io_timeout 1 fits (the beds).
        assert_eq!(fits(1, 10), 0);
        assert_eq!(fits(1, 5), 0);
        assert_eq!(fits(1, 30), 0, "8 s ahead, 5 s interval (warned)");
    }
}

#[cfg(test)]
mod renewal_tests {
    //! A renewal verdict reaches only its own lockspace, found by id: a late one of a
    //! gone lockspace (the fence thread's) leaves a newer one of the same name alone.
    use std::sync::Arc;

    use client_lib::wire;
    use disk_format::Name;

    use super::{mark_gone, report, Phase};
    use crate::space::Space;
    use crate::state::Daemon;
    use lockd_core::Input;

    fn listed(d: &Daemon) -> Arc<Space> {
        let wl = wire::Lockspace {
            name: Name::new("ls").expect("name"),
            host_id: 1,
            flags: 0,
            pad: 0,
            host_id_disk: wire::DiskLocation {
                path: wire::PathField::new("/nonexistent/lockd-renewal-unit/ids").expect("path"),
                ..Default::default()
            },
        };
        let space = Arc::new(d.new_space(&wl, 1, None));
        d.list_space(&space).expect("listed");
        space.st_mut(|st| {
            st.phase = Phase::Joined;
            st.add_result = Some(0);
        });
        space
    }

    #[test]
    fn a_gone_lockspaces_late_verdict_does_not_fail_its_successor() {
        let d = Daemon::for_tests("renewal-unit");
        let old = listed(&d);
        mark_gone(&d, &old);
        let new = listed(&d);
        assert_ne!(old.space_id, new.space_id);
        let fenced = |space: &Space| Input::RenewalFailed {
            id: space.space_id,
            code: -libc::EBADE,
            corrupt: true,
        };
        report(&old, fenced(&old));
        assert!(
            new.st(|st| st.corrupt_result == 0 && !st.renew_fail),
            "the successor was touched"
        );
        assert!(
            old.st(|st| st.gone && st.corrupt_result == 0),
            "a gone one stays as it was"
        );
        report(&new, fenced(&new));
        assert_eq!(new.st(|st| st.corrupt_result), -libc::EBADE);
    }
}
