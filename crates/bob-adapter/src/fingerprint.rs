//! bob's journal fingerprints, mapped to the canonical [`ScopeFingerprint`].
//!
//! bob-core computes a call's fingerprint as the text `tool_name:` followed by
//! `serde_json::to_string(arguments)`. That text follows serde_json's map
//! order (sorted without its `preserve_order` feature, insertion order with
//! it), tells `1` from `1.0`, and is as long as the arguments. This crate
//! keys journal entries by SHA-256 over the canonical JSON of
//! `{"scope": arguments, "tool": tool_name}` instead
//! ([`invocation_core::fingerprint`]): fixed length, key order, whitespace and
//! integral number spelling do not matter.

use invocation_core::ScopeFingerprint;
use serde_json::Value;

use crate::Error;

/// The canonical fingerprint of a bob tool call.
#[must_use]
pub fn call_fingerprint(tool_name: &str, arguments: &Value) -> ScopeFingerprint {
    ScopeFingerprint::of(tool_name, arguments)
}

/// Maps a fingerprint given to `ToolJournalPort::lookup`: bob's own
/// `tool_name:json` text (from `JournalEntry::fingerprint`), or a canonical
/// fingerprint as 64 lowercase hex digits.
///
/// bob's text is split at the first `:` after which the rest is one JSON
/// text; that split is unique, because a JSON text never has a `:` outside
/// an object or a string.
///
/// # Errors
/// [`Error::InvalidFingerprint`] when the text is neither.
pub fn parse_fingerprint(text: &str) -> Result<ScopeFingerprint, Error> {
    if let Ok(fingerprint) = text.parse::<ScopeFingerprint>() {
        return Ok(fingerprint);
    }
    let (tool_name, arguments) = split_bob_fingerprint(text).ok_or(Error::InvalidFingerprint)?;
    Ok(call_fingerprint(tool_name, &arguments))
}

/// Splits bob's `tool_name:json` fingerprint text into the name and the arguments.
#[must_use]
pub fn split_bob_fingerprint(text: &str) -> Option<(&str, Value)> {
    text.match_indices(':').find_map(|(at, _)| {
        let (name, rest) = (&text[..at], &text[at + 1..]);
        serde_json::from_str::<Value>(rest).ok().map(|v| (name, v))
    })
}

#[cfg(test)]
mod tests {
    use bob_core::JournalEntry;
    use serde_json::json;

    use super::*;

    #[test]
    fn bob_text_and_hex_map_to_one_fingerprint() {
        let args = json!({"topic": "APPLICATION", "query": "timeout"});
        let ours = call_fingerprint("query_logs", &args);
        let bob = JournalEntry::fingerprint("query_logs", &args);
        assert_eq!(parse_fingerprint(&bob).ok(), Some(ours));
        assert_eq!(parse_fingerprint(&ours.to_hex()).ok(), Some(ours));
    }

    #[test]
    fn key_order_and_number_spelling_do_not_matter_but_values_do() {
        let a = parse_fingerprint(r#"t:{"a":1,"b":[1.0,2]}"#).ok();
        let b = parse_fingerprint(r#"t:{ "b": [1, 2.0], "a": 1.0 }"#).ok();
        assert!(a.is_some());
        assert_eq!(a, b);
        assert_ne!(a, parse_fingerprint(r#"t:{"a":1,"b":[1.5,2]}"#).ok());
        assert_ne!(a, parse_fingerprint(r#"u:{"a":1,"b":[1,2]}"#).ok());
    }

    #[test]
    fn names_with_colons_split_where_the_json_starts() {
        let args = json!(2);
        let text = JournalEntry::fingerprint("mcp:srv:tool", &args);
        assert_eq!(
            split_bob_fingerprint(&text),
            Some(("mcp:srv:tool", args.clone()))
        );
        assert_eq!(
            parse_fingerprint(&text).ok(),
            Some(call_fingerprint("mcp:srv:tool", &args))
        );
    }

    #[test]
    fn other_text_is_refused() {
        for bad in [
            "",
            "no-colon",
            "t:",
            "t:{",
            "t:{\"a\":1} x",
            &"A".repeat(64),
        ] {
            assert!(
                matches!(parse_fingerprint(bad), Err(Error::InvalidFingerprint)),
                "{bad}"
            );
        }
    }
}
