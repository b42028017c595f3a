"""The results of the queries: who holds a lease (``LeaderInfo``), who holds what in a
lockspace (``LockInfo`` with its ``Holder`` and ``Waiter`` rows). Frozen dataclasses:
compared by value (``LeaderElection.observe`` yields one per change), hashable, and
turned into plain dicts with ``dataclasses.asdict`` (for JSON)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple


@dataclass(frozen=True)
class LeaderInfo:
    """Who holds a lease: ``host_id`` (0: nobody), the host's ``host_name`` (``""`` on a
    sanlock daemon, which has no host names), its ``generation``, ``token`` (the
    holder's fencing token, or the last one given when free), ``state`` (the holder
    host's state as this daemon sees it: ``live``, ``fail``, ``dead``, ``unknown``;
    ``none`` when nobody holds it) and ``shared``."""

    host_id: int
    generation: int
    token: int
    state: str
    shared: bool
    host_name: str = ""


@dataclass(frozen=True)
class Holder:
    """A local process holding a lease: ``pid``, its registration ``name``, the
    ``token`` it holds and ``mode`` (``EX`` or ``SH``)."""

    pid: int
    name: str
    token: int
    mode: str


@dataclass(frozen=True)
class Waiter:
    """A local candidate waiting for a lease (lockd only): ``pid``, ``name`` and
    ``waiting_s``, seconds since its first refused acquire (``None`` when unknown)."""

    pid: int
    name: str
    waiting_s: Optional[int]


@dataclass(frozen=True)
class LockInfo:
    """One lease of ``lockd.locks()``: ``lockspace``, ``resource``, ``spec``,
    ``owner_host_id`` (0: free), ``owner_host_name``, ``token``, ``state`` (as
    ``LeaderInfo.state``), ``shared``, ``holders`` (the local processes holding it) and
    ``waiting`` (the local candidates waiting for it)."""

    lockspace: str
    resource: str
    spec: str
    owner_host_id: int
    owner_host_name: str
    token: int
    state: str
    shared: bool
    holders: Tuple[Holder, ...] = ()
    waiting: Tuple[Waiter, ...] = ()
