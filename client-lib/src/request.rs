//! Typed client requests: every command the lockd daemon handles, decoded in full from
//! its header and payload ([`read_request`]) and encoded back ([`Request::encode_payload`]).
//!
//! The framing is the one the daemon and the client share: a 32-byte [`Header`] (whose
//! `cmd_flags`, `data` and `data2` stay in the header and are not repeated here), then
//! the structs each command carries.
//!
//! Invariants:
//! - [`read_request`] reads exactly the bytes sanlock 3.8's daemon reads for the command,
//!   struct by struct and in its order: the header's `length` is only a bound, used where
//!   sanlock drains the rest of a message ([`PayloadSource::discard_rest`]). Where sanlock
//!   gives up early (too many resources, a bad `num_disks`) it reads no further and drains
//!   just what sanlock drains.
//! - Each failure maps to the result code sanlock answers ([`RequestError::code`]): a short
//!   payload is `-ENOTCONN`, too many resources or LVB bytes `-E2BIG`, a bad `num_disks`
//!   `-ERANGE`, an undecodable host event or disk `-EINVAL`, and an unknown command
//!   (drained whole) `-EOPNOTSUPP`: sanlock 3.8/5.1 send no reply to it, which leaves a
//!   newer client waiting forever for an answer, so lockd answers instead.
//! - Nothing here panics on bytes from a peer, and nothing here decides policy (targets,
//!   permissions, lockspace state): that is the daemon's.

use thiserror::Error;

use crate::ext::{LOCKD_CMD_ACQUIRE_FOR_PID, LOCKD_CMD_LEADER, LOCKD_CMD_METRICS, LOCKD_CMD_WATCH};
use crate::proto::*;
use crate::wire::{
    self, DiskLocation, Header, Host, HostEvent, Lockspace, Options, Rentry, Resource,
    ResourceHead, Rindex,
};

// Linux errno values of the result codes a request can fail with (client-lib has no libc).
const ENOTCONN: i32 = 107;
const E2BIG: i32 = 7;
const ERANGE: i32 = 34;
const EINVAL: i32 = 22;
const EOPNOTSUPP: i32 = 95;

/// Most LVB bytes a SET_LVB may carry (sanlock's bound).
pub const MAX_LVB_LEN: usize = 4096;
/// Most bytes of an acquire options string read (and dropped); libsanlock sends none.
pub const MAX_OPTIONS_STR_LEN: usize = 4096;

/// The payload bytes of a request did not all arrive (peer closed, or the read timed out).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error("request payload cut short")]
pub struct ShortRead;

/// Where a request's payload comes from: the daemon's connection (with its per-payload
/// read timeout), or a byte slice in tests and fuzzing.
pub trait PayloadSource {
    /// Reads exactly `n` more bytes of the message.
    fn read_payload(&mut self, n: usize) -> Result<Vec<u8>, ShortRead>;
    /// Reads and drops what is left of the message: the payload `header.length` claims,
    /// less the `consumed` bytes already read (bounded; never fails).
    fn discard_rest(&mut self, header: &Header, consumed: usize);
}

/// A request that cannot be read; [`RequestError::code`] is sanlock's answer to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum RequestError {
    /// A struct of the payload did not arrive in full (`-ENOTCONN`).
    #[error("{what}: payload cut short")]
    Short { what: &'static str },
    /// More resources (or LVB bytes) than sanlock accepts (`-E2BIG`).
    #[error("{what}: {count} given, at most {max} allowed")]
    TooMany {
        what: &'static str,
        count: usize,
        max: usize,
    },
    /// A resource claims no disks or more than `SANLK_MAX_DISKS` (`-ERANGE`).
    #[error("sanlk_resource: num_disks {num_disks} out of range")]
    DiskCount { num_disks: u32 },
    /// A struct arrived but does not decode (`-EINVAL`).
    #[error("{what}: invalid")]
    Invalid { what: &'static str },
    /// A command the daemon does not know (`-EOPNOTSUPP`; sanlock sends no reply).
    #[error("unknown command {cmd}")]
    Unknown { cmd: u32 },
}

impl RequestError {
    /// The result code to reply with (every request gets a reply, also an unknown one).
    pub fn code(&self) -> i32 {
        match self {
            RequestError::Short { .. } => -ENOTCONN,
            RequestError::TooMany { .. } => -E2BIG,
            RequestError::DiskCount { .. } => -ERANGE,
            RequestError::Invalid { .. } => -EINVAL,
            RequestError::Unknown { .. } => -EOPNOTSUPP,
        }
    }
}

/// Which leases a RELEASE names (by its `cmd_flags`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReleaseWhat {
    /// `SANLK_REL_ALL`: every lease of the target; no payload is read.
    All,
    /// `SANLK_REL_ORPHAN`: orphans of a lockspace (all of them when the name is empty).
    Orphans(ResourceHead),
    /// `SANLK_REL_RENAME`: the held lease, and the new name for its leader.
    Rename {
        old: ResourceHead,
        new: ResourceHead,
    },
    /// The named leases (`header.data` of them, sent without disks).
    Named(Vec<ResourceHead>),
}

/// One fully read client request. Header fields (`cmd_flags`, `data`, `data2`) are not
/// repeated: they stay in the [`Header`] the request came with.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Request {
    Register,
    Restrict,
    Version,
    Shutdown,
    ShutdownWait,
    Status,
    LogDump,
    GetLockspaces,
    HostStatus(Lockspace),
    Renewal(Lockspace),
    GetHosts(Lockspace),
    SetConfig(Lockspace),
    /// The `sanlk_host_event` that follows is read and not used (as sanlock).
    RegEvent(Lockspace),
    EndEvent(Lockspace),
    SetEvent(Lockspace, HostEvent),
    AddLockspace(Lockspace),
    InqLockspace(Lockspace),
    RemLockspace(Lockspace),
    Align(DiskLocation),
    WriteLockspace(Lockspace),
    ReadLockspace(Lockspace),
    WriteResource(Resource),
    ReadResource(Resource),
    ReadResourceOwners(Resource),
    SetLvb {
        resource: ResourceHead,
        lvb: Vec<u8>,
    },
    GetLvb(ResourceHead),
    /// SM_CMD_REQUEST: ask the holder of a lease to give it up.
    RequestLease(Resource),
    ExamineLockspace(Lockspace),
    /// Only the `sanlk_resource` head is read; its disks are drained.
    ExamineResource(ResourceHead),
    FormatRindex(Rindex),
    RebuildRindex(Rindex),
    LookupRindex(Rindex, Rentry),
    UpdateRindex(Rindex, Rentry),
    CreateResource(Rindex, Rentry),
    DeleteResource(Rindex, Rentry),
    Acquire {
        resources: Vec<Resource>,
        options: Options,
        /// The options string (libsanlock never sends one; read and kept as sent).
        options_str: Vec<u8>,
    },
    /// SM_CMD_ACQUIRE2 (5.x `sanlock_acquire2`): read as ACQUIRE.
    Acquire2 {
        resources: Vec<Resource>,
        options: Options,
        options_str: Vec<u8>,
    },
    /// SM_CMD_READ_LOCKSPACE_HOST (5.x).
    ReadLockspaceHost(Lockspace),
    /// SM_CMD_SET_HOST (5.x): the lockspace, then the host to act on.
    SetHost(Lockspace, Host),
    /// SM_CMD_INIT_LOCKSPACE_HOST (5.x): the lockspace (host_id, disk), then a leader
    /// record carrying the owner, generation, host name and timestamp to write.
    InitLockspaceHost(Lockspace, Box<disk_format::LeaderRecord>),
    Release(ReleaseWhat),
    Inquire,
    Convert(ResourceHead),
    Killpath {
        path: String,
        args: String,
    },
    /// lockd extension: lease-loss watch (no payload).
    Watch,
    /// lockd extension: leases for a pid that did not register.
    AcquireForPid {
        killpath_path: String,
        killpath_args: String,
        resources: Vec<Resource>,
    },
    /// lockd extension: who holds a lease.
    Leader(Resource),
    /// lockd extension: Prometheus metrics (any payload is drained).
    Metrics,
}

/// Is `cmd` one of the commands that act on a registered client (its target is resolved
/// from the header before the payload is read, as sanlock does)?
pub fn is_client_cmd(cmd: u32) -> bool {
    matches!(
        cmd,
        SM_CMD_ACQUIRE
            | SM_CMD_ACQUIRE2
            | SM_CMD_RELEASE
            | SM_CMD_INQUIRE
            | SM_CMD_CONVERT
            | SM_CMD_KILLPATH
    )
}

/// Reads `n` bytes, naming `what` when they do not all arrive.
fn read(
    src: &mut impl PayloadSource,
    n: usize,
    what: &'static str,
) -> Result<Vec<u8>, RequestError> {
    src.read_payload(n)
        .map_err(|ShortRead| RequestError::Short { what })
}

fn short(what: &'static str) -> impl Fn(crate::WireError) -> RequestError {
    move |_| RequestError::Short { what }
}

fn lockspace(src: &mut impl PayloadSource) -> Result<Lockspace, RequestError> {
    let b = read(src, wire::LOCKSPACE_LEN, "sanlk_lockspace")?;
    Lockspace::decode(&b).map_err(short("sanlk_lockspace"))
}

fn resource_head(src: &mut impl PayloadSource) -> Result<ResourceHead, RequestError> {
    let b = read(src, wire::RESOURCE_LEN, "sanlk_resource")?;
    ResourceHead::decode(&b).map_err(short("sanlk_resource"))
}

/// A resource and its disks; a `num_disks` of 0 or above `SANLK_MAX_DISKS` is
/// [`RequestError::DiskCount`] with the disks left unread.
fn resource(src: &mut impl PayloadSource) -> Result<Resource, RequestError> {
    let head = resource_head(src)?;
    if head.num_disks == 0 || head.num_disks > SANLK_MAX_DISKS {
        return Err(RequestError::DiskCount {
            num_disks: head.num_disks,
        });
    }
    let b = read(src, head.num_disks as usize * wire::DISK_LEN, "sanlk_disk")?;
    let disks = b
        .chunks_exact(wire::DISK_LEN)
        .map(DiskLocation::decode)
        .collect::<Result<Vec<_>, _>>()
        .map_err(short("sanlk_disk"))?;
    Ok(Resource { head, disks })
}

/// One resource as the single-resource commands read it: after a bad `num_disks`, the
/// rest of the message past the head is drained.
fn one_resource(src: &mut impl PayloadSource, h: &Header) -> Result<Resource, RequestError> {
    resource(src).inspect_err(|e| {
        if matches!(e, RequestError::DiskCount { .. }) {
            src.discard_rest(h, wire::RESOURCE_LEN);
        }
    })
}

/// `count` resources after `before` payload bytes; a bad `num_disks` drains the rest of
/// the message past the heads read so far.
fn resources(
    src: &mut impl PayloadSource,
    h: &Header,
    count: u32,
    before: usize,
) -> Result<Vec<Resource>, RequestError> {
    let mut out = Vec::new();
    for i in 0..count as usize {
        match resource(src) {
            Ok(r) => out.push(r),
            Err(e @ RequestError::DiskCount { .. }) => {
                src.discard_rest(h, before + (i + 1) * wire::RESOURCE_LEN);
                return Err(e);
            }
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

fn rindex(src: &mut impl PayloadSource) -> Result<Rindex, RequestError> {
    let b = read(src, wire::RINDEX_LEN, "sanlk_rindex")?;
    Rindex::decode(&b).map_err(short("sanlk_rindex"))
}

fn rindex_entry(src: &mut impl PayloadSource) -> Result<(Rindex, Rentry), RequestError> {
    let ri = rindex(src)?;
    let b = read(src, wire::RENTRY_LEN, "sanlk_rentry")?;
    let re = Rentry::decode(&b).map_err(short("sanlk_rentry"))?;
    Ok((ri, re))
}

/// Too many resources: nothing more is read; the whole payload is drained.
fn check_count(src: &mut impl PayloadSource, h: &Header, count: u32) -> Result<(), RequestError> {
    if count > SANLK_MAX_RESOURCES {
        src.discard_rest(h, 0);
        return Err(RequestError::TooMany {
            what: "resources",
            count: count as usize,
            max: SANLK_MAX_RESOURCES as usize,
        });
    }
    Ok(())
}

fn killpath_fields(src: &mut impl PayloadSource) -> Result<(String, String), RequestError> {
    let b = read(
        src,
        SANLK_HELPER_PATH_LEN + SANLK_HELPER_ARGS_LEN,
        "killpath",
    )?;
    Ok((
        wire::c_field_text(&b[..SANLK_HELPER_PATH_LEN]),
        wire::c_field_text(&b[SANLK_HELPER_PATH_LEN..]),
    ))
}

/// Reads the payload of the request `h` announces from `src`, exactly as sanlock reads it.
pub fn read_request(h: &Header, src: &mut impl PayloadSource) -> Result<Request, RequestError> {
    Ok(match h.cmd {
        SM_CMD_REGISTER => Request::Register,
        SM_CMD_RESTRICT => Request::Restrict,
        SM_CMD_VERSION => Request::Version,
        SM_CMD_SHUTDOWN => Request::Shutdown,
        SM_CMD_SHUTDOWN_WAIT => Request::ShutdownWait,
        SM_CMD_STATUS => Request::Status,
        SM_CMD_LOG_DUMP => Request::LogDump,
        SM_CMD_GET_LOCKSPACES => Request::GetLockspaces,
        SM_CMD_HOST_STATUS => Request::HostStatus(lockspace(src)?),
        SM_CMD_RENEWAL => Request::Renewal(lockspace(src)?),
        SM_CMD_GET_HOSTS => Request::GetHosts(lockspace(src)?),
        SM_CMD_SET_CONFIG => Request::SetConfig(lockspace(src)?),
        SM_CMD_REG_EVENT => {
            // Both structs are read before either can fail the request, as sanlock.
            let ls = lockspace(src);
            let ev = read(src, wire::HOST_EVENT_LEN, "sanlk_host_event");
            let ls = ls?;
            ev?;
            Request::RegEvent(ls)
        }
        SM_CMD_END_EVENT => Request::EndEvent(lockspace(src)?),
        SM_CMD_SET_EVENT => {
            let ls = lockspace(src);
            let ev = read(src, wire::HOST_EVENT_LEN, "sanlk_host_event");
            let (ls, ev) = (ls?, ev?);
            let ev = HostEvent::decode(&ev).map_err(|_| RequestError::Invalid {
                what: "sanlk_host_event",
            })?;
            Request::SetEvent(ls, ev)
        }
        SM_CMD_ADD_LOCKSPACE => Request::AddLockspace(lockspace(src)?),
        SM_CMD_INQ_LOCKSPACE => Request::InqLockspace(lockspace(src)?),
        SM_CMD_REM_LOCKSPACE => Request::RemLockspace(lockspace(src)?),
        SM_CMD_ALIGN => {
            let b = read(src, wire::DISK_LEN, "sanlk_disk")?;
            Request::Align(
                DiskLocation::decode(&b)
                    .map_err(|_| RequestError::Invalid { what: "sanlk_disk" })?,
            )
        }
        SM_CMD_WRITE_LOCKSPACE => Request::WriteLockspace(lockspace(src)?),
        SM_CMD_READ_LOCKSPACE => Request::ReadLockspace(lockspace(src)?),
        SM_CMD_WRITE_RESOURCE => Request::WriteResource(one_resource(src, h)?),
        SM_CMD_READ_RESOURCE => Request::ReadResource(one_resource(src, h)?),
        SM_CMD_READ_RESOURCE_OWNERS => Request::ReadResourceOwners(one_resource(src, h)?),
        SM_CMD_SET_LVB => {
            let resource = resource_head(src)?;
            let len = (h.length as usize).saturating_sub(wire::HEADER_LEN + wire::RESOURCE_LEN);
            if len > MAX_LVB_LEN {
                src.discard_rest(h, wire::RESOURCE_LEN);
                return Err(RequestError::TooMany {
                    what: "lvb bytes",
                    count: len,
                    max: MAX_LVB_LEN,
                });
            }
            let lvb = read(src, len, "lvb")?;
            Request::SetLvb { resource, lvb }
        }
        SM_CMD_GET_LVB => Request::GetLvb(resource_head(src)?),
        SM_CMD_REQUEST => Request::RequestLease(one_resource(src, h)?),
        SM_CMD_EXAMINE_LOCKSPACE => Request::ExamineLockspace(lockspace(src)?),
        SM_CMD_EXAMINE_RESOURCE => {
            // The disks are drained whether or not the head arrived, as sanlock.
            let head = resource_head(src);
            src.discard_rest(h, wire::RESOURCE_LEN);
            Request::ExamineResource(head?)
        }
        SM_CMD_FORMAT_RINDEX => Request::FormatRindex(rindex(src)?),
        SM_CMD_REBUILD_RINDEX => Request::RebuildRindex(rindex(src)?),
        SM_CMD_LOOKUP_RINDEX => {
            let (ri, re) = rindex_entry(src)?;
            Request::LookupRindex(ri, re)
        }
        SM_CMD_UPDATE_RINDEX => {
            let (ri, re) = rindex_entry(src)?;
            Request::UpdateRindex(ri, re)
        }
        SM_CMD_CREATE_RESOURCE => {
            let (ri, re) = rindex_entry(src)?;
            Request::CreateResource(ri, re)
        }
        SM_CMD_DELETE_RESOURCE => {
            let (ri, re) = rindex_entry(src)?;
            Request::DeleteResource(ri, re)
        }
        SM_CMD_READ_LOCKSPACE_HOST => Request::ReadLockspaceHost(lockspace(src)?),
        SM_CMD_SET_HOST => {
            let ls = lockspace(src)?;
            let b = read(src, wire::HOST_LEN, "sanlk_host")?;
            Request::SetHost(ls, Host::decode(&b).map_err(short("sanlk_host"))?)
        }
        SM_CMD_INIT_LOCKSPACE_HOST => {
            let ls = lockspace(src)?;
            let b = read(src, disk_format::leader::LEADER_RECORD_LEN, "leader_record")?;
            let rec = disk_format::LeaderRecord::decode(&b).map_err(|_| RequestError::Short {
                what: "leader_record",
            })?;
            Request::InitLockspaceHost(ls, Box::new(rec))
        }
        SM_CMD_ACQUIRE | SM_CMD_ACQUIRE2 => {
            check_count(src, h, h.data)?;
            let resources = resources(src, h, h.data, 0)?;
            let b = read(src, wire::OPTIONS_LEN, "sanlk_options")?;
            let options = Options::decode(&b).map_err(short("sanlk_options"))?;
            let options_str = if options.len > 0 {
                read(
                    src,
                    (options.len as usize).min(MAX_OPTIONS_STR_LEN),
                    "sanlk_options string",
                )?
            } else {
                Vec::new()
            };
            if h.cmd == SM_CMD_ACQUIRE2 {
                Request::Acquire2 {
                    resources,
                    options,
                    options_str,
                }
            } else {
                Request::Acquire {
                    resources,
                    options,
                    options_str,
                }
            }
        }
        SM_CMD_RELEASE => Request::Release(read_release(h, src)?),
        SM_CMD_INQUIRE => Request::Inquire,
        SM_CMD_CONVERT => {
            let head = resource_head(src)?;
            src.discard_rest(h, wire::RESOURCE_LEN);
            Request::Convert(head)
        }
        SM_CMD_KILLPATH => {
            let (path, args) = killpath_fields(src)?;
            Request::Killpath { path, args }
        }
        LOCKD_CMD_WATCH => Request::Watch,
        LOCKD_CMD_ACQUIRE_FOR_PID => {
            let count = h.data2;
            if count == 0 {
                src.discard_rest(h, 0);
                return Err(RequestError::TooMany {
                    what: "resources (none given)",
                    count: 0,
                    max: SANLK_MAX_RESOURCES as usize,
                });
            }
            check_count(src, h, count)?;
            let (killpath_path, killpath_args) = killpath_fields(src)?;
            let before = SANLK_HELPER_PATH_LEN + SANLK_HELPER_ARGS_LEN;
            let resources = resources(src, h, count, before)?;
            Request::AcquireForPid {
                killpath_path,
                killpath_args,
                resources,
            }
        }
        LOCKD_CMD_LEADER => Request::Leader(one_resource(src, h)?),
        LOCKD_CMD_METRICS => {
            src.discard_rest(h, 0);
            Request::Metrics
        }
        cmd => {
            src.discard_rest(h, 0);
            return Err(RequestError::Unknown { cmd });
        }
    })
}

fn read_release(h: &Header, src: &mut impl PayloadSource) -> Result<ReleaseWhat, RequestError> {
    if h.cmd_flags & SANLK_REL_ALL != 0 {
        src.discard_rest(h, 0);
        return Ok(ReleaseWhat::All);
    }
    if h.cmd_flags & SANLK_REL_ORPHAN != 0 {
        let head = resource_head(src)?;
        src.discard_rest(h, wire::RESOURCE_LEN);
        return Ok(ReleaseWhat::Orphans(head));
    }
    if h.cmd_flags & SANLK_REL_RENAME != 0 {
        let old = resource_head(src)?;
        let new = resource_head(src)?;
        src.discard_rest(h, 2 * wire::RESOURCE_LEN);
        return Ok(ReleaseWhat::Rename { old, new });
    }
    check_count(src, h, h.data)?;
    let mut heads = Vec::new();
    for _ in 0..h.data {
        heads.push(resource_head(src)?);
    }
    // Resources may be sent with disks by some clients; drop whatever the length claims.
    src.discard_rest(h, h.data as usize * wire::RESOURCE_LEN);
    Ok(ReleaseWhat::Named(heads))
}

fn put_killpath(out: &mut Vec<u8>, path: &str, args: &str) {
    let start = out.len();
    out.resize(start + SANLK_HELPER_PATH_LEN + SANLK_HELPER_ARGS_LEN, 0);
    let (pb, ab) = (path.as_bytes(), args.as_bytes());
    let pn = pb.len().min(SANLK_HELPER_PATH_LEN - 1);
    let an = ab.len().min(SANLK_HELPER_ARGS_LEN - 1);
    out[start..start + pn].copy_from_slice(&pb[..pn]);
    let a0 = start + SANLK_HELPER_PATH_LEN;
    out[a0..a0 + an].copy_from_slice(&ab[..an]);
}

impl Request {
    /// The command number this request is sent with.
    pub fn cmd(&self) -> u32 {
        match self {
            Request::Register => SM_CMD_REGISTER,
            Request::Restrict => SM_CMD_RESTRICT,
            Request::Version => SM_CMD_VERSION,
            Request::Shutdown => SM_CMD_SHUTDOWN,
            Request::ShutdownWait => SM_CMD_SHUTDOWN_WAIT,
            Request::Status => SM_CMD_STATUS,
            Request::LogDump => SM_CMD_LOG_DUMP,
            Request::GetLockspaces => SM_CMD_GET_LOCKSPACES,
            Request::HostStatus(_) => SM_CMD_HOST_STATUS,
            Request::Renewal(_) => SM_CMD_RENEWAL,
            Request::GetHosts(_) => SM_CMD_GET_HOSTS,
            Request::SetConfig(_) => SM_CMD_SET_CONFIG,
            Request::RegEvent(_) => SM_CMD_REG_EVENT,
            Request::EndEvent(_) => SM_CMD_END_EVENT,
            Request::SetEvent(..) => SM_CMD_SET_EVENT,
            Request::AddLockspace(_) => SM_CMD_ADD_LOCKSPACE,
            Request::InqLockspace(_) => SM_CMD_INQ_LOCKSPACE,
            Request::RemLockspace(_) => SM_CMD_REM_LOCKSPACE,
            Request::Align(_) => SM_CMD_ALIGN,
            Request::WriteLockspace(_) => SM_CMD_WRITE_LOCKSPACE,
            Request::ReadLockspace(_) => SM_CMD_READ_LOCKSPACE,
            Request::WriteResource(_) => SM_CMD_WRITE_RESOURCE,
            Request::ReadResource(_) => SM_CMD_READ_RESOURCE,
            Request::ReadResourceOwners(_) => SM_CMD_READ_RESOURCE_OWNERS,
            Request::SetLvb { .. } => SM_CMD_SET_LVB,
            Request::GetLvb(_) => SM_CMD_GET_LVB,
            Request::RequestLease(_) => SM_CMD_REQUEST,
            Request::ExamineLockspace(_) => SM_CMD_EXAMINE_LOCKSPACE,
            Request::ExamineResource(_) => SM_CMD_EXAMINE_RESOURCE,
            Request::FormatRindex(_) => SM_CMD_FORMAT_RINDEX,
            Request::RebuildRindex(_) => SM_CMD_REBUILD_RINDEX,
            Request::LookupRindex(..) => SM_CMD_LOOKUP_RINDEX,
            Request::UpdateRindex(..) => SM_CMD_UPDATE_RINDEX,
            Request::CreateResource(..) => SM_CMD_CREATE_RESOURCE,
            Request::DeleteResource(..) => SM_CMD_DELETE_RESOURCE,
            Request::Acquire { .. } => SM_CMD_ACQUIRE,
            Request::Acquire2 { .. } => SM_CMD_ACQUIRE2,
            Request::ReadLockspaceHost(_) => SM_CMD_READ_LOCKSPACE_HOST,
            Request::SetHost(..) => SM_CMD_SET_HOST,
            Request::InitLockspaceHost(..) => SM_CMD_INIT_LOCKSPACE_HOST,
            Request::Release(_) => SM_CMD_RELEASE,
            Request::Inquire => SM_CMD_INQUIRE,
            Request::Convert(_) => SM_CMD_CONVERT,
            Request::Killpath { .. } => SM_CMD_KILLPATH,
            Request::Watch => LOCKD_CMD_WATCH,
            Request::AcquireForPid { .. } => LOCKD_CMD_ACQUIRE_FOR_PID,
            Request::Leader(_) => LOCKD_CMD_LEADER,
            Request::Metrics => LOCKD_CMD_METRICS,
        }
    }

    /// The payload bytes this request is sent with (what [`read_request`] reads back).
    /// Killpath fields longer than 127 bytes are cut (callers check lengths first).
    pub fn encode_payload(&self) -> Vec<u8> {
        let mut p = Vec::new();
        match self {
            Request::Register
            | Request::Restrict
            | Request::Version
            | Request::Shutdown
            | Request::ShutdownWait
            | Request::Status
            | Request::LogDump
            | Request::GetLockspaces
            | Request::Inquire
            | Request::Watch
            | Request::Metrics
            | Request::Release(ReleaseWhat::All) => {}
            Request::HostStatus(ls)
            | Request::Renewal(ls)
            | Request::GetHosts(ls)
            | Request::SetConfig(ls)
            | Request::EndEvent(ls)
            | Request::AddLockspace(ls)
            | Request::InqLockspace(ls)
            | Request::RemLockspace(ls)
            | Request::WriteLockspace(ls)
            | Request::ReadLockspace(ls)
            | Request::ReadLockspaceHost(ls)
            | Request::ExamineLockspace(ls) => ls.encode_into(&mut p),
            Request::SetHost(ls, host) => {
                ls.encode_into(&mut p);
                host.encode_into(&mut p);
            }
            Request::InitLockspaceHost(ls, rec) => {
                ls.encode_into(&mut p);
                p.extend_from_slice(&rec.encode());
            }
            Request::RegEvent(ls) => {
                ls.encode_into(&mut p);
                HostEvent::default().encode_into(&mut p);
            }
            Request::SetEvent(ls, ev) => {
                ls.encode_into(&mut p);
                ev.encode_into(&mut p);
            }
            Request::Align(disk) => disk.encode_into(&mut p),
            Request::WriteResource(r)
            | Request::ReadResource(r)
            | Request::ReadResourceOwners(r)
            | Request::RequestLease(r)
            | Request::Leader(r) => r.encode_into(&mut p),
            Request::SetLvb { resource, lvb } => {
                resource.encode_into(&mut p);
                p.extend_from_slice(lvb);
            }
            Request::GetLvb(head)
            | Request::ExamineResource(head)
            | Request::Convert(head)
            | Request::Release(ReleaseWhat::Orphans(head)) => head.encode_into(&mut p),
            Request::FormatRindex(ri) | Request::RebuildRindex(ri) => ri.encode_into(&mut p),
            Request::LookupRindex(ri, re)
            | Request::UpdateRindex(ri, re)
            | Request::CreateResource(ri, re)
            | Request::DeleteResource(ri, re) => {
                ri.encode_into(&mut p);
                p.extend_from_slice(&re.encode());
            }
            Request::Acquire {
                resources,
                options,
                options_str,
            }
            | Request::Acquire2 {
                resources,
                options,
                options_str,
            } => {
                for r in resources {
                    r.encode_into(&mut p);
                }
                options.encode_into(&mut p);
                p.extend_from_slice(options_str);
            }
            Request::Release(ReleaseWhat::Rename { old, new }) => {
                old.encode_into(&mut p);
                new.encode_into(&mut p);
            }
            Request::Release(ReleaseWhat::Named(heads)) => {
                for head in heads {
                    head.encode_into(&mut p);
                }
            }
            Request::Killpath { path, args } => put_killpath(&mut p, path, args),
            Request::AcquireForPid {
                killpath_path,
                killpath_args,
                resources,
            } => {
                put_killpath(&mut p, killpath_path, killpath_args);
                for r in resources {
                    r.encode_into(&mut p);
                }
            }
        }
        p
    }

    /// Header and payload of this request as one message.
    pub fn encode(&self, cmd_flags: u32, data: u32, data2: u32) -> Vec<u8> {
        let p = self.encode_payload();
        let h = Header::request(self.cmd(), cmd_flags, p.len(), data, data2);
        let mut msg = Vec::with_capacity(wire::HEADER_LEN + p.len());
        msg.extend_from_slice(&h.encode());
        msg.extend_from_slice(&p);
        msg
    }
}

/// A [`PayloadSource`] over bytes already received (tests, fuzzing, replays): the bytes
/// after one header, possibly followed by further messages.
#[derive(Debug, Clone)]
pub struct SliceSource<'a> {
    rest: &'a [u8],
}

impl<'a> SliceSource<'a> {
    pub fn new(bytes: &'a [u8]) -> SliceSource<'a> {
        SliceSource { rest: bytes }
    }

    /// What has not been read or discarded.
    pub fn remaining(&self) -> &'a [u8] {
        self.rest
    }
}

impl PayloadSource for SliceSource<'_> {
    fn read_payload(&mut self, n: usize) -> Result<Vec<u8>, ShortRead> {
        if n > MAX_CLIENT_MSG as usize {
            return Err(ShortRead);
        }
        if n > self.rest.len() {
            // A short read consumes what there was, as a socket read would.
            self.rest = &[];
            return Err(ShortRead);
        }
        let (b, rest) = self.rest.split_at(n);
        self.rest = rest;
        Ok(b.to_vec())
    }

    fn discard_rest(&mut self, header: &Header, consumed: usize) {
        let Ok(total) = header.payload_len(MAX_CLIENT_MSG) else {
            return;
        };
        let left = total.saturating_sub(consumed).min(self.rest.len());
        self.rest = &self.rest[left..];
    }
}

#[cfg(test)]
mod tests;
