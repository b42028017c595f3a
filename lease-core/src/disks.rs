//! The disks of one resource lease: one (the normal case) or up to [`MAX_DISKS`], as
//! sanlock's `num_disks`, and the majority rule of Disk Paxos over them.
//!
//! [`LeaseDisks`] is implemented by every [`Disk`] (one disk, the lease area at
//! `ResourceParams::disk_offset`) and by [`Replicas`] (several disks, each with the
//! area's offset on it). [`gather`] runs one future per disk at once, so a step costs the
//! slowest disk's time, not the sum of all disks' times as in sanlock's one-after-another
//! order.
//!
//! Invariants:
//! - A step counts a disk only for work that completed on that disk, in order: a
//!   ballot phase is one future per disk that writes our dblock and then reads the
//!   dblocks, so a read counted for disk `d` always follows our write to `d` (what the
//!   Disk Paxos proof needs of each disk in the majority).
//! - A step waits for every disk it started, even once its outcome is decided: a write
//!   left in flight could land after a later write of ours to the same sector and undo
//!   it (the multi-disk simulator found exactly that when steps returned at a majority:
//!   a release's leader write to a slow disk landed after the next acquire's commit and
//!   took that disk's leader back a version; `lockd-sim --model multi-disk`, seed 586).
//! - A disk whose I/O timed out is *dropped* for the rest of the operation
//!   ([`LeaseDisks::dropped`]): that I/O may still be in flight, and no later write of
//!   ours may race it. A dropped disk counts as a failure in every later majority. The
//!   mark lives in the [`Replicas`] value, which a caller makes for one operation (one
//!   acquire, one release); across operations the caller keeps what it saw of each
//!   path ([`PathState`]) and drops from the start what [`left_out`] says: a disk with
//!   an I/O of ours still in flight, and one that timed out recently while the others
//!   are a majority without it. The daemon and the simulator both do.
//! - [`majority`] is sanlock's `majority_disks`: more than half (2 of 3, 3 of 4, 2 of 2).
//!
//! Hand-written rather than taken from a futures crate: lease-core depends on no
//! executor, and the one combinator needed (poll every disk's future, note which timed
//! out) is a few lines over `poll_fn`.

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

use crate::error::LeaseError;
use crate::io::Disk;

/// sanlock's `SANLK_MAX_DISKS`.
pub const MAX_DISKS: usize = 4;

/// Whether `count` of `num_disks` disks is a majority (more than half).
pub fn majority(num_disks: usize, count: usize) -> bool {
    count * 2 > num_disks
}

/// The disks a resource lease lives on.
pub trait LeaseDisks {
    /// The disk type.
    type Disk: Disk;

    /// How many disks: 1..=[`MAX_DISKS`].
    fn count(&self) -> usize;

    /// Disk `i` and the lease area's byte offset on it. `base` is the resource's
    /// `disk_offset`, the offset of a lease on one disk.
    fn replica(&self, i: usize, base: u64) -> (&Self::Disk, u64);

    /// Whether disk `i` was given up for the rest of this operation (see the module
    /// header).
    fn dropped(&self, _i: usize) -> bool {
        false
    }

    /// Gives disk `i` up for the rest of this operation.
    fn drop_disk(&self, _i: usize) {}

    /// Whether `count` disks decide a step: a [`majority`] of [`LeaseDisks::count`].
    fn quorum(&self, count: usize) -> bool {
        majority(self.count(), count)
    }
}

/// One disk: the lease area is at the resource's `disk_offset`. Never dropped: a single
/// disk's step waits for its I/O as it always has.
impl<D: Disk> LeaseDisks for D {
    type Disk = D;

    fn count(&self) -> usize {
        1
    }

    fn replica(&self, _i: usize, base: u64) -> (&D, u64) {
        (self, base)
    }
}

/// How long a path whose I/O timed out cools down, in multiples of the timeout that
/// expired: long enough that a hung path does not cost every operation its timeout,
/// short enough that a path that came back is used again within a minute at sanlock's
/// default io_timeout of 10 s.
pub const COOL_DOWN_TIMEOUTS: u64 = 6;

/// What the caller knows of one disk's path before an operation (the daemon:
/// `lockd_diskio::health`; the simulator: its own record per host and disk).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PathState {
    /// An I/O of ours to it timed out and may still land.
    pub overdue: bool,
    /// An I/O of ours to it timed out recently.
    pub cooling: bool,
}

/// Which disks an operation on a lease of several disks leaves out from the start
/// (dropped before its first step): an overdue one always — a write of ours must not
/// race one still in flight, as within one operation; a cooling one when the others
/// are a majority without it, so a hung path costs one timeout, not one per operation.
/// The one disk of a lease on one disk is never left out. Leaving a disk out does to the
/// operation what that disk's failure would, which the majority rule covers: no second
/// holder can come of it (`lockd-sim --model multi-disk`, whose hosts apply this rule
/// over writes that land up to two timeouts late: 0 violations on the seeds that
/// docs/algorithms.md lists; the overdue case is seed 586's race carried across
/// operations). Tested in `tests::an_overdue_disk_is_always_left_out…` and, on real
/// storage, `daemon/tests/multi_disk.rs` (a stalled view left out after one probe).
pub fn left_out(paths: &[PathState]) -> Vec<bool> {
    if paths.len() < 2 {
        return vec![false; paths.len()];
    }
    let healthy = paths.iter().filter(|p| !p.overdue && !p.cooling).count();
    let spare_cooling = majority(paths.len(), healthy);
    paths
        .iter()
        .map(|p| p.overdue || (spare_cooling && p.cooling))
        .collect()
}

/// Several disks of one lease, for one operation. (A lease on one disk passes the
/// [`Disk`] itself, which is never dropped.)
pub struct Replicas<'a, D> {
    list: Vec<(&'a D, u64)>,
    dropped: Cell<u8>,
    /// Simulator only: the planted bug that takes one disk for a majority.
    #[cfg(feature = "sim")]
    accept_minority: bool,
}

impl<'a, D: Disk> Replicas<'a, D> {
    /// The lease's disks with the area's offset on each, in the order the lease names them
    /// (disk 0 holds the request record and the LVB, as in sanlock).
    pub fn new(list: Vec<(&'a D, u64)>) -> Result<Self, LeaseError> {
        if list.is_empty() || list.len() > MAX_DISKS {
            return Err(LeaseError::Invalid("a lease has 1 to 4 disks"));
        }
        Ok(Replicas {
            list,
            dropped: Cell::new(0),
            #[cfg(feature = "sim")]
            accept_minority: false,
        })
    }

    /// Simulator only: plants the bug `AcceptMinority` (any one disk decides a step).
    #[cfg(feature = "sim")]
    #[doc(hidden)]
    pub fn plant_accept_minority(mut self) -> Self {
        self.accept_minority = true;
        self
    }

    /// How many disks were dropped so far in this operation.
    pub fn dropped_count(&self) -> u32 {
        self.dropped.get().count_ones()
    }
}

impl<D: Disk> LeaseDisks for Replicas<'_, D> {
    type Disk = D;

    fn count(&self) -> usize {
        self.list.len()
    }

    fn replica(&self, i: usize, _base: u64) -> (&D, u64) {
        self.list[i]
    }

    fn dropped(&self, i: usize) -> bool {
        self.dropped.get() & (1 << i) != 0
    }

    fn drop_disk(&self, i: usize) {
        self.dropped.set(self.dropped.get() | (1 << i));
    }

    fn quorum(&self, count: usize) -> bool {
        #[cfg(feature = "sim")]
        if self.accept_minority {
            return count >= 1;
        }
        majority(self.count(), count)
    }
}

/// The disks of one lease for one operation, whichever their number: the [`Disk`] itself
/// for one (never dropped), [`Replicas`] for several.
pub enum LeaseOn<'a, D> {
    /// A lease on one disk, at the resource's `disk_offset`.
    One(&'a D),
    /// A lease on several disks.
    Many(Replicas<'a, D>),
}

impl<'a, D: Disk> LeaseOn<'a, D> {
    /// One disk as itself; two to four as [`Replicas`]; none or more than four refused.
    pub fn new(list: Vec<(&'a D, u64)>) -> Result<Self, LeaseError> {
        match list.as_slice() {
            [(one, _)] => Ok(LeaseOn::One(one)),
            _ => Replicas::new(list).map(LeaseOn::Many),
        }
    }
}

impl<D: Disk> LeaseDisks for LeaseOn<'_, D> {
    type Disk = D;

    fn count(&self) -> usize {
        match self {
            LeaseOn::One(_) => 1,
            LeaseOn::Many(r) => r.count(),
        }
    }

    fn replica(&self, i: usize, base: u64) -> (&D, u64) {
        match self {
            LeaseOn::One(d) => (d, base),
            LeaseOn::Many(r) => r.replica(i, base),
        }
    }

    fn dropped(&self, i: usize) -> bool {
        matches!(self, LeaseOn::Many(r) if r.dropped(i))
    }

    fn drop_disk(&self, i: usize) {
        if let LeaseOn::Many(r) = self {
            r.drop_disk(i);
        }
    }

    fn quorum(&self, count: usize) -> bool {
        match self {
            LeaseOn::One(_) => majority(1, count),
            LeaseOn::Many(r) => r.quorum(count),
        }
    }
}

/// What one disk gave in a [`gather`].
#[derive(Debug)]
pub enum Answer<T> {
    /// The disk was dropped before the step: nothing was issued on it.
    Skipped,
    /// The disk's future finished.
    Done(Result<T, LeaseError>),
}

impl<T> Answer<T> {
    /// The value, when the disk's future finished well.
    pub fn ok(&self) -> Option<&T> {
        match self {
            Answer::Done(Ok(v)) => Some(v),
            _ => None,
        }
    }
}

fn timed_out(e: &LeaseError) -> bool {
    matches!(
        e,
        LeaseError::Io {
            timed_out: true,
            ..
        }
    )
}

/// Runs `start(i)` for every disk `i` not dropped, all at once, until every one has
/// finished; disks whose I/O timed out are dropped.
pub async fn gather<S, T, F>(disks: &S, mut start: impl FnMut(usize) -> F) -> Vec<Answer<T>>
where
    S: LeaseDisks + ?Sized,
    F: Future<Output = Result<T, LeaseError>>,
{
    let n = disks.count();
    let mut futs: Vec<Option<Pin<Box<F>>>> = (0..n)
        .map(|i| (!disks.dropped(i)).then(|| Box::pin(start(i))))
        .collect();
    let mut out: Vec<Answer<T>> = (0..n).map(|_| Answer::Skipped).collect();
    std::future::poll_fn(|cx| {
        for (i, slot) in futs.iter_mut().enumerate() {
            let Some(f) = slot.as_mut() else { continue };
            if let Poll::Ready(r) = f.as_mut().poll(cx) {
                *slot = None;
                if matches!(&r, Err(e) if timed_out(e)) {
                    disks.drop_disk(i);
                }
                out[i] = Answer::Done(r);
            }
        }
        if futs.iter().all(Option::is_none) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
    .await;
    out
}

/// How many answers finished well.
pub fn count_ok<T>(answers: &[Answer<T>]) -> usize {
    answers.iter().filter(|a| a.ok().is_some()).count()
}

/// The error a step that missed its majority reports: a reservation conflict on any
/// disk (this host is fenced there), else the first disk's error in the lease's order,
/// else `missing` (every failing disk had been dropped). On one disk this is that disk's
/// own error.
pub fn step_error<T>(answers: &[Answer<T>], missing: LeaseError) -> LeaseError {
    let errors = || {
        answers.iter().filter_map(|a| match a {
            Answer::Done(Err(e)) => Some(e),
            _ => None,
        })
    };
    if let Some(e) = errors().find(|e| e.is_fenced()) {
        return e.clone();
    }
    errors().next().cloned().unwrap_or(missing)
}

/// Runs `write(i)` on every disk and succeeds when a majority of the disks (all of them
/// with `all`) wrote; otherwise [`step_error`] with `missing`.
pub async fn write_each<S, F>(
    disks: &S,
    all: bool,
    write: impl FnMut(usize) -> F,
    missing: LeaseError,
) -> Result<(), LeaseError>
where
    S: LeaseDisks + ?Sized,
    F: Future<Output = Result<(), LeaseError>>,
{
    let n = disks.count();
    let need = |ok: usize| if all { ok == n } else { disks.quorum(ok) };
    let answers = gather(disks, write).await;
    if need(count_ok(&answers)) {
        Ok(())
    } else {
        Err(step_error(&answers, missing))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::IoOp;
    use crate::exec::block_on;
    use crate::io::IoError;

    #[test]
    fn an_overdue_disk_is_always_left_out_and_a_cooling_one_only_with_a_majority_left() {
        let ok = PathState::default();
        let overdue = PathState {
            overdue: true,
            cooling: true,
        };
        let cooling = PathState {
            overdue: false,
            cooling: true,
        };
        assert_eq!(left_out(&[overdue]), [false], "the one disk of a lease");
        assert_eq!(left_out(&[cooling, ok, ok]), [true, false, false]);
        assert_eq!(left_out(&[cooling, cooling, ok]), [false, false, false]);
        assert_eq!(left_out(&[overdue, cooling, ok]), [true, false, false]);
        assert_eq!(left_out(&[cooling, ok]), [false, false], "2 of 2 needed");
        assert_eq!(left_out(&[overdue, ok]), [true, false]);
        assert_eq!(
            left_out(&[cooling, ok, ok, ok]),
            [true, false, false, false]
        );
    }

    #[test]
    fn majority_is_more_than_half() {
        assert!(majority(1, 1));
        assert!(!majority(1, 0));
        assert!(majority(2, 2));
        assert!(!majority(2, 1), "half of an even count is not enough");
        assert!(majority(3, 2));
        assert!(!majority(3, 1));
        assert!(majority(4, 3));
        assert!(!majority(4, 2));
    }

    fn io(timed_out: bool) -> LeaseError {
        LeaseError::Io {
            op: IoOp::DblockWrite,
            timed_out,
        }
    }

    struct Nothing;
    impl Disk for Nothing {
        type Buf = Vec<u8>;
        async fn read(&self, _: u64, _: usize, _: u64) -> Result<Vec<u8>, IoError> {
            Err(IoError::Failed)
        }
        async fn write(&self, _: u64, _: &[u8], _: u64) -> Result<(), IoError> {
            Err(IoError::Failed)
        }
    }

    #[test]
    fn a_timed_out_disk_is_dropped_and_skipped_next_time() {
        let d = Nothing;
        let r = Replicas::new(vec![(&d, 0), (&d, 4096), (&d, 8192)]).unwrap();
        let answers = block_on(gather(&r, |i| async move {
            if i == 1 {
                Err(io(true))
            } else {
                Ok(i)
            }
        }));
        assert_eq!(count_ok(&answers), 2);
        assert!(r.dropped(1) && !r.dropped(0) && !r.dropped(2));
        let again = block_on(gather(&r, |i| async move { Ok(i) }));
        assert!(matches!(again[1], Answer::Skipped));
        assert_eq!(count_ok(&again), 2);
    }

    #[test]
    fn a_step_error_prefers_a_reservation_conflict_then_the_first_disk() {
        let fenced = LeaseError::Fenced {
            op: IoOp::DblockWrite,
        };
        let a: Vec<Answer<()>> = vec![
            Answer::Done(Err(io(false))),
            Answer::Done(Err(fenced.clone())),
            Answer::Skipped,
        ];
        assert_eq!(step_error(&a, LeaseError::Again), fenced);
        let b: Vec<Answer<()>> = vec![Answer::Skipped, Answer::Done(Err(io(true)))];
        assert_eq!(step_error(&b, LeaseError::Again), io(true));
        let c: Vec<Answer<()>> = vec![Answer::Skipped, Answer::Skipped];
        assert_eq!(step_error(&c, LeaseError::Again), LeaseError::Again);
    }

    #[test]
    fn replicas_take_one_to_four_disks() {
        let d = Nothing;
        assert!(Replicas::<Nothing>::new(vec![]).is_err());
        assert!(Replicas::new(vec![(&d, 0); 5]).is_err());
        assert_eq!(Replicas::new(vec![(&d, 0); 4]).unwrap().count(), 4);
    }
}
