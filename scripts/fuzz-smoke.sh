#!/usr/bin/env bash
# Runs every cargo-fuzz target of disk-format for N seconds (default 10). cargo-fuzz
# needs nightly features; RUSTC_BOOTSTRAP=1 enables them on the stable toolchain.
set -euo pipefail
cd "$(dirname "$0")/../disk-format"
secs="${1:-10}"
export PATH="$HOME/.cargo/bin:$PATH"
if ! command -v cargo-fuzz >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked --quiet
fi
export RUSTC_BOOTSTRAP=1
for target in $(cargo fuzz list); do
    echo "fuzz: $target for ${secs}s"
    cargo fuzz run "$target" -- -max_total_time="$secs" 2>&1 | grep -E '^(Done|==|SUMMARY|.*panicked)' || true
    # libFuzzer exits non-zero on a crash; re-check explicitly.
    test ! -d "fuzz/artifacts/$target" || [ -z "$(ls -A "fuzz/artifacts/$target")" ] || {
        echo "fuzz: $target found a crash:"; ls "fuzz/artifacts/$target"; exit 1; }
done
