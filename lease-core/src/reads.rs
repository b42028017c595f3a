//! Which part of the lockspace area a renewal reads.
//!
//! sanlock reads the whole area on every renewal: 1 MiB on 512-byte sectors, 8 MiB on 4K
//! ones, however few hosts use it. lockd ([`ReadMode::Head`], the default) reads on most
//! renewals only the area's *head*: host_ids 1 ..= H, where H covers every sector our
//! reads ever showed used ([`crate::HostMonitor::highest_ever_used`]) plus
//! [`HEAD_MARGIN_HOSTS`], rounded up to [`HEAD_ROUND_BYTES`]; and the whole area at least
//! once every [`full_every`] successful renewals, on the first renewal after the join, and
//! whenever the caller asks ([`RenewalReads::request_full`]: fencing before it makes a
//! reservation). Nothing written to disk changes; sanlock peers keep reading everything.
//!
//! Invariants (asserted):
//! - every read includes our own sector, and every sector our view holds as used;
//! - no more than `full_every − 1` head reads succeed between two full reads, and the
//!   first successful read after [`RenewalReads::new`] is full.
//!
//! Why a sector read less often never makes a host look dead or a lease look free (the
//! argument in docs/algorithms.md, "Renewal reads"): the sectors left out are those our
//! view holds as *unused* (never written since the area was formatted); a used sector is
//! read on every renewal, so its host is judged exactly as before. A host that joins at a
//! host_id beyond the head is simply not seen until the next full read (at most
//! `full_every` renewals): an unseen host is never judged at all — no DEAD, no FAIL, no
//! preempt; a ballot waiting on a lease it owns reads the owner's delta sector itself
//! (`paxos::wait_for_owner`), and a ballot that reads only the dblocks of known host_ids
//! confirms with a fresh read that every higher one is unused before it commits
//! ([`crate::HostObserver::confirm_unused_above`]). What the bound delays: GET_HOSTS
//! listing that host, and its events and requests to us.

use disk_format::Geometry;

/// Host_ids read beyond the highest used one, so that hosts numbered in sequence are seen
/// at the next renewal after they join.
pub const HEAD_MARGIN_HOSTS: u64 = 8;

/// A head read ends on a multiple of this many bytes (32 sectors of 512 bytes, 4 of 4K).
pub const HEAD_ROUND_BYTES: u64 = 16 * 1024;

/// Bytes of the area one renewal's share of the full reads may cost, on average: a full
/// read comes every `area bytes / this` renewals ([`full_every`]).
pub const FULL_READ_SHARE_BYTES: u64 = 64 * 1024;

/// The fewest and most renewals between two full reads.
pub const FULL_EVERY_RANGE: (u32, u32) = (4, 64);

/// How a renewal chooses what to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReadMode {
    /// The head on most renewals, the whole area periodically (the default).
    #[default]
    Head,
    /// The whole area every time, as sanlock does.
    Full,
}

/// Successful renewals between two full reads for an area of `geometry`: 16 on a 1 MiB
/// area, 64 on 4 MiB and 8 MiB areas (see [`FULL_READ_SHARE_BYTES`]).
pub fn full_every(geometry: Geometry) -> u32 {
    let area = geometry.sectors_per_area() * geometry.sector_bytes();
    let n = (area / FULL_READ_SHARE_BYTES)
        .clamp(u64::from(FULL_EVERY_RANGE.0), u64::from(FULL_EVERY_RANGE.1));
    n as u32
}

/// The head's length in host sectors: up to `highest_used` (at least `host_id`) plus the
/// margin, rounded up, at most `area_sectors`.
pub fn head_sectors(geometry: Geometry, host_id: u64, highest_used: u64, area_sectors: u64) -> u64 {
    let round = (HEAD_ROUND_BYTES / geometry.sector_bytes()).max(1);
    let want = highest_used.max(host_id) + HEAD_MARGIN_HOSTS;
    want.div_ceil(round).saturating_mul(round).min(area_sectors)
}

/// The renewal read schedule of one joined lockspace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenewalReads {
    mode: ReadMode,
    full_every: u32,
    /// Successful head reads since the last successful full read; `None` before the
    /// first full read.
    heads_since_full: Option<u32>,
    full_requested: bool,
    /// Simulator only: never read the whole area (a planted bug).
    #[cfg(feature = "sim")]
    never_full: bool,
}

impl RenewalReads {
    /// The schedule for a lockspace just joined on an area of `geometry`.
    pub fn new(mode: ReadMode, geometry: Geometry) -> RenewalReads {
        RenewalReads {
            mode,
            full_every: full_every(geometry),
            heads_since_full: None,
            full_requested: false,
            #[cfg(feature = "sim")]
            never_full: false,
        }
    }

    /// Simulator only: the planted bug `skip-full-read` (head reads forever).
    #[cfg(feature = "sim")]
    #[doc(hidden)]
    pub fn plant_never_full(&mut self) {
        self.never_full = true;
    }

    /// The next read is to be of the whole area.
    pub fn request_full(&mut self) {
        self.full_requested = true;
    }

    /// Renewals between two full reads.
    pub fn full_every(&self) -> u32 {
        self.full_every
    }

    fn full_due(&self) -> bool {
        self.mode == ReadMode::Full
            || self.full_requested
            || self
                .heads_since_full
                .is_none_or(|n| n + 1 >= self.full_every)
    }

    /// How many host sectors (from host_id 1) the next renewal reads: the whole area
    /// (`area_sectors`) when a full read is due, else the head.
    pub fn next_read_sectors(
        &self,
        geometry: Geometry,
        host_id: u64,
        highest_used: u64,
        area_sectors: u64,
    ) -> u64 {
        #[cfg(feature = "sim")]
        if self.never_full {
            return head_sectors(geometry, host_id, highest_used, area_sectors);
        }
        if self.full_due() {
            area_sectors
        } else {
            head_sectors(geometry, host_id, highest_used, area_sectors)
        }
    }

    /// A renewal that read `read_sectors` of the area's `area_sectors` succeeded.
    pub fn read_done(&mut self, read_sectors: u64, area_sectors: u64) {
        if read_sectors >= area_sectors {
            self.heads_since_full = Some(0);
            self.full_requested = false;
            return;
        }
        #[cfg(feature = "sim")]
        if self.never_full {
            return;
        }
        let heads = self
            .heads_since_full
            .map(|n| n + 1)
            .expect("renewal reads: a head read before the first full read");
        assert!(
            heads < self.full_every,
            "renewal reads: {heads} head reads since the last full one (at most {})",
            self.full_every - 1
        );
        self.heads_since_full = Some(heads);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use disk_format::geometry::{AlignSize, SectorSize};

    fn g512() -> Geometry {
        Geometry::default_for(SectorSize::B512)
    }

    fn g4k() -> Geometry {
        Geometry::new(SectorSize::B4096, AlignSize::M8).unwrap()
    }

    #[test]
    fn full_reads_come_every_16_renewals_on_1_mib_and_64_on_8_mib() {
        assert_eq!(full_every(g512()), 16);
        assert_eq!(full_every(g4k()), 64);
    }

    #[test]
    fn the_head_covers_every_used_sector_and_ours_plus_the_margin() {
        let g = g512();
        let area = g.sectors_per_area();
        assert_eq!(head_sectors(g, 1, 1, area), 32);
        assert_eq!(head_sectors(g, 1, 24, area), 32);
        assert_eq!(head_sectors(g, 1, 25, area), 64);
        assert_eq!(head_sectors(g, 100, 3, area), 128);
        assert_eq!(head_sectors(g, 1, 64, area), 96);
        // Host_id 2000 is the last: the sectors after it in the area are no delta leases.
        assert_eq!(head_sectors(g, 1, 2000, area), 2016);
        assert_eq!(head_sectors(g, 1, 2040, area), area);
        let g = g4k();
        let area = g.sectors_per_area();
        assert_eq!(head_sectors(g, 1, 4, area), 12);
        assert_eq!(head_sectors(g, 1, area, area), area);
    }

    #[test]
    fn the_first_read_is_full_then_one_in_full_every() {
        let g = g512();
        let area = g.sectors_per_area();
        let mut r = RenewalReads::new(ReadMode::Head, g);
        let mut kinds = Vec::new();
        for _ in 0..40 {
            let n = r.next_read_sectors(g, 3, 5, area);
            kinds.push(n == area);
            r.read_done(n, area);
        }
        let fulls: Vec<usize> = (0..40).filter(|&i| kinds[i]).collect();
        assert_eq!(fulls, vec![0, 16, 32]);
    }

    #[test]
    fn a_request_or_full_mode_reads_everything_and_failures_do_not_count() {
        let g = g512();
        let area = g.sectors_per_area();
        let mut r = RenewalReads::new(ReadMode::Head, g);
        r.read_done(area, area);
        assert_eq!(r.next_read_sectors(g, 1, 1, area), 32);
        // Renewals that fail do not call read_done: the schedule does not move.
        assert_eq!(r.next_read_sectors(g, 1, 1, area), 32);
        r.request_full();
        assert_eq!(r.next_read_sectors(g, 1, 1, area), area);
        r.read_done(area, area);
        assert_eq!(r.next_read_sectors(g, 1, 1, area), 32);
        let full = RenewalReads::new(ReadMode::Full, g);
        assert_eq!(full.next_read_sectors(g, 1, 1, area), area);
    }

    #[test]
    #[should_panic(expected = "head read before the first full read")]
    fn a_head_read_before_any_full_read_stops_the_process() {
        let g = g512();
        let mut r = RenewalReads::new(ReadMode::Head, g);
        r.read_done(32, g.sectors_per_area());
    }
}
