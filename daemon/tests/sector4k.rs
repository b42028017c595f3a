//! Lockspaces and resources on a loop device with 4096-byte logical sectors, through the
//! daemon: 4K/8M (sanlock's default for 4K devices) and 4K/1M areas are formatted, read,
//! joined and leased with python3-sanlock; the LVB works on 4K/8M and is refused on 4K/1M
//! (where sanlock would write it outside the lease area); a real sanlock daemon joined to
//! the same 4K lockspace sees lockd's host LIVE and is refused a lease lockd holds.

mod common;

use common::*;

const MIB: u64 = 1 << 20;

#[test]
fn four_k_sector_lockspaces_and_resources() {
    require_python_sanlock();
    let s = Scratch::new("sector4k");
    let file = s.file("backing", 64);
    let lo = lockd_system_tests::LoopDevice::attach(&file, 4096);
    let dev = lo.device.display().to_string();
    let lk = LockdDaemon::start(&s, "k4-lockd", &[]);
    let dir = lk.run_dir.clone();

    // 4K/8M: lockspace at 0, resource at 8M. 4K/1M: lockspace at 32M, resource at 33M.
    let setup = format!(
        "import sanlock\n\
         D = b'{dev}'\n\
         print(sanlock.get_alignment(D))\n\
         sanlock.write_lockspace(b'k8', D, 0, iotimeout=1, align={a8}, sector=4096)\n\
         sanlock.write_resource(b'k8', b'r8', [(D, {a8})], align={a8}, sector=4096)\n\
         sanlock.write_lockspace(b'k1', D, {o1}, iotimeout=1, align={a1}, sector=4096)\n\
         sanlock.write_resource(b'k1', b'r1', [(D, {r1})], align={a1}, sector=4096)\n\
         print(sorted(sanlock.read_lockspace(D, 0, align={a8}, sector=4096).items()))\n\
         print(sorted(sanlock.read_resource(D, {a8}, align={a8}, sector=4096).items()))\n\
         print(sorted(sanlock.read_resource(D, {r1}, align={a1}, sector=4096).items()))\n",
        a8 = 8 * MIB,
        a1 = MIB,
        o1 = 32 * MIB,
        r1 = 33 * MIB,
    );
    let out = python_in(&dir, &setup);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], (8 * MIB).to_string(), "ALIGN of a 4K device");
    assert_eq!(lines[1], "[('iotimeout', 1), ('lockspace', b'k8')]");
    assert_eq!(
        lines[2],
        "[('lockspace', b'k8'), ('resource', b'r8'), ('version', 0)]"
    );
    assert_eq!(
        lines[3],
        "[('lockspace', b'k1'), ('resource', b'r1'), ('version', 0)]"
    );
    // The on-disk leaders say 4096-byte sectors.
    let bytes = std::fs::read(&file).expect("read backing file");
    for off in [0, 8 * MIB, 32 * MIB, 33 * MIB] {
        let l = disk_format::LeaderRecord::decode(&bytes[off as usize..off as usize + 512])
            .expect("leader");
        assert_eq!(l.sector_size, 4096, "leader at {off}");
    }

    // Join both (lockd host 1) and use the leases.
    let cycle = format!(
        "import sanlock\n\
         D = b'{dev}'\n\
         sanlock.add_lockspace(b'k8', 1, D, 0, iotimeout=1)\n\
         sanlock.add_lockspace(b'k1', 1, D, {o1}, iotimeout=1)\n\
         fd = sanlock.register()\n\
         sanlock.acquire(b'k8', b'r8', [(D, {a8})], slkfd=fd, lvb=True)\n\
         sanlock.set_lvb(b'k8', b'r8', [(D, {a8})], b'four-k')\n\
         print(sanlock.inquire(slkfd=fd)[0]['version'])\n\
         sanlock.release(b'k8', b'r8', [(D, {a8})], slkfd=fd)\n\
         sanlock.acquire(b'k8', b'r8', [(D, {a8})], slkfd=fd, lvb=True)\n\
         print(sanlock.get_lvb(b'k8', b'r8', [(D, {a8})], 16).rstrip(b'\\0'))\n\
         sanlock.release(b'k8', b'r8', [(D, {a8})], slkfd=fd)\n\
         try:\n    sanlock.acquire(b'k1', b'r1', [(D, {r1})], slkfd=fd, lvb=True)\n    print('lvb accepted')\n\
         except sanlock.SanlockException as e:\n    print('lvb refused', e.errno)\n\
         sanlock.acquire(b'k1', b'r1', [(D, {r1})], slkfd=fd, shared=True)\n\
         print([o['host_id'] for o in sanlock.read_resource_owners(b'k1', b'r1', [(D, {r1})], align={a1}, sector=4096)])\n\
         sanlock.release(b'k1', b'r1', [(D, {r1})], slkfd=fd)\n\
         sanlock.acquire(b'k1', b'r1', [(D, {r1})], slkfd=fd)\n\
         print(sanlock.inquire(slkfd=fd)[0]['version'])\n\
         sanlock.release(b'k1', b'r1', [(D, {r1})], slkfd=fd)\n",
        a8 = 8 * MIB,
        a1 = MIB,
        o1 = 32 * MIB,
        r1 = 33 * MIB,
    );
    let out = python_in(&dir, &cycle);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "1", "first lver");
    assert_eq!(lines[1], "b'four-k'", "LVB kept across release on 4K/8M");
    assert_eq!(
        lines[2],
        format!("lvb refused {}", libc::EINVAL),
        "LVB on 4K/1M"
    );
    assert_eq!(lines[3], "[1]", "shared owner");
    assert_eq!(
        lines[4], "2",
        "the shared acquire balloted lver 1, so exclusive is 2"
    );
    let lvb_off = 8 * MIB + disk_format::area::lvb_offset(disk_format::Geometry::ALL[4]);
    let bytes = std::fs::read(&file).expect("read backing file");
    assert!(
        bytes[lvb_off as usize..].starts_with(b"four-k\0"),
        "LVB at sanlock's 4K/8M position"
    );

    // A real sanlock host joins the 4K/8M lockspace as host 2.
    let sl = lockd_system_tests::SanlockDaemon::start("k4-sanlock");
    let sl_dir = sl.run_dir.path().to_path_buf();
    python_in(
        &sl_dir,
        &format!("import sanlock\nsanlock.add_lockspace(b'k8', 2, b'{dev}', 0, iotimeout=1)"),
    );
    assert!(
        wait_for(30, || {
            let (ok, text) = sl.client(&["gets", "-h", "1"]);
            ok && text
                .lines()
                .any(|l| l.starts_with("h 1 ") && l.contains("LIVE"))
        }),
        "sanlock never saw lockd's host LIVE on the 4K lockspace: {}",
        sl.client(&["gets", "-h", "1"]).1
    );
    let mut holder = lk.python_child(&format!(
        "import sanlock, time\nD=b'{dev}'\nfd = sanlock.register()\n\
         sanlock.acquire(b'k8', b'r8', [(D, {a8})], slkfd=fd)\nprint('held')\ntime.sleep(600)\n",
        a8 = 8 * MIB
    ));
    assert_eq!(holder.line(), "held");
    let refused = python_in(
        &sl_dir,
        &format!(
            "import sanlock\nfd = sanlock.register()\n\
             try:\n    sanlock.acquire(b'k8', b'r8', [(b'{dev}', {a8})], slkfd=fd)\n    print('ok')\n\
             except sanlock.SanlockException as e:\n    print('err', e.errno)\n",
            a8 = 8 * MIB
        ),
    );
    assert_eq!(refused, "err -243", "sanlock host vs lockd holder (IDLIVE)");
    holder.kill9();
    python_in(
        &sl_dir,
        &format!("import sanlock\nsanlock.rem_lockspace(b'k8', 2, b'{dev}', 0)"),
    );
    drop(sl);
    python_in(
        &dir,
        &format!(
            "import sanlock\nsanlock.rem_lockspace(b'k8', 1, b'{dev}', 0)\n\
             sanlock.rem_lockspace(b'k1', 1, b'{dev}', {o1})",
            o1 = 32 * MIB
        ),
    );
}
