//! The outbox conformance scenarios against the in-memory store's
//! in-process queue.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use invocation_core::conformance::{OutboxHarness, fresh_run_id, new_invocation};
use invocation_core::{Clock, InvocationStore, ManualClock, Outbox};
use store_memory::MemoryStore;

struct MemoryOutboxHarness {
    clock: ManualClock,
}

#[async_trait]
impl OutboxHarness for MemoryOutboxHarness {
    async fn fresh(&self) -> (Arc<dyn InvocationStore>, Arc<dyn Outbox>) {
        let store = MemoryStore::with_outbox(Arc::new(self.clock.clone()));
        let outbox = store.outbox();
        (Arc::new(store), Arc::new(outbox))
    }

    fn clock(&self) -> Arc<dyn Clock> {
        Arc::new(self.clock.clone())
    }

    async fn advance(&self, by: Duration) {
        self.clock.advance(by);
    }
}

fn harness() -> MemoryOutboxHarness {
    MemoryOutboxHarness {
        clock: ManualClock::at_default_start(),
    }
}

invocation_core::outbox_conformance_tests!(harness());

/// A store made without an outbox queues nothing (and so holds no memory
/// for an archiver that does not exist).
#[tokio::test]
async fn without_an_outbox_nothing_is_queued() {
    let clock = ManualClock::at_default_start();
    let store = MemoryStore::with_clock(Arc::new(clock.clone()));
    let new = new_invocation(&clock, &fresh_run_id(), "c1", "tool_a", "x");
    store.create(new.clone()).await.unwrap();
    store
        .finalize(
            &new.key,
            invocation_core::Finalization::Error {
                error_code: aci_contracts::ErrorCode::ExecutionTimeout,
                retryable: false,
                raw_json: None,
                finished_at: clock.now(),
                timings: None,
            },
        )
        .await
        .unwrap();
    let outbox = store.outbox();
    assert_eq!(outbox.backlog().await.unwrap().pending, 0);
    assert!(
        outbox
            .take("w", 10, Duration::ZERO)
            .await
            .unwrap()
            .is_empty()
    );
}
