//! Paxos area sectors: dblock + mode block and request record decode, verify, round-trip.
#![no_main]
use disk_format::dblock::{decode_dblock_sector, ModeBlock, PaxosDblock};
use disk_format::RequestRecord;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(d) = PaxosDblock::decode(data) {
        assert_eq!(&d.encode()[..], &data[..56]);
        let _ = d.verify();
    }
    if let Ok(m) = ModeBlock::decode(data) {
        assert_eq!(&m.encode()[..], &data[..16]);
    }
    let _ = decode_dblock_sector(data);
    if let Ok(r) = RequestRecord::decode(data) {
        assert_eq!(&r.encode()[..], &data[..24]);
        let _ = r.verify();
    }
});
