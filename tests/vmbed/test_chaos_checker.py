"""The chaos checker's pure rules on hand-made histories: what they must report, and what
they must not (a checker that cries wolf fails CI as surely as a real violation).

Run: python3 -m unittest discover -s tests/vmbed -p 'test_*.py' (scripts/test-all.sh does).
"""

from __future__ import annotations

import unittest

import chaos


def grant(t: float, guest: str, pid: int, res: str, lver: int, mode: str = "ex") -> dict:
    return {"event": "grant", "t": t, "guest": guest, "pid": pid, "res": res, "lver": lver, "mode": mode}


def lvb_read(t: float, guest: str, pid: int, res: str, lver: int, prev: int) -> dict:
    return {"event": "lvb_read", "t": t, "guest": guest, "pid": pid, "res": res, "lver": lver, "prev": prev}


def lvb_set(t: float, guest: str, pid: int, res: str, lver: int) -> dict:
    return {"event": "lvb_set", "t": t, "guest": guest, "pid": pid, "res": res, "lver": lver, "rv": "0"}


def release(t: float, guest: str, pid: int, res: str, lver: int) -> dict:
    return {"event": "release", "t": t, "guest": guest, "pid": pid, "res": res, "lver": lver, "trusted": "true"}


def healthy(_guest: str, _t: float) -> bool:
    return False


class LvbRule(unittest.TestCase):
    def test_a_set_then_clean_release_must_be_read_by_the_next_grant(self) -> None:
        events = [
            grant(1.0, "g1", 100, "r1", 5), lvb_set(1.5, "g1", 100, "r1", 5), release(2.0, "g1", 100, "r1", 5),
            grant(3.0, "g2", 200, "r1", 6), lvb_read(3.1, "g2", 200, "r1", 6, 4),
        ]
        out = chaos.lvb_violations(events, healthy)
        self.assertEqual(len(out), 1, out)
        self.assertIn("lost update", out[0])
        # The value set is read: nothing to report.
        events[-1] = lvb_read(3.1, "g2", 200, "r1", 6, 5)
        self.assertEqual(chaos.lvb_violations(events, healthy), [])

    def test_a_value_from_a_later_lver_is_reported(self) -> None:
        events = [grant(3.0, "g2", 200, "r1", 6), lvb_read(3.1, "g2", 200, "r1", 6, 6)]
        self.assertEqual(len(chaos.lvb_violations(events, healthy)), 1)

    def test_a_set_of_another_resource_at_the_same_lver_is_not_this_ones(self) -> None:
        # CI's chaos run of 2026-12-07 (4ada89f): pid 182 on g2 set r8's LVB under lver 12
        # and released it; on r14 the same pid held lver 12 without setting it. The read of
        # r14's lver 13 rightly showed lver 11's value; the rule keyed without the resource
        # called it a lost update.
        events = [
            grant(63.2, "g2", 177, "r14", 11), lvb_set(64.8, "g2", 177, "r14", 11),
            release(64.9, "g2", 177, "r14", 11),
            grant(65.0, "g2", 182, "r8", 12), lvb_set(65.4, "g2", 182, "r8", 12),
            grant(65.5, "g2", 182, "r14", 12), release(66.0, "g2", 182, "r8", 12),
            release(66.2, "g2", 182, "r14", 12),
            grant(71.9, "g3", 179, "r14", 13), lvb_read(71.93, "g3", 179, "r14", 13, 11),
        ]
        self.assertEqual(chaos.lvb_violations(events, healthy), [])

    def test_a_release_during_its_hosts_fault_is_not_judged(self) -> None:
        events = [
            grant(1.0, "g1", 100, "r1", 5), lvb_set(1.5, "g1", 100, "r1", 5), release(2.0, "g1", 100, "r1", 5),
            grant(3.0, "g2", 200, "r1", 6), lvb_read(3.1, "g2", 200, "r1", 6, 4),
        ]
        self.assertEqual(chaos.lvb_violations(events, lambda guest, t: guest == "g1"), [])


def orphaned(t: float, guest: str, pid: int, res: str, lver: int) -> dict:
    return {"event": "orphaned", "t": t, "guest": guest, "pid": pid, "res": res, "lver": lver}


def adopt(t: float, guest: str, pid: int, res: str, lver: int) -> dict:
    return dict(grant(t, guest, pid, res, lver), adopt="1")


def no_sanlock(_guest: str) -> bool:
    return False


class TokenRule(unittest.TestCase):
    def test_two_exclusive_holders_at_one_lver_are_reported(self) -> None:
        events = [grant(1.0, "g1", 100, "r1", 5), grant(2.0, "g2", 200, "r1", 5)]
        self.assertEqual(len(chaos.token_violations(events, no_sanlock)), 1)

    def test_an_orphan_adopted_on_its_own_guest_keeps_its_lver(self) -> None:
        events = [
            grant(1.0, "g1", 100, "r1", 5), orphaned(2.0, "g1", 100, "r1", 5),
            adopt(3.0, "g1", 101, "r1", 5), orphaned(4.0, "g1", 101, "r1", 5),
            adopt(5.0, "g1", 102, "r1", 5),
        ]
        self.assertEqual(chaos.token_violations(events, no_sanlock), [])

    def test_an_adoption_before_the_orphan_or_on_another_guest_is_reported(self) -> None:
        # Adopted while its holder still held it (no orphan yet).
        early = [grant(1.0, "g1", 100, "r1", 5), adopt(1.5, "g1", 101, "r1", 5),
                 orphaned(2.0, "g1", 100, "r1", 5)]
        self.assertEqual(len(chaos.token_violations(early, no_sanlock)), 1)
        # An orphan is its own host's: another guest claiming it at that lver is two holders.
        elsewhere = [grant(1.0, "g1", 100, "r1", 5), orphaned(2.0, "g1", 100, "r1", 5),
                     adopt(3.0, "g2", 200, "r1", 5)]
        self.assertEqual(len(chaos.token_violations(elsewhere, no_sanlock)), 1)

    def test_a_persistent_holder_killed_leaves_an_orphan_of_its_own_guest(self) -> None:
        # Chaos seed 49: a forced REQUEST killed a persistent holder; its lease stayed an
        # orphan of that guest, adopted there at its lver.
        def sigterm(t: float, guest: str, pid: int, res: str, lver: int) -> dict:
            return {"event": "sigterm", "t": t, "guest": guest, "pid": pid, "res": res, "lver": lver}
        here = [grant(94.1, "g3", 183, "r15", 13), sigterm(97.4, "g3", 183, "r15", 13),
                adopt(102.8, "g3", 189, "r15", 13)]
        self.assertEqual(chaos.token_violations(here, no_sanlock), [])
        there = [grant(94.1, "g3", 183, "r15", 13), sigterm(97.4, "g3", 183, "r15", 13),
                 adopt(102.8, "g1", 189, "r15", 13)]
        self.assertEqual(len(chaos.token_violations(there, no_sanlock)), 1)


if __name__ == "__main__":
    unittest.main()
