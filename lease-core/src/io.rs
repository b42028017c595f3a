//! The two seams between the algorithms and the world: [`Disk`] and [`Clock`].
//!
//! Every algorithm in this crate is an `async fn` generic over these traits. The daemon
//! implements them with blocking O_DIRECT I/O and `CLOCK_MONOTONIC` and drives the futures
//! with [`crate::exec::block_on`]; the simulator implements them over one shared in-memory
//! image and virtual time, and drives many hosts' futures from one thread.
//!
//! Cancellation: dropping a future at any `.await` is always allowed and has the same effect
//! on disk as a crash of the host at that point (an issued write may or may not land).

use std::future::Future;

/// Why a disk operation did not complete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoError {
    /// The operation failed (EIO and friends). A failed write did not land.
    Failed,
    /// The operation did not complete within its timeout. A timed-out write may or may not
    /// have landed; the algorithms treat both as possible.
    TimedOut,
    /// The device refused the operation with a SCSI RESERVATION CONFLICT (`EBADE` from
    /// Linux): this host's persistent-reservation key was removed (storage fencing). A
    /// refused write did not land, and no later write of this host will while the fence
    /// stands.
    ReservationConflict,
}

/// One shared block device (or file) holding lockspace and resource areas.
///
/// Offsets are absolute byte offsets on the device and are multiples of the sector size;
/// lengths are multiples of the sector size. A write of one sector is atomic: it lands
/// entirely or not at all.
pub trait Disk {
    /// The buffer a read returns: the daemon's page-aligned I/O buffer, or a `Vec` in
    /// memory, so that a read needs no copy of its (up to 1 MiB of) data. A renewal's
    /// read is kept as it is until the host monitor has looked at it
    /// ([`crate::sectors::HostSectors`]), possibly on another thread.
    type Buf: std::ops::Deref<Target = [u8]> + Send + Sync + 'static;

    /// Reads `len` bytes at `offset`, giving up after `timeout_ms` milliseconds.
    fn read(
        &self,
        offset: u64,
        len: usize,
        timeout_ms: u64,
    ) -> impl Future<Output = Result<Self::Buf, IoError>>;

    /// Writes `data` (normally exactly one sector) at `offset`, giving up after `timeout_ms`.
    fn write(
        &self,
        offset: u64,
        data: &[u8],
        timeout_ms: u64,
    ) -> impl Future<Output = Result<(), IoError>>;
}

/// The host's monotonic clock, sleeping, and the random source for back-off.
///
/// `now_ms` must never go backwards. Lease timestamps written to disk are `now_ms() / 1000`
/// (sanlock writes `CLOCK_MONOTONIC` seconds); they are never compared across hosts.
pub trait Clock {
    /// Monotonic time in milliseconds.
    fn now_ms(&self) -> u64;

    /// Monotonic time in whole seconds.
    fn now_s(&self) -> u64 {
        self.now_ms() / 1000
    }

    /// Sleeps for `ms` milliseconds of this clock.
    fn sleep_ms(&self, ms: u64) -> impl Future<Output = ()>;

    /// A uniformly distributed value in `0..n` (0 when `n == 0`), used for sanlock's random
    /// ballot back-off. Deterministic in the simulator.
    fn random_below(&self, n: u64) -> u64;
}

impl<T: Disk + ?Sized> Disk for &T {
    type Buf = T::Buf;

    fn read(
        &self,
        offset: u64,
        len: usize,
        timeout_ms: u64,
    ) -> impl Future<Output = Result<T::Buf, IoError>> {
        (**self).read(offset, len, timeout_ms)
    }

    fn write(
        &self,
        offset: u64,
        data: &[u8],
        timeout_ms: u64,
    ) -> impl Future<Output = Result<(), IoError>> {
        (**self).write(offset, data, timeout_ms)
    }
}

impl<T: Clock + ?Sized> Clock for &T {
    fn now_ms(&self) -> u64 {
        (**self).now_ms()
    }

    fn sleep_ms(&self, ms: u64) -> impl Future<Output = ()> {
        (**self).sleep_ms(ms)
    }

    fn random_below(&self, n: u64) -> u64 {
        (**self).random_below(n)
    }
}
