//! The uid rules of the commands that act on other clients' leases and processes, or on
//! the daemon: SHUTDOWN, REQUEST/EXAMINE of leases another uid's process holds here,
//! REM_LOCKSPACE/SET_CONFIG/SET_EVENT of a lockspace another uid added, and the
//! credentials a registered killpath runs with.
//!
//! The rules apply with `client_privileges = "uid"` (the default) to non-root callers;
//! `"sanlock"` lets every client that can reach the socket do what sanlock lets it
//! (docs/daemon.md, "What group sanlock may do"). A rule never grants more than the
//! caller's uid has here: when any holder in question belongs to another uid, the answer
//! is no.

use crate::access::{Caller, FsCreds};
use crate::config::ClientPrivileges;
use crate::state::Daemon;
use crate::sync::lock;

/// True when the uid rules are on (`client_privileges = "uid"`) and `caller` is subject to
/// them (not root).
fn restricted(d: &Daemon, caller: &Caller) -> bool {
    d.cfg.client_privileges == ClientPrivileges::Uid && !caller.is_root()
}

/// SHUTDOWN and SHUTDOWN_WAIT: root only (under the uid rules).
pub(crate) fn may_shutdown(d: &Daemon, caller: &Caller) -> bool {
    !restricted(d, caller)
}

/// Whether `caller` may act on the local holders of leases selected by `pick` (REQUEST
/// and EXAMINE, which end in a holder being signalled): only when every process of this
/// host holding one was given its leases by `caller`'s uid.
pub(crate) fn may_act_on_holders(
    d: &Daemon,
    caller: &Caller,
    pick: impl Fn(&disk_format::Name, &disk_format::Name) -> bool,
) -> bool {
    if !restricted(d, caller) {
        return true;
    }
    let tables = lock(&d.core);
    tables
        .clients
        .slots
        .values()
        .filter(|c| c.tokens.iter().any(|t| pick(&t.ls, &t.name)))
        .all(|c| c.uid == caller.uid())
}

/// REM_LOCKSPACE, SET_CONFIG, SET_EVENT on lockspace `space`: root, or the uid that added
/// it — and, for removal (`kills_holders`), only while no process of another uid holds a
/// lease in it (removal SIGKILLs the holders).
pub(crate) fn may_manage_space(
    d: &Daemon,
    caller: &Caller,
    space: &crate::space::Space,
    kills_holders: bool,
) -> bool {
    if !restricted(d, caller) {
        return true;
    }
    if space.added_by_uid != caller.uid() {
        return false;
    }
    !kills_holders || may_act_on_holders(d, caller, |ls, _| ls.same_as(&space.name))
}

/// The credentials a killpath registered by `caller` runs with: None (as the daemon,
/// root) for root or with `client_privileges = "sanlock"`.
pub(crate) fn killpath_creds(d: &Daemon, caller: &Caller) -> Option<FsCreds> {
    restricted(d, caller).then(|| caller.creds.clone())
}
