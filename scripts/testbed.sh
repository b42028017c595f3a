#!/usr/bin/env bash
# Runs every fencing scenario of the multi-host test bed on lockd hosts (io_timeout 1,
# emulated watchdog fire timeout 5), then one on real sanlock 3.8 hosts armed through
# lockd's wdmd (sanlock 3.8's fire timeout is fixed at 60 s, so io_timeout 2: about 90 s).
# Each run prints its timeline line; any violated timeline fails the script.
#
#   scripts/testbed.sh [--part all|lockd|sanlock]   (default all; CI runs lockd, and
#                                                    `scripts/test-all.sh --long` sanlock)
set -euo pipefail
part=all
case "${1:-}" in
    "") ;;
    --part) part=${2:?--part all|lockd|sanlock} ;;
    *) echo "usage: scripts/testbed.sh [--part all|lockd|sanlock]" >&2; exit 2 ;;
esac
case $part in all|lockd|sanlock) ;; *) echo "--part all|lockd|sanlock" >&2; exit 2 ;; esac
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
cargo build -q --bins
tb=target/debug/lockd-testbed
failed=0
baseline=$(mktemp)
trap 'rm -f "$baseline"' EXIT
bash scripts/leftovers.sh snapshot "$baseline"
if [ "$part" != sanlock ]; then
    for s in kill-daemon sigstop-daemon stall-io eio kill-wdmd kill-client stubborn-holder restart-daemon clone-host; do
        if ! "$tb" "$s"; then failed=1; fi
    done
fi
if [ "$part" != lockd ]; then
    if ! "$tb" --kind sanlock --io-timeout 2 --fire-timeout 60 kill-daemon; then failed=1; fi
fi
if ! bash scripts/leftovers.sh check "$baseline"; then failed=1; fi
exit "$failed"
