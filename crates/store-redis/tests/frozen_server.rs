//! A Redis server frozen (SIGSTOP) longer than the operation timeout during a
//! stream of calls, then resumed: every call that got STORE_UNAVAILABLE is
//! settled (no record stays PROJECTING), and budgets count only records.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use aci_contracts::{ErrorCode, InvocationStatus, RunId, ToolCallId};
use invocation_core::testing::fake::{FakeExecutor, fake_tool, words};
use invocation_core::{
    InvocationKey, InvocationStore, RecordFields, RunContext, ToolBoundary, ToolEnvelope,
};
use store_redis::testing::{RedisServer, unique_id};
use store_redis::{RedisConfig, RedisStore};

const WORKERS: usize = 8;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn calls_through_a_frozen_server_are_settled_once_it_answers_again() {
    let server = RedisServer::spawn().unwrap();
    let store = Arc::new(
        RedisStore::new(
            RedisConfig::single(server.url())
                .pool_size(WORKERS)
                .connect_timeout(Duration::from_millis(300))
                .operation_timeout(Duration::from_millis(300)),
        )
        .unwrap(),
    );
    store.ping().await.unwrap();
    let executor = FakeExecutor::new().with_delay(Duration::from_millis(5));
    let boundary = ToolBoundary::builder(store.clone())
        .tool(fake_tool("fake", executor.clone()))
        .build()
        .unwrap();
    let run = RunId::new(unique_id("frozen")).unwrap();
    let ctx = RunContext::new(
        run.clone(),
        invocation_core::CallPolicy::AUTHORIZED_READ_ONLY,
    )
    .with_run_budget(100_000);

    let stop = Arc::new(AtomicBool::new(false));
    let mut workers = Vec::new();
    for w in 0..WORKERS {
        let (boundary, ctx, stop) = (boundary.clone(), ctx.clone(), Arc::clone(&stop));
        workers.push(tokio::spawn(async move {
            let mut outcomes = Vec::new();
            let mut n = 0;
            while !stop.load(Ordering::SeqCst) && n < 2_000 {
                let id = format!("w{w}-{n}");
                let call = ToolEnvelope::new(&id, ctx.run_id.as_str(), "fake", words(&id));
                let outcome = boundary.invoke(&ctx, call).await;
                outcomes.push((id, outcome.control.error_code));
                n += 1;
            }
            outcomes
        }));
    }
    tokio::time::sleep(Duration::from_millis(400)).await;
    server.pause().unwrap();
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    server.resume().unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    stop.store(true, Ordering::SeqCst);
    let mut outcomes = Vec::new();
    for worker in workers {
        outcomes.extend(worker.await.unwrap());
    }
    tokio::time::timeout(Duration::from_secs(30), boundary.drain_abandoned())
        .await
        .expect("every settlement answered once the server thawed");

    let unavailable: Vec<&String> = outcomes
        .iter()
        .filter(|(_, code)| *code == Some(ErrorCode::StoreUnavailable))
        .map(|(id, _)| id)
        .collect();
    assert!(
        !unavailable.is_empty(),
        "the freeze produced STORE_UNAVAILABLE calls"
    );
    for id in &unavailable {
        let key = InvocationKey::new(run.clone(), ToolCallId::new(id.as_str()).unwrap());
        if let Some(record) = store.get(&key, RecordFields::Metadata).await.unwrap() {
            assert_ne!(record.status, InvocationStatus::Projecting, "{id}");
        }
    }
    let records = store.list(&run, RecordFields::Metadata).await.unwrap();
    for record in &records {
        assert_ne!(
            record.status,
            InvocationStatus::Projecting,
            "{:?}",
            record.key
        );
    }
    // The run budget counter equals the records: one more fits exactly.
    let budget = u32::try_from(records.len()).unwrap() + 1;
    let ctx = RunContext::new(
        run.clone(),
        invocation_core::CallPolicy::AUTHORIZED_READ_ONLY,
    )
    .with_run_budget(budget);
    let fits = boundary
        .invoke(
            &ctx,
            ToolEnvelope::new("last", run.as_str(), "fake", words("x")),
        )
        .await;
    assert_eq!(fits.control.status, InvocationStatus::Ready, "{fits:?}");
    let over = boundary
        .invoke(
            &ctx,
            ToolEnvelope::new("over", run.as_str(), "fake", words("y")),
        )
        .await;
    assert_eq!(over.control.error_code, Some(ErrorCode::RunBudgetExhausted));
    assert!(
        matches!(
            store
                .settle(
                    &invocation_core::Unsettled {
                        key: InvocationKey::new(run.clone(), ToolCallId::new("last").unwrap()),
                        tool_name: "fake".into(),
                        scope_fingerprint: records[0].scope_fingerprint,
                        created_at: records[0].created_at,
                        ttl: Duration::from_secs(60),
                        attempt: 0,
                    },
                    ErrorCode::StoreUnavailable,
                    records[0].created_at,
                )
                .await,
            Ok(invocation_core::Settled::OtherAttempt)
        ),
        "settling with another attempt token never touches a record"
    );
}
