//! A libwdmd-compatible client, for lockd's daemon (one connection per lockspace).
//!
//! Sequence used by sanlock (and expected from lockd), per lockspace:
//! `connect` → `open_watchdog(W)` (3.9) → delta lease acquired → `register` →
//! `refcount_set` → `status` (fire_timeout must equal W) →
//! `test_live(ts, ts + id_renewal_fail)` after every renewal → on orderly stop
//! `test_live(0, 0)` + `refcount_clear` + drop.
//!
//! Times are CLOCK_MONOTONIC seconds ([`monotime`]).

use std::io::{self, ErrorKind, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use thiserror::Error;

use crate::proto::{self, Cmd, ProtoError, WdmdHeader, HEADER_SIZE};

pub use crate::sys::monotime;

/// Errors of the wdmd client.
#[derive(Debug, Error)]
pub enum WdmdClientError {
    /// connect(2) failed.
    #[error("cannot connect to wdmd at {path}")]
    Connect {
        /// Socket path.
        path: String,
        /// Cause.
        source: io::Error,
    },
    /// send/recv failed or the connection closed.
    #[error("wdmd {op}")]
    Io {
        /// Command.
        op: &'static str,
        /// Cause.
        source: io::Error,
    },
    /// Bad argument (name too long).
    #[error(transparent)]
    Proto(#[from] ProtoError),
    /// The wdmd did not answer in time.
    #[error("wdmd {op}: no reply within {timeout:?}")]
    Timeout {
        /// Command.
        op: &'static str,
        /// Limit.
        timeout: Duration,
    },
}

/// STATUS reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Status {
    /// Current test interval (1 while failing).
    pub test_interval: u32,
    /// Fire timeout in use.
    pub fire_timeout: u32,
    /// CLOCK_MONOTONIC seconds of the last keepalive (0 = never).
    pub last_keepalive: u64,
}

/// Result of OPEN_WATCHDOG.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenWatchdog {
    /// wdmd opened (or already had open) the device with this timeout; it may
    /// differ from the request, which sanlock treats as an error.
    Granted(u32),
    /// wdmd replied 0: it could not open or configure the device.
    Refused,
    /// No reply within the timeout: a 3.8 wdmd, which ignores command 7 and
    /// opens the device at start with its own timeout (check [`Status`]).
    NoReply,
}

/// One connection to wdmd.
#[derive(Debug)]
pub struct WdmdClient {
    stream: UnixStream,
    /// An OPEN_WATCHDOG reply may still arrive after a timeout.
    stray_open_reply: bool,
}

/// `<run_dir>/wdmd.sock`.
pub fn socket_path(run_dir: &Path) -> PathBuf {
    run_dir.join(proto::SOCKET_NAME)
}

/// Default timeout for STATUS replies.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(10);

impl WdmdClient {
    /// Connect to `<run_dir>/wdmd.sock`.
    pub fn connect(run_dir: &Path) -> Result<WdmdClient, WdmdClientError> {
        let path = socket_path(run_dir);
        let stream = UnixStream::connect(&path).map_err(|source| WdmdClientError::Connect {
            path: path.display().to_string(),
            source,
        })?;
        Ok(WdmdClient {
            stream,
            stray_open_reply: false,
        })
    }

    /// Connect to the production wdmd at `/run/wdmd/wdmd.sock`.
    pub fn connect_default() -> Result<WdmdClient, WdmdClientError> {
        WdmdClient::connect(Path::new(proto::DEFAULT_RUN_DIR))
    }

    fn send(&mut self, op: &'static str, h: &WdmdHeader) -> Result<(), WdmdClientError> {
        self.stream
            .write_all(&h.encode())
            .map_err(|source| WdmdClientError::Io { op, source })
    }

    /// Read one reply header, waiting at most `timeout`.
    fn recv(&mut self, op: &'static str, timeout: Duration) -> Result<WdmdHeader, WdmdClientError> {
        let deadline = Instant::now() + timeout;
        let mut buf = [0u8; HEADER_SIZE];
        let mut got = 0;
        while got < HEADER_SIZE {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(WdmdClientError::Timeout { op, timeout });
            }
            self.stream
                .set_read_timeout(Some(left))
                .map_err(|source| WdmdClientError::Io { op, source })?;
            match self.stream.read(&mut buf[got..]) {
                Ok(0) => {
                    return Err(WdmdClientError::Io {
                        op,
                        source: io::Error::new(
                            ErrorKind::UnexpectedEof,
                            "wdmd closed the connection",
                        ),
                    })
                }
                Ok(n) => got += n,
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    if got == 0 {
                        return Err(WdmdClientError::Timeout { op, timeout });
                    }
                    // A partial header: keep waiting until the deadline.
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(source) => return Err(WdmdClientError::Io { op, source }),
            }
        }
        Ok(WdmdHeader::decode(&buf)?)
    }

    /// CMD_REGISTER with a name such as `"lockd_<lockspace>:<host_id>"` (≤ 128 bytes).
    pub fn register(&mut self, name: &str) -> Result<(), WdmdClientError> {
        let mut h = WdmdHeader::new(Cmd::Register);
        h.set_name(name)?;
        self.send("register", &h)
    }

    /// CMD_REFCOUNT_SET: wdmd will not exit on SIGTERM while set.
    pub fn refcount_set(&mut self) -> Result<(), WdmdClientError> {
        self.send("refcount_set", &WdmdHeader::new(Cmd::RefcountSet))
    }

    /// CMD_REFCOUNT_CLEAR.
    pub fn refcount_clear(&mut self) -> Result<(), WdmdClientError> {
        self.send("refcount_clear", &WdmdHeader::new(Cmd::RefcountClear))
    }

    /// CMD_TEST_LIVE: arm with (renewal, expire) in CLOCK_MONOTONIC seconds;
    /// `(0, 0)` disarms. wdmd stops petting one test interval before `expire`.
    pub fn test_live(&mut self, renewal: u64, expire: u64) -> Result<(), WdmdClientError> {
        let mut h = WdmdHeader::new(Cmd::TestLive);
        h.renewal_time = renewal;
        h.expire_time = expire;
        self.send("test_live", &h)
    }

    /// CMD_STATUS.
    pub fn status(&mut self) -> Result<Status, WdmdClientError> {
        self.send("status", &WdmdHeader::new(Cmd::Status))?;
        loop {
            let r = self.recv("status", REPLY_TIMEOUT)?;
            if r.cmd == Cmd::OpenWatchdog && self.stray_open_reply {
                // A late answer to an OPEN_WATCHDOG that timed out.
                self.stray_open_reply = false;
                continue;
            }
            return Ok(Status {
                test_interval: r.test_interval,
                fire_timeout: r.fire_timeout,
                last_keepalive: r.last_keepalive,
            });
        }
    }

    /// CMD_OPEN_WATCHDOG (sanlock 3.9): ask wdmd to open the device with
    /// `fire_timeout`, waiting at most `timeout` for the reply (a 3.8 wdmd never replies).
    pub fn open_watchdog(
        &mut self,
        fire_timeout: u32,
        timeout: Duration,
    ) -> Result<OpenWatchdog, WdmdClientError> {
        let mut h = WdmdHeader::new(Cmd::OpenWatchdog);
        h.fire_timeout = fire_timeout;
        self.send("open_watchdog", &h)?;
        match self.recv("open_watchdog", timeout) {
            Ok(r) if r.fire_timeout == 0 => Ok(OpenWatchdog::Refused),
            Ok(r) => Ok(OpenWatchdog::Granted(r.fire_timeout)),
            Err(WdmdClientError::Timeout { .. }) => {
                self.stray_open_reply = true;
                Ok(OpenWatchdog::NoReply)
            }
            Err(e) => Err(e),
        }
    }

    /// Access to the raw stream (for polling for hang-up, etc.).
    pub fn stream(&self) -> &UnixStream {
        &self.stream
    }
}

/// CMD_DUMP_DEBUG on a fresh connection; returns wdmd's text.
pub fn dump_debug(run_dir: &Path) -> Result<String, WdmdClientError> {
    let mut c = WdmdClient::connect(run_dir)?;
    c.send("dump_debug", &WdmdHeader::new(Cmd::DumpDebug))?;
    let op = "dump_debug";
    let mut out = Vec::new();
    let mut buf = [0u8; 65536];
    // Wait up to 10 s for the first bytes, then read until a short quiet gap
    // (wdmd keeps the connection open after answering).
    let mut wait = REPLY_TIMEOUT;
    loop {
        c.stream
            .set_read_timeout(Some(wait))
            .map_err(|source| WdmdClientError::Io { op, source })?;
        match c.stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                out.extend_from_slice(&buf[..n]);
                wait = Duration::from_millis(200);
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                if out.is_empty() {
                    return Err(WdmdClientError::Timeout {
                        op,
                        timeout: REPLY_TIMEOUT,
                    });
                }
                break;
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(source) => return Err(WdmdClientError::Io { op, source }),
        }
        if out.len() > 1 << 20 {
            break;
        }
    }
    // The C wdmd's buffer is NUL padded; stop at the first NUL.
    if let Some(p) = out.iter().position(|&b| b == 0) {
        out.truncate(p);
    }
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// One `client ...` line of a DUMP_DEBUG text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DumpClient {
    /// Registered name ("dump" for dump connections, "" if unregistered).
    pub name: String,
    /// Peer pid (0 if unregistered).
    pub pid: i32,
    /// Connection closed but still tested.
    pub dead: bool,
    /// Refcount set.
    pub refcount: bool,
    /// Last renewal.
    pub renewal: u64,
    /// Expiry (0 = not armed).
    pub expire: u64,
}

/// Parse the `client` lines of a dump (this wdmd's or sanlock's format).
pub fn parse_dump_clients(text: &str) -> Vec<DumpClient> {
    text.lines()
        .filter(|l| l.starts_with("client "))
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let get = |k: &str| {
                w.iter()
                    .position(|x| *x == k)
                    .and_then(|i| w.get(i + 1))
                    .copied()
            };
            // The name may be empty, in which case "pid" follows "name" directly.
            let name = match get("name") {
                Some("pid") | None => String::new(),
                Some(n) => n.to_string(),
            };
            Some(DumpClient {
                name,
                pid: get("pid")?.parse().ok()?,
                dead: get("dead")? == "1",
                refcount: get("ref")? == "1",
                renewal: get("renewal")?.parse().ok()?,
                expire: get("expire")?.parse().ok()?,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dump_parse() {
        let t = "wdmd 1 socket_gid 0 high_priority 0 now 5\nclient 1 name sanlock_ls:1 pid 42 fd 7 dead 0 ref 1 now 5 renewal 3 expire 11\nclient 2 name  pid 0 fd 8 dead 1 ref 0 now 5 renewal 0 expire 0\nclient broken\n";
        let c = parse_dump_clients(t);
        assert_eq!(c.len(), 2);
        assert_eq!(c[0].name, "sanlock_ls:1");
        assert_eq!(c[0].pid, 42);
        assert!(c[0].refcount && !c[0].dead);
        assert_eq!((c[0].renewal, c[0].expire), (3, 11));
        assert_eq!(c[1].name, "");
        assert!(c[1].dead);
    }

    #[test]
    fn connect_error_is_clear() {
        let e = WdmdClient::connect(Path::new("/nonexistent/run")).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/run/wdmd.sock"), "{e}");
    }

    #[test]
    fn name_too_long_is_rejected_before_sending() {
        let d = tempfile::tempdir().unwrap();
        let l = std::os::unix::net::UnixListener::bind(socket_path(d.path())).unwrap();
        let mut c = WdmdClient::connect(d.path()).unwrap();
        let _peer = l.accept().unwrap();
        assert!(matches!(
            c.register(&"n".repeat(200)),
            Err(WdmdClientError::Proto(ProtoError::NameTooLong(200)))
        ));
    }

    #[test]
    fn open_watchdog_times_out_against_a_silent_peer_and_skips_the_late_reply() {
        let d = tempfile::tempdir().unwrap();
        let l = std::os::unix::net::UnixListener::bind(socket_path(d.path())).unwrap();
        let mut c = WdmdClient::connect(d.path()).unwrap();
        let (mut peer, _) = l.accept().unwrap();
        let r = c.open_watchdog(60, Duration::from_millis(200)).unwrap();
        assert_eq!(r, OpenWatchdog::NoReply);
        // The peer now answers the OPEN_WATCHDOG late and then the STATUS.
        let mut req = [0u8; HEADER_SIZE];
        peer.read_exact(&mut req).unwrap();
        let mut late = WdmdHeader::decode(&req).unwrap();
        late.fire_timeout = 60;
        peer.write_all(&late.encode()).unwrap();
        let t = std::thread::spawn(move || {
            let mut req = [0u8; HEADER_SIZE];
            peer.read_exact(&mut req).unwrap();
            let mut st = WdmdHeader::decode(&req).unwrap();
            assert_eq!(st.cmd, Cmd::Status);
            st.test_interval = 1;
            st.fire_timeout = 5;
            st.last_keepalive = 99;
            peer.write_all(&st.encode()).unwrap();
        });
        let s = c.status().unwrap();
        t.join().unwrap();
        assert_eq!(
            s,
            Status {
                test_interval: 1,
                fire_timeout: 5,
                last_keepalive: 99
            }
        );
    }
}
