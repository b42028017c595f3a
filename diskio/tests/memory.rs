//! Memory disks through the public `DirectDisk` API. Its own test binary: `memory::install`
//! changes every `DirectDisk` open in the process for good.

use std::path::Path;
use std::time::Duration;

use lockd_diskio::{memory, DirectDisk, DirectIoError, EngineKind};

const T: Duration = Duration::from_secs(1);

#[test]
fn installed_memory_disks_serve_every_open() {
    let disks = memory::install();
    let image = disks
        .create(Path::new("/lockd-mem/a"), 1 << 20, 512)
        .unwrap();
    for kind in [
        EngineKind::Threads,
        EngineKind::SharedRing,
        EngineKind::Inline,
    ] {
        let disk = DirectDisk::open_with(Path::new("/lockd-mem/a"), kind).unwrap();
        assert!(!disk.uses_io_uring());
        assert_eq!(
            (disk.sector_size(), disk.io_block(), disk.size()),
            (512, 512, 1 << 20)
        );
        disk.write(4096, &[5u8; 1024], T).unwrap();
        assert_eq!(
            disk.read(4096, 1024, T).unwrap().as_slice(),
            &[5u8; 1024][..]
        );
        // The daemon's checks still apply.
        assert!(matches!(
            disk.read(100, 512, T),
            Err(DirectIoError::Unaligned { .. })
        ));
        assert!(matches!(
            disk.read(1 << 20, 512, T),
            Err(DirectIoError::Failed { .. })
        ));
    }
    assert_eq!(image.snapshot(4096, 2).unwrap(), vec![5, 5]);

    // A failing image answers EIO (sanlock's -EIO at the protocol edge).
    let disk = DirectDisk::open(Path::new("/lockd-mem/a")).unwrap();
    image.set_failing(true);
    let e = disk.write(0, &[1u8; 512], T).unwrap_err();
    assert_eq!(e.rv(), -libc::EIO);
    image.set_failing(false);
    assert_eq!(image.snapshot(0, 512).unwrap(), vec![0u8; 512]);

    // Any other path, even one that exists on the file system, is not found.
    let e = DirectDisk::open(Path::new("/etc/hostname")).err().unwrap();
    assert_eq!(e.rv(), -libc::ENOENT);

    // 4096-byte sectors.
    disks
        .create(Path::new("/lockd-mem/4k"), 1 << 20, 4096)
        .unwrap();
    let disk = DirectDisk::open(Path::new("/lockd-mem/4k")).unwrap();
    assert_eq!(disk.io_block(), 4096);
    assert!(matches!(
        disk.write(512, &[0u8; 512], T),
        Err(DirectIoError::Unaligned { .. })
    ));
}
