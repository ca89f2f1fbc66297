//! The seed's Fake Tool/Projector scenarios through the public boundary.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use aci_contracts::{ErrorCode, EvidenceStatus, InvocationStatus, RunId, ToolCallId};
use invocation_core::clock::add;
use invocation_core::{
    BoundaryOutcome, CallPolicy, Clock, InvocationKey, InvocationStore, LimitOverrides, Limits,
    ModelObservation, RecordFields, RunContext, ToolEnvelope,
};
use serde_json::json;
use support::*;

fn run() -> RunId {
    RunId::new("run-1").unwrap()
}

fn ctx() -> RunContext {
    RunContext::new(run(), invocation_core::CallPolicy::AUTHORIZED_READ_ONLY)
}

fn envelope(id: &str, arguments: String) -> ToolEnvelope {
    ToolEnvelope::new(id, "run-1", TOOL, arguments)
}

fn key(id: &str) -> InvocationKey {
    InvocationKey::new(run(), ToolCallId::new(id).unwrap())
}

/// Nothing agent-facing or harness-facing carries raw data or failure text.
fn assert_clean(outcome: &BoundaryOutcome) {
    let text = serde_json::to_string(outcome).unwrap();
    for forbidden in [SENTINEL, "exploded", "upstream said", "panicked"] {
        assert!(!text.contains(forbidden), "{forbidden} leaked into {text}");
    }
}

fn assert_error(outcome: &BoundaryOutcome, code: ErrorCode) {
    assert_clean(outcome);
    let ModelObservation::Error(error) = &outcome.observation else {
        panic!("expected {code}, got {:?}", outcome.observation);
    };
    assert_eq!(error.error_code(), code);
    assert_eq!(outcome.control.error_code, Some(code));
    assert_eq!(outcome.control.status, InvocationStatus::Error);
    assert_eq!(outcome.control.evidence_status, EvidenceStatus::Error);
    let json = outcome.observation.to_json();
    assert_eq!(json["message"], code.message());
    assert_eq!(json["evidence_status"], "ERROR");
}

async fn record(f: &Fixture, id: &str) -> invocation_core::InvocationRecord {
    f.store
        .get(&key(id), RecordFields::All)
        .await
        .unwrap()
        .expect("record exists")
}

#[tokio::test]
async fn success_records_everything_and_returns_only_the_observation() {
    let f = fixture(Limits::default());
    let outcome = f
        .boundary
        .invoke(&ctx(), envelope("call_ok", args(Mode::Found, "pool 数据")))
        .await;
    assert_clean(&outcome);
    let observation = outcome.observation.to_json();
    assert_eq!(
        observation,
        json!({
            "evidence_status": "EVIDENCE_FOUND",
            "tool_call_id": "call_ok",
            "query": "pool 数据",
            "evidence": [{
                "document_id": "d1", "source": "probe", "title": "Probe",
                "breadcrumb": "Probe", "excerpt": "evidence about pool 数据"
            }],
            "truncated": false
        }),
        "the observation has no harness counters"
    );
    let control = &outcome.control;
    assert_eq!(control.tool_call_id.as_ref().unwrap().as_str(), "call_ok");
    assert_eq!(control.status, InvocationStatus::Ready);
    assert_eq!(control.returned_count, 1);
    assert_eq!(control.scope_fingerprint.as_ref().unwrap().len(), 64);
    assert!(
        !observation
            .to_string()
            .contains(control.scope_fingerprint.as_ref().unwrap())
    );

    let r = record(&f, "call_ok").await;
    assert_eq!(r.status, InvocationStatus::Ready);
    assert_eq!(r.evidence_status, Some(EvidenceStatus::EvidenceFound));
    assert_eq!(
        r.request_json.as_deref(),
        Some(args(Mode::Found, "pool 数据").as_str())
    );
    assert!(
        r.raw_json.as_deref().unwrap().contains(SENTINEL),
        "raw kept for the harness"
    );
    let stored: serde_json::Value =
        serde_json::from_str(r.agent_result_json.as_deref().unwrap()).unwrap();
    assert_eq!(stored["returned_count"], 1);
    assert_eq!(stored["tool_call_id"], "call_ok");
    assert!(r.finished_at.is_some());
    assert_eq!((f.counters.executed(), f.counters.projected()), (1, 1));
}

#[tokio::test]
async fn no_evidence_is_ready_and_never_retried() {
    let f = fixture(Limits::default());
    let outcome = f
        .boundary
        .invoke(&ctx(), envelope("c1", args(Mode::NoEvidence, "nothing")))
        .await;
    assert_eq!(outcome.control.status, InvocationStatus::Ready);
    assert_eq!(outcome.control.evidence_status, EvidenceStatus::NoEvidence);
    assert_eq!(
        outcome.observation.evidence_status(),
        EvidenceStatus::NoEvidence
    );
    assert!(!outcome.observation.is_error());
    assert_eq!(
        outcome.observation.to_json()["query"],
        "nothing",
        "the scope is kept"
    );
    assert_eq!(f.counters.executed(), 1, "not retried");
    assert_eq!(
        record(&f, "c1").await.evidence_status,
        Some(EvidenceStatus::NoEvidence)
    );
}

#[tokio::test]
async fn executor_error_panic_and_timeout_finalize_error() {
    let f = fixture_with(Limits::default(), |s| s.timeout(Duration::from_millis(50)));
    for (id, mode, code) in [
        ("e1", Mode::ExecError, ErrorCode::ExecutionFailed),
        ("e2", Mode::ExecPanic, ErrorCode::ExecutionFailed),
        ("e3", Mode::Sleep, ErrorCode::ExecutionTimeout),
    ] {
        let outcome = f
            .boundary
            .invoke(&ctx(), envelope(id, args(mode, "x")))
            .await;
        assert_error(&outcome, code);
        assert_eq!(outcome.control.tool_call_id.as_ref().unwrap().as_str(), id);
        let r = record(&f, id).await;
        assert_eq!(r.status, InvocationStatus::Error);
        assert_eq!(r.error_code, Some(code));
        assert_eq!(r.raw_json, None);
    }
    assert_eq!(f.counters.projected(), 0);
    // The process lives on after a panic: the boundary still works.
    let ok = f
        .boundary
        .invoke(&ctx(), envelope("after", args(Mode::Found, "x")))
        .await;
    assert_eq!(ok.control.status, InvocationStatus::Ready);
}

/// Where a call's time went, phase by phase: in the outcome (for traces)
/// and in the record (for reviews); a phase not reached is unknown.
#[tokio::test]
async fn phase_timings_are_returned_and_recorded() {
    let f = fixture_with(Limits::default(), |s| s.timeout(Duration::from_millis(50)));
    let ok = f
        .boundary
        .invoke(&ctx(), envelope("t_ok", args(Mode::Found, "x")))
        .await;
    assert_eq!(ok.control.status, InvocationStatus::Ready);
    assert!(ok.timings.execution.is_some() && ok.timings.projection.is_some());
    assert_eq!(record(&f, "t_ok").await.timings, Some(ok.timings));

    let slow = f
        .boundary
        .invoke(&ctx(), envelope("t_slow", args(Mode::Sleep, "x")))
        .await;
    assert_error(&slow, ErrorCode::ExecutionTimeout);
    let execution = slow.timings.execution.expect("the executor ran");
    assert!(execution >= Duration::from_millis(50), "{execution:?}");
    assert_eq!(slow.timings.projection, None, "never projected");
    assert_eq!(record(&f, "t_slow").await.timings, Some(slow.timings));

    let refused = f
        .boundary
        .invoke(&ctx(), envelope("t_refused", "[]".to_owned()))
        .await;
    assert_error(&refused, ErrorCode::InvalidInput);
    assert_eq!(
        (refused.timings.execution, refused.timings.projection),
        (None, None)
    );
    assert!(
        f.store
            .get(&key("t_refused"), RecordFields::Metadata)
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test]
async fn retryability_is_recorded_with_the_error_and_shown_to_the_harness_only() {
    let f = fixture(Limits::default());
    for (id, mode, retryable) in [
        ("transient", Mode::ExecError, true),
        ("permanent", Mode::ExecRefused, false),
    ] {
        let outcome = f
            .boundary
            .invoke(&ctx(), envelope(id, args(mode, "x")))
            .await;
        // The model gets the code's constant message either way.
        assert_error(&outcome, ErrorCode::ExecutionFailed);
        assert!(
            !outcome.observation.to_json_string().contains("retryable"),
            "{id}"
        );
        assert_eq!(outcome.control.retryable, Some(retryable), "{id}");
        assert_eq!(record(&f, id).await.retryable, Some(retryable), "{id}");
    }
    // A refusal before any record says what its code says.
    let refused = f
        .boundary
        .invoke(&ctx(), envelope("", args(Mode::Found, "x")))
        .await;
    assert_eq!(
        refused.control.error_code,
        Some(ErrorCode::InvalidToolCallId)
    );
    assert_eq!(
        refused.control.retryable,
        Some(ErrorCode::InvalidToolCallId.is_transient())
    );
    let ready = f
        .boundary
        .invoke(&ctx(), envelope("ok", args(Mode::Found, "x")))
        .await;
    assert_eq!(ready.control.retryable, None);
    assert_eq!(record(&f, "ok").await.retryable, None);
}

#[tokio::test]
async fn the_run_deadline_cuts_execution_short() {
    let f = fixture(Limits::default());
    let deadline = add(f.clock.now(), Duration::from_millis(80));
    let ctx = ctx().with_deadline(deadline);
    let outcome = f
        .boundary
        .invoke(&ctx, envelope("late", args(Mode::Sleep, "x")))
        .await;
    assert_error(&outcome, ErrorCode::ExecutionTimeout);
}

#[tokio::test]
async fn projector_error_panic_and_bad_results_keep_raw_for_the_harness() {
    let f = fixture(Limits::default());
    for (id, mode, code) in [
        ("p1", Mode::ProjError, ErrorCode::ProjectionFailed),
        ("p2", Mode::ProjPanic, ErrorCode::ProjectionFailed),
        ("p4", Mode::Inconsistent, ErrorCode::InvalidEvidenceStatus),
        ("p5", Mode::WrongId, ErrorCode::InvalidEvidenceStatus),
    ] {
        let outcome = f
            .boundary
            .invoke(&ctx(), envelope(id, args(mode, "x")))
            .await;
        assert_error(&outcome, code);
        let r = record(&f, id).await;
        assert_eq!(r.status, InvocationStatus::Error, "{id}");
        assert_eq!(r.error_code, Some(code));
        assert!(
            r.raw_json.as_deref().unwrap().contains(SENTINEL),
            "{id}: raw stays harness-only data"
        );
        assert_eq!(r.agent_result_json, None, "{id}: no agent result");
    }
}

#[tokio::test]
async fn duplicate_call_id_is_refused_without_executing_or_overwriting() {
    let f = fixture(Limits::default());
    let first = f
        .boundary
        .invoke(&ctx(), envelope("dup", args(Mode::Found, "first")))
        .await;
    assert_eq!(first.control.status, InvocationStatus::Ready);
    let second = f
        .boundary
        .invoke(&ctx(), envelope("dup", args(Mode::Found, "second")))
        .await;
    assert_error(&second, ErrorCode::DuplicateToolCall);
    assert_eq!(
        second.control.tool_call_id.as_ref().unwrap().as_str(),
        "dup"
    );
    assert_eq!(f.counters.executed(), 1);
    let r = record(&f, "dup").await;
    assert!(r.request_json.unwrap().contains("first"));
}

#[tokio::test]
async fn same_scope_is_flagged_as_duplicate_of_for_the_harness() {
    let f = fixture(Limits::default());
    let a = f
        .boundary
        .invoke(&ctx(), envelope("a", args(Mode::Found, "q")))
        .await;
    let b = f
        .boundary
        .invoke(
            &ctx(),
            envelope("b", r#"{ "text": "q", "mode": "found" }"#.into()),
        )
        .await;
    assert_eq!(a.control.duplicate_of, None);
    assert_eq!(b.control.duplicate_of.as_ref().unwrap().as_str(), "a");
    assert_eq!(a.control.scope_fingerprint, b.control.scope_fingerprint);
    assert_eq!(f.counters.executed(), 2, "the default policy never replays");
    assert!(!b.observation.to_json().to_string().contains("duplicate"));
}

#[tokio::test]
async fn ttl_is_set_at_creation_and_reads_never_refresh_it() {
    let ttl = Duration::from_secs(3600);
    let f = fixture(Limits {
        record_ttl: ttl,
        ..Limits::default()
    });
    f.boundary
        .invoke(&ctx(), envelope("t1", args(Mode::Found, "x")))
        .await;
    assert_eq!(f.store.remaining_ttl(&key("t1")).await.unwrap(), Some(ttl));
    f.clock.advance(Duration::from_secs(1800));
    for _ in 0..100 {
        f.boundary.recall(&run(), "t1").await.unwrap();
        f.boundary.verify_citations(&ctx(), &["t1"]).await;
        f.boundary
            .journal()
            .entries(&run(), RecordFields::All)
            .await
            .unwrap();
    }
    assert_eq!(
        f.store.remaining_ttl(&key("t1")).await.unwrap(),
        Some(Duration::from_secs(1800))
    );
    f.clock.advance(Duration::from_secs(1801));
    assert_eq!(f.store.remaining_ttl(&key("t1")).await.unwrap(), None);
    assert_eq!(
        f.boundary.recall(&run(), "t1").await,
        Err(invocation_core::NotCitable::UnknownOrExpired)
    );
}

#[tokio::test]
async fn per_tool_ttl_overrides_the_global_one() {
    let f = fixture_with(Limits::default(), |s| {
        s.limits(LimitOverrides {
            record_ttl: Some(Duration::from_secs(60)),
            ..LimitOverrides::default()
        })
    });
    f.boundary
        .invoke(&ctx(), envelope("t1", args(Mode::Found, "x")))
        .await;
    assert_eq!(
        f.store.remaining_ttl(&key("t1")).await.unwrap(),
        Some(Duration::from_secs(60))
    );
}

#[tokio::test]
async fn a_record_that_expires_during_execution_is_not_recreated() {
    let ttl = Duration::from_secs(60);
    let clock_advance = Duration::from_secs(61);
    let f = fixture(Limits {
        record_ttl: ttl,
        ..Limits::default()
    });
    // A second boundary whose executor moves the shared clock past the TTL.
    let g = {
        let executor = f.executor.clone().advancing(f.clock.clone(), clock_advance);
        let projector = executor.projector();
        invocation_core::ToolBoundary::builder(std::sync::Arc::new(f.store.clone()))
            .clock(std::sync::Arc::new(f.clock.clone()))
            .limits(Limits {
                record_ttl: ttl,
                ..Limits::default()
            })
            .tool(
                invocation_core::ToolSpec::new(TOOL, "probe", executor, projector).read_only(true),
            )
            .build()
            .unwrap()
    };
    let outcome = g
        .invoke(&ctx(), envelope("slowpoke", args(Mode::AdvanceClock, "x")))
        .await;
    assert_error(&outcome, ErrorCode::RecordExpired);
    assert!(
        f.store
            .get(&key("slowpoke"), RecordFields::All)
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        f.store
            .list(&run(), RecordFields::All)
            .await
            .unwrap()
            .is_empty()
    );
}

fn sized(raw_bytes: usize, result_bytes: usize) -> String {
    serde_json::to_string(&ProbeRequest {
        mode: Mode::Sized,
        text: String::new(),
        raw_bytes,
        result_bytes,
    })
    .unwrap()
}

/// Arguments of exactly `n` bytes, padded with multi-byte text.
fn request_of_size(n: usize) -> String {
    let base = args(Mode::Found, "").len();
    let text = utf8_fill(n - base);
    let out = args(Mode::Found, &text);
    assert_eq!(out.len(), n);
    out
}

#[tokio::test]
async fn request_limit_exactly_and_one_byte_over() {
    let limits = Limits {
        max_request_bytes: 300,
        ..Limits::default()
    };
    let f = fixture(limits);
    let at = f
        .boundary
        .invoke(&ctx(), envelope("at", request_of_size(300)))
        .await;
    assert_eq!(at.control.status, InvocationStatus::Ready);
    let over = f
        .boundary
        .invoke(&ctx(), envelope("over", request_of_size(301)))
        .await;
    assert_error(&over, ErrorCode::RequestTooLarge);
    assert!(
        f.store
            .get(&key("over"), RecordFields::All)
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(f.counters.executed(), 1);
}

#[tokio::test]
async fn raw_limit_exactly_and_one_byte_over() {
    let limits = Limits {
        max_raw_bytes: 4000,
        ..Limits::default()
    };
    let f = fixture(limits);
    let at = f
        .boundary
        .invoke(&ctx(), envelope("at", sized(4000, 0)))
        .await;
    assert_eq!(
        at.control.status,
        InvocationStatus::Ready,
        "{:?}",
        at.control.error_code
    );
    assert_eq!(record(&f, "at").await.raw_bytes, Some(4000));
    assert!(record(&f, "at").await.raw_json.unwrap().contains('数'));

    let over = f
        .boundary
        .invoke(&ctx(), envelope("over", sized(4001, 0)))
        .await;
    assert_error(&over, ErrorCode::ResultTooLarge);
    let r = record(&f, "over").await;
    assert_eq!(
        r.raw_json, None,
        "oversized raw is not stored, not truncated"
    );
    assert_eq!(r.error_code, Some(ErrorCode::ResultTooLarge));
    assert_eq!(
        f.counters.projected(),
        1,
        "the projector never saw the oversized raw"
    );
}

#[tokio::test]
async fn agent_result_limit_exactly_and_one_byte_over() {
    let limits = Limits {
        max_agent_result_bytes: 1000,
        ..Limits::default()
    };
    let f = fixture(limits);
    let at = f
        .boundary
        .invoke(&ctx(), envelope("at", sized(0, 1000)))
        .await;
    assert_eq!(at.control.status, InvocationStatus::Ready);
    assert_eq!(record(&f, "at").await.agent_result_bytes, Some(1000));

    let over = f
        .boundary
        .invoke(&ctx(), envelope("over", sized(0, 1001)))
        .await;
    assert_error(&over, ErrorCode::ResultTooLarge);
    assert!(
        !over.observation.to_json().to_string().contains('数'),
        "the oversized result is not returned"
    );
    let r = record(&f, "over").await;
    assert_eq!(r.agent_result_json, None);
    assert!(r.raw_json.is_some(), "raw stays harness-only data");
}

#[tokio::test]
async fn record_limit_exactly_and_one_byte_over() {
    let request_len = sized(2000, 1000).len();
    assert_eq!(request_len, sized(2001, 1000).len());
    let limits = Limits {
        max_record_bytes: request_len + 3000,
        ..Limits::default()
    };
    let f = fixture(limits);
    let at = f
        .boundary
        .invoke(&ctx(), envelope("at", sized(2000, 1000)))
        .await;
    assert_eq!(at.control.status, InvocationStatus::Ready);
    let over = f
        .boundary
        .invoke(&ctx(), envelope("over", sized(2001, 1000)))
        .await;
    assert_error(&over, ErrorCode::ResultTooLarge);
    let r = record(&f, "over").await;
    assert_eq!(r.agent_result_json, None);
}

#[tokio::test]
async fn every_preflight_rejection_runs_nothing_and_records_nothing() {
    let f = fixture_with(
        Limits {
            max_request_bytes: 200,
            ..Limits::default()
        },
        |s| s,
    );
    {
        let g = fixture_with(Limits::default(), |s| s.read_only(false));
        let outcome = g
            .boundary
            .invoke(&ctx(), envelope("w", args(Mode::Found, "x")))
            .await;
        assert_error(&outcome, ErrorCode::NotReadOnly);
        assert_eq!(g.counters.executed(), 0);
        assert!(
            g.store
                .list(&run(), RecordFields::All)
                .await
                .unwrap()
                .is_empty()
        );
    };
    let valid = || envelope("c1", args(Mode::Found, "x"));
    let past = add(f.clock.now(), Duration::ZERO);
    let cases: Vec<(&str, RunContext, ToolEnvelope, ErrorCode, bool)> = vec![
        (
            "empty id",
            ctx(),
            ToolEnvelope {
                tool_call_id: String::new(),
                ..valid()
            },
            ErrorCode::InvalidToolCallId,
            false,
        ),
        (
            "blank id",
            ctx(),
            ToolEnvelope {
                tool_call_id: "  ".into(),
                ..valid()
            },
            ErrorCode::InvalidToolCallId,
            false,
        ),
        (
            "padded id",
            ctx(),
            ToolEnvelope {
                tool_call_id: " c1".into(),
                ..valid()
            },
            ErrorCode::InvalidToolCallId,
            false,
        ),
        (
            "hash tag id",
            ctx(),
            ToolEnvelope {
                tool_call_id: "{c1}".into(),
                ..valid()
            },
            ErrorCode::InvalidToolCallId,
            false,
        ),
        (
            "unicode id",
            ctx(),
            ToolEnvelope {
                tool_call_id: "调用1".into(),
                ..valid()
            },
            ErrorCode::InvalidToolCallId,
            false,
        ),
        (
            "long id",
            ctx(),
            ToolEnvelope {
                tool_call_id: "x".repeat(129),
                ..valid()
            },
            ErrorCode::InvalidToolCallId,
            false,
        ),
        (
            "bad id beats bad run",
            ctx(),
            ToolEnvelope {
                tool_call_id: "a b".into(),
                run_id: "other".into(),
                ..valid()
            },
            ErrorCode::InvalidToolCallId,
            false,
        ),
        (
            "other run",
            ctx(),
            ToolEnvelope {
                run_id: "run-2".into(),
                ..valid()
            },
            ErrorCode::RunMismatch,
            true,
        ),
        (
            "run differs by case",
            ctx(),
            ToolEnvelope {
                run_id: "RUN-1".into(),
                ..valid()
            },
            ErrorCode::RunMismatch,
            true,
        ),
        (
            "inactive",
            ctx().inactive(),
            valid(),
            ErrorCode::RunInactive,
            true,
        ),
        (
            "inactive beats deadline",
            ctx().inactive().with_deadline(past),
            valid(),
            ErrorCode::RunInactive,
            true,
        ),
        (
            "deadline now",
            ctx().with_deadline(past),
            valid(),
            ErrorCode::RunDeadlineExceeded,
            true,
        ),
        (
            "unknown tool",
            ctx(),
            ToolEnvelope {
                tool_name: "nope".into(),
                ..valid()
            },
            ErrorCode::UnknownTool,
            true,
        ),
        (
            "unauthorized",
            ctx().with_policy(CallPolicy::UNAUTHORIZED),
            valid(),
            ErrorCode::Unauthorized,
            true,
        ),
        (
            "unauthorized beats writable",
            ctx().with_policy(CallPolicy::new(false, false)),
            valid(),
            ErrorCode::Unauthorized,
            true,
        ),
        (
            "writable call",
            ctx().with_policy(CallPolicy::new(true, false)),
            valid(),
            ErrorCode::NotReadOnly,
            true,
        ),
        (
            "not json",
            ctx(),
            ToolEnvelope {
                arguments: "{mode".into(),
                ..valid()
            },
            ErrorCode::InvalidInput,
            true,
        ),
        (
            "array",
            ctx(),
            ToolEnvelope {
                arguments: r#"["found","x"]"#.into(),
                ..valid()
            },
            ErrorCode::InvalidInput,
            true,
        ),
        (
            "string",
            ctx(),
            ToolEnvelope {
                arguments: r#""found""#.into(),
                ..valid()
            },
            ErrorCode::InvalidInput,
            true,
        ),
        (
            "null",
            ctx(),
            ToolEnvelope {
                arguments: "null".into(),
                ..valid()
            },
            ErrorCode::InvalidInput,
            true,
        ),
        (
            "unknown field",
            ctx(),
            ToolEnvelope {
                arguments: r#"{"mode":"found","topK":3}"#.into(),
                ..valid()
            },
            ErrorCode::InvalidInput,
            true,
        ),
        (
            "missing field",
            ctx(),
            ToolEnvelope {
                arguments: r#"{"text":"x"}"#.into(),
                ..valid()
            },
            ErrorCode::InvalidInput,
            true,
        ),
        (
            "wrong type",
            ctx(),
            ToolEnvelope {
                arguments: r#"{"mode":"found","text":7}"#.into(),
                ..valid()
            },
            ErrorCode::InvalidInput,
            true,
        ),
        (
            "trailing junk",
            ctx(),
            ToolEnvelope {
                arguments: r#"{"mode":"found"} x"#.into(),
                ..valid()
            },
            ErrorCode::InvalidInput,
            true,
        ),
        (
            "tool validation",
            ctx(),
            ToolEnvelope {
                arguments: args(Mode::Found, "invalid"),
                ..valid()
            },
            ErrorCode::InvalidInput,
            true,
        ),
        (
            "too large beats invalid: the size is checked before decoding",
            ctx(),
            ToolEnvelope {
                arguments: format!("[{}]", "1,".repeat(200)),
                ..valid()
            },
            ErrorCode::RequestTooLarge,
            true,
        ),
        (
            "too large",
            ctx(),
            ToolEnvelope {
                arguments: args(Mode::Found, &"数".repeat(100)),
                ..valid()
            },
            ErrorCode::RequestTooLarge,
            true,
        ),
    ];
    for (name, ctx, envelope, code, id_valid) in cases {
        let outcome = f.boundary.invoke(&ctx, envelope).await;
        assert_error(&outcome, code);
        let json = outcome.observation.to_json();
        assert_eq!(
            json.get("tool_call_id").is_some(),
            id_valid,
            "{name}: id only when valid"
        );
        if id_valid {
            assert_eq!(json["tool_call_id"], "c1", "{name}");
        }
        assert_eq!(f.counters.executed(), 0, "{name}: the executor never ran");
        assert!(
            f.store
                .list(&run(), RecordFields::All)
                .await
                .unwrap()
                .is_empty(),
            "{name}: no record"
        );
    }
}

#[tokio::test]
async fn sixty_four_concurrent_calls_with_one_id_execute_once() {
    let f = fixture(Limits::default());
    let mut tasks = Vec::new();
    for _ in 0..64 {
        let b = f.boundary.clone();
        tasks.push(tokio::spawn(async move {
            b.invoke(&ctx(), envelope("same", args(Mode::Found, "x")))
                .await
        }));
    }
    let mut ready = 0;
    for task in tasks {
        let outcome = task.await.unwrap();
        match outcome.control.status {
            InvocationStatus::Ready => ready += 1,
            _ => assert_error(&outcome, ErrorCode::DuplicateToolCall),
        }
    }
    assert_eq!(ready, 1);
    assert_eq!(f.counters.executed(), 1);
    assert_eq!(
        f.store.list(&run(), RecordFields::All).await.unwrap().len(),
        1
    );
}

#[tokio::test]
async fn budgets_stop_calls_before_execution() {
    let f = fixture(Limits::default());
    let ctx = ctx().with_run_budget(3).with_tool_budget(TOOL, 2);
    let a = f
        .boundary
        .invoke(&ctx, envelope("a", args(Mode::Found, "1")))
        .await;
    let b = f
        .boundary
        .invoke(&ctx, envelope("b", args(Mode::ExecError, "2")))
        .await;
    let c = f
        .boundary
        .invoke(&ctx, envelope("c", args(Mode::Found, "3")))
        .await;
    assert_eq!(a.control.status, InvocationStatus::Ready);
    assert_error(&b, ErrorCode::ExecutionFailed);
    assert_error(&c, ErrorCode::ToolBudgetExhausted);
    assert_eq!(
        f.counters.executed(),
        2,
        "failed calls count, refused ones do not run"
    );
    let ctx = RunContext::new(run(), invocation_core::CallPolicy::AUTHORIZED_READ_ONLY)
        .with_run_budget(2);
    let d = f
        .boundary
        .invoke(&ctx, envelope("d", args(Mode::Found, "4")))
        .await;
    assert_error(&d, ErrorCode::RunBudgetExhausted);
}

#[tokio::test]
async fn citations_and_recall() {
    let f = fixture(Limits::default());
    f.boundary
        .invoke(&ctx(), envelope("found", args(Mode::Found, "x")))
        .await;
    f.boundary
        .invoke(&ctx(), envelope("empty", args(Mode::NoEvidence, "y")))
        .await;
    f.boundary
        .invoke(&ctx(), envelope("broken", args(Mode::ProjError, "z")))
        .await;
    let checks = f
        .boundary
        .verify_citations(&ctx(), &["found", "empty", "broken", "missing", ""])
        .await;
    let json = serde_json::to_value(&checks).unwrap();
    assert_eq!(
        json,
        json!([
            {"citation": "found", "verdict": {"verdict": "EVIDENCE", "tool_name": "probe"}},
            {"citation": "empty", "verdict": {"verdict": "NEGATIVE_OBSERVATION", "tool_name": "probe",
                "scope": {"mode": "no_evidence", "text": "y", "raw_bytes": 0, "result_bytes": 0}}},
            {"citation": "broken", "verdict": {"verdict": "NOT_CITABLE", "reason": "FAILED", "error_code": "PROJECTION_FAILED"}},
            {"citation": "missing", "verdict": {"verdict": "NOT_CITABLE", "reason": "UNKNOWN_OR_EXPIRED"}},
            {"citation": "", "verdict": {"verdict": "NOT_CITABLE", "reason": "INVALID_ID"}}
        ])
    );
    let recalled = f.boundary.recall(&run(), "found").await.unwrap();
    assert_eq!(recalled["tool_call_id"], "found");
    assert!(recalled.get("returned_count").is_none());
    assert_eq!(f.counters.executed(), 3, "recall executes nothing");
}
