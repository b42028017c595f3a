"""The built wheel (scripts/build-python.sh, $LOCKD_WHEEL) installs with pip into a new
virtual environment, and `import lockd` works there as an unprivileged user."""

import os
import shutil
import subprocess
import sys

from conftest import Scratch, run


def test_wheel_installs_in_fresh_venv_and_imports_without_root():
    wheel = os.environ.get("LOCKD_WHEEL")
    assert wheel and os.path.exists(wheel), "LOCKD_WHEEL is not set: run scripts/test-python.sh"
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
                 "except lockd.DaemonGone as e:\n    print('gone', e.code)\n")
        out = subprocess.run(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
             f"{venv}/bin/python", "-I", "-c", probe],
            capture_output=True, text=True, cwd="/", env={"PATH": "/usr/bin:/bin"})
        assert out.returncode == 0, out.stderr
        lines = out.stdout.split()
        assert lines[0].startswith(f"{venv}/lib/python3") and "site-packages/lockd" in lines[0]
        assert lines[1:] == ["0.1.0", str(1 << 20), "gone", "-2"], lines
    finally:
        s.cleanup()
    assert sys.version_info >= (3, 9)
