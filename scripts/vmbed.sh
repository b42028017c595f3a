#!/usr/bin/env bash
# The virtual-machine test bed (tests/vmbed/vmbed.py): QEMU TCG guests with Debian's
# kernel, an iSCSI LUN from tgt, an NFS export from nfs-ganesha, wdmd on each guest's
# i6300esb watchdog. Installs what it needs, builds the release binaries and the guest
# image, then runs the named scenarios (all without arguments; --list lists them; --ci the
# CI subset) and prints one line per scenario and a table.
#
#   scripts/vmbed.sh [--ci | --list | SCENARIO…] [--io-timeout D] [--fire-timeout W] [--keep]
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
for a in "$@"; do
    if [ "$a" = --list ]; then exec python3 tests/vmbed/vmbed.py --list; fi
done
bash scripts/vmbed-setup.sh
cargo build -q --release -p lockd-tools -p lockd-daemon -p wdmd -p lockd-system-tests \
    --bin lockd --bin lockd-daemon --bin wdmd --bin lockd-witness
# LOCKD_VMBED_IMAGE: where the guest image goes (default /var/tmp/lockd-vmbed/image); a
# second worktree on the same machine gives its own so the two do not overwrite each other.
export LOCKD_VMBED_IMAGE="${LOCKD_VMBED_IMAGE:-/var/tmp/lockd-vmbed/image}"
bash tests/vmbed/build-initramfs.sh "$LOCKD_VMBED_IMAGE" target/release
baseline=$(mktemp)
trap 'rm -f "$baseline"' EXIT
bash scripts/leftovers.sh snapshot "$baseline"
rc=0
python3 tests/vmbed/vmbed.py "$@" || rc=$?
bash scripts/leftovers.sh check "$baseline" || rc=1
exit "$rc"
