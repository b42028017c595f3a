//! The dispatch table: one request from its header to its handler.
//!
//! A pool worker hands every header the event loop read to [`run_command`], which checks
//! its magic, the connection's restriction and the protocol version, then to [`dispatch`], which reads the whole request with
//! `client_lib::request::read_request` and then runs the handler of its [`Request`]
//! variant. Handlers never read from the socket; they act on the typed request and write
//! their reply on the connection.
//!
//! Invariants:
//! - bytes are read exactly as sanlock reads them (the reader's contract); a request that
//!   cannot be read is answered with the reader's code in the command's reply shape (bare
//!   result, or result and a zeroed `sanlk_rentry` for the rindex entry commands), and an
//!   unknown command gets `-EOPNOTSUPP` (sanlock sends nothing, so a newer client would
//!   wait for ever) with the connection left open;
//! - the registered-client commands (ACQUIRE, RELEASE, INQUIRE, CONVERT, KILLPATH) resolve
//!   and mark their target client from the header *before* the payload is read, as sanlock
//!   does: a refused target drains the message unread ([`crate::cmd::registered_cmd`]);
//! - whether the connection stays open after a command depends only on the command (and,
//!   for SHUTDOWN_WAIT, on whether the shutdown was refused), never on a read error;
//! - every command runs as its sender (`crate::access`): storage opens are made with the
//!   sender's rights, and with `client_privileges = "uid"` a non-root sender gets -EPERM
//!   for SHUTDOWN, for REQUEST/EXAMINE of leases another uid's process holds here, and
//!   for REM_LOCKSPACE/SET_CONFIG/SET_EVENT of a lockspace another uid added (and, in
//!   `cmd`, for RELEASE of its orphans).

use std::sync::Arc;

use client_lib::proto::*;
use client_lib::request::{self, read_request, Request, RequestError};
use client_lib::wire::{self, Header, Rentry, HEADER_LEN};
use disk_format::Name;
use tracing::{debug, info, warn};

use crate::access::Caller;
use crate::admin::AdminError;
use crate::cmd_error::LeaseCmdError;
use crate::rindex::RindexCmdError;
use crate::server::{After, Conn, Reply};
use crate::space::SpaceError;
use crate::state::Daemon;
use crate::sync::lock;
use crate::{cmd, permit};

/// Runs the one request whose 32-byte header `hb` the reactor read from `conn`.
///
/// Commands are answered during a shutdown too, until the last lockspace is gone (the
/// event loop then stops): closing a connection instead would, for a lease holder that
/// the shutdown could not kill (SIGKILL restricted), release its lease while it runs.
/// What a shutdown must refuse, the handlers refuse (ADD_LOCKSPACE: -EAGAIN; acquires
/// find their lockspace removed: -ENOSPC).
pub(crate) fn run_command(d: &Arc<Daemon>, conn: &mut Conn, hb: &[u8; HEADER_LEN]) -> After {
    let Ok(h) = Header::decode(hb) else {
        return After::Close;
    };
    if h.magic != SM_MAGIC {
        // sanlock ignores such a message: no reply, connection left open.
        debug!(
            ci = conn.ci,
            magic = h.magic,
            "ignoring message with bad magic"
        );
        return After::Keep;
    }
    let restricted = lock(&d.core)
        .clients
        .slots
        .get(&conn.ci)
        .map(|c| c.restricted)
        .unwrap_or(0);
    if restricted & SANLK_RESTRICT_ALL != 0 {
        debug!(
            ci = conn.ci,
            cmd = h.cmd,
            "ignoring message on restricted connection"
        );
        conn.drain(&h, 0);
        return After::Keep;
    }
    if h.version != 0
        && h.cmd != SM_CMD_VERSION
        && (h.version & 0xFFFF_0000) > (SM_PROTO & 0xFFFF_0000)
    {
        debug!(
            ci = conn.ci,
            version = h.version,
            "ignoring message of newer protocol"
        );
        return After::Keep;
    }
    lock(&d.core).change(lockd_core::Input::NoteCommand {
        ci: conn.ci,
        cmd: h.cmd,
    });
    dispatch(d, conn, &h)
}

/// Runs one command whose header `h` was read from `conn`.
pub(crate) fn dispatch(d: &Arc<Daemon>, conn: &mut Conn, h: &Header) -> After {
    debug!(
        ci = conn.ci,
        cmd = cmd_name(h.cmd),
        flags = h.cmd_flags,
        data = h.data,
        data2 = h.data2,
        "command"
    );
    // Every storage open for the command is made with the sender's rights: its handler
    // is given `caller`.
    let caller = Caller::of(conn);
    if request::is_client_cmd(h.cmd) {
        cmd::registered_cmd(d, conn, h, &caller);
        return After::Keep;
    }
    match read_request(h, conn) {
        Ok(req) => match refused_by_uid(d, &caller, &req) {
            Some(rv) => {
                warn!(
                    ci = conn.ci,
                    uid = caller.uid(),
                    cmd = cmd_name(h.cmd),
                    "refused: not allowed for this uid (client_privileges = \"uid\")"
                );
                refuse_uid(conn, h, rv)
            }
            None => handle(d, conn, &caller, h, req),
        },
        Err(e) => refuse(conn, h, &e),
    }
}

/// `Some(-EPERM)` when the uid rules (`crate::access`) forbid `req` to `caller`.
fn refused_by_uid(d: &Daemon, caller: &Caller, req: &Request) -> Option<i32> {
    let same = |a: &Name, b: &Name| a.same_as(b);
    let space_rule = |name: &Name, kills_holders: bool| {
        d.find_space(name)
            .is_none_or(|s| permit::may_manage_space(d, caller, &s, kills_holders))
    };
    let allowed = match req {
        Request::Shutdown | Request::ShutdownWait => permit::may_shutdown(d, caller),
        Request::RequestLease(res) => permit::may_act_on_holders(d, caller, |ls, name| {
            same(ls, &res.head.lockspace_name) && same(name, &res.head.name)
        }),
        Request::ExamineResource(head) => permit::may_act_on_holders(d, caller, |ls, name| {
            same(ls, &head.lockspace_name) && same(name, &head.name)
        }),
        Request::ExamineLockspace(ls) => {
            permit::may_act_on_holders(d, caller, |l, _| same(l, &ls.name))
        }
        Request::RemLockspace(ls) | Request::SetHost(ls, _) | Request::InitLockspaceHost(ls, _) => {
            space_rule(&ls.name, true)
        }
        Request::SetConfig(ls) | Request::SetEvent(ls, _) => space_rule(&ls.name, false),
        _ => true,
    };
    (!allowed).then_some(-libc::EPERM)
}

/// Answers a command the uid rules refused. SHUTDOWN has no reply in sanlock's
/// protocol; a refused one gets the result anyway (a client that reads nothing just
/// closes), and the connection is closed.
fn refuse_uid(conn: &mut Conn, h: &Header, rv: i32) -> After {
    conn.reply(h, rv);
    match h.cmd {
        SM_CMD_SHUTDOWN | SM_CMD_SHUTDOWN_WAIT => After::Close,
        cmd => after(cmd),
    }
}

/// What happens to the connection after `cmd` (sanlock closes the connection of its
/// one-shot query commands).
fn after(cmd: u32) -> After {
    match cmd {
        SM_CMD_SHUTDOWN
        | SM_CMD_STATUS
        | SM_CMD_HOST_STATUS
        | SM_CMD_RENEWAL
        | SM_CMD_LOG_DUMP
        | SM_CMD_GET_LOCKSPACES
        | SM_CMD_GET_HOSTS
        | SM_CMD_SET_CONFIG
        | SM_CMD_REG_EVENT
        | SM_CMD_END_EVENT
        | client_lib::ext::LOCKD_CMD_METRICS => After::Close,
        _ => After::Keep,
    }
}

/// Answers a request that could not be read.
fn refuse(conn: &mut Conn, h: &Header, e: &RequestError) -> After {
    let rv = e.code();
    if let RequestError::Unknown { cmd } = e {
        // The reader has drained it; the connection stays open, as sanlock leaves it.
        debug!(ci = conn.ci, cmd, "refusing unknown command");
    }
    match h.cmd {
        // The entry commands always answer with a sanlk_rentry after the result, also
        // when the request was cut short (then all zero), as sanlock does.
        SM_CMD_LOOKUP_RINDEX
        | SM_CMD_UPDATE_RINDEX
        | SM_CMD_CREATE_RESOURCE
        | SM_CMD_DELETE_RESOURCE => {
            conn.reply_with(h, rv, 0, &Rentry::new(Name::EMPTY, 0).encode());
        }
        _ => conn.reply(h, rv),
    }
    after(h.cmd)
}

/// The table: each request to its handler.
/// A lockspace command's reply code: 0, or the refusal's code (its reason is logged, at
/// debug level for INQ_LOCKSPACE, which clients poll).
fn space_code(h: &Header, result: Result<(), SpaceError>) -> i32 {
    match result {
        Ok(()) => 0,
        Err(e) => {
            if h.cmd == SM_CMD_INQ_LOCKSPACE {
                debug!(cmd = h.cmd, reason = %e, "lockspace command refused");
            } else {
                info!(cmd = h.cmd, reason = %e, code = e.code(), "lockspace command refused");
            }
            e.code()
        }
    }
}

/// A lease command's reply code: 0, or the failure's code (its reason is logged).
fn lease_code(h: &Header, result: Result<(), LeaseCmdError>) -> i32 {
    LeaseCmdError::reply_code(h.cmd, &result)
}

/// A disk command's reply code (`crate::admin`): 0, or the refusal's code, its reason
/// logged.
fn admin_code(h: &Header, result: Result<(), AdminError>) -> i32 {
    result.map_or_else(|e| e.refused(h.cmd), |()| 0)
}

/// FORMAT_RINDEX's and REBUILD_RINDEX's reply code (`crate::rindex`): 0, or the
/// refusal's code, its reason logged.
fn rindex_code(h: &Header, result: Result<(), RindexCmdError>) -> i32 {
    result.map_or_else(|e| e.refused(h.cmd), |()| 0)
}

/// Writes a handler's reply and says what becomes of the connection.
fn send(conn: &mut Conn, reply: Reply, after: After) -> After {
    conn.send_reply(reply);
    after
}

fn handle(d: &Arc<Daemon>, conn: &mut Conn, caller: &Caller, h: &Header, req: Request) -> After {
    use crate::{lockspace, watch};
    let rv = match req {
        Request::Register => {
            cmd::register(d, conn);
            return After::Keep;
        }
        Request::Restrict => {
            cmd::restrict(d, conn, h);
            0
        }
        Request::Version => return send(conn, cmd::version(), After::Keep),
        Request::Shutdown => {
            cmd::shutdown(d, h.data != 0);
            return After::Close;
        }
        Request::ShutdownWait => return cmd::shutdown_wait(d, conn, h),
        Request::Status => return send(conn, cmd::status(d, h), After::Close),
        Request::HostStatus(ls) => return send(conn, cmd::host_status(d, h, &ls), After::Close),
        Request::Renewal(ls) => return send(conn, cmd::renewal(d, h, &ls), After::Close),
        Request::LogDump => return send(conn, cmd::log_dump(d, h), After::Close),
        Request::GetLockspaces => return send(conn, cmd::get_lockspaces(d, h), After::Close),
        Request::GetHosts(ls) => return send(conn, cmd::get_hosts(d, h, &ls), After::Close),
        Request::SetConfig(ls) => space_code(h, lockspace::set_config(d, &ls.name, h.data)),
        Request::RegEvent(ls) => space_code(h, lockspace::reg_event(d, &ls, &conn.stream)),
        Request::EndEvent(ls) => space_code(h, lockspace::end_event(d, &ls)),
        Request::SetEvent(ls, he) => {
            space_code(h, lockspace::set_event(d, conn.ci, &ls, &he, h.cmd_flags))
        }
        Request::AddLockspace(ls) => {
            space_code(h, lockspace::add(d, caller, &ls, h.data, h.cmd_flags))
        }
        Request::InqLockspace(ls) => space_code(h, lockspace::inq(d, &ls, h.cmd_flags)),
        Request::RemLockspace(ls) => space_code(h, lockspace::rem(d, conn.ci, &ls, h.cmd_flags)),
        req @ (Request::Align(_)
        | Request::WriteLockspace(_)
        | Request::ReadLockspace(_)
        | Request::ReadLockspaceHost(_)
        | Request::InitLockspaceHost(..)
        | Request::WriteResource(_)
        | Request::ReadResource(_)
        | Request::ReadResourceOwners(_)
        | Request::FormatRindex(_)
        | Request::RebuildRindex(..)
        | Request::LookupRindex(..)
        | Request::UpdateRindex(..)
        | Request::CreateResource(..)
        | Request::DeleteResource(..)) => return handle_disk(d, conn, caller, h, req),
        Request::SetHost(ls, host) => space_code(h, lockspace::set_host(d, &ls, &host, h.data)),
        Request::SetLvb { resource, lvb } => lease_code(h, cmd::set_lvb(d, &resource, &lvb)),
        Request::GetLvb(head) => {
            let reply = match cmd::get_lvb(d, &head, h.data2 as usize) {
                Ok(lvb) => Reply::with(h, 0, 0, &lvb),
                Err(e) => Reply::result(h, lease_code(h, Err(e))),
            };
            return send(conn, reply, After::Keep);
        }
        Request::RequestLease(res) => lease_code(h, cmd::request(d, caller, conn.ci, &res, h)),
        Request::ExamineLockspace(ls) => space_code(h, cmd::examine(d, &ls.name)),
        Request::ExamineResource(head) => space_code(h, cmd::examine(d, &head.lockspace_name)),
        Request::Watch => {
            watch::handle_watch(d, conn, h);
            return After::Keep;
        }
        Request::AcquireForPid {
            killpath_path,
            killpath_args,
            resources,
        } => lease_code(
            h,
            crate::forpid::acquire_for_pid(
                d,
                conn,
                caller,
                h,
                killpath_path,
                killpath_args,
                &resources,
            ),
        ),
        Request::Leader(res) => {
            let reply = match watch::leader(d, caller, &res) {
                Ok(info) => Reply::with(h, 0, 0, &info.encode()),
                Err(e) => Reply::result(h, e.refused(h.cmd)),
            };
            return send(conn, reply, After::Keep);
        }
        Request::Metrics => return send(conn, cmd::metrics(d, h), After::Close),
        // The registered-client commands go through `cmd::registered_cmd`; a variant
        // added to the reader without a handler here is refused, never ignored.
        _ => -libc::EINVAL,
    };
    conn.reply(h, rv);
    after(h.cmd)
}

/// The disk commands (`crate::admin`, `crate::rindex`): storage named by the request,
/// opened with the sender's rights.
fn handle_disk(
    d: &Arc<Daemon>,
    conn: &mut Conn,
    caller: &Caller,
    h: &Header,
    req: Request,
) -> After {
    use crate::{admin, rindex};
    let rv = match req {
        Request::Align(disk) => admin::align(caller, &disk).unwrap_or_else(|e| e.refused(h.cmd)),
        Request::WriteLockspace(ls) => {
            admin_code(h, admin::write_lockspace(d, caller, &ls, h.data2))
        }
        Request::ReadLockspace(mut ls) => {
            let (rv, io_timeout) = match admin::read_lockspace(d, caller, &mut ls) {
                Ok(io_timeout) => (0, io_timeout),
                Err(e) => (e.refused(h.cmd), 0),
            };
            return send(
                conn,
                Reply::with(h, rv, io_timeout, &ls.encode()),
                After::Keep,
            );
        }
        Request::ReadLockspaceHost(mut ls) => {
            let (rv, io_timeout, host) = match admin::read_lockspace_host(d, caller, &mut ls) {
                Ok((io_timeout, host)) => (0, io_timeout, host),
                Err(e) => (e.refused(h.cmd), 0, wire::Host::default()),
            };
            let mut p = ls.encode().to_vec();
            host.encode_into(&mut p);
            return send(conn, Reply::with(h, rv, io_timeout, &p), After::Keep);
        }
        Request::InitLockspaceHost(ls, rec) => {
            admin_code(h, admin::init_lockspace_host(d, caller, &ls, &rec, h.data2))
        }
        Request::WriteResource(res) => admin_code(
            h,
            admin::write_resource(
                d,
                caller,
                &res,
                h.data,
                h.cmd_flags & SANLK_WRITE_CLEAR != 0,
            ),
        ),
        Request::ReadResource(res) => {
            return send(conn, cmd::read_resource(d, caller, h, res), After::Keep);
        }
        Request::ReadResourceOwners(res) => {
            return send(
                conn,
                cmd::read_resource_owners(d, caller, h, &res),
                After::Keep,
            );
        }
        Request::FormatRindex(ri) => rindex_code(h, rindex::format(d, caller, &ri)),
        Request::RebuildRindex(ri) => rindex_code(h, rindex::rebuild(d, caller, &ri, h.cmd_flags)),
        Request::LookupRindex(ri, re)
        | Request::UpdateRindex(ri, re)
        | Request::CreateResource(ri, re)
        | Request::DeleteResource(ri, re) => {
            let (rv, out) = match rindex::entry(d, caller, h, &ri, &re) {
                Ok(out) => (0, out),
                Err(e) => (e.refused(h.cmd), e.rentry()),
            };
            return send(conn, Reply::with(h, rv, 0, &out.encode()), After::Keep);
        }
        // Only the disk commands come here (`handle`); anything else is refused.
        _ => -libc::EINVAL,
    };
    conn.reply(h, rv);
    after(h.cmd)
}
