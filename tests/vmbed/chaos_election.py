"""The chaos bed's Python workload client: leader election with fencing tokens through
the project's Python package (`lockd.LeaderElection`), run on the lockd guests beside the
Rust clients (tests/src/chaos_client.rs), with the same event lines and data stamps.

One process, forever: campaign for one resource (a random timeout, or none), and while
leading write a stamp `lockd-chaos host=H pid=P res=R lver=TOKEN mode=ex seq=N` to the
resource's own 4 KiB data block with O_DIRECT every `--beat-ms`, then resign, pause,
again. Events go to the event log (`--log`, the guest's ttyS2) as
`t_ns=… host=H pid=P res=R event=E …`: `grant` (lver = the leadership's fencing token,
`election=1`),
`notice` (the daemon's loss notice, with its reason), `sigterm`, `release`,
`acquire_error`. Like the Rust client it is not cooperative: after a loss notice it keeps
writing until it is killed, so safety comes from the daemon, never from the client.

usage: python3 chaos_election.py --log PATH --host H --client N --seed S
           --resource LS:NAME:PATH:OFFSET --index I --data PATH --data-base BYTES [--beat-ms 100]
"""

from __future__ import annotations

import argparse
import mmap
import os
import random
import signal
import sys
import time

import lockd

BLOCK = 4096


def note(log: str, host: str, res: str, event: str, extra: str = "") -> None:
    line = f"t_ns={time.time_ns()} host={host} pid={os.getpid()} res={res} event={event}"
    if extra:
        line += " " + extra
    try:
        with open(log, "a") as f:
            f.write(line + "\n")
    except OSError:
        # The event port may be briefly unwritable (a guest being frozen): the checker
        # reports a missing event, never a crash here.
        pass


def main() -> int:
    p = argparse.ArgumentParser()
    for flag in ("--log", "--host", "--resource", "--data"):
        p.add_argument(flag, required=True)
    for flag in ("--client", "--seed", "--index", "--data-base"):
        p.add_argument(flag, type=int, required=True)
    p.add_argument("--beat-ms", type=int, default=100)
    a = p.parse_args()
    if a.data_base % BLOCK:
        sys.exit(f"--data-base {a.data_base} is not a multiple of {BLOCK}")
    spec = lockd.LeaseSpec.parse(a.resource)
    res = spec.name
    rng = random.Random(a.seed * 1000 + a.client)
    stop = {"term": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(term=True))
    fd = os.open(a.data, os.O_WRONLY | os.O_DIRECT | os.O_DSYNC)
    block = mmap.mmap(-1, BLOCK)  # page-aligned, as O_DIRECT needs
    offset = a.data_base + a.index * BLOCK
    election = lockd.LeaderElection(spec, owner=f"py{a.client}")
    while True:
        timeout = None if rng.random() < 0.25 else float(rng.randint(1, 10))
        try:
            lead = election.campaign(timeout=timeout)
        except lockd.Timeout:
            lead = None
        except lockd.LockdError as e:
            note(a.log, a.host, res, "acquire_error", "why=" + "_".join(str(e).split())[:80].replace("=", "_"))
            lead = None
        if lead is None:
            if stop["term"]:
                note(a.log, a.host, res, "sigterm")
                return 0
            time.sleep(rng.uniform(0.5, 3.0))
            continue
        token = lead.token
        note(a.log, a.host, res, "grant", f"lver={token} mode=ex election=1")
        lead.on_lost(lambda n, token=token: note(
            a.log, a.host, res, "notice",
            f"lver={token} reason={n.reason}{n.force_mode if n.reason == 'requested' else ''}"))
        hold_s = rng.uniform(0.5, 4.0)
        start = time.monotonic()
        seq = 0
        while time.monotonic() - start < hold_s:
            seq += 1
            text = f"lockd-chaos host={a.host} pid={os.getpid()} res={res} lver={token} mode=ex seq={seq}\n"
            block.seek(0)
            block.write(text.encode().ljust(BLOCK, b"\0"))
            try:
                os.pwritev(fd, [block], offset)
            except OSError as e:
                note(a.log, a.host, res, "write_error", f"lver={token} errno={e.errno}")
            if stop["term"]:
                # Killed for the lease (or the bed stops the workload): the log says which
                # it was from the notice before it.
                note(a.log, a.host, res, "sigterm", f"lver={token}")
                return 0
            time.sleep(a.beat_ms / 1000)
        trusted = "true" if lead.is_leader else "false"
        try:
            lead.resign()
            note(a.log, a.host, res, "release", f"lver={token} trusted={trusted}")
        except lockd.LockdError as e:
            note(a.log, a.host, res, "release_error", f"lver={token} why=" + "_".join(str(e).split())[:80].replace("=", "_"))
        if stop["term"]:
            note(a.log, a.host, res, "sigterm")
            return 0
        time.sleep(rng.uniform(0, 1.0))


if __name__ == "__main__":
    sys.exit(main())
