//! The errors of persistent-reservation commands: what the device said (status and sense
//! data, decoded), what the transport said, and what could not be parsed.

use std::io;
use std::path::PathBuf;

use thiserror::Error;

#[derive(Debug, Error)]
pub enum PrError {
    #[error("{path}: cannot open: {source}")]
    Open { path: PathBuf, source: io::Error },
    /// The ioctl itself was refused: not a SCSI device (a loop device, a file, NVMe, most
    /// device-mapper targets that are not a whole-device map of one SCSI disk).
    #[error(
        "{path}: does not take SCSI commands (SG_IO: {source}); persistent reservations \
         need a SCSI disk (sd), a device-mapper map over the whole of one, or its sg node"
    )]
    NotScsi { path: PathBuf, source: io::Error },
    /// The kernel refused to pass the command: PR OUT through SG_IO needs CAP_SYS_RAWIO.
    #[error("{path}: the kernel refused the SCSI command ({source}): persistent reservation commands need root (CAP_SYS_RAWIO)")]
    NeedsRawIo { path: PathBuf, source: io::Error },
    #[error("SG_IO failed: {0}")]
    Io(io::Error),
    /// A block PR ioctl failed in the kernel before the device answered (EAGAIN: no path
    /// to an NVMe namespace while its controller reconnects; ENODEV, EIO, …).
    #[error("block PR ioctl failed: {0}")]
    BlockIo(io::Error),
    /// SCSI status RESERVATION CONFLICT: another registrant holds a reservation this
    /// nexus may not pass, or this nexus's key is not (or no longer) registered.
    #[error(
        "{what}: RESERVATION CONFLICT (this host's key is not registered, or another \
         host's reservation forbids the command)"
    )]
    ReservationConflict { what: &'static str },
    /// ILLEGAL REQUEST with INVALID COMMAND OPERATION CODE or INVALID FIELD IN CDB: the
    /// device does not implement this command or service action.
    #[error("{what} is not supported by the device ({reason})")]
    NotSupported { what: &'static str, reason: String },
    /// UNIT ATTENTION: the device reports an event (reset, reservations preempted, …);
    /// the command was not run and may be sent again.
    #[error("{what}: UNIT ATTENTION ({reason})")]
    UnitAttention { what: &'static str, reason: String },
    #[error("{what}: CHECK CONDITION, sense key {key_name} ({reason})")]
    Check {
        what: &'static str,
        key_name: &'static str,
        sense_key: u8,
        asc: u8,
        ascq: u8,
        reason: String,
    },
    #[error("{what}: SCSI status 0x{status:02x} ({name})")]
    Status {
        what: &'static str,
        status: u8,
        name: &'static str,
    },
    /// The command did not complete: the path to the device failed (host_status, e.g. no
    /// connection, timeout) or the driver gave up (driver_status).
    #[error("{what}: transport failure (host_status 0x{host_status:x}: {host_name}, driver_status 0x{driver_status:x})")]
    Transport {
        what: &'static str,
        host_status: u16,
        host_name: &'static str,
        driver_status: u16,
    },
    #[error("{what}: malformed answer: {detail}")]
    Malformed { what: &'static str, detail: String },
    /// Neither SG_IO nor the block layer's PR ioctls are taken by this file.
    #[error(
        "{path}: does not take SCSI commands (SG_IO: {sg_io}) nor the block PR ioctls \
         ({block}); persistent reservations need a SCSI disk (sd), an NVMe namespace or a \
         device-mapper multipath map (the last two through the block PR ioctls, Linux \
         6.19 or later)"
    )]
    NoPrInterface {
        path: PathBuf,
        block: io::Error,
        sg_io: io::Error,
    },
    /// The kernel has the block PR ioctls but not IOC_PR_READ_KEYS (before Linux 6.19),
    /// and the device does not take SG_IO (NVMe, a multipath map): a fence could not be
    /// confirmed, so lockd does not fence it.
    #[error(
        "{path}: the kernel cannot read this device's reservation keys (IOC_PR_READ_KEYS \
         needs Linux 6.19 or later: {source}) and the device does not take SG_IO; lockd \
         cannot confirm a fence on it"
    )]
    NoReadKeys { path: PathBuf, source: io::Error },
    /// A block PR ioctl the device answered with an error other than a reservation
    /// conflict (`PR_STS_IOERR`: the kernel's log has the device's sense data or status).
    #[error("{what}: the device refused the command ({name}, pr_status 0x{status:x}; the kernel log has its sense data)")]
    BlockStatus {
        what: &'static str,
        status: u32,
        name: &'static str,
    },
    /// A block PR ioctl failed on the path: the device was not reached (dm-multipath and
    /// NVMe report these; a multipath map tries every path first).
    #[error("{what}: path failure ({name}, pr_status 0x{status:x})")]
    BlockPath {
        what: &'static str,
        status: u32,
        name: &'static str,
    },
    /// A preempt was acknowledged but the victim's key is still registered.
    #[error("PREEMPT of key 0x{victim:x} not confirmed: the key is still registered")]
    PreemptNotConfirmed { victim: u64 },
}

impl PrError {
    /// Whether this is RESERVATION CONFLICT (this host is fenced, or must not do this).
    pub fn is_reservation_conflict(&self) -> bool {
        matches!(self, PrError::ReservationConflict { .. })
    }

    /// Whether the device or path cannot do persistent reservations at all.
    pub fn is_not_supported(&self) -> bool {
        matches!(
            self,
            PrError::NotSupported { .. }
                | PrError::NotScsi { .. }
                | PrError::NoPrInterface { .. }
                | PrError::NoReadKeys { .. }
        )
    }
}
