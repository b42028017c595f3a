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
use lease_core::disks::{left_out, majority, LeaseDisks, LeaseOn, PathState, MAX_DISKS};
use lease_core::paxos::{self, AcquireOptions, HostContext, Mode, ResourceParams};
use tracing::{info, info_span, warn};

use crate::access::{self, Caller, Need};
use crate::cmd_error::LeaseCmdError;
use crate::confirm::SpaceObserver;
use crate::mailbox::MailboxId;
use crate::space::{Space, SpaceError};
use crate::state::Daemon;
use crate::sync::lock;
use crate::tables::{Held, HeldRes, Key};
use lockd_core::{CoreReply, CoreRequest, DiskOp, Effect, Input, ReqKind, ResSpec};
use lockd_diskio::{drive, health, BlockingDisk, EngineKind, ParallelDisk};

/// Opens a resource disk with `caller`'s rights (`crate::access`; None: the daemon's).
fn open(caller: Option<&Caller>, path: &str, need: Need) -> Result<ParallelDisk, LeaseCmdError> {
    Ok(ParallelDisk::new(access::open_disk(
        caller,
        Path::new(path),
        need,
        EngineKind::SharedRing,
    )?))
}

/// Opens a held lease's disks with the rights of the client that acquired it.
fn open_held(lr: &HeldRes, need: Need) -> Result<Vec<ParallelDisk>, LeaseCmdError> {
    open_lease(&lr.held, &lr.disks, need)
}

/// Opens the disks of a lease held as `held` on `disks`, with the rights of the client
/// that acquired it.
fn open_lease(
    held: &Held,
    disks: &[wire::DiskLocation],
    need: Need,
) -> Result<Vec<ParallelDisk>, LeaseCmdError> {
    open_each(disks, |path| {
        Ok(ParallelDisk::new(access::open_disk(
            held.opened_by.as_ref(),
            Path::new(path),
            need,
            EngineKind::SharedRing,
        )?))
    })
}

/// Opens every disk of a lease (1 to 4, sanlock's `SANLK_MAX_DISKS`) with `open_one`,
/// but for the disks [`skipped`] leaves out, which are [`ParallelDisk::absent`], as is a
/// disk of several that cannot be opened while a majority can.
fn open_each(
    disks: &[wire::DiskLocation],
    open_one: impl Fn(&str) -> Result<ParallelDisk, LeaseCmdError>,
) -> Result<Vec<ParallelDisk>, LeaseCmdError> {
    if disks.is_empty() || disks.len() > MAX_DISKS {
        return Err(LeaseCmdError::Invalid("a lease has 1 to 4 disks"));
    }
    // The same area named twice would count one disk twice towards a majority.
    for (i, d) in disks.iter().enumerate() {
        if disks[..i]
            .iter()
            .any(|e| e.offset == d.offset && e.path.to_text() == d.path.to_text())
        {
            return Err(LeaseCmdError::Invalid("a lease names one disk area twice"));
        }
    }
    let paths: Vec<String> = disks.iter().map(|d| d.path.to_text()).collect();
    let skip = skipped(&paths);
    let mut open_error = None;
    let mut opened = paths
        .iter()
        .zip(skip)
        .map(|(path, skip)| {
            if skip {
                info!(disk = %path, "lease disk skipped: its last i/o timed out");
                return Ok(ParallelDisk::absent(Path::new(path)));
            }
            match open_one(path) {
                Ok(disk) => Ok(disk),
                // A client that may not open one of its lease's disks is refused outright
                // rather than served over the others: it gets no more right than its own
                // open(2) gives it (client_privileges.rs, "acquire own and victim").
                Err(e) if matches!(-e.code(), libc::EACCES | libc::EPERM) => Err(e),
                Err(e) => {
                    warn!(disk = %path, error = %e, "lease disk cannot be opened");
                    open_error = Some(e);
                    Ok(ParallelDisk::absent(Path::new(path)))
                }
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    // As sanlock's open_disks: a minority of disks that cannot be opened fail like any
    // other disk failure; without a majority opened, the last open error.
    let count = opened.iter().filter(|d| !d.is_absent()).count();
    if let Some(e) = open_error {
        if !majority(paths.len(), count) {
            return Err(e);
        }
    }
    // An open whose block-size probe timed out (a hung FUSE or NFS path) made its path
    // sick just now: leave it out before any I/O is queued on it.
    for (i, skip) in skipped(&paths).into_iter().enumerate() {
        if skip && !opened[i].is_absent() {
            info!(disk = %paths[i], "lease disk skipped: it hung while being opened");
            opened[i] = ParallelDisk::absent(Path::new(&paths[i]));
        }
    }
    Ok(opened)
}

/// Which disks of a lease this operation leaves out: lease-core's [`left_out`] over
/// what this process saw of each path (`lockd_diskio::health`).
fn skipped(paths: &[String]) -> Vec<bool> {
    let states: Vec<PathState> = paths
        .iter()
        .map(|p| match health::lookup(Path::new(p)) {
            Some(h) => PathState {
                overdue: h.overdue() > 0,
                cooling: h.sick(),
            },
            None => PathState::default(),
        })
        .collect();
    left_out(&states)
}

/// The opened disks of a lease, each with the area's offset on it, for one operation
/// (lease-core's majority rule over several; a single disk as itself); a disk left out
/// is dropped from the start.
fn lease_on<'a>(
    opened: &'a [ParallelDisk],
    disks: &[wire::DiskLocation],
) -> LeaseOn<'a, ParallelDisk> {
    let list = opened
        .iter()
        .zip(disks)
        .map(|(o, d)| (o, d.offset))
        .collect();
    let on = LeaseOn::new(list).expect("open_each opened 1 to 4 disks");
    for (i, disk) in opened.iter().enumerate() {
        if disk.is_absent() {
            on.drop_disk(i);
        }
    }
    on
}

/// Runs `f` with our lockspace context (disk, params, generation, host monitor);
/// [`SpaceError::NotJoined`] before the lockspace's join ended.
pub(crate) fn with_host<T>(
    space: &Space,
    f: impl FnOnce(&HostContext<'_, BlockingDisk, SpaceObserver<'_>>) -> T,
) -> Result<T, SpaceError> {
    let joined = space.joined.get().ok_or(SpaceError::NotJoined)?;
    let observer = SpaceObserver {
        monitor: space,
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

/// Acquires resource `r` (a client's `sanlk_resource`) for this host in joined lockspace
/// `space` on the disk alone, with no table: [`acquire_lease`] with the resource's
/// `SANLK_RES_NUM_HOSTS` count, with the daemon's own rights. (The handler tests drive
/// lease-core through it.)
pub fn acquire(
    d: &Daemon,
    space: &Space,
    r: &wire::Resource,
    shared: bool,
    want_lver: Option<u64>,
    cmd_flags: u32,
) -> Result<Held, LeaseCmdError> {
    let spec = res_spec(r);
    let key = spec.key();
    acquire_lease(
        d,
        space,
        &key,
        &r.disks,
        shared,
        want_lver,
        spec.new_num_hosts,
        cmd_flags,
        None,
    )
}

/// One `sanlk_resource` of an ACQUIRE as the core takes it: its flags (shared,
/// persistent, a required lease version, a host count for the leader) made typed.
pub(crate) fn res_spec(r: &wire::Resource) -> ResSpec {
    let flags = r.head.flags;
    ResSpec {
        ls: r.head.lockspace_name,
        name: r.head.name,
        shared: flags & SANLK_RES_SHARED != 0,
        persistent: flags & SANLK_RES_PERSISTENT != 0,
        disks: r.disks.clone(),
        lver: (flags & SANLK_RES_LVER != 0).then_some(r.head.lver),
        new_num_hosts: (flags & SANLK_RES_NUM_HOSTS != 0).then_some(u64::from(r.head.data32)),
    }
}

/// Acquires lease `key` on `disks` for this host in joined lockspace `space`, with the
/// rights of the command's sender (`crate::access`): exclusive or `shared`, at lease
/// version `want_lver` if one is required, writing `new_num_hosts` into the leader if
/// asked (`SANLK_RES_NUM_HOSTS`), with the request's `cmd_flags`.
#[allow(clippy::too_many_arguments)]
pub fn acquire_lease(
    d: &Daemon,
    space: &Space,
    key: &Key,
    disks: &[wire::DiskLocation],
    shared: bool,
    want_lver: Option<u64>,
    new_num_hosts: Option<u64>,
    cmd_flags: u32,
    opener: Option<&Caller>,
) -> Result<Held, LeaseCmdError> {
    // From the join, read with no lock: the acquire path takes the core lock only for
    // its steps.
    let geometry = space
        .joined
        .get()
        .map(|j| j.params.geometry)
        .ok_or(SpaceError::NotJoined)?;
    let opened = open_each(disks, |path| open(opener, path, Need::Write))?;
    let disk = lease_on(&opened, disks);
    let res = ResourceParams {
        space_name: key.0,
        resource_name: key.1,
        disk_offset: disks[0].offset,
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
        new_num_hosts,
        sh_retries: d.cfg.sh_retries,
        #[cfg(feature = "planted-bugs")]
        planted_bug: crate::planted::active(crate::planted::Bug::NoHostDeadWait)
            .then_some(lease_core::paxos::PlantedBug::NoHostDeadWait),
        ..AcquireOptions::default()
    };
    let c = crate::clock::lease_clock_unstopped();
    let out = with_host(space, |host| {
        drive(paxos::acquire(&disk, &c, host, &res, &opts))
    })?;
    match out {
        Ok(token) => Ok(Held {
            token: Some(token),
            opened_by: opener.filter(|c| !c.is_root()).cloned(),
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
    let lvb_dropped;
    let token = if crate::planted::active(crate::planted::Bug::LvbNotWritten) && token.lvb_dirty {
        lvb_dropped = paxos::Token {
            lvb_dirty: false,
            ..token.clone()
        };
        &lvb_dropped
    } else {
        token
    };
    // With the acquiring client's rights, whoever releases (the client, root by pid,
    // the daemon when the client died).
    let opened = open_lease(held, disks, Need::Write)?;
    drive(paxos::release_renamed(
        &lease_on(&opened, disks),
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
    let opened = open_lease(held, disks, Need::Write).map_err(|e| (e, None))?;
    let disk = lease_on(&opened, disks);
    let to = if to_shared {
        Mode::Shared
    } else {
        Mode::Exclusive
    };
    let nowait = cmd_flags & SANLK_ACQUIRE_OWNER_NOWAIT != 0;
    let c = crate::clock::lease_clock_unstopped();
    let out = with_host(space, |host| {
        drive(paxos::convert(&disk, &c, host, &mut token, to, nowait))
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
    let opened = match open_held(lr, Need::Read) {
        Ok(disk) => disk,
        Err(e) => {
            warn!(error = %e, "examine: cannot open the lease's disk");
            return None;
        }
    };
    match drive(paxos::examine(&lease_on(&opened, &lr.disks), token)) {
        Ok(m) => m,
        Err(e) => {
            warn!(error = %e, "examine failed");
            None
        }
    }
}

/// REQUEST: writes the request record and returns the owner to notify (if any).
pub fn request(
    caller: &Caller,
    space: Option<&Space>,
    r: &wire::Resource,
    force_mode: u32,
    next_lver: bool,
) -> Result<Option<u64>, LeaseCmdError> {
    let geometry = match space.and_then(Space::geometry) {
        Some(g) => g,
        None => disk_format::Geometry::default_for(disk_format::SectorSize::B512),
    };
    let opened = open_each(&r.disks, |path| open(Some(caller), path, Need::Write))?;
    let disk = lease_on(&opened, &r.disks);
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
    drive(paxos::request(&disk, &res, lver, force_mode))
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

/// Runs `input` (not a client's command) through the core, then carries out its effects
/// with no lock held ([`run_core_effects`]); effects of a command running on another
/// worker go to its mailbox. `orphaned`: persistent leases the input may leave as orphans
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
    let mut run = CoreRun::default();
    run_core_effects(d, None, fx, &mut run);
    run
}

/// Runs lease command `req`, begun on client `target` (`Input::StartCommand`, or a
/// `--for-pid` slot made with its command active), through the core to its answer, on
/// this worker: the effects of the command's own steps, and those other threads' steps
/// gave it (a release it waited for ended; the monitor's tick answered it), which come
/// through its mailbox (`crate::mailbox`). Returns when the core has answered and the
/// mailbox is empty and closed; the core ended the command (`finish_command`, a client
/// that died meanwhile released).
pub(crate) fn run_command(d: &Arc<Daemon>, target: u32, req: CoreRequest) -> CoreRun {
    let mbox = MailboxId::Command(target);
    run_to_answer(d, mbox, Input::Command { target, req })
}

/// Runs request `req` of connection `ci` (a lockspace command the core decides:
/// REM_LOCKSPACE) through the core to its answer, on this worker, as [`run_command`]:
/// the answer may come from another thread's step (the lockspace's thread ended,
/// `Input::LockspaceEnded`), through the mailbox.
pub(crate) fn run_request(d: &Arc<Daemon>, ci: u32, req: CoreRequest) -> CoreRun {
    assert!(
        matches!(req, CoreRequest::RemLockspace { .. }),
        "only REM_LOCKSPACE runs as a connection's request: {req:?}"
    );
    run_to_answer(d, MailboxId::Lockspace(ci), Input::Request { ci, req })
}

/// Steps `input` with mailbox `mbox` open, carries out the effects, and takes what
/// other threads post to the mailbox until the core has answered; closes the mailbox
/// once it is empty.
fn run_to_answer(d: &Arc<Daemon>, mbox: MailboxId, input: Input<UnixStream, Held>) -> CoreRun {
    let waits_for = match &input {
        Input::Request {
            req: CoreRequest::RemLockspace { .. },
            ..
        } => "the lockspace's holders to go and its thread to end",
        // Only an ACQUIRE waits among the lease commands: for a release of one of its
        // leases here, which another worker runs, or for the tick that ends the wait.
        _ => "a release of a lease here to end",
    };
    d.mailboxes.open(mbox);
    let fx = lock(&d.core).step(crate::clock::now_s(), input);
    let mut run = CoreRun::default();
    run_core_effects(d, Some(mbox), fx, &mut run);
    if run.replies.is_empty() {
        info!(mailbox = ?mbox, "waiting for {waits_for}");
    }
    while run.replies.is_empty() {
        let fx = d.mailboxes.take(mbox);
        run_core_effects(d, Some(mbox), fx, &mut run);
    }
    while let Err(fx) = d.mailboxes.close(mbox) {
        run_core_effects(d, Some(mbox), fx, &mut run);
    }
    run
}

/// The mailbox an effect belongs to: a REM_LOCKSPACE reply's connection's lockspace
/// command; another reply's client's lease command, or a disk operation's
/// (`Effect::Disk::client`).
fn owner(effect: &Effect<Held>) -> Option<MailboxId> {
    match effect {
        Effect::Reply { ci, reply } if reply.kind == ReqKind::RemLockspace => {
            Some(MailboxId::Lockspace(*ci))
        }
        Effect::Reply { ci, .. } => Some(MailboxId::Command(*ci)),
        Effect::Disk { client, .. } => client.map(MailboxId::Command),
        _ => None,
    }
}

/// Sends one step's effects where they run: those of a command other than `me` (the
/// command this thread runs, if any) that is in progress go to its mailbox, in order;
/// the rest are returned, in order, to run here. A reply or a disk acquire for a
/// command with no mailbox open would reach no worker: a broken invariant, which stops
/// the daemon.
pub(crate) fn route(d: &Daemon, me: Option<MailboxId>, fx: Vec<Effect<Held>>) -> Vec<Effect<Held>> {
    let here = d.mailboxes.deliver(me, fx, owner);
    for effect in &here {
        let theirs = owner(effect).filter(|id| Some(*id) != me);
        if let (
            Some(id),
            Effect::Reply { .. }
            | Effect::Disk {
                what: DiskOp::Acquire { .. },
                ..
            },
        ) = (theirs, effect)
        {
            panic!(
                "the core gave an effect to {id:?}, but no worker runs that command: \
                 {effect:?}"
            );
        }
    }
    here
}

/// Carries out the core's effects in order, with no lock held, on the thread of client
/// `me`'s command (or of no command): each disk operation (an acquire with the rights of
/// the command's sender; a release or a convert with those of the client that acquired
/// the lease), whose end goes back to the core as `DiskDone` — the effects of that step
/// are routed ([`route`]) and join the queue — and the replies to `me`, kept in `run`.
/// Lease commands, a client's end, releases and orphan releases give nothing else: any
/// other effect is a broken invariant, which stops the daemon.
///
/// Why this cannot give one exclusive lease to two holders: the core marks a lease
/// `busy` before it asks for its disk acquire, release or convert, and records, frees or
/// changes it only at that operation's `DiskDone`, which is sent here only after the
/// disk I/O has ended. Until then a local acquire of the lease is refused (-EBUSY), or,
/// while it is released, waits in the core for that release's end, so no acquire of ours
/// runs its ballot while our release is still writing; another host's acquire sees our
/// leader until the release is on disk, as before. A convert that failed half-way hands
/// back the state it left (`failed_state`), so the release that follows writes our
/// newest dblock, not an older one over the ballot's.
fn run_core_effects(
    d: &Arc<Daemon>,
    me: Option<MailboxId>,
    fx: Vec<Effect<Held>>,
    run: &mut CoreRun,
) {
    let mut queue: VecDeque<Effect<Held>> = route(d, me, fx).into();
    while let Some(effect) = queue.pop_front() {
        let (op, what) = match effect {
            Effect::Reply { ci, reply } => {
                run.replies.push((ci, reply));
                continue;
            }
            Effect::Disk { op, what, .. } => (op, what),
            // A release's end can leave a lost lockspace with no lease.
            Effect::RetireLockspace { ls, id } => {
                d.retire_space(&ls, id);
                continue;
            }
            // A removal (REM_LOCKSPACE, a forced shutdown): the holders' watchers hear
            // of it before the next tick's kill orders.
            Effect::LossNotice {
                ls,
                kind,
                to,
                lease,
                ..
            } => {
                crate::watch::notify_loss_to(d, &ls, kind, &to, lease);
                continue;
            }
            Effect::StopLockspace { ls, id } => {
                d.stop_space(&ls, id);
                continue;
            }
            other => panic!("the core gave an effect the shell does not run here: {other:?}"),
        };
        let (done, failed_state) = run_disk_op(d, what, run);
        let more = lock(&d.core).step(
            crate::clock::now_s(),
            Input::DiskDone {
                op,
                result: done,
                failed_state,
            },
        );
        queue.extend(route(d, me, more));
    }
}

/// Runs one disk operation the core asked for, with no lock held; its result for
/// `DiskDone` (the held lease's state, or sanlock's code) and, for a convert that failed
/// half-way, the state it left. Logged in the lease's span; a failure's reason is kept
/// in `run`.
fn run_disk_op(
    d: &Arc<Daemon>,
    what: DiskOp<Held>,
    run: &mut CoreRun,
) -> (Result<Held, i32>, Option<Held>) {
    let key = match &what {
        DiskOp::Acquire { key, .. } | DiskOp::Release { key, .. } | DiskOp::Convert { key, .. } => {
            *key
        }
    };
    let span = info_span!("resource", ls = %key.0, res = %key.1);
    let _g = span.enter();
    let not_joined = || LeaseCmdError::from(SpaceError::NotJoined);
    let (verb, done, result) = match what {
        DiskOp::Acquire {
            shared,
            disks,
            want_lver,
            new_num_hosts,
            cmd_flags,
            opener,
            ..
        } => {
            let space = d.find_space(&key.0).ok_or_else(not_joined);
            let opener = opener.map(Caller::from_creds);
            let result = space.and_then(|space| {
                let (lver, hosts) = (want_lver, new_num_hosts);
                let by = opener.as_ref();
                acquire_lease(d, &space, &key, &disks, shared, lver, hosts, cmd_flags, by)
            });
            ("acquire", "acquired", result.map_err(|e| (e, None)))
        }
        DiskOp::Release {
            held,
            disks,
            rename,
            ..
        } => {
            run.disk_releases += 1;
            let space = d.find_space(&key.0);
            let result = release(space.as_deref(), &held, &disks, rename.as_ref());
            (
                "release",
                "released",
                result.map(|()| Held::default()).map_err(|e| (e, None)),
            )
        }
        DiskOp::Convert {
            held,
            disks,
            to_shared,
            cmd_flags,
            ..
        } => {
            let result = match d.find_space(&key.0) {
                Some(space) => convert(&space, &held, &disks, to_shared, cmd_flags),
                None => Err((not_joined(), None)),
            };
            (
                "convert",
                "converted",
                result.map_err(|(e, state)| (e, state.map(|s| *s))),
            )
        }
    };
    match result {
        Ok(held) => {
            info!(lver = held.lver(), "{done}");
            (Ok(held), None)
        }
        Err((e, state)) => {
            let rv = e.code();
            if verb == "acquire" {
                // A lease held elsewhere is no fault of ours: info, as the refusal.
                info!(error = %e, rv, "{verb} on disk failed");
            } else {
                warn!(error = %e, rv, "{verb} on disk failed");
            }
            run.disk_error = Some(e);
            (Err(rv), state)
        }
    }
}

/// The monitor's part of its tick's effects that is not its own: the replies and disk
/// operations of commands in progress go to their workers' mailboxes ([`route`]), and
/// the disk operations of no command in progress (a dead holder's release) run on a
/// thread of their own, so that no disk I/O holds up the monitor. Returns the rest
/// (notices, logs, kill orders, the status line), in order, for the monitor.
pub(crate) fn hand_off_from_monitor(d: &Arc<Daemon>, fx: Vec<Effect<Held>>) -> Vec<Effect<Held>> {
    let (disk, rest): (Vec<_>, Vec<_>) = route(d, None, fx)
        .into_iter()
        .partition(|e| matches!(e, Effect::Disk { .. }));
    if !disk.is_empty() {
        let d2 = d.clone();
        let spawned = crate::threads::spawn("lockd-release", move || {
            run_core_effects(&d2, None, disk, &mut CoreRun::default());
        });
        if let Err(e) = spawned {
            // Without the thread the leases would stay busy for good: stop instead.
            panic!("cannot start a thread for the tick's disk releases: {e}");
        }
    }
    rest
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

#[cfg(test)]
mod route_tests {
    //! Where one step's effects run: [`route`].
    use super::*;

    fn reply(ci: u32) -> Effect<Held> {
        Effect::Reply {
            ci,
            reply: CoreReply {
                kind: ReqKind::Acquire,
                rv: 0,
                leases: Vec::new(),
                why: None,
            },
        }
    }

    fn disk(op: u64, client: Option<u32>, what: DiskOp<Held>) -> Effect<Held> {
        Effect::Disk {
            op,
            ls: key().0,
            client,
            what,
        }
    }

    fn key() -> Key {
        (
            Name::new("ls").expect("name"),
            Name::new("r").expect("name"),
        )
    }

    fn release(op: u64, client: Option<u32>) -> Effect<Held> {
        let what = DiskOp::Release {
            key: key(),
            held: Held::default(),
            disks: Vec::new(),
            rename: None,
        };
        disk(op, client, what)
    }

    fn acquire(op: u64, ci: u32) -> Effect<Held> {
        disk(
            op,
            Some(ci),
            DiskOp::Acquire {
                key: key(),
                shared: false,
                disks: Vec::new(),
                want_lver: None,
                new_num_hosts: None,
                cmd_flags: 0,
                opener: None,
            },
        )
    }

    fn ops(fx: &[Effect<Held>]) -> Vec<u64> {
        fx.iter()
            .filter_map(|e| match e {
                Effect::Disk { op, .. } => Some(*op),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn another_commands_effects_go_to_its_mailbox_in_order_the_rest_run_here() {
        let d = Daemon::for_tests("route-unit");
        d.mailboxes.open(MailboxId::Command(2));
        let fx = vec![
            reply(1),
            acquire(10, 2),
            release(11, Some(3)),
            release(12, None),
            release(13, Some(2)),
            reply(2),
        ];
        // On client 1's worker: its reply, and the releases of a client with no command
        // in progress and of an orphan, run here, in order.
        let here = route(&d, Some(MailboxId::Command(1)), fx);
        assert!(matches!(here.first(), Some(Effect::Reply { ci: 1, .. })));
        assert_eq!(ops(&here), vec![11, 12]);
        assert_eq!(here.len(), 3);
        // Client 2's acquire, release and answer wait in its mailbox, in the core's order.
        let theirs = d.mailboxes.take(MailboxId::Command(2));
        assert_eq!(ops(&theirs), vec![10, 13]);
        assert!(matches!(theirs.last(), Some(Effect::Reply { ci: 2, .. })));
        d.mailboxes.close(MailboxId::Command(2)).expect("empty");
    }

    #[test]
    #[should_panic(expected = "no worker runs that command")]
    fn an_answer_for_a_command_no_worker_runs_stops_the_daemon() {
        let d = Daemon::for_tests("route-unit-orphan-reply");
        route(&d, None, vec![reply(5)]);
    }

    #[test]
    #[should_panic(expected = "no worker runs that command")]
    fn a_disk_acquire_for_a_command_no_worker_runs_stops_the_daemon() {
        let d = Daemon::for_tests("route-unit-orphan-acquire");
        route(&d, Some(MailboxId::Command(1)), vec![acquire(20, 4)]);
    }
}
