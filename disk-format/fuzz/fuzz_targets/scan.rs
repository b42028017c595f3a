//! The valid-record scan that guards disk writes: never panics, finds records only at
//! 512-byte boundaries inside the buffer, and agrees with `record_at` on each of them.
#![no_main]
use disk_format::scan::{describe, find_records, record_at, SCAN_STEP};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let base = 1u64 << 20;
    let found = find_records(data, base);
    for r in &found {
        let at = r.offset - base;
        assert_eq!(at % SCAN_STEP as u64, 0);
        assert!((at as usize) < data.len());
        assert_eq!(record_at(&data[at as usize..], r.offset).as_ref(), Some(r));
    }
    let _ = describe(&found);
    // Offsets near the top of the address space must not overflow.
    let _ = find_records(data, u64::MAX - 511);
});
