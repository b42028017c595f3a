//! Direct (O_DIRECT | O_SYNC) access to lease storage for the `lockd direct` commands:
//! lockd-diskio's [`DirectFile`] (the daemon's open and block-size probe, blocking I/O
//! without timeouts), with the checks and error messages of a command-line tool.
//!
//! Invariants: every read and write covers whole logical sectors at a sector-aligned
//! offset, through a page-aligned buffer; nothing is written outside [offset, offset+len).
//! Two sizes: `sector_size` (BLKSSZGET, 512 for regular files) is what formatting
//! defaults to, as sanlock; `io_block` (the storage's logical block size: BLKSSZGET, or
//! for a regular file its filesystem's device, see `lockd_diskio::storage_block_size`) is
//! what every offset and length must be a multiple of, so O_DIRECT never sees an I/O it
//! would refuse.

use std::io;
use std::path::{Path, PathBuf};

use lockd_diskio::{Access, AlignedBuf, DirectFile, OpenError, OpenStep};
use thiserror::Error;

/// Errors from direct disk access, each naming the path.
#[derive(Debug, Error)]
pub enum DiskError {
    #[error("{path}: cannot open")]
    Open { path: PathBuf, source: io::Error },
    #[error("{path}: {what}")]
    Io {
        path: PathBuf,
        what: String,
        source: io::Error,
    },
    #[error("{path}: offset {offset} is not a multiple of the {sector_size}-byte sector size")]
    Unaligned {
        path: PathBuf,
        offset: u64,
        sector_size: u32,
    },
    #[error(
        "{path}: {need} bytes at offset {offset} go past the end of the device ({size} bytes)"
    )]
    PastEnd {
        path: PathBuf,
        offset: u64,
        need: u64,
        size: u64,
    },
    #[error(
        "{path}: {len} bytes at offset {offset} go past the largest file offset ({})",
        crate::spec::MAX_OFFSET
    )]
    PastMaxOffset {
        path: PathBuf,
        offset: u64,
        len: u64,
    },
    #[error("{path}: short read at offset {offset}: {got} of {want} bytes (file truncated?)")]
    ShortRead {
        path: PathBuf,
        offset: u64,
        got: usize,
        want: usize,
    },
}

/// An open lease device or file whose every read and write is checked before it reaches
/// O_DIRECT: whole aligned blocks, below the largest file offset, and (for a write to a
/// block device) not past its end.
pub struct CheckedDisk {
    file: DirectFile,
}

impl CheckedDisk {
    /// Opens read-write (or read-only) with O_DIRECT | O_SYNC (O_DIRECT alone read-only).
    pub fn open(path: &Path, writable: bool) -> Result<CheckedDisk, DiskError> {
        let access = if writable {
            Access::ReadWrite
        } else {
            Access::ReadOnly
        };
        let file = DirectFile::open(path, access).map_err(|OpenError { path, step, source }| {
            let what = match step {
                OpenStep::Open => return DiskError::Open { path, source },
                OpenStep::SectorSize => "BLKSSZGET",
                OpenStep::Size => "size",
                OpenStep::BlockSize => "logical block size",
            };
            DiskError::Io {
                path,
                what: what.into(),
                source,
            }
        })?;
        Ok(CheckedDisk { file })
    }

    pub fn path(&self) -> &Path {
        self.file.path()
    }

    /// The sector size formatting defaults to: logical sector size of a block device,
    /// 512 for regular files (as sanlock).
    pub fn sector_size(&self) -> u32 {
        self.file.sector_size()
    }

    /// The storage's logical block size: every I/O offset and length is a multiple.
    pub fn io_block(&self) -> u32 {
        self.file.io_block()
    }

    /// Bytes on the device, or the file's current length.
    pub fn size(&self) -> u64 {
        self.file.size()
    }

    pub fn is_block_device(&self) -> bool {
        self.file.is_block_device()
    }

    /// Checks alignment and that `[offset, offset + len)` is addressable; returns the end.
    fn check(&self, offset: u64, len: usize, io_unit: u32) -> Result<u64, DiskError> {
        let end =
            crate::spec::area_end(offset, len as u64).map_err(|_| DiskError::PastMaxOffset {
                path: self.path().to_path_buf(),
                offset,
                len: len as u64,
            })?;
        let unit = u64::from(io_unit.max(self.io_block()));
        if !offset.is_multiple_of(unit) || !(len as u64).is_multiple_of(unit) {
            return Err(DiskError::Unaligned {
                path: self.path().to_path_buf(),
                offset: if !offset.is_multiple_of(unit) {
                    offset
                } else {
                    len as u64
                },
                sector_size: unit as u32,
            });
        }
        Ok(end)
    }

    /// Reads exactly `len` bytes at `offset`; a short read (end of file) is an error.
    pub fn read(&self, offset: u64, len: usize) -> Result<AlignedBuf, DiskError> {
        self.check(offset, len, self.io_block())?;
        let mut buf = AlignedBuf::zeroed(len);
        let mut done = 0usize;
        while done < len {
            let n = self
                .file
                // No overflow: offset + len was checked above and done < len.
                .read_at(&mut buf.as_mut_slice()[done..], offset + done as u64)
                .map_err(|source| DiskError::Io {
                    path: self.path().to_path_buf(),
                    what: format!("read {len} bytes at offset {offset}"),
                    source,
                })?;
            if n == 0 {
                return Err(DiskError::ShortRead {
                    path: self.path().to_path_buf(),
                    offset,
                    got: done,
                    want: len,
                });
            }
            done += n;
        }
        Ok(buf)
    }

    /// Writes `data` (whole sectors of `io_unit` bytes) at `offset`. Block devices are
    /// never written past their end; regular files grow as needed.
    pub fn write(&self, offset: u64, data: &[u8], io_unit: u32) -> Result<(), DiskError> {
        let end = self.check(offset, data.len(), io_unit)?;
        if self.is_block_device() && end > self.size() {
            return Err(DiskError::PastEnd {
                path: self.path().to_path_buf(),
                offset,
                need: data.len() as u64,
                size: self.size(),
            });
        }
        let buf = AlignedBuf::copy_of(data);
        self.file
            .write_all_at(buf.as_slice(), offset)
            .map_err(|source| DiskError::Io {
                path: self.path().to_path_buf(),
                what: format!("write {} bytes at offset {offset}", data.len()),
                source,
            })
    }
}
