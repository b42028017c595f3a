//! A device opened for persistent-reservation commands through SG_IO, the commands
//! themselves, a read-only probe, and a preempt confirmed by reading the keys back.
//!
//! Invariants:
//! * the probe and the READ commands send PERSISTENT RESERVE IN only; every descriptor is
//!   opened read-only (SG_IO needs no write access, and no udev re-probe follows);
//! * UNIT ATTENTION (the device reporting a reset or a preempt before running the
//!   command) is answered by sending the same command again, at most
//!   [`UNIT_ATTENTION_RETRIES`] times; every other error is returned as it is;
//! * a preempt counts as done only when READ KEYS, read after it, no longer lists the
//!   victim's key ([`PrDevice::preempt_confirmed`]).

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use crate::cdb::{in_cdb, out_cdb, out_params, InAction, OutAction, OutParams, PrType};
use crate::error::PrError;
use crate::parse::{self, Capabilities, Keys, ReservationState};
use crate::sense::{verdict, Completion};
use crate::sys::{sg_io, Data};

/// How long one command may take before the kernel aborts it.
pub const DEFAULT_TIMEOUT_MS: u32 = 10_000;
/// How many times a command is sent again after UNIT ATTENTION.
pub const UNIT_ATTENTION_RETRIES: u32 = 3;
/// READ KEYS' first allocation: room for 256 keys.
const READ_KEYS_FIRST_BYTES: u16 = 8 + 8 * 256;
const SENSE_BYTES: usize = 64;

pub struct PrDevice {
    file: File,
    path: PathBuf,
    timeout_ms: u32,
}

impl PrDevice {
    /// Opens `path` for SG_IO. Always read-only and non-blocking, as `sg_persist` does:
    /// the kernel lets a process with CAP_SYS_RAWIO send PR OUT on such a descriptor, and
    /// closing a block device opened for writing makes udev re-probe it (a "change"
    /// event). Without CAP_SYS_RAWIO the kernel refuses PR OUT on it (EPERM), reported as
    /// [`PrError::NeedsRawIo`].
    pub fn open(path: &Path) -> Result<PrDevice, PrError> {
        use std::os::unix::fs::OpenOptionsExt;
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)
            .map_err(|source| PrError::Open {
                path: path.to_path_buf(),
                source,
            })?;
        Ok(PrDevice {
            file,
            path: path.to_path_buf(),
            timeout_ms: DEFAULT_TIMEOUT_MS,
        })
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
        let keys = parse::read_keys(&self.pr_in(InAction::ReadKeys, READ_KEYS_FIRST_BYTES)?)?;
        if !keys.truncated {
            return Ok(keys);
        }
        let want = u16::try_from(keys.reported_len_bytes.saturating_add(8)).unwrap_or(u16::MAX);
        parse::read_keys(&self.pr_in(InAction::ReadKeys, want)?)
    }

    pub fn read_reservation(&self) -> Result<ReservationState, PrError> {
        parse::read_reservation(&self.pr_in(InAction::ReadReservation, 24)?)
    }

    pub fn report_capabilities(&self) -> Result<Capabilities, PrError> {
        parse::report_capabilities(&self.pr_in(InAction::ReportCapabilities, 8)?)
    }

    /// Any PR OUT command (needs CAP_SYS_RAWIO).
    pub fn pr_out(
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
                Err(e) if matches!(e, PrError::NotSupported { .. }) => {
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

    /// A read-only look at what the device supports and holds: READ KEYS, then (if that
    /// worked) READ RESERVATION and REPORT CAPABILITIES.
    pub fn probe(path: &Path) -> Probe {
        PrDevice::probe_with_timeout(path, DEFAULT_TIMEOUT_MS)
    }

    /// [`PrDevice::probe`] with each of its (at most three) commands bounded by
    /// `timeout_ms`.
    pub fn probe_with_timeout(path: &Path, timeout_ms: u32) -> Probe {
        let mut dev = match PrDevice::open(path) {
            Ok(d) => d,
            Err(e) => {
                return Probe {
                    keys: Err(e),
                    reservation: None,
                    capabilities: None,
                }
            }
        };
        dev.set_timeout_ms(timeout_ms);
        let keys = dev.read_keys();
        if keys.is_err() {
            return Probe {
                keys,
                reservation: None,
                capabilities: None,
            };
        }
        Probe {
            keys,
            reservation: Some(dev.read_reservation()),
            capabilities: Some(dev.report_capabilities()),
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
            "persistent reservations supported: {} key(s) registered, generation {}",
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
