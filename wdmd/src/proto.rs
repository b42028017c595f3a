//! The libwdmd wire format: one fixed-size `struct wdmd_header` per message.
//!
//! Layout (176 bytes, native endianness, no padding), as in sanlock's
//! `wdmd/wdmd_sock.h`:
//!
//! ```text
//!   0  u32 magic          (unused, 0)
//!   4  u32 cmd
//!   8  u32 len            (C clients send 0)
//!  12  u32 flags
//!  16  u32 test_interval  (STATUS reply)
//!  20  u32 fire_timeout   (STATUS reply, OPEN_WATCHDOG request/reply)
//!  24  u64 last_keepalive (STATUS reply, CLOCK_MONOTONIC seconds)
//!  32  u64 renewal_time   (TEST_LIVE, CLOCK_MONOTONIC seconds)
//!  40  u64 expire_time    (TEST_LIVE, CLOCK_MONOTONIC seconds; 0 = disarm)
//!  48  [u8; 128] name     (REGISTER; NUL padded)
//! ```

use thiserror::Error;

/// Size of `struct wdmd_header` on the wire.
pub const HEADER_SIZE: usize = 176;
/// Size of the `name` field (`WDMD_NAME_SIZE`).
pub const NAME_SIZE: usize = 128;
/// Default run directory of a production wdmd (not configurable in libwdmd).
pub const DEFAULT_RUN_DIR: &str = "/run/wdmd";
/// Socket file name inside the run directory.
pub const SOCKET_NAME: &str = "wdmd.sock";
/// Pid file name inside the run directory.
pub const PID_FILE_NAME: &str = "wdmd.pid";

const OFF_MAGIC: usize = 0;
const OFF_CMD: usize = 4;
const OFF_LEN: usize = 8;
const OFF_FLAGS: usize = 12;
const OFF_TEST_INTERVAL: usize = 16;
const OFF_FIRE_TIMEOUT: usize = 20;
const OFF_LAST_KEEPALIVE: usize = 24;
const OFF_RENEWAL: usize = 32;
const OFF_EXPIRE: usize = 40;
const OFF_NAME: usize = 48;

/// A wdmd command code (`enum` in `wdmd_sock.h`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cmd {
    /// `CMD_REGISTER` (1): name the connection; pid is taken from SO_PEERCRED. No reply.
    Register,
    /// `CMD_REFCOUNT_SET` (2): block wdmd's clean exit. No reply.
    RefcountSet,
    /// `CMD_REFCOUNT_CLEAR` (3). No reply.
    RefcountClear,
    /// `CMD_TEST_LIVE` (4): renewal/expire times; 0/0 disarms. No reply.
    TestLive,
    /// `CMD_STATUS` (5): reply with test_interval, fire_timeout, last_keepalive.
    Status,
    /// `CMD_DUMP_DEBUG` (6): text reply.
    DumpDebug,
    /// `CMD_OPEN_WATCHDOG` (7, sanlock 3.9): reply with the granted fire timeout or 0.
    OpenWatchdog,
    /// Any other value; wdmd ignores it, like the C switch does.
    Unknown(u32),
}

impl Cmd {
    /// Decode a command code.
    pub fn from_u32(v: u32) -> Cmd {
        match v {
            1 => Cmd::Register,
            2 => Cmd::RefcountSet,
            3 => Cmd::RefcountClear,
            4 => Cmd::TestLive,
            5 => Cmd::Status,
            6 => Cmd::DumpDebug,
            7 => Cmd::OpenWatchdog,
            other => Cmd::Unknown(other),
        }
    }

    /// The wire value of a command.
    pub fn as_u32(self) -> u32 {
        match self {
            Cmd::Register => 1,
            Cmd::RefcountSet => 2,
            Cmd::RefcountClear => 3,
            Cmd::TestLive => 4,
            Cmd::Status => 5,
            Cmd::DumpDebug => 6,
            Cmd::OpenWatchdog => 7,
            Cmd::Unknown(v) => v,
        }
    }
}

/// Errors decoding or building a header.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum ProtoError {
    /// Fewer bytes than a header.
    #[error("wdmd header too short: {0} bytes, expected {HEADER_SIZE}")]
    Short(usize),
    /// More bytes than a header.
    #[error("wdmd header too long: {0} bytes, expected {HEADER_SIZE}")]
    Oversized(usize),
    /// A name that does not fit the 128-byte field.
    #[error("wdmd client name is {0} bytes, the limit is {NAME_SIZE}")]
    NameTooLong(usize),
    /// A name with an embedded NUL would be cut by the C side.
    #[error("wdmd client name contains a NUL byte")]
    NameHasNul,
}

/// A decoded `struct wdmd_header`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WdmdHeader {
    /// Unused by wdmd; 0 from libwdmd.
    pub magic: u32,
    /// Command.
    pub cmd: Cmd,
    /// Unused by wdmd; 0 from libwdmd.
    pub len: u32,
    /// Unused by wdmd.
    pub flags: u32,
    /// STATUS reply: current test interval in seconds.
    pub test_interval: u32,
    /// STATUS reply / OPEN_WATCHDOG request and reply.
    pub fire_timeout: u32,
    /// STATUS reply: CLOCK_MONOTONIC seconds of the last keepalive.
    pub last_keepalive: u64,
    /// TEST_LIVE: CLOCK_MONOTONIC seconds of the client's last renewal.
    pub renewal_time: u64,
    /// TEST_LIVE: CLOCK_MONOTONIC seconds at which the client expires.
    pub expire_time: u64,
    /// Raw name field, NUL padded.
    pub name: [u8; NAME_SIZE],
}

impl WdmdHeader {
    /// An all-zero header carrying `cmd`.
    pub fn new(cmd: Cmd) -> WdmdHeader {
        WdmdHeader {
            magic: 0,
            cmd,
            len: 0,
            flags: 0,
            test_interval: 0,
            fire_timeout: 0,
            last_keepalive: 0,
            renewal_time: 0,
            expire_time: 0,
            name: [0; NAME_SIZE],
        }
    }

    /// Set the name field. A name of exactly 128 bytes is accepted without a
    /// terminating NUL, as libwdmd's `strlen(name) > WDMD_NAME_SIZE` check allows.
    pub fn set_name(&mut self, name: &str) -> Result<(), ProtoError> {
        let b = name.as_bytes();
        if b.len() > NAME_SIZE {
            return Err(ProtoError::NameTooLong(b.len()));
        }
        if b.contains(&0) {
            return Err(ProtoError::NameHasNul);
        }
        self.name = [0; NAME_SIZE];
        self.name[..b.len()].copy_from_slice(b);
        Ok(())
    }

    /// The name up to the first NUL, with invalid UTF-8 replaced.
    pub fn name_str(&self) -> String {
        let end = self.name.iter().position(|&c| c == 0).unwrap_or(NAME_SIZE);
        String::from_utf8_lossy(&self.name[..end]).into_owned()
    }

    /// Encode to the 176-byte native-endian wire form.
    pub fn encode(&self) -> [u8; HEADER_SIZE] {
        let mut b = [0u8; HEADER_SIZE];
        put32(&mut b, OFF_MAGIC, self.magic);
        put32(&mut b, OFF_CMD, self.cmd.as_u32());
        put32(&mut b, OFF_LEN, self.len);
        put32(&mut b, OFF_FLAGS, self.flags);
        put32(&mut b, OFF_TEST_INTERVAL, self.test_interval);
        put32(&mut b, OFF_FIRE_TIMEOUT, self.fire_timeout);
        put64(&mut b, OFF_LAST_KEEPALIVE, self.last_keepalive);
        put64(&mut b, OFF_RENEWAL, self.renewal_time);
        put64(&mut b, OFF_EXPIRE, self.expire_time);
        b[OFF_NAME..OFF_NAME + NAME_SIZE].copy_from_slice(&self.name);
        b
    }

    /// Decode exactly one header. Any byte pattern of the right length decodes.
    pub fn decode(buf: &[u8]) -> Result<WdmdHeader, ProtoError> {
        if buf.len() < HEADER_SIZE {
            return Err(ProtoError::Short(buf.len()));
        }
        if buf.len() > HEADER_SIZE {
            return Err(ProtoError::Oversized(buf.len()));
        }
        let mut name = [0u8; NAME_SIZE];
        name.copy_from_slice(&buf[OFF_NAME..OFF_NAME + NAME_SIZE]);
        Ok(WdmdHeader {
            magic: get32(buf, OFF_MAGIC),
            cmd: Cmd::from_u32(get32(buf, OFF_CMD)),
            len: get32(buf, OFF_LEN),
            flags: get32(buf, OFF_FLAGS),
            test_interval: get32(buf, OFF_TEST_INTERVAL),
            fire_timeout: get32(buf, OFF_FIRE_TIMEOUT),
            last_keepalive: get64(buf, OFF_LAST_KEEPALIVE),
            renewal_time: get64(buf, OFF_RENEWAL),
            expire_time: get64(buf, OFF_EXPIRE),
            name,
        })
    }
}

fn put32(b: &mut [u8; HEADER_SIZE], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_ne_bytes());
}

fn put64(b: &mut [u8; HEADER_SIZE], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_ne_bytes());
}

fn get32(b: &[u8], off: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[off..off + 4]);
    u32::from_ne_bytes(a)
}

fn get64(b: &[u8], off: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[off..off + 8]);
    u64::from_ne_bytes(a)
}

/// wdmd's test interval for a fire timeout `w` (sanlock 3.9 rule).
pub fn test_interval_for(w: u32) -> u32 {
    match w {
        60.. => 10,
        30..=59 => 5,
        10..=29 => 2,
        _ => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Golden bytes for TEST_LIVE(renewal 0x1122334455667788, expire 0x99aabbccddeeff00)
    /// with name "sanlock_ls:1", written out by hand from the C layout (x86-64, little endian).
    #[cfg(target_endian = "little")]
    #[test]
    fn golden_bytes_little_endian() {
        let mut h = WdmdHeader::new(Cmd::TestLive);
        h.flags = 0x0a0b0c0d;
        h.test_interval = 10;
        h.fire_timeout = 60;
        h.last_keepalive = 0x0102030405060708;
        h.renewal_time = 0x1122334455667788;
        h.expire_time = 0x99aabbccddeeff00;
        h.set_name("sanlock_ls:1").unwrap();
        let b = h.encode();
        let mut want = vec![
            0, 0, 0, 0, // magic
            4, 0, 0, 0, // cmd
            0, 0, 0, 0, // len
            0x0d, 0x0c, 0x0b, 0x0a, // flags
            10, 0, 0, 0, // test_interval
            60, 0, 0, 0, // fire_timeout
            0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01, // last_keepalive
            0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11, // renewal
            0x00, 0xff, 0xee, 0xdd, 0xcc, 0xbb, 0xaa, 0x99, // expire
        ];
        want.extend_from_slice(b"sanlock_ls:1");
        want.resize(HEADER_SIZE, 0);
        assert_eq!(b.to_vec(), want);
        assert_eq!(WdmdHeader::decode(&b).unwrap(), h);
        assert_eq!(h.name_str(), "sanlock_ls:1");
    }

    #[test]
    fn short_and_oversized_are_errors() {
        for n in [0usize, 1, 47, 175] {
            assert_eq!(WdmdHeader::decode(&vec![0; n]), Err(ProtoError::Short(n)));
        }
        for n in [177usize, 352, 4096] {
            assert_eq!(
                WdmdHeader::decode(&vec![0; n]),
                Err(ProtoError::Oversized(n))
            );
        }
    }

    #[test]
    fn garbage_never_panics_and_round_trips() {
        // Deterministic pseudo-random bytes (xorshift), no external RNG needed.
        let mut x: u64 = 0x9e3779b97f4a7c15;
        for _ in 0..2000 {
            let mut buf = [0u8; HEADER_SIZE];
            for byte in buf.iter_mut() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *byte = (x >> 24) as u8;
            }
            let h = WdmdHeader::decode(&buf).expect("any 176 bytes decode");
            // Name decoding tolerates invalid UTF-8 and missing NUL.
            let _ = h.name_str();
            assert_eq!(h.encode(), buf, "decode/encode must be lossless");
        }
    }

    #[test]
    fn unknown_commands_are_kept() {
        let mut b = WdmdHeader::new(Cmd::Status).encode();
        b[4..8].copy_from_slice(&99u32.to_ne_bytes());
        let h = WdmdHeader::decode(&b).unwrap();
        assert_eq!(h.cmd, Cmd::Unknown(99));
        for v in 1..=7 {
            assert_eq!(Cmd::from_u32(v).as_u32(), v);
        }
    }

    #[test]
    fn names() {
        let mut h = WdmdHeader::new(Cmd::Register);
        assert_eq!(
            h.set_name(&"x".repeat(129)),
            Err(ProtoError::NameTooLong(129))
        );
        assert_eq!(h.set_name("a\0b"), Err(ProtoError::NameHasNul));
        h.set_name(&"y".repeat(128)).unwrap();
        assert_eq!(h.name_str(), "y".repeat(128));
        h.set_name("short").unwrap();
        assert_eq!(h.name_str(), "short");
        h.name[0] = 0xff;
        assert_eq!(h.name_str(), "\u{fffd}hort");
    }

    #[test]
    fn interval_rule() {
        assert_eq!(test_interval_for(60), 10);
        assert_eq!(test_interval_for(120), 10);
        assert_eq!(test_interval_for(59), 5);
        assert_eq!(test_interval_for(30), 5);
        assert_eq!(test_interval_for(29), 2);
        assert_eq!(test_interval_for(10), 2);
        assert_eq!(test_interval_for(9), 1);
        assert_eq!(test_interval_for(3), 1);
        assert_eq!(test_interval_for(0), 1);
    }
}
