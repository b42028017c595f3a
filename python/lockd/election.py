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

import time

from .errors import Timeout
from .lease import Lease, LeaseSpec, leader as _leader


class Leadership(Lease):
    """What a successful campaign gives: a held ``Lease`` (``token``, ``lost``,
    ``loss``, ``on_lost``) with ``is_leader`` and ``resign()``."""

    @property
    def is_leader(self):
        return self.is_trusted

    def resign(self):
        """Gives the lease up so another candidate can take it."""
        self.release()


class LeaderElection:
    """An election on ``spec`` through the daemon in ``run_dir``. ``owner`` is the name
    the daemon shows for our registration; ``restrict`` as for ``Lease``."""

    def __init__(self, spec, *, run_dir=None, owner=None, restrict=0):
        self.spec = LeaseSpec.parse(spec)
        self.run_dir = run_dir
        self.owner = owner
        self.restrict = restrict
        self.leadership = None

    def campaign(self, timeout=None):
        """Blocks until we lead (or ``timeout`` seconds pass: ``Timeout``); returns the
        ``Leadership``, also kept as ``self.leadership``."""
        lead = Leadership(self.spec, timeout=timeout, run_dir=self.run_dir, owner=self.owner,
                          restrict=self.restrict)
        lead.acquire()
        self.leadership = lead
        return lead

    def resign(self):
        """Resigns the leadership this election holds (no-op when not leading)."""
        lead, self.leadership = self.leadership, None
        if lead is not None:
            lead.resign()

    def leader(self):
        """Who leads now: ``{"host_id", "host_name", "generation", "token", "state",
        "shared"}`` (host_id 0, state ``none`` when nobody does)."""
        return _leader(self.spec, run_dir=self.run_dir)

    def observe(self, interval=0.5, stop=None):
        """Yields the leader at start and at every change of holder, token or state,
        polling every ``interval`` seconds, until ``stop`` (a threading.Event) is set."""
        last = None
        while stop is None or not stop.is_set():
            now = self.leader()
            if now != last:
                last = now
                yield now
            if stop is not None:
                stop.wait(interval)
            else:
                time.sleep(interval)

    def run(self, fn, stop=None, on_lost=None):
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
