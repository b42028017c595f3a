//! The command line both simulators share: lease-core's `lockd-sim` and lockd-core's
//! `lockd-daemon-sim` (`--seeds N [--first-seed S] [--hosts H] [--duration SECONDS]
//! [--model M] [--plant-bug NAME] [--verbose] [--trace]`). Each binary says which host
//! counts, planted bugs and models it knows; anything else is a one-line error, never a
//! panic.

use std::ops::RangeInclusive;

/// What a simulator was asked to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimArgs {
    pub seeds: u64,
    pub first_seed: u64,
    pub hosts: usize,
    pub duration_s: u64,
    /// `--plant-bug`, already known to the binary.
    pub bug_name: Option<String>,
    /// `--model`, one of the binary's models.
    pub model: Option<String>,
    pub verbose: bool,
    pub trace: bool,
}

/// What one binary accepts, and its defaults.
pub struct SimCli<'a> {
    pub usage: &'a str,
    pub hosts: RangeInclusive<u64>,
    pub default_hosts: usize,
    pub default_duration_s: u64,
    /// Whether a `--plant-bug` name is one of this binary's.
    pub known_bug: &'a dyn Fn(&str) -> bool,
    /// The `--model` values it takes (none: no `--model`).
    pub models: &'a [&'a str],
}

impl SimCli<'_> {
    /// Parses `args` (without the program name); `Err` holds the message to print.
    pub fn parse(&self, args: impl IntoIterator<Item = String>) -> Result<SimArgs, String> {
        let mut a = SimArgs {
            seeds: 100,
            first_seed: 1,
            hosts: self.default_hosts,
            duration_s: self.default_duration_s,
            bug_name: None,
            model: None,
            verbose: false,
            trace: false,
        };
        let mut it = args.into_iter();
        while let Some(flag) = it.next() {
            let mut value = |name: &str| it.next().ok_or(format!("{name} needs a value"));
            let num = |name: &str, v: String| {
                v.parse::<u64>()
                    .map_err(|_| format!("{name}: not a number: {v:?}"))
            };
            match flag.as_str() {
                "--seeds" => a.seeds = num("--seeds", value("--seeds")?)?,
                "--first-seed" => a.first_seed = num("--first-seed", value("--first-seed")?)?,
                "--hosts" => {
                    let h = num("--hosts", value("--hosts")?)?;
                    if !self.hosts.contains(&h) {
                        return Err(format!(
                            "--hosts must be {}..{}, got {h}",
                            self.hosts.start(),
                            self.hosts.end()
                        ));
                    }
                    a.hosts = h as usize;
                }
                "--duration" => {
                    a.duration_s = num("--duration", value("--duration")?)?;
                    if a.duration_s == 0 {
                        return Err("--duration must be positive".into());
                    }
                }
                "--plant-bug" => {
                    let name = value("--plant-bug")?;
                    if !(self.known_bug)(&name) {
                        return Err(format!("unknown planted bug {name:?}\n{}", self.usage));
                    }
                    a.bug_name = Some(name);
                }
                "--model" if !self.models.is_empty() => {
                    let m = value("--model")?;
                    if !self.models.contains(&m.as_str()) {
                        return Err(format!("unknown model {m:?}: {}", self.models.join(" or ")));
                    }
                    a.model = Some(m);
                }
                "--verbose" | "-v" => a.verbose = true,
                "--trace" => a.trace = true,
                "--help" | "-h" => return Err(self.usage.to_string()),
                other => return Err(format!("unknown argument {other:?}\n{}", self.usage)),
            }
        }
        Ok(a)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cli(models: &'static [&'static str]) -> SimCli<'static> {
        SimCli {
            usage: "usage: x",
            hosts: 2..=8,
            default_hosts: 4,
            default_duration_s: 600,
            known_bug: &|n| n == "bug-a",
            models,
        }
    }

    fn parse(c: &SimCli, args: &[&str]) -> Result<SimArgs, String> {
        c.parse(args.iter().map(|s| s.to_string()))
    }

    #[test]
    fn flags_defaults_and_errors() {
        let c = cli(&["lease", "fence"]);
        let a = parse(&c, &[]).unwrap();
        assert_eq!(
            (a.seeds, a.first_seed, a.hosts, a.duration_s),
            (100, 1, 4, 600)
        );
        let a = parse(
            &c,
            &[
                "--seeds",
                "7",
                "--first-seed",
                "9",
                "--hosts",
                "8",
                "--plant-bug",
                "bug-a",
                "--model",
                "fence",
                "-v",
            ],
        )
        .unwrap();
        assert_eq!((a.seeds, a.first_seed, a.hosts), (7, 9, 8));
        assert_eq!(a.bug_name.as_deref(), Some("bug-a"));
        assert_eq!(a.model.as_deref(), Some("fence"));
        assert!(a.verbose && !a.trace);
        for bad in [
            &["--seeds"][..],
            &["--seeds", "x"],
            &["--hosts", "9"],
            &["--hosts", "1"],
            &["--duration", "0"],
            &["--plant-bug", "bug-b"],
            &["--model", "other"],
            &["--what"],
        ] {
            assert!(parse(&c, bad).is_err(), "{bad:?} accepted");
        }
        // A binary without models refuses --model.
        assert!(parse(&cli(&[]), &["--model", "lease"]).is_err());
    }
}
