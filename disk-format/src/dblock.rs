//! Per-host sector of a paxos lease: `paxos_dblock` (56 bytes at byte 0) and
//! `mode_block` (16 bytes at byte 128).
//!
//! ```text
//! dblock:  0 mbal  8 bal  16 inp  24 inp2  32 inp3  40 lver  (u64s)
//!         48 checksum u32 (over 0..48)  52 flags u32 (DBLOCK_FL_RELEASED, unprotected)
//! mode:    0 flags u32 (MBLOCK_SHARED)  4 pad u32  8 generation u64
//! ```

use crate::checksum::sanlock_crc32c;
use crate::codec::{get_u32, get_u64, need, put_u32, put_u64};
use crate::FormatError;

/// Encoded size of a dblock.
pub const DBLOCK_LEN: usize = 56;
/// Bytes covered by the dblock checksum.
pub const DBLOCK_CHECKSUM_LEN: usize = 48;
/// Set in `flags` when the host released the lease.
pub const DBLOCK_FL_RELEASED: u32 = 0x1;
/// Offset of the mode block in a host's dblock sector.
pub const MBLOCK_OFFSET: usize = 128;
/// Encoded size of a mode block.
pub const MBLOCK_LEN: usize = 16;
/// Mode block flag: this host holds the lease shared.
pub const MBLOCK_SHARED: u32 = 0x1;

/// A host's ballot state for one lease version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PaxosDblock {
    pub mbal: u64,
    pub bal: u64,
    pub inp: u64,
    pub inp2: u64,
    pub inp3: u64,
    pub lver: u64,
    pub checksum: u32,
    pub flags: u32,
}

impl PaxosDblock {
    /// Decodes the first 56 bytes.
    pub fn decode(bytes: &[u8]) -> Result<PaxosDblock, FormatError> {
        need(bytes, DBLOCK_LEN, "paxos dblock")?;
        Ok(PaxosDblock {
            mbal: get_u64(bytes, 0),
            bal: get_u64(bytes, 8),
            inp: get_u64(bytes, 16),
            inp2: get_u64(bytes, 24),
            inp3: get_u64(bytes, 32),
            lver: get_u64(bytes, 40),
            checksum: get_u32(bytes, 48),
            flags: get_u32(bytes, 52),
        })
    }

    /// Encodes into the first 56 bytes of `out`.
    ///
    /// # Panics
    /// If `out` is shorter than 56 bytes (a caller bug).
    pub fn encode_into(&self, out: &mut [u8]) {
        assert!(out.len() >= DBLOCK_LEN, "dblock buffer too short");
        put_u64(out, 0, self.mbal);
        put_u64(out, 8, self.bal);
        put_u64(out, 16, self.inp);
        put_u64(out, 24, self.inp2);
        put_u64(out, 32, self.inp3);
        put_u64(out, 40, self.lver);
        put_u32(out, 48, self.checksum);
        put_u32(out, 52, self.flags);
    }

    /// The 56 encoded bytes.
    pub fn encode(&self) -> [u8; DBLOCK_LEN] {
        let mut out = [0u8; DBLOCK_LEN];
        self.encode_into(&mut out);
        out
    }

    /// Checksum of the current field values.
    pub fn computed_checksum(&self) -> u32 {
        sanlock_crc32c(&self.encode()[..DBLOCK_CHECKSUM_LEN])
    }

    /// Sets the checksum from the other fields.
    pub fn seal(&mut self) {
        self.checksum = self.computed_checksum();
    }

    /// True for a never-written dblock, which sanlock accepts without a checksum.
    pub fn is_blank(&self) -> bool {
        self.checksum == 0 && self.mbal == 0 && self.bal == 0 && self.inp == 0 && self.lver == 0
    }

    /// sanlock's `verify_dblock`: blank, or the checksum matches.
    pub fn verify(&self) -> Result<(), FormatError> {
        if self.is_blank() {
            return Ok(());
        }
        let computed = self.computed_checksum();
        if computed != self.checksum {
            return Err(FormatError::Checksum {
                record: "paxos dblock",
                stored: self.checksum,
                computed,
            });
        }
        Ok(())
    }

    /// True when the RELEASED flag is set.
    pub fn is_released(&self) -> bool {
        self.flags & DBLOCK_FL_RELEASED != 0
    }
}

/// A host's shared-mode marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ModeBlock {
    pub flags: u32,
    /// Struct padding; unspecified on disk, kept so records round-trip.
    pub pad: u32,
    pub generation: u64,
}

impl ModeBlock {
    /// Decodes the first 16 bytes (call with the sector sliced at [`MBLOCK_OFFSET`]).
    pub fn decode(bytes: &[u8]) -> Result<ModeBlock, FormatError> {
        need(bytes, MBLOCK_LEN, "mode block")?;
        Ok(ModeBlock {
            flags: get_u32(bytes, 0),
            pad: get_u32(bytes, 4),
            generation: get_u64(bytes, 8),
        })
    }

    /// Encodes into the first 16 bytes of `out`.
    ///
    /// # Panics
    /// If `out` is shorter than 16 bytes (a caller bug).
    pub fn encode_into(&self, out: &mut [u8]) {
        assert!(out.len() >= MBLOCK_LEN, "mode block buffer too short");
        put_u32(out, 0, self.flags);
        put_u32(out, 4, self.pad);
        put_u64(out, 8, self.generation);
    }

    /// The 16 encoded bytes.
    pub fn encode(&self) -> [u8; MBLOCK_LEN] {
        let mut out = [0u8; MBLOCK_LEN];
        self.encode_into(&mut out);
        out
    }

    /// True when the SHARED flag is set.
    pub fn is_shared(&self) -> bool {
        self.flags & MBLOCK_SHARED != 0
    }
}

/// A host's whole dblock sector: dblock at 0, mode block at 128.
pub fn decode_dblock_sector(sector: &[u8]) -> Result<(PaxosDblock, ModeBlock), FormatError> {
    need(sector, MBLOCK_OFFSET + MBLOCK_LEN, "paxos dblock")?;
    Ok((
        PaxosDblock::decode(sector)?,
        ModeBlock::decode(&sector[MBLOCK_OFFSET..])?,
    ))
}

/// Writes a dblock and mode block into a zero-filled sector buffer.
///
/// # Panics
/// If `sector` is shorter than 144 bytes (a caller bug).
pub fn encode_dblock_sector(dblock: &PaxosDblock, mode: &ModeBlock, sector: &mut [u8]) {
    sector.fill(0);
    dblock.encode_into(sector);
    mode.encode_into(&mut sector[MBLOCK_OFFSET..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_vector() {
        let mut d = PaxosDblock {
            mbal: 1,
            bal: 1,
            inp: 1,
            inp2: 1,
            inp3: 472,
            lver: 1,
            ..Default::default()
        };
        d.seal();
        assert_eq!(d.checksum, 0xD582_A292);
        assert!(d.verify().is_ok());
    }

    #[test]
    fn golden_bytes() {
        let mut d = PaxosDblock {
            mbal: 6001,
            bal: 6001,
            inp: 1,
            inp2: 2,
            inp3: 3,
            lver: 4,
            flags: DBLOCK_FL_RELEASED,
            ..Default::default()
        };
        d.seal();
        let m = ModeBlock {
            flags: MBLOCK_SHARED,
            pad: 0,
            generation: 5,
        };
        let mut sector = [0xAAu8; 512];
        encode_dblock_sector(&d, &m, &mut sector);
        assert_eq!(&sector[0..8], &6001u64.to_le_bytes());
        assert_eq!(&sector[8..16], &6001u64.to_le_bytes());
        assert_eq!(&sector[40..48], &4u64.to_le_bytes());
        assert_eq!(&sector[48..52], &d.checksum.to_le_bytes());
        assert_eq!(&sector[52..56], &[1, 0, 0, 0]);
        assert!(sector[56..128].iter().all(|&b| b == 0));
        assert_eq!(
            &sector[128..144],
            &[1, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0]
        );
        assert!(sector[144..].iter().all(|&b| b == 0));
        assert_eq!(decode_dblock_sector(&sector).unwrap(), (d, m));
    }

    #[test]
    fn blank_is_valid_and_flags_unprotected() {
        assert!(PaxosDblock::default().verify().is_ok());
        let mut d = PaxosDblock {
            mbal: 3,
            lver: 1,
            ..Default::default()
        };
        d.seal();
        d.flags = DBLOCK_FL_RELEASED;
        assert!(d.verify().is_ok());
        d.bal = 3;
        assert_eq!(
            d.verify().unwrap_err().sanlk_code(),
            crate::rv::SANLK_DBLOCK_CHECKSUM
        );
    }
}
