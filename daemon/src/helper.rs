//! The helper process: forked at daemon start (while single-threaded), it receives kill
//! orders over a pipe and carries them out, so the daemon never blocks on fork/exec or on
//! a slow killpath program.
//!
//! Message: 512 bytes `{u8 type, u8 pad, u16 pad, u32 flags, i32 pid, i32 sig,
//! char path[128], char args[128], pad}` (the layout of sanlock's `helper_msg`).
//! The daemon writes without blocking; when the pipe is full the order is dropped and
//! counted (the kill escalation repeats orders each second, so a drop only delays).

use std::io::{self, Read, Write};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

use crate::sys;

pub const HELPER_MSG_LEN: usize = 512;
pub const HELPER_PATH_LEN: usize = 128;
pub const HELPER_ARGS_LEN: usize = 128;
const MAX_ARGV: usize = 8;

/// Run a program: `path` with `args` (split on unescaped whitespace), plus the pid.
pub const HELPER_MSG_RUNPATH: u8 = 1;
/// Send `sig` to `pid`.
pub const HELPER_MSG_KILLPID: u8 = 2;

/// One order for the helper.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HelperMsg {
    pub kind: u8,
    pub flags: u32,
    pub pid: i32,
    pub sig: i32,
    pub path: String,
    pub args: String,
}

impl HelperMsg {
    pub fn encode(&self) -> [u8; HELPER_MSG_LEN] {
        let mut b = [0u8; HELPER_MSG_LEN];
        b[0] = self.kind;
        b[4..8].copy_from_slice(&self.flags.to_ne_bytes());
        b[8..12].copy_from_slice(&self.pid.to_ne_bytes());
        b[12..16].copy_from_slice(&self.sig.to_ne_bytes());
        let p = self.path.as_bytes();
        let n = p.len().min(HELPER_PATH_LEN - 1);
        b[16..16 + n].copy_from_slice(&p[..n]);
        let a = self.args.as_bytes();
        let n = a.len().min(HELPER_ARGS_LEN - 1);
        b[144..144 + n].copy_from_slice(&a[..n]);
        b
    }

    pub fn decode(b: &[u8; HELPER_MSG_LEN]) -> HelperMsg {
        let i32_at = |o: usize| i32::from_ne_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        HelperMsg {
            kind: b[0],
            flags: u32::from_ne_bytes([b[4], b[5], b[6], b[7]]),
            pid: i32_at(8),
            sig: i32_at(12),
            path: client_lib::wire::c_field_text(&b[16..144]),
            args: client_lib::wire::c_field_text(&b[144..272]),
        }
    }
}

/// Splits killpath args on whitespace not preceded by a backslash; `\x` yields `x`.
pub fn split_args(args: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut chars = args.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let Some(n) = chars.next() {
                    cur.push(n);
                }
            }
            c if c.is_whitespace() => {
                if !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
            }
            c => cur.push(c),
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// The daemon's end of the helper pipe.
pub struct Helper {
    pub pid: i32,
    writer: Mutex<io::PipeWriter>,
    full_count: AtomicU32,
}

impl Helper {
    /// Forks the helper. Must run before the daemon starts any thread.
    pub fn start() -> io::Result<Helper> {
        assert_eq!(
            sys::thread_count(),
            1,
            "helper must be forked before any thread starts"
        );
        let (reader, writer) = io::pipe()?;
        // SAFETY: asserted just above (and checked again inside `fork`): the daemon
        // starts the helper before it starts any thread.
        #[allow(unsafe_code)]
        let forked = unsafe { sys::fork() };
        match forked? {
            sys::Forked::Child => {
                drop(writer);
                if let Err(e) = sys::helper_child_setup() {
                    // Without PDEATHSIG the helper could outlive the daemon: stop here
                    // (the daemon's orders then fail and it logs them as dropped).
                    eprintln!("lockd helper: cannot set up: {e}");
                    std::process::exit(1);
                }
                helper_loop(reader);
                std::process::exit(0);
            }
            sys::Forked::Parent { child_pid } => {
                drop(reader);
                use std::os::fd::AsRawFd;
                sys::set_nonblocking(writer.as_raw_fd())?;
                Ok(Helper {
                    pid: child_pid,
                    writer: Mutex::new(writer),
                    full_count: AtomicU32::new(0),
                })
            }
        }
    }

    /// Queues an order without blocking; returns false if it was dropped.
    pub fn send(&self, msg: &HelperMsg) -> bool {
        let bytes = msg.encode();
        let mut w = match self.writer.lock() {
            Ok(w) => w,
            Err(p) => p.into_inner(),
        };
        // Pipe writes of ≤ PIPE_BUF (4096) bytes are atomic: all or nothing.
        match w.write(&bytes) {
            Ok(n) if n == HELPER_MSG_LEN => true,
            _ => {
                self.full_count.fetch_add(1, Ordering::Relaxed);
                false
            }
        }
    }

    pub fn kill(&self, pid: i32, sig: i32) -> bool {
        self.send(&HelperMsg {
            kind: HELPER_MSG_KILLPID,
            flags: 0,
            pid,
            sig,
            path: String::new(),
            args: String::new(),
        })
    }

    /// Runs a client's killpath program, appending `pid` when `with_pid`.
    pub fn run_path(&self, path: &str, args: &str, pid: i32, with_pid: bool) -> bool {
        self.send(&HelperMsg {
            kind: HELPER_MSG_RUNPATH,
            flags: u32::from(with_pid),
            pid,
            sig: 0,
            path: path.to_string(),
            args: args.to_string(),
        })
    }

    pub fn full_count(&self) -> u32 {
        self.full_count.load(Ordering::Relaxed)
    }
}

fn helper_loop(mut reader: io::PipeReader) {
    let mut buf = [0u8; HELPER_MSG_LEN];
    loop {
        if reader.read_exact(&mut buf).is_err() {
            return; // daemon closed the pipe (or died)
        }
        let msg = HelperMsg::decode(&buf);
        match msg.kind {
            HELPER_MSG_KILLPID => {
                let _ = sys::kill(msg.pid, msg.sig);
            }
            HELPER_MSG_RUNPATH => {
                let mut argv = split_args(&msg.args);
                argv.truncate(MAX_ARGV - 1);
                if msg.flags & 1 != 0 {
                    argv.push(msg.pid.to_string());
                }
                // Children are reaped by the kernel (SIGCHLD ignored in the helper).
                let _ = Command::new(&msg.path).args(&argv).spawn();
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn msg_round_trip() {
        let m = HelperMsg {
            kind: HELPER_MSG_RUNPATH,
            flags: 1,
            pid: 1234,
            sig: 15,
            path: "/usr/bin/killer".into(),
            args: "a b\\ c".into(),
        };
        let b = m.encode();
        assert_eq!(b[0], 1);
        assert_eq!(&b[16..31], b"/usr/bin/killer");
        assert_eq!(HelperMsg::decode(&b), m);
    }

    #[test]
    fn args_split() {
        assert_eq!(split_args("a  b\\ c\td"), vec!["a", "b c", "d"]);
        assert!(split_args("   ").is_empty());
    }
}
