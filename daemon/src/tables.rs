//! The client and resource tables are the core's (`lockd_core::tables`: the transitions,
//! their invariants and `check`); here they get the daemon's connection handle (a clone
//! of the client's socket, shut down at exit) and on-disk lease state
//! ([`crate::paxos::Held`]: lease-core's token and who opened the disk).

use std::os::unix::net::UnixStream;

pub use lockd_core::tables::{AcquireStart, CommandTarget, Key};

/// The client and resource tables, behind the daemon's one `tables` lock.
pub type Tables = lockd_core::Tables<UnixStream, crate::paxos::Held>;

/// What a release's first step left to do.
pub type ReleaseStart = lockd_core::ReleaseStart<crate::paxos::Held>;

#[cfg(test)]
mod tests {
    /// The core answers with its own errno table (it does not link libc): the values
    /// must be the ones the daemon's other replies use.
    #[test]
    fn core_errno_values_are_libc_s() {
        use lockd_core::errno;
        for (core, libc) in [
            (errno::EPERM, libc::EPERM),
            (errno::ENOENT, libc::ENOENT),
            (errno::ESRCH, libc::ESRCH),
            (errno::EIO, libc::EIO),
            (errno::EAGAIN, libc::EAGAIN),
            (errno::EBUSY, libc::EBUSY),
            (errno::EEXIST, libc::EEXIST),
            (errno::EMFILE, libc::EMFILE),
            (errno::EALREADY, libc::EALREADY),
            (errno::EUCLEAN, libc::EUCLEAN),
        ] {
            assert_eq!(core, libc);
        }
    }
}
