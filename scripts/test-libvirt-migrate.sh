#!/usr/bin/env bash
# The runbook "A libvirt cluster, host by host, with running VMs" of
# docs/migrating-from-sanlock.md, run as written on two libvirt hosts on this machine: a
# running VM is live-migrated from a sanlock host to a lockd host, between two lockd hosts,
# and back from a lockd host to a sanlock host, and its disk's lease follows it each time.
#
# Each host is trixie's libvirtd 11.3 (lock_manager = "sanlock", auto_disk_leases, its own
# host_id and host_uuid, in the chroot of scripts/debian-chroot.sh on a throwaway layer)
# with its own lock daemon, sanlock 3.9.5 (trixie's, -w 0) or lockd (this tree's), whose
# socket is bound at the host's /run/sanlock. The hosts share the lease directory (the
# __LIBVIRT__DISKS__ lockspace and one lease per disk, on ext4 with O_DIRECT) and the VM's
# disk, as hosts sharing an NFS export would; each has its own run dirs. virsh migrates
# over the hosts' unix sockets, qemu's migration stream goes over TCP on 127.0.0.1.
#
# How libvirt's sanlock plugin moves the lease (src/locking/lock_driver_sanlock.c): the
# destination's qemu is registered with its lock daemon while paused (no lease); the source
# pauses its qemu, releases the lease (its daemon writes the release on disk) and sends the
# lease's state (sanlock_inquire: "LS:RES:PATH:OFFSET:LVER") in the migration cookie; the
# destination acquires it for its qemu with that lver (SANLK_RES_LVER: refused if anyone
# took the lease since), then resumes the VM. So each migration is one daemon's release
# and the other's acquire of the same on-disk lease, at a version the other wrote.
#
# After each migration: the destination's qemu pid holds the lease (its daemon's
# `client status`) at a newer version than before, the source's daemon holds nothing of
# it, the VM runs on the destination only, and a second domain on the same disk is refused
# on the lease on either host (the source's daemon: "Lease is held by another host", -243;
# the destination's: "File exists", -EEXIST, the holder being another pid of its host). At
# the end the VM stops on the sanlock host and a domain on the disk starts on the lockd
# host and holds the lease.
#
# Usage: scripts/test-libvirt-migrate.sh   (root; builds lockd's debug binaries if missing)
# Cleans up after itself: domains destroyed, libvirtd and the lock daemons stopped by PID,
# no mounts left (the chroots' mounts live in private namespaces).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
target_dir=${CARGO_TARGET_DIR:-$PWD/target}
suite=trixie
chroot_sh=$PWD/scripts/debian-chroot.sh
fail() { echo "test-libvirt-migrate: FAIL: $*" >&2; exit 1; }
say() { echo "test-libvirt-migrate: $*"; }

# One libvirt host's parts (its lock manager libvirt's sanlock plugin, run from the trixie
# chroot of scripts/debian-chroot.sh):
#
# libvirt_write_conf DIR HOST_ID LEASE_DIR LOG_DIR HOST_UUID SHARED_DIR
#   writes DIR/qemu.conf, DIR/qemu-sanlock.conf (auto_disk_leases, require_lease_for_disks,
#   io_timeout 1, host_id HOST_ID, disk_lease_dir LEASE_DIR) and DIR/libvirtd.conf (a unix
#   socket with no auth; HOST_UUID as host_uuid: two libvirtd on one machine
#   must differ in it, or migration between them is refused as "to the same host"; and
#   SHARED_DIR as qemu.conf's shared_filesystems: the disks below it are shared between
#   the hosts, which libvirt cannot see for a local filesystem and otherwise refuses to
#   migrate as "without shared storage").
# libvirt_write_qemu_wrap FILE
#   an emulator wrapper that turns qemu's own image locking off for the disk (adds
#   "locking":"off" to its file blockdev). qemu's OFD locks are seen only on one machine;
#   two libvirt hosts sharing a disk do not see each other's, so with the wrapper the
#   lease is the only guard, as it is between hosts.
# libvirt_domain NAME DISK WRAPPER
#   prints a domain: TCG, 32 MiB, no kernel (it sits in SeaBIOS), DISK as its raw virtio
#   disk, WRAPPER as its emulator.
# libvirt_start_libvirtd DIR RUN_LOCK RUN_LIBVIRT BIND_ROOT LOG
#   starts libvirtd in the foreground in the trixie chroot on a throwaway layer (`run
#   --exec`: the caller's `$!` is libvirtd's own PID), with DIR's configuration, RUN_LOCK
#   bound at /run/sanlock (the lock daemon's socket) and RUN_LIBVIRT at /run/libvirt;
#   BIND_ROOT (holding all of these) is bound at its own path.
# libvirt_wait_socket RUN_LIBVIRT PID
#   waits up to 30 s for libvirtd's socket; fails if PID exits first.
# libvirt_start_lock_daemon lockd|sanlock RUN_DIR HOST_NAME LOG BIND_ROOT
#   starts the lock daemon in the foreground with its socket at RUN_DIR/sanlock.sock,
#   io_timeout 1, no watchdog, host name HOST_NAME: lockd's daemon ($daemon) on this host,
#   or trixie's sanlock 3.9.5 in the chroot (`run --exec`, -U/-G root,
#   SANLOCK_PRIVILEGED=0, BIND_ROOT bound: it holds RUN_DIR and the lease files); the caller's `$!` is the daemon's PID. Waits for the socket.
libvirt_write_conf() {
    local dir=$1 host_id=$2 lease_dir=$3 log_dir=$4 host_uuid=$5 shared_dir=$6
    cat >"$dir/qemu-sanlock.conf" <<EOF
auto_disk_leases = 1
disk_lease_dir = "$lease_dir"
host_id = $host_id
require_lease_for_disks = 1
io_timeout = 1
user = "root"
group = "root"
EOF
    cat >"$dir/qemu.conf" <<EOF
lock_manager = "sanlock"
user = "root"
group = "root"
dynamic_ownership = 0
remember_owner = 0
security_driver = "none"
cgroup_controllers = [ ]
namespaces = [ ]
stdio_handler = "file"
log_dir = "$log_dir"
EOF
    cat >"$dir/libvirtd.conf" <<EOF
unix_sock_group = "root"
unix_sock_rw_perms = "0700"
auth_unix_rw = "none"
auth_unix_ro = "none"
log_outputs = "2:stderr"
EOF
    echo "host_uuid = \"$host_uuid\"" >>"$dir/libvirtd.conf"
    echo "shared_filesystems = [ \"$shared_dir\" ]" >>"$dir/qemu.conf"
}

libvirt_write_qemu_wrap() {
    cat >"$1" <<'EOF'
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
    chmod +x "$1"
}

libvirt_domain() {
    cat <<EOF
<domain type='qemu'>
  <name>$1</name>
  <memory unit='MiB'>32</memory>
  <vcpu>1</vcpu>
  <os><type arch='x86_64' machine='pc'>hvm</type><boot dev='hd'/></os>
  <on_poweroff>destroy</on_poweroff>
  <devices>
    <emulator>$3</emulator>
    <disk type='file' device='disk'>
      <driver name='qemu' type='raw'/>
      <source file='$2'/>
      <target dev='vda' bus='virtio'/>
    </disk>
    <memballoon model='none'/>
  </devices>
</domain>
EOF
}

libvirt_start_libvirtd() {
    local dir=$1 run_lock=$2 run_libvirt=$3 bind_root=$4 log=$5
    "$chroot_sh" run "$suite" --exec --bind "$bind_root" --bind "$run_lock:/run/sanlock" \
        --bind "$run_libvirt:/run/libvirt" -- bash -c '
            set -e
            cp "$1/qemu.conf" "$1/qemu-sanlock.conf" /etc/libvirt/
            exec libvirtd -f "$1/libvirtd.conf"' libvirtd "$dir" >"$log" 2>&1 &
}

libvirt_wait_socket() {
    local run_libvirt=$1 pid=$2
    for _ in $(seq 300); do
        [ -S "$run_libvirt/libvirt-sock" ] && return 0
        kill -0 "$pid" 2>/dev/null || fail "libvirtd exited at start"
        sleep 0.1
    done
    fail "libvirtd's socket never appeared in $run_libvirt"
}

libvirt_start_lock_daemon() {
    local kind=$1 run_dir=$2 host_name=$3 log=$4 bind_root=$5
    if [ "$kind" = lockd ]; then
        LOCKD_LOG=debug "$daemon" -w 0 -c /dev/null -D -e "$host_name" -o 1 \
            --run-dir "$run_dir" >"$log" 2>&1 &
    else
        "$chroot_sh" run "$suite" --exec --bind "$bind_root" -- env SANLOCK_RUN_DIR="$run_dir" \
            SANLOCK_PRIVILEGED=0 sanlock daemon -D -w 0 -o 1 -U root -G root -e "$host_name" \
            >"$log" 2>&1 &
    fi
    local pid=$!
    for _ in $(seq 100); do [ -S "$run_dir/sanlock.sock" ] && return 0; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null || fail "$kind exited at start"
    fail "$kind's socket never appeared in $run_dir"
}

[ "$(id -u)" = 0 ] || fail "needs root (chroot, daemons)"
daemon=$target_dir/debug/lockd-daemon
cli=$target_dir/debug/lockd
[ -x "$daemon" ] && [ -x "$cli" ] || cargo build -q -p lockd-daemon -p lockd-tools --bins
command -v sanlock >/dev/null || fail "sanlock (3.8.5 CLI) is missing: scripts/setup.sh installs it"

t0=$SECONDS
"$chroot_sh" ensure "$suite" libvirt-daemon libvirt-daemon-driver-qemu \
    libvirt-daemon-plugin-sanlock libvirt-clients qemu-system-x86 sanlock >/dev/null
say "chroot ready in $((SECONDS - t0)) s"
t0=$SECONDS

work=$(mktemp -d /var/tmp/lockd-libvirt-migrate.XXXXXX)
declare -A lock_kind=() lock_pid=() virt_pid=()
vm=lt-vm
cleanup() {
    local rc=$? h
    for h in 1 2; do
        if [ -n "${virt_pid[$h]:-}" ] && kill -0 "${virt_pid[$h]}" 2>/dev/null; then
            for d in $vm lt-other; do virsh_on "$h" destroy "$d" >/dev/null 2>&1 || true; done
        fi
    done
    for h in 1 2; do stop_libvirtd "$h" || true; done
    for h in 1 2; do stop_lock_daemon_by_pid "$h" || true; done
    if [ "$rc" != 0 ]; then
        for h in 1 2; do
            echo "--- host $h: libvirtd log"; tail -30 "$work/h$h/libvirtd.log" 2>/dev/null || true
            for f in "$work"/h$h/lock-*.log; do
                [ -e "$f" ] && { echo "--- host $h: $f"; tail -30 "$f"; }
            done
            for f in "$work"/h$h/qemu-log/*.log; do
                [ -e "$f" ] && { echo "--- host $h: $f"; tail -15 "$f"; }
            done
        done
    fi
    rm -rf "$work"
}
trap cleanup EXIT

mkdir -p "$work/leases"
truncate -s 1M "$work/disk.img"
libvirt_write_qemu_wrap "$work/qemu-wrap"
libvirt_domain "$vm" "$work/disk.img" "$work/qemu-wrap" >"$work/vm.xml"
libvirt_domain lt-other "$work/disk.img" "$work/qemu-wrap" >"$work/other.xml"
for h in 1 2; do
    mkdir -p "$work/h$h/run-lock" "$work/h$h/run-libvirt" "$work/h$h/qemu-log"
    libvirt_write_conf "$work/h$h" "$h" "$work/leases" "$work/h$h/qemu-log" \
        "0000000$h-0000-4000-8000-00000000000$h" "$work"
done
# The disk's lease: resource NAME (md5 of the disk's path) in __LIBVIRT__DISKS__.
res=$(printf %s "$work/disk.img" | md5sum | cut -d' ' -f1)
ls_spec() { echo "__LIBVIRT__DISKS__:$1:$work/leases/__LIBVIRT__DISKS__:0"; }

virsh_on() { # HOST ARGS...: virsh against host HOST's libvirtd
    local h=$1
    shift
    "$chroot_sh" run "$suite" --bind "$work" --bind "$work/h$h/run-libvirt:/run/libvirt" -- \
        virsh -c qemu:///system "$@"
}
status_on() { SANLOCK_RUN_DIR="$work/h$1/run-lock" sanlock client status; }
qemu_pid_on() { cat "$work/h$1/run-libvirt/qemu/$vm.pid" 2>/dev/null; }

start_lock_daemon() { # HOST lockd|sanlock
    local h=$1 kind=$2
    libvirt_start_lock_daemon "$kind" "$work/h$h/run-lock" "host$h" \
        "$work/h$h/lock-$kind-$SECONDS.log" "$work"
    lock_pid[$h]=$!
    lock_kind[$h]=$kind
}
start_libvirtd() {
    local h=$1
    libvirt_start_libvirtd "$work/h$h" "$work/h$h/run-lock" "$work/h$h/run-libvirt" "$work" \
        "$work/h$h/libvirtd.log"
    virt_pid[$h]=$!
    libvirt_wait_socket "$work/h$h/run-libvirt" "${virt_pid[$h]}"
}
stop_libvirtd() {
    local h=$1 p=${virt_pid[$1]:-}
    [ -n "$p" ] || return 0
    kill -TERM "$p" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
    rm -f "$work/h$h/run-libvirt/libvirt-sock"
    virt_pid[$h]=
}
stop_lock_daemon_by_pid() { # what cleanup does: a forced shutdown, then SIGKILL
    local h=$1 p=${lock_pid[$1]:-}
    [ -n "$p" ] || return 0
    SANLOCK_RUN_DIR="$work/h$h/run-lock" timeout 10 sanlock client shutdown -f 1 >/dev/null 2>&1 || true
    for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
    lock_pid[$h]=
}

# The runbook's steps for one host with no VM left on it: stop libvirtd, leave the
# lockspace, stop the old daemon, start the new one, start libvirtd (which joins
# __LIBVIRT__DISKS__ again with the host's host_id from qemu-sanlock.conf).
switch_host() { # HOST lockd|sanlock
    local h=$1 to=$2 p=${lock_pid[$1]}
    [ -z "$(qemu_pid_on "$h")" ] || fail "host $h still runs $vm"
    stop_libvirtd "$h"
    if [ "${lock_kind[$h]}" = sanlock ]; then
        SANLOCK_RUN_DIR="$work/h$h/run-lock" sanlock client rem_lockspace -s "$(ls_spec "$h")"
        SANLOCK_RUN_DIR="$work/h$h/run-lock" sanlock client shutdown
    else
        LOCKD_RUN_DIR="$work/h$h/run-lock" "$cli" rem-lockspace -s "$(ls_spec "$h")"
        LOCKD_RUN_DIR="$work/h$h/run-lock" "$cli" shutdown
    fi
    for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$p" 2>/dev/null && fail "host $h's ${lock_kind[$h]} did not stop on shutdown"
    wait "$p" 2>/dev/null || true
    rm -f "$work/h$h/run-lock/sanlock.sock"
    start_lock_daemon "$h" "$to"
    start_libvirtd "$h"
    say "host $h now runs $to (lockspace joined by libvirtd: $(status_on "$h" | grep -c '^s __LIBVIRT__DISKS__:'))"
}

# The VM runs on host HOST only, its qemu pid holds the disk's lease there, the other
# host's daemon holds nothing of it, and a second domain on the disk is refused there.
last_lver=0
check_on() {
    local h=$1 other=$((3 - $1)) p out line lver
    p=$(qemu_pid_on "$h")
    [ -n "$p" ] || fail "no pid file for $vm on host $h"
    out=$(status_on "$h")
    line=$(grep -E "^r __LIBVIRT__DISKS__:$res:.* p $p\$" <<<"$out") ||
        { echo "$out"; fail "$vm's qemu ($p) on host $h does not hold the disk's lease"; }
    # "r LS:RES:PATH:OFFSET:LVER p PID": each acquire is a new ballot, a newer version.
    lver=${line% p *}
    lver=${lver##*:}
    [ "$lver" -gt "$last_lver" ] || fail "the lease's version $lver is not above $last_lver"
    last_lver=$lver
    out=$(status_on "$other")
    grep -Eq "^r __LIBVIRT__DISKS__:$res:" <<<"$out" &&
        { echo "$out"; fail "host $other's ${lock_kind[$other]} still holds the disk's lease"; }
    [ -z "$(qemu_pid_on "$other")" ] || fail "$vm still has a qemu on host $other"
    out=$(virsh_on "$h" domstate "$vm" 2>&1) || true
    grep -qx running <<<"$out" || fail "$vm is not running on host $h: $out"
    if out=$(virsh_on "$other" create "$work/other.xml" 2>&1); then
        fail "a second domain on the disk started on host $other while host $h holds it: $out"
    fi
    grep -q "Failed to acquire lock" <<<"$out" ||
        fail "the second domain on host $other failed, but not on the lease: $out"
    say "$vm runs on host $h (${lock_kind[$h]}), qemu pid $p holds the lease at version $lver;" \
        "host $other (${lock_kind[$other]}) refuses a second domain on the disk: $(grep -o 'Failed to acquire lock.*' <<<"$out")"
    # On the same host, the holder is another pid of this host: -EEXIST ("File exists").
    if out=$(virsh_on "$h" create "$work/other.xml" 2>&1); then
        fail "a second domain on the disk started on host $h beside $vm: $out"
    fi
    grep -q "Failed to acquire lock: File exists" <<<"$out" ||
        fail "the second domain on host $h failed, but not on the lease: $out"
    say "host $h (${lock_kind[$h]}) refuses a second domain on the disk beside $vm: File exists"
}

migrate() { # FROM TO
    local from=$1 to=$2 t=$SECONDS
    virsh_on "$from" migrate --live "$vm" \
        "qemu+unix:///system?socket=$work/h$to/run-libvirt/libvirt-sock" tcp://127.0.0.1
    say "migrated $vm from host $from (${lock_kind[$from]}) to host $to (${lock_kind[$to]}) in $((SECONDS - t)) s"
    check_on "$to"
}

# Both hosts on sanlock; the VM starts on host 1.
for h in 1 2; do
    start_lock_daemon "$h" sanlock
    start_libvirtd "$h"
done
virsh_on 1 create "$work/vm.xml"
check_on 1
# Host 2 first (no VM on it), then the VM moves to it, then host 1.
switch_host 2 lockd
migrate 1 2
switch_host 1 lockd
migrate 2 1
say "both hosts run lockd"
# The way back, host 2 first.
switch_host 2 sanlock
migrate 1 2
# The VM stopped on host 2 (sanlock): its lease is released, and another domain on the disk
# starts on host 1 (lockd) and holds it.
virsh_on 2 destroy "$vm"
virsh_on 1 create "$work/other.xml"
p=$(cat "$work/h1/run-libvirt/qemu/lt-other.pid")
status_on 1 | grep -Eq "^r __LIBVIRT__DISKS__:$res:.* p $p\$" ||
    fail "lt-other's qemu ($p) on host 1 does not hold the lease after $vm stopped on host 2"
say "$vm stopped on host 2 (sanlock); lt-other's qemu pid $p on host 1 (lockd) holds the lease"
virsh_on 1 destroy lt-other
say "all passed in $((SECONDS - t0)) s"
