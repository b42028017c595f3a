#!/usr/bin/env bash
# Builds the lvmlockd scenarios' guest image (tests/vmbed/vmbed_lvm.py): the bed's
# initramfs (build-initramfs.sh) with a second cpio archive appended, which holds Debian 13
# (trixie)'s lvm2 2.03.31 (lvm), lvm2-lockd 2.03.31 (lvmlockd, lvmlockctl) and sanlock 3.9.5
# (sanlock, wdmd), taken from the cached trixie chroot of scripts/debian-chroot.sh.
#
# Trixie's binaries need trixie's glibc, newer than the Debian 12 libraries the rest of the
# guest runs on. So they live apart, under /trixie: the programs in /trixie/bin, trixie's
# loader and every library they need (resolved by trixie's own loader, `--list`) in
# /trixie/lib. The commands in /trixie/sbin are wrappers that start a program through that
# loader with `--library-path /trixie/lib` (nothing from the Debian 12 side is ever loaded
# into them, and nothing they start inherits a library path) and `--argv0` (lvm picks its
# command by argv[0]). The Linux kernel unpacks concatenated archives in order, so the
# base image stays as it is and only the scenarios that ask for this image get it.
#
# usage: build-trixie-lvm.sh IMAGE_DIR
#   IMAGE_DIR holds build-initramfs.sh's initrd.gz; initrd-lvm.gz is written beside it.
# Needs the chroot with the packages: scripts/debian-chroot.sh ensure trixie lvm2 lvm2-lockd sanlock
set -euo pipefail
img=${1:?IMAGE_DIR}
here=$(cd "$(dirname "$0")" && pwd)
chroot_dir=$(bash "$here/../../scripts/debian-chroot.sh" path trixie)
[ -f "$img/initrd.gz" ] || { echo "build-trixie-lvm: $img/initrd.gz missing (build-initramfs.sh first)" >&2; exit 1; }
for p in usr/sbin/lvm usr/sbin/lvmlockd usr/sbin/lvmlockctl usr/sbin/sanlock usr/sbin/wdmd; do
    [ -x "$chroot_dir/$p" ] || {
        echo "build-trixie-lvm: $chroot_dir/$p missing: run scripts/debian-chroot.sh ensure trixie lvm2 lvm2-lockd sanlock" >&2
        exit 1
    }
done
loader=$chroot_dir/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2
libpath=$chroot_dir/lib/x86_64-linux-gnu:$chroot_dir/usr/lib/x86_64-linux-gnu

root=$(mktemp -d /var/tmp/lockd-initramfs-lvm.XXXXXX)
trap 'rm -rf "$root"' EXIT
mkdir -p "$root"/trixie/{bin,sbin,lib} "$root"/etc/lvm
cp -L "$loader" "$root/trixie/lib/ld-linux-x86-64.so.2"
for prog in lvm lvmlockd lvmlockctl sanlock wdmd; do
    cp -L "$chroot_dir/usr/sbin/$prog" "$root/trixie/bin/$prog"
    # Every library the program needs, as trixie's loader resolves it inside the chroot.
    "$loader" --library-path "$libpath" --list "$chroot_dir/usr/sbin/$prog" |
        awk '$2 == "=>" && $3 ~ /^\// { print $3 }' | while read -r lib; do
            cp -nL "$lib" "$root/trixie/lib/"
        done
    cat >"$root/trixie/sbin/$prog" <<EOF
#!/bin/sh
# trixie's $prog, run by trixie's loader on trixie's libraries (build-trixie-lvm.sh).
exec /trixie/lib/ld-linux-x86-64.so.2 --library-path /trixie/lib --argv0 $prog /trixie/bin/$prog "\$@"
EOF
    chmod 0755 "$root/trixie/sbin/$prog"
done
# The package versions, for the scenario's report.
chroot "$chroot_dir" dpkg-query -W -f='${Package} ${Version}\n' lvm2 lvm2-lockd sanlock \
    libsanlock-client1 libsanlock1 libdevmapper1.02.1 libc6 >"$root/trixie/versions"
# The copied libraries are complete: trixie's loader resolves every one of them in /trixie/lib.
for prog in lvm lvmlockd lvmlockctl sanlock wdmd; do
    if "$loader" --library-path "$root/trixie/lib" --list "$root/trixie/bin/$prog" | grep -q 'not found'; then
        echo "build-trixie-lvm: $prog lacks a library in the image:" >&2
        "$loader" --library-path "$root/trixie/lib" --list "$root/trixie/bin/$prog" >&2
        exit 1
    fi
done

(cd "$root" && find . -mindepth 1 | busybox cpio -o -H newc 2>/dev/null | gzip -1) >"$img/trixie-lvm.cpio.gz"
cat "$img/initrd.gz" "$img/trixie-lvm.cpio.gz" >"$img/initrd-lvm.gz.tmp"
mv "$img/initrd-lvm.gz.tmp" "$img/initrd-lvm.gz"
echo "build-trixie-lvm: $img/initrd-lvm.gz ($(du -h "$img/initrd-lvm.gz" | cut -f1)): $(tr '\n' ' ' <"$root/trixie/versions")"
