#!/usr/bin/python3
"""Scale benchmark (issue 14): the lockd daemon next to the real sanlock 3.8.5 daemon.

One invocation measures both daemons, one after the other, on sparse loop devices
(`losetup --direct-io=on`, backing files under /var/tmp), driven by Debian's python3-sanlock
(the real libsanlock) and by this script writing delta-lease sectors itself:

  1. clients  -- one lockspace (io_timeout 1) and N registered clients (default 1,000),
                 each holding its own resource lease (1 MiB area each). Then the RSS of
                 the daemon process tree (daemon + helper), its idle CPU over 30 s
                 (utime+stime from /proc, all threads and children), and whether the
                 daemon has memory locked (VmLck > 0, i.e. mlockall).
  2. spaces   -- the daemon joins 50 lockspaces (io_timeout 1, 1 MiB each, one device)
                 and runs ~60 s; `--spaces 10,50,100` runs once per count, the daemon
                 restarted for each. CPU is utime+stime over the 60 s, threads the
                 entries of /proc/PID/task of the daemon and its helper. Renewal
                 latency from the daemon's RENEWAL records
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
  4. renewal-io -- the block-layer I/O cost of staying alive (issue 42), for sanlock, lockd
                 with whole reads (the default, read_whole_lockspace = true) and lockd
                 with head reads (read_whole_lockspace = false, given in a `-c` file),
                 one daemon after the other. Each joins, as host_id 1 at io_timeout 1
                 (short runs), one lockspace per (geometry, live host count), each alone
                 on its own direct-io loop device: 512-byte sectors with a 1 MiB area,
                 and 4K sectors (`losetup --sector-size 4096`) with an 8 MiB area
                 (LFL_ALIGN_8M, like `sanlock direct init -Z 4096 -A 8M`); live hosts
                 4, 64 and 250 (`--io-hosts`): the daemon plus hosts this script keeps
                 alive by rewriting their delta leases every 2 s, at host_ids 2..N up
                 to 64 hosts, and above that all but 20 in sequence and 20 spread over
                 300..1200 (head reads follow the highest host_id ever used). After 3
                 renewals (lockd's first read after a join is whole in either mode) the
                 device's sectors read and written (/sys/block/loopN/stat fields 3 and
                 7) are sampled right after a renewal (seen in the RENEWAL records,
                 `sanlock client renewal -s`, which both daemons answer) and again
                 right after `--io-window` seconds' worth of renewals (60 s = 30
                 renewals; for head reads rounded up to whole read cycles, 16 renewals
                 on 1 MiB and 64 on 8 MiB, so the window holds its share of whole
                 reads). The simulated hosts' writes, counted by the script, are
                 subtracted; nothing else opens the devices meanwhile. Reports bytes
                 read per renewal with the ratio to sanlock and issue 42's goals (head
                 reads <= 1/8 of sanlock's on 1 MiB, <= 1/32 on 8 MiB 4K, judged where
                 the highest host_id is <= 64), and per host per minute the bytes read
                 and written, next to lockd's own read plan and its
                 lockd_lockspace_renewal_read_bytes_total counter. About 5 minutes.

Parts 1-3 run when no --parts is given; renewal-io only when named (it answers another
question, and takes 5 minutes).

Run as root (loop devices, daemons). Everything the script starts (daemons, client
processes, loop device, files) is removed on exit, also on Ctrl-C / SIGTERM.

  bench/scale_bench.py [--quick] [--only sanlock|lockd] [--parts clients,spaces,hosts,renewal-io]
                       [--spaces 10,50,100] [--io-hosts 4,64,250] [--io-window SECONDS]

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
LFL_ALIGN_1M, LFL_ALIGN_8M = 0x10, 0x80
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


def leader_head(magic, version, num_hosts, max_hosts, owner_id, gen, lver, space, res,
                sector=SECTOR, align_flag=LFL_ALIGN_1M):
    """Bytes 0..151 of a leader_record (default: 512-byte sectors, 1 MiB align)."""
    return struct.pack("<IIIIQQQQQ48s48s", magic, version, align_flag, sector, num_hosts,
                       max_hosts, owner_id, gen, lver, name48(space), name48(res))


def leader_record(head, timestamp, io_timeout, crc_reg=None):
    """Completes a leader_record (200 bytes) from its head; crc_reg = CRC register after
    the head, if precomputed."""
    tail = struct.pack("<QQ", timestamp, 0)
    reg = crc_update(sanlock_crc(head) if crc_reg is None else crc_reg, tail)
    return head + tail + struct.pack("<IHHQQQ", reg, 0, io_timeout & 0xFF, 0, 0, 0)


def delta_area(space, io_timeout=10, hosts=2000, sector=SECTOR, area_bytes=MIB, align_flag=LFL_ALIGN_1M):
    """A freshly formatted lockspace area (default 512/1M; 4096-byte sectors with an 8 MiB
    area and LFL_ALIGN_8M for 4K/8M), like `sanlock direct init -s [-Z 4096 -A 8M]`. The
    io_timeout in the free records matters: a joining host waits 2 * that value."""
    area = bytearray(area_bytes)
    rec = leader_record(leader_head(DELTA_MAGIC, DELTA_VERSION, 0, 1, 0, 0, 0, space, "", sector, align_flag),
                        0, io_timeout)
    for i in range(hosts):
        area[i * sector:i * sector + len(rec)] = rec
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
    # 4K sectors, 8 MiB align (part renewal-io)
    with open(f, "wb") as fh:
        fh.truncate(8 * MIB)
    sh("sanlock", "direct", "init", "-s", f"chk:0:{f}:0", "-Z", "4096", "-A", "8M")
    with open(f, "rb") as fh:
        data = fh.read()
    os.unlink(f)
    io = struct.unpack_from("<H", data, 174)[0]
    if data != bytes(delta_area("chk", io, sector=4096, area_bytes=8 * MIB, align_flag=LFL_ALIGN_8M)):
        raise SystemExit("scale_bench: 4K lockspace formatter differs from `sanlock direct init -s -Z 4096 -A 8M`")


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


def format_lockspace(disk, space, offset, io_timeout=1, sector=SECTOR, area_bytes=MIB, align_flag=LFL_ALIGN_1M):
    area = delta_area(space, io_timeout, sector=sector, area_bytes=area_bytes, align_flag=align_flag)
    # Two-step commit like sanlock: the whole area with record 0 invalid, then sector 0.
    first = bytes(area[:sector])
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


def thread_count(pid):
    """Threads of pid and its descendants: entries of /proc/PID/task."""
    n = 0
    for p in tree(pid):
        try:
            n += len(os.listdir(f"/proc/{p}/task"))
        except (FileNotFoundError, ProcessLookupError):
            pass
    return n


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
        threads = thread_count(d.proc.pid)
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
    threads = thread_count(d.proc.pid)
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
    """Keeps simulated hosts alive in one lockspace: every `period` s it rewrites their
    delta-lease sectors with a new timestamp, one O_DIRECT write per run of consecutive
    host_ids (hosts 2..last by default: one write of sectors 1..last-1; host 1's sector is
    never touched). `ids` picks other host_ids, `sector`/`align_flag` other geometries.
    `sectors_written` counts what it wrote in 512-byte units (as /sys/block/*/stat does),
    updated under `lock` together with the write, so a reader holding `lock` sees the
    counter and the device's statistics agree."""

    def __init__(self, dev, space, offset, last=2000, period=1.0, io_timeout=1, ids=None,
                 sector=SECTOR, align_flag=LFL_ALIGN_1M):
        super().__init__(daemon=True)
        self.dev, self.offset, self.period, self.io, self.sector = dev, offset, period, io_timeout, sector
        ids = sorted(ids) if ids is not None else list(range(2, last + 1))
        self.last = ids[-1]
        self.runs = []  # [first host_id, [(head, crc register)], buffer]
        for h in ids:
            head = leader_head(DELTA_MAGIC, DELTA_VERSION, 0, 1, h, 1, 0, space, f"sim-host-{h}",
                               sector, align_flag)
            if not self.runs or self.runs[-1][0] + len(self.runs[-1][1]) != h:
                self.runs.append([h, [], None])
            self.runs[-1][1].append((head, sanlock_crc(head)))
        for run in self.runs:
            run[2] = mmap.mmap(-1, len(run[1]) * sector)
        self.ts = int(time.monotonic())
        self.stop_ev = threading.Event()
        self.lock = threading.Lock()
        self.writes = 0
        self.sectors_written = 0
        self.max_write_s = 0.0
        self.error = None
        self.fd = os.open(dev, os.O_RDWR | os.O_DIRECT | os.O_SYNC)
        self.write_once()  # hosts are on disk before anyone joins

    def write_once(self):
        self.ts += 1
        for _, recs, buf in self.runs:
            for i, (head, reg) in enumerate(recs):
                rec = leader_record(head, self.ts, self.io, reg)
                buf[i * self.sector:i * self.sector + len(rec)] = rec
        t0 = time.monotonic()
        with self.lock:
            for first, _, buf in self.runs:
                n = os.pwritev(self.fd, [buf], self.offset + (first - 1) * self.sector)
                if n != len(buf):
                    raise IOError("short write")
                self.sectors_written += len(buf) // 512
        self.max_write_s = max(self.max_write_s, time.monotonic() - t0)
        self.writes += 1

    def run(self):
        try:
            while not self.stop_ev.wait(self.period):
                self.write_once()
        except Exception as e:
            self.error = e
        finally:
            for _, _, buf in self.runs:
                buf.close()
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


# --------------------------------------------------- part 4: renewal I/O ----

# The geometries of part renewal-io: sector bytes, area bytes, the leader's align flag,
# and lockd's cycle of whole reads with read_whole_lockspace = false (lease-core
# src/reads.rs `full_every`: a whole read every 16 renewals on a 1 MiB area, 64 on 8 MiB).
IO_GEOMETRIES = [
    {"key": "512", "name": "512 B sectors, 1 MiB area", "sector": 512, "area": MIB,
     "flag": LFL_ALIGN_1M, "full_every": 16},
    {"key": "4k", "name": "4K sectors, 8 MiB area", "sector": 4096, "area": 8 * MIB,
     "flag": LFL_ALIGN_8M, "full_every": 64},
]
MAX_HOSTS = 2000
HEAD_MARGIN_HOSTS, HEAD_ROUND_BYTES = 8, 16 * 1024  # lease-core src/reads.rs
# Issue 42: head reads read at most this share of sanlock's bytes per renewal, judged
# where the lockspace has at most IO_GOAL_HOSTS live hosts numbered from 1.
IO_GOALS = {"512": (8, "1/8"), "4k": (32, "1/32")}
IO_GOAL_HOSTS = 64
IO_VARIANTS = {
    "sanlock": "sanlock 3.8.5",
    "lockd-whole": "lockd whole",
    "lockd-head": "lockd head",
}
IO_LEGEND = ("lockd whole: the default, read_whole_lockspace = true (the whole area on every renewal, "
             "as sanlock); lockd head: read_whole_lockspace = false (experimental head reads)")


def sim_host_ids(nhosts):
    """host_ids of the simulated hosts of a lockspace with `nhosts` live hosts (the daemon
    is host_id 1): 2..nhosts when nhosts <= 64; above, all but 20 in sequence from 2 and
    20 spread evenly over 300..1200 (head reads cover the highest host_id ever used)."""
    if nhosts <= IO_GOAL_HOSTS:
        return list(range(2, nhosts + 1))
    spread = [300 + (i * 900) // 19 for i in range(20)]
    return list(range(2, nhosts - 20 + 1)) + spread


def head_plan_bytes(geom, highest):
    """Bytes lockd's head-read schedule reads per renewal, averaged over one cycle of
    `full_every` renewals (one whole read, the rest heads): lease-core `head_sectors`."""
    sector, area_sectors = geom["sector"], geom["area"] // geom["sector"]
    rnd = max(1, HEAD_ROUND_BYTES // sector)
    head = min(area_sectors, -(-(max(highest, 1) + HEAD_MARGIN_HOSTS) // rnd) * rnd)
    f = geom["full_every"]
    return ((f - 1) * head + area_sectors) * sector / f, head * sector


def blk_stat(dev):
    """(sectors read, sectors written) of a block device, 512-byte units (fields 3 and 7
    of /sys/block/DEV/stat)."""
    with open(f"/sys/block/{os.path.basename(dev)}/stat") as f:
        v = [int(x) for x in f.read().split()]
    return v[2], v[6]


def lockd_read_bytes(d, lockd_bin):
    """lockd_lockspace_renewal_read_bytes_total per lockspace, from `lockd metrics`."""
    out = sh(lockd_bin, "metrics", "--run-dir", d.run_dir, check=False)
    return {m.group(1): int(m.group(2)) for m in re.finditer(
        r'^lockd_lockspace_renewal_read_bytes_total\{lockspace="([^"]+)"\} (\d+)', out, re.M)}


class IoSpace:
    """One lockspace of part renewal-io, alone on its loop device, and its measurement."""

    def __init__(self, geom, nhosts, dev):
        self.geom, self.nhosts, self.dev = geom, nhosts, dev
        self.ids = sim_host_ids(nhosts)
        self.name = None
        self.sim = None
        self.last_ts = None
        self.count = 0
        self.start = self.end = None
        self.target = 0

    def lsstr(self):
        return f"{self.name}:1:{self.dev}:0"

    def sample(self, d, lockd_bin):
        """Device counters, our simulator's sectors and (lockd) the read-bytes metric, with
        the simulator held so its counter and the device's agree."""
        with self.sim.lock:
            rd, wr = blk_stat(self.dev)
            simw = self.sim.sectors_written
        metric = lockd_read_bytes(d, lockd_bin).get(self.name) if d.label.startswith("lockd") else None
        return {"t": time.monotonic(), "read": rd, "write": wr, "sim": simw, "metric": metric}


def run_io_variant(variant, cmd, workdir, lockd_bin, spaces, renewals, cycle_align, io):
    """One daemon joins every lockspace of `spaces` (one per loop device) as host_id 1 at
    io_timeout `io`, and the devices' counters are sampled right after one of its renewals
    and again right after `renewals` more (a whole number of read cycles for head reads
    with `cycle_align`)."""
    d = Daemon(variant, cmd, workdir, lockd_bin)
    sims = []
    try:
        for sp in spaces:
            g = sp.geom
            sp.name = f"rio_{variant.replace('-', '_')}_{g['key']}_{sp.nhosts}"
            sp.last_ts, sp.count, sp.start, sp.end = None, 0, None, None
            disk = Disk(sp.dev)
            try:
                format_lockspace(disk, sp.name, 0, io_timeout=io, sector=g["sector"],
                                 area_bytes=g["area"], align_flag=g["flag"])
            finally:
                disk.close()
            sp.sim = HostSimulator(sp.dev, sp.name, 0, period=2.0 * io, io_timeout=io, ids=sp.ids,
                                   sector=g["sector"], align_flag=g["flag"])
            sims.append(sp.sim)
            sp.sim.start()
            CLEANUP.push(f"host simulator {sp.name}", sp.sim.stop_ev.set)
        d.start()
        t0 = time.monotonic()
        d.client(f"""
spaces = {[(sp.name.encode(), sp.dev) for sp in spaces]!r}
for n, dev in spaces:
    sanlock.add_lockspace(n, 1, dev, 0, iotimeout={io}, wait=False)
for n, dev in spaces:
    deadline = time.monotonic() + 120
    while not sanlock.inq_lockspace(n, 1, dev, 0, wait=True):
        if time.monotonic() > deadline:
            sys.exit('lockspace %s not joined' % n)
        time.sleep(0.2)
""")
        log(f"{variant}: renewal-io: {len(spaces)} lockspaces joined in {time.monotonic() - t0:.1f} s; "
            f"waiting for 3 renewals each, then measuring {renewals} renewals each")
        # Settle: 3 renewals recorded (lockd's first renewal after the join reads the whole
        # area whatever the mode; it is behind us then).
        deadline = time.monotonic() + 20 * 2 * io + 30
        while any(len(d.renewals(sp.lsstr())) < 3 for sp in spaces):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{variant}: lockspaces did not renew 3 times")
            time.sleep(0.5)
        # Measure. A sample is taken when a new RENEWAL record shows up (polled every
        # 0.25 s, from the daemon, not the device) and is valid when it ends before the
        # next renewal can start: the next one starts no sooner than 2*io after the
        # recorded timestamp (whole seconds, the renewal's CLOCK_MONOTONIC time).
        late = 0
        for sp in spaces:
            step = sp.geom["full_every"] if cycle_align else 1
            sp.target = -(-renewals // step) * step
        deadline = time.monotonic() + max(sp.target for sp in spaces) * 3 * io + 300
        todo = list(spaces)
        while todo:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{variant}: measurement did not finish: "
                                   + ", ".join(f"{sp.name} {sp.count}/{sp.target}" for sp in todo))
            for sp in list(todo):
                recs = d.renewals(sp.lsstr())
                if not recs:
                    continue
                ts = recs[-1][0]
                if sp.last_ts is None:
                    sp.last_ts = ts  # wait for the next renewal
                    continue
                if ts == sp.last_ts:
                    continue
                new = sum(1 for r in recs if r[0] > sp.last_ts)
                sp.last_ts = ts
                step = sp.geom["full_every"] if cycle_align else 1
                if sp.start is not None:
                    sp.count += new
                    if sp.count < sp.target:
                        continue
                    if sp.count % step:  # a record missed between polls: next boundary
                        sp.target = -(-sp.count // step) * step
                        continue
                s = sp.sample(d, lockd_bin)
                if time.monotonic() >= ts + 2 * io - 0.1:
                    late += 1  # may overlap the next renewal: take it at a later one
                    if sp.start is not None:
                        sp.target = sp.count + step
                    continue
                if sp.start is None:
                    sp.start = s
                else:
                    sp.end = s
                    todo.remove(sp)
            time.sleep(0.25)
        # After the window: are the simulated hosts LIVE for the daemon?
        out = d.client(f"""
res = {{}}
for n in {[sp.name.encode() for sp in spaces]!r}:
    res[n.decode()] = [h["host_id"] for h in sanlock.get_hosts(n, 0) if h["flags"] & 0xF == 3]
print(json.dumps(res))
""")
        live = json.loads(out)
        d.client("\n".join(f"sanlock.rem_lockspace({sp.name.encode()!r}, 1, {sp.dev!r}, 0)" for sp in spaces))
    finally:
        for sim in sims:
            sim.stop_ev.set()
        for sim in sims:
            sim.join()
        if d.proc is not None:
            d.finish()
    for sim in sims:
        if sim.error:
            raise RuntimeError(f"host simulator failed: {sim.error}")
    rows = []
    for sp in spaces:
        a, b = sp.start, sp.end
        secs = b["t"] - a["t"]
        rd = (b["read"] - a["read"]) * 512
        simw = (b["sim"] - a["sim"]) * 512
        wr = (b["write"] - a["write"]) * 512 - simw
        metric = None
        if a["metric"] is not None and b["metric"] is not None:
            metric = (b["metric"] - a["metric"]) / sp.count
        sim_live = len(set(live.get(sp.name, [])) & set(sp.ids))
        rows.append({
            "variant": variant, "geom": sp.geom["key"], "hosts": sp.nhosts, "highest": max([1] + sp.ids),
            "renewals": sp.count, "seconds": secs, "read_bytes": rd, "written_bytes": wr,
            "sim_written_bytes": simw, "read_per_renewal": rd / sp.count,
            "written_per_renewal": wr / sp.count, "read_per_min": rd * 60 / secs,
            "written_per_min": wr * 60 / secs, "metric_read_per_renewal": metric,
            "sim_live": sim_live, "sims": len(sp.ids),
        })
    if late:
        log(f"{variant}: {late} samples came too close to the next renewal and were retaken")
    return rows


def part_renewal_io(variants, workdir, lockd_bin, host_counts, window_s, quick, io=1):
    """Bytes read and written by one daemon's renewals: every variant in turn joins one
    lockspace per (geometry, host count), each alone on a loop device with direct I/O."""
    spaces, detach = [], []
    for g in IO_GEOMETRIES:
        for n in host_counts:
            img = os.path.join(workdir, f"renewal-io-{g['key']}-{n}.img")
            with open(img, "wb") as f:
                f.truncate(2 * g["area"])
            args = ["losetup", "--direct-io=on", "-f", "--show"]
            if g["sector"] != 512:
                args += ["--sector-size", str(g["sector"])]
            dev = sh(*args, img).strip()
            idx = CLEANUP.push(f"loop device {dev}", lambda dev=dev: sh("losetup", "-d", dev, check=False))
            detach.append(idx)
            with open(f"/sys/block/{os.path.basename(dev)}/queue/logical_block_size") as f:
                lbs = int(f.read())
            with open(f"/sys/block/{os.path.basename(dev)}/loop/dio") as f:
                dio = f.read().strip()
            if lbs != g["sector"] or dio != "1":
                raise RuntimeError(f"{dev}: logical block size {lbs}, dio {dio}; wanted {g['sector']}, 1")
            spaces.append(IoSpace(g, n, dev))
    log("renewal-io: devices " + ", ".join(f"{sp.dev} ({sp.geom['key']}, {sp.nhosts} hosts)" for sp in spaces))
    renewals = max(1, -(-int(window_s) // (2 * io)))
    out = {"rows": [], "errors": {}, "window_s": window_s, "renewals": renewals,
           "cycle_aligned": not quick, "io_timeout": io}
    t0 = time.monotonic()
    for variant, cmd in variants:
        # Head reads: a whole number of read cycles (16 or 64 renewals), so the window
        # holds as many whole reads as the mode's average does. --quick skips that.
        try:
            out["rows"] += run_io_variant(variant, cmd, workdir, lockd_bin, spaces, renewals,
                                          variant == "lockd-head" and not quick, io)
        except KeyboardInterrupt:
            raise
        except Exception as e:
            log(f"{variant}: renewal-io FAILED: {e}")
            out["errors"][variant] = str(e)
            try:
                with open(os.path.join(workdir, f"{variant}-daemon.log"), "rb") as f:
                    log(f"{variant} daemon log tail:\n{f.read()[-1500:].decode(errors='replace')}")
            except OSError:
                pass
    out["elapsed_s"] = time.monotonic() - t0
    for idx in detach:
        CLEANUP.run_one(idx)  # detach now, and never again at exit
    return out


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
    ap.add_argument("--parts", default="clients,spaces,hosts",
                    help="comma list of clients,spaces,hosts,renewal-io (default: the first three)")
    ap.add_argument("--lockd", default=os.path.join(ROOT, "target", "release", "lockd"))
    ap.add_argument("--lockd-daemon", default=os.path.join(ROOT, "target", "release", "lockd-daemon")
                    + " -D -w 0 -e {host} --run-dir {run_dir}",
                    help="command line starting lockd ({run_dir}, {host} substituted)")
    ap.add_argument("--sanlock-daemon", default="sanlock daemon -D -w 0 -U root -G root -e {host}")
    ap.add_argument("--clients", type=int, default=None)
    ap.add_argument("--spaces", default=None,
                    help="part spaces: comma list of lockspace counts, one run each (default 50; --quick 10)")
    ap.add_argument("--io-hosts", default="4,64,250",
                    help="part renewal-io: comma list of live host counts per lockspace (daemon included)")
    ap.add_argument("--io-window", type=float, default=None,
                    help="part renewal-io: seconds of renewals measured (default 60; --quick 16)")
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
    for p in parts:
        if p not in ("clients", "spaces", "hosts", "renewal-io"):
            sys.exit(f"scale_bench: unknown part {p}")
    nclients = args.clients or (100 if args.quick else 1000)
    space_counts = [int(n) for n in args.spaces.split(",")] if args.spaces else [10 if args.quick else 50]
    nspaces = max(space_counts)
    io_hosts = [int(n) for n in args.io_hosts.split(",")]
    if any(n < 1 or n > MAX_HOSTS for n in io_hosts):
        sys.exit(f"scale_bench: --io-hosts counts must be 1..{MAX_HOSTS}")
    io_window = args.io_window or (16 if args.quick else 60)
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
    # One daemon run per task; part spaces runs once per lockspace count.
    tasks = []
    for part in parts:
        if part == "spaces":
            tasks += [("spaces", n) for n in space_counts]
        elif part != "renewal-io":
            tasks.append((part, None))
    try:
        workdir = tempfile.mkdtemp(prefix="scale-bench-", dir="/var/tmp")
        CLEANUP.push("work dir", lambda: shutil.rmtree(workdir, ignore_errors=True))
        compare_with_sanlock_direct(workdir)
        if tasks:
            dev, disk = shared_device(workdir, nclients, nspaces)
        else:
            dev = disk = None
        for label in labels:
            cmd = (args.sanlock_daemon if label == "sanlock" else args.lockd_daemon).split()
            for part, n in tasks:
                key = part if n is None else f"spaces:{n}"
                d = Daemon(label, cmd, workdir, args.lockd)
                try:
                    if part == "clients":
                        results[label][key] = part_clients(d, disk, dev, 0, nclients, idle_s, nprocs)
                    elif part == "spaces":
                        results[label][key] = part_spaces(d, disk, dev, (1 + nclients) * MIB, n, run_s,
                                                          args.lockd)
                    else:
                        results[label][key] = part_hosts(d, disk, dev, (1 + nclients + nspaces) * MIB, 2000,
                                                         10 if args.quick else 50, 8 if args.quick else 12,
                                                         args.lockd)
                except KeyboardInterrupt:
                    raise
                except Exception as e:
                    log(f"{label}: {key} FAILED: {e}")
                    results[label][key] = {"error": str(e)}
                    try:
                        with open(d.log_path, "rb") as f:
                            tail = f.read()[-1500:].decode(errors="replace")
                        log(f"{label} daemon log tail:\n{tail}")
                    except OSError:
                        pass
                finally:
                    d.stop()
        if "renewal-io" in parts:
            variants = []
            if "sanlock" in labels:
                variants.append(("sanlock", args.sanlock_daemon.split()))
            if "lockd" in labels:
                for variant, whole in (("lockd-whole", "true"), ("lockd-head", "false")):
                    conf = os.path.join(workdir, f"{variant}.toml")
                    with open(conf, "w") as f:
                        f.write(f"read_whole_lockspace = {whole}\n")
                    variants.append((variant, args.lockd_daemon.split() + ["-c", conf]))
            results["renewal-io"] = part_renewal_io(variants, workdir, args.lockd, io_hosts, io_window,
                                                    args.quick)
    except KeyboardInterrupt:
        log("interrupted; cleaning up")
        CLEANUP.run()
        sys.exit(130)
    finally:
        CLEANUP.run()

    report(results, labels, parts, args.quick, space_counts)


def shared_device(workdir, nclients, nspaces):
    """The loop device of parts clients, spaces and hosts.
    Layout: [clients: 1 + nclients MiB] [spaces: nspaces MiB] [hosts: 2 MiB]"""
    size = (1 + nclients + nspaces + 2) * MIB
    img = os.path.join(workdir, "scale.img")
    with open(img, "wb") as f:
        f.truncate(size)
    dev = sh("losetup", "--direct-io=on", "-f", "--show", img).strip()
    CLEANUP.push(f"loop device {dev}", lambda: sh("losetup", "-d", dev, check=False))
    disk = Disk(dev)
    CLEANUP.push("device fd", disk.close)
    log(f"device {dev} ({size // MIB} MiB, direct-io on), work dir {workdir}")
    return dev, disk


def report(results, labels, parts, quick, space_counts):
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
        for p, r in results[l].items():
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
        cols = [(l, f"spaces:{n}") for n in space_counts for l in labels]

        def row(name, f, target=""):
            rows.append([name] + [cell(l, key, f) for l, key in cols] + [target])
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
        row("threads (daemon + helper, /proc/PID/task)", lambda r: str(r["threads"]))
        shead = ["metric"] + [f"{'sanlock 3.8.5' if l == 'sanlock' else 'lockd'}, {k.split(':')[1]}"
                              for l, k in cols] + ["target"]
        table("2. joined lockspaces renewing (io_timeout 1, loop device with direct-io)", shead, rows)
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
    if "renewal-io" in parts and "renewal-io" in results:
        report_renewal_io(results["renewal-io"])


def kib(b):
    return f"{b / 1024:,.1f}"


def report_renewal_io(r):
    for variant, err in r["errors"].items():
        print(f"\n**renewal-io / {variant} failed:** {err}")
    if not r["rows"]:
        return
    by = {(x["variant"], x["geom"], x["hosts"]): x for x in r["rows"]}
    geoms = {g["key"]: g for g in IO_GEOMETRIES}
    configs = sorted({(x["geom"], x["hosts"]) for x in r["rows"]},
                     key=lambda c: ([g["key"] for g in IO_GEOMETRIES].index(c[0]), c[1]))
    variants = [v for v in IO_VARIANTS if any(k[0] == v for k in by)]
    io = r["io_timeout"]
    note = (f"io_timeout {io}; per lockspace, one host (the daemon, host_id 1); window >= {r['window_s']:g} s "
            f"= {r['renewals']} renewals")
    if r["cycle_aligned"]:
        note += ", head reads over whole read cycles (16 renewals on 1 MiB, 64 on 8 MiB)"
    else:
        note += " (--quick: head reads NOT over whole read cycles)"

    # Summary: bytes read per renewal, the ratios to sanlock and issue 42's goals.
    head = ["lockspace", "live hosts (highest host_id)"] + [f"{IO_VARIANTS[v]} (KiB)" for v in variants]
    has_sl = "sanlock" in variants
    if has_sl:
        head += [f"{IO_VARIANTS[v]} / sanlock" for v in variants if v != "sanlock"]
        head += ["goal: head / sanlock"]
    out = []
    for g, n in configs:
        any_row = next(by[(v, g, n)] for v in variants if (v, g, n) in by)
        line = [geoms[g]["name"], f"{n} ({any_row['highest']})"]
        line += [kib(by[(v, g, n)]["read_per_renewal"]) if (v, g, n) in by else "-" for v in variants]
        if has_sl:
            base = by.get(("sanlock", g, n))
            ratios = {}
            for v in variants:
                if v == "sanlock":
                    continue
                x = by.get((v, g, n))
                if base and x and base["read_per_renewal"] > 0:
                    ratios[v] = x["read_per_renewal"] / base["read_per_renewal"]
                    rt = ratios[v]
                    line.append(f"{rt:.3f} (1/{1 / rt:.1f})" if 0 < rt < 0.95 else f"{rt:.3f}")
                else:
                    line.append("-")
            div, text = IO_GOALS[g]
            if any_row["highest"] > IO_GOAL_HOSTS:
                line.append(f"<= {text}: not judged (highest host_id {any_row['highest']} > {IO_GOAL_HOSTS})")
            elif "lockd-head" in ratios:
                ok = ratios["lockd-head"] <= 1.0 / div
                line.append(f"<= {text} ({1.0 / div:.3f}): {'HOLDS' if ok else 'MISSED'}")
            else:
                line.append(f"<= {text}: not measured")
        out.append(line)
    table(f"4. renewal I/O: bytes read per renewal, one lockspace ({note})", head, out)
    print(f"\n{IO_LEGEND}. Goals (issue 42) judged where the highest host_id is at most {IO_GOAL_HOSTS}.")
    limits = []
    for g in IO_GEOMETRIES:
        div = IO_GOALS[g["key"]][0]
        ok = [h for h in range(1, MAX_HOSTS + 1) if head_plan_bytes(g, h)[0] * div <= g["area"]]
        limits.append(f"{ok[-1] if ok else 'none'} on {g['name']} (<= {IO_GOALS[g['key']][1]})")
    print("By lockd's read plan (column 'lockd's plan' below), head reads meet the goal up to a highest "
          "host_id of " + " and ".join(limits) + ", against sanlock reading the whole area on every renewal.")

    # Detail: per host per minute, written, and the checks.
    head = ["lockspace", "live hosts", "daemon", "renewals / seconds", "read per renewal (KiB)",
            "read per minute (MiB)", "written per minute (KiB)", "written per renewal (B)",
            "lockd's plan / metric per renewal (KiB)", "simulated hosts LIVE"]
    out = []
    for g, n in configs:
        for v in variants:
            x = by.get((v, g, n))
            if not x:
                continue
            geom = geoms[g]
            if v == "lockd-head":
                plan = kib(head_plan_bytes(geom, x["highest"])[0])
            elif v == "lockd-whole":
                plan = kib(geom["area"])
            else:
                plan = "-"
            if x["metric_read_per_renewal"] is not None:
                plan += f" / {kib(x['metric_read_per_renewal'])}"
            out.append([geom["name"], str(n), IO_VARIANTS[v], f"{x['renewals']} / {x['seconds']:.1f}",
                        kib(x["read_per_renewal"]), f"{x['read_per_min'] / MIB:,.2f}",
                        kib(x["written_per_min"]), f"{x['written_per_renewal']:,.0f}", plan,
                        f"{x['sim_live']} / {x['sims']}"])
    table("5. renewal I/O per host per minute, one lockspace (block layer: /sys/block/loopN/stat; "
          "the simulated hosts' writes subtracted)", head, out)
    print(f"\nrenewal-io took {r['elapsed_s'] / 60:.1f} min")


if __name__ == "__main__":
    main()
