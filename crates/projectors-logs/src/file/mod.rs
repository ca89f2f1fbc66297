//! [`FileLogSource`]: the topics' log files, configured by the deployment.
//!
//! Each topic maps to file-name globs in one directory and a format (JSON
//! lines, logfmt, syslog, the MariaDB/MySQL slow query log). The agent names
//! only the topic: directories, globs and formats never reach it.
//!
//! # Behavior
//! - Matching is the mock's: every word of the query in the message,
//!   ignoring case; only the message is searched.
//! - A topic without files is [`LogSourceError::topic_not_configured`]
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
//!   skipped, never fatal.
//!
//! How the window is found is in `docs/projectors.md`: plain files of at
//! least the seek threshold are binary-searched by time (and read whole if a
//! line shows they are not in time order); smaller and compressed files are
//! read from the start; files whose time range is outside the window are
//! skipped.

mod config;
mod formats;
pub(crate) mod matcher;
mod paths;
mod scan;
mod slowlog;
mod time;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use aci_contracts::{LogTopic, SourceKind};
use async_trait::async_trait;
use globset::GlobMatcher;

pub use config::{LogFormat, LogsConfig, TopicConfig};
pub use scan::ScanStats;

use crate::{Error, LogMatches, LogQuery, LogSource, LogSourceError, Result};
use formats::{Keys, LineFormat, LineParser};
use scan::{Cancel, Reader, Settings};
use time::{Layout, TimeRule, Zone, parse_layout, parse_zone};

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
            .ok_or_else(LogSourceError::topic_not_configured)?;
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
                .ok_or_else(LogSourceError::topic_not_configured)?,
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
    let keyed = section.time_key.is_some()
        || section.level_key.is_some()
        || section.message_key.is_some()
        || section.timestamp.is_some();
    let keys = || {
        Keys::new(
            section.time_key.as_deref(),
            section.level_key.as_deref(),
            section.message_key.as_deref(),
        )
    };
    let time = TimeRule { layout, zone };
    let reader = match section.format {
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
    };
    Ok(Topic {
        dir: section.dir.clone(),
        patterns,
        reader,
    })
}
