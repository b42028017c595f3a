//! The one owner of the daemon's client and resource state: the client table (one slot per
//! connection or `--for-pid` process, with the leases it holds) and the resource table
//! (one [`LocalRes`] per lease held on this host).
//!
//! Both tables live in one [`Tables`] value behind the daemon's single `tables` lock, so a
//! change that touches both (a client's end releasing its leases, an acquire recording its
//! holder) is one step, and there is no lock order between them. The lease lifecycle is a
//! set of transitions on `Tables` — start and finish an acquire, a convert or a release,
//! end a command or a client, open a `--for-pid` slot, pick orphans — each a plain function of the tables and its
//! arguments: no disk I/O, no socket, no other lock, no thread. The daemon's handlers (`cmd.rs`)
//! call a transition, do the disk I/O with no lock held, and report the outcome with the
//! matching `finish_*` transition; the unit tests below drive the same transitions with no
//! daemon at all. Every change of a slot's fields is a transition too (`note_command`,
//! `register_client`, `set_restrict`, `set_owner_name`, `set_killpath`, `killpath_ended`,
//! `note_acquire_result`, `change_held`); kill escalation's counters are changed by
//! the core's kill decision (`crate::kill`). The transitions are `pub(crate)`: only the
//! core's step calls them, and the daemon, which reads the tables, changes them by
//! stepping the core (`daemon/tests/module_graph.rs` fails on a direct write).
//!
//! Invariants, which [`Tables::check`] checks (the unit tests after every transition;
//! the daemon, in debug builds, whenever it lets go of the tables lock):
//! - a resource that is neither `busy` (disk I/O in flight) nor an `orphan` has at least
//!   one holder, and no slot is listed twice as its holder;
//! - only a shared resource has more than one holder;
//! - an orphan has no holder, and is `busy` only while released;
//! - a resource `releasing` is `busy`; a resource is filed under its own key;
//! - a client holds at most one token per (lockspace, resource), and each of its tokens
//!   names a resource in the table that lists the client as a holder, in the token's
//!   mode;
//! - a slot is filed under its own index, and there are at most `MAX_CLIENTS` slots.

use std::collections::HashMap;

use client_lib::proto::{
    SANLK_ACQUIRE_ORPHAN, SANLK_ACQUIRE_ORPHAN_ONLY, SANLK_FOR_CLIENT_ID, SM_CMD_ACQUIRE,
    SM_CMD_KILLPATH,
};
use client_lib::wire;
use disk_format::Name;

use crate::clients::{ClientToken, Clients, KillPath, LeaseHold, LocalRes, Waiting};
use crate::errno::*;

/// A lease's key: (lockspace, resource).
pub type Key = (Name, Name);

/// Why a transition refused: one reason each, with sanlock's code for it
/// ([`TableRefused::code`]) and its reason for the shell's log ([`TableRefused::why`]).
/// A refusal changes nothing in the tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableRefused {
    /// The client a command names (by id or pid) is not here (-ESRCH).
    NoSuchClient,
    /// The client is not registered, or its process is gone (-EBUSY).
    ClientNotReady,
    /// ACQUIRE on a client being killed (-EBUSY).
    ClientBeingKilled,
    /// Another command is running on the client (-EBUSY).
    CommandRunning,
    /// A command on another uid's client from a sender that is not root (-EPERM).
    NotYourClient,
    /// `--for-pid` for a process whose own registered client is here (-EEXIST).
    PidHasClient,
    /// No client slot is free (-EMFILE).
    NoFreeSlot,
    /// A `--for-pid` slot still holds a token, so it stays (-EBUSY).
    SlotHoldsTokens,
    /// The client holds the lease already (-EEXIST).
    HeldByClient,
    /// The lease is being released on disk here (-EAGAIN: try again when that ends).
    BeingReleased,
    /// Another local request is acquiring or converting the lease (-EBUSY).
    BeingAcquired,
    /// An orphan, and the flags do not adopt it, or not in its mode (-EUCLEAN).
    OrphanNotAdopted,
    /// Held here in a mode the request cannot share (-EEXIST).
    HeldHere,
    /// ORPHAN_ONLY, and no such orphan is here (-ENOENT).
    NoOrphan,
    /// The client does not hold the lease (-ENOENT).
    NotHeld,
    /// CONVERT to the mode the lease is in (-EALREADY).
    AlreadyInMode,
    /// CONVERT while the lease's disk I/O runs here (-EAGAIN).
    ConvertBusy,
    /// CONVERT to exclusive while other local holders share the lease (-EAGAIN: they
    /// would lose it).
    SharedByOthers,
}

impl TableRefused {
    /// Sanlock's code for the refusal: a negative errno.
    pub fn code(self) -> i32 {
        match self {
            TableRefused::NoSuchClient => -ESRCH,
            TableRefused::ClientNotReady
            | TableRefused::ClientBeingKilled
            | TableRefused::CommandRunning
            | TableRefused::SlotHoldsTokens
            | TableRefused::BeingAcquired => -EBUSY,
            TableRefused::NotYourClient => -EPERM,
            TableRefused::PidHasClient | TableRefused::HeldByClient | TableRefused::HeldHere => {
                -EEXIST
            }
            TableRefused::NoFreeSlot => -EMFILE,
            TableRefused::BeingReleased
            | TableRefused::ConvertBusy
            | TableRefused::SharedByOthers => -EAGAIN,
            TableRefused::OrphanNotAdopted => -EUCLEAN,
            TableRefused::NoOrphan | TableRefused::NotHeld => -ENOENT,
            TableRefused::AlreadyInMode => -EALREADY,
        }
    }

    /// The reason, for the shell's log.
    pub fn why(self) -> &'static str {
        match self {
            TableRefused::NoSuchClient => "no such client",
            TableRefused::ClientNotReady => "the client is not registered or its process is gone",
            TableRefused::ClientBeingKilled => "the client is being killed",
            TableRefused::CommandRunning => "another command is running on the client",
            TableRefused::NotYourClient => "the client is another user's",
            TableRefused::PidHasClient => "the process has a registered client of its own",
            TableRefused::NoFreeSlot => "no client slot is free",
            TableRefused::SlotHoldsTokens => "the slot still holds a lease",
            TableRefused::HeldByClient => "the client holds the lease already",
            TableRefused::BeingReleased => "the lease is being released here",
            TableRefused::BeingAcquired => "another request here is acquiring or converting it",
            TableRefused::OrphanNotAdopted => "an orphan, not adopted (flags or mode)",
            TableRefused::HeldHere => "held here in a mode that cannot be shared",
            TableRefused::NoOrphan => "no such orphan (ORPHAN_ONLY)",
            TableRefused::NotHeld => "the client does not hold the lease",
            TableRefused::AlreadyInMode => "the lease is in that mode already",
            TableRefused::ConvertBusy => "the lease's disk I/O is running here",
            TableRefused::SharedByOthers => "other holders here share it",
        }
    }
}

/// The client and resource tables (see the module header). `S` is the shell's handle of
/// a connection, `H` the on-disk state of a held lease (see [`crate::clients`]).
#[derive(Debug)]
pub struct Tables<S, H> {
    pub clients: Clients<S>,
    pub resources: HashMap<Key, LocalRes<H>>,
    /// The last token id given ([`Tables::new_token_id`]).
    last_token_id: u32,
}

impl<S, H> Default for Tables<S, H> {
    fn default() -> Tables<S, H> {
        Tables {
            clients: Clients::default(),
            resources: HashMap::new(),
            last_token_id: 0,
        }
    }
}

/// How an acquire goes on after [`Tables::start_acquire`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AcquireStart {
    /// Held at once without disk I/O: an orphan adopted, or shared with another local
    /// holder. The client is recorded as a holder; its token has this lver.
    Local { lver: u64, adopted_orphan: bool },
    /// The resource is now in the table, `busy`, with no holder: run the disk acquire,
    /// then [`Tables::finish_acquire`].
    Disk,
}

/// What [`Tables::start_release`] left to do.
#[derive(Debug, Clone)]
pub enum ReleaseStart<H> {
    /// This was the last holder: release the lease on disk (the resource is now `busy`),
    /// then [`Tables::finish_release`].
    Disk(Box<LocalRes<H>>),
    /// The last holder died holding a persistent lease: kept as an orphan, no disk I/O.
    Orphaned,
    /// Other local holders share it: nothing more to do.
    OthersHold,
    /// The resource is not in the table (nothing to do).
    NotHeld,
}

/// Who a registered-client command acts on, from its header ([`Tables::start_command`]).
#[derive(Debug, Clone, Copy)]
pub struct CommandTarget {
    /// The connection the command came on.
    pub conn_ci: u32,
    /// Its peer's uid.
    pub conn_uid: u32,
    pub cmd: u32,
    pub cmd_flags: u32,
    /// The header's data2: a client id (with SANLK_FOR_CLIENT_ID), or, read as signed, a
    /// pid, or -1 for the connection's own client.
    pub data2: u32,
}

impl<S, H: LeaseHold> Tables<S, H> {
    /// Resolves the client a registered-client command acts on and marks it active; a
    /// second command on the same client is refused with -EBUSY until
    /// [`Tables::finish_command`] (sanlock's `cmd_active`).
    pub(crate) fn start_command(&mut self, t: CommandTarget) -> Result<u32, TableRefused> {
        let by_id = t.cmd_flags & SANLK_FOR_CLIENT_ID != 0 && t.cmd != SM_CMD_KILLPATH;
        let pid = i32::from_ne_bytes(t.data2.to_ne_bytes());
        let ci = if by_id {
            if self.clients.slots.contains_key(&t.data2) {
                t.data2
            } else {
                return Err(TableRefused::NoSuchClient);
            }
        } else if pid == -1 {
            t.conn_ci
        } else {
            self.clients.by_pid(pid).ok_or(TableRefused::NoSuchClient)?
        };
        let Some(c) = self.clients.slots.get_mut(&ci) else {
            return Err(TableRefused::NoSuchClient);
        };
        if !c.registered || c.pid <= 0 || c.pid_dead {
            return Err(TableRefused::ClientNotReady);
        }
        if c.kill_count > 0 && matches!(t.cmd, SM_CMD_ACQUIRE | client_lib::proto::SM_CMD_ACQUIRE2)
        {
            return Err(TableRefused::ClientBeingKilled);
        }
        if c.cmd_active != 0 {
            return Err(TableRefused::CommandRunning);
        }
        // A process may act on another uid's leases only as root.
        if t.conn_uid != 0 && t.conn_uid != c.uid {
            return Err(TableRefused::NotYourClient);
        }
        c.cmd_active = t.cmd;
        Ok(ci)
    }

    /// Ends the command [`Tables::start_command`] started on `target`. If the client died
    /// meanwhile, its slot goes and its tokens are returned, to be released as a dead
    /// holder's.
    pub(crate) fn finish_command(&mut self, target: u32) -> Option<Vec<ClientToken>> {
        let c = self.clients.slots.get_mut(&target)?;
        c.cmd_active = 0;
        if !c.pid_dead {
            return None;
        }
        let tokens = std::mem::take(&mut c.tokens);
        self.clients.slots.remove(&target);
        Some(tokens)
    }

    /// A connection closed (or a `--for-pid` process exited). An unregistered slot just
    /// goes. A registered client's slot goes and its tokens are returned (pid, tokens) to
    /// be released as a dead holder's — unless a command from another connection is
    /// running on it, which then ends it ([`Tables::finish_command`]).
    pub(crate) fn client_ended(&mut self, ci: u32) -> Option<(i32, Vec<ClientToken>)> {
        let c = self.clients.slots.get_mut(&ci)?;
        if !c.registered {
            self.clients.slots.remove(&ci);
            return None;
        }
        c.pid_dead = true;
        if c.cmd_active != 0 {
            return None;
        }
        let tokens = std::mem::take(&mut c.tokens);
        let pid = c.pid;
        self.clients.slots.remove(&ci);
        Some((pid, tokens))
    }

    /// A connection-less client slot for process `pid` (`lockd acquire --for-pid`),
    /// registered and with an ACQUIRE running until [`Tables::finish_command`]; -EEXIST
    /// when a registered client of that pid holds its own leases (two owners of one pid
    /// would confuse release and escalation), -EMFILE when no slot is free.
    pub(crate) fn add_pid_client(
        &mut self,
        pid: i32,
        uid: u32,
        killpath: Option<KillPath>,
    ) -> Result<u32, TableRefused> {
        if self.clients.by_pid(pid).is_some() {
            return Err(TableRefused::PidHasClient);
        }
        let ci = self
            .clients
            .add(-1, pid, uid, None)
            .map_err(|_| TableRefused::NoFreeSlot)?;
        if let Some(c) = self.clients.slots.get_mut(&ci) {
            c.registered = true;
            c.owner_name = Name::from_field(format!("pid{pid}").as_bytes());
            c.killpath = killpath;
            c.cmd_active = SM_CMD_ACQUIRE;
        }
        Ok(ci)
    }

    /// A `--for-pid` slot ([`Tables::add_pid_client`]) whose ACQUIRE failed goes, once the
    /// tokens it got were released; -EBUSY (and the slot kept, its command still active)
    /// if it still holds a token, which would otherwise be lost with the slot.
    pub(crate) fn drop_failed_pid_client(&mut self, ci: u32) -> Result<(), TableRefused> {
        match self.clients.slots.get(&ci) {
            None => Ok(()),
            Some(c) if !c.tokens.is_empty() => Err(TableRefused::SlotHoldsTokens),
            Some(_) => {
                self.clients.slots.remove(&ci);
                Ok(())
            }
        }
    }

    /// Changes the on-disk state kept for held lease `key` (SET_LVB writes the value
    /// block into lease-core's token) with `change`; None when the lease is not held here.
    pub(crate) fn change_held<R>(
        &mut self,
        key: &Key,
        change: impl FnOnce(&mut H) -> R,
    ) -> Option<R> {
        self.resources.get_mut(key).map(|lr| change(&mut lr.held))
    }

    /// The id of a new token (STATUS and the logs name a client's leases by it): 1, 2, …,
    /// never 0, wrapping after `u32::MAX`.
    pub(crate) fn new_token_id(&mut self) -> u32 {
        self.last_token_id = self.last_token_id.wrapping_add(1).max(1);
        self.last_token_id
    }

    /// A command arrived on connection `ci` (STATUS shows it as `cmd_last`).
    pub(crate) fn note_command(&mut self, ci: u32, cmd: u32) {
        if let Some(c) = self.clients.slots.get_mut(&ci) {
            c.cmd_last = cmd;
        }
    }

    /// REGISTER on connection `ci` from process `pid` of `uid`: the slot becomes a
    /// registered client named after its pid (as sanlock names it until an ACQUIRE
    /// names it). False when the slot is gone.
    pub(crate) fn register_client(&mut self, ci: u32, pid: i32, uid: u32) -> bool {
        let Some(c) = self.clients.slots.get_mut(&ci) else {
            return false;
        };
        c.registered = true;
        c.pid = pid;
        c.uid = uid;
        c.owner_name = Name::from_field(pid.to_string().as_bytes());
        true
    }

    /// RESTRICT: connection `ci`'s restriction flags.
    pub(crate) fn set_restrict(&mut self, ci: u32, flags: u32) {
        if let Some(c) = self.clients.slots.get_mut(&ci) {
            c.restricted = flags;
        }
    }

    /// An ACQUIRE names its client anew from its options (an empty name included).
    pub(crate) fn set_owner_name(&mut self, ci: u32, owner_name: Name) {
        if let Some(c) = self.clients.slots.get_mut(&ci) {
            c.owner_name = owner_name;
        }
    }

    /// KILLPATH: the program run for client `ci` before it is signalled. Returns the
    /// client's pid, or None when the slot is gone.
    pub(crate) fn set_killpath(&mut self, ci: u32, killpath: KillPath) -> Option<i32> {
        let c = self.clients.slots.get_mut(&ci)?;
        c.killpath = Some(killpath);
        Some(c.pid)
    }

    /// The helper reported how a killpath run for process `pid` ended (`exit:N`,
    /// `signal:N`, `noexec:ERRNO`): kept on each of its clients that set a killpath, for
    /// STATUS.
    pub(crate) fn killpath_ended(&mut self, pid: i32, status: &str) {
        for c in self.clients.slots.values_mut() {
            if c.pid == pid && c.killpath.is_some() {
                c.killpath_status = Some(status.to_string());
            }
        }
    }

    /// How client `ci`'s acquire of `key` ended, for STATUS's `waiting=`: a registered
    /// client refused as `busy` (another holder has the lease) is a candidate waiting
    /// since its first such refusal of that lease (`now_s` then); anything else ends the
    /// wait.
    pub(crate) fn note_acquire_result(
        &mut self,
        ci: u32,
        key: Key,
        rv: i32,
        busy: bool,
        now_s: u64,
    ) {
        let Some(c) = self.clients.slots.get_mut(&ci) else {
            return;
        };
        if !c.registered || !busy {
            c.waiting = None;
            return;
        }
        let (ls, name) = key;
        let since = match c.waiting {
            Some(w) if w.ls.same_as(&ls) && w.name.same_as(&name) => w.since,
            _ => now_s,
        };
        c.waiting = Some(Waiting {
            ls,
            name,
            since,
            last_rv: rv,
        });
    }

    /// The first step of acquiring `key` for client `ci`: refused if the client holds it
    /// already (-EEXIST), if it is being released on disk (-EAGAIN: the caller may wait
    /// for the release to end and try again), if another local request is acquiring or
    /// converting it (-EBUSY), if it is an orphan and the flags do not adopt it in its mode
    /// (-EUCLEAN), if it is held exclusive here (-EEXIST), or if only an orphan was wanted
    /// (-ENOENT). As sanlock: -EAGAIN for a resource being released, -EBUSY for one being
    /// added.
    pub(crate) fn start_acquire(
        &mut self,
        ci: u32,
        key: Key,
        shared: bool,
        cmd_flags: u32,
        disks: &[wire::DiskLocation],
    ) -> Result<AcquireStart, TableRefused> {
        if let Some(c) = self.clients.slots.get(&ci) {
            if c.tokens.iter().any(|t| t.key() == key) {
                return Err(TableRefused::HeldByClient);
            }
        }
        if let Some(lr) = self.resources.get_mut(&key) {
            if lr.busy {
                return Err(if lr.releasing {
                    TableRefused::BeingReleased
                } else {
                    TableRefused::BeingAcquired
                });
            }
            if lr.orphan {
                // Adopt an orphan only when asked to, and only in its mode.
                if cmd_flags & (SANLK_ACQUIRE_ORPHAN | SANLK_ACQUIRE_ORPHAN_ONLY) == 0
                    || lr.shared != shared
                {
                    return Err(TableRefused::OrphanNotAdopted);
                }
                lr.orphan = false;
                lr.holders.push(ci);
                return Ok(AcquireStart::Local {
                    lver: lr.held.lver(),
                    adopted_orphan: true,
                });
            }
            if shared && lr.shared {
                // Another local process holds it shared: share without disk I/O.
                lr.holders.push(ci);
                return Ok(AcquireStart::Local {
                    lver: lr.held.lver(),
                    adopted_orphan: false,
                });
            }
            return Err(TableRefused::HeldHere);
        }
        if cmd_flags & SANLK_ACQUIRE_ORPHAN_ONLY != 0 {
            return Err(TableRefused::NoOrphan);
        }
        self.resources.insert(
            key,
            LocalRes {
                ls: key.0,
                name: key.1,
                disks: disks.to_vec(),
                shared,
                holders: Vec::new(),
                busy: true,
                releasing: false,
                orphan: false,
                held: H::default(),
            },
        );
        Ok(AcquireStart::Disk)
    }

    /// The disk acquire [`AcquireStart::Disk`] asked for ended: on success `ci` holds the
    /// lease and its lver is returned; on failure the resource leaves the table.
    pub(crate) fn finish_acquire(
        &mut self,
        key: Key,
        ci: u32,
        result: Result<H, i32>,
    ) -> Result<u64, i32> {
        match result {
            Ok(held) => {
                let lver = held.lver();
                if let Some(lr) = self.resources.get_mut(&key) {
                    lr.held = held;
                    lr.busy = false;
                    lr.holders.push(ci);
                }
                Ok(lver)
            }
            Err(rv) => {
                self.resources.remove(&key);
                Err(rv)
            }
        }
    }

    /// Records an acquire request's tokens on its client; if the client's slot went
    /// meanwhile, the tokens come back to be released.
    pub(crate) fn record_tokens(
        &mut self,
        ci: u32,
        tokens: Vec<ClientToken>,
    ) -> Result<(), Vec<ClientToken>> {
        match self.clients.slots.get_mut(&ci) {
            Some(c) => {
                c.tokens.extend(tokens);
                Ok(())
            }
            None => Err(tokens),
        }
    }

    /// Drops client `ci` as a holder of `token`'s resource; when this was its last
    /// holder, the lease is to be released on disk, or, if the holder died (`dying`) with
    /// a persistent lease, kept as an orphan (sanlock §2.9).
    pub(crate) fn start_release(
        &mut self,
        ci: u32,
        token: &ClientToken,
        dying: bool,
    ) -> ReleaseStart<H> {
        let Some(lr) = self.resources.get_mut(&token.key()) else {
            return ReleaseStart::NotHeld;
        };
        lr.holders.retain(|&h| h != ci);
        if !lr.holders.is_empty() {
            return ReleaseStart::OthersHold;
        }
        if dying && token.persistent {
            lr.orphan = true;
            return ReleaseStart::Orphaned;
        }
        lr.busy = true;
        lr.releasing = true;
        ReleaseStart::Disk(Box::new(lr.clone()))
    }

    /// The disk release of `key` ended (whatever its result): the lease leaves the table.
    pub(crate) fn finish_release(&mut self, key: &Key) {
        self.resources.remove(key);
    }

    /// Orphans of lockspace `ls` to release: the one named `name`, or all when `name` is
    /// empty; each is marked `busy` and ends with [`Tables::finish_release`].
    pub(crate) fn start_orphan_release(&mut self, ls: &Name, name: &Name) -> Vec<LocalRes<H>> {
        let mut picked = Vec::new();
        for lr in self.resources.values_mut() {
            if lr.orphan
                && !lr.busy
                && lr.ls.same_as(ls)
                && (name.is_empty() || lr.name.same_as(name))
            {
                lr.busy = true;
                lr.releasing = true;
                picked.push(lr.clone());
            }
        }
        picked
    }

    /// Takes every token of client `ci` (RELEASE of all).
    pub(crate) fn take_all_tokens(&mut self, ci: u32) -> Vec<ClientToken> {
        self.clients
            .slots
            .get_mut(&ci)
            .map(|c| std::mem::take(&mut c.tokens))
            .unwrap_or_default()
    }

    /// Takes the tokens of client `ci` named in `keys`; the flag tells whether one of them
    /// was not held. Refused without the client.
    pub(crate) fn take_tokens(
        &mut self,
        ci: u32,
        keys: &[Key],
    ) -> Result<(Vec<ClientToken>, bool), TableRefused> {
        let c = self
            .clients
            .slots
            .get_mut(&ci)
            .ok_or(TableRefused::NoSuchClient)?;
        let mut picked = Vec::new();
        let mut missing = false;
        for key in keys {
            match c.tokens.iter().position(|t| t.key() == *key) {
                Some(i) => picked.push(c.tokens.remove(i)),
                None => missing = true,
            }
        }
        Ok((picked, missing))
    }

    /// Client `ci`'s token for `key`, if converting it to `to_shared` makes sense:
    /// -ESRCH without the client, -ENOENT when it does not hold the lease, -EALREADY when
    /// the lease is in that mode already.
    pub fn convert_token(
        &self,
        ci: u32,
        key: Key,
        to_shared: bool,
    ) -> Result<ClientToken, TableRefused> {
        let c = self
            .clients
            .slots
            .get(&ci)
            .ok_or(TableRefused::NoSuchClient)?;
        let token = c
            .tokens
            .iter()
            .find(|t| t.key() == key)
            .cloned()
            .ok_or(TableRefused::NotHeld)?;
        if token.shared == to_shared {
            return Err(TableRefused::AlreadyInMode);
        }
        Ok(token)
    }

    /// The first step of converting client `ci`'s lease `key` to shared (or exclusive):
    /// [`Tables::convert_token`]'s checks, then the resource, marked `busy`. Refused when
    /// another local request is on its disk I/O (-EAGAIN), or when other local holders
    /// share it and it should become exclusive (-EAGAIN: they would lose their lease).
    pub(crate) fn start_convert(
        &mut self,
        ci: u32,
        key: Key,
        to_shared: bool,
    ) -> Result<LocalRes<H>, TableRefused> {
        self.convert_token(ci, key, to_shared)?;
        let lr = self.resources.get_mut(&key).ok_or(TableRefused::NotHeld)?;
        if lr.busy {
            return Err(TableRefused::ConvertBusy);
        }
        if !to_shared && lr.holders.len() > 1 {
            return Err(TableRefused::SharedByOthers);
        }
        lr.busy = true;
        Ok(lr.clone())
    }

    /// The disk convert [`Tables::start_convert`] asked for ended: on success the
    /// resource and client `ci`'s token take the new mode and lver.
    pub(crate) fn finish_convert(
        &mut self,
        ci: u32,
        key: Key,
        to_shared: bool,
        result: Result<H, i32>,
    ) -> i32 {
        let Some(lr) = self.resources.get_mut(&key) else {
            return result.err().unwrap_or(0);
        };
        lr.busy = false;
        let held = match result {
            Ok(h) => h,
            Err(rv) => return rv,
        };
        let lver = held.lver();
        lr.held = held;
        lr.shared = to_shared;
        if let Some(t) = self
            .clients
            .slots
            .get_mut(&ci)
            .and_then(|c| c.tokens.iter_mut().find(|t| t.key() == key))
        {
            t.shared = to_shared;
            t.lver = lver;
        }
        0
    }

    /// A disk convert of `key` failed half-way and changed the lease's on-disk state
    /// (lease-core's token: our slot holds the ballot's dblock, `erase_all` may be set):
    /// the resource keeps that state, so that its release writes the newer dblock and
    /// clears what the convert left. Call it before [`Tables::finish_convert`] with the
    /// error. Without it, the release would write the dblock of before over the ballot's
    /// and an accepted value could be forgotten (two exclusive holders: `lockd-daemon-sim`
    /// found this).
    ///
    /// A failed exclusive → shared convert (`to_shared`) also leaves the lease shared
    /// here, as lease-core's token already is: the convert may have written our shared
    /// mode block and released the leader before it failed, so other hosts may hold the
    /// lease shared now. Kept exclusive, the lease could become an exclusive orphan when
    /// its holder dies, and adopting that orphan (no disk I/O) would make an exclusive
    /// holder beside their shared ones (`lockd-daemon-sim` found this with request
    /// traffic). Shared, it can only be adopted, or joined here, shared.
    pub(crate) fn convert_failed_state(&mut self, key: Key, held: H, to_shared: bool) {
        let holders = match self.resources.get_mut(&key) {
            Some(lr) if lr.busy && !lr.releasing => {
                lr.held = held;
                if !to_shared || lr.shared {
                    return;
                }
                lr.shared = true;
                lr.holders.clone()
            }
            _ => return,
        };
        for ci in holders {
            let token = self
                .clients
                .slots
                .get_mut(&ci)
                .and_then(|c| c.tokens.iter_mut().find(|t| t.key() == key));
            if let Some(t) = token {
                t.shared = true;
            }
        }
    }

    /// The pids of the live clients holding a lease of lockspace `ls` (of resource `res`
    /// only, when given): the ones a lease-loss or request notice is for.
    pub fn holder_pids(&self, ls: &Name, res: Option<&Name>) -> Vec<i32> {
        let mut pids: Vec<i32> = self
            .clients
            .slots
            .values()
            .filter(|c| !c.pid_dead && c.pid > 0)
            .filter(|c| {
                c.tokens
                    .iter()
                    .any(|t| t.ls.same_as(ls) && res.is_none_or(|r| t.name.same_as(r)))
            })
            .map(|c| c.pid)
            .collect();
        pids.sort_unstable();
        pids
    }

    /// Whether any lease (held or orphaned) of lockspace `ls` is in the table.
    pub fn space_in_use(&self, ls: &Name) -> bool {
        self.resources.keys().any(|(l, _)| l.same_as(ls))
    }

    /// True when a lease of lockspace `ls` in the table is not an orphan: held by a
    /// client, or being acquired or released for one.
    pub fn space_has_live_holders(&self, ls: &Name) -> bool {
        self.resources
            .values()
            .any(|r| r.ls.same_as(ls) && !r.orphan)
    }

    /// The part of [`Tables::check`] cheap enough for release builds, run by the daemon
    /// each time it lets go of the tables lock and by the core after every step: one
    /// pass over the resources with no allocation and no lookup — filed under its own
    /// key, `releasing` only with `busy`, an orphan without holders, and never more than
    /// one holder of an exclusive lease. (The rest — tokens against holders, duplicate
    /// holders or tokens — needs lookups per token and runs in debug builds.)
    pub fn check_cheap(&self) -> Result<(), String> {
        if self.clients.slots.len() > crate::MAX_CLIENTS {
            return Err(format!(
                "{} client slots, more than {}",
                self.clients.slots.len(),
                crate::MAX_CLIENTS
            ));
        }
        for (key, lr) in &self.resources {
            if (lr.ls, lr.name) != *key {
                return Err(format!("{key:?}: filed under another key than its own"));
            }
            if lr.releasing && !lr.busy {
                return Err(format!("{key:?}: releasing, yet not busy"));
            }
            if lr.orphan && !lr.holders.is_empty() {
                return Err(format!("{key:?}: an orphan with holders"));
            }
            if !lr.shared && lr.holders.len() > 1 {
                return Err(format!(
                    "{key:?}: exclusive, with {} holders",
                    lr.holders.len()
                ));
            }
        }
        Ok(())
    }

    /// Checks the invariants of the module header; the first one broken, if any:
    /// [`Tables::check_cheap`] first, then what needs sorting or lookups.
    pub fn check(&self) -> Result<(), String> {
        self.check_cheap()?;
        for (key, lr) in &self.resources {
            if !lr.busy && !lr.orphan && lr.holders.is_empty() {
                return Err(format!(
                    "{key:?}: held by nobody, yet neither busy nor an orphan"
                ));
            }
            if lr.orphan && lr.busy && !lr.releasing {
                return Err(format!("{key:?}: an orphan busy other than releasing"));
            }
            let mut seen = lr.holders.clone();
            seen.sort_unstable();
            seen.dedup();
            if seen.len() != lr.holders.len() {
                return Err(format!("{key:?}: a slot is listed twice as holder"));
            }
        }
        for (&ci, c) in &self.clients.slots {
            if c.ci != ci {
                return Err(format!("slot {ci} holds client {}", c.ci));
            }
            let keys: std::collections::HashSet<Key> =
                c.tokens.iter().map(ClientToken::key).collect();
            if keys.len() != c.tokens.len() {
                return Err(format!("client {}: two tokens for one resource", c.ci));
            }
            // A token is recorded after its holder (finish_acquire, then record_tokens)
            // and taken before it (take_tokens, then start_release): a client's token
            // always names a resource that lists it as holder, in the token's mode.
            for t in &c.tokens {
                let Some(lr) = self.resources.get(&t.key()) else {
                    return Err(format!(
                        "client {}: token for {:?}, which is not in the table",
                        c.ci,
                        t.key()
                    ));
                };
                if !lr.holders.contains(&ci) {
                    return Err(format!(
                        "client {}: token for {:?}, which does not list it as holder",
                        c.ci,
                        t.key()
                    ));
                }
                if lr.shared != t.shared {
                    return Err(format!(
                        "client {}: token for {:?} in another mode than the resource",
                        c.ci,
                        t.key()
                    ));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    //! The lease lifecycle driven through the transitions alone: no daemon, no socket, no
    //! disk. The disk outcome each `finish_*` gets is chosen by the test.
    use super::*;
    use client_lib::proto::{SANLK_ACQUIRE_ORPHAN, SANLK_ACQUIRE_ORPHAN_ONLY, SM_CMD_RELEASE};

    /// The tables with no connection handle and a bare lease version as disk state.
    type Tables = super::Tables<(), Held>;

    #[derive(Debug, Clone, Default, PartialEq, Eq)]
    struct Held {
        lver: u64,
    }

    impl LeaseHold for Held {
        fn lver(&self) -> u64 {
            self.lver
        }
    }

    const UID: u32 = 1000;

    fn key(name: &str) -> Key {
        (Name::new("ls").unwrap(), Name::new(name).unwrap())
    }

    /// A registered client with pid `pid`, as REGISTER leaves it.
    fn client(t: &mut Tables, pid: i32) -> u32 {
        let ci = t.clients.add(-1, pid, UID, None).unwrap();
        let c = t.clients.slots.get_mut(&ci).unwrap();
        c.registered = true;
        ci
    }

    fn token(k: Key, shared: bool, persistent: bool) -> ClientToken {
        ClientToken {
            token_id: 1,
            ls: k.0,
            name: k.1,
            disks: Vec::new(),
            shared,
            persistent,
            lver: 0,
            acquired: 0,
        }
    }

    /// Start, disk success, record: what one ACQUIRE of one lease does.
    fn acquire(t: &mut Tables, ci: u32, k: Key, shared: bool, persistent: bool) {
        assert_eq!(
            t.start_acquire(ci, k, shared, 0, &[]),
            Ok(AcquireStart::Disk)
        );
        t.check().unwrap();
        assert_eq!(t.finish_acquire(k, ci, Ok(Held::default())), Ok(0));
        t.record_tokens(ci, vec![token(k, shared, persistent)])
            .unwrap();
        t.check().unwrap();
    }

    fn target(conn_ci: u32, cmd: u32, pid: i32, conn_uid: u32) -> CommandTarget {
        CommandTarget {
            conn_ci,
            conn_uid,
            cmd,
            cmd_flags: 0,
            data2: u32::from_ne_bytes(pid.to_ne_bytes()),
        }
    }

    /// Each refusal's code is sanlock's for that case, and each has a reason.
    #[test]
    fn each_table_refusal_has_sanlocks_code() {
        use TableRefused::*;
        let codes = [
            (NoSuchClient, -ESRCH),
            (ClientNotReady, -EBUSY),
            (ClientBeingKilled, -EBUSY),
            (CommandRunning, -EBUSY),
            (NotYourClient, -EPERM),
            (PidHasClient, -EEXIST),
            (NoFreeSlot, -EMFILE),
            (SlotHoldsTokens, -EBUSY),
            (HeldByClient, -EEXIST),
            (BeingReleased, -EAGAIN),
            (BeingAcquired, -EBUSY),
            (OrphanNotAdopted, -EUCLEAN),
            (HeldHere, -EEXIST),
            (NoOrphan, -ENOENT),
            (NotHeld, -ENOENT),
            (AlreadyInMode, -EALREADY),
            (ConvertBusy, -EAGAIN),
            (SharedByOthers, -EAGAIN),
        ];
        for (r, code) in codes {
            assert_eq!(r.code(), code, "{r:?}");
            assert!(!r.why().is_empty(), "{r:?}");
        }
    }

    #[test]
    fn exclusive_acquire_refuses_everyone_else_until_released() {
        let mut t = Tables::default();
        let (a, b) = (client(&mut t, 10), client(&mut t, 11));
        let k = key("r1");
        assert_eq!(t.start_acquire(a, k, false, 0, &[]), Ok(AcquireStart::Disk));
        // While the disk acquire runs, another local request is refused: -EBUSY, as
        // sanlock answers for a resource being added.
        let being_acquired = Err(TableRefused::BeingAcquired);
        assert_eq!(t.start_acquire(b, k, false, 0, &[]), being_acquired);
        assert_eq!(t.start_acquire(b, k, true, 0, &[]), being_acquired);
        assert_eq!(TableRefused::BeingAcquired.code(), -EBUSY);
        t.finish_acquire(k, a, Ok(Held::default())).unwrap();
        t.record_tokens(a, vec![token(k, false, false)]).unwrap();
        let held_here = Err(TableRefused::HeldHere);
        assert_eq!(
            t.start_acquire(a, k, false, 0, &[]),
            Err(TableRefused::HeldByClient)
        );
        assert_eq!(t.start_acquire(b, k, false, 0, &[]), held_here);
        assert_eq!(t.start_acquire(b, k, true, 0, &[]), held_here);
        let (taken, missing) = t.take_tokens(a, &[k]).unwrap();
        assert!(!missing);
        let step = t.start_release(a, &taken[0], false);
        assert!(
            matches!(step, ReleaseStart::Disk(ref lr) if lr.busy && lr.releasing && lr.holders.is_empty())
        );
        t.check().unwrap();
        // While the release runs: -EAGAIN (the daemon waits for the release, then retries).
        let being_released = Err(TableRefused::BeingReleased);
        assert_eq!(t.start_acquire(b, k, false, 0, &[]), being_released);
        assert_eq!(TableRefused::BeingReleased.code(), -EAGAIN);
        t.finish_release(&k);
        assert!(!t.space_in_use(&k.0));
        acquire(&mut t, b, k, false, false);
    }

    #[test]
    fn a_busy_refusal_starts_a_wait_that_lasts_until_another_lease_or_a_success() {
        let mut t = Tables::default();
        let a = client(&mut t, 10);
        let (k1, k2) = (key("r1"), key("r2"));
        let waiting = |t: &Tables| t.clients.slots[&a].waiting;
        t.note_acquire_result(a, k1, -243, true, 100);
        t.note_acquire_result(a, k1, -247, true, 130);
        // The same lease: the wait keeps its start and takes the last code.
        let w = waiting(&t).expect("waiting");
        assert_eq!((w.name, w.since, w.last_rv), (k1.1, 100, -247));
        // Another lease starts a new wait; a refusal that is not busy ends it.
        t.note_acquire_result(a, k2, -243, true, 140);
        assert_eq!(waiting(&t).map(|w| (w.name, w.since)), Some((k2.1, 140)));
        t.note_acquire_result(a, k2, -5, false, 150);
        assert_eq!(waiting(&t), None);
        t.note_acquire_result(a, k1, -243, true, 160);
        // A success ends it.
        t.note_acquire_result(a, k1, 0, false, 165);
        assert_eq!(waiting(&t), None);
        // Unregistered slots are never candidates.
        let u = t.clients.add(-1, 12, 0, None).unwrap();
        t.note_acquire_result(u, k1, -243, true, 170);
        assert_eq!(t.clients.slots[&u].waiting, None);
        assert!(t.register_client(u, 12, 0));
        assert_eq!(t.clients.slots[&u].owner_name.to_text(), "12");
        t.check().unwrap();
    }

    #[test]
    fn token_ids_start_at_one_and_skip_zero_when_they_wrap() {
        let mut t = Tables::default();
        assert_eq!((t.new_token_id(), t.new_token_id()), (1, 2));
        t.last_token_id = u32::MAX - 1;
        assert_eq!(t.new_token_id(), u32::MAX);
        assert_eq!(t.new_token_id(), 1);
    }

    #[test]
    fn a_failed_disk_acquire_leaves_nothing_behind() {
        let mut t = Tables::default();
        let a = client(&mut t, 10);
        let k = key("r1");
        t.start_acquire(a, k, false, 0, &[]).unwrap();
        assert_eq!(t.finish_acquire(k, a, Err(-EAGAIN)), Err(-EAGAIN));
        assert!(t.resources.is_empty());
        t.check().unwrap();
    }

    #[test]
    fn shared_holders_share_without_disk_and_the_last_one_releases_on_disk() {
        let mut t = Tables::default();
        let (a, b) = (client(&mut t, 10), client(&mut t, 11));
        let k = key("r1");
        acquire(&mut t, a, k, true, false);
        assert_eq!(
            t.start_acquire(b, k, true, 0, &[]),
            Ok(AcquireStart::Local {
                lver: 0,
                adopted_orphan: false
            })
        );
        t.record_tokens(b, vec![token(k, true, false)]).unwrap();
        t.check().unwrap();
        assert_eq!(t.resources[&k].holders, vec![a, b]);
        // Exclusive now would take the lease from b.
        assert_eq!(
            t.start_convert(a, k, false).err(),
            Some(TableRefused::SharedByOthers)
        );
        let ta = t.take_all_tokens(a);
        assert!(matches!(
            t.start_release(a, &ta[0], false),
            ReleaseStart::OthersHold
        ));
        t.check().unwrap();
        let tb = t.take_all_tokens(b);
        assert!(matches!(
            t.start_release(b, &tb[0], false),
            ReleaseStart::Disk(_)
        ));
        t.finish_release(&k);
        assert!(t.resources.is_empty());
    }

    #[test]
    fn a_failed_exclusive_to_shared_convert_leaves_the_lease_shared_and_its_orphan_too() {
        let mut t = Tables::default();
        let (a, b) = (client(&mut t, 10), client(&mut t, 11));
        let k = key("r1");
        acquire(&mut t, a, k, false, true);
        assert!(t.start_convert(a, k, true).is_ok());
        // lease-core gave up exclusive, wrote part of the convert, then failed (-202).
        t.convert_failed_state(k, Held { lver: 1 }, true);
        assert_eq!(t.finish_convert(a, k, true, Err(-202)), -202);
        t.check().unwrap();
        assert!(t.resources[&k].shared, "other hosts may hold it shared now");
        assert!(t.clients.slots[&a].tokens[0].shared);
        // Its holder dies: the orphan is shared, and no exclusive holder can take it
        // with no disk I/O.
        let (_, tokens) = t.client_ended(a).unwrap();
        assert!(matches!(
            t.start_release(a, &tokens[0], true),
            ReleaseStart::Orphaned
        ));
        assert_eq!(
            t.start_acquire(b, k, false, SANLK_ACQUIRE_ORPHAN, &[]),
            Err(TableRefused::OrphanNotAdopted)
        );
        assert!(matches!(
            t.start_acquire(b, k, true, SANLK_ACQUIRE_ORPHAN, &[]),
            Ok(AcquireStart::Local { .. })
        ));
        t.check().unwrap();

        // A failed shared → exclusive convert stays shared.
        let c = client(&mut t, 12);
        let k2 = key("r2");
        acquire(&mut t, c, k2, true, false);
        assert!(t.start_convert(c, k2, false).is_ok());
        t.convert_failed_state(k2, Held { lver: 2 }, false);
        assert_eq!(t.finish_convert(c, k2, false, Err(-202)), -202);
        assert!(t.resources[&k2].shared && t.clients.slots[&c].tokens[0].shared);
        t.check().unwrap();
    }

    #[test]
    fn a_dead_holders_persistent_lease_becomes_an_orphan_adoptable_only_on_request() {
        let mut t = Tables::default();
        let (a, b) = (client(&mut t, 10), client(&mut t, 11));
        let k = key("r1");
        acquire(&mut t, a, k, false, true);
        let (pid, tokens) = t.client_ended(a).unwrap();
        assert_eq!((pid, tokens.len()), (10, 1));
        assert!(!t.clients.slots.contains_key(&a));
        assert!(matches!(
            t.start_release(a, &tokens[0], true),
            ReleaseStart::Orphaned
        ));
        t.check().unwrap();
        assert!(t.space_in_use(&k.0));
        let not_adopted = Err(TableRefused::OrphanNotAdopted);
        assert_eq!(t.start_acquire(b, k, false, 0, &[]), not_adopted);
        assert_eq!(
            t.start_acquire(b, k, true, SANLK_ACQUIRE_ORPHAN, &[]),
            not_adopted,
            "an orphan is adopted only in its own mode"
        );
        assert_eq!(
            t.start_acquire(b, k, false, SANLK_ACQUIRE_ORPHAN, &[]),
            Ok(AcquireStart::Local {
                lver: 0,
                adopted_orphan: true
            })
        );
        t.check().unwrap();
        assert!(t.start_orphan_release(&k.0, &Name::EMPTY).is_empty());
        assert_eq!(
            t.start_acquire(b, key("r2"), false, SANLK_ACQUIRE_ORPHAN_ONLY, &[]),
            Err(TableRefused::NoOrphan)
        );
        assert!(!t.resources.contains_key(&key("r2")));
    }

    #[test]
    fn orphan_release_picks_only_idle_orphans_of_the_named_lockspace() {
        let mut t = Tables::default();
        let a = client(&mut t, 10);
        let (k1, k2) = (key("r1"), key("r2"));
        acquire(&mut t, a, k1, false, true);
        acquire(&mut t, a, k2, false, true);
        let (_, tokens) = t.client_ended(a).unwrap();
        for tok in &tokens {
            assert!(matches!(
                t.start_release(a, tok, true),
                ReleaseStart::Orphaned
            ));
        }
        assert!(t
            .start_orphan_release(&Name::new("other").unwrap(), &Name::EMPTY)
            .is_empty());
        let one = t.start_orphan_release(&k1.0, &k1.1);
        assert_eq!(one.len(), 1);
        assert!(t.resources[&k1].busy && t.resources[&k1].releasing);
        t.check().unwrap();
        // A busy orphan is not picked twice.
        let rest = t.start_orphan_release(&k1.0, &Name::EMPTY);
        assert_eq!(rest.len(), 1);
        assert_eq!(rest[0].name, k2.1);
        t.finish_release(&k1);
        t.finish_release(&k2);
        assert!(t.resources.is_empty());
    }

    #[test]
    fn one_command_at_a_time_per_client_and_a_client_that_dies_meanwhile_is_freed_after() {
        let mut t = Tables::default();
        let a = client(&mut t, 10);
        let other = client(&mut t, 20);
        let k = key("r1");
        acquire(&mut t, a, k, false, false);
        // A second connection acts on pid 10's client.
        let first = t
            .start_command(target(other, SM_CMD_RELEASE, 10, 0))
            .unwrap();
        assert_eq!(first, a);
        assert_eq!(
            t.start_command(target(a, SM_CMD_ACQUIRE, -1, UID)),
            Err(TableRefused::CommandRunning)
        );
        // Its connection closes meanwhile: the running command frees it when done.
        assert!(t.client_ended(a).is_none());
        assert!(t.clients.slots[&a].pid_dead);
        let tokens = t.finish_command(a).unwrap();
        assert_eq!(tokens.len(), 1);
        assert!(!t.clients.slots.contains_key(&a));
    }

    #[test]
    fn command_targets_are_checked_as_sanlock_checks_them() {
        let mut t = Tables::default();
        let a = client(&mut t, 10);
        let unregistered = t.clients.add(-1, 30, UID, None).unwrap();
        assert_eq!(
            t.start_command(target(a, SM_CMD_ACQUIRE, 99, UID)),
            Err(TableRefused::NoSuchClient)
        );
        assert_eq!(
            t.start_command(target(unregistered, SM_CMD_ACQUIRE, -1, UID)),
            Err(TableRefused::ClientNotReady)
        );
        // Another non-root uid may not act on this client's leases; root may.
        assert_eq!(
            t.start_command(target(a, SM_CMD_ACQUIRE, 10, UID + 1)),
            Err(TableRefused::NotYourClient)
        );
        assert_eq!(t.start_command(target(a, SM_CMD_ACQUIRE, 10, 0)), Ok(a));
        assert!(t.finish_command(a).is_none());
        // A client being killed takes no new leases.
        t.clients.slots.get_mut(&a).unwrap().kill_count = 1;
        assert_eq!(
            t.start_command(target(a, SM_CMD_ACQUIRE, -1, UID)),
            Err(TableRefused::ClientBeingKilled)
        );
        assert_eq!(t.start_command(target(a, SM_CMD_RELEASE, -1, UID)), Ok(a));
    }

    #[test]
    fn convert_checks_then_takes_the_new_mode_only_on_success() {
        let mut t = Tables::default();
        let a = client(&mut t, 10);
        let k = key("r1");
        assert_eq!(
            t.convert_token(a, k, true).err(),
            Some(TableRefused::NotHeld)
        );
        assert_eq!(
            t.convert_token(99, k, true).err(),
            Some(TableRefused::NoSuchClient)
        );
        acquire(&mut t, a, k, false, false);
        assert_eq!(
            t.convert_token(a, k, false).err(),
            Some(TableRefused::AlreadyInMode)
        );
        t.start_convert(a, k, true).unwrap();
        assert_eq!(
            t.start_convert(a, k, true).err(),
            Some(TableRefused::ConvertBusy)
        );
        assert_eq!(t.finish_convert(a, k, true, Err(-EIO)), -EIO);
        assert!(!t.resources[&k].busy && !t.resources[&k].shared);
        assert!(!t.clients.slots[&a].tokens[0].shared);
        t.start_convert(a, k, true).unwrap();
        assert_eq!(t.finish_convert(a, k, true, Ok(Held::default())), 0);
        assert!(t.resources[&k].shared && t.clients.slots[&a].tokens[0].shared);
        t.check().unwrap();
    }

    #[test]
    fn tokens_for_a_client_that_went_come_back_to_be_released() {
        let mut t = Tables::default();
        let a = client(&mut t, 10);
        let k = key("r1");
        t.start_acquire(a, k, false, 0, &[]).unwrap();
        t.finish_acquire(k, a, Ok(Held::default())).unwrap();
        t.clients.slots.remove(&a);
        let back = t
            .record_tokens(a, vec![token(k, false, false)])
            .unwrap_err();
        assert_eq!(back.len(), 1);
        assert!(matches!(
            t.start_release(a, &back[0], false),
            ReleaseStart::Disk(_)
        ));
    }

    #[test]
    fn a_for_pid_slot_is_one_per_pid_and_runs_its_acquire_as_a_command() {
        let mut t = Tables::default();
        let ci = t.add_pid_client(42, UID, None).unwrap();
        assert_eq!(
            t.add_pid_client(42, UID, None),
            Err(TableRefused::PidHasClient)
        );
        assert_eq!(
            t.start_command(target(ci, SM_CMD_RELEASE, 42, 0)),
            Err(TableRefused::CommandRunning),
            "no other command while its acquire runs"
        );
        acquire(&mut t, ci, key("r1"), false, false);
        assert!(t.finish_command(ci).is_none());
        assert_eq!(t.clients.slots[&ci].owner_name, Name::new("pid42").unwrap());
        assert_eq!(t.start_command(target(ci, SM_CMD_RELEASE, 42, 0)), Ok(ci));
    }

    #[test]
    fn a_failed_for_pid_slot_goes_only_without_tokens() {
        let mut t = Tables::default();
        let ci = t.add_pid_client(42, UID, None).unwrap();
        let held = token(key("r1"), false, false);
        t.clients.slots.get_mut(&ci).unwrap().tokens.push(held);
        assert_eq!(
            t.drop_failed_pid_client(ci),
            Err(TableRefused::SlotHoldsTokens)
        );
        assert!(
            t.clients.slots.contains_key(&ci),
            "a token is never lost with its slot"
        );
        t.clients.slots.get_mut(&ci).unwrap().tokens.clear();
        assert_eq!(t.drop_failed_pid_client(ci), Ok(()));
        assert!(!t.clients.slots.contains_key(&ci));
        assert_eq!(t.drop_failed_pid_client(ci), Ok(()), "a slot already gone");
        assert_eq!(
            t.add_pid_client(42, UID, None).map(|_| ()),
            Ok(()),
            "the pid is free again"
        );
    }

    #[test]
    fn check_finds_broken_invariants() {
        let mut t = Tables::default();
        let a = client(&mut t, 10);
        let k = key("r1");
        acquire(&mut t, a, k, false, false);
        // (Shared for a moment: on an exclusive lease the cheap part would report two
        // holders first.)
        t.resources.get_mut(&k).unwrap().shared = true;
        t.resources.get_mut(&k).unwrap().holders.push(a);
        assert!(t.check().unwrap_err().contains("listed twice"));
        t.resources.get_mut(&k).unwrap().shared = false;
        t.resources.get_mut(&k).unwrap().holders = vec![a, a + 1];
        assert!(t.check().unwrap_err().contains("exclusive"));
        // The cheap part, run in release builds, finds this one too.
        assert!(t.check_cheap().unwrap_err().contains("exclusive"));
        t.resources.get_mut(&k).unwrap().holders.clear();
        assert!(t.check().unwrap_err().contains("nobody"));
        t.resources.clear();
        let dup = token(k, false, false);
        t.clients.slots.get_mut(&a).unwrap().tokens.push(dup);
        assert!(t.check().unwrap_err().contains("two tokens"));
    }

    #[test]
    fn check_finds_tokens_and_orphans_out_of_step() {
        let mut t = Tables::default();
        let (a, b) = (client(&mut t, 10), client(&mut t, 11));
        let k = key("r1");
        acquire(&mut t, a, k, true, true);
        // A token whose resource lists another holder.
        t.resources.get_mut(&k).unwrap().holders = vec![b];
        assert!(t.check().unwrap_err().contains("does not list it"));
        t.resources.get_mut(&k).unwrap().holders = vec![a];
        t.check().unwrap();
        // A token in another mode than its resource.
        t.resources.get_mut(&k).unwrap().shared = false;
        assert!(t.check().unwrap_err().contains("another mode"));
        t.resources.get_mut(&k).unwrap().shared = true;
        // An orphan with a holder, and one busy without a release.
        t.resources.get_mut(&k).unwrap().orphan = true;
        assert!(t.check().unwrap_err().contains("orphan with holders"));
        let ta = t.take_all_tokens(a);
        assert!(matches!(
            t.start_release(a, &ta[0], true),
            ReleaseStart::Orphaned
        ));
        t.check().unwrap();
        t.resources.get_mut(&k).unwrap().busy = true;
        assert!(t.check().unwrap_err().contains("busy other than releasing"));
        t.resources.get_mut(&k).unwrap().busy = false;
        // A token whose resource left the table.
        t.resources.clear();
        t.clients
            .slots
            .get_mut(&b)
            .unwrap()
            .tokens
            .push(token(k, true, false));
        assert!(t.check().unwrap_err().contains("not in the table"));
        t.clients.slots.get_mut(&b).unwrap().tokens.clear();
        // A resource under another key, a slot under another index.
        let mut lr = None;
        acquire(&mut t, a, k, false, false);
        if let Some(r) = t.resources.remove(&k) {
            lr = Some(r);
        }
        t.resources.insert(key("other"), lr.unwrap());
        assert!(t.check().unwrap_err().contains("another key"));
        t.resources.clear();
        t.clients.slots.get_mut(&a).unwrap().tokens.clear();
        let c = t.clients.slots.remove(&b).unwrap();
        t.clients.slots.insert(b + 7, c);
        assert!(t.check().unwrap_err().contains("slot"));
    }
}
