#!/usr/bin/env bash
# Installs, runs and purges the lockd .deb in a debootstrapped chroot of another Debian
# release (default trixie, Debian 13), on a throwaway copy-on-write layer over the cached
# chroot (scripts/debian-chroot.sh run --overlay), so the chroot keeps its sanlock.
#
# Steps (each prints "ok: …" or fails with "FAIL: …"):
#  1. that release's lintian (`-I --pedantic`): no error, and every other tag explained in
#     packaging/README.md;
#  2. `apt-get -s install ./lockd.deb`: the resolver removes that release's sanlock and
#     nothing else (libsanlock1, python3-sanlock stay);
#  3. `apt-get install ./lockd.deb`: `lockd --version` and `lockd-daemon --version` run
#     (binaries built on Debian 12 run on the newer glibc), units in /usr/lib/systemd/system,
#     `systemd-analyze verify` of both units with that release's systemd, conffiles listed;
#  4. the installed lockd-daemon serves that release's python3-sanlock (get_lockspaces,
#     a write_lockspace/add_lockspace/rem_lockspace on a file);
#  5. an upgrade in place (docs/operations.md, "Upgrading lockd", as written): a newer
#     version of the package (this one with its version raised) installed while the daemon
#     runs, joined and holding a lease, leaves that daemon, its lockspace and its lease
#     alone; then the runbook's restart (holder stopped, lockspace left, `lockd shutdown
#     --wait`, the new daemon started, lockspace joined, lease acquired again);
#  6. `dpkg --purge lockd`: no packaged path, /etc/lockd or /var/lib/lockd is left, and no
#     file appeared outside dpkg/apt bookkeeping since before the install.
#
# Usage: packaging/test-deb-chroot.sh LOCKD.deb [SUITE]   (as root)
set -euo pipefail

fail() { echo "FAIL: $*" >&2; exit 1; }
ok() { echo "ok: $*"; }

if [ "${LOCKD_DEBCHROOT_INNER:-}" != 1 ]; then
    deb=$(readlink -f "${1:?usage: test-deb-chroot.sh LOCKD.deb [SUITE]}")
    suite=${2:-trixie}
    here=$(cd "$(dirname "$0")" && pwd)
    [ "$(id -u)" = 0 ] || fail "needs root (chroot, mounts)"
    "$here/../scripts/debian-chroot.sh" ensure "$suite" sanlock python3-sanlock python3 lintian \
        systemd adduser >/dev/null
    work=$(mktemp -d /tmp/lockd-debchroot.XXXXXX)
    trap 'rm -rf "$work"' EXIT
    cp "$deb" "$here/test-deb-chroot.sh" "$here/README.md" "$work/"
    rc=0
    "$here/../scripts/debian-chroot.sh" run "$suite" --overlay --bind "$work" -- \
        env LOCKD_DEBCHROOT_INNER=1 bash "$work/test-deb-chroot.sh" "$work/$(basename "$deb")" "$suite" ||
        rc=$?
    [ $rc = 0 ] && echo "test-deb-chroot ($suite): all passed"
    exit $rc
fi

# Inside the chroot (on its overlay).
deb=$1
suite=$2
work=$(dirname "$deb")
export DEBIAN_FRONTEND=noninteractive
pid=
holder=
trap '[ -n "$holder" ] && kill -9 "$holder" 2>/dev/null; [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; true' EXIT
echo "release: Debian $(cat /etc/debian_version) ($suite), sanlock $(dpkg-query -W -f='${Version}' sanlock)"

# 1. lintian of this release.
tags=$(lintian -I --pedantic "$deb" 2>/dev/null || true)
printf '%s\n' "$tags" | sed 's/^/  lintian: /'
if printf '%s\n' "$tags" | grep -q '^E:'; then fail "lintian errors"; fi
while read -r sev _ tag _; do
    [ -n "${sev:-}" ] || continue
    grep -qF "\`$tag\`" "$work/README.md" || fail "lintian tag $tag is not explained in packaging/README.md"
done <<< "$tags"
ok "lintian $(lintian --version | awk '{print $2}'): no error, every tag explained"

# 2. The resolver's plan.
plan=$(apt-get -s install "$deb" 2>&1) || fail "apt-get -s install: $plan"
removed=$(printf '%s\n' "$plan" | sed -n 's/^Remv \([^ ]*\).*/\1/p' | sort | tr '\n' ' ')
[ "$removed" = "sanlock " ] || fail "apt would remove '$removed', expected only sanlock"
ok "apt-get -s install removes only sanlock"

find / -xdev \( -path /proc -o -path /sys -o -path /dev -o -path /run -o -path /tmp \
    -o -path "$work" \) -prune -o -print 2>/dev/null | sort > /tmp/before.list

# 3. Install.
apt-get install -y -q "$deb" > /tmp/install.log 2>&1 || { cat /tmp/install.log; fail "apt-get install"; }
dpkg-query -W -f='${Status}\n' lockd | grep -q "install ok installed" || fail "lockd not installed"
dpkg-query -W -f='${Status}\n' python3-sanlock | grep -q "install ok installed" ||
    fail "python3-sanlock was removed"
v=$(lockd --version) || fail "lockd --version"
ok "lockd --version: $v"
v=$(lockd-daemon --version) || fail "lockd-daemon --version"
ok "lockd-daemon --version: $v"
for u in lockd.service wdmd.service; do
    [ -f /usr/lib/systemd/system/$u ] || fail "/usr/lib/systemd/system/$u missing"
done
out=$(SYSTEMD_LOG_LEVEL=warning systemd-analyze verify --man=no \
    /usr/lib/systemd/system/lockd.service /usr/lib/systemd/system/wdmd.service 2>&1) ||
    fail "systemd-analyze verify: $out"
mine=$(printf '%s\n' "$out" | grep -E 'lockd\.service|wdmd\.service' || true)
[ -z "$mine" ] || fail "systemd-analyze verify: $mine"
ok "systemd-analyze verify ($(systemd-analyze --version | head -1)): both units clean"
[ "$(cat /var/lib/dpkg/info/lockd.conffiles)" = "$(printf '/etc/lockd/lockd.toml\n/etc/lockd/libvirt-leases.conf')" ] ||
    fail "conffiles: $(cat /var/lib/dpkg/info/lockd.conffiles)"
ok "conffiles listed"

# 4. The installed daemon serves this release's python3-sanlock.
rd=/run/lockd-debtest
mkdir -p "$rd"
lockd-daemon -D -w 0 -c /dev/null -e debtest --run-dir "$rd" > /tmp/daemon.log 2>&1 &
pid=$!
for _ in $(seq 100); do [ -S "$rd/sanlock.sock" ] && break; sleep 0.1; done
[ -S "$rd/sanlock.sock" ] || { cat /tmp/daemon.log; fail "no socket"; }
truncate -s 8M /tmp/debtest.disk
SANLOCK_RUN_DIR=$rd python3 - <<'PY' || { cat /tmp/daemon.log; fail "python3-sanlock against the installed lockd"; }
import sanlock
p = b"/tmp/debtest.disk"
assert sanlock.get_lockspaces() == []
sanlock.write_lockspace(b"deb", p, 0, iotimeout=1)
sanlock.add_lockspace(b"deb", 1, p, 0, iotimeout=1)
assert sanlock.inq_lockspace(b"deb", 1, p, 0)
sanlock.rem_lockspace(b"deb", 1, p, 0)
assert not sanlock.inq_lockspace(b"deb", 1, p, 0)
PY
kill "$pid"
wait "$pid" 2>/dev/null || true
pid=
rm -rf "$rd" /tmp/debtest.disk
ok "python3-sanlock $(dpkg-query -W -f='${Version}' python3-sanlock) reached the installed lockd-daemon"

# 5. Upgrade in place, while the daemon runs with a lease held.
rd=/run/lockd-debtest
mkdir -p "$rd"
export LOCKD_RUN_DIR=$rd
start_daemon() {
    lockd-daemon -D -w 0 -c /dev/null -e debtest -o 1 --run-dir "$rd" >> /tmp/daemon.log 2>&1 &
    pid=$!
    for _ in $(seq 100); do [ -S "$rd/sanlock.sock" ] && break; sleep 0.1; done
    [ -S "$rd/sanlock.sock" ] || { cat /tmp/daemon.log; fail "no socket"; }
}
join_and_hold() {
    lockd add-lockspace -s up:1:/tmp/up.disk:0 >/dev/null || { cat /tmp/daemon.log; fail "add-lockspace"; }
    lockd acquire -r up:r1:/tmp/up.disk:1048576 -- sleep 600 &
    holder=$!
    for _ in $(seq 100); do lockd status 2>/dev/null | grep -q r1 && break; sleep 0.1; done
    lockd status | grep -q r1 || { cat /tmp/daemon.log; fail "the lease is not held"; }
}
truncate -s 8M /tmp/up.disk
lockd direct init -s up:0:/tmp/up.disk:0 -o 1 >/dev/null
lockd direct init -r up:r1:/tmp/up.disk:1048576 >/dev/null
start_daemon
join_and_hold
old_pid=$pid
old_version=$(dpkg-query -W -f='${Version}' lockd)
rm -rf /tmp/upgrade && dpkg-deb -R "$deb" /tmp/upgrade
sed -i "s/^Version: .*/Version: ${old_version}+upgrade1/" /tmp/upgrade/DEBIAN/control
dpkg-deb -b /tmp/upgrade /tmp/lockd-upgrade.deb >/dev/null
apt-get install -y -q /tmp/lockd-upgrade.deb > /tmp/upgrade.log 2>&1 ||
    { cat /tmp/upgrade.log; fail "apt-get install of the newer version"; }
[ "$(dpkg-query -W -f='${Version}' lockd)" = "${old_version}+upgrade1" ] || fail "the newer version is not installed"
kill -0 "$old_pid" 2>/dev/null || fail "the upgrade stopped the running daemon"
lockd status | grep -q r1 || { lockd status; fail "the lease is gone after the upgrade"; }
lockd inq-lockspace -s up:1:/tmp/up.disk:0 >/dev/null || fail "the lockspace is gone after the upgrade"
ok "upgrade ${old_version} -> ${old_version}+upgrade1: the running daemon (pid $old_pid), its lockspace and lease untouched"
# The runbook's restart, once the host's lease users are gone.
kill "$holder"
wait "$holder" 2>/dev/null || true
for _ in $(seq 100); do lockd status | grep -q r1 || break; sleep 0.1; done
lockd rem-lockspace -s up:1:/tmp/up.disk:0 >/dev/null
lockd shutdown --wait >/dev/null || { cat /tmp/daemon.log; fail "lockd shutdown --wait"; }
wait "$pid" 2>/dev/null || true
start_daemon
join_and_hold
kill "$holder"
wait "$holder" 2>/dev/null || true
holder=
lockd shutdown -f >/dev/null 2>&1 || true
wait "$pid" 2>/dev/null || true
pid=
unset LOCKD_RUN_DIR
rm -rf "$rd" /tmp/up.disk /tmp/upgrade /tmp/lockd-upgrade.deb
ok "restarted on the new version (pid $old_pid, now $pid), lockspace joined and the lease acquired again"

# 6. Purge.
dpkg --purge lockd > /tmp/purge.log 2>&1 || { cat /tmp/purge.log; fail "dpkg --purge"; }
for p in /usr/sbin/lockd /usr/sbin/lockd-daemon /usr/sbin/wdmd /usr/lib/systemd/system/lockd.service \
    /usr/lib/systemd/system/wdmd.service /etc/lockd /var/lib/lockd /usr/share/doc/lockd \
    /usr/libexec/lockd /usr/share/lockd; do
    [ ! -e "$p" ] || fail "$p left after purge"
done
find / -xdev \( -path /proc -o -path /sys -o -path /dev -o -path /run -o -path /tmp \
    -o -path "$work" \) -prune -o -print 2>/dev/null | sort > /tmp/after.list
new=$(comm -13 /tmp/before.list /tmp/after.list |
    grep -vE '^/var/(lib/dpkg|lib/apt|cache/(apt|debconf|man)|log|cache/ldconfig|lib/systemd)(/|$)|^/etc/ld\.so\.cache$' || true)
[ -z "$new" ] || fail "left after purge: $new"
ok "no file, directory or state of lockd is left"
