//! Which retrieval legs ran reaches the Harness Control View, never the Model
//! Observation: a knowledge source's `retrieval_trace.legs` and
//! `retrieval_trace.fallback` through the boundary, bounded, into the record
//! (so a view rebuilt from the record shows them too).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use aci_contracts::{EvidenceStatus, HarnessControlView, RunId};
use async_trait::async_trait;
use invocation_core::{
    BoundaryOutcome, CallPolicy, ExecutionContext, ModelObservation, RecordFields, ReplayPolicy,
    RunContext, ToolBoundary, ToolEnvelope,
};
use projectors_rag::{KnowledgeSource, KnowledgeSourceError, lookup_knowledge_tool};
use serde_json::{Value, json};
use store_memory::MemoryStore;

/// A knowledge source that answers every query with one response, as an
/// upstream retriever would, and counts its calls.
#[derive(Debug)]
struct Canned {
    response: Value,
    calls: AtomicU32,
}

#[async_trait]
impl KnowledgeSource for Canned {
    async fn retrieve(
        &self,
        _query: &str,
        _context: &ExecutionContext,
    ) -> Result<Value, KnowledgeSourceError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        Ok(self.response.clone())
    }
}

/// A source that could not search.
#[derive(Debug)]
struct Down;

#[async_trait]
impl KnowledgeSource for Down {
    async fn retrieve(
        &self,
        _query: &str,
        _context: &ExecutionContext,
    ) -> Result<Value, KnowledgeSourceError> {
        Err(KnowledgeSourceError::transient(std::io::Error::other(
            "retriever down",
        )))
    }
}

fn passage() -> Value {
    json!({
        "document_id": "connection-pool-exhaustion",
        "source": "knowledge/connection-pool-exhaustion.md",
        "title": "Database connection pool exhaustion",
        "excerpt": "Compare active connections with the pool's maximum.",
        "score": 0.93,
        "vector_rank": 1,
        "similarity": 0.88
    })
}

/// A response with `trace` as its `retrieval_trace` (none when `Null`).
fn response(trace: Value) -> Value {
    let mut response = json!({"engine": "tantivy-bm25+vector", "documents": [passage()]});
    if !trace.is_null() {
        response["retrieval_trace"] = trace;
    }
    response
}

struct Harness {
    boundary: ToolBoundary,
    source: Arc<Canned>,
    run: RunContext,
}

impl Harness {
    fn new(run_id: &str, response: Value) -> Self {
        let source = Arc::new(Canned {
            response,
            calls: AtomicU32::new(0),
        });
        let boundary = ToolBoundary::builder(Arc::new(MemoryStore::new()))
            .tool(lookup_knowledge_tool(Arc::clone(&source)).replay(ReplayPolicy::SameScope))
            .build()
            .unwrap();
        let run = RunContext::new(
            RunId::new(run_id).unwrap(),
            CallPolicy::AUTHORIZED_READ_ONLY,
        );
        Self {
            boundary,
            source,
            run,
        }
    }

    async fn lookup(&self, call: &str, query: &str) -> BoundaryOutcome {
        let envelope = ToolEnvelope::new(
            call,
            self.run.run_id.as_str(),
            "lookup_knowledge",
            json!({ "query": query }).to_string(),
        );
        self.boundary.invoke(&self.run, envelope).await
    }
}

/// The model's observation as JSON text, for a READY outcome.
fn observation_text(outcome: &BoundaryOutcome) -> String {
    assert!(
        matches!(outcome.observation, ModelObservation::Ready(_)),
        "expected READY, got {:?}",
        outcome.control.error_code
    );
    outcome.observation.to_json().to_string()
}

/// The model sees nothing of the trace: no leg, no fallback, no key.
fn assert_model_sees_no_trace(outcome: &BoundaryOutcome) {
    let text = observation_text(outcome);
    for forbidden in [
        "retrieval",
        "legs",
        "fallback",
        "vector",
        "bm25",
        "EMBEDDER",
    ] {
        assert!(!text.contains(forbidden), "{forbidden} leaked into {text}");
    }
}

fn control_json(control: &HarnessControlView) -> Value {
    serde_json::to_value(control).unwrap()
}

#[tokio::test]
async fn fused_legs_are_in_the_control_view_only() {
    let harness = Harness::new(
        "run_legs_fused",
        response(json!({
            "analyzed_terms": ["pool"],
            "legs": ["bm25", "vector"],
            "vector": {"model": "multilingual-e5-small", "min_similarity": 0.8, "candidates": 50}
        })),
    );
    let outcome = harness.lookup("call_1", "connection pool").await;
    assert_model_sees_no_trace(&outcome);

    let control = &outcome.control;
    assert_eq!(control.evidence_status, EvidenceStatus::EvidenceFound);
    assert_eq!(control.retrieval_legs, ["bm25", "vector"]);
    assert_eq!(control.retrieval_fallback, None);
    let view = control_json(control);
    assert_eq!(view["retrieval_legs"], json!(["bm25", "vector"]));
    assert!(view.get("retrieval_fallback").is_none(), "{view}");

    // The record keeps them in the agent result (what `aci inspect` prints)...
    let records = harness
        .boundary
        .journal()
        .entries(&harness.run.run_id, RecordFields::All)
        .await
        .unwrap();
    let stored: Value =
        serde_json::from_str(records[0].agent_result_json.as_deref().unwrap()).unwrap();
    assert_eq!(stored["retrieval_legs"], json!(["bm25", "vector"]));

    // ...so a view rebuilt from the record (a same-scope replay) shows them.
    let replayed = harness.lookup("call_2", "connection  pool").await;
    assert_eq!(harness.source.calls.load(Ordering::SeqCst), 1);
    assert_eq!(
        replayed
            .control
            .replayed_from
            .as_ref()
            .map(|id| id.as_str()),
        Some("call_1")
    );
    assert_eq!(replayed.control.retrieval_legs, ["bm25", "vector"]);
    assert_model_sees_no_trace(&replayed);
}

#[tokio::test]
async fn a_fallback_to_bm25_says_so_in_the_control_view_only() {
    let harness = Harness::new(
        "run_legs_fallback",
        response(json!({"legs": ["bm25"], "fallback": "EMBEDDER_TIMEOUT"})),
    );
    let outcome = harness.lookup("call_1", "connection pool").await;
    assert_model_sees_no_trace(&outcome);
    // Degraded, never an error: the evidence is BM25's.
    assert_eq!(
        outcome.control.evidence_status,
        EvidenceStatus::EvidenceFound
    );
    assert_eq!(outcome.control.retrieval_legs, ["bm25"]);
    assert_eq!(
        outcome.control.retrieval_fallback.as_deref(),
        Some("EMBEDDER_TIMEOUT")
    );
    let view = control_json(&outcome.control);
    assert_eq!(view["retrieval_legs"], json!(["bm25"]));
    assert_eq!(view["retrieval_fallback"], json!("EMBEDDER_TIMEOUT"));

    // Finding nothing is the same: the legs that searched are shown.
    let harness = Harness::new(
        "run_legs_fallback_none",
        json!({"documents": [], "retrieval_trace": {"legs": ["bm25"], "fallback": "VECTORS_NOT_READY"}}),
    );
    let outcome = harness.lookup("call_1", "banana bread").await;
    assert_model_sees_no_trace(&outcome);
    assert_eq!(outcome.control.evidence_status, EvidenceStatus::NoEvidence);
    assert_eq!(outcome.control.retrieval_legs, ["bm25"]);
    assert_eq!(
        outcome.control.retrieval_fallback.as_deref(),
        Some("VECTORS_NOT_READY")
    );
}

#[tokio::test]
async fn hostile_traces_are_bounded_or_dropped_never_an_error() {
    let huge = "v".repeat(10 * 1024);
    let longest = "x".repeat(32);
    let mut many: Vec<Value> = vec![
        json!(huge),
        json!(7),
        json!(null),
        json!({"name": "vector"}),
        json!(["bm25"]),
        json!(""),
        json!("BM25"),
        json!("bm 25"),
        json!(" vector"),
        json!("x".repeat(33)),
        json!("bm25"),
        json!("bm25"),
        json!("vector"),
        json!(longest),
        json!("sparse_2"),
    ];
    many.extend((0..100).map(|i| json!(format!("leg_{i}"))));
    let cases = [
        (
            json!({"legs": many, "fallback": "embedder timed out"}),
            vec!["bm25", "vector", longest.as_str(), "sparse_2"],
            None,
        ),
        (
            json!({"legs": "bm25", "fallback": huge.to_uppercase()}),
            vec![],
            None,
        ),
        (json!({"legs": {"0": "bm25"}, "fallback": 3}), vec![], None),
        (
            json!({"legs": [1, 2], "fallback": ["EMBEDDER_FAILED"]}),
            vec![],
            None,
        ),
        (
            json!({"legs": ["bm25"], "fallback": "E".repeat(65)}),
            vec!["bm25"],
            None,
        ),
        (
            json!({"legs": ["bm25"], "fallback": "Embedder_Failed"}),
            vec!["bm25"],
            None,
        ),
        (
            json!({"fallback": "EMBEDDER_MALFORMED"}),
            vec![],
            Some("EMBEDDER_MALFORMED"),
        ),
        (json!("bm25,vector"), vec![], None),
        (json!(["bm25", "vector"]), vec![], None),
    ];
    for (index, (trace, legs, fallback)) in cases.into_iter().enumerate() {
        let harness = Harness::new(&format!("run_legs_hostile_{index}"), response(trace));
        let outcome = harness.lookup("call_1", "connection pool").await;
        assert_model_sees_no_trace(&outcome);
        assert_eq!(
            outcome.control.evidence_status,
            EvidenceStatus::EvidenceFound
        );
        assert_eq!(outcome.control.retrieval_legs, legs, "case {index}");
        assert_eq!(
            outcome.control.retrieval_fallback.as_deref(),
            fallback,
            "case {index}"
        );
        let view = control_json(&outcome.control).to_string();
        assert!(view.len() < 2048, "case {index}: {} bytes", view.len());
    }
}

#[tokio::test]
async fn a_source_without_a_trace_adds_nothing() {
    for (index, raw) in [
        response(Value::Null),
        response(json!({"analyzed_terms": ["pool"], "top_k": 5})),
        Value::Array(vec![passage()]),
    ]
    .into_iter()
    .enumerate()
    {
        let harness = Harness::new(&format!("run_legs_absent_{index}"), raw);
        let outcome = harness.lookup("call_1", "connection pool").await;
        assert_model_sees_no_trace(&outcome);
        assert!(outcome.control.retrieval_legs.is_empty());
        assert_eq!(outcome.control.retrieval_fallback, None);
        let view = control_json(&outcome.control);
        assert!(view.get("retrieval_legs").is_none(), "{view}");
        assert!(view.get("retrieval_fallback").is_none(), "{view}");
    }

    // A failed call has no legs either.
    let boundary = ToolBoundary::builder(Arc::new(MemoryStore::new()))
        .tool(lookup_knowledge_tool(Down))
        .build()
        .unwrap();
    let run = RunContext::new(
        RunId::new("run_legs_down").unwrap(),
        CallPolicy::AUTHORIZED_READ_ONLY,
    );
    let envelope = ToolEnvelope::new(
        "call_1",
        run.run_id.as_str(),
        "lookup_knowledge",
        r#"{"query":"connection pool"}"#,
    );
    let outcome = boundary.invoke(&run, envelope).await;
    assert!(outcome.observation.is_error());
    let view = control_json(&outcome.control);
    assert!(view.get("retrieval_legs").is_none(), "{view}");
    assert!(view.get("retrieval_fallback").is_none(), "{view}");
}
