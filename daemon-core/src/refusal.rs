//! The core's own refusals of a client's request, typed: each [`Refusal`] is one reason,
//! with the code sanlock answers for it ([`Refusal::errno`], a negative errno: what the
//! wire carries) and its reason for the shell's log ([`Refusal::why`]). The request path
//! (`commands`) refuses with a variant; the code is taken at the edge of the core, when
//! the reply is made ([`crate::CoreReply`]'s `rv` and `why`).
//!
//! Invariants: a variant's code and reason are fixed (the table below is the only place
//! that maps them); a refusal changes nothing in the core's state.

use crate::errno::{EBUSY, EINPROGRESS, ENOENT, ENOSPC};
use crate::events::EventRefused;
use crate::tables::TableRefused;
use crate::watches::WatchRefused;

/// Why the core refused a request on its own (not a disk operation's failure, whose code
/// is lease-core's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// SET_EVENT in a lockspace that is not here (-ENOENT).
    NoSuchLockspace,
    /// REQUEST in a lockspace not joined, or whose lease is lost (-ENOSPC).
    NotJoined,
    /// REM_LOCKSPACE with `SANLK_REM_UNUSED` while leases are held in it (-EBUSY).
    LeasesHeld,
    /// REM_LOCKSPACE while the orphans it keeps (`used_by_orphans`) are there (-EBUSY).
    OrphansKept,
    /// REM_LOCKSPACE while a removal is in progress (-EINPROGRESS).
    RemovalInProgress,
    /// REM_LOCKSPACE of a lockspace the core itself is still adding (-EBUSY).
    BeingAdded,
    /// SET_EVENT refused by the lockspace's outgoing event.
    Event(EventRefused),
    /// WATCH refused by the watch registry.
    Watch(WatchRefused),
    /// A lease command refused by the client and resource tables.
    Table(TableRefused),
}

impl Refusal {
    /// Sanlock's code for the refusal: a negative errno.
    pub fn errno(self) -> i32 {
        match self {
            Refusal::NoSuchLockspace => -ENOENT,
            Refusal::NotJoined => -ENOSPC,
            Refusal::LeasesHeld | Refusal::OrphansKept | Refusal::BeingAdded => -EBUSY,
            Refusal::RemovalInProgress => -EINPROGRESS,
            Refusal::Event(e) => e.code(),
            Refusal::Watch(w) => w.code(),
            Refusal::Table(t) => t.code(),
        }
    }

    /// The reason, for the shell's log.
    pub fn why(self) -> &'static str {
        match self {
            Refusal::NoSuchLockspace => "no such lockspace",
            Refusal::NotJoined => "the lockspace is not joined",
            Refusal::LeasesHeld => "leases are held in it (REM_UNUSED)",
            Refusal::OrphansKept => "its orphan leases are in use (SET_CONFIG)",
            Refusal::RemovalInProgress => "a removal is in progress",
            Refusal::BeingAdded => "it is being added",
            Refusal::Event(e) => e.why(),
            Refusal::Watch(w) => w.why(),
            Refusal::Table(t) => t.why(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_refusal_has_sanlocks_code() {
        use crate::errno::{EINVAL, EMFILE, EPERM};
        let codes = [
            (Refusal::NoSuchLockspace, -ENOENT),
            (Refusal::NotJoined, -ENOSPC),
            (Refusal::LeasesHeld, -EBUSY),
            (Refusal::OrphansKept, -EBUSY),
            (Refusal::RemovalInProgress, -EINPROGRESS),
            (Refusal::BeingAdded, -EBUSY),
            (Refusal::Event(EventRefused::BadHostId), -EINVAL),
            (Refusal::Event(EventRefused::Busy), -EBUSY),
            (Refusal::Watch(WatchRefused::NoPid), -EINVAL),
            (Refusal::Watch(WatchRefused::NotYours), -EPERM),
            (Refusal::Watch(WatchRefused::Full), -EMFILE),
            (Refusal::Table(TableRefused::CommandRunning), -EBUSY),
        ];
        for (r, code) in codes {
            assert_eq!(r.errno(), code, "{r:?}");
            assert!(!r.why().is_empty(), "{r:?}");
        }
    }
}
