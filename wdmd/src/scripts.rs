//! Test scripts (`-S 1`, directory `-s`, default `/etc/wdmd.d`).
//!
//! Every test each executable regular file in the directory is started (unless
//! still running from an earlier test). A script passes if it exits 0 within
//! `interval - 1` seconds; one that is still running then fails that test and
//! keeps running, and is SIGKILLed once it has run `kill_after` seconds
//! (`-k N`, 0 = never).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// One script and its counters (shown by `--dump`).
#[derive(Debug)]
pub struct Script {
    /// File name.
    pub name: String,
    path: PathBuf,
    child: Option<Child>,
    /// CLOCK_MONOTONIC seconds of the last start.
    pub start: u64,
    started_at: Option<Instant>,
    /// Exit status of the last finished run (-1 if none, -2 if killed/by signal).
    pub last_result: i32,
    /// Runs started.
    pub run_count: u32,
    /// Tests failed.
    pub fail_count: u32,
    /// Tests passed.
    pub good_count: u32,
    /// Kills.
    pub kill_count: u32,
    /// Tests where it was still running.
    pub long_count: u32,
}

impl Script {
    /// Pid of the running instance, or 0.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(Child::id).unwrap_or(0)
    }
}

/// The scripts of one directory.
#[derive(Debug, Default)]
pub struct Scripts {
    /// Loaded scripts.
    pub scripts: Vec<Script>,
}

impl Scripts {
    /// Load every executable regular file of `dir` (a missing dir means none).
    pub fn load(dir: &Path) -> std::io::Result<Scripts> {
        let mut scripts = Vec::new();
        let rd = match std::fs::read_dir(dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Scripts::default()),
            Err(e) => return Err(e),
        };
        for e in rd {
            let e = e?;
            let md = match std::fs::metadata(e.path()) {
                Ok(m) => m,
                Err(_) => continue,
            };
            if !md.is_file() || md.permissions().mode() & 0o111 == 0 {
                continue;
            }
            scripts.push(Script {
                name: e.file_name().to_string_lossy().into_owned(),
                path: e.path(),
                child: None,
                start: 0,
                started_at: None,
                last_result: -1,
                run_count: 0,
                fail_count: 0,
                good_count: 0,
                kill_count: 0,
                long_count: 0,
            });
        }
        scripts.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(Scripts { scripts })
    }

    /// Run one test round; returns the number of failures. Blocks at most
    /// `interval - 1` seconds (0.5 s when the interval is 1 s).
    pub fn test(&mut self, interval: u64, kill_after: u64, now: u64) -> usize {
        if self.scripts.is_empty() {
            return 0;
        }
        for s in &mut self.scripts {
            if s.child.is_none() {
                match Command::new(&s.path)
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .spawn()
                {
                    Ok(c) => {
                        s.child = Some(c);
                        s.start = now;
                        s.started_at = Some(Instant::now());
                        s.run_count += 1;
                    }
                    Err(e) => {
                        tracing::error!("script {} cannot start: {e}", s.name);
                        s.last_result = -1;
                    }
                }
            }
        }
        let budget = if interval >= 2 {
            Duration::from_secs(interval - 1)
        } else {
            Duration::from_millis(500)
        };
        let deadline = Instant::now() + budget;
        let mut pending: Vec<bool> = self.scripts.iter().map(|s| s.child.is_some()).collect();
        let mut passed = vec![false; self.scripts.len()];
        loop {
            for (i, s) in self.scripts.iter_mut().enumerate() {
                if !pending[i] {
                    continue;
                }
                let Some(c) = s.child.as_mut() else {
                    pending[i] = false;
                    continue;
                };
                match c.try_wait() {
                    Ok(Some(st)) => {
                        s.last_result = st.code().unwrap_or(-2);
                        passed[i] = st.success();
                        s.child = None;
                        pending[i] = false;
                    }
                    Ok(None) => {}
                    Err(e) => {
                        tracing::error!("script {} wait: {e}", s.name);
                        pending[i] = false;
                    }
                }
            }
            if !pending.iter().any(|p| *p) || Instant::now() >= deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let mut fails = 0;
        for (i, s) in self.scripts.iter_mut().enumerate() {
            if passed[i] {
                s.good_count += 1;
                continue;
            }
            fails += 1;
            s.fail_count += 1;
            if let Some(c) = s.child.as_mut() {
                s.long_count += 1;
                let ran = s.started_at.map(|t| t.elapsed().as_secs()).unwrap_or(0);
                if kill_after > 0 && ran >= kill_after {
                    tracing::error!("script {} killed after {ran} s", s.name);
                    let _ = c.kill();
                    let _ = c.wait();
                    s.child = None;
                    s.kill_count += 1;
                    s.last_result = -2;
                } else {
                    tracing::error!("script {} still running, test failed", s.name);
                }
            } else {
                tracing::error!("script {} failed, result {}", s.name, s.last_result);
            }
        }
        fails
    }
}

impl Drop for Scripts {
    fn drop(&mut self) {
        for s in &mut self.scripts {
            if let Some(c) = s.child.as_mut() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn script(dir: &Path, name: &str, body: &str) {
        let p = dir.join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    #[test]
    fn pass_fail_slow_and_kill() {
        let d = tempfile::tempdir().unwrap();
        script(d.path(), "a-ok", "exit 0");
        script(d.path(), "b-bad", "exit 3");
        script(d.path(), "c-slow", "exec sleep 30");
        std::fs::write(d.path().join("d-notexec"), "exit 1").unwrap();
        let mut s = Scripts::load(d.path()).unwrap();
        assert_eq!(s.scripts.len(), 3);
        // interval 2 -> budget 1 s
        assert_eq!(s.test(2, 0, 100), 2);
        assert_eq!(s.scripts[0].good_count, 1);
        assert_eq!(s.scripts[1].last_result, 3);
        assert!(s.scripts[2].pid() > 0);
        assert_eq!(s.scripts[2].long_count, 1);
        // Still running next round, killed with kill_after 1.
        std::thread::sleep(Duration::from_millis(600));
        assert_eq!(s.test(2, 1, 101), 2);
        assert_eq!(s.scripts[2].kill_count, 1);
        assert_eq!(s.scripts[2].pid(), 0);
        assert_eq!(s.scripts[0].run_count, 2);
    }

    #[test]
    fn missing_dir_is_empty() {
        let mut s = Scripts::load(Path::new("/nonexistent/wdmd.d")).unwrap();
        assert_eq!(s.test(10, 0, 1), 0);
    }
}
