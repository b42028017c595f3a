//! Page-aligned, zero-initialised byte buffers, made without `unsafe` by over-allocating
//! and slicing at the first page boundary.
//!
//! Invariant: `as_slice().as_ptr()` is a multiple of [`PAGE`] and the buffer's bytes never
//! move while it lives (the backing `Vec` is never grown), so an engine may hand its
//! address to the kernel for as long as it owns the buffer.
//!
//! Large buffers (at least [`POOL_MIN_BYTES`]) are recycled through a global pool holding
//! at most [`POOL_MAX_BYTES`]: a lockspace renewal or a confirmation read needs 1 MiB
//! every time (8 MiB on a 4K lockspace read whole), and a fresh allocation of that size is
//! a new mapping whose pages are each faulted in, zeroed, locked (the daemon runs under
//! mlockall) and unmapped again on free. Lockspaces joined together renew together, so
//! many renewal reads are in flight at once: the pool is sized by bytes, not by a handful
//! of buffers (it only ever holds what was in use at once, up to the cap).
//! A buffer returns to the pool only when dropped, i.e. after the kernel is done with it.
//! A recycled buffer is zeroed before reuse ([`AlignedBuf::zeroed`]), except one taken for
//! a read ([`AlignedBuf::for_read`]): zeroing 1–8 MiB that the read overwrites was a
//! tenth of the daemon's CPU with 100 lockspaces renewing. Its earlier bytes (this
//! process's own, from an earlier I/O) are never seen: every engine hands a read's buffer
//! to the caller only after a read of its whole length succeeded, and drops it unseen
//! otherwise (`crate::disk::Pending`).

/// The alignment of every buffer (and the most O_DIRECT asks of memory).
pub(crate) const PAGE: usize = 4096;

/// Buffers at least this large are recycled.
pub(crate) const POOL_MIN_BYTES: usize = 128 * 1024;
/// At most this many bytes of recycled buffers are kept (32 lockspace areas of 1 MiB).
pub(crate) const POOL_MAX_BYTES: usize = 32 << 20;

static POOL: std::sync::Mutex<Vec<Vec<u8>>> = std::sync::Mutex::new(Vec::new());

fn pool() -> std::sync::MutexGuard<'static, Vec<Vec<u8>>> {
    POOL.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A page-aligned, zero-initialised byte buffer.
#[derive(Debug)]
pub struct AlignedBuf {
    storage: Vec<u8>,
    start: usize,
    len: usize,
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        if self.storage.len() < POOL_MIN_BYTES + PAGE {
            return;
        }
        let mut p = pool();
        let pooled: usize = p.iter().map(Vec::len).sum();
        if pooled + self.storage.len() <= POOL_MAX_BYTES {
            p.push(std::mem::take(&mut self.storage));
        }
    }
}

impl std::ops::Deref for AlignedBuf {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl AlignedBuf {
    /// A zeroed buffer of `len` bytes starting on a page boundary.
    pub fn zeroed(len: usize) -> AlignedBuf {
        match AlignedBuf::recycled(len) {
            Some(mut b) => {
                b.as_mut_slice().fill(0);
                b
            }
            None => AlignedBuf::fresh(len),
        }
    }

    /// A buffer of `len` bytes starting on a page boundary, to be filled whole by a read
    /// before anyone looks at it: a recycled one is not zeroed (see the module header).
    pub(crate) fn for_read(len: usize) -> AlignedBuf {
        AlignedBuf::recycled(len).unwrap_or_else(|| AlignedBuf::fresh(len))
    }

    /// A pooled buffer of at least `len` bytes (plus the page for alignment) when the
    /// request is large enough to be pooled and the pool has one; its bytes are those of
    /// its last use.
    fn recycled(len: usize) -> Option<AlignedBuf> {
        if len < POOL_MIN_BYTES {
            return None;
        }
        let storage = {
            let mut p = pool();
            let i = p.iter().position(|v| v.len() >= len + PAGE)?;
            p.swap_remove(i)
        };
        Some(AlignedBuf::over(storage, len))
    }

    fn fresh(len: usize) -> AlignedBuf {
        AlignedBuf::over(vec![0u8; len + PAGE], len)
    }

    /// The `len` bytes of `storage` from its first page boundary.
    fn over(storage: Vec<u8>, len: usize) -> AlignedBuf {
        let start = storage.as_ptr().align_offset(PAGE);
        assert!(start < PAGE, "align_offset of a u8 pointer is computable");
        assert!(
            start + len <= storage.len(),
            "aligned buffer storage too short"
        );
        AlignedBuf {
            storage,
            start,
            len,
        }
    }

    /// A page-aligned copy of `data`.
    pub fn copy_of(data: &[u8]) -> AlignedBuf {
        // Every byte is overwritten at once: no zeroing needed.
        let mut b = AlignedBuf::for_read(data.len());
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

    /// A buffer for a read is aligned and of the asked length, pooled or not; a copy
    /// holds exactly its data even when its storage held other bytes before.
    #[test]
    fn read_buffers_and_copies_are_aligned_and_exact() {
        for len in [512, POOL_MIN_BYTES, 1 << 20] {
            let b = AlignedBuf::for_read(len);
            assert_eq!(b.len(), len);
            assert_eq!(b.as_slice().as_ptr() as usize % PAGE, 0);
            drop(b);
            let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
            assert_eq!(AlignedBuf::copy_of(&data).as_slice(), &data[..]);
        }
    }

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

    /// A recycled large buffer comes back aligned, of the asked length and zeroed, and the
    /// pool never keeps more than POOL_MAX_BYTES.
    #[test]
    fn large_buffers_are_recycled_zeroed() {
        let len = 1 << 20;
        let mut a = AlignedBuf::zeroed(len);
        a.as_mut_slice().fill(0xAB);
        drop(a);
        // (No other test of this crate's library allocates buffers this large.)
        assert!(!pool().is_empty(), "a dropped 1 MiB buffer was not kept");
        for want in [len, len - 4096, POOL_MIN_BYTES] {
            let b = AlignedBuf::zeroed(want);
            assert_eq!(b.len(), want);
            assert_eq!(b.as_slice().as_ptr() as usize % PAGE, 0);
            assert!(
                b.as_slice().iter().all(|&x| x == 0),
                "stale bytes in a reused buffer"
            );
        }
        let many: Vec<_> = (0..POOL_MAX_BYTES / len + 3)
            .map(|_| AlignedBuf::zeroed(len))
            .collect();
        drop(many);
        assert!(pool().iter().map(Vec::len).sum::<usize>() <= POOL_MAX_BYTES);
    }
}
