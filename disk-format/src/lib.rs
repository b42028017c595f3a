//! Byte-exact on-disk records of sanlock 3.8/3.9, as typed values.
//!
//! Invariants of this crate:
//! - bytes in, bytes out: no I/O, no clock, no allocation beyond what a caller asks for;
//! - every integer on disk is little-endian at the x86-64 C offset sanlock uses;
//! - decoding never panics on any input; a decoder either returns a value or a
//!   [`FormatError`] naming the check that failed, which maps to a `SANLK_*` code;
//! - `encode(decode(b)) == b` for every record that decodes (padding is kept, not zeroed).
#![forbid(unsafe_code)]

pub mod area;
pub mod checksum;
mod codec;
pub mod dblock;
pub mod delta;
pub mod error;
pub mod geometry;
pub mod leader;
pub mod name;
pub mod request;
pub mod rindex;
pub mod rv;
pub mod scan;

pub use area::{format_lockspace_area, format_resource_area, ResourceInit};
pub use checksum::sanlock_crc32c;
pub use dblock::{ModeBlock, PaxosDblock};
pub use delta::{DeltaSector, DeltaSectorView};
pub use error::FormatError;
pub use geometry::{AlignSize, Geometry, SectorSize};
pub use leader::{LeaderKind, LeaderRecord};
pub use name::Name;
pub use request::RequestRecord;
pub use rindex::{RindexEntry, RindexHeader};
