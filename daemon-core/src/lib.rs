//! lockd-core: the daemon's lease state as a pure value, driven from outside.
//!
//! The daemon (`lockd-daemon`) is a shell around it: sockets, threads, disk I/O, the
//! clock, signals and the helper process live there; this crate holds the state those
//! feed and the transitions that change it, each a plain function of the state and its
//! arguments. Nothing here does I/O, reads a clock, starts a thread or touches a socket
//! (no nix, libc or lockd-diskio dependency; `forbid(unsafe_code)`), so every transition
//! runs in a unit test exactly as it runs in the daemon.
//!
//! What is here (issue 23, docs/architecture.md: all of the daemon's lease state):
//! - [`clients`]: the client table ([`Clients`], one [`ClientSlot`] per connection or
//!   `--for-pid` process, with its [`ClientToken`]s) and the resource-table entry
//!   ([`LocalRes`]);
//! - [`tables`]: the one owner of both tables ([`Tables`]), the lease lifecycle's
//!   transitions and [`Tables::check`], the invariant check;
//! - [`space_state`]: one lockspace's status and its transitions (renewal outcomes, the
//!   expiry check that decides notice, loss and kill);
//! - [`kill`]: kill escalation as decisions ([`kill::plan_kills`]), and what a request
//!   from another host does to one lease's holders ([`kill::examined_lease`]);
//! - [`io`]: what goes in and comes out of the step ([`Input`], [`Effect`], a client's
//!   [`CoreRequest`] and its [`CoreReply`], the [`DiskOp`]s), data only, low in the
//!   import graph so that every module below the step can name it; `pending`: the work
//!   the core keeps in flight for its clients between steps;
//! - [`refusal`]: the core's own refusals of a request ([`Refusal`]), each with its
//!   sanlock code (`errno()`) and reason;
//! - [`step`]: [`step::Core::step`], the input → effects form, for three paths: a
//!   lockspace's lease growing old and lost (its holders' loss notices, then the kills),
//!   another host's request for a lease we hold (its notice, then its kill orders), and
//!   a client's requests (acquire, release, convert, inquire, add/remove a lockspace)
//!   with the disk operations they need and their completions (`commands`); the daemon
//!   keeps its lockspaces' statuses here ([`step::Core::add_space`]), runs the
//!   monitor's tick, the examine path and every lease command through `step` and
//!   carries out the effects in order;
//! - [`events`]: what our renewals carry to the other hosts (SET_EVENT's host event,
//!   REQUEST's and SET_EVENT's bitmap bits);
//! - [`fencing`]: storage fencing's decisions (whom to preempt, when a peer counts as
//!   fenced, when we are), with the lockspace's host monitor kept in the core too;
//! - [`watches`]: the lease-loss watch registry, which addresses every notice the step
//!   gives to the watch connections of the pids it names;
//! - `sim` (feature `sim` only): the whole-daemon simulator behind `lockd-daemon-sim`.
//!
//! The shell's own types enter as parameters: `S`, the handle it keeps with a connection
//! slot, and `H`, the on-disk state of a held lease ([`LeaseHold`]).
#![forbid(unsafe_code)]

pub mod clients;
mod commands;
pub mod errno;
pub mod events;
pub mod fencing;
pub mod io;
pub mod kill;
mod pending;
pub mod refusal;
#[cfg(feature = "sim")]
pub mod sim;
pub mod space_state;
pub mod step;
pub mod tables;
pub mod watches;

pub use clients::{
    ClientSlot, ClientToken, Clients, FsCreds, KillPath, LeaseHold, LocalRes, Refused, Waiting,
    MAX_CLIENTS, MAX_CLIENTS_PER_UID, ROOT_RESERVED_SLOTS,
};
pub use io::{
    Answer, CoreReply, CoreRequest, DiskOp, Effect, HeldLease, Input, JoinedLease, LeaseTimes,
    ListRefused, OpId, ReqKind, ResSpec, SpaceListing, SpacePlace, StatusSummary,
};
pub use kill::examined_lease;
pub use refusal::Refusal;
pub use step::{release_wait_s, Core, CorePlantedBug, CHEAP_CHECK_RESOURCES, MAX_GONE_SPACES};
pub use tables::{AcquireStart, CommandTarget, Key, ReleaseStart, TableRefused, Tables};
pub use watches::{WatchBeat, WatchRefused, WatchTo, Watches, MAX_WATCHES};
