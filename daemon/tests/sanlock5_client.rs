//! libsanlock 5.1.1's new calls against lockd and against a real sanlock 5.1.1 daemon.
//!
//! `tests/c/probe51.c` is built in the sid chroot against libsanlock-dev 5.1.1 and calls
//! `sanlock_read_lockspace_host`, `sanlock_get_hosts(SANLK_GET_HOST_LOCAL)`,
//! `sanlock_acquire2`, `sanlock_set_host(SANLK_SET_HOST_DEAD_EXT)`,
//! `sanlock_init_lockspace_host` and `sanlock_write_lockspace(SANLK_LSF_NO_TIMEOUT)`,
//! printing one line per call. sanlock 5.1.1 (host 1,
//! "host5") and lockd (host 2, "hostL") share one lockspace that 5.1.1 formatted; each
//! call goes to both daemons and the lines are compared. Where lockd differs on purpose
//! (set_host and init_lockspace_host of a host that may be alive; NO_TIMEOUT
//! lockspaces), the test says so. Last, the 5.1.1 host crashes holding r1: `set_host DEAD_EXT` sent to lockd frees
//! r1 for lockd at once, instead of after
//! host_dead_seconds (`sanlock_set_host`, the command `lockd set-host --dead` sends).

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use common::sid::*;
use common::*;

const RES_OFF: u64 = 1 << 20;

struct Probe {
    bin: std::path::PathBuf,
    dir: std::path::PathBuf,
}

impl Probe {
    /// Builds probe51 in the chroot (gcc, libsanlock-dev 5.1.1).
    fn build(s: &Scratch) -> Probe {
        let dir = s.dir.join("probe");
        std::fs::create_dir_all(&dir).expect("probe dir");
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/probe51.c");
        std::fs::copy(&src, dir.join("probe51.c")).expect("copy probe51.c");
        let bin = dir.join("probe51");
        let o = run(&mut in_chroot(
            &[&dir],
            &dir,
            &[
                "gcc",
                "-Wall",
                "-Werror",
                "-O1",
                "-o",
                bin.to_str().unwrap(),
                dir.join("probe51.c").to_str().unwrap(),
                "-lsanlock",
            ],
        ));
        assert!(o.status.success(), "building probe51: {}", text(&o));
        Probe { bin, dir }
    }

    fn command(&self, run_dir: &Path, args: &[&str]) -> Command {
        let mut all = vec![self.bin.to_str().unwrap()];
        all.extend_from_slice(args);
        in_chroot(&[&self.dir, run_dir], run_dir, &all)
    }

    /// One call through `run_dir`'s daemon; its output line.
    fn call(&self, run_dir: &Path, args: &[&str]) -> String {
        let o = run(&mut self.command(run_dir, args));
        assert!(o.status.success(), "probe51 {args:?}: {}", text(&o));
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    }
}

/// `key=value` of a probe line.
fn field<'a>(line: &'a str, key: &str) -> &'a str {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
        .unwrap_or_else(|| panic!("no {key} in {line:?}"))
}

/// The leader timestamp of r1 as sanlock 5.1.1's `direct read_leader` prints it.
fn leader_timestamp(sl: &Sanlock5, dev: &str) -> String {
    let t = text(&sl.cmd(
        Path::new(dev),
        &[
            "sanlock",
            "direct",
            "read_leader",
            "-r",
            &format!("ls:r1:{dev}:{RES_OFF}"),
        ],
    ));
    t.lines()
        .find_map(|l| l.strip_prefix("timestamp "))
        .unwrap_or_else(|| panic!("no timestamp in {t}"))
        .trim()
        .to_string()
}

#[test]
fn libsanlock_511_calls_against_lockd_and_sanlock_511() {
    require_python_sanlock();
    ensure_chroot(&["libsanlock-dev", "gcc", "libc6-dev"]);
    let s = Scratch::new("client5");
    let probe = Probe::build(&s);
    let file = s.file("backing", 8);
    let lo = Loop::attach(&file);
    let dev = lo.dev.display().to_string();
    let mut sl = Sanlock5::start(&s, "host5");
    for args in [
        vec![
            "sanlock",
            "direct",
            "init",
            "-s",
            &*format!("ls:0:{dev}:0"),
            "-o",
            "1",
        ],
        vec![
            "sanlock",
            "direct",
            "init",
            "-r",
            &*format!("ls:r1:{dev}:{RES_OFF}"),
        ],
    ] {
        let o = sl.cmd(&lo.dev, &args);
        assert!(o.status.success(), "{args:?}: {}", text(&o));
    }
    let lk = LockdDaemon::start(&s, "hostL", &[]);
    join_both(&sl.run_dir, &lk, &dev);
    let (s5, l) = (sl.run_dir.clone(), lk.run_dir.clone());
    assert!(
        wait_for(30, || {
            probe
                .call(&l, &["get_hosts", "ls", "0", "0"])
                .contains("[id=1 gen=1 state=3]")
                && probe
                    .call(&s5, &["get_hosts", "ls", "0", "0"])
                    .contains("[id=2 gen=1 state=3]")
        }),
        "the two hosts never saw each other LIVE"
    );

    // read_lockspace_host: the same answer (an unused host_id; then host 2's record,
    // which both read from disk).
    for host in ["9", "2"] {
        let a = probe.call(&s5, &["read_ls_host", "ls", host, &dev, "0"]);
        let b = probe.call(&l, &["read_ls_host", "ls", host, &dev, "0"]);
        if host == "9" {
            assert_eq!(a, b, "read_lockspace_host of an unused host_id");
            assert!(
                a.starts_with("read_ls_host rv=0 ls_flags=0x110 io_timeout=1 host_id=0"),
                "{a}"
            );
        } else {
            // Host 2 (lockd) renews between the two reads: all but the timestamp agree.
            for k in [
                "rv",
                "ls_flags",
                "io_timeout",
                "host_id",
                "gen",
                "host_io_timeout",
                "host_flags",
            ] {
                assert_eq!(field(&a, k), field(&b, k), "{k}: sanlock {a} / lockd {b}");
            }
        }
    }

    // get_hosts(SANLK_GET_HOST_LOCAL): each daemon names only itself.
    assert_eq!(
        probe.call(&s5, &["get_hosts", "ls", "0", "1"]),
        "get_hosts rv=0 count=1 [id=1 gen=1 state=3]"
    );
    assert_eq!(
        probe.call(&l, &["get_hosts", "ls", "0", "1"]),
        "get_hosts rv=0 count=1 [id=2 gen=1 state=3]"
    );

    // acquire2 while the other host holds r1: -243 and the owner, from both daemons.
    let off = RES_OFF.to_string();
    let hold = |run_dir: &Path, secs: &str| {
        let mut c = probe.command(run_dir, &["acquire2", "ls", "r1", &dev, &off, "0"]);
        let mut child = c
            .env("PROBE_HOLD_S", secs)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("holder");
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().expect("stdout")),
            &mut line,
        )
        .expect("holder line");
        assert!(line.starts_with("acquire2 rv=0 "), "holder: {line}");
        child
    };
    let acq2 = |run_dir: &Path| probe.call(run_dir, &["acquire2", "ls", "r1", &dev, &off, "0"]);
    // lockd's client holds r1 for 8 s; sanlock's client asks meanwhile.
    let mut lholder = hold(&l, "8");
    let ts = leader_timestamp(&sl, &dev);
    assert_eq!(
        acq2(&s5),
        format!("acquire2 rv=-243 owner_id=2 owner_gen=1 owner_ts={ts} owner_flags=0x3 owner_name=hostL")
    );
    let _ = lholder.wait();
    assert!(
        wait_for(20, || acq2(&s5).starts_with("acquire2 rv=0 ")),
        "r1 not free after lockd's holder left"
    );
    // sanlock's client holds r1 (until its daemon goes away); lockd's client asks.
    let mut sholder = hold(&s5, "120");
    let ts = leader_timestamp(&sl, &dev);
    assert_eq!(
        acq2(&l),
        format!("acquire2 rv=-243 owner_id=1 owner_gen=1 owner_ts={ts} owner_flags=0x3 owner_name=host5")
    );

    // init_lockspace_host of an unused host_id (generation 3, free, NO_CAW, io_timeout
    // 1): sanlock 5.1.1 writes host 7's record; lockd then writes the same arguments over
    // it, and the sector is byte-identical.
    let sector_of = |host: u64| {
        use std::io::{Read, Seek, SeekFrom};
        let mut f = std::fs::File::open(&lo.dev).expect("dev");
        f.seek(SeekFrom::Start((host - 1) * 512)).expect("seek");
        let mut b = vec![0u8; 512];
        f.read_exact(&mut b).expect("read");
        b
    };
    let init7 = ["init_ls_host", "ls", "7", &dev, "0", "3", "0", "2", "1"];
    assert_eq!(probe.call(&s5, &init7), "init_ls_host rv=0");
    let by_sanlock = sector_of(7);
    assert_eq!(&by_sanlock[4..8], &[0, 0, 5, 0], "version 5.0");
    // (lockd's daemon is in the lockspace: it waits until its monitor has read the
    // record sanlock wrote, then sees host 7 FREE.)
    assert!(
        wait_for(10, || probe.call(&l, &init7) == "init_ls_host rv=0"),
        "lockd init_lockspace_host of a free host"
    );
    assert_eq!(
        sector_of(7),
        by_sanlock,
        "lockd wrote what sanlock 5.1.1 wrote"
    );
    // lockd refuses a host that may be alive (sanlock 5.1.1 would rewrite it): the live
    // 5.1.1 host 1, and lockd's own host 2; nothing written.
    let before = (sector_of(1), sector_of(2));
    for host in ["1", "2"] {
        assert_eq!(
            probe.call(
                &l,
                &["init_ls_host", "ls", host, &dev, "0", "9", "0", "2", "1"]
            ),
            "init_ls_host rv=-16",
            "host {host}"
        );
    }
    assert_eq!(sector_of(2), before.1);
    assert_eq!(
        sector_of(1)[32..48],
        before.0[32..48],
        "owner and generation of host 1"
    );

    // write_lockspace with SANLK_LSF_NO_TIMEOUT: sanlock 5.1.1 formats a NO_TIMEOUT
    // lockspace (leader flag 0x2); lockd refuses (-EOPNOTSUPP) and writes nothing.
    let flags_at = |off: u64| {
        use std::io::{Read, Seek, SeekFrom};
        let mut f = std::fs::File::open(&lo.dev).expect("dev");
        f.seek(SeekFrom::Start(off)).expect("seek");
        let mut b = [0u8; 512];
        f.read_exact(&mut b).expect("read");
        b
    };
    assert_eq!(
        probe.call(
            &s5,
            &[
                "write_ls",
                "nt",
                &dev,
                &(5u64 << 20).to_string(),
                "0",
                "0x4"
            ]
        ),
        "write_ls rv=0"
    );
    assert_eq!(flags_at(5 << 20)[8] & 0x2, 0x2, "5.1.1 wrote NO_TIMEOUT");
    assert_eq!(
        probe.call(
            &l,
            &[
                "write_ls",
                "nt",
                &dev,
                &(4u64 << 20).to_string(),
                "0",
                "0x4"
            ]
        ),
        "write_ls rv=-95"
    );
    assert!(
        flags_at(4 << 20).iter().all(|&b| b == 0),
        "lockd wrote nothing"
    );

    // set_host DEAD_EXT on a host still renewing: lockd refuses (-EBUSY); sanlock 5.1.1
    // would mark it (not tried: it would fence lockd's live host).
    assert_eq!(
        probe.call(&l, &["set_host", "ls", &dev, "0", "1", "1"]),
        "set_host rv=-16"
    );

    // The 5.1.1 host crashes holding r1. lockd sees it FAIL after 8·io_timeout; an
    // external fencer then declares it dead through libsanlock 5.1.1's sanlock_set_host
    // (the command `lockd set-host --dead` sends), and lockd takes r1 at once
    // (host_dead would be 8 + 60 s after the last renewal).
    let killed = Instant::now();
    sl.kill9();
    let _ = sholder.wait();
    assert!(
        wait_for(30, || probe
            .call(&l, &["set_host", "ls", &dev, "0", "1", "1"])
            == "set_host rv=0"),
        "set_host DEAD_EXT never accepted after the crash"
    );
    let marked = killed.elapsed().as_secs_f64();
    // Host 1's record and lockd's own (host 2).
    let mut rec = [0u8; 1024];
    {
        use std::io::{Read, Seek, SeekFrom};
        let mut f = std::fs::File::open(&lo.dev).expect("dev");
        f.seek(SeekFrom::Start(0)).expect("seek");
        f.read_exact(&mut rec).expect("read");
    }
    let flags = u32::from_le_bytes(rec[8..12].try_into().unwrap());
    assert_eq!(
        flags & 0x4,
        0x4,
        "DEAD_EXT set in host 1's record: 0x{flags:x}"
    );
    // The setter stamp, as sanlock 5.1.1 writes it: the setter's generation (u16) at 160,
    // its host_id (u16) at 162.
    let lockd_gen = u64::from_le_bytes(rec[512 + 40..512 + 48].try_into().unwrap());
    assert_eq!(
        u64::from_le_bytes(rec[512 + 32..512 + 40].try_into().unwrap()),
        2,
        "lockd is host 2"
    );
    assert_eq!(
        &rec[160..168],
        &[lockd_gen as u8, (lockd_gen >> 8) as u8, 2, 0, 0, 0, 0, 0],
        "setter stamp in host 1's DEAD_EXT record"
    );
    // lockd reports the marked host DEAD with SANLK_HOST_DEAD_EXT (0x10), as 5.1.1 does.
    assert!(
        wait_for(10, || probe
            .call(&l, &["get_hosts", "ls", "1", "0"])
            .contains("[id=1 gen=1 state=5 flags=0x15]")),
        "get_hosts after DEAD_EXT: {}",
        probe.call(&l, &["get_hosts", "ls", "1", "0"])
    );
    let got = acq2(&l);
    let taken = killed.elapsed().as_secs_f64();
    assert!(got.starts_with("acquire2 rv=0 "), "{got}");
    assert!(
        taken < 30.0,
        "r1 taken {taken:.1} s after the crash (marked at {marked:.1} s)"
    );
    eprintln!("crash -> set_host DEAD_EXT accepted {marked:.1} s -> r1 taken {taken:.1} s");
    drop(lk);
    drop(sl);
    drop(lo);
}
