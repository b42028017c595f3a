#!/usr/bin/env bash
# Builds the virtual-machine bed's guest image: Debian's 6.1 kernel (unpacked from its
# package by scripts/vmbed-setup.sh) and an initramfs holding busybox, the kernel modules a
# guest needs (virtio SCSI/net, sd, sg, i6300esb, NFS v4, device-mapper), the project's
# release binaries (lockd, lockd-daemon, wdmd, lockd-witness) and Debian's sanlock 3.8.5,
# sg_persist and dmsetup, each with its shared libraries, Python 3.11 with a trimmed standard
# library and the project's Python package (the chaos bed's election client), and the
# guest's /init and agent.
#
# usage: build-initramfs.sh OUT_DIR BIN_DIR [sid|trixie]
#   OUT_DIR gets vmlinuz and initrd.gz; BIN_DIR holds the release binaries. With `sid`, the
#   kernel is Debian unstable's (7.2: the block PR read ioctls, nvmet reservations, LIO),
#   unpacked under /var/tmp/lockd-vmbed/kernel-sid, and the image also holds the NVMe/TCP
#   initiator, the kernel targets (nvmet-tcp, LIO's iSCSI target with its block backend),
#   virtio-blk (the storage guest's disk) and dm-multipath; its modules, xz-compressed in
#   the package, are unpacked (busybox's modprobe loads plain .ko files). With `trixie`, the
#   kernel is Debian 13's (6.12: block PR ioctls but not the read ones), unpacked under
#   /var/tmp/lockd-vmbed/kernel-trixie, with the modules of the default image.
# Nothing is downloaded here: the kernel comes from /var/tmp/lockd-vmbed/kernel (made by
# scripts/vmbed-setup.sh from Debian's package), everything else from this machine.
set -euo pipefail
out=${1:?OUT_DIR}
bins=${2:?BIN_DIR}
flavour=${3:-}
here=$(cd "$(dirname "$0")" && pwd)
mods="virtio_pci virtio_scsi sd_mod sg i6300esb nfsv4 virtio_net dm-mod"
if [ "$flavour" = sid ]; then
    kroot=/var/tmp/lockd-vmbed/kernel-sid/root
    kver=$(ls "$kroot/usr/lib/modules" 2>/dev/null | head -1)
    kmods=$kroot/usr/lib/modules
    vmlinuz=$kmods/$kver/vmlinuz
    mods="$mods virtio_blk nvme-tcp nvmet-tcp target_core_iblock iscsi_target_mod dm-multipath dm-round-robin"
elif [ "$flavour" = trixie ]; then
    kroot=/var/tmp/lockd-vmbed/kernel-trixie/root
    kver=$(ls "$kroot/usr/lib/modules" 2>/dev/null | head -1)
    kmods=$kroot/usr/lib/modules
    vmlinuz=$kroot/boot/vmlinuz-$kver
else
    kroot=/var/tmp/lockd-vmbed/kernel/root
    kver=$(ls "$kroot/lib/modules" | head -1)
    kmods=$kroot/lib/modules
    vmlinuz=$kroot/boot/vmlinuz-$kver
fi
[ -n "$kver" ] && [ -f "$vmlinuz" ] || {
    echo "build-initramfs: no kernel under $kroot; run scripts/vmbed-setup.sh" >&2
    exit 1
}
command -v busybox >/dev/null || { echo "build-initramfs: busybox-static missing" >&2; exit 1; }
bb=$(command -v busybox)
file -L "$bb" 2>/dev/null | grep -q static || [ -x /bin/busybox ] || true

root=$(mktemp -d /var/tmp/lockd-initramfs.XXXXXX)
trap 'rm -rf "$root"' EXIT
mkdir -p "$root"/{bin,sbin,etc,proc,sys,dev,tmp,run,mnt,var/tmp,lib64,usr/lib,lib/x86_64-linux-gnu}
cp /bin/busybox "$root/bin/busybox"
for applet in $("$root/bin/busybox" --list); do
    [ -e "$root/bin/$applet" ] || ln -s busybox "$root/bin/$applet"
done

# Kernel modules with everything they depend on (modprobe in the guest reads modules.dep);
# a module built into this kernel is not in modules.dep and is skipped.
mdir=$kmods/$kver
mkdir -p "$root/lib/modules/$kver"
for m in $mods; do
    line=$(grep -E "(^|/)$m\.ko(\.xz)?:" "$mdir/modules.dep") || {
        if grep -qE "(^|/)$m\.ko" "$mdir/modules.builtin" 2>/dev/null || [ "$flavour" = sid ]; then
            echo "build-initramfs: $m is not a module of $kver (built in)"
            continue
        fi
        echo "module $m not found" >&2; exit 1; }
    for f in ${line%%:*} ${line#*:}; do
        mkdir -p "$root/lib/modules/$kver/$(dirname "$f")"
        case $f in
            *.xz) [ -e "$root/lib/modules/$kver/${f%.xz}" ] || xz -dc "$mdir/$f" >"$root/lib/modules/$kver/${f%.xz}" ;;
            *) cp -n "$mdir/$f" "$root/lib/modules/$kver/$f" ;;
        esac
    done
done
echo "$mods" >"$root/etc/bed-modules"
cp "$mdir"/modules.{order,builtin,builtin.modinfo} "$root/lib/modules/$kver/" 2>/dev/null || true
depmod -b "$root" "$kver"

# Programs and their shared libraries.
copy_with_libs() {
    local src=$1 dst=$2
    install -D -m 0755 "$src" "$root$dst"
    ldd "$src" | awk '/=>/ {print $3} /^\s*\/lib64/ {print $1}' | while read -r lib; do
        [ -n "$lib" ] && [ -f "$lib" ] || continue
        mkdir -p "$root$(dirname "$lib")"
        cp -nL "$lib" "$root$lib"
    done
}
for b in lockd lockd-daemon wdmd lockd-witness; do
    [ -x "$bins/$b" ] || { echo "build-initramfs: $bins/$b missing (cargo build --release)" >&2; exit 1; }
    copy_with_libs "$bins/$b" "/usr/bin/$b"
done
copy_with_libs /usr/sbin/sanlock /usr/sbin/sanlock
copy_with_libs /usr/sbin/wdmd /usr/sbin/wdmd.sanlock
copy_with_libs /usr/bin/sg_persist /usr/bin/sg_persist
copy_with_libs /usr/sbin/dmsetup /usr/sbin/dmsetup
cp -nL /lib64/ld-linux-x86-64.so.2 "$root/lib64/"

# Python for the chaos bed's election client (tests/vmbed/chaos_election.py, through the
# project's pure-Python package): Debian's python3.11, which has most of its C modules
# built in, its standard library as compiled modules in /usr/lib/python311.zip (on its
# default path; no tests, GUI or packaging tools), the few C modules the package needs
# from lib-dynload, and the package itself.
py=/usr/bin/python3.11
[ -x "$py" ] || { echo "build-initramfs: $py missing (apt-get install python3)" >&2; exit 1; }
copy_with_libs "$py" /usr/bin/python3
mkdir -p "$root/usr/lib/python3.11/lib-dynload" "$root/usr/lib/python3/dist-packages"
for m in mmap _asyncio _contextvars _typing _json _queue; do
    cp /usr/lib/python3.11/lib-dynload/$m.cpython-311-x86_64-linux-gnu.so "$root/usr/lib/python3.11/lib-dynload/"
done
"$py" - "$root/usr/lib/python311.zip" <<'PYZIP'
import os, sys, zipfile
skip = {"test", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3", "pydoc_data",
        "distutils", "site-packages", "dist-packages", "lib-dynload", "__pycache__",
        "sqlite3", "venv", "unittest", "xmlrpc", "curses", "dbm", "email", "http", "xml",
        "ctypes", "multiprocessing", "wsgiref", "html", "urllib", "msilib", "ssl.py",
        "pydoc.py", "doctest.py", "mailbox.py", "imaplib.py", "smtplib.py", "tarfile.py"}
src = "/usr/lib/python3.11"
with zipfile.PyZipFile(sys.argv[1], "w", optimize=1) as z:
    for name in sorted(os.listdir(src)):
        path = os.path.join(src, name)
        if name in skip or name.startswith("config-"):
            continue
        if name.endswith(".py") or (os.path.isdir(path) and os.path.exists(os.path.join(path, "__init__.py"))):
            z.writepy(path)
PYZIP
# getpath's landmark for the standard library: with it found, the zip on the path is used.
cp /usr/lib/python3.11/os.py "$root/usr/lib/python3.11/os.py"
cp -r "$here/../../python/lockd" "$root/usr/lib/python3/dist-packages/lockd"
rm -rf "$root/usr/lib/python3/dist-packages/lockd/__pycache__"
install -D -m 0644 "$here/chaos_election.py" "$root/usr/lib/lockd-chaos/chaos_election.py"

cat >"$root/etc/passwd" <<'P'
root:x:0:0:root:/root:/bin/sh
sanlock:x:179:179:sanlock:/run/sanlock:/bin/false
P
cat >"$root/etc/group" <<'G'
root:x:0:
sanlock:x:179:
disk:x:6:sanlock
G
echo "127.0.0.1 localhost" >"$root/etc/hosts"
install -m 0755 "$here/guest-init.sh" "$root/init"
install -m 0755 "$here/guest-agent.sh" "$root/bin/guest-agent"

mkdir -p "$out"
cp "$vmlinuz" "$out/vmlinuz"
(cd "$root" && find . | busybox cpio -o -H newc 2>/dev/null | gzip -1) >"$out/initrd.gz.tmp"
mv "$out/initrd.gz.tmp" "$out/initrd.gz"
echo "build-initramfs: $out/initrd.gz ($(du -h "$out/initrd.gz" | cut -f1)), kernel $kver"
