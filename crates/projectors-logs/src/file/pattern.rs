//! Text lines read with a regular expression (`format = "pattern"`) and the
//! presets (a documented pattern plus its rules: time syntax, level names,
//! which lines join an event).
//!
//! A line the pattern matches starts an event (its *head*); a line it does
//! not match continues the event before it (a stack trace, a multi-line
//! message). Two presets add a rule of their writer:
//!
//! - `postgresql`: a `DETAIL`/`HINT`/`CONTEXT`/`STATEMENT`/`QUERY`/`LOCATION`
//!   line joins the event before it when that event is of the same pid
//!   (PostgreSQL writes one report as several prefixed lines);
//! - `cri`: a `P` (partial) line is joined, without a separator, with the
//!   next line of the same stream.
//!
//! Everything here is a pure function of its input bytes: nothing panics,
//! allocates beyond the line, or reads anything else.

use std::borrow::Cow;

use aci_contracts::Timestamp;
use regex::bytes::{CaptureLocations, Regex, RegexBuilder};
use regex_automata::{Anchored, Input, meta, util::syntax};
use serde_json::Value;

use super::formats::{Escapes, Fields};
use super::time::{
    TimeRule, Zone, parse_klog, parse_local, parse_mariadb, parse_postgres, parse_rfc3339,
};
use crate::RawLogEvent;

/// Continuation lines kept in one event (the rest is counted and dropped
/// from the raw record, still searched).
pub(crate) const MAX_CONTINUATION_LINES: usize = 256;
/// Bytes of continuation text kept in one event.
pub(crate) const MAX_CONTINUATION_BYTES: usize = 64 * 1024;

/// A preset: the documented pattern of one writer and its rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Preset {
    /// The `format` name.
    pub(crate) name: &'static str,
    /// The regular expression (the `regex` crate's syntax).
    pub(crate) pattern: &'static str,
    /// How its `timestamp` group is written.
    time: PresetTime,
    /// How its level is named.
    levels: Levels,
    /// Which lines join an event besides those the pattern does not match.
    join: Join,
    /// Named groups not kept as fields (consumed by the rules).
    consumed: &'static [&'static str],
}

/// The time syntaxes of the presets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PresetTime {
    /// RFC 3339 (`T` or a space), `,` accepted as the decimal mark
    /// (logback's ISO-8601); without an offset, in the topic's zone.
    Iso,
    /// PostgreSQL's `%m`/`%t`.
    Postgres,
    /// `dd Mon yyyy hh:mm:ss.mmm` (Redis).
    Redis,
    /// `yyyy/mm/dd hh:mm:ss` (nginx).
    Nginx,
    /// `yyyy-mm-dd hh:mm:ss` with a space-padded hour, or `yymmdd hh:mm:ss`.
    Mariadb,
    /// `mmdd hh:mm:ss.uuuuuu`, the year inferred.
    Klog,
}

/// How a preset's level is named in the event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Levels {
    /// As written.
    AsWritten,
    /// PostgreSQL severities.
    Postgres,
    /// Redis' marks.
    RedisMark,
    /// MariaDB's `[Note]`, `[Warning]`, `[ERROR]`.
    Mariadb,
    /// klog's letters.
    Klog,
}

/// Which lines join an event although the pattern matches them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Join {
    /// None: every matching line starts an event.
    None,
    /// PostgreSQL's secondary lines of the same pid.
    Secondary,
    /// CRI's partial lines.
    Partial,
}

/// The presets, by `format` name. The crate's README lists each with one
/// real line and the groups it yields (the tests parse those lines).
pub(crate) const PRESETS: [Preset; 7] = [
    Preset {
        name: "spring_boot",
        pattern: r"^(?P<timestamp>\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d{1,9})?(?:Z|[+-]\d{2}(?::?\d{2})?)?)\s+(?P<level>TRACE|DEBUG|INFO|WARN|ERROR|FATAL)\s+(?P<pid>\d+)?\s*---\s+(?:\[(?P<application>[^\]]*)\]\s*)?\[\s*(?P<thread>[^\]]*?)\s*\]\s+(?:\[(?P<correlation>[^\]]*)\]\s+)?(?P<logger>\S+)\s+: ?(?P<message>.*)$",
        time: PresetTime::Iso,
        levels: Levels::AsWritten,
        join: Join::None,
        consumed: &[],
    },
    Preset {
        name: "postgresql",
        pattern: r"^(?P<timestamp>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:\.\d+)?(?: [A-Za-z][A-Za-z0-9_/+-]*| ?[+-]\d{2}(?::?\d{2})?)?) \[(?P<pid>\d+)\] (?:(?P<user>[^@\s\[]*)@(?P<database>\S*) )?(?P<level>DEBUG[1-5]|INFO|NOTICE|WARNING|ERROR|LOG|FATAL|PANIC|DETAIL|HINT|QUERY|CONTEXT|LOCATION|STATEMENT):  ?(?P<message>.*)$",
        time: PresetTime::Postgres,
        levels: Levels::Postgres,
        join: Join::Secondary,
        consumed: &[],
    },
    Preset {
        name: "redis",
        pattern: r"^(?P<pid>\d+):(?P<role>[XCSM]) (?P<timestamp>\d{1,2} [A-Z][a-z]{2} \d{4} \d{2}:\d{2}:\d{2}(?:\.\d+)?) (?P<level>[.*#-]) (?P<message>.*)$",
        time: PresetTime::Redis,
        levels: Levels::RedisMark,
        join: Join::None,
        consumed: &[],
    },
    Preset {
        name: "nginx_error",
        pattern: r"^(?P<timestamp>\d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2}) \[(?P<level>debug|info|notice|warn|error|crit|alert|emerg)\] (?P<pid>\d+)#(?P<tid>\d+): (?:\*(?P<connection>\d+) )?(?P<message>.*)$",
        time: PresetTime::Nginx,
        levels: Levels::AsWritten,
        join: Join::None,
        consumed: &[],
    },
    Preset {
        name: "mariadb_error",
        pattern: r"^(?P<timestamp>\d{4}-\d{2}-\d{2} [ \d]\d:\d{2}:\d{2}|\d{6} [ \d]\d:\d{2}:\d{2})\s+(?:(?P<thread>\d+) )?\[(?P<level>Note|Warning|ERROR|System|Info|Debug)\] (?P<message>.*)$",
        time: PresetTime::Mariadb,
        levels: Levels::Mariadb,
        join: Join::None,
        consumed: &[],
    },
    Preset {
        name: "klog",
        pattern: r"^(?P<level>[IWEF])(?P<timestamp>\d{4} \d{2}:\d{2}:\d{2}\.\d{6})\s+(?P<thread>\d+) (?P<source>[^:\s\]]+:\d+)\] (?P<message>.*)$",
        time: PresetTime::Klog,
        levels: Levels::Klog,
        join: Join::None,
        consumed: &[],
    },
    Preset {
        name: "cri",
        pattern: r"^(?P<timestamp>\d{4}-\d{2}-\d{2}T\S+) (?P<stream>stdout|stderr) (?P<tag>[PF])(?::\S*)? ?(?P<message>.*)$",
        time: PresetTime::Iso,
        levels: Levels::AsWritten,
        join: Join::Partial,
        consumed: &["tag"],
    },
];

/// The preset named `name`.
pub(crate) fn preset(name: &str) -> Option<&'static Preset> {
    PRESETS.iter().find(|p| p.name == name)
}

/// How the `timestamp` group is read.
#[derive(Debug, Clone, PartialEq, Eq)]
enum HeadTime {
    /// The topic's `timestamp` layout and zone (`format = "pattern"`).
    Rule(TimeRule),
    /// A preset's syntax; `Zone` for times written without an offset.
    Preset(PresetTime, Zone),
}

/// What one line is to the event assembler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LineKind {
    /// An empty line: skipped.
    Blank,
    /// Not matched by the pattern: continues the event before it.
    Other,
    /// Matched: starts an event (unless it completes a partial one of the
    /// same `key`). `partial` for CRI's `P` lines.
    Head { key: u64, partial: bool },
    /// PostgreSQL's secondary line of pid `key`.
    Secondary { key: u64 },
}

/// A compiled `pattern` topic or preset.
#[derive(Debug, Clone)]
pub(crate) struct EventParser {
    regex: Regex,
    timestamp: usize,
    message: usize,
    level: Option<usize>,
    /// Other named groups, kept as fields.
    fields: Vec<(usize, Box<str>)>,
    /// The group of the join key (PostgreSQL's pid, CRI's stream).
    key: Option<usize>,
    /// CRI's tag group.
    tag: Option<usize>,
    time: HeadTime,
    levels: Levels,
    join: Join,
    /// A preset: compiled without Unicode classes (ASCII `\d`, `\s`; any
    /// byte for `.` and negated classes) and matched on the raw bytes. A
    /// custom pattern keeps the `regex` crate's Unicode meaning and is
    /// matched on the line's text (invalid UTF-8 replaced).
    raw: bool,
    /// A custom pattern that is ASCII, compiled without Unicode classes too:
    /// on a line of ASCII text it matches exactly where the Unicode one does
    /// (the classes differ only on other characters), with a much smaller
    /// automaton. Used for ASCII lines, which are matched on their bytes.
    ascii: Option<Regex>,
    /// The pattern split at its `timestamp` group, when it starts with it:
    /// a head line's time read without its captures (for the lines matched
    /// on their bytes: a preset's, a custom pattern's ASCII ones).
    time_first: Option<TimeFirst>,
    /// The pattern before a last `(?P<message>.*)$` ([`message_at`]), for
    /// the same lines: whether a line is a head, told where its message
    /// starts instead of at its end.
    before_message: Option<meta::Regex>,
    /// The bytes a line the pattern matches can begin with, when the
    /// pattern is anchored at the line's start: most continuation lines (a
    /// stack trace's `\tat ...`) are told apart by their first byte alone.
    first: Option<FirstBytes>,
}

/// A set of bytes: those a match of an anchored pattern can begin with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FirstBytes([u64; 4]);

impl FirstBytes {
    /// The bytes a match of `pattern` (compiled as the `regex` crate's byte
    /// regexes are, with Unicode classes or not) can begin with; `None`
    /// when a match may begin anywhere in a line (no `^` or `\A` in front,
    /// or `(?m)`), may be empty, or the pattern does not compile.
    ///
    /// Read from the pattern's Thompson NFA: the bytes of every transition
    /// reachable from its anchored start without consuming a byte.
    /// Look-around assertions on the way are taken as satisfied, so the set
    /// holds at least every byte a match can begin with.
    fn of(pattern: &str, unicode: bool) -> Option<Self> {
        use regex_automata::nfa::thompson::{Compiler, Config, State, WhichCaptures};
        let nfa = Compiler::new()
            .syntax(syntax::Config::new().unicode(unicode).utf8(false))
            .configure(
                Config::new()
                    .nfa_size_limit(Some(PATTERN_SIZE_LIMIT))
                    .which_captures(WhichCaptures::None),
            )
            .build(pattern)
            .ok()?;
        if !nfa.is_always_start_anchored() {
            return None;
        }
        let mut set = [0_u64; 4];
        let mut add = |from: u8, to: u8| {
            for b in from..=to {
                set[usize::from(b >> 6)] |= 1 << (b & 63);
            }
        };
        let mut seen = vec![false; nfa.states().len()];
        let mut stack = vec![nfa.start_anchored()];
        while let Some(id) = stack.pop() {
            if std::mem::replace(&mut seen[id.as_usize()], true) {
                continue;
            }
            match nfa.state(id) {
                State::ByteRange { trans } => add(trans.start, trans.end),
                State::Sparse(sparse) => {
                    for trans in sparse.transitions.iter() {
                        add(trans.start, trans.end);
                    }
                }
                State::Dense(dense) => {
                    for (byte, next) in (0..=u8::MAX).zip(dense.transitions.iter()) {
                        if *next != regex_automata::util::primitives::StateID::ZERO {
                            add(byte, byte);
                        }
                    }
                }
                State::Look { next, .. } | State::Capture { next, .. } => stack.push(*next),
                State::Union { alternates } => stack.extend(alternates.iter().copied()),
                State::BinaryUnion { alt1, alt2 } => stack.extend([*alt1, *alt2]),
                State::Fail => {}
                // An empty match: any line.
                State::Match { .. } => return None,
            }
        }
        Some(Self(set))
    }

    const fn union(self, other: Self) -> Self {
        let [a, b, c, d] = self.0;
        let [e, f, g, h] = other.0;
        Self([a | e, b | f, c | g, d | h])
    }

    const fn contains(&self, byte: u8) -> bool {
        self.0[(byte >> 6) as usize] & (1 << (byte & 63)) != 0
    }
}

/// A pattern of the shape `^(?P<timestamp>T)R`, split in two so that a head
/// line's time is read without its captures, which cost several times a
/// match: the regex crate's matches are leftmost-first (the first way of
/// matching in the pattern's order of preference that lets the whole
/// pattern match), so when `R` matches anchored where the preferred match of
/// `T` at the line's start ends, that match is the group's text.
///
/// When `R` is `P(?P<message>.*)$` (every preset's shape), `P` alone is
/// matched instead of `R`: `.*$` matches whatever is left of a line, so `R`
/// matches where `P` does, and the whole pattern's match takes `P`'s
/// preferred match there; the message starts where that ends.
#[derive(Debug, Clone)]
struct TimeFirst {
    time: meta::Regex,
    rest: Rest,
}

/// What follows the `timestamp` group in a [`TimeFirst`].
#[derive(Debug, Clone)]
enum Rest {
    /// `R`, the whole rest.
    Whole(meta::Regex),
    /// `P`, the rest before a last `(?P<message>.*)$`.
    BeforeMessage(meta::Regex),
}

/// Where [`TimeFirst::split`] found a head line's time and message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Split {
    /// The `timestamp` group is the line's bytes before this.
    time_end: usize,
    /// The `message` group is the line's bytes from this on, when the
    /// pattern ends with it.
    message_start: Option<usize>,
}

impl TimeFirst {
    /// The split of `pattern` (compiled without Unicode classes, as the
    /// byte-matched regexes are), or `None` when it does not start with `^`
    /// (or `\A`) and the `timestamp` group. `message_at`: where the pattern's
    /// last `(?P<message>.*)$` starts ([`message_at`]).
    fn new(pattern: &str, message_at: Option<usize>) -> Option<Self> {
        use regex_syntax::ast::{AssertionKind, Ast, GroupKind, parse::Parser};
        let ast = Parser::new().parse(pattern).ok()?;
        let Ast::Concat(concat) = &ast else {
            return None;
        };
        let [Ast::Assertion(start), Ast::Group(group), ..] = concat.asts.as_slice() else {
            return None;
        };
        if !matches!(
            start.kind,
            AssertionKind::StartLine | AssertionKind::StartText
        ) {
            return None;
        }
        let GroupKind::CaptureName { name, .. } = &group.kind else {
            return None;
        };
        if name.name != "timestamp" {
            return None;
        }
        let inner = group.ast.span();
        let time = pattern.get(inner.start.offset..inner.end.offset)?;
        let rest = pattern.get(group.span.end.offset..concat.span.end.offset)?;
        let before_message = message_at
            .filter(|&at| at >= group.span.end.offset)
            .and_then(|at| pattern.get(group.span.end.offset..at));
        let build = |part: &str| compile_on_bytes(part).ok();
        let rest = match before_message {
            Some(before) => Rest::BeforeMessage(build(before)?),
            None => Rest::Whole(build(rest)?),
        };
        Some(Self {
            time: build(time)?,
            rest,
        })
    }

    /// Where `line`'s time ends and its message starts, when the pattern
    /// matches it and the split can tell.
    fn split(&self, line: &[u8]) -> Option<Split> {
        let time = self.time.find(Input::new(line).anchored(Anchored::Yes))?;
        let rest = Input::new(line).range(time.end()..).anchored(Anchored::Yes);
        let message_start = match &self.rest {
            Rest::Whole(regex) => {
                if !regex.is_match(rest) {
                    return None;
                }
                None
            }
            Rest::BeforeMessage(regex) => Some(regex.find(rest)?.end()),
        };
        Some(Split {
            time_end: time.end(),
            message_start,
        })
    }
}

/// `pattern` compiled as the byte-matched regexes are: without Unicode
/// classes, on bytes.
fn compile_on_bytes(pattern: &str) -> Result<meta::Regex, Box<meta::BuildError>> {
    meta::Builder::new()
        .configure(
            meta::Config::new()
                .nfa_size_limit(Some(PATTERN_SIZE_LIMIT))
                .utf8_empty(false),
        )
        .syntax(syntax::Config::new().unicode(false).utf8(false))
        .build(pattern)
        .map_err(Box::new)
}

/// Where `pattern` ends with a `message` group that matches whatever is left
/// of a line, `(?P<message>.*)$` (or `\z`), the offset in the pattern where
/// that group starts, for the pattern compiled on bytes (`(?-u)`). Then a line
/// matches the pattern exactly when it matches what comes before the group
/// (lines hold no `\n`), and the group is the rest of the line from where
/// that match ends.
///
/// Read from the pattern's syntax tree (for the offset) and from its
/// meaning (flags change what `.` matches: with `R` it misses `\r`).
fn message_at(pattern: &str) -> Option<usize> {
    use regex_syntax::ast::{self, Ast, GroupKind, RepetitionKind, parse::Parser};
    use regex_syntax::hir::HirKind;
    let ast = Parser::new().parse(pattern).ok()?;
    let Ast::Concat(concat) = &ast else {
        return None;
    };
    let [.., Ast::Group(group), Ast::Assertion(end)] = concat.asts.as_slice() else {
        return None;
    };
    if !matches!(
        end.kind,
        ast::AssertionKind::EndLine | ast::AssertionKind::EndText
    ) {
        return None;
    }
    let GroupKind::CaptureName { name, .. } = &group.kind else {
        return None;
    };
    let Ast::Repetition(repeat) = group.ast.as_ref() else {
        return None;
    };
    if name.name != "message"
        || !matches!(repeat.op.kind, RepetitionKind::ZeroOrMore)
        || !matches!(repeat.ast.as_ref(), Ast::Dot(_))
    {
        return None;
    }
    // What `.` means there: every byte but `\n` at least.
    let hir = regex_syntax::ParserBuilder::new()
        .unicode(false)
        .utf8(false)
        .build()
        .parse(pattern)
        .ok()?;
    let HirKind::Concat(parts) = hir.kind() else {
        return None;
    };
    let [.., capture, _] = parts.as_slice() else {
        return None;
    };
    let HirKind::Capture(capture) = capture.kind() else {
        return None;
    };
    let HirKind::Repetition(repeat) = capture.sub.kind() else {
        return None;
    };
    let misses_only_newline = match repeat.sub.kind() {
        HirKind::Class(class) => {
            let mut missed = class.clone();
            missed.negate();
            missed.is_empty() || missed.literal().as_deref() == Some(b"\n".as_slice())
        }
        _ => false,
    };
    (repeat.min == 0 && repeat.max.is_none() && misses_only_newline)
        .then_some(group.span.start.offset)
}

impl PartialEq for EventParser {
    fn eq(&self, other: &Self) -> bool {
        self.regex.as_str() == other.regex.as_str()
            && self.time == other.time
            && self.levels == other.levels
            && self.join == other.join
    }
}

impl Eq for EventParser {}

/// The most states the compiled pattern may take (the `regex` crate's
/// default): a pattern beyond it is refused when the configuration loads.
const PATTERN_SIZE_LIMIT: usize = 10 * 1024 * 1024;

impl EventParser {
    /// `format = "pattern"`: `pattern` with the topic's time rule.
    ///
    /// # Errors
    /// The broken rule, for the configuration error.
    pub(crate) fn custom(pattern: &str, time: TimeRule) -> Result<Self, &'static str> {
        Self::build(
            pattern,
            HeadTime::Rule(time),
            Levels::AsWritten,
            Join::None,
            &[],
            false,
        )
    }

    /// A preset, its zone-less times in `zone`.
    pub(crate) fn preset(preset: &Preset, zone: Zone) -> Self {
        match Self::build(
            preset.pattern,
            HeadTime::Preset(preset.time, zone),
            preset.levels,
            preset.join,
            preset.consumed,
            true,
        ) {
            Ok(parser) => parser,
            // The presets are constants, compiled by the tests.
            Err(rule) => unreachable!("preset {}: {rule}", preset.name),
        }
    }

    fn build(
        pattern: &str,
        time: HeadTime,
        levels: Levels,
        join: Join,
        consumed: &[&str],
        raw: bool,
    ) -> Result<Self, &'static str> {
        let regex = RegexBuilder::new(pattern)
            .unicode(!raw)
            .size_limit(PATTERN_SIZE_LIMIT)
            .build()
            .map_err(|_| "pattern is not a valid regular expression (the regex crate's syntax)")?;
        let ascii = (!raw && pattern.is_ascii())
            .then(|| {
                RegexBuilder::new(pattern)
                    .unicode(false)
                    .size_limit(PATTERN_SIZE_LIMIT)
                    .build()
                    .ok()
            })
            .flatten();
        let on_bytes = raw || ascii.is_some();
        let message_at = on_bytes.then(|| message_at(pattern)).flatten();
        let time_first = on_bytes
            .then(|| TimeFirst::new(pattern, message_at))
            .flatten();
        let before_message = message_at
            .and_then(|at| pattern.get(..at))
            .and_then(|before| compile_on_bytes(before).ok());
        // For both regexes a line may be matched with.
        let first = match (FirstBytes::of(pattern, !raw), &ascii) {
            (Some(set), Some(_)) => FirstBytes::of(pattern, false).map(|ascii| set.union(ascii)),
            (set, _) => set,
        };
        let group = |name: &str| regex.capture_names().position(|n| n == Some(name));
        let timestamp = group("timestamp").ok_or("pattern has no named group `timestamp`")?;
        let message = group("message").ok_or("pattern has no named group `message`")?;
        if regex.is_match(b"") {
            return Err("pattern matches an empty line (every line would start an event)");
        }
        let level = group("level");
        let fields = regex
            .capture_names()
            .enumerate()
            .filter_map(|(i, name)| {
                let name = name?;
                let reserved = matches!(name, "timestamp" | "message" | "level");
                (!reserved && !consumed.contains(&name)).then(|| (i, Box::from(name)))
            })
            .collect();
        let (key, tag) = match join {
            Join::None => (None, None),
            Join::Secondary => (group("pid"), None),
            Join::Partial => (group("stream"), group("tag")),
        };
        Ok(Self {
            regex,
            timestamp,
            message,
            level,
            fields,
            key,
            tag,
            time,
            levels,
            join,
            raw,
            ascii,
            time_first,
            before_message,
            first,
        })
    }

    /// The bytes the pattern is matched on: the line itself for a preset,
    /// its text (invalid UTF-8 replaced) for a custom pattern.
    fn subject<'l>(&self, line: &'l [u8]) -> (&Regex, Cow<'l, [u8]>) {
        if self.raw {
            return (&self.regex, Cow::Borrowed(line));
        }
        if let Some(ascii) = &self.ascii
            && line.is_ascii()
        {
            return (ascii, Cow::Borrowed(line));
        }
        let text = match super::lossy(line) {
            Cow::Borrowed(text) => Cow::Borrowed(text.as_bytes()),
            Cow::Owned(text) => Cow::Owned(text.into_bytes()),
        };
        (&self.regex, text)
    }

    /// How the message may be written differently in the file (for the
    /// prefilter): CRI may split a word across a partial line's end.
    pub(crate) const fn escapes(&self) -> Escapes {
        match self.join {
            Join::Partial => Escapes::CriPartial,
            Join::None | Join::Secondary => Escapes::None,
        }
    }

    /// What `line` (without its line ending) is.
    pub(crate) fn kind(&self, line: &[u8]) -> LineKind {
        if line.is_empty() {
            return LineKind::Blank;
        }
        let (regex, text) = self.subject(line);
        if let (Some(first), Some(&byte)) = (&self.first, text.first())
            && !first.contains(byte)
        {
            return LineKind::Other;
        }
        if self.join == Join::None {
            let head = match &self.before_message {
                Some(before) if self.raw || line.is_ascii() => before.is_match(line),
                _ => regex.is_match(&text),
            };
            return if head {
                LineKind::Head {
                    key: 0,
                    partial: false,
                }
            } else {
                LineKind::Other
            };
        }
        let mut locs = regex.capture_locations();
        if regex.captures_read(&mut locs, &text).is_none() {
            return LineKind::Other;
        }
        let group = |i: Option<usize>| i.and_then(|i| locs.get(i)).map(|(s, e)| &text[s..e]);
        match self.join {
            Join::Secondary => {
                let key = group(self.key)
                    .and_then(|p| std::str::from_utf8(p).ok())
                    .and_then(|p| p.parse().ok())
                    .unwrap_or(0);
                let secondary = group(self.level).is_some_and(|severity| {
                    matches!(
                        severity,
                        b"DETAIL" | b"HINT" | b"CONTEXT" | b"STATEMENT" | b"QUERY" | b"LOCATION"
                    )
                });
                if secondary {
                    LineKind::Secondary { key }
                } else {
                    LineKind::Head {
                        key,
                        partial: false,
                    }
                }
            }
            Join::Partial => LineKind::Head {
                key: u64::from(group(self.key) == Some(b"stderr".as_slice())),
                partial: group(self.tag) == Some(b"P".as_slice()),
            },
            Join::None => LineKind::Other,
        }
    }

    /// Whether `kind` starts an event whatever came before it, given the
    /// kind of the line before (`None`: unknown).
    pub(crate) fn is_definite_start(&self, kind: LineKind, before: Option<LineKind>) -> bool {
        match (kind, self.join) {
            (LineKind::Head { .. }, Join::None | Join::Secondary) => true,
            (LineKind::Head { key, .. }, Join::Partial) => match before {
                Some(LineKind::Head {
                    key: k,
                    partial: true,
                }) => k != key,
                Some(_) => true,
                None => false,
            },
            _ => false,
        }
    }

    /// Whether every line is a head or not by itself alone (no join rule: a
    /// line either starts an event or continues the one before it).
    pub(crate) const fn joins_nothing(&self) -> bool {
        matches!(self.join, Join::None)
    }

    /// Whether the kind of a line depends on the line before it.
    pub(crate) const fn needs_line_before(&self) -> bool {
        matches!(self.join, Join::Partial)
    }

    /// The time of `line` when it certainly starts an event (`before`: the
    /// line before it, `None` when unknown), for the window search.
    pub(crate) fn start_time(
        &self,
        before: Option<&[u8]>,
        line: &[u8],
        reference: Timestamp,
    ) -> Option<Timestamp> {
        let kind = self.kind(line);
        let before = if self.needs_line_before() {
            before.map(|b| self.kind(b))
        } else {
            Some(LineKind::Blank)
        };
        if !self.is_definite_start(kind, before) {
            return None;
        }
        self.head(line, reference).map(|head| head.timestamp)
    }

    /// The time of `line` when it may start an event (a head, or a
    /// PostgreSQL secondary line, which starts one unless it follows an event
    /// of its pid), whatever came before it: for deciding from a file's first
    /// or last lines that none of its events can be in a window.
    pub(crate) fn possible_start_time(
        &self,
        line: &[u8],
        reference: Timestamp,
    ) -> Option<Timestamp> {
        match self.kind(line) {
            LineKind::Head { .. } | LineKind::Secondary { .. } => {
                self.head(line, reference).map(|head| head.timestamp)
            }
            LineKind::Blank | LineKind::Other => None,
        }
    }

    /// The text a line adds to the event it joins: the whole line, but for
    /// a PostgreSQL secondary line from its severity on, and for a CRI line
    /// completing a partial one its message alone.
    pub(crate) fn joined_text<'a>(&self, line: &'a [u8], kind: LineKind) -> Cow<'a, str> {
        let from = match kind {
            LineKind::Other | LineKind::Blank => None,
            LineKind::Secondary { .. } => self.level,
            LineKind::Head { .. } => Some(self.message),
        };
        let Some(group) = from else {
            return super::lossy(line);
        };
        let (regex, text) = self.subject(line);
        let mut locs = regex.capture_locations();
        let span = regex
            .captures_read(&mut locs, &text)
            .and_then(|_| locs.get(group));
        let Some((start, end)) = span else {
            return super::lossy(line);
        };
        let end = if matches!(kind, LineKind::Secondary { .. }) {
            text.len()
        } else {
            end
        };
        match text {
            Cow::Borrowed(t) => super::lossy(&t[start..end]),
            Cow::Owned(t) => Cow::Owned(super::lossy(&t[start..end]).into_owned()),
        }
    }

    /// Reads a head line: `None` when the pattern does not match it or its
    /// time does not parse (then the event is counted as unparsed).
    pub(crate) fn head<'t>(&self, line: &'t [u8], reference: Timestamp) -> Option<Head<'t, '_>> {
        let (regex, text) = self.subject(line);
        let mut locs = regex.capture_locations();
        regex.captures_read(&mut locs, &text)?;
        let (start, end) = locs.get(self.timestamp)?;
        let timestamp = self.time(&super::lossy(&text[start..end]), reference)?;
        Some(Head {
            text,
            locs,
            timestamp,
            parser: self,
        })
    }

    /// The time of head line `line` read without its captures, when the
    /// pattern allows it ([`TimeFirst`]): the time [`head`](Self::head)
    /// gives, or `None` (then ask `head`).
    pub(crate) fn quick_time(&self, line: &[u8], reference: Timestamp) -> Option<Timestamp> {
        let split = self.time_first.as_ref()?;
        if !self.raw && !line.is_ascii() {
            return None;
        }
        let time_end = split.split(line)?.time_end;
        self.time(&super::lossy(&line[..time_end]), reference)
    }

    /// The time and the message of head line `line` read without its
    /// captures, when the pattern allows it ([`TimeFirst`], ending with its
    /// `message` group): what [`head`](Self::head) gives, or `None` (then
    /// ask `head`).
    pub(crate) fn quick_head<'l>(
        &self,
        line: &'l [u8],
        reference: Timestamp,
    ) -> Option<(Timestamp, Cow<'l, str>)> {
        let split = self.time_first.as_ref()?;
        if !self.raw && !line.is_ascii() {
            return None;
        }
        let Split {
            time_end,
            message_start: Some(message_start),
        } = split.split(line)?
        else {
            return None;
        };
        let at = self.time(&super::lossy(&line[..time_end]), reference)?;
        Some((at, super::lossy(&line[message_start..])))
    }

    fn time(&self, text: &str, reference: Timestamp) -> Option<Timestamp> {
        match &self.time {
            HeadTime::Rule(rule) => rule.parse_text(text),
            HeadTime::Preset(syntax, zone) => {
                let zone = *zone;
                match syntax {
                    PresetTime::Iso => {
                        if text.contains(',') {
                            parse_rfc3339(&text.replace(',', "."), zone)
                        } else {
                            parse_rfc3339(text, zone)
                        }
                    }
                    PresetTime::Postgres => parse_postgres(text, zone),
                    PresetTime::Redis => parse_local(text, "%d %b %Y %H:%M:%S%.f", zone),
                    PresetTime::Nginx => parse_local(text, "%Y/%m/%d %H:%M:%S", zone),
                    PresetTime::Mariadb => parse_local(text, "%Y-%m-%d %H:%M:%S", zone)
                        .or_else(|| parse_mariadb(text, zone)),
                    PresetTime::Klog => parse_klog(text, zone, reference),
                }
            }
        }
    }
}

/// A matched head line.
pub(crate) struct Head<'t, 'p> {
    text: Cow<'t, [u8]>,
    locs: CaptureLocations,
    /// Its time.
    pub(crate) timestamp: Timestamp,
    parser: &'p EventParser,
}

impl Head<'_, '_> {
    fn group(&self, index: usize) -> Option<Cow<'_, str>> {
        self.locs
            .get(index)
            .map(|(s, e)| super::lossy(&self.text[s..e]))
    }

    /// The `message` group (empty when it did not take part in the match).
    pub(crate) fn message(&self) -> Cow<'_, str> {
        self.group(self.parser.message).unwrap_or(Cow::Borrowed(""))
    }

    /// The level, named as the preset names it.
    fn level(&self) -> String {
        let written = self
            .parser
            .level
            .and_then(|i| self.group(i))
            .unwrap_or(Cow::Borrowed(""));
        let written = written.as_ref();
        let named = match self.parser.levels {
            Levels::AsWritten => written,
            Levels::Postgres => match written {
                s if s.starts_with("DEBUG") => "debug",
                "LOG" | "INFO" => "info",
                "NOTICE" => "notice",
                "WARNING" => "warning",
                "ERROR" => "error",
                "FATAL" => "fatal",
                "PANIC" => "panic",
                other => other,
            },
            Levels::RedisMark => match written {
                "." | "-" => "debug",
                "*" => "notice",
                "#" => "warning",
                other => other,
            },
            Levels::Mariadb => match written {
                "Note" | "System" | "Info" => "info",
                "Warning" => "warning",
                "ERROR" => "error",
                "Debug" => "debug",
                other => other,
            },
            Levels::Klog => match written {
                "I" => "info",
                "W" => "warning",
                "E" => "error",
                "F" => "fatal",
                other => other,
            },
        };
        named.to_owned()
    }

    /// The event, with `message` (the head's message and its continuation).
    pub(crate) fn into_event(self, message: String, tail: &Tail) -> RawLogEvent {
        let mut fields = Fields::new();
        for (index, name) in &self.parser.fields {
            if let Some(value) = self.group(*index) {
                fields.insert(name, Value::String(value.into_owned()));
            }
        }
        if tail.dropped_lines > 0 {
            fields.insert(
                "continuation_lines_dropped",
                Value::from(tail.dropped_lines),
            );
        }
        if tail.partial {
            fields.insert("partial", Value::Bool(true));
        }
        RawLogEvent {
            timestamp: self.timestamp,
            level: self.level(),
            message,
            fields: fields.into_map(),
        }
    }
}

/// What an event holds beyond its head line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Tail {
    /// The continuation text kept, each line after a `\n` (a CRI piece
    /// without one).
    pub(crate) text: String,
    /// Continuation lines kept.
    pub(crate) lines: usize,
    /// Continuation lines beyond the bounds.
    pub(crate) dropped_lines: u64,
    /// Whether it ends with a CRI partial line no line completed.
    pub(crate) partial: bool,
}

impl Tail {
    /// The event's message: the head's message and the continuation.
    pub(crate) fn message(&self, head: &str) -> String {
        let mut message = String::with_capacity(head.len() + self.text.len());
        message.push_str(head);
        message.push_str(&self.text);
        message
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::file::time::{Layout, parse_zone};

    fn at(text: &str) -> Timestamp {
        Timestamp::parse(text).unwrap()
    }

    fn utc() -> Zone {
        parse_zone("UTC").unwrap()
    }

    /// One real line of each preset (the docs show the same lines) and what
    /// it yields.
    #[test]
    fn presets_read_their_writers_lines() {
        let reference = at("2026-12-01T15:00:00Z");
        // (preset, line, time, level, message, fields)
        type Case = (
            &'static str,
            &'static str,
            &'static str,
            &'static str,
            &'static str,
            &'static [(&'static str, &'static str)],
        );
        let cases: [Case; 7] = [
            (
                "spring_boot",
                "2026-12-01T14:00:00.123+01:00 ERROR 4242 --- [nio-8080-exec-1] c.e.order.PaymentClient                  : Payment call failed",
                "2026-12-01T13:00:00.123Z",
                "ERROR",
                "Payment call failed",
                &[
                    ("pid", "4242"),
                    ("thread", "nio-8080-exec-1"),
                    ("logger", "c.e.order.PaymentClient"),
                ],
            ),
            (
                "postgresql",
                "2026-12-01 14:00:00.123 UTC [4242] ERROR:  duplicate key value violates unique constraint \"orders_pkey\"",
                "2026-12-01T14:00:00.123Z",
                "error",
                "duplicate key value violates unique constraint \"orders_pkey\"",
                &[("pid", "4242")],
            ),
            (
                "redis",
                "4242:M 01 Dec 2026 14:00:00.123 # WARNING Memory overcommit must be enabled!",
                "2026-12-01T14:00:00.123Z",
                "warning",
                "WARNING Memory overcommit must be enabled!",
                &[("pid", "4242"), ("role", "M")],
            ),
            (
                "nginx_error",
                "2026/12/01 14:00:00 [error] 4242#4242: *7 open() \"/srv/www/missing\" failed (2: No such file or directory), client: 127.0.0.1",
                "2026-12-01T14:00:00Z",
                "error",
                "open() \"/srv/www/missing\" failed (2: No such file or directory), client: 127.0.0.1",
                &[("pid", "4242"), ("tid", "4242"), ("connection", "7")],
            ),
            (
                "mariadb_error",
                "2026-12-01  9:05:01 7 [Warning] Access denied for user 'app'@'localhost' (using password: YES)",
                "2026-12-01T09:05:01Z",
                "warning",
                "Access denied for user 'app'@'localhost' (using password: YES)",
                &[("thread", "7")],
            ),
            (
                "klog",
                "E1201 14:00:00.123456    4242 reflector.go:147] Failed to watch *v1.Pod: connection refused",
                "2026-12-01T14:00:00.123Z",
                "error",
                "Failed to watch *v1.Pod: connection refused",
                &[("thread", "4242"), ("source", "reflector.go:147")],
            ),
            (
                "cri",
                "2026-12-01T14:00:00.123456789Z stderr F panic: runtime error",
                "2026-12-01T14:00:00.123Z",
                "",
                "panic: runtime error",
                &[("stream", "stderr")],
            ),
        ];
        for (name, line, time, level, message, fields) in cases {
            let parser = EventParser::preset(preset(name).unwrap(), utc());
            assert!(
                matches!(parser.kind(line.as_bytes()), LineKind::Head { .. }),
                "{name}"
            );
            let head = parser.head(line.as_bytes(), reference).expect(name);
            assert_eq!(head.timestamp, at(time), "{name}");
            // Every preset that starts with its time is read without
            // captures too (klog starts with its level, redis with its pid).
            let quick = parser.quick_head(line.as_bytes(), reference);
            if matches!(name, "klog" | "redis") {
                assert_eq!(quick, None);
            } else {
                assert_eq!(quick, Some((at(time), Cow::Borrowed(message))), "{name}");
            }
            let message_text = head.message().into_owned();
            let event = head.into_event(message_text, &Tail::default());
            assert_eq!(event.level, level, "{name}");
            assert_eq!(event.message, message, "{name}");
            for (key, value) in fields {
                assert_eq!(event.fields[*key], *value, "{name} {key}");
            }
            assert!(!event.fields.contains_key("tag"), "{name}");
            // Continuation lines are not heads.
            for other in [
                "\tat com.example.Order.pay(Order.java:42)",
                "Caused by: x",
                "  FROM t",
            ] {
                assert_eq!(parser.kind(other.as_bytes()), LineKind::Other, "{name}");
            }
        }
    }

    #[test]
    fn preset_time_variants() {
        let spring = EventParser::preset(preset("spring_boot").unwrap(), utc());
        let reference = at("2026-12-01T15:00:00Z");
        for (line, time) in [
            // Spring Boot 2: no offset, the zone applies; logback's comma.
            (
                "2026-12-01 14:00:00.123  INFO 1 --- [           main] o.s.b.StartupInfoLogger : Started",
                "2026-12-01T14:00:00.123Z",
            ),
            (
                "2026-12-01 14:00:00,250 ERROR 1 --- [main] x.Y : boom",
                "2026-12-01T14:00:00.250Z",
            ),
            // Spring Boot 3.4: the application name before the thread.
            (
                "2026-12-01T14:00:00.123Z  WARN 7 --- [orders] [           main] o.s.Foo : slow",
                "2026-12-01T14:00:00.123Z",
            ),
        ] {
            let head = spring.head(line.as_bytes(), reference).expect(line);
            assert_eq!(head.timestamp, at(time), "{line}");
        }
        let head = spring
            .head(
                "2026-12-01T14:00:00.123Z  WARN 7 --- [orders] [           main] o.s.Foo : slow"
                    .as_bytes(),
                reference,
            )
            .unwrap();
        let event = head.into_event(String::new(), &Tail::default());
        assert_eq!(event.fields["application"], "orders");
        assert_eq!(event.fields["thread"], "main");
        let pg = EventParser::preset(preset("postgresql").unwrap(), parse_zone("+01:00").unwrap());
        for (line, time) in [
            (
                "2026-12-01 14:00:00.123 CET [9] LOG:  x",
                "2026-12-01T13:00:00.123Z",
            ),
            (
                "2026-12-01 14:00:00 +03 [9] LOG:  x",
                "2026-12-01T11:00:00Z",
            ),
            (
                "2026-12-01 14:00:00.5 GMT [9] app@shop FATAL:  password authentication failed for user \"app\"",
                "2026-12-01T14:00:00.500Z",
            ),
        ] {
            let head = pg.head(line.as_bytes(), reference).expect(line);
            assert_eq!(head.timestamp, at(time), "{line}");
        }
        let mariadb = EventParser::preset(preset("mariadb_error").unwrap(), utc());
        let head = mariadb
            .head(
                "261201 14:00:00 [ERROR] mysqld: Table 'x' is marked as crashed".as_bytes(),
                reference,
            )
            .unwrap();
        assert_eq!(head.timestamp, at("2026-12-01T14:00:00Z"));
        // klog's year: the one that puts the time at most a day after the reference.
        let klog = EventParser::preset(preset("klog").unwrap(), utc());
        let new_year = at("2026-01-01T00:30:00Z");
        let head = klog
            .head(
                "W1231 23:59:00.000001       1 x.go:1] late".as_bytes(),
                new_year,
            )
            .unwrap();
        assert_eq!(head.timestamp, at("2025-12-31T23:59:00Z"));
    }

    #[test]
    fn custom_patterns_are_checked() {
        let rule = TimeRule::default();
        assert!(EventParser::custom(r"^(?P<timestamp>\S+) (?P<message>.*)$", rule.clone()).is_ok());
        for (pattern, needle) in [
            (r"^(?P<timestamp>\S+ (?P<message>.*)$", "valid"),
            (r"^(?P<time>\S+) (?P<message>.*)$", "timestamp"),
            (r"^(?P<timestamp>\S+) (?P<msg>.*)$", "message"),
            (r"^(?P<timestamp>\S*)\s*(?P<message>.*)$", "empty line"),
            (r"(?P<timestamp>)(?P<message>)", "empty line"),
        ] {
            let error = EventParser::custom(pattern, rule.clone()).unwrap_err();
            assert!(error.contains(needle), "{pattern}: {error}");
        }
        let custom = EventParser::custom(
            r"^(?P<timestamp>\d{2}\.\d{2}\.\d{4} \d{2}:\d{2}:\d{2}) <(?P<level>\w+)> \[(?P<component>\w+)\] (?P<message>.*)$",
            TimeRule {
                layout: Layout::Strftime("%d.%m.%Y %H:%M:%S".into()),
                zone: utc(),
            },
        )
        .unwrap();
        let head = custom
            .head(
                "01.12.2026 14:00:00 <Fehler> [db] Verbindung verloren".as_bytes(),
                at("2026-12-01T15:00:00Z"),
            )
            .unwrap();
        assert_eq!(head.timestamp, at("2026-12-01T14:00:00Z"));
        let event = head.into_event("Verbindung verloren".into(), &Tail::default());
        assert_eq!(event.level, "Fehler");
        assert_eq!(event.fields["component"], "db");
        // A matching line whose time does not parse is no head.
        assert!(
            custom
                .head(
                    "99.99.2026 14:00:00 <x> [y] z".as_bytes(),
                    at("2026-12-01T15:00:00Z")
                )
                .is_none()
        );
    }

    /// A head's time read without captures is the time its captures give,
    /// or nothing: where the preferred match of the `timestamp` group does
    /// not let the rest match, the whole pattern takes another one.
    #[test]
    fn quick_time_is_the_captured_time_or_nothing() {
        let epoch = || TimeRule {
            layout: Layout::EpochSeconds,
            zone: utc(),
        };
        let reference = at("2026-12-01T15:00:00Z");
        // (pattern, line, whether the split can read it)
        let cases = [
            (
                r"^(?P<timestamp>\d+) (?P<message>.*)$",
                "1796137200 ok",
                true,
            ),
            // `\d+` prefers "12"; the rest fails after it, so the pattern
            // takes the second alternative: "12 34".
            (
                r"^(?P<timestamp>\d+|\d+ \d+) (?P<message>x.*)$",
                "1796137200 34 xy",
                false,
            ),
            (
                r"^(?P<timestamp>\d+|\d+ \d+) (?P<message>x.*)$",
                "1796137200 xy",
                true,
            ),
            // A lazy group: its preferred match is the shortest that lets
            // the rest match, which the split cannot see.
            (
                r"^(?P<timestamp>\d+?)(?P<message>\d{2} .*)$",
                "179613720000 z",
                false,
            ),
            // Not at the start: no split.
            (
                r"^x (?P<timestamp>\d+) (?P<message>.*)$",
                "x 1796137200 ok",
                false,
            ),
            (
                r"(?P<timestamp>\d+) (?P<message>.*)$",
                "1796137200 ok",
                false,
            ),
            // A word boundary right after the group sees the byte before it.
            (
                r"^(?P<timestamp>\d+)\b(?P<message>.*)$",
                "1796137200 ok",
                true,
            ),
            // Non-ASCII line of a custom pattern: matched as text, no split.
            (
                r"^(?P<timestamp>\d+) (?P<message>.*)$",
                "1796137200 é",
                false,
            ),
        ];
        for (pattern, line, split) in cases {
            let parser = EventParser::custom(pattern, epoch()).unwrap();
            let captured = parser.head(line.as_bytes(), reference).map(|h| h.timestamp);
            let quick = parser.quick_time(line.as_bytes(), reference);
            if split {
                assert!(quick.is_some(), "{pattern} on {line}");
            }
            if quick.is_some() {
                assert_eq!(quick, captured, "{pattern} on {line}");
            }
            assert_quick_head_agrees(&parser, line);
        }
        // The presets all start with their time.
        let spring = preset("spring_boot").unwrap();
        let parser = EventParser::preset(spring, utc());
        let line = b"2026-12-01T14:00:00.123+00:00 ERROR 4242 --- [main] c.e.Order : failed";
        assert_eq!(
            parser.quick_time(line, reference),
            Some(at("2026-12-01T14:00:00.123Z"))
        );
    }

    /// [`EventParser::quick_head`] gives what the captures give, or nothing.
    fn assert_quick_head_agrees(parser: &EventParser, line: &str) -> bool {
        let reference = at("2026-12-01T15:00:00Z");
        let Some((time, message)) = parser.quick_head(line.as_bytes(), reference) else {
            return false;
        };
        let head = parser.head(line.as_bytes(), reference);
        let captured = head
            .as_ref()
            .map(|h| (h.timestamp, h.message().into_owned()));
        assert_eq!(
            Some((time, message.into_owned())),
            captured,
            "{} on {line:?}",
            parser.regex.as_str()
        );
        true
    }

    /// The message is read without captures only when the pattern ends with
    /// `(?P<message>.*)$`, and then it is the captured one.
    #[test]
    fn quick_head_reads_a_last_message_group() {
        let epoch = || TimeRule {
            layout: Layout::EpochSeconds,
            zone: utc(),
        };
        // (pattern, line, whether it is read without captures)
        let cases = [
            (
                r"^(?P<timestamp>\d+) (?P<message>.*)$",
                "1796137200 ok",
                true,
            ),
            (
                r"^(?P<timestamp>\d+) (?P<message>.*)\z",
                "1796137200 ok",
                true,
            ),
            (r"^(?P<timestamp>\d+) (?P<message>.*)$", "1796137200 ", true),
            // An optional space: taken when it is there, as the captures do.
            (
                r"^(?P<timestamp>\d+) : ?(?P<message>.*)$",
                "1796137200 :  two",
                true,
            ),
            (
                r"^(?P<timestamp>\d+)(?: \w+)*? (?P<message>.*)$",
                "1796137200 a b c",
                true,
            ),
            (
                r"^(?P<timestamp>\d+)(?: \w+)* (?P<message>.*)$",
                "1796137200 a b c",
                true,
            ),
            // Not a last `.*` group before the end: no message split.
            (
                r"^(?P<timestamp>\d+) (?P<message>.*)",
                "1796137200 ok",
                false,
            ),
            (
                r"^(?P<timestamp>\d+) (?P<message>.+)$",
                "1796137200 ok",
                false,
            ),
            (
                r"^(?P<timestamp>\d+) (?P<message>x.*)$",
                "1796137200 xy",
                false,
            ),
            (
                r"^(?P<timestamp>\d+) (?P<message>.*) !$",
                "1796137200 a !",
                false,
            ),
            (
                r"^(?P<timestamp>\d+) (?P<message>.*)(?P<level>)$",
                "1796137200 ok",
                false,
            ),
            // The rest does not match: nothing.
            (
                r"^(?P<timestamp>\d+) x(?P<message>.*)$",
                "1796137200 ok",
                false,
            ),
            // A non-ASCII line of a custom pattern is matched as text.
            (
                r"^(?P<timestamp>\d+) (?P<message>.*)$",
                "1796137200 é",
                false,
            ),
        ];
        for (pattern, line, read) in cases {
            let parser = EventParser::custom(pattern, epoch()).unwrap();
            assert_eq!(
                assert_quick_head_agrees(&parser, line),
                read,
                "{pattern} on {line}"
            );
        }
    }

    proptest::proptest! {
        /// Whatever the line, the time and message read without captures
        /// are the captured ones, or there are none.
        #[test]
        fn quick_head_never_differs(
            line in "[0-9 x:]{0,14}",
            pattern in proptest::sample::select(vec![
                r"^(?P<timestamp>\d+|\d+ \d+) (?P<message>.*)$",
                r"^(?P<timestamp>\d{1,3}(?: \d)?)(?: \d)? ?(?P<message>.*)$",
                r"^(?P<timestamp>\d*?)\d+ (?P<message>.*)$",
                r"^(?P<timestamp>(?:\d )*\d)(?: \d)+?(?: x)?(?P<message>.*)$",
                r"^(?P<timestamp>\d+)(?::\d*)??(?: |:)*(?P<message>.*)$",
                r"^(?P<timestamp>\d+)\b\s*(?:x+|x )?(?P<message>.*)$",
            ]),
        ) {
            let parser = EventParser::custom(pattern, TimeRule {
                layout: Layout::EpochSeconds,
                zone: utc(),
            }).unwrap();
            assert_quick_head_agrees(&parser, &line);
        }

        /// Whatever the line, the quick time is the captured time or none.
        #[test]
        fn quick_time_never_differs(
            line in "[0-9 x]{0,12}",
            pattern in proptest::sample::select(vec![
                r"^(?P<timestamp>\d+|\d+ \d+) (?P<message>x.*)$",
                r"^(?P<timestamp>\d{1,3}(?: \d)?)(?: \d)? ?(?P<message>.*x)$",
                r"^(?P<timestamp>\d*?)(?P<message>\d+ .*)$",
                r"^(?P<timestamp>(?:\d )*\d)(?P<message>(?: \d)+ x.*)$",
            ]),
        ) {
            let parser = EventParser::custom(pattern, TimeRule {
                layout: Layout::EpochSeconds,
                zone: utc(),
            }).unwrap();
            let reference = at("2026-12-01T15:00:00Z");
            if let Some(quick) = parser.quick_time(line.as_bytes(), reference) {
                let captured = parser.head(line.as_bytes(), reference).map(|h| h.timestamp);
                proptest::prop_assert_eq!(Some(quick), captured, "{} on {:?}", pattern, line);
            }
        }
    }

    /// The first-byte sets: what they hold, and when there is none.
    #[test]
    fn first_bytes_of_anchored_patterns() {
        let set = |pattern: &str| FirstBytes::of(pattern, true);
        let spring = EventParser::preset(preset("spring_boot").unwrap(), utc());
        let first = spring.first.unwrap();
        assert!((b'0'..=b'9').all(|b| first.contains(b)));
        assert!(!first.contains(b'\t') && !first.contains(b'C') && !first.contains(b'.'));
        for preset in &PRESETS {
            let parser = EventParser::preset(preset, utc());
            assert!(parser.first.is_some(), "{} starts anchored", preset.name);
        }
        // Optional parts in front add their bytes; look-arounds pass.
        let optional = set(r"^(?:x )?\b\d+ (?P<message>.*)").unwrap();
        assert!(optional.contains(b'x') && optional.contains(b'7') && !optional.contains(b' '));
        // A non-ASCII first character: its UTF-8 lead bytes.
        let accented = set("^é(?P<message>.*)").unwrap();
        assert!(accented.contains(0xC3) && !accented.contains(b'e'));
        // Unanchored, anchored per line, or possibly empty: none.
        assert!(set(r"(?P<timestamp>\d+) (?P<message>.*)").is_none());
        assert!(set(r"(?m)^(?P<timestamp>\d+) (?P<message>.*)").is_none());
        assert!(set(r"^(?P<message>.*)").is_none());
        assert!(set(r"^x|y").is_none());
    }

    proptest::proptest! {
        /// A line whose first byte is not in the set is one the pattern
        /// does not match: the set never turns a head into a continuation.
        #[test]
        fn first_bytes_never_refuse_a_head(
            line in "[0-9a-z \t:\\-é\\[\\]]{1,12}",
            pattern in proptest::sample::select(vec![
                r"^(?P<timestamp>\d+) (?P<message>.*)$",
                r"^\s*(?:\[(?P<thread>[^\]]*)\] )?(?P<timestamp>\d+)(?P<message>.*)$",
                r"\A(?:é|[a-c]:)?(?P<timestamp>\S+)\b(?P<message>.*)",
                r"^(?i:t)?-?(?P<timestamp>\w+) (?P<message>.*)",
                r"^[a-f][0-9]* (?P<timestamp>\d*)(?P<message>.*)",
            ]),
        ) {
            let parser = EventParser::custom(pattern, TimeRule::default()).unwrap();
            let first = parser.first.unwrap();
            let (regex, text) = parser.subject(line.as_bytes());
            if regex.is_match(&text) {
                proptest::prop_assert!(first.contains(text[0]), "{} on {:?}", pattern, line);
            }
        }
    }

    /// Whether a line is a head, told from the pattern before its last
    /// `(?P<message>.*)$`, is what the whole pattern says; a pattern whose
    /// `.` misses more than `\n` (the `R` flag) is not split.
    #[test]
    fn heads_are_told_before_the_message() {
        let split = |pattern: &str| {
            EventParser::custom(pattern, TimeRule::default())
                .unwrap()
                .before_message
                .is_some()
        };
        assert!(split(r"^(?P<timestamp>\S+) (?P<message>.*)$"));
        assert!(split(r"(?P<timestamp>\S+) (?P<message>.*)\z"));
        assert!(split(r"(?s)^(?P<timestamp>\S+) (?P<message>.*)$"));
        assert!(split(r"(?m)^(?P<timestamp>\S+) (?P<message>.*)$"));
        assert!(!split(r"(?R)^(?P<timestamp>\S+) (?P<message>.*)$"));
        assert!(!split(r"^(?P<timestamp>\S+) (?P<message>.*)"));
        assert!(!split(r"^(?P<timestamp>\S+) (?P<message>.+)$"));
        assert!(!split(r"^(?P<timestamp>\S+) (?P<message>[^x]*)$"));
        assert!(!split(r"^(?P<timestamp>\S+) (?P<message>.*) x$"));
        for preset in &PRESETS {
            let parser = EventParser::preset(preset, utc());
            assert!(parser.before_message.is_some(), "{}", preset.name);
        }
        // A line with `\r` inside, which `.` with `R` does not match.
        let crlf = EventParser::custom(
            r"(?R)^(?P<timestamp>\S+) (?P<message>.*)$",
            TimeRule::default(),
        )
        .unwrap();
        assert_eq!(crlf.kind(b"1 a\rb"), LineKind::Other);
    }

    proptest::proptest! {
        /// Whatever the line, the kind told before the message is the one
        /// the whole pattern gives.
        #[test]
        fn heads_told_before_the_message_are_the_patterns(
            line in "[0-9a-z \t:\r\\-é\\[\\]]{0,14}",
            pattern in proptest::sample::select(vec![
                r"^(?P<timestamp>\d+) (?P<message>.*)$",
                r"^\s*(?:\[(?P<thread>[^\]]*)\] )?(?P<timestamp>\d+)(?P<message>.*)$",
                r"(?:e|[a-c]:)?(?P<timestamp>\S+)\b(?P<message>.*)$",
                r"^(?i:t)?-?(?P<timestamp>\w+) : ?(?P<message>.*)\z",
                r"^[a-f][0-9]* (?P<timestamp>\d*)\b(?P<message>.*)$",
            ]),
        ) {
            let parser = EventParser::custom(pattern, TimeRule::default()).unwrap();
            proptest::prop_assert!(parser.before_message.is_some());
            let (regex, text) = parser.subject(line.as_bytes());
            let whole = !line.is_empty() && regex.is_match(&text);
            let told = matches!(parser.kind(line.as_bytes()), LineKind::Head { .. });
            proptest::prop_assert_eq!(told, whole, "{} on {:?}", pattern, line);
        }
    }

    /// ASCII lines are matched with the pattern compiled without Unicode
    /// classes, other lines with the pattern as written: the same answers.
    #[test]
    fn custom_patterns_keep_their_unicode_meaning() {
        let parser = EventParser::custom(
            r"^(?P<timestamp>\S+) (?P<who>\w+): (?P<message>.*)$",
            TimeRule::default(),
        )
        .unwrap();
        assert!(parser.ascii.is_some());
        let reference = at("2026-12-01T15:00:00Z");
        for (line, who) in [
            ("2026-12-01T14:00:00Z app: ok", "app"),
            ("2026-12-01T14:00:00Z zoë: ça marche", "zoë"),
            ("2026-12-01T14:00:00Z 服务: 超时", "服务"),
        ] {
            let head = parser.head(line.as_bytes(), reference).expect(line);
            let event = head.into_event(String::new(), &Tail::default());
            assert_eq!(event.fields["who"], who, "{line}");
        }
        assert_eq!(
            parser.kind(b"2026-12-01T14:00:00Z \xff\xfe: x"),
            LineKind::Other
        );
        let greek = EventParser::custom(
            r"^(?P<timestamp>\S+) \p{Greek}+ (?P<message>.*)$",
            TimeRule::default(),
        )
        .unwrap();
        assert!(greek.ascii.is_none(), "needs Unicode");
    }

    #[test]
    fn join_rules() {
        let pg = EventParser::preset(preset("postgresql").unwrap(), utc());
        assert_eq!(
            pg.kind(b"2026-12-01 14:00:00.123 UTC [42] DETAIL:  Key (id)=(1) already exists."),
            LineKind::Secondary { key: 42 }
        );
        assert_eq!(
            pg.joined_text(
                b"2026-12-01 14:00:00.123 UTC [42] STATEMENT:  INSERT INTO t VALUES (1)",
                LineKind::Secondary { key: 42 }
            ),
            "STATEMENT:  INSERT INTO t VALUES (1)"
        );
        let cri = EventParser::preset(preset("cri").unwrap(), utc());
        let p = cri.kind(b"2026-12-01T14:00:00.1Z stdout P first half, ");
        assert_eq!(
            p,
            LineKind::Head {
                key: 0,
                partial: true
            }
        );
        let f = cri.kind(b"2026-12-01T14:00:00.2Z stdout F second half");
        assert!(!cri.is_definite_start(f, Some(p)));
        assert!(cri.is_definite_start(f, Some(f)));
        assert!(!cri.is_definite_start(f, None));
        let other_stream = cri.kind(b"2026-12-01T14:00:00.2Z stderr F other");
        assert!(cri.is_definite_start(other_stream, Some(p)));
        assert_eq!(
            cri.joined_text(b"2026-12-01T14:00:00.2Z stdout F second half", f),
            "second half"
        );
        assert_eq!(cri.kind(b""), LineKind::Blank);
    }
}
