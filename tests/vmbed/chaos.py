#!/usr/bin/env python3
"""The chaos bed: random, overlapping faults on the VM bed under a lease workload, judged
from what the storage saw.

Built on vmbed.py (its guests, tgt relays, ganesha, watchdog events and timeline). Three
guests join one lockspace; on each, `--clients` workload processes (`lockd-witness
client`, tests/src/chaos_client.rs) take the lockspace's `--resources` resource leases
exclusive or shared, with and without a timeout, some converting to the other mode half-way,
some asking a busy lease's holder for it with REQUEST (graceful or forced), some passing
the lease value block from holder to holder (LVB), some persistent and left as orphans of
their host, which later holders there adopt (at the orphan's lver) or release, and while they hold one write a stamp `host pid res lver mode seq` to that resource's own 4 KiB data
block with O_DIRECT. Beside them, `--elections` Python processes per lockd guest
(tests/vmbed/chaos_election.py) campaign with `lockd.LeaderElection` for resources r0..,
and while leading write the same stamps under their fencing token; and some holds go
through the CLI, `lockd acquire [--timeout S] -r SPEC -- lockd-witness cli-hold`, whose
holder takes its token from LOCKD_FENCING_TOKEN. They are not cooperative: after a loss notice they keep writing until
killed.

The nemesis draws its whole schedule from the seed before it starts (same seed, same
schedule): at random moments a random fault on a random guest — holder, waiter or
survivor alike — healed after a random while, several at once. Faults: SIGKILL or
SIGSTOP/SIGCONT of lockd-daemon or wdmd; freezing the whole guest (QMP stop/cont); a
hard reset; the guest's storage path cut, stalled or slowed (iSCSI relay) or its lease
device failing with EIO (device-mapper `error`); the guest's network link down (NFS);
leaving the lockspace and joining again; leaving it and joining at a host_id nobody used
before (a new host), then back; the guest's clock stepped an hour forward and
back; tgtd or ganesha restarted (every guest at once). A guest that dies (watchdog reset
or hard reset) is booted again and rejoins, and its workload restarts.

The history — every grant, release, loss notice, kill, write stamp seen on the storage,
fault start and end, guest reset — is kept as JSON lines with host-clock times (seconds
since the bed started). The checker judges it alone, never what lockd says of itself:

1. exclusion as the storage saw it: no write under a lower lver seen after a write or a
   grant under a higher one of the same resource, when either of the two is exclusive
   (a holder's own writes are not judged against its own convert);
2. tokens: no two exclusive grants of a resource with the same lver (but for an orphan's
   adoption on the guest where its holder left it, after it was left);
3. every holder killed (SIGTERM) for a lease got a loss notice first (but for a holder
   run by `lockd acquire -- CMD`, which has no loss watch);
4. no healthy host fenced, reset, its lockspace failed or its holders killed (but for a
   holder whose lease another client asked for with REQUEST): a guest none
   of whose faults (nor a global one) was running, or had just ended (grace: host_dead +
   20 s after the heal, for consequences that come late);
5. liveness: after the last fault heals, every guest rejoins and every resource is
   granted within host_dead + 30 s;
6. lease value blocks: a value read at a grant was set under an earlier lver, and the one
   an exclusive holder set and released cleanly is what the next grant reads.

Last line: `chaos seed=S minutes=M fence=… faults=N grants=N writes=N violations=N
false_fences=N liveness=ok|fail max_takeover_s=X`.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import vmbed as vb  # noqa: E402

N_GUESTS = 3
RES_BASE = 8 << 20  # resource lease i at RES_BASE + i MiB
RES_STRIDE = 1 << 20
DATA_BASE = 40 << 20  # resource i's stamp block at DATA_BASE + i * 4096
AREA_BYTES = 64 << 20
FIRE_TIMEOUT_S = 10
# sanlock 3.8.5's fixed watchdog fire timeout: every host of a mixed lockspace shares W.
SANLOCK_FIRE_TIMEOUT_S = 60
GRACE_AFTER_HEAL_S = 20.0
GRANT_MARGIN_S = 0.3

vb.SCENARIOS["chaos"] = ("iscsi", "random overlapping faults under a lease workload (iSCSI)")
vb.SCENARIOS["chaos-nfs"] = ("nfs", "random overlapping faults under a lease workload (NFS)")


def host_dead_s(io_timeout_s: int, fire_timeout_s: int) -> int:
    """sanlock's host_dead_seconds: 8 io_timeouts plus the watchdog's fire timeout."""
    return 8 * io_timeout_s + fire_timeout_s


# ---------------------------------------------------------------------------------------
# History and the storage witness.


class History:
    """Every record, in arrival order, with the bed's clock time `t`."""

    def __init__(self, clock: vb.Clock) -> None:
        self.clock = clock
        self.lock = threading.Lock()
        self.records: list[dict] = []

    def add(self, kind: str, t: float | None = None, **kw) -> dict:
        rec = {"t": round(self.clock.now() if t is None else t, 3), "kind": kind, **kw}
        with self.lock:
            self.records.append(rec)
        return rec

    def of(self, kind: str) -> list[dict]:
        with self.lock:
            return [r for r in self.records if r["kind"] == kind]

    def dump(self, path: Path) -> None:
        with self.lock, open(path, "w") as f:
            for r in self.records:
                f.write(json.dumps(r, sort_keys=True) + "\n")


class ChaosWitness(vb.Witness):
    """Event lines from the guests' ttyS2 and the stamp blocks and delta leases in the
    backing store, into the history."""

    def __init__(self, bed: "ChaosBed") -> None:
        super().__init__(bed)
        self.history = bed.history
        self.n_res = bed.n_res

    def event(self, guest: str, t: float, line: str) -> None:
        kv = dict(p.split("=", 1) for p in line.split() if "=" in p)
        ev = kv.get("event", "?")
        rec = {"guest": guest, "event": ev}
        for k in ("pid", "res", "lver", "mode", "reason", "victim", "why", "errno", "trusted",
                  "force_mode", "rv", "convert", "prev", "adopt", "n", "cli", "election"):
            if k in kv:
                rec[k] = int(kv[k]) if k in ("pid", "lver", "victim", "prev") and kv[k].isdigit() else kv[k]
        self.history.add("event", t, **rec)
        if ev not in ("grant", "release", "lvb_read", "lvb_set"):
            extra = " ".join(f"{k}={v}" for k, v in rec.items() if k not in ("guest", "event"))
            self.bed.timeline.mark(guest, f"{ev} {extra}".strip(), t)

    def poll(self, backing: Path, slots: dict[int, str], lockspace_offset: int, sector: int) -> None:
        last: dict[int, bytes] = {}
        last_ts: dict[int, int] = {}
        while not self.stop_flag:
            t = self.bed.clock.now()
            try:
                with open(backing, "rb") as f:
                    f.seek(DATA_BASE)
                    blob = f.read(self.n_res * 4096)
                    for i in range(self.n_res):
                        blk = blob[i * 4096:i * 4096 + 160]
                        if blk == last.get(i):
                            continue
                        last[i] = blk
                        text = blk.split(b"\0", 1)[0].decode(errors="replace")
                        if not text.startswith("lockd-chaos "):
                            continue
                        kv = dict(p.split("=", 1) for p in text.split()[1:] if "=" in p)
                        try:
                            self.history.add("write", t, guest=kv["host"], pid=int(kv["pid"]), res=kv["res"],
                                             lver=int(kv["lver"]), mode=kv["mode"], seq=int(kv["seq"]))
                        except (KeyError, ValueError):
                            self.history.add("torn_write", t, text=text[:120])
                    for host_id in slots:
                        f.seek(lockspace_offset + (host_id - 1) * sector)
                        rec = f.read(512)
                        ts = int.from_bytes(rec[152:160], "little") if len(rec) >= 160 else 0
                        if ts != last_ts.get(host_id):
                            last_ts[host_id] = ts
                            with self.lock:
                                self.renewals.setdefault(host_id, []).append(t)
            except OSError:
                pass
            time.sleep(0.02)


# ---------------------------------------------------------------------------------------
# The bed.


class ChaosBed(vb.Bed):
    def __init__(self, scenario: str, io_timeout_s: int, seed: int, fence: str, n_res: int,
                 clients: int, planted: str | None, keep: bool, mixed_sanlock: bool = False,
                 py_clients: int = 2) -> None:
        super().__init__(scenario, io_timeout_s, SANLOCK_FIRE_TIMEOUT_S if mixed_sanlock else FIRE_TIMEOUT_S, keep)
        # --mixed-sanlock: a fourth guest runs sanlock 3.8.5 (its daemon and wdmd), whose
        # clients speak only sanlock's protocol.
        self.n_guests = N_GUESTS + (1 if mixed_sanlock else 0)
        self.kinds = {N_GUESTS + 1: "sanlock"} if mixed_sanlock else {}
        self.seed = seed
        self.fence = fence
        self.n_res = n_res
        self.clients = clients
        self.py_clients = py_clients
        self.history = History(self.clock)
        self.witness = ChaosWitness(self)
        if planted:
            self.daemon_env = f"env LOCKD_PLANTED_BUG={planted} "
        self.booting: set[int] = set()
        self.stopping = False
        self.workload_stopped_at: float | None = None
        # guest index -> [start, end] windows when a fault of its own (or a global one)
        # was running or had just ended; end None while it runs.
        self.windows: dict[int, list[list[float | None]]] = {i: [] for i in range(1, self.n_guests + 1)}
        self.window_lock = threading.Lock()
        # host_id -> guest index: each guest's own (its index) and the fresh ones the
        # `new-host-id` fault gave it, never reused.
        self.host_owner: dict[int, int] = {i: i for i in range(1, self.n_guests + 1)}

    def new_host_id(self, index: int) -> int:
        """A host_id no guest has used, for guest `index` (`new-host-id`)."""
        with self.window_lock:
            hid = max(max(self.host_owner) + 1, 10)
            self.host_owner[hid] = index
            return hid

    def init_area(self, path: Path) -> None:
        with open(path, "wb") as f:
            f.truncate(AREA_BYTES)
        self.lockd("direct", "init", "-s", f"{vb.LOCKSPACE}:0:{path}:0", "-o", str(self.io_timeout_s))
        for i in range(self.n_res):
            self.lockd("direct", "init", "-r", f"{vb.LOCKSPACE}:r{i}:{path}:{RES_BASE + i * RES_STRIDE}")

    def data_path(self) -> str:
        return "/dev/sda" if self.storage == "iscsi" else "/mnt/nfs/leases"

    def start_workload(self, g: vb.Guest) -> None:
        specs = ",".join(f"{vb.LOCKSPACE}:r{i}:{self.lease_path()}:{RES_BASE + i * RES_STRIDE}"
                         for i in range(self.n_res))
        lines = []
        # sanlock's INQUIRE gives no lver for a shared lease: its plain clients take
        # exclusive leases only.
        plain = " --plain --shared-percent 0" if g.kind == "sanlock" else ""
        for c in range(1, self.clients + 1):
            client = (f"{self.env(g)}lockd-witness client{plain} --log /dev/ttyS2 --host {g.name} --client $((n * 100 + {c})) "
                      f"--seed {self.seed} --resources {specs} --data {self.data_path()} --data-base {DATA_BASE}")
            lines.append(f"setsid sh -c 'n=0; while [ ! -e /run/chaos.stop ]; do n=$((n + 1)); "
                         f"{client} >>/var/tmp/client{c}.log 2>&1; sleep 1; done' </dev/null >/dev/null 2>&1 &\n"
                         "echo $! >>/run/chaos.clients\n")
        # Python leader elections (`lockd.LeaderElection`, tests/vmbed/chaos_election.py):
        # election k campaigns for resource r{k} on every lockd guest, against the other
        # guests' candidates and this guest's Rust clients. A sanlock daemon has no loss
        # watch, which the package's leases need.
        py = self.py_clients if g.kind == "lockd" else 0
        for k in range(py):
            spec = f"{vb.LOCKSPACE}:r{k}:{self.lease_path()}:{RES_BASE + k * RES_STRIDE}"
            client = (f"{self.env(g)}python3 /usr/lib/lockd-chaos/chaos_election.py --log /dev/ttyS2 "
                      f"--host {g.name} --client $((n * 100 + {50 + k})) --seed {self.seed} --resource {spec} "
                      f"--index {k} --data {self.data_path()} --data-base {DATA_BASE}")
            lines.append(f"setsid sh -c 'n=0; while [ ! -e /run/chaos.stop ]; do n=$((n + 1)); "
                         f"{client} >>/var/tmp/election{k}.log 2>&1; sleep 1; done' </dev/null >/dev/null 2>&1 &\n"
                         "echo $! >>/run/chaos.clients\n")
        g.sh("rm -f /run/chaos.stop /run/chaos.clients\n" + "".join(lines))
        self.timeline.mark(g.name, f"workload started ({self.clients} clients, {py} elections)")

    def stop_workload(self) -> None:
        self.workload_stopped_at = self.clock.now()
        self.history.add("workload_stop")
        for g in self.guests.values():
            if g.alive():
                try:
                    g.sh("touch /run/chaos.stop; for p in $(cat /run/chaos.clients); do kill -TERM -- -$p; done 2>/dev/null; true",
                         timeout=30, check=False)
                except vb.BedError:
                    pass

    # --- fault windows

    def open_window(self, guests: list[int]) -> list[list[float | None]]:
        t = self.clock.now()
        ws = []
        with self.window_lock:
            for i in guests:
                w: list[float | None] = [t, None]
                self.windows[i].append(w)
                ws.append(w)
        return ws

    def close_window(self, ws: list[list[float | None]]) -> None:
        t = self.clock.now()
        with self.window_lock:
            for w in ws:
                w[1] = t

    def faulty(self, index: int, t: float) -> bool:
        """Whether guest `index` had a fault of its own running at `t`, or one that ended
        less than the grace before."""
        grace = host_dead_s(self.io_timeout_s, self.fire_timeout_s) + GRACE_AFTER_HEAL_S
        with self.window_lock:
            for start, end in self.windows[index]:
                if start <= t and (end is None or t <= end + grace):
                    return True
        return False

    # --- guests coming back

    def bring_up(self, index: int, first: bool = False) -> None:
        """Boots guest `index` (again), joins it and starts its workload; the whole time
        is a fault window of its own (a rebooted host is not a healthy one)."""
        ws = [] if first else self.open_window([index])
        try:
            if self.storage == "iscsi":
                self.relays[index].set_mode("pass")
            g = self.boot(index, self.kinds.get(index, "lockd"))
            for attempt in range(3):
                try:
                    self.join(g)
                    break
                except vb.BedError as e:
                    self.timeline.mark(g.name, f"join try {attempt + 1} failed: {str(e)[-80:]}")
                    time.sleep(2 * self.io_timeout_s)
            else:
                raise vb.BedError(f"{g.name} did not join after 3 tries")
            self.history.add("joined", guest=g.name, boot=g.boots)
            if not self.stopping:
                self.start_workload(g)
        finally:
            if ws:
                self.close_window(ws)

    def reaper(self) -> None:
        """Boots again every guest that died (watchdog or hard reset), until the end."""
        while not self.stopping:
            for i, g in list(self.guests.items()):
                if i in self.booting or g.alive():
                    continue
                t = g.exit_t if g.exit_t is not None else self.clock.now()
                self.history.add("guest_down", t, guest=g.name, watchdog=bool(g.watchdog_t), boot=g.boots)
                self.booting.add(i)

                def up(i: int = i) -> None:
                    try:
                        time.sleep(1)
                        self.bring_up(i)
                    except Exception as e:
                        # Powered off, so that this loop boots it again (as an operator
                        # power-cycles a host that hangs at boot); a guest that never
                        # comes up fails the liveness check.
                        self.timeline.mark(f"g{i}", f"bring-up failed: {e}; powering it off to boot it again")
                        self.history.add("bring_up_failed", guest=f"g{i}", why=str(e)[-200:])
                        self.guests[i].kill()
                    finally:
                        self.booting.discard(i)

                threading.Thread(target=up, daemon=True).start()
            time.sleep(0.5)


# ---------------------------------------------------------------------------------------
# The nemesis.


@dataclass
class Fault:
    at_s: float  # after the workload started
    name: str
    guest: int  # 0: every guest (a target restart)
    hold_s: float
    started: float | None = None
    healed: float | None = None
    skipped: str | None = None


def faults_for(storage: str) -> list[tuple[str, float, float, float]]:
    """(name, weight, shortest and longest hold in seconds) for the storage kind."""
    common = [
        ("sigkill-lockd", 1.0, 0, 0),
        ("sigstop-lockd", 2.0, 1, 12),
        ("sigkill-wdmd", 0.5, 0, 0),
        ("sigstop-wdmd", 1.0, 1, 15),
        ("freeze-guest", 2.0, 1, 15),
        ("reset-guest", 0.5, 0, 0),
        ("leave-rejoin", 1.5, 2, 10),
        ("new-host-id", 1.0, 5, 20),
        ("clock-step", 1.0, 5, 20),
    ]
    if storage == "iscsi":
        return common + [
            ("cut-storage", 2.0, 1, 15),
            ("stall-storage", 2.0, 1, 12),
            ("slow-storage", 1.0, 3, 15),
            ("eio-lease", 1.0, 1, 12),
            ("restart-tgtd", 0.5, 1, 5),
        ]
    return common + [("cut-network", 2.0, 1, 15), ("restart-ganesha", 0.5, 1, 5)]


def schedule(seed: int, minutes: float, storage: str, n_guests: int = N_GUESTS) -> list[Fault]:
    """The whole fault schedule, from the seed alone."""
    rng = random.Random(seed)
    kinds = faults_for(storage)
    names = [k[0] for k in kinds]
    weights = [k[1] for k in kinds]
    out = []
    t = 20.0  # the workload runs alone for a while first
    end = minutes * 60 - 15
    while True:
        t += rng.uniform(3, 20)
        if t >= end:
            return out
        name = rng.choices(names, weights)[0]
        _, _, lo, hi = kinds[names.index(name)]
        guest = 0 if name.startswith("restart-") else rng.randint(1, n_guests)
        out.append(Fault(round(t, 2), name, guest, round(rng.uniform(lo, hi), 2)))


class Nemesis:
    def __init__(self, bed: ChaosBed, faults: list[Fault]) -> None:
        self.bed = bed
        self.faults = faults
        self.threads: list[threading.Thread] = []
        self.busy: set[int] = set()  # guests with a fault running (one at a time each)
        self.lock = threading.Lock()

    def run(self, t0: float) -> None:
        for f in self.faults:
            delay = t0 + f.at_s - self.bed.clock.now()
            if delay > 0:
                time.sleep(delay)
            th = threading.Thread(target=self.one, args=(f,), daemon=True)
            th.start()
            self.threads.append(th)

    def wait(self) -> None:
        for th in self.threads:
            th.join()

    def one(self, f: Fault) -> None:
        bed = self.bed
        n = bed.n_guests
        targets = list(range(1, n + 1)) if f.guest == 0 else [f.guest]
        with self.lock:
            if f.guest == 0 and self.busy & {0}:
                f.skipped = "a global fault runs"
            elif f.guest != 0:
                # The drawn guest first, else the next free one (a guest runs one fault of
                # its own at a time, and none while it boots).
                free = [i for i in range(1, n + 1)
                        if i not in self.busy and i not in bed.booting and bed.guests[i].alive()]
                order = [(f.guest - 1 + k) % n + 1 for k in range(n)]
                pick = next((i for i in order if i in free), None)
                if pick is None:
                    f.skipped = "every guest is busy (a fault or a boot) or down"
                else:
                    f.guest = pick
            if not f.skipped:
                self.busy.add(f.guest)
        if f.skipped:
            bed.history.add("fault_skipped", fault=f.name, guest=f.guest, why=f.skipped)
            return
        targets = list(range(1, n + 1)) if f.guest == 0 else [f.guest]
        ws = bed.open_window(targets)
        who = "all" if f.guest == 0 else f"g{f.guest}"
        f.started = bed.clock.now()
        bed.history.add("fault_start", fault=f.name, guest=who, hold_s=f.hold_s)
        bed.timeline.mark(who, f"FAULT {f.name} for {f.hold_s:.1f} s")
        try:
            heal = self.apply(f)
            time.sleep(f.hold_s)
            if heal:
                heal()
            for g in [bed.guests[i] for i in targets]:
                self.ensure_joined(g)
        except vb.BedError as e:
            bed.history.add("fault_error", fault=f.name, guest=who, why=str(e)[-200:])
        finally:
            f.healed = bed.clock.now()
            bed.history.add("fault_end", fault=f.name, guest=who)
            bed.timeline.mark(who, f"HEALED {f.name}")
            bed.close_window(ws)
            with self.lock:
                self.busy.discard(f.guest)

    def apply(self, f: Fault):
        """Starts fault `f`; returns what heals it (None: nothing to undo)."""
        bed = self.bed
        g = bed.guests.get(f.guest)
        n = f.name
        if n in ("sigkill-lockd", "sigstop-lockd", "sigkill-wdmd", "sigstop-wdmd"):
            sig = "KILL" if n.startswith("sigkill") else "STOP"
            pidfile = "/run/daemon.pid" if n.endswith("lockd") else "/run/wdmd.pid"
            g.sh(f"kill -{sig} $(cat {pidfile})", timeout=20)
            if sig == "STOP":
                return lambda: self.quiet(g, f"kill -CONT $(cat {pidfile})")
            if n == "sigkill-lockd":
                return lambda: self.restart_daemon(g)
            return None
        if n == "freeze-guest":
            g.qmp("stop")
            return lambda: g.qmp("cont") if g.alive() else None
        if n == "reset-guest":
            g.kill()
            return None
        if n == "leave-rejoin":
            g.sh(f"{bed.env(g)}lockd rem-lockspace -s {vb.LOCKSPACE}:{g.index}:{bed.lease_path()}:0", timeout=60, check=False)
            return lambda: self.rejoin(g)
        if n == "new-host-id":
            # A new host taking a free host_id, under load: the guest leaves and joins at a
            # host_id nobody used before (its workload goes on there), then goes back.
            hid = bed.new_host_id(g.index)
            path = bed.lease_path()
            g.sh(f"{bed.env(g)}lockd rem-lockspace -s {vb.LOCKSPACE}:{g.index}:{path}:0", timeout=60, check=False)
            rc, out = g.sh(f"{bed.env(g)}lockd add-lockspace -o {bed.io_timeout_s} -s {vb.LOCKSPACE}:{hid}:{path}:0 2>&1",
                           timeout=120, check=False)
            bed.timeline.mark(g.name, f"joined as host_id {hid}" if rc == 0 else f"join as host_id {hid} failed: {out.strip()[-80:]}")

            def back() -> None:
                self.quiet(g, f"{bed.env(g)}lockd rem-lockspace -s {vb.LOCKSPACE}:{hid}:{path}:0")
                self.rejoin(g)
            return back
        if n == "clock-step":
            g.sh("date -s @$(( $(date +%s) + 3600 )) >/dev/null", timeout=20)
            return lambda: self.quiet(g, "date -s @$(( $(date +%s) - 3600 )) >/dev/null")
        if n in ("cut-storage", "stall-storage", "slow-storage"):
            r = bed.relays[f.guest]
            r.set_mode(n.split("-")[0])
            return lambda: r.set_mode("pass")
        if n == "eio-lease":
            g.sh("n=$(blockdev --getsz /dev/sda); dmsetup suspend --noflush lease && "
                 "echo \"0 $n error\" | dmsetup load lease && dmsetup resume lease", timeout=30)
            return lambda: self.quiet(g, "n=$(blockdev --getsz /dev/sda); dmsetup suspend --noflush lease && "
                                         "echo \"0 $n linear /dev/sda 0\" | dmsetup load lease && dmsetup resume lease")
        if n == "cut-network":
            g.qmp("set_link", name="n0", up=False)
            return lambda: g.qmp("set_link", name="n0", up=True) if g.alive() else None
        if n == "restart-tgtd":
            bed.tgt.stop()
            return self.start_tgt
        if n == "restart-ganesha":
            bed.ganesha.stop()
            return bed.ganesha.start
        raise vb.BedError(f"unknown fault {n}")

    def quiet(self, g: vb.Guest, script: str) -> None:
        """Runs a healing command on a guest that may have died meanwhile."""
        if g.alive():
            try:
                g.sh(script, timeout=30, check=False)
            except vb.BedError:
                pass

    def restart_daemon(self, g: vb.Guest) -> None:
        """After the lease daemon was killed: its holders' host is reset by the watchdog
        within host_dead; a host that had nothing to protect stays up, and its daemon is
        started again, as systemd would."""
        bed = self.bed
        deadline = bed.clock.now() + host_dead_s(bed.io_timeout_s, bed.fire_timeout_s) + 5
        while bed.clock.now() < deadline:
            if not g.alive() or g.index in bed.booting:
                return
            time.sleep(1)
        try:
            rc, _ = g.sh("kill -0 $(cat /run/daemon.pid) 2>/dev/null", timeout=20, check=False)
            if rc != 0:
                g.sh(bed.daemon_start_script(g), timeout=60)
                bed.timeline.mark(g.name, "lease daemon started again (the guest stayed up)")
        except vb.BedError:
            pass

    def rejoin(self, g: vb.Guest) -> None:
        self.ensure_joined(g)

    def ensure_joined(self, g: vb.Guest) -> None:
        """After a fault: the guest's daemon in the lockspace again, as an operator (or
        vdsm, or lvmlockd) adds it back once a failed lockspace is gone. Up to a minute:
        a failed lockspace stays until its holders are gone."""
        bed = self.bed
        deadline = bed.clock.now() + 60
        while bed.clock.now() < deadline and not bed.stopping:
            if not g.alive() or g.index in bed.booting:
                return  # the reaper boots and joins it
            try:
                rc, out = g.sh(f"{bed.env(g)}lockd add-lockspace -o {bed.io_timeout_s} "
                               f"-s {vb.LOCKSPACE}:{g.index}:{bed.lease_path()}:0 2>&1", timeout=120, check=False)
            except vb.BedError:
                rc, out = 1, "no answer"
            if rc == 0 and "already joined" in out:
                return
            if rc == 0:
                bed.timeline.mark(g.name, "joined the lockspace again")
                bed.history.add("joined", guest=g.name, boot=g.boots)
                return
            if "-17" in out or "exists" in out.lower() or "already" in out.lower():
                return
            time.sleep(3)
        bed.history.add("rejoin_failed", guest=g.name)

    def start_tgt(self) -> None:
        """tgtd again on the same port and LUN (its reservations are gone, as after a
        target restart)."""
        old = self.bed.tgt
        port = old.port
        orig = vb.free_port
        vb.free_port = lambda: port
        try:
            self.bed.tgt = vb.Tgt(self.bed.workdir, self.bed.lun)
        finally:
            vb.free_port = orig


# ---------------------------------------------------------------------------------------
# The checker.


@dataclass
class Verdict:
    violations: list[str] = field(default_factory=list)
    false_fences: list[str] = field(default_factory=list)
    liveness: bool = True
    max_takeover_s: float | None = None


def lvb_violations(events: list[dict], faulty) -> list[str]:
    """Rule 6, lease value blocks passed from holder to holder: a value read at a grant
    names an earlier lver; and when the grant just before it (the highest lver below its
    own, any mode) was an exclusive hold that set the LVB and then released cleanly, on a
    healthy host (`faulty(guest, t)` false), before this read, the value read is that one
    (a lost update otherwise). A hold taken over from a dead or fenced holder is not such
    a case: that holder's release, if any, comes after the new grant. Pure: from the
    history's events alone (tests/vmbed/test_chaos_checker.py)."""
    out: list[str] = []
    grants_by_res: dict[str, list[dict]] = {}
    for r in events:
        if r["event"] == "grant" and isinstance(r.get("lver"), int) and not r.get("convert"):
            grants_by_res.setdefault(r["res"], []).append(r)
    # Keyed by resource too: a workload process holds several resources, often at equal
    # lvers, and guests reuse pids.
    lvb_set = {(r["res"], r["guest"], r.get("pid"), r.get("lver")) for r in events
               if r["event"] == "lvb_set" and r.get("rv") == "0"}
    released = {(r["res"], r["guest"], r.get("pid"), r.get("lver")): r["t"] for r in events
                if r["event"] == "release" and r.get("trusted") == "true"}
    for r in events:
        if r["event"] != "lvb_read" or not isinstance(r.get("prev"), int) or not isinstance(r.get("lver"), int):
            continue
        lver, prev = r["lver"], r["prev"]
        if prev >= lver:
            out.append(f"lvb: {r['res']}: {r['guest']} pid {r.get('pid')} granted lver {lver} read "
                       f"an LVB set under lver {prev} at {r['t']:.2f}s")
            continue
        before = [g for g in grants_by_res.get(r["res"], []) if g["lver"] < lver]
        if not before:
            continue
        last = max(before, key=lambda g: g["lver"])
        key = (r["res"], last["guest"], last.get("pid"), last["lver"])
        # A release on a host in a fault (or its grace after) is not judged: once its
        # lockspace is lost the daemon answers a release without writing (the lease is left
        # to expire), and the loss notice may reach the holder only after it released.
        t_rel = released.get(key, float("inf"))
        if last["mode"] == "ex" and key in lvb_set and t_rel < r["t"] and prev != last["lver"] \
                and not faulty(last["guest"], t_rel):
            out.append(f"lvb: {r['res']}: {r['guest']} pid {r.get('pid')} granted lver {lver} read "
                       f"the LVB of lver {prev} at {r['t']:.2f}s, but {last['guest']} pid "
                       f"{last.get('pid')} set it under lver {last['lver']} and released at "
                       f"{released[key]:.2f}s (lost update)")
    return out


def token_violations(events: list[dict], is_sanlock) -> list[str]:
    """Rule 2, tokens: an exclusive grant's lver is its own — until its holder converts it
    to shared, after which other shared holders join it at that lver (a convert to
    exclusive commits a new one); and but for an orphan's adopter, which takes the lease at
    the orphan's lver on the guest where a holder left it (`orphaned`) before the adoption,
    or was killed holding it (`sigterm`: a persistent lease outlives its killed holder as
    an orphan; an adoption succeeds only if there is one). `is_sanlock(guest)`: the guest
    runs sanlock. Pure: from the history's events alone (tests/vmbed/test_chaos_checker.py)."""
    out: list[str] = []
    seen: dict[tuple[str, int], dict] = {}
    to_shared: dict[tuple[str, int], float] = {}
    orphaned: dict[tuple[str, int, str], float] = {}
    for r in events:
        if r["event"] in ("orphaned", "sigterm") and isinstance(r.get("lver"), int):
            orphaned.setdefault((r["res"], r["lver"], r["guest"]), r["t"])
        if r["event"] != "grant" or "lver" not in r:
            continue
        key = (r["res"], r["lver"])
        other = seen.get(key)
        if r.get("convert") and r["mode"] == "sh" and other is not None and other["mode"] == "ex" and \
                (other["guest"], other.get("pid")) == (r["guest"], r.get("pid")):
            to_shared.setdefault(key, r["t"])
            continue
        if other is not None and other["mode"] == "ex" and r["mode"] == "sh" and to_shared.get(key, r["t"] + 1) <= r["t"]:
            continue
        if r.get("adopt") and orphaned.get((r["res"], r["lver"], r["guest"]), r["t"] + 1) <= r["t"]:
            continue
        # Two grants on one sanlock guest are not compared: sanlock 3.8.5's INQUIRE has
        # shown the same lver for two successive exclusive acquires by its host (its
        # released leader taken back; docs/testing.md).
        same_sanlock = other is not None and other["guest"] == r["guest"] and is_sanlock(r["guest"])
        if other and not same_sanlock and (other["guest"], other.get("pid")) != (r["guest"], r.get("pid")) and \
                "ex" in (other["mode"], r["mode"]):
            out.append(f"token: {r['res']} lver {r['lver']} granted to {other['guest']} pid "
                       f"{other.get('pid')} ({other['mode']}) and {r['guest']} pid {r.get('pid')} ({r['mode']})")
        seen.setdefault(key, r)
    return out


def check(bed: ChaosBed, faults: list[Fault], healed_at: float, probe_end: float) -> Verdict:
    v = Verdict()
    h = bed.history
    events = h.of("event")
    writes = h.of("write")
    stop_t = bed.workload_stopped_at or float("inf")
    idx = lambda name: int(name[1:])

    # 1. Exclusion as the storage saw it. Per resource, the highest lver seen so far in a
    # write on the storage, and in a grant event: a write under a lower lver seen after
    # either, where one of the two is exclusive, is a stale holder's write that landed
    # after another holder's grant. Two writes are ordered by the one poller that saw
    # them (certain); a grant's line may be read a little before the poller catches up
    # with a write that landed earlier, so a write counts against a grant only when seen
    # GRANT_MARGIN_S after it.
    top_w: dict[str, dict] = {}
    top_g: dict[str, dict] = {}
    seq = sorted([("w", r) for r in writes] +
                 [("g", r) for r in events if r["event"] == "grant" and "lver" in r],
                 key=lambda x: x[1]["t"])

    def higher(r: dict, cur: dict | None) -> bool:
        return cur is None or r["lver"] > cur["lver"] or (r["lver"] == cur["lver"] and r["mode"] == "ex")

    def stale(r: dict, cur: dict | None, margin: float) -> bool:
        # One holder's own writes after its convert are not judged against its own grant.
        same_holder = cur is not None and (cur["guest"], cur.get("pid")) == (r["guest"], r["pid"])
        return (cur is not None and not same_holder and r["lver"] < cur["lver"]
                and "ex" in (r["mode"], cur["mode"]) and r["t"] > cur["t"] + margin)

    reported: set[tuple[str, int, int]] = set()
    for what, r in seq:
        res = r["res"]
        if what == "w" and (res, r["pid"], r["lver"]) not in reported:
            for cur, margin, verb in ((top_w.get(res), 0.0, "wrote"), (top_g.get(res), GRANT_MARGIN_S, "was granted")):
                if stale(r, cur, margin):
                    v.violations.append(
                        f"exclusion: {res}: {r['guest']} pid {r['pid']} wrote under lver {r['lver']} ({r['mode']}) "
                        f"at {r['t']:.2f}s after {cur['guest']} pid {cur.get('pid')} {verb} under lver "
                        f"{cur['lver']} ({cur['mode']}) at {cur['t']:.2f}s")
                    reported.add((res, r["pid"], r["lver"]))
                    break
        if what == "w":
            if higher(r, top_w.get(res)):
                top_w[res] = r
        elif higher(r, top_g.get(res)):
            top_g[res] = r

    # 2. Tokens (`token_violations`).
    v.violations += token_violations(events, lambda guest: bed.guests[idx(guest)].kind == "sanlock")

    # 6. Lease value blocks (`lvb_violations`).
    v.violations += lvb_violations(events, lambda guest, t: bed.faulty(idx(guest), t))

    # 3. and 4. Kills: a notice first; and only on a faulty host, or of a holder another
    # client asked for the lease with REQUEST (its notice says `requested`).
    noticed: dict[tuple[str, int], str] = {}
    # Holders run by `lockd acquire -- CMD` have no loss watch to be told through: a
    # successful REQUEST of their lease by another client since their grant stands for
    # the `requested` notice.
    unwatched = {(r["guest"], r.get("pid", -1)): r for r in events if r["event"] == "grant" and r.get("cli")}
    requests = [r for r in events if r["event"] == "request" and str(r.get("rv")) == "0"]
    for r in events:
        key = (r["guest"], r.get("pid", -1))
        if r["event"] == "notice":
            noticed[key] = str(r.get("reason", ""))
        elif r["event"] == "sigterm" and "lver" in r and r["t"] < stop_t:
            if key not in noticed and key not in unwatched and bed.guests[idx(r["guest"])].kind != "sanlock":
                v.violations.append(f"kill before notice: {r['guest']} pid {r.get('pid')} got SIGTERM holding "
                                    f"{r['res']} lver {r['lver']} at {r['t']:.2f}s with no loss notice before")
            requested = noticed.get(key, "").startswith("requested")
            cli = unwatched.get(key)
            if cli is not None and cli.get("res") == r.get("res"):
                requested = requested or any(
                    q.get("res") == r.get("res") and cli.get("t", r["t"]) <= q.get("t", -1.0) <= r["t"] and
                    (q.get("guest"), q.get("pid")) != key for q in requests)
            if not requested and not bed.faulty(idx(r["guest"]), r["t"]):
                v.false_fences.append(f"{r['guest']}: holder pid {r.get('pid')} killed at {r['t']:.2f}s "
                                      "with no fault of its own")
        elif r["event"] in ("fenced-self", "lockspace-failed") and not bed.faulty(idx(r["guest"]), r["t"]):
            v.false_fences.append(f"{r['guest']}: {r['event']} at {r['t']:.2f}s with no fault of its own")
        elif r["event"] == "fence-preempt" and isinstance(r.get("victim"), int) and \
                not bed.faulty(bed.host_owner.get(r["victim"], r["victim"]), r["t"]):
            victim = bed.host_owner.get(r["victim"], r["victim"])
            v.false_fences.append(f"g{victim}: preempted (host_id {r['victim']}) by {r['guest']} at {r['t']:.2f}s "
                                  "with no fault of its own")
    for r in h.of("guest_down"):
        if not bed.faulty(idx(r["guest"]), r["t"]):
            v.false_fences.append(f"{r['guest']}: {'reset by its watchdog' if r['watchdog'] else 'went down'} "
                                  f"at {r['t']:.2f}s with no fault of its own")

    # 5. Liveness: every guest joined again and every resource granted after the heal.
    down = [g.name for g in bed.guests.values() if not g.alive()]
    if down or bed.booting:
        v.liveness = False
        v.violations.append(f"liveness: guests not up after the heal: {sorted(set(down) | {f'g{i}' for i in bed.booting})}")
    for g in bed.guests.values():
        if g.alive() and g.name not in down:
            try:
                rc, out = g.sh(f"{bed.env(g)}lockd inq-lockspace -s {vb.LOCKSPACE}:{g.index}:{bed.lease_path()}:0 2>&1",
                               timeout=30, check=False)
            except vb.BedError as e:
                rc, out = 1, str(e)
            if rc != 0:
                v.liveness = False
                v.violations.append(f"liveness: {g.name} is not in the lockspace after the heal: {out.strip()[-120:]}")
    granted = {r["res"] for r in events if r["event"] == "grant" and healed_at <= r["t"] <= probe_end}
    missing = [f"r{i}" for i in range(bed.n_res) if f"r{i}" not in granted]
    if missing:
        v.liveness = False
        v.violations.append(f"liveness: not granted within host_dead + 30 s of the heal: {' '.join(missing)}")

    # Takeover: for each fault on one guest, its holders' resources at the fault's start,
    # granted to another guest next.
    holding: dict[str, dict[str, dict]] = {}
    open_at: list[tuple[float, str, str]] = []  # (t, guest, res) tenures open at some t
    for r in events:
        if r["event"] == "grant":
            holding.setdefault(r["guest"], {})[f"{r['res']}/{r.get('pid')}"] = r
        elif r["event"] in ("release", "sigterm"):
            holding.get(r["guest"], {}).pop(f"{r.get('res')}/{r.get('pid')}", None)
        open_at.append((r["t"], r["guest"], ""))
    for f in faults:
        if f.started is None or f.guest == 0:
            continue
        name = f"g{f.guest}"
        held = {r["res"] for r in events if r["event"] == "grant" and r["guest"] == name and r["t"] <= f.started
                and not any(e["event"] in ("release", "sigterm") and e["guest"] == name and
                            e.get("pid") == r.get("pid") and r["t"] <= e["t"] <= f.started for e in events)}
        for res in held:
            nxt = [r["t"] for r in events if r["event"] == "grant" and r["res"] == res and r["guest"] != name
                   and r["t"] > f.started]
            if nxt:
                dt = min(nxt) - f.started
                v.max_takeover_s = dt if v.max_takeover_s is None else max(v.max_takeover_s, dt)
    v.false_fences = sorted(set(v.false_fences))
    for ff in v.false_fences:
        v.violations.append(f"false fence: {ff}")
    return v


# ---------------------------------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser(description="lockd's chaos bed (see the module docstring)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--minutes", type=float, default=5)
    ap.add_argument("--fence", choices=["scsi-pr", "none"], default="scsi-pr")
    ap.add_argument("--nfs", action="store_true")
    ap.add_argument("--mixed-sanlock", action="store_true",
                    help="a fourth guest runs sanlock 3.8.5 (W is then 60 s on every guest)")
    ap.add_argument("--head-reads", action="store_true",
                    help="lockd guests run with read_whole_lockspace = false (renewals read "
                    "the head of the lockspace area)")
    ap.add_argument("--plant-bug")
    ap.add_argument("--resources", type=int, default=16)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--elections", type=int, default=2,
                    help="Python LeaderElection clients per lockd guest (on resources r0..)")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--schedule", action="store_true", help="print the seed's fault schedule and exit")
    a = ap.parse_args()
    scenario = "chaos-nfs" if a.nfs else "chaos"
    storage = vb.SCENARIOS[scenario][0]
    if a.nfs and a.fence == "scsi-pr":
        print("chaos: --nfs has no SCSI-3 PR: use --fence none", file=sys.stderr)
        return 2
    n_guests = N_GUESTS + (1 if a.mixed_sanlock else 0)
    faults = schedule(a.seed, a.minutes, storage, n_guests)
    if a.schedule:
        for f in faults:
            print(f"{f.at_s:8.2f} {f.name:16} {'all' if f.guest == 0 else f'g{f.guest}'} hold {f.hold_s:.2f} s")
        return 0
    if a.fence == "scsi-pr":
        vb.PR_FENCE_SCENARIOS.append(scenario)
    # NFS: a TCG guest's NFS client can take seconds for a first read (io_timeout 5);
    # mixed with sanlock: W is 60 s, and lockd refuses io_timeout 1 beside it (8·D would
    # fall within wdmd's 10 s test interval), so 2.
    io_timeout_s = 5 if a.nfs else 2 if a.mixed_sanlock else 1
    bed = ChaosBed(scenario, io_timeout_s, a.seed, a.fence, a.resources, a.clients, a.plant_bug, a.keep,
                   a.mixed_sanlock, min(a.elections, a.resources))
    if a.head_reads:
        bed.toml_extra = "read_whole_lockspace = false\\n"
    print(f"chaos: seed {a.seed}, {a.minutes} min, fence {a.fence}, {storage}, io_timeout {io_timeout_s}, "
          f"{len(faults)} faults scheduled{', PLANTED BUG ' + a.plant_bug if a.plant_bug else ''} "
          f"(work dir {bed.workdir})", file=sys.stderr, flush=True)
    verdict = Verdict()
    healed_at = probe_end = 0.0
    history_path = bed.workdir / "history.jsonl"
    try:
        bed.start_storage(n_guests)
        vb.in_parallel(lambda i: bed.bring_up(i, first=True), list(range(1, n_guests + 1)))
        threading.Thread(target=bed.reaper, daemon=True).start()
        t0 = bed.clock.now()
        bed.history.add("workload_start")
        nemesis = Nemesis(bed, faults)
        nemesis.run(t0)
        remaining = t0 + a.minutes * 60 - bed.clock.now()
        if remaining > 0:
            time.sleep(remaining)
        nemesis.wait()
        healed_at = bed.clock.now()
        bed.history.add("all_healed")
        bed.timeline.mark("bed", "every fault healed")
        limit = host_dead_s(io_timeout_s, bed.fire_timeout_s) + 30
        deadline = healed_at + limit
        while bed.clock.now() < deadline:
            granted = {r["res"] for r in bed.history.of("event")
                       if r["event"] == "grant" and r["t"] >= healed_at}
            if len(granted) == a.resources and not bed.booting and all(g.alive() for g in bed.guests.values()):
                break
            time.sleep(1)
        probe_end = bed.clock.now()
        bed.stopping = True
        bed.stop_workload()
        time.sleep(2)
        verdict = check(bed, faults, healed_at, probe_end)
    except vb.BedError as e:
        verdict.violations.append(f"bed error: {e}")
        verdict.liveness = False
    finally:
        bed.stopping = True
        bed.history.dump(history_path)
        with bed.timeline.lock:
            events = sorted(bed.timeline.events)
        with open(bed.workdir / "timeline.txt", "w") as f:
            for t, who, what in events:
                f.write(f"{t:9.3f} {who:8} {what}\n")
        for viol in verdict.violations:
            print(f"  VIOLATION {viol}", flush=True)
        keep_dir = Path(os.environ.get("LOCKD_CHAOS_KEEP", "/var/tmp/lockd-chaos"))
        keep_dir.mkdir(parents=True, exist_ok=True)
        kept = keep_dir / f"seed{a.seed}-{a.fence}{'-nfs' if a.nfs else ''}{'-mixed' if a.mixed_sanlock else ''}{'-' + a.plant_bug if a.plant_bug else ''}-{int(time.time())}"
        kept.mkdir()
        for name in ("history.jsonl", "timeline.txt"):
            if (bed.workdir / name).exists():
                (kept / name).write_bytes((bed.workdir / name).read_bytes())
        if verdict.violations:
            bed.keep = True
        bed.close()
    ran = [f for f in faults if f.started is not None]
    grants = sum(1 for r in bed.history.of("event") if r["event"] == "grant")
    writes = len(bed.history.of("write"))
    mt = "none" if verdict.max_takeover_s is None else f"{verdict.max_takeover_s:.2f}"
    evs = bed.history.of("event")
    count = lambda pred: sum(1 for r in evs if pred(r))
    print(f"chaos: workload converts={count(lambda r: r['event'] == 'convert')} "
          f"requests={count(lambda r: r['event'] == 'request')} "
          f"lvb_reads={count(lambda r: r['event'] == 'lvb_read')} "
          f"orphaned={count(lambda r: r['event'] == 'orphaned')} "
          f"adopted={count(lambda r: r['event'] == 'grant' and r.get('adopt'))} "
          f"orphan_releases={count(lambda r: r['event'] == 'orphans_released')} "
          f"cli_grants={count(lambda r: r['event'] == 'grant' and r.get('cli'))} "
          f"election_grants={count(lambda r: r['event'] == 'grant' and r.get('election'))}", flush=True)
    print(f"chaos: history in {kept}/history.jsonl, timeline in {kept}/timeline.txt"
          + (f", work dir kept at {bed.workdir}" if bed.keep else ""), flush=True)
    print(f"chaos seed={a.seed} minutes={a.minutes:g} fence={a.fence}{' storage=nfs' if a.nfs else ''}"
          f"{' mixed-sanlock' if a.mixed_sanlock else ''}{' reads=head' if a.head_reads else ''}"
          f"{' planted=' + a.plant_bug if a.plant_bug else ''} faults={len(ran)} grants={grants} writes={writes} "
          f"violations={len(verdict.violations)} false_fences={len(verdict.false_fences)} "
          f"liveness={'ok' if verdict.liveness else 'fail'} max_takeover_s={mt}", flush=True)
    if a.plant_bug:
        # A planted bug must be seen: the run fails when the checker found nothing.
        return 0 if verdict.violations else 1
    return 1 if verdict.violations else 0


if __name__ == "__main__":
    sys.exit(main())
