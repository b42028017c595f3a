//! lockd.toml text on arbitrary bytes: parsing and every range check return a value or a
//! `ConfigError`, never a panic; an accepted configuration is inside the documented ranges.
#![no_main]
use libfuzzer_sys::fuzz_target;
use lockd_config::Config;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(c) = Config::from_toml_text(text) {
        assert!((1..=255).contains(&c.io_timeout_s));
        assert!((5..=300).contains(&c.watchdog_fire_timeout_s));
        assert!(c.kill_grace_s <= 60);
        let _ = format!("{c:?}");
    }
});
