//! A store of your own: an [`InvocationStore`] is the port every record goes
//! through; `store-memory` and `store-redis` implement it.
//!
//! This one wraps another store and counts the calls each method gets (an
//! adapter that adds metrics, an audit trail or a cache has this shape). A
//! store that keeps records itself implements the same eight methods with
//! the `# Behavior` and `# Errors` each documents, and is done when
//! `invocation_core::store_conformance_tests!` (feature `testing`) passes
//! against it, as it does in `store-memory` and `store-redis`.
//!
//! Run with `cargo run -p invocation-core --example custom_store`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use aci_contracts::{ErrorCode, RunId, Timestamp};
use async_trait::async_trait;
use invocation_core::testing::fake::{self, FakeExecutor, Mode};
use invocation_core::{
    CallPolicy, Created, Finalization, InvocationKey, InvocationRecord, InvocationStore,
    NewInvocation, RecordFields, RunContext, RunState, ScopeFingerprint, ScopeIndex, Settled,
    StoreError, ToolBoundary, ToolEnvelope, Unsettled,
};
use store_memory::MemoryStore;

/// Calls per method, in the port's order.
#[derive(Debug, Default)]
struct Calls {
    create: AtomicU64,
    settle: AtomicU64,
    run_state: AtomicU64,
    finalize: AtomicU64,
    get: AtomicU64,
    list: AtomicU64,
    scope_index: AtomicU64,
    remaining_ttl: AtomicU64,
}

/// Another store, with its calls counted.
#[derive(Debug)]
struct CountingStore<S> {
    inner: S,
    calls: Arc<Calls>,
}

fn count(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

#[async_trait]
impl<S: InvocationStore> InvocationStore for CountingStore<S> {
    async fn create(&self, new: NewInvocation) -> Result<Created, StoreError> {
        count(&self.calls.create);
        self.inner.create(new).await
    }

    async fn settle(
        &self,
        call: &Unsettled,
        error_code: ErrorCode,
        finished_at: Timestamp,
    ) -> Result<Settled, StoreError> {
        count(&self.calls.settle);
        self.inner.settle(call, error_code, finished_at).await
    }

    async fn run_state(&self, run_id: &RunId) -> Result<Option<RunState>, StoreError> {
        count(&self.calls.run_state);
        self.inner.run_state(run_id).await
    }
    async fn note_refusal(
        &self,
        run_id: &RunId,
        principal: Option<&str>,
        refusal: &invocation_core::Refusal,
        ttl: Duration,
    ) -> Result<(), StoreError> {
        self.inner
            .note_refusal(run_id, principal, refusal, ttl)
            .await
    }
    async fn refusals(&self, run_id: &RunId) -> Result<Vec<invocation_core::Refusal>, StoreError> {
        self.inner.refusals(run_id).await
    }

    async fn finalize(
        &self,
        key: &InvocationKey,
        finalization: Finalization,
    ) -> Result<(), StoreError> {
        count(&self.calls.finalize);
        self.inner.finalize(key, finalization).await
    }

    async fn get(
        &self,
        key: &InvocationKey,
        fields: RecordFields,
    ) -> Result<Option<InvocationRecord>, StoreError> {
        count(&self.calls.get);
        self.inner.get(key, fields).await
    }

    async fn list(
        &self,
        run_id: &RunId,
        fields: RecordFields,
    ) -> Result<Vec<InvocationRecord>, StoreError> {
        count(&self.calls.list);
        self.inner.list(run_id, fields).await
    }

    async fn scope_index(
        &self,
        run_id: &RunId,
        fingerprint: &ScopeFingerprint,
    ) -> Result<ScopeIndex, StoreError> {
        count(&self.calls.scope_index);
        self.inner.scope_index(run_id, fingerprint).await
    }

    async fn remaining_ttl(&self, key: &InvocationKey) -> Result<Option<Duration>, StoreError> {
        count(&self.calls.remaining_ttl);
        self.inner.remaining_ttl(key).await
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let calls = Arc::new(Calls::default());
    let store = CountingStore {
        inner: MemoryStore::new(),
        calls: Arc::clone(&calls),
    };
    let boundary = ToolBoundary::builder(Arc::new(store))
        .tool(fake::fake_tool("lookup", FakeExecutor::new()))
        .build()?;
    let run = RunContext::new(
        RunId::new("run-custom-store")?,
        CallPolicy::AUTHORIZED_READ_ONLY,
    );
    for (id, mode) in [("call_1", Mode::Found), ("call_2", Mode::NoEvidence)] {
        let arguments = fake::args(mode, "connection pool exhausted");
        let envelope = ToolEnvelope::new(id, "run-custom-store", "lookup", arguments);
        let outcome = boundary.invoke(&run, envelope).await;
        println!("{id}: {}", outcome.control.status.as_str());
    }
    for check in boundary.verify_citations(&run, &["call_1"]).await {
        println!("citation {}: {:?}", check.citation, check.verdict);
    }
    let read = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
    println!(
        "store calls: create {}, finalize {}, settle {}, get {}, list {}, run_state {}, scope_index {}, remaining_ttl {}",
        read(&calls.create),
        read(&calls.finalize),
        read(&calls.settle),
        read(&calls.get),
        read(&calls.list),
        read(&calls.run_state),
        read(&calls.scope_index),
        read(&calls.remaining_ttl),
    );
    Ok(())
}
