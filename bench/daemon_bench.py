#!/usr/bin/python3
"""Side-by-side benchmark of the lockd daemon and the real sanlock daemon (issue 14).

One invocation measures both daemons, sanlock 3.8.5 and lockd, driven by the same client:
Debian's python3-sanlock, i.e. the real libsanlock. Every daemon runs with the watchdog
off (`-w 0`) and every lockspace is added with io_timeout 1. Resources are 1 MiB lease
areas on 512-byte sectors (the default geometry).

Main table (per variant, per daemon, per client count 1, 8 and 64)
    Every client registers once and cycles acquire+release on its own resource (distinct
    resources, so the numbers measure the daemon and the disk Paxos path, not
    contention). Printed: cycles/s, acquire p50/p99 (the acquire call alone, timed apart
    from the release), cycle p50/p99 (acquire+release), and lockd/sanlock of cycles/s,
    with the issue-14 targets and whether each holds:
        cycles/s ratio >= 5x at 64 clients, >= 3x at 1 client,
        lockd p99 at 64 clients <= sanlock's (checked for acquire p99 and cycle p99),
        lockd acquire p50 with 1 client <= 1.5 ms.
    Variants (--variants, default both):
        direct  the loop device is attached with `losetup --direct-io=on`, so every lease
                read reaches the storage under the loop device instead of the page cache;
                the targets are defined for this variant;
        cached  the loop device is attached without direct I/O (reads of the loop device
                are served from the backing file's page cache).
    --runs N repeats the main table N times (daemons restarted, areas re-initialised)
    and prints the spread (min/median/max) of the lockd/sanlock ratio.
    Also printed per daemon: idle RSS of the daemon process tree and add_lockspace time.

Hand-off table (direct-io loop device)
    Two daemons (host_id 1 and host_id 2, separate run dirs, distinct host names) join one
    lockspace and share one resource; a client of each alternates holding it. The
    hand-off latency is the time from the holder's release() returning to the other
    host's acquire() succeeding (both timestamps are CLOCK_MONOTONIC in the two client
    processes on this machine). How the other side waits: it is told to start acquiring
    about 30 ms before the holder releases and calls acquire() in a tight loop, retrying
    at once (no sleep) whenever acquire fails with -EAGAIN (-11), -EBUSY (-16) or one of
    sanlock's "held by another host" codes (-243 IDLIVE, -244 OWNED, -245 OTHER, -247
    OWNED_RETRY); any other error aborts. Pairs: (sanlock, sanlock), (lockd, lockd) and
    (lockd, sanlock), the last a mixed lockspace with lockd as host 1 and a real sanlock
    as host 2. Before measuring, each side waits until get_hosts shows the other host
    live, and the first rounds are discarded as warm-up.

Run as root (loop devices, daemons). Everything started (daemons, clients, loop devices,
files under /var/tmp) is removed again, also on Ctrl-C/SIGTERM. Usage:

  bench/daemon_bench.py [--quick] [--runs N] [--cycles N] [--variants direct,cached]
                        [--pairs sanlock:sanlock,lockd:lockd,lockd:sanlock] [--handoffs N]
                        [--lockd-daemon 'CMD ...'] [--json FILE]

The lockd command line gets `{run_dir}` and `{host}` substituted; the default is
`<repo>/target/release/lockd-daemon -D -w 0 -e {host} --run-dir {run_dir}`.
"""

import argparse
import json
import os
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

MIB = 1 << 20
CLIENT_COUNTS = (1, 8, 64)
RESOURCES = max(CLIENT_COUNTS)
AREA = (RESOURCES + 1) * MIB          # lockspace + one resource per client
HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
SANLOCK_CMD = ["sanlock", "daemon", "-D", "-w", "0", "-U", "root", "-G", "root", "-e", "{host}"]
DEFAULT_LOCKD_CMD = (f"{REPO}/target/release/lockd-daemon -D -w 0 -e {{host}} "
                     f"--run-dir {{run_dir}}")
# acquire() errors on which the hand-off waiter retries (absolute values: python3-sanlock
# reports errno values positive and sanlock's own -2xx codes negative).
RETRY_ERRNOS = {11, 16, 243, 244, 245, 247}

TARGETS = [
    # (key, text)
    ("ratio64", "cycles/s lockd/sanlock at 64 clients >= 5x"),
    ("ratio1", "cycles/s lockd/sanlock at 1 client >= 3x"),
    ("p99acq64", "lockd acquire p99 at 64 clients <= sanlock's"),
    ("p99cyc64", "lockd cycle p99 at 64 clients <= sanlock's"),
    ("p50acq1", "lockd acquire p50 with 1 client <= 1.5 ms"),
]


class BenchError(Exception):
    pass


# --------------------------------------------------------------------------- cleanup

class Cleanup:
    """Everything this script started or created, undone in reverse order."""

    def __init__(self):
        self.procs = []      # Popen of clients and daemons
        self.daemons = []    # Daemon objects, stopped first
        self.loops = []
        self.paths = []

    def proc(self, p):
        self.procs.append(p)
        return p

    def stop_proc(self, p, grace=10.0):
        if p.poll() is None:
            kids = descendants(p.pid)
            try:
                p.terminate()
                p.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            # a daemon's helper child normally exits with its parent; make sure
            for k in kids:
                try:
                    os.kill(k, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        if p in self.procs:
            self.procs.remove(p)

    def run(self):
        for p in list(self.procs):      # clients first: a client's exit releases its leases
            if not any(d.proc is p for d in self.daemons):
                self.stop_proc(p, grace=2.0)
        for d in reversed(list(self.daemons)):
            try:
                d.stop()
            except Exception as e:  # keep cleaning
                print(f"daemon_bench: cleanup: {d.label}: {e}", file=sys.stderr)
        for p in reversed(list(self.procs)):
            try:
                self.stop_proc(p, grace=5.0)
            except Exception as e:  # keep cleaning
                print(f"daemon_bench: cleanup: pid {p.pid}: {e}", file=sys.stderr)
        for dev in reversed(self.loops):
            r = subprocess.run(["losetup", "-d", dev], capture_output=True, text=True)
            if r.returncode != 0:
                print(f"daemon_bench: cleanup: losetup -d {dev}: {r.stderr.strip()}", file=sys.stderr)
        self.loops.clear()
        for path in reversed(self.paths):
            if os.path.isdir(path):
                shutil.rmtree(path, ignore_errors=True)
            elif os.path.exists(path):
                os.unlink(path)
        self.paths.clear()


CLEANUP = Cleanup()


def on_signal(signum, _frame):
    raise KeyboardInterrupt(f"signal {signum}")


def descendants(pid):
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/task/{p}/children") as f:
                kids = [int(c) for c in f.read().split()]
        except (FileNotFoundError, ProcessLookupError):
            kids = []
        out.extend(kids)
        todo.extend(kids)
    return out


def rss_kib(pid):
    """RSS of pid and all its descendants, in KiB."""
    total = 0
    for p in [pid] + descendants(pid):
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
        except FileNotFoundError:
            pass
    return total


def sh(*args, **kw):
    r = subprocess.run(args, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        raise BenchError(f"{' '.join(args)} failed ({r.returncode}): {r.stderr.strip()}")
    return r.stdout


# --------------------------------------------------------------------------- storage

def make_loop(size, direct, tag):
    fd, img = tempfile.mkstemp(prefix=f"daemon-bench-{tag}-", suffix=".img", dir="/var/tmp")
    CLEANUP.paths.append(img)
    try:
        os.posix_fallocate(fd, 0, size)
    finally:
        os.close(fd)
    dev = sh("losetup", "-f", "--show", f"--direct-io={'on' if direct else 'off'}", img).strip()
    CLEANUP.loops.append(dev)
    name = os.path.basename(dev)
    with open(f"/sys/block/{name}/loop/dio") as f:
        dio = f.read().strip() == "1"
    if dio != direct:
        raise BenchError(f"{dev}: asked for direct-io={'on' if direct else 'off'}, "
                         f"/sys/block/{name}/loop/dio says {int(dio)} (backing file {img}; "
                         "does its filesystem support O_DIRECT at 512 bytes?)")
    with open(f"/sys/block/{name}/queue/logical_block_size") as f:
        if f.read().strip() != "512":
            raise BenchError(f"{dev}: logical block size is not 512")
    return dev


def init_area(lockd_tool, ls, dev, base, resources):
    sh(lockd_tool, "direct", "init", "-s", f"{ls}:0:{dev}:{base}", "-o", "1", "--force")
    for i in range(resources):
        sh(lockd_tool, "direct", "init", "-r", f"{ls}:r{i}:{dev}:{base + (1 + i) * MIB}", "--force")


# --------------------------------------------------------------------------- daemons

class Daemon:
    def __init__(self, label, cmd, host):
        self.label = label
        self.run_dir = tempfile.mkdtemp(prefix=f"daemon-bench-{label}-", dir="/var/tmp")
        CLEANUP.paths.append(self.run_dir)
        self.env = dict(os.environ, SANLOCK_RUN_DIR=self.run_dir, LOCKD_RUN_DIR=self.run_dir,
                        SANLOCK_PRIVILEGED="0")
        self.cmd = [a.replace("{run_dir}", self.run_dir).replace("{host}", host) for a in cmd]
        self.log = os.path.join(self.run_dir, "daemon.log")
        with open(self.log, "w") as log:
            # own session: a terminal's Ctrl-C reaches only this script, which then stops
            # the daemon by PID
            self.proc = CLEANUP.proc(subprocess.Popen(
                self.cmd, env=self.env, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                start_new_session=True))
            CLEANUP.daemons.append(self)
        sock = os.path.join(self.run_dir, "sanlock.sock")
        deadline = time.monotonic() + 20
        while not os.path.exists(sock):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise BenchError(f"{label}: daemon did not start: {' '.join(self.cmd)}\n{self.log_tail()}")
            time.sleep(0.05)

    def log_tail(self, n=15):
        try:
            with open(self.log) as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""

    def py(self, code, timeout=60):
        r = subprocess.run([PYTHON, "-c", "import sanlock\n" + code], env=self.env,
                           capture_output=True, text=True, timeout=timeout)
        if r.returncode != 0:
            raise BenchError(f"{self.label}: client call failed: {code}\n{r.stderr.strip()}\n"
                             f"daemon log:\n{self.log_tail()}")
        return r.stdout

    def add_lockspace(self, ls, host_id, dev, base):
        t0 = time.monotonic()
        self.py(f"sanlock.add_lockspace({ls.encode()!r}, {host_id}, {dev!r}, {base}, iotimeout=1)")
        return time.monotonic() - t0

    def rem_lockspace(self, ls, host_id, dev, base):
        try:
            self.py(f"sanlock.rem_lockspace({ls.encode()!r}, {host_id}, {dev!r}, {base})", timeout=30)
        except (BenchError, subprocess.TimeoutExpired) as e:
            print(f"daemon_bench: warning: {e}", file=sys.stderr)

    def stop(self):
        """Both daemons ignore SIGTERM while a lockspace is joined, so first a forced
        shutdown (removes the lockspaces, releasing the delta leases), then SIGTERM, then
        SIGKILL (harmless with -w 0)."""
        if self in CLEANUP.daemons:
            CLEANUP.daemons.remove(self)
        if self.proc.poll() is None:
            try:
                subprocess.run(["sanlock", "client", "shutdown", "-f", "1"], env=self.env,
                               capture_output=True, timeout=10)
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        CLEANUP.stop_proc(self.proc, grace=3.0)


# --------------------------------------------------------------------------- main table

CYCLE_WORKER = r'''
import json, sys, time, sanlock
ls, res, path, offset, cycles = sys.argv[1].encode(), sys.argv[2].encode(), sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
fd = sanlock.register()
disks = [(path, offset)]
# one warm-up cycle (first touch of the lease area), not measured
sanlock.acquire(ls, res, disks, slkfd=fd)
sanlock.release(ls, res, disks, slkfd=fd)
acq, cyc = [], []
clock = time.perf_counter
sys.stdout.write("ready\n"); sys.stdout.flush()
sys.stdin.readline()
for _ in range(cycles):
    a = clock()
    sanlock.acquire(ls, res, disks, slkfd=fd)
    b = clock()
    sanlock.release(ls, res, disks, slkfd=fd)
    c = clock()
    acq.append(b - a)
    cyc.append(c - a)
# perf_counter is CLOCK_MONOTONIC, one clock for every process on the machine.
print(json.dumps({"acq": acq, "cyc": cyc, "end": clock()}))
'''


def pct(sorted_vals, q):
    """Nearest-rank percentile of an already sorted list."""
    if not sorted_vals:
        return float("nan")
    k = max(0, min(len(sorted_vals) - 1, int(round(q / 100.0 * len(sorted_vals) + 0.5)) - 1))
    return sorted_vals[k]


def run_clients(d, ls, dev, base, n, per_client):
    procs = []
    try:
        for i in range(n):
            procs.append(CLEANUP.proc(subprocess.Popen(
                [PYTHON, "-c", CYCLE_WORKER, ls, f"r{i}", dev, str(base + (1 + i) * MIB), str(per_client)],
                env=d.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                text=True, start_new_session=True)))
        for p in procs:
            line = p.stdout.readline().strip()
            if line != "ready":
                raise BenchError(f"{d.label}: client did not start: {p.stderr.read().strip()}\n"
                                 f"daemon log:\n{d.log_tail()}")
        st0 = disk_stat(dev)
        t0 = time.perf_counter()
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        acq, cyc, ends = [], [], []
        for p in procs:
            out, err = p.communicate(timeout=900)
            if p.returncode != 0:
                raise BenchError(f"{d.label}: client failed: {err.strip()}\ndaemon log:\n{d.log_tail()}")
            r = json.loads(out)
            acq.extend(r["acq"])
            cyc.extend(r["cyc"])
            ends.append(r["end"])
        # From "go" to the end of the last client's last cycle (stamped by the client):
        # the clients' JSON output and exit are not the daemon's time.
        wall = max(ends) - t0
        st1 = disk_stat(dev)
    finally:
        for p in procs:
            CLEANUP.stop_proc(p, grace=2.0)
    acq.sort()
    cyc.sort()
    return {"clients": n, "cycles": len(cyc), "wall_s": wall, "cycles_per_s": len(cyc) / wall,
            "acq_p50_ms": pct(acq, 50) * 1e3, "acq_p99_ms": pct(acq, 99) * 1e3,
            "cyc_p50_ms": pct(cyc, 50) * 1e3, "cyc_p99_ms": pct(cyc, 99) * 1e3,
            # block-layer I/O on the loop device per acquire+release cycle (includes the
            # lockspace renewal, one read and one write every 2 s)
            "reads_per_cycle": (st1[0] - st0[0]) / len(cyc),
            "writes_per_cycle": (st1[4] - st0[4]) / len(cyc),
            "read_kib_per_cycle": (st1[2] - st0[2]) / 2 / len(cyc),
            "write_kib_per_cycle": (st1[6] - st0[6]) / 2 / len(cyc)}


def disk_stat(dev):
    """/sys/block/<dev>/stat: read ios, merges, sectors, ticks, write ios, merges, sectors, ..."""
    with open(f"/sys/block/{os.path.basename(dev)}/stat") as f:
        return [int(x) for x in f.read().split()]


def bench_daemon(label, cmd, dev, base, args):
    ls = f"bench_{label}"
    init_area(args.lockd, ls, dev, base, RESOURCES)
    d = Daemon(label, cmd, f"bench-{label}")
    try:
        time.sleep(1.0)
        idle_rss = rss_kib(d.proc.pid)
        add_s = d.add_lockspace(ls, 1, dev, base)
        rows = {}
        for n in CLIENT_COUNTS:
            per_client = max(args.min_per_client, -(-args.cycles // n))
            rows[n] = run_clients(d, ls, dev, base, n, per_client)
            log(f"  {label:<7} {n:>2} clients: {rows[n]['cycles_per_s']:.0f} cycles/s")
        d.rem_lockspace(ls, 1, dev, base)
        return {"idle_rss_kib": idle_rss, "add_lockspace_s": add_s, "rows": rows}
    finally:
        d.stop()


def main_table_run(variant, daemons, args, run_no):
    """One main-table run; the daemons are measured one after the other, sanlock first in
    odd runs and lockd first in even runs (so load drift on a shared machine does not
    always hit the same daemon)."""
    dev = make_loop(len(daemons) * AREA + MIB, variant == "direct", variant)
    try:
        order = list(enumerate(daemons))
        if run_no % 2 == 0:
            order.reverse()
        res = {}
        for i, (label, cmd) in order:
            res[label] = bench_daemon(label, cmd, dev, i * AREA, args)
        return {label: res[label] for label, _ in daemons}
    finally:
        sh("losetup", "-d", dev)
        CLEANUP.loops.remove(dev)


def targets_of(res):
    """{key: (holds, shown value)} for one run, if both daemons were measured."""
    if "sanlock" not in res or "lockd" not in res:
        return {}
    s, l = res["sanlock"]["rows"], res["lockd"]["rows"]
    r64 = l[64]["cycles_per_s"] / s[64]["cycles_per_s"]
    r1 = l[1]["cycles_per_s"] / s[1]["cycles_per_s"]
    return {
        "ratio64": (r64 >= 5.0, f"{r64:.2f}x"),
        "ratio1": (r1 >= 3.0, f"{r1:.2f}x"),
        "p99acq64": (l[64]["acq_p99_ms"] <= s[64]["acq_p99_ms"],
                     f"{l[64]['acq_p99_ms']:.2f} vs {s[64]['acq_p99_ms']:.2f} ms"),
        "p99cyc64": (l[64]["cyc_p99_ms"] <= s[64]["cyc_p99_ms"],
                     f"{l[64]['cyc_p99_ms']:.2f} vs {s[64]['cyc_p99_ms']:.2f} ms"),
        "p50acq1": (l[1]["acq_p50_ms"] <= 1.5, f"{l[1]['acq_p50_ms']:.2f} ms"),
    }


def print_main_table(variant, run_no, runs, res):
    desc = ("loop device with --direct-io=on (reads reach the storage)" if variant == "direct"
            else "loop device without direct I/O (page-cached)")
    print()
    print(f"== Main table, {variant}: {desc}; io_timeout 1; run {run_no}/{runs} ==")
    hdr = (f"{'clients':>7}  {'daemon':<8}{'cycles/s':>9}{'acq p50':>9}{'acq p99':>9}"
           f"{'cyc p50':>9}{'cyc p99':>9}{'cycles':>8}  lockd/sanlock cycles/s")
    print(hdr)
    print("-" * len(hdr))
    for n in CLIENT_COUNTS:
        for label in res:
            r = res[label]["rows"][n]
            line = (f"{n:>7}  {label:<8}{r['cycles_per_s']:>9.0f}{r['acq_p50_ms']:>9.2f}"
                    f"{r['acq_p99_ms']:>9.2f}{r['cyc_p50_ms']:>9.2f}{r['cyc_p99_ms']:>9.2f}{r['cycles']:>8}")
            if label == "lockd" and "sanlock" in res:
                ratio = r["cycles_per_s"] / res["sanlock"]["rows"][n]["cycles_per_s"]
                goal = {64: " (target >= 5x)", 1: " (target >= 3x)"}.get(n, "")
                line += f"  {ratio:.2f}x{goal}"
            print(line)
    print("(latencies in ms; acq = acquire call alone, cyc = acquire+release)")
    print("I/O per cycle on the loop device (reads / writes, KiB read / KiB written):")
    for n in CLIENT_COUNTS:
        print(f"  {n:>2} clients: " + ";  ".join(
            f"{label} {r['reads_per_cycle']:.1f} / {r['writes_per_cycle']:.1f}, "
            f"{r['read_kib_per_cycle']:.1f} / {r['write_kib_per_cycle']:.1f} KiB"
            for label, r in ((l, res[l]["rows"][n]) for l in res)))
    for label in res:
        print(f"{label}: idle RSS {res[label]['idle_rss_kib']} KiB (daemon + helper), "
              f"add_lockspace {res[label]['add_lockspace_s']:.2f} s (fresh, io_timeout 1)")
    t = targets_of(res)
    if t:
        note = "" if variant == "direct" else " (the targets are defined for the direct variant)"
        print(f"targets{note}:")
        for key, text in TARGETS:
            holds, shown = t[key]
            print(f"  {text:<48} {shown:<22} {'HOLDS' if holds else 'MISSED'}")


def print_spread(variant, all_runs):
    if len(all_runs) < 2 or not {"sanlock", "lockd"} <= set(all_runs[0]):
        return
    print()
    print(f"== Spread over {len(all_runs)} runs, {variant} (min / median / max) ==")
    for n in CLIENT_COUNTS:
        ratios = sorted(r["lockd"]["rows"][n]["cycles_per_s"] / r["sanlock"]["rows"][n]["cycles_per_s"]
                        for r in all_runs)
        cps = {l: sorted(r[l]["rows"][n]["cycles_per_s"] for r in all_runs) for l in all_runs[0]}
        print(f"{n:>2} clients: lockd/sanlock cycles/s {ratios[0]:.2f}x / {statistics.median(ratios):.2f}x"
              f" / {ratios[-1]:.2f}x;  " + ",  ".join(
                  f"{l} {v[0]:.0f} / {statistics.median(v):.0f} / {v[-1]:.0f} cycles/s" for l, v in cps.items()))
    for key, text in TARGETS:
        held = sum(1 for r in all_runs if targets_of(r)[key][0])
        print(f"  {text:<48} held in {held} of {len(all_runs)} runs")


# --------------------------------------------------------------------------- hand-off

HANDOFF_WORKER = r'''
import sys, time, sanlock
ls, res, path, offset = sys.argv[1].encode(), sys.argv[2].encode(), sys.argv[3], int(sys.argv[4])
retry = {int(x) for x in sys.argv[5].split(",")}
fd = sanlock.register()
disks = [(path, offset)]
seen = {}
out = sys.stdout
out.write("ready\n"); out.flush()
for line in sys.stdin:
    cmd = line.strip()
    if cmd == "acquire":
        tries = 0
        while True:
            try:
                sanlock.acquire(ls, res, disks, slkfd=fd)
                break
            except sanlock.SanlockException as e:
                if abs(e.errno) not in retry:
                    raise
                seen[e.errno] = seen.get(e.errno, 0) + 1
                tries += 1
        out.write(f"acquired {time.monotonic_ns()} {tries}\n"); out.flush()
    elif cmd == "release":
        t0 = time.monotonic_ns()
        sanlock.release(ls, res, disks, slkfd=fd)
        out.write(f"released {time.monotonic_ns()} {t0}\n"); out.flush()
    elif cmd == "errors":
        out.write("errors " + ",".join(f"{k}:{v}" for k, v in sorted(seen.items())) + "\n"); out.flush()
    elif cmd == "quit":
        break
'''


class LineProc:
    """A worker process with a line protocol and read timeouts."""

    def __init__(self, label, argv, env):
        self.label = label
        self.p = CLEANUP.proc(subprocess.Popen(argv, env=env, stdin=subprocess.PIPE,
                                               stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                               bufsize=0, start_new_session=True))
        self.buf = b""

    def send(self, line):
        self.p.stdin.write(line.encode() + b"\n")

    def read(self, timeout):
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BenchError(f"{self.label}: no answer within {timeout} s")
            r, _, _ = select.select([self.p.stdout], [], [], left)
            if r:
                chunk = os.read(self.p.stdout.fileno(), 4096)
                if not chunk:
                    err = self.p.stderr.read().decode(errors="replace").strip()
                    raise BenchError(f"{self.label}: worker exited: {err}")
                self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return line.decode()


def wait_live(d, ls, other_id, timeout=20.0):
    """Wait until daemon d's lockspace shows host other_id as live (get_hosts)."""
    deadline = time.monotonic() + timeout
    code = (f"import sys\nhs = sanlock.get_hosts({ls.encode()!r}, {other_id})\n"
            f"sys.stdout.write(str(any(h['flags'] == sanlock.HOST_LIVE for h in hs)))")
    while time.monotonic() < deadline:
        try:
            if d.py(code, timeout=10).strip() == "True":
                return True
        except BenchError:
            pass
        time.sleep(0.5)
    return False


def handoff_pair(pair_no, a_label, b_label, cmds, dev, args):
    base = pair_no * 2 * MIB
    ls = f"handoff{pair_no}"
    init_area(args.lockd, ls, dev, base, 1)
    disk_off = base + MIB
    ds, workers = [], []
    try:
        for host_id, label in ((1, a_label), (2, b_label)):
            ds.append(Daemon(f"ho{pair_no}-{label}{host_id}", cmds[label], f"bench-ho{pair_no}-{label}-h{host_id}"))
        # join both at once (each add_lockspace takes ~2-3 s)
        joins = [subprocess.Popen([PYTHON, "-c", f"import sanlock; sanlock.add_lockspace("
                                   f"{ls.encode()!r}, {h}, {dev!r}, {base}, iotimeout=1)"],
                                  env=d.env, stderr=subprocess.PIPE, text=True)
                 for h, d in ((1, ds[0]), (2, ds[1]))]
        for j, d in zip(joins, ds):
            _, err = j.communicate(timeout=120)
            if j.returncode != 0:
                raise BenchError(f"{d.label}: add_lockspace failed: {err.strip()}\n{d.log_tail()}")
        live = [wait_live(ds[0], ls, 2), wait_live(ds[1], ls, 1)]
        for h, d in ((1, ds[0]), (2, ds[1])):
            workers.append(LineProc(f"{d.label} client", [PYTHON, "-c", HANDOFF_WORKER, ls, "r0", dev,
                                                          str(disk_off), ",".join(map(str, sorted(RETRY_ERRNOS)))],
                                    d.env))
        for w in workers:
            if w.read(30) != "ready":
                raise BenchError(f"{w.label}: bad start")
        workers[0].send("acquire")
        workers[0].read(60)
        holder, waiter = 0, 1
        samples = {(0, 1): [], (1, 0): []}
        tries = []
        slow = []        # (measured round, direction, ms, failed tries) of hand-offs > 200 ms
        for rnd in range(args.handoff_warmup + args.handoffs):
            workers[waiter].send("acquire")
            time.sleep(0.03)
            workers[holder].send("release")
            _, t_rel, t_rel_called = workers[holder].read(60).split()
            _, t_acq, n_tries = workers[waiter].read(60).split()
            if int(t_acq) < int(t_rel_called):
                raise BenchError(f"hand-off {a_label}/{b_label}: host {waiter + 1} acquired the lease "
                                 f"before host {holder + 1} called release (both held it)")
            # Negative values are possible and fine: the lease is free on disk once the
            # holder's daemon has written the release, and on a busy machine the other host
            # can finish its acquire before the holder's client has run again.
            dt = (int(t_acq) - int(t_rel)) / 1e6
            if rnd >= args.handoff_warmup:
                samples[(holder, waiter)].append(dt)
                if dt > 200:
                    slow.append((rnd - args.handoff_warmup, f"{holder + 1}->{waiter + 1}", round(dt, 1),
                                 int(n_tries)))
                tries.append(int(n_tries))
            holder, waiter = waiter, holder
        errors = []
        for w in workers:
            w.send("errors")
            errors.append(w.read(10).split(" ", 1)[1])
        workers[holder].send("release")
        workers[holder].read(60)
        for w in workers:
            w.send("quit")
        allv = sorted(samples[(0, 1)] + samples[(1, 0)])
        return {"pair": f"{a_label}/{b_label}", "live_seen": live, "n": len(allv),
                "p50_ms": pct(allv, 50), "p99_ms": pct(allv, 99), "max_ms": allv[-1],
                "p50_1to2_ms": pct(sorted(samples[(0, 1)]), 50),
                "p50_2to1_ms": pct(sorted(samples[(1, 0)]), 50),
                "failed_tries_median": statistics.median(tries),
                "negative": sum(1 for v in allv if v < 0),
                "slow": slow,
                "errors_seen": {f"host{i + 1}": e for i, e in enumerate(errors)}}
    finally:
        for w in workers:
            CLEANUP.stop_proc(w.p, grace=2.0)
        for d in ds:
            d.stop()


def print_handoff(results):
    print()
    print("== Contended lease hand-off: two daemons (host_id 1 and 2), one lockspace, one resource, "
          "direct-io loop device, io_timeout 1 ==")
    print("hand-off = holder's release() returned -> other host's acquire() succeeded; "
          "the other side retries acquire at once on -EAGAIN/-EBUSY/-243/-244/-245/-247")
    hdr = (f"{'host 1 / host 2':<18}{'n':>5}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}"
           f"{'p50 1->2':>10}{'p50 2->1':>10}{'failed tries':>14}  errors seen (host: errno:count)")
    print(hdr)
    print("-" * len(hdr))
    for r in results:
        errs = "; ".join(f"{h} {e or '-'}" for h, e in r["errors_seen"].items())
        print(f"{r['pair']:<18}{r['n']:>5}{r['p50_ms']:>9.2f}{r['p99_ms']:>9.2f}{r['max_ms']:>9.2f}"
              f"{r['p50_1to2_ms']:>10.2f}{r['p50_2to1_ms']:>10.2f}{r['failed_tries_median']:>14.0f}  {errs}")
        if r["negative"]:
            print(f"  note: {r['pair']}: {r['negative']} of {r['n']} hand-offs negative (the other host's acquire "
                  f"returned before the holder's release() call had returned)")
        if r["slow"]:
            print(f"  note: {r['pair']}: hand-offs over 200 ms (round, direction, ms, failed tries): "
                  + ", ".join(str(x) for x in r["slow"]))
        if not all(r["live_seen"]):
            print(f"  note: {r['pair']}: get_hosts did not show the other host live before measuring")
    print("(failed tries = median number of failed acquire calls per hand-off on the waiting side)")


# --------------------------------------------------------------------------- main

def log(msg):
    print(msg, file=sys.stderr, flush=True)


def check_prereqs(args):
    if os.geteuid() != 0:
        sys.exit("daemon_bench: run as root (loop devices, daemons)")
    missing = []
    if not shutil.which("sanlock"):
        missing.append("the sanlock daemon (`sanlock` not in PATH; install package sanlock)")
    r = subprocess.run([PYTHON, "-c", "import sanlock"], capture_output=True, text=True)
    if r.returncode != 0:
        missing.append(f"python3-sanlock ({PYTHON} cannot `import sanlock`: "
                       f"{(r.stderr.strip().splitlines() or ['?'])[-1]}; install package python3-sanlock)")
    if not shutil.which("losetup"):
        missing.append("losetup (util-linux)")
    if not os.access(args.lockd, os.X_OK):
        missing.append(f"the lockd tool at {args.lockd} (cargo build --release -p lockd-tools)")
    exe = args.lockd_daemon.split()[0]
    if not (os.access(exe, os.X_OK) or shutil.which(exe)):
        missing.append(f"the lockd daemon at {exe} (cargo build --release -p lockd-daemon)")
    if missing:
        sys.exit("daemon_bench: missing:\n  " + "\n  ".join(missing))


PYTHON = "/usr/bin/python3"


def main():
    global PYTHON
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lockd", default=os.path.join(REPO, "target", "release", "lockd"),
                    help="lockd tool, used for `lockd direct init` of the lease areas")
    ap.add_argument("--lockd-daemon", default=DEFAULT_LOCKD_CMD,
                    help="command line starting the lockd daemon ({run_dir}, {host} substituted; "
                         "default: %(default)s)")
    ap.add_argument("--python", default="/usr/bin/python3",
                    help="python with python3-sanlock, runs the clients (default: %(default)s)")
    ap.add_argument("--cycles", type=int, default=None,
                    help="acquire+release cycles per client count, split over the clients "
                         "(default 400, --quick 48)")
    ap.add_argument("--min-per-client", type=int, default=None,
                    help="at least this many cycles per client (default 25, --quick 2): with "
                         "fewer, 64 clients measure the ramp of their own start more than the "
                         "daemon's throughput")
    ap.add_argument("--runs", type=int, default=1, help="repeat the main table N times, print the spread")
    ap.add_argument("--variants", default="direct,cached",
                    help="main-table variants, comma separated: direct, cached (default both)")
    ap.add_argument("--pairs", default="sanlock:sanlock,lockd:lockd,lockd:sanlock",
                    help="hand-off pairs host1:host2, comma separated; '' skips the hand-off table")
    ap.add_argument("--handoffs", type=int, default=None, help="measured hand-offs per pair (default 200, --quick 10)")
    ap.add_argument("--handoff-warmup", type=int, default=4, help="hand-offs discarded first (default 4)")
    ap.add_argument("--only", choices=["sanlock", "lockd"], help="main table for one daemon only")
    ap.add_argument("--quick", action="store_true", help="few cycles, for a smoke test")
    ap.add_argument("--json", help="also write all results as JSON to this file")
    args = ap.parse_args()
    PYTHON = args.python
    args.cycles = args.cycles or (48 if args.quick else 400)
    args.min_per_client = args.min_per_client or (2 if args.quick else 25)
    args.handoffs = args.handoffs or (10 if args.quick else 200)
    variants = [v for v in args.variants.split(",") if v]
    for v in variants:
        if v not in ("direct", "cached"):
            sys.exit(f"daemon_bench: unknown variant {v!r} (direct, cached)")
    pairs = [tuple(p.split(":")) for p in args.pairs.split(",") if p]
    for p in pairs:
        if len(p) != 2 or not set(p) <= {"sanlock", "lockd"}:
            sys.exit(f"daemon_bench: bad pair {':'.join(p)!r} (e.g. lockd:sanlock)")
    check_prereqs(args)

    cmds = {"sanlock": SANLOCK_CMD, "lockd": args.lockd_daemon.split()}
    daemons = [(l, cmds[l]) for l in ("sanlock", "lockd") if args.only in (None, l)]
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, on_signal)
    out = {"date": time.strftime("%Y-%m-%d %H:%M"), "args": vars(args), "main": {}, "handoff": []}
    print(f"daemon_bench: {' '.join(sys.argv[1:]) or '(defaults)'}; cycles per client count {args.cycles} "
          f"(at least {args.min_per_client} per client); sanlock {sh('sanlock', 'version').strip()}; "
          f"lockd daemon: {args.lockd_daemon}")
    try:
        for v in variants:
            runs = []
            for k in range(args.runs):
                log(f"main table, {v}, run {k + 1}/{args.runs} ...")
                res = main_table_run(v, daemons, args, k + 1)
                runs.append(res)
                print_main_table(v, k + 1, args.runs, res)
                sys.stdout.flush()
            print_spread(v, runs)
            out["main"][v] = runs
        if pairs:
            dev = make_loop(len(pairs) * 2 * MIB, True, "handoff")
            for i, (a, b) in enumerate(pairs):
                log(f"hand-off {a}/{b} ...")
                out["handoff"].append(handoff_pair(i, a, b, cmds, dev, args))
            print_handoff(out["handoff"])
        if args.json:
            with open(args.json, "w") as f:
                json.dump(out, f, indent=1, default=str)
    except BenchError as e:
        sys.exit(f"daemon_bench: {e}")
    except KeyboardInterrupt as e:
        print(f"daemon_bench: interrupted ({e}), cleaning up", file=sys.stderr)
        sys.exit(130)
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        CLEANUP.run()


if __name__ == "__main__":
    main()
