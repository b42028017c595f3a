//! Every sanlock wire struct decoder (and lockd's extension payloads) on arbitrary bytes:
//! no panics; what decodes re-encodes to the same bytes where the struct has a fixed
//! layout.
#![no_main]
use client_lib::wire::{
    DiskLocation, EventCb, Header, Host, HostEvent, Lockspace, Options, Rentry, Resource, ResourceHead,
    Rindex, State, RENTRY_LEN, RINDEX_LEN,
};
use client_lib::ext::{LeaderInfo, WatchEvent, LEADER_INFO_LEN, WATCH_EVENT_LEN};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(h) = Header::decode(data) {
        assert_eq!(&h.encode()[..], &data[..32]);
        let _ = h.payload_len(1 << 20);
    }
    let _ = DiskLocation::decode(data);
    let _ = ResourceHead::decode(data);
    for max in [0, 1, 4] {
        let _ = Resource::decode(data, max);
        let _ = Resource::decode_prefix(data, max);
    }
    let _ = Lockspace::decode(data);
    let _ = Options::decode(data);
    let _ = Host::decode(data);
    let _ = HostEvent::decode(data);
    let _ = State::decode(data);
    let _ = EventCb::decode(data);
    let _ = Rindex::decode(data);
    if let Some(b) = data.get(..RINDEX_LEN) {
        let rx = Rindex::decode(b).expect("exact length decodes");
        let mut out = Vec::new();
        rx.encode_into(&mut out);
        assert_eq!(out.len(), RINDEX_LEN);
    }
    let _ = Rentry::decode(data);
    if let Some(b) = data.get(..RENTRY_LEN) {
        let re = Rentry::decode(b).expect("exact length decodes");
        assert_eq!(&re.encode()[..], b);
    }
    if let Ok(e) = WatchEvent::decode(data) {
        assert_eq!(data.len(), WATCH_EVENT_LEN);
        assert_eq!(&e.encode()[..], data);
    }
    if let Ok(l) = LeaderInfo::decode(data) {
        // Bytes 80..96 are reserved: not kept.
        assert_eq!(&l.encode()[..80], &data[..80]);
        assert!(data.len() >= LEADER_INFO_LEN);
    }
    let _ = client_lib::LeaseSpec::parse(&String::from_utf8_lossy(data));
});
