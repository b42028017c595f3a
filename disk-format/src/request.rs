//! `request_record` (24 bytes, sector 1 of a paxos lease area): another host asks the
//! owner to give up the lease at a newer lease version.
//!
//! ```text
//! 0 magic u32  4 version u32  8 lver u64  16 force_mode u32  20 pad u32
//! ```
//! No checksum.

use crate::codec::{get_u32, get_u64, need, put_u32, put_u64};
use crate::FormatError;

/// Encoded size.
pub const REQUEST_RECORD_LEN: usize = 24;
/// Request record magic.
pub const REQ_DISK_MAGIC: u32 = 0x0829_2011;
/// Request record version (major 1, minor 1).
pub const REQ_DISK_VERSION: u32 = 0x0001_0001;
/// force_mode: kill the holder with SIGKILL.
pub const REQ_FORCE: u32 = 1;
/// force_mode: ask the holder to stop (killpath or SIGTERM).
pub const REQ_GRACEFUL: u32 = 2;

/// A decoded request record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RequestRecord {
    pub magic: u32,
    pub version: u32,
    pub lver: u64,
    pub force_mode: u32,
    /// Struct padding, kept so records round-trip.
    pub pad: u32,
}

impl RequestRecord {
    /// The record written when a lease area is formatted.
    pub const FRESH: RequestRecord = RequestRecord {
        magic: REQ_DISK_MAGIC,
        version: REQ_DISK_VERSION,
        lver: 0,
        force_mode: 0,
        pad: 0,
    };

    /// Decodes the first 24 bytes.
    pub fn decode(bytes: &[u8]) -> Result<RequestRecord, FormatError> {
        need(bytes, REQUEST_RECORD_LEN, "request record")?;
        Ok(RequestRecord {
            magic: get_u32(bytes, 0),
            version: get_u32(bytes, 4),
            lver: get_u64(bytes, 8),
            force_mode: get_u32(bytes, 16),
            pad: get_u32(bytes, 20),
        })
    }

    /// Encodes into the first 24 bytes of `out`.
    ///
    /// # Panics
    /// If `out` is shorter than 24 bytes (a caller bug).
    pub fn encode_into(&self, out: &mut [u8]) {
        assert!(out.len() >= REQUEST_RECORD_LEN, "request buffer too short");
        put_u32(out, 0, self.magic);
        put_u32(out, 4, self.version);
        put_u64(out, 8, self.lver);
        put_u32(out, 16, self.force_mode);
        put_u32(out, 20, self.pad);
    }

    /// The 24 encoded bytes.
    pub fn encode(&self) -> [u8; REQUEST_RECORD_LEN] {
        let mut out = [0u8; REQUEST_RECORD_LEN];
        self.encode_into(&mut out);
        out
    }

    /// Magic and major version checks.
    pub fn verify(&self) -> Result<(), FormatError> {
        if self.magic != REQ_DISK_MAGIC {
            return Err(FormatError::Magic {
                record: "request record",
                found: self.magic,
                expected: REQ_DISK_MAGIC,
            });
        }
        if self.version & 0xFFFF_0000 != REQ_DISK_VERSION & 0xFFFF_0000 {
            return Err(FormatError::Version {
                record: "request record",
                found: self.version,
                expected_major: REQ_DISK_VERSION >> 16,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn golden_bytes() {
        let r = RequestRecord {
            lver: 7,
            force_mode: REQ_FORCE,
            ..RequestRecord::FRESH
        };
        let b = r.encode();
        assert_eq!(
            b,
            [
                0x11, 0x20, 0x29, 0x08, 0x01, 0x00, 0x01, 0x00, 7, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0,
                0, 0, 0, 0
            ]
        );
        assert_eq!(RequestRecord::decode(&b).unwrap(), r);
        assert!(r.verify().is_ok());
        let bad = RequestRecord { magic: 1, ..r };
        assert_eq!(
            bad.verify().unwrap_err().sanlk_code(),
            crate::rv::SANLK_REQUEST_MAGIC
        );
        let badv = RequestRecord {
            version: 0x0002_0001,
            ..r
        };
        assert_eq!(
            badv.verify().unwrap_err().sanlk_code(),
            crate::rv::SANLK_REQUEST_VERSION
        );
    }
}
