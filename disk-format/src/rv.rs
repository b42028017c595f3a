//! sanlock's result codes (`sanlock_rv.h`), the values clients see at the protocol edge.
#![allow(missing_docs)]

pub const SANLK_OK: i32 = 1;
pub const SANLK_ERROR: i32 = -201;
pub const SANLK_AIO_TIMEOUT: i32 = -202;
pub const SANLK_WD_ERROR: i32 = -203;
/// 5.x: the on-disk version does not support the operation (`set_host` on a 3.x area).
pub const SANLK_VERSION_INCOMPAT: i32 = -204;
pub const SANLK_DBLOCK_READ: i32 = -210;
pub const SANLK_DBLOCK_WRITE: i32 = -211;
pub const SANLK_DBLOCK_LVER: i32 = -212;
pub const SANLK_DBLOCK_MBAL: i32 = -213;
pub const SANLK_DBLOCK_CHECKSUM: i32 = -214;
pub const SANLK_LEADER_READ: i32 = -220;
pub const SANLK_LEADER_WRITE: i32 = -221;
pub const SANLK_LEADER_DIFF: i32 = -222;
pub const SANLK_LEADER_MAGIC: i32 = -223;
pub const SANLK_LEADER_VERSION: i32 = -224;
pub const SANLK_LEADER_SECTORSIZE: i32 = -225;
pub const SANLK_LEADER_LOCKSPACE: i32 = -226;
pub const SANLK_LEADER_RESOURCE: i32 = -227;
pub const SANLK_LEADER_NUMHOSTS: i32 = -228;
pub const SANLK_LEADER_CHECKSUM: i32 = -229;
pub const SANLK_ADDLS_SIZES: i32 = -230;
pub const SANLK_ADDLS_INVALID_HOSTID: i32 = -231;
pub const SANLK_ACQUIRE_LVER: i32 = -240;
pub const SANLK_ACQUIRE_LOCKSPACE: i32 = -241;
pub const SANLK_ACQUIRE_IDDISK: i32 = -242;
pub const SANLK_ACQUIRE_IDLIVE: i32 = -243;
pub const SANLK_ACQUIRE_OWNED: i32 = -244;
pub const SANLK_ACQUIRE_OTHER: i32 = -245;
pub const SANLK_ACQUIRE_SHRETRY: i32 = -246;
pub const SANLK_ACQUIRE_OWNED_RETRY: i32 = -247;
/// 5.x.
pub const SANLK_ACQUIRE_OWNER_GEN_REVERTED: i32 = -248;
/// 5.x: the owner's delta lease is NO_TIMEOUT: it never expires by time.
pub const SANLK_ACQUIRE_OWNED_NO_TIMEOUT: i32 = -249;
/// 3.x: the leader changed (lver) before our release (5.x renumbered it: -252).
pub const SANLK_RELEASE_LVER: i32 = -250;
/// 3.x: the leader changed (owner) before our release (5.x renumbered it: -253).
pub const SANLK_RELEASE_OWNER: i32 = -251;
/// 5.x's number for [`SANLK_RELEASE_LVER`] (sanlock 5.1.1 answers it to an explicit
/// release whose leader's lver changed on disk; observed).
pub const SANLK5_RELEASE_LVER: i32 = -252;
/// 5.x's number for [`SANLK_RELEASE_OWNER`] (the leader's owner or generation changed).
pub const SANLK5_RELEASE_OWNER: i32 = -253;
pub const SANLK_RENEW_OWNER: i32 = -260;
pub const SANLK_RENEW_DIFF: i32 = -261;
pub const SANLK_HOSTID_BUSY: i32 = -262;
/// 5.x: our own delta lease was marked DEAD_EXT by an external fencer.
pub const SANLK_RENEW_DEAD_EXT: i32 = -263;
pub const SANLK_REQUEST_MAGIC: i32 = -270;
pub const SANLK_REQUEST_VERSION: i32 = -271;
pub const SANLK_REQUEST_OLD: i32 = -272;
pub const SANLK_REQUEST_LVER: i32 = -273;
pub const SANLK_RINDEX_MAGIC: i32 = -274;
pub const SANLK_RINDEX_VERSION: i32 = -275;
pub const SANLK_RINDEX_LOCKSPACE: i32 = -276;
pub const SANLK_RINDEX_OFFSET: i32 = -277;
pub const SANLK_RINDEX_DIFF: i32 = -278;
/// 5.x: a host's delta lease is not of the generation named.
pub const SANLK_WRONG_GENERATION: i32 = -280;
/// 5.x: the lease uses (or does not use) COMPARE AND WRITE, unlike the I/O asked for.
pub const SANLK_WRONG_CAW: i32 = -281;

/// The symbolic name of a result code, for logs and CLI output.
pub fn name(rv: i32) -> Option<&'static str> {
    Some(match rv {
        SANLK_OK => "SANLK_OK",
        SANLK_ERROR => "SANLK_ERROR",
        SANLK_AIO_TIMEOUT => "SANLK_AIO_TIMEOUT",
        SANLK_WD_ERROR => "SANLK_WD_ERROR",
        SANLK_VERSION_INCOMPAT => "SANLK_VERSION_INCOMPAT",
        SANLK_DBLOCK_READ => "SANLK_DBLOCK_READ",
        SANLK_DBLOCK_WRITE => "SANLK_DBLOCK_WRITE",
        SANLK_DBLOCK_LVER => "SANLK_DBLOCK_LVER",
        SANLK_DBLOCK_MBAL => "SANLK_DBLOCK_MBAL",
        SANLK_DBLOCK_CHECKSUM => "SANLK_DBLOCK_CHECKSUM",
        SANLK_LEADER_READ => "SANLK_LEADER_READ",
        SANLK_LEADER_WRITE => "SANLK_LEADER_WRITE",
        SANLK_LEADER_DIFF => "SANLK_LEADER_DIFF",
        SANLK_LEADER_MAGIC => "SANLK_LEADER_MAGIC",
        SANLK_LEADER_VERSION => "SANLK_LEADER_VERSION",
        SANLK_LEADER_SECTORSIZE => "SANLK_LEADER_SECTORSIZE",
        SANLK_LEADER_LOCKSPACE => "SANLK_LEADER_LOCKSPACE",
        SANLK_LEADER_RESOURCE => "SANLK_LEADER_RESOURCE",
        SANLK_LEADER_NUMHOSTS => "SANLK_LEADER_NUMHOSTS",
        SANLK_LEADER_CHECKSUM => "SANLK_LEADER_CHECKSUM",
        SANLK_ADDLS_SIZES => "SANLK_ADDLS_SIZES",
        SANLK_ADDLS_INVALID_HOSTID => "SANLK_ADDLS_INVALID_HOSTID",
        SANLK_ACQUIRE_LVER => "SANLK_ACQUIRE_LVER",
        SANLK_ACQUIRE_LOCKSPACE => "SANLK_ACQUIRE_LOCKSPACE",
        SANLK_ACQUIRE_IDDISK => "SANLK_ACQUIRE_IDDISK",
        SANLK_ACQUIRE_IDLIVE => "SANLK_ACQUIRE_IDLIVE",
        SANLK_ACQUIRE_OWNED => "SANLK_ACQUIRE_OWNED",
        SANLK_ACQUIRE_OTHER => "SANLK_ACQUIRE_OTHER",
        SANLK_ACQUIRE_SHRETRY => "SANLK_ACQUIRE_SHRETRY",
        SANLK_ACQUIRE_OWNED_RETRY => "SANLK_ACQUIRE_OWNED_RETRY",
        SANLK_ACQUIRE_OWNER_GEN_REVERTED => "SANLK_ACQUIRE_OWNER_GEN_REVERTED",
        SANLK_ACQUIRE_OWNED_NO_TIMEOUT => "SANLK_ACQUIRE_OWNED_NO_TIMEOUT",
        SANLK_RELEASE_LVER => "SANLK_RELEASE_LVER",
        SANLK_RELEASE_OWNER => "SANLK_RELEASE_OWNER",
        SANLK5_RELEASE_LVER => "SANLK_RELEASE_LVER (5.x)",
        SANLK5_RELEASE_OWNER => "SANLK_RELEASE_OWNER (5.x)",
        SANLK_RENEW_OWNER => "SANLK_RENEW_OWNER",
        SANLK_RENEW_DIFF => "SANLK_RENEW_DIFF",
        SANLK_HOSTID_BUSY => "SANLK_HOSTID_BUSY",
        SANLK_RENEW_DEAD_EXT => "SANLK_RENEW_DEAD_EXT",
        SANLK_REQUEST_MAGIC => "SANLK_REQUEST_MAGIC",
        SANLK_REQUEST_VERSION => "SANLK_REQUEST_VERSION",
        SANLK_REQUEST_OLD => "SANLK_REQUEST_OLD",
        SANLK_REQUEST_LVER => "SANLK_REQUEST_LVER",
        SANLK_RINDEX_MAGIC => "SANLK_RINDEX_MAGIC",
        SANLK_RINDEX_VERSION => "SANLK_RINDEX_VERSION",
        SANLK_RINDEX_LOCKSPACE => "SANLK_RINDEX_LOCKSPACE",
        SANLK_RINDEX_OFFSET => "SANLK_RINDEX_OFFSET",
        SANLK_RINDEX_DIFF => "SANLK_RINDEX_DIFF",
        SANLK_WRONG_GENERATION => "SANLK_WRONG_GENERATION",
        SANLK_WRONG_CAW => "SANLK_WRONG_CAW",
        _ => return None,
    })
}
