//! Delta-lease sectors: leader + host bitmap decode and exact re-encode; the in-place view
//! agrees with decode.
#![no_main]
use disk_format::{DeltaSector, DeltaSectorView};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(s) = DeltaSector::decode(data) {
        let mut out = vec![0u8; 512];
        s.encode_into(&mut out);
        assert_eq!(&out[..200], &data[..200]);
        assert_eq!(&out[256..512], &data[256..512]);
        // Every listed host has its bit set, in increasing order; the count matches.
        let hosts = s.hosts_in_bitmap();
        assert!(hosts.windows(2).all(|w| w[0] < w[1]));
        assert!(hosts.iter().all(|&h| s.host_bit(h)));
        let set_bits: u32 = s.bitmap.iter().map(|b| b.count_ones()).sum();
        assert_eq!(hosts.len(), set_bits as usize);
        // The in-place view reads what decode read.
        let v = DeltaSectorView::new(data).expect("decode accepted the length");
        let l = &s.leader;
        assert_eq!(
            (v.magic(), v.flags(), v.owner_id(), v.owner_generation(), v.timestamp()),
            (l.magic, l.flags, l.owner_id, l.owner_generation, l.timestamp)
        );
        assert_eq!((v.io_timeout(), v.resource_name()), (l.io_timeout, l.resource_name));
        assert_eq!(
            (v.write_id(), v.write_generation(), v.write_timestamp()),
            (l.write_id, l.write_generation, l.write_timestamp)
        );
        assert!(v.space_name_is(&l.space_name));
        assert!(hosts.iter().all(|&h| v.host_bit(h)));
        assert_eq!(v.decode(), s);
    }
});
