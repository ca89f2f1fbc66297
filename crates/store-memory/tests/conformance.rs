//! The whole store conformance suite against the in-memory store.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use invocation_core::conformance::StoreHarness;
use invocation_core::{Clock, InvocationStore, ManualClock};
use store_memory::MemoryStore;

struct MemoryHarness {
    clock: ManualClock,
    store: MemoryStore,
}

fn harness() -> MemoryHarness {
    let clock = ManualClock::at_default_start();
    let store = MemoryStore::with_clock(Arc::new(clock.clone()));
    MemoryHarness { clock, store }
}

#[async_trait]
impl StoreHarness for MemoryHarness {
    fn store(&self) -> Arc<dyn InvocationStore> {
        Arc::new(self.store.clone())
    }

    fn clock(&self) -> Arc<dyn Clock> {
        Arc::new(self.clock.clone())
    }

    async fn advance(&self, by: Duration) {
        self.clock.advance(by);
    }

    fn short_ttl(&self) -> Duration {
        Duration::from_secs(60)
    }
}

invocation_core::store_conformance_tests!(harness());

#[tokio::test]
async fn expired_records_are_purged() {
    use invocation_core::conformance::{fresh_run_id, new_invocation};
    let h = harness();
    let run = fresh_run_id();
    for i in 0..10 {
        let mut new = new_invocation(&h.clock, &run, &format!("p{i}"), "tool_a", "q");
        new.ttl = Duration::from_secs(10);
        h.store.create(new).await.unwrap();
    }
    assert_eq!(h.store.stored_records(), 10);
    h.clock.advance(Duration::from_secs(11));
    h.store.purge_expired();
    assert_eq!(h.store.stored_records(), 0);
}
