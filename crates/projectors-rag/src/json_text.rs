//! Sizes of text as JSON: every byte bound of the projector is measured the
//! way the text is finally sent, escaped inside a JSON string.

use std::io;

/// Bytes `c` takes inside a JSON string as `serde_json` writes it: `"` and `\`
/// and the five short escapes take 2, other control characters `\u00XX` take 6,
/// everything else its UTF-8 length (serde_json does not escape non-ASCII).
#[must_use]
pub(crate) const fn json_char_len(c: char) -> usize {
    match c {
        '"' | '\\' | '\u{08}' | '\u{0C}' | '\n' | '\r' | '\t' => 2,
        '\u{00}'..='\u{1F}' => 6,
        _ => c.len_utf8(),
    }
}

/// Bytes `text` takes inside a JSON string, without the quotes.
#[must_use]
pub(crate) fn json_len(text: &str) -> usize {
    text.chars().map(json_char_len).sum()
}

/// The longest prefix of `text`, cut at a character boundary, whose JSON
/// length is at most `max`.
#[must_use]
pub(crate) fn json_prefix(text: &str, max: usize) -> &str {
    let mut used = 0_usize;
    for (offset, c) in text.char_indices() {
        used += json_char_len(c);
        if used > max {
            return &text[..offset];
        }
    }
    text
}

/// Counts the bytes written to it; serializes a value without keeping it.
#[derive(Debug, Default)]
pub(crate) struct ByteCounter(pub(crate) usize);

impl io::Write for ByteCounter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0 += buf.len();
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn lengths_match_serde_json() {
        for c in (0_u32..0x250)
            .chain([0x2028, 0x2029, 0x4E2D, 0xFFFF, 0x1F600])
            .filter_map(char::from_u32)
        {
            let json = serde_json::to_string(&c.to_string()).unwrap();
            assert_eq!(json_char_len(c), json.len() - 2, "{c:?}");
        }
    }

    #[test]
    fn prefixes_stop_at_character_boundaries() {
        let text = "a\u{1}中\"b";
        assert_eq!(json_len(text), 1 + 6 + 3 + 2 + 1);
        assert_eq!(json_prefix(text, 0), "");
        assert_eq!(json_prefix(text, 1), "a");
        assert_eq!(json_prefix(text, 6), "a");
        assert_eq!(json_prefix(text, 7), "a\u{1}");
        assert_eq!(json_prefix(text, 9), "a\u{1}");
        assert_eq!(json_prefix(text, 10), "a\u{1}中");
        assert_eq!(json_prefix(text, 13), text);
        assert_eq!(json_prefix(text, 100), text);
    }
}
