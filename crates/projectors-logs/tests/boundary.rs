//! `query_logs` end to end through the `ToolBoundary` with the in-memory store.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

mod common;

use aci_contracts::{
    ErrorCode, EvidenceStatus, InvocationStatus, QueryLogsObservation, RunId, Timestamp,
};
use invocation_core::{
    BoundaryOutcome, Clock, InvocationKey, ManualClock, ModelObservation, RecordFields, RunContext,
    ToolBoundary, ToolEnvelope,
};
use projectors_logs::{LogSource, LogSourceError, MockLogSource, query_logs_tool};
use serde_json::{Value, json};
use store_memory::MemoryStore;

struct Harness {
    clock: ManualClock,
    boundary: ToolBoundary,
    run: RunContext,
    calls: u32,
}

impl Harness {
    fn new(source: impl LogSource) -> Self {
        let clock = ManualClock::at_default_start();
        let shared: Arc<dyn Clock> = Arc::new(clock.clone());
        let boundary =
            ToolBoundary::builder(Arc::new(MemoryStore::with_clock(Arc::clone(&shared))))
                .clock(shared)
                .tool(query_logs_tool(source))
                .build()
                .unwrap();
        Self {
            clock,
            boundary,
            run: RunContext::new(
                RunId::new("run-logs-e2e").unwrap(),
                invocation_core::CallPolicy::AUTHORIZED_READ_ONLY,
            ),
            calls: 0,
        }
    }

    async fn call(&mut self, arguments: Value) -> BoundaryOutcome {
        self.calls += 1;
        let envelope = ToolEnvelope::new(
            format!("call_{}", self.calls),
            self.run.run_id.as_str(),
            "query_logs",
            arguments.to_string(),
        );
        self.boundary.invoke(&self.run, envelope).await
    }

    async fn raw_json(&self, call: u32) -> String {
        let key = InvocationKey::new(
            self.run.run_id.clone(),
            aci_contracts::ToolCallId::new(format!("call_{call}")).unwrap(),
        );
        let record = self
            .boundary
            .store()
            .get(&key, RecordFields::All)
            .await
            .unwrap()
            .unwrap();
        record.raw_json.unwrap()
    }
}

fn ready(outcome: &BoundaryOutcome) -> Value {
    match &outcome.observation {
        ModelObservation::Ready(_) => outcome.observation.to_json(),
        ModelObservation::Error(error) => panic!("expected READY, got {error:?}"),
    }
}

fn error_code(outcome: &BoundaryOutcome) -> ErrorCode {
    assert_eq!(outcome.control.status, InvocationStatus::Error);
    outcome.control.error_code.unwrap()
}

#[tokio::test]
async fn every_topic_finds_recent_evidence() {
    let mut h = Harness::new(MockLogSource::new());
    for (topic, query, matches) in [
        ("APPLICATION", "connection pool", 39),
        ("DATABASE_SLOW_QUERY", "rows_examined FROM orders", 18),
        ("SYSTEM_EVENTS", "DiskPressure", 3),
    ] {
        let outcome = h.call(json!({"topic": topic, "query": query})).await;
        let observation = ready(&outcome);
        assert_eq!(observation["evidence_status"], "EVIDENCE_FOUND", "{topic}");
        assert_eq!(observation["source_kind"], "MOCK");
        assert_eq!(observation["match_count"], matches, "{topic}");
        assert_eq!(
            observation["scope"],
            json!({
                "topic": topic,
                "query": query,
                "lookback_minutes": 60,
                "start_time": "2025-12-31T23:00:00.000Z",
                "end_time": "2026-01-01T00:00:00.000Z"
            })
        );
        assert!(
            observation.get("returned_count").is_none(),
            "counters stay in the control view"
        );
        let events = observation["events"].as_array().unwrap();
        assert!(!events.is_empty() && events.len() <= 20);
        assert!(!observation["patterns"].as_array().unwrap().is_empty());

        let control = &outcome.control;
        assert_eq!(control.status, InvocationStatus::Ready);
        assert_eq!(control.evidence_status, EvidenceStatus::EvidenceFound);
        assert_eq!(control.match_count, Some(matches));
        assert_eq!(control.returned_count, events.len() as u64);
        assert_eq!(
            control.truncated,
            observation["truncated"].as_bool().unwrap()
        );
        assert_eq!(
            control.scope,
            json!({"topic": topic, "query": query.to_lowercase(), "lookback_minutes": 60})
        );

        // The source's extra fields are recorded for the harness, never shown.
        let shown = observation.to_string();
        for forbidden in [
            "host",
            "trace_id",
            "span_id",
            "\"pod\"",
            "thread_id",
            "client_host",
        ] {
            assert!(!shown.contains(forbidden), "{topic}: {forbidden}");
        }
        assert!(h.raw_json(h.calls).await.contains("host\":"), "{topic}");
    }
}

#[tokio::test]
async fn the_model_observation_is_exactly_the_contract_text() {
    let mut h = Harness::new(MockLogSource::new());
    let outcome = h
        .call(json!({"topic": "SYSTEM_EVENTS", "query": "OOM"}))
        .await;
    let text = outcome.observation.to_json_string();
    // Parsed into the typed observation (fields in contract order) for a
    // readable golden; the text itself must already be in that order.
    let typed: QueryLogsObservation = serde_json::from_str(&text).unwrap();
    assert_eq!(serde_json::to_string(&typed).unwrap(), text);
    common::check_golden("observation_evidence_found", &typed);
}

#[tokio::test]
async fn nothing_matching_is_no_evidence_with_its_scope() {
    let mut h = Harness::new(MockLogSource::new());
    let outcome = h
        .call(json!({"topic": "SYSTEM_EVENTS", "query": "kernel panic", "lookback_minutes": 60}))
        .await;
    assert_eq!(outcome.control.status, InvocationStatus::Ready);
    assert_eq!(outcome.control.evidence_status, EvidenceStatus::NoEvidence);
    let observation = ready(&outcome);
    assert_eq!(observation["evidence_status"], "NO_EVIDENCE");
    assert_eq!(observation["match_count"], 0);
    assert_eq!(observation["patterns"], json!([]));
    assert_eq!(observation["events"], json!([]));
    assert_eq!(observation["truncated"], false);
    assert_eq!(observation["tool_call_id"], "call_1");

    // A longer lookback reaches the older event.
    let outcome = h
        .call(json!({"topic": "SYSTEM_EVENTS", "query": "kernel panic", "lookback_minutes": 1440}))
        .await;
    assert_eq!(ready(&outcome)["evidence_status"], "EVIDENCE_FOUND");
    assert_eq!(
        ready(&outcome)["scope"]["start_time"],
        "2025-12-31T00:00:00.000Z"
    );
}

#[tokio::test]
async fn invalid_requests_are_refused_before_any_record() {
    let mut h = Harness::new(MockLogSource::new());
    for arguments in [
        json!({"topic": "APPLICATION", "query": "timeout", "lookback_minutes": 0}),
        json!({"topic": "APPLICATION", "query": "timeout", "lookback_minutes": 1441}),
        json!({"topic": "APPLICATION", "query": "timeout", "lookback_minutes": -5}),
        json!({"topic": "APPLICATION", "query": "   "}),
        json!({"topic": "APPLICATION", "query": "a".repeat(projectors_logs::MAX_QUERY_BYTES + 1)}),
        json!({"topic": "APPLICATION", "query": "timeout", "limit": 5000}),
        json!({"topic": "KAFKA", "query": "timeout"}),
        json!({"query": "timeout"}),
    ] {
        let outcome = h.call(arguments.clone()).await;
        assert_eq!(error_code(&outcome), ErrorCode::InvalidInput, "{arguments}");
        assert!(outcome.control.scope_fingerprint.is_none());
    }
    assert_eq!(
        h.boundary
            .journal()
            .entries(&h.run.run_id, RecordFields::Metadata)
            .await
            .unwrap()
            .len(),
        0
    );
    // The bounds themselves are accepted.
    for minutes in [1, 1440] {
        let outcome = h
            .call(json!({"topic": "APPLICATION", "query": "timeout", "lookback_minutes": minutes}))
            .await;
        assert_eq!(outcome.control.status, InvocationStatus::Ready, "{minutes}");
    }
}

#[tokio::test]
async fn equivalent_requests_share_the_scope_fingerprint() {
    let mut h = Harness::new(MockLogSource::new());
    let fingerprint = |outcome: BoundaryOutcome| outcome.control.scope_fingerprint.unwrap();
    let base = fingerprint(
        h.call(json!({"topic": "APPLICATION", "query": "connection pool"}))
            .await,
    );
    for same in [
        json!({"topic": "APPLICATION", "query": "connection pool", "lookback_minutes": 60}),
        json!({"topic": "APPLICATION", "query": "  Connection \t POOL\n"}),
    ] {
        let outcome = h.call(same.clone()).await;
        assert_eq!(
            outcome.control.duplicate_of.as_ref().map(|d| d.as_str()),
            Some("call_1")
        );
        assert_eq!(fingerprint(outcome), base, "{same}");
    }
    for different in [
        json!({"topic": "APPLICATION", "query": "pool connection"}),
        json!({"topic": "APPLICATION", "query": "connection pool", "lookback_minutes": 61}),
        json!({"topic": "SYSTEM_EVENTS", "query": "connection pool"}),
        json!({"topic": "APPLICATION", "query": "connection pools"}),
    ] {
        let outcome = h.call(different.clone()).await;
        assert!(outcome.control.duplicate_of.is_none(), "{different}");
        assert_ne!(fingerprint(outcome), base, "{different}");
    }
}

#[tokio::test]
async fn the_window_follows_the_boundary_clock() {
    let mut h = Harness::new(
        MockLogSource::new().anchored_at(Timestamp::from_unix_millis(
            ManualClock::at_default_start().now().unix_millis(),
        )),
    );
    let query = json!({"topic": "SYSTEM_EVENTS", "query": "oom"});
    let outcome = h.call(query.clone()).await;
    assert_eq!(ready(&outcome)["match_count"], 6);

    h.clock.advance(Duration::from_secs(2 * 3600));
    let outcome = h.call(query.clone()).await;
    let observation = ready(&outcome);
    assert_eq!(observation["evidence_status"], "NO_EVIDENCE");
    assert_eq!(observation["scope"]["end_time"], "2026-01-01T02:00:00.000Z");
    assert_eq!(
        observation["scope"]["start_time"],
        "2026-01-01T01:00:00.000Z"
    );

    let outcome = h
        .call(json!({"topic": "SYSTEM_EVENTS", "query": "oom", "lookback_minutes": 180}))
        .await;
    assert_eq!(ready(&outcome)["match_count"], 6);
}

/// A source that always fails, with a secret in its driver error.
#[derive(Debug)]
enum FailingSource {
    Reject,
    Transient,
    Permanent,
    Unknown,
}

#[async_trait::async_trait]
impl LogSource for FailingSource {
    fn source_kind(&self) -> aci_contracts::SourceKind {
        aci_contracts::SourceKind::Mock
    }

    async fn query(
        &self,
        _query: &projectors_logs::LogQuery,
    ) -> Result<projectors_logs::LogMatches, LogSourceError> {
        let secret = "connect https://svc:hunter2@logs.internal failed";
        Err(match self {
            Self::Reject => LogSourceError::query_rejected(),
            Self::Transient => LogSourceError::transient(secret),
            Self::Permanent => LogSourceError::permanent(secret),
            Self::Unknown => LogSourceError::data_source_unknown(),
        })
    }
}

#[tokio::test]
async fn source_failures_map_to_safe_codes() {
    for (source, code) in [
        (FailingSource::Transient, ErrorCode::ExecutionFailed),
        (FailingSource::Permanent, ErrorCode::ExecutionFailed),
        (FailingSource::Reject, ErrorCode::QueryRejected),
        (FailingSource::Unknown, ErrorCode::DataSourceUnknown),
    ] {
        let mut h = Harness::new(source);
        let outcome = h
            .call(json!({"topic": "APPLICATION", "query": "timeout"}))
            .await;
        assert_eq!(error_code(&outcome), code);
        let shown = format!("{} {:?}", outcome.observation.to_json(), outcome.control);
        assert!(
            !shown.contains("hunter2") && !shown.contains("logs.internal"),
            "{shown}"
        );
    }
}

/// What the boundary receives from the tool's executor keeps the source's
/// retryability: a permanent failure is not turned into a transient
/// `EXECUTION_FAILED` on the way.
#[tokio::test]
async fn the_executor_keeps_the_sources_retryability() {
    use invocation_core::{ExecutionContext, ExecutionErrorKind, Executor};
    let context = ExecutionContext {
        run_id: RunId::new("run-retry").unwrap(),
        tool_call_id: aci_contracts::ToolCallId::new("call-retry").unwrap(),
        now: Timestamp::from_unix_millis(common::NOW_MILLIS),
        deadline: None,
    };
    let request = common::request(aci_contracts::LogTopic::Application, "timeout", None);
    for (source, kind, retryable) in [
        (FailingSource::Transient, ExecutionErrorKind::Failed, true),
        (FailingSource::Permanent, ExecutionErrorKind::Failed, false),
        (
            FailingSource::Reject,
            ExecutionErrorKind::QueryRejected,
            false,
        ),
        (
            FailingSource::Unknown,
            ExecutionErrorKind::DataSourceUnknown,
            false,
        ),
    ] {
        let error = projectors_logs::LogExecutor::new(source)
            .execute(&request, &context)
            .await
            .unwrap_err();
        assert_eq!(error.kind(), kind);
        assert_eq!(error.retryable(), retryable, "{kind:?}");
        let shown = format!("{error} {error:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
    }
}
