//! Golden bytes for [`read_request`]: hand-built messages decode to the typed request,
//! consume exactly what sanlock reads, and bad input fails with sanlock's code.

use super::*;
use disk_format::Name;

fn name(s: &str) -> Name {
    Name::new(s).unwrap_or(Name::EMPTY)
}

/// A header for `cmd` claiming `payload_len` payload bytes.
fn header(cmd: u32, cmd_flags: u32, payload_len: usize, data: u32, data2: u32) -> Header {
    Header::request(cmd, cmd_flags, payload_len, data, data2)
}

/// Reads `bytes` (a whole message: header and payload) and returns the request and what
/// was left unread.
fn read_msg(bytes: &[u8]) -> (Result<Request, RequestError>, Vec<u8>) {
    let h = Header::decode(&bytes[..wire::HEADER_LEN]).unwrap_or_default();
    let mut src = SliceSource::new(&bytes[wire::HEADER_LEN..]);
    let r = read_request(&h, &mut src);
    (r, src.remaining().to_vec())
}

/// A hand-built `sanlk_lockspace`: name, host_id, flags, pad, then a disk.
fn lockspace_bytes(ls: &str, host_id: u64, path: &str, offset: u64) -> Vec<u8> {
    let mut b = vec![0u8; wire::LOCKSPACE_LEN];
    b[..ls.len()].copy_from_slice(ls.as_bytes());
    b[48..56].copy_from_slice(&host_id.to_ne_bytes());
    b[64..64 + path.len()].copy_from_slice(path.as_bytes());
    b[64 + 1024..64 + 1032].copy_from_slice(&offset.to_ne_bytes());
    b
}

/// A hand-built `sanlk_resource` head.
fn head_bytes(ls: &str, res: &str, flags: u32, num_disks: u32) -> Vec<u8> {
    let mut b = vec![0u8; wire::RESOURCE_LEN];
    b[..ls.len()].copy_from_slice(ls.as_bytes());
    b[48..48 + res.len()].copy_from_slice(res.as_bytes());
    b[120..124].copy_from_slice(&flags.to_ne_bytes());
    b[124..128].copy_from_slice(&num_disks.to_ne_bytes());
    b
}

fn disk_bytes(path: &str, offset: u64) -> Vec<u8> {
    let mut b = vec![0u8; wire::DISK_LEN];
    b[..path.len()].copy_from_slice(path.as_bytes());
    b[1024..1032].copy_from_slice(&offset.to_ne_bytes());
    b
}

fn msg(h: Header, payload: &[u8]) -> Vec<u8> {
    let mut m = h.encode().to_vec();
    m.extend_from_slice(payload);
    m
}

#[test]
fn register_has_no_payload_and_reads_nothing() {
    let m = msg(header(SM_CMD_REGISTER, 0, 0, 0, 0), b"next");
    let (r, rest) = read_msg(&m);
    assert_eq!(r, Ok(Request::Register));
    assert_eq!(rest, b"next");
}

#[test]
fn add_lockspace_golden() {
    let p = lockspace_bytes("ls1", 3, "/var/tmp/ls1", 0);
    let m = msg(header(SM_CMD_ADD_LOCKSPACE, 0, p.len(), 10, 0), &p);
    let (r, rest) = read_msg(&m);
    let want = Lockspace::new(name("ls1"), 3, "/var/tmp/ls1", 0).unwrap();
    assert_eq!(r, Ok(Request::AddLockspace(want)));
    assert!(rest.is_empty());
}

#[test]
fn acquire_two_resources_and_options_golden() {
    let mut p = head_bytes("ls", "r1", SANLK_RES_SHARED, 1);
    p.extend(disk_bytes("/var/tmp/r1", 1048576));
    p.extend(head_bytes("ls", "r2", 0, 2));
    p.extend(disk_bytes("/var/tmp/r2a", 0));
    p.extend(disk_bytes("/var/tmp/r2b", 512));
    let mut opt = vec![0u8; wire::OPTIONS_LEN];
    opt[..5].copy_from_slice(b"owner");
    p.extend(&opt);
    let m = msg(header(SM_CMD_ACQUIRE, 0, p.len(), 2, u32::MAX), &p);
    let (r, rest) = read_msg(&m);
    let Ok(Request::Acquire {
        resources,
        options,
        options_str,
    }) = r
    else {
        panic!("not an acquire: {r:?}");
    };
    assert!(rest.is_empty());
    assert_eq!(resources.len(), 2);
    assert_eq!(resources[0].head.name, name("r1"));
    assert_eq!(resources[0].head.flags, SANLK_RES_SHARED);
    assert_eq!(resources[0].disks[0].offset, 1048576);
    assert_eq!(resources[0].disks[0].path.to_text(), "/var/tmp/r1");
    assert_eq!(resources[1].disks.len(), 2);
    assert_eq!(resources[1].disks[1].path.to_text(), "/var/tmp/r2b");
    assert_eq!(options.owner_name, name("owner"));
    assert!(options_str.is_empty());
    // The encoder sends the same bytes.
    let again = Request::Acquire {
        resources,
        options,
        options_str,
    };
    assert_eq!(again.encode(0, 2, u32::MAX), m);
}

#[test]
fn acquire_options_string_is_read() {
    let mut p = head_bytes("ls", "r1", 0, 1);
    p.extend(disk_bytes("/d", 0));
    let mut opt = vec![0u8; wire::OPTIONS_LEN];
    opt[52..56].copy_from_slice(&3u32.to_ne_bytes());
    p.extend(&opt);
    p.extend(b"abc");
    let m = msg(header(SM_CMD_ACQUIRE, 0, p.len(), 1, 0), &p);
    let (r, rest) = read_msg(&m);
    assert!(matches!(r, Ok(Request::Acquire { ref options_str, .. }) if options_str == b"abc"));
    assert!(rest.is_empty());
}

#[test]
fn acquire_too_many_drains_everything_e2big() {
    let p = vec![7u8; 300];
    let mut m = msg(header(SM_CMD_ACQUIRE, 0, p.len(), 9, 0), &p);
    m.extend(b"next");
    let (r, rest) = read_msg(&m);
    let e = r.unwrap_err();
    assert_eq!(e.code(), -E2BIG);
    assert_eq!(rest, b"next");
}

#[test]
fn acquire_bad_num_disks_is_erange_and_drains_past_the_heads() {
    let mut p = head_bytes("ls", "r1", 0, 1);
    p.extend(disk_bytes("/d", 0));
    p.extend(head_bytes("ls", "r2", 0, 5));
    p.extend(vec![1u8; 200]);
    let mut m = msg(header(SM_CMD_ACQUIRE, 0, p.len(), 2, 0), &p);
    m.extend(b"next");
    let (r, rest) = read_msg(&m);
    assert_eq!(r, Err(RequestError::DiskCount { num_disks: 5 }));
    assert_eq!(r.unwrap_err().code(), -ERANGE);
    // The drain counts the heads read (256 bytes), not r1's disk: it asks for 1,040
    // bytes more than are left, so it also takes what follows (on a socket, bounded by
    // its short timeout). This is the daemon's behaviour before this module, kept.
    assert!(rest.is_empty());
}

#[test]
fn acquire_short_payload_is_enotconn() {
    let mut p = head_bytes("ls", "r1", 0, 1);
    p.extend(vec![0u8; 100]);
    let m = msg(header(SM_CMD_ACQUIRE, 0, 2000, 1, 0), &p);
    let (r, _) = read_msg(&m);
    assert_eq!(r.unwrap_err().code(), -ENOTCONN);
    // Options missing.
    let mut p = head_bytes("ls", "r1", 0, 1);
    p.extend(disk_bytes("/d", 0));
    let m = msg(header(SM_CMD_ACQUIRE, 0, p.len(), 1, 0), &p);
    let (r, _) = read_msg(&m);
    assert_eq!(
        r,
        Err(RequestError::Short {
            what: "sanlk_options"
        })
    );
}

#[test]
fn release_named_heads_and_drain() {
    let mut p = head_bytes("ls", "r1", 0, 0);
    p.extend(head_bytes("ls", "r2", 0, 0));
    p.extend(disk_bytes("/d", 0)); // some clients send disks: drained
    let mut m = msg(header(SM_CMD_RELEASE, 0, p.len(), 2, u32::MAX), &p);
    m.extend(b"next");
    let (r, rest) = read_msg(&m);
    let want = vec![
        ResourceHead::named(name("ls"), name("r1")),
        ResourceHead::named(name("ls"), name("r2")),
    ];
    assert_eq!(r, Ok(Request::Release(ReleaseWhat::Named(want))));
    assert_eq!(rest, b"next");
}

#[test]
fn release_flags_select_the_shape() {
    let m = msg(
        header(SM_CMD_RELEASE, SANLK_REL_ALL, 128, 1, 0),
        &[0u8; 128],
    );
    let (r, rest) = read_msg(&m);
    assert_eq!(r, Ok(Request::Release(ReleaseWhat::All)));
    assert!(rest.is_empty());

    let mut p = head_bytes("ls", "old", 0, 0);
    p.extend(head_bytes("ls", "new", 0, 0));
    let m = msg(header(SM_CMD_RELEASE, SANLK_REL_RENAME, p.len(), 1, 0), &p);
    let (r, _) = read_msg(&m);
    assert_eq!(
        r,
        Ok(Request::Release(ReleaseWhat::Rename {
            old: ResourceHead::named(name("ls"), name("old")),
            new: ResourceHead::named(name("ls"), name("new")),
        }))
    );

    let p = head_bytes("ls", "", 0, 0);
    let m = msg(header(SM_CMD_RELEASE, SANLK_REL_ORPHAN, p.len(), 1, 0), &p);
    let (r, _) = read_msg(&m);
    assert_eq!(
        r,
        Ok(Request::Release(ReleaseWhat::Orphans(ResourceHead::named(
            name("ls"),
            Name::EMPTY
        ))))
    );

    let m = msg(header(SM_CMD_RELEASE, 0, 0, 100, 0), &[]);
    assert_eq!(read_msg(&m).0.unwrap_err().code(), -E2BIG);
}

#[test]
fn inquire_and_status_read_no_payload() {
    for cmd in [SM_CMD_INQUIRE, SM_CMD_STATUS] {
        let m = msg(header(cmd, 0, 0, 4, u32::MAX), b"xy");
        let (r, rest) = read_msg(&m);
        let want = if cmd == SM_CMD_INQUIRE {
            Request::Inquire
        } else {
            Request::Status
        };
        assert_eq!(r, Ok(want));
        assert_eq!(rest, b"xy");
    }
}

#[test]
fn lockd_extensions() {
    let mut p = vec![0u8; 256];
    p[..9].copy_from_slice(b"/bin/kill");
    p[128..130].copy_from_slice(b"-9");
    p.extend(head_bytes("ls", "r1", 0, 1));
    p.extend(disk_bytes("/d", 1048576));
    let m = msg(header(LOCKD_CMD_ACQUIRE_FOR_PID, 0, p.len(), 4242, 1), &p);
    let (r, rest) = read_msg(&m);
    let Ok(Request::AcquireForPid {
        killpath_path,
        killpath_args,
        resources,
    }) = r.clone()
    else {
        panic!("not acquire_for_pid: {r:?}");
    };
    assert!(rest.is_empty());
    assert_eq!(killpath_path, "/bin/kill");
    assert_eq!(killpath_args, "-9");
    assert_eq!(resources[0].disks[0].offset, 1048576);
    assert_eq!(r.unwrap().encode(0, 4242, 1), m);

    // No resources: -E2BIG, the payload drained.
    let m = msg(
        header(LOCKD_CMD_ACQUIRE_FOR_PID, 0, 256, 4242, 0),
        &[0u8; 256],
    );
    let (r, rest) = read_msg(&m);
    assert_eq!(r.unwrap_err().code(), -E2BIG);
    assert!(rest.is_empty());

    let mut p = head_bytes("ls", "r1", 0, 1);
    p.extend(disk_bytes("/d", 0));
    let m = msg(header(LOCKD_CMD_LEADER, 0, p.len(), 0, 0), &p);
    assert!(matches!(read_msg(&m).0, Ok(Request::Leader(_))));

    let m = msg(header(LOCKD_CMD_METRICS, 0, 5, 0, 0), b"junk!next");
    let (r, rest) = read_msg(&m);
    assert_eq!(r, Ok(Request::Metrics));
    assert_eq!(rest, b"next");

    let m = msg(header(LOCKD_CMD_WATCH, 0, 0, 0, 0), &[]);
    assert_eq!(read_msg(&m).0, Ok(Request::Watch));
}

#[test]
fn set_event_bad_and_short() {
    let mut p = lockspace_bytes("ls", 1, "/d", 0);
    p.extend([0u8; 10]);
    let m = msg(header(SM_CMD_SET_EVENT, 0, p.len(), 0, 0), &p);
    assert_eq!(read_msg(&m).0.unwrap_err().code(), -ENOTCONN);
    let mut p = lockspace_bytes("ls", 1, "/d", 0);
    p.extend([0u8; wire::HOST_EVENT_LEN]);
    let m = msg(header(SM_CMD_SET_EVENT, 0, p.len(), 0, 0), &p);
    assert!(matches!(read_msg(&m).0, Ok(Request::SetEvent(..))));
}

#[test]
fn set_lvb_bounds() {
    let mut p = head_bytes("ls", "r1", 0, 0);
    p.extend(b"value");
    let m = msg(header(SM_CMD_SET_LVB, 0, p.len(), 0, 0), &p);
    let (r, _) = read_msg(&m);
    assert_eq!(
        r,
        Ok(Request::SetLvb {
            resource: ResourceHead::named(name("ls"), name("r1")),
            lvb: b"value".to_vec(),
        })
    );
    let mut p = head_bytes("ls", "r1", 0, 0);
    p.extend(vec![0u8; 5000]);
    let mut m = msg(header(SM_CMD_SET_LVB, 0, p.len(), 0, 0), &p);
    m.extend(b"next");
    let (r, rest) = read_msg(&m);
    assert_eq!(r.unwrap_err().code(), -E2BIG);
    assert_eq!(rest, b"next");
}

#[test]
fn examine_resource_drains_even_when_short() {
    let p = head_bytes("ls", "r1", 0, 1);
    let mut m = msg(header(SM_CMD_EXAMINE_RESOURCE, 0, p.len() + 10, 0, 0), &p);
    m.extend([9u8; 10]);
    m.extend(b"next");
    let (r, rest) = read_msg(&m);
    assert!(matches!(r, Ok(Request::ExamineResource(_))));
    assert_eq!(rest, b"next");
}

#[test]
fn rindex_entry_commands() {
    let ri = Rindex::new(name("ls"), "/var/tmp/rx", 4096).unwrap();
    let re = Rentry::new(name("res"), 0);
    let req = Request::LookupRindex(ri, re);
    let m = req.encode(0, 0, 0);
    assert_eq!(read_msg(&m).0, Ok(req));
    // Only the rindex arrived.
    let (r, _) = read_msg(&m[..wire::HEADER_LEN + wire::RINDEX_LEN]);
    assert_eq!(r.unwrap_err().code(), -ENOTCONN);
}

#[test]
fn unknown_command_is_drained_and_refused() {
    let mut m = msg(header(999, 0, 3, 0, 0), b"abc");
    m.extend(b"next");
    let (r, rest) = read_msg(&m);
    assert_eq!(r, Err(RequestError::Unknown { cmd: 999 }));
    assert_eq!(r.unwrap_err().code(), -95, "-EOPNOTSUPP");
    assert_eq!(rest, b"next");
}

#[test]
fn every_lockspace_command_is_enotconn_when_cut_short() {
    for cmd in [
        SM_CMD_HOST_STATUS,
        SM_CMD_RENEWAL,
        SM_CMD_GET_HOSTS,
        SM_CMD_SET_CONFIG,
        SM_CMD_REG_EVENT,
        SM_CMD_END_EVENT,
        SM_CMD_ADD_LOCKSPACE,
        SM_CMD_INQ_LOCKSPACE,
        SM_CMD_REM_LOCKSPACE,
        SM_CMD_WRITE_LOCKSPACE,
        SM_CMD_READ_LOCKSPACE,
        SM_CMD_EXAMINE_LOCKSPACE,
        SM_CMD_ALIGN,
        SM_CMD_CONVERT,
        SM_CMD_KILLPATH,
        SM_CMD_GET_LVB,
    ] {
        let m = msg(header(cmd, 0, 1104, 0, 0), &[0u8; 40]);
        let (r, _) = read_msg(&m);
        assert_eq!(r.unwrap_err().code(), -ENOTCONN, "cmd {cmd}");
    }
}

#[test]
fn round_trips_of_the_encoder() {
    let ls = Lockspace::new(name("ls"), 2, "/var/tmp/x", 0).unwrap();
    let res = Resource {
        head: ResourceHead {
            num_disks: 1,
            ..ResourceHead::named(name("ls"), name("r"))
        },
        disks: vec![DiskLocation::new("/var/tmp/x", 1048576).unwrap()],
    };
    let reqs = vec![
        Request::Version,
        Request::GetHosts(ls.clone()),
        Request::RegEvent(ls.clone()),
        Request::Align(DiskLocation::new("/var/tmp/x", 0).unwrap()),
        Request::WriteResource(res.clone()),
        Request::RequestLease(res.clone()),
        Request::Convert(ResourceHead::named(name("ls"), name("r"))),
        Request::Killpath {
            path: "/bin/true".into(),
            args: "a b".into(),
        },
        Request::Release(ReleaseWhat::Named(vec![ResourceHead::named(
            name("ls"),
            name("r"),
        )])),
    ];
    for req in reqs {
        let data = match &req {
            Request::Release(ReleaseWhat::Named(v)) => v.len() as u32,
            _ => 0,
        };
        let m = req.encode(0, data, 0);
        let (r, rest) = read_msg(&m);
        assert_eq!(r.as_ref(), Ok(&req));
        assert!(rest.is_empty(), "{req:?}");
        assert_eq!(req.cmd(), Header::decode(&m[..32]).unwrap().cmd);
    }
}

#[test]
fn garbage_never_panics() {
    // A small deterministic generator: every command number around the known ones, with
    // lying lengths and counts and random payload bytes.
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let cmds: Vec<u32> = (0..45)
        .chain([
            LOCKD_CMD_WATCH,
            LOCKD_CMD_LEADER,
            LOCKD_CMD_METRICS,
            LOCKD_CMD_ACQUIRE_FOR_PID,
        ])
        .collect();
    for round in 0..4000 {
        let cmd = cmds[round % cmds.len()];
        let len = (next() % 6000) as usize;
        let payload: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        let claimed = match next() % 3 {
            0 => len,
            1 => (next() % 8000) as usize,
            _ => usize::MAX / 2,
        };
        let mut h = header(cmd, next() as u32, 0, (next() % 12) as u32, next() as u32);
        h.length = u32::try_from(claimed.saturating_add(32)).unwrap_or(u32::MAX);
        let mut src = SliceSource::new(&payload);
        let _ = read_request(&h, &mut src);
    }
}

/// sanlock 5.1's commands, with the byte layouts libsanlock 5.1.1 was seen sending.
#[test]
fn sanlock_51_commands() {
    // READ_LOCKSPACE_HOST: one sanlk_lockspace.
    let ls = lockspace_bytes("ls", 2, "/dev/x", 0);
    let m = msg(header(SM_CMD_READ_LOCKSPACE_HOST, 0, ls.len(), 0, 0), &ls);
    assert!(matches!(read_msg(&m).0, Ok(Request::ReadLockspaceHost(l)) if l.host_id == 2));
    // SET_HOST: sanlk_lockspace then sanlk_host (host_id 3, generation 7).
    let mut p = lockspace_bytes("ls", 0, "/dev/x", 0);
    p.extend_from_slice(&3u64.to_ne_bytes());
    p.extend_from_slice(&7u64.to_ne_bytes());
    p.extend_from_slice(&[0u8; 16]);
    let m = msg(header(SM_CMD_SET_HOST, 0, p.len(), 1, 0), &p);
    assert!(matches!(
        read_msg(&m).0,
        Ok(Request::SetHost(_, h)) if (h.host_id, h.generation) == (3, 7)
    ));
    // ... cut short after the lockspace: -ENOTCONN.
    let m = msg(
        header(SM_CMD_SET_HOST, 0, p.len(), 1, 0),
        &p[..wire::LOCKSPACE_LEN],
    );
    assert_eq!(read_msg(&m).0.unwrap_err().code(), -ENOTCONN);
    // INIT_LOCKSPACE_HOST: sanlk_lockspace then a 200-byte leader record.
    let mut p = lockspace_bytes("ls", 3, "/dev/x", 0);
    let mut rec = disk_format::LeaderRecord::ZERO;
    rec.owner_id = 3;
    rec.owner_generation = 9;
    rec.resource_name = name("probe51host");
    p.extend_from_slice(&rec.encode());
    let m = msg(header(SM_CMD_INIT_LOCKSPACE_HOST, 2, p.len(), 0, 7), &p);
    let (r, rest) = read_msg(&m);
    assert!(rest.is_empty());
    assert!(matches!(r, Ok(Request::InitLockspaceHost(_, ref l)) if **l == rec));
    // ACQUIRE2: read as ACQUIRE, kept apart, and a registered-client command.
    assert!(is_client_cmd(SM_CMD_ACQUIRE2));
    let mut p = head_bytes("ls", "r1", 0, 1);
    p.extend(disk_bytes("/dev/x", 1 << 20));
    p.extend_from_slice(&[0u8; wire::OPTIONS_LEN]);
    let m = msg(header(SM_CMD_ACQUIRE2, 0, p.len(), 1, u32::MAX), &p);
    let r = read_msg(&m).0.unwrap();
    assert!(matches!(r, Request::Acquire2 { ref resources, .. } if resources.len() == 1));
    assert_eq!(r.cmd(), SM_CMD_ACQUIRE2);
    assert_eq!(r.encode_payload(), p);
}
