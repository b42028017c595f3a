//! Delta leases and disk Paxos (sanlock 3.8/3.9 compatible), with no I/O and no clock of
//! its own.
//!
//! The algorithms are `async fn`s over two traits, [`Disk`] and [`Clock`]. The daemon runs
//! them on real disks with [`exec::block_on`]; the deterministic simulator (`sim`, binary
//! `lockd-sim`) runs many hosts' futures on one thread over one in-memory image. The
//! simulator and the bugs it plants to prove its checker exist only with the `sim`
//! feature, which no production crate enables.
//!
//! - [`timeouts`]: every formula tying io_timeout and the watchdog together.
//! - [`delta`]: host_id leases — [`delta::acquire`], [`delta::renew`], [`delta::release`].
//! - [`monitor`]: [`HostMonitor`] turns renewal reads into UNKNOWN/FREE/LIVE/FAIL/DEAD.
//! - [`reads`]: which part of the lockspace area each renewal reads.
//! - [`paxos`]: resource leases — [`paxos::acquire`], [`paxos::release`],
//!   [`paxos::convert`], [`paxos::request`], [`paxos::examine`], [`paxos::read_owners`].
//! - Errors are [`LeaseError`]; [`LeaseError::sanlk_code`] gives sanlock's result code.
#![forbid(unsafe_code)]

pub mod delta;
pub mod disks;
pub mod error;
pub mod exec;
pub mod io;
pub mod monitor;
pub mod paxos;
pub mod reads;
pub mod rindex;
pub mod sectors;
#[cfg(feature = "sim")]
pub mod sim;
pub mod timeouts;

#[cfg(test)]
mod tests_delta;
#[cfg(test)]
mod tests_multidisk;
#[cfg(test)]
mod tests_paxos;
#[cfg(test)]
mod tests_v5;
#[cfg(test)]
mod testutil;

pub use delta::{DeltaState, LockspaceParams, RenewInput};
pub use error::{IoOp, LeaseError};
pub use io::{Clock, Disk, IoError};
pub use monitor::{HostMonitor, HostObservation, HostObserver, HostState, Notification};
pub use paxos::{AcquireOptions, HostContext, Mode, ResourceParams, Token};
pub use timeouts::Timeouts;
