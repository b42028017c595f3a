//! A minimal executor for the daemon: run one of this crate's futures to completion on the
//! current thread. With a blocking [`crate::Disk`] and [`crate::Clock`] the futures never
//! return `Pending`; if an implementation does, the thread parks until woken (or, with
//! [`block_on_polling`], until woken or the polling period passed).

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::Thread;
use std::time::Duration;

struct ThreadWaker(Thread);

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// Polls `fut` to completion on the calling thread.
pub fn block_on<F: Future>(fut: F) -> F::Output {
    run(fut, None)
}

/// [`block_on`] that also polls `fut` again at least every `every` while it waits: for
/// futures that watch a deadline of their own instead of arming a timer to wake them
/// (the daemon's I/O futures, `lockd_diskio::ParallelDisk`).
pub fn block_on_polling<F: Future>(fut: F, every: Duration) -> F::Output {
    run(fut, Some(every))
}

fn run<F: Future>(fut: F, every: Option<Duration>) -> F::Output {
    let mut fut = pin!(fut);
    let waker = Waker::from(Arc::new(ThreadWaker(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    loop {
        match fut.as_mut().poll(&mut cx) {
            Poll::Ready(v) => return v,
            Poll::Pending => match every {
                Some(every) => std::thread::park_timeout(every),
                None => std::thread::park(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_ready_future() {
        assert_eq!(block_on(async { 40 + 2 }), 42);
    }
}
