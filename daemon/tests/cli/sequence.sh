#!/bin/bash
# One fixed sequence of `sanlock client` commands (the CLI of whatever sanlock package is
# installed where this runs), against the daemon SANLOCK_RUN_DIR names, on DISK (a fresh
# zeroed 8 MiB file). Prints, per command, "### ARGS", "rc=N" and its output, with the
# values two correct runs may differ in replaced: the helper pid, clock readings.
# Run by compare-cli-in-chroot.sh against sanlock and lockd.
# Usage: sequence.sh DISK
set -u
D=$1
LS=cli:1:$D:0
R1=cli:r1:$D:1048576
R2=cli:r2:$D:2097152
pid=none
norm() {
    sed -E -e "s/\\b$pid\\b/<pid>/g" -e 's/(timestamp|last_check|last_live|last_req)=[0-9]+/\1=<t>/g' \
        -e 's/(timestamp) [0-9]+/\1 <t>/g' -e 's/^(s [^ ]*) $/\1/' |
        # sanlock lists two internal connections of its own (its helper process's pipe and
        # its listening socket) as clients; lockd has neither.
        grep -vE '^p -1 (helper|listener)$'
}
c() {
    echo "### $*" | sed "s/\\b$pid\\b/<pid>/g"
    out=$(timeout 30 sanlock client "$@" 2>&1)
    echo "rc=$?"
    printf '%s\n' "$out" | norm
}
# STATUS, its lines sorted: clients are listed by connection slot, and which slot a new
# connection gets depends on when the daemon noticed earlier connections close.
c_status() {
    echo "### status (lines sorted)"
    out=$(timeout 30 sanlock client status 2>&1)
    echo "rc=$?"
    printf '%s\n' "$out" | norm | LC_ALL=C sort
}
# A command whose output is the daemon's own (counters, its version): its exit status only.
c_rc() {
    echo "### $* (exit status only)" | sed "s/\\b$pid\\b/<pid>/g"
    timeout 30 sanlock client "$@" > /dev/null 2>&1
    echo "rc=$?"
}

c init -s "cli:0:$D:0" -o 1
c init -r "$R1"
c init -r "$R2" -Z 512 -A 1M
c read -s "cli:0:$D:0"
c read -r "$R1"
c read -r "cli:r9:$D:4194304"
c add_lockspace -s "$LS" -o 1
c add_lockspace -s "$LS" -o 1
c inq_lockspace -s "$LS"
c inq_lockspace -s "cli:1:$D:1048576"
c gets
# The host table is filled by renewals: wait until our host shows.
for _ in $(seq 100); do
    sanlock client host_status -s cli 2>/dev/null | grep -q '^1 ' && break
    sleep 0.1
done
c host_status -s cli
c gets -h 1
c set_config -s cli -u 1
c set_config -s cli -u 0
c set_config -s nosuch -u 1

# A registered client holding r1 (`client command` registers, acquires, then execs).
sanlock client command -r "$R1" -c /bin/sleep 300 > /dev/null 2> "$(dirname "$D")/command.err" &
pid=$!
# Wait for it with STATUS, not INQUIRE -p: an inquire of the pid makes its client busy
# for that moment (sanlock's cmd_active, lockd's too), and the client's own ACQUIRE
# arriving then gets -EBUSY and `client command` exits (seen once in CI).
for _ in $(seq 100); do
    sanlock client status 2>/dev/null | grep -q "^r cli:r1:.* p $pid\$" && break
    sleep 0.1
done
if ! kill -0 "$pid" 2>/dev/null; then
    echo "client command exited before holding r1: $(cat "$(dirname "$D")/command.err")" >&2
fi
c inquire -p "$pid"
c acquire -p "$pid" -r "$R1"
c acquire -p "$pid" -r "$R2"
c inquire -p "$pid"
c release -p "$pid" -r "$R2"
c release -p "$pid" -r "$R2"
c inquire -p "$pid"
c acquire -p "$pid" -r "cli:r9:$D:4194304"
c read -r "$R1"
c_status
# sanlock 3.9's client id (-C, SANLK_FOR_CLIENT_ID): the registered client's connection
# slot, from `status -D` ("p PID NAME" then "ci=N"). A 3.8 CLI has no -C.
if sanlock help 2>&1 | grep -q -- '-p|-C <id>'; then
    ci=$(sanlock client status -D 2>/dev/null |
        awk -v p="$pid" '$1 == "p" && $2 == p { f = 1; next } f && /ci=/ { sub(/.*ci=/, ""); print; exit }')
    echo "# client id of <pid> found: $([ -n "$ci" ] && echo yes || echo no)"
    if [ -n "$ci" ]; then
        # The slot numbers differ (sanlock's helper and listener hold 0 and 1): only the
        # command line and the CLI's "client_id N" echo name it.
        norm_ci() { sed -E -e "s/^(### .* -C )$ci( |\$)/\1<ci>\2/" -e 's/client_id [0-9]+/client_id <ci>/'; }
        c inquire -C "$ci" | norm_ci
        c release -C "$ci" -r "$R1" | norm_ci
        c inquire -C "$ci" | norm_ci
        c acquire -C "$ci" -r "$R1" | norm_ci
        c inquire -C "$ci" | norm_ci
    fi
fi
c release -p "$pid" -r "$R1"
c inquire -p "$pid"
kill "$pid"
wait "$pid" 2>/dev/null
pid=none
c inquire -p 999999

c_rc status -D
c_rc host_status -s cli -D
c_rc renewal -s cli
c_rc log_dump
c rem_lockspace -s "$LS"
c inq_lockspace -s "$LS"
c rem_lockspace -s "$LS"
c add_lockspace -s "$LS" -o 1
c_status
c_rc version
# sanlock ignores a shutdown while a lockspace is joined, and exits on one without.
c shutdown
c_status
c rem_lockspace -s "$LS"
c shutdown
