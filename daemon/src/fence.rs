//! Storage fencing of one lockspace with SCSI-3 persistent reservations (issue 24,
//! docs/fencing.md, "Storage fencing"): opt-in per lockspace (`fence = "scsi-pr"`,
//! `fence_lockspaces`). At the join this host registers its key (lvmlockd's format,
//! generation and host_id) on the lockspace's device and its `fence_devices`, and a
//! Write Exclusive – Registrants Only reservation is made by a fence pass once every live
//! host has a key. A fence thread
//! (`crate::lockspace`) runs a pass once a second.
//!
//! This module is the executor of fencing's PR commands; the decisions and the state are
//! the core's (`lockd_core::fencing`, kept with the lockspace): which peers are suspects
//! (from the core's host monitor), whom to preempt, when a peer counts as fenced (the core
//! marks it in the monitor, and lease-core's owner and shared-holder checks take its
//! leases at once), when we are fenced ourselves (our key gone, or our PREEMPT refused:
//! the lease is lost), and whether a join must wait before registering. What is kept
//! here: the open devices and our host_id. Our key is the core's (`FenceSt::key`), given
//! to each command that needs it.
//!
//! Invariants:
//! - a peer generation is confirmed only when a key list read after the preempt shows no
//!   key of that host_id on every device while a reservation stands
//!   ([`lockd_core::fencing::device_confirms`]); older keys of the host are preempted too,
//!   and a newer one means it joined again and nothing is preempted
//!   ([`lockd_core::fencing::device_plan`]);
//! - our key is only ever registered with a new generation: a join that finds its
//!   previous generation unreleased and no key of its host_id while a reservation stands
//!   waits host_dead before registering ([`lockd_core::fencing::join_must_wait`]), so that
//!   processes of the fenced generation still on this host cannot write again through
//!   the new registration before the watchdog has ended them;
//! - nothing here runs for a lockspace the configuration does not name.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use disk_format::LeaderRecord;
use lease_core::timeouts;
use lockd_core::fencing::{
    device_confirms, device_plan, join_must_wait, join_old_key, preempt_conflict, DevicePlan,
    FenceKey, KeysRead, PeerFenceOutcome, PreemptConflict,
};
use lockd_scsi_pr::{lvm_key, lvm_key_parts, OutAction, PrDevice, PrError, PrType};
use tracing::{info, warn};

/// The reservation lockd makes: writes only from registered I_T nexuses. It has one
/// holder, and goes with the holder's registration, so a holder never removes its key
/// while it holds it ([`SpaceFence::unregister`]); a PREEMPT of the holder's key passes it
/// to the preempter. Not Write Exclusive – All Registrants, which would stand while any
/// registrant is left: tgt keeps one holder for it too and, when that registrant is
/// preempted, keeps pointing at the freed registration — in the VM bed the preempted
/// host's writes then landed beside the new lease holder's.
const RESERVATION: PrType = PrType::WriteExclusiveRegistrantsOnly;
/// Each PR command's bound (a fence thread must not hang on a dead path for long).
const PR_TIMEOUT_MS: u32 = 5_000;
/// How many times a join decides its registration again after the key it named changed
/// (the key the list showed, no key, then any key; one more after a host_dead wait).
const JOIN_REGISTER_TRIES: usize = 4;

/// The devices of one fenced lockspace.
pub struct SpaceFence {
    /// The lockspace's own device first, then its `fence_devices`.
    devices: Vec<PrDevice>,
    /// For each device, the logical units it is made of (`PrDevice::logical_units`).
    units: Vec<BTreeSet<String>>,
    host_id: u64,
    /// `fence_drain_ms`: how long a fence whose victim's queued commands no PREEMPT AND
    /// ABORT of ours aborted waits before it is confirmed.
    drain_ms: u64,
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
    #[error("stopped by a removal or shutdown of the lockspace")]
    Stopped,
    #[error(
        "{path}: our registration was refused {JOIN_REGISTER_TRIES} times (RESERVATION \
         CONFLICT: the key of our host_id changed under each try)"
    )]
    JoinRegister { path: PathBuf },
}

/// What an add_lockspace gets when fencing is configured but cannot be set up:
/// -EOPNOTSUPP, the log says why.
pub const FENCE_JOIN_RV: i32 = -libc::EOPNOTSUPP;

/// Sleeps `ms`, in steps of 100 ms, unless `stop` is set (a removal or shutdown of the
/// lockspace): then [`FenceError::Stopped`] within 100 ms.
fn wait_unless_stopped(ms: u64, stop: &AtomicBool) -> Result<(), FenceError> {
    const STEP_MS: u64 = 100;
    let mut left_ms = ms;
    loop {
        if stop.load(Ordering::SeqCst) {
            return Err(FenceError::Stopped);
        }
        if left_ms == 0 {
            return Ok(());
        }
        let now_ms = left_ms.min(STEP_MS);
        std::thread::sleep(Duration::from_millis(now_ms));
        left_ms -= now_ms;
    }
}

/// What the core is told of a preempt that ended with `result`: a RESERVATION CONFLICT on
/// a command is `Refused` (the keys read next tell whether our own key is gone); any
/// other error, a stop during the drain included, is `Failed`, which marks nobody fenced
/// (`FenceSt::peer_done`). The error is given back with it for the log.
fn preempt_outcome(
    result: Result<PeerFenceOutcome, FenceError>,
) -> Result<PeerFenceOutcome, (PeerFenceOutcome, FenceError)> {
    result.map_err(|e| {
        let refused = matches!(&e, FenceError::Command { source, .. }
            if source.is_reservation_conflict());
        let outcome = if refused {
            PeerFenceOutcome::Refused
        } else {
            PeerFenceOutcome::Failed
        };
        (outcome, e)
    })
}

/// The core's view of a key list: each key with the host_id and generation it names.
fn fence_keys(keys: &[u64]) -> Vec<FenceKey> {
    keys.iter()
        .map(|&raw| FenceKey {
            raw,
            owner: lvm_key_parts(raw),
        })
        .collect()
}

impl SpaceFence {
    /// Opens the lockspace's device and `extra` devices and checks each answers
    /// PERSISTENT RESERVE IN (read-only).
    pub fn open(
        lockspace_path: &Path,
        extra: &[PathBuf],
        host_id: u64,
        drain_ms: u64,
    ) -> Result<SpaceFence, FenceError> {
        lvm_key(host_id, 1)?;
        let mut devices = Vec::new();
        let mut units = Vec::new();
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
            info!(
                device = %path.display(),
                interface = %dev.interface().name(),
                "storage fencing: device answers persistent reservations"
            );
            units.push(dev.logical_units());
            devices.push(dev);
        }
        Ok(SpaceFence {
            devices,
            units,
            host_id,
            drain_ms,
        })
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
    /// the core's rule says so (see the module's invariants). `stop` ends the wait
    /// (removal, shutdown). Returns the key registered, for the core.
    ///
    /// The rule is decided from one key list, and a preempt of our previous key may land
    /// after that read: REGISTER AND IGNORE EXISTING KEY would then undo it for our
    /// initiator. So on the lockspace's device the new key replaces the key the list
    /// showed for our host_id with a plain REGISTER naming it (or naming none), which the
    /// target refuses (RESERVATION CONFLICT) when that key is gone meanwhile; the rule is
    /// then decided again from a fresh list.
    pub fn register_for_join(
        &self,
        prev: &LeaderRecord,
        io_timeout_s: u64,
        watchdog_fire_s: u64,
        stop: &AtomicBool,
    ) -> Result<u64, FenceError> {
        let dev = &self.devices[0];
        let key = lvm_key(self.host_id, prev.owner_generation.wrapping_add(1))?;
        let mut waited = false;
        for attempt in 0..JOIN_REGISTER_TRIES {
            let keys = self.cmd(dev, "READ KEYS", dev.read_keys())?;
            let resv = self.cmd(dev, "READ RESERVATION", dev.read_reservation())?;
            let listed = fence_keys(&keys.keys);
            crate::planted::pause_point(crate::planted::PausePoint::JoinKeysRead);
            if !waited
                && join_must_wait(
                    prev.timestamp,
                    resv.reservation.is_some(),
                    &listed,
                    self.host_id,
                )
            {
                self.wait_host_dead(prev, io_timeout_s, watchdog_fire_s, stop)?;
                waited = true;
                continue;
            }
            // After a wait nothing of the old generation can write any more. A conflict
            // that asked for no wait may also mean our initiator holds no key or another
            // one than the list shows for our host_id (another path registered it): then
            // the key of none, then REGISTER AND IGNORE EXISTING KEY.
            let old = match attempt {
                _ if waited => None,
                _ if crate::planted::active(crate::planted::Bug::JoinRegisterIgnoreExisting) => {
                    None
                }
                0 => Some(join_old_key(&listed, self.host_id)),
                1 => Some(0),
                _ => None,
            };
            match old {
                Some(old) => match dev.register(old, key) {
                    Ok(()) => {}
                    Err(e) if e.is_reservation_conflict() => {
                        warn!(
                            old = format_args!("{old:#018x}"),
                            "storage fencing: our previous key changed under the join (a \
                             preempt?); deciding again"
                        );
                        // Whatever happened, from here on only a wait makes a registration
                        // safe when the rule asks for one; decide it again.
                        if join_must_wait(
                            prev.timestamp,
                            true,
                            &fence_keys(&self.cmd(dev, "READ KEYS", dev.read_keys())?.keys),
                            self.host_id,
                        ) {
                            self.wait_host_dead(prev, io_timeout_s, watchdog_fire_s, stop)?;
                            waited = true;
                        }
                        continue;
                    }
                    Err(source) => {
                        return Err(FenceError::Command {
                            path: dev.path().to_path_buf(),
                            what: "REGISTER",
                            source,
                        })
                    }
                },
                None => self.cmd(
                    dev,
                    "REGISTER AND IGNORE EXISTING KEY",
                    dev.register_ignore_existing(key),
                )?,
            }
            for extra in &self.devices[1..] {
                self.cmd(
                    extra,
                    "REGISTER AND IGNORE EXISTING KEY",
                    extra.register_ignore_existing(key),
                )?;
            }
            info!(
                key = format_args!("{key:#018x}"),
                devices = self.devices.len(),
                "storage fencing: key registered"
            );
            return Ok(key);
        }
        Err(FenceError::JoinRegister {
            path: dev.path().to_path_buf(),
        })
    }

    /// The host_dead wait of a join whose previous generation may still have processes.
    fn wait_host_dead(
        &self,
        prev: &LeaderRecord,
        io_timeout_s: u64,
        watchdog_fire_s: u64,
        stop: &AtomicBool,
    ) -> Result<(), FenceError> {
        let io = if prev.io_timeout != 0 {
            u64::from(prev.io_timeout)
        } else {
            io_timeout_s
        };
        let wait_s = timeouts::host_dead_seconds(io, watchdog_fire_s);
        warn!(
            generation = prev.owner_generation,
            wait_s,
            "our previous generation was not released and has no key on the storage \
             (fenced, or never registered): waiting host_dead before registering a new \
             key, so that none of its processes can write again"
        );
        wait_unless_stopped(wait_s * 1000, stop)
    }

    /// Registers our key for `generation` on every device (REGISTER AND IGNORE EXISTING
    /// KEY: it replaces this host's previous key). Returns the key. The reservation is the
    /// fence pass's to make, once every live host's key is registered
    /// (`FenceAction::Reserve`).
    pub fn register(&self, generation: u64) -> Result<u64, FenceError> {
        let key = lvm_key(self.host_id, generation)?;
        self.register_key(key)?;
        info!(
            key = format_args!("{key:#018x}"),
            devices = self.devices.len(),
            "storage fencing: key registered"
        );
        Ok(key)
    }

    /// Registers `key` on every device (REGISTER AND IGNORE EXISTING KEY).
    fn register_key(&self, key: u64) -> Result<(), FenceError> {
        for dev in &self.devices {
            self.cmd(
                dev,
                "REGISTER AND IGNORE EXISTING KEY",
                dev.register_ignore_existing(key),
            )?;
        }
        Ok(())
    }

    /// `FenceAction::Reserve`: the reservation on every device that has none.
    pub fn reserve(&self, our_key: u64) {
        for dev in &self.devices {
            match self.ensure_reservation(dev, our_key) {
                Ok(()) => {}
                Err(e) => warn!(error = %e, "storage fencing: reserve failed"),
            }
        }
    }

    /// `FenceAction::Release`: releases the reservation on every device (only its holder
    /// can; RELEASE from another registrant leaves it, and the holder's own pass releases
    /// it).
    pub fn release(&self, our_key: u64) {
        for dev in &self.devices {
            let held = match self.cmd(dev, "READ RESERVATION", dev.read_reservation()) {
                Ok(st) => st.reservation,
                Err(e) => {
                    warn!(error = %e, "storage fencing: release not tried");
                    continue;
                }
            };
            let Some(pr_type) = held.and_then(|r| r.pr_type) else {
                continue;
            };
            match dev.release(our_key, pr_type) {
                Ok(()) => info!(
                    device = %dev.path().display(),
                    "storage fencing: reservation released"
                ),
                Err(e) => warn!(device = %dev.path().display(), error = %e,
                    "storage fencing: RELEASE failed"),
            }
        }
    }

    /// `FenceAction::Reregister`: our key again on every device, after the storage lost it.
    pub fn reregister(&self, our_key: u64) {
        match self.register_key(our_key) {
            Ok(()) => info!(
                key = format_args!("{our_key:#018x}"),
                "storage fencing: key registered again"
            ),
            Err(e) => warn!(error = %e, "storage fencing: registering our key again failed"),
        }
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

    /// After the delta acquire: the generation it wrote must be the one `key` (the
    /// core's) names; if not (the record changed under the join), registers that one and
    /// returns its key.
    pub fn confirm_generation(&self, generation: u64, key: u64) -> Result<Option<u64>, FenceError> {
        if lvm_key(self.host_id, generation)? == key {
            return Ok(None);
        }
        warn!(
            generation,
            "the join wrote another generation than expected: registering it"
        );
        self.register(generation).map(Some)
    }

    /// On a clean leave (the delta lease released) or an aborted join: removes our key
    /// `key` (0: none registered) from every device — except where our key holds the
    /// reservation (or the reservation cannot be read): the reservation would go with it
    /// and every initiator, a fenced host too, could write. The key stays there; our next
    /// join replaces it (a plain REGISTER naming it keeps the reservation with us).
    pub fn unregister(&self, key: u64) {
        if key == 0 {
            return;
        }
        for dev in &self.devices {
            match dev.read_reservation() {
                Ok(st) if st.reservation.as_ref().is_none_or(|r| r.key != key) => {}
                Ok(_) => {
                    warn!(
                        device = %dev.path().display(),
                        "storage fencing: our key holds the reservation: it stays registered \
                         so that the reservation keeps fenced hosts out"
                    );
                    continue;
                }
                Err(e) => {
                    warn!(device = %dev.path().display(), error = %e,
                        "storage fencing: READ RESERVATION failed; our key stays registered");
                    continue;
                }
            }
            if let Err(e) = dev.register(key, 0) {
                warn!(device = %dev.path().display(), error = %e, "storage fencing: unregister failed");
            }
        }
        info!("storage fencing: key removed");
    }

    /// Whether `our_key` is the only key on the lockspace's device (read now; a failed
    /// or truncated read answers false).
    pub fn ours_is_the_last_key(&self, our_key: u64) -> bool {
        matches!(self.devices[0].read_keys(), Ok(k) if !k.truncated && k.keys == [our_key])
    }

    /// A pass's key list of the lockspace's device, and whether a reservation stands on
    /// it: READ RESERVATION, READ KEYS, READ RESERVATION again. The three must tell one
    /// state (the same PR generation, the same reservation, its holder's key on the list),
    /// else the read is not used ([`KeysRead::Failed`]): a target restarted between two
    /// of the commands answers the first from its old state and the next from its empty
    /// one, and "no key of ours while a reservation stands" read that way made a healthy
    /// host count itself fenced (VM bed, `pr-target-restart`).
    pub fn read_keys(&self) -> KeysRead {
        let dev = &self.devices[0];
        let read_resv = || match dev.read_reservation() {
            Ok(st) => Some(st),
            Err(e) => {
                warn!(error = %e, "storage fencing: READ RESERVATION failed");
                None
            }
        };
        let Some(before) = read_resv() else {
            return KeysRead::Failed;
        };
        let keys = match dev.read_keys() {
            Ok(k) if !k.truncated => k,
            Ok(_) => {
                warn!("storage fencing: the key list was truncated; not deciding");
                return KeysRead::Truncated;
            }
            Err(e) => {
                warn!(error = %e, "storage fencing: READ KEYS failed");
                return KeysRead::Failed;
            }
        };
        let Some(after) = read_resv() else {
            return KeysRead::Failed;
        };
        if !one_pr_state(&before, &keys, &after) {
            warn!(
                generations = format_args!(
                    "{}/{}/{}",
                    before.generation, keys.generation, after.generation
                ),
                "storage fencing: the keys and the reservation changed under the read (a target \
                 restart?); not deciding on it"
            );
            return KeysRead::Failed;
        }
        KeysRead::Keys {
            keys: fence_keys(&keys.keys),
            reservation: after.reservation.is_some(),
        }
    }

    /// Preempts every key of `host_id` at `generation` or older on every device with
    /// `our_key`, then reads every device back (the core decides from the outcome). A
    /// removal or shutdown (`stop`) cuts the drain wait short: the fence then does not
    /// count (`Failed`).
    pub fn preempt_peer(
        &self,
        host_id: u64,
        generation: u64,
        our_key: u64,
        stop: &AtomicBool,
    ) -> PeerFenceOutcome {
        match preempt_outcome(self.try_preempt_peer(host_id, generation, our_key, stop)) {
            Ok(outcome) => outcome,
            Err((PeerFenceOutcome::Refused, e)) => {
                warn!(error = %e, "storage fencing: our preempt was refused");
                PeerFenceOutcome::Refused
            }
            Err((outcome, e)) => {
                warn!(host_id, generation, error = %e, "storage fencing: preempt failed");
                outcome
            }
        }
    }

    /// One attempt at fencing host `host_id`'s `generation`: its keys preempted on every
    /// device, then the read-back that confirms them gone.
    ///
    /// `all_aborted_by_us`: whether every key of the victim was removed by a PREEMPT AND
    /// ABORT of ours: the target answers it once the victim's queued commands are
    /// aborted. A key removed by plain PREEMPT, or found gone (another host's preempt,
    /// which may have been plain), leaves commands the target had accepted free to land
    /// for a while. A device whose keys were found gone still counts as aborted by us
    /// when it is made of logical units an earlier device of this pass is made of too, on
    /// which our PREEMPT AND ABORT removed every doomed key: the abort was the LU's, and
    /// the target answered it after the victim's queued commands there were done. A key
    /// another host removed is never counted so (its abort may still be under way): the
    /// fence model's planted bug `found-gone-skips-drain` shows the overlap that makes
    /// (`lockd-sim --model fence-abort`, first on seed 409). On the VM bed (`--storage
    /// lio|nvme-tcp|multipath`, the lockspace's map and the LUN as two devices) fences
    /// counted 0.1–0.25 s after the preempt with overlaps=0.
    fn try_preempt_peer(
        &self,
        host_id: u64,
        generation: u64,
        our_key: u64,
        stop: &AtomicBool,
    ) -> Result<PeerFenceOutcome, FenceError> {
        let victim = lvm_key(host_id, generation)?;
        let mut preempted = false;
        let mut all_aborted_by_us = true;
        let mut aborted_on: Vec<bool> = Vec::with_capacity(self.devices.len());
        for (i, dev) in self.devices.iter().enumerate() {
            let covered = covered_by_earlier_abort(&self.units, &aborted_on, i);
            aborted_on.push(false);
            let now_keys = self.cmd(dev, "READ KEYS", dev.read_keys())?;
            let doomed = match device_plan(&fence_keys(&now_keys.keys), host_id, generation) {
                DevicePlan::Rejoined => return Ok(PeerFenceOutcome::Rejoined),
                DevicePlan::Preempt(doomed) => doomed,
            };
            if doomed.is_empty() && !covered {
                all_aborted_by_us = false;
            }
            let mut all_aborted_here = !doomed.is_empty();
            if !doomed.is_empty() {
                // A preempt without a reservation would leave the victim free to write, and
                // making one here could refuse a live host without a key (the pass
                // decides the reservation): not confirmed, the leases wait host_dead.
                let st = self.cmd(dev, "READ RESERVATION", dev.read_reservation())?;
                if st.reservation.is_none() {
                    warn!(
                        device = %dev.path().display(),
                        host_id,
                        "storage fencing: no reservation stands; not preempting"
                    );
                    return Ok(PeerFenceOutcome::NotConfirmed);
                }
            }
            for key in doomed {
                let t0 = std::time::Instant::now();
                let done = match dev.preempt_confirmed(our_key, key, RESERVATION, true) {
                    Ok(done) => done,
                    Err(e) => match self.victim_already_gone(dev, our_key, e)? {
                        true => {
                            all_aborted_here = false;
                            if !covered {
                                all_aborted_by_us = false;
                            }
                            info!(
                                device = %dev.path().display(),
                                host_id,
                                generation,
                                key = format_args!("{key:#018x}"),
                                "storage fencing: the key was already preempted (by another \
                                 host); our own key stands"
                            );
                            continue;
                        }
                        false => return Ok(PeerFenceOutcome::NotConfirmed),
                    },
                };
                if done.action != OutAction::PreemptAndAbort {
                    all_aborted_by_us = false;
                    all_aborted_here = false;
                }
                log_preempt(dev, (host_id, generation, key), &done, t0);
                preempted |= key == victim;
            }
            aborted_on[i] = all_aborted_here;
        }
        // Why a fenced host's write cannot land beside the new holder's: the victim's
        // leases are taken only after the read-back below, and that waits out every write
        // the target may still hold. Tried by the fence model's planted bug
        // `take-without-drain` (`lockd-sim --model fence --plant-bug take-without-drain`,
        // first caught on seed 122; `scripts/sim.sh`) and checked on tgt by the VM bed
        // (`fence_notes`: no fence mark within 2 s of its preempt, every pr-* scenario).
        // A removal or shutdown cuts the wait short, and the fence does not count.
        if !all_aborted_by_us && self.drain_ms > 0 {
            info!(
                host_id,
                generation,
                drain_ms = self.drain_ms,
                "storage fencing: the victim's queued commands were not aborted by us; waiting \
                 fence_drain_ms before the fence counts"
            );
            wait_unless_stopped(self.drain_ms, stop)?;
        }
        if self.read_back_confirms(host_id, generation, preempted)? {
            Ok(PeerFenceOutcome::Confirmed { preempted })
        } else {
            Ok(PeerFenceOutcome::NotConfirmed)
        }
    }

    /// A PREEMPT that failed: Ok(true) when a reservation conflict came from the
    /// victim's key being gone already (another host's preempt), Ok(false) when the key
    /// list cannot tell (truncated: not deciding), else the error (our own key gone too:
    /// we are fenced). Telling the two conflicts apart matters: taking every conflict for
    /// our own fence would give up leases a healthy host holds (the fence model's planted
    /// bug `preempt-conflict-means-fenced`, `lockd-sim --model fence`, `scripts/sim.sh`).
    fn victim_already_gone(
        &self,
        dev: &PrDevice,
        our_key: u64,
        e: PrError,
    ) -> Result<bool, FenceError> {
        let command_error = |source| FenceError::Command {
            path: dev.path().to_path_buf(),
            what: "PREEMPT",
            source,
        };
        if !e.is_reservation_conflict() {
            return Err(command_error(e));
        }
        let keys = self.cmd(dev, "READ KEYS", dev.read_keys())?;
        match preempt_conflict(&keys.keys, keys.truncated, our_key) {
            PreemptConflict::VictimAlreadyGone => Ok(true),
            PreemptConflict::WeAreFenced => Err(command_error(e)),
            PreemptConflict::Unknown => {
                warn!("storage fencing: the key list was truncated; not deciding");
                Ok(false)
            }
        }
    }

    /// The read-back after the preempts: true when every device confirms the victim's
    /// keys gone under a standing reservation (`device_confirms`). A key of another
    /// scheme is warned about once per fence (when this pass `preempted`), and keeps the
    /// fence unconfirmed: it may be the victim's own path, free to write (the planted bug
    /// `foreign-keys-ignored`, `lockd-sim --model fence-multipath`, first caught on seed
    /// 57; on guests, `scripts/vmbed.sh … --storage multipath`).
    fn read_back_confirms(
        &self,
        host_id: u64,
        generation: u64,
        preempted: bool,
    ) -> Result<bool, FenceError> {
        for dev in &self.devices {
            let after = self.cmd(dev, "READ KEYS", dev.read_keys())?;
            let resv = self.cmd(dev, "READ RESERVATION", dev.read_reservation())?;
            let mut after_keys = fence_keys(&after.keys);
            if crate::planted::active(crate::planted::Bug::ForeignKeysIgnored) {
                after_keys.retain(|k| k.owner.is_some());
            }
            if preempted {
                // Said once per fence (the pass's later attempts find nothing to preempt).
                for k in after_keys.iter().filter(|k| k.owner.is_none()) {
                    warn!(
                        device = %dev.path().display(),
                        host_id,
                        generation,
                        key = format_args!("{:#018x}", k.raw),
                        "storage fencing: a key of another scheme is registered (a multipath \
                         reservation_key, fence_scsi, mpathpersist): it may be this host's \
                         through another path, so the fence is not confirmed and its leases \
                         wait host_dead"
                    );
                }
            }
            if !device_confirms(
                &after_keys,
                after.truncated,
                resv.reservation.is_some(),
                host_id,
            ) {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

/// A key preempted: logged with the action the device took, and a warning when PREEMPT
/// AND ABORT was refused (the victim's queued commands are not aborted).
fn log_preempt(
    dev: &PrDevice,
    (host_id, generation, key): (u64, u64, u64),
    done: &lockd_scsi_pr::PreemptOutcome,
    t0: std::time::Instant,
) {
    if let Some(why) = &done.abort_refused {
        warn!(
            device = %dev.path().display(),
            why = %why,
            "storage fencing: PREEMPT AND ABORT refused, plain PREEMPT used: the victim's \
             commands already queued at the target are not aborted"
        );
    }
    info!(
        device = %dev.path().display(),
        host_id,
        generation,
        key = format_args!("{key:#018x}"),
        action = ?done.action,
        interface = %dev.interface().name(),
        ms = t0.elapsed().as_millis() as u64,
        "storage fencing: key preempted"
    );
}

/// Whether each logical unit device `i` is made of is also a unit of an earlier device on
/// which our PREEMPT AND ABORT removed every doomed key (`aborted_on[j]`): that abort
/// ended the victim's queued commands on the unit, whatever path it went down. A device
/// whose units are unknown (empty set) is never covered.
fn covered_by_earlier_abort(units: &[BTreeSet<String>], aborted_on: &[bool], i: usize) -> bool {
    let Some(mine) = units.get(i).filter(|u| !u.is_empty()) else {
        return false;
    };
    mine.iter().all(|unit| {
        aborted_on.iter().enumerate().take(i).any(|(j, &aborted)| {
            aborted && units.get(j).is_some_and(|theirs| theirs.contains(unit))
        })
    })
}

/// Whether READ RESERVATION, READ KEYS and READ RESERVATION again, in that order, show
/// one PR state: the same PR generation in all three, the same reservation before and
/// after, and a reservation's holder key (0 for the all-registrants types) on the list.
fn one_pr_state(
    before: &lockd_scsi_pr::ReservationState,
    keys: &lockd_scsi_pr::Keys,
    after: &lockd_scsi_pr::ReservationState,
) -> bool {
    before == after
        && keys.generation == after.generation
        && after
            .reservation
            .as_ref()
            .is_none_or(|r| r.key == 0 || keys.keys.contains(&r.key))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn a_device_counts_as_aborted_only_under_an_earlier_abort_on_all_its_units() {
        // A map over the LU, the LU's disk, another LU, a device of unknown units.
        let units = vec![
            set(&["wwid:A"]),
            set(&["wwid:A"]),
            set(&["wwid:B"]),
            set(&[]),
            set(&["wwid:A", "wwid:B"]),
        ];
        assert!(!covered_by_earlier_abort(&units, &[], 0));
        assert!(covered_by_earlier_abort(&units, &[true], 1));
        assert!(
            !covered_by_earlier_abort(&units, &[false], 1),
            "no abort of ours"
        );
        assert!(
            !covered_by_earlier_abort(&units, &[true, true], 2),
            "another LU"
        );
        assert!(
            !covered_by_earlier_abort(&units, &[true, true, true], 3),
            "unknown units"
        );
        assert!(
            !covered_by_earlier_abort(&units, &[true, true, false, true], 4),
            "B was not aborted by us"
        );
        assert!(covered_by_earlier_abort(
            &units,
            &[true, true, true, true],
            4
        ));
    }

    /// The drain (up to fence_drain_ms, 10 minutes at most) and the join's host_dead wait
    /// end within 100 ms of a removal or shutdown, and a fence cut short does not count:
    /// the core gets `Failed` (it marks nobody: `lockd_core::fencing`'s test
    /// `a_preempt_that_failed_marks_nobody_and_is_tried_again`).
    #[test]
    fn a_stop_cuts_the_drain_short() {
        use std::sync::Arc;
        use std::time::Instant;
        let stop = Arc::new(AtomicBool::new(false));
        let t0 = Instant::now();
        assert!(wait_unless_stopped(250, &stop).is_ok());
        assert!(t0.elapsed() >= Duration::from_millis(250));
        let setter = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(300));
                stop.store(true, Ordering::SeqCst);
            })
        };
        let t0 = Instant::now();
        let waited = wait_unless_stopped(600_000, &stop);
        let took = t0.elapsed();
        setter.join().expect("setter");
        assert!(matches!(waited, Err(FenceError::Stopped)), "{waited:?}");
        assert!(took < Duration::from_millis(1_000), "{took:?}");
        assert!(matches!(
            wait_unless_stopped(0, &stop),
            Err(FenceError::Stopped)
        ));
        assert!(matches!(
            preempt_outcome(Err(FenceError::Stopped)),
            Err((PeerFenceOutcome::Failed, FenceError::Stopped))
        ));
        let confirmed = PeerFenceOutcome::Confirmed { preempted: true };
        assert_eq!(preempt_outcome(Ok(confirmed)).ok(), Some(confirmed));
    }

    /// A read torn by a target restart (the old state, then the empty one) is not one
    /// PR state; a steady one is.
    #[test]
    fn a_key_read_torn_across_a_target_restart_is_not_used() {
        use lockd_scsi_pr::{Keys, Reservation, ReservationState};
        let resv = |generation, key: Option<u64>| ReservationState {
            generation,
            reservation: key.map(|key| Reservation {
                key,
                scope: 0,
                type_code: 5,
                pr_type: None,
            }),
        };
        let keys = |generation, keys: Vec<u64>| Keys {
            generation,
            reported_len_bytes: 8 * keys.len() as u32,
            keys,
            truncated: false,
        };
        let (a, b) = (0x1000000000010001, 0x1000000000010002);
        // Steady: reservation held by b, both keys listed.
        assert!(one_pr_state(
            &resv(7, Some(b)),
            &keys(7, vec![a, b]),
            &resv(7, Some(b))
        ));
        // All-registrants types report key 0.
        assert!(one_pr_state(
            &resv(7, Some(0)),
            &keys(7, vec![a, b]),
            &resv(7, Some(0))
        ));
        // No reservation, no keys (a target that lost its state, read whole).
        assert!(one_pr_state(
            &resv(0, None),
            &keys(0, vec![]),
            &resv(0, None)
        ));
        // The restart between the reservation and the keys.
        assert!(!one_pr_state(
            &resv(7, Some(b)),
            &keys(0, vec![]),
            &resv(0, None)
        ));
        // Between the keys and the second reservation read.
        assert!(!one_pr_state(
            &resv(7, Some(b)),
            &keys(7, vec![a, b]),
            &resv(0, None)
        ));
        // A holder not on the list.
        assert!(!one_pr_state(
            &resv(2, Some(b)),
            &keys(2, vec![a]),
            &resv(2, Some(b))
        ));
        // A registration between the reads (the generation moved).
        assert!(!one_pr_state(
            &resv(7, Some(b)),
            &keys(8, vec![a, b]),
            &resv(8, Some(b))
        ));
    }

    #[test]
    fn keys_are_given_to_the_core_with_the_host_and_generation_they_name_or_none() {
        let k = lvm_key(3, 9).unwrap();
        assert_eq!(
            fence_keys(&[k, 0]),
            vec![
                FenceKey {
                    raw: k,
                    owner: Some((3, 9))
                },
                FenceKey {
                    raw: 0,
                    owner: None
                }
            ]
        );
    }
}
