//! SCSI-3 persistent reservations (SPC-4 §5.13, PERSISTENT RESERVE IN and OUT) and NVMe
//! reservations, sent with the Linux SG_IO ioctl or the block layer's PR ioctls (chosen
//! per device, see [`device`]): the primitive of storage fencing. A host registers a key on a
//! logical unit, one registrant holds a reservation (lockd uses Write Exclusive –
//! Registrants Only), and a survivor removes a failed host's key with PREEMPT, after which
//! the target refuses that host's writes with RESERVATION CONFLICT (EBADE in the kernel).
//!
//! Layers, each usable alone:
//! * [`cdb`]: the 10-byte CDBs and the 24-byte PR OUT parameter list, built byte-exactly;
//!   APTPL (persist through power loss) is always clear, because targets such as tgt refuse
//!   it and a fence that survives a target restart is not what lockd asks for;
//! * [`parse`]: READ KEYS, READ RESERVATION and REPORT CAPABILITIES answers, decoded from
//!   whatever bytes arrived (short, truncated or odd buffers give an error or a truncated
//!   list, never a panic);
//! * [`sense`]: SCSI status and sense data turned into [`PrError`] (RESERVATION CONFLICT,
//!   "not supported", UNIT ATTENTION, other check conditions, transport failures);
//! * [`key`]: lvmlockd's key format `0x100000YYYYYYXXXX` (generation, host_id);
//! * [`device`]: a device opened for SG_IO, the commands, a read-only probe, and a
//!   preempt that is confirmed by reading the keys back;
//! * `sys`: the only unsafe code, the SG_IO ioctl and the block PR ioctls themselves.
//!
//! Invariants: nothing here writes a key or a reservation unless a caller asked for that
//! exact command; the probe sends only PERSISTENT RESERVE IN; every command has a bounded
//! timeout.

pub mod cdb;
pub mod device;
pub mod error;
pub mod key;
pub mod parse;
pub mod sense;
mod sys;

pub use cdb::{OutAction, OutParams, PrType};
pub use device::{Interface, InterfaceChoice, PrDevice, PreemptOutcome, Probe};
pub use error::PrError;
pub use key::{lvm_key, lvm_key_parts, KeyError};
pub use parse::{Capabilities, Keys, Reservation, ReservationState};
