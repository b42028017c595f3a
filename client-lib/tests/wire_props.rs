//! Property tests: decoders never panic on arbitrary bytes, and encode→decode round-trips.

use client_lib::wire::*;
use client_lib::{
    DiskLocation, Header, Host, HostEvent, Lockspace, Options, Resource, ResourceHead,
};
use disk_format::Name;
use proptest::prelude::*;

fn name_strategy() -> impl Strategy<Value = Name> {
    proptest::collection::vec(any::<u8>(), 48).prop_map(|v| Name::from_field(&v))
}

fn disk_strategy() -> impl Strategy<Value = DiskLocation> {
    (
        proptest::collection::vec(any::<u8>(), 1040),
        any::<u64>(),
        any::<u32>(),
    )
        .prop_map(|(mut raw, off, pad)| {
            raw[1024..1032].copy_from_slice(&off.to_ne_bytes());
            raw[1032..1036].copy_from_slice(&pad.to_ne_bytes());
            DiskLocation::decode(&raw).expect("1040 bytes always decode")
        })
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..3000)) {
        let _ = Header::decode(&bytes);
        let _ = DiskLocation::decode(&bytes);
        let _ = ResourceHead::decode(&bytes);
        let _ = Resource::decode(&bytes, 4);
        let _ = Resource::decode_prefix(&bytes, 4);
        let _ = Lockspace::decode(&bytes);
        let _ = Options::decode(&bytes);
        let _ = Host::decode(&bytes);
        let _ = HostEvent::decode(&bytes);
        let _ = State::decode(&bytes);
        let _ = EventCb::decode(&bytes);
        if let Ok(h) = Header::decode(bytes.get(..32).unwrap_or(&[])) {
            let _ = h.payload_len(1 << 20);
        }
    }

    #[test]
    fn fixed_size_prefixes_decode(bytes in proptest::collection::vec(any::<u8>(), 1104)) {
        // Every exact-size slice decodes and re-encodes to the same bytes.
        let h = Header::decode(&bytes[..32]).unwrap();
        prop_assert_eq!(&h.encode()[..], &bytes[..32]);
        let ls = Lockspace::decode(&bytes).unwrap();
        prop_assert_eq!(ls.encode(), bytes.clone());
        let mut out = Vec::new();
        Host::decode(&bytes[..32]).unwrap().encode_into(&mut out);
        State::decode(&bytes[..80]).unwrap().encode_into(&mut out);
        Options::decode(&bytes[..56]).unwrap().encode_into(&mut out);
        let mut want = bytes[..32].to_vec();
        want.extend_from_slice(&bytes[..80]);
        want.extend_from_slice(&bytes[..56]);
        prop_assert_eq!(out, want);
    }

    #[test]
    fn resource_round_trip(
        ls in name_strategy(),
        name in name_strategy(),
        lver in any::<u64>(),
        flags in any::<u32>(),
        disks in proptest::collection::vec(disk_strategy(), 0..=4),
    ) {
        let r = Resource {
            head: ResourceHead {
                lockspace_name: ls,
                name,
                lver,
                data64: lver ^ 1,
                data32: flags ^ 7,
                unused: 0,
                flags,
                num_disks: disks.len() as u32,
            },
            disks,
        };
        let b = r.encode();
        prop_assert_eq!(b.len(), 128 + 1040 * r.disks.len());
        prop_assert_eq!(Resource::decode(&b, 4).unwrap(), r);
        // Any truncation is an error, never a panic.
        for cut in [0usize, 1, 127, 128, b.len().saturating_sub(1)] {
            if cut < b.len() {
                prop_assert!(Resource::decode(&b[..cut], 4).is_err());
            }
        }
    }

    #[test]
    fn event_cb_round_trip(v in proptest::collection::vec(any::<u64>(), 6)) {
        let cb = EventCb {
            header: Header::request(1, 0, 48, 0, 0),
            event: HostEvent { host_id: v[0], generation: v[1], event: v[2], data: v[3] },
            from_host_id: v[4],
            from_generation: v[5],
        };
        prop_assert_eq!(EventCb::decode(&cb.encode()).unwrap(), cb);
    }
}
