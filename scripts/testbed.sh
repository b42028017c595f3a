#!/usr/bin/env bash
# Runs every fencing scenario of the multi-host test bed on lockd hosts (io_timeout 1,
# emulated watchdog fire timeout 5), then one on real sanlock 3.8 hosts armed through
# lockd's wdmd (sanlock 3.8's fire timeout is fixed at 60 s, so io_timeout 2). Each run
# prints its timeline line; any violated timeline fails the script.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
cargo build -q --bins
tb=target/debug/lockd-testbed
failed=0
baseline=$(mktemp)
trap 'rm -f "$baseline"' EXIT
bash scripts/leftovers.sh snapshot "$baseline"
for s in kill-daemon sigstop-daemon stall-io eio kill-wdmd kill-client stubborn-holder restart-daemon clone-host; do
    if ! "$tb" "$s"; then failed=1; fi
done
if [ "${LOCKD_TESTBED_SANLOCK:-1}" = 1 ]; then
    if ! "$tb" --kind sanlock --io-timeout 2 --fire-timeout 60 kill-daemon; then failed=1; fi
fi
if ! bash scripts/leftovers.sh check "$baseline"; then failed=1; fi
exit "$failed"
