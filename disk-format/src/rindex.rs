//! Resource index: a header in sector 0 of the rindex area and 64-byte entries packed
//! from byte `sector_size` on. No checksums.
//!
//! ```text
//! header: 0 magic  4 version  8 flags (RHF_ALIGN_*)  12 sector_size  16 max_resources
//!         20 unused  24 rx_offset u64  32 lockspace_name[48]           80 end
//! entry:  0 res_offset u64  8 flags u32  12 unused u32  16 name[48]     64 end
//! ```

use crate::codec::{get_u32, get_u64, need, put_u32, put_u64};
use crate::name::Name;
use crate::FormatError;

/// Encoded size of the header.
pub const RINDEX_HEADER_LEN: usize = 80;
/// Encoded size of one entry.
pub const RINDEX_ENTRY_LEN: usize = 64;
/// Header magic.
pub const RINDEX_DISK_MAGIC: u32 = 0x0104_2018;
/// Header version (major 1, minor 2).
pub const RINDEX_DISK_VERSION: u32 = 0x0001_0002;
/// Default max_resources when a caller passes 0.
pub const RINDEX_DEFAULT_MAX_RESOURCES: u32 = 4096;

/// A decoded rindex header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RindexHeader {
    pub magic: u32,
    pub version: u32,
    pub flags: u32,
    pub sector_size: u32,
    pub max_resources: u32,
    pub unused: u32,
    pub rx_offset: u64,
    pub lockspace_name: Name,
}

impl RindexHeader {
    /// Decodes the first 80 bytes.
    pub fn decode(bytes: &[u8]) -> Result<RindexHeader, FormatError> {
        need(bytes, RINDEX_HEADER_LEN, "rindex header")?;
        Ok(RindexHeader {
            magic: get_u32(bytes, 0),
            version: get_u32(bytes, 4),
            flags: get_u32(bytes, 8),
            sector_size: get_u32(bytes, 12),
            max_resources: get_u32(bytes, 16),
            unused: get_u32(bytes, 20),
            rx_offset: get_u64(bytes, 24),
            lockspace_name: Name::from_field(&bytes[32..80]),
        })
    }

    /// Encodes into the first 80 bytes of `out`.
    ///
    /// # Panics
    /// If `out` is shorter than 80 bytes (a caller bug).
    pub fn encode_into(&self, out: &mut [u8]) {
        assert!(
            out.len() >= RINDEX_HEADER_LEN,
            "rindex header buffer too short"
        );
        put_u32(out, 0, self.magic);
        put_u32(out, 4, self.version);
        put_u32(out, 8, self.flags);
        put_u32(out, 12, self.sector_size);
        put_u32(out, 16, self.max_resources);
        put_u32(out, 20, self.unused);
        put_u64(out, 24, self.rx_offset);
        out[32..80].copy_from_slice(&self.lockspace_name.0);
    }

    /// The 80 encoded bytes.
    pub fn encode(&self) -> [u8; RINDEX_HEADER_LEN] {
        let mut out = [0u8; RINDEX_HEADER_LEN];
        self.encode_into(&mut out);
        out
    }

    /// Magic, major version, lockspace name and offset checks.
    pub fn verify(&self, space: Option<&Name>, offset: Option<u64>) -> Result<(), FormatError> {
        if self.magic != RINDEX_DISK_MAGIC {
            return Err(FormatError::Magic {
                record: "rindex header",
                found: self.magic,
                expected: RINDEX_DISK_MAGIC,
            });
        }
        if self.version & 0xFFFF_0000 != RINDEX_DISK_VERSION & 0xFFFF_0000 {
            return Err(FormatError::Version {
                record: "rindex header",
                found: self.version,
                expected_major: RINDEX_DISK_VERSION >> 16,
            });
        }
        if let Some(space) = space {
            if !self.lockspace_name.same_as(space) {
                return Err(FormatError::Lockspace {
                    found: self.lockspace_name.to_text(),
                    expected: space.to_text(),
                });
            }
        }
        if let Some(offset) = offset {
            if self.rx_offset != offset {
                return Err(FormatError::RindexOffset {
                    found: self.rx_offset,
                    expected: offset,
                });
            }
        }
        Ok(())
    }
}

/// A decoded rindex entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RindexEntry {
    pub res_offset: u64,
    pub flags: u32,
    pub unused: u32,
    pub name: Name,
}

impl RindexEntry {
    /// Decodes the first 64 bytes.
    pub fn decode(bytes: &[u8]) -> Result<RindexEntry, FormatError> {
        need(bytes, RINDEX_ENTRY_LEN, "rindex entry")?;
        Ok(RindexEntry {
            res_offset: get_u64(bytes, 0),
            flags: get_u32(bytes, 8),
            unused: get_u32(bytes, 12),
            name: Name::from_field(&bytes[16..64]),
        })
    }

    /// Encodes into the first 64 bytes of `out`.
    ///
    /// # Panics
    /// If `out` is shorter than 64 bytes (a caller bug).
    pub fn encode_into(&self, out: &mut [u8]) {
        assert!(
            out.len() >= RINDEX_ENTRY_LEN,
            "rindex entry buffer too short"
        );
        put_u64(out, 0, self.res_offset);
        put_u32(out, 8, self.flags);
        put_u32(out, 12, self.unused);
        out[16..64].copy_from_slice(&self.name.0);
    }

    /// The 64 encoded bytes.
    pub fn encode(&self) -> [u8; RINDEX_ENTRY_LEN] {
        let mut out = [0u8; RINDEX_ENTRY_LEN];
        self.encode_into(&mut out);
        out
    }

    /// A free slot has offset 0 and an empty name.
    pub fn is_free(&self) -> bool {
        self.res_offset == 0 && self.name.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn golden_bytes() {
        let h = RindexHeader {
            magic: RINDEX_DISK_MAGIC,
            version: RINDEX_DISK_VERSION,
            flags: 0x1,
            sector_size: 512,
            max_resources: 4096,
            unused: 0,
            rx_offset: 0x20_0000,
            lockspace_name: Name::new("ls").unwrap(),
        };
        let b = h.encode();
        assert_eq!(
            &b[0..16],
            &[0x18, 0x20, 0x04, 0x01, 0x02, 0, 0x01, 0, 1, 0, 0, 0, 0, 2, 0, 0]
        );
        assert_eq!(&b[16..20], &[0x00, 0x10, 0, 0]);
        assert_eq!(&b[24..32], &[0, 0, 0x20, 0, 0, 0, 0, 0]);
        assert_eq!(&b[32..34], b"ls");
        assert_eq!(RindexHeader::decode(&b).unwrap(), h);
        let ls = Name::new("ls").unwrap();
        assert!(h.verify(Some(&ls), Some(0x20_0000)).is_ok());
        assert_eq!(
            h.verify(Some(&ls), Some(0)).unwrap_err().sanlk_code(),
            crate::rv::SANLK_RINDEX_OFFSET
        );

        let e = RindexEntry {
            res_offset: 0x30_0000,
            flags: 0,
            unused: 0,
            name: Name::new("r1").unwrap(),
        };
        let b = e.encode();
        assert_eq!(&b[0..8], &[0, 0, 0x30, 0, 0, 0, 0, 0]);
        assert_eq!(&b[16..18], b"r1");
        assert_eq!(RindexEntry::decode(&b).unwrap(), e);
        assert!(!e.is_free());
        assert!(RindexEntry::decode(&[0u8; 64]).unwrap().is_free());
    }
}
