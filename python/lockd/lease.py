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
storage); closing the registered connection gives it back.
"""

import errno
import os
import re
import select
import socket
import sys
import threading
import time

from . import _conn
from . import _wire as w
from .errors import BUSY_CODES, BadSpec, DaemonGone, LeaseHeld, Refused, Timeout

#: With no heartbeat for this long, the daemon is taken for stopped and the lease lost.
SILENCE_LIMIT = 3.0
_BACKOFF_START = 0.2
_BACKOFF_MAX = 2.0

_SIZE = re.compile(r"^([0-9]+)([kKmMgG]?)$")


class LeaseSpec:
    """Where a lease lives: ``LOCKSPACE:NAME:PATH:OFFSET`` (OFFSET takes a K/M/G suffix,
    powers of 1024; PATH may contain ``:``, the last field is the offset)."""

    __slots__ = ("lockspace", "name", "path", "offset")

    def __init__(self, lockspace, name, path, offset):
        _conn.check_name(lockspace, "lockspace name")
        _conn.check_name(name, "resource name")
        if not path:
            raise BadSpec("empty path")
        if len(path.encode()) >= w.PATH_LEN or "\0" in path:
            raise BadSpec("path too long or contains NUL")
        if not isinstance(offset, int) or offset < 0 or offset >= 2**64:
            raise BadSpec(f"offset {offset!r} is not a byte offset")
        self.lockspace, self.name, self.path, self.offset = lockspace, name, path, offset

    @classmethod
    def parse(cls, text):
        if isinstance(text, LeaseSpec):
            return text
        if not isinstance(text, str):
            raise BadSpec(f"lease spec must be a string, not {type(text).__name__}")
        parts = text.split(":", 2)
        if len(parts) < 3:
            raise BadSpec(f"invalid lease {text!r}: want LOCKSPACE:NAME:PATH:OFFSET")
        ls, name, rest = parts
        path, sep, off = rest.rpartition(":")
        if not sep:
            raise BadSpec(f"invalid lease {text!r}: no offset (want LOCKSPACE:NAME:PATH:OFFSET)")
        m = _SIZE.match(off)
        if not m:
            raise BadSpec(f"invalid lease {text!r}: offset {off!r} is not a number")
        mult = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[m.group(2).lower()]
        try:
            return cls(ls, name, path, int(m.group(1)) * mult)
        except BadSpec as e:
            raise BadSpec(f"invalid lease {text!r}: {e.args[0].split(' (')[0]}") from None

    def short(self):
        """``LOCKSPACE:NAME``, as ``LOCKD_LEASE`` carries it."""
        return f"{self.lockspace}:{self.name}"

    def resource(self, flags=0):
        return w.resource(self.lockspace, self.name, [(self.path, self.offset)], flags=flags)

    def __str__(self):
        return f"{self.lockspace}:{self.name}:{self.path}:{self.offset}"

    def __repr__(self):
        return f"LeaseSpec({str(self)!r})"

    def __eq__(self, other):
        return isinstance(other, LeaseSpec) and str(self) == str(other)

    def __hash__(self):
        return hash(str(self))


class LossNotice:
    """Why a lease can no longer be trusted.

    ``reason``: ``renewal_failing``, ``lockspace_failed``, ``lockspace_removed``,
    ``requested``, ``daemon_gone`` or ``daemon_silent``. ``kill_in`` / ``watchdog_in``:
    seconds left (from ``at``, our monotonic clock) before the daemon's kill escalation
    reaches this process and before the watchdog resets the host; 0 when it has started
    or is immediate, ``None`` when unknown (daemon gone) or not applicable (no watchdog).
    ``force_mode`` for ``requested``: 1 FORCE, 2 GRACEFUL.
    """

    __slots__ = ("reason", "at", "kill_in", "watchdog_in", "force_mode", "renewal_age")

    def __init__(self, reason, kill_in=None, watchdog_in=None, force_mode=0, renewal_age=None):
        self.reason = reason
        self.at = time.monotonic()
        self.kill_in = kill_in
        self.watchdog_in = watchdog_in
        self.force_mode = force_mode
        self.renewal_age = renewal_age

    def kill_left(self):
        """Seconds left now before the kill escalation (None when unknown)."""
        if self.kill_in is None:
            return None
        return max(0.0, self.kill_in - (time.monotonic() - self.at))

    def as_dict(self):
        return {"reason": self.reason, "kill_in": self.kill_in,
                "watchdog_in": self.watchdog_in, "force_mode": self.force_mode}

    def __repr__(self):
        return (f"LossNotice(reason={self.reason!r}, kill_in={self.kill_in!r}, "
                f"watchdog_in={self.watchdog_in!r})")


def _ms(v):
    return None if v is None else max(0, v) / 1000.0


def _loss_of(event, spec):
    """The LossNotice an event means for ``spec``, or None (client-lib's loss_reason)."""
    if event["kind"] == "heartbeat" or event["lockspace"] != spec.lockspace:
        return None
    if event["kind"] == "requested" and event["resource"] != spec.name:
        return None
    return LossNotice(event["kind"], _ms(event["kill_in_ms"]), _ms(event["watchdog_in_ms"]),
                      event["force_mode"], event["renewal_age_ms"] / 1000.0)


def _default_owner():
    arg0 = sys.argv[0] if sys.argv and sys.argv[0] else ""
    base = os.path.basename(arg0) if arg0 and not arg0.startswith("-") else "python"
    return f"{base}-{os.getpid()}"[:48]


class Lease:
    """A resource lease held by this process: ``with lockd.Lease(spec) as lease:``.

    ``timeout``: ``None`` waits until the holder elsewhere goes (retrying with back-off
    0.2 s doubling to 2 s), ``0`` tries once (``LeaseHeld`` at once, without waiting on
    an owner whose liveness the daemon does not know yet), else seconds to keep trying
    (``Timeout``, naming the owner). ``run_dir`` defaults as the CLI
    (``$SANLOCK_RUN_DIR``, ``$LOCKD_RUN_DIR``, ``/run/lockd``). ``owner`` is the name
    the daemon shows for us. ``restrict``: SANLK_RESTRICT_* flags for the registration
    (``lockd.RESTRICT_SIGKILL``: the daemon sends SIGTERM where it would send SIGKILL).
    """

    def __init__(self, spec, *, shared=False, timeout=None, run_dir=None, owner=None,
                 restrict=0):
        self.spec = LeaseSpec.parse(spec)
        if timeout is not None and (not isinstance(timeout, (int, float)) or timeout < 0):
            raise BadSpec(f"timeout must be None or seconds >= 0, not {timeout!r}")
        self.shared = bool(shared)
        self.timeout = timeout
        self.run_dir = run_dir or _conn.default_run_dir()
        self.owner = owner or _default_owner()
        self.restrict = restrict
        self.token = None
        self.lost = threading.Event()
        self.loss = None
        self._lock = threading.Lock()
        self._callbacks = []
        self._closing = False
        self._client = None
        self._watch = None
        self._thread = None

    # -- acquire / release -------------------------------------------------------------

    def acquire(self):
        """Acquires the lease (see the class doc for ``timeout``); returns self."""
        if self._client is not None:
            raise Refused(f"lease {self.spec.short()} is already held by this object", -errno.EBUSY)
        kind = _conn.daemon_kind(self.run_dir)
        if kind == "lockd":
            self._open_watch()
        started = time.monotonic()
        backoff = _BACKOFF_START
        client = None
        try:
            client = self._register()
            flags = w.SANLK_ACQUIRE_OWNER_NOWAIT if self.timeout == 0 else 0
            res = self.spec.resource(w.SANLK_RES_SHARED if self.shared else 0)
            payload = res + w.options(self.owner)
            while True:
                h, _ = client.call(w.SM_CMD_ACQUIRE, flags, 1, 0xFFFFFFFF, payload)
                rv = h["result"]
                if rv == 0:
                    break
                if rv not in BUSY_CODES:
                    raise Refused(f"acquire {self.spec}", rv)
                waited = time.monotonic() - started
                if self.timeout == 0:
                    raise LeaseHeld(self.spec.short(), rv, self._owner())
                if self.timeout is not None and waited >= self.timeout:
                    raise Timeout(self.spec.short(), rv, waited, self._owner())
                sleep = backoff
                if self.timeout is not None:
                    sleep = min(sleep, max(0.0, self.timeout - waited))
                time.sleep(sleep)
                backoff = min(backoff * 2, _BACKOFF_MAX)
            self.token = self._token_of(client)
        except BaseException:
            self._closing = True
            if client is not None:
                client.close()
            self._stop_watch()
            raise
        self._client = client
        if self._watch is None:
            # sanlock: the registered connection's EOF is the only notice there is.
            self._thread = threading.Thread(target=self._eof_loop, name="lockd-lease-eof",
                                            daemon=True)
            self._thread.start()
        return self

    def _register(self):
        c = _conn.Conn(self.run_dir)
        try:
            c.send(w.SM_CMD_REGISTER)  # no reply
            if self.restrict:
                h, _ = c.call(w.SM_CMD_RESTRICT, self.restrict, 0, 0xFFFFFFFF)
                if h["result"] < 0:
                    raise Refused("restrict", h["result"])
        except BaseException:
            c.close()
            raise
        return c

    def _owner(self):
        try:
            return _conn.owner_info(self.run_dir, self.spec.lockspace, self.spec.name,
                                    self.spec.path, self.spec.offset)
        except Exception:  # noqa: BLE001 - the busy error is reported without its owner
            return None

    def _token_of(self, client):
        """The lver we hold: INQUIRE on our registration (exclusive); for a shared lease
        INQUIRE shows ``:SH``, and the token is the leader record's lver."""
        h, p = client.call(w.SM_CMD_INQUIRE, 0, 0, 0xFFFFFFFF)
        if h["result"] < 0:
            raise Refused(f"inquire {self.spec.short()}", h["result"])
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

    def release(self):
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
                if h["result"] < 0:
                    raise Refused(f"release {self.spec.short()}", h["result"])
        finally:
            client.close()
            if self._thread is not None and self._thread is not threading.current_thread():
                self._thread.join(timeout=5)

    def __enter__(self):
        """Acquires, unless ``acquire()`` already did."""
        if self._client is not None:
            return self
        return self.acquire()

    def __exit__(self, *exc):
        self.release()
        return False

    # -- loss ------------------------------------------------------------------------

    def on_lost(self, callback):
        """Calls ``callback(notice)`` once when the lease is lost, from the watch thread
        (at once, from this thread, if it already is)."""
        with self._lock:
            if self.loss is None:
                self._callbacks.append(callback)
                return
        callback(self.loss)

    def wait_lost(self, timeout=None):
        """Blocks until the lease is lost (returns the notice) or ``timeout`` passes
        (returns None)."""
        if self.lost.wait(timeout):
            return self.loss
        return None

    @property
    def is_trusted(self):
        """False once a loss notice arrived (spindle's has-lock)."""
        return not self.lost.is_set() and self._client is not None

    def _declare(self, notice):
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

    def _gone(self, reason):
        if not self._closing:
            self._declare(LossNotice(reason))

    def _open_watch(self):
        c = _conn.Conn(self.run_dir)
        try:
            h, _ = c.ext_call(w.LOCKD_CMD_WATCH, header_only=True)
            if h["result"] < 0:
                raise Refused("watch", h["result"])
        except BaseException:
            c.close()
            raise
        interval = min(max(h["data2"], 50), 1000) / 1000.0
        self._watch = c
        self._thread = threading.Thread(target=self._watch_loop, args=(c.sock, interval),
                                        name="lockd-lease-watch", daemon=True)
        self._thread.start()

    def _stop_watch(self):
        c, self._watch = self._watch, None
        if c is not None:
            try:
                c.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            if self._thread is not None and self._thread is not threading.current_thread():
                self._thread.join(timeout=5)
            c.close()

    def _watch_loop(self, sock, interval):
        silence = max(SILENCE_LIMIT, interval * 4)
        sock.settimeout(interval)
        size = w.HEADER.size + w.WATCH_EVENT.size
        buf = b""
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
                if len(buf) < w.HEADER.size + h["payload_len"]:
                    break
                msg = buf[:w.HEADER.size + h["payload_len"]]
                buf = buf[len(msg):]
                last_heard = time.monotonic()
                if h["cmd"] != w.LOCKD_MSG_WATCH_EVENT or len(msg) != size:
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

    def _eof_loop(self):
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

    def __repr__(self):
        return (f"<lockd.Lease {self.spec.short()} token={self.token} "
                f"{'lost ' + self.loss.reason if self.loss else 'held' if self._client else 'not held'}>")


def leader(spec, *, run_dir=None):
    """Who holds ``spec`` now (lockd's LEADER; on sanlock from READ_RESOURCE_OWNERS):
    ``{"host_id", "host_name", "generation", "token", "state", "shared"}``; host_id 0 and
    state ``none`` when nobody holds it (``token`` is then the last one given)."""
    s = LeaseSpec.parse(spec)
    return _conn.owner_info(run_dir or _conn.default_run_dir(), s.lockspace, s.name, s.path,
                            s.offset)


def locks(lockspace, leases=None, *, run_dir=None):
    """Who holds what in ``lockspace``: a list of dicts, one per lease, sorted by name.

    ``leases``: the lease specs to report cluster-wide (a lockspace has no list of its
    leases, so the caller names them, as Shaken Fist knows its lock names); by default
    the leases held through this daemon. Each dict: ``lockspace``, ``resource``,
    ``spec``, ``owner_host_id`` (0: free), ``owner_host_name``, ``token`` (the holder's,
    or the last one given), ``state`` (the owner host's state in this daemon's view:
    ``live``, ``fail``, ``dead``, ``unknown``, ``none``), ``shared``, ``holders``: the
    local processes holding it (``pid``, ``name``, ``token``, ``mode`` EX/SH), and
    ``waiting``: the local candidates waiting for it (``pid``, ``name``, ``waiting_s``;
    lockd only — a registered client whose last acquire of it was refused as busy).
    """
    run_dir = run_dir or _conn.default_run_dir()
    _conn.check_name(lockspace, "lockspace name")
    recs = _conn.status(run_dir, 4)
    names = {r["data32"]: r["name"] for r in recs
             if r["type"] == w.SANLK_STATE_CLIENT and r["data32"] > 0}
    now = 0
    for r in recs:
        if r["type"] == w.SANLK_STATE_DAEMON:
            mt = w.parse_details(r["text"]).get("monotime", "")
            now = int(mt) if mt.isdigit() else 0
    waiting = {}
    for r in recs:
        if r["type"] != w.SANLK_STATE_CLIENT or r["data32"] <= 0:
            continue
        d = w.parse_details(r["text"])
        ls, _, res = d.get("waiting", "").partition(":")
        if ls == lockspace and res:
            since = d.get("waiting_since", "")
            waiting.setdefault(res, []).append({
                "pid": r["data32"], "name": r["name"],
                "waiting_s": max(0, now - int(since)) if since.isdigit() and now else None})
    local = {}
    specs = {}
    for r in recs:
        res = r.get("resource")
        if r["type"] != w.SANLK_STATE_RESOURCE or not res or res["lockspace"] != lockspace:
            continue
        d = w.parse_details(r["text"])
        try:
            flags = int(d.get("flags", "0"), 16)
        except ValueError:
            flags = res["flags"]
        lver = int(d["lver"]) if d.get("lver", "").isdigit() else r["data64"]
        if r["data32"] > 0:
            local.setdefault(res["name"], []).append({
                "pid": r["data32"], "name": names.get(r["data32"], ""),
                "token": lver, "mode": "SH" if flags & w.SANLK_RES_SHARED else "EX"})
        if res["disks"]:
            path, off = res["disks"][0]
            specs.setdefault(res["name"], LeaseSpec(lockspace, res["name"], path, off))
    if leases is not None:
        specs = {}
        for s in leases:
            s = LeaseSpec.parse(s)
            if s.lockspace != lockspace:
                raise BadSpec(f"lease {s} is not in lockspace {lockspace}")
            specs[s.name] = s
    out = []
    for name in sorted(specs):
        s = specs[name]
        o = _conn.owner_info(run_dir, s.lockspace, s.name, s.path, s.offset)
        out.append({"lockspace": lockspace, "resource": name, "spec": str(s),
                    "owner_host_id": o["host_id"], "owner_host_name": o["host_name"],
                    "token": o["token"], "state": o["state"], "shared": o["shared"],
                    "holders": local.get(name, []), "waiting": waiting.get(name, [])})
    return out
