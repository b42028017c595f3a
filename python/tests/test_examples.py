"""The examples of docs/python.md, each run against two real lockd hosts and killed at
the wrong moment: the lost notice is observed before the daemon's kill escalation, and
no write with a stale token is accepted.

* sf_worker.py: a worker killed (-9) in the middle of its operation; a FORCE request
  from the other host;
* leader_writer.py: the leader's storage stalls (renewal_failing, then the kill
  escalation), the other host takes over, the deposed token is refused by
  lockd-fenced-store;
* file_lock.py: the holder's daemon is killed (-9), the other host takes the lock after
  host_dead, the stale holder's append is refused.
"""

import json
import os
import socket
import subprocess
import sys
import time

import lockd

from conftest import (EXAMPLES, HOST_DEAD, IO_TIMEOUT, Cluster, Daemon, Scratch, StartChild,
                      bin_path, run, wait_for)

sys.path.insert(0, EXAMPLES)
from fenced_file import fenced_append  # noqa: E402

CATALOG = "op-1=1M,op-2=2M,op-3=3M"


def sf(cluster: Cluster, d: Daemon, *args: str) -> list[str]:
    return [os.path.join(EXAMPLES, "sf_worker.py"), "--lockspace", "ls", "--path",
            cluster.path(d), "--catalog", CATALOG, *args]


def journal_tokens(path: str) -> list[int]:
    with open(path) as f:
        lines = f.read().splitlines()
    return [int(line.split()[0].split("=")[1]) for line in lines[1:]]


def test_sf_worker_killed_mid_operation(cluster: Cluster, children: StartChild) -> None:
    a, b = cluster.a, cluster.b
    journal = cluster.scratch.path("op-1.journal")
    wa = children(sf(cluster, a, "run", "op-1", "--journal", journal, "--steps", "1000",
                     "--step-seconds", "0.05", "--name", "hostA"), a.env())
    ta = wa.wait_event("acquired", 15)["token"]
    wa.wait_event("step", 10, step=3)

    # The operators' lock list, from the other host: op-1 is hostA's, the rest free.
    out = run([sys.executable, *sf(cluster, b, "list", "--json")], env=b.env())
    rows = {r["resource"]: r for r in json.loads(out.stdout)}
    assert rows["op-1"]["owner_host_name"] == "hostA" and rows["op-1"]["token"] == ta
    assert rows["op-1"]["state"] == "live"
    assert rows["op-2"]["owner_host_id"] == 0
    # And from hostA, with the local worker's pid and name.
    out = run([sys.executable, *sf(cluster, a, "list")], env=a.env())
    assert f"{wa.pid()}(sf-op-1)" in out.stdout, out.stdout

    # Another worker, on hostB, trying once: busy, naming the holder.
    wb0 = children(sf(cluster, b, "run", "op-1", "--journal", journal, "--timeout", "0"),
                   b.env())
    busy = wb0.wait_event("busy", 15)
    assert (busy["owner"], busy["owner_host_id"], busy["state"]) == ("hostA", 1, "live")
    assert wb0.wait() == 1

    # Killed in the middle of the operation: the daemon releases its lock at once.
    wa.kill()
    wa.wait()
    killed_at = time.monotonic()
    wb = children(sf(cluster, b, "run", "op-1", "--journal", journal, "--steps", "3",
                     "--timeout", "15", "--name", "hostB"), b.env())
    tb = wb.wait_event("acquired", 20)["token"]
    assert tb > ta
    assert time.monotonic() - killed_at < 10
    wb.wait_event("done", 15)
    assert wb.wait() == 0
    # The journal: hostA's steps, then hostB's, tokens never going down; a late write
    # with hostA's token (a worker that did not notice) is refused.
    toks = journal_tokens(journal)
    assert toks == sorted(toks) and toks[-1] == tb and ta in toks
    assert fenced_append(journal, ta, "stale") == (False, tb)


def test_sf_worker_told_before_a_force_request_kills_it(cluster: Cluster,
                                                        children: StartChild) -> None:
    a, b = cluster.a, cluster.b
    journal = cluster.scratch.path("op-2.journal")
    wa = children(sf(cluster, a, "run", "op-2", "--journal", journal, "--steps", "100000",
                     "--step-seconds", "0.05"), a.env())
    ta = wa.wait_event("acquired", 15)["token"]
    wa.wait_event("step", 10, step=2)
    # An operator on hostB takes the lock away (FORCE: the daemon would SIGKILL; the
    # worker's registration turns that into SIGTERM).
    b.lockd("request", "-r", f"ls:op-2:{cluster.path(b)}:2M", "--next-lver", "-f", "force")
    # The daemon writes the notice before it signals: the worker's SIGTERM handler
    # knows why it is stopped (the on_lost callback's own "lost" line may lose the race
    # with the handler's exit, so it is checked only when it was printed).
    term = wa.wait_event("sigterm", 25)
    assert term["lost"] == "requested" and term["force_mode"] == 1, term
    assert term["lost_at"] <= term["t"]
    for lost in wa.find("lost"):
        assert lost["reason"] == "requested" and lost["t"] <= term["t"]
    assert wa.wait() == 75
    wb = children(sf(cluster, b, "run", "op-2", "--journal", journal, "--steps", "2",
                     "--timeout", "20"), b.env())
    tb = wb.wait_event("acquired", 25)["token"]
    assert tb > ta
    wb.wait_event("done", 10)
    assert fenced_append(journal, ta, "stale") == (False, tb)
    toks = journal_tokens(journal)
    assert toks == sorted(toks)


class Store:
    def __init__(self, scratch: Scratch) -> None:
        self.sock = scratch.path("store.sock")
        self.log = scratch.path("store.log")
        self.proc = subprocess.Popen([bin_path("lockd-fenced-store"), "serve", "--socket",
                                      self.sock, "--log", self.log])
        assert wait_for(10, lambda: os.path.exists(self.sock)), "store socket never appeared"

    def write(self, token: int, host: str) -> str:
        s = socket.socket(socket.AF_UNIX)
        s.connect(self.sock)
        s.sendall(f"WRITE {token} {host} {time.time_ns()}\n".encode())
        reply = s.makefile().readline().strip()
        s.close()
        return reply

    def accepted(self) -> list[tuple[int, str, int]]:
        with open(self.log) as f:
            out = []
            for line in f:
                if line.startswith("accepted "):
                    kv = dict(x.split("=", 1) for x in line.split()[1:])
                    out.append((int(kv["token"]), kv["host"], int(kv["store_ns"])))
            return out

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


def test_leader_writer_storage_stall(children: StartChild) -> None:
    c = Cluster("stall")
    store: Store | None = None
    try:
        a, b = c.a, c.b
        store = Store(c.scratch)
        writer = os.path.join(EXAMPLES, "leader_writer.py")
        wa = children([writer, "--lease", c.spec(a, "leader"), "--store", store.sock,
                       "--host", "hostA"], a.env())
        ta = wa.wait_event("elected", 15)["token"]
        wa.wait_event("write", 10, n=10)
        wb = children([writer, "--lease", c.spec(b, "leader"), "--store", store.sock,
                       "--host", "hostB"], b.env())
        time.sleep(1)
        assert not wb.find("elected")
        # hostA's path to the storage hangs.
        assert c.fault is not None  # not file_backed: host A has its FUSE view
        c.fault.stall()
        stalled = time.monotonic()
        # The writer's loop stops on the notice and reports it ("stopped" carries the
        # notice; the on_lost callback's own "lost" line is checked when printed).
        lost = wa.wait_event("stopped", 12 * IO_TIMEOUT)
        assert lost["reason"] == "renewal_failing", lost
        assert lost["token"] == ta
        # Told with time to spare: the kill escalation is kill_in seconds away.
        assert lost["kill_in"] is not None and lost["kill_in"] > 0.5, lost
        for cb in wa.find("lost"):
            assert cb["reason"] == "renewal_failing" and cb["kill_in"] == lost["kill_in"]
        # It stopped writing at the notice: its last accepted write is not later than
        # the notice (plus the one write in flight), kill_in seconds before the
        # daemon's kill escalation.
        last_a = max(ns for t, h, ns in store.accepted() if h == "hostA")
        assert last_a <= lost["lost_wall_ns"] + 200_000_000, (last_a, lost)
        # It holds nothing any more, so the escalation has no one to kill; its next
        # campaign is refused (the lockspace failed) and it exits for a supervisor.
        ex = wa.wait_event("exit", 15)
        assert ex["code"] < 0
        assert wa.wait() == 75
        assert not wa.find("sigterm")
        # hostB takes over once hostA's host_id is dead to it.
        elected_b = wb.wait_event("elected", HOST_DEAD + 15)
        took = time.monotonic() - stalled
        tb = elected_b["token"]
        assert tb > ta
        assert took < HOST_DEAD + 2 * IO_TIMEOUT + 4, took
        wb.wait_event("write", 10, n=10)
        # A deposed leader that wakes up and writes with its token is refused.
        assert store.write(ta, "hostA-stale") == f"REJECT {tb}"
        acc = store.accepted()
        tokens = [t for t, _, _ in acc]
        assert tokens == sorted(tokens), acc
        assert {h for t, h, _ in acc if t == ta} == {"hostA"}
        assert {h for t, h, _ in acc if t == tb} == {"hostB"}
        print(f"stall: notice {lost['t'] - wa.events[0]['t']:.1f} s after election, "
              f"kill_in {lost['kill_in']:.2f} s, exit {ex['error']!r}, takeover {took:.1f} s "
              f"after the stall, tokens {ta} -> {tb}")
        c.fault.passthrough()
    finally:
        if store:
            store.stop()
        c.close()


def test_file_lock_daemon_killed(children: StartChild) -> None:
    c = Cluster("file", file_backed=True)
    try:
        a, b = c.a, c.b
        data = c.scratch.path("data.txt")
        prog = os.path.join(EXAMPLES, "file_lock.py")
        args = ["--image", c.shared, "--lockspace", "ls", "--name", "op-3", "--offset", "3M",
                "--data", data]
        ha = children([prog, *args, "--lines", "100000", "--interval", "0.05"], a.env())
        ta = ha.wait_event("locked", 15)["token"]
        ha.wait_event("line", 10, n=10)
        # The other host waits for it.
        hb = children([prog, *args, "--lines", "5"], b.env())
        time.sleep(1)
        assert not hb.find("locked")
        # hostA's daemon dies: the holder is told at once and stops appending; no one
        # will kill it (its daemon is gone), the lock moves after host_dead.
        a.kill9()
        killed = time.monotonic()
        lost = ha.wait_event("stopped", 5)
        assert lost["reason"] == "daemon_gone"
        assert lost["t_test"] - killed < 3
        for cb in ha.find("lost"):
            assert cb["reason"] == "daemon_gone"
        assert ha.wait() == 75
        got = hb.wait_event("locked", HOST_DEAD + 15)
        tb = got["token"]
        assert tb > ta
        assert HOST_DEAD - 3 < time.monotonic() - killed < HOST_DEAD + 2 * IO_TIMEOUT + 5
        print(f"daemon kill: notice after {lost['t_test'] - killed:.2f} s, takeover after "
              f"{time.monotonic() - killed:.1f} s, tokens {ta} -> {tb}")
        hb.wait_event("unlocked", 10)
        assert hb.wait() == 0
        assert fenced_append(data, ta, "stale holder wakes up") == (False, tb)
        toks = journal_tokens(data)
        assert toks == sorted(toks) and toks[-1] == tb
    finally:
        c.close()


def test_elect_tells_a_python_child_why(cluster: Cluster, children: StartChild) -> None:
    """`lockd elect --loss-file F --json -- elect_child.py`: a FORCE request from host B;
    the child reads reason=requested from the loss file in its SIGTERM handler."""
    a, b = cluster.a, cluster.b
    loss = cluster.scratch.path("elect-loss.env")
    el = subprocess.Popen(
        [bin_path("lockd"), "elect", "-r", cluster.spec(a, "leader"), "--grace", "3",
         "--loss-file", loss, "--json", "--run-dir", a.run_dir, "--", sys.executable,
         os.path.join(EXAMPLES, "elect_child.py")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_for(15, lambda: lockd.leader(cluster.spec(b, "leader"),
                                                 run_dir=b.run_dir).host_id == 1)
        time.sleep(0.5)
        b.lockd("request", "-r", f"ls:leader:{cluster.path(b)}:8M", "--next-lver", "-f",
                "force")
        out, err = el.communicate(timeout=30)
    finally:
        if el.poll() is None:
            el.kill()
            el.wait()
    assert el.returncode == 75, (out, err)
    events = [json.loads(line) for line in out.splitlines()]
    assert [e["event"] for e in events] == ["campaigning", "elected", "lost", "exited"], out
    token = events[1]["token"]
    assert events[2]["reason"] == "requested"
    child = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    assert child[0] == {"event": "started", "token": token, "lease": "ls:leader"}, err
    assert child[1]["event"] == "stopping" and child[1]["reason"] == "requested", err
    assert child[1]["token"] == token and child[1]["kill_in_s"] == 0.0
    assert events[3]["status"] == 0 and events[3]["after_loss"] is True
