//! What counts as the same `lookup_knowledge` scope.
//!
//! Two requests have the same scope when their queries are equal after
//! [`normalize_query`]: every run of Unicode whitespace (`White_Space`, so
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
use serde_json::{Value, json};

/// The query with whitespace runs collapsed to one space and trimmed.
#[must_use]
pub fn normalize_query(query: &str) -> String {
    let mut normalized = String::with_capacity(query.len());
    for word in query.split_whitespace() {
        if !normalized.is_empty() {
            normalized.push(' ');
        }
        normalized.push_str(word);
    }
    normalized
}

/// The normalized scope of a request: `{"query": normalize_query(query)}`.
#[must_use]
pub fn knowledge_scope(request: &LookupKnowledgeRequest) -> Value {
    json!({ "query": normalize_query(&request.query) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whitespace_collapses_and_case_stays() {
        assert_eq!(
            normalize_query("  connection \t pool\n\ntimeout  "),
            "connection pool timeout"
        );
        assert_eq!(normalize_query("a\u{00A0}\u{3000}b"), "a b");
        assert_eq!(normalize_query("OOMKilled"), "OOMKilled");
        assert_ne!(normalize_query("OOMKilled"), normalize_query("oomkilled"));
        assert_eq!(normalize_query(" \n "), "");
        // Zero-width space is not White_Space: it is kept.
        assert_eq!(normalize_query("a\u{200B}b"), "a\u{200B}b");
    }
}
