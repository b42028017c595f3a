#!/usr/bin/env bash
# The chaos bed (tests/vmbed/chaos.py): three QEMU guests of the VM bed under a lease
# workload and a seeded nemesis of random, overlapping faults, judged from what the
# storage saw. Prints the checker's violations and one last line:
#   chaos seed=S minutes=M fence=… faults=N grants=N writes=N violations=N false_fences=N liveness=ok|fail max_takeover_s=X
# and where the history (JSON lines) and the timeline were kept (/var/tmp/lockd-chaos).
#
#   scripts/chaos.sh [--seed S] [--minutes M] [--fence scsi-pr|none] [--nfs] [--mixed-sanlock]
#                    [--head-reads]
#                    [--plant-bug no-host-dead-wait|take-before-confirm|kill-before-notice|lvb-not-written]
#                    [--resources N] [--clients N] [--schedule] [--keep]
#
# --plant-bug builds lockd-daemon with the `planted-bugs` feature into target/planted and
# boots it from an image of its own (/var/tmp/lockd-vmbed/image-planted); the run then
# succeeds only if the checker reports violations. --schedule prints the seed's fault
# schedule and exits. docs/testing.md, "Chaos runs", says how to replay a failure.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
planted=""
prev=""
for a in "$@"; do
    [ "$prev" = --plant-bug ] && planted=$a
    [ "$a" = --schedule ] && exec python3 tests/vmbed/chaos.py "$@"
    prev=$a
done
bash scripts/vmbed-setup.sh
cargo build -q --release -p lockd-tools -p lockd-daemon -p wdmd -p lockd-system-tests \
    --bin lockd --bin lockd-daemon --bin wdmd --bin lockd-witness
if [ -n "$planted" ]; then
    cargo build -q --release -p lockd-daemon --features planted-bugs --target-dir target/planted \
        --bin lockd-daemon
    bins=/var/tmp/lockd-vmbed/bins-planted
    mkdir -p "$bins"
    for b in lockd wdmd lockd-witness; do cp target/release/$b "$bins/"; done
    cp target/planted/release/lockd-daemon "$bins/"
    export LOCKD_VMBED_IMAGE=/var/tmp/lockd-vmbed/image-planted LOCKD_VMBED_BINS=$bins
else
    bins=target/release
    export LOCKD_VMBED_IMAGE="${LOCKD_VMBED_IMAGE:-/var/tmp/lockd-vmbed/image}"
fi
bash tests/vmbed/build-initramfs.sh "$LOCKD_VMBED_IMAGE" "$bins"
baseline=$(mktemp)
trap 'rm -f "$baseline"' EXIT
bash scripts/leftovers.sh snapshot "$baseline"
rc=0
python3 tests/vmbed/chaos.py "$@" || rc=$?
bash scripts/leftovers.sh check "$baseline" || rc=1
exit "$rc"
