//! lockd's configuration schema, shared by the daemon and the `lockd` CLI (which reads
//! lockd.toml for `doctor` and the run dir, and documents its keys in lockd.toml(5)):
//! command line over TOML file over defaults, parsed once into a validated [`Config`];
//! the default paths, [`FileConfig`] and [`CONFIG_KEYS`], group lookup, the derived host
//! name and the pid file's name ([`PID_FILE`]).
//!
//! Invariants: a [`Config`] holds only values inside the documented ranges (every key is
//! checked when [`Config::resolve`] builds it); bad text or values are a [`ConfigError`],
//! never a panic (fuzzed: `config/fuzz`, target `config_toml`). No I/O beyond reading
//! the config file, /proc and /etc/machine-id, and an NSS group lookup.

use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};

use clap::Args;
use disk_format::Name;
use serde::Deserialize;
use thiserror::Error;

mod fence;
pub use fence::{FenceConfig, FenceMethod, FENCE_PREEMPT_RANGE_S};

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
/// Default retries of a shared acquire meeting a SHORT_HOLD owner, as sanlock.
pub const DEFAULT_SH_RETRIES: u32 = 8;

// Limits checked at load (docs/daemon.md, "Limits and ranges"; packaging/lockd.toml).
/// io_timeout: sanlock stores it in one byte of the delta lease; 0 would mean no renewal.
pub const IO_TIMEOUT_RANGE_S: RangeInclusive<u32> = 1..=255;
/// kill_grace_seconds, as sanlock's `-g` (at most 60).
pub const KILL_GRACE_RANGE_S: RangeInclusive<u32> = 0..=60;
/// watchdog_fire_timeout: feeds host_dead (8·io_timeout + W) and the wait before joining
/// over another host's record; at 0 a peer would be judged dead before its watchdog fires.
/// 5 is the shortest used with the emulated watchdog in tests; 300 stays within what
/// watchdog drivers accept and keeps a failed host's leases from being stuck for long.
pub const WATCHDOG_FIRE_TIMEOUT_RANGE_S: RangeInclusive<u32> = 5..=300;
/// sh_retries: each retry may sleep up to 1 s while a client waits for its acquire.
pub const SH_RETRIES_RANGE: RangeInclusive<u32> = 0..=100;
/// A socket path must fit `sockaddr_un.sun_path` (108 bytes with its NUL).
pub const SOCKET_PATH_MAX_BYTES: usize = 107;
/// Longest file path (Linux PATH_MAX less the NUL).
pub const PATH_MAX_BYTES: usize = 4095;

/// Command-line options of `lockd daemon` / `lockd-daemon` (sanlock's letters).
#[derive(Debug, Clone, Default, Args)]
pub struct DaemonArgs {
    /// Stay in the foreground, logging to stderr (without it: detach, log to --log-file).
    #[arg(short = 'D', long = "foreground")]
    pub foreground: bool,
    /// Use the watchdog through wdmd (1, the default, as sanlock) or not (0); 0 or 1.
    #[arg(short = 'w', long = "use-watchdog")]
    pub use_watchdog: Option<u8>,
    /// Host name written into delta leases (stable across restarts; 1..=48 bytes).
    #[arg(short = 'e', long = "host-name")]
    pub host_name: Option<String>,
    /// Default io_timeout in seconds (1..=255) for lockspaces added without one.
    #[arg(short = 'o', long = "io-timeout")]
    pub io_timeout: Option<u32>,
    /// Kill grace seconds (0..=60) before SIGKILL on lockspace failure.
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
    pub read_all_dblocks: Option<bool>,
    pub read_whole_lockspace: Option<bool>,
    /// wdmd's run dir (its socket); default /run/wdmd, or `$WDMD_RUN_DIR`.
    pub wdmd_run_dir: Option<PathBuf>,
    pub log_file: Option<PathBuf>,
    pub socket_group: Option<String>,
    /// `IP:PORT` for the Prometheus HTTP listener (GET /metrics); off when absent.
    pub metrics_listen: Option<String>,
    /// Lock the daemon's memory (mlockall); default true.
    pub mlock: Option<bool>,
    /// What non-root clients may do: "uid" (default) or "sanlock".
    pub client_privileges: Option<String>,
    /// Storage fencing method: "none" (default) or "scsi-pr".
    pub fence: Option<String>,
    /// Lockspaces storage fencing applies to.
    pub fence_lockspaces: Option<Vec<String>>,
    /// Extra fenced devices, `LOCKSPACE:/dev/PATH`.
    pub fence_devices: Option<Vec<String>>,
    /// Seconds a peer's delta lease stands still before its key is preempted (0 = 8·D).
    pub fence_preempt_s: Option<u32>,
    /// Milliseconds a fence not aborted at the target waits before it counts.
    pub fence_drain_ms: Option<u32>,
}

/// One key of the TOML file, for lockd.toml(5) (`lockd man`) and the docs.
#[derive(Debug, Clone, Copy)]
pub struct ConfigKey {
    pub key: &'static str,
    /// TOML type: "string", "integer", "boolean".
    pub kind: &'static str,
    /// The command-line option that overrides it, if any.
    pub option: Option<&'static str>,
    pub default: &'static str,
    pub range: &'static str,
    /// An example value as TOML (also checked to parse in the tests).
    pub example: &'static str,
    pub help: &'static str,
}

/// Every key [`FileConfig`] accepts (a test keeps the two in step).
pub const CONFIG_KEYS: &[ConfigKey] = &[
    ConfigKey {
        key: "our_host_name",
        kind: "string",
        option: Some("-e"),
        default: "<machine-id:8>.<boot-id:16>.<hostname>",
        range: "1..=48 bytes, no NUL",
        example: "\"host-a.example\"",
        help: "Name this host writes into its delta leases; it must be unique among the hosts \
               of a lockspace (never copy it to a cloned host). A cleanly released host_id \
               is rejoined in 2 x io_timeout; a record that was not released (a crash) \
               always takes the full host_dead wait, whatever its name.",
    },
    ConfigKey {
        key: "run_dir",
        kind: "string",
        option: Some("--run-dir"),
        default: DEFAULT_RUN_DIR,
        range: "1..=94 bytes, no NUL",
        example: "\"/run/lockd\"",
        help: "Directory of the socket (sanlock.sock) and pid file; the environment \
               variable LOCKD_RUN_DIR overrides it. Clients find it with LOCKD_RUN_DIR or \
               SANLOCK_RUN_DIR.",
    },
    ConfigKey {
        key: "use_watchdog",
        kind: "boolean",
        option: Some("-w"),
        default: "true",
        range: "true or false",
        example: "true",
        help: "Arm every lockspace in wdmd, so a host that stops renewing is reset before \
               other hosts take its leases. false removes that guarantee.",
    },
    ConfigKey {
        key: "io_timeout",
        kind: "integer",
        option: Some("-o"),
        default: "10",
        range: "1..=255 seconds",
        example: "10",
        help: "Seconds one lease I/O may take (sanlock's io_timeout), for lockspaces added \
               without one. Renewal every 2x, renewal failure after 8x.",
    },
    ConfigKey {
        key: "watchdog_fire_timeout",
        kind: "integer",
        option: None,
        default: "60",
        range: "5..=300 seconds",
        example: "60",
        help: "Seconds after the last keep-alive before the watchdog resets the host. Every \
               host sharing a lockspace must use the same value.",
    },
    ConfigKey {
        key: "kill_grace_seconds",
        kind: "integer",
        option: Some("-g"),
        default: "40",
        range: "0..=60 seconds",
        example: "40",
        help: "Seconds lease holders get (killpath, then SIGTERM) before SIGKILL when a \
               lockspace fails.",
    },
    ConfigKey {
        key: "sh_retries",
        kind: "integer",
        option: None,
        default: "8",
        range: "0..=100",
        example: "8",
        help: "Retries of a shared acquire that meets a lease held briefly in exclusive \
               mode by a host granting another.",
    },
    ConfigKey {
        key: "read_all_dblocks",
        kind: "boolean",
        option: None,
        default: "false",
        range: "true or false",
        example: "false",
        help: "Read every dblock of a resource lease in each ballot, as sanlock does. By \
               default a ballot reads only the dblocks of host_ids that have joined the \
               lockspace and confirms with one read of the others' delta leases that no \
               new host has joined before it commits (see docs/algorithms.md).",
    },
    ConfigKey {
        key: "read_whole_lockspace",
        kind: "boolean",
        option: None,
        default: "true",
        range: "true or false",
        example: "true",
        help: "Read the whole lockspace area (1 MiB, up to 8 MiB on 4K sectors) on every \
               renewal, as sanlock does. false (experimental, not for production yet) \
               reads the host_ids ever used plus a margin, and the whole area once every \
               16 renewals (64 on 4 and 8 MiB areas): the simulator still finds a lease \
               overlap with it (docs/algorithms.md, \"Renewal reads\").",
    },
    ConfigKey {
        key: "wdmd_run_dir",
        kind: "string",
        option: None,
        default: DEFAULT_WDMD_RUN_DIR,
        range: "1..=97 bytes, no NUL",
        example: "\"/run/wdmd\"",
        help: "Directory of wdmd's socket; the environment variable WDMD_RUN_DIR \
               overrides it.",
    },
    ConfigKey {
        key: "log_file",
        kind: "string",
        option: Some("--log-file"),
        default: "/var/log/lockd.log",
        range: "1..=4095 bytes, no NUL",
        example: "\"/var/log/lockd.log\"",
        help: "Log file when the daemon runs in the background (without -D).",
    },
    ConfigKey {
        key: "socket_group",
        kind: "string",
        option: Some("-G"),
        default: "sanlock if that group exists, else the daemon's group",
        range: "an existing group name or gid",
        example: "\"sanlock\"",
        help: "Group owning sanlock.sock (mode 0660).",
    },
    ConfigKey {
        key: "metrics_listen",
        kind: "string",
        option: None,
        default: "off",
        range: "IP:PORT, port 1..=65535 (no host names)",
        example: "\"127.0.0.1:9591\"",
        help: "Serve Prometheus metrics over HTTP (GET /metrics) on this local address; \
               no authentication, so keep it on loopback or a management network.",
    },
    ConfigKey {
        key: "mlock",
        kind: "boolean",
        option: None,
        default: "true",
        range: "true or false",
        example: "true",
        help: "Lock the daemon's memory at start (mlockall: current pages, and \
               later pages when first touched; sanlock locks current pages), so a renewal never waits for a page to come back from swap. When \
               the lock fails (no CAP_IPC_LOCK and RLIMIT_MEMLOCK too small) the daemon \
               logs a warning and runs unlocked; STATUS shows mlock_level=2 when locked, 0 \
               when not.",
    },
    ConfigKey {
        key: "client_privileges",
        kind: "string",
        option: None,
        default: "\"uid\"",
        range: "\"uid\" or \"sanlock\"",
        example: "\"uid\"",
        help: "What a non-root client (a member of the socket's group) may do. \"uid\": \
               killpaths run as the uid that set them, and only root may shut the daemon \
               down, request or examine a lease a process of another uid holds here, or \
               remove, set_config or set_event a lockspace another uid added (-EPERM). \
               \"sanlock\": as sanlock, killpaths run as root and any client may do all \
               of that. Either way a path a client names is opened with that client's \
               own rights.",
    },
    ConfigKey {
        key: "fence",
        kind: "string",
        option: None,
        default: "\"none\"",
        range: "\"none\", \"scsi-pr\" or \"register-only\"",
        example: "\"scsi-pr\"",
        help: "Storage fencing for the lockspaces in fence_lockspaces. \"scsi-pr\": at \
               each join this host registers a SCSI-3 persistent-reservation key \
               (lvmlockd's format, 0x100000 + generation + host_id) on the lockspace's \
               device and its fence_devices, and a Write Exclusive - Registrants Only \
               reservation is held while every live host has a key; a peer whose delta \
               lease stands still for fence_preempt_s has its key preempted, and once the \
               removal is confirmed its leases are taken at once instead of after \
               host_dead. A host whose key was preempted sees its writes refused (EBADE) \
               and loses its leases. \"register-only\": the key is registered (this host \
               may write under the reservation and can be fenced) but this host neither \
               reserves nor preempts: the middle step of turning fencing on or off one \
               host at a time (docs/operations.md).",
    },
    ConfigKey {
        key: "fence_lockspaces",
        kind: "array of strings",
        option: None,
        default: "[]",
        range: "lockspace names; needs fence = \"scsi-pr\"",
        example: "[\"vg1\"]",
        help: "The lockspaces storage fencing applies to (opt-in per lockspace). Their \
               lockspace device must be a SCSI device (or a device-mapper linear map of \
               one) that answers PERSISTENT RESERVE; a join on a device without it fails \
               with a clear log line (lockd doctor and `lockd direct pr probe` tell).",
    },
    ConfigKey {
        key: "fence_devices",
        kind: "array of strings",
        option: None,
        default: "[]",
        range: "\"LOCKSPACE:/dev/PATH\", LOCKSPACE in fence_lockspaces",
        example: "[\"vg1:/dev/disk/by-id/wwn-0x6001405abcdef\"]",
        help: "Data devices registered and fenced with a lockspace, beside its own \
               device: what a fenced host must no longer write (a VM's disks). Only \
               registered devices are protected.",
    },
    ConfigKey {
        key: "fence_preempt_s",
        kind: "integer",
        option: None,
        default: "0",
        range: "0..=3600 (0 = 8·io_timeout; raised to at least 6·io_timeout)",
        example: "8",
        help: "How long a peer's delta lease must stand still before this host preempts \
               its key. The default is the fail time (8·io_timeout); shorter fences a \
               slow host sooner (it gets I/O errors instead of a reset).",
    },
    ConfigKey {
        key: "fence_drain_ms",
        kind: "integer",
        option: None,
        default: "2000",
        range: "0..=600000",
        example: "5000",
        help: "How long a fence waits before the victim's leases are taken when the \
               target did not abort the victim's queued commands for us: it took plain \
               PREEMPT only (tgt refuses PREEMPT AND ABORT), or another host's preempt had \
               removed the key already. It must cover the longest a write the target has \
               accepted may take to reach its storage; a PREEMPT AND ABORT of our own \
               needs no wait (the target answers once the aborted commands are done).",
    },
];

/// What non-root clients may make the daemon do (`client_privileges`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ClientPrivileges {
    /// lockd's rules: killpaths run as their client's uid; commands that act on other
    /// uids' leases and processes, or on the daemon, are root's or the owning uid's.
    #[default]
    Uid,
    /// sanlock's: killpaths run as root; every client may use every command.
    Sanlock,
}

impl ClientPrivileges {
    /// Parses the `client_privileges` value.
    pub fn parse(text: &str) -> Result<ClientPrivileges, ConfigError> {
        match text {
            "uid" => Ok(ClientPrivileges::Uid),
            "sanlock" => Ok(ClientPrivileges::Sanlock),
            _ => Err(ConfigError::Invalid {
                what: "client_privileges",
                why: format!("{text:?} (\"uid\" or \"sanlock\")"),
            }),
        }
    }

    /// The config value.
    pub fn as_str(self) -> &'static str {
        match self {
            ClientPrivileges::Uid => "uid",
            ClientPrivileges::Sanlock => "sanlock",
        }
    }
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
    /// Ballots read every dblock (`read_all_dblocks`), as sanlock.
    pub read_all_dblocks: bool,
    /// Renewals read the whole lockspace area (`read_whole_lockspace`), as sanlock.
    pub read_whole_lockspace: bool,
    /// Where the log goes when the daemon runs in the background.
    pub log_file: PathBuf,
    /// gid given to the socket (mode 0660), so members of that group can connect.
    pub socket_gid: Option<u32>,
    /// Where the Prometheus HTTP listener binds (`metrics_listen`); None = off.
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// Lock the daemon's memory at start (`mlock`).
    pub mlock: bool,
    /// What non-root clients may do (`client_privileges`).
    pub client_privileges: ClientPrivileges,
    /// Storage fencing (`fence`, `fence_lockspaces`, `fence_devices`, `fence_preempt_s`).
    pub fence: FenceConfig,
}

/// The pid file in the run dir (locked by the running daemon; `lockd doctor` reads it).
pub const PID_FILE: &str = "lockd.pid";

/// Default log file in the background.
pub const DEFAULT_LOG_FILE: &str = "/var/log/lockd.log";

impl Config {
    /// Command line over the TOML file over defaults; `env_run_dir` is `$LOCKD_RUN_DIR`.
    pub fn resolve(args: &DaemonArgs, env_run_dir: Option<PathBuf>) -> Result<Config, ConfigError> {
        let file = match &args.config {
            Some(p) => load_file(p, true)?,
            None => load_file(Path::new(DEFAULT_CONFIG_PATH), false)?,
        };
        Config::from_file_config(args, env_run_dir, file)
    }

    /// The configuration from lockd.toml's text alone (no command-line values): every
    /// check `resolve` makes, without reading a file. For the config fuzzer and tools.
    pub fn from_toml_text(text: &str) -> Result<Config, ConfigError> {
        let file: FileConfig = toml::from_str(text).map_err(|source| ConfigError::Parse {
            path: PathBuf::from("<text>"),
            source,
        })?;
        let args = DaemonArgs::default();
        Config::from_file_config(&args, None, file)
    }

    fn from_file_config(
        args: &DaemonArgs,
        env_run_dir: Option<PathBuf>,
        file: FileConfig,
    ) -> Result<Config, ConfigError> {
        let run_dir = args
            .run_dir
            .clone()
            .or(env_run_dir.filter(|p| !p.as_os_str().is_empty()))
            .or(file.run_dir.clone())
            .unwrap_or_else(|| PathBuf::from(DEFAULT_RUN_DIR));
        check_dir("run_dir", &run_dir, client_lib::proto::SOCKET_NAME)?;
        let use_watchdog = match args.use_watchdog {
            Some(0) => false,
            Some(1) => true,
            Some(n) => {
                return Err(ConfigError::Invalid {
                    what: "-w",
                    why: format!("{n} (0 or 1)"),
                })
            }
            None => file.use_watchdog.unwrap_or(true),
        };
        let io_timeout_s = args
            .io_timeout
            .or(file.io_timeout)
            .unwrap_or(DEFAULT_IO_TIMEOUT_S);
        check_range("io_timeout", io_timeout_s, IO_TIMEOUT_RANGE_S, " seconds")?;
        let kill_grace_s = args
            .kill_grace
            .or(file.kill_grace_seconds)
            .unwrap_or(DEFAULT_KILL_GRACE_S);
        check_range(
            "kill_grace_seconds",
            kill_grace_s,
            KILL_GRACE_RANGE_S,
            " seconds",
        )?;
        let watchdog_fire_timeout_s = file
            .watchdog_fire_timeout
            .unwrap_or(DEFAULT_WATCHDOG_FIRE_TIMEOUT_S);
        check_range(
            "watchdog_fire_timeout",
            watchdog_fire_timeout_s,
            WATCHDOG_FIRE_TIMEOUT_RANGE_S,
            " seconds",
        )?;
        let sh_retries = file.sh_retries.unwrap_or(DEFAULT_SH_RETRIES);
        check_range("sh_retries", sh_retries, SH_RETRIES_RANGE, "")?;
        let wdmd_run_dir = file
            .wdmd_run_dir
            .clone()
            .or_else(|| {
                std::env::var_os("WDMD_RUN_DIR")
                    .filter(|v| !v.is_empty())
                    .map(PathBuf::from)
            })
            .unwrap_or_else(|| PathBuf::from(DEFAULT_WDMD_RUN_DIR));
        check_dir("wdmd_run_dir", &wdmd_run_dir, wdmd::proto::SOCKET_NAME)?;
        let log_file = args
            .log_file
            .clone()
            .or(file.log_file.clone())
            .unwrap_or_else(|| PathBuf::from(DEFAULT_LOG_FILE));
        check_path("log_file", &log_file, PATH_MAX_BYTES)?;
        let name_text = match args.host_name.clone().or(file.our_host_name.clone()) {
            Some(n) => n,
            None => derived_host_name(),
        };
        if let Some(c) = name_text.chars().find(|c| c.is_control()) {
            // The name is written into every delta lease and shown by other hosts'
            // tools and logs: a control character would reach their terminals.
            return Err(ConfigError::Invalid {
                what: "our_host_name",
                why: format!(
                    "{name_text:?} holds the control character {c:?} (1..=48 bytes, \
                     printable characters only)"
                ),
            });
        }
        let host_name = Name::new(&name_text).map_err(|e| ConfigError::Invalid {
            what: "our_host_name",
            why: format!("{e} (1..=48 bytes, no NUL, printable characters only)"),
        })?;
        let metrics_listen = match &file.metrics_listen {
            Some(text) => Some(parse_metrics_listen(text)?),
            None => None,
        };
        let client_privileges = match &file.client_privileges {
            Some(text) => ClientPrivileges::parse(text)?,
            None => ClientPrivileges::default(),
        };
        let fence = FenceConfig::resolve(
            file.fence.as_deref(),
            file.fence_lockspaces.as_deref(),
            file.fence_devices.as_deref(),
            file.fence_preempt_s,
        )?
        .with_drain_ms(file.fence_drain_ms)?;
        Ok(Config {
            fence,
            client_privileges,
            metrics_listen,
            mlock: file.mlock.unwrap_or(true),
            run_dir,
            foreground: args.foreground,
            use_watchdog,
            host_name,
            io_timeout_s,
            watchdog_fire_timeout_s,
            wdmd_run_dir,
            kill_grace_s,
            sh_retries,
            read_all_dblocks: file.read_all_dblocks.unwrap_or(false),
            read_whole_lockspace: file.read_whole_lockspace.unwrap_or(true),
            log_file,
            socket_gid: match args.socket_group.clone().or(file.socket_group.clone()) {
                Some(g) => Some(group_to_gid(&g).ok_or(ConfigError::Invalid {
                    what: "socket_group",
                    why: if g.parse::<u32>().is_ok() {
                        format!(
                            "{g:?} is not a gid (0..=4294967294; -1 means \"no change\" to chown)"
                        )
                    } else {
                        format!("{g:?}: no such group (a group name or a gid)")
                    },
                })?),
                // As sanlock: the `sanlock` group owns the socket when it exists, so
                // clients already set up for sanlock can connect.
                None => group_to_gid("sanlock"),
            },
        })
    }
}

/// Refuses a value outside its documented range, naming the key and the range.
fn check_range(
    key: &'static str,
    value: u32,
    range: RangeInclusive<u32>,
    unit: &str,
) -> Result<(), ConfigError> {
    if range.contains(&value) {
        return Ok(());
    }
    Err(ConfigError::Invalid {
        what: key,
        why: format!(
            "{value} is out of range ({}..={}{unit})",
            range.start(),
            range.end()
        ),
    })
}

/// `metrics_listen`: an `IP:PORT` (IPv6 in brackets) with a port in 1..=65535. A
/// host name is refused: the address must not depend on name resolution at start.
pub fn parse_metrics_listen(text: &str) -> Result<std::net::SocketAddr, ConfigError> {
    let invalid = |why: String| ConfigError::Invalid {
        what: "metrics_listen",
        why,
    };
    let addr: std::net::SocketAddr = text.parse().map_err(|_| {
        invalid(format!(
            "{text:?} is not IP:PORT (e.g. \"127.0.0.1:9591\" or \"[::1]:9591\")"
        ))
    })?;
    if addr.port() == 0 {
        return Err(invalid(format!(
            "{text:?}: port 0 is out of range (1..=65535)"
        )));
    }
    Ok(addr)
}

/// A path: not empty, no NUL byte, at most `max_bytes` long.
fn check_path(key: &'static str, path: &Path, max_bytes: usize) -> Result<(), ConfigError> {
    let bytes = path.as_os_str().as_encoded_bytes();
    let why = if bytes.is_empty() {
        "empty path".to_string()
    } else if bytes.contains(&0) {
        format!("{path:?} contains a NUL byte")
    } else if bytes.len() > max_bytes {
        format!("{path:?} is {} bytes (1..={max_bytes})", bytes.len())
    } else {
        return Ok(());
    };
    Err(ConfigError::Invalid { what: key, why })
}

/// A directory holding the socket `socket_name`: that socket's path must fit `sun_path`.
fn check_dir(key: &'static str, dir: &Path, socket_name: &str) -> Result<(), ConfigError> {
    let max_bytes = SOCKET_PATH_MAX_BYTES - 1 - socket_name.len();
    check_path(key, dir, max_bytes)
}

/// A group name (looked up through NSS with nix, as getgrnam does) or a numeric gid.
/// A group name or a numeric gid. `4294967295` is no gid: to `chown` it means "leave the
/// group as it is" ((gid_t)-1), so it is refused like an unknown group.
pub fn group_to_gid(group: &str) -> Option<u32> {
    if let Ok(n) = group.parse::<u32>() {
        return (n != u32::MAX).then_some(n);
    }
    nix::unistd::Group::from_name(group)
        .ok()
        .flatten()
        .map(|g| g.gid.as_raw())
}

/// Reads a TOML config; a missing file is the defaults unless `required`.
pub fn load_file(path: &Path, required: bool) -> Result<FileConfig, ConfigError> {
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

/// The default host name: the first 8 hex digits of /etc/machine-id, the first 16 of
/// the kernel's boot id, and the node name, ≤ 48 bytes (the node name is what truncation
/// cuts).
///
/// The boot id makes the name unique among hosts cloned from one image (same machine-id,
/// same node name): two live hosts under one name could both take one host_id, since
/// delta-lease records under one name cannot be told apart. The name is stable across
/// daemon restarts within one boot and new after a reboot; either way a cleanly released
/// host_id takes the short wait (2·io_timeout) and a record that was not released the
/// full wait, whatever the name (lease-core `delta::acquire`).
pub fn derived_host_name() -> String {
    let node = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    let mid = std::fs::read_to_string("/etc/machine-id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    host_name_from(&mid, &boot, &node)
}

/// The hex digits of `id` (a machine-id or a UUID with dashes), at most `n`; empty when
/// `id` has other characters or fewer than `n` digits.
fn hex_prefix(id: &str, n: usize) -> String {
    let hex: String = id.chars().filter(|c| *c != '-').collect();
    if hex.len() >= n && hex.bytes().all(|c| c.is_ascii_hexdigit()) {
        hex[..n].to_ascii_lowercase()
    } else {
        String::new()
    }
}

fn host_name_from(machine_id: &str, boot_id: &str, node: &str) -> String {
    let parts = [hex_prefix(machine_id, 8), hex_prefix(boot_id, 16)];
    let mut name = parts
        .iter()
        .filter(|p| !p.is_empty())
        .cloned()
        .collect::<Vec<_>>()
        .join(".");
    let node: String = node.chars().filter(|c| !c.is_control()).collect();
    if !node.is_empty() {
        if !name.is_empty() {
            name.push('.');
        }
        name.push_str(&node);
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

    #[test]
    fn config_key_table_matches_file_config() {
        // Every key in the table parses as a FileConfig key (deny_unknown_fields) ...
        let mut all = String::new();
        for k in CONFIG_KEYS {
            let one = format!("{} = {}\n", k.key, k.example);
            let parsed: Result<FileConfig, _> = toml::from_str(&one);
            assert!(parsed.is_ok(), "{}: {:?}", k.key, parsed.err());
            all.push_str(&one);
        }
        // ... and every FileConfig field is in the table (count the Debug fields).
        let f: FileConfig = toml::from_str(&all).expect("all keys together");
        let dbg = format!("{f:?}");
        let fields = dbg.matches(": Some(").count();
        assert_eq!(
            fields,
            CONFIG_KEYS.len(),
            "FileConfig fields not in CONFIG_KEYS: {dbg}"
        );
        let none = format!("{:?}", FileConfig::default())
            .matches(": None")
            .count();
        assert_eq!(
            none,
            CONFIG_KEYS.len(),
            "FileConfig has keys the table lacks"
        );
    }

    use super::*;

    #[test]
    fn config_from_text_checks_like_a_file() {
        let c = Config::from_toml_text("io_timeout = 3\nwatchdog_fire_timeout = 30\n").unwrap();
        assert_eq!((c.io_timeout_s, c.watchdog_fire_timeout_s), (3, 30));
        assert!(c.mlock, "mlock defaults to true");
        assert!(!Config::from_toml_text("mlock = false").unwrap().mlock);
        for bad in [
            "mlock = 1",
            "watchdog_fire_timeout = 0",
            "io_timeout = 0",
            "x = 1",
            "io_timeout = \"a\"",
            "[[[",
        ] {
            assert!(Config::from_toml_text(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn groups_are_looked_up_through_nss() {
        assert_eq!(group_to_gid("root"), Some(0));
        assert_eq!(group_to_gid("4242"), Some(4242));
        assert_eq!(group_to_gid("no-such-group-lockd"), None);
    }

    #[test]
    fn host_name_shape() {
        let mid = "0123456789abcdef0123456789abcdef";
        let boot = "fedcba98-7654-3210-0123-456789abcdef";
        let n = host_name_from(mid, boot, "node1");
        assert_eq!(n, "01234567.fedcba9876543210.node1");
        let long = host_name_from(mid, boot, &"x".repeat(40));
        assert_eq!(long.len(), 48);
        assert!(long.starts_with("01234567.fedcba9876543210."));
        assert_eq!(host_name_from("", "", ""), "lockd-host");
        assert_eq!(host_name_from("", "", "a\nb"), "ab");
        assert_eq!(derived_host_name(), derived_host_name());
    }

    #[test]
    fn clones_of_one_image_get_different_default_names() {
        // Same machine-id, same node name (a cloned image), different boots.
        let mid = "0123456789abcdef0123456789abcdef";
        let a = host_name_from(mid, "11111111-2222-3333-4444-555555555555", "vm");
        let b = host_name_from(mid, "66666666-7777-8888-9999-000000000000", "vm");
        assert_ne!(a, b);
        // And the derived name carries this boot's id.
        let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
        assert!(derived_host_name().contains(&hex_prefix(boot.trim(), 16)));
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

    /// Every key and option outside its range is refused with its name and its range;
    /// the ends of each range are accepted.
    #[test]
    fn every_value_range_checked() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("lockd.toml");
        let resolve = |text: &str, args: DaemonArgs| {
            std::fs::write(&cfg, text).unwrap();
            let args = DaemonArgs {
                config: Some(cfg.clone()),
                // A fixed name unless the test is about the name.
                host_name: args
                    .host_name
                    .or((!text.contains("our_host_name")).then(|| "h".into())),
                ..args
            };
            Config::resolve(&args, None)
        };
        let refused = |text: &str, args: DaemonArgs, key: &str, range: &str| {
            let err = resolve(text, args).unwrap_err().to_string();
            assert!(
                err.contains(key) && err.contains(range),
                "{text:?}: {err} (wanted {key} and {range})"
            );
        };
        let none = DaemonArgs::default;
        for bad in ["0", "4000000000", "4", "301"] {
            refused(
                &format!("watchdog_fire_timeout = {bad}\n"),
                none(),
                "watchdog_fire_timeout",
                "5..=300 seconds",
            );
        }
        for good in [5, 60, 300] {
            let c = resolve(&format!("watchdog_fire_timeout = {good}\n"), none()).unwrap();
            assert_eq!(c.watchdog_fire_timeout_s, good);
        }
        refused("io_timeout = 0\n", none(), "io_timeout", "1..=255 seconds");
        refused(
            "io_timeout = 256\n",
            none(),
            "io_timeout",
            "1..=255 seconds",
        );
        let cli_io = DaemonArgs {
            io_timeout: Some(0),
            ..none()
        };
        refused("", cli_io, "io_timeout", "1..=255 seconds");
        refused(
            "kill_grace_seconds = 61\n",
            none(),
            "kill_grace_seconds",
            "0..=60",
        );
        let cli_grace = DaemonArgs {
            kill_grace: Some(999),
            ..none()
        };
        refused("", cli_grace, "kill_grace_seconds", "0..=60");
        refused("sh_retries = 101\n", none(), "sh_retries", "0..=100");
        let c = resolve(
            "sh_retries = 0\nkill_grace_seconds = 0\nio_timeout = 255\n",
            none(),
        );
        let c = c.unwrap();
        assert_eq!((c.sh_retries, c.kill_grace_s, c.io_timeout_s), (0, 0, 255));
        let cli_w = DaemonArgs {
            use_watchdog: Some(2),
            ..none()
        };
        refused("", cli_w, "-w", "0 or 1");
        let long_name = DaemonArgs {
            host_name: Some("x".repeat(49)),
            ..none()
        };
        refused("", long_name, "our_host_name", "1..=48 bytes");
        refused(
            "our_host_name = \"\"\n",
            none(),
            "our_host_name",
            "1..=48 bytes",
        );
        // sanlock.sock under run_dir must fit sun_path: 107 - 13 = 94 bytes.
        let long_dir = format!("/{}", "d".repeat(94));
        refused(
            &format!("run_dir = \"{long_dir}\"\n"),
            none(),
            "run_dir",
            "1..=94",
        );
        let ok_dir = format!("/{}", "d".repeat(93));
        let c = resolve(&format!("run_dir = \"{ok_dir}\"\n"), none()).unwrap();
        assert_eq!(c.run_dir, PathBuf::from(ok_dir));
        refused("run_dir = \"\"\n", none(), "run_dir", "empty path");
        refused("run_dir = \"/a\\u0000b\"\n", none(), "run_dir", "NUL");
        let long_wdmd = format!("/{}", "w".repeat(97));
        refused(
            &format!("wdmd_run_dir = \"{long_wdmd}\"\n"),
            none(),
            "wdmd_run_dir",
            "1..=97",
        );
        refused("log_file = \"\"\n", none(), "log_file", "empty path");
        let long_log = format!("/{}", "l".repeat(4095));
        refused(
            &format!("log_file = \"{long_log}\"\n"),
            none(),
            "log_file",
            "1..=4095",
        );
        refused(
            "socket_group = \"no-such-group-lockd\"\n",
            none(),
            "socket_group",
            "no such group",
        );
        // (gid_t)-1: chown would leave the group as it is.
        refused(
            "socket_group = \"4294967295\"\n",
            none(),
            "socket_group",
            "not a gid",
        );
        refused(
            "socket_group = \"-1\"\n",
            none(),
            "socket_group",
            "no such group",
        );
        let cli_gid = DaemonArgs {
            socket_group: Some("4294967295".into()),
            ..none()
        };
        refused("", cli_gid, "socket_group", "not a gid");
        assert_eq!(
            resolve("socket_group = \"4294967294\"\n", none())
                .unwrap()
                .socket_gid,
            Some(4_294_967_294)
        );
        // A control character in the name would reach the disk and other hosts' screens.
        for bad in ["a\\nb", "host\\u001b[31m", "tab\\there", "del\\u007f"] {
            refused(
                &format!("our_host_name = \"{bad}\"\n"),
                none(),
                "our_host_name",
                "control character",
            );
        }
        let cli_name = DaemonArgs {
            host_name: Some("evil\x1b]0;x\x07".into()),
            ..none()
        };
        refused("", cli_name, "our_host_name", "control character");
        let c = resolve("our_host_name = \"host-1.example:ä\"\n", none()).unwrap();
        assert_eq!(c.host_name.to_text(), "host-1.example:ä");
        refused(
            "metrics_listen = \"127.0.0.1:0\"\n",
            none(),
            "metrics_listen",
            "1..=65535",
        );
        for bad in ["localhost:9591", "127.0.0.1", "127.0.0.1:65536", ""] {
            refused(
                &format!("metrics_listen = {bad:?}\n"),
                none(),
                "metrics_listen",
                "IP:PORT",
            );
        }
        let c = resolve("", none()).unwrap();
        assert_eq!(c.metrics_listen, None, "off by default");
        let c = resolve("metrics_listen = \"[::1]:65535\"\n", none()).unwrap();
        assert_eq!(c.metrics_listen, Some("[::1]:65535".parse().unwrap()));
        let c = resolve("metrics_listen = \"127.0.0.1:9591\"\n", none()).unwrap();
        assert_eq!(c.metrics_listen, Some("127.0.0.1:9591".parse().unwrap()));
        for bad in ["root", "Uid", "", "sanlock "] {
            refused(
                &format!("client_privileges = {bad:?}\n"),
                none(),
                "client_privileges",
                "\"uid\" or \"sanlock\"",
            );
        }
        let c = resolve("", none()).unwrap();
        assert_eq!(c.client_privileges, ClientPrivileges::Uid, "uid by default");
        let c = resolve("client_privileges = \"sanlock\"\n", none()).unwrap();
        assert_eq!(c.client_privileges, ClientPrivileges::Sanlock);
        let c = resolve("client_privileges = \"uid\"\n", none()).unwrap();
        assert_eq!(c.client_privileges.as_str(), "uid");
    }
}
