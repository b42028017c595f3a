//! The daemon crate's modules import each other without a cycle (issue 23: "a newcomer can
//! read one file"): every module can be read knowing only the modules below it.
//!
//! The graph is read from the source (`lockd_system_tests::module_graph`): an edge
//! `a → b` for each `crate::b` in `src/a.rs` (or `src/a/…`), outside comments and
//! `#[cfg(test)]` items (tests may reach anywhere). The test prints the modules in layers
//! (each imports only from layers below it) and fails naming every cycle.

use std::path::Path;

use lockd_system_tests::module_graph::{
    import_edges, layers, long_functions, module_sources, strip_comments, strip_test_items,
};

#[test]
fn daemon_modules_import_each_other_without_a_cycle() {
    let src_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    // lib.rs is the crate root that declares every module, main.rs the binary: neither is
    // a module others import.
    let edges = import_edges(&src_dir, &["lib", "main"]);
    let layers = layers(&edges);
    assert!(layers.len() > 2, "the graph was read: {layers:?}");
    assert!(
        edges["state"].len() >= 3,
        "state.rs imports the tables, lockspaces and helper: {:?}",
        edges["state"]
    );
}

/// Writes to the client and resource tables that bypass `lockd_core::Tables`'s
/// transitions: a mutable borrow of a slot or a resource, or an insert or removal.
const DIRECT_TABLE_WRITES: [&str; 8] = [
    "slots.get_mut(",
    "slots.values_mut(",
    "slots.iter_mut(",
    "slots.insert(",
    "slots.remove(",
    "resources.get_mut(",
    "resources.insert(",
    "resources.remove(",
];

/// The one place allowed to write the tables directly: the debug-build hook that breaks
/// them on purpose (`LOCKD_DEBUG_PANIC_IN_JOB=break-tables`, to test that a broken
/// invariant stops the daemon).
const ALLOWED_DIRECT_WRITES: [(&str, &str); 1] = [("reactor", "resources.insert(")];

/// A module's code outside comments and tests, without white space: a call split over
/// lines by rustfmt is still one match.
fn compact_code(text: &str) -> String {
    strip_test_items(&strip_comments(text))
        .split_whitespace()
        .collect()
}

/// Each `pattern` found in the daemon's modules (except where `allowed(module, pattern)`),
/// as `module.rs: N × pattern` lines.
fn occurrences(patterns: &[&str], allowed: impl Fn(&str, &str) -> bool) -> Vec<String> {
    let src_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut found = Vec::new();
    for (module, text) in module_sources(&src_dir) {
        let code = compact_code(&text);
        for pattern in patterns {
            let n = code.matches(pattern).count();
            if n > 0 && !allowed(&module, pattern) {
                found.push(format!("{module}.rs: {n} × {pattern}"));
            }
        }
    }
    found
}

/// Issue 23: one owner of the lease state. Outside its tests, the daemon changes the
/// client and resource tables only by stepping the core, whose transitions keep the
/// invariants `Tables::check` checks. The core's guard lends the tables for reading
/// only (`CoreGuard: Deref`), but `Core`'s fields are public (a condvar wait takes the
/// `MutexGuard` back), so a write through them is still found by text.
#[test]
fn the_daemon_writes_the_tables_only_through_the_cores_transitions() {
    let found = occurrences(&DIRECT_TABLE_WRITES, |module, pattern| {
        ALLOWED_DIRECT_WRITES.contains(&(module, pattern))
    });
    assert!(
        found.is_empty(),
        "direct writes to the lease tables (add an input to lockd_core::Core::step):\n{}",
        found.join("\n")
    );
}

/// Changes the daemon must not make itself: they run only inside `Core::step`, fed by
/// the shell's inputs. `Tables`' transitions (`start_acquire`, `start_command`,
/// `set_killpath`, `register_client`, `killpath_ended` …) need no pattern here: they are
/// `pub(crate)` in lockd-core, so the compiler keeps the daemon off them, and the shell's
/// own changes are inputs too (`NoteCommand`, `SetRestrict`, `SetKillpath`,
/// `StartCommand`, `FinishCommand`, `AddPidClient`, `DropFailedPidClient`, `ListSpace`,
/// `SetLvb`). What the compiler cannot see is listed: the client table's own `add`
/// (public: the daemon's unit tests build slots with it; the shell's `Connected`), the
/// examine decision, and every write of a lockspace's status, the watches and fencing.
const CORE_STEP_ONLY: [&str; 22] = [
    "clients.add(",
    "add_in_place_of_own(",
    "examined_lease(",
    // A lockspace's removal and end (REM_LOCKSPACE, a forced shutdown, its thread's
    // end): `CoreRequest::RemLockspace`, `Input::Shutdown`, `Input::LockspaceEnded`.
    ".kill_now=",
    "phase=Phase::Removing",
    ".gone=",
    // A join's end and SET_CONFIG: `Input::JoinEnded`, `Input::SetConfig`.
    ".add_result=",
    ".used_by_orphans=",
    ".external_used=",
    // Every other change of a lockspace's status (the thread's reports: `JoinStarted`,
    // `RenewalStarted`, `RenewalOk`/`RenewalFailed`, `DeltaReleasing`; SET_EVENT and a
    // REQUEST's bit: `CoreRequest::SetEvent`, `Input::RequestWritten`): no mutable
    // access at all.
    "st_mut(",
    "space_st_mut(",
    "renewal_ok(",
    "renewal_failed(",
    ".outgoing.set_",
    // The watch registry and ADD_LOCKSPACE's admission (`CoreRequest::Watch`,
    // `Input::WatchDropped`, `Input::ListSpace`'s refusals are the core's).
    "watches.register(",
    "watches.end(",
    "add_space(",
    // The host monitor and fencing's state (`Input::HostsRead`, `Input::FenceRegistered`,
    // `FenceLook`, `FenceKeysRead`, `PeerFenceDone`): the shell reads them only (the
    // core lends it no `&mut HostMonitor`, so `observe` cannot be called from it).
    "mark_fenced(",
    ".registered(",
    ".look(",
    "keys_read(",
    "peer_done(",
];

/// Issue 23: admission, REGISTER, a client's end, ACQUIRE (and for a pid), RELEASE,
/// CONVERT, INQUIRE, every lease release on disk, the helper's status, an examined
/// request, a lockspace's join result, SET_CONFIG, removal and end, every change of a
/// lockspace's status and host monitor, fencing's state, SET_EVENT, REQUEST's bit and
/// the watches are driven by
/// `Core::step`.
#[test]
fn the_daemon_runs_these_transitions_only_through_core_step() {
    let found = occurrences(&CORE_STEP_ONLY, |_, _| false);
    assert!(
        found.is_empty(),
        "transitions called outside Core::step (feed the core an input instead):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_write_check_sees_a_direct_write_and_not_one_in_a_test_or_a_comment() {
    let src = "fn f(t: &mut T) { t.clients.slots.get_mut(&1); t.resources\n   .remove(&k); }\n\
               // t.resources.get_mut(&k)\n\
               #[cfg(test)]\nmod tests { fn g() { t.resources.insert(k, v); } }\n";
    let code = compact_code(src);
    let hits: Vec<&str> = DIRECT_TABLE_WRITES
        .into_iter()
        .filter(|p| code.contains(p))
        .collect();
    assert_eq!(hits, vec!["slots.get_mut(", "resources.remove("]);
}

/// Readings of lease time (issue 23: the shell reads the clock in one place, `clock.rs`).
/// A call or a reference to diskio's clock functions (`clear.then(lockd_diskio::monotime)`),
/// a call of one imported by name, or a lease-core clock made here.
const CLOCK_READINGS: [&str; 4] = [
    "diskio::monotime",
    "monotime(",
    "monotime_ms(",
    "SystemClock::new(",
];

#[test]
fn the_daemon_reads_lease_time_only_in_its_clock_module() {
    let found = occurrences(&CLOCK_READINGS, |module, _| module == "clock");
    assert!(
        found.is_empty(),
        "lease time read outside clock.rs (use crate::clock):\n{}",
        found.join("\n")
    );
}

/// Issue 40: no function of the daemon's, outside tests, is over 100 lines (a function
/// says one thing; the long ones were split into named steps).
#[test]
fn no_daemon_function_is_over_100_lines() {
    let src_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut long = Vec::new();
    let mut over_40 = 0;
    for (module, text) in module_sources(&src_dir) {
        let code = strip_test_items(&strip_comments(&text));
        over_40 += long_functions(&code, 40).len();
        for (name, n) in long_functions(&code, 100) {
            long.push(format!("{module}::{name}: {n} lines"));
        }
    }
    assert!(
        over_40 > 5,
        "the functions were read ({over_40} over 40 lines)"
    );
    assert!(long.is_empty(), "functions over 100 lines: {long:#?}");
}
