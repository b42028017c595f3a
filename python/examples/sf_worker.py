#!/usr/bin/env python3
"""A Shaken-Fist-style worker: one lock per operation, held while the operation runs,
and the operators' lock list.

    sf_worker.py --lockspace LS --path DEV --catalog op-1=1M,op-2=2M run op-1 --journal J
    sf_worker.py --lockspace LS --path DEV --catalog op-1=1M,op-2=2M list [--json]

Shaken Fist keeps such locks as MariaDB rows with a 60 s lease refreshed every 20 s and a
"lost" path when the refresh fails. Here the lease lives on shared storage: the daemon
renews it, the process's death releases it, and the loss notice arrives *before* the
daemon's kill escalation. Each step of the operation is written to the operation's
journal with the lease's fencing token; the journal refuses a lower token than it has
seen (fenced_file.py), so a worker that lost its lock cannot write after the next one.

Events go to stdout as JSON lines: acquired, step, lost, sigterm, done, busy.
"""

import argparse
import json
import os
import signal
import socket
import sys
import time
from dataclasses import asdict
from types import FrameType
from typing import Any, Dict, Optional

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lockd  # noqa: E402
from fenced_file import fenced_append  # noqa: E402


def emit(event: str, **kw: Any) -> None:
    # One write of the whole line: print() writes the text and its newline apart, and a
    # signal handler that emits between the two would glue its line onto this one.
    sys.stdout.write(json.dumps({"event": event, "t": time.monotonic(),
                                 "wall_ns": time.time_ns(), "pid": os.getpid(), **kw}) + "\n")
    sys.stdout.flush()


def parse_size(text: str) -> int:
    """``1M`` and the like as bytes."""
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:].upper(), 1)
    return int(text[:-1] if mult > 1 else text) * mult


def catalog(args: argparse.Namespace) -> Dict[str, str]:
    """Every lock a Shaken Fist cluster can take, as lease specs."""
    out: Dict[str, str] = {}
    for item in args.catalog.split(","):
        name, off = item.split("=")
        out[name] = f"{args.lockspace}:{name}:{args.path}:{parse_size(off)}"
    return out


def run(args: argparse.Namespace) -> int:
    """Runs one operation under its lock."""
    spec = catalog(args)[args.op]
    # RESTRICT_SIGKILL: where the daemon would SIGKILL us (a FORCE request, the end of
    # its kill escalation) it sends SIGTERM, so we can say why we stop.
    lease = lockd.Lease(spec, timeout=args.timeout, owner=f"sf-{args.op}",
                        restrict=lockd.RESTRICT_SIGKILL)

    def on_sigterm(_sig: int, _frame: Optional[FrameType]) -> None:
        # The daemon writes its notice before it signals: give it a moment to arrive.
        notice = lease.wait_lost(1.0)
        emit("sigterm", lost=notice.reason if notice else None,
             force_mode=notice.force_mode if notice else None,
             lost_at=notice.at if notice else None)
        os._exit(75)

    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        lease.acquire()
    except lockd.LeaseHeld as e:  # also Timeout
        emit("busy", owner_host_id=e.owner_host_id, owner=e.owner_name,
             state=e.owner_state, code=e.code)
        return 1
    with lease:
        emit("acquired", op=args.op, token=lease.token, host=socket.gethostname())
        lease.on_lost(lambda n: emit("lost", reason=n.reason, kill_in=n.kill_in,
                                     force_mode=n.force_mode))
        for step in range(args.steps):
            if lease.lost.is_set():
                emit("stopped", step=step, reason=lease.loss.reason if lease.loss else None)
                return 75
            ok, highest = fenced_append(args.journal, lease.token or 0,
                                        f"op={args.op} step={step} worker={args.name}")
            emit("step", step=step, accepted=ok, highest=highest)
            if not ok:
                return 3
            time.sleep(args.step_seconds)
        emit("done", op=args.op)
    return 0


def show(args: argparse.Namespace) -> int:
    """The lock list, cluster-wide: a table, or JSON (one object per lock)."""
    rows = lockd.locks(args.lockspace, catalog(args).values())
    if args.json:
        print(json.dumps([asdict(r) for r in rows]))
        return 0
    print(f"{'LOCK':12} {'HOLDER':16} {'HOST_ID':7} {'TOKEN':5} {'STATE':7} LOCAL PIDS")
    for r in rows:
        pids = ",".join(f"{h.pid}({h.name})" for h in r.holders) or "-"
        holder = r.owner_host_name or ("-" if not r.owner_host_id else "?")
        print(f"{r.resource:12} {holder:16} {r.owner_host_id or '-':7} "
              f"{r.token:5} {r.state:7} {pids}")
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--lockspace", required=True)
    p.add_argument("--path", required=True, help="the shared device or file")
    p.add_argument("--catalog", required=True, help="NAME=OFFSET,… of every lock")
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run one operation under its lock")
    r.add_argument("op")
    r.add_argument("--journal", required=True)
    r.add_argument("--name", default=socket.gethostname())
    r.add_argument("--steps", type=int, default=10)
    r.add_argument("--step-seconds", type=float, default=0.2)
    r.add_argument("--timeout", type=float, default=None)
    ls = sub.add_parser("list", help="who holds which lock, cluster-wide")
    ls.add_argument("--json", action="store_true")
    args = p.parse_args()
    return run(args) if args.cmd == "run" else show(args)


if __name__ == "__main__":
    sys.exit(main())
