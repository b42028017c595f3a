//! The 176-byte wdmd header on arbitrary bytes: no panics; decode→encode is exact.
#![no_main]
use libfuzzer_sys::fuzz_target;
use wdmd::proto::WdmdHeader;

fuzz_target!(|data: &[u8]| {
    if let Ok(h) = WdmdHeader::decode(data) {
        let again = WdmdHeader::decode(&h.encode()).expect("an encoded header decodes");
        assert_eq!(again.encode(), h.encode());
        let _ = h.name_str();
    }
});
