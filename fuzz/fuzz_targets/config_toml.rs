//! Any text as the whole `aci` configuration file: parsing it and checking
//! what is derived from it without other files or connections (the
//! `[serve]` limits and TLS settings, the embedder's settings) never
//! panics, and a refusal is one line.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Err(message) = aci_cli::fuzzing::check_config(text) {
        assert!(
            !message.contains('\n'),
            "a configuration error is one line: {message}"
        );
        assert!(!message.is_empty());
    }
});
