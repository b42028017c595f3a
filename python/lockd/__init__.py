"""lockd for Python: leases with fencing tokens and a lost-lease notice, leader
election, and who-holds-what, from a lockd daemon (or, for the calls sanlock also has, a
sanlock daemon). A pure-Python client of the protocol in docs/protocol.md.

    import lockd
    with lockd.Lease("LS:job-42:/dev/sdX:1M", timeout=30) as lease:
        store.write(data, token=lease.token)   # the store refuses lower tokens
        if lease.lost.is_set():                # the daemon warned: stop writing
            ...
"""

from ._conn import default_run_dir, metrics
from .election import LeaderElection, Leadership
from .errors import (BadSpec, Cancelled, DaemonGone, LeaseHeld, LockdError, NoExtensions,
                     Refused, Timeout, code_name)
from .lease import LeaseSpec, Lease, LossNotice, leader, locks
from .results import Holder, LeaderInfo, LockInfo, Waiter
from ._wire import WireError
from . import aio, errors

#: The package's version (pyproject.toml reads it from here).
__version__ = "0.1.0"

#: SANLK_RESTRICT_SIGKILL: the daemon sends SIGTERM where it would send SIGKILL.
RESTRICT_SIGKILL = 0x2
#: SANLK_RESTRICT_SIGTERM: the daemon sends SIGKILL where it would send SIGTERM.
RESTRICT_SIGTERM = 0x4

__all__ = [
    "BadSpec", "Cancelled", "DaemonGone", "Holder", "LeaderElection", "LeaderInfo",
    "Leadership", "Lease", "LeaseHeld", "LeaseSpec", "LockInfo", "LockdError", "LossNotice",
    "NoExtensions", "Refused", "RESTRICT_SIGKILL", "RESTRICT_SIGTERM", "Timeout", "Waiter",
    "WireError", "aio", "code_name", "default_run_dir", "errors", "leader", "locks",
    "metrics",
]
