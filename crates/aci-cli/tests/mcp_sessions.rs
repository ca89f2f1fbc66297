//! A JSON-RPC id is not a run-wide id: two MCP sessions (two `aci serve`
//! processes) of one run on Redis both sending id 1 make two calls; a
//! framework id in `_meta` always wins, exactly.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::json;
use support::command::inspect;
use support::contract::call_id;
use support::files::unique;
use support::stdio::RawSession;

#[tokio::test(flavor = "multi_thread")]
async fn two_sessions_of_one_run_sending_id_1_make_two_calls() {
    let store = store_redis::testing::shared_url();
    let run = unique("run-sessions");
    let args = ["--store", store.as_str(), "--run-id", run.as_str()];
    let mut first = RawSession::start(&args).await;
    let mut second = RawSession::start(&args).await;
    let query = json!({"query": "connection pool exhausted"});

    let a = first
        .call(&json!(1), "lookup_knowledge", query.clone(), None)
        .await;
    let b = second
        .call(&json!(1), "lookup_knowledge", query.clone(), None)
        .await;
    assert_eq!(a["evidence_status"], "EVIDENCE_FOUND", "{a}");
    assert_eq!(b["evidence_status"], "EVIDENCE_FOUND", "{b}");
    let (a_id, b_id) = (
        a["tool_call_id"].as_str().unwrap().to_owned(),
        b["tool_call_id"].as_str().unwrap().to_owned(),
    );
    assert_ne!(a_id, b_id);
    for id in [&a_id, &b_id] {
        assert!(id.starts_with("mcp:stdio-") && id.ends_with(":1"), "{id}");
    }
    // Within one session, id 1 again is the same call.
    let again = first
        .call(&json!(1), "lookup_knowledge", query.clone(), None)
        .await;
    assert_eq!(again["error_code"], "DUPLICATE_TOOL_CALL", "{again}");
    assert_eq!(again["tool_call_id"], a_id.as_str());

    // A framework id wins, exactly, and is run-wide: the other session's
    // same `_meta` id is a duplicate.
    let framework = call_id("call_A1");
    let c = first
        .call(
            &json!(2),
            "lookup_knowledge",
            query.clone(),
            Some(framework.clone()),
        )
        .await;
    assert_eq!(c["evidence_status"], "EVIDENCE_FOUND", "{c}");
    assert_eq!(c["tool_call_id"], "call_A1");
    let d = second
        .call(
            &json!(2),
            "lookup_knowledge",
            query.clone(),
            Some(framework),
        )
        .await;
    assert_eq!(d["error_code"], "DUPLICATE_TOOL_CALL", "{d}");
    assert_eq!(d["tool_call_id"], "call_A1");

    for session in [first, second] {
        let (status, _, _) = session.close().await;
        assert!(status.success(), "{status}");
    }
    let records = inspect(&run, &store, None).await;
    let mut ready: Vec<&str> = records
        .iter()
        .filter(|r| r["status"] == "READY")
        .map(|r| r["tool_call_id"].as_str().unwrap())
        .collect();
    ready.sort_unstable();
    let mut expected = vec![a_id.as_str(), b_id.as_str(), "call_A1"];
    expected.sort_unstable();
    assert_eq!(ready, expected, "{records:?}");
    assert_eq!(records.len(), 3, "duplicates leave no record: {records:?}");
    assert!(records.iter().all(|r| r["status"] != "PROJECTING"));
}
