#!/usr/bin/env bash
# The deterministic multi-host simulations: lease-core's (`lockd-sim`) and the whole
# daemon's (`lockd-daemon-sim`, lockd-core's cores over lease-core's simulated disk). A
# clean run over many seeds must find no violation, and each planted bug must be caught.
# Each simulator runs on one thread: lease-core's simulations and the daemon's run side by
# side, each lane's output printed whole once both have ended.
# Usage: scripts/sim.sh [LEASE_SEEDS (2000)] [DAEMON_SEEDS (1000)]
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
seeds="${1:-2000}"
daemon_seeds="${2:-1000}"
# The simulator and the planted bugs exist only with lease-core's `sim` feature, which no
# production build enables.
cargo build --release -q -p lease-core --features sim --bin lockd-sim
sim=target/release/lockd-sim
# The whole daemon (issue 23): 4 hosts' lockd-core cores, their simulated clients,
# renewal failures, removals, daemon restarts, requests from other hosts (examined by
# the holders: notice, then kill orders), the daemon's lockspace lifecycle and storage
# fencing on odd seeds (issue 40: every kind of `Input` reached, `inputs=38/38`);
# lockd-core's `sim` feature, off in production.
cargo build --release -q -p lockd-core --features sim --bin lockd-daemon-sim
dsim=target/release/lockd-daemon-sim
lease_out=$(mktemp)
daemon_out=$(mktemp)
lease_scratch=$(mktemp)
daemon_scratch=$(mktemp)
trap 'rm -f "$lease_out" "$daemon_out" "$lease_scratch" "$daemon_scratch"' EXIT
# A planted bug's run must end with violations counted, not die otherwise (a panic also
# exits non-zero).
expect_caught() {
    local bug=$1
    shift
    if "$@" >"$log" 2>&1; then
        echo "sim: the planted bug $bug was NOT caught:"
        tail -n 3 "$log"
        exit 1
    fi
    if ! tail -n 1 "$log" | grep -Eq 'violations=[1-9]'; then
        echo "sim: the run with planted bug $bug failed without reporting violations:"
        tail -n 5 "$log"
        exit 1
    fi
    echo "sim: planted bug $bug caught: $(tail -n 1 "$log")"
}

lease_lane() {
    log=$lease_scratch
    "$sim" --seeds "$seeds" --hosts 4
    # The model of storage fencing by persistent reservations (issues 24 and 38): fence,
    # confirm, take; racing survivors, clean leaves, target restarts that lose every key.
    "$sim" --model fence --seeds "$seeds" --hosts 4
    # The same on a target that takes PREEMPT AND ABORT (LIO, nvmet; issue 41): a fence by
    # our own abort takes without the drain.
    "$sim" --model fence-abort --seeds "$seeds" --hosts 4
    # And with two I_T nexuses per host (dm-multipath), one host's path b sometimes holding a
    # key of another scheme.
    "$sim" --model fence-multipath --seeds "$seeds" --hosts 4
    # Resource leases on 2-4 disks (issue 43) that fail, stall and slow on their own and on
    # single hosts' paths.
    "$sim" --model multi-disk --seeds "$seeds" --hosts 4
    # skip-full-read: renewals never read the whole lockspace area (lease-core `reads`), so a
    # host joining at a far host_id is never seen.
    # Each on 500 seeds: every one is caught within the first 100 (the lease-core unit test
    # `clean_seeds_pass_and_planted_bugs_are_caught` checks it on 100).
    for bug in skip-phase2 no-host-dead-wait stale-known-hosts own-name-short-delay skip-full-read; do
        expect_caught "$bug" "$sim" --seeds 500 --hosts 4 --plant-bug "$bug"
    done
    # Renewals reading the head of the lockspace area (experimental, `read_whole_lockspace =
    # false`): the same clean run.
    "$sim" --model head-reads --seeds "$seeds" --hosts 4
    # A minority of a lease's disks taken for a majority.
    expect_caught accept-minority "$sim" --model multi-disk --seeds 500 --hosts 4 \
        --plant-bug accept-minority
    # The fence model's planted bugs, each on 2000 seeds whatever LEASE_SEEDS is (a few
    # seconds each; the rarest, holder-unregisters-at-leave and take-without-drain, are
    # caught on a few seeds in a thousand).
    for bug in take-before-preempt-confirmed preempt-conflict-means-fenced \
        holder-unregisters-at-leave empty-target-means-fenced take-without-drain \
        key-lost-at-join-reregisters; do
        expect_caught "$bug" "$sim" --model fence --seeds 2000 --hosts 4 --plant-bug "$bug"
    done
    # A key found gone taken for our own abort (no drain): rare, first caught on seed 409.
    expect_caught found-gone-skips-drain "$sim" --model fence-abort --seeds 3000 --hosts 4 \
        --plant-bug found-gone-skips-drain
    # A fence confirmed beside a key of another scheme: first caught on seed 57.
    expect_caught foreign-keys-ignored "$sim" --model fence-multipath --seeds 2000 --hosts 4 \
        --plant-bug foreign-keys-ignored
}

daemon_lane() {
    log=$daemon_scratch
    # A clean run of the daemon simulator: its last line (in $last), or the first failing
    # seeds and an exit.
    dsim_clean() {
        local out
        if ! out=$("$dsim" "$@"); then
            echo "$out" | grep '^FAIL' | head -n 5
            echo "$out" | tail -n 1
            exit 1
        fi
        last=$(echo "$out" | tail -n 1)
        echo "$last"
    }
    dsim_clean --seeds "$daemon_seeds" --hosts 4
    if ! echo "$last" | grep -Eq 'inputs=([0-9]+)/\1 '; then
        echo "sim: the daemon simulator's seeds did not reach every kind of input"
        exit 1
    fi
    # Storage fencing on every seed.
    dsim_clean --model fence --seeds "$daemon_seeds" --hosts 4
    # Each planted bug on 200 seeds (each is caught on 10-100% of seeds): the core's, then
    # the simulated shell's (`take-before-confirm`, the daemon's planted bug of that name).
    for bug in kill-before-notice release-before-disk grant-in-lost-lockspace kill-non-holders \
        examine-kills-lockspace examine-kill-before-notice removal-without-notice \
        notice-misses-watch request-without-bit preempt-floor-4d take-before-confirm; do
        expect_caught "$bug" "$dsim" --seeds 200 --hosts 3 --plant-bug "$bug"
    done
}

lease_lane >"$lease_out" 2>&1 &
lease_pid=$!
daemon_lane >"$daemon_out" 2>&1 &
daemon_pid=$!
lease_rc=0
daemon_rc=0
wait "$lease_pid" || lease_rc=$?
wait "$daemon_pid" || daemon_rc=$?
echo "--- lockd-sim (lease-core)"
cat "$lease_out"
echo "--- lockd-daemon-sim (lockd-core)"
cat "$daemon_out"
if [ "$lease_rc" != 0 ] || [ "$daemon_rc" != 0 ]; then
    echo "sim: FAILED (the lockd-sim lane exited $lease_rc, the lockd-daemon-sim lane $daemon_rc)"
    exit 1
fi
echo "sim: all passed"
