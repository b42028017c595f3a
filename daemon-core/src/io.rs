//! What goes into the core and what comes out of it: [`Input`] (what happened, for
//! [`Core::step`](crate::Core::step)), [`Effect`] (what the shell is to do, in order), a
//! client's request ([`CoreRequest`]) and its answer ([`CoreReply`]), the disk operations
//! the core asks for ([`DiskOp`], identified by [`OpId`]), and the values they carry
//! (kill orders, watch recipients, lease times, the status summary).
//!
//! Invariant: this module is a leaf of the crate's import graph: it holds data only and
//! imports nothing of the crate but the modules of the state those values name
//! (`clients`, `events`, `fencing`, `space_state`, `tables`), none of which imports the
//! step, the commands, the kill decision or the watches
//! (`daemon-core/tests/module_graph.rs`).

use client_lib::ext::WatchKind;
use client_lib::wire;
use disk_format::Name;
use lease_core::monitor::Notification;

use crate::clients::{ClientToken, FsCreds, KillPath, Refused};
use crate::events::HostEvent;
use crate::fencing::{FenceAction, FenceVerdict, KeysRead, PeerFenceOutcome};
use crate::space_state::RenewalRec;
use crate::tables::{CommandTarget, Key, TableRefused};
use lease_core::monitor::HostMonitor;
use lease_core::LeaseError;

/// The id of one disk operation the core asked for ([`Effect::Disk`]); its completion
/// comes back as [`Input::DiskDone`] with the same id.
pub type OpId = u64;

/// A lockspace's lease as a notice gives it to its watchers (their deadlines): its last
/// renewal, and when it expires if not renewed — the tick that finds it that old orders
/// the kills (`id_renewal_fail_seconds` after the renewal), and the watchdog fires its
/// fire timeout later.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseTimes {
    pub last_success_s: u64,
    pub expires_at_s: u64,
}

/// The delta lease a join of the shell took ([`Input::JoinEnded`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JoinedLease {
    pub generation: u64,
    /// When the lease was acquired (its first renewal), monotime s.
    pub last_success_s: u64,
    /// Monotime ms taken just before the join's last write (the record the lease is
    /// timed from) was sent: that record landed no earlier.
    pub write_sent_ms: u64,
    /// Monotime ms when the join had ended: that record landed no later.
    pub ended_ms: u64,
}

/// What the daemon is doing, for sd_notify's `STATUS=` line: lockspaces joined (not
/// being removed), leases in the table (orphans included), registered clients. The
/// shell adds what only it knows (the watchdog).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StatusSummary {
    pub lockspaces: usize,
    pub leases: usize,
    pub clients: usize,
}

/// Where a lockspace the shell lists keeps its delta leases: our host_id and the disk
/// area (path and offset) ADD_LOCKSPACE named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpacePlace {
    pub host_id: u64,
    pub path: String,
    pub offset: u64,
}

/// A lockspace the shell is adding ([`Input::ListSpace`]): listed under `id`, with its
/// delta leases at `place` and its host monitor.
#[derive(Debug, Clone)]
pub struct SpaceListing {
    pub id: u32,
    pub name: Name,
    pub place: SpacePlace,
    pub io_timeout_s: u64,
    pub monitor: HostMonitor,
}

/// Why the core refused to list a lockspace the shell is adding (ADD_LOCKSPACE's
/// admission, [`Input::ListSpace`]); the shell maps each to sanlock's code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListRefused {
    /// A lockspace of that name is being removed (-EAGAIN: it may be added once gone).
    BeingRemoved,
    /// The same lockspace (name, host_id, disk) is being added (-EINPROGRESS).
    BeingAdded,
    /// The same lockspace is joined already (-EEXIST).
    Joined,
    /// A lockspace of that name is here with another host_id or disk (-EINVAL).
    OtherPlace,
    /// Another lockspace keeps its delta leases on that disk area (-EINVAL).
    DiskAreaTaken,
}

/// One lease to acquire: `sanlk_resource` as the core needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResSpec {
    pub ls: Name,
    pub name: Name,
    pub shared: bool,
    pub persistent: bool,
    pub disks: Vec<wire::DiskLocation>,
    /// `SANLK_RES_LVER`: the lease version the client requires (the disk acquire fails
    /// with `SANLK_ACQUIRE_LVER` when the lease is at another).
    pub lver: Option<u64>,
    /// `SANLK_RES_NUM_HOSTS`: the number of hosts a disk acquire writes into the leader
    /// (the request's `data32`).
    pub new_num_hosts: Option<u64>,
}

impl ResSpec {
    pub fn key(&self) -> Key {
        (self.ls, self.name)
    }

    /// Lease `key`, exclusive and not persistent, with no disks named and nothing
    /// required of its version or host count.
    pub fn exclusive(key: Key) -> ResSpec {
        ResSpec {
            ls: key.0,
            name: key.1,
            shared: false,
            persistent: false,
            disks: Vec::new(),
            lver: None,
            new_num_hosts: None,
        }
    }
}

/// A client's request, decoded by the shell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CoreRequest {
    /// REGISTER: the connection's process becomes a client that can hold leases. No
    /// reply (sanlock's REGISTER has none).
    Register,
    /// ADD_LOCKSPACE: the shell joins it ([`Effect::JoinLockspace`]) and reports the end
    /// with [`Input::JoinDone`].
    AddLockspace {
        ls: Name,
        host_id: u64,
        io_timeout_s: u64,
    },
    /// REM_LOCKSPACE of `ls` (the one listed under `id`, when the shell matched it by its
    /// disk, as sanlock's `_search_space`): refused while leases are held in it and
    /// `unused_only` (`SANLK_REM_UNUSED`), while its orphans are kept (`used_by_orphans`),
    /// or while a removal is in progress. Otherwise its orphans are released, its
    /// holders' watchers told ([`Effect::LossNotice`], `LockspaceRemoved`), and the
    /// holders killed with SIGKILL from the next tick on. A lockspace the shell listed
    /// is stopped ([`Effect::StopLockspace`]) and goes when the shell reports its thread
    /// ended ([`Input::LockspaceEnded`]); the core's own goes when no lease of it is
    /// left ([`Effect::LockspaceGone`]). Answered then, or at once when not `wait`
    /// (`SANLK_REM_ASYNC`).
    RemLockspace {
        ls: Name,
        id: Option<u32>,
        unused_only: bool,
        wait: bool,
    },
    /// ACQUIRE of one or more leases, in order; all or none. `owner_name`: the options'
    /// name, which every ACQUIRE gives the client anew (empty included), as sanlock's. A
    /// lease being released here is waited for, up to [`release_wait_s`](crate::release_wait_s) (then -EAGAIN).
    /// `opener`: the sender's credentials, with which each disk acquire opens the
    /// lease's disks ([`DiskOp::Acquire`]); None opens with the daemon's own rights.
    Acquire {
        res: Vec<ResSpec>,
        cmd_flags: u32,
        owner_name: Name,
        opener: Option<FsCreds>,
    },
    /// RELEASE of the named leases, or of all the client's (`all`: `SANLK_REL_ALL`; none
    /// named and not `all` is a successful no-op, as sanlock's); answered after the disk
    /// releases ended. `rename`: `SANLK_REL_RENAME`'s new name for the leaders this host
    /// clears ([`DiskOp::Release`]).
    Release {
        keys: Vec<Key>,
        all: bool,
        rename: Option<Name>,
    },
    /// CONVERT one lease to shared or exclusive; `cmd_flags` are the request's
    /// (`SANLK_ACQUIRE_OWNER_NOWAIT`), for the disk convert.
    Convert {
        key: Key,
        to_shared: bool,
        cmd_flags: u32,
    },
    /// INQUIRE: the client's leases.
    Inquire,
    /// SET_EVENT in lockspace `ls` (not gone): the event our renewals carry to its
    /// target, and the bits they set (`SANLK_SETEV_*` flags; `he.generation` already
    /// the target's current one when `SETEV_CUR_GENERATION` asked for it). Answered at
    /// once: 0, -ENOENT, -EINVAL (a host_id beyond the lockspace's hosts), -EBUSY
    /// (another event is being sent: [`crate::events::Outgoing::set_event`]).
    SetEvent { ls: Name, he: HostEvent, flags: u32 },
    /// REQUEST of lease `ls:name` (`lver`, or the next one with `SANLK_REQUEST_NEXT_LVER`)
    /// with `force_mode`: -ENOSPC unless the lockspace is joined and not lost (as
    /// sanlock), else the shell writes the request record ([`Effect::WriteRequest`]).
    /// When the lease has an owner and the request asks for something (an lver, a force
    /// mode, or the next lver), our renewals set the owner host's bit for
    /// `set_bitmap_seconds`, so that it examines its leases. Answered after the write.
    RequestLease {
        ls: Name,
        name: Name,
        lver: u64,
        next_lver: bool,
        force_mode: u32,
    },
    /// `LOCKD_CMD_WATCH` (lockd extension): the connection becomes a lease-loss watch of
    /// process `pid` (0: its own), answered at once: 0, or -EINVAL (no pid), -EPERM (a
    /// non-root caller and another uid's process), -EMFILE
    /// ([`MAX_WATCHES`](crate::watches::MAX_WATCHES) open). From the reply on, the
    /// notices for that pid name the connection ([`WatchTo`]).
    Watch { pid: i32 },
    /// RELEASE with `SANLK_REL_ORPHAN`: release the orphans of `ls` (the one named
    /// `name`, or all when it is empty) on disk; answered when those releases ended.
    ReleaseOrphans { ls: Name, name: Name },
}

impl CoreRequest {
    pub fn kind(&self) -> ReqKind {
        match self {
            CoreRequest::Register => ReqKind::Register,
            CoreRequest::AddLockspace { .. } => ReqKind::AddLockspace,
            CoreRequest::RemLockspace { .. } => ReqKind::RemLockspace,
            CoreRequest::Acquire { .. } => ReqKind::Acquire,
            CoreRequest::Release { .. } => ReqKind::Release,
            CoreRequest::Convert { .. } => ReqKind::Convert,
            CoreRequest::Inquire => ReqKind::Inquire,
            CoreRequest::ReleaseOrphans { .. } => ReqKind::ReleaseOrphans,
            CoreRequest::Watch { .. } => ReqKind::Watch,
            CoreRequest::SetEvent { .. } => ReqKind::SetEvent,
            CoreRequest::RequestLease { .. } => ReqKind::RequestLease,
        }
    }
}

/// Which request a [`CoreReply`] answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReqKind {
    Register,
    AddLockspace,
    RemLockspace,
    Acquire,
    Release,
    Convert,
    Inquire,
    ReleaseOrphans,
    Watch,
    SetEvent,
    RequestLease,
}

/// A lease as a reply names it (INQUIRE's state string is made from it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldLease {
    pub ls: Name,
    pub name: Name,
    pub disks: Vec<wire::DiskLocation>,
    pub shared: bool,
    pub lver: u64,
}

impl From<&ClientToken> for HeldLease {
    fn from(t: &ClientToken) -> HeldLease {
        HeldLease {
            ls: t.ls,
            name: t.name,
            disks: t.disks.clone(),
            shared: t.shared,
            lver: t.lver,
        }
    }
}

/// The answer to one request: sanlock's result code (0 or -errno) and, for ACQUIRE,
/// CONVERT and INQUIRE, the leases concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CoreReply {
    pub kind: ReqKind,
    pub rv: i32,
    pub leases: Vec<HeldLease>,
    /// Why a request was refused, for the shell's log (`None` for most codes, whose
    /// meaning is the code's).
    pub why: Option<&'static str>,
}

/// A paxos-lease operation for the shell to run on disk (with lease-core), answered by
/// [`Input::DiskDone`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DiskOp<H> {
    /// Acquire `key`, with the request's `cmd_flags` and the lease version it requires
    /// (`want_lver`); the completion carries the held lease's state. The disks are
    /// opened with `opener`'s rights, the ACQUIRE's sender's (None: the daemon's own).
    Acquire {
        key: Key,
        shared: bool,
        disks: Vec<wire::DiskLocation>,
        want_lver: Option<u64>,
        new_num_hosts: Option<u64>,
        cmd_flags: u32,
        opener: Option<FsCreds>,
    },
    /// Release `key`, held as `held` on `disks`; when `rename` is given, a leader this
    /// host clears is written with that name (`SANLK_REL_RENAME`). The completion's
    /// value is not used.
    Release {
        key: Key,
        held: H,
        disks: Vec<wire::DiskLocation>,
        rename: Option<Name>,
    },
    /// Convert `key`, held as `held` on `disks`, with the request's `cmd_flags`; the
    /// completion carries the new state.
    Convert {
        key: Key,
        held: H,
        disks: Vec<wire::DiskLocation>,
        to_shared: bool,
        cmd_flags: u32,
    },
}

/// What happened, for [`Core::step`](crate::Core::step). `S` is the shell's connection handle, `H` the
/// on-disk state of a held lease.
#[derive(Debug, Clone)]
pub enum Input<S, H> {
    /// The monitor's periodic look at every lockspace's lease (once a second).
    Tick,
    /// A renewal of lockspace `id`, or a read between renewals (a fenced lockspace's:
    /// lease-core `delta::observe_reading`), read the delta sectors of host_ids
    /// 1..=`sectors.len()`, completing at `read_at_ms` (monotime; `sectors[i]`: host_id
    /// i+1's, `None` when it did not decode): the whole area (`whole_area`) or its head
    /// (lease-core's `reads`). The host monitor records it (in whole seconds, fencing's
    /// ages in ms); the notifications addressed to us come back as
    /// [`Effect::HostNotifications`].
    HostsRead {
        id: u32,
        read_at_ms: u64,
        sectors: lease_core::sectors::HostSectors,
        whole_area: bool,
    },
    /// The join of fenced lockspace `id` registered our storage key `key` (again, when
    /// the acquire wrote another generation than expected); `preempt_cfg_s` is
    /// `fence_preempt_s`; `acts`: this host reserves and preempts (`fence = "scsi-pr"`),
    /// not only registers (`"register-only"`).
    FenceRegistered {
        id: u32,
        key: u64,
        preempt_cfg_s: u64,
        acts: bool,
    },
    /// Our key of lockspace `id` was removed (a clean leave).
    FenceUnregistered { id: u32 },
    /// The fence thread's look at lockspace `id` (once a second): [`Effect::Fence`]
    /// `ReadKeys` when a peer has missed renewals.
    FenceLook { id: u32 },
    /// The key list the last `ReadKeys` asked for, and when the read had ended
    /// (monotime ms): our record's stillness is measured up to then.
    FenceKeysRead {
        id: u32,
        read: KeysRead,
        read_at_ms: u64,
    },
    /// A `Preempt` the core asked for ended.
    PeerFenceDone {
        id: u32,
        host_id: u64,
        generation: u64,
        outcome: PeerFenceOutcome,
    },
    /// A renewal of lockspace `id` succeeded; `last_success_s` is the lease's new time
    /// (when the renewal began: the lease is as old as that, not as the step). Safety:
    /// a later time would make the expiry check count our lease younger than the other
    /// hosts see it, so our holders could be killed after those hosts already take
    /// their leases (host_dead counts from the timestamp on disk). Keyed by
    /// id, not name: a report can come after its lockspace went (the fence thread's
    /// verdict reads the device while our key is being unregistered) and a new one of
    /// the same name was added, which it must not touch. A gone lockspace's is ignored.
    RenewalOk {
        id: u32,
        last_success_s: u64,
        rec: RenewalRec,
    },
    /// A renewal of lockspace `id` failed with sanlock code `code`; `corrupt` when our
    /// delta sector was found damaged or taken, or our storage key is gone (fenced).
    RenewalFailed { id: u32, code: i32, corrupt: bool },
    /// The join of lockspace `id` begins its delta acquire, on a disk of `geometry`.
    JoinStarted {
        id: u32,
        geometry: disk_format::Geometry,
    },
    /// A renewal of lockspace `id` begins (RENEWAL's and STATUS's last attempt).
    RenewalStarted { id: u32 },
    /// Lockspace `id`'s thread is releasing our delta lease (the removal's second step:
    /// INQ_LOCKSPACE answers "in progress" from now on).
    DeltaReleasing { id: u32 },
    /// A connection (`fd`) was accepted from process `pid` of `uid`. `replacing_own`:
    /// the shell just closed an idle connection of the same uid to make room for it (the
    /// reactor's eviction, after a [`Refused`]): the slot takes its place, the total and
    /// the uid's bounds are not checked again (`Clients::add_in_place_of_own`).
    Connected {
        fd: i32,
        pid: i32,
        uid: u32,
        stream: Option<S>,
        replacing_own: bool,
    },
    /// A request arrived on connection `ci`.
    Request { ci: u32, req: CoreRequest },
    /// A lease command (RELEASE, CONVERT, INQUIRE, ACQUIRE) for client `target`, whose
    /// command the shell has begun itself ([`Input::StartCommand`], with the header's
    /// target rules — another client by pid, a connection-less slot — before reading the
    /// payload, as sanlock does). The core runs it as a `Request`'s, ends the command
    /// (`finish_command`) when it answers, and releases then the leases of a client
    /// that died meanwhile.
    Command { target: u32, req: CoreRequest },
    /// The disk operation `op` ended: the lease's new state, or sanlock's error code.
    /// `failed_state`: after a failure, the lease's state when the operation changed it
    /// on the way (a convert that failed half-way: lease-core's token then holds our
    /// newer dblock and how to release it). It must be kept: a release with the token of
    /// before would write an older dblock over the ballot's, and an accepted value could
    /// be forgotten — two exclusive holders (found by `lockd-daemon-sim`).
    DiskDone {
        op: OpId,
        result: Result<H, i32>,
        failed_state: Option<H>,
    },
    /// The join that [`Effect::JoinLockspace`] asked for ended.
    JoinDone { ls: Name, result: Result<(), i32> },
    /// Connection `ci` closed: its process is gone (a registered client's socket closes
    /// with it; a `--for-pid` slot's process is seen to exit by its pidfd) or let go of
    /// it.
    Closed { ci: u32 },
    /// The shell read the request record of lease `ls:name`, held at `lver`, and found
    /// another host asking for a newer lver with `force_mode` (`SANLK_REQ_FORCE`,
    /// `SANLK_REQ_GRACEFUL`): the holders' notice, then their kill orders
    /// ([`crate::kill::examined_lease`]).
    Examined {
        ls: Name,
        name: Name,
        lver: u64,
        force_mode: u32,
    },
    /// The shell took these tokens from client `ci` (the leases a failed acquire had
    /// taken, a client that died during a command the shell ran): each is
    /// released ([`Tables::start_release`](crate::Tables::start_release)); the last
    /// holder's needs a disk release ([`Effect::Disk`], answered by `DiskDone`).
    /// `dying`: the holder is dead, so a persistent lease becomes an orphan instead.
    /// Nobody is answered: the shell that asked waits for the completions of the
    /// operations it was given.
    ReleaseTokens {
        ci: u32,
        tokens: Vec<ClientToken>,
        dying: bool,
    },
    /// Release the idle orphans of `ls` on disk (the one named `name`, or all when it is
    /// empty) for the shell: a lockspace being removed or retired, or a RELEASE of
    /// orphans the shell has permitted. One [`Effect::Disk`] per orphan; nobody is
    /// answered.
    ReleaseOrphans { ls: Name, name: Name },
    /// The helper reported how a killpath run for process `pid` ended (`exit:N`,
    /// `signal:N`, `noexec:ERRNO`): kept on the process's clients for STATUS
    /// ([`Tables::killpath_ended`](crate::Tables::killpath_ended), the transition the
    /// daemon's helper status thread runs).
    KillpathEnded { pid: i32, status: String },
    /// The join of lockspace `id`, listed by the shell, ended: our delta lease with its
    /// generation and the time of its acquire (monotime s), or sanlock's code. A join
    /// that ends while the lockspace is being removed (REM_LOCKSPACE or a forced
    /// shutdown came during it) is answered -1, as sanlock's `add_lockspace_wait` undoes
    /// such an add; the shell then releases the lease it just took.
    JoinEnded {
        id: u32,
        result: Result<JoinedLease, i32>,
    },
    /// SET_CONFIG on lockspace `id`, listed by the shell: whether orphans of it are kept
    /// (`used_by_orphans`: REM_LOCKSPACE refused, a lost lockspace's orphans kept) and
    /// whether it is in use outside (`external_used`, reported only).
    SetConfig {
        id: u32,
        used_by_orphans: Option<bool>,
        external_used: Option<bool>,
    },
    /// The thread of lockspace `id`, listed by the shell, has ended (its join failed,
    /// or it stopped and released or left its delta lease): the lockspace is gone, and
    /// the REM_LOCKSPACE waiting for it is answered.
    LockspaceEnded { id: u32 },
    /// A forced shutdown: every lockspace not being removed yet is removed as by
    /// REM_LOCKSPACE (its holders' notice, then SIGKILL from the next tick on), with
    /// nobody to answer.
    Shutdown,
    /// The request record write [`Effect::WriteRequest`] asked for ended: the host_id
    /// that owns the lease (`None`: nobody), or sanlock's code.
    RequestWritten {
        op: OpId,
        result: Result<Option<u64>, i32>,
    },
    /// Time for a heartbeat on every watch connection ([`Effect::WatchBeats`]; none
    /// when no watch is open).
    WatchTick,
    /// The shell could not write to watch connection `ci` (within its write timeout):
    /// the watch ends; the connection itself stays until it closes.
    WatchDropped { ci: u32 },
    /// A command `cmd` arrived on connection `ci` (STATUS shows it as `cmd_last`). No
    /// effect.
    NoteCommand { ci: u32, cmd: u32 },
    /// RESTRICT: connection `ci`'s restriction flags. No effect.
    SetRestrict { ci: u32, flags: u32 },
    /// KILLPATH: the program run for client `ci` before it is signalled. Answered
    /// [`Answer::KillpathSet`].
    SetKillpath { ci: u32, killpath: KillPath },
    /// The shell begins a registered-client command on the client its header names
    /// (before reading the payload, as sanlock does; the tables' `start_command`).
    /// Answered [`Answer::CommandStarted`]; the command then goes to the core as
    /// [`Input::Command`], or the shell ends it with [`Input::FinishCommand`].
    StartCommand(CommandTarget),
    /// The shell ends the command it began on client `target` and did not hand to the
    /// core. Answered [`Answer::CommandFinished`]: the tokens of a client that died
    /// meanwhile, for the shell to release as a dead holder's ([`Input::ReleaseTokens`]).
    FinishCommand { target: u32 },
    /// `lockd acquire --for-pid`: a connection-less client slot for process `pid` of
    /// `uid`, registered and with an ACQUIRE running. Answered [`Answer::PidClientAdded`].
    AddPidClient {
        pid: i32,
        uid: u32,
        killpath: Option<KillPath>,
    },
    /// A `--for-pid` slot whose ACQUIRE failed goes (the core gave back what it took).
    /// Answered [`Answer::PidClientDropped`].
    DropFailedPidClient { ci: u32 },
    /// ADD_LOCKSPACE's admission, then the listing (sanlock's `add_lockspace_start`
    /// checks; listed as by [`Core::add_space`](crate::Core::add_space)). Answered
    /// [`Answer::Listed`].
    ListSpace(SpaceListing),
    /// SET_LVB: the value block of held lease `key` ([`LeaseHold::set_lvb`](crate::LeaseHold::set_lvb)).
    /// Answered [`Answer::LvbSet`].
    SetLvb { key: Key, lvb: Vec<u8> },
}

/// What the shell is to do, in the order given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect<H> {
    /// Host events and examine requests addressed to us in lockspace `id`, found by its
    /// renewal's read ([`Input::HostsRead`]): the shell delivers the events to REG_EVENT
    /// connections, and examines our leases' request records when `examine` (a host's
    /// bit not examined for within `set_bitmap_seconds`).
    HostNotifications {
        id: u32,
        notes: Vec<Notification>,
        examine: bool,
    },
    /// The next PR command(s) of lockspace `id`'s fence pass ([`crate::fencing`]).
    Fence { id: u32, action: FenceAction },
    /// A fencing decision on lockspace `id` (`ls`), already applied by the step: for the
    /// log (and, for `WeAreFenced`, the lease is lost from this step on).
    FenceVerdict {
        id: u32,
        ls: Name,
        verdict: FenceVerdict,
    },
    /// Tell the watchers of these holder pids that their leases in `ls` are going.
    LossNotice {
        ls: Name,
        kind: WatchKind,
        pids: Vec<i32>,
        /// The watch connections of those pids, which the shell writes the notice to
        /// (filled in by the step that gives it: [`Watches::address`](crate::Watches::address)).
        to: Vec<WatchTo>,
        /// The lockspace's lease times, for the notice's deadlines (filled in by the
        /// step that gives it; `None` when the lockspace is not here).
        lease: Option<LeaseTimes>,
    },
    /// Log: our lease in `ls` was found lost, `age_s` after the last renewal.
    LockspaceFailed { ls: Name, age_s: u64, corrupt: i32 },
    /// Log: renewals of `ls` have failed for `age_s`.
    RenewalsFailing { ls: Name, age_s: u64 },
    /// Tell the watchers of these holder pids that another host requested lease
    /// `ls:name`, held at `lver`, with `force_mode` (before any kill order for it).
    RequestNotice {
        ls: Name,
        name: Name,
        lver: u64,
        force_mode: u32,
        pids: Vec<i32>,
        /// The watch connections of those pids ([`Watches::address`](crate::Watches::address)).
        to: Vec<WatchTo>,
        /// The lockspace's lease times, for the notice's deadlines.
        lease: Option<LeaseTimes>,
    },
    /// One heartbeat to each watch connection, with its process's lease count
    /// ([`Input::WatchTick`]).
    WatchBeats { beats: Vec<WatchBeat> },
    /// A kill order for a holder of leases in `ls` (a lost or removed lockspace's, or a
    /// request's for one lease of it).
    Kill { ls: Name, order: KillOrder },
    /// The connection is client slot `ci` from now on.
    Accepted { ci: u32 },
    /// The connection got no slot: close it.
    Refused { why: Refused },
    /// Write this reply on connection `ci`.
    Reply { ci: u32, reply: CoreReply },
    /// Run this paxos operation on a lease of lockspace `ls`; answer with
    /// [`Input::DiskDone`] `op`. `client`: the client whose command waits for it or whose
    /// lease it releases (none for an orphan's release). A shell that runs each
    /// client's command on its own thread runs the operation there (an acquire with that
    /// client's rights), whichever step gave it.
    Disk {
        op: OpId,
        ls: Name,
        client: Option<u32>,
        what: DiskOp<H>,
    },
    /// Join `ls` (acquire our delta lease), start renewing it, then [`Input::JoinDone`].
    JoinLockspace { ls: Name, io_timeout_s: u64 },
    /// `ls` left the core: stop renewing it; release our delta lease unless it is `lost`.
    LockspaceGone { ls: Name, lost: bool },
    /// A lockspace the shell listed (under `id`, [`Core::add_space`](crate::Core::add_space)) lost its lease and
    /// no lease of it is left in the table: it is being removed now (phase `Removing`).
    /// The shell stops renewing it and leaves its delta lease on disk to expire (sanlock
    /// frees a failed lockspace so); it marks the lockspace gone when its thread ends.
    RetireLockspace { ls: Name, id: u32 },
    /// Lockspace `id`, listed by the shell, is being removed (REM_LOCKSPACE, a forced
    /// shutdown; phase `Removing`): the shell stops its join or its renewals; its thread
    /// releases the delta lease once no lease of it is left in the table and reports
    /// [`Input::LockspaceEnded`].
    StopLockspace { ls: Name, id: u32 },
    /// Write the request record of lease `ls:name` (lease-core's `paxos::request`: a
    /// newer lver asked for, `lver` exactly or the next one, with `force_mode`) for client
    /// `ci`'s REQUEST, answered by [`Input::RequestWritten`] with the same `op`.
    WriteRequest {
        op: OpId,
        ci: u32,
        ls: Name,
        name: Name,
        lver: u64,
        next_lver: bool,
        force_mode: u32,
    },
    /// Close connection `ci`.
    Close { ci: u32 },
    /// The value of one of the shell's own inputs (the step's only effect), for the
    /// shell that stepped it.
    Answer(Answer),
    /// What the daemon is doing changed since the last tick that gave one (the first
    /// tick always gives one): the shell's sd_notify `STATUS=` line.
    Status(StatusSummary),
}

/// What the core answers the shell's own inputs that have a value ([`Effect::Answer`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// [`Input::StartCommand`]: the client the command runs on, or why not.
    CommandStarted(Result<u32, TableRefused>),
    /// [`Input::FinishCommand`]: the tokens of a client that died during the command.
    CommandFinished(Option<Vec<ClientToken>>),
    /// [`Input::SetKillpath`]: the client's pid, or `None` when its slot is gone.
    KillpathSet(Option<i32>),
    /// [`Input::AddPidClient`]: the new slot, or why not.
    PidClientAdded(Result<u32, TableRefused>),
    /// [`Input::DropFailedPidClient`]: refused (the slot kept) while it holds a token.
    PidClientDropped(Result<(), TableRefused>),
    /// [`Input::ListSpace`]: listed, or why not (nothing listed).
    Listed(Result<(), ListRefused>),
    /// [`Input::SetLvb`]: `None` when the lease is not held here (or holds no value
    /// block state), else lease-core's result.
    LvbSet(Option<Result<(), LeaseError>>),
}

impl Answer {
    /// The value of a step of one of the shell's own inputs: its one effect, an
    /// [`Effect::Answer`]. Panics on anything else (those inputs give nothing else).
    pub fn of<H: std::fmt::Debug>(fx: Vec<Effect<H>>) -> Answer {
        match <[Effect<H>; 1]>::try_from(fx) {
            Ok([Effect::Answer(a)]) => a,
            Ok([other]) => panic!("a shell input was answered with {other:?}"),
            Err(fx) => panic!("a shell input gave {} effects: {fx:?}", fx.len()),
        }
    }
}

/// One order of a kill pass, for the shell to carry out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KillOrder {
    /// Run this killpath for the client with this pid.
    RunKillpath {
        ci: u32,
        pid: i32,
        killpath: KillPath,
    },
    /// Send `sig` to the client's pid.
    Signal { ci: u32, pid: i32, sig: i32 },
    /// The client used up its [`KILL_COUNT_MAX`](crate::kill::KILL_COUNT_MAX) orders (said once).
    Exhausted { ci: u32, pid: i32 },
}

/// One recipient of a notice: the watch connection `ci`, watching process `pid`. The
/// shell writes to `ci` only while it is still the watch of `pid` it registered (a
/// slot number can be reused by a later connection).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct WatchTo {
    pub ci: u32,
    pub pid: i32,
}

/// One heartbeat: to watch connection `ci` of `pid`, which holds `leases` leases now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WatchBeat {
    pub ci: u32,
    pub pid: i32,
    pub leases: u32,
}
