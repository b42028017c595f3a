//! One lockspace's shared confirmation reads for ballots that read only the dblocks of
//! host_ids that have joined (lease-core `paxos`, "Reading only the hosts that have
//! joined").
//!
//! Every such acquire must, before it commits, see a read of the lockspace's delta leases
//! that *began after its call*. Concurrent acquires in one lockspace share those reads: a
//! caller waits for the read in flight to end if it began before the call, then either
//! starts the next read or waits for another caller's; every caller that arrived before a
//! read began is answered by that read. So with many clients the lockspace costs about one
//! 1 MiB read per read time, whatever the number of acquires.
//!
//! Invariants: `next_seq` counts reads begun; a caller arriving when `next_seq == n` accepts
//! only a result of read `n` or later (results carry their read's number); at most one
//! read is in flight; this mutex is a leaf lock (nothing else is locked while it is held,
//! and it is never held across the read).

use std::sync::{Arc, Condvar, Mutex};

use lease_core::delta::{used_host_ids, LockspaceParams};
use lease_core::error::LeaseError;
use lease_core::io::Disk;
use lease_core::monitor::{HostMonitor, HostObservation, HostObserver};

use crate::sync::lock;

/// The outcome of one read: the host_ids whose delta lease was in use, ascending.
type ReadResult = Result<Arc<Vec<u64>>, LeaseError>;

#[derive(Default)]
struct State {
    /// Reads begun so far; the next read gets this number.
    next_seq: u64,
    in_flight: bool,
    /// The latest finished read: its number and result.
    last: Option<(u64, ReadResult)>,
}

/// Confirmation reads of one lockspace (see the module header).
#[derive(Default)]
pub struct ConfirmReads {
    state: Mutex<State>,
    done: Condvar,
    /// Reads issued, and confirmations answered (counted for the tests).
    pub reads: std::sync::atomic::AtomicU64,
    pub answered: std::sync::atomic::AtomicU64,
}

/// What a caller does next.
enum Step {
    /// A read that began after the call has finished: its result.
    Answer(ReadResult),
    /// Issue read number `seq`, then report it with [`ConfirmReads::finish`].
    Read(u64),
}

impl ConfirmReads {
    /// The used host_ids seen by a read that began after this call.
    async fn used_hosts<L: Disk>(&self, disk: &L, space: &LockspaceParams) -> ReadResult {
        let wanted = lock(&self.state).next_seq;
        loop {
            match self.answer_or_claim(wanted) {
                Step::Answer(result) => return result,
                Step::Read(seq) => {
                    let result = read_used_hosts(disk, space).await;
                    self.finish(seq, result);
                }
            }
        }
    }

    /// Waits while a read is in flight; then answers from the latest read if it is number
    /// `wanted` or later, or claims the next read.
    fn answer_or_claim(&self, wanted: u64) -> Step {
        use std::sync::atomic::Ordering::Relaxed;
        let mut st = lock(&self.state);
        loop {
            if let Some((seq, result)) = &st.last {
                if *seq >= wanted {
                    self.answered.fetch_add(1, Relaxed);
                    return Step::Answer(result.clone());
                }
            }
            if !st.in_flight {
                let seq = st.next_seq;
                st.next_seq += 1;
                st.in_flight = true;
                self.reads.fetch_add(1, Relaxed);
                return Step::Read(seq);
            }
            st = crate::sync::wait(&self.done, st);
        }
    }

    /// Publishes the result of read `seq` and wakes the waiters.
    fn finish(&self, seq: u64, result: ReadResult) {
        let mut st = lock(&self.state);
        st.in_flight = false;
        st.last = Some((seq, result));
        self.done.notify_all();
    }
}

async fn read_used_hosts<L: Disk>(disk: &L, space: &LockspaceParams) -> ReadResult {
    used_host_ids(disk, space).await.map(Arc::new)
}

/// Where a lockspace's host monitor is read: the core's, through the lockspace
/// (`crate::space::Space`); a plain locked monitor in tests.
pub trait MonitorView {
    fn observation(&self, host_id: u64) -> Option<HostObservation>;
    fn ballot_hosts_hint(&self) -> Option<u64>;
    fn shared_grant_hold(&self) -> Option<u16>;
}

impl MonitorView for Mutex<HostMonitor> {
    fn observation(&self, host_id: u64) -> Option<HostObservation> {
        lock(self).observation(host_id)
    }

    fn ballot_hosts_hint(&self) -> Option<u64> {
        lock(self).ballot_hosts_hint()
    }

    fn shared_grant_hold(&self) -> Option<u16> {
        lock(self).shared_grant_hold()
    }
}

/// The daemon's [`HostObserver`] for one lockspace: observations and the known-hosts hint
/// from its monitor, confirmations from its shared reads.
pub struct SpaceObserver<'a> {
    pub monitor: &'a dyn MonitorView,
    pub confirm: &'a ConfirmReads,
}

impl HostObserver for SpaceObserver<'_> {
    fn observation(&self, host_id: u64) -> Option<HostObservation> {
        self.monitor.observation(host_id)
    }

    fn ballot_hosts_hint(&self) -> Option<u64> {
        self.monitor.ballot_hosts_hint()
    }

    fn fence_marks_possible(&self) -> bool {
        true
    }

    fn shared_grant_hold(&self) -> Option<u16> {
        self.monitor.shared_grant_hold()
    }

    async fn confirm_unused_above<L: Disk>(
        &self,
        disk: &L,
        space: &LockspaceParams,
        above: u64,
        upto: u64,
    ) -> Result<bool, LeaseError> {
        let used = self.confirm.used_hosts(disk, space).await?;
        Ok(!used.iter().any(|&h| h > above && h <= upto))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use disk_format::area::format_lockspace_area;
    use disk_format::{Geometry, Name};
    use lease_core::io::IoError;
    use std::future::Future;
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

    /// A lockspace image in memory that counts reads; each read takes `delay_ms`, so
    /// concurrent callers can pile up behind a read in flight.
    struct Mem {
        bytes: Vec<u8>,
        reads: AtomicU64,
        delay_ms: u64,
    }

    impl Disk for Mem {
        type Buf = Vec<u8>;

        fn read(
            &self,
            offset: u64,
            len: usize,
            _timeout_ms: u64,
        ) -> impl Future<Output = Result<Vec<u8>, IoError>> {
            self.reads.fetch_add(1, Relaxed);
            std::thread::sleep(std::time::Duration::from_millis(self.delay_ms));
            let o = offset as usize;
            std::future::ready(
                self.bytes
                    .get(o..o + len)
                    .map(<[u8]>::to_vec)
                    .ok_or(IoError::Failed),
            )
        }

        fn write(
            &self,
            _offset: u64,
            _data: &[u8],
            _timeout_ms: u64,
        ) -> impl Future<Output = Result<(), IoError>> {
            std::future::ready(Err(IoError::Failed))
        }
    }

    fn params() -> LockspaceParams {
        LockspaceParams {
            space_name: Name::new("ls").unwrap(),
            disk_offset: 0,
            geometry: Geometry::ALL[0],
            host_id: 1,
            host_name: Name::new("h1").unwrap(),
            io_timeout: 1,
            watchdog_fire: 10,
            monitor_hosts: None,
        }
    }

    fn image_with_used(hosts: &[u64]) -> Mem {
        let g = Geometry::ALL[0];
        let f = format_lockspace_area(g, &Name::new("ls").unwrap(), 1);
        let mut bytes = f.area;
        bytes[..f.first_sector.len()].copy_from_slice(&f.first_sector);
        for &h in hosts {
            let at = (h as usize - 1) * 512;
            let mut l = disk_format::LeaderRecord::decode(&bytes[at..at + 512]).unwrap();
            l.owner_id = h;
            l.owner_generation = 1;
            l.timestamp = 77;
            l.seal();
            disk_format::DeltaSector::from_leader(l).encode_into(&mut bytes[at..at + 512]);
        }
        Mem {
            bytes,
            reads: AtomicU64::new(0),
            delay_ms: 0,
        }
    }

    #[test]
    fn answers_from_a_read_begun_after_the_call() {
        let disk = image_with_used(&[1, 2, 7]);
        let monitor = Mutex::new(HostMonitor::new(1, 10));
        let confirm = ConfirmReads::default();
        let obs = SpaceObserver {
            monitor: &monitor,
            confirm: &confirm,
        };
        let p = params();
        let ask = |above, upto| {
            lease_core::exec::block_on(obs.confirm_unused_above(&disk, &p, above, upto)).unwrap()
        };
        assert!(ask(7, 2000));
        assert!(!ask(2, 2000), "host 7 is in use");
        assert!(ask(2, 6), "host 7 is past num_hosts 6");
        assert!(!ask(6, 7));
        // Every call came after the previous read ended, so each needed a read of its own.
        assert_eq!(disk.reads.load(Relaxed), 4);
        assert_eq!(confirm.reads.load(std::sync::atomic::Ordering::Relaxed), 4);
    }

    #[test]
    fn a_failed_read_fails_the_confirmation() {
        let disk = Mem {
            bytes: vec![0; 512],
            reads: AtomicU64::new(0),
            delay_ms: 0,
        };
        let monitor = Mutex::new(HostMonitor::new(1, 10));
        let confirm = ConfirmReads::default();
        let obs = SpaceObserver {
            monitor: &monitor,
            confirm: &confirm,
        };
        let r = lease_core::exec::block_on(obs.confirm_unused_above(&disk, &params(), 1, 8));
        assert!(r.is_err());
    }

    /// Threads asking at once share reads: fewer reads than callers, and every caller is
    /// answered.
    #[test]
    fn concurrent_callers_share_reads() {
        let confirm = Arc::new(ConfirmReads::default());
        let monitor = Arc::new(Mutex::new(HostMonitor::new(1, 10)));
        let disk = Arc::new(Mem {
            delay_ms: 20,
            ..image_with_used(&[1])
        });
        let callers = 16;
        let threads: Vec<_> = (0..callers)
            .map(|_| {
                let (c, m, d) = (confirm.clone(), monitor.clone(), disk.clone());
                std::thread::spawn(move || {
                    let obs = SpaceObserver {
                        monitor: &*m,
                        confirm: &c,
                    };
                    lease_core::exec::block_on(obs.confirm_unused_above(&*d, &params(), 1, 2000))
                        .unwrap()
                })
            })
            .collect();
        for t in threads {
            assert!(t.join().unwrap());
        }
        let reads = confirm.reads.load(std::sync::atomic::Ordering::Relaxed);
        assert!(
            reads >= 1 && reads < callers,
            "{reads} reads for {callers} callers"
        );
        assert_eq!(
            confirm.answered.load(std::sync::atomic::Ordering::Relaxed),
            callers
        );
    }
}
