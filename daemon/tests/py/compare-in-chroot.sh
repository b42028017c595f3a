#!/usr/bin/env bash
# daemon/tests/py/compare.py (every daemon-facing function of python3-sanlock in one
# fixed sequence) run with another Debian release's python3-sanlock, from a chroot of that
# release (scripts/debian-chroot.sh), twice: against that release's own sanlock daemon
# (started in the chroot: -w 0, private SANLOCK_RUN_DIR, SANLOCK_PRIVILEGED=0) and against
# lockd's daemon built on this host. Each run gets a fresh zeroed 8 MiB file, at the same
# path inside and outside the chroot (lockd opens the path the client sends). Prints the
# table `function | case | sanlock | lockd | same` and fails if any row differs, if
# the number of calls differs, or if one of python3-sanlock's daemon-facing functions is
# never called.
#
# Usage: daemon/tests/py/compare-in-chroot.sh LOCKD_DAEMON [SUITE]   (as root; SUITE
# defaults to trixie)
set -euo pipefail

fail() { echo "FAIL: $*" >&2; exit 1; }

daemon=$(readlink -f "${1:?usage: compare-in-chroot.sh LOCKD_DAEMON [SUITE]}")
suite=${2:-trixie}
here=$(cd "$(dirname "$0")" && pwd)
chroot_sh=$here/../../../scripts/debian-chroot.sh
[ "$(id -u)" = 0 ] || fail "needs root (chroot, the sanlock daemon)"
[ -x "$daemon" ] || fail "$daemon is not executable (cargo build -p lockd-daemon)"
"$chroot_sh" ensure "$suite" sanlock python3-sanlock python3 >/dev/null

work=$(mktemp -d /tmp/lockd-pycmp.XXXXXX)
chroot_pid=
spid=
lpid=
cleanup() {
    # Daemons of ours still running are stopped by their PIDs.
    [ -n "$spid" ] && kill -9 "$spid" 2>/dev/null || true
    [ -n "$lpid" ] && kill -9 "$lpid" 2>/dev/null || true
    [ -n "$chroot_pid" ] && wait "$chroot_pid" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
cp "$here/compare.py" "$work/"
mkdir -p "$work/run-sanlock" "$work/run-lockd"
truncate -s 8M "$work/sanlock-disk" "$work/lockd-disk"

wait_sock() {
    for _ in $(seq 100); do
        [ -S "$1/sanlock.sock" ] && return 0
        sleep 0.1
    done
    return 1
}

# 1. sanlock of that release, in the chroot. The inner shell writes its PID (the same in
# the host's PID namespace) and execs the daemon, so the daemon is stopped by that PID.
"$chroot_sh" run "$suite" --bind "$work" -- env SANLOCK_RUN_DIR="$work/run-sanlock" \
    SANLOCK_PRIVILEGED=0 bash -c 'echo $$ > "$1/sanlock.pid"; exec sanlock daemon -D -w 0 -U root -G root -e cmp-sanlock' \
    sh "$work" > "$work/sanlock.log" 2>&1 &
chroot_pid=$!
wait_sock "$work/run-sanlock" || { cat "$work/sanlock.log"; fail "sanlock daemon's socket never appeared"; }
spid=$(cat "$work/sanlock.pid")
sversion=$("$chroot_sh" run "$suite" -- dpkg-query -W -f='${Version}' sanlock)
pversion=$("$chroot_sh" run "$suite" -- dpkg-query -W -f='${Version}' python3-sanlock)
# Every public function of that release's module (each sends a request to the daemon).
"$chroot_sh" run "$suite" -- python3 -c 'import sanlock, types
print(" ".join(sorted(n for n, v in vars(sanlock).items()
                      if isinstance(v, types.BuiltinFunctionType) and not n.startswith("_"))))' \
    > "$work/functions" || fail "cannot list python3-sanlock's functions"
"$chroot_sh" run "$suite" --bind "$work" -- env SANLOCK_RUN_DIR="$work/run-sanlock" \
    python3 "$work/compare.py" "$work/sanlock-disk" > "$work/sanlock.out" 2> "$work/sanlock.err" ||
    { cat "$work/sanlock.err" "$work/sanlock.out"; fail "compare.py against sanlock $sversion failed"; }
kill "$spid"
wait "$chroot_pid" || true
spid=
chroot_pid=

# 2. lockd, on the host.
LOCKD_LOG=debug "$daemon" -w 0 -c /dev/null -D -e cmp-lockd -o 1 --run-dir "$work/run-lockd" \
    > "$work/lockd.log" 2>&1 < /dev/null &
lpid=$!
wait_sock "$work/run-lockd" || { tail -30 "$work/lockd.log"; fail "lockd's socket never appeared"; }
"$chroot_sh" run "$suite" --bind "$work" -- env SANLOCK_RUN_DIR="$work/run-lockd" \
    python3 "$work/compare.py" "$work/lockd-disk" > "$work/lockd.out" 2> "$work/lockd.err" ||
    { cat "$work/lockd.err" "$work/lockd.out"; tail -30 "$work/lockd.log"; fail "compare.py against lockd failed"; }
kill "$lpid"
wait "$lpid" 2>/dev/null || true
lpid=

# 3. The table.
echo "python3-sanlock $pversion ($suite) against sanlock $sversion and lockd"
python3 - "$work/sanlock.out" "$work/lockd.out" "$work/functions" <<'PY' || { tail -30 "$work/lockd.log"; fail "results differ"; }
import json, re, sys
rows = [[json.loads(l) for l in open(p) if l.strip()] for p in sys.argv[1:3]]
module_functions = open(sys.argv[3]).read().split()
s, l = rows
bad = 0
print("%-22s | %-34s | %-40s | %-40s | same" % ("function", "case", "sanlock", "lockd"))
for a, b in zip(s, l):
    same = a == b
    bad += not same
    print("%-22s | %-34s | %-40s | %-40s | %s" % (a["function"], a["case"], json.dumps(a["result"]),
                                                  json.dumps(b["result"]), "yes" if same else "NO"))
    if not same:
        # Also on stderr, so that a CI log's tail names the row.
        print("differs: %s (%s): sanlock %s, lockd %s" % (a["function"], a["case"], json.dumps(a["result"]),
                                                           json.dumps(b["result"])), file=sys.stderr)
functions = ["acquire", "add_lockspace", "end_event", "get_alignment", "get_event", "get_hosts",
             "get_lockspaces", "get_lvb", "inq_lockspace", "inquire", "killpath", "read_lockspace",
             "read_resource", "read_resource_owners", "reg_event", "register", "release",
             "rem_lockspace", "request", "set_event", "set_lvb", "write_lockspace", "write_resource"]
unknown = sorted(set(module_functions) - set(functions))
if unknown:
    sys.exit("python3-sanlock has functions this comparison does not know: %s" % unknown)
never = [f for f in functions if not any(r["function"] == f for r in s)]
print("%d calls, %d equal" % (len(s), len(s) - bad))
if never:
    sys.exit("never called: %s" % never)
if len(s) != len(l):
    sys.exit("different number of calls: sanlock %d, lockd %d" % (len(s), len(l)))
sys.exit(1 if bad else 0)
PY
echo "compare-in-chroot ($suite): all calls equal"
