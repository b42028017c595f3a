#!/usr/bin/env bash
# Runs `systemd-analyze verify` on every unit in packaging/systemd/.
#
# verify checks that each ExecStart=/ExecStop= binary exists, and the units name the
# installed paths (/usr/sbin/lockd, /usr/sbin/wdmd). So the units are copied to a temp
# dir with /usr/sbin/ rewritten to the directory of built binaries (default: the cargo
# target dir's debug/, honouring CARGO_TARGET_DIR; or the first argument), and verified
# there. Nothing else in the units is changed. Needs the Debian package `systemd`.
set -euo pipefail
cd "$(dirname "$0")/.."
bin_dir=${1:-${CARGO_TARGET_DIR:-$PWD/target}/debug}
bin_dir=$(cd "$bin_dir" && pwd)
for b in lockd wdmd; do
    [ -x "$bin_dir/$b" ] || { echo "verify-units: $bin_dir/$b is missing (cargo build --bins)" >&2; exit 1; }
done
command -v systemd-analyze >/dev/null || { echo "verify-units: install the Debian package systemd" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for u in packaging/systemd/*.service; do
    sed "s|/usr/sbin/|$bin_dir/|g" "$u" > "$tmp/$(basename "$u")"
done
status=0
for u in "$tmp"/*.service; do
    # verify prints warnings for problems it does not count as failures; treat any
    # output about our own unit as a failure too.
    out=$(SYSTEMD_LOG_LEVEL=warning systemd-analyze verify --man=no "$u" 2>&1) || status=1
    mine=$(printf '%s\n' "$out" | grep -F "$(basename "$u")" || true)
    if [ -n "$mine" ]; then
        printf '%s\n' "$mine" >&2
        status=1
    fi
    echo "verify-units: $(basename "$u"): $([ $status = 0 ] && echo ok || echo FAILED)"
done
exit $status
