//! Delta-lease sectors: leader + host bitmap decode and exact re-encode.
#![no_main]
use disk_format::DeltaSector;
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
    }
});
