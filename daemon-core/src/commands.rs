//! The request path of [`Core::step`]: a client's requests (register, add and remove a
//! lockspace, acquire, release, convert, inquire), the disk operations they need as
//! [`Effect::Disk`], their completions ([`crate::Input::DiskDone`]), and a client's end
//! (connection closed, pid exited). Every change of the client and resource tables goes
//! through the [`Tables`](crate::Tables) transitions (`start_command`, `start_acquire`,
//! `finish_acquire`, `record_tokens`, `start_release`, `finish_release`, `start_convert`,
//! `finish_convert`, `client_ended`, `finish_command`); this module only sequences them.
//!
//! Invariants:
//! - one command per client at a time (`Tables::start_command`'s `cmd_active`), kept in
//!   `Core::cmds` until its reply;
//! - an ACQUIRE of several leases takes them in order and is all or none: when one fails,
//!   the ones taken are released again before the error is answered;
//! - a RELEASE is answered only when every disk release it asked for has ended;
//! - a disk acquire ending after its lockspace was lost (or is being removed) is released
//!   again and answered -ENOSPC;
//! - an acquire that meets a release of the same lease in progress (-EAGAIN) waits for it
//!   and goes on when it ends;
//! - a client that dies during a command keeps its slot (`pid_dead`) until the command
//!   ends; then its leases are released as a dead holder's.

use client_lib::ext::WatchKind;
use client_lib::proto::{SM_CMD_ACQUIRE, SM_CMD_CONVERT, SM_CMD_INQUIRE, SM_CMD_RELEASE};
use disk_format::Name;
use lease_core::monitor::HostMonitor;

use crate::clients::{ClientToken, LeaseHold};
use crate::errno::*;
use crate::events::HostEvent;
use crate::io::{
    CoreReply, CoreRequest, DiskOp, Effect, HeldLease, JoinedLease, OpId, ReqKind, ResSpec,
};
use crate::pending::{AcquireCmd, AdminCmd, Cmd, OpFor, PendingRequest};
use crate::refusal::Refusal;
use crate::space_state::{Phase, RenewalRec, SpaceSt};
use crate::step::{release_wait_s, Core, CorePlantedBug, CoreSpace};
use crate::tables::Key;
use crate::tables::{AcquireStart, CommandTarget, ReleaseStart, TableRefused};

fn reply<H>(fx: &mut Vec<Effect<H>>, ci: u32, kind: ReqKind, rv: i32, leases: Vec<HeldLease>) {
    fx.push(Effect::Reply {
        ci,
        reply: CoreReply {
            kind,
            rv,
            leases,
            why: None,
        },
    });
}

/// A refusal: its code on the wire, with its reason for the shell's log.
fn refuse<H>(fx: &mut Vec<Effect<H>>, ci: u32, kind: ReqKind, refusal: Refusal) {
    fx.push(Effect::Reply {
        ci,
        reply: CoreReply {
            kind,
            rv: refusal.errno(),
            leases: Vec::new(),
            why: Some(refusal.why()),
        },
    });
}

fn held_lease(t: &ClientToken) -> HeldLease {
    HeldLease::from(t)
}

impl<S, H: LeaseHold> Core<S, H> {
    fn new_op(&mut self) -> OpId {
        let op = self.next_op;
        self.next_op += 1;
        op
    }

    /// Whether a reply to `ci` can still be written (its slot is there and alive).
    fn live(&self, ci: u32) -> bool {
        self.tables
            .clients
            .slots
            .get(&ci)
            .is_some_and(|c| !c.pid_dead)
    }

    fn answer(
        &self,
        fx: &mut Vec<Effect<H>>,
        ci: u32,
        kind: ReqKind,
        rv: i32,
        leases: Vec<HeldLease>,
    ) {
        if self.live(ci) || self.begun.contains(&ci) {
            reply(fx, ci, kind, rv, leases);
        }
    }

    pub(crate) fn request(
        &mut self,
        now_s: u64,
        ci: u32,
        req: CoreRequest,
        fx: &mut Vec<Effect<H>>,
    ) {
        let kind = req.kind();
        // Answered whether or not the connection still has a slot (a WATCH from a slot
        // gone meanwhile is refused: no process to watch): each gets exactly one reply.
        match &req {
            CoreRequest::Watch { pid } => {
                match self.watches.register(&self.tables.clients, ci, *pid) {
                    Ok(_) => reply(fx, ci, kind, 0, Vec::new()),
                    Err(refused) => refuse(fx, ci, kind, Refusal::Watch(refused)),
                }
                return;
            }
            CoreRequest::SetEvent { ls, he, flags } => {
                self.set_event(now_s, ci, ls, *he, *flags, fx);
                return;
            }
            CoreRequest::RequestLease {
                ls,
                name,
                lver,
                next_lver,
                force_mode,
            } => {
                self.request_lease(ci, (*ls, *name), *lver, *next_lver, *force_mode, fx);
                return;
            }
            _ => {}
        }
        let Some(uid) = self.tables.clients.slots.get(&ci).map(|c| c.uid) else {
            return;
        };
        let cmd = match &req {
            // Answered above.
            CoreRequest::Watch { .. }
            | CoreRequest::SetEvent { .. }
            | CoreRequest::RequestLease { .. } => return,
            CoreRequest::Register => {
                // sanlock's REGISTER has no reply: libsanlock sends the header and
                // returns the connection (a reply would be read as the next command's).
                let Some(c) = self.tables.clients.slots.get(&ci) else {
                    return;
                };
                let (pid, uid) = (c.pid, c.uid);
                self.tables.register_client(ci, pid, uid);
                return;
            }
            CoreRequest::AddLockspace {
                ls,
                host_id,
                io_timeout_s,
            } => {
                self.add_lockspace(ci, ls, *host_id, *io_timeout_s, fx);
                return;
            }
            CoreRequest::RemLockspace {
                ls,
                id,
                unused_only,
                wait,
            } => {
                self.rem_lockspace(ci, ls, *id, *unused_only, *wait, fx);
                return;
            }
            CoreRequest::ReleaseOrphans { ls, name } => {
                self.release_orphans_request(ci, ls, name, fx);
                return;
            }
            CoreRequest::Acquire { .. } => SM_CMD_ACQUIRE,
            CoreRequest::Release { .. } => SM_CMD_RELEASE,
            CoreRequest::Convert { .. } => SM_CMD_CONVERT,
            CoreRequest::Inquire => SM_CMD_INQUIRE,
        };
        let target = CommandTarget {
            conn_ci: ci,
            conn_uid: uid,
            cmd,
            cmd_flags: 0,
            data2: u32::MAX,
        };
        let ci = match self.tables.start_command(target) {
            Ok(ci) => ci,
            Err(r) => {
                refuse(fx, ci, kind, Refusal::Table(r));
                return;
            }
        };
        self.command(now_s, ci, req, fx);
    }

    /// SET_EVENT in lockspace `ls` ([`CoreRequest::SetEvent`]), answered at once.
    fn set_event(
        &mut self,
        now_s: u64,
        ci: u32,
        ls: &Name,
        he: HostEvent,
        flags: u32,
        fx: &mut Vec<Effect<H>>,
    ) {
        let kind = ReqKind::SetEvent;
        let Some(s) = self.space_mut(ls) else {
            refuse(fx, ci, kind, Refusal::NoSuchLockspace);
            return;
        };
        let period_s = lease_core::timeouts::set_bitmap_seconds(s.io_timeout_s);
        let max_hosts =
            s.st.geometry
                .map_or(crate::events::MAX_EVENT_HOST_ID, |g| g.max_hosts());
        match s
            .st
            .outgoing
            .set_event(now_s, period_s, max_hosts, he, flags)
        {
            Ok(()) => reply(fx, ci, kind, 0, Vec::new()),
            Err(refused) => refuse(fx, ci, kind, Refusal::Event(refused)),
        }
    }

    /// REQUEST of lease `key` ([`CoreRequest::RequestLease`]): refused unless its
    /// lockspace is joined and not lost, else the shell writes the request record.
    fn request_lease(
        &mut self,
        ci: u32,
        (ls, name): Key,
        lver: u64,
        next_lver: bool,
        force_mode: u32,
        fx: &mut Vec<Effect<H>>,
    ) {
        let joined = self
            .space(&ls)
            .is_some_and(|s| s.st.phase == Phase::Joined && !s.st.space_dead);
        if !joined {
            refuse(fx, ci, ReqKind::RequestLease, Refusal::NotJoined);
            return;
        }
        let op = self.next_op;
        self.next_op += 1;
        self.requests.insert(
            op,
            PendingRequest {
                ci,
                ls,
                asks: lver != 0 || force_mode != 0 || next_lver,
            },
        );
        fx.push(Effect::WriteRequest {
            op,
            ci,
            ls,
            name,
            lver,
            next_lver,
            force_mode,
        });
    }

    /// RELEASE of orphans ([`CoreRequest::ReleaseOrphans`]): answered at once when none
    /// needs a disk release, else when the last of those ends.
    fn release_orphans_request(
        &mut self,
        ci: u32,
        ls: &Name,
        name: &Name,
        fx: &mut Vec<Effect<H>>,
    ) {
        let kind = ReqKind::ReleaseOrphans;
        let ops = self.release_orphans(ls, name, fx);
        if ops.is_empty() {
            reply(fx, ci, kind, 0, Vec::new());
        } else {
            self.admin.push(AdminCmd {
                ci,
                ls: *ls,
                kind,
                ops,
            });
        }
    }

    /// The core's own ADD_LOCKSPACE ([`CoreRequest::AddLockspace`]): -EEXIST when a
    /// lockspace of that name is here, else listed and joined by the shell
    /// ([`Effect::JoinLockspace`]), answered when the join ends.
    fn add_lockspace(
        &mut self,
        ci: u32,
        ls: &Name,
        host_id: u64,
        io_timeout_s: u64,
        fx: &mut Vec<Effect<H>>,
    ) {
        if self.space(ls).is_some() {
            reply(fx, ci, ReqKind::AddLockspace, -EEXIST, Vec::new());
            return;
        }
        let id = self.next_space_id;
        self.next_space_id += 1;
        self.spaces.push(CoreSpace {
            id,
            name: *ls,
            st: SpaceSt::default(),
            io_timeout_s,
            listed_by_shell: false,
            place: None,
            monitor: HostMonitor::new(host_id, self.watchdog_fire_s),
            fence: None,
            last_examine: std::collections::BTreeMap::new(),
        });
        self.admin.push(AdminCmd {
            ci,
            ls: *ls,
            kind: ReqKind::AddLockspace,
            ops: Vec::new(),
        });
        fx.push(Effect::JoinLockspace {
            ls: *ls,
            io_timeout_s,
        });
    }

    /// [`crate::Input::Command`]: a lease command the shell began on client `target`
    /// itself ([`Tables::start_command`](crate::Tables::start_command), with the header's
    /// target rules, before it read the payload, as sanlock does).
    pub(crate) fn begun_command(
        &mut self,
        now_s: u64,
        target: u32,
        req: CoreRequest,
        fx: &mut Vec<Effect<H>>,
    ) {
        let active = self
            .tables
            .clients
            .slots
            .get(&target)
            .is_some_and(|c| c.cmd_active != 0);
        assert!(
            active && !self.cmds.contains_key(&target) && !self.begun.contains(&target),
            "client {target}: a command run through the core must be begun by the shell \
             (start_command) and be its only one"
        );
        self.begun.insert(target);
        self.command(now_s, target, req, fx);
    }

    /// Runs lease command `req` of client `ci`, whose command is active.
    fn command(&mut self, now_s: u64, ci: u32, req: CoreRequest, fx: &mut Vec<Effect<H>>) {
        let kind = req.kind();
        match req {
            CoreRequest::Acquire {
                res,
                cmd_flags,
                owner_name,
                opener,
            } => {
                self.tables.set_owner_name(ci, owner_name);
                self.cmds.insert(
                    ci,
                    Cmd::Acquire(AcquireCmd {
                        specs: res,
                        cmd_flags,
                        opener,
                        next: 0,
                        got: Vec::new(),
                        waiting: None,
                        wait_until_s: None,
                    }),
                );
                self.advance_acquire(now_s, ci, fx);
            }
            CoreRequest::Release { keys, all, rename } => {
                let (tokens, missing) = if all {
                    (self.tables.take_all_tokens(ci), false)
                } else {
                    self.tables.take_tokens(ci, &keys).unwrap_or_default()
                };
                let mut pending = 0;
                for t in &tokens {
                    if self.release_token(ci, t, false, Some(ci), rename, fx) {
                        pending += 1;
                    }
                }
                // As sanlock: a named lease the client does not hold makes the result -1
                // (SANLK_ERROR) without stopping the others' releases.
                let rv = if missing { SANLK_ERROR } else { 0 };
                let leases = tokens.iter().map(held_lease).collect();
                if pending == 0 {
                    self.answer(fx, ci, kind, rv, leases);
                    self.end_command(ci, fx);
                } else {
                    self.cmds.insert(ci, Cmd::Release { pending, rv });
                }
            }
            CoreRequest::Convert {
                key,
                to_shared,
                cmd_flags,
            } => match self.tables.start_convert(ci, key, to_shared) {
                Ok(lr) => {
                    let op = self.new_op();
                    self.ops.insert(op, OpFor::Convert { ci, key, to_shared });
                    self.cmds.insert(ci, Cmd::Convert { key });
                    fx.push(Effect::Disk {
                        op,
                        ls: key.0,
                        client: Some(ci),
                        what: DiskOp::Convert {
                            key,
                            held: lr.held,
                            disks: lr.disks,
                            to_shared,
                            cmd_flags,
                        },
                    });
                }
                Err(r) => {
                    if self.live(ci) || self.begun.contains(&ci) {
                        refuse(fx, ci, kind, Refusal::Table(r));
                    }
                    self.end_command(ci, fx);
                }
            },
            CoreRequest::Inquire => {
                let leases = self.tables.clients.slots[&ci]
                    .tokens
                    .iter()
                    .map(held_lease)
                    .collect();
                self.answer(fx, ci, kind, 0, leases);
                self.end_command(ci, fx);
            }
            CoreRequest::Register
            | CoreRequest::AddLockspace { .. }
            | CoreRequest::RemLockspace { .. }
            | CoreRequest::ReleaseOrphans { .. }
            | CoreRequest::Watch { .. }
            | CoreRequest::SetEvent { .. }
            | CoreRequest::RequestLease { .. } => {}
        }
    }

    /// Ends client `ci`'s command; a client that died meanwhile goes now, its leases
    /// released as a dead holder's.
    fn end_command(&mut self, ci: u32, fx: &mut Vec<Effect<H>>) {
        self.cmds.remove(&ci);
        self.begun.remove(&ci);
        if let Some(tokens) = self.tables.finish_command(ci) {
            for t in &tokens {
                self.release_token(ci, t, true, None, None, fx);
            }
        }
    }

    /// [`crate::Tables::start_release`] of one token, and the disk release it may need;
    /// true when a disk release was asked for. `reply_to`: the RELEASE waiting for it.
    pub(crate) fn release_token(
        &mut self,
        ci: u32,
        t: &ClientToken,
        dying: bool,
        reply_to: Option<u32>,
        rename: Option<Name>,
        fx: &mut Vec<Effect<H>>,
    ) -> bool {
        let ReleaseStart::Disk(lr) = self.tables.start_release(ci, t, dying) else {
            return false;
        };
        let key = t.key();
        let op = self.new_op();
        let early = self.planted(CorePlantedBug::ReleaseBeforeDisk);
        self.ops.insert(
            op,
            OpFor::Release {
                reply_to: if early { None } else { reply_to },
                key,
            },
        );
        fx.push(Effect::Disk {
            op,
            ls: key.0,
            client: Some(ci),
            what: DiskOp::Release {
                key,
                held: lr.held,
                disks: lr.disks,
                rename,
            },
        });
        if early {
            // Planted: the slot is freed now, and the caller answers at once.
            self.tables.finish_release(&key);
            return false;
        }
        true
    }

    /// Starts the disk release of the idle orphans of `ls` (`name`, or all when empty);
    /// their operation ids.
    pub(crate) fn release_orphans(
        &mut self,
        ls: &Name,
        name: &Name,
        fx: &mut Vec<Effect<H>>,
    ) -> Vec<OpId> {
        let mut picked = self.tables.start_orphan_release(ls, name);
        picked.sort_by_key(|lr| lr.name.0);
        let mut ops = Vec::new();
        for lr in picked {
            let key = (lr.ls, lr.name);
            let op = self.new_op();
            self.ops.insert(
                op,
                OpFor::Release {
                    reply_to: None,
                    key,
                },
            );
            fx.push(Effect::Disk {
                op,
                ls: key.0,
                client: None,
                what: DiskOp::Release {
                    key,
                    held: lr.held,
                    disks: lr.disks,
                    rename: None,
                },
            });
            ops.push(op);
        }
        ops
    }

    /// Takes the next leases of client `ci`'s ACQUIRE until one needs the disk (or waits
    /// for a release), then answers when all are taken or one failed.
    fn advance_acquire(&mut self, now_s: u64, ci: u32, fx: &mut Vec<Effect<H>>) {
        loop {
            let Some(Cmd::Acquire(a)) = self.cmds.get(&ci) else {
                return;
            };
            if a.waiting.is_some() {
                return;
            }
            let Some(spec) = a.specs.get(a.next).cloned() else {
                self.acquire_done(ci, fx);
                return;
            };
            let flags = a.cmd_flags;
            let opener = a.opener.clone();
            if !self.space_usable(&spec.ls) {
                self.acquire_failed(now_s, ci, -ENOSPC, fx);
                return;
            }
            let key = spec.key();
            match self
                .tables
                .start_acquire(ci, key, spec.shared, flags, &spec.disks)
            {
                Ok(AcquireStart::Local { lver, .. }) => {
                    let t = self.token(&spec, lver, now_s);
                    if let Some(Cmd::Acquire(a)) = self.cmds.get_mut(&ci) {
                        a.got.push(t);
                        a.next += 1;
                    }
                }
                Ok(AcquireStart::Disk) => {
                    let op = self.new_op();
                    self.ops.insert(op, OpFor::Acquire { ci, key });
                    fx.push(Effect::Disk {
                        op,
                        ls: key.0,
                        client: Some(ci),
                        what: DiskOp::Acquire {
                            key,
                            shared: spec.shared,
                            disks: spec.disks.clone(),
                            want_lver: spec.lver,
                            new_num_hosts: spec.new_num_hosts,
                            cmd_flags: flags,
                            opener,
                        },
                    });
                    return;
                }
                Err(TableRefused::BeingReleased) => {
                    // Released on disk right now: go on when that ends, or answer -EAGAIN
                    // at the first tick past the wait.
                    let io_timeout_s = self.space(&spec.ls).map_or(1, |s| s.io_timeout_s);
                    if let Some(Cmd::Acquire(a)) = self.cmds.get_mut(&ci) {
                        a.waiting = Some(key);
                        if !matches!(a.wait_until_s, Some((i, _)) if i == a.next) {
                            a.wait_until_s = Some((a.next, now_s + release_wait_s(io_timeout_s)));
                        }
                    }
                    return;
                }
                Err(r) => {
                    self.acquire_failed(now_s, ci, r.code(), fx);
                    return;
                }
            }
        }
    }

    fn token(&mut self, spec: &ResSpec, lver: u64, now_s: u64) -> ClientToken {
        let token_id = self.tables.new_token_id();
        ClientToken {
            token_id,
            ls: spec.ls,
            name: spec.name,
            disks: spec.disks.clone(),
            shared: spec.shared,
            persistent: spec.persistent,
            lver,
            acquired: now_s,
        }
    }

    fn acquire_done(&mut self, ci: u32, fx: &mut Vec<Effect<H>>) {
        let Some(Cmd::Acquire(a)) = self.cmds.remove(&ci) else {
            return;
        };
        let leases: Vec<HeldLease> = a.got.iter().map(held_lease).collect();
        if let Some(c) = self.tables.clients.slots.get_mut(&ci) {
            c.waiting = None;
        }
        match self.tables.record_tokens(ci, a.got) {
            Ok(()) => self.answer(fx, ci, ReqKind::Acquire, 0, leases),
            Err(back) => {
                for t in &back {
                    self.release_token(ci, t, true, None, None, fx);
                }
            }
        }
        self.end_command(ci, fx);
    }

    /// One lease of the ACQUIRE failed: the ones taken are released, the error answered.
    /// The failure is noted for STATUS's `waiting=` (a busy refusal makes the client a
    /// candidate for the lease, any other failure clears the mark).
    fn acquire_failed(&mut self, now_s: u64, ci: u32, rv: i32, fx: &mut Vec<Effect<H>>) {
        let Some(Cmd::Acquire(a)) = self.cmds.remove(&ci) else {
            return;
        };
        if let Some(spec) = a.specs.get(a.next) {
            let busy = client_lib::lease::is_busy_code(rv);
            self.tables
                .note_acquire_result(ci, spec.key(), rv, busy, now_s);
        }
        for t in &a.got {
            self.release_token(ci, t, false, None, None, fx);
        }
        self.answer(fx, ci, ReqKind::Acquire, rv, Vec::new());
        self.end_command(ci, fx);
    }

    /// The tick's part for ACQUIREs: one still waiting for a release here past its
    /// [`crate::release_wait_s`] is answered -EAGAIN (the lease is still being released),
    /// the leases it took given back. The release goes on and ends as any other.
    pub(crate) fn end_overdue_release_waits(&mut self, now_s: u64, fx: &mut Vec<Effect<H>>) {
        let mut overdue: Vec<u32> = self
            .cmds
            .iter()
            .filter(|(_, c)| {
                matches!(c, Cmd::Acquire(a) if a.waiting.is_some()
                    && matches!(a.wait_until_s, Some((i, until)) if i == a.next && now_s >= until))
            })
            .map(|(ci, _)| *ci)
            .collect();
        overdue.sort_unstable();
        for ci in overdue {
            self.acquire_failed(now_s, ci, -EAGAIN, fx);
        }
    }

    pub(crate) fn disk_done(
        &mut self,
        now_s: u64,
        op: OpId,
        result: Result<H, i32>,
        failed_state: Option<H>,
        fx: &mut Vec<Effect<H>>,
    ) {
        let Some(what) = self.ops.remove(&op) else {
            // Not ours (a completion for an operation of an earlier core): nothing.
            return;
        };
        match what {
            OpFor::Acquire { ci, key } => self.disk_acquire_done(now_s, ci, key, result, fx),
            OpFor::Release { reply_to, key } => {
                self.release_done(now_s, op, reply_to, key, result.err(), fx);
            }
            OpFor::Convert { ci, key, to_shared } => {
                self.convert_done(ci, key, to_shared, result, failed_state, fx);
            }
        }
    }

    /// A disk acquire of `key` for client `ci` ended: the command goes on to its next
    /// lease, or the lease is given back (its lockspace was lost meanwhile, or the
    /// command is gone) and the acquire fails.
    fn disk_acquire_done(
        &mut self,
        now_s: u64,
        ci: u32,
        key: Key,
        result: Result<H, i32>,
        fx: &mut Vec<Effect<H>>,
    ) {
        let spec = match self.cmds.get(&ci) {
            Some(Cmd::Acquire(a)) => a.specs.get(a.next).cloned(),
            _ => None,
        };
        let lost =
            !self.space_usable(&key.0) && !self.planted(CorePlantedBug::GrantInLostLockspace);
        match (self.tables.finish_acquire(key, ci, result), spec) {
            (Ok(lver), Some(spec)) if !lost => {
                let t = self.token(&spec, lver, now_s);
                if let Some(Cmd::Acquire(a)) = self.cmds.get_mut(&ci) {
                    a.got.push(t);
                    a.next += 1;
                }
                self.advance_acquire(now_s, ci, fx);
            }
            (Ok(lver), spec) => {
                // Held on disk, but its lockspace was lost meanwhile (or the
                // command is gone): give it back.
                let spec = spec.unwrap_or(ResSpec::exclusive(key));
                let t = self.token(&spec, lver, now_s);
                self.release_token(ci, &t, false, None, None, fx);
                self.acquire_failed(now_s, ci, -ENOSPC, fx);
            }
            (Err(rv), _) => self.acquire_failed(now_s, ci, rv, fx),
        }
    }

    /// A disk release of `key` ended (`failed`: its error code): the RELEASE waiting for
    /// it is answered once its last one ended, an orphan release waiting for it too, and
    /// the acquires waiting for it go on.
    fn release_done(
        &mut self,
        now_s: u64,
        op: OpId,
        reply_to: Option<u32>,
        key: Key,
        failed: Option<i32>,
        fx: &mut Vec<Effect<H>>,
    ) {
        if !self.planted(CorePlantedBug::ReleaseBeforeDisk) {
            self.tables.finish_release(&key);
        }
        let rv_disk = failed.unwrap_or(0);
        if let Some(ci) = reply_to {
            if let Some(Cmd::Release { pending, rv }) = self.cmds.get_mut(&ci) {
                *pending -= 1;
                // A disk release's failure is the answer (the last one's).
                if rv_disk != 0 {
                    *rv = rv_disk;
                }
                if *pending == 0 {
                    let rv = *rv;
                    self.answer(fx, ci, ReqKind::Release, rv, Vec::new());
                    self.end_command(ci, fx);
                }
            }
        }
        // An orphan release waiting for this one may be done.
        let mut done = Vec::new();
        for a in &mut self.admin {
            if a.kind == ReqKind::ReleaseOrphans {
                a.ops.retain(|o| *o != op);
                if a.ops.is_empty() {
                    done.push(a.ci);
                }
            }
        }
        self.admin
            .retain(|a| !(a.kind == ReqKind::ReleaseOrphans && a.ops.is_empty()));
        for ci in done {
            self.answer(fx, ci, ReqKind::ReleaseOrphans, 0, Vec::new());
        }
        // Acquires waiting for this release go on.
        let mut waiting: Vec<u32> = self
            .cmds
            .iter()
            .filter(|(_, c)| matches!(c, Cmd::Acquire(a) if a.waiting == Some(key)))
            .map(|(ci, _)| *ci)
            .collect();
        waiting.sort_unstable();
        for ci in waiting {
            if let Some(Cmd::Acquire(a)) = self.cmds.get_mut(&ci) {
                a.waiting = None;
            }
            self.advance_acquire(now_s, ci, fx);
        }
        self.finish_removals(fx);
    }

    /// A disk convert of `key` for client `ci` ended: the table takes its outcome (the
    /// lease's state a failure left, too) and the CONVERT is answered.
    fn convert_done(
        &mut self,
        ci: u32,
        key: Key,
        to_shared: bool,
        result: Result<H, i32>,
        failed_state: Option<H>,
        fx: &mut Vec<Effect<H>>,
    ) {
        if let (Err(_), Some(state)) = (&result, failed_state) {
            self.tables.convert_failed_state(key, state, to_shared);
        }
        let rv = self.tables.finish_convert(ci, key, to_shared, result);
        let leases = self.tables.clients.slots.get(&ci).map(|c| {
            c.tokens
                .iter()
                .filter(|t| t.key() == key)
                .map(held_lease)
                .collect()
        });
        self.answer(fx, ci, ReqKind::Convert, rv, leases.unwrap_or_default());
        if matches!(self.cmds.get(&ci), Some(Cmd::Convert { key: k }) if *k == key) {
            self.end_command(ci, fx);
        }
    }

    pub(crate) fn join_done(
        &mut self,
        now_s: u64,
        ls: Name,
        result: Result<(), i32>,
        fx: &mut Vec<Effect<H>>,
    ) {
        let rv = match result {
            Ok(()) => {
                if let Some(s) = self.space_mut(&ls) {
                    s.st.phase = Phase::Joined;
                    s.st.add_result = Some(0);
                    // Shared grants wait until the peers' cached views of us are newer
                    // than this join (lease-core `monitor::SharedHold`).
                    s.monitor.hold_shared_after_join(now_s);
                    s.st.renewal_ok(
                        now_s,
                        RenewalRec {
                            timestamp: now_s,
                            read_ms: 0,
                            write_ms: 0,
                            // The join's write went before this step, within the
                            // second before at the latest as the core is stepped.
                            write_sent_ms: now_s.saturating_sub(1) * 1000,
                            ended_ms: now_s * 1000,
                        },
                    );
                }
                0
            }
            Err(rv) => {
                self.spaces.retain(|s| !s.name.same_as(&ls));
                rv
            }
        };
        self.answer_admin(ReqKind::AddLockspace, &ls, rv, fx);
    }

    /// REM_LOCKSPACE ([`CoreRequest::RemLockspace`]). The order is the safety rule:
    /// the holders' watchers are told before `kill_now` lets the next tick kill them.
    ///
    /// Why a removal cannot give a lease of ours to another host while we still hold
    /// or write it: from this step on the lockspace is not usable (`space_usable`), so
    /// no acquire here is granted in it (one whose disk acquire is on its way is
    /// released again when it ends and answered -ENOSPC); the holders are killed, and
    /// their leases and the orphans leave the table only when their disk releases have
    /// ended; the shell's lockspace thread releases our delta lease only once no lease
    /// of the lockspace is left in the table (`lockspace::renew_loop`), and renews it
    /// until then. Other hosts see our leases held until each release is on disk, and
    /// our host alive until the delta release.
    fn rem_lockspace(
        &mut self,
        ci: u32,
        ls: &Name,
        id: Option<u32>,
        unused_only: bool,
        wait: bool,
        fx: &mut Vec<Effect<H>>,
    ) {
        let kind = ReqKind::RemLockspace;
        let Some(s) = self.space(ls).filter(|s| id.is_none_or(|id| s.id == id)) else {
            reply(fx, ci, kind, -ENOENT, Vec::new());
            return;
        };
        let (id, shells, phase) = (s.id, s.listed_by_shell, s.st.phase);
        let kept_orphans = s.st.used_by_orphans;
        if unused_only && self.tables.space_in_use(ls) {
            refuse(fx, ci, kind, Refusal::LeasesHeld);
            return;
        }
        let has_orphans = self
            .tables
            .resources
            .values()
            .any(|r| r.orphan && r.ls.same_as(ls));
        if has_orphans && kept_orphans {
            refuse(fx, ci, kind, Refusal::OrphansKept);
            return;
        }
        if phase == Phase::Removing {
            refuse(fx, ci, kind, Refusal::RemovalInProgress);
            return;
        }
        if phase == Phase::Adding && !shells {
            // The shell stops a join it runs; the core's own joins are waited for.
            refuse(fx, ci, kind, Refusal::BeingAdded);
            return;
        }
        // Orphans have no process to kill: their releases start now, and the lockspace
        // does not end before they did (its leases leave the table first).
        self.release_orphans(ls, &Name::EMPTY, fx);
        self.begin_removal(*ls, fx);
        if wait {
            self.admin.push(AdminCmd {
                ci,
                ls: *ls,
                kind,
                ops: Vec::new(),
            });
        } else {
            reply(fx, ci, kind, 0, Vec::new());
        }
        if shells {
            fx.push(Effect::StopLockspace { ls: *ls, id });
        } else {
            // The holders are killed at the next tick; the core's own lockspace goes
            // when its last lease has left the table.
            self.finish_removals(fx);
        }
    }

    /// Lockspace `ls` (not gone) is being removed from now on: its holders' watchers
    /// are told (`LockspaceRemoved`), then `kill_now` and phase `Removing` let the next
    /// tick kill them with SIGKILL.
    fn begin_removal(&mut self, ls: Name, fx: &mut Vec<Effect<H>>) {
        let pids = self.tables.holder_pids(&ls, None);
        if !pids.is_empty() && !self.planted(CorePlantedBug::RemovalWithoutNotice) {
            fx.push(Effect::LossNotice {
                ls,
                kind: WatchKind::LockspaceRemoved,
                pids,
                to: Vec::new(),
                lease: None,
            });
        }
        if let Some(s) = self.space_mut(&ls) {
            s.st.phase = Phase::Removing;
            s.st.kill_now = true;
        }
    }

    /// [`crate::Input::Shutdown`]: every lockspace not gone and not being removed yet
    /// is removed; the shell's are stopped.
    pub(crate) fn remove_all(&mut self, fx: &mut Vec<Effect<H>>) {
        let live: Vec<(Name, u32, bool)> = self
            .spaces
            .iter()
            .filter(|s| !s.st.gone && !s.st.kill_now)
            .map(|s| (s.name, s.id, s.listed_by_shell))
            .collect();
        for (ls, id, shells) in live {
            self.begin_removal(ls, fx);
            if shells {
                fx.push(Effect::StopLockspace { ls, id });
            }
        }
        self.finish_removals(fx);
    }

    /// [`crate::Input::JoinEnded`]: lockspace `id`'s join result, its add's answer
    /// (`add_result`, which the shell's ADD_LOCKSPACE and INQ_LOCKSPACE waiters read)
    /// and, when joined and not being removed, phase `Joined`.
    pub(crate) fn join_ended(&mut self, now_s: u64, id: u32, result: Result<JoinedLease, i32>) {
        let Some(s) = self.spaces.iter_mut().find(|s| s.id == id && !s.st.gone) else {
            return;
        };
        assert!(
            s.listed_by_shell && s.st.add_result.is_none(),
            "lockspace {:?} (id {id}): a join ended twice, or for the core's own",
            s.name
        );
        let st = &mut s.st;
        let rv = match result {
            Ok(lease) => {
                st.host_generation = lease.generation;
                // The join's write starts the renewal history: the stillness of our record
                // before the first renewal is measured from it (`longest_renewal_gap_ms`),
                // as the core's own join does.
                st.renewal_ok(
                    lease.last_success_s,
                    RenewalRec {
                        timestamp: lease.last_success_s,
                        read_ms: 0,
                        write_ms: 0,
                        write_sent_ms: lease.write_sent_ms,
                        ended_ms: lease.ended_ms,
                    },
                );
                if st.phase == Phase::Removing {
                    -1
                } else {
                    st.phase = Phase::Joined;
                    st.acquire_last_success = now_s;
                    // As in `join_done`: shared grants wait for the peers to see us.
                    s.monitor.hold_shared_after_join(now_s);
                    0
                }
            }
            Err(rv) => rv,
        };
        st.add_result = Some(rv);
        st.acquire_last_result = rv;
    }

    /// [`crate::Input::LockspaceEnded`]: lockspace `id` of the shell is gone (an add
    /// that never ended is answered -ENOENT), and the REM_LOCKSPACE waiting for it is
    /// answered.
    pub(crate) fn lockspace_ended(&mut self, id: u32, fx: &mut Vec<Effect<H>>) {
        let Some(s) = self.spaces.iter_mut().find(|s| s.id == id && !s.st.gone) else {
            return;
        };
        assert!(
            s.listed_by_shell,
            "lockspace {:?} (id {id}): the shell ended a lockspace of the core's",
            s.name
        );
        s.st.gone = true;
        if s.st.add_result.is_none() {
            s.st.add_result = Some(-ENOENT);
        }
        let ls = s.name;
        self.answer_admin(ReqKind::RemLockspace, &ls, 0, fx);
    }

    /// Answers `rv` to every lockspace command of `kind` on `ls` that waits for its end.
    /// Each is answered even when its client's process has died meanwhile (`pid_dead`,
    /// its slot kept for a command another connection runs on it): the shell's worker
    /// waits for this answer, and would wait for good without it.
    fn answer_admin(&mut self, kind: ReqKind, ls: &Name, rv: i32, fx: &mut Vec<Effect<H>>) {
        let asked: Vec<u32> = self
            .admin
            .iter()
            .filter(|a| a.kind == kind && a.ls.same_as(ls))
            .map(|a| a.ci)
            .collect();
        self.admin.retain(|a| !(a.kind == kind && a.ls.same_as(ls)));
        for ci in asked {
            reply(fx, ci, kind, rv, Vec::new());
        }
    }

    /// A client's connection closed or its process exited. A lockspace command it was
    /// waiting for is answered all the same (nobody reads the answer, but the shell's
    /// worker that waits for it is freed).
    /// [`Input::RequestWritten`]: the REQUEST is answered; a lease with an owner, asked
    /// for something, gets the owner host's bit in our bitmap (if the lockspace is
    /// still here). A completion for no pending request is a broken invariant.
    pub(crate) fn request_written(
        &mut self,
        now_s: u64,
        op: OpId,
        result: Result<Option<u64>, i32>,
        fx: &mut Vec<Effect<H>>,
    ) {
        let Some(p) = self.requests.remove(&op) else {
            panic!("a request record write {op} ended that was never asked for");
        };
        match result {
            Ok(owner) => {
                let asks = p.asks && !self.planted(CorePlantedBug::RequestWithoutBit);
                if let (Some(owner), true) = (owner, asks) {
                    if let Some(s) = self.space_mut(&p.ls) {
                        let period_s = lease_core::timeouts::set_bitmap_seconds(s.io_timeout_s);
                        s.st.outgoing.set_bit(now_s, period_s, owner);
                    }
                }
                reply(fx, p.ci, ReqKind::RequestLease, 0, Vec::new());
            }
            Err(rv) => reply(fx, p.ci, ReqKind::RequestLease, rv, Vec::new()),
        }
    }

    pub(crate) fn client_gone(&mut self, ci: u32, fx: &mut Vec<Effect<H>>) {
        self.watches.end(ci);
        for a in self.admin.iter().filter(|a| a.ci == ci) {
            reply(fx, ci, a.kind, -ECANCELED, Vec::new());
        }
        self.admin.retain(|a| a.ci != ci);
        if let Some((_pid, tokens)) = self.tables.client_ended(ci) {
            self.cmds.remove(&ci);
            for t in &tokens {
                self.release_token(ci, t, true, None, None, fx);
            }
        }
    }

    /// Lockspaces that can go now, and their orphans. A lockspace ends when it is being
    /// removed by the core (REM_LOCKSPACE through [`Core::step`]) or has lost its lease
    /// (joined, `space_dead`, not a removal's `kill_now`). The orphans of one being
    /// removed are released at once; those of a lost one once no live holder is left
    /// (its holders are being killed), unless SET_CONFIG keeps them (`used_by_orphans`).
    /// So are the orphans of one the shell removes (its REM, a forced shutdown): its
    /// start released those it found, and a persistent holder that dies during the
    /// removal leaves one more, which no one else would release — the lockspace's thread
    /// ends only once no lease of it is left (as sanlock's, whose orphans hold a removal
    /// up only under USED_BY_ORPHANS, which refuses it at its start). Releasing them is
    /// safe: an orphan has no process to write under it, its release is the disk release
    /// every lease of a removed lockspace gets, and it is `busy` until that ends, so no
    /// local acquire takes it meanwhile (chaos seed 43 met the case; test
    /// `an_orphan_left_during_the_shells_removal_is_released_and_the_lockspace_can_end`).
    /// With no lease of its own left in the table and no acquire of one on the way, a
    /// lockspace of the core's goes ([`Effect::LockspaceGone`], its REM answered); a lost
    /// one the shell listed is retired ([`Effect::RetireLockspace`], phase `Removing`),
    /// and the shell unlists it when its thread ends. A removal the shell runs itself
    /// (its REM, a forced shutdown) is the shell's to end.
    pub(crate) fn finish_removals(&mut self, fx: &mut Vec<Effect<H>>) {
        let lost = |s: &CoreSpace| {
            !s.st.gone && s.st.phase == Phase::Joined && s.st.space_dead && !s.st.kill_now
        };
        let removing_own =
            |s: &CoreSpace| !s.st.gone && !s.listed_by_shell && s.st.phase == Phase::Removing;
        let shell_removing = |s: &CoreSpace| {
            !s.st.gone && s.listed_by_shell && s.st.phase == Phase::Removing && s.st.kill_now
        };
        let free_orphans: Vec<Name> = self
            .spaces
            .iter()
            .filter(|s| {
                removing_own(s)
                    || shell_removing(s)
                    || (lost(s)
                        && !s.st.used_by_orphans
                        && !self.tables.space_has_live_holders(&s.name))
            })
            .map(|s| s.name)
            .collect();
        for ls in &free_orphans {
            self.release_orphans(ls, &Name::EMPTY, fx);
        }
        let ending: Vec<(Name, u32, bool, bool)> = self
            .spaces
            .iter()
            .filter(|s| removing_own(s) || lost(s))
            .map(|s| (s.name, s.id, lost(s), s.listed_by_shell))
            .collect();
        for (ls, id, lost, shells) in ending {
            let acquiring = self
                .cmds
                .values()
                .any(|c| matches!(c, Cmd::Acquire(a) if a.specs.iter().any(|r| r.ls.same_as(&ls))));
            if self.tables.space_in_use(&ls) || acquiring {
                continue;
            }
            if shells {
                if let Some(st) = self.space_st_mut(id) {
                    st.phase = Phase::Removing;
                }
                fx.push(Effect::RetireLockspace { ls, id });
                continue;
            }
            self.spaces.retain(|s| !s.name.same_as(&ls) || s.st.gone);
            fx.push(Effect::LockspaceGone { ls, lost });
            self.answer_admin(ReqKind::RemLockspace, &ls, 0, fx);
        }
    }
}

#[cfg(test)]
mod tests {
    //! The request path driven through `Core::step` alone: the disk completions are
    //! chosen by the test, in the order it wants.
    use super::*;
    use crate::io::Input;
    use crate::kill::KillOrder;
    use crate::tables::Key;
    use crate::watches::{WatchBeat, WatchTo};
    use client_lib::ext::WatchKind;
    use lease_core::timeouts;

    #[derive(Debug, Clone, Default, PartialEq, Eq)]
    struct Held {
        lver: u64,
    }

    impl LeaseHold for Held {
        fn lver(&self) -> u64 {
            self.lver
        }
    }

    type TestCore = Core<(), Held>;
    type Fx = Vec<Effect<Held>>;

    const IO_S: u64 = 10;

    fn name(s: &str) -> Name {
        Name::new(s).expect("name")
    }

    fn spec(res: &str, shared: bool) -> ResSpec {
        ResSpec {
            ls: name("ls"),
            name: name(res),
            shared,
            persistent: false,
            disks: Vec::new(),
            lver: None,
            new_num_hosts: None,
        }
    }

    fn step(c: &mut TestCore, now: u64, input: Input<(), Held>) -> Fx {
        let fx = c.step(now, input);
        c.check().expect("the core's invariants after a step");
        fx
    }

    /// A core with lockspace "ls" joined at t=100 through ADD_LOCKSPACE.
    fn joined() -> TestCore {
        let mut c = TestCore::new(40);
        let admin = connect(&mut c, 1);
        let fx = step(
            &mut c,
            100,
            Input::Request {
                ci: admin,
                req: CoreRequest::AddLockspace {
                    ls: name("ls"),
                    host_id: 1,
                    io_timeout_s: IO_S,
                },
            },
        );
        assert_eq!(
            fx,
            vec![Effect::JoinLockspace {
                ls: name("ls"),
                io_timeout_s: IO_S
            }]
        );
        assert!(!c.space_usable(&name("ls")), "usable only once joined");
        let fx = step(
            &mut c,
            100,
            Input::JoinDone {
                ls: name("ls"),
                result: Ok(()),
            },
        );
        assert_eq!(replies(&fx), vec![(admin, ReqKind::AddLockspace, 0)]);
        assert!(c.space_usable(&name("ls")));
        c
    }

    /// The time of the tests' connections and REGISTERs, which do not depend on it: t=100,
    /// or the last step's when later (a step's time never goes back).
    fn now_or_100(c: &TestCore) -> u64 {
        c.last_now_s.max(100)
    }

    fn connect(c: &mut TestCore, pid: i32) -> u32 {
        let now = now_or_100(c);
        let fx = step(
            c,
            now,
            Input::Connected {
                fd: -1,
                pid,
                uid: 0,
                stream: None,
                replacing_own: false,
            },
        );
        match fx.as_slice() {
            [Effect::Accepted { ci }] => *ci,
            other => panic!("not accepted: {other:?}"),
        }
    }

    fn client(c: &mut TestCore, pid: i32) -> u32 {
        let ci = connect(c, pid);
        let now = now_or_100(c);
        let fx = step(
            c,
            now,
            Input::Request {
                ci,
                req: CoreRequest::Register,
            },
        );
        assert!(fx.is_empty(), "REGISTER has no reply: {fx:?}");
        assert!(c.tables.clients.slots[&ci].registered);
        ci
    }

    fn replies(fx: &Fx) -> Vec<(u32, ReqKind, i32)> {
        fx.iter()
            .filter_map(|e| match e {
                Effect::Reply { ci, reply } => Some((*ci, reply.kind, reply.rv)),
                _ => None,
            })
            .collect()
    }

    /// The disk operations asked for: (op, key, is a release).
    fn disk_ops(fx: &Fx) -> Vec<(OpId, Key, &'static str)> {
        fx.iter()
            .filter_map(|e| match e {
                Effect::Disk { op, what, .. } => Some(match what {
                    DiskOp::Acquire { key, .. } => (*op, *key, "acquire"),
                    DiskOp::Release { key, .. } => (*op, *key, "release"),
                    DiskOp::Convert { key, .. } => (*op, *key, "convert"),
                }),
                _ => None,
            })
            .collect()
    }

    fn acquire(c: &mut TestCore, now: u64, ci: u32, res: Vec<ResSpec>) -> Fx {
        step(
            c,
            now,
            Input::Request {
                ci,
                req: CoreRequest::Acquire {
                    res,
                    cmd_flags: 0,
                    owner_name: Name::EMPTY,
                    opener: None,
                },
            },
        )
    }

    fn done(c: &mut TestCore, now: u64, op: OpId, result: Result<Held, i32>) -> Fx {
        step(
            c,
            now,
            Input::DiskDone {
                op,
                result,
                failed_state: None,
            },
        )
    }

    /// Client `ci` holds `res` exclusive through ACQUIRE and its disk completion.
    fn hold(c: &mut TestCore, ci: u32, res: &str, lver: u64) {
        let fx = acquire(c, 101, ci, vec![spec(res, false)]);
        let [(op, _, "acquire")] = disk_ops(&fx)[..] else {
            panic!("{fx:?}")
        };
        let fx = done(c, 101, op, Ok(Held { lver }));
        assert_eq!(replies(&fx), vec![(ci, ReqKind::Acquire, 0)]);
    }

    /// Client `ci` takes "r1" persistent (on disk at lver 2).
    fn hold_persistent(c: &mut TestCore, ci: u32) {
        let mut persistent = spec("r1", false);
        persistent.persistent = true;
        let fx = acquire(c, 101, ci, vec![persistent]);
        let [(op, _, "acquire")] = disk_ops(&fx)[..] else {
            panic!("{fx:?}")
        };
        done(c, 101, op, Ok(Held { lver: 2 }));
    }

    /// The one effect of `fx`, a disk release: its op, lease and new name.
    fn one_release(fx: &Fx) -> (OpId, Key, Option<Name>) {
        match fx.as_slice() {
            [Effect::Disk {
                op,
                what: DiskOp::Release { key, rename, .. },
                ..
            }] => (*op, *key, *rename),
            other => panic!("one disk release: {other:?}"),
        }
    }

    /// The shell's release input (`ReleaseTokens`): one disk release for the lease's last
    /// holder, with the disks and the new name; the lease stays busy until its
    /// completion, and an acquire of it meanwhile waits, then goes on.
    #[test]
    fn tokens_released_for_the_shell_are_busy_until_their_disk_release_ends() {
        let mut c = joined();
        let (a, b) = (client(&mut c, 10), client(&mut c, 11));
        hold(&mut c, a, "r1", 1);
        let tokens = c.tables.take_all_tokens(a);
        assert_eq!(tokens.len(), 1);
        let fx = step(
            &mut c,
            102,
            Input::ReleaseTokens {
                ci: a,
                tokens,
                dying: false,
            },
        );
        let (op, key, rename) = one_release(&fx);
        assert_eq!((key, rename), ((name("ls"), name("r1")), None));
        assert!(
            replies(&fx).is_empty(),
            "the shell's release answers nobody"
        );
        let lr = &c.tables.resources[&(name("ls"), name("r1"))];
        assert!(lr.busy && lr.releasing && lr.holders.is_empty());
        // An acquire of the lease meanwhile waits for the release's end.
        let fx = acquire(&mut c, 102, b, vec![spec("r1", false)]);
        assert!(
            disk_ops(&fx).is_empty() && replies(&fx).is_empty(),
            "{fx:?}"
        );
        let fx = done(&mut c, 103, op, Err(-EIO));
        assert_eq!(
            disk_ops(&fx)
                .into_iter()
                .map(|(_, k, what)| (k, what))
                .collect::<Vec<_>>(),
            vec![((name("ls"), name("r1")), "acquire")]
        );
        assert!(
            c.tables.resources[&(name("ls"), name("r1"))]
                .holders
                .is_empty(),
            "the old entry left (a failed disk release too), the new acquire's began"
        );
    }

    /// The shell begins client `ci`'s command itself (`start_command`, as the daemon's
    /// dispatcher does before reading the payload).
    fn begin(c: &mut TestCore, ci: u32, cmd: u32) {
        let target = CommandTarget {
            conn_ci: ci,
            conn_uid: 0,
            cmd,
            cmd_flags: 0,
            data2: u32::MAX,
        };
        assert_eq!(c.tables.start_command(target), Ok(ci));
    }

    /// A RELEASE the shell began (`Input::Command`) naming a held lease and one not held:
    /// the held one is released on disk with the new name, and the answer, -1 as
    /// sanlock's for the lease not held, comes after the disk release; the command ends
    /// in the core, and is answered although its client died meanwhile (it may have come
    /// on another connection), whose other lease is then released as a dead holder's.
    #[test]
    fn a_begun_release_is_answered_after_its_disk_release_even_for_a_client_that_died() {
        let mut c = joined();
        let a = client(&mut c, 10);
        hold(&mut c, a, "r1", 1);
        hold(&mut c, a, "r3", 1);
        begin(&mut c, a, SM_CMD_RELEASE);
        let fx = step(
            &mut c,
            102,
            Input::Command {
                target: a,
                req: CoreRequest::Release {
                    keys: vec![(name("ls"), name("r1")), (name("ls"), name("r2"))],
                    all: false,
                    rename: Some(name("r1-new")),
                },
            },
        );
        let (op, key, rename) = one_release(&fx);
        assert_eq!(
            (key, rename),
            ((name("ls"), name("r1")), Some(name("r1-new")))
        );
        // The client dies while its release is on disk: the command keeps its slot.
        assert!(step(&mut c, 102, Input::Closed { ci: a }).is_empty());
        let fx = done(&mut c, 103, op, Ok(Held::default()));
        assert_eq!(replies(&fx), vec![(a, ReqKind::Release, SANLK_ERROR)]);
        let [(_, k, "release")] = disk_ops(&fx)[..] else {
            panic!("the dead client's other lease is released: {fx:?}")
        };
        assert_eq!(k, (name("ls"), name("r3")));
        assert!(!c.tables.clients.slots.contains_key(&a), "the slot went");
        assert!(c.begun.is_empty() && c.cmds.is_empty());
    }

    /// A RELEASE naming no lease and without `SANLK_REL_ALL` is a successful no-op (libvirt
    /// relies on it), and ends the command; with `all`, every lease goes.
    #[test]
    fn a_release_naming_nothing_is_a_no_op_and_all_releases_everything() {
        let mut c = joined();
        let a = client(&mut c, 10);
        hold(&mut c, a, "r1", 1);
        let release = |c: &mut TestCore, all: bool| {
            begin(c, a, SM_CMD_RELEASE);
            let req = CoreRequest::Release {
                keys: Vec::new(),
                all,
                rename: None,
            };
            step(c, 102, Input::Command { target: a, req })
        };
        let fx = release(&mut c, false);
        assert_eq!(replies(&fx), vec![(a, ReqKind::Release, 0)]);
        assert!(disk_ops(&fx).is_empty());
        assert_eq!(c.tables.clients.slots[&a].tokens.len(), 1);
        assert_eq!(
            c.tables.clients.slots[&a].cmd_active, 0,
            "the command ended"
        );
        let fx = release(&mut c, true);
        assert_eq!(disk_ops(&fx).len(), 1, "{fx:?}");
        assert!(c.tables.clients.slots[&a].tokens.is_empty());
    }

    /// A CONVERT the shell began: the disk convert carries the request's flags and the
    /// lease's disks; a failure that changed the lease on the way keeps that state for
    /// the release, and the answer is the failure's code.
    #[test]
    fn a_begun_convert_carries_its_flags_and_a_half_way_failure_keeps_its_state() {
        let mut c = joined();
        let a = client(&mut c, 10);
        hold(&mut c, a, "r1", 1);
        begin(&mut c, a, SM_CMD_CONVERT);
        let key = (name("ls"), name("r1"));
        let fx = step(
            &mut c,
            102,
            Input::Command {
                target: a,
                req: CoreRequest::Convert {
                    key,
                    to_shared: true,
                    cmd_flags: 0x4,
                },
            },
        );
        let [Effect::Disk {
            op,
            what:
                DiskOp::Convert {
                    cmd_flags,
                    to_shared: true,
                    ..
                },
            ..
        }] = fx.as_slice()
        else {
            panic!("one disk convert: {fx:?}")
        };
        assert_eq!(*cmd_flags, 0x4);
        let fx = step(
            &mut c,
            103,
            Input::DiskDone {
                op: *op,
                result: Err(-EIO),
                failed_state: Some(Held { lver: 7 }),
            },
        );
        assert_eq!(replies(&fx), vec![(a, ReqKind::Convert, -EIO)]);
        let lr = &c.tables.resources[&key];
        assert_eq!(lr.held, Held { lver: 7 }, "the half-way state is kept");
        assert!(!lr.busy);
        assert_eq!(
            c.tables.clients.slots[&a].cmd_active, 0,
            "the command ended"
        );
    }

    /// A dead holder's persistent lease becomes an orphan (no disk I/O); the shell's
    /// orphan release (`ReleaseOrphans`) then releases it on disk.
    #[test]
    fn a_dead_holders_persistent_lease_is_orphaned_then_released_for_the_shell() {
        let mut c = joined();
        let a = client(&mut c, 10);
        let fx = acquire(
            &mut c,
            101,
            a,
            vec![ResSpec {
                persistent: true,
                ..spec("p1", false)
            }],
        );
        let [(op, _, "acquire")] = disk_ops(&fx)[..] else {
            panic!("{fx:?}")
        };
        done(&mut c, 101, op, Ok(Held { lver: 4 }));
        let tokens = c.tables.take_all_tokens(a);
        let fx = step(
            &mut c,
            102,
            Input::ReleaseTokens {
                ci: a,
                tokens,
                dying: true,
            },
        );
        assert!(fx.is_empty(), "an orphan needs no disk I/O: {fx:?}");
        let key = (name("ls"), name("p1"));
        assert!(c.tables.resources[&key].orphan);
        let fx = step(
            &mut c,
            103,
            Input::ReleaseOrphans {
                ls: name("ls"),
                name: Name::EMPTY,
            },
        );
        let [(op, k, "release")] = disk_ops(&fx)[..] else {
            panic!("{fx:?}")
        };
        assert_eq!(k, key);
        assert!(c.tables.resources[&key].busy);
        done(&mut c, 104, op, Ok(Held::default()));
        assert!(!c.tables.resources.contains_key(&key));
    }

    /// Clients A (holding `ls:r1`) and B, and A's RELEASE of all at 102 (its disk
    /// release asked for, not ended): the core and those effects.
    fn a_holds_r1_and_releases_it() -> (TestCore, u32, u32, Fx) {
        let mut c = joined();
        let (a, b) = (client(&mut c, 10), client(&mut c, 11));
        hold(&mut c, a, "r1", 1);
        let fx = step(
            &mut c,
            102,
            Input::Request {
                ci: a,
                req: CoreRequest::Release {
                    keys: Vec::new(),
                    all: true,
                    rename: None,
                },
            },
        );
        (c, a, b, fx)
    }

    #[test]
    fn release_is_answered_only_after_the_disk_release_and_a_local_acquire_waits_for_it() {
        let (mut c, a, b, fx) = a_holds_r1_and_releases_it();
        let [(rel, key, "release")] = disk_ops(&fx)[..] else {
            panic!("{fx:?}")
        };
        assert!(replies(&fx).is_empty(), "answered before the disk: {fx:?}");
        assert!(c.tables.resources[&key].releasing);
        // B asks meanwhile: no disk acquire yet, no answer; it waits for the release.
        let fx = acquire(&mut c, 102, b, vec![spec("r1", false)]);
        assert!(fx.is_empty(), "{fx:?}");
        let fx = done(&mut c, 103, rel, Ok(Held::default()));
        assert_eq!(replies(&fx), vec![(a, ReqKind::Release, 0)]);
        let ops = disk_ops(&fx);
        assert!(
            matches!(ops[..], [(_, k, "acquire")] if k == key),
            "B goes on after the release: {fx:?}"
        );
        let reply_at = fx.iter().position(|e| matches!(e, Effect::Reply { .. }));
        let acquire_at = fx.iter().position(|e| matches!(e, Effect::Disk { .. }));
        assert!(reply_at < acquire_at);
    }

    /// An acquire that waits for a release here is answered -EAGAIN at the first tick
    /// past `release_wait_s` (the shell's wait before, now the core's decision); the
    /// release then ends without resuming it.
    #[test]
    fn an_acquire_waiting_past_the_release_wait_is_answered_eagain_at_the_tick() {
        let (mut c, a, b, fx) = a_holds_r1_and_releases_it();
        let [(rel, _, "release")] = disk_ops(&fx)[..] else {
            panic!("{fx:?}")
        };
        assert!(acquire(&mut c, 102, b, vec![spec("r1", false)]).is_empty());
        let until = 102 + release_wait_s(IO_S);
        let fx = step(&mut c, until - 1, Input::Tick);
        assert!(replies(&fx).is_empty(), "still within the wait: {fx:?}");
        let fx = step(&mut c, until, Input::Tick);
        assert_eq!(replies(&fx), vec![(b, ReqKind::Acquire, -EAGAIN)]);
        assert!(disk_ops(&fx).is_empty(), "{fx:?}");
        assert!(!c.cmds.contains_key(&b), "B's command ended");
        assert!(
            c.tables.clients.slots[&b].waiting.is_some(),
            "a busy refusal makes B a candidate for the lease (STATUS waiting=)"
        );
        let fx = done(&mut c, until + 1, rel, Ok(Held::default()));
        assert_eq!(replies(&fx), vec![(a, ReqKind::Release, 0)]);
        assert!(disk_ops(&fx).is_empty(), "nobody waits any more: {fx:?}");
        assert!(c.tables.resources.is_empty());
    }

    /// The request's flags and the lease version it requires go to the disk acquire; the
    /// options' name names the client; a busy refusal is noted, a success clears it.
    #[test]
    fn an_acquire_carries_its_flags_lver_and_sender_to_the_disk_and_names_its_client() {
        let sender = || crate::FsCreds {
            uid: 1000,
            gid: 1001,
            groups: vec![6, 1002],
        };
        let mut c = joined();
        let a = client(&mut c, 10);
        let flags = client_lib::proto::SANLK_ACQUIRE_OWNER_NOWAIT;
        let req = |c: &mut TestCore, now: u64| {
            step(
                c,
                now,
                Input::Request {
                    ci: a,
                    req: CoreRequest::Acquire {
                        res: vec![ResSpec {
                            lver: Some(7),
                            new_num_hosts: Some(4),
                            ..spec("r1", false)
                        }],
                        cmd_flags: flags,
                        owner_name: name("vm-7"),
                        opener: Some(sender()),
                    },
                },
            )
        };
        let fx = req(&mut c, 101);
        let op = match fx.as_slice() {
            [Effect::Disk {
                op,
                client: Some(ci),
                what:
                    DiskOp::Acquire {
                        want_lver: Some(7),
                        new_num_hosts: Some(4),
                        cmd_flags,
                        opener: Some(opener),
                        ..
                    },
                ..
            }] if *cmd_flags == flags && *ci == a && *opener == sender() => *op,
            other => panic!(
                "one disk acquire for the client with lver 7, 4 hosts, the flags and the \
                 sender's credentials: {other:?}"
            ),
        };
        assert_eq!(c.tables.clients.slots[&a].owner_name, name("vm-7"));
        let fx = done(&mut c, 102, op, Err(disk_format::rv::SANLK_ACQUIRE_IDLIVE));
        assert_eq!(
            replies(&fx),
            vec![(a, ReqKind::Acquire, disk_format::rv::SANLK_ACQUIRE_IDLIVE)]
        );
        assert!(c.tables.clients.slots[&a].waiting.is_some());
        let [(op, _, "acquire")] = disk_ops(&req(&mut c, 103))[..] else {
            panic!("tried again")
        };
        let fx = done(&mut c, 104, op, Ok(Held { lver: 7 }));
        assert_eq!(replies(&fx), vec![(a, ReqKind::Acquire, 0)]);
        assert!(c.tables.clients.slots[&a].waiting.is_none());
    }

    #[test]
    fn a_failed_lease_of_a_multi_lease_acquire_gives_back_the_ones_taken() {
        let mut c = joined();
        let a = client(&mut c, 10);
        let fx = acquire(&mut c, 101, a, vec![spec("r1", false), spec("r2", true)]);
        let [(op1, k1, "acquire")] = disk_ops(&fx)[..] else {
            panic!("{fx:?}")
        };
        let fx = done(&mut c, 101, op1, Ok(Held { lver: 3 }));
        assert!(replies(&fx).is_empty());
        let [(op2, _, "acquire")] = disk_ops(&fx)[..] else {
            panic!("{fx:?}")
        };
        let fx = done(&mut c, 102, op2, Err(-EAGAIN));
        assert_eq!(replies(&fx), vec![(a, ReqKind::Acquire, -EAGAIN)]);
        let [(rel, k, "release")] = disk_ops(&fx)[..] else {
            panic!("the first lease is given back: {fx:?}")
        };
        assert_eq!(k, k1);
        assert!(c.tables.clients.slots[&a].tokens.is_empty());
        done(&mut c, 103, rel, Ok(Held::default()));
        assert!(c.tables.resources.is_empty());
        assert!(c.cmds.is_empty() && c.ops.is_empty());
    }

    #[test]
    fn an_acquire_ending_after_the_lockspace_was_lost_is_given_back() {
        let mut c = joined();
        let a = client(&mut c, 10);
        let fx = acquire(&mut c, 101, a, vec![spec("r1", false)]);
        let [(op, _, "acquire")] = disk_ops(&fx)[..] else {
            panic!("{fx:?}")
        };
        let fail = timeouts::id_renewal_fail_seconds(IO_S);
        let fx = step(&mut c, 100 + fail, Input::Tick);
        assert!(fx
            .iter()
            .any(|e| matches!(e, Effect::LockspaceFailed { .. })));
        assert!(
            !fx.iter().any(|e| matches!(e, Effect::Kill { .. })),
            "no holder yet: {fx:?}"
        );
        let fx = done(&mut c, 100 + fail, op, Ok(Held { lver: 5 }));
        assert_eq!(replies(&fx), vec![(a, ReqKind::Acquire, -ENOSPC)]);
        let [(rel, _, "release")] = disk_ops(&fx)[..] else {
            panic!("{fx:?}")
        };
        assert!(c.tables.clients.slots[&a].tokens.is_empty());
        // Once the lease is back on disk, the lost lockspace goes.
        let fx = done(&mut c, 100 + fail + 1, rel, Ok(Held::default()));
        assert!(fx.contains(&Effect::LockspaceGone {
            ls: name("ls"),
            lost: true
        }));
    }

    #[test]
    fn a_client_dying_mid_acquire_gets_no_reply_and_its_lease_is_released_after() {
        let mut c = joined();
        let a = client(&mut c, 10);
        let fx = acquire(&mut c, 101, a, vec![spec("r1", false)]);
        let [(op, key, "acquire")] = disk_ops(&fx)[..] else {
            panic!("{fx:?}")
        };
        let fx = step(&mut c, 101, Input::Closed { ci: a });
        assert!(fx.is_empty(), "{fx:?}");
        assert!(
            c.tables.clients.slots[&a].pid_dead,
            "kept until the command ends"
        );
        let fx = done(&mut c, 102, op, Ok(Held { lver: 2 }));
        assert!(replies(&fx).is_empty(), "{fx:?}");
        let [(rel, k, "release")] = disk_ops(&fx)[..] else {
            panic!("a dead holder's lease is released: {fx:?}")
        };
        assert_eq!(k, key);
        assert!(!c.tables.clients.slots.contains_key(&a));
        done(&mut c, 103, rel, Ok(Held::default()));
        assert!(c.tables.resources.is_empty());
    }

    #[test]
    fn a_lost_lease_gives_its_request_made_holders_the_notice_before_the_kill() {
        let mut c = joined();
        let (a, _idle) = (client(&mut c, 10), client(&mut c, 11));
        hold(&mut c, a, "r1", 1);
        step(
            &mut c,
            105,
            Input::RenewalFailed {
                id: 1,
                code: -EIO,
                corrupt: false,
            },
        );
        let fail = timeouts::id_renewal_fail_seconds(IO_S);
        let fx = step(&mut c, 100 + fail, Input::Tick);
        let notice = fx.iter().position(|e| {
            matches!(e, Effect::LossNotice { kind: WatchKind::LockspaceFailed, pids, .. } if pids == &[10])
        });
        let kills: Vec<(usize, i32)> = fx
            .iter()
            .enumerate()
            .filter_map(|(i, e)| match e {
                Effect::Kill {
                    order: KillOrder::Signal { pid, .. },
                    ..
                } => Some((i, *pid)),
                _ => None,
            })
            .collect();
        let notice = notice.expect("a notice");
        assert_eq!(kills.len(), 1, "only the holder is killed: {fx:?}");
        assert_eq!(kills[0].1, 10);
        assert!(notice < kills[0].0, "{fx:?}");
        // A new acquire in the lost lockspace is refused.
        let b = client(&mut c, 12);
        let fx = acquire(&mut c, 100 + fail, b, vec![spec("r2", false)]);
        assert_eq!(replies(&fx), vec![(b, ReqKind::Acquire, -ENOSPC)]);
    }

    #[test]
    fn check_finds_a_disk_operation_on_a_freed_resource_and_a_command_without_its_slot() {
        let mut c = joined();
        let a = client(&mut c, 10);
        hold(&mut c, a, "r1", 1);
        let fx = step(
            &mut c,
            102,
            Input::Request {
                ci: a,
                req: CoreRequest::Release {
                    keys: Vec::new(),
                    all: true,
                    rename: None,
                },
            },
        );
        let [(_, key, "release")] = disk_ops(&fx)[..] else {
            panic!("{fx:?}")
        };
        // What release-before-disk does: the slot freed while the release runs.
        c.tables.finish_release(&key);
        assert!(c.check().unwrap_err().contains("not busy"));
        c.ops.clear();
        c.tables.clients.slots.get_mut(&a).expect("slot").cmd_active = 0;
        assert!(c.check().unwrap_err().contains("no active slot"));
    }

    #[test]
    fn a_convert_failing_half_way_keeps_its_new_state_for_the_release() {
        let mut c = joined();
        let a = client(&mut c, 10);
        let fx = acquire(&mut c, 101, a, vec![spec("r1", true)]);
        let [(op, key, "acquire")] = disk_ops(&fx)[..] else {
            panic!("{fx:?}")
        };
        done(&mut c, 101, op, Ok(Held { lver: 4 }));
        let fx = step(
            &mut c,
            102,
            Input::Request {
                ci: a,
                req: CoreRequest::Convert {
                    key,
                    to_shared: false,
                    cmd_flags: 0,
                },
            },
        );
        let [(op, _, "convert")] = disk_ops(&fx)[..] else {
            panic!("{fx:?}")
        };
        // The ballot ran (our dblock is newer), then live shared holders made it fail.
        let fx = step(
            &mut c,
            103,
            Input::DiskDone {
                op,
                result: Err(-EAGAIN),
                failed_state: Some(Held { lver: 5 }),
            },
        );
        assert_eq!(replies(&fx), vec![(a, ReqKind::Convert, -EAGAIN)]);
        assert!(c.tables.resources[&key].shared, "still shared");
        let fx = step(
            &mut c,
            104,
            Input::Request {
                ci: a,
                req: CoreRequest::Release {
                    keys: Vec::new(),
                    all: true,
                    rename: None,
                },
            },
        );
        let released: Vec<u64> = fx
            .iter()
            .filter_map(|e| match e {
                Effect::Disk {
                    what: DiskOp::Release { held, .. },
                    ..
                } => Some(held.lver),
                _ => None,
            })
            .collect();
        assert_eq!(
            released,
            vec![5],
            "released with the convert's state: {fx:?}"
        );
    }

    #[test]
    fn register_names_the_client_after_its_pid_and_a_killpaths_end_is_kept_for_status() {
        let mut c = joined();
        let ci = client(&mut c, 4321);
        let slot = &c.tables.clients.slots[&ci];
        assert!(slot.registered);
        assert_eq!(slot.owner_name.to_text(), "4321");
        // A second REGISTER on the same connection gets no reply either, and leaves the
        // client registered under its pid.
        let fx = step(
            &mut c,
            100,
            Input::Request {
                ci,
                req: CoreRequest::Register,
            },
        );
        assert!(fx.is_empty(), "{fx:?}");
        assert_eq!(c.tables.clients.slots[&ci].pid, 4321);
        // The helper's report of a killpath reaches only a client of that pid that set one.
        let other = client(&mut c, 4322);
        let killpath = crate::KillPath {
            path: "/usr/libexec/fence-vm".into(),
            ..Default::default()
        };
        assert_eq!(c.tables.set_killpath(ci, killpath), Some(4321));
        let fx = step(
            &mut c,
            101,
            Input::KillpathEnded {
                pid: 4321,
                status: "exit:0".into(),
            },
        );
        assert!(fx.is_empty(), "{fx:?}");
        let status = |c: &TestCore, ci: u32| c.tables.clients.slots[&ci].killpath_status.clone();
        assert_eq!(status(&c, ci).as_deref(), Some("exit:0"));
        assert_eq!(status(&c, other), None);
        step(
            &mut c,
            102,
            Input::KillpathEnded {
                pid: 4322,
                status: "signal:9".into(),
            },
        );
        assert_eq!(status(&c, other), None, "no killpath was set for that pid");
    }

    #[test]
    fn a_dead_holders_persistent_lease_is_an_orphan_until_adopted_or_released() {
        let mut c = joined();
        let admin = connect(&mut c, 1);
        let (a, b) = (client(&mut c, 10), client(&mut c, 11));
        let mut persistent = spec("r1", false);
        persistent.persistent = true;
        let fx = acquire(&mut c, 101, a, vec![persistent.clone()]);
        let [(op, key, "acquire")] = disk_ops(&fx)[..] else {
            panic!("{fx:?}")
        };
        done(&mut c, 101, op, Ok(Held { lver: 2 }));
        // Its holder dies: no disk release, an orphan.
        let fx = step(&mut c, 102, Input::Closed { ci: a });
        assert!(disk_ops(&fx).is_empty(), "{fx:?}");
        assert!(c.tables.resources[&key].orphan);
        // Adopted only when asked to, at once and with no disk I/O.
        let fx = acquire(&mut c, 103, b, vec![persistent.clone()]);
        assert_eq!(replies(&fx), vec![(b, ReqKind::Acquire, -EUCLEAN)]);
        let fx = step(
            &mut c,
            103,
            Input::Request {
                ci: b,
                req: CoreRequest::Acquire {
                    res: vec![persistent.clone()],
                    cmd_flags: client_lib::proto::SANLK_ACQUIRE_ORPHAN,
                    owner_name: Name::EMPTY,
                    opener: None,
                },
            },
        );
        assert!(disk_ops(&fx).is_empty());
        assert_eq!(replies(&fx), vec![(b, ReqKind::Acquire, 0)]);
        // Orphaned again, then released by REL_ORPHAN, answered after the disk.
        step(&mut c, 104, Input::Closed { ci: b });
        let fx = step(
            &mut c,
            105,
            Input::Request {
                ci: admin,
                req: CoreRequest::ReleaseOrphans {
                    ls: name("ls"),
                    name: Name::EMPTY,
                },
            },
        );
        assert!(replies(&fx).is_empty());
        let [(rel, _, "release")] = disk_ops(&fx)[..] else {
            panic!("{fx:?}")
        };
        let fx = done(&mut c, 106, rel, Ok(Held::default()));
        assert_eq!(replies(&fx), vec![(admin, ReqKind::ReleaseOrphans, 0)]);
        assert!(c.tables.resources.is_empty());
    }

    #[test]
    fn removing_a_lockspace_releases_its_orphans() {
        let mut c = joined();
        let admin = connect(&mut c, 1);
        let a = client(&mut c, 10);
        hold_persistent(&mut c, a);
        step(&mut c, 102, Input::Closed { ci: a });
        let fx = step(
            &mut c,
            103,
            Input::Request {
                ci: admin,
                req: rem(false, true),
            },
        );
        let [(rel, _, "release")] = disk_ops(&fx)[..] else {
            panic!("the orphan is released: {fx:?}")
        };
        let fx = done(&mut c, 104, rel, Ok(Held::default()));
        assert!(fx.contains(&Effect::LockspaceGone {
            ls: name("ls"),
            lost: false
        }));
        assert_eq!(replies(&fx), vec![(admin, ReqKind::RemLockspace, 0)]);
    }

    #[test]
    fn convert_answers_after_the_disk_and_takes_the_new_mode() {
        let mut c = joined();
        let a = client(&mut c, 10);
        hold(&mut c, a, "r1", 1);
        let key = spec("r1", false).key();
        let fx = step(
            &mut c,
            102,
            Input::Request {
                ci: a,
                req: CoreRequest::Convert {
                    key,
                    to_shared: true,
                    cmd_flags: 0,
                },
            },
        );
        assert!(replies(&fx).is_empty());
        let [(op, _, "convert")] = disk_ops(&fx)[..] else {
            panic!("{fx:?}")
        };
        let fx = done(&mut c, 102, op, Ok(Held { lver: 1 }));
        assert_eq!(replies(&fx), vec![(a, ReqKind::Convert, 0)]);
        assert!(c.tables.resources[&key].shared);
        let fx = step(
            &mut c,
            103,
            Input::Request {
                ci: a,
                req: CoreRequest::Inquire,
            },
        );
        match &fx[..] {
            [Effect::Reply { reply, .. }] => {
                assert_eq!(reply.leases.len(), 1);
                assert!(reply.leases[0].shared);
            }
            other => panic!("{other:?}"),
        }
    }

    /// REM_LOCKSPACE of "ls": `unused_only` (REM_UNUSED), `wait` (not REM_ASYNC).
    fn rem(unused_only: bool, wait: bool) -> CoreRequest {
        CoreRequest::RemLockspace {
            ls: name("ls"),
            id: None,
            unused_only,
            wait,
        }
    }

    fn sigkill_of(fx: &Fx, pid: i32) -> bool {
        fx.iter().any(|e| {
            matches!(
                e,
                Effect::Kill {
                    order: KillOrder::Signal { pid: p, sig: crate::kill::SIGKILL, .. },
                    ..
                } if *p == pid
            )
        })
    }

    fn removed_notice(pids: &[i32]) -> Effect<Held> {
        Effect::LossNotice {
            ls: name("ls"),
            kind: WatchKind::LockspaceRemoved,
            pids: pids.to_vec(),
            to: Vec::new(),
            // Every test lockspace here was joined at 100.
            lease: Some(crate::io::LeaseTimes {
                last_success_s: 100,
                expires_at_s: 100 + timeouts::id_renewal_fail_seconds(IO_S),
            }),
        }
    }

    #[test]
    fn removing_a_lockspace_tells_its_holders_then_kills_them_then_it_goes() {
        let mut c = joined();
        let admin = connect(&mut c, 1);
        let a = client(&mut c, 10);
        hold(&mut c, a, "r1", 1);
        let fx = step(
            &mut c,
            103,
            Input::Request {
                ci: admin,
                req: rem(false, true),
            },
        );
        // The notice is given in the step that decides the removal, before any tick.
        assert_eq!(fx, vec![removed_notice(&[10])]);
        let fx = step(&mut c, 104, Input::Tick);
        assert!(!fx.iter().any(|e| matches!(e, Effect::LossNotice { .. })));
        assert!(sigkill_of(&fx, 10), "{fx:?}");
        let fx = step(&mut c, 104, Input::Closed { ci: a });
        let [(rel, _, "release")] = disk_ops(&fx)[..] else {
            panic!("{fx:?}")
        };
        let fx = done(&mut c, 105, rel, Ok(Held::default()));
        assert!(fx.contains(&Effect::LockspaceGone {
            ls: name("ls"),
            lost: false
        }));
        assert_eq!(replies(&fx), vec![(admin, ReqKind::RemLockspace, 0)]);
        assert!(c.spaces.is_empty());
    }

    #[test]
    fn a_lost_lease_is_noticed_to_its_holders_watch_connections_before_the_kill() {
        let mut c = joined();
        let a = client(&mut c, 10);
        let b = client(&mut c, 11);
        hold(&mut c, a, "r1", 1);
        hold(&mut c, b, "r2", 1);
        // Two watches of pid 10 (its own connection, and root's), one of 11 that closes.
        let w10 = connect(&mut c, 10);
        let w10_root = connect(&mut c, 1);
        let w11 = connect(&mut c, 11);
        for (ci, pid) in [(w10, 0), (w10_root, 10), (w11, 0)] {
            let fx = step(
                &mut c,
                101,
                Input::Request {
                    ci,
                    req: CoreRequest::Watch { pid },
                },
            );
            assert_eq!(replies(&fx), vec![(ci, ReqKind::Watch, 0)]);
        }
        assert_eq!(c.watches.len(), 3);
        assert!(step(&mut c, 101, Input::Closed { ci: w11 }).is_empty());
        assert_eq!(c.watches.len(), 2);
        // The heartbeat: each watch with its process's lease count.
        let fx = step(&mut c, 101, Input::WatchTick);
        assert_eq!(
            fx,
            vec![Effect::WatchBeats {
                beats: vec![
                    WatchBeat {
                        ci: w10,
                        pid: 10,
                        leases: 1
                    },
                    WatchBeat {
                        ci: w10_root,
                        pid: 10,
                        leases: 1
                    },
                ]
            }]
        );
        // The lease is lost: the notice names both holders and goes to the open watches.
        let fx = step(&mut c, 100 + 200, Input::Tick);
        let notice = fx
            .iter()
            .position(|e| {
                matches!(
                    e,
                    Effect::LossNotice {
                        kind: WatchKind::LockspaceFailed,
                        ..
                    }
                )
            })
            .expect("a loss notice");
        let Effect::LossNotice { pids, to, .. } = &fx[notice] else {
            unreachable!()
        };
        assert_eq!(pids, &[10, 11]);
        assert_eq!(
            to,
            &[
                WatchTo { ci: w10, pid: 10 },
                WatchTo {
                    ci: w10_root,
                    pid: 10
                }
            ]
        );
        let first_kill = fx
            .iter()
            .position(|e| matches!(e, Effect::Kill { .. }))
            .expect("kill orders");
        assert!(notice < first_kill, "{fx:?}");
        // A watch the shell could not write to is dropped.
        assert!(step(&mut c, 301, Input::WatchDropped { ci: w10 }).is_empty());
        assert_eq!(
            c.watches.of(&[10]),
            vec![WatchTo {
                ci: w10_root,
                pid: 10
            }]
        );
    }

    #[test]
    fn a_watch_is_refused_without_a_pid_or_for_another_users_process() {
        let mut c = joined();
        let user = step(
            &mut c,
            100,
            Input::Connected {
                fd: -1,
                pid: 77,
                uid: 1000,
                stream: None,
                replacing_own: false,
            },
        );
        let [Effect::Accepted { ci: user }] = user[..] else {
            panic!("{user:?}")
        };
        let _other = client(&mut c, 10);
        // A connection whose slot went meanwhile is still answered, once.
        let fx = step(
            &mut c,
            101,
            Input::Request {
                ci: 999,
                req: CoreRequest::Watch { pid: 0 },
            },
        );
        assert_eq!(replies(&fx), vec![(999, ReqKind::Watch, -EINVAL)]);
        for (pid, rv) in [(-5, -EINVAL), (10, -EPERM), (0, 0)] {
            let fx = step(
                &mut c,
                101,
                Input::Request {
                    ci: user,
                    req: CoreRequest::Watch { pid },
                },
            );
            assert_eq!(replies(&fx), vec![(user, ReqKind::Watch, rv)], "pid {pid}");
        }
    }

    /// A core whose lockspace "ls" the shell listed under id 7 and joined at 100.
    fn shells_joined() -> TestCore {
        let mut c = TestCore::new(40);
        c.add_space(7, name("ls"), IO_S);
        let st = c.space_st_mut(7).expect("listed");
        st.add_result = Some(0);
        st.phase = Phase::Joined;
        st.renewal_ok(
            100,
            RenewalRec {
                timestamp: 100,
                read_ms: 1,
                write_ms: 0,
                write_sent_ms: 100_000,
                ended_ms: 100_001,
            },
        );
        c
    }

    /// [`shells_joined`], an administrator's connection, and client `a` (pid 10)
    /// holding "r1": (core, admin, a).
    fn shells_joined_with_holder() -> (TestCore, u32, u32) {
        let mut c = shells_joined();
        let admin = connect(&mut c, 1);
        let a = client(&mut c, 10);
        hold(&mut c, a, "r1", 1);
        (c, admin, a)
    }

    fn refusal(fx: &Fx) -> Option<(i32, Option<&'static str>)> {
        match fx.as_slice() {
            [Effect::Reply { reply, .. }] => Some((reply.rv, reply.why)),
            _ => None,
        }
    }

    /// A holder of a persistent lease that dies while the shell removes its lockspace
    /// (seen in the chaos bed: a lease left as an orphan 0.2 s after REM_LOCKSPACE
    /// began) leaves an orphan the removal's start did not see; the next tick releases
    /// it, so the lease leaves the table and the lockspace can end. Kept, it held the
    /// removal (and the renewals) up for good.
    #[test]
    fn an_orphan_left_during_the_shells_removal_is_released_and_the_lockspace_can_end() {
        let mut c = shells_joined();
        let admin = connect(&mut c, 1);
        let a = client(&mut c, 10);
        hold_persistent(&mut c, a);
        let fx = step(
            &mut c,
            103,
            Input::Request {
                ci: admin,
                req: rem(false, true),
            },
        );
        assert!(disk_ops(&fx).is_empty(), "no orphan yet: {fx:?}");
        // The holder dies during the removal: its lease becomes an orphan.
        let fx = step(&mut c, 104, Input::Closed { ci: a });
        assert!(disk_ops(&fx).is_empty(), "{fx:?}");
        assert!(c.tables.space_in_use(&name("ls")));
        let fx = step(&mut c, 105, Input::Tick);
        let [(rel, _, "release")] = disk_ops(&fx)[..] else {
            panic!("the orphan is released: {fx:?}")
        };
        done(&mut c, 106, rel, Ok(Held::default()));
        assert!(
            !c.tables.space_in_use(&name("ls")),
            "no lease of the lockspace is left: its thread can end"
        );
        let fx = step(&mut c, 107, Input::LockspaceEnded { id: 7 });
        assert_eq!(replies(&fx), vec![(admin, ReqKind::RemLockspace, 0)]);
    }

    #[test]
    fn the_shells_lockspace_is_removed_notice_first_and_answered_when_its_thread_ended() {
        let (mut c, admin, a) = shells_joined_with_holder();
        let request = |req| Input::Request { ci: admin, req };
        let fx = step(&mut c, 103, request(rem(false, true)));
        assert_eq!(
            fx,
            vec![
                removed_notice(&[10]),
                Effect::StopLockspace {
                    ls: name("ls"),
                    id: 7
                }
            ]
        );
        let st = c.space_st(7).expect("listed");
        assert!(st.kill_now && st.phase == Phase::Removing && !st.gone);
        assert!(!c.space_usable(&name("ls")));
        // A second removal is refused while this one runs.
        let fx = step(&mut c, 103, request(rem(false, false)));
        assert_eq!(
            refusal(&fx),
            Some((-EINPROGRESS, Some("a removal is in progress")))
        );
        let fx = step(&mut c, 104, Input::Tick);
        assert!(sigkill_of(&fx, 10), "{fx:?}");
        let fx = step(&mut c, 104, Input::Closed { ci: a });
        let [(rel, _, "release")] = disk_ops(&fx)[..] else {
            panic!("{fx:?}")
        };
        // The lease's release ends; the lockspace is the shell's to end: nothing goes,
        // nobody is answered yet.
        let fx = done(&mut c, 105, rel, Ok(Held::default()));
        assert!(replies(&fx).is_empty(), "{fx:?}");
        assert!(!fx.iter().any(|e| matches!(
            e,
            Effect::LockspaceGone { .. } | Effect::RetireLockspace { .. }
        )));
        let fx = step(&mut c, 106, Input::Tick);
        assert!(
            fx.iter().all(|e| matches!(e, Effect::Status(_))),
            "nothing but the status line: {fx:?}"
        );
        let fx = step(&mut c, 107, Input::LockspaceEnded { id: 7 });
        assert_eq!(replies(&fx), vec![(admin, ReqKind::RemLockspace, 0)]);
        assert!(c.space_st(7).expect("kept a while").gone);
        assert!(c.space(&name("ls")).is_none());
        // Ended twice (a late report): nothing more.
        assert!(step(&mut c, 108, Input::LockspaceEnded { id: 7 }).is_empty());
    }

    #[test]
    fn removal_is_refused_while_leases_or_kept_orphans_are_in_it_and_async_is_answered_at_once() {
        let (mut c, admin, _) = shells_joined_with_holder();
        let request = |req| Input::Request { ci: admin, req };
        let fx = step(&mut c, 103, request(rem(true, true)));
        assert_eq!(
            refusal(&fx),
            Some((-EBUSY, Some("leases are held in it (REM_UNUSED)")))
        );
        let fx = step(
            &mut c,
            103,
            request(CoreRequest::RemLockspace {
                ls: name("ls"),
                id: Some(8),
                unused_only: false,
                wait: true,
            }),
        );
        assert_eq!(
            refusal(&fx),
            Some((-ENOENT, None)),
            "another id: not this one"
        );
        // An orphan that SET_CONFIG keeps refuses the removal.
        let mut persistent = spec("r2", false);
        persistent.persistent = true;
        let b = client(&mut c, 11);
        let fx = acquire(&mut c, 104, b, vec![persistent]);
        let [(op, _, "acquire")] = disk_ops(&fx)[..] else {
            panic!("{fx:?}")
        };
        done(&mut c, 104, op, Ok(Held { lver: 1 }));
        step(&mut c, 105, Input::Closed { ci: b });
        c.space_st_mut(7).expect("listed").used_by_orphans = true;
        let fx = step(&mut c, 106, request(rem(false, true)));
        assert_eq!(
            refusal(&fx),
            Some((-EBUSY, Some("its orphan leases are in use (SET_CONFIG)")))
        );
        assert_eq!(c.space_st(7).map(|st| st.phase), Some(Phase::Joined));
        // Let go: the orphan is released, the holder told, and REM_ASYNC answered now.
        c.space_st_mut(7).expect("listed").used_by_orphans = false;
        let fx = step(&mut c, 107, request(rem(false, false)));
        let [(_, key, "release")] = disk_ops(&fx)[..] else {
            panic!("the orphan's release: {fx:?}")
        };
        assert_eq!(key.1, name("r2"));
        let notice = fx.iter().position(|e| *e == removed_notice(&[10]));
        let stop = fx
            .iter()
            .position(|e| matches!(e, Effect::StopLockspace { id: 7, .. }));
        assert!(notice.is_some() && stop > notice, "{fx:?}");
        assert_eq!(replies(&fx), vec![(admin, ReqKind::RemLockspace, 0)]);
    }

    #[test]
    fn a_join_the_shell_ran_answers_its_add_and_one_removed_meanwhile_gets_minus_one() {
        let mut c = TestCore::new(40);
        let admin = connect(&mut c, 1);
        let lease = JoinedLease {
            generation: 3,
            last_success_s: 120,
            write_sent_ms: 120_300,
            ended_ms: 120_900,
        };
        // Joined: answered 0, usable, its lease's time kept.
        c.add_space(7, name("ls"), IO_S);
        assert!(step(
            &mut c,
            121,
            Input::JoinEnded {
                id: 7,
                result: Ok(lease)
            }
        )
        .is_empty());
        let st = c.space_st(7).expect("listed");
        assert_eq!((st.add_result, st.phase), (Some(0), Phase::Joined));
        assert_eq!((st.host_generation, st.last_success_s), (3, 120));
        assert_eq!(st.acquire_last_success, 121);
        assert!(c.space_usable(&name("ls")));
        // The join's write starts the renewal history: a stall from it to the first
        // renewal's end is our record's stillness even once that renewal succeeded.
        assert_eq!(st.longest_renewal_gap_ms(100, 121_000), 700);
        let first = RenewalRec {
            timestamp: 128,
            read_ms: 5,
            write_ms: 0,
            write_sent_ms: 128_100,
            ended_ms: 128_200,
        };
        c.space_st_mut(7).expect("listed").renewal_ok(128, first);
        let st = c.space_st(7).expect("listed");
        assert_eq!(st.longest_renewal_gap_ms(100, 129_000), 128_200 - 120_300);
        // Removed while joining: the join's lease is answered -1, never usable.
        c.add_space(8, name("b"), IO_S);
        let req = CoreRequest::RemLockspace {
            ls: name("b"),
            id: Some(8),
            unused_only: false,
            wait: false,
        };
        let fx = step(&mut c, 122, Input::Request { ci: admin, req });
        assert!(
            fx.contains(&Effect::StopLockspace {
                ls: name("b"),
                id: 8
            }),
            "{fx:?}"
        );
        step(
            &mut c,
            123,
            Input::JoinEnded {
                id: 8,
                result: Ok(lease),
            },
        );
        let st = c.space_st(8).expect("listed");
        assert_eq!((st.add_result, st.phase), (Some(-1), Phase::Removing));
        assert!(!c.space_usable(&name("b")));
        // A failed join keeps its code; the lockspace goes when its thread ends.
        c.add_space(9, name("c"), IO_S);
        step(
            &mut c,
            124,
            Input::JoinEnded {
                id: 9,
                result: Err(-19),
            },
        );
        assert_eq!(c.space_st(9).and_then(|st| st.add_result), Some(-19));
        step(&mut c, 124, Input::LockspaceEnded { id: 9 });
        assert!(c.space_st(9).expect("kept a while").gone);
        // SET_CONFIG's flags are the core's too.
        let set = Input::SetConfig {
            id: 7,
            used_by_orphans: Some(true),
            external_used: None,
        };
        step(&mut c, 125, set);
        let st = c.space_st(7).expect("listed");
        assert!(st.used_by_orphans && !st.external_used);
    }

    #[test]
    fn a_removal_waiter_whose_client_goes_is_freed() {
        let mut c = shells_joined();
        let admin = connect(&mut c, 1);
        let fx = step(
            &mut c,
            103,
            Input::Request {
                ci: admin,
                req: rem(false, true),
            },
        );
        assert!(replies(&fx).is_empty(), "{fx:?}");
        let fx = step(&mut c, 104, Input::Closed { ci: admin });
        assert_eq!(
            replies(&fx),
            vec![(admin, ReqKind::RemLockspace, -ECANCELED)]
        );
        assert!(replies(&step(&mut c, 105, Input::LockspaceEnded { id: 7 })).is_empty());
    }

    /// A REM_LOCKSPACE read from a client whose process died meanwhile (its slot kept,
    /// `pid_dead`, for a command another connection runs on it) is still answered when
    /// the lockspace ends: the shell's worker waits for it.
    #[test]
    fn a_removal_from_a_client_whose_process_died_is_answered_all_the_same() {
        let mut c = shells_joined();
        let a = client(&mut c, 10);
        let target = CommandTarget {
            conn_ci: a,
            conn_uid: 0,
            cmd: SM_CMD_INQUIRE,
            cmd_flags: 0,
            data2: u32::MAX,
        };
        assert_eq!(c.tables.start_command(target), Ok(a));
        step(&mut c, 101, Input::Closed { ci: a });
        assert!(c.tables.clients.slots[&a].pid_dead, "kept for its command");
        let fx = step(
            &mut c,
            102,
            Input::Request {
                ci: a,
                req: rem(false, true),
            },
        );
        assert!(replies(&fx).is_empty(), "{fx:?}");
        let fx = step(&mut c, 103, Input::LockspaceEnded { id: 7 });
        assert_eq!(replies(&fx), vec![(a, ReqKind::RemLockspace, 0)]);
    }

    #[test]
    fn a_forced_shutdown_removes_every_lockspace_each_notice_before_its_kills() {
        let mut c = shells_joined();
        c.add_space(8, name("other"), IO_S);
        let a = client(&mut c, 10);
        hold(&mut c, a, "r1", 1);
        let fx = step(&mut c, 103, Input::Shutdown);
        assert_eq!(
            fx,
            vec![
                removed_notice(&[10]),
                Effect::StopLockspace {
                    ls: name("ls"),
                    id: 7
                },
                Effect::StopLockspace {
                    ls: name("other"),
                    id: 8
                },
            ]
        );
        assert!(step(&mut c, 103, Input::Shutdown).is_empty(), "once");
        assert!(sigkill_of(&step(&mut c, 104, Input::Tick), 10));
    }
}
