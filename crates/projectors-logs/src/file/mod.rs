//! [`FileLogSource`]: the topics' log files, configured by the deployment.
//!
//! Each topic maps to file-name globs in one directory and a format (JSON
//! lines, logfmt, syslog, the MariaDB/MySQL slow query log, text lines read
//! with a regular expression (`pattern`) and its presets for common writers,
//! whose events may span several lines). The agent names only the topic:
//! directories, globs and formats never reach it.
//!
//! # Behavior
//! - Matching is the mock's: every word of the query in the message,
//!   ignoring case; only the message is searched.
//! - A topic without files is [`LogSourceError::data_source_unknown`]
//!   (`DATA_SOURCE_UNKNOWN`): nothing was searched, so nothing is claimed
//!   absent. A pattern that matches no file, a file that cannot be read, or a
//!   name that resolves outside the directory is
//!   [`LogSourceError::permanent`] (`EXECUTION_FAILED`, not retryable: the
//!   deployment must fix it), never an empty result.
//! - At most `max_raw_events` matches are returned, the most recent ones;
//!   `match_count` counts all in the window.
//! - Files are read on the blocking pool; when the caller stops waiting (the
//!   tool timeout), the scan stops at its next read and returns nothing.
//! - Lines (or entries) that do not parse are counted in [`ScanStats`] and
//!   skipped, never fatal; so are continuation lines that belong to no event
//!   and lines beyond the bounds of one event.
//! - [`parse_text`] reads a text as a topic's format would, every event, with
//!   no window and no matching: a pure function over bytes.
//!
//! How the window is found is in the crate's README: plain files of at
//! least the seek threshold are binary-searched by time (and read whole if a
//! line shows they are not in time order); smaller and compressed files are
//! read from the start; files whose time range is outside the window are
//! skipped.

mod assemble;
mod config;
mod formats;
pub(crate) mod matcher;
mod paths;
mod pattern;
mod scan;
mod slowlog;
mod time;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use aci_contracts::{LogTopic, SourceKind, Timestamp};
use async_trait::async_trait;
use globset::GlobMatcher;

pub use config::{LogFormat, LogsConfig, TopicConfig};
pub use scan::ScanStats;

use crate::{Error, LogMatches, LogQuery, LogSource, LogSourceError, Result};
use assemble::{Assembler, Pushed};
use formats::{Keys, LineFormat, LineParser};
use pattern::EventParser;
use scan::{Cancel, Reader, Settings};
use time::{Layout, TimeRule, Zone, parse_layout, parse_zone};

/// `bytes` as text, invalid UTF-8 replaced (`String::from_utf8_lossy`),
/// validated with `std::str::from_utf8` first: on valid text (nearly every
/// log line) that is several times faster than the lossy decoder's walk.
pub(crate) fn lossy(bytes: &[u8]) -> std::borrow::Cow<'_, str> {
    match std::str::from_utf8(bytes) {
        Ok(text) => std::borrow::Cow::Borrowed(text),
        Err(_) => String::from_utf8_lossy(bytes),
    }
}

/// One topic, compiled.
#[derive(Debug)]
struct Topic {
    dir: PathBuf,
    patterns: Vec<GlobMatcher>,
    reader: Reader,
}

/// Log files per topic.
///
/// Debug output shows the topics, not the paths.
#[derive(Clone)]
pub struct FileLogSource {
    topics: BTreeMap<LogTopic, Arc<Topic>>,
    settings: Settings,
}

impl std::fmt::Debug for FileLogSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileLogSource")
            .field("topics", &self.topics.keys().collect::<Vec<_>>())
            .field("max_raw_events", &self.settings.max_raw_events)
            .finish_non_exhaustive()
    }
}

impl FileLogSource {
    /// Default cap on returned raw events.
    pub const DEFAULT_MAX_RAW_EVENTS: usize = 200;
    /// Default size from which a plain file is binary-searched for the window.
    pub const DEFAULT_SEEK_THRESHOLD: u64 = 1024 * 1024;
    /// How far out of time order lines may be and still be found when the
    /// window is located by seeking (60 s).
    pub const ORDER_SLACK_MS: i64 = 60_000;

    /// A source over `config`'s topics.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] naming the topic and the broken rule;
    /// [`Error::InvalidBounds`] for a `max_raw_events` of 0.
    pub fn new(config: &LogsConfig) -> Result<Self> {
        let mut topics = BTreeMap::new();
        for (&topic, section) in &config.topics {
            let compiled = compile(section).map_err(|rule| Error::InvalidConfig { topic, rule })?;
            topics.insert(topic, Arc::new(compiled));
        }
        let max_raw_events = config
            .max_raw_events
            .unwrap_or(Self::DEFAULT_MAX_RAW_EVENTS);
        invocation_core::bounds::at_least("max_raw_events", max_raw_events, 1)?;
        Ok(Self {
            topics,
            settings: Settings {
                max_raw_events,
                seek_threshold: Self::DEFAULT_SEEK_THRESHOLD,
                slack_ms: Self::ORDER_SLACK_MS,
            },
        })
    }

    /// Sets the size from which plain files are binary-searched (tests use a
    /// small one to exercise the search on small files).
    #[must_use]
    pub const fn with_seek_threshold(mut self, bytes: u64) -> Self {
        self.settings.seek_threshold = bytes;
        self
    }

    /// The cap on returned raw events.
    #[must_use]
    pub const fn max_raw_events(&self) -> usize {
        self.settings.max_raw_events
    }

    /// The search of [`LogSource::query`] on the calling thread, with the
    /// scan's counters.
    ///
    /// # Errors
    /// As [`LogSource::query`].
    pub fn query_blocking(
        &self,
        query: &LogQuery,
    ) -> Result<(LogMatches, ScanStats), LogSourceError> {
        let topic = self
            .topics
            .get(&query.topic)
            .ok_or_else(LogSourceError::data_source_unknown)?;
        run(topic, query, self.settings, &Cancel::default())
    }
}

fn run(
    topic: &Topic,
    query: &LogQuery,
    settings: Settings,
    cancel: &Cancel,
) -> Result<(LogMatches, ScanStats), LogSourceError> {
    let files = paths::resolve(&topic.dir, &topic.patterns).map_err(LogSourceError::permanent)?;
    let (events, match_count, stats) = scan::search(&files, &topic.reader, query, settings, cancel)
        .map_err(|e| match e {
            // Only seen when the caller stopped waiting (the tool timeout).
            scan::ScanError::Cancelled => LogSourceError::timeout(e),
            scan::ScanError::Io(_) => LogSourceError::permanent(e),
        })?;
    Ok((
        LogMatches {
            events,
            match_count,
            stats: Some(stats),
        },
        stats,
    ))
}

/// Cancels the scan when the waiting future is dropped.
struct CancelOnDrop(Cancel);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

#[async_trait]
impl LogSource for FileLogSource {
    fn source_kind(&self) -> SourceKind {
        SourceKind::File
    }

    async fn query(&self, query: &LogQuery) -> Result<LogMatches, LogSourceError> {
        let topic = Arc::clone(
            self.topics
                .get(&query.topic)
                .ok_or_else(LogSourceError::data_source_unknown)?,
        );
        let guard = CancelOnDrop(Cancel::default());
        let cancel = guard.0.clone();
        let query = query.clone();
        let settings = self.settings;
        let scan = tokio::task::spawn_blocking(move || run(&topic, &query, settings, &cancel));
        let outcome = scan.await.map_err(LogSourceError::permanent)?;
        drop(guard);
        outcome.map(|(matches, _)| matches)
    }
}

fn compile(section: &TopicConfig) -> std::result::Result<Topic, &'static str> {
    if section.files.is_empty() {
        return Err("files must name at least one file pattern");
    }
    let patterns = section
        .files
        .iter()
        .map(|p| paths::check_pattern(p))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    Ok(Topic {
        dir: section.dir.clone(),
        patterns,
        reader: compile_reader(section)?,
    })
}

/// How a topic's files are read (everything but its files).
fn compile_reader(section: &TopicConfig) -> std::result::Result<Reader, &'static str> {
    let zone = match &section.time_zone {
        Some(zone) => parse_zone(zone)
            .ok_or("time_zone must be UTC, ±HH:MM or an IANA zone name such as Europe/Berlin")?,
        None => Zone::default(),
    };
    let layout = match &section.timestamp {
        Some(layout) => parse_layout(layout)
            .ok_or("timestamp must be rfc3339, epoch_seconds, epoch_millis or a strftime layout")?,
        None => Layout::Rfc3339,
    };
    let named_keys =
        section.time_key.is_some() || section.level_key.is_some() || section.message_key.is_some();
    let keyed = named_keys || section.timestamp.is_some();
    if section.pattern.is_some() && section.format != LogFormat::Pattern {
        return Err("pattern is only for format = \"pattern\" (a preset has its own)");
    }
    let keys = || {
        Keys::new(
            section.time_key.as_deref(),
            section.level_key.as_deref(),
            section.message_key.as_deref(),
        )
    };
    let time = TimeRule { layout, zone };
    Ok(match section.format {
        LogFormat::JsonLines => Reader::Lines(LineParser {
            format: LineFormat::Json(keys()),
            time,
        }),
        LogFormat::Logfmt => Reader::Lines(LineParser {
            format: LineFormat::Logfmt(keys()),
            time,
        }),
        LogFormat::Syslog if keyed => {
            return Err("syslog takes only time_zone (its layout is fixed)");
        }
        LogFormat::Syslog => Reader::Lines(LineParser {
            format: LineFormat::Syslog,
            time,
        }),
        LogFormat::MysqlSlow if keyed => {
            return Err("mysql_slow takes only time_zone (its layout is fixed)");
        }
        LogFormat::MysqlSlow => Reader::Slow(time),
        LogFormat::Pattern if named_keys => {
            return Err(
                "pattern takes pattern, timestamp and time_zone (no *_key: name groups instead)",
            );
        }
        LogFormat::Pattern => {
            let pattern = section
                .pattern
                .as_deref()
                .ok_or("format = \"pattern\" needs pattern, a regular expression with named groups timestamp and message")?;
            Reader::Events(EventParser::custom(pattern, time)?)
        }
        preset => {
            let name = preset.preset_name().ok_or("unknown format")?;
            if keyed {
                return Err(
                    "a preset format takes only time_zone (its pattern and time layout are fixed)",
                );
            }
            let preset = pattern::preset(name).ok_or("unknown format")?;
            Reader::Events(EventParser::preset(preset, time.zone))
        }
    })
}

/// Every event of `text` as a topic of `section`'s format reads it (its
/// `dir` and `files` are not used): no window, no matching, messages cut for
/// the raw record as a query returns them. A pure function of its input;
/// `reference` stands for the end of a window (the year of RFC 3164 and klog
/// times is inferred from it).
///
/// # Errors
/// [`Error::InvalidConfig`] as [`FileLogSource::new`], naming
/// [`LogTopic::Application`].
pub fn parse_text(section: &TopicConfig, text: &[u8], reference: Timestamp) -> Result<ParsedText> {
    let reader = compile_reader(section).map_err(|rule| Error::InvalidConfig {
        topic: LogTopic::Application,
        rule,
    })?;
    let mut parsed = ParsedText::default();
    let lines = text
        .split(|b| *b == b'\n')
        .map(|line| line.strip_suffix(b"\r").unwrap_or(line));
    match &reader {
        Reader::Lines(parser) => {
            for line in lines.filter(|l| !l.is_empty()) {
                match parser.parse(line, reference) {
                    Some(event) => parsed.events.push(event),
                    None => parsed.unparsed += 1,
                }
            }
        }
        Reader::Slow(rule) => {
            let mut slow = slowlog::SlowLogParser::new(rule.clone());
            let take = |finished, parsed: &mut ParsedText| match finished {
                Some(slowlog::Finished::Event(event)) => parsed.events.push(event),
                Some(slowlog::Finished::Unparsed) => parsed.unparsed += 1,
                None => {}
            };
            for line in lines {
                take(slow.line(line), &mut parsed);
            }
            take(slow.finish(), &mut parsed);
        }
        Reader::Events(parser) => {
            let mut assembler = Assembler::new();
            let mut done = Vec::new();
            for (offset, line) in lines.enumerate() {
                let kind = parser.kind(line);
                match assembler.push(parser, line, kind, offset as u64, true, None) {
                    Pushed::Started(Some(event)) => done.push(event),
                    Pushed::Orphan => parsed.orphan_lines += 1,
                    Pushed::Started(None) | Pushed::Continued | Pushed::Blank => {}
                }
            }
            done.extend(assembler.finish());
            for event in done {
                match parser.head(&event.head, reference) {
                    Some(parsed_head) => {
                        parsed.continuation_lines_dropped += event.tail.dropped_lines;
                        let message = event.tail.message(&parsed_head.message());
                        parsed
                            .events
                            .push(parsed_head.into_event(message, &event.tail));
                    }
                    None => parsed.unparsed += 1,
                }
            }
        }
    }
    parsed.events = parsed.events.into_iter().map(scan::bounded).collect();
    Ok(parsed)
}

/// What [`parse_text`] read.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct ParsedText {
    /// The events, in file order.
    pub events: Vec<crate::RawLogEvent>,
    /// Lines (events, slow log entries) that did not parse.
    pub unparsed: u64,
    /// Continuation lines before the first event.
    pub orphan_lines: u64,
    /// Continuation lines left out of messages by the bounds of one event.
    pub continuation_lines_dropped: u64,
}
