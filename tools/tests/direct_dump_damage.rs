//! `lockd direct dump` lists every host record that fails its checks, also one that looks
//! empty (owner 0, timestamp 0): a bad checksum or version must not read as "no host has
//! joined". Runs on a sparse file.

use std::process::Output;

use lockd_system_tests::{poke, run, run_ok, scratch_dir, sparse_file};

const LOCKD: &str = env!("CARGO_BIN_EXE_lockd");
const MIB: u64 = 1 << 20;

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn empty_looking_damaged_host_records_are_listed() {
    let dir = scratch_dir();
    let img = sparse_file(dir.path(), "img", 2 * MIB);
    let p = img.display().to_string();
    run_ok(LOCKD, ["direct", "init", "-s", &format!("LS:0:{p}:0")]);
    let fresh = run_ok(LOCKD, ["direct", "dump", &p]);
    assert!(fresh.contains("no host has joined"), "{fresh}");

    // Host 3: one byte of the host-name field changed, so the checksum fails; the
    // record keeps owner 0 and timestamp 0.
    poke(&img, 2 * 512 + 104, b"x");
    // Host 5: major version 4 instead of 3 (checked before the checksum).
    poke(&img, 4 * 512 + 4, &0x0004_0004u32.to_le_bytes());

    let out = run(LOCKD, ["direct", "dump", &p]);
    let table = stdout(&out);
    // Damage makes the command fail (docs/on-disk-format.md), after printing the table.
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("2 damaged record(s)") && err.contains("host_id 3"),
        "{err}"
    );
    assert!(!table.contains("no host has joined"), "{table}");
    let damaged: Vec<&str> = table.lines().filter(|l| l.contains("(damaged)")).collect();
    assert_eq!(damaged.len(), 2, "{table}");
    assert!(damaged[0].trim_start().starts_with("3 "), "{table}");
    assert!(
        damaged[0].contains("ERROR") && damaged[0].contains("checksum"),
        "{table}"
    );
    assert!(damaged[1].trim_start().starts_with("5 "), "{table}");
    assert!(
        damaged[1].contains("ERROR") && damaged[1].contains("version"),
        "{table}"
    );

    let out = run(LOCKD, ["direct", "dump", &p, "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("dump --json");
    let hosts = v[0]["hosts"].as_array().expect("hosts");
    let ids: Vec<u64> = hosts
        .iter()
        .map(|h| h["host_id"].as_u64().unwrap())
        .collect();
    assert_eq!(ids, [3, 5], "{v}");
    for h in hosts {
        assert_eq!(h["timestamp"], 0, "{h}");
        assert!(h["error"].as_str().is_some_and(|e| !e.is_empty()), "{h}");
    }
}
