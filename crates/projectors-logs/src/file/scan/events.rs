//! Reading multi-line events (`pattern` and the presets) from runs of whole
//! lines, guided by the prefilter.
//!
//! An event with no prefilter hit in any of its lines cannot match, so most
//! events are never assembled. For each run of lines (one read):
//!
//! 1. The event open at the end of the previous run is continued, line by
//!    line, until a line starts an event. Its lines are checked with the
//!    prefilter one by one.
//! 2. The last line of the run that certainly starts an event (whatever came
//!    before it) is found by walking back from the end.
//! 3. Between the two, each hit is traced to its event: walk back from the
//!    hit's line to a line that certainly starts an event, then feed the
//!    lines from there to the [`Assembler`] until the event holding the hit
//!    ends. Events without a hit are skipped unread.
//! 4. The lines from the last start on become the open event, carried into
//!    the next run.
//!
//! Every event the prefilter hits is therefore assembled exactly as
//! [`Assembler`] over all lines would assemble it, and matched over all of
//! its lines: the prefilter never misses a match that is only in a
//! continuation line. Without a prefilter every line is fed in order.

use std::io::Read;
use std::sync::Arc;

use memchr::{memchr, memrchr};
use regex::bytes::Regex;

use super::{
    Collector, Item, ScanError, ScanStats, Search, Window, read_chunks, strip_cr, with_file,
};
use crate::RawLogEvent;
use crate::file::assemble::{Assembler, Open, Pushed};
use crate::file::pattern::{EventParser, LineKind, MAX_CONTINUATION_BYTES, MAX_CONTINUATION_LINES};
use aci_contracts::Timestamp;

impl Search<'_> {
    /// Reads the events of `window` from `source`; false when an event's head
    /// showed the file is not in time order.
    pub(super) fn events(
        &self,
        source: &mut impl Read,
        parser: &EventParser,
        window: Window,
        collected: &mut Collector,
        stats: &mut ScanStats,
        file: &Arc<str>,
    ) -> Result<bool, ScanError> {
        let mut run = Run {
            search: self,
            parser,
            window,
            collected,
            file,
            open: Assembler::new(),
            ordered: true,
            walked: Vec::new(),
        };
        let prefilter = self.matcher.prefilter();
        read_chunks(
            source,
            window,
            self.cancel,
            stats,
            |chunk, base, stats, gap| {
                if gap {
                    // The line skipped may have been a head: what follows it up
                    // to the next event belongs to no event.
                    run.end_open(stats);
                }
                match prefilter.and_then(|p| p.for_chunk(chunk)) {
                    Some(hits) => run.chunk(chunk, base, hits, stats),
                    None => {
                        for (line, at) in Lines::new(chunk, 0) {
                            run.feed(line, base + at as u64, true, stats);
                        }
                    }
                }
            },
        )?;
        run.end_open(stats);
        Ok(run.ordered)
    }
}

/// The state of one read of events.
struct Run<'a, 's> {
    search: &'a Search<'s>,
    parser: &'a EventParser,
    window: Window,
    collected: &'a mut Collector,
    file: &'a Arc<str>,
    /// The event open across runs of lines.
    open: Assembler,
    ordered: bool,
    /// Kinds of the lines walked back over from a hit (offset, kind),
    /// reused when they are fed.
    walked: Vec<(usize, LineKind)>,
}

impl Run<'_, '_> {
    /// One run of whole lines at file offset `base`, with the prefilter `hits`.
    fn chunk(&mut self, chunk: &[u8], base: u64, hits: &Regex, stats: &mut ScanStats) {
        // 1. Continue the open event up to the first line that starts one.
        let mut first = chunk.len();
        for (line, at) in Lines::new(chunk, 0) {
            let kind = self.parser.kind(line);
            if self.open.starts(kind) {
                first = at;
                break;
            }
            self.push_open(line, kind, base + at as u64, hits.is_match(line), stats);
        }
        if first == chunk.len() {
            return;
        }
        self.end_open(stats);
        // 2. The last certain start at or after `first`.
        let last = self.last_certain_start(chunk, first);
        // 3. The events between, traced from the hits.
        let mut pos = first;
        while pos < last {
            let Some(hit) = hits.find(&chunk[pos..last]) else {
                break;
            };
            let hit_at = pos + hit.start();
            let line = memrchr(b'\n', &chunk[pos..hit_at]).map_or(pos, |i| pos + i + 1);
            let mut start = line;
            self.walked.clear();
            while start > pos && !self.certainly_starts(chunk, start) {
                start = line_before(chunk, start);
            }
            if let Some(next) = self.small_event(chunk, base, start, line, last) {
                pos = next;
                continue;
            }
            pos = self.event_holding(chunk, base, start, line, last, stats);
        }
        // 4. The rest is the new open event.
        for (line, at) in Lines::new(chunk, last) {
            let kind = self.parser.kind(line);
            self.push_open(line, kind, base + at as u64, hits.is_match(line), stats);
        }
    }

    /// The event starting at `start` and holding the hit's line `hit_line`
    /// (after its head), kept as its bytes when that is certain to give what
    /// [`event_holding`](Self::event_holding) gives: lines joined by no rule,
    /// small enough that no bound cuts the event, every word in its
    /// continuation (so it matches whatever its head's message), its head's
    /// time read without captures. Returns where the next event starts;
    /// `None` (nothing done) otherwise.
    fn small_event(
        &mut self,
        chunk: &[u8],
        base: u64,
        start: usize,
        hit_line: usize,
        last: usize,
    ) -> Option<usize> {
        if !self.parser.joins_nothing() || hit_line <= start {
            return None;
        }
        // `start` is a head seen walking back (else it is where the walk
        // stopped, not an event's start).
        match self.walked.last() {
            Some(&(at, LineKind::Head { .. })) if at == start => {}
            _ => return None,
        }
        let head_end = memchr(b'\n', &chunk[start..last]).map(|i| start + i + 1)?;
        // The event ends where a line starts the next one.
        let mut end = last;
        let mut lines = 0_usize;
        for (line, at) in Lines::new(&chunk[..last], head_end) {
            if at > hit_line && matches!(self.parser.kind(line), LineKind::Head { .. }) {
                end = at;
                break;
            }
            lines += 1;
            if lines > SMALL_EVENT_LINES || at - start > SMALL_EVENT_BYTES {
                return None;
            }
        }
        if end - start > SMALL_EVENT_BYTES {
            return None;
        }
        let search = self.search;
        let continuation = crate::file::lossy(&chunk[head_end..end]);
        if !search.matcher.all_in(&continuation, &[]) {
            return None;
        }
        let at = self
            .parser
            .quick_time(line_at(chunk, start), search.query.end)?;
        if self.admit(base + start as u64, at) {
            let file = self.file;
            self.collected.push_with(at, |displaced| {
                let mut bytes = match displaced {
                    Some(Item::Lines { bytes, .. }) => bytes,
                    _ => Vec::new(),
                };
                bytes.clear();
                bytes.extend_from_slice(&chunk[start..end]);
                Item::Lines {
                    bytes,
                    file: Arc::clone(file),
                }
            });
        }
        Some(end)
    }

    /// Checks the time order of an event at file offset `start` whose head
    /// says `at` (as the line reader does), and whether it is in the window.
    fn admit(&mut self, start: u64, at: Timestamp) -> bool {
        let search = self.search;
        let ms = at.unix_millis();
        let window = self.window;
        if (start >= window.order_from && ms < search.lo())
            || (start < window.stop && ms > search.hi() && window.stop != u64::MAX)
        {
            self.ordered = false;
        }
        search.query.start <= at && at <= search.query.end
    }

    /// Feeds the lines from `start` (an event start) until the event holding
    /// the line at `hit_line` ends (at the latest at `last`), keeps it if it
    /// matches, and returns where the next event starts.
    fn event_holding(
        &mut self,
        chunk: &[u8],
        base: u64,
        start: usize,
        hit_line: usize,
        last: usize,
        stats: &mut ScanStats,
    ) -> usize {
        let mut local = Assembler::new();
        // The kinds seen walking back, oldest first.
        let mut walked = std::mem::take(&mut self.walked);
        walked.reverse();
        let mut known = walked.iter().peekable();
        for (line, at) in Lines::new(&chunk[..last], start) {
            let kind = match known.next_if(|(offset, _)| *offset <= at) {
                Some(&(offset, kind)) if offset == at => kind,
                _ => self.parser.kind(line),
            };
            let pushed = local.push(
                self.parser,
                line,
                kind,
                base + at as u64,
                true,
                Some(self.search.matcher),
            );
            if let Pushed::Started(Some(done)) = pushed
                && at > hit_line
            {
                self.keep(done, stats);
                self.walked = walked;
                return at;
            }
            // An event ended before the hit's line: it has no hit.
        }
        if let Some(done) = local.finish() {
            self.keep(done, stats);
        }
        self.walked = walked;
        last
    }

    /// The start of the last line at or after `first` that starts an event
    /// whatever came before it; `first` when there is none.
    fn last_certain_start(&mut self, chunk: &[u8], first: usize) -> usize {
        let Some(mut at) = last_line_start(chunk) else {
            return first;
        };
        while at > first && !self.certainly_starts(chunk, at) {
            at = line_before(chunk, at);
        }
        at.max(first)
    }

    /// Whether the line at `at` starts an event whatever came before it
    /// (its kind is remembered for [`event_holding`](Self::event_holding)).
    fn certainly_starts(&mut self, chunk: &[u8], at: usize) -> bool {
        let kind = self.parser.kind(line_at(chunk, at));
        self.walked.push((at, kind));
        let before = if self.parser.needs_line_before() {
            (at > 0).then(|| self.parser.kind(line_at(chunk, line_before(chunk, at))))
        } else {
            Some(LineKind::Blank)
        };
        self.parser.is_definite_start(kind, before)
    }

    /// Feeds one line to the open event (every line in order: no prefilter).
    fn feed(&mut self, line: &[u8], offset: u64, hit: bool, stats: &mut ScanStats) {
        let kind = self.parser.kind(line);
        self.push_open(line, kind, offset, hit, stats);
    }

    fn push_open(
        &mut self,
        line: &[u8],
        kind: LineKind,
        offset: u64,
        hit: bool,
        stats: &mut ScanStats,
    ) {
        let matcher = Some(self.search.matcher);
        match self
            .open
            .push(self.parser, line, kind, offset, hit, matcher)
        {
            Pushed::Started(Some(done)) => self.keep(done, stats),
            Pushed::Orphan => stats.orphan_lines += 1,
            Pushed::Started(None) | Pushed::Continued | Pushed::Blank => {}
        }
    }

    /// Ends the open event.
    fn end_open(&mut self, stats: &mut ScanStats) {
        if let Some(done) = self.open.finish() {
            self.keep(done, stats);
        }
    }

    /// Keeps `event` if it is in the window and matches; checks the time
    /// order as the line reader does.
    fn keep(&mut self, event: Open, stats: &mut ScanStats) {
        if !event.hit {
            return;
        }
        let search = self.search;
        // An event whose continuation holds every word matches whatever its
        // head's message: only the head's time is needed now. Otherwise the
        // head's time and message, read without captures where the pattern
        // allows it, tell whether it matches. Either way the rest of the
        // head is read only if the event is still kept at the end (most of a
        // large window's matches are displaced by later ones).
        let end = search.query.end;
        let quick = if search.matcher.all_in(&event.tail.text, &event.found) {
            self.parser
                .quick_time(&event.head, end)
                .map(|at| (at, true))
        } else {
            self.parser
                .quick_head(&event.head, end)
                .map(|(at, message)| {
                    let matched = if event.tail.text.is_empty() {
                        search.matcher.matches_with(&message, &event.found)
                    } else {
                        search
                            .matcher
                            .matches_with(&event.tail.message(&message), &event.found)
                    };
                    (at, matched)
                })
        };
        let (at, head) = match quick {
            Some((at, matched)) => {
                if !self.admit(event.start, at) || !matched {
                    return;
                }
                (at, None)
            }
            None => match self.parser.head(&event.head, end) {
                Some(head) => {
                    if !self.admit(event.start, head.timestamp) {
                        return;
                    }
                    (head.timestamp, Some(head))
                }
                None => {
                    stats.unparsed += 1;
                    return;
                }
            },
        };
        let file = self.file;
        match head {
            Some(head) => {
                let message = event.tail.message(&head.message());
                if !search.matcher.matches_with(&message, &event.found) {
                    return;
                }
                stats.continuation_lines_dropped += event.tail.dropped_lines;
                self.collected.push_with(at, |_| {
                    Item::Event(with_file(head.into_event(message, &event.tail), file))
                });
            }
            None => {
                stats.continuation_lines_dropped += event.tail.dropped_lines;
                self.collected.push_with(at, |_| Item::Head {
                    head: event.head,
                    tail: event.tail,
                    file: Arc::clone(file),
                });
            }
        }
    }
}

/// The most lines and bytes of an event kept as its bytes
/// ([`Run::small_event`]): far below the bounds of one event, so that none
/// of its lines is dropped from its message (a byte of invalid UTF-8 becomes
/// three, each line adds a `\n`).
const SMALL_EVENT_LINES: usize = MAX_CONTINUATION_LINES / 4;
const SMALL_EVENT_BYTES: usize = MAX_CONTINUATION_BYTES / 4;

/// The event `bytes` hold (its lines as [`Run::small_event`] found them: a
/// head, then lines that start no event, with their line endings), read as
/// the scan reads events; `None` when its head does not parse.
pub(super) fn assemble(
    parser: &EventParser,
    bytes: &[u8],
    reference: Timestamp,
) -> Option<RawLogEvent> {
    // The scan saw which lines these are: a head, then lines that are not
    // (without a join rule, their kinds need no second look).
    let mut assembler = Assembler::new();
    for (line, at) in Lines::new(bytes, 0) {
        let kind = if at == 0 {
            LineKind::Head {
                key: 0,
                partial: false,
            }
        } else if line.is_empty() {
            LineKind::Blank
        } else {
            LineKind::Other
        };
        assembler.push(parser, line, kind, at as u64, true, None);
    }
    let event = assembler.finish()?;
    let head = parser.head(&event.head, reference)?;
    let message = event.tail.message(&head.message());
    Some(head.into_event(message, &event.tail))
}

/// The whole lines of `chunk` from `from`, without their line endings, with
/// their offsets in `chunk`.
struct Lines<'c> {
    chunk: &'c [u8],
    pos: usize,
}

impl<'c> Lines<'c> {
    const fn new(chunk: &'c [u8], from: usize) -> Self {
        Self { chunk, pos: from }
    }
}

impl<'c> Iterator for Lines<'c> {
    type Item = (&'c [u8], usize);

    fn next(&mut self) -> Option<Self::Item> {
        if self.pos >= self.chunk.len() {
            return None;
        }
        let at = self.pos;
        let end = memchr(b'\n', &self.chunk[at..]).map_or(self.chunk.len(), |i| at + i);
        self.pos = end + 1;
        Some((strip_cr(&self.chunk[at..end]), at))
    }
}

/// The line starting at `at`, without its line ending.
fn line_at(chunk: &[u8], at: usize) -> &[u8] {
    let end = memchr(b'\n', &chunk[at..]).map_or(chunk.len(), |i| at + i);
    strip_cr(&chunk[at..end])
}

/// The start of the line before the one starting at `at` (> 0).
fn line_before(chunk: &[u8], at: usize) -> usize {
    let end = at.saturating_sub(1);
    memrchr(b'\n', &chunk[..end]).map_or(0, |i| i + 1)
}

/// The start of the last line of `chunk` (which ends with a line ending,
/// except at the end of the source).
fn last_line_start(chunk: &[u8]) -> Option<usize> {
    if chunk.is_empty() {
        return None;
    }
    let body = chunk.strip_suffix(b"\n").unwrap_or(chunk);
    Some(memrchr(b'\n', body).map_or(0, |i| i + 1))
}
