//! Leases for a process that did not register (lockd extension `LOCKD_CMD_ACQUIRE_FOR_PID`,
//! used by `lockd acquire --for-pid` and hypervisor hooks).
//!
//! The daemon makes a client slot for the pid with no connection, takes the leases on it,
//! and watches the pid through a pidfd in the reactor's epoll set (`reactor.rs`): when
//! the process exits, the slot is closed exactly
//! as a registered client's connection closing is (its leases are released). While it
//! lives, the slot is an ordinary registered client: the kill escalation (killpath, then
//! SIGTERM, then SIGKILL) and requests from other hosts reach it by pid.
//!
//! Invariants: the pidfd is opened *before* the slot exists, so the process cannot exit
//! unnoticed, and a pid is refused unless it names a live, non-zombie process of the
//! caller's uid (any uid for root). Request payload (read by
//! `client_lib::request::read_request` before [`acquire_for_pid`] runs): a 256-byte
//! killpath (path[128], args[128]; empty path = none), then `count` sanlk_resources with
//! their disks; header data = pid, data2 = count, cmd_flags = acquire flags
//! (`SANLK_KILLPATH_PID` in the high bit field is not used: the pid is always appended to
//! the killpath's arguments).

use std::sync::Arc;

use client_lib::wire::{self, Header};
use disk_format::Name;
use lockd_core::{Answer, CoreRequest, Input};
use tracing::{info, warn};

use crate::cmd_error::LeaseCmdError;
use crate::server::Conn;
use crate::state::Daemon;
use crate::sync::lock;
use crate::sys;
use crate::tables::KillPath;

/// Real uid and state letter of `pid` from /proc (None when it is gone).
fn proc_uid_state(pid: i32) -> Option<(u32, char)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let mut uid = None;
    let mut state = None;
    for line in status.lines() {
        if let Some(v) = line.strip_prefix("Uid:") {
            uid = v.split_whitespace().next().and_then(|u| u.parse().ok());
        } else if let Some(v) = line.strip_prefix("State:") {
            state = v.trim().chars().next();
        }
    }
    Some((uid?, state?))
}

/// `LOCKD_CMD_ACQUIRE_FOR_PID` (read by `client_lib::request::read_request`).
pub(crate) fn acquire_for_pid(
    d: &Arc<Daemon>,
    conn: &Conn,
    caller: &crate::access::Caller,
    h: &Header,
    killpath_path: String,
    killpath_args: String,
    wanted: &[wire::Resource],
) -> Result<(), LeaseCmdError> {
    let pid = h.data as i32;
    if pid <= 0 {
        return Err(LeaseCmdError::Invalid("a pid that is not positive"));
    }
    // The pidfd first: from here on the process cannot exit unnoticed.
    let pidfd = match sys::pidfd_open(pid) {
        Ok(fd) => fd,
        Err(e) => {
            info!(pid, error = %e, "acquire for pid: pidfd_open failed");
            return Err(LeaseCmdError::NoProcess);
        }
    };
    match proc_uid_state(pid) {
        None | Some((_, 'Z')) | Some((_, 'X')) => return Err(LeaseCmdError::NoProcess),
        Some((uid, _)) if conn.cred.uid != 0 && uid != conn.cred.uid => {
            warn!(
                pid,
                caller_uid = conn.cred.uid,
                owner_uid = uid,
                "acquire for pid refused: another user's process"
            );
            return Err(LeaseCmdError::NotPermitted("another user's process"));
        }
        Some(_) => {}
    }
    // The killpath runs with the rights of the client that asked (`crate::access`).
    let run_as = crate::permit::killpath_creds(d, caller);
    let killpath = (!killpath_path.is_empty()).then(|| KillPath {
        path: killpath_path.clone(),
        args: killpath_args.clone(),
        with_pid: true,
        run_as,
    });
    crate::cmd::check_rights_to_hold(d, caller, wanted)?;
    // The slot is made with its command active: the acquire runs on it as a command the
    // shell began.
    let input = Input::AddPidClient {
        pid,
        uid: conn.cred.uid,
        killpath,
    };
    let Answer::PidClientAdded(added) = lock(&d.core).answer(input) else {
        unreachable!("AddPidClient is answered PidClientAdded")
    };
    let ci = added.map_err(LeaseCmdError::Refused)?;
    let req = CoreRequest::Acquire {
        res: wanted.iter().map(crate::paxos::res_spec).collect(),
        cmd_flags: h.cmd_flags,
        owner_name: Name::from_field(format!("pid{pid}").as_bytes()),
        opener: Some(caller.creds.clone()),
    };
    let acquired = match crate::cmd::core_command(d, ci, req) {
        Ok(reply) => reply.leases,
        Err(e) => {
            // The core gave back the leases the acquire had taken, and ended its command.
            let dropped = lock(&d.core).answer(Input::DropFailedPidClient { ci });
            let Answer::PidClientDropped(dropped) = dropped else {
                unreachable!("DropFailedPidClient is answered PidClientDropped")
            };
            if let Err(busy) = dropped {
                panic!("a failed --for-pid slot still holds a token ({busy:?}); stopping");
            }
            return Err(e);
        }
    };
    let names: Vec<String> = acquired
        .iter()
        .map(|t| format!("{}:{}", t.ls, t.name))
        .collect();
    info!(pid, ci, leases = ?names, killpath = ?killpath_path, "leases acquired for pid");
    let watched = match d.reactor.get() {
        Some(r) => r.watch_pid(ci, pid, pidfd),
        None => Err(std::io::Error::from_raw_os_error(libc::ENOSYS)),
    };
    if let Err(e) = watched {
        // Without a watch the leases would outlive the process: give them back.
        warn!(pid, error = %e, "cannot watch the process; releasing its leases");
        crate::cmd::connection_closed(d, ci);
        return Err(LeaseCmdError::NoResources("a watch of the process"));
    }
    Ok(())
}

/// Slot numbers are reused: is `ci` still the connection-less slot of `pid`?
pub(crate) fn still_ours(d: &Daemon, ci: u32, pid: i32) -> bool {
    is_pid_slot(&lock(&d.core), ci, pid)
}

/// [`still_ours`] on tables the caller has locked.
pub(crate) fn is_pid_slot(tables: &crate::tables::LeaseTables, ci: u32, pid: i32) -> bool {
    tables
        .clients
        .slots
        .get(&ci)
        .is_some_and(|c| c.pid == pid && c.fd == -1 && c.stream.is_none())
}
