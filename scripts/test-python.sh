#!/usr/bin/env bash
# The Python package's tests: builds the wheel (scripts/build-python.sh) and the
# binaries, then runs python/tests with pytest against real lockd daemons (two hosts on
# one loop device), a real sanlock 3.8 daemon, and the wheel installed in a fresh venv.
# Run as root (loop devices, FUSE views through lockd-faultfs, daemons). Installs python3-pytest,
# python3-venv and python3-pip from Debian if missing, and mypy (pinned, from PyPI) into a
# venv of its own in target/python/mypy-venv; `mypy --strict` must pass over the package,
# the examples and the tests (python/pyproject.toml's [tool.mypy]) before any test runs.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
PY=/usr/bin/python3

missing=()
"$PY" -c 'import pytest' 2>/dev/null || missing+=(python3-pytest)
"$PY" -c 'import ensurepip' 2>/dev/null || missing+=(python3-venv)
"$PY" -c 'import pip' 2>/dev/null || missing+=(python3-pip)
if ((${#missing[@]})); then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

MYPY_VERSION=2.4.1
mypy_venv="$PWD/target/python/mypy-venv"
if ! "$mypy_venv/bin/mypy" --version 2>/dev/null | grep -q "^mypy $MYPY_VERSION "; then
    echo "test-python: installing mypy $MYPY_VERSION into $mypy_venv"
    rm -rf "$mypy_venv"
    "$PY" -m venv "$mypy_venv"
    "$mypy_venv/bin/pip" install --quiet --disable-pip-version-check "mypy==$MYPY_VERSION"
fi
"$mypy_venv/bin/mypy" --version
# Against the system Python, whose pytest (Debian's, typed) the tests import.
(cd python && "$mypy_venv/bin/mypy" --cache-dir "$mypy_venv/cache" --python-executable "$PY")
export LOCKD_MYPY="$mypy_venv/bin/mypy"

# As scripts/test-all.sh builds (the same features: nothing rebuilt there).
cargo build --workspace --bins --examples
wheel=$(bash scripts/build-python.sh | tail -n 1)
echo "wheel: $wheel"
export LOCKD_BIN_DIR="$PWD/target/debug" LOCKD_WHEEL="$wheel"
cd python
exec "$PY" -m pytest -p no:cacheprovider -v tests "$@"
