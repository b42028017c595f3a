//! RELEASE with `SANLK_REL_RENAME` (lvmlockd renames a freed lease at vgremove): the same
//! steps run against a real sanlock daemon and against lockd, each on its own file, and
//! must give the same result codes and the same leader on disk (name changed, lease free).

mod common;

use std::path::Path;

use client_lib::proto::SANLK_REL_RENAME;
use client_lib::{Client, DiskLocation, Lockspace, Resource, ResourceHead};
use common::*;
use disk_format::{LeaderRecord, Name};

const RES_OFF: u64 = 1 << 20;

/// What one daemon did: result codes of each step and the leader left on disk.
#[derive(Debug, PartialEq)]
struct Outcome {
    acquire: i32,
    rename_unheld: i32,
    rename: i32,
    inquire_count: u32,
    reacquire_old_name: i32,
    leader_name: String,
    leader_timestamp: u64,
    leader_lver: u64,
}

fn head(ls: Name, name: &str) -> ResourceHead {
    ResourceHead {
        num_disks: 1,
        ..ResourceHead::named(ls, Name::new(name).unwrap())
    }
}

fn run_steps(run_dir: &Path, disk: &Path) -> Outcome {
    let path = disk.display().to_string();
    init_lockspace("rn", disk, 0);
    init_resource("rn", "vg_lock", disk, RES_OFF);
    let ls_name = Name::new("rn").unwrap();
    let ls = Lockspace::new(ls_name, 1, &path, 0).unwrap();
    let mut admin = Client::connect(run_dir).unwrap();
    assert_eq!(admin.add_lockspace(&ls, 0, 0).unwrap(), 0, "add_lockspace");
    let res = Resource {
        head: head(ls_name, "vg_lock"),
        disks: vec![DiskLocation::new(&path, RES_OFF).unwrap()],
    };
    let mut reg = Client::connect(run_dir).unwrap();
    reg.register().unwrap();
    let acquire = reg
        .acquire(-1, 0, std::slice::from_ref(&res), None)
        .unwrap();
    let new_name = head(ls_name, "#unused");
    // A lease the client does not hold.
    let rename_unheld = reg
        .release(
            -1,
            SANLK_REL_RENAME,
            &[head(ls_name, "other"), new_name.clone()],
        )
        .unwrap();
    let rename = reg
        .release(-1, SANLK_REL_RENAME, &[res.head.clone(), new_name])
        .unwrap();
    let (_, inquire_count, _) = reg.inquire(-1).unwrap();
    // The lease now carries the new name: acquiring it by the old name fails.
    let reacquire_old_name = reg
        .acquire(-1, 0, std::slice::from_ref(&res), None)
        .unwrap();
    let bytes = std::fs::read(disk).unwrap();
    let off = RES_OFF as usize;
    let leader = LeaderRecord::decode(&bytes[off..off + 512]).expect("leader decodes");
    assert_eq!(
        leader.checksum,
        leader.computed_checksum(),
        "renamed leader has a valid checksum"
    );
    drop(reg);
    assert_eq!(
        rem_lockspace_when_unused(&mut admin, &ls),
        0,
        "rem_lockspace"
    );
    Outcome {
        acquire,
        rename_unheld,
        rename,
        inquire_count,
        reacquire_old_name,
        leader_name: leader.resource_name.to_text(),
        leader_timestamp: leader.timestamp,
        leader_lver: leader.lver,
    }
}

#[test]
fn release_rename_matches_sanlock() {
    let s = Scratch::new("rename");
    let sanlock = lockd_system_tests::SanlockDaemon::start("rename-sanlock");
    let from_sanlock = run_steps(sanlock.run_dir.path(), &s.file("sanlock-disk", 3));
    drop(sanlock);
    let lockd = LockdDaemon::start(&s, "rename-lockd", &[]);
    let from_lockd = run_steps(&lockd.run_dir, &s.file("lockd-disk", 3));
    println!("sanlock: {from_sanlock:?}\nlockd:   {from_lockd:?}");
    assert_eq!(from_sanlock.acquire, 0);
    assert_eq!(from_sanlock.rename, 0);
    assert_eq!(from_sanlock.leader_name, "#unused");
    assert_eq!(from_sanlock.leader_timestamp, 0, "the lease is free");
    assert_eq!(
        from_lockd,
        from_sanlock,
        "lockd log:\n{}",
        tail(&lockd.log_text(), 40)
    );
}
