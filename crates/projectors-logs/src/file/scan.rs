//! Searching a topic's files for one window: window location, sequential
//! reads with large buffers, the prefilter, bounded collection.

mod events;

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use aci_contracts::Timestamp;
use flate2::read::MultiGzDecoder;
use memchr::{memchr, memrchr};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::formats::{LineParser, Scanned};
use super::matcher::Matcher;
use super::paths::LogFile;
use super::pattern::{EventParser, Tail};
use super::slowlog::{Finished, SlowLogParser};
use super::time::TimeRule;
use crate::{LogQuery, RawLogEvent};
use invocation_core::json_size::escaped_prefix;

/// The read buffer: the longest line kept.
const CHUNK: usize = 2 * 1024 * 1024;
/// Bytes read per `read` call.
const READ: usize = 256 * 1024;
/// Bytes read around a probe of the window search.
const PROBE: usize = 64 * 1024;
/// Bytes of one event's message kept in the raw record (JSON-escaped).
pub(crate) const MAX_RAW_MESSAGE_BYTES: usize = 2048;

/// What the scan did, for the harness (recorded in the raw response).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScanStats {
    /// Files read (all or a window of them).
    pub files_searched: u64,
    /// Files skipped whole because their time range is outside the window.
    pub files_skipped: u64,
    /// Files read from the start because they are not in time order (or too
    /// small to be worth seeking).
    pub files_full_scan: u64,
    /// Bytes read (decompressed bytes for gzip).
    pub bytes_read: u64,
    /// Lines (or slow log entries) that were parsed and did not parse.
    pub unparsed: u64,
    /// Lines longer than the longest kept line, skipped.
    pub overlong_lines: u64,
    /// Multi-line formats: continuation lines that belong to no event (before
    /// the first event of a file or of a located window, or after a skipped
    /// overlong line).
    #[serde(default)]
    pub orphan_lines: u64,
    /// Multi-line formats: continuation lines of matching events left out of
    /// their messages by the bounds of one event (still searched); each
    /// such event says how many in its `continuation_lines_dropped` field.
    #[serde(default)]
    pub continuation_lines_dropped: u64,
}

/// The scan's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Settings {
    pub(crate) max_raw_events: usize,
    /// Plain files at least this long are searched for the window.
    pub(crate) seek_threshold: u64,
    /// How far out of order lines may be and still be found.
    pub(crate) slack_ms: i64,
}

/// Set when the caller stopped waiting (the tool timed out or was dropped).
#[derive(Debug, Clone, Default)]
pub(crate) struct Cancel(Arc<AtomicBool>);

impl Cancel {
    pub(crate) fn cancel(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    fn check(&self) -> Result<(), ScanError> {
        if self.0.load(Ordering::Relaxed) {
            Err(ScanError::Cancelled)
        } else {
            Ok(())
        }
    }
}

/// Why a scan stopped without a result.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ScanError {
    #[error("a configured log file cannot be read")]
    Io(#[source] io::Error),
    #[error("the search was cancelled")]
    Cancelled,
}

impl From<io::Error> for ScanError {
    fn from(error: io::Error) -> Self {
        Self::Io(error)
    }
}

/// What a kept match holds until the end of the search.
pub(crate) enum Item {
    /// A built event (its `file` field set).
    Event(RawLogEvent),
    /// A JSON line, parsed into its event only if it is still kept at the
    /// end: most matches of a large window are displaced by later ones.
    Line {
        /// The line, without its line ending.
        bytes: Vec<u8>,
        /// The file's name.
        file: Arc<str>,
    },
    /// A multi-line event known to match from its continuation alone, as
    /// its lines (head first; small enough that no bound cuts it),
    /// assembled and read only if it is still kept at the end.
    Lines {
        /// The event's lines, with their line endings.
        bytes: Vec<u8>,
        /// The file's name.
        file: Arc<str>,
    },
    /// A multi-line event known to match from its continuation alone, its
    /// head line read (captures) only if it is still kept at the end.
    Head {
        /// The head line, without its line ending.
        head: Vec<u8>,
        /// Its continuation.
        tail: Tail,
        /// The file's name.
        file: Arc<str>,
    },
}

/// A kept match, ordered by time then by the order it was found.
struct Kept {
    at: Timestamp,
    seq: u64,
    item: Item,
}

impl PartialEq for Kept {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Kept {}
impl PartialOrd for Kept {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Kept {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

/// The most recent `cap` matches and the count of all. Memory is bounded by
/// `cap` kept items, whatever the number of matches.
pub(crate) struct Collector {
    cap: usize,
    heap: BinaryHeap<Reverse<Kept>>,
    matches: u64,
    seq: u64,
}

impl Collector {
    pub(crate) fn new(cap: usize) -> Self {
        Self {
            cap: cap.max(1),
            heap: BinaryHeap::new(),
            matches: 0,
            seq: 0,
        }
    }

    /// Counts a match at `at` and keeps it if it is among the `cap` most
    /// recent; `build` makes the item, given the one it displaces (whose
    /// buffer it may reuse).
    fn push_with(&mut self, at: Timestamp, build: impl FnOnce(Option<Item>) -> Item) {
        self.matches += 1;
        self.seq += 1;
        let mut displaced = None;
        if self.heap.len() >= self.cap {
            match self.heap.peek() {
                Some(Reverse(min)) if (min.at, min.seq) < (at, self.seq) => {
                    displaced = self.heap.pop().map(|Reverse(k)| k.item);
                }
                _ => return,
            }
        }
        let item = build(displaced);
        self.heap.push(Reverse(Kept {
            at,
            seq: self.seq,
            item,
        }));
    }

    fn absorb(&mut self, other: Self) {
        let matches = self.matches + other.matches;
        let mut kept: Vec<Kept> = other.heap.into_iter().map(|Reverse(k)| k).collect();
        kept.sort();
        for k in kept {
            self.push_with(k.at, |_| k.item);
        }
        self.matches = matches;
    }

    /// The kept events oldest first (made by `event`), and the count of all
    /// matches.
    pub(crate) fn finish(
        self,
        mut event: impl FnMut(Item) -> Option<RawLogEvent>,
    ) -> (Vec<RawLogEvent>, u64) {
        let mut kept: Vec<Kept> = self.heap.into_iter().map(|Reverse(k)| k).collect();
        kept.sort();
        let events = kept
            .into_iter()
            .filter_map(|k| event(k.item))
            .map(bounded)
            .collect();
        (events, self.matches)
    }
}

/// `event` with its message cut to [`MAX_RAW_MESSAGE_BYTES`] for the raw
/// record (`message_truncated` says so).
pub(crate) fn bounded(mut event: RawLogEvent) -> RawLogEvent {
    let (kept, cut) = escaped_prefix(&event.message, MAX_RAW_MESSAGE_BYTES);
    if cut {
        event.message = kept.to_owned();
        event
            .fields
            .insert("message_truncated".to_owned(), Value::Bool(true));
    }
    event
}

fn with_file(mut event: RawLogEvent, file: &str) -> RawLogEvent {
    event
        .fields
        .insert("file".to_owned(), Value::String(file.to_owned()));
    event
}

/// How a topic's events are read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reader {
    /// One event per line.
    Lines(LineParser),
    /// The slow query log.
    Slow(TimeRule),
    /// Multi-line events that start at a line a pattern matches.
    Events(EventParser),
}

/// A reader whose events start at lines the window search can recognize
/// (every format but the slow log).
#[derive(Clone, Copy)]
pub(crate) enum Seekable<'a> {
    Lines(&'a LineParser),
    Events(&'a EventParser),
}

impl Seekable<'_> {
    /// The time of `line` when it certainly starts an event; `before` is the
    /// line before it (`None`: unknown, the read started mid-line).
    fn start_time(
        self,
        before: Option<&[u8]>,
        line: &[u8],
        reference: Timestamp,
    ) -> Option<Timestamp> {
        match self {
            Self::Lines(parser) => parser.scan(line, reference).map(|s| s.timestamp()),
            Self::Events(parser) => parser.start_time(before, line, reference),
        }
    }

    /// The time of `line` when it may start an event, whatever came before
    /// it. An event's head is always such a line, so a file whose first (or
    /// last) such line is after (or before) the window has no event in it;
    /// a line that *certainly* starts one is not enough for that: a
    /// PostgreSQL secondary line after the file's last certain start may
    /// start an event of its own, later.
    fn possible_start_time(self, line: &[u8], reference: Timestamp) -> Option<Timestamp> {
        match self {
            Self::Lines(parser) => parser.scan(line, reference).map(|s| s.timestamp()),
            Self::Events(parser) => parser.possible_start_time(line, reference),
        }
    }
}

impl Reader {
    fn seekable(&self) -> Option<Seekable<'_>> {
        match self {
            Self::Lines(parser) => Some(Seekable::Lines(parser)),
            Self::Events(parser) => Some(Seekable::Events(parser)),
            Self::Slow(_) => None,
        }
    }
}

/// One search: the query, the matcher, the window with slack.
struct Search<'a> {
    reader: &'a Reader,
    matcher: &'a Matcher,
    query: &'a LogQuery,
    settings: Settings,
    cancel: &'a Cancel,
}

fn is_gzip(file: &mut File) -> io::Result<bool> {
    let mut magic = [0_u8; 2];
    let n = file.read(&mut magic)?;
    file.seek(SeekFrom::Start(0))?;
    Ok(n == 2 && magic == [0x1f, 0x8b])
}

/// Searches `files` (already resolved) for `query`: the kept events, oldest
/// first, the count of all matches, and what the scan did.
pub(crate) fn search(
    files: &[LogFile],
    reader: &Reader,
    query: &LogQuery,
    settings: Settings,
    cancel: &Cancel,
) -> Result<(Vec<RawLogEvent>, u64, ScanStats), ScanError> {
    let escapes = match reader {
        Reader::Lines(parser) => Some(parser.escapes()),
        Reader::Events(parser) => Some(parser.escapes()),
        Reader::Slow(_) => None,
    };
    let matcher = Matcher::new(&query.query, escapes);
    let search = Search {
        reader,
        matcher: &matcher,
        query,
        settings,
        cancel,
    };
    let mut stats = ScanStats::default();
    // First times, for skipping compressed rotations by the next file's start.
    let mut opened = Vec::with_capacity(files.len());
    for file in files {
        cancel.check()?;
        let mut handle = File::open(&file.path)?;
        let gzip = is_gzip(&mut handle)?;
        let first = search.first_time(&mut handle, gzip)?;
        opened.push((file, handle, gzip, first));
    }
    opened
        .sort_by_key(|(file, _, _, first)| (first.map(Timestamp::unix_millis), file.name.clone()));
    let starts: Vec<Option<Timestamp>> = opened.iter().map(|o| o.3).collect();
    let mut all = Collector::new(settings.max_raw_events);
    for (index, (file, handle, gzip, first)) in opened.into_iter().enumerate() {
        cancel.check()?;
        let next_start = starts.get(index + 1).copied().flatten();
        let collected = search.file(file, handle, gzip, first, next_start, &mut stats)?;
        if let Some(collected) = collected {
            all.absorb(collected);
        }
    }
    let (events, matches) = all.finish(|item| match item {
        Item::Event(event) => Some(event),
        Item::Line { bytes, file } => match reader {
            // It parsed when it was scanned: the same line parses again.
            Reader::Lines(parser) => parser
                .parse(&bytes, query.end)
                .map(|event| with_file(event, &file)),
            Reader::Slow(_) | Reader::Events(_) => None,
        },
        Item::Head { head, tail, file } => match reader {
            // Its time was read from the same line when it was scanned.
            Reader::Events(parser) => parser.head(&head, query.end).map(|head| {
                let message = tail.message(&head.message());
                with_file(head.into_event(message, &tail), &file)
            }),
            Reader::Lines(_) | Reader::Slow(_) => None,
        },
        Item::Lines { bytes, file } => match reader {
            Reader::Events(parser) => {
                events::assemble(parser, &bytes, query.end).map(|event| with_file(event, &file))
            }
            Reader::Lines(_) | Reader::Slow(_) => None,
        },
    });
    Ok((events, matches, stats))
}

impl Search<'_> {
    fn lo(&self) -> i64 {
        self.query.start.unix_millis() - self.settings.slack_ms
    }

    fn hi(&self) -> i64 {
        self.query.end.unix_millis() + self.settings.slack_ms
    }

    /// The time of the first line (or entry) that parses, within the first
    /// probe's bytes; `None` when there is none there.
    fn first_time(&self, file: &mut File, gzip: bool) -> Result<Option<Timestamp>, ScanError> {
        let mut buf = vec![0_u8; PROBE];
        let n = if gzip {
            read_full(&mut MultiGzDecoder::new(&mut *file), &mut buf)
        } else {
            read_full(file, &mut buf)
        };
        file.seek(SeekFrom::Start(0))?;
        // A corrupt gzip header shows when the file is read.
        let Ok(n) = n else { return Ok(None) };
        let buf = &buf[..n];
        let first_possible = |parser: Seekable<'_>| {
            // Only whole lines: the last one in a full probe may be cut.
            let whole = if n < PROBE {
                buf
            } else {
                memrchr(b'\n', buf).map_or(&buf[..0], |i| &buf[..i])
            };
            whole
                .split(|b| *b == b'\n')
                .find_map(|line| parser.possible_start_time(strip_cr(line), self.query.end))
        };
        Ok(match self.reader {
            Reader::Lines(parser) => first_possible(Seekable::Lines(parser)),
            Reader::Events(parser) => first_possible(Seekable::Events(parser)),
            Reader::Slow(rule) => {
                let mut slow = SlowLogParser::new(rule.clone());
                let mut found = None;
                for line in buf.split(|b| *b == b'\n') {
                    if let Some(Finished::Event(e)) = slow.line(strip_cr(line)) {
                        found = Some(e.timestamp);
                        break;
                    }
                }
                found
            }
        })
    }

    /// Searches one file; `None` when it was skipped by its time range.
    fn file(
        &self,
        file: &LogFile,
        mut handle: File,
        gzip: bool,
        first: Option<Timestamp>,
        next_start: Option<Timestamp>,
        stats: &mut ScanStats,
    ) -> Result<Option<Collector>, ScanError> {
        let field: Arc<str> = Arc::from(file.name.as_str());
        let size = handle.metadata()?.len();
        // Skipped whole when its time range is outside the window: it starts
        // after the window, or it ends before it (a plain file's last line;
        // for a compressed rotation, the start of the next newer file).
        let starts_after = (gzip || size >= self.settings.seek_threshold)
            && first.is_some_and(|f| f.unix_millis() > self.hi());
        let seekable = self.reader.seekable();
        let ends_before = match (seekable, gzip) {
            (Some(seekable), false) if size >= self.settings.seek_threshold => {
                last_time(&mut handle, size, seekable, self.query.end)?
                    .is_some_and(|last| last.unix_millis() < self.lo())
            }
            // A small plain file is read whole: cheap, and right even when
            // it is not in time order.
            (_, false) => false,
            _ => first.is_some() && next_start.is_some_and(|n| n.unix_millis() < self.lo()),
        };
        if starts_after || ends_before {
            stats.files_skipped += 1;
            return Ok(None);
        }
        stats.files_searched += 1;
        if let (Some(seekable), false) = (seekable, gzip)
            && size >= self.settings.seek_threshold
        {
            if let Some(collected) = self.seek_window(&mut handle, size, seekable, stats, &field)? {
                return Ok(Some(collected));
            }
            // Out of order: what was found may be incomplete. Read it all.
            handle.seek(SeekFrom::Start(0))?;
        }
        stats.files_full_scan += 1;
        let mut collected = Collector::new(self.settings.max_raw_events);
        let mut local = ScanStats::default();
        match self.reader {
            Reader::Lines(parser) => {
                let window = Window {
                    base: 0,
                    skip_first: false,
                    stop: u64::MAX,
                    order_from: u64::MAX,
                };
                if gzip {
                    let mut decoder =
                        MultiGzDecoder::new(io::BufReader::with_capacity(CHUNK, handle));
                    self.lines(
                        &mut decoder,
                        parser,
                        window,
                        &mut collected,
                        &mut local,
                        &field,
                    )?;
                } else {
                    self.lines(
                        &mut handle,
                        parser,
                        window,
                        &mut collected,
                        &mut local,
                        &field,
                    )?;
                }
            }
            Reader::Slow(rule) => {
                if gzip {
                    let mut decoder =
                        MultiGzDecoder::new(io::BufReader::with_capacity(CHUNK, handle));
                    self.slow(&mut decoder, rule, &mut collected, &mut local, &field)?;
                } else {
                    self.slow(&mut handle, rule, &mut collected, &mut local, &field)?;
                }
            }
            Reader::Events(parser) => {
                let window = Window {
                    base: 0,
                    skip_first: false,
                    stop: u64::MAX,
                    order_from: u64::MAX,
                };
                if gzip {
                    let mut decoder =
                        MultiGzDecoder::new(io::BufReader::with_capacity(CHUNK, handle));
                    self.events(
                        &mut decoder,
                        parser,
                        window,
                        &mut collected,
                        &mut local,
                        &field,
                    )?;
                } else {
                    self.events(
                        &mut handle,
                        parser,
                        window,
                        &mut collected,
                        &mut local,
                        &field,
                    )?;
                }
            }
        }
        add(stats, local);
        Ok(Some(collected))
    }

    /// Reads only the window of a plain file in time order; `None` when the
    /// probes or a line show it is not in time order.
    fn seek_window(
        &self,
        handle: &mut File,
        size: u64,
        parser: Seekable<'_>,
        stats: &mut ScanStats,
        field: &Arc<str>,
    ) -> Result<Option<Collector>, ScanError> {
        let slack = self.settings.slack_ms;
        let end = self.query.end;
        let Some(start) = locate(handle, size, parser, self.lo(), end, slack)? else {
            return Ok(None);
        };
        let Some(stop) = locate(handle, size, parser, self.hi() + 1, end, slack)? else {
            return Ok(None);
        };
        let window = Window {
            base: start.lo,
            skip_first: start.lo > 0,
            stop: stop.first_at_or_after.unwrap_or(size),
            order_from: start.lo + 2 * PROBE as u64,
        };
        #[cfg(unix)]
        if let Some(split) = split_point(handle, window, parser, end)? {
            return self.two_halves(handle, parser, window, split, stats, field);
        }
        let mut collected = Collector::new(self.settings.max_raw_events);
        let mut local = ScanStats::default();
        handle.seek(SeekFrom::Start(start.lo))?;
        if !self.read_window(handle, parser, window, &mut collected, &mut local, field)? {
            return Ok(None);
        }
        add(stats, local);
        Ok(Some(collected))
    }

    /// Reads `window` as two halves on two threads (the second from the line
    /// start `split`), with positional reads of the one open file; the
    /// halves' matches are merged in file order, as one sequential read
    /// would have found them.
    #[cfg(unix)]
    fn two_halves(
        &self,
        handle: &File,
        parser: Seekable<'_>,
        window: Window,
        split: u64,
        stats: &mut ScanStats,
        field: &Arc<str>,
    ) -> Result<Option<Collector>, ScanError> {
        let first = Window {
            stop: split,
            ..window
        };
        let second = Window {
            base: split,
            skip_first: false,
            ..window
        };
        // Each half on its own copies of the reader and the matcher: a
        // regex's caches are pooled, and every thread but the first one that
        // used the regex takes them through a lock, twice per match (a fifth
        // of a window's time with many hits; the halves' threads are new on
        // every call, and the server's calls run on any thread). A copy is
        // used by its thread alone, its caches filled anew.
        let half = |window: Window| -> Result<(bool, Collector, ScanStats), ScanError> {
            let reader = self.reader.clone();
            let matcher = self.matcher.clone();
            let search = Search {
                reader: &reader,
                matcher: &matcher,
                ..*self
            };
            // A clone is the same kind of reader, so it is seekable as
            // `parser` is; the fallback only keeps this total.
            let parser = reader.seekable().unwrap_or(parser);
            let mut collected = Collector::new(self.settings.max_raw_events);
            let mut local = ScanStats::default();
            let mut source = ReadAt {
                file: handle,
                pos: window.base,
            };
            let ordered = search.read_window(
                &mut source,
                parser,
                window,
                &mut collected,
                &mut local,
                field,
            )?;
            Ok((ordered, collected, local))
        };
        // A half's panic is its error; nothing panics past `caught`.
        let caught = |window: Window| {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| half(window)))
                .unwrap_or_else(|_| Err(ScanError::Io(io::Error::other("a scan thread panicked"))))
        };
        let (early, late) = match halves_pool() {
            Some(pool) => pool.join(|| caught(first), || caught(second)),
            None => std::thread::scope(|scope| {
                let late = scope.spawn(|| caught(second));
                let early = caught(first);
                // `caught` returned: the thread cannot have panicked.
                let late = late
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
                (early, late)
            }),
        };
        let (early_ordered, mut collected, early_stats) = early?;
        let (late_ordered, late_collected, late_stats) = late?;
        if !(early_ordered && late_ordered) {
            return Ok(None);
        }
        collected.absorb(late_collected);
        add(stats, early_stats);
        add(stats, late_stats);
        Ok(Some(collected))
    }

    /// Reads the lines of `window` from `source` with `parser`; false when a
    /// line showed the file is not in time order.
    fn read_window(
        &self,
        source: &mut impl Read,
        parser: Seekable<'_>,
        window: Window,
        collected: &mut Collector,
        stats: &mut ScanStats,
        file: &Arc<str>,
    ) -> Result<bool, ScanError> {
        match parser {
            Seekable::Lines(parser) => self.lines(source, parser, window, collected, stats, file),
            Seekable::Events(parser) => self.events(source, parser, window, collected, stats, file),
        }
    }

    fn in_window_and_matching(&self, at: Timestamp, message: &str) -> bool {
        self.query.start <= at && at <= self.query.end && self.matcher.matches(message)
    }

    fn keep(&self, event: RawLogEvent, collected: &mut Collector, file: &Arc<str>) {
        let at = event.timestamp;
        if self.in_window_and_matching(at, &event.message) {
            collected.push_with(at, |_| Item::Event(with_file(event, file)));
        }
    }

    /// Keeps a scanned `line` that is in the window and matches.
    fn keep_line(
        &self,
        scanned: Scanned<'_>,
        line: &[u8],
        collected: &mut Collector,
        file: &Arc<str>,
    ) {
        match scanned {
            Scanned::Event(event) => self.keep(event, collected, file),
            Scanned::Lazy { timestamp, message } => {
                if self.in_window_and_matching(timestamp, &message) {
                    collected.push_with(timestamp, |displaced| {
                        let mut bytes = match displaced {
                            Some(Item::Line { bytes, .. }) => bytes,
                            _ => Vec::new(),
                        };
                        bytes.clear();
                        bytes.extend_from_slice(line);
                        Item::Line {
                            bytes,
                            file: Arc::clone(file),
                        }
                    });
                }
            }
        }
    }

    /// Reads lines of `source` in the window; false when a line showed the
    /// file is not in time order.
    fn lines(
        &self,
        source: &mut impl Read,
        parser: &LineParser,
        window: Window,
        collected: &mut Collector,
        stats: &mut ScanStats,
        file: &Arc<str>,
    ) -> Result<bool, ScanError> {
        let end = self.query.end;
        let (lo, hi) = (self.lo(), self.hi());
        let mut ordered = true;
        let mut handle_line = |line: &[u8], offset: u64, stats: &mut ScanStats| {
            let line = strip_cr(line);
            if line.is_empty() {
                return;
            }
            match parser.scan(line, end) {
                Some(scanned) => {
                    let at = scanned.timestamp().unix_millis();
                    if (offset >= window.order_from && at < lo)
                        || (offset < window.stop && at > hi && window.stop != u64::MAX)
                    {
                        ordered = false;
                    }
                    self.keep_line(scanned, line, collected, file);
                }
                None => stats.unparsed += 1,
            }
        };
        let prefilter = self.matcher.prefilter();
        read_chunks(
            source,
            window,
            self.cancel,
            stats,
            |chunk, base, stats, _gap| match prefilter.and_then(|p| p.for_chunk(chunk)) {
                Some(automaton) => {
                    let mut pos = 0;
                    while pos < chunk.len() {
                        let Some(hit) = automaton.find(&chunk[pos..]) else {
                            break;
                        };
                        let at = pos + hit.start();
                        let start = memrchr(b'\n', &chunk[pos..at]).map_or(pos, |i| pos + i + 1);
                        let end = memchr(b'\n', &chunk[at..]).map_or(chunk.len(), |i| at + i);
                        handle_line(&chunk[start..end], base + start as u64, stats);
                        pos = end + 1;
                    }
                }
                None => {
                    let mut pos = 0;
                    while pos < chunk.len() {
                        let end = memchr(b'\n', &chunk[pos..]).map_or(chunk.len(), |i| pos + i);
                        handle_line(&chunk[pos..end], base + pos as u64, stats);
                        pos = end + 1;
                    }
                }
            },
        )?;
        Ok(ordered)
    }

    fn slow(
        &self,
        source: &mut impl Read,
        rule: &TimeRule,
        collected: &mut Collector,
        stats: &mut ScanStats,
        file: &Arc<str>,
    ) -> Result<(), ScanError> {
        let mut parser = SlowLogParser::new(rule.clone());
        let mut unparsed = 0_u64;
        let mut take = |finished: Option<Finished>, collected: &mut Collector| match finished {
            Some(Finished::Event(event)) => self.keep(event, collected, file),
            Some(Finished::Unparsed) => unparsed += 1,
            None => {}
        };
        let window = Window {
            base: 0,
            skip_first: false,
            stop: u64::MAX,
            order_from: u64::MAX,
        };
        read_chunks(source, window, self.cancel, stats, |chunk, _, _, _| {
            for line in chunk.split(|b| *b == b'\n') {
                take(parser.line(strip_cr(line)), collected);
            }
        })?;
        take(parser.finish(), collected);
        stats.unparsed += unparsed;
        Ok(())
    }
}

/// Windows at least this long are read as two halves in parallel when the
/// machine has two cores or more.
const PARALLEL_FROM: u64 = 4 * 1024 * 1024;

/// The threads that read the two halves of a window ([`Search::two_halves`]),
/// one per CPU, named `aci-log-scan-<n>`, started at the first window
/// read in halves; `None` when they could not be started (then each window
/// starts a thread of its own).
///
/// Threads that sleep between windows and are woken for one are placed by
/// the kernel on an idle CPU. A thread started for each window is placed
/// near the thread that starts it, and for a window of a few milliseconds
/// often stays there: on 2 CPUs, the halves of a `query_logs` call (whose
/// scan runs on one of tokio's blocking threads) shared one CPU, taking
/// turns at the scheduler's tick while the other CPU idled, for about a
/// third of the call.
#[cfg(unix)]
fn halves_pool() -> Option<&'static rayon_core::ThreadPool> {
    static POOL: std::sync::OnceLock<Option<rayon_core::ThreadPool>> = std::sync::OnceLock::new();
    POOL.get_or_init(|| {
        let threads = std::thread::available_parallelism().map_or(2, |n| n.get().max(2));
        rayon_core::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|n| format!("aci-log-scan-{n}"))
            .build()
            .ok()
    })
    .as_ref()
}

/// The start of the first line at or after the middle of `window` (for
/// multi-line events, the first line there that certainly starts an event),
/// when the window is worth two threads.
#[cfg(unix)]
fn split_point(
    file: &File,
    window: Window,
    parser: Seekable<'_>,
    reference: Timestamp,
) -> Result<Option<u64>, ScanError> {
    use std::os::unix::fs::FileExt;
    let parallel = std::thread::available_parallelism().is_ok_and(|n| n.get() >= 2);
    if !parallel || window.stop == u64::MAX || window.stop - window.base < PARALLEL_FROM {
        return Ok(None);
    }
    let mid = window.base + (window.stop - window.base) / 2;
    let mut buf = vec![0_u8; PROBE];
    let n = file.read_at(&mut buf, mid)?;
    let split = match parser {
        Seekable::Lines(_) => memchr(b'\n', &buf[..n]).map(|i| i + 1),
        Seekable::Events(_) => first_parsed(parser, &buf[..n], true, reference).map(|(at, _)| at),
    };
    Ok(split
        .map(|i| mid + i as u64)
        .filter(|&split| split < window.stop))
}

/// Sequential reads of a shared file by position (the file's own cursor is
/// not used, so two readers can share it).
#[cfg(unix)]
struct ReadAt<'f> {
    file: &'f File,
    pos: u64,
}

#[cfg(unix)]
impl Read for ReadAt<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = std::os::unix::fs::FileExt::read_at(self.file, buf, self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}

fn add(total: &mut ScanStats, part: ScanStats) {
    total.bytes_read += part.bytes_read;
    total.unparsed += part.unparsed;
    total.overlong_lines += part.overlong_lines;
    total.orphan_lines += part.orphan_lines;
    total.continuation_lines_dropped += part.continuation_lines_dropped;
}

/// The part of a file to read.
#[derive(Debug, Clone, Copy)]
struct Window {
    /// Offset of the reader's first byte in the file.
    base: u64,
    /// Whether the first line is a partial one (the read starts mid-line).
    skip_first: bool,
    /// Lines starting at or after this offset are not read.
    stop: u64,
    /// From this offset on, a line before the window means disorder.
    order_from: u64,
}

fn strip_cr(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\r").unwrap_or(line)
}

fn read_full(source: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match source.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

/// Calls `f` with runs of whole lines (the last one may lack its newline at
/// the end of the source), the offset of their first byte, and whether bytes
/// before them were skipped (an overlong line). Checks `cancel` once per
/// read; a line longer than the buffer ([`CHUNK`]) is counted and skipped.
fn read_chunks(
    source: &mut impl Read,
    window: Window,
    cancel: &Cancel,
    stats: &mut ScanStats,
    mut f: impl FnMut(&[u8], u64, &mut ScanStats, bool),
) -> Result<(), ScanError> {
    // Grown up to CHUNK only for a line longer than the reads so far.
    let mut buf = vec![0_u8; 2 * READ];
    let mut filled = 0_usize;
    // Offset in the file of buf[0].
    let mut base = window.base;
    let mut skipping = window.skip_first;
    let mut overlong = false;
    let mut gap = false;
    loop {
        cancel.check()?;
        if base >= window.stop {
            return Ok(());
        }
        // Never past `stop` (a line start: the bytes before it end a line).
        // Reads of at most READ bytes, processed while they are in the CPU's
        // cache; the buffer (CHUNK) still bounds the longest line.
        let room = (buf.len() - filled).min(READ);
        let want = if window.stop == u64::MAX {
            room
        } else {
            let left = window.stop.saturating_sub(base + filled as u64);
            usize::try_from(left).map_or(room, |left| left.min(room))
        };
        let n = match source.read(&mut buf[filled..filled + want]) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e.into()),
        };
        stats.bytes_read += n as u64;
        filled += n;
        let eof = n == 0;
        let complete = if eof {
            filled
        } else {
            match memrchr(b'\n', &buf[..filled]) {
                Some(i) => i + 1,
                None if filled == buf.len() && buf.len() < CHUNK => {
                    buf.resize((2 * buf.len()).min(CHUNK), 0);
                    continue;
                }
                None if filled == buf.len() => {
                    // One line fills the buffer: drop it up to its end.
                    if !skipping {
                        overlong = true;
                    }
                    skipping = true;
                    base += filled as u64;
                    filled = 0;
                    continue;
                }
                None => continue,
            }
        };
        let mut start = 0;
        if skipping {
            match memchr(b'\n', &buf[..complete]) {
                Some(i) => start = i + 1,
                None => start = complete,
            }
            if overlong && start > 0 {
                stats.overlong_lines += 1;
                overlong = false;
                gap = true;
            }
            skipping = false;
        }
        let mut end = complete;
        if window.stop != u64::MAX {
            let limit = window.stop.saturating_sub(base);
            if limit < end as u64 {
                // Cut at the line boundary `stop` (it is a line start).
                end = usize::try_from(limit).unwrap_or(end).max(start);
            }
        }
        if end > start {
            f(&buf[start..end], base + start as u64, stats, gap);
            gap = false;
        }
        if eof {
            return Ok(());
        }
        buf.copy_within(complete..filled, 0);
        base += complete as u64;
        filled -= complete;
        if end < complete {
            return Ok(());
        }
    }
}

/// The first line in `buf` that parses (for multi-line events: that
/// certainly starts an event), skipping a partial first line when
/// `skip_first`: its offset in `buf` and time.
fn first_parsed(
    parser: Seekable<'_>,
    buf: &[u8],
    skip_first: bool,
    reference: Timestamp,
) -> Option<(usize, Timestamp)> {
    let mut pos = if skip_first {
        memchr(b'\n', buf)? + 1
    } else {
        0
    };
    // The line before (unknown after a skipped partial line).
    let mut before: Option<&[u8]> = if skip_first { None } else { Some(b"") };
    while pos < buf.len() {
        // Only whole lines: the last one in a probe may be cut.
        let end = pos + memchr(b'\n', &buf[pos..])?;
        let line = strip_cr(&buf[pos..end]);
        if let Some(at) = parser.start_time(before, line, reference) {
            return Some((pos, at));
        }
        before = Some(line);
        pos = end + 1;
    }
    None
}

/// The time of the last line that may start an event, from the file's tail.
fn last_time(
    file: &mut File,
    size: u64,
    parser: Seekable<'_>,
    reference: Timestamp,
) -> Result<Option<Timestamp>, ScanError> {
    let from = size.saturating_sub(PROBE as u64);
    file.seek(SeekFrom::Start(from))?;
    let mut buf = vec![0_u8; PROBE];
    let n = read_full(file, &mut buf)?;
    let mut buf = &buf[..n];
    if from > 0 {
        let Some(i) = memchr(b'\n', buf) else {
            return Ok(None);
        };
        buf = &buf[i + 1..];
    }
    Ok(buf
        .rsplit(|b| *b == b'\n')
        .find_map(|line| parser.possible_start_time(strip_cr(line), reference)))
}

/// Where a binary search on line starts ended.
struct Located {
    /// Read from here (skipping the partial line when > 0): every line
    /// before it is earlier than the target, if the file is in time order.
    lo: u64,
    /// The start of the first line seen at or after the target, if any.
    first_at_or_after: Option<u64>,
}

/// Binary search by time over line starts of a file in time order; `None`
/// when the probes show it is not (a later probe more than `slack_ms`
/// earlier than an earlier one).
fn locate(
    file: &mut File,
    size: u64,
    parser: Seekable<'_>,
    target: i64,
    reference: Timestamp,
    slack_ms: i64,
) -> Result<Option<Located>, ScanError> {
    let mut buf = vec![0_u8; PROBE];
    let mut seen: Vec<(u64, i64)> = Vec::new();
    let mut probe =
        |offset: u64, seen: &mut Vec<(u64, i64)>| -> Result<Option<(u64, i64)>, ScanError> {
            file.seek(SeekFrom::Start(offset))?;
            let n = read_full(file, &mut buf)?;
            let found = first_parsed(parser, &buf[..n], offset > 0, reference)
                .map(|(at, t)| (offset + at as u64, t.unix_millis()));
            seen.extend(found);
            Ok(found)
        };
    if let Some((line, t)) = probe(0, &mut seen)?
        && t >= target
    {
        return Ok(Some(Located {
            lo: 0,
            first_at_or_after: Some(line),
        }));
    }
    let (mut lo, mut hi) = (0_u64, size);
    let mut first_at_or_after = None;
    while hi - lo > PROBE as u64 {
        let mid = lo + (hi - lo) / 2;
        match probe(mid, &mut seen)? {
            Some((_, t)) if t < target => lo = mid,
            Some((line, _)) => {
                hi = mid;
                first_at_or_after = Some(line);
            }
            None => hi = mid,
        }
    }
    // The first line at or after the target lies in lo..hi or is the one found at hi.
    seen.sort_unstable();
    if seen.windows(2).any(|w| w[1].1 < w[0].1 - slack_ms) {
        return Ok(None);
    }
    if let Some((line, t)) = probe(lo, &mut Vec::new())? {
        if t >= target {
            first_at_or_after = Some(line);
        } else {
            // Binary search the last probe's whole lines for the exact start
            // (the file is taken to be in time order, as above).
            file.seek(SeekFrom::Start(lo))?;
            let n = read_full(file, &mut buf)?;
            let mut pos = if lo == 0 {
                0
            } else {
                memchr(b'\n', &buf[..n]).map_or(n, |i| i + 1)
            };
            let mut lines: Vec<(usize, usize)> = Vec::new();
            while let Some(len) = memchr(b'\n', &buf[pos..n]) {
                lines.push((pos, pos + len));
                pos += len + 1;
            }
            let first_known: Option<&[u8]> = if lo == 0 { Some(b"") } else { None };
            let time_of = |i: usize| {
                let before = match i.checked_sub(1) {
                    Some(j) => Some(strip_cr(&buf[lines[j].0..lines[j].1])),
                    None => first_known,
                };
                let (start, end) = lines[i];
                parser
                    .start_time(before, strip_cr(&buf[start..end]), reference)
                    .map(Timestamp::unix_millis)
            };
            let (mut from, mut to) = (0, lines.len());
            while from < to {
                let mid = from + (to - from) / 2;
                // The first line from `mid` on that starts an event.
                match (mid..to).find_map(|j| time_of(j).map(|t| (j, t))) {
                    Some((j, t)) if t >= target => {
                        first_at_or_after = Some(lo + lines[j].0 as u64);
                        to = mid;
                    }
                    Some((j, _)) => from = j + 1,
                    None => to = mid,
                }
            }
        }
    }
    Ok(Some(Located {
        lo,
        first_at_or_after,
    }))
}
