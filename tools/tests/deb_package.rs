//! The Debian package: `packaging/build-deb.sh` builds it into `$CARGO_TARGET_DIR`;
//! lintian reports no error and only the tags explained in packaging/README.md;
//! `packaging/test-deb.sh` installs it with apt (replacing the sanlock daemon package,
//! keeping libsanlock1 and python3-sanlock), checks the files (the libvirt qemu hook and
//! libvirt-leases.conf, the man pages of the helpers and of log-dump / renewal included),
//! runs drop-in mode
//! (sanlock clients without SANLOCK_RUN_DIR reach lockd at /run/sanlock) and purges it
//! with nothing left — all inside a private mount namespace over copy-on-write system
//! directories, so this machine's packages and /run are untouched.
//!
//! Needs root, and the Debian packages `lintian`, `sanlock`, `python3-sanlock`,
//! `dpkg-dev` (dpkg-shlibdeps) and `binutils` (strip, readelf).

use std::path::{Path, PathBuf};
use std::process::Command;

use lockd_system_tests::{require_command, require_root};

const LOCKD: &str = env!("CARGO_BIN_EXE_lockd");

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

#[test]
fn deb_builds_lints_installs_and_purges_cleanly() {
    require_root("dpkg, mount namespace");
    for (cmd, pkg) in [
        ("lintian", "lintian"),
        ("dpkg-shlibdeps", "dpkg-dev"),
        ("strip", "binutils"),
        ("readelf", "binutils"),
        ("unshare", "util-linux"),
        ("sanlock", "sanlock"),
    ] {
        require_command(cmd, pkg);
    }
    // The target dir this test was built in, given explicitly: the .deb must land there.
    let target_dir = Path::new(LOCKD)
        .parent()
        .and_then(Path::parent)
        .expect("target dir")
        .canonicalize()
        .expect("canonical target dir");
    let out = Command::new(root().join("packaging/build-deb.sh"))
        .env("CARGO_TARGET_DIR", &target_dir)
        .output()
        .expect("run build-deb.sh");
    assert!(
        out.status.success(),
        "build-deb.sh failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let deb = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    println!("built {}", deb.display());
    assert!(
        deb.starts_with(&target_dir),
        "{} not in $CARGO_TARGET_DIR",
        deb.display()
    );
    assert!(deb.exists());

    let lint = Command::new("lintian")
        .args(["-I", "--pedantic"])
        .arg(&deb)
        .output()
        .expect("run lintian");
    let tags = String::from_utf8_lossy(&lint.stdout).into_owned();
    println!("lintian:\n{tags}");
    let explained = std::fs::read_to_string(root().join("packaging/README.md")).unwrap();
    for line in tags.lines() {
        assert!(!line.starts_with("E:"), "lintian error: {line}");
        // "W: lockd: TAG [...]"
        let tag = line.split_whitespace().nth(2).unwrap_or("");
        assert!(
            explained.contains(&format!("`{tag}`")),
            "lintian tag {tag} is not explained in packaging/README.md: {line}"
        );
    }

    let t = Command::new(root().join("packaging/test-deb.sh"))
        .arg(&deb)
        .arg(LOCKD)
        .output()
        .expect("run test-deb.sh");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&t.stdout),
        String::from_utf8_lossy(&t.stderr)
    );
    println!("test-deb.sh:\n{text}");
    assert!(t.status.success(), "test-deb.sh failed");
    for step in [
        "reached lockd (version_str=lockd-",
        "removes only sanlock",
        "binaries stripped",
        "/etc/lockd/lockd.toml and /etc/lockd/libvirt-leases.conf are conffiles",
        "libvirt qemu hook and libvirt-leases.conf installed; the hook leaves unlisted domains alone",
        "postinst created the socket group",
        "python3-sanlock still installed",
        "python3-sanlock (SANLOCK_RUN_DIR unset) reached the installed lockd",
        "no file, directory, group or state of lockd is left",
        "test-deb: all passed",
    ] {
        assert!(text.contains(step), "missing step: {step}");
    }
    assert!(
        !Path::new("/run/sanlock").exists(),
        "/run/sanlock left behind"
    );
    assert!(
        !Path::new("/etc/lockd").exists(),
        "/etc/lockd on the real system"
    );
}
