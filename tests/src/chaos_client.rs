//! The chaos bed's workload client (`lockd-witness client`, tests/vmbed/chaos.py).
//!
//! One process, forever: pick one of the resources at random, take it exclusive or shared
//! through the Rust client's [`client_lib::Lease`] (with a random `--timeout`, or none),
//! hold it a random while writing a stamp to the resource's own 4 KiB data block with
//! O_DIRECT every `--beat-ms`, release, pause, again. Every step that matters to the
//! checker goes to the event log as one line: `grant` (with the lver, the fencing token),
//! `notice` (the daemon's loss notice, with its reason), `sigterm`, `release`,
//! `write_error`, `acquire_error`.
//!
//! The holder is deliberately not cooperative: after a loss notice it keeps writing
//! until it is killed. Safety must come from the daemon's kill escalation, the watchdog
//! and storage fencing — never from a holder that behaves.
//!
//! The stamp, at `--data-base + index * 4096`:
//! `lockd-chaos host=H pid=P res=R lver=L mode=ex|sh seq=N` then zeros. The host side
//! reads it from the storage's backing store, so what it judges is what reached the disk.
//!
//! Beyond plain holds (not with `--plain`): a hold may convert half-way to the other mode
//! (`--convert-percent`; logged as `convert` with its result, and on success as a `grant`
//! with `convert=1` and the lver and mode it now holds, which its later stamps carry), and
//! a client refused because another holds the lease may ask for it with REQUEST and
//! SANLK_REQUEST_NEXT_LVER, graceful or forced (`--request-percent`; logged as `request`
//! with its mode and result). The holder asked gets a loss notice `requested1|2` and, as
//! sanlock does, is killed (forced) or asked to go with SIGTERM (graceful).
//!
//! An exclusive hold may also take the lease value block (`--lvb-percent`; such a hold
//! does not convert): right after the grant it reads the LVB and logs `lvb_read` with
//! `prev=` the lver the value names (0: never set), and before its release it sets the LVB
//! to `lockd-chaos-lvb lver=L` and logs `lvb_set`. The checker requires every value read
//! to come from an earlier lver, and the value a clean release left to be the one the
//! next grant reads.
//!
//! Randomness is a splitmix64 stream seeded from `--seed` and `--client` (deterministic
//! choices for a seed; the interleaving with the other hosts is not).

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use client_lib::lease::{Lease, LeaseAcquireOptions, LeaseSpec, LossReason, Wait};

use crate::witness;

/// splitmix64: small, seedable, good enough for choosing among a few options.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }

    fn percent(&mut self, p: u64) -> bool {
        self.next() % 100 < p
    }
}

/// What the client was told on its command line.
pub struct ClientArgs {
    pub log: PathBuf,
    pub host: String,
    pub client: u64,
    pub seed: u64,
    pub resources: Vec<LeaseSpec>,
    pub data: String,
    pub data_base: u64,
    pub shared_percent: u64,
    pub beat_ms: u64,
    /// Percent of holds that convert half-way (lease mode only).
    pub convert_percent: u64,
    /// Percent of refusals (held elsewhere) followed by a REQUEST (lease mode only).
    pub request_percent: u64,
    /// Percent of exclusive holds taken with the LVB (lease mode only).
    pub lvb_percent: u64,
    /// Only sanlock's own protocol (REGISTER, ACQUIRE, INQUIRE, RELEASE): for a sanlock
    /// daemon, which has no loss-notice watch. The log then has no `notice` lines.
    pub plain: bool,
}

#[repr(C, align(4096))]
struct Block([u8; 4096]);

fn open_data(path: &str) -> Result<File> {
    OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_DIRECT | libc::O_DSYNC)
        .open(path)
        .with_context(|| format!("open {path} with O_DIRECT"))
}

fn note(log: &Path, host: &str, res: &str, event: &str, extra: &str) {
    // The event port may be briefly unwritable (a guest being frozen): a lost line is
    // reported by the checker as a missing event, never turned into a crash here.
    let _ = witness::append(log, host, res, event, extra);
}

/// Runs the client until SIGTERM or SIGKILL.
pub fn run(a: &ClientArgs) -> Result<()> {
    if a.resources.is_empty() {
        bail!("--resources names no resource");
    }
    if !a.data_base.is_multiple_of(4096) {
        bail!("--data-base {} is not a multiple of 4096", a.data_base);
    }
    let term = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGTERM, term.clone())?;
    let data = open_data(&a.data)?;
    let mut block = Box::new(Block([0; 4096]));
    let mut rng = Rng(a.seed ^ (a.client.wrapping_mul(0x2545_F491_4F6C_DD1D)) ^ hash(&a.host));
    let beat = Duration::from_millis(a.beat_ms);
    loop {
        let index = rng.range(0, a.resources.len() as u64 - 1) as usize;
        let spec = &a.resources[index];
        let res = spec.name.to_string();
        let shared = rng.percent(a.shared_percent);
        let with_lvb = !a.plain && !shared && rng.percent(a.lvb_percent);
        let wait = match rng.range(0, 3) {
            0 => Wait::NoWait,
            _ => Wait::Timeout(Duration::from_secs(rng.range(1, 10))),
        };
        let opts = LeaseAcquireOptions {
            shared,
            wait,
            owner_name: Some(format!("c{}", a.client)),
            lvb: with_lvb,
            ..LeaseAcquireOptions::default()
        };
        let acquired = if a.plain {
            plain_acquire(spec, shared, &opts.wait)
        } else {
            Lease::acquire(spec, &opts)
                .map(Holding::Lease)
                .map_err(anyhow::Error::from)
        };
        let held = match acquired {
            Ok(h) => h,
            Err(e) => {
                let busy = e
                    .downcast_ref::<client_lib::lease::ClientLeaseError>()
                    .and_then(|e| e.code())
                    .is_some_and(client_lib::lease::is_busy_code);
                if busy && !a.plain && rng.percent(a.request_percent) {
                    let force = if rng.percent(50) {
                        client_lib::proto::SANLK_REQ_FORCE
                    } else {
                        client_lib::proto::SANLK_REQ_GRACEFUL
                    };
                    let rv = request(spec, force);
                    note(
                        &a.log,
                        &a.host,
                        &res,
                        "request",
                        &format!("force_mode={force} rv={}", rv.unwrap_or(i32::MIN)),
                    );
                }
                if !busy {
                    note(
                        &a.log,
                        &a.host,
                        &res,
                        "acquire_error",
                        &format!("why={}", one_word(&e.to_string())),
                    );
                }
                stop_if_asked(&term, a, &res)?;
                thread::sleep(Duration::from_millis(rng.range(500, 3000)));
                continue;
            }
        };
        let mut held = held;
        let mut shared = shared;
        let mut mode = if shared { "sh" } else { "ex" };
        let mut lver = held.token();
        note(
            &a.log,
            &a.host,
            &res,
            "grant",
            &format!("lver={lver} mode={mode}"),
        );
        if let Holding::Lease(lease) = &held {
            let (log, host, res) = (a.log.clone(), a.host.clone(), res.clone());
            lease.on_lost(move |n| {
                let reason = match n.reason {
                    LossReason::Requested { force_mode } => format!("requested{force_mode}"),
                    r => r.name().to_string(),
                };
                note(
                    &log,
                    &host,
                    &res,
                    "notice",
                    &format!("lver={lver} reason={reason}"),
                );
            });
        }
        if let (true, Holding::Lease(lease)) = (with_lvb, &held) {
            let extra = match lease.lvb(64) {
                Ok(v) => format!("lver={lver} prev={}", lvb_lver(&v)),
                Err(e) => format!("lver={lver} rv={}", e.code().unwrap_or(i32::MIN)),
            };
            note(&a.log, &a.host, &res, "lvb_read", &extra);
        }
        let hold = Duration::from_millis(rng.range(500, 4000));
        let mut convert_at =
            (!a.plain && !with_lvb && rng.percent(a.convert_percent)).then(|| hold / 2);
        let start = Instant::now();
        let offset = a.data_base + index as u64 * 4096;
        let mut seq = 0u64;
        while start.elapsed() < hold {
            if convert_at.is_some_and(|at| start.elapsed() >= at) {
                convert_at = None;
                if let Holding::Lease(lease) = &mut held {
                    let to = !shared;
                    let result = lease.convert(to);
                    let rv = match &result {
                        Ok(()) => 0,
                        Err(e) => e.code().unwrap_or(i32::MIN),
                    };
                    let to_mode = if to { "sh" } else { "ex" };
                    note(
                        &a.log,
                        &a.host,
                        &res,
                        "convert",
                        &format!("lver={lver} mode={to_mode} rv={rv}"),
                    );
                    if result.is_ok() {
                        shared = to;
                        mode = to_mode;
                        lver = lease.token();
                        note(
                            &a.log,
                            &a.host,
                            &res,
                            "grant",
                            &format!("lver={lver} mode={mode} convert=1"),
                        );
                    }
                }
            }
            seq += 1;
            let text = format!(
                "lockd-chaos host={} pid={} res={res} lver={lver} mode={mode} seq={seq}\n",
                a.host,
                std::process::id()
            );
            block.0.fill(0);
            block.0[..text.len()].copy_from_slice(text.as_bytes());
            if let Err(e) = data.write_all_at(&block.0, offset) {
                note(
                    &a.log,
                    &a.host,
                    &res,
                    "write_error",
                    &format!("lver={lver} errno={}", e.raw_os_error().unwrap_or(0)),
                );
            }
            if term.load(Ordering::SeqCst) {
                // Killed for the lease (or the bed stops the workload): the log says
                // which it was from the notice before it.
                note(&a.log, &a.host, &res, "sigterm", &format!("lver={lver}"));
                std::process::exit(0);
            }
            thread::sleep(beat);
        }
        let trusted = held.is_trusted();
        if let (true, Holding::Lease(lease)) = (with_lvb, &held) {
            let rv = match lease.set_lvb(format!("lockd-chaos-lvb lver={lver}").as_bytes()) {
                Ok(()) => 0,
                Err(e) => e.code().unwrap_or(i32::MIN),
            };
            note(
                &a.log,
                &a.host,
                &res,
                "lvb_set",
                &format!("lver={lver} rv={rv}"),
            );
        }
        match held.release() {
            Ok(()) => note(
                &a.log,
                &a.host,
                &res,
                "release",
                &format!("lver={lver} trusted={trusted}"),
            ),
            Err(e) => note(
                &a.log,
                &a.host,
                &res,
                "release_error",
                &format!("lver={lver} why={}", one_word(&e.to_string())),
            ),
        }
        stop_if_asked(&term, a, &res)?;
        thread::sleep(Duration::from_millis(rng.range(0, 1000)));
    }
}

/// A held lease: through the Rust client's [`Lease`] (with its loss watch), or plain
/// sanlock protocol on a registered connection (`--plain`).
enum Holding {
    Lease(Lease),
    Plain {
        client: client_lib::Client,
        head: client_lib::wire::ResourceHead,
        lver: u64,
    },
}

impl Holding {
    fn token(&self) -> u64 {
        match self {
            Holding::Lease(l) => l.token(),
            Holding::Plain { lver, .. } => *lver,
        }
    }

    fn is_trusted(&self) -> bool {
        match self {
            Holding::Lease(l) => l.is_trusted(),
            Holding::Plain { .. } => true,
        }
    }

    fn release(self) -> Result<()> {
        match self {
            Holding::Lease(l) => Ok(l.release()?),
            Holding::Plain {
                mut client, head, ..
            } => {
                let rv = client.release(-1, 0, &[head])?;
                if rv < 0 {
                    bail!("release: {rv}");
                }
                Ok(())
            }
        }
    }
}

/// REQUEST for `spec` at the next lease version with force mode `force`: the daemon's
/// answer (0, or a negative errno), or None when it could not be asked.
fn request(spec: &LeaseSpec, force: u32) -> Option<i32> {
    let r = spec.resource(false).ok()?;
    let mut c = client_lib::Client::connect(&client_lib::default_run_dir()).ok()?;
    let (h, _) = c
        .call(
            client_lib::proto::SM_CMD_REQUEST,
            client_lib::proto::SANLK_REQUEST_NEXT_LVER,
            force,
            0,
            &r.encode(),
        )
        .ok()?;
    Some(h.result())
}

/// sanlock's own protocol: a registered connection acquires (retried on a busy lease
/// within `wait`), and the lver comes from INQUIRE of our own pid's state string.
fn plain_acquire(spec: &LeaseSpec, shared: bool, wait: &Wait) -> Result<Holding> {
    let run_dir = client_lib::default_run_dir();
    let res = spec.resource(shared)?;
    let deadline = match wait {
        Wait::NoWait => Instant::now(),
        Wait::Timeout(t) => Instant::now() + *t,
        Wait::Forever => Instant::now() + Duration::from_secs(3600),
    };
    loop {
        let mut client = client_lib::Client::connect(&run_dir)?;
        client.register()?;
        let rv = client.acquire(-1, 0, std::slice::from_ref(&res), None)?;
        if rv == 0 {
            let (irv, _, state) = client.inquire(-1)?;
            let name = spec.name.to_string();
            let lver = state
                .split_whitespace()
                .filter_map(|e| {
                    let f: Vec<&str> = e.split(':').collect();
                    (f.len() >= 5 && f[1] == name).then(|| f[f.len() - 1].parse::<u64>().ok())?
                })
                .next();
            let Some(lver) = lver.filter(|_| irv == 0) else {
                bail!("inquire after acquire: rv {irv}, state {state:?}");
            };
            return Ok(Holding::Plain {
                client,
                head: res.head.clone(),
                lver,
            });
        }
        if !client_lib::lease::is_busy_code(rv) {
            bail!("acquire {spec}: {rv}");
        }
        if Instant::now() >= deadline {
            return Err(client_lib::lease::ClientLeaseError::Refused {
                op: "acquire",
                lease: spec.to_string(),
                rv,
            }
            .into());
        }
        thread::sleep(Duration::from_millis(500));
    }
}

fn stop_if_asked(term: &AtomicBool, a: &ClientArgs, res: &str) -> Result<()> {
    if term.load(Ordering::SeqCst) {
        note(&a.log, &a.host, res, "sigterm", "");
        std::process::exit(0);
    }
    Ok(())
}

/// The lver an LVB written by [`run`] names: `lockd-chaos-lvb lver=L`, then zeros; 0 for
/// an LVB never set (all zeros) or one this workload did not write.
fn lvb_lver(value: &[u8]) -> u64 {
    let text = value.split(|b| *b == 0).next().unwrap_or(&[]);
    std::str::from_utf8(text)
        .ok()
        .and_then(|t| t.strip_prefix("lockd-chaos-lvb lver="))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

/// The error text as one token for the event line (spaces become `_`).
fn one_word(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_whitespace() || c == '=' {
                '_'
            } else {
                c
            }
        })
        .take(80)
        .collect()
}

fn hash(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::lvb_lver;

    #[test]
    fn an_lvb_names_the_lver_it_was_set_under_or_none() {
        let mut v = b"lockd-chaos-lvb lver=42".to_vec();
        v.resize(64, 0);
        assert_eq!(lvb_lver(&v), 42);
        assert_eq!(lvb_lver(&[0; 64]), 0);
        assert_eq!(lvb_lver(b"someone else's value"), 0);
        assert_eq!(lvb_lver(b"lockd-chaos-lvb lver=x"), 0);
    }
}
