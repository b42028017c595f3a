//! Watchdog multiplexer compatible with sanlock's wdmd and libwdmd.
//!
//! * [`proto`]: the 176-byte `wdmd_header` wire format.
//! * [`client`]: the libwdmd-compatible client used by lockd.
//! * [`daemon`]: the wdmd daemon (socket server, test loop, start-up guard).
//! * [`device`]: watchdog backends (Linux `/dev/watchdog*`, emulated).
//! * [`emulator`]: the emulated watchdog device process.
//! * [`scripts`]: `-S 1` test scripts.
//!
//! All `unsafe` code is in the private `sys` module.

pub mod client;
pub mod daemon;
pub mod device;
pub mod emulator;
pub mod proto;
pub mod scripts;
mod sys;

pub use sys::{monotime, monotime_f64};
