#!/usr/bin/python3
"""Side-by-side benchmark of the lockd daemon and the real sanlock daemon.

Both daemons run on the same loop device (each on its own lockspace area so neither
disturbs the other) and are driven by the same client: Debian's python3-sanlock, i.e.
the real libsanlock. For each daemon it measures

  * idle RSS of the daemon process tree (daemon + helper child) after start-up,
  * add_lockspace wall time (fresh lockspace, io_timeout 1),
  * acquire+release latency (median, p99) and throughput with 1, 8 and 64 concurrent
    registered clients, each cycling on its own resource lease,

and prints one table. Run as root. Usage:

  bench/daemon_bench.py --lockd-daemon 'CMD …' [--cycles N] [--only sanlock|lockd]

The lockd command line gets `{run_dir}` and `{host}` substituted.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

MIB = 1 << 20
CLIENT_COUNTS = (1, 8, 64)
RESOURCES = 64


def sh(*args, **kw):
    return subprocess.run(args, check=True, capture_output=True, text=True, **kw).stdout


def rss_kib(pid):
    """RSS of pid and all its descendants, in KiB."""
    total = 0
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
            with open(f"/proc/{p}/task/{p}/children") as f:
                todo.extend(int(c) for c in f.read().split())
        except FileNotFoundError:
            pass
    return total


WORKER = r'''
import os, sys, time, json, sanlock
ls, res, path, offset, cycles = sys.argv[1].encode(), sys.argv[2].encode(), sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
fd = sanlock.register()
disks = [(path, offset)]
lat = []
sys.stdout.write("ready\n"); sys.stdout.flush()
sys.stdin.readline()
t0 = time.monotonic()
for _ in range(cycles):
    a = time.monotonic()
    sanlock.acquire(ls, res, disks, slkfd=fd)
    sanlock.release(ls, res, disks, slkfd=fd)
    lat.append(time.monotonic() - a)
print(json.dumps({"lat": lat, "wall": time.monotonic() - t0}))
'''


def run_clients(env, ls, path, base, n, cycles):
    procs = []
    for i in range(n):
        p = subprocess.Popen(
            ["/usr/bin/python3", "-c", WORKER, ls, f"r{i}", path, str(base + (1 + i) * MIB), str(cycles)],
            env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        procs.append(p)
    for p in procs:
        assert p.stdout.readline().strip() == "ready"
    t0 = time.monotonic()
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    lat = []
    for p in procs:
        out, _ = p.communicate(timeout=600)
        if p.returncode != 0:
            raise RuntimeError(f"client failed: {out}")
        lat.extend(json.loads(out)["lat"])
    wall = time.monotonic() - t0
    lat.sort()
    p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))]
    return statistics.median(lat) * 1000, p99 * 1000, len(lat) / wall


def bench_daemon(label, start_cmd, dev, base, cycles, lockd):
    run_dir = tempfile.mkdtemp(prefix=f"bench-{label}-", dir="/var/tmp")
    env = dict(os.environ, SANLOCK_RUN_DIR=run_dir, LOCKD_RUN_DIR=run_dir, SANLOCK_PRIVILEGED="0")
    ls = f"bench_{label}"
    sh(lockd, "direct", "init", "-s", f"{ls}:0:{dev}:{base}", "-o", "1", "--force")
    for i in range(RESOURCES):
        sh(lockd, "direct", "init", "-r", f"{ls}:r{i}:{dev}:{base + (1 + i) * MIB}", "--force")
    cmd = [a.replace("{run_dir}", run_dir).replace("{host}", f"bench-{label}") for a in start_cmd]
    daemon = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        sock = os.path.join(run_dir, "sanlock.sock")
        deadline = time.monotonic() + 20
        while not os.path.exists(sock):
            if time.monotonic() > deadline or daemon.poll() is not None:
                raise RuntimeError(f"{label}: daemon did not start: {cmd}")
            time.sleep(0.05)
        time.sleep(1.0)
        idle_rss = rss_kib(daemon.pid)
        t0 = time.monotonic()
        subprocess.run(["/usr/bin/python3", "-c",
                        f"import sanlock; sanlock.add_lockspace({ls.encode()!r}, 1, {dev!r}, {base}, iotimeout=1)"],
                       env=env, check=True)
        add_s = time.monotonic() - t0
        rows = {}
        for n in CLIENT_COUNTS:
            rows[n] = run_clients(env, ls, dev, base, n, cycles if n <= 8 else max(5, cycles // 8))
        subprocess.run(["/usr/bin/python3", "-c",
                        f"import sanlock; sanlock.rem_lockspace({ls.encode()!r}, 1, {dev!r}, {base})"],
                       env=env, check=True)
        return {"idle_rss_kib": idle_rss, "add_lockspace_s": add_s, "rows": rows}
    finally:
        daemon.terminate()
        try:
            daemon.wait(timeout=10)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lockd", default=os.path.join(os.path.dirname(__file__), "..", "target", "release", "lockd"))
    ap.add_argument("--lockd-daemon", default=None,
                    help="command line starting the lockd daemon ({run_dir}, {host} substituted)")
    ap.add_argument("--cycles", type=int, default=200, help="acquire+release cycles per client")
    ap.add_argument("--only", choices=["sanlock", "lockd"])
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("daemon_bench: run as root (loop device, daemons)")

    img = tempfile.NamedTemporaryFile(prefix="bench-", suffix=".img", dir="/var/tmp", delete=False)
    img.truncate(2 * (RESOURCES + 2) * MIB)
    img.close()
    dev = sh("losetup", "-f", "--show", img.name).strip()
    results = {}
    try:
        plan = []
        if args.only in (None, "sanlock"):
            plan.append(("sanlock", ["sanlock", "daemon", "-D", "-w", "0", "-U", "root", "-G", "root", "-e", "{host}"], 0))
        if args.only in (None, "lockd"):
            if not args.lockd_daemon:
                sys.exit("daemon_bench: give --lockd-daemon 'COMMAND' to benchmark lockd")
            plan.append(("lockd", args.lockd_daemon.split(), (RESOURCES + 2) * MIB))
        for label, cmd, base in plan:
            results[label] = bench_daemon(label, cmd, dev, base, args.cycles, args.lockd)
    finally:
        subprocess.run(["losetup", "-d", dev])
        os.unlink(img.name)

    labels = list(results)
    print(f"{'metric':<38}" + "".join(f"{l:>14}" for l in labels))
    def row(name, f):
        print(f"{name:<38}" + "".join(f"{f(results[l]):>14}" for l in labels))
    row("idle RSS (KiB, daemon + helper)", lambda r: r["idle_rss_kib"])
    row("add_lockspace, fresh, io_timeout 1 (s)", lambda r: f"{r['add_lockspace_s']:.2f}")
    for n in CLIENT_COUNTS:
        row(f"{n:>2} clients: acquire+release median ms", lambda r, n=n: f"{r['rows'][n][0]:.2f}")
        row(f"{n:>2} clients: acquire+release p99 ms", lambda r, n=n: f"{r['rows'][n][1]:.2f}")
        row(f"{n:>2} clients: cycles/s", lambda r, n=n: f"{r['rows'][n][2]:.0f}")


if __name__ == "__main__":
    main()
