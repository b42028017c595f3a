//! The only `unsafe` of the system-test crate: reaping orphans as a namespace's PID 1.
#![allow(unsafe_code)]

/// Waits for any child to exit; returns its pid, or None when there is no child.
pub fn reap_any_child() -> Option<i32> {
    let mut status: libc::c_int = 0;
    // SAFETY: waitpid writes one c_int through a pointer to a live local.
    let pid = unsafe { libc::waitpid(-1, &mut status, 0) };
    (pid > 0).then_some(pid)
}
