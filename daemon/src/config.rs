//! Daemon configuration: command line over TOML file over defaults, parsed once into a
//! validated [`Config`].

use std::path::{Path, PathBuf};

use clap::Args;
use disk_format::Name;
use serde::Deserialize;
use thiserror::Error;

/// Default TOML config path.
pub const DEFAULT_CONFIG_PATH: &str = "/etc/lockd/lockd.toml";
/// Default run dir (socket, pid file).
pub const DEFAULT_RUN_DIR: &str = "/run/lockd";
/// Default io_timeout (seconds), as sanlock.
pub const DEFAULT_IO_TIMEOUT_S: u32 = 10;
/// Default watchdog fire timeout (seconds), as sanlock; must match on all hosts.
pub const DEFAULT_WATCHDOG_FIRE_TIMEOUT_S: u32 = 60;
/// wdmd's default run dir (its socket path is fixed there for sanlock).
pub const DEFAULT_WDMD_RUN_DIR: &str = "/run/wdmd";
/// Default kill grace (seconds), as sanlock.
pub const DEFAULT_KILL_GRACE_S: u32 = 40;

/// Command-line options of `lockd daemon` / `lockd-daemon` (sanlock's letters).
#[derive(Debug, Clone, Default, Args)]
pub struct DaemonArgs {
    /// Stay in the foreground, logging to stderr (without it: detach, log to --log-file).
    #[arg(short = 'D', long = "foreground")]
    pub foreground: bool,
    /// Use the watchdog through wdmd (1, the default, as sanlock) or not (0).
    #[arg(short = 'w', long = "use-watchdog")]
    pub use_watchdog: Option<u8>,
    /// Host name written into delta leases (stable across restarts).
    #[arg(short = 'e', long = "host-name")]
    pub host_name: Option<String>,
    /// Default io_timeout in seconds for lockspaces added without one.
    #[arg(short = 'o', long = "io-timeout")]
    pub io_timeout: Option<u32>,
    /// Kill grace seconds (0..60) before SIGKILL on lockspace failure.
    #[arg(short = 'g', long = "kill-grace")]
    pub kill_grace: Option<u32>,
    /// Run dir for the socket and pid file (env LOCKD_RUN_DIR; default /run/lockd).
    #[arg(long = "run-dir")]
    pub run_dir: Option<PathBuf>,
    /// TOML config file (default /etc/lockd/lockd.toml; missing file = defaults).
    #[arg(short = 'c', long = "config")]
    pub config: Option<PathBuf>,
    /// Log file when running in the background (without -D).
    #[arg(long = "log-file")]
    pub log_file: Option<PathBuf>,
    /// Group owning the socket (name or gid); default `sanlock` if that group exists.
    #[arg(short = 'G', long = "socket-group")]
    pub socket_group: Option<String>,
}

/// The TOML file (every key optional).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    pub run_dir: Option<PathBuf>,
    pub our_host_name: Option<String>,
    pub use_watchdog: Option<bool>,
    pub io_timeout: Option<u32>,
    pub watchdog_fire_timeout: Option<u32>,
    pub kill_grace_seconds: Option<u32>,
    pub sh_retries: Option<u32>,
    /// wdmd's run dir (its socket); default /run/wdmd, or `$WDMD_RUN_DIR`.
    pub wdmd_run_dir: Option<PathBuf>,
    pub log_file: Option<PathBuf>,
    pub socket_group: Option<String>,
}

/// Configuration errors.
#[derive(Debug, Error)]
pub enum ConfigError {
    #[error("cannot read config {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config {path}: {source}")]
    Parse {
        path: PathBuf,
        source: toml::de::Error,
    },
    #[error("invalid {what}: {why}")]
    Invalid { what: &'static str, why: String },
}

/// The validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub run_dir: PathBuf,
    pub foreground: bool,
    pub use_watchdog: bool,
    pub host_name: Name,
    pub io_timeout_s: u32,
    pub watchdog_fire_timeout_s: u32,
    /// Where wdmd's socket is (one connection per lockspace when `use_watchdog`).
    pub wdmd_run_dir: PathBuf,
    pub kill_grace_s: u32,
    pub sh_retries: u32,
    /// Where the log goes when the daemon runs in the background.
    pub log_file: PathBuf,
    /// gid given to the socket (mode 0660), so members of that group can connect.
    pub socket_gid: Option<u32>,
}

/// Default log file in the background.
pub const DEFAULT_LOG_FILE: &str = "/var/log/lockd.log";

impl Config {
    /// Command line over the TOML file over defaults; `env_run_dir` is `$LOCKD_RUN_DIR`.
    pub fn resolve(args: &DaemonArgs, env_run_dir: Option<PathBuf>) -> Result<Config, ConfigError> {
        let file = match &args.config {
            Some(p) => load_file(p, true)?,
            None => load_file(Path::new(DEFAULT_CONFIG_PATH), false)?,
        };
        let run_dir = args
            .run_dir
            .clone()
            .or(env_run_dir.filter(|p| !p.as_os_str().is_empty()))
            .or(file.run_dir.clone())
            .unwrap_or_else(|| PathBuf::from(DEFAULT_RUN_DIR));
        let use_watchdog = match args.use_watchdog {
            Some(0) => false,
            Some(1) => true,
            Some(n) => {
                return Err(ConfigError::Invalid {
                    what: "-w",
                    why: format!("{n} (use 0 or 1)"),
                })
            }
            None => file.use_watchdog.unwrap_or(true),
        };
        let io_timeout_s = args
            .io_timeout
            .or(file.io_timeout)
            .unwrap_or(DEFAULT_IO_TIMEOUT_S);
        if io_timeout_s == 0 || io_timeout_s > 255 {
            return Err(ConfigError::Invalid {
                what: "io_timeout",
                why: format!("{io_timeout_s} (1..=255 seconds)"),
            });
        }
        let kill_grace_s = args
            .kill_grace
            .or(file.kill_grace_seconds)
            .unwrap_or(DEFAULT_KILL_GRACE_S);
        if kill_grace_s > 60 {
            return Err(ConfigError::Invalid {
                what: "kill_grace_seconds",
                why: format!("{kill_grace_s} (0..=60)"),
            });
        }
        let name_text = match args.host_name.clone().or(file.our_host_name.clone()) {
            Some(n) => n,
            None => derived_host_name(),
        };
        let host_name = Name::new(&name_text).map_err(|e| ConfigError::Invalid {
            what: "host name",
            why: e.to_string(),
        })?;
        Ok(Config {
            run_dir,
            foreground: args.foreground,
            use_watchdog,
            host_name,
            io_timeout_s,
            watchdog_fire_timeout_s: file
                .watchdog_fire_timeout
                .unwrap_or(DEFAULT_WATCHDOG_FIRE_TIMEOUT_S),
            wdmd_run_dir: file
                .wdmd_run_dir
                .clone()
                .or_else(|| {
                    std::env::var_os("WDMD_RUN_DIR")
                        .filter(|v| !v.is_empty())
                        .map(PathBuf::from)
                })
                .unwrap_or_else(|| PathBuf::from(DEFAULT_WDMD_RUN_DIR)),
            kill_grace_s,
            sh_retries: file.sh_retries.unwrap_or(8),
            log_file: args
                .log_file
                .clone()
                .or(file.log_file.clone())
                .unwrap_or_else(|| PathBuf::from(DEFAULT_LOG_FILE)),
            socket_gid: match args.socket_group.clone().or(file.socket_group.clone()) {
                Some(g) => Some(group_to_gid(&g).ok_or(ConfigError::Invalid {
                    what: "socket group",
                    why: format!("{g}: no such group"),
                })?),
                // As sanlock: the `sanlock` group owns the socket when it exists, so
                // clients already set up for sanlock can connect.
                None => group_to_gid("sanlock"),
            },
        })
    }
}

/// A group name (from /etc/group) or a numeric gid.
pub fn group_to_gid(group: &str) -> Option<u32> {
    if let Ok(n) = group.parse::<u32>() {
        return Some(n);
    }
    let text = std::fs::read_to_string("/etc/group").ok()?;
    text.lines().find_map(|l| {
        let mut f = l.split(':');
        let name = f.next()?;
        let _pw = f.next()?;
        let gid = f.next()?;
        (name == group).then(|| gid.parse().ok()).flatten()
    })
}

fn load_file(path: &Path, required: bool) -> Result<FileConfig, ConfigError> {
    match std::fs::read_to_string(path) {
        Ok(text) => toml::from_str(&text).map_err(|source| ConfigError::Parse {
            path: path.to_path_buf(),
            source,
        }),
        Err(e) if !required && e.kind() == std::io::ErrorKind::NotFound => {
            Ok(FileConfig::default())
        }
        Err(source) => Err(ConfigError::Read {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// A stable host name: the machine id (as a UUID) plus the node name, ≤ 48 bytes, so a
/// restarted daemon rejoins its lockspaces on the fast path. Falls back to the node name.
pub fn derived_host_name() -> String {
    let node = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    let mid = std::fs::read_to_string("/etc/machine-id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    host_name_from(&mid, &node)
}

fn host_name_from(machine_id: &str, node: &str) -> String {
    let mut name = if machine_id.len() == 32 && machine_id.bytes().all(|c| c.is_ascii_hexdigit()) {
        let m = machine_id;
        format!(
            "{}-{}-{}-{}-{}",
            &m[0..8],
            &m[8..12],
            &m[12..16],
            &m[16..20],
            &m[20..32]
        )
    } else {
        String::new()
    };
    if !node.is_empty() {
        if !name.is_empty() {
            name.push('.');
        }
        name.push_str(node);
    }
    if name.is_empty() {
        name.push_str("lockd-host");
    }
    let mut end = name.len().min(48);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    name.truncate(end);
    name
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_name_shape() {
        let n = host_name_from("0123456789abcdef0123456789abcdef", "node1");
        assert_eq!(n, "01234567-89ab-cdef-0123-456789abcdef.node1");
        let long = host_name_from("0123456789abcdef0123456789abcdef", &"x".repeat(40));
        assert_eq!(long.len(), 48);
        assert_eq!(host_name_from("", ""), "lockd-host");
        assert_eq!(derived_host_name(), derived_host_name());
    }

    #[test]
    fn groups() {
        assert_eq!(group_to_gid("0"), Some(0));
        assert_eq!(group_to_gid("root"), Some(0));
        assert_eq!(group_to_gid("no-such-group-lockd"), None);
    }

    #[test]
    fn precedence_and_validation() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("lockd.toml");
        std::fs::write(
            &cfg,
            "io_timeout = 3\nour_host_name = \"fromfile\"\nrun_dir = \"/x\"\n",
        )
        .unwrap();
        let mut args = DaemonArgs {
            config: Some(cfg.clone()),
            ..DaemonArgs::default()
        };
        let c = Config::resolve(&args, Some(PathBuf::from("/env"))).unwrap();
        assert_eq!(c.io_timeout_s, 3);
        assert_eq!(c.host_name.to_text(), "fromfile");
        assert_eq!(c.run_dir, PathBuf::from("/env"));
        // As sanlock: the watchdog is on unless turned off.
        assert!(c.use_watchdog);
        assert_eq!(c.wdmd_run_dir, PathBuf::from(DEFAULT_WDMD_RUN_DIR));
        args.io_timeout = Some(1);
        args.host_name = Some("cli".into());
        args.run_dir = Some(PathBuf::from("/cli"));
        let c = Config::resolve(&args, Some(PathBuf::from("/env"))).unwrap();
        assert_eq!(
            (c.io_timeout_s, c.host_name.to_text()),
            (1, "cli".to_string())
        );
        assert_eq!(c.run_dir, PathBuf::from("/cli"));
        args.use_watchdog = Some(2);
        assert!(Config::resolve(&args, None).is_err());
        std::fs::write(&cfg, "bogus_key = 1\n").unwrap();
        args.use_watchdog = None;
        assert!(matches!(
            Config::resolve(&args, None),
            Err(ConfigError::Parse { .. })
        ));
    }
}
