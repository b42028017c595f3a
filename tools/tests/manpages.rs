//! `lockd man --out DIR` and `lockd completions SHELL`: every page renders with groff
//! (`-ww`, every warning on) and `man -l` without a diagnostic, lockd(8) names every
//! subcommand of `lockd --help`, lockd.toml(5) every key of packaging/lockd.toml, every
//! page has ENVIRONMENT, EXIT STATUS and EXAMPLES (issue 21 item 9; lockd-killpath(8) and
//! lockd-ctdb-mutex(8) included, lockd-elect(8) naming LOCKD_FENCING_TOKEN and exit 75),
//! and the bash completion passes `bash -n` and completes `lockd add-` to `add-lockspace`.

use std::path::Path;
use std::process::Command;

use lockd_system_tests::require_command;

const LOCKD: &str = env!("CARGO_BIN_EXE_lockd");

fn out(cmd: &mut Command) -> (bool, String, String) {
    let o = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// The subcommand names listed by `lockd --help` (and `lockd SUB --help` for nested ones).
fn subcommands(args: &[&str]) -> Vec<String> {
    let (ok, text, err) = out(Command::new(LOCKD).args(args).arg("--help"));
    assert!(ok, "lockd {args:?} --help failed: {err}");
    text.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| *n != "help")
        .map(str::to_string)
        .collect()
}

/// Renders a page as man(1) shows it, without hyphenation or justification getting in
/// the way of searching for names.
fn man_text(page: &Path) -> String {
    let (ok, text, err) = out(Command::new("man")
        .arg("-l")
        .arg(page)
        .env("MANWIDTH", "200")
        .env("LC_ALL", "C.UTF-8"));
    assert!(ok, "man -l {} failed: {err}", page.display());
    assert!(
        err.trim().is_empty(),
        "man -l {} printed diagnostics:\n{err}",
        page.display()
    );
    text
}

#[test]
fn man_pages_render_and_cover_every_command() {
    require_command("groff", "groff-base");
    require_command("man", "man-db");
    let dir = tempfile::tempdir().expect("temp dir");
    let (ok, listed, err) = out(Command::new(LOCKD).arg("man").arg("--out").arg(dir.path()));
    assert!(ok, "lockd man --out failed: {err}");
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .expect("read man dir")
        .map(|e| {
            e.expect("dir entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    names.sort();
    assert_eq!(
        listed.lines().count(),
        names.len(),
        "lockd man lists each page it writes"
    );
    for want in [
        "lockd.8",
        "lockd-daemon.8",
        "wdmd.8",
        "lockd.toml.5",
        "lockd-killpath.8",
        "lockd-ctdb-mutex.8",
    ] {
        assert!(names.iter().any(|n| n == want), "{want} missing: {names:?}");
    }
    let top = subcommands(&[]);
    assert!(top.len() >= 20, "too few subcommands parsed: {top:?}");
    for sub in &top {
        assert!(
            names.contains(&format!("lockd-{sub}.8")),
            "no page lockd-{sub}.8: {names:?}"
        );
    }
    for nested in ["direct", "lvb", "rindex"] {
        for sub in subcommands(&[nested]) {
            assert!(
                names.contains(&format!("lockd-{nested}-{sub}.8")),
                "no page lockd-{nested}-{sub}.8"
            );
        }
    }

    // Every page: groff with all warnings on is silent, man -l is silent.
    for n in &names {
        let page = dir.path().join(n);
        let (ok, _, err) = out(Command::new("groff")
            .args(["-man", "-Tutf8", "-ww", "-z"])
            .arg(&page)
            .env("LC_ALL", "C.UTF-8"));
        assert!(
            ok && err.trim().is_empty(),
            "groff -man -Tutf8 -ww {n}: {err}"
        );
        let text = man_text(&page);
        assert!(text.contains("NAME"), "{n} has no NAME section");
        // Section headings start a line of man's output.
        for section in ["ENVIRONMENT", "EXIT STATUS", "EXAMPLES"] {
            let body = text
                .split(&format!("\n{section}\n"))
                .nth(1)
                .unwrap_or_else(|| panic!("{n} has no {section} section:\n{text}"));
            let first = body.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
            assert!(
                first.starts_with("       ") && !first.trim().is_empty(),
                "{n}: {section} is empty"
            );
        }
    }
    // The facts issue 21 found missing.
    let elect8 = man_text(&dir.path().join("lockd-elect.8"));
    for fact in ["LOCKD_FENCING_TOKEN", "LOCKD_LEASE", "\n       75 "] {
        assert!(elect8.contains(fact), "lockd-elect(8) lacks {fact:?}");
    }
    let killpath8 = man_text(&dir.path().join("lockd-killpath.8"));
    for fact in [
        "--virsh-uri",
        "--release",
        "SANLK_KILLPATH_PID",
        "\n       3 ",
    ] {
        assert!(killpath8.contains(fact), "lockd-killpath(8) lacks {fact:?}");
    }
    assert!(!killpath8.contains("command-line tool"), "{killpath8}");
    let ctdb8 = man_text(&dir.path().join("lockd-ctdb-mutex.8"));
    for fact in ["cluster lock", "--timeout", "LOCKD_RUN_DIR"] {
        assert!(ctdb8.contains(fact), "lockd-ctdb-mutex(8) lacks {fact:?}");
    }
    assert!(!ctdb8.contains("command-line tool"), "{ctdb8}");

    // lockd(8) names every subcommand and points at the other pages.
    let lockd8 = man_text(&dir.path().join("lockd.8"));
    for sub in &top {
        assert!(
            lockd8.contains(&format!("lockd-{sub}(8)")),
            "lockd(8) does not list {sub}"
        );
    }
    for other in [
        "lockd-daemon(8)",
        "wdmd(8)",
        "lockd.toml(5)",
        "lockd-killpath(8)",
        "lockd-ctdb-mutex(8)",
    ] {
        assert!(lockd8.contains(other), "lockd(8) does not mention {other}");
    }
    // The daemon's and wdmd's pages carry their options.
    let daemon8 = man_text(&dir.path().join("lockd-daemon.8"));
    for opt in [
        "--foreground",
        "--run-dir",
        "--io-timeout",
        "--config",
        "NOTIFY_SOCKET",
    ] {
        assert!(daemon8.contains(opt), "lockd-daemon(8) lacks {opt}");
    }
    let wdmd8 = man_text(&dir.path().join("wdmd.8"));
    for opt in ["--probe", "--fire-timeout", "--run-dir", "-D"] {
        assert!(wdmd8.contains(opt), "wdmd(8) lacks {opt}");
    }
    // lockd.toml(5) has every key of the shipped, commented config file.
    let toml5 = man_text(&dir.path().join("lockd.toml.5"));
    let shipped = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../packaging/lockd.toml"),
    )
    .expect("packaging/lockd.toml");
    let mut keys: Vec<&str> = shipped
        .lines()
        .filter_map(|l| l.strip_prefix("# ")?.split_once(" = ").map(|(k, _)| k))
        .collect();
    keys.dedup(); // run_dir has two commented examples (default and drop-in mode)
    assert_eq!(
        keys.len(),
        lockd_config::CONFIG_KEYS.len(),
        "keys parsed from packaging/lockd.toml: {keys:?}"
    );
    for k in keys {
        assert!(
            toml5.contains(&format!("{k} = ")),
            "lockd.toml(5) lacks {k}"
        );
    }
    println!("{} pages: {names:?}", names.len());

    // Without --out: lockd(8) on stdout.
    let (ok, stdout_page, _) = out(Command::new(LOCKD).arg("man"));
    assert!(
        ok && stdout_page.contains(".TH lockd 8"),
        "lockd man prints lockd(8)"
    );
}

#[test]
fn completions_bash_zsh_fish() {
    require_command("bash", "bash");
    let dir = tempfile::tempdir().expect("temp dir");
    let script = dir.path().join("lockd.bash");
    let (ok, text, err) = out(Command::new(LOCKD).args(["completions", "bash"]));
    assert!(ok, "lockd completions bash: {err}");
    std::fs::write(&script, &text).expect("write completion");
    let (ok, _, err) = out(Command::new("bash").arg("-n").arg(&script));
    assert!(ok, "bash -n rejects the completion: {err}");

    // A small driver: what bash would offer after typing the words (last one partial).
    let complete = |words: &[&str]| -> Vec<String> {
        let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
        let driver = format!(
            "source '{}'\nCOMP_WORDS=({})\nCOMP_CWORD={}\nCOMP_LINE=\"${{COMP_WORDS[*]}}\"\n\
             COMP_POINT=${{#COMP_LINE}}\n_lockd lockd \"${{COMP_WORDS[COMP_CWORD]}}\" \
             \"${{COMP_WORDS[COMP_CWORD-1]}}\"\nprintf '%s\\n' \"${{COMPREPLY[@]}}\"\n",
            script.display(),
            quoted.join(" "),
            words.len() - 1
        );
        let (ok, text, err) = out(Command::new("bash").arg("-c").arg(driver));
        assert!(ok, "completion driver failed: {err}");
        text.lines().map(str::to_string).collect()
    };
    assert_eq!(complete(&["lockd", "add-"]), vec!["add-lockspace"]);
    let direct = complete(&["lockd", "direct", "re"]);
    assert!(
        direct.contains(&"read-leader".to_string()) && direct.contains(&"rebuild".to_string()),
        "lockd direct re -> {direct:?}"
    );
    let opts = complete(&["lockd", "status", "--"]);
    assert!(
        opts.iter().any(|o| o == "--help"),
        "lockd status -- -> {opts:?}"
    );

    for shell in ["zsh", "fish"] {
        let (ok, text, err) = out(Command::new(LOCKD).args(["completions", shell]));
        assert!(ok, "lockd completions {shell}: {err}");
        assert!(
            text.contains("add-lockspace") && text.contains("rem-lockspace"),
            "{shell} completion lacks subcommands"
        );
    }
    let (ok, _, err) = out(Command::new(LOCKD).args(["completions", "tcsh"]));
    assert!(!ok && err.contains("invalid value"), "unknown shell: {err}");
}

/// The helpers' `--help` named them "the lockd command-line tool" (the package's
/// description); each now says what it is.
#[test]
fn helpers_describe_themselves() {
    for (bin, what) in [
        (env!("CARGO_BIN_EXE_lockd-killpath"), "Killpath helper"),
        (
            env!("CARGO_BIN_EXE_lockd-ctdb-mutex"),
            "CTDB cluster-lock helper",
        ),
    ] {
        let (ok, text, err) = out(Command::new(bin).arg("--help"));
        assert!(ok, "{bin} --help: {err}");
        let first = text.lines().next().unwrap_or("");
        assert!(
            first.starts_with(what) && !text.contains("command-line tool"),
            "{bin} --help: {text}"
        );
    }
}
