//! The only module of the `lockd` binaries that may use `unsafe`: thin wrappers over
//! system calls, made through `nix` wherever it covers them (every result checked).
//! Storage I/O, BLKSSZGET and CLOCK_MONOTONIC are lockd-diskio's.
//!
//! Invariant: the unsafe code left is what no crate offers as a safe function:
//! - restoring SIG_DFL (`nix::sys::signal::signal` is unsafe for every handler; SIG_DFL
//!   runs no code in signal context);
//! - `Command::pre_exec` (std marks it unsafe: the closure runs between fork and exec,
//!   where only async-signal-safe calls are allowed; ours makes one prctl).
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
