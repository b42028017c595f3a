"""Encodings of the structs on the daemon's socket (sanlock's client protocol and
lockd's extensions), mirrored from client-lib/src/wire.rs and client-lib/src/ext.rs.

Every struct is native-endian with fixed offsets (the socket is local, x86-64/aarch64
layout); the formats below use ``=`` (native byte order, no implicit padding) with every
pad field spelled out, so ``calcsize`` equals the C ``sizeof``. docs/protocol.md lists
the same layouts byte by byte.

Invariants: decoders take exactly their fixed size and raise ``WireError`` otherwise
(never IndexError); names are at most 48 bytes, no NUL; a path at most 1023 bytes.
"""

import struct

from .errors import LockdError

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

    def __init__(self, message):
        super().__init__(message, -71)


def name_field(text, what):
    """A 48-byte NUL-padded name field; ``text`` is str or bytes."""
    b = text.encode() if isinstance(text, str) else bytes(text)
    if not b:
        raise WireError(f"{what}: empty name")
    if len(b) > NAME_LEN:
        raise WireError(f"{what}: name {b!r} is longer than {NAME_LEN} bytes")
    if b"\0" in b:
        raise WireError(f"{what}: name contains NUL")
    return b


def c_text(b):
    """Bytes up to the first NUL, as text (invalid UTF-8 replaced)."""
    return bytes(b).split(b"\0", 1)[0].decode("utf-8", "replace")


def header(cmd, cmd_flags=0, payload_len=0, data=0, data2=0):
    return HEADER.pack(SM_MAGIC, SM_PROTO, cmd, cmd_flags, 32 + payload_len, 0,
                       data & 0xFFFFFFFF, data2 & 0xFFFFFFFF)


def decode_header(b):
    if len(b) != HEADER.size:
        raise WireError(f"sm_header: need 32 bytes, got {len(b)}")
    magic, version, cmd, cmd_flags, length, seq, data, data2 = HEADER.unpack(b)
    if magic != SM_MAGIC:
        raise WireError(f"bad magic 0x{magic:08x} (expected 0x{SM_MAGIC:08x})")
    if length > MAX_CLIENT_MSG:
        raise WireError(f"message claims {length} bytes, more than {MAX_CLIENT_MSG}")
    result = data - (1 << 32) if data >= (1 << 31) else data
    return {"cmd": cmd, "cmd_flags": cmd_flags, "length": length, "data": data,
            "data2": data2, "result": result, "payload_len": max(0, length - 32)}


def disk(path, offset):
    p = path.encode() if isinstance(path, str) else bytes(path)
    if len(p) >= PATH_LEN or b"\0" in p:
        raise WireError("disk path longer than 1023 bytes or contains NUL")
    return DISK.pack(p, offset, 0, 0)


def resource(lockspace, name, disks=(), lver=0, flags=0):
    """A sanlk_resource with its disks (``disks``: (path, offset) pairs)."""
    out = RESOURCE_HEAD.pack(name_field(lockspace, "lockspace"), name_field(name, "resource"),
                             lver, 0, 0, 0, flags, len(disks))
    return out + b"".join(disk(p, o) for p, o in disks)


def options(owner_name=b""):
    o = owner_name.encode() if isinstance(owner_name, str) else bytes(owner_name)
    return OPTIONS.pack(o[:NAME_LEN].replace(b"\0", b""), 0, 0)


def lockspace(name, host_id=0, path="", offset=0):
    return LOCKSPACE_HEAD.pack(name_field(name, "lockspace"), host_id, 0, 0) + DISK.pack(
        path.encode() if isinstance(path, str) else path, offset, 0, 0)


def decode_resource_head(b):
    if len(b) != RESOURCE_HEAD.size:
        raise WireError(f"sanlk_resource: need 128 bytes, got {len(b)}")
    ls, name, lver, _d64, _d32, _unused, flags, num_disks = RESOURCE_HEAD.unpack(b)
    return {"lockspace": c_text(ls), "name": c_text(name), "lver": lver, "flags": flags,
            "num_disks": num_disks}


def decode_disk(b):
    if len(b) != DISK.size:
        raise WireError(f"sanlk_disk: need 1040 bytes, got {len(b)}")
    path, offset, _p1, _p2 = DISK.unpack(b)
    return (c_text(path), offset)


def decode_host(b):
    if len(b) != HOST.size:
        raise WireError(f"sanlk_host: need 32 bytes, got {len(b)}")
    host_id, generation, timestamp, io_timeout, flags = HOST.unpack(b)
    return {"host_id": host_id, "generation": generation, "timestamp": timestamp,
            "io_timeout": io_timeout, "state": HOST_STATES.get(flags & SANLK_HOST_MASK, "unknown")}


def decode_state(b):
    if len(b) != STATE.size:
        raise WireError(f"sanlk_state: need 80 bytes, got {len(b)}")
    kind, flags, data32, _pad, data64, name, str_len, _pad2 = STATE.unpack(b)
    if str_len > SANLK_STATE_MAXSTR:
        raise WireError(f"sanlk_state: str_len {str_len} over {SANLK_STATE_MAXSTR}")
    pid = data32 - (1 << 32) if data32 >= (1 << 31) else data32
    return {"type": kind, "flags": flags, "data32": pid, "data64": data64,
            "name": c_text(name), "str_len": str_len}


def decode_watch_event(b):
    if len(b) != WATCH_EVENT.size:
        raise WireError(f"lockd watch event: need 144 bytes, got {len(b)}")
    (kind, force_mode, leases, pid, ls, res, lver, kill_in_ms, watchdog_in_ms,
     renewal_age_ms) = WATCH_EVENT.unpack(b)
    if kind not in WATCH_KINDS:
        raise WireError(f"lockd watch event: unknown kind {kind}")
    return {"kind": WATCH_KINDS[kind], "force_mode": force_mode, "leases": leases,
            "pid": pid, "lockspace": c_text(ls), "resource": c_text(res), "lver": lver,
            "kill_in_ms": None if kill_in_ms == NO_DEADLINE else kill_in_ms,
            "watchdog_in_ms": None if watchdog_in_ms == NO_DEADLINE else watchdog_in_ms,
            "renewal_age_ms": renewal_age_ms}


def decode_leader_info(b):
    if len(b) < LEADER_INFO.size:
        raise WireError(f"lockd leader info: need 96 bytes, got {len(b)}")
    host_id, generation, token, host_state, shared, host_name = LEADER_INFO.unpack(
        b[:LEADER_INFO.size])
    state = "none" if host_id == 0 else HOST_STATES.get(host_state, "unknown")
    return {"host_id": host_id, "generation": generation, "token": token, "state": state,
            "shared": bool(shared), "host_name": c_text(host_name)}


def parse_details(text):
    """``key=value key=value`` state text as a dict of strings."""
    out = {}
    for item in text.split():
        k, sep, v = item.partition("=")
        if sep:
            out[k] = v
    return out
