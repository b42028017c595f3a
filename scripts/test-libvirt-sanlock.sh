#!/usr/bin/env bash
# libvirt 11.3's sanlock lock driver (Debian 13's libvirtd, libvirt-daemon-plugin-sanlock
# and qemu-system-x86, run in the debootstrapped trixie chroot of scripts/debian-chroot.sh)
# against lockd's daemon on this host, as a libvirt host with `lock_manager = "sanlock"`
# would use it:
#  * lockd serves the socket libvirt's plugin talks to: lockd's run dir is bound at
#    /run/sanlock inside the chroot;
#  * qemu-sanlock.conf: auto_disk_leases = 1, host_id = 1, require_lease_for_disks = 1,
#    io_timeout = 1, disk_lease_dir on a directory of this host (ext4, O_DIRECT), so libvirt
#    formats the __LIBVIRT__DISKS__ lockspace and one lease file per disk there and lockd
#    joins and takes them;
#  * libvirtd runs in the foreground (no systemd in the chroot), on a throwaway layer over
#    the chroot (`run --exec`), with its socket dir bound so that virsh reaches it;
#  * domain A (TCG, 32 MiB, no kernel: it sits in SeaBIOS) with a 1 MiB raw disk starts;
#    `lockd status` and `sanlock client status` show A's qemu pid holding the disk's lease;
#  * domain B with the same disk fails to start on the lease: libvirt says "Failed to
#    acquire lock: File exists" (-EEXIST: the holder is another pid of this host; from
#    another host it would be -243); qemu's own image locking is turned off by an
#    emulator wrapper so that it cannot be what refuses B (see below);
#  * A is destroyed: its lease is released, B starts and its qemu pid holds the lease.
# With the argument `sanlock`, the same runs against a real sanlock 3.9.5 daemon (trixie's,
# in the chroot, -w 0) in lockd's place, to show the answers are sanlock's (the lease
# checks then use `sanlock client status` only).
# Usage: scripts/test-libvirt-sanlock.sh [lockd|sanlock]
# Run as root after `cargo build -p lockd-daemon -p lockd-tools`. Cleans up after itself
# (daemons stopped by PID, no mounts left: the chroot's mounts live in private namespaces).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
target_dir=${CARGO_TARGET_DIR:-$PWD/target}
suite=trixie
chroot_sh=$PWD/scripts/debian-chroot.sh
fail() { echo "test-libvirt-sanlock: FAIL: $*" >&2; exit 1; }
lock_daemon=${1:-lockd}
case $lock_daemon in lockd|sanlock) ;; *) fail "usage: $0 [lockd|sanlock]" ;; esac
say() { echo "test-libvirt-sanlock ($lock_daemon): $*"; }
[ "$(id -u)" = 0 ] || fail "needs root (chroot, daemons)"
daemon=$target_dir/debug/lockd-daemon
cli=$target_dir/debug/lockd
[ -x "$daemon" ] && [ -x "$cli" ] || cargo build -q -p lockd-daemon -p lockd-tools --bins
command -v sanlock >/dev/null || fail "sanlock (3.8.5 CLI) is missing: scripts/setup.sh installs it"

t0=$SECONDS
"$chroot_sh" ensure "$suite" libvirt-daemon libvirt-daemon-driver-qemu \
    libvirt-daemon-plugin-sanlock libvirt-clients qemu-system-x86 >/dev/null
say "chroot ready in $((SECONDS - t0)) s"
t0=$SECONDS

# On ext4 (not tmpfs): libvirt and lockd open the lease files with O_DIRECT.
work=$(mktemp -d /var/tmp/lockd-libvirt.XXXXXX)
lpid=
vpid=
vchroot=
cleanup() {
    local rc=$?
    if [ -n "$vpid" ] && kill -0 "$vpid" 2>/dev/null; then
        # Domains first (their qemu runs inside libvirtd's namespace), then libvirtd.
        for d in lt-a lt-b; do virsh destroy "$d" >/dev/null 2>&1 || true; done
        kill -TERM "$vpid" 2>/dev/null || true
        for _ in $(seq 100); do kill -0 "$vpid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$vpid" 2>/dev/null || true
    fi
    [ -n "$vchroot" ] && wait "$vchroot" 2>/dev/null || true
    if [ -n "$lpid" ]; then
        SANLOCK_RUN_DIR="$work/run-lockd" timeout 10 sanlock client shutdown -f 1 >/dev/null 2>&1 || true
        for _ in $(seq 100); do kill -0 "$lpid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$lpid" 2>/dev/null || true
        wait "$lpid" 2>/dev/null || true
    fi
    if [ "$rc" != 0 ]; then
        echo "--- libvirtd log"; tail -40 "$work/libvirtd.log" 2>/dev/null || true
        echo "--- $lock_daemon log"; tail -40 "$work/lockd.log" 2>/dev/null || true
        for f in "$work"/qemu-log/*.log; do
            [ -e "$f" ] && { echo "--- $f"; tail -20 "$f"; }
        done
    fi
    rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/run-lockd" "$work/run-libvirt" "$work/leases" "$work/qemu-log"

# The lock daemon: its socket at $work/run-lockd/sanlock.sock, io_timeout 1, no watchdog.
if [ "$lock_daemon" = lockd ]; then
    LOCKD_LOG=debug "$daemon" -w 0 -c /dev/null -D -e libvirt-host -o 1 \
        --run-dir "$work/run-lockd" >"$work/lockd.log" 2>&1 &
else
    "$chroot_sh" run "$suite" --exec --bind "$work" -- env SANLOCK_RUN_DIR="$work/run-lockd" \
        SANLOCK_PRIVILEGED=0 sanlock daemon -D -w 0 -o 1 -U root -G root -e libvirt-host \
        >"$work/lockd.log" 2>&1 &
fi
lpid=$!
for _ in $(seq 100); do [ -S "$work/run-lockd/sanlock.sock" ] && break; sleep 0.1; done
[ -S "$work/run-lockd/sanlock.sock" ] || fail "$lock_daemon's socket never appeared"

cat >"$work/qemu-sanlock.conf" <<EOF
auto_disk_leases = 1
disk_lease_dir = "$work/leases"
host_id = 1
require_lease_for_disks = 1
io_timeout = 1
user = "root"
group = "root"
EOF
cat >"$work/qemu.conf" <<EOF
lock_manager = "sanlock"
user = "root"
group = "root"
dynamic_ownership = 0
remember_owner = 0
security_driver = "none"
cgroup_controllers = [ ]
namespaces = [ ]
stdio_handler = "file"
log_dir = "$work/qemu-log"
EOF
cat >"$work/libvirtd.conf" <<EOF
unix_sock_group = "root"
unix_sock_rw_perms = "0700"
auth_unix_rw = "none"
auth_unix_ro = "none"
log_outputs = "2:stderr"
EOF
truncate -s 1M "$work/disk.img"
# qemu's own image locking (OFD locks, seen only on one host) would refuse the second
# domain before libvirt asks for its lease. Two libvirt hosts sharing a disk do not see
# each other's OFD locks, so the emulator is a wrapper that turns qemu's locking off for
# the disk (adds "locking":"off" to its file blockdev): the lease is then the only guard,
# as it is between hosts.
cat >"$work/qemu-wrap" <<'EOF'
#!/bin/bash
args=()
for a in "$@"; do
    case $a in
        '{"driver":"file",'*) a='{"driver":"file","locking":"off",'${a#'{"driver":"file",'} ;;
    esac
    args+=("$a")
done
exec /usr/bin/qemu-system-x86_64 "${args[@]}"
EOF
chmod +x "$work/qemu-wrap"
domain() {
    cat <<EOF
<domain type='qemu'>
  <name>$1</name>
  <memory unit='MiB'>32</memory>
  <vcpu>1</vcpu>
  <os><type arch='x86_64' machine='pc'>hvm</type><boot dev='hd'/></os>
  <on_poweroff>destroy</on_poweroff>
  <devices>
    <emulator>$work/qemu-wrap</emulator>
    <disk type='file' device='disk'>
      <driver name='qemu' type='raw'/>
      <source file='$work/disk.img'/>
      <target dev='vda' bus='virtio'/>
    </disk>
    <memballoon model='none'/>
  </devices>
</domain>
EOF
}
domain lt-a >"$work/a.xml"
domain lt-b >"$work/b.xml"

# libvirtd in the chroot, in the foreground; this shell holds its PID (run --exec).
"$chroot_sh" run "$suite" --exec --bind "$work" --bind "$work/run-lockd:/run/sanlock" \
    --bind "$work/run-libvirt:/run/libvirt" -- bash -c '
        set -e
        cp "$1/qemu.conf" "$1/qemu-sanlock.conf" /etc/libvirt/
        exec libvirtd -f "$1/libvirtd.conf"' libvirtd "$work" >"$work/libvirtd.log" 2>&1 &
vchroot=$!
vpid=$vchroot
virsh() {
    "$chroot_sh" run "$suite" --bind "$work" --bind "$work/run-libvirt:/run/libvirt" -- \
        virsh -c qemu:///system "$@"
}
for _ in $(seq 300); do
    [ -S "$work/run-libvirt/libvirt-sock" ] && break
    kill -0 "$vpid" 2>/dev/null || fail "libvirtd exited at start"
    sleep 0.1
done
[ -S "$work/run-libvirt/libvirt-sock" ] || fail "libvirtd's socket never appeared"
virsh version
say "libvirtd up in $((SECONDS - t0)) s"

lockd_status() {
    if [ "$lock_daemon" = lockd ]; then
        LOCKD_RUN_DIR="$work/run-lockd" "$cli" status --format sanlock
    else
        sanlock_status
    fi
}
sanlock_status() { SANLOCK_RUN_DIR="$work/run-lockd" sanlock client status; }
qemu_pid() { cat "$work/run-libvirt/qemu/$1.pid" 2>/dev/null; }
# The disk's lease: resource NAME (md5 of the disk's path) in __LIBVIRT__DISKS__.
res=$(printf %s "$work/disk.img" | md5sum | cut -d' ' -f1)
holds() { # PID: an "r __LIBVIRT__DISKS__:RES:... p PID" line in lockd's and sanlock's status
    local p=$1 out
    for out in "$(lockd_status)" "$(sanlock_status)"; do
        grep -Eq "^r __LIBVIRT__DISKS__:$res:.* p $p\$" <<<"$out" || { echo "$out"; return 1; }
    done
}

# 1. Domain A starts; its qemu pid holds the disk's lease.
virsh create "$work/a.xml"
apid=$(qemu_pid lt-a)
[ -n "$apid" ] || fail "no pid file for lt-a"
say "lt-a runs, qemu pid $apid"
sanlock_status
holds "$apid" || fail "lt-a's qemu ($apid) does not hold the disk's lease"
say "lt-a's qemu pid $apid holds __LIBVIRT__DISKS__:$res"
[ -s "$work/leases/$res" ] || fail "libvirt made no lease file $work/leases/$res"

# 2. Domain B (same disk) must not start: the lease is held by another pid of this host,
#    which sanlock answers with -EEXIST (libvirt: "Failed to acquire lock: File exists");
#    from another host it would be -243.
if out=$(virsh create "$work/b.xml" 2>&1); then
    fail "lt-b started while lt-a holds the disk's lease: $out"
fi
echo "$out"
grep -q "Failed to acquire lock: File exists" <<<"$out" ||
    fail "lt-b failed, but not on the lease: $out"
virsh list --all | grep -q " lt-b " && fail "lt-b is listed after its failed start"
holds "$apid" || fail "lt-a lost the lease after lt-b's attempt"
say "lt-b refused: the lease is held"

# 3. A destroyed → its lease is released → B starts and holds it.
virsh destroy lt-a
for _ in $(seq 50); do kill -0 "$apid" 2>/dev/null || break; sleep 0.1; done
virsh create "$work/b.xml"
bpid=$(qemu_pid lt-b)
[ -n "$bpid" ] || fail "no pid file for lt-b"
holds "$bpid" || fail "lt-b's qemu ($bpid) does not hold the disk's lease"
say "lt-b's qemu pid $bpid holds the lease after lt-a was destroyed"
sanlock_status
virsh destroy lt-b
say "all passed in $((SECONDS - t0)) s"
