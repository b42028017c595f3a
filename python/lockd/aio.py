"""asyncio variants: ``async with lockd.aio.Lease(spec) as lease``, ``await
lease.wait_lost()``, ``lockd.aio.LeaderElection``, ``await lockd.aio.leader(spec)`` and
``await lockd.aio.locks(lockspace)``.

The blocking protocol work (acquire, release, the queries) runs in the loop's default
executor; the loss notice is delivered to the event loop with ``call_soon_threadsafe``
from the watch thread, so ``lease.lost`` is an ``asyncio.Event`` set in the loop's own
thread.

Cancelling is safe: when ``await lease.acquire()`` (or ``campaign()``) is cancelled, the
acquire in the executor is told to stop (its registration is closed, so nothing the
daemon was still deciding stays held) and, should it have got the lease all the same,
the lease is released; the ``CancelledError`` propagates once that is done. Nothing is
left held until the process exits.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from typing import (AsyncIterator, Awaitable, Callable, Iterable, List, Optional, TypeVar,
                    Union, overload)

from . import lease as _lease
from .errors import LeaseHeld, Timeout
from .lease import LeaseSpec, LossCallback, LossNotice
from .results import LeaderInfo, LockInfo

T = TypeVar("T")


class Lease:
    """``lockd.Lease`` for asyncio: same arguments; ``token``, ``loss``, ``lost`` (an
    ``asyncio.Event``), ``await wait_lost(timeout=None)``, ``on_lost(cb)``."""

    def __init__(self, spec: Union[str, LeaseSpec], *, shared: bool = False,
                 timeout: Optional[float] = None, run_dir: Optional[str] = None,
                 owner: Optional[str] = None, restrict: int = 0) -> None:
        self._inner = _lease.Lease(spec, shared=shared, timeout=timeout, run_dir=run_dir,
                                   owner=owner, restrict=restrict)
        self.lost = asyncio.Event()
        self._loop: Optional[asyncio.AbstractEventLoop] = None

    @property
    def spec(self) -> LeaseSpec:
        """Where the lease lives."""
        return self._inner.spec

    @property
    def token(self) -> Optional[int]:
        """The fencing token (None until acquired)."""
        return self._inner.token

    @property
    def loss(self) -> Optional[LossNotice]:
        """The loss notice once the lease is lost, else None."""
        return self._inner.loss

    @property
    def is_trusted(self) -> bool:
        """False once a loss notice arrived (or when not held)."""
        return self._inner.is_trusted

    @property
    def lease(self) -> _lease.Lease:
        """The underlying blocking ``lockd.Lease``."""
        return self._inner

    def on_lost(self, callback: LossCallback) -> None:
        """``callback(notice)`` runs once in the watch thread when the lease is lost."""
        self._inner.on_lost(callback)

    def _notify(self, _notice: LossNotice) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self.lost.set)

    @overload
    async def acquire(self) -> Lease: ...

    @overload
    async def acquire(self, blocking: bool,
                      timeout: Union[float, None, _lease._Unset] = ...) -> bool: ...

    @overload
    async def acquire(self, *, timeout: Optional[float]) -> bool: ...

    async def acquire(self, blocking: Optional[bool] = None,
                      timeout: Union[float, None, _lease._Unset] = _lease._UNSET
                      ) -> Union[Lease, bool]:
        """Acquires in the executor, in the two forms of ``lockd.Lease.acquire``:
        ``await acquire()`` raises ``LeaseHeld`` or ``Timeout`` as the lease's
        ``timeout`` says and returns self; ``await acquire(blocking=True,
        timeout=None)``, with either argument, returns True when it got the lease and
        False when another holder kept it. Safe to cancel: a cancelled acquire leaves
        nothing held."""
        if blocking is None and isinstance(timeout, _lease._Unset):
            await self._acquire_in_executor(self._inner.timeout)
            return self
        if blocking is False:
            wait: Optional[float] = 0
        elif timeout is None or isinstance(timeout, _lease._Unset):
            wait = self._inner.timeout
        else:
            _lease._check_timeout(timeout)
            wait = timeout
        try:
            await self._acquire_in_executor(wait)
        except LeaseHeld:  # also Timeout
            return False
        return True

    async def _acquire_in_executor(self, wait: Optional[float]) -> None:
        loop = asyncio.get_running_loop()
        self._loop = loop
        stop = threading.Event()
        fut = loop.run_in_executor(None, self._inner._acquire, wait, stop)
        try:
            await asyncio.shield(fut)
        except asyncio.CancelledError:
            stop.set()
            self._inner.cancel()
            await _settle(loop, fut, self._inner)
            raise
        self._inner.on_lost(self._notify)

    async def release(self) -> None:
        """Releases in the executor (see ``lockd.Lease.release``)."""
        loop = self._loop or asyncio.get_running_loop()
        await loop.run_in_executor(None, self._inner.release)

    async def wait_lost(self, timeout: Optional[float] = None) -> Optional[LossNotice]:
        """The loss notice once the lease is lost; None if ``timeout`` passes first."""
        try:
            await asyncio.wait_for(self.lost.wait(), timeout)
        except asyncio.TimeoutError:
            return None
        return self._inner.loss

    async def __aenter__(self) -> Lease:
        """Acquires (``await self.acquire()``)."""
        return await self.acquire()

    async def __aexit__(self, *exc: object) -> None:
        """Releases."""
        await self.release()

    def __repr__(self) -> str:
        return f"<lockd.aio.Lease {self._inner!r}>"


async def _settle(loop: asyncio.AbstractEventLoop, fut: asyncio.Future[_lease.Lease],
                  inner: _lease.Lease) -> None:
    """After a cancelled await of ``fut`` (an acquire in the executor, told to stop):
    waits for it to end, and releases the lease if it got it all the same."""
    try:
        await asyncio.shield(fut)
    except asyncio.CancelledError:
        # Cancelled again while waiting: finish in the background.
        def done(f: asyncio.Future[_lease.Lease]) -> None:
            if not f.cancelled() and f.exception() is None and not loop.is_closed():
                loop.run_in_executor(None, inner.release)
        fut.add_done_callback(done)
        raise
    except Exception:  # noqa: BLE001 - Cancelled or any failure: nothing is held
        return
    await asyncio.shield(loop.run_in_executor(None, inner.release))


class Leadership(Lease):
    """What a successful ``campaign`` gives: a held ``lockd.aio.Lease`` with
    ``is_leader`` and ``await resign()``."""

    @property
    def is_leader(self) -> bool:
        """True while we hold the lease and no loss notice arrived."""
        return self.is_trusted

    async def resign(self) -> None:
        """Gives the lease up so another candidate can take it."""
        await self.release()


class LeaderElection:
    """``lockd.LeaderElection`` for asyncio: ``await campaign()``, ``await resign()``,
    ``await leader()``, ``async for info in observe()``, ``await run(fn)``."""

    def __init__(self, spec: Union[str, LeaseSpec], *, run_dir: Optional[str] = None,
                 owner: Optional[str] = None, restrict: int = 0) -> None:
        self.spec = LeaseSpec.parse(spec)
        self.run_dir = run_dir
        self.owner = owner
        self.restrict = restrict
        self.leadership: Optional[Leadership] = None

    async def campaign(self, timeout: Optional[float] = None) -> Leadership:
        """Waits until we lead (or ``timeout`` seconds pass: ``Timeout``); returns the
        ``Leadership``, also kept as ``self.leadership``. Safe to cancel."""
        lead = Leadership(self.spec, timeout=timeout, run_dir=self.run_dir, owner=self.owner,
                          restrict=self.restrict)
        await lead.acquire()
        self.leadership = lead
        return lead

    async def resign(self) -> None:
        """Resigns the leadership this election holds (no-op when not leading)."""
        lead, self.leadership = self.leadership, None
        if lead is not None:
            await lead.resign()

    async def leader(self) -> LeaderInfo:
        """Who leads now (host_id 0, state ``none`` when nobody does)."""
        return await leader(self.spec, run_dir=self.run_dir)

    async def observe(self, interval: float = 0.5,
                      stop: Optional[asyncio.Event] = None) -> AsyncIterator[LeaderInfo]:
        """Yields the leader at start and at every change of holder, token or state,
        polling every ``interval`` seconds, until ``stop`` (an asyncio.Event) is set."""
        last: Optional[LeaderInfo] = None
        while stop is None or not stop.is_set():
            now = await self.leader()
            if now != last:
                last = now
                yield now
            if stop is None:
                await asyncio.sleep(interval)
                continue
            try:
                await asyncio.wait_for(stop.wait(), interval)
            except asyncio.TimeoutError:
                pass

    async def run(self, fn: Callable[[Leadership], Awaitable[T]],
                  stop: Optional[asyncio.Event] = None,
                  on_lost: Optional[Callable[[LossNotice], object]] = None) -> Optional[T]:
        """As ``lockd.LeaderElection.run`` with a coroutine function: campaigns, awaits
        ``fn(leadership)`` while we lead, resigns, and campaigns again after a loss;
        with ``stop`` until it is set, without it until a term ends without a loss
        (returns ``fn``'s result)."""
        while stop is None or not stop.is_set():
            try:
                lead = await self.campaign(timeout=1.0)
            except Timeout:
                continue
            try:
                result = await fn(lead)
            finally:
                notice = lead.loss
                await self.resign()
            if notice is None:
                if stop is None:
                    return result
                continue
            if on_lost is not None:
                on_lost(notice)
            # Our daemon may still be cleaning up after the loss.
            await asyncio.sleep(1.0)
        return None


async def leader(spec: Union[str, LeaseSpec], *, run_dir: Optional[str] = None) -> LeaderInfo:
    """``lockd.leader`` in the executor."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(None, functools.partial(_lease.leader, spec,
                                                              run_dir=run_dir))


async def locks(lockspace: str, leases: Optional[Iterable[Union[str, LeaseSpec]]] = None, *,
                run_dir: Optional[str] = None) -> List[LockInfo]:
    """``lockd.locks`` in the executor."""
    loop = asyncio.get_running_loop()
    specs = None if leases is None else list(leases)
    return await loop.run_in_executor(None, functools.partial(_lease.locks, lockspace, specs,
                                                              run_dir=run_dir))
