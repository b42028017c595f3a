//! What our renewals carry to the other hosts of a lockspace ([`Outgoing`], kept in the
//! lockspace's status): the host event SET_EVENT set, and the bits of our notification
//! bitmap (a REQUEST asks the holder's host to examine its leases; SET_EVENT tells the
//! event's target to read it). The core decides them (`CoreRequest::SetEvent`,
//! `CoreRequest::RequestLease` and `Input::RequestWritten`); the shell's renewal thread reads what to write at each renewal
//! ([`Outgoing::renew_input`]) and writes it.
//!
//! Invariants:
//! - a bit is set for at most `set_bitmap_seconds` from the step that set it, and only
//!   for a host_id of 1 to [`MAX_EVENT_HOST_ID`];
//! - an event is replaced within its period only with `SANLK_SETEV_REPLACE_EVENT` (or by
//!   the same event), as sanlock's `lockspace_set_event`: otherwise the target could
//!   miss the first one.

use std::collections::BTreeMap;

use lease_core::delta::{EventFields, RenewInput};

/// The highest host_id an event or a bit can name (sanlock's DEFAULT_MAX_HOSTS).
pub const MAX_EVENT_HOST_ID: u64 = 2000;

/// SET_EVENT's flags.
pub use client_lib::proto::{
    SANLK_SETEV_ALL_HOSTS as SETEV_ALL_HOSTS, SANLK_SETEV_CLEAR_EVENT as SETEV_CLEAR_EVENT,
    SANLK_SETEV_CLEAR_HOSTID as SETEV_CLEAR_HOSTID,
    SANLK_SETEV_CUR_GENERATION as SETEV_CUR_GENERATION,
    SANLK_SETEV_REPLACE_EVENT as SETEV_REPLACE_EVENT,
};

/// A host event (`sanlk_host_event`): to `host_id` at `generation` (0: any); the wire's
/// own record, so the daemon passes SET_EVENT's event to the core as it was decoded.
pub use client_lib::wire::HostEvent;

/// Why SET_EVENT was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventRefused {
    /// host_id 0, or beyond the lockspace's hosts (-EINVAL).
    BadHostId,
    /// Another event is being sent and REPLACE_EVENT was not given (-EBUSY).
    Busy,
}

impl EventRefused {
    pub fn code(self) -> i32 {
        match self {
            EventRefused::BadHostId => -crate::errno::EINVAL,
            EventRefused::Busy => -crate::errno::EBUSY,
        }
    }

    pub fn why(self) -> &'static str {
        match self {
            EventRefused::BadHostId => "a host_id of 1 to the lockspace's hosts is needed",
            EventRefused::Busy => "another event is being sent (REPLACE_EVENT replaces it)",
        }
    }
}

/// What our next renewals write for the other hosts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outgoing {
    /// The host event, and when it was set (monotime s).
    pub host_event: HostEvent,
    pub event_set_s: u64,
    /// host_id → until when (monotime s) its bit is set.
    pub bits_until: BTreeMap<u64, u64>,
}

impl Outgoing {
    /// SET_EVENT at `now_s`, in a lockspace of `max_hosts` hosts whose bits last
    /// `period_s` (`set_bitmap_seconds`). `he.generation` is already the target's
    /// current one when `SETEV_CUR_GENERATION` asked for it (the shell reads it from
    /// its host monitor).
    pub fn set_event(
        &mut self,
        now_s: u64,
        period_s: u64,
        max_hosts: u64,
        he: HostEvent,
        flags: u32,
    ) -> Result<(), EventRefused> {
        if he.host_id == 0 || he.host_id > max_hosts.min(MAX_EVENT_HOST_ID) {
            return Err(EventRefused::BadHostId);
        }
        self.bits_until.retain(|_, until| *until >= now_s);
        if flags & SETEV_CLEAR_EVENT != 0 {
            self.host_event = HostEvent::default();
            self.event_set_s = now_s;
            return Ok(());
        }
        if flags & SETEV_CLEAR_HOSTID != 0 {
            self.bits_until.remove(&he.host_id);
            return Ok(());
        }
        let cur = self.host_event;
        if flags & SETEV_REPLACE_EVENT == 0
            && now_s.saturating_sub(self.event_set_s) < period_s
            && cur.event != 0
            && he.event != 0
            && cur.event != he.event
        {
            return Err(EventRefused::Busy);
        }
        self.host_event = he;
        self.event_set_s = now_s;
        if flags & SETEV_ALL_HOSTS != 0 {
            for id in 1..=max_hosts.min(MAX_EVENT_HOST_ID) {
                self.bits_until.insert(id, now_s + period_s);
            }
        } else {
            self.bits_until.insert(he.host_id, now_s + period_s);
        }
        Ok(())
    }

    /// A REQUEST found `host_id` holding a lease: its bit is set for `period_s`.
    /// Ignored for a host_id out of range.
    pub fn set_bit(&mut self, now_s: u64, period_s: u64, host_id: u64) {
        if (1..=MAX_EVENT_HOST_ID).contains(&host_id) {
            self.bits_until.retain(|_, until| *until >= now_s);
            self.bits_until.insert(host_id, now_s + period_s);
        }
    }

    /// What the renewal at `now_s` writes: the event, and the bits still set (an expired
    /// bit is not written; it is dropped at the next change, and the map never holds
    /// more than [`MAX_EVENT_HOST_ID`] entries).
    pub fn renew_input(&self, now_s: u64) -> RenewInput {
        let mut input = RenewInput {
            event: EventFields {
                target_generation: self.host_event.generation,
                event: self.host_event.event,
                data: self.host_event.data,
            },
            ..RenewInput::default()
        };
        for (&host_id, _) in self.bits_until.iter().filter(|(_, until)| **until >= now_s) {
            if let Some((byte, mask)) = disk_format::delta::bit_position(host_id) {
                input.bitmap[byte] |= mask;
            }
        }
        input
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PERIOD: u64 = 10;

    fn ev(host_id: u64, event: u64) -> HostEvent {
        HostEvent {
            host_id,
            generation: 3,
            event,
            data: 7,
        }
    }

    fn bits(out: &Outgoing, now_s: u64) -> Vec<u64> {
        let input = out.renew_input(now_s);
        (1..=MAX_EVENT_HOST_ID)
            .filter(|&h| {
                disk_format::delta::bit_position(h)
                    .is_some_and(|(byte, mask)| input.bitmap[byte] & mask != 0)
            })
            .collect()
    }

    #[test]
    fn an_event_sets_its_targets_bit_for_one_period_and_is_written_with_each_renewal() {
        let mut out = Outgoing::default();
        assert_eq!(out.set_event(100, PERIOD, 2000, ev(5, 1), 0), Ok(()));
        let input = out.renew_input(100);
        assert_eq!(
            (
                input.event.event,
                input.event.data,
                input.event.target_generation
            ),
            (1, 7, 3)
        );
        assert_eq!(bits(&out, 100 + PERIOD), vec![5]);
        assert_eq!(bits(&out, 100 + PERIOD + 1), Vec::<u64>::new());
        out.set_bit(100 + PERIOD + 1, PERIOD, 9);
        assert_eq!(
            out.bits_until.len(),
            1,
            "an expired bit is dropped at the next change"
        );
    }

    #[test]
    fn another_event_within_the_period_needs_replace_and_clear_flags_clear() {
        let mut out = Outgoing::default();
        out.set_event(100, PERIOD, 2000, ev(5, 1), 0).expect("set");
        assert_eq!(
            out.set_event(101, PERIOD, 2000, ev(6, 2), 0),
            Err(EventRefused::Busy)
        );
        assert_eq!(
            out.set_event(101, PERIOD, 2000, ev(6, 1), 0),
            Ok(()),
            "the same event"
        );
        assert_eq!(
            out.set_event(102, PERIOD, 2000, ev(6, 2), SETEV_REPLACE_EVENT),
            Ok(())
        );
        assert_eq!(
            out.set_event(200, PERIOD, 2000, ev(7, 3), 0),
            Ok(()),
            "period over"
        );
        assert_eq!(
            out.set_event(201, PERIOD, 2000, ev(7, 0), SETEV_CLEAR_HOSTID),
            Ok(())
        );
        assert_eq!(
            bits(&out, 201),
            Vec::<u64>::new(),
            "5 and 6 expired, 7 cleared"
        );
        assert_eq!(
            out.set_event(202, PERIOD, 2000, ev(7, 0), SETEV_CLEAR_EVENT),
            Ok(())
        );
        assert_eq!(out.host_event, HostEvent::default());
    }

    #[test]
    fn all_hosts_sets_every_bit_of_the_lockspace_and_bad_host_ids_are_refused() {
        let mut out = Outgoing::default();
        assert_eq!(
            out.set_event(100, PERIOD, 8, ev(2, 1), SETEV_ALL_HOSTS),
            Ok(())
        );
        assert_eq!(bits(&out, 100), (1..=8).collect::<Vec<u64>>());
        for host_id in [0, 9, MAX_EVENT_HOST_ID + 1] {
            assert_eq!(
                out.set_event(100, PERIOD, 8, ev(host_id, 1), 0),
                Err(EventRefused::BadHostId),
                "host_id {host_id}"
            );
        }
        out.set_bit(100, PERIOD, 0);
        out.set_bit(100, PERIOD, MAX_EVENT_HOST_ID + 1);
        assert_eq!(out.bits_until.len(), 8, "out-of-range bits are not set");
    }
}
