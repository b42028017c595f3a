#!/usr/bin/env bash
# The chaos bed's long runs: each planted bug once (each must make the checker report
# violations), then SEEDS seeds of MINUTES minutes in each mode (fencing on, fencing off,
# NFS), and a table of the runs (the one docs/testing.md keeps). Exits non-zero when a
# planted bug went unseen or a clean run reported a violation.
#
#   scripts/chaos-long.sh [--seeds 20] [--minutes 12] [--first-seed 100] [--no-planted]
set -euo pipefail
cd "$(dirname "$0")/.."
seeds=20
minutes=12
first=100
planted=1
while [ $# -gt 0 ]; do
    case $1 in
        --seeds) seeds=$2; shift 2 ;;
        --minutes) minutes=$2; shift 2 ;;
        --first-seed) first=$2; shift 2 ;;
        --no-planted) planted=0; shift ;;
        *) echo "usage: scripts/chaos-long.sh [--seeds N] [--minutes M] [--first-seed S] [--no-planted]" >&2; exit 2 ;;
    esac
done
rows=()
rc=0
run() {
    local out line
    out=$(mktemp)
    if bash scripts/chaos.sh "$@" >"$out" 2>"$out.err"; then :; else rc=1; fi
    line=$(grep '^chaos seed=' "$out" | tail -1 || true)
    [ -n "$line" ] || { line="chaos $* : no result line (see $out.err)"; rc=1; }
    grep '^  VIOLATION' "$out" | head -5 || true
    echo "$line"
    rows+=("$line")
    rm -f "$out"
}
if [ "$planted" = 1 ]; then
    run --seed 3 --minutes 4 --fence none --plant-bug no-host-dead-wait
    run --seed 3 --minutes 4 --fence scsi-pr --plant-bug take-before-confirm
    run --seed 3 --minutes 4 --fence none --plant-bug kill-before-notice
    run --seed 3 --minutes 4 --fence none --plant-bug lvb-not-written
fi
for ((s = first; s < first + seeds; s++)); do
    run --seed "$s" --minutes "$minutes" --fence scsi-pr
    run --seed "$s" --minutes "$minutes" --fence none
    run --seed "$s" --minutes "$minutes" --fence none --nfs
done
printf '\n%s\n' "chaos runs:"
printf '%s\n' "${rows[@]}"
exit "$rc"
