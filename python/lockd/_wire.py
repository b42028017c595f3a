"""Encodings of the structs on the daemon's socket (sanlock's client protocol and
lockd's extensions), mirrored from client-lib/src/wire.rs and client-lib/src/ext.rs.

Every struct is native-endian with fixed offsets (the socket is local, x86-64/aarch64
layout); the formats below use ``=`` (native byte order, no implicit padding) with every
pad field spelled out, so ``calcsize`` equals the C ``sizeof``. docs/protocol.md lists
the same layouts byte by byte.

Invariants: decoders take exactly their fixed size and raise ``WireError`` otherwise
(never IndexError); names are at most 48 bytes, no NUL; a path at most 1023 bytes.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, replace
from typing import Dict, Iterable, Optional, Sequence, Tuple, Union

from .errors import LockdError
from .results import LeaderInfo

SOCKET_NAME = "sanlock.sock"
SM_MAGIC = 0x04282010
SM_PROTO = 0x00000001
MAX_CLIENT_MSG = 1024 * 1024

# sanlock commands used here (sanlock_sock.h).
SM_CMD_REGISTER = 1
SM_CMD_STATUS = 5
SM_CMD_ACQUIRE = 7
SM_CMD_RELEASE = 8
SM_CMD_INQUIRE = 9
SM_CMD_RESTRICT = 10
SM_CMD_REQUEST = 11
SM_CMD_HOST_STATUS = 15
SM_CMD_READ_RESOURCE = 21
SM_CMD_GET_HOSTS = 23
SM_CMD_READ_RESOURCE_OWNERS = 24
SM_CMD_VERSION = 28

# lockd extensions (client-lib/src/ext.rs): "LK" in the high half.
LOCKD_CMD_WATCH = 0x4C4B0001
LOCKD_CMD_LEADER = 0x4C4B0002
LOCKD_CMD_METRICS = 0x4C4B0003
LOCKD_CMD_ACQUIRE_FOR_PID = 0x4C4B0010
LOCKD_MSG_WATCH_EVENT = 0x4C4B0081

# sanlk_state types.
SANLK_STATE_DAEMON = 1
SANLK_STATE_CLIENT = 2
SANLK_STATE_LOCKSPACE = 3
SANLK_STATE_RESOURCE = 4
SANLK_STATE_HOST = 5
SANLK_STATE_MAXSTR = 4096

SANLK_RES_SHARED = 0x4
SANLK_RES_PERSISTENT = 0x8
SANLK_ACQUIRE_OWNER_NOWAIT = 0x8
SANLK_RESTRICT_SIGKILL = 0x2
SANLK_RESTRICT_SIGTERM = 0x4
SANLK_MAX_DISKS = 4
SANLK_HOST_MASK = 0xF

NAME_LEN = 48
PATH_LEN = 1024

HEADER = struct.Struct("=8I")  # magic version cmd cmd_flags length seq data data2
DISK = struct.Struct("=1024sQII")  # path offset pad1 pad2
RESOURCE_HEAD = struct.Struct("=48s48sQQIIII")  # ls name lver data64 data32 unused flags num_disks
OPTIONS = struct.Struct("=48sII")  # owner_name flags len
HOST = struct.Struct("=QQQII")  # host_id generation timestamp io_timeout flags
STATE = struct.Struct("=IIIIQ48sII")  # type flags data32 pad data64 name str_len pad
LOCKSPACE_HEAD = struct.Struct("=48sQII")  # name host_id flags pad, then a sanlk_disk
WATCH_EVENT = struct.Struct("=IIIi48s48sQqqQ")
LEADER_INFO = struct.Struct("=QQQII48s16x")

assert HEADER.size == 32 and DISK.size == 1040 and RESOURCE_HEAD.size == 128
assert OPTIONS.size == 56 and HOST.size == 32 and STATE.size == 80
assert LOCKSPACE_HEAD.size + DISK.size == 1104
assert WATCH_EVENT.size == 144 and LEADER_INFO.size == 96

NO_DEADLINE = -(2**63)

WATCH_KINDS = {
    1: "heartbeat",
    2: "renewal_failing",
    3: "lockspace_failed",
    4: "lockspace_removed",
    5: "requested",
}

HOST_STATES = {1: "unknown", 2: "free", 3: "live", 4: "fail", 5: "dead"}


class WireError(LockdError):
    """A message that cannot be encoded or decoded (``code`` = -EPROTO, as client-lib's
    malformed-reply error)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, -71)


#: A name or path as the caller gives it.
Text = Union[str, bytes]


@dataclass(frozen=True)
class Header:
    """A decoded ``sm_header``: ``result`` is ``data`` as a signed 32-bit result code;
    ``payload_len`` the bytes that follow the header."""

    cmd: int
    cmd_flags: int
    length: int
    data: int
    data2: int
    result: int
    payload_len: int


@dataclass(frozen=True)
class Resource:
    """A decoded ``sanlk_resource`` head, with its disks once they are read."""

    lockspace: str
    name: str
    lver: int
    flags: int
    num_disks: int
    disks: Tuple[Tuple[str, int], ...] = ()


@dataclass(frozen=True)
class HostInfo:
    """A decoded ``sanlk_host``, with ``state`` named (``live``, ``dead``, ...)."""

    host_id: int
    generation: int
    timestamp: int
    io_timeout: int
    state: str


@dataclass(frozen=True)
class StateRecord:
    """A decoded ``sanlk_state`` (STATUS records), with its text and, for a resource
    record, the resource; ``data32`` is signed (a client's pid)."""

    type: int
    flags: int
    data32: int
    data64: int
    name: str
    str_len: int
    text: str = ""
    resource: Optional[Resource] = None


@dataclass(frozen=True)
class WatchEvent:
    """A decoded ``lockd_watch_event``: ``kind`` named (``heartbeat``,
    ``renewal_failing``, ...); ``kill_in_ms`` / ``watchdog_in_ms`` ``None`` for no
    deadline."""

    kind: str
    force_mode: int
    leases: int
    pid: int
    lockspace: str
    resource: str
    lver: int
    kill_in_ms: Optional[int]
    watchdog_in_ms: Optional[int]
    renewal_age_ms: int


def name_field(text: Text, what: str) -> bytes:
    """A 48-byte NUL-padded name field; ``text`` is str or bytes."""
    b = text.encode() if isinstance(text, str) else bytes(text)
    if not b:
        raise WireError(f"{what}: empty name")
    if len(b) > NAME_LEN:
        raise WireError(f"{what}: name {b!r} is longer than {NAME_LEN} bytes")
    if b"\0" in b:
        raise WireError(f"{what}: name contains NUL")
    return b


def c_text(b: bytes) -> str:
    """Bytes up to the first NUL, as text (invalid UTF-8 replaced)."""
    return bytes(b).split(b"\0", 1)[0].decode("utf-8", "replace")


def header(cmd: int, cmd_flags: int = 0, payload_len: int = 0, data: int = 0,
           data2: int = 0) -> bytes:
    """An ``sm_header`` for a request with ``payload_len`` bytes of payload."""
    return HEADER.pack(SM_MAGIC, SM_PROTO, cmd, cmd_flags, 32 + payload_len, 0,
                       data & 0xFFFFFFFF, data2 & 0xFFFFFFFF)


def decode_header(b: bytes) -> Header:
    """Decodes an ``sm_header``; refuses a bad magic or an oversized length."""
    if len(b) != HEADER.size:
        raise WireError(f"sm_header: need 32 bytes, got {len(b)}")
    magic, _version, cmd, cmd_flags, length, _seq, data, data2 = HEADER.unpack(b)
    if magic != SM_MAGIC:
        raise WireError(f"bad magic 0x{magic:08x} (expected 0x{SM_MAGIC:08x})")
    if length > MAX_CLIENT_MSG:
        raise WireError(f"message claims {length} bytes, more than {MAX_CLIENT_MSG}")
    result = data - (1 << 32) if data >= (1 << 31) else data
    return Header(cmd=cmd, cmd_flags=cmd_flags, length=length, data=data, data2=data2,
                  result=result, payload_len=max(0, length - 32))


def disk(path: Text, offset: int) -> bytes:
    """A ``sanlk_disk``."""
    p = path.encode() if isinstance(path, str) else bytes(path)
    if len(p) >= PATH_LEN or b"\0" in p:
        raise WireError("disk path longer than 1023 bytes or contains NUL")
    return DISK.pack(p, offset, 0, 0)


def resource(lockspace: Text, name: Text, disks: Sequence[Tuple[Text, int]] = (),
             lver: int = 0, flags: int = 0) -> bytes:
    """A sanlk_resource with its disks (``disks``: (path, offset) pairs)."""
    out = RESOURCE_HEAD.pack(name_field(lockspace, "lockspace"), name_field(name, "resource"),
                             lver, 0, 0, 0, flags, len(disks))
    return out + b"".join(disk(p, o) for p, o in disks)


def options(owner_name: Text = b"") -> bytes:
    """A ``sanlk_options`` naming the owner (truncated to 48 bytes)."""
    o = owner_name.encode() if isinstance(owner_name, str) else bytes(owner_name)
    return OPTIONS.pack(o[:NAME_LEN].replace(b"\0", b""), 0, 0)


def lockspace(name: Text, host_id: int = 0, path: Text = "", offset: int = 0) -> bytes:
    """A ``sanlk_lockspace`` with its disk."""
    return LOCKSPACE_HEAD.pack(name_field(name, "lockspace"), host_id, 0, 0) + DISK.pack(
        path.encode() if isinstance(path, str) else path, offset, 0, 0)


def decode_resource_head(b: bytes) -> Resource:
    """Decodes a ``sanlk_resource`` head (its disks follow it on the wire)."""
    if len(b) != RESOURCE_HEAD.size:
        raise WireError(f"sanlk_resource: need 128 bytes, got {len(b)}")
    ls, name, lver, _d64, _d32, _unused, flags, num_disks = RESOURCE_HEAD.unpack(b)
    return Resource(lockspace=c_text(ls), name=c_text(name), lver=lver, flags=flags,
                    num_disks=num_disks)


def with_disks(head: Resource, disks: Iterable[Tuple[str, int]]) -> Resource:
    """``head`` with its disks."""
    return replace(head, disks=tuple(disks))


def decode_disk(b: bytes) -> Tuple[str, int]:
    """Decodes a ``sanlk_disk`` as (path, offset)."""
    if len(b) != DISK.size:
        raise WireError(f"sanlk_disk: need 1040 bytes, got {len(b)}")
    path, offset, _p1, _p2 = DISK.unpack(b)
    return (c_text(path), offset)


def decode_host(b: bytes) -> HostInfo:
    """Decodes a ``sanlk_host``."""
    if len(b) != HOST.size:
        raise WireError(f"sanlk_host: need 32 bytes, got {len(b)}")
    host_id, generation, timestamp, io_timeout, flags = HOST.unpack(b)
    return HostInfo(host_id=host_id, generation=generation, timestamp=timestamp,
                    io_timeout=io_timeout,
                    state=HOST_STATES.get(flags & SANLK_HOST_MASK, "unknown"))


def decode_state(b: bytes) -> StateRecord:
    """Decodes a ``sanlk_state`` (its text and any resource follow it on the wire)."""
    if len(b) != STATE.size:
        raise WireError(f"sanlk_state: need 80 bytes, got {len(b)}")
    kind, flags, data32, _pad, data64, name, str_len, _pad2 = STATE.unpack(b)
    if str_len > SANLK_STATE_MAXSTR:
        raise WireError(f"sanlk_state: str_len {str_len} over {SANLK_STATE_MAXSTR}")
    pid = data32 - (1 << 32) if data32 >= (1 << 31) else data32
    return StateRecord(type=kind, flags=flags, data32=pid, data64=data64, name=c_text(name),
                       str_len=str_len)


def decode_watch_event(b: bytes) -> WatchEvent:
    """Decodes a ``lockd_watch_event`` (the payload of ``LOCKD_MSG_WATCH_EVENT``)."""
    if len(b) != WATCH_EVENT.size:
        raise WireError(f"lockd watch event: need 144 bytes, got {len(b)}")
    (kind, force_mode, leases, pid, ls, res, lver, kill_in_ms, watchdog_in_ms,
     renewal_age_ms) = WATCH_EVENT.unpack(b)
    if kind not in WATCH_KINDS:
        raise WireError(f"lockd watch event: unknown kind {kind}")
    return WatchEvent(
        kind=WATCH_KINDS[kind], force_mode=force_mode, leases=leases, pid=pid,
        lockspace=c_text(ls), resource=c_text(res), lver=lver,
        kill_in_ms=None if kill_in_ms == NO_DEADLINE else kill_in_ms,
        watchdog_in_ms=None if watchdog_in_ms == NO_DEADLINE else watchdog_in_ms,
        renewal_age_ms=renewal_age_ms)


def decode_leader_info(b: bytes) -> LeaderInfo:
    """Decodes a ``lockd_leader_info`` (the reply of ``LOCKD_CMD_LEADER``)."""
    if len(b) < LEADER_INFO.size:
        raise WireError(f"lockd leader info: need 96 bytes, got {len(b)}")
    host_id, generation, token, host_state, shared, host_name = LEADER_INFO.unpack(
        b[:LEADER_INFO.size])
    state = "none" if host_id == 0 else HOST_STATES.get(host_state, "unknown")
    return LeaderInfo(host_id=host_id, generation=generation, token=token, state=state,
                      shared=bool(shared), host_name=c_text(host_name))


def parse_details(text: str) -> Dict[str, str]:
    """``key=value key=value`` state text as a dict of strings."""
    out: Dict[str, str] = {}
    for item in text.split():
        k, sep, v = item.partition("=")
        if sep:
            out[k] = v
    return out
