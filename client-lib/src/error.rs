//! Errors of the wire codec and of the blocking client.

use std::io;

use thiserror::Error;

/// A message or struct that cannot be decoded or encoded.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum WireError {
    #[error("{what}: field is invalid: {why}")]
    BadField {
        what: &'static str,
        why: &'static str,
    },
    #[error("bad magic 0x{magic:08x} (expected 0x04282010)")]
    BadMagic { magic: u32 },
    #[error("message claims {length} bytes, more than the {max}-byte limit")]
    Oversized { length: u32, max: u32 },
    #[error("{what}: short: need {need} bytes, got {got}")]
    Short {
        what: &'static str,
        need: usize,
        got: usize,
    },
    #[error("{what}: {count} given, at most {max} allowed")]
    TooMany {
        what: &'static str,
        count: u32,
        max: u32,
    },
    #[error("{what}: expected {want} bytes, got {got} (trailing data)")]
    Trailing {
        what: &'static str,
        want: usize,
        got: usize,
    },
}

/// An error talking to the daemon.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ClientError {
    #[error("cannot connect to {path}: {source}")]
    Connect {
        path: std::path::PathBuf,
        source: io::Error,
    },
    #[error("daemon closed the connection")]
    Closed,
    #[error("socket i/o: {0}")]
    Io(#[from] io::Error),
    #[error("daemon answered with result {rv} ({})", describe_rv(*rv))]
    Result { rv: i32 },
    #[error("malformed reply: {0}")]
    Wire(#[from] WireError),
}

impl ClientError {
    /// The sanlock-style negative code for this error (for exit codes and JSON output).
    pub fn code(&self) -> i32 {
        match self {
            ClientError::Result { rv } => *rv,
            ClientError::Connect { source, .. } | ClientError::Io(source) => {
                -(source.raw_os_error().unwrap_or(libc_eio()))
            }
            ClientError::Closed => -104,
            ClientError::Wire(_) => -71,
        }
    }
}

const fn libc_eio() -> i32 {
    5
}

/// A human name for a result code: a `SANLK_*` name or an errno name.
pub fn describe_rv(rv: i32) -> String {
    if let Some(n) = disk_format::rv::name(rv) {
        return n.to_string();
    }
    if rv < 0 {
        return io::Error::from_raw_os_error(-rv).to_string();
    }
    "ok".to_string()
}
