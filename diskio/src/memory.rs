//! In-memory lease storage, for running the whole daemon inside a test process.
//!
//! [`install`] turns on one process-wide table of [`MemoryImage`]s. From then on every
//! [`DirectDisk::open`](crate::DirectDisk::open) / [`DirectDisk::open_with`](crate::DirectDisk::open_with) in the
//! process is served from that table: a path that names an image uses it, any other path
//! fails to open with ENOENT (so a test cannot touch real storage by mistake). Nothing in
//! the daemon, the CLI or the configuration can turn this on; only a test harness that
//! links the crate and calls [`install`] can, and there is no way back to real storage in
//! that process. [`DirectFile`](crate::DirectFile) (what `lockd direct` uses) is never
//! affected.
//!
//! Why here and not lease-core's `MemDisk`: that one is single-threaded test code inside
//! lease-core, below the daemon's I/O layer. Backing a [`DirectDisk`](crate::DirectDisk) keeps the
//! daemon's whole I/O path in a test — alignment checks, the in-flight limit, per-I/O
//! timeouts, the metrics observer — with only the storage itself replaced.
//!
//! Invariants:
//! - an image's length and sector size never change after [`MemoryDisks::create`];
//! - each read and write is atomic with respect to every other I/O on the image (one
//!   mutex), which is at least as strong as what a disk gives for one sector;
//! - a read past the end fails as `read_exact_at` does (UnexpectedEof), a write past the
//!   end fails without writing anything;
//! - while [`MemoryImage::set_failing`] is on, every I/O fails with EIO and changes
//!   nothing.

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

/// One in-memory device.
#[derive(Debug)]
pub struct MemoryImage {
    path: PathBuf,
    sector_size: u32,
    bytes: Mutex<Vec<u8>>,
    failing: AtomicBool,
    reads: AtomicU64,
    writes: AtomicU64,
}

impl MemoryImage {
    /// The path it answers to.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Its logical sector size (also its I/O block).
    pub fn sector_size(&self) -> u32 {
        self.sector_size
    }

    /// Its length in bytes.
    pub fn size(&self) -> u64 {
        self.lock().len() as u64
    }

    /// Makes every following I/O fail with EIO (`true`) or succeed again (`false`).
    pub fn set_failing(&self, failing: bool) {
        self.failing.store(failing, Ordering::SeqCst);
    }

    /// Reads and writes served so far (failed ones included).
    pub fn io_counts(&self) -> (u64, u64) {
        (
            self.reads.load(Ordering::Relaxed),
            self.writes.load(Ordering::Relaxed),
        )
    }

    /// A copy of `len` bytes at `offset` (for test assertions), or `None` past the end.
    pub fn snapshot(&self, offset: u64, len: usize) -> Option<Vec<u8>> {
        let bytes = self.lock();
        let range = byte_range(bytes.len(), offset, len)?;
        Some(bytes[range].to_vec())
    }

    fn lock(&self) -> MutexGuard<'_, Vec<u8>> {
        // A panic while holding the lock leaves whole bytes behind; keep serving them.
        self.bytes.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn check_failing(&self) -> io::Result<()> {
        if self.failing.load(Ordering::SeqCst) {
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        Ok(())
    }

    pub(crate) fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.reads.fetch_add(1, Ordering::Relaxed);
        self.check_failing()?;
        let bytes = self.lock();
        let range = byte_range(bytes.len(), offset, buf.len()).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "read past the end of the image",
            )
        })?;
        buf.copy_from_slice(&bytes[range]);
        Ok(())
    }

    pub(crate) fn write_at(&self, data: &[u8], offset: u64) -> io::Result<()> {
        self.writes.fetch_add(1, Ordering::Relaxed);
        self.check_failing()?;
        let mut bytes = self.lock();
        let range = byte_range(bytes.len(), offset, data.len())
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOSPC))?;
        bytes[range].copy_from_slice(data);
        Ok(())
    }
}

/// `offset..offset+len` when it lies inside `total` bytes.
fn byte_range(total: usize, offset: u64, len: usize) -> Option<std::ops::Range<usize>> {
    let start = usize::try_from(offset).ok()?;
    let end = start.checked_add(len)?;
    (end <= total).then_some(start..end)
}

/// The process-wide table of images.
#[derive(Debug, Default)]
pub struct MemoryDisks {
    images: Mutex<HashMap<PathBuf, Arc<MemoryImage>>>,
}

/// Sector sizes an image may have (those sanlock supports).
const SECTOR_SIZES: [u32; 2] = [512, 4096];

impl MemoryDisks {
    /// Creates a zero-filled image of `size_bytes` at `path` (replacing any image there).
    ///
    /// # Errors
    /// InvalidInput when `sector_size` is not 512 or 4096 or `size_bytes` is not a whole
    /// number of sectors.
    pub fn create(
        &self,
        path: &Path,
        size_bytes: u64,
        sector_size: u32,
    ) -> io::Result<Arc<MemoryImage>> {
        if !SECTOR_SIZES.contains(&sector_size)
            || !size_bytes.is_multiple_of(u64::from(sector_size))
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("image of {size_bytes} bytes with {sector_size}-byte sectors"),
            ));
        }
        let len = usize::try_from(size_bytes)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "image too large"))?;
        let image = Arc::new(MemoryImage {
            path: path.to_path_buf(),
            sector_size,
            bytes: Mutex::new(vec![0; len]),
            failing: AtomicBool::new(false),
            reads: AtomicU64::new(0),
            writes: AtomicU64::new(0),
        });
        self.table().insert(path.to_path_buf(), image.clone());
        Ok(image)
    }

    /// The image at `path`, if any.
    pub fn get(&self, path: &Path) -> Option<Arc<MemoryImage>> {
        self.table().get(path).cloned()
    }

    fn table(&self) -> MutexGuard<'_, HashMap<PathBuf, Arc<MemoryImage>>> {
        self.images.lock().unwrap_or_else(|p| p.into_inner())
    }
}

static INSTALLED: OnceLock<MemoryDisks> = OnceLock::new();

/// Serves every later [`DirectDisk`](crate::DirectDisk) open in this process from memory; returns the
/// table to create images in. Calling it again returns the same table.
pub fn install() -> &'static MemoryDisks {
    INSTALLED.get_or_init(MemoryDisks::default)
}

/// What an open of `path` should use: `None` when memory disks are not installed (use the
/// file system), else the image or ENOENT.
pub(crate) fn lookup(path: &Path) -> Option<io::Result<Arc<MemoryImage>>> {
    let disks = INSTALLED.get()?;
    // A raw errno, so the protocol edge answers -ENOENT as for a missing device.
    Some(
        disks
            .get(path)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOENT)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_refuses_odd_geometry() {
        let disks = MemoryDisks::default();
        assert!(disks.create(Path::new("/m/a"), 1000, 512).is_err());
        assert!(disks.create(Path::new("/m/a"), 4096, 1024).is_err());
        assert!(disks.create(Path::new("/m/a"), 8192, 4096).is_ok());
    }

    #[test]
    fn reads_and_writes_stay_inside_the_image() {
        let disks = MemoryDisks::default();
        let img = disks.create(Path::new("/m/b"), 4096, 512).unwrap();
        img.write_at(&[7; 512], 512).unwrap();
        let mut buf = [0u8; 1024];
        img.read_at(&mut buf, 0).unwrap();
        assert_eq!(&buf[..512], &[0; 512][..]);
        assert_eq!(&buf[512..], &[7; 512][..]);
        assert!(img.write_at(&[1; 512], 4096).is_err());
        assert!(img.read_at(&mut buf, 3584).is_err());
        assert!(img.read_at(&mut buf, u64::MAX).is_err());
        assert_eq!(img.snapshot(4096, 1), None);
        assert_eq!(img.io_counts(), (3, 2));
    }

    #[test]
    fn a_failing_image_changes_nothing() {
        let disks = MemoryDisks::default();
        let img = disks.create(Path::new("/m/c"), 4096, 512).unwrap();
        img.set_failing(true);
        let e = img.write_at(&[9; 512], 0).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EIO));
        img.set_failing(false);
        assert_eq!(img.snapshot(0, 512).unwrap(), vec![0; 512]);
    }
}
