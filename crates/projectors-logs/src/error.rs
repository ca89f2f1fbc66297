//! The crate's one error type.

use std::fmt;

use invocation_core::BoxError;

/// A `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What can go wrong in a log source, the projector or its configuration.
///
/// Display and Debug never carry a query, a message, a URL or a credential;
/// a driver's error is kept only as the [`source`](std::error::Error::source)
/// (Debug shows whether there is one, not what it says).
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The log source could not be reached or failed while searching.
    #[error("log source unavailable")]
    SourceUnavailable {
        /// Whether the same query may succeed when tried again.
        retryable: bool,
        /// The source's own error, for the harness only.
        #[source]
        source: Option<BoxError>,
    },
    /// The source has no logs configured for the topic.
    #[error("no log source is configured for the topic")]
    TopicNotConfigured,
    /// A `[logs]` topic's configuration is invalid (names the topic and the
    /// rule, never a path).
    #[error("logs topic {}: {rule}", topic.as_str())]
    InvalidConfig {
        /// The topic.
        topic: aci_contracts::LogTopic,
        /// The broken rule.
        rule: &'static str,
    },
    /// The log source refused the query (for example a syntax it cannot run).
    #[error("log source rejected the query")]
    QueryRejected,
    /// A [`LogBounds`](crate::LogBounds) value is outside what the projector accepts.
    #[error("invalid log bounds: {0}")]
    InvalidBounds(&'static str),
    /// The query is longer than [`MAX_QUERY_BYTES`](crate::MAX_QUERY_BYTES)
    /// (counted as JSON-escaped UTF-8 bytes).
    #[error("query is too long to echo in the result")]
    QueryTooLong,
    /// The raw response contradicts itself (names the broken rule, never the data).
    #[error("inconsistent raw log response: {0}")]
    InconsistentRaw(&'static str),
}

impl Error {
    /// A stable SCREAMING_SNAKE code for logs and metrics.
    #[must_use]
    pub const fn code(&self) -> &'static str {
        match self {
            Self::SourceUnavailable { .. } => "SOURCE_UNAVAILABLE",
            Self::TopicNotConfigured => "TOPIC_NOT_CONFIGURED",
            Self::InvalidConfig { .. } => "INVALID_CONFIG",
            Self::QueryRejected => "QUERY_REJECTED",
            Self::InvalidBounds(_) => "INVALID_BOUNDS",
            Self::QueryTooLong => "QUERY_TOO_LONG",
            Self::InconsistentRaw(_) => "INCONSISTENT_RAW",
        }
    }

    /// Whether retrying the same call may succeed.
    #[must_use]
    pub const fn is_retryable(&self) -> bool {
        matches!(
            self,
            Self::SourceUnavailable {
                retryable: true,
                ..
            }
        )
    }

    /// [`Error::SourceUnavailable`] keeping `source` for the harness.
    pub fn unavailable(retryable: bool, source: impl Into<BoxError>) -> Self {
        Self::SourceUnavailable {
            retryable,
            source: Some(source.into()),
        }
    }
}

/// The port error shape: the agent-safe category and retryability are data,
/// so the executor converts with the one blanket `From` into
/// [`ExecutionError`](invocation_core::ExecutionError).
impl invocation_core::SourceError for Error {
    fn kind(&self) -> invocation_core::ExecutionErrorKind {
        use invocation_core::ExecutionErrorKind as Kind;
        match self {
            Self::QueryRejected => Kind::QueryRejected,
            Self::TopicNotConfigured => Kind::DataSourceUnknown,
            _ => Kind::Failed,
        }
    }

    fn retryable(&self) -> bool {
        self.is_retryable()
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::SourceUnavailable { retryable, source } => f
                .debug_struct("SourceUnavailable")
                .field("retryable", retryable)
                .field("has_source", &source.is_some())
                .finish(),
            Self::TopicNotConfigured => f.write_str("TopicNotConfigured"),
            Self::InvalidConfig { topic, rule } => f
                .debug_struct("InvalidConfig")
                .field("topic", topic)
                .field("rule", rule)
                .finish(),
            Self::QueryRejected => f.write_str("QueryRejected"),
            Self::InvalidBounds(rule) => f.debug_tuple("InvalidBounds").field(rule).finish(),
            Self::QueryTooLong => f.write_str("QueryTooLong"),
            Self::InconsistentRaw(rule) => f.debug_tuple("InconsistentRaw").field(rule).finish(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_stable_and_display_is_payload_free() {
        let cases = [
            (
                Error::unavailable(true, "connect to https://user:secret@example failed"),
                "SOURCE_UNAVAILABLE",
                true,
            ),
            (Error::QueryRejected, "QUERY_REJECTED", false),
            (Error::TopicNotConfigured, "TOPIC_NOT_CONFIGURED", false),
            (Error::InvalidBounds("max_events"), "INVALID_BOUNDS", false),
            (Error::QueryTooLong, "QUERY_TOO_LONG", false),
            (Error::InconsistentRaw("window"), "INCONSISTENT_RAW", false),
        ];
        for (error, code, retryable) in cases {
            assert_eq!(error.code(), code);
            assert_eq!(error.is_retryable(), retryable);
            let shown = format!("{error} {error:?}");
            assert!(!shown.contains("secret"), "{shown}");
            let execution = invocation_core::ExecutionError::from(error);
            assert_eq!(execution.retryable(), retryable, "{code}");
        }
        let kind = |e: Error| invocation_core::ExecutionError::from(e).kind();
        use invocation_core::ExecutionErrorKind as Kind;
        assert_eq!(kind(Error::TopicNotConfigured), Kind::DataSourceUnknown);
        assert_eq!(kind(Error::QueryRejected), Kind::QueryRejected);
        assert_eq!(kind(Error::unavailable(true, "x")), Kind::Failed);
    }
}
