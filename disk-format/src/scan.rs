//! Finding the valid lease records in a byte range, so that a command about to write
//! there can refuse instead of destroying them.
//!
//! A "valid record" is anything sanlock or lockd would read back as data:
//! - a delta leader (`DELTA_DISK_MAGIC`, known major version, checksum right): one host's
//!   record of a lockspace;
//! - a paxos leader (`PAXOS_DISK_MAGIC`, checksum right): a resource lease, held or not. A
//!   `PAXOS_DISK_CLEAR` leader (a deleted or cleared lease) is not valid: it is free space;
//! - a resource-index header (`RINDEX_DISK_MAGIC`, known major version);
//! - a written paxos ballot (a non-blank dblock whose checksum is right): a host's vote in
//!   a resource lease, e.g. the dblocks of a lease whose leader lies before the range.
//!
//! Invariants: the scan looks at every 512-byte boundary of the buffer (the smallest
//! sector size, so records of both sector sizes are seen wherever they start); it only
//! reads; it never panics on any input.

use std::fmt;

use crate::dblock::{PaxosDblock, DBLOCK_LEN};
use crate::geometry::LFL_ALIGN_MASK;
use crate::leader::{
    LeaderExpect, LeaderKind, LeaderRecord, DELTA_DISK_MAGIC, LEADER_RECORD_LEN, PAXOS_DISK_MAGIC,
};
use crate::name::Name;
use crate::rindex::{RindexHeader, RINDEX_DISK_MAGIC, RINDEX_HEADER_LEN};

/// The step of the scan: every record starts on a 512-byte boundary.
pub const SCAN_STEP: usize = 512;

/// What kind of valid record was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordKind {
    /// One host's delta lease record of a lockspace.
    Lockspace {
        /// Lockspace name.
        space: Name,
        /// The host_id the record belongs to.
        host_id: u64,
        /// Host that last acquired it (0 when never acquired).
        owner_id: u64,
    },
    /// The leader of a resource lease.
    Resource {
        /// Lockspace name.
        space: Name,
        /// Resource name.
        resource: Name,
        /// Owner host_id (0: free).
        owner_id: u64,
        /// Lease version.
        lver: u64,
        /// True when the leader records an owner (timestamp set).
        held: bool,
    },
    /// A written paxos ballot (dblock) of some resource lease.
    Ballot {
        /// Lease version of the ballot.
        lver: u64,
    },
    /// A resource-index header.
    Rindex {
        /// Lockspace name.
        space: Name,
    },
}

/// A valid record and where it starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoundRecord {
    /// Byte offset on the device.
    pub offset: u64,
    /// What it is.
    pub kind: RecordKind,
}

impl fmt::Display for FoundRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            RecordKind::Lockspace { space, host_id, .. } => write!(
                f,
                "lockspace {} host_id {host_id} record at offset {}",
                space, self.offset
            ),
            RecordKind::Resource {
                space,
                resource,
                owner_id,
                lver,
                held,
            } => {
                write!(
                    f,
                    "resource {space}:{resource} leader at offset {} (lver {lver}, ",
                    self.offset
                )?;
                if *held {
                    write!(f, "owner host_id {owner_id})")
                } else {
                    write!(f, "free)")
                }
            }
            RecordKind::Ballot { lver } => write!(
                f,
                "paxos ballot (dblock, lver {lver}) of a resource lease at offset {}",
                self.offset
            ),
            RecordKind::Rindex { space } => write!(
                f,
                "resource index of lockspace {space} at offset {}",
                self.offset
            ),
        }
    }
}

/// The align size a leader's flags name, else the old rule (512 → 1 MiB, 4 KiB → 8 MiB).
pub fn leader_align_bytes(leader: &LeaderRecord) -> u64 {
    use crate::geometry::{LFL_ALIGN_1M, LFL_ALIGN_2M, LFL_ALIGN_4M, LFL_ALIGN_8M};
    match leader.flags & LFL_ALIGN_MASK {
        LFL_ALIGN_1M => 1 << 20,
        LFL_ALIGN_2M => 2 << 20,
        LFL_ALIGN_4M => 4 << 20,
        LFL_ALIGN_8M => 8 << 20,
        _ if leader.sector_size == 4096 => 8 << 20,
        _ => 1 << 20,
    }
}

/// The record starting at `bytes[0]`, if it is a valid one (`offset` is its place).
pub fn record_at(bytes: &[u8], offset: u64) -> Option<FoundRecord> {
    if bytes.len() < LEADER_RECORD_LEN.max(RINDEX_HEADER_LEN).max(DBLOCK_LEN) {
        return None;
    }
    let magic = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
    let none = LeaderExpect::default();
    let kind = match magic {
        DELTA_DISK_MAGIC => {
            let l = LeaderRecord::decode(bytes).ok()?;
            l.verify(LeaderKind::Delta, &none).ok()?;
            let sector = u64::from(l.sector_size.max(512));
            let host_id = if l.owner_id != 0 {
                l.owner_id
            } else {
                offset % leader_align_bytes(&l) / sector + 1
            };
            RecordKind::Lockspace {
                space: l.space_name,
                host_id,
                owner_id: l.owner_id,
            }
        }
        PAXOS_DISK_MAGIC => {
            let l = LeaderRecord::decode(bytes).ok()?;
            l.verify(LeaderKind::Paxos, &none).ok()?;
            RecordKind::Resource {
                space: l.space_name,
                resource: l.resource_name,
                owner_id: l.owner_id,
                lver: l.lver,
                held: l.is_held(),
            }
        }
        RINDEX_DISK_MAGIC => {
            let h = RindexHeader::decode(bytes).ok()?;
            h.verify(None, None).ok()?;
            RecordKind::Rindex {
                space: h.lockspace_name,
            }
        }
        _ => {
            let d = PaxosDblock::decode(bytes).ok()?;
            if d.is_blank() || d.verify().is_err() {
                return None;
            }
            RecordKind::Ballot { lver: d.lver }
        }
    };
    Some(FoundRecord { offset, kind })
}

/// Every valid record in `buf`, which holds the device's bytes from `base_offset`.
/// Records are looked for at every [`SCAN_STEP`] boundary of the buffer.
pub fn find_records(buf: &[u8], base_offset: u64) -> Vec<FoundRecord> {
    buf.chunks(SCAN_STEP)
        .enumerate()
        .filter_map(|(i, chunk)| {
            let offset = base_offset.checked_add((i * SCAN_STEP) as u64)?;
            record_at(chunk, offset)
        })
        .collect()
}

/// One line naming the first record and how many more there are, e.g. `lockspace LS
/// host_id 1 record at offset 0 (and 1999 more valid records)`.
pub fn describe(found: &[FoundRecord]) -> String {
    match found {
        [] => "no valid record".to_string(),
        [one] => one.to_string(),
        [first, rest @ ..] => format!(
            "{first} (and {} more valid record{})",
            rest.len(),
            if rest.len() == 1 { "" } else { "s" }
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::area::{format_lockspace_area, format_resource_area, ResourceInit};
    use crate::geometry::{AlignSize, Geometry, SectorSize};

    fn n(s: &str) -> Name {
        Name::new(s).unwrap()
    }

    #[test]
    fn blank_and_cleared_areas_hold_nothing() {
        let g = Geometry::new(SectorSize::B512, AlignSize::M1).unwrap();
        assert!(find_records(&vec![0u8; 1 << 20], 0).is_empty());
        let cleared = format_resource_area(&ResourceInit {
            geometry: g,
            space_name: n("LS"),
            resource_name: n("r"),
            num_hosts: 0,
            clear_at_monotime_s: Some(5),
        });
        assert!(find_records(&cleared, 0).is_empty());
        // Garbage is not a record either.
        let junk: Vec<u8> = (0..8192u32).map(|i| (i * 7 + 3) as u8).collect();
        assert!(find_records(&junk, 0).is_empty());
        // Short buffers are fine.
        assert!(find_records(&[1, 2, 3], 0).is_empty());
    }

    #[test]
    fn lockspace_resource_and_ballot_found_with_offsets() {
        let g = Geometry::new(SectorSize::B512, AlignSize::M1).unwrap();
        let ls = format_lockspace_area(g, &n("LS"), 10);
        let mut ls_area = ls.area.clone();
        ls_area[..512].copy_from_slice(&ls.first_sector);
        let found = find_records(&ls_area, 1 << 20);
        assert_eq!(found.len() as u64, g.max_hosts());
        assert_eq!(
            found[0].to_string(),
            "lockspace LS host_id 1 record at offset 1048576"
        );
        assert!(matches!(
            found[3].kind,
            RecordKind::Lockspace { host_id: 4, .. }
        ));

        let mut res = format_resource_area(&ResourceInit {
            geometry: g,
            space_name: n("LS"),
            resource_name: n("r1"),
            num_hosts: 0,
            clear_at_monotime_s: None,
        });
        let found = find_records(&res, 0);
        assert_eq!(found.len(), 1, "a fresh resource: its leader only");
        assert_eq!(
            found[0].to_string(),
            "resource LS:r1 leader at offset 0 (lver 0, free)"
        );
        // A written ballot of host 1 (sector 2), seen also without its leader.
        let mut d = PaxosDblock {
            mbal: 1,
            bal: 1,
            inp: 1,
            inp2: 1,
            inp3: 7,
            lver: 1,
            ..Default::default()
        };
        d.seal();
        d.encode_into(&mut res[1024..]);
        let found = find_records(&res[512..], 512);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].offset, 1024);
        assert!(matches!(found[0].kind, RecordKind::Ballot { lver: 1 }));
        assert!(describe(&find_records(&res, 0)).ends_with("(and 1 more valid record)"));
    }
}
