//! The host sectors of one lockspace read ([`HostSectors`]): host_id i+1's delta lease
//! is [`HostSectors::get`]`(i)`, read in place in the read's own buffer
//! ([`DeltaSectorView`]), `None` when that sector is not a delta lease of the lockspace
//! (another magic or another lockspace name).
//!
//! Why in place: a renewal of a 1 MiB area reads 2,000 sectors every 2·io_timeout, on
//! every lockspace, and the host monitor looks at a handful of fields of each. Decoding
//! each into a record of 456 bytes and copying those into a list of about 900 KiB was
//! most of a renewal's CPU with 100 lockspaces (decode, copy, zeroing: the profile in
//! docs/performance.md "Scale"). The read's buffer is shared, not copied, until the
//! daemon's core has observed it, then it goes back to the I/O engine's pool.
//!
//! Invariants (asserted at construction): every one of the `len()` sectors lies whole
//! in the buffer, and a sector is at least [`DELTA_SECTOR_MIN`] bytes, so every view
//! handed out is a whole delta sector. What a view shows is exactly what
//! [`DeltaSector::decode`] of the same bytes holds (`disk_format::delta` tests and its
//! fuzz target), so nothing judged from a read depends on which way it was read: no
//! host looks alive or dead, and no lease free, that did not before. Tried by
//! `scripts/sim.sh` (every lease-core model and the daemon simulator observe their reads
//! through this type; their planted bugs, `skip-full-read` among them, are still caught)
//! and by the chaos bed (docs/testing.md, seeds 48 and 49).

use std::ops::Deref;
use std::sync::Arc;

use disk_format::delta::DELTA_SECTOR_MIN;
use disk_format::leader::DELTA_DISK_MAGIC;
use disk_format::{DeltaSector, DeltaSectorView, Name};

/// A read's bytes, owned by whatever the disk returned (the daemon's aligned I/O buffer,
/// a `Vec` in memory).
type Bytes = Arc<dyn Deref<Target = [u8]> + Send + Sync>;

/// Which sectors are delta leases of the lockspace.
#[derive(Clone)]
enum Valid {
    /// Those with the delta magic and this lockspace name (a read of the disk).
    Space(Name),
    /// Those listed (built from decoded records, by tests and simulators).
    Listed(Vec<bool>),
}

/// One read's host sectors, from host_id 1 (see the module header).
#[derive(Clone)]
pub struct HostSectors {
    bytes: Bytes,
    sector_bytes: usize,
    count: usize,
    valid: Valid,
}

impl HostSectors {
    /// The first `count` sectors of `buf`, each `sector_bytes` long, as read from the
    /// lockspace `space_name`.
    ///
    /// # Panics
    /// If `buf` is shorter than `count` sectors or a sector shorter than a delta sector:
    /// callers read whole sectors of a geometry, so either is a caller bug.
    pub fn of_read<B>(buf: B, sector_bytes: usize, count: usize, space_name: Name) -> HostSectors
    where
        B: Deref<Target = [u8]> + Send + Sync + 'static,
    {
        assert!(
            sector_bytes >= DELTA_SECTOR_MIN,
            "host sectors: a sector of {sector_bytes} bytes cannot hold a delta lease"
        );
        assert!(
            buf.len() / sector_bytes >= count,
            "host sectors: {count} sectors of {sector_bytes} bytes do not fit in {} bytes",
            buf.len()
        );
        HostSectors {
            bytes: Arc::new(buf),
            sector_bytes,
            count,
            valid: Valid::Space(space_name),
        }
    }

    /// A read that showed `list` (`None`: a sector that is not a delta lease of the
    /// lockspace), for tests and simulators that build reads from records.
    pub fn from_sectors(list: &[Option<DeltaSector>]) -> HostSectors {
        let mut bytes = vec![0u8; list.len() * DELTA_SECTOR_MIN];
        for (s, out) in list.iter().zip(bytes.chunks_exact_mut(DELTA_SECTOR_MIN)) {
            if let Some(s) = s {
                s.encode_into(out);
            }
        }
        HostSectors {
            bytes: Arc::new(bytes),
            sector_bytes: DELTA_SECTOR_MIN,
            count: list.len(),
            valid: Valid::Listed(list.iter().map(Option::is_some).collect()),
        }
    }

    /// Sectors read (host_ids 1..=len).
    pub fn len(&self) -> usize {
        self.count
    }

    /// True for a read of no sector.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Host_id `i + 1`'s sector, if it is a delta lease of the lockspace.
    pub fn get(&self, i: usize) -> Option<DeltaSectorView<'_>> {
        if i >= self.count {
            return None;
        }
        let at = i * self.sector_bytes;
        let view = DeltaSectorView::new(&self.bytes[at..at + self.sector_bytes])
            .expect("host sectors hold whole delta sectors");
        let ours = match &self.valid {
            Valid::Space(name) => view.magic() == DELTA_DISK_MAGIC && view.space_name_is(name),
            Valid::Listed(listed) => listed[i],
        };
        ours.then_some(view)
    }

    /// Every sector in host_id order ([`HostSectors::get`]).
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = Option<DeltaSectorView<'_>>> + '_ {
        (0..self.count).map(|i| self.get(i))
    }

    /// Host_id `i + 1`'s sector decoded, if it is a delta lease of the lockspace.
    pub fn decoded(&self, i: usize) -> Option<DeltaSector> {
        self.get(i).map(|v| v.decode())
    }
}

impl Default for HostSectors {
    fn default() -> HostSectors {
        HostSectors::from_sectors(&[])
    }
}

impl From<Vec<Option<DeltaSector>>> for HostSectors {
    fn from(list: Vec<Option<DeltaSector>>) -> HostSectors {
        HostSectors::from_sectors(&list)
    }
}

impl std::fmt::Debug for HostSectors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let used = self
            .iter()
            .filter(|s| s.is_some_and(|v| v.owner_id() != 0 || v.timestamp() != 0))
            .count();
        f.debug_struct("HostSectors")
            .field("sectors", &self.count)
            .field("sector_bytes", &self.sector_bytes)
            .field("used", &used)
            .finish()
    }
}

impl PartialEq for HostSectors {
    /// The same sectors: equal counts, and each sector either not a delta lease of the
    /// lockspace in both, or the same record and bitmap in both.
    fn eq(&self, other: &HostSectors) -> bool {
        self.count == other.count && (0..self.count).all(|i| self.decoded(i) == other.decoded(i))
    }
}

impl Eq for HostSectors {}

#[cfg(test)]
mod tests {
    use super::*;
    use disk_format::LeaderRecord;

    fn record(owner: u64, ts: u64) -> DeltaSector {
        DeltaSector::from_leader(LeaderRecord {
            magic: DELTA_DISK_MAGIC,
            owner_id: owner,
            owner_generation: 1,
            timestamp: ts,
            space_name: Name::new("ls").unwrap(),
            ..LeaderRecord::ZERO
        })
    }

    #[test]
    fn a_read_shows_only_delta_leases_of_its_lockspace() {
        let sector = 4096;
        let mut buf = vec![0u8; 4 * sector];
        record(1, 10).encode_into(&mut buf[..sector]);
        let mut other = record(2, 20);
        other.leader.space_name = Name::new("other").unwrap();
        other.encode_into(&mut buf[sector..2 * sector]);
        let mut no_magic = record(3, 30);
        no_magic.leader.magic = 0;
        no_magic.encode_into(&mut buf[2 * sector..3 * sector]);
        record(4, 40).encode_into(&mut buf[3 * sector..]);
        let s = HostSectors::of_read(buf, sector, 4, Name::new("ls").unwrap());
        assert_eq!(s.len(), 4);
        let seen: Vec<Option<u64>> = s.iter().map(|v| v.map(|v| v.timestamp())).collect();
        assert_eq!(seen, vec![Some(10), None, None, Some(40)]);
        assert_eq!(s.decoded(3), Some(record(4, 40)));
        assert!(s.get(4).is_none());
    }

    #[test]
    fn sectors_built_from_records_read_back_as_those_records() {
        let list = vec![
            None,
            Some(record(2, 5)),
            Some(DeltaSector::decode(&[0u8; 512]).unwrap()),
        ];
        let s = HostSectors::from(list.clone());
        assert_eq!(s.len(), 3);
        let back: Vec<Option<DeltaSector>> = (0..3).map(|i| s.decoded(i)).collect();
        assert_eq!(back, list);
        assert_eq!(s, HostSectors::from_sectors(&list));
        assert!(HostSectors::default().is_empty());
    }

    #[test]
    #[should_panic(expected = "do not fit")]
    fn a_buffer_shorter_than_its_sectors_is_refused() {
        let _ = HostSectors::of_read(vec![0u8; 1000], 512, 2, Name::EMPTY);
    }
}
