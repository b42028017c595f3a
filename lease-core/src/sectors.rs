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

/// Lists at least this long are recycled (about 110 KiB of entries and more).
pub const POOL_MIN_LEN: usize = 256;
/// At most this many lists are kept.
pub const POOL_MAX: usize = 8;

type Lists = Vec<Vec<Option<DeltaSector>>>;

static POOL: Mutex<Lists> = Mutex::new(Vec::new());

fn pool() -> MutexGuard<'static, Lists> {
    POOL.lock().unwrap_or_else(PoisonError::into_inner)
}

/// An empty list with room for `len` entries from `pool` when it has one (a long
/// list's storage, its old entries cleared when it was put back).
fn take(pool: &mut Lists, len: usize) -> Option<Vec<Option<DeltaSector>>> {
    if len < POOL_MIN_LEN {
        return None;
    }
    let v = pool
        .iter()
        .position(|v| v.capacity() >= len)
        .map(|i| pool.swap_remove(i))?;
    assert!(v.is_empty(), "a pooled sector list was not emptied");
    Some(v)
}

/// Puts `list`'s storage back into `pool`, emptied, if it is long and the pool not full.
fn put(pool: &mut Lists, mut list: Vec<Option<DeltaSector>>) {
    if list.capacity() >= POOL_MIN_LEN && pool.len() < POOL_MAX {
        list.clear();
        pool.push(list);
    }
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
            take(&mut pool(), len)
        } else {
            None
        };
        HostSectors {
            list: recycled.unwrap_or_else(|| Vec::with_capacity(len)),
        }
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
        if self.list.capacity() >= POOL_MIN_LEN {
            put(&mut pool(), std::mem::take(&mut self.list));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn full_list(len: usize) -> Vec<Option<DeltaSector>> {
        vec![Some(DeltaSector::decode(&[0u8; 512]).unwrap()); len]
    }

    // On a pool of the test's own: the process-wide one is shared with every other test.
    #[test]
    fn a_long_list_is_put_back_emptied_and_taken_again_a_short_one_is_not_kept() {
        let mut pool = Lists::new();
        let long = full_list(3000);
        let ptr = long.as_ptr();
        put(&mut pool, long);
        assert_eq!(pool.len(), 1);
        assert!(
            take(&mut pool, 3001).is_none(),
            "a list too short for the read was taken"
        );
        assert!(
            take(&mut pool, 10).is_none(),
            "a short read took a pooled list"
        );
        let again = take(&mut pool, 2000).expect("the pooled list");
        assert!(again.is_empty(), "a recycled list kept its entries");
        assert_eq!(again.as_ptr(), ptr, "another storage came back");
        assert!(pool.is_empty());

        put(&mut pool, full_list(3));
        assert!(pool.is_empty(), "a 3-entry list was kept");
    }

    #[test]
    fn the_pool_keeps_at_most_pool_max_lists() {
        let mut pool = Lists::new();
        for _ in 0..POOL_MAX + 3 {
            put(&mut pool, full_list(POOL_MIN_LEN));
        }
        assert_eq!(pool.len(), POOL_MAX);
    }

    #[test]
    fn host_sectors_read_as_their_entries() {
        let mut s = HostSectors::with_capacity(2);
        s.push(None);
        s.push(Some(DeltaSector::decode(&[0u8; 512]).unwrap()));
        assert_eq!(s.len(), 2);
        assert!(s[0].is_none() && s[1].is_some());
    }
}
