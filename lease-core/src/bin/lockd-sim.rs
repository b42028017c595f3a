//! `lockd-sim`: runs seeded multi-host simulations of lease-core and checks its invariants.
//!
//! Usage: `lockd-sim --seeds N [--first-seed S] [--hosts H] [--duration SECONDS]
//! [--model lease|head-reads|multi-disk|fence|fence-abort|fence-multipath]
//! [--plant-bug skip-phase2|no-host-dead-wait|stale-known-hosts|own-name-short-delay|no-shared-hold|
//! accept-minority|
//! take-before-preempt-confirmed|preempt-conflict-means-fenced|holder-unregisters-at-leave|
//! empty-target-means-fenced|take-without-drain|key-lost-at-join-reregisters|
//! found-gone-skips-drain|foreign-keys-ignored] [--verbose] [--trace]`
//!
//! `--model head-reads` runs the lease model with lockd hosts' renewals reading the head of
//! the area (`lease_core::reads`, experimental). `--model multi-disk` runs it with every
//! resource lease on 2–4 disks that fail and stall on their own (`accept-minority` needs
//! it). `--model fence` runs the model of storage fencing by persistent reservations
//! (`lease_core::sim::fence`) instead of the lease algorithms; its planted bugs
//! (`take-before-preempt-confirmed`, `preempt-conflict-means-fenced`,
//! `holder-unregisters-at-leave`, `empty-target-means-fenced`) select that model by
//! themselves. `--model fence-abort` runs it on a target that takes PREEMPT AND ABORT (as
//! LIO and nvmet; `found-gone-skips-drain` needs it), `--model fence-multipath` on one
//! with two I_T nexuses per host (`foreign-keys-ignored` needs it).
#![forbid(unsafe_code)]

use std::process::ExitCode;
use std::time::Instant;

use lease_core::sim::cli::SimCli;
use lease_core::sim::fence::{parse_fence_bug, run_fence_seed_on, FenceTarget};
use lease_core::sim::{parse_planted_bug, run_seed, SimConfig};

/// What was asked, with the model chosen: `--model`, or the planted bug's own.
struct Args {
    seeds: u64,
    first_seed: u64,
    hosts: usize,
    duration_s: u64,
    bug_name: Option<String>,
    verbose: bool,
    trace: bool,
    fence_model: bool,
    fence_target: FenceTarget,
    head_reads: bool,
    multi_disk: bool,
}

const USAGE: &str =
    "usage: lockd-sim --seeds N [--first-seed S] [--hosts H (2-16)] [--duration SECONDS] \
     [--model lease|head-reads|multi-disk|fence|fence-abort|fence-multipath] [--plant-bug skip-phase2|\
     no-host-dead-wait|stale-known-hosts|own-name-short-delay|no-shared-hold|accept-minority|\
     take-before-preempt-confirmed|\
     preempt-conflict-means-fenced|holder-unregisters-at-leave|empty-target-means-fenced|\
     take-without-drain|key-lost-at-join-reregisters|found-gone-skips-drain|foreign-keys-ignored] \
     [--verbose] [--trace]";

fn parse_args() -> Result<Args, String> {
    let known = |n: &str| parse_fence_bug(n).is_some() || parse_planted_bug(n).is_some();
    let a = SimCli {
        usage: USAGE,
        hosts: 2..=16,
        default_hosts: 4,
        default_duration_s: SimConfig::default().duration_s,
        known_bug: &known,
        models: &[
            "lease",
            "head-reads",
            "multi-disk",
            "fence",
            "fence-abort",
            "fence-multipath",
        ],
    }
    .parse(std::env::args().skip(1))?;
    let fence_model = match a.model.as_deref() {
        Some(m) => m.starts_with("fence"),
        None => a.bug_name.as_deref().and_then(parse_fence_bug).is_some(),
    };
    let fence_target = match (a.model.as_deref(), a.bug_name.as_deref()) {
        (Some("fence-abort"), _) | (None, Some("found-gone-skips-drain")) => {
            FenceTarget::PreemptAndAbort
        }
        (Some("fence-multipath"), _) | (None, Some("foreign-keys-ignored")) => {
            FenceTarget::Multipath
        }
        _ => FenceTarget::PlainPreempt,
    };
    let multi_disk = a.model.as_deref() == Some("multi-disk")
        || (a.model.is_none() && a.bug_name.as_deref() == Some("accept-minority"));
    Ok(Args {
        seeds: a.seeds,
        first_seed: a.first_seed,
        hosts: a.hosts,
        duration_s: a.duration_s,
        bug_name: a.bug_name,
        verbose: a.verbose,
        trace: a.trace,
        fence_model,
        fence_target,
        head_reads: a.model.as_deref() == Some("head-reads"),
        multi_disk,
    })
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
        head_reads: args.head_reads,
        multi_disk: args.multi_disk,
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
                "FAIL seed={seed} violations={} first: {} | replay: lockd-sim{} --seeds 1 --first-seed {seed} --hosts {}{dur}{bug} --verbose",
                report.violations.len(),
                report.violations[0],
                if args.head_reads {
                    " --model head-reads"
                } else if args.multi_disk {
                    " --model multi-disk"
                } else {
                    ""
                },
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
    let model = match args.fence_target {
        FenceTarget::PlainPreempt => "fence",
        FenceTarget::PreemptAndAbort => "fence-abort",
        FenceTarget::Multipath => "fence-multipath",
    };
    let start = Instant::now();
    let (mut takes, mut fences, mut refused, mut faults, mut violations) =
        (0u64, 0u64, 0u64, 0u64, 0u64);
    let mut lockouts = 0u64;
    for i in 0..args.seeds {
        let seed = args.first_seed.wrapping_add(i);
        let r = run_fence_seed_on(
            args.fence_target,
            seed,
            args.hosts,
            args.duration_s,
            bug,
            args.trace,
        );
        takes += r.stats.takes;
        fences += r.stats.fences;
        refused += r.stats.writes_refused;
        faults += r.stats.faults;
        lockouts += r.stats.join_lockouts;
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
                "FAIL seed={seed} violations={} first: {} | replay: lockd-sim --model {model} --seeds 1 --first-seed {seed} --hosts {} --duration {}{b} --trace",
                r.violations.len(),
                r.violations[0],
                args.hosts,
                args.duration_s
            );
        }
    }
    println!(
        "model={model} seeds={} acquisitions={takes} fences={fences} refused_writes={refused} faults={faults} join_lockouts={lockouts} violations={violations} wall_s={:.1}",
        args.seeds,
        start.elapsed().as_secs_f64()
    );
    if violations == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
