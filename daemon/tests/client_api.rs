//! lockd's own Rust client (client-lib) against the daemon: the full resource cycle on a
//! registered connection, including killpath, convert and owners, and area formatting.

mod common;

use client_lib::proto::*;
use client_lib::{Client, DiskLocation, Lockspace, Resource, ResourceHead};
use common::*;
use disk_format::Name;

#[test]
fn client_lib_drives_the_daemon() {
    let s = Scratch::new("clientapi");
    let disk = s.file("disk", 4);
    let path = disk.display().to_string();
    let d = LockdDaemon::start(&s, "hostA", &[]);
    let ls_name = Name::new("api").unwrap();
    let ls = Lockspace::new(ls_name, 1, &path, 0).unwrap();
    let res = Resource {
        head: ResourceHead {
            lockspace_name: ls_name,
            name: Name::new("r").unwrap(),
            lver: 0,
            data64: 0,
            data32: 0,
            unused: 0,
            flags: 0,
            num_disks: 1,
        },
        disks: vec![DiskLocation::new(&path, 1 << 20).unwrap()],
    };
    let mut c = Client::connect(&d.run_dir).unwrap();
    assert_eq!(c.write_lockspace(&ls, 1).unwrap(), 0);
    assert_eq!(c.write_resource(&res, 0, false).unwrap(), 0);
    let (read_ls, io) = c.read_lockspace(&ls).unwrap();
    assert_eq!((read_ls.name, io), (ls_name, 1));
    assert_eq!(
        read_ls.flags & 0x3F0,
        0x110,
        "512-byte sectors, 1 MiB align"
    );
    let head = c.read_resource(&res).unwrap();
    assert_eq!((head.name, head.lver), (res.head.name, 0));
    assert_eq!(c.add_lockspace(&ls, 1, 0).unwrap(), 0);
    assert_eq!(c.add_lockspace(&ls, 1, 0).unwrap(), -libc::EEXIST);

    let mut reg = Client::connect(&d.run_dir).unwrap();
    reg.register().unwrap();
    assert_eq!(reg.killpath("/bin/true", "a b", true).unwrap(), 0);
    assert_eq!(
        reg.acquire(
            -1,
            0,
            std::slice::from_ref(&res),
            Some(Name::new("me").unwrap())
        )
        .unwrap(),
        0
    );
    let (rv, count, state) = reg.inquire(-1).unwrap();
    assert_eq!((rv, count), (0, 1));
    assert_eq!(state, format!("api:r:{path}:1048576:1"));
    let mut sh = res.head.clone();
    sh.flags = SANLK_RES_SHARED;
    assert_eq!(reg.convert(-1, 0, &sh).unwrap(), 0);
    let (owners_head, hosts) = c.read_resource_owners(&res).unwrap();
    assert_ne!(owners_head.flags & SANLK_RES_SHARED, 0);
    assert_eq!(hosts.iter().map(|h| h.host_id).collect::<Vec<_>>(), vec![1]);
    assert_eq!(reg.convert(-1, 0, &res.head).unwrap(), 0);
    assert_eq!(
        reg.release(-1, 0, std::slice::from_ref(&res.head)).unwrap(),
        0
    );
    assert_eq!(
        reg.release(-1, 0, std::slice::from_ref(&res.head)).unwrap(),
        -1,
        "a lease not held: -1, as sanlock answers"
    );
    assert_eq!(reg.restrict(SANLK_RESTRICT_SIGTERM).unwrap(), 0);
    // STATUS shows our registered client by its owner name.
    let st = Client::connect(&d.run_dir).unwrap().status(4).unwrap();
    assert!(st
        .iter()
        .any(|r| r.state.kind == SANLK_STATE_CLIENT && r.state.name.to_text() == "me"));
    assert!(st
        .iter()
        .any(|r| r.state.kind == SANLK_STATE_LOCKSPACE && r.text.contains("list=spaces")));
    let hs = Client::connect(&d.run_dir)
        .unwrap()
        .host_status(ls_name)
        .unwrap();
    assert!(hs
        .iter()
        .any(|r| r.state.data32 == 1 && r.text.contains("owner_name=hostA")));
    assert_eq!(c.rem_lockspace(&ls, 0).unwrap(), 0);
    assert_eq!(c.inq_lockspace(&ls, 0).unwrap(), -libc::ENOENT);
}

#[test]
fn persistent_leases_become_orphans() {
    require_tool("sanlock", "sanlock");
    let s = Scratch::new("orphans");
    let disk = s.file("disk", 4);
    let path = disk.display().to_string();
    init_lockspace("orph", &disk, 0);
    init_resource("orph", "p", &disk, 1 << 20);
    let d = LockdDaemon::start(&s, "hostA", &[]);
    let ls_name = Name::new("orph").unwrap();
    let ls = Lockspace::new(ls_name, 1, &path, 0).unwrap();
    let mut c = Client::connect(&d.run_dir).unwrap();
    assert_eq!(c.add_lockspace(&ls, 1, 0).unwrap(), 0);
    let res = Resource {
        head: ResourceHead {
            lockspace_name: ls_name,
            name: Name::new("p").unwrap(),
            lver: 0,
            data64: 0,
            data32: 0,
            unused: 0,
            flags: SANLK_RES_PERSISTENT,
            num_disks: 1,
        },
        disks: vec![DiskLocation::new(&path, 1 << 20).unwrap()],
    };
    let owners = |c: &mut Client| c.read_resource_owners(&res).unwrap().1.len();
    {
        let mut holder = Client::connect(&d.run_dir).unwrap();
        holder.register().unwrap();
        assert_eq!(
            holder
                .acquire(-1, 0, std::slice::from_ref(&res), None)
                .unwrap(),
            0
        );
    } // the holder's connection closes: the lease becomes an orphan, still held on disk
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(owners(&mut c), 1, "an orphan stays held on disk");
    let st = stdout(&d.sanlock_client(&["status"]));
    assert!(st.contains("r orph:p:"), "orphan listed in status: {st}");

    let mut next = Client::connect(&d.run_dir).unwrap();
    next.register().unwrap();
    // An ordinary acquire of an orphan: -EUCLEAN; ORPHAN in the wrong mode: -EUCLEAN.
    assert_eq!(
        next.acquire(-1, 0, std::slice::from_ref(&res), None)
            .unwrap(),
        -libc::EUCLEAN
    );
    let mut sh = res.clone();
    sh.head.flags |= SANLK_RES_SHARED;
    assert_eq!(
        next.acquire(-1, SANLK_ACQUIRE_ORPHAN, std::slice::from_ref(&sh), None)
            .unwrap(),
        -libc::EUCLEAN
    );
    // Adopt it, exit again, then release the orphan by name.
    assert_eq!(
        next.acquire(-1, SANLK_ACQUIRE_ORPHAN, std::slice::from_ref(&res), None)
            .unwrap(),
        0
    );
    let (_, count, _) = next.inquire(-1).unwrap();
    assert_eq!(count, 1);
    drop(next);
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(owners(&mut c), 1);
    let mut rel = Client::connect(&d.run_dir).unwrap();
    rel.register().unwrap();
    let mut p = Vec::new();
    res.head.encode_into(&mut p);
    let (h, _) = rel
        .call(SM_CMD_RELEASE, SANLK_REL_ORPHAN, 1, u32::MAX, &p)
        .unwrap();
    assert_eq!(
        h.result(),
        1,
        "one orphan released (sanlock answers the count)"
    );
    assert_eq!(owners(&mut c), 0, "released orphan is free on disk");
    // ORPHAN_ONLY with no orphan: -ENOENT.
    assert_eq!(
        rel.acquire(
            -1,
            SANLK_ACQUIRE_ORPHAN_ONLY,
            std::slice::from_ref(&res),
            None
        )
        .unwrap(),
        -libc::ENOENT
    );
    // A new orphan does not block removal: it is released with the lockspace.
    {
        let mut holder = Client::connect(&d.run_dir).unwrap();
        holder.register().unwrap();
        assert_eq!(
            holder
                .acquire(-1, 0, std::slice::from_ref(&res), None)
                .unwrap(),
            0
        );
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(c.rem_lockspace(&ls, 0).unwrap(), 0);
    let mut c2 = Client::connect(&d.run_dir).unwrap();
    assert_eq!(owners(&mut c2), 0);
}
