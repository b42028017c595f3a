//! The step's unit tests: each path driven through [`Core::step`] with inputs chosen by
//! the test, and the invariants of `step.rs`'s header checked on the effects.

use super::*;
use crate::clients::{ClientToken, KillPath};
use crate::fencing::PeerFenceOutcome;
use crate::io::{Answer, CoreRequest, DiskOp, KillOrder, ListRefused, SpaceListing};
use crate::kill::{SIGKILL, SIGTERM};
use crate::space_state::{Phase, RenewalRec};
use client_lib::ext::WatchKind;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Held;

impl LeaseHold for Held {
    fn lver(&self) -> u64 {
        1
    }
}

const IO_S: u64 = 10;

fn name(s: &str) -> Name {
    Name::new(s).expect("name")
}

/// A core with lockspace `ls` joined at `t` and, for each `(pid, ls, res)`, a
/// registered client holding that lease.
fn core(spaces: &[&str], t: u64, holders: &[(i32, &str, &str)]) -> Core<(), Held> {
    let mut c = Core::new(40);
    for ls in spaces {
        let mut s = CoreSpace {
            id: c.spaces.len() as u32 + 1,
            name: name(ls),
            st: SpaceSt::default(),
            io_timeout_s: IO_S,
            listed_by_shell: false,
            place: None,
            monitor: HostMonitor::new(1, 60),
            fence: None,
            last_examine: BTreeMap::new(),
        };
        s.st.phase = Phase::Joined;
        s.st.add_result = Some(0);
        s.st.renewal_ok(t, rec(t));
        c.spaces.push(s);
    }
    for &(pid, ls, res) in holders {
        let ci = c.tables.clients.add(-1, pid, 1000, None).expect("slot");
        c.tables
            .clients
            .slots
            .get_mut(&ci)
            .expect("slot")
            .registered = true;
        let key = (name(ls), name(res));
        assert_eq!(
            c.tables.start_acquire(ci, key, false, 0, &[]),
            Ok(crate::AcquireStart::Disk)
        );
        c.tables.finish_acquire(key, ci, Ok(Held)).expect("held");
        c.tables
            .record_tokens(
                ci,
                vec![ClientToken {
                    token_id: 1,
                    ls: key.0,
                    name: key.1,
                    disks: Vec::new(),
                    shared: false,
                    persistent: false,
                    lver: 1,
                    acquired: t,
                }],
            )
            .expect("recorded");
    }
    c.check().expect("a consistent start");
    // The status as it is now went out already: a tick's `Status` says a change.
    c.last_status = Some(c.status_summary());
    c
}

fn rec(t: u64) -> RenewalRec {
    RenewalRec {
        timestamp: t,
        read_ms: 1,
        write_ms: 0,
        write_sent_ms: t * 1000,
        ended_ms: t * 1000 + 1,
    }
}

fn first(effects: &[Effect<Held>], f: impl Fn(&Effect<Held>) -> bool) -> Option<usize> {
    effects.iter().position(f)
}

#[test]
fn a_lost_lease_gives_the_notice_before_the_kill() {
    let fail = timeouts::id_renewal_fail_seconds(IO_S);
    let mut c = core(&["ls"], 100, &[(4242, "ls", "r1")]);
    // Young lease: nothing.
    assert_eq!(c.step(101, Input::Tick), Vec::new());
    // Renewals fail; at id_renewal_fail the lease is lost.
    c.step(
        110,
        Input::RenewalFailed {
            id: 1,
            code: -5,
            corrupt: false,
        },
    );
    let effects = c.step(100 + fail, Input::Tick);
    let notice = first(&effects, |e| {
        matches!(e, Effect::LossNotice { kind: WatchKind::LockspaceFailed, pids, .. } if pids == &[4242])
    })
    .expect("a LockspaceFailed notice");
    let kill = first(&effects, |e| {
        matches!(
            e,
            Effect::Kill {
                order: KillOrder::Signal {
                    pid: 4242,
                    sig: SIGTERM,
                    ..
                },
                ..
            }
        )
    })
    .expect("a SIGTERM to the holder");
    assert!(notice < kill, "notice after kill: {effects:?}");
    assert!(effects
        .iter()
        .any(|e| matches!(e, Effect::LockspaceFailed { age_s, .. } if *age_s == fail)));
    // The notice is given once; escalation goes on once a second, SIGKILL after grace.
    let later = c.step(100 + fail + 1, Input::Tick);
    assert!(!later.iter().any(|e| matches!(e, Effect::LossNotice { .. })));
    let after_grace = c.step(100 + fail + 40, Input::Tick);
    assert!(after_grace.iter().any(|e| matches!(
        e,
        Effect::Kill {
            order: KillOrder::Signal {
                pid: 4242,
                sig: SIGKILL,
                ..
            },
            ..
        }
    )));
}

#[test]
fn every_notice_of_a_tick_comes_before_its_first_kill_and_only_holders_are_killed() {
    let fail = timeouts::id_renewal_fail_seconds(IO_S);
    // Two lockspaces failing at once, a holder in each, and a client of a third,
    // healthy lockspace that must not be touched.
    let mut c = core(
        &["a", "b", "ok"],
        100,
        &[(11, "a", "r"), (12, "b", "r"), (13, "ok", "r")],
    );
    c.step(
        100 + fail - 1,
        Input::RenewalOk {
            id: 3,
            last_success_s: 100 + fail - 1,
            rec: rec(100 + fail - 1),
        },
    );
    let effects = c.step(100 + fail, Input::Tick);
    let last_notice = effects
        .iter()
        .rposition(|e| matches!(e, Effect::LossNotice { .. }))
        .expect("notices");
    let first_kill = first(&effects, |e| matches!(e, Effect::Kill { .. })).expect("kills");
    assert!(last_notice < first_kill, "{effects:?}");
    let killed: Vec<i32> = effects
        .iter()
        .filter_map(|e| match e {
            Effect::Kill {
                order: KillOrder::Signal { pid, .. },
                ..
            } => Some(*pid),
            _ => None,
        })
        .collect();
    assert_eq!(killed, vec![11, 12]);
}

#[test]
fn a_killpath_runs_first_within_the_grace_time() {
    let fail = timeouts::id_renewal_fail_seconds(IO_S);
    let mut c = core(&["ls"], 100, &[(77, "ls", "r")]);
    let kp = KillPath {
        path: "/usr/bin/true".into(),
        args: String::new(),
        with_pid: false,
        run_as: None,
    };
    for cl in c.tables.clients.slots.values_mut() {
        cl.killpath = Some(kp.clone());
    }
    let effects = c.step(100 + fail, Input::Tick);
    assert!(effects.iter().any(|e| matches!(
        e,
        Effect::Kill { order: KillOrder::RunKillpath { pid: 77, killpath, .. }, .. } if *killpath == kp
    )));
    // Nothing more until the grace time is over.
    assert!(!c
        .step(100 + fail + 1, Input::Tick)
        .iter()
        .any(|e| matches!(e, Effect::Kill { .. })));
}

/// A renewal's failure gives no effect (the loss is the next tick's decision), and
/// the tick skips a gone lockspace (the daemon's, kept for late readers).
#[test]
fn a_renewal_failure_waits_for_the_tick_which_skips_a_gone_lockspace() {
    let fail = timeouts::id_renewal_fail_seconds(IO_S);
    let mut b = core(&["a", "b"], 100, &[(11, "a", "r"), (12, "b", "r")]);
    let fx = b.step(
        100 + fail - 5,
        Input::RenewalFailed {
            id: 1,
            code: -5,
            corrupt: true,
        },
    );
    assert!(fx.is_empty());
    assert_eq!(b.spaces[0].st.corrupt_result, -5);
    let mut c = core(&["a"], 100, &[]);
    c.spaces[0].st.gone = true;
    assert_eq!(
        c.step(100 + fail + 1, Input::Tick),
        vec![Effect::Status(StatusSummary::default())],
        "no lockspace joined any more, and nothing else"
    );
    assert!(
        c.space_st(1).is_some_and(|st| !st.space_dead),
        "a gone one is not checked"
    );
}

/// Fencing through the step: the renewal's read feeds the core's host monitor; a pass
/// asks for the key list, then a preempt of the stalled peer; the confirmed preempt
/// marks the peer's generation fenced in the monitor (what the ballots read), and
/// the next pass leaves it alone. A key list without our key fails the lockspace:
/// its holder's notice, then the kill, at the next tick.
#[test]
fn fencing_decides_in_the_step_and_marks_the_monitor_or_loses_our_lease() {
    use crate::fencing::{FenceAction, FenceKey, FenceVerdict, FencedBecause, KeysRead};
    use disk_format::{DeltaSector, LeaderRecord};
    let peer = DeltaSector::from_leader(LeaderRecord {
        owner_id: 2,
        owner_generation: 3,
        timestamp: 90,
        io_timeout: IO_S as u16,
        ..LeaderRecord::ZERO
    });
    let ours = FenceKey {
        raw: 0x1001,
        owner: Some((1, 1)),
    };
    let theirs = FenceKey {
        raw: 0x2003,
        owner: Some((2, 3)),
    };
    let setup = |c: &mut Core<(), Held>| {
        let fx = c.step(
            100,
            Input::HostsRead {
                id: 1,
                read_at_ms: 100_000,
                sectors: vec![None, Some(peer)].into(),
                whole_area: true,
            },
        );
        assert!(fx.is_empty(), "no bit of ours is set: {fx:?}");
        let fx = c.step(
            100,
            Input::FenceRegistered {
                id: 1,
                key: ours.raw,
                preempt_cfg_s: 0,
                acts: true,
            },
        );
        assert!(fx.is_empty());
    };
    let read_keys = Effect::Fence {
        id: 1,
        action: FenceAction::ReadKeys,
    };
    let t = 100 + timeouts::id_renewal_fail_seconds(IO_S);
    // Our own read at `t` finds host 2 still (a pass judges from a fresh read only).
    let reread = |c: &mut Core<(), Held>| {
        c.step(
            t,
            Input::HostsRead {
                id: 1,
                read_at_ms: t * 1000,
                sectors: vec![None, Some(peer)].into(),
                whole_area: true,
            },
        );
    };

    let mut c = core(&["ls"], 100, &[]);
    setup(&mut c);
    reread(&mut c);
    assert_eq!(
        c.step(t, Input::FenceLook { id: 1 }),
        vec![read_keys.clone()]
    );
    let fx = c.step(
        t,
        Input::FenceKeysRead {
            id: 1,
            read: KeysRead::Keys {
                keys: vec![ours, theirs],
                reservation: true,
            },
            read_at_ms: t * 1000,
        },
    );
    assert_eq!(
        fx,
        vec![Effect::Fence {
            id: 1,
            action: FenceAction::Preempt {
                host_id: 2,
                generation: 3,
                our_key: ours.raw
            }
        }]
    );
    let fx = c.step(
        t,
        Input::PeerFenceDone {
            id: 1,
            host_id: 2,
            generation: 3,
            outcome: PeerFenceOutcome::Confirmed { preempted: true },
        },
    );
    assert!(matches!(
        fx.as_slice(),
        [Effect::FenceVerdict {
            verdict: FenceVerdict::PeerFenced {
                host_id: 2,
                generation: 3,
                ..
            },
            ..
        }]
    ));
    let obs = lease_core::HostObserver::observation(c.space_monitor(1).unwrap(), 2).unwrap();
    assert!(obs.fenced(3), "the ballots see the generation fenced");
    // The next pass reads the keys and preempts nobody: a fenced generation is neither
    // a suspect nor a live peer.
    assert_eq!(
        c.step(t + 1, Input::FenceLook { id: 1 }),
        vec![read_keys.clone()]
    );
    let fx = c.step(
        t + 1,
        Input::FenceKeysRead {
            id: 1,
            read: KeysRead::Keys {
                keys: vec![ours],
                reservation: true,
            },
            read_at_ms: t * 1000,
        },
    );
    assert!(fx.is_empty(), "{fx:?}");
    // The fenced generation renews all the same (the storage still takes its writes):
    // the alarm, once.
    let read = |t: u64, timestamp: u64| {
        let mut renewed = peer;
        renewed.leader.timestamp = timestamp;
        Input::HostsRead {
            id: 1,
            read_at_ms: t * 1000,
            sectors: vec![None, Some(renewed)].into(),
            whole_area: true,
        }
    };
    let fx = c.step(t + 2, read(t + 2, 95));
    assert!(matches!(
        fx.as_slice(),
        [Effect::FenceVerdict {
            verdict: FenceVerdict::FencedPeerRenews {
                host_id: 2,
                generation: 3
            },
            ..
        }]
    ));
    assert!(c.step(t + 3, read(t + 3, 97)).is_empty());
    c.check().unwrap();

    let mut c = core(&["ls"], t - 1, &[(4242, "ls", "r")]);
    setup(&mut c);
    reread(&mut c);
    assert_eq!(c.step(t, Input::FenceLook { id: 1 }), vec![read_keys]);
    let fx = c.step(
        t,
        Input::FenceKeysRead {
            id: 1,
            read: KeysRead::Keys {
                keys: vec![theirs],
                reservation: true,
            },
            read_at_ms: t * 1000,
        },
    );
    assert!(matches!(
        fx.as_slice(),
        [Effect::FenceVerdict {
            verdict: FenceVerdict::WeAreFenced(FencedBecause::OurKeyGone),
            ..
        }]
    ));
    assert!(
        c.step(t, Input::FenceLook { id: 1 }).is_empty(),
        "no pass once fenced"
    );
    let fx = c.step(t + 1, Input::Tick);
    let notice = first(&fx, |e| {
        matches!(e, Effect::LossNotice { kind: WatchKind::LockspaceFailed, pids, .. } if pids == &[4242])
    })
    .expect("the holder's notice");
    let kill = first(&fx, |e| matches!(e, Effect::Kill { .. })).expect("the holder's kill");
    assert!(notice < kill, "{fx:?}");
    c.check().unwrap();
}

/// A host's bit in its renewal: the notification comes each time, the examine of our
/// leases at most once per `set_bitmap_seconds` for that host.
#[test]
fn a_hosts_bit_asks_for_an_examine_at_most_once_per_bitmap_period() {
    use disk_format::{DeltaSector, LeaderRecord};
    let mut c = core(&["ls"], 100, &[]);
    let mut peer = DeltaSector::from_leader(LeaderRecord {
        owner_id: 2,
        owner_generation: 3,
        timestamp: 90,
        io_timeout: IO_S as u16,
        ..LeaderRecord::ZERO
    });
    peer.set_host_bit(1, true);
    let mut read = |t: u64| {
        let fx = c.step(
            t,
            Input::HostsRead {
                id: 1,
                read_at_ms: t * 1000,
                sectors: vec![None, Some(peer)].into(),
                whole_area: true,
            },
        );
        match fx.as_slice() {
            [Effect::HostNotifications {
                id: 1,
                notes,
                examine,
            }] => {
                assert_eq!(notes.len(), 1);
                assert_eq!(notes[0].from_host_id, 2);
                *examine
            }
            other => panic!("{other:?}"),
        }
    };
    let period = timeouts::set_bitmap_seconds(IO_S);
    assert!(read(100));
    assert!(!read(100 + period - 1));
    assert!(read(100 + period));
}

/// A lockspace the shell listed is the shell's to remove: a tick while it is being
/// removed, with no lease left in it, gives no `LockspaceGone` and keeps it.
#[test]
fn a_lockspace_the_shell_listed_is_not_removed_by_the_core() {
    let mut c: Core<(), Held> = Core::new(40);
    c.add_space(7, name("ls"), IO_S);
    let st = c.space_st_mut(7).expect("listed");
    st.phase = Phase::Removing;
    st.kill_now = true;
    let fx = c.step(100, Input::Tick);
    assert!(
        !fx.iter().any(|e| matches!(e, Effect::LockspaceGone { .. })),
        "{fx:?}"
    );
    assert!(c.space_st(7).is_some_and(|st| !st.gone));
}

/// The disk operations among `fx`: (op, client, the lease's name).
fn disk_ops(fx: &[Effect<Held>]) -> Vec<(OpId, Option<u32>, Name)> {
    fx.iter()
        .filter_map(|e| match e {
            Effect::Disk {
                op,
                client,
                what: DiskOp::Release { key, .. },
                ..
            } => Some((*op, *client, key.1)),
            _ => None,
        })
        .collect()
}

fn disk_done(c: &mut Core<(), Held>, t: u64, op: OpId) -> Vec<Effect<Held>> {
    c.step(
        t,
        Input::DiskDone {
            op,
            result: Ok(Held),
            failed_state: None,
        },
    )
}

/// A lost lockspace the shell listed is retired by the core once no lease of it is
/// left: its orphans are released only after its last live holder went, then the
/// tick retires it (phase Removing, `RetireLockspace` with the shell's id, once) and
/// keeps its entry for the shell to unlist. SET_CONFIG's `used_by_orphans` keeps the
/// orphans, and so the lockspace.
#[test]
fn a_lost_lockspace_of_the_shell_is_retired_after_its_holders_and_orphans() {
    for keep_orphans in [false, true] {
        let fail = timeouts::id_renewal_fail_seconds(IO_S);
        let mut c = core(&["a"], 100, &[(11, "a", "r"), (12, "a", "o")]);
        c.spaces[0].listed_by_shell = true;
        c.spaces[0].st.used_by_orphans = keep_orphans;
        let ci = |c: &Core<(), Held>, pid| c.tables.clients.by_pid(pid).expect("slot");
        // Pid 12's lease is persistent: its end leaves an orphan.
        let c12 = ci(&c, 12);
        c.tables.clients.slots.get_mut(&c12).expect("slot").tokens[0].persistent = true;
        assert!(disk_ops(&c.step(101, Input::Closed { ci: c12 })).is_empty());
        assert!(c.tables.resources[&(name("a"), name("o"))].orphan);
        // Lost: pid 11 is told and killed; the orphan stays while it lives.
        let fx = c.step(100 + fail, Input::Tick);
        assert!(
            fx.iter().any(|e| matches!(e, Effect::Kill { .. })),
            "{fx:?}"
        );
        assert!(disk_ops(&fx).is_empty(), "no orphan released yet: {fx:?}");
        // Pid 11 ends: its lease is released (its own client), nothing retired yet.
        let c11 = ci(&c, 11);
        let fx = c.step(100 + fail + 1, Input::Closed { ci: c11 });
        let [(op, Some(client), res)] = disk_ops(&fx)[..] else {
            panic!("one release of pid 11's lease: {fx:?}")
        };
        assert_eq!((client, res), (c11, name("r")));
        // That release's end lets the orphan go (no client), unless SET_CONFIG
        // keeps it.
        let fx = disk_done(&mut c, 100 + fail + 1, op);
        let retired = |fx: &[Effect<Held>]| {
            fx.iter()
                .filter(|e| matches!(e, Effect::RetireLockspace { ls, id: 1 } if *ls == name("a")))
                .count()
        };
        if keep_orphans {
            assert!(disk_ops(&fx).is_empty() && retired(&fx) == 0, "{fx:?}");
            let fx = c.step(100 + fail + 30, Input::Tick);
            assert!(disk_ops(&fx).is_empty() && retired(&fx) == 0, "{fx:?}");
            assert_eq!(c.space_st(1).map(|st| st.phase), Some(Phase::Joined));
            continue;
        }
        let [(op, None, res)] = disk_ops(&fx)[..] else {
            panic!("one release of the orphan: {fx:?}")
        };
        assert_eq!(res, name("o"));
        assert_eq!(
            retired(&fx),
            0,
            "not while the orphan is on its way: {fx:?}"
        );
        // Nothing of it left once the orphan's release ended: retired then, once,
        // and kept listed for the shell.
        assert_eq!(retired(&disk_done(&mut c, 100 + fail + 2, op)), 1);
        assert_eq!(retired(&c.step(100 + fail + 3, Input::Tick)), 0);
        assert_eq!(
            c.space_st(1).map(|st| (st.phase, st.gone)),
            Some((Phase::Removing, false))
        );
        assert_eq!(retired(&c.step(100 + fail + 4, Input::Tick)), 0);
    }
}

/// The shell lists its lockspaces by id; a gone one's entry stays for late readers
/// until [`MAX_GONE_SPACES`] newer gone ones push it out, and never counts as the
/// lockspace of its name.
#[test]
fn the_shells_lockspaces_are_kept_by_id_and_gone_ones_pruned() {
    let mut c: Core<(), Held> = Core::new(40);
    let n = MAX_GONE_SPACES as u32 + 3;
    for id in 1..=n {
        c.add_space(id, name("ls"), IO_S);
        assert!(c.space(&name("ls")).is_some_and(|s| s.id == id));
        c.space_st_mut(id).expect("listed").gone = true;
        assert!(c.space(&name("ls")).is_none());
        c.check().expect("invariants");
    }
    c.add_space(n + 1, name("ls"), IO_S);
    let gone = c.spaces.iter().filter(|s| s.st.gone).count();
    assert_eq!(gone, MAX_GONE_SPACES - 1);
    assert!(c.space_st(1).is_none(), "the oldest gone one was pruned");
    assert!(c.space_st(n).is_some_and(|st| st.gone));
    assert!(c.space_st(n + 1).is_some_and(|st| !st.gone));
}

/// The shell's lockspace thread reports by id: a report for a gone lockspace (its
/// fence thread's late verdict) touches neither it nor its successor of the same
/// name; a renewal's time is the lease's, not the step's.
#[test]
fn lockspace_reports_go_by_id_and_a_gone_ones_are_ignored() {
    let mut c: Core<(), Held> = Core::new(40);
    c.add_space(1, name("ls"), IO_S);
    let g = disk_format::Geometry::ALL[0];
    assert!(c
        .step(100, Input::JoinStarted { id: 1, geometry: g })
        .is_empty());
    let st = c.space_st(1).expect("listed");
    assert_eq!((st.geometry, st.acquire_last_attempt), (Some(g), 100));
    c.step(130, Input::RenewalStarted { id: 1 });
    c.step(
        131,
        Input::RenewalOk {
            id: 1,
            last_success_s: 127,
            rec: rec(127),
        },
    );
    let st = c.space_st(1).expect("listed");
    assert_eq!((st.renewal_last_attempt, st.last_success_s), (130, 127));
    c.step(132, Input::DeltaReleasing { id: 1 });
    assert!(c.space_st(1).is_some_and(|st| st.releasing));
    c.space_st_mut(1).expect("listed").gone = true;
    c.add_space(2, name("ls"), IO_S);
    c.step(
        133,
        Input::RenewalFailed {
            id: 1,
            code: -EBADE_FOR_TEST,
            corrupt: true,
        },
    );
    c.step(133, Input::DeltaReleasing { id: 1 });
    assert!(c.space_st(1).is_some_and(|st| st.corrupt_result == 0));
    let successor = c.space_st(2).expect("listed");
    assert!(successor.corrupt_result == 0 && !successor.renew_fail && !successor.releasing);
}
const EBADE_FOR_TEST: i32 = 52;

/// SET_EVENT and a REQUEST's host bit are the core's: what the next renewal writes
/// follows them; an unknown lockspace or a bad host_id is refused with its reason.
#[test]
fn set_event_and_a_requests_bit_decide_what_the_renewals_write() {
    use crate::events::{HostEvent, SETEV_REPLACE_EVENT};
    let mut c: Core<(), Held> = Core::new(40);
    c.add_space(1, name("ls"), IO_S);
    let Effect::Accepted { ci } = c.step(
        100,
        Input::Connected {
            fd: -1,
            pid: 5,
            uid: 0,
            stream: None,
            replacing_own: false,
        },
    )[0] else {
        panic!("not accepted")
    };
    let he = |host_id, event| HostEvent {
        host_id,
        generation: 0,
        event,
        data: 9,
    };
    let set = |c: &mut Core<(), Held>, ls: &str, ev: HostEvent, flags| {
        let fx = c.step(
            100,
            Input::Request {
                ci,
                req: CoreRequest::SetEvent {
                    ls: name(ls),
                    he: ev,
                    flags,
                },
            },
        );
        match &fx[..] {
            [Effect::Reply { reply, .. }] => (reply.rv, reply.why),
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(set(&mut c, "ls", he(4, 1), 0), (0, None));
    assert_eq!(set(&mut c, "ls", he(4, 2), 0).0, -crate::errno::EBUSY);
    assert_eq!(set(&mut c, "ls", he(4, 2), SETEV_REPLACE_EVENT).0, 0);
    assert_eq!(set(&mut c, "nope", he(4, 2), 0).0, -crate::errno::ENOENT);
    assert_eq!(set(&mut c, "ls", he(2001, 2), 0).0, -crate::errno::EINVAL);
    // A REQUEST: refused until the lockspace is joined; then the shell writes the
    // record, and the owner it found gets its bit when the request asks for
    // something.
    let request = |c: &mut Core<(), Held>, force_mode| {
        c.step(
            100,
            Input::Request {
                ci,
                req: CoreRequest::RequestLease {
                    ls: name("ls"),
                    name: name("r"),
                    lver: 0,
                    next_lver: false,
                    force_mode,
                },
            },
        )
    };
    let written = |c: &mut Core<(), Held>, fx: Vec<Effect<Held>>, result| {
        let [Effect::WriteRequest { op, ci: who, .. }] = fx[..] else {
            panic!("{fx:?}")
        };
        assert_eq!(who, ci);
        match &c.step(100, Input::RequestWritten { op, result })[..] {
            [Effect::Reply { reply, .. }] => reply.rv,
            other => panic!("{other:?}"),
        }
    };
    let refused = request(&mut c, 1);
    assert!(
        matches!(&refused[..], [Effect::Reply { reply, .. }] if reply.rv == -crate::errno::ENOSPC),
        "{refused:?}"
    );
    let st = c.space_st_mut(1).expect("listed");
    st.phase = Phase::Joined;
    st.add_result = Some(0);
    // Asks for nothing (lver 0, no force mode): no bit; a failed write: its code.
    let fx = request(&mut c, 0);
    assert_eq!(written(&mut c, fx, Ok(Some(7))), 0);
    let fx = request(&mut c, 1);
    assert_eq!(written(&mut c, fx, Err(-5)), -5);
    let fx = request(&mut c, 1);
    assert_eq!(written(&mut c, fx, Ok(Some(9))), 0);
    assert!(c.requests.is_empty());
    let input = c.space_st(1).expect("listed").outgoing.renew_input(100);
    assert_eq!((input.event.event, input.event.data), (2, 9));
    // Bits of host 4 (byte 0, bit 3) and host 9 (byte 1, bit 0).
    assert_eq!((input.bitmap[0], input.bitmap[1]), (1 << 3, 1));
}

/// ADD_LOCKSPACE's admission: a name here already (by phase and place), or a disk
/// area taken by another name, refuses the listing and leaves nothing listed; a gone
/// lockspace refuses nothing.
#[test]
fn a_lockspace_is_listed_only_where_no_other_is_by_name_or_disk_area() {
    let mut c: Core<(), Held> = Core::new(40);
    let at = |host_id: u64, path: &str, offset: u64| SpacePlace {
        host_id,
        path: path.into(),
        offset,
    };
    let list = |c: &mut Core<(), Held>, id, name, place| {
        let input = Input::ListSpace(SpaceListing {
            id,
            name,
            place,
            io_timeout_s: IO_S,
            monitor: HostMonitor::new(1, 60),
        });
        match Answer::of(c.step(0, input)) {
            Answer::Listed(listed) => listed,
            other => panic!("ListSpace answered {other:?}"),
        }
    };
    assert_eq!(list(&mut c, 1, name("a"), at(1, "/dev/x", 0)), Ok(()));
    let refusals = [
        (name("a"), at(1, "/dev/x", 0), ListRefused::BeingAdded),
        (name("a"), at(2, "/dev/x", 0), ListRefused::OtherPlace),
        (name("a"), at(1, "/dev/y", 0), ListRefused::OtherPlace),
        (name("b"), at(1, "/dev/x", 0), ListRefused::DiskAreaTaken),
    ];
    for (n, place, why) in refusals.clone() {
        assert_eq!(list(&mut c, 9, n, place), Err(why));
    }
    c.space_st_mut(1).expect("listed").phase = Phase::Joined;
    assert_eq!(
        list(&mut c, 9, name("a"), at(1, "/dev/x", 0)),
        Err(ListRefused::Joined)
    );
    c.space_st_mut(1).expect("listed").phase = Phase::Removing;
    assert_eq!(
        list(&mut c, 9, name("a"), at(1, "/dev/x", 0)),
        Err(ListRefused::BeingRemoved)
    );
    assert_eq!(c.spaces.len(), 1, "a refusal lists nothing");
    // Another offset of the same disk is another area.
    assert_eq!(list(&mut c, 2, name("b"), at(1, "/dev/x", 1 << 20)), Ok(()));
    c.check().expect("invariants");
    // Once gone, its name and area are free again.
    c.space_st_mut(1).expect("listed").gone = true;
    assert_eq!(list(&mut c, 3, name("a"), at(1, "/dev/x", 0)), Ok(()));
    assert_eq!(c.space(&name("a")).map(|s| s.id), Some(3));
}

/// [`Input::Examined`] gives what [`examined_lease`] gives for the same tables (the
/// daemon's form): the notice, then the kill order of the requested lease's holder
/// only; and nothing once the lease is held at another lver.
#[test]
fn an_examined_request_steps_as_the_daemon_decides() {
    use client_lib::proto::SANLK_REQ_FORCE;
    let mut c = core(&["ls"], 100, &[(21, "ls", "r1"), (22, "ls", "r2")]);
    let input = |lver| Input::Examined {
        ls: name("ls"),
        name: name("r1"),
        lver,
        force_mode: SANLK_REQ_FORCE,
    };
    let mut direct = examined_lease(&c.tables, &name("ls"), &name("r1"), 1, SANLK_REQ_FORCE);
    // The step adds the lockspace's lease times (joined at 100).
    if let Some(Effect::RequestNotice { lease, .. }) = direct.first_mut() {
        *lease = Some(LeaseTimes {
            last_success_s: 100,
            expires_at_s: 100 + timeouts::id_renewal_fail_seconds(IO_S),
        });
    }
    let fx = c.step(101, input(1));
    assert_eq!(fx, direct);
    assert!(matches!(&fx[0], Effect::RequestNotice { pids, lver: 1, .. } if pids == &[21]));
    assert!(matches!(
        &fx[1..],
        [Effect::Kill {
            order: KillOrder::Signal {
                pid: 21,
                sig: SIGKILL,
                ..
            },
            ..
        }]
    ));
    assert_eq!(c.step(102, input(2)), Vec::new());
}

/// sd_notify's STATUS= line: the first tick gives the summary, a tick gives it again
/// only when it changed (a client registered, a lease taken, a lockspace joined).
#[test]
fn a_tick_gives_the_status_summary_when_it_changed() {
    let mut c = core(&["a"], 100, &[(11, "a", "r")]);
    c.last_status = None;
    let one = StatusSummary {
        lockspaces: 1,
        leases: 1,
        clients: 1,
    };
    assert_eq!(c.step(101, Input::Tick), vec![Effect::Status(one)]);
    assert_eq!(c.step(102, Input::Tick), Vec::new(), "unchanged");
    c.add_space(2, name("b"), IO_S);
    assert_eq!(
        c.step(103, Input::Tick),
        Vec::new(),
        "b is still being added"
    );
    c.space_st_mut(2).expect("listed").phase = Phase::Joined;
    c.space_st_mut(2).expect("listed").add_result = Some(0);
    c.space_st_mut(2).expect("listed").renewal_ok(103, rec(103));
    let two = StatusSummary {
        lockspaces: 2,
        ..one
    };
    assert_eq!(c.step(104, Input::Tick), vec![Effect::Status(two)]);
    assert_eq!(c.status_summary(), two);
}

/// The release-build check's schedule: every step while the table is small, every
/// k-th step once it is large, so its cost per step stays about 256 resources' worth.
#[test]
fn the_cheap_check_runs_every_step_for_small_tables_and_every_kth_for_large() {
    assert_eq!(cheap_check_every(0), 1);
    assert_eq!(cheap_check_every(2 * CHEAP_CHECK_RESOURCES - 1), 1);
    assert_eq!(cheap_check_every(2 * CHEAP_CHECK_RESOURCES), 2);
    assert_eq!(cheap_check_every(10_000), 39);
    for n in [300, 1_000, 10_000, 100_000] {
        let per_step = n as u64 / cheap_check_every(n);
        assert!(
            per_step < 2 * CHEAP_CHECK_RESOURCES as u64,
            "{n} resources: {per_step} checked per step on average"
        );
    }
}

#[test]
fn the_cheap_check_finds_a_name_or_an_id_listed_twice() {
    let mut c = core(&["a", "b", "c"], 100, &[]);
    assert_eq!(c.check_cheap(), Ok(()));
    // The same visible name (bytes after the NUL differ): listed twice while both live.
    c.spaces[2].name = name("a");
    c.spaces[2].name.0[10] = b'x';
    assert!(c.check_cheap().unwrap_err().contains("listed twice"));
    // A gone lockspace may share a live one's name, never its id.
    c.spaces[0].st.gone = true;
    assert_eq!(c.check_cheap(), Ok(()));
    c.spaces[1].id = c.spaces[0].id;
    assert!(c.check_cheap().unwrap_err().contains("id 1 listed twice"));
}

#[test]
fn check_finds_a_notice_for_a_live_lease() {
    let mut c = core(&["ls"], 100, &[]);
    c.space_mut(&name("ls")).expect("ls").st.loss_notified = true;
    assert!(c.check().unwrap_err().contains("not lost"));
}

#[test]
fn the_same_time_twice_is_accepted() {
    let mut c = core(&["ls"], 100, &[]);
    c.step(105, Input::Tick);
    c.step(105, Input::Tick);
    c.step(106, Input::WatchTick);
}

#[test]
#[should_panic(expected = "time went back, from 105 s to 104 s")]
fn a_step_given_an_earlier_time_panics() {
    let mut c = core(&["ls"], 100, &[]);
    c.step(105, Input::Tick);
    c.step(104, Input::Tick);
}
