//! Refusing client-requested writes over areas this daemon uses (WRITE_LOCKSPACE,
//! WRITE_RESOURCE, FORMAT_RINDEX, and the lease CREATE_RESOURCE places).
//!
//! Invariants:
//! - A write of `[start, start + len)` on a disk is refused ([`InUse`], -EBUSY for the
//!   client) when it overlaps the lockspace area of any lockspace in our table (adding,
//!   joined or being removed), or the area of any resource lease in our resource table
//!   (held, orphaned, or being acquired or released). sanlock's protocol has no force flag for these commands and
//!   lockd's CLI `--force` never reaches here: no client can override this.
//! - "The same disk" is decided by identity, not by the path text: the device number of a
//!   block device, or (device, inode) of a regular file, so `/dev/dm-3` and
//!   `/dev/mapper/vg-lv` are one disk. A path that cannot be stat'ed is compared as text.
//! - Areas whose size is not known yet (a lockspace still being added, a lease still being
//!   acquired) are taken as the smallest area that surely holds what we use of them:
//!   a lockspace up to our own delta record in 4 KiB sectors and at least 1 MiB, a lease
//!   1 MiB (the smallest align size).
//! - Only our own use is checked here: valid records of other hosts or of unused leases
//!   are overwritten as sanlock overwrites them (lvmlockd reformats `#unused` resources).
//!   The CLI checks those before asking (`lockd rindex format`, `lockd direct …`).

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

use tracing::warn;

use crate::state::Daemon;
use crate::sync::lock;

/// What identifies a disk whatever path names it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum DiskId {
    Block(u64),
    File(u64, u64),
    Path(String),
}

fn disk_id(path: &str) -> DiskId {
    match std::fs::metadata(Path::new(path)) {
        Ok(m) if m.file_type().is_block_device() => DiskId::Block(m.rdev()),
        Ok(m) => DiskId::File(m.dev(), m.ino()),
        Err(_) => DiskId::Path(path.to_string()),
    }
}

const MIB: u64 = 1 << 20;

/// An area we use: what it is, its disk and its byte range.
struct Area {
    what: String,
    path: String,
    start: u64,
    len: u64,
}

fn overlaps(a_start: u64, a_len: u64, b_start: u64, b_len: u64) -> bool {
    a_start < b_start.saturating_add(b_len) && b_start < a_start.saturating_add(a_len)
}

/// Every area this daemon uses now.
fn areas(d: &Daemon) -> Vec<Area> {
    let spaces: Vec<_> = lock(&d.spaces).clone();
    let mut out: Vec<Area> = spaces
        .iter()
        .map(|s| {
            let len = match s.joined.get() {
                Some(j) => j.params.geometry.align_bytes(),
                None => MIB.max(s.host_id.saturating_mul(4096)),
            };
            Area {
                what: format!("lockspace {} (our host_id {})", s.name, s.host_id),
                path: s.path.clone(),
                start: s.offset,
                len,
            }
        })
        .collect();
    let tables = lock(&d.core);
    for r in tables.resources.values() {
        let len = match r.held.align_size() {
            0 => MIB,
            a => a,
        };
        for disk in &r.disks {
            out.push(Area {
                what: format!("resource lease {}:{} held by this host", r.ls, r.name),
                path: disk.path.to_text(),
                start: disk.offset,
                len,
            });
        }
    }
    out
}

/// The area we use that `[start, start + len)` of `path` overlaps, if any.
fn area_in_use(d: &Daemon, path: &str, start: u64, len: u64) -> Option<Area> {
    let target = disk_id(path);
    areas(d)
        .into_iter()
        .find(|a| overlaps(start, len, a.start, a.len) && disk_id(&a.path) == target)
}

/// True when `[start, start + len)` of `path` overlaps a lockspace or lease we use.
pub(crate) fn in_use(d: &Daemon, path: &str, start: u64, len: u64) -> bool {
    area_in_use(d, path, start, len).is_some()
}

/// A client-requested write refused because it would overwrite an area this daemon uses
/// (-EBUSY for sanlock's clients: `AdminError::code`, `RindexCmdError::code`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{op} would overwrite {area}, which this daemon uses")]
pub struct InUse {
    /// The refused write (e.g. "write_resource").
    pub op: &'static str,
    /// What is there: a lockspace or a lease, named.
    pub area: String,
}

/// [`InUse`] when writing `len` bytes at `start` of `path` would overwrite a lockspace we
/// joined (or are joining) or a lease we hold; `what` names the write.
pub(crate) fn refuse_if_in_use(
    d: &Daemon,
    what: &'static str,
    path: &str,
    start: u64,
    len: u64,
) -> Result<(), InUse> {
    match area_in_use(d, path, start, len) {
        None => Ok(()),
        Some(a) => {
            warn!(
                op = what,
                path,
                offset = start,
                len,
                in_use = %a.what,
                area_offset = a.start,
                "refusing to write over an area this daemon uses (-EBUSY)"
            );
            Err(InUse {
                op: what,
                area: a.what,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_write_says_what_it_would_overwrite() {
        let e = InUse {
            op: "write_resource",
            area: "resource lease ls:r held by this host".into(),
        };
        assert_eq!(
            e.to_string(),
            "write_resource would overwrite resource lease ls:r held by this host, which this daemon uses"
        );
    }

    #[test]
    fn overlap_bounds() {
        assert!(overlaps(0, MIB, MIB / 2, MIB));
        assert!(!overlaps(0, MIB, MIB, MIB));
        assert!(!overlaps(MIB, MIB, 0, MIB));
        assert!(overlaps(3 * MIB / 2, MIB, MIB, MIB));
        assert!(overlaps(0, 2 * MIB, MIB, 8 * MIB));
        assert!(!overlaps(u64::MAX - 1, 10, 0, MIB));
        assert!(overlaps(u64::MAX - 1, 10, u64::MAX - 5, 10));
    }

    #[test]
    fn one_file_under_two_names_is_one_disk() {
        let dir = std::env::temp_dir().join(format!("lockd-inuse-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("img");
        std::fs::write(&f, b"x").unwrap();
        let link = dir.join("link");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&f, &link).unwrap();
        assert_eq!(
            disk_id(&f.display().to_string()),
            disk_id(&link.display().to_string())
        );
        assert_eq!(
            disk_id("/nonexistent/a"),
            DiskId::Path("/nonexistent/a".into())
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
