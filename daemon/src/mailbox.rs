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
//! * one mailbox per client slot at a time (a slot runs one command at a time);
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

/// The open mailboxes, by client slot.
#[derive(Debug, Default)]
pub struct Mailboxes {
    boxes: Mutex<HashMap<u32, VecDeque<Effect<Held>>>>,
    posted: Condvar,
}

impl Mailboxes {
    /// Opens client `ci`'s mailbox, before its command goes to the core. A slot runs one
    /// command at a time (`cmd_active`), so a mailbox already open is a broken invariant.
    pub fn open(&self, ci: u32) {
        let fresh = lock(&self.boxes).insert(ci, VecDeque::new()).is_none();
        assert!(fresh, "client {ci}: a second mailbox while one is open");
    }

    /// Delivers one step's effects: each whose owner (`owner_of`) is a client other than
    /// `me` with an open mailbox is posted to that mailbox; the others are returned. Both
    /// keep the core's order, and the whole step is delivered under one hold of the lock,
    /// so a mailbox cannot close half-way through a step's effects.
    pub fn deliver(
        &self,
        me: Option<u32>,
        fx: Vec<Effect<Held>>,
        owner_of: impl Fn(&Effect<Held>) -> Option<u32>,
    ) -> Vec<Effect<Held>> {
        if fx
            .iter()
            .all(|e| owner_of(e).is_none_or(|ci| Some(ci) == me))
        {
            // All of it runs here (the common case: a command's own steps): no lock.
            return fx;
        }
        let mut here = Vec::new();
        let mut posted = false;
        let mut boxes = lock(&self.boxes);
        for effect in fx {
            match owner_of(&effect)
                .filter(|ci| Some(*ci) != me)
                .and_then(|ci| boxes.get_mut(&ci))
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

    /// Waits until client `ci`'s open mailbox has effects, and takes them all.
    pub fn take(&self, ci: u32) -> Vec<Effect<Held>> {
        let mut boxes = lock(&self.boxes);
        loop {
            let mbox = boxes
                .get_mut(&ci)
                .unwrap_or_else(|| panic!("client {ci}: waiting on a mailbox that is not open"));
            if !mbox.is_empty() {
                return mbox.drain(..).collect();
            }
            boxes = wait(&self.posted, boxes);
        }
    }

    /// Closes client `ci`'s mailbox when it is empty; otherwise leaves it open and gives
    /// back what was posted since the last [`Mailboxes::take`], for the caller to run
    /// before it closes again.
    pub fn close(&self, ci: u32) -> Result<(), Vec<Effect<Held>>> {
        let mut boxes = lock(&self.boxes);
        match boxes.get_mut(&ci) {
            Some(mbox) if !mbox.is_empty() => Err(mbox.drain(..).collect()),
            Some(_) => {
                boxes.remove(&ci);
                Ok(())
            }
            None => panic!("client {ci}: closing a mailbox that is not open"),
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
            },
        }
    }

    fn owner(e: &Effect<Held>) -> Option<u32> {
        match e {
            Effect::Reply { ci, .. } => Some(*ci),
            _ => None,
        }
    }

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
        m.open(3);
        let here = m.deliver(
            Some(1),
            vec![reply(3, -1), reply(1, -7), reply(4, -8), reply(3, -2)],
            owner,
        );
        // Mine and those of a client with no mailbox stay, in order.
        assert_eq!(rvs(&here), vec![-7, -8]);
        assert!(m.deliver(None, vec![reply(3, -3)], owner).is_empty());
        // Client 3's own worker keeps its own effects.
        assert_eq!(m.deliver(Some(3), vec![reply(3, -9)], owner).len(), 1);
        assert_eq!(rvs(&m.take(3)), vec![-1, -2, -3]);
        // Something posted after the last take keeps the mailbox open.
        assert!(m.deliver(None, vec![reply(3, -4)], owner).is_empty());
        assert_eq!(m.close(3).unwrap_err().len(), 1);
        assert_eq!(m.open_count(), 1);
        m.close(3).unwrap();
        assert_eq!(m.open_count(), 0);
        assert_eq!(m.deliver(None, vec![reply(3, 0)], owner).len(), 1);
    }

    #[test]
    fn take_waits_for_a_post_from_another_thread() {
        let m = std::sync::Arc::new(Mailboxes::default());
        m.open(7);
        let poster = {
            let m = m.clone();
            std::thread::spawn(move || {
                std::thread::sleep(std::time::Duration::from_millis(50));
                assert!(m.deliver(None, vec![reply(7, -11)], owner).is_empty());
            })
        };
        let got = m.take(7);
        poster.join().unwrap();
        assert!(matches!(got.as_slice(), [Effect::Reply { ci: 7, reply }] if reply.rv == -11));
        m.close(7).unwrap();
    }

    #[test]
    #[should_panic(expected = "a second mailbox")]
    fn a_slot_has_one_mailbox_at_a_time() {
        let m = Mailboxes::default();
        m.open(1);
        m.open(1);
    }
}
