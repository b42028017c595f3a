//! The only module of this crate with `unsafe` code: thin wrappers around system calls,
//! made through `nix` and `signal-hook` wherever they cover them (every result checked).
//!
//! Invariant: the only unsafe code left is the watchdog ioctls (WDIOC_GETTIMEOUT,
//! WDIOC_SETTIMEOUT, WDIOC_KEEPALIVE): nix's `ioctl_read!`/`ioctl_readwrite!` build the
//! request numbers from the kernel's `_IOR`/`_IOWR` encoding, but the functions they
//! generate are unsafe, as the kernel cannot check the argument's type. Each call passes
//! a pointer to one live `c_int`, the type these requests take.
#![allow(unsafe_code)]

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock};

use nix::fcntl::{Flock, FlockArg};

// Linux watchdog ioctls (include/uapi/linux/watchdog.h), 'W', argument `int`.
nix::ioctl_read!(wdioc_keepalive, b'W', 5, libc::c_int);
nix::ioctl_readwrite!(wdioc_settimeout, b'W', 6, libc::c_int);
nix::ioctl_read!(wdioc_gettimeout, b'W', 7, libc::c_int);

/// CLOCK_MONOTONIC as (seconds, nanoseconds).
fn monotonic() -> (u64, u32) {
    match nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC) {
        Ok(ts) => (
            u64::try_from(ts.tv_sec()).unwrap_or(0),
            u32::try_from(ts.tv_nsec()).unwrap_or(0),
        ),
        Err(_) => (0, 0),
    }
}

/// CLOCK_MONOTONIC in whole seconds, the unit of the wdmd protocol.
pub fn monotime() -> u64 {
    monotonic().0
}

/// CLOCK_MONOTONIC in seconds with fractions (for logs and state files).
pub fn monotime_f64() -> f64 {
    let (s, ns) = monotonic();
    s as f64 + f64::from(ns) / 1e9
}

/// The pid of the peer of a connected unix socket (SO_PEERCRED).
pub fn peer_pid(sock: &impl std::os::fd::AsFd) -> io::Result<i32> {
    let cred = nix::sys::socket::getsockopt(sock, nix::sys::socket::sockopt::PeerCredentials)?;
    Ok(cred.pid())
}

/// Take a non-blocking exclusive flock on an open file; the lock lasts as long as the
/// returned value. On failure the file comes back with the error (EWOULDBLOCK when
/// another process holds the lock).
pub fn flock_exclusive_nonblocking(f: File) -> Result<Flock<File>, (File, io::Error)> {
    Flock::lock(f, FlockArg::LockExclusiveNonblock).map_err(|(f, e)| (f, e.into()))
}

/// Send a signal to a pid (negative pid = process group), like kill(2).
pub fn kill(pid: i32, sig: i32) -> io::Result<()> {
    let sig = match sig {
        0 => None,
        n => Some(nix::sys::signal::Signal::try_from(n)?),
    };
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig)?;
    Ok(())
}

/// The real id of this process.
pub fn getpid() -> i32 {
    std::process::id() as i32
}

/// WDIOC_GETTIMEOUT.
pub fn wd_get_timeout(dev: &impl AsRawFd) -> io::Result<i32> {
    let mut v: libc::c_int = 0;
    // SAFETY: WDIOC_GETTIMEOUT writes one `int` through the pointer, which points to a
    // live local; the fd is borrowed from `dev` and open for the call.
    unsafe { wdioc_gettimeout(dev.as_raw_fd(), &mut v) }?;
    Ok(v)
}

/// WDIOC_SETTIMEOUT; returns the value the driver wrote back.
pub fn wd_set_timeout(dev: &impl AsRawFd, secs: i32) -> io::Result<i32> {
    let mut v: libc::c_int = secs;
    // SAFETY: WDIOC_SETTIMEOUT reads and writes back one `int` through the pointer, which
    // points to a live local; the fd is borrowed from `dev` and open for the call.
    unsafe { wdioc_settimeout(dev.as_raw_fd(), &mut v) }?;
    Ok(v)
}

/// WDIOC_KEEPALIVE.
pub fn wd_keepalive(dev: &impl AsRawFd) -> io::Result<()> {
    let mut v: libc::c_int = 0;
    // SAFETY: WDIOC_KEEPALIVE is declared `_IOR(.., int)`; drivers ignore the argument or
    // write one `int`, and the pointer points to a live local; the fd is borrowed from
    // `dev` and open for the call.
    unsafe { wdioc_keepalive(dev.as_raw_fd(), &mut v) }?;
    Ok(())
}

static QUIT: LazyLock<Arc<AtomicBool>> = LazyLock::new(|| Arc::new(AtomicBool::new(false)));
static HUP: LazyLock<Arc<AtomicBool>> = LazyLock::new(|| Arc::new(AtomicBool::new(false)));

/// Install SIGTERM/SIGINT (quit request) and SIGHUP (reload) handlers that set flags
/// (signal-hook: the handlers only store to an atomic, with SA_RESTART).
pub fn install_signal_flags() -> io::Result<()> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    signal_hook::flag::register(SIGTERM, Arc::clone(&QUIT))?;
    signal_hook::flag::register(SIGINT, Arc::clone(&QUIT))?;
    signal_hook::flag::register(SIGHUP, Arc::clone(&HUP))?;
    Ok(())
}

/// True once SIGTERM or SIGINT arrived.
pub fn quit_requested() -> bool {
    QUIT.load(Ordering::SeqCst)
}

/// True once if SIGHUP arrived since the last call.
pub fn take_hup() -> bool {
    HUP.swap(false, Ordering::SeqCst)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The request numbers nix computes are the kernel's (`_IOR('W', 5, int)` etc.).
    #[test]
    fn watchdog_request_numbers() {
        assert_eq!(nix::request_code_read!(b'W', 5, 4), 0x8004_5705);
        assert_eq!(nix::request_code_readwrite!(b'W', 6, 4), 0xC004_5706);
        assert_eq!(nix::request_code_read!(b'W', 7, 4), 0x8004_5707);
    }

    #[test]
    fn flock_is_exclusive_between_open_files() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("pid");
        let a = File::create(&p).unwrap();
        let held = flock_exclusive_nonblocking(a).expect("first lock");
        let b = File::open(&p).unwrap();
        let (_, e) = flock_exclusive_nonblocking(b).expect_err("second lock");
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        drop(held);
        let c = File::open(&p).unwrap();
        assert!(flock_exclusive_nonblocking(c).is_ok());
    }
}
