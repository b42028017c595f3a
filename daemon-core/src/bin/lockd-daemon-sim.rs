//! `lockd-daemon-sim`: runs seeded whole-daemon simulations (several hosts' lockd-core
//! cores over lease-core's simulated disk and clocks) and checks their invariants.
//!
//! Usage: `lockd-daemon-sim --seeds N [--first-seed S] [--hosts H] [--duration SECONDS]
//! [--model fence|core-lockspaces] [--plant-bug NAME] [--verbose] [--trace]`
//!
//! Without `--model` the daemons run the daemon's lockspace lifecycle with storage
//! fencing on odd seeds (and, on even seeds, the core's own lifecycle at one daemon start
//! in four); `fence` fences on every seed; `core-lockspaces` runs the core's own
//! lifecycle only, without fencing, as the simulator did before (its seeds replay).
//!
//! The last line is `seeds=… steps=… … fences=… inputs=K/N violations=…` (`kills` counts
//! every kill order, `examine_kills` those of requests from other hosts, `fences` the peer
//! generations marked fenced, `inputs` the kinds of `Input` the seeds' cores were stepped
//! with, of all N; `--verbose` lists the kinds not reached on the line before); the exit
//! status is non-zero when a violation was found. With `--plant-bug`, a line says whether
//! the bug was caught.
#![forbid(unsafe_code)]

use std::process::ExitCode;
use std::time::Instant;

use lease_core::sim::cli::{SimArgs, SimCli};
use lockd_core::sim::{
    kinds_missing, run_seed, DaemonSimConfig, ShellPlantedBug, SpaceModel, INPUT_KINDS,
};
use lockd_core::CorePlantedBug;

fn usage() -> String {
    let core_bugs = CorePlantedBug::ALL.iter().map(|(n, _)| *n);
    let bugs: Vec<&str> = core_bugs
        .chain(ShellPlantedBug::ALL.iter().map(|(n, _)| *n))
        .collect();
    let models: Vec<&str> = SpaceModel::NAMED.iter().map(|(n, _)| *n).collect();
    format!(
        "usage: lockd-daemon-sim --seeds N [--first-seed S] [--hosts H (2-8)] \
         [--duration SECONDS] [--model {}] [--plant-bug {}] [--verbose] [--trace]",
        models.join("|"),
        bugs.join("|")
    )
}

fn parse_args() -> Result<SimArgs, String> {
    let models: Vec<&str> = SpaceModel::NAMED.iter().map(|(n, _)| *n).collect();
    SimCli {
        usage: &usage(),
        hosts: 2..=8,
        default_hosts: DaemonSimConfig::default().hosts,
        default_duration_s: DaemonSimConfig::default().duration_s,
        known_bug: &|n: &str| {
            CorePlantedBug::parse(n).is_some() || ShellPlantedBug::parse(n).is_some()
        },
        models: &models,
    }
    .parse(std::env::args().skip(1))
}

/// A failing seed's line, with the command that replays it (and, with `--verbose`,
/// every violation).
fn print_failure(args: &SimArgs, seed: u64, violations: &[String]) {
    let flag = |name: &str, value: Option<&str>| {
        value.map(|v| format!(" --{name} {v}")).unwrap_or_default()
    };
    let bug = flag("plant-bug", args.bug_name.as_deref());
    let model = flag("model", args.model.as_deref());
    let dur = (args.duration_s != DaemonSimConfig::default().duration_s)
        .then(|| args.duration_s.to_string());
    let dur = flag("duration", dur.as_deref());
    println!(
        "FAIL seed={seed} violations={} first: {} | replay: lockd-daemon-sim --seeds 1 --first-seed {seed} --hosts {}{dur}{model}{bug} --trace",
        violations.len(),
        violations[0],
        args.hosts
    );
    if args.verbose {
        for v in violations {
            println!("  {v}");
        }
    }
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
        shell_bug: args.bug_name.as_deref().and_then(ShellPlantedBug::parse),
        trace: args.trace,
        requests: true,
        spaces: args
            .model
            .as_deref()
            .and_then(SpaceModel::parse)
            .unwrap_or(SpaceModel::Mixed),
    };
    let start = Instant::now();
    let (mut steps, mut acquisitions, mut losses, mut kills, mut restarts) = (0, 0, 0, 0, 0);
    let (mut requests, mut examine_kills, mut fences) = (0, 0, 0);
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
        fences += r.stats.fences;
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
            print_failure(&args, seed, &r.violations);
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
        "seeds={} steps={steps} acquisitions={acquisitions} losses={losses} kills={kills} restarts={restarts} requests={requests} examine_kills={examine_kills} fences={fences} inputs={}/{} violations={violations} wall_s={:.1}",
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
