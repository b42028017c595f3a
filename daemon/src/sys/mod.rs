//! The only module of the daemon that may use `unsafe`: thin wrappers over system calls,
//! made through the `nix` crate wherever it covers them (every result checked). Storage
//! I/O, its io_uring engine, BLKSSZGET and CLOCK_MONOTONIC are in lockd-diskio's own
//! `sys`. Every unsafe block has a SAFETY comment.
//!
//! Invariant: unsafe code here is limited to what no crate offers as a safe function:
//! - [`fork`] (`nix::unistd::fork` is itself unsafe: only sound while single-threaded;
//!   kept an `unsafe fn` whose callers state why the process has one thread);
//! - [`set_disposition`] (`nix::sys::signal::signal` is unsafe for every handler; only
//!   SIG_IGN and SIG_DFL are ever passed, which run no code in signal context);
//! - [`pidfd_open`] (nix 0.29 has no wrapper: a raw `syscall`, and taking ownership of
//!   the fd it returns);
//! - [`fix_malloc_mmap_threshold`] (`mallopt`: glibc's allocator tuning, wrapped by no
//!   crate);
//! - [`peer_groups`] (`SO_PEERGROUPS`: neither nix 0.29 nor libc names it; a raw
//!   getsockopt into a buffer of the size the kernel asked for);
//! - [`with_fs_creds`] (per-thread `setgroups`/`setfsgid`/`setfsuid` as raw syscalls:
//!   glibc's wrappers of setgroups change every thread of the process, which must never
//!   happen here; the calls run on a short-lived thread of their own, which ends with
//!   its credentials);
//! - [`run_as`] (`Command::pre_exec`, unsafe because the closure runs between fork and
//!   exec: it only makes three raw syscalls on data allocated before the fork).

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;

use nix::fcntl::{fcntl, FcntlArg, OFlag};

pub use lockd_core::FsCreds;
use nix::sys::signal::{SigHandler, SigSet, Signal};
use nix::unistd::Pid;

/// Credentials of the peer of a Unix stream, as recorded at connect time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerCred {
    pub pid: i32,
    pub uid: u32,
    pub gid: u32,
}

/// `SO_PEERCRED` of a connected Unix stream.
pub fn peer_cred(stream: &UnixStream) -> io::Result<PeerCred> {
    let cred = nix::sys::socket::getsockopt(stream, nix::sys::socket::sockopt::PeerCredentials)?;
    Ok(PeerCred {
        pid: cred.pid(),
        uid: cred.uid(),
        gid: cred.gid(),
    })
}

/// `SO_PEERGROUPS` (Linux 4.13): 59 in asm-generic/socket.h, which every architecture
/// Rust builds lockd for uses, but sparc (0x3d).
#[cfg(not(any(target_arch = "sparc", target_arch = "sparc64")))]
const SO_PEERGROUPS: libc::c_int = 59;
#[cfg(any(target_arch = "sparc", target_arch = "sparc64"))]
const SO_PEERGROUPS: libc::c_int = 0x3d;

/// The credential system calls with 32-bit ids: on 32-bit x86 and arm the plain
/// numbers are the old 16-bit-id calls.
#[cfg(any(target_arch = "x86", target_arch = "arm"))]
mod nr {
    pub use libc::{
        SYS_setfsgid32 as SETFSGID, SYS_setfsuid32 as SETFSUID, SYS_setgroups32 as SETGROUPS,
        SYS_setresgid32 as SETRESGID, SYS_setresuid32 as SETRESUID,
    };
}
#[cfg(not(any(target_arch = "x86", target_arch = "arm")))]
mod nr {
    pub use libc::{
        SYS_setfsgid as SETFSGID, SYS_setfsuid as SETFSUID, SYS_setgroups as SETGROUPS,
        SYS_setresgid as SETRESGID, SYS_setresuid as SETRESUID,
    };
}

/// Most supplementary groups read from a peer (the kernel's NGROUPS_MAX).
const NGROUPS_MAX: usize = 65536;

/// The supplementary groups of the peer of a Unix stream, as the kernel recorded them at
/// connect time (`SO_PEERGROUPS`), like the uid and gid of [`peer_cred`].
pub fn peer_groups(stream: &UnixStream) -> io::Result<Vec<u32>> {
    let fd = stream.as_raw_fd();
    let mut groups: Vec<libc::gid_t> = vec![0; 64];
    loop {
        let mut len = libc::socklen_t::try_from(groups.len() * size_of::<libc::gid_t>())
            .map_err(|_| io::Error::from_raw_os_error(libc::E2BIG))?;
        // SAFETY: `groups` is a live buffer of exactly `len` bytes, which the kernel fills
        // with at most `len` bytes and then sets `len` to the bytes it wrote (or, on
        // ERANGE, to the bytes it needs); `fd` is an open socket borrowed from `stream`.
        let rc = unsafe {
            libc::getsockopt(
                fd,
                libc::SOL_SOCKET,
                SO_PEERGROUPS,
                groups.as_mut_ptr().cast(),
                &mut len,
            )
        };
        let n = len as usize / size_of::<libc::gid_t>();
        if rc == 0 {
            groups.truncate(n.min(groups.len()));
            return Ok(groups);
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::ERANGE) || n <= groups.len() || n > NGROUPS_MAX {
            return Err(e);
        }
        groups.resize(n, 0);
    }
}

/// Runs `f` on a new, short-lived thread whose filesystem credentials are `creds`:
/// supplementary groups, then fsgid, then fsuid, each a raw syscall that changes that
/// thread only. From a root daemon, a non-zero fsuid also clears the thread's effective
/// filesystem capabilities (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER…), so the
/// kernel checks every path lookup and open of `f` exactly as for a process of that
/// user. The thread ends when `f` returns, and its credentials with it; no other thread
/// is ever changed. An error (the thread could not start, or a credential did not
/// take) means `f` did not run.
pub fn with_fs_creds<T: Send>(creds: &FsCreds, f: impl FnOnce() -> T + Send) -> io::Result<T> {
    std::thread::scope(|scope| {
        let worker = std::thread::Builder::new()
            .name("lockd-as-client".into())
            .stack_size(crate::threads::CLIENT_STACK_BYTES)
            .spawn_scoped(scope, move || -> io::Result<T> {
                take_fs_creds(creds)?;
                Ok(f())
            })?;
        worker
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("credential thread panicked")))
    })
}

/// Sets the calling thread's supplementary groups, fsgid and fsuid (raw syscalls: this
/// thread only), and checks that they took.
fn take_fs_creds(creds: &FsCreds) -> io::Result<()> {
    let groups: Vec<libc::gid_t> = creds.groups.clone();
    // SAFETY: setgroups reads `groups.len()` gids from a live buffer; as a raw syscall
    // (not glibc's wrapper, which signals every thread to do the same) it changes only
    // the calling thread's credentials.
    let rc = unsafe { libc::syscall(nr::SETGROUPS, groups.len(), groups.as_ptr()) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // setfsgid/setfsuid return the previous value and never fail visibly: set, then ask
    // again with an invalid id (-1 changes nothing) to read back what is in force.
    // SAFETY: setfsgid/setfsuid take an id by value and change only the calling
    // thread's filesystem credentials; they touch no memory.
    let now_gid = unsafe {
        libc::syscall(nr::SETFSGID, creds.gid);
        libc::syscall(nr::SETFSGID, u32::MAX)
    };
    // SAFETY: as above.
    let now_uid = unsafe {
        libc::syscall(nr::SETFSUID, creds.uid);
        libc::syscall(nr::SETFSUID, u32::MAX)
    };
    if u32::try_from(now_gid).ok() != Some(creds.gid)
        || u32::try_from(now_uid).ok() != Some(creds.uid)
    {
        return Err(io::Error::from_raw_os_error(libc::EPERM));
    }
    Ok(())
}

/// Makes `cmd` drop to `creds` (supplementary groups, then real/effective/saved gid,
/// then uid) in the child before it execs; a failure to drop fails the spawn.
pub fn run_as(cmd: &mut std::process::Command, creds: &FsCreds) {
    use std::os::unix::process::CommandExt;
    let groups: Vec<libc::gid_t> = creds.groups.clone();
    let (uid, gid) = (creds.uid, creds.gid);
    let drop_privileges = move || -> io::Result<()> {
        // Raw syscalls only: after fork, in the single-threaded child, they change the
        // whole process; nothing is allocated.
        // SAFETY: setgroups reads `groups.len()` gids from a buffer allocated before the
        // fork and alive for the closure's life.
        if unsafe { libc::syscall(nr::SETGROUPS, groups.len(), groups.as_ptr()) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: setresgid/setresuid take ids by value and touch no memory.
        if unsafe { libc::syscall(nr::SETRESGID, gid, gid, gid) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: as above.
        if unsafe { libc::syscall(nr::SETRESUID, uid, uid, uid) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    };
    // SAFETY: the closure runs in the child between fork and exec; it makes only raw
    // system calls (async-signal-safe) on memory allocated before the fork, takes no
    // lock and allocates nothing (io::Error::last_os_error builds a plain value).
    unsafe {
        cmd.pre_exec(drop_privileges);
    }
}

/// Takes a non-blocking exclusive POSIX write lock on the whole file (`F_SETLK`), as
/// sanlock locks its pid file. Fails with EAGAIN/EACCES when another process holds it.
pub fn lock_file(file: &File) -> io::Result<()> {
    let fl = libc::flock {
        l_type: libc::F_WRLCK as libc::c_short,
        l_whence: libc::SEEK_SET as libc::c_short,
        l_start: 0,
        l_len: 0,
        l_pid: 0,
    };
    fcntl(file.as_raw_fd(), FcntlArg::F_SETLK(&fl))?;
    Ok(())
}

/// Sends `sig` to `pid` (0 only checks that the process exists). `pid` must be positive
/// (never a process group or "all").
pub fn kill(pid: i32, sig: i32) -> io::Result<()> {
    if pid <= 0 {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    let sig = match sig {
        0 => None,
        n => Some(Signal::try_from(n)?),
    };
    nix::sys::signal::kill(Pid::from_raw(pid), sig)?;
    Ok(())
}

/// Effective uid of this process.
pub fn geteuid() -> u32 {
    nix::unistd::geteuid().as_raw()
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
    match unsafe { nix::unistd::fork() }? {
        nix::unistd::ForkResult::Child => Ok(Forked::Child),
        nix::unistd::ForkResult::Parent { child } => Ok(Forked::Parent {
            child_pid: child.as_raw(),
        }),
    }
}

/// Detaches from the terminal after a fork: new session, stdin from /dev/null, stdout and
/// stderr appended to `log`. Must run in the (single-threaded) child.
pub fn detach(log: &File) -> io::Result<()> {
    let null = std::fs::OpenOptions::new().read(true).open("/dev/null")?;
    nix::unistd::setsid()?;
    nix::unistd::dup2(null.as_raw_fd(), 0)?;
    nix::unistd::dup2(log.as_raw_fd(), 1)?;
    nix::unistd::dup2(log.as_raw_fd(), 2)?;
    Ok(())
}

/// Raises the soft RLIMIT_NOFILE to at least `want` (bounded by the hard limit) and
/// returns the soft limit now in force. systemd starts services with a soft limit of 1024,
/// fewer than two fds for each of the 1,024 client slots.
pub fn raise_nofile_limit(want: u64) -> io::Result<u64> {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    if soft >= want || soft >= hard {
        return Ok(soft);
    }
    let soft = want.min(hard);
    setrlimit(Resource::RLIMIT_NOFILE, soft, hard)?;
    Ok(soft)
}

/// Locks the process's memory, as sanlock does, so lease renewal never waits for a page-in
/// from a swap device that may sit on the very storage that stalls: every page mapped now
/// (`mlockall(MCL_CURRENT)`), then every later page as soon as it is first touched
/// (`mlockall(MCL_FUTURE | MCL_ONFAULT)`; without MCL_CURRENT that call leaves the
/// current mappings locked). MCL_ONFAULT keeps a new thread stack or malloc arena from
/// becoming resident whole: only the pages used are locked. Fails with EPERM/ENOMEM
/// without CAP_IPC_LOCK when RLIMIT_MEMLOCK is smaller than the process.
pub fn lock_memory() -> io::Result<()> {
    use nix::sys::mman::{mlockall, MlockAllFlags};
    mlockall(MlockAllFlags::MCL_CURRENT)?;
    // nix 0.29 names no MCL_ONFAULT (Linux 4.4); the bits go through unchanged.
    mlockall(MlockAllFlags::from_bits_retain(
        libc::MCL_FUTURE | libc::MCL_ONFAULT,
    ))?;
    Ok(())
}

/// Fixes glibc's mmap threshold at its default, 128 KiB. Left dynamic, glibc raises it
/// to the size of the first large buffer freed (a 1 MiB lease-area read), after which such
/// buffers come from the per-thread arenas and stay resident there; under MCL_FUTURE
/// every arena then keeps megabytes locked. Fixed, a large buffer is mapped for its I/O
/// and unmapped when freed. Returns false if glibc refused.
pub fn fix_malloc_mmap_threshold() -> bool {
    // SAFETY: mallopt only sets an allocator parameter (glibc takes the arena lock);
    // M_MMAP_THRESHOLD with a value in range has no other effect.
    unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024) == 1 }
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
    nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)?;
    set_disposition(Signal::SIGCHLD, SigHandler::SigDfl)
}

/// Sets a signal's disposition to SIG_IGN or SIG_DFL (no handler code), checked.
fn set_disposition(sig: Signal, action: SigHandler) -> io::Result<()> {
    if !matches!(action, SigHandler::SigIgn | SigHandler::SigDfl) {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    // SAFETY: SIG_IGN and SIG_DFL (checked just above) install no handler code, so no
    // Rust runs in signal context; nix marks `signal` unsafe only for real handlers.
    unsafe { nix::sys::signal::signal(sig, action) }?;
    Ok(())
}

/// The set SIGTERM, SIGINT, SIGHUP.
fn shutdown_signal_set() -> SigSet {
    let mut set = SigSet::empty();
    for sig in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP] {
        set.add(sig);
    }
    set
}

/// Makes an fd non-blocking.
pub fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    let flags = fcntl(fd, FcntlArg::F_GETFL)?;
    let flags = OFlag::from_bits_retain(flags) | OFlag::O_NONBLOCK;
    fcntl(fd, FcntlArg::F_SETFL(flags))?;
    Ok(())
}

/// Blocks SIGTERM/SIGINT/SIGHUP in the calling thread (and threads it later starts), so
/// a dedicated thread can take them with [`wait_signal`].
pub fn block_signals() -> io::Result<()> {
    shutdown_signal_set().thread_block()?;
    Ok(())
}

/// Waits for one of the signals blocked by [`block_signals`]; returns its number.
pub fn wait_signal() -> io::Result<i32> {
    Ok(shutdown_signal_set().wait()? as i32)
}

/// Ignores SIGPIPE so writes to closed sockets return EPIPE instead of killing us.
pub fn ignore_sigpipe() -> io::Result<()> {
    set_disposition(Signal::SIGPIPE, SigHandler::SigIgn)
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

/// Waits up to `timeout_ms` for a pidfd to become readable (its process exited). The
/// daemon itself watches pidfds in the reactor's epoll set; this is for tests.
#[cfg(test)]
pub fn pidfd_wait(fd: &std::os::fd::OwnedFd, timeout_ms: i32) -> io::Result<bool> {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    use std::os::fd::AsFd;
    let timeout = PollTimeout::try_from(timeout_ms)
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let mut fds = [PollFd::new(fd.as_fd(), PollFlags::POLLIN)];
    match poll(&mut fds, timeout) {
        Ok(n) => Ok(n > 0),
        Err(nix::errno::Errno::EINTR) => Ok(false),
        Err(e) => Err(e.into()),
    }
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
            let cur = SigSet::thread_get_mask().expect("thread mask");
            for sig in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP] {
                assert!(cur.contains(sig), "signal {sig}");
            }
            // raise(3) in a threaded process signals the calling thread, where SIGHUP is
            // blocked: it stays pending on this thread until sigwait takes it.
            nix::sys::signal::raise(Signal::SIGHUP).expect("raise");
            assert_eq!(wait_signal().expect("wait_signal"), libc::SIGHUP);
        })
        .join()
        .expect("signal thread");
    }

    #[test]
    fn ignoring_sigpipe_is_checked() {
        ignore_sigpipe().expect("ignore_sigpipe");
        assert!(
            set_disposition(Signal::SIGKILL, SigHandler::SigIgn).is_err(),
            "SIGKILL cannot be ignored"
        );
    }

    #[test]
    fn kill_refuses_groups_and_checks_the_signal() {
        assert!(kill(0, 0).is_err());
        assert!(kill(-1, 0).is_err());
        assert!(kill(i32::try_from(std::process::id()).unwrap(), 0).is_ok());
        assert!(kill(i32::try_from(std::process::id()).unwrap(), 12345).is_err());
    }

    #[test]
    fn peer_cred_of_a_socketpair_is_this_process() {
        let (a, _b) = UnixStream::pair().expect("socketpair");
        let c = peer_cred(&a).expect("peer_cred");
        assert_eq!(c.pid, i32::try_from(std::process::id()).unwrap());
        assert_eq!(c.uid, geteuid());
    }

    #[test]
    fn peer_groups_of_a_socketpair_are_this_process_groups() {
        let (a, _b) = UnixStream::pair().expect("socketpair");
        let mut got = peer_groups(&a).expect("SO_PEERGROUPS");
        let mut want: Vec<u32> = nix::unistd::getgroups()
            .expect("getgroups")
            .into_iter()
            .map(|g| g.as_raw())
            .collect();
        got.sort_unstable();
        want.sort_unstable();
        assert_eq!(got, want);
    }

    /// The credential thread opens as the given user (a root-only file is EACCES, one of
    /// the user's group readable), and no other thread of the process is changed.
    #[test]
    fn fs_creds_apply_to_the_credential_thread_only() {
        assert!(
            geteuid() == 0,
            "this test needs root (it changes fs credentials)"
        );
        let dir = tempfile::tempdir().expect("tempdir");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let secret = dir.path().join("secret");
        std::fs::write(&secret, b"root only").unwrap();
        std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
        let shared = dir.path().join("shared");
        std::fs::write(&shared, b"group 4242").unwrap();
        std::os::unix::fs::chown(&shared, Some(0), Some(4242)).unwrap();
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o640)).unwrap();
        let nobody = FsCreds {
            uid: 65534,
            gid: 65534,
            groups: vec![4242],
        };
        let open = |p: &std::path::Path| std::fs::File::open(p).map(|_| ());
        let r = with_fs_creds(&nobody, || open(&secret)).expect("credential thread");
        assert_eq!(r.unwrap_err().raw_os_error(), Some(libc::EACCES));
        with_fs_creds(&nobody, || open(&shared))
            .expect("credential thread")
            .expect("readable through a supplementary group");
        let no_group = FsCreds {
            groups: vec![],
            ..nobody
        };
        let r = with_fs_creds(&no_group, || open(&shared)).expect("credential thread");
        assert_eq!(r.unwrap_err().raw_os_error(), Some(libc::EACCES));
        // This thread (and so the process) is still root.
        open(&secret).expect("root still opens it");
        assert!(nix::unistd::getgroups()
            .unwrap()
            .iter()
            .all(|g| g.as_raw() != 4242));
    }

    #[test]
    fn pidfd_of_self_is_not_readable() {
        let fd = pidfd_open(i32::try_from(std::process::id()).unwrap()).expect("pidfd_open");
        assert!(!pidfd_wait(&fd, 0).expect("poll"));
    }
}
