//! The crate's error: configuration, bounds and projection. A failed search
//! is the port's own [`LogSourceError`](crate::LogSourceError).

use invocation_core::bounds::InvalidBounds;

/// A `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What can go wrong in the projector or a source's configuration.
///
/// Display and Debug never carry a query, a message, a path, a URL or a
/// credential: only the topic, the broken rule and configured numbers.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A `[logs]` topic's configuration is invalid (names the topic and the
    /// rule, never a path).
    #[error("logs topic {}: {rule}", topic.as_str())]
    InvalidConfig {
        /// The topic.
        topic: aci_contracts::LogTopic,
        /// The broken rule.
        rule: &'static str,
    },
    /// A bound ([`LogBounds`](crate::LogBounds), a source's event cap) is
    /// below its minimum: refused, never clamped.
    #[error("invalid log bounds: {0}")]
    InvalidBounds(#[from] InvalidBounds),
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
            Self::InvalidConfig { .. } => "INVALID_CONFIG",
            Self::InvalidBounds(_) => "INVALID_BOUNDS",
            Self::QueryTooLong => "QUERY_TOO_LONG",
            Self::InconsistentRaw(_) => "INCONSISTENT_RAW",
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
                Error::InvalidBounds(InvalidBounds::TooSmall {
                    bound: "max_events",
                    minimum: 1,
                }),
                "INVALID_BOUNDS",
            ),
            (Error::QueryTooLong, "QUERY_TOO_LONG"),
            (Error::InconsistentRaw("window"), "INCONSISTENT_RAW"),
            (
                Error::InvalidConfig {
                    topic: aci_contracts::LogTopic::Application,
                    rule: "files must name at least one file pattern",
                },
                "INVALID_CONFIG",
            ),
        ];
        for (error, code) in cases {
            assert_eq!(error.code(), code);
            let shown = format!("{error} {error:?}");
            assert!(!shown.contains("secret"), "{shown}");
        }
    }
}
