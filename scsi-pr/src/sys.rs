//! The only unsafe code of the crate: the SG_IO ioctl (Linux `scsi/sg.h`, interface 'S'),
//! which sends one CDB to a SCSI device and returns its status and sense data, and the
//! block layer's persistent-reservation ioctls (Linux `linux/pr.h`, interface 'p':
//! IOC_PR_REGISTER … IOC_PR_CLEAR, and IOC_PR_READ_KEYS / IOC_PR_READ_RESERVATION since
//! Linux 6.19), which the kernel turns into SCSI, NVMe or dm-multipath commands itself.
//!
//! Invariant: every pointer handed to the kernel (CDB, data buffer, sense buffer, key
//! array) points into a slice borrowed for the whole call, with its true length; nothing
//! outlives it.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// `struct sg_io_hdr` of `<scsi/sg.h>`.
#[repr(C)]
#[derive(Debug)]
struct SgIoHdr {
    interface_id: libc::c_int,
    dxfer_direction: libc::c_int,
    cmd_len: libc::c_uchar,
    mx_sb_len: libc::c_uchar,
    iovec_count: libc::c_ushort,
    dxfer_len: libc::c_uint,
    dxferp: *mut libc::c_void,
    cmdp: *const libc::c_uchar,
    sbp: *mut libc::c_uchar,
    timeout: libc::c_uint,
    flags: libc::c_uint,
    pack_id: libc::c_int,
    usr_ptr: *mut libc::c_void,
    status: libc::c_uchar,
    masked_status: libc::c_uchar,
    msg_status: libc::c_uchar,
    sb_len_wr: libc::c_uchar,
    host_status: libc::c_ushort,
    driver_status: libc::c_ushort,
    resid: libc::c_int,
    duration: libc::c_uint,
    info: libc::c_uint,
}

const SG_IO: libc::c_ulong = 0x2285;
const SG_DXFER_NONE: libc::c_int = -1;
const SG_DXFER_TO_DEV: libc::c_int = -2;
const SG_DXFER_FROM_DEV: libc::c_int = -3;

nix::ioctl_readwrite_bad!(sg_io_raw, SG_IO, SgIoHdr);

/// The data phase of a command.
pub enum Data<'a> {
    None,
    ToDevice(&'a [u8]),
    FromDevice(&'a mut [u8]),
}

/// What the device and the kernel reported.
#[derive(Debug, Clone, Copy)]
pub struct SgResult {
    pub status: u8,
    pub host_status: u16,
    pub driver_status: u16,
    pub sense_len: usize,
    /// Bytes of the data buffer not transferred.
    pub resid_bytes: usize,
}

/// Sends `cdb` with `data` to the device of `fd`, waiting at most `timeout_ms`.
pub fn sg_io(
    fd: BorrowedFd<'_>,
    cdb: &[u8],
    data: Data<'_>,
    sense: &mut [u8],
    timeout_ms: u32,
) -> io::Result<SgResult> {
    let cmd_len =
        u8::try_from(cdb.len()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let mx_sb_len =
        u8::try_from(sense.len()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let (direction, ptr, len) = match data {
        Data::None => (SG_DXFER_NONE, std::ptr::null_mut(), 0usize),
        Data::ToDevice(b) => (SG_DXFER_TO_DEV, b.as_ptr() as *mut libc::c_void, b.len()),
        Data::FromDevice(b) => (SG_DXFER_FROM_DEV, b.as_mut_ptr().cast(), b.len()),
    };
    let dxfer_len =
        libc::c_uint::try_from(len).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let mut hdr = SgIoHdr {
        interface_id: libc::c_int::from(b'S'),
        dxfer_direction: direction,
        cmd_len,
        mx_sb_len,
        iovec_count: 0,
        dxfer_len,
        dxferp: ptr,
        cmdp: cdb.as_ptr(),
        sbp: sense.as_mut_ptr(),
        timeout: timeout_ms,
        flags: 0,
        pack_id: 0,
        usr_ptr: std::ptr::null_mut(),
        status: 0,
        masked_status: 0,
        msg_status: 0,
        sb_len_wr: 0,
        host_status: 0,
        driver_status: 0,
        resid: 0,
        duration: 0,
        info: 0,
    };
    // SAFETY: `hdr` is a correctly laid out `sg_io_hdr` (size checked by a test); its
    // pointers are the CDB (read `cmd_len` bytes), the data buffer (`dxfer_len` bytes, read
    // or written by direction; a ToDevice buffer is only read by the kernel, so casting
    // its pointer to *mut is sound) and the sense buffer (`mx_sb_len` bytes), all borrowed
    // for the whole call, which is synchronous: the kernel keeps no pointer after it
    // returns. `fd` is a valid open descriptor for the borrow.
    unsafe { sg_io_raw(fd.as_raw_fd(), &mut hdr) }.map_err(io::Error::from)?;
    Ok(SgResult {
        status: hdr.status,
        host_status: hdr.host_status,
        driver_status: hdr.driver_status,
        sense_len: usize::from(hdr.sb_len_wr).min(sense.len()),
        resid_bytes: usize::try_from(hdr.resid).unwrap_or(0).min(len),
    })
}

/// `struct pr_registration`.
#[repr(C)]
struct BlkPrRegistration {
    old_key: u64,
    new_key: u64,
    flags: u32,
    pad: u32,
}

/// `struct pr_reservation`.
#[repr(C)]
struct BlkPrReservation {
    key: u64,
    pr_type: u32,
    flags: u32,
}

/// `struct pr_preempt`.
#[repr(C)]
struct BlkPrPreempt {
    old_key: u64,
    new_key: u64,
    pr_type: u32,
    flags: u32,
}

/// `struct pr_clear`.
#[repr(C)]
struct BlkPrClear {
    key: u64,
    flags: u32,
    pad: u32,
}

/// `struct pr_read_keys`.
#[repr(C)]
struct BlkPrReadKeys {
    generation: u32,
    num_keys: u32,
    keys_ptr: u64,
}

/// `struct pr_read_reservation`.
#[repr(C)]
#[derive(Default)]
struct BlkPrReadReservation {
    key: u64,
    generation: u32,
    pr_type: u32,
}

/// `PR_FL_IGNORE_KEY`: register whatever key is registered now.
pub const BLK_PR_FL_IGNORE_KEY: u32 = 1;
/// `PR_KEYS_MAX`: the most keys IOC_PR_READ_KEYS returns.
pub const BLK_PR_KEYS_MAX: u32 = 1 << 16;

nix::ioctl_write_ptr!(blk_pr_register_raw, b'p', 200, BlkPrRegistration);
nix::ioctl_write_ptr!(blk_pr_reserve_raw, b'p', 201, BlkPrReservation);
nix::ioctl_write_ptr!(blk_pr_release_raw, b'p', 202, BlkPrReservation);
nix::ioctl_write_ptr!(blk_pr_preempt_raw, b'p', 203, BlkPrPreempt);
nix::ioctl_write_ptr!(blk_pr_preempt_abort_raw, b'p', 204, BlkPrPreempt);
nix::ioctl_write_ptr!(blk_pr_clear_raw, b'p', 205, BlkPrClear);
nix::ioctl_readwrite!(blk_pr_read_keys_raw, b'p', 206, BlkPrReadKeys);
nix::ioctl_read!(blk_pr_read_reservation_raw, b'p', 207, BlkPrReadReservation);

/// What a block PR ioctl returned: 0, or a positive `enum pr_status` (the device's
/// answer: 0x18 reservation conflict, 0x2 any other device error, 0x10000/0xe0000/0xf0000
/// path failures). A negative return is the `Err` of the functions below.
pub type BlkPrStatus = u32;

fn status(rv: nix::Result<libc::c_int>) -> io::Result<BlkPrStatus> {
    let rv = rv.map_err(io::Error::from)?;
    // A negative value comes back as Err (errno); what is left is >= 0.
    Ok(u32::try_from(rv).unwrap_or(0))
}

/// A PR OUT through the block layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlkPrOut {
    Register {
        old_key: u64,
        new_key: u64,
        ignore_existing: bool,
    },
    Reserve {
        key: u64,
        pr_type: u32,
    },
    Release {
        key: u64,
        pr_type: u32,
    },
    Preempt {
        key: u64,
        victim: u64,
        pr_type: u32,
        abort: bool,
    },
    Clear {
        key: u64,
    },
}

/// One of the `_IOW` block PR ioctls above (as nix declares them).
type WriteIoctl<T> = unsafe fn(libc::c_int, *const T) -> nix::Result<libc::c_int>;

/// Sends the `_IOW` ioctl `ioctl` with `arg` to the device of `fd`.
fn write_ioctl<T>(fd: BorrowedFd<'_>, ioctl: WriteIoctl<T>, arg: &T) -> io::Result<BlkPrStatus> {
    // SAFETY: `ioctl` is one of this module's `_IOW` block PR ioctls, each declared with
    // the `linux/pr.h` struct `T` it takes (layouts checked by a test); `arg` is borrowed
    // for the whole call and the kernel only reads it, during the call. `fd` is a valid
    // open descriptor for the borrow.
    status(unsafe { ioctl(fd.as_raw_fd(), arg) })
}

/// Sends one block PR OUT ioctl to the device of `fd`.
pub fn blk_pr_out(fd: BorrowedFd<'_>, cmd: BlkPrOut) -> io::Result<BlkPrStatus> {
    match cmd {
        BlkPrOut::Register {
            old_key,
            new_key,
            ignore_existing,
        } => {
            let arg = BlkPrRegistration {
                old_key,
                new_key,
                flags: if ignore_existing {
                    BLK_PR_FL_IGNORE_KEY
                } else {
                    0
                },
                pad: 0,
            };
            write_ioctl(fd, blk_pr_register_raw, &arg)
        }
        BlkPrOut::Reserve { key, pr_type } | BlkPrOut::Release { key, pr_type } => {
            let ioctl: WriteIoctl<BlkPrReservation> = if matches!(cmd, BlkPrOut::Reserve { .. }) {
                blk_pr_reserve_raw
            } else {
                blk_pr_release_raw
            };
            let arg = BlkPrReservation {
                key,
                pr_type,
                flags: 0,
            };
            write_ioctl(fd, ioctl, &arg)
        }
        BlkPrOut::Preempt {
            key,
            victim,
            pr_type,
            abort,
        } => {
            let arg = BlkPrPreempt {
                old_key: key,
                new_key: victim,
                pr_type,
                flags: 0,
            };
            if abort {
                write_ioctl(fd, blk_pr_preempt_abort_raw, &arg)
            } else {
                write_ioctl(fd, blk_pr_preempt_raw, &arg)
            }
        }
        BlkPrOut::Clear { key } => {
            let arg = BlkPrClear {
                key,
                flags: 0,
                pad: 0,
            };
            write_ioctl(fd, blk_pr_clear_raw, &arg)
        }
    }
}

/// IOC_PR_READ_KEYS into `keys`: returns the status, the generation and how many keys the
/// device holds (which may exceed `keys.len()`: only the first `keys.len()` are written).
pub fn blk_pr_read_keys(
    fd: BorrowedFd<'_>,
    keys: &mut [u64],
) -> io::Result<(BlkPrStatus, u32, u32)> {
    let num_keys =
        u32::try_from(keys.len()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let mut arg = BlkPrReadKeys {
        generation: 0,
        num_keys,
        keys_ptr: keys.as_mut_ptr() as u64,
    };
    // SAFETY: `arg` is a correctly laid out `struct pr_read_keys` owned by this frame;
    // `keys_ptr` points at `keys`, borrowed mutably for the whole call, and `num_keys` is
    // its true length: the kernel writes at most min(num_keys, keys held) u64s there and
    // keeps no pointer after returning. `fd` is a valid open descriptor for the borrow.
    let st = status(unsafe { blk_pr_read_keys_raw(fd.as_raw_fd(), &mut arg) })?;
    Ok((st, arg.generation, arg.num_keys))
}

/// IOC_PR_READ_RESERVATION: (status, generation, holder's key, block `enum pr_type`, 0
/// for none).
pub fn blk_pr_read_reservation(fd: BorrowedFd<'_>) -> io::Result<(BlkPrStatus, u32, u64, u32)> {
    let mut arg = BlkPrReadReservation::default();
    // SAFETY: `arg` is a correctly laid out `struct pr_read_reservation` owned by this
    // frame, written by the kernel during the call only. `fd` is valid for the borrow.
    let st = status(unsafe { blk_pr_read_reservation_raw(fd.as_raw_fd(), &mut arg) })?;
    Ok((st, arg.generation, arg.key, arg.pr_type))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_pr_structs_match_the_kernel() {
        use std::mem::size_of;
        assert_eq!(size_of::<BlkPrRegistration>(), 24);
        assert_eq!(size_of::<BlkPrReservation>(), 16);
        assert_eq!(size_of::<BlkPrPreempt>(), 24);
        assert_eq!(size_of::<BlkPrClear>(), 16);
        assert_eq!(size_of::<BlkPrReadKeys>(), 16);
        assert_eq!(size_of::<BlkPrReadReservation>(), 16);
        // _IOWR('p', 206, 16 bytes) and _IOR('p', 207, 16 bytes) as <linux/pr.h> has them.
        assert_eq!(nix::request_code_readwrite!(b'p', 206, 16), 0xc010_70ce);
        assert_eq!(nix::request_code_read!(b'p', 207, 16), 0x8010_70cf);
        assert_eq!(nix::request_code_write!(b'p', 200, 24), 0x4018_70c8);
    }

    #[test]
    fn a_regular_file_refuses_the_block_pr_ioctls() {
        let f = std::fs::File::open("/proc/self/status").unwrap();
        use std::os::fd::AsFd;
        let mut keys = [0u64; 4];
        let e = blk_pr_read_keys(f.as_fd(), &mut keys).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOTTY), "{e}");
    }

    #[test]
    fn header_layout_matches_the_kernel() {
        // x86_64 and aarch64: 88 bytes, pointers 8-aligned.
        #[cfg(target_pointer_width = "64")]
        assert_eq!(std::mem::size_of::<SgIoHdr>(), 88);
        #[cfg(target_pointer_width = "32")]
        assert_eq!(std::mem::size_of::<SgIoHdr>(), 64);
    }

    #[test]
    fn a_regular_file_refuses_sg_io() {
        let f = std::fs::File::open("/proc/self/status").unwrap();
        let mut sense = [0u8; 32];
        let cdb = [0x5e, 0, 0, 0, 0, 0, 0, 0, 8, 0];
        let mut buf = [0u8; 8];
        use std::os::fd::AsFd;
        let e = sg_io(
            f.as_fd(),
            &cdb,
            Data::FromDevice(&mut buf),
            &mut sense,
            1000,
        )
        .unwrap_err();
        assert!(
            matches!(e.raw_os_error(), Some(libc::ENOTTY) | Some(libc::EINVAL)),
            "{e}"
        );
    }
}
