//! `StoreToolJournal` through bob-core's `ToolJournalPort`: the scenarios
//! bob's in-memory journal passes (round trip, missing session, counts) and
//! its flaws as regression tests, on the in-memory store, a real Redis and a
//! real 3-node Redis Cluster.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bob_adapter::StoreToolJournal;
use bob_core::{JournalEntry, ToolJournalPort};
use invocation_core::{InvocationStore, Limits, ManualClock};
use serde_json::{Value, json};
use store_memory::MemoryStore;

use support::session;

fn entry(
    session: &str,
    tool: &str,
    arguments: Value,
    result: Value,
    is_error: bool,
) -> JournalEntry {
    JournalEntry {
        session_id: session.to_owned(),
        call_fingerprint: JournalEntry::fingerprint(tool, &arguments),
        tool_name: tool.to_owned(),
        arguments,
        result,
        is_error,
        timestamp_ms: 1,
    }
}

fn found(n: u32) -> Value {
    json!({"evidence_status": "EVIDENCE_FOUND", "tool_call_id": "t", "hits": [n]})
}

fn logs(query: &str) -> Value {
    json!({"topic": "APPLICATION", "query": query})
}

/// The adapter's error code inside bob's `StoreError`.
fn code(error: bob_core::StoreError) -> &'static str {
    match error {
        bob_core::StoreError::Other(inner) => inner
            .downcast_ref::<bob_adapter::Error>()
            .expect("the adapter's error")
            .code(),
        other => panic!("not the adapter's error: {other}"),
    }
}

fn journal(store: Arc<dyn InvocationStore>) -> StoreToolJournal {
    StoreToolJournal::new(store).claim_wait(Duration::from_secs(10))
}

async fn round_trip(store: Arc<dyn InvocationStore>) {
    let journal = journal(store);
    let s = session("rt");
    let e = entry(&s, "query_logs", logs("timeout"), found(1), false);
    journal.append(e.clone()).await.unwrap();

    let got = journal
        .lookup(&s, &e.call_fingerprint)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.session_id, s);
    assert_eq!(got.tool_name, "query_logs");
    assert_eq!(got.arguments, e.arguments);
    assert_eq!(got.result, e.result);
    assert!(!got.is_error);
    assert_eq!(got.call_fingerprint, e.call_fingerprint);
    assert!(
        got.timestamp_ms > 1_600_000_000_000,
        "the journal clock's time"
    );

    // Our canonical fingerprint finds the same entry.
    let hex = bob_adapter::fingerprint::call_fingerprint("query_logs", &logs("timeout")).to_hex();
    let by_hex = journal.lookup(&s, &hex).await.unwrap().unwrap();
    assert_eq!(by_hex.result, e.result);

    let entries = journal.entries(&s).await.unwrap();
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].result, e.result);
}

async fn missing_session(store: Arc<dyn InvocationStore>) {
    let journal = journal(store);
    let s = session("missing");
    let fp = JournalEntry::fingerprint("query_logs", &logs("timeout"));
    assert!(journal.lookup(&s, &fp).await.unwrap().is_none());
    let hex = bob_adapter::fingerprint::call_fingerprint("x", &json!({})).to_hex();
    assert!(journal.lookup(&s, &hex).await.unwrap().is_none());
    // The lookup's claim is not an entry.
    assert!(journal.entries(&s).await.unwrap().is_empty());
    // Another session's entries are not this one's.
    let other = session("other");
    journal
        .append(entry(&other, "query_logs", logs("oom"), found(2), false))
        .await
        .unwrap();
    assert!(journal.entries(&s).await.unwrap().is_empty());
    let oom = JournalEntry::fingerprint("query_logs", &logs("oom"));
    assert!(journal.lookup(&s, &oom).await.unwrap().is_none());
}

async fn counts(store: Arc<dyn InvocationStore>) {
    let journal = journal(store);
    let s = session("counts");
    for (i, q) in ["timeout", "oom", "disk"].into_iter().enumerate() {
        journal
            .append(entry(&s, "query_logs", logs(q), found(i as u32), false))
            .await
            .unwrap();
    }
    journal
        .append(entry(
            &s,
            "lookup_knowledge",
            json!({"query": "pool"}),
            found(9),
            false,
        ))
        .await
        .unwrap();
    let entries = journal.entries(&s).await.unwrap();
    assert_eq!(entries.len(), 4);
    let order: Vec<Value> = entries
        .iter()
        .map(|e| e.result["hits"][0].clone())
        .collect();
    assert_eq!(order, [json!(0), json!(1), json!(2), json!(9)]);
    assert_eq!(entries[3].tool_name, "lookup_knowledge");
}

async fn key_order_and_number_spelling_give_one_fingerprint(store: Arc<dyn InvocationStore>) {
    let journal = journal(store);
    let s = session("canon");
    // bob's text from a build with serde_json's `preserve_order` (keys as inserted).
    let mut first = entry(
        &s,
        "query_logs",
        json!({"query": "timeout", "lookback_minutes": 60, "topic": "APPLICATION"}),
        found(1),
        false,
    );
    first.call_fingerprint =
        r#"query_logs:{"topic":"APPLICATION","query":"timeout","lookback_minutes":60}"#.to_owned();
    journal.append(first.clone()).await.unwrap();
    // The same call with `60.0`, from a build without it.
    let second = entry(
        &s,
        "query_logs",
        json!({"topic": "APPLICATION", "query": "timeout", "lookback_minutes": 60.0}),
        found(2),
        false,
    );
    journal.append(second.clone()).await.unwrap();
    assert_ne!(first.call_fingerprint, second.call_fingerprint);

    let entries = journal.entries(&s).await.unwrap();
    assert_eq!(entries.len(), 1, "one call, one entry");
    assert_eq!(entries[0].result, found(1));
    for text in [
        first.call_fingerprint.as_str(),
        second.call_fingerprint.as_str(),
        r#"query_logs:{ "lookback_minutes": 6e1, "query": "timeout", "topic": "APPLICATION" }"#,
    ] {
        let got = journal.lookup(&s, text).await.unwrap().unwrap();
        assert_eq!(got.result, found(1), "{text}");
    }
    // A different value is a different call.
    let other = r#"query_logs:{"topic":"APPLICATION","query":"timeout","lookback_minutes":61}"#;
    assert!(journal.lookup(&s, other).await.unwrap().is_none());
}

async fn a_timeout_is_not_replayed(store: Arc<dyn InvocationStore>) {
    let journal = journal(store);
    let s = session("timeout");
    let args = logs("timeout");
    let fp = JournalEntry::fingerprint("query_logs", &args);
    let transient = [
        json!({"evidence_status": "ERROR", "error_code": "EXECUTION_TIMEOUT", "message": "m", "tool_call_id": "a"}),
        json!({"evidence_status": "ERROR", "error_code": "STORE_UNAVAILABLE", "message": "m"}),
        // bob's own outputs (the scheduler's timeout, a ToolError).
        json!({"error": "tool call timed out"}),
        json!({"error": "tool execution failed: connection reset"}),
    ];
    // bob's scheduler: look up (nothing: this claims the call), execute, append.
    assert!(journal.lookup(&s, &fp).await.unwrap().is_none());
    for output in &transient {
        journal
            .append(entry(&s, "query_logs", args.clone(), output.clone(), true))
            .await
            .unwrap();
        assert!(
            journal.lookup(&s, &fp).await.unwrap().is_none(),
            "{output} must not be replayed"
        );
        // The next append (the re-execution) fills the claim this lookup made.
    }
    journal
        .append(entry(&s, "query_logs", args.clone(), found(7), false))
        .await
        .unwrap();
    let got = journal.lookup(&s, &fp).await.unwrap().unwrap();
    assert_eq!(got.result, found(7));
    assert!(!got.is_error);
    // Every attempt stays visible for diagnostics, in order.
    let entries = journal.entries(&s).await.unwrap();
    assert_eq!(entries.len(), transient.len() + 1);
    for (e, output) in entries.iter().zip(&transient) {
        assert!(e.is_error);
        assert_eq!(&e.result, output);
    }
    assert!(!entries[transient.len()].is_error);
}

async fn request_errors_are_replayed(store: Arc<dyn InvocationStore>) {
    let journal = journal(store);
    let s = session("invalid");
    let args = json!({"topic": "NOPE", "query": "x"});
    let output = json!({"evidence_status": "ERROR", "error_code": "INVALID_INPUT", "message": "m", "tool_call_id": "a"});
    journal
        .append(entry(&s, "query_logs", args.clone(), output.clone(), true))
        .await
        .unwrap();
    let got = journal
        .lookup(&s, &JournalEntry::fingerprint("query_logs", &args))
        .await
        .unwrap()
        .unwrap();
    assert!(got.is_error);
    assert_eq!(got.result, output);
    // Appending it again adds nothing.
    journal
        .append(entry(&s, "query_logs", args, output, true))
        .await
        .unwrap();
    assert_eq!(journal.entries(&s).await.unwrap().len(), 1);
}

async fn concurrent_appends_give_one_entry(store: Arc<dyn InvocationStore>) {
    let journal = journal(store);
    let s = session("appends");
    let tasks: Vec<_> = (0..8)
        .map(|i| {
            let journal = journal.clone();
            let e = entry(&s, "query_logs", logs("timeout"), found(i), false);
            tokio::spawn(async move { journal.append(e).await })
        })
        .collect();
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    let entries = journal.entries(&s).await.unwrap();
    assert_eq!(entries.len(), 1);
}

/// bob's scheduler step: look up, else execute and append.
async fn scheduler_step(journal: StoreToolJournal, s: String, runs: Arc<AtomicUsize>) -> Value {
    let args = logs("timeout");
    let fp = JournalEntry::fingerprint("query_logs", &args);
    if let Some(cached) = journal.lookup(&s, &fp).await.unwrap() {
        return cached.result;
    }
    let n = runs.fetch_add(1, Ordering::SeqCst) as u32;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let result = found(100 + n);
    journal
        .append(entry(&s, "query_logs", args, result.clone(), false))
        .await
        .unwrap();
    result
}

async fn concurrent_duplicates_execute_once(store: Arc<dyn InvocationStore>) {
    let journal = journal(store);
    let s = session("race");
    let runs = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..6)
        .map(|_| {
            tokio::spawn(scheduler_step(
                journal.clone(),
                s.clone(),
                Arc::clone(&runs),
            ))
        })
        .collect();
    let mut results = Vec::new();
    for task in tasks {
        results.push(task.await.unwrap());
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1, "executed once");
    assert!(results.iter().all(|r| *r == found(100)));
    assert_eq!(journal.entries(&s).await.unwrap().len(), 1);
}

async fn an_abandoned_claim_does_not_block(store: Arc<dyn InvocationStore>) {
    let s = session("stale");
    let fp = JournalEntry::fingerprint("query_logs", &logs("timeout"));
    // A harness claims the call and dies before appending.
    let dead = journal(Arc::clone(&store));
    assert!(dead.lookup(&s, &fp).await.unwrap().is_none());

    // A short claim: the next harness waits for it, then executes.
    let next = StoreToolJournal::new(Arc::clone(&store)).claim_wait(Duration::from_millis(200));
    let started = std::time::Instant::now();
    assert!(next.lookup(&s, &fp).await.unwrap().is_none());
    assert!(started.elapsed() >= Duration::from_millis(150));
    next.append(entry(&s, "query_logs", logs("timeout"), found(1), false))
        .await
        .unwrap();
    assert_eq!(
        next.lookup(&s, &fp).await.unwrap().unwrap().result,
        found(1)
    );

    // Or recovery at start-up: the stale claim becomes an abandoned attempt.
    let s2 = session("recover");
    assert!(dead.lookup(&s2, &fp).await.unwrap().is_none());
    let moved = next.recover(&s2, Duration::ZERO).await.unwrap();
    assert_eq!(moved.len(), 1);
    let started = std::time::Instant::now();
    assert!(dead.lookup(&s2, &fp).await.unwrap().is_none());
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "no wait after recovery"
    );
    dead.append(entry(&s2, "query_logs", logs("timeout"), found(2), false))
        .await
        .unwrap();
    let entries = dead.entries(&s2).await.unwrap();
    assert_eq!(entries.len(), 2);
    assert!(entries[0].is_error);
    assert_eq!(entries[0].result["error_code"], "EXECUTION_ABANDONED");
    assert_eq!(entries[1].result, found(2));
}

async fn limits_apply_and_nothing_is_written(store: Arc<dyn InvocationStore>) {
    let limits = Limits {
        max_request_bytes: 200,
        max_agent_result_bytes: 300,
        max_raw_bytes: 300,
        max_record_bytes: 400,
        ..Limits::default()
    };
    let journal = journal(store).with_limits(limits);
    let s = session("limits");
    let big_result = json!({"evidence_status": "EVIDENCE_FOUND", "text": "x".repeat(300)});
    let err = journal
        .append(entry(&s, "query_logs", logs("a"), big_result, false))
        .await
        .unwrap_err();
    assert_eq!(code(err), "RESULT_TOO_LARGE");
    let big_error = json!({"error": "y".repeat(300)});
    let err = journal
        .append(entry(&s, "query_logs", logs("b"), big_error, true))
        .await
        .unwrap_err();
    assert_eq!(code(err), "RESULT_TOO_LARGE");
    let err = journal
        .append(entry(
            &s,
            "query_logs",
            logs(&"q".repeat(200)),
            found(1),
            false,
        ))
        .await
        .unwrap_err();
    assert_eq!(code(err), "REQUEST_TOO_LARGE");
    // Each fits alone, not together.
    let err = journal
        .append(entry(
            &s,
            "query_logs",
            logs(&"q".repeat(150)),
            json!({"t": "z".repeat(250)}),
            false,
        ))
        .await
        .unwrap_err();
    assert_eq!(code(err), "RESULT_TOO_LARGE");
    assert!(journal.entries(&s).await.unwrap().is_empty());
    // Within the limits it is recorded.
    journal
        .append(entry(&s, "query_logs", logs("a"), found(1), false))
        .await
        .unwrap();
    assert_eq!(journal.entries(&s).await.unwrap().len(), 1);
}

async fn bad_input_is_refused_with_a_code(store: Arc<dyn InvocationStore>) {
    let journal = journal(store);
    let s = session("bad");
    let mut wrong = entry(&s, "query_logs", logs("a"), found(1), false);
    wrong.call_fingerprint = JournalEntry::fingerprint("query_logs", &logs("b"));
    assert_eq!(
        code(journal.append(wrong).await.unwrap_err()),
        "FINGERPRINT_MISMATCH"
    );
    let mut garbage = entry(&s, "query_logs", logs("a"), found(1), false);
    garbage.call_fingerprint = "not a fingerprint".to_owned();
    assert_eq!(
        code(journal.append(garbage).await.unwrap_err()),
        "INVALID_FINGERPRINT"
    );
    assert_eq!(
        code(journal.lookup(&s, "nope").await.unwrap_err()),
        "INVALID_FINGERPRINT"
    );
    let bad_session = entry("a b", "query_logs", logs("a"), found(1), false);
    assert_eq!(
        code(journal.append(bad_session).await.unwrap_err()),
        "INVALID_SESSION"
    );
    assert_eq!(
        code(journal.entries(&"{x}".to_owned()).await.unwrap_err()),
        "INVALID_SESSION"
    );
    assert!(journal.entries(&s).await.unwrap().is_empty());
}

macro_rules! on_both_stores {
    ($($scenario:ident),* $(,)?) => {
        mod memory {
            $(
                #[tokio::test(flavor = "multi_thread")]
                async fn $scenario() {
                    super::$scenario(std::sync::Arc::new(super::MemoryStore::new())).await;
                }
            )*
        }
        mod redis {
            $(
                #[tokio::test(flavor = "multi_thread")]
                async fn $scenario() {
                    super::$scenario(std::sync::Arc::new(store_redis::testing::shared_store())).await;
                }
            )*
        }
        mod cluster {
            $(
                #[tokio::test(flavor = "multi_thread")]
                async fn $scenario() {
                    super::$scenario(std::sync::Arc::new(
                        store_redis::testing::shared_cluster_store(),
                    ))
                    .await;
                }
            )*
        }
    };
}

on_both_stores!(
    round_trip,
    missing_session,
    counts,
    key_order_and_number_spelling_give_one_fingerprint,
    a_timeout_is_not_replayed,
    request_errors_are_replayed,
    concurrent_appends_give_one_entry,
    concurrent_duplicates_execute_once,
    an_abandoned_claim_does_not_block,
    limits_apply_and_nothing_is_written,
    bad_input_is_refused_with_a_code,
);

fn short_ttl(ttl: Duration) -> Limits {
    Limits {
        record_ttl: ttl,
        ..Limits::default()
    }
}

#[tokio::test]
async fn memory_entries_vanish_after_the_ttl() {
    let clock = Arc::new(ManualClock::at_default_start());
    let store = Arc::new(MemoryStore::with_clock(clock.clone()));
    let journal = StoreToolJournal::new(store)
        .with_clock(clock.clone())
        .with_limits(short_ttl(Duration::from_secs(60)));
    let s = session("ttl");
    let e = entry(&s, "query_logs", logs("timeout"), found(1), false);
    journal.append(e.clone()).await.unwrap();
    clock.advance(Duration::from_secs(59));
    assert!(
        journal
            .lookup(&s, &e.call_fingerprint)
            .await
            .unwrap()
            .is_some()
    );
    clock.advance(Duration::from_secs(2));
    let hex = bob_adapter::fingerprint::call_fingerprint("query_logs", &logs("timeout")).to_hex();
    assert!(journal.lookup(&s, &hex).await.unwrap().is_none());
    assert!(journal.entries(&s).await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn redis_entries_vanish_after_the_ttl() {
    let store = Arc::new(store_redis::testing::shared_store());
    let journal = StoreToolJournal::new(store).with_limits(short_ttl(Duration::from_millis(500)));
    let s = session("ttl");
    let e = entry(&s, "query_logs", logs("timeout"), found(1), false);
    journal.append(e.clone()).await.unwrap();
    assert!(
        journal
            .lookup(&s, &e.call_fingerprint)
            .await
            .unwrap()
            .is_some()
    );
    tokio::time::sleep(Duration::from_millis(800)).await;
    let hex = bob_adapter::fingerprint::call_fingerprint("query_logs", &logs("timeout")).to_hex();
    assert!(journal.lookup(&s, &hex).await.unwrap().is_none());
    assert!(journal.entries(&s).await.unwrap().is_empty());
}

#[tokio::test]
async fn a_claim_wait_ends_even_when_the_journal_clock_stands_still() {
    let clock = Arc::new(ManualClock::at_default_start());
    let store = Arc::new(MemoryStore::with_clock(clock.clone()));
    let journal = StoreToolJournal::new(store)
        .with_clock(clock)
        .claim_wait(Duration::from_millis(200));
    let s = session("frozen");
    let fp = JournalEntry::fingerprint("query_logs", &logs("timeout"));
    assert!(journal.lookup(&s, &fp).await.unwrap().is_none());
    let waited = tokio::time::timeout(Duration::from_secs(5), journal.lookup(&s, &fp)).await;
    assert!(waited.expect("bounded by claim_wait").unwrap().is_none());
}
