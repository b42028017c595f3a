//! Bugs planted on purpose, so that the chaos bed's checker (tests/vmbed/chaos.py,
//! `scripts/chaos.sh --plant-bug NAME`) is proven able to see a broken safety rule on
//! real guests. Only a daemon built with the `planted-bugs` feature carries them, and
//! only the one named by `LOCKD_PLANTED_BUG` at start is active; a production build
//! (no feature) has none: [`active`] is a constant `false` there.
//!
//! Invariant: no default build, package or CI test binary enables `planted-bugs`; the
//! bed builds its planted daemon into a target directory of its own.

/// One planted bug.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bug {
    /// A lease whose owner merely looks dead (its renewal stopped once) is taken without
    /// waiting host_dead (lease-core's `PlantedBug::NoHostDeadWait`).
    NoHostDeadWait,
    /// A peer is marked fenced, and its leases taken, without a confirmed preempt: the
    /// fence thread reports the preempt confirmed and never sends it.
    TakeBeforeConfirm,
    /// Loss notices reach the holders 5 s late, after the kill escalation's signals.
    KillBeforeNotice,
    /// A join registers its new key with REGISTER AND IGNORE EXISTING KEY after deciding
    /// from one key list whether to wait (the rule before issue 38's item 4): a preempt
    /// of our previous key that lands in between is undone for our initiator.
    JoinRegisterIgnoreExisting,
    /// The fence pass reserves the device as soon as it sees no reservation, although a
    /// live peer has no key (sanlock, or lockd without fencing, or not yet converted):
    /// the rule before issue 38's items 10 and 11. That peer's next renewal write then
    /// meets RESERVATION CONFLICT and it counts itself fenced.
    ReserveWithUnkeyedPeers,
    /// A removal or shutdown asked for after the lockspace failed lets the watchdog be
    /// disarmed once the holders are gone, even where their writes may still be queued in
    /// a network filesystem's client (the rule before issue 38's item 5).
    RemovalDisarms,
    /// A preempt's read-back counts only the keys of the victim's host_id: a key of
    /// another scheme (a multipath `reservation_key` on the victim's other path) is left
    /// in place and the fence confirmed while the victim still writes through it (the
    /// rule before issue 38's item 7).
    ForeignKeysIgnored,
    /// Storage fencing preempts a peer standing still for 4·D (the floor before issue
    /// 38's item 8): the core's `CorePlantedBug::PreemptFloorFourIoTimeouts`.
    PreemptFloorFourIoTimeouts,
    /// An exclusive release does not write the LVB its holder set: the value is lost
    /// while the release reports success (the chaos checker's LVB rule must see it).
    LvbNotWritten,
}

/// Every bug with its name on the command line and in `LOCKD_PLANTED_BUG`.
pub const ALL: [(&str, Bug); 9] = [
    ("no-host-dead-wait", Bug::NoHostDeadWait),
    ("take-before-confirm", Bug::TakeBeforeConfirm),
    ("kill-before-notice", Bug::KillBeforeNotice),
    (
        "join-register-ignore-existing",
        Bug::JoinRegisterIgnoreExisting,
    ),
    ("reserve-with-unkeyed-peers", Bug::ReserveWithUnkeyedPeers),
    ("removal-disarms", Bug::RemovalDisarms),
    ("foreign-keys-ignored", Bug::ForeignKeysIgnored),
    ("preempt-floor-4d", Bug::PreemptFloorFourIoTimeouts),
    ("lvb-not-written", Bug::LvbNotWritten),
];

/// A point where a bed can have the daemon stop itself (SIGSTOP), to widen a race window
/// the honest way: the daemon stops exactly there, and the bed resumes it (SIGCONT) once
/// the other side of the race has acted. Named by `LOCKD_PAUSE_AT` at start; only with
/// the `planted-bugs` feature (a production build never stops itself).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PausePoint {
    /// Storage fencing, join: the key list and reservation were read, the rule decided,
    /// nothing registered yet (daemon/src/fence.rs `register_for_join`).
    JoinKeysRead,
}

/// Every pause point with its name in `LOCKD_PAUSE_AT`.
pub const PAUSE_POINTS: [(&str, PausePoint); 1] = [("join-keys-read", PausePoint::JoinKeysRead)];

/// Stops the daemon here (once) when `LOCKD_PAUSE_AT` names `point` in a daemon built
/// with the `planted-bugs` feature; returns at once otherwise.
pub fn pause_point(point: PausePoint) {
    imp::pause(point)
}

/// Reads `LOCKD_PLANTED_BUG` once, at start. An unknown name is an error (the daemon
/// refuses to start); a name given to a daemon built without the feature too, so a
/// bed never believes it runs a planted bug it does not.
pub fn init() -> Result<(), String> {
    let Some(name) = std::env::var_os("LOCKD_PLANTED_BUG") else {
        return Ok(());
    };
    let name = name.to_string_lossy().into_owned();
    let Some(&(_, bug)) = ALL.iter().find(|(n, _)| *n == name) else {
        return Err(format!("LOCKD_PLANTED_BUG={name}: no such planted bug"));
    };
    imp::set(bug, &name)
}

/// Whether `bug` is the planted one.
pub fn active(bug: Bug) -> bool {
    imp::get() == Some(bug)
}

#[cfg(feature = "planted-bugs")]
mod imp {
    use super::Bug;
    use std::sync::OnceLock;

    static PLANTED: OnceLock<Bug> = OnceLock::new();

    pub fn set(bug: Bug, name: &str) -> Result<(), String> {
        tracing::warn!(
            bug = name,
            "PLANTED BUG active: this daemon breaks a safety rule on purpose"
        );
        PLANTED
            .set(bug)
            .map_err(|_| "planted bug set twice".to_string())
    }

    pub fn get() -> Option<Bug> {
        PLANTED.get().copied()
    }

    pub fn pause(point: super::PausePoint) {
        static DONE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
        let Some(name) = std::env::var_os("LOCKD_PAUSE_AT") else {
            return;
        };
        let named = super::PAUSE_POINTS
            .iter()
            .any(|&(n, p)| p == point && name.to_str() == Some(n));
        if !named || DONE.swap(true, std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        tracing::warn!(
            point = name.to_string_lossy().as_ref(),
            "PAUSE POINT reached: the daemon stops itself (SIGSTOP) until resumed"
        );
        if let Err(e) = nix::sys::signal::raise(nix::sys::signal::Signal::SIGSTOP) {
            tracing::error!(error = %e, "pause point: cannot stop ourselves");
        }
    }
}

#[cfg(not(feature = "planted-bugs"))]
mod imp {
    use super::Bug;

    pub fn set(_bug: Bug, name: &str) -> Result<(), String> {
        Err(format!(
            "LOCKD_PLANTED_BUG={name}: this daemon was built without the planted-bugs feature"
        ))
    }

    pub fn get() -> Option<Bug> {
        None
    }

    pub fn pause(_point: super::PausePoint) {}
}
