#!/usr/bin/env bash
# Builds lockd and runs it on a default lease area: a 16 MiB image under /var/tmp
# attached as a loop device (falls back to the plain file when not root). Formats a
# lockspace and a resource, dumps them, and cleans up after itself.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
cargo build --release -q -p lockd-tools
LOCKD="$PWD/target/release/lockd"

img=/var/tmp/lockd-demo.img
rm -f "$img"
truncate -s 16M "$img"
dev="$img"
cleanup() {
    if [ "$dev" != "$img" ]; then losetup -d "$dev"; fi
    rm -f "$img"
}
trap cleanup EXIT
if [ "$(id -u)" = 0 ]; then
    dev=$(losetup -f --show "$img")
fi
echo "lease storage: $dev"

set -x
"$LOCKD" direct init -s demo:0:"$dev":0 -o 10
"$LOCKD" direct init -r demo:vm1:"$dev":1M
"$LOCKD" direct dump "$dev"
"$LOCKD" direct read-leader -r demo:vm1:"$dev":1M
