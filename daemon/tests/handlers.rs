//! The daemon's handlers called directly, without a socket or a daemon process: each test
//! builds `Daemon` state in this process and runs the functions the dispatch table calls
//! (format, join, acquire, read back, remove) on in-memory disks
//! (`lockd_diskio::memory`, installed for this whole test binary). Two `Daemon`s on one
//! image are two hosts sharing a disk.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use client_lib::wire::{Lockspace, Resource};
use disk_format::{rv, Name};
use lockd_core::{Effect, Input};
use lockd_daemon::access::Caller;
use lockd_daemon::observability::LogRing;
use lockd_daemon::space::SpaceError;
use lockd_daemon::state::Daemon;
use lockd_daemon::sync::lock;
use lockd_daemon::{admin, lockspace, paxos, Config, DaemonArgs};
use lockd_diskio::memory::{self, MemoryImage};

/// A daemon's state for host `host_name`, io_timeout 1, no watchdog, no helper.
fn daemon(host_name: &str) -> Arc<Daemon> {
    let args = DaemonArgs {
        foreground: true,
        use_watchdog: Some(0),
        host_name: Some(host_name.into()),
        io_timeout: Some(1),
        run_dir: Some(PathBuf::from(format!(
            "/nonexistent/lockd-handlers-{host_name}"
        ))),
        config: Some("/dev/null".into()),
        ..Default::default()
    };
    let cfg = Config::resolve(&args, None).expect("config");
    Arc::new(Daemon::new(cfg, None, Arc::new(LogRing::default())).expect("daemon state"))
}

/// An administrator's connection slot in `d`'s core, with no socket: REM_LOCKSPACE is
/// a request of a connection, answered to its slot. Stepped at the daemon's clock, read
/// under the core's lock as the daemon reads it (a step's time never goes back).
fn admin_slot(d: &Daemon) -> u32 {
    let input = Input::Connected {
        fd: -1,
        pid: std::process::id() as i32,
        uid: 0,
        stream: None,
        replacing_own: false,
    };
    match lock(&d.core)
        .step(lockd_daemon::clock::now_s(), input)
        .as_slice()
    {
        [Effect::Accepted { ci }] => *ci,
        other => panic!("no slot for the administrator: {other:?}"),
    }
}

fn image(path: &str, mib: u64) -> Arc<MemoryImage> {
    memory::install()
        .create(Path::new(path), mib << 20, 512)
        .expect("memory image")
}

fn space(path: &str, host_id: u64) -> Lockspace {
    Lockspace::new(Name::new("HS").unwrap(), host_id, path, 0).unwrap()
}

fn resource(path: &str, name: &str, offset: u64) -> Resource {
    Resource::on_disk(
        Name::new("HS").unwrap(),
        Name::new(name).unwrap(),
        path,
        offset,
    )
    .unwrap()
}

/// Formats lockspace HS at 0 and resource `r1` at 1 MiB.
fn format(d: &Daemon, path: &str) {
    admin::write_lockspace(d, &Caller::root(), &space(path, 1), 1).expect("write_lockspace");
    admin::write_resource(d, &Caller::root(), &resource(path, "r1", 1 << 20), 0, false)
        .expect("write_resource");
}

#[test]
fn format_join_acquire_and_remove_without_a_socket() {
    let path = "/lockd-mem/handlers-one";
    let img = image(path, 4);
    let d = daemon("hostA");
    format(&d, path);
    let mut read_back = space(path, 0);
    assert_eq!(
        admin::read_lockspace(&d, &Caller::root(), &mut read_back).map_err(|e| e.code()),
        Ok(1)
    );
    assert_eq!(read_back.name, Name::new("HS").unwrap());

    assert_eq!(
        lockspace::add(&d, &Caller::root(), &space(path, 1), 1, 0),
        Ok(())
    );
    assert_eq!(
        lockspace::add(&d, &Caller::root(), &space(path, 1), 1, 0).map_err(SpaceError::code),
        Err(-libc::EEXIST)
    );
    // GET_HOSTS answers -EAGAIN until the first renewal has read the delta area.
    let deadline = Instant::now() + Duration::from_secs(10);
    let hosts = loop {
        match lockspace::get_hosts(&d, &Name::new("HS").unwrap(), 0) {
            Ok(h) => break h,
            Err(e) => {
                assert_eq!(e.code(), -libc::EAGAIN, "{e}");
                assert!(Instant::now() < deadline, "no delta area read in 10 s");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    };
    assert!(hosts.iter().any(|h| h.host_id == 1), "{hosts:?}");

    let sp = lockspace::joined(&d, &Name::new("HS").unwrap()).unwrap();
    let held = paxos::acquire(&d, &sp, &resource(path, "r1", 1 << 20), false, None, 0)
        .expect("acquire a free lease");
    assert_eq!(held.lver(), 1);
    let (head, owners) =
        admin::read_resource_owners(&d, &Caller::root(), &resource(path, "r1", 1 << 20))
            .expect("read_resource_owners");
    assert_eq!(head.lver, 1);
    assert_eq!(
        owners.iter().map(|h| h.host_id).collect::<Vec<_>>(),
        vec![1]
    );
    // A resource that was never formatted is refused, and nothing is written there.
    let before = img.snapshot(2 << 20, 1 << 20).unwrap();
    assert!(paxos::acquire(&d, &sp, &resource(path, "r2", 2 << 20), false, None, 0).is_err());
    assert_eq!(img.snapshot(2 << 20, 1 << 20).unwrap(), before);

    let ci = admin_slot(&d);
    assert_eq!(lockspace::rem(&d, ci, &space(path, 1), 0), Ok(()));
    assert_eq!(
        lockspace::rem(&d, ci, &space(path, 1), 0),
        Err(SpaceError::NotFound)
    );
}

#[test]
fn a_failing_or_missing_disk_is_an_error_and_changes_nothing() {
    let path = "/lockd-mem/handlers-failing";
    let img = image(path, 2);
    let d = daemon("hostF");
    img.set_failing(true);
    assert_eq!(
        admin::write_lockspace(&d, &Caller::root(), &space(path, 1), 1).map_err(|e| e.code()),
        Err(-libc::EIO)
    );
    img.set_failing(false);
    assert!(img.snapshot(0, 2 << 20).unwrap().iter().all(|&b| b == 0));

    // Joining an unformatted area fails; so does a path with no image behind it.
    // (sanlock's code for a delta lease record without its magic number.)
    assert_eq!(
        lockspace::add(&d, &Caller::root(), &space(path, 1), 1, 0),
        Err(SpaceError::Failed(rv::SANLK_LEADER_MAGIC))
    );
    assert!(img.snapshot(0, 2 << 20).unwrap().iter().all(|&b| b == 0));
    // (WRITE_LOCKSPACE answers -ENODEV for a disk it cannot open, as sanlock.)
    let e =
        admin::write_lockspace(&d, &Caller::root(), &space("/lockd-mem/none", 1), 1).unwrap_err();
    assert_eq!(e.code(), -libc::ENODEV, "{e}");
    assert!(matches!(e, admin::AdminError::LockspaceDisk(_)), "{e:?}");
    let e = admin::write_resource(
        &d,
        &Caller::root(),
        &resource("/lockd-mem/none", "r1", 0),
        0,
        false,
    )
    .unwrap_err();
    assert_eq!(e.code(), -libc::ENOENT, "{e}");
    assert!(matches!(e, admin::AdminError::Open(_)), "{e:?}");
}

#[test]
fn two_hosts_share_one_image() {
    let path = "/lockd-mem/handlers-two";
    image(path, 4);
    let (a, b) = (daemon("hostA"), daemon("hostB"));
    format(&a, path);
    assert_eq!(
        lockspace::add(&a, &Caller::root(), &space(path, 1), 1, 0),
        Ok(())
    );
    assert_eq!(
        lockspace::add(&b, &Caller::root(), &space(path, 2), 1, 0),
        Ok(())
    );
    let ls = Name::new("HS").unwrap();
    let (sa, sb) = (
        lockspace::joined(&a, &ls).unwrap(),
        lockspace::joined(&b, &ls).unwrap(),
    );
    let r1 = resource(path, "r1", 1 << 20);
    let held = paxos::acquire(&a, &sa, &r1, false, None, 0).expect("host A acquires");
    assert_eq!(held.lver(), 1);
    // Host A is alive: host B is refused at once when it asks not to wait.
    let refused = paxos::acquire(
        &b,
        &sb,
        &r1,
        false,
        None,
        client_lib::proto::SANLK_ACQUIRE_OWNER_NOWAIT,
    )
    .map_err(|e| e.code());
    // As sanlock: -243 once host B has seen host A renew, -247 before it knows.
    assert!(
        matches!(
            refused,
            Err(rv::SANLK_ACQUIRE_IDLIVE) | Err(rv::SANLK_ACQUIRE_OWNED_RETRY)
        ),
        "host B asked for a lease host A holds: {refused:?}"
    );
    // Host A leaves the lockspace (its delta lease is released): the owner is gone, and
    // host B takes the lease with the next lver.
    assert_eq!(
        lockspace::rem(&a, admin_slot(&a), &space(path, 1), 0),
        Ok(())
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    let taken = loop {
        match paxos::acquire(&b, &sb, &r1, false, None, 0) {
            Ok(h) => break h,
            Err(e) => {
                assert!(Instant::now() < deadline, "host B never got r1: {e}");
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    };
    assert_eq!(taken.lver(), 2);
    assert_eq!(
        lockspace::rem(&b, admin_slot(&b), &space(path, 2), 0),
        Ok(())
    );
}
