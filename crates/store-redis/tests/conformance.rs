//! The whole store conformance suite against a real Redis and a real 3-node
//! Redis Cluster (spawned by the test support, or `REDIS_URL` /
//! `REDIS_CLUSTER_URLS`), and against a real TLS-only Redis over `rediss://`
//! (always spawned, with a throwaway CA).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use invocation_core::conformance::StoreHarness;
use invocation_core::{Clock, InvocationStore, SystemClock};
use store_redis::RedisStore;

/// Redis keeps real time: TTL scenarios sleep.
struct RedisHarness {
    store: RedisStore,
}

#[async_trait]
impl StoreHarness for RedisHarness {
    fn store(&self) -> Arc<dyn InvocationStore> {
        Arc::new(self.store.clone())
    }

    fn clock(&self) -> Arc<dyn Clock> {
        Arc::new(SystemClock)
    }

    async fn advance(&self, by: Duration) {
        tokio::time::sleep(by).await;
    }

    /// Long enough that the reads `reads_never_refresh_ttl` makes in half of
    /// it (140 operations) finish on a loaded 2-core machine running the
    /// whole suite at once; 800 ms was not.
    fn short_ttl(&self) -> Duration {
        Duration::from_secs(4)
    }

    fn ttl_tolerance(&self) -> Duration {
        Duration::from_millis(250)
    }
}

/// A fresh store (and pool) per test: each `#[tokio::test]` has its own
/// runtime; the server process is shared.
mod single_node {
    use super::*;

    fn harness() -> RedisHarness {
        RedisHarness {
            store: store_redis::testing::shared_store(),
        }
    }

    invocation_core::store_conformance_tests!(harness());
}

mod cluster {
    use super::*;

    fn harness() -> RedisHarness {
        let store = store_redis::testing::shared_cluster_store();
        assert!(store.is_cluster());
        RedisHarness { store }
    }

    invocation_core::store_conformance_tests!(harness());
}

/// `rediss://` to a TLS-only redis-server, trusting the test CA.
mod tls_single_node {
    use super::*;

    fn harness() -> RedisHarness {
        let store = store_redis::testing::shared_tls_store();
        assert!(!store.is_cluster());
        RedisHarness { store }
    }

    invocation_core::store_conformance_tests!(harness());
}
