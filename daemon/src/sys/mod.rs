//! The only module of the daemon that may use `unsafe`: thin wrappers over the syscalls
//! std does not expose. Every unsafe block has a SAFETY comment. (Storage I/O, its
//! io_uring engine, BLKSSZGET and CLOCK_MONOTONIC are in lockd-diskio's own `sys`.)

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;

/// Credentials of the peer of a Unix stream, as recorded at connect time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerCred {
    pub pid: i32,
    pub uid: u32,
    pub gid: u32,
}

/// `SO_PEERCRED` of a connected Unix stream.
pub fn peer_cred(stream: &UnixStream) -> io::Result<PeerCred> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `cred`, a live local of exactly
    // that size; the fd is owned by `stream` and open for the call.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(PeerCred {
        pid: cred.pid,
        uid: cred.uid,
        gid: cred.gid,
    })
}

/// Takes a non-blocking exclusive POSIX write lock on the whole file (`F_SETLK`), as
/// sanlock locks its pid file. Fails with EAGAIN/EACCES when another process holds it.
pub fn lock_file(file: &File) -> io::Result<()> {
    // SAFETY: an all-zero flock is a valid value of this plain C struct.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = libc::F_WRLCK as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = 0;
    fl.l_len = 0;
    // SAFETY: fcntl(F_SETLK) reads the flock through a pointer to a live local; the fd is
    // owned by `file` and open.
    let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETLK, &fl) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Sends `sig` to `pid`. `pid` must be positive (never a process group or "all").
pub fn kill(pid: i32, sig: i32) -> io::Result<()> {
    if pid <= 0 {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    // SAFETY: kill has no memory effects; pid > 0 addresses exactly one process.
    let rc = unsafe { libc::kill(pid, sig) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// True when a process with this pid exists (kill(pid, 0)).
pub fn pid_exists(pid: i32) -> bool {
    match kill(pid, 0) {
        Ok(()) => true,
        Err(e) => e.raw_os_error() == Some(libc::EPERM),
    }
}

/// Effective uid of this process.
pub fn geteuid() -> u32 {
    // SAFETY: geteuid cannot fail and has no memory effects.
    unsafe { libc::geteuid() }
}

/// Result of [`fork`].
pub enum Forked {
    Child,
    Parent { child_pid: i32 },
}

/// fork(2). Must be called while the process has a single thread (the daemon forks its
/// helper before starting any thread), so the child may run ordinary Rust code.
///
/// # Safety
/// The process must be single-threaded: the child gets a copy of only the calling thread,
/// so a lock (allocator, stdio, tracing) held by any other thread would stay locked in the
/// child forever. As a last line of defence this returns an error, and does not fork, when
/// /proc shows more than one thread.
pub unsafe fn fork() -> io::Result<Forked> {
    if thread_count() != 1 {
        return Err(io::Error::other(
            "refusing to fork a multi-threaded process",
        ));
    }
    // SAFETY: the caller guarantees (and we checked) the process is single-threaded, so
    // the child inherits a consistent copy of every lock and allocator state.
    let rc = unsafe { libc::fork() };
    match rc {
        -1 => Err(io::Error::last_os_error()),
        0 => Ok(Forked::Child),
        pid => Ok(Forked::Parent { child_pid: pid }),
    }
}

/// Detaches from the terminal after a fork: new session, stdin from /dev/null, stdout and
/// stderr appended to `log`. Must run in the (single-threaded) child.
pub fn detach(log: &File) -> io::Result<()> {
    let null = std::fs::OpenOptions::new().read(true).open("/dev/null")?;
    // SAFETY: setsid and dup2 only change process attributes and the fd table; both
    // source fds are open for the duration of the calls.
    unsafe {
        if libc::setsid() < 0 {
            return Err(io::Error::last_os_error());
        }
        if libc::dup2(null.as_raw_fd(), 0) < 0
            || libc::dup2(log.as_raw_fd(), 1) < 0
            || libc::dup2(log.as_raw_fd(), 2) < 0
        {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Raises the soft RLIMIT_NOFILE to at least `want` (bounded by the hard limit) and
/// returns the soft limit now in force. systemd starts services with a soft limit of 1024,
/// fewer than two fds for each of the 1,024 client slots.
pub fn raise_nofile_limit(want: u64) -> io::Result<u64> {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit through a pointer to a live local.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) } != 0 {
        return Err(io::Error::last_os_error());
    }
    if rl.rlim_cur >= want || rl.rlim_cur >= rl.rlim_max {
        return Ok(rl.rlim_cur);
    }
    rl.rlim_cur = want.min(rl.rlim_max);
    // SAFETY: setrlimit reads one rlimit through a pointer to a live local.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &rl) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(rl.rlim_cur)
}

/// Number of threads of this process (from /proc), to assert the fork precondition.
pub fn thread_count() -> usize {
    std::fs::read_dir("/proc/self/task")
        .map(|d| d.count())
        .unwrap_or(1)
}

/// In the helper child: die with SIGKILL when the parent (daemon) dies, and keep
/// SIGCHLD at its default, so the helper can wait for the killpath programs it starts
/// (to report their exit status) and the programs, which inherit the disposition, can
/// wait for theirs (an ignored SIGCHLD makes every wait fail with ECHILD). An error
/// means the helper could outlive the daemon: the caller must not go on.
pub fn helper_child_setup() -> io::Result<()> {
    // SAFETY: prctl(PR_SET_PDEATHSIG) only sets a process attribute; its arguments are
    // plain integers.
    let rc = unsafe {
        libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    set_disposition(libc::SIGCHLD, libc::SIG_DFL)
}

/// signal(2) with SIG_IGN or SIG_DFL, its result checked.
fn set_disposition(sig: libc::c_int, action: libc::sighandler_t) -> io::Result<()> {
    debug_assert!(action == libc::SIG_IGN || action == libc::SIG_DFL);
    // SAFETY: SIG_IGN and SIG_DFL install no handler code, so no Rust runs in signal
    // context.
    let old = unsafe { libc::signal(sig, action) };
    if old == libc::SIG_ERR {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The set SIGTERM, SIGINT, SIGHUP, every call checked.
fn shutdown_signal_set() -> io::Result<libc::sigset_t> {
    // SAFETY: sigset_t is plain data, and all zeros is a valid value for sigemptyset to
    // initialise.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: sigemptyset/sigaddset write only into the live local `set`.
    let rc = unsafe { libc::sigemptyset(&mut set) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
        // SAFETY: as above.
        if unsafe { libc::sigaddset(&mut set, sig) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(set)
}

/// Makes an fd non-blocking.
pub fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: F_GETFL/F_SETFL only change file status flags of an fd we own.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above.
    let rc = unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Blocks SIGTERM/SIGINT/SIGHUP in the calling thread (and threads it later starts), so
/// a dedicated thread can take them with [`wait_signal`].
pub fn block_signals() -> io::Result<()> {
    let set = shutdown_signal_set()?;
    // SAFETY: pthread_sigmask reads the initialised local set and only changes this
    // thread's mask; the old mask is not asked for (null).
    let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    if rc != 0 {
        // pthread_sigmask returns the error number instead of setting errno.
        return Err(io::Error::from_raw_os_error(rc));
    }
    Ok(())
}

/// Waits for one of the signals blocked by [`block_signals`]; returns its number.
pub fn wait_signal() -> io::Result<i32> {
    let set = shutdown_signal_set()?;
    let mut sig: libc::c_int = 0;
    // SAFETY: sigwait reads the initialised local set and writes one c_int into a live
    // local.
    let rc = unsafe { libc::sigwait(&set, &mut sig) };
    if rc != 0 {
        // sigwait returns the error number instead of setting errno.
        return Err(io::Error::from_raw_os_error(rc));
    }
    Ok(sig)
}

/// Ignores SIGPIPE so writes to closed sockets return EPIPE instead of killing us.
pub fn ignore_sigpipe() -> io::Result<()> {
    set_disposition(libc::SIGPIPE, libc::SIG_IGN)
}

/// `pidfd_open(2)`: a file descriptor that becomes readable when process `pid` exits.
/// ESRCH when no such process exists.
pub fn pidfd_open(pid: i32) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: pidfd_open takes a pid and flags by value and returns a new fd or -1; it has
    // no memory effects in this process.
    let rc = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = i32::try_from(rc).map_err(|_| io::Error::other("pidfd out of range"))?;
    // SAFETY: `fd` was just returned by the kernel as a new descriptor that nothing else
    // owns.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
}

/// Waits up to `timeout_ms` for a pidfd to become readable (its process exited).
pub fn pidfd_wait(fd: &std::os::fd::OwnedFd, timeout_ms: i32) -> io::Result<bool> {
    use std::os::fd::AsRawFd;
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: poll reads and writes exactly one pollfd, a live local, for the call.
    let rc = unsafe { libc::poll(&mut p, 1, timeout_ms) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(false);
        }
        return Err(e);
    }
    Ok(rc > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// block_signals reports success and really blocks SIGTERM/SIGINT/SIGHUP; wait_signal
    /// then takes a pending one. Run on a thread of its own so the test harness's mask is
    /// untouched.
    #[test]
    fn signals_blocked_and_taken_with_checked_calls() {
        std::thread::spawn(|| {
            block_signals().expect("block_signals");
            // SAFETY: sigset_t is plain data; all zeros is valid before pthread_sigmask
            // fills it.
            let mut cur: libc::sigset_t = unsafe { std::mem::zeroed() };
            // SAFETY: with a null new set, pthread_sigmask only writes the current mask
            // into the live local.
            let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut cur) };
            assert_eq!(rc, 0);
            for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
                // SAFETY: sigismember only reads the initialised local set.
                assert_eq!(unsafe { libc::sigismember(&cur, sig) }, 1, "signal {sig}");
            }
            // SAFETY: pthread_kill to this very thread, with SIGHUP blocked here: it stays
            // pending on this thread until sigwait takes it.
            let rc = unsafe { libc::pthread_kill(libc::pthread_self(), libc::SIGHUP) };
            assert_eq!(rc, 0);
            assert_eq!(wait_signal().expect("wait_signal"), libc::SIGHUP);
        })
        .join()
        .expect("signal thread");
    }

    #[test]
    fn ignoring_sigpipe_is_checked() {
        ignore_sigpipe().expect("ignore_sigpipe");
        assert!(
            set_disposition(-1, libc::SIG_IGN).is_err(),
            "signal(-1) must fail"
        );
    }
}
