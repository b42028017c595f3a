//! Storage fencing settings (`fence`, `fence_lockspaces`, `fence_devices`,
//! `fence_preempt_s`): which lockspaces register SCSI-3 persistent-reservation keys, on
//! which devices, and how long a peer's delta lease must stand still before this host
//! preempts its key (docs/fencing.md).
//!
//! Invariants: fencing is off unless `fence = "scsi-pr"` (or `"register-only"`, keys
//! without reservations or preempts) names it and the lockspace is
//! listed in `fence_lockspaces` (opt-in per lockspace: a lockspace shared with hosts that
//! do not register keys must never be fenced, because a host without a key is refused
//! every write once a reservation exists); every listed name and device is checked here,
//! so the daemon never meets a malformed entry.

use std::path::PathBuf;

use disk_format::Name;

use crate::ConfigError;

/// The storage fencing method (`fence`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FenceMethod {
    /// Watchdog fencing only, as sanlock (the default).
    #[default]
    None,
    /// SCSI-3 persistent reservations on the lockspace's device (and `fence_devices`).
    ScsiPr,
    /// The key is registered as with `ScsiPr`, so this host may write while a reservation
    /// stands and a fencing peer may fence it, but this host makes no reservation and
    /// preempts nobody: the middle step of turning fencing on or off one host at a time
    /// (docs/operations.md).
    RegisterOnly,
}

/// The resolved fencing settings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FenceConfig {
    pub method: FenceMethod,
    /// The lockspaces fencing applies to (empty when `method` is None).
    pub lockspaces: Vec<Name>,
    /// Devices registered and fenced beside the lockspace's own: (lockspace, path).
    pub devices: Vec<(Name, PathBuf)>,
    /// Seconds without a change of a peer's delta lease before it is preempted; 0 = the
    /// lockspace's id_renewal_fail time (8·io_timeout).
    pub preempt_s: u32,
    /// Milliseconds a fence waits before it counts as confirmed when the victim's
    /// commands queued at the target were not aborted by our own PREEMPT AND ABORT (the
    /// target took plain PREEMPT only, or another host's preempt removed the key): the
    /// longest a write the target had already accepted may take to reach its storage.
    pub drain_ms: u32,
}

/// fence_drain_ms when the file does not set it.
pub const FENCE_DRAIN_DEFAULT_MS: u32 = 2000;
/// fence_drain_ms: up to ten minutes.
pub const FENCE_DRAIN_RANGE_MS: std::ops::RangeInclusive<u32> = 0..=600_000;

/// fence_preempt_s: 0 (the fail time) or a time the daemon raises to at least
/// 6·io_timeout (`lockd_core::fencing::PREEMPT_FLOOR_IO_TIMEOUTS`).
pub const FENCE_PREEMPT_RANGE_S: std::ops::RangeInclusive<u32> = 0..=3600;

impl FenceConfig {
    /// Whether this host registers a SCSI-3 PR key for `ls` (`scsi-pr` or
    /// `register-only`).
    pub fn scsi_pr_for(&self, ls: &Name) -> bool {
        self.method != FenceMethod::None && self.lockspaces.iter().any(|n| n.same_as(ls))
    }

    /// Whether this host also reserves and preempts for `ls` (`scsi-pr`).
    pub fn acts_for(&self, ls: &Name) -> bool {
        self.method == FenceMethod::ScsiPr && self.scsi_pr_for(ls)
    }

    /// The extra devices of `ls`, in the order given.
    pub fn devices_for(&self, ls: &Name) -> Vec<PathBuf> {
        self.devices
            .iter()
            .filter(|(n, _)| n.same_as(ls))
            .map(|(_, p)| p.clone())
            .collect()
    }

    /// Builds the settings from the file's four keys.
    pub fn resolve(
        method: Option<&str>,
        lockspaces: Option<&[String]>,
        devices: Option<&[String]>,
        preempt_s: Option<u32>,
    ) -> Result<FenceConfig, ConfigError> {
        let method = match method.unwrap_or("none") {
            "none" => FenceMethod::None,
            "scsi-pr" => FenceMethod::ScsiPr,
            "register-only" => FenceMethod::RegisterOnly,
            other => {
                return Err(ConfigError::Invalid {
                    what: "fence",
                    why: format!("{other:?} (\"none\", \"scsi-pr\" or \"register-only\")"),
                })
            }
        };
        let preempt_s = preempt_s.unwrap_or(0);
        if !FENCE_PREEMPT_RANGE_S.contains(&preempt_s) {
            return Err(ConfigError::Invalid {
                what: "fence_preempt_s",
                why: format!("{preempt_s} (0..=3600 seconds)"),
            });
        }
        let names = lockspaces
            .unwrap_or_default()
            .iter()
            .map(|t| lockspace_name("fence_lockspaces", t))
            .collect::<Result<Vec<_>, _>>()?;
        let devices = devices
            .unwrap_or_default()
            .iter()
            .map(|t| device_entry(t))
            .collect::<Result<Vec<_>, _>>()?;
        if method == FenceMethod::None {
            if !names.is_empty() || !devices.is_empty() {
                return Err(ConfigError::Invalid {
                    what: "fence_lockspaces",
                    why: "fence_lockspaces and fence_devices need fence = \"scsi-pr\" or \
                          \"register-only\""
                        .into(),
                });
            }
            return Ok(FenceConfig::default());
        }
        if names.is_empty() {
            return Err(ConfigError::Invalid {
                what: "fence_lockspaces",
                why: "fence = \"scsi-pr\" needs the lockspaces it applies to (opt-in per \
                      lockspace: a lockspace shared with hosts that register no key must \
                      not be fenced)"
                    .into(),
            });
        }
        for (ls, path) in &devices {
            if !names.iter().any(|n| n.same_as(ls)) {
                return Err(ConfigError::Invalid {
                    what: "fence_devices",
                    why: format!(
                        "{}:{} names a lockspace not in fence_lockspaces",
                        ls.to_text(),
                        path.display()
                    ),
                });
            }
        }
        Ok(FenceConfig {
            method,
            lockspaces: names,
            devices,
            preempt_s,
            drain_ms: FENCE_DRAIN_DEFAULT_MS,
        })
    }

    /// The settings with `fence_drain_ms` from the file (the default when absent).
    pub fn with_drain_ms(self, drain_ms: Option<u32>) -> Result<FenceConfig, ConfigError> {
        let drain_ms = drain_ms.unwrap_or(FENCE_DRAIN_DEFAULT_MS);
        if !FENCE_DRAIN_RANGE_MS.contains(&drain_ms) {
            return Err(ConfigError::Invalid {
                what: "fence_drain_ms",
                why: format!("{drain_ms} (0..=600000 milliseconds)"),
            });
        }
        Ok(FenceConfig { drain_ms, ..self })
    }
}

fn lockspace_name(what: &'static str, text: &str) -> Result<Name, ConfigError> {
    if text.is_empty() || text.chars().any(|c| c.is_control()) {
        return Err(ConfigError::Invalid {
            what,
            why: format!("{text:?} is not a lockspace name (1..=48 bytes, printable)"),
        });
    }
    Name::new(text).map_err(|e| ConfigError::Invalid {
        what,
        why: format!("{text:?}: {e}"),
    })
}

/// `LOCKSPACE:/absolute/path`.
fn device_entry(text: &str) -> Result<(Name, PathBuf), ConfigError> {
    let Some((ls, path)) = text.split_once(':') else {
        return Err(ConfigError::Invalid {
            what: "fence_devices",
            why: format!("{text:?} (LOCKSPACE:/dev/PATH)"),
        });
    };
    let name = lockspace_name("fence_devices", ls)?;
    if !path.starts_with('/') || path.len() > crate::PATH_MAX_BYTES || path.contains('\0') {
        return Err(ConfigError::Invalid {
            what: "fence_devices",
            why: format!("{text:?}: the device must be an absolute path"),
        });
    }
    Ok((name, PathBuf::from(path)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn drain_defaults_to_two_seconds_and_is_bounded() {
        let ls = s(&["vb"]);
        let on = FenceConfig::resolve(Some("scsi-pr"), Some(&ls), None, None).unwrap();
        assert_eq!(on.clone().with_drain_ms(None).unwrap().drain_ms, 2000);
        assert_eq!(on.clone().with_drain_ms(Some(0)).unwrap().drain_ms, 0);
        assert_eq!(
            on.clone().with_drain_ms(Some(600_000)).unwrap().drain_ms,
            600_000
        );
        let err = on.with_drain_ms(Some(600_001)).unwrap_err().to_string();
        assert!(err.contains("fence_drain_ms"), "{err}");
    }

    #[test]
    fn off_by_default_and_opt_in_per_lockspace() {
        let off = FenceConfig::resolve(None, None, None, None).unwrap();
        assert_eq!(off.method, FenceMethod::None);
        let ls = s(&["vb"]);
        let devs = s(&["vb:/dev/sdc"]);
        let on = FenceConfig::resolve(Some("scsi-pr"), Some(&ls), Some(&devs), Some(5)).unwrap();
        let vb = Name::new("vb").unwrap();
        assert!(on.scsi_pr_for(&vb) && on.acts_for(&vb));
        assert!(!on.scsi_pr_for(&Name::new("other").unwrap()));
        let reg = FenceConfig::resolve(Some("register-only"), Some(&ls), None, None).unwrap();
        assert!(reg.scsi_pr_for(&vb) && !reg.acts_for(&vb));
        assert_eq!(on.devices_for(&vb), vec![PathBuf::from("/dev/sdc")]);
        assert_eq!(on.preempt_s, 5);
    }

    #[test]
    fn bad_settings_are_clear_errors() {
        let ls = s(&["vb"]);
        for (m, l, d, p) in [
            (Some("scsi"), None, None, None),
            (Some("scsi-pr"), None, None, None),
            (None, Some(ls.clone()), None, None),
            (Some("scsi-pr"), Some(ls.clone()), Some(s(&["vb"])), None),
            (
                Some("scsi-pr"),
                Some(ls.clone()),
                Some(s(&["vb:dev/sdc"])),
                None,
            ),
            (
                Some("scsi-pr"),
                Some(ls.clone()),
                Some(s(&["other:/dev/sdc"])),
                None,
            ),
            (Some("scsi-pr"), Some(s(&[""])), None, None),
            (Some("scsi-pr"), Some(ls.clone()), None, Some(3601)),
        ] {
            let r = FenceConfig::resolve(m, l.as_deref(), d.as_deref(), p);
            assert!(r.is_err(), "{m:?} {l:?} {d:?} {p:?} accepted");
        }
    }
}
