//! Secret redaction on any text: it never panics, it is idempotent (a
//! redacted text has nothing left to redact), and a credential planted
//! between spaces never survives, whatever surrounds it.
#![no_main]

use invocation_core::redact::Redactor;
use libfuzzer_sys::fuzz_target;

/// Credentials of shapes the built-in rules name (test values).
const PLANTED: [&str; 4] = [
    "ghp_0123456789abcdefghijABCDEFGHIJ012345",
    "AKIAIOSFODNN7EXAMPLQ",
    "xoxb-123456789012-1234567890123-abcdefghijklmnopqrstuvwx",
    "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789ABCDEF",
];

fuzz_target!(|data: &[u8]| {
    let Some((choice, rest)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    let redactor = Redactor::builtin();
    let once = redactor.redact(text);
    let twice = redactor.redact(&once);
    assert_eq!(once, twice, "redaction is not idempotent");

    let secret = PLANTED[usize::from(*choice) % PLANTED.len()];
    if text.contains(secret) {
        // Inside other characters it may be no credential's shape.
        return;
    }
    let cut = text
        .char_indices()
        .map(|(i, _)| i)
        .nth(usize::from(*choice) % (text.chars().count() + 1))
        .unwrap_or(text.len());
    let planted = format!("{} {secret} {}", &text[..cut], &text[cut..]);
    let redacted = redactor.redact(&planted);
    assert!(!redacted.contains(secret), "a planted credential survived");
});
