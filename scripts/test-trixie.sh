#!/usr/bin/env bash
# Debian 13 (trixie) against lockd, in a debootstrapped trixie chroot cached under
# /var/tmp/lockd-chroots/trixie (scripts/debian-chroot.sh; built on the first run, a few
# minutes; reused afterwards):
#  1. the .deb (packaging/build-deb.sh) installed, run, unit-verified, linted with trixie's
#     lintian and purged (packaging/test-deb-chroot.sh);
#  2. python3-sanlock 3.9.5: every daemon-facing call against a real sanlock 3.9.5
#     daemon and lockd, compared (daemon/tests/py/compare-in-chroot.sh);
#  3. the `sanlock client` 3.9.5 CLI: one command sequence against both, compared
#     (daemon/tests/cli/compare-cli-in-chroot.sh), and the same with the host's own
#     sanlock 3.8.5 (no chroot);
#  4. ctdb 4.22: tools/tests/ctdb_mutex.rs's real cluster (failover, rejoin) with trixie's
#     ctdbd and ctdb (LOCKD_CTDB_CHROOT=trixie);
#  5. libvirt 11.3's sanlock lock driver: two libvirt hosts (lock_manager = "sanlock",
#     auto_disk_leases) move a running TCG domain by live migration from a sanlock 3.9.5
#     host to a lockd host, between lockd hosts and back to sanlock, its disk's lease
#     following it (scripts/test-libvirt-migrate.sh, docs/migrating-from-sanlock.md's
#     libvirt runbook as written).
# Run as root from scripts/test-all.sh, after the workspace's binaries are built. Prints
# each part's time.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
target_dir=${CARGO_TARGET_DIR:-$PWD/target}
suite=trixie
[ "$(id -u)" = 0 ] || { echo "test-trixie: needs root (chroot, mounts, daemons)" >&2; exit 1; }

t=$SECONDS
scripts/debian-chroot.sh ensure "$suite" sanlock python3-sanlock python3 lintian systemd adduser \
    ctdb libvirt-daemon libvirt-daemon-driver-qemu libvirt-daemon-plugin-sanlock libvirt-clients \
    qemu-system-x86 >/dev/null
echo "test-trixie: chroot ready in $((SECONDS - t)) s"

daemon=$target_dir/debug/lockd-daemon
[ -x "$daemon" ] || cargo build -q -p lockd-daemon --bins

t=$SECONDS
deb=$(packaging/build-deb.sh)
packaging/test-deb-chroot.sh "$deb" "$suite"
echo "test-trixie: package test in $((SECONDS - t)) s"

t=$SECONDS
daemon/tests/py/compare-in-chroot.sh "$daemon" "$suite"
echo "test-trixie: python3-sanlock comparison in $((SECONDS - t)) s"

t=$SECONDS
daemon/tests/cli/compare-cli-in-chroot.sh "$daemon" "$suite"
echo "test-trixie: sanlock CLI comparison in $((SECONDS - t)) s"

# The same command sequence with this machine's own sanlock 3.8.5 (no chroot).
t=$SECONDS
daemon/tests/cli/compare-cli-in-chroot.sh "$daemon" host
echo "test-trixie: sanlock 3.8.5 CLI comparison (host) in $((SECONDS - t)) s"

# ctdb 4.22's ctdbd from the chroot, three nodes, each with a lockd on the host.
t=$SECONDS
LOCKD_CTDB_CHROOT=$suite cargo test -q -p lockd-tools --test ctdb_mutex \
    real_ctdb_cluster_failover_and_rejoin -- --exact --nocapture
echo "test-trixie: ctdb 4.22 cluster in $((SECONDS - t)) s"

# libvirt 11.3 with its sanlock plugin: live migration between sanlock 3.9.5 and lockd.
t=$SECONDS
scripts/test-libvirt-migrate.sh
echo "test-trixie: libvirt 11.3 sanlock lock driver, live migration in $((SECONDS - t)) s"

echo "test-trixie: all passed"
