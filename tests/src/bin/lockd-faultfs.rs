//! `lockd-faultfs`: one host's view of the shared lease image, through FUSE, with faults
//! that the test bed can switch on and off while the other hosts' views keep working.
//!
//! ```text
//! lockd-faultfs --backing /var/tmp/shared.img --mount DIR --control SOCK
//! ```
//! (BACKING is a file or a block device) exposes `DIR/disk.img`, whose reads and writes go to the backing image with O_DIRECT
//! (so every host sees every other host's writes at once, as on shared storage). The
//! control socket takes one command per line and answers `ok` (or `error …`):
//!
//! * `pass`        — I/O goes straight through (the default);
//! * `delay MS`    — every I/O waits MS milliseconds first;
//! * `stall`       — every I/O blocks until the mode changes (a hung SAN path);
//! * `eio`         — every I/O fails with EIO;
//! * `status`      — answers `mode=… reads=N writes=M`.
//!
//! Invariants: an I/O reaches the backing image only in `pass` or `delay` mode; an I/O
//! that was blocked by `stall` proceeds (or fails) according to the mode in force when it
//! is released; nothing is cached in this process or (FOPEN_DIRECT_IO) in the kernel.

use std::ffi::OsStr;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use fuser::{
    Config, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, INodeNo, LockOwner,
    MountOption, OpenFlags, ReplyAttr, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry,
    ReplyOpen, ReplyWrite, Request, WriteFlags,
};

const FILE_NAME: &str = "disk.img";
const FILE_INO: INodeNo = INodeNo(2);
const ALIGN: usize = 4096;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Pass,
    Delay(u64),
    Stall,
    Eio,
}

struct Faults {
    mode: Mutex<Mode>,
    changed: Condvar,
    reads: AtomicU64,
    writes: AtomicU64,
}

impl Faults {
    /// Blocks while stalled; then Ok(()) to proceed or Err(EIO).
    fn gate(&self) -> Result<(), Errno> {
        let mut mode = self.mode.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            match *mode {
                Mode::Pass => return Ok(()),
                Mode::Eio => return Err(Errno::EIO),
                Mode::Delay(ms) => {
                    drop(mode);
                    thread::sleep(Duration::from_millis(ms));
                    return Ok(());
                }
                Mode::Stall => {
                    mode = self.changed.wait(mode).unwrap_or_else(|p| p.into_inner());
                }
            }
        }
    }

    fn set(&self, m: Mode) {
        *self.mode.lock().unwrap_or_else(|p| p.into_inner()) = m;
        self.changed.notify_all();
    }
}

struct FaultFs {
    direct: File,
    buffered: File,
    size: u64,
    faults: Arc<Faults>,
}

impl FaultFs {
    fn attr(&self, ino: INodeNo) -> FileAttr {
        let dir = ino == INodeNo::ROOT;
        FileAttr {
            ino,
            size: if dir { 0 } else { self.size },
            blocks: if dir { 0 } else { self.size / 512 },
            atime: UNIX_EPOCH,
            mtime: UNIX_EPOCH,
            ctime: UNIX_EPOCH,
            crtime: UNIX_EPOCH,
            kind: if dir {
                FileType::Directory
            } else {
                FileType::RegularFile
            },
            perm: if dir { 0o755 } else { 0o660 },
            nlink: if dir { 2 } else { 1 },
            uid: 0,
            gid: 0,
            rdev: 0,
            flags: 0,
            blksize: 512,
        }
    }

    fn aligned(offset: u64, len: usize) -> bool {
        offset.is_multiple_of(512) && len.is_multiple_of(512)
    }
}

/// A zeroed buffer whose usable part starts on a page boundary (for O_DIRECT).
fn aligned_buf(len: usize) -> (Vec<u8>, usize) {
    let v = vec![0u8; len + ALIGN];
    let start = v.as_ptr().align_offset(ALIGN);
    (v, start)
}

fn io_errno(e: &std::io::Error) -> Errno {
    Errno::from_i32(e.raw_os_error().unwrap_or(libc::EIO))
}

impl Filesystem for FaultFs {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        if parent == INodeNo::ROOT && name == FILE_NAME {
            reply.entry(&Duration::ZERO, &self.attr(FILE_INO), fuser::Generation(0));
        } else {
            reply.error(Errno::ENOENT);
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        if ino == INodeNo::ROOT || ino == FILE_INO {
            reply.attr(&Duration::ZERO, &self.attr(ino));
        } else {
            reply.error(Errno::ENOENT);
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        if ino == FILE_INO {
            reply.opened(FileHandle(0), FopenFlags::FOPEN_DIRECT_IO);
        } else {
            reply.error(Errno::ENOENT);
        }
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        if let Err(e) = self.faults.gate() {
            return reply.error(e);
        }
        self.faults.reads.fetch_add(1, Ordering::Relaxed);
        let len = (size as u64).min(self.size.saturating_sub(offset)) as usize;
        let (mut v, start) = aligned_buf(len);
        let buf = &mut v[start..start + len];
        let file = if Self::aligned(offset, len) {
            &self.direct
        } else {
            &self.buffered
        };
        match file.read_exact_at(buf, offset) {
            Ok(()) => reply.data(buf),
            Err(e) => reply.error(io_errno(&e)),
        }
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        if let Err(e) = self.faults.gate() {
            return reply.error(e);
        }
        if offset + data.len() as u64 > self.size {
            return reply.error(Errno::from_i32(libc::ENOSPC));
        }
        self.faults.writes.fetch_add(1, Ordering::Relaxed);
        let result = if Self::aligned(offset, data.len()) {
            let (mut v, start) = aligned_buf(data.len());
            v[start..start + data.len()].copy_from_slice(data);
            self.direct
                .write_all_at(&v[start..start + data.len()], offset)
        } else {
            self.buffered
                .write_all_at(data, offset)
                .and_then(|()| self.buffered.sync_data())
        };
        match result {
            Ok(()) => reply.written(data.len() as u32),
            Err(e) => reply.error(io_errno(&e)),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lo: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        if let Err(e) = self.faults.gate() {
            return reply.error(e);
        }
        match self.direct.sync_data() {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(io_errno(&e)),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        if ino != INodeNo::ROOT {
            return reply.error(Errno::ENOENT);
        }
        let entries = [
            (INodeNo::ROOT, FileType::Directory, "."),
            (INodeNo::ROOT, FileType::Directory, ".."),
            (FILE_INO, FileType::RegularFile, FILE_NAME),
        ];
        for (i, (ino, kind, name)) in entries.into_iter().enumerate().skip(offset as usize) {
            if reply.add(ino, (i + 1) as u64, kind, name) {
                break;
            }
        }
        reply.ok();
    }
}

fn parse_mode(line: &str) -> Result<Option<Mode>> {
    let mut words = line.split_whitespace();
    Ok(match (words.next(), words.next()) {
        (Some("pass"), None) => Some(Mode::Pass),
        (Some("stall"), None) => Some(Mode::Stall),
        (Some("eio"), None) => Some(Mode::Eio),
        (Some("delay"), Some(ms)) => {
            Some(Mode::Delay(ms.parse().context("delay takes milliseconds")?))
        }
        (Some("status"), None) => None,
        _ => bail!("unknown command {line:?} (pass | delay MS | stall | eio | status)"),
    })
}

fn serve_control(listener: UnixListener, faults: Arc<Faults>) {
    for conn in listener.incoming() {
        let Ok(conn) = conn else { continue };
        let faults = faults.clone();
        thread::spawn(move || {
            let Ok(mut writer) = conn.try_clone() else {
                return;
            };
            for line in BufReader::new(conn).lines() {
                let Ok(line) = line else { return };
                let answer = match parse_mode(&line) {
                    Ok(Some(m)) => {
                        faults.set(m);
                        "ok".to_string()
                    }
                    Ok(None) => format!(
                        "mode={:?} reads={} writes={}",
                        *faults.mode.lock().unwrap_or_else(|p| p.into_inner()),
                        faults.reads.load(Ordering::Relaxed),
                        faults.writes.load(Ordering::Relaxed)
                    ),
                    Err(e) => format!("error {e}"),
                };
                if writeln!(writer, "{answer}").is_err() {
                    return;
                }
            }
        });
    }
}

fn arg(args: &[String], flag: &str) -> Result<PathBuf> {
    let i = args
        .iter()
        .position(|a| a == flag)
        .with_context(|| format!("missing {flag}"))?;
    args.get(i + 1)
        .map(PathBuf::from)
        .with_context(|| format!("{flag} needs a value"))
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "-h" || a == "--help") {
        println!("usage: lockd-faultfs --backing IMAGE --mount DIR --control SOCKET");
        return Ok(());
    }
    let backing = arg(&args, "--backing")?;
    let mount = arg(&args, "--mount")?;
    let control = arg(&args, "--control")?;
    let direct = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(&backing)
        .with_context(|| format!("open {} with O_DIRECT", backing.display()))?;
    let buffered = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&backing)
        .with_context(|| format!("open {}", backing.display()))?;
    // A block device's metadata says 0 bytes: its size is where a seek to the end lands.
    let size = {
        use std::io::{Seek, SeekFrom};
        let meta = direct.metadata()?;
        if meta.file_type().is_file() {
            meta.len()
        } else {
            (&direct).seek(SeekFrom::End(0))?
        }
    };
    let faults = Arc::new(Faults {
        mode: Mutex::new(Mode::Pass),
        changed: Condvar::new(),
        reads: AtomicU64::new(0),
        writes: AtomicU64::new(0),
    });
    let _ = std::fs::remove_file(&control);
    let listener = UnixListener::bind(&control)
        .with_context(|| format!("bind control socket {}", control.display()))?;
    let f2 = faults.clone();
    thread::spawn(move || serve_control(listener, f2));
    let mut config = Config::default();
    config.mount_options.extend([
        MountOption::FSName("lockd-faultfs".into()),
        MountOption::AutoUnmount,
    ]);
    config.acl = fuser::SessionACL::All;
    config.n_threads = Some(4);
    let fs = FaultFs {
        direct,
        buffered,
        size,
        faults,
    };
    fuser::mount(fs, &mount, &config).with_context(|| format!("mount FUSE at {}", mount.display()))
}
