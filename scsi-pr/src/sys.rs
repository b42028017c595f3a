//! The only unsafe code of the crate: the SG_IO ioctl (Linux `scsi/sg.h`, interface 'S'),
//! which sends one CDB to a SCSI device and returns its status and sense data.
//!
//! Invariant: every pointer handed to the kernel (CDB, data buffer, sense buffer) points
//! into a slice borrowed for the whole call, with its true length; nothing outlives it.
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

#[cfg(test)]
mod tests {
    use super::*;

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
