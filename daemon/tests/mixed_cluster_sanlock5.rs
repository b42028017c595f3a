//! A real sanlock 5.1.1 daemon (Debian unstable's binary, run in a debootstrapped sid
//! chroot by `scripts/debian-chroot.sh`) and lockd on this host share one lockspace that
//! sanlock 5.1.1 formatted (delta lease 5.0, paxos lease 7.0) on a loop device: both join,
//! each sees the other LIVE, a resource lease passes between them with the busy code
//! both ways, and lockd's records stay in version 5.0/7.0; when sanlock 5.1.1 marks
//! lockd's host DEAD_EXT, lockd stops its holder and sanlock takes the lease. A lockspace that 5.1.1 made
//! NO_TIMEOUT is refused by lockd with nothing written.
//!
//! Needs root, loop devices, debootstrap and network on first use (the chroot is cached
//! under /var/tmp/lockd-chroots/sid); fails loudly naming what is missing.
//! `LOCKD_CHROOT_SCRIPT` may name another copy of debian-chroot.sh.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};

use common::sid::*;
use common::*;

const RES_OFF: u64 = 1 << 20;

fn acquire_script(dev: &str) -> String {
    format!(
        "import sanlock\nfd = sanlock.register()\ntry:\n    \
         sanlock.acquire(b'ls', b'r1', [(b'{dev}', {RES_OFF})], slkfd=fd)\n    print('ok')\n    \
         sanlock.release(b'ls', b'r1', [(b'{dev}', {RES_OFF})], slkfd=fd)\n\
         except sanlock.SanlockException as e:\n    print('err', e.errno)\n"
    )
}

fn delta_version(dev: &Path, host_id: u64) -> u32 {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(dev).expect("open dev");
    f.seek(SeekFrom::Start((host_id - 1) * 512 + 4))
        .expect("seek");
    let mut b = [0u8; 4];
    f.read_exact(&mut b).expect("read");
    u32::from_le_bytes(b)
}

#[test]
fn sanlock_511_and_lockd_share_a_511_formatted_lockspace() {
    require_python_sanlock();
    ensure_chroot(&[]);
    let s = Scratch::new("mixed5");
    let file = s.file("backing", 8);
    let lo = Loop::attach(&file);
    let dev = lo.dev.display().to_string();
    let sl = Sanlock5::start(&s, "host5");
    // sanlock 5.1.1 formats: delta 5.0, paxos 7.0.
    sl.format_ls_r1(&dev, RES_OFF);
    assert_eq!(delta_version(&lo.dev, 1), 0x0005_0000);

    let lk = LockdDaemon::start(&s, "hostL", &[]);
    // Both join, in parallel (sanlock host 1 via its CLI, lockd host 2 via python3-sanlock).
    join_both(&sl.run_dir, &lk, &dev);
    assert_eq!(
        delta_version(&lo.dev, 2),
        0x0005_0000,
        "lockd keeps version 5.0"
    );

    let gets = |h: &str| text(&sl.cmd(&lo.dev, &["sanlock", "client", "gets", "-h", h]));
    assert!(
        wait_for(30, || gets("1")
            .lines()
            .any(|l| l.starts_with("h 2 ") && l.contains("LIVE"))),
        "sanlock 5.1.1 never saw lockd LIVE: {}",
        gets("1")
    );
    assert!(
        wait_for(30, || {
            lk
            .python("import sanlock\nprint([(h['host_id'], h['flags']) for h in sanlock.get_hosts(b'ls')])")
            .contains("(1, 3)")
        }),
        "lockd never saw sanlock 5.1.1 LIVE"
    );

    // sanlock 5.1.1's client holds r1 for 12 s: lockd's client gets IDLIVE (-243).
    let mut holder = in_chroot(
        &[&sl.run_dir],
        &sl.run_dir,
        &[
            "sanlock",
            "client",
            "command",
            "-r",
            &format!("ls:r1:{dev}:{RES_OFF}"),
            "-c",
            "/bin/sleep",
            "12",
        ],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .expect("5.1.1 holder");
    let owned_by_5 = || {
        text(&sl.cmd(
            &lo.dev,
            &[
                "sanlock",
                "direct",
                "read_leader",
                "-r",
                &format!("ls:r1:{dev}:{RES_OFF}"),
            ],
        ))
    };
    assert!(
        wait_for(10, || owned_by_5().contains("owner_id 1")),
        "5.1.1 holder never got r1: {}",
        owned_by_5()
    );
    assert_eq!(lk.python(&acquire_script(&dev)).trim(), "err -243");
    // The holder exits; sanlock releases; lockd's client takes r1.
    let _ = holder.wait();
    assert!(
        wait_for(20, || lk.python(&acquire_script(&dev)).trim() == "ok"),
        "lockd could not take r1 after sanlock 5.1.1 released it"
    );
    // lockd's client holds r1: sanlock 5.1.1's client is refused with -243.
    let mut lholder = lk.python_child(&format!(
        "import sanlock, time\nfd = sanlock.register()\n\
         sanlock.acquire(b'ls', b'r1', [(b'{dev}', {RES_OFF})], slkfd=fd)\nprint('held')\ntime.sleep(600)\n"
    ));
    assert_eq!(lholder.line(), "held");
    let o = sl.cmd(
        &lo.dev,
        &[
            "sanlock",
            "client",
            "command",
            "-r",
            &format!("ls:r1:{dev}:{RES_OFF}"),
            "-c",
            "/bin/true",
        ],
    );
    let t5 = text(&o);
    assert!(
        !o.status.success() && t5.contains("-243"),
        "sanlock 5.1.1 acquire while lockd holds: {t5}"
    );
    let lead = owned_by_5();
    assert!(lead.contains("owner_id 2"), "{lead}");
    // The paxos leader lockd wrote is still version 7.0.
    assert!(
        lead.contains("version 0x70000\n"),
        "paxos version after lockd's acquire: {lead}"
    );
    lholder.kill9();
    assert!(
        wait_for(20, || {
            let o = sl.cmd(
                &lo.dev,
                &[
                    "sanlock",
                    "client",
                    "command",
                    "-r",
                    &format!("ls:r1:{dev}:{RES_OFF}"),
                    "-c",
                    "/bin/true",
                ],
            );
            o.status.success()
        }),
        "sanlock 5.1.1 could not take r1 after lockd's holder died"
    );

    // Both versions still 5.0 after a round of leases.
    assert_eq!(delta_version(&lo.dev, 1), 0x0005_0000);
    assert_eq!(delta_version(&lo.dev, 2), 0x0005_0000);

    // sanlock 5.1.1 fences lockd's host: `set_host -F DEAD_EXT` on host 2 (lockd, live,
    // holding r1). lockd's next renewal sees the mark (SANLK_RENEW_DEAD_EXT, -263), fails
    // the lockspace without overwriting the mark and kills r1's holder; sanlock 5.1.1
    // takes r1 at once.
    let mut lholder = lk.python_child(&format!(
        "import sanlock, time\nfd = sanlock.register()\n\
         sanlock.acquire(b'ls', b'r1', [(b'{dev}', {RES_OFF})], slkfd=fd)\nprint('held')\ntime.sleep(600)\n"
    ));
    assert_eq!(lholder.line(), "held");
    let rec2 = text(&sl.cmd(
        &lo.dev,
        &[
            "sanlock",
            "direct",
            "read_leader",
            "-s",
            &format!("ls:2:{dev}:0"),
        ],
    ));
    let gen2 = rec2
        .lines()
        .find_map(|l| l.strip_prefix("owner_generation "))
        .unwrap_or_else(|| panic!("{rec2}"))
        .trim()
        .to_string();
    let o = sl.cmd(
        &lo.dev,
        &[
            "sanlock",
            "client",
            "set_host",
            "-s",
            &format!("ls:1:{dev}:0"),
            "-i",
            "2",
            "-g",
            &gen2,
            "-F",
            "DEAD_EXT",
        ],
    );
    assert!(o.status.success(), "5.1.1 set_host DEAD_EXT: {}", text(&o));
    assert!(
        wait_for(20, || matches!(lholder.child.try_wait(), Ok(Some(_)))),
        "lockd did not stop r1's holder after its host was marked DEAD_EXT"
    );
    assert!(
        lk.log_text().contains("-263") || lk.log_text().contains("DEAD_EXT"),
        "lockd's log does not name the DEAD_EXT failure"
    );
    let o = sl.cmd(
        &lo.dev,
        &[
            "sanlock",
            "client",
            "command",
            "-r",
            &format!("ls:r1:{dev}:{RES_OFF}"),
            "-c",
            "/bin/true",
        ],
    );
    assert!(
        o.status.success(),
        "5.1.1 takes r1 of a DEAD_EXT host: {}",
        text(&o)
    );
    let mut raw = [0u8; 12];
    {
        use std::io::{Read, Seek, SeekFrom};
        let mut f = std::fs::File::open(&lo.dev).expect("dev");
        f.seek(SeekFrom::Start(512)).expect("seek");
        f.read_exact(&mut raw).expect("read");
    }
    assert_eq!(
        u32::from_le_bytes(raw[8..12].try_into().unwrap()) & 0x4,
        0x4,
        "lockd left the DEAD_EXT mark in place"
    );

    // lockd's lockspace has failed; its removal may answer an error.
    lk.python(&format!(
        "import sanlock\ntry:\n    sanlock.rem_lockspace(b'ls', 2, b'{dev}', 0)\nexcept sanlock.SanlockException:\n    pass"
    ));
    sl.rem_lockspace(&dev, 1);
    assert_eq!(delta_version(&lo.dev, 1), 0x0005_0000);
    drop(lk);
    drop(sl);
    drop(lo);
}

#[test]
fn no_timeout_lockspace_from_511_is_refused_and_left_untouched() {
    require_python_sanlock();
    ensure_chroot(&[]);
    let s = Scratch::new("nt5");
    let file = s.file("backing", 2);
    let lo = Loop::attach(&file);
    let dev = lo.dev.display().to_string();
    let run_dir = s.dir.join("run-none");
    std::fs::create_dir_all(&run_dir).expect("dir");
    let o = run(&mut in_chroot(
        &[&run_dir],
        &run_dir,
        &[
            "sanlock",
            "direct",
            "init",
            "-s",
            &format!("nt:0:{dev}:0"),
            "-o",
            "1",
            "-N",
            "1",
        ],
    ));
    assert!(o.status.success(), "5.1.1 init -N 1: {}", text(&o));
    let before = std::fs::read(&file).expect("read backing");
    let lk = LockdDaemon::start(&s, "hostL", &[]);
    let out = lk.python(&format!(
        "import sanlock\ntry:\n    sanlock.add_lockspace(b'nt', 1, b'{dev}', 0, iotimeout=1)\n    print('joined')\n\
         except sanlock.SanlockException as e:\n    print('err', e.errno)\n"
    ));
    assert_eq!(
        out.trim(),
        "err 95",
        "NO_TIMEOUT refused with -EOPNOTSUPP (python3-sanlock shows errno codes positive)"
    );
    assert_eq!(
        std::fs::read(&file).expect("read"),
        before,
        "nothing written"
    );
    drop(lk);
    drop(lo);
}

/// Rewrites the paxos leader at `off` on `dev` through `f` (checksum redone): another
/// host's write that our holder did not make.
fn edit_leader(dev: &Path, off: u64, f: impl Fn(&mut disk_format::LeaderRecord)) {
    use std::io::{Read, Seek, SeekFrom, Write};
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(dev)
        .expect("open dev");
    let mut sector = [0u8; 512];
    file.seek(SeekFrom::Start(off)).expect("seek");
    file.read_exact(&mut sector).expect("read");
    let mut l = disk_format::LeaderRecord::decode(&sector).expect("leader");
    f(&mut l);
    l.seal();
    l.encode_into(&mut sector);
    file.seek(SeekFrom::Start(off)).expect("seek");
    file.write_all(&sector).expect("write");
    file.sync_all().expect("sync");
}

/// A release whose leader changed on disk under the holder (lver, then owner generation)
/// is answered with sanlock 5.x's numbers in a 5.x area: -252 and -253, as sanlock 5.1.1
/// answers the same release (3.x areas keep 3.x's -250/-251: lease-core's unit test).
#[test]
fn release_of_a_changed_leader_gets_5x_codes_like_sanlock_511() {
    require_python_sanlock();
    ensure_chroot(&[]);
    let s = Scratch::new("rel5");
    let file = s.file("backing", 4);
    let lo = Loop::attach(&file);
    let dev = lo.dev.display().to_string();
    let sl = Sanlock5::start(&s, "host5");
    for (flag, spec) in [
        ("-s", format!("ls:0:{dev}:0")),
        ("-r", format!("ls:r1:{dev}:{RES_OFF}")),
    ] {
        let o = sl.cmd(
            &lo.dev,
            &["sanlock", "direct", "init", flag, &spec, "-o", "1"],
        );
        assert!(o.status.success(), "5.1.1 init {flag}: {}", text(&o));
    }
    let res = format!("ls:r1:{dev}:{RES_OFF}");
    let mut answers = Vec::new();

    // sanlock 5.1.1, alone as host 1: `client command` holds r1, the leader is changed,
    // `client release -p` answers.
    let o = sl.cmd(
        &lo.dev,
        &[
            "sanlock",
            "client",
            "add_lockspace",
            "-o",
            "1",
            "-s",
            &format!("ls:1:{dev}:0"),
        ],
    );
    assert!(o.status.success(), "5.1.1 add_lockspace: {}", text(&o));
    for field in ["lver", "owner_generation"] {
        let mut holder = in_chroot(
            &[&sl.run_dir],
            &sl.run_dir,
            &[
                "sanlock",
                "client",
                "command",
                "-r",
                &res,
                "-c",
                "/bin/sleep",
                "30",
            ],
        )
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("5.1.1 holder");
        let pid = || {
            text(&sl.cmd(&lo.dev, &["sanlock", "client", "status"]))
                .lines()
                .find(|l| l.starts_with("r ls:r1:"))
                .and_then(|l| l.rsplit(' ').next().map(str::to_string))
        };
        assert!(
            wait_for(10, || pid().is_some()),
            "5.1.1 holder never got r1"
        );
        let pid = pid().unwrap();
        edit_leader(&lo.dev, RES_OFF, |l| match field {
            "lver" => l.lver += 5,
            _ => l.owner_generation += 5,
        });
        let out = text(&sl.cmd(
            &lo.dev,
            &["sanlock", "client", "release", "-r", &res, "-p", &pid],
        ));
        let code = out
            .lines()
            .find_map(|l| l.strip_prefix("release done "))
            .unwrap_or_else(|| panic!("5.1.1 release: {out}"))
            .trim()
            .to_string();
        answers.push(("sanlock 5.1.1", field, code));
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let _ = holder.kill();
        let _ = holder.wait();
        let o = sl.cmd(&lo.dev, &["sanlock", "direct", "init", "-r", &res]);
        assert!(o.status.success(), "5.1.1 re-init -r: {}", text(&o));
    }
    sl.rem_lockspace(&dev, 1);

    // lockd, alone as host 2: the same through python3-sanlock.
    let lk = LockdDaemon::start(&s, "hostL", &[]);
    lk.python(&format!(
        "import sanlock\nsanlock.add_lockspace(b'ls', 2, b'{dev}', 0, iotimeout=1)"
    ));
    for field in ["lver", "owner_generation"] {
        let flag = s.dir.join(format!("edited-{field}"));
        let mut h = lk.python_child(&format!(
            "import sanlock, os, time\nfd = sanlock.register()\n\
             sanlock.acquire(b'ls', b'r1', [(b'{dev}', {RES_OFF})], slkfd=fd)\nprint('held')\n\
             while not os.path.exists('{flag}'):\n    time.sleep(0.05)\n\
             try:\n    sanlock.release(b'ls', b'r1', [(b'{dev}', {RES_OFF})], slkfd=fd)\n    print('ok')\n\
             except sanlock.SanlockException as e:\n    print('err', e.errno)\n",
            flag = flag.display()
        ));
        assert_eq!(h.line(), "held");
        edit_leader(&lo.dev, RES_OFF, |l| match field {
            "lver" => l.lver += 5,
            _ => l.owner_generation += 5,
        });
        std::fs::write(&flag, b"").expect("flag");
        let line = h.line();
        let code = line.strip_prefix("err ").unwrap_or(&line).to_string();
        answers.push(("lockd", field, code));
        h.kill9();
        let o = sl.cmd(&lo.dev, &["sanlock", "direct", "init", "-r", &res]);
        assert!(o.status.success(), "5.1.1 re-init -r: {}", text(&o));
    }
    eprintln!("release answers: {answers:?}");
    assert_eq!(
        answers,
        vec![
            ("sanlock 5.1.1", "lver", "-252".to_string()),
            ("sanlock 5.1.1", "owner_generation", "-253".to_string()),
            ("lockd", "lver", "-252".to_string()),
            ("lockd", "owner_generation", "-253".to_string()),
        ]
    );
    drop(lk);
    drop(sl);
    drop(lo);
}
