"""Typed errors. Every one carries ``code``: the sanlock-style negative result code
(``SANLK_*`` from sanlock_rv.h, or ``-errno``), and ``code_name``."""

from __future__ import annotations

import errno
import os
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from .results import LeaderInfo

_SANLK_NAMES = {
    -201: "SANLK_ERROR", -202: "SANLK_AIO_TIMEOUT", -203: "SANLK_WD_ERROR",
    -210: "SANLK_DBLOCK_READ", -211: "SANLK_DBLOCK_WRITE", -212: "SANLK_DBLOCK_LVER",
    -213: "SANLK_DBLOCK_MBAL", -214: "SANLK_DBLOCK_CHECKSUM", -220: "SANLK_LEADER_READ",
    -221: "SANLK_LEADER_WRITE", -222: "SANLK_LEADER_DIFF", -223: "SANLK_LEADER_MAGIC",
    -224: "SANLK_LEADER_VERSION", -225: "SANLK_LEADER_SECTORSIZE",
    -226: "SANLK_LEADER_LOCKSPACE", -227: "SANLK_LEADER_RESOURCE",
    -228: "SANLK_LEADER_NUMHOSTS", -229: "SANLK_LEADER_CHECKSUM", -230: "SANLK_ADDLS_SIZES",
    -231: "SANLK_ADDLS_INVALID_HOSTID", -240: "SANLK_ACQUIRE_LVER",
    -241: "SANLK_ACQUIRE_LOCKSPACE", -242: "SANLK_ACQUIRE_IDDISK",
    -243: "SANLK_ACQUIRE_IDLIVE", -244: "SANLK_ACQUIRE_OWNED", -245: "SANLK_ACQUIRE_OTHER",
    -246: "SANLK_ACQUIRE_SHRETRY", -247: "SANLK_ACQUIRE_OWNED_RETRY",
    -250: "SANLK_RELEASE_LVER", -251: "SANLK_RELEASE_OWNER", -260: "SANLK_RENEW_OWNER",
    -261: "SANLK_RENEW_DIFF", -262: "SANLK_HOSTID_BUSY",
}

#: Codes meaning "another holder has it (or is taking it) now; try again later"
#: (client-lib's ``is_busy_code``): IDLIVE, OWNED, OTHER, SHRETRY, OWNED_RETRY,
#: DBLOCK_MBAL, DBLOCK_LVER, -EAGAIN (a local release of it in flight), -EBUSY (a local
#: acquire of it in flight, as sanlock answers), -EEXIST.
BUSY_CODES = frozenset(
    {-243, -244, -245, -246, -247, -213, -212, -errno.EAGAIN, -errno.EBUSY, -errno.EEXIST}
)


def code_name(code: int) -> str:
    """``SANLK_ACQUIRE_IDLIVE``, ``ENOENT`` …, or ``ok``."""
    if code in _SANLK_NAMES:
        return _SANLK_NAMES[code]
    if code < 0:
        return errno.errorcode.get(-code, f"error {code}")
    return "ok"


def describe(code: int) -> str:
    """The code's name, with the errno's text for ``-errno``."""
    if code in _SANLK_NAMES:
        return _SANLK_NAMES[code]
    if code < 0:
        return f"{errno.errorcode.get(-code, '?')}: {os.strerror(-code)}"
    return "ok"


class LockdError(Exception):
    """Base of every error of this package; ``code`` is the sanlock-style result."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(f"{message} ({describe(code)}, {code})")
        self.code = code
        self.code_name = code_name(code)


class BadSpec(LockdError, ValueError):
    """A lease spec, name or argument that cannot be sent (``code`` = -EINVAL)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, -errno.EINVAL)


class DaemonGone(LockdError, ConnectionError):
    """No daemon at the run dir, or it closed the connection (it died)."""


class NoExtensions(LockdError):
    """The daemon does not answer lockd's extension commands (a sanlock daemon)."""

    def __init__(self, run_dir: str) -> None:
        super().__init__(f"the daemon in {run_dir} does not answer lockd's extension "
                         "commands (a sanlock daemon?)", -errno.EOPNOTSUPP)


class Refused(LockdError):
    """The daemon refused the request with ``code``."""


class LeaseHeld(LockdError):
    """Another holder has the lease. ``owner_host_id``, ``owner_name`` (the holder's
    host name, ``""`` when unknown) and ``owner_state`` (``live``, ``fail``, ``dead``,
    ``unknown``; ``none`` when the lease was free again by the time we asked) describe it."""

    def __init__(self, lease: str, code: int, owner: Optional[LeaderInfo] = None,
                 message: Optional[str] = None) -> None:
        self.lease = lease
        self.owner: Optional[LeaderInfo] = owner
        self.owner_host_id: int = owner.host_id if owner else 0
        self.owner_name: str = owner.host_name if owner else ""
        self.owner_state: str = owner.state if owner else "unknown"
        self.owner_token: Optional[int] = owner.token if owner else None
        who = (f"host_id {self.owner_host_id} ({self.owner_name or '?'}, "
               f"{self.owner_state})") if self.owner_host_id else f"another holder ({self.owner_state})"
        super().__init__(message or f"lease {lease} is held by {who}", code)


class Timeout(LeaseHeld, TimeoutError):
    """The lease was still held elsewhere when ``timeout`` ran out; names the owner
    like ``LeaseHeld`` (``code`` is the last busy code the daemon gave)."""

    def __init__(self, lease: str, code: int, waited: float,
                 owner: Optional[LeaderInfo] = None) -> None:
        self.waited = waited
        super().__init__(lease, code, owner)
        who = (f"host_id {self.owner_host_id} ({self.owner_name or '?'}, {self.owner_state})"
               if self.owner_host_id else f"another holder ({self.owner_state})")
        self.args = (f"lease {lease}: not acquired within {waited:.1f} s; held by {who} "
                     f"({describe(code)}, {code})",)


class Cancelled(LockdError):
    """``Lease.cancel()`` (from another thread) stopped an acquire under way; nothing is
    held (``code`` = -ECANCELED)."""

    def __init__(self, lease: str) -> None:
        super().__init__(f"acquire of lease {lease} cancelled", -errno.ECANCELED)
        self.lease = lease
