#!/usr/bin/env bash
# Installs what building and testing lockd needs on a fresh Debian machine: the Rust
# toolchain's components, and the real sanlock (daemon, CLI, python3 bindings, headers)
# that the interop tests run against. Idempotent; needs root for apt-get.
set -euo pipefail

need_pkgs=()
# prometheus: promtool and the server for daemon/tests/metrics.rs; lintian, dpkg-dev
# (dpkg-shlibdeps) and binutils (strip, readelf): the .deb build and its test.
for p in sanlock python3-sanlock libsanlock-dev fuse3 util-linux prometheus lintian dpkg-dev binutils; do
    dpkg -s "$p" >/dev/null 2>&1 || need_pkgs+=("$p")
done
if [ ${#need_pkgs[@]} -gt 0 ]; then
    echo "setup: installing ${need_pkgs[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
fi

if ! command -v cargo >/dev/null 2>&1; then
    if [ -x "$HOME/.cargo/bin/cargo" ]; then
        export PATH="$HOME/.cargo/bin:$PATH"
    else
        echo "setup: cargo is missing; install Rust (https://rustup.rs) first" >&2
        exit 1
    fi
fi
rustup component add clippy rustfmt >/dev/null 2>&1 || true
