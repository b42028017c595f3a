//! `lockd-witness`: the lease holder used by the system tests, and its checker.
//!
//! ```text
//! lockd-witness hold  --log L --host H --res R [--ignore-term] [--heartbeat-ms 100]
//!                     [--disk PATH --disk-offset BYTES]
//! lockd-witness note  LOG HOST RES EVENT [PID]   (positional: a killpath gets at most 8 args)
//! lockd-witness check --log L
//! lockd-witness cli-hold --log L --host H --res R --index I --data PATH --data-base BYTES
//!                        --hold-ms MS --beat-ms MS --mode ex|sh   (under `lockd acquire --`)
//! lockd-witness client --log L --host H --client N --seed S --resources SPEC,SPEC…
//!                      --data PATH --data-base BYTES [--shared-percent 20] [--beat-ms 100]
//!                      [--convert-percent 10] [--request-percent 10] [--lvb-percent 20]
//!                      [--persistent-percent 15] [--adopt-percent 30] [--cli-percent 10]
//!                      [--plain]
//! ```
//! `hold` runs as the registered holder (`lockd acquire -r R -- lockd-witness hold …`):
//! it asks the daemon which lver it holds (INQUIRE of its own pid), logs `start`, then a
//! heartbeat until SIGTERM (logged as `sigterm`, then `end` and exit — unless
//! `--ignore-term`, when it keeps holding). `note` appends one event (a killpath program
//! uses it). `check` runs the witness checker and exits 1 on any violation. `client` is the chaos
//! bed's workload process ([`lockd_system_tests::chaos_client`]).
//!
//! With `--disk`, every heartbeat also writes a stamp to the shared storage itself: one
//! 4 KiB block at `--disk-offset`, with O_DIRECT, holding
//! `lockd-witness host=H res=R lver=L seq=N` (then zeros). The virtual-machine bed
//! (tests/vmbed) reads these blocks from the host side of the storage, so what it sees is
//! what reached the disk, stamped by the host's clock. A failed write (EBADE after a fence,
//! EIO) is logged as `write_error` and the holder keeps trying: a stale holder that still
//! writes is exactly what the bed must catch.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use lockd_system_tests::witness;

fn opt(args: &[String], flag: &str) -> Option<String> {
    let i = args.iter().position(|a| a == flag)?;
    args.get(i + 1).cloned()
}

fn req(args: &[String], flag: &str) -> Result<String> {
    opt(args, flag).with_context(|| format!("missing {flag} VALUE"))
}

/// The lver of `res` held by this pid, from the daemon (the state string's last field).
fn held_lver(res: &str) -> Result<u64> {
    let run_dir = client_lib::default_run_dir();
    let pid = std::process::id() as i32;
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut c = client_lib::Client::connect(&run_dir)?;
        let (rv, _, state) = c.inquire(pid)?;
        if rv == 0 {
            for entry in state.split_whitespace() {
                let fields: Vec<&str> = entry.split(':').collect();
                if fields.len() >= 5 && fields[1] == res {
                    if let Ok(lver) = fields[fields.len() - 1].parse() {
                        return Ok(lver);
                    }
                }
            }
        }
        if Instant::now() > deadline {
            bail!("pid {pid} does not hold {res} (inquire: rv {rv}, state {state:?})");
        }
        thread::sleep(Duration::from_millis(50));
    }
}

/// One O_DIRECT-aligned block for the on-storage stamp.
#[repr(C, align(4096))]
struct StampBlock([u8; 4096]);

/// The `--disk` stamp writer of `hold`.
struct DiskStamp {
    file: File,
    offset: u64,
    block: Box<StampBlock>,
}

impl DiskStamp {
    fn open(path: &str, offset: u64) -> Result<Self> {
        if !offset.is_multiple_of(4096) {
            bail!("--disk-offset {offset} is not a multiple of 4096");
        }
        let file = OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_DIRECT | libc::O_DSYNC)
            .open(path)
            .with_context(|| format!("open {path} with O_DIRECT"))?;
        Ok(Self {
            file,
            offset,
            block: Box::new(StampBlock([0; 4096])),
        })
    }

    fn write(&mut self, host: &str, res: &str, lver: u64, seq: u64) -> std::io::Result<()> {
        let text = format!("lockd-witness host={host} res={res} lver={lver} seq={seq}\n");
        self.block.0.fill(0);
        let n = text.len().min(self.block.0.len());
        self.block.0[..n].copy_from_slice(&text.as_bytes()[..n]);
        self.file.write_all_at(&self.block.0, self.offset)
    }
}

fn hold(args: &[String]) -> Result<()> {
    let log = PathBuf::from(req(args, "--log")?);
    let host = req(args, "--host")?;
    let res = req(args, "--res")?;
    let ignore_term = args.iter().any(|a| a == "--ignore-term");
    let beat = Duration::from_millis(opt(args, "--heartbeat-ms").map_or(Ok(100), |v| v.parse())?);
    let term = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGTERM, term.clone())?;
    let mut stamp = match opt(args, "--disk") {
        Some(path) => Some(DiskStamp::open(
            &path,
            req(args, "--disk-offset")?
                .parse()
                .context("--disk-offset BYTES")?,
        )?),
        None => None,
    };
    let lver = held_lver(&res)?;
    witness::append(&log, &host, &res, "start", &format!("lver={lver}"))?;
    let mut seq = 0u64;
    loop {
        if let Some(stamp) = stamp.as_mut() {
            seq += 1;
            if let Err(e) = stamp.write(&host, &res, lver, seq) {
                witness::append(
                    &log,
                    &host,
                    &res,
                    "write_error",
                    &format!("errno={}", e.raw_os_error().unwrap_or(0)),
                )?;
            }
        }
        if term.swap(false, Ordering::SeqCst) {
            witness::append(&log, &host, &res, "sigterm", "")?;
            if !ignore_term {
                witness::append(&log, &host, &res, "end", "")?;
                return Ok(());
            }
        }
        witness::append(&log, &host, &res, "alive", "")?;
        thread::sleep(beat);
    }
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("hold") => hold(&args),
        Some("client") => {
            let num = |flag: &str, default: Option<u64>| -> Result<u64> {
                match (opt(&args, flag), default) {
                    (Some(v), _) => v.parse().with_context(|| format!("{flag} {v}")),
                    (None, Some(d)) => Ok(d),
                    (None, None) => bail!("missing {flag} VALUE"),
                }
            };
            let resources = req(&args, "--resources")?
                .split(',')
                .map(client_lib::lease::LeaseSpec::parse)
                .collect::<Result<Vec<_>, _>>()?;
            lockd_system_tests::chaos_client::run(&lockd_system_tests::chaos_client::ClientArgs {
                log: PathBuf::from(req(&args, "--log")?),
                host: req(&args, "--host")?,
                client: num("--client", None)?,
                seed: num("--seed", None)?,
                resources,
                data: req(&args, "--data")?,
                data_base: num("--data-base", None)?,
                shared_percent: num("--shared-percent", Some(20))?,
                beat_ms: num("--beat-ms", Some(100))?,
                convert_percent: num("--convert-percent", Some(10))?,
                request_percent: num("--request-percent", Some(10))?,
                lvb_percent: num("--lvb-percent", Some(20))?,
                persistent_percent: num("--persistent-percent", Some(15))?,
                adopt_percent: num("--adopt-percent", Some(30))?,
                cli_percent: num("--cli-percent", Some(10))?,
                plain: args.iter().any(|a| a == "--plain"),
            })
        }
        Some("cli-hold") => {
            let num = |flag: &str| -> Result<u64> {
                let v = req(&args, flag)?;
                v.parse().with_context(|| format!("{flag} {v}"))
            };
            lockd_system_tests::chaos_client::cli_hold_run(
                &lockd_system_tests::chaos_client::CliHoldArgs {
                    log: PathBuf::from(req(&args, "--log")?),
                    host: req(&args, "--host")?,
                    res: req(&args, "--res")?,
                    index: num("--index")?,
                    data: req(&args, "--data")?,
                    data_base: num("--data-base")?,
                    hold_ms: num("--hold-ms")?,
                    beat_ms: num("--beat-ms")?,
                    mode: req(&args, "--mode")?,
                },
            )
        }
        Some("note") => {
            // Positional, because sanlock's killpath passes at most 8 arguments (and
            // appends the holder's pid, which is recorded).
            let field = |i: usize| args.get(i).cloned();
            let (Some(log), Some(host), Some(res), Some(what)) =
                (field(2), field(3), field(4), field(5))
            else {
                bail!("usage: lockd-witness note LOG HOST RES EVENT [PID]");
            };
            let extra = args
                .get(6)
                .map(|p| format!("holder={p}"))
                .unwrap_or_default();
            witness::append(std::path::Path::new(&log), &host, &res, &what, &extra)?;
            Ok(())
        }
        Some("check") => {
            let log = PathBuf::from(req(&args, "--log")?);
            let text =
                std::fs::read_to_string(&log).with_context(|| format!("read {}", log.display()))?;
            let events = witness::parse(&text).map_err(anyhow::Error::msg)?;
            let report = witness::check(&events);
            for t in &report.tenures {
                println!(
                    "{} {}/{} lver {} held {:.3}s{}",
                    t.res,
                    t.host,
                    t.pid,
                    t.lver,
                    (t.last_alive_ns - t.start_ns) as f64 / 1e9,
                    if t.ended_cleanly {
                        ""
                    } else {
                        " (no clean end)"
                    }
                );
            }
            for v in report.overlaps.iter().chain(&report.lver_violations) {
                println!("VIOLATION {v}");
            }
            println!(
                "tenures={} overlaps={} lver_violations={}",
                report.tenures.len(),
                report.overlaps.len(),
                report.lver_violations.len()
            );
            if !report.ok() {
                std::process::exit(1);
            }
            Ok(())
        }
        _ => bail!("usage: lockd-witness hold|note|check|client --log L …"),
    }
}
