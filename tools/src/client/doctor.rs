//! `lockd doctor`: is this host's lockd set up sanely? Each check ends PASS, WARN or FAIL,
//! with what was found and, unless it passed, how to fix it. The exit status is the
//! worst level: 0 all passed, 1 a warning, 2 a failure (`--json` for machines).
//!
//! Checks: the daemon answers on its socket; the socket's mode (0660) and group; the
//! watchdog setting, wdmd's socket answering and its fire timeout, the watchdog device;
//! per joined lockspace the storage latency (a few O_DIRECT reads, measured, against
//! io_timeout), the lease sector size and alignment against the device, and other hosts
//! whose io_timeout differs (GET_HOSTS); a host name that survives a restart; the
//! daemon's locked memory (the resident part of its locked mappings, from smaps: VmLck
//! also counts lock-on-fault mappings never touched); per joined lockspace, whether its
//! device answers SCSI-3 persistent reservations (informational: PERSISTENT RESERVE IN).
//!
//! Doctor only reads: it never writes storage, never registers with wdmd, and every wait
//! (daemon reply, storage read, wdmd reply) is bounded.

use std::collections::HashMap;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::Result;
use clap::Args;
use client_lib::proto::{SANLK_STATE_DAEMON, SANLK_STATE_LOCKSPACE, SOCKET_NAME};
use client_lib::Client;
use disk_format::Name;
use serde_json::json;

use super::{print_json, ConnArgs};
use crate::disk::CheckedDisk;

#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// The daemon's TOML config (for our_host_name, socket_group, wdmd_run_dir).
    #[arg(short = 'c', long = "config", default_value = lockd_config::DEFAULT_CONFIG_PATH)]
    pub config: PathBuf,
    /// wdmd's run dir (default: config wdmd_run_dir, $WDMD_RUN_DIR, /run/wdmd).
    #[arg(long = "wdmd-run-dir")]
    pub wdmd_run_dir: Option<PathBuf>,
    /// The watchdog device wdmd drives.
    #[arg(long = "watchdog-device", default_value = "/dev/watchdog")]
    pub watchdog_device: PathBuf,
    /// O_DIRECT reads per lockspace for the latency check (1..=100).
    #[arg(long = "samples", default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub samples: u32,
    #[command(flatten)]
    pub conn: ConnArgs,
}

/// A check's outcome; ordered so the worst is the largest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Pass,
    Warn,
    Fail,
}

impl Level {
    fn label(self) -> &'static str {
        match self {
            Level::Pass => "PASS",
            Level::Warn => "WARN",
            Level::Fail => "FAIL",
        }
    }

    fn exit_code(self) -> u8 {
        match self {
            Level::Pass => 0,
            Level::Warn => 1,
            Level::Fail => 2,
        }
    }
}

/// One finding.
#[derive(Debug, Clone)]
pub struct Check {
    pub name: &'static str,
    pub level: Level,
    pub detail: String,
    pub fix: String,
}

fn check(name: &'static str, level: Level, detail: String, fix: &str) -> Check {
    Check {
        name,
        level,
        detail,
        fix: if level == Level::Pass {
            String::new()
        } else {
            fix.to_string()
        },
    }
}

/// What the daemon told us (None when it is not reachable).
struct DaemonView {
    /// key=value pairs of the daemon record (sanlock's daemon status text).
    daemon: HashMap<String, String>,
    lockspaces: Vec<LsView>,
}

struct LsView {
    name: Name,
    host_id: u64,
    path: String,
    offset: u64,
    kv: HashMap<String, String>,
}

/// How long any one daemon reply may take.
const REPLY_TIMEOUT: Duration = Duration::from_secs(5);

pub fn run(a: &DoctorArgs) -> Result<ExitCode> {
    let run_dir = a.conn.run_dir();
    let file = lockd_config::load_file(
        &a.config,
        a.config.as_path() != Path::new(lockd_config::DEFAULT_CONFIG_PATH),
    );
    let mut checks = Vec::new();
    let file = match file {
        Ok(f) => {
            checks.push(check(
                "config",
                Level::Pass,
                format!("{} parsed", a.config.display()),
                "",
            ));
            f
        }
        Err(e) => {
            checks.push(check(
                "config",
                Level::Fail,
                e.to_string(),
                "fix the file; the daemon refuses to start with it (docs/daemon.md lists keys and ranges)",
            ));
            lockd_config::FileConfig::default()
        }
    };
    let view = daemon_checks(&run_dir, &mut checks);
    socket_checks(&run_dir, &file, &mut checks);
    watchdog_checks(a, &file, view.as_ref(), &mut checks);
    if let Some(v) = &view {
        for ls in &v.lockspaces {
            lockspace_checks(&run_dir, ls, a.samples, &file, &mut checks);
        }
    }
    host_name_check(&file, view.as_ref(), &mut checks);
    memory_check(&run_dir, view.is_some(), &mut checks);
    let worst = checks.iter().map(|c| c.level).max().unwrap_or(Level::Pass);
    if a.conn.json {
        print_json(&json!({
            "worst": worst.label(),
            "exit_status": worst.exit_code(),
            "checks": checks.iter().map(|c| json!({
                "check": c.name,
                "level": c.level.label(),
                "detail": c.detail,
                "fix": c.fix,
            })).collect::<Vec<_>>(),
        }));
    } else {
        for c in &checks {
            println!("{}  {:<14} {}", c.level.label(), c.name, c.detail);
            if !c.fix.is_empty() {
                println!("      {:<14} fix: {}", "", c.fix);
            }
        }
        println!("worst: {}", worst.label());
    }
    Ok(ExitCode::from(worst.exit_code()))
}

fn kv_pairs(text: &str) -> HashMap<String, String> {
    text.split_whitespace()
        .filter_map(|w| w.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn daemon_checks(run_dir: &Path, checks: &mut Vec<Check>) -> Option<DaemonView> {
    let fix = "start it (systemctl start lockd, or lockd daemon), or point doctor at its run dir \
               (--run-dir / LOCKD_RUN_DIR)";
    let version = Client::connect(run_dir).and_then(|mut c| {
        c.set_read_timeout(Some(REPLY_TIMEOUT))?;
        c.version()
    });
    let v = match version {
        Ok(v) => v,
        Err(e) => {
            checks.push(check(
                "daemon",
                Level::Fail,
                format!("no daemon answers at {}: {e}", run_dir.display()),
                fix,
            ));
            return None;
        }
    };
    let records = Client::connect(run_dir).and_then(|c| {
        c.set_read_timeout(Some(REPLY_TIMEOUT))?;
        c.status(4)
    });
    let records = match records {
        Ok(r) => r,
        Err(e) => {
            checks.push(check(
                "daemon",
                Level::Fail,
                format!("the daemon answers VERSION but not STATUS: {e}"),
                "look at the daemon's log (journalctl -u lockd)",
            ));
            return None;
        }
    };
    let mut view = DaemonView {
        daemon: HashMap::new(),
        lockspaces: Vec::new(),
    };
    for r in &records {
        match r.state.kind {
            SANLK_STATE_DAEMON => view.daemon = kv_pairs(&r.text),
            SANLK_STATE_LOCKSPACE => {
                if let Some(ls) = &r.lockspace {
                    view.lockspaces.push(LsView {
                        name: ls.name,
                        host_id: ls.host_id,
                        path: ls.host_id_disk.path.to_text(),
                        offset: ls.host_id_disk.offset,
                        kv: kv_pairs(&r.text),
                    });
                }
            }
            _ => {}
        }
    }
    let what = view
        .daemon
        .get("version_str")
        .cloned()
        .unwrap_or_else(|| "a sanlock-protocol daemon".into());
    checks.push(check(
        "daemon",
        Level::Pass,
        format!(
            "{what} answers at {} (protocol {}.{}.{}), {} lockspace(s)",
            run_dir.display(),
            v >> 24,
            (v >> 16) & 0xff,
            (v >> 8) & 0xff,
            view.lockspaces.len()
        ),
        "",
    ));
    Some(view)
}

fn group_name(gid: u32) -> String {
    std::fs::read_to_string("/etc/group")
        .ok()
        .and_then(|t| {
            t.lines().find_map(|l| {
                let f: Vec<&str> = l.split(':').collect();
                (f.len() > 2 && f[2] == gid.to_string()).then(|| f[0].to_string())
            })
        })
        .unwrap_or_else(|| gid.to_string())
}

fn socket_checks(run_dir: &Path, file: &lockd_config::FileConfig, checks: &mut Vec<Check>) {
    let path = run_dir.join(SOCKET_NAME);
    let meta = match std::fs::symlink_metadata(&path) {
        Ok(m) => m,
        Err(e) => {
            checks.push(check(
                "socket",
                Level::Fail,
                format!("{}: {e}", path.display()),
                "the daemon creates it at start; start the daemon",
            ));
            return;
        }
    };
    if !meta.file_type().is_socket() {
        checks.push(check(
            "socket",
            Level::Fail,
            format!("{} is not a socket", path.display()),
            "remove it and restart the daemon",
        ));
        return;
    }
    let mode = meta.mode() & 0o7777;
    let gid = meta.gid();
    let want_gid = match &file.socket_group {
        Some(g) => lockd_config::group_to_gid(g),
        None => lockd_config::group_to_gid("sanlock"),
    };
    let detail = format!(
        "{} mode {mode:04o} owner uid {} group {}",
        path.display(),
        meta.uid(),
        group_name(gid)
    );
    if mode & 0o007 != 0 {
        checks.push(check(
            "socket",
            Level::Fail,
            format!("{detail}: any local user can add lockspaces, acquire and release leases"),
            &format!(
                "chmod 0660 {} (the daemon creates it 0660; something changed it)",
                path.display()
            ),
        ));
    } else if mode != 0o660 {
        checks.push(check(
            "socket",
            Level::Warn,
            format!("{detail}: expected 0660"),
            &format!("chmod 0660 {}, or restart the daemon", path.display()),
        ));
    } else if want_gid.is_some_and(|w| w != gid) {
        checks.push(check(
            "socket",
            Level::Warn,
            format!(
                "{detail}: expected group {}",
                group_name(want_gid.unwrap_or(gid))
            ),
            "restart the daemon so it applies socket_group, or set socket_group in lockd.toml",
        ));
    } else {
        checks.push(check("socket", Level::Pass, detail, ""));
    }
}

fn watchdog_checks(
    a: &DoctorArgs,
    file: &lockd_config::FileConfig,
    view: Option<&DaemonView>,
    checks: &mut Vec<Check>,
) {
    // The daemon's own setting when it answers, else the config's (default on).
    let (use_watchdog, from) = match view.and_then(|v| v.daemon.get("use_watchdog")) {
        Some(v) => (v != "0", "the daemon's STATUS"),
        None => (
            file.use_watchdog.unwrap_or(true),
            "the config; the daemon does not answer",
        ),
    };
    if use_watchdog {
        checks.push(check(
            "watchdog",
            Level::Pass,
            format!("on ({from}): every lockspace is armed in wdmd"),
            "",
        ));
    } else {
        checks.push(check(
            "watchdog",
            Level::Warn,
            "off (-w 0 / use_watchdog = false): a host whose daemon hangs is not reset before \
             others take its leases"
                .into(),
            "set use_watchdog = true in lockd.toml (the default) and run wdmd",
        ));
    }
    // Missing pieces of the watchdog are failures only when the daemon uses it.
    let missing = if use_watchdog {
        Level::Fail
    } else {
        Level::Warn
    };
    let dev = &a.watchdog_device;
    match std::fs::metadata(dev) {
        Ok(m) if m.file_type().is_char_device() => checks.push(check(
            "watchdog-dev",
            Level::Pass,
            format!("{} is a character device", dev.display()),
            "",
        )),
        Ok(_) => checks.push(check(
            "watchdog-dev",
            missing,
            format!("{} is not a character device", dev.display()),
            "load the watchdog driver of this hardware (or softdog: modprobe softdog)",
        )),
        Err(e) => checks.push(check(
            "watchdog-dev",
            missing,
            format!("{}: {e}", dev.display()),
            "load the watchdog driver of this hardware (or softdog: modprobe softdog)",
        )),
    }
    let wdmd_dir = a
        .wdmd_run_dir
        .clone()
        .or(file.wdmd_run_dir.clone())
        .or_else(|| {
            std::env::var_os("WDMD_RUN_DIR")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        })
        .unwrap_or_else(|| PathBuf::from(lockd_config::DEFAULT_WDMD_RUN_DIR));
    let sock = wdmd::client::socket_path(&wdmd_dir);
    let fix = "start wdmd (systemctl start wdmd) before lockd; without it every join fails \
               with SANLK_WD_ERROR (-203)";
    if !sock.exists() {
        checks.push(check(
            "wdmd",
            missing,
            format!("no wdmd socket at {}", sock.display()),
            fix,
        ));
        return;
    }
    let (tx, rx) = mpsc::channel();
    let dir = wdmd_dir.clone();
    std::thread::spawn(move || {
        let r = wdmd::client::WdmdClient::connect(&dir).and_then(|mut c| c.status());
        let _ = tx.send(r.map_err(|e| e.to_string()));
    });
    match rx.recv_timeout(Duration::from_secs(12)) {
        Ok(Ok(st)) => {
            let want = view
                .and_then(|v| v.daemon.get("watchdog_fire_timeout"))
                .and_then(|s| s.parse::<u64>().ok());
            let fire = u64::from(st.fire_timeout);
            if want.is_some_and(|w| w != fire) {
                checks.push(check(
                    "wdmd",
                    missing,
                    format!(
                        "wdmd answers at {} with fire timeout {fire} s, the daemon expects {} s",
                        sock.display(),
                        want.unwrap_or(0)
                    ),
                    "make wdmd's fire timeout and lockd's watchdog_fire_timeout equal",
                ));
            } else {
                checks.push(check(
                    "wdmd",
                    Level::Pass,
                    format!(
                        "wdmd answers at {} (fire timeout {fire} s, test interval {} s)",
                        sock.display(),
                        st.test_interval
                    ),
                    "",
                ));
            }
        }
        Ok(Err(e)) => checks.push(check(
            "wdmd",
            missing,
            format!("wdmd at {} does not answer STATUS: {e}", sock.display()),
            fix,
        )),
        Err(_) => checks.push(check(
            "wdmd",
            missing,
            format!("wdmd at {} did not answer within 12 s", sock.display()),
            fix,
        )),
    }
}

/// Times `samples` O_DIRECT reads of one I/O block at `offset`; returns (max, mean) ms and
/// the device's logical sector size. Runs on a thread with a deadline: a hung device must
/// not hang doctor.
fn measure(
    path: &str,
    offset: u64,
    samples: u32,
    deadline: Duration,
) -> Result<(f64, f64, u32, u32, Vec<u8>), String> {
    let (tx, rx) = mpsc::channel();
    let p = PathBuf::from(path);
    std::thread::spawn(move || {
        let r = (|| {
            let disk = CheckedDisk::open(&p, false).map_err(|e| e.to_string())?;
            let len = disk.io_block().max(4096) as usize;
            let mut times = Vec::new();
            let mut first = Vec::new();
            for _ in 0..samples {
                let t0 = Instant::now();
                let buf = disk.read(offset, len).map_err(|e| e.to_string())?;
                times.push(t0.elapsed().as_secs_f64() * 1000.0);
                if first.is_empty() {
                    first = buf.as_slice().to_vec();
                }
            }
            let max = times.iter().cloned().fold(0.0, f64::max);
            let mean = times.iter().sum::<f64>() / times.len().max(1) as f64;
            Ok((max, mean, disk.sector_size(), disk.io_block(), first))
        })();
        let _ = tx.send(r);
    });
    rx.recv_timeout(deadline)
        .unwrap_or_else(|_| Err(format!("reads did not finish within {deadline:?}")))
}

fn lockspace_checks(
    run_dir: &Path,
    ls: &LsView,
    samples: u32,
    file: &lockd_config::FileConfig,
    checks: &mut Vec<Check>,
) {
    let io_timeout: u64 = ls
        .kv
        .get("io_timeout")
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    let who = format!("{}:{}:{}:{}", ls.name, ls.host_id, ls.path, ls.offset);
    let io_ms = io_timeout as f64 * 1000.0;
    let m = measure(
        &ls.path,
        ls.offset,
        samples,
        Duration::from_secs(io_timeout.max(1) * 4),
    );
    let (dev_sector, first) = match m {
        Ok((max, mean, dev_sector, _io_block, first)) => {
            let detail = format!(
                "{who}: {samples} O_DIRECT reads, max {max:.1} ms, mean {mean:.1} ms; \
                 io_timeout {io_timeout} s"
            );
            let fix = "the storage path is too slow for this io_timeout: fix the path \
                       (multipath, queue depth, congestion) or use a larger io_timeout on every host";
            let level = if max >= io_ms {
                Level::Fail
            } else if max >= io_ms / 4.0 {
                Level::Warn
            } else {
                Level::Pass
            };
            checks.push(check("storage", level, detail, fix));
            (Some(dev_sector), first)
        }
        Err(e) => {
            checks.push(check(
                "storage",
                Level::Fail,
                format!("{who}: {e}"),
                "the lockspace's storage cannot be read: check the device and its path",
            ));
            (None, Vec::new())
        }
    };
    geometry_check(ls, &who, dev_sector, &first, checks);
    io_timeout_check(run_dir, ls, &who, io_timeout, checks);
    pr_check(ls, &who, io_timeout, fenced_by_pr(file, &ls.name), checks);
    if fenced_by_pr(file, &ls.name) {
        fence_keys_check(run_dir, ls, &who, io_timeout, file, checks);
    }
}

/// For a lockspace the configuration fences by PR: every device it fences (the
/// lockspace's and its `fence_devices`) answers PERSISTENT RESERVE IN, and every host the
/// daemon sees LIVE has a key of its host_id registered on each; the reservation type is
/// reported. A live host without a key keeps the reservation away (fencing inactive,
/// leases wait host_dead): a FAIL, since fencing does not act while it lasts.
fn fence_keys_check(
    run_dir: &Path,
    ls: &LsView,
    who: &str,
    io_timeout: u64,
    file: &lockd_config::FileConfig,
    checks: &mut Vec<Check>,
) {
    let devices = match lockd_config::FenceConfig::resolve(
        file.fence.as_deref(),
        file.fence_lockspaces.as_deref(),
        file.fence_devices.as_deref(),
        file.fence_preempt_s,
    ) {
        Ok(cfg) => cfg.devices_for(&ls.name),
        Err(e) => {
            checks.push(check(
                "fence_keys",
                Level::Fail,
                format!("{who}: {e}"),
                "fix the fence keys of the configuration",
            ));
            return;
        }
    };
    let hosts = Client::connect(run_dir).and_then(|mut c| {
        c.set_read_timeout(Some(REPLY_TIMEOUT))?;
        c.get_hosts(ls.name, 0)
    });
    let (live, unjudged) = match hosts {
        Ok(hosts) => live_and_unjudged(
            hosts
                .iter()
                .map(|h| (h.host_id, h.flags & client_lib::proto::SANLK_HOST_MASK)),
            ls.host_id,
        ),
        Err(e) => {
            checks.push(check(
                "fence_keys",
                Level::Warn,
                format!("{who}: GET_HOSTS: {e}"),
                "run doctor again in a few seconds",
            ));
            return;
        }
    };
    let timeout_ms = u32::try_from(io_timeout.clamp(1, 10) * 1000).unwrap_or(10_000);
    let mut problems = Vec::new();
    let mut unjudged_missing = Vec::new();
    let mut seen = Vec::new();
    for path in std::iter::once(PathBuf::from(&ls.path)).chain(devices) {
        let probe = lockd_scsi_pr::PrDevice::probe_with_timeout(&path, timeout_ms);
        let keys = match &probe.keys {
            Ok(k) => k,
            Err(e) => {
                problems.push(format!("{}: {e}", path.display()));
                continue;
            }
        };
        let missing = hosts_without_key(&live, &keys.keys);
        if !missing.is_empty() {
            problems.push(format!(
                "{}: no key of live host_id(s) {missing:?}",
                path.display()
            ));
        }
        let missing = hosts_without_key(&unjudged, &keys.keys);
        if !missing.is_empty() {
            unjudged_missing.push(format!(
                "{}: no key of host_id(s) {missing:?}",
                path.display()
            ));
        }
        let resv = match &probe.reservation {
            Some(Ok(r)) => r
                .reservation
                .as_ref()
                .map_or("no reservation".to_string(), |r| {
                    format!(
                        "reservation {}",
                        r.pr_type
                            .map_or("unknown type", lockd_scsi_pr::PrType::short)
                    )
                }),
            _ => "reservation unknown".to_string(),
        };
        seen.push(format!(
            "{}: {} key(s), {resv}",
            path.display(),
            keys.keys.len()
        ));
    }
    // Hosts this daemon has not judged yet (it joined less than a few renewals ago) may be
    // live: a missing key of theirs is not yet a failure, but not a pass either.
    let not_yet = if unjudged.is_empty() {
        String::new()
    } else {
        format!(" (not judged yet: host_id(s) {unjudged:?})")
    };
    if problems.is_empty() && !unjudged_missing.is_empty() {
        checks.push(check(
            "fence_keys",
            Level::Warn,
            format!(
                "{who}: hosts whose state is not known yet: {}",
                unjudged_missing.join("; ")
            ),
            "run doctor again after 4·io_timeout: this daemon joined recently and has not \
             judged those hosts; if they are live they need their key",
        ));
    } else if problems.is_empty() {
        checks.push(check(
            "fence_keys",
            Level::Pass,
            format!(
                "{who}: every live host ({live:?}) has its key on every fenced device{not_yet}; {}",
                seen.join("; ")
            ),
            "",
        ));
    } else {
        checks.push(check(
            "fence_keys",
            Level::Fail,
            format!("{who}: {}", problems.join("; ")),
            "every host of a fenced lockspace must run lockd with fence = \"scsi-pr\" for it \
             and see every fenced device; until each live host's key is registered no \
             reservation is held and no host is fenced by the storage (docs/fencing.md)",
        ));
    }
}

/// From GET_HOSTS' `(host_id, state)` pairs and our own host_id: the hosts to hold to a
/// key (LIVE ones and ourselves), and those whose state is not known yet (UNKNOWN: seen
/// renewing too briefly to judge), each sorted, without repeats.
fn live_and_unjudged(hosts: impl Iterator<Item = (u64, u32)>, own: u64) -> (Vec<u64>, Vec<u64>) {
    let (mut live, mut unjudged) = (vec![own], Vec::new());
    for (host_id, state) in hosts {
        match state {
            client_lib::proto::SANLK_HOST_LIVE => live.push(host_id),
            client_lib::proto::SANLK_HOST_UNKNOWN if host_id != own => unjudged.push(host_id),
            _ => {}
        }
    }
    for list in [&mut live, &mut unjudged] {
        list.sort_unstable();
        list.dedup();
    }
    (live, unjudged)
}

/// The host_ids of `live` with no key of theirs (lvmlockd's format) among `keys`.
fn hosts_without_key(live: &[u64], keys: &[u64]) -> Vec<u64> {
    let keyed: Vec<u64> = keys
        .iter()
        .filter_map(|&k| lockd_scsi_pr::lvm_key_parts(k).map(|(host_id, _)| host_id))
        .collect();
    let mut missing: Vec<u64> = live
        .iter()
        .copied()
        .filter(|h| !keyed.contains(h))
        .collect();
    missing.sort_unstable();
    missing.dedup();
    missing
}

/// Whether the configuration turns storage fencing (SCSI-3 PR) on for lockspace `name`.
fn fenced_by_pr(file: &lockd_config::FileConfig, name: &Name) -> bool {
    matches!(file.fence.as_deref(), Some("scsi-pr" | "register-only"))
        && file
            .fence_lockspaces
            .iter()
            .flatten()
            .any(|n| Name::new(n).is_ok_and(|n| n.same_as(name)))
}

/// Whether the lockspace's device answers SCSI-3 persistent reservations (a read-only
/// probe: PERSISTENT RESERVE IN only). For a lockspace the configuration fences by PR
/// (`fence = "scsi-pr"`, `fence_lockspaces`) a device without PR is a FAIL (the daemon
/// refuses to join it); otherwise the line is informational (PASS) and says whether the
/// device could take part in storage fencing (docs/fencing.md).
fn pr_check(ls: &LsView, who: &str, io_timeout: u64, fenced: bool, checks: &mut Vec<Check>) {
    // Each of the probe's (at most three) commands is bounded like a storage read.
    let timeout_ms = u32::try_from(io_timeout.clamp(1, 10) * 1000).unwrap_or(10_000);
    let probe = lockd_scsi_pr::PrDevice::probe_with_timeout(Path::new(&ls.path), timeout_ms);
    if fenced {
        let (level, fix) = if probe.supported() {
            (Level::Pass, "")
        } else {
            (
                Level::Fail,
                "storage fencing (fence = \"scsi-pr\") needs a device that answers PERSISTENT \
                 RESERVE: use the SCSI device itself, or remove the lockspace from \
                 fence_lockspaces",
            )
        };
        let detail = format!("{who}: fence = scsi-pr; {}", probe.summary());
        checks.push(check("pr", level, detail, fix));
        return;
    }
    let detail = if probe.supported() {
        format!("{who}: {}; storage fencing off for it", probe.summary())
    } else {
        format!(
            "{who}: {}; storage fencing by SCSI-3 PR cannot use this device (watchdog \
             fencing is unaffected)",
            probe.summary()
        )
    };
    checks.push(check("pr", Level::Pass, detail, ""));
}

fn geometry_check(
    ls: &LsView,
    who: &str,
    dev_sector: Option<u32>,
    first: &[u8],
    checks: &mut Vec<Check>,
) {
    let Some(dev_sector) = dev_sector else { return };
    let sector: u64 = ls
        .kv
        .get("sector_size")
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let align: u64 = ls
        .kv
        .get("align_size")
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let leader = disk_format::leader::LeaderRecord::decode(first).ok();
    let fix = "re-create the lockspace with the device's sector size (lockd direct init -s … \
               with the right sector/align) on an aligned offset";
    let detail = format!(
        "{who}: lease sector {sector} B, align {align} B; device logical sector {dev_sector} B"
    );
    if sector == 0 || align == 0 {
        checks.push(check(
            "geometry",
            Level::Warn,
            format!("{detail}: the daemon does not report the lockspace's geometry yet"),
            "run doctor again once the lockspace is joined",
        ));
    } else if sector < u64::from(dev_sector) {
        checks.push(check(
            "geometry",
            Level::Fail,
            format!("{detail}: lease sectors are smaller than the device's"),
            fix,
        ));
    } else if !ls.offset.is_multiple_of(align) {
        checks.push(check(
            "geometry",
            Level::Fail,
            format!(
                "{detail}: offset {} is not a multiple of the align size",
                ls.offset
            ),
            fix,
        ));
    } else if leader.is_some_and(|l| u64::from(l.sector_size) != sector) {
        checks.push(check(
            "geometry",
            Level::Fail,
            format!(
                "{detail}: the leader on disk says sector size {}",
                leader.map_or(0, |l| l.sector_size)
            ),
            fix,
        ));
    } else {
        checks.push(check("geometry", Level::Pass, detail, ""));
    }
}

fn io_timeout_check(
    run_dir: &Path,
    ls: &LsView,
    who: &str,
    io_timeout: u64,
    checks: &mut Vec<Check>,
) {
    let hosts = Client::connect(run_dir).and_then(|mut c| {
        c.set_read_timeout(Some(REPLY_TIMEOUT))?;
        c.get_hosts(ls.name, 0)
    });
    match hosts {
        Ok(hosts) => {
            let odd: Vec<String> = hosts
                .iter()
                .filter(|h| h.io_timeout != 0 && u64::from(h.io_timeout) != io_timeout)
                .map(|h| format!("host {} io_timeout {} s", h.host_id, h.io_timeout))
                .collect();
            if odd.is_empty() {
                checks.push(check(
                    "io_timeouts",
                    Level::Pass,
                    format!(
                        "{who}: {} host(s), all with io_timeout {io_timeout} s",
                        hosts.len()
                    ),
                    "",
                ));
            } else {
                checks.push(check(
                    "io_timeouts",
                    Level::Warn,
                    format!(
                        "{who}: this host uses io_timeout {io_timeout} s, but {}",
                        odd.join(", ")
                    ),
                    "use one io_timeout on every host of a lockspace (lockd.toml io_timeout / \
                     add_lockspace's io_timeout): failure and takeover times are computed from it",
                ));
            }
        }
        Err(e) => checks.push(check(
            "io_timeouts",
            Level::Warn,
            format!("{who}: GET_HOSTS: {e} (the first renewal has not been read yet?)"),
            "run doctor again in a few seconds",
        )),
    }
}

fn host_name_check(
    file: &lockd_config::FileConfig,
    view: Option<&DaemonView>,
    checks: &mut Vec<Check>,
) {
    let (expected, source) = match &file.our_host_name {
        Some(n) => (n.clone(), "our_host_name in the config"),
        None => (
            lockd_config::derived_host_name(),
            "derived from /etc/machine-id, the boot id and the host name",
        ),
    };
    let running = view.and_then(|v| v.daemon.get("our_host_name")).cloned();
    let machine_id_ok = std::fs::read_to_string("/etc/machine-id")
        .map(|s| s.trim().len() == 32)
        .unwrap_or(false);
    match running {
        Some(r) if r != expected => checks.push(check(
            "host_name",
            Level::Warn,
            format!(
                "the daemon runs as {r:?}, a restart would use {expected:?} ({source}): after a \
                 clean stop, a host that comes back under another name waits 2·io_timeout \
                 to rejoin instead of none"
            ),
            &format!("set our_host_name = {r:?} in lockd.toml so every restart uses it"),
        )),
        _ if file.our_host_name.is_none() && !machine_id_ok => checks.push(check(
            "host_name",
            Level::Warn,
            format!("{expected:?} ({source}) but /etc/machine-id is missing or malformed"),
            "run systemd-machine-id-setup, or set our_host_name in lockd.toml",
        )),
        _ => checks.push(check(
            "host_name",
            Level::Pass,
            format!("{expected:?} ({source}) is stable across restarts"),
            "",
        )),
    }
}

fn memory_check(run_dir: &Path, daemon_up: bool, checks: &mut Vec<Check>) {
    if !daemon_up {
        return;
    }
    let pid_path = run_dir.join(lockd_config::PID_FILE);
    let pid = std::fs::read_to_string(&pid_path)
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok());
    let Some(pid) = pid else {
        checks.push(check(
            "memory",
            Level::Warn,
            format!(
                "no daemon pid in {} (a sanlock daemon?)",
                pid_path.display()
            ),
            "run doctor against lockd's run dir",
        ));
        return;
    };
    // VmLck is the size of every locked mapping, also of the parts never touched: under
    // mlockall(MCL_CURRENT | MCL_FUTURE | MCL_ONFAULT) malloc arenas and thread stacks are
    // "locked" as soon as they are mapped, but only the pages touched are in memory. So
    // VmLck reads hundreds of MiB for a daemon of ten; what is really held in memory is
    // the resident part of the locked mappings, from smaps.
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).ok();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let rss_kb = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok());
    match (smaps.as_deref().map(locked_memory), rss_kb) {
        (Some(m), Some(rss_kb)) if m.resident_kb > 0 => checks.push(check(
            "memory",
            Level::Pass,
            format!(
                "daemon pid {pid}: locked in memory {} (of RSS {}); {} of address space \
                 locked on fault (mapped but never touched, counted in VmLck only)",
                mib(m.resident_kb),
                mib(rss_kb),
                mib(m.mapped_kb.saturating_sub(m.resident_kb)),
            ),
            "",
        )),
        (Some(_), Some(rss_kb)) => checks.push(check(
            "memory",
            Level::Warn,
            format!(
                "daemon pid {pid}: none of its memory (RSS {}) is locked, so under memory \
                 pressure a renewal can wait for pages to come back from swap",
                mib(rss_kb)
            ),
            "set mlock = true in lockd.toml (the default) and give the daemon CAP_IPC_LOCK or \
             LimitMEMLOCK=infinity (as lockd.service does), then restart it; its log says \
             why mlockall failed",
        )),
        _ => checks.push(check(
            "memory",
            Level::Warn,
            format!("cannot read the memory map of pid {pid}"),
            "run doctor as root on the daemon's host",
        )),
    }
}

/// KiB as MiB with one decimal.
fn mib(kb: u64) -> String {
    format!("{:.1} MiB", kb as f64 / 1024.0)
}

/// The locked mappings of a process, from /proc/PID/smaps.
#[derive(Debug, PartialEq, Eq)]
struct LockedMemory {
    /// Resident pages of locked mappings (really held in memory).
    resident_kb: u64,
    /// Size of every locked mapping (what VmLck reports).
    mapped_kb: u64,
}

/// Sums `Rss` and `Size` over the mappings whose `VmFlags` include `lo` (VM_LOCKED).
/// Each mapping's block lists `Size` and `Rss` before its closing `VmFlags` line.
fn locked_memory(smaps: &str) -> LockedMemory {
    let mut m = LockedMemory {
        resident_kb: 0,
        mapped_kb: 0,
    };
    let (mut size, mut rss) = (0u64, 0u64);
    let kb = |v: &str| {
        v.split_whitespace()
            .next()
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(0)
    };
    for line in smaps.lines() {
        if let Some(v) = line.strip_prefix("Size:") {
            size = kb(v);
        } else if let Some(v) = line.strip_prefix("Rss:") {
            rss = kb(v);
        } else if let Some(flags) = line.strip_prefix("VmFlags:") {
            if flags.split_whitespace().any(|f| f == "lo") {
                m.resident_kb += rss;
                m.mapped_kb += size;
            }
            (size, rss) = (0, 0);
        }
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn live_hosts_without_a_key_of_theirs_are_named() {
        let k = |h, g| lockd_scsi_pr::lvm_key(h, g).unwrap();
        assert_eq!(hosts_without_key(&[1, 2, 3], &[k(1, 4), k(3, 1)]), vec![2]);
        assert_eq!(
            hosts_without_key(&[1, 2], &[k(1, 4), k(2, 9)]),
            Vec::<u64>::new()
        );
        // A key of another scheme names nobody.
        assert_eq!(hosts_without_key(&[1, 1], &[0x1234]), vec![1]);
    }

    /// Ourselves once, LIVE hosts to hold to a key, UNKNOWN ones apart, the rest left out.
    #[test]
    fn live_and_unjudged_hosts_for_the_key_check() {
        use client_lib::proto::{
            SANLK_HOST_DEAD, SANLK_HOST_FAIL, SANLK_HOST_FREE, SANLK_HOST_LIVE, SANLK_HOST_UNKNOWN,
        };
        let hosts = [
            (1, SANLK_HOST_LIVE),
            (3, SANLK_HOST_UNKNOWN),
            (2, SANLK_HOST_UNKNOWN),
            (4, SANLK_HOST_FAIL),
            (5, SANLK_HOST_DEAD),
            (6, SANLK_HOST_FREE),
            (7, SANLK_HOST_LIVE),
        ];
        assert_eq!(
            live_and_unjudged(hosts.into_iter(), 1),
            (vec![1, 7], vec![2, 3])
        );
        // Our own entry, whatever state it shows, counts as live once.
        assert_eq!(
            live_and_unjudged([(2, SANLK_HOST_UNKNOWN)].into_iter(), 2),
            (vec![2], vec![])
        );
    }

    /// Two locked mappings (one a lock-on-fault arena mostly untouched) and one not
    /// locked: only the locked ones count, their Rss as resident.
    #[test]
    fn locked_memory_counts_resident_pages_of_locked_mappings() {
        let smaps = "\
55d0c0a00000-55d0c0c00000 r-xp 00000000 08:01 123  /usr/sbin/lockd-daemon
Size:               2048 kB
Rss:                1800 kB
Locked:             1800 kB
VmFlags: rd ex mr mw me lo
7f0000000000-7f0004000000 rw-p 00000000 00:00 0
Size:              65536 kB
Rss:                 132 kB
Locked:              132 kB
VmFlags: rd wr mr mw me nr lo
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0  [stack]
Size:                132 kB
Rss:                  24 kB
VmFlags: rd wr mr mw me gd ac
";
        assert_eq!(
            locked_memory(smaps),
            LockedMemory {
                resident_kb: 1932,
                mapped_kb: 67584
            }
        );
        assert_eq!(
            locked_memory(""),
            LockedMemory {
                resident_kb: 0,
                mapped_kb: 0
            }
        );
        assert_eq!(mib(1932), "1.9 MiB");
    }
}
