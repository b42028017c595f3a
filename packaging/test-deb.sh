#!/usr/bin/env bash
# Installs the lockd .deb on this machine and removes it again, without disturbing the
# machine: everything runs in a private mount namespace where /etc, /usr and /var are
# copy-on-write overlays (upper dirs under /tmp) and /run is an empty tmpfs. So the
# sanlock package can be replaced there while other users of this machine keep theirs,
# and drop-in mode's /run/sanlock never appears in the real /run.
#
# Steps (each prints "ok: …" or fails with "FAIL: …"):
#  1. drop-in mode with the workspace's lockd (LOCKD_BIN) and the real sanlock tools:
#     `run_dir = "/run/sanlock"`; `sanlock client status -D` and python3-sanlock with
#     SANLOCK_RUN_DIR unset reach lockd; after shutdown /run/sanlock is gone;
#  2. `apt-get -s install ./lockd.deb`: the resolver removes sanlock and nothing else
#     (libsanlock1, python3-sanlock stay);
#  3. the sanlock daemon package and its user/group are removed, then
#     `apt-get install ./lockd.deb`: files in place (the libvirt qemu hook, executable,
#     and its libvirt-leases.conf; man pages with lockd-killpath(8) and
#     lockd-ctdb-mutex(8)), binaries stripped, both conffiles listed, nothing shipped
#     under /etc/libvirt, postinst created the `sanlock` group, python3-sanlock still
#     imports; the installed hook, run as libvirt runs it for a domain the conf does not
#     list, does nothing and exits 0;
#  4. drop-in mode with the installed package: /etc/lockd/lockd.toml gets
#     run_dir = "/run/sanlock"; `lockd-daemon -D -w 0` (no env) serves python3-sanlock
#     (SANLOCK_RUN_DIR unset) and the installed `lockd` CLI (no env), `lockd metrics`;
#  5. `dpkg --purge lockd`: every packaged path, /etc/lockd, /var/lib/lockd and the group
#     are gone, and the overlays hold no file besides dpkg/apt bookkeeping.
#
# Usage: packaging/test-deb.sh LOCKD.deb LOCKD_BIN   (as root)
set -euo pipefail

fail() { echo "FAIL: $*" >&2; exit 1; }
ok() { echo "ok: $*"; }

if [ "${LOCKD_DEBTEST_INNER:-}" != 1 ]; then
    deb=$(readlink -f "${1:?usage: test-deb.sh LOCKD.deb LOCKD_BIN}")
    bin=$(readlink -f "${2:?usage: test-deb.sh LOCKD.deb LOCKD_BIN}")
    [ "$(id -u)" = 0 ] || fail "needs root (mount namespace, dpkg)"
    for t in unshare dpkg apt-get sanlock /usr/bin/python3 readelf; do
        command -v "$t" >/dev/null || fail "$t is missing"
    done
    # /tmp is on the root file system here, outside every overlaid tree.
    work=$(mktemp -d /tmp/lockd-debtest.XXXXXX)
    rc=0
    LOCKD_DEBTEST_INNER=1 LOCKD_DEBTEST_WORK=$work \
        unshare --mount --propagation private "$0" "$deb" "$bin" || rc=$?
    rm -rf "$work"
    [ -e /run/sanlock ] && fail "/run/sanlock exists in the real /run after the test"
    [ $rc = 0 ] && echo "test-deb: all passed"
    exit $rc
fi

deb=$1
bin=$2
work=$LOCKD_DEBTEST_WORK
# Debian's python3 (python3-sanlock lives there), not whatever python3 is first on PATH.
PY=/usr/bin/python3
pid=
# A daemon of ours still running when a step fails is stopped by its PID.
trap '[ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; true' EXIT
cp "$deb" "$work/"
deb=$work/$(basename "$deb")
for d in etc usr var; do
    mkdir -p "$work/$d.up" "$work/$d.wk"
    mount -t overlay overlay -o "lowerdir=/$d,upperdir=$work/$d.up,workdir=$work/$d.wk" "/$d"
done
mount -t tmpfs -o mode=0755 tmpfs /run
mkdir -p /run/lock
export DEBIAN_FRONTEND=noninteractive
# No maintainer script may start or stop a service from in here (sanlock's prerm would
# run its init script's stop, which matches processes by name, outside the namespace).
printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
chmod 0755 /usr/sbin/policy-rc.d
unset LOCKD_RUN_DIR SANLOCK_RUN_DIR

wait_sock() {
    for _ in $(seq 100); do
        [ -S "$1" ] && return 0
        sleep 0.1
    done
    fail "socket $1 never appeared"
}
wait_gone() {
    for _ in $(seq 100); do
        kill -0 "$1" 2>/dev/null || return 0
        sleep 0.1
    done
    kill -9 "$1" 2>/dev/null || true
    fail "daemon pid $1 did not exit"
}
py_lockspaces='import sanlock; print("python3-sanlock get_lockspaces:", sanlock.get_lockspaces())'

# 1. Drop-in mode, workspace binary, real sanlock client tools.
printf 'run_dir = "/run/sanlock"\n' > "$work/dropin.toml"
"$bin" daemon -D -w 0 -e debtest -c "$work/dropin.toml" > "$work/dropin1.log" 2>&1 &
pid=$!
wait_sock /run/sanlock/sanlock.sock
status=$(sanlock client status -D) || fail "sanlock client status failed"
echo "$status" | grep -q "version_str=lockd-" || fail "sanlock client did not reach lockd: $status"
ok "drop-in: 'sanlock client status -D' without SANLOCK_RUN_DIR reached lockd ($(echo "$status" | grep -o 'version_str=[^ ]*'))"
$PY -c "$py_lockspaces" || fail "python3-sanlock did not reach lockd"
ok "drop-in: python3-sanlock without SANLOCK_RUN_DIR reached lockd"
sanlock client shutdown >/dev/null || fail "sanlock client shutdown"
wait_gone $pid
pid=
[ -e /run/sanlock ] && fail "/run/sanlock left behind: $(ls -la /run/sanlock)"
ok "drop-in: after shutdown nothing is left in /run/sanlock (the directory is gone)"

# 2. What apt would do on this machine: replace sanlock, keep its client libraries.
sim=$(apt-get -s install "$deb" 2>&1) || fail "apt-get -s install: $sim"
echo "$sim" | grep -q '^Remv sanlock ' || fail "apt would not remove sanlock: $sim"
removed=$(echo "$sim" | grep '^Remv ' | awk '{print $2}' | tr '\n' ' ')
[ "$removed" = "sanlock " ] || fail "apt would remove more than sanlock: $removed"
ok "apt-get -s install: removes only sanlock ($removed); libsanlock1 and python3-sanlock stay"

# 3. Install (in the overlay): sanlock's daemon package and its account go first so that
# postinst creates the socket group itself.
dpkg --remove sanlock >/dev/null
getent passwd sanlock >/dev/null && deluser --quiet --system sanlock >/dev/null
getent group sanlock >/dev/null && delgroup --quiet --system sanlock >/dev/null
getent group sanlock >/dev/null && fail "could not remove the sanlock group"
overlay_files() {
    (cd "$work" && find etc.up usr.up var.up \( -type f -o -type l \) | sort)
}
overlay_files > "$work/before-install.list"
apt-get install -y "$deb" > "$work/apt.log" 2>&1 || { cat "$work/apt.log"; fail "apt-get install"; }
ok "apt-get install ./$(basename "$deb")"
for f in /usr/sbin/lockd /usr/sbin/lockd-daemon /usr/sbin/wdmd /usr/lib/systemd/system/lockd.service \
    /usr/lib/systemd/system/wdmd.service /etc/lockd/lockd.toml /usr/share/doc/lockd/copyright \
    /usr/share/doc/lockd/changelog.gz /usr/share/doc/lockd/operations.md \
    /usr/share/lockd/grafana/lockd-dashboard.json /usr/libexec/lockd/qemu-hook \
    /etc/lockd/libvirt-leases.conf /usr/share/man/man8/lockd-killpath.8.gz \
    /usr/share/man/man8/lockd-ctdb-mutex.8.gz /usr/share/man/man8/lockd-log-dump.8.gz \
    /usr/share/man/man8/lockd-renewal.8.gz; do
    [ -e "$f" ] || fail "$f is missing"
done
[ -x /usr/libexec/lockd/qemu-hook ] || fail "the qemu hook is not executable"
head -n 1 /usr/libexec/lockd/qemu-hook | grep -q '^#!/bin/sh' || fail "the qemu hook is not a script"
dpkg -L lockd | grep -q '^/etc/libvirt' && fail "the package ships a file under /etc/libvirt"
# The installed hook as libvirt runs it, for a domain the shipped conf does not list.
echo '<domain><uuid>00000000-0000-0000-0000-000000000001</uuid></domain>' |
    /usr/libexec/lockd/qemu-hook notlisted started begin - ||
    fail "the installed hook failed for a domain without leases"
ok "libvirt qemu hook and libvirt-leases.conf installed; the hook leaves unlisted domains alone"
for f in /usr/sbin/lockd /usr/sbin/lockd-daemon /usr/sbin/wdmd; do
    readelf -S "$f" | grep -qE '\.symtab|\.debug_' && fail "$f is not stripped"
done
ok "files in place; /usr/sbin binaries stripped (no .symtab/.debug_*)"
for c in /etc/lockd/lockd.toml /etc/lockd/libvirt-leases.conf; do
    dpkg-query -W -f='${Conffiles}\n' lockd | grep -q "$c " || fail "$c is not a conffile"
done
ok "/etc/lockd/lockd.toml and /etc/lockd/libvirt-leases.conf are conffiles"
getent group sanlock >/dev/null || fail "postinst did not create the sanlock group"
[ -e /var/lib/lockd/created-sanlock-group ] || fail "postinst did not record the group"
ok "postinst created the socket group: $(getent group sanlock)"
for p in libsanlock1 python3-sanlock; do
    [ "$(dpkg-query -W -f='${db:Status-Abbrev}' $p)" = "ii " ] || fail "$p is no longer installed"
done
dpkg-query -W -f='${db:Status-Abbrev}' sanlock 2>/dev/null | grep -q '^ii' && fail "sanlock is still installed"
$PY -c 'import sanlock' || fail "python3-sanlock does not import"
ok "libsanlock1 and python3-sanlock still installed next to lockd (sanlock daemon package gone)"

# 4. Drop-in mode with the installed package.
printf '\nrun_dir = "/run/sanlock"\n' >> /etc/lockd/lockd.toml
/usr/sbin/lockd-daemon -D -w 0 -e debtest > "$work/dropin2.log" 2>&1 &
pid=$!
wait_sock /run/sanlock/sanlock.sock
[ "$(stat -c %a:%G /run/sanlock/sanlock.sock)" = "660:sanlock" ] ||
    fail "socket mode/group: $(stat -c %a:%G /run/sanlock/sanlock.sock)"
ok "installed daemon serves /run/sanlock/sanlock.sock, mode 0660, group sanlock"
$PY -c "$py_lockspaces" || fail "python3-sanlock did not reach the installed lockd"
ok "drop-in: python3-sanlock (SANLOCK_RUN_DIR unset) reached the installed lockd"
/usr/sbin/lockd version || fail "lockd version (no env) did not find the daemon via lockd.toml"
/usr/sbin/lockd metrics | grep -q '^lockd_build_info' || fail "lockd metrics"
ok "installed lockd CLI (no env) follows run_dir of /etc/lockd/lockd.toml; lockd metrics works"
/usr/sbin/lockd shutdown --wait >/dev/null || fail "lockd shutdown"
wait_gone $pid
pid=
[ -e /run/sanlock ] && fail "/run/sanlock left behind after the installed daemon"
ok "installed daemon stopped; /run/sanlock is gone"

# 5. Purge: nothing of lockd is left.
dpkg --purge lockd > "$work/purge.log" 2>&1 || { cat "$work/purge.log"; fail "dpkg --purge lockd"; }
for f in /usr/sbin/lockd /usr/sbin/lockd-daemon /usr/sbin/wdmd /usr/libexec/lockd /etc/lockd \
    /usr/lib/systemd/system/lockd.service /usr/lib/systemd/system/wdmd.service /usr/share/doc/lockd \
    /usr/share/lockd /var/lib/lockd /var/log/lockd.log; do
    [ -e "$f" ] && fail "$f is left after purge"
done
getent group sanlock >/dev/null && fail "the sanlock group created by postinst is left after purge"
# Every file the overlays hold now and did not before the install, besides dpkg/apt/log
# bookkeeping and the account files rewritten by addgroup/delgroup (checked above), is a
# leftover.
left=$(overlay_files | comm -13 "$work/before-install.list" - |
    grep -vE '^var\.up/(lib/dpkg|lib/apt|cache|log|lib/systemd/deb-systemd-helper)/' |
    grep -vE '^etc\.up/(passwd|group|shadow|gshadow|subuid|subgid)-?$' |
    grep -vE '^etc\.up/ld\.so\.cache$' || true)
[ -z "$left" ] || fail "left after purge: $left"
ok "dpkg --purge lockd: no file, directory, group or state of lockd is left"
