#!/usr/bin/env bash
# Sets up and runs every lockd test: format and lints, unit and property tests, system
# tests against the real sanlock on files and loop devices, the deterministic simulator,
# and a short fuzzing pass over every on-disk decoder. Run as root (loop devices, the
# sanlock daemon). Exits non-zero on the first failure.
#
#   scripts/test-all.sh           what CI runs (under 60 minutes warm)
#   scripts/test-all.sh --long    then the long beds too: every VM-bed scenario, chaos runs
#                                 in each mode (docs/testing.md, "The chaos bed")
set -euo pipefail
cd "$(dirname "$0")/.."
long=0
for a in "$@"; do
    case $a in
        --long) long=1 ;;
        *) echo "usage: scripts/test-all.sh [--long]" >&2; exit 2 ;;
    esac
done
export PATH="$HOME/.cargo/bin:$PATH"

# Each step's wall time, printed as a table at the end (and on failure: the steps so far).
step_names=()
step_starts=()
ci_start=$(date +%s)
step() {
    step_names+=("$*")
    step_starts+=("$(date +%s)")
    printf '\n=== %s ===\n' "$*"
}
step_times() {
    local now i n end
    now=$(date +%s)
    n=${#step_names[@]}
    printf '\n%-8s %s\n' "seconds" "step"
    for ((i = 0; i < n; i++)); do
        if ((i + 1 < n)); then end=${step_starts[i + 1]}; else end=$now; fi
        printf '%-8s %s\n' "$((end - step_starts[i]))" "${step_names[i]:0:100}"
    done
    printf '%-8s %s\n' "$((now - ci_start))" "total"
}
baseline=""
trap 'rm -f "$baseline"; step_times' EXIT

step "setup (scripts/setup.sh)"
bash scripts/setup.sh
# What is attached before the tests start is not theirs to clean up.
baseline=$(mktemp)
bash scripts/leftovers.sh snapshot "$baseline"

step "format"
cargo fmt --all -- --check

step "clippy"
# Twice: the production configuration, and with every feature (lease-core's `sim`: the
# simulator and its planted bugs).
cargo clippy --workspace --all-targets -- -D warnings
cargo clippy --workspace --all-targets --all-features -- -D warnings

step "minimum Rust version"
# rust-version in Cargo.toml is the oldest rustc the crates build with (1.87:
# u64::is_multiple_of). The tests need 1.88, the minimum of proptest 1.12 (a
# dev-dependency), so only the libraries and binaries are checked with it.
msrv=$(sed -n 's/^rust-version = "\(.*\)"$/\1/p' Cargo.toml)
if rustup toolchain install "$msrv" --profile minimal; then
    cargo +"$msrv" check --workspace --all-features
else
    # The toolchain comes from static.rust-lang.org, outside the registries this kind of
    # machine is promised; say loudly that the check did not run rather than fail CI.
    echo "MINIMUM RUST VERSION CHECK NOT RUN: rustup could not fetch $msrv" >&2
fi

step "sid chroot with sanlock 5.1.1 (daemon/tests/mixed_cluster_sanlock5.rs, sanlock5_client.rs)"
# Built with debootstrap on first use (about a minute here), then cached under
# /var/tmp/lockd-chroots/sid; the tests also ensure it, this step just times it apart.
# gcc, libc6-dev and libsanlock-dev build tests/c/probe51.c against libsanlock 5.1.1.
bash scripts/debian-chroot.sh ensure sid sanlock libsanlock-dev gcc libc6-dev

step "trixie chroot with sanlock 3.9.5 (daemon/tests/mixed_cluster_sanlock395.rs)"
# The same for Debian 13 (also used by scripts/test-trixie.sh below, which adds its own
# packages); the test ensures it too.
bash scripts/debian-chroot.sh ensure trixie sanlock python3-sanlock

step "unit, property and system tests"
# `lockd-sim` needs lease-core's `sim` feature, `lockd-daemon-sim` lockd-core's; the
# production binaries are built without.
cargo build --workspace --bins --examples
cargo build -p lease-core --features sim --bins
cargo test --workspace
cargo test -p lease-core --features sim
cargo test -p lockd-core --features sim

step "python package (wheel, examples, real lockd and sanlock daemons)"
bash scripts/test-python.sh

step "systemd units (systemd-analyze verify against the built binaries)"
bash packaging/verify-units.sh

step "Debian 13 in a trixie chroot: the .deb, python3-sanlock 3.9.5, sanlock 3.9.5's CLI, ctdb 4.22 and libvirt 11.3 against lockd"
bash scripts/test-trixie.sh

step "deterministic simulation (lease-core, and the whole daemon: lockd-core)"
bash scripts/sim.sh

step "fencing scenarios on the multi-host test bed (lockd hosts; --long adds the sanlock-host one)"
bash scripts/testbed.sh --part lockd
step "virtual-machine bed, CI subset (QEMU guests, tgt iSCSI, i6300esb watchdog; NFS in --long)"
bash scripts/vmbed.sh --ci
step "virtual-machine bed on Debian unstable's kernel: pr-kill-daemon on NVMe/TCP (nvmet with reservations in a storage guest, the block PR ioctls)"
bash scripts/vmbed.sh pr-kill-daemon --storage nvme-tcp

step "chaos bed, CI run (tests/vmbed/chaos.py: 4 minutes, seed 1, storage fencing on)"
# First the checker's pure rules on hand-made histories (tests/vmbed/test_chaos_checker.py).
python3 -m unittest discover -s tests/vmbed -p 'test_*.py'
bash scripts/chaos.sh --seed 1 --minutes 4 --fence scsi-pr

if [ "$long" = 1 ]; then
    step "long: every virtual-machine bed scenario"
    bash scripts/vmbed.sh
    for storage in lio nvme-tcp multipath; do
        step "long: the fencing scenarios on $storage (Debian unstable's kernel)"
        bash scripts/vmbed.sh pr-kill-daemon pr-freeze-guest pr-cut-storage pr-slow-storage --storage "$storage"
    done
    step "long: tgt with guests on Debian unstable's kernel (the block PR REGISTER's APTPL refused: SG_IO fallback)"
    LOCKD_VMBED_GUEST_KERNEL=sid bash scripts/vmbed.sh pr-kill-daemon
    step "long: tgt with guests on Debian 13's kernel (no block PR read ioctls: SG_IO)"
    LOCKD_VMBED_GUEST_KERNEL=trixie bash scripts/vmbed.sh pr-kill-daemon pr-cut-storage
    step "long: the multi-host test bed on sanlock 3.8 hosts armed through lockd's wdmd"
    bash scripts/testbed.sh --part sanlock
    step "long: chaos runs in each mode, and each planted bug caught"
    bash scripts/chaos-long.sh
    step "long: every fuzz target for a minute"
    bash scripts/fuzz-smoke.sh 60
fi

step "fuzz smoke run"
bash scripts/fuzz-smoke.sh 3

step "leftovers"
bash scripts/leftovers.sh check "$baseline"
echo "all tests passed"
