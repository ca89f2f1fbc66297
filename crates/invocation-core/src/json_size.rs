//! Sizes of text as JSON, in UTF-8 bytes, the way `serde_json` writes it.
//!
//! Every byte bound a projector enforces is measured here, so that "at most
//! N bytes" means the same in every tool crate:
//!
//! - [`escaped_len`]: the bytes `text` takes *inside* a JSON string, without
//!   the two quotes;
//! - [`quoted_len`]: the same with the quotes (a whole JSON string value);
//! - [`escaped_prefix`]: the longest prefix, cut at a character boundary,
//!   whose escaped length fits a budget, and whether it was cut;
//! - [`serialized_len`]: the length of any value's JSON text, without keeping
//!   the text.
//!
//! `serde_json` escapes `"` and `\` and the short escapes `\b \t \n \f \r`
//! (2 bytes each), every other control character as `\u00XX` (6 bytes), and
//! nothing else: non-ASCII text is written as its own UTF-8 bytes.

use std::io;

use serde::Serialize;

/// The longest escape of one character (`\u00XX`): a budget of at least this
/// many bytes always fits any one character.
pub const MAX_ESCAPED_CHAR_BYTES: usize = 6;

/// Escaped size of one byte of UTF-8 text. Bytes of multi-byte characters
/// are never escaped, so summing over bytes gives the size of the text.
const fn escaped_byte_len(b: u8) -> usize {
    match b {
        b'"' | b'\\' | 0x08 | 0x09 | 0x0a | 0x0c | 0x0d => 2,
        0x00..=0x1f => 6,
        _ => 1,
    }
}

static ESCAPED_BYTE_LEN: [u8; 256] = {
    let mut table = [1_u8; 256];
    let mut i = 0;
    while i < 256 {
        // Values are 1, 2 or 6: the casts cannot truncate.
        #[allow(clippy::cast_possible_truncation)]
        {
            table[i] = escaped_byte_len(i as u8) as u8;
        }
        i += 1;
    }
    table
};

/// Bytes `c` takes inside a JSON string.
#[must_use]
pub const fn escaped_char_len(c: char) -> usize {
    if c.is_ascii() {
        escaped_byte_len(c as u8)
    } else {
        c.len_utf8()
    }
}

/// Bytes `text` takes inside a JSON string, without the quotes.
#[must_use]
pub fn escaped_len(text: &str) -> usize {
    text.bytes()
        .map(|b| usize::from(ESCAPED_BYTE_LEN[usize::from(b)]))
        .sum()
}

/// Bytes `text` takes as a JSON string value, quotes included.
#[must_use]
pub fn quoted_len(text: &str) -> usize {
    escaped_len(text) + 2
}

/// The longest prefix of `text` that ends on a character boundary and whose
/// escaped length (without quotes) is at most `budget`, and whether it is
/// shorter than `text`.
///
/// For a budget that includes the quotes, pass `budget.saturating_sub(2)`.
#[must_use]
pub fn escaped_prefix(text: &str, budget: usize) -> (&str, bool) {
    // Fast paths: nothing escapes to more than 6 bytes; a byte count is cheap.
    if text.len().saturating_mul(MAX_ESCAPED_CHAR_BYTES) <= budget
        || (text.len() <= budget && escaped_len(text) <= budget)
    {
        return (text, false);
    }
    let mut used = 0_usize;
    for (index, c) in text.char_indices() {
        let cost = escaped_char_len(c);
        if used + cost > budget {
            return (&text[..index], true);
        }
        used += cost;
    }
    (text, false)
}

/// The length of `value`'s compact JSON text (`serde_json::to_string`),
/// counted without building the text.
///
/// # Errors
/// The serializer's error, when `value` cannot be serialized.
pub fn serialized_len<T: Serialize + ?Sized>(value: &T) -> Result<usize, serde_json::Error> {
    let mut counter = ByteCounter(0);
    serde_json::to_writer(&mut counter, value)?;
    Ok(counter.0)
}

/// Counts the bytes written to it.
struct ByteCounter(usize);

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
    fn char_lengths_match_serde_json() {
        for c in (0_u32..0x250)
            .chain([0x2028, 0x2029, 0x4E2D, 0xFFFF, 0x1F600])
            .filter_map(char::from_u32)
        {
            let json = serde_json::to_string(&c.to_string()).unwrap();
            assert_eq!(escaped_char_len(c), json.len() - 2, "{c:?}");
            assert!(escaped_char_len(c) <= MAX_ESCAPED_CHAR_BYTES);
        }
    }

    #[test]
    fn text_lengths_match_serde_json() {
        for text in [
            "",
            "plain",
            "quote \" and backslash \\",
            "tab\tnewline\ncr\rback\u{8}form\u{c}",
            "\u{0}\u{1}\u{8}\u{c}\n\r\t\u{1f}\u{7f}",
            "é中文 and emoji 😀",
            "\u{2028}\u{2029}",
        ] {
            let json = serde_json::to_string(text).unwrap();
            assert_eq!(escaped_len(text), json.len() - 2, "{text:?}");
            assert_eq!(quoted_len(text), json.len(), "{text:?}");
            assert_eq!(serialized_len(text).unwrap(), json.len(), "{text:?}");
        }
    }

    #[test]
    fn prefixes_are_the_longest_within_budget_at_char_boundaries() {
        let text = "aé中😀\u{1}\"z";
        for budget in 0..30 {
            let (cut, shortened) = escaped_prefix(text, budget);
            assert!(text.starts_with(cut));
            assert!(escaped_len(cut) <= budget);
            assert_eq!(shortened, cut.len() < text.len());
            if shortened {
                let next = text[cut.len()..].chars().next().unwrap();
                let mut longer = cut.to_owned();
                longer.push(next);
                assert!(escaped_len(&longer) > budget, "prefix is not the longest");
            }
        }
        assert_eq!(escaped_prefix(text, 1000), (text, false));
        assert_eq!(escaped_prefix("", 0), ("", false));
        assert_eq!(escaped_prefix("x", 0), ("", true));

        let text = "a\u{1}中\"b";
        assert_eq!(escaped_len(text), 1 + 6 + 3 + 2 + 1);
        assert_eq!(escaped_prefix(text, 6).0, "a");
        assert_eq!(escaped_prefix(text, 7).0, "a\u{1}");
        assert_eq!(escaped_prefix(text, 10).0, "a\u{1}中");
        assert_eq!(escaped_prefix(text, 13), (text, false));
    }

    #[test]
    fn serialized_len_counts_whole_values() {
        let value = serde_json::json!({"a": [1, "\u{1}", null], "中": true});
        assert_eq!(
            serialized_len(&value).unwrap(),
            serde_json::to_string(&value).unwrap().len()
        );
    }
}
