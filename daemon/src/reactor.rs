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
//! end and parks the connection again — unless the client's next header has arrived
//! already (a pipelining client), which the same worker then runs. End of file or a read
//! error moves it to a worker as [`Job::Closed`], which runs the same release path a
//! dying client's connection always ran (`cmd::connection_closed`).
//!
//! The loop outlives a shutdown request until the last lockspace is gone: a forced
//! shutdown kills the lease holders, and only this loop sees them go (their connections
//! close, their pidfds turn readable), which releases their leases and lets the
//! lockspaces release their delta leases. Commands arriving meanwhile are answered as
//! usual: closing a connection would end its client, and release the leases of a
//! holder the shutdown could not kill.
//!
//! When `accept` fails (EMFILE), the pending connection keeps the listener readable: the
//! loop then stops watching the listener until its next tick rather than spin.
//!
//! When a connection gets no slot (the table, or its uid's share of it, is full), the
//! oldest *idle* connection of the same uid makes room: one parked for at least
//! [`IDLE_EVICT_AFTER`] since it was accepted, that has sent nothing at all (no byte
//! read, none waiting in the socket). Such a connection holds no lease and ran no
//! command, so closing it loses nothing but the slot; a uid that filled the table with
//! idle connections (root's 2,000 forgotten sockets) is still answered. A uid never
//! closes another uid's connections this way.
//!
//! Workers are shared out by uid ([`Shares`]): a non-root uid has at most
//! [`MAX_WORKERS_PER_UID`] jobs on the workers and all non-root uids together
//! [`MAX_NON_ROOT_WORKERS`]; further jobs wait here, in order. A worker may wait up to
//! the payload timeout for a client that stops in the middle of a request, so without
//! shares 64 such connections of one uid would stall every other client.
//!
//! Invariants:
//! - a connection is in exactly one place (a job waiting for its uid's share counts as
//!   owned by that job): parked here (armed in epoll, one-shot) or owned
//!   by the one job running its command. So a client's commands run one at a time, in
//!   order, as sanlock runs them;
//! - parking puts the connection in the table *before* re-arming it in epoll, so its next
//!   event always finds it;
//! - tokens are never reused (client slot numbers are), so a stale event cannot reach
//!   another connection;
//! - a closing connection leaves epoll before its slot is freed (the slot keeps a
//!   duplicate of the socket for the kill path and watches, and epoll follows the open
//!   file, not the descriptor).

use std::collections::{HashMap, VecDeque};
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use client_lib::wire::HEADER_LEN;
use nix::errno::Errno;
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use nix::sys::socket::{recv, MsgFlags};
use tracing::{debug, info, warn};

use crate::pool::{Pool, PoolCounts};
use crate::server::{After, Conn, RateLimit, REFUSAL_LOG_INTERVAL};
use crate::state::Daemon;
use crate::sync::lock;
use crate::sys;
use crate::tables::Refused;
use lockd_core::{Effect, Input};

/// Most worker threads running client commands at once. Commands that wait (a synchronous
/// add_lockspace waits 2·io_timeout and more, shutdown --wait until the daemon exits)
/// hold a worker while they wait; sanlock's default is 8 such workers.
pub const MAX_WORKERS: usize = 64;

/// Most jobs one non-root uid may have on the workers at once (sanlock runs 8 worker
/// threads in all). A uid's further jobs wait in the reactor's own queue, so a client
/// that stalls in the middle of its payloads (each read may wait the 10 s payload
/// timeout) holds at most this many workers.
pub const MAX_WORKERS_PER_UID: usize = 16;

/// Most jobs all non-root uids together may have on the workers: the rest of the pool
/// stays free for root (the hypervisor's lock driver, admin commands, releases of
/// root's clients), whatever other uids do.
pub const MAX_NON_ROOT_WORKERS: usize = MAX_WORKERS - 16;
const _: () =
    assert!(MAX_WORKERS_PER_UID <= MAX_NON_ROOT_WORKERS && MAX_NON_ROOT_WORKERS < MAX_WORKERS);

/// How long a connection must have been idle since it was accepted, having sent nothing,
/// before a new connection of its uid may take its slot when there is no other.
pub const IDLE_EVICT_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

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

impl Job {
    /// The uid whose share of the workers the job uses (a pid's exit: root's, since
    /// only that release is run and the pid watches are bounded by the slots).
    fn uid(&self) -> u32 {
        match self {
            Job::Command { conn, .. } | Job::Closed { conn } => conn.cred.uid,
            Job::PidExited { .. } => 0,
        }
    }
}

/// Who may have jobs on the workers: each non-root uid up to [`MAX_WORKERS_PER_UID`],
/// all non-root uids up to [`MAX_NON_ROOT_WORKERS`]; root without bound. Jobs over a
/// bound wait in `waiting`, first in first out among those whose uid may run.
#[derive(Default)]
struct Shares {
    running: HashMap<u32, usize>,
    non_root_running: usize,
    waiting: VecDeque<Job>,
}

impl Shares {
    fn may_run(&self, uid: u32) -> bool {
        uid == 0
            || (self.non_root_running < MAX_NON_ROOT_WORKERS
                && self.running.get(&uid).copied().unwrap_or(0) < MAX_WORKERS_PER_UID)
    }

    fn start(&mut self, uid: u32) {
        if uid != 0 {
            *self.running.entry(uid).or_insert(0) += 1;
            self.non_root_running += 1;
        }
    }

    /// Counts a job of `uid` as done and returns the first waiting job that may run now
    /// (counted as started).
    fn finish(&mut self, uid: u32) -> Option<Job> {
        if uid == 0 {
            return None;
        }
        if let Some(n) = self.running.get_mut(&uid) {
            *n -= 1;
            if *n == 0 {
                self.running.remove(&uid);
            }
        }
        self.non_root_running -= 1;
        let at = self.waiting.iter().position(|j| self.may_run(j.uid()))?;
        let job = self.waiting.remove(at)?;
        self.start(job.uid());
        Some(job)
    }
}

/// Counts a job as finished when dropped, also when the job panicked.
struct Finished<'a> {
    r: &'a Reactor,
    uid: u32,
}

impl Drop for Finished<'_> {
    fn drop(&mut self) {
        let next = lock(&self.r.tables).shares.finish(self.uid);
        if let (Some(job), Some(pool)) = (next, self.r.pool.get()) {
            pool.submit(job);
        }
    }
}

/// A connection waiting in epoll for its next request.
struct Parked {
    conn: Conn,
    header: [u8; HEADER_LEN],
    /// Header bytes read so far.
    got: usize,
    /// When it was accepted, while it has sent nothing yet (None once it has run a
    /// command): such a connection may give its slot to a new one of its uid.
    idle_since: Option<Instant>,
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
    /// A leaf lock: held for map updates (and the epoll_ctl that goes with one), never
    /// while another lock is taken.
    tables: Mutex<Tables>,
    /// The worker pool, once the loop runs (its counts are read live for the metrics).
    /// Its workers reach the reactor through a `Weak`, so the two do not keep each other.
    pool: OnceLock<Pool<Job>>,
}

/// What the reactor's tokens name, and the uids' shares of the workers.
#[derive(Default)]
struct Tables {
    parked: HashMap<u64, Parked>,
    pids: HashMap<u64, PidWatch>,
    /// Each uid's share of the workers, and the jobs waiting for theirs.
    shares: Shares,
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
            tables: Mutex::new(Tables::default()),
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
        let mut tables = lock(&self.tables);
        self.epoll
            .add(conn.stream.as_fd(), Self::conn_event(token))?;
        tables.parked.insert(
            token,
            Parked {
                conn,
                header: [0; HEADER_LEN],
                got: 0,
                idle_since: Some(Instant::now()),
            },
        );
        Ok(())
    }

    /// Parks `p`'s connection again (keeping any part of a header read); on failure the
    /// connection is closed.
    fn repark(&self, d: &Arc<Daemon>, token: u64, p: Parked) {
        let mut tables = lock(&self.tables);
        let armed = self
            .epoll
            .modify(p.conn.stream.as_fd(), &mut Self::conn_event(token));
        match armed {
            Ok(()) => {
                tables.parked.insert(token, p);
            }
            Err(e) => {
                drop(tables);
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
    fn watch_pid_now(&self, ci: u32, pid: i32, pidfd: OwnedFd) -> io::Result<()> {
        let token = self.token() | PID_TOKEN_BIT;
        let mut tables = lock(&self.tables);
        self.epoll
            .add(pidfd.as_fd(), EpollEvent::new(EpollFlags::EPOLLIN, token))?;
        tables.pids.insert(token, PidWatch { ci, pid, pidfd });
        Ok(())
    }

    /// Hands `job` to the pool, or keeps it waiting while its uid has its share.
    fn submit(&self, pool: &Pool<Job>, job: Job) {
        let uid = job.uid();
        {
            let mut tables = lock(&self.tables);
            let shares = &mut tables.shares;
            if !shares.may_run(uid) {
                shares.waiting.push_back(job);
                return;
            }
            shares.start(uid);
        }
        pool.submit(job);
    }

    /// Jobs waiting because their uid has its share of the workers.
    fn jobs_waiting(&self) -> usize {
        lock(&self.tables).shares.waiting.len()
    }

    /// Watches the listener for connections (`on`), or stops watching it for a while.
    fn listen(&self, listener: &UnixListener, on: bool) -> nix::Result<()> {
        let flags = if on {
            EpollFlags::EPOLLIN
        } else {
            EpollFlags::empty()
        };
        self.epoll.modify(
            listener.as_fd(),
            &mut EpollEvent::new(flags, LISTENER_TOKEN),
        )
    }

    /// Pid watches alive (tests and status).
    fn pids_watched(&self) -> usize {
        lock(&self.tables).pids.len()
    }

    /// The worker pool's counts now (None before the loop starts).
    fn counts(&self) -> Option<PoolCounts> {
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

    /// Closes the oldest connection of `uid` that has sent nothing since it was accepted
    /// at least [`IDLE_EVICT_AFTER`] ago (see the module header); false when there is
    /// none. Runs on the event loop, which alone moves a never-used connection.
    fn evict_idle(&self, d: &Arc<Daemon>, uid: u32) -> bool {
        let victim = {
            let mut tables = lock(&self.tables);
            let parked = &mut tables.parked;
            let now = Instant::now();
            let mut idle: Vec<(Instant, u64)> = parked
                .iter()
                .filter(|(_, p)| p.conn.cred.uid == uid && p.got == 0)
                .filter_map(|(t, p)| Some((p.idle_since?, *t)))
                .filter(|(since, _)| now.saturating_duration_since(*since) >= IDLE_EVICT_AFTER)
                .collect();
            idle.sort_unstable();
            let mut peek = [0u8; 1];
            let token = idle.into_iter().map(|(_, t)| t).find(|t| {
                parked.get(t).is_some_and(|p| {
                    // Nothing waiting in the socket: a request that arrived but whose
                    // event is not handled yet is not idle.
                    let fd = p.conn.stream.as_raw_fd();
                    matches!(
                        recv(fd, &mut peek, MsgFlags::MSG_PEEK | MsgFlags::MSG_DONTWAIT),
                        Err(Errno::EAGAIN)
                    )
                })
            });
            token.and_then(|t| parked.remove(&t))
        };
        let Some(p) = victim else {
            return false;
        };
        debug!(
            ci = p.conn.ci,
            uid,
            pid = p.conn.cred.pid,
            "closing an idle connection that sent nothing, to make room for a new one"
        );
        self.close(d, p.conn);
        true
    }

    fn forget_released_pids(&self, d: &Daemon) {
        // Never our tables and the core at once (neither lock is taken under the other):
        // copy the watches, ask the core which are still ours, then drop the others.
        let watched: Vec<(u64, u32, i32)> = lock(&self.tables)
            .pids
            .iter()
            .map(|(token, w)| (*token, w.ci, w.pid))
            .collect();
        if watched.is_empty() {
            return;
        }
        let gone: Vec<(u64, u32, i32)> = {
            let core = lock(&d.core);
            watched
                .into_iter()
                .filter(|(_, ci, pid)| !crate::forpid::is_pid_slot(&core, *ci, *pid))
                .collect()
        };
        let mut tables = lock(&self.tables);
        let pids = &mut tables.pids;
        for (token, ci, pid) in gone {
            // The same watch (a token is never reused), unless its pid exited meanwhile.
            if pids.get(&token).is_some_and(|w| w.ci == ci && w.pid == pid) {
                if let Some(w) = pids.remove(&token) {
                    let _ = self.epoll.delete(w.pidfd.as_fd());
                }
            }
        }
    }
}

/// Runs one job on a pool worker.
fn run_job(d: &Arc<Daemon>, r: &Reactor, job: Job) {
    let _finished = Finished { r, uid: job.uid() };
    match job {
        Job::Command {
            token,
            mut conn,
            mut header,
        } => loop {
            match crate::dispatch::run_command(d, &mut conn, &header) {
                After::Keep => {}
                _ => break r.close(d, conn),
            }
            // A client that has sent its next request already (pipelined) is served on
            // this worker, without a round through epoll and another worker.
            let mut next = Parked {
                conn,
                header: [0; HEADER_LEN],
                got: 0,
                idle_since: None,
            };
            match Reactor::read_header(&mut next) {
                HeaderRead::Whole => (conn, header) = (next.conn, next.header),
                HeaderRead::Partial => {
                    // This worker is free once the connection is parked: the client's
                    // next request, if it comes at once, is left to it.
                    if let Some(pool) = r.pool.get() {
                        pool.ending();
                    }
                    break r.repark(d, token, next);
                }
                HeaderRead::Closed => break r.close(d, next.conn),
            }
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
/// [`lockd_core::Clients::add`]) is closed at once. Returns false when `accept` failed
/// (EMFILE and the like): the connection stays in the backlog and the listener readable.
fn accept_all(
    d: &Arc<Daemon>,
    r: &Reactor,
    listener: &UnixListener,
    refusals: &mut RateLimit,
    accept_errors: &mut RateLimit,
    evictions: &mut RateLimit,
) -> bool {
    loop {
        let stream = match listener.accept() {
            Ok((s, _)) => s,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                if let Some(n) = accept_errors.hit(Instant::now()) {
                    warn!(error = %e, failures = n, "accept failed");
                }
                return false;
            }
        };
        let cred = match sys::peer_cred(&stream) {
            Ok(c) => c,
            Err(e) => {
                warn!(error = %e, "SO_PEERCRED failed; closing connection");
                continue;
            }
        };
        let mut added = admit(d, &stream, cred.pid, cred.uid, false);
        if added.is_err() && r.evict_idle(d, cred.uid) {
            if let Some(n) = evictions.hit(Instant::now()) {
                info!(
                    uid = cred.uid,
                    evicted = n,
                    "client slots full: closed the oldest idle connection of this uid that \
                     sent nothing, for a new one (evicted counts this and the ones not logged \
                     since the last such line)"
                );
            }
            added = admit(d, &stream, cred.pid, cred.uid, true);
        }
        let ci = match added {
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
            // Not registered yet: its slot just goes (no release, nothing to run).
            let fx = lock(&d.core).step(crate::clock::now_s(), Input::Closed { ci });
            assert!(
                fx.is_empty(),
                "an unregistered slot's end gave effects: {fx:?}"
            );
        }
    }
}

/// Whether the loop is done: shutdown was asked for *and* every lockspace is gone. Until
/// the last lockspace goes, a forced shutdown still needs the loop: the holders it kills
/// are seen to exit only through their connections closing and their pidfds turning
/// readable, and their leases (then the lockspaces' delta leases) are released only then.
fn stopped(d: &Daemon) -> bool {
    d.is_shutting_down() && lock(&d.spaces).is_empty()
}

/// The worker pool that runs the loop's jobs (commands, closes, pid exits).
fn worker_pool(d: &Arc<Daemon>, r: &Arc<Reactor>) -> Pool<Job> {
    // Test hook, debug builds only (daemon/tests/panic_stops.rs): every job panics
    // holding the core lock, as a bug in the middle of a transition would ("panic"), or
    // leaves the tables with a broken invariant, as a buggy write would ("break-tables").
    let hook = std::env::var("LOCKD_DEBUG_PANIC_IN_JOB")
        .ok()
        .filter(|_| cfg!(debug_assertions));
    let (d, weak_r) = (d.clone(), Arc::downgrade(r));
    Pool::new("lockd-worker", MAX_WORKERS, move |job| {
        match hook.as_deref() {
            Some("break-tables") => {
                // A resource held by nobody, neither busy nor an orphan: the guard's
                // debug check panics as it lets go of the lock.
                let name = disk_format::Name::new("broken").expect("a valid name");
                let broken = crate::tables::HeldRes {
                    ls: name,
                    name,
                    disks: Vec::new(),
                    shared: false,
                    holders: Vec::new(),
                    busy: false,
                    releasing: false,
                    orphan: false,
                    held: crate::tables::Held::default(),
                };
                crate::tables::change_outside_step(crate::sync::lock(&d.core), |t| {
                    t.resources.insert((name, name), broken);
                });
            }
            Some(_) => {
                let _tables = crate::sync::lock(&d.core);
                panic!("LOCKD_DEBUG_PANIC_IN_JOB: a job panics holding the core lock");
            }
            None => {}
        }
        if let Some(r) = weak_r.upgrade() {
            run_job(&d, &r, job);
        }
    })
}

/// A watched pid exited, or a parked connection is readable: its job, or back to park
/// (a header not yet whole).
fn on_connection_ready(d: &Arc<Daemon>, r: &Reactor, pool: &Pool<Job>, token: u64) {
    if token & PID_TOKEN_BIT != 0 {
        let Some(w) = lock(&r.tables).pids.remove(&token) else {
            return;
        };
        let _ = r.epoll.delete(w.pidfd.as_fd());
        r.submit(
            pool,
            Job::PidExited {
                ci: w.ci,
                pid: w.pid,
            },
        );
    } else {
        let Some(mut p) = lock(&r.tables).parked.remove(&token) else {
            return;
        };
        match Reactor::read_header(&mut p) {
            HeaderRead::Whole => r.submit(
                pool,
                Job::Command {
                    token,
                    conn: p.conn,
                    header: p.header,
                },
            ),
            HeaderRead::Partial => r.repark(d, token, p),
            HeaderRead::Closed => r.submit(pool, Job::Closed { conn: p.conn }),
        }
    }
}

/// The loop: runs until shutdown and the last lockspace's end (see [`stopped`]; in
/// between, commands are still answered, see `dispatch::run_command`), then stops the pool
/// (running commands finish) and drops the parked connections.
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
    let pool = r.pool.get_or_init(|| worker_pool(&d, &r));
    let mut refusals = RateLimit::default();
    let mut accept_errors = RateLimit::default();
    let mut evictions = RateLimit::default();
    let mut events = vec![EpollEvent::empty(); 64];
    let mut last_sweep = Instant::now();
    let mut listener_paused = false;
    while !stopped(&d) {
        let n = match r.epoll.wait(&mut events, EpollTimeout::from(TICK_MS)) {
            Ok(n) => n,
            Err(Errno::EINTR) => 0,
            Err(e) => {
                tracing::error!(error = %e, "epoll_wait failed; shutting down");
                d.request_shutdown();
                break;
            }
        };
        if stopped(&d) {
            break;
        }
        for ev in &events[..n] {
            let token = ev.data();
            if token == LISTENER_TOKEN {
                if !accept_all(
                    &d,
                    &r,
                    &listener,
                    &mut refusals,
                    &mut accept_errors,
                    &mut evictions,
                ) {
                    // The listener stays readable while accept fails: without a pause the
                    // loop would spin on it. The next tick listens again.
                    listener_paused = r.listen(&listener, false).is_ok();
                }
            } else {
                on_connection_ready(&d, &r, pool, token);
            }
        }
        if last_sweep.elapsed().as_millis() >= u128::from(TICK_MS) {
            last_sweep = Instant::now();
            if listener_paused {
                match r.listen(&listener, true) {
                    Ok(()) => listener_paused = false,
                    Err(e) => warn!(error = %e, "cannot watch the listening socket again"),
                }
            }
            r.forget_released_pids(&d);
        }
    }
    pool.stop();
    let mut tables = lock(&r.tables);
    tables.parked.clear();
    tables.shares.waiting.clear();
    drop(tables);
    info!("listener stopped");
}

impl crate::state::EventLoop for Reactor {
    fn watch_pid(&self, ci: u32, pid: i32, pidfd: OwnedFd) -> io::Result<()> {
        self.watch_pid_now(ci, pid, pidfd)
    }
    fn pool_counts(&self) -> Option<PoolCounts> {
        self.counts()
    }
    fn jobs_over_share(&self) -> usize {
        self.jobs_waiting()
    }
    fn watched_pids(&self) -> usize {
        self.pids_watched()
    }
}

/// Admission of a new connection through the core (`Input::Connected`): a client slot,
/// or why not. `replacing_own`: an idle connection of the same uid was just closed to
/// make room for this one.
fn admit(
    d: &Daemon,
    stream: &UnixStream,
    pid: i32,
    uid: u32,
    replacing_own: bool,
) -> Result<u32, Refused> {
    let input = Input::Connected {
        fd: stream.as_raw_fd(),
        pid,
        uid,
        stream: stream.try_clone().ok(),
        replacing_own,
    };
    let fx = lock(&d.core).step(crate::clock::now_s(), input);
    match fx.as_slice() {
        [Effect::Accepted { ci }] => Ok(*ci),
        [Effect::Refused { why }] => Err(*why),
        other => panic!("the core answered a connection with {other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::PeerCred;
    use std::os::unix::net::UnixStream;

    fn closed(uid: u32, ci: u32) -> Job {
        let (stream, _) = UnixStream::pair().unwrap();
        Job::Closed {
            conn: Conn {
                stream,
                ci,
                cred: PeerCred {
                    pid: 1,
                    uid,
                    gid: 0,
                },
            },
        }
    }

    fn ci(job: &Job) -> u32 {
        match job {
            Job::Closed { conn } | Job::Command { conn, .. } => conn.ci,
            Job::PidExited { ci, .. } => *ci,
        }
    }

    /// Queues `job` as `Reactor::submit` does; true when it may run at once.
    fn offer(s: &mut Shares, job: Job) -> bool {
        if s.may_run(job.uid()) {
            s.start(job.uid());
            true
        } else {
            s.waiting.push_back(job);
            false
        }
    }

    #[test]
    fn one_uid_gets_its_share_and_waits_in_order() {
        let mut s = Shares::default();
        for i in 0..MAX_WORKERS_PER_UID as u32 {
            assert!(offer(&mut s, closed(1000, i)), "job {i} runs");
        }
        assert!(!offer(&mut s, closed(1000, 100)));
        assert!(!offer(&mut s, closed(1000, 101)));
        // Another uid and root still run.
        assert!(offer(&mut s, closed(1001, 200)));
        assert!(offer(&mut s, closed(0, 300)));
        assert!(offer(&mut s, Job::PidExited { ci: 301, pid: 9 }));
        // Root finishing frees nothing of uid 1000's share.
        assert!(s.finish(0).is_none());
        // uid 1001 finishing frees a non-root slot, but uid 1000 is at its own bound.
        assert!(s.finish(1001).is_none());
        // uid 1000 finishing starts its first waiting job, then the second.
        assert_eq!(s.finish(1000).map(|j| ci(&j)), Some(100));
        assert_eq!(s.finish(1000).map(|j| ci(&j)), Some(101));
        assert!(s.finish(1000).is_none());
        assert_eq!(s.running.get(&1000), Some(&(MAX_WORKERS_PER_UID - 1)));
        assert!(s.waiting.is_empty());
    }

    #[test]
    fn non_root_uids_together_leave_root_its_workers() {
        let mut s = Shares::default();
        let uids = (MAX_NON_ROOT_WORKERS / MAX_WORKERS_PER_UID + 1) as u32;
        let mut ran = 0;
        for uid in 1..=uids {
            for i in 0..MAX_WORKERS_PER_UID as u32 {
                if offer(&mut s, closed(uid, uid * 100 + i)) {
                    ran += 1;
                }
            }
        }
        assert_eq!(ran, MAX_NON_ROOT_WORKERS);
        assert_eq!(s.non_root_running, MAX_NON_ROOT_WORKERS);
        assert_eq!(s.waiting.len(), MAX_WORKERS_PER_UID);
        assert!(offer(&mut s, closed(0, 1)), "root is never held back");
        // Any non-root job finishing lets the first waiting one (of the last uid) run.
        let next = s.finish(1).expect("a waiting job runs");
        assert_eq!(ci(&next), uids * 100);
        assert_eq!(s.non_root_running, MAX_NON_ROOT_WORKERS);
    }
}
