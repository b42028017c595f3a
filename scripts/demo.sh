#!/usr/bin/env bash
# Builds lockd and runs it for real on a default lease area: a 16 MiB image under
# /var/tmp attached as a loop device (the plain file when not root). It formats a
# lockspace and a resource, starts the daemon, joins the lockspace, holds the resource
# for the life of a command, shows status and the on-disk owner, and cleans up.
#
# The daemon runs with -w 0 (no watchdog): this machine has no watchdog device. On a
# production host run wdmd and leave the watchdog on (see docs/fencing.md).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
cargo build --release -q -p lockd-tools
LOCKD="$PWD/target/release/lockd"

img=/var/tmp/lockd-demo.img
run_dir=/var/tmp/lockd-demo-run
rm -rf "$img" "$run_dir"
mkdir -p "$run_dir"
truncate -s 16M "$img"
dev="$img"
daemon_pid=
cleanup() {
    if [ -n "$daemon_pid" ] && kill -0 "$daemon_pid" 2>/dev/null; then
        kill "$daemon_pid"; wait "$daemon_pid" 2>/dev/null || true
    fi
    if [ "$dev" != "$img" ]; then losetup -d "$dev"; fi
    rm -rf "$img" "$run_dir"
}
trap cleanup EXIT
if [ "$(id -u)" = 0 ]; then
    dev=$(losetup -f --show "$img")
fi
export LOCKD_RUN_DIR="$run_dir"
echo "== lease storage: $dev"

set -x
"$LOCKD" direct init -s demo:0:"$dev":0 -o 2
"$LOCKD" direct init -r demo:vm1:"$dev":1M
set +x
"$LOCKD" daemon -D -w 0 -e demo-host -o 2 > "$run_dir/daemon.log" 2>&1 &
daemon_pid=$!
for _ in $(seq 50); do [ -S "$run_dir/sanlock.sock" ] && break; sleep 0.1; done
set -x
"$LOCKD" version
"$LOCKD" add-lockspace -s demo:1:"$dev":0 -o 2
"$LOCKD" acquire -r demo:vm1:"$dev":1M --owner-name demo-vm -- sleep 4 &
holder=$!
sleep 1.5
"$LOCKD" status
"$LOCKD" host-status -s demo
"$LOCKD" direct dump "$dev"
wait "$holder"
"$LOCKD" status
"$LOCKD" rem-lockspace -s demo:1:"$dev":0
"$LOCKD" shutdown --wait
set +x
daemon_pid=
echo "== done; daemon log:"
tail -n 5 "$run_dir/daemon.log"
