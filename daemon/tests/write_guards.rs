//! Issue 21, item 5, on the daemon's side: client-requested writes never land on an area
//! the daemon uses, whatever the client asks, through sanlock's own clients
//! (python3-sanlock and `sanlock client`):
//! - WRITE_LOCKSPACE over the joined lockspace and WRITE_RESOURCE over a held lease (also
//!   under another path naming the same file) get -EBUSY and change nothing; the same
//!   writes over unused areas still work, as in sanlock;
//! - FORMAT_RINDEX over the joined lockspace gets -EBUSY;
//! - CREATE_RESOURCE never places the new lease over a held lease or over a valid lease
//!   that is not indexed: it takes the next slot whose area holds no valid record;
//!   DELETE_RESOURCE of a lease the daemon holds gets -EBUSY.

mod common;

use std::path::Path;

use common::*;

const MIB: u64 = 1 << 20;

fn bytes(p: &Path, off: u64, len: u64) -> Vec<u8> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(p).expect("open image");
    f.seek(SeekFrom::Start(off)).expect("seek");
    let mut b = vec![0u8; len as usize];
    f.read_exact(&mut b).expect("read image");
    b
}

/// Lockspace LS at 0, resource r1 at 1 MiB, an index at 2 MiB (rindex_lease at 3 MiB,
/// slots from 4 MiB) whose slot 0 holds the unindexed lease "direct" and slot 1 the
/// unindexed, never-held lease "idle"; a daemon with LS joined as host 1 and a python
/// client holding r1 and "direct".
struct Bed {
    _s: Scratch,
    img: std::path::PathBuf,
    d: LockdDaemon,
    _holder: PyChild,
}

fn bed(tag: &str) -> Bed {
    require_python_sanlock();
    require_tool("sanlock", "sanlock");
    let s = Scratch::new(tag);
    let img = s.file("disk.img", 16);
    init_lockspace("LS", &img, 0);
    init_resource("LS", "r1", &img, MIB);
    let out = run(std::process::Command::new("sanlock").args([
        "direct",
        "format",
        "-x",
        &format!("LS:{}:{}", img.display(), 2 * MIB),
        "-Z",
        "512",
        "-A",
        "1M",
    ]));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("format done 0"),
        "{out:?}"
    );
    init_resource("LS", "direct", &img, 4 * MIB);
    init_resource("LS", "idle", &img, 5 * MIB);
    let d = LockdDaemon::start(&s, tag, &[]);
    let path = img.display();
    let mut holder = d.python_child(&format!(
        r#"
import sanlock, time
sanlock.add_lockspace(b"LS", 1, "{path}", 0, iotimeout=1)
fd = sanlock.register()
sanlock.acquire(b"LS", b"r1", [("{path}", {MIB})], slkfd=fd)
sanlock.acquire(b"LS", b"direct", [("{path}", {slot0})], slkfd=fd)
print("held", flush=True)
time.sleep(600)
"#,
        slot0 = 4 * MIB
    ));
    assert_eq!(holder.line(), "held", "log:\n{}", tail(&d.log_text(), 30));
    Bed {
        _s: s,
        img,
        d,
        _holder: holder,
    }
}

/// Runs python3-sanlock `call` against the bed's daemon: "ok" or "error ERRNO".
fn try_call(b: &Bed, call: &str) -> String {
    b.d.python(&format!(
        "import sanlock\nD = '{}'\ntry:\n    {call}\n    print('ok')\nexcept sanlock.SanlockException as e:\n    print('error', e.errno)\n",
        b.img.display()
    ))
    .trim()
    .to_string()
}

#[test]
fn write_lockspace_and_write_resource_never_land_on_what_the_daemon_uses() {
    let b = bed("wg-write");
    let before = bytes(&b.img, 0, 6 * MIB);
    // Over the joined lockspace, and over a lockspace area overlapping it.
    assert_eq!(
        try_call(&b, "sanlock.write_lockspace(b'LS', D, 0)"),
        "error 16"
    );
    assert_eq!(
        try_call(&b, "sanlock.write_lockspace(b'XX', D, 0)"),
        "error 16"
    );
    // Over the held leases, by path and through a symlink to the same file.
    assert_eq!(
        try_call(
            &b,
            &format!("sanlock.write_resource(b'LS', b'r1', [(D, {MIB})])")
        ),
        "error 16"
    );
    let link = b.img.with_extension("link");
    std::os::unix::fs::symlink(&b.img, &link).unwrap();
    assert_eq!(
        b.d.python(&format!(
            "import sanlock\ntry:\n    sanlock.write_resource(b'LS', b'x', [('{}', {})], clear=True)\n    print('ok')\nexcept sanlock.SanlockException as e:\n    print('error', e.errno)\n",
            link.display(),
            4 * MIB
        ))
        .trim(),
        "error 16"
    );
    // Only the renewals of host 1's delta record changed anything.
    let after = bytes(&b.img, 0, 6 * MIB);
    assert_eq!(
        after[512..],
        before[512..],
        "a refused write changed the disk"
    );
    // Areas the daemon does not use are written as sanlock writes them (lvmlockd and
    // libvirt rely on it), valid records included.
    assert_eq!(
        try_call(
            &b,
            &format!("sanlock.write_resource(b'LS', b'idle', [(D, {})])", 5 * MIB)
        ),
        "ok"
    );
    assert_eq!(
        try_call(
            &b,
            &format!("sanlock.write_lockspace(b'L2', D, {})", 8 * MIB)
        ),
        "ok"
    );
}

#[test]
fn format_rindex_over_the_joined_lockspace_is_refused() {
    let b = bed("wg-format");
    let before = bytes(&b.img, 0, 2 * MIB);
    let out =
        b.d.sanlock_client(&["format", "-x", &format!("LS:{}:0", b.img.display())]);
    let text = stdout(&out);
    assert!(text.contains("format done -16"), "{text}");
    let after = bytes(&b.img, 0, 2 * MIB);
    assert_eq!(
        after[512..],
        before[512..],
        "the lockspace area was written"
    );
    // The daemon still renews its lockspace.
    let inq = b.d.python(&format!(
        "import sanlock\nprint(sanlock.inq_lockspace(b'LS', 1, '{}', 0))",
        b.img.display()
    ));
    assert_eq!(inq.trim(), "True");
}

#[test]
fn create_resource_never_lands_on_a_held_or_valid_lease() {
    let b = bed("wg-create");
    let before = bytes(&b.img, 4 * MIB, 2 * MIB);
    let x = format!("LS:{}:{}", b.img.display(), 2 * MIB);
    let out = b.d.sanlock_client(&["create", "-x", &x, "-e", "new"]);
    let text = stdout(&out);
    assert!(text.contains("create_resource done 0"), "{text}");
    assert!(
        text.contains(&format!("offset {}", 6 * MIB)),
        "create did not answer 6M: {text}"
    );
    // Slot 0 (held "direct") and slot 1 (valid "idle") are skipped: the lease is at 6M.
    let out = b.d.sanlock_client(&["lookup", "-x", &x, "-e", "new"]);
    let text = stdout(&out);
    assert!(
        text.contains(&format!("offset {}", 6 * MIB)),
        "new resource not at 6M: {text}"
    );
    assert!(
        bytes(&b.img, 4 * MIB, 2 * MIB) == before,
        "create wrote over an existing lease"
    );
    // Deleting the held lease (indexed by hand) is refused and changes nothing.
    let text =
        stdout(&b.d.sanlock_client(&["update", "-x", &x, "-e", &format!("direct:{}", 4 * MIB)]));
    assert!(text.contains("done 0"), "{text}");
    let text = stdout(&b.d.sanlock_client(&["delete", "-x", &x, "-e", "direct"]));
    assert!(text.contains("done -16"), "delete of a held lease: {text}");
    assert!(
        bytes(&b.img, 4 * MIB, 2 * MIB) == before,
        "delete cleared a held lease"
    );
    // The held lease is still ours and intact.
    let owners = b.d.python(&format!(
        "import sanlock\nprint(sanlock.read_resource_owners(b'LS', b'direct', [('{}', {})]))",
        b.img.display(),
        4 * MIB
    ));
    assert!(owners.contains("'host_id': 1"), "{owners}");
}
