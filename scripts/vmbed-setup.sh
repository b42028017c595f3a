#!/usr/bin/env bash
# Installs what the virtual-machine test bed (tests/vmbed) needs, from Debian's packages
# only: QEMU (TCG) with its iSCSI block driver, tgt (the iSCSI target), nfs-ganesha with its
# VFS backend, busybox-static, sg3-utils and dmsetup for the guests, and Debian's 6.1 kernel
# package, unpacked (not installed) under /var/tmp/lockd-vmbed/kernel with its modules.dep.
# With --sid also Debian unstable's kernel (7.2, split into linux-binary and linux-modules
# packages), downloaded inside the cached sid chroot (scripts/debian-chroot.sh; made if
# missing) and unpacked under /var/tmp/lockd-vmbed/kernel-sid: the kernel targets, the
# NVMe/TCP initiator and the block PR read ioctls of `vmbed.sh --storage lio|nvme-tcp`.
# Idempotent; needs root.
set -euo pipefail
pkgs=()
for p in qemu-system-x86 qemu-block-extra tgt nfs-ganesha nfs-ganesha-vfs busybox-static \
    sg3-utils dmsetup sanlock; do
    dpkg -s "$p" >/dev/null 2>&1 || pkgs+=("$p")
done
if [ ${#pkgs[@]} -gt 0 ]; then
    echo "vmbed-setup: installing ${pkgs[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null
fi
kdir=/var/tmp/lockd-vmbed/kernel
if ! ls "$kdir"/root/boot/vmlinuz-* >/dev/null 2>&1; then
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

if [ "${1:-}" = --sid ]; then
    sdir=/var/tmp/lockd-vmbed/kernel-sid
    if ! ls "$sdir"/root/usr/lib/modules/*/vmlinuz >/dev/null 2>&1; then
        here=$(cd "$(dirname "$0")" && pwd)
        bash "$here/debian-chroot.sh" ensure sid >/dev/null
        # linux-image-amd64 -> linux-image-V -> linux-binary-V and linux-modules-V.
        ver=$(bash "$here/debian-chroot.sh" run sid -- apt-cache depends linux-image-amd64 |
            sed -n 's/.*Depends: linux-image-\(.*\)$/\1/p' | head -1)
        [ -n "$ver" ] || { echo "vmbed-setup: no linux-image in the sid chroot" >&2; exit 1; }
        echo "vmbed-setup: unpacking Debian unstable's kernel $ver"
        rm -rf "$sdir" && mkdir -p "$sdir"
        bash "$here/debian-chroot.sh" run sid --bind "$sdir" -- sh -c \
            "cd '$sdir' && apt-get download -qq linux-binary-$ver linux-modules-$ver 2>&1 | grep -v unsandboxed || true"
        for d in "$sdir"/linux-binary-*.deb "$sdir"/linux-modules-*.deb; do
            [ -f "$d" ] || { echo "vmbed-setup: $d was not downloaded" >&2; exit 1; }
            dpkg-deb -x "$d" "$sdir/root"
        done
        rm -f "$sdir"/*.deb
        depmod -b "$sdir/root/usr" "$ver" 2>/dev/null
    fi
    echo "vmbed-setup: sid kernel $(ls "$sdir/root/usr/lib/modules")"
fi
