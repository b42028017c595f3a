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

use std::sync::atomic::Ordering;
use std::sync::Arc;

use client_lib::proto::*;
use client_lib::wire::{self, Header, Rentry};
use disk_format::Name;
use lease_core::exec::block_on;
use lease_core::rindex::{self, RindexError, RindexParams, UpdateOp};
use tracing::{info, warn};

use crate::access::Need;
use crate::space::{Phase, Space};
use crate::state::Daemon;
use crate::{admin, paxos};
use lockd_diskio::BlockingDisk;

/// io_timeout for index I/O done without a lockspace (sanlock's default).
const DEFAULT_IO_TIMEOUT_S: u16 = 10;

/// Marks a lockspace busy with a rindex operation; cleared on drop.
struct OpGuard {
    space: Arc<Space>,
}

impl OpGuard {
    /// sanlock's `lockspace_begin_rindex_op`: -ENOENT unless joined, -ENOSPC when dying,
    /// -EBUSY while another rindex operation runs in it.
    fn begin(d: &Daemon, name: &Name) -> Result<OpGuard, i32> {
        let space = d.find_space(name).ok_or(-libc::ENOENT)?;
        match space.snapshot_phase() {
            Phase::Joined => {}
            Phase::Adding => return Err(-libc::ENOENT),
            Phase::Removing => return Err(-libc::ENOSPC),
        }
        if space.is_dead() {
            return Err(-libc::ENOSPC);
        }
        if space.rindex_busy.swap(true, Ordering::SeqCst) {
            return Err(-libc::EBUSY);
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
fn open_disk(ri: &wire::Rindex, need: Need) -> Result<BlockingDisk, i32> {
    admin::open(&ri.disk, need).map(BlockingDisk::new)
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

fn code(op: &str, e: &RindexError) -> i32 {
    let rv = e.sanlk_code();
    warn!(op, error = %e, rv, "rindex operation failed");
    rv
}

/// FORMAT_RINDEX: no lockspace needed (as sanlock). Refused (-EBUSY) when its two areas
/// overlap a lockspace we joined or a lease we hold.
pub(crate) fn format(d: &Daemon, ri: &wire::Rindex) -> i32 {
    if ri.lockspace_name.is_empty() {
        return -libc::EINVAL;
    }
    let disk = match open_disk(ri, Need::Write) {
        Ok(d) => d,
        Err(rv) => return rv,
    };
    let geometry = match admin::geometry_for(&disk.disk, ri.flags) {
        Ok(g) => g,
        Err(rv) => return rv,
    };
    if let Err(rv) = crate::inuse::refuse_if_in_use(
        d,
        "format_rindex",
        &ri.disk.path.to_text(),
        ri.disk.offset,
        2 * geometry.align_bytes(),
    ) {
        return rv;
    }
    let p = params(ri, None);
    match block_on(rindex::format(&disk, &p, geometry, ri.max_resources)) {
        Ok(rx) => {
            info!(ls = %ri.lockspace_name, offset = ri.disk.offset,
                  max_resources = rx.max_resources, "rindex formatted");
            0
        }
        Err(e) => code("format", &e),
    }
}

/// REBUILD_RINDEX: under the rindex_lease, or without lockspace and lease with
/// `SANLK_RX_NO_LOCKSPACE`.
pub(crate) fn rebuild(d: &Daemon, ri: &wire::Rindex, cmd_flags: u32) -> i32 {
    let disk = match open_disk(ri, Need::Write) {
        Ok(d) => d,
        Err(rv) => return rv,
    };
    let device_len = disk.disk.size();
    let out = if cmd_flags & SANLK_RX_NO_LOCKSPACE != 0 {
        block_on(rindex::rebuild_unlocked(
            &disk,
            &params(ri, None),
            device_len,
        ))
    } else {
        let guard = match OpGuard::begin(d, &ri.lockspace_name) {
            Ok(g) => g,
            Err(rv) => return rv,
        };
        let p = params(ri, Some(&guard.space));
        let c = paxos::clock();
        match paxos::with_host(&guard.space, |host| {
            block_on(rindex::rebuild(&disk, &c, host, &p, device_len))
        }) {
            Ok(r) => r,
            Err(rv) => return rv,
        }
    };
    match out {
        Ok(found) => {
            info!(ls = %ri.lockspace_name, entries = found.len(), "rindex rebuilt");
            0
        }
        Err(e) => code("rebuild", &e),
    }
}

/// The four entry operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EntryOp {
    Lookup,
    Update,
    Create { num_hosts: u32 },
    Delete,
}

/// Runs an entry operation; returns sanlock's result and the `sanlk_rentry` it replies.
fn entry_op(
    d: &Daemon,
    op: EntryOp,
    ri: &wire::Rindex,
    re: &Rentry,
    cmd_flags: u32,
) -> (i32, Rentry) {
    let none = Rentry::new(Name::EMPTY, 0);
    let need = if op == EntryOp::Lookup {
        Need::Read
    } else {
        Need::Write
    };
    let disk = match open_disk(ri, need) {
        Ok(d) => d,
        Err(rv) => return (rv, none),
    };
    let nolock =
        cmd_flags & SANLK_RX_NO_LOCKSPACE != 0 && matches!(op, EntryOp::Lookup | EntryOp::Update);
    let guard = if nolock {
        None
    } else {
        match OpGuard::begin(d, &ri.lockspace_name) {
            Ok(g) => Some(g),
            Err(rv) => return (rv, none),
        }
    };
    let space = guard.as_ref().map(|g| &*g.space);
    let p = params(ri, space);
    let c = paxos::clock();
    match op {
        EntryOp::Lookup => {
            let name = (!re.name.is_empty()).then_some(&re.name);
            match block_on(rindex::lookup(&disk, &p, name, re.offset)) {
                Ok(found) => (0, Rentry::new(found.name, found.offset)),
                Err(RindexError::Diff { found, offset, .. }) => (
                    disk_format::rv::SANLK_RINDEX_DIFF,
                    Rentry::new(found, offset),
                ),
                Err(e) => (code("lookup", &e), none),
            }
        }
        EntryOp::Update => {
            let up = if cmd_flags & SANLK_RXUP_REM != 0 && re.offset != 0 {
                UpdateOp::Remove { offset: re.offset }
            } else if cmd_flags & SANLK_RXUP_ADD != 0 && !re.name.is_empty() && re.offset != 0 {
                UpdateOp::Add {
                    name: re.name,
                    offset: re.offset,
                }
            } else {
                return (-libc::EINVAL, none);
            };
            match block_on(rindex::update(&disk, &p, up)) {
                Ok(e) => (0, Rentry::new(e.name, e.offset)),
                Err(e) => (code("update", &e), none),
            }
        }
        EntryOp::Create { num_hosts } => {
            let Some(space) = space else {
                return (-libc::EINVAL, none);
            };
            // Never place the new lease over a lockspace or lease this daemon uses
            // (lease-core also skips every slot holding a valid record).
            let path = ri.disk.path.to_text();
            let in_use = |off: u64, len: u64| crate::inuse::in_use(d, &path, off, len);
            let out = paxos::with_host(space, |host| {
                block_on(rindex::create(
                    &disk,
                    &c,
                    host,
                    &p,
                    &re.name,
                    u64::from(num_hosts),
                    &in_use,
                ))
            });
            match out {
                // sanlock replies only the offset of the new lease.
                Ok(Ok(e)) => {
                    info!(res = %e.name, offset = e.offset, "resource created");
                    (0, Rentry::new(Name::EMPTY, e.offset))
                }
                Ok(Err(e)) => (code("create", &e), none),
                Err(rv) => (rv, none),
            }
        }
        EntryOp::Delete => {
            let Some(space) = space else {
                return (-libc::EINVAL, none);
            };
            // Never clear a lease this daemon holds (errors of the lookup are left for
            // the delete itself to report).
            if let Ok(found) = block_on(rindex::lookup(&disk, &p, Some(&re.name), 0)) {
                let path = ri.disk.path.to_text();
                let len = 1 << 20; // the smallest area; a held lease starts at found.offset
                if let Err(rv) =
                    crate::inuse::refuse_if_in_use(d, "delete_resource", &path, found.offset, len)
                {
                    return (rv, none);
                }
            }
            let out = paxos::with_host(space, |host| {
                block_on(rindex::delete(&disk, &c, host, &p, &re.name, re.offset))
            });
            match out {
                Ok(Ok(e)) => {
                    info!(res = %e.name, offset = e.offset, "resource deleted");
                    (0, none)
                }
                Ok(Err(e)) => (code("delete", &e), none),
                Err(rv) => (rv, none),
            }
        }
    }
}

/// One of the entry commands (LOOKUP/UPDATE_RINDEX, CREATE/DELETE_RESOURCE, by `h.cmd`):
/// sanlock's result and the `sanlk_rentry` it replies.
pub(crate) fn entry(d: &Daemon, h: &Header, ri: &wire::Rindex, re: &Rentry) -> (i32, Rentry) {
    let op = match h.cmd {
        SM_CMD_LOOKUP_RINDEX => EntryOp::Lookup,
        SM_CMD_UPDATE_RINDEX => EntryOp::Update,
        SM_CMD_CREATE_RESOURCE => EntryOp::Create { num_hosts: h.data2 },
        _ => EntryOp::Delete,
    };
    entry_op(d, op, ri, re, h.cmd_flags)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flag_values_match_sanlock() {
        assert_eq!(SANLK_RX_NO_LOCKSPACE, 1);
        assert_eq!(SANLK_RXUP_ADD, 0x10000);
        assert_eq!(SANLK_RXUP_REM, 0x20000);
    }
}
