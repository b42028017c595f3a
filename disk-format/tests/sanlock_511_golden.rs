//! Golden tests from bytes sanlock 5.1.1 (Debian unstable, run in a chroot) wrote: lockd
//! reads its delta 5.0 / paxos 7.0 records, finds them byte-for-byte what lockd's own
//! format would be but for the version word, and sees the 5.x flags.
//!
//! Fixtures (`tests/fixtures/sanlock-5.1.1/`, 512-byte sectors):
//! - `lockspace-fresh.bin`: host 1's sector of `sanlock direct init -s myls:0:FILE:0`;
//! - `resource-fresh.bin`: sector 0 of `sanlock direct init -r myls:myres:FILE:1048576`;
//! - `lockspace-joined-host1.bin`: host 1's sector while a 5.1.1 daemon held host_id 1
//!   (host name "host5");
//! - `lockspace-dead-ext-host2.bin`: host 2's sector after `direct init_host -g 5 -t 1 -C 0`
//!   and then `client set_host -i 2 -g 5 -F DEAD_EXT` from host 1;
//! - `lockspace-no-timeout.bin`: host 1's sector of `direct init -s nt:0:FILE:0 -N 1`;
//! - `resource-released-host1.bin`: leader, request record and host 1's dblock after
//!   host 1 acquired (`client command -r ... -c sleep 30`) and released the lease;
//! - `lockspace-caw-crafted.bin` / `resource-caw-crafted.bin`: the joined/fresh records
//!   with leader flag 0x8 set and the checksum redone (a loop device cannot make a real
//!   CAW lease); sanlock 5.1.1's `read_lockspace`/`read_resource` report them as
//!   `SANLK_LSF_USING_CAW` / `SANLK_RES_USING_CAW`, which is how the flag's value was learnt.

use disk_format::dblock::decode_dblock_sector;
use disk_format::leader::{
    LeaderExpect, DELTA_DISK_MAGIC, DELTA_DISK_VERSION, DELTA_DISK_VERSION_5, LFL_CAW,
    LFL_DEAD_EXT, LFL_NO_TIMEOUT, PAXOS_DISK_MAGIC, PAXOS_DISK_VERSION, PAXOS_DISK_VERSION_7,
};
use disk_format::rv;
use disk_format::{
    format_lockspace_area, format_resource_area, AlignSize, DeltaSector, Geometry, LeaderKind,
    LeaderRecord, Name, ResourceInit, SectorSize,
};

fn fixture(name: &str) -> Vec<u8> {
    let path = format!(
        "{}/tests/fixtures/sanlock-5.1.1/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn g512() -> Geometry {
    Geometry::new(SectorSize::B512, AlignSize::M1).unwrap()
}

fn myls() -> Name {
    Name::new("myls").unwrap()
}

fn expect_ls(ls: &Name) -> LeaderExpect<'_> {
    LeaderExpect {
        sector_size: Some(512),
        space_name: Some(ls),
        resource_name: None,
    }
}

/// A 5.1.1 `direct init` lockspace equals lockd's format except for the version word
/// (and so the checksum): same fields, same bitmap, same zero fill.
#[test]
fn fresh_lockspace_is_lockds_format_with_version_5() {
    let got = fixture("lockspace-fresh.bin");
    let l = LeaderRecord::decode(&got).unwrap();
    assert_eq!(
        (l.magic, l.version),
        (DELTA_DISK_MAGIC, DELTA_DISK_VERSION_5)
    );
    let ls = myls();
    l.verify(LeaderKind::Delta, &expect_ls(&ls)).unwrap();
    l.check_writable(LeaderKind::Delta).unwrap();

    let ours = format_lockspace_area(g512(), &ls, 10).first_sector;
    let mut ours_l = LeaderRecord::decode(&ours).unwrap();
    assert_eq!(ours_l.version, DELTA_DISK_VERSION);
    ours_l.version = DELTA_DISK_VERSION_5;
    ours_l.seal();
    let mut rebuilt = ours.clone();
    ours_l.encode_into(&mut rebuilt);
    assert_eq!(rebuilt, got, "only the version word and checksum differ");
}

#[test]
fn fresh_resource_is_lockds_format_with_version_7() {
    let got = fixture("resource-fresh.bin");
    let l = LeaderRecord::decode(&got).unwrap();
    assert_eq!(
        (l.magic, l.version),
        (PAXOS_DISK_MAGIC, PAXOS_DISK_VERSION_7)
    );
    let (ls, res) = (myls(), Name::new("myres").unwrap());
    l.verify(
        LeaderKind::Paxos,
        &LeaderExpect {
            sector_size: Some(512),
            space_name: Some(&ls),
            resource_name: Some(&res),
        },
    )
    .unwrap();
    l.check_writable(LeaderKind::Paxos).unwrap();
    let area = format_resource_area(&ResourceInit {
        geometry: g512(),
        space_name: ls,
        resource_name: res,
        num_hosts: 0,
        clear_at_monotime_s: None,
    });
    let mut ours_l = LeaderRecord::decode(&area).unwrap();
    assert_eq!(ours_l.version, PAXOS_DISK_VERSION);
    ours_l.version = PAXOS_DISK_VERSION_7;
    ours_l.seal();
    let mut rebuilt = area[..512].to_vec();
    ours_l.encode_into(&mut rebuilt);
    assert_eq!(rebuilt, got);
}

#[test]
fn joined_record_has_the_3x_fields() {
    let s = DeltaSector::decode(&fixture("lockspace-joined-host1.bin")).unwrap();
    let l = s.leader;
    let ls = myls();
    l.verify(LeaderKind::Delta, &expect_ls(&ls)).unwrap();
    l.check_writable(LeaderKind::Delta).unwrap();
    assert_eq!((l.owner_id, l.owner_generation), (1, 1));
    assert_eq!(l.resource_name.to_text(), "host5");
    assert_eq!(l.io_timeout, 10);
    assert_ne!(l.timestamp, 0);
    assert_eq!(l.flags, 0x10, "align 1M only");
    assert!(!l.dead_ext());
}

#[test]
fn dead_ext_record() {
    let l = LeaderRecord::decode(&fixture("lockspace-dead-ext-host2.bin")).unwrap();
    let ls = myls();
    l.verify(LeaderKind::Delta, &expect_ls(&ls)).unwrap();
    assert_eq!(l.flags, 0x10 | LFL_DEAD_EXT);
    assert!(l.dead_ext());
    assert_eq!((l.owner_id, l.owner_generation), (2, 5));
    // set_host keeps the timestamp (the marked host's last renewal) and stamps the field
    // after it with the setter: generation as u16 at 160, host_id as u16 at 162
    // (0x0001_0001 here: host 1, generation 1; a setter host 4 of generation 3 writes
    // 0x0004_0003, observed with 5.1.1).
    assert_ne!(l.timestamp, 0);
    assert_eq!(l.unused1, 0x0001_0001);
    // DEAD_EXT is a flag lockd implements: the record stays writable.
    l.check_writable(LeaderKind::Delta).unwrap();
}

#[test]
fn no_timeout_lockspace_is_read_but_refused_for_writing() {
    let l = LeaderRecord::decode(&fixture("lockspace-no-timeout.bin")).unwrap();
    let ls = Name::new("nt").unwrap();
    l.verify(LeaderKind::Delta, &expect_ls(&ls)).unwrap();
    assert_eq!(l.flags, 0x10 | LFL_NO_TIMEOUT);
    let e = l.check_writable(LeaderKind::Delta).unwrap_err();
    assert_eq!(e.sanlk_code(), -95, "-EOPNOTSUPP: {e}");
}

#[test]
fn caw_records_are_read_but_refused_for_writing() {
    let ls = myls();
    let d = LeaderRecord::decode(&fixture("lockspace-caw-crafted.bin")).unwrap();
    d.verify(LeaderKind::Delta, &expect_ls(&ls)).unwrap();
    assert_ne!(d.flags & LFL_CAW, 0);
    assert_eq!(
        d.check_writable(LeaderKind::Delta)
            .unwrap_err()
            .sanlk_code(),
        rv::SANLK_WRONG_CAW
    );
    let p = LeaderRecord::decode(&fixture("resource-caw-crafted.bin")).unwrap();
    p.verify(LeaderKind::Paxos, &Default::default()).unwrap();
    assert_eq!(
        p.check_writable(LeaderKind::Paxos)
            .unwrap_err()
            .sanlk_code(),
        rv::SANLK_WRONG_CAW
    );
}

/// A lease acquired and released by 5.1.1: leader freed by its owner, request record of
/// the 3.x version, host 1's dblock with the 3.x layout and the RELEASED flag.
#[test]
fn released_resource_has_the_3x_dblock_layout() {
    let b = fixture("resource-released-host1.bin");
    let l = LeaderRecord::decode(&b[..512]).unwrap();
    l.verify(LeaderKind::Paxos, &Default::default()).unwrap();
    assert_eq!(l.version, PAXOS_DISK_VERSION_7);
    assert_eq!((l.owner_id, l.owner_generation, l.lver), (1, 1, 1));
    assert_eq!(l.timestamp, 0, "released");
    assert_eq!((l.write_id, l.write_generation), (1, 1));
    let rr = disk_format::RequestRecord::decode(&b[512..1024]).unwrap();
    rr.verify().unwrap();
    let (d, mb) = decode_dblock_sector(&b[1024..1536]).unwrap();
    d.verify().unwrap();
    assert_eq!((d.mbal, d.bal, d.inp, d.inp2, d.lver), (1, 1, 1, 1, 1));
    assert!(d.is_released());
    assert!(!mb.is_shared());
}

/// Unknown majors stay refused with sanlock's code.
#[test]
fn other_majors_are_refused() {
    for (kind, v) in [
        (LeaderKind::Delta, 0x0004_0000u32),
        (LeaderKind::Delta, 0x0006_0000),
        (LeaderKind::Paxos, 0x0008_0000),
        (LeaderKind::Paxos, 0x0005_0000),
    ] {
        let mut l = LeaderRecord::decode(&fixture("lockspace-fresh.bin")).unwrap();
        if kind == LeaderKind::Paxos {
            l = LeaderRecord::decode(&fixture("resource-fresh.bin")).unwrap();
        }
        l.version = v;
        l.seal();
        assert_eq!(
            l.verify(kind, &Default::default())
                .unwrap_err()
                .sanlk_code(),
            rv::SANLK_LEADER_VERSION,
            "{kind:?} 0x{v:08x}"
        );
    }
}
