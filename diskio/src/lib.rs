//! lockd-diskio: the one O_DIRECT lease-storage I/O layer, shared by the daemon and by
//! `lockd direct`.
//!
//! * [`AlignedBuf`]: page-aligned buffers (O_DIRECT needs aligned memory);
//! * [`DirectFile`]: a device or file opened with O_DIRECT (O_SYNC when writable), with
//!   its formatting sector size, its I/O block ([`storage_block_size`]: BLKSSZGET, sysfs
//!   or a probe read) and its size — plain blocking positioned I/O, for `lockd direct`;
//! * [`DirectDisk`]: a [`DirectFile`] with an engine (io_uring with linked timeouts, or one
//!   worker thread per I/O) and a timeout on every I/O, for the daemon (and `lockd
//!   direct`'s resource-index commands);
//! * [`BlockingDisk`] and [`SystemClock`]: lease-core's `Disk` and `Clock` over a [`DirectDisk`]
//!   and CLOCK_MONOTONIC ([`monotime`], [`monotime_ms`]);
//! * [`ParallelDisk`] and [`drive`]: lease-core's `Disk` whose I/Os wait concurrently, for
//!   the disks of a lease on several disks, and the per-path record ([`health`]) of I/Os
//!   that timed out, by which such a lease skips a hung disk;
//! * [`memory`]: in-memory images that serve every [`DirectDisk`] open of a test process that
//!   installs them (the daemon running inside a test);
//! * [`set_observer`]: one process-wide hook told of every [`DirectDisk`] read and write
//!   (the daemon's metrics).
//!
//! Invariants: every offset and length a [`DirectDisk`] submits is a multiple of the storage's
//! I/O block (checked before submit; a [`DirectFile`]'s callers check their own, as
//! `lockd direct` does with its own messages); a buffer handed to the kernel is owned by
//! the engine until the kernel is done with it, even when the caller timed out; nothing
//! is cached across opens. All `unsafe` lives in the private `sys` module (BLKSSZGET,
//! clock_gettime, io_uring submission); the rest of the crate denies it. This crate
//! depends on no other lockd crate but `disk-format` (result codes) and `lease-core`
//! (the traits it implements).
#![deny(unsafe_code)]

mod blocksize;
mod buf;
mod disk;
mod file;
pub mod health;
mod lc;
pub mod memory;
mod observe;
mod parallel;
#[allow(unsafe_code)]
mod sys;

pub use blocksize::storage_block_size;
pub use buf::AlignedBuf;
pub use disk::{DirectDisk, DirectIoError, EngineKind, Pending, MAX_INFLIGHT};
pub use file::{open_direct, Access, DirectFile, OpenError, OpenStep};
pub use lc::{BlockingDisk, SystemClock};
pub use observe::{set_observer, IoObserver};
pub use parallel::{drive, IoFuture, ParallelDisk, DEADLINE_POLL};

/// Stack of the threads this crate starts (io_uring rings, per-I/O workers of the thread
/// engine, block-size probes): 128 KiB (256 KiB in debug builds). The daemon runs under
/// `mlockall` with MCL_FUTURE, where a thread's whole stack mapping is resident, so the
/// size is what each thread costs; these threads keep buffers on the heap and need few
/// KiB of stack (see the daemon's `threads` module for the measurements).
pub const IO_THREAD_STACK_BYTES: usize = if cfg!(debug_assertions) {
    256 * 1024
} else {
    128 * 1024
};

/// Starts a named thread with the [`IO_THREAD_STACK_BYTES`] stack.
pub(crate) fn spawn_thread<F, T>(
    name: impl Into<String>,
    f: F,
) -> std::io::Result<std::thread::JoinHandle<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    std::thread::Builder::new()
        .name(name.into())
        .stack_size(IO_THREAD_STACK_BYTES)
        .spawn(f)
}
pub use sys::{monotime, monotime_ms};

#[cfg(test)]
mod test_support {
    use std::path::PathBuf;

    /// A `len`-byte file in a fresh directory under /var/tmp (O_DIRECT does not work on
    /// tmpfs; /var/tmp is a real filesystem here).
    pub(crate) fn scratch(len: u64) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::Builder::new()
            .prefix("lockd-diskio")
            .tempdir_in("/var/tmp")
            .expect("create scratch dir under /var/tmp");
        let path = dir.path().join("disk");
        let f = std::fs::File::create(&path).unwrap();
        f.set_len(len).unwrap();
        (dir, path)
    }
}
