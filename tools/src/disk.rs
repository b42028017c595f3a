//! Direct (O_DIRECT | O_SYNC) access to lease storage for the `lockd direct` commands.
//!
//! Invariants: every read and write covers whole logical sectors at a sector-aligned
//! offset, through a page-aligned buffer; nothing is written outside [offset, offset+len).
//! Two sizes: `sector_size` (BLKSSZGET, 512 for regular files) is what formatting
//! defaults to, as sanlock; `io_block` (the storage's logical block size: BLKSSZGET, or
//! for a regular file its filesystem's device, see
//! `lockd_daemon::diskio::storage_block_size`) is what every offset and length must be
//! a multiple of, so O_DIRECT never sees an I/O it would refuse.

use std::fs::{File, OpenOptions};
use std::io::{self, Seek, SeekFrom};
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use thiserror::Error;

use crate::sys;

const PAGE: usize = 4096;

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

/// A page-aligned, zero-initialised byte buffer, made without `unsafe` by over-allocating
/// and slicing at the first page boundary.
pub struct AlignedBuf {
    storage: Vec<u8>,
    start: usize,
    len: usize,
}

impl AlignedBuf {
    /// A zeroed buffer of `len` bytes starting on a page boundary.
    pub fn zeroed(len: usize) -> AlignedBuf {
        let storage = vec![0u8; len + PAGE];
        let start = storage.as_ptr().align_offset(PAGE);
        assert!(
            start < PAGE,
            "align_offset on u8 pointers is always computable"
        );
        AlignedBuf {
            storage,
            start,
            len,
        }
    }

    /// A page-aligned copy of `data`.
    pub fn copy_of(data: &[u8]) -> AlignedBuf {
        let mut b = AlignedBuf::zeroed(data.len());
        b.as_mut_slice().copy_from_slice(data);
        b
    }

    pub fn as_slice(&self) -> &[u8] {
        &self.storage[self.start..self.start + self.len]
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.storage[self.start..self.start + self.len]
    }
}

/// An open lease device or file.
pub struct DirectDisk {
    path: PathBuf,
    file: File,
    is_block: bool,
    sector_size: u32,
    io_block: u32,
    size: u64,
}

impl DirectDisk {
    /// Opens read-write (or read-only) with O_DIRECT | O_SYNC.
    pub fn open(path: &Path, writable: bool) -> Result<DirectDisk, DiskError> {
        let mut flags = libc::O_DIRECT;
        if writable {
            flags |= libc::O_SYNC;
        }
        let file = OpenOptions::new()
            .read(true)
            .write(writable)
            .custom_flags(flags)
            .open(path)
            .map_err(|source| DiskError::Open {
                path: path.to_path_buf(),
                source,
            })?;
        let meta = file.metadata().map_err(|source| DiskError::Open {
            path: path.to_path_buf(),
            source,
        })?;
        let is_block = meta.file_type().is_block_device();
        let sector_size = if is_block {
            sys::block_logical_sector_size(&file).map_err(|source| DiskError::Io {
                path: path.to_path_buf(),
                what: "BLKSSZGET".into(),
                source,
            })?
        } else {
            512
        };
        let size = if is_block {
            (&file)
                .seek(SeekFrom::End(0))
                .map_err(|source| DiskError::Io {
                    path: path.to_path_buf(),
                    what: "size".into(),
                    source,
                })?
        } else {
            meta.len()
        };
        let io_block =
            lockd_daemon::diskio::storage_block_size(&file).map_err(|source| DiskError::Io {
                path: path.to_path_buf(),
                what: "logical block size".into(),
                source,
            })?;
        Ok(DirectDisk {
            path: path.to_path_buf(),
            file,
            is_block,
            sector_size,
            io_block,
            size,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The sector size formatting defaults to: logical sector size of a block device,
    /// 512 for regular files (as sanlock).
    pub fn sector_size(&self) -> u32 {
        self.sector_size
    }

    /// The storage's logical block size: every I/O offset and length is a multiple.
    pub fn io_block(&self) -> u32 {
        self.io_block
    }

    /// Bytes on the device, or the file's current length.
    pub fn size(&self) -> u64 {
        self.size
    }

    pub fn is_block_device(&self) -> bool {
        self.is_block
    }

    /// Checks alignment and that `[offset, offset + len)` is addressable; returns the end.
    fn check(&self, offset: u64, len: usize, io_unit: u32) -> Result<u64, DiskError> {
        let end =
            crate::spec::area_end(offset, len as u64).map_err(|_| DiskError::PastMaxOffset {
                path: self.path.clone(),
                offset,
                len: len as u64,
            })?;
        let unit = u64::from(io_unit.max(self.io_block));
        if !offset.is_multiple_of(unit) || !(len as u64).is_multiple_of(unit) {
            return Err(DiskError::Unaligned {
                path: self.path.clone(),
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
        self.check(offset, len, self.io_block)?;
        let mut buf = AlignedBuf::zeroed(len);
        let mut done = 0usize;
        while done < len {
            let n = self
                .file
                // No overflow: offset + len was checked above and done < len.
                .read_at(&mut buf.as_mut_slice()[done..], offset + done as u64)
                .map_err(|source| DiskError::Io {
                    path: self.path.clone(),
                    what: format!("read {len} bytes at offset {offset}"),
                    source,
                })?;
            if n == 0 {
                return Err(DiskError::ShortRead {
                    path: self.path.clone(),
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
        if self.is_block && end > self.size {
            return Err(DiskError::PastEnd {
                path: self.path.clone(),
                offset,
                need: data.len() as u64,
                size: self.size,
            });
        }
        let buf = AlignedBuf::copy_of(data);
        self.file
            .write_all_at(buf.as_slice(), offset)
            .map_err(|source| DiskError::Io {
                path: self.path.clone(),
                what: format!("write {} bytes at offset {offset}", data.len()),
                source,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_buffers() {
        for len in [512usize, 4096, 1 << 20] {
            let b = AlignedBuf::zeroed(len);
            assert_eq!(b.as_slice().as_ptr() as usize % PAGE, 0);
            assert_eq!(b.as_slice().len(), len);
            assert!(b.as_slice().iter().all(|&x| x == 0));
        }
    }
}
