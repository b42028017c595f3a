#!/usr/bin/env bash
# Long fuzzing run: every cargo-fuzz target of the workspace for RUNS executions each
# (default 100,000,000), starting from and adding to the corpus kept in the repository
# (<crate>/fuzz/seeds/<target>, minimised with libFuzzer's -merge=1 after the run).
# Prints one table row per target: executions, coverage (edges), features, corpus size,
# crashes. A crash stops nothing: every target runs, the script exits 1 at the end if any
# target crashed (the reproducer is in <crate>/fuzz/artifacts/<target>/).
#
# The targets are built without AddressSanitizer (`-s none`): every fuzzed crate forbids
# unsafe code, so ASan has nothing to find there and costs 2-7x in speed; CI's smoke run
# keeps ASan. RUST_LIB_BACKTRACE=0 stops anyhow capturing a backtrace on every error
# (RUST_BACKTRACE=1 in the environment would otherwise make it do so).
#
# usage: scripts/fuzz-long.sh [RUNS] [JOBS] [CRATE/TARGET ...]
#   JOBS: targets run in parallel (default 1); naming targets runs only those.
#   FUZZ_WORKERS=N (default 1): N processes per target on one shared corpus (libFuzzer
#   -reload picks up each other's finds), RUNS/N executions each; the row sums them.
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-100000000}"
jobs="${2:-1}"
shift $(($# < 2 ? $# : 2))
only=("$@")
workers="${FUZZ_WORKERS:-1}"
export PATH="$HOME/.cargo/bin:$PATH"
command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --locked --quiet
export RUSTC_BOOTSTRAP=1 RUST_LIB_BACKTRACE=0
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

run_one() { # crate target
    local crate=$1 target=$2 seeds="$1/fuzz/seeds/$2" work="$out/$1-$2"
    mkdir -p "$seeds" "$work/corpus"
    cp -r "$seeds/." "$work/corpus/" 2>/dev/null || true
    local rc=0 w pids=()
    for w in $(seq 1 "$workers"); do
        (cd "$crate" && cargo fuzz run -s none "$target" "$work/corpus" -- \
            -runs="$((runs / workers))" -reload=1 -print_final_stats=1) >"$work/log.$w" 2>&1 &
        pids+=($!)
    done
    for w in "${pids[@]}"; do wait "$w" || rc=$?; done
    cat "$work"/log.* >"$work/log"
    # Keep a minimised corpus in the repo.
    mkdir -p "$work/min"
    (cd "$crate" && cargo fuzz run -s none "$target" "$work/min" "$work/corpus" -- -merge=1) \
        >>"$work/merge.log" 2>&1 || true
    rm -rf "$seeds" && mkdir -p "$seeds" && cp -r "$work/min/." "$seeds/"
    local execs cov ft secs
    secs=$(sed -n 's/^Done [0-9]* runs in \([0-9]*\) second.*/\1/p' "$work/log" | sort -n | tail -1)
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log" | awk '{s += $1} END {print s}')
    cov=$(grep -Eo 'cov: [0-9]+' "$work/log" | cut -d' ' -f2 | sort -n | tail -1)
    ft=$(grep -Eo 'ft: [0-9]+' "$work/log" | cut -d' ' -f2 | sort -n | tail -1)
    local crashes=0
    [ "$rc" -ne 0 ] && crashes=1
    printf '| %s/%s | %s | %s | %s | %s | %s | %s |\n' "$crate" "$target" "${execs:-?}" \
        "${secs:-?}" "${cov:-?}" "${ft:-?}" "$(ls "$seeds" | wc -l)" "$crashes" >"$work/row"
}

targets=()
for crate in disk-format client-lib wdmd config tools; do
    for t in $(cd "$crate" && cargo fuzz list); do
        if [ "${#only[@]}" -eq 0 ] || [[ " ${only[*]} " == *" $crate/$t "* ]]; then
            targets+=("$crate $t")
        fi
    done
done
# Build everything first, one at a time (the builds share nothing and are heavy).
for ct in "${targets[@]}"; do
    set -- $ct
    (cd "$1" && cargo fuzz build -s none "$2" >/dev/null 2>&1)
done
running=0
for ct in "${targets[@]}"; do
    set -- $ct
    run_one "$1" "$2" &
    running=$((running + 1))
    if [ "$running" -ge "$jobs" ]; then wait -n; running=$((running - 1)); fi
done
wait
echo "| target | executions | seconds | coverage (edges) | features | corpus files | crashes |"
echo "|---|---|---|---|---|---|---|"
failed=0
for ct in "${targets[@]}"; do
    set -- $ct
    cat "$out/$1-$2/row"
    grep -q '| 1 |$' "$out/$1-$2/row" && failed=1
done
exit "$failed"
