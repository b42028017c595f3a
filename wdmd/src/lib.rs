//! Watchdog multiplexer compatible with sanlock's wdmd and libwdmd.
//!
//! * [`proto`]: the 176-byte `wdmd_header` wire format.
//! * [`cli`]: the `wdmd` command line (clap).
//! * [`client`]: the libwdmd-compatible client used by lockd.
//! * [`daemon`]: the wdmd daemon (socket server, test loop, start-up guard).
//! * [`device`]: watchdog backends (Linux `/dev/watchdog*`, emulated).
//! * [`emulator`]: the emulated watchdog device process.
//! * [`scripts`]: `-S 1` test scripts.
//!
//! All `unsafe` code is in the private `sys` module.

pub mod cli;
pub mod client;
pub mod daemon;
pub mod device;
pub mod emulator;
pub mod proto;
pub mod scripts;
mod sys;

pub use sys::{monotime, monotime_f64};

/// Displays an error with its `source()` chain, `a: b: c` (error messages in
/// this crate do not repeat their source, so logs use this).
pub struct Chain<'a>(pub &'a (dyn std::error::Error + 'static));

impl std::fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)?;
        let mut s = self.0.source();
        while let Some(e) = s {
            write!(f, ": {e}")?;
            s = e.source();
        }
        Ok(())
    }
}
