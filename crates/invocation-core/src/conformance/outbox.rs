//! The outbox conformance scenarios: the `# Behavior` bullets of
//! [`Outbox`] and the invariant that every transition to `READY` or `ERROR`
//! enqueues its record exactly once.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use aci_contracts::{ErrorCode, Timestamp};
use async_trait::async_trait;

use super::{fresh_run_id, new_invocation};
use crate::{
    Clock, Finalization, InvocationKey, InvocationStore, Journal, Outbox, OutboxEntry,
    ReadyEvidence, Settled, StoreError, Unsettled,
};

/// What an outbox scenario needs from an adapter's test setup.
#[async_trait]
pub trait OutboxHarness: Send + Sync {
    /// A store with its outbox on, and that outbox, sharing nothing with any
    /// other call's (scenarios drain the whole outbox).
    async fn fresh(&self) -> (Arc<dyn InvocationStore>, Arc<dyn Outbox>);

    /// The clock records are stamped with.
    fn clock(&self) -> Arc<dyn Clock>;

    /// Lets `by` pass for the outbox's idle accounting.
    async fn advance(&self, by: Duration);
}

/// How long a taken entry stays with its consumer in these scenarios.
pub const RECLAIM_AFTER: Duration = Duration::from_millis(300);

fn ready(at: Timestamp) -> Finalization {
    Finalization::Ready {
        evidence: ReadyEvidence::Found,
        raw_json: "{}".into(),
        agent_result_json: "{}".into(),
        redactions: crate::redact::Redactions::default(),
        replayed_from: None,
        finished_at: at,
        timings: None,
    }
}

fn error(at: Timestamp) -> Finalization {
    Finalization::Error {
        error_code: ErrorCode::ExecutionTimeout,
        retryable: false,
        raw_json: None,
        finished_at: at,
        timings: None,
    }
}

/// Takes until the outbox hands out nothing more.
async fn drain(outbox: &dyn Outbox, consumer: &str) -> Vec<OutboxEntry> {
    let mut all = Vec::new();
    loop {
        let batch = outbox
            .take(consumer, 3, Duration::from_secs(3600))
            .await
            .expect("take");
        if batch.is_empty() {
            return all;
        }
        all.extend(batch);
    }
}

fn keys(entries: &[OutboxEntry]) -> Vec<InvocationKey> {
    entries.iter().map(|e| e.key.clone()).collect()
}

/// Finalize (READY and ERROR), settle, a settle's tombstone and recover each
/// enqueue their record exactly once; refused transitions and creates
/// enqueue nothing.
pub async fn every_terminal_transition_enqueues_once(h: &dyn OutboxHarness) {
    let (store, outbox) = h.fresh().await;
    let clock = h.clock();
    let run = fresh_run_id();
    let now = clock.now();
    let new = |id: &str| new_invocation(clock.as_ref(), &run, id, "tool_a", id);
    let (a, b, c, lost) = (new("ready"), new("error"), new("settled"), new("lost"));
    let mut stale = new("stale");
    stale.created_at = Timestamp::from_unix_millis(now.unix_millis() - 600_000);
    for n in [&a, &b, &c, &stale] {
        store.create(n.clone()).await.expect("create");
    }
    assert!(
        drain(outbox.as_ref(), "w").await.is_empty(),
        "creates enqueue nothing"
    );

    store.finalize(&a.key, ready(now)).await.expect("finalize");
    store.finalize(&b.key, error(now)).await.expect("finalize");
    let settled = store
        .settle(&Unsettled::of(&c), ErrorCode::ExecutionAbandoned, now)
        .await
        .expect("settle");
    assert_eq!(settled, Settled::Finalized);
    let tombstoned = store
        .settle(&Unsettled::of(&lost), ErrorCode::StoreUnavailable, now)
        .await
        .expect("settle");
    assert_eq!(tombstoned, Settled::Tombstoned);
    let journal = Journal::new(Arc::clone(&store), Arc::clone(&clock));
    let cutoff = Timestamp::from_unix_millis(now.unix_millis() - 300_000);
    journal.recover(&run, cutoff).await.expect("recover");

    // Refused: nothing more.
    assert!(matches!(
        store.finalize(&a.key, error(now)).await,
        Err(StoreError::NotProjecting { .. })
    ));
    let again = store
        .settle(&Unsettled::of(&c), ErrorCode::ExecutionAbandoned, now)
        .await
        .expect("settle");
    assert!(matches!(again, Settled::AlreadyFinal(_)));

    let taken = drain(outbox.as_ref(), "w").await;
    let got: Vec<InvocationKey> = keys(&taken);
    let unique: BTreeSet<InvocationKey> = got.iter().cloned().collect();
    assert_eq!(got.len(), unique.len(), "each record once: {got:?}");
    let expected: BTreeSet<InvocationKey> = [&a, &b, &c, &lost, &stale]
        .iter()
        .map(|n| n.key.clone())
        .collect();
    assert_eq!(unique, expected);
    for entry in &taken {
        assert!(entry.enqueued_at.unix_millis() > 0);
    }
    outbox.ack(&taken).await.expect("ack");
    assert_eq!(outbox.backlog().await.expect("backlog").pending, 0);
}

/// A run's entries come in finalization order.
pub async fn a_run_comes_in_finalization_order(h: &dyn OutboxHarness) {
    let (store, outbox) = h.fresh().await;
    let clock = h.clock();
    let run = fresh_run_id();
    let ids = ["c5", "c1", "c4", "c2", "c3"];
    let news: Vec<_> = ids
        .iter()
        .map(|id| new_invocation(clock.as_ref(), &run, id, "tool_a", id))
        .collect();
    for n in &news {
        store.create(n.clone()).await.expect("create");
    }
    for n in news.iter().rev() {
        store
            .finalize(&n.key, ready(clock.now()))
            .await
            .expect("finalize");
    }
    let taken = drain(outbox.as_ref(), "w").await;
    let order: Vec<&str> = taken.iter().map(|e| e.key.tool_call_id.as_str()).collect();
    assert_eq!(order, ["c3", "c2", "c4", "c1", "c5"]);
}

/// A taken entry is another consumer's only after `reclaim_after`; only an
/// acknowledgement removes it, and acknowledging twice changes nothing.
pub async fn taken_entries_are_reclaimed_and_only_ack_removes(h: &dyn OutboxHarness) {
    let (store, outbox) = h.fresh().await;
    let clock = h.clock();
    let run = fresh_run_id();
    let mut news = Vec::new();
    for id in ["a", "b"] {
        let n = new_invocation(clock.as_ref(), &run, id, "tool_a", id);
        store.create(n.clone()).await.expect("create");
        store
            .finalize(&n.key, ready(clock.now()))
            .await
            .expect("finalize");
        news.push(n);
    }
    let backlog = outbox.backlog().await.expect("backlog");
    assert_eq!(backlog.pending, 2);
    assert!(backlog.oldest.is_some());

    let first = outbox
        .take("killed", 10, RECLAIM_AFTER)
        .await
        .expect("take");
    assert_eq!(first.len(), 2);
    assert!(
        outbox
            .take("other", 10, RECLAIM_AFTER)
            .await
            .expect("take")
            .is_empty(),
        "a taken entry is not handed out again before reclaim_after"
    );
    assert_eq!(outbox.backlog().await.expect("backlog").pending, 2);

    h.advance(RECLAIM_AFTER + Duration::from_millis(100)).await;
    let reclaimed = outbox.take("other", 10, RECLAIM_AFTER).await.expect("take");
    assert_eq!(
        keys(&reclaimed).into_iter().collect::<BTreeSet<_>>(),
        keys(&first).into_iter().collect::<BTreeSet<_>>()
    );
    outbox.ack(&reclaimed).await.expect("ack");
    outbox.ack(&reclaimed).await.expect("ack again");
    outbox
        .ack(&first)
        .await
        .expect("the killed consumer's late ack");
    let backlog = outbox.backlog().await.expect("backlog");
    assert_eq!(backlog.pending, 0);
    assert_eq!(backlog.oldest, None);
    h.advance(RECLAIM_AFTER + Duration::from_millis(100)).await;
    assert!(
        outbox
            .take("third", 10, RECLAIM_AFTER)
            .await
            .expect("take")
            .is_empty()
    );
}

/// Stamps every outbox scenario into a `#[tokio::test]`; the argument yields
/// an [`OutboxHarness`] (it may use `.await`).
#[macro_export]
macro_rules! outbox_conformance_tests {
    ($harness:expr) => {
        $crate::outbox_conformance_tests!(@each $harness;
            every_terminal_transition_enqueues_once,
            a_run_comes_in_finalization_order,
            taken_entries_are_reclaimed_and_only_ack_removes,
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
