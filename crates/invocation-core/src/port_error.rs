//! [`PortError`]: the one error type of the tool crates' source ports.

use std::fmt;

use crate::{BoxError, ExecutionErrorKind, SourceError};

/// Why a tool's source port (`KnowledgeSource`, `LogSource`, ...) could not
/// answer: the agent-safe category and whether the same request may succeed
/// later, as data. The cause stays in
/// [`source()`](std::error::Error::source), for the harness only.
///
/// # Behavior
/// - `Display` is the category's code (`EXECUTION_FAILED`, ...), nothing
///   else.
/// - `Debug` shows the category, the retryability and whether there is a
///   cause, never the cause itself (a driver's message may quote a payload,
///   a path or a URL).
/// - It converts into the boundary's
///   [`ExecutionError`](crate::ExecutionError) with `?`, keeping both, by
///   the blanket conversion of [`SourceError`].
#[derive(thiserror::Error)]
#[error("{}", self.kind.error_code().as_str())]
pub struct PortError {
    kind: ExecutionErrorKind,
    retryable: bool,
    #[source]
    source: Option<BoxError>,
}

impl PortError {
    /// An error of `kind`, retryable or not, keeping `source`.
    pub fn new(kind: ExecutionErrorKind, retryable: bool, source: impl Into<BoxError>) -> Self {
        Self {
            kind,
            retryable,
            source: Some(source.into()),
        }
    }

    /// `EXECUTION_FAILED` that may succeed later (the service is down, a
    /// directory is being refilled, a file is being rotated).
    pub fn transient(source: impl Into<BoxError>) -> Self {
        Self::new(ExecutionErrorKind::Failed, true, source)
    }

    /// `EXECUTION_FAILED` that will not succeed by retrying (a broken index,
    /// a configured file that is missing or outside its directory).
    pub fn permanent(source: impl Into<BoxError>) -> Self {
        Self::new(ExecutionErrorKind::Failed, false, source)
    }

    /// `EXECUTION_TIMEOUT`: the source gave up in time; retryable.
    pub fn timeout(source: impl Into<BoxError>) -> Self {
        Self::new(ExecutionErrorKind::Timeout, true, source)
    }

    /// `DATA_SOURCE_UNKNOWN`: the source has nothing for what the request
    /// names (a topic, a data source), so nothing was searched (never "no
    /// evidence"); permanent.
    #[must_use]
    pub const fn data_source_unknown() -> Self {
        Self {
            kind: ExecutionErrorKind::DataSourceUnknown,
            retryable: false,
            source: None,
        }
    }

    /// `QUERY_REJECTED`: the source refuses the query text (a syntax it
    /// cannot run); permanent.
    #[must_use]
    pub const fn query_rejected() -> Self {
        Self {
            kind: ExecutionErrorKind::QueryRejected,
            retryable: false,
            source: None,
        }
    }
}

impl SourceError for PortError {
    fn kind(&self) -> ExecutionErrorKind {
        self.kind
    }

    fn retryable(&self) -> bool {
        self.retryable
    }
}

impl fmt::Debug for PortError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PortError")
            .field("kind", &self.kind)
            .field("retryable", &self.retryable)
            .field("has_source", &self.source.is_some())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ExecutionError;

    #[test]
    fn category_and_retryability_are_data_and_display_is_payload_free() {
        use ExecutionErrorKind as Kind;
        let cases = [
            (
                PortError::transient("connect to https://user:secret@example failed"),
                Kind::Failed,
                true,
                "EXECUTION_FAILED",
            ),
            (
                PortError::permanent("/var/log/secret/app.log: not found"),
                Kind::Failed,
                false,
                "EXECUTION_FAILED",
            ),
            (
                PortError::timeout("secret"),
                Kind::Timeout,
                true,
                "EXECUTION_TIMEOUT",
            ),
            (
                PortError::new(Kind::InvalidInput, false, "secret"),
                Kind::InvalidInput,
                false,
                "INVALID_INPUT",
            ),
            (
                PortError::data_source_unknown(),
                Kind::DataSourceUnknown,
                false,
                "DATA_SOURCE_UNKNOWN",
            ),
            (
                PortError::query_rejected(),
                Kind::QueryRejected,
                false,
                "QUERY_REJECTED",
            ),
        ];
        for (error, kind, retryable, code) in cases {
            assert_eq!(error.kind(), kind);
            assert_eq!(error.retryable(), retryable);
            assert_eq!(error.to_string(), code);
            let shown = format!("{error} {error:?}");
            assert!(!shown.contains("secret"), "{shown}");
            let execution = ExecutionError::from(error);
            assert_eq!(execution.kind(), kind, "{code}");
            assert_eq!(execution.retryable(), retryable, "{code}");
            assert_eq!(execution.error_code().as_str(), code);
            let kept = std::error::Error::source(&execution).is_some();
            assert!(kept, "{code}: the port error is kept as the source");
        }
    }
}
