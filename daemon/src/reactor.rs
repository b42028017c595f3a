//! The event loop: one thread (`lockd-reactor`) waits in epoll on the listening socket,
//! on every client connection that is between requests, and on the pidfds of processes
//! that hold leases through `LOCKD_CMD_ACQUIRE_FOR_PID`. Work goes to the bounded worker
//! pool (`pool.rs`); an idle client costs a slot and a socket, not a thread.
//!
//! The life of a connection: accepted and given a client slot here, then *parked*
//! (registered in epoll, one-shot). When it turns readable the reactor reads what it can
//! of the 32-byte request header without blocking; a partial header is kept and the
//! connection parked again, so a client that stalls inside a header holds no worker. A
//! whole header moves the connection to a worker ([`Job::Command`]), which reads the
//! payload (each read bounded by the server's payload timeout), runs the command to its
//! end and parks the connection again. End of file or a read error moves it to a worker as
//! [`Job::Closed`], which runs the same release path a dying client's connection always
//! ran (`cmd::connection_closed`).
//!
//! Invariants:
//! - a connection is in exactly one place: parked here (armed in epoll, one-shot) or owned
//!   by the one job running its command. So a client's commands run one at a time, in
//!   order, as sanlock runs them;
//! - parking puts the connection in the table *before* re-arming it in epoll, so its next
//!   event always finds it;
//! - tokens are never reused (client slot numbers are), so a stale event cannot reach
//!   another connection;
//! - a closing connection leaves epoll before its slot is freed (the slot keeps a
//!   duplicate of the socket for the kill path and watches, and epoll follows the open
//!   file, not the descriptor).

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::net::UnixListener;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use client_lib::wire::HEADER_LEN;
use nix::errno::Errno;
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use nix::sys::socket::{recv, MsgFlags};
use tracing::{info, warn};

use crate::pool::{Pool, PoolCounts};
use crate::server::{After, Conn, RateLimit, REFUSAL_LOG_INTERVAL};
use crate::state::{lock, Daemon, Refused};
use crate::sys;

/// Most worker threads running client commands at once. Commands that wait (a synchronous
/// add_lockspace waits 2·io_timeout and more, shutdown --wait until the daemon exits)
/// hold a worker while they wait; sanlock's default is 8 such workers.
pub const MAX_WORKERS: usize = 64;

/// How often the loop wakes with nothing to do, to notice shutdown and forget pid watches
/// whose leases were released while the process lives on.
const TICK_MS: u16 = 1000;

const LISTENER_TOKEN: u64 = 0;
/// Tokens of pid watches have this bit; connection tokens do not.
const PID_TOKEN_BIT: u64 = 1 << 63;

/// Work for a pool worker.
pub(crate) enum Job {
    /// `conn` sent the whole header `header`: run the command.
    Command {
        token: u64,
        conn: Conn,
        header: [u8; HEADER_LEN],
    },
    /// The peer closed `conn` (or reading it failed).
    Closed { conn: Conn },
    /// The process of the connection-less slot `ci` exited.
    PidExited { ci: u32, pid: i32 },
}

/// A connection waiting in epoll for its next request.
struct Parked {
    conn: Conn,
    header: [u8; HEADER_LEN],
    /// Header bytes read so far.
    got: usize,
}

/// A process whose leases are held for it (no connection): its pidfd turns readable when
/// it exits.
struct PidWatch {
    ci: u32,
    pid: i32,
    pidfd: OwnedFd,
}

/// The epoll set and what its tokens name.
pub(crate) struct Reactor {
    epoll: Epoll,
    next_token: AtomicU64,
    parked: Mutex<HashMap<u64, Parked>>,
    pids: Mutex<HashMap<u64, PidWatch>>,
    /// The worker pool, once the loop runs (its counts are read live for the metrics).
    /// Its workers reach the reactor through a `Weak`, so the two do not keep each other.
    pool: OnceLock<Pool<Job>>,
}

/// What a non-blocking read of a parked connection found.
enum HeaderRead {
    Whole,
    Partial,
    Closed,
}

impl Reactor {
    pub(crate) fn new() -> io::Result<Reactor> {
        Ok(Reactor {
            epoll: Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)?,
            next_token: AtomicU64::new(LISTENER_TOKEN + 1),
            parked: Mutex::new(HashMap::new()),
            pids: Mutex::new(HashMap::new()),
            pool: OnceLock::new(),
        })
    }

    fn token(&self) -> u64 {
        self.next_token.fetch_add(1, Ordering::Relaxed) & !PID_TOKEN_BIT
    }

    fn conn_event(token: u64) -> EpollEvent {
        EpollEvent::new(
            EpollFlags::EPOLLIN | EpollFlags::EPOLLRDHUP | EpollFlags::EPOLLONESHOT,
            token,
        )
    }

    /// Registers a new connection, parked for its first request.
    fn adopt(&self, conn: Conn) -> io::Result<()> {
        let token = self.token();
        let mut parked = lock(&self.parked);
        self.epoll
            .add(conn.stream.as_fd(), Self::conn_event(token))?;
        parked.insert(
            token,
            Parked {
                conn,
                header: [0; HEADER_LEN],
                got: 0,
            },
        );
        Ok(())
    }

    /// Parks `conn` again after a command; on failure the connection is closed.
    fn park(&self, d: &Arc<Daemon>, token: u64, conn: Conn) {
        self.repark(
            d,
            token,
            Parked {
                conn,
                header: [0; HEADER_LEN],
                got: 0,
            },
        );
    }

    fn repark(&self, d: &Arc<Daemon>, token: u64, p: Parked) {
        let mut parked = lock(&self.parked);
        let armed = self
            .epoll
            .modify(p.conn.stream.as_fd(), &mut Self::conn_event(token));
        match armed {
            Ok(()) => {
                parked.insert(token, p);
            }
            Err(e) => {
                drop(parked);
                warn!(ci = p.conn.ci, error = %e, "cannot re-arm a connection; closing it");
                self.close(d, p.conn);
            }
        }
    }

    /// Takes `conn` out of epoll and runs the closed-connection path for its slot.
    fn close(&self, d: &Arc<Daemon>, conn: Conn) {
        let _ = self.epoll.delete(conn.stream.as_fd());
        let ci = conn.ci;
        drop(conn);
        crate::cmd::connection_closed(d, ci);
    }

    /// Watches `pid` (slot `ci`) through `pidfd`: when it exits, its slot is closed.
    pub(crate) fn watch_pid(&self, ci: u32, pid: i32, pidfd: OwnedFd) -> io::Result<()> {
        let token = self.token() | PID_TOKEN_BIT;
        let mut pids = lock(&self.pids);
        self.epoll
            .add(pidfd.as_fd(), EpollEvent::new(EpollFlags::EPOLLIN, token))?;
        pids.insert(token, PidWatch { ci, pid, pidfd });
        Ok(())
    }

    /// Pid watches alive (tests and status).
    pub(crate) fn watched_pids(&self) -> usize {
        lock(&self.pids).len()
    }

    /// The worker pool's counts now (None before the loop starts).
    pub(crate) fn pool_counts(&self) -> Option<PoolCounts> {
        self.pool.get().map(Pool::counts)
    }

    /// Reads what has arrived of `p`'s header without blocking.
    fn read_header(p: &mut Parked) -> HeaderRead {
        loop {
            let fd = p.conn.stream.as_raw_fd();
            match recv(fd, &mut p.header[p.got..], MsgFlags::MSG_DONTWAIT) {
                Ok(0) => return HeaderRead::Closed,
                Ok(n) => {
                    p.got += n;
                    if p.got == HEADER_LEN {
                        return HeaderRead::Whole;
                    }
                }
                Err(Errno::EINTR) => {}
                Err(Errno::EAGAIN) => return HeaderRead::Partial,
                Err(_) => return HeaderRead::Closed,
            }
        }
    }

    fn forget_released_pids(&self, d: &Daemon) {
        let mut pids = lock(&self.pids);
        pids.retain(|_, w| {
            let keep = crate::forpid::still_ours(d, w.ci, w.pid);
            if !keep {
                let _ = self.epoll.delete(w.pidfd.as_fd());
            }
            keep
        });
    }
}

/// Runs one job on a pool worker.
fn run_job(d: &Arc<Daemon>, r: &Reactor, job: Job) {
    match job {
        Job::Command {
            token,
            mut conn,
            header,
        } => match crate::server::run_command(d, &mut conn, &header) {
            After::Keep if !d.is_shutting_down() => r.park(d, token, conn),
            _ => r.close(d, conn),
        },
        Job::Closed { conn } => r.close(d, conn),
        Job::PidExited { ci, pid } => {
            if crate::forpid::still_ours(d, ci, pid) {
                info!(pid, ci, "process exited: releasing the leases held for it");
                crate::cmd::connection_closed(d, ci);
            }
        }
    }
}

/// Accepts every pending connection on the (non-blocking) listener. A connection that
/// gets no slot (table full, or its uid at its bound; see
/// [`crate::state::Clients::add`]) is closed at once.
fn accept_all(
    d: &Arc<Daemon>,
    r: &Reactor,
    listener: &UnixListener,
    refusals: &mut RateLimit,
    accept_errors: &mut RateLimit,
) {
    loop {
        let stream = match listener.accept() {
            Ok((s, _)) => s,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                if let Some(n) = accept_errors.hit(Instant::now()) {
                    warn!(error = %e, failures = n, "accept failed");
                }
                // EMFILE and the like: the next tick retries.
                return;
            }
        };
        let cred = match sys::peer_cred(&stream) {
            Ok(c) => c,
            Err(e) => {
                warn!(error = %e, "SO_PEERCRED failed; closing connection");
                continue;
            }
        };
        let clone = stream.try_clone().ok();
        let ci = match lock(&d.clients).add(stream.as_raw_fd(), cred.pid, cred.uid, clone) {
            Ok(ci) => ci,
            Err(why) => {
                if let Some(n) = refusals.hit(Instant::now()) {
                    let reason = match why {
                        Refused::Full => "client slots full",
                        Refused::UidLimit => "per-uid connection limit reached",
                    };
                    warn!(
                        pid = cred.pid,
                        uid = cred.uid,
                        refused = n,
                        interval_s = REFUSAL_LOG_INTERVAL.as_secs(),
                        "{reason}; closing connection (refused counts this and the ones not \
                         logged since the last such line)"
                    );
                }
                // Dropping `stream` here closes the connection at once.
                continue;
            }
        };
        if let Err(e) = r.adopt(Conn { stream, ci, cred }) {
            warn!(error = %e, "cannot watch a new connection; closing it");
            lock(&d.clients).slots.remove(&ci);
        }
    }
}

/// The loop: runs until shutdown, then stops the pool (running commands finish) and
/// drops the parked connections.
pub(crate) fn serve(d: Arc<Daemon>, r: Arc<Reactor>, listener: UnixListener) {
    if let Err(e) = listener.set_nonblocking(true).and_then(|()| {
        r.epoll
            .add(
                listener.as_fd(),
                EpollEvent::new(EpollFlags::EPOLLIN, LISTENER_TOKEN),
            )
            .map_err(io::Error::from)
    }) {
        // Without its listener the daemon cannot serve anyone: stop it, loudly.
        tracing::error!(error = %e, "cannot watch the listening socket; shutting down");
        d.request_shutdown();
        return;
    }
    let pool = {
        let (d, weak_r) = (d.clone(), Arc::downgrade(&r));
        Pool::new("lockd-worker", MAX_WORKERS, move |job| {
            if let Some(r) = weak_r.upgrade() {
                run_job(&d, &r, job);
            }
        })
    };
    let pool = r.pool.get_or_init(|| pool);
    let mut refusals = RateLimit::default();
    let mut accept_errors = RateLimit::default();
    let mut events = vec![EpollEvent::empty(); 64];
    let mut last_sweep = Instant::now();
    while !d.is_shutting_down() {
        let n = match r.epoll.wait(&mut events, EpollTimeout::from(TICK_MS)) {
            Ok(n) => n,
            Err(Errno::EINTR) => 0,
            Err(e) => {
                tracing::error!(error = %e, "epoll_wait failed; shutting down");
                d.request_shutdown();
                break;
            }
        };
        if d.is_shutting_down() {
            break;
        }
        for ev in &events[..n] {
            let token = ev.data();
            if token == LISTENER_TOKEN {
                accept_all(&d, &r, &listener, &mut refusals, &mut accept_errors);
            } else if token & PID_TOKEN_BIT != 0 {
                let Some(w) = lock(&r.pids).remove(&token) else {
                    continue;
                };
                let _ = r.epoll.delete(w.pidfd.as_fd());
                pool.submit(Job::PidExited {
                    ci: w.ci,
                    pid: w.pid,
                });
            } else {
                let Some(mut p) = lock(&r.parked).remove(&token) else {
                    continue;
                };
                match Reactor::read_header(&mut p) {
                    HeaderRead::Whole => pool.submit(Job::Command {
                        token,
                        conn: p.conn,
                        header: p.header,
                    }),
                    HeaderRead::Partial => r.repark(&d, token, p),
                    HeaderRead::Closed => pool.submit(Job::Closed { conn: p.conn }),
                }
            }
        }
        if last_sweep.elapsed().as_millis() >= u128::from(TICK_MS) {
            last_sweep = Instant::now();
            r.forget_released_pids(&d);
        }
    }
    pool.stop();
    lock(&r.parked).clear();
    info!("listener stopped");
}
