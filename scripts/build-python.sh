#!/usr/bin/env bash
# Builds the `lockd` Python package (pure Python, python/) as a wheel with the system
# python3 and setuptools — no compiler, no network — and prints the wheel's path on its
# last line. Installs python3-pip/setuptools/wheel from Debian if missing (run as root
# then). Usage: scripts/build-python.sh [OUT_DIR] (default target/python).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-/usr/bin/python3}
out=${1:-target/python}

if ! { "$PY" -c "import pip" && "$PY" -c "import setuptools" && "$PY" -c "import wheel"; } 2>/dev/null; then
    echo "build-python: installing python3-pip python3-setuptools python3-wheel" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y python3-pip python3-setuptools \
        python3-wheel >&2
fi
mkdir -p "$out"
rm -f "$out"/lockd-*.whl
build=$(mktemp -d)
trap 'rm -rf "$build"' EXIT
# Build from a copy so the source tree gets no build/ or *.egg-info droppings.
cp -r python/pyproject.toml python/README.md python/lockd "$build"/
find "$build" -name __pycache__ -prune -exec rm -rf {} +
"$PY" -m pip wheel --no-deps --no-build-isolation --no-index --quiet -w "$out" "$build" >&2
wheel=$(ls "$out"/lockd-*.whl)
realpath "$wheel"
