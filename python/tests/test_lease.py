"""Lease, tokens, typed errors, locks(), LeaderElection and the asyncio variant against
two real lockd daemons ("hosts") sharing one loop device."""

import asyncio
import threading
import time
from collections.abc import Callable

import pytest

import lockd
from conftest import HOST_DEAD, Cluster, Daemon, wait_for  # noqa: F401


def test_token_grows_across_hosts_and_release_frees(cluster: Cluster) -> None:
    a, b = cluster.a, cluster.b
    with lockd.Lease(cluster.spec(a, "op-1"), run_dir=a.run_dir) as la:
        t1 = la.token
        assert t1 is not None
        assert t1 >= 1
        assert not la.lost.is_set() and la.loss is None and la.is_trusted
    with lockd.Lease(cluster.spec(b, "op-1"), run_dir=b.run_dir) as lb:
        assert lb.token == t1 + 1
    with lockd.Lease(cluster.spec(a, "op-1"), run_dir=a.run_dir, timeout=0) as la:
        assert la.token == t1 + 2


def test_lease_held_names_the_owner_and_timeout_waits(cluster: Cluster) -> None:
    a, b = cluster.a, cluster.b
    with lockd.Lease(cluster.spec(a, "op-2"), run_dir=a.run_dir) as held:
        with pytest.raises(lockd.LeaseHeld) as e:
            lockd.Lease(cluster.spec(b, "op-2"), run_dir=b.run_dir, timeout=0).acquire()
        assert e.value.owner_host_id == 1
        assert e.value.owner_name == "hostA"
        assert e.value.owner_state == "live"
        assert e.value.code in lockd.errors.BUSY_CODES
        assert e.value.code_name.startswith("SANLK_ACQUIRE") or e.value.code_name in ("EAGAIN", "EEXIST")
        assert not isinstance(e.value, lockd.Timeout)
        # The same host, another process's lease: EEXIST, still named.
        started = time.monotonic()
        with pytest.raises(lockd.Timeout) as t:
            lockd.Lease(cluster.spec(b, "op-2"), run_dir=b.run_dir, timeout=1.5).acquire()
        waited = time.monotonic() - started
        assert 1.4 <= waited < 5, waited
        assert t.value.owner_name == "hostA" and t.value.owner_host_id == 1
        assert "hostA" in str(t.value) and str(t.value.code) in str(t.value)
        assert isinstance(t.value, lockd.LeaseHeld) and isinstance(t.value, TimeoutError)
        # timeout=None waits until the holder goes: release it from another thread.
        threading.Timer(1.0, held.release).start()
        started = time.monotonic()
        with lockd.Lease(cluster.spec(b, "op-2"), run_dir=b.run_dir) as lb:
            assert lb.token is not None and held.token is not None
            assert lb.token > held.token
            assert time.monotonic() - started >= 0.9


def test_shared_leases_and_locks_listing(cluster: Cluster) -> None:
    a, b = cluster.a, cluster.b
    with lockd.Lease(cluster.spec(a, "shared"), shared=True, run_dir=a.run_dir, owner="reader-a") as sa, \
            lockd.Lease(cluster.spec(b, "shared"), shared=True, run_dir=b.run_dir) as sb, \
            lockd.Lease(cluster.spec(a, "op-3"), run_dir=a.run_dir, owner="worker-a") as ex:
        assert sa.token is not None and sb.token is not None
        assert sa.token >= 1 and sb.token >= 1
        # Cluster-wide, from host B: op-3 is hostA's, op-4 is free.
        rows = lockd.locks("ls", [cluster.spec(b, n) for n in ("op-3", "op-4", "shared")],
                           run_dir=b.run_dir)
        by = {r.resource: r for r in rows}
        assert by["op-3"].owner_host_id == 1 and by["op-3"].owner_host_name == "hostA"
        assert by["op-3"].state == "live" and by["op-3"].token == ex.token
        assert by["op-3"].holders == ()  # not a local process of host B
        assert by["op-4"].owner_host_id == 0 and by["op-4"].state == "none"
        assert by["shared"].shared is True
        # On host A, its own holders with pid and client name.
        rows = lockd.locks("ls", run_dir=a.run_dir)
        by = {r.resource: r for r in rows}
        assert set(by) == {"op-3", "shared"}
        h = by["op-3"].holders
        assert len(h) == 1 and h[0].name == "worker-a" and h[0].mode == "EX"
        assert h[0].token == ex.token
        import os
        assert h[0].pid == os.getpid()
        assert by["shared"].holders[0].mode == "SH"
        # An exclusive acquire of the shared lease is refused while readers hold it.
        with pytest.raises(lockd.LeaseHeld):
            lockd.Lease(cluster.spec(b, "shared"), run_dir=b.run_dir, timeout=0).acquire()


def test_leader_election_campaign_observe_resign_run(cluster: Cluster) -> None:
    a, b = cluster.a, cluster.b
    ea = lockd.LeaderElection(cluster.spec(a, "leader"), run_dir=a.run_dir)
    eb = lockd.LeaderElection(cluster.spec(b, "leader"), run_dir=b.run_dir)
    seen: list[lockd.LeaderInfo] = []
    stop = threading.Event()

    def watch() -> None:
        for info in eb.observe(interval=0.1, stop=stop):
            seen.append(info)
    t = threading.Thread(target=watch)
    t.start()
    lead = ea.campaign()
    assert lead.token is not None
    assert lead.is_leader and lead.token >= 1
    info = eb.leader()
    assert (info.host_id, info.host_name, info.token, info.state) == \
        (1, "hostA", lead.token, "live")
    with pytest.raises(lockd.Timeout) as e:
        eb.campaign(timeout=0.5)
    assert e.value.owner_name == "hostA"
    ea.resign()
    assert not lead.is_leader
    got: dict[str, int | None] = {}

    def term(leadership: lockd.Leadership) -> str:
        got["token"] = leadership.token
        time.sleep(0.5)  # long enough for the observer to see this term
        return "done"
    assert eb.run(term) == "done"
    assert got["token"] == lead.token + 1
    time.sleep(0.5)
    stop.set()
    t.join()
    holders = [(s.host_id, s.token) for s in seen]
    assert (1, lead.token) in holders and (2, lead.token + 1) in holders, seen
    assert holders.index((1, lead.token)) < holders.index((2, lead.token + 1))


def test_asyncio_lease(cluster: Cluster) -> None:
    a = cluster.a

    async def main() -> int:
        async with lockd.aio.Lease(cluster.spec(a, "aio"), run_dir=a.run_dir) as l1:
            assert l1.token is not None
            assert l1.token >= 1
            assert await l1.wait_lost(timeout=0.3) is None
            assert not l1.lost.is_set()
            # A second holder waits (in the executor) without blocking the loop.
            second = lockd.aio.Lease(cluster.spec(a, "aio"), run_dir=a.run_dir, timeout=0.5)
            with pytest.raises(lockd.Timeout):
                await second.acquire()
            # The boolean form: False while l1 holds it, by trying once or by waiting.
            assert await second.acquire(blocking=False) is False
            assert await second.acquire(timeout=0.3) is False
            assert second.token is None
            return l1.token
    token = asyncio.run(main())
    with lockd.Lease(cluster.spec(a, "aio"), run_dir=a.run_dir) as l2:
        assert l2.token == token + 1

    async def free_now() -> int | None:
        lease = lockd.aio.Lease(cluster.spec(a, "aio"), run_dir=a.run_dir)
        assert await lease.acquire(blocking=True) is True
        got = lease.token
        await lease.release()
        return got
    assert asyncio.run(free_now()) == token + 2


def test_metrics_from_lockd(cluster: Cluster) -> None:
    text = lockd.metrics(run_dir=cluster.a.run_dir)
    assert "# TYPE" in text and "lockd_" in text


def test_errors_carry_codes(cluster: Cluster) -> None:
    with pytest.raises(lockd.BadSpec) as e:
        lockd.Lease("ls:op-1:/dev/x")
    assert e.value.code == -22 and isinstance(e.value, ValueError)
    with pytest.raises(lockd.BadSpec):
        lockd.Lease(cluster.spec(cluster.a, "op-1"), timeout=-1)
    with pytest.raises(lockd.DaemonGone) as g:
        lockd.Lease(cluster.spec(cluster.a, "op-1"), run_dir="/nonexistent-run-dir").acquire()
    assert g.value.code == -2 and g.value.code_name == "ENOENT"
    # A lease in a lockspace the daemon has not joined: refused with the daemon's code.
    with pytest.raises(lockd.Refused) as r:
        lockd.Lease(f"nols:op-1:{cluster.loop.dev}:1M", run_dir=cluster.b.run_dir,
                    timeout=0).acquire()
    assert r.value.code < 0


def test_waiting_candidates_are_shown(cluster: Cluster) -> None:
    """A candidate waiting on host B for a lease host A holds shows in lockd.locks,
    `lockd leader --json` and `lockd status --json` on host B."""
    import json
    import os
    a, b = cluster.a, cluster.b
    with lockd.Lease(cluster.spec(a, "op-4"), run_dir=a.run_dir) as held:
        cand = lockd.Lease(cluster.spec(b, "op-4"), run_dir=b.run_dir, owner="candidate-b")
        t = threading.Thread(target=cand.acquire)
        t.start()

        def shown() -> tuple[lockd.Waiter, ...]:
            rows = lockd.locks("ls", [cluster.spec(b, "op-4")], run_dir=b.run_dir)
            return rows[0].waiting
        waiting: tuple[lockd.Waiter, ...] | None = None
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not waiting:
            waiting = shown()
            time.sleep(0.1)
        assert waiting and waiting[0].pid == os.getpid()
        assert waiting[0].name == "candidate-b"
        out = json.loads(b.lockd("leader", "-r", cluster.spec(b, "op-4"), "--json").stdout)
        assert out["host_name"] == "hostA"
        assert [c["name"] for c in out["waiting_here"]] == ["candidate-b"], out
        st = json.loads(b.lockd("status", "--json").stdout)
        assert [c["waiting"] for c in st["clients"] if c["name"] == "candidate-b"] == ["ls:op-4"]
        held.release()
        t.join(15)
        assert held.token is not None
        assert cand.token == held.token + 1
        # Holding now: no longer a candidate.
        assert lockd.locks("ls", [cluster.spec(b, "op-4")], run_dir=b.run_dir)[0].waiting == ()
        cand.release()


def waiting_on(cluster: Cluster, d: Daemon, name: str, owner: str) -> bool:
    """True while ``owner`` shows on ``d`` as a candidate waiting for lease ``name``."""
    rows = lockd.locks("ls", [cluster.spec(d, name)], run_dir=d.run_dir)
    return any(w.name == owner for w in rows[0].waiting)


def test_acquire_returns_false_when_held_and_after_its_timeout(cluster: Cluster) -> None:
    """kazoo's shape: acquire(blocking=False) tries once, acquire(timeout=T) tries T
    seconds; both return False on a held lease, True once they get it."""
    a, b = cluster.a, cluster.b
    first = lockd.Lease(cluster.spec(b, "cancel"), run_dir=b.run_dir)
    assert first.acquire(blocking=False) is True
    assert first.token is not None
    assert first.is_trusted and first.token >= 1
    first.release()
    with lockd.Lease(cluster.spec(a, "cancel"), run_dir=a.run_dir) as held:
        assert held.token == first.token + 1
        other = lockd.Lease(cluster.spec(b, "cancel"), run_dir=b.run_dir)
        t0 = time.monotonic()
        assert other.acquire(blocking=False) is False
        assert time.monotonic() - t0 < 2
        assert other.token is None and not other.is_trusted
        t0 = time.monotonic()
        assert other.acquire(timeout=1.0) is False
        waited = time.monotonic() - t0
        assert 0.9 <= waited < 5, waited
        # The lease's own timeout applies when acquire's is None.
        short = lockd.Lease(cluster.spec(b, "cancel"), run_dir=b.run_dir, timeout=0.5)
        t0 = time.monotonic()
        assert short.acquire(True, None) is False
        assert 0.4 <= time.monotonic() - t0 < 4
        # The raising form is unchanged next to it.
        with pytest.raises(lockd.LeaseHeld) as e:
            lockd.Lease(cluster.spec(b, "cancel"), run_dir=b.run_dir, timeout=0).acquire()
        assert e.value.owner_name == "hostA"
        # The same object waits (blocking=True) until the holder goes.
        threading.Timer(0.5, held.release).start()
        t0 = time.monotonic()
        assert other.acquire(blocking=True, timeout=15) is True
        assert time.monotonic() - t0 >= 0.4
        assert held.token is not None
        assert other.token == held.token + 1 and other.is_trusted
        other.release()


def test_cancel_from_another_thread_unblocks_a_blocking_acquire(cluster: Cluster) -> None:
    a, b = cluster.a, cluster.b
    with lockd.Lease(cluster.spec(a, "cancel"), run_dir=a.run_dir) as held:
        cand = lockd.Lease(cluster.spec(b, "cancel"), run_dir=b.run_dir, owner="cancel-me")
        cand.cancel()  # nothing under way: no effect on the acquire that follows
        out: dict[str, bool | BaseException | None] = {}

        def take() -> None:
            try:
                out["result"] = cand.acquire(blocking=True)  # waits until the holder goes
            except BaseException as e:  # noqa: BLE001 - checked below
                out["error"] = e
        t = threading.Thread(target=take)
        t.start()
        assert wait_for(10, lambda: waiting_on(cluster, b, "cancel", "cancel-me"))
        t0 = time.monotonic()
        cand.cancel()
        t.join(5)
        assert not t.is_alive(), "cancel() did not unblock acquire()"
        assert time.monotonic() - t0 < 1
        assert isinstance(out.get("error"), lockd.Cancelled), out
        assert isinstance(out["error"], lockd.Cancelled)  # the same, for mypy
        assert out["error"].code_name == "ECANCELED" and "result" not in out
        assert cand.token is None and not cand.is_trusted
        # Its registration is closed: host B's daemon forgets the candidate.
        assert wait_for(5, lambda: not waiting_on(cluster, b, "cancel", "cancel-me"))
        # The raising form is cancelled the same way.
        cand2 = lockd.Lease(cluster.spec(b, "cancel"), run_dir=b.run_dir, owner="cancel-2")
        t = threading.Thread(target=lambda: out.update(raised=_raises(cand2.acquire)))
        t.start()
        assert wait_for(10, lambda: waiting_on(cluster, b, "cancel", "cancel-2"))
        cand2.cancel()
        t.join(5)
        assert isinstance(out["raised"], lockd.Cancelled), out
    # Nothing kept acquiring after the cancel: the lease stays free once released.
    time.sleep(2.5)  # longer than the acquire loop's longest back-off
    assert lockd.leader(cluster.spec(b, "cancel"), run_dir=b.run_dir).host_id == 0
    # The cancelled object is reusable.
    assert cand.acquire(blocking=False) is True
    assert held.token is not None
    assert cand.token == held.token + 1
    cand.release()


def _raises(fn: Callable[[], object]) -> BaseException | None:
    try:
        fn()
    except BaseException as e:  # noqa: BLE001 - returned to the test
        return e
    return None


def test_asyncio_cancel_mid_acquire_leaves_nothing_held(cluster: Cluster) -> None:
    """A cancelled ``await lease.acquire()`` while host A holds the lease: the
    CancelledError comes at once, the executor's acquire stops (it does not take the
    lease when host A lets it go), and another client takes the lease."""
    a, b = cluster.a, cluster.b
    spec_b = cluster.spec(b, "cancel")

    async def waiting(owner: str) -> bool:
        rows = await lockd.aio.locks("ls", [spec_b], run_dir=b.run_dir)
        return any(w.name == owner for w in rows[0].waiting)

    async def main() -> None:
        held = lockd.Lease(cluster.spec(a, "cancel"), run_dir=a.run_dir).acquire()
        try:
            lease = lockd.aio.Lease(spec_b, run_dir=b.run_dir, owner="aio-cancel")
            task = asyncio.ensure_future(lease.acquire())
            deadline = time.monotonic() + 10
            while not await waiting("aio-cancel"):
                assert time.monotonic() < deadline, "the candidate never waited"
                assert not task.done(), task
                await asyncio.sleep(0.1)
            t0 = time.monotonic()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert time.monotonic() - t0 < 2
            assert lease.token is None and not lease.is_trusted
            assert not await waiting("aio-cancel")
            # asyncio.wait_for's timeout cancels the same way.
            late = lockd.aio.Lease(spec_b, run_dir=b.run_dir, owner="aio-wait-for")
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(late.acquire(), 0.7)
            assert late.token is None
        finally:
            held.release()
        await asyncio.sleep(2.5)  # longer than the acquire loop's longest back-off
        info = await lockd.aio.leader(spec_b, run_dir=b.run_dir)
        assert info.host_id == 0, f"a cancelled acquire took the lease: {info}"
        async with lockd.aio.Lease(spec_b, run_dir=b.run_dir, timeout=0) as again:
            assert held.token is not None
            assert again.token == held.token + 1
            rows = await lockd.aio.locks("ls", [spec_b], run_dir=b.run_dir)
            assert [(h.name, h.token) for h in rows[0].holders] == \
                [(again.lease.owner, again.token)]
    asyncio.run(main())


def test_asyncio_cancel_racing_a_successful_acquire(cluster: Cluster) -> None:
    """Cancelled at any point of an acquire of a free lease: either the await returns
    the held lease, or it raises CancelledError and the lease is free again at once
    (or, when the cancel cut an ACQUIRE short inside the daemon, as soon as the daemon
    has finished it)."""
    b = cluster.b
    spec = cluster.spec(b, "cancel")

    async def main() -> list[str]:
        outcomes: list[str] = []
        for delay in (0, 0.0005, 0.001, 0.002, 0.004, 0.008, 0.016, 0.05, 0.2):
            lease = lockd.aio.Lease(spec, run_dir=b.run_dir)
            task = asyncio.ensure_future(lease.acquire())
            await asyncio.sleep(delay)
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                outcomes.append("cancelled")
                # An ACQUIRE the cancel cut short in the daemon is finished there and
                # given back at once (its registration is closed): another client gets
                # the lease within moments, not at this process's exit.
                probe = lockd.Lease(spec, run_dir=b.run_dir)
                t0 = time.monotonic()
                assert probe.acquire(timeout=5) is True, delay
                assert time.monotonic() - t0 < 3, delay
                probe.release()
            else:
                outcomes.append("held")
                assert lease.is_trusted
                await lease.release()
        return outcomes
    outcomes = asyncio.run(main())
    assert "cancelled" in outcomes, outcomes


def test_asyncio_leader_election(cluster: Cluster) -> None:
    a, b = cluster.a, cluster.b

    async def main() -> None:
        ea = lockd.aio.LeaderElection(cluster.spec(a, "elect-aio"), run_dir=a.run_dir)
        eb = lockd.aio.LeaderElection(cluster.spec(b, "elect-aio"), run_dir=b.run_dir)
        stop = asyncio.Event()
        seen: list[lockd.LeaderInfo] = []

        async def watch() -> None:
            async for info in eb.observe(interval=0.1, stop=stop):
                seen.append(info)
        watcher = asyncio.ensure_future(watch())
        lead = await ea.campaign()
        assert isinstance(lead, lockd.aio.Leadership) and ea.leadership is lead
        assert lead.token is not None
        assert lead.is_leader and lead.token >= 1
        info = await eb.leader()
        assert isinstance(info, lockd.LeaderInfo)
        assert (info.host_id, info.host_name, info.token, info.state) == \
            (1, "hostA", lead.token, "live")
        assert await lockd.aio.leader(cluster.spec(b, "elect-aio"), run_dir=b.run_dir) == info
        with pytest.raises(lockd.Timeout) as e:
            await eb.campaign(timeout=0.5)
        assert e.value.owner_name == "hostA"
        # A cancelled campaign holds nothing afterwards (checked by the token below).
        camp = asyncio.ensure_future(eb.campaign())
        await asyncio.sleep(0.5)
        camp.cancel()
        with pytest.raises(asyncio.CancelledError):
            await camp
        assert eb.leadership is None
        await ea.resign()
        assert not lead.is_leader and ea.leadership is None
        await asyncio.sleep(2.5)
        assert (await eb.leader()).host_id == 0

        async def term(leadership: lockd.aio.Leadership) -> int | None:
            assert leadership.is_leader
            await asyncio.sleep(0.5)  # long enough for the observer to see this term
            return leadership.token
        assert await eb.run(term) == lead.token + 1
        await asyncio.sleep(0.3)
        stop.set()
        await asyncio.wait_for(watcher, 5)
        holders = [(s.host_id, s.token) for s in seen]
        assert (1, lead.token) in holders and (2, lead.token + 1) in holders, seen
        assert holders.index((1, lead.token)) < holders.index((2, lead.token + 1))
        rows = await lockd.aio.locks("ls", [cluster.spec(b, "elect-aio")], run_dir=b.run_dir)
        assert isinstance(rows[0], lockd.LockInfo) and rows[0].owner_host_id == 0
    asyncio.run(main())


def test_lost_when_the_daemon_stops_answering(cluster: Cluster) -> None:
    """SIGSTOP of the daemon: no heartbeat for 3 s, so nothing is known to renew this
    host's lease — `daemon_silent`. (Last in the module: it pauses host B's daemon.)"""
    import signal
    b = cluster.b
    lease = lockd.Lease(cluster.spec(b, "op-3"), run_dir=b.run_dir).acquire()
    b.proc.send_signal(signal.SIGSTOP)
    t0 = time.monotonic()
    try:
        assert lease.lost.wait(6), "no loss notice while the daemon was stopped"
        took = time.monotonic() - t0
    finally:
        b.proc.send_signal(signal.SIGCONT)
    assert lease.loss is not None
    assert lease.loss.reason == "daemon_silent"
    assert lease.loss.kill_in is None
    assert 2.5 <= took < 4.5, took
    lease.release()  # closes the registration; the resumed daemon releases the lease
    assert wait_free(cluster, b, "op-3")


def wait_free(cluster: Cluster, d: Daemon, name: str) -> bool:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if lockd.leader(cluster.spec(d, name), run_dir=d.run_dir).host_id == 0:
            return True
        time.sleep(0.1)
    return False
