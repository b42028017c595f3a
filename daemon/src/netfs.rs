//! Whether the holders of a failed lockspace have files open on a network filesystem
//! (NFS, SMB/CIFS, Ceph): a killed process's writes to one stay queued in the kernel's
//! client and land when the server is reachable again, possibly after another host took
//! the lease, so the lockspace's watchdog must stay armed until the host resets
//! (`crate::lockspace`, `keep_armed_after_failure`), wherever the lockspace itself lives.
//!
//! Read from `/proc` only: each holder's own mount table (`/proc/PID/mountinfo`, its
//! mount namespace) and its open files (`/proc/PID/fd/*` links). Neither touches the
//! filesystems themselves, so an unreachable hard-mounted NFS server cannot block the
//! look (a `statfs` of the file would). A holder whose `/proc` cannot be read (it exited)
//! counts as not writing anywhere.

use std::path::Path;

/// mountinfo filesystem types whose client queues writes of a dead process.
const NETWORK_FS_TYPES: [&str; 6] = ["nfs", "nfs4", "cifs", "smb3", "smbfs", "ceph"];

/// Whether any of `pids` has an open file on a network filesystem.
pub fn holders_use_network_fs(pids: &[i32]) -> bool {
    pids.iter()
        .any(|&pid| pid > 0 && holder_uses_network_fs(pid))
}

fn holder_uses_network_fs(pid: i32) -> bool {
    let proc_dir = Path::new("/proc").join(pid.to_string());
    let Ok(mountinfo) = std::fs::read_to_string(proc_dir.join("mountinfo")) else {
        return false;
    };
    let mounts = network_mount_points(&mountinfo);
    if mounts.is_empty() {
        return false;
    }
    let Ok(fds) = std::fs::read_dir(proc_dir.join("fd")) else {
        return false;
    };
    fds.flatten().any(|fd| {
        std::fs::read_link(fd.path()).is_ok_and(|target| {
            target
                .to_str()
                .is_some_and(|t| mounts.iter().any(|m| under_mount(t, m)))
        })
    })
}

/// The mount points of network filesystems in a `/proc/PID/mountinfo` text (its fifth
/// field; the filesystem type follows the ` - ` separator). Octal escapes (`\040` for a
/// space) are decoded.
pub fn network_mount_points(mountinfo: &str) -> Vec<String> {
    mountinfo
        .lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let fstype = right.split_whitespace().next()?;
            let mount_point = left.split_whitespace().nth(4)?;
            NETWORK_FS_TYPES
                .contains(&fstype)
                .then(|| unescape_octal(mount_point))
        })
        .collect()
}

/// Whether the absolute path `path` lies under the mount point `mount`.
fn under_mount(path: &str, mount: &str) -> bool {
    if mount == "/" {
        return path.starts_with('/');
    }
    path.strip_prefix(mount)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

fn unescape_octal(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 4 <= b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
40 22 0:35 / /mnt/nfs rw,relatime shared:20 - nfs4 10.0.0.1:/bed rw,vers=4.1
41 22 0:36 / /srv/my\\040share rw shared:21 - cifs //srv/share rw
42 22 0:37 / /mnt/nfsish rw shared:22 - ext4 /dev/sdb rw
";

    #[test]
    fn network_mounts_are_found_by_type_and_unescaped() {
        assert_eq!(
            network_mount_points(MOUNTINFO),
            vec!["/mnt/nfs".to_string(), "/srv/my share".to_string()]
        );
    }

    #[test]
    fn a_path_is_under_a_mount_only_at_a_component_boundary() {
        assert!(under_mount("/mnt/nfs/vm.img", "/mnt/nfs"));
        assert!(under_mount("/mnt/nfs", "/mnt/nfs"));
        assert!(!under_mount("/mnt/nfsish/disk", "/mnt/nfs"));
        assert!(under_mount("/anything", "/"));
    }

    #[test]
    fn this_process_with_files_on_local_filesystems_uses_no_network_fs() {
        let f = std::fs::File::open("/proc/self/status").unwrap();
        assert!(!holders_use_network_fs(&[std::process::id() as i32]));
        drop(f);
        // A pid that does not exist counts as writing nowhere.
        assert!(!holders_use_network_fs(&[i32::MAX]));
    }
}
