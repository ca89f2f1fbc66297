use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{EvidenceResult, ValidationError, check_status_and_count};
use crate::{LogLevel, LogTopic, ReadyEvidenceStatus, SourceKind, Timestamp, ToolCallId};

/// The complete scope a log query ran over.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LogScope {
    /// The logical topic searched.
    pub topic: LogTopic,
    /// The words matched, as the agent sent them.
    pub query: String,
    /// Length of the window in minutes.
    pub lookback_minutes: u32,
    /// Start of the window (inclusive), UTC.
    pub start_time: Timestamp,
    /// End of the window (inclusive): when the query ran, UTC.
    pub end_time: Timestamp,
}

/// Matching messages that share one shape once variable parts are masked.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LogPattern {
    /// The message shape; numbers, ids, addresses and durations are masked.
    pub pattern: String,
    /// The highest level seen among its messages.
    pub level: LogLevel,
    /// How many matching messages have this shape.
    pub count: u64,
    /// When the first of them was logged.
    pub first_seen: Timestamp,
    /// When the last of them was logged.
    pub last_seen: Timestamp,
}

/// One matching log event on the timeline.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LogEvent {
    /// When it was logged, UTC.
    pub timestamp: Timestamp,
    /// Its severity.
    pub level: LogLevel,
    /// The message, possibly shortened (then `truncated` is true).
    pub message: String,
}

/// The bounded result of `query_logs`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "query_logs result")]
pub struct QueryLogsResult {
    /// `EVIDENCE_FOUND` or `NO_EVIDENCE`.
    pub evidence_status: ReadyEvidenceStatus,
    /// The framework's id of this call; cite the evidence by it.
    pub tool_call_id: ToolCallId,
    /// Where the events came from.
    pub source_kind: SourceKind,
    /// The complete scope of the query.
    pub scope: LogScope,
    /// How many events matched in the scope.
    pub match_count: u64,
    /// Number of events in `events`.
    pub returned_count: u64,
    /// Message shapes of the matches, most frequent first.
    pub patterns: Vec<LogPattern>,
    /// Matching events, oldest first.
    pub events: Vec<LogEvent>,
    /// Whether events, patterns or messages were left out or shortened.
    pub truncated: bool,
}

/// What the model sees of a `query_logs` result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "query_logs observation")]
pub struct QueryLogsObservation {
    /// `EVIDENCE_FOUND` or `NO_EVIDENCE`.
    pub evidence_status: ReadyEvidenceStatus,
    /// The framework's id of this call; cite the evidence by it.
    pub tool_call_id: ToolCallId,
    /// Where the events came from.
    pub source_kind: SourceKind,
    /// The complete scope of the query.
    pub scope: LogScope,
    /// How many events matched in the scope.
    pub match_count: u64,
    /// Message shapes of the matches, most frequent first.
    pub patterns: Vec<LogPattern>,
    /// Matching events, oldest first.
    pub events: Vec<LogEvent>,
    /// Whether events, patterns or messages were left out or shortened.
    pub truncated: bool,
}

impl EvidenceResult for QueryLogsResult {
    type Observation = QueryLogsObservation;

    evidence_identity!();

    fn validate(&self) -> Result<(), ValidationError> {
        let has = !self.events.is_empty() || !self.patterns.is_empty();
        if self.evidence_status == ReadyEvidenceStatus::NoEvidence && self.match_count > 0 {
            return Err(ValidationError::NoEvidenceWithEvidence);
        }
        check_status_and_count(
            self.evidence_status,
            has,
            self.returned_count,
            self.events.len(),
        )?;
        let aggregated: u64 = self.patterns.iter().map(|p| p.count).sum();
        if self.match_count < self.returned_count || self.match_count < aggregated {
            return Err(ValidationError::MatchCountTooSmall);
        }
        if self.match_count != self.returned_count && !self.truncated {
            return Err(ValidationError::SilentTruncation);
        }
        let window = self.scope.end_time.unix_millis() - self.scope.start_time.unix_millis();
        if window != i64::from(self.scope.lookback_minutes) * 60_000 {
            return Err(ValidationError::ScopeWindowMismatch);
        }
        Ok(())
    }

    fn observation(&self) -> QueryLogsObservation {
        QueryLogsObservation {
            evidence_status: self.evidence_status,
            tool_call_id: self.tool_call_id.clone(),
            source_kind: self.source_kind,
            scope: self.scope.clone(),
            match_count: self.match_count,
            patterns: self.patterns.clone(),
            events: self.events.clone(),
            truncated: self.truncated,
        }
    }
}

impl super::Counted for QueryLogsResult {
    fn match_count(&self) -> Option<u64> {
        Some(self.match_count)
    }
}
