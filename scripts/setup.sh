#!/usr/bin/env bash
# Installs what building and testing lockd needs on a fresh Debian machine: the Rust
# toolchain's components, systemd-analyze, man/groff, the real sanlock (daemon, CLI, python3
# bindings, headers) that the interop tests run against, and ctdb (the CTDB cluster test of
# lockd-ctdb-mutex, tools/tests/ctdb_mutex.rs). Idempotent; needs root for apt-get.
set -euo pipefail

need_pkgs=()
# systemd: systemd-analyze verify on the units; man-db and groff-base: man page checks;
# ctdb: the CTDB cluster test; prometheus: promtool and the server for
# daemon/tests/metrics.rs; lintian, dpkg-dev (dpkg-shlibdeps) and binutils (strip,
# readelf): the .deb build and its test; python3-pytest, python3-venv, python3-pip: the
# Python package's tests (scripts/test-python.sh); debootstrap: the chroots of newer
# Debian releases (scripts/debian-chroot.sh, scripts/test-trixie.sh).
for p in sanlock python3-sanlock libsanlock-dev fuse3 util-linux systemd man-db groff-base ctdb \
    prometheus lintian dpkg-dev binutils python3-pytest python3-venv python3-pip debootstrap; do
    dpkg -s "$p" >/dev/null 2>&1 || need_pkgs+=("$p")
done
if [ ${#need_pkgs[@]} -gt 0 ]; then
    echo "setup: installing ${need_pkgs[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
fi

# The killpath helper's libvirt test (tools/tests/killpath.rs) runs its own libvirtd and a
# small TCG guest: libvirtd/virtlogd, virsh and qemu-system-x86_64. Without recommends
# (dnsmasq, firewall tools, … are not needed).
virt_pkgs=()
for p in libvirt-daemon-system libvirt-clients qemu-system-x86; do
    dpkg -s "$p" >/dev/null 2>&1 || virt_pkgs+=("$p")
done
if [ ${#virt_pkgs[@]} -gt 0 ]; then
    echo "setup: installing ${virt_pkgs[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${virt_pkgs[@]}" >/dev/null
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
