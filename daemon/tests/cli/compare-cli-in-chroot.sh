#!/usr/bin/env bash
# The `sanlock client` CLI of another Debian release (default trixie: sanlock 3.9.5), run
# from a chroot of that release (scripts/debian-chroot.sh) through one fixed sequence of
# commands (daemon/tests/cli/sequence.sh: init, read, add/inq/rem_lockspace, gets,
# host_status, set_config, command, acquire, release, inquire, status, shutdown, ...),
# twice: against that release's sanlock daemon (in the chroot: -w 0, private
# SANLOCK_RUN_DIR, SANLOCK_PRIVILEGED=0) and against lockd's daemon built on this host,
# each on a fresh zeroed file at the same path. Every command's exit status and its
# output (helper pid and clock readings replaced) must be the same; for the commands
# whose output is the daemon's own state (status -D, renewal, log_dump, version) only
# the exit status is compared. Prints both transcripts' differences, if any.
#
# SUITE `host` runs this machine's own sanlock package (Debian 12: 3.8.5) instead, with
# no chroot.
#
# Usage: daemon/tests/cli/compare-cli-in-chroot.sh LOCKD_DAEMON [SUITE|host]   (as root)
set -euo pipefail

fail() { echo "FAIL: $*" >&2; exit 1; }

daemon=$(readlink -f "${1:?usage: compare-cli-in-chroot.sh LOCKD_DAEMON [SUITE]}")
suite=${2:-trixie}
here=$(cd "$(dirname "$0")" && pwd)
chroot_sh=$here/../../../scripts/debian-chroot.sh
[ "$(id -u)" = 0 ] || fail "needs root (chroot, the sanlock daemon)"
[ -x "$daemon" ] || fail "$daemon is not executable (cargo build -p lockd-daemon)"
# Runs a command in SUITE's chroot with the work dir bound, or here for `host`.
in_suite() {
    if [ "$suite" = host ]; then
        "$@"
    else
        "$chroot_sh" run "$suite" --bind "$work" -- "$@"
    fi
}
if [ "$suite" = host ]; then
    command -v sanlock >/dev/null || fail "sanlock is missing (scripts/setup.sh installs it)"
else
    "$chroot_sh" ensure "$suite" sanlock >/dev/null
fi

work=$(mktemp -d /tmp/lockd-clicmp.XXXXXX)
chroot_pid=
spid=
lpid=
cleanup() {
    [ -n "$spid" ] && kill -9 "$spid" 2>/dev/null || true
    [ -n "$lpid" ] && kill -9 "$lpid" 2>/dev/null || true
    [ -n "$chroot_pid" ] && wait "$chroot_pid" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
cp "$here/sequence.sh" "$work/"
mkdir -p "$work/run-sanlock" "$work/run-lockd"

wait_sock() {
    for _ in $(seq 100); do
        [ -S "$1/sanlock.sock" ] && return 0
        sleep 0.1
    done
    return 1
}
gone() {
    for _ in $(seq 100); do
        kill -0 "$1" 2>/dev/null || return 0
        sleep 0.1
    done
    return 1
}
sequence() {
    rm -f "$work/disk"
    truncate -s 8M "$work/disk"
    in_suite env SANLOCK_RUN_DIR="$1" SANLOCK_PRIVILEGED=0 bash "$work/sequence.sh" "$work/disk"
}

version=$(in_suite dpkg-query -W -f='${Version}' sanlock)

# 1. sanlock of that release, in the chroot (the inner shell's PID is the daemon's).
in_suite env SANLOCK_RUN_DIR="$work/run-sanlock" SANLOCK_PRIVILEGED=0 bash -c 'echo $$ > "$1/sanlock.pid"; exec sanlock daemon -D -w 0 -U root -G root -e cli' \
    sh "$work" > "$work/sanlock.log" 2>&1 &
chroot_pid=$!
wait_sock "$work/run-sanlock" || { cat "$work/sanlock.log"; fail "sanlock daemon's socket never appeared"; }
spid=$(cat "$work/sanlock.pid")
sequence "$work/run-sanlock" > "$work/sanlock.out" 2>&1 || fail "sequence against sanlock failed"
# The sequence ends with `shutdown`.
gone "$spid" || fail "sanlock did not exit after client shutdown"
spid=
wait "$chroot_pid" || true
chroot_pid=

# 2. lockd, on the host.
LOCKD_LOG=debug "$daemon" -w 0 -c /dev/null -D -e cli -o 1 --run-dir "$work/run-lockd" \
    > "$work/lockd.log" 2>&1 < /dev/null &
lpid=$!
wait_sock "$work/run-lockd" || { tail -30 "$work/lockd.log"; fail "lockd's socket never appeared"; }
sequence "$work/run-lockd" > "$work/lockd.out" 2>&1 || fail "sequence against lockd failed"
gone "$lpid" || fail "lockd did not exit after client shutdown"
wait "$lpid" 2>/dev/null || true
lpid=

n=$(grep -c '^### ' "$work/sanlock.out")
echo "sanlock client $version ($suite): $n commands against sanlock $version and lockd"
if ! diff -u --label "sanlock $version" --label lockd "$work/sanlock.out" "$work/lockd.out"; then
    tail -30 "$work/lockd.log"
    fail "outputs differ (above)"
fi
cat "$work/lockd.out"
echo "compare-cli-in-chroot ($suite): all $n commands equal"
