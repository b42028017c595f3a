//! Formatting and reading lease areas through the daemon, async add with INQ_WAIT,
//! RESTRICT, RENEWAL, LOG_DUMP and SHUTDOWN — with python3-sanlock, the sanlock CLI and
//! lockd's own client library.

mod common;

use std::time::Duration;

use client_lib::proto::*;
use client_lib::Client;
use common::*;

#[test]
fn write_and_read_areas_through_the_daemon() {
    require_tool("sanlock", "sanlock");
    require_python_sanlock();
    let s = Scratch::new("admin");
    let disk = s.file("disk", 8);
    let d = LockdDaemon::start(&s, "hostA", &[]);
    let out = d.python(&format!(
        "import sanlock\nD=b'{}'\n\
sanlock.write_lockspace(b'fmt', D, 0, iotimeout=3)\n\
print(sanlock.read_lockspace(D, 0))\n\
sanlock.write_resource(b'fmt', b'res', [(D, 1048576)])\n\
print(sanlock.read_resource(D, 1048576))\n\
sanlock.add_lockspace(b'fmt', 4, D, 0, iotimeout=1, wait=False)\n\
print('inq-now', sanlock.inq_lockspace(b'fmt', 4, D, 0))\n\
try:\n    sanlock.add_lockspace(b'fmt', 4, D, 0, iotimeout=1)\nexcept sanlock.SanlockException as e:\n    print('again', e.errno)\n\
print('inq-wait', sanlock.inq_lockspace(b'fmt', 4, D, 0, wait=True))\n\
print([l['flags'] for l in sanlock.get_lockspaces()])\n",
        disk.display()
    ));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "{'lockspace': b'fmt', 'iotimeout': 3}", "{out}");
    assert_eq!(
        lines[1], "{'lockspace': b'fmt', 'resource': b'res', 'version': 0}",
        "{out}"
    );
    assert_eq!(lines[2], "inq-now None", "{out}");
    assert_eq!(
        lines[3], "again 115",
        "a second add while adding: -EINPROGRESS; {out}"
    );
    assert_eq!(lines[4], "inq-wait True", "{out}");
    assert_eq!(lines[5], "[0]", "{out}");
    // The real sanlock reads what lockd wrote.
    let rl = run(std::process::Command::new("sanlock")
        .args(["direct", "read_leader", "-r"])
        .arg(format!("fmt:res:{}:1048576", disk.display())));
    let text = stdout(&rl);
    assert!(
        text.contains("magic 0x6152010") && text.contains("resource_name res"),
        "{text}"
    );
    // RENEWAL history and LOG_DUMP through the CLI.
    assert!(wait_for(10, || stdout(
        &d.sanlock_client(&["renewal", "-s", "fmt"])
    )
    .contains("timestamp=")));
    let dump = stdout(&d.sanlock_client(&["log_dump"]));
    assert!(dump.contains("lockspace joined"), "{dump}");
    // ALIGN: 1 MiB for a 512-byte-sector file.
    let mut c = Client::connect(&d.run_dir).unwrap();
    let disk_field = client_lib::DiskLocation::new(&disk.display().to_string(), 0).unwrap();
    let mut p = Vec::new();
    disk_field.encode_into(&mut p);
    let (h, _) = c.call(SM_CMD_ALIGN, 0, 0, 0, &p).unwrap();
    assert_eq!(h.result(), 1 << 20);
}

#[test]
fn restrict_all_silences_the_registered_fd_only() {
    let s = Scratch::new("restrict");
    let d = LockdDaemon::start(&s, "hostA", &[]);
    let mut reg = Client::connect(&d.run_dir).unwrap();
    reg.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    reg.register().unwrap();
    let (h, _) = reg
        .call(
            SM_CMD_RESTRICT,
            SANLK_RESTRICT_ALL | SANLK_RESTRICT_SIGKILL,
            0,
            u32::MAX,
            &[],
        )
        .unwrap();
    assert_eq!(h.result(), 0);
    // Later messages on that fd are ignored: no reply.
    reg.send(SM_CMD_INQUIRE, 0, 0, u32::MAX, &[]).unwrap();
    assert!(
        reg.recv_header().is_err(),
        "restricted fd must get no reply"
    );
    // By-pid commands from another connection still work (libvirt's pattern).
    let pid = std::process::id() as i32;
    let mut other = Client::connect(&d.run_dir).unwrap();
    let (rv, count, state) = other.inquire(pid).unwrap();
    assert_eq!((rv, count, state.as_str()), (0, 0, ""));
    // STATUS -D shows restricted=3 for it.
    let st = stdout(&d.sanlock_client(&["status", "-D"]));
    assert!(st.contains("restricted=3"), "{st}");
}

#[test]
fn shutdown_wait_and_non_forced_shutdown() {
    require_tool("sanlock", "sanlock");
    let s = Scratch::new("shutdown");
    let disk = s.file("disk", 4);
    init_lockspace("ls1", &disk, 0);
    let mut d = LockdDaemon::start(&s, "hostA", &[]);
    let mut c = Client::connect(&d.run_dir).unwrap();
    let ls = client_lib::Lockspace::new(
        disk_format::Name::new("ls1").unwrap(),
        1,
        &disk.display().to_string(),
        0,
    )
    .unwrap();
    assert_eq!(c.add_lockspace(&ls, 1, 0).unwrap(), 0);
    // Non-forced shutdown with a lockspace: ignored / -EBUSY.
    let mut c2 = Client::connect(&d.run_dir).unwrap();
    assert_eq!(c2.shutdown(false, true).unwrap(), -libc::EBUSY);
    let out = d.sanlock_client(&["shutdown"]);
    assert!(out.status.success());
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        matches!(d.child.try_wait(), Ok(None)),
        "non-forced shutdown must be ignored"
    );
    // Forced SHUTDOWN_WAIT replies 0 once the lockspace is gone, then the daemon exits.
    let mut c3 = Client::connect(&d.run_dir).unwrap();
    c3.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    assert_eq!(c3.shutdown(true, true).unwrap(), 0);
    assert!(
        wait_for(10, || matches!(d.child.try_wait(), Ok(Some(_)))),
        "daemon did not exit"
    );
    let rl = run(std::process::Command::new("sanlock")
        .args(["direct", "read_leader", "-s"])
        .arg(format!("ls1:1:{}:0", disk.display())));
    assert!(
        stdout(&rl).contains("timestamp 0"),
        "delta lease not released: {}",
        stdout(&rl)
    );
    d.stop();
}
