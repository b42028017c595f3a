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
//! Persistent leases and orphans (`--persistent-percent`, `--adopt-percent`): some
//! exclusive holds without the LVB are taken persistent; at its end such a hold is left,
//! half the time, as an orphan of this host instead of released (`orphaned`, with its
//! lver). A pick first tries, `--adopt-percent` of the time, to adopt an orphan of the
//! resource here (SANLK_ACQUIRE_ORPHAN_ONLY; logged as a `grant` with `adopt=1` at the
//! orphan's own lver, held persistent again). A plain acquire refused by an orphan here
//! (-EUCLEAN) adopts it half the time, and otherwise releases the orphans of that
//! resource half the time (`orphans_released`, with the count). The checker lets an
//! adopter share an lver only with an orphan left earlier on its own guest.
//!
//! Some holds go through the CLI (`--cli-percent`): `lockd acquire [--timeout S] -r
//! SPEC[:SH] -- lockd-witness cli-hold …` runs [`cli_hold_run`] as the registered holder,
//! which takes its fencing token from `LOCKD_FENCING_TOKEN`, logs its `grant` with
//! `cli=1`, writes its stamps, logs `release` and exits (the daemon releases the lease as
//! the connection closes). Such a holder has no loss watch: the checker does not ask it
//! for a notice before a kill.
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
    /// Percent of exclusive holds without the LVB taken persistent (lease mode only).
    pub persistent_percent: u64,
    /// Percent of picks that first try to adopt an orphan here (lease mode only).
    pub adopt_percent: u64,
    /// Percent of holds taken through the CLI, `lockd acquire [--timeout S] -r SPEC --
    /// lockd-witness cli-hold …` (lease mode only).
    pub cli_percent: u64,
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
        if !a.plain && rng.percent(a.cli_percent) {
            cli_hold(a, &mut rng, spec, index);
            stop_if_asked(&term, a, &res)?;
            thread::sleep(Duration::from_millis(rng.range(0, 1000)));
            continue;
        }
        let taken = match take(a, &mut rng, spec) {
            Ok(t) => t,
            Err(e) => {
                refused(a, &mut rng, spec, &res, &e);
                stop_if_asked(&term, a, &res)?;
                thread::sleep(Duration::from_millis(rng.range(500, 3000)));
                continue;
            }
        };
        let Taken {
            mut held,
            mut shared,
            with_lvb,
            persistent,
            adopted,
        } = taken;
        let mut mode = if shared { "sh" } else { "ex" };
        let mut lver = held.token();
        let adopted = if adopted { " adopt=1" } else { "" };
        note(
            &a.log,
            &a.host,
            &res,
            "grant",
            &format!("lver={lver} mode={mode}{adopted}"),
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
            (!a.plain && !with_lvb && !persistent && rng.percent(a.convert_percent))
                .then(|| hold / 2);
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
        if persistent && rng.percent(50) {
            // Logged first: an adopter here may take the orphan as soon as the connection
            // closes, and its grant must not come before this line.
            note(&a.log, &a.host, &res, "orphaned", &format!("lver={lver}"));
            held.leave_as_orphan();
            stop_if_asked(&term, a, &res)?;
            thread::sleep(Duration::from_millis(rng.range(0, 1000)));
            continue;
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

/// One hold through the CLI: `lockd acquire` with a random `--timeout` (or none) and mode
/// runs `lockd-witness cli-hold` ([`cli_hold_run`]) as the holder; waits for it. A refusal
/// (held elsewhere) is the CLI's failure, not logged; one for another reason is logged as
/// `acquire_error`.
fn cli_hold(a: &ClientArgs, rng: &mut Rng, spec: &LeaseSpec, index: usize) {
    let res = spec.name.to_string();
    let shared = rng.percent(a.shared_percent);
    let timeout = rng.range(0, 10);
    let hold_ms = rng.range(500, 4000);
    let failed = |why: String| note(&a.log, &a.host, &res, "acquire_error", &why);
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => return failed(format!("why=current_exe:{e}")),
    };
    let mut cmd = std::process::Command::new("lockd");
    cmd.arg("acquire");
    if timeout > 0 {
        cmd.args(["--timeout", &timeout.to_string()]);
    }
    let suffix = if shared { ":SH" } else { "" };
    cmd.args(["-r", &format!("{spec}{suffix}"), "--"])
        .arg(exe)
        .args(["cli-hold", "--log"])
        .arg(&a.log)
        .args(["--host", &a.host, "--res", &res])
        .args(["--index", &index.to_string(), "--data", &a.data])
        .args(["--data-base", &a.data_base.to_string()])
        .args(["--hold-ms", &hold_ms.to_string()])
        .args(["--beat-ms", &a.beat_ms.to_string()])
        .args(["--mode", if shared { "sh" } else { "ex" }])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    let out = match cmd.output() {
        Ok(o) => o,
        Err(e) => return failed(format!("why=spawn_lockd:{e}")),
    };
    let err = String::from_utf8_lossy(&out.stderr);
    // The holder logs its own end; a CLI that failed before it ran says why on stderr.
    // Held elsewhere: `--timeout` ran out (naming the holder), or, without it, the busy
    // code in parentheses at the end of the CLI's error.
    let code = err
        .rsplit_once("(-")
        .and_then(|(_, rest)| rest.split(')').next())
        .and_then(|n| n.parse::<i32>().ok())
        .map(|n| -n);
    let refused_busy = err.contains("held by")
        || err.contains("not acquired within")
        || code.is_some_and(client_lib::lease::is_busy_code);
    if !out.status.success() && !err.contains("lockd: holding") && !refused_busy {
        failed(format!("why=cli:{}", one_word(err.trim())));
    }
}

/// What `lockd-witness cli-hold` was told.
pub struct CliHoldArgs {
    pub log: PathBuf,
    pub host: String,
    pub res: String,
    pub index: u64,
    pub data: String,
    pub data_base: u64,
    pub hold_ms: u64,
    pub beat_ms: u64,
    pub mode: String,
}

/// `lockd-witness cli-hold`, run by `lockd acquire … --` as the registered holder: the
/// fencing token from `LOCKD_FENCING_TOKEN` (`lockd acquire` sets it for one lease), a
/// `grant` with `cli=1`, stamps every `--beat-ms` for `--hold-ms`, `release`, exit (the
/// daemon releases the lease as the registered connection closes). SIGTERM (the
/// daemon's kill, or the bed's stop) logs `sigterm` and exits.
pub fn cli_hold_run(a: &CliHoldArgs) -> Result<()> {
    let term = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGTERM, term.clone())?;
    let lver: u64 = std::env::var("LOCKD_FENCING_TOKEN")
        .context("LOCKD_FENCING_TOKEN not set by lockd acquire")?
        .parse()
        .context("LOCKD_FENCING_TOKEN")?;
    let data = open_data(&a.data)?;
    let mut block = Box::new(Block([0; 4096]));
    let (log, host, res, mode) = (&a.log, &a.host, &a.res, &a.mode);
    note(
        log,
        host,
        res,
        "grant",
        &format!("lver={lver} mode={mode} cli=1"),
    );
    let start = Instant::now();
    let offset = a.data_base + a.index * 4096;
    let mut seq = 0u64;
    while start.elapsed() < Duration::from_millis(a.hold_ms) {
        seq += 1;
        let text = format!(
            "lockd-chaos host={host} pid={} res={res} lver={lver} mode={mode} seq={seq}\n",
            std::process::id()
        );
        block.0.fill(0);
        block.0[..text.len()].copy_from_slice(text.as_bytes());
        if let Err(e) = data.write_all_at(&block.0, offset) {
            let errno = e.raw_os_error().unwrap_or(0);
            note(
                log,
                host,
                res,
                "write_error",
                &format!("lver={lver} errno={errno}"),
            );
        }
        if term.load(Ordering::SeqCst) {
            note(log, host, res, "sigterm", &format!("lver={lver}"));
            return Ok(());
        }
        thread::sleep(Duration::from_millis(a.beat_ms));
    }
    note(
        log,
        host,
        res,
        "release",
        &format!("lver={lver} trusted=true"),
    );
    Ok(())
}

/// A hold just taken, and how.
struct Taken {
    held: Holding,
    shared: bool,
    with_lvb: bool,
    /// Taken persistent: may be left as an orphan at its end.
    persistent: bool,
    /// An orphan of this host adopted (at the orphan's lver).
    adopted: bool,
}

/// Takes `spec` as the draw says: first, some of the time, an orphan of it here; else
/// exclusive or shared, with the LVB or persistent (exclusive only), waiting or not.
fn take(a: &ClientArgs, rng: &mut Rng, spec: &LeaseSpec) -> Result<Taken> {
    let owner_name = Some(format!("c{}", a.client));
    if !a.plain && rng.percent(a.adopt_percent) {
        // None here (-ENOENT), or one held by a local process now: a plain pick instead.
        if let Some(taken) = adopt(spec, &owner_name) {
            return Ok(taken);
        }
    }
    let shared = rng.percent(a.shared_percent);
    let with_lvb = !a.plain && !shared && rng.percent(a.lvb_percent);
    let persistent = !a.plain && !shared && !with_lvb && rng.percent(a.persistent_percent);
    let wait = match rng.range(0, 3) {
        0 => Wait::NoWait,
        _ => Wait::Timeout(Duration::from_secs(rng.range(1, 10))),
    };
    let held = if a.plain {
        plain_acquire(spec, shared, &wait)?
    } else {
        let opts = LeaseAcquireOptions {
            shared,
            wait,
            owner_name,
            lvb: with_lvb,
            persistent,
            ..LeaseAcquireOptions::default()
        };
        match Lease::acquire(spec, &opts) {
            Ok(lease) => Holding::Lease(lease),
            // An orphan of this host holds it: adopt it half the time (else `refused`
            // may release it).
            Err(e) if e.code() == Some(-libc::EUCLEAN) && rng.percent(50) => {
                return adopt(spec, &opts.owner_name).ok_or_else(|| e.into());
            }
            Err(e) => return Err(e.into()),
        }
    };
    Ok(Taken {
        held,
        shared,
        with_lvb,
        persistent,
        adopted: false,
    })
}

/// Adopts this host's orphan of `spec`, if there is one and no local process holds it.
fn adopt(spec: &LeaseSpec, owner_name: &Option<String>) -> Option<Taken> {
    let opts = LeaseAcquireOptions {
        wait: Wait::NoWait,
        owner_name: owner_name.clone(),
        persistent: true,
        adopt_orphan: true,
        ..LeaseAcquireOptions::default()
    };
    let lease = Lease::acquire(spec, &opts).ok()?;
    Some(Taken {
        held: Holding::Lease(lease),
        shared: false,
        with_lvb: false,
        persistent: true,
        adopted: true,
    })
}

/// After a refused acquire of `spec`: held elsewhere, a REQUEST some of the time; held
/// by an orphan here (-EUCLEAN), a release of its orphans half the time; any other
/// failure logged as `acquire_error`.
fn refused(a: &ClientArgs, rng: &mut Rng, spec: &LeaseSpec, res: &str, e: &anyhow::Error) {
    let code = e
        .downcast_ref::<client_lib::lease::ClientLeaseError>()
        .and_then(|e| e.code());
    if code == Some(-libc::EUCLEAN) {
        if rng.percent(50) {
            let n = match client_lib::lease::release_orphans(&client_lib::default_run_dir(), spec) {
                Ok(n) => format!("n={n}"),
                Err(e) => format!("rv={}", e.code().unwrap_or(i32::MIN)),
            };
            note(&a.log, &a.host, res, "orphans_released", &n);
        }
        return;
    }
    let busy = code.is_some_and(client_lib::lease::is_busy_code);
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
            res,
            "request",
            &format!("force_mode={force} rv={}", rv.unwrap_or(i32::MIN)),
        );
    }
    if !busy {
        note(
            &a.log,
            &a.host,
            res,
            "acquire_error",
            &format!("why={}", one_word(&e.to_string())),
        );
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

    /// Leaves a persistent lease as an orphan of this host ([`Lease::leave_as_orphan`]).
    fn leave_as_orphan(self) {
        match self {
            Holding::Lease(l) => l.leave_as_orphan(),
            Holding::Plain { .. } => unreachable!("plain holds are never persistent"),
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
