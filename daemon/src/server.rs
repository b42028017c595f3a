//! The socket server's connections: binding the socket, and running one request.
//!
//! The reactor (`reactor.rs`) accepts connections and reads each 32-byte header; a pool
//! worker then runs the command to the end (`dispatch::run_command`) before the connection is
//! watched for the next, so a registered client's commands are serialised exactly as
//! sanlock serialises them (it suspends the fd while a command runs). The header goes
//! to `dispatch.rs`, which reads the request's payload through this connection's
//! [`PayloadSource`] (`client_lib::request::read_request`: structs read by size, as
//! sanlock reads them; the header's length is only a bound), each payload read with a
//! timeout so a client that stalls mid-message only blocks its own connection. Replies
//! are written here ([`Conn::reply`], [`Conn::reply_with`]). Nothing a peer sends can
//! panic a thread: every decode returns an error that becomes `-ENOTCONN`/`-EINVAL` at
//! the edge.

use std::io::{self, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::time::{Duration, Instant};

use client_lib::proto::*;
use client_lib::request::{PayloadSource, ShortRead};
use client_lib::wire::{Header, HEADER_LEN};
use tracing::debug;

use crate::sys::PeerCred;

/// How long a payload may take to arrive once its header did.
const PAYLOAD_TIMEOUT: Duration = Duration::from_secs(10);

/// At most one log line per this interval about refused connections (or failed accepts):
/// a flood of connections must not become a flood of log lines.
pub(crate) const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(5);

/// Counts events that are logged at most once per [`REFUSAL_LOG_INTERVAL`].
#[derive(Debug, Default)]
pub(crate) struct RateLimit {
    last: Option<Instant>,
    /// Events not logged since `last`.
    suppressed: u64,
}

impl RateLimit {
    /// Some(events since the last line, this one included) when a line is due now.
    pub(crate) fn hit(&mut self, now: Instant) -> Option<u64> {
        let due = self
            .last
            .is_none_or(|t| now.saturating_duration_since(t) >= REFUSAL_LOG_INTERVAL);
        if due {
            self.last = Some(now);
            let n = self.suppressed.saturating_add(1);
            self.suppressed = 0;
            Some(n)
        } else {
            self.suppressed = self.suppressed.saturating_add(1);
            None
        }
    }
}

/// Binds `<run_dir>/sanlock.sock` with mode 0660 (group `gid` when given).
pub fn bind(run_dir: &Path, gid: Option<u32>) -> io::Result<UnixListener> {
    let path = run_dir.join(SOCKET_NAME);
    match std::fs::remove_file(&path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let l = UnixListener::bind(&path)?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o660))?;
    if let Some(gid) = gid {
        std::os::unix::fs::chown(&path, None, Some(gid))?;
    }
    Ok(l)
}

/// One client connection.
pub struct Conn {
    pub stream: UnixStream,
    pub ci: u32,
    pub cred: PeerCred,
}

/// Why a read of a request failed.
#[derive(Debug)]
pub enum RecvError {
    /// Peer closed or the read failed: the connection is finished.
    Closed,
    /// Payload did not arrive in time or was short.
    Short,
}

impl Conn {
    fn read_full(&mut self, buf: &mut [u8]) -> Result<(), RecvError> {
        let mut got = 0;
        while got < buf.len() {
            match self.stream.read(&mut buf[got..]) {
                Ok(0) => return Err(RecvError::Closed),
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e)
                    if e.kind() == io::ErrorKind::WouldBlock
                        || e.kind() == io::ErrorKind::TimedOut =>
                {
                    return Err(RecvError::Short)
                }
                Err(_) => return Err(RecvError::Closed),
            }
        }
        Ok(())
    }

    /// Reads `n` payload bytes (n ≤ MAX_CLIENT_MSG) with the payload timeout.
    fn recv_payload(&mut self, n: usize) -> Result<Vec<u8>, RecvError> {
        if n > MAX_CLIENT_MSG as usize {
            return Err(RecvError::Short);
        }
        let _ = self.stream.set_read_timeout(Some(PAYLOAD_TIMEOUT));
        let mut buf = vec![0u8; n];
        let r = self.read_full(&mut buf);
        let _ = self.stream.set_read_timeout(None);
        r.map(|()| buf)
    }

    /// Reads and drops what is left of a message whose handling failed early, bounded by
    /// the header's length and by a short timeout.
    pub fn drain(&mut self, h: &Header, already: usize) {
        let Ok(total) = h.payload_len(MAX_CLIENT_MSG) else {
            return;
        };
        let left = total.saturating_sub(already);
        if left == 0 {
            return;
        }
        let _ = self
            .stream
            .set_read_timeout(Some(Duration::from_millis(200)));
        let mut buf = vec![0u8; left.min(64 * 1024)];
        let mut remaining = left;
        while remaining > 0 {
            let n = remaining.min(buf.len());
            match self.stream.read(&mut buf[..n]) {
                Ok(0) | Err(_) => break,
                Ok(k) => remaining -= k,
            }
        }
        let _ = self.stream.set_read_timeout(None);
    }

    pub fn send(&mut self, bytes: &[u8]) {
        if let Err(e) = self.stream.write_all(bytes) {
            debug!(ci = self.ci, error = %e, "send to client failed");
        }
    }

    /// Writes a handler's reply.
    pub fn send_reply(&mut self, reply: Reply) {
        self.send(&reply.0);
    }

    /// sanlock's `send_result`: request header, version SM_PROTO, length 32,
    /// data = result, data2 = 0.
    pub fn reply(&mut self, h: &Header, result: i32) {
        self.send_reply(Reply::result(h, result));
    }

    /// A reply header with data/data2 and a payload.
    pub fn reply_with(&mut self, h: &Header, result: i32, data2: u32, payload: &[u8]) {
        self.send_reply(Reply::with(h, result, data2, payload));
    }
}

/// A whole reply message as a handler made it; the dispatcher writes it
/// ([`Conn::send_reply`]), so the handlers that return one never touch the socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply(pub Vec<u8>);

impl Reply {
    /// sanlock's `send_result`: the request's header with `data` = `result`.
    pub fn result(h: &Header, result: i32) -> Reply {
        Reply(h.result_reply(result).encode().to_vec())
    }

    /// The request's header with `data` = `result`, `data2`, and `payload` after it
    /// (`length` covers both).
    pub fn with(h: &Header, result: i32, data2: u32, payload: &[u8]) -> Reply {
        let mut r = h.result_reply(result);
        r.data2 = data2;
        r.length = u32::try_from(HEADER_LEN + payload.len()).unwrap_or(u32::MAX);
        let mut msg = Vec::with_capacity(HEADER_LEN + payload.len());
        msg.extend_from_slice(&r.encode());
        msg.extend_from_slice(payload);
        Reply(msg)
    }
}

/// The daemon's requests are read from the connection, each payload read with
/// [`PAYLOAD_TIMEOUT`]; `discard_rest` is [`Conn::drain`].
impl PayloadSource for Conn {
    fn read_payload(&mut self, n: usize) -> Result<Vec<u8>, ShortRead> {
        self.recv_payload(n).map_err(|_| ShortRead)
    }

    fn discard_rest(&mut self, header: &Header, consumed: usize) {
        self.drain(header, consumed);
    }
}

/// What the dispatcher wants done with the connection after a command.
pub enum After {
    Keep,
    Close,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_are_logged_once_per_interval_with_a_count() {
        let mut r = RateLimit::default();
        let t0 = Instant::now();
        assert_eq!(r.hit(t0), Some(1));
        for i in 1..1000 {
            assert_eq!(r.hit(t0 + Duration::from_millis(i)), None);
        }
        assert_eq!(r.hit(t0 + REFUSAL_LOG_INTERVAL), Some(1000));
        assert_eq!(r.hit(t0 + REFUSAL_LOG_INTERVAL), None);
    }
}
