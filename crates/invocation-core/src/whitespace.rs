//! Whitespace collapsing, the one meaning of "the same text up to spacing".

/// `text` with every run of Unicode whitespace (`White_Space`: also tabs,
/// newlines, no-break and ideographic spaces) replaced by one ASCII space,
/// and leading and trailing whitespace removed. Nothing else changes: case,
/// punctuation and characters that are not `White_Space` (such as the
/// zero-width space) are kept.
#[must_use]
pub fn collapse_whitespace(text: &str) -> String {
    let mut collapsed = String::with_capacity(text.len());
    for word in text.split_whitespace() {
        if !collapsed.is_empty() {
            collapsed.push(' ');
        }
        collapsed.push_str(word);
    }
    collapsed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_collapse_ends_trim_and_the_rest_stays() {
        assert_eq!(
            collapse_whitespace("  connection \t pool\n\ntimeout  "),
            "connection pool timeout"
        );
        assert_eq!(collapse_whitespace("a\u{00A0}\u{3000}b"), "a b");
        assert_eq!(collapse_whitespace("OOMKilled"), "OOMKilled");
        assert_eq!(collapse_whitespace(" \n "), "");
        assert_eq!(collapse_whitespace(""), "");
        // Zero-width space is not White_Space: it is kept.
        assert_eq!(collapse_whitespace("a\u{200B}b"), "a\u{200B}b");
        assert_ne!(
            collapse_whitespace("timeout pool"),
            collapse_whitespace("pool timeout")
        );
    }
}
