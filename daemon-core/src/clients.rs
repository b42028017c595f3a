//! The client table (one slot per connection or `--for-pid` process, with the leases it
//! holds) and the types of the resource table: plain data, no I/O.
//!
//! Invariants (kept by [`Clients`]' own methods): at most [`MAX_CLIENTS`] slots, of which
//! the last [`ROOT_RESERVED_SLOTS`] only for uid 0, and at most [`MAX_CLIENTS_PER_UID`]
//! per non-root uid when a slot is added through [`Clients::add`]; a slot's index `ci` is
//! the lowest free one.

use std::collections::HashMap;

use client_lib::wire;
use disk_format::Name;

/// Most client slots (sanlock's CLIENT_NALLOC).
pub const MAX_CLIENTS: usize = 1024;

/// Slots only uid 0 may take: when other uids have filled the rest, root's admin commands
/// (status, shutdown, rem-lockspace, host_status…) still get a slot.
pub const ROOT_RESERVED_SLOTS: usize = 32;

/// Most slots one non-root uid may hold at a time, so one uid that opens connections in a
/// loop cannot take the slots every other uid needs. Root has no per-uid bound (it can use
/// every slot, the reserve included).
pub const MAX_CLIENTS_PER_UID: usize = 256;

/// Why [`Clients::add`] refused a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Every slot is taken (for a non-root uid: every slot outside root's reserve).
    Full,
    /// This non-root uid already holds [`MAX_CLIENTS_PER_UID`] slots.
    UidLimit,
}

/// Credentials to act with: uid, gid and supplementary groups (for a storage open, the
/// filesystem credentials; for a killpath, the process's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FsCreds {
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
}

/// One resource held by one client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientToken {
    pub token_id: u32,
    pub ls: Name,
    pub name: Name,
    pub disks: Vec<wire::DiskLocation>,
    pub shared: bool,
    pub persistent: bool,
    pub lver: u64,
    /// When the client asked for it (daemon monotime, s): `acquired=` in STATUS details
    /// (a lockd addition; `lockd status` shows "held for" from it).
    pub acquired: u64,
}

impl ClientToken {
    pub fn key(&self) -> (Name, Name) {
        (self.ls, self.name)
    }
}

/// A killpath registered with KILLPATH.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KillPath {
    pub path: String,
    pub args: String,
    pub with_pid: bool,
    /// Run it with these credentials (the client that set it); None: as the daemon
    /// (root), for a root client or with `client_privileges = "sanlock"`.
    pub run_as: Option<FsCreds>,
}

/// One connection slot. `S` is the shell's handle kept with it (the daemon: a clone of
/// the connection, to shut it down at exit); the core never looks inside it.
#[derive(Debug)]
pub struct ClientSlot<S> {
    pub ci: u32,
    pub fd: i32,
    pub pid: i32,
    pub uid: u32,
    pub registered: bool,
    pub restricted: u32,
    pub cmd_active: u32,
    pub cmd_last: u32,
    pub pid_dead: bool,
    pub killpath: Option<KillPath>,
    /// How the last killpath run for this client ended (`exit:N`, `signal:N`,
    /// `noexec:ERRNO`), as the helper reported it.
    pub killpath_status: Option<String>,
    pub tokens: Vec<ClientToken>,
    pub owner_name: Name,
    pub kill_count: u32,
    pub kill_last: u64,
    /// The shell's handle of the connection (none for a `--for-pid` slot).
    pub stream: Option<S>,
    /// The lease this client's last acquire found held by another holder (a candidate
    /// waiting its turn), until an acquire succeeds; shown by STATUS (`waiting=`).
    pub waiting: Option<Waiting>,
}

/// A registered client whose acquire of `ls:name` was refused as busy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Waiting {
    pub ls: Name,
    pub name: Name,
    /// Monotonic seconds of the first busy refusal in this wait.
    pub since: u64,
    /// The last refusal's result code.
    pub last_rv: i32,
}

/// All connection slots.
#[derive(Debug)]
pub struct Clients<S> {
    pub slots: HashMap<u32, ClientSlot<S>>,
    next_ci: u32,
}

impl<S> Default for Clients<S> {
    fn default() -> Clients<S> {
        Clients {
            slots: HashMap::new(),
            next_ci: 0,
        }
    }
}

impl<S> Clients<S> {
    /// Adds a slot, or says why not: at most [`MAX_CLIENTS`] in all, of which the last
    /// [`ROOT_RESERVED_SLOTS`] only for uid 0, and at most [`MAX_CLIENTS_PER_UID`] per
    /// non-root uid.
    pub fn add(&mut self, fd: i32, pid: i32, uid: u32, stream: Option<S>) -> Result<u32, Refused> {
        self.admit(uid)?;
        Ok(self.insert(fd, pid, uid, stream))
    }

    /// Adds a slot in place of one of the same uid just closed (the reactor's idle
    /// eviction): the total and the uid's own count stay what they were, so the bounds
    /// of [`Clients::add`] hold without checking them again (for a non-root uid the
    /// table may be full of root's slots; its own slot is still its own). Only the
    /// total is checked again: another thread may have taken the freed slot meanwhile.
    pub fn add_in_place_of_own(
        &mut self,
        fd: i32,
        pid: i32,
        uid: u32,
        stream: Option<S>,
    ) -> Result<u32, Refused> {
        if self.slots.len() >= MAX_CLIENTS {
            return Err(Refused::Full);
        }
        Ok(self.insert(fd, pid, uid, stream))
    }

    fn insert(&mut self, fd: i32, pid: i32, uid: u32, stream: Option<S>) -> u32 {
        // Lowest free index, like sanlock's slot array (ci values stay small).
        let mut ci = 0;
        while self.slots.contains_key(&ci) {
            ci += 1;
        }
        self.next_ci = self.next_ci.max(ci + 1);
        self.slots.insert(
            ci,
            ClientSlot {
                ci,
                fd,
                pid,
                uid,
                registered: false,
                restricted: 0,
                cmd_active: 0,
                cmd_last: 0,
                pid_dead: false,
                killpath: None,
                killpath_status: None,
                tokens: Vec::new(),
                owner_name: Name::EMPTY,
                kill_count: 0,
                kill_last: 0,
                stream,
                waiting: None,
            },
        );
        assert!(
            self.slots.len() <= MAX_CLIENTS,
            "client table holds {} slots, more than {MAX_CLIENTS}",
            self.slots.len()
        );
        ci
    }

    /// Whether a connection from `uid` may take a slot now. A scan of at most MAX_CLIENTS
    /// slots per accepted connection: cheap, and no second count to keep in step with
    /// the places that remove slots.
    fn admit(&self, uid: u32) -> Result<(), Refused> {
        let used = self.slots.len();
        if uid == 0 {
            return if used < MAX_CLIENTS {
                Ok(())
            } else {
                Err(Refused::Full)
            };
        }
        if used >= MAX_CLIENTS - ROOT_RESERVED_SLOTS {
            return Err(Refused::Full);
        }
        let of_uid = self.slots.values().filter(|c| c.uid == uid).count();
        if of_uid >= MAX_CLIENTS_PER_UID {
            return Err(Refused::UidLimit);
        }
        Ok(())
    }

    /// The live registered client with this pid.
    pub fn by_pid(&self, pid: i32) -> Option<u32> {
        self.slots
            .values()
            .find(|c| c.registered && c.pid == pid && !c.pid_dead)
            .map(|c| c.ci)
    }
}

/// How a resource is held locally. `H` is the on-disk state of the lease the shell keeps
/// to release or convert it (the daemon: lease-core's token and who opened the disk);
/// the core reads only its lease version ([`LeaseHold::lver`]).
#[derive(Debug, Clone)]
pub struct LocalRes<H> {
    pub ls: Name,
    pub name: Name,
    pub disks: Vec<wire::DiskLocation>,
    pub shared: bool,
    /// Client slots holding it (several only for shared).
    pub holders: Vec<u32>,
    /// Being acquired, converted or released on disk: other local requests are refused
    /// (see [`crate::Tables::start_acquire`]).
    pub busy: bool,
    /// `busy` with a release on disk (the last holder's, or an orphan's). A local acquire
    /// of it waits for the release to end (bounded), then goes on; if the wait runs out it
    /// gets -EAGAIN, sanlock's answer for a resource being released. Set only with `busy`.
    pub releasing: bool,
    /// A persistent lease whose holder exited: held on disk, adoptable with
    /// ACQUIRE_ORPHAN, released with REL_ORPHAN or at lockspace removal.
    pub orphan: bool,
    /// The on-disk state needed to release or convert.
    pub held: H,
}

/// What the core needs to know of the on-disk state of a held lease.
pub trait LeaseHold: Clone + Default + std::fmt::Debug {
    /// The lease version held (0 before the disk acquire ends).
    fn lver(&self) -> u64;
    /// SET_LVB: replaces the start of the lease's value block with `data`; `None` when
    /// this state has no lease to set it in (the daemon's: no lease-core token; a hold
    /// type with no value block, as the tests' and the simulator's, by default).
    fn set_lvb(&mut self, _data: &[u8]) -> Option<Result<(), lease_core::LeaseError>> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fill(c: &mut Clients<()>, uid: u32, n: usize) -> usize {
        (0..n).filter(|_| c.add(-1, 1, uid, None).is_ok()).count()
    }

    #[test]
    fn one_uid_gets_at_most_its_share() {
        let mut c = Clients::<()>::default();
        assert_eq!(fill(&mut c, 1000, 5000), MAX_CLIENTS_PER_UID);
        assert_eq!(c.add(-1, 1, 1000, None), Err(Refused::UidLimit));
        // Another uid is not affected.
        assert!(c.add(-1, 1, 1001, None).is_ok());
    }

    #[test]
    fn root_keeps_its_reserve_when_other_uids_fill_the_table() {
        let mut c = Clients::<()>::default();
        let mut taken = 0;
        for uid in 1000..1010 {
            taken += fill(&mut c, uid, 5000);
        }
        assert_eq!(taken, MAX_CLIENTS - ROOT_RESERVED_SLOTS);
        assert_eq!(c.add(-1, 1, 2000, None), Err(Refused::Full));
        assert_eq!(fill(&mut c, 0, 5000), ROOT_RESERVED_SLOTS);
        assert_eq!(c.add(-1, 1, 0, None), Err(Refused::Full));
        assert_eq!(c.slots.len(), MAX_CLIENTS);
        // A freed slot is reused, by root or (outside the reserve) anyone.
        let ci = *c.slots.keys().next().unwrap();
        c.slots.remove(&ci);
        assert_eq!(c.add(-1, 1, 0, None), Ok(ci));
    }

    #[test]
    fn root_may_use_every_slot() {
        let mut c = Clients::<()>::default();
        assert_eq!(fill(&mut c, 0, 5000), MAX_CLIENTS);
    }
}
