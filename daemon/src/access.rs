//! Storage opened with the client's own rights: who sent a command ([`Caller`]) and
//! [`open_disk`].
//!
//! The daemon runs as root; its socket is open to group `sanlock`. A path a client names
//! (WRITE/READ_LOCKSPACE, WRITE/READ_RESOURCE, READ_RESOURCE_OWNERS, ALIGN, the rindex
//! commands, ADD_LOCKSPACE, ACQUIRE, ACQUIRE_FOR_PID, CONVERT, RELEASE, REQUEST, LEADER)
//! is opened as that client: on a short-lived thread that took the client's uid, gid and
//! supplementary groups as its filesystem credentials (`sys::with_fs_creds`), and the
//! daemon then does its I/O through the fd that open returned. The credentials are the
//! ones the kernel recorded when the client connected (`SO_PEERCRED`, `SO_PEERGROUPS`).
//!
//! The caller is data, never the thread's: every open names whose rights it uses. A
//! handler gets the sender's [`Caller`] from `crate::dispatch`; a disk acquire gets it from
//! the core (`DiskOp::Acquire::opener`, the ACQUIRE's sender, on whichever thread runs
//! it); a release, convert or examine from the held lease (`Held::opened_by`); a
//! lockspace's thread from the lockspace (`Space::added_by`). So a disk acquire that waited
//! for a release and runs later, on whatever thread, still opens as its sender, never as
//! the daemon: lockd-core's
//! `an_acquire_carries_its_flags_lver_and_sender_to_the_disk_and_names_its_client` keeps
//! the sender in `DiskOp::Acquire`, and `daemon/tests/client_privileges.rs` checks the
//! rights end to end (a member cannot write what it cannot write itself; missing and
//! unreadable paths in a closed directory look the same).
//!
//! Invariants:
//! - every lease-storage open for a command of a non-root client goes through
//!   [`open_disk`] with that client as the caller and is checked by the kernel as that
//!   client's open(2) would be: no more right than the client has, and the same errors (a
//!   path under a directory it cannot search is EACCES whether or not the file exists, so
//!   nothing about the directory's contents leaks);
//! - a command that only reads opens read-only (read permission suffices); one that may
//!   write opens read-write (write permission needed);
//! - root clients (uid 0), and the daemon's own opens outside any command, open as the
//!   daemon, as before; so does every open of a daemon that does not run as root (it has
//!   only its service user's rights, as sanlock, and cannot take a client's);
//! - a lockspace is joined with the rights of the client that added it (its thread opens
//!   the disk with the [`Caller`] stored in the lockspace).
//!
//! The uid rules of the commands (who may remove a lockspace, signal holders, shut down)
//! are in `crate::permit`.

use std::path::Path;

use lockd_diskio::{Access, DirectDisk, DirectIoError, EngineKind};
use tracing::warn;

use crate::server::Conn;
use crate::sys;

/// Credentials to act with (plain data, kept in the core's client table with a killpath).
pub use lockd_core::FsCreds;

/// Who sent the command being run: uid, gid and supplementary groups at connect time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub creds: FsCreds,
}

impl Caller {
    /// The sender of commands on `conn`. Supplementary groups that cannot be read leave
    /// the caller with its uid and gid only (fewer rights, never more).
    pub fn of(conn: &Conn) -> Caller {
        let groups = if conn.cred.uid == 0 {
            Vec::new()
        } else {
            sys::peer_groups(&conn.stream).unwrap_or_else(|e| {
                warn!(ci = conn.ci, error = %e, "cannot read the client's groups; using none");
                Vec::new()
            })
        };
        Caller {
            creds: FsCreds {
                uid: conn.cred.uid,
                gid: conn.cred.gid,
                groups,
            },
        }
    }

    pub fn uid(&self) -> u32 {
        self.creds.uid
    }

    pub fn is_root(&self) -> bool {
        self.creds.uid == 0
    }

    /// Root: opens with the daemon's own rights (the daemon's tests, which call the
    /// handlers directly).
    pub fn root() -> Caller {
        Caller {
            creds: FsCreds {
                uid: 0,
                gid: 0,
                groups: Vec::new(),
            },
        }
    }

    /// The caller whose credentials the core carried (`DiskOp::Acquire::opener`).
    pub fn from_creds(creds: FsCreds) -> Caller {
        Caller { creds }
    }
}

/// What a command does with a disk it opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// Only reads: read permission suffices (a non-root caller's fd is read-only).
    Read,
    /// May write: write permission needed.
    Write,
}

/// Opens lease storage as `caller` (the daemon's own rights for None or root).
pub(crate) fn open_disk(
    caller: Option<&Caller>,
    path: &Path,
    need: Need,
    kind: EngineKind,
) -> Result<DirectDisk, DirectIoError> {
    // A daemon not running as root (sanlock's own model: a service user) has no more
    // right than that user, and could not take another user's credentials anyway.
    let Some(caller) = caller.filter(|c| !c.is_root() && sys::geteuid() == 0) else {
        return DirectDisk::open_with(path, kind);
    };
    let access = match need {
        Need::Read => Access::ReadOnly,
        Need::Write => Access::ReadWrite,
    };
    let creds = &caller.creds;
    DirectDisk::open_via(path, access, kind, |p, a| {
        sys::with_fs_creds(creds, || lockd_diskio::open_direct(p, a))?
    })
}
