//! The journal on a real Redis across processes and server outages: entries
//! appended by another OS process are replayed here; while Redis is down
//! every operation fails with a transient code (so bob executes instead of
//! replaying), and the journal serves again once Redis is back.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use bob_adapter::StoreToolJournal;
use bob_core::{JournalEntry, ToolJournalPort};
use serde_json::json;
use store_redis::testing::RedisServer;
use store_redis::{RedisConfig, RedisStore};

const CHILD_ENV: &str = "BOB_ADAPTER_CHILD_APPEND";

fn the_entry(session: &str) -> JournalEntry {
    let arguments = json!({"topic": "APPLICATION", "query": "timeout"});
    JournalEntry {
        session_id: session.to_owned(),
        call_fingerprint: JournalEntry::fingerprint("query_logs", &arguments),
        tool_name: "query_logs".to_owned(),
        arguments,
        result: json!({"evidence_status": "EVIDENCE_FOUND", "tool_call_id": "c", "n": 1}),
        is_error: false,
        timestamp_ms: 0,
    }
}

fn journal_on(url: String, prefix: &str) -> StoreToolJournal {
    let store = RedisStore::new(
        RedisConfig::single(url)
            .key_prefix(prefix)
            .operation_timeout(Duration::from_millis(500)),
    )
    .unwrap();
    StoreToolJournal::new(Arc::new(store))
}

/// In the child process (this test binary, started by the parent test): append
/// the entry and exit.
#[tokio::test]
async fn child_appends_when_asked() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return; // Only meaningful as the parent's child.
    };
    let mut parts = spec.splitn(3, ' ');
    let (url, prefix, session) = (
        parts.next().unwrap().to_owned(),
        parts.next().unwrap().to_owned(),
        parts.next().unwrap().to_owned(),
    );
    journal_on(url, &prefix)
        .append(the_entry(&session))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn entries_survive_the_process_that_wrote_them() {
    let url = store_redis::testing::shared_url();
    let prefix = store_redis::testing::unique_prefix();
    let session = support::session("proc");
    let child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["child_appends_when_asked", "--exact", "--quiet"])
        .env(CHILD_ENV, format!("{url} {prefix} {session}"))
        .env("REDIS_URL", &url)
        .output()
        .unwrap();
    assert!(
        child.status.success(),
        "the child process failed:\n{}{}",
        String::from_utf8_lossy(&child.stdout),
        String::from_utf8_lossy(&child.stderr)
    );
    // The child ran the append, not an empty filter.
    assert!(String::from_utf8_lossy(&child.stdout).contains("1 passed"));

    // This process never appended: the entry comes from the child's writes.
    let journal = journal_on(url, &prefix);
    let entry = the_entry(&session);
    let got = journal
        .lookup(&session, &entry.call_fingerprint)
        .await
        .unwrap()
        .expect("the other process's entry");
    assert_eq!(got.result, entry.result);
    assert_eq!(journal.entries(&session).await.unwrap().len(), 1);
}

fn code(error: bob_core::StoreError) -> &'static str {
    match error {
        bob_core::StoreError::Other(inner) => {
            let inner = inner.downcast_ref::<bob_adapter::Error>().unwrap();
            assert!(inner.is_transient());
            inner.code()
        }
        other => panic!("not the adapter's error: {other}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_redis_outage_fails_transiently_and_the_journal_serves_again() {
    let mut server = RedisServer::spawn().unwrap();
    let prefix = store_redis::testing::unique_prefix();
    let journal = journal_on(server.url(), &prefix);
    let session = support::session("outage");
    let entry = the_entry(&session);
    journal.append(entry.clone()).await.unwrap();

    server.stop();
    let err = journal.append(entry.clone()).await.unwrap_err();
    assert_eq!(code(err), "STORE_UNAVAILABLE");
    let err = journal
        .lookup(&session, &entry.call_fingerprint)
        .await
        .unwrap_err();
    assert_eq!(code(err), "STORE_UNAVAILABLE");
    let err = journal.entries(&session).await.unwrap_err();
    assert_eq!(code(err), "STORE_UNAVAILABLE");

    // The test server keeps nothing on disk, so its restart starts empty:
    // the call is new again, and the same journal records and replays it.
    server.restart().unwrap();
    let mut served = false;
    for _ in 0..50 {
        if journal.append(entry.clone()).await.is_ok() {
            served = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(served, "the journal serves again after the restart");
    let got = journal
        .lookup(&session, &entry.call_fingerprint)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.result, entry.result);
}
