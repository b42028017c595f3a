//! An emulated watchdog device for machines without one.
//!
//! It runs as its own process (`wdmd-emulator`) so that, like hardware, it
//! outlives wdmd. wdmd "opens" it by connecting to its unix socket and speaks a
//! line protocol that mirrors the Linux watchdog API:
//!
//! | request          | reply       | meaning                                   |
//! |------------------|-------------|-------------------------------------------|
//! | (connect)        | `OK open T` | open: the timer starts (armed) and pings  |
//! | `GETTIMEOUT`     | `OK T`      | WDIOC_GETTIMEOUT                          |
//! | `SETTIMEOUT N`   | `OK N`      | WDIOC_SETTIMEOUT (also pings)             |
//! | `KEEPALIVE`      | `OK`        | WDIOC_KEEPALIVE                           |
//! | `V`              | `OK`        | the magic character: next close disarms   |
//! | (close after V)  |             | magic close: disarmed                     |
//! | (other close)    |             | unclean close: one last ping, still armed |
//!
//! A second opener gets `ERR busy` (a watchdog has one user). When armed and
//! `timeout` seconds pass without a ping the emulator "fires": it appends a
//! `fire ...` line (CLOCK_MONOTONIC and wall time) to its state file and
//! resets the simulated host by SIGKILLing its processes.

use std::fs::OpenOptions;
use std::io::{self, ErrorKind, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use thiserror::Error;

use crate::sys;

/// Errors of the emulator process.
#[derive(Debug, Error)]
pub enum EmuError {
    /// Socket setup failed.
    #[error("emulator socket {path}")]
    Socket {
        /// Socket path.
        path: String,
        /// Cause.
        source: io::Error,
    },
    /// The state file cannot be written.
    #[error("emulator state file {path}")]
    State {
        /// File path.
        path: String,
        /// Cause.
        source: io::Error,
    },
    /// A kill target could not be resolved at start.
    #[error("kill target {what}")]
    Target {
        /// Description.
        what: String,
        /// Cause.
        source: io::Error,
    },
    /// Bad configuration.
    #[error("{0}")]
    Config(String),
}

/// What a reset kills.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KillTarget {
    /// One pid. If it is the init of a PID namespace (e.g. the child of
    /// `unshare -pf`), the kernel kills the whole namespace with it.
    Pid(i32),
    /// A process group (kill(-pgid, SIGKILL)).
    Pgid(i32),
    /// Every process in the PID namespace that `pid` was in when the
    /// emulator started (scanned through /proc), plus `pid` itself.
    PidNsOf(i32),
}

impl KillTarget {
    /// Parse `pid:N`, `pgid:N` or `pidns:N` (a bare number means `pid:N`).
    pub fn parse(s: &str) -> Result<KillTarget, EmuError> {
        let (kind, num) = match s.split_once(':') {
            Some((k, n)) => (k, n),
            None => ("pid", s),
        };
        let n: i32 =
            num.parse().ok().filter(|n: &i32| *n > 1).ok_or_else(|| {
                EmuError::Config(format!("bad kill target {s:?}: need a pid > 1"))
            })?;
        match kind {
            "pid" => Ok(KillTarget::Pid(n)),
            "pgid" => Ok(KillTarget::Pgid(n)),
            "pidns" => Ok(KillTarget::PidNsOf(n)),
            _ => Err(EmuError::Config(format!(
                "bad kill target {s:?}: use pid:N, pgid:N or pidns:N"
            ))),
        }
    }
}

/// Emulator settings.
#[derive(Debug, Clone)]
pub struct EmulatorConfig {
    /// Device socket path (wdmd uses `-w emu:<this>`).
    pub socket: PathBuf,
    /// File the emulator appends its event lines to.
    pub state_file: PathBuf,
    /// Timeout before any SETTIMEOUT (a driver's default).
    pub default_timeout: u32,
    /// Largest timeout SETTIMEOUT accepts.
    pub max_timeout: u32,
    /// Processes of the simulated host.
    pub targets: Vec<KillTarget>,
    /// Exit after firing instead of staying as a disarmed device.
    pub exit_after_fire: bool,
}

/// Wall clock seconds since the epoch, with fractions.
fn wall_f64() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

fn pidns_of(pid: i32) -> io::Result<PathBuf> {
    std::fs::read_link(format!("/proc/{pid}/ns/pid"))
}

enum Resolved {
    Pid(i32),
    Pgid(i32),
    Ns { pid: i32, ns: PathBuf },
}

struct Device {
    conn: UnixStream,
    buf: Vec<u8>,
    expect_close: bool,
}

/// The running emulator.
pub struct Emulator {
    cfg: EmulatorConfig,
    listener: UnixListener,
    targets: Vec<Resolved>,
    timeout: u32,
    armed: bool,
    last_ping: f64,
    dev: Option<Device>,
}

impl Emulator {
    /// Bind the socket, resolve kill targets and write a `start` line.
    pub fn new(cfg: EmulatorConfig) -> Result<Emulator, EmuError> {
        if cfg.default_timeout == 0 || cfg.default_timeout > cfg.max_timeout {
            return Err(EmuError::Config(format!(
                "default timeout {} must be in 1..={}",
                cfg.default_timeout, cfg.max_timeout
            )));
        }
        let mut targets = Vec::new();
        for t in &cfg.targets {
            targets.push(match *t {
                KillTarget::Pid(p) => Resolved::Pid(p),
                KillTarget::Pgid(p) => Resolved::Pgid(p),
                KillTarget::PidNsOf(p) => Resolved::Ns {
                    pid: p,
                    ns: pidns_of(p).map_err(|source| EmuError::Target {
                        what: format!("pidns:{p}"),
                        source,
                    })?,
                },
            });
        }
        if let Ok(own) = pidns_of(sys::getpid()) {
            if targets
                .iter()
                .any(|t| matches!(t, Resolved::Ns { ns, .. } if *ns == own))
            {
                return Err(EmuError::Config(
                    "a pidns target is the emulator's own PID namespace; run the emulator outside the simulated host".into(),
                ));
            }
        }
        let sock_err = |source| EmuError::Socket {
            path: cfg.socket.display().to_string(),
            source,
        };
        match std::fs::remove_file(&cfg.socket) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(sock_err(e)),
        }
        let listener = UnixListener::bind(&cfg.socket).map_err(sock_err)?;
        listener.set_nonblocking(true).map_err(sock_err)?;
        let timeout = cfg.default_timeout;
        let emu = Emulator {
            cfg,
            listener,
            targets,
            timeout,
            armed: false,
            last_ping: 0.0,
            dev: None,
        };
        emu.record(&format!("start pid={} timeout={}", sys::getpid(), timeout))?;
        Ok(emu)
    }

    fn record(&self, what: &str) -> Result<(), EmuError> {
        let line = format!(
            "{what} mono={:.3} wall={:.3}\n",
            sys::monotime_f64(),
            wall_f64()
        );
        tracing::info!("{}", line.trim_end());
        let mut f = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.cfg.state_file)
            .map_err(|source| EmuError::State {
                path: self.cfg.state_file.display().to_string(),
                source,
            })?;
        f.write_all(line.as_bytes())
            .and_then(|()| f.sync_data())
            .map_err(|source| EmuError::State {
                path: self.cfg.state_file.display().to_string(),
                source,
            })
    }

    fn ping(&mut self) {
        self.last_ping = sys::monotime_f64();
    }

    /// Serve until fired (with `exit_after_fire`) or an error.
    pub fn run(&mut self) -> Result<(), EmuError> {
        loop {
            self.accept()?;
            self.serve_device()?;
            if self.armed && sys::monotime_f64() >= self.last_ping + f64::from(self.timeout) {
                self.fire()?;
                if self.cfg.exit_after_fire {
                    return Ok(());
                }
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn accept(&mut self) -> Result<(), EmuError> {
        loop {
            match self.listener.accept() {
                Ok((mut conn, _)) => {
                    if self.dev.is_some() {
                        let _ = conn.write_all(b"ERR busy\n");
                        continue;
                    }
                    if conn.set_nonblocking(true).is_err() {
                        continue;
                    }
                    let _ = conn.write_all(format!("OK open {}\n", self.timeout).as_bytes());
                    self.armed = true;
                    self.ping();
                    self.dev = Some(Device {
                        conn,
                        buf: Vec::new(),
                        expect_close: false,
                    });
                    self.record(&format!("open timeout={}", self.timeout))?;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => {
                    return Err(EmuError::Socket {
                        path: self.cfg.socket.display().to_string(),
                        source: e,
                    })
                }
            }
        }
    }

    fn serve_device(&mut self) -> Result<(), EmuError> {
        let Some(mut dev) = self.dev.take() else {
            return Ok(());
        };
        let mut closed = false;
        let mut chunk = [0u8; 256];
        loop {
            match dev.conn.read(&mut chunk) {
                Ok(0) => {
                    closed = true;
                    break;
                }
                Ok(n) => dev.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(_) => {
                    closed = true;
                    break;
                }
            }
            if dev.buf.len() > 4096 {
                // Not a line protocol peer; treat as a broken opener.
                closed = true;
                break;
            }
        }
        while let Some(pos) = dev.buf.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = dev.buf.drain(..=pos).collect();
            let line = String::from_utf8_lossy(&line).trim().to_string();
            let reply = self.handle(&mut dev, &line);
            if dev.conn.write_all(reply.as_bytes()).is_err() {
                closed = true;
            }
        }
        if closed {
            if dev.expect_close {
                self.armed = false;
                self.record("magic-close")?;
            } else {
                // Like typical drivers: the close pings once and the timer keeps running.
                self.ping();
                self.record(&format!("unclean-close timeout={}", self.timeout))?;
            }
        } else {
            self.dev = Some(dev);
        }
        Ok(())
    }

    fn handle(&mut self, dev: &mut Device, line: &str) -> String {
        let mut words = line.split_whitespace();
        match (words.next(), words.next(), words.next()) {
            (Some("GETTIMEOUT"), None, None) => format!("OK {}\n", self.timeout),
            (Some("SETTIMEOUT"), Some(n), None) => match n.parse::<u32>() {
                Ok(n) if n >= 1 && n <= self.cfg.max_timeout => {
                    self.timeout = n;
                    self.ping();
                    let _ = self.record(&format!("settimeout timeout={n}"));
                    format!("OK {n}\n")
                }
                _ => "ERR invalid timeout\n".to_string(),
            },
            (Some("KEEPALIVE"), None, None) => {
                self.ping();
                "OK\n".to_string()
            }
            (Some("V"), None, None) => {
                dev.expect_close = true;
                "OK\n".to_string()
            }
            _ => {
                dev.expect_close = false;
                "ERR unknown command\n".to_string()
            }
        }
    }

    fn fire(&mut self) -> Result<(), EmuError> {
        let mut killed = Vec::new();
        for t in &self.targets {
            match t {
                Resolved::Pid(p) => {
                    if sys::kill(*p, libc::SIGKILL).is_ok() {
                        killed.push(p.to_string());
                    }
                }
                Resolved::Pgid(g) => {
                    if sys::kill(-*g, libc::SIGKILL).is_ok() {
                        killed.push(format!("pgid{g}"));
                    }
                }
                Resolved::Ns { pid, ns } => {
                    if sys::kill(*pid, libc::SIGKILL).is_ok() {
                        killed.push(pid.to_string());
                    }
                    for p in pids_in_ns(ns) {
                        if p != *pid && p != sys::getpid() && sys::kill(p, libc::SIGKILL).is_ok() {
                            killed.push(p.to_string());
                        }
                    }
                }
            }
        }
        self.armed = false;
        self.dev = None;
        let last = self.last_ping;
        self.record(&format!(
            "fire timeout={} last_keepalive_mono={last:.3} killed={}",
            self.timeout,
            if killed.is_empty() {
                "none".to_string()
            } else {
                killed.join(",")
            }
        ))
    }
}

fn pids_in_ns(ns: &Path) -> Vec<i32> {
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    rd.filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()))
        .filter(|p| pidns_of(*p).map(|n| n == ns).unwrap_or(false))
        .collect()
}

/// One parsed line of an emulator state file.
#[derive(Debug, Clone, PartialEq)]
pub struct StateEvent {
    /// First word: start, open, settimeout, magic-close, unclean-close, fire.
    pub event: String,
    /// CLOCK_MONOTONIC seconds (the emulator's clock).
    pub mono: f64,
    /// Wall clock seconds since the epoch.
    pub wall: f64,
    /// The full line.
    pub line: String,
}

/// Parse an emulator state file; unparsable lines are skipped.
pub fn read_state(path: &Path) -> io::Result<Vec<StateEvent>> {
    let text = std::fs::read_to_string(path)?;
    Ok(text
        .lines()
        .filter_map(|l| {
            let event = l.split_whitespace().next()?.to_string();
            let field = |k: &str| {
                l.split_whitespace()
                    .find_map(|w| w.strip_prefix(k))
                    .and_then(|v| v.parse::<f64>().ok())
            };
            Some(StateEvent {
                event,
                mono: field("mono=")?,
                wall: field("wall=")?,
                line: l.to_string(),
            })
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kill_target_parse() {
        assert_eq!(KillTarget::parse("123").unwrap(), KillTarget::Pid(123));
        assert_eq!(KillTarget::parse("pgid:5").unwrap(), KillTarget::Pgid(5));
        assert_eq!(
            KillTarget::parse("pidns:77").unwrap(),
            KillTarget::PidNsOf(77)
        );
        assert!(KillTarget::parse("pid:1").is_err());
        assert!(KillTarget::parse("pid:-3").is_err());
        assert!(KillTarget::parse("cg:5").is_err());
        assert!(KillTarget::parse("pid:x").is_err());
    }

    #[test]
    fn state_parse() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("state");
        std::fs::write(
            &p,
            "start pid=1 timeout=3 mono=10.5 wall=1000.25\ngarbage\nfire timeout=3 last_keepalive_mono=7.000 killed=5 mono=10.000 wall=2.5\n",
        )
        .unwrap();
        let ev = read_state(&p).unwrap();
        assert_eq!(ev.len(), 2);
        assert_eq!(ev[0].event, "start");
        assert_eq!(ev[1].event, "fire");
        assert_eq!(ev[1].mono, 10.0);
        assert_eq!(ev[1].wall, 2.5);
    }
}
