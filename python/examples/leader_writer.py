#!/usr/bin/env python3
"""A leader-elected writer: campaigns for a lease, and while it leads sends its fencing
token with every write to lockd-fenced-store, which refuses a lower token than it has
accepted. Stops writing the moment the loss notice arrives.

    leader_writer.py --lease LS:leader:/dev/sdX:1M --store /run/store.sock --host node1

The spindle/etcd pattern: one writer at a time, and a deposed writer that has not
noticed yet is fenced by the store. Events go to stdout as JSON lines: elected, write
(every 10th), rejected, lost, stopped, campaign-again, sigterm, exit.
"""

import argparse
import json
import os
import signal
import socket
import sys
import threading
import time
from types import FrameType
from typing import Any, Optional

import lockd


def emit(event: str, **kw: Any) -> None:
    # One write of the whole line: print() writes the text and its newline apart, and a
    # signal handler that emits between the two would glue its line onto this one.
    sys.stdout.write(json.dumps({"event": event, "t": time.monotonic(),
                                 "wall_ns": time.time_ns(), "pid": os.getpid(), **kw}) + "\n")
    sys.stdout.flush()


class Store:
    """A line client of lockd-fenced-store: ``WRITE <token> <host> <t_ns>`` → OK/REJECT."""

    def __init__(self, path: str) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path)
        self.reader = self.sock.makefile("r")

    def write(self, token: int, host: str) -> str:
        """Sends one write; the store's reply (``OK`` or ``REJECT <highest>``)."""
        self.sock.sendall(f"WRITE {token} {host} {time.time_ns()}\n".encode())
        return self.reader.readline().strip()


def main() -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--lease", required=True)
    p.add_argument("--store", required=True)
    p.add_argument("--host", default=socket.gethostname())
    p.add_argument("--interval", type=float, default=0.1)
    args = p.parse_args()

    stop = threading.Event()
    election = lockd.LeaderElection(args.lease, owner=f"writer-{args.host}",
                                    restrict=lockd.RESTRICT_SIGKILL)

    def on_sigterm(_sig: int, _frame: Optional[FrameType]) -> None:
        lead = election.leadership
        notice = lead.wait_lost(1.0) if lead is not None else None
        emit("sigterm", lost=notice.reason if notice else None)
        os._exit(75)

    signal.signal(signal.SIGTERM, on_sigterm)

    def lead(leadership: lockd.Leadership) -> None:
        token = leadership.token or 0
        emit("elected", token=leadership.token, host=args.host)
        leadership.on_lost(lambda n: emit("lost", reason=n.reason, kill_in=n.kill_in,
                                          watchdog_in=n.watchdog_in))
        store = Store(args.store)
        n = 0
        while not leadership.lost.is_set():
            reply = store.write(token, args.host)
            if reply != "OK":
                emit("rejected", token=leadership.token, reply=reply)
                stop.set()
                return
            if n % 10 == 0:
                emit("write", token=leadership.token, n=n)
            n += 1
            time.sleep(args.interval)
        loss = leadership.loss
        assert loss is not None
        emit("stopped", token=leadership.token, reason=loss.reason, kill_in=loss.kill_in,
             lost_wall_ns=time.time_ns() - int((time.monotonic() - loss.at) * 1e9),
             writes=n)

    try:
        election.run(lead, stop=stop,
                     on_lost=lambda n: emit("campaign-again", after=n.reason))
    except lockd.LockdError as e:
        # E.g. the lockspace failed after a storage stall: a supervisor restarts us.
        emit("exit", code=e.code, error=str(e))
        return 75
    return 0


if __name__ == "__main__":
    sys.exit(main())
