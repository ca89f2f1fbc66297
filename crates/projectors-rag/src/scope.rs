//! What counts as the same `lookup_knowledge` scope.
//!
//! Two requests have the same scope when their queries are equal after
//! [`collapse_whitespace`] (the one shared meaning of "the same text up to
//! spacing", from `invocation-core`): every run of Unicode whitespace (`White_Space`, so
//! also tabs, newlines, no-break and ideographic spaces) becomes one ASCII
//! space, and leading and trailing whitespace is removed. Nothing else is
//! changed:
//!
//! - **Case is kept.** The query goes verbatim to whatever retriever sits
//!   behind the [`KnowledgeSource`](crate::KnowledgeSource) port, which makes
//!   no promise to ignore case, and case can carry meaning in exactly the
//!   queries agents send (`OOMKilled`, `ORA-00018`, `IT` versus `it`). Folding
//!   it would let the harness treat a genuinely different lookup as a
//!   duplicate (and, with replay, answer it from the other call's record); not
//!   folding it costs at most one extra execution.
//! - **No Unicode normalization** (NFC/NFD), punctuation or stop-word removal:
//!   those change what a retriever may match.
//!
//! The scope is the JSON object `{"query": <normalized query>}`; the boundary
//! fingerprints it with the tool name (SHA-256). The executor sends the
//! normalized query to the source, so requests of one scope make the same
//! upstream call; the result still reports the query exactly as the agent
//! sent it.

use aci_contracts::LookupKnowledgeRequest;
use invocation_core::whitespace::collapse_whitespace;
use serde_json::{Value, json};

/// The normalized scope of a request: `{"query": collapse_whitespace(query)}`.
#[must_use]
pub fn knowledge_scope(request: &LookupKnowledgeRequest) -> Value {
    json!({ "query": collapse_whitespace(&request.query) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whitespace_collapses_and_case_stays() {
        assert_eq!(
            collapse_whitespace("  connection \t pool\n\ntimeout  "),
            "connection pool timeout"
        );
        assert_eq!(collapse_whitespace("a\u{00A0}\u{3000}b"), "a b");
        assert_eq!(collapse_whitespace("OOMKilled"), "OOMKilled");
        assert_ne!(
            collapse_whitespace("OOMKilled"),
            collapse_whitespace("oomkilled")
        );
        assert_eq!(collapse_whitespace(" \n "), "");
        // Zero-width space is not White_Space: it is kept.
        assert_eq!(collapse_whitespace("a\u{200B}b"), "a\u{200B}b");
    }
}
