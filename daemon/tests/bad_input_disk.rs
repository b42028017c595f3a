//! Refused requests get sanlock's codes and leave the lease area alone: a request for an
//! old lease version, release of an unknown orphan, an event table already full — each
//! run against a real sanlock daemon and against lockd, codes compared, the resource
//! lease area hashed before and after.

mod common;

use std::path::Path;

use client_lib::proto::{SANLK_REL_ORPHAN, SM_CMD_RELEASE};
use client_lib::{Client, ResourceHead};
use common::*;
use disk_format::Name;

const RES_OFF: u64 = 1 << 20;

fn lease_area(disk: &Path) -> Vec<u8> {
    let b = std::fs::read(disk).expect("read disk");
    b[RES_OFF as usize..2 * RES_OFF as usize].to_vec()
}

/// Runs the refused operations against one daemon; returns (case, result) rows.
fn refusals(
    run_dir: &Path,
    disk: &Path,
    holder_py: impl Fn(&str) -> PyChild,
) -> Vec<(String, String)> {
    let d = disk.display().to_string();
    python_in(
        run_dir,
        &format!("import sanlock\nsanlock.add_lockspace(b'ls', 1, b'{d}', 0, iotimeout=1)"),
    );
    let mut holder = holder_py(&format!(
        "import sanlock, time\nfd = sanlock.register()\n\
         sanlock.acquire(b'ls', b'r1', [(b'{d}', {RES_OFF})], slkfd=fd)\nprint('held')\ntime.sleep(600)\n"
    ));
    assert_eq!(holder.line(), "held");
    let before = lease_area(disk);
    let mut rows = Vec::new();
    let request = |version: u64| {
        python_in(
            run_dir,
            &format!(
                "import sanlock\ntry:\n    sanlock.request(b'ls', b'r1', [(b'{d}', {RES_OFF})], action=sanlock.REQ_FORCE, version={version})\n    print('ok')\n\
                 except sanlock.SanlockException as e:\n    print('error', e.errno)\n"
            ),
        )
    };
    rows.push(("request, version held (1)".to_string(), request(1)));
    rows.push(("request, older version (0 → lver)".to_string(), request(0)));
    // REL_ORPHAN naming a lease that is not an orphan, and one that does not exist.
    for name in ["r1", "nosuch"] {
        let mut c = Client::connect(run_dir).unwrap();
        c.register().unwrap();
        let head = ResourceHead::named(Name::new("ls").unwrap(), Name::new(name).unwrap());
        let mut p = Vec::new();
        head.encode_into(&mut p);
        let (h, _) = c
            .call(SM_CMD_RELEASE, SANLK_REL_ORPHAN, 1, u32::MAX, &p)
            .unwrap();
        rows.push((format!("release orphan {name}"), h.result().to_string()));
    }
    // Event listeners: register until the table is full.
    rows.push((
        "reg_event until refused".to_string(),
        python_in(
            run_dir,
            concat!(
                "import sanlock\n",
                "fds = []\n",
                "for i in range(64):\n",
                "    try:\n",
                "        fds.append(sanlock.reg_event(b'ls'))\n",
                "    except sanlock.SanlockException as e:\n",
                "        print(len(fds), 'then error', e.errno)\n",
                "        break\n",
                "else:\n",
                "    print('never refused')\n",
            ),
        ),
    ));
    assert!(
        lease_area(disk) == before,
        "a refused request changed the lease area"
    );
    holder.kill9();
    std::thread::sleep(std::time::Duration::from_millis(500));
    python_in(
        run_dir,
        &format!("import sanlock\nsanlock.rem_lockspace(b'ls', 1, b'{d}', 0)"),
    );
    rows
}

#[test]
fn refused_requests_match_sanlock_and_leave_the_disk_alone() {
    require_python_sanlock();
    let s = Scratch::new("badinput");
    let disks: Vec<_> = ["sanlock", "lockd"]
        .iter()
        .map(|k| {
            let p = s.file(k, 3);
            init_lockspace("ls", &p, 0);
            init_resource("ls", "r1", &p, RES_OFF);
            p
        })
        .collect();
    let sl = lockd_system_tests::SanlockDaemon::start("bad-sanlock");
    let sl_dir = sl.run_dir.path().to_path_buf();
    let from_sanlock = refusals(&sl_dir, &disks[0], |script| PyChild::spawn(script, &sl_dir));
    drop(sl);
    let lk = LockdDaemon::start(&s, "bad-lockd", &[]);
    let from_lockd = refusals(&lk.run_dir, &disks[1], |script| lk.python_child(script));
    println!("{:<36} | {:<24} | {:<24}", "case", "sanlock", "lockd");
    for (a, b) in from_sanlock.iter().zip(&from_lockd) {
        println!("{:<36} | {:<24} | {:<24}", a.0, a.1, b.1);
    }
    assert_eq!(
        from_lockd,
        from_sanlock,
        "lockd log:\n{}",
        tail(&lk.log_text(), 20)
    );
    assert!(
        from_sanlock[0].1.starts_with("error"),
        "sanlock accepted an old request"
    );
}
