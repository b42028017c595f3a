//! A device opened for persistent-reservation commands, the commands themselves, a
//! read-only probe, and a preempt confirmed by reading the keys back.
//!
//! Two interfaces reach the device ([`Interface`]), chosen per device when it is opened:
//! * the block layer's PR ioctls, when the kernel has IOC_PR_READ_KEYS (Linux 6.19+): the
//!   kernel builds the SCSI or NVMe command itself, and a dm-multipath map sends each
//!   command down every path (a key is registered on each path's I_T nexus, and a
//!   preempt removes it from all), which SG_IO on a map cannot do (it reaches one path);
//! * SG_IO, for SCSI disks on older kernels (Debian 12's 6.1, Debian 13's 6.12).
//!
//! Invariants:
//! * the probe and the READ commands send PERSISTENT RESERVE IN (or the block layer's
//!   read ioctls) only; every descriptor is opened read-only (neither interface needs
//!   write access for root, and no udev re-probe follows);
//! * the block interface is used only when IOC_PR_READ_KEYS works on the device: a fence
//!   is confirmed by reading the keys back, on the interface that sent it;
//! * Linux sets APTPL in every REGISTER it sends for a SCSI disk, and some targets (tgt)
//!   refuse it: on a SCSI disk (or a device-mapper map over one disk) that takes SG_IO,
//!   a REGISTER the device refuses through the block interface (ILLEGAL REQUEST, which
//!   sd reports as EINVAL, or another device error; not a reservation conflict, not a
//!   path failure) is sent again through SG_IO, and the device stays on SG_IO from then
//!   on ([`PrDevice::interface`] says which is in use);
//! * a block command's time is bounded by the kernel's own timeouts (sd's, NVMe's
//!   io_timeout and a fabric's ctrl_loss_tmo), not by [`PrDevice::set_timeout_ms`], which
//!   bounds SG_IO commands only;
//! * UNIT ATTENTION (the device reporting a reset or a preempt before running the
//!   command) is answered by sending the same command again, at most
//!   [`UNIT_ATTENTION_RETRIES`] times; every other error is returned as it is;
//! * a preempt counts as done only when READ KEYS, read after it, no longer lists the
//!   victim's key ([`PrDevice::preempt_confirmed`]).

use std::collections::BTreeSet;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::cdb::{in_cdb, out_cdb, out_params, InAction, OutAction, OutParams, PrType};
use crate::error::PrError;
use crate::parse::{self, Capabilities, Keys, Reservation, ReservationState};
use crate::sense::{verdict, Completion};
use crate::sys::{
    blk_pr_out, blk_pr_read_keys, blk_pr_read_reservation, sg_io, BlkPrOut, BlkPrStatus, Data,
    BLK_PR_KEYS_MAX,
};

/// How long one command may take before the kernel aborts it.
pub const DEFAULT_TIMEOUT_MS: u32 = 10_000;
/// How many times a command is sent again after UNIT ATTENTION.
pub const UNIT_ATTENTION_RETRIES: u32 = 3;
/// READ KEYS' first allocation: room for 256 keys.
const READ_KEYS_FIRST_BYTES: u16 = 8 + 8 * 256;
const SENSE_BYTES: usize = 64;

/// How commands reach a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interface {
    /// The block layer's PR ioctls (IOC_PR_*), with IOC_PR_READ_KEYS.
    Block,
    /// SCSI commands through SG_IO.
    SgIo,
}

impl Interface {
    pub fn name(self) -> &'static str {
        match self {
            Interface::Block => "block-pr",
            Interface::SgIo => "sg-io",
        }
    }
}

/// Which interface [`PrDevice::open_with`] may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InterfaceChoice {
    /// The block interface when IOC_PR_READ_KEYS works on the device, else SG_IO.
    Auto,
    Block,
    SgIo,
}

impl std::str::FromStr for InterfaceChoice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(InterfaceChoice::Auto),
            "block-pr" | "block" => Ok(InterfaceChoice::Block),
            "sg-io" | "sgio" => Ok(InterfaceChoice::SgIo),
            _ => Err(format!(
                "unknown PR interface {s:?} (auto, block-pr or sg-io)"
            )),
        }
    }
}

pub struct PrDevice {
    file: File,
    path: PathBuf,
    timeout_ms: u32,
    /// Set when the device uses the block interface (cleared once, by the APTPL fallback).
    block: AtomicBool,
    /// Whether a REGISTER the device refuses through the block interface is sent again
    /// through SG_IO (a device answering SG_IO whose SG_IO reaches every path: a SCSI disk,
    /// or a device-mapper map over one).
    register_falls_back: bool,
}

/// `PR_STS_RESERVATION_CONFLICT`, `PR_STS_IOERR` and the path failures of `linux/pr.h`.
const PR_STS_IOERR: BlkPrStatus = 0x2;
const PR_STS_RESERVATION_CONFLICT: BlkPrStatus = 0x18;
const PR_STS_PATH_FAILED: BlkPrStatus = 0x10000;
const PR_STS_RETRY_PATH_FAILURE: BlkPrStatus = 0xe0000;
const PR_STS_PATH_FAST_FAILED: BlkPrStatus = 0xf0000;

fn block_status(what: &'static str, status: BlkPrStatus) -> Result<(), PrError> {
    let path_failure = match status {
        0 => return Ok(()),
        PR_STS_RESERVATION_CONFLICT => return Err(PrError::ReservationConflict { what }),
        PR_STS_PATH_FAILED => Some("path failed"),
        PR_STS_RETRY_PATH_FAILURE => Some("path failure, retriable"),
        PR_STS_PATH_FAST_FAILED => Some("path fast-failed"),
        _ => None,
    };
    Err(match path_failure {
        Some(name) => PrError::BlockPath { what, status, name },
        None => PrError::BlockStatus {
            what,
            status,
            name: if status == PR_STS_IOERR {
                "device error"
            } else {
                "unknown status"
            },
        },
    })
}

/// The block PR ioctl for a PR OUT command (a Reserve, Release or Preempt without a type
/// gets WE-RO: the block ioctls always carry one).
fn block_command(action: OutAction, pr_type: Option<PrType>, params: OutParams) -> BlkPrOut {
    let t = pr_type
        .unwrap_or(PrType::WriteExclusiveRegistrantsOnly)
        .block_code();
    let key = params.reservation_key;
    let other = params.service_action_key;
    match action {
        OutAction::Register | OutAction::RegisterAndIgnoreExistingKey => BlkPrOut::Register {
            old_key: key,
            new_key: other,
            ignore_existing: action == OutAction::RegisterAndIgnoreExistingKey,
        },
        OutAction::Reserve => BlkPrOut::Reserve { key, pr_type: t },
        OutAction::Release => BlkPrOut::Release { key, pr_type: t },
        OutAction::Clear => BlkPrOut::Clear { key },
        OutAction::Preempt | OutAction::PreemptAndAbort => BlkPrOut::Preempt {
            key,
            victim: other,
            pr_type: t,
            abort: action == OutAction::PreemptAndAbort,
        },
    }
}

/// `file`'s node in sysfs (`/sys/dev/block/MAJOR:MINOR`); None for what is not a block
/// device.
fn sysfs_node(file: &File) -> Option<PathBuf> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let meta = file.metadata().ok()?;
    if !meta.file_type().is_block_device() {
        return None;
    }
    let (major, minor) = (libc::major(meta.rdev()), libc::minor(meta.rdev()));
    Some(PathBuf::from(format!("/sys/dev/block/{major}:{minor}"))).filter(|n| n.exists())
}

/// Whether `file` is a device-mapper map (its sysfs node has a `dm` directory).
fn is_device_mapper(file: &File) -> bool {
    sysfs_node(file).is_some_and(|n| n.join("dm").exists())
}

/// Whether SG_IO on `file` reaches every path the block PR ioctls would: not a
/// device-mapper map, or a map over one device (a linear map over a disk; SG_IO passes
/// through it), not over several (a multipath map's SG_IO reaches one path).
fn sg_io_reaches_every_path(file: &File) -> bool {
    let Some(node) = sysfs_node(file) else {
        return false;
    };
    if !node.join("dm").exists() {
        return true;
    }
    std::fs::read_dir(node.join("slaves")).is_ok_and(|d| d.count() == 1)
}

/// [`PrDevice::logical_units`] of the sysfs node `dir`, into `out`.
fn units_of_sysfs_dir(dir: &Path, out: &mut BTreeSet<String>, depth: usize) {
    const MAX_DEPTH: usize = 8;
    if depth > MAX_DEPTH {
        return;
    }
    if let Ok(slaves) = std::fs::read_dir(dir.join("slaves")) {
        let mut any = false;
        for slave in slaves.flatten() {
            any = true;
            if let Ok(d) = std::fs::canonicalize(slave.path()) {
                units_of_sysfs_dir(&d, out, depth + 1);
            }
        }
        if any {
            return;
        }
    }
    let disk = match dir.parent() {
        Some(parent) if dir.join("partition").exists() => parent,
        _ => dir,
    };
    let wwid = ["wwid", "device/wwid"]
        .iter()
        .find_map(|f| std::fs::read_to_string(disk.join(f)).ok())
        .map(|w| w.trim().to_string())
        .filter(|w| !w.is_empty());
    match wwid {
        Some(w) => {
            out.insert(format!("wwid:{w}"));
        }
        None => {
            if let Ok(dev) = std::fs::read_to_string(disk.join("dev")) {
                out.insert(format!("dev:{}", dev.trim()));
            }
        }
    }
}

/// Whether `file` is an NVMe namespace (its sysfs node has the namespace's `nsid`).
fn is_nvme_namespace(file: &File) -> bool {
    sysfs_node(file).is_some_and(|n| n.join("nsid").exists())
}

impl PrDevice {
    /// Opens `path` with [`InterfaceChoice::Auto`].
    pub fn open(path: &Path) -> Result<PrDevice, PrError> {
        PrDevice::open_with(path, InterfaceChoice::Auto)
    }

    /// Opens `path` and chooses its interface, asking the device only read-only questions
    /// (one READ KEYS on each interface tried). Always read-only and non-blocking, as
    /// `sg_persist` does: the kernel lets a process with CAP_SYS_RAWIO send PR OUT through
    /// SG_IO on such a descriptor (and CAP_SYS_ADMIN the block PR ioctls), and closing a
    /// block device opened for writing makes udev re-probe it (a "change" event). Without
    /// those capabilities the kernel refuses PR OUT on it (EPERM), reported as
    /// [`PrError::NeedsRawIo`].
    pub fn open_with(path: &Path, choice: InterfaceChoice) -> Result<PrDevice, PrError> {
        use std::os::unix::fs::OpenOptionsExt;
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)
            .map_err(|source| PrError::Open {
                path: path.to_path_buf(),
                source,
            })?;
        let mut dev = PrDevice {
            file,
            path: path.to_path_buf(),
            timeout_ms: DEFAULT_TIMEOUT_MS,
            block: AtomicBool::new(false),
            register_falls_back: false,
        };
        let block_err = match choice {
            InterfaceChoice::SgIo => return Ok(dev),
            InterfaceChoice::Block | InterfaceChoice::Auto => {
                blk_pr_read_keys(dev.file.as_fd(), &mut []).err()
            }
        };
        match (choice, block_err) {
            (_, None) => {
                dev.block.store(true, Ordering::SeqCst);
                if sg_io_reaches_every_path(&dev.file) {
                    dev.register_falls_back = dev.sg_io_read_keys().is_ok();
                }
                Ok(dev)
            }
            (InterfaceChoice::Block, Some(e)) => Err(dev.block_ioctl_error("READ KEYS", e)),
            (_, Some(block)) => match dev.sg_io_read_keys() {
                Ok(_) => Ok(dev),
                Err(PrError::NotScsi { source: sg_io, .. }) => {
                    // A block device with PR ioctls but no IOC_PR_READ_KEYS (ENOTTY from
                    // the read, on a kernel before 6.19) that SG_IO cannot reach.
                    if block.raw_os_error() == Some(libc::ENOTTY)
                        && (is_nvme_namespace(&dev.file) || is_device_mapper(&dev.file))
                    {
                        Err(PrError::NoReadKeys {
                            path: dev.path.clone(),
                            source: block,
                        })
                    } else {
                        Err(PrError::NoPrInterface {
                            path: dev.path.clone(),
                            block,
                            sg_io,
                        })
                    }
                }
                // SG_IO reached the device and it answered with an error: that answer
                // is the one to report (permission, a transport failure, …).
                Err(_) => Ok(dev),
            },
        }
    }

    /// The interface commands use now.
    pub fn interface(&self) -> Interface {
        if self.block.load(Ordering::SeqCst) {
            Interface::Block
        } else {
            Interface::SgIo
        }
    }

    /// The logical units the device is made of, from sysfs: device-mapper maps are
    /// followed down their `slaves`, a partition to its disk, and each whole disk is named
    /// by its `wwid` (an NVMe namespace's, or a SCSI disk's from VPD page 0x83, both
    /// unique per logical unit), or by its device number where sysfs has none (two paths
    /// to one LU then look different). Empty when the file is not a block device.
    pub fn logical_units(&self) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        if let Some(node) = sysfs_node(&self.file).and_then(|n| std::fs::canonicalize(n).ok()) {
            units_of_sysfs_dir(&node, &mut out, 0);
        }
        out
    }

    fn sg_io_read_keys(&self) -> Result<Keys, PrError> {
        parse::read_keys(&self.pr_in(InAction::ReadKeys, 8)?)
    }

    /// The error of block PR ioctl `what` that failed with `e` (an errno).
    fn block_ioctl_error(&self, what: &'static str, e: io::Error) -> PrError {
        let path = self.path.display();
        match e.raw_os_error() {
            Some(libc::EPERM) | Some(libc::EACCES) => PrError::NeedsRawIo {
                path: self.path.clone(),
                source: e,
            },
            Some(libc::ENOTTY) | Some(libc::EOPNOTSUPP) | Some(515) => PrError::NotSupported {
                what,
                reason: format!("{path} has no block PR ioctl for it: {e}"),
            },
            // A driver without the ioctl (loop), or sd's answer to ILLEGAL REQUEST
            // (INVALID FIELD IN CDB or PARAMETER LIST): the errno cannot tell which.
            Some(libc::EINVAL) => PrError::NotSupported {
                what,
                reason: format!(
                    "{path} rejected it as invalid: {e}; no block PR ioctl there, or the \
                     target refused the command (see the kernel log)"
                ),
            },
            _ => PrError::BlockIo(e),
        }
    }

    fn block_out(&self, what: &'static str, cmd: BlkPrOut) -> Result<(), PrError> {
        let st = blk_pr_out(self.file.as_fd(), cmd).map_err(|e| self.block_ioctl_error(what, e))?;
        block_status(what, st)
    }

    /// Sets how long each command may take (the kernel aborts it then); at least 1 ms.
    pub fn set_timeout_ms(&mut self, timeout_ms: u32) {
        self.timeout_ms = timeout_ms.max(1);
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Sends one command; returns the bytes the device transferred into `buf` (0 for
    /// commands without a data-in phase).
    fn command(
        &self,
        what: &'static str,
        cdb: &[u8],
        mut buf: Option<&mut [u8]>,
        out: Option<&[u8]>,
    ) -> Result<usize, PrError> {
        retry_unit_attention(|| {
            let mut sense = [0u8; SENSE_BYTES];
            let data = match (&mut buf, out) {
                (Some(b), _) => Data::FromDevice(b),
                (None, Some(o)) => Data::ToDevice(o),
                (None, None) => Data::None,
            };
            let len = match &data {
                Data::FromDevice(b) => b.len(),
                _ => 0,
            };
            let r = sg_io(self.file.as_fd(), cdb, data, &mut sense, self.timeout_ms)
                .map_err(|e| self.ioctl_error(e))?;
            let done = Completion {
                status: r.status,
                host_status: r.host_status,
                driver_status: r.driver_status,
                sense: &sense[..r.sense_len],
            };
            verdict(what, done).map(|()| len - r.resid_bytes)
        })
    }

    fn ioctl_error(&self, e: io::Error) -> PrError {
        // ENOTTY: no SG_IO on this file (regular file, loop, NVMe, …); EINVAL: a driver
        // that rejects the ioctl; ENOIOCTLCMD (515) leaks from some drivers; EOPNOTSUPP.
        match e.raw_os_error() {
            Some(libc::ENOTTY) | Some(libc::EINVAL) | Some(libc::EOPNOTSUPP) | Some(515) => {
                PrError::NotScsi {
                    path: self.path.clone(),
                    source: e,
                }
            }
            Some(libc::EPERM) | Some(libc::EACCES) => PrError::NeedsRawIo {
                path: self.path.clone(),
                source: e,
            },
            _ => PrError::Io(e),
        }
    }

    fn pr_in(&self, action: InAction, alloc_bytes: u16) -> Result<Vec<u8>, PrError> {
        let mut buf = vec![0u8; usize::from(alloc_bytes)];
        let n = self.command(
            action.name(),
            &in_cdb(action, alloc_bytes),
            Some(&mut buf),
            None,
        )?;
        buf.truncate(n);
        Ok(buf)
    }

    /// READ KEYS, asking again with a buffer as large as the device said it needs (up to
    /// the 64 KiB the CDB can ask for).
    pub fn read_keys(&self) -> Result<Keys, PrError> {
        if self.interface() == Interface::Block {
            return self.block_read_keys();
        }
        let keys = parse::read_keys(&self.pr_in(InAction::ReadKeys, READ_KEYS_FIRST_BYTES)?)?;
        if !keys.truncated {
            return Ok(keys);
        }
        let want = u16::try_from(keys.reported_len_bytes.saturating_add(8)).unwrap_or(u16::MAX);
        parse::read_keys(&self.pr_in(InAction::ReadKeys, want)?)
    }

    pub fn read_reservation(&self) -> Result<ReservationState, PrError> {
        if self.interface() == Interface::Block {
            let (st, generation, key, block_type) = blk_pr_read_reservation(self.file.as_fd())
                .map_err(|e| self.block_ioctl_error("READ RESERVATION", e))?;
            block_status("READ RESERVATION", st)?;
            // With no reservation sd leaves the generation 0 (it reads it only with a
            // reservation): the generation is then READ KEYS', asked right after.
            let generation = if block_type == 0 && generation == 0 {
                self.block_read_keys()?.generation
            } else {
                generation
            };
            let reservation = (block_type != 0).then(|| {
                let pr_type = PrType::from_block_code(block_type);
                Reservation {
                    key,
                    scope: 0,
                    type_code: pr_type.map_or(0, PrType::code),
                    pr_type,
                }
            });
            return Ok(ReservationState {
                generation,
                reservation,
            });
        }
        parse::read_reservation(&self.pr_in(InAction::ReadReservation, 24)?)
    }

    /// REPORT CAPABILITIES (SG_IO only: the block interface has no such question).
    pub fn report_capabilities(&self) -> Result<Capabilities, PrError> {
        if self.interface() == Interface::Block {
            return Err(PrError::NotSupported {
                what: "REPORT CAPABILITIES",
                reason: "not asked through the block PR ioctls".into(),
            });
        }
        parse::report_capabilities(&self.pr_in(InAction::ReportCapabilities, 8)?)
    }

    /// Any PR OUT command (needs CAP_SYS_RAWIO, or CAP_SYS_ADMIN for the block ioctls).
    /// Through the block interface a Reserve, Release or Preempt needs a type (WERO when
    /// none is given).
    pub fn pr_out(
        &self,
        action: OutAction,
        pr_type: Option<PrType>,
        params: OutParams,
    ) -> Result<(), PrError> {
        if self.interface() == Interface::Block {
            let cmd = block_command(action, pr_type, params);
            let r = self.block_out(action.name(), cmd);
            let registering = matches!(
                action,
                OutAction::Register | OutAction::RegisterAndIgnoreExistingKey
            );
            if registering && self.register_falls_back {
                // sd reports ILLEGAL REQUEST (INVALID FIELD IN CDB or PARAMETER LIST) as
                // EINVAL, any other check condition as PR_STS_IOERR.
                if let Err(PrError::BlockStatus { .. } | PrError::NotSupported { .. }) = &r {
                    // Linux set APTPL in that REGISTER; a target that refuses APTPL takes
                    // the same command from SG_IO, which leaves it clear. Sending it twice
                    // is safe: had the first landed, a plain REGISTER naming the old key
                    // now meets RESERVATION CONFLICT (the join decides again from a fresh
                    // key list), and REGISTER AND IGNORE EXISTING KEY sets the same key.
                    // Tried on the VM bed: LOCKD_VMBED_GUEST_KERNEL=sid pr-kill-daemon.
                    let again = self.sg_io_out(action, pr_type, params);
                    if again.is_ok() {
                        self.block.store(false, Ordering::SeqCst);
                    }
                    return again;
                }
            }
            return r;
        }
        self.sg_io_out(action, pr_type, params)
    }

    fn sg_io_out(
        &self,
        action: OutAction,
        pr_type: Option<PrType>,
        params: OutParams,
    ) -> Result<(), PrError> {
        let cdb = out_cdb(action, pr_type);
        let list = out_params(params);
        self.command(action.name(), &cdb, None, Some(&list))
            .map(|_| ())
    }

    /// REGISTER: `old_key` 0 registers `new_key`; `new_key` 0 unregisters `old_key`.
    pub fn register(&self, old_key: u64, new_key: u64) -> Result<(), PrError> {
        self.pr_out(
            OutAction::Register,
            None,
            OutParams {
                reservation_key: old_key,
                service_action_key: new_key,
            },
        )
    }

    /// REGISTER AND IGNORE EXISTING KEY: registers `new_key` whatever is registered now.
    pub fn register_ignore_existing(&self, new_key: u64) -> Result<(), PrError> {
        self.pr_out(
            OutAction::RegisterAndIgnoreExistingKey,
            None,
            OutParams {
                reservation_key: 0,
                service_action_key: new_key,
            },
        )
    }

    pub fn reserve(&self, key: u64, pr_type: PrType) -> Result<(), PrError> {
        self.pr_out(OutAction::Reserve, Some(pr_type), own(key))
    }

    pub fn release(&self, key: u64, pr_type: PrType) -> Result<(), PrError> {
        self.pr_out(OutAction::Release, Some(pr_type), own(key))
    }

    /// CLEAR: removes every registration and the reservation.
    pub fn clear(&self, key: u64) -> Result<(), PrError> {
        self.pr_out(OutAction::Clear, None, own(key))
    }

    /// PREEMPT (or PREEMPT AND ABORT with `abort`) of `victim`'s registrations by the
    /// holder of `key`; when the victim holds the reservation it passes to `key` as
    /// `pr_type`.
    pub fn preempt(
        &self,
        key: u64,
        victim: u64,
        pr_type: PrType,
        abort: bool,
    ) -> Result<(), PrError> {
        let action = if abort {
            OutAction::PreemptAndAbort
        } else {
            OutAction::Preempt
        };
        self.pr_out(
            action,
            Some(pr_type),
            OutParams {
                reservation_key: key,
                service_action_key: victim,
            },
        )
    }

    /// Preempts `victim` (PREEMPT AND ABORT first when `try_abort`, then PREEMPT if the
    /// device says that is not supported), then reads the keys back: Ok only when the
    /// victim's key is gone from a complete key list.
    pub fn preempt_confirmed(
        &self,
        key: u64,
        victim: u64,
        pr_type: PrType,
        try_abort: bool,
    ) -> Result<PreemptOutcome, PrError> {
        let mut abort_refused = None;
        let mut action = OutAction::Preempt;
        if try_abort {
            match self.preempt(key, victim, pr_type, true) {
                Ok(()) => action = OutAction::PreemptAndAbort,
                // Through the block interface a refused PREEMPT AND ABORT comes back as a
                // plain device error (tgt: INVALID FIELD IN CDB, in the kernel's log).
                Err(e)
                    if matches!(
                        e,
                        PrError::NotSupported { .. } | PrError::BlockStatus { .. }
                    ) =>
                {
                    abort_refused = Some(e.to_string());
                    self.preempt(key, victim, pr_type, false)?;
                }
                Err(e) => return Err(e),
            }
        } else {
            self.preempt(key, victim, pr_type, false)?;
        }
        let keys_after = self.read_keys()?;
        if keys_after.truncated || keys_after.keys.contains(&victim) {
            return Err(PrError::PreemptNotConfirmed { victim });
        }
        Ok(PreemptOutcome {
            action,
            abort_refused,
            keys_after,
        })
    }

    fn block_read_keys(&self) -> Result<Keys, PrError> {
        let mut want = 256u32;
        loop {
            let mut keys = vec![0u64; want as usize];
            let (st, generation, held) = blk_pr_read_keys(self.file.as_fd(), &mut keys)
                .map_err(|e| self.block_ioctl_error("READ KEYS", e))?;
            block_status("READ KEYS", st)?;
            if held <= want {
                keys.truncate(held as usize);
                return Ok(Keys {
                    generation,
                    keys,
                    truncated: false,
                    reported_len_bytes: held.saturating_mul(8),
                });
            }
            if want >= BLK_PR_KEYS_MAX {
                return Ok(Keys {
                    generation,
                    keys,
                    truncated: true,
                    reported_len_bytes: held.saturating_mul(8),
                });
            }
            want = held.min(BLK_PR_KEYS_MAX);
        }
    }

    /// A read-only look at what the device supports and holds: READ KEYS, then (if that
    /// worked) READ RESERVATION and REPORT CAPABILITIES.
    pub fn probe(path: &Path) -> Probe {
        PrDevice::probe_with_timeout(path, DEFAULT_TIMEOUT_MS)
    }

    /// [`PrDevice::probe`] with each of its (at most three) commands bounded by
    /// `timeout_ms`.
    pub fn probe_with_timeout(path: &Path, timeout_ms: u32) -> Probe {
        PrDevice::probe_with(path, timeout_ms, InterfaceChoice::Auto)
    }

    /// [`PrDevice::probe_with_timeout`] on the interface `choice` allows.
    pub fn probe_with(path: &Path, timeout_ms: u32, choice: InterfaceChoice) -> Probe {
        let mut dev = match PrDevice::open_with(path, choice) {
            Ok(d) => d,
            Err(e) => {
                return Probe {
                    interface: None,
                    keys: Err(e),
                    reservation: None,
                    capabilities: None,
                }
            }
        };
        let interface = Some(dev.interface());
        dev.set_timeout_ms(timeout_ms);
        let keys = dev.read_keys();
        if keys.is_err() {
            return Probe {
                interface,
                keys,
                reservation: None,
                capabilities: None,
            };
        }
        let capabilities = match dev.interface() {
            Interface::SgIo => Some(dev.report_capabilities()),
            Interface::Block => None,
        };
        Probe {
            interface,
            keys,
            reservation: Some(dev.read_reservation()),
            capabilities,
        }
    }
}

/// Runs `send` again after UNIT ATTENTION, at most [`UNIT_ATTENTION_RETRIES`] times; any
/// other result is returned as it is.
fn retry_unit_attention<T>(mut send: impl FnMut() -> Result<T, PrError>) -> Result<T, PrError> {
    let mut attempt = 0;
    loop {
        match send() {
            Err(PrError::UnitAttention { .. }) if attempt < UNIT_ATTENTION_RETRIES => attempt += 1,
            other => return other,
        }
    }
}

fn own(key: u64) -> OutParams {
    OutParams {
        reservation_key: key,
        service_action_key: 0,
    }
}

/// What [`PrDevice::preempt_confirmed`] did.
#[derive(Debug)]
pub struct PreemptOutcome {
    /// PREEMPT or PREEMPT AND ABORT: the one the device took.
    pub action: OutAction,
    /// Why PREEMPT AND ABORT was refused, when it was tried and refused.
    pub abort_refused: Option<String>,
    /// READ KEYS after the preempt (the victim's key is not among them).
    pub keys_after: Keys,
}

/// The result of [`PrDevice::probe`].
#[derive(Debug)]
pub struct Probe {
    /// The interface chosen for the device (None when it could not be opened or neither
    /// interface reaches it).
    pub interface: Option<Interface>,
    /// READ KEYS: an error here means no PR on this device (or no way to ask).
    pub keys: Result<Keys, PrError>,
    pub reservation: Option<Result<ReservationState, PrError>>,
    /// REPORT CAPABILITIES is optional in SPC-3; "not supported" here is not fatal.
    pub capabilities: Option<Result<Capabilities, PrError>>,
}

impl Probe {
    /// Whether the device answers PERSISTENT RESERVE IN (READ KEYS).
    pub fn supported(&self) -> bool {
        self.keys.is_ok()
    }

    /// Whether Write Exclusive – Registrants Only is known to be supported: Some(true) or
    /// Some(false) from REPORT CAPABILITIES' type mask, None when the device did not say.
    pub fn write_exclusive_registrants_only(&self) -> Option<bool> {
        match &self.capabilities {
            Some(Ok(c)) => c.supports(PrType::WriteExclusiveRegistrantsOnly),
            _ => None,
        }
    }

    /// One line: supported or not and why, registrations, reservation, capabilities.
    pub fn summary(&self) -> String {
        let keys = match &self.keys {
            Err(e) => return format!("no persistent reservations: {e}"),
            Ok(k) => k,
        };
        let mut s = format!(
            "persistent reservations supported (via {}): {} key(s) registered, generation {}",
            self.interface.map_or("?", Interface::name),
            keys.keys.len(),
            keys.generation
        );
        match &self.reservation {
            Some(Ok(r)) => match &r.reservation {
                None => s.push_str(", no reservation"),
                Some(res) => s.push_str(&format!(
                    ", reservation {} by 0x{:x}",
                    res.pr_type.map_or("unknown type", PrType::short),
                    res.key
                )),
            },
            Some(Err(e)) => s.push_str(&format!(", READ RESERVATION failed: {e}")),
            None => {}
        }
        match &self.capabilities {
            Some(Ok(c)) if c.type_mask_valid => {
                let types: Vec<&str> = c.types.iter().map(|t| t.short()).collect();
                s.push_str(&format!(", types {}", types.join(",")));
                if !c.types.contains(&PrType::WriteExclusiveRegistrantsOnly) {
                    s.push_str(" (no we-ro: lockd's fencing type is missing)");
                }
            }
            Some(Ok(_)) => s.push_str(", type mask not reported"),
            Some(Err(e)) if e.is_not_supported() => {
                s.push_str(", REPORT CAPABILITIES not supported")
            }
            Some(Err(e)) => s.push_str(&format!(", REPORT CAPABILITIES failed: {e}")),
            None => {}
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ua() -> PrError {
        PrError::UnitAttention {
            what: "X",
            reason: "reservations preempted".into(),
        }
    }

    #[test]
    fn unit_attention_is_retried_a_bounded_number_of_times() {
        let mut calls = 0;
        let r = retry_unit_attention(|| {
            calls += 1;
            if calls < 3 {
                Err(ua())
            } else {
                Ok(calls)
            }
        });
        assert_eq!(r.unwrap(), 3);
        let mut calls = 0;
        let r: Result<(), PrError> = retry_unit_attention(|| {
            calls += 1;
            Err(ua())
        });
        assert!(matches!(r, Err(PrError::UnitAttention { .. })));
        assert_eq!(calls, 1 + UNIT_ATTENTION_RETRIES);
        let mut calls = 0;
        let r: Result<(), PrError> = retry_unit_attention(|| {
            calls += 1;
            Err(PrError::ReservationConflict { what: "X" })
        });
        assert!(r.unwrap_err().is_reservation_conflict());
        assert_eq!(calls, 1, "a reservation conflict is not retried");
    }

    /// (The host kernel of this project's machines has no device-mapper: maps are tried
    /// in the VM bed's guests, where every lockspace lives on one.)
    #[test]
    fn sg_io_reaches_every_path_of_a_disk_and_neither_interface_takes_a_loop_device() {
        let dir = lockd_system_tests::scratch_dir();
        let backing = dir.path().join("disk.img");
        std::fs::File::create(&backing)
            .unwrap()
            .set_len(1 << 20)
            .unwrap();
        let lo = lockd_system_tests::LoopDevice::attach(&backing, 512);
        let disk = lo.device.to_str().unwrap().to_string();
        let file = File::open(&disk).unwrap();
        assert!(sg_io_reaches_every_path(&file), "a disk");
        assert!(!is_device_mapper(&file));
        assert!(!is_nvme_namespace(&file));
        // A loop device has no wwid: its unit is its device number.
        let dev = PrDevice::open_with(Path::new(&disk), InterfaceChoice::SgIo).unwrap();
        let numbers = std::fs::read_to_string(format!(
            "/sys/class/block/{}/dev",
            disk.trim_start_matches("/dev/")
        ))
        .unwrap();
        assert_eq!(
            dev.logical_units(),
            BTreeSet::from([format!("dev:{}", numbers.trim())])
        );
        let status = File::open("/proc/self/status").unwrap();
        assert!(!sg_io_reaches_every_path(&status), "not a block device");
        assert!(sysfs_node(&status).is_none());
        let file_dev =
            PrDevice::open_with(Path::new("/proc/self/status"), InterfaceChoice::SgIo).unwrap();
        assert!(file_dev.logical_units().is_empty());
        let e = PrDevice::open(Path::new(&disk))
            .err()
            .expect("no PR on a loop device");
        assert!(e.is_not_supported(), "{e}");
        assert!(e.to_string().contains("nor the block PR ioctls"), "{e}");
        let e = PrDevice::open_with(Path::new(&disk), InterfaceChoice::Block)
            .err()
            .expect("no block PR on a loop device");
        assert!(e.is_not_supported(), "{e}");
        // Forced to SG_IO, the device opens and its first command says why.
        let dev = PrDevice::open_with(Path::new(&disk), InterfaceChoice::SgIo).unwrap();
        assert_eq!(dev.interface(), Interface::SgIo);
        assert!(dev.read_keys().unwrap_err().is_not_supported());
    }

    #[test]
    fn pr_out_commands_map_to_the_block_ioctls() {
        let params = OutParams {
            reservation_key: 0x11,
            service_action_key: 0x22,
        };
        assert_eq!(
            block_command(OutAction::RegisterAndIgnoreExistingKey, None, params),
            BlkPrOut::Register {
                old_key: 0x11,
                new_key: 0x22,
                ignore_existing: true
            }
        );
        assert_eq!(
            block_command(OutAction::Register, None, params),
            BlkPrOut::Register {
                old_key: 0x11,
                new_key: 0x22,
                ignore_existing: false
            }
        );
        // The block layer numbers WE-RO 3 (SCSI's code is 5); no type given means WE-RO.
        assert_eq!(
            block_command(OutAction::Reserve, None, params),
            BlkPrOut::Reserve {
                key: 0x11,
                pr_type: 3
            }
        );
        assert_eq!(
            block_command(
                OutAction::PreemptAndAbort,
                Some(PrType::ExclusiveAccessAllRegistrants),
                params
            ),
            BlkPrOut::Preempt {
                key: 0x11,
                victim: 0x22,
                pr_type: 6,
                abort: true
            }
        );
        assert_eq!(
            block_command(OutAction::Clear, None, params),
            BlkPrOut::Clear { key: 0x11 }
        );
        for t in PrType::ALL {
            assert_eq!(PrType::from_block_code(t.block_code()), Some(t));
        }
        assert_eq!(PrType::from_block_code(0), None);
    }

    #[test]
    fn block_statuses_are_told_apart() {
        assert!(block_status("X", 0).is_ok());
        assert!(block_status("X", 0x18)
            .unwrap_err()
            .is_reservation_conflict());
        for st in [0x10000, 0xe0000, 0xf0000] {
            assert!(
                matches!(block_status("X", st), Err(PrError::BlockPath { .. })),
                "{st:#x}"
            );
        }
        assert!(matches!(
            block_status("X", 2),
            Err(PrError::BlockStatus {
                name: "device error",
                ..
            })
        ));
        assert!(matches!(
            block_status("X", 7),
            Err(PrError::BlockStatus {
                name: "unknown status",
                ..
            })
        ));
    }

    #[test]
    fn the_probe_of_a_file_says_why() {
        let p = PrDevice::probe(Path::new("/proc/self/status"));
        assert!(!p.supported());
        assert!(p.keys.as_ref().unwrap_err().is_not_supported());
        assert!(
            p.summary().contains("does not take SCSI commands"),
            "{}",
            p.summary()
        );
        assert_eq!(p.write_exclusive_registrants_only(), None);
        let p = PrDevice::probe(Path::new("/nonexistent/x"));
        assert!(matches!(p.keys, Err(PrError::Open { .. })));
    }
}
