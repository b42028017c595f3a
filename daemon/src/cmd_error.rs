//! The lease commands' errors: why an ACQUIRE, RELEASE, CONVERT, INQUIRE, REQUEST,
//! SET_LVB/GET_LVB, KILLPATH or ACQUIRE_FOR_PID was refused or failed, in the handlers' own words
//! (`cmd.rs`, `paxos.rs`, `forpid.rs`).
//!
//! Invariants:
//! - [`LeaseCmdError::code`] is the one place where these reasons become sanlock's result
//!   codes; the handlers return the typed error and the protocol edge
//!   (`cmd::registered_cmd`, `dispatch.rs`) logs the reason and sends the code;
//! - each code is the one sanlock answers in that case (a unit test pins them all);
//! - codes that come from elsewhere pass through unchanged: a lockspace refusal keeps
//!   [`SpaceError::code`], a disk that cannot be opened keeps the open's errno, a
//!   refusal of the lease tables (`lockd_core`, which speaks sanlock's codes) and a
//!   lease-core failure keep their code.

use lease_core::LeaseError;
use lockd_diskio::DirectIoError;

use crate::space::SpaceError;

/// A lease command's failure.
#[derive(Debug, thiserror::Error)]
pub enum LeaseCmdError {
    /// A missing, malformed or contradictory argument (-EINVAL).
    #[error("invalid argument: {0}")]
    Invalid(&'static str),
    /// The lease named is not held here, or has no such part (-ENOENT).
    #[error("not held here: {0}")]
    NotHeld(&'static str),
    /// A RELEASE named leases the client does not hold; the others were released (-1, as
    /// sanlock answers).
    #[error("some of the leases named are not held by the client")]
    SomeNotHeld,
    /// The command's client slot is gone (-ESRCH).
    #[error("no such client")]
    NoClient,
    /// The process named (ACQUIRE_FOR_PID) does not exist or has exited (-ESRCH).
    #[error("no such process")]
    NoProcess,
    /// A resource of the daemon ran out: a watch, a file descriptor (-ENOMEM).
    #[error("out of resources: {0}")]
    NoResources(&'static str),
    /// The lease's lockspace refused (not joined, failed, being removed ...).
    #[error("lockspace: {0}")]
    Space(#[from] SpaceError),
    /// Something lockd does not do (-EOPNOTSUPP).
    #[error("not supported: {0}")]
    Unsupported(&'static str),
    /// The caller may not do this (-EPERM).
    #[error("not permitted: {0}")]
    NotPermitted(&'static str),
    /// The lease's disk could not be opened with the caller's rights (the open's errno).
    #[error("cannot open the lease's disk: {0}")]
    Open(#[from] DirectIoError),
    /// The lease is still being released here after the wait for it (-EAGAIN).
    #[error("the lease is still being released here")]
    StillReleasing,
    /// The client ended before the leases it acquired could be recorded as its own; they
    /// were released again (-ESTALE).
    #[error("the client ended during the acquire")]
    ClientGone,
    /// The core refused a command with this sanlock code (`lockd_core::CoreReply::rv`).
    #[error("refused by the lease tables (code {0})")]
    Tables(i32),
    /// The lease tables refused a transition (`lockd_core::TableRefused`: the reason and
    /// its code).
    #[error("{}", .0.why())]
    Refused(lockd_core::TableRefused),
    /// Disk Paxos (lease-core) failed; `code` is what sanlock answers for it (for a
    /// release, the code of the lease area's version).
    #[error("disk paxos: {error} (code {code})")]
    Paxos { error: LeaseError, code: i32 },
}

impl LeaseCmdError {
    /// A lease-core failure, with the code sanlock gives it.
    pub fn paxos(error: LeaseError) -> LeaseCmdError {
        let code = error.sanlk_code();
        LeaseCmdError::Paxos { error, code }
    }

    /// A lease-core failure of a release of an area of paxos version `paxos_version`
    /// (5.x areas answer 5.x's release codes, 3.x areas 3.x's).
    pub fn paxos_release(error: LeaseError, paxos_version: u32) -> LeaseCmdError {
        let code = error.sanlk_code_for(paxos_version);
        LeaseCmdError::Paxos { error, code }
    }

    /// The result code sanlock's clients get.
    pub fn code(&self) -> i32 {
        match self {
            LeaseCmdError::Invalid(_) => -libc::EINVAL,
            LeaseCmdError::NotHeld(_) => -libc::ENOENT,
            LeaseCmdError::SomeNotHeld => -1,
            LeaseCmdError::NoClient => -libc::ESRCH,
            LeaseCmdError::NoProcess => -libc::ESRCH,
            LeaseCmdError::NoResources(_) => -libc::ENOMEM,
            LeaseCmdError::Space(e) => e.code(),
            LeaseCmdError::Unsupported(_) => -libc::EOPNOTSUPP,
            LeaseCmdError::NotPermitted(_) => -libc::EPERM,
            LeaseCmdError::Open(e) => e.rv(),
            LeaseCmdError::StillReleasing => -libc::EAGAIN,
            LeaseCmdError::ClientGone => -libc::ESTALE,
            LeaseCmdError::Tables(code) => *code,
            LeaseCmdError::Refused(r) => r.code(),
            LeaseCmdError::Paxos { code, .. } => *code,
        }
    }

    /// A handler's result as sanlock's result code at the protocol edge: 0 on success;
    /// a failure's reason is logged with its command and code.
    pub fn reply_code(cmd: u32, result: &Result<(), LeaseCmdError>) -> i32 {
        match result {
            Ok(()) => 0,
            Err(e) => {
                let code = e.code();
                tracing::info!(cmd, reason = %e, code, "lease command failed");
                code
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_has_sanlocks_code() {
        let open = || DirectIoError::Open {
            path: "/dev/x".into(),
            source: std::io::Error::from_raw_os_error(libc::EACCES),
        };
        let cases: Vec<(LeaseCmdError, i32)> = vec![
            (LeaseCmdError::Invalid("x"), -libc::EINVAL),
            (LeaseCmdError::NotHeld("x"), -libc::ENOENT),
            (LeaseCmdError::SomeNotHeld, -1),
            (LeaseCmdError::NoClient, -libc::ESRCH),
            (LeaseCmdError::NoProcess, -libc::ESRCH),
            (LeaseCmdError::NoResources("x"), -libc::ENOMEM),
            (LeaseCmdError::Space(SpaceError::NotJoined), -libc::ENOSPC),
            (LeaseCmdError::Space(SpaceError::Failed(-202)), -202),
            (LeaseCmdError::Unsupported("x"), -libc::EOPNOTSUPP),
            (LeaseCmdError::NotPermitted("x"), -libc::EPERM),
            (LeaseCmdError::Open(open()), -libc::EACCES),
            (LeaseCmdError::StillReleasing, -libc::EAGAIN),
            (LeaseCmdError::ClientGone, -libc::ESTALE),
            (LeaseCmdError::Tables(-libc::EEXIST), -libc::EEXIST),
            (
                LeaseCmdError::Refused(lockd_core::TableRefused::NotYourClient),
                -libc::EPERM,
            ),
            (
                LeaseCmdError::paxos(LeaseError::HostIdBusy),
                LeaseError::HostIdBusy.sanlk_code(),
            ),
        ];
        for (e, code) in cases {
            assert_eq!(e.code(), code, "{e}");
        }
        assert_eq!(LeaseCmdError::reply_code(0, &Ok(())), 0);
        assert_eq!(
            LeaseCmdError::reply_code(0, &Err(LeaseCmdError::SomeNotHeld)),
            -1
        );
    }
}
