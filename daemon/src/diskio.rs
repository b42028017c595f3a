//! Lease storage I/O: O_DIRECT | O_SYNC, page-aligned buffers, and a timeout on every I/O.
//!
//! Engines: io_uring (default where available): each I/O is a READ/WRITE linked to a
//! LINK_TIMEOUT on a ring driven by one thread (see `sys::uring`); lockspaces get a ring
//! of their own so client I/O never queues in front of renewals, resource I/O shares one.
//! Fallback (or `LOCKD_IO_ENGINE=threads`): each I/O runs on its own short-lived worker
//! thread doing one positioned `pread`/`pwrite`. Either way the caller waits on a channel
//! with a deadline. Invariants:
//! - the buffer is *moved* into the worker and comes back only through the completion,
//!   so a timed-out I/O's buffer can never be reused (or freed) before the kernel is done
//!   with it — on timeout the caller gets a [`Pending`] it may keep waiting on, or drop,
//!   in which case the worker frees the buffer after the I/O completes;
//! - every offset and length is a multiple of the storage's logical block size
//!   ([`storage_block_size`]: BLKSSZGET for a block device, the filesystem's device for a
//!   regular file), checked before submit, so an I/O O_DIRECT would refuse is refused
//!   with -EINVAL before anything reaches the storage;
//! - at most `MAX_INFLIGHT` I/Os per disk are outstanding; beyond that submission fails
//!   at once (a hung device must not grow threads without bound).

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use thiserror::Error;

use crate::sys;
use crate::sys::uring::{Op, Target, UringEngine};

const PAGE: usize = 4096;
/// Outstanding I/Os allowed per open disk.
pub const MAX_INFLIGHT: usize = 64;

/// I/O errors, mapped to sanlock codes at the protocol edge.
#[derive(Debug, Error)]
pub enum IoError {
    #[error("{path:?}: cannot open: {source}")]
    Open { path: PathBuf, source: io::Error },
    #[error("{path:?}: {op} at {offset}: {source}")]
    Failed {
        path: PathBuf,
        op: &'static str,
        offset: u64,
        source: io::Error,
    },
    #[error("{path:?}: {op} at {offset} timed out after {timeout_ms} ms")]
    Timeout {
        path: PathBuf,
        op: &'static str,
        offset: u64,
        timeout_ms: u64,
    },
    #[error("{path:?}: offset {offset} / length {len} not aligned to {sector_size}")]
    Unaligned {
        path: PathBuf,
        offset: u64,
        len: usize,
        sector_size: u32,
    },
    #[error("{path:?}: too many outstanding i/os ({max})")]
    Busy { path: PathBuf, max: usize },
}

impl IoError {
    /// Negative result code for clients (sanlock uses -EIO style codes and AIO_TIMEOUT).
    pub fn rv(&self) -> i32 {
        match self {
            IoError::Open { source, .. } | IoError::Failed { source, .. } => {
                -source.raw_os_error().unwrap_or(libc::EIO)
            }
            IoError::Timeout { .. } => disk_format::rv::SANLK_AIO_TIMEOUT,
            IoError::Unaligned { .. } => -libc::EINVAL,
            IoError::Busy { .. } => disk_format::rv::SANLK_AIO_TIMEOUT,
        }
    }
}

/// A page-aligned, zero-initialised buffer (made without `unsafe` by over-allocating).
#[derive(Debug)]
pub struct AlignedBuf {
    storage: Vec<u8>,
    start: usize,
    len: usize,
}

impl AlignedBuf {
    pub fn zeroed(len: usize) -> AlignedBuf {
        let storage = vec![0u8; len + PAGE];
        let start = storage.as_ptr().align_offset(PAGE);
        assert!(start < PAGE, "align_offset of a u8 pointer is computable");
        AlignedBuf {
            storage,
            start,
            len,
        }
    }

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

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// An open lease device or file.
#[derive(Clone)]
pub struct Disk {
    inner: Arc<DiskInner>,
}

struct DiskInner {
    path: PathBuf,
    file: Arc<File>,
    sector_size: u32,
    io_block: u32,
    size: u64,
    inflight: Arc<AtomicUsize>,
    engine: Option<Arc<UringEngine>>,
}

/// Which I/O engine a disk uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EngineKind {
    /// One worker thread per I/O.
    Threads,
    /// The shared io_uring ring (resource I/O).
    SharedRing,
    /// A ring of its own (a lockspace's renewals).
    OwnRing,
}

fn threads_forced() -> bool {
    std::env::var("LOCKD_IO_ENGINE").is_ok_and(|v| v == "threads")
}

fn shared_ring() -> Option<Arc<UringEngine>> {
    static SHARED: OnceLock<Option<Arc<UringEngine>>> = OnceLock::new();
    SHARED
        .get_or_init(|| match UringEngine::new("shared") {
            Ok(e) => Some(Arc::new(e)),
            Err(e) => {
                tracing::warn!(error = %e, "io_uring unavailable; using worker threads for i/o");
                None
            }
        })
        .clone()
}

type Completion = crate::sys::uring::Completion;

/// An I/O that did not finish within its timeout; its buffer stays with the worker.
pub struct Pending {
    rx: Receiver<Completion>,
    disk: Disk,
    op: &'static str,
    offset: u64,
}

impl Pending {
    /// Waits up to `timeout` more for the I/O.
    pub fn wait(self, timeout: Duration) -> Result<Result<AlignedBuf, IoError>, Pending> {
        match self.rx.recv_timeout(timeout) {
            Ok((Ok(()), buf)) => Ok(Ok(buf)),
            Ok((Err(source), _buf)) => Ok(Err(IoError::Failed {
                path: self.disk.inner.path.clone(),
                op: self.op,
                offset: self.offset,
                source,
            })),
            Err(RecvTimeoutError::Timeout) => Err(self),
            Err(RecvTimeoutError::Disconnected) => Ok(Err(IoError::Failed {
                path: self.disk.inner.path.clone(),
                op: self.op,
                offset: self.offset,
                source: io::Error::other("i/o worker vanished"),
            })),
        }
    }
}

impl Disk {
    /// Opens read-write with O_DIRECT | O_SYNC, on the shared ring (or worker threads).
    pub fn open(path: &Path) -> Result<Disk, IoError> {
        Disk::open_with(path, EngineKind::SharedRing)
    }

    /// Opens with a chosen engine; ring engines fall back to worker threads when io_uring
    /// is unavailable or `LOCKD_IO_ENGINE=threads`.
    pub fn open_with(path: &Path, kind: EngineKind) -> Result<Disk, IoError> {
        let engine = if threads_forced() {
            None
        } else {
            match kind {
                EngineKind::Threads => None,
                EngineKind::SharedRing => shared_ring(),
                EngineKind::OwnRing => match UringEngine::new("ls") {
                    Ok(e) => Some(Arc::new(e)),
                    Err(_) => None,
                },
            }
        };
        let open_err = |source| IoError::Open {
            path: path.to_path_buf(),
            source,
        };
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_DIRECT | libc::O_SYNC)
            .open(path)
            .map_err(open_err)?;
        let meta = file.metadata().map_err(open_err)?;
        let (sector_size, size) = if meta.file_type().is_block_device() {
            (sys::block_logical_sector_size(&file).map_err(open_err)?, {
                use std::io::{Seek, SeekFrom};
                (&file).seek(SeekFrom::End(0)).map_err(open_err)?
            })
        } else {
            (512, meta.len())
        };
        let io_block = storage_block_size(&file).map_err(open_err)?;
        Ok(Disk {
            inner: Arc::new(DiskInner {
                path: path.to_path_buf(),
                file: Arc::new(file),
                sector_size,
                io_block,
                size,
                inflight: Arc::new(AtomicUsize::new(0)),
                engine,
            }),
        })
    }

    /// True when this disk's I/O goes through an io_uring ring.
    pub fn uses_io_uring(&self) -> bool {
        self.inner.engine.is_some()
    }

    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// The sector size formatting defaults to, as sanlock: the logical sector size of a
    /// block device, 512 for a regular file (whatever its filesystem needs).
    pub fn sector_size(&self) -> u32 {
        self.inner.sector_size
    }

    /// The unit every I/O must be aligned to (offset, length): the storage's logical
    /// block size ([`storage_block_size`]).
    pub fn io_block(&self) -> u32 {
        self.inner.io_block
    }

    /// Bytes on the device (or file length at open).
    pub fn size(&self) -> u64 {
        self.inner.size
    }

    fn check(&self, offset: u64, len: usize) -> Result<(), IoError> {
        let unit = u64::from(self.inner.io_block);
        if !offset.is_multiple_of(unit) || !(len as u64).is_multiple_of(unit) || len == 0 {
            return Err(IoError::Unaligned {
                path: self.inner.path.clone(),
                offset,
                len,
                sector_size: self.inner.io_block,
            });
        }
        Ok(())
    }

    fn submit(
        &self,
        op: &'static str,
        offset: u64,
        buf: AlignedBuf,
        timeout: Duration,
    ) -> Result<Pending, IoError> {
        self.check(offset, buf.len())?;
        let n = self.inner.inflight.fetch_add(1, Ordering::SeqCst);
        if n >= MAX_INFLIGHT {
            self.inner.inflight.fetch_sub(1, Ordering::SeqCst);
            return Err(IoError::Busy {
                path: self.inner.path.clone(),
                max: MAX_INFLIGHT,
            });
        }
        if let Some(engine) = &self.inner.engine {
            let kind = if op == "read" { Op::Read } else { Op::Write };
            let target = Target {
                file: self.inner.file.clone(),
                inflight: self.inner.inflight.clone(),
            };
            let rx = engine
                .submit(kind, target, offset, buf, timeout)
                .map_err(|source| IoError::Failed {
                    path: self.inner.path.clone(),
                    op,
                    offset,
                    source,
                })?;
            return Ok(Pending {
                rx,
                disk: self.clone(),
                op,
                offset,
            });
        }
        let (tx, rx) = mpsc::sync_channel::<Completion>(1);
        let disk = self.clone();
        let worker = disk.clone();
        let spawned = crate::threads::spawn("lockd-io", move || {
            let mut buf = buf;
            let res = if op == "read" {
                worker.inner.file.read_exact_at(buf.as_mut_slice(), offset)
            } else {
                worker.inner.file.write_all_at(buf.as_slice(), offset)
            };
            worker.inner.inflight.fetch_sub(1, Ordering::SeqCst);
            // If the submitter gave up, the send fails and the buffer is dropped here,
            // after the kernel finished with it.
            let _ = tx.send((res, buf));
        });
        if let Err(source) = spawned {
            self.inner.inflight.fetch_sub(1, Ordering::SeqCst);
            return Err(IoError::Failed {
                path: self.inner.path.clone(),
                op,
                offset,
                source,
            });
        }
        Ok(Pending {
            rx,
            disk,
            op,
            offset,
        })
    }

    /// Starts a read of `len` bytes at `offset`.
    pub fn submit_read(
        &self,
        offset: u64,
        len: usize,
        timeout: Duration,
    ) -> Result<Pending, IoError> {
        self.submit("read", offset, AlignedBuf::zeroed(len), timeout)
    }

    fn finish(pending: Pending, timeout: Duration) -> Result<AlignedBuf, IoError> {
        let (path, op, offset) = (pending.disk.inner.path.clone(), pending.op, pending.offset);
        // A ring cancels the I/O itself at `timeout`; allow it a moment to report that.
        match pending.wait(timeout + Duration::from_millis(200)) {
            Ok(Err(IoError::Failed { source, .. })) if source.kind() == io::ErrorKind::TimedOut => {
                Err(IoError::Timeout {
                    path,
                    op,
                    offset,
                    timeout_ms: timeout.as_millis() as u64,
                })
            }
            Ok(r) => r,
            Err(_still_pending) => Err(IoError::Timeout {
                path,
                op,
                offset,
                timeout_ms: timeout.as_millis() as u64,
            }),
        }
    }

    /// Reads `len` bytes at `offset` within `timeout`.
    pub fn read(&self, offset: u64, len: usize, timeout: Duration) -> Result<AlignedBuf, IoError> {
        let t0 = std::time::Instant::now();
        let r = self
            .submit_read(offset, len, timeout)
            .and_then(|p| Disk::finish(p, timeout));
        record("read", t0, r.as_ref().map(|_| ()));
        r
    }

    /// Writes `data` (whole sectors) at `offset` within `timeout`.
    pub fn write(&self, offset: u64, data: &[u8], timeout: Duration) -> Result<(), IoError> {
        let t0 = std::time::Instant::now();
        let r = self
            .submit("write", offset, AlignedBuf::copy_of(data), timeout)
            .and_then(|p| Disk::finish(p, timeout).map(|_| ()));
        record("write", t0, r.as_ref().map(|_| ()));
        r
    }
}

/// Feeds one I/O's latency or failure to the metrics.
fn record(op: &'static str, t0: std::time::Instant, r: Result<(), &IoError>) {
    let outcome = match r {
        Ok(()) => Ok(()),
        Err(IoError::Timeout { .. }) => Err("timeout"),
        Err(_) => Err("error"),
    };
    crate::metrics::global().disk_io(op, t0.elapsed(), outcome);
}

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
    use std::os::unix::fs::MetadataExt;
    let meta = file.metadata()?;
    if meta.file_type().is_block_device() {
        return sys::block_logical_sector_size(file);
    }
    if let Some(n) = sysfs_logical_block_size(meta.dev()) {
        return Ok(n);
    }
    Ok(probe_block_size(file))
}

/// glibc's `major()`/`minor()` of a `dev_t`.
fn dev_major_minor(dev: u64) -> (u64, u64) {
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
    let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
    (major, minor)
}

fn valid_block(n: u32) -> bool {
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

fn probe_block_size(file: &File) -> u32 {
    let Ok(f) = file.try_clone() else {
        return 512;
    };
    let (tx, rx) = mpsc::sync_channel::<io::Result<usize>>(1);
    // The thread owns its fd and buffer, so a probe stuck in the storage is harmless.
    let spawned = crate::threads::spawn("lockd-probe", move || {
        let mut buf = AlignedBuf::zeroed(512);
        let _ = tx.send(f.read_at(buf.as_mut_slice(), 0));
    });
    if spawned.is_err() {
        return 512;
    }
    match rx.recv_timeout(Duration::from_secs(2)) {
        Ok(Err(e)) if e.raw_os_error() == Some(libc::EINVAL) => 4096,
        _ => 512,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(len: u64) -> (tempfile::TempDir, PathBuf) {
        // O_DIRECT does not work on tmpfs; /var/tmp is a real filesystem here.
        let dir = tempfile::Builder::new()
            .prefix("lockd-diskio")
            .tempdir_in("/var/tmp")
            .expect("create scratch dir under /var/tmp");
        let path = dir.path().join("disk");
        let f = File::create(&path).unwrap();
        f.set_len(len).unwrap();
        (dir, path)
    }

    #[test]
    fn direct_read_write_round_trip_threads() {
        round_trip(EngineKind::Threads);
    }

    #[test]
    fn direct_read_write_round_trip_uring() {
        let (_d, path) = scratch(1 << 20);
        let disk = Disk::open_with(&path, EngineKind::OwnRing).unwrap();
        assert!(
            disk.uses_io_uring(),
            "io_uring must be available on the test machine (kernel.io_uring_disabled = 0)"
        );
        round_trip(EngineKind::OwnRing);
    }

    #[test]
    fn uring_many_concurrent_ios() {
        let (_d, path) = scratch(1 << 20);
        let disk = Disk::open_with(&path, EngineKind::OwnRing).unwrap();
        let handles: Vec<_> = (0..32u64)
            .map(|i| {
                let disk = disk.clone();
                std::thread::spawn(move || {
                    let data = vec![i as u8; 4096];
                    disk.write(i * 4096, &data, Duration::from_secs(5)).unwrap();
                    let back = disk.read(i * 4096, 4096, Duration::from_secs(5)).unwrap();
                    assert_eq!(back.as_slice(), &data[..]);
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
    }

    fn round_trip(kind: EngineKind) {
        let (_d, path) = scratch(1 << 20);
        let disk = Disk::open_with(&path, kind).unwrap();
        assert_eq!(disk.uses_io_uring(), kind != EngineKind::Threads);
        assert_eq!(disk.sector_size(), 512);
        let data: Vec<u8> = (0..1024u32).map(|i| (i % 251) as u8).collect();
        disk.write(4096, &data, Duration::from_secs(5)).unwrap();
        let back = disk.read(4096, 1024, Duration::from_secs(5)).unwrap();
        assert_eq!(back.as_slice(), &data[..]);
        assert_eq!(back.as_slice().as_ptr() as usize % PAGE, 0);
    }

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
    fn file_on_var_tmp_has_a_block_size() {
        let (_d, path) = scratch(1 << 20);
        let disk = Disk::open(&path).unwrap();
        assert!(valid_block(disk.io_block()), "{}", disk.io_block());
        assert_eq!(disk.sector_size(), 512, "formatting default for files");
    }

    #[test]
    fn rejects_unaligned() {
        let (_d, path) = scratch(1 << 20);
        let disk = Disk::open(&path).unwrap();
        assert!(matches!(
            disk.read(100, 512, Duration::from_secs(1)),
            Err(IoError::Unaligned { .. })
        ));
        assert!(matches!(
            disk.write(0, &[0u8; 100], Duration::from_secs(1)),
            Err(IoError::Unaligned { .. })
        ));
    }

    #[test]
    fn read_past_end_fails() {
        for kind in [EngineKind::Threads, EngineKind::OwnRing] {
            let (_d, path) = scratch(1 << 20);
            let disk = Disk::open_with(&path, kind).unwrap();
            let e = disk.read(1 << 20, 512, Duration::from_secs(5)).unwrap_err();
            assert!(matches!(e, IoError::Failed { .. }), "{kind:?}: {e}");
        }
    }
}
