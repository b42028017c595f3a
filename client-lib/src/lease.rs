//! A typed, blocking lease API for Rust services: [`Lease`] with its fencing token and a
//! lost-lease notification.
//!
//! A `Lease` is one registered connection to the daemon holding one resource lease (the
//! sanlock model: the daemon releases the lease when the connection closes, i.e. when the
//! process dies). Beside it runs a *watch* connection (lockd's `LOCKD_CMD_WATCH`
//! extension, see [`crate::ext`]) and one thread reading it. The lease is declared lost —
//! once, for good — when any of these happens:
//!
//! * the daemon announces renewal failing (6·io_timeout without a renewal), lockspace
//!   failed, lockspace removed, or a request for our resource by another host; the daemon
//!   sends these *before* it starts the kill escalation for them;
//! * the watch connection closes (the daemon died or was killed);
//! * no heartbeat arrives for [`SILENCE_LIMIT`] (the daemon is stopped or hung): we can no
//!   longer know whether our host_id is being renewed, so the lease is not to be trusted.
//!
//! Invariants: [`Lease::token`] is the lease version (`lver`) at which this holder
//! acquired; disk Paxos makes it strictly greater than every earlier holder's on any
//! host. A loss notice is final: `is_trusted()` never turns true again. Dropping a
//! `Lease` releases it.

use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use disk_format::Name;
use thiserror::Error;

use crate::client::Client;
use crate::error::{describe_rv, ClientError};
use crate::ext::{
    LeaderInfo, WatchEvent, WatchKind, LEADER_INFO_LEN, LOCKD_CMD_LEADER, LOCKD_CMD_METRICS,
    LOCKD_CMD_WATCH, LOCKD_MSG_WATCH_EVENT, NO_DEADLINE, WATCH_EVENT_LEN,
};
use crate::proto::{
    SANLK_ACQUIRE_LVB, SANLK_ACQUIRE_ORPHAN, SANLK_ACQUIRE_ORPHAN_ONLY, SANLK_ACQUIRE_OWNER_NOWAIT,
    SANLK_REL_ORPHAN, SANLK_RES_PERSISTENT, SANLK_RES_SHARED,
};
use crate::wire::{DiskLocation, Resource, ResourceHead, HEADER_LEN};

/// With no heartbeat for this long, the daemon is taken for stopped and the lease lost.
pub const SILENCE_LIMIT: Duration = Duration::from_millis(3000);
/// How long a lockd extension command may take to answer before the daemon is taken for
/// one without extensions (a sanlock daemon ignores unknown commands).
const EXT_REPLY_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a lease operation failed.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ClientLeaseError {
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error("{op} {lease}: {} ({rv})", describe_lease_rv(op, *rv))]
    Refused {
        op: &'static str,
        lease: String,
        rv: i32,
    },
    #[error("lease {lease} is held by another holder ({})", describe_rv(*rv))]
    Busy { lease: String, rv: i32 },
    #[error("lease {lease}: not acquired within {waited:?}")]
    Timeout { lease: String, waited: Duration },
    #[error("invalid lease {spec:?}: {why} (want LOCKSPACE:NAME:PATH:OFFSET)")]
    BadSpec { spec: String, why: String },
    #[error("the daemon in {0} does not answer lockd's extension commands (a sanlock daemon?)")]
    NoExtensions(PathBuf),
}

impl ClientLeaseError {
    /// The sanlock-style result code behind the error, when there is one.
    pub fn code(&self) -> Option<i32> {
        match self {
            ClientLeaseError::Refused { rv, .. } | ClientLeaseError::Busy { rv, .. } => Some(*rv),
            ClientLeaseError::Client(e) => Some(e.code()),
            _ => None,
        }
    }
}

/// What result `rv` of lease command `op` means: the codes whose errno name would
/// mislead (sanlock answers a lease command in a lockspace this host has not joined with
/// -ENOSPC), else [`describe_rv`].
fn describe_lease_rv(op: &str, rv: i32) -> String {
    match (op, rv) {
        (_, -28) => "the lockspace is not joined on this host".to_string(),
        ("acquire", -117) => {
            "an orphan of this lease is held here: adopt it (adopt_orphan) or release it \
             (release_orphans)"
                .to_string()
        }
        ("acquire", -2) => "no such lease, or no orphan of it here to adopt".to_string(),
        _ => describe_rv(rv),
    }
}

/// Result codes meaning "someone else holds it (or is taking it) now; try again later".
pub fn is_busy_code(rv: i32) -> bool {
    use disk_format::rv::*;
    matches!(
        rv,
        SANLK_ACQUIRE_IDLIVE
            | SANLK_ACQUIRE_OWNED
            | SANLK_ACQUIRE_OTHER
            | SANLK_ACQUIRE_SHRETRY
            | SANLK_ACQUIRE_OWNED_RETRY
            | SANLK_DBLOCK_MBAL
            | SANLK_DBLOCK_LVER
    ) || rv == -11 // EAGAIN: a local release of it is in flight
        || rv == -16 // EBUSY: a local acquire of it is in flight
        || rv == -17 // EEXIST: another local client holds it
}

/// Where a lease lives: `LOCKSPACE:NAME:PATH:OFFSET`, or on several disks (up to 4,
/// sanlock's num_disks) `LOCKSPACE:NAME:PATH:OFFSET:PATH2:OFFSET2…`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseSpec {
    pub lockspace: Name,
    pub name: Name,
    /// The first disk (the one holding the request record and the LVB).
    pub path: String,
    pub offset: u64,
    /// The lease's other disks, in order: empty for a lease on one disk.
    pub more_disks: Vec<(String, u64)>,
}

impl LeaseSpec {
    /// Parses `LOCKSPACE:NAME:PATH:OFFSET[:PATH:OFFSET]…` (1 to 4 disks); OFFSET takes a
    /// K/M/G suffix (powers of 1024). With one disk PATH may contain `:` (the last field is
    /// the offset); fields that read as 2 to 4 PATH:OFFSET pairs are several disks.
    pub fn parse(text: &str) -> Result<LeaseSpec, ClientLeaseError> {
        let bad = |why: &str| ClientLeaseError::BadSpec {
            spec: text.to_string(),
            why: why.to_string(),
        };
        let mut head = text.splitn(3, ':');
        let ls = head.next().unwrap_or_default();
        let name = head.next().ok_or_else(|| bad("no resource name"))?;
        let rest = head.next().ok_or_else(|| bad("no path"))?;
        let fields: Vec<&str> = rest.split(':').collect();
        let pairs: Option<Vec<(&str, u64)>> = (fields.len() >= 4 && fields.len().is_multiple_of(2))
            .then(|| {
                fields
                    .chunks(2)
                    .map(|p| parse_size(p[1]).map(|o| (p[0], o)))
                    .collect()
            })
            .flatten();
        let disks = match pairs {
            Some(p) => p,
            None => {
                let (path, off) = rest.rsplit_once(':').ok_or_else(|| bad("no offset"))?;
                vec![(
                    path,
                    parse_size(off).ok_or_else(|| bad("offset is not a number"))?,
                )]
            }
        };
        if disks.len() > 4 {
            return Err(bad("more than 4 disks"));
        }
        for (path, _) in &disks {
            if path.is_empty() {
                return Err(bad("empty path"));
            }
            if path.len() >= crate::proto::SANLK_PATH_LEN {
                return Err(bad("path too long"));
            }
        }
        Ok(LeaseSpec {
            lockspace: Name::new(ls).map_err(|e| bad(&format!("lockspace name: {e}")))?,
            name: Name::new(name).map_err(|e| bad(&format!("resource name: {e}")))?,
            path: disks[0].0.to_string(),
            offset: disks[0].1,
            more_disks: disks[1..]
                .iter()
                .map(|(p, o)| (p.to_string(), *o))
                .collect(),
        })
    }

    /// Every disk of the lease, the first one first.
    pub fn disks(&self) -> impl Iterator<Item = (&str, u64)> {
        std::iter::once((self.path.as_str(), self.offset))
            .chain(self.more_disks.iter().map(|(p, o)| (p.as_str(), *o)))
    }

    /// `LOCKSPACE:NAME`, as `LOCKD_LEASE` carries it.
    pub fn short(&self) -> String {
        format!("{}:{}", self.lockspace, self.name)
    }

    /// The lease as the wire's resource (all its disks), exclusive or shared.
    pub fn resource(&self, shared: bool) -> Result<Resource, ClientLeaseError> {
        let disks = self
            .disks()
            .map(|(path, offset)| {
                DiskLocation::new(path, offset).map_err(|e| ClientLeaseError::BadSpec {
                    spec: self.to_string(),
                    why: e.to_string(),
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Resource {
            head: ResourceHead {
                lockspace_name: self.lockspace,
                name: self.name,
                lver: 0,
                data64: 0,
                data32: 0,
                unused: 0,
                flags: if shared { SANLK_RES_SHARED } else { 0 },
                num_disks: disks.len() as u32,
            },
            disks,
        })
    }
}

impl std::fmt::Display for LeaseSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.lockspace, self.name)?;
        for (path, offset) in self.disks() {
            write!(f, ":{path}:{offset}")?;
        }
        Ok(())
    }
}

fn parse_size(t: &str) -> Option<u64> {
    let (num, mult) = match t.chars().last()? {
        'k' | 'K' => (&t[..t.len() - 1], 1u64 << 10),
        'm' | 'M' => (&t[..t.len() - 1], 1u64 << 20),
        'g' | 'G' => (&t[..t.len() - 1], 1u64 << 30),
        _ => (t, 1),
    };
    num.parse::<u64>().ok()?.checked_mul(mult)
}

/// How long [`Lease::acquire`] waits for a lease someone else holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// One attempt; a held lease gives [`ClientLeaseError::Busy`] at once (the daemon does not
    /// wait on an owner whose liveness it does not know yet: OWNER_NOWAIT).
    NoWait,
    /// Retry with back-off until this much time has passed.
    Timeout(Duration),
    /// Retry until acquired.
    Forever,
}

/// Options of [`Lease::acquire`].
#[derive(Debug, Clone)]
pub struct LeaseAcquireOptions {
    /// Daemon run dir (sanlock.sock); default as [`crate::default_run_dir`].
    pub run_dir: PathBuf,
    pub shared: bool,
    pub wait: Wait,
    /// Owner name the daemon shows in status.
    pub owner_name: Option<String>,
    /// `SANLK_RESTRICT_*` flags for the registration (e.g. SANLK_RESTRICT_SIGKILL: the
    /// daemon then sends SIGTERM where it would send SIGKILL, so a holder that handles
    /// SIGTERM can stop what it runs first).
    pub restrict: u32,
    /// Acquire with the lease value block (`SANLK_ACQUIRE_LVB`): [`Lease::lvb`] reads the
    /// value the previous holder left, [`Lease::set_lvb`] the one this holder leaves.
    pub lvb: bool,
    /// A persistent lease (`SANLK_RES_PERSISTENT`): when this process ends, or calls
    /// [`Lease::leave_as_orphan`], without releasing it, the daemon keeps the lease held
    /// by this host as an *orphan* (no disk I/O) until a process here adopts it
    /// ([`LeaseAcquireOptions::adopt_orphan`]) or it is released ([`release_orphans`]).
    pub persistent: bool,
    /// Take only an orphan of this host (`SANLK_ACQUIRE_ORPHAN_ONLY`), in its own mode,
    /// at its lease version, with no disk I/O: refused with -ENOENT (-2) when there is
    /// none. Without it, an orphan here refuses the acquire with -EUCLEAN (-117).
    pub adopt_orphan: bool,
}

impl Default for LeaseAcquireOptions {
    fn default() -> Self {
        LeaseAcquireOptions {
            run_dir: crate::default_run_dir(),
            shared: false,
            wait: Wait::Forever,
            owner_name: None,
            restrict: 0,
            lvb: false,
            persistent: false,
            adopt_orphan: false,
        }
    }
}

/// Why a lease can no longer be trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LossReason {
    /// The daemon's renewals of the lockspace are failing (storage trouble).
    RenewalFailing,
    /// The lockspace failed: the daemon's kill escalation starts.
    LockspaceFailed,
    /// The lockspace was removed (or the daemon shut down by force).
    LockspaceRemoved,
    /// Another host requested the lease (FORCE or GRACEFUL).
    Requested { force_mode: u32 },
    /// The connection to the daemon broke (the daemon died).
    DaemonGone,
    /// The daemon stopped answering (no heartbeat for [`SILENCE_LIMIT`]).
    DaemonSilent,
}

impl LossReason {
    pub fn name(&self) -> &'static str {
        match self {
            LossReason::RenewalFailing => "renewal_failing",
            LossReason::LockspaceFailed => "lockspace_failed",
            LossReason::LockspaceRemoved => "lockspace_removed",
            LossReason::Requested { .. } => "requested",
            LossReason::DaemonGone => "daemon_gone",
            LossReason::DaemonSilent => "daemon_silent",
        }
    }
}

/// A lost-lease notification.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LossNotice {
    pub reason: LossReason,
    /// When we learnt it (our monotonic clock).
    pub at: Instant,
    /// Time left before the daemon's kill escalation reaches this process (zero when it
    /// has started or is immediate; None when unknown, e.g. the daemon is gone).
    pub kill_in: Option<Duration>,
    /// Time left before the watchdog resets this host (None: no watchdog, or unknown).
    pub watchdog_in: Option<Duration>,
}

fn ms_left(ms: i64) -> Option<Duration> {
    if ms == NO_DEADLINE {
        None
    } else {
        Some(Duration::from_millis(ms.max(0) as u64))
    }
}

type Callback = Box<dyn FnOnce(LossNotice) + Send>;

/// Shared between the lease and its watch thread.
#[derive(Default)]
struct LossState {
    notice: Mutex<Option<LossNotice>>,
    cond: Condvar,
    callbacks: Mutex<Vec<Callback>>,
    /// Set when we release on purpose: the watch thread ends quietly.
    closing: std::sync::atomic::AtomicBool,
}

impl LossState {
    fn declare(&self, n: LossNotice) {
        {
            let mut g = self.notice.lock().unwrap_or_else(|p| p.into_inner());
            if g.is_some() {
                return;
            }
            *g = Some(n);
        }
        self.cond.notify_all();
        let cbs = std::mem::take(&mut *self.callbacks.lock().unwrap_or_else(|p| p.into_inner()));
        for cb in cbs {
            cb(n);
        }
    }

    fn get(&self) -> Option<LossNotice> {
        *self.notice.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A held resource lease.
pub struct Lease {
    spec: LeaseSpec,
    shared: bool,
    token: u64,
    run_dir: PathBuf,
    client: Option<Client>,
    watch_stream: UnixStream,
    loss: Arc<LossState>,
    watch_thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease")
            .field("spec", &self.spec)
            .field("shared", &self.shared)
            .field("token", &self.token)
            .field("lost", &self.loss.get())
            .finish()
    }
}

/// The error of a lockd extension command's reply: a reply that never came (the read
/// timed out) means a daemon without lockd's extensions, e.g. sanlock, which ignores
/// unknown commands.
fn ext_error(run_dir: &Path, e: ClientError) -> ClientLeaseError {
    match e {
        ClientError::Io(io)
            if matches!(
                io.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            ClientLeaseError::NoExtensions(run_dir.to_path_buf())
        }
        e => e.into(),
    }
}

/// Opens a watch connection for our pid; returns it and the heartbeat interval.
fn open_watch(run_dir: &Path) -> Result<(UnixStream, Duration), ClientLeaseError> {
    let mut c = Client::connect(run_dir)?;
    c.set_read_timeout(Some(EXT_REPLY_TIMEOUT))?;
    c.send(LOCKD_CMD_WATCH, 0, 0, 0, &[])?;
    let h = match c.recv_header() {
        Ok(h) => h,
        Err(e) => return Err(ext_error(run_dir, e)),
    };
    if h.result() < 0 {
        return Err(ClientLeaseError::Refused {
            op: "watch",
            lease: String::new(),
            rv: h.result(),
        });
    }
    let interval = Duration::from_millis(u64::from(h.data2.clamp(50, 1000)));
    let stream = c.stream().try_clone().map_err(ClientError::from)?;
    Ok((stream, interval))
}

/// Releases this host's orphan of `spec` (`SANLK_REL_ORPHAN`: the lease a persistent
/// holder left, [`Lease::leave_as_orphan`]), as root or the orphan's user: the daemon's
/// answer, the number of orphans released (0: none).
pub fn release_orphans(run_dir: &Path, spec: &LeaseSpec) -> Result<u32, ClientLeaseError> {
    let mut c = Client::connect(run_dir)?;
    // As sanlock, a RELEASE (of orphans too) is a registered client's command.
    c.register()?;
    let head = spec.resource(false)?.head;
    let rv = c.release(-1, SANLK_REL_ORPHAN, &[head])?;
    u32::try_from(rv).map_err(|_| ClientLeaseError::Refused {
        op: "release orphans of",
        lease: spec.to_string(),
        rv,
    })
}

/// Asks the daemon in `run_dir` who holds `spec` (lockd extension).
pub fn leader(run_dir: &Path, spec: &LeaseSpec) -> Result<LeaderInfo, ClientLeaseError> {
    let mut c = Client::connect(run_dir)?;
    c.set_read_timeout(Some(EXT_REPLY_TIMEOUT))?;
    let res = spec.resource(false)?;
    c.send(LOCKD_CMD_LEADER, 0, 0, 0, &res.encode())?;
    let (h, p) = match c.recv_reply() {
        Ok(r) => r,
        Err(e) => return Err(ext_error(run_dir, e)),
    };
    if h.result() < 0 {
        return Err(ClientLeaseError::Refused {
            op: "read leader of",
            lease: spec.to_string(),
            rv: h.result(),
        });
    }
    if p.len() < LEADER_INFO_LEN {
        return Err(ClientError::from(crate::error::WireError::Short {
            what: "leader reply",
            need: LEADER_INFO_LEN,
            got: p.len(),
        })
        .into());
    }
    Ok(LeaderInfo::decode(&p)?)
}

/// Asks the daemon in `run_dir` for its metrics (lockd extension): the Prometheus text
/// exposition, format 0.0.4.
pub fn metrics(run_dir: &Path) -> Result<String, ClientLeaseError> {
    let mut c = Client::connect(run_dir)?;
    c.set_read_timeout(Some(EXT_REPLY_TIMEOUT))?;
    c.send(LOCKD_CMD_METRICS, 0, 0, 0, &[])?;
    let (h, p) = match c.recv_reply() {
        Ok(r) => r,
        Err(e) => return Err(ext_error(run_dir, e)),
    };
    if h.result() < 0 {
        return Err(ClientLeaseError::Refused {
            op: "read metrics",
            lease: String::new(),
            rv: h.result(),
        });
    }
    String::from_utf8(p).map_err(|_| {
        ClientLeaseError::from(crate::error::WireError::BadField {
            what: "metrics reply",
            why: "not UTF-8",
        })
    })
}

impl From<crate::error::WireError> for ClientLeaseError {
    fn from(e: crate::error::WireError) -> Self {
        ClientLeaseError::Client(e.into())
    }
}

/// The watch thread: reads events until the lease is released or lost.
fn watch_loop(mut stream: UnixStream, interval: Duration, spec: LeaseSpec, loss: Arc<LossState>) {
    use std::io::Read;
    use std::sync::atomic::Ordering;
    let silence = SILENCE_LIMIT.max(interval * 4);
    let _ = stream.set_read_timeout(Some(interval));
    let mut last_heard = Instant::now();
    let mut buf = Vec::with_capacity(HEADER_LEN + WATCH_EVENT_LEN);
    let mut chunk = [0u8; 512];
    loop {
        if loss.closing.load(Ordering::SeqCst) || loss.get().is_some() {
            return;
        }
        match stream.read(&mut chunk) {
            Ok(0) => {
                gone(&loss, LossReason::DaemonGone);
                return;
            }
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock
                        | std::io::ErrorKind::TimedOut
                        | std::io::ErrorKind::Interrupted
                ) => {}
            Err(_) => {
                gone(&loss, LossReason::DaemonGone);
                return;
            }
        }
        while buf.len() >= HEADER_LEN + WATCH_EVENT_LEN {
            let msg: Vec<u8> = buf.drain(..HEADER_LEN + WATCH_EVENT_LEN).collect();
            last_heard = Instant::now();
            let Ok(h) = crate::wire::Header::decode(&msg[..HEADER_LEN]) else {
                continue;
            };
            if h.cmd != LOCKD_MSG_WATCH_EVENT {
                continue;
            }
            let Ok(e) = WatchEvent::decode(&msg[HEADER_LEN..]) else {
                continue;
            };
            if let Some(reason) = loss_reason(&e, &spec) {
                loss.declare(LossNotice {
                    reason,
                    at: Instant::now(),
                    kill_in: ms_left(e.kill_in_ms),
                    watchdog_in: ms_left(e.watchdog_in_ms),
                });
                return;
            }
        }
        if last_heard.elapsed() > silence {
            gone(&loss, LossReason::DaemonSilent);
            return;
        }
    }
}

/// The daemon is gone or silent: the lease is lost, unless we are releasing it ourselves.
fn gone(loss: &LossState, reason: LossReason) {
    if !loss.closing.load(std::sync::atomic::Ordering::SeqCst) {
        loss.declare(LossNotice {
            reason,
            at: Instant::now(),
            kill_in: None,
            watchdog_in: None,
        });
    }
}

/// Whether event `e` concerns the lease `spec`, and how.
fn loss_reason(e: &WatchEvent, spec: &LeaseSpec) -> Option<LossReason> {
    if e.kind == WatchKind::Heartbeat || !e.lockspace.same_as(&spec.lockspace) {
        return None;
    }
    match e.kind {
        WatchKind::RenewalFailing => Some(LossReason::RenewalFailing),
        WatchKind::LockspaceFailed => Some(LossReason::LockspaceFailed),
        WatchKind::LockspaceRemoved => Some(LossReason::LockspaceRemoved),
        WatchKind::Requested if e.resource.same_as(&spec.name) => Some(LossReason::Requested {
            force_mode: e.force_mode,
        }),
        _ => None,
    }
}

impl Lease {
    /// Acquires `spec` (retrying per `opts.wait`), then starts its loss watch. The watch
    /// is open before this returns, so no loss decision can go unnoticed.
    pub fn acquire(
        spec: &LeaseSpec,
        opts: &LeaseAcquireOptions,
    ) -> Result<Lease, ClientLeaseError> {
        let mut res = spec.resource(opts.shared)?;
        if opts.persistent {
            res.head.flags |= SANLK_RES_PERSISTENT;
        }
        let owner = match &opts.owner_name {
            Some(n) => Some(Name::new(n).map_err(|e| ClientLeaseError::BadSpec {
                spec: n.clone(),
                why: format!("owner name: {e}"),
            })?),
            None => None,
        };
        // The watch first, read from the start (so the daemon never finds its buffer
        // full): a failure to watch must not leave a lease held, and a loss decided
        // while we acquire is not missed (the lease is then returned already lost).
        let (watch_stream, interval) = open_watch(&opts.run_dir)?;
        let loss = Arc::new(LossState::default());
        let thread_stream = watch_stream.try_clone().map_err(ClientError::from)?;
        let (s2, l2) = (spec.clone(), loss.clone());
        let watch_thread = std::thread::Builder::new()
            .name("lockd-lease-watch".into())
            .spawn(move || watch_loop(thread_stream, interval, s2, l2))
            .map_err(ClientError::from)?;
        let mut lease = Lease {
            spec: spec.clone(),
            shared: opts.shared,
            token: 0,
            run_dir: opts.run_dir.clone(),
            client: None,
            watch_stream,
            loss,
            watch_thread: Some(watch_thread),
        };
        let started = Instant::now();
        let mut backoff = Duration::from_millis(200);
        // One registration for the whole wait: between attempts the daemon shows it as a
        // candidate waiting for this lease (STATUS `waiting=`, `lockd leader`).
        let mut c = Client::connect(&opts.run_dir)?;
        c.register()?;
        if opts.restrict != 0 {
            let rv = c.restrict(opts.restrict)?;
            if rv < 0 {
                return Err(ClientLeaseError::Refused {
                    op: "restrict",
                    lease: spec.to_string(),
                    rv,
                });
            }
        }
        let mut client = loop {
            let mut flags = if opts.wait == Wait::NoWait {
                SANLK_ACQUIRE_OWNER_NOWAIT
            } else {
                0
            };
            if opts.lvb {
                flags |= SANLK_ACQUIRE_LVB;
            }
            if opts.adopt_orphan {
                flags |= SANLK_ACQUIRE_ORPHAN | SANLK_ACQUIRE_ORPHAN_ONLY;
            }
            let rv = c.acquire(-1, flags, std::slice::from_ref(&res), owner)?;
            if rv == 0 {
                break c;
            }
            if !is_busy_code(rv) {
                return Err(ClientLeaseError::Refused {
                    op: "acquire",
                    lease: spec.to_string(),
                    rv,
                });
            }
            let waited = started.elapsed();
            match opts.wait {
                Wait::NoWait => {
                    return Err(ClientLeaseError::Busy {
                        lease: spec.to_string(),
                        rv,
                    })
                }
                Wait::Timeout(t) if waited >= t => {
                    return Err(ClientLeaseError::Timeout {
                        lease: spec.to_string(),
                        waited,
                    })
                }
                _ => {}
            }
            std::thread::sleep(backoff);
            backoff = (backoff * 2).min(Duration::from_secs(2));
        };
        lease.token = match token_of(&mut client, &opts.run_dir, spec) {
            Ok(t) => t,
            Err(e) => {
                let _ = client.release(-1, 0, std::slice::from_ref(&res.head));
                return Err(e);
            }
        };
        lease.client = Some(client);
        Ok(lease)
    }

    /// The fencing token: the lease version at which we acquired.
    pub fn token(&self) -> u64 {
        self.token
    }

    /// The lease value block (its first `size` bytes; 0: the whole sector) as the
    /// previous holder left it, or as [`Lease::set_lvb`] replaced it since. Needs
    /// [`LeaseAcquireOptions::lvb`].
    pub fn lvb(&self, size: u32) -> Result<Vec<u8>, ClientLeaseError> {
        let mut c = Client::connect(&self.run_dir)?;
        let head = self.spec.resource(self.shared)?.head;
        let (rv, data) = c.get_lvb(&head, size)?;
        self.answered("get_lvb", rv)?;
        Ok(data)
    }

    /// Replaces the start of the lease value block with `value`; it reaches the disk
    /// when this holder releases the lease (or converts it to shared), never before. Needs
    /// [`LeaseAcquireOptions::lvb`].
    pub fn set_lvb(&self, value: &[u8]) -> Result<(), ClientLeaseError> {
        let mut c = Client::connect(&self.run_dir)?;
        let head = self.spec.resource(self.shared)?.head;
        let rv = c.set_lvb(&head, value)?;
        self.answered("set_lvb", rv)
    }

    /// The daemon's answer `rv` to `op` on this lease: a negative one is a refusal.
    fn answered(&self, op: &'static str, rv: i32) -> Result<(), ClientLeaseError> {
        if rv < 0 {
            return Err(ClientLeaseError::Refused {
                op,
                lease: self.spec.to_string(),
                rv,
            });
        }
        Ok(())
    }

    pub fn spec(&self) -> &LeaseSpec {
        &self.spec
    }

    pub fn is_shared(&self) -> bool {
        self.shared
    }

    /// The daemon run dir this lease was taken through.
    pub fn run_dir(&self) -> &Path {
        &self.run_dir
    }

    /// False once a loss notice arrived (spindle's "has lock").
    pub fn is_trusted(&self) -> bool {
        self.loss.get().is_none()
    }

    /// The loss notice, if one arrived.
    pub fn lost(&self) -> Option<LossNotice> {
        self.loss.get()
    }

    /// Blocks until the lease is lost or `timeout` passes (None: forever).
    pub fn wait_lost(&self, timeout: Option<Duration>) -> Option<LossNotice> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut g = self.loss.notice.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(n) = *g {
                return Some(n);
            }
            match deadline {
                None => g = self.loss.cond.wait(g).unwrap_or_else(|p| p.into_inner()),
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        return None;
                    }
                    g = self
                        .loss
                        .cond
                        .wait_timeout(g, d - now)
                        .unwrap_or_else(|p| p.into_inner())
                        .0;
                }
            }
        }
    }

    /// Calls `f` once, from the watch thread, when the lease is lost (at once if it
    /// already is).
    pub fn on_lost(&self, f: impl FnOnce(LossNotice) + Send + 'static) {
        let mut cbs = self
            .loss
            .callbacks
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(n) = self.loss.get() {
            drop(cbs);
            f(n);
            return;
        }
        cbs.push(Box::new(f));
    }

    /// A channel that receives the loss notice (at once if the lease is already lost).
    pub fn loss_channel(&self) -> std::sync::mpsc::Receiver<LossNotice> {
        let (tx, rx) = std::sync::mpsc::channel();
        self.on_lost(move |n| {
            let _ = tx.send(n);
        });
        rx
    }

    /// Converts the held lease to shared (`shared`) or exclusive (CONVERT). The fencing
    /// token is read again: a convert to exclusive commits a new lease version. On an
    /// error the lease is held as before.
    pub fn convert(&mut self, shared: bool) -> Result<(), ClientLeaseError> {
        let head = self.spec.resource(shared)?.head;
        let Some(client) = self.client.as_mut() else {
            // Only a released lease has no connection, and release consumes the Lease.
            return Err(ClientLeaseError::Refused {
                op: "convert",
                lease: self.spec.to_string(),
                rv: -2, // ENOENT: nothing held
            });
        };
        let rv = client.convert(-1, 0, &head)?;
        if rv < 0 {
            return Err(ClientLeaseError::Refused {
                op: "convert",
                lease: self.spec.to_string(),
                rv,
            });
        }
        self.shared = shared;
        self.token = token_of(client, &self.run_dir, &self.spec)?;
        Ok(())
    }

    /// Releases the lease (also done on drop).
    pub fn release(mut self) -> Result<(), ClientLeaseError> {
        self.release_inner()
    }

    /// Lets go of the lease without releasing it: the watch ends and the registered
    /// connection closes, as at this process's exit. A persistent lease
    /// ([`LeaseAcquireOptions::persistent`]) stays held by this host as an orphan, at the
    /// same token, for a process here to adopt; any other lease the daemon releases.
    pub fn leave_as_orphan(mut self) {
        self.stop_watch();
        drop(self.client.take());
    }

    fn stop_watch(&mut self) {
        self.loss
            .closing
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let _ = self.watch_stream.shutdown(std::net::Shutdown::Both);
        if let Some(t) = self.watch_thread.take() {
            let _ = t.join();
        }
    }

    fn release_inner(&mut self) -> Result<(), ClientLeaseError> {
        self.stop_watch();
        let Some(mut c) = self.client.take() else {
            return Ok(());
        };
        let head = self.spec.resource(self.shared)?.head;
        let rv = c.release(-1, 0, &[head])?;
        self.answered("release", rv)
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let _ = self.release_inner();
    }
}

/// The fencing token at which the registered connection `client` holds `spec`: the lver,
/// from INQUIRE for an exclusive lease, from the leader record for a shared one (INQUIRE
/// shows `:SH` there; that takes lockd's LEADER extension of the daemon in `run_dir`).
pub fn token_of(
    client: &mut Client,
    run_dir: &Path,
    spec: &LeaseSpec,
) -> Result<u64, ClientLeaseError> {
    let (rv, _, state) = client.inquire(-1)?;
    if rv < 0 {
        return Err(ClientLeaseError::Refused {
            op: "inquire",
            lease: spec.to_string(),
            rv,
        });
    }
    let prefix = format!("{}:{}:", spec.lockspace, spec.name);
    for item in state.split_whitespace() {
        if !item.starts_with(&prefix) {
            continue;
        }
        let last = item.rsplit(':').next().unwrap_or_default();
        if last == "SH" {
            return Ok(leader(run_dir, spec)?.token);
        }
        if let Ok(lver) = last.parse::<u64>() {
            return Ok(lver);
        }
    }
    Err(ClientLeaseError::Refused {
        op: "inquire (lease not listed)",
        lease: spec.to_string(),
        rv: -2,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_say_what_the_code_means_for_a_lease() {
        let refused = |op, rv| {
            ClientLeaseError::Refused {
                op,
                lease: "ls:r".into(),
                rv,
            }
            .to_string()
        };
        assert_eq!(
            refused("acquire", -28),
            "acquire ls:r: the lockspace is not joined on this host (-28)"
        );
        assert!(refused("acquire", -117).contains("an orphan of this lease is held here"));
        assert!(refused("release", -2).contains("No such file"));
    }

    #[test]
    fn spec_parsing() {
        let s = LeaseSpec::parse("ls:leader:/dev/loop0:1M").unwrap();
        assert_eq!(s.offset, 1 << 20);
        assert_eq!(s.path, "/dev/loop0");
        assert_eq!(s.short(), "ls:leader");
        let s = LeaseSpec::parse("ls:r:/a:b/c:4096").unwrap();
        assert_eq!(s.path, "/a:b/c");
        assert_eq!(s.offset, 4096);
        for bad in [
            "",
            "ls",
            "ls:r",
            "ls:r:/p",
            "ls:r::0",
            "ls:r:/p:x",
            ":r:/p:0",
            "ls::/p:0",
            "ls:r:/p:99999999999999999999G",
        ] {
            assert!(LeaseSpec::parse(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn spec_on_several_disks() {
        let s = LeaseSpec::parse("ls:r:/a:0:/b:1M:/c:4096").unwrap();
        assert_eq!((s.path.as_str(), s.offset), ("/a", 0));
        assert_eq!(
            s.more_disks,
            vec![("/b".to_string(), 1 << 20), ("/c".to_string(), 4096)]
        );
        assert_eq!(s.to_string(), "ls:r:/a:0:/b:1048576:/c:4096");
        let r = s.resource(false).unwrap();
        assert_eq!(r.head.num_disks, 3);
        assert_eq!(r.disks.len(), 3);
        assert_eq!(r.disks[2].offset, 4096);
        // A path with a colon on one disk still parses as before.
        assert_eq!(
            LeaseSpec::parse("ls:r:/a:b/c:4096").unwrap().more_disks,
            vec![]
        );
        assert!(LeaseSpec::parse("ls:r:/a:0:/b:0:/c:0:/d:0:/e:0").is_err());
        assert!(LeaseSpec::parse("ls:r:/a:0::0").is_err());
        assert_eq!(LeaseSpec::parse(&s.to_string()).unwrap(), s);
    }

    #[test]
    fn events_map_to_reasons_only_for_our_lease() {
        let spec = LeaseSpec::parse("ls:r1:/p:0").unwrap();
        let mut e = WatchEvent::heartbeat(1, 1);
        assert_eq!(loss_reason(&e, &spec), None);
        e.kind = WatchKind::RenewalFailing;
        e.lockspace = Name::new("other").unwrap();
        assert_eq!(loss_reason(&e, &spec), None);
        e.lockspace = Name::new("ls").unwrap();
        assert_eq!(loss_reason(&e, &spec), Some(LossReason::RenewalFailing));
        e.kind = WatchKind::Requested;
        e.resource = Name::new("r2").unwrap();
        assert_eq!(loss_reason(&e, &spec), None);
        e.resource = Name::new("r1").unwrap();
        e.force_mode = 1;
        assert_eq!(
            loss_reason(&e, &spec),
            Some(LossReason::Requested { force_mode: 1 })
        );
    }

    #[test]
    fn loss_is_declared_once_and_callbacks_run() {
        let st = LossState::default();
        let hits = Arc::new(Mutex::new(Vec::new()));
        let h2 = hits.clone();
        st.callbacks
            .lock()
            .unwrap()
            .push(Box::new(move |n: LossNotice| {
                h2.lock().unwrap().push(n.reason)
            }));
        let n = |reason| LossNotice {
            reason,
            at: Instant::now(),
            kill_in: None,
            watchdog_in: None,
        };
        st.declare(n(LossReason::DaemonSilent));
        st.declare(n(LossReason::DaemonGone));
        assert_eq!(st.get().unwrap().reason, LossReason::DaemonSilent);
        assert_eq!(*hits.lock().unwrap(), vec![LossReason::DaemonSilent]);
    }

    #[test]
    fn busy_codes() {
        assert!(is_busy_code(-243));
        assert!(is_busy_code(-11));
        assert!(is_busy_code(-16));
        assert!(!is_busy_code(-2));
        assert!(!is_busy_code(-28));
    }
}
