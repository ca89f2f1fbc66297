//! The `query_logs` tool: a log source port, the executor that resolves the
//! logical window, the pattern-aggregating projector, the scope normalizer and
//! the deterministic [`MockLogSource`].
//!
//! ```text
//! QueryLogsRequest ──LogExecutor──▶ LogSource::query(topic, query, start..=end)
//!        (topic, query, lookback)          │ matched events + total count
//!                                          ▼
//!                                   RawLogResponse ──LogProjector──▶ QueryLogsResult
//!                                   (recorded raw)    (patterns, timeline, scope)
//! ```
//!
//! - The request is logical only: topic, words, lookback minutes (1..=1440,
//!   default 60). The window `[now - lookback, now]` is resolved from the
//!   boundary clock ([`ExecutionContext::now`](invocation_core::ExecutionContext)).
//!   How many raw events a source returns is the source's setting.
//! - [`LogProjector`] is pure: masked message shapes with counts, first/last
//!   seen and the highest level; a bounded, time-ordered timeline of events with
//!   byte-bounded messages; `match_count`, `returned_count` and `truncated`.
//!   With the default [`LogBounds`] the largest possible result fits the
//!   default agent result limit (16 KiB).
//! - [`LogSource`] is the port; its error [`LogSourceError`] (invocation-core's
//!   one [`PortError`](invocation_core::PortError)) carries the
//!   agent-safe category (`EXECUTION_FAILED`, `EXECUTION_TIMEOUT`,
//!   `DATA_SOURCE_UNKNOWN`, `QUERY_REJECTED`) and whether it is retryable,
//!   as data, and converts into the boundary's
//!   [`ExecutionError`](invocation_core::ExecutionError) by the one blanket
//!   `From` of [`SourceError`](invocation_core::SourceError).
//! - [`MockLogSource`] (the embedded default) and [`FileLogSource`] (log
//!   files per topic, `[logs]`) implement it.
//! - [`query_logs_scope`] decides what counts as the same scope.
//!
//! Use [`query_logs_tool`] (default bounds) or [`query_logs_tool_with`]
//! (other [`LogBounds`], refused when invalid) to register the tool with a
//! [`ToolBoundary`](invocation_core::ToolBoundary); both return the alias
//! [`QueryLogsTool<S>`].
//!
//! # Reference
//!
//! The rest of this page is the tool's reference (also the crate's
//! README.md).
#![doc = include_str!("../README.md")]

mod error;
mod executor;
pub mod file;
pub mod mask;
mod mock;
mod projector;
mod scope;
mod source;

use aci_contracts::{QueryLogsRequest, ToolName};
use invocation_core::ToolSpec;
use invocation_core::bounds::InvalidBounds;

pub use error::{Error, Result};
pub use executor::{LogExecutor, RawLogResponse, SearchWindow, resolve_window};
pub use file::{
    FileLogSource, LogFormat, LogsConfig, ParsedText, ScanStats, TopicConfig, parse_text,
};
pub use mock::MockLogSource;
pub use projector::{LogBounds, LogProjector, SOURCE_KIND_SLACK_BYTES};
pub use scope::{lowercase_collapsed_query, query_logs_scope};
pub use source::{LogMatches, LogQuery, LogSource, LogSourceError, RawLogEvent};

/// Longest query, in JSON-escaped UTF-8 bytes, that the projector budgets for
/// the echo in `scope.query`: the contract's bound
/// ([`aci_contracts::MAX_QUERY_JSON_BYTES`]; a query is at most 256 characters
/// with no control characters but tab, line feed and carriage return).
///
/// The result echoes the query verbatim, so the projector refuses (as an
/// error, never by cutting it) a raw response whose query is longer.
pub const MAX_QUERY_BYTES: usize = aci_contracts::MAX_QUERY_JSON_BYTES;

/// The `query_logs` tool's request check: [`QueryLogsRequest::validate`]
/// (non-blank query of at most 256 characters, lookback in 1..=1440), and,
/// implied by it, a query of at most [`MAX_QUERY_BYTES`] as JSON.
#[must_use]
pub fn request_is_valid(request: &QueryLogsRequest) -> bool {
    request.validate().is_ok()
        && invocation_core::json_size::escaped_len(&request.query) <= MAX_QUERY_BYTES
}

/// The `query_logs` tool over the source `S`, as the boundary registers it.
pub type QueryLogsTool<S> = ToolSpec<LogExecutor<S>, LogProjector>;

/// The frozen `query_logs` tool over `source`, with the default
/// [`LogBounds`]: the frozen name and description, read-only,
/// [`request_is_valid`] as its validation and [`query_logs_scope`] as its
/// scope normalizer.
pub fn query_logs_tool<S: LogSource>(source: S) -> QueryLogsTool<S> {
    tool(source, LogProjector::default())
}

/// The frozen `query_logs` tool over `source` with `bounds`.
///
/// # Errors
/// [`InvalidBounds`] when a bound is below its minimum: refused, never
/// clamped.
pub fn query_logs_tool_with<S: LogSource>(
    source: S,
    bounds: LogBounds,
) -> Result<QueryLogsTool<S>, InvalidBounds> {
    Ok(tool(source, LogProjector::new(bounds)?))
}

fn tool<S: LogSource>(source: S, projector: LogProjector) -> QueryLogsTool<S> {
    ToolSpec::frozen(ToolName::QueryLogs, LogExecutor::new(source), projector)
        .validate_with(request_is_valid)
        .scope_with(query_logs_scope)
}
