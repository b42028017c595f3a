//! The only module of the `lockd` binaries that may use `unsafe`: thin wrappers over
//! system calls, made through `nix` wherever it covers them (every result checked).
//! Storage I/O, BLKSSZGET and CLOCK_MONOTONIC are lockd-diskio's.
//!
//! Invariant: the unsafe code left is what no crate offers as a safe function:
//! - restoring SIG_DFL (`nix::sys::signal::signal` is unsafe for every handler; SIG_DFL
//!   runs no code in signal context);
//! - `Command::pre_exec` (std marks it unsafe: the closure runs between fork and exec,
//!   where only async-signal-safe calls are allowed; ours makes one prctl);
//! - `pidfd_open(2)` (nix 0.29 has no wrapper: a raw `syscall`, then ownership of the
//!   new descriptor).
#![allow(unsafe_code)]

use std::io;

use nix::sys::signal::{SigHandler, Signal};

/// Clears FD_CLOEXEC so `fd` survives exec (the registered connection of `lockd acquire
/// -- COMMAND` must stay open in COMMAND).
pub fn clear_cloexec(fd: std::os::fd::RawFd) -> io::Result<()> {
    use nix::fcntl::{fcntl, FcntlArg, FdFlag};
    let flags = FdFlag::from_bits_retain(fcntl(fd, FcntlArg::F_GETFD)?);
    fcntl(fd, FcntlArg::F_SETFD(flags - FdFlag::FD_CLOEXEC))?;
    Ok(())
}

/// Sets `sig` back to its default action, checked.
fn restore_default(sig: Signal) -> io::Result<()> {
    // SAFETY: SIG_DFL installs no handler code, so no Rust runs in signal context; nix
    // marks `signal` unsafe only for real handlers.
    unsafe { nix::sys::signal::signal(sig, SigHandler::SigDfl) }?;
    Ok(())
}

/// Restores the default SIGPIPE action, so `lockd … | head` ends quietly like other Unix
/// tools instead of failing on a closed stdout.
pub fn restore_default_sigpipe() -> io::Result<()> {
    restore_default(Signal::SIGPIPE)
}

/// Makes `cmd`'s child receive SIGKILL when the process that started it dies, so a
/// command run under a lease never outlives the process that watches the lease.
pub fn kill_child_with_parent(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the forked child before exec and only calls prctl
    // (through nix, which reads errno on failure), which is async-signal-safe, allocates
    // nothing and touches no shared state.
    unsafe {
        cmd.pre_exec(|| {
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)?;
            Ok(())
        });
    }
}

/// Sends `sig` to process `pid` (ESRCH when it is gone).
pub fn send_signal(pid: u32, sig: i32) -> io::Result<()> {
    let pid = libc::pid_t::try_from(pid).map_err(|_| io::Error::from_raw_os_error(libc::ESRCH))?;
    let sig = match sig {
        0 => None,
        n => Some(Signal::try_from(n)?),
    };
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig)?;
    Ok(())
}

/// Restores the default SIGCHLD action. A process started with SIGCHLD ignored (the
/// disposition survives exec) cannot wait for its children: every wait fails with
/// ECHILD. `lockd-killpath` calls this before it runs virsh or systemctl.
#[allow(dead_code)] // used by lockd-killpath only
pub fn restore_default_sigchld() -> io::Result<()> {
    restore_default(Signal::SIGCHLD)
}

/// The pid of the process at the other end of a Unix socket (SO_PEERCRED); None when it
/// is not visible in our pid namespace (the kernel reports 0).
pub fn peer_pid(stream: &std::os::unix::net::UnixStream) -> io::Result<Option<u32>> {
    let cred = nix::sys::socket::getsockopt(stream, nix::sys::socket::sockopt::PeerCredentials)?;
    Ok(u32::try_from(cred.pid()).ok().filter(|&p| p > 0))
}

/// `pidfd_open(2)`: a descriptor that turns readable when process `pid` exits (ESRCH when
/// it is gone already). Holding it, the pid cannot name another process for us.
pub fn pidfd_open(pid: u32) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    let pid = libc::pid_t::try_from(pid).map_err(|_| io::Error::from_raw_os_error(libc::ESRCH))?;
    // SAFETY: pidfd_open takes a pid and flags by value and returns a new descriptor or
    // -1; it touches no memory of this process.
    let rc = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = i32::try_from(rc).map_err(|_| io::Error::other("pidfd out of range"))?;
    // SAFETY: `fd` was just returned by the kernel as a new descriptor nothing else owns.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
}

/// Waits up to `timeout` for `pidfd`'s process to exit; true once it has.
pub fn wait_pidfd(pidfd: &std::os::fd::OwnedFd, timeout: std::time::Duration) -> io::Result<bool> {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    use std::os::fd::AsFd;
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let ms = PollTimeout::try_from(left.min(std::time::Duration::from_secs(60)))
            .unwrap_or(PollTimeout::MAX);
        let mut fds = [PollFd::new(pidfd.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, ms) {
            Ok(0) if left.is_zero() => return Ok(false),
            Ok(0) => {}
            Ok(_) => return Ok(true),
            Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
}
