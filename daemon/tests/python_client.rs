//! The real Debian python3-sanlock and `sanlock client` CLI against lockd, on a regular
//! file under /var/tmp and on a loop device, with io_timeout 1.

mod common;

use common::*;

const RES_OFF: u64 = 1 << 20;

fn setup(tag: &str) -> (Scratch, std::path::PathBuf) {
    require_tool("sanlock", "sanlock");
    require_python_sanlock();
    let s = Scratch::new(tag);
    let disk = s.file("disk", 8);
    init_lockspace("ls1", &disk, 0);
    init_resource("ls1", "res1", &disk, RES_OFF);
    init_resource("ls1", "res2", &disk, 2 * RES_OFF);
    (s, disk)
}

fn join_script(disk: &std::path::Path) -> String {
    format!(
        "import sanlock\nD=b'{}'\nsanlock.add_lockspace(b'ls1', 1, D, 0, iotimeout=1)\n",
        disk.display()
    )
}

#[test]
fn python_client_full_cycle() {
    let (s, disk) = setup("pycycle");
    let d = LockdDaemon::start(&s, "hostA", &[]);
    let out = d.python(&format!(
        "{}\
print('inq', sanlock.inq_lockspace(b'ls1', 1, D, 0))
print('ls', [l['lockspace'] for l in sanlock.get_lockspaces()])
fd = sanlock.register()
sanlock.acquire(b'ls1', b'res1', [(D, {RES_OFF})], slkfd=fd)
inq = sanlock.inquire(slkfd=fd)
print('inquire', inq[0]['resource'], inq[0]['version'], inq[0]['flags'])
o = sanlock.read_resource_owners(b'ls1', b'res1', [(D, {RES_OFF})])
print('owners', [(x['host_id'], x['generation']) for x in o])
h = sanlock.get_hosts(b'ls1', 1)
print('hosts', [(x['host_id'], x['flags']) for x in h])
sanlock.release(b'ls1', b'res1', [(D, {RES_OFF})], slkfd=fd)
print('after', sanlock.inquire(slkfd=fd))
print('owners2', sanlock.read_resource_owners(b'ls1', b'res1', [(D, {RES_OFF})]))
sanlock.acquire(b'ls1', b'res1', [(D, {RES_OFF})], slkfd=fd, shared=True)
print('sh', sanlock.inquire(slkfd=fd)[0]['flags'])
o = sanlock.read_resource_owners(b'ls1', b'res1', [(D, {RES_OFF})])
print('showners', [x['host_id'] for x in o])
sanlock.release(b'ls1', b'res1', [(D, {RES_OFF})], slkfd=fd)
sanlock.rem_lockspace(b'ls1', 1, D, 0)
print('rem', sanlock.inq_lockspace(b'ls1', 1, D, 0))
",
        join_script(&disk)
    ));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "inq True", "{out}");
    assert_eq!(lines[1], "ls [b'ls1']", "{out}");
    assert_eq!(lines[2], "inquire b'res1' 1 1", "{out}");
    assert_eq!(lines[3], "owners [(1, 1)]", "{out}");
    assert_eq!(lines[4], "hosts [(1, 3)]", "{out}");
    assert_eq!(lines[5], "after []", "{out}");
    assert_eq!(lines[6], "owners2 []", "{out}");
    assert_eq!(lines[7], "sh 4", "{out}");
    assert_eq!(lines[8], "showners [1]", "{out}");
    assert_eq!(lines[9], "rem False", "{out}");
    // The delta lease was released on disk (timestamp 0) by the removal.
    let dump = run(std::process::Command::new("sanlock")
        .args(["direct", "read_leader", "-s"])
        .arg(format!("ls1:1:{}:0", disk.display())));
    assert!(stdout(&dump).contains("timestamp 0"), "{}", stdout(&dump));
}

#[test]
fn cli_status_version_convert_and_client_death() {
    let (s, disk) = setup("cli");
    let d = LockdDaemon::start(&s, "hostA", &[]);
    let v = d.sanlock_client(&["version"]);
    assert!(
        stdout(&v).contains("daemon version 3.8.5 (0x03080500)"),
        "{}",
        stdout(&v)
    );
    d.python(&join_script(&disk));

    // A holder that keeps its registered connection open.
    let mut holder = d.python_child(&format!(
        "import sanlock, os, time\nD=b'{}'\nfd = sanlock.register()\n\
         sanlock.acquire(b'ls1', b'res1', [(D, {RES_OFF})], slkfd=fd, shared=True)\n\
         print(os.getpid())\ntime.sleep(600)\n",
        disk.display()
    ));
    let pid = holder.line();
    let res = format!("ls1:res1:{}:{RES_OFF}", disk.display());

    let inq = d.sanlock_client(&["inquire", "-p", &pid]);
    assert!(
        stdout(&inq).contains(&format!("\"{res}:SH\"")),
        "{}",
        stdout(&inq)
    );
    let cv = d.sanlock_client(&["convert", "-r", &res, "-p", &pid]);
    assert!(stdout(&cv).contains("convert done 0"), "{}", stdout(&cv));
    let inq = d.sanlock_client(&["inquire", "-p", &pid]);
    let text = stdout(&inq);
    assert!(
        text.contains(&format!("\"{res}:")) && !text.contains(":SH\""),
        "{text}"
    );
    // Converting to the mode it already has: -EALREADY (-114).
    let cv = d.sanlock_client(&["convert", "-r", &res, "-p", &pid]);
    assert!(stdout(&cv).contains("convert done -114"), "{}", stdout(&cv));

    // A second local process cannot take the exclusive lease: -EEXIST.
    let out = d.python(&format!(
        "import sanlock\nD=b'{}'\nfd = sanlock.register()\n\
         try:\n    sanlock.acquire(b'ls1', b'res1', [(D, {RES_OFF})], slkfd=fd)\n    print('acquired')\n\
         except sanlock.SanlockException as e:\n    print('errno', e.errno)\n",
        disk.display()
    ));
    assert_eq!(out.trim(), "errno 17", "{out}");

    let st = d.sanlock_client(&["status"]);
    let text = stdout(&st);
    assert!(text.contains("daemon hostA"), "{text}");
    assert!(
        text.contains(&format!("s ls1:1:{}:0", disk.display())),
        "{text}"
    );
    assert!(text.contains(&format!("r {res}:")), "{text}");
    let hs = d.sanlock_client(&["host_status", "-s", "ls1"]);
    assert!(stdout(&hs).contains("1 timestamp"), "{}", stdout(&hs));
    let gets = d.sanlock_client(&["gets", "-h", "1"]);
    assert!(
        stdout(&gets).contains("h 1 gen 1 timestamp"),
        "{}",
        stdout(&gets)
    );
    assert!(stdout(&gets).contains("LIVE"), "{}", stdout(&gets));

    // SIGKILL the holder: its connection closes and the lease is released on disk.
    holder.kill9();
    let owners = || {
        d.python(&format!(
            "import sanlock\nprint(len(sanlock.read_resource_owners(b'ls1', b'res1', [(b'{}', {RES_OFF})])))",
            disk.display()
        ))
    };
    assert!(
        wait_for(10, || owners().trim() == "0"),
        "lease not released after client death"
    );
    let st = d.sanlock_client(&["status"]);
    assert!(
        !stdout(&st).contains(&format!("p {pid}")),
        "{}",
        stdout(&st)
    );
}

#[test]
fn by_pid_commands_and_release_all() {
    let (s, disk) = setup("bypid");
    let d = LockdDaemon::start(&s, "hostA", &[]);
    d.python(&join_script(&disk));
    let mut holder = d.python_child(
        // REGISTER has no reply: the inquire round trip on the same connection (served after
        // it) makes sure the daemon has registered the pid before we print it.
        "import sanlock, os, time\nfd = sanlock.register()\nsanlock.inquire(slkfd=fd)\nprint(os.getpid())\ntime.sleep(600)\n",
    );
    let pid: u32 = holder.line().parse().expect("pid");
    // libvirt style: acquire, inquire, release on fresh connections by pid.
    let out = d.python(&format!(
        "import sanlock\nD=b'{}'\n\
         sanlock.acquire(b'ls1', b'res1', [(D, {RES_OFF})], pid={pid})\n\
         sanlock.acquire(b'ls1', b'res2', [(D, {})], pid={pid})\n\
         print(len(sanlock.inquire(pid={pid})))\n\
         sanlock.release(b'ls1', b'res1', [(D, {RES_OFF})], pid={pid})\n\
         print(len(sanlock.inquire(pid={pid})))\n\
         try:\n    sanlock.inquire(pid=1)\nexcept sanlock.SanlockException as e:\n    print('esrch', e.errno)\n",
        disk.display(),
        2 * RES_OFF
    ));
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        vec!["2", "1", "esrch 3"],
        "{out}"
    );
    // RELEASE with count 0 and no flags is a successful no-op (libvirt relies on it).
    let r = d.sanlock_client(&["release", "-p", &pid.to_string()]);
    assert!(stdout(&r).contains("release done 0"), "{}", stdout(&r));
    let inq = d.sanlock_client(&["inquire", "-p", &pid.to_string()]);
    assert!(stdout(&inq).contains("res_count 1"), "{}", stdout(&inq));
    // RELEASE with REL_ALL (`-a 1`) drops everything.
    let r = d.sanlock_client(&["release", "-p", &pid.to_string(), "-a", "1"]);
    assert!(stdout(&r).contains("release done 0"), "{}", stdout(&r));
    let inq = d.sanlock_client(&["inquire", "-p", &pid.to_string()]);
    assert!(stdout(&inq).contains("res_count 0"), "{}", stdout(&inq));
    holder.kill9();
}

#[test]
fn python_client_on_loop_device() {
    require_tool("sanlock", "sanlock");
    require_python_sanlock();
    let s = Scratch::new("loop");
    let file = s.file("backing", 8);
    let lo = Loop::attach(&file);
    init_lockspace("lsl", &lo.dev, 0);
    init_resource("lsl", "r1", &lo.dev, RES_OFF);
    let d = LockdDaemon::start(&s, "hostA", &[]);
    let out = d.python(&format!(
        "import sanlock\nD=b'{dev}'\n\
         sanlock.add_lockspace(b'lsl', 2, D, 0, iotimeout=1)\n\
         fd = sanlock.register()\n\
         sanlock.acquire(b'lsl', b'r1', [(D, {RES_OFF})], slkfd=fd)\n\
         print(sanlock.read_resource_owners(b'lsl', b'r1', [(D, {RES_OFF})])[0]['host_id'])\n\
         sanlock.release(b'lsl', b'r1', [(D, {RES_OFF})], slkfd=fd)\n\
         sanlock.rem_lockspace(b'lsl', 2, D, 0)\nprint('ok')\n",
        dev = lo.dev.display()
    ));
    assert_eq!(out.lines().collect::<Vec<_>>(), vec!["2", "ok"], "{out}");
    drop(d);
}

#[test]
fn lvb_and_requested_version() {
    let (s, disk) = setup("lvb");
    let d = LockdDaemon::start(&s, "hostA", &[]);
    let out = d.python(&format!(
        "{}\
fd = sanlock.register()
sanlock.acquire(b'ls1', b'res1', [(D, {RES_OFF})], slkfd=fd, lvb=True)
sanlock.set_lvb(b'ls1', b'res1', [(D, {RES_OFF})], b'hello lvb')
print(sanlock.get_lvb(b'ls1', b'res1', [(D, {RES_OFF})], 9))
sanlock.release(b'ls1', b'res1', [(D, {RES_OFF})], slkfd=fd)
sanlock.acquire(b'ls1', b'res1', [(D, {RES_OFF})], slkfd=fd, lvb=True)
print(sanlock.get_lvb(b'ls1', b'res1', [(D, {RES_OFF})], 9))
v = sanlock.inquire(slkfd=fd)[0]['version']
sanlock.release(b'ls1', b'res1', [(D, {RES_OFF})], slkfd=fd)
try:
    sanlock.acquire(b'ls1', b'res1', [(D, {RES_OFF})], slkfd=fd, version=v + 5)
    print('acquired')
except sanlock.SanlockException as e:
    print('errno', e.errno)
sanlock.acquire(b'ls1', b'res1', [(D, {RES_OFF})], slkfd=fd, version=v)
print('version ok', sanlock.inquire(slkfd=fd)[0]['version'] == v + 1)
",
        join_script(&disk)
    ));
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        vec![
            "b'hello lvb'",
            "b'hello lvb'",
            "errno -240",
            "version ok True"
        ],
        "{out}"
    );
}

#[test]
fn local_contention_keeps_mutual_exclusion() {
    // 8 processes race for one exclusive lease 25 times each; a holder proves exclusivity
    // by creating a marker file with O_EXCL while it holds the lease.
    let (s, disk) = setup("contend");
    let d = LockdDaemon::start(&s, "hostA", &[]);
    d.python(&join_script(&disk));
    let marker = s.dir.join("held.marker");
    let worker = [
        "import sanlock, os, sys, errno".to_string(),
        format!("D = b'{}'", disk.display()),
        format!("M = '{}'", marker.display()),
        "fd = sanlock.register()".to_string(),
        "wins = 0".to_string(),
        "for i in range(25):".to_string(),
        "    try:".to_string(),
        format!("        sanlock.acquire(b'ls1', b'res1', [(D, {RES_OFF})], slkfd=fd)"),
        "    except sanlock.SanlockException as e:".to_string(),
        "        if e.errno in (errno.EEXIST, errno.EBUSY, errno.EAGAIN):".to_string(),
        "            continue".to_string(),
        "        raise".to_string(),
        "    m = os.open(M, os.O_CREAT | os.O_EXCL | os.O_WRONLY)".to_string(),
        "    os.close(m)".to_string(),
        "    os.unlink(M)".to_string(),
        format!("    sanlock.release(b'ls1', b'res1', [(D, {RES_OFF})], slkfd=fd)"),
        "    wins += 1".to_string(),
        "print(wins)".to_string(),
    ]
    .join("\n");
    let children: Vec<_> = (0..8)
        .map(|_| {
            std::process::Command::new(PYTHON)
                .args(["-c", &worker])
                .env("SANLOCK_RUN_DIR", &d.run_dir)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("worker")
        })
        .collect();
    let mut total = 0;
    for c in children {
        let out = c.wait_with_output().expect("worker output");
        assert!(
            out.status.success(),
            "worker failed (mutual exclusion broken or unexpected error): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        total += String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse::<u32>()
            .expect("count");
    }
    assert!(total > 0, "nobody ever acquired the lease");
    // Nothing is left held, on disk or in the daemon.
    let owners = d.python(&format!(
        "import sanlock\nprint(len(sanlock.read_resource_owners(b'ls1', b'res1', [(b'{}', {RES_OFF})])))",
        disk.display()
    ));
    assert_eq!(owners.trim(), "0");
    let st = stdout(&d.sanlock_client(&["status"]));
    assert!(!st.contains("\nr "), "{st}");
}
