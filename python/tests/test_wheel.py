"""The wheel: built by the standard tool (`pip wheel`, as scripts/build-python.sh does
for $LOCKD_WHEEL, and again here from a copy of the source), it ships `py.typed` and one
version (lockd.__version__) with the project's URLs; it installs with pip into a new
virtual environment, `import lockd` works there as an unprivileged user, and mypy
--strict ($LOCKD_MYPY, installed by scripts/test-python.sh) type-checks a program
against the installed package."""

import os
import shutil
import subprocess
import sys
import zipfile

import lockd
from conftest import ROOT, Scratch, run

PROBE_OK = '''
import lockd

def take(spec: str) -> int:
    lease = lockd.Lease(spec, timeout=0)
    if not lease.acquire(blocking=False):
        return 0
    lease.release()
    held: lockd.Lease = lease.acquire()
    info: lockd.LeaderInfo = lockd.leader(spec)
    rows: list[lockd.LockInfo] = lockd.locks("ls", [spec])
    return (held.token or 0) + info.token + len(rows)

async def atake(spec: str) -> int:
    async with lockd.aio.Lease(spec) as lease:
        rows = await lockd.aio.locks("ls")
        return (lease.token or 0) + len(rows)
'''

PROBE_BAD = '''
import lockd

name: int = lockd.leader("ls:r:/d:0").host_name
'''


def wheel_path() -> str:
    wheel = os.environ.get("LOCKD_WHEEL")
    assert wheel and os.path.exists(wheel), "LOCKD_WHEEL is not set: run scripts/test-python.sh"
    return wheel


def metadata(wheel: str) -> tuple[list[str], str]:
    with zipfile.ZipFile(wheel) as z:
        names = sorted(z.namelist())
        meta = z.read(f"lockd-{lockd.__version__}.dist-info/METADATA").decode()
    return names, meta


def test_wheel_ships_py_typed_one_version_and_urls() -> None:
    wheel = wheel_path()
    assert os.path.basename(wheel) == f"lockd-{lockd.__version__}-py3-none-any.whl"
    names, meta = metadata(wheel)
    assert "lockd/py.typed" in names and "lockd/results.py" in names
    assert f"\nVersion: {lockd.__version__}\n" in meta
    assert "\nProject-URL: Homepage, https://" in meta
    assert "\nRequires-Python: >=3.9\n" in meta


def test_pip_wheel_builds_the_same_wheel_from_the_source() -> None:
    s = Scratch("pipwheel")
    try:
        src = s.path("src")
        os.makedirs(src)
        for name in ("pyproject.toml", "README.md"):
            shutil.copy(os.path.join(ROOT, name), src)
        shutil.copytree(os.path.join(ROOT, "lockd"), os.path.join(src, "lockd"),
                        ignore=shutil.ignore_patterns("__pycache__"))
        out = s.path("out")
        run(["/usr/bin/python3", "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
             "--no-index", "-w", out, src], timeout=120)
        built = [f for f in os.listdir(out) if f.endswith(".whl")]
        assert built == [os.path.basename(wheel_path())], built
        assert metadata(os.path.join(out, built[0])) == metadata(wheel_path())
    finally:
        s.cleanup()


def test_wheel_installs_in_fresh_venv_and_imports_without_root() -> None:
    wheel = wheel_path()
    s = Scratch("venv")
    try:
        venv = s.path("venv")
        run(["/usr/bin/python3", "-m", "venv", venv])
        run([f"{venv}/bin/pip", "install", "--no-index", "--no-cache-dir", wheel], timeout=120)
        assert shutil.which("setpriv"), "setpriv is missing: install util-linux"
        probe = ("import lockd, os, sys; assert os.geteuid() != 0; "
                 "print(lockd.__file__); print(lockd.__version__); "
                 "sp = lockd.LeaseSpec.parse('ls:r:/dev/x:1M'); print(sp.offset)\n"
                 "try:\n    lockd.Lease(sp, run_dir='/nonexistent').acquire()\n"
                 "except lockd.DaemonGone as e:\n    print('gone', e.code)\n"
                 "print(lockd.Lease(sp, run_dir='/nonexistent').cancel())\n")
        out = subprocess.run(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
             f"{venv}/bin/python", "-I", "-c", probe],
            capture_output=True, text=True, cwd="/", env={"PATH": "/usr/bin:/bin"})
        assert out.returncode == 0, out.stderr
        lines = out.stdout.split()
        assert lines[0].startswith(f"{venv}/lib/python3") and "site-packages/lockd" in lines[0]
        assert lines[1:] == [lockd.__version__, str(1 << 20), "gone", "-2", "None"], lines

        # The installed package's types reach mypy (py.typed).
        mypy = os.environ.get("LOCKD_MYPY")
        assert mypy and os.access(mypy, os.X_OK), \
            "LOCKD_MYPY is not set: run scripts/test-python.sh (it installs mypy)"
        work = s.path("probe")
        os.makedirs(work)
        for name, text in (("ok.py", PROBE_OK), ("bad.py", PROBE_BAD)):
            with open(os.path.join(work, name), "w") as f:
                f.write(text)
        cmd = [mypy, "--strict", "--no-incremental", "--python-executable", f"{venv}/bin/python"]
        ok = subprocess.run(cmd + ["ok.py"], capture_output=True, text=True, cwd=work)
        assert ok.returncode == 0, ok.stdout + ok.stderr
        bad = subprocess.run(cmd + ["bad.py"], capture_output=True, text=True, cwd=work)
        assert bad.returncode == 1, bad.stdout + bad.stderr
        assert 'Incompatible types in assignment (expression has type "str", variable has ' \
            'type "int")' in bad.stdout, bad.stdout
        assert "py.typed" not in bad.stdout and "library stubs" not in bad.stdout
    finally:
        s.cleanup()
    assert sys.version_info >= (3, 9)
