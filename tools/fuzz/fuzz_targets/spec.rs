//! The `-s`/`-r`/`-x`/`-e` spec parsers of the `lockd` CLI (tools/src/spec.rs, compiled in
//! here as a module: the CLI is a binary crate) on arbitrary text: an error, never a
//! panic; what parses has 1 to 4 disks, each at an offset inside the largest file offset.
#![no_main]
#[allow(dead_code)]
#[path = "../../src/spec.rs"]
mod spec;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(s) = spec::LockspaceSpec::parse(&text) {
        assert!(spec::area_end(s.offset, 0).is_ok());
    }
    if let Ok(r) = spec::ResourceSpec::parse(&text) {
        assert!((1..=spec::MAX_DISKS).contains(&r.disks.len()));
        for (_, offset) in &r.disks {
            assert!(spec::area_end(*offset, 0).is_ok());
        }
    }
    let _ = spec::RindexSpec::parse(&text);
    let _ = spec::RentrySpec::parse(&text);
    let _ = spec::AreaSpec::parse(&text);
    let _ = spec::parse_offset(&text);
    let _ = spec::parse_bytes(&text);
});
