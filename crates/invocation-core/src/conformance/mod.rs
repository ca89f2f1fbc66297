//! The store conformance suite and the projector conformance suite
//! ([`projector`]) (feature `testing`).
//!
//! Every [`InvocationStore`] adapter runs the same scenarios: each is an async
//! function over a [`StoreHarness`], asserting the `# Behavior` and `# Errors`
//! bullets of the port. [`store_conformance_tests!`](crate::store_conformance_tests)
//! stamps them all into `#[tokio::test]`s:
//!
//! ```text
//! invocation_core::store_conformance_tests!(my_harness().await);
//! ```
//!
//! Scenarios isolate themselves with fresh random run ids, so they can share
//! one store (and one server) and run concurrently.
//!
//! The journal and replay scenarios run the workspace's one fake tool,
//! [`testing::fake`](crate::testing::fake); adapter crates use it in their
//! own tests too.

// Scenarios are test code: a failed expectation is a failed test.
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod journal;
mod outbox;
pub mod projector;
mod run;
mod store;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aci_contracts::{RunId, ToolCallId};
use async_trait::async_trait;
use serde_json::json;

use crate::{
    Budgets, Clock, InvocationKey, InvocationStore, NewInvocation, RunTerms, ScopeFingerprint,
};

pub use journal::*;
pub use outbox::*;
pub use projector::*;
pub use run::*;
pub use store::*;

/// What a scenario needs from an adapter's test setup.
#[async_trait]
pub trait StoreHarness: Send + Sync {
    /// The store under test. Scenarios may call this more than once; every call
    /// must return a handle on the same records.
    fn store(&self) -> Arc<dyn InvocationStore>;

    /// The clock records are stamped with (share it with the store if the store
    /// takes one).
    fn clock(&self) -> Arc<dyn Clock>;

    /// Lets `by` pass for the store's TTL accounting: advance a manual clock, or
    /// sleep for a store that keeps real time.
    async fn advance(&self, by: Duration);

    /// A TTL short enough to wait out in the expiry scenarios.
    fn short_ttl(&self) -> Duration;

    /// How much a freshly set TTL may already have run down when read back
    /// (zero for a manual clock; a little for a store on real time).
    fn ttl_tolerance(&self) -> Duration {
        Duration::ZERO
    }
}

/// A run id no other scenario (or process) uses.
#[must_use]
pub fn fresh_run_id() -> RunId {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    RunId::new(format!("conf-{}-{nanos:x}-{n}", std::process::id()))
        .expect("only identifier characters")
}

/// A valid tool call id.
///
/// # Panics
/// When `id` breaks the identifier rule (scenario bug).
#[must_use]
pub fn call_id(id: &str) -> ToolCallId {
    ToolCallId::new(id).expect("scenario ids are valid")
}

/// A `NewInvocation` for scenarios: tool `tool`, scope `{"q": scope}`, one-hour TTL.
#[must_use]
pub fn new_invocation(
    clock: &dyn Clock,
    run: &RunId,
    id: &str,
    tool: &str,
    scope: &str,
) -> NewInvocation {
    let scope_value = json!({ "q": scope });
    NewInvocation {
        key: InvocationKey::new(run.clone(), call_id(id)),
        tool_name: tool.to_owned(),
        request_json: json!({ "query": scope, "id": id }).to_string(),
        scope_json: crate::fingerprint::canonical_json(&scope_value),
        scope_fingerprint: ScopeFingerprint::of(tool, &scope_value),
        created_at: clock.now(),
        ttl: Duration::from_secs(3600),
        budgets: Budgets::default(),
        claim_scope: false,
        run: RunTerms::default(),
        attempt: fastrand::u64(..),
    }
}

/// Stamps every conformance scenario into a `#[tokio::test]`.
///
/// The argument is an expression, evaluated inside each (async) test, that
/// yields something implementing [`StoreHarness`]; it may use `.await`.
/// The calling crate needs `tokio` (features `macros`, `rt-multi-thread`).
#[macro_export]
macro_rules! store_conformance_tests {
    ($harness:expr) => {
        $crate::store_conformance_tests!(@each $harness;
            create_stores_the_exact_projecting_record,
            metadata_reads_carry_no_payloads,
            get_many_reads_each_key_in_order,
            duplicate_overwrites_nothing_and_counts_nothing,
            duplicate_of_a_finished_record_is_refused,
            exhausted_budgets_create_and_count_nothing,
            tool_budget_is_checked_before_run_budget,
            budgets_are_per_run,
            finalize_moves_projecting_exactly_once,
            finalize_ready_stores_the_outcome,
            finalize_error_stores_code_and_optional_raw,
            finalize_of_a_missing_record_is_not_found_and_creates_nothing,
            ttl_is_set_at_create,
            reads_never_refresh_ttl,
            finalize_keeps_what_remains_of_the_ttl,
            expired_records_are_never_recreated,
            list_is_in_creation_order,
            recreated_expired_key_lists_once_at_its_new_place,
            runs_are_isolated,
            scope_index_tracks_first_and_first_ready,
            scope_claims_have_one_holder_until_finalized,
            concurrent_creates_of_one_key_succeed_once,
            concurrent_distinct_creates_respect_budgets,
            concurrent_finalizes_succeed_once,
            concurrent_claims_have_one_leader,
            journal_entries_and_lookup,
            journal_recover_abandons_stale_projecting_records,
            replay_same_scope_reuses_ready_results,
            replay_never_reuses_errors,
            replay_passes_preflight_and_counts_budgets,
            concurrent_same_scope_calls_execute_once,
            concurrent_calls_without_replay_each_execute,
            failed_leader_fails_waiting_calls,
            first_create_sets_the_run_state,
            run_deadline_refuses_later_creates,
            run_owner_refuses_other_principals,
            refusals_are_noted_for_the_runs_owner_only,
            zero_ttl_is_refused,
            settle_finalizes_only_its_own_attempt,
            settle_of_a_missing_record_leaves_a_tombstone,
            settle_releases_the_scope_claim,
            dropped_invoke_is_abandoned,
            calls_dropped_anywhere_are_settled,
            run_deadline_holds_across_boundaries,
            run_owner_holds_across_boundaries,
        );
    };
    (@each $harness:expr; $($name:ident),+ $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $name() {
                let harness = $harness;
                $crate::conformance::$name(&harness).await;
            }
        )+
    };
}
