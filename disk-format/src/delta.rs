//! One host's sector in a lockspace: the delta-lease leader at byte 0 and the host
//! notification bitmap at byte 256 (256 bytes = 2048 bits; host_id h is byte (h-1)/8,
//! bit (h-1)%8, least significant bit first). The rest of the sector is zero.

use crate::codec::need;
use crate::leader::{LeaderRecord, LEADER_RECORD_LEN};
use crate::FormatError;

/// Offset of the bitmap in a delta-lease sector.
pub const HOSTID_BITMAP_OFFSET: usize = 256;
/// Bytes of the bitmap.
pub const HOSTID_BITMAP_SIZE: usize = 256;
/// Bytes a delta sector needs to hold leader and bitmap.
pub const DELTA_SECTOR_MIN: usize = HOSTID_BITMAP_OFFSET + HOSTID_BITMAP_SIZE;

/// A decoded delta-lease sector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeltaSector {
    pub leader: LeaderRecord,
    pub bitmap: [u8; HOSTID_BITMAP_SIZE],
}

impl DeltaSector {
    /// Decodes leader and bitmap from the first 512 bytes of a sector.
    pub fn decode(sector: &[u8]) -> Result<DeltaSector, FormatError> {
        need(sector, DELTA_SECTOR_MIN, "delta lease sector")?;
        let leader = LeaderRecord::decode(&sector[..LEADER_RECORD_LEN])?;
        let mut bitmap = [0u8; HOSTID_BITMAP_SIZE];
        bitmap.copy_from_slice(&sector[HOSTID_BITMAP_OFFSET..DELTA_SECTOR_MIN]);
        Ok(DeltaSector { leader, bitmap })
    }

    /// A sector with the leader and an empty bitmap (what acquire and release write).
    pub fn from_leader(leader: LeaderRecord) -> DeltaSector {
        DeltaSector {
            leader,
            bitmap: [0; HOSTID_BITMAP_SIZE],
        }
    }

    /// Encodes into a whole sector, zero-filling everything else.
    ///
    /// # Panics
    /// If `sector` is shorter than 512 bytes (a caller bug).
    pub fn encode_into(&self, sector: &mut [u8]) {
        assert!(sector.len() >= DELTA_SECTOR_MIN, "delta sector too short");
        sector.fill(0);
        self.leader.encode_into(sector);
        sector[HOSTID_BITMAP_OFFSET..DELTA_SECTOR_MIN].copy_from_slice(&self.bitmap);
    }

    /// True when the bit for `host_id` is set. Host ids outside 1..=2048 are never set.
    pub fn host_bit(&self, host_id: u64) -> bool {
        match bit_position(host_id) {
            Some((byte, mask)) => self.bitmap[byte] & mask != 0,
            None => false,
        }
    }

    /// Sets or clears the bit for `host_id`; ids outside 1..=2048 are ignored.
    pub fn set_host_bit(&mut self, host_id: u64, on: bool) {
        if let Some((byte, mask)) = bit_position(host_id) {
            if on {
                self.bitmap[byte] |= mask;
            } else {
                self.bitmap[byte] &= !mask;
            }
        }
    }

    /// Host ids whose bit is set.
    pub fn hosts_in_bitmap(&self) -> Vec<u64> {
        // Byte by byte, skipping empty bytes: a bitmap is almost always nearly empty.
        let mut hosts = Vec::new();
        for (byte_index, &byte) in self.bitmap.iter().enumerate() {
            let mut rest = byte;
            while rest != 0 {
                let bit = rest.trailing_zeros() as u64;
                hosts.push(byte_index as u64 * 8 + bit + 1);
                rest &= rest - 1;
            }
        }
        hosts
    }
}

/// Where `host_id`'s bit lies in a delta sector's notification bitmap: (byte index,
/// mask); `None` outside 1..=2048.
pub fn bit_position(host_id: u64) -> Option<(usize, u8)> {
    if host_id == 0 || host_id > HOSTID_BITMAP_SIZE as u64 * 8 {
        return None;
    }
    let i = (host_id - 1) as usize;
    Some((i / 8, 1u8 << (i % 8)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::leader::{DELTA_DISK_MAGIC, DELTA_DISK_VERSION};
    use crate::name::Name;

    #[test]
    fn bitmap_positions() {
        let mut s = DeltaSector::from_leader(LeaderRecord::ZERO);
        s.set_host_bit(2, true);
        assert_eq!(s.bitmap[0], 0x02);
        s.set_host_bit(9, true);
        assert_eq!(s.bitmap[1], 0x01);
        s.set_host_bit(2048, true);
        assert_eq!(s.bitmap[255], 0x80);
        s.set_host_bit(0, true);
        s.set_host_bit(2049, true);
        assert_eq!(s.hosts_in_bitmap(), vec![2, 9, 2048]);
        s.set_host_bit(9, false);
        assert!(!s.host_bit(9));
    }

    #[test]
    fn fresh_lockspace_sector_vector() {
        let mut l = LeaderRecord {
            magic: DELTA_DISK_MAGIC,
            version: DELTA_DISK_VERSION,
            flags: 0x10,
            sector_size: 512,
            max_hosts: 1,
            space_name: Name::new("myls").unwrap(),
            io_timeout: 10,
            ..LeaderRecord::ZERO
        };
        l.seal();
        assert_eq!(l.checksum, 0x41A7_6326);
        let mut s = DeltaSector::from_leader(l);
        s.set_host_bit(2, true);
        let mut sector = vec![0xFFu8; 4096];
        s.encode_into(&mut sector);
        assert_eq!(sector[256], 0x02);
        assert!(sector[200..256].iter().all(|&b| b == 0));
        assert!(sector[512..].iter().all(|&b| b == 0));
        assert_eq!(DeltaSector::decode(&sector).unwrap(), s);
    }
}
