"""asyncio variants: ``async with lockd.aio.Lease(spec) as lease`` and
``await lease.wait_lost()``.

The blocking protocol work (acquire, release) runs in the loop's default executor; the
loss notice is delivered to the event loop with ``call_soon_threadsafe`` from the watch
thread, so ``lease.lost`` is an ``asyncio.Event`` set in the loop's own thread.
"""

import asyncio

from . import lease as _lease


class Lease:
    """``lockd.Lease`` for asyncio: same arguments; ``token``, ``loss``, ``lost`` (an
    ``asyncio.Event``), ``await wait_lost(timeout=None)``, ``on_lost(cb)``."""

    def __init__(self, spec, **kwargs):
        self._inner = _lease.Lease(spec, **kwargs)
        self.lost = asyncio.Event()
        self._loop = None

    @property
    def spec(self):
        return self._inner.spec

    @property
    def token(self):
        return self._inner.token

    @property
    def loss(self):
        return self._inner.loss

    def on_lost(self, callback):
        """``callback(notice)`` runs once in the watch thread when the lease is lost."""
        self._inner.on_lost(callback)

    async def acquire(self):
        self._loop = asyncio.get_running_loop()
        await self._loop.run_in_executor(None, self._inner.acquire)
        self._inner.on_lost(lambda _n: self._loop.call_soon_threadsafe(self.lost.set))
        return self

    async def release(self):
        loop = self._loop or asyncio.get_running_loop()
        await loop.run_in_executor(None, self._inner.release)

    async def wait_lost(self, timeout=None):
        """The loss notice once the lease is lost; None if ``timeout`` passes first."""
        try:
            await asyncio.wait_for(self.lost.wait(), timeout)
        except asyncio.TimeoutError:
            return None
        return self._inner.loss

    async def __aenter__(self):
        return await self.acquire()

    async def __aexit__(self, *exc):
        await self.release()
        return False
