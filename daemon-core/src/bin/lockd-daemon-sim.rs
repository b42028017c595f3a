//! `lockd-daemon-sim`: runs seeded whole-daemon simulations (several hosts' lockd-core
//! cores over lease-core's simulated disk and clocks) and checks their invariants.
//!
//! Usage: `lockd-daemon-sim --seeds N [--first-seed S] [--hosts H] [--duration SECONDS]
//! [--plant-bug kill-before-notice|release-before-disk|grant-in-lost-lockspace|kill-non-holders|
//! examine-kills-lockspace|examine-kill-before-notice|removal-without-notice]
//! [--verbose] [--trace]`
//!
//! The last line is `seeds=… steps=… … inputs=K/N violations=…` (`kills` counts every kill
//! order, `examine_kills` those of requests from other hosts, `inputs` the kinds of
//! `Input` the seeds' cores were stepped with, of all N; `--verbose` lists the kinds not
//! reached on the line before); the exit status is non-zero when a
//! violation was found. With `--plant-bug`, a line says whether the bug was caught.
#![forbid(unsafe_code)]

use std::process::ExitCode;
use std::time::Instant;

use lease_core::sim::cli::{SimArgs, SimCli};
use lockd_core::sim::{kinds_missing, run_seed, DaemonSimConfig, INPUT_KINDS};
use lockd_core::CorePlantedBug;

fn usage() -> String {
    let bugs: Vec<&str> = CorePlantedBug::ALL.iter().map(|(n, _)| *n).collect();
    format!(
        "usage: lockd-daemon-sim --seeds N [--first-seed S] [--hosts H (2-8)] \
         [--duration SECONDS] [--plant-bug {}] [--verbose] [--trace]",
        bugs.join("|")
    )
}

fn parse_args() -> Result<SimArgs, String> {
    SimCli {
        usage: &usage(),
        hosts: 2..=8,
        default_hosts: DaemonSimConfig::default().hosts,
        default_duration_s: DaemonSimConfig::default().duration_s,
        known_bug: &|n: &str| CorePlantedBug::parse(n).is_some(),
        models: &[],
    }
    .parse(std::env::args().skip(1))
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let cfg = DaemonSimConfig {
        hosts: args.hosts,
        duration_s: args.duration_s,
        planted_bug: args.bug_name.as_deref().and_then(CorePlantedBug::parse),
        trace: args.trace,
        requests: true,
    };
    let start = Instant::now();
    let (mut steps, mut acquisitions, mut losses, mut kills, mut restarts) = (0, 0, 0, 0, 0);
    let (mut requests, mut examine_kills) = (0, 0);
    let (mut violations, mut failed_seeds, mut inputs) = (0u64, 0u64, 0u64);
    for i in 0..args.seeds {
        let seed = args.first_seed.wrapping_add(i);
        let r = run_seed(seed, &cfg);
        steps += r.stats.steps;
        acquisitions += r.stats.acquisitions;
        losses += r.stats.losses;
        kills += r.stats.kills;
        restarts += r.stats.restarts;
        requests += r.stats.requests;
        examine_kills += r.stats.examine_kills;
        inputs |= r.stats.inputs;
        if args.verbose {
            eprintln!("seed={seed} {:?}", r.stats);
        }
        for line in &r.trace {
            println!("seed={seed} {line}");
        }
        if !r.violations.is_empty() {
            violations += r.violations.len() as u64;
            failed_seeds += 1;
            let bug = args
                .bug_name
                .as_deref()
                .map(|b| format!(" --plant-bug {b}"))
                .unwrap_or_default();
            let dur = if args.duration_s == DaemonSimConfig::default().duration_s {
                String::new()
            } else {
                format!(" --duration {}", args.duration_s)
            };
            println!(
                "FAIL seed={seed} violations={} first: {} | replay: lockd-daemon-sim --seeds 1 --first-seed {seed} --hosts {}{dur}{bug} --trace",
                r.violations.len(),
                r.violations[0],
                args.hosts
            );
            if args.verbose {
                for v in &r.violations {
                    println!("  {v}");
                }
            }
        }
    }
    if let Some(bug) = &args.bug_name {
        if violations > 0 {
            println!(
                "planted bug {bug}: caught on {failed_seeds} of {} seeds",
                args.seeds
            );
        } else {
            println!("planted bug {bug}: NOT caught in {} seeds", args.seeds);
        }
    }
    let missing = kinds_missing(inputs);
    if args.verbose && !missing.is_empty() {
        println!("inputs not reached: {}", missing.join(" "));
    }
    println!(
        "seeds={} steps={steps} acquisitions={acquisitions} losses={losses} kills={kills} restarts={restarts} requests={requests} examine_kills={examine_kills} inputs={}/{} violations={violations} wall_s={:.1}",
        args.seeds,
        INPUT_KINDS.len() - missing.len(),
        INPUT_KINDS.len(),
        start.elapsed().as_secs_f64()
    );
    if violations == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
