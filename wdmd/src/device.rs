//! Watchdog device backends: the Linux watchdog API (`/dev/watchdog*`) and the
//! emulated device served by `wdmd-emulator` (`-w emu:/path/to/socket`).

use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use thiserror::Error;

use crate::sys;

/// The devices tried, in order, when no `-w` path is given (as sanlock's wdmd).
pub const DEFAULT_DEVICES: [&str; 3] = ["/dev/watchdog0", "/dev/watchdog1", "/dev/watchdog"];

/// Prefix of a `-w` argument naming an emulated device socket.
pub const EMU_PREFIX: &str = "emu:";

/// Errors from a watchdog device.
#[derive(Debug, Error)]
pub enum DeviceError {
    /// open(2) or connect(2) failed.
    #[error("cannot open watchdog {path}")]
    Open {
        /// Device path.
        path: String,
        /// Cause.
        source: io::Error,
    },
    /// An ioctl or emulator request failed.
    #[error("watchdog {path}: {op} failed")]
    Op {
        /// Device path.
        path: String,
        /// Operation name.
        op: &'static str,
        /// Cause.
        source: io::Error,
    },
    /// The driver did not accept the requested timeout.
    #[error("watchdog {path}: requested timeout {want} s, device reports {got} s")]
    TimeoutMismatch {
        /// Device path.
        path: String,
        /// Requested.
        want: u32,
        /// Read back.
        got: i64,
    },
    /// No candidate device could be opened.
    #[error("no usable watchdog device (tried {tried})")]
    NoDevice {
        /// Comma separated list of tried paths.
        tried: String,
        /// The last error.
        #[source]
        last: Box<DeviceError>,
    },
}

/// Where the watchdog is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceSpec {
    /// A Linux watchdog character device.
    Linux(PathBuf),
    /// A `wdmd-emulator` socket.
    Emulated(PathBuf),
}

impl DeviceSpec {
    /// Parse a `-w` argument: `emu:/path` for the emulator, anything else is a device path.
    pub fn parse(s: &str) -> DeviceSpec {
        match s.strip_prefix(EMU_PREFIX) {
            Some(p) => DeviceSpec::Emulated(PathBuf::from(p)),
            None => DeviceSpec::Linux(PathBuf::from(s)),
        }
    }

    /// Printable form (round-trips through [`DeviceSpec::parse`]).
    pub fn display(&self) -> String {
        match self {
            DeviceSpec::Linux(p) => p.display().to_string(),
            DeviceSpec::Emulated(p) => format!("{EMU_PREFIX}{}", p.display()),
        }
    }

    /// The candidate list: the given spec, then the default device paths. An
    /// emulated device is never followed by the real ones: a simulated host
    /// must not arm the machine's watchdog.
    pub fn candidates(option: Option<&DeviceSpec>) -> Vec<DeviceSpec> {
        if let Some(e @ DeviceSpec::Emulated(_)) = option {
            return vec![e.clone()];
        }
        let mut v: Vec<DeviceSpec> = option.into_iter().cloned().collect();
        for d in DEFAULT_DEVICES {
            let s = DeviceSpec::Linux(PathBuf::from(d));
            if !v.contains(&s) {
                v.push(s);
            }
        }
        v
    }
}

/// An open watchdog. Dropping it without [`Watchdog::close_magic`] is an unclean close.
pub trait Watchdog: Send {
    /// Printable device name.
    fn path(&self) -> String;
    /// WDIOC_GETTIMEOUT.
    fn get_timeout(&mut self) -> Result<i64, DeviceError>;
    /// WDIOC_SETTIMEOUT; returns the value read back by the call.
    fn set_timeout(&mut self, secs: u32) -> Result<i64, DeviceError>;
    /// WDIOC_KEEPALIVE.
    fn keepalive(&mut self) -> Result<(), DeviceError>;
    /// Write the magic 'V' and close: the watchdog is disarmed.
    fn close_magic(self: Box<Self>) -> Result<(), DeviceError>;
}

/// A Linux `/dev/watchdog*` device.
pub struct LinuxWatchdog {
    path: PathBuf,
    file: File,
}

impl LinuxWatchdog {
    /// open(O_WRONLY|O_CLOEXEC). Opening a Linux watchdog starts it.
    pub fn open(path: &Path) -> Result<LinuxWatchdog, DeviceError> {
        let file = OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_CLOEXEC)
            .open(path)
            .map_err(|source| DeviceError::Open {
                path: path.display().to_string(),
                source,
            })?;
        Ok(LinuxWatchdog {
            path: path.to_path_buf(),
            file,
        })
    }

    fn op_err(&self, op: &'static str, source: io::Error) -> DeviceError {
        DeviceError::Op {
            path: self.path.display().to_string(),
            op,
            source,
        }
    }
}

impl Watchdog for LinuxWatchdog {
    fn path(&self) -> String {
        self.path.display().to_string()
    }

    fn get_timeout(&mut self) -> Result<i64, DeviceError> {
        sys::wd_get_timeout(&self.file)
            .map(i64::from)
            .map_err(|e| self.op_err("WDIOC_GETTIMEOUT", e))
    }

    fn set_timeout(&mut self, secs: u32) -> Result<i64, DeviceError> {
        let v = i32::try_from(secs).map_err(|_| {
            self.op_err(
                "WDIOC_SETTIMEOUT",
                io::Error::new(io::ErrorKind::InvalidInput, "timeout out of range"),
            )
        })?;
        sys::wd_set_timeout(&self.file, v)
            .map(i64::from)
            .map_err(|e| self.op_err("WDIOC_SETTIMEOUT", e))
    }

    fn keepalive(&mut self) -> Result<(), DeviceError> {
        sys::wd_keepalive(&self.file).map_err(|e| self.op_err("WDIOC_KEEPALIVE", e))
    }

    fn close_magic(mut self: Box<Self>) -> Result<(), DeviceError> {
        self.file
            .write_all(b"V")
            .map_err(|e| self.op_err("magic close write", e))
    }
}

/// Client side of a `wdmd-emulator` device socket (line protocol, see `emulator`).
pub struct EmulatedWatchdog {
    path: PathBuf,
    stream: UnixStream,
    reader: BufReader<UnixStream>,
}

/// How long wdmd waits for one emulator reply.
const EMU_REPLY_TIMEOUT: Duration = Duration::from_secs(3);

impl EmulatedWatchdog {
    /// Connect ("open") the emulated device; the emulator arms on open, like a driver.
    pub fn open(path: &Path) -> Result<EmulatedWatchdog, DeviceError> {
        let open_err = |source| DeviceError::Open {
            path: format!("{EMU_PREFIX}{}", path.display()),
            source,
        };
        let stream = UnixStream::connect(path).map_err(open_err)?;
        stream
            .set_read_timeout(Some(EMU_REPLY_TIMEOUT))
            .map_err(open_err)?;
        stream
            .set_write_timeout(Some(EMU_REPLY_TIMEOUT))
            .map_err(open_err)?;
        let reader = BufReader::new(stream.try_clone().map_err(open_err)?);
        let mut dev = EmulatedWatchdog {
            path: path.to_path_buf(),
            stream,
            reader,
        };
        dev.read_reply("open").map_err(|e| match e {
            DeviceError::Op { source, .. } => open_err(source),
            other => other,
        })?;
        Ok(dev)
    }

    fn err(&self, op: &'static str, source: io::Error) -> DeviceError {
        DeviceError::Op {
            path: format!("{EMU_PREFIX}{}", self.path.display()),
            op,
            source,
        }
    }

    fn read_reply(&mut self, op: &'static str) -> Result<String, DeviceError> {
        let mut line = String::new();
        let n = self
            .reader
            .read_line(&mut line)
            .map_err(|e| self.err(op, e))?;
        if n == 0 {
            return Err(self.err(
                op,
                io::Error::new(io::ErrorKind::UnexpectedEof, "emulator closed the device"),
            ));
        }
        let line = line.trim_end().to_string();
        match line.strip_prefix("OK") {
            Some(rest) => Ok(rest.trim().to_string()),
            None => Err(self.err(op, io::Error::other(format!("emulator said: {line}")))),
        }
    }

    fn request(&mut self, op: &'static str, line: &str) -> Result<String, DeviceError> {
        self.stream
            .write_all(line.as_bytes())
            .map_err(|e| self.err(op, e))?;
        self.read_reply(op)
    }

    fn parse_int(&self, op: &'static str, s: &str) -> Result<i64, DeviceError> {
        s.parse::<i64>().map_err(|_| {
            self.err(
                op,
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("bad emulator reply {s:?}"),
                ),
            )
        })
    }
}

impl Watchdog for EmulatedWatchdog {
    fn path(&self) -> String {
        format!("{EMU_PREFIX}{}", self.path.display())
    }

    fn get_timeout(&mut self) -> Result<i64, DeviceError> {
        let r = self.request("GETTIMEOUT", "GETTIMEOUT\n")?;
        self.parse_int("GETTIMEOUT", &r)
    }

    fn set_timeout(&mut self, secs: u32) -> Result<i64, DeviceError> {
        let r = self.request("SETTIMEOUT", &format!("SETTIMEOUT {secs}\n"))?;
        self.parse_int("SETTIMEOUT", &r)
    }

    fn keepalive(&mut self) -> Result<(), DeviceError> {
        self.request("KEEPALIVE", "KEEPALIVE\n").map(|_| ())
    }

    fn close_magic(mut self: Box<Self>) -> Result<(), DeviceError> {
        self.request("magic close", "V\n").map(|_| ())
    }
}

/// Open one device (no fallback).
pub fn open_one(spec: &DeviceSpec) -> Result<Box<dyn Watchdog>, DeviceError> {
    Ok(match spec {
        DeviceSpec::Linux(p) => Box::new(LinuxWatchdog::open(p)?),
        DeviceSpec::Emulated(p) => Box::new(EmulatedWatchdog::open(p)?),
    })
}

/// Make sure an open device uses exactly `want` seconds: GETTIMEOUT, and if
/// different SETTIMEOUT + GETTIMEOUT, which must read back `want`. On error the
/// device is magic-closed (it was never in service).
pub fn ensure_timeout(
    mut dev: Box<dyn Watchdog>,
    want: u32,
) -> Result<Box<dyn Watchdog>, DeviceError> {
    let res = (|| {
        let cur = dev.get_timeout()?;
        if cur == i64::from(want) {
            return Ok(());
        }
        dev.set_timeout(want)?;
        let got = dev.get_timeout()?;
        if got != i64::from(want) {
            return Err(DeviceError::TimeoutMismatch {
                path: dev.path(),
                want,
                got,
            });
        }
        Ok(())
    })();
    match res {
        Ok(()) => Ok(dev),
        Err(e) => {
            if let Err(ce) = dev.close_magic() {
                tracing::error!("{}", crate::Chain(&ce));
            }
            Err(e)
        }
    }
}

/// Open the first working candidate with timeout `want`.
pub fn open_with_timeout(
    candidates: &[DeviceSpec],
    want: u32,
) -> Result<Box<dyn Watchdog>, DeviceError> {
    let mut last = None;
    for c in candidates {
        match open_one(c).and_then(|d| ensure_timeout(d, want)) {
            Ok(d) => return Ok(d),
            Err(e) => {
                tracing::debug!("watchdog candidate {}: {}", c.display(), crate::Chain(&e));
                last = Some(e);
            }
        }
    }
    let tried = candidates
        .iter()
        .map(DeviceSpec::display)
        .collect::<Vec<_>>()
        .join(", ");
    Err(DeviceError::NoDevice {
        tried,
        last: Box::new(last.unwrap_or_else(|| DeviceError::Open {
            path: String::new(),
            source: io::Error::new(io::ErrorKind::NotFound, "no candidates"),
        })),
    })
}

/// `--probe`: find the first device that opens and accepts `want`, disarm it
/// with the magic close, and return its name.
pub fn probe(candidates: &[DeviceSpec], want: u32) -> Result<String, DeviceError> {
    let dev = open_with_timeout(candidates, want)?;
    let name = dev.path();
    dev.close_magic()?;
    Ok(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_parse() {
        assert_eq!(
            DeviceSpec::parse("emu:/tmp/x.sock"),
            DeviceSpec::Emulated("/tmp/x.sock".into())
        );
        assert_eq!(
            DeviceSpec::parse("/dev/watchdog1"),
            DeviceSpec::Linux("/dev/watchdog1".into())
        );
        assert_eq!(DeviceSpec::parse("emu:/a").display(), "emu:/a");
        let c = DeviceSpec::candidates(Some(&DeviceSpec::parse("/dev/watchdog1")));
        assert_eq!(c.len(), 3);
        assert_eq!(c[0], DeviceSpec::Linux("/dev/watchdog1".into()));
        assert_eq!(DeviceSpec::candidates(None).len(), 3);
        assert_eq!(
            DeviceSpec::candidates(Some(&DeviceSpec::parse("emu:/x"))),
            vec![DeviceSpec::Emulated("/x".into())]
        );
    }

    #[test]
    fn missing_devices_give_a_clear_error() {
        let c = vec![DeviceSpec::Linux("/nonexistent/watchdog".into())];
        let e = open_with_timeout(&c, 60).err().expect("must fail");
        let msg = crate::Chain(&e).to_string();
        assert!(msg.contains("/nonexistent/watchdog"), "{msg}");
        let c = vec![DeviceSpec::Emulated("/nonexistent/emu.sock".into())];
        let e = probe(&c, 60).expect_err("must fail");
        assert!(e.to_string().contains("emu:/nonexistent/emu.sock"), "{e}");
    }

    #[test]
    fn a_regular_file_is_not_a_watchdog() {
        let f = tempfile::NamedTempFile::new().unwrap();
        let c = vec![DeviceSpec::Linux(f.path().to_path_buf())];
        let e = open_with_timeout(&c, 60)
            .err()
            .expect("ioctl on a file fails");
        assert!(
            crate::Chain(&e).to_string().contains("WDIOC_GETTIMEOUT"),
            "{e}"
        );
    }
}
