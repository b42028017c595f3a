//! `leader_record`: 200 bytes, used as a delta lease (one per host sector of a lockspace)
//! and as the paxos lease leader (sector 0 of a resource area).
//!
//! ```text
//!   0 magic u32        4 version u32      8 flags u32       12 sector_size u32
//!  16 num_hosts u64   24 max_hosts u64   32 owner_id u64    40 owner_generation u64
//!  48 lver u64        56 space_name[48] 104 resource_name[48]
//! 152 timestamp u64  160 unused1 u64    168 checksum u32   172 unused2 u16
//! 174 io_timeout u16 176 write_id u64   184 write_generation u64
//! 192 write_timestamp u64                                   200 end
//! ```
//! The checksum covers bytes 0..168 only; io_timeout and the write_* triple are not
//! protected by it (a known gap of the format, kept for compatibility).
//!
//! Versions: sanlock 3.x writes delta 3.4 / paxos 6.4; sanlock 5.1 writes delta 5.0 /
//! paxos 7.0 with the same layout (observed: a 5.1.1 `direct init` differs from 3.8.5's
//! only in the version words and checksums, and its joins, renewals and acquires write
//! the same fields). Both majors are read ([`LeaderRecord::verify`]); lockd formats 3.4 /
//! 6.4 and otherwise rewrites a record with the version it was read with, so an area stays
//! in the format it was made in. 5.x added leader flags: [`LFL_NO_TIMEOUT`],
//! [`LFL_DEAD_EXT`] and [`LFL_CAW`] (values learnt by setting them with sanlock 5.1.1 and
//! by reading crafted records back through it). lockd implements DEAD_EXT only; a record
//! with NO_TIMEOUT or CAW is readable but never written by lockd
//! ([`LeaderRecord::check_writable`]).

use serde::Serialize;

use crate::checksum::sanlock_crc32c;
use crate::codec::{get_u16, get_u32, get_u64, need, put_u16, put_u32, put_u64};
use crate::name::{Name, NAME_LEN};
use crate::FormatError;

/// Encoded size of a leader record.
pub const LEADER_RECORD_LEN: usize = 200;
/// Bytes covered by the checksum.
pub const LEADER_CHECKSUM_LEN: usize = 168;
/// Bytes before `timestamp`, used to compare leader copies.
pub const LEADER_COMPARE_LEN: usize = 152;

/// Delta lease magic.
pub const DELTA_DISK_MAGIC: u32 = 0x1221_2010;
/// Paxos lease leader magic.
pub const PAXOS_DISK_MAGIC: u32 = 0x0615_2010;
/// Magic of a deliberately invalidated paxos lease.
pub const PAXOS_DISK_CLEAR: u32 = 0x1128_2016;
/// Delta lease version written (major 3, minor 4).
pub const DELTA_DISK_VERSION: u32 = 0x0003_0004;
/// Paxos lease version written (major 6, minor 4).
pub const PAXOS_DISK_VERSION: u32 = 0x0006_0004;
/// Delta lease version sanlock 5.x writes (major 5, minor 0).
pub const DELTA_DISK_VERSION_5: u32 = 0x0005_0000;
/// Paxos lease version sanlock 5.x writes (major 7, minor 0).
pub const PAXOS_DISK_VERSION_7: u32 = 0x0007_0000;
/// Mask selecting the major half of a version.
pub const VERSION_MAJOR_MASK: u32 = 0xFFFF_0000;

/// Leader flag: held exclusively only to grant a shared lease.
pub const LFL_SHORT_HOLD: u32 = 0x1;
/// Delta leader flag (sanlock 5.x): the lockspace's leases never expire by time; a host
/// is recovered only by fencing. Not implemented by lockd.
pub const LFL_NO_TIMEOUT: u32 = 0x2;
/// Delta leader flag (sanlock 4.2+/5.x `set_host DEAD_EXT`): an external fencer declared
/// this host_id + generation dead; its leases may be taken at once.
pub const LFL_DEAD_EXT: u32 = 0x4;
/// Delta and paxos leader flag (sanlock 5.x): the record must be updated with SCSI
/// COMPARE AND WRITE by every host. Not implemented by lockd.
pub const LFL_CAW: u32 = 0x8;

/// Which kind of leader a caller expects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum LeaderKind {
    Delta,
    Paxos,
}

impl LeaderKind {
    fn magic(self) -> u32 {
        match self {
            LeaderKind::Delta => DELTA_DISK_MAGIC,
            LeaderKind::Paxos => PAXOS_DISK_MAGIC,
        }
    }

    fn version(self) -> u32 {
        match self {
            LeaderKind::Delta => DELTA_DISK_VERSION,
            LeaderKind::Paxos => PAXOS_DISK_VERSION,
        }
    }

    /// True when `version`'s major is one lockd reads for this kind (3.x's and 5.x's).
    pub fn major_supported(self, version: u32) -> bool {
        let major = version & VERSION_MAJOR_MASK;
        match self {
            LeaderKind::Delta => {
                major == DELTA_DISK_VERSION & VERSION_MAJOR_MASK
                    || major == DELTA_DISK_VERSION_5 & VERSION_MAJOR_MASK
            }
            LeaderKind::Paxos => {
                major == PAXOS_DISK_VERSION & VERSION_MAJOR_MASK
                    || major == PAXOS_DISK_VERSION_7 & VERSION_MAJOR_MASK
            }
        }
    }

    fn record(self) -> &'static str {
        match self {
            LeaderKind::Delta => "delta lease",
            LeaderKind::Paxos => "paxos leader",
        }
    }
}

/// A decoded leader record. Fields are exactly the on-disk ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaderRecord {
    pub magic: u32,
    pub version: u32,
    pub flags: u32,
    pub sector_size: u32,
    pub num_hosts: u64,
    pub max_hosts: u64,
    pub owner_id: u64,
    pub owner_generation: u64,
    pub lver: u64,
    pub space_name: Name,
    pub resource_name: Name,
    pub timestamp: u64,
    pub unused1: u64,
    pub checksum: u32,
    pub unused2: u16,
    pub io_timeout: u16,
    pub write_id: u64,
    pub write_generation: u64,
    pub write_timestamp: u64,
}

/// Byte offsets of the leader fields read in place as well as decoded
/// ([`crate::delta::DeltaSectorView`] reads them without decoding the record).
pub(crate) mod at {
    pub const MAGIC: usize = 0;
    pub const FLAGS: usize = 8;
    pub const OWNER_ID: usize = 32;
    pub const OWNER_GENERATION: usize = 40;
    pub const SPACE_NAME: usize = 56;
    pub const RESOURCE_NAME: usize = 104;
    pub const TIMESTAMP: usize = 152;
    pub const IO_TIMEOUT: usize = 174;
    pub const WRITE_ID: usize = 176;
    pub const WRITE_GENERATION: usize = 184;
    pub const WRITE_TIMESTAMP: usize = 192;
}

impl LeaderRecord {
    /// An all-zero record.
    pub const ZERO: LeaderRecord = LeaderRecord {
        magic: 0,
        version: 0,
        flags: 0,
        sector_size: 0,
        num_hosts: 0,
        max_hosts: 0,
        owner_id: 0,
        owner_generation: 0,
        lver: 0,
        space_name: Name::EMPTY,
        resource_name: Name::EMPTY,
        timestamp: 0,
        unused1: 0,
        checksum: 0,
        unused2: 0,
        io_timeout: 0,
        write_id: 0,
        write_generation: 0,
        write_timestamp: 0,
    };

    /// Decodes the first 200 bytes of `bytes`. Checks only the length; see
    /// [`LeaderRecord::verify`] for the content checks.
    pub fn decode(bytes: &[u8]) -> Result<LeaderRecord, FormatError> {
        need(bytes, LEADER_RECORD_LEN, "leader record")?;
        Ok(LeaderRecord {
            magic: get_u32(bytes, at::MAGIC),
            version: get_u32(bytes, 4),
            flags: get_u32(bytes, at::FLAGS),
            sector_size: get_u32(bytes, 12),
            num_hosts: get_u64(bytes, 16),
            max_hosts: get_u64(bytes, 24),
            owner_id: get_u64(bytes, at::OWNER_ID),
            owner_generation: get_u64(bytes, at::OWNER_GENERATION),
            lver: get_u64(bytes, 48),
            space_name: Name::from_field(&bytes[at::SPACE_NAME..at::SPACE_NAME + NAME_LEN]),
            resource_name: Name::from_field(
                &bytes[at::RESOURCE_NAME..at::RESOURCE_NAME + NAME_LEN],
            ),
            timestamp: get_u64(bytes, at::TIMESTAMP),
            unused1: get_u64(bytes, 160),
            checksum: get_u32(bytes, 168),
            unused2: get_u16(bytes, 172),
            io_timeout: get_u16(bytes, at::IO_TIMEOUT),
            write_id: get_u64(bytes, at::WRITE_ID),
            write_generation: get_u64(bytes, at::WRITE_GENERATION),
            write_timestamp: get_u64(bytes, at::WRITE_TIMESTAMP),
        })
    }

    /// Encodes into the first 200 bytes of `out` as the fields stand (the checksum field
    /// is written as stored; call [`LeaderRecord::seal`] first to refresh it).
    ///
    /// # Panics
    /// If `out` is shorter than 200 bytes: a caller bug, not an input condition.
    pub fn encode_into(&self, out: &mut [u8]) {
        assert!(out.len() >= LEADER_RECORD_LEN, "leader buffer too short");
        put_u32(out, 0, self.magic);
        put_u32(out, 4, self.version);
        put_u32(out, 8, self.flags);
        put_u32(out, 12, self.sector_size);
        put_u64(out, 16, self.num_hosts);
        put_u64(out, 24, self.max_hosts);
        put_u64(out, 32, self.owner_id);
        put_u64(out, 40, self.owner_generation);
        put_u64(out, 48, self.lver);
        out[56..104].copy_from_slice(&self.space_name.0);
        out[104..152].copy_from_slice(&self.resource_name.0);
        put_u64(out, 152, self.timestamp);
        put_u64(out, 160, self.unused1);
        put_u32(out, 168, self.checksum);
        put_u16(out, 172, self.unused2);
        put_u16(out, 174, self.io_timeout);
        put_u64(out, 176, self.write_id);
        put_u64(out, 184, self.write_generation);
        put_u64(out, 192, self.write_timestamp);
    }

    /// The 200 encoded bytes.
    pub fn encode(&self) -> [u8; LEADER_RECORD_LEN] {
        let mut out = [0u8; LEADER_RECORD_LEN];
        self.encode_into(&mut out);
        out
    }

    /// The checksum of the current field values.
    pub fn computed_checksum(&self) -> u32 {
        sanlock_crc32c(&self.encode()[..LEADER_CHECKSUM_LEN])
    }

    /// Sets the checksum field from the other fields.
    pub fn seal(&mut self) {
        self.checksum = self.computed_checksum();
    }

    /// True when the leader is held (`timestamp != 0`).
    pub fn is_held(&self) -> bool {
        self.timestamp != 0
    }

    /// Verifies the checks sanlock applies when reading a leader: magic (a cleared paxos
    /// lease is reported as such), major version, checksum, and — when given — sector
    /// size, lockspace name and resource name. The order matches sanlock's
    /// `verify_leader`, so the first failing check is the one reported.
    pub fn verify(&self, kind: LeaderKind, expect: &LeaderExpect<'_>) -> Result<(), FormatError> {
        let record = kind.record();
        if self.magic != kind.magic() {
            if kind == LeaderKind::Paxos && self.magic == PAXOS_DISK_CLEAR {
                return Err(FormatError::Cleared { record });
            }
            return Err(FormatError::Magic {
                record,
                found: self.magic,
                expected: kind.magic(),
            });
        }
        if !kind.major_supported(self.version) {
            return Err(FormatError::Version {
                record,
                found: self.version,
                expected_major: kind.version() >> 16,
            });
        }
        if let Some(sector_size) = expect.sector_size {
            if self.sector_size != sector_size {
                return Err(FormatError::SectorSize {
                    record,
                    found: self.sector_size,
                    expected: sector_size,
                });
            }
        }
        if let Some(space) = expect.space_name {
            if !self.space_name.same_as(space) {
                return Err(FormatError::Lockspace {
                    found: self.space_name.to_text(),
                    expected: space.to_text(),
                });
            }
        }
        if let Some(res) = expect.resource_name {
            if !self.resource_name.same_as(res) {
                return Err(FormatError::Resource {
                    found: self.resource_name.to_text(),
                    expected: res.to_text(),
                });
            }
        }
        let computed = self.computed_checksum();
        if computed != self.checksum {
            return Err(FormatError::Checksum {
                record,
                stored: self.checksum,
                computed,
            });
        }
        Ok(())
    }

    /// Refuses a record written with a 5.x flag lockd does not implement, before lockd
    /// writes to the lease it belongs to: CAW ([`FormatError::Caw`], sanlock's
    /// `SANLK_WRONG_CAW`) — its owners update it with COMPARE AND WRITE, which plain
    /// writes would defeat — and, for delta leases, NO_TIMEOUT ([`FormatError::NoTimeout`])
    /// — its leases never expire, and lockd has no storage fencing to end them with.
    pub fn check_writable(&self, kind: LeaderKind) -> Result<(), FormatError> {
        let record = kind.record();
        if self.flags & LFL_CAW != 0 {
            return Err(FormatError::Caw { record });
        }
        if kind == LeaderKind::Delta && self.flags & LFL_NO_TIMEOUT != 0 {
            return Err(FormatError::NoTimeout);
        }
        Ok(())
    }

    /// True when this delta record says its host_id + generation was declared dead by an
    /// external fencer (`set_host DEAD_EXT`).
    pub fn dead_ext(&self) -> bool {
        self.flags & LFL_DEAD_EXT != 0
    }

    /// The paxos leader's byte range that identifies a lease instance (before timestamp).
    pub fn compare_prefix(&self) -> [u8; LEADER_COMPARE_LEN] {
        let mut out = [0u8; LEADER_COMPARE_LEN];
        out.copy_from_slice(&self.encode()[..LEADER_COMPARE_LEN]);
        out
    }
}

/// What a reader expects to find in a leader; `None` skips that check.
#[derive(Debug, Clone, Copy, Default)]
pub struct LeaderExpect<'a> {
    pub sector_size: Option<u32>,
    pub space_name: Option<&'a Name>,
    pub resource_name: Option<&'a Name>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> LeaderRecord {
        let mut l = LeaderRecord {
            magic: PAXOS_DISK_MAGIC,
            version: PAXOS_DISK_VERSION,
            flags: 0x10,
            sector_size: 512,
            num_hosts: 2000,
            max_hosts: 2000,
            space_name: Name::new("myls").unwrap(),
            resource_name: Name::new("myres").unwrap(),
            ..LeaderRecord::ZERO
        };
        l.seal();
        l
    }

    #[test]
    fn fresh_resource_checksum_vector() {
        assert_eq!(sample().checksum, 0x12EE_84FE);
    }

    #[test]
    fn golden_bytes() {
        let mut l = sample();
        l.owner_id = 1;
        l.owner_generation = 2;
        l.lver = 3;
        l.timestamp = 472;
        l.io_timeout = 10;
        l.write_id = 0x0102_0304_0506_0708;
        l.seal();
        let b = l.encode();
        assert_eq!(&b[0..4], &[0x10, 0x20, 0x15, 0x06]);
        assert_eq!(&b[4..8], &[0x04, 0x00, 0x06, 0x00]);
        assert_eq!(&b[8..16], &[0x10, 0, 0, 0, 0x00, 0x02, 0, 0]);
        assert_eq!(&b[16..24], &[0xd0, 0x07, 0, 0, 0, 0, 0, 0]);
        assert_eq!(&b[32..40], &[1, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(&b[40..48], &[2, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(&b[48..56], &[3, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(&b[56..60], b"myls");
        assert_eq!(&b[104..109], b"myres");
        assert_eq!(&b[152..160], &[0xd8, 0x01, 0, 0, 0, 0, 0, 0]);
        assert_eq!(&b[168..172], &l.checksum.to_le_bytes());
        assert_eq!(&b[174..176], &[10, 0]);
        assert_eq!(&b[176..184], &[8, 7, 6, 5, 4, 3, 2, 1]);
        assert_eq!(LeaderRecord::decode(&b).unwrap(), l);
    }

    #[test]
    fn checks_in_order() {
        let l = sample();
        let ls = Name::new("myls").unwrap();
        let other = Name::new("other").unwrap();
        let ok = LeaderExpect {
            sector_size: Some(512),
            space_name: Some(&ls),
            resource_name: None,
        };
        assert!(l.verify(LeaderKind::Paxos, &ok).is_ok());
        assert_eq!(
            l.verify(LeaderKind::Delta, &ok).unwrap_err().sanlk_code(),
            crate::rv::SANLK_LEADER_MAGIC
        );
        let mut v = l;
        v.version = 0x0008_0000;
        assert_eq!(
            v.verify(LeaderKind::Paxos, &ok).unwrap_err().sanlk_code(),
            crate::rv::SANLK_LEADER_VERSION
        );
        let wrong_ls = LeaderExpect {
            space_name: Some(&other),
            ..ok
        };
        assert_eq!(
            l.verify(LeaderKind::Paxos, &wrong_ls)
                .unwrap_err()
                .sanlk_code(),
            crate::rv::SANLK_LEADER_LOCKSPACE
        );
        let wrong_ss = LeaderExpect {
            sector_size: Some(4096),
            ..ok
        };
        assert_eq!(
            l.verify(LeaderKind::Paxos, &wrong_ss)
                .unwrap_err()
                .sanlk_code(),
            crate::rv::SANLK_LEADER_SECTORSIZE
        );
        let mut c = l;
        c.owner_id = 9;
        assert_eq!(
            c.verify(LeaderKind::Paxos, &ok).unwrap_err().sanlk_code(),
            crate::rv::SANLK_LEADER_CHECKSUM
        );
        // io_timeout lies outside the checksum.
        let mut t = l;
        t.io_timeout = 77;
        assert!(t.verify(LeaderKind::Paxos, &ok).is_ok());
        let mut cleared = l;
        cleared.magic = PAXOS_DISK_CLEAR;
        assert!(matches!(
            cleared.verify(LeaderKind::Paxos, &ok),
            Err(FormatError::Cleared { .. })
        ));
    }

    #[test]
    fn short_input() {
        assert!(matches!(
            LeaderRecord::decode(&[0u8; 199]),
            Err(FormatError::Truncated {
                need: 200,
                got: 199,
                ..
            })
        ));
    }
}
