//! The first look at a text: can it hold any rule's keyword at all?
//!
//! Most evidence holds no secret and no keyword, and scanning it is most of
//! what redaction costs. A DFA walking a text byte by byte waits on one
//! table load per byte (each step needs the state the previous one found),
//! so [`KeywordFilter`] walks several parts of a text at once: the parts
//! overlap by the longest keyword less one byte, so every occurrence lies
//! whole in one part, and the walks are independent, so the processor
//! overlaps their loads. The automaton is a DFA for "some keyword occurs"
//! over the keywords' first [`MAX_KEYWORD_BYTES`] bytes (each ASCII
//! case-insensitive or case-sensitive, as its rule says) whose matching
//! states all lead to one absorbing state, so the walk needs no test per
//! byte: a part held a keyword when its walk ends there.
//!
//! It answers "maybe" or "no": a text it says no to holds no keyword (the
//! search with positions is the redactor's, for the texts it says maybe
//! to; a keyword longer than the cut can still be missing there).

use std::collections::HashMap;

/// Keywords are cut to this many bytes: a text that holds a keyword holds
/// its prefix, and short prefixes keep the parts' overlap small.
pub(super) const MAX_KEYWORD_BYTES: usize = 8;

/// What building a keyword automaton may take. Past any of these (keyword
/// sets far larger than the built-in one's: a few hundred states of a few
/// dozen classes; 500 keywords of 12 random bytes still fit, 1,000 do not
/// for the scanner, 2,000 not for the filter), the automaton gives up: the
/// filter says maybe to every text, the scanner names every rule. Slower,
/// same result.
pub(super) mod limits {
    /// Keyword bytes (each costs 256 bytes while building).
    pub(in super::super) const POSITIONS: usize = 1 << 15;
    /// Transitions: states times classes (4 bytes each).
    pub(in super::super) const TABLE: usize = 1 << 21;
    /// Keyword bytes looked at while building.
    pub(in super::super) const WORK: usize = 1 << 26;
}

/// Texts shorter than this are walked in one part; up to four times this,
/// in two; longer, in four.
const SPLIT_AT: usize = 16;

/// A DFA over keyword prefixes whose matches are absorbing (see the module
/// docs).
#[derive(Debug, Clone)]
pub(super) struct KeywordFilter {
    /// Byte to equivalence class (bytes every keyword byte treats alike).
    classes: [u8; 256],
    /// `table[state + class]` is the next state; states are premultiplied
    /// by the number of classes.
    table: Box<[u32]>,
    /// The absorbing state every match leads to (premultiplied).
    matched: u32,
    /// How far parts overlap: the longest (cut) keyword, less one byte.
    overlap: usize,
}

impl KeywordFilter {
    /// The filter over `keywords`: each with whether it counts only as
    /// written (else ASCII case-insensitive). Empty ones are ignored; with
    /// no keyword it says no to every text.
    pub(super) fn new<'k>(keywords: impl IntoIterator<Item = (&'k str, bool)>) -> Self {
        let keywords = Positions::new(
            keywords.into_iter().map(|(k, exact)| (k, exact, 0)),
            MAX_KEYWORD_BYTES,
        );
        if keywords.too_many {
            return Self::always();
        }
        let (classes, representatives) = keywords.classes();
        let stride = representatives.len();
        let starting = keywords.starting(&representatives);
        let Positions {
            accepts,
            ends,
            longest,
            ..
        } = keywords;

        // Subset construction: a state is the set of keyword bytes that
        // come next after a partial match (sorted); the start state is
        // empty, and every step may also begin any keyword. A step that
        // completes a keyword goes to the absorbing state, `MATCHED` here.
        const MATCHED: u32 = u32::MAX;
        let mut ids: HashMap<Vec<u32>, u32> = HashMap::from([(Vec::new(), 0)]);
        let mut sets: Vec<Vec<u32>> = vec![Vec::new()];
        let mut rows: Vec<Vec<u32>> = Vec::new();
        let mut work = 0_usize;
        while rows.len() < sets.len() {
            if sets.len() * stride > limits::TABLE || work > limits::WORK {
                return Self::always();
            }
            let set = sets[rows.len()].clone();
            let mut row = Vec::with_capacity(stride);
            for (&byte, starting) in representatives.iter().zip(&starting) {
                work += set.len() + starting.len();
                let mut next = Vec::new();
                let mut matched = false;
                for &at in set.iter().chain(starting) {
                    let at = at as usize;
                    if accepts[at][usize::from(byte)] {
                        if ends[at].is_some() {
                            matched = true;
                            break;
                        }
                        next.push(state_id(at + 1));
                    }
                }
                row.push(if matched {
                    MATCHED
                } else {
                    next.sort_unstable();
                    next.dedup();
                    let fresh = state_id(sets.len());
                    *ids.entry(next).or_insert_with_key(|next| {
                        sets.push(next.clone());
                        fresh
                    })
                });
            }
            rows.push(row);
        }

        // The table, states premultiplied, with the absorbing state last.
        let states = rows.len();
        let premultiplied = |state: usize| state_id(state * stride);
        let matched = premultiplied(states);
        let mut table = Vec::with_capacity((states + 1) * stride);
        for row in &rows {
            table.extend(row.iter().map(|&target| {
                if target == MATCHED {
                    matched
                } else {
                    premultiplied(target as usize)
                }
            }));
        }
        table.resize((states + 1) * stride, matched);
        Self {
            classes,
            table: table.into_boxed_slice(),
            matched,
            overlap: longest.saturating_sub(1),
        }
    }

    /// The filter that says maybe to every text: for keyword sets whose DFA
    /// would be too large.
    fn always() -> Self {
        Self {
            classes: [0; 256],
            table: Box::new([0]),
            matched: 0,
            overlap: 0,
        }
    }

    /// True when building gave up (see [`limits`]).
    #[cfg(test)]
    pub(super) fn gave_up(&self) -> bool {
        self.table.len() == 1
    }

    /// False when `text` holds no keyword (prefix); true when it may.
    pub(super) fn may_match(&self, text: &[u8]) -> bool {
        if text.len() < SPLIT_AT {
            self.walk(0, text) == self.matched
        } else if text.len() < 4 * SPLIT_AT {
            let [a, b] = parts(text, self.overlap);
            let (mut x, mut y) = (0, 0);
            for (&p, &q) in a.iter().zip(b) {
                x = self.step(x, p);
                y = self.step(y, q);
            }
            x == self.matched || y == self.matched
        } else {
            let [a, b, c, d] = parts(text, self.overlap);
            let (mut w, mut x, mut y, mut z) = (0, 0, 0, 0);
            for (((&p, &q), &r), &s) in a.iter().zip(b).zip(c).zip(d) {
                w = self.step(w, p);
                x = self.step(x, q);
                y = self.step(y, r);
                z = self.step(z, s);
            }
            [w, x, y, z].contains(&self.matched)
        }
    }

    fn walk(&self, state: u32, bytes: &[u8]) -> u32 {
        bytes
            .iter()
            .fold(state, |state, &byte| self.step(state, byte))
    }

    #[inline]
    fn step(&self, state: u32, byte: u8) -> u32 {
        self.table[state as usize + usize::from(self.classes[usize::from(byte)])]
    }
}

/// `text` as `N` parts of equal length that cover it, each overlapping the
/// next by at least `overlap` bytes, so that every occurrence of a keyword
/// of up to `overlap + 1` bytes lies whole in one part: parts start at most
/// `length - overlap` bytes apart, the first at 0, the last ending at the
/// end. (Meant for texts several times longer than `overlap`.)
pub(super) fn parts<const N: usize>(text: &[u8], overlap: usize) -> [&[u8]; N] {
    let apart = text.len().saturating_sub(overlap).div_ceil(N);
    let length = (apart + overlap).min(text.len());
    std::array::from_fn(|i| {
        let start = (i * apart).min(text.len() - length);
        &text[start..start + length]
    })
}

/// Every byte of every keyword, flattened: the bytes each accepts, whether
/// it ends its keyword (and the keyword's tag), and where each keyword
/// starts. The input of both automata's subset constructions.
pub(super) struct Positions {
    pub(super) accepts: Vec<[bool; 256]>,
    /// For the last byte of a keyword, its tag.
    pub(super) ends: Vec<Option<u32>>,
    pub(super) firsts: Vec<u32>,
    pub(super) longest: usize,
    /// More than [`limits::POSITIONS`] keyword bytes: the rest were left
    /// out, and no automaton is built.
    pub(super) too_many: bool,
}

impl Positions {
    /// `keywords` (text, counts only as written, tag), each cut to `cut`
    /// bytes; empty ones are left out.
    pub(super) fn new<'k>(
        keywords: impl IntoIterator<Item = (&'k str, bool, u32)>,
        cut: usize,
    ) -> Self {
        let mut positions = Self {
            accepts: Vec::new(),
            ends: Vec::new(),
            firsts: Vec::new(),
            longest: 0,
            too_many: false,
        };
        for (keyword, case_sensitive, tag) in keywords {
            let bytes = &keyword.as_bytes()[..keyword.len().min(cut)];
            if bytes.is_empty() {
                continue;
            }
            if positions.accepts.len() + bytes.len() > limits::POSITIONS {
                positions.too_many = true;
                break;
            }
            positions.longest = positions.longest.max(bytes.len());
            positions.firsts.push(state_id(positions.accepts.len()));
            for (at, &byte) in bytes.iter().enumerate() {
                let mut set = [false; 256];
                set[usize::from(byte)] = true;
                if !case_sensitive {
                    set[usize::from(byte.to_ascii_lowercase())] = true;
                    set[usize::from(byte.to_ascii_uppercase())] = true;
                }
                positions.accepts.push(set);
                positions.ends.push((at + 1 == bytes.len()).then_some(tag));
            }
        }
        positions
    }

    /// For each class (given by one of its bytes), the keywords' first
    /// bytes that accept it: where a step may begin a keyword.
    pub(super) fn starting(&self, representatives: &[u8]) -> Vec<Vec<u32>> {
        representatives
            .iter()
            .map(|&byte| {
                self.firsts
                    .iter()
                    .copied()
                    .filter(|&at| self.accepts[at as usize][usize::from(byte)])
                    .collect()
            })
            .collect()
    }

    /// Byte to class (bytes every keyword byte treats alike share one), and
    /// one byte of each class.
    pub(super) fn classes(&self) -> ([u8; 256], Vec<u8>) {
        let mut classes = [0_u8; 256];
        let mut by_signature: HashMap<Vec<bool>, u8> = HashMap::new();
        let mut representatives: Vec<u8> = Vec::new();
        for byte in 0..=255_u8 {
            let signature: Vec<bool> = self
                .accepts
                .iter()
                .map(|set| set[usize::from(byte)])
                .collect();
            let next = u8::try_from(representatives.len())
                .unwrap_or_else(|_| unreachable!("at most 256 classes of 256 bytes"));
            let class = *by_signature.entry(signature).or_insert_with(|| {
                representatives.push(byte);
                next
            });
            classes[usize::from(byte)] = class;
        }
        (classes, representatives)
    }
}

pub(super) fn state_id(index: usize) -> u32 {
    u32::try_from(index).unwrap_or_else(|_| unreachable!("keyword automata stay far below 2^32"))
}

#[cfg(test)]
mod tests {
    use aho_corasick::AhoCorasick;
    use proptest::prelude::*;

    use super::*;

    /// What the filter must answer: a search for the cut keywords, ASCII
    /// case-insensitive or case-sensitive as each says.
    struct Reference(Vec<AhoCorasick>);

    impl Reference {
        fn new(keywords: &[(&str, bool)]) -> Self {
            let searcher = |case_sensitive: bool| {
                let cut: Vec<&[u8]> = keywords
                    .iter()
                    .filter(|(k, exact)| !k.is_empty() && *exact == case_sensitive)
                    .map(|(k, _)| &k.as_bytes()[..k.len().min(MAX_KEYWORD_BYTES)])
                    .collect();
                (!cut.is_empty()).then(|| {
                    AhoCorasick::builder()
                        .ascii_case_insensitive(!case_sensitive)
                        .build(&cut)
                        .unwrap()
                })
            };
            Self(
                [searcher(true), searcher(false)]
                    .into_iter()
                    .flatten()
                    .collect(),
            )
        }

        fn is_match(&self, text: &[u8]) -> bool {
            self.0.iter().any(|ac| ac.is_match(text))
        }
    }

    fn any_case(keywords: &[&'static str]) -> Vec<(&'static str, bool)> {
        keywords.iter().map(|k| (*k, false)).collect()
    }

    #[test]
    fn finds_keywords_in_any_case_and_part() {
        let keywords = any_case(&["password", "://", "sk", "age-secret-key-1", "eyj"]);
        let filter = KeywordFilter::new(keywords);
        for text in [
            "PassWord=x",
            "see https://example.com",
            "task done",
            "AGE-SECRET-",
            "eyJhbGciOi",
            // A keyword across the border of two parts, for every length
            // the splitting rules cover.
            &format!("{}password{}", "x".repeat(60), "y".repeat(60)),
            &format!("{}://{}", "x".repeat(31), "y".repeat(31)),
        ] {
            assert!(filter.may_match(text.as_bytes()), "{text}");
        }
        for text in ["", "plain words", "pas sword", "age-sec", "s k", "ey j"] {
            assert!(!filter.may_match(text.as_bytes()), "{text}");
        }
        // Cut to MAX_KEYWORD_BYTES: "age-secr" is enough.
        assert!(filter.may_match(b"age-secr"));
    }

    #[test]
    fn case_sensitive_keywords_count_only_as_written() {
        let filter = KeywordFilter::new([("SK", true), ("password", false), ("eyJ", true)]);
        for text in ["SK0123", "PASSWORD", "passWord", "x.eyJhb"] {
            assert!(filter.may_match(text.as_bytes()), "{text}");
        }
        for text in ["task", "sku", "sK", "Sk", "EYJ", "keyjam"] {
            assert!(!filter.may_match(text.as_bytes()), "{text}");
        }
    }

    #[test]
    fn without_keywords_nothing_matches_and_always_everything_does() {
        let filter = KeywordFilter::new([("", false), ("", true)]);
        assert!(!filter.may_match(b"anything at all"));
        assert!(!filter.may_match(&[0; 200]));
        let always = KeywordFilter::always();
        for text in [&b""[..], b"x", &[0; 20], &[b'a'; 300]] {
            assert!(always.may_match(text));
        }
    }

    #[test]
    fn the_builtin_keywords_make_a_small_automaton() {
        let filter = KeywordFilter::new(super::super::BUILTIN_RULES.iter().flat_map(|rule| {
            let exact = rule.case_sensitive_keywords;
            rule.keywords.iter().map(move |k| (*k, exact))
        }));
        // A few hundred states of under 64 classes: it stays in cache.
        assert!(filter.table.len() < 32 * 1024, "{}", filter.table.len());
        assert!(filter.overlap < MAX_KEYWORD_BYTES);
        assert!(!filter.may_match(b"Scheduled task report-export-3 completed in 2.1s"));
        assert!(filter.may_match(b"export GITHUB_TOKEN=x"));
    }

    #[test]
    fn agrees_with_aho_corasick_at_every_border() {
        let keywords = [
            ("key", false),
            ("token", false),
            ("Q~", true),
            ("-----begin", false),
        ];
        let filter = KeywordFilter::new(keywords);
        let reference = Reference::new(&keywords);
        for len in 2_usize..300 {
            for at in 0..=len - 2 {
                for planted in [b"Q~", b"q~"] {
                    let mut text = vec![b'.'; len];
                    text[at..at + 2].copy_from_slice(planted);
                    assert_eq!(
                        filter.may_match(&text),
                        reference.is_match(&text),
                        "len {len} at {at}"
                    );
                }
            }
        }
    }

    proptest! {
        #[test]
        fn agrees_with_aho_corasick(
            keywords in prop::collection::vec(("[a-cA-C:~_-]{0,10}", any::<bool>()), 0..12),
            text in prop::collection::vec(
                prop::sample::select(b"abcABC:~_- \xff".to_vec()), 0..400),
        ) {
            let keywords: Vec<(&str, bool)> =
                keywords.iter().map(|(k, exact)| (k.as_str(), *exact)).collect();
            let filter = KeywordFilter::new(keywords.iter().copied());
            let reference = Reference::new(&keywords);
            prop_assert_eq!(filter.may_match(&text), reference.is_match(&text));
        }
    }
}
