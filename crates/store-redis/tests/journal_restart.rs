//! The journal across a restart, on a real Redis: a harness dies while a tool
//! is running; a fresh harness on the same Redis lists the run, recovers the
//! stale call, replays a READY one without executing, and verifies citations.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use aci_contracts::{ErrorCode, EvidenceStatus, InvocationStatus, RunId};
use invocation_core::clock::add;
use invocation_core::testing::fake::{self, FakeExecutor, SENTINEL, fake_tool};
use invocation_core::{
    CitationVerdict, Clock, InvocationKey, NotCitable, RecordFields, ReplayPolicy, RunContext,
    SystemClock, ToolBoundary, ToolEnvelope,
};
use store_redis::testing::{shared_url, unique_id, unique_prefix};
use store_redis::{RedisConfig, RedisStore};

const FAST: &str = "fast_lookup";
const SLOW: &str = "slow_lookup";

/// A harness process: its own store handle (own connections) and tools.
fn harness(prefix: &str, fast: FakeExecutor, slow: FakeExecutor) -> ToolBoundary {
    let store = RedisStore::new(RedisConfig::single(shared_url()).key_prefix(prefix)).unwrap();
    ToolBoundary::builder(Arc::new(store))
        .tool(fake_tool(FAST, fast).replay(ReplayPolicy::SameScope))
        .tool(fake_tool(SLOW, slow).replay(ReplayPolicy::SameScope))
        .build()
        .unwrap()
}

fn call(run: &RunId, id: &str, tool: &str, query: &str) -> ToolEnvelope {
    ToolEnvelope::new(id, run.as_str(), tool, fake::words(query))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fresh_harness_recovers_replays_and_verifies_after_a_crash() {
    let prefix = unique_prefix();
    let run = RunId::new(unique_id("run")).unwrap();
    let ctx = RunContext::new(
        run.clone(),
        invocation_core::CallPolicy::AUTHORIZED_READ_ONLY,
    );

    // Harness A: one READY call, then a call that is still running when A dies.
    let (fast_a, slow_a) = (
        FakeExecutor::new(),
        FakeExecutor::new().with_delay(Duration::from_secs(60)),
    );
    // A runs on a runtime of its own, which dies with the call still running:
    // like a killed process, no task of A runs again (its guard cannot
    // settle the call), so the record stays PROJECTING.
    std::thread::spawn({
        let (prefix, run, ctx) = (prefix.clone(), run.clone(), ctx.clone());
        let (fast_a, slow_a) = (fast_a.clone(), slow_a.clone());
        move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                let a = harness(&prefix, fast_a, slow_a.clone());
                let ready = a.invoke(&ctx, call(&run, "a-ready", FAST, "alpha")).await;
                assert_eq!(ready.control.status, InvocationStatus::Ready);
                tokio::spawn({
                    let (a, ctx, run) = (a.clone(), ctx.clone(), run.clone());
                    async move { a.invoke(&ctx, call(&run, "a-stuck", SLOW, "beta")).await }
                });
                let stuck_key = InvocationKey::new(
                    run.clone(),
                    aci_contracts::ToolCallId::new("a-stuck").unwrap(),
                );
                // The record is created before the executor is entered: wait
                // for both, or A may die before its slow tool ever started.
                for attempt in 0.. {
                    let record = a
                        .store()
                        .get(&stuck_key, RecordFields::Metadata)
                        .await
                        .unwrap();
                    if record.is_some() && slow_a.calls() == 1 {
                        break;
                    }
                    assert!(attempt < 500, "the running call never started");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            });
            runtime.shutdown_background();
        }
    })
    .join()
    .unwrap();
    let stuck_key = InvocationKey::new(
        run.clone(),
        aci_contracts::ToolCallId::new("a-stuck").unwrap(),
    );
    assert_eq!((fast_a.calls(), slow_a.calls()), (1, 1));

    // Harness B: a fresh instance on the same Redis, with its own executors.
    let (fast_b, slow_b) = (FakeExecutor::new(), FakeExecutor::new());
    let b = harness(&prefix, fast_b.clone(), slow_b.clone());
    let journal = b.journal();

    let entries = journal.entries(&run, RecordFields::Metadata).await.unwrap();
    let listed: Vec<(&str, InvocationStatus)> = entries
        .iter()
        .map(|r| (r.key.tool_call_id.as_str(), r.status))
        .collect();
    assert_eq!(
        listed,
        [
            ("a-ready", InvocationStatus::Ready),
            ("a-stuck", InvocationStatus::Projecting)
        ]
    );
    assert!(matches!(
        b.verify_citations(&ctx, &["a-stuck"]).await[0].verdict,
        CitationVerdict::NotCitable {
            reason: NotCitable::StillProjecting
        }
    ));

    let recovered = journal
        .recover(&run, add(SystemClock.now(), Duration::from_millis(1)))
        .await
        .unwrap();
    assert_eq!(
        recovered,
        vec![aci_contracts::ToolCallId::new("a-stuck").unwrap()]
    );
    let stuck_now = b
        .store()
        .get(&stuck_key, RecordFields::Metadata)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stuck_now.status, InvocationStatus::Error);
    assert_eq!(stuck_now.error_code, Some(ErrorCode::ExecutionAbandoned));

    // The retried agent step asks for the READY scope again under a new id.
    let replay = b.invoke(&ctx, call(&run, "b-retry", FAST, "alpha")).await;
    assert_eq!(replay.control.status, InvocationStatus::Ready);
    assert_eq!(
        replay.control.evidence_status,
        EvidenceStatus::EvidenceFound
    );
    assert_eq!(
        replay.control.replayed_from.as_ref().map(|id| id.as_str()),
        Some("a-ready")
    );
    assert_eq!(replay.observation.to_json()["tool_call_id"], "b-retry");
    assert_eq!(fast_b.calls(), 0, "the replay executed nothing");
    assert!(!serde_json::to_string(&replay).unwrap().contains(SENTINEL));

    // The abandoned scope is not replayed: a new call executes it.
    let again = b.invoke(&ctx, call(&run, "b-again", SLOW, "beta")).await;
    assert_eq!(again.control.status, InvocationStatus::Ready);
    assert_eq!(again.control.replayed_from, None);
    assert_eq!(slow_b.calls(), 1);

    let checks = b
        .verify_citations(&ctx, &["a-ready", "b-retry", "a-stuck", "b-again"])
        .await;
    let verdicts: Vec<&CitationVerdict> = checks.iter().map(|c| &c.verdict).collect();
    assert!(matches!(verdicts[0], CitationVerdict::Evidence { .. }));
    assert!(matches!(verdicts[1], CitationVerdict::Evidence { .. }));
    assert_eq!(
        verdicts[2],
        &CitationVerdict::NotCitable {
            reason: NotCitable::Failed(ErrorCode::ExecutionAbandoned)
        }
    );
    assert!(matches!(verdicts[3], CitationVerdict::Evidence { .. }));
}
