"""One blocking connection to the daemon socket, and the one-shot queries built on it.

Reads are bounded: no reply may claim more than MAX_CLIENT_MSG bytes, a STATE text more
than 4096, a resource more than 4 disks, so a misbehaving daemon cannot make us
allocate without limit. Extension commands (LEADER, WATCH, METRICS) wait at most
``EXT_REPLY_TIMEOUT`` for the reply: a sanlock daemon ignores unknown commands and never
answers, which we report as ``NoExtensions``.
"""

from __future__ import annotations

import errno
import os
import socket
from dataclasses import replace
from typing import Dict, List, Optional, Tuple

from . import _wire as w
from .errors import DaemonGone, NoExtensions, Refused, BadSpec
from .results import LeaderInfo

EXT_REPLY_TIMEOUT = 10.0
DEFAULT_RUN_DIR = "/run/lockd"


def default_run_dir() -> str:
    """``$SANLOCK_RUN_DIR``, else ``$LOCKD_RUN_DIR``, else ``/run/lockd`` (as the CLI)."""
    for var in ("SANLOCK_RUN_DIR", "LOCKD_RUN_DIR"):
        v = os.environ.get(var)
        if v:
            return v
    return DEFAULT_RUN_DIR


class Conn:
    """A connection to ``<run_dir>/sanlock.sock``."""

    def __init__(self, run_dir: Optional[str] = None) -> None:
        self.run_dir = run_dir or default_run_dir()
        path = os.path.join(self.run_dir, w.SOCKET_NAME)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.sock.connect(path)
        except OSError as e:
            self.sock.close()
            raise DaemonGone(f"cannot connect to {path}: {e.strerror}",
                             -(e.errno or errno.EIO)) from None

    def close(self) -> None:
        """Closes the socket (never raises)."""
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self) -> Conn:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, cmd: int, cmd_flags: int = 0, data: int = 0, data2: int = 0,
             payload: bytes = b"") -> None:
        """Sends one request (header and payload)."""
        try:
            self.sock.sendall(w.header(cmd, cmd_flags, len(payload), data, data2) + payload)
        except OSError as e:
            raise DaemonGone(f"send to the daemon in {self.run_dir}: {e.strerror}",
                             -(e.errno or errno.EIO)) from None

    def recv_exact(self, n: int) -> bytes:
        """Exactly ``n`` bytes (``DaemonGone`` when the daemon closes first)."""
        if n > w.MAX_CLIENT_MSG:
            raise w.WireError(f"reply of {n} bytes is over the {w.MAX_CLIENT_MSG}-byte limit")
        buf = bytearray()
        while len(buf) < n:
            try:
                chunk = self.sock.recv(n - len(buf))
            except socket.timeout:
                raise
            except InterruptedError:
                continue
            except OSError as e:
                raise DaemonGone(f"read from the daemon in {self.run_dir}: {e.strerror}",
                                 -(e.errno or errno.EIO)) from None
            if not chunk:
                raise DaemonGone(f"the daemon in {self.run_dir} closed the connection",
                                 -errno.ECONNRESET)
            buf += chunk
        return bytes(buf)

    def recv_header(self) -> w.Header:
        """One reply header."""
        return w.decode_header(self.recv_exact(w.HEADER.size))

    def recv_reply(self) -> Tuple[w.Header, bytes]:
        """One reply: header and payload."""
        h = self.recv_header()
        return h, self.recv_exact(h.payload_len)

    def call(self, cmd: int, cmd_flags: int = 0, data: int = 0, data2: int = 0,
             payload: bytes = b"") -> Tuple[w.Header, bytes]:
        """Sends a request and reads its reply."""
        self.send(cmd, cmd_flags, data, data2, payload)
        return self.recv_reply()

    def ext_call(self, cmd: int, cmd_flags: int = 0, data: int = 0, data2: int = 0,
                 payload: bytes = b"", header_only: bool = False) -> Tuple[w.Header, bytes]:
        """An extension command: the reply must come within EXT_REPLY_TIMEOUT."""
        self.sock.settimeout(EXT_REPLY_TIMEOUT)
        try:
            self.send(cmd, cmd_flags, data, data2, payload)
            if header_only:
                return self.recv_header(), b""
            return self.recv_reply()
        except socket.timeout:
            raise NoExtensions(self.run_dir) from None
        finally:
            self.sock.settimeout(None)

    def state_records(self) -> List[w.StateRecord]:
        """STATE records until the daemon closes (STATUS, HOST_STATUS replies)."""
        out: List[w.StateRecord] = []
        while True:
            try:
                b = self.recv_exact(w.STATE.size)
            except DaemonGone:
                return out
            st = w.decode_state(b)
            st = replace(st, text=w.c_text(self.recv_exact(st.str_len)))
            if st.type == w.SANLK_STATE_LOCKSPACE:
                self.recv_exact(w.LOCKSPACE_HEAD.size + w.DISK.size)
            elif st.type == w.SANLK_STATE_RESOURCE:
                head = w.decode_resource_head(self.recv_exact(w.RESOURCE_HEAD.size))
                if head.num_disks > w.SANLK_MAX_DISKS:
                    raise w.WireError(f"resource with {head.num_disks} disks")
                head = w.with_disks(head, [w.decode_disk(self.recv_exact(w.DISK.size))
                                           for _ in range(head.num_disks)])
                st = replace(st, resource=head)
            out.append(st)


def status(run_dir: Optional[str] = None, depth: int = 4) -> List[w.StateRecord]:
    """STATUS: the daemon, client, lockspace and resource records."""
    with Conn(run_dir) as c:
        c.send(w.SM_CMD_STATUS, 0, depth)
        h = c.recv_header()
        if h.result < 0:
            raise Refused("status", h.result)
        return c.state_records()


_KIND_CACHE: Dict[str, str] = {}


def daemon_kind(run_dir: Optional[str] = None) -> str:
    """``"lockd"`` or ``"sanlock"``, from the version string in STATUS's daemon record
    (lockd sends ``version_str=lockd-X``)."""
    run_dir = run_dir or default_run_dir()
    if run_dir in _KIND_CACHE:
        return _KIND_CACHE[run_dir]
    recs = status(run_dir, w.SANLK_STATE_DAEMON)
    kind = "sanlock"
    for r in recs:
        if r.type == w.SANLK_STATE_DAEMON:
            if w.parse_details(r.text).get("version_str", "").startswith("lockd-"):
                kind = "lockd"
    _KIND_CACHE[run_dir] = kind
    return kind


def leader(run_dir: str, lockspace: str, name: str, path: str, offset: int) -> LeaderInfo:
    """LOCKD_CMD_LEADER: who holds the lease (host_id 0: nobody), with its token."""
    with Conn(run_dir) as c:
        h, p = c.ext_call(w.LOCKD_CMD_LEADER, payload=w.resource(lockspace, name, [(path, offset)]))
        if h.result < 0:
            raise Refused(f"read the leader of {lockspace}:{name}", h.result)
        return w.decode_leader_info(p)


def read_resource_owners(run_dir: str, lockspace: str, name: str, path: str,
                         offset: int) -> Tuple[int, bool, List[w.HostInfo]]:
    """READ_RESOURCE_OWNERS (sanlock and lockd): (lver, shared, [hosts])."""
    with Conn(run_dir) as c:
        h, p = c.call(w.SM_CMD_READ_RESOURCE_OWNERS,
                      payload=w.resource(lockspace, name, [(path, offset)]))
        if h.result < 0:
            raise Refused(f"read the owners of {lockspace}:{name}", h.result)
        if len(p) < w.RESOURCE_HEAD.size:
            raise w.WireError("read_resource_owners reply is short")
        head = w.decode_resource_head(p[:w.RESOURCE_HEAD.size])
        rest = p[w.RESOURCE_HEAD.size:]
        n = min(h.data2, len(rest) // w.HOST.size)
        hosts = [w.decode_host(rest[i * 32:(i + 1) * 32]) for i in range(n)]
        return head.lver, bool(head.flags & w.SANLK_RES_SHARED), hosts


def get_hosts(run_dir: Optional[str], lockspace: str, host_id: int = 0) -> List[w.HostInfo]:
    """GET_HOSTS of a lockspace (host_id 0 = all)."""
    with Conn(run_dir) as c:
        h, p = c.call(w.SM_CMD_GET_HOSTS, payload=w.lockspace(lockspace, host_id))
        if h.result < 0:
            raise Refused(f"get hosts of {lockspace}", h.result)
        n = min(h.data2, len(p) // w.HOST.size)
        return [w.decode_host(p[i * 32:(i + 1) * 32]) for i in range(n)]


def owner_info(run_dir: str, lockspace: str, name: str, path: str, offset: int) -> LeaderInfo:
    """Who holds a lease, as LEADER answers it: LEADER on lockd; on sanlock
    READ_RESOURCE_OWNERS and GET_HOSTS (no host names there)."""
    if daemon_kind(run_dir) == "lockd":
        return leader(run_dir, lockspace, name, path, offset)
    lver, shared, hosts = read_resource_owners(run_dir, lockspace, name, path, offset)
    if not hosts:
        return LeaderInfo(host_id=0, generation=0, token=lver, state="none", shared=False)
    o = hosts[0]
    state = "unknown"
    try:
        for hh in get_hosts(run_dir, lockspace, o.host_id):
            if hh.host_id == o.host_id:
                state = hh.state
    except Exception:  # noqa: BLE001 - the owner is still reported, state unknown
        pass
    return LeaderInfo(host_id=o.host_id, generation=o.generation, token=lver, state=state,
                      shared=shared)


def metrics(run_dir: Optional[str] = None) -> str:
    """LOCKD_CMD_METRICS: the Prometheus text exposition (format 0.0.4)."""
    with Conn(run_dir) as c:
        h, p = c.ext_call(w.LOCKD_CMD_METRICS)
        if h.result < 0:
            raise Refused("read metrics", h.result)
        return p.decode("utf-8")


def check_name(text: w.Text, what: str) -> bytes:
    """``text`` as a name field; ``BadSpec`` when it cannot be one."""
    try:
        return w.name_field(text, what)
    except w.WireError as e:
        raise BadSpec(str(e)) from None
