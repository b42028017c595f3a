//! One host's sector in a lockspace: the delta-lease leader at byte 0 and the host
//! notification bitmap at byte 256 (256 bytes = 2048 bits; host_id h is byte (h-1)/8,
//! bit (h-1)%8, least significant bit first). The rest of the sector is zero.

use crate::codec::{get_u16, get_u32, get_u64, need};
use crate::leader::{at, LeaderRecord, LEADER_RECORD_LEN, LFL_DEAD_EXT};
use crate::name::{Name, NAME_LEN};
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

/// A delta-lease sector read in place: each field decoded from the sector's bytes when
/// asked, nothing copied. [`DeltaSector::decode`] copies the whole leader and bitmap; a
/// renewal's host monitor looks at a handful of fields of up to 2,000 sectors and needs
/// the rest only when a record changed. Every accessor returns what the same field of
/// [`DeltaSector::decode`] holds (tested here and by the `delta_sector` fuzz target).
#[derive(Debug, Clone, Copy)]
pub struct DeltaSectorView<'a> {
    /// At least [`DELTA_SECTOR_MIN`] bytes.
    bytes: &'a [u8],
}

impl<'a> DeltaSectorView<'a> {
    /// A view of `sector`, which must hold leader and bitmap.
    pub fn new(sector: &'a [u8]) -> Result<DeltaSectorView<'a>, FormatError> {
        need(sector, DELTA_SECTOR_MIN, "delta lease sector")?;
        Ok(DeltaSectorView { bytes: sector })
    }

    /// `magic`.
    pub fn magic(&self) -> u32 {
        get_u32(self.bytes, at::MAGIC)
    }

    /// `flags`.
    pub fn flags(&self) -> u32 {
        get_u32(self.bytes, at::FLAGS)
    }

    /// True when the record carries DEAD_EXT ([`LeaderRecord::dead_ext`]).
    pub fn dead_ext(&self) -> bool {
        self.flags() & LFL_DEAD_EXT != 0
    }

    /// `owner_id`.
    pub fn owner_id(&self) -> u64 {
        get_u64(self.bytes, at::OWNER_ID)
    }

    /// `owner_generation`.
    pub fn owner_generation(&self) -> u64 {
        get_u64(self.bytes, at::OWNER_GENERATION)
    }

    /// `timestamp`.
    pub fn timestamp(&self) -> u64 {
        get_u64(self.bytes, at::TIMESTAMP)
    }

    /// `io_timeout`.
    pub fn io_timeout(&self) -> u16 {
        get_u16(self.bytes, at::IO_TIMEOUT)
    }

    /// True when the `space_name` field holds the same name as `name` ([`Name::same_as`]).
    pub fn space_name_is(&self, name: &Name) -> bool {
        let field = &self.bytes[at::SPACE_NAME..at::SPACE_NAME + NAME_LEN];
        // Word by word, inline and in place: this runs for every sector of every renewal
        // read, and a call to memcmp for 48 bytes (as `Name::same_as` makes) cost more
        // than the rest of the sector's checks; copying the field into a `Name` first
        // measured slower again. Unequal fields fall back to `same_as` (the NUL rule).
        let same_field = field
            .chunks_exact(8)
            .zip(name.0.chunks_exact(8))
            .all(|(a, b)| get_u64(a, 0) == get_u64(b, 0));
        same_field || Name::from_field(field).same_as(name)
    }

    /// `resource_name` (a delta lease's owner host name).
    pub fn resource_name(&self) -> Name {
        Name::from_field(&self.bytes[at::RESOURCE_NAME..at::RESOURCE_NAME + NAME_LEN])
    }

    /// `write_id`.
    pub fn write_id(&self) -> u64 {
        get_u64(self.bytes, at::WRITE_ID)
    }

    /// `write_generation`.
    pub fn write_generation(&self) -> u64 {
        get_u64(self.bytes, at::WRITE_GENERATION)
    }

    /// `write_timestamp`.
    pub fn write_timestamp(&self) -> u64 {
        get_u64(self.bytes, at::WRITE_TIMESTAMP)
    }

    /// [`DeltaSector::host_bit`], read in place.
    pub fn host_bit(&self, host_id: u64) -> bool {
        match bit_position(host_id) {
            Some((byte, mask)) => self.bytes[HOSTID_BITMAP_OFFSET + byte] & mask != 0,
            None => false,
        }
    }

    /// The whole sector decoded.
    pub fn decode(&self) -> DeltaSector {
        // The length was checked by `new`, the only decode error.
        DeltaSector::decode(self.bytes).expect("a view holds a whole delta sector")
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

    /// The view reads every field as `decode` does, on a golden sector and on arbitrary
    /// bytes.
    #[test]
    fn the_view_reads_each_field_as_decode_does() {
        fn agree(bytes: &[u8]) {
            let s = DeltaSector::decode(bytes).unwrap();
            let v = DeltaSectorView::new(bytes).unwrap();
            let l = &s.leader;
            assert_eq!(v.magic(), l.magic);
            assert_eq!(v.flags(), l.flags);
            assert_eq!(v.dead_ext(), l.dead_ext());
            assert_eq!(v.owner_id(), l.owner_id);
            assert_eq!(v.owner_generation(), l.owner_generation);
            assert_eq!(v.timestamp(), l.timestamp);
            assert_eq!(v.io_timeout(), l.io_timeout);
            assert!(v.space_name_is(&l.space_name));
            assert_eq!(v.resource_name(), l.resource_name);
            assert_eq!(v.write_id(), l.write_id);
            assert_eq!(v.write_generation(), l.write_generation);
            assert_eq!(v.write_timestamp(), l.write_timestamp);
            for h in [0, 1, 2, 9, 100, 2000, 2048, 2049] {
                assert_eq!(v.host_bit(h), s.host_bit(h), "host {h}");
            }
            assert_eq!(v.decode(), s);
        }
        let mut golden = DeltaSector::from_leader(LeaderRecord {
            magic: DELTA_DISK_MAGIC,
            version: DELTA_DISK_VERSION,
            flags: LFL_DEAD_EXT,
            sector_size: 512,
            owner_id: 7,
            owner_generation: 3,
            timestamp: 123_456,
            space_name: Name::new("myls").unwrap(),
            resource_name: Name::new("host-7").unwrap(),
            io_timeout: 10,
            write_id: 2,
            write_generation: 9,
            write_timestamp: 77,
            ..LeaderRecord::ZERO
        });
        golden.set_host_bit(2, true);
        golden.set_host_bit(2000, true);
        let mut bytes = vec![0u8; 512];
        golden.encode_into(&mut bytes);
        agree(&bytes);
        assert!(!DeltaSectorView::new(&bytes)
            .unwrap()
            .space_name_is(&Name::new("other").unwrap()));
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..200 {
            for b in bytes.iter_mut() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *b = x as u8;
            }
            agree(&bytes);
        }
        assert!(DeltaSectorView::new(&bytes[..511]).is_err());
    }

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
