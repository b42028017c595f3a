//! Glue between lease-core's async algorithms and a blocking world (the daemon's threads,
//! `lockd direct`): a [`lease_core::io::Disk`] over [`crate::DirectDisk`], a
//! [`lease_core::io::Clock`] over CLOCK_MONOTONIC.
//!
//! Invariant: the futures are driven with `lease_core::exec::block_on`; they never return
//! Pending because our I/O and sleeps complete before the future is returned. Once
//! `abort` is set, every later I/O fails at once and every sleep ends within 100 ms.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lease_core::io::{Clock, Disk as LcDisk, IoError};

use crate::disk::{DirectDisk, DirectIoError};
use crate::sys;

/// A lease disk for lease-core; `abort` makes every later I/O fail at once (used to cut
/// short an add_lockspace that is being removed).
#[derive(Clone)]
pub struct BlockingDisk {
    pub disk: DirectDisk,
    pub abort: Arc<AtomicBool>,
}

impl BlockingDisk {
    /// `disk` with its own, unset, abort flag.
    pub fn new(disk: DirectDisk) -> BlockingDisk {
        BlockingDisk {
            disk,
            abort: Arc::new(AtomicBool::new(false)),
        }
    }

    fn map(e: &DirectIoError) -> IoError {
        io_error(e)
    }
}

/// lease-core's view of an I/O error.
pub(crate) fn io_error(e: &DirectIoError) -> IoError {
    match e {
        DirectIoError::Timeout { .. } | DirectIoError::Busy { .. } => IoError::TimedOut,
        // SCSI RESERVATION CONFLICT: our PR key was preempted (storage fencing).
        DirectIoError::Failed { source, .. } if source.raw_os_error() == Some(libc::EBADE) => {
            IoError::ReservationConflict
        }
        _ => IoError::Failed,
    }
}

impl LcDisk for BlockingDisk {
    /// The engine's own page-aligned buffer, handed over without a copy.
    type Buf = crate::AlignedBuf;

    fn read(
        &self,
        offset: u64,
        len: usize,
        timeout_ms: u64,
    ) -> impl Future<Output = Result<crate::AlignedBuf, IoError>> {
        let r = if self.abort.load(Ordering::SeqCst) {
            Err(IoError::Failed)
        } else {
            self.disk
                .read(offset, len, Duration::from_millis(timeout_ms))
                .map_err(|e| {
                    tracing::warn!(error = %e, "disk read failed");
                    BlockingDisk::map(&e)
                })
        };
        std::future::ready(r)
    }

    fn write(
        &self,
        offset: u64,
        data: &[u8],
        timeout_ms: u64,
    ) -> impl Future<Output = Result<(), IoError>> {
        let r = if self.abort.load(Ordering::SeqCst) {
            Err(IoError::Failed)
        } else {
            self.disk
                .write(offset, data, Duration::from_millis(timeout_ms))
                .map_err(|e| {
                    tracing::warn!(error = %e, "disk write failed");
                    BlockingDisk::map(&e)
                })
        };
        std::future::ready(r)
    }
}

/// CLOCK_MONOTONIC; sleeps end early when `abort` is set.
#[derive(Clone)]
pub struct SystemClock {
    pub abort: Arc<AtomicBool>,
    seed: Arc<AtomicU64>,
}

impl SystemClock {
    /// A clock whose sleeps end early once `abort` is set; its jitter is seeded from the
    /// time and the pid.
    pub fn new(abort: Arc<AtomicBool>) -> SystemClock {
        let seed =
            sys::monotime_ms() ^ (u64::from(std::process::id()) << 32) ^ 0x9E37_79B9_7F4A_7C15;
        SystemClock {
            abort,
            seed: Arc::new(AtomicU64::new(seed)),
        }
    }
}

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        sys::monotime_ms()
    }

    fn sleep_ms(&self, ms: u64) -> impl Future<Output = ()> {
        let mut left = ms;
        while left > 0 && !self.abort.load(Ordering::SeqCst) {
            let step = left.min(100);
            std::thread::sleep(Duration::from_millis(step));
            left -= step;
        }
        std::future::ready(())
    }

    fn random_below(&self, n: u64) -> u64 {
        if n == 0 {
            return 0;
        }
        // xorshift64*: back-off jitter only, not security.
        let mut x = self.seed.load(Ordering::Relaxed);
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.seed.store(x, Ordering::Relaxed);
        x.wrapping_mul(0x2545_F491_4F6C_DD1D) % n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed(errno: i32) -> DirectIoError {
        DirectIoError::Failed {
            path: "/dev/x".into(),
            op: "write",
            offset: 0,
            source: std::io::Error::from_raw_os_error(errno),
        }
    }

    #[test]
    fn a_reservation_conflict_is_told_apart_from_other_failures() {
        assert_eq!(
            BlockingDisk::map(&failed(libc::EBADE)),
            IoError::ReservationConflict
        );
        assert_eq!(BlockingDisk::map(&failed(libc::EIO)), IoError::Failed);
    }
}
