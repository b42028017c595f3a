//! The bounded pool of worker threads that runs client commands.
//!
//! The reactor (`reactor.rs`) hands a job here when a connection has a whole request
//! header, when a connection closed, or when a process watched for its leases exited. A
//! job runs to its end on one worker; the worker then takes the next.
//!
//! Invariants:
//! - at most `max_threads` workers exist; a job submitted while every worker is busy waits
//!   in the queue (first in, first out) rather than starting a thread;
//! - a worker is started only when the queue holds more jobs than there are idle workers
//!   (counting a busy worker whose job has called [`Pool::ending`] as idle),
//!   and a worker idle for [`IDLE_EXIT`] exits unless it is one of the last
//!   [`KEEP_THREADS`]: an idle daemon keeps few threads, a burst gets up to the bound;
//! - a panic in a job stops the whole process (the worker aborts it once the panic hook
//!   has reported the panic): a job that panicked may have left the tables half updated,
//!   and no one may go on from there. In release builds `panic = "abort"` does it
//!   already; the worker's guard makes debug builds and tests behave the same.
//!
//! Hand-written rather than taken from a crate: the pool is ~100 lines over `Mutex` and
//! `Condvar`, must start threads through `crate::threads` (small stacks under mlockall),
//! and needs the grow-on-demand / exit-when-idle policy above, which rayon's and
//! threadpool's fixed-size pools do not have.

use std::cell::Cell;
use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use tracing::warn;

use crate::sync::{lock, wait_timeout};

/// A worker idle this long exits (unless it is one of the last [`KEEP_THREADS`]).
pub const IDLE_EXIT: Duration = Duration::from_secs(30);

/// Workers kept alive however idle the daemon is.
pub const KEEP_THREADS: usize = 2;

struct State<J> {
    queue: VecDeque<J>,
    /// Workers waiting for a job.
    idle: usize,
    /// Busy workers whose job has called [`Pool::ending`]: they take a job next, without
    /// waiting on anything else, so `submit` counts them with the idle ones.
    ending: usize,
    /// Workers alive (busy or idle).
    threads: usize,
    /// Most workers ever alive at once.
    high_water: usize,
    /// Set by [`Pool::stop`]: workers exit once the queue is empty.
    stopping: bool,
}

struct Inner<J> {
    name: &'static str,
    max_threads: usize,
    state: Mutex<State<J>>,
    wake: Condvar,
    run: Box<dyn Fn(J) + Send + Sync>,
}

/// A snapshot of a pool's workers and queue.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolCounts {
    /// Workers alive (busy or idle).
    pub threads: usize,
    /// Workers waiting for a job.
    pub idle: usize,
    /// Most workers ever alive at once.
    pub high_water: usize,
    /// Jobs waiting for a worker.
    pub queued: usize,
}

/// A pool running jobs of type `J` with `run`.
pub struct Pool<J: Send + 'static> {
    inner: Arc<Inner<J>>,
}

impl<J: Send + 'static> Pool<J> {
    /// A pool of at most `max_threads` workers named `name`; no worker starts before the
    /// first job.
    pub fn new(
        name: &'static str,
        max_threads: usize,
        run: impl Fn(J) + Send + Sync + 'static,
    ) -> Pool<J> {
        assert!(max_threads >= 1, "a pool needs at least one worker");
        Pool {
            inner: Arc::new(Inner {
                name,
                max_threads,
                state: Mutex::new(State {
                    queue: VecDeque::new(),
                    idle: 0,
                    ending: 0,
                    threads: 0,
                    high_water: 0,
                    stopping: false,
                }),
                wake: Condvar::new(),
                run: Box::new(run),
            }),
        }
    }

    /// Queues `job`, starting a worker if every worker is busy and the bound allows.
    pub fn submit(&self, job: J) {
        let start = {
            let mut st = lock(&self.inner.state);
            st.queue.push_back(job);
            let start = st.queue.len() > st.idle + st.ending && st.threads < self.inner.max_threads;
            if start {
                st.threads += 1;
                st.high_water = st.high_water.max(st.threads);
            }
            start
        };
        if start {
            let inner = self.inner.clone();
            if let Err(e) = crate::threads::spawn_client(self.inner.name, move || work(&inner)) {
                let mut st = lock(&self.inner.state);
                st.threads -= 1;
                warn!(
                    error = %e,
                    workers = st.threads,
                    queued = st.queue.len(),
                    "cannot start a worker thread; the job waits for a busy one"
                );
            }
        }
        self.inner.wake.notify_one();
    }

    /// Called by a job, on its worker, when nothing is left for it but to make its next
    /// job possible (the reactor re-arming the client's connection): a job submitted from
    /// then on is left to this worker instead of starting another. Without it, a client
    /// whose next request arrives while its last one's worker is still returning would
    /// start a worker per such race.
    pub fn ending(&self) {
        if !ENDING.with(|e| e.replace(true)) {
            lock(&self.inner.state).ending += 1;
        }
    }

    /// Lets every worker exit once the queue is empty (jobs already queued still run).
    pub fn stop(&self) {
        lock(&self.inner.state).stopping = true;
        self.inner.wake.notify_all();
    }

    /// How many workers there are and what they do, now.
    pub fn counts(&self) -> PoolCounts {
        let st = lock(&self.inner.state);
        PoolCounts {
            threads: st.threads,
            idle: st.idle,
            high_water: st.high_water,
            queued: st.queue.len(),
        }
    }
}

thread_local! {
    /// Whether the job running on this worker has called [`Pool::ending`].
    static ENDING: Cell<bool> = const { Cell::new(false) };
}

fn work<J>(inner: &Inner<J>) {
    loop {
        let job = {
            let mut st = lock(&inner.state);
            if ENDING.with(|e| e.replace(false)) {
                st.ending -= 1;
            }
            loop {
                if let Some(j) = st.queue.pop_front() {
                    break j;
                }
                if st.stopping {
                    st.threads -= 1;
                    return;
                }
                st.idle += 1;
                let (guard, waited) = wait_timeout(&inner.wake, st, IDLE_EXIT);
                st = guard;
                st.idle -= 1;
                if waited.timed_out() && st.queue.is_empty() && st.threads > KEEP_THREADS {
                    st.threads -= 1;
                    return;
                }
            }
        };
        let guard = AbortOnUnwind(inner.name);
        (inner.run)(job);
        std::mem::forget(guard);
    }
}

/// Dropped only when a job unwinds (a finished job forgets it): aborts the process.
struct AbortOnUnwind(&'static str);

impl Drop for AbortOnUnwind {
    fn drop(&mut self) {
        eprintln!(
            "{}: a job panicked (reported above); stopping the process, since the state \
             it was changing may be half updated",
            self.0
        );
        std::process::abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::mpsc;

    #[test]
    fn runs_every_job_and_never_exceeds_its_bound() {
        let running = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let (done_tx, done_rx) = mpsc::channel();
        let done_tx = Mutex::new(done_tx);
        let (r, m) = (running.clone(), most.clone());
        let pool = Pool::new("test-worker", 3, move |n: u32| {
            let now = r.fetch_add(1, Ordering::SeqCst) + 1;
            m.fetch_max(now, Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(20));
            r.fetch_sub(1, Ordering::SeqCst);
            let _ = lock(&done_tx).send(n);
        });
        for n in 0..20 {
            pool.submit(n);
        }
        let mut seen: Vec<u32> = (0..20)
            .map(|_| {
                done_rx
                    .recv_timeout(Duration::from_secs(10))
                    .expect("job ran")
            })
            .collect();
        seen.sort_unstable();
        assert_eq!(seen, (0..20).collect::<Vec<_>>());
        assert_eq!(
            most.load(Ordering::SeqCst),
            3,
            "three jobs ran at once, never more"
        );
        let c = pool.counts();
        assert_eq!((c.threads, c.high_water, c.queued), (3, 3, 0));
    }

    /// Set for the child test process of `a_panicking_job_stops_the_process`.
    const CHILD_ENV: &str = "LOCKD_POOL_PANIC_CHILD";

    /// Run only as a child of the test below (a plain run returns at once): a job panics
    /// on a worker; the process must die before the next job runs.
    #[test]
    fn child_panicking_job() {
        if std::env::var_os(CHILD_ENV).is_none() {
            return;
        }
        let (tx, rx) = mpsc::channel();
        let tx = Mutex::new(tx);
        let pool = Pool::new("test-worker", 1, move |n: u32| {
            if n == 0 {
                panic!("job 0 panics on purpose");
            }
            let _ = lock(&tx).send(n);
        });
        pool.submit(0);
        pool.submit(1);
        if rx.recv_timeout(Duration::from_secs(10)) == Ok(1) {
            // Exit 0 with this marker: the parent sees the pool went on.
            println!("POOL WENT ON AFTER A PANIC");
        }
    }

    /// A panic in a job ends the process (SIGABRT) instead of the pool serving on with
    /// whatever the job left half done.
    #[test]
    fn a_panicking_job_stops_the_process() {
        use std::os::unix::process::ExitStatusExt;
        let out = std::process::Command::new(std::env::current_exe().expect("test binary"))
            .args(["--exact", "pool::tests::child_panicking_job", "--nocapture"])
            .env(CHILD_ENV, "1")
            .output()
            .expect("run the child test");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !stdout.contains("POOL WENT ON"),
            "the pool ran a job after a panic: {stdout}"
        );
        assert_eq!(
            out.status.signal(),
            Some(libc::SIGABRT),
            "status {:?}; stdout:\n{stdout}\nstderr:\n{stderr}",
            out.status
        );
        assert!(stderr.contains("job 0 panics on purpose"), "{stderr}");
        assert!(stderr.contains("stopping the process"), "{stderr}");
    }

    #[test]
    fn stopped_workers_exit_after_the_queue_drains() {
        let (tx, rx) = mpsc::channel();
        let tx = Mutex::new(tx);
        let pool = Pool::new("test-worker", 2, move |n: u32| {
            std::thread::sleep(Duration::from_millis(10));
            let _ = lock(&tx).send(n);
        });
        for n in 0..4 {
            pool.submit(n);
        }
        pool.stop();
        for _ in 0..4 {
            rx.recv_timeout(Duration::from_secs(10))
                .expect("queued job ran");
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while pool.counts().threads != 0 {
            assert!(std::time::Instant::now() < deadline, "workers did not exit");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn idle_workers_are_reused_not_multiplied() {
        let (tx, rx) = mpsc::channel();
        let tx = Mutex::new(tx);
        let pool = Pool::new("test-worker", 8, move |n: u32| {
            let _ = lock(&tx).send(n);
        });
        for n in 0..50 {
            pool.submit(n);
            assert_eq!(rx.recv_timeout(Duration::from_secs(10)), Ok(n));
            // The worker goes back to waiting before the next job is submitted.
            while pool.counts().idle == 0 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        assert_eq!(
            pool.counts().high_water,
            1,
            "one job at a time needs one worker"
        );
    }

    /// A job that re-arms its own successor (as a worker re-arms a client's connection)
    /// and says so first leaves that successor to its own worker: one worker serves a
    /// chain of 200 jobs however the threads are scheduled.
    #[test]
    fn a_job_that_says_it_is_ending_keeps_its_successor() {
        let pool: Arc<std::sync::OnceLock<Pool<u32>>> = Arc::new(std::sync::OnceLock::new());
        let (tx, rx) = mpsc::channel();
        let tx = Mutex::new(tx);
        let p = pool.clone();
        let _ = pool.set(Pool::new("test-worker", 8, move |n: u32| {
            let pool = p.get().expect("pool set");
            if n < 200 {
                pool.ending();
                pool.submit(n + 1);
                // The successor is queued while this worker is still busy.
                std::thread::sleep(Duration::from_micros(200));
            } else {
                let _ = lock(&tx).send(n);
            }
        }));
        let pool = pool.get().unwrap();
        pool.submit(0);
        assert_eq!(rx.recv_timeout(Duration::from_secs(30)), Ok(200));
        assert_eq!(
            pool.counts().high_water,
            1,
            "a chain of jobs needs one worker"
        );
        pool.stop();
    }
}
