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
        let _ = s.hosts_in_bitmap();
    }
});
