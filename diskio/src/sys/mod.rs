//! The only module of lockd-diskio that may use `unsafe`: the BLKSSZGET ioctl,
//! CLOCK_MONOTONIC, and the io_uring engine ([`uring`]). Every unsafe block has a SAFETY
//! comment.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

pub(crate) mod uring;

/// CLOCK_MONOTONIC now.
fn monotonic_now() -> libc::timespec {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec through a pointer to a live local.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    assert_eq!(rc, 0, "CLOCK_MONOTONIC is always available on Linux");
    ts
}

/// Whole seconds of CLOCK_MONOTONIC, the time base of every on-disk timestamp.
pub fn monotime() -> u64 {
    u64::try_from(monotonic_now().tv_sec).unwrap_or(0)
}

/// Milliseconds of CLOCK_MONOTONIC, for latency measurements and lease-core's clock.
pub fn monotime_ms() -> u64 {
    let ts = monotonic_now();
    u64::try_from(ts.tv_sec).unwrap_or(0) * 1000
        + u64::try_from(ts.tv_nsec).unwrap_or(0) / 1_000_000
}

/// Logical sector size of a block device (`BLKSSZGET`).
pub(crate) fn block_logical_sector_size(file: &File) -> io::Result<u32> {
    let mut size: libc::c_int = 0;
    // SAFETY: BLKSSZGET writes one c_int through a pointer to a live, aligned local; the
    // fd is owned by `file` and stays open for the call.
    let rc = unsafe {
        libc::ioctl(
            file.as_raw_fd(),
            libc::BLKSSZGET,
            &mut size as *mut libc::c_int,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    u32::try_from(size).map_err(|_| io::Error::other("negative sector size"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monotonic_clock_agrees_with_itself() {
        let s = monotime();
        let ms = monotime_ms();
        assert!(ms / 1000 >= s && ms / 1000 <= s + 1, "{s} s vs {ms} ms");
    }

    #[test]
    fn blksszget_on_a_regular_file_fails() {
        let f = File::open("/proc/self/stat").unwrap();
        assert!(block_logical_sector_size(&f).is_err());
    }
}
