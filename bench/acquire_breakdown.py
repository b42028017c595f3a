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

usage: bench/acquire_breakdown.py [--cycles N]     (run as root, after
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


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cycles", type=int, default=1000)
    args = ap.parse_args()
    for path in (LOCKD, DAEMON):
        if not os.access(path, os.X_OK):
            sys.exit(f"{path} missing: build the release binaries first")
    if subprocess.run([PYTHON, "-c", "import sanlock"], capture_output=True).returncode:
        sys.exit("python3-sanlock missing (apt-get install python3-sanlock)")
    work = tempfile.mkdtemp(prefix="lockd-breakdown-", dir="/var/tmp")
    dev = daemon = client = None
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
        port = free_port()
        cfg = os.path.join(work, "lockd.toml")
        with open(cfg, "w") as f:
            f.write(f'metrics_listen = "127.0.0.1:{port}"\n')
        run_dir = os.path.join(work, "run")
        log = open(os.path.join(work, "daemon.log"), "w")
        daemon = subprocess.Popen([DAEMON, "-D", "-w", "0", "-e", "hostA", "-c", cfg,
                                   "--run-dir", run_dir], stdout=log, stderr=log)
        for _ in range(100):
            if os.path.exists(os.path.join(run_dir, "sanlock.sock")):
                break
            time.sleep(0.05)
        env = dict(os.environ, SANLOCK_RUN_DIR=run_dir)
        client = subprocess.Popen([PYTHON, "-c", CLIENT, "BD", dev, str(args.cycles)], env=env,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        if client.stdout.readline().strip() != "warm":
            sys.exit("client failed during warm-up")
        before = metrics(port)
        client.stdin.write("\n")
        client.stdin.flush()
        line = client.stdout.readline().split()
        after = metrics(port)
        client.stdin.write("\n")
        client.stdin.flush()
        client.wait(timeout=30)
        wall = float(line[1])
        acq = [float(x.split(",")[0]) for x in line[2:]]
        rel = [float(x.split(",")[1]) for x in line[2:]]
        n = len(acq)
        d = {k: after[k] - before[k] for k in after}
        renew_cycles = wall / 2.0  # one renewal (1 read, 1 write) every 2 s at io_timeout 1
        reads, writes = d[("read", "count")], d[("write", "count")]
        read_ms = 1000 * d[("read", "sum")] / max(reads, 1)
        write_ms = 1000 * d[("write", "sum")] / max(writes, 1)
        io_ms = 1000 * (d[("read", "sum")] + d[("write", "sum")]) / n
        cycle_ms = 1000 * wall / n
        print(f"| measure | value |\n|---|---|")
        print(f"| cycles | {n} in {wall:.2f} s ({n / wall:.0f}/s) |")
        print(f"| acquire p50 / p99 (ms) | {1000 * pct(acq, .5):.3f} / {1000 * pct(acq, .99):.3f} |")
        print(f"| release p50 / p99 (ms) | {1000 * pct(rel, .5):.3f} / {1000 * pct(rel, .99):.3f} |")
        print(f"| mean cycle (ms) | {cycle_ms:.3f} |")
        print(f"| disk reads per cycle (renewals: {renew_cycles / n:.3f}) | {reads / n:.2f}, "
              f"mean {read_ms:.3f} ms |")
        print(f"| disk writes per cycle (renewals: {renew_cycles / n:.3f}) | {writes / n:.2f}, "
              f"mean {write_ms:.3f} ms |")
        print(f"| daemon waiting for the storage per cycle (ms) | {io_ms:.3f} "
              f"({100 * io_ms / cycle_ms:.0f} % of the cycle) |")
        print(f"| the rest per cycle (ms) | {cycle_ms - io_ms:.3f} |")
    finally:
        for p in (client, daemon):
            if p and p.poll() is None:
                if p is daemon:
                    # A forced shutdown: the daemon ignores SIGTERM while a lockspace is
                    # joined (the client normally removed it already).
                    subprocess.run([LOCKD, "shutdown", "-f", "--run-dir",
                                    os.path.join(work, "run")], capture_output=True)
                    try:
                        p.wait(timeout=10)
                    except subprocess.TimeoutExpired:
                        p.send_signal(signal.SIGKILL)
                        p.wait()
                else:
                    p.kill()
                    p.wait()
        if dev:
            subprocess.run(["losetup", "-d", dev])
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
