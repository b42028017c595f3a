//! A small blocking client for the lockd (or sanlock) daemon socket.
//!
//! One `Client` is one connection. Requests are written whole; replies are read with
//! bounded lengths (never more than [`MAX_CLIENT_MSG`] per message), so a misbehaving
//! daemon cannot make the client allocate without limit.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use disk_format::Name;

use crate::error::{ClientError, WireError};
use crate::proto::*;
use crate::request::{ReleaseWhat, Request};
use crate::wire::*;

/// The run dir clients use: `$SANLOCK_RUN_DIR`, else `$LOCKD_RUN_DIR`, else `/run/lockd`.
pub fn default_run_dir() -> PathBuf {
    for var in ["SANLOCK_RUN_DIR", "LOCKD_RUN_DIR"] {
        if let Some(v) = std::env::var_os(var) {
            if !v.is_empty() {
                return PathBuf::from(v);
            }
        }
    }
    PathBuf::from("/run/lockd")
}

/// One record of a STATUS / HOST_STATUS / RENEWAL reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateRecord {
    pub state: State,
    /// The state text without its NUL.
    pub text: String,
    /// For lockspace records: the sanlk_lockspace that follows.
    pub lockspace: Option<Lockspace>,
    /// For resource records: the sanlk_resource (+ disks) that follows.
    pub resource: Option<Resource>,
}

/// How long [`Client::shutdown`] without wait listens for a refusal.
const SHUTDOWN_REFUSAL_WAIT: Duration = Duration::from_millis(500);

/// A connection to the daemon.
#[derive(Debug)]
pub struct Client {
    stream: UnixStream,
}

impl Client {
    /// Connects to `<run_dir>/sanlock.sock`.
    pub fn connect(run_dir: &Path) -> Result<Client, ClientError> {
        let path = run_dir.join(SOCKET_NAME);
        let stream = UnixStream::connect(&path).map_err(|source| ClientError::Connect {
            path: path.clone(),
            source,
        })?;
        Ok(Client { stream })
    }

    /// Wraps an already connected stream.
    pub fn from_stream(stream: UnixStream) -> Client {
        Client { stream }
    }

    /// The underlying stream (e.g. to keep a registered connection alive).
    pub fn stream(&self) -> &UnixStream {
        &self.stream
    }

    /// Bounds how long any single read may block.
    pub fn set_read_timeout(&self, t: Option<Duration>) -> Result<(), ClientError> {
        self.stream.set_read_timeout(t)?;
        Ok(())
    }

    /// Sends a header (length computed from `payload`) and the payload.
    pub fn send(
        &mut self,
        cmd: u32,
        cmd_flags: u32,
        data: u32,
        data2: u32,
        payload: &[u8],
    ) -> Result<(), ClientError> {
        let h = Header::request(cmd, cmd_flags, payload.len(), data, data2);
        let mut msg = Vec::with_capacity(HEADER_LEN + payload.len());
        msg.extend_from_slice(&h.encode());
        msg.extend_from_slice(payload);
        self.stream.write_all(&msg)?;
        Ok(())
    }

    /// Reads exactly `n` bytes (n ≤ MAX_CLIENT_MSG).
    pub fn recv_exact(&mut self, n: usize) -> Result<Vec<u8>, ClientError> {
        if n > MAX_CLIENT_MSG as usize {
            return Err(WireError::Oversized {
                length: u32::try_from(n).unwrap_or(u32::MAX),
                max: MAX_CLIENT_MSG,
            }
            .into());
        }
        let mut buf = vec![0u8; n];
        let mut got = 0;
        while got < n {
            match self.stream.read(&mut buf[got..]) {
                Ok(0) => return Err(ClientError::Closed),
                Ok(k) => got += k,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(buf)
    }

    /// Reads one reply header and checks its magic.
    pub fn recv_header(&mut self) -> Result<Header, ClientError> {
        let b = self.recv_exact(HEADER_LEN)?;
        let h = Header::decode(&b)?;
        if h.magic != SM_MAGIC {
            return Err(WireError::BadMagic { magic: h.magic }.into());
        }
        h.payload_len(MAX_CLIENT_MSG)?;
        Ok(h)
    }

    /// Reads a reply header and the payload its length claims.
    pub fn recv_reply(&mut self) -> Result<(Header, Vec<u8>), ClientError> {
        let h = self.recv_header()?;
        let n = h.payload_len(MAX_CLIENT_MSG)?;
        let payload = self.recv_exact(n)?;
        Ok((h, payload))
    }

    /// Sends a command and returns its result code (header.data) and the whole reply.
    pub fn call(
        &mut self,
        cmd: u32,
        cmd_flags: u32,
        data: u32,
        data2: u32,
        payload: &[u8],
    ) -> Result<(Header, Vec<u8>), ClientError> {
        self.send(cmd, cmd_flags, data, data2, payload)?;
        self.recv_reply()
    }

    fn call_ok(
        &mut self,
        cmd: u32,
        cmd_flags: u32,
        data: u32,
        data2: u32,
        payload: &[u8],
    ) -> Result<(Header, Vec<u8>), ClientError> {
        let (h, p) = self.call(cmd, cmd_flags, data, data2, payload)?;
        if h.result() < 0 {
            return Err(ClientError::Result { rv: h.result() });
        }
        Ok((h, p))
    }

    /// VERSION: the daemon's combined version number (e.g. 0x03080500).
    pub fn version(&mut self) -> Result<u32, ClientError> {
        let (h, _) = self.call_ok(SM_CMD_VERSION, 0, 0, 0, &[])?;
        Ok(h.data2)
    }

    /// REGISTER: this connection becomes a registered client (no reply is sent).
    pub fn register(&mut self) -> Result<(), ClientError> {
        self.send(SM_CMD_REGISTER, 0, 0, 0, &[])
    }

    /// ADD_LOCKSPACE; `io_timeout` 0 = daemon default.
    pub fn add_lockspace(
        &mut self,
        ls: &Lockspace,
        io_timeout: u32,
        flags: u32,
    ) -> Result<i32, ClientError> {
        let (h, _) = self.call(SM_CMD_ADD_LOCKSPACE, flags, io_timeout, 0, &ls.encode())?;
        Ok(h.result())
    }

    /// INQ_LOCKSPACE: 0 joined, -EINPROGRESS, -ENOENT.
    pub fn inq_lockspace(&mut self, ls: &Lockspace, flags: u32) -> Result<i32, ClientError> {
        let (h, _) = self.call(SM_CMD_INQ_LOCKSPACE, flags, 0, 0, &ls.encode())?;
        Ok(h.result())
    }

    /// REM_LOCKSPACE.
    pub fn rem_lockspace(&mut self, ls: &Lockspace, flags: u32) -> Result<i32, ClientError> {
        let (h, _) = self.call(SM_CMD_REM_LOCKSPACE, flags, 0, 0, &ls.encode())?;
        Ok(h.result())
    }

    /// ACQUIRE for `target` (-1 = this registered connection, else a pid).
    pub fn acquire(
        &mut self,
        target: i32,
        flags: u32,
        resources: &[Resource],
        owner_name: Option<Name>,
    ) -> Result<i32, ClientError> {
        let p = Request::Acquire {
            resources: resources.to_vec(),
            options: Options {
                owner_name: owner_name.unwrap_or(Name::EMPTY),
                flags: 0,
                len: 0,
            },
            options_str: Vec::new(),
        }
        .encode_payload();
        let count = u32::try_from(resources.len()).unwrap_or(u32::MAX);
        let (h, _) = self.call(SM_CMD_ACQUIRE, flags, count, target as u32, &p)?;
        Ok(h.result())
    }

    /// lockd's ACQUIRE_FOR_PID: leases held for process `pid`, which need not register;
    /// the daemon releases them when the process exits and runs `killpath` (with the pid
    /// appended) first when they are lost. Returns the result code.
    pub fn acquire_for_pid(
        &mut self,
        pid: i32,
        flags: u32,
        resources: &[Resource],
        killpath: Option<(&str, &str)>,
    ) -> Result<i32, ClientError> {
        let (path, args) = killpath.unwrap_or(("", ""));
        if path.len() >= SANLK_HELPER_PATH_LEN || args.len() >= SANLK_HELPER_ARGS_LEN {
            return Err(WireError::BadField {
                what: "killpath",
                why: "path and arguments must each be under 128 bytes",
            }
            .into());
        }
        let p = Request::AcquireForPid {
            killpath_path: path.to_string(),
            killpath_args: args.to_string(),
            resources: resources.to_vec(),
        }
        .encode_payload();
        let count = u32::try_from(resources.len()).unwrap_or(u32::MAX);
        self.set_read_timeout(None)?;
        let (h, _) = self.call(
            crate::ext::LOCKD_CMD_ACQUIRE_FOR_PID,
            flags,
            pid as u32,
            count,
            &p,
        )?;
        Ok(h.result())
    }

    /// RELEASE for `target`; resources are sent without disks.
    pub fn release(
        &mut self,
        target: i32,
        flags: u32,
        resources: &[ResourceHead],
    ) -> Result<i32, ClientError> {
        let heads = resources
            .iter()
            .map(|r| ResourceHead {
                num_disks: 0,
                ..r.clone()
            })
            .collect();
        let p = Request::Release(ReleaseWhat::Named(heads)).encode_payload();
        let count = u32::try_from(resources.len()).unwrap_or(u32::MAX);
        let (h, _) = self.call(SM_CMD_RELEASE, flags, count, target as u32, &p)?;
        Ok(h.result())
    }

    /// INQUIRE for `target`: (result, resource count, state string).
    pub fn inquire(&mut self, target: i32) -> Result<(i32, u32, String), ClientError> {
        let (h, p) = self.call(SM_CMD_INQUIRE, 0, 0, target as u32, &[])?;
        Ok((h.result(), h.data2, c_field_text(&p)))
    }

    /// GET_LOCKSPACES.
    pub fn get_lockspaces(&mut self) -> Result<Vec<Lockspace>, ClientError> {
        let (h, p) = self.call_ok(SM_CMD_GET_LOCKSPACES, 0, 0, 0, &[])?;
        let n = (h.data2 as usize).min(p.len() / LOCKSPACE_LEN);
        p.chunks_exact(LOCKSPACE_LEN)
            .take(n)
            .map(|c| Lockspace::decode(c).map_err(ClientError::from))
            .collect()
    }

    /// GET_HOSTS of lockspace `name` (host_id 0 = all).
    pub fn get_hosts(&mut self, name: Name, host_id: u64) -> Result<Vec<Host>, ClientError> {
        let ls = Lockspace {
            name,
            host_id,
            flags: 0,
            pad: 0,
            host_id_disk: DiskLocation::default(),
        };
        let (h, p) = self.call_ok(SM_CMD_GET_HOSTS, 0, 0, 0, &ls.encode())?;
        let n = (h.data2 as usize).min(p.len() / HOST_LEN);
        p.chunks_exact(HOST_LEN)
            .take(n)
            .map(|c| Host::decode(c).map_err(ClientError::from))
            .collect()
    }

    /// STATUS at `depth` (1 daemon … 4 resources): records until the daemon closes.
    pub fn status(mut self, depth: u32) -> Result<Vec<StateRecord>, ClientError> {
        self.send(SM_CMD_STATUS, 0, depth, 0, &[])?;
        let h = self.recv_header()?;
        if h.result() < 0 {
            return Err(ClientError::Result { rv: h.result() });
        }
        self.read_state_records()
    }

    /// HOST_STATUS of one lockspace.
    pub fn host_status(self, name: Name) -> Result<Vec<StateRecord>, ClientError> {
        self.lockspace_state_records(SM_CMD_HOST_STATUS, name)
    }

    /// Sends `cmd` naming lockspace `name` and reads the state records it answers with.
    fn lockspace_state_records(
        mut self,
        cmd: u32,
        name: Name,
    ) -> Result<Vec<StateRecord>, ClientError> {
        let ls = Lockspace {
            name,
            host_id: 0,
            flags: 0,
            pad: 0,
            host_id_disk: DiskLocation::default(),
        };
        self.send(cmd, 0, 0, 0, &ls.encode())?;
        let h = self.recv_header()?;
        if h.result() < 0 {
            return Err(ClientError::Result { rv: h.result() });
        }
        self.read_state_records()
    }

    /// RENEWAL of one lockspace: the daemon's recent delta-lease renewals, oldest first,
    /// one SANLK_STATE_RENEWAL record each (text `timestamp=… read_ms=… write_ms=…
    /// next_timeouts=… next_errors=…`, as sanlock's `client renewal` prints it).
    pub fn renewal(self, name: Name) -> Result<Vec<StateRecord>, ClientError> {
        self.lockspace_state_records(SM_CMD_RENEWAL, name)
    }

    /// LOG_DUMP: the daemon's in-memory recent log text (sanlock's `client log_dump`).
    /// The reply header's `data` is the text's length, at most [`MAX_CLIENT_MSG`] bytes
    /// (sanlock and lockd keep 1 MiB); a longer claim is refused, a shorter text (the
    /// daemon closed early) is returned as far as it came.
    pub fn log_dump(mut self) -> Result<Vec<u8>, ClientError> {
        self.send(SM_CMD_LOG_DUMP, 0, 0, 0, &[])?;
        let h = self.recv_header()?;
        let n = h.data as usize;
        if n > MAX_CLIENT_MSG as usize {
            return Err(WireError::Oversized {
                length: h.data,
                max: MAX_CLIENT_MSG,
            }
            .into());
        }
        let mut buf = vec![0u8; n];
        let mut got = 0;
        while got < n {
            match self.stream.read(&mut buf[got..]) {
                Ok(0) => break,
                Ok(k) => got += k,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
        buf.truncate(got);
        // sanlock's buffer is a C string: the text ends at its first NUL.
        if let Some(end) = buf.iter().position(|&b| b == 0) {
            buf.truncate(end);
        }
        Ok(buf)
    }

    fn read_state_records(&mut self) -> Result<Vec<StateRecord>, ClientError> {
        let mut out = Vec::new();
        loop {
            let b = match self.recv_exact(STATE_LEN) {
                Ok(b) => b,
                Err(ClientError::Closed) => return Ok(out),
                Err(e) => return Err(e),
            };
            let state = State::decode(&b)?;
            if state.str_len as usize > SANLK_STATE_MAXSTR {
                return Err(WireError::Oversized {
                    length: state.str_len,
                    max: SANLK_STATE_MAXSTR as u32,
                }
                .into());
            }
            let text = c_field_text(&self.recv_exact(state.str_len as usize)?);
            let mut rec = StateRecord {
                state,
                text,
                lockspace: None,
                resource: None,
            };
            match rec.state.kind {
                SANLK_STATE_LOCKSPACE => {
                    rec.lockspace = Some(Lockspace::decode(&self.recv_exact(LOCKSPACE_LEN)?)?);
                }
                SANLK_STATE_RESOURCE => {
                    let head = ResourceHead::decode(&self.recv_exact(RESOURCE_LEN)?)?;
                    if head.num_disks > SANLK_MAX_DISKS {
                        return Err(WireError::TooMany {
                            what: "disks",
                            count: head.num_disks,
                            max: SANLK_MAX_DISKS,
                        }
                        .into());
                    }
                    let mut disks = Vec::new();
                    for _ in 0..head.num_disks {
                        disks.push(DiskLocation::decode(&self.recv_exact(DISK_LEN)?)?);
                    }
                    rec.resource = Some(Resource { head, disks });
                }
                _ => {}
            }
            out.push(rec);
        }
    }

    /// CONVERT a held resource of `target` to shared (`SANLK_RES_SHARED` in
    /// `res.flags`) or exclusive.
    pub fn convert(
        &mut self,
        target: i32,
        flags: u32,
        res: &ResourceHead,
    ) -> Result<i32, ClientError> {
        let head = ResourceHead {
            num_disks: 0,
            ..res.clone()
        };
        let p = Request::Convert(head).encode_payload();
        let (h, _) = self.call(SM_CMD_CONVERT, flags, 0, target as u32, &p)?;
        Ok(h.result())
    }

    /// KILLPATH for this registered connection (`with_pid` appends the pid).
    pub fn killpath(&mut self, path: &str, args: &str, with_pid: bool) -> Result<i32, ClientError> {
        if path.len() >= SANLK_HELPER_PATH_LEN || args.len() >= SANLK_HELPER_ARGS_LEN {
            return Err(WireError::BadField {
                what: "killpath",
                why: "path and args must each be shorter than 128 bytes",
            }
            .into());
        }
        let p = Request::Killpath {
            path: path.to_string(),
            args: args.to_string(),
        }
        .encode_payload();
        let flags = if with_pid { SANLK_KILLPATH_PID } else { 0 };
        let (h, _) = self.call(SM_CMD_KILLPATH, flags, 0, u32::MAX, &p)?;
        Ok(h.result())
    }

    /// RESTRICT this registered connection (`SANLK_RESTRICT_*`).
    pub fn restrict(&mut self, flags: u32) -> Result<i32, ClientError> {
        let (h, _) = self.call(SM_CMD_RESTRICT, flags, 0, u32::MAX, &[])?;
        Ok(h.result())
    }

    /// READ_RESOURCE_OWNERS: the resource as on disk (lver, SHARED flag) and its holders.
    pub fn read_resource_owners(
        &mut self,
        res: &Resource,
    ) -> Result<(ResourceHead, Vec<Host>), ClientError> {
        let (h, p) = self.call_ok(SM_CMD_READ_RESOURCE_OWNERS, 0, 0, 0, &res.encode())?;
        if p.len() < RESOURCE_LEN {
            return Err(WireError::Short {
                what: "read_resource_owners reply",
                need: RESOURCE_LEN,
                got: p.len(),
            }
            .into());
        }
        let head = ResourceHead::decode(&p[..RESOURCE_LEN])?;
        let n = (h.data2 as usize).min((p.len() - RESOURCE_LEN) / HOST_LEN);
        let hosts = p[RESOURCE_LEN..]
            .chunks_exact(HOST_LEN)
            .take(n)
            .map(Host::decode)
            .collect::<Result<Vec<_>, _>>()?;
        Ok((head, hosts))
    }

    /// WRITE_LOCKSPACE: format a lockspace area (geometry from `ls.flags`, or the default).
    pub fn write_lockspace(&mut self, ls: &Lockspace, io_timeout: u32) -> Result<i32, ClientError> {
        let (h, _) = self.call(SM_CMD_WRITE_LOCKSPACE, 0, 0, io_timeout, &ls.encode())?;
        Ok(h.result())
    }

    /// WRITE_RESOURCE: format a resource area (`num_hosts` 0 = max).
    pub fn write_resource(
        &mut self,
        res: &Resource,
        num_hosts: u32,
        clear: bool,
    ) -> Result<i32, ClientError> {
        let flags = if clear { SANLK_WRITE_CLEAR } else { 0 };
        let (h, _) = self.call(SM_CMD_WRITE_RESOURCE, flags, num_hosts, 0, &res.encode())?;
        Ok(h.result())
    }

    /// READ_LOCKSPACE: the lockspace's name and geometry flags, and its io_timeout.
    pub fn read_lockspace(&mut self, ls: &Lockspace) -> Result<(Lockspace, u32), ClientError> {
        let (h, p) = self.call_ok(SM_CMD_READ_LOCKSPACE, 0, 0, 0, &ls.encode())?;
        let out = Lockspace::decode(p.get(..LOCKSPACE_LEN).unwrap_or(&p))?;
        Ok((out, h.data2))
    }

    /// READ_RESOURCE: names, lver and geometry flags from the leader.
    pub fn read_resource(&mut self, res: &Resource) -> Result<ResourceHead, ClientError> {
        let (_, p) = self.call_ok(SM_CMD_READ_RESOURCE, 0, 0, 0, &res.encode())?;
        Ok(ResourceHead::decode(p.get(..RESOURCE_LEN).unwrap_or(&p))?)
    }

    /// GET_LVB of a lease held on this host: (result, up to `size` LVB bytes; 0 = the
    /// sector size). On failure sanlock's header still claims `size` payload bytes but
    /// sends none (as libsanlock, the payload is read only on success).
    pub fn get_lvb(
        &mut self,
        res: &ResourceHead,
        size: u32,
    ) -> Result<(i32, Vec<u8>), ClientError> {
        let mut head = res.clone();
        head.num_disks = 0;
        let mut p = Vec::with_capacity(RESOURCE_LEN);
        head.encode_into(&mut p);
        self.send(SM_CMD_GET_LVB, 0, 0, size, &p)?;
        let h = self.recv_header()?;
        if h.result() < 0 {
            return Ok((h.result(), Vec::new()));
        }
        let n = h.payload_len(MAX_CLIENT_MSG)?;
        Ok((h.result(), self.recv_exact(n)?))
    }

    /// SET_LVB of a lease held on this host with the LVB flag: replaces the first
    /// `value.len()` bytes of its LVB (the rest is kept), written to disk at the holder's
    /// release or convert to shared. The daemon's result.
    pub fn set_lvb(&mut self, res: &ResourceHead, value: &[u8]) -> Result<i32, ClientError> {
        let mut head = res.clone();
        head.num_disks = 0;
        let mut p = Vec::with_capacity(RESOURCE_LEN + value.len());
        head.encode_into(&mut p);
        p.extend_from_slice(value);
        let (h, _) = self.call(SM_CMD_SET_LVB, 0, 0, 0, &p)?;
        Ok(h.result())
    }

    /// FORMAT_RINDEX (geometry from `rx.flags`, else the device default).
    pub fn format_rindex(&mut self, rx: &Rindex, flags: u32) -> Result<i32, ClientError> {
        let mut p = Vec::with_capacity(RINDEX_LEN);
        rx.encode_into(&mut p);
        let (h, _) = self.call(SM_CMD_FORMAT_RINDEX, flags, 0, 0, &p)?;
        Ok(h.result())
    }

    /// REBUILD_RINDEX (`SANLK_RX_NO_LOCKSPACE` in `flags` skips the lockspace and lease).
    pub fn rebuild_rindex(&mut self, rx: &Rindex, flags: u32) -> Result<i32, ClientError> {
        let mut p = Vec::with_capacity(RINDEX_LEN);
        rx.encode_into(&mut p);
        let (h, _) = self.call(SM_CMD_REBUILD_RINDEX, flags, 0, 0, &p)?;
        Ok(h.result())
    }

    /// One of the entry commands (LOOKUP/UPDATE_RINDEX, CREATE/DELETE_RESOURCE): the result
    /// and the `sanlk_rentry` the daemon replies (all zero when it sent none).
    pub fn rindex_entry_call(
        &mut self,
        cmd: u32,
        flags: u32,
        rx: &Rindex,
        re: &Rentry,
        data: u32,
        data2: u32,
    ) -> Result<(i32, Rentry), ClientError> {
        let mut p = Vec::with_capacity(RINDEX_LEN + RENTRY_LEN);
        rx.encode_into(&mut p);
        p.extend_from_slice(&re.encode());
        let (h, reply) = self.call(cmd, flags, data, data2, &p)?;
        let out = match reply.get(..RENTRY_LEN) {
            Some(b) => Rentry::decode(b)?,
            None => Rentry::new(Name::EMPTY, 0),
        };
        Ok((h.result(), out))
    }

    /// LOOKUP_RINDEX: by name, by offset, both, or neither (the first free slot).
    pub fn lookup_rindex(
        &mut self,
        rx: &Rindex,
        flags: u32,
        re: &Rentry,
    ) -> Result<(i32, Rentry), ClientError> {
        self.rindex_entry_call(SM_CMD_LOOKUP_RINDEX, flags, rx, re, 0, 0)
    }

    /// UPDATE_RINDEX with `SANLK_RXUP_ADD` or `SANLK_RXUP_REM` in `flags`.
    pub fn update_rindex(
        &mut self,
        rx: &Rindex,
        flags: u32,
        re: &Rentry,
    ) -> Result<(i32, Rentry), ClientError> {
        self.rindex_entry_call(SM_CMD_UPDATE_RINDEX, flags, rx, re, 0, 0)
    }

    /// CREATE_RESOURCE: a new lease named `re.name` in the first free slot; the reply
    /// carries its offset.
    pub fn create_resource(
        &mut self,
        rx: &Rindex,
        flags: u32,
        re: &Rentry,
        max_hosts: u32,
        num_hosts: u32,
    ) -> Result<(i32, Rentry), ClientError> {
        self.rindex_entry_call(SM_CMD_CREATE_RESOURCE, flags, rx, re, max_hosts, num_hosts)
    }

    /// DELETE_RESOURCE: clears the entry and the lease named `re.name`.
    pub fn delete_resource(
        &mut self,
        rx: &Rindex,
        flags: u32,
        re: &Rentry,
    ) -> Result<(i32, Rentry), ClientError> {
        self.rindex_entry_call(SM_CMD_DELETE_RESOURCE, flags, rx, re, 0, 0)
    }

    /// SHUTDOWN (`wait` = SHUTDOWN_WAIT, which replies when the daemon exits).
    pub fn shutdown(&mut self, force: bool, wait: bool) -> Result<i32, ClientError> {
        if wait {
            let (h, _) = self.call(SM_CMD_SHUTDOWN_WAIT, 0, u32::from(force), 0, &[])?;
            return Ok(h.result());
        }
        self.send(SM_CMD_SHUTDOWN, 0, u32::from(force), 0, &[])?;
        // sanlock sends no reply to SHUTDOWN; lockd answers a refusal (-EPERM for a
        // non-root client, see the daemon's uid rules) and closes. Wait briefly for one so
        // a refusal is not reported as a request: silence or a close means accepted.
        self.set_read_timeout(Some(SHUTDOWN_REFUSAL_WAIT))?;
        let answer = self.recv_header();
        self.set_read_timeout(None)?;
        match answer {
            Ok(h) => Ok(h.result()),
            Err(ClientError::Closed) => Ok(0),
            Err(ClientError::Io(e))
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock
                        | std::io::ErrorKind::TimedOut
                        | std::io::ErrorKind::ConnectionReset
                ) =>
            {
                Ok(0)
            }
            Err(e) => Err(e),
        }
    }
}
