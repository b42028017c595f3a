//! Property tests over every decoder: arbitrary bytes never panic (decode, verify and
//! geometry lookups), and whatever decodes re-encodes to exactly the input bytes.

use disk_format::dblock::{decode_dblock_sector, ModeBlock, PaxosDblock};
use disk_format::leader::{LeaderExpect, LeaderKind, LeaderRecord};
use disk_format::rindex::{RindexEntry, RindexHeader};
use disk_format::{DeltaSector, Geometry, Name, RequestRecord};
use proptest::prelude::*;

fn any_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..700)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn leader_never_panics_and_round_trips(bytes in any_bytes()) {
        match LeaderRecord::decode(&bytes) {
            Ok(l) => {
                prop_assert_eq!(&l.encode()[..], &bytes[..200]);
                let ls = Name::new("ls").unwrap();
                for kind in [LeaderKind::Delta, LeaderKind::Paxos] {
                    let _ = l.verify(kind, &LeaderExpect { sector_size: Some(512), space_name: Some(&ls), resource_name: Some(&ls) });
                }
                let _ = Geometry::from_leader(l.sector_size, l.flags);
            }
            Err(e) => {
                prop_assert!(bytes.len() < 200);
                prop_assert!(e.sanlk_code() < 0);
            }
        }
    }

    #[test]
    fn sealed_leader_verifies(bytes in prop::collection::vec(any::<u8>(), 200)) {
        let mut l = LeaderRecord::decode(&bytes).unwrap();
        l.magic = disk_format::leader::PAXOS_DISK_MAGIC;
        l.version = disk_format::leader::PAXOS_DISK_VERSION;
        l.seal();
        prop_assert!(l.verify(LeaderKind::Paxos, &LeaderExpect::default()).is_ok());
        let again = LeaderRecord::decode(&l.encode()).unwrap();
        prop_assert_eq!(again, l);
    }

    #[test]
    fn dblock_sector_never_panics_and_round_trips(bytes in any_bytes()) {
        if let Ok(d) = PaxosDblock::decode(&bytes) {
            prop_assert_eq!(&d.encode()[..], &bytes[..56]);
            let _ = d.verify();
        }
        if let Ok(m) = ModeBlock::decode(&bytes) {
            prop_assert_eq!(&m.encode()[..], &bytes[..16]);
        }
        let _ = decode_dblock_sector(&bytes);
    }

    #[test]
    fn request_never_panics_and_round_trips(bytes in any_bytes()) {
        if let Ok(r) = RequestRecord::decode(&bytes) {
            prop_assert_eq!(&r.encode()[..], &bytes[..24]);
            let _ = r.verify();
        }
    }

    #[test]
    fn delta_sector_never_panics_and_round_trips(bytes in any_bytes()) {
        if let Ok(s) = DeltaSector::decode(&bytes) {
            let mut out = vec![0u8; 512];
            s.encode_into(&mut out);
            prop_assert_eq!(&out[..200], &bytes[..200]);
            prop_assert_eq!(&out[256..512], &bytes[256..512]);
            let by_bit: Vec<u64> = (1..=2048).filter(|&h| s.host_bit(h)).collect();
            prop_assert_eq!(s.hosts_in_bitmap(), by_bit);
        } else {
            prop_assert!(bytes.len() < 512);
        }
    }

    #[test]
    fn rindex_never_panics_and_round_trips(bytes in any_bytes(), offset in any::<u64>()) {
        if let Ok(h) = RindexHeader::decode(&bytes) {
            prop_assert_eq!(&h.encode()[..], &bytes[..80]);
            let _ = h.verify(Some(&Name::new("x").unwrap()), Some(offset));
        }
        if let Ok(e) = RindexEntry::decode(&bytes) {
            prop_assert_eq!(&e.encode()[..], &bytes[..64]);
            let _ = e.is_free();
        }
    }

    #[test]
    fn geometry_lookups_never_panic(sector in any::<u32>(), flags in any::<u32>()) {
        if let Ok(g) = Geometry::from_leader(sector, flags) {
            prop_assert!(g.max_hosts() >= 250);
            prop_assert!(g.align_bytes() % g.sector_bytes() == 0);
        }
        let _ = Geometry::from_api_flags(flags);
    }

    #[test]
    fn names_accept_only_short_text(text in ".{0,60}") {
        match Name::new(&text) {
            Ok(n) => {
                prop_assert!(text.len() <= 48 && !text.is_empty());
                prop_assert_eq!(n.as_bytes(), text.as_bytes());
            }
            Err(_) => prop_assert!(text.len() > 48 || text.is_empty() || text.contains('\0')),
        }
    }
}
