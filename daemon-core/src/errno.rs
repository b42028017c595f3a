//! The Linux errno values the core answers with (negated, as sanlock's replies carry
//! them). The core does not link libc; the daemon's unit test
//! `core_errno_values_are_libc_s` checks each value against libc's.

pub const EPERM: i32 = 1;
pub const ENOENT: i32 = 2;
pub const ESRCH: i32 = 3;
pub const EIO: i32 = 5;
pub const EAGAIN: i32 = 11;
pub const EBUSY: i32 = 16;
pub const EINVAL: i32 = 22;
pub const EEXIST: i32 = 17;
pub const EMFILE: i32 = 24;
pub const EBADE: i32 = 52;
pub const EALREADY: i32 = 114;
pub const EUCLEAN: i32 = 117;
pub const ENOSPC: i32 = 28;
pub const EINPROGRESS: i32 = 115;
pub const ECANCELED: i32 = 125;

/// sanlock's generic failure (`SANLK_ERROR`, -1): a RELEASE naming a lease the client
/// does not hold gets it.
pub const SANLK_ERROR: i32 = -1;
