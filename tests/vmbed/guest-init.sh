#!/bin/sh
# PID 1 of a bed guest (tests/vmbed): mounts the pseudo filesystems, loads the modules for
# the shared SCSI disk, the watchdog, the network and NFS (the list the image names in
# /etc/bed-modules), brings up the user-mode network
# (the host is 10.0.2.2), names the host from the kernel command line (bed.host=NAME) and
# then runs the command agent on the second serial port, for ever; a background loop
# reports MemAvailable under 64 MiB on the event port.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mkdir -p /dev/pts /dev/shm
mount -t tmpfs tmpfs /run
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /dev/shm
mount -t tmpfs tmpfs /var/tmp
mods="virtio_pci virtio_scsi sd_mod sg i6300esb virtio_net dm_mod nfsv4"
[ -f /etc/bed-modules ] && mods=$(cat /etc/bed-modules)
for m in $mods; do
    modprobe "$m" || echo "init: modprobe $m failed"
done
host=guest
for x in $(cat /proc/cmdline); do
    case "$x" in bed.host=*) host=${x#bed.host=} ;; esac
done
hostname "$host"
ip link set lo up
ip link set eth0 up && ip addr add 10.0.2.15/24 dev eth0 && ip route add default via 10.0.2.2
mkdir -p /run/lockd /run/sanlock /run/wdmd /mnt/nfs
echo "init: $host up $(cat /proc/uptime)"
# Memory running short shows on the bed's timeline (a guest stalled in reclaim looks hung).
(while true; do
    sleep 10
    kb=$(awk '/^MemAvailable:/ {print $2}' /proc/meminfo)
    [ "${kb:-0}" -lt 65536 ] && echo "event=memory-low avail_kb=$kb" >/dev/ttyS2
done) &
while true; do
    /bin/guest-agent
    sleep 1
done
