"""The calls sanlock also has, against a real sanlock 3.8 daemon (-w 0, private run
dir, SANLOCK_PRIVILEGED=0): Lease with its token, LeaseHeld and Timeout naming the
owner's host_id, leader(), locks(), and the lost notice when the daemon dies (sanlock
has no watch: the registered connection's EOF is the notice)."""

import threading
import time
from collections.abc import Iterator

import pytest

import lockd
from conftest import Daemon, Scratch, init_lockspace, init_resource, wait_for


@pytest.fixture(scope="module")
def sanlock() -> Iterator[tuple[Daemon, str]]:
    s = Scratch("sanlock")
    img = s.file("disk.img", 16)
    d: Daemon | None = None
    try:
        init_lockspace("sls", img)
        init_resource("sls", "r1", img, 1 << 20)
        init_resource("sls", "r2", img, 2 << 20)
        d = Daemon(s, "hostS", kind="sanlock")
        d.join("sls", 1, img)
        yield d, img
    finally:
        if d:
            d.stop()
        s.cleanup()


def test_lease_token_and_busy_on_sanlock(sanlock: tuple[Daemon, str]) -> None:
    d, img = sanlock
    spec = f"sls:r1:{img}:1M"
    assert lockd._conn.daemon_kind(d.run_dir) == "sanlock"
    with lockd.Lease(spec, run_dir=d.run_dir, owner="py-sanlock") as l1:
        t1 = l1.token
        assert t1 is not None
        assert t1 >= 1
        with pytest.raises(lockd.LeaseHeld) as e:
            lockd.Lease(spec, run_dir=d.run_dir, timeout=0).acquire()
        assert e.value.owner_host_id == 1 and e.value.code in lockd.errors.BUSY_CODES
        assert wait_for(10, lambda: lockd.leader(spec, run_dir=d.run_dir).state == "live")
        with pytest.raises(lockd.Timeout) as t:
            lockd.Lease(spec, run_dir=d.run_dir, timeout=1).acquire()
        assert t.value.owner_host_id == 1 and t.value.owner_state == "live"
        info = lockd.leader(spec, run_dir=d.run_dir)
        assert (info.host_id, info.token) == (1, t1)
        rows = lockd.locks("sls", run_dir=d.run_dir)
        assert [r.resource for r in rows] == ["r1"]
        h = rows[0].holders[0]
        assert h.name == "py-sanlock" and h.token == t1 and h.mode == "EX"
        rows = lockd.locks("sls", [spec, f"sls:r2:{img}:2M"], run_dir=d.run_dir)
        assert rows[1].owner_host_id == 0 and rows[1].state == "none"
    with lockd.Lease(spec, run_dir=d.run_dir, shared=True) as s1, \
            lockd.Lease(spec, run_dir=d.run_dir, shared=True) as s2:
        assert s1.token is not None
        assert s1.token == s2.token and s1.token > t1
    # Waiting (timeout=None) for a holder that goes.
    held = lockd.Lease(spec, run_dir=d.run_dir).acquire()
    threading.Timer(0.8, held.release).start()
    with lockd.Lease(spec, run_dir=d.run_dir) as l2:
        assert l2.token is not None and held.token is not None
        assert l2.token > held.token


def test_lockd_only_calls_say_so_on_sanlock(sanlock: tuple[Daemon, str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """sanlock never answers lockd's extension commands: NoExtensions, after the
    reply timeout (shortened here), and the connection is not left hanging."""
    d, _img = sanlock
    monkeypatch.setattr(lockd._conn, "EXT_REPLY_TIMEOUT", 1.0)
    t0 = time.monotonic()
    with pytest.raises(lockd.NoExtensions) as e:
        lockd.metrics(run_dir=d.run_dir)
    assert 0.9 <= time.monotonic() - t0 < 3
    assert e.value.code == -95 and "sanlock" in str(e.value)


def test_lost_when_the_sanlock_daemon_dies(sanlock: tuple[Daemon, str]) -> None:
    d, img = sanlock
    lease = lockd.Lease(f"sls:r2:{img}:2M", run_dir=d.run_dir).acquire()
    got: list[lockd.LossNotice] = []
    lease.on_lost(got.append)
    assert not lease.lost.is_set()
    d.kill9()
    t0 = time.monotonic()
    assert lease.lost.wait(5), "no loss notice after the sanlock daemon died"
    assert time.monotonic() - t0 < 2
    assert lease.loss is not None
    assert lease.loss.reason == "daemon_gone"
    # The callback runs in the watch thread right after the event is set.
    assert wait_for(2, lambda: got == [lease.loss]), got
    assert not lease.is_trusted
    lease.release()  # a lost lease: no RELEASE sent, no error
