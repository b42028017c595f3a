#!/usr/bin/env python3
"""lockd's virtual-machine test bed: real kernels, a real SCSI target, a real watchdog.

Each guest is a QEMU TCG machine running Debian's 6.1 kernel from an initramfs built by
build-initramfs.sh (busybox, lockd's release binaries, Debian's sanlock 3.8.5). Guests
share

* an iSCSI LUN served by tgt (Debian's userspace target) on 127.0.0.1, attached through
  QEMU's own initiator (libiscsi) as a `scsi-block` disk: /dev/sda in the guest, with its
  own block layer and O_DIRECT. Each guest reaches tgt through its own TCP relay here
  (`Relay`), which the bed can stall (bytes are held) or cut (connections closed and
  refused): the path to the storage of one guest, failed from outside it;
* an NFS v4.1 export served by nfs-ganesha (VFS backend, userspace) on 127.0.0.1, mounted by
  the guest kernel's NFS client over QEMU's user-mode network (the host is 10.0.2.2; a
  guest's link can be cut with QMP `set_link`).

Each guest has an i6300esb watchdog (`-action watchdog=reset`, `-no-reboot`): wdmd drives
/dev/watchdog0, and a reset ends the QEMU process, which the bed sees as the QMP event
WATCHDOG and the exit of the process, stamped by the host's clock.

Three serial ports per guest: ttyS0 the console (a file), ttyS1 the command agent
(guest-agent.sh: one base64 script in, status and base64 output back), ttyS2 the event
port: the witness holder in the guest (`lockd-witness hold --log /dev/ttyS2`) writes its
start, heartbeats, killpath/SIGTERM notes and write errors there, and the bed stamps each
line on arrival with the host's clock.

The witness is kept on the host, from outside the guests, two ways:
* storage stamps: each holder writes `host= res= lver= seq=` with O_DIRECT into its own 4 KiB
  block of the shared storage on every heartbeat; the bed polls the blocks in tgt's backing
  file (and in the exported file for NFS) every 20 ms. What it sees is what reached the
  disk;
* event lines from ttyS2.
An overlap is a write (or sign of life) under an older lease version seen after the first
write under a newer one by another guest: certain, not guessed.

The bed also polls every host's delta lease (its renewal timestamp) in the backing store,
so a guest's last renewal is what the storage saw, stamped on the host.

Everything is timed from the host's monotonic clock, in seconds since the bed started.
TCG guests are slow and their clocks drift: timelines are judged by order and by the
bounds of the timing contract (docs/fencing.md), not by tight absolute numbers.

This driver is Python rather than Rust because it is glue around external programs
(qemu, tgtd, tgtadm, ganesha.nfsd) and three byte streams per guest; the programs under
test (lockd-daemon, wdmd, lockd, lockd-witness) are the project's Rust release binaries.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import queue
import random
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
VMBED_ROOT = Path("/var/tmp/lockd-vmbed")
IMAGE_DIR = Path(os.environ.get("LOCKD_VMBED_IMAGE", VMBED_ROOT / "image"))
# Debian unstable's kernel (7.2), for the kernel targets and the guests that reach them
# (build-initramfs.sh ... sid).
SID_IMAGE_DIR = Path(os.environ.get("LOCKD_VMBED_SID_IMAGE", VMBED_ROOT / "image-sid"))
IQN = "iqn.2026-11.io.lockd:bed"
NQN = "nqn.2026-11.io.lockd:bed"
# The storage kinds of `--storage` (the pr-* scenarios that name them in SAN_SCENARIOS):
# tgt (userspace iSCSI target on the host, Debian 12's 6.1 kernel in the guests, SG_IO);
# lio (the kernel's iSCSI target in a storage guest on Debian unstable's 7.2 kernel, the
# guests on 7.2 too, reaching it through QEMU's iSCSI initiator as a SCSI disk: the block
# PR ioctls through sd); nvme-tcp (nvmet over TCP with reservations in the storage guest,
# the guests' kernel NVMe/TCP initiator: the block PR ioctls through NVMe); multipath
# (LIO as for lio, each guest with two paths, two I_T nexuses, under a dm-multipath map:
# the block PR ioctls register on every path; at each fault a survivor, g2, also loses
# one of its paths, so its fence and its renewals go through the other).
SANS = ("tgt", "lio", "nvme-tcp", "multipath")
SAN_SCENARIOS = ("pr-kill-daemon", "pr-freeze-guest", "pr-cut-storage", "pr-slow-storage")
# LOCKD_VMBED_GUEST_KERNEL=sid: tgt's guests boot Debian unstable's kernel too (its block PR
# ioctls set APTPL in REGISTER, which tgt refuses: the devices fall back to SG_IO);
# =trixie: Debian 13's 6.12 (block PR ioctls without the read ones: SG_IO from the start).
GUEST_KERNEL = os.environ.get("LOCKD_VMBED_GUEST_KERNEL") or "bookworm"
TRIXIE_IMAGE_DIR = Path(os.environ.get("LOCKD_VMBED_TRIXIE_IMAGE", VMBED_ROOT / "image-trixie"))


def guest_image(san: str) -> Path:
    """The image lease guests boot: tgt's on LOCKD_VMBED_GUEST_KERNEL's kernel (Debian 12's
    by default), the kernel targets' on Debian unstable's."""
    if san != "tgt" or GUEST_KERNEL == "sid":
        return SID_IMAGE_DIR
    return TRIXIE_IMAGE_DIR if GUEST_KERNEL == "trixie" else IMAGE_DIR
NVMET_PORT = 4420
ISCSI_PORT = 3260
LUN_BYTES = 64 << 20
LOCKSPACE = "vb"
# Guest memory: the image (about 50 MB unpacked, in RAM), the daemons (mlocked), the chaos
# bed's workload (8 Rust clients and 2 Python elections of about 20 MB each) with room.
GUEST_MEM_MB = 512
RESOURCE = "r1"
RES_OFFSET = 1 << 20
SLOT_BASE = 4 << 20
SLOT_BYTES = 4096
GUEST_IP = "10.0.2.15"
HOST_IP = "10.0.2.2"

# Scenario name -> (storage, description).
SCENARIOS = {
    "kill-daemon": ("iscsi", "SIGKILL the holder's lockd daemon"),
    "sigstop-daemon": ("iscsi", "SIGSTOP the holder's lockd daemon"),
    "stall-io": ("iscsi", "stall the holder's path to the LUN (its relay holds the bytes)"),
    "eio": ("iscsi", "the holder's lease device returns EIO (device-mapper error table)"),
    "kill-wdmd": ("iscsi", "SIGKILL the holder's wdmd"),
    "kill-client": ("iscsi", "SIGKILL the holder process"),
    "stubborn-holder": ("iscsi", "stall the holder's storage; the holder ignores SIGTERM"),
    "freeze-guest": ("iscsi", "SIGSTOP the holder's whole QEMU process, resume after takeover"),
    "cut-storage": ("iscsi", "cut the holder's iSCSI connection and refuse new ones"),
    "nfs-server-restart": ("nfs", "restart ganesha under a lockspace in a file on the export"),
    "nfs-cut": ("nfs", "cut the holder guest's network link (NFS unreachable)"),
    "mixed-sanlock": ("iscsi", "sanlock 3.8.5 guest holds; its daemon is killed; lockd takes over"),
    "pr-basics": ("iscsi", "SCSI-3 PR by `lockd direct pr`: B preempts A's key; A's writes bounce (EBADE)"),
    "pr-kill-daemon": ("iscsi", "fence=scsi-pr: SIGKILL the holder's lockd daemon; a survivor preempts its key"),
    "pr-freeze-guest": ("iscsi", "fence=scsi-pr: SIGSTOP the holder's QEMU, resume after the takeover"),
    "pr-cut-storage": ("iscsi", "fence=scsi-pr: cut the holder's iSCSI connection, heal after the takeover"),
    "pr-slow-storage": ("iscsi", "fence=scsi-pr: the holder's storage path delays every byte by 3 s"),
    "pr-holder-leaves": ("iscsi", "fence=scsi-pr: the reservation's first holder leaves cleanly while a fenced guest is paused"),
    "pr-double-preempt": ("iscsi", "fence=scsi-pr: two survivors preempt the same dead holder at once"),
    "pr-survivor-paused": ("iscsi", "fence=scsi-pr: a healthy survivor's daemon is stopped past the preempt time, then resumed"),
    "pr-set-host-fail": ("iscsi", "fence=scsi-pr: a survivor runs `set-host --dead` on the holder in FAIL (its daemon stopped, its holder writing)"),
    "pr-rejoin-race": ("iscsi", "fence=scsi-pr: the holder's daemon is killed and restarted; its join stops after reading the keys while a survivor preempts and takes over"),
    "pr-rejoin-race-old-rule": ("iscsi", "pr-rejoin-race with the join's old rule planted (REGISTER AND IGNORE EXISTING KEY): must show the holder's writes landing again"),
    "pr-delay-bursts-old-rule": ("iscsi", "pr-delay-bursts with the old 4·D preempt floor planted: must show the healthy survivor preempted"),
    "pr-foreign-key": ("iscsi", "fence=scsi-pr: the holder writes through a second path holding a key of another scheme; its daemon is SIGKILLed: no fence may be confirmed, takeover waits its reset"),
    "pr-foreign-key-old-rule": ("iscsi", "pr-foreign-key with the old rule planted (keys of other schemes ignored): must show the holder's writes through the second path landing after the takeover"),
    "pr-target-restart": ("iscsi", "fence=scsi-pr: tgtd is killed and started again (every key and the reservation lost) while all hosts are healthy"),
    "pr-delay-bursts": ("iscsi", "fence=scsi-pr: a healthy survivor's storage path has short delay bursts for a minute (timed-out renewal reads, drifting phases)"),
    "pr-mixed-sanlock": ("iscsi", "fence=scsi-pr on two lockd guests beside a sanlock 3.8.5 guest: no reservation while it renews; the holder's daemon is killed, takeover waits host_dead"),
    "pr-mixed-sanlock-old-rule": ("iscsi", "pr-mixed-sanlock with the old rule planted (reserve although a live peer has no key): must show the sanlock guest fenced"),
    "pr-rolling": ("iscsi", "storage fencing turned on host by host (none -> scsi-pr), then off in two rounds (register-only, release, none), a holder writing throughout"),
    "pr-rolling-old-rule": ("iscsi", "pr-rolling's first step with the old rule planted (reserve although a live peer has no key): must show a host not yet converted fenced"),
    "nfs-cut-remove": ("nfs", "nfs-cut, and the failed lockspace removed (rem-lockspace) while its holder is being killed: the watchdog must still reset the guest"),
    "nfs-cut-remove-old-rule": ("nfs", "nfs-cut-remove with the old rule planted (a removal disarms the watchdog): must show the killed holder's queued write landing"),
}
# Storage fencing scenarios (issue 24): io_timeout 1, fence_preempt_s below.
PR_FENCE_SCENARIOS = ["pr-kill-daemon", "pr-freeze-guest", "pr-cut-storage", "pr-slow-storage",
                      "pr-holder-leaves", "pr-double-preempt", "pr-survivor-paused", "pr-set-host-fail",
                      "pr-rejoin-race", "pr-rejoin-race-old-rule", "pr-target-restart", "pr-delay-bursts",
                      "pr-foreign-key", "pr-foreign-key-old-rule", "pr-delay-bursts-old-rule",
                      "pr-mixed-sanlock", "pr-mixed-sanlock-old-rule", "pr-rolling", "pr-rolling-old-rule"]
# Scenarios whose guests boot the image with the daemon built with the `planted-bugs`
# feature (its pause points; scripts/vmbed.sh builds it, LOCKD_VMBED_PLANTED_IMAGE).
PLANTED_SCENARIOS = ["pr-rejoin-race", "pr-rejoin-race-old-rule", "pr-mixed-sanlock-old-rule",
                     "pr-foreign-key-old-rule", "pr-delay-bursts-old-rule",
                     "pr-rolling-old-rule", "nfs-cut-remove-old-rule"]
# What a planted old rule must show (else its run fails): "overlaps" (a fenced or dead
# holder's writes landing after another's grant) or "false_fences" (healthy hosts fenced).
OLD_RULE_EVIDENCE = {"pr-rejoin-race-old-rule": "overlaps", "nfs-cut-remove-old-rule": "overlaps",
                     "pr-foreign-key-old-rule": "overlaps", "pr-delay-bursts-old-rule": "false_fences",
                     "pr-mixed-sanlock-old-rule": "false_fences", "pr-rolling-old-rule": "false_fences"}
# The planted bug each old-rule scenario's daemons run with (LOCKD_PLANTED_BUG).
OLD_RULE_BUG = {"pr-rejoin-race-old-rule": "join-register-ignore-existing",
                "pr-foreign-key-old-rule": "foreign-keys-ignored",
                "pr-delay-bursts-old-rule": "preempt-floor-4d",
                "nfs-cut-remove-old-rule": "removal-disarms",
                "pr-mixed-sanlock-old-rule": "reserve-with-unkeyed-peers",
                "pr-rolling-old-rule": "reserve-with-unkeyed-peers"}
PLANTED_IMAGE_DIR = Path(os.environ.get("LOCKD_VMBED_PLANTED_IMAGE", VMBED_ROOT / "image-planted"))
PR_PREEMPT_S = 5
# The daemons' fence_drain_ms (its default), in seconds: tgt refuses PREEMPT AND ABORT, so
# every fence on the bed waits it after its plain PREEMPT before it counts.
FENCE_DRAIN_S = 2.0
# pr-foreign-key: the key registered on the holder's second path (not lvmlockd's format,
# as a multipath `reservation_key` or fence_scsi's would be).
FOREIGN_KEY = "0xabc0000000000001"
# Another guest holds within 10 s of the fault, on every target (at D = 1). The timing
# contract behind it, from the victim's last renewal R: a survivor reads the lockspace
# every D (its renewals and the reads between them, each of those bounded to 0.8·D), so it
# sees R within D, or 2·D when a read between renewals timed out on a slow path; its fence
# pass, run after each read, preempts once R stood still max(6·D, fence_preempt_s)
# between the completions of its reads (up to D more for the reads' own time); a plain
# PREEMPT (tgt) then waits fence_drain_ms; a waiting acquire looks for the fence mark
# every 100 ms and the contender retries every 0.1 s (1.5 s of slack for both and the
# acquire). pr_takeover_bound_s(D, action) below: 10.5 s at D = 1 with an abort, 12.5 s
# with a drain; the 10 s after the fault is checked beside it.
PR_TAKEOVER_LIMIT_S = 10.0


def pr_takeover_bound_s(io_timeout_s: int, preempt_action: str | None) -> float:
    """Seconds after the victim's last renewal within which another guest must hold."""
    d = io_timeout_s
    drain = 0.0 if preempt_action == "PreemptAndAbort" else FENCE_DRAIN_S
    return 2 * d + max(6 * d, PR_PREEMPT_S) + d + drain + 1.5
# pr-double-preempt: the longest the first survivor's PREEMPT is held in its storage path
# (below lockd's 5 s bound on a PR command, and short enough that the held survivor's
# renewals, queued behind it, stay well inside 8·D).
PREEMPT_HOLD_CAP_S = 3.0
# pr-survivor-paused: how long (guest seconds) the survivor's daemon is stopped, from just
# after one of its renewals: at the old daemon's preempt time (fence_preempt_s 5 over its
# 4·D floor; with the stop's own latency the peers' ages it finds on resume exceed it),
# short of the paused host's own lease failure (8·D) and of the new daemon's floor (6·D),
# and as short as that allows: its peers see its record stand still from their next read
# on, and the old daemon preempts at 5 whole seconds of its clock (4 s and a bit can
# round up to 5), so a longer pause gets the paused host fenced by its peers first.
SURVIVOR_PAUSE_S = 5.0
# pr-target-restart: how long tgtd stays down (the initiators reconnect after it).
TARGET_DOWN_S = 2.0
# A "slow" relay holds each chunk this long before passing it on (Relay.slow_delay_s).
SLOW_DELAY_S = 3.0
# pr-delay-bursts: for BURSTS_S, the survivor's path is slow (each chunk BURST_DELAY_S
# late: a renewal read under way then times out at io_timeout 1) for BURST_S, then passes
# for 2–5 s; seeded, so a run replays.
BURSTS_S = 60.0
BURST_S = 3.0
BURST_DELAY_S = 1.2
CI_SUBSET = ["kill-daemon", "pr-kill-daemon"]


class BedError(Exception):
    pass


class Clock:
    """Seconds since the bed started, from the host's monotonic clock."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()

    def now(self) -> float:
        return time.monotonic() - self.t0


class Timeline:
    def __init__(self, clock: Clock, path: Path) -> None:
        self.clock = clock
        self.lock = threading.Lock()
        self.events: list[tuple[float, str, str]] = []
        self.file = open(path, "a", buffering=1)

    def mark(self, who: str, what: str, t: float | None = None) -> float:
        t = self.clock.now() if t is None else t
        with self.lock:
            self.events.append((t, who, what))
            self.file.write(f"{t:9.3f} {who:8} {what}\n")
        return t

    def first(self, who: str, prefix: str, after: float = 0.0) -> float | None:
        with self.lock:
            for t, w, e in self.events:
                if w == who and e.startswith(prefix) and t >= after:
                    return t
        return None


def run(cmd: list[str], check: bool = True, **kw) -> subprocess.CompletedProcess:
    p = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if check and p.returncode != 0:
        raise BedError(f"{' '.join(cmd)} failed ({p.returncode}): {p.stderr.strip()}")
    return p


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------------------------------
# Storage: tgt, its per-guest relays, ganesha.


class Tgt:
    """tgtd serving one file-backed LUN; killed by PID (it ignores SIGTERM)."""

    def __init__(self, workdir: Path, backing: Path) -> None:
        self.port = free_port()
        self.control = 100 + (os.getpid() % 800)
        self.log = open(workdir / "tgtd.log", "w")
        self.proc = subprocess.Popen(
            ["tgtd", "-f", "-C", str(self.control), "--iscsi", f"portal=127.0.0.1:{self.port}"],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 10
        while True:
            p = self.adm(["--op", "show", "--mode", "target"], check=False)
            if p.returncode == 0:
                break
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise BedError(f"tgtd did not start (see {workdir}/tgtd.log)")
            time.sleep(0.1)
        self.adm(["--op", "new", "--mode", "target", "--tid", "1", "-T", IQN])
        self.adm(["--op", "new", "--mode", "logicalunit", "--tid", "1", "--lun", "1", "-b", str(backing)])
        self.adm(["--op", "bind", "--mode", "target", "--tid", "1", "-I", "ALL"])

    def adm(self, args: list[str], check: bool = True) -> subprocess.CompletedProcess:
        return run(["tgtadm", "-C", str(self.control), "--lld", "iscsi", *args], check=check)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


class Relay:
    """A TCP relay between one guest's iSCSI initiator and tgt: `pass`, `stall` (bytes are
    held in both directions), or `cut` (every connection closed, new ones refused)."""

    def __init__(self, name: str, target_port: int, timeline: Timeline) -> None:
        self.name = name
        self.target_port = target_port
        self.timeline = timeline
        self.mode = "pass"
        self.slow_delay_s = SLOW_DELAY_S
        self.generation = 0
        self.cond = threading.Condition()
        self.conns: list[socket.socket] = []
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(8)
        self.port = self.listener.getsockname()[1]
        self.closed = False
        # pr-double-preempt: a PreemptGate shared by the survivors' relays (set before the
        # guest boots, so that the scan of its iSCSI stream starts at the login).
        self.gate: PreemptGate | None = None
        threading.Thread(target=self._accept, daemon=True).start()

    def set_mode(self, mode: str) -> None:
        with self.cond:
            self.mode = mode
            if mode == "cut":
                self._close_all()
            self.cond.notify_all()
        self.timeline.mark(self.name, f"storage path {mode}")

    def drop_connections(self) -> None:
        """The guest behind this relay is gone (reset or killed): its in-flight bytes die
        with it, as a reset host's TCP stack does; held bytes are never delivered."""
        with self.cond:
            self.generation += 1
            self._close_all()
            self.cond.notify_all()
        self.timeline.mark(self.name, "guest gone: its connections and held bytes dropped")

    def _close_all(self) -> None:
        """Closes every relayed connection (the caller holds `cond`)."""
        for c in self.conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            c.close()
        self.conns.clear()

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            with self.cond:
                if self.mode == "cut":
                    client.close()
                    continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port))
            except OSError:
                client.close()
                continue
            with self.cond:
                self.conns += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, outbound: bool = False) -> None:
        with self.cond:
            gen = self.generation
        scan = IscsiScan() if outbound and self.gate is not None else None
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                data = b""
            if not data:
                break
            with self.cond:
                while self.mode == "stall" and self.generation == gen:
                    self.cond.wait()
                if self.mode == "cut" or self.generation != gen:
                    break
                slow = self.slow_delay_s if self.mode == "slow" else 0.0
            if slow:
                # Slow storage: every chunk arrives slow_delay_s late (in order, per
                # direction), as a congested or failing path delivers it.
                time.sleep(slow)
            if scan is not None:
                at = scan.feed(data, self.timeline, self.name)
                if at is not None and self.gate.claim(self.name):
                    # The first PREEMPT of any survivor: what precedes it goes on, it and
                    # everything after it on this connection wait at the gate.
                    try:
                        dst.sendall(data[:at])
                    except OSError:
                        break
                    self.gate.hold()
                    data = data[at:]
            try:
                dst.sendall(data)
            except OSError:
                break
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self) -> None:
        self.closed = True
        self.set_mode("cut")
        self.listener.close()


class PathPair:
    """A guest's two paths to the LUN (`--storage multipath`), each its own relay and so
    its own I_T nexus at the target. A fault of the guest's storage (`set_mode`) hits both
    paths, as a host losing its SAN does; `paths[k]` is one path."""

    def __init__(self, name: str, target_port: int, timeline: Timeline) -> None:
        self.paths = [Relay(f"{name}a", target_port, timeline), Relay(f"{name}b", target_port, timeline)]
        self.gate: PreemptGate | None = None

    @property
    def port(self) -> int:
        return self.paths[0].port

    def set_mode(self, mode: str) -> None:
        for p in self.paths:
            p.set_mode(mode)

    def drop_connections(self) -> None:
        for p in self.paths:
            p.drop_connections()

    def close(self) -> None:
        for p in self.paths:
            p.close()


class IscsiScan:
    """Follows the PDUs an iSCSI initiator sends (48-byte basic header, additional headers,
    data padded to 4 bytes; no digests: QEMU's initiator offers None first and tgt takes
    it) and finds SCSI Command PDUs whose CDB is PERSISTENT RESERVE OUT with the service
    action PREEMPT (4) or PREEMPT AND ABORT (5). An opcode no initiator sends means the
    scan lost the PDU boundaries: it stops (noted on the timeline) rather than guess."""

    INITIATOR_OPCODES = {0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x10}

    def __init__(self) -> None:
        self.hdr = b""
        self.skip = 0
        self.lost = False

    def feed(self, data: bytes, timeline: Timeline, who: str) -> int | None:
        """The offset in `data` where the first PREEMPT PDU in it begins (0 when its header
        began in an earlier chunk), or None."""
        found = None
        i = 0
        while i < len(data) and not self.lost:
            if self.skip:
                n = min(self.skip, len(data) - i)
                i += n
                self.skip -= n
                continue
            start = 0 if self.hdr else i
            need = 48 - len(self.hdr)
            self.hdr += data[i:i + need]
            i += min(need, len(data) - i)
            if len(self.hdr) < 48:
                break
            h, self.hdr = self.hdr, b""
            if h[0] & 0x3F not in self.INITIATOR_OPCODES:
                self.lost = True
                timeline.mark(who, f"iSCSI scan lost the PDU boundaries (opcode {h[0]:#x}): no gate")
                break
            self.skip = h[4] * 4 + ((int.from_bytes(h[5:8], "big") + 3) & ~3)
            if found is None and h[0] & 0x3F == 0x01 and h[32] == 0x5F and h[33] & 0x1F in (4, 5):
                found = start
        return found


class PreemptGate:
    """pr-double-preempt's widening of the race: the first PREEMPT one survivor sends
    reaches the target only after another survivor's preempt of the same key completed
    (the bed opens the gate on that survivor's "key preempted" line), or after
    PREEMPT_HOLD_CAP_S. A storage path that delays one command, as a congested path
    does; the daemons are not touched."""

    def __init__(self, timeline: Timeline) -> None:
        self.timeline = timeline
        self.lock = threading.Lock()
        self.holder: str | None = None
        self.held_at: float | None = None
        self.released_at: float | None = None
        self.opened_by: str | None = None
        self.release = threading.Event()

    def claim(self, relay: str) -> bool:
        """True for the first relay that sees a PREEMPT (it holds); later ones pass."""
        with self.lock:
            if self.holder is not None:
                return False
            self.holder = relay
        self.held_at = self.timeline.mark(relay, "PREEMPT held at the gate")
        return True

    def hold(self) -> None:
        self.release.wait(PREEMPT_HOLD_CAP_S)
        self.released_at = self.timeline.mark(
            self.holder or "gate", f"PREEMPT released ({self.opened_by or 'hold cap reached'})")

    def open(self, why: str) -> None:
        self.opened_by = why
        self.release.set()


class Ganesha:
    """nfs-ganesha exporting one host directory as /bed over NFS v4.1 on 127.0.0.1."""

    def __init__(self, workdir: Path, export: Path, timeline: Timeline) -> None:
        self.workdir = workdir
        self.export = export
        self.timeline = timeline
        self.port = free_port()
        self.conf = workdir / "ganesha.conf"
        (workdir / "ganesha-recov").mkdir(exist_ok=True)
        # Lease_Lifetime 30 s: with 5 s, TCG guests (three on two host cores) renewed
        # their NFS client leases late, ganesha's reaper expired them, the client's open
        # state was lost (reclaim outside grace: NFS4ERR_NO_GRACE) and opens of the lease
        # file failed with EIO for a minute — nfs-cut's rejoin failed in CI. The grace
        # period matches the lease, as the NFS rules want: a restarted server
        # (nfs-server-restart) lets every client reclaim its opens.
        self.conf.write_text(
            f"""NFS_CORE_PARAM {{
    Protocols = 4; NFS_Port = {self.port}; Bind_addr = 127.0.0.1;
    Enable_NLM = false; Enable_RQUOTA = false;
}}
NFSV4 {{
    Grace_Period = 30; Lease_Lifetime = 30;
    RecoveryBackend = fs; RecoveryRoot = {workdir}/ganesha-recov;
}}
EXPORT {{
    Export_Id = 1; Path = {export}; Pseudo = /bed; Access_Type = RW;
    Squash = No_Root_Squash; SecType = sys; Protocols = 4; Transports = TCP;
    FSAL {{ Name = VFS; }}
}}
"""
        )
        self.proc: subprocess.Popen | None = None
        self.start()

    def start(self) -> None:
        self.proc = subprocess.Popen(
            ["ganesha.nfsd", "-F", "-f", str(self.conf), "-L", str(self.workdir / "ganesha.log"),
             "-p", str(self.workdir / "ganesha.pid"), "-N", "NIV_EVENT"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise BedError(f"ganesha did not start (see {self.workdir}/ganesha.log)")
                time.sleep(0.2)
        self.timeline.mark("ganesha", f"serving on port {self.port}")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.timeline.mark("ganesha", "stopped")


# ---------------------------------------------------------------------------------------
# Guests.


class Guest:
    def __init__(self, bed: "Bed", index: int, kind: str = "lockd") -> None:
        self.bed = bed
        self.index = index
        self.name = f"g{index}"
        self.kind = kind
        self.dir = bed.workdir / self.name
        self.dir.mkdir(exist_ok=True)
        self.proc: subprocess.Popen | None = None
        self.boots = 0
        self.agent: socket.socket | None = None
        self.replies: queue.Queue = queue.Queue()
        self.seq = 0
        self.lock = threading.Lock()
        self.exit_t: float | None = None
        self.watchdog_t: list[float] = []
        # The image it boots (the lvmlockd scenarios give initrd-lvm.gz: vmbed_lvm.py).
        self.image_dir = guest_image(bed.san)
        self.initrd = self.image_dir / "initrd.gz"

    # --- life cycle

    def start(self) -> None:
        b = self.bed
        self.boots += 1
        for sock in ("agent.sock", "events.sock", "qmp.sock"):
            (self.dir / sock).unlink(missing_ok=True)
        cmd = self.qemu_cmd()
        self.exit_t = None
        self.proc = subprocess.Popen(cmd, stdout=open(self.dir / f"qemu.{self.boots}.log", "w"),
                                     stderr=subprocess.STDOUT)
        self.connect_after_boot()

    def storage_args(self) -> list[str]:
        """The guest's path to the shared storage: an iSCSI disk through its relay (tgt on
        the host, or LIO in the storage guest), or nothing (NVMe/TCP is connected from
        inside the guest, `Bed.guest_setup`)."""
        b = self.bed
        if b.san == "nvme-tcp":
            return []
        drive = (
            f"driver=iscsi,transport=tcp,portal=127.0.0.1:{b.relays[self.index].port},"
            f"target={IQN},lun={b.iscsi_lun},initiator-name={IQN}:{self.name},if=none,id=d0,cache.direct=on"
        )
        path2 = []
        if b.san == "multipath":
            path2 = ["-drive", (
                f"driver=iscsi,transport=tcp,portal=127.0.0.1:{b.relays[self.index].paths[1].port},"
                f"target={IQN},lun={b.iscsi_lun},initiator-name={IQN}:{self.name}-b,if=none,id=d1,"
                "cache.direct=on"),
                "-device", "scsi-block,drive=d1,bus=scsi0.0"]
        elif self.index in b.second_path:
            path2 = ["-drive", (
                f"driver=iscsi,transport=tcp,portal=127.0.0.1:{b.tgt.port},target={IQN},lun=1,"
                f"initiator-name={IQN}:{self.name}-path2,if=none,id=d1,cache.direct=on"),
                "-device", "scsi-block,drive=d1,bus=scsi0.0"]
        return ["-device", "virtio-scsi-pci,id=scsi0", "-drive", drive,
                "-device", "scsi-block,drive=d0,bus=scsi0.0", *path2]

    def net_args(self) -> list[str]:
        return ["-netdev", "user,id=n0", "-device", f"virtio-net-pci,netdev=n0,mac=52:54:00:12:34:{self.index:02x}"]

    def qemu_cmd(self) -> list[str]:
        return [
            "qemu-system-x86_64", "-accel", "tcg", "-m", str(GUEST_MEM_MB), "-smp", "1",
            "-nographic", "-no-reboot", "-monitor", "none",
            "-kernel", str(self.image_dir / "vmlinuz"), "-initrd", str(self.initrd),
            "-append", f"console=ttyS0 panic=-1 quiet bed.host={self.name} nfs.nfs4_unique_id=lockd-vmbed-{self.name}",
            "-chardev", f"file,id=con,path={self.dir}/console.{self.boots}.log", "-serial", "chardev:con",
            "-chardev", f"socket,id=ag,path={self.dir}/agent.sock,server=on,wait=off", "-serial", "chardev:ag",
            "-chardev", f"socket,id=ev,path={self.dir}/events.sock,server=on,wait=off", "-serial", "chardev:ev",
            "-qmp", f"unix:{self.dir}/qmp.sock,server=on,wait=off",
            "-device", "i6300esb", "-action", "watchdog=reset",
            *self.storage_args(),
            *self.net_args(),
        ]

    def connect_after_boot(self) -> None:
        b = self.bed
        b.timeline.mark(self.name, f"boot {self.boots} (qemu pid {self.proc.pid})")
        qmp = self._connect("qmp.sock")
        agent = self._connect("agent.sock")
        events = self._connect("events.sock")
        threading.Thread(target=self._qmp_reader, args=(qmp, self.proc), daemon=True).start()
        threading.Thread(target=self._event_reader, args=(events,), daemon=True).start()
        self.agent = agent
        self.replies = queue.Queue()
        threading.Thread(target=self._agent_reader, args=(agent, self.replies), daemon=True).start()
        try:
            kind, _ = self.replies.get(timeout=180)
        except queue.Empty:
            raise BedError(f"{self.name}: no agent after 180 s; see {self.dir}/console.{self.boots}.log")
        b.timeline.mark(self.name, "agent ready")

    def _connect(self, sock: str) -> socket.socket:
        deadline = time.monotonic() + 20
        while True:
            s = socket.socket(socket.AF_UNIX)
            try:
                s.connect(str(self.dir / sock))
                return s
            except OSError:
                s.close()
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise BedError(f"{self.name}: qemu did not open {sock}; see {self.dir}")
                time.sleep(0.05)

    def _qmp_reader(self, s: socket.socket, proc: subprocess.Popen) -> None:
        f = s.makefile("rwb", buffering=0)
        self._qmp_file = f
        f.readline()
        f.write(b'{"execute": "qmp_capabilities"}\n')
        for line in f:
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            ev = msg.get("event")
            if ev == "WATCHDOG":
                t = self.bed.timeline.mark(self.name, f"WATCHDOG {msg.get('data', {}).get('action')}")
                self.watchdog_t.append(t)
                # A hardware reset ends the machine's in-flight I/O at once. QEMU instead
                # drains its block requests before it exits, so a write held in a stalled
                # path would be sent after the "reset": drop the guest's storage
                # connections now and end QEMU if it does not exit by itself.
                if self.index in self.bed.relays:
                    self.bed.relays[self.index].drop_connections()
                threading.Thread(target=self._reap_after_reset, args=(proc,), daemon=True).start()
            elif ev in ("STOP", "RESUME", "SHUTDOWN", "RESET"):
                self.bed.timeline.mark(self.name, f"qmp {ev}")
        proc.wait()
        self.exit_t = self.bed.timeline.mark(self.name, f"qemu exited ({proc.returncode})")
        if self.index in self.bed.relays:
            self.bed.relays[self.index].drop_connections()

    def _reap_after_reset(self, proc: subprocess.Popen) -> None:
        try:
            proc.wait(timeout=3)
        except subprocess.TimeoutExpired:
            self.bed.timeline.mark(self.name, "qemu still draining I/O 3 s after the reset: SIGKILL")
            proc.kill()

    def qmp(self, command: str, **arguments) -> None:
        msg = {"execute": command}
        if arguments:
            msg["arguments"] = arguments
        self._qmp_file.write(json.dumps(msg).encode() + b"\n")

    def _event_reader(self, s: socket.socket) -> None:
        buf = b""
        while True:
            try:
                data = s.recv(65536)
            except OSError:
                return
            if not data:
                return
            t = self.bed.clock.now()
            buf += data
            *lines, buf = buf.split(b"\n")
            for raw in lines:
                line = raw.decode(errors="replace").strip()
                if line:
                    self.bed.witness.event(self.name, t, line)

    def _agent_reader(self, s: socket.socket, replies: queue.Queue) -> None:
        buf = b""
        while True:
            try:
                data = s.recv(65536)
            except OSError:
                return
            if not data:
                return
            buf += data
            *lines, buf = buf.split(b"\n")
            for raw in lines:
                parts = raw.decode(errors="replace").strip().split(" ")
                if parts[0] == "READY":
                    replies.put(("ready", None))
                    continue
                if parts[0] != "R":
                    continue
                # A line the serial link garbled (seen in CI's chaos run just after a
                # guest's reboot: a fragment of a command's base64 where the reply's id
                # belongs) is put on the timeline and skipped: the command it answered
                # times out alone, and the agent's next replies still arrive.
                try:
                    out = base64.b64decode(parts[3], validate=True).decode(errors="replace") if len(parts) > 3 else ""
                    reply = (int(parts[1]), (int(parts[2]), out))
                except (ValueError, IndexError) as e:
                    self.bed.timeline.mark(self.name, f"agent: unreadable reply line skipped ({e}): {raw[:80]!r}")
                    continue
                replies.put(reply)

    def sh(self, script: str, timeout: float = 60, check: bool = True) -> tuple[int, str]:
        """Runs a shell script in the guest; returns (status, output)."""
        with self.lock:
            self.seq += 1
            sid = self.seq
            assert self.agent is not None
            try:
                self.agent.sendall(f"{sid} {base64.b64encode(script.encode()).decode()}\n".encode())
            except OSError as e:
                # The guest went away (reset, powered off) under the command.
                raise BedError(f"{self.name}: agent link lost ({e}) sending: {script[:200]}") from e
            deadline = time.monotonic() + timeout
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise BedError(f"{self.name}: no answer in {timeout} s to: {script[:200]}")
                try:
                    rid, val = self.replies.get(timeout=left)
                except queue.Empty:
                    continue
                if rid == sid:
                    rc, out = val
                    if check and rc != 0:
                        raise BedError(f"{self.name}: exit {rc}: {script[:200]}\n{out}")
                    return rc, out

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        if self.alive():
            self.proc.kill()
            self.proc.wait()

    def sigstop(self) -> None:
        os.kill(self.proc.pid, signal.SIGSTOP)
        self.bed.timeline.mark(self.name, "qemu SIGSTOP (frozen)")

    def sigcont(self) -> None:
        os.kill(self.proc.pid, signal.SIGCONT)
        self.bed.timeline.mark(self.name, "qemu SIGCONT (resumed)")


class StorageGuest(Guest):
    """The storage server of `--storage lio|nvme-tcp`: a guest on Debian unstable's kernel
    whose virtio disk is the bed's LUN file (cache.direct: what its target writes is in the
    file, where the witness reads it), exporting it with the kernel's own target, set up
    through configfs: nvmet over TCP with reservations on (`resv_enable`), or LIO's iSCSI
    target (iblock backend; PR state under a tmpfs dbroot). Its port is forwarded to
    127.0.0.1:`port` on the host, where each guest's relay connects. No watchdog, no lease
    daemon: it only serves."""

    def __init__(self, bed: "Bed") -> None:
        super().__init__(bed, 0, kind="storage")
        self.name = "st"
        self.dir = bed.workdir / self.name
        self.dir.mkdir(exist_ok=True)
        self.image_dir = SID_IMAGE_DIR
        self.initrd = self.image_dir / "initrd.gz"
        self.port = free_port()

    def storage_args(self) -> list[str]:
        return ["-drive", f"file={self.bed.lun},format=raw,if=none,id=lun,cache.direct=on,aio=threads",
                "-device", "virtio-blk-pci,drive=lun"]

    def net_args(self) -> list[str]:
        guest_port = NVMET_PORT if self.bed.san == "nvme-tcp" else ISCSI_PORT
        return ["-netdev", f"user,id=n0,hostfwd=tcp:127.0.0.1:{self.port}-{GUEST_IP}:{guest_port}",
                "-device", "virtio-net-pci,netdev=n0,mac=52:54:00:12:34:fe"]

    def qemu_cmd(self) -> list[str]:
        cmd = super().qemu_cmd()
        i = cmd.index("-device", cmd.index("-qmp"))
        assert cmd[i + 1] == "i6300esb"
        del cmd[i:i + 4]  # no watchdog
        return cmd

    def serve(self) -> None:
        """Configures the target through configfs and checks it listens."""
        setup = ["mount -t configfs none /sys/kernel/config 2>/dev/null; true"]
        if self.bed.san == "nvme-tcp":
            sub = f"/sys/kernel/config/nvmet/subsystems/{NQN}"
            setup += [
                f"mkdir {sub}",
                f"echo 1 >{sub}/attr_allow_any_host",
                f"mkdir {sub}/namespaces/1",
                f"echo -n /dev/vda >{sub}/namespaces/1/device_path",
                f"echo 1 >{sub}/namespaces/1/resv_enable",
                f"echo 1 >{sub}/namespaces/1/enable",
                "p=/sys/kernel/config/nvmet/ports/1; mkdir $p",
                "echo tcp >$p/addr_trtype; echo ipv4 >$p/addr_adrfam",
                f"echo 0.0.0.0 >$p/addr_traddr; echo {NVMET_PORT} >$p/addr_trsvcid",
                f"ln -s {sub} $p/subsystems/{NQN}",
                f"echo nvmet: $(cat {sub}/namespaces/1/resv_enable) $(cat {sub}/namespaces/1/enable)",
            ]
        else:
            t = "/sys/kernel/config/target"
            tpg = f"{t}/iscsi/{IQN}/tpgt_1"
            setup += [
                "mkdir -p /run/target/pr",
                f"echo /run/target >{t}/dbroot",
                f"mkdir -p {t}/core/iblock_0/lun0",
                f"echo udev_path=/dev/vda >{t}/core/iblock_0/lun0/control",
                f"echo 1 >{t}/core/iblock_0/lun0/enable",
                f"mkdir -p {tpg}/lun/lun_0",
                f"ln -s {t}/core/iblock_0/lun0 {tpg}/lun/lun_0/lun0",
                f"mkdir {tpg}/np/0.0.0.0:{ISCSI_PORT}",
                f"echo 1 >{tpg}/attrib/generate_node_acls",
                f"echo 0 >{tpg}/attrib/demo_mode_write_protect",
                f"echo 0 >{tpg}/attrib/authentication",
                f"echo 1 >{tpg}/enable",
                f"echo lio: $(cat {t}/dbroot) $(cat {t}/core/iblock_0/lun0/attrib/emulate_pr 2>/dev/null)",
            ]
        _, out = self.sh("set -e\n" + "\n".join(setup), timeout=60)
        self.bed.timeline.mark(self.name, f"{self.bed.san} target serving /dev/vda ({out.strip()}) on host port {self.port}")


# ---------------------------------------------------------------------------------------
# Witness: storage stamps and event lines, stamped on the host.


@dataclass
class Tenure:
    host: str
    lver: int
    first: float
    last: float
    source: str


class Witness:
    def __init__(self, bed: "Bed") -> None:
        self.bed = bed
        self.lock = threading.Lock()
        self.tenures: dict[tuple[str, int, str], Tenure] = {}
        self.writes: list[tuple[float, str, int, int]] = []
        self.notes: list[tuple[float, str, str]] = []
        # Each "key preempted" line: (t, guest, action, interface) as the daemon logged it.
        self.preempts: list[tuple[float, str, str, str]] = []
        self.renewals: dict[int, list[float]] = {}
        self.current_lver: dict[str, int] = {}
        self.stop_flag = False

    def _tenure(self, host: str, lver: int, t: float, source: str) -> None:
        key = (host, lver, source)
        with self.lock:
            ten = self.tenures.get(key)
            if ten is None:
                self.tenures[key] = Tenure(host, lver, t, t, source)
                self.bed.timeline.mark(host, f"witness: first {source} under lver {lver}", t)
            else:
                ten.last = max(ten.last, t)

    def event(self, guest: str, t: float, line: str) -> None:
        kv = dict(p.split("=", 1) for p in line.split() if "=" in p)
        ev = kv.get("event", "?")
        if ev == "start" and "lver" in kv:
            self.current_lver[guest] = int(kv["lver"])
        if ev in ("start", "alive") and guest in self.current_lver:
            self._tenure(guest, self.current_lver[guest], t, "life")
        if ev != "alive":
            extra = " ".join(f"{k}={v}" for k, v in kv.items()
                             if k in ("lver", "errno", "holder", "victim", "action", "interface"))
            if ev == "fence-preempt":
                with self.lock:
                    self.preempts.append((t, guest, kv.get("action", "?"), kv.get("interface", "?")))
            self.bed.timeline.mark(guest, f"holder {ev} {extra}".strip(), t)
            with self.lock:
                self.notes.append((t, guest, ev))

    def poll(self, backing: Path, slots: dict[int, str], lockspace_offset: int, sector: int) -> None:
        """Polls the storage stamps and delta leases in `backing` until stopped."""
        last_slot: dict[int, bytes] = {}
        last_ts: dict[int, int] = {}
        while not self.stop_flag:
            t = self.bed.clock.now()
            try:
                with open(backing, "rb") as f:
                    for idx in slots:
                        f.seek(SLOT_BASE + idx * SLOT_BYTES)
                        blk = f.read(256)
                        if blk != last_slot.get(idx):
                            last_slot[idx] = blk
                            text = blk.split(b"\0", 1)[0].decode(errors="replace")
                            if text.startswith("lockd-witness "):
                                kv = dict(p.split("=", 1) for p in text.split()[1:] if "=" in p)
                                lver, seq = int(kv.get("lver", 0)), int(kv.get("seq", 0))
                                with self.lock:
                                    self.writes.append((t, kv.get("host", "?"), lver, seq))
                                self._tenure(kv.get("host", "?"), lver, t, "disk")
                    for host_id in slots:
                        f.seek(lockspace_offset + (host_id - 1) * sector)
                        rec = f.read(512)
                        ts = int.from_bytes(rec[152:160], "little") if len(rec) >= 160 else 0
                        if ts != last_ts.get(host_id):
                            last_ts[host_id] = ts
                            if ts != 0:
                                with self.lock:
                                    self.renewals.setdefault(host_id, []).append(t)
                            else:
                                self.bed.timeline.mark(f"g{host_id}", "delta lease released (timestamp 0)", t)
            except OSError:
                pass
            time.sleep(0.02)

    def last_renewal_before(self, host_id: int, t: float) -> float | None:
        with self.lock:
            ts = [x for x in self.renewals.get(host_id, []) if x <= t]
        return max(ts) if ts else None

    def overlaps(self, sources: tuple[str, ...] = ("life", "disk")) -> list[str]:
        """Certain violations: a sign of life or a write under an older lease version, by
        one guest, seen after the first write or start under a newer version by another.
        With storage fencing only writes that reached the storage count (`sources`
        ("disk",)): a fenced holder may live on, its writes bouncing off the target."""
        out = []
        with self.lock:
            tens = [t for t in self.tenures.values() if t.source in sources]
        for a in tens:
            for b in tens:
                if a.host != b.host and a.lver < b.lver and a.last > b.first + 0.05:
                    out.append(
                        f"{a.host} lver {a.lver} ({a.source}) active at {a.last:.2f}s after "
                        f"{b.host} lver {b.lver} ({b.source}) began at {b.first:.2f}s"
                    )
                if a.host < b.host and a.lver == b.lver:
                    out.append(f"{a.host} and {b.host} both held lver {a.lver}")
        return out

    def takeover(self, loser: str, after: float) -> float | None:
        """First write or start by another guest than `loser`, after `after`."""
        with self.lock:
            ts = [t.first for t in self.tenures.values() if t.host != loser and t.first >= after]
        return min(ts) if ts else None


# ---------------------------------------------------------------------------------------
# The bed.


class Bed:
    def __init__(self, scenario: str, io_timeout_s: int, fire_timeout_s: int, keep: bool,
                 san: str = "tgt") -> None:
        self.scenario = scenario
        self.storage, _ = SCENARIOS[scenario]
        # The shared disk's target (SANS); the guests' whole-disk path to it; the LUN
        # number QEMU's initiator asks for (tgt's LUN 0 is its controller).
        self.san = san
        self.disk = {"nvme-tcp": "/dev/nvme0n1", "multipath": "/dev/mapper/mpath"}.get(san, "/dev/sda")
        self.iscsi_lun = 1 if san == "tgt" else 0
        self.storage_guest: StorageGuest | None = None
        self.io_timeout_s = io_timeout_s
        self.fire_timeout_s = fire_timeout_s
        self.workdir = Path(tempfile.mkdtemp(prefix=f"vmbed-{scenario}-", dir="/var/tmp"))
        self.keep = keep
        self.clock = Clock()
        self.timeline = Timeline(self.clock, self.workdir / "timeline.txt")
        self.witness = Witness(self)
        self.guests: dict[int, Guest] = {}
        self.relays: dict[int, Relay] = {}
        self.tgt: Tgt | None = None
        self.ganesha: Ganesha | None = None
        self.lun = self.workdir / "lun.img"
        self.export = self.workdir / "export"
        self.poller: threading.Thread | None = None
        # Fenced scenarios: host_id -> generation of the keys registered just before the
        # fault (the generations a preempt may rightly name).
        self.keys_at_fault: dict[int, int] = {}
        # Environment for the guests' lockd-daemon (the chaos bed's LOCKD_PLANTED_BUG).
        self.daemon_env = ""
        # Lines added to every lockd guest's lockd.toml (the chaos bed's --head-reads).
        self.toml_extra = ""
        # fence_preempt_s of the fenced scenarios (pr-set-host-fail raises it past host_dead
        # so that only the set-host command can fence).
        self.preempt_s = PR_PREEMPT_S
        # The lockspace's host records as sanlock 5.x writes them (DEAD_EXT needs them).
        self.delta_v5 = False
        # Fenced scenarios: guest index -> its `fence` setting when not "scsi-pr"
        # ("none", "register-only"; pr-rolling changes them host by host).
        self.fence_method: dict[int, str] = {}
        # nfs-cut-remove: the failed guest's lockspace is removed (rem-lockspace) as soon
        # as its holder gets the loss notice (the time it was sent, once it was).
        self.remove_after_failure = False
        # Guests (by index) booted with a second path to the LUN: another I_T nexus,
        # straight to tgt, /dev/sdb in the guest (pr-foreign-key).
        self.second_path: set[int] = set()
        self.removed_at: float | None = None

    # --- storage

    def lockd(self, *args: str) -> None:
        run([str(bin_dir() / "lockd"), *args])

    def init_area(self, path: Path) -> None:
        with open(path, "wb") as f:
            f.truncate(LUN_BYTES if path == self.lun else 8 << 20)
        self.lockd("direct", "init", "-s", f"{LOCKSPACE}:0:{path}:0", "-o", str(self.io_timeout_s))
        self.lockd("direct", "init", "-r", f"{LOCKSPACE}:{RESOURCE}:{path}:{RES_OFFSET}")
        if self.delta_v5:
            as_sanlock5_area(path, hosts=8)

    def start_storage(self, n: int) -> None:
        self.init_area(self.lun)
        if self.san == "tgt":
            self.tgt = Tgt(self.workdir, self.lun)
            target_port = self.tgt.port
        else:
            self.storage_guest = StorageGuest(self)
            self.storage_guest.start()
            self.storage_guest.serve()
            target_port = self.storage_guest.port
        for i in range(1, n + 1):
            if self.san == "multipath":
                self.relays[i] = PathPair(f"relay{i}", target_port, self.timeline)
            else:
                self.relays[i] = Relay(f"relay{i}", target_port, self.timeline)
        self.export.mkdir()
        if self.storage == "nfs":
            self.init_area(self.export / "leases")
            self.ganesha = Ganesha(self.workdir, self.export, self.timeline)
        backing = self.lun if self.storage == "iscsi" else self.export / "leases"
        self.poller = threading.Thread(
            target=self.witness.poll, args=(backing, {i: f"g{i}" for i in range(1, n + 1)}, 0, 512),
            daemon=True)
        self.poller.start()

    def fence_toml(self, g: "Guest | None" = None) -> str:
        """lockd.toml lines turning storage fencing on for the bed's lockspace, with the
        LUN's whole-disk path as its data device (the holders write there); for a guest
        whose `fence_method` is "none", nothing; "register-only", that setting."""
        method = self.fence_method.get(g.index, "scsi-pr") if g is not None else "scsi-pr"
        if method == "none":
            return ""
        return ("cat >>/run/lockd.toml <<'EOT'\n"
                f'fence = "{method}"\n'
                f'fence_lockspaces = ["{LOCKSPACE}"]\n'
                f'fence_devices = ["{LOCKSPACE}:{self.disk}"]\n'
                f"fence_preempt_s = {self.preempt_s}\n"
                "EOT\n")

    def lease_path(self) -> str:
        return "/dev/mapper/lease" if self.storage == "iscsi" else "/mnt/nfs/leases"

    # --- guests

    def boot(self, index: int, kind: str = "lockd") -> Guest:
        g = self.guests.get(index) or Guest(self, index, kind)
        self.guests[index] = g
        g.start()
        self.guest_setup(g)
        return g

    def guest_setup(self, g: Guest) -> None:
        """Storage path, wdmd on the real watchdog, the daemon; then joins the lockspace."""
        d, w = self.io_timeout_s, self.fire_timeout_s
        if self.san == "nvme-tcp":
            # The kernel's NVMe/TCP initiator, through this guest's relay; its host NQN
            # and host ID are its own (nvmet tells registrants apart by host ID). I/O
            # fails 2 s after the connection is lost (fast_io_fail_tmo), while the
            # controller keeps trying to reconnect for a minute.
            hostid = f"5a1e0000-0000-4000-8000-{g.index:012d}"
            opts = (f"transport=tcp,traddr={HOST_IP},trsvcid={self.relays[g.index].port},nqn={NQN},"
                    f"hostnqn={NQN}:{g.name},hostid={hostid},nr_io_queues=1,keep_alive_tmo=5,"
                    "reconnect_delay=1,ctrl_loss_tmo=60,fast_io_fail_tmo=2")
            g.sh(f"echo '{opts}' >/dev/nvme-fabrics && "
                 f"for i in $(seq 100); do [ -b {self.disk} ] && break; sleep 0.1; done; [ -b {self.disk} ]",
                 timeout=60)
        if self.san == "multipath":
            # dm-multipath over the guest's two paths (sda, sdb: two I_T nexuses), round
            # robin, failing I/O when no path is left (no queue_if_no_path; no multipathd).
            g.sh("for d in sda sdb; do [ -b /dev/$d ] || exit 1; done; n=$(blockdev --getsz /dev/sda); "
                 "echo \"0 $n multipath 0 0 1 1 round-robin 0 2 1 /dev/sda 1 /dev/sdb 1\" | "
                 "dmsetup create mpath && dmsetup mknodes mpath && [ -b /dev/mapper/mpath ]")
        if self.storage == "iscsi":
            # A linear device-mapper map over the LUN: the eio scenario swaps its table.
            g.sh(f"n=$(blockdev --getsz {self.disk}); echo \"0 $n linear {self.disk} 0\" | dmsetup create lease && dmsetup mknodes lease && [ -b /dev/mapper/lease ]")
        else:
            g.sh(
                f"mount -t nfs4 -o vers=4.1,port={self.ganesha.port},addr={HOST_IP},"
                f"clientaddr={GUEST_IP},hard,timeo=20,retrans=2 {HOST_IP}:/bed /mnt/nfs && "
                "dd if=/mnt/nfs/leases of=/dev/null bs=1M count=2 iflag=direct 2>/dev/null"
            )
        g.sh("stty -F /dev/ttyS2 raw -echo -opost 115200")
        if g.kind == "sanlock":
            g.sh(
                "/usr/sbin/wdmd.sanlock -D -w /dev/watchdog0 >/var/tmp/wdmd.log 2>&1 & echo $! >/run/wdmd.pid\n"
                "for i in $(seq 100); do [ -S /run/wdmd/wdmd.sock ] && break; sleep 0.1; done\n"
                + self.daemon_start_script(g)
            )
        else:
            g.sh(
                f"printf 'watchdog_fire_timeout = {w}\\n{self.toml_extra}' >/run/lockd.toml\n"
                + (self.fence_toml(g) if self.scenario in PR_FENCE_SCENARIOS else "") +
                f"wdmd -D -w /dev/watchdog0 --fire-timeout {w} >/var/tmp/wdmd.log 2>&1 & echo $! >/run/wdmd.pid\n"
                "for i in $(seq 100); do [ -S /run/wdmd/wdmd.sock ] && break; sleep 0.1; done\n"
                + self.daemon_start_script(g)
            )
        self.timeline.mark(g.name, f"{g.kind} daemon and wdmd up")

    def daemon_start_script(self, g: Guest) -> str:
        """The guest script that starts its lease daemon (lockd-daemon, or sanlock on a
        sanlock guest) once wdmd runs, and waits for its socket: at boot, and again after
        the daemon died while the guest stayed up (as systemd restarts it)."""
        d = self.io_timeout_s
        if g.kind == "sanlock":
            return (
                f"SANLOCK_RUN_DIR=/run/sanlock sanlock daemon -D -w 1 -U root -G root -e {g.name} "
                f"-o {d} >>/var/tmp/daemon.log 2>&1 & echo $! >/run/daemon.pid\n"
                "for i in $(seq 100); do [ -S /run/sanlock/sanlock.sock ] && break; sleep 0.1; done\n"
                "[ -S /run/sanlock/sanlock.sock ]"
            )
        daemon = f"{self.daemon_env}lockd-daemon -D -w 1 -e {g.name} -o {d} -g 2 -c /run/lockd.toml"
        if self.scenario in PR_FENCE_SCENARIOS:
            # The daemon's log passes through a loop that appends it to daemon.log and
            # sends its fencing lines at once as events, stamped on the host's timeline;
            # the pid file still names the daemon itself (exec).
            start = (
                f"(sh -c 'echo $$ >/run/daemon.pid; exec {daemon}' 2>&1 | "
                "while IFS= read -r l; do printf '%s\\n' \"$l\" >>/var/tmp/daemon.log; case \"$l\" in "
                "*'key preempted'*) h=${l##*host_id=}; a=${l##*action=}; i=${l##*interface=}; "
                "echo \"event=fence-preempt victim=${h%%[!0-9]*} action=${a%% *} interface=${i%% *}\" >/dev/ttyS2;; "
                "*'already preempted'*) echo event=fence-already >/dev/ttyS2;; "
                "*'preempt was refused'*) echo event=fence-refused >/dev/ttyS2;; "
                "*'marked fenced'*) echo event=fence-marked >/dev/ttyS2;; "
                "*'has been fenced'*) echo event=fenced-self >/dev/ttyS2;; "
                "*'lockspace failed: our delta lease'*) echo event=lockspace-failed >/dev/ttyS2;; "
                "*'key registered'*) echo event=fence-registered >/dev/ttyS2;; "
                "*'killing lease holder'*'sig=9'*) echo event=holder-sigkill >/dev/ttyS2;; "
                "esac; done) </dev/null >/dev/null 2>&1 &\n"
            )
        else:
            start = f"{daemon} >>/var/tmp/daemon.log 2>&1 & echo $! >/run/daemon.pid\n"
        return (start +
                "for i in $(seq 100); do [ -S /run/lockd/sanlock.sock ] && break; sleep 0.1; done\n"
                "[ -S /run/lockd/sanlock.sock ] || { cat /var/tmp/daemon.log; exit 1; }")

    def env(self, g: Guest) -> str:
        return "SANLOCK_RUN_DIR=/run/sanlock " if g.kind == "sanlock" else ""

    def join(self, g: Guest) -> None:
        t = self.timeline.mark(g.name, "add-lockspace")
        rc, out = g.sh(
            f"{self.env(g)}lockd add-lockspace -o {self.io_timeout_s} -s {LOCKSPACE}:{g.index}:{self.lease_path()}:0",
            timeout=300, check=False)
        if rc != 0:
            raise BedError(f"{g.name}: add-lockspace failed: {out}")
        self.timeline.mark(g.name, f"joined host_id {g.index} ({self.clock.now() - t:.1f} s)")

    def holder_cmd(self, g: Guest, ignore_term: bool = False, killpath: bool = True,
                   data_dev: str | None = None) -> str:
        res = f"{LOCKSPACE}:{RESOURCE}:{self.lease_path()}:{RES_OFFSET}"
        data = data_dev or (self.disk if self.storage == "iscsi" else "/mnt/nfs/leases")
        hold = (f"lockd-witness hold --log /dev/ttyS2 --host {g.name} --res {RESOURCE} "
                f"--disk {data} --disk-offset {SLOT_BASE + g.index * SLOT_BYTES}")
        if ignore_term:
            hold += " --ignore-term"
        kp = (f"--killpath /usr/bin/lockd-witness --killpath-args "
              f"'note /dev/ttyS2 {g.name} {RESOURCE} killpath' ") if killpath else ""
        restrict = "--restrict sigkill " if ignore_term else ""
        return f"{self.env(g)}lockd acquire {kp}{restrict}-r {res} -- {hold}"

    def start_holder(self, g: Guest, **kw) -> None:
        g.sh(f"cat >/run/hold.sh <<'EOS'\n{self.holder_cmd(g, **kw)}\nEOS\n"
             "setsid sh /run/hold.sh >/var/tmp/holder.log 2>&1 &")

    def start_contender(self, g: Guest) -> None:
        """Retries the acquire until it holds, as a service waiting for its lease would."""
        g.sh(f"cat >/run/contend.sh <<'EOS'\nwhile true; do\n{self.holder_cmd(g)} && break\n"
             "sleep 0.1\ndone\nEOS\nsetsid sh /run/contend.sh >/var/tmp/contender.log 2>&1 &")

    def wait_for(self, what: str, pred, timeout: float) -> float | None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            v = pred()
            if v:
                return v
            time.sleep(0.1)
        return None

    def collect_logs(self) -> None:
        """Copies the guests' daemon, wdmd, holder and kernel logs into the work dir."""
        for g in self.guests.values():
            if not g.alive():
                continue
            try:
                _, out = g.sh("for f in /var/tmp/*.log; do echo \"== $f\"; tail -n 200 $f; done; "
                              "echo '== dmesg'; dmesg | tail -n 80", timeout=10, check=False)
                (g.dir / f"logs.{g.boots}.txt").write_text(out)
            except BedError:
                pass

    def close(self) -> None:
        if self.keep:
            self.collect_logs()
        self.witness.stop_flag = True
        for g in self.guests.values():
            g.kill()
        for r in self.relays.values():
            r.close()
        if self.ganesha:
            self.ganesha.stop()
        if self.tgt:
            self.tgt.stop()
        if self.storage_guest:
            self.storage_guest.kill()
        if not self.keep:
            shutil.rmtree(self.workdir, ignore_errors=True)


def sanlock_crc32c(data: bytes) -> int:
    """sanlock's CRC-32C variant (disk-format/src/checksum.rs): the register starts at
    0xFFFFFFFE and is not inverted at the end."""
    reg = 0xFFFFFFFE
    for b in data:
        reg ^= b
        for _ in range(8):
            reg = (reg >> 1) ^ 0x82F63B78 if reg & 1 else reg >> 1
    return reg


def as_sanlock5_area(path: Path, hosts: int) -> None:
    """Rewrites the first `hosts` delta-lease records of the lockspace at offset 0 of
    `path` with sanlock 5.x's version word (0x00050000) and their checksum: an area as
    sanlock 5.1 formats it, which lockd keeps (and on which SET_HOST DEAD_EXT works)."""
    with open(path, "r+b") as f:
        for h in range(hosts):
            f.seek(h * 512)
            rec = bytearray(f.read(512))
            rec[4:8] = (0x00050000).to_bytes(4, "little")
            rec[168:172] = sanlock_crc32c(bytes(rec[:168])).to_bytes(4, "little")
            f.seek(h * 512)
            f.write(rec)


def bin_dir() -> Path:
    return Path(os.environ.get("LOCKD_VMBED_BINS", REPO / "target" / "release"))


# ---------------------------------------------------------------------------------------
# Scenarios.


@dataclass
class Result:
    scenario: str
    storage: str
    fault: float | None = None
    last_renewal: float | None = None
    recovery: float | None = None
    watchdog: float | None = None
    host_dead: float | None = None
    takeover: float | None = None
    rejoin: float | None = None
    overlaps: list[str] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    # Storage fencing scenarios: the survivors' first preempt and fence mark, and the
    # fenced guest's writes refused by the target after the fault.
    fence: str | None = None
    # fence_preempt_s the guests' daemons ran with (Bed.preempt_s).
    preempt_s: int = PR_PREEMPT_S
    preempt: float | None = None
    fenced_mark: float | None = None
    fenced_write_errors: int = 0
    # pr-* scenarios: healthy hosts fenced, reset, or whose lockspace failed although
    # nothing was wrong with them (count_false_fences), and the evidence.
    false_fences: list[str] = field(default_factory=list)
    # The first preempt's action (Preempt or PreemptAndAbort) and the PR interface the
    # survivor used (sg-io or block-pr), from its daemon's "key preempted" line.
    preempt_action: str | None = None
    pr_interface: str | None = None
    # The guests' kernel (`uname -r` in a survivor) and, after the fenced guest's rejoin,
    # its generation before the fault and after ("gen 3->4": a new key).
    guest_kernel: str | None = None
    rejoin_key: str | None = None

    def line(self) -> str:
        f = lambda v: "none" if v is None else f"{v:.2f}"
        return (f"scenario={self.scenario} storage={self.storage} watchdog=i6300esb fault_s={f(self.fault)} "
                f"last_renewal_s={f(self.last_renewal)} recovery_s={f(self.recovery)} "
                f"watchdog_fire_s={f(self.watchdog)} host_dead_s={f(self.host_dead)} "
                f"takeover_s={f(self.takeover)} rejoin_s={f(self.rejoin)} overlaps={len(self.overlaps)}"
                + (f" false_fences={len(self.false_fences)}" if self.scenario.startswith("pr-") else "")
                + (f" fence={self.fence} preempt_s={self.preempt_s} preempt_at_s={f(self.preempt)} "
                   f"fenced_at_s={f(self.fenced_mark)} fenced_write_errors={self.fenced_write_errors} "
                   f"preempt_action={self.preempt_action or 'none'} pr_interface={self.pr_interface or 'none'} "
                   f"guest_kernel={self.guest_kernel or 'none'} rejoin_key={(self.rejoin_key or 'none').replace(' ', '_')}"
                   if self.fence else ""))


def run_scenario(name: str, io_timeout_s: int, fire_timeout_s: int, keep: bool, san: str = "tgt") -> Result:
    if name in PR_FENCE_SCENARIOS:
        io_timeout_s = 1  # issue 24: fencing scenarios run at io_timeout 1
    if name == "pr-target-restart":
        # A host tells a target's lost PR state from a preempt only when the loss is seen
        # within 5·D − 1 s of its last renewal's write (daemon-core fencing.rs,
        # `gap_rules_out_preempt`): at D = 1 that is 4 s, and tgtd down 2 s plus the
        # initiators' reconnect gives 4.5–4.7 s on this bed (every host then counts itself
        # fenced: the safe side, docs/fencing.md). At D = 2 the bound is 9 s.
        io_timeout_s = 2
    if name.startswith("pr-mixed-sanlock"):
        # sanlock's W (below) with lockd's io_timeout floor for it: at W = 60 wdmd tests
        # every 10 s, and the lease expiry (8·D) must lie beyond that (lockd refuses D = 1).
        io_timeout_s = 2
    if name == "mixed-sanlock" or name.startswith("pr-mixed-sanlock"):
        fire_timeout_s = 60  # sanlock 3.8.5's fixed W: every host of a lockspace shares W
    if SCENARIOS[name][0] == "nfs" and io_timeout_s < 5:
        # The NFS client of a TCG guest on a busy 2-core machine has taken more than 3 s
        # for a first 1 MiB read (a join then fails with -202, as it would on sanlock):
        # NFS scenarios run with io_timeout 5.
        io_timeout_s = 5
    global IMAGE_DIR
    default_image = IMAGE_DIR
    if name in PLANTED_SCENARIOS:
        IMAGE_DIR = PLANTED_IMAGE_DIR
    try:
        return run_scenario_on_image(name, io_timeout_s, fire_timeout_s, keep, san)
    finally:
        IMAGE_DIR = default_image


def run_scenario_on_image(name: str, io_timeout_s: int, fire_timeout_s: int, keep: bool,
                          san: str = "tgt") -> Result:
    bed = Bed(name, io_timeout_s, fire_timeout_s, keep or bool(os.environ.get("LOCKD_VMBED_KEEP")), san)
    label = san if bed.storage == "iscsi" else bed.storage
    res = Result(name, label, fence="scsi-pr" if name in PR_FENCE_SCENARIOS else None)
    if name in OLD_RULE_BUG and name != "pr-rejoin-race-old-rule":
        # Every lockd guest's daemon runs the old rule from boot (pr-rejoin-race plants it
        # in the restarted daemon only).
        bed.daemon_env = f"env LOCKD_PLANTED_BUG={OLD_RULE_BUG[name]} "
    print(f"vmbed: {name}: {SCENARIOS[name][1]} (work dir {bed.workdir})", file=sys.stderr, flush=True)
    try:
        scenario_body(bed, res)
    except BedError as e:
        res.violations.append(f"bed error: {e}")
    finally:
        res.preempt_s = bed.preempt_s
        res.overlaps = bed.witness.overlaps(("disk",) if name in PR_FENCE_SCENARIOS else ("life", "disk"))
        if name in OLD_RULE_EVIDENCE:
            # The planted old rule must show its hole: writes of a fenced or dead holder
            # landing after another's grant, or healthy hosts fenced. Its absence is the
            # failure here; what the hole does besides is expected, and only a bed error
            # stays a violation.
            evidence = OLD_RULE_EVIDENCE[name]
            shown = res.overlaps if evidence == "overlaps" else res.false_fences
            for o in res.overlaps:
                bed.timeline.mark("bed", f"old rule shown: overlap: {o}")
            for ff in res.false_fences:
                bed.timeline.mark("bed", f"old rule shown: false fence: {ff}")
            expected = [x for x in res.violations if not x.startswith("bed error")]
            for x in expected:
                bed.timeline.mark("bed", f"expected under the old rule: {x}")
            res.violations = [x for x in res.violations if x.startswith("bed error")]
            if not shown:
                res.violations.append(f"the planted old rule showed no {evidence}")
        else:
            for o in res.overlaps:
                res.violations.append(f"overlap: {o}")
        with bed.timeline.lock:
            events = sorted(bed.timeline.events)
        print(f"--- timeline of {name} (seconds since the bed started)", file=sys.stderr)
        for t, who, what in events:
            print(f"{t:9.3f} {who:8} {what}", file=sys.stderr)
        if res.violations:
            bed.keep = True
        bed.close()
        if res.violations:
            print(f"vmbed: {name}: kept {bed.workdir}", file=sys.stderr)
    return res


def in_parallel(fn, items) -> None:
    """Runs fn(item) for every item at once (guests booting or joining together, as hosts
    do); then raises the first failure as a BedError."""
    errors: list[Exception] = []

    def one(item) -> None:
        try:
            fn(item)
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=one, args=(x,)) for x in items]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if errors:
        raise errors[0] if isinstance(errors[0], BedError) else BedError(str(errors[0]))


def join_all(bed: Bed, guests: list[Guest]) -> None:
    in_parallel(bed.join, guests)


def scenario_body(bed: Bed, res: Result, name: str | None = None) -> None:
    name = name or bed.scenario
    if name in PR_BODIES:
        return PR_BODIES[name](bed, res)
    if name in LVM_BODIES:
        return LVM_BODIES[name](bed, res)
    if name.startswith("nfs-cut-remove"):
        return nfs_cut_remove(bed, res)
    d, w = bed.io_timeout_s, bed.fire_timeout_s
    host_dead = 8 * d + w
    # pr-foreign-key (issue 38, item 7): g1 also reaches the LUN through a second path
    # (another I_T nexus, /dev/sdb) on which a key of another scheme is registered, as a
    # multipath static reservation_key would be, and its holder writes through that path.
    # Its daemon is then killed as in pr-kill-daemon. Preempting g1's lockd key does not
    # stop those writes, so no survivor may count g1 fenced: the takeover must wait its
    # watchdog reset and host_dead, judged as kill-daemon without fencing.
    foreign = name.startswith("pr-foreign-key")
    if foreign:
        bed.second_path = {1}
    bed.start_storage(3)
    kinds = {1: "sanlock" if name == "mixed-sanlock" else "lockd", 2: "lockd", 3: "lockd"}
    in_parallel(lambda i: bed.boot(i, kinds[i]), (1, 2, 3))
    g1, g2, g3 = bed.guests[1], bed.guests[2], bed.guests[3]
    if foreign:
        # Before the joins, so before any reservation (which would refuse the REGISTER's
        # nexus nothing, but the holder's first writes through it).
        g1.sh(f"[ -b /dev/sdb ] && lockd direct pr register /dev/sdb -k {FOREIGN_KEY}", timeout=30)
        bed.timeline.mark("g1", f"key {FOREIGN_KEY} (another scheme) registered through /dev/sdb, a second path")
    # The three joins run at once (each host its own host_id), as hosts booting together do.
    join_all(bed, [g1, g2, g3])

    stubborn = name == "stubborn-holder"
    bed.start_holder(g1, ignore_term=stubborn, killpath=name != "eio",
                     data_dev="/dev/sdb" if foreign else None)
    if not bed.wait_for("g1 holds", lambda: bed.witness.takeover("none", 0.0), 60):
        raise BedError("g1 never wrote under its lease")
    bed.start_contender(g2)
    bed.start_contender(g3)
    time.sleep(2 * 2 * d + 1)  # two renewals seen by the poller
    if name in PR_FENCE_SCENARIOS:
        bed.keys_at_fault = pr_generations(g2)
        res.guest_kernel = g2.sh("uname -r", check=False, timeout=30)[1].strip() or None

    fault = bed.timeline.mark("bed", f"FAULT {name}")
    res.fault = fault
    if bed.san == "multipath":
        # A survivor loses one path as the fault begins: its fence, its key reads and its
        # renewals go through the other (dm-multipath fails the offline path over).
        g2.sh("echo offline >/sys/block/sda/device/state")
        bed.timeline.mark("g2", "path a (sda) offline")
    fenced = name in PR_FENCE_SCENARIOS and not foreign
    if fenced:
        name = name[len("pr-"):]  # the same fault as the unfenced scenario
    if foreign:
        name = "kill-daemon"
    if name == "slow-storage":
        bed.relays[1].set_mode("slow")
    elif name in ("kill-daemon", "mixed-sanlock"):
        g1.sh("kill -KILL $(cat /run/daemon.pid)")
    elif name == "sigstop-daemon":
        g1.sh("kill -STOP $(cat /run/daemon.pid)")
    elif name in ("stall-io", "stubborn-holder"):
        bed.relays[1].set_mode("stall")
    elif name == "cut-storage":
        bed.relays[1].set_mode("cut")
    elif name == "eio":
        g1.sh("n=$(blockdev --getsz /dev/sda); dmsetup suspend --noflush lease && "
              "echo \"0 $n error\" | dmsetup load lease && dmsetup resume lease")
    elif name == "kill-wdmd":
        g1.sh("kill -KILL $(cat /run/wdmd.pid)")
    elif name == "kill-client":
        g1.sh("kill -KILL $(pgrep -f 'lockd-witness hold' | head -1) 2>/dev/null || "
              "for p in /proc/[0-9]*; do grep -q 'lockd-witness.hold' $p/cmdline 2>/dev/null && kill -KILL ${p#/proc/} && break; done")
    elif name == "freeze-guest":
        g1.sigstop()
    elif name == "nfs-cut":
        g1.qmp("set_link", name="n0", up=False)
        bed.timeline.mark("g1", "network link down")
        if bed.remove_after_failure:
            threading.Thread(target=remove_when_notified, args=(bed, g1, fault), daemon=True).start()
    elif name == "nfs-server-restart":
        bed.ganesha.stop()
        time.sleep(2 * d + 1)
        bed.ganesha.start()
    else:
        raise BedError(f"scenario {name} not handled")

    if fenced:
        judge_fenced(bed, res, g1, name, fault, kinds)
        # Only g1's generation at the fault may be preempted; g2 and g3 stay unfenced.
        count_false_fences(bed, res, faulty={"g1"}, allowed={1: bed.keys_at_fault.get(1, -1)})
        return
    if name == "nfs-server-restart":
        # The server is back well within 8·D: nobody fails, nobody takes over, g1 keeps
        # renewing and holding. Watch for longer than host_dead.
        back = bed.timeline.first("ganesha", "serving", after=fault) or fault
        res.takeover = bed.wait_for("takeover", lambda: bed.witness.takeover("g1", fault), host_dead + 2 * d)
        res.last_renewal = bed.witness.last_renewal_before(1, bed.clock.now())
        res.watchdog = g1.watchdog_t[0] if g1.watchdog_t else None
        with bed.witness.lock:
            alive_after = max((t.last for t in bed.witness.tenures.values() if t.host == "g1"), default=0.0)
        bed.timeline.mark("bed", f"g1 last renewal {res.last_renewal:.2f}s, holder last seen {alive_after:.2f}s")
        if res.takeover is not None:
            res.violations.append(f"takeover at {res.takeover:.2f}s although the server came back at {back:.2f}s")
        if res.watchdog is not None:
            res.violations.append("g1 was reset by an NFS server restart shorter than 8·D")
        if res.last_renewal is None or res.last_renewal < back + 2 * d:
            res.violations.append("g1 stopped renewing after the server came back")
        if alive_after < bed.clock.now() - 2:
            res.violations.append("g1's holder stopped although its lease was never lost")
        return
    limit = host_dead + 2 * d + 60
    take = bed.wait_for("takeover", lambda: bed.witness.takeover("g1", fault), limit)
    res.takeover = take
    resumed = None
    if name == "freeze-guest":
        # Resume only once another guest holds the lease. The frozen guest must not write:
        # its clock jumps on resume, so its daemon finds the delta lease expired and kills
        # the holder, or its watchdog resets it. Watch long enough for the i6300esb's second
        # stage (one more fire timeout) to end it if nothing else does.
        bed.wait_for("takeover", lambda: bed.witness.takeover("g1", fault), 10)
        g1.sigcont()
        resumed = bed.clock.now()
        time.sleep(w + 2 * d + 3)
    time.sleep(1.0)
    res.watchdog = g1.watchdog_t[0] if g1.watchdog_t else None
    end = res.takeover or bed.clock.now()
    res.last_renewal = bed.witness.last_renewal_before(1, res.watchdog or end)
    if res.last_renewal is not None and res.last_renewal < fault - 2 * d - 1:
        res.violations.append(f"last renewal {res.last_renewal:.2f}s long before the fault")
    with bed.witness.lock:
        notes = [(t, e) for t, h, e in bed.witness.notes if h == "g1" and t >= fault]
    rec = [t for t, e in notes if e in ("killpath", "sigterm")]
    res.recovery = min(rec) if rec else None
    if res.last_renewal is not None:
        res.host_dead = res.last_renewal + host_dead

    # --- judge the timeline
    slack = 1.0
    v = res.violations
    if take is None:
        v.append("no other guest took the lease")
    elif name == "kill-client":
        if res.watchdog is not None:
            v.append("the watchdog fired although only a client died")
        if take - fault > 2 * d + 5:
            v.append(f"takeover {take - fault:.2f}s after a client death")
    else:
        if name == "nfs-server-restart" and res.watchdog is None:
            # The server came back within the renewal timeout: no one failed, the holder
            # keeps its lease; a takeover would be a violation.
            v.append(f"takeover at {take:.2f}s although the holder was never reset")
        if res.host_dead is not None and take + slack < res.host_dead and (
                res.watchdog is None or take + slack < res.watchdog):
            v.append(f"takeover at {take:.2f}s before host_dead {res.host_dead:.2f}s and before any reset")
        if res.watchdog is not None and res.host_dead is not None and res.watchdog > res.host_dead + 2 * d + 5:
            # TCG: the guest's timers run late; allow 2D + 5 s.
            v.append(f"watchdog at {res.watchdog:.2f}s, after host_dead {res.host_dead:.2f}s + 2D + 5")
    if name in ("kill-daemon", "sigstop-daemon", "kill-wdmd", "mixed-sanlock",
                "stubborn-holder", "nfs-cut") and res.watchdog is None:
        # No daemon to end the holders (or a holder that outlives SIGKILL's absence), or
        # (nfs-cut) a killed holder's write still queued in the NFS client: only the
        # watchdog can stop this guest.
        v.append("the watchdog never reset the failed guest")
    if name in ("stall-io", "eio", "cut-storage", "nfs-cut", "stubborn-holder"):
        # The daemon is alive: recovery (killpath or SIGTERM) at last_renewal + 8·D. Then
        # either the holders died (the lockspace is left, the watchdog disarmed) or the
        # watchdog resets the guest (a holder stuck in uninterruptible I/O).
        due = None if res.last_renewal is None else res.last_renewal + 8 * d
        if res.recovery is None and res.watchdog is None:
            v.append("neither recovery nor a reset: g1's holder was never stopped")
        elif res.recovery is not None and due is not None and not (due - slack <= res.recovery <= due + 2 + slack):
            v.append(f"recovery at {res.recovery:.2f}s, expected at last_renewal + 8D = {due:.2f}s")
    if foreign:
        # Preempts of g1's lockd key are expected; a confirmed fence is not.
        fence_notes(bed, res, "g1", fault)
        if res.fenced_mark is not None:
            v.append(f"g1 marked fenced at {res.fenced_mark - fault:.2f}s after the fault although "
                     f"a key of another scheme stood on its second path")
        count_false_fences(bed, res, faulty={"g1"}, allowed={1: bed.keys_at_fault.get(1, -1)})
    if resumed is not None and res.watchdog is None:
        # Not reset: the guest's daemon must have ended the holder and left the lockspace.
        rc, out = g1.sh("lockd status 2>&1; lockd gets 2>&1", check=False, timeout=30)
        bed.timeline.mark("g1", "after resume: " + " | ".join(out.strip().splitlines()[:6]))
        if f" {RESOURCE} " in out or f":{RESOURCE}:" in out:
            v.append(f"g1 still holds {RESOURCE} after resuming: {out}")

    # After a reset the guest boots again and rejoins; a guest that was not reset (its
    # daemon left the failed lockspace) joins again.
    if res.watchdog is None and name != "kill-client" and g1.alive():
        heal(bed, g1, name)
        rejoin(bed, g1, res)
    if res.watchdog is not None:
        bed.wait_for("qemu exit", lambda: g1.exit_t, 30)
        heal(bed, g1, name)
        t0 = bed.clock.now()
        try:
            bed.boot(1, kinds[1])
        except BedError as e:
            v.append(f"g1 did not boot again after its reset: {e}")
            return
        rejoin(bed, g1, res)
        del t0


def remove_when_notified(bed: Bed, g1: Guest, fault: float) -> None:
    """nfs-cut-remove: as soon as g1's holder gets its lost-lease notice (its killpath
    runs: the lockspace has failed, the holder is blocked in a write the NFS client
    queued), g1 removes the lockspace, as an operator or a management agent does on
    "lockspace failed". The removal kills the holder at once; the watchdog must stay
    armed all the same."""
    d, w = bed.io_timeout_s, bed.fire_timeout_s

    def notified() -> float | None:
        with bed.witness.lock:
            ts = [t for t, h, e in bed.witness.notes if h == "g1" and t >= fault and e in ("killpath", "sigterm")]
        return min(ts) if ts else None

    if bed.wait_for("g1's loss notice", notified, 8 * d + w + 30) is None:
        bed.timeline.mark("bed", "g1's holder never got its notice: no removal sent")
        return
    try:
        g1.sh(f"setsid sh -c '{bed.env(g1)}lockd rem-lockspace -s {LOCKSPACE}:1:{bed.lease_path()}:0' "
              ">/var/tmp/rem.log 2>&1 &", timeout=20)
        bed.removed_at = bed.timeline.mark("g1", "rem-lockspace sent (the lockspace has failed)")
    except BedError as e:
        bed.timeline.mark("bed", f"rem-lockspace not sent: {e}")


def nfs_cut_remove(bed: Bed, res: Result) -> None:
    """A removal after the failure must not disarm the watchdog (issue 38, item 5): the
    fault of nfs-cut (g1's network link cut, its holder's write queued in the NFS client),
    and g1 removes the failed lockspace as soon as the holder's killpath runs. The removal
    SIGKILLs the holder, whose queued write stays in the client; only a reset drops it, so
    the watchdog must still reset g1 before host_dead (the nfs-cut checks: watchdog reset,
    takeover after it, overlaps=0). With the old rule planted (`nfs-cut-remove-old-rule`,
    LOCKD_PLANTED_BUG=removal-disarms) the watchdog is disarmed once the holder is gone,
    no reset comes, and the queued write lands after the takeover when the link is back:
    that scenario fails unless it does."""
    bed.remove_after_failure = True
    try:
        scenario_body(bed, res, "nfs-cut")
    finally:
        take = res.takeover
        with bed.witness.lock:
            landed = [t for t, h, _l, _s in bed.witness.writes if h == "g1" and take is not None and t > take]
        base = res.fault or 0.0
        f = lambda x: "none" if x is None else f"{x - base:.2f}"
        print(f"nfs: scenario={bed.scenario} removed_at_s={f(bed.removed_at)} watchdog_s={f(res.watchdog)} "
              f"takeover_at_s={f(take)} g1_writes_landed_after_takeover={len(landed)} "
              f"rule={'old (planted)' if bed.scenario in OLD_RULE_BUG else 'current'}", flush=True)


def judge_fenced(bed: Bed, res: Result, g1: Guest, kind: str, fault: float, kinds: dict) -> None:
    """A storage-fencing scenario after its fault: a survivor preempts g1's key and marks
    it fenced, another guest takes the lease within pr_takeover_bound_s of g1's last renewal
    and within PR_TAKEOVER_LIMIT_S of the fault (at D = 1), and
    after the mark, no write of g1 reaches the LUN after the takeover (the witness reads
    the LUN's backing file), and a g1 whose daemon lives gets the lost-lease notice. Then
    the fault ends and g1 rejoins with a new generation (its old key stays preempted)."""
    d, w = bed.io_timeout_s, bed.fire_timeout_s
    v = res.violations
    take = bed.wait_for("takeover", lambda: bed.witness.takeover("g1", fault), 8 * d + w + 30)
    res.takeover = take
    if kind == "freeze-guest":
        # Resume once another guest holds: g1's renewals and holder's writes now bounce.
        g1.sigcont()
    if kind == "kill-daemon":
        # No daemon: wdmd lets the watchdog reset g1 (after the takeover, which needed
        # no wait for it); its holder lives on until then, its writes refused.
        bed.wait_for("watchdog", lambda: g1.watchdog_t, 8 * d + w + 30)
    # Let the fenced guest act: its daemon (if alive) notices (EBADE, or the lease
    # aging out at 8·D), its holder writes and is refused, or its watchdog fires.
    time.sleep(8 * d + 4)
    with bed.witness.lock:
        notes = [(t, h, e) for t, h, e in bed.witness.notes if t >= fault]
        g1_writes = [t for t, h, _lver, _seq in bed.witness.writes if h == "g1" and t >= fault]
    pre = [t for t, h, e in notes if h != "g1" and e == "fence-preempt"]
    marks = [t for t, h, e in notes if h != "g1" and e == "fence-marked"]
    res.preempt = min(pre) if pre else None
    res.fenced_mark = min(marks) if marks else None
    with bed.witness.lock:
        first = next((p for p in bed.witness.preempts if p[0] >= fault and p[1] != "g1"), None)
    if first is not None:
        res.preempt_action, res.pr_interface = first[2], first[3]
    if res.preempt is not None and res.fenced_mark is not None \
            and res.preempt_action != "PreemptAndAbort" \
            and res.fenced_mark - res.preempt < FENCE_DRAIN_S - 0.1:
        # tgt refuses PREEMPT AND ABORT: a fence by plain PREEMPT counts only after
        # fence_drain_ms (the victim's commands the target had accepted may still land).
        res.violations.append(f"fence counted {res.fenced_mark - res.preempt:.2f}s after the preempt, "
                              f"within fence_drain_ms ({FENCE_DRAIN_S} s) of a plain PREEMPT")
    res.fenced_write_errors = sum(1 for _t, h, e in notes if h == "g1" and e == "write_error")
    # The notice: the holder's killpath or SIGTERM, or its daemon's SIGKILL when the lease
    # was already past its kill time when the daemon saw it (a guest frozen past 8·D
    # whose storage connection was dropped meanwhile, as nvmet's keep-alive does).
    rec = [t for t, h, e in notes if h == "g1" and e in ("killpath", "sigterm", "holder-sigkill")]
    res.recovery = min(rec) if rec else None
    res.watchdog = g1.watchdog_t[0] if g1.watchdog_t else None
    res.last_renewal = bed.witness.last_renewal_before(1, take or bed.clock.now())
    if res.last_renewal is not None:
        res.host_dead = res.last_renewal + 8 * d + w
    if take is None:
        v.append("no other guest took the lease")
    elif d == 1 and take - fault > PR_TAKEOVER_LIMIT_S:
        v.append(f"takeover {take - fault:.2f}s after the fault (limit {PR_TAKEOVER_LIMIT_S} s)")
    elif res.last_renewal is not None \
            and take - res.last_renewal > pr_takeover_bound_s(d, res.preempt_action):
        v.append(f"takeover {take - res.last_renewal:.2f}s after the victim's last renewal (bound "
                 f"{pr_takeover_bound_s(d, res.preempt_action):.1f} s)")
    if res.fenced_mark is None:
        v.append("no survivor marked g1 fenced")
    elif take is not None and take + 0.5 < res.fenced_mark:
        v.append(f"takeover at {take:.2f}s before the fence was confirmed at {res.fenced_mark:.2f}s")
    if res.preempt is None:
        v.append("no survivor preempted g1's key")
    late = [t for t in g1_writes if take is not None and t > take]
    if late:
        v.append(f"{len(late)} write(s) of g1 reached the LUN after the takeover (first {late[0]:.2f}s)")
    if kind != "kill-daemon" and res.recovery is None and res.watchdog is None:
        v.append("g1's daemon lives but its holder got no lost-lease notice (killpath/SIGTERM/SIGKILL)")
    bed.timeline.mark("bed", f"fenced: preempt {res.preempt}, mark {res.fenced_mark}, takeover {take}, "
                             f"g1 write errors {res.fenced_write_errors}, notice {res.recovery}")
    if kind == "kill-daemon":
        drill_survivor_view(bed, res)
    # The fault ends; g1 (rebooted after a reset, or its daemon having left the failed
    # lockspace) joins again under a new generation and key.
    if kind in ("cut-storage", "slow-storage"):
        bed.relays[1].set_mode("pass")
    if res.watchdog is not None or not g1.alive():
        bed.wait_for("qemu exit", lambda: g1.exit_t, 30)
        try:
            bed.boot(1, kinds[1])
        except BedError as e:
            v.append(f"g1 did not boot again after its reset: {e}")
            return
    elif kind == "kill-daemon":
        v.append("g1's daemon was killed but its watchdog never reset it")
        return
    bed.wait_for("lockspace left",
                 lambda: f"{LOCKSPACE}:" not in g1.sh("lockd gets 2>&1", check=False, timeout=30)[1], 60)
    rejoin(bed, g1, res)
    if res.rejoin is not None:
        rc, out = g1.sh(f"lockd direct pr read-keys --json {bed.disk} 2>&1", check=False)
        bed.timeline.mark("g1", "keys after the rejoin: " + " ".join(out.split())[:200])
        try:
            ours = [k for k in json.loads(out)["keys"] if k["host_id"] == 1]
        except (ValueError, KeyError, TypeError):
            ours = []
        # One registration per I_T nexus: two on a multipath map, of one key.
        nexuses = 2 if bed.san == "multipath" else 1
        if rc != 0 or len(ours) != nexuses or len({k["key"] for k in ours}) != 1:
            v.append(f"after its rejoin g1 does not have one key registered on each of its {nexuses} "
                     f"path(s): {out.strip()}")
        elif 1 in bed.keys_at_fault:
            # A new key: the generation of the rejoin, above the one that was preempted.
            before, after = bed.keys_at_fault[1], ours[0].get("host_generation", -1)
            res.rejoin_key = f"gen {before}->{after}"
            if after <= before:
                v.append(f"g1 rejoined under generation {after}, not above its preempted {before}")
        if kind == "kill-daemon":
            drill_back_view(bed, res, g1)


def drill_survivor_view(bed: Bed, res: Result) -> None:
    """The fence drill of docs/operations.md ("Fence drill"), step 4, as its operator sees
    it from a survivor once the victim (g1, host_id 1) is fenced: `lockd host-status`
    shows host 1 DEAD and `lockd direct pr read-keys` no longer lists the key it had at
    the fault."""
    g2 = bed.guests[2]
    _, out = g2.sh(f"lockd host-status -s {LOCKSPACE} --json 2>&1", check=False, timeout=30)
    bed.timeline.mark("g2", "drill: host-status " + " ".join(out.split())[:200])
    try:
        state = next((h["state"] for h in json.loads(out) if h["host_id"] == 1), None)
    except (ValueError, KeyError, TypeError):
        state = None
    if state != "DEAD":
        res.violations.append(f"drill: a survivor's host-status shows host 1 {state}, not DEAD: {out.strip()}")
    _, out = g2.sh(f"lockd direct pr read-keys --json {bed.disk} 2>&1", check=False, timeout=30)
    bed.timeline.mark("g2", "drill: read-keys " + " ".join(out.split())[:200])
    try:
        left = [k for k in json.loads(out)["keys"] if k["host_id"] == 1
                and k.get("host_generation") == bed.keys_at_fault.get(1)]
    except (ValueError, KeyError, TypeError):
        left = ["unreadable"]
    if left:
        res.violations.append(f"drill: host 1's key of the fault is still registered: {out.strip()}")


def drill_back_view(bed: Bed, res: Result, g1: Guest) -> None:
    """"Bringing a fenced host back" in docs/operations.md, its last check: once the host
    joined again, `lockd doctor` passes `fence_keys` (every live host of the lockspace has
    its key on every fenced device)."""
    _, out = g1.sh("lockd doctor -c /run/lockd.toml 2>&1", check=False, timeout=120)
    line = next((ln for ln in out.splitlines() if "fence_keys" in ln), "")
    bed.timeline.mark("g1", f"back: doctor: {line.strip()[:200]}")
    if not line.lstrip().startswith("PASS"):
        res.violations.append(f"back: `lockd doctor` does not pass fence_keys after the rejoin: {line.strip()!r}")


def rejoin(bed: Bed, g1: Guest, res: Result) -> None:
    """g1 joins again once its fault is over. Storage that has just come back (an NFS
    client recovering its session, a path reconnecting) may fail the first tries, as it
    would for an operator: up to three tries, each failure on the timeline."""
    for attempt in range(3):
        try:
            bed.join(g1)
            res.rejoin = bed.clock.now()
            return
        except BedError as e:
            bed.timeline.mark(g1.name, f"rejoin try {attempt + 1} failed: {str(e)[-80:]}")
            time.sleep(2 * bed.io_timeout_s)
    res.violations.append("g1 did not rejoin after its fault ended (3 tries)")


def heal(bed: Bed, g1: Guest, name: str) -> None:
    """Ends the fault before g1 rejoins (after its reset, or after its daemon left the
    failed lockspace)."""
    if name in ("stall-io", "stubborn-holder", "cut-storage"):
        bed.relays[1].set_mode("pass")
    if not g1.alive() or g1.exit_t is not None:
        return
    if name == "eio":
        g1.sh("n=$(blockdev --getsz /dev/sda); dmsetup suspend --noflush lease && "
              "echo \"0 $n linear /dev/sda 0\" | dmsetup load lease && dmsetup resume lease")
        bed.timeline.mark("g1", "lease device healed (linear table)")
    elif name == "nfs-cut":
        g1.qmp("set_link", name="n0", up=True)
        bed.timeline.mark("g1", "network link up")


# ---------------------------------------------------------------------------------------
# SCSI-3 persistent reservations (issue 24): `lockd direct pr` in the guests against tgt.

PR_BLOCK_A = 32 << 20  # a 4 KiB block guest A writes, before and after it is preempted
PR_BLOCK_B = PR_BLOCK_A + 4096  # B's block
PR_DEV = "/dev/sda"


def pr_key(host_id: int, generation: int) -> int:
    """lvmlockd's key format 0x100000YYYYYYXXXX (what `lockd direct pr key` prints)."""
    return (0x100000 << 40) | (generation << 16) | host_id


def pr_write_cmd(offset: int, text: str) -> str:
    """A guest script writing one 4 KiB block holding `text` with O_DIRECT; prints dd's
    status and its error text (busybox dd: 'Invalid exchange' is EBADE)."""
    return (f"printf '%s' '{text}' | dd of=/tmp/blk bs=4096 conv=sync 2>/dev/null\n"
            f"dd if=/tmp/blk of={PR_DEV} bs=4096 count=1 seek={offset // 4096} oflag=direct "
            f"conv=notrunc 2>/tmp/dd.err; rc=$?; cat /tmp/dd.err; echo dd_rc=$rc")


def pr_read_cmd(offset: int) -> str:
    return (f"dd if={PR_DEV} of=/tmp/rd bs=4096 count=1 skip={offset // 4096} iflag=direct "
            f"2>/tmp/dd.err; rc=$?; cat /tmp/dd.err; echo dd_rc=$rc; head -c 32 /tmp/rd | tr -d '\\000'; echo")


def pr_basics(bed: Bed, res: Result) -> None:
    """Two guests, no daemons: A registers and reserves Write Exclusive – Registrants Only,
    B registers, B preempts A (PREEMPT AND ABORT tried, PREEMPT where tgt refuses it) and
    the preempt is confirmed by READ KEYS; A's O_DIRECT write then fails with EBADE and
    never reaches the LUN (checked in tgt's backing file), A's read works, B's write works;
    READ KEYS (lockd's and sg_persist's) lists only B; then release and clear. Everything
    through `lockd direct pr` in the guests."""
    bed.start_storage(2)

    def boot(i: int) -> None:
        g = Guest(bed, i, "lockd")
        bed.guests[i] = g
        g.start()

    in_parallel(boot, (1, 2))
    a, b = bed.guests[1], bed.guests[2]
    ka, kb = pr_key(1, 1), pr_key(2, 1)
    v = res.violations
    facts: dict[str, str] = {}

    def dd(g: Guest, script: str, what: str) -> str:
        _, out = g.sh(script, check=False)
        bed.timeline.mark(g.name, f"{what}: {' '.join(out.split())[:160]}")
        return out

    def pr(g: Guest, args: str, check: bool = True) -> str:
        rc, out = g.sh(f"lockd direct pr {args} 2>&1", check=False)
        bed.timeline.mark(g.name, f"lockd direct pr {args.split()[0]} -> {rc}: {out.strip()[:160]}")
        if check and rc != 0:
            raise BedError(f"{g.name}: lockd direct pr {args} failed ({rc}): {out}")
        return out

    # The key of `lockd direct pr key` is lvmlockd's format, as computed here.
    out = pr(a, "key --host-id 1 --generation 1").strip()
    if out != f"0x{ka:x}":
        v.append(f"lockd direct pr key printed {out}, expected 0x{ka:x}")
    out = pr(a, f"probe {PR_DEV}")
    facts["probe"] = "supported" if "persistent reservations supported" in out else "unsupported"
    if facts["probe"] != "supported":
        v.append(f"probe of the tgt LUN: {out.strip()}")
    # A whole-device device-mapper map passes SG_IO through (the bed's lockspaces live on one).
    a.sh("n=$(blockdev --getsz /dev/sda); echo \"0 $n linear /dev/sda 0\" | dmsetup create prmap && dmsetup mknodes prmap")
    out = pr(a, "probe /dev/mapper/prmap", check=False)
    facts["probe_dm"] = "supported" if "persistent reservations supported" in out else "unsupported"
    if facts["probe_dm"] != "supported":
        v.append(f"probe through a linear device-mapper map: {out.strip()}")
    a.sh("dmsetup remove prmap")
    pr(a, f"register {PR_DEV} --key 0x{ka:x}")
    pr(a, f"reserve {PR_DEV} --key 0x{ka:x} --type we-ro")
    pr(b, f"register {PR_DEV} --key 0x{kb:x}")
    out = pr(b, f"read-reservation {PR_DEV}")
    if "reservation we-ro" not in out or f"0x{ka:x}" not in out:
        v.append(f"B does not see A's we-ro reservation: {out.strip()}")
    out = pr(b, f"read-keys {PR_DEV}")
    if f"0x{ka:x}" not in out or f"0x{kb:x}" not in out:
        v.append(f"READ KEYS before the preempt lacks a key: {out.strip()}")

    # Both are registrants: under WE-RO both may write.
    for g, off, text in ((a, PR_BLOCK_A, "pr-basics A before"), (b, PR_BLOCK_B, "pr-basics B before")):
        out = dd(g, pr_write_cmd(off, text), "O_DIRECT write as a registrant")
        if "dd_rc=0" not in out:
            v.append(f"{g.name}'s write as a registrant failed: {out.strip()}")

    # The fence.
    res.fault = bed.timeline.mark("bed", "FAULT pr-basics: B preempts A")
    out = pr(b, f"preempt {PR_DEV} --key 0x{kb:x} --victim 0x{ka:x} --type we-ro --abort", check=False)
    res.takeover = bed.clock.now()
    if "confirmed" not in out:
        v.append(f"preempt not confirmed: {out.strip()}")
    facts["preempt"] = ("PREEMPT_AND_ABORT" if "(PREEMPT AND ABORT)" in out
                        else "PREEMPT" if "(PREEMPT)" in out else "failed")
    facts["abort_refused"] = "yes" if "PREEMPT AND ABORT refused" in out else "no"

    # A is fenced: its write bounces with EBADE and never reaches the LUN; reads work.
    out = dd(a, pr_write_cmd(PR_BLOCK_A, "pr-basics A AFTER FENCE"), "O_DIRECT write, preempted")
    facts["a_write"] = ("EBADE" if "Invalid exchange" in out and "dd_rc=0" not in out
                        else "ok" if "dd_rc=0" in out else "error")
    if facts["a_write"] != "EBADE":
        v.append(f"A's write after the preempt did not fail with EBADE: {out.strip()}")
    out = dd(a, pr_read_cmd(PR_BLOCK_B), "O_DIRECT read, preempted")
    facts["a_read"] = "ok" if "dd_rc=0" in out else "error"
    if facts["a_read"] != "ok":
        v.append(f"A's read after the preempt failed: {out.strip()}")
    out = dd(b, pr_write_cmd(PR_BLOCK_B, "pr-basics B after"), "O_DIRECT write, after preempting A")
    facts["b_write"] = "ok" if "dd_rc=0" in out else "error"
    if facts["b_write"] != "ok":
        v.append(f"B's write after the preempt failed: {out.strip()}")

    # What reached the disk, read in tgt's backing file from the host.
    with open(bed.lun, "rb") as f:
        f.seek(PR_BLOCK_A)
        blk_a = f.read(64).split(b"\0", 1)[0].decode(errors="replace")
        f.seek(PR_BLOCK_B)
        blk_b = f.read(64).split(b"\0", 1)[0].decode(errors="replace")
    facts["fenced_write_on_lun"] = "no" if blk_a == "pr-basics A before" else "YES"
    if blk_a != "pr-basics A before":
        v.append(f"A's block on the LUN holds {blk_a!r}: the fenced write reached the disk")
    if blk_b != "pr-basics B after":
        v.append(f"B's block on the LUN holds {blk_b!r}, not B's write after the preempt")

    # Only B's key is left, as lockd (from both guests) and sg_persist see it.
    for g in (a, b):
        out = pr(g, f"read-keys {PR_DEV}")
        if f"0x{ka:x}" in out or f"0x{kb:x}" not in out:
            v.append(f"{g.name}: READ KEYS after the preempt: {out.strip()}")
    # The JSON forms, as a script would read them.
    try:
        kj = json.loads(pr(b, f"read-keys --json {PR_DEV}"))
        rj = json.loads(pr(b, f"read-reservation --json {PR_DEV}"))
        got = [(k["key"], k["host_id"], k["host_generation"]) for k in kj["keys"]]
        if got != [(f"0x{kb:x}", 2, 1)] or kj["truncated"]:
            v.append(f"read-keys --json after the preempt: {kj}")
        if (rj["reservation"] or {}).get("type") != "we-ro" or rj["reservation"]["key"] != f"0x{kb:x}":
            v.append(f"read-reservation --json after the preempt: {rj}")
    except (ValueError, KeyError, TypeError) as e:
        v.append(f"the --json output did not parse as expected: {e}")
    rc, out = b.sh(f"sg_persist -n -k {PR_DEV}", check=False)
    keys_seen = [w for w in out.split() if w.startswith("0x")]
    facts["keys_after"] = ",".join(keys_seen) or "none"
    if rc != 0 or keys_seen != [f"0x{kb:x}"]:
        v.append(f"sg_persist -k after the preempt: {out.strip()}")
    out = pr(b, f"read-reservation {PR_DEV}")
    if "reservation we-ro" not in out or f"0x{kb:x}" not in out:
        v.append(f"B does not hold the we-ro reservation after preempting its holder: {out.strip()}")
    # A fenced host's PR OUT with its old key is refused.
    out = pr(a, f"reserve {PR_DEV} --key 0x{ka:x}", check=False)
    if "RESERVATION CONFLICT" not in out:
        v.append(f"A's reserve with its preempted key was not a reservation conflict: {out.strip()}")

    # Release and clear leave the LUN as it began.
    pr(b, f"release {PR_DEV} --key 0x{kb:x} --type we-ro")
    if "no reservation" not in pr(b, f"read-reservation {PR_DEV}"):
        v.append("reservation left after release")
    pr(b, f"clear {PR_DEV} --key 0x{kb:x}")
    if "no keys registered" not in pr(a, f"read-keys {PR_DEV}"):
        v.append("keys left after clear")
    print("pr: scenario=pr-basics storage=iscsi target=tgt " + " ".join(f"{k}={x}" for k, x in facts.items())
          + f" violations={len(v)}", flush=True)


# ---------------------------------------------------------------------------------------
# Storage-fencing holes (issue 38): a reservation gone with a clean leave, a preempt that
# lost a race taken for our own fence, a paused survivor preempting from a stale view.

ANSI = re.compile(r"\x1b\[[0-9;]*m")
# A daemon log line with one of these, on a host nothing was wrong with, is a false fence.
FALSE_FENCE_SIGNS = ("has been fenced", "our preempt was refused", "lockspace failed: our delta lease is lost",
                     # sanlock 3.8.5's daemon (a sanlock guest): a failed renewal, a lease lost.
                     "renewal error", "check_our_lease failed")


def pr_generations(g: Guest) -> dict[int, int]:
    """host_id -> generation of every key in lvmlockd's format on the LUN, as `lockd
    direct pr read-keys --json` in guest `g` reads them ({} when the read fails)."""
    _, out = g.sh(f"lockd direct pr read-keys --json {g.bed.disk} 2>&1", check=False, timeout=30)
    try:
        return {k["host_id"]: k["host_generation"] for k in json.loads(out)["keys"] if k["host_id"]}
    except (ValueError, KeyError, TypeError):
        return {}


def pr_reservation(g: Guest) -> str:
    """The LUN's reservation as `lockd direct pr read-reservation --json` in guest `g`
    shows it: "TYPE/KEY/HOLDER" (the host_id the key names, or "all-registrants" for the
    zero key of an all-registrants type), "none", or "unreadable(…)"."""
    _, out = g.sh(f"lockd direct pr read-reservation --json {g.bed.disk} 2>&1", check=False, timeout=30)
    try:
        r = json.loads(out)["reservation"]
        if not r:
            return "none"
        key = int(r["key"], 16)
        holder = ("all-registrants" if key == 0 else f"host{key & 0xFFFF}" if key >> 40 == 0x100000
                  else "foreign-key")
        return f"{r['type'] or r['type_code']}/{r['key']}/{holder}"
    except (ValueError, KeyError, TypeError):
        return f"unreadable({' '.join(out.split())[:80]})"


def count_false_fences(bed: Bed, res: Result, faulty: set[str], allowed: dict[int, int]) -> None:
    """The healthy hosts fenced although nothing was wrong with them, from every guest's
    daemon log (read in the guest at the end; kept in the work dir) and the bed's reset
    events: a host whose key was preempted at another generation than `allowed` names
    (host_id -> the generation the fault hit), and a guest not in `faulty` that logged it
    has been fenced, that its own preempt was refused or that its lockspace failed, or was
    reset by its watchdog. Each host counts once, in res.false_fences, each a violation."""
    logs: dict[str, str] = {}
    for g in bed.guests.values():
        if not g.alive() or g.exit_t is not None:
            continue
        try:
            _, out = g.sh("cat /var/tmp/daemon.log", check=False, timeout=30)
        except BedError:
            out = ""
        (g.dir / f"daemon.{g.boots}.log").write_text(out)
        logs[g.name] = ANSI.sub("", out)
    found: dict[str, str] = {}
    for name, log in logs.items():
        for line in log.splitlines():
            if "key preempted" not in line:
                continue
            fields = line.split("key preempted", 1)[1]
            h, gen = re.search(r"host_id=(\d+)", fields), re.search(r"generation=(\d+)", fields)
            if h and gen and allowed.get(int(h[1])) != int(gen[1]):
                found.setdefault(f"g{h[1]}", f"{name} preempted host_id {h[1]} generation {gen[1]}")
    for g in bed.guests.values():
        if g.name in faulty:
            continue
        if g.watchdog_t or g.boots > 1:
            found.setdefault(g.name, "reset by its watchdog")
        for line in logs.get(g.name, "").splitlines():
            if any(sign in line for sign in FALSE_FENCE_SIGNS):
                found.setdefault(g.name, f"it logged: {' '.join(line.split())[:200]}")
    res.false_fences = [f"{h}: {why}" for h, why in sorted(found.items())]
    for f in res.false_fences:
        bed.timeline.mark("bed", f"false fence: {f}")
        res.violations.append(f"false fence: {f}")


def fence_notes(bed: Bed, res: Result, loser: str, fault: float) -> None:
    """The summary's fence times after `fault`: the first preempt and fence mark by a guest
    other than `loser`, `loser`'s holder writes refused by the target, and its holder's
    first lost-lease notice (killpath or SIGTERM)."""
    with bed.witness.lock:
        notes = [(t, h, e) for t, h, e in bed.witness.notes if t >= fault]
    pre = [t for t, h, e in notes if h != loser and e == "fence-preempt"]
    marks = [t for t, h, e in notes if h != loser and e == "fence-marked"]
    res.preempt = min(pre) if pre else None
    res.fenced_mark = min(marks) if marks else None
    res.fenced_write_errors = sum(1 for _t, h, e in notes if h == loser and e == "write_error")
    rec = [t for t, h, e in notes if h == loser and e in ("killpath", "sigterm")]
    res.recovery = min(rec) if rec else None


def check_takeover(bed: Bed, res: Result, loser: str, fault: float) -> float | None:
    """Waits for another guest than `loser` to write under the lease; a violation when
    none does, or later than PR_TAKEOVER_LIMIT_S after the fault."""
    d = bed.io_timeout_s
    take = bed.wait_for("takeover", lambda: bed.witness.takeover(loser, fault), 8 * d + bed.fire_timeout_s + 30)
    res.takeover = take
    if take is None:
        res.violations.append("no other guest took the lease")
    elif take - fault > PR_TAKEOVER_LIMIT_S:
        res.violations.append(f"takeover {take - fault:.2f}s after the fault (limit {PR_TAKEOVER_LIMIT_S} s)")
    return take


def start_three_with_holder(bed: Bed, first: int | None = None, last: int | None = None,
                            contenders: tuple[int, ...] = ()) -> None:
    """Three fenced lockd guests joined (guest `first` alone before the others and `last`
    alone after them, when given; the others at once), g1 holding the lease and writing,
    `contenders` waiting for it; returns after two renewals of everyone were seen."""
    bed.start_storage(3)
    in_parallel(lambda i: bed.boot(i), (1, 2, 3))
    if first is not None:
        bed.join(bed.guests[first])
    join_all(bed, [g for i, g in sorted(bed.guests.items()) if i not in (first, last)])
    if last is not None:
        bed.join(bed.guests[last])
    bed.start_holder(bed.guests[1])
    if not bed.wait_for("g1 holds", lambda: bed.witness.takeover("none", 0.0), 60):
        raise BedError("g1 never wrote under its lease")
    for i in contenders:
        bed.start_contender(bed.guests[i])
    time.sleep(2 * 2 * bed.io_timeout_s + 1)


def pr_holder_leaves(bed: Bed, res: Result) -> None:
    """The reservation must outlive a clean leave of the host that made it. g2 joins
    first, so its key makes the reservation (the old daemon's Write Exclusive – Registrants
    Only then has g2 as its one holder; Write Exclusive – All Registrants stands while any
    registrant is left); g1 and g3 join after. g1 holds the lease and writes; its whole
    guest is paused (QMP `stop`: its clocks stop with it, so on `cont` it believes no time
    passed); g3 preempts g1's key, confirms it and takes the lease; g2 leaves cleanly
    (REM_LOCKSPACE: its delta lease released, its key removed); g1 is resumed. Checks: a
    reservation still stands after the leave, no write of g1 reaches the LUN after the
    takeover (overlaps=0; its writes bounce with EBADE), the takeover within
    PR_TAKEOVER_LIMIT_S of the pause, and no false fence of g2 or g3."""
    d = bed.io_timeout_s
    v = res.violations
    start_three_with_holder(bed, first=2, contenders=(3,))
    g1, g2, g3 = bed.guests[1], bed.guests[2], bed.guests[3]
    before = pr_reservation(g3)
    bed.timeline.mark("g3", f"reservation before the fault: {before}")
    bed.keys_at_fault = pr_generations(g3)
    res.fault = fault = bed.timeline.mark("bed", "FAULT pr-holder-leaves: QMP stop of g1 (the holder)")
    g1.qmp("stop")
    take = check_takeover(bed, res, "g1", fault)
    fence_notes(bed, res, "g1", fault)
    bed.timeline.mark("g2", "rem-lockspace (a clean leave)")
    rc, out = g2.sh(f"lockd rem-lockspace -s {LOCKSPACE}:2:{bed.lease_path()}:0 2>&1", check=False, timeout=60)
    bed.timeline.mark("g2", f"left: rc {rc} {' '.join(out.split())[:120]}")
    if rc != 0:
        v.append(f"g2's clean leave failed ({rc}): {out.strip()}")
    after = pr_reservation(g3)
    bed.timeline.mark("g3", f"reservation after g2 left: {after}")
    if after == "none":
        v.append("no reservation after g2's clean leave: any initiator, a fenced one too, may write")
    bed.timeline.mark("g1", "QMP cont (resumed)")
    g1.qmp("cont")
    time.sleep(8 * d + 4)
    fence_notes(bed, res, "g1", fault)
    with bed.witness.lock:
        landed = [t for t, h, _l, _s in bed.witness.writes if h == "g1" and take is not None and t > take]
    if landed:
        v.append(f"{len(landed)} write(s) of g1 reached the LUN after the takeover (first {landed[0]:.2f}s)")
    count_false_fences(bed, res, faulty={"g1"}, allowed={1: bed.keys_at_fault.get(1, -1)})
    print(f"pr: scenario=pr-holder-leaves reservation_before_leave={before} reservation_after_leave={after} "
          f"g1_writes_landed_after_takeover={len(landed)} g1_writes_refused={res.fenced_write_errors}", flush=True)


def pr_double_preempt(bed: Bed, res: Result) -> None:
    """Two survivors preempt the same dead holder at once: the slower one's PREEMPT finds
    the victim's key already gone (RESERVATION CONFLICT) and must not take that for its
    own fence. g1 holds, g2 and g3 contend; g1's daemon is SIGKILLed (as pr-kill-daemon).
    The race is widened in the storage path, not in the daemons: the first PREEMPT either
    survivor sends is held in its relay (PreemptGate) until the other survivor logged its
    own preempt of the key, or PREEMPT_HOLD_CAP_S (LOCKD_VMBED_NO_GATE=1 leaves the race
    to chance). Checks: the race was hit (a survivor's PREEMPT met RESERVATION CONFLICT: it
    logged that its preempt was refused, or that the key was already preempted), that
    survivor said the key was already preempted and stayed unfenced (false_fences=0),
    another guest took the lease within PR_TAKEOVER_LIMIT_S, overlaps=0."""
    d, w = bed.io_timeout_s, bed.fire_timeout_s
    v = res.violations
    gate = PreemptGate(bed.timeline)
    bed.start_storage(3)
    if not os.environ.get("LOCKD_VMBED_NO_GATE"):
        bed.relays[2].gate = bed.relays[3].gate = gate
    in_parallel(lambda i: bed.boot(i), (1, 2, 3))
    join_all(bed, list(bed.guests.values()))
    g1 = bed.guests[1]
    bed.start_holder(g1)
    if not bed.wait_for("g1 holds", lambda: bed.witness.takeover("none", 0.0), 60):
        raise BedError("g1 never wrote under its lease")
    bed.start_contender(bed.guests[2])
    bed.start_contender(bed.guests[3])
    time.sleep(2 * 2 * d + 1)
    bed.keys_at_fault = pr_generations(bed.guests[2])
    res.fault = fault = bed.timeline.mark("bed", "FAULT pr-double-preempt: SIGKILL g1's daemon")
    g1.sh("kill -KILL $(cat /run/daemon.pid)")

    def held() -> str | None:
        return None if gate.holder is None else "g" + gate.holder[len("relay"):]

    def other_preempted() -> float | None:
        with bed.witness.lock:
            return next((t for t, h, e in bed.witness.notes
                         if t >= fault and h not in ("g1", held()) and e == "fence-preempt"), None)

    if bed.relays[2].gate is not None:
        bed.wait_for("a held PREEMPT and the other's preempt",
                     lambda: gate.released_at or (held() and other_preempted()), 8 * d + w + 30)
        t_other = other_preempted() if held() else None
        if t_other is not None and gate.released_at is None:
            gate.open(f"the other survivor's preempt logged at {t_other:.2f}s")
        bed.wait_for("release", lambda: gate.released_at, PREEMPT_HOLD_CAP_S + 2)
    take = check_takeover(bed, res, "g1", fault)
    bed.wait_for("watchdog", lambda: g1.watchdog_t, 8 * d + w + 30)
    time.sleep(8 * d + 4)  # the held survivor acts on its answer
    fence_notes(bed, res, "g1", fault)
    res.watchdog = g1.watchdog_t[0] if g1.watchdog_t else None
    with bed.witness.lock:
        notes = [(h, e) for t, h, e in bed.witness.notes if t >= fault and h != "g1"]
        landed = [t for t, h, _l, _s in bed.witness.writes if h == "g1" and take is not None and t > take]
    second = next((h for h, e in notes if e in ("fence-refused", "fence-already")), None)
    outcome = ",".join(e[len("fence"):].lstrip("-") if e.startswith("fence-") else e
                       for h, e in notes if h == second and e in
                       ("fence-refused", "fence-already", "fenced-self", "lockspace-failed")) or "none"
    race = "hit" if second else "missed"
    if second is None:
        v.append("the race was not hit: no survivor's PREEMPT met RESERVATION CONFLICT")
    elif outcome != "already":
        v.append(f"{second}, whose PREEMPT came second, did not only say the key was already preempted ({outcome})")
    if landed:
        v.append(f"{len(landed)} write(s) of g1 reached the LUN after the takeover (first {landed[0]:.2f}s)")
    count_false_fences(bed, res, faulty={"g1"}, allowed={1: bed.keys_at_fault.get(1, -1)})
    held_s = (gate.released_at - gate.held_at) if gate.held_at and gate.released_at else None
    print(f"pr: scenario=pr-double-preempt gate={'on' if bed.relays[2].gate else 'off'} held={held()} "
          f"held_s={'none' if held_s is None else f'{held_s:.2f}'} race={race} second={second} "
          f"second_logged={outcome}", flush=True)


def pause_moment(bed: Bed, timeout: float) -> str:
    """Returns just after a renewal of g2 (seen on the LUN), preferably one that came
    0.1–1 s after g1's and g3's latest: their reads came before it (a renewal reads, then
    writes), so they see it only at their next renewal 1–1.9 s later and see it stand still
    the shortest time. After `timeout` without one, the next renewal of g2 does. Returns
    how g2's renewal lay against theirs."""
    seen = bed.witness.last_renewal_before(2, bed.clock.now())
    deadline = bed.clock.now() + timeout
    while bed.clock.now() < deadline + 10:
        t2 = bed.witness.last_renewal_before(2, bed.clock.now())
        if t2 is not None and t2 != seen:
            seen = t2
            lags = [t2 - (bed.witness.last_renewal_before(i, t2) or -99.0) for i in (1, 3)]
            late = bed.clock.now() > deadline
            if late or all(0.1 <= x <= 1.0 for x in lags):
                return ("g2 renewed %.2f/%.2f s after g1/g3" % tuple(lags)) + (" (no better phase)" if late else "")
        time.sleep(0.02)
    raise BedError("g2 did not renew its delta lease")


def pr_survivor_paused(bed: Bed, res: Result) -> None:
    """A survivor whose own daemon stood still must not judge its peers from the view it
    had before. All three guests healthy, g1 holds the lease and writes; g2 joins after g1
    and g3 (guests that join together renew in step; a join takes about 2.2 s at D=1, so
    g2's renewals come a fraction of a second after theirs, the phase pause_moment looks
    for). g2's daemon is SIGSTOPped right after one of its renewals (pause_moment) for
    SURVIVOR_PAUSE_S guest seconds (the stop, sleep and SIGCONT run in g2, on its clock),
    then resumed. The pause
    is longer than the old daemon's preempt time (5 s) and shorter than g2's own lease
    failure (8·D) and the new preempt floor (6·D): a longer one (e.g. 12 s) gets g2 itself
    preempted by g1 or g3 first, and on resume it finds itself fenced instead. Checks:
    nobody preempts g1 or g3, neither logs that it has been fenced or that its lockspace
    failed, neither is reset (false_fences=0), g1's holder keeps writing, overlaps=0, and
    g2's own key stays: it stood still less than the preempt floor (6·D), and a g2
    preempted by a peer (as the old daemon, at 5 s, can do when the renewal phases are
    against it) has not tested a resumed survivor's pass. That is a violation of its own,
    not a false fence: g2's troubles are not counted."""
    d = bed.io_timeout_s
    v = res.violations
    start_three_with_holder(bed, last=2)
    g1, g2, g3 = bed.guests[1], bed.guests[2], bed.guests[3]
    bed.keys_at_fault = pr_generations(g3)
    phase = pause_moment(bed, 60)
    res.fault = fault = bed.timeline.mark("bed", f"FAULT pr-survivor-paused: SIGSTOP g2's daemon ({phase})")
    g2.sh(f"kill -STOP $(cat /run/daemon.pid); sleep {SURVIVOR_PAUSE_S}; kill -CONT $(cat /run/daemon.pid)",
          timeout=60)
    resumed = bed.timeline.mark("g2", f"daemon SIGCONT after {SURVIVOR_PAUSE_S} s (guest clock)")
    time.sleep(8 * d + 4)
    fence_notes(bed, res, "none", fault)
    with bed.witness.lock:
        g1_last = max((t.last for t in bed.witness.tenures.values() if t.host == "g1" and t.source == "disk"),
                      default=0.0)
    if g1_last < bed.clock.now() - 3:
        v.append(f"g1's holder stopped writing (last write {g1_last:.2f}s) although nothing was wrong with it")
    keys = pr_generations(g3)
    for i in (1, 3):
        if keys.get(i) != bed.keys_at_fault.get(i):
            v.append(f"g{i}'s key (generation {bed.keys_at_fault.get(i)}) is gone after g2's pause: {keys}")
    count_false_fences(bed, res, faulty={"g2"}, allowed={2: bed.keys_at_fault.get(2, -1)})
    g2_key = "kept" if keys.get(2) == bed.keys_at_fault.get(2) else "gone"
    if g2_key == "gone":
        v.append(f"g2's key was preempted after a {SURVIVOR_PAUSE_S} s stop ({phase})")
    fmt = lambda k: ",".join(f"{h}:{g}" for h, g in sorted(k.items())) or "none"
    print(f"pr: scenario=pr-survivor-paused pause_s={SURVIVOR_PAUSE_S} resumed_at_s={resumed - fault:.2f} "
          f"keys_before={fmt(bed.keys_at_fault)} keys_after={fmt(keys)} g2_key={g2_key} "
          f"phase=\"{phase}\"", flush=True)


def pr_set_host_fail(bed: Bed, res: Result) -> None:
    """`lockd set-host --dead` on a host in FAIL: its renewals have stopped but its holders
    may still write until its watchdog fires (8·D + W after its last renewal). g1 holds the
    lease and writes; its lockd-daemon is SIGSTOPped (renewals stop, the holder goes on);
    fence_preempt_s is 60, past host_dead, so the daemons' own fence pass never acts. g2
    runs `set-host --dead -i 1` every half second until it is accepted (g1 in FAIL), and
    g3 waits for the lease. Checks: g3 takes the lease before g1's host_dead (the mark
    freed it), no write of g1 reaches the LUN after g3's first (overlaps=0: with fencing on,
    set-host preempts g1's key before the mark, so g1's writes bounce), no false fence."""
    d, w = bed.io_timeout_s, bed.fire_timeout_s
    v = res.violations
    bed.preempt_s = 60
    bed.delta_v5 = True
    start_three_with_holder(bed, contenders=(3,))
    g1, g2 = bed.guests[1], bed.guests[2]
    bed.keys_at_fault = pr_generations(g3 := bed.guests[3])
    res.fault = fault = bed.timeline.mark("bed", "FAULT pr-set-host-fail: SIGSTOP of g1's lockd-daemon")
    g1.sh("kill -STOP $(cat /run/daemon.pid)")
    marked = None
    tries = 0
    while bed.clock.now() < fault + 8 * d + w:
        tries += 1
        rc, out = g2.sh(f"lockd set-host --dead -s {LOCKSPACE} -i 1 2>&1", check=False, timeout=30)
        if rc == 0:
            marked = bed.timeline.mark("g2", f"set-host --dead -i 1 accepted (try {tries}): {' '.join(out.split())[:100]}")
            break
        if tries == 1 or "EBUSY" not in out and "-16" not in out:
            bed.timeline.mark("g2", f"set-host refused: {' '.join(out.split())[:120]}")
        time.sleep(0.5)
    if marked is None:
        v.append("set-host --dead was never accepted before g1's host_dead")
    take = bed.wait_for("takeover", lambda: bed.witness.takeover("g1", fault), 8 * d + w + 30)
    res.takeover = take
    if take is None:
        v.append("no other guest took the lease")
    elif marked is not None and take - fault >= 8 * d + w:
        v.append(f"the takeover ({take - fault:.2f}s) waited host_dead: the mark freed nothing")
    fence_notes(bed, res, "g1", fault)
    time.sleep(8 * d + w + 4)  # g1's watchdog fires; its last writes are in or refused
    with bed.witness.lock:
        landed = [t for t, h, _l, _s in bed.witness.writes if h == "g1" and take is not None and t > take]
    if landed:
        v.append(f"{len(landed)} write(s) of g1 reached the LUN after g3's takeover (first {landed[0]:.2f}s)")
    count_false_fences(bed, res, faulty={"g1"}, allowed={1: bed.keys_at_fault.get(1, -1)})
    f = lambda x: "none" if x is None else f"{x - fault:.2f}"
    print(f"pr: scenario=pr-set-host-fail marked_at_s={f(marked)} takeover_at_s={f(take)} "
          f"g1_writes_landed_after_takeover={len(landed)} g1_writes_refused={res.fenced_write_errors}", flush=True)


def pr_rejoin_race(bed: Bed, res: Result) -> None:
    """A rejoin must not register over a fence confirmed a moment earlier (issue 38, item
    4). g1 holds the lease and writes; its lockd-daemon is SIGKILLed (its holder goes on,
    its wdmd keeps the last expiry) and started again at once with `LOCKD_PAUSE_AT=
    join-keys-read`, and g1 adds the lockspace again: the join reads the key list (g1's
    old key still there: no wait is needed by that list) and the daemon stops itself
    before registering. g2 preempts g1's old key (fence_preempt_s after its last renewal),
    and g3 takes the lease. Then g1's daemon is resumed. The join's plain REGISTER naming
    the old key is refused (the key is gone), the rule is decided again from a fresh list
    (no key of g1 while a reservation stands: wait host_dead) and the holder's writes keep
    bouncing until g1's watchdog resets it: overlaps=0. With the old rule planted
    (`pr-rejoin-race-old-rule`: REGISTER AND IGNORE EXISTING KEY), the registration undoes
    the preempt for g1's initiator and the holder's writes land after g3's takeover: that
    scenario fails unless they do."""
    d, w = bed.io_timeout_s, bed.fire_timeout_s
    v = res.violations
    old_rule = bed.scenario == "pr-rejoin-race-old-rule"
    start_three_with_holder(bed, contenders=(3,))
    g1 = bed.guests[1]
    bed.keys_at_fault = pr_generations(bed.guests[3])
    res.fault = fault = bed.timeline.mark("bed", "FAULT pr-rejoin-race: SIGKILL g1's lockd-daemon, start it again")
    g1.sh("kill -KILL $(cat /run/daemon.pid)")
    env = bed.daemon_env
    bed.daemon_env = ("env LOCKD_PAUSE_AT=join-keys-read "
                      + ("LOCKD_PLANTED_BUG=join-register-ignore-existing " if old_rule else ""))
    try:
        g1.sh(bed.daemon_start_script(g1), timeout=60)
    finally:
        bed.daemon_env = env
    bed.timeline.mark("g1", "lease daemon started again (pause point join-keys-read)")
    g1.sh(f"setsid sh -c '{bed.env(g1)}lockd add-lockspace -o {d} -s {LOCKSPACE}:1:{bed.lease_path()}:0' "
          ">/var/tmp/rejoin.log 2>&1 &")
    if not bed.wait_for("g1's join stopped at its pause point", lambda: g1.sh(
            "grep -q 'PAUSE POINT reached' /var/tmp/daemon.log", check=False, timeout=20)[0] == 0, 30):
        raise BedError("g1's join never reached its pause point")
    paused = bed.timeline.mark("g1", "join stopped after reading the keys (SIGSTOP by itself)")
    keys_at_pause = pr_generations(bed.guests[3])
    if keys_at_pause.get(1) != bed.keys_at_fault.get(1):
        v.append(f"race not set up: g1's old key was gone before its join read the keys ({keys_at_pause})")
    take = bed.wait_for("takeover", lambda: bed.witness.takeover("g1", fault), 8 * d + w + 30)
    res.takeover = take
    if take is None:
        raise BedError("no other guest took the lease")
    time.sleep(0.5)
    g1.sh("kill -CONT $(cat /run/daemon.pid)")
    resumed = bed.timeline.mark("g1", "daemon resumed (SIGCONT) after the takeover")
    time.sleep(8 * d + w + 4)  # g1's watchdog fires; its last writes are in or refused
    fence_notes(bed, res, "g1", fault)
    _, log = g1.sh("grep -E 'key registered|changed under the join|PAUSE POINT|PLANTED' /var/tmp/daemon.log "
                   "2>/dev/null | tail -5", check=False, timeout=20) if g1.alive() else (0, "")
    for line in log.splitlines():
        bed.timeline.mark("g1", " ".join(ANSI.sub("", line).split())[:160])
    with bed.witness.lock:
        landed = [t for t, h, _l, _s in bed.witness.writes if h == "g1" and t > take]
    count_false_fences(bed, res, faulty={"g1"}, allowed={1: bed.keys_at_fault.get(1, -1)})
    f = lambda x: "none" if x is None else f"{x - fault:.2f}"
    print(f"pr: scenario={bed.scenario} paused_at_s={f(paused)} takeover_at_s={f(take)} "
          f"resumed_at_s={f(resumed)} g1_writes_landed_after_takeover={len(landed)} "
          f"g1_writes_refused={res.fenced_write_errors} rule={'old (planted)' if old_rule else 'current'}",
          flush=True)


def pr_target_restart(bed: Bed, res: Result) -> None:
    """A target that loses its PR state must not make the hosts fence themselves (issue
    38, item 6). Three healthy fenced guests, g1 holding the lease and writing; tgtd is
    killed and started again on the same port and LUN after TARGET_DOWN_S (tgt keeps no
    reservations across a restart: every key and the reservation are gone). Checks: no
    host logs that it has been fenced or that its lockspace failed, none is reset, nobody
    preempts anyone (false_fences=0); within 8·D + W after the restart every host's key
    is back with the generation it had, a reservation stands again, and g1's holder is
    still writing; overlaps=0."""
    d, w = bed.io_timeout_s, bed.fire_timeout_s
    v = res.violations
    start_three_with_holder(bed)
    g3 = bed.guests[3]
    bed.keys_at_fault = before = pr_generations(g3)
    resv_before = pr_reservation(g3)
    res.fault = fault = bed.timeline.mark("bed", "FAULT pr-target-restart: tgtd killed (PR state lost)")
    port = bed.tgt.port
    bed.tgt.stop()
    time.sleep(TARGET_DOWN_S)
    orig = free_port
    globals()["free_port"] = lambda: port
    try:
        bed.tgt = Tgt(bed.workdir, bed.lun)
    finally:
        globals()["free_port"] = orig
    restarted = bed.timeline.mark("bed", f"tgtd started again after {TARGET_DOWN_S} s (no keys, no reservation)")
    back_at = None
    deadline = restarted + 8 * d + w
    keys, resv = {}, "none"
    while bed.clock.now() < deadline:
        keys, resv = pr_generations(g3), pr_reservation(g3)
        if keys == before and resv != "none" and not resv.startswith("unreadable"):
            back_at = bed.timeline.mark("bed", f"keys and reservation back: {keys} {resv}")
            break
        time.sleep(1)
    if back_at is None:
        v.append(f"keys or reservation not back {8 * d + w} s after the restart: keys {keys} "
                 f"(before {before}), reservation {resv} (before {resv_before})")
    time.sleep(4)
    with bed.witness.lock:
        g1_last = max((t.last for t in bed.witness.tenures.values() if t.host == "g1" and t.source == "disk"),
                      default=0.0)
    if g1_last < bed.clock.now() - 3:
        v.append(f"g1's holder stopped writing (last write {g1_last:.2f}s) although nothing was wrong with it")
    fence_notes(bed, res, "none", fault)
    count_false_fences(bed, res, faulty=set(), allowed={})
    f = lambda x: "none" if x is None else f"{x - fault:.2f}"
    fmt = lambda k: ",".join(f"{h}:{g}" for h, g in sorted(k.items())) or "none"
    print(f"pr: scenario=pr-target-restart down_s={TARGET_DOWN_S} restarted_at_s={f(restarted)} "
          f"back_at_s={f(back_at)} keys_before={fmt(before)} keys_after={fmt(keys)} "
          f"reservation_before={resv_before} reservation_after={resv}", flush=True)


def pr_delay_bursts(bed: Bed, res: Result) -> None:
    """Short storage delays on a live host must not get it fenced (issue 38, item 8). All
    three guests healthy, g1 holds the lease and writes; for BURSTS_S g2's path (g2 is a
    survivor, not the holder) alternates BURST_S of delay (each chunk BURST_DELAY_S late,
    so a renewal read under way times out and is retried) with 2–5 s of normal passage.
    Its renewals then come 4–5·D apart at times, under the preempt floor (6·D). Checks:
    nobody preempts g2 (or anyone), g2 neither logs it was fenced nor fails its lockspace
    nor is reset (false_fences=0), g1's holder keeps writing, overlaps=0. Prints the
    longest gap between g2's renewals seen on the LUN. fence_preempt_s is 4 here, which the
    old 4·D floor accepted at D = 1 and the current 6·D floor raises to 6: the
    -old-rule twin (`preempt-floor-4d`) must show g2 preempted."""
    v = res.violations
    rng = random.Random(38)
    bed.preempt_s = 4
    start_three_with_holder(bed)
    g3 = bed.guests[3]
    bed.keys_at_fault = before = pr_generations(g3)
    relay = bed.relays[2]
    relay.slow_delay_s = BURST_DELAY_S
    res.fault = fault = bed.timeline.mark("bed", f"FAULT pr-delay-bursts: g2's path delayed in bursts for {BURSTS_S} s")
    bursts = 0
    while bed.clock.now() < fault + BURSTS_S:
        relay.set_mode("slow")
        time.sleep(BURST_S)
        relay.set_mode("pass")
        bursts += 1
        time.sleep(rng.uniform(2.0, 5.0))
    end = bed.timeline.mark("bed", f"bursts over ({bursts})")
    time.sleep(8)
    with bed.witness.lock:
        ts = sorted(x for x in bed.witness.renewals.get(2, []) if fault - 3 <= x <= end + 3)
    gap = max((b - a for a, b in zip(ts, ts[1:])), default=0.0)
    with bed.witness.lock:
        g1_last = max((t.last for t in bed.witness.tenures.values() if t.host == "g1" and t.source == "disk"),
                      default=0.0)
    if g1_last < bed.clock.now() - 3:
        v.append(f"g1's holder stopped writing (last write {g1_last:.2f}s) although nothing was wrong with it")
    keys = pr_generations(g3)
    if keys != before:
        v.append(f"keys changed although every host renewed: {before} -> {keys}")
    fence_notes(bed, res, "none", fault)
    count_false_fences(bed, res, faulty=set(), allowed={})
    fmt = lambda k: ",".join(f"{h}:{g}" for h, g in sorted(k.items())) or "none"
    print(f"pr: scenario={bed.scenario} bursts={bursts} burst_s={BURST_S} delay_s={BURST_DELAY_S} "
          f"g2_renewals={len(ts)} longest_gap_s={gap:.2f} keys_before={fmt(before)} keys_after={fmt(keys)}",
          flush=True)


def holder_writing(bed: Bed, host: str, within_s: float = 3.0) -> bool:
    """Whether `host`'s holder wrote under the lease (as the LUN shows) in the last
    `within_s` seconds."""
    with bed.witness.lock:
        last = max((t.last for t in bed.witness.tenures.values() if t.host == host and t.source == "disk"),
                   default=0.0)
    return last >= bed.clock.now() - within_s


def pr_mixed_sanlock(bed: Bed, res: Result) -> None:
    """A fenced lockd cluster with a sanlock host in its lockspace (issue 38, item 10):
    g1 and g2 run lockd with fence = "scsi-pr", g3 runs Debian's sanlock 3.8.5 (no key;
    sanlock knows nothing of PR). g1 holds the lease and writes, g3 waits for it. While g3
    renews without a key the lockd hosts make no reservation (else g3's next renewal meets
    RESERVATION CONFLICT and its lockspace fails) and say why in their log. Then g1's
    lockd-daemon is SIGKILLed: without a reservation nobody preempts, so the lease waits
    host_dead (or g1's reset), as in a cluster without fencing, and g3 takes it. Checks: no
    reservation, keys of g1 and g2 only, the unkeyed host named in the log; no preempt;
    g1 reset by its watchdog, takeover not before host_dead and the reset; g3 renewing
    throughout; overlaps=0, false_fences=0. With the old rule planted
    (`pr-mixed-sanlock-old-rule`: reserve although a live peer has no key) the run stops
    after 8·D + 5 s of that and fails unless the sanlock guest was fenced."""
    d, w = bed.io_timeout_s, bed.fire_timeout_s
    v = res.violations
    old_rule = bed.scenario.endswith("-old-rule")
    bed.start_storage(3)
    kinds = {1: "lockd", 2: "lockd", 3: "sanlock"}
    in_parallel(lambda i: bed.boot(i, kinds[i]), (1, 2, 3))
    g1, g2, g3 = bed.guests[1], bed.guests[2], bed.guests[3]
    join_all(bed, [g1, g2, g3])
    bed.start_holder(g1)
    if not bed.wait_for("g1 holds", lambda: bed.witness.takeover("none", 0.0), 60):
        raise BedError("g1 never wrote under its lease")
    bed.start_contender(g3)
    time.sleep(2 * 2 * d + 5)  # two renewals of everyone, several fence passes (1 s)
    keys, resv = pr_generations(g2), pr_reservation(g2)
    bed.keys_at_fault = keys
    looked = bed.timeline.mark("bed", f"keys {keys}, reservation {resv}")
    fmt = lambda k: ",".join(f"{h}:{g}" for h, g in sorted(k.items())) or "none"
    if old_rule:
        time.sleep(8 * d + 5)  # the sanlock guest's lockspace fails 8·D after its renewals do
        count_false_fences(bed, res, faulty=set(), allowed={})
        print(f"pr: scenario={bed.scenario} keys={fmt(keys)} reservation={resv} "
              f"false_fences={len(res.false_fences)} rule=old (planted)", flush=True)
        return
    if resv != "none":
        v.append(f"a reservation stands while the sanlock host renews without a key: {resv}")
    if set(keys) != {1, 2}:
        v.append(f"keys of host_ids {sorted(keys)}: expected g1's and g2's only")
    _, n = g2.sh("grep -c 'renews its lease but has no key' /var/tmp/daemon.log", check=False, timeout=20)
    if not n.strip().isdigit() or int(n.strip()) == 0:
        v.append("g2's log never named the unkeyed live host")
    res.fault = fault = bed.timeline.mark("bed", "FAULT pr-mixed-sanlock: SIGKILL g1's lockd-daemon")
    g1.sh("kill -KILL $(cat /run/daemon.pid)")
    take = bed.wait_for("takeover", lambda: bed.witness.takeover("g1", fault), 8 * d + w + 2 * d + 60)
    res.takeover = take
    time.sleep(1.0)
    res.watchdog = g1.watchdog_t[0] if g1.watchdog_t else None
    res.last_renewal = bed.witness.last_renewal_before(1, res.watchdog or take or bed.clock.now())
    if res.last_renewal is not None:
        res.host_dead = res.last_renewal + 8 * d + w
    if take is None:
        v.append("no other guest took the lease")
    elif res.host_dead is not None and take + 1.0 < res.host_dead and (res.watchdog is None or take + 1.0 < res.watchdog):
        v.append(f"takeover at {take:.2f}s before host_dead {res.host_dead:.2f}s and before any reset")
    if res.watchdog is None:
        v.append("the watchdog never reset g1 (its daemon was killed)")
    fence_notes(bed, res, "g1", fault)
    if res.preempt is not None:
        v.append(f"a preempt at {res.preempt:.2f}s with no reservation standing")
    with bed.witness.lock:
        g3_last = max(bed.witness.renewals.get(3, [0.0]))
    if g3_last < bed.clock.now() - 3 * d:
        v.append(f"the sanlock guest stopped renewing (last seen {g3_last:.2f}s)")
    count_false_fences(bed, res, faulty={"g1"}, allowed={})
    f = lambda x: "none" if x is None else f"{x - fault:.2f}"
    print(f"pr: scenario={bed.scenario} keys={fmt(keys)} reservation={resv} looked_at_s={f(looked)} "
          f"watchdog_s={f(res.watchdog)} host_dead_s={f(res.host_dead)} takeover_at_s={f(take)} "
          f"preempt_at_s={f(res.preempt)} rule=current", flush=True)


def restart_with_fence(bed: Bed, g: Guest, method: str) -> None:
    """One host's step of a rolling change: g leaves the lockspace cleanly (no holder on
    it), its lockd-daemon shuts down, its lockd.toml gets `fence = method` and the daemon
    starts again and joins, as an operator does with /etc/lockd/lockd.toml and systemctl."""
    w = bed.fire_timeout_s
    bed.timeline.mark(g.name, f"rolling: leave and stop the daemon, then start it with fence = {method}")
    g.sh(f"lockd rem-lockspace --unused -s {LOCKSPACE}:{g.index}:{bed.lease_path()}:0", timeout=60)
    g.sh("p=$(cat /run/daemon.pid); lockd shutdown -w >/dev/null; "
         "for i in $(seq 100); do kill -0 $p 2>/dev/null || exit 0; sleep 0.1; done; exit 1", timeout=30)
    bed.fence_method[g.index] = method
    g.sh(f"printf 'watchdog_fire_timeout = {w}\\n{bed.toml_extra}' >/run/lockd.toml\n" + bed.fence_toml(g)
         + bed.daemon_start_script(g), timeout=60)
    bed.join(g)


def stop_holder(bed: Bed, g: Guest) -> None:
    """Ends g's holder (its retry loop, then the writing process; the lease is then
    released), as a VM migrated away from the host would."""
    g.sh("for pat in 'run/contend.sh' 'run/hold.sh' 'lockd-witness.hold'; do for p in /proc/[0-9]*; do "
         "[ ${p#/proc/} != $$ ] && grep -q \"$pat\" $p/cmdline 2>/dev/null && kill -KILL ${p#/proc/}; done; done; "
         "exit 0", timeout=20)
    bed.timeline.mark(g.name, "holder stopped (the lease is released)")


def move_holder(bed: Bed, src: Guest, dst: Guest) -> None:
    stop_holder(bed, src)
    t = bed.clock.now()
    bed.start_contender(dst)
    if bed.wait_for(f"{dst.name} holds", lambda: bed.witness.takeover(src.name, t), 60) is None:
        raise BedError(f"{dst.name} never took the lease from {src.name}")


def pr_rolling(bed: Bed, res: Result) -> None:
    """Storage fencing turned on and off host by host with a holder writing throughout
    (issue 38, item 11), in the order docs/operations.md gives. Three lockd guests start
    with fence = "none"; g1 holds and writes. On: g3, then g2 restart with "scsi-pr" (each
    registers its key; no reservation while an unkeyed host renews), the holder moves to
    g2, g1 restarts with "scsi-pr": the reservation is made. Off, round 1: g3, g1 restart
    with "register-only", the holder moves to g3, g2 restarts likewise (keys stay, the
    reservation stands, nobody reserves or preempts); the reservation is released by hand
    from its holder (`lockd direct pr release`); round 2: g1, g2 restart with "none", the
    holder moves to g1, g3 restarts likewise (nobody reserves again). After each step:
    the keys and reservation expected, the holder still writing. Throughout: no host
    fenced, failed or reset (false_fences=0), overlaps=0. With the old rule planted
    (`pr-rolling-old-rule`: reserve although a live peer has no key) only the first step
    runs, and the run fails unless a host not yet converted was fenced."""
    d = bed.io_timeout_s
    v = res.violations
    old_rule = bed.scenario.endswith("-old-rule")
    bed.fence_method = {1: "none", 2: "none", 3: "none"}
    start_three_with_holder(bed)
    g1, g2, g3 = bed.guests[1], bed.guests[2], bed.guests[3]
    res.fault = start = bed.timeline.mark("bed", "rolling change starts (every host fence = none)")
    holder = g1
    steps: list[str] = []

    def look(label: str, want_keys: set[int], want_resv: bool) -> None:
        time.sleep(2 * 2 * d + 2)  # two renewals of everyone and several fence passes (1 s)
        reader = next(g for g in (g2, g3, g1) if g.alive())
        keys, resv = pr_generations(reader), pr_reservation(reader)
        ok = set(keys) == want_keys and (resv != "none" and not resv.startswith("unreadable")) == want_resv
        bed.timeline.mark("bed", f"after {label}: keys {keys} reservation {resv} ({'as expected' if ok else 'NOT as expected'})")
        steps.append(f"{label}:keys={','.join(str(h) for h in sorted(keys)) or 'none'}:resv={'yes' if resv != 'none' else 'no'}")
        if not ok:
            v.append(f"after {label}: keys of host_ids {sorted(keys)}, reservation {resv}; expected keys "
                     f"{sorted(want_keys)} and {'a' if want_resv else 'no'} reservation")
        if not holder_writing(bed, holder.name):
            v.append(f"after {label}: {holder.name}'s holder is not writing")

    restart_with_fence(bed, g3, "scsi-pr")
    look("g3 scsi-pr", {3}, False)
    if old_rule:
        time.sleep(8 * d + 5)
        count_false_fences(bed, res, faulty=set(), allowed={})
        print(f"pr: scenario={bed.scenario} steps={' '.join(steps)} false_fences={len(res.false_fences)} "
              "rule=old (planted)", flush=True)
        return
    restart_with_fence(bed, g2, "scsi-pr")
    look("g2 scsi-pr", {2, 3}, False)
    move_holder(bed, g1, g2)
    holder = g2
    restart_with_fence(bed, g1, "scsi-pr")
    look("g1 scsi-pr", {1, 2, 3}, True)
    on_done = bed.timeline.mark("bed", "fencing on for every host")
    # Off, round 1: register-only everywhere; the reservation stands meanwhile.
    restart_with_fence(bed, g3, "register-only")
    look("g3 register-only", {1, 2, 3}, True)
    restart_with_fence(bed, g1, "register-only")
    look("g1 register-only", {1, 2, 3}, True)
    move_holder(bed, g2, g3)
    holder = g3
    restart_with_fence(bed, g2, "register-only")
    look("g2 register-only", {1, 2, 3}, True)
    resv = pr_reservation(g3)
    m = re.match(r"[^/]*/(0x[0-9a-fA-F]+)/host(\d+)$", resv)
    if not m:
        raise BedError(f"no reservation holder to release from: {resv}")
    key, h = m[1], int(m[2])
    bed.guests[h].sh(f"lockd direct pr release {PR_DEV} -k {key} -t we-ro", timeout=30)
    bed.timeline.mark(f"g{h}", f"reservation released by hand (key {key})")
    look("hand release", {1, 2, 3}, False)
    # Off, round 2: none everywhere; nobody reserves again.
    restart_with_fence(bed, g1, "none")
    restart_with_fence(bed, g2, "none")
    # Their clean leaves removed their keys; g3's is the last one now.
    look("g1 g2 none", {3}, False)
    move_holder(bed, g3, g1)
    holder = g1
    restart_with_fence(bed, g3, "none")
    time.sleep(2 * 2 * d + 2)
    keys_end, resv_end = pr_generations(g2), pr_reservation(g2)
    bed.timeline.mark("bed", f"rolling change over: keys {keys_end}, reservation {resv_end}")
    if resv_end != "none":
        v.append(f"a reservation stands with every host at fence = none: {resv_end}")
    if not holder_writing(bed, holder.name):
        v.append(f"at the end: {holder.name}'s holder is not writing")
    count_false_fences(bed, res, faulty=set(), allowed={})
    f = lambda x: "none" if x is None else f"{x - start:.2f}"
    print(f"pr: scenario={bed.scenario} steps={' '.join(steps)} on_at_s={f(on_done)} "
          f"keys_end={','.join(str(k) for k in sorted(keys_end)) or 'none'} reservation_end={resv_end} "
          "rule=current", flush=True)


PR_BODIES = {"pr-basics": pr_basics, "pr-holder-leaves": pr_holder_leaves,
             "pr-double-preempt": pr_double_preempt, "pr-survivor-paused": pr_survivor_paused,
             "pr-set-host-fail": pr_set_host_fail, "pr-rejoin-race": pr_rejoin_race,
             "pr-rejoin-race-old-rule": pr_rejoin_race, "pr-target-restart": pr_target_restart,
             "pr-delay-bursts": pr_delay_bursts, "pr-delay-bursts-old-rule": pr_delay_bursts,
             "pr-mixed-sanlock": pr_mixed_sanlock,
             "pr-mixed-sanlock-old-rule": pr_mixed_sanlock, "pr-rolling": pr_rolling,
             "pr-rolling-old-rule": pr_rolling}

# lvmlockd 2.03.31 (Debian 13) on a shared VG (issue 26): tests/vmbed/vmbed_lvm.py.
import vmbed_lvm  # noqa: E402  (it is handed this module: no import cycle)

SCENARIOS.update(vmbed_lvm.SCENARIOS)
LVM_BODIES = vmbed_lvm.bodies(sys.modules[__name__])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("scenarios", nargs="*")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--ci", action="store_true", help=f"run the CI subset: {' '.join(CI_SUBSET)}")
    ap.add_argument("--io-timeout", type=int, default=2)
    ap.add_argument("--fire-timeout", type=int, default=10)
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--storage", choices=SANS, default="tgt",
                    help="the shared disk's target for the SCSI scenarios: tgt on the host (Debian 12's "
                         "kernel in the guests), or, on Debian unstable's kernel, LIO (iSCSI) or nvmet "
                         f"(NVMe/TCP) in a storage guest; lio and nvme-tcp run {' '.join(SAN_SCENARIOS)}")
    a = ap.parse_args()
    if a.list:
        for n, (st, desc) in SCENARIOS.items():
            print(f"{n:20} {st:6} {desc}")
        return 0
    names = CI_SUBSET if a.ci else (a.scenarios or list(SCENARIOS))
    for n in names:
        if n not in SCENARIOS:
            print(f"vmbed: unknown scenario {n}; --list lists them", file=sys.stderr)
            return 2
    if a.storage != "tgt":
        other = [n for n in names if n not in SAN_SCENARIOS]
        if other:
            print(f"vmbed: --storage {a.storage} runs {' '.join(SAN_SCENARIOS)} only, not {' '.join(other)}",
                  file=sys.stderr)
            return 2
    image = guest_image(a.storage)
    for p in ("vmlinuz", "initrd.gz"):
        if not (image / p).exists():
            print(f"vmbed: {image / p} missing: run scripts/vmbed.sh (it builds the image)", file=sys.stderr)
            return 2
    results = []
    for n in names:
        r = run_scenario(n, a.io_timeout, a.fire_timeout, a.keep, a.storage)
        print(r.line(), flush=True)
        for v in r.violations:
            print(f"  VIOLATION {v}", flush=True)
        results.append(r)
    f = lambda v, base: "-" if v is None else f"{v - base:7.2f}"
    print()
    print(f"{'scenario':20} {'storage':7} {'fault':>7} {'renewal':>8} {'recovery':>8} {'watchdog':>8} "
          f"{'host_dead':>9} {'takeover':>8} {'rejoin':>7} overlaps  result")
    print("(seconds after the fault; renewal = the holder's last delta-lease renewal seen on the storage)")
    for r in results:
        base = r.fault or 0.0
        print(f"{r.scenario:20} {r.storage:7} {f(r.fault, base):>7} {f(r.last_renewal, base):>8} "
              f"{f(r.recovery, base):>8} {f(r.watchdog, base):>8} {f(r.host_dead, base):>9} "
              f"{f(r.takeover, base):>8} {f(r.rejoin, base):>7} {len(r.overlaps):8}  "
              f"{'ok' if not r.violations else 'FAILED'}")
    fenced = [r for r in results if r.fence]
    if fenced:
        print()
        print(f"storage fencing (fence=scsi-pr, io_timeout 1 (pr-target-restart and pr-mixed-sanlock: 2), preempt_s {PR_PREEMPT_S}; seconds after the fault)")
        print(f"{'scenario':20} {'preempt':>7} {'fenced':>7} {'takeover':>8} {'notice':>7} {'watchdog':>8} "
              f"{'write_errors':>12} overlaps false_fences  result")
        for r in fenced:
            base = r.fault or 0.0
            print(f"{r.scenario:20} {f(r.preempt, base):>7} {f(r.fenced_mark, base):>7} {f(r.takeover, base):>8} "
                  f"{f(r.recovery, base):>7} {f(r.watchdog, base):>8} {r.fenced_write_errors:12} "
                  f"{len(r.overlaps):8} {len(r.false_fences):12}  {'ok' if not r.violations else 'FAILED'}")
    return 0 if all(not r.violations for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
