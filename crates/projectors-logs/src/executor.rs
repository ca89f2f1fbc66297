//! The executor adapter: resolves the logical window and asks the [`LogSource`].

use aci_contracts::{
    LogTopic, MAX_LOOKBACK_MINUTES, MIN_LOOKBACK_MINUTES, QueryLogsRequest, SourceKind, Timestamp,
};
use async_trait::async_trait;
use invocation_core::{
    ExecutionContext, ExecutionError, ExecutionErrorKind, PortCall, PortExecutor,
};
use serde::{Deserialize, Serialize};

use crate::{LogQuery, LogSource, RawLogEvent, ScanStats};

/// The raw response of one `query_logs` call, recorded for the harness.
///
/// It carries everything the projector needs to build the complete scope
/// without a clock: the topic, the query as sent, the lookback and the
/// resolved window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RawLogResponse {
    /// The source that answered.
    pub source_kind: SourceKind,
    /// The logical topic searched.
    pub topic: LogTopic,
    /// The agent's words, exactly as sent.
    pub query: String,
    /// The effective lookback in minutes.
    pub lookback_minutes: u32,
    /// Start of the window, inclusive: `end_time - lookback_minutes`.
    pub start_time: Timestamp,
    /// End of the window, inclusive: the boundary clock when execution started.
    pub end_time: Timestamp,
    /// Every match in the window, as the source counted it.
    pub match_count: u64,
    /// The matched events the source returned (at most its cap).
    pub events: Vec<RawLogEvent>,
    /// What the source's search did, when it counts (files, bytes, lines
    /// that did not parse); for the harness only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stats: Option<ScanStats>,
}

/// The `query_logs` executor: resolves the window from the boundary clock
/// and asks a [`LogSource`] ([`SearchWindow`]); the source's error converts
/// with `?` (category and retryability kept); `source()` gives the port back.
pub type LogExecutor<S> = PortExecutor<S, SearchWindow>;

/// How `query_logs` asks a [`LogSource`]: the topic and words over the
/// window `[now - lookback, now]` of the boundary clock.
#[derive(Debug)]
pub enum SearchWindow {}

/// The window `[now - lookback, now]` of a request.
#[must_use]
pub fn resolve_window(now: Timestamp, lookback_minutes: u32) -> (Timestamp, Timestamp) {
    let start = now
        .unix_millis()
        .saturating_sub(i64::from(lookback_minutes) * 60_000);
    (Timestamp::from_unix_millis(start), now)
}

#[async_trait]
impl<S: LogSource> PortCall<S> for SearchWindow {
    type Request = QueryLogsRequest;
    type Raw = RawLogResponse;

    async fn call(
        source: &S,
        request: &QueryLogsRequest,
        context: &ExecutionContext,
    ) -> Result<RawLogResponse, ExecutionError> {
        let lookback_minutes = request.effective_lookback_minutes();
        // The tool's validation already refuses these; kept so the executor is
        // safe on its own.
        if !(MIN_LOOKBACK_MINUTES..=MAX_LOOKBACK_MINUTES).contains(&lookback_minutes) {
            return Err(ExecutionError::new(ExecutionErrorKind::InvalidInput));
        }
        let (start_time, end_time) = resolve_window(context.now, lookback_minutes);
        let query = LogQuery {
            topic: request.topic,
            query: request.query.clone(),
            start: start_time,
            end: end_time,
        };
        let matches = source.query(&query).await?;
        Ok(RawLogResponse {
            source_kind: source.source_kind(),
            topic: query.topic,
            query: query.query,
            lookback_minutes,
            start_time,
            end_time,
            match_count: matches.match_count,
            events: matches.events,
            stats: matches.stats,
        })
    }
}
