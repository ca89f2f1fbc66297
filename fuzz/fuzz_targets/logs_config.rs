//! Any text as the `[logs]` configuration: parsing and compiling it (the
//! patterns, presets, time layouts and zones) never panics; what is refused
//! is refused with the configuration error, or with invalid bounds for a
//! `max_raw_events` of 0 (`FileLogSource::new`'s contract).
#![no_main]

use libfuzzer_sys::fuzz_target;
use projectors_logs::{Error, FileLogSource, LogsConfig};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(config) = toml::from_str::<LogsConfig>(text) else {
        return;
    };
    match FileLogSource::new(&config) {
        Ok(_) | Err(Error::InvalidConfig { .. }) => {}
        Err(Error::InvalidBounds(_)) if config.max_raw_events == Some(0) => {}
        Err(other) => panic!("a configuration was refused outside its contract: {other:?}"),
    }
});
