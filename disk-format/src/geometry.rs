//! Sector size × align size → max hosts, and the flag bits that record them.
//!
//! Valid combinations (sanlock's `size_to_max_hosts`): 512/1M → 2000, 4096/1M → 250,
//! 4096/2M → 500, 4096/4M → 1000, 4096/8M → 2000. Every other pair is rejected.

use serde::Serialize;

use crate::FormatError;

/// Leader flag: area is 1 MiB.
pub const LFL_ALIGN_1M: u32 = 0x10;
/// Leader flag: area is 2 MiB.
pub const LFL_ALIGN_2M: u32 = 0x20;
/// Leader flag: area is 4 MiB.
pub const LFL_ALIGN_4M: u32 = 0x40;
/// Leader flag: area is 8 MiB.
pub const LFL_ALIGN_8M: u32 = 0x80;
/// Mask of the leader align flags.
pub const LFL_ALIGN_MASK: u32 = 0xF0;

/// API flags (`SANLK_LSF_*`, `SANLK_RES_*`, `SANLK_RIF_*` share these values).
pub const API_ALIGN1M: u32 = 0x10;
pub const API_ALIGN2M: u32 = 0x20;
pub const API_ALIGN4M: u32 = 0x40;
pub const API_ALIGN8M: u32 = 0x80;
pub const API_SECTOR512: u32 = 0x100;
pub const API_SECTOR4K: u32 = 0x200;

/// Logical sector size of the lease storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum SectorSize {
    B512,
    B4096,
}

impl SectorSize {
    /// Bytes per sector.
    pub const fn bytes(self) -> u32 {
        match self {
            SectorSize::B512 => 512,
            SectorSize::B4096 => 4096,
        }
    }

    /// Parses 512 or 4096.
    pub fn from_bytes(n: u32) -> Option<SectorSize> {
        match n {
            512 => Some(SectorSize::B512),
            4096 => Some(SectorSize::B4096),
            _ => None,
        }
    }
}

/// Size of one lockspace or resource area.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum AlignSize {
    M1,
    M2,
    M4,
    M8,
}

impl AlignSize {
    /// Bytes in the area.
    pub const fn bytes(self) -> u64 {
        match self {
            AlignSize::M1 => 1 << 20,
            AlignSize::M2 => 2 << 20,
            AlignSize::M4 => 4 << 20,
            AlignSize::M8 => 8 << 20,
        }
    }

    /// Parses a byte count.
    pub fn from_bytes(n: u64) -> Option<AlignSize> {
        match n {
            0x10_0000 => Some(AlignSize::M1),
            0x20_0000 => Some(AlignSize::M2),
            0x40_0000 => Some(AlignSize::M4),
            0x80_0000 => Some(AlignSize::M8),
            _ => None,
        }
    }

    /// Parses `1M`, `2M`, `4M`, `8M` (as sanlock's `-A`), or a byte count.
    pub fn parse(text: &str) -> Option<AlignSize> {
        match text {
            "1M" | "1m" => Some(AlignSize::M1),
            "2M" | "2m" => Some(AlignSize::M2),
            "4M" | "4m" => Some(AlignSize::M4),
            "8M" | "8m" => Some(AlignSize::M8),
            _ => text.parse::<u64>().ok().and_then(AlignSize::from_bytes),
        }
    }

    /// The `LFL_ALIGN_*` leader flag.
    pub const fn leader_flag(self) -> u32 {
        match self {
            AlignSize::M1 => LFL_ALIGN_1M,
            AlignSize::M2 => LFL_ALIGN_2M,
            AlignSize::M4 => LFL_ALIGN_4M,
            AlignSize::M8 => LFL_ALIGN_8M,
        }
    }

    /// The `RHF_ALIGN_*` rindex header flag.
    pub const fn rindex_flag(self) -> u32 {
        self.leader_flag() >> 4
    }

    /// Short label: `1M` … `8M`.
    pub const fn label(self) -> &'static str {
        match self {
            AlignSize::M1 => "1M",
            AlignSize::M2 => "2M",
            AlignSize::M4 => "4M",
            AlignSize::M8 => "8M",
        }
    }
}

/// A valid sector/align pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct Geometry {
    pub sector_size: SectorSize,
    pub align_size: AlignSize,
}

impl Geometry {
    /// All five geometries sanlock supports.
    pub const ALL: [Geometry; 5] = [
        Geometry::of(SectorSize::B512, AlignSize::M1),
        Geometry::of(SectorSize::B4096, AlignSize::M1),
        Geometry::of(SectorSize::B4096, AlignSize::M2),
        Geometry::of(SectorSize::B4096, AlignSize::M4),
        Geometry::of(SectorSize::B4096, AlignSize::M8),
    ];

    const fn of(sector_size: SectorSize, align_size: AlignSize) -> Geometry {
        Geometry {
            sector_size,
            align_size,
        }
    }

    /// Validates a pair.
    pub fn new(sector_size: SectorSize, align_size: AlignSize) -> Result<Geometry, FormatError> {
        let g = Geometry::of(sector_size, align_size);
        if g.max_hosts_opt().is_none() {
            return Err(FormatError::Geometry {
                sector_size: sector_size.bytes(),
                align_bytes: align_size.bytes(),
            });
        }
        Ok(g)
    }

    /// The default sanlock picks when no size is given: the old rule, 512 → 1M and
    /// 4096 → 8M.
    pub const fn default_for(sector_size: SectorSize) -> Geometry {
        match sector_size {
            SectorSize::B512 => Geometry::of(SectorSize::B512, AlignSize::M1),
            SectorSize::B4096 => Geometry::of(SectorSize::B4096, AlignSize::M8),
        }
    }

    /// Reads the geometry recorded in a leader: `sector_size` plus the align flag, or
    /// the old rule when no align flag is set (areas written by sanlock ≤ 3.6).
    pub fn from_leader(sector_size: u32, flags: u32) -> Result<Geometry, FormatError> {
        let bad = FormatError::Geometry {
            sector_size,
            align_bytes: 0,
        };
        let sector = SectorSize::from_bytes(sector_size).ok_or(bad)?;
        let align = match flags & LFL_ALIGN_MASK {
            0 => return Ok(Geometry::default_for(sector)),
            LFL_ALIGN_1M => AlignSize::M1,
            LFL_ALIGN_2M => AlignSize::M2,
            LFL_ALIGN_4M => AlignSize::M4,
            LFL_ALIGN_8M => AlignSize::M8,
            _ => {
                return Err(FormatError::Geometry {
                    sector_size,
                    align_bytes: 0,
                })
            }
        };
        Geometry::new(sector, align)
    }

    /// Reads `SANLK_*_ALIGN*`/`SECTOR*` API flags. `Ok(None)` when neither is given;
    /// an error when only one of the two is given or the pair is invalid.
    pub fn from_api_flags(flags: u32) -> Result<Option<Geometry>, FormatError> {
        let sector = match flags & (API_SECTOR512 | API_SECTOR4K) {
            0 => None,
            API_SECTOR512 => Some(SectorSize::B512),
            API_SECTOR4K => Some(SectorSize::B4096),
            _ => {
                return Err(FormatError::Geometry {
                    sector_size: 0,
                    align_bytes: 0,
                })
            }
        };
        let align = match flags & LFL_ALIGN_MASK {
            0 => None,
            API_ALIGN1M => Some(AlignSize::M1),
            API_ALIGN2M => Some(AlignSize::M2),
            API_ALIGN4M => Some(AlignSize::M4),
            API_ALIGN8M => Some(AlignSize::M8),
            _ => {
                return Err(FormatError::Geometry {
                    sector_size: 0,
                    align_bytes: 0,
                })
            }
        };
        match (sector, align) {
            (None, None) => Ok(None),
            (Some(s), Some(a)) => Geometry::new(s, a).map(Some),
            (s, a) => Err(FormatError::Geometry {
                sector_size: s.map_or(0, SectorSize::bytes),
                align_bytes: a.map_or(0, AlignSize::bytes),
            }),
        }
    }

    /// API flags describing this geometry.
    pub const fn api_flags(self) -> u32 {
        let sector = match self.sector_size {
            SectorSize::B512 => API_SECTOR512,
            SectorSize::B4096 => API_SECTOR4K,
        };
        sector | self.align_size.leader_flag()
    }

    fn max_hosts_opt(self) -> Option<u64> {
        match (self.sector_size, self.align_size) {
            (SectorSize::B512, AlignSize::M1) => Some(2000),
            (SectorSize::B4096, AlignSize::M1) => Some(250),
            (SectorSize::B4096, AlignSize::M2) => Some(500),
            (SectorSize::B4096, AlignSize::M4) => Some(1000),
            (SectorSize::B4096, AlignSize::M8) => Some(2000),
            _ => None,
        }
    }

    /// Largest host_id (and number of delta-lease sectors / dblocks) in one area.
    pub fn max_hosts(self) -> u64 {
        // Invariant: a Geometry is only built through `new`/`ALL`/`default_for`, all of
        // which hold valid pairs.
        self.max_hosts_opt()
            .expect("Geometry holds only valid pairs")
    }

    /// Sector size in bytes.
    pub const fn sector_bytes(self) -> u64 {
        self.sector_size.bytes() as u64
    }

    /// Area size in bytes.
    pub const fn align_bytes(self) -> u64 {
        self.align_size.bytes()
    }

    /// Sectors in one area.
    pub const fn sectors_per_area(self) -> u64 {
        self.align_bytes() / self.sector_bytes()
    }

    /// Upper bound on rindex entries (`max_resources`) for this geometry.
    pub fn rindex_max_resources_cap(self) -> u32 {
        match (self.sector_size, self.align_size) {
            (SectorSize::B512, AlignSize::M1) => 16000,
            (SectorSize::B4096, AlignSize::M1) => 16000,
            (SectorSize::B4096, AlignSize::M2) => 32000,
            (SectorSize::B4096, AlignSize::M4) => 64000,
            _ => 128000,
        }
    }

    /// `512/1M`-style label.
    pub fn label(self) -> String {
        let s = match self.sector_size {
            SectorSize::B512 => "512",
            SectorSize::B4096 => "4K",
        };
        format!("{s}/{}", self.align_size.label())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table() {
        let hosts: Vec<u64> = Geometry::ALL.iter().map(|g| g.max_hosts()).collect();
        assert_eq!(hosts, vec![2000, 250, 500, 1000, 2000]);
        for a in [AlignSize::M2, AlignSize::M4, AlignSize::M8] {
            assert!(Geometry::new(SectorSize::B512, a).is_err());
        }
    }

    #[test]
    fn old_rule_and_flags() {
        let g = Geometry::from_leader(4096, 0).unwrap();
        assert_eq!(g.align_size, AlignSize::M8);
        let g = Geometry::from_leader(512, 0).unwrap();
        assert_eq!(g.align_size, AlignSize::M1);
        let g = Geometry::from_leader(4096, LFL_ALIGN_2M | 0x1).unwrap();
        assert_eq!(g.max_hosts(), 500);
        assert!(Geometry::from_leader(1024, LFL_ALIGN_1M).is_err());
        assert!(Geometry::from_leader(512, LFL_ALIGN_1M | LFL_ALIGN_2M).is_err());
        assert!(Geometry::from_leader(512, LFL_ALIGN_8M).is_err());
    }

    #[test]
    fn api_flags() {
        for g in Geometry::ALL {
            assert_eq!(Geometry::from_api_flags(g.api_flags()).unwrap(), Some(g));
        }
        assert_eq!(Geometry::from_api_flags(0).unwrap(), None);
        assert!(Geometry::from_api_flags(API_SECTOR4K).is_err());
        assert!(Geometry::from_api_flags(API_ALIGN1M).is_err());
        assert_eq!(AlignSize::M8.rindex_flag(), 0x8);
    }
}
