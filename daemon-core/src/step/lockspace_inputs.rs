//! The step's lockspace path: a lockspace thread's reports (a join or renewal begun, its
//! outcome, the delta sectors a renewal read, the delta release begun), SET_CONFIG, and
//! storage fencing's inputs, each applied to the lockspace listed under its id.
//!
//! Invariants:
//! - a report names its lockspace by id, and one for a gone lockspace (or an id no
//!   longer kept) changes nothing: a late report never touches a newer lockspace of the
//!   same name;
//! - a renewal's time is the one it reports (when it began), never the step's;
//! - a fencing verdict is applied in the step that reaches it ([`apply_fence_verdict`]):
//!   we are fenced → our lease is lost as a corrupt one; a peer fenced → marked in the
//!   host monitor, only after a preempt the shell confirmed.

use disk_format::Geometry;
use lease_core::sectors::HostSectors;
use lease_core::timeouts;

use crate::clients::LeaseHold;
use crate::fencing::{FenceSt, FenceVerdict, KeysRead, PeerFenceOutcome};
use crate::io::Effect;
use crate::space_state::RenewalRec;

use super::{Core, CorePlantedBug, CoreSpace};

impl<S, H: LeaseHold> Core<S, H> {
    /// [`crate::Input::RenewalOk`].
    pub(super) fn renewal_ok(&mut self, id: u32, last_success_s: u64, rec: RenewalRec) {
        if let Some(st) = self.live_space_st_mut(id) {
            st.renewal_ok(last_success_s, rec);
        }
    }

    /// [`crate::Input::RenewalFailed`].
    pub(super) fn renewal_failed(&mut self, id: u32, code: i32, corrupt: bool) {
        if let Some(st) = self.live_space_st_mut(id) {
            st.renewal_failed(code, corrupt);
        }
    }

    /// [`crate::Input::HostsRead`]: the host monitor records the read; a fenced peer
    /// seen renewing raises fencing's alarm; the notifications addressed to us go to the
    /// shell, asking for an examine at most once per `set_bitmap_seconds` per host.
    pub(super) fn hosts_read(
        &mut self,
        now_s: u64,
        id: u32,
        read_at_ms: u64,
        sectors: &HostSectors,
        whole_area: bool,
        fx: &mut Vec<Effect<H>>,
    ) {
        let Some(sp) = self.live_space_mut(id) else {
            return;
        };
        let notes = sp
            .monitor
            .observe_read(read_at_ms / 1000, sectors, whole_area);
        if let Some(f) = sp.fence.as_mut() {
            // Our own record is sighted too; no pass judges it.
            for (i, sector) in sectors.iter().enumerate() {
                if let Some(v) = sector {
                    let record = (v.owner_id(), v.owner_generation(), v.timestamp());
                    f.sighted(i as u64 + 1, record, read_at_ms);
                }
            }
            for (host_id, h, _) in sp.monitor.hosts(now_s) {
                let renewing = h.fenced(h.owner_generation)
                    && h.owner_id == host_id
                    && h.changed_at_last_check();
                if renewing && f.alarm_fenced_renewing(host_id, h.owner_generation) {
                    fx.push(Effect::FenceVerdict {
                        id,
                        ls: sp.name,
                        verdict: FenceVerdict::FencedPeerRenews {
                            host_id,
                            generation: h.owner_generation,
                        },
                    });
                }
            }
        }
        if !notes.is_empty() {
            let period = timeouts::set_bitmap_seconds(sp.io_timeout_s);
            let mut examine = false;
            for n in &notes {
                if n.from_host_id == 0 || n.from_host_id > crate::events::MAX_EVENT_HOST_ID {
                    continue;
                }
                let due = sp
                    .last_examine
                    .get(&n.from_host_id)
                    .is_none_or(|&t| now_s >= t + period);
                if due {
                    sp.last_examine.insert(n.from_host_id, now_s);
                    examine = true;
                }
            }
            fx.push(Effect::HostNotifications { id, notes, examine });
        }
    }

    /// [`crate::Input::FenceRegistered`].
    pub(super) fn fence_registered(
        &mut self,
        now_s: u64,
        id: u32,
        key: u64,
        preempt_cfg_s: u64,
        acts: bool,
    ) {
        let old_floor = self.planted(CorePlantedBug::PreemptFloorFourIoTimeouts);
        if let Some(sp) = self.live_space_mut(id) {
            let io_timeout_s = sp.io_timeout_s;
            let f = sp
                .fence
                .get_or_insert_with(|| FenceSt::new(preempt_cfg_s, io_timeout_s));
            f.seed_sightings(&sp.monitor, now_s);
            f.acts = acts;
            if old_floor {
                f.preempt_floor_io_timeouts = 4;
            }
            f.registered(key);
        }
    }

    /// [`crate::Input::FenceUnregistered`].
    pub(super) fn fence_unregistered(&mut self, id: u32) {
        if let Some(f) = self.live_space_mut(id).and_then(|sp| sp.fence.as_mut()) {
            f.unregistered();
        }
    }

    /// [`crate::Input::FenceLook`]: the fence pass's next action, unless our lease is
    /// lost or being released.
    pub(super) fn fence_look(&mut self, now_s: u64, id: u32, fx: &mut Vec<Effect<H>>) {
        if let Some(sp) = self.live_space_mut(id) {
            let lost = sp.st.space_dead || sp.st.releasing;
            if let Some(f) = sp.fence.as_mut().filter(|_| !lost) {
                if let Some(action) = f.look(&sp.monitor, now_s) {
                    fx.push(Effect::Fence { id, action });
                }
            }
        }
    }

    /// [`crate::Input::FenceKeysRead`]: the key list read, with our record's stillness up
    /// to the read's end; its actions, then its verdict.
    pub(super) fn fence_keys_read(
        &mut self,
        now_s: u64,
        id: u32,
        read: &KeysRead,
        read_at_ms: u64,
        fx: &mut Vec<Effect<H>>,
    ) {
        let Some(sp) = self.live_space_mut(id) else {
            return;
        };
        let Some(f) = sp.fence.as_mut() else {
            return;
        };
        let max_peer_io_s = sp
            .monitor
            .hosts(now_s)
            .iter()
            .map(|(_, h, _)| u64::from(h.io_timeout))
            .max()
            .unwrap_or(0);
        let gap_ms = sp
            .st
            .longest_renewal_gap_ms(f.stillness_since_s(max_peer_io_s), read_at_ms);
        let mut actions = Vec::new();
        let verdict = f.keys_read(read, now_s, gap_ms, &mut actions);
        fx.extend(
            actions
                .into_iter()
                .map(|action| Effect::Fence { id, action }),
        );
        if let Some(v) = verdict {
            apply_fence_verdict(sp, v, fx);
        }
    }

    /// [`crate::Input::PeerFenceDone`].
    pub(super) fn peer_fence_done(
        &mut self,
        id: u32,
        host_id: u64,
        generation: u64,
        outcome: PeerFenceOutcome,
        fx: &mut Vec<Effect<H>>,
    ) {
        if let Some(sp) = self.live_space_mut(id) {
            let verdict = sp
                .fence
                .as_mut()
                .and_then(|f| f.peer_done(host_id, generation, outcome));
            if let Some(v) = verdict {
                apply_fence_verdict(sp, v, fx);
            }
        }
    }

    /// [`crate::Input::JoinStarted`].
    pub(super) fn join_started(&mut self, now_s: u64, id: u32, geometry: Geometry) {
        if let Some(st) = self.live_space_st_mut(id) {
            st.geometry = Some(geometry);
            st.acquire_last_attempt = now_s;
        }
    }

    /// [`crate::Input::RenewalStarted`].
    pub(super) fn renewal_started(&mut self, now_s: u64, id: u32) {
        if let Some(st) = self.live_space_st_mut(id) {
            st.renewal_last_attempt = now_s;
        }
    }

    /// [`crate::Input::DeltaReleasing`].
    pub(super) fn delta_releasing(&mut self, id: u32) {
        if let Some(st) = self.live_space_st_mut(id) {
            st.releasing = true;
        }
    }

    /// [`crate::Input::SetConfig`].
    pub(super) fn set_config(
        &mut self,
        id: u32,
        used_by_orphans: Option<bool>,
        external_used: Option<bool>,
    ) {
        if let Some(st) = self.space_st_mut(id).filter(|st| !st.gone) {
            st.used_by_orphans = used_by_orphans.unwrap_or(st.used_by_orphans);
            st.external_used = external_used.unwrap_or(st.external_used);
        }
    }
}

/// Carries out a fencing verdict on lockspace `sp`: we are fenced → its lease is lost
/// as a corrupt one (-EBADE, what the storage answers a fenced host), so our holders
/// get the notice and are killed from the next tick on; a peer fenced → marked in the
/// monitor (given only when the monitor did not have it yet). Why no two holders: a
/// mark frees that peer generation's leases to our ballots at once, and
/// `FenceSt::peer_done` gives `PeerFenced` only for a preempt the shell confirmed on
/// every device (no key of the host left while a reservation stands), so the peer's
/// processes can no longer write any lease sector.
fn apply_fence_verdict<H>(sp: &mut CoreSpace, v: FenceVerdict, fx: &mut Vec<Effect<H>>) {
    match v {
        FenceVerdict::WeAreFenced(_) => sp.st.renewal_failed(-crate::errno::EBADE, true),
        FenceVerdict::PeerFenced {
            host_id,
            generation,
            ..
        } => {
            if !sp.monitor.mark_fenced(host_id, generation) {
                return;
            }
        }
        FenceVerdict::PeerNeverKeyed { .. }
        | FenceVerdict::PeerUnkeyed { .. }
        | FenceVerdict::FencedPeerRenews { .. }
        | FenceVerdict::StorageCleared { .. } => {}
    }
    fx.push(Effect::FenceVerdict {
        id: sp.id,
        ls: sp.name,
        verdict: v,
    });
}
