//! Sizes of JSON text as `serde_json` writes it, in UTF-8 bytes.

/// Bytes one character takes inside a JSON string written by `serde_json`:
/// `"` and `\` and the short escapes take 2, other control characters
/// `\u00XX` take 6, everything else its UTF-8 length (non-ASCII is not escaped).
const fn char_len(c: char) -> usize {
    match c {
        '"' | '\\' | '\u{08}' | '\u{0C}' | '\n' | '\r' | '\t' => 2,
        '\u{00}'..='\u{1F}' => 6,
        _ => c.len_utf8(),
    }
}

/// The length of `text` as a JSON string, quotes included.
pub(crate) fn escaped_len(text: &str) -> usize {
    2 + text.chars().map(char_len).sum::<usize>()
}

/// The longest prefix of `text`, cut at a character boundary, whose JSON
/// string (quotes included) takes at most `max` bytes; and whether it was cut.
pub(crate) fn shorten(text: &str, max: usize) -> (&str, bool) {
    let mut used = 2;
    for (index, c) in text.char_indices() {
        used += char_len(c);
        if used > max {
            return (&text[..index], true);
        }
    }
    (text, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_match_serde_json() {
        for text in [
            "",
            "plain",
            "quote \" and backslash \\",
            "\u{0}\u{1}\u{8}\u{c}\n\r\t\u{1f}\u{7f}",
            "中文 and emoji 😀",
            "\u{2028}\u{2029}",
        ] {
            let written = serde_json::to_string(text).unwrap();
            assert_eq!(escaped_len(text), written.len(), "{text:?}");
        }
    }

    #[test]
    fn shortening_cuts_at_char_boundaries_within_budget() {
        let text = "a😀\"b\u{1}c";
        for max in 0..20 {
            let (prefix, cut) = shorten(text, max);
            assert!(text.starts_with(prefix));
            assert_eq!(cut, prefix.len() < text.len());
            if max >= 2 {
                assert!(escaped_len(prefix) <= max, "{max}");
            }
        }
        assert_eq!(shorten(text, 100), (text, false));
        assert_eq!(shorten(text, 5), ("a", true));
    }
}
