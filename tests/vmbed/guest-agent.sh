#!/bin/sh
# The bed's command agent in a guest, on /dev/ttyS1 (a socket on the host).
# Protocol, one line each way: the host sends "ID BASE64(script)"; the agent runs the script
# with sh, stdin from /dev/null, and answers "R ID STATUS BASE64(stdout+stderr)". Scripts
# that start long-lived programs must put them in the background with their output
# redirected, or the answer waits for them. "READY HOSTNAME" is sent when the agent starts.
tty=/dev/ttyS1
stty -F "$tty" raw -echo -icrnl -onlcr -opost 2>/dev/null
exec <"$tty" >"$tty" 2>/dev/null
echo "READY $(hostname)"
while read -r id b64; do
    [ -n "$id" ] || continue
    echo "$b64" | base64 -d >/tmp/agent.cmd
    sh /tmp/agent.cmd </dev/null >/tmp/agent.out 2>&1
    rc=$?
    echo "R $id $rc $(base64 -w0 </tmp/agent.out)"
done
