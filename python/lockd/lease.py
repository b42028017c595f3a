"""``Lease``: one resource lease held by this process, its fencing token and its
lost-lease notice; ``LeaseSpec``; ``locks()``.

Mirrors client-lib/src/lease.rs. A ``Lease`` is one *registered* connection to the
daemon holding the lease (sanlock's model: the daemon releases it when the connection
closes, i.e. when the process dies) and, on lockd, a *watch* connection
(``LOCKD_CMD_WATCH``) read by one thread. The lease is declared lost — once, for good —
when:

* the daemon announces ``renewal_failing``, ``lockspace_failed``, ``lockspace_removed``
  for its lockspace, or ``requested`` for its resource; the daemon sends these *before*
  it starts the kill escalation for them;
* the watch connection closes (``daemon_gone``: the daemon died);
* no heartbeat arrives for ``SILENCE_LIMIT`` seconds (``daemon_silent``: the daemon is
  stopped or hung, so nothing renews our host_id).

On a sanlock daemon (no extensions) only ``daemon_gone`` exists: the registered
connection is watched for EOF.

Invariants: ``token`` is the lease version (lver) at which we acquired: strictly greater
than every earlier holder's on any host (disk Paxos). A loss is final: ``lost`` is never
cleared. The watch is open before the acquire, so a loss decided while we acquire is not
missed. A lost lease is not RELEASEd on exit (the release could block on failed
storage); closing the registered connection gives it back. An acquire stopped by
``cancel()`` (or by an exception in it) closes its registration, so it leaves nothing
held.
"""

from __future__ import annotations

import errno
import os
import re
import select
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union, overload

from . import _conn
from . import _wire as w
from .errors import (BUSY_CODES, BadSpec, Cancelled, DaemonGone, LeaseHeld, Refused,
                     Timeout)
from .results import Holder, LeaderInfo, LockInfo, Waiter

#: With no heartbeat for this long, the daemon is taken for stopped and the lease lost.
SILENCE_LIMIT = 3.0
_BACKOFF_START = 0.2
_BACKOFF_MAX = 2.0

_SIZE = re.compile(r"^([0-9]+)([kKmMgG]?)$")


class _Unset:
    """The default of ``Lease.acquire``'s ``timeout``: not given."""

    def __repr__(self) -> str:
        return "<unset>"


_UNSET = _Unset()


def _size(text: str) -> Optional[int]:
    """A byte count with an optional K/M/G suffix (powers of 1024), or None."""
    m = _SIZE.match(text)
    if not m:
        return None
    return int(m.group(1)) * {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[m.group(2).lower()]


class LeaseSpec:
    """Where a lease lives: ``LOCKSPACE:NAME:PATH:OFFSET`` (OFFSET takes a K/M/G suffix,
    powers of 1024; PATH may contain ``:``, the last field is the offset), or on several
    disks (up to 4, sanlock's num_disks) ``LOCKSPACE:NAME:PATH:OFFSET:PATH2:OFFSET2...``:
    ``path``/``offset`` are the first disk, ``more_disks`` the others."""

    __slots__ = ("lockspace", "name", "path", "offset", "more_disks")

    def __init__(self, lockspace: str, name: str, path: str, offset: int,
                 more_disks: Sequence[Tuple[str, int]] = ()) -> None:
        _conn.check_name(lockspace, "lockspace name")
        _conn.check_name(name, "resource name")
        if len(more_disks) > 3:
            raise BadSpec("a lease has at most 4 disks")
        for p, o in [(path, offset), *more_disks]:
            if not p:
                raise BadSpec("empty path")
            if len(p.encode()) >= w.PATH_LEN or "\0" in p:
                raise BadSpec("path too long or contains NUL")
            if not isinstance(o, int) or o < 0 or o >= 2**64:
                raise BadSpec(f"offset {o!r} is not a byte offset")
        self.lockspace, self.name, self.path, self.offset = lockspace, name, path, offset
        self.more_disks: Tuple[Tuple[str, int], ...] = tuple(more_disks)

    @classmethod
    def parse(cls, text: Union[str, LeaseSpec]) -> LeaseSpec:
        """A ``LeaseSpec`` from ``LOCKSPACE:NAME:PATH:OFFSET[:PATH:OFFSET]...`` (a
        ``LeaseSpec`` is returned as it is); ``BadSpec`` when it is not one."""
        if isinstance(text, LeaseSpec):
            return text
        if not isinstance(text, str):
            raise BadSpec(f"lease spec must be a string, not {type(text).__name__}")
        parts = text.split(":", 2)
        if len(parts) < 3:
            raise BadSpec(f"invalid lease {text!r}: want LOCKSPACE:NAME:PATH:OFFSET")
        ls, name, rest = parts
        fields = rest.split(":")
        pairs: Optional[List[Tuple[str, int]]] = None
        if len(fields) >= 4 and len(fields) % 2 == 0:
            sizes = [_size(f) for f in fields[1::2]]
            if all(x is not None for x in sizes):
                pairs = [(p, x) for p, x in zip(fields[0::2], sizes) if x is not None]
        if pairs is None:
            path, sep, off = rest.rpartition(":")
            if not sep:
                raise BadSpec(f"invalid lease {text!r}: no offset (want LOCKSPACE:NAME:PATH:OFFSET)")
            size = _size(off)
            if size is None:
                raise BadSpec(f"invalid lease {text!r}: offset {off!r} is not a number")
            pairs = [(path, size)]
        try:
            return cls(ls, name, pairs[0][0], pairs[0][1], pairs[1:])
        except BadSpec as e:
            raise BadSpec(f"invalid lease {text!r}: {e.args[0].split(' (')[0]}") from None

    def disks(self) -> List[Tuple[str, int]]:
        """Every disk of the lease, the first one first."""
        return [(self.path, self.offset), *self.more_disks]

    def short(self) -> str:
        """``LOCKSPACE:NAME``, as ``LOCKD_LEASE`` carries it."""
        return f"{self.lockspace}:{self.name}"

    def resource(self, flags: int = 0) -> bytes:
        """The lease as a ``sanlk_resource`` with its disks."""
        return w.resource(self.lockspace, self.name, self.disks(), flags=flags)

    def __str__(self) -> str:
        disks = "".join(f":{p}:{o}" for p, o in self.disks())
        return f"{self.lockspace}:{self.name}{disks}"

    def __repr__(self) -> str:
        return f"LeaseSpec({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LeaseSpec) and str(self) == str(other)

    def __hash__(self) -> int:
        return hash(str(self))


@dataclass(frozen=True)
class LossNotice:
    """Why a lease can no longer be trusted.

    ``reason``: ``renewal_failing``, ``lockspace_failed``, ``lockspace_removed``,
    ``requested``, ``daemon_gone`` or ``daemon_silent``. ``kill_in`` / ``watchdog_in``:
    seconds left (from ``at``, our monotonic clock) before the daemon's kill escalation
    reaches this process and before the watchdog resets the host; 0 when it has started
    or is immediate, ``None`` when unknown (daemon gone) or not applicable (no watchdog).
    ``force_mode`` for ``requested``: 1 FORCE, 2 GRACEFUL.
    """

    reason: str
    kill_in: Optional[float] = None
    watchdog_in: Optional[float] = None
    force_mode: int = 0
    renewal_age: Optional[float] = None
    at: float = field(default_factory=time.monotonic)

    def kill_left(self) -> Optional[float]:
        """Seconds left now before the kill escalation (None when unknown)."""
        if self.kill_in is None:
            return None
        return max(0.0, self.kill_in - (time.monotonic() - self.at))

    def as_dict(self) -> Dict[str, object]:
        """``reason``, ``kill_in``, ``watchdog_in`` and ``force_mode`` as a dict."""
        return {"reason": self.reason, "kill_in": self.kill_in,
                "watchdog_in": self.watchdog_in, "force_mode": self.force_mode}


def _ms(v: Optional[int]) -> Optional[float]:
    return None if v is None else max(0, v) / 1000.0


def _loss_of(event: w.WatchEvent, spec: LeaseSpec) -> Optional[LossNotice]:
    """The LossNotice an event means for ``spec``, or None (client-lib's loss_reason)."""
    if event.kind == "heartbeat" or event.lockspace != spec.lockspace:
        return None
    if event.kind == "requested" and event.resource != spec.name:
        return None
    return LossNotice(event.kind, _ms(event.kill_in_ms), _ms(event.watchdog_in_ms),
                      event.force_mode, event.renewal_age_ms / 1000.0)


def _default_owner() -> str:
    arg0 = sys.argv[0] if sys.argv and sys.argv[0] else ""
    base = os.path.basename(arg0) if arg0 and not arg0.startswith("-") else "python"
    return f"{base}-{os.getpid()}"[:48]


def _check_timeout(timeout: Optional[float]) -> None:
    if timeout is not None and (isinstance(timeout, bool)
                                or not isinstance(timeout, (int, float)) or timeout < 0):
        raise BadSpec(f"timeout must be None or seconds >= 0, not {timeout!r}")


#: ``on_lost`` callbacks.
LossCallback = Callable[[LossNotice], object]


class Lease:
    """A resource lease held by this process: ``with lockd.Lease(spec) as lease:``.

    ``timeout``: ``None`` waits until the holder elsewhere goes (retrying with back-off
    0.2 s doubling to 2 s), ``0`` tries once (``LeaseHeld`` at once, without waiting on
    an owner whose liveness the daemon does not know yet), else seconds to keep trying
    (``Timeout``, naming the owner). ``run_dir`` defaults as the CLI
    (``$SANLOCK_RUN_DIR``, ``$LOCKD_RUN_DIR``, ``/run/lockd``). ``owner`` is the name
    the daemon shows for us. ``restrict``: SANLK_RESTRICT_* flags for the registration
    (``lockd.RESTRICT_SIGKILL``: the daemon sends SIGTERM where it would send SIGKILL).

    Two forms of acquire: ``acquire()`` raises (``LeaseHeld``, ``Timeout``) and returns
    the lease; ``acquire(blocking, timeout)`` returns True or False (kazoo's and
    python-etcd3's shape). ``cancel()``, from another thread, stops either with
    ``Cancelled``.
    """

    def __init__(self, spec: Union[str, LeaseSpec], *, shared: bool = False,
                 timeout: Optional[float] = None, run_dir: Optional[str] = None,
                 owner: Optional[str] = None, restrict: int = 0) -> None:
        self.spec: LeaseSpec = LeaseSpec.parse(spec)
        _check_timeout(timeout)
        self.shared = bool(shared)
        self.timeout: Optional[float] = timeout
        self.run_dir: str = run_dir or _conn.default_run_dir()
        self.owner: str = owner or _default_owner()
        self.restrict = restrict
        self.token: Optional[int] = None
        self.lost = threading.Event()
        self.loss: Optional[LossNotice] = None
        self._lock = threading.Lock()
        self._callbacks: List[LossCallback] = []
        self._closing = False
        self._client: Optional[_conn.Conn] = None
        self._watch: Optional[_conn.Conn] = None
        self._thread: Optional[threading.Thread] = None
        # An acquire under way: cancel() sets _cancel and shuts its registration down.
        self._acq_lock = threading.Lock()
        self._acquiring = False
        self._acq_conn: Optional[_conn.Conn] = None
        self._cancel = threading.Event()

    # -- acquire / release -------------------------------------------------------------

    @overload
    def acquire(self) -> Lease: ...

    @overload
    def acquire(self, blocking: bool,
                timeout: Union[float, None, _Unset] = ...) -> bool: ...

    @overload
    def acquire(self, *, timeout: Optional[float]) -> bool: ...

    def acquire(self, blocking: Optional[bool] = None,
                timeout: Union[float, None, _Unset] = _UNSET) -> Union[Lease, bool]:
        """Acquires the lease.

        ``acquire()``, with no argument, waits as the lease's ``timeout`` says and raises
        when it does not get the lease (``LeaseHeld``; ``Timeout`` after the timeout);
        it returns the lease itself.

        ``acquire(blocking=True, timeout=None)``, with either argument, returns True
        when it got the lease and False when another holder kept it: ``blocking=False``
        tries once; else it keeps trying ``timeout`` seconds (``None``: the lease's own
        ``timeout``, which by default waits until the holder goes).

        Both forms raise ``Cancelled`` when ``cancel()`` stopped them, and the other
        errors (``Refused``, ``DaemonGone``, ...) as they come; nothing is held then.
        """
        if blocking is None and isinstance(timeout, _Unset):
            return self._acquire(self.timeout)
        if blocking is False:
            wait: Optional[float] = 0
        elif timeout is None or isinstance(timeout, _Unset):
            wait = self.timeout
        else:
            _check_timeout(timeout)
            wait = timeout
        try:
            self._acquire(wait)
        except LeaseHeld:  # also Timeout
            return False
        return True

    def cancel(self) -> None:
        """Stops an acquire under way in another thread: it raises ``Cancelled`` and
        holds nothing (its registration is closed, so an ACQUIRE the daemon was still
        deciding is given back). No effect when no acquire is under way or once it has
        got the lease."""
        with self._acq_lock:
            if not self._acquiring:
                return
            self._cancel.set()
            conn = self._acq_conn
            if conn is not None:
                try:
                    conn.sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def _check_cancel(self) -> None:
        if self._cancel.is_set():
            raise Cancelled(self.spec.short())

    def _acquire(self, timeout: Optional[float],
                 cancel: Optional[threading.Event] = None) -> Lease:
        """The raising form with ``timeout`` (see ``acquire``). ``cancel``: an event that
        stops this acquire when set, even before it started (``lockd.aio`` sets it when
        its await is cancelled); ``cancel()`` sets it too."""
        with self._acq_lock:
            if self._client is not None:
                raise Refused(f"lease {self.spec.short()} is already held by this object",
                              -errno.EBUSY)
            if self._acquiring:
                raise Refused(f"lease {self.spec.short()}: an acquire is already under way",
                              -errno.EBUSY)
            self._acquiring = True
            self._cancel = cancel if cancel is not None else threading.Event()
        self._closing = False
        client: Optional[_conn.Conn] = None
        try:
            self._check_cancel()
            kind = _conn.daemon_kind(self.run_dir)
            if kind == "lockd":
                self._open_watch()
            client = self._register()
            with self._acq_lock:
                self._acq_conn = client
            self._check_cancel()
            token = self._acquire_on(client, timeout)
            with self._acq_lock:
                # The commit point: a cancel() from now on finds nothing under way.
                self._check_cancel()
                self._acquiring = False
                self._acq_conn = None
                self._client = client
                self.token = token
        except BaseException as e:
            self._closing = True
            if client is not None:
                client.close()
            self._stop_watch()
            with self._acq_lock:
                self._acquiring = False
                self._acq_conn = None
                cancelled = self._cancel.is_set()
            if cancelled and not isinstance(e, Cancelled) and isinstance(e, Exception):
                raise Cancelled(self.spec.short()) from None
            raise
        if self._watch is None:
            # sanlock: the registered connection's EOF is the only notice there is.
            self._thread = threading.Thread(target=self._eof_loop, name="lockd-lease-eof",
                                            daemon=True)
            self._thread.start()
        return self

    def _acquire_on(self, client: _conn.Conn, timeout: Optional[float]) -> int:
        """ACQUIRE on the registration ``client`` until it is ours (its token) or
        ``timeout`` runs out."""
        started = time.monotonic()
        backoff = _BACKOFF_START
        flags = w.SANLK_ACQUIRE_OWNER_NOWAIT if timeout == 0 else 0
        res = self.spec.resource(w.SANLK_RES_SHARED if self.shared else 0)
        payload = res + w.options(self.owner)
        while True:
            h, _ = client.call(w.SM_CMD_ACQUIRE, flags, 1, 0xFFFFFFFF, payload)
            rv = h.result
            if rv == 0:
                break
            self._check_cancel()
            if rv not in BUSY_CODES:
                raise Refused(f"acquire {self.spec}", rv)
            waited = time.monotonic() - started
            if timeout == 0:
                raise LeaseHeld(self.spec.short(), rv, self._owner())
            if timeout is not None and waited >= timeout:
                raise Timeout(self.spec.short(), rv, waited, self._owner())
            sleep = backoff
            if timeout is not None:
                sleep = min(sleep, max(0.0, timeout - waited))
            if self._cancel.wait(sleep):
                self._check_cancel()
            backoff = min(backoff * 2, _BACKOFF_MAX)
        return self._token_of(client)

    def _register(self) -> _conn.Conn:
        c = _conn.Conn(self.run_dir)
        try:
            c.send(w.SM_CMD_REGISTER)  # no reply
            if self.restrict:
                h, _ = c.call(w.SM_CMD_RESTRICT, self.restrict, 0, 0xFFFFFFFF)
                if h.result < 0:
                    raise Refused("restrict", h.result)
        except BaseException:
            c.close()
            raise
        return c

    def _owner(self) -> Optional[LeaderInfo]:
        try:
            return _conn.owner_info(self.run_dir, self.spec.lockspace, self.spec.name,
                                    self.spec.path, self.spec.offset)
        except Exception:  # noqa: BLE001 - the busy error is reported without its owner
            return None

    def _token_of(self, client: _conn.Conn) -> int:
        """The lver we hold: INQUIRE on our registration (exclusive); for a shared lease
        INQUIRE shows ``:SH``, and the token is the leader record's lver."""
        h, p = client.call(w.SM_CMD_INQUIRE, 0, 0, 0xFFFFFFFF)
        if h.result < 0:
            raise Refused(f"inquire {self.spec.short()}", h.result)
        prefix = f"{self.spec.lockspace}:{self.spec.name}:"
        for item in w.c_text(p).split():
            if not item.startswith(prefix):
                continue
            last = item.rsplit(":", 1)[1]
            if last == "SH":
                lver, _, _ = _conn.read_resource_owners(
                    self.run_dir, self.spec.lockspace, self.spec.name, self.spec.path,
                    self.spec.offset)
                return lver
            if last.isdigit():
                return int(last)
        raise Refused(f"inquire: {self.spec.short()} not listed after acquire", -errno.ENOENT)

    def release(self) -> None:
        """Releases the lease (also done when the ``with`` block ends). A lost lease is
        not RELEASEd: closing our registration gives it back without blocking on storage
        that may have failed."""
        self._closing = True
        self._stop_watch()
        client, self._client = self._client, None
        if client is None:
            return
        try:
            if not self.lost.is_set():
                head = w.resource(self.spec.lockspace, self.spec.name, (),
                                  flags=w.SANLK_RES_SHARED if self.shared else 0)
                try:
                    h, _ = client.call(w.SM_CMD_RELEASE, 0, 1, 0xFFFFFFFF, head)
                except DaemonGone:
                    return
                if h.result < 0:
                    raise Refused(f"release {self.spec.short()}", h.result)
        finally:
            client.close()
            if self._thread is not None and self._thread is not threading.current_thread():
                self._thread.join(timeout=5)

    def __enter__(self) -> Lease:
        """Acquires, unless ``acquire()`` already did."""
        if self._client is not None:
            return self
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        """Releases."""
        self.release()

    # -- loss ------------------------------------------------------------------------

    def on_lost(self, callback: LossCallback) -> None:
        """Calls ``callback(notice)`` once when the lease is lost, from the watch thread
        (at once, from this thread, if it already is)."""
        with self._lock:
            if self.loss is None:
                self._callbacks.append(callback)
                return
        callback(self.loss)

    def wait_lost(self, timeout: Optional[float] = None) -> Optional[LossNotice]:
        """Blocks until the lease is lost (returns the notice) or ``timeout`` passes
        (returns None)."""
        if self.lost.wait(timeout):
            return self.loss
        return None

    @property
    def is_trusted(self) -> bool:
        """False once a loss notice arrived (spindle's has-lock)."""
        return not self.lost.is_set() and self._client is not None

    def _declare(self, notice: LossNotice) -> None:
        with self._lock:
            if self.loss is not None:
                return
            self.loss = notice
            cbs, self._callbacks = self._callbacks, []
        self.lost.set()
        for cb in cbs:
            try:
                cb(notice)
            except Exception as e:  # noqa: BLE001 - a callback must not kill the watch
                print(f"lockd: on_lost callback failed: {e!r}", file=sys.stderr)

    def _gone(self, reason: str) -> None:
        if not self._closing:
            self._declare(LossNotice(reason))

    def _open_watch(self) -> None:
        c = _conn.Conn(self.run_dir)
        try:
            h, _ = c.ext_call(w.LOCKD_CMD_WATCH, header_only=True)
            if h.result < 0:
                raise Refused("watch", h.result)
        except BaseException:
            c.close()
            raise
        interval = min(max(h.data2, 50), 1000) / 1000.0
        self._watch = c
        self._thread = threading.Thread(target=self._watch_loop, args=(c.sock, interval),
                                        name="lockd-lease-watch", daemon=True)
        self._thread.start()

    def _stop_watch(self) -> None:
        c, self._watch = self._watch, None
        if c is not None:
            try:
                c.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            if self._thread is not None and self._thread is not threading.current_thread():
                self._thread.join(timeout=5)
            c.close()

    def _watch_loop(self, sock: socket.socket, interval: float) -> None:
        silence = max(SILENCE_LIMIT, interval * 4)
        sock.settimeout(interval)
        size = w.HEADER.size + w.WATCH_EVENT.size
        buf = b""
        chunk: Optional[bytes]
        last_heard = time.monotonic()
        while not self._closing and self.loss is None:
            try:
                chunk = sock.recv(4096)
            except socket.timeout:
                chunk = None
            except InterruptedError:
                chunk = None
            except OSError:
                self._gone("daemon_gone")
                return
            if chunk == b"":
                self._gone("daemon_gone")
                return
            if chunk:
                buf += chunk
            while len(buf) >= w.HEADER.size:
                try:
                    h = w.decode_header(buf[:w.HEADER.size])
                except w.WireError:
                    # Not a message boundary we can trust: the watch is unusable.
                    self._gone("daemon_gone")
                    return
                if len(buf) < w.HEADER.size + h.payload_len:
                    break
                msg = buf[:w.HEADER.size + h.payload_len]
                buf = buf[len(msg):]
                last_heard = time.monotonic()
                if h.cmd != w.LOCKD_MSG_WATCH_EVENT or len(msg) != size:
                    continue
                try:
                    ev = w.decode_watch_event(msg[w.HEADER.size:])
                except w.WireError:
                    continue
                notice = _loss_of(ev, self.spec)
                if notice is not None:
                    self._declare(notice)
                    return
            if time.monotonic() - last_heard > silence:
                self._gone("daemon_silent")
                return

    def _eof_loop(self) -> None:
        """sanlock: the registered connection gets EOF when the daemon dies. Polled, never
        read (the socket's blocking mode belongs to the caller's thread)."""
        client = self._client
        if client is None:
            return
        sock = client.sock
        poller = select.poll()
        poller.register(sock.fileno(), select.POLLIN | select.POLLHUP | select.POLLERR
                        | getattr(select, "POLLRDHUP", 0x2000))
        while not self._closing:
            try:
                ready = poller.poll(500)
            except InterruptedError:
                continue
            except (OSError, ValueError):
                break
            if not ready:
                continue
            mask = ready[0][1]
            if mask & (select.POLLHUP | select.POLLERR | getattr(select, "POLLRDHUP", 0x2000)):
                break
            try:
                data = sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
            except BlockingIOError:
                continue
            except OSError:
                break
            if data == b"":
                break
            time.sleep(0.1)
        self._gone("daemon_gone")

    def __repr__(self) -> str:
        return (f"<lockd.Lease {self.spec.short()} token={self.token} "
                f"{'lost ' + self.loss.reason if self.loss else 'held' if self._client else 'not held'}>")


def leader(spec: Union[str, LeaseSpec], *, run_dir: Optional[str] = None) -> LeaderInfo:
    """Who holds ``spec`` now (lockd's LEADER; on sanlock from READ_RESOURCE_OWNERS), a
    ``LeaderInfo``; host_id 0 and state ``none`` when nobody holds it (``token`` is then
    the last one given)."""
    s = LeaseSpec.parse(spec)
    return _conn.owner_info(run_dir or _conn.default_run_dir(), s.lockspace, s.name, s.path,
                            s.offset)


def locks(lockspace: str, leases: Optional[Iterable[Union[str, LeaseSpec]]] = None, *,
          run_dir: Optional[str] = None) -> List[LockInfo]:
    """Who holds what in ``lockspace``: a list of ``LockInfo``, one per lease, sorted by
    name.

    ``leases``: the lease specs to report cluster-wide (a lockspace has no list of its
    leases, so the caller names them, as Shaken Fist knows its lock names); by default
    the leases held through this daemon. Each ``LockInfo``: ``lockspace``,
    ``resource``, ``spec``, ``owner_host_id`` (0: free), ``owner_host_name``, ``token``
    (the holder's, or the last one given), ``state`` (the owner host's state in this
    daemon's view: ``live``, ``fail``, ``dead``, ``unknown``, ``none``), ``shared``,
    ``holders``: the local processes holding it (``Holder``: ``pid``, ``name``,
    ``token``, ``mode`` EX/SH), and ``waiting``: the local candidates waiting for it
    (``Waiter``: ``pid``, ``name``, ``waiting_s``; lockd only — a registered client whose
    last acquire of it was refused as busy).
    """
    run_dir = run_dir or _conn.default_run_dir()
    _conn.check_name(lockspace, "lockspace name")
    recs = _conn.status(run_dir, 4)
    names = {r.data32: r.name for r in recs
             if r.type == w.SANLK_STATE_CLIENT and r.data32 > 0}
    now = 0
    for r in recs:
        if r.type == w.SANLK_STATE_DAEMON:
            mt = w.parse_details(r.text).get("monotime", "")
            now = int(mt) if mt.isdigit() else 0
    waiting: Dict[str, List[Waiter]] = {}
    for r in recs:
        if r.type != w.SANLK_STATE_CLIENT or r.data32 <= 0:
            continue
        d = w.parse_details(r.text)
        ls, _, res_name = d.get("waiting", "").partition(":")
        if ls == lockspace and res_name:
            since = d.get("waiting_since", "")
            waiting.setdefault(res_name, []).append(Waiter(
                pid=r.data32, name=r.name,
                waiting_s=max(0, now - int(since)) if since.isdigit() and now else None))
    local: Dict[str, List[Holder]] = {}
    specs: Dict[str, LeaseSpec] = {}
    for r in recs:
        res = r.resource
        if r.type != w.SANLK_STATE_RESOURCE or res is None or res.lockspace != lockspace:
            continue
        d = w.parse_details(r.text)
        try:
            flags = int(d.get("flags", "0"), 16)
        except ValueError:
            flags = res.flags
        lver = int(d["lver"]) if d.get("lver", "").isdigit() else r.data64
        if r.data32 > 0:
            local.setdefault(res.name, []).append(Holder(
                pid=r.data32, name=names.get(r.data32, ""), token=lver,
                mode="SH" if flags & w.SANLK_RES_SHARED else "EX"))
        if res.disks:
            path, off = res.disks[0]
            specs.setdefault(res.name, LeaseSpec(lockspace, res.name, path, off))
    if leases is not None:
        specs = {}
        for text in leases:
            s = LeaseSpec.parse(text)
            if s.lockspace != lockspace:
                raise BadSpec(f"lease {s} is not in lockspace {lockspace}")
            specs[s.name] = s
    out = []
    for name in sorted(specs):
        s = specs[name]
        o = _conn.owner_info(run_dir, s.lockspace, s.name, s.path, s.offset)
        out.append(LockInfo(
            lockspace=lockspace, resource=name, spec=str(s), owner_host_id=o.host_id,
            owner_host_name=o.host_name, token=o.token, state=o.state, shared=o.shared,
            holders=tuple(local.get(name, ())), waiting=tuple(waiting.get(name, ()))))
    return out
