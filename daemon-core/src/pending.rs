//! The work the core has in flight for its clients, as [`Core`](crate::Core) keeps it
//! between steps: a client's command ([`Cmd`]), a REQUEST's record write
//! ([`PendingRequest`]), a lockspace addition or removal or an orphan release waiting
//! for its end ([`AdminCmd`]), and what each disk operation in flight is for ([`OpFor`]).
//! The request path (`commands`) creates and ends them.
//!
//! Invariant: data only; imports nothing of the crate but leaf modules (`clients`, `io`,
//! `tables`), so the step and the request path can both name these types without
//! importing each other.

use disk_format::Name;

use crate::clients::{ClientToken, FsCreds};
use crate::io::{OpId, ReqKind, ResSpec};
use crate::tables::Key;

/// A client's command in progress.
#[derive(Debug)]
pub(crate) enum Cmd {
    Acquire(AcquireCmd),
    /// Disk releases still running, and the result so far.
    Release {
        pending: usize,
        rv: i32,
    },
    Convert {
        key: Key,
    },
}

#[derive(Debug)]
pub(crate) struct AcquireCmd {
    pub specs: Vec<ResSpec>,
    pub cmd_flags: u32,
    /// The sender's credentials, for each disk acquire's opens.
    pub opener: Option<FsCreds>,
    /// The next spec to acquire.
    pub next: usize,
    /// The leases taken so far (holders in the table, not yet the client's tokens).
    pub got: Vec<ClientToken>,
    /// Waiting for the disk release of this lease to end (-EAGAIN).
    pub waiting: Option<Key>,
    /// The spec whose wait for a release began, and when that wait ends
    /// ([`crate::release_wait_s`]): the first wait of a spec sets it, a later wait of the
    /// same spec keeps it, the tick past it answers -EAGAIN.
    pub wait_until_s: Option<(usize, u64)>,
}

/// A REQUEST whose record write runs in the shell ([`Effect::WriteRequest`]).
#[derive(Debug)]
pub(crate) struct PendingRequest {
    /// The client that asked (answered at the write's end).
    pub ci: u32,
    pub ls: Name,
    /// The request asks for something (an lver, a force mode, the next lver): the
    /// owner's bit is set.
    pub asks: bool,
}

/// A lockspace addition or removal, or an orphan release, waiting for its end, and the
/// connection to answer.
#[derive(Debug)]
pub(crate) struct AdminCmd {
    pub ci: u32,
    pub ls: Name,
    pub kind: ReqKind,
    /// The disk releases an orphan release waits for.
    pub ops: Vec<OpId>,
}

/// What a disk operation in flight is for.
#[derive(Debug)]
pub(crate) enum OpFor {
    Acquire {
        ci: u32,
        key: Key,
    },
    /// A release; `reply_to` the client whose RELEASE waits for it (none for a dead
    /// holder's, a failed acquire's or a planted early reply's).
    Release {
        reply_to: Option<u32>,
        key: Key,
    },
    Convert {
        ci: u32,
        key: Key,
        to_shared: bool,
    },
}

impl OpFor {
    pub(crate) fn key(&self) -> Key {
        match self {
            OpFor::Acquire { key, .. }
            | OpFor::Release { key, .. }
            | OpFor::Convert { key, .. } => *key,
        }
    }
}
