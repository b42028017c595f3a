//! Leader records: decode, verify both kinds, geometry lookup; decode→encode is exact.
#![no_main]
use disk_format::leader::{LeaderExpect, LeaderKind, LeaderRecord};
use disk_format::{Geometry, Name};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(l) = LeaderRecord::decode(data) {
        assert_eq!(&l.encode()[..], &data[..200]);
        let name = Name::from_field(data);
        for kind in [LeaderKind::Delta, LeaderKind::Paxos] {
            let _ = l.verify(
                kind,
                &LeaderExpect { sector_size: Some(512), space_name: Some(&name), resource_name: Some(&name) },
            );
        }
        let _ = Geometry::from_leader(l.sector_size, l.flags);
    }
});
