//! The second look, for texts the [`KeywordFilter`](super::filter::KeywordFilter)
//! says may hold a keyword: which rules' keywords are there?
//!
//! A DFA over the whole keywords (each ASCII case-insensitive or
//! case-sensitive, as its rule says) walks the text, a long one in four
//! overlapping parts side by side (as the filter does). A state remembers
//! the keywords that have just ended (their tags: rule indices), and the
//! states where any has are numbered last, so the walk tests one bound per
//! byte and looks up the tags only there.

use std::collections::HashMap;

use super::filter::{Positions, limits, parts, state_id};

/// See the module docs.
#[derive(Debug, Clone)]
pub(super) struct KeywordScanner {
    /// Byte to class.
    classes: [u8; 256],
    /// `table[state + class]`, states premultiplied by `stride`.
    table: Box<[u32]>,
    stride: usize,
    /// States at or past this one (premultiplied) end keywords.
    first_output: u32,
    /// For each of those states, in order, the tags of the keywords that
    /// end there.
    outputs: Box<[Box<[u32]>]>,
    /// Every tag, when the automaton would be too large: each text then
    /// reports them all.
    everything: Option<Box<[u32]>>,
    /// The longest keyword, less one byte: how far the parts of a long
    /// text overlap.
    overlap: usize,
}

/// Texts of at least this many bytes are walked in four parts side by side
/// (as the filter does), shorter ones in one.
const SPLIT_AT: usize = 256;

/// A DFA state while building: the keyword bytes that come next after a
/// partial match, and the tags of the keywords that just ended (both
/// sorted).
type Set = (Vec<u32>, Vec<u32>);

impl KeywordScanner {
    /// The scanner over `keywords`: text, whether it counts only as written
    /// (else ASCII case-insensitive), and the tag reported when it occurs.
    /// Empty keywords are ignored.
    pub(super) fn new<'k>(keywords: impl IntoIterator<Item = (&'k str, bool, u32)>) -> Self {
        let keywords: Vec<(&str, bool, u32)> = keywords.into_iter().collect();
        let positions = Positions::new(keywords.iter().copied(), usize::MAX);
        let everything = || {
            let mut tags: Vec<u32> = keywords.iter().map(|&(_, _, tag)| tag).collect();
            tags.sort_unstable();
            tags.dedup();
            Self::everything(tags)
        };
        if positions.too_many {
            return everything();
        }
        let (classes, representatives) = positions.classes();
        let starting = positions.starting(&representatives);
        let stride = representatives.len();

        let start: Set = (Vec::new(), Vec::new());
        let mut ids: HashMap<Set, u32> = HashMap::from([(start.clone(), 0)]);
        let mut sets: Vec<Set> = vec![start];
        let mut rows: Vec<Vec<u32>> = Vec::new();
        let mut work = 0_usize;
        while rows.len() < sets.len() {
            if sets.len() * stride > limits::TABLE || work > limits::WORK {
                return everything();
            }
            let (active, _) = sets[rows.len()].clone();
            let mut row = Vec::with_capacity(stride);
            for (&byte, starting) in representatives.iter().zip(&starting) {
                work += active.len() + starting.len();
                let mut next = (Vec::new(), Vec::new());
                for &at in active.iter().chain(starting) {
                    let at = at as usize;
                    if positions.accepts[at][usize::from(byte)] {
                        match positions.ends[at] {
                            Some(tag) => next.1.push(tag),
                            None => next.0.push(state_id(at + 1)),
                        }
                    }
                }
                for part in [&mut next.0, &mut next.1] {
                    part.sort_unstable();
                    part.dedup();
                }
                let fresh = state_id(sets.len());
                row.push(*ids.entry(next).or_insert_with_key(|next| {
                    sets.push(next.clone());
                    fresh
                }));
            }
            rows.push(row);
        }

        // States that end no keyword first (the start state stays 0), then
        // the others.
        let mut order: Vec<usize> = (0..sets.len()).collect();
        order.sort_by_key(|&state| (!sets[state].1.is_empty(), state));
        let mut renumbered = vec![0_usize; sets.len()];
        for (new, &old) in order.iter().enumerate() {
            renumbered[old] = new;
        }
        let quiet = sets.iter().filter(|(_, tags)| tags.is_empty()).count();
        let mut table = Vec::with_capacity(rows.len() * stride);
        for &old in &order {
            table.extend(
                rows[old]
                    .iter()
                    .map(|&target| state_id(renumbered[target as usize] * stride)),
            );
        }
        let outputs = order[quiet..]
            .iter()
            .map(|&old| sets[old].1.clone().into_boxed_slice())
            .collect();
        Self {
            classes,
            table: table.into_boxed_slice(),
            stride,
            first_output: state_id(quiet * stride),
            outputs,
            everything: None,
            overlap: positions.longest.saturating_sub(1),
        }
    }

    fn everything(tags: Vec<u32>) -> Self {
        Self {
            classes: [0; 256],
            table: Box::new([0]),
            stride: 1,
            first_output: 1,
            outputs: Box::new([]),
            everything: Some(tags.into_boxed_slice()),
            overlap: 0,
        }
    }

    /// The longest keyword, less one byte: a keyword that overlaps a span
    /// lies within this many bytes of it.
    pub(super) const fn overlap(&self) -> usize {
        self.overlap
    }

    /// True when building gave up (see [`limits`]).
    #[cfg(test)]
    pub(super) const fn gave_up(&self) -> bool {
        self.everything.is_some()
    }

    /// Calls `found` with the tags of the keywords that end at each byte of
    /// `text` where any does (a tag may come several times).
    pub(super) fn scan(&self, text: &[u8], mut found: impl FnMut(&[u32])) {
        if let Some(tags) = &self.everything {
            found(tags);
            return;
        }
        if text.len() < SPLIT_AT.max(4 * self.overlap) {
            let mut state = 0_u32;
            for &byte in text {
                state = self.step(state, byte);
                self.report(state, &mut found);
            }
            return;
        }
        // Each occurrence lies whole in one part; one in the overlap of two
        // is reported twice.
        let [a, b, c, d] = parts(text, self.overlap);
        let mut states = [0_u32; 4];
        for (((&p, &q), &r), &s) in a.iter().zip(b).zip(c).zip(d) {
            for (state, byte) in states.iter_mut().zip([p, q, r, s]) {
                *state = self.step(*state, byte);
                self.report(*state, &mut found);
            }
        }
    }

    #[inline]
    fn step(&self, state: u32, byte: u8) -> u32 {
        self.table[state as usize + usize::from(self.classes[usize::from(byte)])]
    }

    #[inline]
    fn report(&self, state: u32, found: &mut impl FnMut(&[u32])) {
        if state >= self.first_output {
            found(&self.outputs[(state - self.first_output) as usize / self.stride]);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use aho_corasick::AhoCorasick;
    use proptest::prelude::*;

    use super::*;

    fn tags_found(scanner: &KeywordScanner, text: &[u8]) -> BTreeSet<u32> {
        let mut tags = BTreeSet::new();
        scanner.scan(text, |found| tags.extend(found));
        tags
    }

    /// The tags of the keywords an overlapping search finds, each keyword
    /// ASCII case-insensitive or case-sensitive as it says.
    fn expected(keywords: &[(&str, bool, u32)], text: &[u8]) -> BTreeSet<u32> {
        let mut tags = BTreeSet::new();
        for &(keyword, exact, tag) in keywords.iter().filter(|(k, ..)| !k.is_empty()) {
            let ac = AhoCorasick::builder()
                .ascii_case_insensitive(!exact)
                .build([keyword])
                .unwrap();
            if ac.is_match(text) {
                tags.insert(tag);
            }
        }
        tags
    }

    #[test]
    fn reports_each_keyword_in_the_case_it_counts_in() {
        let keywords = [
            ("SK", true, 1),
            ("sk-", true, 2),
            ("password", false, 3),
            ("pass", false, 4),
            ("://", false, 5),
        ];
        let scanner = KeywordScanner::new(keywords);
        let cases: [(&str, &[u32]); 7] = [
            ("task", &[]),
            ("SK01", &[1]),
            ("use sk-abc", &[2]),
            ("PassWord=x", &[3, 4]),
            ("bypass", &[4]),
            ("https://x SKy", &[1, 5]),
            ("", &[]),
        ];
        for (text, tags) in cases {
            assert_eq!(
                tags_found(&scanner, text.as_bytes()),
                tags.iter().copied().collect(),
                "{text}"
            );
        }
    }

    #[test]
    fn the_builtin_keywords_make_a_small_automaton() {
        let rules = super::super::BUILTIN_RULES;
        let scanner = KeywordScanner::new(rules.iter().enumerate().flat_map(|(i, rule)| {
            let exact = rule.case_sensitive_keywords;
            rule.keywords
                .iter()
                .map(move |k| (*k, exact, u32::try_from(i).unwrap()))
        }));
        assert!(scanner.everything.is_none());
        assert!(scanner.table.len() < 64 * 1024, "{}", scanner.table.len());
        let kv = rules.iter().position(|r| r.name == "kv_secret").unwrap();
        let url = rules.iter().position(|r| r.name == "url_password").unwrap();
        assert_eq!(
            tags_found(&scanner, b"DB_PASSWORD=x from https://h"),
            BTreeSet::from([u32::try_from(kv).unwrap(), u32::try_from(url).unwrap()])
        );
    }

    #[test]
    fn too_many_states_report_every_tag() {
        let scanner = KeywordScanner::everything(vec![2, 7]);
        assert_eq!(tags_found(&scanner, b""), BTreeSet::from([2, 7]));
    }

    proptest! {
        #[test]
        fn agrees_with_aho_corasick(
            keywords in prop::collection::vec(("[a-cA-C:~_-]{0,10}", any::<bool>(), 0_u32..5), 0..12),
            text in prop::collection::vec(
                prop::sample::select(b"abcABC:~_- \xff".to_vec()), 0..700),
        ) {
            let keywords: Vec<(&str, bool, u32)> =
                keywords.iter().map(|(k, exact, tag)| (k.as_str(), *exact, *tag)).collect();
            let scanner = KeywordScanner::new(keywords.iter().copied());
            prop_assert_eq!(tags_found(&scanner, &text), expected(&keywords, &text));
        }
    }
}
