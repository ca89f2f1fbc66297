//! The projector: a raw log response into a bounded [`QueryLogsResult`].

use std::borrow::Cow;
use std::collections::HashMap;

use aci_contracts::{
    LogEvent, LogLevel, LogPattern, LogScope, LogTopic, MAX_ID_BYTES, MAX_LOOKBACK_MINUTES,
    MIN_LOOKBACK_MINUTES, QueryLogsRequest, QueryLogsResult, ReadyEvidenceStatus, SourceKind,
    Timestamp, ToolCallId,
};
use invocation_core::bounds::{InvalidBounds, MIN_TEXT_BYTES, ProjectionBounds, at_least};
use invocation_core::redact::{RedactionPass, Redactor};
use invocation_core::{ProjectionContext, ProjectionError, Projector};

use crate::mask::mask_into;
use crate::{Error, MAX_QUERY_BYTES, RawLogEvent, RawLogResponse, Result};
use invocation_core::json_size::{escaped_len, escaped_prefix};

/// How much of a log response reaches the agent.
///
/// Byte bounds count the JSON-escaped UTF-8 bytes of the text (what it costs
/// in the serialized result), so a message of control characters gets fewer
/// characters than one of plain text, never more bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LogBounds {
    /// Most events on the timeline.
    pub max_events: usize,
    /// Most bytes of one event's message.
    pub max_message_bytes: usize,
    /// Most patterns.
    pub max_patterns: usize,
    /// Most bytes of one pattern.
    pub max_pattern_bytes: usize,
}

/// Extra room in [`LogBounds::worst_case_result_bytes`] for a future
/// [`SourceKind`] with a longer name than `MOCK`.
pub const SOURCE_KIND_SLACK_BYTES: usize = 32;

impl LogBounds {
    /// The defaults: 20 events of at most 400 bytes, 10 patterns of at most
    /// 300 bytes. Their worst case fits the default agent result limit
    /// (16 KiB) with a query echo of [`MAX_QUERY_BYTES`].
    pub const DEFAULT: Self = Self {
        max_events: 20,
        max_message_bytes: 400,
        max_patterns: 10,
        max_pattern_bytes: 300,
    };

    /// Smallest accepted text bound: room for any one character, escaped
    /// ([`invocation_core::bounds::MIN_TEXT_BYTES`]).
    pub const MIN_TEXT_BYTES: usize = MIN_TEXT_BYTES;

    /// The largest serialized `QueryLogsResult` these bounds allow, in bytes:
    /// a 128-byte tool call id, the longest topic and status names, a query
    /// echo of [`MAX_QUERY_BYTES`], 20-digit counts, and full patterns and
    /// events whose text is at its bound (escapes included), plus
    /// [`SOURCE_KIND_SLACK_BYTES`].
    #[must_use]
    pub fn worst_case_result_bytes(&self) -> usize {
        let Ok(tool_call_id) = ToolCallId::new("x".repeat(MAX_ID_BYTES)) else {
            return usize::MAX;
        };
        let longest_topic = LogTopic::ALL
            .into_iter()
            .max_by_key(|t| t.as_str().len())
            .unwrap_or(LogTopic::DatabaseSlowQuery);
        let at = Timestamp::from_unix_millis(0);
        let skeleton = QueryLogsResult {
            evidence_status: ReadyEvidenceStatus::EvidenceFound,
            tool_call_id,
            source_kind: SourceKind::Mock,
            scope: LogScope {
                topic: longest_topic,
                query: String::new(),
                lookback_minutes: MAX_LOOKBACK_MINUTES,
                start_time: at,
                end_time: at,
            },
            match_count: u64::MAX,
            returned_count: u64::MAX,
            patterns: Vec::new(),
            events: Vec::new(),
            // `false` is the longer spelling.
            truncated: false,
        };
        let pattern = LogPattern {
            pattern: String::new(),
            level: LogLevel::Unknown,
            count: u64::MAX,
            first_seen: at,
            last_seen: at,
        };
        let event = LogEvent {
            timestamp: at,
            level: LogLevel::Unknown,
            message: String::new(),
        };
        let (Ok(skeleton), Ok(pattern), Ok(event)) = (
            serde_json::to_string(&skeleton),
            serde_json::to_string(&pattern),
            serde_json::to_string(&event),
        ) else {
            return usize::MAX;
        };
        // Each item: its JSON, its text at the bound, and a separating comma.
        let per_pattern = pattern.len() + self.max_pattern_bytes + 1;
        let per_event = event.len() + self.max_message_bytes + 1;
        skeleton.len()
            + MAX_QUERY_BYTES
            + SOURCE_KIND_SLACK_BYTES
            + self.max_patterns.saturating_mul(per_pattern)
            + self.max_events.saturating_mul(per_event)
    }
}

impl Default for LogBounds {
    fn default() -> Self {
        Self::DEFAULT
    }
}

impl ProjectionBounds for LogBounds {
    /// `max_events` and `max_patterns` at least 1, `max_message_bytes` and
    /// `max_pattern_bytes` at least [`MIN_TEXT_BYTES`] (6). Bounds below are
    /// refused, never raised silently.
    fn validate(&self) -> std::result::Result<(), InvalidBounds> {
        at_least("max_events", self.max_events, 1)?;
        at_least("max_patterns", self.max_patterns, 1)?;
        at_least("max_message_bytes", self.max_message_bytes, MIN_TEXT_BYTES)?;
        at_least("max_pattern_bytes", self.max_pattern_bytes, MIN_TEXT_BYTES)
    }
}

/// Projects a [`RawLogResponse`] into a bounded [`QueryLogsResult`].
///
/// Pure and deterministic: the same raw response and bounds always give the
/// same result, whatever the order of equal timestamps or of hash maps.
#[derive(Debug, Clone, Default)]
pub struct LogProjector {
    bounds: LogBounds,
}

/// One message shape while aggregating.
struct Shape {
    text: Box<str>,
    count: u64,
    first: Timestamp,
    last: Timestamp,
    level: LogLevel,
    /// Index of the latest event of this shape (the later one on equal times).
    latest: usize,
    /// Whether the shape's text was cut to `max_pattern_bytes`.
    cut: bool,
}

/// Ranks levels for "the highest level": an unrecognized level ranks lowest,
/// so it never hides a known severity.
const fn severity(level: LogLevel) -> u8 {
    match level {
        LogLevel::Unknown => 0,
        LogLevel::Trace => 1,
        LogLevel::Debug => 2,
        LogLevel::Info => 3,
        LogLevel::Warn => 4,
        LogLevel::Error => 5,
        LogLevel::Fatal => 6,
    }
}

/// Remembers the level of the last few source spellings seen
/// ([`LogLevel::from_source`] allocates).
#[derive(Default)]
struct LevelCache<'a> {
    seen: Vec<(&'a str, LogLevel)>,
}

impl<'a> LevelCache<'a> {
    const CAPACITY: usize = 16;

    fn level(&mut self, spelling: &'a str) -> LogLevel {
        if let Some((_, level)) = self.seen.iter().find(|(s, _)| *s == spelling) {
            return *level;
        }
        let level = LogLevel::from_source(spelling);
        if self.seen.len() < Self::CAPACITY {
            self.seen.push((spelling, level));
        }
        level
    }
}

impl LogProjector {
    /// A projector with `bounds`.
    ///
    /// # Errors
    /// [`InvalidBounds`] when a bound is below its minimum (see
    /// [`LogBounds`]' [`ProjectionBounds::validate`]): refused, not clamped.
    pub fn new(bounds: LogBounds) -> std::result::Result<Self, InvalidBounds> {
        Ok(Self {
            bounds: bounds.validated()?,
        })
    }

    /// The bounds.
    #[must_use]
    pub const fn bounds(&self) -> LogBounds {
        self.bounds
    }

    /// Projects `raw` for the call `tool_call_id`, redacting with the
    /// built-in rules ([`Redactor::builtin`]); the counts are dropped. The
    /// boundary calls [`project_redacting`](Self::project_redacting) with its
    /// own pass.
    ///
    /// # Errors
    /// As [`project_redacting`](Self::project_redacting).
    pub fn project_raw(
        &self,
        tool_call_id: &ToolCallId,
        raw: &RawLogResponse,
    ) -> Result<QueryLogsResult> {
        let redactor = Redactor::builtin();
        self.project_redacting(tool_call_id, raw, &RedactionPass::new(&redactor))
    }

    /// Projects `raw` for the call `tool_call_id`. Every event message goes
    /// through `redaction` first: the events shown, their byte bounds and
    /// `truncated` are those of the redacted messages, and the patterns are
    /// masked from the redacted messages, so a pattern never shows what an
    /// event had redacted.
    ///
    /// # Errors
    /// - [`Error::QueryTooLong`] when the query would not fit its echo bound.
    /// - [`Error::InconsistentRaw`] when the lookback is outside 1..=1440, the
    ///   window does not span exactly the lookback, or the source reported
    ///   matches but returned no event to show.
    pub fn project_redacting(
        &self,
        tool_call_id: &ToolCallId,
        raw: &RawLogResponse,
        redaction: &RedactionPass<'_>,
    ) -> Result<QueryLogsResult> {
        if escaped_len(&raw.query) > MAX_QUERY_BYTES {
            return Err(Error::QueryTooLong);
        }
        if !(MIN_LOOKBACK_MINUTES..=MAX_LOOKBACK_MINUTES).contains(&raw.lookback_minutes) {
            return Err(Error::InconsistentRaw("lookback_minutes is out of range"));
        }
        let window = raw.end_time.unix_millis() - raw.start_time.unix_millis();
        if window != i64::from(raw.lookback_minutes) * 60_000 {
            return Err(Error::InconsistentRaw(
                "window differs from lookback_minutes",
            ));
        }
        // A source that undercounts cannot make the result claim fewer
        // matches than it shows.
        let match_count = raw.match_count.max(raw.events.len() as u64);
        let mut result = QueryLogsResult {
            evidence_status: ReadyEvidenceStatus::NoEvidence,
            tool_call_id: tool_call_id.clone(),
            source_kind: raw.source_kind,
            scope: LogScope {
                topic: raw.topic,
                query: raw.query.clone(),
                lookback_minutes: raw.lookback_minutes,
                start_time: raw.start_time,
                end_time: raw.end_time,
            },
            match_count,
            returned_count: 0,
            patterns: Vec::new(),
            events: Vec::new(),
            truncated: false,
        };
        if raw.events.is_empty() {
            if match_count > 0 {
                return Err(Error::InconsistentRaw("matches reported without events"));
            }
            return Ok(result);
        }

        let mut levels = LevelCache::default();
        let (shapes, messages) = self.aggregate(&raw.events, redaction, &mut levels);
        let mut order: Vec<usize> = (0..shapes.len()).collect();
        order.sort_unstable_by(|&a, &b| {
            let (x, y) = (&shapes[a], &shapes[b]);
            y.count
                .cmp(&x.count)
                .then_with(|| severity(y.level).cmp(&severity(x.level)))
                .then_with(|| y.last.cmp(&x.last))
                .then_with(|| x.text.cmp(&y.text))
        });
        let patterns_dropped = order.len() > self.bounds.max_patterns;
        order.truncate(self.bounds.max_patterns);
        let patterns_cut = order.iter().any(|&s| shapes[s].cut);

        let chosen = self.timeline(&raw.events, &shapes, &order);
        let mut messages_cut = false;
        result.events = chosen
            .into_iter()
            .map(|i| {
                let event = &raw.events[i];
                let (message, cut) = escaped_prefix(&messages[i], self.bounds.max_message_bytes);
                messages_cut |= cut;
                LogEvent {
                    timestamp: event.timestamp,
                    level: levels.level(&event.level),
                    message: message.to_owned(),
                }
            })
            .collect();
        result.patterns = order
            .into_iter()
            .map(|s| {
                let shape = &shapes[s];
                LogPattern {
                    pattern: shape.text.to_string(),
                    level: shape.level,
                    count: shape.count,
                    first_seen: shape.first,
                    last_seen: shape.last,
                }
            })
            .collect();
        result.evidence_status = ReadyEvidenceStatus::EvidenceFound;
        result.returned_count = result.events.len() as u64;
        result.truncated = result.match_count != result.returned_count
            || patterns_dropped
            || patterns_cut
            || messages_cut;
        Ok(result)
    }

    /// Groups events by the shape of their messages, each redacted through
    /// `redaction` first; also gives the redacted messages, by event. Each
    /// message is redacted just before it is masked, while its bytes are in
    /// the cache: a pass of its own over every message would read them from
    /// memory twice when the events do not fit in the cache.
    fn aggregate<'a>(
        &self,
        events: &'a [RawLogEvent],
        redaction: &RedactionPass<'_>,
        levels: &mut LevelCache<'a>,
    ) -> (Vec<Shape>, Vec<Cow<'a, str>>) {
        let budget = self.bounds.max_pattern_bytes;
        let mut index: HashMap<Box<str>, usize> = HashMap::new();
        let mut shapes: Vec<Shape> = Vec::new();
        let mut messages: Vec<Cow<'a, str>> = Vec::with_capacity(events.len());
        let mut buf = String::new();
        for (i, event) in events.iter().enumerate() {
            buf.clear();
            let message = redaction.redact(&event.message);
            mask_into(&message, &mut buf, budget);
            messages.push(message);
            let (kept, cut) = escaped_prefix(&buf, budget);
            let kept = kept.trim_end_matches(' ').len();
            buf.truncate(kept);
            let level = levels.level(&event.level);
            let at = event.timestamp;
            if let Some(&k) = index.get(buf.as_str()) {
                let shape = &mut shapes[k];
                shape.count += 1;
                if at < shape.first {
                    shape.first = at;
                }
                if at >= shape.last {
                    shape.last = at;
                    shape.latest = i;
                }
                if severity(level) > severity(shape.level) {
                    shape.level = level;
                }
            } else {
                index.insert(Box::from(buf.as_str()), shapes.len());
                shapes.push(Shape {
                    text: Box::from(""),
                    count: 1,
                    first: at,
                    last: at,
                    level,
                    latest: i,
                    cut,
                });
            }
        }
        for (text, k) in index {
            shapes[k].text = text;
        }
        (shapes, messages)
    }

    /// Picks the timeline: the latest event of each reported pattern (in
    /// pattern order), then the most recent other events, up to
    /// `max_events`; returned oldest first (source order on equal times).
    fn timeline(&self, events: &[RawLogEvent], shapes: &[Shape], order: &[usize]) -> Vec<usize> {
        let max = self.bounds.max_events;
        let mut chosen: Vec<usize> = order.iter().take(max).map(|&s| shapes[s].latest).collect();
        if chosen.len() < max {
            let need = max - chosen.len();
            let mut taken = vec![false; events.len()];
            for &i in &chosen {
                taken[i] = true;
            }
            let mut rest: Vec<usize> = (0..events.len()).filter(|&i| !taken[i]).collect();
            let most_recent_first = |a: &usize, b: &usize| {
                events[*b]
                    .timestamp
                    .cmp(&events[*a].timestamp)
                    .then_with(|| b.cmp(a))
            };
            if rest.len() > need {
                rest.select_nth_unstable_by(need - 1, most_recent_first);
                rest.truncate(need);
            }
            chosen.extend(rest);
        }
        chosen.sort_unstable_by_key(|&i| (events[i].timestamp, i));
        chosen
    }
}

impl Projector for LogProjector {
    type Request = QueryLogsRequest;
    type Raw = RawLogResponse;
    type Output = QueryLogsResult;

    fn project(
        &self,
        context: &ProjectionContext<'_, QueryLogsRequest>,
        raw: &RawLogResponse,
    ) -> Result<QueryLogsResult, ProjectionError> {
        self.project_redacting(context.tool_call_id, raw, context.redaction())
            .map_err(ProjectionError::new)
    }
}
