//! Lines into multi-line events, in file order: the one definition of which
//! line belongs to which event (the scan feeds it the lines around the
//! prefilter's hits, [`parse_text`](super::parse_text) every line).
//!
//! - A head line (the pattern matches it) starts an event, unless it
//!   completes a CRI partial line of the same stream (then its message is
//!   appended without a separator).
//! - A PostgreSQL secondary line joins the open event of the same pid, and
//!   otherwise starts an event of its own.
//! - Any other line is appended to the open event after a `\n`; with no
//!   event open it is an orphan (counted, never guessed into an event).
//! - Empty lines are skipped.
//! - An event keeps at most [`MAX_CONTINUATION_LINES`] continuation lines
//!   and [`MAX_CONTINUATION_BYTES`] of their text; the lines beyond are
//!   counted, and searched for the query's words (when a matcher is given)
//!   so that a word only there still makes the event match.
//!
//! Memory is bounded by the longest line plus the kept text.

use super::matcher::Matcher;
use super::pattern::{EventParser, LineKind, MAX_CONTINUATION_BYTES, MAX_CONTINUATION_LINES, Tail};

/// An event being read.
#[derive(Debug, Clone)]
pub(crate) struct Open {
    /// Offset of its head line in the file.
    pub(crate) start: u64,
    /// The head line (without its line ending).
    pub(crate) head: Vec<u8>,
    key: u64,
    /// The continuation.
    pub(crate) tail: Tail,
    /// Set once a line was dropped: later lines are dropped too, so the kept
    /// text is a prefix of the event.
    full: bool,
    /// Which of the query's words occur in the dropped lines.
    pub(crate) found: Vec<bool>,
    /// Whether a line of it may hold a match (the prefilter hit it, or there
    /// is no prefilter).
    pub(crate) hit: bool,
}

/// What one line did.
#[derive(Debug)]
pub(crate) enum Pushed {
    /// Skipped (empty).
    Blank,
    /// Appended to the open event.
    Continued,
    /// A continuation line with no event open.
    Orphan,
    /// Started an event; the one it ended, if any.
    Started(Option<Open>),
}

/// Lines into events, one at a time.
#[derive(Debug, Default)]
pub(crate) struct Assembler {
    open: Option<Open>,
}

impl Assembler {
    pub(crate) const fn new() -> Self {
        Self { open: None }
    }

    /// Whether a line of `kind` would start an event.
    pub(crate) fn starts(&self, kind: LineKind) -> bool {
        match (kind, &self.open) {
            (LineKind::Head { key, .. }, Some(open)) => !(open.tail.partial && open.key == key),
            (LineKind::Head { .. } | LineKind::Secondary { .. }, None) => true,
            (LineKind::Secondary { key }, Some(open)) => open.tail.partial || open.key != key,
            (LineKind::Blank | LineKind::Other, _) => false,
        }
    }

    /// Feeds `line` (of `kind`, at `offset`); `hit` says whether the
    /// prefilter hit it. Dropped lines are searched with `matcher`.
    pub(crate) fn push(
        &mut self,
        parser: &EventParser,
        line: &[u8],
        kind: LineKind,
        offset: u64,
        hit: bool,
        matcher: Option<&Matcher>,
    ) -> Pushed {
        if self.starts(kind) {
            let (key, partial) = match kind {
                LineKind::Head { key, partial } => (key, partial),
                LineKind::Secondary { key } => (key, false),
                LineKind::Blank | LineKind::Other => (0, false),
            };
            let started = Open {
                start: offset,
                head: line.to_vec(),
                key,
                tail: Tail {
                    partial,
                    ..Tail::default()
                },
                full: false,
                found: Vec::new(),
                hit,
            };
            return Pushed::Started(self.open.replace(started));
        }
        let Some(open) = &mut self.open else {
            return match kind {
                LineKind::Blank => Pushed::Blank,
                _ => Pushed::Orphan,
            };
        };
        match kind {
            LineKind::Blank => {
                open.tail.partial = false;
                return Pushed::Blank;
            }
            LineKind::Head { partial, .. } => {
                // Completes (or continues) a CRI partial line.
                open.append(&parser.joined_text(line, kind), false, matcher);
                open.tail.partial = partial;
            }
            LineKind::Secondary { .. } => {
                open.append(&parser.joined_text(line, kind), true, matcher);
            }
            LineKind::Other => {
                open.append(&super::lossy(line), true, matcher);
                open.tail.partial = false;
            }
        }
        open.hit |= hit;
        Pushed::Continued
    }

    /// Ends the open event (at the end of the input, or a gap in it).
    pub(crate) fn finish(&mut self) -> Option<Open> {
        self.open.take()
    }
}

impl Open {
    fn append(&mut self, text: &str, newline: bool, matcher: Option<&Matcher>) {
        let tail = &mut self.tail;
        let cost = text.len() + usize::from(newline);
        if !self.full
            && tail.lines < MAX_CONTINUATION_LINES
            && tail.text.len() + cost <= MAX_CONTINUATION_BYTES
        {
            if newline {
                tail.text.push('\n');
            }
            tail.text.push_str(text);
            tail.lines += 1;
            return;
        }
        self.full = true;
        tail.dropped_lines += 1;
        if let Some(matcher) = matcher {
            matcher.mark_found(text, &mut self.found);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::file::formats::Escapes;
    use crate::file::pattern::preset;
    use crate::file::time::Zone;

    fn events(parser: &EventParser, text: &str, matcher: Option<&Matcher>) -> (Vec<Open>, u64) {
        let mut assembler = Assembler::new();
        let mut done = Vec::new();
        let mut orphans = 0;
        for (i, line) in text.split('\n').enumerate() {
            let kind = parser.kind(line.as_bytes());
            match assembler.push(parser, line.as_bytes(), kind, i as u64, true, matcher) {
                Pushed::Started(Some(open)) => done.push(open),
                Pushed::Orphan => orphans += 1,
                _ => {}
            }
        }
        done.extend(assembler.finish());
        (done, orphans)
    }

    #[test]
    fn stack_traces_join_their_event_and_orphans_are_counted() {
        let spring = EventParser::preset(preset("spring_boot").unwrap(), Zone::default());
        let text = "\tat orphan.Before(First.java:1)\n\
2026-12-01T14:00:00.000Z ERROR 1 --- [main] c.e.Pay : Payment failed\n\
\n\
java.lang.IllegalStateException: boom\n\
\tat c.e.Pay.call(Pay.java:10)\n\
Caused by: java.sql.SQLTransientConnectionException: HikariPool-1 - Connection is not available\n\
\t... 3 more\n\
2026-12-01T14:00:01.000Z  INFO 1 --- [main] c.e.Pay : next";
        let (done, orphans) = events(&spring, text, None);
        assert_eq!(orphans, 1);
        assert_eq!(done.len(), 2);
        assert_eq!(done[0].tail.lines, 4);
        assert!(
            done[0]
                .tail
                .text
                .starts_with("\njava.lang.IllegalStateException: boom\n\tat")
        );
        assert!(done[0].tail.text.ends_with("\n\t... 3 more"));
        assert_eq!(done[1].tail.lines, 0);
    }

    #[test]
    fn postgres_reports_are_one_event_per_pid() {
        let pg = EventParser::preset(preset("postgresql").unwrap(), Zone::default());
        let text = "2026-12-01 14:00:00.000 UTC [7] ERROR:  duplicate key value\n\
2026-12-01 14:00:00.000 UTC [7] DETAIL:  Key (id)=(1) already exists.\n\
2026-12-01 14:00:00.000 UTC [8] STATEMENT:  other pid\n\
2026-12-01 14:00:00.000 UTC [7] STATEMENT:  INSERT INTO t\n\
\tVALUES (1)\n\
2026-12-01 14:00:01.000 UTC [7] LOG:  next";
        let (done, _) = events(&pg, text, None);
        let texts: Vec<&str> = done.iter().map(|o| o.tail.text.as_str()).collect();
        // The STATEMENT of pid 7 after pid 8's line: its own event, with its
        // continuation line.
        assert_eq!(
            texts,
            [
                "\nDETAIL:  Key (id)=(1) already exists.",
                "",
                "\n\tVALUES (1)",
                ""
            ]
        );
        assert!(String::from_utf8_lossy(&done[2].head).contains("INSERT INTO t"));
    }

    #[test]
    fn cri_partial_lines_join_the_next_line_of_their_stream() {
        let cri = EventParser::preset(preset("cri").unwrap(), Zone::default());
        let text = "2026-12-01T14:00:00.1Z stdout P a very long li\n\
2026-12-01T14:00:00.1Z stderr F interleaved\n\
2026-12-01T14:00:00.2Z stdout P ne split in \n\
2026-12-01T14:00:00.3Z stdout F three pieces\n\
2026-12-01T14:00:00.4Z stdout P never completed";
        let (done, _) = events(&cri, text, None);
        assert_eq!(done.len(), 4);
        // The partial line before a line of the other stream stays partial.
        assert!(done[0].tail.partial);
        assert_eq!(done[1].tail.text, "");
        assert_eq!(done[2].tail.text, "three pieces");
        assert!(!done[2].tail.partial);
        assert!(done[3].tail.partial);
    }

    #[test]
    fn bounds_drop_lines_but_keep_searching_them() {
        let spring = EventParser::preset(preset("spring_boot").unwrap(), Zone::default());
        let mut text =
            String::from("2026-12-01T14:00:00.000Z ERROR 1 --- [main] c.e.Pay : failed\n");
        for i in 0..1000 {
            text.push_str(&format!("\tat frame{i}\n"));
        }
        text.push_str("Caused by: HikariPool-1 - Connection is not available");
        let matcher = Matcher::new("hikaripool-1 failed", Some(Escapes::None));
        let (done, _) = events(&spring, &text, Some(&matcher));
        let event = &done[0];
        assert_eq!(event.tail.lines, MAX_CONTINUATION_LINES);
        assert_eq!(
            event.tail.dropped_lines,
            1001 - MAX_CONTINUATION_LINES as u64
        );
        assert!(matcher.matches_with(&event.tail.message("failed"), &event.found));
        assert!(!matcher.matches_with(&event.tail.message("other"), &event.found));
        // Bytes bound too: one huge line is dropped whole, and so is what follows.
        let huge = format!(
            "2026-12-01T14:00:00.000Z ERROR 1 --- [main] c.e.Pay : failed\n{}\nsmall",
            "x".repeat(MAX_CONTINUATION_BYTES)
        );
        let (done, _) = events(&spring, &huge, None);
        assert_eq!((done[0].tail.lines, done[0].tail.dropped_lines), (0, 2));
    }
}
