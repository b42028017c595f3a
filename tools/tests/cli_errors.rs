//! Issue 21 item 7: the CLI printed the OS error twice ("cannot connect to …: No such
//! file or directory (os error 2): No such file or directory (os error 2)"). Each
//! error line holds each cause once.

use std::process::Command;

const LOCKD: &str = env!("CARGO_BIN_EXE_lockd");

fn stderr_of(args: &[&str]) -> String {
    let out = Command::new(LOCKD).args(args).output().expect("run lockd");
    assert!(!out.status.success(), "lockd {args:?} succeeded");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn os_errors_are_printed_once() {
    let dir = tempfile::tempdir().unwrap();
    let run_dir = dir.path().join("no-such-run-dir");
    let run_dir = run_dir.to_str().unwrap();
    for args in [
        vec!["status", "--run-dir", run_dir],
        vec!["gets", "--run-dir", run_dir],
        vec!["log-dump", "--run-dir", run_dir],
        vec!["renewal", "-s", "ls", "--run-dir", run_dir],
    ] {
        let err = stderr_of(&args);
        assert_eq!(
            err.matches("No such file or directory").count(),
            1,
            "lockd {args:?}: {err}"
        );
        assert!(
            err.starts_with("lockd: error: cannot connect to ") && err.lines().count() == 1,
            "lockd {args:?}: {err}"
        );
    }
}
