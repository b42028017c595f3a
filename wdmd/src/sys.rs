//! The only module of this crate with `unsafe` code: thin wrappers around the
//! few system calls std does not offer (watchdog ioctls, SO_PEERCRED,
//! CLOCK_MONOTONIC, flock, kill, signal handlers).
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};

// Linux watchdog ioctls (include/uapi/linux/watchdog.h), 'W' = 0x57, arg is `int`:
//   WDIOC_KEEPALIVE  = _IOR('W', 5, int)  -> dir READ(2)<<30 | 4<<16 | 0x57<<8 | 5
//   WDIOC_SETTIMEOUT = _IOWR('W', 6, int) -> dir RW(3)<<30   | 4<<16 | 0x57<<8 | 6
//   WDIOC_GETTIMEOUT = _IOR('W', 7, int)  -> dir READ(2)<<30 | 4<<16 | 0x57<<8 | 7
const WDIOC_KEEPALIVE: libc::c_ulong = 0x8004_5705;
const WDIOC_SETTIMEOUT: libc::c_ulong = 0xC004_5706;
const WDIOC_GETTIMEOUT: libc::c_ulong = 0x8004_5707;

/// CLOCK_MONOTONIC as (seconds, nanoseconds).
fn monotonic() -> (u64, u32) {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists on Linux.
    let rv = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    if rv != 0 {
        return (0, 0);
    }
    (
        u64::try_from(ts.tv_sec).unwrap_or(0),
        u32::try_from(ts.tv_nsec).unwrap_or(0),
    )
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
pub fn peer_pid(sock: &impl AsRawFd) -> io::Result<i32> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: the fd is a live socket borrowed from `sock`; `cred`/`len` are valid
    // out-parameters of the size we pass.
    let rv = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if rv != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(cred.pid)
}

/// Take a non-blocking exclusive flock on an open file.
pub fn flock_exclusive_nonblocking(f: &impl AsRawFd) -> io::Result<()> {
    // SAFETY: flock on a file descriptor we borrow; no memory is passed.
    let rv = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rv != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Send a signal to a pid (negative pid = process group), like kill(2).
pub fn kill(pid: i32, sig: i32) -> io::Result<()> {
    // SAFETY: kill takes plain integers and touches no memory of ours.
    let rv = unsafe { libc::kill(pid, sig) };
    if rv != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The real id of this process.
pub fn getpid() -> i32 {
    std::process::id() as i32
}

fn ioctl_int(fd: RawFd, req: libc::c_ulong, val: &mut libc::c_int) -> io::Result<()> {
    // SAFETY: all three watchdog requests used here take a pointer to one `int`,
    // which `val` is, valid for reads and writes for the duration of the call.
    let rv = unsafe { libc::ioctl(fd, req, val as *mut libc::c_int) };
    if rv < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// WDIOC_GETTIMEOUT.
pub fn wd_get_timeout(dev: &impl AsRawFd) -> io::Result<i32> {
    let mut v: libc::c_int = 0;
    ioctl_int(dev.as_raw_fd(), WDIOC_GETTIMEOUT, &mut v)?;
    Ok(v)
}

/// WDIOC_SETTIMEOUT; returns the value the driver wrote back.
pub fn wd_set_timeout(dev: &impl AsRawFd, secs: i32) -> io::Result<i32> {
    let mut v: libc::c_int = secs;
    ioctl_int(dev.as_raw_fd(), WDIOC_SETTIMEOUT, &mut v)?;
    Ok(v)
}

/// WDIOC_KEEPALIVE.
pub fn wd_keepalive(dev: &impl AsRawFd) -> io::Result<()> {
    let mut v: libc::c_int = 0;
    ioctl_int(dev.as_raw_fd(), WDIOC_KEEPALIVE, &mut v)
}

static QUIT: AtomicBool = AtomicBool::new(false);
static HUP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_quit(_sig: libc::c_int) {
    QUIT.store(true, Ordering::SeqCst);
}

extern "C" fn on_hup(_sig: libc::c_int) {
    HUP.store(true, Ordering::SeqCst);
}

fn install(sig: libc::c_int, handler: extern "C" fn(libc::c_int)) -> io::Result<()> {
    // SAFETY: a zeroed sigaction is a valid "no flags, empty mask" value; the
    // handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = handler as usize;
        sa.sa_flags = libc::SA_RESTART;
        if libc::sigemptyset(&mut sa.sa_mask) != 0 {
            return Err(io::Error::last_os_error());
        }
        if libc::sigaction(sig, &sa, std::ptr::null_mut()) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Install SIGTERM/SIGINT (quit request) and SIGHUP (reload) handlers that set flags.
pub fn install_signal_flags() -> io::Result<()> {
    install(libc::SIGTERM, on_quit)?;
    install(libc::SIGINT, on_quit)?;
    install(libc::SIGHUP, on_hup)?;
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
