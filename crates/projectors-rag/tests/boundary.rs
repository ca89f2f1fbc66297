//! `lookup_knowledge` end to end: the bundled knowledge base through the
//! `ToolBoundary` with the in-memory store.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use aci_contracts::{ErrorCode, EvidenceStatus, InvocationStatus, RelevanceLevel, RunId};
use invocation_core::{
    BoundaryOutcome, Clock, DEFAULT_MAX_REQUEST_BYTES, ManualClock, ModelObservation, RunContext,
    ToolBoundary, ToolEnvelope,
};
use projectors_rag::{MarkdownKnowledgeBase, lookup_knowledge_tool};
use serde_json::{Value, json};
use store_memory::MemoryStore;

struct Harness {
    boundary: ToolBoundary,
    run: RunContext,
    next_call: std::sync::atomic::AtomicU32,
}

impl Harness {
    fn new(run_id: &str) -> Self {
        let clock: Arc<dyn Clock> = Arc::new(ManualClock::at_default_start());
        let store = Arc::new(MemoryStore::with_clock(Arc::clone(&clock)));
        let base = MarkdownKnowledgeBase::bundled().unwrap();
        let boundary = ToolBoundary::builder(store)
            .clock(clock)
            .tool(lookup_knowledge_tool(base))
            .build()
            .unwrap();
        Self {
            boundary,
            run: RunContext::new(
                RunId::new(run_id).unwrap(),
                invocation_core::CallPolicy::AUTHORIZED_READ_ONLY,
            ),
            next_call: std::sync::atomic::AtomicU32::new(1),
        }
    }

    async fn call(&self, arguments: &str) -> BoundaryOutcome {
        let n = self
            .next_call
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let envelope = ToolEnvelope::new(
            format!("call_{n}"),
            self.run.run_id.as_str(),
            "lookup_knowledge",
            arguments,
        );
        self.boundary.invoke(&self.run, envelope).await
    }

    async fn lookup(&self, query: &str) -> BoundaryOutcome {
        self.call(&json!({ "query": query }).to_string()).await
    }
}

fn ready(outcome: &BoundaryOutcome) -> Value {
    match &outcome.observation {
        ModelObservation::Ready(_) => outcome.observation.to_json(),
        ModelObservation::Error(error) => panic!("expected READY, got {error:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn connection_pool_timeout_finds_the_runbook() {
    let harness = Harness::new("run_rag_found");
    let outcome = harness.lookup("connection pool timeout").await;
    let observation = &ready(&outcome);

    assert_eq!(observation["evidence_status"], "EVIDENCE_FOUND");
    assert_eq!(observation["tool_call_id"], "call_1");
    assert_eq!(observation["query"], "connection pool timeout");
    assert_eq!(observation["relevance_level"], "HIGH");
    assert_eq!(observation["truncated"], false);
    let evidence = observation["evidence"].as_array().unwrap();
    assert!(!evidence.is_empty());
    assert_eq!(evidence[0]["document_id"], "connection-pool-exhaustion");
    assert_eq!(
        evidence[0]["source"],
        "knowledge/connection-pool-exhaustion.md"
    );
    assert_eq!(evidence[0]["title"], "Database connection pool exhaustion");
    assert!(
        evidence[0]["breadcrumb"]
            .as_str()
            .unwrap()
            .starts_with("Database connection pool exhaustion > ")
    );
    let runbook = include_str!("../knowledge/connection-pool-exhaustion.md");
    for item in evidence {
        let excerpt = item["excerpt"].as_str().unwrap();
        if item["document_id"] == "connection-pool-exhaustion" {
            assert!(runbook.contains(excerpt), "{excerpt:?}");
        }
    }

    // The model's view has no counters, scores, traces or fingerprints.
    let object = observation.as_object().unwrap();
    let keys: Vec<&str> = object.keys().map(String::as_str).collect();
    assert_eq!(
        keys.iter()
            .copied()
            .collect::<std::collections::BTreeSet<_>>(),
        [
            "evidence",
            "evidence_status",
            "query",
            "relevance_level",
            "tool_call_id",
            "truncated"
        ]
        .into_iter()
        .collect()
    );
    assert!(!object.contains_key("returned_count"));
    let text = observation.to_string();
    for forbidden in [
        "score",
        "retrieval_trace",
        "matched_terms",
        "chunk_id",
        "scope_fingerprint",
        "retrieval_legs",
        "fallback",
    ] {
        assert!(!text.contains(forbidden), "{forbidden} leaked into {text}");
    }

    // The harness's view has them.
    let control = &outcome.control;
    assert_eq!(control.status, InvocationStatus::Ready);
    assert_eq!(control.evidence_status, EvidenceStatus::EvidenceFound);
    assert_eq!(control.returned_count, evidence.len() as u64);
    assert_eq!(control.relevance_level, Some(RelevanceLevel::High));
    assert_eq!(control.scope, json!({"query": "connection pool timeout"}));
    assert_eq!(
        control.scope_fingerprint.as_ref().map(String::len),
        Some(64)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unrelated_query_is_no_evidence() {
    let harness = Harness::new("run_rag_none");
    for query in [
        "banana bread recipe",
        "连接池超时",
        "?!… ---",
        "title:x AND (y OR \"z",
    ] {
        let outcome = harness.lookup(query).await;
        let observation = ready(&outcome);
        assert_eq!(
            observation,
            json!({
                "evidence_status": "NO_EVIDENCE",
                "tool_call_id": outcome.control.tool_call_id.as_ref().unwrap().as_str(),
                "query": query,
                "evidence": [],
                "truncated": false,
            }),
            "{query}"
        );
        assert_eq!(outcome.control.status, InvocationStatus::Ready);
        assert_eq!(outcome.control.returned_count, 0);
        assert_eq!(outcome.control.relevance_level, None);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn equivalent_requests_share_a_fingerprint() {
    let harness = Harness::new("run_rag_scope");
    let first = harness.lookup("connection pool timeout").await;
    let same = harness
        .lookup("  connection\u{00A0}pool \n\t timeout ")
        .await;
    let other_case = harness.lookup("Connection Pool Timeout").await;
    let other = harness.lookup("connection pool").await;

    let fingerprint =
        |outcome: &BoundaryOutcome| outcome.control.scope_fingerprint.clone().unwrap();
    assert_eq!(fingerprint(&first), fingerprint(&same));
    assert_eq!(
        same.control.scope,
        json!({"query": "connection pool timeout"})
    );
    assert_eq!(
        same.control.duplicate_of.as_ref().map(|id| id.as_str()),
        Some("call_1")
    );
    // The agent's own text is kept in the result.
    assert_eq!(
        ready(&same)["query"],
        "  connection\u{00A0}pool \n\t timeout "
    );
    // Same scope, same upstream call, same evidence.
    assert_eq!(ready(&first)["evidence"], ready(&same)["evidence"]);

    assert_ne!(fingerprint(&first), fingerprint(&other_case));
    assert_eq!(other_case.control.duplicate_of, None);
    assert_ne!(fingerprint(&first), fingerprint(&other));
    assert_eq!(other.control.duplicate_of, None);
}

#[tokio::test(flavor = "multi_thread")]
async fn invalid_requests_are_refused_before_execution() {
    let harness = Harness::new("run_rag_invalid");
    for arguments in [
        r#"{"query":""}"#,
        r#"{"query":" \n\t "}"#,
        r#"{"query":"disk","top_k":50}"#,
        r#"{}"#,
        r#"["disk"]"#,
    ] {
        let outcome = harness.call(arguments).await;
        assert!(outcome.observation.is_error(), "{arguments}");
        assert_eq!(
            outcome.control.error_code,
            Some(ErrorCode::InvalidInput),
            "{arguments}"
        );
    }
}

/// Queries are bounded by the contract (256 characters, at most 1024 bytes as
/// JSON), so a longer one is INVALID_INPUT before anything runs, and the
/// largest valid query still leaves room for bounded evidence.
#[tokio::test(flavor = "multi_thread")]
async fn queries_beyond_the_contract_bound_are_invalid_and_the_largest_valid_one_fits() {
    let harness = Harness::new("run_rag_huge");
    let query = "disk ".repeat((DEFAULT_MAX_REQUEST_BYTES - 32) / 5);
    let outcome = harness.lookup(&query).await;
    assert!(outcome.observation.is_error());
    assert_eq!(outcome.control.error_code, Some(ErrorCode::InvalidInput));

    let largest = format!("disk {}", "😀".repeat(aci_contracts::MAX_QUERY_CHARS - 5));
    let outcome = harness.lookup(&largest).await;
    assert!(
        !outcome.observation.is_error(),
        "{:?}",
        outcome.control.error_code
    );

    // A long but reasonable query still gets bounded evidence.
    let query = "disk full no space left on device ".repeat(7);
    let outcome = harness.lookup(&query).await;
    let observation = ready(&outcome);
    assert_eq!(observation["evidence_status"], "EVIDENCE_FOUND");
    assert!(observation.to_string().len() <= invocation_core::DEFAULT_MAX_AGENT_RESULT_BYTES);
}
