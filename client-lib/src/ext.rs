//! lockd's extensions to the sanlock client protocol: the lease-loss watch and the leader
//! query. sanlock clients never send these commands and never receive these messages.
//!
//! Framing is sanlock's (the 32-byte [`Header`] with `SM_MAGIC`), so one socket serves
//! both. Command numbers live in a range sanlock does not use (`0x4C4B_xxxx`, "LK"); a
//! sanlock daemon ignores them and sends no reply, so callers bound their wait for the
//! reply and report "this daemon has no lockd extensions".
//!
//! * `LOCKD_CMD_WATCH` (data = pid to watch, 0 = the caller): reply result 0 and
//!   data2 = heartbeat interval in ms; afterwards the daemon pushes `LOCKD_MSG_WATCH_EVENT`
//!   messages on that connection: a heartbeat every interval, and a loss notice as soon
//!   as the daemon decides a lease of the watched pid can no longer be trusted — always
//!   *before* it starts the kill escalation for that decision.
//! * `LOCKD_CMD_LEADER` (payload: a sanlk_resource with its disks): reply result and a
//!   [`LeaderInfo`] payload when the result is 0.
//! * `LOCKD_CMD_METRICS` (no payload): reply result 0 and the Prometheus text exposition
//!   (UTF-8, format 0.0.4) as payload; the daemon closes the connection afterwards.
//!
//! Both payloads are fixed-size, little-endian-free native-endian like sanlock's structs
//! (the socket is local), and decoding never panics.

use disk_format::Name;

use crate::error::WireError;

/// WATCH: stream loss notices and heartbeats for a pid's leases.
pub const LOCKD_CMD_WATCH: u32 = 0x4C4B_0001;
/// LEADER: who holds a resource lease now, with its fencing token.
pub const LOCKD_CMD_LEADER: u32 = 0x4C4B_0002;
/// METRICS: the daemon's Prometheus text exposition (format 0.0.4) as the reply payload.
pub const LOCKD_CMD_METRICS: u32 = 0x4C4B_0003;
/// ACQUIRE_FOR_PID: leases held for a process that did not register; the daemon tracks
/// the pid and releases them when it exits (data = pid, data2 = count, cmd_flags =
/// acquire flags; payload: killpath path[128] + args[128], then the resources).
pub const LOCKD_CMD_ACQUIRE_FOR_PID: u32 = 0x4C4B_0010;
/// The `cmd` of every message the daemon pushes on a watch connection.
pub const LOCKD_MSG_WATCH_EVENT: u32 = 0x4C4B_0081;

/// What a watch message says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchKind {
    /// The daemon is alive; `leases` counts the watched pid's leases.
    Heartbeat,
    /// Renewals of the lockspace have failed for id_renewal_warn seconds (6·io_timeout):
    /// the lease will be lost at `kill_in_ms` unless a renewal succeeds first.
    RenewalFailing,
    /// The lockspace failed (id_renewal_fail, or a corrupt delta lease): the kill
    /// escalation starts now.
    LockspaceFailed,
    /// The lockspace is being removed (or the daemon shut down by force): holders are
    /// killed at once.
    LockspaceRemoved,
    /// Another host asked for the lease (`force_mode` 1 = FORCE, 2 = GRACEFUL).
    Requested,
}

impl WatchKind {
    pub fn code(self) -> u32 {
        match self {
            WatchKind::Heartbeat => 1,
            WatchKind::RenewalFailing => 2,
            WatchKind::LockspaceFailed => 3,
            WatchKind::LockspaceRemoved => 4,
            WatchKind::Requested => 5,
        }
    }

    pub fn from_code(code: u32) -> Option<WatchKind> {
        Some(match code {
            1 => WatchKind::Heartbeat,
            2 => WatchKind::RenewalFailing,
            3 => WatchKind::LockspaceFailed,
            4 => WatchKind::LockspaceRemoved,
            5 => WatchKind::Requested,
            _ => return None,
        })
    }

    /// A short name for logs and JSON.
    pub fn name(self) -> &'static str {
        match self {
            WatchKind::Heartbeat => "heartbeat",
            WatchKind::RenewalFailing => "renewal_failing",
            WatchKind::LockspaceFailed => "lockspace_failed",
            WatchKind::LockspaceRemoved => "lockspace_removed",
            WatchKind::Requested => "requested",
        }
    }
}

/// Size of a [`WatchEvent`] payload.
pub const WATCH_EVENT_LEN: usize = 144;

/// "Unknown / not applicable" for the `*_in_ms` fields.
pub const NO_DEADLINE: i64 = i64::MIN;

/// One message on a watch connection (after its header).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WatchEvent {
    pub kind: WatchKind,
    /// For `Requested`: the request's force mode.
    pub force_mode: u32,
    /// For `Heartbeat`: how many leases the watched pid holds.
    pub leases: u32,
    /// The watched pid.
    pub pid: i32,
    /// Lockspace concerned (empty for a heartbeat).
    pub lockspace: Name,
    /// Resource concerned (empty when the whole lockspace is concerned).
    pub resource: Name,
    /// The lease version of the resource concerned (0 when several or none).
    pub lver: u64,
    /// Milliseconds until the kill escalation starts (≤ 0: it has started);
    /// [`NO_DEADLINE`] when unknown.
    pub kill_in_ms: i64,
    /// Milliseconds until the watchdog would reset this host; [`NO_DEADLINE`] when the
    /// daemon runs without a watchdog or it does not apply.
    pub watchdog_in_ms: i64,
    /// Milliseconds since the lockspace's last successful renewal (0 for a heartbeat).
    pub renewal_age_ms: u64,
}

impl WatchEvent {
    pub fn heartbeat(pid: i32, leases: u32) -> WatchEvent {
        WatchEvent {
            kind: WatchKind::Heartbeat,
            force_mode: 0,
            leases,
            pid,
            lockspace: Name::EMPTY,
            resource: Name::EMPTY,
            lver: 0,
            kill_in_ms: NO_DEADLINE,
            watchdog_in_ms: NO_DEADLINE,
            renewal_age_ms: 0,
        }
    }

    pub fn encode(&self) -> [u8; WATCH_EVENT_LEN] {
        let mut b = [0u8; WATCH_EVENT_LEN];
        b[0..4].copy_from_slice(&self.kind.code().to_ne_bytes());
        b[4..8].copy_from_slice(&self.force_mode.to_ne_bytes());
        b[8..12].copy_from_slice(&self.leases.to_ne_bytes());
        b[12..16].copy_from_slice(&self.pid.to_ne_bytes());
        b[16..64].copy_from_slice(&self.lockspace.0);
        b[64..112].copy_from_slice(&self.resource.0);
        b[112..120].copy_from_slice(&self.lver.to_ne_bytes());
        b[120..128].copy_from_slice(&self.kill_in_ms.to_ne_bytes());
        b[128..136].copy_from_slice(&self.watchdog_in_ms.to_ne_bytes());
        b[136..144].copy_from_slice(&self.renewal_age_ms.to_ne_bytes());
        b
    }

    pub fn decode(b: &[u8]) -> Result<WatchEvent, WireError> {
        if b.len() != WATCH_EVENT_LEN {
            return Err(WireError::Short {
                what: "lockd watch event",
                need: WATCH_EVENT_LEN,
                got: b.len(),
            });
        }
        let kind = WatchKind::from_code(u32_at(b, 0)).ok_or(WireError::BadField {
            what: "lockd watch event",
            why: "unknown kind",
        })?;
        Ok(WatchEvent {
            kind,
            force_mode: u32_at(b, 4),
            leases: u32_at(b, 8),
            pid: u32_at(b, 12) as i32,
            lockspace: Name::from_field(&b[16..64]),
            resource: Name::from_field(&b[64..112]),
            lver: u64_at(b, 112),
            kill_in_ms: u64_at(b, 120) as i64,
            watchdog_in_ms: u64_at(b, 128) as i64,
            renewal_age_ms: u64_at(b, 136),
        })
    }
}

/// Size of a [`LeaderInfo`] payload.
pub const LEADER_INFO_LEN: usize = 96;

/// Who holds a resource lease, as LEADER answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaderInfo {
    /// 0 when nobody holds the lease.
    pub host_id: u64,
    pub generation: u64,
    /// The lease version: the fencing token of the current (or last) holder.
    pub token: u64,
    /// A SANLK_HOST_* state of the holder in our view of the lockspace; 0 when nobody
    /// holds the lease.
    pub host_state: u32,
    /// 1 when the lease is held shared (then `host_id` is one of the holders).
    pub shared: u32,
    /// The holder's host name (from its delta lease), empty when unknown.
    pub host_name: Name,
}

impl LeaderInfo {
    pub fn encode(&self) -> [u8; LEADER_INFO_LEN] {
        let mut b = [0u8; LEADER_INFO_LEN];
        b[0..8].copy_from_slice(&self.host_id.to_ne_bytes());
        b[8..16].copy_from_slice(&self.generation.to_ne_bytes());
        b[16..24].copy_from_slice(&self.token.to_ne_bytes());
        b[24..28].copy_from_slice(&self.host_state.to_ne_bytes());
        b[28..32].copy_from_slice(&self.shared.to_ne_bytes());
        b[32..80].copy_from_slice(&self.host_name.0);
        b
    }

    pub fn decode(b: &[u8]) -> Result<LeaderInfo, WireError> {
        if b.len() < LEADER_INFO_LEN {
            return Err(WireError::Short {
                what: "lockd leader info",
                need: LEADER_INFO_LEN,
                got: b.len(),
            });
        }
        Ok(LeaderInfo {
            host_id: u64_at(b, 0),
            generation: u64_at(b, 8),
            token: u64_at(b, 16),
            host_state: u32_at(b, 24),
            shared: u32_at(b, 28),
            host_name: Name::from_field(&b[32..80]),
        })
    }

    /// `none`, or the host state's name in lower case (`live`, `fail`, `dead`, …).
    pub fn state_name(&self) -> &'static str {
        if self.host_id == 0 {
            return "none";
        }
        match self.host_state {
            1 => "unknown",
            2 => "free",
            3 => "live",
            4 => "fail",
            5 => "dead",
            _ => "unknown",
        }
    }
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_ne_bytes(a)
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_ne_bytes(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watch_event_golden_bytes() {
        let e = WatchEvent {
            kind: WatchKind::RenewalFailing,
            force_mode: 0,
            leases: 1,
            pid: 4242,
            lockspace: Name::new("ls").unwrap(),
            resource: Name::new("r1").unwrap(),
            lver: 7,
            kill_in_ms: 1500,
            watchdog_in_ms: NO_DEADLINE,
            renewal_age_ms: 6000,
        };
        let b = e.encode();
        let mut want = vec![0u8; WATCH_EVENT_LEN];
        want[0..4].copy_from_slice(&2u32.to_ne_bytes());
        want[8..12].copy_from_slice(&1u32.to_ne_bytes());
        want[12..16].copy_from_slice(&4242i32.to_ne_bytes());
        want[16..18].copy_from_slice(b"ls");
        want[64..66].copy_from_slice(b"r1");
        want[112..120].copy_from_slice(&7u64.to_ne_bytes());
        want[120..128].copy_from_slice(&1500i64.to_ne_bytes());
        want[128..136].copy_from_slice(&i64::MIN.to_ne_bytes());
        want[136..144].copy_from_slice(&6000u64.to_ne_bytes());
        assert_eq!(b.to_vec(), want);
        assert_eq!(WatchEvent::decode(&b).unwrap(), e);
    }

    #[test]
    fn watch_event_rejects_bad_input() {
        assert!(WatchEvent::decode(&[0u8; 10]).is_err());
        let mut b = WatchEvent::heartbeat(1, 0).encode();
        b[0..4].copy_from_slice(&99u32.to_ne_bytes());
        assert!(WatchEvent::decode(&b).is_err());
        assert!(WatchEvent::decode(&[0u8; WATCH_EVENT_LEN + 1]).is_err());
    }

    #[test]
    fn leader_info_round_trip_and_state_names() {
        let l = LeaderInfo {
            host_id: 3,
            generation: 2,
            token: 11,
            host_state: 3,
            shared: 0,
            host_name: Name::new("node3").unwrap(),
        };
        let b = l.encode();
        assert_eq!(&b[32..37], b"node3");
        assert_eq!(&b[16..24], &11u64.to_ne_bytes());
        assert_eq!(LeaderInfo::decode(&b).unwrap(), l);
        assert_eq!(l.state_name(), "live");
        let none = LeaderInfo { host_id: 0, ..l };
        assert_eq!(none.state_name(), "none");
        assert!(LeaderInfo::decode(&b[..50]).is_err());
    }
}
