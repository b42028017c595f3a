//! sanlock's checksum: CRC-32C (Castagnoli, reflected) with register seed 0xFFFFFFFE and
//! no final inversion. With the standard "append" primitive of the `crc32c` crate
//! (which inverts on entry and exit) that is `!crc32c_append(1, data)`.
//!
//! This is neither IEEE CRC-32 nor plain CRC-32C; the test vectors below come from
//! sanlock-written sectors.

/// The checksum sanlock stores in leader records and paxos dblocks.
pub fn sanlock_crc32c(data: &[u8]) -> u32 {
    !crc32c::crc32c_append(1, data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_vectors() {
        assert_eq!(sanlock_crc32c(b"123456789"), 0xE8C7_BB34);
        assert_eq!(sanlock_crc32c(&[0u8; 168]), 0x7E11_FBD1);
        assert_eq!(sanlock_crc32c(&[0u8; 48]), 0xCB5A_D842);
    }

    #[test]
    fn differs_from_plain_crc32c() {
        assert_eq!(crc32c::crc32c(b"123456789"), 0xE306_9283);
        assert_ne!(sanlock_crc32c(b"123456789"), crc32c::crc32c(b"123456789"));
    }
}
