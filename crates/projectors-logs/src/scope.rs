//! What counts as the same `query_logs` scope (duplicate fingerprint, replay).
//!
//! Two requests have the same scope when they have
//!
//! - the same `topic`,
//! - the same query after normalization: leading and trailing whitespace
//!   removed, every inner run of whitespace (Unicode `White_Space`) replaced by
//!   one space, and letters lowercased (Unicode `to_lowercase`),
//! - the same effective `lookback_minutes` (an omitted value counts as 60).
//!
//! Case and spacing are folded because the [`LogSource`](crate::LogSource)
//! contract makes matching insensitive to both, so such requests return the
//! same matches. Word order is kept: a source may treat it as significant
//! (phrases). The absolute window (`start_time`, `end_time`) is not part of
//! the scope: "the last 60 minutes" asked twice in one run is one scope,
//! although the window moved.

use aci_contracts::QueryLogsRequest;
use invocation_core::whitespace::collapse_whitespace;
use serde_json::{Value, json};

/// The query as it counts for the scope: trimmed, inner whitespace collapsed
/// to one space, lowercased.
#[must_use]
pub fn lowercase_collapsed_query(query: &str) -> String {
    // Per character: `str::to_lowercase` would also apply the final-sigma
    // rule, which would change existing fingerprints.
    collapse_whitespace(query)
        .chars()
        .flat_map(char::to_lowercase)
        .collect()
}

/// The scope normalizer of `query_logs`:
/// `{"lookback_minutes": <effective>, "query": <normalized>, "topic": <topic>}`.
#[must_use]
pub fn query_logs_scope(request: &QueryLogsRequest) -> Value {
    json!({
        "topic": request.topic,
        "query": lowercase_collapsed_query(&request.query),
        "lookback_minutes": request.effective_lookback_minutes(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use aci_contracts::LogTopic;

    #[test]
    fn normalization() {
        assert_eq!(
            lowercase_collapsed_query("  Connection\t POOL \n timeout "),
            "connection pool timeout"
        );
        assert_eq!(
            lowercase_collapsed_query("ÉCHEC\u{3000}Ünïcode"),
            "échec ünïcode"
        );
        assert_eq!(lowercase_collapsed_query("pool timeout"), "pool timeout");
        assert_ne!(
            lowercase_collapsed_query("timeout pool"),
            lowercase_collapsed_query("pool timeout")
        );
    }

    #[test]
    fn scope_uses_effective_lookback() {
        let request = QueryLogsRequest {
            topic: LogTopic::Application,
            query: " Timeout ".into(),
            lookback_minutes: None,
        };
        assert_eq!(
            query_logs_scope(&request),
            json!({"topic": "APPLICATION", "query": "timeout", "lookback_minutes": 60})
        );
    }
}
