//! Two lockd daemons (hosts 1 and 2) in one lockspace on a loop device: both LIVE to each
//! other, exclusive contention gives IDLIVE (-243), shared leases are shared across hosts
//! (an exclusive request meanwhile gets -EAGAIN), and the lease moves when released.

mod common;

use common::*;

const RES_OFF: u64 = 1 << 20;

fn script(lines: &[&str]) -> String {
    lines.join("\n")
}

#[test]
fn two_lockd_hosts_share_leases() {
    require_tool("sanlock", "sanlock");
    require_python_sanlock();
    let s = Scratch::new("twolockd");
    let file = s.file("backing", 8);
    let lo = Loop::attach(&file);
    let dev = lo.dev.display().to_string();
    init_lockspace("ls", &lo.dev, 0);
    init_resource("ls", "r1", &lo.dev, RES_OFF);
    let a = LockdDaemon::start(&s, "hostA", &[]);
    let b = LockdDaemon::start(&s, "hostB", &[]);
    let join = |d: &LockdDaemon, id: u64| {
        d.python(&format!(
            "import sanlock\nsanlock.add_lockspace(b'ls', {id}, b'{dev}', 0, iotimeout=1)"
        ))
    };
    join(&a, 1);
    join(&b, 2);
    let sees = |d: &LockdDaemon, other: u64| {
        d.python(
            "import sanlock\nprint([(h['host_id'], h['flags']) for h in sanlock.get_hosts(b'ls')])",
        )
        .contains(&format!("({other}, 3)"))
    };
    assert!(
        wait_for(30, || sees(&a, 2) && sees(&b, 1)),
        "hosts never saw each other LIVE"
    );

    let hold = |d: &LockdDaemon, shared: bool| {
        let mut c = d.python_child(&script(&[
            "import sanlock, time",
            &format!("D = b'{dev}'"),
            "fd = sanlock.register()",
            &format!(
                "sanlock.acquire(b'ls', b'r1', [(D, {RES_OFF})], slkfd=fd, shared={})",
                if shared { "True" } else { "False" }
            ),
            "print('held')",
            "time.sleep(600)",
        ]));
        assert_eq!(c.line(), "held");
        c
    };
    let try_acquire = |d: &LockdDaemon, shared: bool| {
        d.python(&script(&[
            "import sanlock",
            &format!("D = b'{dev}'"),
            "fd = sanlock.register()",
            "try:",
            &format!(
                "    sanlock.acquire(b'ls', b'r1', [(D, {RES_OFF})], slkfd=fd, shared={})",
                if shared { "True" } else { "False" }
            ),
            "    print('ok')",
            "except sanlock.SanlockException as e:",
            "    print('err', e.errno)",
        ]))
        .trim()
        .to_string()
    };

    // Exclusive on A: B is refused with IDLIVE.
    let mut ha = hold(&a, false);
    assert_eq!(try_acquire(&b, false), "err -243");
    assert_eq!(try_acquire(&b, true), "err -243");
    ha.kill9();
    // Released by A's client death: B takes it.
    assert!(
        wait_for(10, || try_acquire(&b, false) == "ok"),
        "B could not take r1"
    );

    // Shared on both hosts at once; an exclusive request then gets -EAGAIN (live SH holders).
    let mut sa = hold(&a, true);
    let mut sb = hold(&b, true);
    let owners = a.python(&format!(
        "import sanlock\nprint(sorted(o['host_id'] for o in sanlock.read_resource_owners(b'ls', b'r1', [(b'{dev}', {RES_OFF})])))"
    ));
    assert_eq!(owners.trim(), "[1, 2]");
    sb.kill9();
    assert_eq!(
        try_acquire(&b, false),
        "err 11",
        "EX while host A holds SH must be -EAGAIN"
    );
    sa.kill9();
    assert!(
        wait_for(10, || try_acquire(&b, false) == "ok"),
        "B could not take r1 exclusively"
    );
    drop(a);
    drop(b);
    drop(lo);
}
