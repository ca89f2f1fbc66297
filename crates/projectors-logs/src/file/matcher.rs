//! The query's words, and a byte prefilter that never misses a match.
//!
//! An event matches when every whitespace-separated word of the query occurs
//! in its message, ignoring case (Unicode lowercase), as in the mock source.
//!
//! Parsing every line would cost far more than searching bytes, so lines are
//! first searched for one word (the longest all-ASCII one), ASCII
//! case-insensitively, with `regex` (bytes, no Unicode: its SIMD literal
//! search, as ripgrep's); only lines with a hit are parsed
//! and matched exactly. The prefilter must be a superset of the matches, so
//! it also hits on whatever could hide the word from a byte search:
//!
//! - the only non-ASCII characters whose lowercase contains ASCII letters,
//!   `İ` (U+0130, lowercases to `i̇`) and `K` (U+212A KELVIN SIGN, to `k`),
//!   when the word has an `i` or a `k`;
//! - JSON's `\uXXXX` escapes (any character may be written so), and any
//!   backslash when the word has a character JSON or logfmt escapes (`"`,
//!   `\`, `/`, control characters).
//!
//! Without an all-ASCII word (or for the slow log, whose message is masked)
//! every entry is parsed.

use std::sync::OnceLock;

use regex::bytes::{Regex, RegexBuilder};

use super::formats::Escapes;

/// The words of one query and the prefilter.
#[derive(Debug, Clone)]
pub(crate) struct Matcher {
    words: Vec<String>,
    prefilter: Option<Prefilter>,
}

/// The needle alone, and with the alternatives that may hide it; a chunk of
/// lines without a byte that starts an alternative is searched for the
/// needle alone (a single case-insensitive literal, the fastest search).
#[derive(Debug, Clone)]
pub(crate) struct Prefilter {
    needle: Regex,
    /// The needle and its alternatives, built the first time a chunk needs
    /// it (plain ASCII logs never do).
    full: OnceLock<Option<Regex>>,
    full_pattern: String,
    /// Whether the alternatives include U+0130 / U+212A (first bytes C4, E2).
    special: bool,
    /// Whether the alternatives include a backslash escape.
    escape: bool,
    /// Whether every chunk is searched with the alternatives (CRI's partial
    /// lines may be anywhere).
    always_full: bool,
}

impl Prefilter {
    /// The search to run over `chunk`; `None` when none could be built (then
    /// every line of the chunk is parsed).
    pub(crate) fn for_chunk(&self, chunk: &[u8]) -> Option<&Regex> {
        // One pass for the bytes that start an alternative.
        let starts_alternative = match (self.special, self.escape) {
            (true, true) => memchr::memchr3(0xc4, 0xe2, b'\\', chunk).is_some(),
            (true, false) => memchr::memchr2(0xc4, 0xe2, chunk).is_some(),
            (false, true) => memchr::memchr(b'\\', chunk).is_some(),
            (false, false) => false,
        };
        if starts_alternative || self.always_full {
            self.full.get_or_init(|| build(&self.full_pattern)).as_ref()
        } else {
            Some(&self.needle)
        }
    }
}

fn build(pattern: &str) -> Option<Regex> {
    RegexBuilder::new(pattern)
        .case_insensitive(true)
        .unicode(false)
        .build()
        .ok()
}

impl Matcher {
    pub(crate) fn new(query: &str, escapes: Option<Escapes>) -> Self {
        let words: Vec<String> = query.split_whitespace().map(str::to_lowercase).collect();
        let prefilter = escapes.and_then(|escapes| prefilter(&words, escapes));
        Self { words, prefilter }
    }

    /// The prefilter, when lines may be skipped without parsing.
    pub(crate) const fn prefilter(&self) -> Option<&Prefilter> {
        self.prefilter.as_ref()
    }

    /// Whether `message` has every word, ignoring case (Unicode lowercase).
    pub(crate) fn matches(&self, message: &str) -> bool {
        if self.words.is_empty() {
            return true;
        }
        if message.is_ascii() {
            // The Unicode lowercase of ASCII text is its ASCII lowercase, and
            // a lowercased word with a non-ASCII character (`İ` gives `i̇`)
            // cannot occur in it, while one that lowercased to ASCII (`K`
            // gives `k`) is searched as such: the same answer without
            // lowercasing the message.
            return self.words.iter().all(|w| {
                w.is_ascii() && contains_ignoring_ascii_case(message.as_bytes(), w.as_bytes())
            });
        }
        let lower = message.to_lowercase();
        self.words.iter().all(|w| lower.contains(w.as_str()))
    }

    /// Whether every word is in `message` or marked in `found` (by
    /// [`mark_found`](Self::mark_found) over text left out of the message).
    pub(crate) fn matches_with(&self, message: &str, found: &[bool]) -> bool {
        if found.iter().any(|f| *f) {
            let rest: Vec<&String> = self
                .words
                .iter()
                .enumerate()
                .filter(|(i, _)| !found.get(*i).copied().unwrap_or(false))
                .map(|(_, w)| w)
                .collect();
            return rest.iter().all(|w| Self::has_word(message, w));
        }
        self.matches(message)
    }

    /// Whether every word is in `text` or marked in `found`: then any
    /// message that holds `text` after a whitespace matches, whatever comes
    /// before it.
    pub(crate) fn all_in(&self, text: &str, found: &[bool]) -> bool {
        self.words
            .iter()
            .enumerate()
            .all(|(i, w)| found.get(i).copied().unwrap_or(false) || Self::has_word(text, w))
    }

    /// Marks in `found` (one flag per word) the words that occur in `text`.
    /// Words never span whitespace, so an event's words are those of its
    /// lines taken one by one.
    pub(crate) fn mark_found(&self, text: &str, found: &mut Vec<bool>) {
        found.resize(self.words.len(), false);
        for (word, flag) in self.words.iter().zip(found.iter_mut()) {
            if !*flag && Self::has_word(text, word) {
                *flag = true;
            }
        }
    }

    fn has_word(text: &str, word: &str) -> bool {
        if text.is_ascii() {
            word.is_ascii() && contains_ignoring_ascii_case(text.as_bytes(), word.as_bytes())
        } else {
            text.to_lowercase().contains(word)
        }
    }
}

/// Whether `haystack` contains `needle` (lowercase ASCII), ignoring ASCII case.
fn contains_ignoring_ascii_case(haystack: &[u8], needle: &[u8]) -> bool {
    let Some((&first, rest)) = needle.split_first() else {
        return true;
    };
    let Some(last_start) = haystack.len().checked_sub(needle.len()) else {
        return false;
    };
    let upper = first.to_ascii_uppercase();
    let mut from = 0;
    while from <= last_start {
        let Some(i) = memchr::memchr2(first, upper, &haystack[from..=last_start]) else {
            return false;
        };
        let at = from + i;
        if haystack[at + 1..at + needle.len()].eq_ignore_ascii_case(rest) {
            return true;
        }
        from = at + 1;
    }
    false
}

fn prefilter(words: &[String], escapes: Escapes) -> Option<Prefilter> {
    let needle = words
        .iter()
        .filter(|w| w.is_ascii() && !w.is_empty())
        .max_by_key(|w| w.len())?;
    let mut patterns: Vec<String> = vec![regex::escape(needle)];
    let special = needle.contains(['i', 'k']);
    if special {
        // U+0130 and U+212A in UTF-8.
        patterns.push(r"\xC4\xB0".to_owned());
        patterns.push(r"\xE2\x84\xAA".to_owned());
    }
    let escapable = needle
        .bytes()
        .any(|b| matches!(b, b'"' | b'\\' | b'/') || b < 0x20 || b == 0x7f);
    match escapes {
        Escapes::None => {}
        Escapes::Backslash if escapable => patterns.push(r"\\".to_owned()),
        Escapes::Backslash => {}
        Escapes::Json if escapable => patterns.push(r"\\".to_owned()),
        Escapes::Json => patterns.push(r"\\u".to_owned()),
        // Every partial line: a word may continue on the line completing it.
        // As the CRI line pattern reads a tag: `P`, then `:`, a space or the
        // message at once (`stdout Pin po` is partial `in po`).
        Escapes::CriPartial => patterns.push(r"(?-i:\x20(?:stdout|stderr)\x20P)".to_owned()),
    }
    let always_full = escapes == Escapes::CriPartial;
    let escape = !always_full && patterns.len() > 1 + 2 * usize::from(special);
    Some(Prefilter {
        needle: build(&patterns[0])?,
        full: OnceLock::new(),
        full_pattern: patterns.join("|"),
        special,
        escape,
        always_full,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hits(m: &Matcher, line: &str) -> bool {
        m.prefilter().is_none_or(|p| {
            p.for_chunk(line.as_bytes())
                .unwrap()
                .is_match(line.as_bytes())
        })
    }

    #[test]
    fn words_in_any_order_ignoring_case() {
        let m = Matcher::new("pool  TIMEOUT", Some(Escapes::Json));
        assert!(m.matches("HikariPool-1 timed out: Timeout"));
        assert!(!m.matches("HikariPool-1 timed out"));
        assert!(m.matches("timeout in pool"));
        let m = Matcher::new("ÉCHEC", Some(Escapes::None));
        assert!(m.prefilter().is_none());
        assert!(m.matches("un échec"));
    }

    #[test]
    fn ascii_messages_match_as_their_unicode_lowercase_does() {
        let reference = |m: &Matcher, message: &str| {
            let lower = message.to_lowercase();
            m.words.iter().all(|w| lower.contains(w.as_str()))
        };
        let queries = [
            "pool TIMEOUT",
            "\u{212a}ill",
            "\u{130}d",
            "é",
            "a",
            "ms.",
            "zz",
        ];
        let messages = [
            "HikariPool-1 timed out: Timeout",
            "KILL -9",
            "kill",
            "id",
            "",
            "a",
            "took 30000ms.",
            "z",
            "Z z",
            "ZZ",
        ];
        for query in queries {
            let m = Matcher::new(query, None);
            for message in messages {
                assert_eq!(
                    m.matches(message),
                    reference(&m, message),
                    "{query:?} in {message:?}"
                );
            }
        }
        assert!(Matcher::new("\u{212a}ill", None).matches("KILL"));
        assert!(!Matcher::new("\u{130}d", None).matches("id"));
        assert!(contains_ignoring_ascii_case(b"abcXyZ", b"xyz"));
        assert!(!contains_ignoring_ascii_case(b"xy", b"xyz"));
        assert!(!contains_ignoring_ascii_case(b"x-y-z", b"xyz"));
    }

    #[test]
    fn prefilter_is_a_superset() {
        let m = Matcher::new("kill", Some(Escapes::None));
        for message in ["KILL", "\u{212a}ill", "\u{130}"] {
            if m.matches(message) {
                assert!(hits(&m, message), "{message}");
            }
        }
        assert!(m.matches("\u{212a}ill"));
        let m = Matcher::new("timeout", Some(Escapes::Json));
        // `\u0074` is `t`.
        let line = r#"{"msg":"\u0074imeout"}"#;
        assert!(hits(&m, line));
        let m = Matcher::new("a/b", Some(Escapes::Json));
        assert!(hits(&m, r#"{"msg":"a\/b"}"#));
        let m = Matcher::new("\"x\"", Some(Escapes::Backslash));
        assert!(hits(&m, r#"msg="say \"x\"""#));
    }
}
