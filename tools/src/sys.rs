//! The only module of the `lockd` binary that may use `unsafe`: thin wrappers over the
//! syscalls std does not expose (fd flags, signal dispositions, PR_SET_PDEATHSIG, kill).
//! Storage I/O, BLKSSZGET and CLOCK_MONOTONIC are lockd-diskio's.
#![allow(unsafe_code)]

use std::io;

/// Clears FD_CLOEXEC so `fd` survives exec (the registered connection of `lockd acquire
/// -- COMMAND` must stay open in COMMAND).
pub fn clear_cloexec(fd: std::os::fd::RawFd) -> io::Result<()> {
    // SAFETY: F_GETFD/F_SETFD take and return plain integers; an invalid fd yields EBADF.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above.
    let rc = unsafe { libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Restores the default SIGPIPE action, so `lockd … | head` ends quietly like other Unix
/// tools instead of failing on a closed stdout.
pub fn restore_default_sigpipe() -> std::io::Result<()> {
    // SAFETY: setting a signal's disposition to SIG_DFL installs no handler code.
    let old = unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    if old == libc::SIG_ERR {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Makes `cmd`'s child receive SIGKILL when the process that started it dies, so a
/// command run under a lease never outlives the process that watches the lease.
pub fn kill_child_with_parent(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the forked child before exec and only calls prctl,
    // which is async-signal-safe, allocates nothing and touches no shared state.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Sends `sig` to process `pid` (ESRCH when it is gone).
pub fn send_signal(pid: u32, sig: i32) -> io::Result<()> {
    let pid = libc::pid_t::try_from(pid).map_err(|_| io::Error::from_raw_os_error(libc::ESRCH))?;
    // SAFETY: kill(2) takes plain integers; it has no memory effects in this process.
    let rc = unsafe { libc::kill(pid, sig) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Restores the default SIGCHLD action. A process started with SIGCHLD ignored (the
/// disposition survives exec) cannot wait for its children: every wait fails with
/// ECHILD. `lockd-killpath` calls this before it runs virsh or systemctl.
#[allow(dead_code)] // used by lockd-killpath only
pub fn restore_default_sigchld() -> io::Result<()> {
    // SAFETY: setting a signal's disposition to SIG_DFL installs no handler code.
    let old = unsafe { libc::signal(libc::SIGCHLD, libc::SIG_DFL) };
    if old == libc::SIG_ERR {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
