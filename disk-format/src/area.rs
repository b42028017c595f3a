//! Layout of whole areas and the bytes `direct init` writes.
//!
//! Lockspace area (`align_size` bytes): host_id h owns sector h-1; sectors from
//! `max_hosts` on are zero.
//!
//! Paxos lease area (`align_size` bytes): sector 0 leader, sector 1 request record,
//! sector 1+h host h's dblock (+ mode block at byte 128), sector 2002 the LVB — a fixed
//! sector number, which lies outside the area on 4K/1M, 4K/2M and 4K/4M.

use crate::dblock::MBLOCK_OFFSET;
use crate::delta::DeltaSector;
use crate::geometry::Geometry;
use crate::leader::{
    LeaderRecord, DELTA_DISK_MAGIC, DELTA_DISK_VERSION, PAXOS_DISK_CLEAR, PAXOS_DISK_MAGIC,
    PAXOS_DISK_VERSION,
};
use crate::name::Name;
use crate::request::RequestRecord;

/// Sector of the paxos leader.
pub const LEADER_SECTOR: u64 = 0;
/// Sector of the request record.
pub const REQUEST_SECTOR: u64 = 1;
/// Sector of the lock value block, counted from the start of the lease area.
pub const LVB_SECTOR: u64 = 2002;
/// Default io_timeout written into a new lockspace.
pub const DEFAULT_IO_TIMEOUT_S: u16 = 10;

/// Byte offset, inside a lockspace area, of host_id's delta-lease sector.
pub fn delta_sector_offset(geometry: Geometry, host_id: u64) -> Option<u64> {
    if host_id == 0 || host_id > geometry.max_hosts() {
        return None;
    }
    Some((host_id - 1) * geometry.sector_bytes())
}

/// Sector, inside a paxos area, of host_id's dblock.
pub fn dblock_sector(host_id: u64) -> u64 {
    1 + host_id
}

/// Byte offset, inside a paxos area, of host_id's mode block.
pub fn mode_block_offset(geometry: Geometry, host_id: u64) -> u64 {
    dblock_sector(host_id) * geometry.sector_bytes() + MBLOCK_OFFSET as u64
}

/// Byte offset of the LVB sector relative to the lease area start.
pub fn lvb_offset(geometry: Geometry) -> u64 {
    LVB_SECTOR * geometry.sector_bytes()
}

/// True when the LVB sector lies inside the lease area (512/1M and 4K/8M only).
pub fn lvb_inside_area(geometry: Geometry) -> bool {
    lvb_offset(geometry) + geometry.sector_bytes() <= geometry.align_bytes()
}

/// Sectors a ballot reads: the smallest power of two ≥ num_hosts + 2.
pub fn ballot_read_sectors(num_hosts: u64) -> u64 {
    (num_hosts + 2).next_power_of_two()
}

/// The bytes of a freshly formatted lockspace, written in two steps: first `area`
/// (where host 1's record has magic 0, so a torn format has no valid first record),
/// then `first_sector` over sector 0.
#[derive(Debug, Clone)]
pub struct LockspaceFormat {
    pub area: Vec<u8>,
    pub first_sector: Vec<u8>,
}

/// Builds the two writes of sanlock's `delta_lease_init`.
pub fn format_lockspace_area(
    geometry: Geometry,
    space_name: &Name,
    io_timeout_s: u16,
) -> LockspaceFormat {
    let sector = geometry.sector_bytes() as usize;
    let mut area = vec![0u8; geometry.align_bytes() as usize];
    let mut leader = LeaderRecord {
        magic: DELTA_DISK_MAGIC,
        version: DELTA_DISK_VERSION,
        flags: geometry.align_size.leader_flag(),
        sector_size: geometry.sector_size.bytes(),
        max_hosts: 1,
        space_name: *space_name,
        io_timeout: io_timeout_s,
        ..LeaderRecord::ZERO
    };
    leader.seal();
    let record = DeltaSector::from_leader(leader);
    for i in 0..geometry.max_hosts() as usize {
        record.encode_into(&mut area[i * sector..(i + 1) * sector]);
    }
    let first_sector = area[..sector].to_vec();
    // Step one writes host 1's record with magic 0 (the checksum stays that of the
    // real record, as sanlock writes it).
    area[..4].fill(0);
    LockspaceFormat { area, first_sector }
}

/// Parameters of a resource format.
#[derive(Debug, Clone, Copy)]
pub struct ResourceInit {
    pub geometry: Geometry,
    pub space_name: Name,
    pub resource_name: Name,
    /// Dblocks in use; 0 or more than max_hosts means max_hosts.
    pub num_hosts: u64,
    /// Write a `PAXOS_DISK_CLEAR` leader stamped with this monotonic time instead.
    pub clear_at_monotime_s: Option<u64>,
}

/// The whole area sanlock's `paxos_lease_init` writes in one I/O.
pub fn format_resource_area(init: &ResourceInit) -> Vec<u8> {
    let g = init.geometry;
    let sector = g.sector_bytes() as usize;
    let max_hosts = g.max_hosts();
    let num_hosts = if init.num_hosts == 0 || init.num_hosts > max_hosts {
        max_hosts
    } else {
        init.num_hosts
    };
    let mut leader = LeaderRecord {
        magic: PAXOS_DISK_MAGIC,
        version: PAXOS_DISK_VERSION,
        flags: g.align_size.leader_flag(),
        sector_size: g.sector_size.bytes(),
        num_hosts,
        max_hosts,
        space_name: init.space_name,
        resource_name: init.resource_name,
        ..LeaderRecord::ZERO
    };
    if let Some(now) = init.clear_at_monotime_s {
        leader.magic = PAXOS_DISK_CLEAR;
        leader.write_timestamp = now;
    }
    leader.seal();
    let mut area = vec![0u8; g.align_bytes() as usize];
    leader.encode_into(&mut area[..sector]);
    RequestRecord::FRESH.encode_into(
        &mut area[REQUEST_SECTOR as usize * sector..(REQUEST_SECTOR as usize + 1) * sector],
    );
    area
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geometry::{AlignSize, SectorSize};

    #[test]
    fn offsets_512_1m() {
        let g = Geometry::ALL[0];
        assert_eq!(dblock_sector(1) * 512, 0x400);
        assert_eq!(mode_block_offset(g, 1), 0x480);
        assert_eq!(dblock_sector(2000) * 512, 0xFA200);
        assert_eq!(lvb_offset(g), 0xFA400);
        assert_eq!(ballot_read_sectors(2000), 2048);
        assert_eq!(ballot_read_sectors(250) * 4096, 1 << 20);
        assert_eq!(delta_sector_offset(g, 1), Some(0));
        assert_eq!(delta_sector_offset(g, 2000), Some(1999 * 512));
        assert_eq!(delta_sector_offset(g, 2001), None);
        assert_eq!(delta_sector_offset(g, 0), None);
    }

    #[test]
    fn lvb_geometries() {
        let inside: Vec<bool> = Geometry::ALL.iter().map(|g| lvb_inside_area(*g)).collect();
        assert_eq!(inside, vec![true, false, false, false, true]);
        let g = Geometry::new(SectorSize::B4096, AlignSize::M1).unwrap();
        assert_eq!(lvb_offset(g), 8_200_192);
    }

    #[test]
    fn lockspace_two_steps() {
        let g = Geometry::ALL[0];
        let f = format_lockspace_area(g, &Name::new("myls").unwrap(), 10);
        assert_eq!(&f.area[..4], &[0, 0, 0, 0]);
        assert_eq!(&f.first_sector[..4], &[0x10, 0x20, 0x21, 0x12]);
        assert_eq!(&f.area[4..512], &f.first_sector[4..512]);
        assert_eq!(&f.area[512..1024], &f.first_sector[..]);
        assert_eq!(&f.first_sector[168..172], &0x41A7_6326u32.to_le_bytes());
        assert!(f.area[2000 * 512..].iter().all(|&b| b == 0));
    }

    #[test]
    fn resource_fresh_vector() {
        let area = format_resource_area(&ResourceInit {
            geometry: Geometry::ALL[0],
            space_name: Name::new("myls").unwrap(),
            resource_name: Name::new("myres").unwrap(),
            num_hosts: 0,
            clear_at_monotime_s: None,
        });
        assert_eq!(area.len(), 1 << 20);
        assert_eq!(&area[168..172], &0x12EE_84FEu32.to_le_bytes());
        assert_eq!(
            &area[512..520],
            &[0x11, 0x20, 0x29, 0x08, 0x01, 0x00, 0x01, 0x00]
        );
        assert!(area[1024..].iter().all(|&b| b == 0));
    }
}
