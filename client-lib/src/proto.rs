//! Constants of sanlock's client protocol (`sanlock_sock.h`, `sanlock.h`,
//! `sanlock_resource.h`, `sanlock_admin.h`), hard-coded because `sanlock_sock.h` is not an
//! installed header. Values are the wire contract; never renumber.
#![allow(missing_docs)]

/// Name of the daemon socket inside the run dir.
pub const SOCKET_NAME: &str = "sanlock.sock";
/// `SM_MAGIC`: first word of every header.
pub const SM_MAGIC: u32 = 0x0428_2010;
/// `SM_PROTO`: protocol version major 0, minor 1.
pub const SM_PROTO: u32 = 0x0000_0001;
/// `SM_CB_PROTO`: version of `event_cb` records.
pub const SM_CB_PROTO: u32 = 0x0000_0001;
/// `SM_CB_GET_EVENT`: command of `event_cb` records.
pub const SM_CB_GET_EVENT: u32 = 1;
/// `MAX_CLIENT_MSG`: no message (header + payload) may claim more.
pub const MAX_CLIENT_MSG: u32 = 1024 * 1024;

pub const SM_CMD_REGISTER: u32 = 1;
pub const SM_CMD_ADD_LOCKSPACE: u32 = 2;
pub const SM_CMD_REM_LOCKSPACE: u32 = 3;
pub const SM_CMD_SHUTDOWN: u32 = 4;
pub const SM_CMD_STATUS: u32 = 5;
pub const SM_CMD_LOG_DUMP: u32 = 6;
pub const SM_CMD_ACQUIRE: u32 = 7;
pub const SM_CMD_RELEASE: u32 = 8;
pub const SM_CMD_INQUIRE: u32 = 9;
pub const SM_CMD_RESTRICT: u32 = 10;
pub const SM_CMD_REQUEST: u32 = 11;
pub const SM_CMD_ALIGN: u32 = 12;
pub const SM_CMD_EXAMINE_LOCKSPACE: u32 = 13;
pub const SM_CMD_EXAMINE_RESOURCE: u32 = 14;
pub const SM_CMD_HOST_STATUS: u32 = 15;
pub const SM_CMD_INQ_LOCKSPACE: u32 = 16;
pub const SM_CMD_KILLPATH: u32 = 17;
pub const SM_CMD_WRITE_LOCKSPACE: u32 = 18;
pub const SM_CMD_WRITE_RESOURCE: u32 = 19;
pub const SM_CMD_READ_LOCKSPACE: u32 = 20;
pub const SM_CMD_READ_RESOURCE: u32 = 21;
pub const SM_CMD_GET_LOCKSPACES: u32 = 22;
pub const SM_CMD_GET_HOSTS: u32 = 23;
pub const SM_CMD_READ_RESOURCE_OWNERS: u32 = 24;
pub const SM_CMD_SET_LVB: u32 = 25;
pub const SM_CMD_GET_LVB: u32 = 26;
pub const SM_CMD_CONVERT: u32 = 27;
pub const SM_CMD_VERSION: u32 = 28;
pub const SM_CMD_SHUTDOWN_WAIT: u32 = 29;
pub const SM_CMD_REG_EVENT: u32 = 30;
pub const SM_CMD_END_EVENT: u32 = 31;
pub const SM_CMD_SET_EVENT: u32 = 32;
pub const SM_CMD_SET_CONFIG: u32 = 33;
pub const SM_CMD_RENEWAL: u32 = 34;
pub const SM_CMD_FORMAT_RINDEX: u32 = 35;
pub const SM_CMD_UPDATE_RINDEX: u32 = 36;
pub const SM_CMD_LOOKUP_RINDEX: u32 = 37;
pub const SM_CMD_CREATE_RESOURCE: u32 = 38;
pub const SM_CMD_DELETE_RESOURCE: u32 = 39;
pub const SM_CMD_REBUILD_RINDEX: u32 = 40;
// sanlock 4.x/5.x commands, numbers and layouts learnt by observing libsanlock 5.1.1 on a
// socket (docs/protocol.md).
/// `sanlock_acquire2`: ACQUIRE's request; a failure reply carries the owner.
pub const SM_CMD_ACQUIRE2: u32 = 41;
/// `sanlock_read_lockspace_host`: one host's delta lease, read from disk.
pub const SM_CMD_READ_LOCKSPACE_HOST: u32 = 42;
/// `sanlock_init_lockspace_host`: rewrite one host's delta lease (cmd_flags = USE/NO_CAW,
/// data2 = io_timeout).
pub const SM_CMD_INIT_LOCKSPACE_HOST: u32 = 43;
/// `sanlock_set_host`: data = operation (`SANLK_SET_HOST_DEAD_EXT`).
pub const SM_CMD_SET_HOST: u32 = 44;

/// A short name for a command number, for logs.
pub fn cmd_name(cmd: u32) -> &'static str {
    match cmd {
        SM_CMD_REGISTER => "register",
        SM_CMD_ADD_LOCKSPACE => "add_lockspace",
        SM_CMD_REM_LOCKSPACE => "rem_lockspace",
        SM_CMD_SHUTDOWN => "shutdown",
        SM_CMD_STATUS => "status",
        SM_CMD_LOG_DUMP => "log_dump",
        SM_CMD_ACQUIRE => "acquire",
        SM_CMD_RELEASE => "release",
        SM_CMD_INQUIRE => "inquire",
        SM_CMD_RESTRICT => "restrict",
        SM_CMD_REQUEST => "request",
        SM_CMD_ALIGN => "align",
        SM_CMD_EXAMINE_LOCKSPACE => "examine_lockspace",
        SM_CMD_EXAMINE_RESOURCE => "examine_resource",
        SM_CMD_HOST_STATUS => "host_status",
        SM_CMD_INQ_LOCKSPACE => "inq_lockspace",
        SM_CMD_KILLPATH => "killpath",
        SM_CMD_WRITE_LOCKSPACE => "write_lockspace",
        SM_CMD_WRITE_RESOURCE => "write_resource",
        SM_CMD_READ_LOCKSPACE => "read_lockspace",
        SM_CMD_READ_RESOURCE => "read_resource",
        SM_CMD_GET_LOCKSPACES => "get_lockspaces",
        SM_CMD_GET_HOSTS => "get_hosts",
        SM_CMD_READ_RESOURCE_OWNERS => "read_resource_owners",
        SM_CMD_SET_LVB => "set_lvb",
        SM_CMD_GET_LVB => "get_lvb",
        SM_CMD_CONVERT => "convert",
        SM_CMD_VERSION => "version",
        SM_CMD_SHUTDOWN_WAIT => "shutdown_wait",
        SM_CMD_REG_EVENT => "reg_event",
        SM_CMD_END_EVENT => "end_event",
        SM_CMD_SET_EVENT => "set_event",
        SM_CMD_SET_CONFIG => "set_config",
        SM_CMD_RENEWAL => "renewal",
        SM_CMD_FORMAT_RINDEX => "format_rindex",
        SM_CMD_UPDATE_RINDEX => "update_rindex",
        SM_CMD_LOOKUP_RINDEX => "lookup_rindex",
        SM_CMD_CREATE_RESOURCE => "create_resource",
        SM_CMD_DELETE_RESOURCE => "delete_resource",
        SM_CMD_REBUILD_RINDEX => "rebuild_rindex",
        SM_CMD_ACQUIRE2 => "acquire2",
        SM_CMD_READ_LOCKSPACE_HOST => "read_lockspace_host",
        SM_CMD_INIT_LOCKSPACE_HOST => "init_lockspace_host",
        SM_CMD_SET_HOST => "set_host",
        _ => "unknown",
    }
}

// sanlk_state types.
pub const SANLK_STATE_MAXSTR: usize = 4096;
pub const SANLK_STATE_DAEMON: u32 = 1;
pub const SANLK_STATE_CLIENT: u32 = 2;
pub const SANLK_STATE_LOCKSPACE: u32 = 3;
pub const SANLK_STATE_RESOURCE: u32 = 4;
pub const SANLK_STATE_HOST: u32 = 5;
pub const SANLK_STATE_RENEWAL: u32 = 6;

// Limits (sanlock.h).
pub const SANLK_MAX_RESOURCES: u32 = 8;
pub const SANLK_MAX_DISKS: u32 = 4;
pub const SANLK_PATH_LEN: usize = 1024;
pub const SANLK_HELPER_PATH_LEN: usize = 128;
pub const SANLK_HELPER_ARGS_LEN: usize = 128;
/// Longest single resource string in an INQUIRE state (`SANLK_MAX_RES_STR`).
pub const SANLK_MAX_RES_STR: usize = 4096;

// Lockspace flags (sanlk_lockspace.flags).
pub const SANLK_LSF_ADD: u32 = 0x1;
pub const SANLK_LSF_REM: u32 = 0x2;
/// 5.x: the delta leases carry NO_TIMEOUT.
pub const SANLK_LSF_NO_TIMEOUT: u32 = 0x4;
/// 5.x: the delta leases carry the CAW flag.
pub const SANLK_LSF_USING_CAW: u32 = 0x8;
/// 5.x: the paxos leader carries the CAW flag.
pub const SANLK_RES_USING_CAW: u32 = 0x400;
/// 5.x GET_HOSTS cmd_flags: only this host's own entry.
pub const SANLK_GET_HOST_LOCAL: u32 = 0x1;
/// 5.x SET_HOST operation (header `data`): mark a host's delta lease DEAD_EXT.
pub const SANLK_SET_HOST_DEAD_EXT: u32 = 0x1;
/// 5.x sanlk_host.flags bit beside the state: the delta lease has DEAD_EXT.
pub const SANLK_HOST_DEAD_EXT: u32 = 0x10;
/// 5.x sanlk_host.flags bit: host_dead_seconds have passed since the host's record last
/// changed. sanlock 5.1.1 sets it only beside [`SANLK_HOST_DEAD_EXT`] (observed).
pub const SANLK_HOST_DEAD_SEC: u32 = 0x20;

// Resource flags (sanlk_resource.flags).
pub const SANLK_RES_LVER: u32 = 0x1;
pub const SANLK_RES_NUM_HOSTS: u32 = 0x2;
pub const SANLK_RES_SHARED: u32 = 0x4;
pub const SANLK_RES_PERSISTENT: u32 = 0x8;

// ACQUIRE cmd_flags.
pub const SANLK_ACQUIRE_LVB: u32 = 0x1;
pub const SANLK_ACQUIRE_ORPHAN: u32 = 0x2;
pub const SANLK_ACQUIRE_ORPHAN_ONLY: u32 = 0x4;
pub const SANLK_ACQUIRE_OWNER_NOWAIT: u32 = 0x8;
/// 3.9: data2 is a daemon-side client id instead of a pid.
pub const SANLK_FOR_CLIENT_ID: u32 = 0x10;

// RELEASE cmd_flags.
pub const SANLK_REL_ALL: u32 = 0x1;
pub const SANLK_REL_RENAME: u32 = 0x2;

/// rindex commands: do the operation without the lockspace (lookup, update, rebuild).
pub const SANLK_RX_NO_LOCKSPACE: u32 = 0x1;
/// UPDATE_RINDEX: add an entry.
pub const SANLK_RXUP_ADD: u32 = 0x0001_0000;
/// UPDATE_RINDEX: remove an entry.
pub const SANLK_RXUP_REM: u32 = 0x0002_0000;
pub const SANLK_REL_ORPHAN: u32 = 0x4;

// RESTRICT cmd_flags.
pub const SANLK_RESTRICT_ALL: u32 = 0x1;
pub const SANLK_RESTRICT_SIGKILL: u32 = 0x2;
pub const SANLK_RESTRICT_SIGTERM: u32 = 0x4;

// KILLPATH cmd_flags.
pub const SANLK_KILLPATH_PID: u32 = 0x1;

// ADD/REM/INQ lockspace cmd_flags.
pub const SANLK_ADD_ASYNC: u32 = 0x1;
pub const SANLK_REM_ASYNC: u32 = 0x1;
pub const SANLK_REM_UNUSED: u32 = 0x2;
pub const SANLK_INQ_WAIT: u32 = 0x1;

// WRITE_RESOURCE cmd_flags.
pub const SANLK_WRITE_CLEAR: u32 = 0x1;

// REQUEST cmd_flags and force modes.
pub const SANLK_REQUEST_NEXT_LVER: u32 = 0x1;
pub const SANLK_REQ_FORCE: u32 = 1;
pub const SANLK_REQ_GRACEFUL: u32 = 2;

// SET_EVENT cmd_flags.
pub const SANLK_SETEV_CUR_GENERATION: u32 = 0x1;
pub const SANLK_SETEV_CLEAR_HOSTID: u32 = 0x2;
pub const SANLK_SETEV_CLEAR_EVENT: u32 = 0x4;
pub const SANLK_SETEV_REPLACE_EVENT: u32 = 0x8;
pub const SANLK_SETEV_ALL_HOSTS: u32 = 0x10;

// Host states (sanlk_host.flags & SANLK_HOST_MASK).
pub const SANLK_HOST_UNKNOWN: u32 = 1;
pub const SANLK_HOST_FREE: u32 = 2;
pub const SANLK_HOST_LIVE: u32 = 3;
pub const SANLK_HOST_FAIL: u32 = 4;
pub const SANLK_HOST_DEAD: u32 = 5;
pub const SANLK_HOST_MASK: u32 = 0xF;

/// `sanlock_version_combined` of the sanlock release whose protocol lockd speaks (3.8.5).
pub const SANLOCK_VERSION_COMBINED: u32 = 0x0308_0500;
