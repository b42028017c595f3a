//! Metrics end to end: a real lockd daemon on a loop device joins a lockspace, grants,
//! releases and refuses leases; `lockd metrics` must pass `promtool check metrics`, and a
//! real Prometheus server (Debian's `prometheus`) scraping the daemon's HTTP listener
//! every second must return the numbers the daemon reports. The Grafana dashboard in
//! packaging/ must be JSON whose every query names a metric the daemon exports.
//!
//! Needs root (loop device) and the Debian packages `prometheus` (promtool and the
//! server) and `mount` (losetup). Prometheus is stopped by its PID.

mod common;

use std::collections::BTreeSet;
use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use client_lib::{Client, DiskLocation, Lockspace, Resource, ResourceHead};
use common::*;
use disk_format::Name;

/// The `lockd` CLI from this workspace, built if needed (it lives in the tools crate).
/// Built as scripts/test-all.sh builds before the tests (`--workspace --bins --examples`,
/// whose features are those of `cargo test`: examples unify the dev-dependencies'), so in
/// CI this builds nothing; another package set resolves other features and rebuilds.
fn lockd_binary() -> PathBuf {
    let bin = Path::new(DAEMON).with_file_name("lockd");
    let st = Command::new(env!("CARGO"))
        .args(["build", "--workspace", "--bins", "--examples"])
        .status()
        .expect("run cargo to build lockd");
    assert!(st.success(), "building lockd failed");
    assert!(bin.exists(), "lockd not found at {}", bin.display());
    bin
}

/// A free TCP port on 127.0.0.1 (bound, then released for the daemon to take).
fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    l.local_addr().expect("local addr").port()
}

/// One HTTP/1.0 GET; returns (status line, body).
fn http_get(port: u16, path: &str) -> Option<(String, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).ok()?;
    let text = String::from_utf8_lossy(&buf).into_owned();
    let (head, body) = text.split_once("\r\n\r\n")?;
    Some((head.lines().next()?.to_string(), body.to_string()))
}

/// A Prometheus server in a scratch dir, stopped by PID on drop.
struct Prometheus {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Prometheus {
    fn start(dir: &Path, target_port: u16) -> Prometheus {
        require_tool("prometheus", "prometheus");
        let cfg = dir.join("prometheus.yml");
        std::fs::write(
            &cfg,
            format!(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
                 scrape_configs:\n  - job_name: lockd\n    scrape_interval: 1s\n\
                 \x20   static_configs:\n      - targets: ['127.0.0.1:{target_port}']\n"
            ),
        )
        .expect("write prometheus.yml");
        let port = free_port();
        let log = dir.join("prometheus.log");
        let logf = std::fs::File::create(&log).expect("prometheus log");
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", cfg.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("tsdb").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(logf.try_clone().expect("dup log"))
            .stderr(logf)
            .spawn()
            .expect("start prometheus");
        Prometheus { child, port, log }
    }

    /// Runs an instant query; returns the `data.result` array.
    fn query(&self, q: &str) -> Option<Vec<serde_json::Value>> {
        let enc: String = q
            .bytes()
            .map(|b| match b {
                b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' => (b as char).to_string(),
                _ => format!("%{b:02X}"),
            })
            .collect();
        let (status, body) = http_get(self.port, &format!("/api/v1/query?query={enc}"))?;
        if !status.contains("200") {
            return None;
        }
        let v: serde_json::Value = serde_json::from_str(&body).ok()?;
        if v["status"] != "success" {
            return None;
        }
        v["data"]["result"].as_array().cloned()
    }

    /// Polls `q` until some sample satisfies `ok` (value as text); returns that value.
    fn wait_value(&self, q: &str, secs: u64, ok: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(secs);
        let mut last = None;
        while Instant::now() < deadline {
            if let Some(r) = self.query(q) {
                for s in &r {
                    if let Some(v) = s["value"][1].as_str() {
                        if ok(v) {
                            return v.to_string();
                        }
                    }
                }
                last = Some(r);
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        panic!(
            "prometheus query {q:?}: no matching value within {secs} s (last result {last:?}); \
             prometheus log:\n{}",
            tail(&std::fs::read_to_string(&self.log).unwrap_or_default(), 30)
        );
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The sample value of `name{labels…}` in an exposition (labels given as `k="v"` parts
/// that must all be present).
fn sample(text: &str, name: &str, labels: &[&str]) -> Option<f64> {
    text.lines().find_map(|l| {
        if l.starts_with('#') {
            return None;
        }
        let (series, value) = l.rsplit_once(' ')?;
        let base = series.split('{').next()?;
        if base != name || !labels.iter().all(|lb| series.contains(lb)) {
            return None;
        }
        value.parse().ok()
    })
}

fn resource(ls: Name, name: &str, path: &str) -> Resource {
    Resource {
        head: ResourceHead {
            lockspace_name: ls,
            name: Name::new(name).unwrap(),
            lver: 0,
            data64: 0,
            data32: 0,
            unused: 0,
            flags: 0,
            num_disks: 1,
        },
        disks: vec![DiskLocation::new(path, 1 << 20).unwrap()],
    }
}

#[test]
fn metrics_pass_promtool_and_a_real_prometheus_scrape() {
    require_tool("promtool", "prometheus");
    require_tool("prometheus", "prometheus");
    let lockd = lockd_binary();
    let s = Scratch::new("metrics");
    let file = s.file("disk", 8);
    let lo = Loop::attach(&file);
    let dev = lo.dev.display().to_string();
    let mport = free_port();
    let cfg = s.dir.join("lockd.toml");
    std::fs::write(&cfg, format!("metrics_listen = \"127.0.0.1:{mport}\"\n")).unwrap();
    let cfg_arg = cfg.display().to_string();
    let d = LockdDaemon::start_args(&s, "mhost", &["-c", &cfg_arg], &[]);

    let ls_name = Name::new("mls").unwrap();
    let ls = Lockspace::new(ls_name, 1, &dev, 0).unwrap();
    let res = resource(ls_name, "r1", &dev);
    let mut c = Client::connect(&d.run_dir).unwrap();
    assert_eq!(c.write_lockspace(&ls, 1).unwrap(), 0);
    assert_eq!(c.write_resource(&res, 0, false).unwrap(), 0);
    assert_eq!(c.add_lockspace(&ls, 1, 0).unwrap(), 0);

    let mut reg = Client::connect(&d.run_dir).unwrap();
    reg.register().unwrap();
    let one = std::slice::from_ref(&res);
    let heads = std::slice::from_ref(&res.head);
    assert_eq!(reg.acquire(-1, 0, one, None).unwrap(), 0);
    assert_eq!(reg.release(-1, 0, heads).unwrap(), 0);
    assert_eq!(reg.acquire(-1, 0, one, None).unwrap(), 0);
    // The failing acquire: held already by this client.
    assert_eq!(reg.acquire(-1, 0, one, None).unwrap(), -libc::EEXIST);
    // Let a few renewals (every 2 s at io_timeout 1) land in the histogram.
    std::thread::sleep(Duration::from_secs(5));

    let out = Command::new(&lockd)
        .args(["metrics", "--run-dir"])
        .arg(&d.run_dir)
        .output()
        .expect("run lockd metrics");
    assert!(
        out.status.success(),
        "lockd metrics failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("metrics are UTF-8");
    println!("lockd metrics:\n{text}");
    let path = s.dir.join("metrics.txt");
    std::fs::write(&path, &text).unwrap();
    let check = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::fs::File::open(&path).unwrap())
        .output()
        .expect("run promtool");
    println!(
        "promtool check metrics: {} {}{}",
        check.status,
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
    assert!(
        check.status.success()
            && check.stdout.is_empty()
            && String::from_utf8_lossy(&check.stderr).trim().is_empty(),
        "promtool check metrics reported problems"
    );

    // The numbers the daemon reports for what this test did.
    let ls_l = "lockspace=\"mls\"";
    assert_eq!(sample(&text, "lockd_leases_held", &[ls_l]), Some(1.0));
    assert_eq!(
        sample(&text, "lockd_acquires_total", &["result=\"0\""]),
        Some(2.0)
    );
    assert_eq!(
        sample(&text, "lockd_releases_total", &["result=\"0\""]),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &text,
            "lockd_failures_total",
            &["op=\"acquire\"", "result=\"-17\""]
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(&text, "lockd_acquires_total", &["result=\"-17\""]),
        Some(1.0)
    );
    assert_eq!(
        sample(&text, "lockd_lockspace_hosts", &[ls_l, "state=\"live\""]),
        Some(1.0)
    );
    assert_eq!(sample(&text, "lockd_lockspace_joined", &[ls_l]), Some(1.0));
    let expiry = sample(&text, "lockd_lockspace_expiry_seconds", &[ls_l]).unwrap();
    assert!((1.0..=8.0).contains(&expiry), "expiry {expiry} s");
    let renewals = sample(
        &text,
        "lockd_lockspace_renewal_duration_seconds_count",
        &[ls_l],
    )
    .unwrap();
    assert!(renewals >= 2.0, "renewals recorded: {renewals}");
    let reads = sample(
        &text,
        "lockd_disk_io_duration_seconds_count",
        &["op=\"read\""],
    )
    .unwrap();
    assert!(reads >= renewals, "disk reads {reads}");
    // This connection plus the registered one (the metrics connection itself counts).
    let clients = sample(&text, "lockd_clients_connected", &[]).unwrap();
    assert!(clients >= 2.0, "clients {clients}");
    // The metrics command itself runs on a pool worker, so at least one exists; no
    // command waits for one; nothing was acquired for another pid.
    let workers = sample(&text, "lockd_worker_threads", &[]).unwrap();
    assert!((1.0..=64.0).contains(&workers), "workers {workers}");
    let idle = sample(&text, "lockd_worker_threads_idle", &[]).unwrap();
    assert!(idle <= workers, "idle {idle} of {workers}");
    assert_eq!(sample(&text, "lockd_worker_jobs_queued", &[]), Some(0.0));
    assert_eq!(
        sample(&text, "lockd_worker_jobs_over_share", &[]),
        Some(0.0)
    );
    assert_eq!(sample(&text, "lockd_pid_watches", &[]), Some(0.0));
    assert_eq!(
        sample(&text, "lockd_kill_escalations_total", &["step=\"sigkill\""]),
        Some(0.0)
    );

    // The HTTP listener serves the same exposition; other paths and methods are refused.
    let (status, body) = http_get(mport, "/metrics").expect("GET /metrics");
    assert!(status.contains("200"), "{status}");
    assert_eq!(sample(&body, "lockd_leases_held", &[ls_l]), Some(1.0));
    let (status, _) = http_get(mport, "/nope").expect("GET /nope");
    assert!(status.contains("404"), "{status}");

    // A real Prometheus scrapes it every second; its API returns what the daemon holds.
    let prom = Prometheus::start(&s.dir, mport);
    let up = prom.wait_value("up{job=\"lockd\"}", 60, |v| v == "1");
    println!("prometheus up{{job=\"lockd\"}} = {up}");
    let held = prom.wait_value("lockd_leases_held{lockspace=\"mls\"}", 30, |v| v == "1");
    println!("prometheus lockd_leases_held{{lockspace=\"mls\"}} = {held}");
    let failed = prom.wait_value(
        "lockd_failures_total{op=\"acquire\",result=\"-17\"}",
        30,
        |v| v == "1",
    );
    println!("prometheus lockd_failures_total{{op=acquire,result=-17}} = {failed}");
    // A change is seen at the next scrape: release the lease, the gauge drops to 0.
    assert_eq!(reg.release(-1, 0, heads).unwrap(), 0);
    let held = prom.wait_value("lockd_leases_held{lockspace=\"mls\"}", 30, |v| v == "0");
    println!("after release: prometheus lockd_leases_held = {held}");
    drop(prom);
    assert_eq!(c.rem_lockspace(&ls, 0).unwrap(), 0);
}

/// Every family name the daemon exports (histograms with their series suffixes), from an
/// idle daemon's exposition (every family is written, samples or not).
fn exported_names() -> BTreeSet<String> {
    let args = lockd_daemon::DaemonArgs {
        config: Some(PathBuf::from("/dev/null")),
        host_name: Some("h".into()),
        ..Default::default()
    };
    let cfg = lockd_daemon::Config::resolve(&args, None).unwrap();
    let ring = std::sync::Arc::new(lockd_daemon::observability::LogRing::default());
    let d = lockd_daemon::state::Daemon::new(cfg, None, ring).expect("daemon state");
    let text = lockd_daemon::exporter::render(&d);
    let mut names = BTreeSet::new();
    for l in text.lines() {
        if let Some(rest) = l.strip_prefix("# TYPE ") {
            let mut f = rest.split(' ');
            let name = f.next().unwrap().to_string();
            if f.next() == Some("histogram") {
                for suffix in ["_bucket", "_sum", "_count"] {
                    names.insert(format!("{name}{suffix}"));
                }
            }
            names.insert(name);
        }
    }
    names
}

#[test]
fn grafana_dashboard_queries_exported_metrics() {
    let exported = exported_names();
    assert!(exported.contains("lockd_leases_held"), "{exported:?}");
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../packaging/grafana/lockd-dashboard.json");
    let text = std::fs::read_to_string(&path).expect("read the dashboard");
    let v: serde_json::Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    assert!(v["title"].is_string(), "dashboard has a title");
    let panels = v["panels"].as_array().expect("panels array");
    assert!(panels.len() >= 6, "{} panels", panels.len());
    let mut used = BTreeSet::new();
    for p in panels {
        let title = p["title"].as_str().unwrap_or("?");
        if p["type"] == "row" {
            continue;
        }
        let targets = p["targets"]
            .as_array()
            .unwrap_or_else(|| panic!("{title}: targets"));
        assert!(!targets.is_empty(), "panel {title} has no query");
        for t in targets {
            let expr = t["expr"]
                .as_str()
                .unwrap_or_else(|| panic!("panel {title}: target without expr"));
            let names = metric_names(expr);
            assert!(
                !names.is_empty(),
                "panel {title}: {expr:?} names no lockd metric"
            );
            for n in names {
                assert!(
                    exported.contains(&n),
                    "panel {title}: {n} is not exported by the daemon"
                );
                used.insert(n);
            }
        }
    }
    println!("dashboard queries: {used:?}");
}

/// The `lockd_*` identifiers of a PromQL expression.
fn metric_names(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut in_string = false;
    for c in expr.chars().chain(std::iter::once(' ')) {
        if c == '"' {
            in_string = !in_string;
            cur.clear();
            continue;
        }
        if in_string {
            continue;
        }
        if c.is_ascii_alphanumeric() || c == '_' || c == ':' {
            cur.push(c);
        } else {
            if cur.starts_with("lockd_") {
                out.push(std::mem::take(&mut cur));
            }
            cur.clear();
        }
    }
    out
}

/// A connection to the metrics port that holds one of its connection threads, saying
/// nothing. A scrape's thread gives its slot back just after closing the connection (the
/// scraper has its whole answer by then), so on a loaded machine a connection opened right
/// after a scrape can still find the bound full and be answered 503 and closed (seen in
/// CI: the fourth idle peer was refused, and the scrape meant to be refused was served).
/// Such a connection is opened again. A refused one is answered within the daemon's 200 ms
/// read of its request, so a connection still silent after 500 ms holds a thread.
fn idle_connection(port: u16) -> TcpStream {
    for _ in 0..20 {
        let s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        s.set_read_timeout(Some(Duration::from_millis(500)))
            .expect("set a read timeout");
        let mut buf = [0u8; 64];
        match (&s).read(&mut buf) {
            // Nothing said and still open: its thread waits for a request.
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => return s,
            _ => std::thread::sleep(Duration::from_millis(100)),
        }
    }
    panic!("no connection to port {port} was held open by the daemon");
}

/// Issue 21 item 7: the HTTP listener served one connection at a time, so one TCP client
/// that connected and sent nothing delayed every scrape by the 5 s I/O timeout. Each
/// connection now has a thread of its own, at most 4 at once: a scrape beside idle
/// clients is answered at once, a fifth connection while four idle ones are open gets a
/// quick 503 (the bound), and scrapes are answered again once the idle ones go.
#[test]
fn idle_http_clients_do_not_delay_scrapes() {
    let s = Scratch::new("metrics-idle");
    let mport = free_port();
    let cfg = s.dir.join("lockd.toml");
    std::fs::write(&cfg, format!("metrics_listen = \"127.0.0.1:{mport}\"\n")).unwrap();
    let cfg_arg = cfg.display().to_string();
    let mut d = LockdDaemon::start_args(&s, "mhost", &["-c", &cfg_arg], &[]);
    assert!(
        wait_for(10, || http_get(mport, "/metrics").is_some()),
        "the metrics listener never answered"
    );

    let idle = idle_connection(mport);
    let t0 = Instant::now();
    let (status, body) = http_get(mport, "/metrics").expect("scrape beside an idle client");
    let took = t0.elapsed();
    println!("scrape beside one idle client: {status} in {took:?}");
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(body.contains("lockd_worker_threads"), "{body}");
    assert!(took < Duration::from_secs(1), "the scrape waited {took:?}");

    // Four idle connections take every connection thread: the next is refused at once.
    let more: Vec<TcpStream> = (0..3).map(|_| idle_connection(mport)).collect();
    let t0 = Instant::now();
    let (status, _) = http_get(mport, "/metrics").expect("an answer over the bound");
    let took = t0.elapsed();
    println!("scrape beside four idle clients: {status} in {took:?}");
    assert_eq!(
        status,
        "HTTP/1.1 503 Service Unavailable",
        "{}",
        tail(&d.log_text(), 30)
    );
    assert!(took < Duration::from_secs(1), "the refusal took {took:?}");

    drop(idle);
    drop(more);
    assert!(
        wait_for(10, || http_get(mport, "/metrics")
            .is_some_and(|(st, _)| st == "HTTP/1.1 200 OK")),
        "scrapes are answered again once the idle clients left"
    );
    d.stop();
}
