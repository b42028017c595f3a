//! `lockd-sim`: runs seeded multi-host simulations of lease-core and checks its invariants.
//!
//! Usage: `lockd-sim --seeds N [--first-seed S] [--hosts H] [--duration SECONDS]
//! [--model lease|fence]
//! [--plant-bug skip-phase2|no-host-dead-wait|stale-known-hosts|own-name-short-delay|take-before-preempt-confirmed]
//! [--verbose] [--trace]`
//!
//! `--model fence` runs the model of storage fencing by persistent reservations
//! (`lease_core::sim::fence`) instead of the lease algorithms; its planted bug
//! `take-before-preempt-confirmed` selects that model by itself.
#![forbid(unsafe_code)]

use std::process::ExitCode;
use std::time::Instant;

use lease_core::sim::fence::{parse_fence_bug, run_fence_seed};
use lease_core::sim::{parse_planted_bug, run_seed, SimConfig};

struct Args {
    seeds: u64,
    first_seed: u64,
    hosts: usize,
    duration_s: u64,
    bug_name: Option<String>,
    verbose: bool,
    trace: bool,
    fence_model: bool,
}

fn usage() -> String {
    "usage: lockd-sim --seeds N [--first-seed S] [--hosts H (2-16)] [--duration SECONDS] \
     [--model lease|fence] [--plant-bug skip-phase2|no-host-dead-wait|stale-known-hosts|\
     own-name-short-delay|take-before-preempt-confirmed] [--verbose] [--trace]"
        .to_string()
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        seeds: 100,
        first_seed: 1,
        hosts: 4,
        duration_s: SimConfig::default().duration_s,
        bug_name: None,
        verbose: false,
        trace: false,
        fence_model: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = |name: &str| it.next().ok_or(format!("{name} needs a value"));
        let num = |name: &str, v: String| {
            v.parse::<u64>()
                .map_err(|_| format!("{name}: not a number: {v:?}"))
        };
        match flag.as_str() {
            "--seeds" => a.seeds = num("--seeds", value("--seeds")?)?,
            "--first-seed" => a.first_seed = num("--first-seed", value("--first-seed")?)?,
            "--hosts" => {
                let h = num("--hosts", value("--hosts")?)?;
                if !(2..=16).contains(&h) {
                    return Err(format!("--hosts must be 2..16, got {h}"));
                }
                a.hosts = h as usize;
            }
            "--duration" => {
                a.duration_s = num("--duration", value("--duration")?)?;
                if a.duration_s == 0 {
                    return Err("--duration must be positive".into());
                }
            }
            "--plant-bug" => {
                let name = value("--plant-bug")?;
                if parse_fence_bug(&name).is_some() {
                    a.fence_model = true;
                } else if parse_planted_bug(&name).is_none() {
                    return Err(format!("unknown planted bug {name:?}"));
                }
                a.bug_name = Some(name);
            }
            "--model" => match value("--model")?.as_str() {
                "lease" => a.fence_model = false,
                "fence" => a.fence_model = true,
                m => return Err(format!("unknown model {m:?}: lease or fence")),
            },
            "--verbose" | "-v" => a.verbose = true,
            "--trace" => a.trace = true,
            "--help" | "-h" => return Err(usage()),
            other => return Err(format!("unknown argument {other:?}\n{}", usage())),
        }
    }
    Ok(a)
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    if args.bug_name.is_some()
        && args.fence_model != args.bug_name.as_deref().and_then(parse_fence_bug).is_some()
    {
        eprintln!("the planted bug belongs to the other model");
        return ExitCode::from(2);
    }
    if args.fence_model {
        return run_fence(&args);
    }
    let cfg = SimConfig {
        hosts: args.hosts,
        duration_s: args.duration_s,
        planted_bug: args.bug_name.as_deref().and_then(parse_planted_bug),
        trace: args.trace,
    };
    let start = Instant::now();
    let (mut acquisitions, mut faults, mut violations) = (0u64, 0u64, 0u64);
    for i in 0..args.seeds {
        let seed = args.first_seed.wrapping_add(i);
        let report = run_seed(seed, &cfg);
        acquisitions += report.stats.acquisitions;
        faults += report.stats.faults;
        if args.verbose {
            eprintln!("seed={seed} {:?}", report.stats);
        }
        for line in &report.trace {
            println!("seed={seed} {line}");
        }
        if !report.violations.is_empty() {
            violations += report.violations.len() as u64;
            let bug = args
                .bug_name
                .as_deref()
                .map(|b| format!(" --plant-bug {b}"))
                .unwrap_or_default();
            let dur = if args.duration_s == SimConfig::default().duration_s {
                String::new()
            } else {
                format!(" --duration {}", args.duration_s)
            };
            println!(
                "FAIL seed={seed} violations={} first: {} | replay: lockd-sim --seeds 1 --first-seed {seed} --hosts {}{dur}{bug} --verbose",
                report.violations.len(),
                report.violations[0],
                args.hosts
            );
            if args.verbose {
                for v in &report.violations {
                    println!("  {v}");
                }
            }
        }
    }
    println!(
        "seeds={} acquisitions={acquisitions} faults={faults} violations={violations} wall_s={:.1}",
        args.seeds,
        start.elapsed().as_secs_f64()
    );
    if violations == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// `--model fence`: the same report lines, with takes for acquisitions.
fn run_fence(args: &Args) -> ExitCode {
    let bug = args.bug_name.as_deref().and_then(parse_fence_bug);
    let start = Instant::now();
    let (mut takes, mut fences, mut refused, mut faults, mut violations) =
        (0u64, 0u64, 0u64, 0u64, 0u64);
    for i in 0..args.seeds {
        let seed = args.first_seed.wrapping_add(i);
        let r = run_fence_seed(seed, args.hosts, args.duration_s, bug, args.trace);
        takes += r.stats.takes;
        fences += r.stats.fences;
        refused += r.stats.writes_refused;
        faults += r.stats.faults;
        if args.verbose {
            eprintln!("seed={seed} {:?}", r.stats);
        }
        for line in &r.trace {
            println!("seed={seed} {line}");
        }
        if !r.violations.is_empty() {
            violations += r.violations.len() as u64;
            let b = args
                .bug_name
                .as_deref()
                .map(|b| format!(" --plant-bug {b}"))
                .unwrap_or_default();
            println!(
                "FAIL seed={seed} violations={} first: {} | replay: lockd-sim --model fence --seeds 1 --first-seed {seed} --hosts {} --duration {}{b} --trace",
                r.violations.len(),
                r.violations[0],
                args.hosts,
                args.duration_s
            );
        }
    }
    println!(
        "model=fence seeds={} acquisitions={takes} fences={fences} refused_writes={refused} faults={faults} violations={violations} wall_s={:.1}",
        args.seeds,
        start.elapsed().as_secs_f64()
    );
    if violations == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
