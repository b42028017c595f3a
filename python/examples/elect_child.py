#!/usr/bin/env python3
"""A service run by `lockd elect --loss-file FILE -- elect_child.py`: it leads with
LOCKD_FENCING_TOKEN, and when told to stop reads why from LOCKD_LOSS_FILE (written by
`lockd elect` before the SIGTERM): the reason and the seconds left before the daemon's
kill escalation. Prints JSON lines: started, stopping."""

import json
import os
import signal
import sys
import time
from types import FrameType
from typing import Dict, Optional


def loss_reason() -> Dict[str, str]:
    """The loss file as a dict: reason, kill_in_s, watchdog_in_s, lease, token."""
    with open(os.environ["LOCKD_LOSS_FILE"]) as f:
        return dict(line.split("=", 1) for line in f.read().split())


def on_sigterm(_sig: int, _frame: Optional[FrameType]) -> None:
    why = loss_reason()
    print(json.dumps({"event": "stopping", "reason": why["reason"],
                      "kill_in_s": float(why["kill_in_s"]) if why["kill_in_s"] else None,
                      "token": int(why["token"])}), flush=True)
    sys.exit(0)


signal.signal(signal.SIGTERM, on_sigterm)
print(json.dumps({"event": "started", "token": int(os.environ["LOCKD_FENCING_TOKEN"]),
                  "lease": os.environ["LOCKD_LEASE"]}), flush=True)
while True:
    time.sleep(0.1)
