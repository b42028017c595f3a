//! The simulator's checks from the outside, judged from the clients' point of view.
//!
//! A client holds a lease from the reply that grants it (ACQUIRE, or CONVERT to
//! exclusive) until it asks to release it (a downgrade to shared counts from the request)
//! or dies (killed, exited, or its daemon restarted). The checks:
//! - never two holders of one resource at one instant unless both hold it shared, across
//!   all hosts;
//! - a kill order for a failed lockspace goes only to a pid that was given that
//!   lockspace's loss notice before, and that holds a lease of it at that instant;
//! - a kill order for another host's request of a lease goes only to a pid that holds
//!   that lease at that instant (or has an acquire of it under way: its daemon may hold
//!   it on disk already, as the first of several) and was named by the request's notice
//!   earlier in the same step (the core's `Input::Examined`);
//! - every such notice reached each watch connection open on the pid (`LOCKD_CMD_WATCH`)
//!   before its kill: the notice names it ([`WatchTo`]);
//! - a RELEASE is answered only after the disk release of each lease it gave up ended
//!   (no disk release of that lease on that host is still in flight);
//! - no ACQUIRE is granted on a host whose lockspace is not usable: from the step that
//!   stopped it (REM_LOCKSPACE or a forced shutdown of a listed one, a lost one retired)
//!   or ended it until a join of it is answered 0;
//! - with storage fencing, a holder on a host the storage refuses writes from (no key of
//!   it registered while a reservation stands) cannot write, so a conflict with it does
//!   not count while that lasts: once the host can write again (its key registered anew,
//!   or the reservation gone), every conflict it has is one.

use std::collections::{BTreeMap, BTreeSet};

use crate::watches::WatchTo;

/// A simulated client, unique over a whole run (never reused, like its pid).
pub type ClientId = u64;

/// The checks' state for one run.
#[derive(Debug, Default)]
pub struct DaemonSimChecker {
    /// resource index → holder → shared.
    holds: BTreeMap<usize, BTreeMap<ClientId, bool>>,
    /// (host, pid) given the loss notice of the lockspace.
    noticed: BTreeSet<(usize, i32)>,
    /// Clients with an ACQUIRE sent and not answered → the resources it asks for.
    acquiring: BTreeMap<ClientId, BTreeSet<usize>>,
    /// (host, resource index) → pids given the request notice in the host's examine
    /// step being carried out.
    request_noticed: BTreeMap<(usize, usize), BTreeSet<i32>>,
    /// (host, resource index) with a disk release in flight for a RELEASE of client
    /// slot `ci` (the slot whose request asked for it).
    releasing: BTreeMap<(usize, usize), u32>,
    /// (host, watch connection) → the pid it watches: the watches open now.
    watches: BTreeMap<(usize, u32), i32>,
    /// (host, watch connection, pid) given the lockspace's loss notice.
    watch_noticed: BTreeSet<(usize, u32, i32)>,
    /// (host, resource index) → watch connections given the request notice in the
    /// host's examine step being carried out.
    request_watch_noticed: BTreeMap<(usize, usize), BTreeSet<WatchTo>>,
    /// The host of each client.
    client_host: BTreeMap<ClientId, usize>,
    /// Hosts whose writes the storage refuses now (storage fencing).
    cut_off: BTreeSet<usize>,
    /// Hosts whose lockspace is usable (joined, not stopped or ended).
    space_up: BTreeSet<usize>,
    violations: Vec<String>,
}

impl DaemonSimChecker {
    pub fn violations(&self) -> &[String] {
        &self.violations
    }

    pub fn violate(&mut self, now_ms: u64, msg: String) {
        self.violations
            .push(format!("t={}.{:03}s {msg}", now_ms / 1000, now_ms % 1000));
    }

    /// Client `who` runs on `host`.
    pub fn client_started(&mut self, who: ClientId, host: usize) {
        self.client_host.insert(who, host);
    }

    /// Whether `who` runs on a host the storage refuses writes from now.
    fn cut_off_client(&self, who: ClientId) -> bool {
        self.client_host
            .get(&who)
            .is_some_and(|h| self.cut_off.contains(h))
    }

    /// The holders of `res` that conflict with `who` holding it (shared or not), both
    /// able to write.
    fn conflicts(&self, who: ClientId, res: usize, shared: bool) -> Vec<(ClientId, bool)> {
        if self.cut_off_client(who) {
            return Vec::new();
        }
        self.holds.get(&res).map_or_else(Vec::new, |holders| {
            holders
                .iter()
                .filter(|(h, s)| **h != who && (!shared || !**s) && !self.cut_off_client(**h))
                .map(|(h, s)| (*h, *s))
                .collect()
        })
    }

    /// `who` was granted `res` (shared or not) by a reply.
    pub fn granted(&mut self, now_ms: u64, who: ClientId, res: usize, shared: bool) {
        let conflicts = self.conflicts(who, res, shared);
        self.holds.entry(res).or_default().insert(who, shared);
        for (h, s) in conflicts {
            self.violate(
                now_ms,
                format!(
                    "client {who} got res{res} {} while client {h} holds it {}",
                    mode(shared),
                    mode(s)
                ),
            );
        }
    }

    /// `who` asked to downgrade `res` to shared: it holds it shared from now on.
    pub fn downgraded(&mut self, who: ClientId, res: usize) {
        if let Some(s) = self.holds.get_mut(&res).and_then(|h| h.get_mut(&who)) {
            *s = true;
        }
    }

    /// `who` asked to release `res`.
    pub fn released(&mut self, who: ClientId, res: usize) {
        if let Some(h) = self.holds.get_mut(&res) {
            h.remove(&who);
        }
    }

    /// `who` died: it holds nothing from now on.
    pub fn gone(&mut self, who: ClientId) {
        for h in self.holds.values_mut() {
            h.remove(&who);
        }
        self.acquiring.remove(&who);
    }

    /// `who` sent an ACQUIRE of `res`.
    pub fn acquire_sent(&mut self, who: ClientId, res: &[usize]) {
        self.acquiring.insert(who, res.iter().copied().collect());
    }

    /// `who`'s ACQUIRE was answered (granted or not).
    pub fn acquire_answered(&mut self, who: ClientId) {
        self.acquiring.remove(&who);
    }

    /// Whether `who` holds any lease now (the simulation has one lockspace).
    pub fn holds_any(&self, who: ClientId) -> bool {
        self.holds.values().any(|h| h.contains_key(&who))
    }

    /// The lockspace's loss notice reached `pid` on `host`, and was addressed to the
    /// watch connections `to`.
    pub fn noticed(&mut self, host: usize, pid: i32, to: &[WatchTo]) {
        self.noticed.insert((host, pid));
        for w in to {
            self.watch_noticed.insert((host, w.ci, w.pid));
        }
    }

    /// Connection `ci` of `host` watches `pid` from now on (its WATCH was answered 0).
    pub fn watch_opened(&mut self, host: usize, ci: u32, pid: i32) {
        self.watches.insert((host, ci), pid);
    }

    /// Watch connection `ci` of `host` closed.
    pub fn watch_closed(&mut self, host: usize, ci: u32) {
        self.watches.remove(&(host, ci));
    }

    /// The watch connections of `pid` on `host`.
    fn watches_of(&self, host: usize, pid: i32) -> Vec<WatchTo> {
        self.watches
            .iter()
            .filter(|((h, _), p)| *h == host && **p == pid)
            .map(|((_, ci), p)| WatchTo { ci: *ci, pid: *p })
            .collect()
    }

    /// A kill order reached `pid` (client `who`, if it is one) of a failed or removed
    /// lockspace: its loss notice (LockspaceFailed or LockspaceRemoved) came first.
    pub fn killed(&mut self, now_ms: u64, host: usize, pid: i32, who: Option<ClientId>) {
        if !self.noticed.contains(&(host, pid)) {
            self.violate(
                now_ms,
                format!("host{host}: pid {pid} killed before its loss notice"),
            );
        }
        for w in self.watches_of(host, pid) {
            if !self.watch_noticed.contains(&(host, w.ci, pid)) {
                self.violate(
                    now_ms,
                    format!(
                        "host{host}: pid {pid} killed before its watch connection {} had the loss notice",
                        w.ci
                    ),
                );
            }
        }
        if !who.is_some_and(|w| self.holds_any(w)) {
            self.violate(
                now_ms,
                format!("host{host}: pid {pid} killed, holding no lease of the lockspace"),
            );
        }
    }

    /// An examine step of `host` begins: request notices of its earlier steps no longer
    /// count.
    pub fn examine_begin(&mut self, host: usize) {
        self.request_noticed.retain(|(h, _), _| *h != host);
        self.request_watch_noticed.retain(|(h, _), _| *h != host);
    }

    /// The request notice of `res` reached `pids` on `host`, addressed to the watch
    /// connections `to`.
    pub fn request_noticed(&mut self, host: usize, res: usize, pids: &[i32], to: &[WatchTo]) {
        self.request_noticed
            .entry((host, res))
            .or_default()
            .extend(pids.iter().copied());
        self.request_watch_noticed
            .entry((host, res))
            .or_default()
            .extend(to.iter().copied());
    }

    /// A request's kill order for `res` reached `pid` (client `who`, if it is one).
    pub fn examine_killed(
        &mut self,
        now_ms: u64,
        host: usize,
        pid: i32,
        who: Option<ClientId>,
        res: usize,
    ) {
        if !self
            .request_noticed
            .get(&(host, res))
            .is_some_and(|p| p.contains(&pid))
        {
            self.violate(
                now_ms,
                format!("host{host}: pid {pid} killed for a request of res{res} before its request notice"),
            );
        }
        for w in self.watches_of(host, pid) {
            if !self
                .request_watch_noticed
                .get(&(host, res))
                .is_some_and(|t| t.contains(&w))
            {
                self.violate(
                    now_ms,
                    format!(
                        "host{host}: pid {pid} killed for a request of res{res} before its watch connection {} had the notice",
                        w.ci
                    ),
                );
            }
        }
        let holds = who.is_some_and(|w| {
            self.holds.get(&res).is_some_and(|h| h.contains_key(&w))
                || self.acquiring.get(&w).is_some_and(|r| r.contains(&res))
        });
        if !holds {
            self.violate(
                now_ms,
                format!("host{host}: pid {pid} killed for a request of res{res}, which it neither holds nor is acquiring"),
            );
        }
    }

    /// A disk release of `res` on `host` began for a RELEASE of client slot `ci`.
    pub fn release_started(&mut self, host: usize, res: usize, ci: u32) {
        self.releasing.insert((host, res), ci);
    }

    pub fn release_ended(&mut self, host: usize, res: usize) {
        self.releasing.remove(&(host, res));
    }

    /// A RELEASE of `res` by client slot `ci` was answered on `host`.
    pub fn release_answered(&mut self, now_ms: u64, host: usize, res: usize, ci: u32) {
        if self.releasing.get(&(host, res)) == Some(&ci) {
            self.violate(
                now_ms,
                format!("host{host}: RELEASE of res{res} answered before its disk release ended"),
            );
        }
    }

    /// The host's daemon is gone (restart): its disk operations stop with it.
    pub fn host_restarted(&mut self, host: usize) {
        self.releasing.retain(|(h, _), _| *h != host);
        self.watches.retain(|(h, _), _| *h != host);
        self.space_down(host);
    }

    /// The lockspace of `host` is usable from now on (a join answered 0).
    pub fn space_up(&mut self, host: usize) {
        self.space_up.insert(host);
    }

    /// The lockspace of `host` is stopped, retired or gone.
    pub fn space_down(&mut self, host: usize) {
        self.space_up.remove(&host);
    }

    /// An ACQUIRE was granted on `host`: its lockspace must be usable.
    pub fn acquire_granted(&mut self, now_ms: u64, host: usize) {
        if !self.space_up.contains(&host) {
            self.violate(
                now_ms,
                format!("host{host}: an ACQUIRE granted while its lockspace is stopped or gone"),
            );
        }
    }

    /// The storage refuses writes from the hosts `cut_off` from now on. A host that
    /// can write again must have no holder in conflict with another host's.
    pub fn storage_cut_off(&mut self, now_ms: u64, cut_off: BTreeSet<usize>) {
        let back: Vec<usize> = self.cut_off.difference(&cut_off).copied().collect();
        self.cut_off = cut_off;
        for host in back {
            let holds: Vec<(usize, ClientId, bool)> = self
                .holds
                .iter()
                .flat_map(|(&r, hs)| hs.iter().map(move |(&c, &s)| (r, c, s)))
                .filter(|&(_, c, _)| self.client_host.get(&c) == Some(&host))
                .collect();
            for (r, who, shared) in holds {
                // A pair of this host's own holders is told once.
                let conflicts: Vec<(ClientId, bool)> = self
                    .conflicts(who, r, shared)
                    .into_iter()
                    .filter(|&(o, _)| !(o < who && self.client_host.get(&o) == Some(&host)))
                    .collect();
                for (other, s) in conflicts {
                    self.violate(
                        now_ms,
                        format!(
                            "host{host} can write again while its client {who} holds res{r} {} \
                             beside client {other}'s {}",
                            mode(shared),
                            mode(s)
                        ),
                    );
                }
            }
        }
    }
}

fn mode(shared: bool) -> &'static str {
    if shared {
        "shared"
    } else {
        "exclusive"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_two_exclusive_holders_and_exclusive_beside_shared() {
        let mut c = DaemonSimChecker::default();
        c.granted(0, 1, 0, true);
        c.granted(0, 2, 0, true);
        assert!(c.violations().is_empty());
        c.granted(1, 3, 0, false);
        assert_eq!(c.violations().len(), 2);
        c.gone(3);
        c.released(1, 0);
        c.released(2, 0);
        c.granted(2, 4, 0, false);
        assert_eq!(c.violations().len(), 2);
    }

    #[test]
    fn finds_kills_before_notice_or_of_non_holders() {
        let mut c = DaemonSimChecker::default();
        c.granted(0, 1, 0, false);
        c.killed(1, 0, 100, Some(1));
        assert_eq!(c.violations().len(), 1);
        c.noticed(0, 100, &[]);
        c.killed(2, 0, 100, Some(1));
        assert_eq!(c.violations().len(), 1);
        c.noticed(0, 101, &[]);
        c.killed(3, 0, 101, Some(2));
        assert_eq!(c.violations().len(), 2);
    }

    #[test]
    fn finds_request_kills_before_the_notice_or_of_other_leases_holders() {
        let mut c = DaemonSimChecker::default();
        c.granted(0, 1, 0, false);
        c.granted(0, 2, 1, false);
        c.examine_begin(0);
        // Killed before the notice of its lease.
        c.examine_killed(1, 0, 100, Some(1), 0);
        assert_eq!(c.violations().len(), 1);
        c.request_noticed(0, 0, &[100], &[]);
        c.examine_killed(2, 0, 100, Some(1), 0);
        assert_eq!(c.violations().len(), 1);
        // A holder of another lease: neither noticed nor a holder of res0.
        c.examine_killed(3, 0, 101, Some(2), 0);
        assert_eq!(c.violations().len(), 3);
        // A notice of an earlier step does not count for this one.
        c.examine_begin(0);
        c.examine_killed(4, 0, 100, Some(1), 0);
        assert_eq!(c.violations().len(), 4);
        // Another host's notice is its own.
        c.request_noticed(1, 0, &[100], &[]);
        c.examine_killed(5, 0, 100, Some(1), 0);
        assert_eq!(c.violations().len(), 5);
        // A client with an acquire of res0 under way may be ordered; once it is
        // answered (and refused), no more.
        c.examine_begin(0);
        c.request_noticed(0, 0, &[102], &[]);
        c.acquire_sent(3, &[1, 0]);
        c.examine_killed(6, 0, 102, Some(3), 0);
        assert_eq!(c.violations().len(), 5);
        c.acquire_answered(3);
        c.examine_killed(7, 0, 102, Some(3), 0);
        assert_eq!(c.violations().len(), 6);
    }

    #[test]
    fn finds_a_kill_before_the_notice_reached_the_pids_watch_connection() {
        let mut c = DaemonSimChecker::default();
        c.granted(0, 1, 0, false);
        c.watch_opened(0, 7, 100);
        let to = [WatchTo { ci: 7, pid: 100 }];
        // The holder was named, but its watch connection was not written to.
        c.noticed(0, 100, &[]);
        c.killed(1, 0, 100, Some(1));
        assert_eq!(c.violations().len(), 1);
        c.noticed(0, 100, &to);
        c.killed(2, 0, 100, Some(1));
        assert_eq!(c.violations().len(), 1);
        // The same for a request's notice, step by step.
        c.examine_begin(0);
        c.request_noticed(0, 0, &[100], &[]);
        c.examine_killed(3, 0, 100, Some(1), 0);
        assert_eq!(c.violations().len(), 2);
        c.request_noticed(0, 0, &[100], &to);
        c.examine_killed(4, 0, 100, Some(1), 0);
        assert_eq!(c.violations().len(), 2);
        // A closed watch connection needs no notice.
        c.watch_closed(0, 7);
        c.examine_begin(0);
        c.request_noticed(0, 0, &[100], &[]);
        c.examine_killed(5, 0, 100, Some(1), 0);
        assert_eq!(c.violations().len(), 2);
    }

    #[test]
    fn a_holder_cut_off_by_the_storage_conflicts_with_nobody_until_it_can_write_again() {
        let mut c = DaemonSimChecker::default();
        c.client_started(1, 0);
        c.client_started(2, 1);
        c.client_started(3, 0);
        c.granted(0, 1, 0, false);
        c.storage_cut_off(1, BTreeSet::from([0]));
        c.granted(2, 2, 0, false);
        // A grant on the cut-off host conflicts with nobody either.
        c.granted(3, 3, 0, true);
        assert!(c.violations().is_empty(), "{:?}", c.violations());
        // Host 0 can write again while clients 1 and 3 still hold res0 beside client 2
        // (and beside each other: told once).
        c.storage_cut_off(4, BTreeSet::new());
        assert_eq!(c.violations().len(), 3, "{:?}", c.violations());
        // Gone, they conflict no more.
        c.gone(1);
        c.gone(3);
        c.storage_cut_off(5, BTreeSet::from([0]));
        c.storage_cut_off(6, BTreeSet::new());
        assert_eq!(c.violations().len(), 3);
    }

    #[test]
    fn finds_an_acquire_granted_while_the_lockspace_is_not_usable() {
        let mut c = DaemonSimChecker::default();
        c.acquire_granted(0, 0);
        assert_eq!(c.violations().len(), 1, "before the join");
        c.space_up(0);
        c.acquire_granted(1, 0);
        assert_eq!(c.violations().len(), 1);
        c.space_down(0);
        c.acquire_granted(2, 0);
        assert_eq!(c.violations().len(), 2, "stopped");
        c.space_up(1);
        c.host_restarted(1);
        c.acquire_granted(3, 1);
        assert_eq!(c.violations().len(), 3, "after a restart");
    }

    #[test]
    fn finds_a_release_answered_before_the_disk() {
        let mut c = DaemonSimChecker::default();
        c.release_started(0, 1, 7);
        c.release_answered(0, 0, 1, 7);
        assert_eq!(c.violations().len(), 1);
        // Another client's release of a lease it shared needed no disk release.
        c.release_answered(0, 0, 1, 8);
        assert_eq!(c.violations().len(), 1);
        c.release_ended(0, 1);
        c.release_answered(1, 0, 1, 7);
        assert_eq!(c.violations().len(), 1);
    }
}
