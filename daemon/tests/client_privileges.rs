//! What a member of group `sanlock` (uid 65534 with the socket's group as a supplementary
//! group, through the real python3-sanlock and `sanlock client`) may make the root
//! daemon do (issue 21, items 2 and 3):
//! - paths it names are opened with its own rights: it cannot overwrite a file it cannot
//!   write, and a path under a directory it cannot search gives the same EACCES whether
//!   or not the file exists (as a sanlock daemon running as user sanlock answers), while
//!   its group's own disk works;
//! - its killpath runs as its uid and groups, not as root;
//! - it cannot request or examine away root's leases, remove root's lockspace, set
//!   events in it, or shut the daemon down (-EPERM), but may do so with its own;
//! - with `client_privileges = "sanlock"` sanlock's rules come back.

mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// The member: nobody, with the socket's group (`sanlock`) as a supplementary group.
const MEMBER_UID: u32 = 65534;
const RES_OFF: u64 = 1 << 20;

/// The gid of group `sanlock` (the daemon's socket group by default).
fn sanlock_gid() -> u32 {
    lockd_daemon::config::group_to_gid("sanlock").expect(
        "group `sanlock` is missing: install the Debian package `sanlock`, which creates it",
    )
}

fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode))
        .unwrap_or_else(|e| panic!("chmod {}: {e}", p.display()));
}

/// `setpriv` arguments that run a command as the member.
fn member_cmd(program: &str) -> Command {
    let mut c = Command::new("setpriv");
    c.arg(format!("--reuid={MEMBER_UID}"))
        .arg(format!("--regid={MEMBER_UID}"))
        .arg(format!("--groups={}", sanlock_gid()))
        .arg(program);
    c
}

/// Runs a python3-sanlock script as the member; returns its stdout (panics on failure).
fn member_python(d: &LockdDaemon, script: &str) -> String {
    let out = run(member_cmd(PYTHON)
        .args(["-c", script])
        .env("SANLOCK_RUN_DIR", &d.run_dir));
    assert!(
        out.status.success(),
        "member's python failed: {}\nstdout: {}\ndaemon log:\n{}",
        String::from_utf8_lossy(&out.stderr),
        stdout(&out),
        tail(&d.log_text(), 30)
    );
    stdout(&out)
}

/// A long-running python3-sanlock client of the member's.
fn member_child(d: &LockdDaemon, script: &str) -> PyChild {
    let mut child = member_cmd(PYTHON)
        .args(["-u", "-c", script])
        .env("SANLOCK_RUN_DIR", &d.run_dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the member's python client");
    let stdout = std::io::BufReader::new(child.stdout.take().expect("piped stdout"));
    PyChild { child, stdout }
}

/// `sanlock client ARGS` as the member.
fn member_sanlock_client(d: &LockdDaemon, args: &[&str]) -> Output {
    run(member_cmd("sanlock")
        .arg("client")
        .args(args)
        .env("SANLOCK_RUN_DIR", &d.run_dir))
}

/// A python snippet defining `t(name, f)`: prints `name ok` or `name errno N`.
const TRY: &str = "import sanlock, os, time\ndef t(name, f):\n    try:\n        f()\n        \
                   print(name, 'ok')\n    except sanlock.SanlockException as e:\n        \
                   print(name, 'errno', e.errno)\n";

/// The value printed for `name` by [`TRY`]'s `t`.
fn result_of<'a>(out: &'a str, name: &str) -> &'a str {
    out.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|r| r.strip_prefix(' ')))
        .unwrap_or_else(|| panic!("no result for {name:?} in:\n{out}"))
}

/// A scratch dir the member can reach, with:
/// - `disk`: lockspace `ls1` at 0 and resource `res1` at 1 MiB, root:sanlock 0660 (the
///   member writes it through its supplementary group);
/// - `pub/victim`: root's 0644 file full of 0x5a (readable, not writable, by the member);
/// - `priv/` (root's, 0700) with `exists`, a valid resource, and no `missing`;
/// - `out/` (0777) for what the member's programs write.
struct Setup {
    s: Scratch,
    disk: PathBuf,
    victim: PathBuf,
    private: PathBuf,
    out: PathBuf,
}

impl Setup {
    fn new(tag: &str) -> Setup {
        require_tool("setpriv", "util-linux");
        require_tool("sanlock", "sanlock");
        require_python_sanlock();
        let s = Scratch::new(tag);
        chmod(&s.dir, 0o755);
        let disk = s.file("disk", 4);
        init_lockspace("ls1", &disk, 0);
        init_resource("ls1", "res1", &disk, RES_OFF);
        std::os::unix::fs::chown(&disk, Some(0), Some(sanlock_gid())).unwrap();
        chmod(&disk, 0o660);
        let public = s.dir.join("pub");
        std::fs::create_dir(&public).unwrap();
        chmod(&public, 0o755);
        let victim = public.join("victim");
        std::fs::write(&victim, vec![0x5a_u8; 4 << 20]).unwrap();
        chmod(&victim, 0o644);
        let private = s.dir.join("priv");
        std::fs::create_dir(&private).unwrap();
        chmod(&private, 0o700);
        let exists = private.join("exists");
        std::fs::File::create(&exists)
            .unwrap()
            .set_len(4 << 20)
            .unwrap();
        init_resource("ls1", "hidden", &exists, 0);
        let out = s.dir.join("out");
        std::fs::create_dir(&out).unwrap();
        chmod(&out, 0o777);
        Setup {
            s,
            disk,
            victim,
            private,
            out,
        }
    }

    /// Starts lockd (io_timeout 1, kill grace `grace_s`, config `config` when given) with
    /// its socket reachable by the member (run dir searchable; socket 0660 root:sanlock).
    fn daemon(&self, grace_s: &str, config: Option<&str>) -> LockdDaemon {
        let mut args = vec!["-g", grace_s];
        let conf_path = self.s.dir.join("lockd.toml");
        let conf_text = conf_path.display().to_string();
        if let Some(text) = config {
            std::fs::write(&conf_path, text).unwrap();
            args.extend(["-c", conf_text.as_str()]);
        }
        let d = LockdDaemon::start_args(&self.s, "hostA", &args, &[]);
        chmod(&d.run_dir, 0o755);
        let sock = std::fs::metadata(d.run_dir.join("sanlock.sock")).unwrap();
        assert_eq!(
            sock.gid(),
            sanlock_gid(),
            "the socket belongs to group sanlock"
        );
        assert_eq!(sock.mode() & 0o777, 0o660);
        d
    }

    /// Root joins `ls1` (host_id 1, io_timeout 1).
    fn root_joins(&self, d: &LockdDaemon) {
        d.python(&format!(
            "import sanlock\nsanlock.add_lockspace(b'ls1', 1, b'{}', 0, iotimeout=1)",
            self.disk.display()
        ));
    }
}

fn wait_exit(c: &mut PyChild, secs: u64) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < deadline {
        if let Some(st) = c.child.try_wait().expect("wait") {
            return Some(st);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    None
}

/// Overwrites host 1's delta lease (O_DIRECT), so the next renewal fails the lockspace.
fn corrupt_host1_delta_lease(disk: &Path) {
    let out = run(Command::new("dd")
        .args([
            "if=/dev/urandom",
            "bs=512",
            "count=1",
            "conv=notrunc",
            "oflag=direct,sync",
        ])
        .arg(format!("of={}", disk.display())));
    assert!(out.status.success(), "dd failed: {out:?}");
}

#[test]
fn a_member_cannot_write_what_it_cannot_write_itself() {
    let st = Setup::new("priv-write");
    let d = st.daemon("40", None);
    st.root_joins(&d);
    let before_victim = std::fs::read(&st.victim).unwrap();
    let exists = st.private.join("exists");
    let before_exists = std::fs::read(&exists).unwrap();
    let (v, e, disk) = (st.victim.display(), exists.display(), st.disk.display());
    let out = member_python(
        &d,
        &format!(
            "{TRY}\
             t('write_resource victim', lambda: sanlock.write_resource(b'LS', b'x', [(b'{v}', 0)]))\n\
             t('write_lockspace victim', lambda: sanlock.write_lockspace(b'LS', b'{v}'))\n\
             t('write_resource private', lambda: sanlock.write_resource(b'LS', b'x', [(b'{e}', 0)]))\n\
             t('add_lockspace victim', lambda: sanlock.add_lockspace(b'LSV', 1, b'{v}', 0, iotimeout=1))\n\
             fd = sanlock.register()\n\
             t('acquire victim', lambda: sanlock.acquire(b'ls1', b'res1', [(b'{v}', 0)], slkfd=fd))\n\
             t('write_resource own', lambda: sanlock.write_resource(b'ls1', b'mine', [(b'{disk}', {own})]))\n\
             t('read_resource own', lambda: sanlock.read_resource(b'{disk}', {own}))\n\
             t('acquire own', lambda: sanlock.acquire(b'ls1', b'mine', [(b'{disk}', {own})], slkfd=fd))\n\
             t('release own', lambda: sanlock.release(b'ls1', b'mine', [(b'{disk}', {own})], slkfd=fd))\n\
             t('acquire own and victim', lambda: sanlock.acquire(b'ls1', b'mine', [(b'{disk}', {own}), (b'{disk}', {two}), (b'{v}', 0)], slkfd=fd))\n\
             t('read_resource victim', lambda: sanlock.read_resource(b'{v}'))\n",
            own = 3u64 << 20,
            two = 2u64 << 20,
        ),
    );
    println!("{out}");
    // As a sanlock daemon running as user sanlock answers: EACCES for a resource,
    // ENODEV for a lockspace area.
    assert_eq!(result_of(&out, "write_resource victim"), "errno 13");
    assert_eq!(result_of(&out, "write_lockspace victim"), "errno 19");
    assert_eq!(result_of(&out, "write_resource private"), "errno 13");
    assert_eq!(result_of(&out, "add_lockspace victim"), "errno 19");
    assert_eq!(result_of(&out, "acquire victim"), "errno 13");
    assert_eq!(
        std::fs::read(&st.victim).unwrap(),
        before_victim,
        "root's file was written"
    );
    assert_eq!(
        std::fs::read(&exists).unwrap(),
        before_exists,
        "root's file was written"
    );
    // Its group's own disk works, through the supplementary group.
    assert_eq!(result_of(&out, "write_resource own"), "ok");
    assert_eq!(result_of(&out, "read_resource own"), "ok");
    assert_eq!(result_of(&out, "acquire own"), "ok");
    assert_eq!(result_of(&out, "release own"), "ok");
    // A lease on three disks, one of which it may not write: refused as its own open(2)
    // is, not served over the two it may (which sanlock, opening as itself, would do).
    assert_eq!(result_of(&out, "acquire own and victim"), "errno 13");
    // Reading needs read permission only (it could read the file itself): the victim
    // holds no leader, so the read gets as far as the magic check.
    assert_ne!(result_of(&out, "read_resource victim"), "errno 13");
    // Root keeps full rights.
    let out = d.python(&format!(
        "{TRY}t('write_resource victim', lambda: sanlock.write_resource(b'LS', b'x', [(b'{v}', 0)]))\n"
    ));
    assert_eq!(result_of(&out, "write_resource victim"), "ok");
}

#[test]
fn missing_and_unreadable_paths_in_a_closed_directory_look_the_same() {
    let st = Setup::new("priv-exist");
    let d = st.daemon("40", None);
    let (e, m) = (
        st.private.join("exists").display().to_string(),
        st.private.join("missing").display().to_string(),
    );
    let script = format!(
        "{TRY}\
         t('read_resource exists', lambda: sanlock.read_resource(b'{e}'))\n\
         t('read_resource missing', lambda: sanlock.read_resource(b'{m}'))\n\
         t('read_resource_owners exists', lambda: sanlock.read_resource_owners(b'ls1', b'hidden', [(b'{e}', 0)]))\n\
         t('read_resource_owners missing', lambda: sanlock.read_resource_owners(b'ls1', b'hidden', [(b'{m}', 0)]))\n\
         t('read_lockspace exists', lambda: sanlock.read_lockspace(b'{e}'))\n\
         t('read_lockspace missing', lambda: sanlock.read_lockspace(b'{m}'))\n\
         t('write_resource exists', lambda: sanlock.write_resource(b'LS', b'x', [(b'{e}', 0)]))\n\
         t('write_resource missing', lambda: sanlock.write_resource(b'LS', b'x', [(b'{m}', 0)]))\n\
         t('add_lockspace exists', lambda: sanlock.add_lockspace(b'LSE', 1, b'{e}', 0, iotimeout=1))\n\
         t('add_lockspace missing', lambda: sanlock.add_lockspace(b'LSM', 1, b'{m}', 0, iotimeout=1))\n"
    );
    let out = member_python(&d, &script);
    println!("{out}");
    for what in ["read_resource", "read_resource_owners", "write_resource"] {
        assert_eq!(
            result_of(&out, &format!("{what} exists")),
            "errno 13",
            "{what}"
        );
        assert_eq!(
            result_of(&out, &format!("{what} missing")),
            "errno 13",
            "{what}"
        );
    }
    assert_eq!(result_of(&out, "read_lockspace exists"), "errno 19");
    assert_eq!(result_of(&out, "read_lockspace missing"), "errno 19");
    assert_eq!(result_of(&out, "add_lockspace exists"), "errno 19");
    assert_eq!(result_of(&out, "add_lockspace missing"), "errno 19");
    // Root tells them apart, as before.
    let out = d.python(&script);
    assert_eq!(result_of(&out, "read_resource exists"), "ok");
    assert_eq!(result_of(&out, "read_resource missing"), "errno 2");
}

/// A holder script: registers, sets killpath `kp` (when given), acquires `res1`, prints its
/// pid and sleeps.
fn holder_script(disk: &Path, kp: Option<&Path>) -> String {
    let kp = kp
        .map(|k| {
            format!(
                "sanlock.killpath(b'{}', [b'fence'], slkfd=fd)\n",
                k.display()
            )
        })
        .unwrap_or_default();
    format!(
        "import sanlock, os, time\nfd = sanlock.register()\n{kp}\
         sanlock.acquire(b'ls1', b'res1', [(b'{d}', {RES_OFF})], slkfd=fd)\n\
         print(os.getpid())\ntime.sleep(600)\n",
        d = disk.display()
    )
}

/// A killpath program that appends `uid gid groups` to `out/killpath.ids`.
fn id_killpath(st: &Setup) -> (PathBuf, PathBuf) {
    let ids = st.out.join("killpath.ids");
    let script = st.s.dir.join("pub").join("fence.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\necho \"$(id -u) $(id -g) $(id -G)\" >> {}\n",
            ids.display()
        ),
    )
    .unwrap();
    chmod(&script, 0o755);
    (script, ids)
}

#[test]
fn a_members_killpath_runs_as_the_member() {
    require_tool("dd", "coreutils");
    let st = Setup::new("priv-killpath");
    let d = st.daemon("3", None);
    st.root_joins(&d);
    let (script, ids) = id_killpath(&st);
    let mut holder = member_child(&d, &holder_script(&st.disk, Some(&script)));
    holder.line();
    corrupt_host1_delta_lease(&st.disk);
    assert!(
        wait_for(15, || std::fs::read_to_string(&ids)
            .is_ok_and(|t| !t.is_empty())),
        "the killpath did not run; log:\n{}",
        tail(&d.log_text(), 30)
    );
    let text = std::fs::read_to_string(&ids).unwrap();
    let words: Vec<&str> = text.split_whitespace().collect();
    assert_eq!(words[0], MEMBER_UID.to_string(), "killpath uid: {text}");
    assert_eq!(words[1], MEMBER_UID.to_string(), "killpath gid: {text}");
    assert!(
        words[2..].contains(&sanlock_gid().to_string().as_str()),
        "killpath groups keep the client's: {text}"
    );
    assert!(
        !words[2..].contains(&"0"),
        "killpath has root's group: {text}"
    );
    // The escalation goes on as before: SIGKILL after the grace period.
    let status = wait_exit(&mut holder, 30).expect("the holder was not killed");
    assert_eq!(status.signal(), Some(libc::SIGKILL));
}

/// The member tries everything that acts on root's holder, lockspace and daemon.
fn member_attacks(st: &Setup, d: &LockdDaemon) -> String {
    let disk = st.disk.display();
    member_python(
        d,
        &format!(
            "{TRY}\
             t('request force', lambda: sanlock.request(b'ls1', b'res1', [(b'{disk}', {RES_OFF})], action=sanlock.REQ_FORCE))\n\
             t('set_event', lambda: sanlock.set_event(b'ls1', 1, 0, 1))\n"
        ),
    )
}

#[test]
fn a_member_cannot_kill_roots_holders_remove_roots_lockspace_or_stop_the_daemon() {
    let st = Setup::new("priv-uid");
    let mut d = st.daemon("40", None);
    st.root_joins(&d);
    let mut holder = d.python_child(&holder_script(&st.disk, None));
    holder.line();
    let out = member_attacks(&st, &d);
    println!("{out}");
    assert_eq!(result_of(&out, "request force"), "errno 1");
    assert_eq!(result_of(&out, "set_event"), "errno 1");
    // EXAMINE (which would act on a request record) is refused too.
    let spec = format!("ls1:res1:{}:{RES_OFF}", st.disk.display());
    let ex = member_sanlock_client(&d, &["examine", "-r", &spec]);
    let ex_text = format!("{}{}", stdout(&ex), String::from_utf8_lossy(&ex.stderr));
    assert!(
        ex_text.contains("examine done -1"),
        "examine as the member (-EPERM is -1): {ex_text}"
    );
    // RELEASE with SANLK_REL_ORPHAN (root's orphans) in root's lockspace, on the member's
    // registered connection, as raw protocol (python3-sanlock 3.8 has no call for it):
    // header, then a resource head.
    let orphans = member_python(
        &d,
        "import socket, struct, os\n\
         import sanlock\n\
         s = socket.socket(fileno=sanlock.register())\n\
         res = b'ls1'.ljust(48, b'\\0') + bytes(48) + bytes(32)\n\
         s.sendall(struct.pack('<8I', 0x04282010, 1, 8, 0x4, 32 + len(res), 0, 1, 0xFFFFFFFF) + res)\n\
         h = s.recv(32)\n\
         print('orphans', struct.unpack('<8i', h)[6])\n",
    );
    assert_eq!(
        result_of(&orphans, "orphans"),
        "-1",
        "release of root's orphans as the member: {orphans}"
    );
    // SET_CONFIG on root's lockspace.
    let sc = member_sanlock_client(&d, &["set_config", "-s", "ls1", "-u", "1"]);
    let sc_text = format!("{}{}", stdout(&sc), String::from_utf8_lossy(&sc.stderr));
    assert!(
        sc_text.contains("set_config done -1"),
        "set_config as the member: {sc_text}"
    );
    // rem_lockspace of root's lockspace.
    let out = member_python(
        &d,
        &format!(
            "{TRY}t('rem_lockspace', lambda: sanlock.rem_lockspace(b'ls1', 1, b'{}', 0))\n",
            st.disk.display()
        ),
    );
    assert_eq!(result_of(&out, "rem_lockspace"), "errno 1");
    // SHUTDOWN, forced, with and without waiting.
    let sd = member_sanlock_client(&d, &["shutdown", "-f", "1", "-w", "1"]);
    let sd_text = format!("{}{}", stdout(&sd), String::from_utf8_lossy(&sd.stderr));
    assert!(
        sd_text.contains("shutdown done -1"),
        "shutdown -w as the member (-EPERM is -1): {sd_text}"
    );
    let _ = member_sanlock_client(&d, &["shutdown", "-f", "1"]);
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        matches!(d.child.try_wait(), Ok(None)),
        "the member stopped the daemon; log:\n{}",
        tail(&d.log_text(), 30)
    );
    assert!(
        matches!(holder.child.try_wait(), Ok(None)),
        "root's holder was killed; log:\n{}",
        tail(&d.log_text(), 30)
    );
    let spaces = d.python("import sanlock\nprint(len(sanlock.get_lockspaces()))");
    assert_eq!(spaces.trim(), "1", "root's lockspace is still joined");
    let log = d.log_text();
    assert!(
        log.contains("not allowed for this uid"),
        "{}",
        tail(&log, 30)
    );

    // Its own lockspace (on a disk of its group) it may manage, and examine.
    let disk2 = st.s.file("disk2", 2);
    init_lockspace("mine", &disk2, 0);
    std::os::unix::fs::chown(&disk2, Some(0), Some(sanlock_gid())).unwrap();
    chmod(&disk2, 0o660);
    let d2 = disk2.display();
    let out = member_python(
        &d,
        &format!(
            "{TRY}\
             t('add own', lambda: sanlock.add_lockspace(b'mine', 1, b'{d2}', 0, iotimeout=1))\n\
             t('set_event own', lambda: sanlock.set_event(b'mine', 1, 0, 1))\n\
             t('rem own', lambda: sanlock.rem_lockspace(b'mine', 1, b'{d2}', 0))\n"
        ),
    );
    println!("{out}");
    assert_eq!(result_of(&out, "add own"), "ok");
    assert_eq!(result_of(&out, "set_event own"), "ok");
    assert_eq!(result_of(&out, "rem own"), "ok");
    let out = member_python(
        &d,
        &format!("{TRY}t('add own', lambda: sanlock.add_lockspace(b'mine', 1, b'{d2}', 0, iotimeout=1))\n"),
    );
    assert_eq!(result_of(&out, "add own"), "ok");
    let sc = member_sanlock_client(&d, &["set_config", "-s", "mine", "-u", "1"]);
    let sc_text = format!("{}{}", stdout(&sc), String::from_utf8_lossy(&sc.stderr));
    assert!(
        sc_text.contains("set_config done 0"),
        "set_config of its own lockspace: {sc_text}"
    );
    // Root may still do all of it.
    let out = d.python(&format!(
        "{TRY}t('rem_lockspace', lambda: sanlock.rem_lockspace(b'ls1', 1, b'{}', 0))\n",
        st.disk.display()
    ));
    assert_eq!(result_of(&out, "rem_lockspace"), "ok");
    let status = wait_exit(&mut holder, 10).expect("root's own removal kills its holder");
    assert_eq!(status.signal(), Some(libc::SIGKILL));
    d.stop();
}

#[test]
fn client_privileges_sanlock_restores_sanlocks_rules() {
    require_tool("dd", "coreutils");
    let st = Setup::new("priv-compat");
    let mut d = st.daemon("3", Some("client_privileges = \"sanlock\"\n"));
    st.root_joins(&d);
    // Root's holder of res1; the member's holder of res2 with a killpath.
    let mut holder = d.python_child(&holder_script(&st.disk, None));
    holder.line();
    init_resource("ls1", "res2", &st.disk, 2 * RES_OFF);
    let (script, ids) = id_killpath(&st);
    let member_holder_script = holder_script(&st.disk, Some(&script)).replace(
        &format!("b'res1', [(b'{}', {RES_OFF})]", st.disk.display()),
        &format!("b'res2', [(b'{}', {})]", st.disk.display(), 2 * RES_OFF),
    );
    let mut member_holder = member_child(&d, &member_holder_script);
    member_holder.line();
    // As with sanlock: the member's forced request and an examine SIGKILL root's holder.
    let out = member_attacks(&st, &d);
    println!("{out}");
    assert_eq!(result_of(&out, "request force"), "ok");
    assert_eq!(result_of(&out, "set_event"), "ok");
    let spec = format!("ls1:res1:{}:{RES_OFF}", st.disk.display());
    let ex = member_sanlock_client(&d, &["examine", "-r", &spec]);
    assert!(ex.status.success(), "examine: {ex:?}");
    let status = wait_exit(&mut holder, 15).expect("root's holder was not killed");
    assert_eq!(status.signal(), Some(libc::SIGKILL));
    // The member's killpath runs as root.
    corrupt_host1_delta_lease(&st.disk);
    assert!(
        wait_for(15, || std::fs::read_to_string(&ids)
            .is_ok_and(|t| !t.is_empty())),
        "the killpath did not run; log:\n{}",
        tail(&d.log_text(), 30)
    );
    let text = std::fs::read_to_string(&ids).unwrap();
    assert_eq!(text.split_whitespace().next(), Some("0"), "{text}");
    let _ = wait_exit(&mut member_holder, 30);
    // And the member may shut the daemon down.
    let _ = member_sanlock_client(&d, &["shutdown", "-f", "1"]);
    assert!(
        wait_for(15, || matches!(d.child.try_wait(), Ok(Some(_)))),
        "the member's forced shutdown did not stop the daemon; log:\n{}",
        tail(&d.log_text(), 30)
    );
    d.stop();
}
