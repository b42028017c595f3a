//! The storage's I/O block: the unit every O_DIRECT offset and length must be a multiple
//! of, found without writing anything.
//!
//! Invariant: the answer is at least 512, at most 65536 and a power of two; an unknown
//! answer is 512 (sanlock's assumption), never an error, except that a block device whose
//! BLKSSZGET fails is an error.

use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, FileTypeExt};
use std::sync::mpsc;
use std::time::Duration;

use crate::buf::AlignedBuf;
use crate::sys;

/// The logical block size O_DIRECT I/O on `file` must be aligned to (offsets, lengths).
///
/// * block device: its logical sector size (BLKSSZGET);
/// * regular file: the logical block size of the block device holding the filesystem,
///   from `st_dev` → `/sys/dev/block/MAJ:MIN/queue/logical_block_size`, or the parent
///   device's `queue` for a partition (`/sys/dev/block/MAJ:MIN/../queue/…`);
/// * a filesystem with no block device of its own (NFS, FUSE, tmpfs, btrfs, overlay:
///   major 0): probed with one O_DIRECT read of 512 bytes at offset 0 — accepted means
///   512, EINVAL means 4096; a probe that does not answer within 2 s, or any other
///   error (an empty file reads 0 bytes), means 512.
///
/// The result is at least 512 and a power of two.
pub fn storage_block_size(file: &File) -> io::Result<u32> {
    block_size_noting(file, None)
}

/// [`storage_block_size`]; a probe that does not answer in time starts the cool-down of
/// `path`'s health record (`crate::health`), as a timed-out I/O would.
pub(crate) fn block_size_noting(file: &File, path: Option<&std::path::Path>) -> io::Result<u32> {
    use std::os::unix::fs::MetadataExt;
    let meta = file.metadata()?;
    if meta.file_type().is_block_device() {
        return sys::block_logical_sector_size(file);
    }
    if let Some(n) = sysfs_logical_block_size(meta.dev()) {
        return Ok(n);
    }
    Ok(probe_block_size(file, path))
}

/// glibc's `major()`/`minor()` of a `dev_t`.
fn dev_major_minor(dev: u64) -> (u64, u64) {
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
    let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
    (major, minor)
}

pub(crate) fn valid_block(n: u32) -> bool {
    (512..=65536).contains(&n) && n.is_power_of_two()
}

fn sysfs_logical_block_size(dev: u64) -> Option<u32> {
    let (major, minor) = dev_major_minor(dev);
    if major == 0 {
        return None;
    }
    let base = format!("/sys/dev/block/{major}:{minor}");
    // A partition has no queue/ of its own; its parent directory is the whole disk.
    [
        format!("{base}/queue/logical_block_size"),
        format!("{base}/../queue/logical_block_size"),
    ]
    .iter()
    .find_map(|p| {
        let text = std::fs::read_to_string(p).ok()?;
        let n: u32 = text.trim().parse().ok()?;
        valid_block(n).then_some(n)
    })
}

/// How long a block-size probe may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

fn probe_block_size(file: &File, path: Option<&std::path::Path>) -> u32 {
    let Ok(f) = file.try_clone() else {
        return 512;
    };
    let (tx, rx) = mpsc::sync_channel::<io::Result<usize>>(1);
    // The thread owns its fd and buffer, so a probe stuck in the storage is harmless.
    let spawned = crate::spawn_thread("lockd-probe", move || {
        let mut buf = AlignedBuf::zeroed(512);
        let _ = tx.send(f.read_at(buf.as_mut_slice(), 0));
    });
    if spawned.is_err() {
        return 512;
    }
    match rx.recv_timeout(PROBE_TIMEOUT) {
        Ok(Err(e)) if e.raw_os_error() == Some(libc::EINVAL) => 4096,
        Err(mpsc::RecvTimeoutError::Timeout) => {
            if let Some(path) = path {
                crate::health::of(path).timed_out(PROBE_TIMEOUT);
            }
            512
        }
        _ => 512,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dev_numbers_split_as_glibc() {
        assert_eq!(dev_major_minor(0xfe00), (254, 0));
        assert_eq!(dev_major_minor(0x0701), (7, 1));
        assert_eq!(dev_major_minor(0x801), (8, 1));
        // a large minor (e.g. loop 300): minor bits above 8 live at bits 20..
        assert_eq!(
            dev_major_minor((7 << 8) | (300 & 0xff) | ((300 & !0xff) << 12)),
            (7, 300)
        );
    }

    #[test]
    fn valid_blocks() {
        for n in [512, 1024, 4096, 65536] {
            assert!(valid_block(n), "{n}");
        }
        for n in [0, 256, 513, 3000, 131072] {
            assert!(!valid_block(n), "{n}");
        }
    }
}
