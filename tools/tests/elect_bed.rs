//! Leader election under faults: three lockd hosts of the test bed (own PID and mount
//! namespaces, wdmd with an emulated watchdog, FUSE views of one loop device), each
//! running `lockd elect` with a writer that appends (token, host, time) through the
//! fencing store. Faults on the leader: kill -9 of its daemon, SIGSTOP of its daemon,
//! SIGSTOP of its command followed by a FORCE request from another host, a storage stall
//! on its path, a clean exit of its command.
//!
//! Asserted every time, from the records alone: tokens strictly increase across leaders;
//! at most one leader at any moment (the writers' own witness records); the store never
//! accepted a token lower than one it had accepted before; a new leader writes within
//! host_dead + 2·io_timeout of the fault (within a few seconds for faults the leader's
//! host survives); in the stall case the old leader's command was told to stop before its
//! daemon's kill escalation began.
//!
//! io_timeout 1 s, watchdog fire timeout 5 s: host_dead = 8·1 + 5 = 13 s.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use lockd_system_tests::testbed::{wall_s, Bed, HostKind, Proc};
use lockd_system_tests::witness;

const IO_TIMEOUT_S: u64 = 1;
const FIRE_TIMEOUT_S: u64 = 5;
const HOST_DEAD_S: f64 = (8 * IO_TIMEOUT_S + FIRE_TIMEOUT_S) as f64;
const RES: &str = "leader";

/// One scenario at a time: each runs 3 hosts whose timing must not starve.
static SERIAL: Mutex<()> = Mutex::new(());

struct Election {
    bed: Bed,
    store_log: PathBuf,
    _store: Proc,
    electors: Vec<Proc>,
}

fn store_bin(bed: &Bed) -> PathBuf {
    bed.programs
        .lockd
        .parent()
        .expect("bin dir")
        .join("lockd-fenced-store")
}

/// Accepted writes in the store log: (token, host, store time in s).
fn accepted(store_log: &Path) -> Vec<(u64, String, f64)> {
    let text = std::fs::read_to_string(store_log).unwrap_or_default();
    text.lines()
        .filter(|l| l.starts_with("accepted "))
        .filter_map(|l| {
            let kv = |k: &str| {
                l.split_whitespace()
                    .find_map(|w| w.strip_prefix(&format!("{k}=")).map(str::to_string))
            };
            Some((
                kv("token")?.parse().ok()?,
                kv("host")?,
                kv("store_ns")?.parse::<u128>().ok()? as f64 / 1e9,
            ))
        })
        .collect()
}

impl Election {
    fn start() -> Result<Election> {
        Election::start_on(true, 3)
    }

    /// `hosts` lockd hosts on a loop device (`on_loop`) or on a plain file shared the way
    /// a file on NFS is (each host's FUSE view opens it with O_DIRECT).
    fn start_on(on_loop: bool, hosts: u32) -> Result<Election> {
        let mut bed = if on_loop {
            Bed::new_on_loop(IO_TIMEOUT_S, FIRE_TIMEOUT_S, &[RES])?
        } else {
            Bed::new(IO_TIMEOUT_S, FIRE_TIMEOUT_S, &[RES])?
        };
        for i in 1..=hosts {
            bed.start_host(i, HostKind::Lockd)?;
        }
        for i in 1..=hosts {
            bed.join(i)?;
        }
        let sock = bed.dir.join("store.sock");
        let store_log = bed.dir.join("store.log");
        let store = {
            let child = std::process::Command::new(store_bin(&bed))
                .args(["serve", "--socket"])
                .arg(&sock)
                .arg("--log")
                .arg(&store_log)
                .stderr(std::fs::File::create(bed.dir.join("store.err"))?)
                .spawn()
                .context("start lockd-fenced-store")?;
            Proc {
                child,
                what: "store".into(),
            }
        };
        let deadline = Instant::now() + Duration::from_secs(5);
        while !sock.exists() {
            if Instant::now() > deadline {
                bail!("store socket never appeared");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let mut e = Election {
            bed,
            store_log,
            _store: store,
            electors: Vec::new(),
        };
        // Host 1 first, so that the fault hits a known leader; then the candidates.
        e.start_elector(1)?;
        e.wait_writes_from("host1", 3, Duration::from_secs(20))?;
        for i in 2..=hosts {
            e.start_elector(i)?;
        }
        std::thread::sleep(Duration::from_secs(2));
        Ok(e)
    }

    fn start_elector(&mut self, index: u32) -> Result<()> {
        let bed = &self.bed;
        let spec = format!("{}:{RES}:{}:1M", bed.lockspace, bed.disk(index));
        let host = format!("host{index}");
        let args: Vec<String> = [
            "elect",
            "-r",
            &spec,
            "--grace",
            "1",
            "--",
            &store_bin(bed).display().to_string(),
            "write",
            "--socket",
            &bed.dir.join("store.sock").display().to_string(),
            "--host",
            &host,
            "--witness",
            &bed.log.display().to_string(),
            "--res",
            RES,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let log = bed.dir.join(format!("elect-{host}.log"));
        let p = bed.spawn_in_host(index, &bed.programs.lockd, &args, &log)?;
        self.electors.push(p);
        Ok(())
    }

    fn wait_writes_from(&self, host: &str, n: usize, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            if accepted(&self.store_log)
                .iter()
                .filter(|a| a.1 == host)
                .count()
                >= n
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "{host} made fewer than {n} writes in {timeout:?}; elect log: {}",
                    self.elect_log(1)
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn elect_log(&self, index: u32) -> String {
        std::fs::read_to_string(self.bed.dir.join(format!("elect-host{index}.log")))
            .unwrap_or_default()
    }

    /// Pid (outside view) of host 1's writer: the child of host 1's `lockd elect`.
    fn writer_pid(&self) -> Result<u32> {
        let elect = self.electors[0].pid();
        // electors[0] is nsenter; its child is lockd elect, whose child is the writer.
        for p in lockd_system_tests::testbed::children_of(elect) {
            if let Some(&w) = lockd_system_tests::testbed::children_of(p).first() {
                return Ok(w);
            }
            // nsenter may exec in place: then p is the writer's parent's child.
            if std::fs::read_to_string(format!("/proc/{p}/comm"))
                .unwrap_or_default()
                .starts_with("lockd-fenced")
            {
                return Ok(p);
            }
        }
        bail!("host1's writer not found under {elect}")
    }

    /// Waits for the first accepted write by another host than host1 after `since`;
    /// returns (token, host, time).
    fn wait_new_leader(&self, since: f64, timeout: Duration) -> Result<(u64, String, f64)> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(a) = accepted(&self.store_log)
                .into_iter()
                .find(|a| a.1 != "host1" && a.2 > since)
            {
                return Ok(a);
            }
            if Instant::now() > deadline {
                bail!(
                    "no new leader within {timeout:?} of the fault; host2: {} host3: {}",
                    self.elect_log(2),
                    self.elect_log(3)
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The invariants every scenario must keep.
    fn check_records(&self) -> Result<()> {
        let text = std::fs::read_to_string(&self.bed.log).context("witness log")?;
        let events = witness::parse(&text).map_err(anyhow::Error::msg)?;
        let report = witness::check(&events);
        if !report.ok() {
            bail!("witness: {report:?}");
        }
        // Tokens strictly increase across leaders, in the order leaders started.
        let mut starts: Vec<(u128, String, u64)> = events
            .iter()
            .filter(|e| e.event == "start")
            .map(|e| (e.t_ns, e.host.clone(), e.lver.unwrap_or(0)))
            .collect();
        starts.sort();
        for w in starts.windows(2) {
            if w[1].2 <= w[0].2 {
                bail!("token did not grow: {:?} then {:?}", w[0], w[1]);
            }
        }
        // The store never accepted a token below one it had accepted.
        let mut highest = 0;
        for (token, host, t) in accepted(&self.store_log) {
            if token < highest {
                bail!("store accepted token {token} from {host} at {t} after {highest}");
            }
            highest = token;
        }
        Ok(())
    }
}

fn signal(pid: u32, sig: &str) -> Result<()> {
    let ok = std::process::Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status()?
        .success();
    if !ok {
        bail!("kill -{sig} {pid} failed");
    }
    Ok(())
}

/// Seconds since the epoch of a tracing timestamp `YYYY-MM-DDTHH:MM:SS.ffffffZ`.
fn parse_log_time(line: &str) -> Option<f64> {
    let ts = line.split_whitespace().next()?;
    let (date, time) = ts.trim_end_matches('Z').split_once('T')?;
    let mut d = date.split('-').map(|x| x.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let mut t = time.split(':');
    let (hh, mm): (i64, i64) = (t.next()?.parse().ok()?, t.next()?.parse().ok()?);
    let ss: f64 = t.next()?.parse().ok()?;
    // Days from the civil date (proleptic Gregorian), Howard Hinnant's algorithm.
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some((days * 86_400 + hh * 3600 + mm * 60) as f64 + ss)
}

fn takeover_bound() -> f64 {
    HOST_DEAD_S + 2.0 * IO_TIMEOUT_S as f64
}

fn run(scenario: &str) -> Result<()> {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let e = Election::start()?;
    let before = accepted(&e.store_log);
    let old_token = before
        .last()
        .map(|a| a.0)
        .context("no writes before the fault")?;
    let fault_at = wall_s();
    match scenario {
        "kill-daemon" => signal(e.bed.daemon_pid(1).context("daemon pid")?, "KILL")?,
        "sigstop-daemon" => signal(e.bed.daemon_pid(1).context("daemon pid")?, "STOP")?,
        "stall" => e.bed.fault(1, "stall")?,
        "cmd-exit" => signal(e.writer_pid()?, "TERM")?,
        "sigstop-cmd" => {
            signal(e.writer_pid()?, "STOP")?;
            // A hung leader keeps its lease; an operator on another host takes it.
            e.bed.lockd(
                2,
                &[
                    "request",
                    "-r",
                    &format!("{}:{RES}:{}:1M", e.bed.lockspace, e.bed.disk(2)),
                    "--next-lver",
                    "-f",
                    "force",
                ],
            )?;
        }
        s => bail!("unknown scenario {s}"),
    }
    let bound = match scenario {
        "kill-daemon" | "sigstop-daemon" | "stall" => takeover_bound(),
        // The leader's host is healthy: its lease is released at once.
        _ => 4.0 * IO_TIMEOUT_S as f64 + 5.0,
    };
    let (token, host, at) = e.wait_new_leader(fault_at, Duration::from_secs_f64(bound + 15.0))?;
    let takeover = at - fault_at;
    eprintln!(
        "elect-bed: scenario={scenario} old_token={old_token} new_token={token} new_leader={host} takeover_s={takeover:.2} bound_s={bound:.1}"
    );
    if token <= old_token {
        bail!("new leader's token {token} is not above {old_token}");
    }
    if takeover > bound {
        bail!("new leader after {takeover:.2} s, more than {bound:.1} s");
    }
    // Let the new leader write a little, then check every record.
    std::thread::sleep(Duration::from_secs(1));
    if scenario == "sigstop-daemon" {
        // The stopped daemon must not come back to life holding anything: resume it (its
        // watchdog may already have reset the host) and give it a moment.
        if let Some(pid) = e.bed.daemon_pid(1) {
            let _ = signal(pid, "CONT");
        }
        std::thread::sleep(Duration::from_secs(2));
    }
    e.check_records()?;
    let log1 = e.elect_log(1);
    match scenario {
        "kill-daemon" => {
            if !log1.contains("daemon_gone") && !log1.contains("daemon_silent") {
                bail!("host1's elect did not see its daemon die: {log1}");
            }
        }
        "sigstop-daemon" => {
            if !log1.contains("daemon_silent") {
                bail!("host1's elect did not see its daemon stop: {log1}");
            }
        }
        "sigstop-cmd" => {
            if !log1.contains("leadership lost (requested") {
                bail!("host1's elect got no request notice: {log1}");
            }
        }
        "stall" => {
            // The notice came with time left before the kill escalation, and the writer
            // was stopped before the daemon declared the lockspace failed.
            let Some(line) = log1.lines().find(|l| l.contains("renewal_failing")) else {
                bail!("host1's elect got no renewal_failing notice: {log1}");
            };
            let kill_in: f64 = line
                .split("kill escalation in ")
                .nth(1)
                .and_then(|r| r.split_whitespace().next())
                .and_then(|v| v.parse().ok())
                .context("kill_in in the notice")?;
            if kill_in <= 0.0 {
                bail!("notice came after the kill escalation began: {line}");
            }
            let text = std::fs::read_to_string(&e.bed.log)?;
            let events = witness::parse(&text).map_err(anyhow::Error::msg)?;
            let stopped = events
                .iter()
                .find(|ev| ev.host == "host1" && ev.event == "sigterm")
                .map(|ev| ev.t_ns as f64 / 1e9)
                .context("host1's writer recorded no SIGTERM")?;
            let daemon_log =
                std::fs::read_to_string(e.bed.host(1).dir.join("daemon.log")).unwrap_or_default();
            let failed_at = daemon_log
                .lines()
                .find(|l| l.contains("lockspace failed"))
                .and_then(parse_log_time);
            eprintln!(
                "elect-bed: stall notice kill_in={kill_in:.1}s writer_stopped_after_fault={:.2}s lockspace_failed_after_fault={:?}",
                stopped - fault_at,
                failed_at.map(|f| f - fault_at)
            );
            if let Some(f) = failed_at {
                if stopped >= f {
                    bail!("writer stopped at {stopped}, after the lockspace failed at {f}");
                }
            }
            // The daemon decided (logged "renewals failing") and the holder's command was
            // already stopping within 1 s of that decision.
            let decided_at = daemon_log
                .lines()
                .find(|l| l.contains("renewals failing"))
                .and_then(parse_log_time)
                .context("daemon logged no 'renewals failing' decision")?;
            eprintln!(
                "elect-bed: stall decision→writer SIGTERM {:.3}s",
                stopped - decided_at
            );
            if stopped - decided_at > 1.0 {
                bail!(
                    "the command was stopped {:.3} s after the daemon's decision (> 1 s)",
                    stopped - decided_at
                );
            }
        }
        _ => {
            if !log1.contains("exited") || !log1.contains("released") {
                bail!("host1's elect did not release after its command exited: {log1}");
            }
        }
    }
    Ok(())
}

fn check(scenario: &str) {
    if let Err(e) = run(scenario) {
        panic!("scenario {scenario}: {e:#}");
    }
}

/// A lockspace and a lease in a plain file shared by two hosts, with 20 ms added to every
/// I/O of both and a multi-second stall of the leader's path: a 3 s stall (below the
/// 6·io_timeout warning) is ridden out by the same leader; a long one moves the lease, and
/// the lease is never held twice.
#[test]
fn shared_file_with_latency_and_stalls() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let run = || -> Result<()> {
        let e = Election::start_on(false, 2)?;
        for i in 1..=2 {
            e.bed.fault(i, "delay 20")?;
        }
        e.wait_writes_from("host1", 10, Duration::from_secs(10))?;
        // A short stall: renewals are late, not failed long enough to warn.
        e.bed.fault(1, "stall")?;
        std::thread::sleep(Duration::from_secs(3));
        e.bed.fault(1, "delay 20")?;
        let short_stall_end = wall_s();
        std::thread::sleep(Duration::from_secs(3));
        if let Some(a) = accepted(&e.store_log).iter().find(|a| a.1 != "host1") {
            bail!("a 3 s stall moved the lease: {a:?}");
        }
        let late = accepted(&e.store_log)
            .iter()
            .filter(|a| a.1 == "host1" && a.2 > short_stall_end)
            .count();
        if late == 0 {
            bail!(
                "host1 stopped leading after a short stall: {}",
                e.elect_log(1)
            );
        }
        // A long stall: the leader stops, host2 takes over.
        let fault_at = wall_s();
        e.bed.fault(1, "stall")?;
        let (token, host, at) = e.wait_new_leader(fault_at, Duration::from_secs(40))?;
        eprintln!(
            "elect-bed: scenario=shared-file new_token={token} new_leader={host} takeover_s={:.2}",
            at - fault_at
        );
        if at - fault_at > takeover_bound() {
            bail!("takeover after {:.2} s", at - fault_at);
        }
        std::thread::sleep(Duration::from_secs(1));
        e.check_records()
    };
    if let Err(e) = run() {
        panic!("shared file: {e:#}");
    }
}

#[test]
fn leader_daemon_killed() {
    check("kill-daemon");
}

#[test]
fn leader_daemon_stopped() {
    check("sigstop-daemon");
}

#[test]
fn leader_command_stopped_then_forced_out() {
    check("sigstop-cmd");
}

#[test]
fn leader_storage_stalls() {
    check("stall");
}

#[test]
fn leader_command_exits_cleanly() {
    check("cmd-exit");
}
