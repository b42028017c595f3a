"""Leader election over one resource lease (client-lib/src/election.rs), in etcd's
vocabulary: ``campaign``, ``leader``, ``observe``, ``resign``, and ``run``.

The leader is whoever holds the lease; its fencing token grows at every change of
leader. A campaign retries with back-off (0.2 s doubling to 2 s) while a live host
holds the lease; when the holder's host stops renewing, the daemon's acquire waits until
that host is dead (host_dead after it last renewed) and returns then.

Invariants: at most one leadership exists for a lease across all hosts; a leadership
whose lease is lost stays lost (``lost`` set, ``is_leader`` false): a leader told it lost
must stop acting, and stores that check the token reject it if it does not.
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Iterator, Optional, TypeVar, Union

from .errors import Timeout
from .lease import Lease, LeaseSpec, LossNotice, leader as _leader
from .results import LeaderInfo

T = TypeVar("T")


class Leadership(Lease):
    """What a successful campaign gives: a held ``Lease`` (``token``, ``lost``,
    ``loss``, ``on_lost``) with ``is_leader`` and ``resign()``."""

    @property
    def is_leader(self) -> bool:
        """True while we hold the lease and no loss notice arrived."""
        return self.is_trusted

    def resign(self) -> None:
        """Gives the lease up so another candidate can take it."""
        self.release()


class LeaderElection:
    """An election on ``spec`` through the daemon in ``run_dir``. ``owner`` is the name
    the daemon shows for our registration; ``restrict`` as for ``Lease``."""

    def __init__(self, spec: Union[str, LeaseSpec], *, run_dir: Optional[str] = None,
                 owner: Optional[str] = None, restrict: int = 0) -> None:
        self.spec = LeaseSpec.parse(spec)
        self.run_dir = run_dir
        self.owner = owner
        self.restrict = restrict
        self.leadership: Optional[Leadership] = None

    def campaign(self, timeout: Optional[float] = None) -> Leadership:
        """Blocks until we lead (or ``timeout`` seconds pass: ``Timeout``); returns the
        ``Leadership``, also kept as ``self.leadership``."""
        lead = Leadership(self.spec, timeout=timeout, run_dir=self.run_dir, owner=self.owner,
                          restrict=self.restrict)
        lead.acquire()
        self.leadership = lead
        return lead

    def resign(self) -> None:
        """Resigns the leadership this election holds (no-op when not leading)."""
        lead, self.leadership = self.leadership, None
        if lead is not None:
            lead.resign()

    def leader(self) -> LeaderInfo:
        """Who leads now, a ``LeaderInfo`` (host_id 0, state ``none`` when nobody
        does)."""
        return _leader(self.spec, run_dir=self.run_dir)

    def observe(self, interval: float = 0.5,
                stop: Optional[threading.Event] = None) -> Iterator[LeaderInfo]:
        """Yields the leader at start and at every change of holder, token or state,
        polling every ``interval`` seconds, until ``stop`` (a threading.Event) is set."""
        last: Optional[LeaderInfo] = None
        while stop is None or not stop.is_set():
            now = self.leader()
            if now != last:
                last = now
                yield now
            if stop is not None:
                stop.wait(interval)
            else:
                time.sleep(interval)

    def run(self, fn: Callable[[Leadership], T], stop: Optional[threading.Event] = None,
            on_lost: Optional[Callable[[LossNotice], object]] = None) -> Optional[T]:
        """Campaigns, leads, and campaigns again after a loss: ``fn(leadership)`` runs
        while we lead and should return when it is done or when ``leadership.lost`` is
        set; ``on_lost(notice)`` runs after a term that ended in a loss.

        With ``stop`` (a threading.Event), terms repeat until it is set (resigning after
        each term that ended without a loss). Without it, ``run`` returns ``fn``'s
        result after the first term that ends without a loss."""
        while stop is None or not stop.is_set():
            try:
                lead = self.campaign(timeout=1.0)
            except Timeout:
                continue
            try:
                result = fn(lead)
            finally:
                notice = lead.loss
                self.resign()
            if notice is None:
                if stop is None:
                    return result
                continue
            if on_lost is not None:
                on_lost(notice)
            # Our daemon may still be cleaning up after the loss.
            if stop is not None:
                stop.wait(1.0)
            else:
                time.sleep(1.0)
        return None
