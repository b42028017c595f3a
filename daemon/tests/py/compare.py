"""Calls every daemon-facing function of python3-sanlock in one fixed sequence and prints
one JSON line per call: {"function", "case", "result"}.

Run against a sanlock or a lockd daemon (SANLOCK_RUN_DIR selects it) on a fresh, zeroed
disk file; daemon/tests/python_compare.rs runs it against both and compares the lines
(python3-sanlock 3.8.5), as daemon/tests/py/compare-in-chroot.sh does from a chroot of
another Debian release (trixie: python3-sanlock and sanlock 3.9.5).
Results are normalised only where two correct runs must differ: host timestamps (clock
readings), registered fd numbers and the pid of the helper process.
"""
import json
import os
import subprocess
import sys
import time

import sanlock

PATH = sys.argv[1].encode()
LS = b"cmp"
MIB = 1 << 20
R1 = [(PATH, 1 * MIB)]
R2 = [(PATH, 2 * MIB)]
R3 = [(PATH, 3 * MIB)]


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


def call(function, case, thunk, shape=None):
    try:
        value = thunk()
        result = norm(shape(value) if shape else value)
    except sanlock.SanlockException as e:
        result = "error %d" % e.errno
    print(json.dumps({"function": function, "case": case, "result": result}), flush=True)
    return result


def is_int(v):
    return "int" if isinstance(v, int) and v >= 0 else repr(v)


# --- formatting and reading areas (through the daemon) ---
call("get_alignment", "file", lambda: sanlock.get_alignment(PATH))
call("write_lockspace", "io_timeout 1", lambda: sanlock.write_lockspace(LS, PATH, 0, iotimeout=1))
call("read_lockspace", "fresh", lambda: sanlock.read_lockspace(PATH, 0))
call("write_resource", "r1", lambda: sanlock.write_resource(LS, b"r1", R1))
call("write_resource", "r2", lambda: sanlock.write_resource(LS, b"r2", R2))
call("write_resource", "r3 num_hosts 4", lambda: sanlock.write_resource(LS, b"r3", R3, num_hosts=4))
call("read_resource", "r1", lambda: sanlock.read_resource(PATH, MIB))
call("read_resource", "no lease there", lambda: sanlock.read_resource(PATH, 6 * MIB))
call("read_lockspace", "no lockspace there", lambda: sanlock.read_lockspace(PATH, 6 * MIB))

# --- lockspace ---
call("inq_lockspace", "before add", lambda: sanlock.inq_lockspace(LS, 1, PATH, 0))
call("add_lockspace", "wait", lambda: sanlock.add_lockspace(LS, 1, PATH, 0, iotimeout=1))
call("add_lockspace", "again", lambda: sanlock.add_lockspace(LS, 1, PATH, 0, iotimeout=1))
call("inq_lockspace", "joined", lambda: sanlock.inq_lockspace(LS, 1, PATH, 0))
call("inq_lockspace", "wait", lambda: sanlock.inq_lockspace(LS, 1, PATH, 0, wait=True))
call("get_lockspaces", "one", lambda: sanlock.get_lockspaces())
# The host table is read by renewals: wait for ours to show.
for _ in range(100):
    try:
        if sanlock.get_hosts(LS, 1):
            break
    except sanlock.SanlockException:
        pass
    time.sleep(0.1)
call("get_hosts", "all", lambda: sanlock.get_hosts(LS))
call("get_hosts", "host 1", lambda: sanlock.get_hosts(LS, 1))
call("get_hosts", "unknown lockspace", lambda: sanlock.get_hosts(b"nosuch"))
call("read_lockspace", "joined", lambda: sanlock.read_lockspace(PATH, 0))

# --- resources ---
fd = sanlock.register()
call("register", "new", lambda: fd, shape=is_int)
call("killpath", "set", lambda: sanlock.killpath(b"/bin/true", [b"arg one"], slkfd=fd))
call("acquire", "r1 exclusive", lambda: sanlock.acquire(LS, b"r1", R1, slkfd=fd))
call("acquire", "r1 again", lambda: sanlock.acquire(LS, b"r1", R1, slkfd=fd))
call("inquire", "r1 held", lambda: sanlock.inquire(slkfd=fd))
call("read_resource_owners", "r1", lambda: sanlock.read_resource_owners(LS, b"r1", R1))
call("read_resource", "r1 held", lambda: sanlock.read_resource(PATH, MIB))
call("acquire", "r2 lvb", lambda: sanlock.acquire(LS, b"r2", R2, slkfd=fd, lvb=True))
call("get_lvb", "r2 fresh", lambda: sanlock.get_lvb(LS, b"r2", R2, 16))
call("set_lvb", "r2", lambda: sanlock.set_lvb(LS, b"r2", R2, b"hello lvb"))
call("get_lvb", "r2 set", lambda: sanlock.get_lvb(LS, b"r2", R2, 16))
call("set_lvb", "r2 too large", lambda: sanlock.set_lvb(LS, b"r2", R2, b"x" * 4097))
call("set_lvb", "r1 not lvb", lambda: sanlock.set_lvb(LS, b"r1", R1, b"no"))
call("get_lvb", "r3 not held", lambda: sanlock.get_lvb(LS, b"r3", R3, 16))
call("release", "r2", lambda: sanlock.release(LS, b"r2", R2, slkfd=fd))
call("acquire", "r2 lvb again", lambda: sanlock.acquire(LS, b"r2", R2, slkfd=fd, lvb=True))
call("get_lvb", "r2 after release", lambda: sanlock.get_lvb(LS, b"r2", R2, 16))
call("release", "r2 again", lambda: sanlock.release(LS, b"r2", R2, slkfd=fd))
call("request", "r1 old version", lambda: sanlock.request(LS, b"r1", R1, action=sanlock.REQ_FORCE, version=1))
call("request", "r1 clear", lambda: sanlock.request(LS, b"r1", R1, action=0, version=0))
call("release", "r1", lambda: sanlock.release(LS, b"r1", R1, slkfd=fd))
call("release", "r1 not held", lambda: sanlock.release(LS, b"r1", R1, slkfd=fd))
call("acquire", "r1 version 5 (is 1)", lambda: sanlock.acquire(LS, b"r1", R1, slkfd=fd, version=5))
call("acquire", "r1 version 1", lambda: sanlock.acquire(LS, b"r1", R1, slkfd=fd, version=1))
call("inquire", "r1 lver 2", lambda: sanlock.inquire(slkfd=fd))
call("release", "r1 lver 2", lambda: sanlock.release(LS, b"r1", R1, slkfd=fd))
call("acquire", "r3 shared", lambda: sanlock.acquire(LS, b"r3", R3, slkfd=fd, shared=True))
call("inquire", "r3 shared", lambda: sanlock.inquire(slkfd=fd))
call("read_resource_owners", "r3 shared", lambda: sanlock.read_resource_owners(LS, b"r3", R3))
call("release", "r3 shared", lambda: sanlock.release(LS, b"r3", R3, slkfd=fd))
call("acquire", "unknown lockspace", lambda: sanlock.acquire(b"nosuch", b"r1", R1, slkfd=fd))
call("acquire", "wrong name at offset", lambda: sanlock.acquire(LS, b"zz", R1, slkfd=fd))

# Another process holds r1: a second client of this host cannot take it.
holder = subprocess.Popen(
    [sys.executable, "-c",
     "import sanlock,sys\n"
     "fd=sanlock.register()\n"
     "sanlock.acquire(%r, b'r1', [(%r, %d)], slkfd=fd)\n"
     "print('held', flush=True)\n"
     "sys.stdin.readline()\n" % (LS, PATH, MIB)],
    stdin=subprocess.PIPE, stdout=subprocess.PIPE)
assert holder.stdout.readline().strip() == b"held"
call("acquire", "r1 held by another process", lambda: sanlock.acquire(LS, b"r1", R1, slkfd=fd))
call("acquire", "for pid (held elsewhere)", lambda: sanlock.acquire(LS, b"r1", R1, pid=holder.pid))
call("inquire", "by pid", lambda: sanlock.inquire(pid=holder.pid))
call("release", "for pid", lambda: sanlock.release(LS, b"r1", R1, pid=holder.pid))
call("inquire", "by pid after release", lambda: sanlock.inquire(pid=holder.pid))
holder.stdin.write(b"\n")
holder.stdin.close()
holder.wait()
call("inquire", "unregistered pid", lambda: sanlock.inquire(pid=holder.pid))

# --- events ---
efd = sanlock.reg_event(LS)
call("reg_event", "ls", lambda: efd, shape=is_int)
call("reg_event", "unknown lockspace", lambda: sanlock.reg_event(b"nosuch"))
call("get_event", "nothing pending", lambda: sanlock.get_event(efd))
call("set_event", "host 2", lambda: sanlock.set_event(LS, 2, 0, 7, data=9))
call("set_event", "replace within bitmap time", lambda: sanlock.set_event(LS, 2, 0, 8))
call("set_event", "replace flag", lambda: sanlock.set_event(LS, 2, 0, 8, flags=sanlock.SETEV_REPLACE_EVENT))
call("set_event", "clear", lambda: sanlock.set_event(LS, 2, 0, 0, flags=sanlock.SETEV_CLEAR_EVENT | sanlock.SETEV_CLEAR_HOSTID))
call("set_event", "unknown lockspace", lambda: sanlock.set_event(b"nosuch", 2, 0, 7))
call("end_event", "ls", lambda: sanlock.end_event(efd, LS))

# --- leaving ---
call("rem_lockspace", "while registered client", lambda: sanlock.rem_lockspace(LS, 1, PATH, 0))
call("inq_lockspace", "after rem", lambda: sanlock.inq_lockspace(LS, 1, PATH, 0))
call("rem_lockspace", "again", lambda: sanlock.rem_lockspace(LS, 1, PATH, 0))
call("add_lockspace", "async", lambda: sanlock.add_lockspace(LS, 1, PATH, 0, iotimeout=1, wait=False))
call("inq_lockspace", "wait for async add", lambda: sanlock.inq_lockspace(LS, 1, PATH, 0, wait=True))
call("rem_lockspace", "async", lambda: sanlock.rem_lockspace(LS, 1, PATH, 0, wait=False))
# Right after an asynchronous removal the lockspace is still there (its holders are being
# stopped; its lease is still held): sanlock answers True, with or without wait.
call("inq_lockspace", "wait, right after async rem", lambda: sanlock.inq_lockspace(LS, 1, PATH, 0, wait=True))


def answers_until_gone():
    # inq_lockspace (no wait) polled every 50 ms after an asynchronous removal, at most
    # 10 s. Both daemons answer True (still there), then None (-EINPROGRESS while the lease
    # is released), then False (gone); a poll can miss the short None step (or the True
    # step) on a loaded machine, so the result is whether the answers kept that order and
    # ended in False, not which steps a poll happened to see.
    seen = []
    for _ in range(200):
        answer = sanlock.inq_lockspace(LS, 1, PATH, 0)
        if not seen or seen[-1] is not answer:
            seen.append(answer)
        if answer is False:
            break
        time.sleep(0.05)
    rank = {True: 0, None: 1, False: 2}
    ordered = all(rank[a] < rank[b] for a, b in zip(seen, seen[1:]))
    return {"ordered True, None, False": ordered, "last": seen[-1]}


call("inq_lockspace", "polled after async rem until gone", answers_until_gone)


def empty_within_10s():
    for _ in range(100):
        if not sanlock.get_lockspaces():
            return True
        time.sleep(0.1)
    return sanlock.get_lockspaces()


call("get_lockspaces", "empty after rem", empty_within_10s)
os.close(fd)
