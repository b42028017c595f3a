//! A lease's LVB passes between a real sanlock 3.8 host and a lockd host sharing one
//! lockspace: written by one at exclusive release, read by the other at acquire, both
//! ways; a too-large LVB is refused with the same code on both and nothing on disk moves.

mod common;

use std::path::Path;

use common::*;

const RES_OFF: u64 = 1 << 20;

/// Acquires r1 with the LVB, prints the LVB read, sets `new` (unless empty), releases.
fn swap_lvb(run_dir: &Path, disk: &Path, new: &str) -> String {
    let script = format!(
        "import sanlock\n\
         D = [({disk:?}.encode(), {RES_OFF})]\n\
         fd = sanlock.register()\n\
         sanlock.acquire(b'ls', b'r1', D, slkfd=fd, lvb=True)\n\
         print(sanlock.get_lvb(b'ls', b'r1', D, 32).rstrip(b'\\0').decode())\n\
         if {new:?}:\n    sanlock.set_lvb(b'ls', b'r1', D, {new:?}.encode())\n\
         sanlock.release(b'ls', b'r1', D, slkfd=fd)\n",
        disk = disk.display().to_string(),
    );
    python_in(run_dir, &script)
}

/// Holds r1 with the LVB and tries an LVB one byte over the 4 KiB limit: the errno.
fn too_large(run_dir: &Path, disk: &Path) -> String {
    let script = format!(
        "import sanlock\n\
         D = [({disk:?}.encode(), {RES_OFF})]\n\
         fd = sanlock.register()\n\
         sanlock.acquire(b'ls', b'r1', D, slkfd=fd, lvb=True)\n\
         try:\n    sanlock.set_lvb(b'ls', b'r1', D, b'x' * 4097)\n    print('accepted')\n\
         except sanlock.SanlockException as e:\n    print('error', e.errno)\n\
         sanlock.release(b'ls', b'r1', D, slkfd=fd)\n",
        disk = disk.display().to_string(),
    );
    python_in(run_dir, &script)
}

fn lvb_sector(disk: &Path) -> Vec<u8> {
    // The LVB sector of a 512/1M lease (sector 2002 of the lease area).
    let off = RES_OFF + disk_format::area::lvb_offset(disk_format::Geometry::ALL[0]);
    let b = std::fs::read(disk).expect("read disk");
    b[off as usize..off as usize + 512].to_vec()
}

#[test]
fn lvb_written_by_one_kind_of_host_is_read_by_the_other() {
    require_python_sanlock();
    let s = Scratch::new("lvbcross");
    let disk = s.file("shared", 4);
    init_lockspace("ls", &disk, 0);
    init_resource("ls", "r1", &disk, RES_OFF);
    let sl = lockd_system_tests::SanlockDaemon::start("lvb-sanlock");
    let lk = LockdDaemon::start(&s, "lvb-lockd", &[]);
    let sl_dir = sl.run_dir.path().to_path_buf();
    let lk_dir = lk.run_dir.clone();
    let add = |host: u64| {
        format!(
            "import sanlock\nsanlock.add_lockspace(b'ls', {host}, {:?}.encode(), 0, iotimeout=1)\nprint('joined')\n",
            disk.display().to_string()
        )
    };
    let t = {
        let (dir, script) = (sl_dir.clone(), add(1));
        std::thread::spawn(move || python_in(&dir, &script))
    };
    assert_eq!(python_in(&lk_dir, &add(2)), "joined");
    assert_eq!(t.join().expect("sanlock join"), "joined");

    // sanlock writes, lockd reads and writes, sanlock reads.
    assert_eq!(swap_lvb(&sl_dir, &disk, "from-sanlock"), "");
    assert_eq!(swap_lvb(&lk_dir, &disk, "from-lockd"), "from-sanlock");
    // set_lvb replaces only the bytes given, on both (the rest of "from-sanlock" stays).
    assert_eq!(swap_lvb(&sl_dir, &disk, "again-sanlock"), "from-lockdck");
    assert_eq!(swap_lvb(&lk_dir, &disk, ""), "again-sanlock");

    // Too large: the same refusal on both; the LVB sector on disk is untouched.
    let before = lvb_sector(&disk);
    let from_sanlock = too_large(&sl_dir, &disk);
    let from_lockd = too_large(&lk_dir, &disk);
    assert!(from_sanlock.starts_with("error"), "sanlock: {from_sanlock}");
    assert_eq!(from_lockd, from_sanlock);
    assert_eq!(lvb_sector(&disk), before, "LVB sector changed");
    assert!(before.starts_with(b"again-sanlock\0"));
    let rem = |host: u64| {
        format!(
            "import sanlock\nsanlock.rem_lockspace(b'ls', {host}, {:?}.encode(), 0)\nprint('left')\n",
            disk.display().to_string()
        )
    };
    assert_eq!(python_in(&lk_dir, &rem(2)), "left");
    assert_eq!(python_in(&sl_dir, &rem(1)), "left");
}
