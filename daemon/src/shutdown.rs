//! The daemon's shutdown: one flag, and a wake for the threads that block until it is set.
//!
//! Invariants:
//! - The flag is the one record of a shutdown: it goes from false to true once and never
//!   back. Every thread that polls reads it ([`Shutdown::is_requested`]).
//! - The wake is one byte written into a socket pair by the call that set the flag, never
//!   read: a waiter polls the other end for readability, so every waiter, however many and
//!   however late, sees it, and the socket stays readable. No lock is taken on either side.
//!
//! Hand-written because the wait must serve any number of threads at once with no lock
//! (a `Condvar` needs a `Mutex`); `nix::poll` does it with no unsafe code.

use std::io::{self, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// The shutdown flag and its wake.
#[derive(Debug)]
pub struct Shutdown {
    requested: AtomicBool,
    wake_tx: UnixStream,
    wake_rx: UnixStream,
}

impl Shutdown {
    /// A flag not yet set. Fails only when no socket pair can be made (out of fds).
    pub fn new() -> io::Result<Shutdown> {
        let (wake_tx, wake_rx) = UnixStream::pair()?;
        Ok(Shutdown {
            requested: AtomicBool::new(false),
            wake_tx,
            wake_rx,
        })
    }

    /// Whether a shutdown was asked for.
    pub fn is_requested(&self) -> bool {
        self.requested.load(Ordering::SeqCst)
    }

    /// Sets the flag and, the first time, wakes every waiter.
    pub fn request(&self) {
        if self.requested.swap(true, Ordering::SeqCst) {
            return;
        }
        if let Err(e) = (&self.wake_tx).write_all(&[1]) {
            // The waiters also poll the flag (`wait`), so they still see it, late.
            tracing::error!(error = %e, "cannot wake the threads waiting for the shutdown");
        }
    }

    /// Blocks until [`request`](Self::request) has been called (returns at once if it was).
    pub fn wait(&self) {
        while !self.is_requested() {
            let mut fds = [PollFd::new(self.wake_rx.as_fd(), PollFlags::POLLIN)];
            match poll(&mut fds, PollTimeout::NONE) {
                Ok(_) => {}
                Err(nix::errno::Errno::EINTR) => {}
                Err(e) => {
                    // Cannot happen with both ends ours; the flag is still polled.
                    tracing::error!(error = %e, "waiting for the shutdown: polling instead");
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        }
        // The flag is set before the byte is written: a waiter woken by the byte sees it.
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::sync::Arc;

    #[test]
    fn every_waiter_wakes_however_many_and_however_late() {
        let s = Arc::new(Shutdown::new().unwrap());
        assert!(!s.is_requested());
        let waiters: Vec<_> = (0..4)
            .map(|_| {
                let s = s.clone();
                std::thread::spawn(move || s.wait())
            })
            .collect();
        std::thread::sleep(Duration::from_millis(50));
        assert!(
            waiters.iter().all(|w| !w.is_finished()),
            "no waiter returns early"
        );
        s.request();
        s.request();
        for w in waiters {
            w.join().unwrap();
        }
        assert!(s.is_requested());
        // A waiter that comes after the request returns at once, and the byte is still
        // there for a peek (nothing consumed it).
        s.wait();
        let mut fds = [PollFd::new(s.wake_rx.as_fd(), PollFlags::POLLIN)];
        assert_eq!(
            poll(&mut fds, PollTimeout::ZERO).unwrap(),
            1,
            "still readable"
        );
        let mut byte = [0u8; 2];
        s.wake_rx.set_nonblocking(true).unwrap();
        assert_eq!(
            (&s.wake_rx).read(&mut byte).unwrap(),
            1,
            "one byte, written once"
        );
    }
}
