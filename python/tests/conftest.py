"""Fixtures of the Python package's system tests: scratch storage under /var/tmp
(O_DIRECT does not work on tmpfs), loop and device-mapper devices that are always
removed, lockd and sanlock daemons that are always stopped by their PID.

Needs root (loop devices, dmsetup), the built binaries in $LOCKD_BIN_DIR (lockd,
lockd-daemon, lockd-fenced-store; scripts/test-python.sh builds them), and sanlock 3.8.
A missing piece fails the test naming what to install; nothing is skipped.
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
EXAMPLES = os.path.join(ROOT, "examples")
sys.path.insert(0, ROOT)

import lockd  # noqa: E402
from lockd import _conn  # noqa: E402

IO_TIMEOUT = 1
FIRE_TIMEOUT = 5
HOST_DEAD = 8 * IO_TIMEOUT + FIRE_TIMEOUT
KILL_GRACE = 5

T = TypeVar("T")
#: A Child's event: one JSON object of its stdout, plus ``t_test``.
Event = dict[str, Any]


def bin_path(name: str) -> str:
    d = os.environ.get("LOCKD_BIN_DIR")
    assert d, "LOCKD_BIN_DIR is not set: run the tests through scripts/test-python.sh"
    p = os.path.join(d, name)
    assert os.access(p, os.X_OK), f"{p} is missing: build it (cargo build --bins)"
    return p


def run(cmd: list[str], env: dict[str, str] | None = None, check: bool = True,
        timeout: float = 60) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    if check:
        assert out.returncode == 0, f"{cmd} failed ({out.returncode}):\n{out.stdout}\n{out.stderr}"
    return out


def require(tool: str, package: str) -> None:
    assert shutil.which(tool), f"`{tool}` is missing: install the Debian package {package}"


def wait_for(secs: float, fn: Callable[[], T], step: float = 0.1) -> T | None:
    deadline = time.monotonic() + secs
    while time.monotonic() < deadline:
        v = fn()
        if v:
            return v
        time.sleep(step)
    return None


class Scratch:
    def __init__(self, tag: str) -> None:
        self.dir = f"/var/tmp/lockd-py-{tag}-{os.getpid()}"
        shutil.rmtree(self.dir, ignore_errors=True)
        os.makedirs(self.dir)
        os.chmod(self.dir, 0o755)

    def file(self, name: str, mib: int) -> str:
        p = os.path.join(self.dir, name)
        with open(p, "wb") as f:
            f.truncate(mib << 20)
        return p

    def path(self, name: str) -> str:
        return os.path.join(self.dir, name)

    def cleanup(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


class Loop:
    def __init__(self, file: str) -> None:
        require("losetup", "mount")
        self.dev = run(["losetup", "-f", "--show", file]).stdout.strip()
        assert self.dev.startswith("/dev/loop"), self.dev

    def detach(self) -> None:
        subprocess.run(["losetup", "-d", self.dev], capture_output=True)


class FaultFs:
    """Host A's own view of the shared device through lockd-faultfs (FUSE): its I/O can
    be stalled (a hung SAN path) while the other host's view keeps working. The mount
    goes away with the process (AutoUnmount); stopped by PID."""

    def __init__(self, scratch: Scratch, backing: str) -> None:
        self.mnt = scratch.path("faultfs-mnt")
        self.control = scratch.path("faultfs.sock")
        os.makedirs(self.mnt, exist_ok=True)
        self.log = open(scratch.path("faultfs.log"), "w")
        self.proc = subprocess.Popen(
            [bin_path("lockd-faultfs"), "--backing", backing, "--mount", self.mnt,
             "--control", self.control], stdout=self.log, stderr=self.log)
        self.dev = os.path.join(self.mnt, "disk.img")
        assert wait_for(10, lambda: os.path.exists(self.dev)), "the FUSE view never appeared"

    def mode(self, command: str) -> None:
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(5)
        try:
            s.connect(self.control)
            s.sendall(command.encode() + b"\n")
            reply = s.makefile().readline().strip()
        finally:
            s.close()
        assert reply.startswith("ok"), f"lockd-faultfs {command}: {reply}"

    def stall(self) -> None:
        self.mode("stall")

    def passthrough(self) -> None:
        self.mode("pass")

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                self.mode("pass")
            except (OSError, AssertionError):
                pass
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        # Whatever os.path.ismount says: on a FUSE mount whose server is gone it cannot
        # stat the mount point (ENOTCONN) and answers False, and such a mount would stay.
        subprocess.run(["umount", "-l", self.mnt], capture_output=True)


class Daemon:
    """A lockd daemon (``kind`` "lockd") or a real sanlock daemon (``-w 0``, private run
    dir, SANLOCK_PRIVILEGED=0), stopped by PID."""

    def __init__(self, scratch: Scratch, name: str, kind: str = "lockd") -> None:
        self.name, self.kind = name, kind
        self.run_dir = scratch.path(f"run-{name}")
        os.makedirs(self.run_dir, exist_ok=True)
        self.log = scratch.path(f"{kind}-{name}.log")
        logf = open(self.log, "w")
        env = dict(os.environ)
        if kind == "lockd":
            conf = scratch.path(f"lockd-{name}.toml")
            with open(conf, "w") as f:
                f.write(f"watchdog_fire_timeout = {FIRE_TIMEOUT}\n"
                        f"kill_grace_seconds = {KILL_GRACE}\n")
            cmd = [bin_path("lockd-daemon"), "-w", "0", "-c", conf, "-D", "-e", name,
                   "-o", str(IO_TIMEOUT), "--run-dir", self.run_dir]
            env["LOCKD_LOG"] = "debug"
        else:
            require("sanlock", "sanlock")
            cmd = ["sanlock", "daemon", "-D", "-w", "0", "-e", name]
            env["SANLOCK_RUN_DIR"] = self.run_dir
            env["SANLOCK_PRIVILEGED"] = "0"
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=logf,
                                     stderr=logf, env=env)
        sock = os.path.join(self.run_dir, "sanlock.sock")

        def up() -> bool:
            s = socket.socket(socket.AF_UNIX)
            try:
                s.connect(sock)
                return True
            except OSError:
                return False
            finally:
                s.close()
        assert wait_for(10, up), f"{kind} socket never appeared:\n{self.log_text()}"

    def env(self) -> dict[str, str]:
        e = dict(os.environ)
        e["SANLOCK_RUN_DIR"] = self.run_dir
        e["LOCKD_RUN_DIR"] = self.run_dir
        e["PYTHONPATH"] = ROOT
        return e

    def lockd(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return run([bin_path("lockd"), *args, "--run-dir", self.run_dir], check=check)

    def join(self, ls: str, host_id: int, path: str, offset: int = 0) -> None:
        if self.kind == "lockd":
            self.lockd("add-lockspace", "-s", f"{ls}:{host_id}:{path}:{offset}", "-o",
                       str(IO_TIMEOUT))
        else:
            run(["sanlock", "client", "add_lockspace", "-s", f"{ls}:{host_id}:{path}:{offset}",
                 "-o", str(IO_TIMEOUT)], env=self.env())

    def log_text(self) -> str:
        try:
            with open(self.log) as f:
                return f.read()[-6000:]
        except OSError:
            return ""

    def kill9(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc.poll() is not None:
            return
        if self.kind == "lockd":
            try:
                with _conn.Conn(self.run_dir) as c:
                    c.send(4, 0, 1)  # SM_CMD_SHUTDOWN, force
            except lockd.LockdError:
                pass
        else:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class Child:
    """A Python program (an example) whose stdout is JSON event lines, read by a thread;
    killed by PID at the end."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen([sys.executable, "-u", *args], env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.events: list[Event] = []
        self.stderr: list[str] = []
        self._cv = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._read_err, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None  # stdout=PIPE
        for line in self.proc.stdout:
            ev: Event
            try:
                ev = json.loads(line)
            except ValueError:
                ev = {"event": "text", "line": line.rstrip()}
            ev["t_test"] = time.monotonic()
            with self._cv:
                self.events.append(ev)
                self._cv.notify_all()

    def _read_err(self) -> None:
        assert self.proc.stderr is not None  # stderr=PIPE
        for line in self.proc.stderr:
            self.stderr.append(line)

    def wait_event(self, name: str, secs: float, **match: object) -> Event:
        def find() -> Event | None:
            for e in self.events:
                if e.get("event") == name and all(e.get(k) == v for k, v in match.items()):
                    return e
            return None
        deadline = time.monotonic() + secs
        with self._cv:
            while True:
                e = find()
                if e is not None:
                    return e
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(
                        f"no {name!r} event within {secs} s; events: {self.events}\n"
                        f"stderr: {''.join(self.stderr)[-3000:]}")
                self._cv.wait(min(left, 0.2))

    def find(self, name: str) -> list[Event]:
        return [e for e in self.events if e.get("event") == name]

    def pid(self) -> int:
        return self.proc.pid

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)

    def wait(self, timeout: float = 30) -> int:
        return self.proc.wait(timeout=timeout)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def init_lockspace(ls: str, path: str, offset: int = 0) -> None:
    run([bin_path("lockd"), "direct", "init", "-s", f"{ls}:0:{path}:{offset}", "-o",
         str(IO_TIMEOUT)])


def init_resource(ls: str, name: str, path: str, offset: int) -> None:
    run([bin_path("lockd"), "direct", "init", "-r", f"{ls}:{name}:{path}:{offset}"])


class Cluster:
    """Two lockd "hosts" (hostA host_id 1, hostB host_id 2) sharing lockspace ``ls`` on
    one loop device; hostA sees the device through its own FUSE view (``fault``) so its
    storage alone can be stalled. ``spec(host, name)`` is a lease as that host names
    it. Resources: op-1..op-4 at 1..4 MiB, leader at 8 MiB, shared at 9 MiB, the others
    as ``RESOURCES`` lists them."""

    RESOURCES = {"op-1": 1, "op-2": 2, "op-3": 3, "op-4": 4, "leader": 8, "shared": 9,
                 "aio": 10, "observe": 11, "cancel": 12, "elect-aio": 13}

    def __init__(self, tag: str, file_backed: bool = False) -> None:
        """``file_backed``: the lockspace lives in a regular file both hosts open
        directly (no loop device, no FUSE view)."""
        self.scratch = Scratch(tag)
        self.undo: list[Callable[[], None]] = []
        self.fault: FaultFs | None = None
        try:
            img = self.scratch.file("disk.img", 64)
            if file_backed:
                self.shared = img
            else:
                self.loop = Loop(img)
                self.undo.append(self.loop.detach)
                self.shared = self.loop.dev
                self.fault = FaultFs(self.scratch, self.loop.dev)
                self.undo.append(self.fault.stop)  # runs after host A's daemon stopped
            init_lockspace("ls", self.shared)
            for name, mib in self.RESOURCES.items():
                init_resource("ls", name, self.shared, mib << 20)
            self.a = Daemon(self.scratch, "hostA")
            self.undo.append(self.a.stop)
            self.b = Daemon(self.scratch, "hostB")
            self.undo.append(self.b.stop)
            ta = threading.Thread(target=self.a.join, args=("ls", 1, self.path(self.a)))
            ta.start()
            self.b.join("ls", 2, self.path(self.b))
            ta.join()
            # Both must see each other live before leases are taken across hosts.
            assert wait_for(20, lambda: self._sees(self.a, 2) and self._sees(self.b, 1)), \
                "the hosts never saw each other live"
        except BaseException:
            self.close()
            raise

    def _sees(self, d: Daemon, host_id: int) -> bool:
        try:
            return any(h.host_id == host_id and h.state == "live"
                       for h in _conn.get_hosts(d.run_dir, "ls", 0))
        except lockd.LockdError:
            return False

    def path(self, d: Daemon) -> str:
        return self.fault.dev if (d is self.a and self.fault) else self.shared

    def spec(self, d: Daemon, name: str) -> str:
        return f"ls:{name}:{self.path(d)}:{self.RESOURCES[name]}M"

    def close(self) -> None:
        for f in reversed(self.undo):
            try:
                f()
            except Exception as e:  # noqa: BLE001 - every undo step runs
                print(f"cleanup step failed: {e!r}", file=sys.stderr)
        self.undo = []
        self.scratch.cleanup()


@pytest.fixture(scope="module")
def cluster(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    c = Cluster(request.module.__name__.rsplit(".", 1)[-1].replace("test_", "")[:10])
    yield c
    c.close()


#: The ``children`` fixture: starts a Child, closed at the end of the test.
StartChild = Callable[[list[str], dict[str, str]], Child]


@pytest.fixture
def children() -> Iterator[StartChild]:
    made: list[Child] = []

    def start(args: list[str], env: dict[str, str]) -> Child:
        ch = Child(args, env)
        made.append(ch)
        return ch
    yield start
    for ch in made:
        ch.close()
