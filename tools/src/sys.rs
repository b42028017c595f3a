//! The only module of the `lockd` binary that may use `unsafe`: thin wrappers over the
//! two syscalls std does not expose (BLKSSZGET and CLOCK_MONOTONIC).
#![allow(unsafe_code)]

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// `BLKSSZGET`: the logical sector size of a block device.
pub fn block_logical_sector_size(file: &File) -> io::Result<u32> {
    let mut size: libc::c_int = 0;
    // SAFETY: BLKSSZGET writes one c_int through the pointer, which points to a live,
    // properly aligned local; the fd stays open for the duration of the call.
    let rc = unsafe {
        libc::ioctl(
            file.as_raw_fd(),
            libc::BLKSSZGET,
            &mut size as *mut libc::c_int,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    u32::try_from(size).map_err(|_| io::Error::other("negative sector size from BLKSSZGET"))
}

/// Whole seconds of CLOCK_MONOTONIC, the time base of every on-disk timestamp.
pub fn monotonic_seconds() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec through a pointer to a live local.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    assert_eq!(rc, 0, "CLOCK_MONOTONIC is always available on Linux");
    u64::try_from(ts.tv_sec).unwrap_or(0)
}

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
