"""Parity matrix driver: runs the daemon-facing python3-sanlock calls on one storage path
with the right geometry, a wrong sector size, a wrong align size and empty names, and
prints one JSON line per call: {"call", "variant", "result"}.

usage: parity.py PATH SECTOR   (SECTOR: the storage's logical sector size, 512 or 4096)

Run against a sanlock or a lockd daemon (SANLOCK_RUN_DIR selects it) on zeroed storage of
at least 64 MiB; daemon/tests/parity_matrix.rs runs it on every storage kind against both
and compares the lines. Every call that can write is bracketed by a hash of areas 1-7
(O_DIRECT reads; area 0, the renewed lockspace, is left out); a refused call reports
whether it changed them.
"""
import hashlib
import json
import mmap
import os
import sys
import time

import sanlock

PATH = sys.argv[1].encode()
SECTOR = int(sys.argv[2])
MIB = 1 << 20
LS = b"pm"
OTHER = b"/nonexistent/parity-disk"

if SECTOR == 4096:
    RIGHT = dict(sector=4096, align=8 * MIB)
    WRONG_S = dict(sector=512, align=MIB)
    WRONG_A = dict(sector=4096, align=2 * MIB)
else:
    RIGHT = dict(sector=512, align=MIB)
    WRONG_S = dict(sector=4096, align=MIB)
    WRONG_A = dict(sector=512, align=2 * MIB)
A = RIGHT["align"]


def area(i):
    return i * A


def digest():
    """SHA-1 of areas 1..7, read with O_DIRECT (no page cache in the way). Area 0 holds
    the lockspace, whose delta leases a joined host rewrites every 2·io_timeout: a hash
    of it would change under any call made while joined."""
    h = hashlib.sha1()
    buf = mmap.mmap(-1, MIB)
    fd = os.open(PATH, os.O_RDONLY | os.O_DIRECT)
    try:
        for off in range(A, 8 * A, MIB):
            n = os.preadv(fd, [buf], off)
            h.update(buf[:n])
    finally:
        os.close(fd)
    return h.hexdigest()


def norm(value):
    if isinstance(value, dict):
        return {k: ("<time>" if k == "timestamp" else norm(v)) for k, v in sorted(value.items())}
    if isinstance(value, (list, tuple)):
        return [norm(v) for v in value]
    if isinstance(value, bytes):
        return "b:" + value.rstrip(b"\0").decode("latin-1")
    if isinstance(value, str) and value == PATH.decode():
        return "<disk>"
    return value


def call(name, variant, thunk, writes=False):
    before = digest() if writes else None
    try:
        result = norm(thunk())
    except sanlock.SanlockException as e:
        result = "error %d" % e.errno
        if writes:
            result += " (nothing written)" if digest() == before else " (area changed)"
    print(json.dumps({"call": name, "variant": variant, "result": result}), flush=True)
    return result


def disks(i):
    return [(PATH, area(i))]


# --- formatting and reading areas ---
call("get_alignment", "right", lambda: sanlock.get_alignment(PATH))
call("write_lockspace", "wrong sector",
     lambda: sanlock.write_lockspace(LS, PATH, area(5), iotimeout=1, **WRONG_S), writes=True)
call("write_lockspace", "wrong align",
     lambda: sanlock.write_lockspace(LS, PATH, area(6), iotimeout=1, **WRONG_A), writes=True)
call("write_lockspace", "empty name",
     lambda: sanlock.write_lockspace(b"", PATH, area(6), iotimeout=1, **RIGHT), writes=True)
call("write_lockspace", "no such disk",
     lambda: sanlock.write_lockspace(LS, OTHER, 0, iotimeout=1, **RIGHT))
call("write_lockspace", "right",
     lambda: sanlock.write_lockspace(LS, PATH, 0, iotimeout=1, **RIGHT), writes=True)
for variant, kw in [("right", RIGHT), ("wrong sector", WRONG_S), ("wrong align", WRONG_A)]:
    call("read_lockspace", variant, lambda: sanlock.read_lockspace(PATH, 0, **kw))
call("read_lockspace", "empty name", lambda: sanlock.read_lockspace(PATH, area(6), **RIGHT))
call("read_lockspace", "no lockspace", lambda: sanlock.read_lockspace(PATH, area(7), **RIGHT))
call("read_lockspace", "no such disk", lambda: sanlock.read_lockspace(OTHER, 0, **RIGHT))

call("write_resource", "right", lambda: sanlock.write_resource(LS, b"r1", disks(1), **RIGHT),
     writes=True)
call("write_resource", "right r2", lambda: sanlock.write_resource(LS, b"r2", disks(2), **RIGHT),
     writes=True)
call("write_resource", "wrong sector",
     lambda: sanlock.write_resource(LS, b"r3", disks(3), **WRONG_S), writes=True)
call("write_resource", "wrong align",
     lambda: sanlock.write_resource(LS, b"r4", disks(4), **WRONG_A), writes=True)
call("write_resource", "empty names",
     lambda: sanlock.write_resource(b"", b"", disks(4), **RIGHT), writes=True)
call("write_resource", "no such disk",
     lambda: sanlock.write_resource(LS, b"r", [(OTHER, 0)], **RIGHT))
for variant, kw in [("right", RIGHT), ("wrong sector", WRONG_S), ("wrong align", WRONG_A)]:
    call("read_resource", variant, lambda: sanlock.read_resource(PATH, area(1), **kw))
    call("read_resource_owners", variant,
         lambda: sanlock.read_resource_owners(LS, b"r1", disks(1), **kw))
call("read_resource", "empty names", lambda: sanlock.read_resource(PATH, area(4), **RIGHT))
call("read_resource", "no lease", lambda: sanlock.read_resource(PATH, area(7), **RIGHT))
call("read_resource_owners", "empty names",
     lambda: sanlock.read_resource_owners(b"", b"", disks(1), **RIGHT))
call("read_resource_owners", "wrong name",
     lambda: sanlock.read_resource_owners(LS, b"rx", disks(1), **RIGHT))
call("read_resource_owners", "no lease",
     lambda: sanlock.read_resource_owners(LS, b"r1", disks(7), **RIGHT))
call("write_resource", "clear, empty names",
     lambda: sanlock.write_resource(b"", b"", disks(2), clear=True, **RIGHT), writes=True)
call("read_resource", "cleared", lambda: sanlock.read_resource(PATH, area(2), **RIGHT))
call("read_resource_owners", "cleared",
     lambda: sanlock.read_resource_owners(LS, b"r2", disks(2), **RIGHT))

# --- the lockspace ---
call("inq_lockspace", "before add", lambda: sanlock.inq_lockspace(LS, 1, PATH, 0))
call("request", "lockspace not joined", lambda: sanlock.request(LS, b"r1", disks(1)),
     writes=True)
call("add_lockspace", "right", lambda: sanlock.add_lockspace(LS, 1, PATH, 0, iotimeout=1))
call("inq_lockspace", "right", lambda: sanlock.inq_lockspace(LS, 1, PATH, 0))
call("inq_lockspace", "other host_id", lambda: sanlock.inq_lockspace(LS, 2, PATH, 0))
call("inq_lockspace", "other path", lambda: sanlock.inq_lockspace(LS, 1, OTHER, 0))
call("inq_lockspace", "other offset", lambda: sanlock.inq_lockspace(LS, 1, PATH, area(5)))
call("inq_lockspace", "other name", lambda: sanlock.inq_lockspace(b"px", 1, PATH, 0))
call("inq_lockspace", "empty name", lambda: sanlock.inq_lockspace(b"", 1, PATH, 0))

# --- leases ---
fd = sanlock.register()
call("acquire", "right", lambda: sanlock.acquire(LS, b"r1", disks(1), slkfd=fd, lvb=True),
     writes=True)
call("acquire", "cleared lease", lambda: sanlock.acquire(LS, b"r2", disks(2), slkfd=fd),
     writes=True)
call("acquire", "empty names", lambda: sanlock.acquire(b"", b"", disks(4), slkfd=fd),
     writes=True)
call("set_lvb", "right", lambda: sanlock.set_lvb(LS, b"r1", disks(1), b"hello world"))
call("set_lvb", "shorter", lambda: sanlock.set_lvb(LS, b"r1", disks(1), b"HEL"))
call("get_lvb", "right", lambda: sanlock.get_lvb(LS, b"r1", disks(1), 16))
call("set_lvb", "not held", lambda: sanlock.set_lvb(LS, b"rx", disks(3), b"x"))
call("inquire", "right", lambda: sanlock.inquire(slkfd=fd))
call("request", "right", lambda: sanlock.request(LS, b"r1", disks(1)), writes=True)
call("request", "other lockspace", lambda: sanlock.request(b"px", b"r1", disks(1)),
     writes=True)
call("read_resource_owners", "held", lambda: [
    {k: v for k, v in h.items() if k != "generation"}
    for h in sanlock.read_resource_owners(LS, b"r1", disks(1), **RIGHT)])
call("release", "right", lambda: sanlock.release(LS, b"r1", disks(1), slkfd=fd), writes=True)
call("release", "not held", lambda: sanlock.release(LS, b"r1", disks(1), slkfd=fd),
     writes=True)
call("read_resource_owners", "released",
     lambda: sanlock.read_resource_owners(LS, b"r1", disks(1), **RIGHT))

# get_hosts answers -EAGAIN until the first renewal read: wait for it (not a row).
deadline = time.time() + 10
while time.time() < deadline:
    try:
        sanlock.get_hosts(LS)
        break
    except sanlock.SanlockException:
        time.sleep(0.2)
call("get_hosts", "unused host slot", lambda: sanlock.get_hosts(LS, 5))
call("get_hosts", "unknown lockspace", lambda: sanlock.get_hosts(b"px"))
call("get_lockspaces", "joined", lambda: sanlock.get_lockspaces())

# --- events and killpath ---
call("killpath", "right", lambda: sanlock.killpath(b"/bin/true", [b"a", b"b"], slkfd=fd))
call("killpath", "path too long",
     lambda: sanlock.killpath(b"/" + b"x" * 200, [], slkfd=fd))
efd = call("reg_event", "right", lambda: sanlock.reg_event(LS) >= 0)
call("reg_event", "unknown lockspace", lambda: sanlock.reg_event(b"px") >= 0)
call("set_event", "to host 2, current generation",
     lambda: sanlock.set_event(LS, 2, 0, 7, data=9, flags=sanlock.SETEV_CUR_GENERATION))
call("set_event", "second event without replace",
     lambda: sanlock.set_event(LS, 2, 0, 8, flags=sanlock.SETEV_CUR_GENERATION))
call("set_event", "replace",
     lambda: sanlock.set_event(LS, 2, 0, 8, flags=sanlock.SETEV_CUR_GENERATION
                               | sanlock.SETEV_REPLACE_EVENT))
call("set_event", "clear", lambda: sanlock.set_event(LS, 2, 0, 0,
                                                      flags=sanlock.SETEV_CLEAR_EVENT))
call("set_event", "unknown lockspace",
     lambda: sanlock.set_event(b"px", 2, 0, 7, flags=sanlock.SETEV_CUR_GENERATION))
_efd = sanlock.reg_event(LS)
call("get_event", "none pending", lambda: sanlock.get_event(_efd))
call("end_event", "right", lambda: sanlock.end_event(_efd, LS))
_efd2 = sanlock.reg_event(LS)
call("end_event", "unknown lockspace", lambda: sanlock.end_event(_efd2, b"px"))

call("rem_lockspace", "other host_id", lambda: sanlock.rem_lockspace(LS, 2, PATH, 0),
     writes=True)
call("rem_lockspace", "other path", lambda: sanlock.rem_lockspace(LS, 1, OTHER, 0),
     writes=True)
call("rem_lockspace", "other offset", lambda: sanlock.rem_lockspace(LS, 1, PATH, area(5)),
     writes=True)
call("inq_lockspace", "still joined", lambda: sanlock.inq_lockspace(LS, 1, PATH, 0))
call("rem_lockspace", "right", lambda: sanlock.rem_lockspace(LS, 1, PATH, 0))
call("inq_lockspace", "after rem", lambda: sanlock.inq_lockspace(LS, 1, PATH, 0))
call("request", "after rem", lambda: sanlock.request(LS, b"r1", disks(1)), writes=True)
