//! Locking that stops the daemon on a poisoned mutex.
//!
//! A poisoned mutex means a thread panicked while holding it, perhaps in the middle of a
//! transition, so the data it guards cannot be trusted: every lock and condition-variable
//! wait in the daemon goes through [`lock`], [`wait`] and [`wait_timeout`], which panic
//! instead of recovering the data, and a panic stops the process (`panic = "abort"` in
//! release builds; the hook `crate::run` installs otherwise). This module depends on
//! nothing else in the crate.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// Locks a mutex. A poisoned mutex means a thread panicked while holding it, possibly in
/// the middle of a transition, so the data it guards cannot be trusted: this panics
/// rather than recover it, and a panic stops the daemon (`panic = "abort"` in release,
/// the hook [`crate::run`] installs, and the pool's worker abort otherwise).
pub fn lock<L: Lock + ?Sized>(m: &L) -> L::Guard<'_> {
    m.lock_or_stop()
}

/// A lock [`lock`] takes: a plain mutex, or the tables' (`crate::tables::CoreLock`,
/// whose guard checks the tables' invariants in debug builds as it lets go).
pub trait Lock {
    type Guard<'a>
    where
        Self: 'a;
    fn lock_or_stop(&self) -> Self::Guard<'_>;
}

impl<T: ?Sized> Lock for Mutex<T> {
    type Guard<'a>
        = MutexGuard<'a, T>
    where
        T: 'a;
    fn lock_or_stop(&self) -> MutexGuard<'_, T> {
        match self.lock() {
            Ok(g) => g,
            Err(_) => poisoned(),
        }
    }
}

impl<L: Lock + ?Sized> Lock for Arc<L> {
    type Guard<'a>
        = L::Guard<'a>
    where
        L: 'a;
    fn lock_or_stop(&self) -> L::Guard<'_> {
        L::lock_or_stop(self)
    }
}

/// A guard a condition variable can wait with: it gives up its mutex guard for the wait
/// and is made again from the one the wait returns.
pub trait WaitGuard<'a, T: 'a>: Sized {
    fn into_mutex_guard(self) -> MutexGuard<'a, T>;
    fn from_mutex_guard(g: MutexGuard<'a, T>) -> Self;
}

impl<'a, T: 'a> WaitGuard<'a, T> for MutexGuard<'a, T> {
    fn into_mutex_guard(self) -> MutexGuard<'a, T> {
        self
    }
    fn from_mutex_guard(g: MutexGuard<'a, T>) -> Self {
        g
    }
}

/// Waits on `cond` with `guard` held; panics on a poisoned mutex, as [`lock`].
pub fn wait<'a, T: 'a, G: WaitGuard<'a, T>>(cond: &Condvar, guard: G) -> G {
    match cond.wait(guard.into_mutex_guard()) {
        Ok(g) => G::from_mutex_guard(g),
        Err(_) => poisoned(),
    }
}

/// Waits on `cond` with `guard` held for at most `dur`; panics on a poisoned mutex, as
/// [`lock`].
pub fn wait_timeout<'a, T: 'a, G: WaitGuard<'a, T>>(
    cond: &Condvar,
    guard: G,
    dur: std::time::Duration,
) -> (G, std::sync::WaitTimeoutResult) {
    match cond.wait_timeout(guard.into_mutex_guard(), dur) {
        Ok((g, r)) => (G::from_mutex_guard(g), r),
        Err(_) => poisoned(),
    }
}

#[cold]
pub(crate) fn poisoned() -> ! {
    panic!("a lock is poisoned: a thread panicked while holding it, mid-transition; stopping")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[should_panic(expected = "a lock is poisoned")]
    fn a_poisoned_lock_panics_instead_of_recovering() {
        let m = std::sync::Arc::new(Mutex::new(0u32));
        let m2 = m.clone();
        let _ = std::thread::spawn(move || {
            let mut g = lock(&m2);
            *g = 1; // half of a two-field transition
            panic!("mid-transition on purpose");
        })
        .join();
        assert!(m.is_poisoned());
        drop(lock(&m));
    }
}
