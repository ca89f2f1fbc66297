//! The closed enumerations of the contracts, spelled exactly as on the wire.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Lifecycle of one canonical invocation record.
///
/// The only transitions are `PROJECTING -> READY` and `PROJECTING -> ERROR`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum InvocationStatus {
    /// The record exists and the tool is running or being projected.
    Projecting,
    /// The bounded result is recorded and may be cited.
    Ready,
    /// The call failed; the record holds a safe error code and is never citable.
    Error,
}

impl InvocationStatus {
    /// The wire spelling.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Projecting => "PROJECTING",
            Self::Ready => "READY",
            Self::Error => "ERROR",
        }
    }

    /// Parses the wire spelling (exact, case-sensitive).
    #[must_use]
    pub fn parse(text: &str) -> Option<Self> {
        [Self::Projecting, Self::Ready, Self::Error]
            .into_iter()
            .find(|s| s.as_str() == text)
    }
}

/// What an evidence tool's result means for the agent.
///
/// Independent of the lifecycle: a READY record is `EVIDENCE_FOUND` or
/// `NO_EVIDENCE`; an ERROR record is `ERROR`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum EvidenceStatus {
    /// The query found evidence within its recorded scope.
    EvidenceFound,
    /// The query ran and found nothing within its recorded scope: a scoped
    /// negative observation, never a tool failure or a statement about health.
    NoEvidence,
    /// The call failed; nothing was observed.
    Error,
}

impl EvidenceStatus {
    /// The wire spelling.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::EvidenceFound => "EVIDENCE_FOUND",
            Self::NoEvidence => "NO_EVIDENCE",
            Self::Error => "ERROR",
        }
    }

    /// Parses the wire spelling (exact, case-sensitive).
    #[must_use]
    pub fn parse(text: &str) -> Option<Self> {
        [Self::EvidenceFound, Self::NoEvidence, Self::Error]
            .into_iter()
            .find(|s| s.as_str() == text)
    }
}

/// The evidence status of a READY result: `EVIDENCE_FOUND` or `NO_EVIDENCE`,
/// never `ERROR`.
///
/// The result types of the three tools carry this type, so a READY result
/// that says `ERROR` cannot be built, deserialized, or accepted by a client
/// generated from the frozen schemas (whose enum has exactly these two
/// values). Only the error result ([`ErrorResult`](crate::ErrorResult)) says
/// `ERROR`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ReadyEvidenceStatus {
    /// The query found evidence within its recorded scope.
    EvidenceFound,
    /// The query ran and found nothing within its recorded scope: a scoped
    /// negative observation, never a tool failure or a statement about health.
    NoEvidence,
}

impl ReadyEvidenceStatus {
    /// The wire spelling.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        EvidenceStatus::from_ready(self).as_str()
    }

    /// `EVIDENCE_FOUND` when `found`, else `NO_EVIDENCE`.
    #[must_use]
    pub const fn found_if(found: bool) -> Self {
        if found {
            Self::EvidenceFound
        } else {
            Self::NoEvidence
        }
    }
}

impl EvidenceStatus {
    /// The three-valued status of a READY result's status.
    #[must_use]
    pub const fn from_ready(status: ReadyEvidenceStatus) -> Self {
        match status {
            ReadyEvidenceStatus::EvidenceFound => Self::EvidenceFound,
            ReadyEvidenceStatus::NoEvidence => Self::NoEvidence,
        }
    }

    /// The READY status, or `None` for `ERROR`.
    #[must_use]
    pub const fn ready(self) -> Option<ReadyEvidenceStatus> {
        match self {
            Self::EvidenceFound => Some(ReadyEvidenceStatus::EvidenceFound),
            Self::NoEvidence => Some(ReadyEvidenceStatus::NoEvidence),
            Self::Error => None,
        }
    }
}

impl From<ReadyEvidenceStatus> for EvidenceStatus {
    fn from(status: ReadyEvidenceStatus) -> Self {
        Self::from_ready(status)
    }
}

impl PartialEq<EvidenceStatus> for ReadyEvidenceStatus {
    fn eq(&self, other: &EvidenceStatus) -> bool {
        EvidenceStatus::from_ready(*self) == *other
    }
}

impl PartialEq<ReadyEvidenceStatus> for EvidenceStatus {
    fn eq(&self, other: &ReadyEvidenceStatus) -> bool {
        *self == Self::from_ready(*other)
    }
}

/// The logical log topics an agent may query.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum LogTopic {
    /// Application logs of the services.
    Application,
    /// The database's slow query log.
    DatabaseSlowQuery,
    /// Host and platform events: out-of-memory kills, disk pressure, restarts.
    SystemEvents,
}

impl LogTopic {
    /// Every topic, in wire order.
    pub const ALL: [Self; 3] = [
        Self::Application,
        Self::DatabaseSlowQuery,
        Self::SystemEvents,
    ];

    /// The wire spelling.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Application => "APPLICATION",
            Self::DatabaseSlowQuery => "DATABASE_SLOW_QUERY",
            Self::SystemEvents => "SYSTEM_EVENTS",
        }
    }
}

/// Where log evidence came from. More kinds will be added; match with a wildcard.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[non_exhaustive]
pub enum SourceKind {
    /// A deterministic mock data set, not production logs.
    Mock,
    /// Log files configured by the deployment (JSON lines, logfmt, syslog,
    /// a slow query log).
    File,
}

/// Coarse relevance of knowledge evidence.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum RelevanceLevel {
    /// Closely matches the query.
    High,
    /// Partly matches the query.
    Medium,
    /// Loosely related to the query.
    Low,
}

/// Severity of a log event or pattern, normalized from the source's spelling.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum LogLevel {
    /// Finest-grained diagnostics.
    Trace,
    /// Diagnostics.
    Debug,
    /// Normal operation.
    Info,
    /// Something unexpected that did not fail.
    Warn,
    /// A failed operation.
    Error,
    /// A failure that stopped a process or host component.
    Fatal,
    /// The source gave no recognizable level.
    Unknown,
}

impl LogLevel {
    /// Maps a source's level spelling, case-insensitively: `trace`; `debug`;
    /// `info`, `information`, `notice`; `warn`, `warning`; `error`, `err`;
    /// `fatal`, `critical`, `crit`, `emerg`, `alert`, `panic`. Anything else is
    /// [`LogLevel::Unknown`].
    #[must_use]
    pub fn from_source(text: &str) -> Self {
        let lower = text.trim().to_ascii_lowercase();
        match lower.as_str() {
            "trace" => Self::Trace,
            "debug" => Self::Debug,
            "info" | "information" | "notice" => Self::Info,
            "warn" | "warning" => Self::Warn,
            "error" | "err" => Self::Error,
            "fatal" | "critical" | "crit" | "emerg" | "alert" | "panic" => Self::Fatal,
            _ => Self::Unknown,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn wire_spellings() {
        assert_eq!(json!(InvocationStatus::Projecting), json!("PROJECTING"));
        assert_eq!(json!(InvocationStatus::Ready), json!("READY"));
        assert_eq!(json!(InvocationStatus::Error), json!("ERROR"));
        assert_eq!(
            json!(EvidenceStatus::EvidenceFound),
            json!("EVIDENCE_FOUND")
        );
        assert_eq!(json!(EvidenceStatus::NoEvidence), json!("NO_EVIDENCE"));
        assert_eq!(json!(EvidenceStatus::Error), json!("ERROR"));
        assert_eq!(json!(LogTopic::Application), json!("APPLICATION"));
        assert_eq!(
            json!(LogTopic::DatabaseSlowQuery),
            json!("DATABASE_SLOW_QUERY")
        );
        assert_eq!(json!(LogTopic::SystemEvents), json!("SYSTEM_EVENTS"));
        assert_eq!(json!(SourceKind::Mock), json!("MOCK"));
        assert_eq!(json!(SourceKind::File), json!("FILE"));
        assert_eq!(json!(RelevanceLevel::High), json!("HIGH"));
        assert_eq!(json!(RelevanceLevel::Medium), json!("MEDIUM"));
        assert_eq!(json!(RelevanceLevel::Low), json!("LOW"));
        for s in [
            InvocationStatus::Projecting,
            InvocationStatus::Ready,
            InvocationStatus::Error,
        ] {
            assert_eq!(json!(s), json!(s.as_str()));
            assert_eq!(InvocationStatus::parse(s.as_str()), Some(s));
        }
        for s in [
            EvidenceStatus::EvidenceFound,
            EvidenceStatus::NoEvidence,
            EvidenceStatus::Error,
        ] {
            assert_eq!(json!(s), json!(s.as_str()));
            assert_eq!(EvidenceStatus::parse(s.as_str()), Some(s));
        }
        for t in LogTopic::ALL {
            assert_eq!(json!(t), json!(t.as_str()));
        }
        assert!(serde_json::from_value::<LogTopic>(json!("application")).is_err());
    }

    #[test]
    fn log_levels_from_sources() {
        assert_eq!(LogLevel::from_source("WARNING"), LogLevel::Warn);
        assert_eq!(LogLevel::from_source("err"), LogLevel::Error);
        assert_eq!(LogLevel::from_source("Crit"), LogLevel::Fatal);
        assert_eq!(LogLevel::from_source("verbose"), LogLevel::Unknown);
    }
}
