//! [`ParallelDisk`]: lease-core's `Disk` over a [`DirectDisk`] whose futures really wait,
//! so the disks of a lease on several disks do their I/O at the same time (lease-core's
//! `gather` polls one future per disk). Driven by [`drive`].
//!
//! Invariants:
//! - an I/O is submitted when its future is made, and its future ends with the engine's
//!   completion or, once its timeout and the ring's grace have passed, by giving the I/O
//!   up (`crate::health`: the path is then overdue until the engine sees it complete);
//!   a future dropped before it ended gives its I/O up too, so no I/O this type started
//!   is ever forgotten by its path's record;
//! - [`drive`] polls at least every [`DEADLINE_POLL`], so a deadline is noticed within
//!   that much of passing even when the engine never answers;
//! - an [`absent`](ParallelDisk::absent) disk (one the caller chose not to open) fails
//!   every I/O at once and submits nothing.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use lease_core::io::{Disk as LcDisk, IoError};

use crate::disk::{DirectDisk, DirectIoError, Pending};
use crate::lc::io_error;
use crate::observe::record;
use crate::AlignedBuf;

/// How often [`drive`] polls a waiting future for its deadline.
pub const DEADLINE_POLL: Duration = Duration::from_millis(20);

/// Runs a future over [`ParallelDisk`]s to completion on the calling thread.
pub fn drive<F: Future>(fut: F) -> F::Output {
    lease_core::exec::block_on_polling(fut, DEADLINE_POLL)
}

/// One disk of a lease for one operation: open, or absent (not opened, because its path
/// is sick: `crate::health`).
pub struct ParallelDisk {
    disk: Option<DirectDisk>,
    path: PathBuf,
}

impl ParallelDisk {
    /// An open disk.
    pub fn new(disk: DirectDisk) -> ParallelDisk {
        let path = disk.path().to_path_buf();
        ParallelDisk {
            disk: Some(disk),
            path,
        }
    }

    /// A disk not opened: every I/O fails at once.
    pub fn absent(path: &Path) -> ParallelDisk {
        ParallelDisk {
            disk: None,
            path: path.to_path_buf(),
        }
    }

    /// The open disk, if any.
    pub fn disk(&self) -> Option<&DirectDisk> {
        self.disk.as_ref()
    }

    /// Whether this disk was not opened.
    pub fn is_absent(&self) -> bool {
        self.disk.is_none()
    }

    /// Whether the disk's path is sick now (`crate::health`).
    pub fn is_sick(&self) -> bool {
        crate::health::path_is_sick(&self.path)
    }

    fn start(
        &self,
        op: &'static str,
        submit: impl FnOnce(&DirectDisk) -> Result<Pending, DirectIoError>,
    ) -> IoFuture {
        let t0 = Instant::now();
        let state = match &self.disk {
            None => State::Done(Err(IoError::Failed)),
            Some(disk) => match submit(disk) {
                Ok(pending) => State::Waiting {
                    deadline: t0 + pending.give_up_after(),
                    pending,
                },
                Err(e) => {
                    record(op, t0, Err(&e));
                    tracing::warn!(error = %e, "disk {op} failed");
                    State::Done(Err(io_error(&e)))
                }
            },
        };
        IoFuture { op, t0, state }
    }
}

enum State {
    Waiting { pending: Pending, deadline: Instant },
    Done(Result<AlignedBuf, IoError>),
    Taken,
}

/// One I/O of a [`ParallelDisk`].
pub struct IoFuture {
    op: &'static str,
    t0: Instant,
    state: State,
}

impl IoFuture {
    fn end(&mut self, r: Result<AlignedBuf, DirectIoError>) -> Result<AlignedBuf, IoError> {
        record(self.op, self.t0, r.as_ref().map(|_| ()));
        r.map_err(|e| {
            tracing::warn!(error = %e, "disk {} failed", self.op);
            io_error(&e)
        })
    }
}

impl Future for IoFuture {
    type Output = Result<AlignedBuf, IoError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let result = match std::mem::replace(&mut this.state, State::Taken) {
            State::Done(r) => r,
            State::Taken => panic!("an i/o future was polled after it ended"),
            State::Waiting {
                mut pending,
                deadline,
            } => match pending.poll_done(cx) {
                Poll::Ready(r) => this.end(r),
                Poll::Pending if Instant::now() >= deadline => {
                    let e = pending.give_up();
                    this.end(Err(e))
                }
                Poll::Pending => {
                    this.state = State::Waiting { pending, deadline };
                    return Poll::Pending;
                }
            },
        };
        Poll::Ready(result)
    }
}

impl Drop for IoFuture {
    fn drop(&mut self) {
        if let State::Waiting { pending, .. } = std::mem::replace(&mut self.state, State::Taken) {
            pending.give_up();
        }
    }
}

impl LcDisk for ParallelDisk {
    /// The engine's own page-aligned buffer, handed over without a copy.
    type Buf = AlignedBuf;

    fn read(
        &self,
        offset: u64,
        len: usize,
        timeout_ms: u64,
    ) -> impl Future<Output = Result<AlignedBuf, IoError>> {
        self.start("read", |d| {
            d.submit_read(offset, len, Duration::from_millis(timeout_ms))
        })
    }

    fn write(
        &self,
        offset: u64,
        data: &[u8],
        timeout_ms: u64,
    ) -> impl Future<Output = Result<(), IoError>> {
        let io = self.start("write", |d| {
            d.submit_write(offset, data, Duration::from_millis(timeout_ms))
        });
        async move { io.await.map(|_| ()) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::scratch;
    use crate::EngineKind;

    fn disk(kind: EngineKind) -> (tempfile::TempDir, ParallelDisk) {
        let (dir, path) = scratch(1 << 20);
        (
            dir,
            ParallelDisk::new(DirectDisk::open_with(&path, kind).unwrap()),
        )
    }

    #[test]
    fn writes_then_reads_back_on_every_engine() {
        for kind in [EngineKind::SharedRing, EngineKind::Threads] {
            let (_dir, d) = disk(kind);
            drive(d.write(4096, &[5u8; 4096], 1000)).unwrap();
            let back = drive(d.read(4096, 4096, 1000)).unwrap();
            assert!(back.iter().all(|&b| b == 5), "{kind:?}");
        }
    }

    #[test]
    fn an_absent_disk_fails_at_once_and_a_bad_offset_is_refused() {
        let d = ParallelDisk::absent(Path::new("/nonexistent/lease"));
        assert!(d.is_absent());
        assert_eq!(drive(d.read(0, 512, 1000)).unwrap_err(), IoError::Failed);
        let (_dir, d) = disk(EngineKind::SharedRing);
        assert_eq!(drive(d.read(3, 512, 1000)).unwrap_err(), IoError::Failed);
    }

    /// Two I/Os made one after the other are both in flight before either is awaited:
    /// a stuck first one does not hold up the second.
    #[test]
    fn a_stuck_io_gives_up_at_its_deadline_without_holding_up_another() {
        let (reader, _writer) = std::io::pipe().unwrap();
        let stuck = ParallelDisk::new(DirectDisk::pipe_for_test(reader));
        let (_dir, good) = disk(EngineKind::SharedRing);
        let t0 = Instant::now();
        let (a, b) = drive(async {
            let a = stuck.read(0, 512, 300);
            let b = good.read(0, 512, 300);
            let mut a = std::pin::pin!(a);
            let mut b = std::pin::pin!(b);
            let mut ra = None;
            let mut rb = None;
            std::future::poll_fn(|cx| {
                if ra.is_none() {
                    if let Poll::Ready(r) = a.as_mut().poll(cx) {
                        ra = Some((r, t0.elapsed()));
                    }
                }
                if rb.is_none() {
                    if let Poll::Ready(r) = b.as_mut().poll(cx) {
                        rb = Some((r, t0.elapsed()));
                    }
                }
                if ra.is_some() && rb.is_some() {
                    Poll::Ready(())
                } else {
                    Poll::Pending
                }
            })
            .await;
            (ra.unwrap(), rb.unwrap())
        });
        assert!(b.0.is_ok(), "the good disk's read: {:?}", b.0.err());
        assert!(b.1 < Duration::from_millis(250), "good read took {:?}", b.1);
        assert_eq!(a.0.unwrap_err(), IoError::TimedOut);
        assert!(
            a.1 >= Duration::from_millis(300) && a.1 < Duration::from_millis(1500),
            "stuck read ended after {:?}",
            a.1
        );
        assert!(stuck.is_sick(), "a timed-out path cools down");
    }
}
