//! Storage fencing of one lockspace with SCSI-3 persistent reservations (issue 24,
//! docs/fencing.md, "Storage fencing"): opt-in per lockspace (`fence = "scsi-pr"`,
//! `fence_lockspaces`). At the join this host registers its key (lvmlockd's format,
//! generation and host_id) on the lockspace's device and its `fence_devices`, and a
//! Write Exclusive – Registrants Only reservation is made if none stands. A fence thread
//! looks once a second at the hosts our renewals observe; a peer whose delta lease has
//! stood still for `fence_preempt_s` has its key preempted on every device, and once the
//! keys read back confirm it, that generation is marked fenced in our host monitor: its
//! leases are taken at once (lease-core's owner check and shared-holder check). A host
//! whose own key is gone, or whose I/O the storage refuses (EBADE), has lost its leases.
//!
//! Invariants:
//! - a peer generation is marked fenced only after a key list read after the fact shows
//!   no key of that host_id on the lockspace's device while a reservation stands, and
//!   either our own PREEMPT removed that generation's key or an earlier read of ours saw
//!   it registered (so a host that never registered is never taken for fenced); every
//!   `fence_devices` entry holds no key of it either (older keys of the host are
//!   preempted too; a newer one means it joined again, and nothing is fenced);
//! - our key is only ever registered with a new generation: a join that finds its
//!   previous generation unreleased and no key of its host_id (it was fenced, or never
//!   registered) while a reservation stands waits host_dead before registering, so that
//!   processes of the fenced generation still on this host cannot write again through
//!   the new registration before the watchdog has ended them;
//! - nothing here runs for a lockspace the configuration does not name.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use disk_format::LeaderRecord;
use lease_core::monitor::HostMonitor;
use lease_core::timeouts;
use lockd_scsi_pr::{lvm_key, lvm_key_parts, Keys, PrDevice, PrError, PrType};
use tracing::{error, info, warn};

use crate::sync::lock;

/// The reservation lockd holds: writes only from registered I_T nexuses.
const RESERVATION: PrType = PrType::WriteExclusiveRegistrantsOnly;
/// Each PR command's bound (a fence thread must not hang on a dead path for long).
const PR_TIMEOUT_MS: u32 = 5_000;

/// The SCSI-3 PR state of one fenced lockspace.
pub struct SpaceFence {
    /// The lockspace's own device first, then its `fence_devices`.
    devices: Vec<PrDevice>,
    host_id: u64,
    /// Our registered key (0 before the registration).
    key: AtomicU64,
    /// `fence_preempt_s` as configured (0 = the fail time).
    preempt_cfg_s: u64,
    io_timeout_s: u64,
    /// Keys we have seen registered on the lockspace's device.
    seen: Mutex<HashSet<u64>>,
    /// Peer generations we found without a key (logged once each).
    unkeyed: Mutex<HashSet<(u64, u64)>>,
    /// Our key was found gone, or the storage refused us: we are fenced.
    fenced_here: AtomicBool,
}

/// Why a lockspace cannot be fenced (logged; the join fails with [`FENCE_JOIN_RV`]).
#[derive(Debug, thiserror::Error)]
pub enum FenceError {
    #[error("{path}: storage fencing (scsi-pr) needs persistent reservations: {source}")]
    Device { path: PathBuf, source: PrError },
    #[error("storage fencing key: {0}")]
    Key(#[from] lockd_scsi_pr::KeyError),
    #[error("{path}: {what}: {source}")]
    Command {
        path: PathBuf,
        what: &'static str,
        source: PrError,
    },
    #[error("the join was stopped")]
    Stopped,
}

/// What an add_lockspace gets when fencing is configured but cannot be set up:
/// -EOPNOTSUPP, the log says why.
pub const FENCE_JOIN_RV: i32 = -libc::EOPNOTSUPP;

/// One pass of [`SpaceFence::check`]: what it did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct CheckOutcome {
    /// (host_id, generation) marked fenced in this pass.
    pub fenced: Vec<(u64, u64)>,
    /// Our own key is gone: this host is fenced.
    pub we_are_fenced: bool,
}

impl SpaceFence {
    /// Opens the lockspace's device and `extra` devices and checks each answers
    /// PERSISTENT RESERVE IN (read-only).
    pub fn open(
        lockspace_path: &Path,
        extra: &[PathBuf],
        host_id: u64,
        io_timeout_s: u64,
        preempt_cfg_s: u64,
    ) -> Result<SpaceFence, FenceError> {
        lvm_key(host_id, 1)?;
        let mut devices = Vec::new();
        for path in std::iter::once(lockspace_path.to_path_buf()).chain(extra.iter().cloned()) {
            let mut dev = PrDevice::open(&path).map_err(|source| FenceError::Device {
                path: path.clone(),
                source,
            })?;
            dev.set_timeout_ms(PR_TIMEOUT_MS);
            dev.read_keys().map_err(|source| FenceError::Device {
                path: path.clone(),
                source,
            })?;
            devices.push(dev);
        }
        Ok(SpaceFence {
            devices,
            host_id,
            key: AtomicU64::new(0),
            preempt_cfg_s,
            io_timeout_s,
            seen: Mutex::new(HashSet::new()),
            unkeyed: Mutex::new(HashSet::new()),
            fenced_here: AtomicBool::new(false),
        })
    }

    /// Our registered key (0 before the join registered one).
    pub fn key(&self) -> u64 {
        self.key.load(Ordering::SeqCst)
    }

    /// How long a peer with io_timeout `peer_io_s` must stand still before we preempt it:
    /// `fence_preempt_s` (0 = its fail time, 8·D), at least 4·D (a live host renews every
    /// 2·D; D the larger of ours and its).
    pub fn preempt_after_s(&self, peer_io_s: u64) -> u64 {
        let d = self.io_timeout_s.max(peer_io_s);
        let wanted = if self.preempt_cfg_s == 0 {
            timeouts::id_renewal_fail_seconds(d)
        } else {
            self.preempt_cfg_s
        };
        wanted.max(4 * d)
    }

    fn cmd<T>(
        &self,
        dev: &PrDevice,
        what: &'static str,
        r: Result<T, PrError>,
    ) -> Result<T, FenceError> {
        r.map_err(|source| FenceError::Command {
            path: dev.path().to_path_buf(),
            what,
            source,
        })
    }

    /// Before the delta acquire: registers our key for the generation the acquire will
    /// write (`prev` is our host_id's record as read now), after waiting host_dead when
    /// the previous generation was left unreleased without a key under a reservation (see
    /// the module's invariants). `stop` ends the wait (removal, shutdown).
    pub fn register_for_join(
        &self,
        prev: &LeaderRecord,
        watchdog_fire_s: u64,
        stop: &AtomicBool,
    ) -> Result<u64, FenceError> {
        let dev = &self.devices[0];
        let keys = self.cmd(dev, "READ KEYS", dev.read_keys())?;
        let resv = self.cmd(dev, "READ RESERVATION", dev.read_reservation())?;
        let ours_present = keys
            .keys
            .iter()
            .any(|k| lvm_key_parts(*k).is_some_and(|(h, _)| h == self.host_id));
        if prev.timestamp != 0 && resv.reservation.is_some() && !ours_present {
            let io = if prev.io_timeout != 0 {
                u64::from(prev.io_timeout)
            } else {
                self.io_timeout_s
            };
            let wait_s = timeouts::host_dead_seconds(io, watchdog_fire_s);
            warn!(
                generation = prev.owner_generation,
                wait_s,
                "our previous generation was not released and has no key on the storage \
                 (fenced, or never registered): waiting host_dead before registering a new \
                 key, so that none of its processes can write again"
            );
            for _ in 0..wait_s * 10 {
                if stop.load(Ordering::SeqCst) {
                    return Err(FenceError::Stopped);
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        let generation = prev.owner_generation.wrapping_add(1);
        self.register(generation)?;
        Ok(generation)
    }

    /// Registers our key for `generation` on every device (REGISTER AND IGNORE EXISTING
    /// KEY: it replaces this host's previous key), then makes the reservation where none
    /// stands.
    pub fn register(&self, generation: u64) -> Result<(), FenceError> {
        let key = lvm_key(self.host_id, generation)?;
        for dev in &self.devices {
            self.cmd(
                dev,
                "REGISTER AND IGNORE EXISTING KEY",
                dev.register_ignore_existing(key),
            )?;
        }
        self.key.store(key, Ordering::SeqCst);
        self.fenced_here.store(false, Ordering::SeqCst);
        for dev in &self.devices {
            self.ensure_reservation(dev, key)?;
        }
        info!(
            key = format_args!("{key:#018x}"),
            devices = self.devices.len(),
            "storage fencing: key registered"
        );
        Ok(())
    }

    /// Makes the WE-RO reservation with `key` when the device has none (another host's
    /// reservation made in between is fine).
    fn ensure_reservation(&self, dev: &PrDevice, key: u64) -> Result<(), FenceError> {
        let st = self.cmd(dev, "READ RESERVATION", dev.read_reservation())?;
        if st.reservation.is_some() {
            return Ok(());
        }
        match dev.reserve(key, RESERVATION) {
            Ok(()) => Ok(()),
            Err(e) if e.is_reservation_conflict() => {
                let again = self.cmd(dev, "READ RESERVATION", dev.read_reservation())?;
                if again.reservation.is_some() {
                    Ok(())
                } else {
                    Err(FenceError::Command {
                        path: dev.path().to_path_buf(),
                        what: "RESERVE",
                        source: e,
                    })
                }
            }
            Err(source) => Err(FenceError::Command {
                path: dev.path().to_path_buf(),
                what: "RESERVE",
                source,
            }),
        }
    }

    /// After the delta acquire: the generation it wrote must be the one registered;
    /// if not (the record changed under the join), registers that one.
    pub fn confirm_generation(&self, generation: u64) -> Result<(), FenceError> {
        if lvm_key(self.host_id, generation)? != self.key() {
            warn!(
                generation,
                "the join wrote another generation than expected: registering it"
            );
            self.register(generation)?;
        }
        Ok(())
    }

    /// On a clean leave (the delta lease released): removes our key from every device.
    /// A reservation we held goes with it; the next preempt makes a new one.
    pub fn unregister(&self) {
        let key = self.key.swap(0, Ordering::SeqCst);
        if key == 0 {
            return;
        }
        for dev in &self.devices {
            if let Err(e) = dev.register(key, 0) {
                warn!(device = %dev.path().display(), error = %e, "storage fencing: unregister failed");
            }
        }
        info!("storage fencing: key removed");
    }

    /// Whether this host has found itself fenced.
    pub fn we_are_fenced(&self) -> bool {
        self.fenced_here.load(Ordering::SeqCst)
    }

    /// One look (the fence thread's, once a second): reads the keys when a peer has
    /// missed a renewal, finds out whether we ourselves were fenced, and preempts every
    /// peer generation that has stood still for [`SpaceFence::preempt_after_s`], marking
    /// it fenced in `monitor` once confirmed.
    pub fn check(&self, monitor: &Mutex<HostMonitor>, now_s: u64) -> CheckOutcome {
        let mut out = CheckOutcome::default();
        let our_key = self.key();
        if our_key == 0 || self.we_are_fenced() {
            return out;
        }
        // Peers that missed at least one renewal: (host_id, generation, age_s, io_s).
        let suspects: Vec<(u64, u64, u64, u64)> = lock(monitor)
            .hosts(now_s)
            .into_iter()
            .filter(|(id, h, _)| {
                h.timestamp != 0
                    && h.owner_id == *id
                    && h.owner_generation != 0
                    && !h.fenced(h.owner_generation)
            })
            .filter_map(|(id, h, _)| {
                let last = if h.last_live_s != 0 {
                    h.last_live_s
                } else {
                    h.first_check_s
                };
                let age = now_s.saturating_sub(last);
                let io = u64::from(h.io_timeout).max(1);
                (age >= 3 * io.max(self.io_timeout_s)).then_some((id, h.owner_generation, age, io))
            })
            .collect();
        if suspects.is_empty() {
            return out;
        }
        let dev0 = &self.devices[0];
        let keys = match dev0.read_keys() {
            Ok(k) if !k.truncated => k,
            Ok(_) => {
                warn!("storage fencing: the key list was truncated; not deciding");
                return out;
            }
            Err(e) => {
                warn!(error = %e, "storage fencing: READ KEYS failed");
                return out;
            }
        };
        if !keys.keys.contains(&our_key) {
            error!(
                key = format_args!("{our_key:#018x}"),
                "storage fencing: our key is gone from the lockspace's device: this host has \
                 been fenced; its leases are lost"
            );
            self.fenced_here.store(true, Ordering::SeqCst);
            out.we_are_fenced = true;
            return out;
        }
        lock(&self.seen).extend(keys.keys.iter().copied());
        for (host_id, generation, age, io) in suspects {
            if age < self.preempt_after_s(io) {
                continue;
            }
            match self.fence_peer(host_id, generation, &keys) {
                Ok(true) => {
                    if lock(monitor).mark_fenced(host_id, generation) {
                        info!(
                            host_id,
                            generation,
                            age_s = age,
                            "storage fencing: host marked fenced (its key's removal confirmed); \
                             its leases may be taken now"
                        );
                        out.fenced.push((host_id, generation));
                    }
                }
                Ok(false) => {}
                Err(e) if matches!(&e, FenceError::Command { source, .. } if source.is_reservation_conflict()) =>
                {
                    error!(error = %e, "storage fencing: our preempt was refused: this host has been fenced");
                    self.fenced_here.store(true, Ordering::SeqCst);
                    out.we_are_fenced = true;
                    return out;
                }
                Err(e) => warn!(host_id, generation, error = %e, "storage fencing: preempt failed"),
            }
        }
        out
    }

    /// Removes `generation` of `host_id` from every device; true once confirmed (see the
    /// module's first invariant). `keys` is the lockspace device's list read just now.
    /// Older keys of the host (a device its last join did not re-register) go too; a
    /// newer one means the host has joined again, and nothing is preempted.
    fn fence_peer(&self, host_id: u64, generation: u64, keys: &Keys) -> Result<bool, FenceError> {
        let victim = lvm_key(host_id, generation)?;
        let our_key = self.key();
        let seen_before = lock(&self.seen).contains(&victim);
        let mut preempted_here = false;
        for (i, dev) in self.devices.iter().enumerate() {
            let now_keys = if i == 0 {
                keys.clone()
            } else {
                self.cmd(dev, "READ KEYS", dev.read_keys())?
            };
            let doomed = match keys_to_preempt(&now_keys.keys, host_id, generation) {
                DevicePlan::Rejoined => return Ok(false),
                DevicePlan::Preempt(doomed) => doomed,
            };
            if !doomed.is_empty() {
                // A preempt without a reservation would leave the victim free to write.
                self.ensure_reservation(dev, our_key)?;
            }
            for key in doomed {
                let t0 = std::time::Instant::now();
                let done = self.cmd(
                    dev,
                    "PREEMPT",
                    dev.preempt_confirmed(our_key, key, RESERVATION, true),
                )?;
                info!(
                    device = %dev.path().display(),
                    host_id,
                    generation,
                    key = format_args!("{key:#018x}"),
                    action = ?done.action,
                    ms = t0.elapsed().as_millis() as u64,
                    "storage fencing: key preempted"
                );
                preempted_here |= key == victim;
            }
        }
        // Confirm on every device: a reservation stands and no key of host_id is left (a
        // new generation's key would mean its processes can write again).
        for dev in &self.devices {
            let after = self.cmd(dev, "READ KEYS", dev.read_keys())?;
            let resv = self.cmd(dev, "READ RESERVATION", dev.read_reservation())?;
            let any_of_host = after
                .keys
                .iter()
                .any(|k| lvm_key_parts(*k).is_some_and(|(h, _)| h == host_id));
            if after.truncated || any_of_host || resv.reservation.is_none() {
                return Ok(false);
            }
        }
        if preempted_here || seen_before {
            return Ok(true);
        }
        if lock(&self.unkeyed).insert((host_id, generation)) {
            warn!(
                host_id,
                generation,
                "storage fencing: this host generation never had a key we saw: it is not fenced \
                 by the storage; its leases wait host_dead"
            );
        }
        Ok(false)
    }
}

/// What to do on one device to fence `generation` of a host.
#[derive(Debug, PartialEq, Eq)]
enum DevicePlan {
    /// A key of a newer generation is registered: the host joined again; fence nothing.
    Rejoined,
    /// Preempt these keys of the host (its generation's and any older one's).
    Preempt(Vec<u64>),
}

fn keys_to_preempt(keys: &[u64], host_id: u64, generation: u64) -> DevicePlan {
    let mut doomed = Vec::new();
    for &k in keys {
        match lvm_key_parts(k) {
            Some((h, g)) if h == host_id && g > generation => return DevicePlan::Rejoined,
            Some((h, _)) if h == host_id => doomed.push(k),
            _ => {}
        }
    }
    DevicePlan::Preempt(doomed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fence(io: u64, cfg: u64) -> SpaceFence {
        SpaceFence {
            devices: Vec::new(),
            host_id: 1,
            key: AtomicU64::new(0),
            preempt_cfg_s: cfg,
            io_timeout_s: io,
            seen: Mutex::new(HashSet::new()),
            unkeyed: Mutex::new(HashSet::new()),
            fenced_here: AtomicBool::new(false),
        }
    }

    #[test]
    fn preempt_time_defaults_to_the_fail_time_and_never_undercuts_two_renewals() {
        assert_eq!(fence(1, 0).preempt_after_s(1), 8);
        assert_eq!(fence(10, 0).preempt_after_s(10), 80);
        assert_eq!(fence(1, 5).preempt_after_s(1), 5);
        // Configured shorter than 4·D: raised (a live peer renews every 2·D).
        assert_eq!(fence(1, 2).preempt_after_s(1), 4);
        // A peer with a longer io_timeout is judged by its own D.
        assert_eq!(fence(1, 5).preempt_after_s(3), 12);
    }

    #[test]
    fn every_key_of_the_fenced_generation_or_older_goes_and_a_newer_one_stops_the_fence() {
        let k = |h, g| lvm_key(h, g).unwrap();
        let others = [k(1, 4), k(3, 9), 0x1234];
        assert_eq!(keys_to_preempt(&others, 2, 5), DevicePlan::Preempt(vec![]));
        assert_eq!(
            keys_to_preempt(&[k(1, 4), k(2, 5), k(2, 3)], 2, 5),
            DevicePlan::Preempt(vec![k(2, 5), k(2, 3)])
        );
        assert_eq!(
            keys_to_preempt(&[k(2, 5), k(2, 6)], 2, 5),
            DevicePlan::Rejoined
        );
    }

    #[test]
    fn no_check_before_a_key_is_registered() {
        let f = fence(1, 5);
        let mon = Mutex::new(HostMonitor::new(1, 10));
        assert_eq!(f.check(&mon, 100), CheckOutcome::default());
    }
}
