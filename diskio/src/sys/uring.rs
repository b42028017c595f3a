//! io_uring engine: each I/O is a READ/WRITE SQE linked to a LINK_TIMEOUT, so the kernel
//! cancels it when its deadline passes. One thread owns the ring; callers hand it
//! requests over a channel and wait on a per-request completion channel.
//!
//! Waking the ring thread: with no I/O in flight it sleeps on the channel; with I/Os in
//! flight it sleeps in the ring waiting for a completion, and a multishot POLL_ADD on an
//! eventfd, which every submitter writes after sending its request, ends that wait at
//! once — a new request is never left queued behind another request's I/O. (The wait
//! also ends after 1 ms, should the poll ever be refused.)
//!
//! Buffer invariant: the request's buffer is stored in the ring thread's slot table from
//! submission until the I/O's own CQE arrives (completion, error or cancellation); only
//! then is it handed back (or dropped if the caller gave up). A timed-out I/O whose
//! cancellation the device ignores keeps its slot — and its buffer — until it completes.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, TryRecvError};
use std::sync::Arc;
use std::time::Duration;

use io_uring::{opcode, squeue, types, IoUring};
use nix::sys::eventfd::{EfdFlags, EventFd};

use crate::buf::AlignedBuf;
use crate::health::IoTicket;

const RING_ENTRIES: u32 = 256;
/// An inline ring has one caller: its I/O, and those given up before it, with their
/// linked timeouts.
const INLINE_RING_ENTRIES: u32 = 32;
const TIMEOUT_BIT: u64 = 1 << 63;
/// user_data of the eventfd poll; I/O ids stay below it.
const WAKE_ID: u64 = TIMEOUT_BIT - 1;

/// What a caller gets back: the I/O result and its buffer.
pub(crate) type Completion = (io::Result<()>, AlignedBuf);

/// Read or write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    Read,
    Write,
}

/// Where an I/O goes and what it holds on to until it completes.
pub(crate) struct Target {
    /// The open file; held until the I/O's completion so its fd number can never be
    /// closed and reused while the I/O is queued or in flight.
    pub(crate) file: Arc<File>,
    /// The disk's in-flight counter, incremented by the caller, decremented here at the
    /// I/O's completion.
    pub(crate) inflight: Arc<AtomicUsize>,
    /// Issue the I/O from io_uring's worker pool (IOSQE_ASYNC), never inline in this
    /// ring's submission: set for storage that is not a block device (a FUSE or NFS
    /// file), whose direct I/O may block the submitting thread while its server hangs —
    /// seen with a stalled lockd-faultfs view, which then made every other disk's I/O on
    /// the shared ring time out as well (`daemon/tests/multi_disk.rs`).
    pub(crate) force_async: bool,
    /// The I/O's part in its path's health record, finished at the completion.
    pub(crate) ticket: Arc<IoTicket>,
}

struct Req {
    op: Op,
    target: Target,
    offset: u64,
    buf: AlignedBuf,
    timeout: Duration,
    reply: oneshot::Sender<Completion>,
}

struct Slot {
    buf: AlignedBuf,
    len: usize,
    timeout: Duration,
    reply: oneshot::Sender<Completion>,
    target: Target,
    // Kept alive until the SQEs are submitted (the kernel copies it at prep time).
    _ts: Box<types::Timespec>,
}

/// A ring and the thread that drives it. Dropping the engine lets the thread finish the
/// I/Os in flight and exit.
pub(crate) struct UringEngine {
    tx: std::sync::Mutex<Sender<Req>>,
    /// Written after each request is sent; polled by the ring.
    wake: Arc<EventFd>,
    /// Wake-up completions the ring thread has taken (read by the tests only).
    #[cfg_attr(not(test), allow(dead_code))]
    wakeups: Arc<AtomicU64>,
}

impl UringEngine {
    /// Creates a ring (fails where io_uring is unavailable) and starts its thread.
    pub(crate) fn new(name: &str) -> io::Result<UringEngine> {
        let ring = IoUring::new(RING_ENTRIES)?;
        let wake = Arc::new(
            EventFd::from_flags(EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC)
                .map_err(io::Error::from)?,
        );
        let (tx, rx) = mpsc::channel::<Req>();
        let wakeups = Arc::new(AtomicU64::new(0));
        let (ring_wake, ring_wakeups) = (wake.clone(), wakeups.clone());
        crate::spawn_thread(format!("lockd-uring-{name}"), move || {
            ring_loop(ring, rx, &ring_wake, &ring_wakeups)
        })?;
        Ok(UringEngine {
            tx: std::sync::Mutex::new(tx),
            wake,
            wakeups,
        })
    }

    /// Submits one I/O; the returned channel yields its completion. The target's file
    /// and in-flight count are held until then.
    pub(crate) fn submit(
        &self,
        op: Op,
        target: Target,
        offset: u64,
        buf: AlignedBuf,
        timeout: Duration,
    ) -> io::Result<oneshot::Receiver<Completion>> {
        let (reply, rx) = oneshot::channel();
        // A poisoned lock only means another submitter panicked; the sender is intact.
        let tx = self
            .tx
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        tx.send(Req {
            op,
            target,
            offset,
            buf,
            timeout,
            reply,
        })
        .map_err(|e| {
            e.0.target.inflight.fetch_sub(1, Ordering::SeqCst);
            io::Error::other("io_uring thread has stopped")
        })?;
        drop(tx);
        // Cannot fail but for a counter at u64::MAX - 1; the 1 ms wait covers that.
        let _ = self.wake.write(1);
        Ok(rx)
    }
}

fn push(
    ring: &mut IoUring,
    id: u64,
    (op, target, offset): (Op, &Target, u64),
    slot_buf: &mut AlignedBuf,
    ts: &types::Timespec,
) -> io::Result<()> {
    let len =
        u32::try_from(slot_buf.len()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let fd = types::Fd(target.file.as_raw_fd());
    let io = match op {
        Op::Read => opcode::Read::new(fd, slot_buf.as_mut_slice().as_mut_ptr(), len)
            .offset(offset)
            .build(),
        Op::Write => opcode::Write::new(fd, slot_buf.as_slice().as_ptr(), len)
            .offset(offset)
            .build(),
    }
    .user_data(id)
    .flags(if target.force_async {
        squeue::Flags::IO_LINK | squeue::Flags::ASYNC
    } else {
        squeue::Flags::IO_LINK
    });
    let to = opcode::LinkTimeout::new(ts)
        .build()
        .user_data(id | TIMEOUT_BIT);
    let mut sq = ring.submission();
    if sq.capacity() - sq.len() < 2 {
        return Err(io::Error::from_raw_os_error(libc::EBUSY));
    }
    // SAFETY: the buffer pointer stays valid until the I/O's CQE: the buffer's heap
    // allocation is owned by the slot table entry created right after this push and is
    // only released when that CQE is reaped. The timespec is boxed in the same slot and
    // outlives the submit that copies it. Both entries are pushed together (capacity
    // checked above), so the link is never split.
    unsafe {
        sq.push_multiple(&[io, to])
            .map_err(|_| io::Error::from_raw_os_error(libc::EBUSY))?;
    }
    Ok(())
}

/// Submits what is queued and waits up to `wait` for a completion. A wait that ends
/// without one, or is interrupted, is no error; another failure is logged (and followed
/// by a millisecond's pause, so a broken ring cannot spin).
fn submit_and_wait_up_to(ring: &mut IoUring, wait: Duration) {
    let ts = types::Timespec::new()
        .sec(wait.as_secs())
        .nsec(wait.subsec_nanos());
    let args = types::SubmitArgs::new().timespec(&ts);
    match ring.submitter().submit_with_args(1, &args) {
        Ok(_) => {}
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::ETIME) | Some(libc::EINTR) | Some(libc::EBUSY)
            ) => {}
        Err(e) => {
            tracing::error!(error = %e, "io_uring submit failed");
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// Arms the multishot poll on the wake eventfd.
fn arm_wake(ring: &mut IoUring, wake: &EventFd) -> io::Result<()> {
    let poll = opcode::PollAdd::new(types::Fd(wake.as_raw_fd()), libc::POLLIN as u32)
        .multi(true)
        .build()
        .user_data(WAKE_ID);
    let mut sq = ring.submission();
    // SAFETY: a poll shares no memory with the kernel (no buffer, no timespec); the kernel
    // takes its own reference to the eventfd's file when it prepares the request.
    unsafe { sq.push(&poll) }.map_err(|_| io::Error::from_raw_os_error(libc::EBUSY))
}

fn ring_loop(mut ring: IoUring, rx: Receiver<Req>, wake: &EventFd, wakeups: &AtomicU64) {
    let mut slots: HashMap<u64, Slot> = HashMap::new();
    let mut next_id: u64 = 1;
    let mut closed = false;
    if let Err(e) = arm_wake(&mut ring, wake) {
        tracing::warn!(error = %e, "io_uring: no eventfd wake-up; new i/o may wait up to 1 ms");
    }
    loop {
        // Take new requests: block when idle, poll while I/Os are in flight.
        loop {
            let req = if slots.is_empty() && !closed {
                match rx.recv() {
                    Ok(r) => r,
                    Err(_) => {
                        closed = true;
                        break;
                    }
                }
            } else {
                match rx.try_recv() {
                    Ok(r) => r,
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => {
                        closed = true;
                        break;
                    }
                }
            };
            let id = next_id;
            // 1..WAKE_ID-1, then 1 again: never 0, WAKE_ID or a TIMEOUT_BIT id.
            next_id = next_id % (WAKE_ID - 1) + 1;
            let ts = Box::new(
                types::Timespec::new()
                    .sec(req.timeout.as_secs())
                    .nsec(req.timeout.subsec_nanos()),
            );
            let mut req = req;
            let mut buf = std::mem::replace(&mut req.buf, AlignedBuf::zeroed(0));
            match push(
                &mut ring,
                id,
                (req.op, &req.target, req.offset),
                &mut buf,
                &ts,
            ) {
                Ok(()) => {
                    let len = buf.len();
                    slots.insert(
                        id,
                        Slot {
                            buf,
                            len,
                            timeout: req.timeout,
                            reply: req.reply,
                            target: req.target,
                            _ts: ts,
                        },
                    );
                }
                Err(e) => {
                    req.target.inflight.fetch_sub(1, Ordering::SeqCst);
                    req.target.ticket.finished(false, req.timeout);
                    let _ = req.reply.send((Err(e), buf));
                }
            }
            if slots.len() >= (RING_ENTRIES / 2) as usize {
                break;
            }
        }
        if closed && slots.is_empty() {
            return;
        }
        submit_and_wait_up_to(&mut ring, Duration::from_millis(1));
        let done: Vec<(u64, i32, u32)> = ring
            .completion()
            .map(|c| (c.user_data(), c.result(), c.flags()))
            .collect();
        for (ud, res, flags) in done {
            if ud == WAKE_ID {
                wakeups.fetch_add(1, Ordering::Relaxed);
                // Reset the counter (non-blocking: 0 is EAGAIN); re-arm a poll that ended.
                let _ = wake.read();
                if res >= 0 && !io_uring::cqueue::more(flags) {
                    let _ = arm_wake(&mut ring, wake);
                }
                continue;
            }
            if ud & TIMEOUT_BIT != 0 {
                continue;
            }
            let Some(slot) = slots.remove(&ud) else {
                continue;
            };
            let result = io_result(res, slot.len);
            // The caller may have given up; then the buffer is dropped here, after the
            // kernel is done with it (and only now may the file be closed).
            slot.target.inflight.fetch_sub(1, Ordering::SeqCst);
            let cancelled = matches!(&result, Err(e) if e.kind() == io::ErrorKind::TimedOut);
            slot.target.ticket.finished(cancelled, slot.timeout);
            let _ = slot.reply.send((result, slot.buf));
            drop(slot.target);
        }
    }
}

/// The result of an I/O of `len` bytes whose CQE carried `res`: a cancellation by its
/// linked timeout is `TimedOut`, a short transfer an error.
fn io_result(res: i32, len: usize) -> io::Result<()> {
    if res < 0 {
        let errno = -res;
        if errno == libc::ECANCELED || errno == libc::ETIME {
            Err(io::Error::from(io::ErrorKind::TimedOut))
        } else {
            Err(io::Error::from_raw_os_error(errno))
        }
    } else if res as usize != len {
        Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("short i/o: {res} of {} bytes", len),
        ))
    } else {
        Ok(())
    }
}

/// An I/O submitted on an [`InlineRing`] whose CQE has not been reaped.
struct InlineSlot {
    buf: AlignedBuf,
    len: usize,
    timeout: Duration,
    target: Target,
    // Kept alive until the SQEs are submitted (the kernel copies it at prep time).
    _ts: Box<types::Timespec>,
}

/// A ring driven by the thread that submits to it, with no thread of its own: for a disk
/// one thread does all the I/O of (a lockspace's renewal thread). [`InlineRing::run`]
/// submits one I/O with its linked timeout and waits in the ring for its completion;
/// the caller's own thread does what the engine thread does for [`UringEngine`], without
/// the two hand-offs per I/O.
///
/// Buffer invariant, as [`UringEngine`]'s: an I/O's buffer stays in the slot table from
/// submission until its own CQE is reaped. An I/O still not complete when its caller
/// gives up (a device that ignores the cancellation) is given up by the caller, which gets
/// a timeout; its slot stays, and is reaped by a later `run` or, when the ring is dropped
/// first, by a thread that waits for it ([`InlineRing`]'s `Drop`). The caller's deadline
/// is what it was with a ring thread (the I/O's timeout plus the grace), so a stalled
/// device fails a renewal exactly as soon as before and no later: tried by the PID test
/// bed's `stall-io` scenario (a FUSE view that stops answering), `daemon/tests/
/// storage_stall.rs` and the VM bed's pr-kill-daemon, and by the tests below.
pub(crate) struct InlineRing {
    /// Always `Some` until dropped.
    state: Option<InlineState>,
}

struct InlineState {
    ring: IoUring,
    slots: HashMap<u64, InlineSlot>,
    next_id: u64,
}

impl InlineRing {
    /// A ring of its own (fails where io_uring is unavailable).
    pub(crate) fn new() -> io::Result<InlineRing> {
        Ok(InlineRing {
            state: Some(InlineState {
                ring: IoUring::new(INLINE_RING_ENTRIES)?,
                slots: HashMap::new(),
                next_id: 1,
            }),
        })
    }

    /// Runs one I/O, which the kernel cancels after `timeout`: its completion, or a
    /// timeout when it did not complete within `give_up_after` (its buffer then stays
    /// with the ring; the completion carries an empty one, and the I/O's ticket is given
    /// up).
    pub(crate) fn run(
        &mut self,
        io: (Op, Target, u64),
        buf: AlignedBuf,
        timeout: Duration,
        give_up_after: Duration,
    ) -> Completion {
        self.state
            .as_mut()
            .expect("an inline ring is used only while it lives")
            .run(io, buf, timeout, give_up_after)
    }

    /// I/Os submitted and not yet reaped (tests).
    #[cfg(test)]
    fn in_flight(&self) -> usize {
        self.state.as_ref().map_or(0, |s| s.slots.len())
    }
}

impl InlineState {
    fn run(
        &mut self,
        (op, target, offset): (Op, Target, u64),
        buf: AlignedBuf,
        timeout: Duration,
        give_up_after: Duration,
    ) -> Completion {
        let id = self.next_id;
        // 1..TIMEOUT_BIT-1, then 1 again: never 0 or a TIMEOUT_BIT id.
        self.next_id = self.next_id % (TIMEOUT_BIT - 1) + 1;
        let ts = Box::new(
            types::Timespec::new()
                .sec(timeout.as_secs())
                .nsec(timeout.subsec_nanos()),
        );
        let mut buf = buf;
        if let Err(e) = push(&mut self.ring, id, (op, &target, offset), &mut buf, &ts) {
            target.inflight.fetch_sub(1, Ordering::SeqCst);
            target.ticket.finished(false, timeout);
            return (Err(e), buf);
        }
        let ticket = target.ticket.clone();
        let len = buf.len();
        self.slots.insert(
            id,
            InlineSlot {
                buf,
                len,
                timeout,
                target,
                _ts: ts,
            },
        );
        let deadline = std::time::Instant::now() + give_up_after;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                ticket.give_up(timeout);
                let gone = io::Error::from(io::ErrorKind::TimedOut);
                return (Err(gone), AlignedBuf::zeroed(0));
            }
            submit_and_wait_up_to(&mut self.ring, left);
            if let Some(done) = self.reap(id) {
                return done;
            }
        }
    }

    /// Takes every CQE there is; returns I/O `want`'s completion if it was among them.
    /// Others are I/Os given up earlier: their buffers are dropped now that the kernel is
    /// done with them.
    fn reap(&mut self, want: u64) -> Option<Completion> {
        let done: Vec<(u64, i32)> = self
            .ring
            .completion()
            .map(|c| (c.user_data(), c.result()))
            .collect();
        let mut found = None;
        for (ud, res) in done {
            if ud & TIMEOUT_BIT != 0 {
                continue;
            }
            let Some(slot) = self.slots.remove(&ud) else {
                continue;
            };
            let result = io_result(res, slot.len);
            slot.target.inflight.fetch_sub(1, Ordering::SeqCst);
            let cancelled = matches!(&result, Err(e) if e.kind() == io::ErrorKind::TimedOut);
            slot.target.ticket.finished(cancelled, slot.timeout);
            if ud == want {
                found = Some((result, slot.buf));
            }
        }
        found
    }
}

impl Drop for InlineRing {
    /// I/Os still in the kernel keep their buffers until they complete: a thread takes
    /// the ring and waits for them; if no thread can be started, ring and buffers are
    /// leaked rather than freed under the kernel.
    fn drop(&mut self) {
        let Some(state) = self.state.take() else {
            return;
        };
        if state.slots.is_empty() {
            return;
        }
        let handed = Arc::new(std::sync::Mutex::new(Some(state)));
        let theirs = handed.clone();
        let spawned = crate::spawn_thread("lockd-uring-reap", move || {
            let taken = theirs
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .take();
            if let Some(mut st) = taken {
                while !st.slots.is_empty() {
                    let _ = st.ring.submit_and_wait(1);
                    let _ = st.reap(0);
                }
            }
        });
        if spawned.is_err() {
            tracing::error!(
                "cannot start a thread to wait for i/o in flight on a closed ring; its \
                 buffers are leaked"
            );
            let left = handed
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .take();
            std::mem::forget(left);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linked_timeout_cancels_a_stuck_read_and_returns_its_buffer() {
        // A read from an empty pipe never completes by itself: the linked timeout must
        // cancel it, and the buffer must come back with the cancellation.
        let (reader, _writer) = std::io::pipe().unwrap();
        let engine = UringEngine::new("test").unwrap();
        let inflight = Arc::new(AtomicUsize::new(1));
        let health = Arc::new(crate::health::PathHealth::default());
        let target = Target {
            file: Arc::new(File::from(std::os::fd::OwnedFd::from(reader))),
            inflight: inflight.clone(),
            force_async: false,
            ticket: IoTicket::new(health.clone()),
        };
        let t0 = std::time::Instant::now();
        let rx = engine
            .submit(
                Op::Read,
                target,
                0,
                AlignedBuf::zeroed(512),
                Duration::from_millis(200),
            )
            .unwrap();
        let (res, buf) = rx.recv_timeout(Duration::from_secs(5)).expect("completion");
        let e = res.expect_err("stuck read must time out");
        assert_eq!(e.kind(), io::ErrorKind::TimedOut, "{e}");
        assert_eq!(buf.len(), 512);
        let took = t0.elapsed();
        assert!(
            took >= Duration::from_millis(190) && took < Duration::from_secs(2),
            "{took:?}"
        );
        assert!(health.sick(), "a cancelled i/o starts its path's cool-down");
        assert_eq!(health.overdue(), 0, "nobody gave the i/o up");
    }

    #[test]
    fn completed_read_beats_its_timeout() {
        use std::io::Write;
        let (reader, mut writer) = std::io::pipe().unwrap();
        writer.write_all(&[7u8; 512]).unwrap();
        let engine = UringEngine::new("test").unwrap();
        let target = Target {
            file: Arc::new(File::from(std::os::fd::OwnedFd::from(reader))),
            inflight: Arc::new(AtomicUsize::new(1)),
            force_async: false,
            ticket: IoTicket::new(Default::default()),
        };
        let rx = engine
            .submit(
                Op::Read,
                target,
                0,
                AlignedBuf::zeroed(512),
                Duration::from_secs(5),
            )
            .unwrap();
        let (res, buf) = rx.recv_timeout(Duration::from_secs(5)).expect("completion");
        res.expect("read");
        assert!(buf.as_slice().iter().all(|&b| b == 7));
    }

    /// With an I/O stuck in flight (the ring thread waits in the kernel), a new request's
    /// eventfd write reaches the ring as a wake-up completion, and the request completes.
    #[test]
    fn a_request_wakes_the_ring_while_another_io_is_in_flight() {
        use std::io::Write;
        let engine = UringEngine::new("test").unwrap();
        let read_pipe = |reader: std::io::PipeReader| {
            let target = Target {
                file: Arc::new(File::from(std::os::fd::OwnedFd::from(reader))),
                inflight: Arc::new(AtomicUsize::new(1)),
                force_async: false,
                ticket: IoTicket::new(Default::default()),
            };
            let buf = AlignedBuf::zeroed(512);
            engine
                .submit(Op::Read, target, 0, buf, Duration::from_secs(5))
                .unwrap()
        };
        let (stuck_reader, _stuck_writer) = std::io::pipe().unwrap();
        let stuck = read_pipe(stuck_reader);
        std::thread::sleep(Duration::from_millis(50));
        let before = engine.wakeups.load(Ordering::Relaxed);
        let (reader, mut writer) = std::io::pipe().unwrap();
        writer.write_all(&[3u8; 512]).unwrap();
        let rx = read_pipe(reader);
        let (res, buf) = rx.recv_timeout(Duration::from_secs(2)).expect("completion");
        res.expect("read");
        assert!(buf.as_slice().iter().all(|&b| b == 3));
        let deadline = std::time::Instant::now() + Duration::from_secs(2);
        while engine.wakeups.load(Ordering::Relaxed) == before {
            assert!(
                std::time::Instant::now() < deadline,
                "no eventfd wake-up reached the ring"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(
            stuck.try_recv().is_err(),
            "the stuck read completed by itself"
        );
    }

    fn pipe_target(reader: std::io::PipeReader, inflight: &Arc<AtomicUsize>) -> Target {
        inflight.fetch_add(1, Ordering::SeqCst);
        Target {
            file: Arc::new(File::from(std::os::fd::OwnedFd::from(reader))),
            inflight: inflight.clone(),
            force_async: false,
            ticket: IoTicket::new(Default::default()),
        }
    }

    /// On an inline ring the caller's own thread sees a read complete, and a stuck read
    /// cancelled by its linked timeout, with its buffer back.
    #[test]
    fn an_inline_ring_completes_and_cancels_on_the_callers_thread() {
        use std::io::Write;
        let mut ring = InlineRing::new().unwrap();
        let inflight = Arc::new(AtomicUsize::new(0));
        let (reader, mut writer) = std::io::pipe().unwrap();
        writer.write_all(&[5u8; 512]).unwrap();
        let t = pipe_target(reader, &inflight);
        let (res, buf) = ring.run(
            (Op::Read, t, 0),
            AlignedBuf::zeroed(512),
            Duration::from_secs(5),
            Duration::from_secs(6),
        );
        res.expect("read");
        assert!(buf.as_slice().iter().all(|&b| b == 5));
        let (stuck, _w) = std::io::pipe().unwrap();
        let t0 = std::time::Instant::now();
        let (res, buf) = ring.run(
            (Op::Read, pipe_target(stuck, &inflight), 0),
            AlignedBuf::zeroed(512),
            Duration::from_millis(200),
            Duration::from_secs(5),
        );
        let e = res.expect_err("a stuck read times out");
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert_eq!(buf.len(), 512, "the cancelled read's buffer comes back");
        assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
        assert_eq!(inflight.load(Ordering::SeqCst), 0);
        assert_eq!(ring.in_flight(), 0);
    }

    /// A read its caller gives up on before the kernel is done keeps its buffer in the
    /// ring; a later I/O reaps it when it completes, and a ring dropped with one in
    /// flight hands it to a thread that waits for it.
    #[test]
    fn an_inline_ring_keeps_a_given_up_read_until_it_completes() {
        use std::io::Write;
        let mut ring = InlineRing::new().unwrap();
        let inflight = Arc::new(AtomicUsize::new(0));
        let (slow, mut slow_w) = std::io::pipe().unwrap();
        let health = Arc::new(crate::health::PathHealth::default());
        let mut t = pipe_target(slow, &inflight);
        t.ticket = IoTicket::new(health.clone());
        let (res, buf) = ring.run(
            (Op::Read, t, 0),
            AlignedBuf::zeroed(512),
            Duration::from_secs(30),
            Duration::from_millis(100),
        );
        assert_eq!(res.unwrap_err().kind(), io::ErrorKind::TimedOut);
        assert_eq!(
            buf.len(),
            0,
            "the given-up read's buffer stays with the ring"
        );
        assert_eq!(ring.in_flight(), 1);
        assert_eq!(health.overdue(), 1, "the given-up read is overdue");
        // It completes; the next I/O reaps it.
        slow_w.write_all(&[1u8; 512]).unwrap();
        let (reader, mut writer) = std::io::pipe().unwrap();
        writer.write_all(&[2u8; 512]).unwrap();
        let (res, _) = ring.run(
            (Op::Read, pipe_target(reader, &inflight), 0),
            AlignedBuf::zeroed(512),
            Duration::from_secs(5),
            Duration::from_secs(6),
        );
        res.expect("read");
        let deadline = std::time::Instant::now() + Duration::from_secs(2);
        while ring.in_flight() > 0 && std::time::Instant::now() < deadline {
            let (r, mut w) = std::io::pipe().unwrap();
            w.write_all(&[3u8; 512]).unwrap();
            let (res, _) = ring.run(
                (Op::Read, pipe_target(r, &inflight), 0),
                AlignedBuf::zeroed(512),
                Duration::from_secs(5),
                Duration::from_secs(6),
            );
            res.expect("read");
        }
        assert_eq!(ring.in_flight(), 0, "the completed read was reaped");
        assert_eq!(health.overdue(), 0);
        // Dropped with a read in flight: a thread waits for it.
        let (late, mut late_w) = std::io::pipe().unwrap();
        let (res, _) = ring.run(
            (Op::Read, pipe_target(late, &inflight), 0),
            AlignedBuf::zeroed(512),
            Duration::from_secs(30),
            Duration::from_millis(50),
        );
        assert!(res.is_err());
        drop(ring);
        assert_eq!(inflight.load(Ordering::SeqCst), 1);
        late_w.write_all(&[4u8; 512]).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while inflight.load(Ordering::SeqCst) > 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "the dropped ring's read was never reaped"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}
