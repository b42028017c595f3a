#!/usr/bin/env bash
# Installs what the virtual-machine test bed (tests/vmbed) needs, from Debian's packages
# only: QEMU (TCG) with its iSCSI block driver, tgt (the iSCSI target), nfs-ganesha with its
# VFS backend, busybox-static, sg3-utils, dmsetup and python3.11 (the chaos bed's election client) for
# the guests, kmod (depmod), and
# Debian's 6.1 kernel package, unpacked (not installed) under /var/tmp/lockd-vmbed/kernel
# with its modules.dep.
# With --sid also Debian unstable's kernel (7.2, split into linux-binary and linux-modules
# packages), downloaded inside the cached sid chroot (scripts/debian-chroot.sh; made if
# missing) and unpacked under /var/tmp/lockd-vmbed/kernel-sid: the kernel targets, the
# NVMe/TCP initiator and the block PR read ioctls of `vmbed.sh --storage lio|nvme-tcp`.
# With --trixie also Debian 13's kernel (6.12: block PR ioctls without the read ioctls, so
# lockd fences through SG_IO), under /var/tmp/lockd-vmbed/kernel-trixie, for
# LOCKD_VMBED_GUEST_KERNEL=trixie.
# Idempotent; needs root.
set -euo pipefail
pkgs=()
for p in qemu-system-x86 qemu-block-extra tgt nfs-ganesha nfs-ganesha-vfs busybox-static \
    sg3-utils dmsetup sanlock kmod python3.11; do
    dpkg -s "$p" >/dev/null 2>&1 || pkgs+=("$p")
done
if [ ${#pkgs[@]} -gt 0 ]; then
    echo "vmbed-setup: installing ${pkgs[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null
fi
kdir=/var/tmp/lockd-vmbed/kernel
# Both the kernel and its modules.dep: a run cut short between them starts over.
if ! ls "$kdir"/root/boot/vmlinuz-* "$kdir"/root/lib/modules/*/modules.dep >/dev/null 2>&1; then
    pkg=$(apt-cache search --names-only '^linux-image-6\.1\.0-[0-9]+-amd64$' | awk '{print $1}' | sort -V | tail -1)
    if [ -z "$pkg" ]; then
        apt-get update -qq
        pkg=$(apt-cache search --names-only '^linux-image-6\.1\.0-[0-9]+-amd64$' | awk '{print $1}' | sort -V | tail -1)
    fi
    [ -n "$pkg" ] || { echo "vmbed-setup: no linux-image-6.1.0-*-amd64 package found" >&2; exit 1; }
    echo "vmbed-setup: unpacking $pkg"
    rm -rf "$kdir" && mkdir -p "$kdir"
    (cd "$kdir" && apt-get download -qq "$pkg" 2>/dev/null && dpkg-deb -x ./*.deb root && rm -f ./*.deb)
    kver=$(ls "$kdir/root/lib/modules")
    depmod -b "$kdir/root" "$kver"
fi
echo "vmbed-setup: kernel $(ls "$kdir/root/lib/modules")"

# Debian unstable's kernel (--sid; linux-image-V depends on linux-binary-V and
# linux-modules-V) or Debian 13's (--trixie; one linux-image-V package), downloaded inside
# that suite's cached chroot and unpacked under /var/tmp/lockd-vmbed/kernel-SUITE.
unpack_suite_kernel() {
    local suite=$1 sdir=/var/tmp/lockd-vmbed/kernel-$1 here ver pkgs d
    if ! { ls "$sdir"/root/boot/vmlinuz-* || ls "$sdir"/root/usr/lib/modules/*/vmlinuz; } >/dev/null 2>&1; then
        here=$(cd "$(dirname "$0")" && pwd)
        bash "$here/debian-chroot.sh" ensure "$suite" >/dev/null
        ver=$(bash "$here/debian-chroot.sh" run "$suite" -- apt-cache depends linux-image-amd64 |
            sed -n 's/.*Depends: linux-image-\(.*\)$/\1/p' | head -1)
        [ -n "$ver" ] || { echo "vmbed-setup: no linux-image in the $suite chroot" >&2; exit 1; }
        if [ "$suite" = sid ]; then pkgs="linux-binary-$ver linux-modules-$ver"; else pkgs="linux-image-$ver"; fi
        echo "vmbed-setup: unpacking Debian $suite's kernel $ver"
        rm -rf "$sdir" && mkdir -p "$sdir"
        bash "$here/debian-chroot.sh" run "$suite" --bind "$sdir" -- sh -c \
            "cd '$sdir' && apt-get download -qq $pkgs 2>&1 | grep -v unsandboxed || true"
        for d in $pkgs; do
            ls "$sdir/${d}"_*.deb >/dev/null 2>&1 || { echo "vmbed-setup: $d was not downloaded" >&2; exit 1; }
            dpkg-deb -x "$sdir/${d}"_*.deb "$sdir/root"
        done
        rm -f "$sdir"/*.deb
        depmod -b "$sdir/root/usr" "$ver" 2>/dev/null
    fi
    echo "vmbed-setup: $suite kernel $(ls "$sdir/root/usr/lib/modules")"
}
for a in "$@"; do
    case $a in
        --sid) unpack_suite_kernel sid ;;
        --trixie) unpack_suite_kernel trixie ;;
        *) echo "vmbed-setup: unknown option $a (--sid, --trixie)" >&2; exit 2 ;;
    esac
done
