//! `lockd man` and `lockd completions`: man pages and shell completions generated from
//! the clap definitions (clap_mangen, clap_complete), so they cannot drift from the code.
//!
//! Pages: lockd(8) with every subcommand listed, one lockd-SUBCOMMAND(8) page per
//! subcommand (as git does), lockd-daemon(8) from the daemon's `DaemonArgs`, wdmd(8) from
//! `wdmd::cli::Args`, and lockd.toml(5) from the daemon's `CONFIG_KEYS` table.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::{Args, CommandFactory};
use clap_complete::Shell;
use clap_mangen::Man;

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to print a completion script for.
    #[arg(value_enum)]
    pub shell: Shell,
}

#[derive(Debug, Args)]
pub struct ManArgs {
    /// Write every page (lockd.8, lockd-*.8, lockd-daemon.8, wdmd.8, lockd.toml.5) into
    /// DIR (created if missing); without it, print lockd(8) to stdout.
    #[arg(long = "out", value_name = "DIR")]
    pub out: Option<PathBuf>,
}

const MANUAL: &str = "lockd";

fn source() -> String {
    format!("lockd {}", env!("CARGO_PKG_VERSION"))
}

/// The page date, YYYY-MM-DD: `SOURCE_DATE_EPOCH` when set (reproducible builds), else
/// today (UTC).
fn page_date() -> String {
    let secs = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0)
        });
    let (y, m, d) = crate::civil::civil_from_days(i64::try_from(secs / 86_400).unwrap_or(0));
    format!("{y:04}-{m:02}-{d:02}")
}

/// Every character outside ASCII as a groff `\[uXXXX]` escape, so the pages render
/// without warnings whether or not the input goes through preconv.
fn ascii_roff(page: Vec<u8>) -> Vec<u8> {
    let text = String::from_utf8_lossy(&page);
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_ascii() {
            out.push(c);
        } else {
            out.push_str(&format!("\\[u{:04X}]", u32::from(c)));
        }
    }
    out.into_bytes()
}

fn new_man(cmd: clap::Command, section: &str) -> Man {
    Man::new(cmd)
        .section(section)
        .date(page_date())
        .manual(MANUAL)
        .source(source())
}

/// Escapes text for roff: backslashes, hyphens (as `\-` so they stay ASCII minus signs
/// for copy and search), and a leading `.` or `'` that would start a request.
fn esc(text: &str) -> String {
    let s = text.replace('\\', "\\e").replace('-', "\\-");
    if s.starts_with('.') || s.starts_with('\'') {
        format!("\\&{s}")
    } else {
        s
    }
}

fn see_also(pages: &[&str]) -> String {
    let list: Vec<String> = pages
        .iter()
        .map(|p| {
            let (name, sec) = p.rsplit_once('.').unwrap_or((p, "8"));
            format!(".BR {} ({})", esc(name), sec)
        })
        .collect();
    // All but the last reference end with a comma.
    let mut out = String::from(".SH \"SEE ALSO\"\n");
    for (i, l) in list.iter().enumerate() {
        out.push_str(l);
        if i + 1 < list.len() {
            out.push(',');
        }
        out.push('\n');
    }
    out
}

fn render(man: &Man, extra: &str) -> Result<Vec<u8>> {
    let mut buf = Vec::new();
    man.render(&mut buf).context("cannot render man page")?;
    buf.extend_from_slice(extra.as_bytes());
    Ok(buf)
}

fn lockd_extra() -> String {
    let mut s = String::new();
    s.push_str(".SH ENVIRONMENT\n");
    s.push_str(".TP\n.B LOCKD_RUN_DIR\n");
    s.push_str(&esc(
        "Directory of the daemon's socket (sanlock.sock); default /run/lockd.",
    ));
    s.push('\n');
    s.push_str(".TP\n.B SANLOCK_RUN_DIR\n");
    s.push_str(&esc(
        "Read by sanlock's clients (libsanlock, python3-sanlock).",
    ));
    s.push('\n');
    s.push_str(".SH FILES\n.TP\n.I /etc/lockd/lockd.toml\nThe daemon's configuration, see\n.BR lockd.toml (5).\n");
    s.push_str(&see_also(&[
        "lockd-daemon.8",
        "wdmd.8",
        "lockd.toml.5",
        "sanlock.8",
    ]));
    s
}

/// `lockd` and each of its subcommands (recursively), as (file name, page).
fn lockd_pages(cmd: clap::Command) -> Result<Vec<(String, Vec<u8>)>> {
    fn walk(cmd: clap::Command, out: &mut Vec<(String, Vec<u8>)>, top: bool) -> Result<()> {
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()).cloned() {
            walk(sub, out, false)?;
        }
        let man = new_man(cmd, "8");
        let name = man.get_filename();
        let extra = if top {
            lockd_extra()
        } else {
            see_also(&["lockd.8"])
        };
        out.push((name, render(&man, &extra)?));
        Ok(())
    }
    let mut cmd = cmd.disable_help_subcommand(true);
    cmd.build();
    let mut out = Vec::new();
    walk(cmd, &mut out, true)?;
    Ok(out)
}

fn daemon_page() -> Result<Vec<u8>> {
    let cmd = <lockd_daemon::DaemonArgs as Args>::augment_args(
        clap::Command::new("lockd-daemon")
            .version(env!("CARGO_PKG_VERSION"))
            .about("lockd daemon: sanlock-compatible shared-storage lease manager")
            .long_about(
                "The lockd daemon grants shared-storage leases to local processes over \
                 sanlock's client protocol (sanlock.sock in the run dir), renews this host's \
                 delta lease in every joined lockspace, and arms each lockspace in wdmd. \
                 `lockd daemon` runs the same code.",
            ),
    );
    let man = new_man(cmd, "8");
    let mut extra = String::new();
    extra.push_str(".SH ENVIRONMENT\n");
    extra.push_str(
        ".TP\n.B LOCKD_RUN_DIR\nRun dir, below the command line, above the config file.\n",
    );
    extra.push_str(".TP\n.B WDMD_RUN_DIR\nDirectory of wdmd's socket.\n");
    extra.push_str(
        ".TP\n.B LOCKD_LOG\nLog filter, e.g. \\fBdebug\\fR or \\fBlockd_daemon=trace\\fR.\n",
    );
    extra.push_str(
        ".TP\n.BR NOTIFY_SOCKET \", \" WATCHDOG_USEC\nSet by systemd: READY=1 once the socket \
         listens, STATUS= lines, WATCHDOG=1 every WATCHDOG_USEC/2.\n",
    );
    extra.push_str(
        ".SH FILES\n.TP\n.I /etc/lockd/lockd.toml\nConfiguration, see\n.BR lockd.toml (5).\n",
    );
    extra.push_str(".TP\n.I /run/lockd/sanlock.sock\nClient socket.\n");
    extra.push_str(".TP\n.I /run/lockd/lockd.pid\nPid file, locked while the daemon runs.\n");
    extra.push_str(&see_also(&["lockd.8", "lockd.toml.5", "wdmd.8"]));
    render(&man, &extra)
}

fn wdmd_page() -> Result<Vec<u8>> {
    let cmd = wdmd::cli::Args::command().long_about(
        "wdmd multiplexes one hardware watchdog among lockspaces: each client (a lockd or \
         sanlock lockspace) keeps an expiry time fresh, and wdmd stops petting the device \
         when any armed client expires, so the host is reset.",
    );
    let man = new_man(cmd, "8");
    let mut extra = String::new();
    extra.push_str(
        ".SH FILES\n.TP\n.I /run/wdmd/wdmd.sock\nClient socket (libwdmd's fixed path).\n",
    );
    extra.push_str(".TP\n.I /dev/watchdog\nThe watchdog device.\n");
    extra.push_str(&see_also(&["lockd-daemon.8", "lockd.8"]));
    render(&man, &extra)
}

/// lockd.toml(5), from the daemon's key table.
fn config_page() -> Vec<u8> {
    let mut s = String::new();
    s.push_str(&format!(
        ".TH LOCKD.TOML 5 \"{}\" \"{}\" \"{MANUAL}\"\n",
        page_date(),
        esc(&source())
    ));
    s.push_str(".SH NAME\nlockd.toml \\- lockd daemon configuration file\n");
    s.push_str(".SH SYNOPSIS\n.I /etc/lockd/lockd.toml\n");
    s.push_str(".SH DESCRIPTION\n");
    s.push_str(&esc(
        "A TOML file read by the lockd daemon at start. Every key is optional; a value on \
         the command line overrides the file, and a missing default file means defaults. \
         An unknown key or a value out of range stops the daemon with an error naming it.",
    ));
    s.push('\n');
    s.push_str(".SH KEYS\n");
    for k in lockd_daemon::config::CONFIG_KEYS {
        s.push_str(&format!(
            ".TP\n.BR {} \" = \" \\fI{}\\fR\n",
            esc(k.key),
            esc(k.kind)
        ));
        s.push_str(&esc(k.help));
        s.push_str("\n.br\n");
        s.push_str(&format!(
            "Default: {}. Range: {}.",
            esc(k.default),
            esc(k.range)
        ));
        if let Some(o) = k.option {
            s.push_str(&format!(" Command line: \\fB{}\\fR.", esc(o)));
        }
        s.push('\n');
    }
    s.push_str(".SH EXAMPLE\n.nf\n");
    for k in lockd_daemon::config::CONFIG_KEYS {
        s.push_str(&format!("{} = {}\n", esc(k.key), esc(k.example)));
    }
    s.push_str(".fi\n");
    s.push_str(&see_also(&["lockd-daemon.8", "lockd.8"]));
    s.into_bytes()
}

/// Every page as (file name, roff text).
pub fn all_pages(lockd: clap::Command) -> Result<Vec<(String, Vec<u8>)>> {
    // `lockd daemon`'s own page would be lockd-daemon.8 too: the daemon's page (same
    // options, plus environment and files) takes its place.
    let mut pages: Vec<_> = lockd_pages(lockd)?
        .into_iter()
        .filter(|(n, _)| n != "lockd-daemon.8")
        .collect();
    pages.push(("lockd-daemon.8".into(), daemon_page()?));
    pages.push(("wdmd.8".into(), wdmd_page()?));
    pages.push(("lockd.toml.5".into(), config_page()));
    Ok(pages.into_iter().map(|(n, p)| (n, ascii_roff(p))).collect())
}

fn write_pages(dir: &Path, pages: &[(String, Vec<u8>)]) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    for (name, text) in pages {
        let p = dir.join(name);
        std::fs::write(&p, text).with_context(|| format!("cannot write {}", p.display()))?;
        println!("{}", p.display());
    }
    Ok(())
}

/// `lockd man [--out DIR]`.
pub fn man(a: &ManArgs, lockd: clap::Command) -> Result<()> {
    let pages = all_pages(lockd)?;
    match &a.out {
        Some(dir) => write_pages(dir, &pages),
        None => {
            let top = pages
                .iter()
                .find(|(n, _)| n == "lockd.8")
                .context("lockd.8 was not generated")?;
            std::io::stdout()
                .write_all(&top.1)
                .context("cannot write to stdout")
        }
    }
}

/// `lockd completions SHELL`.
pub fn completions(a: &CompletionsArgs, mut lockd: clap::Command) -> Result<()> {
    let mut out = Vec::new();
    clap_complete::generate(a.shell, &mut lockd, "lockd", &mut out);
    std::io::stdout()
        .write_all(&out)
        .context("cannot write to stdout")
}
