//! Native-endian, native-layout (x86-64) encodings of the structs on sanlock's socket.
//!
//! Layouts (offset: field), all sizes fixed:
//! ```text
//! sm_header        32: magic@0 version@4 cmd@8 cmd_flags@12 length@16 seq@20 data@24 data2@28
//! sanlk_disk     1040: path[1024]@0 offset u64@1024 pad1@1032 pad2@1036
//! sanlk_resource  128: lockspace_name[48]@0 name[48]@48 lver@96 data64@104 data32@112
//!                      unused@116 flags@120 num_disks@124, then num_disks × sanlk_disk
//! sanlk_lockspace 1104: name[48]@0 host_id u64@48 flags@56 pad@60 host_id_disk@64
//! sanlk_options    56: owner_name[48]@0 flags@48 len@52
//! sanlk_host       32: host_id@0 generation@8 timestamp@16 io_timeout u32@24 flags u32@28
//! sanlk_host_event 32: host_id@0 generation@8 event@16 data@24
//! sanlk_state      80: type@0 flags@4 data32@8 pad@12 data64@16 name[48]@24 str_len@72 pad@76
//! event_cb         80: sm_header@0 sanlk_host_event@32 from_host_id@64 from_generation@72
//! sanlk_rindex   1104: flags@0 max_resources@4 unused u64@8 lockspace_name[48]@16 disk@64
//! sanlk_rentry     64: name[48]@0 offset u64@48 flags@56 unused@60
//! ```
//! Invariants: decoding reads only inside the given slice and never panics; every decoder
//! requires exactly its fixed size (or at least, for `decode_prefix` forms) and reports
//! the shortfall; pad fields are kept so `encode(decode(b)) == b`.

use disk_format::Name;

use crate::error::WireError;
use crate::proto::{SANLK_PATH_LEN, SM_MAGIC, SM_PROTO};

pub const HEADER_LEN: usize = 32;
pub const DISK_LEN: usize = 1040;
pub const RESOURCE_LEN: usize = 128;
pub const LOCKSPACE_LEN: usize = 1104;
pub const OPTIONS_LEN: usize = 56;
pub const HOST_LEN: usize = 32;
pub const HOST_EVENT_LEN: usize = 32;
pub const STATE_LEN: usize = 80;
pub const EVENT_CB_LEN: usize = 80;
pub const RINDEX_LEN: usize = 1104;
pub const RENTRY_LEN: usize = 64;

fn get_u32(b: &[u8], off: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[off..off + 4]);
    u32::from_ne_bytes(a)
}

fn get_u64(b: &[u8], off: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[off..off + 8]);
    u64::from_ne_bytes(a)
}

fn put_u32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_ne_bytes());
}

fn put_u64(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_ne_bytes());
}

fn exact(b: &[u8], want: usize, what: &'static str) -> Result<(), WireError> {
    if b.len() < want {
        return Err(WireError::Short {
            what,
            need: want,
            got: b.len(),
        });
    }
    if b.len() > want {
        return Err(WireError::Trailing {
            what,
            want,
            got: b.len(),
        });
    }
    Ok(())
}

/// The 32-byte message header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Header {
    pub magic: u32,
    pub version: u32,
    pub cmd: u32,
    pub cmd_flags: u32,
    pub length: u32,
    pub seq: u32,
    pub data: u32,
    pub data2: u32,
}

impl Header {
    /// A request header for `cmd` carrying `payload_len` bytes after it.
    pub fn request(cmd: u32, cmd_flags: u32, payload_len: usize, data: u32, data2: u32) -> Header {
        Header {
            magic: SM_MAGIC,
            version: SM_PROTO,
            cmd,
            cmd_flags,
            length: u32::try_from(HEADER_LEN + payload_len).unwrap_or(u32::MAX),
            seq: 0,
            data,
            data2,
        }
    }

    /// sanlock's standard reply (`send_result`): the request header with version
    /// SM_PROTO, length 32, data = result, data2 = 0.
    pub fn result_reply(&self, result: i32) -> Header {
        Header {
            version: SM_PROTO,
            length: HEADER_LEN as u32,
            data: result as u32,
            data2: 0,
            ..*self
        }
    }

    /// `data` as a signed result code.
    pub fn result(&self) -> i32 {
        self.data as i32
    }

    /// `data2` as a signed value (pid, or -1 for "this registered connection").
    pub fn data2_signed(&self) -> i32 {
        self.data2 as i32
    }

    /// Payload bytes the header claims (length − 32), or an error when `length` lies.
    pub fn payload_len(&self, max_len: u32) -> Result<usize, WireError> {
        if self.length > max_len {
            return Err(WireError::Oversized {
                length: self.length,
                max: max_len,
            });
        }
        Ok((self.length as usize).saturating_sub(HEADER_LEN))
    }

    pub fn decode(b: &[u8]) -> Result<Header, WireError> {
        exact(b, HEADER_LEN, "sm_header")?;
        Ok(Header {
            magic: get_u32(b, 0),
            version: get_u32(b, 4),
            cmd: get_u32(b, 8),
            cmd_flags: get_u32(b, 12),
            length: get_u32(b, 16),
            seq: get_u32(b, 20),
            data: get_u32(b, 24),
            data2: get_u32(b, 28),
        })
    }

    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        put_u32(&mut b, 0, self.magic);
        put_u32(&mut b, 4, self.version);
        put_u32(&mut b, 8, self.cmd);
        put_u32(&mut b, 12, self.cmd_flags);
        put_u32(&mut b, 16, self.length);
        put_u32(&mut b, 20, self.seq);
        put_u32(&mut b, 24, self.data);
        put_u32(&mut b, 28, self.data2);
        b
    }
}

/// A 1024-byte NUL-padded path field.
#[derive(Clone, PartialEq, Eq)]
pub struct PathField(pub Box<[u8; SANLK_PATH_LEN]>);

impl PathField {
    /// A path field from text; at most 1023 bytes so a NUL always ends it.
    pub fn new(text: &str) -> Result<PathField, WireError> {
        let bytes = text.as_bytes();
        if bytes.len() >= SANLK_PATH_LEN || bytes.contains(&0) {
            return Err(WireError::BadField {
                what: "disk path",
                why: "longer than 1023 bytes or contains NUL",
            });
        }
        let mut field = Box::new([0u8; SANLK_PATH_LEN]);
        field[..bytes.len()].copy_from_slice(bytes);
        Ok(PathField(field))
    }

    fn from_slice(b: &[u8]) -> PathField {
        let mut field = Box::new([0u8; SANLK_PATH_LEN]);
        field.copy_from_slice(&b[..SANLK_PATH_LEN]);
        PathField(field)
    }

    /// Bytes up to the first NUL.
    pub fn as_bytes(&self) -> &[u8] {
        let end = self
            .0
            .iter()
            .position(|&c| c == 0)
            .unwrap_or(SANLK_PATH_LEN);
        &self.0[..end]
    }

    /// The path as text (invalid UTF-8 replaced).
    pub fn to_text(&self) -> String {
        String::from_utf8_lossy(self.as_bytes()).into_owned()
    }
}

impl Default for PathField {
    fn default() -> PathField {
        PathField(Box::new([0u8; SANLK_PATH_LEN]))
    }
}

impl std::fmt::Debug for PathField {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.to_text())
    }
}

/// `struct sanlk_disk`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DiskLocation {
    pub path: PathField,
    pub offset: u64,
    pub pad1: u32,
    pub pad2: u32,
}

impl DiskLocation {
    pub fn new(path: &str, offset: u64) -> Result<DiskLocation, WireError> {
        Ok(DiskLocation {
            path: PathField::new(path)?,
            offset,
            pad1: 0,
            pad2: 0,
        })
    }

    pub fn decode(b: &[u8]) -> Result<DiskLocation, WireError> {
        exact(b, DISK_LEN, "sanlk_disk")?;
        Ok(DiskLocation {
            path: PathField::from_slice(&b[..SANLK_PATH_LEN]),
            offset: get_u64(b, 1024),
            pad1: get_u32(b, 1032),
            pad2: get_u32(b, 1036),
        })
    }

    pub fn encode_into(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.resize(start + DISK_LEN, 0);
        let b = &mut out[start..];
        b[..SANLK_PATH_LEN].copy_from_slice(&self.path.0[..]);
        put_u64(b, 1024, self.offset);
        put_u32(b, 1032, self.pad1);
        put_u32(b, 1036, self.pad2);
    }
}

/// The fixed 128-byte part of `struct sanlk_resource`; disks follow on the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceHead {
    pub lockspace_name: Name,
    pub name: Name,
    pub lver: u64,
    pub data64: u64,
    pub data32: u32,
    pub unused: u32,
    pub flags: u32,
    pub num_disks: u32,
}

impl ResourceHead {
    /// A head naming a lease only (no disks, lver 0, no flags): what RELEASE, SET/GET_LVB
    /// and REL_ORPHAN send.
    pub fn named(lockspace_name: Name, name: Name) -> ResourceHead {
        ResourceHead {
            lockspace_name,
            name,
            lver: 0,
            data64: 0,
            data32: 0,
            unused: 0,
            flags: 0,
            num_disks: 0,
        }
    }

    pub fn decode(b: &[u8]) -> Result<ResourceHead, WireError> {
        exact(b, RESOURCE_LEN, "sanlk_resource")?;
        Ok(ResourceHead {
            lockspace_name: Name::from_field(&b[0..48]),
            name: Name::from_field(&b[48..96]),
            lver: get_u64(b, 96),
            data64: get_u64(b, 104),
            data32: get_u32(b, 112),
            unused: get_u32(b, 116),
            flags: get_u32(b, 120),
            num_disks: get_u32(b, 124),
        })
    }

    pub fn encode_into(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.resize(start + RESOURCE_LEN, 0);
        let b = &mut out[start..];
        b[0..48].copy_from_slice(&self.lockspace_name.0);
        b[48..96].copy_from_slice(&self.name.0);
        put_u64(b, 96, self.lver);
        put_u64(b, 104, self.data64);
        put_u32(b, 112, self.data32);
        put_u32(b, 116, self.unused);
        put_u32(b, 120, self.flags);
        put_u32(b, 124, self.num_disks);
    }
}

/// A whole `struct sanlk_resource` with its disks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resource {
    pub head: ResourceHead,
    pub disks: Vec<DiskLocation>,
}

impl Resource {
    /// A resource with one disk (`path`, `offset`), lver 0, no flags: what most
    /// callers acquire.
    pub fn on_disk(
        lockspace_name: Name,
        name: Name,
        path: &str,
        offset: u64,
    ) -> Result<Resource, WireError> {
        Ok(Resource {
            head: ResourceHead {
                num_disks: 1,
                ..ResourceHead::named(lockspace_name, name)
            },
            disks: vec![DiskLocation::new(path, offset)?],
        })
    }

    /// Decodes a resource followed by exactly `head.num_disks` disks (at most `max_disks`).
    pub fn decode(b: &[u8], max_disks: u32) -> Result<Resource, WireError> {
        let (r, used) = Resource::decode_prefix(b, max_disks)?;
        if used != b.len() {
            return Err(WireError::Trailing {
                what: "sanlk_resource",
                want: used,
                got: b.len(),
            });
        }
        Ok(r)
    }

    /// Decodes a resource and its disks from the front of `b`; returns bytes used.
    pub fn decode_prefix(b: &[u8], max_disks: u32) -> Result<(Resource, usize), WireError> {
        if b.len() < RESOURCE_LEN {
            return Err(WireError::Short {
                what: "sanlk_resource",
                need: RESOURCE_LEN,
                got: b.len(),
            });
        }
        let head = ResourceHead::decode(&b[..RESOURCE_LEN])?;
        if head.num_disks > max_disks {
            return Err(WireError::TooMany {
                what: "disks",
                count: head.num_disks,
                max: max_disks,
            });
        }
        let need = RESOURCE_LEN + head.num_disks as usize * DISK_LEN;
        if b.len() < need {
            return Err(WireError::Short {
                what: "sanlk_resource disks",
                need,
                got: b.len(),
            });
        }
        let disks = b[RESOURCE_LEN..need]
            .chunks_exact(DISK_LEN)
            .map(DiskLocation::decode)
            .collect::<Result<Vec<_>, _>>()?;
        Ok((Resource { head, disks }, need))
    }

    /// Encodes the head (with `num_disks` as stored) and the disks.
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        self.head.encode_into(out);
        for d in &self.disks {
            d.encode_into(out);
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(RESOURCE_LEN + self.disks.len() * DISK_LEN);
        self.encode_into(&mut v);
        v
    }
}

/// `struct sanlk_lockspace`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lockspace {
    pub name: Name,
    pub host_id: u64,
    pub flags: u32,
    pub pad: u32,
    pub host_id_disk: DiskLocation,
}

impl Lockspace {
    pub fn new(name: Name, host_id: u64, path: &str, offset: u64) -> Result<Lockspace, WireError> {
        Ok(Lockspace {
            name,
            host_id,
            flags: 0,
            pad: 0,
            host_id_disk: DiskLocation::new(path, offset)?,
        })
    }

    pub fn decode(b: &[u8]) -> Result<Lockspace, WireError> {
        exact(b, LOCKSPACE_LEN, "sanlk_lockspace")?;
        Ok(Lockspace {
            name: Name::from_field(&b[0..48]),
            host_id: get_u64(b, 48),
            flags: get_u32(b, 56),
            pad: get_u32(b, 60),
            host_id_disk: DiskLocation::decode(&b[64..])?,
        })
    }

    pub fn encode_into(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.resize(start + 64, 0);
        let b = &mut out[start..];
        b[0..48].copy_from_slice(&self.name.0);
        put_u64(b, 48, self.host_id);
        put_u32(b, 56, self.flags);
        put_u32(b, 60, self.pad);
        self.host_id_disk.encode_into(out);
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(LOCKSPACE_LEN);
        self.encode_into(&mut v);
        v
    }
}

/// `struct sanlk_rindex`: where a resource index lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rindex {
    /// `SANLK_RIF_*` sector/align flags (format only).
    pub flags: u32,
    /// Slots to format (0 = sanlock's default).
    pub max_resources: u32,
    pub unused: u64,
    pub lockspace_name: Name,
    pub disk: DiskLocation,
}

impl Rindex {
    pub fn new(lockspace_name: Name, path: &str, offset: u64) -> Result<Rindex, WireError> {
        Ok(Rindex {
            flags: 0,
            max_resources: 0,
            unused: 0,
            lockspace_name,
            disk: DiskLocation::new(path, offset)?,
        })
    }

    pub fn decode(b: &[u8]) -> Result<Rindex, WireError> {
        exact(b, RINDEX_LEN, "sanlk_rindex")?;
        Ok(Rindex {
            flags: get_u32(b, 0),
            max_resources: get_u32(b, 4),
            unused: get_u64(b, 8),
            lockspace_name: Name::from_field(&b[16..64]),
            disk: DiskLocation::decode(&b[64..])?,
        })
    }

    pub fn encode_into(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.resize(start + 64, 0);
        let b = &mut out[start..];
        put_u32(b, 0, self.flags);
        put_u32(b, 4, self.max_resources);
        put_u64(b, 8, self.unused);
        b[16..64].copy_from_slice(&self.lockspace_name.0);
        self.disk.encode_into(out);
    }
}

/// `struct sanlk_rentry`: one resource of an index (empty name = none / free).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rentry {
    pub name: Name,
    pub offset: u64,
    pub flags: u32,
    pub unused: u32,
}

impl Rentry {
    pub fn new(name: Name, offset: u64) -> Rentry {
        Rentry {
            name,
            offset,
            flags: 0,
            unused: 0,
        }
    }

    pub fn decode(b: &[u8]) -> Result<Rentry, WireError> {
        exact(b, RENTRY_LEN, "sanlk_rentry")?;
        Ok(Rentry {
            name: Name::from_field(&b[0..48]),
            offset: get_u64(b, 48),
            flags: get_u32(b, 56),
            unused: get_u32(b, 60),
        })
    }

    pub fn encode(&self) -> [u8; RENTRY_LEN] {
        let mut b = [0u8; RENTRY_LEN];
        b[0..48].copy_from_slice(&self.name.0);
        put_u64(&mut b, 48, self.offset);
        put_u32(&mut b, 56, self.flags);
        put_u32(&mut b, 60, self.unused);
        b
    }
}

/// `struct sanlk_options` (the trailing `str[]` is never sent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    pub owner_name: Name,
    pub flags: u32,
    pub len: u32,
}

impl Options {
    pub fn decode(b: &[u8]) -> Result<Options, WireError> {
        exact(b, OPTIONS_LEN, "sanlk_options")?;
        Ok(Options {
            owner_name: Name::from_field(&b[0..48]),
            flags: get_u32(b, 48),
            len: get_u32(b, 52),
        })
    }

    pub fn encode_into(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.resize(start + OPTIONS_LEN, 0);
        let b = &mut out[start..];
        b[0..48].copy_from_slice(&self.owner_name.0);
        put_u32(b, 48, self.flags);
        put_u32(b, 52, self.len);
    }
}

/// `struct sanlk_host`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Host {
    pub host_id: u64,
    pub generation: u64,
    pub timestamp: u64,
    pub io_timeout: u32,
    pub flags: u32,
}

impl Host {
    pub fn decode(b: &[u8]) -> Result<Host, WireError> {
        exact(b, HOST_LEN, "sanlk_host")?;
        Ok(Host {
            host_id: get_u64(b, 0),
            generation: get_u64(b, 8),
            timestamp: get_u64(b, 16),
            io_timeout: get_u32(b, 24),
            flags: get_u32(b, 28),
        })
    }

    pub fn encode_into(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.resize(start + HOST_LEN, 0);
        let b = &mut out[start..];
        put_u64(b, 0, self.host_id);
        put_u64(b, 8, self.generation);
        put_u64(b, 16, self.timestamp);
        put_u32(b, 24, self.io_timeout);
        put_u32(b, 28, self.flags);
    }
}

/// `struct sanlk_host_event`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HostEvent {
    pub host_id: u64,
    pub generation: u64,
    pub event: u64,
    pub data: u64,
}

impl HostEvent {
    pub fn decode(b: &[u8]) -> Result<HostEvent, WireError> {
        exact(b, HOST_EVENT_LEN, "sanlk_host_event")?;
        Ok(HostEvent {
            host_id: get_u64(b, 0),
            generation: get_u64(b, 8),
            event: get_u64(b, 16),
            data: get_u64(b, 24),
        })
    }

    pub fn encode_into(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.resize(start + HOST_EVENT_LEN, 0);
        let b = &mut out[start..];
        put_u64(b, 0, self.host_id);
        put_u64(b, 8, self.generation);
        put_u64(b, 16, self.event);
        put_u64(b, 24, self.data);
    }
}

/// `struct sanlk_state` (80 bytes); `str_len` bytes of text follow it on the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct State {
    pub kind: u32,
    pub flags: u32,
    pub data32: u32,
    pub pad1: u32,
    pub data64: u64,
    pub name: Name,
    pub str_len: u32,
    pub pad2: u32,
}

impl State {
    pub fn decode(b: &[u8]) -> Result<State, WireError> {
        exact(b, STATE_LEN, "sanlk_state")?;
        Ok(State {
            kind: get_u32(b, 0),
            flags: get_u32(b, 4),
            data32: get_u32(b, 8),
            pad1: get_u32(b, 12),
            data64: get_u64(b, 16),
            name: Name::from_field(&b[24..72]),
            str_len: get_u32(b, 72),
            pad2: get_u32(b, 76),
        })
    }

    pub fn encode_into(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.resize(start + STATE_LEN, 0);
        let b = &mut out[start..];
        put_u32(b, 0, self.kind);
        put_u32(b, 4, self.flags);
        put_u32(b, 8, self.data32);
        put_u32(b, 12, self.pad1);
        put_u64(b, 16, self.data64);
        b[24..72].copy_from_slice(&self.name.0);
        put_u32(b, 72, self.str_len);
        put_u32(b, 76, self.pad2);
    }

    /// Appends a state record and its NUL-terminated text, as sanlock sends them
    /// (`str_len` counts the NUL).
    pub fn encode_with_text(
        kind: u32,
        data32: u32,
        data64: u64,
        name: Name,
        text: &str,
        out: &mut Vec<u8>,
    ) {
        let mut bytes: Vec<u8> = text.bytes().filter(|&c| c != 0).collect();
        bytes.truncate(crate::proto::SANLK_STATE_MAXSTR - 2);
        bytes.push(0);
        State {
            kind,
            flags: 0,
            data32,
            pad1: 0,
            data64,
            name,
            str_len: bytes.len() as u32,
            pad2: 0,
        }
        .encode_into(out);
        out.extend_from_slice(&bytes);
    }
}

/// `struct event_cb`: a host event delivered on a REG_EVENT connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventCb {
    pub header: Header,
    pub event: HostEvent,
    pub from_host_id: u64,
    pub from_generation: u64,
}

impl EventCb {
    pub fn decode(b: &[u8]) -> Result<EventCb, WireError> {
        exact(b, EVENT_CB_LEN, "event_cb")?;
        Ok(EventCb {
            header: Header::decode(&b[0..32])?,
            event: HostEvent::decode(&b[32..64])?,
            from_host_id: get_u64(b, 64),
            from_generation: get_u64(b, 72),
        })
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(EVENT_CB_LEN);
        v.extend_from_slice(&self.header.encode());
        self.event.encode_into(&mut v);
        v.extend_from_slice(&self.from_host_id.to_ne_bytes());
        v.extend_from_slice(&self.from_generation.to_ne_bytes());
        v
    }
}

/// A NUL-terminated C string inside a fixed field (killpath path/args), as text.
pub fn c_field_text(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(s: &str) -> Name {
        Name::new(s).unwrap()
    }

    #[test]
    fn header_golden_bytes() {
        // The VERSION reply sanlock 3.8.5 sends, captured on x86-64 (§4.4).
        let h = Header {
            magic: SM_MAGIC,
            version: 1,
            cmd: 28,
            cmd_flags: 0,
            length: 32,
            seq: 0,
            data: 0,
            data2: 0x0308_0500,
        };
        let golden: [u8; 32] = [
            0x10, 0x20, 0x28, 0x04, 1, 0, 0, 0, 28, 0, 0, 0, 0, 0, 0, 0, 32, 0, 0, 0, 0, 0, 0, 0,
            0, 0, 0, 0, 0x00, 0x05, 0x08, 0x03,
        ];
        assert_eq!(h.encode(), golden);
        assert_eq!(Header::decode(&golden).unwrap(), h);
    }

    #[test]
    fn header_rejects_short_and_long() {
        assert!(matches!(
            Header::decode(&[0u8; 31]),
            Err(WireError::Short {
                need: 32,
                got: 31,
                ..
            })
        ));
        assert!(matches!(
            Header::decode(&[0u8; 33]),
            Err(WireError::Trailing { .. })
        ));
        let h = Header {
            length: 2 << 20,
            ..Header::default()
        };
        assert!(matches!(
            h.payload_len(crate::proto::MAX_CLIENT_MSG),
            Err(WireError::Oversized { .. })
        ));
        let h = Header {
            length: 4,
            ..Header::default()
        };
        assert_eq!(h.payload_len(1 << 20).unwrap(), 0);
    }

    #[test]
    fn rindex_and_rentry_golden_offsets() {
        let mut rx = Rindex::new(name("ls1"), "/dev/sdb", 4 << 20).unwrap();
        rx.flags = 0x110;
        rx.max_resources = 100;
        let mut b = Vec::new();
        rx.encode_into(&mut b);
        assert_eq!(b.len(), RINDEX_LEN);
        assert_eq!(&b[0..4], &0x110u32.to_le_bytes());
        assert_eq!(&b[4..8], &100u32.to_le_bytes());
        assert_eq!(&b[16..20], b"ls1\0");
        assert_eq!(&b[64..73], b"/dev/sdb\0");
        assert_eq!(&b[64 + 1024..64 + 1032], &(4u64 << 20).to_le_bytes());
        assert_eq!(Rindex::decode(&b).unwrap(), rx);
        assert!(Rindex::decode(&b[..RINDEX_LEN - 1]).is_err());
        let re = Rentry::new(name("r7"), 9 << 20);
        let e = re.encode();
        assert_eq!(&e[0..3], b"r7\0");
        assert_eq!(&e[48..56], &(9u64 << 20).to_le_bytes());
        assert_eq!(&e[56..64], &[0u8; 8]);
        assert_eq!(Rentry::decode(&e).unwrap(), re);
        assert!(Rentry::decode(&e[..63]).is_err());
    }

    #[test]
    fn lockspace_golden_offsets() {
        let ls = Lockspace::new(name("myls"), 2, "/dev/loop0", 0x10_0000).unwrap();
        let b = ls.encode();
        assert_eq!(b.len(), LOCKSPACE_LEN);
        assert_eq!(&b[0..5], b"myls\0");
        assert_eq!(&b[48..56], &2u64.to_le_bytes());
        assert_eq!(&b[64..75], b"/dev/loop0\0");
        assert_eq!(&b[64 + 1024..64 + 1032], &0x10_0000u64.to_le_bytes());
        assert_eq!(Lockspace::decode(&b).unwrap(), ls);
        assert!(Lockspace::decode(&b[..1103]).is_err());
    }

    #[test]
    fn resource_golden_offsets() {
        let r = Resource {
            head: ResourceHead {
                lockspace_name: name("ls"),
                name: name("res"),
                lver: 7,
                data64: 8,
                data32: 9,
                unused: 0,
                flags: crate::proto::SANLK_RES_SHARED,
                num_disks: 1,
            },
            disks: vec![DiskLocation::new("/var/tmp/x", 1 << 20).unwrap()],
        };
        let b = r.encode();
        assert_eq!(b.len(), RESOURCE_LEN + DISK_LEN);
        assert_eq!(&b[48..52], b"res\0");
        assert_eq!(&b[96..104], &7u64.to_le_bytes());
        assert_eq!(&b[112..116], &9u32.to_le_bytes());
        assert_eq!(&b[120..124], &4u32.to_le_bytes());
        assert_eq!(&b[124..128], &1u32.to_le_bytes());
        assert_eq!(&b[128..138], b"/var/tmp/x");
        assert_eq!(Resource::decode(&b, 4).unwrap(), r);
        // A head claiming two disks with one present is short; five is too many.
        let mut two = b.clone();
        two[124] = 2;
        assert!(matches!(
            Resource::decode(&two, 4),
            Err(WireError::Short { .. })
        ));
        let mut five = b;
        five[124] = 5;
        assert!(matches!(
            Resource::decode(&five, 4),
            Err(WireError::TooMany { count: 5, .. })
        ));
    }

    #[test]
    fn small_structs_golden() {
        let h = Host {
            host_id: 1,
            generation: 2,
            timestamp: 3,
            io_timeout: 10,
            flags: crate::proto::SANLK_HOST_LIVE,
        };
        let mut b = Vec::new();
        h.encode_into(&mut b);
        let mut want = Vec::new();
        for v in [1u64, 2, 3] {
            want.extend_from_slice(&v.to_le_bytes());
        }
        want.extend_from_slice(&10u32.to_le_bytes());
        want.extend_from_slice(&3u32.to_le_bytes());
        assert_eq!(b, want);
        assert_eq!(Host::decode(&b).unwrap(), h);

        let o = Options {
            owner_name: name("vm1"),
            flags: 0,
            len: 0,
        };
        let mut b = Vec::new();
        o.encode_into(&mut b);
        assert_eq!(b.len(), OPTIONS_LEN);
        assert_eq!(Options::decode(&b).unwrap(), o);

        let mut b = Vec::new();
        State::encode_with_text(3, 0, 1, name("ls"), "list=spaces", &mut b);
        assert_eq!(b.len(), STATE_LEN + 12);
        assert_eq!(&b[72..76], &12u32.to_le_bytes());
        assert_eq!(&b[24..27], b"ls\0");
        let s = State::decode(&b[..STATE_LEN]).unwrap();
        assert_eq!((s.kind, s.data64, s.str_len), (3, 1, 12));
        assert_eq!(&b[STATE_LEN..], b"list=spaces\0");

        let cb = EventCb {
            header: Header::request(crate::proto::SM_CB_GET_EVENT, 0, 48, 0, 0),
            event: HostEvent {
                host_id: 1,
                generation: 2,
                event: 3,
                data: 4,
            },
            from_host_id: 5,
            from_generation: 6,
        };
        let b = cb.encode();
        assert_eq!(b.len(), EVENT_CB_LEN);
        assert_eq!(&b[16..20], &80u32.to_le_bytes());
        assert_eq!(EventCb::decode(&b).unwrap(), cb);
    }

    #[test]
    fn c_field() {
        assert_eq!(c_field_text(b"/bin/true\0junk"), "/bin/true");
        assert_eq!(c_field_text(b"abc"), "abc");
    }
}
