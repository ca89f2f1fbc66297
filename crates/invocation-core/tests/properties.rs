//! Property tests: the lifecycle against a reference model, preflight over
//! arbitrary envelopes, and budgets under concurrency.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use aci_contracts::{ErrorCode, InvocationStatus, RunId, ToolCallId};
use invocation_core::clock::add;
use invocation_core::conformance::new_invocation;
use invocation_core::{
    CallPolicy, Clock, Finalization, InvocationKey, InvocationStore, Limits, ManualClock,
    ReadyEvidence, RecordFields, RunContext, StoreError, ToolEnvelope,
};
use proptest::prelude::*;
use store_memory::MemoryStore;
use support::*;

fn cases(default: u32) -> ProptestConfig {
    testkit::proptest_config_with_default(default)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

// ---------------------------------------------------------------------------
// The lifecycle as a state machine against a reference model.

#[derive(Debug, Clone)]
enum Op {
    Create(usize),
    FinalizeReady(usize),
    FinalizeError(usize),
    Read(usize),
    List,
    Advance(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..6_usize).prop_map(Op::Create),
        3 => (0..6_usize).prop_map(Op::FinalizeReady),
        2 => (0..6_usize).prop_map(Op::FinalizeError),
        3 => (0..6_usize).prop_map(Op::Read),
        1 => Just(Op::List),
        2 => (0..80_u64).prop_map(Op::Advance),
    ]
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ModelRecord {
    status: InvocationStatus,
    expires_at: i64,
    created_seq: u64,
}

proptest! {
    #![proptest_config(cases(96))]

    #[test]
    fn lifecycle_matches_the_reference_model(ops in prop::collection::vec(op(), 1..60)) {
        let ttl = Duration::from_secs(100);
        let clock = ManualClock::at_default_start();
        let store = MemoryStore::with_clock(Arc::new(clock.clone()));
        let run = RunId::new("model-run").unwrap();
        let mut model: HashMap<usize, ModelRecord> = HashMap::new();
        let mut seq = 0_u64;
        let rt = runtime();
        for op in ops {
            let now = clock.now().unix_millis();
            model.retain(|_, r| r.expires_at > now);
            let key_of = |i: usize| InvocationKey::new(run.clone(), ToolCallId::new(format!("id{i}")).unwrap());
            match op {
                Op::Create(i) => {
                    let mut new = new_invocation(&clock, &run, &format!("id{i}"), "tool", "q");
                    new.ttl = ttl;
                    let result = rt.block_on(store.create(new));
                    if let std::collections::hash_map::Entry::Vacant(slot) = model.entry(i) {
                        prop_assert!(result.is_ok());
                        seq += 1;
                        slot.insert(ModelRecord {
                            status: InvocationStatus::Projecting,
                            expires_at: now + 100_000,
                            created_seq: seq,
                        });
                    } else {
                        prop_assert!(matches!(result, Err(StoreError::Duplicate)));
                    }
                }
                Op::FinalizeReady(i) | Op::FinalizeError(i) => {
                    let ready = matches!(op, Op::FinalizeReady(_));
                    let finalization = if ready {
                        Finalization::Ready {
                            evidence: ReadyEvidence::Found,
                            raw_json: "{}".into(),
                            agent_result_json: "{}".into(),
                            redactions: Default::default(),
                            replayed_from: None,
                            finished_at: clock.now(),
                            timings: None,
                        }
                    } else {
                        Finalization::Error { error_code: ErrorCode::ExecutionFailed, retryable: true, raw_json: None, finished_at: clock.now(), timings: None }
                    };
                    let result = rt.block_on(store.finalize(&key_of(i), finalization));
                    match model.get_mut(&i) {
                        None => prop_assert!(matches!(result, Err(StoreError::NotFound))),
                        Some(r) if r.status == InvocationStatus::Projecting => {
                            prop_assert!(result.is_ok());
                            r.status = if ready { InvocationStatus::Ready } else { InvocationStatus::Error };
                        }
                        Some(r) => {
                            let is_refusal = matches!(result, Err(StoreError::NotProjecting { current }) if current == r.status);
                            prop_assert!(is_refusal);
                        }
                    }
                }
                Op::Read(i) => {
                    let before = rt.block_on(store.remaining_ttl(&key_of(i))).unwrap();
                    let got = rt.block_on(store.get(&key_of(i), RecordFields::Metadata)).unwrap();
                    prop_assert_eq!(got.map(|r| r.status), model.get(&i).map(|r| r.status));
                    let after = rt.block_on(store.remaining_ttl(&key_of(i))).unwrap();
                    prop_assert_eq!(before, after, "a read changed the TTL");
                    let expected = model.get(&i).map(|r| Duration::from_millis((r.expires_at - now) as u64));
                    prop_assert_eq!(after, expected);
                }
                Op::List => {
                    let listed: Vec<String> = rt
                        .block_on(store.list(&run, RecordFields::Metadata))
                        .unwrap()
                        .into_iter()
                        .map(|r| r.key.tool_call_id.into_string())
                        .collect();
                    let mut expected: Vec<(u64, usize)> = model.iter().map(|(i, r)| (r.created_seq, *i)).collect();
                    expected.sort_unstable();
                    let expected: Vec<String> = expected.into_iter().map(|(_, i)| format!("id{i}")).collect();
                    prop_assert_eq!(listed, expected);
                }
                Op::Advance(secs) => clock.advance(Duration::from_secs(secs)),
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Preflight over arbitrary envelopes.

#[derive(Debug, Clone)]
struct Case {
    tool_call_id: String,
    same_run: bool,
    active: bool,
    deadline: Option<bool>,
    known_tool: bool,
    authorized: bool,
    read_only: bool,
    arguments: String,
    max_request_bytes: usize,
}

fn id_strategy() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[A-Za-z0-9_.:-]{1,40}",
        1 => Just(String::new()),
        1 => "[ \t]{1,3}",
        1 => "[a-z]{1,5}[ {}*?/\\\\\"'\\[\\]é调][a-z]{0,5}",
        1 => "[a-z]{129,140}",
        1 => any::<String>(),
    ]
}

fn arguments_strategy() -> impl Strategy<Value = String> {
    let modes = prop::sample::select(vec![
        Mode::Found,
        Mode::NoEvidence,
        Mode::ExecError,
        Mode::ExecPanic,
        Mode::ProjError,
        Mode::ProjPanic,
        Mode::Inconsistent,
        Mode::WrongId,
    ]);
    prop_oneof![
        6 => (modes, "[a-z数😀 ]{0,60}").prop_map(|(m, t)| args(m, &t)),
        1 => Just("{}".to_owned()),
        1 => Just("[]".to_owned()),
        1 => Just("\"found\"".to_owned()),
        1 => Just(r#"{"mode":"found","extra":1}"#.to_owned()),
        1 => Just(args(Mode::Found, "invalid")),
        1 => any::<String>(),
    ]
}

fn case() -> impl Strategy<Value = Case> {
    (
        id_strategy(),
        prop::bool::weighted(0.9),
        prop::bool::weighted(0.9),
        prop::option::of(prop::bool::weighted(0.7)),
        prop::bool::weighted(0.9),
        prop::bool::weighted(0.9),
        prop::bool::weighted(0.9),
        arguments_strategy(),
        prop_oneof![Just(16 * 1024), 20..120_usize],
    )
        .prop_map(
            |(
                tool_call_id,
                same_run,
                active,
                deadline,
                known_tool,
                authorized,
                read_only,
                arguments,
                max_request_bytes,
            )| Case {
                tool_call_id,
                same_run,
                active,
                deadline,
                known_tool,
                authorized,
                read_only,
                arguments,
                max_request_bytes,
            },
        )
}

/// The first failing preflight condition, in the documented order.
fn expected_rejection(c: &Case) -> Option<ErrorCode> {
    let decodes = c.arguments.trim_start().starts_with('{')
        && serde_json::from_str::<ProbeRequest>(&c.arguments).is_ok_and(|r| r.text != "invalid");
    [
        (
            ToolCallId::new(c.tool_call_id.as_str()).is_err(),
            ErrorCode::InvalidToolCallId,
        ),
        (!c.same_run, ErrorCode::RunMismatch),
        (!c.active, ErrorCode::RunInactive),
        (c.deadline == Some(false), ErrorCode::RunDeadlineExceeded),
        (!c.known_tool, ErrorCode::UnknownTool),
        (!c.authorized, ErrorCode::Unauthorized),
        (!c.read_only, ErrorCode::NotReadOnly),
        (
            c.arguments.len() > c.max_request_bytes,
            ErrorCode::RequestTooLarge,
        ),
        (!decodes, ErrorCode::InvalidInput),
    ]
    .into_iter()
    .find_map(|(failed, code)| failed.then_some(code))
}

proptest! {
    #![proptest_config(cases(256))]

    #[test]
    fn the_executor_runs_exactly_when_preflight_passes(c in case()) {
        let f = fixture(Limits { max_request_bytes: c.max_request_bytes, ..Limits::default() });
        let run = RunId::new("prop-run").unwrap();
        let mut ctx = RunContext::new(run.clone(), CallPolicy::new(c.authorized, c.read_only));
        ctx.active = c.active;
        ctx.deadline = c.deadline.map(|future| {
            if future { add(f.clock.now(), Duration::from_secs(60)) } else { f.clock.now() }
        });
        let envelope = ToolEnvelope {
            tool_call_id: c.tool_call_id.clone(),
            run_id: if c.same_run { run.to_string() } else { "other-run".into() },
            tool_name: if c.known_tool { TOOL.into() } else { "unknown_tool".into() },
            arguments: c.arguments.clone(),
        };
        let outcome = runtime().block_on(f.boundary.invoke(&ctx, envelope));
        let expected = expected_rejection(&c);
        prop_assert_eq!(f.counters.executed() == 1, expected.is_none(), "{:?}", outcome.control);
        match expected {
            Some(code) => {
                prop_assert_eq!(outcome.control.error_code, Some(code));
                let listed = runtime().block_on(f.store.list(&run, RecordFields::All)).unwrap();
                prop_assert!(listed.is_empty(), "a rejected call left a record");
            }
            None => prop_assert!(outcome.control.status != InvocationStatus::Projecting),
        }
        let text = serde_json::to_string(&outcome).unwrap();
        prop_assert!(!text.contains(SENTINEL), "sentinel leaked: {}", text);
        prop_assert!(!text.contains("exploded"), "panic text leaked: {}", text);
        let observation = outcome.observation.to_json();
        if observation.get("tool_call_id").is_some() {
            prop_assert_eq!(observation["tool_call_id"].as_str(), Some(c.tool_call_id.as_str()), "the id is never substituted");
        }
    }
}

// ---------------------------------------------------------------------------
// Budgets under concurrency.

proptest! {
    #![proptest_config(cases(12))]

    #[test]
    fn n_concurrent_distinct_calls_against_budget_b_run_min_n_b(n in 1..48_usize, b in 0..48_u32) {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(4).enable_all().build().unwrap();
        let f = fixture(Limits::default());
        let ctx = RunContext::new(RunId::new("budget-run").unwrap(), invocation_core::CallPolicy::AUTHORIZED_READ_ONLY).with_run_budget(b);
        let outcomes = rt.block_on(async {
            let mut tasks = Vec::new();
            for i in 0..n {
                let (boundary, ctx) = (f.boundary.clone(), ctx.clone());
                tasks.push(tokio::spawn(async move {
                    boundary.invoke(&ctx, ToolEnvelope::new(format!("c{i}"), "budget-run", TOOL, args(Mode::Found, "x"))).await
                }));
            }
            let mut outcomes = Vec::new();
            for task in tasks {
                outcomes.push(task.await.unwrap());
            }
            outcomes
        });
        let expected = n.min(b as usize);
        prop_assert_eq!(f.counters.executed(), expected);
        prop_assert_eq!(outcomes.iter().filter(|o| o.control.status == InvocationStatus::Ready).count(), expected);
        prop_assert!(outcomes.iter().all(|o| o.control.status == InvocationStatus::Ready
            || o.control.error_code == Some(ErrorCode::RunBudgetExhausted)));
        let listed = rt.block_on(f.store.list(&ctx.run_id, RecordFields::Metadata)).unwrap();
        prop_assert_eq!(listed.len(), expected);
    }
}
