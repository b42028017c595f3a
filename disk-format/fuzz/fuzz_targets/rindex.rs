//! Resource index header and entries: decode, verify, exact re-encode.
#![no_main]
use disk_format::rindex::{RindexEntry, RindexHeader};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(h) = RindexHeader::decode(data) {
        assert_eq!(&h.encode()[..], &data[..80]);
        let _ = h.verify(Some(&h.lockspace_name), Some(h.rx_offset));
        let _ = h.verify(None, Some(0));
    }
    if let Ok(e) = RindexEntry::decode(data) {
        assert_eq!(&e.encode()[..], &data[..64]);
    }
});
