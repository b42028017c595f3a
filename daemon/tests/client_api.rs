//! lockd's own Rust client (client-lib) against the daemon: the full resource cycle on a
//! registered connection, including killpath, convert and owners, and area formatting.

mod common;

use client_lib::proto::*;
use client_lib::{Client, Disk, Lockspace, Resource, ResourceHead};
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
        disks: vec![Disk::new(&path, 1 << 20).unwrap()],
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
        -libc::ENOENT
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
