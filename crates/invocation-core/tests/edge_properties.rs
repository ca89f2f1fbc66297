//! Property: for arbitrary interleavings of calls (duplicate ids included),
//! futures dropped at any await point, store writes that stall or lose their
//! answer, processes killed mid-call and recovery, no record stays
//! PROJECTING once every process has finished or been recovered, and no
//! executor runs twice for one (run, tool_call_id).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aci_contracts::{InvocationStatus, RunId, ToolCallId};
use async_trait::async_trait;
use invocation_core::testing::fake::{FakeExecutor, FakeProjector, FakeRaw, FakeRequest, words};
use invocation_core::testing::faults::{Fault, FaultyStore};
use invocation_core::{
    ExecutionContext, ExecutionError, Executor, InvocationKey, InvocationStore, RecordFields,
    RunContext, ToolBoundary, ToolEnvelope, ToolSpec,
};
use proptest::prelude::*;
use store_memory::MemoryStore;

/// What the store does to one write: mostly answer.
fn fault() -> impl Strategy<Value = Fault> {
    prop_oneof![
        4 => Just(Fault::Answer),
        1 => Just(Fault::Stall),
        1 => Just(Fault::ApplyThenLose),
        1 => Just(Fault::LoseBeforeApplying),
    ]
}

/// The memory store, each write (of any kind) subject to the next planned
/// fault.
type Faulty = FaultyStore<MemoryStore>;

/// Counts executions per tool call id around the fake executor.
#[derive(Debug, Clone, Default)]
struct PerId {
    inner: FakeExecutor,
    runs: Arc<Mutex<HashMap<String, usize>>>,
}

#[async_trait]
impl Executor for PerId {
    type Request = FakeRequest;
    type Raw = FakeRaw;
    async fn execute(
        &self,
        request: &FakeRequest,
        context: &ExecutionContext,
    ) -> Result<FakeRaw, ExecutionError> {
        *self
            .runs
            .lock()
            .unwrap()
            .entry(context.tool_call_id.to_string())
            .or_default() += 1;
        tokio::time::sleep(Duration::from_millis(1)).await;
        self.inner.execute(request, context).await
    }
}

#[derive(Debug, Clone)]
struct Call {
    /// From a small set, so duplicates happen.
    id: u8,
    /// Drop the call's future after this many microseconds.
    drop_after: Option<u64>,
    /// Run it in a process that is killed mid-call.
    killed: bool,
}

fn calls() -> impl Strategy<Value = Vec<Call>> {
    prop::collection::vec(
        (
            0_u8..6,
            prop::option::of(0_u64..4_000),
            prop::bool::weighted(0.15),
        )
            .prop_map(|(id, drop_after, killed)| Call {
                id,
                drop_after,
                killed,
            }),
        1..10,
    )
}

async fn invoke(boundary: &ToolBoundary, ctx: &RunContext, call: &Call) {
    let id = format!("c{}", call.id);
    let envelope = ToolEnvelope::new(&id, ctx.run_id.as_str(), "fake", words(&id));
    match call.drop_after {
        Some(micros) => {
            tokio::select! {
                _ = boundary.invoke(ctx, envelope) => {}
                () = tokio::time::sleep(Duration::from_micros(micros)) => {}
            }
        }
        None => {
            boundary.invoke(ctx, envelope).await;
        }
    }
}

fn boundary(store: &Arc<Faulty>, executor: &PerId) -> ToolBoundary {
    let executor = executor.clone();
    let projector = FakeProjector::default();
    ToolBoundary::builder(Arc::clone(store) as Arc<dyn InvocationStore>)
        .tool(ToolSpec::new("fake", "A fake tool.", executor, projector).read_only(true))
        .build()
        .unwrap()
}

fn check(plan: Vec<Fault>, calls: Vec<Call>) -> Result<(), TestCaseError> {
    static RUN: AtomicUsize = AtomicUsize::new(0);
    let store = Arc::new(FaultyStore::new(MemoryStore::new()).scripted(plan));
    let executor = PerId::default();
    let run = RunId::new(format!("prop-{}", RUN.fetch_add(1, Ordering::SeqCst))).unwrap();
    let ctx = RunContext::new(
        run.clone(),
        invocation_core::CallPolicy::AUTHORIZED_READ_ONLY,
    );

    // Killed processes: each on a runtime of its own that dies mid-call, so
    // nothing of it runs again (its guards cannot settle anything).
    for call in calls.iter().filter(|c| c.killed) {
        let (b, ctx, call) = (boundary(&store, &executor), ctx.clone(), call.clone());
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                let _ = tokio::time::timeout(Duration::from_micros(1_500), invoke(&b, &ctx, &call))
                    .await;
            });
            runtime.shutdown_background();
        })
        .join()
        .unwrap();
    }

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let live = boundary(&store, &executor);
        let mut tasks = Vec::new();
        for call in calls.iter().filter(|c| !c.killed) {
            let (b, ctx, call) = (live.clone(), ctx.clone(), call.clone());
            tasks.push(tokio::spawn(async move { invoke(&b, &ctx, &call).await }));
        }
        for task in tasks {
            task.await.unwrap();
        }
        tokio::time::timeout(Duration::from_secs(30), live.drain_abandoned())
            .await
            .expect("settlements finish");
        // Only killed processes may have left a record PROJECTING.
        let killed: Vec<String> = calls
            .iter()
            .filter(|c| c.killed)
            .map(|c| format!("c{}", c.id))
            .collect();
        for record in store.list(&run, RecordFields::Metadata).await.unwrap() {
            if record.status == InvocationStatus::Projecting {
                let id = record.key.tool_call_id.to_string();
                prop_assert!(
                    killed.contains(&id),
                    "{id} left PROJECTING by a live process"
                );
            }
        }
        // What killed processes left is recovered (nothing live remains), by
        // a later process that finds the store healthy again.
        let healthy: Arc<dyn InvocationStore> = Arc::new(store.inner().clone());
        invocation_core::Journal::new(healthy, Arc::new(invocation_core::SystemClock))
            .recover_run(&run, Duration::ZERO)
            .await
            .unwrap();
        for record in store.list(&run, RecordFields::Metadata).await.unwrap() {
            prop_assert_ne!(
                record.status,
                InvocationStatus::Projecting,
                "{:?}",
                record.key
            );
        }
        for id in 0..6 {
            let key = InvocationKey::new(run.clone(), ToolCallId::new(format!("c{id}")).unwrap());
            if let Some(record) = store.get(&key, RecordFields::Metadata).await.unwrap() {
                prop_assert_ne!(record.status, InvocationStatus::Projecting);
            }
        }
        for (id, runs) in executor.runs.lock().unwrap().iter() {
            prop_assert!(*runs <= 1, "{id} ran {runs} times");
        }
        Ok(())
    })
}

proptest! {
    #![proptest_config(testkit::proptest_config_with_default(24))]

    #[test]
    fn no_record_stays_projecting_and_nothing_runs_twice(
        plan in prop::collection::vec(fault(), 0..24),
        calls in calls(),
    ) {
        check(plan, calls)?;
    }
}
