//! The executor adapter: resolves the logical window and asks the [`LogSource`].

use aci_contracts::{
    LogTopic, MAX_LOOKBACK_MINUTES, MIN_LOOKBACK_MINUTES, QueryLogsRequest, SourceKind, Timestamp,
};
use async_trait::async_trait;
use invocation_core::{ExecutionContext, ExecutionError, ExecutionErrorKind, Executor};
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
/// and asks a [`LogSource`]; the source's error converts with `?` (category
/// and retryability kept).
#[derive(Debug, Clone)]
pub struct LogExecutor<S> {
    source: S,
}

impl<S: LogSource> LogExecutor<S> {
    /// An executor over `source`.
    pub const fn new(source: S) -> Self {
        Self { source }
    }

    /// The source.
    #[must_use]
    pub const fn source(&self) -> &S {
        &self.source
    }
}

/// The window `[now - lookback, now]` of a request.
#[must_use]
pub fn resolve_window(now: Timestamp, lookback_minutes: u32) -> (Timestamp, Timestamp) {
    let start = now
        .unix_millis()
        .saturating_sub(i64::from(lookback_minutes) * 60_000);
    (Timestamp::from_unix_millis(start), now)
}

#[async_trait]
impl<S: LogSource> Executor for LogExecutor<S> {
    type Request = QueryLogsRequest;
    type Raw = RawLogResponse;

    async fn execute(
        &self,
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
        let matches = self.source.query(&query).await?;
        Ok(RawLogResponse {
            source_kind: self.source.source_kind(),
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
