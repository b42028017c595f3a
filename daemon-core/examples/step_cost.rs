//! What one `Core::step` costs with many leases held: a measurement, not a test.
//!
//! Every step ends with `Core::check_cheap` (one pass over the resource table, in release
//! builds too), and the monitor's tick walks every lockspace and its holders, all under
//! the daemon's core lock. This fills a core with N exclusive leases held by up to
//! [`CLIENTS`] clients (through `step`, as the daemon does; the client table holds at
//! most `MAX_CLIENTS` slots, so clients hold several leases each), then times, per
//! step: a tick, an INQUIRE, a RELEASE and the ACQUIRE back of one lease (with its disk
//! completions), and `check_cheap` alone. Run it with `cargo run --release -p lockd-core --example
//! step_cost [N...]`; it prints one table (docs/performance.md keeps the last one).
//!
//! The clock read here is the measurement's: the core itself reads none.

use std::time::Instant;

use disk_format::Name;
use lockd_core::space_state::{Phase, RenewalRec};
use lockd_core::{Core, CoreRequest, DiskOp, Effect, Input, LeaseHold, ResSpec};

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Held {
    lver: u64,
}

impl LeaseHold for Held {
    fn lver(&self) -> u64 {
        self.lver
    }
}

type C = Core<(), Held>;

const NOW_S: u64 = 100;

/// Clients holding the leases (well under the table's `MAX_CLIENTS`).
const CLIENTS: usize = 200;

fn name(s: &str) -> Name {
    Name::new(s).expect("a valid name")
}

fn spec(res: &str) -> ResSpec {
    ResSpec {
        ls: name("ls"),
        name: name(res),
        shared: false,
        persistent: false,
        disks: Vec::new(),
        lver: None,
        new_num_hosts: None,
    }
}

/// Runs `input`, completing every disk operation it asks for (successfully) until no
/// more come; returns how many steps that took.
fn run(c: &mut C, input: Input<(), Held>) -> usize {
    let mut pending = vec![input];
    let mut steps = 0;
    while let Some(input) = pending.pop() {
        steps += 1;
        for effect in c.step(NOW_S, input) {
            if let Effect::Disk { op, what, .. } = effect {
                let lver = match what {
                    DiskOp::Acquire { .. } => 1,
                    _ => 0,
                };
                pending.push(Input::DiskDone {
                    op,
                    result: Ok(Held { lver }),
                    failed_state: None,
                });
            }
        }
    }
    steps
}

fn client(c: &mut C, pid: i32) -> u32 {
    let connected = Input::Connected {
        fd: -1,
        pid,
        uid: 0,
        stream: None,
        replacing_own: false,
    };
    let ci = match c.step(NOW_S, connected).as_slice() {
        [Effect::Accepted { ci }] => *ci,
        other => panic!("not accepted: {other:?}"),
    };
    let register = Input::Request {
        ci,
        req: CoreRequest::Register,
    };
    assert!(c.step(NOW_S, register).is_empty());
    ci
}

fn acquire(ci: u32, res: &str) -> Input<(), Held> {
    Input::Request {
        ci,
        req: CoreRequest::Acquire {
            res: vec![spec(res)],
            cmd_flags: 0,
            owner_name: Name::EMPTY,
            opener: None,
        },
    }
}

/// A core with one joined lockspace and `n` leases held by `min(n, CLIENTS)` clients
/// (lease `j` by client `j % clients`, named `r{j}`).
fn filled(n: usize) -> (C, Vec<u32>) {
    let mut c = C::new(40);
    c.add_space(1, name("ls"), 10);
    let st = c.space_st_mut(1).expect("listed");
    st.add_result = Some(0);
    st.phase = Phase::Joined;
    st.renewal_ok(
        NOW_S,
        RenewalRec {
            timestamp: NOW_S,
            read_ms: 1,
            write_ms: 0,
            write_sent_ms: NOW_S * 1000,
            ended_ms: NOW_S * 1000 + 1,
        },
    );
    let clients = n.clamp(1, CLIENTS);
    let cis: Vec<u32> = (0..clients)
        .map(|i| client(&mut c, 1000 + i as i32))
        .collect();
    for j in 0..n {
        run(&mut c, acquire(cis[j % clients], &format!("r{j}")));
    }
    assert_eq!(c.tables.resources.len(), n, "every lease held");
    (c, cis)
}

/// Mean microseconds per call of `f` over `reps` calls.
fn mean_us(reps: usize, mut f: impl FnMut(usize)) -> f64 {
    let t0 = Instant::now();
    for i in 0..reps {
        f(i);
    }
    t0.elapsed().as_secs_f64() * 1e6 / reps as f64
}

fn main() {
    let sizes: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("a number of leases"))
        .collect();
    let sizes = if sizes.is_empty() {
        vec![10, 100, 1_000, 10_000]
    } else {
        sizes
    };
    println!(
        "| leases held | check_cheap µs | tick step µs | INQUIRE step µs | RELEASE + ACQUIRE of one lease µs (4 steps) |"
    );
    println!("|---:|---:|---:|---:|---:|");
    for n in sizes {
        let (mut c, cis) = filled(n);
        let reps = (2_000_000 / n.max(1)).clamp(2_000, 20_000);
        let check = mean_us(reps, |_| c.check_cheap().expect("consistent"));
        let tick = mean_us(reps, |_| {
            c.step(NOW_S, Input::Tick);
        });
        let inquire = mean_us(reps, |i| {
            let ci = cis[i % cis.len()];
            let req = CoreRequest::Inquire;
            c.step(NOW_S, Input::Request { ci, req });
        });
        let cycle = mean_us(reps, |i| {
            let j = i % n;
            let ci = cis[j % cis.len()];
            let res = format!("r{j}");
            let release = Input::Request {
                ci,
                req: CoreRequest::Release {
                    keys: vec![(name("ls"), name(&res))],
                    all: false,
                    rename: None,
                },
            };
            run(&mut c, release);
            run(&mut c, acquire(ci, &res));
        });
        assert_eq!(c.tables.resources.len(), n, "every lease held again");
        println!("| {n} | {check:.2} | {tick:.2} | {inquire:.2} | {cycle:.2} |");
    }
}
