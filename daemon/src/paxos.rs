//! Resource leases on disk through lease-core's disk Paxos: acquire, release, convert.
//!
//! Runs on the calling connection's thread (a paxos acquire may wait up to host_dead
//! seconds for a dead owner); never while holding a daemon lock.

use std::collections::VecDeque;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::Arc;

use client_lib::proto::*;
use client_lib::wire;
use disk_format::Name;
use lease_core::exec::block_on;
use lease_core::paxos::{self, AcquireOptions, HostContext, Mode, ResourceParams};
use tracing::{info, info_span, warn};

use crate::access::{self, Need};
use crate::cmd_error::LeaseCmdError;
use crate::confirm::SpaceObserver;
use crate::space::{Space, SpaceError};
use crate::state::Daemon;
use crate::sync::lock;
use crate::tables::{Held, HeldRes, Key};
use lockd_core::{CoreReply, DiskOp, Effect, Input, ReqKind};
use lockd_diskio::{BlockingDisk, EngineKind};

/// Opens a resource disk: during a client's command, with that client's rights
/// (`crate::access`); otherwise (a dead client's release, examine) as the daemon.
fn open(path: &str, need: Need) -> Result<BlockingDisk, LeaseCmdError> {
    Ok(BlockingDisk::new(access::open_disk(
        Path::new(path),
        need,
        EngineKind::SharedRing,
    )?))
}

/// Opens a held lease's disk with the rights of the client that acquired it.
fn open_held(lr: &HeldRes, need: Need) -> Result<BlockingDisk, LeaseCmdError> {
    open_lease(&lr.held, &lr.disks, need)
}

/// Opens the disk of a lease held as `held` on `disks`, with the rights of the client
/// that acquired it.
fn open_lease(
    held: &Held,
    disks: &[wire::DiskLocation],
    need: Need,
) -> Result<BlockingDisk, LeaseCmdError> {
    let disk = disks
        .first()
        .ok_or(LeaseCmdError::Invalid("a lease with no disk"))?;
    Ok(BlockingDisk::new(access::open_disk_as(
        held.opened_by.as_ref(),
        Path::new(&disk.path.to_text()),
        need,
        EngineKind::SharedRing,
    )?))
}

/// Runs `f` with our lockspace context (disk, params, generation, host monitor);
/// [`SpaceError::NotJoined`] before the lockspace's join ended.
pub(crate) fn with_host<T>(
    space: &Space,
    f: impl FnOnce(&HostContext<'_, BlockingDisk, SpaceObserver<'_>>) -> T,
) -> Result<T, SpaceError> {
    let joined = space.joined.get().ok_or(SpaceError::NotJoined)?;
    let observer = SpaceObserver {
        monitor: &space.monitor,
        confirm: &space.confirm,
    };
    let host = HostContext {
        lockspace_disk: &joined.disk,
        lockspace: &joined.params,
        generation: joined.generation,
        observer: &observer,
    };
    Ok(f(&host))
}

/// Acquires one resource for this host.
pub fn acquire(
    d: &Daemon,
    space: &Space,
    r: &wire::Resource,
    shared: bool,
    want_lver: Option<u64>,
    cmd_flags: u32,
) -> Result<Held, LeaseCmdError> {
    if r.disks.len() != 1 {
        return Err(LeaseCmdError::Unsupported("a lease on several disks"));
    }
    // From the join, read with no lock: the acquire path takes the core lock only for
    // its transitions.
    let geometry = space
        .joined
        .get()
        .map(|j| j.params.geometry)
        .ok_or(SpaceError::NotJoined)?;
    let disk = open(&r.disks[0].path.to_text(), Need::Write)?;
    let res = ResourceParams {
        space_name: r.head.lockspace_name,
        resource_name: r.head.name,
        disk_offset: r.disks[0].offset,
        geometry,
        io_timeout: space.io_timeout as u16,
        num_hosts_hint: 0,
    };
    // Needless only without lease-core's `sim` feature: with it (an `--all-features` build)
    // AcquireOptions has a simulator-only field that the default fills.
    #[allow(clippy::needless_update)]
    let opts = AcquireOptions {
        mode: if shared {
            Mode::Shared
        } else {
            Mode::Exclusive
        },
        owner_nowait: cmd_flags & SANLK_ACQUIRE_OWNER_NOWAIT != 0,
        lver: want_lver,
        lvb: cmd_flags & SANLK_ACQUIRE_LVB != 0,
        new_num_hosts: (r.head.flags & SANLK_RES_NUM_HOSTS != 0)
            .then_some(u64::from(r.head.data32)),
        sh_retries: d.cfg.sh_retries,
        ..AcquireOptions::default()
    };
    let c = crate::clock::lease_clock_unstopped();
    let out = with_host(space, |host| {
        block_on(paxos::acquire(&disk, &c, host, &res, &opts))
    })?;
    match out {
        Ok(token) => Ok(Held {
            token: Some(token),
            opened_by: access::current().filter(|c| !c.is_root()),
        }),
        Err(e) => Err(LeaseCmdError::paxos(e)),
    }
}

/// Releases a resource on disk. No I/O when our lockspace lease is lost (the lease then
/// expires with our host_id, as in sanlock).
pub fn release(
    space: Option<&Space>,
    held: &Held,
    disks: &[wire::DiskLocation],
    rename: Option<&disk_format::Name>,
) -> Result<(), LeaseCmdError> {
    let Some(token) = held.token.as_ref() else {
        return Ok(());
    };
    match space {
        Some(s) if !s.is_dead() => {}
        _ => {
            warn!("lockspace lost: resource left to expire with our host_id");
            return Ok(());
        }
    }
    // With the acquiring client's rights, whoever releases (the client, root by pid,
    // the daemon when the client died).
    let disk = open_lease(held, disks, Need::Write)?;
    block_on(paxos::release_renamed(
        &disk,
        &crate::clock::lease_clock_unstopped(),
        token,
        rename,
    ))
    // 5.x areas get 5.x's release numbers (-252/-253), 3.x areas 3.x's.
    .map_err(|e| LeaseCmdError::paxos_release(e, token.leader.version))
}

/// Converts a held resource between shared and exclusive. On failure, the error and the
/// lease's state when the convert changed it on the way (lease-core's token: our slot
/// holds the ballot's newer dblock, `erase_all` may be set): the caller keeps it for the
/// release (`Tables::convert_failed_state`), or the release would write our dblock of
/// before over the ballot's and an accepted value could be forgotten (two exclusive
/// holders; found by lockd-core's whole-daemon simulator).
pub fn convert(
    space: &Space,
    held: &Held,
    disks: &[wire::DiskLocation],
    to_shared: bool,
    cmd_flags: u32,
) -> Result<Held, (LeaseCmdError, Option<Box<Held>>)> {
    let mut token = held
        .token
        .clone()
        .ok_or((LeaseCmdError::NotHeld("the lease has no token"), None))?;
    let disk = open_lease(held, disks, Need::Write).map_err(|e| (e, None))?;
    let to = if to_shared {
        Mode::Shared
    } else {
        Mode::Exclusive
    };
    let nowait = cmd_flags & SANLK_ACQUIRE_OWNER_NOWAIT != 0;
    let c = crate::clock::lease_clock_unstopped();
    let out = with_host(space, |host| {
        block_on(paxos::convert(&disk, &c, host, &mut token, to, nowait))
    })
    .map_err(|e| (e.into(), None))?;
    let held = Held {
        token: Some(token),
        opened_by: held.opened_by.clone(),
    };
    match out {
        Ok(()) => Ok(held),
        Err(e) => Err((LeaseCmdError::paxos(e), Some(Box::new(held)))),
    }
}

/// Reads a held resource's request record: `Some(force_mode)` when another host asks for a
/// newer lver with a non-zero force mode.
pub fn examine(lr: &HeldRes) -> Option<u32> {
    let token = lr.held.token.as_ref()?;
    let disk = match open_held(lr, Need::Read) {
        Ok(disk) => disk,
        Err(e) => {
            warn!(error = %e, "examine: cannot open the lease's disk");
            return None;
        }
    };
    match block_on(paxos::examine(&disk, token)) {
        Ok(m) => m,
        Err(e) => {
            warn!(error = %e, "examine failed");
            None
        }
    }
}

/// REQUEST: writes the request record and returns the owner to notify (if any).
pub fn request(
    space: Option<&Space>,
    r: &wire::Resource,
    force_mode: u32,
    next_lver: bool,
) -> Result<Option<u64>, LeaseCmdError> {
    if r.disks.len() != 1 {
        return Err(LeaseCmdError::Unsupported("a lease on several disks"));
    }
    let geometry = match space.and_then(Space::geometry) {
        Some(g) => g,
        None => disk_format::Geometry::default_for(disk_format::SectorSize::B512),
    };
    let disk = open(&r.disks[0].path.to_text(), Need::Write)?;
    let res = ResourceParams {
        space_name: r.head.lockspace_name,
        resource_name: r.head.name,
        disk_offset: r.disks[0].offset,
        geometry,
        io_timeout: space.map_or(10, |s| s.io_timeout as u16),
        num_hosts_hint: 0,
    };
    let lver = if next_lver {
        paxos::RequestLver::Next
    } else {
        paxos::RequestLver::Exact(r.head.lver)
    };
    block_on(paxos::request(&disk, &res, lver, force_mode))
        .map(|out| out.owner_id)
        .map_err(LeaseCmdError::paxos)
}

/// What carrying out the core's effects for one input came to.
#[derive(Debug, Default)]
pub(crate) struct CoreRun {
    /// The core's answers, to the client whose command the input ran.
    pub replies: Vec<(u32, CoreReply)>,
    /// Disk releases run (a RELEASE of orphans answers this count, as sanlock).
    pub disk_releases: u32,
    /// The last disk operation's failure, with its reason (the core has only its code).
    pub disk_error: Option<LeaseCmdError>,
}

impl CoreRun {
    /// The core's one answer to client `target`'s command, as the handler's result: 0, or
    /// the failure — the disk operation's own when the answer is its code, sanlock's -1
    /// for a RELEASE naming a lease the client does not hold, else the tables' refusal.
    pub(crate) fn answer(self, target: u32) -> Result<CoreReply, LeaseCmdError> {
        let mut replies = self.replies.into_iter();
        let (Some((ci, reply)), None) = (replies.next(), replies.next()) else {
            panic!("the core gave client {target}'s command not exactly one answer");
        };
        assert_eq!(ci, target, "the core answered another client's command");
        match (reply.rv, self.disk_error) {
            (0, _) => Ok(reply),
            (rv, Some(e)) if e.code() == rv => Err(e),
            (lockd_core::errno::SANLK_ERROR, _) if reply.kind == ReqKind::Release => {
                Err(LeaseCmdError::SomeNotHeld)
            }
            (rv, _) => Err(LeaseCmdError::Tables(rv)),
        }
    }
}

/// Runs `input` through the core, then carries out its effects with no lock held
/// ([`run_core_effects`]). `orphaned`: persistent leases the input may leave as orphans
/// (a dead holder's), logged when it did.
pub(crate) fn step_and_run(
    d: &Arc<Daemon>,
    input: Input<UnixStream, Held>,
    orphaned: &[Key],
) -> CoreRun {
    let fx = {
        let mut core = lock(&d.core);
        let fx = core.step(crate::clock::now_s(), input);
        for key in orphaned {
            if core.resources.get(key).is_some_and(|r| r.orphan) {
                info!(ls = %key.0, res = %key.1, "holder exited: persistent lease kept as an orphan");
            }
        }
        fx
    };
    run_core_effects(d, fx)
}

/// Carries out the core's effects for a client's end, a release or a lease command run
/// through the core, in order and with no lock held: each disk operation (a release or
/// a convert, with lease-core and the rights of the client that acquired the lease),
/// whose end goes back to the core as `DiskDone` — the effects of that step join the
/// queue — and the replies, kept for the caller. After a release, the acquires of the
/// same lease waiting on `released` are woken. These inputs give nothing else (the
/// acquires that would give effects for other clients do not run through the core
/// yet): any other effect is a broken invariant, which stops the daemon.
///
/// Why this cannot give one exclusive lease to two holders: the core marks a lease
/// `busy` (and `releasing`) before it asks for its disk release or convert, and frees or
/// changes it only at that operation's `DiskDone`, which is sent here only after the
/// disk I/O has ended. Until then a local acquire of the lease gets -EAGAIN and waits
/// (`cmd::start_acquire_after_release`), so no acquire of ours runs its ballot while our
/// release is still writing; another host's acquire sees our leader until the release
/// is on disk, as before. A convert that failed half-way hands back the state it left
/// (`failed_state`), so the release that follows writes our newest dblock, not an older
/// one over the ballot's.
fn run_core_effects(d: &Arc<Daemon>, fx: Vec<Effect<Held>>) -> CoreRun {
    let mut run = CoreRun::default();
    let mut queue: VecDeque<Effect<Held>> = fx.into();
    while let Some(effect) = queue.pop_front() {
        let (op, what) = match effect {
            Effect::Reply { ci, reply } => {
                run.replies.push((ci, reply));
                continue;
            }
            Effect::Disk { op, what, .. } => (op, what),
            other => panic!("the core gave an effect the shell does not run here: {other:?}"),
        };
        let (done, failed_state, released) = match what {
            DiskOp::Release {
                key,
                held,
                disks,
                rename,
            } => {
                let span = info_span!("resource", ls = %key.0, res = %key.1);
                let _g = span.enter();
                let space = d.find_space(&key.0);
                let result = release(space.as_deref(), &held, &disks, rename.as_ref());
                run.disk_releases += 1;
                let done = match result {
                    Ok(()) => {
                        info!("released");
                        Ok(Held::default())
                    }
                    Err(e) => {
                        warn!(error = %e, rv = e.code(), "release on disk failed");
                        let rv = e.code();
                        run.disk_error = Some(e);
                        Err(rv)
                    }
                };
                (done, None, true)
            }
            DiskOp::Convert {
                key,
                held,
                disks,
                to_shared,
                cmd_flags,
            } => {
                let span = info_span!("resource", ls = %key.0, res = %key.1);
                let _g = span.enter();
                let result = match d.find_space(&key.0) {
                    Some(space) => convert(&space, &held, &disks, to_shared, cmd_flags),
                    None => Err((SpaceError::NotJoined.into(), None)),
                };
                match result {
                    Ok(held) => {
                        info!(to_shared, "converted");
                        (Ok(held), None, false)
                    }
                    Err((e, state)) => {
                        warn!(error = %e, rv = e.code(), to_shared, "convert on disk failed");
                        let rv = e.code();
                        run.disk_error = Some(e);
                        (Err(rv), state.map(|s| *s), false)
                    }
                }
            }
            other => {
                panic!("the core asked for a disk operation the shell does not run here: {other:?}")
            }
        };
        let more = lock(&d.core).step(
            crate::clock::now_s(),
            Input::DiskDone {
                op,
                result: done,
                failed_state,
            },
        );
        if released {
            // Acquires of this lease may be waiting for the release to end.
            d.released.notify_all();
        }
        queue.extend(more);
    }
    run
}

/// Releases orphans of lockspace `ls`: the one named `name`, or all when `name` is empty.
/// Returns how many were released (0 when none matched, as sanlock), or the last
/// release error.
pub fn release_orphans(d: &Arc<Daemon>, ls: &Name, name: &Name) -> Result<u32, LeaseCmdError> {
    let input = Input::ReleaseOrphans {
        ls: *ls,
        name: *name,
    };
    let run = step_and_run(d, input, &[]);
    assert!(run.replies.is_empty(), "an orphan release answers nobody");
    match run.disk_error {
        Some(e) => Err(e),
        None => Ok(run.disk_releases),
    }
}
