//! The host sectors of one lockspace read ([`HostSectors`]): `list[i]` is host_id i+1's
//! delta lease as decoded, `None` when the sector is not a delta lease of the lockspace.
//!
//! Why a type of its own rather than a `Vec`: a renewal of a 1 MiB area decodes 2,000
//! sectors into about 900 KiB, every 2·io_timeout, on every lockspace. Allocated fresh,
//! that is a new mapping each time (glibc maps buffers that large), whose pages are each
//! faulted in, zeroed, locked (the daemon runs under mlockall) and unmapped again: with
//! 100 lockspaces about a third of the daemon's CPU. The list's storage goes back to a
//! small process-wide pool when dropped, wherever that is (the daemon's core consumes
//! the read), and the next read takes it from there.
//!
//! Invariants: a list taken from the pool is empty (its storage's contents are never
//! seen again); the pool keeps at most [`POOL_MAX`] lists, and only lists of at least
//! [`POOL_MIN_LEN`] entries (small reads allocate little). What the pool holds has no
//! effect on any decision: it is memory only, so the simulators stay deterministic.

use std::sync::{Mutex, MutexGuard, PoisonError};

use disk_format::DeltaSector;

/// Lists at least this long are recycled (128 KiB and more of entries).
pub const POOL_MIN_LEN: usize = 256;
/// At most this many lists are kept.
pub const POOL_MAX: usize = 8;

static POOL: Mutex<Vec<Vec<Option<DeltaSector>>>> = Mutex::new(Vec::new());

fn pool() -> MutexGuard<'static, Vec<Vec<Option<DeltaSector>>>> {
    POOL.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One read's host sectors, from host_id 1 (see the module header).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostSectors {
    list: Vec<Option<DeltaSector>>,
}

impl HostSectors {
    /// An empty list with room for `len` entries, recycled when one is pooled.
    pub fn with_capacity(len: usize) -> HostSectors {
        let recycled = if len >= POOL_MIN_LEN {
            let mut p = pool();
            p.iter()
                .position(|v| v.capacity() >= len)
                .map(|i| p.swap_remove(i))
        } else {
            None
        };
        let list = match recycled {
            Some(v) => {
                assert!(v.is_empty(), "a pooled sector list was not emptied");
                v
            }
            None => Vec::with_capacity(len),
        };
        HostSectors { list }
    }

    /// Appends the next host_id's sector.
    pub fn push(&mut self, sector: Option<DeltaSector>) {
        self.list.push(sector);
    }
}

impl From<Vec<Option<DeltaSector>>> for HostSectors {
    fn from(list: Vec<Option<DeltaSector>>) -> HostSectors {
        HostSectors { list }
    }
}

impl std::ops::Deref for HostSectors {
    type Target = [Option<DeltaSector>];

    fn deref(&self) -> &[Option<DeltaSector>] {
        &self.list
    }
}

impl Drop for HostSectors {
    fn drop(&mut self) {
        if self.list.capacity() < POOL_MIN_LEN {
            return;
        }
        let mut list = std::mem::take(&mut self.list);
        list.clear();
        let mut p = pool();
        if p.len() < POOL_MAX {
            p.push(list);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dropped_long_list_is_reused_empty_and_a_short_one_is_not_pooled() {
        let mut a = HostSectors::with_capacity(2000);
        for _ in 0..2000 {
            a.push(Some(DeltaSector::decode(&[0u8; 512]).unwrap()));
        }
        assert_eq!(a.len(), 2000);
        drop(a);
        // Another test may take it first (the pool is process-wide): only the contents
        // are checked, whatever list comes back.
        let b = HostSectors::with_capacity(2000);
        assert!(b.is_empty());
        assert!(b.list.capacity() >= 2000);
        let short = HostSectors::with_capacity(3);
        assert!(short.list.capacity() < POOL_MIN_LEN);
    }
}
