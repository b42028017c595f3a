//! Command handlers: one function per SM_CMD, replying with sanlock's result codes.
//!
//! Handlers receive the request already read and decoded (`client_lib::request`, called
//! from `dispatch.rs`); none reads from the socket. Each answers with sanlock's reply
//! shape, on the connection or as a value its caller writes (the registered-client
//! commands return `(result, data2, payload)` to [`registered_cmd`], which clears the
//! client's `cmd_active` before replying). Errors never escape as panics: a missing
//! lockspace is `-ENOSPC`/`-ENOENT`, a lease not held `-ENOENT` or -1, as sanlock.

use std::sync::Arc;

use client_lib::proto::*;
use client_lib::request::{read_request, ReleaseWhat, Request};
use client_lib::wire::{self, Header, State};
use disk_format::Name;
use tracing::{info, info_span};

use crate::access::{self, Caller};
use crate::cmd_error::LeaseCmdError;
use crate::server::{After, Conn, Reply};
use crate::space::SpaceError;
use crate::state::Daemon;
use crate::sync::lock;
use crate::tables::Key;
use crate::tables::{ClientToken, KillPath};
use crate::{admin, lockspace, paxos, permit, sys};
use lockd_core::{Answer, CoreReply, CoreRequest, HeldLease, Input};

/// RESTRICT: the connection's restriction flags (from `cmd_flags`).
pub(crate) fn restrict(d: &Arc<Daemon>, conn: &Conn, h: &Header) {
    lock(&d.core).change(Input::SetRestrict {
        ci: conn.ci,
        flags: h.cmd_flags,
    });
    info!(
        ci = conn.ci,
        pid = conn.cred.pid,
        flags = h.cmd_flags,
        "restrict"
    );
}

/// VERSION: a fresh header carrying sanlock's combined version in data2.
pub(crate) fn version() -> Reply {
    let r = Header {
        magic: SM_MAGIC,
        version: SM_PROTO,
        cmd: SM_CMD_VERSION,
        cmd_flags: 0,
        length: wire::HEADER_LEN as u32,
        seq: 0,
        data: 0,
        data2: SANLOCK_VERSION_COMBINED,
    };
    Reply(r.encode().to_vec())
}

/// SHUTDOWN_WAIT: -EBUSY while lockspaces exist (unless forced); otherwise replies when
/// the daemon exits.
pub(crate) fn shutdown_wait(d: &Arc<Daemon>, conn: &mut Conn, h: &Header) -> After {
    let force = h.data != 0;
    if !force && !lock(&d.spaces).is_empty() {
        conn.reply(h, -libc::EBUSY);
        return After::Keep;
    }
    shutdown(d, force);
    // Reply when the daemon exits: `run` closes remaining connections after
    // the last lockspace is gone, and this reply goes first.
    d.shutdown.wait();
    crate::wait_spaces_gone(d);
    conn.reply(h, 0);
    After::Close
}

pub(crate) fn log_dump(d: &Arc<Daemon>, h: &Header) -> Reply {
    let text = d.log.dump();
    let mut r = h.result_reply(0);
    r.data = u32::try_from(text.len()).unwrap_or(0);
    let mut msg = r.encode().to_vec();
    msg.extend_from_slice(&text);
    Reply(msg)
}

pub(crate) fn get_lockspaces(d: &Arc<Daemon>, h: &Header) -> Reply {
    let list = lockspace::get_lockspaces(d);
    let mut p = Vec::new();
    for ls in &list {
        ls.encode_into(&mut p);
    }
    Reply::with(h, 0, list.len() as u32, &p)
}

pub(crate) fn read_resource(
    d: &Arc<Daemon>,
    caller: &Caller,
    h: &Header,
    mut res: wire::Resource,
) -> Reply {
    let rv = admin::read_resource(d, caller, &mut res).map_or_else(|e| e.refused(h.cmd), |()| 0);
    let mut p = Vec::new();
    res.head.encode_into(&mut p);
    Reply::with(h, rv, 0, &p)
}

pub(crate) fn read_resource_owners(
    d: &Arc<Daemon>,
    caller: &Caller,
    h: &Header,
    res: &wire::Resource,
) -> Reply {
    match admin::read_resource_owners(d, caller, res) {
        Ok((head, hosts)) => {
            let mut p = Vec::new();
            head.encode_into(&mut p);
            for host in &hosts {
                host.encode_into(&mut p);
            }
            Reply::with(h, 0, hosts.len() as u32, &p)
        }
        Err(e) => Reply::result(h, e.refused(h.cmd)),
    }
}

/// EXAMINE_LOCKSPACE / EXAMINE_RESOURCE: -ENOENT unless the lockspace exists.
pub(crate) fn examine(d: &Arc<Daemon>, ls: &Name) -> Result<(), SpaceError> {
    let space = d.find_space(ls).ok_or(SpaceError::NotFound)?;
    // On the lockspace's one examine thread: EXAMINE in a loop cannot start threads
    // without bound.
    lockspace::examine_in_background(d, &space);
    Ok(())
}

/// lockd METRICS: the Prometheus text, or -E2BIG when it does not fit one message.
pub(crate) fn metrics(d: &Arc<Daemon>, h: &Header) -> Reply {
    let text = crate::exporter::render(d);
    if text.len() + wire::HEADER_LEN > MAX_CLIENT_MSG as usize {
        Reply::result(h, -libc::E2BIG)
    } else {
        Reply::with(h, 0, 0, text.as_bytes())
    }
}

/// REQUEST: ask the holder of a lease to give it up (force mode in header.data). The
/// core decides (`CoreRequest::RequestLease`: -ENOSPC unless the lockspace is joined, as
/// sanlock; the owner host's bit in our bitmap afterwards); this worker writes the
/// request record (`Effect::WriteRequest`, lease-core's `paxos::request`) and reports
/// its end (`Input::RequestWritten`).
pub(crate) fn request(
    d: &Arc<Daemon>,
    caller: &Caller,
    ci: u32,
    r: &wire::Resource,
    h: &Header,
) -> Result<(), LeaseCmdError> {
    let span = info_span!("resource", ls = %r.head.lockspace_name, res = %r.head.name);
    let _g = span.enter();
    let force_mode = h.data;
    let next = h.cmd_flags & SANLK_REQUEST_NEXT_LVER != 0;
    let fx = lock(&d.core).step(
        crate::clock::now_s(),
        lockd_core::Input::Request {
            ci,
            req: lockd_core::CoreRequest::RequestLease {
                ls: r.head.lockspace_name,
                name: r.head.name,
                lver: r.head.lver,
                next_lver: next,
                force_mode,
            },
        },
    );
    let op = match fx.as_slice() {
        [lockd_core::Effect::WriteRequest { op, .. }] => *op,
        [lockd_core::Effect::Reply { reply, .. }] if reply.rv == -libc::ENOSPC => {
            return Err(LeaseCmdError::Space(SpaceError::NotJoined));
        }
        other => panic!("REQUEST gave effects other than its write or refusal: {other:?}"),
    };
    let space = d.find_space(&r.head.lockspace_name);
    let written = paxos::request(caller, space.as_deref(), r, force_mode, next);
    let result = match &written {
        Ok(owner) => Ok(*owner),
        Err(e) => Err(e.code()),
    };
    let fx = lock(&d.core).step(
        crate::clock::now_s(),
        lockd_core::Input::RequestWritten { op, result },
    );
    assert!(
        matches!(fx.as_slice(), [lockd_core::Effect::Reply { ci: to, .. }] if *to == ci),
        "a request's write gave effects other than its reply: {fx:?}"
    );
    let owner = written?;
    info!(force_mode, owner = ?owner, "request written");
    Ok(())
}

/// SET_LVB of a lease this host holds.
pub(crate) fn set_lvb(
    d: &Arc<Daemon>,
    r: &wire::ResourceHead,
    data: &[u8],
) -> Result<(), LeaseCmdError> {
    let not_held = LeaseCmdError::NotHeld("SET_LVB of a lease not held here");
    let input = Input::SetLvb {
        key: (r.lockspace_name, r.name),
        lvb: data.to_vec(),
    };
    let Answer::LvbSet(set) = lock(&d.core).answer(input) else {
        unreachable!("SetLvb is answered LvbSet")
    };
    match set {
        None => Err(not_held),
        Some(result) => result.map_err(LeaseCmdError::paxos),
    }
}

pub(crate) fn get_lvb(
    d: &Arc<Daemon>,
    r: &wire::ResourceHead,
    want: usize,
) -> Result<Vec<u8>, LeaseCmdError> {
    let tables = lock(&d.core);
    let token = tables
        .resources
        .get(&(r.lockspace_name, r.name))
        .and_then(|lr| lr.held.token.as_ref())
        .ok_or(LeaseCmdError::NotHeld("GET_LVB of a lease not held here"))?;
    let lvb = token.lvb().ok_or(LeaseCmdError::Invalid(
        "GET_LVB of a lease acquired without SANLK_ACQUIRE_LVB",
    ))?;
    let n = if want == 0 {
        lvb.len()
    } else {
        want.min(lvb.len())
    };
    Ok(lvb[..n].to_vec())
}

/// REGISTER, through the core (no reply: sanlock's REGISTER has none).
pub(crate) fn register(d: &Arc<Daemon>, conn: &Conn) {
    let (ci, pid) = (conn.ci, conn.cred.pid);
    let input = Input::Request {
        ci,
        req: CoreRequest::Register,
    };
    let fx = lock(&d.core).step(crate::clock::now_s(), input);
    assert!(fx.is_empty(), "REGISTER gave effects: {fx:?}");
    info!(ci, pid, "client registered");
}

pub(crate) fn shutdown(d: &Arc<Daemon>, force: bool) {
    if !force && !lock(&d.spaces).is_empty() {
        info!("shutdown ignored: lockspaces exist");
        return;
    }
    info!(force, "shutdown requested");
    if force {
        lockspace::stop_all(d);
    }
    d.request_shutdown();
}

/// Runs on a pool worker when a connection closed (or a process watched for its leases
/// exited): the core ends the client (`Input::Closed`), and a registered client's
/// leases are released as a dead holder's (persistent ones become orphans).
pub fn connection_closed(d: &Arc<Daemon>, ci: u32) {
    crate::watch::connection_closed(d, ci);
    // None: an unregistered slot, or a command from another connection is running on
    // this client and frees it when done (`registered_cmd`).
    let held = lock(&d.core).clients.slots.get(&ci).map(|c| {
        let persistent: Vec<Key> = c
            .tokens
            .iter()
            .filter(|t| t.persistent)
            .map(ClientToken::key)
            .collect();
        (c.pid, c.tokens.len(), c.cmd_active != 0, persistent)
    });
    if let Some((pid, tokens, false, _)) = &held {
        if *tokens > 0 {
            info!(
                ci,
                pid, tokens, "client connection closed: releasing its leases"
            );
        }
    }
    // On the pool worker that saw the connection close (or the pid exit): the release I/O
    // holds up that worker only, never the event loop or another client (sanlock
    // releases asynchronously for the same reason). Failures are logged where they
    // happen; nobody waits for the answer.
    let persistent = held.map(|h| h.3).unwrap_or_default();
    let run = paxos::step_and_run(d, Input::Closed { ci }, &persistent);
    assert!(run.replies.is_empty(), "a client's end answers nobody");
}

/// Releases tokens of client `ci` through the core (`Input::ReleaseTokens`: local
/// bookkeeping, then the disk release of each lease's last holder); when the holder
/// died (`dying`), a persistent lease whose last local holder it was becomes an orphan
/// instead of being released (sanlock §2.9). Every token is released; the result is the
/// last failure.
pub fn release_tokens_as(
    d: &Arc<Daemon>,
    ci: u32,
    tokens: Vec<ClientToken>,
    dying: bool,
) -> Result<(), LeaseCmdError> {
    if tokens.is_empty() {
        return Ok(());
    }
    let persistent: Vec<Key> = if dying {
        tokens
            .iter()
            .filter(|t| t.persistent)
            .map(ClientToken::key)
            .collect()
    } else {
        Vec::new()
    };
    let input = Input::ReleaseTokens { ci, tokens, dying };
    let run = paxos::step_and_run(d, input, &persistent);
    assert!(run.replies.is_empty(), "a release of tokens answers nobody");
    run.disk_error.map_or(Ok(()), Err)
}

/// Resolves the target of a registered-client command from its header and marks it
/// active, then reads the request (as sanlock: a refused target is answered without
/// reading the payload, which is drained), runs it, and cleans up a client that died
/// meanwhile.
pub(crate) fn registered_cmd(d: &Arc<Daemon>, conn: &mut Conn, h: &Header, caller: &Caller) {
    let target = match resolve_target(d, conn, h) {
        Ok(ci) => ci,
        Err(e) => {
            conn.drain(h, 0);
            conn.reply(h, LeaseCmdError::reply_code(h.cmd, &Err(e)));
            return;
        }
    };
    let out = match read_request(h, conn) {
        Ok(req) => client_cmd(d, conn.ci, caller, h, target, req),
        Err(e) => CmdOutcome::answer(e.code()),
    };
    let (rv, data2, payload) = (out.rv, out.data2, out.payload);
    let op = match h.cmd {
        SM_CMD_ACQUIRE | SM_CMD_ACQUIRE2 => Some(crate::metrics::Op::Acquire),
        SM_CMD_RELEASE => Some(crate::metrics::Op::Release),
        SM_CMD_CONVERT => Some(crate::metrics::Op::Convert),
        _ => None,
    };
    if let Some(op) = op {
        crate::metrics::global().result(op, rv);
    }
    // Clear cmd_active; if the client died meanwhile, release what it holds now. (A
    // command run through the core was ended there, with the same release.)
    if !out.ended_in_core {
        let dead_tokens = {
            let mut core = lock(&d.core);
            // Begun by `resolve_target` and not handed to the core: still active, or it
            // was ended twice (which could end another connection's command on it).
            let active = core
                .clients
                .slots
                .get(&target)
                .is_some_and(|c| c.cmd_active != 0);
            assert!(
                active,
                "client {target}: the dispatcher would end a command that is not active"
            );
            let Answer::CommandFinished(dead) = core.answer(Input::FinishCommand { target }) else {
                unreachable!("FinishCommand is answered CommandFinished")
            };
            dead
        };
        if let Some(tokens) = dead_tokens {
            // A dead client's releases answer nobody; failures are logged where they
            // happen.
            let _ = release_tokens_as(d, target, tokens, true);
        }
    }
    conn.reply_with(h, rv, data2, &payload);
}

/// What a registered-client command came to: the reply's result, data2 and payload, and
/// whether the command was handed to the core (`Input::Command`), which then ended it —
/// otherwise [`registered_cmd`] ends it. ACQUIRE and ACQUIRE2, RELEASE (of named leases,
/// of all, with a rename), CONVERT and INQUIRE are handed to the core once the shell's
/// own checks passed; a refusal before that, KILLPATH and a RELEASE of orphans are ended
/// here. Ending a command twice could end another connection's command begun on the
/// same client in between (the core would then stop the daemon at that command's step).
struct CmdOutcome {
    rv: i32,
    data2: u32,
    payload: Vec<u8>,
    ended_in_core: bool,
}

impl CmdOutcome {
    /// A bare result, the command ended by [`registered_cmd`].
    fn answer(rv: i32) -> CmdOutcome {
        CmdOutcome {
            rv,
            data2: 0,
            payload: Vec::new(),
            ended_in_core: false,
        }
    }
}

/// Runs lease command `req`, begun on client `target` by [`registered_cmd`], through
/// the core to its answer, carrying out what it decides on this worker
/// ([`paxos::run_command`]); the core's answer.
pub(crate) fn core_command(
    d: &Arc<Daemon>,
    target: u32,
    req: CoreRequest,
) -> Result<CoreReply, LeaseCmdError> {
    paxos::run_command(d, target, req).answer(target)
}

/// The registered-client commands' table: what a request from connection `ci` acting on
/// client `target` came to ([`CmdOutcome`]). The protocol edge of these commands: their
/// typed errors become sanlock's codes here, with the reason logged.
fn client_cmd(
    d: &Arc<Daemon>,
    ci: u32,
    caller: &Caller,
    h: &Header,
    target: u32,
    req: Request,
) -> CmdOutcome {
    let code = |result: Result<(), LeaseCmdError>| LeaseCmdError::reply_code(h.cmd, &result);
    // A command handed to the core: the core ends it, whatever it answers.
    let in_core = |req: CoreRequest| {
        let (rv, reply) = match core_command(d, target, req) {
            Ok(reply) => (code(Ok(())), Some(reply)),
            Err(e) => (code(Err(e)), None),
        };
        let out = CmdOutcome {
            ended_in_core: true,
            ..CmdOutcome::answer(rv)
        };
        (out, reply)
    };
    // ACQUIRE: the shell's check of the sender's rights, then the core (which ends the
    // command whatever it answers); a refused check is ended by `registered_cmd`.
    let acquire = |resources: &[wire::Resource], options: &wire::Options| match check_rights_to_hold(
        d, caller, resources,
    ) {
        Ok(()) => in_core(acquire_request(caller, h, resources, options)).0,
        Err(e) => CmdOutcome::answer(code(Err(e))),
    };
    match req {
        Request::Acquire {
            resources, options, ..
        } => acquire(&resources, &options),
        Request::Acquire2 {
            resources, options, ..
        } => {
            let mut out = acquire(&resources, &options);
            let rv = out.rv;
            if let (true, Some(r)) = (rv < 0, resources.first()) {
                if let Some(payload) = acquire2_owner(d, caller, r) {
                    out.data2 = h.data2;
                    out.payload = payload;
                }
            }
            out
        }
        Request::Release(what) => match release_request(d, caller, what) {
            Ok(ReleasePlan::Core(req)) => in_core(req).0,
            // As sanlock: a release of orphans answers how many it released.
            Ok(ReleasePlan::OrphansReleased(n)) => {
                CmdOutcome::answer(i32::try_from(n).unwrap_or(i32::MAX))
            }
            Err(e) => CmdOutcome::answer(code(Err(e))),
        },
        Request::Inquire => {
            let (mut out, reply) = in_core(CoreRequest::Inquire);
            if let Some(reply) = reply {
                (out.data2, out.payload) = inquire_reply(&reply.leases);
            }
            out
        }
        Request::Convert(head) => match convert_request(d, h, target, &head) {
            Ok(req) => in_core(req).0,
            Err(e) => CmdOutcome::answer(code(Err(e))),
        },
        Request::Killpath { path, args } => {
            CmdOutcome::answer(code(killpath(d, ci, caller, h, target, path, args)))
        }
        _ => CmdOutcome::answer(code(Err(LeaseCmdError::Invalid(
            "not a registered-client command",
        )))),
    }
}

/// The owner part of a failed ACQUIRE2's reply (as sanlock 5.1.1 sends it when another
/// host holds the lease): a `sanlk_host` (owner host_id, generation, the leader's
/// timestamp, io_timeout 0, the owner's state in our view) and its 48-byte host name.
/// `None` when nobody else holds it (then the reply is the bare result).
fn acquire2_owner(d: &Arc<Daemon>, caller: &Caller, r: &wire::Resource) -> Option<Vec<u8>> {
    let info = crate::watch::leader(d, caller, r).ok()?;
    let ours = d
        .find_space(&r.head.lockspace_name)
        .is_some_and(|s| s.host_id == info.host_id);
    if info.host_id == 0 || ours {
        return None;
    }
    let timestamp = crate::admin::read_resource_owners(d, caller, r)
        .ok()
        .and_then(|(_, owners)| owners.first().map(|o| o.timestamp))
        .unwrap_or(0);
    let mut p = Vec::new();
    wire::Host {
        host_id: info.host_id,
        generation: info.generation,
        timestamp,
        io_timeout: 0,
        flags: info.host_state,
    }
    .encode_into(&mut p);
    p.extend_from_slice(&info.host_name.0);
    Some(p)
}

fn resolve_target(d: &Arc<Daemon>, conn: &Conn, h: &Header) -> Result<u32, LeaseCmdError> {
    let target = crate::tables::CommandTarget {
        conn_ci: conn.ci,
        conn_uid: conn.cred.uid,
        cmd: h.cmd,
        cmd_flags: h.cmd_flags,
        data2: h.data2,
    };
    let Answer::CommandStarted(began) = lock(&d.core).answer(Input::StartCommand(target)) else {
        unreachable!("StartCommand is answered CommandStarted")
    };
    began.map_err(LeaseCmdError::Refused)
}

/// ACQUIRE and ACQUIRE2 as the core runs them ([`core_command`], after
/// [`check_rights_to_hold`]): each lease in order, taken here (a local shared holder, an
/// adopted orphan) or on disk, waiting in the core for a release of it here to end
/// (-EAGAIN after `lockd_core::release_wait_s`), all or none. Every ACQUIRE names the
/// client anew from its options, an empty name included, as sanlock does (`sanlock
/// client command` leaves its client with no name in STATUS); the core sets or clears
/// its waiting mark (STATUS `waiting=`).
fn acquire_request(
    caller: &Caller,
    h: &Header,
    wanted: &[wire::Resource],
    opt: &wire::Options,
) -> CoreRequest {
    CoreRequest::Acquire {
        res: wanted.iter().map(paxos::res_spec).collect(),
        cmd_flags: h.cmd_flags,
        owner_name: opt.owner_name,
        opener: Some(caller.creds.clone()),
    }
}

/// A lease held here already is shared or adopted without disk I/O: a non-root sender
/// gets one only if it could open each of its disks for writing itself (`crate::access`; a disk
/// acquire opens it so anyway). Checked for every lease before the acquire starts; a
/// lockspace that is not joined answers first.
pub(crate) fn check_rights_to_hold(
    d: &Arc<Daemon>,
    caller: &Caller,
    wanted: &[wire::Resource],
) -> Result<(), LeaseCmdError> {
    if caller.is_root() {
        return Ok(());
    }
    for r in wanted {
        lockspace::joined(d, &r.head.lockspace_name)?;
        if r.disks.is_empty() {
            return Err(LeaseCmdError::Invalid("a lease with no disk"));
        }
        // Every disk of a lease on several (client_privileges.rs, "acquire own and
        // victim"): a disk it may not open is not one it may hold a lease on.
        for disk in &r.disks {
            access::open_disk(
                Some(caller),
                std::path::Path::new(&disk.path.to_text()),
                access::Need::Write,
                lockd_diskio::EngineKind::SharedRing,
            )?;
        }
    }
    Ok(())
}

/// What a RELEASE comes to once the shell's checks passed.
enum ReleasePlan {
    /// The release for the core to run (`Input::Command`).
    Core(CoreRequest),
    /// `SANLK_REL_ORPHAN`: the orphans were released (the shell's `Input::ReleaseOrphans`);
    /// how many.
    OrphansReleased(u32),
}

/// RELEASE: the shell's checks, then the release the core runs (it takes the client's
/// tokens, asks for the disk releases of the leases' last holders and answers when they
/// ended) — or, for `SANLK_REL_ORPHAN`, the orphans released, after the uid check.
fn release_request(
    d: &Arc<Daemon>,
    caller: &Caller,
    what: ReleaseWhat,
) -> Result<ReleasePlan, LeaseCmdError> {
    let (keys, all, rename) = match what {
        ReleaseWhat::All => (Vec::new(), true, None),
        ReleaseWhat::Orphans(r) => {
            // Orphans have no client left to own them: releasing them is for whoever may
            // manage their lockspace (the uid rules of `crate::access`).
            let refused = d
                .find_space(&r.lockspace_name)
                .is_some_and(|s| !permit::may_manage_space(d, caller, &s, false));
            if refused {
                return Err(LeaseCmdError::NotPermitted(
                    "release of orphans: not allowed for this uid (client_privileges = \"uid\")",
                ));
            }
            let n = paxos::release_orphans(d, &r.lockspace_name, &r.name)?;
            return Ok(ReleasePlan::OrphansReleased(n));
        }
        // `SANLK_REL_RENAME`: two resources came, the held one and one carrying its new
        // name; the lease is released and, where this host clears the leader, the leader
        // is written with the new name (lvmlockd does this at vgremove). A lease the
        // client does not hold gives -1, as sanlock answers.
        ReleaseWhat::Rename { old, new } => {
            if new.name.is_empty() {
                return Err(LeaseCmdError::Invalid("a rename to an empty name"));
            }
            info!(res = %old.name, new_name = %new.name, "release with rename");
            (vec![(old.lockspace_name, old.name)], false, Some(new.name))
        }
        // As sanlock: every named lease the client holds is released; one it does not
        // hold makes the result -1 without stopping the others. None named (count 0, no
        // flags): a successful no-op (libvirt relies on it).
        ReleaseWhat::Named(heads) => (
            heads.iter().map(|r| (r.lockspace_name, r.name)).collect(),
            false,
            None,
        ),
    };
    Ok(ReleasePlan::Core(CoreRequest::Release {
        keys,
        all,
        rename,
    }))
}

/// sanlock's INQUIRE state string for one lease.
pub fn lease_state_string(t: &HeldLease) -> String {
    // Raw names, as sanlock's state string has them (Display escapes for logs).
    let mut s = format!("{}:{}", t.ls.to_text(), t.name.to_text());
    for disk in &t.disks {
        s.push(':');
        for c in disk.path.to_text().chars() {
            if c == ' ' || c == ':' {
                s.push('\\');
            }
            s.push(c);
        }
        s.push_str(&format!(":{}", disk.offset));
    }
    if t.shared {
        s.push_str(":SH");
    } else {
        s.push_str(&format!(":{}", t.lver));
    }
    s
}

/// INQUIRE's reply from the core's answer: the number of leases the client holds
/// (data2) and their state strings (none when it holds none).
fn inquire_reply(leases: &[HeldLease]) -> (u32, Vec<u8>) {
    if leases.is_empty() {
        return (0, Vec::new());
    }
    let state: Vec<String> = leases.iter().map(lease_state_string).collect();
    let mut p = state.join(" ").into_bytes();
    p.push(0);
    (u32::try_from(leases.len()).unwrap_or(u32::MAX), p)
}

/// CONVERT: the shell's checks (the lease is the client's and in the other mode, its
/// lockspace is joined: the lockspace table is still the shell's), then the convert for
/// the core to run.
fn convert_request(
    d: &Arc<Daemon>,
    h: &Header,
    target: u32,
    head: &wire::ResourceHead,
) -> Result<CoreRequest, LeaseCmdError> {
    let to_shared = head.flags & SANLK_RES_SHARED != 0;
    let key = (head.lockspace_name, head.name);
    let checked = lock(&d.core).convert_token(target, key, to_shared);
    checked.map_err(LeaseCmdError::Refused)?;
    lockspace::joined(d, &key.0)?;
    Ok(CoreRequest::Convert {
        key,
        to_shared,
        cmd_flags: h.cmd_flags,
    })
}

/// KILLPATH (on the client's own connection): the program runs, when the time comes,
/// with the rights of the client that set it (`crate::permit::killpath_creds`).
fn killpath(
    d: &Arc<Daemon>,
    ci: u32,
    caller: &Caller,
    h: &Header,
    target: u32,
    path: String,
    args: String,
) -> Result<(), LeaseCmdError> {
    if target != ci {
        return Err(LeaseCmdError::Invalid(
            "KILLPATH is for the client's own connection",
        ));
    }
    let run_as = permit::killpath_creds(d, caller);
    let run_as_uid = run_as.as_ref().map_or(0, |r| r.uid);
    let killpath = KillPath {
        path: path.clone(),
        args: args.clone(),
        with_pid: h.cmd_flags & SANLK_KILLPATH_PID != 0,
        run_as,
    };
    let input = Input::SetKillpath {
        ci: target,
        killpath,
    };
    let Answer::KillpathSet(pid) = lock(&d.core).answer(input) else {
        unreachable!("SetKillpath is answered KillpathSet")
    };
    if let Some(pid) = pid {
        info!(pid, path = ?path, args = ?args, run_as_uid, "killpath set");
    }
    Ok(())
}

pub(crate) fn get_hosts(d: &Arc<Daemon>, h: &Header, ls: &wire::Lockspace) -> Reply {
    // 5.x SANLK_GET_HOST_LOCAL: only our own entry.
    let host_id = match d.find_space(&ls.name) {
        Some(s) if h.cmd_flags & SANLK_GET_HOST_LOCAL != 0 => s.host_id,
        _ => ls.host_id,
    };
    match lockspace::get_hosts(d, &ls.name, host_id) {
        Ok(hosts) => {
            let mut p = Vec::new();
            for host in &hosts {
                host.encode_into(&mut p);
            }
            Reply::with(h, 0, hosts.len() as u32, &p)
        }
        Err(e) => Reply::result(h, e.code()),
    }
}

pub(crate) fn status(d: &Arc<Daemon>, h: &Header) -> Reply {
    let mut out = h.result_reply(0).encode().to_vec();
    let depth = h.data;
    State::encode_with_text(
        SANLK_STATE_DAEMON,
        0,
        0,
        d.cfg.host_name,
        &daemon_state_text(d),
        &mut out,
    );
    // One short look at the tables (a copy of what the records show); the text is
    // formatted after the lock is let go, so STATUS never holds acquires back.
    let snap = (depth != SANLK_STATE_DAEMON).then(|| StatusSnapshot::take(d));
    if let Some(snap) = &snap {
        encode_client_states(snap, &mut out);
    }
    if depth != SANLK_STATE_DAEMON && depth != SANLK_STATE_CLIENT {
        encode_lockspace_states(d, &mut out);
    }
    if depth != SANLK_STATE_DAEMON && depth != SANLK_STATE_CLIENT && depth != SANLK_STATE_LOCKSPACE
    {
        let snap = snap
            .as_ref()
            .expect("taken for every depth but the daemon's");
        encode_resource_states(snap, &mut out);
    }
    Reply(out)
}

/// STATUS's daemon record text: sanlock's fields, with lockd's values where it has them.
fn daemon_state_text(d: &Daemon) -> String {
    let helper_pid = d.helper.as_ref().map_or(0, |x| x.pid);
    format!(
        "our_host_name={} use_watchdog={} watchdog={} high_priority=0 mlock_level={} \
         quiet_fail=1 debug_renew=0 debug_clients=0 debug_cmds=0x0 renewal_history_size=180 \
         gid={} uid={} sh_retries={} max_sectors_kb_ignore=1 max_sectors_kb_align=0 \
         max_sectors_kb_num=0 max_worker_threads=0 write_init_io_timeout=60 use_aio=0 \
         io_timeout={} watchdog_fire_timeout={} kill_grace_seconds={} helper_pid={} \
         helper_kill_fd=-1 helper_full_count={} helper_last_status=0 monotime={} \
         version_str=lockd-{} version_num=3.8.5 version_hex={:08x} smproto_hex={:08x}",
        d.cfg.host_name,
        u8::from(d.cfg.use_watchdog),
        if d.cfg.use_watchdog { "wdmd" } else { "off" },
        d.mlock_level.load(std::sync::atomic::Ordering::Relaxed),
        0,
        sys::geteuid(),
        d.cfg.sh_retries,
        d.cfg.io_timeout_s,
        d.cfg.watchdog_fire_timeout_s,
        d.cfg.kill_grace_s,
        helper_pid,
        d.helper.as_ref().map_or(0, |x| x.full_count()),
        crate::clock::now_s(),
        env!("CARGO_PKG_VERSION"),
        SANLOCK_VERSION_COMBINED,
        SM_PROTO,
    )
}

/// STATUS's client records, in slot order.
fn encode_client_states(snap: &StatusSnapshot, out: &mut Vec<u8>) {
    for c in &snap.clients {
        let text = format!(
            "ci={} fd={} pid={} flags={:x} restricted={:x} cmd_active={} cmd_last={} \
             pid_dead={} kill_count={} kill_last={} suspend=0 need_free=0 \
             killpath_status={}{}",
            c.ci,
            c.fd,
            c.pid,
            u32::from(c.killpath_with_pid),
            c.restricted,
            c.cmd_active,
            c.cmd_last,
            u8::from(c.pid_dead),
            c.kill_count,
            c.kill_last,
            c.killpath_status.as_deref().unwrap_or("none"),
            c.waiting.map_or_else(String::new, |w| format!(
                " waiting={}:{} waiting_since={} waiting_rv={}",
                w.ls, w.name, w.since, w.last_rv
            )),
        );
        State::encode_with_text(SANLK_STATE_CLIENT, c.pid as u32, 0, c.name, &text, out);
    }
}

/// STATUS's lockspace records, each followed by its `sanlk_lockspace`.
fn encode_lockspace_states(d: &Arc<Daemon>, out: &mut Vec<u8>) {
    for (space, list) in lockspace::status_list(d) {
        let text = space.status_text(list);
        State::encode_with_text(
            SANLK_STATE_LOCKSPACE,
            0,
            space.host_id,
            space.name,
            &text,
            out,
        );
        space.wire_lockspace(0).encode_into(out);
    }
}

/// STATUS's resource records: the leases held by clients, then the orphans, each followed
/// by its `sanlk_resource`.
fn encode_resource_states(snap: &StatusSnapshot, out: &mut Vec<u8>) {
    for (pid, t, sector_size, align_size) in &snap.held {
        let text = format!(
            "{} acquired={}",
            resource_state_text(
                "held",
                t.shared,
                (*sector_size, *align_size),
                t.lver,
                t.token_id
            ),
            t.acquired,
        );
        State::encode_with_text(
            SANLK_STATE_RESOURCE,
            *pid as u32,
            t.lver,
            t.name,
            &text,
            out,
        );
        let flags = if t.shared { SANLK_RES_SHARED } else { 0 };
        encode_resource(out, (t.ls, t.name), t.lver, flags, &t.disks);
    }
    for o in &snap.orphans {
        let geometry = (o.sector_size, o.align_size);
        let text = resource_state_text("orphan", o.shared, geometry, o.lver, 0);
        State::encode_with_text(SANLK_STATE_RESOURCE, 0, o.lver, o.name, &text, out);
        let flags = SANLK_RES_PERSISTENT | if o.shared { SANLK_RES_SHARED } else { 0 };
        encode_resource(out, (o.ls, o.name), o.lver, flags, &o.disks);
    }
}

/// A STATUS resource record's text up to `token_id` (a held lease adds `acquired=`).
fn resource_state_text(
    list: &str,
    shared: bool,
    (sector_size, align_size): (u64, u64),
    lver: u64,
    token_id: u32,
) -> String {
    format!(
        "list={list} flags={:x} sector_size={sector_size} align_size={align_size} lver={lver} \
         reused=0 res_id=0 token_id={token_id}",
        if shared { SANLK_RES_SHARED } else { 0 },
    )
}

/// The `sanlk_resource` (and its disks) after a STATUS resource record.
fn encode_resource(
    out: &mut Vec<u8>,
    (ls, name): (Name, Name),
    lver: u64,
    flags: u32,
    disks: &[wire::DiskLocation],
) {
    wire::Resource {
        head: wire::ResourceHead {
            lockspace_name: ls,
            name,
            lver,
            data64: 0,
            data32: 0,
            unused: 0,
            flags,
            num_disks: disks.len() as u32,
        },
        disks: disks.to_vec(),
    }
    .encode_into(out);
}

/// What STATUS shows of one client slot, copied under the core lock.
struct ClientRow {
    ci: u32,
    fd: i32,
    /// -1 for a connection that did not register.
    pid: i32,
    name: Name,
    killpath_with_pid: bool,
    restricted: u32,
    cmd_active: u32,
    cmd_last: u32,
    pid_dead: bool,
    kill_count: u32,
    kill_last: u64,
    killpath_status: Option<String>,
    waiting: Option<crate::tables::Waiting>,
}

/// What STATUS shows of one orphan lease, copied under the core lock.
struct OrphanRow {
    ls: Name,
    name: Name,
    shared: bool,
    lver: u64,
    sector_size: u64,
    align_size: u64,
    disks: Vec<wire::DiskLocation>,
}

/// The tables as STATUS shows them, copied in one look under the core lock.
struct StatusSnapshot {
    /// In slot order.
    clients: Vec<ClientRow>,
    /// (holder pid, token, sector size, align size) of every lease held by a client.
    held: Vec<(i32, ClientToken, u64, u64)>,
    orphans: Vec<OrphanRow>,
}

impl StatusSnapshot {
    fn take(d: &Daemon) -> StatusSnapshot {
        let tables = lock(&d.core);
        let mut cis: Vec<u32> = tables.clients.slots.keys().copied().collect();
        cis.sort_unstable();
        let clients = cis
            .iter()
            .map(|ci| {
                let c = &tables.clients.slots[ci];
                ClientRow {
                    ci: c.ci,
                    fd: c.fd,
                    pid: if c.registered { c.pid } else { -1 },
                    name: if c.registered {
                        c.owner_name
                    } else {
                        Name::from_field(conn_owner_name(c.cmd_last).as_bytes())
                    },
                    killpath_with_pid: c.killpath.as_ref().is_some_and(|k| k.with_pid),
                    restricted: c.restricted,
                    cmd_active: c.cmd_active,
                    cmd_last: c.cmd_last,
                    pid_dead: c.pid_dead,
                    kill_count: c.kill_count,
                    kill_last: c.kill_last,
                    killpath_status: c.killpath_status.clone(),
                    waiting: c.waiting,
                }
            })
            .collect();
        let res = &tables.resources;
        let held = tables
            .clients
            .slots
            .values()
            .flat_map(|c| {
                c.tokens.iter().map(move |t| {
                    let lr = res.get(&t.key());
                    (
                        c.pid,
                        t.clone(),
                        lr.map_or(0, |l| l.held.sector_size()),
                        lr.map_or(0, |l| l.held.align_size()),
                    )
                })
            })
            .collect();
        let orphans = res
            .values()
            .filter(|r| r.orphan)
            .map(|lr| OrphanRow {
                ls: lr.ls,
                name: lr.name,
                shared: lr.shared,
                lver: lr.held.lver(),
                sector_size: lr.held.sector_size(),
                align_size: lr.held.align_size(),
                disks: lr.disks.clone(),
            })
            .collect();
        StatusSnapshot {
            clients,
            held,
            orphans,
        }
    }
}

/// The name sanlock gives an unregistered connection in STATUS, from its last command.
fn conn_owner_name(cmd: u32) -> String {
    match cmd {
        SM_CMD_SHUTDOWN => "shutdown".into(),
        SM_CMD_STATUS => "status".into(),
        SM_CMD_HOST_STATUS => "host_status".into(),
        SM_CMD_RENEWAL => "renewal".into(),
        SM_CMD_LOG_DUMP => "log_dump".into(),
        SM_CMD_GET_LOCKSPACES => "get_lockspaces".into(),
        SM_CMD_GET_HOSTS => "get_hosts".into(),
        SM_CMD_REG_EVENT => "reg_event".into(),
        SM_CMD_END_EVENT => "end_event".into(),
        SM_CMD_SET_CONFIG => "set_config".into(),
        0 => "client".into(),
        n => format!("cmd{n}"),
    }
}

pub(crate) fn host_status(d: &Arc<Daemon>, h: &Header, ls: &wire::Lockspace) -> Reply {
    let Some(space) = d.find_space(&ls.name) else {
        return Reply::result(h, -libc::ENOSPC);
    };
    let mut out = h.result_reply(0).encode().to_vec();
    space.host_state_records(&mut out);
    Reply(out)
}

pub(crate) fn renewal(d: &Arc<Daemon>, h: &Header, ls: &wire::Lockspace) -> Reply {
    let Some(space) = d.find_space(&ls.name) else {
        return Reply::result(h, -libc::ENOSPC);
    };
    let mut r = h.result_reply(0);
    r.data2 = space.io_timeout;
    let mut out = r.encode().to_vec();
    space.renewal_records(&mut out);
    Reply(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(cmd: u32, data: u32) -> Header {
        Header {
            magic: SM_MAGIC,
            version: SM_PROTO,
            cmd,
            cmd_flags: 0,
            length: wire::HEADER_LEN as u32,
            seq: 7,
            data,
            data2: 0,
        }
    }

    #[test]
    fn status_and_version_replies_are_made_without_a_socket() {
        let d = Daemon::for_tests("status-host");
        let mut ci = 0;
        crate::tables::change_outside_step(lock(&d.core), |tables| {
            ci = tables.clients.add(-1, 4242, 0, None).expect("a slot");
            let c = tables.clients.slots.get_mut(&ci).expect("the slot");
            c.registered = true;
            c.owner_name = Name::new("holder").unwrap();
        });
        let Reply(bytes) = status(&d, &request(SM_CMD_STATUS, 0));
        let head = Header::decode(bytes[..wire::HEADER_LEN].try_into().unwrap()).unwrap();
        assert_eq!((head.cmd, head.seq, head.data), (SM_CMD_STATUS, 7, 0));
        let text = String::from_utf8_lossy(&bytes);
        assert!(text.contains("our_host_name=status-host"), "{text}");
        assert!(text.contains(&format!("ci={ci} fd=-1 pid=4242")), "{text}");
        // Depth "daemon" stops after the daemon's record.
        let Reply(short) = status(&d, &request(SM_CMD_STATUS, SANLK_STATE_DAEMON));
        assert!(short.len() < bytes.len());
        assert!(!String::from_utf8_lossy(&short).contains("pid=4242"));

        let Reply(v) = version();
        let vh = Header::decode(v[..].try_into().unwrap()).unwrap();
        assert_eq!(
            (v.len(), vh.data2),
            (wire::HEADER_LEN, SANLOCK_VERSION_COMBINED)
        );
    }

    #[test]
    fn state_string_matches_sanlock_format() {
        let t = ClientToken {
            token_id: 1,
            ls: Name::new("ls").unwrap(),
            name: Name::new("res").unwrap(),
            disks: vec![wire::DiskLocation::new("/var/tmp/a b:c", 1048576).unwrap()],
            shared: false,
            persistent: false,
            lver: 3,
            acquired: 0,
        };
        assert_eq!(
            lease_state_string(&HeldLease::from(&t)),
            "ls:res:/var/tmp/a\\ b\\:c:1048576:3"
        );
        let sh = ClientToken { shared: true, ..t };
        assert_eq!(
            lease_state_string(&HeldLease::from(&sh)),
            "ls:res:/var/tmp/a\\ b\\:c:1048576:SH"
        );
    }

    /// The resource records' texts, as `sanlock client status -D` prints them after the
    /// record's name (sanlock 3.8.5's fields, in its order).
    #[test]
    fn resource_state_texts_are_sanlocks() {
        assert_eq!(
            resource_state_text("held", true, (4096, 8 << 20), 7, 3),
            "list=held flags=4 sector_size=4096 align_size=8388608 lver=7 reused=0 res_id=0 \
             token_id=3"
        );
        assert_eq!(
            resource_state_text("orphan", false, (512, 1 << 20), 2, 0),
            "list=orphan flags=0 sector_size=512 align_size=1048576 lver=2 reused=0 res_id=0 \
             token_id=0"
        );
    }
}
