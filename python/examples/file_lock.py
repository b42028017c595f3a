#!/usr/bin/env python3
"""A flufl.lock-style lock for one machine or many, kept in a lockspace in a regular
file (NFS or a cluster file system for many machines; O_DIRECT must work on it).

    from file_lock import FileLock
    lock = FileLock("/srv/locks.img", "deploy", offset=1 << 20)
    with lock:                       # lock.lock(timeout=None) / lock.unlock()
        ... lock.token ...           # fencing token for what the lock protects

flufl.lock's "lifetime" (when others may break a lock whose holder vanished) is lockd's
business here: a dead process's lock is released at once by its daemon, a dead host's
after host_dead (8·io_timeout + watchdog fire timeout) — no clocks compared, no lock file
to break. ``is_locked`` turns false when the loss notice arrives.

Command line (the tested example): appends lines to DATA under the lock, each with the
token, through fenced_file.py (a lower token than the file has seen is refused).

    file_lock.py --image IMG --name NAME --offset 1M --data FILE [--lines N]
"""

import argparse
import json
import os
import sys
import time
from typing import Any, Optional

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lockd  # noqa: E402
from fenced_file import fenced_append  # noqa: E402


class FileLock:
    """flufl.lock's shape over a lockd lease in lockspace ``lockspace`` on ``image``."""

    def __init__(self, image: str, name: str, *, offset: int, lockspace: str = "files",
                 run_dir: Optional[str] = None) -> None:
        self._spec = f"{lockspace}:{name}:{image}:{offset}"
        self._run_dir = run_dir
        self._lease: Optional[lockd.Lease] = None

    def lock(self, timeout: Optional[float] = None) -> "FileLock":
        """Waits up to ``timeout`` seconds (None: forever; 0: once) — lockd.Timeout or
        lockd.LeaseHeld name the holder's host when it does not come."""
        self._lease = lockd.Lease(self._spec, timeout=timeout, run_dir=self._run_dir,
                                  owner=f"filelock-{os.getpid()}").acquire()
        return self

    def unlock(self) -> None:
        """Releases the lock (no-op when not locked)."""
        lease, self._lease = self._lease, None
        if lease is not None:
            lease.release()

    @property
    def is_locked(self) -> bool:
        """True while the lock is held and no loss notice arrived."""
        return self._lease is not None and self._lease.is_trusted

    @property
    def token(self) -> Optional[int]:
        """The fencing token of the lock held (None when not locked)."""
        return self._lease.token if self._lease else None

    @property
    def lease(self) -> Optional[lockd.Lease]:
        """The ``lockd.Lease`` behind the lock (None when not locked)."""
        return self._lease

    def __enter__(self) -> "FileLock":
        return self.lock()

    def __exit__(self, *exc: object) -> None:
        self.unlock()


def emit(event: str, **kw: Any) -> None:
    # One write of the whole line: print() writes the text and its newline apart, and a
    # signal handler that emits between the two would glue its line onto this one.
    sys.stdout.write(json.dumps({"event": event, "t": time.monotonic(),
                                 "wall_ns": time.time_ns(), "pid": os.getpid(), **kw}) + "\n")
    sys.stdout.flush()


def main() -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--image", required=True)
    p.add_argument("--name", required=True)
    p.add_argument("--offset", required=True)
    p.add_argument("--lockspace", default="files")
    p.add_argument("--data", required=True)
    p.add_argument("--lines", type=int, default=50)
    p.add_argument("--interval", type=float, default=0.1)
    p.add_argument("--timeout", type=float, default=None)
    args = p.parse_args()
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(args.offset[-1:].upper(), 1)
    offset = int(args.offset[:-1] if mult > 1 else args.offset) * mult
    lock = FileLock(args.image, args.name, offset=offset, lockspace=args.lockspace)
    with lock:
        lease = lock.lease
        assert lease is not None
        emit("locked", token=lock.token)
        lease.on_lost(lambda n: emit("lost", reason=n.reason, kill_in=n.kill_in))
        for i in range(args.lines):
            if not lock.is_locked:
                emit("stopped", line=i, reason=lease.loss.reason if lease.loss else None)
                return 75
            ok, highest = fenced_append(args.data, lease.token or 0, f"pid={os.getpid()} line={i}")
            if not ok:
                emit("refused", token=lock.token, highest=highest)
                return 3
            if i % 10 == 0:
                emit("line", n=i)
            time.sleep(args.interval)
        emit("unlocked")
    return 0


if __name__ == "__main__":
    sys.exit(main())
