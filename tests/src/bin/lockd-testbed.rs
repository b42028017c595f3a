//! `lockd-testbed SCENARIO`: runs one fencing scenario end to end on simulated hosts and
//! checks its timeline.
//!
//! ```text
//! lockd-testbed [--kind lockd|sanlock] [--io-timeout D] [--fire-timeout W] [--kill-grace G] SCENARIO
//! SCENARIO: kill-daemon | sigstop-daemon | stall-io | eio | kill-wdmd | kill-client | stubborn-holder
//!           | restart-daemon | clone-host
//! ```
//! Host 1 holds a resource through a witness holder; host 2 keeps trying to take it. The
//! fault hits host 1 at t=0. The run ends with
//! `scenario=S last_renewal_s=… recovery_s=… watchdog_fire_s=… takeover_s=… host_dead_s=… overlaps=N`
//! (seconds since the fault; `none` for what did not happen) and exits 0 only when the
//! timeline holds:
//! * recovery (host 1's holder gets killpath or SIGTERM) at last_renewal + 8·D, when the
//!   daemon is alive to do it;
//! * the watchdog fires no later than last_renewal + host_dead (8·D + W), when it fires;
//! * host 2 takes over no sooner than last_renewal + host_dead and within
//!   host_dead + 2·D + 1 s (kill-client: within 2·D + 2 s, no reset);
//! * the witness finds no overlap and increasing lver.
//!
//! Two scenarios check host_id ownership (issue 21):
//! * `restart-daemon`: host 1's daemon is killed (its holder ignores SIGTERM and keeps
//!   running) and started again at once under the same name; it rejoins and contends for
//!   the lease. Its rejoin must not complete before host 1's watchdog fires (the record
//!   it left was not released, so it takes the full host_dead wait), and the witness must
//!   find no overlap.
//! * `clone-host`: host 3 runs under host 1's name (a clone of its image) and joins
//!   host_id 1 while host 1 is live: the join must fail with -262 (host_id busy) after
//!   the full wait, and host 1 keeps its delta lease and its holder, unreset.

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use lockd_system_tests::testbed::{self, wall_s, Bed, HolderOpts, HostKind, Proc};
use lockd_system_tests::witness;

const SCENARIOS: [&str; 9] = [
    "kill-daemon",
    "sigstop-daemon",
    "stall-io",
    "eio",
    "kill-wdmd",
    "kill-client",
    "stubborn-holder",
    "restart-daemon",
    "clone-host",
];

struct Opts {
    kind: HostKind,
    io_timeout_s: u64,
    fire_timeout_s: u64,
    scenario: String,
}

fn parse_args(args: &[String]) -> Result<Opts> {
    let mut o = Opts {
        kind: HostKind::Lockd,
        io_timeout_s: 1,
        fire_timeout_s: 5,
        scenario: String::new(),
    };
    let mut i = 1;
    while i < args.len() {
        let a = args[i].as_str();
        let val = || {
            args.get(i + 1)
                .cloned()
                .with_context(|| format!("{a} needs a value"))
        };
        match a {
            "--kind" => {
                o.kind = match val()?.as_str() {
                    "lockd" => HostKind::Lockd,
                    "sanlock" => HostKind::Sanlock,
                    k => bail!("unknown --kind {k}"),
                };
                i += 1;
            }
            "--io-timeout" => {
                o.io_timeout_s = val()?.parse()?;
                i += 1;
            }
            "--fire-timeout" => {
                o.fire_timeout_s = val()?.parse()?;
                i += 1;
            }
            s if SCENARIOS.contains(&s) => o.scenario = s.to_string(),
            s => bail!("unknown argument {s:?}; scenarios: {}", SCENARIOS.join(" ")),
        }
        i += 1;
    }
    // wdmd tests every `interval` seconds and counts a client as failing one interval
    // before its expiry (last renewal + 8·D): 8·D must leave room for a keepalive.
    let interval = match o.fire_timeout_s {
        w if w >= 60 => 10,
        w if w >= 30 => 5,
        w if w >= 10 => 2,
        _ => 1,
    };
    if 8 * o.io_timeout_s <= interval + 1 {
        bail!(
            "io_timeout {} is too short for fire timeout {} (wdmd tests every {interval}s and would \
             never pet the watchdog): use io_timeout >= {}",
            o.io_timeout_s,
            o.fire_timeout_s,
            (interval + 2).div_ceil(8)
        );
    }
    if o.scenario.is_empty() {
        bail!("give a scenario: {}", SCENARIOS.join(" "));
    }
    Ok(o)
}

fn signal(pid: u32, sig: &str) -> Result<()> {
    let st = std::process::Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status()?;
    if !st.success() {
        bail!("kill -{sig} {pid} failed");
    }
    Ok(())
}

/// Events of `host` for `res` in the witness log, as (wall seconds, event).
fn witness_events(bed: &Bed, host: &str) -> Vec<(f64, String)> {
    let text = std::fs::read_to_string(&bed.log).unwrap_or_default();
    witness::parse(&text)
        .unwrap_or_default()
        .into_iter()
        .filter(|e| e.host == host)
        .map(|e| (e.t_ns as f64 / 1e9, e.event))
        .collect()
}

/// Waits (20 s at most) until a witness on `host` logged `start`: it holds the lease.
fn wait_for_start(bed: &Bed, host: &str) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !witness_events(bed, host).iter().any(|(_, e)| e == "start") {
        if Instant::now() > deadline {
            bail!("{host} never took the lease; see {}", bed.dir.display());
        }
        thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

fn fmt(v: Option<f64>) -> String {
    v.map_or("none".to_string(), |x| format!("{x:.2}"))
}

fn run(o: &Opts) -> Result<bool> {
    let d = o.io_timeout_s as f64;
    let w = o.fire_timeout_s as f64;
    let mut bed = Bed::new(o.io_timeout_s, o.fire_timeout_s, &["res"])?;
    eprintln!("testbed: {} in {}", o.scenario, bed.dir.display());
    bed.start_host(1, o.kind)?;
    bed.start_host(2, o.kind)?;
    bed.join(1)?;
    bed.join(2)?;

    let stubborn = o.scenario == "stubborn-holder";
    let restart = o.scenario == "restart-daemon";
    // eio uses a holder without killpath, so recovery is a SIGTERM; the others register a
    // killpath, which lockd runs instead of SIGTERM within the kill grace.
    let holder_opts = HolderOpts {
        killpath: o.scenario != "eio" && !restart,
        ignore_term: stubborn || restart,
        restrict: stubborn.then(|| "sigkill".to_string()),
        ..HolderOpts::default()
    };
    let holder = bed.start_holder(1, "res", 1, &holder_opts)?;
    wait_for_start(&bed, "host1")?;

    // Watch host 1's renewals on the backing image.
    let last_change = Arc::new(Mutex::new(wall_s()));
    let stop = Arc::new(AtomicBool::new(false));
    let image_bed_ts = {
        let last_change = last_change.clone();
        let stop = stop.clone();
        let image = bed.image.clone();
        thread::spawn(move || {
            let read_ts = || -> Option<u64> {
                use std::os::unix::fs::{FileExt, OpenOptionsExt};
                let f = std::fs::OpenOptions::new()
                    .read(true)
                    .custom_flags(libc::O_DIRECT)
                    .open(&image)
                    .ok()?;
                let mut v = vec![0u8; 8192];
                let s = v.as_ptr().align_offset(4096);
                f.read_exact_at(&mut v[s..s + 512], 0).ok()?;
                let mut b = [0u8; 8];
                b.copy_from_slice(&v[s + 152..s + 160]);
                Some(u64::from_le_bytes(b))
            };
            let mut prev = read_ts();
            while !stop.load(Ordering::Relaxed) {
                let now = read_ts();
                if now != prev {
                    *last_change.lock().unwrap_or_else(|p| p.into_inner()) = wall_s();
                    prev = now;
                }
                thread::sleep(Duration::from_millis(50));
            }
        })
    };
    // Let two renewals pass so the watcher has seen host 1 renew.
    thread::sleep(Duration::from_secs_f64(2.0 * 2.0 * d + 0.5));

    // Host 2's contender: retry the acquire until a witness on host 2 starts.
    let t0 = wall_s();
    let mut restarted: Option<Proc> = None;
    let mut rejoin: Option<Proc> = None;
    match o.scenario.as_str() {
        "kill-daemon" => signal(bed.daemon_pid(1).context("host1 daemon")?, "KILL")?,
        "restart-daemon" => {
            let old = bed.daemon_pid(1).context("host1 daemon")?;
            signal(old, "KILL")?;
            restarted = Some(bed.restart_daemon(1, old)?);
            let args = bed.add_lockspace_args(1, 1);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            rejoin = Some(bed.lockd_spawn(1, &args, &bed.dir.join("host1/rejoin.log"))?);
        }
        "sigstop-daemon" => signal(bed.daemon_pid(1).context("host1 daemon")?, "STOP")?,
        "stall-io" | "stubborn-holder" => bed.fault(1, "stall")?,
        "eio" => bed.fault(1, "eio")?,
        "kill-wdmd" => signal(bed.wdmd_pid(1).context("host1 wdmd")?, "KILL")?,
        "kill-client" => {
            let pid = testbed::children_of(holder.pid())
                .first()
                .copied()
                .unwrap_or(holder.pid());
            signal(pid, "KILL")?;
        }
        s => bail!("scenario {s} not handled"),
    }
    let host_dead = 8.0 * d + w;
    let limit = Instant::now() + Duration::from_secs_f64(host_dead + 2.0 * d + 30.0);
    let mut takeover = None;
    let mut attempt: Option<Proc> = None;
    let mut attempt_host1: Option<Proc> = None;
    let mut rejoined_at: Option<f64> = None;
    let mut reset_handled = false;
    while Instant::now() < limit {
        // restart-daemon: once host 1's restarted daemon has rejoined, it contends too.
        if let Some(p) = rejoin.as_mut() {
            if rejoined_at.is_none() {
                if let Some(st) = p.child.try_wait()? {
                    if st.success() && bed.host_alive(1) {
                        rejoined_at = Some(wall_s());
                    }
                }
            }
        }
        if rejoined_at.is_some() && bed.host_alive(1) {
            let finished = match attempt_host1.as_mut() {
                None => true,
                Some(p) => p.child.try_wait()?.is_some(),
            };
            if finished {
                attempt_host1 = Some(bed.start_holder(1, "res", 1, &HolderOpts::default())?);
            }
        }
        // A hardware reset ends the host's in-flight I/O too; the emulator can only kill
        // processes, so fail host 1's storage path once its watchdog has fired (a process
        // stuck in a stalled request could not die otherwise).
        if !reset_handled && bed.watchdog_fired_at(1).is_some() {
            let _ = bed.fault(1, "eio");
            reset_handled = true;
        }
        if let Some((t, _)) = witness_events(&bed, "host2")
            .into_iter()
            .find(|(_, e)| e == "start")
        {
            takeover = Some(t);
            break;
        }
        let finished = match attempt.as_mut() {
            None => true,
            Some(p) => p.child.try_wait()?.is_some(),
        };
        if finished {
            attempt = Some(bed.start_holder(2, "res", 1, &HolderOpts::default())?);
        }
        thread::sleep(Duration::from_millis(250));
    }
    drop(attempt);
    drop(attempt_host1);
    drop(rejoin);
    drop(restarted);
    // Give a reset a moment to be recorded if it is due.
    thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    let _ = image_bed_ts.join();

    let last_renewal = *last_change.lock().unwrap_or_else(|p| p.into_inner()) - t0;
    let h1 = witness_events(&bed, "host1");
    let recovery = h1
        .iter()
        .filter(|(t, e)| *t >= t0 && (e == "killpath" || e == "sigterm"))
        .map(|(t, _)| t - t0)
        .fold(None, |acc: Option<f64>, x| {
            Some(acc.map_or(x, |a| a.min(x)))
        });
    let fired = bed.watchdog_fired_at(1).map(|t| t - t0);
    let takeover = takeover.map(|t| t - t0);
    let rejoined = rejoined_at.map(|t| t - t0);
    let dead_at = last_renewal + host_dead;
    let report = witness::check(
        &witness::parse(&std::fs::read_to_string(&bed.log)?).map_err(anyhow::Error::msg)?,
    );
    let rejoin_note = if restart {
        format!(" host1_rejoin_s={}", fmt(rejoined))
    } else {
        String::new()
    };
    println!(
        "scenario={} last_renewal_s={:.2} recovery_s={} watchdog_fire_s={} takeover_s={} host_dead_s={:.2}{rejoin_note} overlaps={}",
        o.scenario,
        last_renewal,
        fmt(recovery),
        fmt(fired),
        fmt(takeover),
        dead_at,
        report.overlaps.len() + report.lver_violations.len()
    );

    let mut ok = true;
    let mut fail = |why: String| {
        eprintln!("TIMELINE VIOLATION: {why}");
        ok = false;
    };
    if !report.ok() {
        fail(format!(
            "witness: {:?} {:?}",
            report.overlaps, report.lver_violations
        ));
    }
    if let Some(r) = rejoined {
        // The killed daemon's holder runs until the reset: a rejoin before it would let
        // this host's new daemon hand out the lease the holder still has.
        match fired {
            Some(f) if r > f => {}
            _ => fail(format!(
                "host 1's restarted daemon rejoined host_id 1 at {r:.2}s, before its watchdog \
                 fired ({}); the killed daemon's holder was still running",
                fmt(fired)
            )),
        }
    }
    let Some(take) = takeover else {
        fail("host 2 never took the lease".into());
        return Ok(false);
    };
    let slack = 0.6;
    match o.scenario.as_str() {
        "kill-client" => {
            if fired.is_some() {
                fail("the watchdog fired although only a client died".into());
            }
            if take > 2.0 * d + 2.0 {
                fail(format!(
                    "takeover {take:.2}s after a client death (limit {:.1})",
                    2.0 * d + 2.0
                ));
            }
        }
        _ => {
            if take + slack < dead_at {
                fail(format!(
                    "takeover at {take:.2}s, before host_dead at {dead_at:.2}s"
                ));
            }
            if take > dead_at + 2.0 * d + 1.0 + slack {
                fail(format!(
                    "takeover at {take:.2}s, later than host_dead + 2D + 1 = {:.2}s",
                    dead_at + 2.0 * d + 1.0
                ));
            }
            if let Some(f) = fired {
                if f > dead_at + slack {
                    fail(format!(
                        "watchdog fired at {f:.2}s, after host_dead {dead_at:.2}s"
                    ));
                }
            }
        }
    }
    let recovery_expected = matches!(o.scenario.as_str(), "stall-io" | "eio" | "stubborn-holder");
    if recovery_expected {
        match recovery {
            None => fail("host 1's holder got neither killpath nor SIGTERM".into()),
            Some(r) => {
                let due = last_renewal + 8.0 * d;
                if r + slack < due || r > due + 1.0 + slack {
                    fail(format!(
                        "recovery at {r:.2}s, expected at last_renewal + 8D = {due:.2}s"
                    ));
                }
            }
        }
    }
    // The escalation ends the holder: SIGTERM (eio) or the killpath then SIGKILL after the
    // grace (stall-io). Its heartbeat must stop by then — or by the reset if that came first.
    if matches!(o.scenario.as_str(), "stall-io" | "eio") && o.kind == HostKind::Lockd {
        let last_alive = h1.iter().map(|(t, _)| t - t0).fold(f64::MIN, f64::max);
        let mut limit = last_renewal + 8.0 * d + testbed::KILL_GRACE_S as f64 + 1.0 + slack;
        if let Some(f) = fired {
            limit = limit.min(f + slack);
        }
        if last_alive > limit {
            fail(format!(
                "host 1's holder was still alive at {last_alive:.2}s; SIGKILL was due by {limit:.2}s"
            ));
        }
    }
    if matches!(
        o.scenario.as_str(),
        "kill-daemon" | "sigstop-daemon" | "kill-wdmd" | "stubborn-holder" | "restart-daemon"
    ) && fired.is_none()
    {
        fail("host 1 needed a reset but its watchdog never fired".into());
    }
    if stubborn && bed.host_alive(1) {
        let pid = bed.host(1).init_pid;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        fail(format!(
            "the stubborn holder's host was not reset (init {pid}: {stat})"
        ));
    }
    if let Some(secs) = std::env::var("LOCKD_TESTBED_PAUSE_S")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        eprintln!("testbed: pausing {secs}s before teardown (LOCKD_TESTBED_PAUSE_S)");
        thread::sleep(Duration::from_secs(secs));
    }
    drop(holder);
    Ok(ok)
}

/// `clone-host`: host 3 is a clone of host 1 (same configured name) and joins host_id 1
/// while host 1 holds it and a lease.
fn run_clone(o: &Opts) -> Result<bool> {
    if o.kind != HostKind::Lockd {
        bail!("clone-host runs on lockd hosts only");
    }
    let d = o.io_timeout_s as f64;
    let w = o.fire_timeout_s as f64;
    let mut bed = Bed::new(o.io_timeout_s, o.fire_timeout_s, &["res"])?;
    eprintln!("testbed: {} in {}", o.scenario, bed.dir.display());
    bed.start_host(1, o.kind)?;
    bed.join(1)?;
    let holder = bed.start_holder(1, "res", 1, &HolderOpts::default())?;
    wait_for_start(&bed, "host1")?;
    let name = bed.host(1).name.clone();
    bed.start_host_named(3, o.kind, &name)?;
    let t0 = wall_s();
    let joined = bed.join_as(3, 1);
    let answered = wall_s() - t0;
    // Host 1 must still be renewing: two renewals after the clone gave up.
    let ts_before = bed.delta_timestamp(1)?;
    thread::sleep(Duration::from_secs_f64(2.0 * 2.0 * d + 0.5));
    let ts_after = bed.delta_timestamp(1)?;
    let report = witness::check(
        &witness::parse(&std::fs::read_to_string(&bed.log)?).map_err(anyhow::Error::msg)?,
    );
    let holder_alive = witness_events(&bed, "host1")
        .iter()
        .any(|(t, e)| e == "alive" && *t > t0 + answered);
    let outcome = match &joined {
        Ok(()) => "joined".to_string(),
        Err(e) => format!("{e:#}")
            .lines()
            .last()
            .unwrap_or("")
            .trim()
            .to_string(),
    };
    println!(
        "scenario=clone-host clone_answer_s={answered:.2} clone_outcome={outcome:?} \
         host1_renewing={} host1_holder_alive={holder_alive} watchdog_fire_s={} overlaps={}",
        ts_after > ts_before,
        fmt(bed.watchdog_fired_at(1).map(|t| t - t0)),
        report.overlaps.len() + report.lver_violations.len()
    );
    let mut ok = true;
    let mut fail = |why: String| {
        eprintln!("TIMELINE VIOLATION: {why}");
        ok = false;
    };
    match joined {
        Ok(()) => fail("the clone joined host_id 1 while host 1 held it".into()),
        Err(e) => {
            let text = format!("{e:#}");
            if !text.contains("-262") {
                fail(format!(
                    "the clone's join failed, but not with -262: {text}"
                ));
            }
        }
    }
    // The clone saw host 1's record under its own name, not released: the long wait
    // (8·D + W) before it could tell the owner is alive.
    if answered + 0.5 < 8.0 * d + w {
        fail(format!(
            "the clone answered after {answered:.2}s, before the full wait 8D+W = {:.0}s",
            8.0 * d + w
        ));
    }
    if ts_after <= ts_before {
        fail("host 1 stopped renewing its delta lease".into());
    }
    if !holder_alive {
        fail("host 1's holder stopped".into());
    }
    if bed.watchdog_fired_at(1).is_some() {
        fail("host 1 was reset".into());
    }
    if !report.ok() {
        fail(format!(
            "witness: {:?} {:?}",
            report.overlaps, report.lver_violations
        ));
    }
    drop(holder);
    Ok(ok)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("host-init") {
        if args.len() != 7 {
            eprintln!("usage: lockd-testbed host-init DIR KIND NAME IO_TIMEOUT FIRE_TIMEOUT");
            return ExitCode::FAILURE;
        }
        let r = testbed::host_init(
            std::path::Path::new(&args[2]),
            &args[3],
            &args[4],
            &args[5],
            &args[6],
        );
        if let Err(e) = r {
            eprintln!("host-init: {e:#}");
        }
        return ExitCode::FAILURE;
    }
    let o = match parse_args(&args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("lockd-testbed: {e:#}");
            return ExitCode::from(2);
        }
    };
    let result = if o.scenario == "clone-host" {
        run_clone(&o)
    } else {
        run(&o)
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("lockd-testbed: {e:#}");
            ExitCode::FAILURE
        }
    }
}
