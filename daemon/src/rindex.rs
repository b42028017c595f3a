//! Resource-index commands (sanlock SM_CMD 35–40): FORMAT_RINDEX, UPDATE_RINDEX,
//! LOOKUP_RINDEX, CREATE_RESOURCE, DELETE_RESOURCE, REBUILD_RINDEX, over lease-core's
//! `rindex` module.
//!
//! Wire rules (as sanlock's daemon): every command reads a fixed `sanlk_rindex` (and for
//! the four entry commands a `sanlk_rentry`) and nothing else — LOOKUP's header claims 64
//! more bytes than libsanlock sends, so the rest of the header length is never drained.
//! The reading is `client_lib::request::read_request`'s; `dispatch.rs` calls [`format`],
//! [`rebuild`] and [`entry`] with the decoded structs. FORMAT and REBUILD answer with a
//! bare result; the entry commands answer with the result header followed by a
//! `sanlk_rentry`, filled as sanlock fills it (all zero when the request was cut short).
//!
//! Invariants:
//! - Every operation except FORMAT runs "inside the lockspace" unless the caller sets
//!   `SANLK_RX_NO_LOCKSPACE` (lookup, update, rebuild only): the lockspace must be joined
//!   (-ENOENT otherwise, -ENOSPC when it is dying), and one rindex operation per lockspace
//!   runs at a time (-EBUSY for a second one), released on every path.
//! - CREATE, DELETE and locked REBUILD hold the internal `rindex_lease` paxos lease with our
//!   host_id; no daemon mutex is held across disk I/O.
//! - FORMAT never writes over a lockspace we joined or a lease we hold (-EBUSY), DELETE
//!   never clears a lease we hold (-EBUSY), and CREATE never places a lease there nor over
//!   any valid record (`crate::inuse`, `lease_core::rindex::create`).
//! - Every refusal is a [`RindexCmdError`] saying why (lease-core's [`RindexError`]
//!   wrapped with the operation's name); [`RindexCmdError::code`] is the one place these
//!   reasons meet sanlock's numbers, and `dispatch.rs` logs the reason and replies the
//!   code ([`RindexCmdError::refused`]).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use client_lib::proto::*;
use client_lib::wire::{self, Header, Rentry};
use disk_format::Name;
use lease_core::exec::block_on;
use lease_core::rindex::{self, RindexError, RindexParams, UpdateOp};
use tracing::info;

use crate::access::Caller;
use crate::access::Need;
use crate::admin::{self, AdminError};
use crate::inuse::InUse;
use crate::paxos;
use crate::space::{Phase, Space};
use crate::state::Daemon;
use lockd_diskio::BlockingDisk;

/// io_timeout for index I/O done without a lockspace (sanlock's default).
const DEFAULT_IO_TIMEOUT_S: u16 = 10;

/// Why a rindex command was refused or failed. What sanlock's clients get is
/// [`RindexCmdError::code`], the one place these reasons meet sanlock's numbers.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RindexCmdError {
    /// A missing or malformed argument (-EINVAL).
    #[error("invalid argument: {0}")]
    Invalid(&'static str),
    /// The rindex disk cannot be opened, or the sizes asked for (or the device's) make no
    /// geometry: the code `crate::admin` gives it.
    #[error(transparent)]
    Disk(#[from] AdminError),
    /// The lockspace is not here, or not joined yet (-ENOENT, as sanlock).
    #[error("{0}")]
    NoLockspace(&'static str),
    /// The lockspace is being removed or has failed (-ENOSPC, as sanlock).
    #[error("{0}")]
    Ending(&'static str),
    /// Another rindex operation runs in the lockspace (-EBUSY).
    #[error("another rindex operation runs in this lockspace")]
    Busy,
    /// The write would overwrite a lockspace or lease this daemon uses (-EBUSY).
    #[error(transparent)]
    InUse(#[from] InUse),
    /// The lockspace gave no host to take the rindex_lease as (`paxos::with_host`: its
    /// join has not ended).
    #[error("the lockspace has no joined host: {0}")]
    NoHost(crate::space::SpaceError),
    /// LOOKUP found another name at the offset asked for (SANLK_RINDEX_DIFF); the reply's
    /// `sanlk_rentry` carries what was found ([`RindexCmdError::rentry`]).
    #[error("the entry at offset {offset} is {found:?}, not {expected:?}")]
    Differs {
        /// The name recorded there (possibly empty).
        found: Name,
        /// The name asked for.
        expected: Name,
        /// The lease offset.
        offset: u64,
    },
    /// The index operation `op` failed: lease-core's sanlock code.
    #[error("{op}: {source}")]
    Index {
        /// The operation (format, rebuild, lookup, update, create, delete).
        op: &'static str,
        /// Why (boxed: lease-core's error is large, and this is the rare path).
        #[source]
        source: Box<RindexError>,
    },
}

impl RindexCmdError {
    /// The result code sanlock's clients get.
    pub(crate) fn code(&self) -> i32 {
        match self {
            RindexCmdError::Invalid(_) => -libc::EINVAL,
            RindexCmdError::Disk(e) => e.code(),
            RindexCmdError::NoLockspace(_) => -libc::ENOENT,
            RindexCmdError::Ending(_) => -libc::ENOSPC,
            RindexCmdError::Busy | RindexCmdError::InUse(_) => -libc::EBUSY,
            RindexCmdError::NoHost(e) => e.code(),
            RindexCmdError::Differs { .. } => disk_format::rv::SANLK_RINDEX_DIFF,
            RindexCmdError::Index { source, .. } => source.sanlk_code(),
        }
    }

    /// The `sanlk_rentry` an entry command replies with this result: what LOOKUP found
    /// for [`RindexCmdError::Differs`], all zero otherwise (as sanlock fills it).
    pub(crate) fn rentry(&self) -> Rentry {
        match self {
            RindexCmdError::Differs { found, offset, .. } => Rentry::new(*found, *offset),
            _ => Rentry::new(Name::EMPTY, 0),
        }
    }

    /// What the protocol edge replies for command `cmd`: the code, with the reason
    /// logged.
    pub(crate) fn refused(&self, cmd: u32) -> i32 {
        let code = self.code();
        info!(cmd = cmd_name(cmd), reason = %self, code, "rindex command refused");
        code
    }

    /// Wraps lease-core's error of the index operation `op` (for `map_err`).
    fn index(op: &'static str) -> impl FnOnce(RindexError) -> RindexCmdError {
        move |source| RindexCmdError::Index {
            op,
            source: Box::new(source),
        }
    }
}

/// Marks a lockspace busy with a rindex operation; cleared on drop.
struct OpGuard {
    space: Arc<Space>,
}

impl OpGuard {
    /// sanlock's `lockspace_begin_rindex_op`: -ENOENT unless joined, -ENOSPC when dying,
    /// -EBUSY while another rindex operation runs in it.
    fn begin(d: &Daemon, name: &Name) -> Result<OpGuard, RindexCmdError> {
        let space = d
            .find_space(name)
            .ok_or(RindexCmdError::NoLockspace("no such lockspace"))?;
        match space.snapshot_phase() {
            Phase::Joined => {}
            Phase::Adding => {
                return Err(RindexCmdError::NoLockspace("the lockspace is being added"))
            }
            Phase::Removing => {
                return Err(RindexCmdError::Ending("the lockspace is being removed"))
            }
        }
        if space.is_dead() {
            return Err(RindexCmdError::Ending("the lockspace has failed"));
        }
        if space.rindex_busy.swap(true, Ordering::SeqCst) {
            return Err(RindexCmdError::Busy);
        }
        Ok(OpGuard { space })
    }
}

impl Drop for OpGuard {
    fn drop(&mut self) {
        self.space.rindex_busy.store(false, Ordering::SeqCst);
    }
}

/// Opens the rindex disk with the rights of the client that named it (`crate::access`).
fn open_disk(
    caller: &Caller,
    ri: &wire::Rindex,
    need: Need,
) -> Result<BlockingDisk, RindexCmdError> {
    Ok(BlockingDisk::new(admin::open(caller, &ri.disk, need)?))
}

fn params(ri: &wire::Rindex, space: Option<&Space>) -> RindexParams {
    RindexParams {
        space_name: ri.lockspace_name,
        disk_offset: ri.disk.offset,
        io_timeout: space.map_or(DEFAULT_IO_TIMEOUT_S, |s| {
            u16::try_from(s.io_timeout).unwrap_or(u16::MAX)
        }),
    }
}

/// FORMAT_RINDEX: no lockspace needed (as sanlock). Refused (-EBUSY) when its two areas
/// overlap a lockspace we joined or a lease we hold.
pub(crate) fn format(d: &Daemon, caller: &Caller, ri: &wire::Rindex) -> Result<(), RindexCmdError> {
    if ri.lockspace_name.is_empty() {
        return Err(RindexCmdError::Invalid("the lockspace name is empty"));
    }
    let disk = open_disk(caller, ri, Need::Write)?;
    let geometry = admin::geometry_for(&disk.disk, ri.flags)?;
    crate::inuse::refuse_if_in_use(
        d,
        "format_rindex",
        &ri.disk.path.to_text(),
        ri.disk.offset,
        2 * geometry.align_bytes(),
    )?;
    let p = params(ri, None);
    let rx = block_on(rindex::format(&disk, &p, geometry, ri.max_resources))
        .map_err(RindexCmdError::index("format"))?;
    info!(ls = %ri.lockspace_name, offset = ri.disk.offset,
          max_resources = rx.max_resources, "rindex formatted");
    Ok(())
}

/// REBUILD_RINDEX: under the rindex_lease, or without lockspace and lease with
/// `SANLK_RX_NO_LOCKSPACE`.
pub(crate) fn rebuild(
    d: &Daemon,
    caller: &Caller,
    ri: &wire::Rindex,
    cmd_flags: u32,
) -> Result<(), RindexCmdError> {
    let disk = open_disk(caller, ri, Need::Write)?;
    let device_len = disk.disk.size();
    let out = if cmd_flags & SANLK_RX_NO_LOCKSPACE != 0 {
        block_on(rindex::rebuild_unlocked(
            &disk,
            &params(ri, None),
            device_len,
        ))
    } else {
        let guard = OpGuard::begin(d, &ri.lockspace_name)?;
        let p = params(ri, Some(&guard.space));
        let c = crate::clock::lease_clock_unstopped();
        paxos::with_host(&guard.space, |host| {
            block_on(rindex::rebuild(&disk, &c, host, &p, device_len))
        })
        .map_err(RindexCmdError::NoHost)?
    };
    let found = out.map_err(RindexCmdError::index("rebuild"))?;
    info!(ls = %ri.lockspace_name, entries = found.len(), "rindex rebuilt");
    Ok(())
}

/// The four entry operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EntryOp {
    Lookup,
    Update,
    Create { num_hosts: u32 },
    Delete,
}

/// Runs an entry operation; returns the `sanlk_rentry` it replies on success.
fn entry_op(
    d: &Daemon,
    caller: &Caller,
    op: EntryOp,
    ri: &wire::Rindex,
    re: &Rentry,
    cmd_flags: u32,
) -> Result<Rentry, RindexCmdError> {
    let need = if op == EntryOp::Lookup {
        Need::Read
    } else {
        Need::Write
    };
    let disk = open_disk(caller, ri, need)?;
    let nolock =
        cmd_flags & SANLK_RX_NO_LOCKSPACE != 0 && matches!(op, EntryOp::Lookup | EntryOp::Update);
    let guard = if nolock {
        None
    } else {
        Some(OpGuard::begin(d, &ri.lockspace_name)?)
    };
    let space = guard.as_ref().map(|g| &*g.space);
    let p = params(ri, space);
    let c = crate::clock::lease_clock_unstopped();
    match op {
        EntryOp::Lookup => {
            let name = (!re.name.is_empty()).then_some(&re.name);
            block_on(rindex::lookup(&disk, &p, name, re.offset))
                .map(|found| Rentry::new(found.name, found.offset))
                .map_err(lookup_error)
        }
        EntryOp::Update => {
            let up = update_op(re, cmd_flags)?;
            let e =
                block_on(rindex::update(&disk, &p, up)).map_err(RindexCmdError::index("update"))?;
            Ok(Rentry::new(e.name, e.offset))
        }
        EntryOp::Create { num_hosts } => {
            let space = space.ok_or(RindexCmdError::Invalid(
                "CREATE_RESOURCE needs its lockspace",
            ))?;
            // Never place the new lease over a lockspace or lease this daemon uses
            // (lease-core also skips every slot holding a valid record).
            let path = ri.disk.path.to_text();
            let in_use = |off: u64, len: u64| crate::inuse::in_use(d, &path, off, len);
            let e = paxos::with_host(space, |host| {
                block_on(rindex::create(
                    &disk,
                    &c,
                    host,
                    &p,
                    &re.name,
                    u64::from(num_hosts),
                    &in_use,
                ))
            })
            .map_err(RindexCmdError::NoHost)?
            .map_err(RindexCmdError::index("create"))?;
            info!(res = %e.name, offset = e.offset, "resource created");
            // sanlock replies only the offset of the new lease.
            Ok(Rentry::new(Name::EMPTY, e.offset))
        }
        EntryOp::Delete => {
            let space = space.ok_or(RindexCmdError::Invalid(
                "DELETE_RESOURCE needs its lockspace",
            ))?;
            // Never clear a lease this daemon holds (errors of the lookup are left for
            // the delete itself to report).
            if let Ok(found) = block_on(rindex::lookup(&disk, &p, Some(&re.name), 0)) {
                let path = ri.disk.path.to_text();
                let len = 1 << 20; // the smallest area; a held lease starts at found.offset
                crate::inuse::refuse_if_in_use(d, "delete_resource", &path, found.offset, len)?;
            }
            let e = paxos::with_host(space, |host| {
                block_on(rindex::delete(&disk, &c, host, &p, &re.name, re.offset))
            })
            .map_err(RindexCmdError::NoHost)?
            .map_err(RindexCmdError::index("delete"))?;
            info!(res = %e.name, offset = e.offset, "resource deleted");
            Ok(Rentry::new(Name::EMPTY, 0))
        }
    }
}

/// A lookup's error as the command's: a differing entry keeps what was found.
fn lookup_error(e: RindexError) -> RindexCmdError {
    match e {
        RindexError::Diff {
            found,
            expected,
            offset,
        } => RindexCmdError::Differs {
            found,
            expected,
            offset,
        },
        e => RindexCmdError::index("lookup")(e),
    }
}

/// UPDATE_RINDEX's change by its flags: RXUP_REM with an offset, or RXUP_ADD with a name
/// and an offset.
fn update_op(re: &Rentry, cmd_flags: u32) -> Result<UpdateOp, RindexCmdError> {
    if cmd_flags & SANLK_RXUP_REM != 0 && re.offset != 0 {
        Ok(UpdateOp::Remove { offset: re.offset })
    } else if cmd_flags & SANLK_RXUP_ADD != 0 && !re.name.is_empty() && re.offset != 0 {
        Ok(UpdateOp::Add {
            name: re.name,
            offset: re.offset,
        })
    } else {
        Err(RindexCmdError::Invalid(
            "UPDATE_RINDEX needs RXUP_REM and an offset, or RXUP_ADD, a name and an offset",
        ))
    }
}

/// One of the entry commands (LOOKUP/UPDATE_RINDEX, CREATE/DELETE_RESOURCE, by `h.cmd`):
/// the `sanlk_rentry` it replies on success (on failure, [`RindexCmdError::rentry`]).
pub(crate) fn entry(
    d: &Daemon,
    caller: &Caller,
    h: &Header,
    ri: &wire::Rindex,
    re: &Rentry,
) -> Result<Rentry, RindexCmdError> {
    let op = match h.cmd {
        SM_CMD_LOOKUP_RINDEX => EntryOp::Lookup,
        SM_CMD_UPDATE_RINDEX => EntryOp::Update,
        SM_CMD_CREATE_RESOURCE => EntryOp::Create { num_hosts: h.data2 },
        _ => EntryOp::Delete,
    };
    entry_op(d, caller, op, ri, re, h.cmd_flags)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_refusal_has_the_code_sanlock_clients_get() {
        use disk_format::rv;
        let name = Name::new("r1").unwrap();
        let in_use = InUse {
            op: "format_rindex",
            area: "lockspace ls (our host_id 1)".into(),
        };
        let index = |source| RindexCmdError::index("x")(source);
        for (e, code) in [
            (RindexCmdError::Invalid("x"), -libc::EINVAL),
            (
                RindexCmdError::Disk(AdminError::Invalid("x")),
                -libc::EINVAL,
            ),
            (
                RindexCmdError::Disk(AdminError::Open(lockd_diskio::DirectIoError::Open {
                    path: "/dev/x".into(),
                    source: std::io::Error::from_raw_os_error(libc::EACCES),
                })),
                -libc::EACCES,
            ),
            (RindexCmdError::NoLockspace("x"), -libc::ENOENT),
            (RindexCmdError::Ending("x"), -libc::ENOSPC),
            (RindexCmdError::Busy, -libc::EBUSY),
            (RindexCmdError::InUse(in_use), -libc::EBUSY),
            (
                RindexCmdError::NoHost(crate::space::SpaceError::NotJoined),
                -libc::ENOSPC,
            ),
            (
                RindexCmdError::Differs {
                    found: name,
                    expected: Name::EMPTY,
                    offset: 1 << 20,
                },
                rv::SANLK_RINDEX_DIFF,
            ),
            (
                index(RindexError::Magic { found: 0 }),
                rv::SANLK_RINDEX_MAGIC,
            ),
            (index(RindexError::NotFound(name)), -libc::ENOENT),
            (
                index(RindexError::Exists {
                    name,
                    offset: 1 << 20,
                }),
                -libc::EEXIST,
            ),
            (
                index(RindexError::Io {
                    what: "x",
                    timed_out: true,
                }),
                rv::SANLK_AIO_TIMEOUT,
            ),
            (
                index(RindexError::Lease(lease_core::LeaseError::HostIdBusy)),
                lease_core::LeaseError::HostIdBusy.sanlk_code(),
            ),
        ] {
            assert_eq!(e.code(), code, "{e}");
        }
    }

    #[test]
    fn only_a_differing_lookup_replies_an_entry() {
        let name = Name::new("r1").unwrap();
        let differs = RindexCmdError::Differs {
            found: name,
            expected: Name::EMPTY,
            offset: 1 << 20,
        };
        assert_eq!(differs.rentry(), Rentry::new(name, 1 << 20));
        let diff_elsewhere = RindexCmdError::Index {
            op: "update",
            source: Box::new(RindexError::Diff {
                found: name,
                expected: Name::EMPTY,
                offset: 1 << 20,
            }),
        };
        assert_eq!(diff_elsewhere.rentry(), Rentry::new(Name::EMPTY, 0));
        assert_eq!(RindexCmdError::Busy.rentry(), Rentry::new(Name::EMPTY, 0));
    }

    #[test]
    fn flag_values_match_sanlock() {
        assert_eq!(SANLK_RX_NO_LOCKSPACE, 1);
        assert_eq!(SANLK_RXUP_ADD, 0x10000);
        assert_eq!(SANLK_RXUP_REM, 0x20000);
    }
}
