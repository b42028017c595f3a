//! Page-aligned, zero-initialised byte buffers, made without `unsafe` by over-allocating
//! and slicing at the first page boundary.
//!
//! Invariant: `as_slice().as_ptr()` is a multiple of [`PAGE`] and the buffer's bytes never
//! move while it lives (the backing `Vec` is never grown), so an engine may hand its
//! address to the kernel for as long as it owns the buffer.

/// The alignment of every buffer (and the most O_DIRECT asks of memory).
pub(crate) const PAGE: usize = 4096;

/// A page-aligned, zero-initialised byte buffer.
#[derive(Debug)]
pub struct AlignedBuf {
    storage: Vec<u8>,
    start: usize,
    len: usize,
}

impl AlignedBuf {
    /// A zeroed buffer of `len` bytes starting on a page boundary.
    pub fn zeroed(len: usize) -> AlignedBuf {
        let storage = vec![0u8; len + PAGE];
        let start = storage.as_ptr().align_offset(PAGE);
        assert!(start < PAGE, "align_offset of a u8 pointer is computable");
        AlignedBuf {
            storage,
            start,
            len,
        }
    }

    /// A page-aligned copy of `data`.
    pub fn copy_of(data: &[u8]) -> AlignedBuf {
        let mut b = AlignedBuf::zeroed(data.len());
        b.as_mut_slice().copy_from_slice(data);
        b
    }

    /// The buffer's bytes.
    pub fn as_slice(&self) -> &[u8] {
        &self.storage[self.start..self.start + self.len]
    }

    /// The buffer's bytes, writable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.storage[self.start..self.start + self.len]
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for a zero-length buffer.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_zeroed_buffers() {
        for len in [0usize, 512, 4096, 1 << 20] {
            let b = AlignedBuf::zeroed(len);
            assert_eq!(b.as_slice().as_ptr() as usize % PAGE, 0);
            assert_eq!(b.len(), len);
            assert_eq!(b.is_empty(), len == 0);
            assert!(b.as_slice().iter().all(|&x| x == 0));
        }
        let c = AlignedBuf::copy_of(&[1, 2, 3]);
        assert_eq!(c.as_slice(), &[1, 2, 3]);
        assert_eq!(c.as_slice().as_ptr() as usize % PAGE, 0);
    }
}
