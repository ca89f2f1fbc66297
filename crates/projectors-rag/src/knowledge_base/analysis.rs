//! Text analysis: how documents and queries become index terms, in every
//! language a team writes runbooks in.
//!
//! 1. **Folding.** The text is NFKC-normalized, so full-width and half-width
//!    forms fold together (`ＨｉｋａｒｉＣＰ` is `HikariCP`, `ｶﾀｶﾅ` is
//!    `カタカナ`, `１２` is `12`), then lowercased.
//! 2. **Words.** A word is a maximal run of letters and digits (Unicode
//!    `Alphabetic` or `Numeric`), exactly as before for Latin text.
//! 3. **Scripts.** Inside a word, CJK characters (Han, Hiragana, Katakana,
//!    Hangul) are split from the rest: `HikariCP连接池` is `hikaricp` and
//!    `连接池`. A non-CJK part is one term; a CJK part is segmented by the
//!    [`CjkSegmenter`]: overlapping character bigrams (`连接池` gives `连接`,
//!    `接池`; a lone character stays a unigram), as Lucene's CJK analyzer
//!    does. The bigram segmenter needs no dictionary and treats Chinese,
//!    Japanese and Korean alike; it was chosen over a dictionary segmenter by
//!    recall on the labeled query set (see the crate's README).
//! 4. **Latin filters.** Terms longer than 40 bytes are dropped, English stop
//!    words removed, English Snowball stemming applied (CJK terms pass
//!    through unchanged).
//!
//! Documents and queries go through the same analyzer, so a query finds a
//! document exactly when they share terms. [`ANALYZER_VERSION`] names the
//! whole pipeline: a persistent index built with another version is rebuilt.

use tantivy::tokenizer::{
    Language, LowerCaser, RemoveLongFilter, Stemmer, StopWordFilter, TextAnalyzer, Token,
    TokenStream, Tokenizer,
};
use unicode_normalization::UnicodeNormalization;

/// Names the analysis pipeline (folding, word rules, CJK segmentation,
/// filters). Changing any of them changes this, which rebuilds persistent
/// indexes made with the old one.
pub const ANALYZER_VERSION: &str = "runbook-v2-nfkc-cjk-bigram";

/// Words too common in queries to tell runbooks apart: Lucene's English stop
/// words plus question words.
const STOP_WORDS: [&str; 51] = [
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into", "is", "it",
    "no", "not", "of", "on", "or", "such", "that", "the", "their", "then", "there", "these",
    "they", "this", "to", "was", "will", "with", "how", "what", "why", "when", "where", "which",
    "who", "do", "does", "i", "my", "we", "our", "can", "has", "have", "had", "been",
];

/// How a run of CJK characters becomes terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum CjkSegmenter {
    /// Overlapping character bigrams; a lone character is a unigram.
    #[default]
    Bigram,
    /// Han runs cut by jieba (search mode, its bundled dictionary); kana and
    /// Hangul runs as bigrams. Only with the `jieba` feature; kept for the
    /// analyzer comparison of `cargo xtask bench knowledge`.
    #[cfg(feature = "jieba")]
    Jieba,
}

impl CjkSegmenter {
    /// A short stable name (`bigram`, `jieba`).
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::Bigram => "bigram",
            #[cfg(feature = "jieba")]
            Self::Jieba => "jieba",
        }
    }
}

/// The analyzer of documents and queries with `segmenter` for CJK text.
pub(crate) fn analyzer(segmenter: CjkSegmenter) -> TextAnalyzer {
    TextAnalyzer::builder(RunbookTokenizer::new(segmenter))
        .filter(RemoveLongFilter::limit(40))
        .filter(LowerCaser)
        .filter(StopWordFilter::remove(
            STOP_WORDS.iter().map(|w| (*w).to_owned()),
        ))
        .filter(Stemmer::new(Language::English))
        .build()
}

/// The analyzed terms of `text`, in order, with repeats.
pub(crate) fn analyze(analyzer: &TextAnalyzer, text: &str) -> Vec<String> {
    let mut analyzer = analyzer.clone();
    let mut stream = analyzer.token_stream(text);
    let mut terms = Vec::new();
    while let Some(token) = stream.next() {
        terms.push(token.text.clone());
    }
    terms
}

/// Whether `c` is written in a CJK script (Han, Hiragana, Katakana, Hangul,
/// and their marks such as `々` and `ー`).
#[must_use]
pub(crate) const fn is_cjk(c: char) -> bool {
    matches!(c,
        '\u{1100}'..='\u{11FF}'     // Hangul Jamo
        | '\u{3005}'..='\u{3007}'   // 々 〆 〇
        | '\u{3040}'..='\u{30FF}'   // Hiragana, Katakana
        | '\u{3130}'..='\u{318F}'   // Hangul Compatibility Jamo
        | '\u{31F0}'..='\u{31FF}'   // Katakana Phonetic Extensions
        | '\u{3400}'..='\u{4DBF}'   // CJK Extension A
        | '\u{4E00}'..='\u{9FFF}'   // CJK Unified Ideographs
        | '\u{A960}'..='\u{A97F}'   // Hangul Jamo Extended-A
        | '\u{AC00}'..='\u{D7FF}'   // Hangul Syllables, Jamo Extended-B
        | '\u{F900}'..='\u{FAFF}'   // CJK Compatibility Ideographs
        | '\u{20000}'..='\u{3FFFF}' // CJK Extensions B and later
    )
}

#[cfg(feature = "jieba")]
const fn is_han(c: char) -> bool {
    matches!(c,
        '\u{3005}'..='\u{3007}'
        | '\u{3400}'..='\u{4DBF}'
        | '\u{4E00}'..='\u{9FFF}'
        | '\u{F900}'..='\u{FAFF}'
        | '\u{20000}'..='\u{3FFFF}')
}

#[cfg(feature = "jieba")]
fn jieba() -> &'static jieba_rs::Jieba {
    static JIEBA: std::sync::OnceLock<jieba_rs::Jieba> = std::sync::OnceLock::new();
    JIEBA.get_or_init(jieba_rs::Jieba::new)
}

/// Folds, splits into words and segments CJK runs (steps 1 to 3 of the
/// module docs). Offsets are into the folded text (nothing here uses them:
/// excerpts are whole chunks of the source).
#[derive(Debug, Clone)]
pub(crate) struct RunbookTokenizer {
    segmenter: CjkSegmenter,
    folded: String,
    tokens: Vec<Token>,
}

impl RunbookTokenizer {
    pub(crate) const fn new(segmenter: CjkSegmenter) -> Self {
        Self {
            segmenter,
            folded: String::new(),
            tokens: Vec::new(),
        }
    }

    fn push(&mut self, from: usize, to: usize) {
        let text = self.folded[from..to].to_owned();
        self.push_text(from, to, text);
    }

    fn push_text(&mut self, from: usize, to: usize, text: String) {
        let position = self.tokens.len();
        self.tokens.push(Token {
            offset_from: from,
            offset_to: to,
            position,
            text,
            position_length: 1,
        });
    }

    /// Terms of one run of CJK characters at `from..to` of the folded text.
    fn segment_cjk(&mut self, from: usize, to: usize) {
        match self.segmenter {
            CjkSegmenter::Bigram => self.bigrams(from, to),
            #[cfg(feature = "jieba")]
            CjkSegmenter::Jieba => {
                // Han sub-runs through jieba, kana and Hangul sub-runs as bigrams.
                let run = self.folded[from..to].to_owned();
                let mut start = 0;
                let mut chars = run.char_indices().peekable();
                while let Some((offset, c)) = chars.next() {
                    let han = is_han(c);
                    let next_differs = chars.peek().is_none_or(|(_, n)| is_han(*n) != han);
                    if next_differs {
                        let end = offset + c.len_utf8();
                        if han {
                            for word in jieba().cut_for_search(&run[start..end], true) {
                                if word.word.chars().any(char::is_alphanumeric) {
                                    self.push_text(from + start, from + end, word.word.to_owned());
                                }
                            }
                        } else {
                            self.bigrams(from + start, from + end);
                        }
                        start = end;
                    }
                }
            }
        }
    }

    fn bigrams(&mut self, from: usize, to: usize) {
        let spans: Vec<(usize, char)> = self.folded[from..to]
            .char_indices()
            .map(|(at, c)| (from + at, c))
            .collect();
        let mut chars = spans.into_iter();
        let Some((mut previous, first)) = chars.next() else {
            return;
        };
        let mut previous_len = first.len_utf8();
        let mut pairs = 0_usize;
        for (at, c) in chars {
            self.push(previous, at + c.len_utf8());
            pairs += 1;
            previous = at;
            previous_len = c.len_utf8();
        }
        if pairs == 0 {
            self.push(previous, previous + previous_len);
        }
    }

    fn tokenize(&mut self, text: &str) {
        self.tokens.clear();
        self.folded.clear();
        self.folded.extend(text.nfkc());
        // Segments: maximal runs of letters and digits of one class (CJK or not).
        let mut segments: Vec<(usize, usize, bool)> = Vec::new();
        let mut open: Option<(usize, bool)> = None;
        for (offset, c) in self.folded.char_indices() {
            let class = c.is_alphanumeric().then(|| is_cjk(c));
            match (open, class) {
                (Some((_, open_cjk)), Some(cjk)) if open_cjk == cjk => {}
                (_, class) => {
                    if let Some((start, cjk)) = open {
                        segments.push((start, offset, cjk));
                    }
                    open = class.map(|cjk| (offset, cjk));
                }
            }
        }
        if let Some((start, cjk)) = open {
            segments.push((start, self.folded.len(), cjk));
        }
        for (start, end, cjk) in segments {
            if cjk {
                self.segment_cjk(start, end);
            } else {
                self.push(start, end);
            }
        }
    }
}

impl Tokenizer for RunbookTokenizer {
    type TokenStream<'a> = RunbookTokenStream<'a>;

    fn token_stream<'a>(&'a mut self, text: &'a str) -> RunbookTokenStream<'a> {
        self.tokenize(text);
        RunbookTokenStream {
            tokens: &mut self.tokens,
            next: 0,
            empty: Token::default(),
        }
    }
}

/// The tokens of one text, produced ahead.
pub(crate) struct RunbookTokenStream<'a> {
    tokens: &'a mut Vec<Token>,
    next: usize,
    empty: Token,
}

impl TokenStream for RunbookTokenStream<'_> {
    fn advance(&mut self) -> bool {
        if self.next < self.tokens.len() {
            self.next += 1;
            true
        } else {
            false
        }
    }

    // Only called after `advance` returned true, as tantivy's filters do;
    // before that the first token (or an empty one) stands in.
    fn token(&self) -> &Token {
        self.tokens
            .get(self.next.saturating_sub(1))
            .unwrap_or(&self.empty)
    }

    fn token_mut(&mut self) -> &mut Token {
        match self.tokens.get_mut(self.next.saturating_sub(1)) {
            Some(token) => token,
            None => &mut self.empty,
        }
    }
}
