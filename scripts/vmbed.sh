#!/usr/bin/env bash
# The virtual-machine test bed (tests/vmbed/vmbed.py): QEMU TCG guests with Debian's
# kernel, an iSCSI LUN from tgt, an NFS export from nfs-ganesha, wdmd on each guest's
# i6300esb watchdog. Installs what it needs, builds the release binaries and the guest
# image, then runs the named scenarios (all without arguments; --list lists them; --ci the
# CI subset) and prints one line per scenario and a table. The lvmlockd scenarios also need
# the cached Debian 13 chroot (scripts/debian-chroot.sh; made here if missing).
#
#   scripts/vmbed.sh [--ci | --list | SCENARIO…] [--io-timeout D] [--fire-timeout W] [--keep]
#                    [--storage tgt|lio|nvme-tcp|multipath]
# --storage lio|nvme-tcp|multipath boots Debian unstable's kernel (a storage guest running the
# kernel's target, and the lease guests), from an image built here (image-sid);
# LOCKD_VMBED_GUEST_KERNEL=sid boots tgt's guests on that kernel too, =trixie on Debian
# 13's 6.12 (image-trixie).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
for a in "$@"; do
    if [ "$a" = --list ]; then exec python3 tests/vmbed/vmbed.py --list; fi
done
want_sid=0
prev=
for a in "$@"; do
    case "$prev:$a" in
        --storage:lio|--storage:nvme-tcp|--storage:multipath|*:--storage=lio|*:--storage=nvme-tcp|*:--storage=multipath) want_sid=1 ;;
    esac
    prev=$a
done
setup_args=()
case ${LOCKD_VMBED_GUEST_KERNEL:-} in
    ''|bookworm) ;;
    sid) want_sid=1 ;;
    trixie) setup_args+=(--trixie) ;;
    *) echo "vmbed: LOCKD_VMBED_GUEST_KERNEL=${LOCKD_VMBED_GUEST_KERNEL} (sid, trixie or unset)" >&2; exit 2 ;;
esac
[ "$want_sid" = 1 ] && setup_args+=(--sid)
bash scripts/vmbed-setup.sh "${setup_args[@]}"
cargo build -q --release -p lockd-tools -p lockd-daemon -p wdmd -p lockd-system-tests \
    --bin lockd --bin lockd-daemon --bin wdmd --bin lockd-witness
# LOCKD_VMBED_IMAGE: where the guest image goes (default /var/tmp/lockd-vmbed/image); a
# second worktree on the same machine gives its own so the two do not overwrite each other.
export LOCKD_VMBED_IMAGE="${LOCKD_VMBED_IMAGE:-/var/tmp/lockd-vmbed/image}"
bash tests/vmbed/build-initramfs.sh "$LOCKD_VMBED_IMAGE" target/release
if [ "$want_sid" = 1 ]; then
    export LOCKD_VMBED_SID_IMAGE="${LOCKD_VMBED_SID_IMAGE:-/var/tmp/lockd-vmbed/image-sid}"
    bash tests/vmbed/build-initramfs.sh "$LOCKD_VMBED_SID_IMAGE" target/release sid
fi
if [ "${LOCKD_VMBED_GUEST_KERNEL:-}" = trixie ]; then
    export LOCKD_VMBED_TRIXIE_IMAGE="${LOCKD_VMBED_TRIXIE_IMAGE:-/var/tmp/lockd-vmbed/image-trixie}"
    bash tests/vmbed/build-initramfs.sh "$LOCKD_VMBED_TRIXIE_IMAGE" target/release trixie
fi
# The lvmlockd scenarios boot that image plus Debian 13's lvm2/lvm2-lockd 2.03.31 and sanlock
# 3.9.5 (tests/vmbed/build-trixie-lvm.sh, from the cached trixie chroot): built when the full
# run or an lvmlockd scenario is asked for, not for --ci.
want_lvm=1
names=0
skip=0
for a in "$@"; do
    if [ "$skip" = 1 ]; then skip=0; continue; fi
    case $a in
        --ci) want_lvm=0 ;;
        --io-timeout|--fire-timeout|--storage) skip=1 ;;
        -*) ;;
        lvmlockd*) names=2 ;;
        *) [ "$names" = 2 ] || names=1 ;;
    esac
done
[ "$names" = 1 ] && want_lvm=0
# The pr-rejoin-race and *-old-rule scenarios boot a daemon built with the `planted-bugs` feature (its
# pause points), from an image of their own, as scripts/chaos.sh --plant-bug does.
want_planted=0
[ "$names" = 0 ] && want_planted=1
for a in "$@"; do
    case $a in
        --ci) want_planted=0; break ;;
        pr-rejoin-race*|*-old-rule) want_planted=1 ;;
    esac
done
if [ "$want_planted" = 1 ]; then
    cargo build -q --release -p lockd-daemon --features planted-bugs --target-dir target/planted \
        --bin lockd-daemon
    planted_bins=/var/tmp/lockd-vmbed/bins-planted
    mkdir -p "$planted_bins"
    for b in lockd wdmd lockd-witness; do cp target/release/$b "$planted_bins/"; done
    cp target/planted/release/lockd-daemon "$planted_bins/"
    export LOCKD_VMBED_PLANTED_IMAGE=/var/tmp/lockd-vmbed/image-planted
    bash tests/vmbed/build-initramfs.sh "$LOCKD_VMBED_PLANTED_IMAGE" "$planted_bins"
fi
if [ "$want_lvm" = 1 ]; then
    bash scripts/debian-chroot.sh ensure trixie lvm2 lvm2-lockd sanlock >/dev/null
    bash tests/vmbed/build-trixie-lvm.sh "$LOCKD_VMBED_IMAGE"
fi
baseline=$(mktemp)
trap 'rm -f "$baseline"' EXIT
bash scripts/leftovers.sh snapshot "$baseline"
rc=0
python3 tests/vmbed/vmbed.py "$@" || rc=$?
bash scripts/leftovers.sh check "$baseline" || rc=1
exit "$rc"
