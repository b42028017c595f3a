#!/usr/bin/env bash
# Runs every cargo-fuzz target (disk-format, client-lib, wdmd decoders, lockd.toml, the
# CLI's spec parsers, the SCSI PR answers and sense data) for N seconds
# each (default 10). cargo-fuzz needs nightly features; RUSTC_BOOTSTRAP=1 enables them
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
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for crate in disk-format client-lib wdmd config tools; do
    for target in $(cd "$crate" && cargo fuzz list); do
        if ! (cd "$crate" && cargo fuzz run --target-dir "$fuzz_target_dir" "$target" -- -max_total_time="$secs") >"$log" 2>&1; then
            echo "fuzz: $crate/$target FAILED:"
            tail -n 40 "$log"
            exit 1
        fi
        echo "fuzz: $crate/$target: $(grep -E '^Done' "$log" | tail -n 1)"
    done
done
