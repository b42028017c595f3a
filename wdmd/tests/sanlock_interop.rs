//! Interop: Debian's real `sanlock daemon -w 1` (3.8.5, libwdmd client side)
//! arms a lockspace through this wdmd.
//!
//! libwdmd's socket path `/run/wdmd/wdmd.sock` is fixed, so the test runs in a
//! private mount namespace (`unshare -m`) with its own tmpfs on /run and
//! /dev/shm: nothing on the host is touched. Needs root and the sanlock package
//! (installed by scripts/setup.sh, as for the other sanlock interop tests).

use std::process::Command;

use wdmd::client::parse_dump_clients;
use wdmd::emulator::read_state;

const WDMD: &str = env!("CARGO_BIN_EXE_wdmd");
const EMU: &str = env!("CARGO_BIN_EXE_wdmd-emulator");

const SCRIPT: &str = r#"
set -u
D="$1"; WDMD="$2"; EMU="$3"; DEV="$4"
mount -t tmpfs tmpfs /run || exit 90
mount -t tmpfs tmpfs /dev/shm || exit 91
mkdir -p /run/wdmd "$D/sanlock-run"
truncate -s 4M "$D/disk"
sanlock direct init -s ls1:0:$D/disk:0 >/dev/null || exit 92
"$EMU" --socket "$D/emu.sock" --state "$D/emu.state" --timeout 60 >/dev/null 2>"$D/emu.log" &
EMUPID=$!
for i in $(seq 100); do grep -q '^start' "$D/emu.state" 2>/dev/null && break; sleep 0.05; done
# Default run dir /run/wdmd and default marker /dev/shm/wdmd, as in production.
"$WDMD" -D -w "emu:$D/$DEV" >/dev/null 2>"$D/wdmd.log" &
WDPID=$!
for i in $(seq 100); do [ -S /run/wdmd/wdmd.sock ] && break; sleep 0.05; done
export SANLOCK_PRIVILEGED=0 SANLOCK_RUN_DIR="$D/sanlock-run"
sanlock daemon -D -w 1 -U root -G root -e wdmdtest >/dev/null 2>"$D/sanlock.log" &
SLPID=$!
for i in $(seq 100); do [ -S "$D/sanlock-run/sanlock.sock" ] && break; sleep 0.05; done
echo "SANLOCK_PID $SLPID"
sanlock client add_lockspace -s ls1:1:$D/disk:0 -o 1 >"$D/add.out" 2>&1
echo "ADD_RC $?"
sleep 2.5
echo "DUMP_BEGIN"; "$WDMD" --dump; echo "DUMP_END"
echo "NOW $(cut -d' ' -f1 /proc/uptime)"
sanlock client rem_lockspace -s ls1:1:$D/disk:0 >/dev/null 2>&1
echo "REM_RC $?"
sleep 0.5
echo "DUMP2_BEGIN"; "$WDMD" --dump; echo "DUMP2_END"
sanlock client shutdown >/dev/null 2>&1
wait $SLPID
kill -TERM $WDPID
wait $WDPID
echo "WDMD_RC $?"
[ -e /dev/shm/wdmd ] && echo "MARKER_LEFT" || echo "MARKER_GONE"
kill $EMUPID
wait $EMUPID 2>/dev/null
exit 0
"#;

fn section<'a>(out: &'a str, begin: &str, end: &str) -> &'a str {
    let b = out.find(begin).map(|i| i + begin.len()).unwrap_or(0);
    let e = out[b..].find(end).map(|i| b + i).unwrap_or(out.len());
    &out[b..e]
}

fn value<'a>(out: &'a str, key: &str) -> Option<&'a str> {
    out.lines().find_map(|l| l.strip_prefix(key).map(str::trim))
}

struct Run {
    dir: tempfile::TempDir,
    text: String,
    ctx: String,
}

/// Run the script in a private mount namespace; `dev` is the emulator socket
/// name wdmd is given (a missing one simulates a host without a device).
fn run(dev: &str) -> Run {
    let dir = tempfile::Builder::new()
        .prefix("wdmd-sanlock-")
        .tempdir_in("/var/tmp")
        .expect("tempdir");
    let out = Command::new("timeout")
        .args([
            "150",
            "unshare",
            "-m",
            "--propagation",
            "private",
            "sh",
            "-c",
            SCRIPT,
            "sh",
        ])
        .arg(dir.path())
        .arg(WDMD)
        .arg(EMU)
        .arg(dev)
        .output()
        .expect("unshare (util-linux) must be installed");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let logs = |n: &str| std::fs::read_to_string(dir.path().join(n)).unwrap_or_default();
    let ctx = format!(
        "stdout:\n{text}\nstderr:\n{}\nwdmd.log:\n{}\nsanlock.log:\n{}\nadd.out:\n{}",
        String::from_utf8_lossy(&out.stderr),
        logs("wdmd.log"),
        logs("sanlock.log"),
        logs("add.out")
    );
    assert_eq!(out.status.code(), Some(0), "{ctx}");
    Run { dir, text, ctx }
}

#[test]
fn real_sanlock_daemon_arms_a_lockspace_through_this_wdmd() {
    let Run { dir, text, ctx } = run("emu.sock");
    assert_eq!(value(&text, "ADD_RC"), Some("0"), "{ctx}");
    let sanlock_pid: i32 = value(&text, "SANLOCK_PID")
        .and_then(|p| p.parse().ok())
        .expect("sanlock pid");

    // sanlock 3.8 registers "sanlock_<ls>:<host_id>", sets the refcount and
    // arms with expire = renewal + 8 * io_timeout (io_timeout 1 here).
    let dump = section(&text, "DUMP_BEGIN", "DUMP_END");
    let clients = parse_dump_clients(dump);
    let c = clients
        .iter()
        .find(|c| c.name == "sanlock_ls1:1")
        .unwrap_or_else(|| panic!("no sanlock client in dump\n{ctx}"));
    assert_eq!(c.pid, sanlock_pid, "{ctx}");
    assert!(c.refcount && !c.dead, "{ctx}");
    assert!(c.renewal > 0, "{ctx}");
    assert_eq!(c.expire, c.renewal + 8, "{ctx}");
    // STATUS told sanlock fire_timeout 60 (what 3.8 requires); the device was
    // opened on the first arming, since 3.8 sends no OPEN_WATCHDOG.
    assert!(dump.contains("fire_timeout 60"), "{ctx}");

    // rem_lockspace disarms and clears the refcount; the device is then unused
    // and magic-closed; SIGTERM exits cleanly and removes the marker.
    assert_eq!(value(&text, "REM_RC"), Some("0"), "{ctx}");
    let dump2 = section(&text, "DUMP2_BEGIN", "DUMP2_END");
    assert!(
        !parse_dump_clients(dump2)
            .iter()
            .any(|c| c.name == "sanlock_ls1:1"),
        "{ctx}"
    );
    assert_eq!(value(&text, "WDMD_RC"), Some("0"), "{ctx}");
    assert!(text.contains("MARKER_GONE"), "{ctx}");
    let ev = read_state(&dir.path().join("emu.state")).expect("emulator state");
    assert!(ev.iter().any(|e| e.event == "open"), "{ctx}");
    assert!(ev.iter().any(|e| e.event == "magic-close"), "{ctx}");
    assert!(!ev.iter().any(|e| e.event == "fire"), "{ctx}");
}

/// No usable device: wdmd answers STATUS with fire_timeout 0 and the real
/// sanlock refuses the lockspace instead of running without a watchdog.
#[test]
fn real_sanlock_refuses_the_lockspace_when_wdmd_has_no_device() {
    let Run {
        dir: _dir,
        text,
        ctx,
    } = run("missing.sock");
    let rc: i32 = value(&text, "ADD_RC")
        .and_then(|v| v.parse().ok())
        .expect("rc");
    assert_ne!(rc, 0, "add_lockspace must fail\n{ctx}");
    assert!(ctx.contains("cannot open the watchdog"), "{ctx}");
    assert!(ctx.contains("wdmd invalid fire_timeout 0 vs 60"), "{ctx}");
    let dump = section(&text, "DUMP_BEGIN", "DUMP_END");
    assert!(
        !parse_dump_clients(dump).iter().any(|c| c.expire != 0),
        "nothing may be armed\n{ctx}"
    );
    assert_eq!(value(&text, "WDMD_RC"), Some("0"), "{ctx}");
}
