//! Every daemon-facing function of the real python3-sanlock module, called in one fixed
//! sequence (daemon/tests/py/compare.py) against a real sanlock 3.8 daemon and against
//! lockd, each on a fresh file of its own. The test prints the table
//! `function | case | sanlock | lockd` and requires every row to match.
//! daemon/tests/py/compare-in-chroot.sh runs the same script with Debian 13's
//! python3-sanlock 3.9.5 against a sanlock 3.9.5 daemon (scripts/test-trixie.sh).

mod common;

use std::process::Command;

use common::*;

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/py/compare.py");

/// The functions of python3-sanlock 3.8 that send a request to the daemon: the script
/// must call each at least once.
const DAEMON_FUNCTIONS: [&str; 23] = [
    "acquire",
    "add_lockspace",
    "end_event",
    "get_alignment",
    "get_event",
    "get_hosts",
    "get_lockspaces",
    "get_lvb",
    "inq_lockspace",
    "inquire",
    "killpath",
    "read_lockspace",
    "read_resource",
    "read_resource_owners",
    "reg_event",
    "register",
    "release",
    "rem_lockspace",
    "request",
    "set_event",
    "set_lvb",
    "write_lockspace",
    "write_resource",
];

#[derive(Debug, Clone, PartialEq)]
struct Row {
    function: String,
    case: String,
    result: String,
}

fn run_script(run_dir: &std::path::Path, disk: &std::path::Path, kind: &str) -> Vec<Row> {
    let out = run(Command::new(PYTHON)
        .arg(SCRIPT)
        .arg(disk)
        .env("SANLOCK_RUN_DIR", run_dir));
    assert!(
        out.status.success(),
        "compare.py against {kind} failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let v: serde_json::Value =
                serde_json::from_str(l).unwrap_or_else(|e| panic!("bad line {l:?}: {e}"));
            Row {
                function: v["function"].as_str().unwrap_or_default().to_string(),
                case: v["case"].as_str().unwrap_or_default().to_string(),
                result: v["result"].to_string(),
            }
        })
        .collect()
}

fn table(a: &[Row], b: &[Row]) -> String {
    let mut t = format!(
        "{:<22} | {:<34} | {:<40} | {:<40} | same\n",
        "function", "case", "sanlock", "lockd"
    );
    for (x, y) in a.iter().zip(b) {
        let same = if x == y { "yes" } else { "NO" };
        t.push_str(&format!(
            "{:<22} | {:<34} | {:<40} | {:<40} | {same}\n",
            x.function, x.case, x.result, y.result
        ));
    }
    t
}

#[test]
fn every_python_sanlock_function_gives_the_same_result_on_lockd() {
    require_python_sanlock();
    let s = Scratch::new("pycompare");
    let sl = lockd_system_tests::SanlockDaemon::start("cmp-sanlock");
    let sanlock_rows = run_script(sl.run_dir.path(), &s.file("sanlock-disk", 8), "sanlock");
    drop(sl);
    let lk = LockdDaemon::start(&s, "cmp-lockd", &[]);
    let lockd_rows = run_script(&lk.run_dir, &s.file("lockd-disk", 8), "lockd");
    let t = table(&sanlock_rows, &lockd_rows);
    println!("{t}");
    for f in DAEMON_FUNCTIONS {
        assert!(
            sanlock_rows.iter().any(|r| r.function == f),
            "compare.py never calls {f}"
        );
    }
    assert_eq!(
        sanlock_rows.len(),
        lockd_rows.len(),
        "different number of calls\n{t}"
    );
    assert_eq!(
        sanlock_rows,
        lockd_rows,
        "rows differ (marked NO):\n{t}\nlockd log:\n{}",
        tail(&lk.log_text(), 30)
    );
}
