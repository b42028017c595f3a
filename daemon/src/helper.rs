//! The helper process: forked at daemon start (while single-threaded), it receives kill
//! orders over a pipe and carries them out, so the daemon never blocks on fork/exec or on
//! a slow killpath program.
//!
//! Message: 512 bytes `{u8 type, u8 pad, u16 pad, u32 flags, i32 pid, i32 sig,
//! char path[128], char args[128], pad}` (the layout of sanlock's `helper_msg`); lockd
//! uses the pad for the credentials a killpath runs with (flag [`HELPER_FLAG_RUN_AS`]:
//! `u32 uid, u32 gid, u32 ngroups, u32 groups[57]` from byte 272). A killpath with them
//! drops to that uid, gid and groups in the forked child before exec (`sys::run_as`);
//! one without runs as the helper (root). Groups past the 57th are dropped (fewer
//! rights, never more).
//! The daemon writes without blocking; when the pipe is full the order is dropped and
//! counted (the kill escalation repeats orders each second, so a drop only delays).
//!
//! Killpath programs report back: the helper waits for each one (a thread per program,
//! so a slow one blocks nothing) and writes a 16-byte [`PathStatus`] to a second pipe;
//! the daemon's `lockd-helper-status` thread logs it and records it on the client
//! (`killpath_status=` in STATUS).

use std::io::{self, Read, Write};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::access::FsCreds;
use crate::sys;

pub const HELPER_MSG_LEN: usize = 512;
pub const HELPER_PATH_LEN: usize = 128;
pub const HELPER_ARGS_LEN: usize = 128;
const MAX_ARGV: usize = 8;

/// Run a program: `path` with `args` (split on unescaped whitespace), plus the pid.
pub const HELPER_MSG_RUNPATH: u8 = 1;
/// Send `sig` to `pid`.
pub const HELPER_MSG_KILLPID: u8 = 2;

/// `flags` bit of a RUNPATH order: append the pid to the arguments.
pub const HELPER_FLAG_WITH_PID: u32 = 0x1;
/// `flags` bit of a RUNPATH order: run as the credentials in the message.
pub const HELPER_FLAG_RUN_AS: u32 = 0x2;
/// Where the credentials start in a message.
const CREDS_AT: usize = 272;
/// Most supplementary groups a message carries.
pub const HELPER_MAX_GROUPS: usize = (HELPER_MSG_LEN - CREDS_AT - 12) / 4;

/// One order for the helper.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HelperMsg {
    pub kind: u8,
    pub flags: u32,
    pub pid: i32,
    pub sig: i32,
    pub path: String,
    pub args: String,
    /// Credentials to run a killpath with (sent with [`HELPER_FLAG_RUN_AS`]).
    pub run_as: Option<FsCreds>,
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
        if let Some(c) = &self.run_as {
            let flags = self.flags | HELPER_FLAG_RUN_AS;
            b[4..8].copy_from_slice(&flags.to_ne_bytes());
            let groups = &c.groups[..c.groups.len().min(HELPER_MAX_GROUPS)];
            let words = [c.uid, c.gid, groups.len() as u32]
                .into_iter()
                .chain(groups.iter().copied());
            for (i, w) in words.enumerate() {
                let at = CREDS_AT + 4 * i;
                b[at..at + 4].copy_from_slice(&w.to_ne_bytes());
            }
        } else {
            let flags = self.flags & !HELPER_FLAG_RUN_AS;
            b[4..8].copy_from_slice(&flags.to_ne_bytes());
        }
        b
    }

    pub fn decode(b: &[u8; HELPER_MSG_LEN]) -> HelperMsg {
        let i32_at = |o: usize| i32::from_ne_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let u32_at = |o: usize| u32::from_ne_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let flags = u32_at(4);
        let run_as = (flags & HELPER_FLAG_RUN_AS != 0).then(|| {
            let n = (u32_at(CREDS_AT + 8) as usize).min(HELPER_MAX_GROUPS);
            FsCreds {
                uid: u32_at(CREDS_AT),
                gid: u32_at(CREDS_AT + 4),
                groups: (0..n).map(|i| u32_at(CREDS_AT + 12 + 4 * i)).collect(),
            }
        });
        HelperMsg {
            kind: b[0],
            flags: flags & !HELPER_FLAG_RUN_AS,
            pid: i32_at(8),
            sig: i32_at(12),
            path: client_lib::wire::c_field_text(&b[16..144]),
            args: client_lib::wire::c_field_text(&b[144..272]),
            run_as,
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

/// Length of a [`PathStatus`] record on the status pipe.
pub const PATH_STATUS_LEN: usize = 16;

/// How a killpath program ended, as the helper reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathEnd {
    /// exit(code)
    Exited(i32),
    /// killed by this signal
    Signaled(i32),
    /// could not be started (errno)
    NotStarted(i32),
}

/// One killpath report: `{i32 client_pid, i32 program_pid, i32 kind, i32 value}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PathStatus {
    /// The lease holder the killpath was run for.
    pub client_pid: i32,
    /// The killpath program's pid (0 when it could not be started).
    pub program_pid: i32,
    pub end: PathEnd,
}

impl PathStatus {
    pub fn encode(&self) -> [u8; PATH_STATUS_LEN] {
        let (kind, value) = match self.end {
            PathEnd::Exited(c) => (0i32, c),
            PathEnd::Signaled(s) => (1, s),
            PathEnd::NotStarted(e) => (2, e),
        };
        let mut b = [0u8; PATH_STATUS_LEN];
        b[0..4].copy_from_slice(&self.client_pid.to_ne_bytes());
        b[4..8].copy_from_slice(&self.program_pid.to_ne_bytes());
        b[8..12].copy_from_slice(&kind.to_ne_bytes());
        b[12..16].copy_from_slice(&value.to_ne_bytes());
        b
    }

    /// None for an unknown kind.
    pub fn decode(b: &[u8; PATH_STATUS_LEN]) -> Option<PathStatus> {
        let i32_at = |o: usize| i32::from_ne_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let value = i32_at(12);
        let end = match i32_at(8) {
            0 => PathEnd::Exited(value),
            1 => PathEnd::Signaled(value),
            2 => PathEnd::NotStarted(value),
            _ => return None,
        };
        Some(PathStatus {
            client_pid: i32_at(0),
            program_pid: i32_at(4),
            end,
        })
    }

    /// Short text for logs and STATUS: `exit:N`, `signal:N`, `noexec:ERRNO`.
    pub fn text(&self) -> String {
        match self.end {
            PathEnd::Exited(c) => format!("exit:{c}"),
            PathEnd::Signaled(s) => format!("signal:{s}"),
            PathEnd::NotStarted(e) => format!("noexec:{e}"),
        }
    }
}

/// The daemon's end of the helper pipe. Senders on any thread write to it without a
/// lock: each order is one write of [`HELPER_MSG_LEN`] bytes, at most PIPE_BUF, which
/// POSIX makes atomic (all or nothing, never interleaved with another writer's).
pub struct Helper {
    pub pid: i32,
    writer: io::PipeWriter,
    full_count: AtomicU32,
}

const _: () = assert!(
    HELPER_MSG_LEN <= 4096,
    "an order must fit PIPE_BUF to be written atomically"
);

/// The daemon's end of the helper's killpath reports, read by [`status_loop`].
pub struct StatusPipe(io::PipeReader);

impl Helper {
    /// Forks the helper. Must run before the daemon starts any thread.
    /// Killpath programs get `LOCKD_RUN_DIR=run_dir` in their environment (so a helper
    /// such as `lockd-killpath --release` finds this daemon).
    pub fn start(run_dir: &std::path::Path) -> io::Result<(Helper, StatusPipe)> {
        assert_eq!(
            sys::thread_count(),
            1,
            "helper must be forked before any thread starts"
        );
        let (reader, writer) = io::pipe()?;
        let (status_reader, status_writer) = io::pipe()?;
        // SAFETY: asserted just above (and checked again inside `fork`): the daemon
        // starts the helper before it starts any thread.
        #[allow(unsafe_code)]
        let forked = unsafe { sys::fork() };
        match forked? {
            sys::Forked::Child => {
                drop(writer);
                drop(status_reader);
                if let Err(e) = sys::helper_child_setup() {
                    // Without PDEATHSIG the helper could outlive the daemon: stop here
                    // (the daemon's orders then fail and it logs them as dropped).
                    eprintln!("lockd helper: cannot set up: {e}");
                    std::process::exit(1);
                }
                helper_loop(reader, status_writer, run_dir);
                std::process::exit(0);
            }
            sys::Forked::Parent { child_pid } => {
                drop(reader);
                drop(status_writer);
                use std::os::fd::AsRawFd;
                sys::set_nonblocking(writer.as_raw_fd())?;
                let helper = Helper {
                    pid: child_pid,
                    writer,
                    full_count: AtomicU32::new(0),
                };
                Ok((helper, StatusPipe(status_reader)))
            }
        }
    }

    /// Queues an order without blocking; returns false if it was dropped.
    pub fn send(&self, msg: &HelperMsg) -> bool {
        let bytes = msg.encode();
        // Pipe writes of ≤ PIPE_BUF (4096) bytes are atomic: all or nothing.
        match (&self.writer).write(&bytes) {
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
            run_as: None,
        })
    }

    /// Runs a client's killpath program, appending `pid` when `with_pid`, as
    /// `kp.run_as` (as root when None).
    pub fn run_path(&self, kp: &crate::tables::KillPath, pid: i32) -> bool {
        self.send(&HelperMsg {
            kind: HELPER_MSG_RUNPATH,
            flags: if kp.with_pid { HELPER_FLAG_WITH_PID } else { 0 },
            pid,
            sig: 0,
            path: kp.path.clone(),
            args: kp.args.clone(),
            run_as: kp.run_as.clone(),
        })
    }

    pub fn full_count(&self) -> u32 {
        self.full_count.load(Ordering::Relaxed)
    }
}

/// The daemon's `lockd-helper-status` thread: logs each killpath's end and records it
/// on the client it was run for, through the core (`Input::KillpathEnded`). Returns when
/// the helper is gone.
pub fn status_loop(status: StatusPipe, core: &crate::tables::CoreLock) {
    let StatusPipe(mut reader) = status;
    let mut buf = [0u8; PATH_STATUS_LEN];
    while reader.read_exact(&mut buf).is_ok() {
        let Some(st) = PathStatus::decode(&buf) else {
            continue;
        };
        let status = st.text();
        if st.end == PathEnd::Exited(0) {
            tracing::info!(
                pid = st.client_pid,
                killpath_pid = st.program_pid,
                %status,
                "killpath finished"
            );
        } else {
            tracing::warn!(
                pid = st.client_pid,
                killpath_pid = st.program_pid,
                %status,
                "killpath failed"
            );
        }
        let input = lockd_core::Input::KillpathEnded {
            pid: st.client_pid,
            status,
        };
        let effects = crate::sync::lock(core).step(crate::clock::now_s(), input);
        // The helper's status only changes what STATUS shows.
        assert!(
            effects.is_empty(),
            "a killpath's end gave effects: {effects:?}"
        );
    }
}

fn helper_loop(mut reader: io::PipeReader, status: io::PipeWriter, run_dir: &std::path::Path) {
    let status = std::sync::Arc::new(status);
    let report = |st: PathStatus, status: &io::PipeWriter| {
        // 16 bytes ≤ PIPE_BUF: one atomic write, never interleaved with another
        // waiter's, so the waiters share the pipe without a lock. The daemon reads
        // continuously.
        let mut w = status;
        let _ = w.write_all(&st.encode());
    };
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
                if msg.flags & HELPER_FLAG_WITH_PID != 0 {
                    argv.push(msg.pid.to_string());
                }
                let mut cmd = Command::new(&msg.path);
                cmd.args(&argv).env("LOCKD_RUN_DIR", run_dir);
                if let Some(creds) = msg.run_as.as_ref().filter(|_| sys::geteuid() == 0) {
                    // The client's rights, not root's: dropped in the child before exec
                    // (a helper not running as root has only its own to give).
                    sys::run_as(&mut cmd, creds);
                }
                match cmd.spawn() {
                    Ok(mut child) => {
                        let program_pid = child.id() as i32;
                        let sink = status.clone();
                        let client_pid = msg.pid;
                        // Wait in a thread: a slow killpath must not delay other orders.
                        let waiter = crate::threads::spawn("killpath-wait", move || {
                            use std::os::unix::process::ExitStatusExt;
                            let end = match child.wait() {
                                Ok(s) => match (s.code(), s.signal()) {
                                    (Some(c), _) => PathEnd::Exited(c),
                                    (None, Some(sig)) => PathEnd::Signaled(sig),
                                    (None, None) => PathEnd::Exited(-1),
                                },
                                Err(e) => PathEnd::NotStarted(e.raw_os_error().unwrap_or(0)),
                            };
                            report(
                                PathStatus {
                                    client_pid,
                                    program_pid,
                                    end,
                                },
                                &sink,
                            );
                        });
                        if waiter.is_err() {
                            // No thread: the program runs on unwatched (a zombie until
                            // the helper exits); say so to the daemon.
                            report(
                                PathStatus {
                                    client_pid: msg.pid,
                                    program_pid,
                                    end: PathEnd::NotStarted(libc::EAGAIN),
                                },
                                &status,
                            );
                        }
                    }
                    Err(e) => report(
                        PathStatus {
                            client_pid: msg.pid,
                            program_pid: 0,
                            end: PathEnd::NotStarted(e.raw_os_error().unwrap_or(0)),
                        },
                        &status,
                    ),
                }
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
            run_as: None,
        };
        let b = m.encode();
        assert_eq!(b[0], 1);
        assert_eq!(&b[16..31], b"/usr/bin/killer");
        assert_eq!(HelperMsg::decode(&b), m);
        // With credentials: they round-trip, and groups past the last slot are dropped.
        let creds = FsCreds {
            uid: 65534,
            gid: 65533,
            groups: (1..=100).collect(),
        };
        let with = HelperMsg {
            run_as: Some(creds.clone()),
            ..m.clone()
        };
        let back = HelperMsg::decode(&with.encode());
        assert_eq!(back.flags, 1);
        let got = back.run_as.expect("credentials");
        assert_eq!((got.uid, got.gid), (65534, 65533));
        assert_eq!(got.groups, creds.groups[..HELPER_MAX_GROUPS].to_vec());
        assert_eq!(HELPER_MAX_GROUPS, 57);
    }

    #[test]
    fn path_status_round_trip() {
        for end in [
            PathEnd::Exited(0),
            PathEnd::Exited(3),
            PathEnd::Signaled(9),
            PathEnd::NotStarted(2),
        ] {
            let st = PathStatus {
                client_pid: 42,
                program_pid: 4242,
                end,
            };
            assert_eq!(PathStatus::decode(&st.encode()), Some(st));
        }
        let mut b = PathStatus {
            client_pid: 1,
            program_pid: 2,
            end: PathEnd::Exited(0),
        }
        .encode();
        b[8] = 7;
        assert_eq!(PathStatus::decode(&b), None);
        assert_eq!(
            PathStatus {
                client_pid: 1,
                program_pid: 2,
                end: PathEnd::Signaled(15)
            }
            .text(),
            "signal:15"
        );
    }

    #[test]
    fn args_split() {
        assert_eq!(split_args("a  b\\ c\td"), vec!["a", "b c", "d"]);
        assert!(split_args("   ").is_empty());
    }
}
