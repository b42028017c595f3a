//! Little-endian field access at fixed offsets. Callers check the slice length once,
//! up front, so every accessor here indexes inside a known-long-enough slice.

pub(crate) fn get_u16(b: &[u8], off: usize) -> u16 {
    u16::from_le_bytes([b[off], b[off + 1]])
}

pub(crate) fn get_u32(b: &[u8], off: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[off..off + 4]);
    u32::from_le_bytes(a)
}

pub(crate) fn get_u64(b: &[u8], off: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[off..off + 8]);
    u64::from_le_bytes(a)
}

pub(crate) fn put_u16(b: &mut [u8], off: usize, v: u16) {
    b[off..off + 2].copy_from_slice(&v.to_le_bytes());
}

pub(crate) fn put_u32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_le_bytes());
}

pub(crate) fn put_u64(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_le_bytes());
}

/// Fails with [`crate::FormatError::Truncated`] unless `b` holds at least `need` bytes.
pub(crate) fn need(b: &[u8], need: usize, record: &'static str) -> Result<(), crate::FormatError> {
    if b.len() < need {
        return Err(crate::FormatError::Truncated {
            record,
            need,
            got: b.len(),
        });
    }
    Ok(())
}
