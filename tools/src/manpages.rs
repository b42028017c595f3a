//! `lockd man` and `lockd completions`: man pages and shell completions generated from
//! the clap definitions (clap_mangen, clap_complete), so they cannot drift from the code.
//!
//! Pages: lockd(8) with every subcommand listed, one lockd-SUBCOMMAND(8) page per
//! subcommand (as git does), lockd-daemon(8) from the daemon's `DaemonArgs`, wdmd(8) from
//! `wdmd::cli::WdmdArgs`, lockd-killpath(8) and lockd-ctdb-mutex(8) from those helpers' own
//! argument definitions (`killpath_cli.rs`, `ctdb_mutex_cli.rs`), and lockd.toml(5) from
//! the daemon's `CONFIG_KEYS` table.
//!
//! Invariant: every page has ENVIRONMENT, EXIT STATUS and EXAMPLES sections (the texts
//! are here, next to the code whose behaviour they state; tools/tests/manpages.rs checks
//! that each page has all three).

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
    /// Write every page (lockd.8, lockd-*.8, lockd-daemon.8, lockd-killpath.8,
    /// lockd-ctdb-mutex.8, wdmd.8, lockd.toml.5) into DIR (created if missing); without
    /// it, print lockd(8) to stdout.
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

/// One entry of a page's ENVIRONMENT or EXIT STATUS list: (tag, text). An empty tag is
/// a plain paragraph.
type Entry<'a> = (&'a str, &'a str);

/// ENVIRONMENT, EXIT STATUS and EXAMPLES sections. `examples` are (what it does,
/// command lines).
fn sections(env: &[Entry], exit: &[Entry], examples: &[Entry]) -> String {
    let list = |out: &mut String, items: &[Entry]| {
        for (tag, text) in items {
            if tag.is_empty() {
                out.push_str(".PP\n");
            } else {
                out.push_str(&format!(".TP\n.B {}\n", esc(tag)));
            }
            out.push_str(&esc(text));
            out.push('\n');
        }
    };
    let mut s = String::from(".SH ENVIRONMENT\n");
    list(&mut s, env);
    s.push_str(".SH \"EXIT STATUS\"\n");
    list(&mut s, exit);
    s.push_str(".SH EXAMPLES\n");
    for (what, cmd) in examples {
        s.push_str(".PP\n");
        s.push_str(&esc(what));
        s.push_str("\n.PP\n.RS 4\n.nf\n");
        s.push_str(&esc(cmd));
        s.push_str("\n.fi\n.RE\n");
    }
    s
}

/// Where the client commands find the daemon.
const CLIENT_ENV: [Entry; 2] = [
    (
        "LOCKD_RUN_DIR",
        "Directory of the daemon's socket (sanlock.sock) when --run-dir is not given.",
    ),
    (
        "SANLOCK_RUN_DIR",
        "Used when LOCKD_RUN_DIR is unset, as sanlock's clients use it; without either, \
         run_dir of /etc/lockd/lockd.toml, else /run/lockd.",
    ),
];

const EXIT_OK: Entry = ("0", "Success.");
const EXIT_ERROR: Entry = (
    "1",
    "Failure: the daemon answered with a negative result (named on stderr, e.g. \
     \"daemon answered with result -243 (…)\"), the daemon could not be reached, or \
     another error. One line \"lockd: error: …\" on stderr.",
);
const EXIT_USAGE: Entry = (
    "2",
    "Bad usage: an unknown option, or a missing or malformed argument (the argument \
     parser's message on stderr).",
);
const EXIT_DEFAULT: [Entry; 3] = [EXIT_OK, EXIT_ERROR, EXIT_USAGE];

const NO_ENV: [Entry; 1] = [(
    "",
    "None: this command reads and writes storage itself and does not use the daemon.",
)];

/// ENVIRONMENT, EXIT STATUS and EXAMPLES of the page `name` (lockd-SUB or
/// lockd-SUB-SUB, without the section).
fn sub_extra(name: &str) -> String {
    let sub = name.strip_prefix("lockd-").unwrap_or(name);
    let client = &CLIENT_ENV[..];
    let default = &EXIT_DEFAULT[..];
    match sub {
        "acquire" => sections(
            client,
            &[
                (
                    "",
                    "With a command after --: lockd acquire runs it in its own place (exec) \
                     once the leases are held, so the exit status is the command's; the \
                     leases are released when it exits. With one lease the command finds \
                     it in LOCKD_LEASE (LS:NAME) and its fencing token in \
                     LOCKD_FENCING_TOKEN. Without a command:",
                ),
                EXIT_OK,
                EXIT_ERROR,
                EXIT_USAGE,
            ],
            &[
                (
                    "Hold a lease for the life of a service:",
                    "lockd acquire -r vg1:lease1:/dev/sdb:1M -- /usr/bin/myservice --foreground",
                ),
                (
                    "Hold two leases for a process that is already running (lockd only; \
                     released when it exits):",
                    "lockd acquire --for-pid 4242 -r vg1:a:/dev/sdb:1M -r vg1:b:/dev/sdb:2M",
                ),
                (
                    "Fail at once instead of waiting when another host holds the lease:",
                    "lockd acquire --nowait -r vg1:lease1:/dev/sdb:1M -- true",
                ),
            ],
        ),
        "add-lockspace" => sections(
            client,
            default,
            &[
                (
                    "Join lockspace vg1 (formatted at offset 0 of /dev/sdb) as host_id 3:",
                    "lockd add-lockspace -s vg1:3:/dev/sdb:0",
                ),
                (
                    "Start the join and wait for it separately:",
                    "lockd add-lockspace --async -s vg1:3:/dev/sdb:0\n\
                     lockd inq-lockspace --wait -s vg1:3:/dev/sdb:0",
                ),
            ],
        ),
        "completions" => sections(
            &[("", "None.")],
            &[EXIT_OK, EXIT_USAGE],
            &[
                (
                    "Install bash completion:",
                    "lockd completions bash > /usr/share/bash-completion/completions/lockd",
                ),
                ("For zsh:", "lockd completions zsh > \"${fpath[1]}/_lockd\""),
            ],
        ),
        "convert" => sections(
            client,
            default,
            &[
                (
                    "Make the exclusive lease of pid 4242 shared:",
                    "lockd convert -r vg1:lease1:/dev/sdb:1M:SH -p 4242",
                ),
                (
                    "And exclusive again:",
                    "lockd convert -r vg1:lease1:/dev/sdb:1M -p 4242",
                ),
            ],
        ),
        "doctor" => sections(
            &[
                CLIENT_ENV[0],
                CLIENT_ENV[1],
                ("WDMD_RUN_DIR", "Directory of wdmd's socket, as wdmd reads it."),
            ],
            &[
                ("0", "Every check passed."),
                ("1", "The worst check is WARN, or the checks could not run (an error)."),
                ("2", "The worst check is FAIL (or bad usage)."),
            ],
            &[
                ("Check this host:", "lockd doctor"),
                (
                    "Only what needs attention:",
                    "lockd doctor --json | jq '.checks[] | select(.level != \"PASS\")'",
                ),
            ],
        ),
        "elect" => sections(
            &[
                CLIENT_ENV[0],
                CLIENT_ENV[1],
                (
                    "LOCKD_FENCING_TOKEN",
                    "Set for COMMAND: the lease's version (lver) when this host was elected, \
                     a number that grows with every new leader. Hand it to the services the \
                     leader writes to, so that they refuse the late writes of a deposed \
                     leader.",
                ),
                ("LOCKD_LEASE", "Set for COMMAND: the lease, as LOCKSPACE:NAME."),
            ],
            &[
                (
                    "N",
                    "COMMAND exited with status N (128+S when it was killed by signal S); \
                     the lease was released.",
                ),
                (
                    "75",
                    "Leadership was lost (a lease-loss notice, or the daemon gone or silent) \
                     or lockd elect got SIGTERM, SIGINT or SIGHUP: COMMAND got SIGTERM at \
                     once and SIGKILL after --grace seconds. The lease is not released by \
                     lockd elect (a release could block on failed storage); the daemon \
                     drops it when the connection closes.",
                ),
                (
                    "1",
                    "Not elected within --timeout, COMMAND cannot be run, or another error \
                     (nothing is held then).",
                ),
                EXIT_USAGE,
            ],
            &[
                (
                    "Run the primary of an application while this host leads:",
                    "lockd elect -r app:leader:/dev/sdb:1M -- /usr/local/bin/app-primary",
                ),
                (
                    "Pass the fencing token on:",
                    "lockd elect -r app:leader:/dev/sdb:1M -- \\\n    \
                     sh -c 'exec app-primary --fencing-token \"$LOCKD_FENCING_TOKEN\"'",
                ),
                (
                    "As a systemd service, restarted to campaign again after a loss:",
                    "ExecStart=/usr/sbin/lockd elect -r app:leader:/dev/sdb:1M -- app-primary\n\
                     Restart=always",
                ),
            ],
        ),
        "examine" => sections(
            client,
            default,
            &[
                (
                    "Look at the request records of every held lease of vg1 now:",
                    "lockd examine -s vg1",
                ),
                ("Of one lease:", "lockd examine -r vg1:lease1:/dev/sdb:1M"),
            ],
        ),
        "explain" => sections(
            client,
            default,
            &[
                ("The fencing timeline of lockspace vg1:", "lockd explain -s vg1"),
                ("Of every lockspace, as JSON:", "lockd explain --json"),
            ],
        ),
        "gets" => sections(
            client,
            default,
            &[
                ("The joined lockspaces:", "lockd gets"),
                ("With every host and its state:", "lockd gets --hosts"),
            ],
        ),
        "host-status" => sections(
            client,
            default,
            &[("Every host of lockspace vg1:", "lockd host-status -s vg1")],
        ),
        "inq-lockspace" => sections(
            client,
            &[
                (
                    "0",
                    "The answer was printed: joined, in progress, or not joined (--json \
                     gives the daemon's result: 0, -115 or -2).",
                ),
                (
                    "1",
                    "Another answer from the daemon, the daemon not reached, or another \
                     error.",
                ),
                EXIT_USAGE,
            ],
            &[(
                "Wait for a join started with --async:",
                "lockd inq-lockspace --wait -s vg1:3:/dev/sdb:0",
            )],
        ),
        "inquire" => sections(
            client,
            default,
            &[("The leases pid 4242 holds:", "lockd inquire -p 4242")],
        ),
        "leader" => sections(
            client,
            default,
            &[(
                "Who holds the lease now, with its fencing token:",
                "lockd leader -r app:leader:/dev/sdb:1M",
            )],
        ),
        "log-dump" => sections(
            client,
            default,
            &[
                ("The daemon's recent log (sanlock client log_dump):", "lockd log-dump"),
                ("Only one lockspace's lines:", "lockd log-dump | grep 'ls=vg1'"),
            ],
        ),
        "man" => sections(
            &[(
                "SOURCE_DATE_EPOCH",
                "The pages' date, in seconds since 1970 (reproducible builds); today \
                 otherwise.",
            )],
            &[EXIT_OK, ("1", "A page cannot be written."), EXIT_USAGE],
            &[
                ("Read lockd(8) without installing:", "lockd man | man -l -"),
                (
                    "Write every page:",
                    "lockd man --out /usr/share/man/man8 && mv /usr/share/man/man8/lockd.toml.5 /usr/share/man/man5/",
                ),
            ],
        ),
        "metrics" => sections(
            client,
            default,
            &[
                ("Print the metrics:", "lockd metrics"),
                ("Check them:", "lockd metrics | promtool check metrics"),
            ],
        ),
        "release" => sections(
            client,
            default,
            &[
                (
                    "Release one lease of pid 4242:",
                    "lockd release -p 4242 -r vg1:lease1:/dev/sdb:1M",
                ),
                ("Every lease of pid 4242:", "lockd release -p 4242 --all"),
            ],
        ),
        "rem-lockspace" => sections(
            client,
            default,
            &[
                (
                    "Leave lockspace vg1 (holders of its leases are killed first):",
                    "lockd rem-lockspace -s vg1:3:/dev/sdb:0",
                ),
                (
                    "Only if no lease of it is held:",
                    "lockd rem-lockspace --unused -s vg1:3:/dev/sdb:0",
                ),
            ],
        ),
        "renewal" => sections(
            client,
            default,
            &[
                (
                    "The recent renewals of lockspace vg1 (sanlock client renewal):",
                    "lockd renewal -s vg1",
                ),
                (
                    "The slowest of them:",
                    "lockd renewal -s vg1 --json | jq 'max_by(.read_ms)'",
                ),
            ],
        ),
        "request" => sections(
            client,
            default,
            &[(
                "Ask the holder (on any host) to give the lease up (killpath or SIGTERM):",
                "lockd request -r vg1:lease1:/dev/sdb:1M --next-lver -f graceful",
            )],
        ),
        "set-config" => sections(
            client,
            default,
            &[(
                "Keep orphaned persistent leases: removal of vg1 then fails with -EBUSY:",
                "lockd set-config -s vg1 --used-by-orphans 1",
            )],
        ),
        "set-event" => sections(
            client,
            default,
            &[(
                "Send event 1 with data 7 to host_id 2 of vg1, at its current generation:",
                "lockd set-event -s vg1 -i 2 --cur-generation -e 1 -d 7",
            )],
        ),
        "set-host" => sections(
            client,
            default,
            &[(
                "After host_id 2 of vg1 was fenced (its lease no longer renewed), free its \
                 leases now instead of after host_dead seconds:",
                "lockd set-host -s vg1 -i 2:7 --dead",
            )],
        ),
        "shutdown" => sections(
            client,
            default,
            &[
                ("Stop an idle daemon and wait until it has exited:", "lockd shutdown -w"),
                (
                    "Stop it with lockspaces joined (their lease holders are killed):",
                    "lockd shutdown -f -w",
                ),
            ],
        ),
        "status" => sections(
            &[
                CLIENT_ENV[0],
                CLIENT_ENV[1],
                ("NO_COLOR", "When set, no colours even on a terminal."),
            ],
            default,
            &[
                ("Lockspaces with their deadlines, hosts, leases, clients:", "lockd status"),
                ("sanlock's lines (sanlock client status -D):", "lockd status --format sanlock -D"),
            ],
        ),
        "version" => sections(client, default, &[("The daemon's version:", "lockd version")]),
        "direct" => sections(
            &NO_ENV,
            default,
            &[("List every record on a device:", "lockd direct dump /dev/sdb")],
        ),
        "direct-init" => sections(
            &NO_ENV,
            default,
            &[
                (
                    "Format lockspace vg1 at offset 0 and a resource lease at 1 MiB:",
                    "lockd direct init -s vg1:0:/dev/sdb:0\n\
                     lockd direct init -r vg1:lease1:/dev/sdb:1M",
                ),
                (
                    "For io_timeout 5 s on every host:",
                    "lockd direct init -s vg1:0:/dev/sdb:0 -o 5",
                ),
            ],
        ),
        "direct-dump" => sections(
            &NO_ENV,
            default,
            &[
                ("Every record on a device:", "lockd direct dump /dev/sdb"),
                ("The first 8 MiB only:", "lockd direct dump /dev/sdb:0:8M"),
            ],
        ),
        "direct-read-leader" => sections(
            &NO_ENV,
            default,
            &[
                ("The resource leader at 1 MiB:", "lockd direct read-leader -r vg1:lease1:/dev/sdb:1M"),
                ("host_id 3's delta lease:", "lockd direct read-leader -s vg1:3:/dev/sdb:0"),
            ],
        ),
        "direct-format" => sections(
            &NO_ENV,
            default,
            &[(
                "Format a resource index at 1 MiB for lockspace vg1:",
                "lockd direct format -x vg1:/dev/sdb:1M",
            )],
        ),
        "direct-lookup" => sections(
            &NO_ENV,
            default,
            &[
                ("Find lease1 in the index:", "lockd direct lookup -x vg1:/dev/sdb:1M -e lease1"),
                ("The first free slot:", "lockd direct lookup -x vg1:/dev/sdb:1M"),
            ],
        ),
        "direct-update" => sections(
            &NO_ENV,
            default,
            &[(
                "Add an entry (without the index lease: only with no daemon using it):",
                "lockd direct update -x vg1:/dev/sdb:1M -e lease1:3M",
            )],
        ),
        "direct-rebuild" => sections(
            &NO_ENV,
            default,
            &[(
                "Rebuild the index from the leases on disk (no daemon using it):",
                "lockd direct rebuild -x vg1:/dev/sdb:1M",
            )],
        ),
        "lvb" | "lvb-get" | "lvb-set" => sections(
            client,
            default,
            &[
                (
                    "Hold a lease with its value block, then read and set it:",
                    "lockd acquire --lvb -r vg1:lease1:/dev/sdb:1M -- sh -c '\n    \
                     lockd lvb get -r vg1:lease1\n    \
                     lockd lvb set -r vg1:lease1 --value \"generation 7\"'",
                ),
                ("As hex:", "lockd lvb get -r vg1:lease1 --hex --size 16"),
            ],
        ),
        "rindex" | "rindex-format" | "rindex-create" | "rindex-delete" | "rindex-lookup"
        | "rindex-update" | "rindex-rebuild" => sections(
            client,
            default,
            &[
                (
                    "Through the daemon (lockspace vg1 joined): format an index at 1 MiB, \
                     create a resource in it, look it up, delete it:",
                    "lockd rindex format -x vg1:/dev/sdb:1M\n\
                     lockd rindex create -x vg1:/dev/sdb:1M -e lease1\n\
                     lockd rindex lookup -x vg1:/dev/sdb:1M -e lease1\n\
                     lockd rindex delete -x vg1:/dev/sdb:1M -e lease1",
                ),
                (
                    "Rebuild the index from the leases on disk:",
                    "lockd rindex rebuild -x vg1:/dev/sdb:1M",
                ),
            ],
        ),
        _ => sections(client, default, &[("", "See lockd(8).")]),
    }
}

fn lockd_extra() -> String {
    let mut s = sections(
        &CLIENT_ENV,
        &[
            (
                "",
                "Each command's page gives its own; for the client commands:",
            ),
            EXIT_OK,
            EXIT_ERROR,
            EXIT_USAGE,
        ],
        &[
            (
                "Format a lockspace and a lease, join as host_id 1, run a command holding \
                 the lease:",
                "lockd direct init -s vg1:0:/dev/sdb:0\n\
                 lockd direct init -r vg1:lease1:/dev/sdb:1M\n\
                 lockd add-lockspace -s vg1:1:/dev/sdb:0\n\
                 lockd acquire -r vg1:lease1:/dev/sdb:1M -- /usr/bin/myservice",
            ),
            ("What the daemon holds, with deadlines:", "lockd status"),
        ],
    );
    s.push_str(".SH FILES\n.TP\n.I /etc/lockd/lockd.toml\nThe daemon's configuration, see\n.BR lockd.toml (5).\n");
    s.push_str(&see_also(&[
        "lockd-daemon.8",
        "wdmd.8",
        "lockd.toml.5",
        "lockd-killpath.8",
        "lockd-ctdb-mutex.8",
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
            let mut e = sub_extra(name.trim_end_matches(".8"));
            e.push_str(&see_also(&["lockd.8"]));
            e
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
    let cmd = <lockd_config::DaemonArgs as Args>::augment_args(
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
    let mut extra = sections(
        &[
            (
                "LOCKD_RUN_DIR",
                "Run dir, below the command line, above the config file.",
            ),
            ("WDMD_RUN_DIR", "Directory of wdmd's socket."),
            ("LOCKD_LOG", "Log filter, e.g. debug or lockd_daemon=trace."),
            (
                "NOTIFY_SOCKET, WATCHDOG_USEC",
                "Set by systemd: READY=1 once the socket listens, STATUS= lines, WATCHDOG=1 \
                 every WATCHDOG_USEC/2.",
            ),
        ],
        &[
            (
                "0",
                "The daemon was shut down (lockd shutdown, or SIGTERM with no lockspace).",
            ),
            (
                "1",
                "It could not start: a configuration error (the key and its range are \
                 named), another daemon already holds the pid file, or the socket, run dir, \
                 log file or metrics listener cannot be set up. One line on stderr.",
            ),
            EXIT_USAGE,
        ],
        &[
            (
                "In the foreground with the watchdog off (tests only):",
                "lockd-daemon -D -w 0",
            ),
            (
                "As the packaged service does (see lockd.service):",
                "systemctl enable --now wdmd.service lockd.service",
            ),
            (
                "With a fixed host name and io_timeout 5 s:",
                "lockd-daemon -e host-a.example -o 5",
            ),
        ],
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
    let cmd = wdmd::cli::WdmdArgs::command().long_about(
        "wdmd multiplexes one hardware watchdog among lockspaces: each client (a lockd or \
         sanlock lockspace) keeps an expiry time fresh, and wdmd stops petting the device \
         when any armed client expires, so the host is reset.",
    );
    let man = new_man(cmd, "8");
    let mut extra = sections(
        &[(
            "WDMD_RUN_DIR",
            "Run directory, as --run-dir (libwdmd's clients only use /run/wdmd).",
        )],
        &[
            (
                "0",
                "A clean exit (the device closed with the magic close, the marker removed), \
                 or --dump / --probe done.",
            ),
            (
                "1",
                "It could not start, or it exited leaving the device to fire (a client \
                 expired, or it was killed while armed): the marker is kept.",
            ),
            EXIT_USAGE,
        ],
        &[
            ("Find a working watchdog device:", "wdmd --probe"),
            ("The daemon's state:", "wdmd --dump"),
            (
                "As the packaged service does:",
                "systemctl enable --now wdmd.service",
            ),
        ],
    );
    extra.push_str(
        ".SH FILES\n.TP\n.I /run/wdmd/wdmd.sock\nClient socket (libwdmd's fixed path).\n",
    );
    extra.push_str(".TP\n.I /dev/watchdog\nThe watchdog device.\n");
    extra.push_str(&see_also(&["lockd-daemon.8", "lockd.8"]));
    render(&man, &extra)
}

fn killpath_page() -> Result<Vec<u8>> {
    let cmd = crate::killpath_cli::Cli::command().long_about(
        "A killpath helper: lockd (or sanlock) runs it when a registered client's lease \
         must be given up, before any SIGTERM or SIGKILL, with the arguments it was \
         registered with and the holder's pid appended (SANLK_KILLPATH_PID). It pauses or \
         destroys a libvirt domain (virsh suspend/destroy), stops a systemd unit, or \
         signals a process; with --release it then releases the holder's leases through \
         the daemon, as libvirt does for a paused guest. The daemon passes at most 8 \
         arguments in at most 127 bytes: use the short options (-cURI -dUUID -apause -r). \
         One line per run goes to stderr (the daemon's log) and, with --log, to FILE.",
    );
    let man = new_man(cmd, "8");
    let mut extra = sections(
        &[
            (
                "LOCKD_RUN_DIR",
                "The daemon's run dir for --release (lockd sets it for the killpaths it \
                 runs); --run-dir overrides it.",
            ),
            (
                "SANLOCK_RUN_DIR",
                "Used when LOCKD_RUN_DIR is unset; without either, /run/lockd.",
            ),
        ],
        &[
            (
                "0",
                "Done (a signalled process that is already gone counts as done).",
            ),
            ("1", "The action failed (or, with --release, the release)."),
            ("2", "Bad arguments."),
            ("3", "virsh or systemctl did not finish within --timeout (it was killed)."),
            (
                "",
                "lockd logs the status and shows it as killpath_status=exit:N in the \
                 client's STATUS (lockd status --format sanlock -D).",
            ),
        ],
        &[
            (
                "Pause a guest and release its leases when its lease must go:",
                "lockd acquire -r vms:vm1:/dev/mapper/leases:1M \\\n    \
                 --killpath /usr/sbin/lockd-killpath \\\n    \
                 --killpath-args \"-cqemu:///system -dUUID -apause -r\" -- COMMAND",
            ),
            (
                "Stop a systemd unit instead:",
                "lockd acquire -r app:lease:/dev/sdb:1M \\\n    \
                 --killpath /usr/sbin/lockd-killpath --killpath-args \"-uapp.service\" -- app",
            ),
            (
                "Send SIGTERM to the holder (the daemon appends its pid), logging to a file:",
                "--killpath /usr/sbin/lockd-killpath --killpath-args \"-sTERM -l/var/log/killpath.log\"",
            ),
        ],
    );
    extra.push_str(&see_also(&["lockd-acquire.8", "lockd.8", "lockd-daemon.8"]));
    render(&man, &extra)
}

fn ctdb_mutex_page() -> Result<Vec<u8>> {
    let cmd = crate::ctdb_mutex_cli::Args::command().long_about(
        "CTDB's cluster lock (recovery lock) as a lockd resource lease. ctdbd runs it from \
         ctdb.conf and reads exactly one byte from its stdout: 0 the lease is taken and \
         held, 1 another holder has it (contention), 2 the acquire took longer than \
         --timeout, 3 any other error (bad arguments, no daemon, the lockspace not joined \
         by the local daemon, a refusal). Nothing else is written to stdout; messages go \
         to stderr, which ctdbd logs. After 0 it keeps running and holding the lease until \
         SIGTERM (release, exit 0), the lease is lost (exit 1 at once, without releasing: \
         ctdbd sees EOF and holds an election), or its parent is gone (release, exit 0). \
         The lease is registered with SANLK_RESTRICT_SIGKILL, and its fencing token (the \
         lease's lver) is logged.",
    );
    let man = new_man(cmd, "8");
    let mut extra = sections(
        &[
            (
                "LOCKD_RUN_DIR",
                "The daemon's run dir when --run-dir is not given. Every node must have the \
                 same cluster lock string (ctdbd compares them), so per-node settings come \
                 from here.",
            ),
            (
                "SANLOCK_RUN_DIR",
                "Used when LOCKD_RUN_DIR is unset; without either, /run/lockd.",
            ),
        ],
        &[
            (
                "0",
                "The lease was held and then let go: SIGTERM from ctdbd, its parent gone, or \
                 a signal while still acquiring.",
            ),
            (
                "1",
                "Contention (after writing 1), or the held lease was lost.",
            ),
            (
                "2",
                "The acquire did not finish within --timeout (after writing 2).",
            ),
            (
                "3",
                "Any other error (after writing 3), bad arguments included.",
            ),
            ("", "ctdbd reads the byte, not the exit status."),
        ],
        &[
            (
                "In /etc/ctdb/ctdb.conf (the lockspace ctdb joined by lockd on every node):",
                "[cluster]\n    \
                 cluster lock = !/usr/sbin/lockd-ctdb-mutex ctdb:reclock:/dev/disk/by-id/SHARED:1M",
            ),
            (
                "Try it by hand (prints 0 and holds the lease until Ctrl-C):",
                "lockd-ctdb-mutex ctdb:reclock:/dev/sdb:1M --timeout 10",
            ),
        ],
    );
    extra.push_str(&see_also(&["ctdb.7", "lockd.8", "lockd-daemon.8"]));
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
    for k in lockd_config::CONFIG_KEYS {
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
    let mut example = String::new();
    for k in lockd_config::CONFIG_KEYS {
        example.push_str(&format!("{} = {}\n", k.key, k.example));
    }
    s.push_str(&sections(
        &[(
            "LOCKD_RUN_DIR",
            "Overrides run_dir (the command line's --run-dir overrides both).",
        )],
        &[(
            "",
            "A file has none; the daemon exits with status 1 at start when the file cannot \
             be read, is not TOML, has an unknown key, or a value out of range (the key \
             and its range are named).",
        )],
        &[
            ("Every key with an example value:", example.trim_end()),
            (
                "Check a file before a restart:",
                "lockd doctor -c /etc/lockd/lockd.toml",
            ),
        ],
    ));
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
    pages.push(("lockd-killpath.8".into(), killpath_page()?));
    pages.push(("lockd-ctdb-mutex.8".into(), ctdb_mutex_page()?));
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
