#!/usr/bin/env bash
# Runs every cargo-fuzz target (disk-format, client-lib, wdmd decoders, lockd.toml, the
# CLI's spec parsers, the SCSI PR answers and sense data) for N seconds
# each (default 10), two at a time. cargo-fuzz needs nightly features; RUSTC_BOOTSTRAP=1 enables them
# on the stable toolchain. A build failure or a crash fails the script. The five fuzz
# workspaces share one target directory, kept outside the checkout
# ($LOCKD_FUZZ_TARGET_DIR, default /var/tmp/lockd-fuzz-target) so that a fresh clone (CI's)
# rebuilds only this project's crates, not libFuzzer and the dependencies, under the
# sanitizer (about four minutes from nothing on this 2-core machine).
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-10}"
export PATH="$HOME/.cargo/bin:$PATH"
if ! command -v cargo-fuzz >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked --quiet
fi
export RUSTC_BOOTSTRAP=1 RUST_LIB_BACKTRACE=0
fuzz_target_dir="${LOCKD_FUZZ_TARGET_DIR:-/var/tmp/lockd-fuzz-target}"
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
# Each crate's targets are built first (one cargo at a time on the shared target dir);
# then the targets run two at a time, one per core (each fuzzer is one process).
targets=()
for crate in disk-format client-lib wdmd config tools; do
    if ! (cd "$crate" && cargo fuzz build --target-dir "$fuzz_target_dir") >"$logs/build" 2>&1; then
        echo "fuzz: building $crate's targets FAILED:"
        tail -n 40 "$logs/build"
        exit 1
    fi
    for target in $(cd "$crate" && cargo fuzz list); do
        targets+=("$crate/$target")
    done
done
run_one() {
    local crate=${1%%/*} target=${1#*/}
    (cd "$crate" && cargo fuzz run --target-dir "$fuzz_target_dir" "$target" -- -max_total_time="$secs") \
        >"$logs/${crate}_$target" 2>&1
}
report() {
    local rc=$1 name=$2
    local log="$logs/${name%%/*}_${name#*/}"
    if [ "$rc" != 0 ]; then
        echo "fuzz: $name FAILED:"
        tail -n 40 "$log"
        return 1
    fi
    echo "fuzz: $name: $(grep -E '^Done' "$log" | tail -n 1)"
}
failed=0
for ((i = 0; i < ${#targets[@]}; i += 2)); do
    first=${targets[i]}
    second=${targets[i + 1]:-}
    run_one "$first" &
    first_pid=$!
    if [ -n "$second" ]; then
        run_one "$second" &
        second_pid=$!
    fi
    first_rc=0
    wait "$first_pid" || first_rc=$?
    report "$first_rc" "$first" || failed=1
    if [ -n "$second" ]; then
        second_rc=0
        wait "$second_pid" || second_rc=$?
        report "$second_rc" "$second" || failed=1
    fi
done
exit "$failed"
