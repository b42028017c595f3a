//! Every decoder of lockd-scsi-pr on arbitrary bytes (READ KEYS, READ RESERVATION, REPORT
//! CAPABILITIES answers, sense data, a whole SG_IO completion): an error, never a panic;
//! what parses is consistent with the bytes it came from. (Kept in tools/fuzz to share
//! its libFuzzer build: `lockd direct pr` is the decoders' first user.)
#![no_main]

use libfuzzer_sys::fuzz_target;
use lockd_scsi_pr::{key, parse, sense};

fuzz_target!(|data: &[u8]| {
    if let Ok(k) = parse::read_keys(data) {
        assert!(k.keys.len() * 8 + 8 <= data.len());
        assert!(k.truncated || (k.keys.len() as u64) * 8 == u64::from(k.reported_len_bytes));
    }
    if let Ok(r) = parse::read_reservation(data) {
        if let Some(res) = r.reservation {
            assert!(data.len() >= 22); // bytes 22..24 are obsolete
            assert!(res.type_code <= 0x0f && res.scope <= 0x0f);
        }
    }
    let _ = parse::report_capabilities(data);
    if let Some(s) = sense::decode(data) {
        assert!(s.key <= 0x0f);
    }
    if data.len() >= 5 {
        let c = sense::Completion {
            status: data[0],
            host_status: u16::from_be_bytes([data[1], data[2]]),
            driver_status: u16::from_be_bytes([data[3], data[4]]),
            sense: &data[5..],
        };
        let _ = sense::verdict("FUZZ", c).map_err(|e| e.to_string());
    }
    if data.len() >= 8 {
        let mut b = [0u8; 8];
        b.copy_from_slice(&data[..8]);
        let k = u64::from_be_bytes(b);
        if let Some((h, g)) = key::lvm_key_parts(k) {
            assert_eq!(key::lvm_key(h, g), Ok(k));
        }
    }
});
