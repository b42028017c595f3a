//! The resource index through the daemon (commands 35–40), checked against a real sanlock
//! 3.8 daemon with sanlock's own unmodified client (`sanlock client format|create|delete|
//! lookup|update|rebuild -x`), which talks to lockd exactly as it talks to sanlock:
//! - the same sequence on two files (one per daemon) leaves the same bytes;
//! - a sanlock host and a lockd host share one index and see each other's entries;
//! - bad input, a full index and requests cut short get sanlock's codes and replies and
//!   change nothing on disk;
//! - creates racing from two hosts never index a name or a slot twice.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use client_lib::proto::{
    SM_CMD_CREATE_RESOURCE, SM_CMD_DELETE_RESOURCE, SM_CMD_FORMAT_RINDEX, SM_CMD_LOOKUP_RINDEX,
    SM_CMD_REBUILD_RINDEX,
};
use client_lib::wire::{RENTRY_LEN, RINDEX_LEN};
use client_lib::{Client, Rentry, Rindex};
use common::*;
use disk_format::dblock::decode_dblock_sector;
use disk_format::{LeaderRecord, Name};

const MIB: u64 = 1 << 20;
/// Lockspace at 0, index at 1 MiB (its rindex_lease at 2 MiB, slots from 3 MiB).
const RX_OFF: u64 = MIB;
const LEASE_OFF: u64 = 2 * MIB;
const SLOT0: u64 = 3 * MIB;

/// One daemon (sanlock or lockd) reached through `sanlock client` with its run dir.
struct Target {
    kind: &'static str,
    run_dir: PathBuf,
}

impl Target {
    fn client(&self, args: &[&str]) -> String {
        let out = run(Command::new("sanlock")
            .arg("client")
            .args(args)
            .env("SANLOCK_RUN_DIR", &self.run_dir)
            .env("SANLOCK_PRIVILEGED", "0"));
        let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.push_str(&String::from_utf8_lossy(&out.stderr));
        text
    }

    /// Runs `sanlock client ACTION ARGS` and returns the "ACTION done N" result code.
    fn rv(&self, args: &[&str]) -> (i32, String) {
        let text = self.client(args);
        let rv = text
            .lines()
            .find_map(|l| {
                let (_, tail) = l.split_once(" done ")?;
                tail.trim().parse::<i32>().ok()
            })
            .unwrap_or_else(|| panic!("{}: no result in {args:?} output: {text}", self.kind));
        (rv, text)
    }

    fn join(&self, ls: &str, host_id: u64, path: &Path) {
        let spec = format!("{ls}:{host_id}:{}:0", path.display());
        let (rv, text) = self.rv(&["add_lockspace", "-s", &spec, "-o", "1"]);
        assert_eq!(rv, 0, "{} add_lockspace: {text}", self.kind);
    }

    fn leave(&self, ls: &str, host_id: u64, path: &Path) {
        let spec = format!("{ls}:{host_id}:{}:0", path.display());
        let (rv, text) = self.rv(&["rem_lockspace", "-s", &spec]);
        assert_eq!(rv, 0, "{} rem_lockspace: {text}", self.kind);
    }

    /// `create`: the new lease's offset.
    fn create(&self, rx: &str, name: &str) -> Result<u64, i32> {
        let (rv, text) = self.rv(&["create", "-x", rx, "-e", name]);
        if rv != 0 {
            return Err(rv);
        }
        Ok(text
            .lines()
            .find_map(|l| l.trim().strip_prefix("offset ")?.parse().ok())
            .unwrap_or_else(|| panic!("{}: no offset in create output: {text}", self.kind)))
    }

    /// `lookup`: (name, offset), name "-" for none.
    fn lookup(&self, rx: &str, entry: Option<&str>) -> Result<(String, u64), i32> {
        let mut args = vec!["lookup", "-x", rx];
        if let Some(e) = entry {
            args.extend(["-e", e]);
        }
        let (rv, text) = self.rv(&args);
        if rv != 0 {
            return Err(rv);
        }
        let line = text
            .lines()
            .find(|l| l.trim().starts_with("name "))
            .unwrap_or_else(|| panic!("{}: no entry in lookup output: {text}", self.kind));
        let f: Vec<&str> = line.split_whitespace().collect();
        Ok((f[1].to_string(), f[3].parse().expect("offset")))
    }
}

fn start_sanlock(s: &Scratch) -> (lockd_system_tests::SanlockDaemon, Target) {
    let _ = s;
    let d = lockd_system_tests::SanlockDaemon::start("rx-sanlock");
    let t = Target {
        kind: "sanlock",
        run_dir: d.run_dir.path().to_path_buf(),
    };
    (d, t)
}

fn start_lockd(s: &Scratch, host: &str) -> (LockdDaemon, Target) {
    let d = LockdDaemon::start(s, host, &[]);
    let t = Target {
        kind: "lockd",
        run_dir: d.run_dir.clone(),
    };
    (d, t)
}

fn read(path: &Path, off: u64, len: u64) -> Vec<u8> {
    let b = std::fs::read(path).expect("read disk file");
    b[off as usize..(off + len) as usize].to_vec()
}

/// The run-specific parts of a paxos lease area zeroed, so that two areas written by the
/// same operations on different hosts/daemons compare equal:
/// - leader `timestamp`, `write_timestamp` and checksum: monotonic times of the writer;
/// - leader `write_id`/`write_generation`/`owner_*`: kept (both runs use host 1, gen 1);
/// - dblock `inp3` (the ballot's monotonic time) and checksum;
/// - request record bytes 20..24 of sector 1: sanlock's format leaves them uninitialised
///   (heap garbage from its buffer), lockd writes zeros;
/// - with `internal`, the dblock `flags`: lockd releases the rindex_lease like every
///   lease (leader cleared, then our dblock marked RELEASED — the release order the
///   simulator checked), while sanlock's internal release clears only the leader. Both
///   leave the lease free; only that flag (and so the dblock checksum) differs.
fn normalised_lease(mut area: Vec<u8>, internal: bool) -> Vec<u8> {
    let mut leader = LeaderRecord::decode(&area[..512]).expect("leader");
    if leader.magic != 0 {
        leader.timestamp = 0;
        leader.write_timestamp = 0;
        leader.checksum = 0;
        leader.encode_into(&mut area[..512]);
    }
    area[512 + 20..512 + 24].fill(0);
    // dblocks of host 1 and 2 (sectors 2 and 3).
    for sector in [2usize, 3] {
        let at = sector * 512;
        if let Ok((mut d, _)) = decode_dblock_sector(&area[at..at + 512]) {
            if d.mbal != 0 {
                d.inp3 = 0;
                d.checksum = 0;
                if internal {
                    d.flags = 0;
                }
                d.encode_into(&mut area[at..at + 512]);
            }
        }
    }
    area
}

fn first_diff(a: &[u8], b: &[u8]) -> Option<usize> {
    a.iter().zip(b).position(|(x, y)| x != y)
}

/// The sequence both daemons run on their own file; returns the offsets `create` gave.
fn sequence(t: &Target, path: &Path) -> Vec<(String, i32, u64)> {
    let rx = format!("rx:{}:{RX_OFF}", path.display());
    let mut log = Vec::new();
    let (rv, text) = t.rv(&["format", "-x", &rx]);
    assert_eq!(rv, 0, "{} format: {text}", t.kind);
    t.join("rx", 1, path);
    for name in ["r1", "r2", "r3"] {
        let off = t.create(&rx, name).expect("create");
        log.push((format!("create {name}"), 0, off));
    }
    let (rv, _) = t.rv(&["delete", "-x", &rx, "-e", "r2"]);
    log.push(("delete r2".into(), rv, 0));
    // r4 takes the slot r2 left.
    let off = t.create(&rx, "r4").expect("create r4");
    log.push(("create r4".into(), 0, off));
    let (rv, _) = t.rv(&[
        "update",
        "-x",
        &rx,
        "-e",
        &format!("manual:{}", SLOT0 + 5 * MIB),
    ]);
    log.push(("update add manual".into(), rv, 0));
    let (rv, _) = t.rv(&[
        "update",
        "-x",
        &rx,
        "-e",
        &format!("r3:{}", SLOT0 + 2 * MIB),
        "-z",
        "1",
    ]);
    log.push(("update rem r3".into(), rv, 0));
    for e in ["r1", "r4", "manual", "nosuch"] {
        match t.lookup(&rx, Some(e)) {
            Ok((_, off)) => log.push((format!("lookup {e}"), 0, off)),
            Err(rv) => log.push((format!("lookup {e}"), rv, 0)),
        }
    }
    let free = t.lookup(&rx, None).expect("lookup free");
    log.push(("lookup free".into(), 0, free.1));
    t.leave("rx", 1, path);
    log
}

#[test]
fn same_sequence_gives_the_same_bytes_as_sanlock() {
    require_tool("sanlock", "sanlock");
    let s = Scratch::new("rindex-bytes");
    let files: BTreeMap<&str, PathBuf> =
        [("sanlock", s.file("sl", 12)), ("lockd", s.file("lk", 12))]
            .into_iter()
            .collect();
    for p in files.values() {
        init_lockspace("rx", p, 0);
    }
    let (sl, t_sl) = start_sanlock(&s);
    let log_sl = sequence(&t_sl, &files["sanlock"]);
    drop(sl);
    let (lk, t_lk) = start_lockd(&s, "rx-lockd");
    let log_lk = sequence(&t_lk, &files["lockd"]);
    println!("sanlock: {log_sl:?}\nlockd:   {log_lk:?}");
    assert_eq!(log_lk, log_sl, "lockd log:\n{}", tail(&lk.log_text(), 30));
    // The index area (header + entries): identical.
    let (a, b) = (
        read(&files["sanlock"], RX_OFF, MIB),
        read(&files["lockd"], RX_OFF, MIB),
    );
    assert_eq!(first_diff(&a, &b), None, "rindex areas differ");
    // The rindex_lease and every slot touched: identical but for run-specific fields.
    for (what, off) in [("rindex_lease", LEASE_OFF)]
        .into_iter()
        .chain((0..6).map(|i| ("slot", SLOT0 + i * MIB)))
    {
        let internal = off == LEASE_OFF;
        let a = normalised_lease(read(&files["sanlock"], off, MIB), internal);
        let b = normalised_lease(read(&files["lockd"], off, MIB), internal);
        assert_eq!(
            first_diff(&a, &b),
            None,
            "{what} at {off} differs (first differing byte shown)"
        );
    }
}

/// Both daemons joined to one lockspace on one file: sanlock host 1, lockd host 2.
fn shared_pair(
    s: &Scratch,
) -> (
    lockd_system_tests::SanlockDaemon,
    Target,
    LockdDaemon,
    Target,
    PathBuf,
) {
    let path = s.file("shared", 16);
    init_lockspace("rx", &path, 0);
    let (sl, t_sl) = start_sanlock(s);
    let (lk, t_lk) = start_lockd(s, "rx-lockd");
    let p2 = path.clone();
    let run_dir = t_sl.run_dir.clone();
    let th = std::thread::spawn(move || {
        let t = Target {
            kind: "sanlock",
            run_dir,
        };
        t.join("rx", 1, &p2);
    });
    t_lk.join("rx", 2, &path);
    th.join().expect("sanlock join");
    (sl, t_sl, lk, t_lk, path)
}

#[test]
fn sanlock_and_lockd_share_one_index() {
    require_tool("sanlock", "sanlock");
    let s = Scratch::new("rindex-shared");
    let (_sl, t_sl, lk, t_lk, path) = shared_pair(&s);
    let rx = format!("rx:{}:{RX_OFF}", path.display());
    let (rv, text) = t_lk.rv(&["format", "-x", &rx]);
    assert_eq!(rv, 0, "lockd format: {text}");
    // Creates alternate: sanlock through its own client, lockd through client-lib.
    let wire_rx = Rindex::new(
        Name::new("rx").unwrap(),
        &path.display().to_string(),
        RX_OFF,
    )
    .unwrap();
    let mut made = BTreeMap::new();
    for (i, name) in ["a1", "a2", "a3", "a4", "a5", "a6"].iter().enumerate() {
        let off = if i % 2 == 0 {
            t_sl.create(&rx, name)
        } else {
            let re = Rentry::new(Name::new(name).unwrap(), 0);
            match Client::connect(&lk.run_dir)
                .unwrap()
                .create_resource(&wire_rx, 0, &re, 0, 0)
                .unwrap()
            {
                (0, out) => Ok(out.offset),
                (rv, _) => Err(rv),
            }
        };
        let off =
            off.unwrap_or_else(|rv| panic!("create {name}: {rv}\n{}", tail(&lk.log_text(), 20)));
        made.insert(name.to_string(), off);
    }
    // Each daemon finds every entry, whoever made it.
    for t in [&t_sl, &t_lk] {
        for (name, off) in &made {
            assert_eq!(
                t.lookup(&rx, Some(name)),
                Ok((name.clone(), *off)),
                "{} lookup {name}",
                t.kind
            );
            assert_eq!(
                t.lookup(&rx, Some(&format!(":{off}"))),
                Ok((name.clone(), *off)),
                "{} lookup by offset {off}",
                t.kind
            );
        }
    }
    // Deletes through each; the other side sees them gone.
    assert_eq!(t_sl.rv(&["delete", "-x", &rx, "-e", "a2"]).0, 0);
    let a5 = Rentry::new(Name::new("a5").unwrap(), 0);
    let (rv, _) = Client::connect(&lk.run_dir)
        .unwrap()
        .delete_resource(&wire_rx, 0, &a5)
        .unwrap();
    assert_eq!(rv, 0, "lockd delete a5");
    for t in [&t_sl, &t_lk] {
        assert_eq!(t.lookup(&rx, Some("a2")), Err(-2), "{}", t.kind);
        assert_eq!(t.lookup(&rx, Some("a5")), Err(-2), "{}", t.kind);
        assert_eq!(
            t.lookup(&rx, Some("a6")),
            Ok(("a6".into(), made["a6"])),
            "{}",
            t.kind
        );
        // The first free slot is the one a2 left.
        assert_eq!(
            t.lookup(&rx, None),
            Ok(("-".into(), made["a2"])),
            "{}",
            t.kind
        );
    }
    // rebuild through lockd keeps exactly the live entries; sanlock agrees.
    assert_eq!(t_lk.rv(&["rebuild", "-x", &rx]).0, 0);
    for t in [&t_sl, &t_lk] {
        assert_eq!(
            t.lookup(&rx, Some("a4")),
            Ok(("a4".into(), made["a4"])),
            "{}",
            t.kind
        );
        assert_eq!(t.lookup(&rx, Some("a2")), Err(-2), "{}", t.kind);
    }
    t_lk.leave("rx", 2, &path);
    t_sl.leave("rx", 1, &path);
}

/// The index area and every resource slot: what a refused operation must not change.
/// (The rindex_lease in between may get a new lver: sanlock and lockd take it before
/// they find out that the operation cannot be done.)
fn hash(path: &Path) -> Vec<u8> {
    let b = std::fs::read(path).expect("read disk");
    let mut v = b[RX_OFF as usize..(RX_OFF + MIB) as usize].to_vec();
    v.extend_from_slice(&b[SLOT0 as usize..]);
    v
}

#[test]
fn bad_input_gets_sanlock_codes_and_changes_nothing() {
    require_tool("sanlock", "sanlock");
    let s = Scratch::new("rindex-bad");
    let mut results: BTreeMap<&str, Vec<(String, i32)>> = BTreeMap::new();
    let (sl, t_sl) = start_sanlock(&s);
    let (lk, t_lk) = start_lockd(&s, "rx-lockd");
    for t in [&t_sl, &t_lk] {
        let path = s.file(&format!("bad-{}", t.kind), 8);
        init_lockspace("rx", &path, 0);
        let rx = format!("rx:{}:{RX_OFF}", path.display());
        let mut r = Vec::new();
        // Not joined: create and lookup need the lockspace.
        r.push((
            "create before format, not joined".into(),
            t.rv(&["create", "-x", &rx, "-e", "x"]).0,
        ));
        let (rv, _) = t.rv(&["format", "-x", &rx]);
        assert_eq!(rv, 0);
        r.push((
            "create, not joined".into(),
            t.rv(&["create", "-x", &rx, "-e", "x"]).0,
        ));
        r.push((
            "lookup, not joined".into(),
            t.rv(&["lookup", "-x", &rx, "-e", "x"]).0,
        ));
        t.join("rx", 1, &path);
        let before = hash(&path);
        let cases: Vec<(&str, Vec<String>)> = vec![
            (
                "delete unknown",
                vec![
                    "delete".into(),
                    "-x".into(),
                    rx.clone(),
                    "-e".into(),
                    "nosuch".into(),
                ],
            ),
            (
                "lookup unknown",
                vec![
                    "lookup".into(),
                    "-x".into(),
                    rx.clone(),
                    "-e".into(),
                    "nosuch".into(),
                ],
            ),
            (
                "lookup unaligned offset",
                vec![
                    "lookup".into(),
                    "-x".into(),
                    rx.clone(),
                    "-e".into(),
                    format!(":{}", SLOT0 + 512),
                ],
            ),
            (
                "update unaligned offset",
                vec![
                    "update".into(),
                    "-x".into(),
                    rx.clone(),
                    "-e".into(),
                    format!("y:{}", SLOT0 + 512),
                ],
            ),
            (
                "update without offset",
                vec![
                    "update".into(),
                    "-x".into(),
                    rx.clone(),
                    "-e".into(),
                    "y".into(),
                ],
            ),
            (
                "other lockspace name",
                vec![
                    "lookup".into(),
                    "-x".into(),
                    format!("other:{}:{RX_OFF}", path.display()),
                    "-e".into(),
                    "x".into(),
                ],
            ),
            (
                "no index at offset",
                vec![
                    "lookup".into(),
                    "-x".into(),
                    format!("rx:{}:{}", path.display(), 6 * MIB),
                    "-e".into(),
                    "x".into(),
                ],
            ),
            (
                "create, no index at offset",
                vec![
                    "create".into(),
                    "-x".into(),
                    format!("rx:{}:{}", path.display(), 6 * MIB),
                    "-e".into(),
                    "x".into(),
                ],
            ),
        ];
        for (what, args) in &cases {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            r.push((what.to_string(), t.rv(&args).0));
        }
        // sanlock's "no index here" check reads the header: lockd must not have written
        // anything for any of these.
        assert_eq!(
            first_diff(&before, &hash(&path)),
            None,
            "{}: disk changed",
            t.kind
        );
        t.leave("rx", 1, &path);
        results.insert(t.kind, r);
    }
    println!("{:<36} {:>8} {:>8}", "case", "sanlock", "lockd");
    for (a, b) in results["sanlock"].iter().zip(&results["lockd"]) {
        println!("{:<36} {:>8} {:>8}", a.0, a.1, b.1);
    }
    assert_eq!(
        results["lockd"],
        results["sanlock"],
        "lockd log:\n{}",
        tail(&lk.log_text(), 30)
    );
    drop(sl);
}

/// One request cut short: (what, command, bytes of the payload actually sent).
const SHORT_REQUESTS: [(&str, u32, usize); 6] = [
    ("format, half a sanlk_rindex", SM_CMD_FORMAT_RINDEX, 500),
    ("rebuild, no payload", SM_CMD_REBUILD_RINDEX, 0),
    ("lookup, 100 bytes", SM_CMD_LOOKUP_RINDEX, 100),
    (
        "lookup, sanlk_rentry cut",
        SM_CMD_LOOKUP_RINDEX,
        RINDEX_LEN + 10,
    ),
    (
        "create, no sanlk_rentry",
        SM_CMD_CREATE_RESOURCE,
        RINDEX_LEN,
    ),
    (
        "delete, one byte short",
        SM_CMD_DELETE_RESOURCE,
        RINDEX_LEN + RENTRY_LEN - 1,
    ),
];

/// A reply: (result, header length, payload).
type Reply = (i32, u32, Vec<u8>);

/// Sends `cmd` with only `len` bytes of a valid request for `rx`/`re` (the header
/// claiming just those), closes the sending side, and returns what comes back:
/// (result, reply length, reply payload), or `None` when the daemon closed without
/// answering.
fn short_request(run_dir: &Path, cmd: u32, rx: &Rindex, re: &Rentry, len: usize) -> Option<Reply> {
    let mut payload = Vec::new();
    rx.encode_into(&mut payload);
    payload.extend_from_slice(&re.encode());
    payload.truncate(len);
    let mut c = Client::connect(run_dir).expect("connect");
    c.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .expect("read timeout");
    c.send(cmd, 0, 0, 0, &payload).expect("send");
    c.stream()
        .shutdown(std::net::Shutdown::Write)
        .expect("shutdown");
    c.recv_reply().ok().map(|(h, p)| (h.result(), h.length, p))
}

/// A full index, then requests cut short, on `path` through `t`; returns what was
/// answered. The index area and slots must be unchanged by all the refused requests.
fn full_and_short(t: &Target, path: &Path) -> Vec<(String, Option<Reply>)> {
    init_lockspace("rx", path, 0);
    let rx = format!("rx:{}:{RX_OFF}", path.display());
    let mut wire_rx = Rindex::new(
        Name::new("rx").unwrap(),
        &path.display().to_string(),
        RX_OFF,
    )
    .unwrap();
    wire_rx.max_resources = 2;
    let mut log = Vec::new();
    let mut c = Client::connect(&t.run_dir).unwrap();
    log.push((
        "format max_resources 2".to_string(),
        Some((c.format_rindex(&wire_rx, 0).unwrap(), 0, Vec::new())),
    ));
    t.join("rx", 1, path);
    assert_eq!(t.create(&rx, "f1"), Ok(SLOT0), "{}", t.kind);
    assert_eq!(t.create(&rx, "f2"), Ok(SLOT0 + MIB), "{}", t.kind);
    let before = hash(path);
    // Full: the slot search finds nothing.
    let f3 = t.create(&rx, "f3").err().unwrap_or(0);
    log.push(("create in a full index".into(), Some((f3, 0, Vec::new()))));
    let re = Rentry::new(Name::new("f2").unwrap(), 0);
    for (what, cmd, len) in SHORT_REQUESTS {
        log.push((
            what.to_string(),
            short_request(&t.run_dir, cmd, &wire_rx, &re, len),
        ));
    }
    assert_eq!(
        first_diff(&before, &hash(path)),
        None,
        "{}: disk changed",
        t.kind
    );
    // Still serving: the next client is answered.
    let (rv, e) = Client::connect(&t.run_dir)
        .unwrap()
        .lookup_rindex(&wire_rx, 0, &re)
        .unwrap();
    assert_eq!((rv, e.offset), (0, SLOT0 + MIB), "{}", t.kind);
    log
}

#[test]
fn full_index_and_requests_cut_short_as_sanlock() {
    require_tool("sanlock", "sanlock");
    let s = Scratch::new("rindex-full");
    let (sl, t_sl) = start_sanlock(&s);
    let (lk, t_lk) = start_lockd(&s, "rx-lockd");
    let from_sanlock = full_and_short(&t_sl, &s.file("full-sl", 8));
    let path = s.file("full-lk", 8);
    let from_lockd = full_and_short(&t_lk, &path);
    for (a, b) in from_sanlock.iter().zip(&from_lockd) {
        println!(
            "{:<32} sanlock {:?}\n{:<32} lockd   {:?}",
            a.0, a.1, "", b.1
        );
    }
    assert_eq!(
        from_lockd,
        from_sanlock,
        "lockd log:\n{}",
        tail(&lk.log_text(), 30)
    );
    // Every entry command answered with header + a zeroed sanlk_rentry.
    for (what, reply) in &from_lockd {
        if what.starts_with("lookup") || what.starts_with("create,") || what.starts_with("delete") {
            assert_eq!(
                reply,
                &Some((-libc::ENOTCONN, 32 + 64, vec![0u8; 64])),
                "{what}"
            );
        }
    }
    // A duplicate name is refused by lockd (sanlock would index it twice), the disk
    // unchanged.
    let rx = format!("rx:{}:{RX_OFF}", path.display());
    let before = hash(&path);
    assert_eq!(t_lk.create(&rx, "f1"), Err(-libc::EEXIST));
    assert_eq!(first_diff(&before, &hash(&path)), None, "disk changed");
    t_lk.leave("rx", 1, &path);
    drop(sl);
}

#[test]
fn racing_creates_from_two_hosts_never_collide() {
    require_tool("sanlock", "sanlock");
    let s = Scratch::new("rindex-race");
    let (_sl, t_sl, _lk, t_lk, path) = shared_pair(&s);
    let rx = format!("rx:{}:{RX_OFF}", path.display());
    assert_eq!(t_sl.rv(&["format", "-x", &rx]).0, 0);
    let worker = |t: Target, prefix: &'static str, rx: String| {
        std::thread::spawn(move || {
            let mut made = Vec::new();
            let mut refused = BTreeSet::new();
            for i in 0..5 {
                let name = format!("{prefix}{i}");
                // The internal lease is taken with OWNER_NOWAIT: a create racing the other
                // host's fails at once (-243/-EBUSY…); retry, as a caller would.
                let mut tries = 0;
                loop {
                    match t.create(&rx, &name) {
                        Ok(off) => {
                            made.push((name.clone(), off));
                            break;
                        }
                        Err(rv) => {
                            refused.insert(rv);
                            tries += 1;
                            assert!(tries < 60, "{} create {name} kept failing: {rv}", t.kind);
                            std::thread::sleep(std::time::Duration::from_millis(200));
                        }
                    }
                }
            }
            (made, refused)
        })
    };
    let a = worker(
        Target {
            kind: "sanlock",
            run_dir: t_sl.run_dir.clone(),
        },
        "s",
        rx.clone(),
    );
    let b = worker(
        Target {
            kind: "lockd",
            run_dir: t_lk.run_dir.clone(),
        },
        "l",
        rx.clone(),
    );
    let (ma, ra) = a.join().expect("sanlock worker");
    let (mb, rb) = b.join().expect("lockd worker");
    println!("sanlock made {ma:?} (refusals {ra:?}); lockd made {mb:?} (refusals {rb:?})");
    let all: Vec<(String, u64)> = ma.into_iter().chain(mb).collect();
    let offsets: BTreeSet<u64> = all.iter().map(|(_, o)| *o).collect();
    assert_eq!(offsets.len(), all.len(), "a slot was given twice: {all:?}");
    // The index on disk holds every name exactly once, at the offset its creator got.
    for (name, off) in &all {
        assert_eq!(t_lk.lookup(&rx, Some(name)), Ok((name.clone(), *off)));
        assert_eq!(
            t_sl.lookup(&rx, Some(&format!(":{off}"))),
            Ok((name.clone(), *off))
        );
    }
    t_lk.leave("rx", 2, &path);
    t_sl.leave("rx", 1, &path);
}
