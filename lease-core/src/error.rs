//! [`LeaseError`]: every way an algorithm can fail, each mapped to sanlock's result code.

use disk_format::{rv, FormatError};

use crate::io::IoError;

/// What an I/O was doing, which decides the sanlock code of its failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoOp {
    /// Reading a leader (delta lease or paxos leader) or a lockspace area.
    LeaderRead,
    /// Writing a leader.
    LeaderWrite,
    /// Reading dblocks (ballot reads).
    DblockRead,
    /// Writing our dblock / mode block sector.
    DblockWrite,
    /// Reading or writing the request record or the LVB sector.
    Other,
}

/// Error from a lease operation. [`LeaseError::sanlk_code`] gives the value a sanlock client
/// would see.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LeaseError {
    /// A disk operation failed or timed out.
    #[error("{op:?} {}", if *timed_out { "timed out" } else { "failed" })]
    Io {
        /// What the I/O was for.
        op: IoOp,
        /// True for a timeout (SANLK_AIO_TIMEOUT), false for an I/O error.
        timed_out: bool,
    },
    /// The storage refused an I/O with a reservation conflict: this host has been fenced
    /// (its SCSI-3 PR key preempted by another host). It answers clients with the code of
    /// the I/O that was refused, as any I/O failure; the daemon treats it as lease loss.
    #[error("{op:?} refused by the storage: reservation conflict (this host is fenced)")]
    Fenced {
        /// What the I/O was for.
        op: IoOp,
    },
    /// A record on disk failed verification (magic, version, names, sector size, checksum).
    #[error(transparent)]
    Format(#[from] FormatError),
    /// Another host name holds or took our host_id while we tried to acquire it.
    #[error("host_id is held by another host")]
    HostIdBusy,
    /// Our delta lease on disk no longer names us (owner, generation or host name).
    #[error("delta lease owner changed")]
    RenewOwner,
    /// Our delta lease on disk differs from what we last wrote.
    #[error("delta lease differs from our last write")]
    RenewDiff,
    /// Our delta lease on disk was marked DEAD_EXT by an external fencer (sanlock 5.x
    /// `set_host`): our leases are being taken; the lockspace fails at once.
    #[error("our delta lease was declared dead by an external fencer (DEAD_EXT)")]
    RenewDeadExt,
    /// The lease's owner has a NO_TIMEOUT delta lease (sanlock 5.x): it never expires by
    /// time, so the lease is never taken from it.
    #[error("lease owned by host {owner_id}, whose delta lease never times out (NO_TIMEOUT)")]
    OwnedNoTimeout {
        /// Owner host_id.
        owner_id: u64,
    },
    /// `set_host DEAD_EXT` on an area whose delta leases are 3.x's version (sanlock 5.1.1
    /// refuses it the same way: SANLK_VERSION_INCOMPAT).
    #[error("the lockspace's delta leases are version 3.x: DEAD_EXT needs a 5.x area")]
    VersionIncompat,
    /// The host's delta lease is not of the generation named (SANLK_WRONG_GENERATION).
    #[error("delta lease of host {host_id} is generation {on_disk}, not {requested}")]
    WrongGeneration {
        /// The host.
        host_id: u64,
        /// Generation on disk.
        on_disk: u64,
        /// Generation asked for.
        requested: u64,
    },
    /// A ballot saw a dblock for a newer lease version.
    #[error("ballot aborted: newer lver in a dblock")]
    DblockLver,
    /// A ballot saw a larger mbal.
    #[error("ballot aborted: larger mbal in a dblock")]
    DblockMbal,
    /// The lease version on disk is not the one requested.
    #[error("lease version on disk is {on_disk}, requested {requested}")]
    AcquireLver {
        /// lver in the leader.
        on_disk: u64,
        /// lver the caller asked for.
        requested: u64,
    },
    /// The lease belongs to a lockspace we have not joined.
    #[error("lockspace of the lease is not joined")]
    AcquireLockspace,
    /// The lease's owner is alive.
    #[error("lease owned by live host {owner_id} generation {owner_generation}")]
    IdLive {
        /// Owner host_id.
        owner_id: u64,
        /// Owner generation.
        owner_generation: u64,
    },
    /// Another host committed the lease version we were balloting for.
    #[error("lease acquired by host {owner_id} generation {owner_generation}")]
    Owned {
        /// Owner host_id.
        owner_id: u64,
        /// Owner generation.
        owner_generation: u64,
    },
    /// Our ballot committed another host's proposal.
    #[error("ballot committed host {owner_id} generation {owner_generation}")]
    Other {
        /// Owner host_id.
        owner_id: u64,
        /// Owner generation.
        owner_generation: u64,
    },
    /// Shared acquire kept finding the lease briefly held; gave up after the retries.
    #[error("shared acquire retries exhausted")]
    ShRetry,
    /// OWNER_NOWAIT: the owner's liveness is not known yet; retry later.
    #[error("lease owned by host {owner_id}, liveness unknown yet")]
    OwnedRetry {
        /// Owner host_id.
        owner_id: u64,
    },
    /// On release, the leader's lver changed.
    #[error("release: leader lver changed")]
    ReleaseLver,
    /// On release, the leader no longer names us.
    #[error("release: leader owner changed")]
    ReleaseOwner,
    /// Request for an lver not above the current one.
    #[error("request: lver is not newer than the lease's")]
    RequestOld,
    /// Request for an lver below an earlier request.
    #[error("request: lver below the recorded request")]
    RequestLver,
    /// Live shared holders prevent an exclusive lease (-EAGAIN).
    #[error("shared holders are alive")]
    Again,
    /// A shared grant still held back after our join, past the longest a live peer can
    /// take to catch up: our lockspace reads have stopped (-EAGAIN; retry).
    #[error("shared grants are still held back after the join: the lockspace is not being read")]
    SharedHoldStuck,
    /// Already in the requested mode (-EALREADY).
    #[error("already in the requested mode")]
    Already,
    /// The LVB sector of this geometry lies outside the lease area (sanlock's layout bug);
    /// refused instead of writing into a neighbouring area (-EINVAL).
    #[error("LVB is not supported on this geometry (sector lies outside the lease area)")]
    LvbUnsupported,
    /// LVB data larger than a sector (-E2BIG).
    #[error("LVB data larger than a sector")]
    LvbTooBig,
    /// host_id is 0 or above the lockspace's max_hosts (SANLK_ADDLS_INVALID_HOSTID).
    #[error("host_id {host_id} is outside 1..={max_hosts}")]
    InvalidHostId {
        /// Requested host_id.
        host_id: u64,
        /// Limit of the geometry.
        max_hosts: u64,
    },
    /// Bad argument (-EINVAL).
    #[error("invalid argument: {0}")]
    Invalid(&'static str),
}

const EAGAIN: i32 = 11;
const EALREADY: i32 = 114;
const EINVAL: i32 = 22;
const E2BIG: i32 = 7;

impl LeaseError {
    /// [`Self::sanlk_code`] for a lease whose paxos leader has on-disk `paxos_version`:
    /// in a 5.x area (paxos 7.x, formatted by sanlock 5.x) the release errors carry 5.x's
    /// numbers (-252/-253, what sanlock 5.1.1 answers and 5.x clients' headers name);
    /// elsewhere 3.x's (-250/-251, what 3.8.5/3.9.5 answer and their clients know).
    pub fn sanlk_code_for(&self, paxos_version: u32) -> i32 {
        let v5 = paxos_version & disk_format::leader::VERSION_MAJOR_MASK
            == disk_format::leader::PAXOS_DISK_VERSION_7;
        match self {
            LeaseError::ReleaseLver if v5 => rv::SANLK5_RELEASE_LVER,
            LeaseError::ReleaseOwner if v5 => rv::SANLK5_RELEASE_OWNER,
            _ => self.sanlk_code(),
        }
    }

    /// sanlock's result code for this error (negative).
    pub fn sanlk_code(&self) -> i32 {
        match self {
            LeaseError::Io {
                timed_out: true, ..
            } => rv::SANLK_AIO_TIMEOUT,
            LeaseError::Io { op, .. } | LeaseError::Fenced { op } => match op {
                IoOp::LeaderRead => rv::SANLK_LEADER_READ,
                IoOp::LeaderWrite => rv::SANLK_LEADER_WRITE,
                IoOp::DblockRead => rv::SANLK_DBLOCK_READ,
                IoOp::DblockWrite => rv::SANLK_DBLOCK_WRITE,
                IoOp::Other => -5,
            },
            LeaseError::Format(f) => f.sanlk_code(),
            LeaseError::HostIdBusy => rv::SANLK_HOSTID_BUSY,
            LeaseError::RenewOwner => rv::SANLK_RENEW_OWNER,
            LeaseError::RenewDiff => rv::SANLK_RENEW_DIFF,
            LeaseError::RenewDeadExt => rv::SANLK_RENEW_DEAD_EXT,
            LeaseError::VersionIncompat => rv::SANLK_VERSION_INCOMPAT,
            LeaseError::WrongGeneration { .. } => rv::SANLK_WRONG_GENERATION,
            LeaseError::OwnedNoTimeout { .. } => rv::SANLK_ACQUIRE_OWNED_NO_TIMEOUT,
            LeaseError::DblockLver => rv::SANLK_DBLOCK_LVER,
            LeaseError::DblockMbal => rv::SANLK_DBLOCK_MBAL,
            LeaseError::AcquireLver { .. } => rv::SANLK_ACQUIRE_LVER,
            LeaseError::AcquireLockspace => rv::SANLK_ACQUIRE_LOCKSPACE,
            LeaseError::IdLive { .. } => rv::SANLK_ACQUIRE_IDLIVE,
            LeaseError::Owned { .. } => rv::SANLK_ACQUIRE_OWNED,
            LeaseError::Other { .. } => rv::SANLK_ACQUIRE_OTHER,
            LeaseError::ShRetry => rv::SANLK_ACQUIRE_SHRETRY,
            LeaseError::OwnedRetry { .. } => rv::SANLK_ACQUIRE_OWNED_RETRY,
            LeaseError::ReleaseLver => rv::SANLK_RELEASE_LVER,
            LeaseError::ReleaseOwner => rv::SANLK_RELEASE_OWNER,
            LeaseError::RequestOld => rv::SANLK_REQUEST_OLD,
            LeaseError::RequestLver => rv::SANLK_REQUEST_LVER,
            LeaseError::Again | LeaseError::SharedHoldStuck => -EAGAIN,
            LeaseError::Already => -EALREADY,
            LeaseError::LvbUnsupported | LeaseError::Invalid(_) => -EINVAL,
            LeaseError::LvbTooBig => -E2BIG,
            LeaseError::InvalidHostId { .. } => rv::SANLK_ADDLS_INVALID_HOSTID,
        }
    }

    /// True for the "corrupt" results that fail a lockspace at once (sanlock's
    /// `corrupt_result`): owner/diff changes and any record verification failure.
    pub fn is_corrupt(&self) -> bool {
        matches!(
            self,
            LeaseError::RenewOwner
                | LeaseError::RenewDiff
                | LeaseError::RenewDeadExt
                | LeaseError::Format(_)
        )
    }

    /// True when the storage refused an I/O because this host's reservation key is gone
    /// (storage fencing): its leases on that storage are lost.
    pub fn is_fenced(&self) -> bool {
        matches!(self, LeaseError::Fenced { .. })
    }

    pub(crate) fn io(op: IoOp, e: IoError) -> LeaseError {
        match e {
            IoError::ReservationConflict => LeaseError::Fenced { op },
            IoError::Failed | IoError::TimedOut => LeaseError::Io {
                op,
                timed_out: e == IoError::TimedOut,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn release_codes_follow_the_area_version() {
        use disk_format::leader::{PAXOS_DISK_VERSION, PAXOS_DISK_VERSION_7};
        assert_eq!(
            LeaseError::ReleaseLver.sanlk_code_for(PAXOS_DISK_VERSION),
            -250
        );
        assert_eq!(
            LeaseError::ReleaseOwner.sanlk_code_for(PAXOS_DISK_VERSION),
            -251
        );
        assert_eq!(
            LeaseError::ReleaseLver.sanlk_code_for(PAXOS_DISK_VERSION_7),
            -252
        );
        assert_eq!(
            LeaseError::ReleaseOwner.sanlk_code_for(PAXOS_DISK_VERSION_7),
            -253
        );
        assert_eq!(
            LeaseError::ReleaseOwner.sanlk_code_for(PAXOS_DISK_VERSION_7 | 1),
            -253,
            "minor versions do not matter"
        );
        assert_eq!(
            LeaseError::ShRetry.sanlk_code_for(PAXOS_DISK_VERSION_7),
            -246
        );
    }

    #[test]
    fn codes() {
        assert_eq!(
            LeaseError::io(IoOp::LeaderRead, IoError::TimedOut).sanlk_code(),
            -202
        );
        assert_eq!(
            LeaseError::io(IoOp::DblockWrite, IoError::Failed).sanlk_code(),
            -211
        );
        assert_eq!(LeaseError::HostIdBusy.sanlk_code(), -262);
        // A reservation conflict answers as the refused I/O, and only it is "fenced".
        let fenced = LeaseError::io(IoOp::LeaderWrite, IoError::ReservationConflict);
        assert_eq!(fenced.sanlk_code(), -221);
        assert!(fenced.is_fenced());
        assert!(!fenced.is_corrupt());
        assert!(!LeaseError::io(IoOp::LeaderWrite, IoError::Failed).is_fenced());
        assert_eq!(
            LeaseError::IdLive {
                owner_id: 1,
                owner_generation: 1
            }
            .sanlk_code(),
            -243
        );
        assert_eq!(LeaseError::Again.sanlk_code(), -11);
        assert_eq!(LeaseError::Already.sanlk_code(), -114);
        assert_eq!(LeaseError::OwnedRetry { owner_id: 2 }.sanlk_code(), -247);
        assert!(LeaseError::RenewDiff.is_corrupt());
        assert!(!LeaseError::DblockMbal.is_corrupt());
    }
}
