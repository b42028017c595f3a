//! Every thread the daemon starts is made here, with an explicit, small stack.
//!
//! Invariant: no daemon thread is started with `std::thread::spawn` or a `Builder`
//! without a stack size. The daemon runs under `mlockall` (config `mlock`): current
//! pages, then MCL_FUTURE | MCL_ONFAULT, so a stack page is locked once touched. Small
//! stacks bound what a runaway thread can pin, and keep the 64 pool workers cheap should a
//! kernel ignore MCL_ONFAULT (before Linux 4.4), where MCL_FUTURE makes a new stack
//! resident whole: at Rust's default 2 MiB that would pin 128 MiB for workers alone.
//!
//! Sizes: measured high-water marks (the resident part of each stack mapping, from
//! /proc/PID/smaps, with `mlock = false` and 1-2 MiB stacks, after 30 clients each
//! registered, acquired, converted to shared and back, inquired and released, plus
//! STATUS, host_status and log_dump; measured when each connection had its own thread,
//! which ran the same code a pool worker runs now): client command threads 32 KiB in a
//! release build and 84 KiB in a debug build, renewal threads 16 / 40 KiB, every other
//! thread at most 12 / 16 KiB. The deepest is a worker running ACQUIRE (lease-core's paxos
//! futures driven by `block_on`, plus formatting and tracing); disk buffers are always
//! on the heap ([`lockd_diskio::AlignedBuf`]) and no thread keeps a large array on its
//! stack. Each size is twice the release measurement, and 1.5 times the debug one in
//! debug builds (which the test suite runs), rounded up to a power of two.

use std::io;
use std::thread::{Builder, JoinHandle};

/// Stack of a worker of the client pool (`pool.rs`, at most `reactor::MAX_WORKERS` = 64):
/// 64 KiB (256 KiB in debug builds, whose unoptimised frames a multi-disk acquire with a
/// failing disk and its logged error overflowed at 128 KiB), so a full pool locks 4 MiB of
/// stacks.
pub const CLIENT_STACK_BYTES: usize = if cfg!(debug_assertions) {
    256 * 1024
} else {
    64 * 1024
};

/// Stack of every other daemon thread (reactor, monitor, renewal, io_uring ring, ...):
/// few of them, so more room costs little: 128 KiB (256 KiB in debug builds).
pub const STACK_BYTES: usize = if cfg!(debug_assertions) {
    256 * 1024
} else {
    128 * 1024
};

/// Starts a named thread with the [`STACK_BYTES`] stack.
pub fn spawn<F, T>(name: impl Into<String>, f: F) -> io::Result<JoinHandle<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    Builder::new()
        .name(name.into())
        .stack_size(STACK_BYTES)
        .spawn(f)
}

/// Starts a named client-pool worker with the [`CLIENT_STACK_BYTES`] stack.
pub fn spawn_client<F, T>(name: impl Into<String>, f: F) -> io::Result<JoinHandle<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    Builder::new()
        .name(name.into())
        .stack_size(CLIENT_STACK_BYTES)
        .spawn(f)
}
