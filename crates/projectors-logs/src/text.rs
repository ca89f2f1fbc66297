//! Text measured the way the agent result limit measures it: UTF-8 bytes of
//! JSON text, escapes included.

/// JSON-escaped size of one byte of UTF-8 text, as `serde_json` writes it:
/// `"` and `\` take 2, the short escapes `\b \t \n \f \r` take 2, every other
/// control character takes 6 (`\u00XX`), everything else its own byte.
#[inline]
const fn escaped_byte_len(b: u8) -> usize {
    match b {
        b'"' | b'\\' | 0x08 | 0x09 | 0x0a | 0x0c | 0x0d => 2,
        0x00..=0x1f => 6,
        _ => 1,
    }
}

static ESCAPED_LEN: [u8; 256] = {
    let mut table = [1_u8; 256];
    let mut i = 0;
    while i < 256 {
        table[i] = escaped_byte_len(i as u8) as u8;
        i += 1;
    }
    table
};

/// Bytes `text` takes inside a JSON string, without the quotes.
#[must_use]
pub fn escaped_len(text: &str) -> usize {
    text.bytes()
        .map(|b| usize::from(ESCAPED_LEN[usize::from(b)]))
        .sum()
}

/// The longest prefix of `text` that ends on a UTF-8 character boundary and
/// whose JSON-escaped size is at most `budget`, and whether it is shorter than
/// `text`.
#[must_use]
pub fn truncate_escaped(text: &str, budget: usize) -> (&str, bool) {
    // Fast paths: nothing escapes to more than 6 bytes; a byte count is cheap.
    if text.len().saturating_mul(6) <= budget
        || (text.len() <= budget && escaped_len(text) <= budget)
    {
        return (text, false);
    }
    let mut used = 0_usize;
    for (index, ch) in text.char_indices() {
        let cost = if ch.is_ascii() {
            escaped_byte_len(ch as u8)
        } else {
            ch.len_utf8()
        };
        if used + cost > budget {
            return (&text[..index], true);
        }
        used += cost;
    }
    (text, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaped_len_matches_serde_json() {
        let samples = [
            "",
            "plain",
            "quote \" and backslash \\",
            "tab\tnewline\ncr\rback\u{8}form\u{c}",
            "\u{0}\u{1}\u{1f}\u{7f}",
            "é中😀",
            "\u{2028}\u{2029}",
        ];
        for s in samples {
            let json = serde_json::to_string(s).unwrap();
            assert_eq!(escaped_len(s), json.len() - 2, "{s:?}");
        }
    }

    #[test]
    fn truncation_respects_char_boundaries_and_budget() {
        let text = "aé中😀\u{1}\"z";
        for budget in 0..30 {
            let (cut, shortened) = truncate_escaped(text, budget);
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
        assert_eq!(truncate_escaped(text, 1000), (text, false));
    }
}
