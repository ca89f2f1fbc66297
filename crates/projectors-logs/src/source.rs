//! The log source port (what an adapter, the mock or a real log service,
//! implements) and its error.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::Arc;

use aci_contracts::{LogTopic, SourceKind, Timestamp};
use async_trait::async_trait;
use invocation_core::PortError;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The [`LogSource`] port's error: invocation-core's one port error
/// ([`PortError`]), with the agent-safe category and the retryability as
/// data.
pub type LogSourceError = PortError;

/// One logical log search: a topic, the agent's words and a resolved window.
///
/// There is no result limit here: how many raw events a source returns is the
/// source's own setting, never agent input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogQuery {
    /// The logical topic.
    pub topic: LogTopic,
    /// The agent's words, exactly as sent.
    pub query: String,
    /// Start of the window, inclusive.
    pub start: Timestamp,
    /// End of the window, inclusive (the boundary clock's "now").
    pub end: Timestamp,
}

/// One matched event as the source has it.
///
/// `level` is the source's own spelling (`WARNING`, `err`, `Note`, …);
/// anything else the source knows (host, pod, trace ids, thread, …) is kept in
/// `fields` for the record and never reaches the agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RawLogEvent {
    /// When it was logged.
    pub timestamp: Timestamp,
    /// The severity as the source spells it; empty when it has none.
    #[serde(default)]
    pub level: String,
    /// The message text.
    #[serde(default)]
    pub message: String,
    /// Every other field of the event.
    #[serde(flatten)]
    pub fields: BTreeMap<String, Value>,
}

/// What a source found for one [`LogQuery`].
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LogMatches {
    /// Matched events, at most the source's cap of them.
    pub events: Vec<RawLogEvent>,
    /// How many events matched in the window in total, returned or not.
    pub match_count: u64,
    /// What the search did (files, bytes, unparsed lines), for the record;
    /// `None` for sources that do not count.
    pub stats: Option<crate::ScanStats>,
}

/// A searchable log store.
///
/// Implementations are `Send + Sync + Debug + 'static` and usable as
/// `Arc<dyn LogSource>`. Their Debug output carries no URL or credential.
#[async_trait]
pub trait LogSource: Send + Sync + Debug + 'static {
    /// Where this source's events come from (reported in every result).
    fn source_kind(&self) -> SourceKind;

    /// Finds the events of `query.topic` logged in `query.start..=query.end`
    /// whose message matches `query.query`.
    ///
    /// # Behavior
    /// - Matching ignores letter case and the amount of whitespace between
    ///   words (the tool's scope normalizer relies on this); what else makes a
    ///   match (words, phrases) is the source's documented syntax.
    /// - Only events with `start <= timestamp <= end` are considered.
    /// - `events` holds at most the source's configured cap; which ones it
    ///   keeps when there are more is the source's documented choice.
    /// - `match_count` counts every match in the window, so it is at least
    ///   `events.len()`, and it is 0 exactly when nothing matched.
    /// - The call is read-only and has no side effects on the source.
    ///
    /// # Errors
    /// [`LogSourceError`] with the agent-safe category and its retryability:
    /// - [`LogSourceError::data_source_unknown`] (`DATA_SOURCE_UNKNOWN`)
    ///   when the source has nothing for the topic (nothing was searched);
    /// - [`LogSourceError::query_rejected`] (`QUERY_REJECTED`) when the
    ///   source refuses the query text;
    /// - [`LogSourceError::timeout`] (`EXECUTION_TIMEOUT`) when the source
    ///   gave up in time;
    /// - [`LogSourceError::transient`] / [`LogSourceError::permanent`]
    ///   (`EXECUTION_FAILED`) when the source cannot be reached or fails.
    ///
    /// The driver error goes in its source, never in anything agent-facing.
    async fn query(&self, query: &LogQuery) -> Result<LogMatches, LogSourceError>;
}

#[async_trait]
impl<S: LogSource + ?Sized> LogSource for Arc<S> {
    fn source_kind(&self) -> SourceKind {
        (**self).source_kind()
    }

    async fn query(&self, query: &LogQuery) -> Result<LogMatches, LogSourceError> {
        (**self).query(query).await
    }
}
