//! Why a record did not decode or verify. Each variant names the failed check and maps
//! to the `SANLK_*` code sanlock returns for the same condition.

use thiserror::Error;

use crate::rv;

/// A decode or verification failure.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum FormatError {
    #[error("{record} needs {need} bytes, got {got}")]
    Truncated {
        record: &'static str,
        need: usize,
        got: usize,
    },
    #[error("bad magic 0x{found:08x} in {record} (expected 0x{expected:08x})")]
    Magic {
        record: &'static str,
        found: u32,
        expected: u32,
    },
    #[error("{record} was cleared (PAXOS_DISK_CLEAR): the lease is deliberately invalid")]
    Cleared { record: &'static str },
    #[error("unsupported {record} version 0x{found:08x} (expected major 0x{expected_major:04x})")]
    Version {
        record: &'static str,
        found: u32,
        expected_major: u32,
    },
    #[error("{record} sector size {found} does not match {expected}")]
    SectorSize {
        record: &'static str,
        found: u32,
        expected: u32,
    },
    #[error("lockspace name {found:?} does not match {expected:?}")]
    Lockspace { found: String, expected: String },
    #[error("resource name {found:?} does not match {expected:?}")]
    Resource { found: String, expected: String },
    #[error("num_hosts {num_hosts} is below host_id {host_id}")]
    NumHosts { num_hosts: u64, host_id: u64 },
    #[error("num_hosts {num_hosts} does not fit the area ({max_hosts} host slots)")]
    NumHostsArea { num_hosts: u64, max_hosts: u64 },
    #[error("{record} checksum 0x{stored:08x} does not match computed 0x{computed:08x}")]
    Checksum {
        record: &'static str,
        stored: u32,
        computed: u32,
    },
    #[error("invalid geometry: sector size {sector_size} with align size {align_bytes} bytes")]
    Geometry { sector_size: u32, align_bytes: u64 },
    #[error("rindex offset {found} does not match the area offset {expected}")]
    RindexOffset { found: u64, expected: u64 },
    #[error("{record} uses SCSI COMPARE AND WRITE (sanlock 5.x CAW flag), which lockd does not implement")]
    Caw { record: &'static str },
    #[error("lockspace is NO_TIMEOUT (sanlock 5.x): its leases never expire, and lockd has no storage fencing to recover them")]
    NoTimeout,
    #[error("name is {len} bytes, the limit is 48: {name:?}")]
    NameTooLong { len: usize, name: String },
    #[error("name is empty")]
    NameEmpty,
    #[error("name contains a NUL byte")]
    NameHasNul,
}

impl FormatError {
    /// The `SANLK_*` (or negative errno) code sanlock reports for this failure.
    pub fn sanlk_code(&self) -> i32 {
        match self {
            FormatError::Truncated { record, .. } => match *record {
                "paxos dblock" | "mode block" => rv::SANLK_DBLOCK_READ,
                "request record" => rv::SANLK_REQUEST_MAGIC,
                "rindex header" | "rindex entry" => rv::SANLK_RINDEX_MAGIC,
                _ => rv::SANLK_LEADER_READ,
            },
            FormatError::Magic { record, .. } => match *record {
                "request record" => rv::SANLK_REQUEST_MAGIC,
                "rindex header" => rv::SANLK_RINDEX_MAGIC,
                _ => rv::SANLK_LEADER_MAGIC,
            },
            FormatError::Cleared { .. } => rv::SANLK_LEADER_MAGIC,
            FormatError::Version { record, .. } => match *record {
                "request record" => rv::SANLK_REQUEST_VERSION,
                "rindex header" => rv::SANLK_RINDEX_VERSION,
                _ => rv::SANLK_LEADER_VERSION,
            },
            FormatError::SectorSize { .. } => rv::SANLK_LEADER_SECTORSIZE,
            FormatError::Lockspace { .. } => rv::SANLK_LEADER_LOCKSPACE,
            FormatError::Resource { .. } => rv::SANLK_LEADER_RESOURCE,
            FormatError::NumHosts { .. } | FormatError::NumHostsArea { .. } => {
                rv::SANLK_LEADER_NUMHOSTS
            }
            FormatError::Checksum { record, .. } => match *record {
                "paxos dblock" => rv::SANLK_DBLOCK_CHECKSUM,
                _ => rv::SANLK_LEADER_CHECKSUM,
            },
            FormatError::Geometry { .. } => rv::SANLK_ADDLS_SIZES,
            FormatError::RindexOffset { .. } => rv::SANLK_RINDEX_OFFSET,
            FormatError::Caw { .. } => rv::SANLK_WRONG_CAW,
            FormatError::NoTimeout => -libc_eopnotsupp(),
            FormatError::NameTooLong { .. } | FormatError::NameEmpty | FormatError::NameHasNul => {
                -libc_einval()
            }
        }
    }
}

/// EINVAL on Linux; kept here so this crate needs no libc.
const fn libc_einval() -> i32 {
    22
}

/// EOPNOTSUPP on Linux.
const fn libc_eopnotsupp() -> i32 {
    95
}
