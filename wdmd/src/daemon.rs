//! The wdmd daemon: socket server, test loop, device handling, start-up guard.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{self, ErrorKind, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use thiserror::Error;

use crate::device::{self, DeviceError, DeviceSpec, Watchdog};
use crate::proto::{self, Cmd, WdmdHeader, HEADER_SIZE};
use crate::scripts::Scripts;
use crate::sys;

/// Marker used by the production instance: the same object as sanlock's
/// `shm_open("/wdmd")`, so this wdmd and sanlock's wdmd also exclude each other.
pub const SHM_MARKER: &str = "/dev/shm/wdmd";
/// Marker file name used inside a non-default run dir (test instances).
pub const RUN_DIR_MARKER: &str = "wdmd.shm";
/// Test interval while a test is failing.
pub const RECOVER_TEST_INTERVAL: u64 = 1;
/// Default fire timeout.
pub const DEFAULT_FIRE_TIMEOUT: u32 = 60;
/// Default scripts directory.
pub const DEFAULT_SCRIPTS_DIR: &str = "/etc/wdmd.d";

/// Daemon settings.
#[derive(Debug, Clone)]
pub struct WdmdConfig {
    /// Directory of the socket and pid file.
    pub run_dir: PathBuf,
    /// Start-up guard marker (see [`WdmdConfig::default_marker`]).
    pub marker: PathBuf,
    /// `-w`: the device to try first.
    pub device: Option<DeviceSpec>,
    /// Fire timeout used by 3.8-style clients and before any OPEN_WATCHDOG.
    pub fire_timeout: u32,
    /// `-S 1`.
    pub allow_scripts: bool,
    /// `-s DIR`.
    pub scripts_dir: PathBuf,
    /// `-k N` (0 = never kill).
    pub kill_script_sec: u64,
    /// Group owner of the socket.
    pub socket_gid: Option<u32>,
}

impl WdmdConfig {
    /// Defaults for a run dir.
    pub fn new(run_dir: PathBuf) -> WdmdConfig {
        let marker = WdmdConfig::default_marker(&run_dir);
        WdmdConfig {
            run_dir,
            marker,
            device: None,
            fire_timeout: DEFAULT_FIRE_TIMEOUT,
            allow_scripts: false,
            scripts_dir: PathBuf::from(DEFAULT_SCRIPTS_DIR),
            kill_script_sec: 0,
            socket_gid: None,
        }
    }

    /// `/dev/shm/wdmd` for the default run dir, else `<run_dir>/wdmd.shm`
    /// (a test instance's run dir stands in for the tmpfs a reboot clears).
    pub fn default_marker(run_dir: &Path) -> PathBuf {
        if run_dir == Path::new(proto::DEFAULT_RUN_DIR) {
            PathBuf::from(SHM_MARKER)
        } else {
            run_dir.join(RUN_DIR_MARKER)
        }
    }

    /// `<run_dir>/wdmd.sock`.
    pub fn socket_path(&self) -> PathBuf {
        self.run_dir.join(proto::SOCKET_NAME)
    }

    /// `<run_dir>/wdmd.pid`.
    pub fn pid_path(&self) -> PathBuf {
        self.run_dir.join(proto::PID_FILE_NAME)
    }
}

/// Errors that stop wdmd from starting.
#[derive(Debug, Error)]
pub enum WdmdError {
    /// Another wdmd holds the pid file lock.
    #[error("another wdmd is running (pid file {path} is locked{pid})")]
    AlreadyRunning {
        /// Pid file.
        path: String,
        /// ", pid N" if readable.
        pid: String,
    },
    /// The start-up guard exists: the previous wdmd did not exit cleanly.
    #[error(
        "other wdmd not cleanly stopped: marker {path} exists; refusing to start so a watchdog \
         that is meant to fire is not petted again (reboot, or remove {path} only if you know \
         the watchdog is disarmed)"
    )]
    NotCleanlyStopped {
        /// Marker path.
        path: String,
    },
    /// `--probe` while a wdmd runs or after an unclean exit.
    #[error("cannot probe watchdog devices while wdmd is in use or was not cleanly stopped (marker {path} exists)")]
    ProbeInUse {
        /// Marker path.
        path: String,
    },
    /// File system or socket setup failure.
    #[error("{what}")]
    Io {
        /// What was being done.
        what: String,
        /// Cause.
        source: io::Error,
    },
    /// A device error during `--probe`.
    #[error(transparent)]
    Device(#[from] DeviceError),
}

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> WdmdError {
    let what = what.into();
    move |source| WdmdError::Io { what, source }
}

/// How the daemon ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Device magic-closed (or never opened), marker removed.
    Clean,
    /// Device left to fire, marker kept.
    Unclean,
}

/// The start-up guard. Created with O_EXCL; removed only by a clean exit.
#[derive(Debug)]
pub struct Marker {
    path: PathBuf,
}

impl Marker {
    /// Create the marker or fail with [`WdmdError::NotCleanlyStopped`].
    pub fn create(path: &Path) -> Result<Marker, WdmdError> {
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(path)
        {
            Ok(_) => Ok(Marker {
                path: path.to_path_buf(),
            }),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => Err(WdmdError::NotCleanlyStopped {
                path: path.display().to_string(),
            }),
            Err(e) => Err(io_err(format!("cannot create marker {}", path.display()))(
                e,
            )),
        }
    }

    /// Remove the marker (clean exit / after a probe).
    pub fn remove(self) {
        if let Err(e) = std::fs::remove_file(&self.path) {
            tracing::error!("cannot remove marker {}: {e}", self.path.display());
        }
    }

    /// Keep the marker on disk (unclean exit).
    pub fn keep(self) {}
}

/// The locked pid file.
#[derive(Debug)]
pub struct PidFile {
    path: PathBuf,
    /// Holds the flock for the daemon's lifetime.
    _file: nix::fcntl::Flock<File>,
}

impl PidFile {
    /// Create the run dir (0775) and lock/write the pid file.
    pub fn lock(run_dir: &Path, path: &Path) -> Result<PidFile, WdmdError> {
        std::fs::create_dir_all(run_dir).map_err(io_err(format!(
            "cannot create run dir {}",
            run_dir.display()
        )))?;
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o644)
            .open(path)
            .map_err(io_err(format!("cannot open pid file {}", path.display())))?;
        let mut f = match sys::flock_exclusive_nonblocking(f) {
            Ok(locked) => locked,
            Err((mut f, e)) => {
                if e.kind() == ErrorKind::WouldBlock {
                    let mut s = String::new();
                    let _ = f.read_to_string(&mut s);
                    let pid = match s.trim() {
                        "" => String::new(),
                        p => format!(", pid {p}"),
                    };
                    return Err(WdmdError::AlreadyRunning {
                        path: path.display().to_string(),
                        pid,
                    });
                }
                return Err(io_err(format!("cannot lock pid file {}", path.display()))(
                    e,
                ));
            }
        };
        f.set_len(0)
            .and_then(|()| f.write_all(format!("{}\n", sys::getpid()).as_bytes()))
            .map_err(io_err(format!("cannot write pid file {}", path.display())))?;
        Ok(PidFile {
            path: path.to_path_buf(),
            _file: f,
        })
    }
}

impl Drop for PidFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// `--probe` with the start-up guard (refused while a wdmd uses the device).
pub fn probe(cfg: &WdmdConfig) -> Result<String, WdmdError> {
    if let Some(dir) = cfg.marker.parent() {
        std::fs::create_dir_all(dir).map_err(io_err(format!("cannot create {}", dir.display())))?;
    }
    let marker = Marker::create(&cfg.marker).map_err(|e| match e {
        WdmdError::NotCleanlyStopped { path } => WdmdError::ProbeInUse { path },
        other => other,
    })?;
    let res = device::probe(
        &DeviceSpec::candidates(cfg.device.as_ref()),
        cfg.fire_timeout,
    );
    marker.remove();
    Ok(res?)
}

#[derive(Debug)]
struct ClientEntry {
    name: String,
    pid: i32,
    fd: i32,
    refcount: bool,
    renewal: u64,
    expire: u64,
    dead: bool,
    /// REFCOUNT_SET could not open the device (3.8-style client): STATUS says 0.
    open_failed: bool,
}

struct State {
    clients: BTreeMap<u64, ClientEntry>,
    next_id: u64,
    dev: Option<Box<dyn Watchdog>>,
    dev_spec: Option<DeviceSpec>,
    test_loop_enable: bool,
    fire_timeout: u32,
    standard_interval: u64,
    test_interval: u64,
    last_keepalive: u64,
    last_closeunclean: u64,
    resetting: bool,
    test_time: u64,
    script_lines: Vec<String>,
}

impl State {
    fn set_fire_timeout(&mut self, w: u32) {
        self.fire_timeout = w;
        self.standard_interval = u64::from(proto::test_interval_for(w));
        self.test_interval = self.standard_interval;
    }

    fn pet(&mut self) {
        let Some(dev) = self.dev.as_mut() else {
            return;
        };
        match dev.keepalive() {
            Ok(()) => self.last_keepalive = sys::monotime(),
            Err(e) => {
                tracing::error!("keepalive failed, closing device: {}", crate::Chain(&e));
                self.close_unclean();
            }
        }
    }

    fn close_unclean(&mut self) {
        if let Some(dev) = self.dev.take() {
            tracing::error!("{} closed unclean", dev.path());
            drop(dev);
            self.last_closeunclean = sys::monotime();
        }
    }

    fn close_magic(&mut self) {
        if let Some(dev) = self.dev.take() {
            let name = dev.path();
            match dev.close_magic() {
                Ok(()) => tracing::info!("{name} closed cleanly (magic close)"),
                Err(e) => tracing::error!("{name} magic close failed: {}", crate::Chain(&e)),
            }
        }
    }

    /// Open the device with timeout `w` unless already enabled; returns the granted timeout.
    fn enable(&mut self, cfg: &WdmdConfig, w: u32) -> Result<u32, DeviceError> {
        if self.test_loop_enable {
            return Ok(self.fire_timeout);
        }
        let cands = match &self.dev_spec {
            Some(s) => vec![s.clone()],
            None => DeviceSpec::candidates(cfg.device.as_ref()),
        };
        let dev = device::open_with_timeout(&cands, w)?;
        tracing::warn!("{} open with timeout {w}", dev.path());
        self.dev_spec = Some(DeviceSpec::parse(&dev.path()));
        self.dev = Some(dev);
        self.set_fire_timeout(w);
        self.pet();
        self.test_loop_enable = true;
        Ok(w)
    }

    fn reopen(&mut self) {
        let Some(spec) = self.dev_spec.clone() else {
            return;
        };
        match device::open_one(&spec).and_then(|d| device::ensure_timeout(d, self.fire_timeout)) {
            Ok(d) => {
                tracing::warn!("{} reopen", d.path());
                self.dev = Some(d);
            }
            Err(e) => tracing::error!("reopen failed: {}", crate::Chain(&e)),
        }
    }

    fn counts(&self) -> (usize, usize) {
        let active = self.clients.values().filter(|c| c.refcount).count();
        (active, self.clients.len())
    }

    fn test_clients(&self, now: u64) -> usize {
        let last_ping = self.last_keepalive.max(self.last_closeunclean);
        let mut fails = 0;
        for c in self.clients.values() {
            if c.expire == 0 {
                continue;
            }
            if now >= c.expire {
                tracing::error!(
                    "test failed rem {} now {now} ping {} close {} renewal {} expire {} client {} {}",
                    i64::from(self.fire_timeout) - (now as i64 - last_ping as i64),
                    self.last_keepalive,
                    self.last_closeunclean,
                    c.renewal,
                    c.expire,
                    c.pid,
                    c.name
                );
                fails += 1;
            } else if now >= c.expire.saturating_sub(self.standard_interval) {
                tracing::error!(
                    "test warning now {now} ping {} close {} renewal {} expire {} client {} {}",
                    self.last_keepalive,
                    self.last_closeunclean,
                    c.renewal,
                    c.expire,
                    c.pid,
                    c.name
                );
                fails += 1;
            }
        }
        fails
    }

    fn dump(&self, cfg: &WdmdConfig) -> String {
        let now = sys::monotime();
        let mut s = format!(
            "wdmd {} socket_gid {} high_priority 0 now {now} last_keepalive {} last_closeunclean {} allow_scripts {} kill_script_sec {} fire_timeout {} test_interval {} device {} open {} resetting {}\n",
            sys::getpid(),
            cfg.socket_gid.unwrap_or(0),
            self.last_keepalive,
            self.last_closeunclean,
            u8::from(cfg.allow_scripts),
            cfg.kill_script_sec,
            self.fire_timeout,
            self.test_interval,
            self.dev_spec.as_ref().map(DeviceSpec::display).unwrap_or_else(|| "none".into()),
            u8::from(self.dev.is_some()),
            u8::from(self.resetting),
        );
        for l in &self.script_lines {
            s.push_str(l);
        }
        for (i, c) in &self.clients {
            let name: String = c.name.chars().take(64).collect();
            s.push_str(&format!(
                "client {i} name {name} pid {} fd {} dead {} ref {} now {now} renewal {} expire {}\n",
                c.pid,
                c.fd,
                u8::from(c.dead),
                u8::from(c.refcount),
                c.renewal,
                c.expire
            ));
        }
        s
    }
}

struct Shared {
    cfg: WdmdConfig,
    state: Mutex<State>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic in another thread must not stop the watchdog logic; the
        // state is plain data and stays consistent between statements.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn serve_connection(shared: Arc<Shared>, mut stream: UnixStream) {
    let fd = stream.as_raw_fd();
    let id = {
        let mut st = shared.lock();
        let id = st.next_id;
        st.next_id += 1;
        st.clients.insert(
            id,
            ClientEntry {
                name: String::new(),
                pid: 0,
                fd,
                refcount: false,
                renewal: 0,
                expire: 0,
                dead: false,
                open_failed: false,
            },
        );
        id
    };
    let _ = stream.set_write_timeout(Some(Duration::from_secs(5)));
    let mut buf = [0u8; HEADER_SIZE];
    loop {
        if let Err(e) = stream.read_exact(&mut buf) {
            if e.kind() != ErrorKind::UnexpectedEof {
                tracing::error!("ci {id} recv error {e}");
            }
            break;
        }
        // Any 176 bytes decode; unknown commands are ignored like the C switch.
        let h = match WdmdHeader::decode(&buf) {
            Ok(h) => h,
            Err(e) => {
                tracing::error!("ci {id}: {e}");
                break;
            }
        };
        let reply: Option<Vec<u8>> = {
            let mut st = shared.lock();
            handle(&shared.cfg, &mut st, id, &stream, &h)
        };
        if let Some(r) = reply {
            if let Err(e) = stream.write_all(&r) {
                tracing::error!("ci {id} send error {e}");
                break;
            }
        }
    }
    let mut st = shared.lock();
    if let Some(c) = st.clients.get_mut(&id) {
        if c.expire == 0 {
            st.clients.remove(&id);
        } else {
            c.dead = true;
            tracing::error!(
                "client dead ci {id} fd {fd} pid {} renewal {} expire {} {}",
                c.pid,
                c.renewal,
                c.expire,
                c.name
            );
        }
    }
}

fn handle(
    cfg: &WdmdConfig,
    st: &mut State,
    id: u64,
    stream: &UnixStream,
    h: &WdmdHeader,
) -> Option<Vec<u8>> {
    match h.cmd {
        Cmd::Register => {
            let pid = match sys::peer_pid(stream) {
                Ok(p) => p,
                Err(e) => {
                    tracing::error!("ci {id} SO_PEERCRED: {e}");
                    0
                }
            };
            let name = h.name_str();
            tracing::debug!("register ci {id} pid {pid} {name}");
            if let Some(c) = st.clients.get_mut(&id) {
                c.pid = pid;
                c.name = name;
            }
            None
        }
        Cmd::RefcountSet | Cmd::RefcountClear => {
            let set = h.cmd == Cmd::RefcountSet;
            // A sanlock 3.8 client (no OPEN_WATCHDOG) goes REGISTER, REFCOUNT_SET,
            // STATUS, TEST_LIVE: open the device now with the configured timeout
            // so that STATUS can report a failure (fire_timeout 0) before it arms.
            let mut open_failed = false;
            if set && !st.test_loop_enable {
                if let Err(e) = st.enable(cfg, cfg.fire_timeout) {
                    tracing::error!(
                        "ci {id} refcount_set: cannot open the watchdog: {}",
                        crate::Chain(&e)
                    );
                    open_failed = true;
                }
            }
            if let Some(c) = st.clients.get_mut(&id) {
                c.refcount = set;
                c.open_failed = open_failed;
            }
            None
        }
        Cmd::TestLive => {
            tracing::debug!(
                "test_live ci {id} renewal {} expire {}",
                h.renewal_time,
                h.expire_time
            );
            if let Some(c) = st.clients.get_mut(&id) {
                c.renewal = h.renewal_time;
                c.expire = h.expire_time;
            }
            // A sanlock 3.8 client never sends OPEN_WATCHDOG: arming opens the
            // device with the configured timeout, as 3.8's wdmd had it open from start.
            if h.expire_time != 0 && !st.test_loop_enable {
                if let Err(e) = st.enable(cfg, cfg.fire_timeout) {
                    tracing::error!(
                        "ci {id} armed but the watchdog cannot be opened: {}",
                        crate::Chain(&e)
                    );
                }
            }
            None
        }
        Cmd::Status => {
            let mut r = h.clone();
            r.test_interval = u32::try_from(st.test_interval).unwrap_or(u32::MAX);
            let failed = st.clients.get(&id).is_some_and(|c| c.open_failed);
            r.fire_timeout = if failed && !st.test_loop_enable {
                0
            } else {
                st.fire_timeout
            };
            r.last_keepalive = st.last_keepalive;
            Some(r.encode().to_vec())
        }
        Cmd::DumpDebug => {
            if let Some(c) = st.clients.get_mut(&id) {
                c.name = "dump".into();
            }
            Some(st.dump(cfg).into_bytes())
        }
        Cmd::OpenWatchdog => {
            let mut r = h.clone();
            r.fire_timeout = if h.fire_timeout == 0 {
                0
            } else {
                match st.enable(cfg, h.fire_timeout) {
                    Ok(w) => w,
                    Err(e) => {
                        tracing::error!(
                            "open_watchdog fire_timeout {}: {}",
                            h.fire_timeout,
                            crate::Chain(&e)
                        );
                        0
                    }
                }
            };
            tracing::debug!(
                "open_watchdog fire_timeout {} result {}",
                h.fire_timeout,
                r.fire_timeout
            );
            Some(r.encode().to_vec())
        }
        Cmd::Unknown(c) => {
            tracing::debug!("ci {id} ignoring unknown cmd {c}");
            None
        }
    }
}

fn setup_listener(cfg: &WdmdConfig) -> Result<UnixListener, WdmdError> {
    let path = cfg.socket_path();
    match std::fs::remove_file(&path) {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        Err(e) => {
            return Err(io_err(format!(
                "cannot remove old socket {}",
                path.display()
            ))(e))
        }
    }
    let l = UnixListener::bind(&path).map_err(io_err(format!("cannot bind {}", path.display())))?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o660))
        .map_err(io_err(format!("cannot chmod {}", path.display())))?;
    if let Some(gid) = cfg.socket_gid {
        std::os::unix::fs::chown(&path, None, Some(gid))
            .map_err(io_err(format!("cannot chown {}", path.display())))?;
    }
    Ok(l)
}

/// Run the daemon until a clean or unclean exit. `ready` is called once the
/// socket accepts connections.
pub fn run(cfg: WdmdConfig, ready: impl FnOnce()) -> Result<Exit, WdmdError> {
    let _pid = PidFile::lock(&cfg.run_dir, &cfg.pid_path())?;
    let marker = Marker::create(&cfg.marker)?;
    if let Err(e) = sys::install_signal_flags() {
        marker.remove();
        return Err(io_err("cannot install signal handlers")(e));
    }
    let mut scripts = if cfg.allow_scripts {
        match Scripts::load(&cfg.scripts_dir) {
            Ok(s) => s,
            Err(e) => {
                marker.remove();
                return Err(io_err(format!(
                    "cannot read scripts dir {}",
                    cfg.scripts_dir.display()
                ))(e));
            }
        }
    } else {
        Scripts::default()
    };
    let listener = match setup_listener(&cfg) {
        Ok(l) => l,
        Err(e) => {
            marker.remove();
            return Err(e);
        }
    };
    let mut state = State {
        clients: BTreeMap::new(),
        next_id: 1,
        dev: None,
        dev_spec: None,
        test_loop_enable: false,
        fire_timeout: 0,
        standard_interval: 0,
        test_interval: 0,
        last_keepalive: 0,
        last_closeunclean: 0,
        resetting: false,
        test_time: 0,
        script_lines: Vec::new(),
    };
    state.set_fire_timeout(cfg.fire_timeout);
    let shared = Arc::new(Shared {
        cfg: cfg.clone(),
        state: Mutex::new(state),
    });
    {
        let shared = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("wdmd-accept".into())
            .spawn(move || {
                for s in listener.incoming() {
                    match s {
                        Ok(s) => {
                            let sh = Arc::clone(&shared);
                            if let Err(e) = std::thread::Builder::new()
                                .name("wdmd-conn".into())
                                .spawn(move || serve_connection(sh, s))
                            {
                                tracing::error!("cannot start connection thread: {e}");
                            }
                        }
                        Err(e) => tracing::error!("accept: {e}"),
                    }
                }
            })
            .map_err(io_err("cannot start accept thread"))?;
    }
    tracing::warn!(
        "wdmd started S{} fire_timeout {} socket {}",
        u8::from(cfg.allow_scripts),
        cfg.fire_timeout,
        cfg.socket_path().display()
    );
    ready();

    loop {
        std::thread::sleep(Duration::from_millis(100));
        if sys::take_hup() && cfg.allow_scripts {
            match Scripts::load(&cfg.scripts_dir) {
                Ok(s) => scripts = s,
                Err(e) => tracing::error!("reload scripts: {e}"),
            }
        }
        let due = {
            let mut st = shared.lock();
            let (active, external) = st.counts();
            if sys::quit_requested() && active == 0 {
                break;
            }
            if !st.test_loop_enable {
                continue;
            }
            if active == 0 && external == 0 && !st.resetting {
                tracing::info!("close watchdog unused");
                st.close_magic();
                st.test_loop_enable = false;
                st.test_interval = st.standard_interval;
                st.test_time = 0;
                continue;
            }
            let now = sys::monotime();
            if now.saturating_sub(st.test_time) >= st.test_interval {
                st.test_time = now;
                Some((now, st.standard_interval))
            } else {
                None
            }
        };
        let Some((now, interval)) = due else {
            continue;
        };
        let script_fails = if cfg.allow_scripts {
            scripts.test(interval, cfg.kill_script_sec, now)
        } else {
            0
        };
        let mut st = shared.lock();
        st.script_lines = scripts
            .scripts
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let name: String = s.name.chars().take(64).collect();
                format!(
                    "script {i} name {name} pid {} now {now} start {} last_result {} run {} fail {} good {} kill {} long {}\n",
                    s.pid(), s.start, s.last_result, s.run_count, s.fail_count, s.good_count, s.kill_count, s.long_count
                )
            })
            .collect();
        let fails = script_fails + st.test_clients(sys::monotime());
        if fails == 0 {
            if st.dev.is_none() {
                st.reopen();
            }
            st.pet();
            st.test_interval = st.standard_interval;
            st.resetting = false;
        } else {
            st.close_unclean();
            st.test_interval = RECOVER_TEST_INTERVAL;
            st.resetting = true;
        }
    }

    let _ = std::fs::remove_file(cfg.socket_path());
    let mut st = shared.lock();
    let armed = st.clients.values().filter(|c| c.expire != 0).count();
    if armed == 0 && st.test_loop_enable && st.dev.is_none() {
        // Closed unclean by an earlier failure but nothing is armed any more:
        // reopen so the exit can disarm the timer with the magic close.
        st.reopen();
        if st.dev.is_some() {
            st.resetting = false;
        }
    }
    if armed == 0 && !st.resetting {
        st.close_magic();
        marker.remove();
        tracing::warn!("wdmd exit: clean");
        Ok(Exit::Clean)
    } else {
        // Dropping the device without the magic character keeps the timer running.
        st.close_unclean();
        marker.keep();
        tracing::error!(
            "wdmd exit: unclean ({armed} armed client(s), resetting {}); the watchdog will fire",
            st.resetting
        );
        Ok(Exit::Unclean)
    }
}
