//! Mailboxes: the core's effects for a client command that runs on another thread.
//!
//! The daemon runs each client command on the worker that read it: that worker has the
//! connection, the sender's rights (`crate::access`) and writes the reply. A step of the
//! core on one thread can give effects that belong to a command another worker holds:
//! the end of a RELEASE's disk release lets an ACQUIRE that waited for it go on (its
//! disk acquire, or its answer), and the monitor's tick answers an ACQUIRE that waited
//! for a release too long (-EAGAIN, the leases it took given back). The thread whose
//! step gave such effects posts them here, under the command's client slot; the
//! command's worker takes them and runs them itself (`crate::paxos`).
//!
//! Invariants:
//! * a command's worker opens its mailbox before it hands the command to the core, and
//!   closes it only when it is empty after the command's answer: while the core has a
//!   command of a client, that client's mailbox is open, so an effect of the command is
//!   never posted where nobody takes it (a post to a closed mailbox is refused, and the
//!   poster decides: runs it itself, or stops the daemon when only the command's worker
//!   may run it);
//! * one mailbox per [`MailboxId`] at a time: a slot runs one lease command at a time
//!   (`cmd_active`), perhaps on another connection's worker, and its own connection's
//!   worker one lockspace command (REM_LOCKSPACE) at a time; the two have separate
//!   mailboxes, so neither can take the other's answer;
//! * the effects one step gave a client are posted together, in the core's order, and
//!   taken in that order.
//!
//! The lock is a leaf: it is taken with no other lock held and nothing else is locked
//! under it.

use std::collections::{HashMap, VecDeque};
use std::sync::{Condvar, Mutex};

use lockd_core::Effect;

use crate::sync::{lock, wait};
use crate::tables::Held;

/// Whose mailbox: the lease command of client slot `ci`, or the lockspace command of
/// connection `ci` (both are answered to slot `ci`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MailboxId {
    Command(u32),
    Lockspace(u32),
}

/// The open mailboxes.
#[derive(Debug, Default)]
pub struct Mailboxes {
    boxes: Mutex<HashMap<MailboxId, VecDeque<Effect<Held>>>>,
    posted: Condvar,
}

impl Mailboxes {
    /// Opens mailbox `id`, before its command goes to the core. A slot runs one command
    /// of each kind at a time, so a mailbox already open is a broken invariant.
    pub fn open(&self, id: MailboxId) {
        let fresh = lock(&self.boxes).insert(id, VecDeque::new()).is_none();
        assert!(fresh, "{id:?}: a second mailbox while one is open");
    }

    /// Delivers one step's effects: each whose owner (`owner_of`) is a mailbox other than
    /// `me` that is open is posted to that mailbox; the others are returned. Both
    /// keep the core's order, and the whole step is delivered under one hold of the lock,
    /// so a mailbox cannot close half-way through a step's effects.
    pub fn deliver(
        &self,
        me: Option<MailboxId>,
        fx: Vec<Effect<Held>>,
        owner_of: impl Fn(&Effect<Held>) -> Option<MailboxId>,
    ) -> Vec<Effect<Held>> {
        if fx
            .iter()
            .all(|e| owner_of(e).is_none_or(|id| Some(id) == me))
        {
            // All of it runs here (the common case: a command's own steps): no lock.
            return fx;
        }
        let mut here = Vec::new();
        let mut posted = false;
        let mut boxes = lock(&self.boxes);
        for effect in fx {
            match owner_of(&effect)
                .filter(|id| Some(*id) != me)
                .and_then(|id| boxes.get_mut(&id))
            {
                Some(mbox) => {
                    mbox.push_back(effect);
                    posted = true;
                }
                None => here.push(effect),
            }
        }
        drop(boxes);
        if posted {
            self.posted.notify_all();
        }
        here
    }

    /// Waits until open mailbox `id` has effects, and takes them all.
    pub fn take(&self, id: MailboxId) -> Vec<Effect<Held>> {
        let mut boxes = lock(&self.boxes);
        loop {
            let mbox = boxes
                .get_mut(&id)
                .unwrap_or_else(|| panic!("{id:?}: waiting on a mailbox that is not open"));
            if !mbox.is_empty() {
                return mbox.drain(..).collect();
            }
            boxes = wait(&self.posted, boxes);
        }
    }

    /// Closes mailbox `id` when it is empty; otherwise leaves it open and gives
    /// back what was posted since the last [`Mailboxes::take`], for the caller to run
    /// before it closes again.
    pub fn close(&self, id: MailboxId) -> Result<(), Vec<Effect<Held>>> {
        let mut boxes = lock(&self.boxes);
        match boxes.get_mut(&id) {
            Some(mbox) if !mbox.is_empty() => Err(mbox.drain(..).collect()),
            Some(_) => {
                boxes.remove(&id);
                Ok(())
            }
            None => panic!("{id:?}: closing a mailbox that is not open"),
        }
    }

    /// Open mailboxes (the daemon's tests check that none is left).
    pub fn open_count(&self) -> usize {
        lock(&self.boxes).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lockd_core::CoreReply;
    use lockd_core::ReqKind;

    fn reply(ci: u32, rv: i32) -> Effect<Held> {
        Effect::Reply {
            ci,
            reply: CoreReply {
                kind: ReqKind::Acquire,
                rv,
                leases: Vec::new(),
                why: None,
            },
        }
    }

    fn owner(e: &Effect<Held>) -> Option<MailboxId> {
        match e {
            Effect::Reply { ci, .. } => Some(MailboxId::Command(*ci)),
            _ => None,
        }
    }

    use MailboxId::Command as C;

    fn rvs(fx: &[Effect<Held>]) -> Vec<i32> {
        fx.iter()
            .map(|e| match e {
                Effect::Reply { reply, .. } => reply.rv,
                other => panic!("{other:?}"),
            })
            .collect()
    }

    #[test]
    fn a_post_reaches_only_an_open_mailbox_and_is_taken_in_order() {
        let m = Mailboxes::default();
        // Nobody's mailbox is open: everything runs here.
        assert_eq!(m.deliver(None, vec![reply(3, 0)], owner).len(), 1);
        m.open(C(3));
        let here = m.deliver(
            Some(C(1)),
            vec![reply(3, -1), reply(1, -7), reply(4, -8), reply(3, -2)],
            owner,
        );
        // Mine and those of a client with no mailbox stay, in order.
        assert_eq!(rvs(&here), vec![-7, -8]);
        assert!(m.deliver(None, vec![reply(3, -3)], owner).is_empty());
        // Client 3's own worker keeps its own effects.
        assert_eq!(m.deliver(Some(C(3)), vec![reply(3, -9)], owner).len(), 1);
        assert_eq!(rvs(&m.take(C(3))), vec![-1, -2, -3]);
        // Something posted after the last take keeps the mailbox open.
        assert!(m.deliver(None, vec![reply(3, -4)], owner).is_empty());
        assert_eq!(m.close(C(3)).unwrap_err().len(), 1);
        assert_eq!(m.open_count(), 1);
        m.close(C(3)).unwrap();
        assert_eq!(m.open_count(), 0);
        assert_eq!(m.deliver(None, vec![reply(3, 0)], owner).len(), 1);
    }

    #[test]
    fn take_waits_for_a_post_from_another_thread() {
        let m = std::sync::Arc::new(Mailboxes::default());
        m.open(C(7));
        let poster = {
            let m = m.clone();
            std::thread::spawn(move || {
                std::thread::sleep(std::time::Duration::from_millis(50));
                assert!(m.deliver(None, vec![reply(7, -11)], owner).is_empty());
            })
        };
        let got = m.take(C(7));
        poster.join().unwrap();
        assert!(matches!(got.as_slice(), [Effect::Reply { ci: 7, reply }] if reply.rv == -11));
        m.close(C(7)).unwrap();
    }

    /// A slot's lease command (run for it by another connection) and its own
    /// connection's REM_LOCKSPACE wait at once, each for its own answer.
    #[test]
    fn a_slots_lease_command_and_lockspace_command_have_separate_mailboxes() {
        let m = Mailboxes::default();
        let owner = |e: &Effect<Held>| match e {
            Effect::Reply { ci, reply } if reply.kind == ReqKind::RemLockspace => {
                Some(MailboxId::Lockspace(*ci))
            }
            Effect::Reply { ci, .. } => Some(C(*ci)),
            _ => None,
        };
        m.open(C(5));
        m.open(MailboxId::Lockspace(5));
        let mut rem = reply(5, -16);
        if let Effect::Reply { reply, .. } = &mut rem {
            reply.kind = ReqKind::RemLockspace;
        }
        assert!(m.deliver(None, vec![rem, reply(5, -11)], owner).is_empty());
        assert_eq!(rvs(&m.take(C(5))), vec![-11]);
        assert_eq!(rvs(&m.take(MailboxId::Lockspace(5))), vec![-16]);
        m.close(C(5)).unwrap();
        m.close(MailboxId::Lockspace(5)).unwrap();
    }

    #[test]
    #[should_panic(expected = "a second mailbox")]
    fn a_slot_has_one_mailbox_at_a_time() {
        let m = Mailboxes::default();
        m.open(C(1));
        m.open(C(1));
    }
}
