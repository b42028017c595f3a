#!/usr/bin/env bash
# Loop devices, lockd-faultfs mounts, mounts below the Debian chroots
# (/var/tmp/lockd-chroots, scripts/debian-chroot.sh) and the virtual-machine bed's
# processes (QEMU, tgtd, ganesha) the tests leave behind.
#   leftovers.sh snapshot FILE   record what is attached and mounted now
#   leftovers.sh check FILE      fail, listing them, if anything is attached or mounted
#                                that FILE did not record
# The baseline keeps a device someone else attached (or a run killed before its cleanup
# ran) from failing this run, while anything this run leaves behind still fails it.
set -euo pipefail
export LC_ALL=C # one collation for sort and comm
state() {
    {
        losetup -n -l -O NAME,BACK-FILE --raw 2>/dev/null || true
        mount | awk '/lockd-faultfs/ {print "mount " $3}'
        awk '$5 ~ "^/var/tmp/lockd-chroots/" {print "mount " $5}' /proc/self/mountinfo
        # The virtual-machine bed's guests, iSCSI target and NFS server.
        ps -eo pid=,comm= | awk '$2 ~ /^(qemu-system-x86|tgtd|ganesha.nfsd)/ {print "process " $2 " " $1}'
    } | sort
}
case "${1:-}" in
snapshot)
    state >"$2"
    if [ -s "$2" ]; then
        echo "leftovers: already present before this run (not counted against it):"
        sed 's/^/  /' "$2"
    fi
    ;;
check)
    new=$(comm -13 "$2" <(state))
    if [ -n "$new" ]; then
        echo "leftovers: loop devices, FUSE or chroot mounts left behind by this run:"
        echo "$new" | sed 's/^/  /'
        exit 1
    fi
    ;;
*)
    echo "usage: $0 snapshot|check FILE" >&2
    exit 2
    ;;
esac
