//! Lease storage I/O with a timeout on every I/O: a [`DirectFile`] opened read-write
//! (O_DIRECT | O_SYNC) driven by an engine.
//!
//! Engines: io_uring (default where available): each I/O is a READ/WRITE linked to a
//! LINK_TIMEOUT on a ring (see `sys::uring`). Resource I/O shares one ring driven by a
//! thread of its own; each lockspace's renewals run on a ring of their own driven by the
//! renewal thread itself ([`EngineKind::Inline`]), so client I/O never queues in front of
//! renewals and a renewal's I/O needs no hand-off to another thread. Fallback (or
//! `LOCKD_IO_ENGINE=threads`):
//! each I/O runs on its own short-lived worker thread doing one positioned
//! `pread`/`pwrite`. Either way the caller waits on a channel with a deadline.
//! Invariants:
//! - the buffer is *moved* into the worker and comes back only through the completion,
//!   so a timed-out I/O's buffer can never be reused (or freed) before the kernel is done
//!   with it — on timeout the caller gets a [`Pending`] it may keep waiting on, or drop,
//!   in which case the worker frees the buffer after the I/O completes;
//! - every offset and length is a multiple of the storage's logical block size
//!   ([`storage_block_size`](crate::storage_block_size)), checked before submit, so an
//!   I/O O_DIRECT would refuse is refused with -EINVAL before anything reaches the storage;
//! - at most [`MAX_INFLIGHT`] I/Os per disk are outstanding; beyond that submission fails
//!   at once (a hung device must not grow threads without bound);
//! - every [`DirectDisk::read`] and [`DirectDisk::write`] is reported to the observer
//!   ([`set_observer`](crate::set_observer)).

use std::future::Future;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use thiserror::Error;

use crate::buf::AlignedBuf;
use crate::file::{Access, DirectFile};
use crate::health::{self, IoTicket, PathHealth};
use crate::memory::{self, MemoryImage};
use crate::observe::record;
use crate::sys::uring::{Completion, InlineRing, Op, Target, UringEngine};

/// How much longer than an I/O's timeout its caller waits for the ring's cancellation.
const CANCEL_GRACE: Duration = Duration::from_millis(200);

/// Outstanding I/Os allowed per open disk.
pub const MAX_INFLIGHT: usize = 64;

/// I/O errors, mapped to sanlock codes at the protocol edge.
#[derive(Debug, Error)]
pub enum DirectIoError {
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

impl DirectIoError {
    /// Negative result code for clients (sanlock uses -EIO style codes and AIO_TIMEOUT).
    pub fn rv(&self) -> i32 {
        match self {
            DirectIoError::Open { source, .. } | DirectIoError::Failed { source, .. } => {
                -source.raw_os_error().unwrap_or(libc::EIO)
            }
            DirectIoError::Timeout { .. } => disk_format::rv::SANLK_AIO_TIMEOUT,
            DirectIoError::Unaligned { .. } => -libc::EINVAL,
            DirectIoError::Busy { .. } => disk_format::rv::SANLK_AIO_TIMEOUT,
        }
    }
}

/// An open lease device or file.
#[derive(Clone)]
pub struct DirectDisk {
    inner: Arc<DiskInner>,
}

struct DiskInner {
    backing: Backing,
    inflight: Arc<AtomicUsize>,
    engine: Option<Engine>,
    /// This path's record in `crate::health`.
    health: Arc<PathHealth>,
}

/// What a disk's I/O reaches: the storage, or an in-memory image in a test process
/// ([`crate::memory`]).
enum Backing {
    File(DirectFile),
    Memory(Arc<MemoryImage>),
}

/// Which I/O engine a disk uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EngineKind {
    /// One worker thread per I/O.
    Threads,
    /// The shared io_uring ring (resource I/O).
    SharedRing,
    /// A ring of its own, driven by the thread that submits (a lockspace's renewals):
    /// for a disk one thread does its I/O with; other threads' I/O on it waits for the
    /// I/O in progress.
    Inline,
}

/// A disk's io_uring engine.
enum Engine {
    /// A ring driven by a thread of its own (the shared ring).
    Thread(Arc<UringEngine>),
    /// A ring driven by the submitting thread ([`EngineKind::Inline`]).
    Inline(Box<std::sync::Mutex<InlineRing>>),
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

/// An I/O submitted and not yet taken back: its completion arrives here. Its buffer
/// stays with the engine until the I/O is done, whatever the caller does.
pub struct Pending {
    rx: oneshot::Receiver<Completion>,
    disk: DirectDisk,
    op: &'static str,
    offset: u64,
    /// The I/O's own timeout (the engine cancels it then, where it can).
    timeout: Duration,
    ticket: Arc<IoTicket>,
}

impl Pending {
    /// Waits up to `timeout` more for the I/O.
    pub fn wait(self, timeout: Duration) -> Result<Result<AlignedBuf, DirectIoError>, Pending> {
        match self.rx.recv_timeout(timeout) {
            Ok(done) => Ok(self.completed(done)),
            Err(oneshot::RecvTimeoutError::Timeout) => Err(self),
            Err(oneshot::RecvTimeoutError::Disconnected) => Ok(Err(self.vanished())),
        }
    }

    /// Polls for the completion, registering `cx`'s waker to be woken by it.
    pub fn poll_done(&mut self, cx: &mut Context<'_>) -> Poll<Result<AlignedBuf, DirectIoError>> {
        match Pin::new(&mut self.rx).poll(cx) {
            Poll::Ready(Ok(done)) => Poll::Ready(self.completed(done)),
            Poll::Ready(Err(oneshot::RecvError)) => Poll::Ready(Err(self.vanished())),
            Poll::Pending => Poll::Pending,
        }
    }

    /// The caller stops waiting: the I/O's path is overdue until the engine sees the
    /// I/O complete (`crate::health`).
    pub fn give_up(self) -> DirectIoError {
        self.ticket.give_up(self.timeout);
        self.timeout_error()
    }

    fn timeout_error(&self) -> DirectIoError {
        DirectIoError::Timeout {
            path: self.disk.path().to_path_buf(),
            op: self.op,
            offset: self.offset,
            timeout_ms: self.timeout.as_millis() as u64,
        }
    }

    /// When a caller waiting for this I/O gives up: its timeout, and a moment for a ring
    /// that cancels the I/O itself at the timeout to report that.
    pub fn give_up_after(&self) -> Duration {
        self.timeout + CANCEL_GRACE
    }

    /// The result of a completion: a cancellation at the deadline is a timeout.
    fn completed(&self, (result, buf): Completion) -> Result<AlignedBuf, DirectIoError> {
        match result {
            Ok(()) => Ok(buf),
            Err(source) if source.kind() == io::ErrorKind::TimedOut => Err(self.timeout_error()),
            Err(source) => Err(DirectIoError::Failed {
                path: self.disk.path().to_path_buf(),
                op: self.op,
                offset: self.offset,
                source,
            }),
        }
    }

    fn vanished(&self) -> DirectIoError {
        DirectIoError::Failed {
            path: self.disk.path().to_path_buf(),
            op: self.op,
            offset: self.offset,
            source: io::Error::other("i/o worker vanished"),
        }
    }
}

impl DirectDisk {
    /// Opens read-write with O_DIRECT | O_SYNC, on the shared ring (or worker threads).
    pub fn open(path: &Path) -> Result<DirectDisk, DirectIoError> {
        DirectDisk::open_with(path, EngineKind::SharedRing)
    }

    /// Opens with a chosen engine; ring engines fall back to worker threads when io_uring
    /// is unavailable or `LOCKD_IO_ENGINE=threads`.
    pub fn open_with(path: &Path, kind: EngineKind) -> Result<DirectDisk, DirectIoError> {
        DirectDisk::open_via(path, Access::ReadWrite, kind, crate::file::open_direct)
    }

    /// As [`DirectDisk::open_with`], opened with `access`, the open(2) itself done by `opener`
    /// (see [`DirectFile::open_via`]): the daemon opens a client-named path with the
    /// client's rights this way and keeps using that fd. A read-only disk fails every
    /// write. In-memory images ([`crate::memory`]) are served without calling `opener`.
    pub fn open_via(
        path: &Path,
        access: Access,
        kind: EngineKind,
        opener: impl FnOnce(&Path, Access) -> io::Result<std::fs::File>,
    ) -> Result<DirectDisk, DirectIoError> {
        if let Some(found) = memory::lookup(path) {
            let image = found.map_err(|source| DirectIoError::Open {
                path: path.to_path_buf(),
                source,
            })?;
            return Ok(DirectDisk {
                inner: Arc::new(DiskInner {
                    backing: Backing::Memory(image),
                    inflight: Arc::new(AtomicUsize::new(0)),
                    engine: None,
                    health: health::of(path),
                }),
            });
        }
        let engine = if threads_forced() {
            None
        } else {
            match kind {
                EngineKind::Threads => None,
                EngineKind::SharedRing => shared_ring().map(Engine::Thread),
                EngineKind::Inline => InlineRing::new()
                    .ok()
                    .map(|r| Engine::Inline(Box::new(std::sync::Mutex::new(r)))),
            }
        };
        let file = DirectFile::open_via(path, access, opener).map_err(|e| DirectIoError::Open {
            path: e.path,
            source: e.source,
        })?;
        Ok(DirectDisk {
            inner: Arc::new(DiskInner {
                backing: Backing::File(file),
                inflight: Arc::new(AtomicUsize::new(0)),
                engine,
                health: health::of(path),
            }),
        })
    }

    /// Tests only: a disk on the shared ring whose reads wait for the pipe's writer
    /// (forever: the ring's timeout cancels them), named by a path of its own.
    #[cfg(test)]
    pub(crate) fn pipe_for_test(reader: std::io::PipeReader) -> DirectDisk {
        static N: AtomicUsize = AtomicUsize::new(0);
        let path = PathBuf::from(format!(
            "/test/pipe-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        DirectDisk {
            inner: Arc::new(DiskInner {
                backing: Backing::File(DirectFile::pipe_for_test(reader, &path)),
                inflight: Arc::new(AtomicUsize::new(0)),
                engine: shared_ring().map(Engine::Thread),
                health: health::of(&path),
            }),
        }
    }

    /// The same open file on another engine, with an in-flight count of its own: a
    /// lockspace's disk, opened for its renewal thread ([`EngineKind::Inline`]), handed
    /// to the other threads that read it on the shared ring.
    pub fn on_engine(&self, kind: EngineKind) -> DirectDisk {
        let backing = match &self.inner.backing {
            Backing::File(f) => Backing::File(f.clone()),
            Backing::Memory(m) => Backing::Memory(m.clone()),
        };
        let engine = match (&backing, threads_forced(), kind) {
            (Backing::Memory(_), _, _) | (_, true, _) | (_, _, EngineKind::Threads) => None,
            (_, _, EngineKind::SharedRing) => shared_ring().map(Engine::Thread),
            (_, _, EngineKind::Inline) => InlineRing::new()
                .ok()
                .map(|r| Engine::Inline(Box::new(std::sync::Mutex::new(r)))),
        };
        DirectDisk {
            inner: Arc::new(DiskInner {
                backing,
                inflight: Arc::new(AtomicUsize::new(0)),
                engine,
                health: self.inner.health.clone(),
            }),
        }
    }

    /// True when this disk's I/O goes through an io_uring ring.
    pub fn uses_io_uring(&self) -> bool {
        self.inner.engine.is_some()
    }

    /// The path it was opened by.
    pub fn path(&self) -> &Path {
        match &self.inner.backing {
            Backing::File(f) => f.path(),
            Backing::Memory(m) => m.path(),
        }
    }

    /// The sector size formatting defaults to, as sanlock: the logical sector size of a
    /// block device, 512 for a regular file (whatever its filesystem needs).
    pub fn sector_size(&self) -> u32 {
        match &self.inner.backing {
            Backing::File(f) => f.sector_size(),
            Backing::Memory(m) => m.sector_size(),
        }
    }

    /// The unit every I/O must be aligned to (offset, length): the storage's logical
    /// block size ([`storage_block_size`](crate::storage_block_size)).
    pub fn io_block(&self) -> u32 {
        match &self.inner.backing {
            Backing::File(f) => f.io_block(),
            Backing::Memory(m) => m.sector_size(),
        }
    }

    /// Bytes on the device (or file length at open).
    pub fn size(&self) -> u64 {
        match &self.inner.backing {
            Backing::File(f) => f.size(),
            Backing::Memory(m) => m.size(),
        }
    }

    fn check(&self, offset: u64, len: usize) -> Result<(), DirectIoError> {
        let unit = u64::from(self.io_block());
        if !offset.is_multiple_of(unit) || !(len as u64).is_multiple_of(unit) || len == 0 {
            return Err(DirectIoError::Unaligned {
                path: self.path().to_path_buf(),
                offset,
                len,
                sector_size: self.io_block(),
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
    ) -> Result<Pending, DirectIoError> {
        self.check(offset, buf.len())?;
        let n = self.inner.inflight.fetch_add(1, Ordering::SeqCst);
        if n >= MAX_INFLIGHT {
            self.inner.inflight.fetch_sub(1, Ordering::SeqCst);
            return Err(DirectIoError::Busy {
                path: self.path().to_path_buf(),
                max: MAX_INFLIGHT,
            });
        }
        let ticket = IoTicket::new(self.inner.health.clone());
        let file = match &self.inner.backing {
            Backing::File(f) => f,
            Backing::Memory(image) => {
                return Ok(self.memory_io(image, op, offset, buf, timeout, ticket))
            }
        };
        let failed = |source| DirectIoError::Failed {
            path: self.path().to_path_buf(),
            op,
            offset,
            source,
        };
        if let Some(engine) = &self.inner.engine {
            let kind = if op == "read" { Op::Read } else { Op::Write };
            let target = Target {
                file: file.shared_file().clone(),
                inflight: self.inner.inflight.clone(),
                force_async: !file.is_block_device(),
                ticket: ticket.clone(),
            };
            let rx = match engine {
                Engine::Thread(engine) => engine
                    .submit(kind, target, offset, buf, timeout)
                    .map_err(failed)?,
                Engine::Inline(ring) => {
                    // Run to its end (or its deadline) here; the completion waits in
                    // the returned Pending, as an in-memory image's does.
                    let done = ring
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .run((kind, target, offset), buf, timeout, timeout + CANCEL_GRACE);
                    let (tx, rx) = oneshot::channel::<Completion>();
                    // The receiver is alive (it is returned below).
                    let _ = tx.send(done);
                    rx
                }
            };
            return Ok(self.pending(rx, op, offset, timeout, ticket));
        }
        let (tx, rx) = oneshot::channel::<Completion>();
        let worker = self.clone();
        let shared_file = file.shared_file().clone();
        let worker_ticket = ticket.clone();
        let spawned = crate::spawn_thread("lockd-io", move || {
            let mut buf = buf;
            let res = if op == "read" {
                shared_file.read_exact_at(buf.as_mut_slice(), offset)
            } else {
                shared_file.write_all_at(buf.as_slice(), offset)
            };
            worker.inner.inflight.fetch_sub(1, Ordering::SeqCst);
            worker_ticket.finished(false, timeout);
            // If the submitter gave up, the send fails and the buffer is dropped here,
            // after the kernel finished with it.
            let _ = tx.send((res, buf));
        });
        if let Err(source) = spawned {
            self.inner.inflight.fetch_sub(1, Ordering::SeqCst);
            return Err(failed(source));
        }
        Ok(self.pending(rx, op, offset, timeout, ticket))
    }

    /// The handle of an I/O whose completion will arrive on `rx`.
    fn pending(
        &self,
        rx: oneshot::Receiver<Completion>,
        op: &'static str,
        offset: u64,
        timeout: Duration,
        ticket: Arc<IoTicket>,
    ) -> Pending {
        Pending {
            rx,
            disk: self.clone(),
            op,
            offset,
            timeout,
            ticket,
        }
    }

    /// Runs one I/O on an in-memory image at once, on the caller's thread; the completion
    /// is waiting in the returned [`Pending`].
    fn memory_io(
        &self,
        image: &MemoryImage,
        op: &'static str,
        offset: u64,
        buf: AlignedBuf,
        timeout: Duration,
        ticket: Arc<IoTicket>,
    ) -> Pending {
        let mut buf = buf;
        let res = if op == "read" {
            image.read_at(buf.as_mut_slice(), offset)
        } else {
            image.write_at(buf.as_slice(), offset)
        };
        self.inner.inflight.fetch_sub(1, Ordering::SeqCst);
        ticket.finished(false, timeout);
        let (tx, rx) = oneshot::channel::<Completion>();
        // The receiver is alive (it is returned below).
        let _ = tx.send((res, buf));
        self.pending(rx, op, offset, timeout, ticket)
    }

    /// Starts a read of `len` bytes at `offset`.
    pub fn submit_read(
        &self,
        offset: u64,
        len: usize,
        timeout: Duration,
    ) -> Result<Pending, DirectIoError> {
        self.submit("read", offset, AlignedBuf::for_read(len), timeout)
    }

    /// Starts a write of `data` (whole sectors) at `offset`.
    pub fn submit_write(
        &self,
        offset: u64,
        data: &[u8],
        timeout: Duration,
    ) -> Result<Pending, DirectIoError> {
        self.submit("write", offset, AlignedBuf::copy_of(data), timeout)
    }

    /// Waits for `pending` until its timeout (and the ring's grace) passes, then gives it
    /// up.
    fn finish(pending: Pending) -> Result<AlignedBuf, DirectIoError> {
        let wait = pending.give_up_after();
        match pending.wait(wait) {
            Ok(r) => r,
            Err(still_pending) => Err(still_pending.give_up()),
        }
    }

    /// Reads `len` bytes at `offset` within `timeout`.
    pub fn read(
        &self,
        offset: u64,
        len: usize,
        timeout: Duration,
    ) -> Result<AlignedBuf, DirectIoError> {
        let t0 = std::time::Instant::now();
        let r = self
            .submit_read(offset, len, timeout)
            .and_then(DirectDisk::finish);
        record("read", t0, r.as_ref().map(|_| ()));
        r
    }

    /// Writes `data` (whole sectors) at `offset` within `timeout`.
    pub fn write(&self, offset: u64, data: &[u8], timeout: Duration) -> Result<(), DirectIoError> {
        let t0 = std::time::Instant::now();
        let r = self
            .submit_write(offset, data, timeout)
            .and_then(|p| DirectDisk::finish(p).map(|_| ()));
        record("write", t0, r.as_ref().map(|_| ()));
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buf::PAGE;
    use crate::test_support::scratch;

    #[test]
    fn direct_read_write_round_trip_threads() {
        round_trip(EngineKind::Threads);
    }

    #[test]
    fn direct_read_write_round_trip_uring() {
        let (_d, path) = scratch(1 << 20);
        let disk = DirectDisk::open_with(&path, EngineKind::Inline).unwrap();
        assert!(
            disk.uses_io_uring(),
            "io_uring must be available on the test machine (kernel.io_uring_disabled = 0)"
        );
        round_trip(EngineKind::Inline);
    }

    #[test]
    fn uring_many_concurrent_ios() {
        let (_d, path) = scratch(1 << 20);
        let disk = DirectDisk::open_with(&path, EngineKind::Inline).unwrap();
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
        let disk = DirectDisk::open_with(&path, kind).unwrap();
        assert_eq!(disk.uses_io_uring(), kind != EngineKind::Threads);
        assert_eq!(disk.sector_size(), 512);
        let data: Vec<u8> = (0..1024u32).map(|i| (i % 251) as u8).collect();
        disk.write(4096, &data, Duration::from_secs(5)).unwrap();
        let back = disk.read(4096, 1024, Duration::from_secs(5)).unwrap();
        assert_eq!(back.as_slice(), &data[..]);
        assert_eq!(back.as_slice().as_ptr() as usize % PAGE, 0);
    }

    #[test]
    fn file_on_var_tmp_has_a_block_size() {
        let (_d, path) = scratch(1 << 20);
        let disk = DirectDisk::open(&path).unwrap();
        assert!(
            crate::blocksize::valid_block(disk.io_block()),
            "{}",
            disk.io_block()
        );
        assert_eq!(disk.sector_size(), 512, "formatting default for files");
    }

    #[test]
    fn rejects_unaligned() {
        let (_d, path) = scratch(1 << 20);
        let disk = DirectDisk::open(&path).unwrap();
        assert!(matches!(
            disk.read(100, 512, Duration::from_secs(1)),
            Err(DirectIoError::Unaligned { .. })
        ));
        assert!(matches!(
            disk.write(0, &[0u8; 100], Duration::from_secs(1)),
            Err(DirectIoError::Unaligned { .. })
        ));
    }

    #[test]
    fn read_past_end_fails() {
        for kind in [EngineKind::Threads, EngineKind::Inline] {
            let (_d, path) = scratch(1 << 20);
            let disk = DirectDisk::open_with(&path, kind).unwrap();
            let e = disk.read(1 << 20, 512, Duration::from_secs(5)).unwrap_err();
            assert!(matches!(e, DirectIoError::Failed { .. }), "{kind:?}: {e}");
        }
    }
}
