//! Interop with the real C client library: Debian's `libwdmd.so.1` (sanlock
//! 3.8.5, header `/usr/include/wdmd.h` from libsanlock-dev) drives this wdmd.
//! A small C program registers, sets its refcount, reads STATUS, arms with
//! TEST_LIVE and then exits without disarming: this wdmd must keep testing the
//! dead connection and the emulated watchdog must reset the "host".
//!
//! libwdmd's socket path is fixed (`/run/wdmd/wdmd.sock`), so the run happens
//! in a private mount namespace with tmpfs on /run and /dev/shm. Needs root,
//! gcc and libsanlock-dev (installed by scripts/setup.sh).

use std::process::Command;

use wdmd::client::parse_dump_clients;
use wdmd::emulator::read_state;

const WDMD: &str = env!("CARGO_BIN_EXE_wdmd");
const EMU: &str = env!("CARGO_BIN_EXE_wdmd-emulator");

const C_CLIENT: &str = r#"
#include <stdint.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>
#include <wdmd.h>

int main(void)
{
	struct timespec ts;
	int con, rv, interval = -1, fire = -1;
	uint64_t ka = 0, now;

	con = wdmd_connect();
	if (con < 0) { printf("CONNECT_ERR %d\n", con); return 1; }
	rv = wdmd_register(con, (char *)"libwdmd_ls:7");
	if (rv < 0) { printf("REGISTER_ERR %d\n", rv); return 1; }
	rv = wdmd_refcount_set(con);
	if (rv < 0) { printf("REFCOUNT_ERR %d\n", rv); return 1; }
	rv = wdmd_status(con, &interval, &fire, &ka);
	if (rv < 0) { printf("STATUS_ERR %d\n", rv); return 1; }
	printf("STATUS %d %d %llu\n", interval, fire, (unsigned long long)ka);
	clock_gettime(CLOCK_MONOTONIC, &ts);
	now = ts.tv_sec;
	rv = wdmd_test_live(con, now, now + 3);
	if (rv < 0) { printf("TEST_LIVE_ERR %d\n", rv); return 1; }
	printf("ARMED %llu %llu %d\n", (unsigned long long)now,
	       (unsigned long long)(now + 3), (int)getpid());
	fflush(stdout);
	sleep(1);
	/* exit without TEST_LIVE(0,0): the connection dies armed */
	return 0;
}
"#;

const SCRIPT: &str = r#"
set -u
D="$1"; WDMD="$2"; EMU="$3"
mount -t tmpfs tmpfs /run || exit 90
mount -t tmpfs tmpfs /dev/shm || exit 91
mkdir -p /run/wdmd
sleep 1000 &
VICTIM=$!
"$EMU" --socket "$D/emu.sock" --state "$D/emu.state" --kill "pid:$VICTIM" >/dev/null 2>"$D/emu.log" &
EMUPID=$!
for i in $(seq 100); do grep -q '^start' "$D/emu.state" 2>/dev/null && break; sleep 0.05; done
"$WDMD" -D -w "emu:$D/emu.sock" --fire-timeout 3 >/dev/null 2>"$D/wdmd.log" &
WDPID=$!
for i in $(seq 100); do [ -S /run/wdmd/wdmd.sock ] && break; sleep 0.05; done
"$D/client" &
CPID=$!
sleep 0.5
echo "DUMP_BEGIN"; "$WDMD" --dump; echo "DUMP_END"
wait $CPID
echo "CLIENT_RC $?"
wait $VICTIM
echo "VICTIM_RC $?"
kill -TERM $WDPID
sleep 1
kill -0 $WDPID 2>/dev/null && echo "WDMD_STILL_RUNNING"
kill -KILL $WDPID
wait $WDPID 2>/dev/null
[ -e /dev/shm/wdmd ] && echo "MARKER_LEFT"
kill $EMUPID
wait $EMUPID 2>/dev/null
exit 0
"#;

fn value<'a>(out: &'a str, key: &str) -> Option<&'a str> {
    out.lines().find_map(|l| l.strip_prefix(key).map(str::trim))
}

#[test]
fn real_libwdmd_client_dies_armed_and_the_host_is_reset() {
    let dir = tempfile::Builder::new()
        .prefix("wdmd-libwdmd-")
        .tempdir_in("/var/tmp")
        .expect("tempdir");
    let d = dir.path();
    std::fs::write(d.join("client.c"), C_CLIENT).unwrap();
    let cc = Command::new("gcc")
        .arg("-o")
        .arg(d.join("client"))
        .arg(d.join("client.c"))
        .arg("-lwdmd")
        .output()
        .expect("gcc must be installed");
    assert!(
        cc.status.success(),
        "building against libwdmd (libsanlock-dev) failed:\n{}",
        String::from_utf8_lossy(&cc.stderr)
    );
    let out = Command::new("timeout")
        .args([
            "120",
            "unshare",
            "-m",
            "--propagation",
            "private",
            "sh",
            "-c",
            SCRIPT,
            "sh",
        ])
        .arg(d)
        .arg(WDMD)
        .arg(EMU)
        .output()
        .expect("unshare");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let ctx = format!(
        "stdout:\n{text}\nstderr:\n{}\nwdmd.log:\n{}",
        String::from_utf8_lossy(&out.stderr),
        std::fs::read_to_string(d.join("wdmd.log")).unwrap_or_default()
    );
    assert_eq!(out.status.code(), Some(0), "{ctx}");

    // STATUS before the device is open: 3.9 interval rule for W = 3, W itself.
    let status: Vec<&str> = value(&text, "STATUS").expect("status").split(' ').collect();
    assert_eq!(&status[..2], &["1", "3"], "{ctx}");
    let armed: Vec<u64> = value(&text, "ARMED")
        .expect("armed")
        .split(' ')
        .map(|v| v.parse().unwrap())
        .collect();
    assert_eq!(value(&text, "CLIENT_RC"), Some("0"), "{ctx}");

    // The dump shows the libwdmd client with its name, pid, refcount and expiry.
    let b = text.find("DUMP_BEGIN").unwrap();
    let e = text.find("DUMP_END").unwrap();
    let clients = parse_dump_clients(&text[b..e]);
    let c = clients
        .iter()
        .find(|c| c.name == "libwdmd_ls:7")
        .unwrap_or_else(|| panic!("{ctx}"));
    assert_eq!(u64::try_from(c.pid).unwrap(), armed[2], "{ctx}");
    assert!(c.refcount, "{ctx}");
    assert_eq!((c.renewal, c.expire), (armed[0], armed[1]), "{ctx}");

    // The armed connection died: the emulated watchdog fired and SIGKILLed the victim;
    // SIGTERM cannot stop wdmd (the dead client keeps its refcount).
    assert_eq!(value(&text, "VICTIM_RC"), Some("137"), "{ctx}");
    assert!(text.contains("WDMD_STILL_RUNNING"), "{ctx}");
    assert!(text.contains("MARKER_LEFT"), "{ctx}");
    let ev = read_state(&d.join("emu.state")).expect("state");
    let close = ev
        .iter()
        .find(|e| e.event == "unclean-close")
        .expect("unclean close");
    let fire = ev.iter().find(|e| e.event == "fire").expect("fire");
    let delay = fire.mono - close.mono;
    assert!(
        (2.9..3.6).contains(&delay),
        "fire {delay} s after the last ping\n{ctx}"
    );
    assert!(fire.mono <= (armed[1] + 3) as f64 + 0.5, "{ctx}");
    assert!(
        ctx.contains("client dead"),
        "wdmd logs the dead armed client\n{ctx}"
    );
}
