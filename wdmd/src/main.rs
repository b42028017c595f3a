//! `wdmd`: the watchdog multiplexing daemon.

use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Parser;
use wdmd::cli::WdmdArgs;
use wdmd::daemon::{self, Exit, WdmdConfig};
use wdmd::device::DeviceSpec;
use wdmd::proto;

/// The gid of group `name`, looked up through NSS (getgrnam_r, via nix).
fn group_gid(name: &str) -> Result<Option<u32>> {
    Ok(nix::unistd::Group::from_name(name)
        .with_context(|| format!("cannot look up group {name}"))?
        .map(|g| g.gid.as_raw()))
}

fn config(a: &WdmdArgs) -> Result<WdmdConfig> {
    let mut cfg = WdmdConfig::new(a.run_dir.clone());
    if let Some(m) = &a.marker {
        cfg.marker = m.clone();
    }
    cfg.device = a.device.as_deref().map(DeviceSpec::parse);
    cfg.fire_timeout = a.fire_timeout;
    cfg.allow_scripts = a.allow_scripts == 1;
    cfg.scripts_dir = a.scripts_dir.clone();
    cfg.kill_script_sec = a.kill_script_sec;
    cfg.socket_gid = match &a.group {
        Some(g) => match g.parse::<u32>() {
            Ok(n) => Some(n),
            Err(_) => Some(group_gid(g)?.with_context(|| format!("unknown group {g}"))?),
        },
        None => group_gid("sanlock").unwrap_or(None),
    };
    Ok(cfg)
}

/// Start a detached copy of ourselves with -D, logging to RUN_DIR/wdmd.log,
/// and wait until its socket is up.
fn daemonize(a: &WdmdArgs) -> Result<ExitCode> {
    std::fs::create_dir_all(&a.run_dir)
        .with_context(|| format!("cannot create {}", a.run_dir.display()))?;
    let log_path = a.run_dir.join("wdmd.log");
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .with_context(|| format!("cannot open {}", log_path.display()))?;
    let exe = std::env::current_exe().context("cannot find own executable")?;
    let mut cmd = Command::new(exe);
    cmd.args(std::env::args_os().skip(1))
        .arg("-D")
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let mut child = cmd.spawn().context("cannot start the daemon process")?;
    let sock = a.run_dir.join(proto::SOCKET_NAME);
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(10) {
        if let Some(st) = child.try_wait()? {
            bail!(
                "wdmd exited during start-up ({st}); see {}",
                log_path.display()
            );
        }
        if wdmd::client::WdmdClient::connect(&a.run_dir).is_ok() {
            return Ok(ExitCode::SUCCESS);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    bail!(
        "wdmd did not open {} within 10 s; see {}",
        sock.display(),
        log_path.display()
    )
}

fn main() -> ExitCode {
    let a = WdmdArgs::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    match real_main(&a) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("wdmd: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn real_main(a: &WdmdArgs) -> Result<ExitCode> {
    if a.dump {
        let text = wdmd::client::dump_debug(&a.run_dir)?;
        print!("{text}");
        return Ok(ExitCode::SUCCESS);
    }
    let cfg = config(a)?;
    if a.probe {
        let path = daemon::probe(&cfg)?;
        println!("{path}");
        return Ok(ExitCode::SUCCESS);
    }
    if !a.foreground {
        return daemonize(a);
    }
    match daemon::run(cfg, || {})? {
        Exit::Clean => Ok(ExitCode::SUCCESS),
        Exit::Unclean => Ok(ExitCode::FAILURE),
    }
}
