#!/usr/bin/env python3
"""Where the time of one acquire+release goes, with one client (issue 14's 1-client target).

Starts a release-build lockd daemon on a loop device attached with --direct-io=on, joins a
lockspace (io_timeout 1), and has one python3-sanlock client cycle acquire+release on one
resource. The daemon's own Prometheus histograms (lockd_disk_io_duration_seconds, read
before and after the measured cycles) give the disk reads and writes per cycle and the
mean time of each; the script prints the client-side acquire and release times next to
the time the daemon spent waiting for the storage, and the rest (socket, python,
scheduling, lease-core). Renewals (one read and one write every 2 s) are in the I/O
counts too; their share is printed.

Each round then runs the same client against a real sanlock daemon (same device, same
lease), and replays lockd's I/O chain for one cycle (the ten reads and writes, same sizes,
same order) as plain synchronous O_DIRECT|O_SYNC calls with no daemon at all: the I/O
floor. sanlock's cycle divided by the floor is the best lockd/sanlock ratio any daemon
doing lockd's I/O could reach on this storage. Rounds alternate the three, since this
VM's storage speed drifts by tens of percent within minutes.

usage: bench/acquire_breakdown.py [--cycles N] [--rounds N] [--no-sanlock]
       (run as root, after
       CARGO_BUILD_JOBS=1 cargo build --release -p lockd-tools -p lockd-daemon)
"""

import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOCKD = os.path.join(ROOT, "target/release/lockd")
DAEMON = os.path.join(ROOT, "target/release/lockd-daemon")
PYTHON = "/usr/bin/python3"
MIB = 1 << 20

CLIENT = r"""
import sanlock, sys, time
ls, dev, n = sys.argv[1].encode(), sys.argv[2], int(sys.argv[3])
sanlock.add_lockspace(ls, 1, dev, 0, iotimeout=1)
fd = sanlock.register()
res = [(dev, MIB)]
def cycle():
    t0 = time.perf_counter(); sanlock.acquire(ls, b"r1", res, slkfd=fd)
    t1 = time.perf_counter(); sanlock.release(ls, b"r1", res, slkfd=fd)
    t2 = time.perf_counter(); return t1 - t0, t2 - t1
for _ in range(20): cycle()
print("warm", flush=True); sys.stdin.readline()
t = time.perf_counter(); times = [cycle() for _ in range(n)]; wall = time.perf_counter() - t
print("done", wall, " ".join(f"{a:.6f},{r:.6f}" for a, r in times), flush=True)
sys.stdin.readline()
sanlock.rem_lockspace(ls, 1, dev, 0)
""".replace("MIB", str(MIB))


def metrics(port):
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out = {}
    for op in ("read", "write"):
        for kind in ("sum", "count"):
            m = re.search(rf'^lockd_disk_io_duration_seconds_{kind}{{op="{op}"}} (\S+)$', text, re.M)
            if not m:
                sys.exit(f"no lockd_disk_io_duration_seconds_{kind} for {op} in /metrics")
            out[(op, kind)] = float(m.group(1))
    return out


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))]


FLOOR = r"""
import mmap, os, sys, time
# One lockd acquire+release, as plain synchronous O_DIRECT|O_SYNC preadv/pwritev calls from
# this process: no daemon, no socket, no threads. The confirmation reads the real lockspace
# (read only); the resource's I/O goes to a scratch area, written in full first so that
# its blocks are allocated like a real lease area's (a hole or unwritten extent reads
# without any I/O and would flatter the floor).
dev, ls, res, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
fd = os.open(dev, os.O_RDWR | os.O_DIRECT | os.O_SYNC)
def buf(size):
    b = mmap.mmap(-1, size)
    b.write(os.urandom(size))
    return b
ballot, sector, lockspace = buf(3 * 512), buf(512), buf(2000 * 512)
os.pwritev(fd, [buf(MIB)], res)
def r(b, off): os.preadv(fd, [b], off)
def w(off): os.pwritev(fd, [sector], off)
def cycle():
    t0 = time.perf_counter()
    r(ballot, res)             # step A: leader, request sector, dblock of host 1
    w(res + 2 * 512)           # phase 1: our dblock
    r(ballot, res)             # phase 1 read
    w(res + 2 * 512)           # phase 2: our dblock
    r(ballot, res)             # phase 2 read
    r(lockspace, ls)           # confirmation: the lockspace's 2000 delta sectors
    w(res)                     # commit: the leader
    t1 = time.perf_counter()
    r(sector, res)             # release: read the leader
    w(res)                     # write it free
    w(res + 2 * 512)           # our dblock's RELEASED flag
    return t1 - t0, time.perf_counter() - t1
for _ in range(20): cycle()
t = time.perf_counter(); times = [cycle() for _ in range(n)]; wall = time.perf_counter() - t
print("done", wall, " ".join(f"{a:.6f},{r:.6f}" for a, r in times), flush=True)
""".replace("MIB", str(MIB))


def start_daemon(kind, work, dev, port):
    """Starts lockd (with a metrics listener on `port`) or sanlock in a private run dir;
    returns (process, environment for its clients)."""
    run_dir = os.path.join(work, f"run-{kind}")
    os.makedirs(run_dir, exist_ok=True)
    env = dict(os.environ, SANLOCK_RUN_DIR=run_dir, SANLOCK_PRIVILEGED="0")
    log = open(os.path.join(work, f"{kind}.log"), "w")
    if kind == "lockd":
        cfg = os.path.join(work, "lockd.toml")
        with open(cfg, "w") as f:
            f.write(f'metrics_listen = "127.0.0.1:{port}"\n')
        cmd = [DAEMON, "-D", "-w", "0", "-e", "hostA", "-c", cfg, "--run-dir", run_dir]
    else:
        cmd = ["sanlock", "daemon", "-D", "-w", "0", "-U", "root", "-G", "root", "-e", "hostA"]
    with log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=log,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    for _ in range(200):
        if os.path.exists(os.path.join(run_dir, "sanlock.sock")):
            return proc, env
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    with open(log.name) as f:
        tail = "".join(f.readlines()[-15:])
    sys.exit(f"{kind} daemon did not start: {' '.join(cmd)}\n{tail}")


def stop_daemon(proc, env):
    """A forced shutdown (both daemons ignore SIGTERM while a lockspace is joined; the
    client normally removed it already), then SIGKILL (harmless with -w 0)."""
    if proc.poll() is None:
        subprocess.run(["sanlock", "client", "shutdown", "-f", "1"], env=env,
                       capture_output=True, timeout=10)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
            proc.wait()


def cycles_of(line):
    """(wall s, acquire times, release times) from a client's "done" line."""
    if not line or line[0] != "done":
        sys.exit(f"client failed: {' '.join(line)[:200]}")
    return (float(line[1]), [float(x.split(",")[0]) for x in line[2:]],
            [float(x.split(",")[1]) for x in line[2:]])


def run_daemon(kind, work, dev, cycles):
    """One client's cycles against `kind`; for lockd also the daemon's disk-time deltas."""
    port = free_port()
    proc, env = start_daemon(kind, work, dev, port)
    client = None
    try:
        client = subprocess.Popen([PYTHON, "-c", CLIENT, "BD", dev, str(cycles)], env=env,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        if client.stdout.readline().strip() != "warm":
            sys.exit(f"client failed during warm-up against {kind}")
        before = metrics(port) if kind == "lockd" else None
        client.stdin.write("\n")
        client.stdin.flush()
        line = client.stdout.readline().split()
        after = metrics(port) if kind == "lockd" else None
        client.stdin.write("\n")
        client.stdin.flush()
        client.wait(timeout=30)
        io = {k: after[k] - before[k] for k in after} if after else None
        return cycles_of(line) + (io,)
    finally:
        if client and client.poll() is None:
            client.kill()
            client.wait()
        stop_daemon(proc, env)


def run_floor(dev, cycles):
    out = subprocess.run([PYTHON, "-c", FLOOR, dev, "0", str(5 * MIB), str(cycles)],
                         check=True, capture_output=True, text=True).stdout.split()
    return cycles_of(out)


def summary(wall, acq, rel):
    n = len(acq)
    return {"cycle_ms": 1000 * wall / n, "per_s": n / wall,
            "acq50": 1000 * pct(acq, .5), "acq99": 1000 * pct(acq, .99),
            "rel50": 1000 * pct(rel, .5), "rel99": 1000 * pct(rel, .99)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cycles", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3,
                    help="lockd, sanlock and the floor in turn, this many times")
    ap.add_argument("--no-sanlock", action="store_true",
                    help="only lockd and the I/O floor (no sanlock column)")
    args = ap.parse_args()
    for path in (LOCKD, DAEMON):
        if not os.access(path, os.X_OK):
            sys.exit(f"{path} missing: build the release binaries first")
    if subprocess.run([PYTHON, "-c", "import sanlock"], capture_output=True).returncode:
        sys.exit("python3-sanlock missing (apt-get install python3-sanlock)")
    if not args.no_sanlock and not shutil.which("sanlock"):
        sys.exit("sanlock missing (apt-get install sanlock), or pass --no-sanlock")
    work = tempfile.mkdtemp(prefix="lockd-breakdown-", dir="/var/tmp")
    dev = None
    try:
        img = os.path.join(work, "img")
        with open(img, "wb") as f:
            f.truncate(8 * MIB)
        dev = subprocess.run(["losetup", "-f", "--show", "--direct-io=on", img],
                             check=True, capture_output=True, text=True).stdout.strip()
        subprocess.run([LOCKD, "direct", "init", "-s", f"BD:0:{dev}:0", "-o", "1", "--force"],
                       check=True, capture_output=True)
        subprocess.run([LOCKD, "direct", "init", "-r", f"BD:r1:{dev}:{MIB}", "--force"],
                       check=True, capture_output=True)
        rounds = []
        for k in range(args.rounds):
            wall, acq, rel, d = run_daemon("lockd", work, dev, args.cycles)
            lk = summary(wall, acq, rel)
            sl = None if args.no_sanlock else summary(*run_daemon("sanlock", work, dev,
                                                                   args.cycles)[:3])
            fl = summary(*run_floor(dev, args.cycles))
            n = len(acq)
            renew_cycles = wall / 2.0  # one renewal (1 read, 1 write) every 2 s at io_timeout 1
            reads, writes = d[("read", "count")], d[("write", "count")]
            lk["reads"], lk["writes"] = reads / n, writes / n
            lk["read_ms"] = 1000 * d[("read", "sum")] / max(reads, 1)
            lk["write_ms"] = 1000 * d[("write", "sum")] / max(writes, 1)
            lk["io_ms"] = 1000 * (d[("read", "sum")] + d[("write", "sum")]) / n
            lk["renewals"] = renew_cycles / n
            rounds.append((sl, lk, fl))
            line = f"round {k + 1}: lockd {lk['cycle_ms']:.3f} ms/cycle, floor {fl['cycle_ms']:.3f}"
            if sl:
                line += f", sanlock {sl['cycle_ms']:.3f}"
            print(line, file=sys.stderr, flush=True)
        # The round with the median lockd/floor cycle ratio is printed in full.
        rounds.sort(key=lambda r: r[1]["cycle_ms"] / r[2]["cycle_ms"])
        sl, lk, fl = rounds[len(rounds) // 2]
        if len(rounds) > 1:
            print(f"{len(rounds)} rounds (lockd, then sanlock, then the floor, in turn); "
                  "per round, min / median / max:\n")
            print("| per round | min | median | max |\n|---|---:|---:|---:|")
            spreads = [("lockd cycle / its I/O floor", lambda r: r[1]["cycle_ms"] / r[2]["cycle_ms"]),
                       ("lockd acquire p50 (ms)", lambda r: r[1]["acq50"]),
                       ("floor acquire p50 (ms)", lambda r: r[2]["acq50"])]
            if sl:
                spreads += [("lockd/sanlock cycles/s", lambda r: r[0]["cycle_ms"] / r[1]["cycle_ms"]),
                            ("sanlock cycle / the floor", lambda r: r[0]["cycle_ms"] / r[2]["cycle_ms"])]
            for name, f in spreads:
                xs = sorted(f(r) for r in rounds)
                print(f"| {name} | {xs[0]:.2f} | {xs[len(xs) // 2]:.2f} | {xs[-1]:.2f} |")
            print("\nThe median round (by lockd cycle / floor):\n")
        cycle_ms, io_ms = lk["cycle_ms"], lk["io_ms"]
        print("One client, acquire+release of one 512/1M lease, loop device with "
              "--direct-io=on\n")
        cols = ["sanlock 3.8.5"] * (sl is not None) + ["lockd", "I/O floor of lockd's cycle"]
        rows = [r for r in (sl, lk, fl) if r is not None]
        print("| measure | " + " | ".join(cols) + " |")
        print("|---|" + "---:|" * len(cols))
        print("| cycles/s | " + " | ".join(f"{r['per_s']:.0f}" for r in rows) + " |")
        print("| mean cycle (ms) | " + " | ".join(f"{r['cycle_ms']:.3f}" for r in rows) + " |")
        print("| acquire p50 / p99 (ms) | "
              + " | ".join(f"{r['acq50']:.3f} / {r['acq99']:.3f}" for r in rows) + " |")
        print("| release p50 / p99 (ms) | "
              + " | ".join(f"{r['rel50']:.3f} / {r['rel99']:.3f}" for r in rows) + " |")
        print()
        print("| lockd, from its own disk-time histograms | value |\n|---|---:|")
        print(f"| disk reads per cycle (renewals: {lk['renewals']:.3f}) | {lk['reads']:.2f}, "
              f"mean {lk['read_ms']:.3f} ms |")
        print(f"| disk writes per cycle (renewals: {lk['renewals']:.3f}) | {lk['writes']:.2f}, "
              f"mean {lk['write_ms']:.3f} ms |")
        print(f"| daemon waiting for the storage per cycle (ms) | {io_ms:.3f} "
              f"({100 * io_ms / cycle_ms:.0f} % of the cycle) |")
        print(f"| the rest per cycle (ms) | {cycle_ms - io_ms:.3f} |")
        print(f"| lockd's cycle over its I/O floor | {cycle_ms / fl['cycle_ms']:.2f}x |")
        if sl is not None:
            print(f"| lockd/sanlock cycles/s | {lk['per_s'] / sl['per_s']:.2f}x |")
            print(f"| best lockd/sanlock any daemon doing lockd's I/O could reach "
                  f"(sanlock's cycle / the floor) | {sl['cycle_ms'] / fl['cycle_ms']:.2f}x |")
    finally:
        if dev:
            subprocess.run(["losetup", "-d", dev])
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
