//! Daemon-level fuzzing (issue 16): seeded random command sequences from several clients
//! against one lockd daemon, checking invariants after every step.
//!
//! Four registered clients and short-lived admin connections send, in random order:
//! ACQUIRE (exclusive or shared, one or two of four resources, sometimes with a bogus
//! lockspace name or disk offset), RELEASE (held or not), CONVERT, INQUIRE, STATUS,
//! GET_HOSTS, EXAMINE, READ_RESOURCE_OWNERS, garbage headers and truncated payloads on
//! fresh connections, and connection closes (which release a client's leases). A model
//! tracks what each client should hold from the daemon's replies. Checked at every step:
//! * the daemon answers and never grants an exclusive lease that another client holds,
//!   nor mixes exclusive and shared holders of one resource;
//! * each client's INQUIRE matches the model (count of resources held);
//! * a close releases everything: after all clients close, every resource can be
//!   acquired exclusively again;
//! * the daemon is still running at the end and never logged a panic.
//!
//! Two targets run the same sequences:
//! * a `lockd-daemon` process on a real file under /var/tmp (O_DIRECT), set up with
//!   python3-sanlock's `write_lockspace`/`write_resource`;
//! * the daemon started inside this test process (`lockd_daemon::start_in_process`: no
//!   helper, so nothing is ever killed) over in-memory disks
//!   (`lockd_diskio::memory`), set up through the daemon's own WRITE_LOCKSPACE and
//!   WRITE_RESOURCE. Without storage latency it runs many more steps; a panic in any of
//!   the daemon's threads is caught by a panic hook and fails the run.
//!
//! Seeds: `LOCKD_FUZZ_SEEDS` (comma list, default three fixed seeds); steps per seed:
//! `LOCKD_FUZZ_STEPS` (default 250 on a file, 8 times that in memory).

mod common;

use std::collections::HashMap;
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Once, OnceLock};
use std::time::Duration;

use client_lib::proto::*;
use client_lib::wire::Header;
use client_lib::{Client, DiskLocation, Lockspace, Resource, ResourceHead};
use common::*;
use disk_format::Name;
use lockd_daemon::observability::LogRing;

const RESOURCES: u64 = 4;
const CLIENTS: usize = 4;

/// xorshift64*: deterministic per seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    Ex,
    Sh,
}

struct Bed {
    path: String,
    ls: Name,
}

impl Bed {
    fn resource(&self, r: u64, shared: bool, offset_bogus: bool) -> Resource {
        let off = if offset_bogus { 777 } else { (r + 1) << 20 };
        Resource {
            head: ResourceHead {
                lockspace_name: self.ls,
                name: Name::new(&format!("r{r}")).unwrap(),
                lver: 0,
                data64: 0,
                data32: 0,
                unused: 0,
                flags: if shared { SANLK_RES_SHARED } else { 0 },
                num_disks: 1,
            },
            disks: vec![DiskLocation::new(&self.path, off).unwrap()],
        }
    }

    fn head(&self, r: u64, shared: bool) -> ResourceHead {
        let mut h = self.resource(r, shared, false).head;
        h.num_disks = 0;
        h
    }
}

/// What each client holds, per the daemon's replies.
#[derive(Default)]
struct Model {
    held: Vec<HashMap<u64, Mode>>,
}

impl Model {
    fn holders(&self, r: u64) -> Vec<(usize, Mode)> {
        self.held
            .iter()
            .enumerate()
            .filter_map(|(c, m)| m.get(&r).map(|&mode| (c, mode)))
            .collect()
    }

    fn check(&self, step: usize, what: &str) {
        for r in 0..RESOURCES {
            let h = self.holders(r);
            let ex = h.iter().filter(|(_, m)| *m == Mode::Ex).count();
            assert!(
                ex == 0 || h.len() == 1,
                "step {step} ({what}): resource r{r} held {h:?}: exclusive beside another holder"
            );
        }
    }
}

/// The daemon under test.
enum Target {
    Process(LockdDaemon),
    InProcess {
        running: Option<lockd_daemon::Running>,
        run_dir: PathBuf,
        ring: Arc<LogRing>,
    },
}

/// Panics in the in-process daemon's threads (all named `lockd-…`).
static DAEMON_PANICS: AtomicUsize = AtomicUsize::new(0);

impl Target {
    /// The daemon inside this process, over in-memory disks, with io_timeout 1 and no
    /// watchdog (as the process target's `-w 0 -o 1`).
    fn in_process(s: &Scratch) -> Target {
        static INIT: Once = Once::new();
        static RING: OnceLock<Arc<LogRing>> = OnceLock::new();
        let ring = RING.get_or_init(Default::default).clone();
        INIT.call_once(|| {
            // The daemon's log goes to its LOG_DUMP ring only (shown when a check
            // fails), not to the test's stderr.
            use tracing_subscriber::layer::SubscriberExt;
            use tracing_subscriber::util::SubscriberInitExt;
            let _ = tracing_subscriber::registry()
                .with(tracing_subscriber::EnvFilter::new("info"))
                .with(lockd_daemon::observability::RingLayer::new(ring.clone()))
                .try_init();
            let default_hook = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                let name = std::thread::current().name().unwrap_or("").to_string();
                if name.starts_with("lockd") {
                    DAEMON_PANICS.fetch_add(1, Ordering::SeqCst);
                }
                default_hook(info);
            }));
        });
        let run_dir = s.dir.join("run-inproc");
        let args = lockd_daemon::DaemonArgs {
            foreground: true,
            use_watchdog: Some(0),
            host_name: Some("hostA".into()),
            io_timeout: Some(1),
            run_dir: Some(run_dir.clone()),
            config: Some("/dev/null".into()),
            ..Default::default()
        };
        let cfg = lockd_daemon::Config::resolve(&args, None).expect("config");
        let running = lockd_daemon::start_in_process(cfg, ring.clone()).expect("start daemon");
        Target::InProcess {
            running: Some(running),
            run_dir,
            ring,
        }
    }

    fn run_dir(&self) -> &Path {
        match self {
            Target::Process(d) => &d.run_dir,
            Target::InProcess { run_dir, .. } => run_dir,
        }
    }

    fn log_text(&self) -> String {
        match self {
            Target::Process(d) => d.log_text(),
            Target::InProcess { ring, .. } => String::from_utf8_lossy(&ring.dump()).into_owned(),
        }
    }

    /// Panics if the daemon exited or one of its threads panicked.
    fn check_alive(&mut self, context: &str) {
        let gone = match self {
            Target::Process(d) => d.child.try_wait().unwrap().is_some(),
            Target::InProcess { .. } => DAEMON_PANICS.load(Ordering::SeqCst) != 0,
        };
        assert!(
            !gone,
            "{context}: the daemon exited or panicked; log:\n{}",
            tail(&self.log_text(), 40)
        );
    }

    fn stop(&mut self) {
        match self {
            Target::Process(d) => d.stop(),
            Target::InProcess {
                running, run_dir, ..
            } => {
                if let Some(r) = running.take() {
                    let mut c = Client::connect(run_dir).expect("connect for shutdown");
                    assert_eq!(c.shutdown(true, false).unwrap(), 0, "forced shutdown");
                    r.wait_and_stop();
                }
            }
        }
    }
}

fn new_client(d: &Target) -> Client {
    let mut c = Client::connect(d.run_dir()).expect("connect");
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    c.register().expect("register");
    // REGISTER has no reply: a round trip makes sure it was processed.
    c.inquire(-1).expect("inquire after register");
    c
}

/// Sends bytes that are not a valid request on a fresh connection, then closes it.
fn garbage(d: &Target, rng: &mut Rng) {
    let Ok(mut s) = UnixStream::connect(d.run_dir().join("sanlock.sock")) else {
        return;
    };
    let _ = s.set_write_timeout(Some(Duration::from_secs(2)));
    let kind = rng.below(3);
    let mut bytes = Vec::new();
    if kind == 0 {
        // A valid header announcing a payload that never comes whole.
        let cmd = [
            SM_CMD_ACQUIRE,
            SM_CMD_ADD_LOCKSPACE,
            SM_CMD_RELEASE,
            SM_CMD_CONVERT,
        ][rng.below(4) as usize];
        bytes.extend_from_slice(&Header::request(cmd, 0, 4096, rng.below(5) as u32, 0).encode());
        bytes.extend((0..rng.below(300)).map(|_| rng.next() as u8));
    } else if kind == 1 {
        // A header with an unknown command number and a random length. (Known commands
        // would include SHUTDOWN and REM_LOCKSPACE, which any root client may send.)
        let cmd = 0x100 + rng.below(0x1_0000) as u32;
        let mut h = Header::request(cmd, rng.next() as u32, 0, 0, 0);
        h.length = rng.next() as u32;
        h.data = rng.next() as u32;
        bytes.extend_from_slice(&h.encode());
    } else {
        bytes.extend((0..rng.below(200) + 1).map(|_| rng.next() as u8));
    }
    let _ = s.write_all(&bytes);
}

/// Where the run's storage is.
#[derive(Clone, Copy, Debug)]
enum Storage {
    File,
    Memory,
}

fn run_seed(seed: u64, steps: usize, storage: Storage) {
    let s = Scratch::new(&format!("daemonfuzz-{storage:?}-{seed}"));
    let ls = Name::new("FZ").unwrap();
    let (mut d, path) = match storage {
        Storage::File => {
            require_python_sanlock();
            let img = s.file("disk", RESOURCES + 2);
            init_lockspace("FZ", &img, 0);
            for r in 0..RESOURCES {
                init_resource("FZ", &format!("r{r}"), &img, (r + 1) << 20);
            }
            let d = Target::Process(LockdDaemon::start(&s, "hostA", &[]));
            (d, img.display().to_string())
        }
        Storage::Memory => {
            let path = format!("/lockd-mem/fuzz-{seed}");
            lockd_diskio::memory::install()
                .create(Path::new(&path), (RESOURCES + 2) << 20, 512)
                .expect("memory image");
            let d = Target::in_process(&s);
            let mut admin = Client::connect(d.run_dir()).unwrap();
            let space = Lockspace::new(ls, 1, &path, 0).unwrap();
            assert_eq!(
                admin.write_lockspace(&space, 1).unwrap(),
                0,
                "write_lockspace"
            );
            let bed = Bed {
                path: path.clone(),
                ls,
            };
            for r in 0..RESOURCES {
                let rv = admin.write_resource(&bed.resource(r, false, false), 0, false);
                assert_eq!(rv.unwrap(), 0, "write_resource r{r}");
            }
            (d, path)
        }
    };
    {
        let mut admin = Client::connect(d.run_dir()).unwrap();
        let rv = admin
            .add_lockspace(&Lockspace::new(ls, 1, &path, 0).unwrap(), 1, 0)
            .unwrap();
        assert_eq!(rv, 0, "add_lockspace");
    }
    let bed = Bed { path, ls };
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut clients: Vec<Client> = (0..CLIENTS).map(|_| new_client(&d)).collect();
    let mut model = Model {
        held: vec![HashMap::new(); CLIENTS],
    };
    let mut granted = 0u64;
    for step in 0..steps {
        let c = rng.below(CLIENTS as u64) as usize;
        let op = rng.below(100);
        let what;
        if op < 35 {
            // ACQUIRE one or two resources.
            let n = 1 + rng.below(2);
            let mut rs = Vec::new();
            while rs.len() < n as usize {
                let r = rng.below(RESOURCES);
                if !rs.contains(&r) {
                    rs.push(r);
                }
            }
            let shared = rng.below(3) == 0;
            let bogus = rng.below(20) == 0;
            let mut wire: Vec<Resource> =
                rs.iter().map(|&r| bed.resource(r, shared, bogus)).collect();
            if rng.below(25) == 0 {
                wire[0].head.lockspace_name = Name::new("nosuchls").unwrap();
            }
            let rv = clients[c]
                .acquire(-1, 0, &wire, None)
                .expect("acquire reply");
            what = format!("client {c} acquire {rs:?} shared={shared} bogus={bogus} -> {rv}");
            if rv == 0 {
                // A resource already held shared on this host is shared by name, without
                // disk I/O, as sanlock does: then a wrong disk offset goes unnoticed.
                // Otherwise an acquire at a bogus offset must fail.
                let shared_locally = rs.iter().all(|&r| {
                    model
                        .holders(r)
                        .iter()
                        .any(|&(o, m)| o != c && m == Mode::Sh)
                });
                assert!(
                    !bogus || (shared && shared_locally),
                    "step {step}: {what}: an acquire at a bogus offset succeeded"
                );
                for &r in &rs {
                    let others: Vec<_> = model
                        .holders(r)
                        .into_iter()
                        .filter(|&(o, _)| o != c)
                        .collect();
                    let clash = others.iter().any(|&(_, m)| !shared || m == Mode::Ex);
                    assert!(
                        !clash,
                        "step {step}: {what}: granted while {others:?} hold r{r}"
                    );
                    let mode = if shared { Mode::Sh } else { Mode::Ex };
                    model.held[c].insert(r, mode);
                }
                granted += 1;
            }
        } else if op < 55 {
            // RELEASE one resource (held or not).
            let r = rng.below(RESOURCES);
            let mode = model.held[c].get(&r).copied();
            let rv = clients[c]
                .release(-1, 0, &[bed.head(r, mode == Some(Mode::Sh))])
                .expect("release reply");
            what = format!("client {c} release r{r} (model {mode:?}) -> {rv}");
            match mode {
                Some(_) => {
                    assert_eq!(rv, 0, "step {step}: {what}");
                    model.held[c].remove(&r);
                }
                None => assert_ne!(rv, 0, "step {step}: {what}: released what it did not hold"),
            }
        } else if op < 63 {
            // CONVERT a held resource.
            let Some((&r, &mode)) = model.held[c].iter().next() else {
                continue;
            };
            let to_shared = mode == Mode::Ex;
            let rv = clients[c]
                .convert(-1, 0, &bed.head(r, to_shared))
                .expect("convert reply");
            what = format!("client {c} convert r{r} {mode:?} -> shared={to_shared}: {rv}");
            if rv == 0 {
                let others: Vec<_> = model
                    .holders(r)
                    .into_iter()
                    .filter(|&(o, _)| o != c)
                    .collect();
                assert!(
                    to_shared || others.is_empty(),
                    "step {step}: {what}: converted to exclusive beside {others:?}"
                );
                let new = if to_shared { Mode::Sh } else { Mode::Ex };
                model.held[c].insert(r, new);
            }
        } else if op < 73 {
            // INQUIRE: the daemon's count must match the model.
            let (rv, count, state) = clients[c].inquire(-1).expect("inquire reply");
            what = format!("client {c} inquire -> {rv} {count} {state:?}");
            assert_eq!(rv, 0, "step {step}: {what}");
            assert_eq!(
                count as usize,
                model.held[c].len(),
                "step {step}: {what}: model holds {:?}",
                model.held[c]
            );
        } else if op < 80 {
            // Close and reconnect: the daemon releases everything the client held.
            what = format!("client {c} closes holding {:?}", model.held[c]);
            clients[c] = new_client(&d);
            model.held[c].clear();
            // The release on close runs in the background; wait until the resources
            // are free for others (the model says nobody else holds them).
            std::thread::sleep(Duration::from_millis(50));
        } else if op < 85 {
            let admin = Client::connect(d.run_dir()).unwrap();
            let recs = admin.status(1).expect("status reply");
            what = format!("status -> {} records", recs.len());
            assert!(!recs.is_empty(), "step {step}: {what}");
        } else if op < 89 {
            let mut admin = Client::connect(d.run_dir()).unwrap();
            match admin.get_hosts(ls, 0) {
                Ok(hosts) => what = format!("get_hosts -> {}", hosts.len()),
                // Before the first lockspace read the daemon answers -EAGAIN, as sanlock.
                Err(client_lib::ClientError::Result { rv }) if rv == -libc::EAGAIN => {
                    what = "get_hosts -> -EAGAIN".to_string()
                }
                Err(e) => panic!("step {step}: get_hosts: {e}"),
            }
        } else if op < 92 {
            let r = rng.below(RESOURCES);
            let mut admin = Client::connect(d.run_dir()).unwrap();
            let owners = admin.read_resource_owners(&bed.resource(r, false, false));
            what = format!("read_resource_owners r{r} -> {}", owners.is_ok());
        } else {
            garbage(&d, &mut rng);
            what = "garbage".to_string();
        }
        if std::env::var_os("LOCKD_FUZZ_TRACE").is_some() {
            eprintln!("seed {seed} step {step}: {what}");
        }
        model.check(step, &what);
        d.check_alive(&format!("seed {seed} step {step} ({what})"));
    }
    // Every client closes: every resource must become free again.
    drop(clients);
    let mut last = Client::connect(d.run_dir()).unwrap();
    last.register().unwrap();
    let all: Vec<Resource> = (0..RESOURCES)
        .map(|r| bed.resource(r, false, false))
        .collect();
    let freed = wait_for(20, || {
        last.acquire(-1, 0, &all, None)
            .map(|rv| rv == 0)
            .unwrap_or(false)
    });
    assert!(
        freed,
        "seed {seed}: leases of closed clients were not released"
    );
    let log = d.log_text();
    assert!(
        !log.contains("panicked"),
        "seed {seed}: the daemon logged a panic:\n{}",
        tail(&log, 40)
    );
    d.check_alive(&format!("seed {seed} at the end"));
    assert!(
        granted > 0,
        "seed {seed}: no acquire was ever granted: the run tested nothing"
    );
    eprintln!("{storage:?} seed {seed}: {steps} steps, {granted} acquires granted");
    // The registered clients are this test process: release before stopping the daemon,
    // whose forced shutdown SIGKILLs holders.
    let heads: Vec<ResourceHead> = (0..RESOURCES).map(|r| bed.head(r, false)).collect();
    assert_eq!(
        last.release(-1, 0, &heads).unwrap(),
        0,
        "seed {seed}: final release"
    );
    drop(last);
    d.stop();
}

fn seeds_and_steps(default_steps: usize) -> (Vec<u64>, usize) {
    let seeds: Vec<u64> = std::env::var("LOCKD_FUZZ_SEEDS")
        .ok()
        .map(|v| v.split(',').filter_map(|s| s.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1, 2, 3]);
    let steps = std::env::var("LOCKD_FUZZ_STEPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default_steps);
    (seeds, steps)
}

#[test]
fn random_command_sequences_from_several_clients() {
    let (seeds, steps) = seeds_and_steps(250);
    for seed in seeds {
        run_seed(seed, steps, Storage::File);
    }
}

#[test]
fn random_command_sequences_over_memory_disks_in_process() {
    let (seeds, steps) = seeds_and_steps(2000);
    for seed in seeds {
        run_seed(seed, steps, Storage::Memory);
    }
}
