//! The edges of a call: arguments never decoded when oversized, panics
//! anywhere after create, zero limits, and store writes whose answer is lost
//! (applied or not), settled so no record stays PROJECTING.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use aci_contracts::{
    ErrorCode, EvidenceResult, InvocationStatus, KnowledgeEvidence, LookupKnowledgeResult,
    ReadyEvidenceStatus, ResultCounters, RunId, ToolCallId, ValidationError,
};
use async_trait::async_trait;
use invocation_core::testing::faults::{Fault, FaultyStore, Write};
use invocation_core::{
    BuildError, ExecutionContext, ExecutionError, Executor, InvalidLimit, InvocationKey,
    InvocationStore, LimitOverrides, Limits, ProjectionContext, ProjectionError, Projector,
    RecordFields, RunContext, ToolBoundary, ToolEnvelope, ToolSpec,
};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use store_memory::MemoryStore;

/// Decodes of an oversized request (tests run concurrently: count only those).
static DECODED_HUGE: AtomicUsize = AtomicUsize::new(0);

/// A request that counts how often it is decoded.
#[derive(Debug, Clone, Serialize)]
struct Counted {
    mode: String,
}

impl<'de> Deserialize<'de> for Counted {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Plain {
            mode: String,
        }
        let plain = Plain::deserialize(deserializer)?;
        if plain.mode.len() > 1024 {
            DECODED_HUGE.fetch_add(1, Ordering::SeqCst);
        }
        if plain.mode == "panic_decoding" {
            panic!("decoder exploded");
        }
        Ok(Self { mode: plain.mode })
    }
}

/// A raw response whose serialization may panic.
#[derive(Debug)]
struct Raw {
    mode: String,
}

impl Serialize for Raw {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if self.mode == "panic_serializing" {
            panic!("serializer exploded");
        }
        serializer.serialize_str(&self.mode)
    }
}

/// A result whose validation may panic.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(transparent)]
struct Checked(LookupKnowledgeResult);

impl EvidenceResult for Checked {
    type Observation = <LookupKnowledgeResult as EvidenceResult>::Observation;
    fn evidence_status(&self) -> ReadyEvidenceStatus {
        self.0.evidence_status()
    }
    fn tool_call_id(&self) -> &ToolCallId {
        self.0.tool_call_id()
    }
    fn set_tool_call_id(&mut self, id: ToolCallId) {
        self.0.set_tool_call_id(id);
    }
    fn validate(&self) -> Result<(), ValidationError> {
        if self.0.query == "panic_validating" {
            panic!("validation exploded");
        }
        self.0.validate()
    }
    fn observation(&self) -> Self::Observation {
        self.0.observation()
    }
    fn counters(&self) -> ResultCounters {
        self.0.counters()
    }
}

#[derive(Debug, Clone, Default)]
struct Exec {
    runs: Arc<AtomicUsize>,
    /// Cleanup of dropped calls still running on tasks of the executor's
    /// own: its `drain` waits until it is notified done.
    cleanup: Option<Arc<tokio::sync::Notify>>,
    drains: Arc<AtomicUsize>,
}

#[async_trait]
impl Executor for Exec {
    type Request = Counted;
    type Raw = Raw;
    async fn execute(
        &self,
        request: &Counted,
        _context: &ExecutionContext,
    ) -> Result<Raw, ExecutionError> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        Ok(Raw {
            mode: request.mode.clone(),
        })
    }

    async fn drain(&self) {
        self.drains.fetch_add(1, Ordering::SeqCst);
        if let Some(cleanup) = &self.cleanup {
            cleanup.notified().await;
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Proj;

impl Projector for Proj {
    type Request = Counted;
    type Raw = Raw;
    type Output = Checked;
    fn project(
        &self,
        context: &ProjectionContext<'_, Counted>,
        raw: &Raw,
    ) -> Result<Checked, ProjectionError> {
        Ok(Checked(LookupKnowledgeResult {
            evidence_status: ReadyEvidenceStatus::EvidenceFound,
            tool_call_id: context.tool_call_id.clone(),
            query: raw.mode.clone(),
            evidence: vec![KnowledgeEvidence {
                document_id: "d".into(),
                source: "s".into(),
                title: "t".into(),
                breadcrumb: "b".into(),
                excerpt: "e".into(),
            }],
            returned_count: 1,
            relevance_level: None,
            truncated: false,
            retrieval_legs: Vec::new(),
            retrieval_fallback: None,
        }))
    }
}

fn tool(exec: &Exec) -> ToolSpec<Exec, Proj> {
    ToolSpec::new("edge", "An edge-case tool for tests.", exec.clone(), Proj).read_only(true)
}

fn run() -> RunId {
    RunId::new("run-edges").unwrap()
}

fn call(id: &str, mode: &str) -> ToolEnvelope {
    ToolEnvelope::new(id, "run-edges", "edge", format!(r#"{{"mode":"{mode}"}}"#))
}

fn key(id: &str) -> InvocationKey {
    InvocationKey::new(run(), ToolCallId::new(id).unwrap())
}

#[tokio::test]
async fn oversized_arguments_are_refused_without_being_decoded() {
    let exec = Exec::default();
    let store = Arc::new(MemoryStore::new());
    let boundary = ToolBoundary::builder(store.clone())
        .tool(tool(&exec))
        .build()
        .unwrap();
    let ctx = RunContext::new(run(), invocation_core::CallPolicy::AUTHORIZED_READ_ONLY);
    let huge = format!(r#"{{"mode":"{}"}}"#, "x".repeat(100 * 1024));
    let outcome = boundary
        .invoke(&ctx, ToolEnvelope::new("big", "run-edges", "edge", huge))
        .await;
    assert_eq!(outcome.control.error_code, Some(ErrorCode::RequestTooLarge));
    assert_eq!(DECODED_HUGE.load(Ordering::SeqCst), 0, "never decoded");
    assert_eq!(
        store.get(&key("big"), RecordFields::All).await.unwrap(),
        None
    );
    assert_eq!(exec.runs.load(Ordering::SeqCst), 0);
    // The counter does count decodes: a limit that admits the text decodes it.
    let roomy = ToolBoundary::builder(store.clone())
        .limits(Limits {
            max_request_bytes: 200 * 1024,
            ..Limits::default()
        })
        .tool(tool(&exec))
        .build()
        .unwrap();
    let huge = format!(r#"{{"mode":"{}"}}"#, "x".repeat(100 * 1024));
    roomy
        .invoke(&ctx, ToolEnvelope::new("big2", "run-edges", "edge", huge))
        .await;
    assert_eq!(DECODED_HUGE.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn panics_anywhere_are_error_codes_and_records_are_finalized() {
    let exec = Exec::default();
    let store = Arc::new(MemoryStore::new());
    let boundary = ToolBoundary::builder(store.clone())
        .tool(tool(&exec))
        .build()
        .unwrap();
    let ctx = RunContext::new(run(), invocation_core::CallPolicy::AUTHORIZED_READ_ONLY);

    // Decoding happens in preflight: no record.
    let outcome = boundary.invoke(&ctx, call("p0", "panic_decoding")).await;
    assert_eq!(outcome.control.error_code, Some(ErrorCode::InvalidInput));
    assert_eq!(
        store.get(&key("p0"), RecordFields::All).await.unwrap(),
        None
    );

    for (id, mode, code) in [
        ("p1", "panic_serializing", ErrorCode::SerializationFailed),
        ("p2", "panic_validating", ErrorCode::ProjectionFailed),
    ] {
        let outcome = boundary.invoke(&ctx, call(id, mode)).await;
        assert_eq!(outcome.control.error_code, Some(code), "{mode}");
        let text = serde_json::to_string(&outcome).unwrap();
        assert!(!text.contains("exploded"), "{text}");
        let record = store
            .get(&key(id), RecordFields::All)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(record.status, InvocationStatus::Error, "{mode}");
        assert_eq!(record.error_code, Some(code));
    }
    let ok = boundary.invoke(&ctx, call("p3", "fine")).await;
    assert_eq!(ok.control.status, InvocationStatus::Ready);
}

#[test]
fn zero_limits_are_build_errors() {
    let exec = Exec::default();
    let store = Arc::new(MemoryStore::new());
    let zero_ttl = Limits {
        record_ttl: Duration::ZERO,
        ..Limits::default()
    };
    let err = ToolBoundary::builder(store.clone())
        .limits(zero_ttl)
        .tool(tool(&exec))
        .build()
        .unwrap_err();
    assert_eq!(err, BuildError::InvalidLimit(InvalidLimit("record_ttl")));
    assert_eq!(err.to_string(), "limits: record_ttl must be positive");
    let err = ToolBoundary::builder(store)
        .tool(tool(&exec).limits(LimitOverrides {
            timeout: Some(Duration::ZERO),
            ..LimitOverrides::default()
        }))
        .build()
        .unwrap_err();
    assert_eq!(err.to_string(), "tool `edge`: timeout must be positive");
}

/// The memory store, with its answers lost on demand: the operation is
/// applied (or not) and the caller hears `Unavailable`, as after a timeout.
/// The first `failing_settles` settle attempts fail before one goes through.
fn lost_replies(create: Fault, finalize: Fault, failing_settles: usize) -> Faulty {
    FaultyStore::new(MemoryStore::new())
        .always(Write::Create, create)
        .always(Write::Finalize, finalize)
        .first(Write::Settle, failing_settles, Fault::LoseBeforeApplying)
}

type Faulty = FaultyStore<MemoryStore>;

async fn through(store: Faulty, id: &str) -> (Arc<Faulty>, Exec, invocation_core::BoundaryOutcome) {
    let store = Arc::new(store);
    let exec = Exec::default();
    let boundary = ToolBoundary::builder(store.clone())
        .tool(tool(&exec))
        .build()
        .unwrap();
    let outcome = boundary
        .invoke(
            &RunContext::new(run(), invocation_core::CallPolicy::AUTHORIZED_READ_ONLY),
            call(id, "fine"),
        )
        .await;
    tokio::time::timeout(Duration::from_secs(10), boundary.drain_abandoned())
        .await
        .unwrap();
    (store, exec, outcome)
}

#[tokio::test]
async fn a_create_applied_but_unanswered_is_settled_error() {
    let (store, exec, outcome) =
        through(lost_replies(Fault::ApplyThenLose, Fault::Answer, 0), "c1").await;
    assert_eq!(
        outcome.control.error_code,
        Some(ErrorCode::StoreUnavailable)
    );
    assert_eq!(exec.runs.load(Ordering::SeqCst), 0, "nothing ran");
    let record = store
        .get(&key("c1"), RecordFields::All)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.status, InvocationStatus::Error);
    assert_eq!(record.error_code, Some(ErrorCode::StoreUnavailable));
    assert!(record.request_json.is_some(), "the applied create's record");
}

#[tokio::test]
async fn a_create_lost_before_applying_leaves_a_tombstone_that_refuses_it_later() {
    let (store, _, outcome) = through(
        lost_replies(Fault::LoseBeforeApplying, Fault::Answer, 0),
        "c1",
    )
    .await;
    assert_eq!(
        outcome.control.error_code,
        Some(ErrorCode::StoreUnavailable)
    );
    let record = store
        .get(&key("c1"), RecordFields::All)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.status, InvocationStatus::Error);
    assert_eq!(record.request_json, None, "a tombstone");
    assert!(
        store
            .list(&run(), RecordFields::Metadata)
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn a_ready_finalize_applied_but_unanswered_returns_the_recorded_result() {
    let (store, exec, outcome) =
        through(lost_replies(Fault::Answer, Fault::ApplyThenLose, 0), "c1").await;
    assert_eq!(outcome.control.status, InvocationStatus::Ready);
    assert_eq!(exec.runs.load(Ordering::SeqCst), 1);
    let record = store
        .get(&key("c1"), RecordFields::All)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.status, InvocationStatus::Ready);
}

#[tokio::test]
async fn a_finalize_lost_before_applying_is_settled_and_the_agent_gets_an_error() {
    let (store, _, outcome) = through(
        lost_replies(Fault::Answer, Fault::LoseBeforeApplying, 0),
        "c1",
    )
    .await;
    assert_eq!(
        outcome.control.error_code,
        Some(ErrorCode::StoreUnavailable)
    );
    let record = store
        .get(&key("c1"), RecordFields::All)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.status, InvocationStatus::Error);
    assert_eq!(record.error_code, Some(ErrorCode::StoreUnavailable));
}

#[tokio::test]
async fn settling_retries_in_the_background_until_the_store_answers() {
    let (store, _, outcome) =
        through(lost_replies(Fault::ApplyThenLose, Fault::Answer, 5), "c1").await;
    assert_eq!(
        outcome.control.error_code,
        Some(ErrorCode::StoreUnavailable)
    );
    assert!(store.reached(Write::Settle) > 0, "retried after 5 failures");
    let record = store
        .get(&key("c1"), RecordFields::All)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.status, InvocationStatus::Error);
}

#[tokio::test]
async fn drain_abandoned_waits_for_every_executors_drain() {
    let cleanup = Arc::new(tokio::sync::Notify::new());
    let exec = Exec {
        cleanup: Some(Arc::clone(&cleanup)),
        ..Exec::default()
    };
    let boundary = ToolBoundary::builder(Arc::new(MemoryStore::new()))
        .tool(tool(&exec))
        .build()
        .unwrap();
    let mut drain = std::pin::pin!(boundary.drain_abandoned());
    assert!(
        futures::poll!(&mut drain).is_pending(),
        "returned while the executor's cleanup runs"
    );
    assert_eq!(exec.drains.load(Ordering::SeqCst), 1);
    cleanup.notify_one();
    drain.await;
    // Drained, the executor still serves, and drains again.
    let outcome = boundary
        .invoke(
            &RunContext::new(run(), invocation_core::CallPolicy::AUTHORIZED_READ_ONLY),
            call("after-drain", "fine"),
        )
        .await;
    assert_eq!(outcome.control.status, InvocationStatus::Ready);
    cleanup.notify_one();
    boundary.drain_abandoned().await;
    assert_eq!(exec.drains.load(Ordering::SeqCst), 2);
}
