//! A lease device or file opened for direct I/O, with the sizes every I/O depends on.
//!
//! Invariants: the file is opened with O_DIRECT (and O_SYNC when writable), so no read is
//! answered from, and no write lingers in, this host's page cache; the sizes are read
//! once, at open: for a block device BLKSSZGET (both the formatting sector size and the
//! I/O block) and its size, for a regular file its length and
//! [`storage_block_size`](crate::storage_block_size). Nothing is cached across opens: a
//! path may name other storage at the next open, and an fd kept open past a release
//! would pin the device (an LV in use cannot be removed) or a deleted lease file. `DirectFile` does no checking of
//! its own: its callers keep every offset and length a multiple of [`DirectFile::io_block`]
//! and the buffer page-aligned ([`AlignedBuf`](crate::AlignedBuf)).

use std::fs::{File, OpenOptions};
use std::io::{self, Seek, SeekFrom};
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use thiserror::Error;

use crate::blocksize::block_size_noting;
use crate::sys;

/// How a [`DirectFile`] is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Read and write, O_DIRECT | O_SYNC.
    ReadWrite,
    /// Read only, O_DIRECT.
    ReadOnly,
}

/// Which step of [`DirectFile::open`] failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenStep {
    /// open(2) or fstat(2).
    Open,
    /// BLKSSZGET on a block device.
    SectorSize,
    /// The size of a block device (seek to its end).
    Size,
    /// [`storage_block_size`](crate::storage_block_size).
    BlockSize,
}

/// A failed [`DirectFile::open`].
#[derive(Debug, Error)]
#[error("{path:?}: cannot open: {source}")]
pub struct OpenError {
    pub path: PathBuf,
    pub step: OpenStep,
    pub source: io::Error,
}

/// A device or file opened with O_DIRECT, and its sizes.
#[derive(Debug, Clone)]
pub struct DirectFile {
    path: PathBuf,
    file: Arc<File>,
    is_block: bool,
    sector_size: u32,
    io_block: u32,
    size: u64,
}

/// The open(2) every [`DirectFile`] is made with: read-only with O_DIRECT, or read-write
/// with O_DIRECT | O_SYNC.
pub fn open_direct(path: &Path, access: Access) -> io::Result<File> {
    let writable = access == Access::ReadWrite;
    let mut flags = libc::O_DIRECT;
    if writable {
        flags |= libc::O_SYNC;
    }
    OpenOptions::new()
        .read(true)
        .write(writable)
        .custom_flags(flags)
        .open(path)
}

impl DirectFile {
    /// Opens `path` with O_DIRECT (| O_SYNC for [`Access::ReadWrite`]) and reads its sizes.
    pub fn open(path: &Path, access: Access) -> Result<DirectFile, OpenError> {
        DirectFile::open_via(path, access, open_direct)
    }

    /// As [`DirectFile::open`], with the open(2) itself done by `opener` (given the path
    /// and the access; it must open exactly as [`open_direct`] does). The daemon uses this
    /// to open a client-named path with the client's rights (on a thread that took the
    /// client's filesystem credentials); the sizes are then read through that fd.
    pub fn open_via(
        path: &Path,
        access: Access,
        opener: impl FnOnce(&Path, Access) -> io::Result<File>,
    ) -> Result<DirectFile, OpenError> {
        let fail = |step| {
            move |source| OpenError {
                path: path.to_path_buf(),
                step,
                source,
            }
        };
        let file = opener(path, access).map_err(fail(OpenStep::Open))?;
        let meta = file.metadata().map_err(fail(OpenStep::Open))?;
        let is_block = meta.file_type().is_block_device();
        let (sector_size, size) = if is_block {
            let sector_size =
                sys::block_logical_sector_size(&file).map_err(fail(OpenStep::SectorSize))?;
            let size = (&file)
                .seek(SeekFrom::End(0))
                .map_err(fail(OpenStep::Size))?;
            (sector_size, size)
        } else {
            (512, meta.len())
        };
        // A block device's I/O block is its BLKSSZGET, just read from this very fd: ask
        // again only for a regular file (sysfs, or a probe read on NFS/FUSE).
        let io_block = if is_block {
            sector_size
        } else {
            block_size_noting(&file, Some(path)).map_err(fail(OpenStep::BlockSize))?
        };
        Ok(DirectFile {
            path: path.to_path_buf(),
            file: Arc::new(file),
            is_block,
            sector_size,
            io_block,
            size,
        })
    }

    /// The path it was opened by.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The sector size formatting defaults to, as sanlock: the logical sector size of a
    /// block device, 512 for a regular file (whatever its filesystem needs).
    pub fn sector_size(&self) -> u32 {
        self.sector_size
    }

    /// The unit every I/O must be aligned to (offset, length): the storage's logical
    /// block size ([`storage_block_size`](crate::storage_block_size)).
    pub fn io_block(&self) -> u32 {
        self.io_block
    }

    /// Bytes on the device, or the file's length at open.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// True for a block device.
    pub fn is_block_device(&self) -> bool {
        self.is_block
    }

    /// One positioned read (pread(2)) into `buf`; may return fewer bytes (end of file).
    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.file.read_at(buf, offset)
    }

    /// Writes all of `buf` at `offset` (pwrite(2), repeated on a short write).
    pub fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.file.write_all_at(buf, offset)
    }

    /// The open file, shared with the engines (which hold it until their I/O completes).
    pub(crate) fn shared_file(&self) -> &Arc<File> {
        &self.file
    }

    /// Tests only: a "disk" whose reads wait until something is written to the pipe.
    #[cfg(test)]
    pub(crate) fn pipe_for_test(reader: std::io::PipeReader, path: &Path) -> DirectFile {
        DirectFile {
            path: path.to_path_buf(),
            file: Arc::new(File::from(std::os::fd::OwnedFd::from(reader))),
            is_block: false,
            sector_size: 512,
            io_block: 512,
            size: 1 << 20,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::scratch;
    use crate::AlignedBuf;

    #[test]
    fn read_only_and_read_write_opens() {
        let (_d, path) = scratch(1 << 20);
        let rw = DirectFile::open(&path, Access::ReadWrite).unwrap();
        assert!(!rw.is_block_device());
        assert_eq!(rw.sector_size(), 512);
        assert_eq!(rw.size(), 1 << 20);
        assert!(crate::blocksize::valid_block(rw.io_block()));
        let data = AlignedBuf::copy_of(&vec![9u8; rw.io_block() as usize]);
        rw.write_all_at(data.as_slice(), 0).unwrap();
        let ro = DirectFile::open(&path, Access::ReadOnly).unwrap();
        let mut back = AlignedBuf::zeroed(data.len());
        assert_eq!(ro.read_at(back.as_mut_slice(), 0).unwrap(), data.len());
        assert_eq!(back.as_slice(), data.as_slice());
        assert!(
            ro.write_all_at(data.as_slice(), 0).is_err(),
            "opened read-only"
        );
    }

    #[test]
    fn missing_path_fails_at_the_open_step() {
        let e = DirectFile::open(Path::new("/var/tmp/lockd-diskio-no-such"), Access::ReadOnly)
            .unwrap_err();
        assert_eq!(e.step, OpenStep::Open);
        assert_eq!(e.source.raw_os_error(), Some(libc::ENOENT));
    }
}
