//! A byte stream as the daemon reads it: header, then the payload its length claims,
//! decoded as each command's structs. Lengths that lie must give errors, never panics.
//! The same stream is then read as the daemon reads it, request after request, with
//! `client_lib::request::read_request` over a slice source.
#![no_main]
use client_lib::request::{read_request, SliceSource};
use client_lib::wire::{
    Header, Lockspace, Options, Rentry, Resource, ResourceHead, Rindex, RENTRY_LEN, RINDEX_LEN,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    structs(data);
    requests(data);
});

/// Reads `data` as a connection's stream: header, then `read_request` (which reads by
/// struct size, not by the header's length, exactly as the daemon does).
fn requests(data: &[u8]) {
    let mut rest = data;
    while rest.len() >= 32 {
        let Ok(h) = Header::decode(&rest[..32]) else { return };
        let mut src = SliceSource::new(&rest[32..]);
        let _ = read_request(&h, &mut src);
        // Always progress: at least the header was consumed.
        rest = src.remaining();
    }
}

fn structs(data: &[u8]) {
    let mut rest = data;
    while rest.len() >= 32 {
        let Ok(h) = Header::decode(rest) else { return };
        rest = &rest[32..];
        let Ok(n) = h.payload_len(1 << 20) else { return };
        let payload = &rest[..n.min(rest.len())];
        rest = &rest[n.min(rest.len())..];
        match h.cmd {
            2 | 3 | 13 | 15 | 16 | 18 | 20 | 22 | 23 | 30 | 31 | 32 | 33 | 34 => {
                let _ = Lockspace::decode(payload);
            }
            7 => {
                let mut p = payload;
                for _ in 0..h.data.min(8) {
                    match Resource::decode_prefix(p, 4) {
                        Ok((_, used)) => p = &p[used.min(p.len())..],
                        Err(_) => break,
                    }
                }
                let _ = Options::decode(p);
            }
            35..=40 => {
                if let Some(b) = payload.get(..RINDEX_LEN) {
                    let _ = Rindex::decode(b);
                }
                if let Some(b) = payload.get(RINDEX_LEN..RINDEX_LEN + RENTRY_LEN) {
                    let _ = Rentry::decode(b);
                }
            }
            8 | 27 => {
                for chunk in payload.chunks(128).take(8) {
                    let _ = ResourceHead::decode(chunk);
                }
            }
            _ => {
                let _ = Resource::decode(payload, 4);
            }
        }
    }
}
