#!/usr/bin/python3
"""Scale benchmark (issue 14): the lockd daemon next to the real sanlock 3.8.5 daemon.

One invocation measures both daemons, one after the other, on one sparse loop device
(`losetup --direct-io=on`, backing file under /var/tmp), driven by Debian's python3-sanlock
(the real libsanlock) and by this script writing delta-lease sectors itself:

  1. clients  -- one lockspace (io_timeout 1) and N registered clients (default 1,000),
                 each holding its own resource lease (1 MiB area each). Then the RSS of
                 the daemon process tree (daemon + helper), its idle CPU over 30 s
                 (utime+stime from /proc, all threads and children), and whether the
                 daemon has memory locked (VmLck > 0, i.e. mlockall).
  2. spaces   -- the daemon joins 50 lockspaces (io_timeout 1, 1 MiB each, one device)
                 and runs ~60 s. Renewal latency from the daemon's RENEWAL records
                 (`sanlock client renewal -s`, which both daemons answer), and lateness:
                 a poller reads the daemon's delta-lease sector of every lockspace every
                 0.2 s with O_DIRECT and records when the timestamp changes; a renewal's
                 lateness = (time since the previous renewal) - 2*io_timeout (it was due
                 2*io_timeout after the previous one). Target: never later than io_timeout.
  3. hosts    -- a 2,000-host lockspace: this script formats it and keeps hosts 2..2000
                 alive (valid delta-lease records, own host_id, generation 1, timestamp
                 advancing every second, sanlock's CRC-32C variant), while the daemon joins
                 as host 1. Reports join time, renewal cost, acquire+release latency of a
                 resource lease, and checks that GET_HOSTS (plus `sanlock client
                 host_status` / `lockd status --json`) shows the simulated hosts LIVE.

Run as root (loop devices, daemons). Everything the script starts (daemons, client
processes, loop device, files) is removed on exit, also on Ctrl-C / SIGTERM.

  bench/scale_bench.py [--quick] [--only sanlock|lockd] [--parts clients,spaces,hosts]

The lockd daemon command line (`--lockd-daemon`) gets `{run_dir}` and `{host}` substituted.
"""

import argparse
import json
import mmap
import os
import re
import resource
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time

MIB = 1 << 20
SECTOR = 512
ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
PY = "/usr/bin/python3"  # the interpreter python3-sanlock is installed for
CLK_TCK = os.sysconf("SC_CLK_TCK")

# Targets (issue 14).
RSS_TARGET_KIB = 64 * 1024
CPU_TARGET_PCT = 0.1

DELTA_MAGIC, DELTA_VERSION = 0x12212010, 0x00030004
PAXOS_MAGIC, PAXOS_VERSION = 0x06152010, 0x00060004
REQ_MAGIC, REQ_VERSION = 0x08292011, 0x00010001
LFL_ALIGN_1M = 0x10
HOST_STATE = {1: "UNKNOWN", 2: "FREE", 3: "LIVE", 4: "FAIL", 5: "DEAD"}


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- cleanup ----

class Cleanup:
    """Undo actions run in reverse order, exactly once, also on signals."""

    def __init__(self):
        self.actions = []
        self.done = False

    def push(self, what, fn):
        self.actions.append((what, fn))
        return len(self.actions) - 1

    def run_one(self, idx):
        what, fn = self.actions[idx]
        self.actions[idx] = (what, None)
        if fn:
            try:
                fn()
            except Exception as e:  # keep cleaning
                log(f"cleanup: {what}: {e}")

    def run(self):
        if self.done:
            return
        self.done = True
        for i in reversed(range(len(self.actions))):
            self.run_one(i)


CLEANUP = Cleanup()


def on_signal(signum, _frame):
    raise KeyboardInterrupt(f"signal {signum}")


def kill_pid(proc, name, term_wait=10):
    """Stops a child we started (a Popen), by its pid."""
    if proc.poll() is not None:
        return
    try:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=term_wait)
    except subprocess.TimeoutExpired:
        log(f"{name} (pid {proc.pid}) ignored SIGTERM, sending SIGKILL")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    except ProcessLookupError:
        pass


# ------------------------------------------------------------- disk format ----

def _crc_table():
    t = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        t.append(c)
    return t


CRC_T = _crc_table()


def crc_update(reg, data):
    t = CRC_T
    for b in data:
        reg = t[(reg ^ b) & 0xFF] ^ (reg >> 8)
    return reg


def sanlock_crc(data):
    """sanlock's checksum: reflected CRC-32C, register seed ~1, no final xor."""
    return crc_update(0xFFFFFFFE, data)


def name48(s):
    b = s.encode() if isinstance(s, str) else s
    assert len(b) <= 48
    return b.ljust(48, b"\0")


def leader_head(magic, version, num_hosts, max_hosts, owner_id, gen, lver, space, res):
    """Bytes 0..151 of a leader_record (512-byte sectors, 1 MiB align)."""
    return struct.pack("<IIIIQQQQQ48s48s", magic, version, LFL_ALIGN_1M, SECTOR, num_hosts,
                       max_hosts, owner_id, gen, lver, name48(space), name48(res))


def leader_record(head, timestamp, io_timeout, crc_reg=None):
    """Completes a leader_record (200 bytes) from its head; crc_reg = CRC register after
    the head, if precomputed."""
    tail = struct.pack("<QQ", timestamp, 0)
    reg = crc_update(sanlock_crc(head) if crc_reg is None else crc_reg, tail)
    return head + tail + struct.pack("<IHHQQQ", reg, 0, io_timeout & 0xFF, 0, 0, 0)


def delta_area(space, io_timeout=10, hosts=2000):
    """A freshly formatted 512/1M lockspace area, like `sanlock direct init -s`. The
    io_timeout in the free records matters: a joining host waits 2 * that value."""
    area = bytearray(MIB)
    for i in range(hosts):
        rec = leader_record(leader_head(DELTA_MAGIC, DELTA_VERSION, 0, 1, 0, 0, 0, space, ""), 0, io_timeout)
        area[i * SECTOR:i * SECTOR + len(rec)] = rec
    return area


def paxos_sectors(space, res):
    """Sectors 0 and 1 (leader, request record) of a fresh 512/1M resource area; the rest
    of the area is zero (like `sanlock direct init -r`)."""
    buf = bytearray(2 * SECTOR)
    rec = leader_record(leader_head(PAXOS_MAGIC, PAXOS_VERSION, 2000, 2000, 0, 0, 0, space, res), 0, 0)
    buf[:len(rec)] = rec
    struct.pack_into("<IIQII", buf, SECTOR, REQ_MAGIC, REQ_VERSION, 0, 0, 0)
    return buf


def self_test():
    assert sanlock_crc(b"123456789") == 0xE8C7BB34
    d = leader_record(leader_head(DELTA_MAGIC, DELTA_VERSION, 0, 1, 0, 0, 0, "myls", ""), 0, 10)
    assert struct.unpack_from("<I", d, 168)[0] == 0x41A76326, "delta checksum vector"
    p = paxos_sectors("myls", "myres")
    assert struct.unpack_from("<I", p, 168)[0] == 0x12EE84FE, "paxos checksum vector"


def compare_with_sanlock_direct(tmpdir):
    """Formats a lockspace and a resource with `sanlock direct init` into a file and checks
    that this script's formatter writes the same bytes."""
    f = os.path.join(tmpdir, "fmt-check.img")
    with open(f, "wb") as fh:
        fh.truncate(2 * MIB)
    sh("sanlock", "direct", "init", "-s", f"chk:0:{f}:0")
    sh("sanlock", "direct", "init", "-r", f"chk:chkres:{f}:{MIB}")
    with open(f, "rb") as fh:
        data = fh.read()
    os.unlink(f)
    io = struct.unpack_from("<H", data, 174)[0]  # whatever default sanlock wrote
    if data[:MIB] != bytes(delta_area("chk", io)):
        raise SystemExit("scale_bench: lockspace formatter differs from `sanlock direct init -s`")
    if data[MIB:] != bytes(paxos_sectors("chk", "chkres")) + bytes(MIB - 2 * SECTOR):
        raise SystemExit("scale_bench: resource formatter differs from `sanlock direct init -r`")


class Disk:
    """O_DIRECT access to the loop device with page-aligned buffers."""

    def __init__(self, dev):
        self.fd = os.open(dev, os.O_RDWR | os.O_DIRECT | os.O_SYNC)

    def write(self, offset, data):
        buf = mmap.mmap(-1, max(len(data), 4096))
        buf[:len(data)] = data
        n = os.pwritev(self.fd, [memoryview(buf)[:len(data)]], offset)
        buf.close()
        if n != len(data):
            raise IOError(f"short write at {offset}")

    def close(self):
        os.close(self.fd)


def format_lockspace(disk, space, offset, io_timeout=1):
    area = delta_area(space, io_timeout)
    # Two-step commit like sanlock: the whole area with record 0 invalid, then sector 0.
    first = bytes(area[:SECTOR])
    area[0:4] = b"\0\0\0\0"
    disk.write(offset, area)
    disk.write(offset, first)


def format_resource(disk, space, res, offset, zero_area=False):
    """Writes a fresh resource leader and request record; also zeroes the dblocks of hosts
    1..6 (the first 4 KiB), or the whole area with zero_area, so an earlier run's dblocks
    (host 1 is the only host in this benchmark) do not linger."""
    if zero_area:
        disk.write(offset, bytes(MIB))
    disk.write(offset, bytes(paxos_sectors(space, res)) + bytes(4096 - 2 * SECTOR))


# ----------------------------------------------------------------- helpers ----

def sh(*args, env=None, check=True, timeout=120):
    r = subprocess.run(args, capture_output=True, text=True, env=env, timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed ({r.returncode}): {r.stderr.strip() or r.stdout.strip()}")
    return r.stdout


def tree(pid):
    """pid and all its descendants (children of every thread)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for t in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{t}/children") as f:
                    todo.extend(int(c) for c in f.read().split())
        except (FileNotFoundError, ProcessLookupError):
            pass
    return out


def status_kib(pid, key):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except FileNotFoundError:
        pass
    return 0


def rss_kib(pid):
    return sum(status_kib(p, "VmRSS") for p in tree(pid))


def cpu_ticks(pid):
    """utime+stime of pid and descendants (the /proc/PID/stat of a process sums its threads)."""
    total = 0
    for p in tree(pid):
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # fields 14, 15 of stat(5)
        except (FileNotFoundError, ProcessLookupError):
            pass
    return total


def cpu_pct(pid, seconds):
    """CPU use of the process tree over `seconds`, in % of one core."""
    c0, t0 = cpu_ticks(pid), time.monotonic()
    time.sleep(seconds)
    c1, t1 = cpu_ticks(pid), time.monotonic()
    return 100.0 * (c1 - c0) / CLK_TCK / (t1 - t0)


def pct(values, q):
    if not values:
        return float("nan")
    v = sorted(values)
    return v[min(len(v) - 1, int(round(q / 100.0 * (len(v) - 1))))]


# ----------------------------------------------------------------- daemons ----

class Daemon:
    def __init__(self, label, cmd, workdir, lockd_bin):
        self.label = label
        self.run_dir = tempfile.mkdtemp(prefix=f"{label}-run-", dir=workdir)
        os.chmod(self.run_dir, 0o755)
        self.env = dict(os.environ, SANLOCK_RUN_DIR=self.run_dir, LOCKD_RUN_DIR=self.run_dir,
                        SANLOCK_PRIVILEGED="0")
        self.cmd = [a.replace("{run_dir}", self.run_dir).replace("{host}", f"scale-{label}") for a in cmd]
        self.lockd_bin = lockd_bin
        self.log_path = os.path.join(workdir, f"{label}-daemon.log")
        self.proc = None

    def start(self):
        logf = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.cmd, env=self.env, stdout=logf, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        logf.close()
        self.cleanup_idx = CLEANUP.push(f"{self.label} daemon", self.stop)
        sock = os.path.join(self.run_dir, "sanlock.sock")
        deadline = time.monotonic() + 20
        while not os.path.exists(sock):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError(f"{self.label}: daemon did not start: {' '.join(self.cmd)} "
                                   f"(log {self.log_path})")
            time.sleep(0.05)
        time.sleep(0.5)

    def stop(self):
        if self.proc is None or self.proc.poll() is not None:
            return
        # Forced shutdown (no watchdog: -w 0) drops lockspaces; then SIGTERM/SIGKILL by pid.
        subprocess.run(["sanlock", "client", "shutdown", "-f", "1"], env=self.env,
                       capture_output=True, timeout=30)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            kill_pid(self.proc, f"{self.label} daemon")

    def finish(self):
        CLEANUP.run_one(self.cleanup_idx)

    def client(self, code, timeout=600):
        """Runs python3-sanlock code in a child process talking to this daemon."""
        r = subprocess.run([PY, "-c", "import sanlock, json, time, os, sys\n" + code],
                           env=self.env, capture_output=True, text=True, timeout=timeout)
        if r.returncode != 0:
            raise RuntimeError(f"{self.label}: client failed: {r.stderr.strip()[-2000:]}")
        return r.stdout

    def renewals(self, ls_string):
        """(timestamp, read_ms + write_ms) from RENEWAL records."""
        out = sh("sanlock", "client", "renewal", "-s", ls_string, env=self.env, check=False)
        recs = []
        for m in re.finditer(r"timestamp=(\d+) read_ms=(\d+) write_ms=(\d+)", out):
            recs.append((int(m.group(1)), int(m.group(2)) + int(m.group(3))))
        return recs


def vmlck(d):
    return "on" if status_kib(d.proc.pid, "VmLck") > 0 else "off"


# ------------------------------------------------- part 1: 1,000 clients ----

HOLDER = r'''
import json, sys, time, sanlock
ls, path = sys.argv[1].encode(), sys.argv[2]
first, n, base = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
fds, lat = [], []
for i in range(first, first + n):
    fd = sanlock.register()
    a = time.monotonic()
    sanlock.acquire(ls, b"r%d" % i, [(path, base + i * 1048576)], slkfd=fd)
    lat.append(time.monotonic() - a)
    fds.append(fd)
print(json.dumps({"lat": lat}), flush=True)
sys.stdin.readline()  # hold the leases until told (or until stdin closes)
'''


def part_clients(d, disk, dev, base, nclients, idle_s, nprocs):
    ls = f"sc_{d.label}"
    log(f"{d.label}: clients: formatting 1 lockspace + {nclients} resources")
    format_lockspace(disk, ls, base)
    for i in range(nclients):
        format_resource(disk, ls, f"r{i}", base + (1 + i) * MIB)
    d.start()
    rss_start = rss_kib(d.proc.pid)
    t0 = time.monotonic()
    d.client(f"sanlock.add_lockspace({ls.encode()!r}, 1, {dev!r}, {base}, iotimeout=1)")
    add_s = time.monotonic() - t0
    log(f"{d.label}: joined in {add_s:.2f} s; starting {nclients} clients in {nprocs} processes")
    procs, lat = [], []
    per = (nclients + nprocs - 1) // nprocs
    t0 = time.monotonic()
    try:
        for k in range(nprocs):
            first, n = k * per, min(per, nclients - k * per)
            if n <= 0:
                break
            p = subprocess.Popen([PY, "-c", HOLDER, ls, dev, str(first), str(n), str(base + MIB)],
                                 env=d.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 text=True, start_new_session=True)
            procs.append(p)
            CLEANUP.push(f"holder {p.pid}", lambda p=p: kill_pid(p, "holder", 5))
        for p in procs:
            line = p.stdout.readline()
            if not line:
                p.wait()
                raise RuntimeError(f"{d.label}: a holder process failed (exit {p.returncode}); "
                                   f"daemon log {d.log_path}")
            lat.extend(json.loads(line)["lat"])
        acquire_all_s = time.monotonic() - t0
        held = len(lat)
        time.sleep(3)  # let the acquire burst settle
        rss = rss_kib(d.proc.pid)
        log(f"{d.label}: {held} leases held, RSS {rss} KiB; measuring idle CPU for {idle_s} s")
        cpu = cpu_pct(d.proc.pid, idle_s)
        rss_after = rss_kib(d.proc.pid)
        lck = vmlck(d)
        threads = sum(status_kib(p, "Threads") for p in tree(d.proc.pid))
        lck_kib = status_kib(d.proc.pid, "VmLck")
    finally:
        for p in procs:
            try:
                p.stdin.close()  # the holders exit; the daemon releases their leases
            except OSError:
                pass
        for p in procs:
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                kill_pid(p, "holder", 5)
    d.finish()
    return {
        "clients": held, "add_s": add_s, "acquire_all_s": acquire_all_s,
        "acq_p50_ms": pct(lat, 50) * 1000, "acq_p99_ms": pct(lat, 99) * 1000,
        "rss_start_kib": rss_start, "rss_kib": max(rss, rss_after), "cpu_pct": cpu,
        "idle_s": idle_s, "vmlck": lck, "vmlck_kib": lck_kib,
        "threads": threads,
    }


# ------------------------------------------------ part 2: 50 lockspaces ----

class SectorPoller(threading.Thread):
    """Reads one delta-lease sector (timestamp at byte 152) per lockspace every `period`
    seconds and records the monotonic time at which each timestamp change was seen."""

    def __init__(self, dev, offsets, period=0.2):
        super().__init__(daemon=True)
        self.dev, self.offsets, self.period = dev, offsets, period
        self.changes = {o: [] for o in offsets}
        self.stop_ev = threading.Event()
        self.max_round_s = 0.0

    def run(self):
        fd = os.open(self.dev, os.O_RDONLY | os.O_DIRECT)
        buf = mmap.mmap(-1, 4096)
        last = {}
        try:
            while not self.stop_ev.is_set():
                t0 = time.monotonic()
                for o in self.offsets:
                    os.preadv(fd, [memoryview(buf)[:SECTOR]], o)
                    ts = struct.unpack_from("<Q", buf, 152)[0]
                    if ts != last.get(o):
                        if o in last:
                            self.changes[o].append(time.monotonic())
                        last[o] = ts
                dt = time.monotonic() - t0
                self.max_round_s = max(self.max_round_s, dt)
                self.stop_ev.wait(max(0.0, self.period - dt))
        finally:
            buf.close()
            os.close(fd)


def part_spaces(d, disk, dev, base, nspaces, run_s, lockd_bin):
    names = [f"ls{i}_{d.label}" for i in range(nspaces)]
    offs = [base + i * MIB for i in range(nspaces)]
    log(f"{d.label}: spaces: formatting {nspaces} lockspaces")
    for n, o in zip(names, offs):
        format_lockspace(disk, n, o)
    d.start()
    t0 = time.monotonic()
    d.client(f"""
names, offs, dev = {[n.encode() for n in names]!r}, {offs!r}, {dev!r}
for n, o in zip(names, offs):
    sanlock.add_lockspace(n, 1, dev, o, iotimeout=1, wait=False)
for n, o in zip(names, offs):
    deadline = time.monotonic() + 120
    while not sanlock.inq_lockspace(n, 1, dev, o, wait=True):
        if time.monotonic() > deadline:
            sys.exit('lockspace %s not joined' % n)
        time.sleep(0.2)
""")
    join_s = time.monotonic() - t0
    log(f"{d.label}: {nspaces} lockspaces joined in {join_s:.1f} s; running {run_s} s")
    poller = SectorPoller(dev, offs)
    poller.start()
    CLEANUP.push("sector poller", poller.stop_ev.set)
    c0, w0 = cpu_ticks(d.proc.pid), time.monotonic()
    time.sleep(run_s)
    cpu = 100.0 * (cpu_ticks(d.proc.pid) - c0) / CLK_TCK / (time.monotonic() - w0)
    poller.stop_ev.set()
    poller.join()
    rss = rss_kib(d.proc.pid)
    threads = sum(status_kib(p, "Threads") for p in tree(d.proc.pid))
    durations, rec_gaps, disk_gaps = [], [], []
    for n, o in zip(names, offs):
        # Only the renewals of the measurement window: RENEWAL timestamps are the daemon's
        # CLOCK_MONOTONIC seconds, the clock of time.monotonic().
        recs = [r for r in d.renewals(f"{n}:1:{dev}:{o}") if r[0] >= int(w0)]
        durations.extend(ms for _, ms in recs)
        rec_gaps.extend(b[0] - a[0] for a, b in zip(recs, recs[1:]))
        ch = poller.changes[o]
        disk_gaps.extend(b - a for a, b in zip(ch, ch[1:]))
    hist_p99 = None
    if d.label == "lockd":
        hist_p99 = lockd_hist_p99(d, lockd_bin, "lockd_lockspace_renewal_duration_seconds")
    d.finish()
    io = 1
    return {
        "spaces": nspaces, "join_s": join_s, "run_s": run_s, "cpu_pct": cpu, "rss_kib": rss,
        "threads": threads, "renewals": len(durations), "dur_p50": pct(durations, 50), "dur_p99": pct(durations, 99),
        "dur_max": max(durations) if durations else float("nan"),
        "disk_renewals": len(disk_gaps),
        "gap_p99": pct(disk_gaps, 99), "gap_max": max(disk_gaps) if disk_gaps else float("nan"),
        "late_max": (max(disk_gaps) - 2 * io) if disk_gaps else float("nan"),
        "late_n": sum(1 for g in disk_gaps if g - 2 * io > io + poller.period),
        "rec_gap_max": max(rec_gaps) if rec_gaps else float("nan"),
        "poll_round_max_ms": poller.max_round_s * 1000, "hist_p99": hist_p99,
    }


def lockd_hist_p99(d, lockd_bin, family):
    """p99 upper bucket bound (s) of a histogram summed over all series, from `lockd metrics`."""
    out = sh(lockd_bin, "metrics", "--run-dir", d.run_dir, check=False)
    buckets = {}
    for m in re.finditer(rf'^{family}_bucket\{{.*?le="([^"]+)"\}} (\d+)', out, re.M):
        le = float("inf") if m.group(1) == "+Inf" else float(m.group(1))
        buckets[le] = buckets.get(le, 0) + int(m.group(2))
    if not buckets:
        return None
    total = buckets[float("inf")]
    for le in sorted(buckets):
        if buckets[le] >= 0.99 * total:
            return le
    return None


# ----------------------------------------------- part 3: 2,000-host lockspace ----

class HostSimulator(threading.Thread):
    """Keeps hosts 2..last alive in one lockspace: every `period` s one O_DIRECT write of
    their sectors (1..last-1; host 1's sector is never touched) with a new timestamp."""

    def __init__(self, dev, space, offset, last=2000, period=1.0, io_timeout=1):
        super().__init__(daemon=True)
        self.dev, self.offset, self.last, self.period, self.io = dev, offset, last, period, io_timeout
        self.heads, self.regs = [], []
        for h in range(2, last + 1):
            head = leader_head(DELTA_MAGIC, DELTA_VERSION, 0, 1, h, 1, 0, space, f"sim-host-{h}")
            self.heads.append(head)
            self.regs.append(sanlock_crc(head))
        self.ts = int(time.monotonic())
        self.stop_ev = threading.Event()
        self.writes = 0
        self.max_write_s = 0.0
        self.error = None
        self.fd = os.open(dev, os.O_RDWR | os.O_DIRECT | os.O_SYNC)
        self.buf = mmap.mmap(-1, (last - 1) * SECTOR)
        self.write_once()  # hosts are on disk before anyone joins

    def write_once(self):
        self.ts += 1
        for i, (head, reg) in enumerate(zip(self.heads, self.regs)):
            rec = leader_record(head, self.ts, self.io, reg)
            self.buf[i * SECTOR:i * SECTOR + len(rec)] = rec
        t0 = time.monotonic()
        n = os.pwritev(self.fd, [self.buf], self.offset + SECTOR)
        self.max_write_s = max(self.max_write_s, time.monotonic() - t0)
        if n != len(self.buf):
            raise IOError("short write")
        self.writes += 1

    def run(self):
        try:
            while not self.stop_ev.wait(self.period):
                self.write_once()
        except Exception as e:
            self.error = e
        finally:
            self.buf.close()
            os.close(self.fd)


def part_hosts(d, disk, dev, base, nhosts, cycles, settle_s, lockd_bin):
    ls = f"hosts_{d.label}"
    res_off = base + MIB
    log(f"{d.label}: hosts: formatting a lockspace with {nhosts} hosts")
    format_lockspace(disk, ls, base, io_timeout=1)
    format_resource(disk, ls, "res0", res_off, zero_area=True)
    sim = HostSimulator(dev, ls, base, last=nhosts)
    sim.start()
    CLEANUP.push("host simulator", sim.stop_ev.set)
    try:
        time.sleep(1.5)
        d.start()
        lsb = ls.encode()
        out = d.client(f"""
t0 = time.monotonic()
sanlock.add_lockspace({lsb!r}, 1, {dev!r}, {base}, iotimeout=1)
print(time.monotonic() - t0)
""")
        join_s = float(out)
        # LIVE needs the record seen changing: wait a few renewals (2 s each).
        log(f"{d.label}: joined in {join_s:.2f} s; waiting {settle_s} s for host checks")
        c0, w0 = cpu_ticks(d.proc.pid), time.monotonic()
        time.sleep(settle_s)
        cpu = 100.0 * (cpu_ticks(d.proc.pid) - c0) / CLK_TCK / (time.monotonic() - w0)
        native = native_host_count(d, ls, dev, base, lockd_bin)
        out = d.client(f"""
ls, disks = {lsb!r}, [({dev!r}, {res_off})]
hosts = [(h["host_id"], h["flags"]) for h in sanlock.get_hosts(ls, 0)]
fd = sanlock.register()
lat, errors = [], []
for _ in range({cycles}):
    a = time.monotonic()
    try:
        sanlock.acquire(ls, b"res0", disks, slkfd=fd)
        sanlock.release(ls, b"res0", disks, slkfd=fd)
        lat.append(time.monotonic() - a)
    except sanlock.SanlockException as e:
        errors.append(str(e))
print(json.dumps({{"hosts": hosts, "lat": lat, "errors": errors}}))
""")
        r = json.loads(out)
        states = {}
        for _, flags in r["hosts"]:
            s = HOST_STATE.get(flags & 0xF, str(flags))
            states[s] = states.get(s, 0) + 1
        live_ids = {h for h, flags in r["hosts"] if flags & 0xF == 3}
        sim_live = len(live_ids & set(range(2, nhosts + 1)))
        lat, failures = r["lat"], len(r["errors"])
        for e in r["errors"][:3]:
            log(f"{d.label}: acquire/release failed: {e}")
        recs = [r for r in d.renewals(f"{ls}:1:{dev}:{base}") if r[0] >= int(w0)]
        durs = [ms for _, ms in recs]
        rss = rss_kib(d.proc.pid)
        d.client(f"sanlock.rem_lockspace({lsb!r}, 1, {dev!r}, {base})")
    finally:
        sim.stop_ev.set()
        sim.join()
    d.finish()
    if sim.error:
        raise RuntimeError(f"host simulator failed: {sim.error}")
    return {
        "hosts": nhosts, "join_s": join_s, "states": states, "sim_live": sim_live,
        "native": native, "renewals": len(durs),
        "ren_p50": pct(durs, 50), "ren_max": max(durs) if durs else float("nan"),
        "acq_ok": len(lat), "acq_fail": failures,
        "acq_p50_ms": pct(lat, 50) * 1000, "acq_max_ms": max(lat) * 1000 if lat else float("nan"),
        "cpu_pct": cpu, "rss_kib": rss, "sim_writes": sim.writes,
        "sim_write_max_ms": sim.max_write_s * 1000,
    }


def native_host_count(d, ls, dev, base, lockd_bin):
    """LIVE hosts other than us according to the daemon's own status tool."""
    if d.label == "lockd":
        out = sh(lockd_bin, "status", "--json", "--run-dir", d.run_dir, check=False)
        try:
            st = json.loads(out)
        except ValueError:
            return "status --json failed"
        for s in st.get("lockspaces", []):
            if s["name"] == ls:
                live = sum(1 for h in s["hosts"] if h["state"] == "LIVE" and not h.get("ours"))
                return f"`lockd status --json`: {live} LIVE"
        return "lockspace missing in status"
    out = sh("sanlock", "client", "host_status", "-s", ls, env=d.env, check=False)
    # host_status prints one "<host_id> timestamp <ts>" line per host with a timestamp
    ids = re.findall(r"^(\d+) timestamp (\d+)", out, re.M)
    return f"`sanlock client host_status`: {sum(1 for i, t in ids if i != '1' and t != '0')} with timestamp"


# -------------------------------------------------------------------- main ----

def fmt(v, spec=".2f"):
    if v is None:
        return "n/a"
    if isinstance(v, float):
        if v != v:
            return "n/a"
        return format(v, ".0f" if spec == "d" else spec)
    return str(v)


def table(title, head, rows):
    print(f"\n### {title}\n")
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join("---" if i == 0 else "---:" for i in range(len(head))) + "|")
    for r in rows:
        print("| " + " | ".join(r) + " |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="short smoke run (fewer clients, spaces, seconds)")
    ap.add_argument("--only", choices=["sanlock", "lockd"])
    ap.add_argument("--parts", default="clients,spaces,hosts", help="comma list of clients,spaces,hosts")
    ap.add_argument("--lockd", default=os.path.join(ROOT, "target", "release", "lockd"))
    ap.add_argument("--lockd-daemon", default=os.path.join(ROOT, "target", "release", "lockd-daemon")
                    + " -D -w 0 -e {host} --run-dir {run_dir}",
                    help="command line starting lockd ({run_dir}, {host} substituted)")
    ap.add_argument("--sanlock-daemon", default="sanlock daemon -D -w 0 -U root -G root -e {host}")
    ap.add_argument("--clients", type=int, default=None)
    ap.add_argument("--spaces", type=int, default=None)
    args = ap.parse_args()

    if os.geteuid() != 0:
        sys.exit("scale_bench: run as root (loop device, daemons)")
    if shutil.which("sanlock") is None:
        sys.exit("scale_bench: the sanlock binary is missing (apt-get install sanlock)")
    if subprocess.run([PY, "-c", "import sanlock"], capture_output=True).returncode != 0:
        sys.exit(f"scale_bench: python3-sanlock is missing for {PY} (apt-get install python3-sanlock)")
    labels = [l for l in ("sanlock", "lockd") if args.only in (None, l)]
    if "lockd" in labels:
        for b in (args.lockd, args.lockd_daemon.split()[0]):
            if not os.access(shutil.which(b) or b, os.X_OK):
                sys.exit(f"scale_bench: {b} missing; build with "
                         "CARGO_BUILD_JOBS=1 cargo build --release -p lockd-tools -p lockd-daemon")
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    nclients = args.clients or (100 if args.quick else 1000)
    nspaces = args.spaces or (10 if args.quick else 50)
    idle_s = 10 if args.quick else 30
    run_s = 16 if args.quick else 60
    nprocs = 10

    self_test()
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, 65536) if hard != resource.RLIM_INFINITY else 65536
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))  # daemons inherit it
    if resource.getrlimit(resource.RLIMIT_NOFILE)[0] < nclients + 64:
        sys.exit(f"scale_bench: RLIMIT_NOFILE too small for {nclients} clients")

    results = {l: {} for l in labels}
    try:
        workdir = tempfile.mkdtemp(prefix="scale-bench-", dir="/var/tmp")
        CLEANUP.push("work dir", lambda: shutil.rmtree(workdir, ignore_errors=True))
        compare_with_sanlock_direct(workdir)
        # Layout: [clients: 1 + nclients MiB] [spaces: nspaces MiB] [hosts: 2 MiB]
        clients_base = 0
        spaces_base = (1 + nclients) * MIB
        hosts_base = spaces_base + nspaces * MIB
        size = hosts_base + 2 * MIB
        img = os.path.join(workdir, "scale.img")
        with open(img, "wb") as f:
            f.truncate(size)
        dev = sh("losetup", "--direct-io=on", "-f", "--show", img).strip()
        CLEANUP.push(f"loop device {dev}", lambda: sh("losetup", "-d", dev, check=False))
        disk = Disk(dev)
        CLEANUP.push("device fd", disk.close)
        log(f"device {dev} ({size // MIB} MiB, direct-io on), work dir {workdir}")
        for label in labels:
            cmd = (args.sanlock_daemon if label == "sanlock" else args.lockd_daemon).split()
            for part in parts:
                d = Daemon(label, cmd, workdir, args.lockd)
                try:
                    if part == "clients":
                        results[label][part] = part_clients(d, disk, dev, clients_base, nclients, idle_s, nprocs)
                    elif part == "spaces":
                        results[label][part] = part_spaces(d, disk, dev, spaces_base, nspaces, run_s, args.lockd)
                    elif part == "hosts":
                        results[label][part] = part_hosts(d, disk, dev, hosts_base, 2000,
                                                          10 if args.quick else 50, 8 if args.quick else 12,
                                                          args.lockd)
                    else:
                        sys.exit(f"scale_bench: unknown part {part}")
                except KeyboardInterrupt:
                    raise
                except Exception as e:
                    log(f"{label}: {part} FAILED: {e}")
                    results[label][part] = {"error": str(e)}
                    try:
                        with open(d.log_path, "rb") as f:
                            tail = f.read()[-1500:].decode(errors="replace")
                        log(f"{label} daemon log tail:\n{tail}")
                    except OSError:
                        pass
                finally:
                    d.stop()
    except KeyboardInterrupt:
        log("interrupted; cleaning up")
        CLEANUP.run()
        sys.exit(130)
    finally:
        CLEANUP.run()

    report(results, labels, parts, args.quick)


def report(results, labels, parts, quick):
    print(f"\n## scale_bench {'(--quick) ' if quick else ''}{time.strftime('%Y-%m-%d %H:%M')} "
          f"{os.uname().nodename}, {os.cpu_count()} CPUs")

    def cell(label, part, f):
        r = results[label].get(part)
        if r is None:
            return "-"
        if "error" in r:
            return "FAILED"
        return f(r)

    head = ["metric"] + [("sanlock 3.8.5" if l == "sanlock" else "lockd") for l in labels] + ["target"]
    for l in labels:
        for p in parts:
            r = results[l].get(p, {})
            if "error" in r:
                print(f"\n**{l} / {p} failed:** {r['error']}")
    if "clients" in parts:
        rows = []

        def row(name, f, target=""):
            rows.append([name] + [cell(l, "clients", f) for l in labels] + [target])
        row("registered clients holding a lease", lambda r: str(r["clients"]))
        row("add_lockspace (s)", lambda r: fmt(r["add_s"]))
        row("acquire, each client (p50 / p99 ms)", lambda r: f"{fmt(r['acq_p50_ms'])} / {fmt(r['acq_p99_ms'])}")
        row("all acquires, wall (s)", lambda r: fmt(r["acquire_all_s"], ".1f"))
        row("RSS before joining (KiB, daemon + helper)", lambda r: str(r["rss_start_kib"]))
        row("RSS with all leases held (KiB)", lambda r: str(r["rss_kib"]), "lockd <= 65536")
        row("idle CPU, % of one core (over 30 s)" if not quick else "idle CPU, % of one core",
            lambda r: fmt(r["cpu_pct"], ".3f"), "lockd <= 0.1")
        row("memory locked (VmLck)", lambda r: f"{r['vmlck']} ({r['vmlck_kib']} KiB)")
        row("threads (daemon + helper)", lambda r: str(r["threads"]))
        table("1. registered clients, one lease each (1 lockspace, io_timeout 1)", head, rows)
    if "spaces" in parts:
        rows = []

        def row(name, f, target=""):
            rows.append([name] + [cell(l, "spaces", f) for l in labels] + [target])
        row("lockspaces joined", lambda r: str(r["spaces"]))
        row("join all (async adds, s)", lambda r: fmt(r["join_s"], ".1f"))
        row("renewals in RENEWAL records", lambda r: str(r["renewals"]))
        row("renewal duration p50 / p99 / max (ms)",
            lambda r: f"{fmt(r['dur_p50'], 'd')} / {fmt(r['dur_p99'], 'd')} / {fmt(r['dur_max'], 'd')}")
        row("lockd metrics histogram: p99 bucket (s)", lambda r: fmt(r["hist_p99"], "g"))
        row("renewals seen on disk (poll 0.2 s)", lambda r: str(r["disk_renewals"]))
        row("interval between renewals p99 / max (s)", lambda r: f"{fmt(r['gap_p99'])} / {fmt(r['gap_max'])}",
            "2 (due)")
        row("worst lateness vs due (s)", lambda r: fmt(r["late_max"]), "<= 1 (io_timeout)")
        row("renewals later than io_timeout (+poll)", lambda r: str(r["late_n"]), "0")
        row("max interval in RENEWAL timestamps (s, 1 s res.)", lambda r: fmt(r["rec_gap_max"], "d"))
        row("CPU during the run, % of one core", lambda r: fmt(r["cpu_pct"], ".2f"))
        row("RSS (KiB)", lambda r: str(r["rss_kib"]))
        row("threads (daemon + helper)", lambda r: str(r["threads"]))
        table("2. joined lockspaces renewing (io_timeout 1, loop device with direct-io)", head, rows)
    if "hosts" in parts:
        rows = []

        def row(name, f, target=""):
            rows.append([name] + [cell(l, "hosts", f) for l in labels] + [target])
        row("hosts in the lockspace (2..N simulated)", lambda r: str(r["hosts"]))
        row("join as host 1 (s)", lambda r: fmt(r["join_s"]))
        row("GET_HOSTS states", lambda r: ", ".join(f"{k} {v}" for k, v in sorted(r["states"].items())))
        row("simulated hosts LIVE (GET_HOSTS)", lambda r: str(r["sim_live"]), "1999")
        row("daemon's own status tool", lambda r: r["native"])
        row("renewal (read 1 MiB + write) p50 / max (ms)",
            lambda r: f"{fmt(r['ren_p50'], 'd')} / {fmt(r['ren_max'], 'd')} ({r['renewals']} renewals)")
        row("acquire+release p50 / max (ms)", lambda r: f"{fmt(r['acq_p50_ms'])} / {fmt(r['acq_max_ms'])}")
        row("acquire+release ok / failed", lambda r: f"{r['acq_ok']} / {r['acq_fail']}", "all ok")
        row("CPU while monitoring, % of one core", lambda r: fmt(r["cpu_pct"], ".2f"))
        row("RSS (KiB)", lambda r: str(r["rss_kib"]))
        table("3. a 2,000-host lockspace (hosts 2..2000 renewed by the driver every 1 s)", head, rows)


if __name__ == "__main__":
    main()
