//! `lockd direct …`: read and write lease areas on storage without a daemon, byte
//! compatible with `sanlock direct`.

pub mod dump;
pub mod init;
pub mod read_leader;
pub mod rindex;

use anyhow::{bail, Result};
use disk_format::{AlignSize, Geometry, SectorSize};

use crate::disk::DirectDisk;

/// Picks the geometry from `-Z`/`-A` and the device, as sanlock does when a flag is
/// missing: sector size from the device (512 for files), align size by the old rule.
pub fn resolve_geometry(
    disk: &DirectDisk,
    sector_flag: Option<u32>,
    align_flag: Option<&str>,
) -> Result<Geometry> {
    let sector = match sector_flag {
        Some(n) => match SectorSize::from_bytes(n) {
            Some(s) => s,
            None => bail!("sector size {n} is invalid: use 512 or 4096"),
        },
        None => match SectorSize::from_bytes(disk.sector_size()) {
            Some(s) => s,
            None => bail!(
                "{}: logical sector size {} is not supported (512 or 4096)",
                disk.path().display(),
                disk.sector_size()
            ),
        },
    };
    let geometry = match align_flag {
        Some(text) => {
            let Some(align) = AlignSize::parse(text) else {
                bail!("align size {text:?} is invalid: use 1M, 2M, 4M or 8M");
            };
            Geometry::new(sector, align).map_err(|_| {
                anyhow::anyhow!(
                    "sector size {} with align size {} is not a valid combination \
                     (valid: 512/1M, 4096/1M, 4096/2M, 4096/4M, 4096/8M)",
                    sector.bytes(),
                    align.label()
                )
            })?
        }
        None => Geometry::default_for(sector),
    };
    if geometry.sector_size.bytes() < disk.io_block() {
        bail!(
            "{}: the storage has {}-byte logical sectors; {}-byte lease sectors cannot be \
             written to it (use -Z {})",
            disk.path().display(),
            disk.io_block(),
            geometry.sector_size.bytes(),
            disk.io_block()
        );
    }
    Ok(geometry)
}
