//! Graceful shutdown of `aci serve`: stop taking calls, let running calls
//! finish for `[serve] drain_secs`, abandon the rest (their records become
//! ERROR / EXECUTION_ABANDONED), a second signal abandons at once. Real
//! processes on a real Redis; the slow call waits on a data source that never
//! answers its handshake.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::Path;

use serde_json::json;
use support::HANG_GUARD;
use support::command::{inspect, record};
use support::contract::call_id;
use support::files::{config_file, unique};
use support::stdio::{
    RawSession, SilentServer, assert_abandoned, mysql_arguments, rpc_error, run_args,
};

/// A session of a server of `run` on `store` with `config`, and its first
/// call sent: a `query_mysql` call `tool_call_id` with JSON-RPC id 1, on the
/// silent data source, so it stays in flight.
async fn session_with_slow_call(
    config: &Path,
    store: &str,
    run: &str,
    tool_call_id: &str,
) -> RawSession {
    let mut session = RawSession::start(&run_args(config, store, run)).await;
    session
        .send_call(
            &json!(1),
            "query_mysql",
            Some(mysql_arguments()),
            Some(call_id(tool_call_id)),
        )
        .await;
    session
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_stops_taking_calls_drains_then_abandons() {
    let silent = SilentServer::start().await;
    let config = silent.config("term", 2);
    let store = store_redis::testing::shared_url();
    let run = unique("run-term");
    let mut session = RawSession::start(&run_args(&config, &store, &run)).await;
    let done = session
        .call(
            &json!(1),
            "lookup_knowledge",
            json!({"query": "connection pool"}),
            Some(call_id("call-done")),
        )
        .await;
    assert_eq!(done["evidence_status"], "EVIDENCE_FOUND", "{done}");
    session
        .send_call(
            &json!(2),
            "query_mysql",
            Some(mysql_arguments()),
            Some(call_id("call-slow")),
        )
        .await;
    // Wait until the slow call's record exists (it is running).
    wait_for_record(&run, &store, "call-slow").await;

    session.signal("TERM");
    wait_draining(&mut session).await;
    // A new call during the drain is refused at once, with its id.
    session
        .send_call(
            &json!(3),
            "lookup_knowledge",
            Some(json!({"query": "pool"})),
            Some(call_id("call-late")),
        )
        .await;
    let refused = session.response(&json!(3)).await;
    assert_eq!(rpc_error(&refused), -32_000, "{refused}");
    // After the drain time the slow call is abandoned and answered.
    let abandoned = session.response(&json!(2)).await;
    assert_abandoned(&abandoned, "call-slow");
    let (status, rest, stderr) = session.finish().await;
    assert!(status.success(), "{status}: {stderr}");
    assert!(rest.is_empty(), "{rest:?}");

    let records = inspect(&run, &store, None).await;
    assert_eq!(record(&records, "call-done")["status"], "READY");
    let slow = record(&records, "call-slow");
    assert_eq!(slow["status"], "ERROR", "{slow}");
    assert_eq!(slow["error_code"], "EXECUTION_ABANDONED", "{slow}");
    assert!(
        records.iter().all(|r| r["tool_call_id"] != "call-late"),
        "refused calls leave no record"
    );
    assert!(
        records.iter().all(|r| r["status"] != "PROJECTING"),
        "{records:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_second_signal_abandons_at_once() {
    let silent = SilentServer::start().await;
    // A drain far longer than the hang guard: only the second signal can end it.
    let config = silent.config("twice", 3600);
    let store = store_redis::testing::shared_url();
    let run = unique("run-twice");
    let mut session = session_with_slow_call(&config, &store, &run, "call-slow").await;
    wait_for_record(&run, &store, "call-slow").await;
    session.signal("INT");
    wait_draining(&mut session).await;
    session.signal("TERM");
    let abandoned = session.response(&json!(1)).await;
    assert_abandoned(&abandoned, "call-slow");
    let (status, _, stderr) = session.finish().await;
    assert!(status.success(), "{status}: {stderr}");
    let records = inspect(&run, &store, None).await;
    assert_eq!(
        record(&records, "call-slow")["error_code"],
        "EXECUTION_ABANDONED"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_call_that_ends_within_the_drain_keeps_its_own_result() {
    let silent = SilentServer::start().await;
    // The tool timeout (1 s) ends the call well within the drain (60 s).
    let config = config_file(
        "within",
        &format!(
            "[limits]\ntimeout_secs = 1\n[serve]\ndrain_secs = 60\n{}",
            silent.mysql_config()
        ),
    );
    let store = store_redis::testing::shared_url();
    let run = unique("run-within");
    let mut session = session_with_slow_call(&config, &store, &run, "call-timeout").await;
    session.close_stdin();
    let response = session.response(&json!(1)).await;
    let observation = &response["result"]["structuredContent"];
    assert_eq!(observation["error_code"], "EXECUTION_TIMEOUT", "{response}");
    let (status, _, stderr) = session.finish().await;
    assert!(status.success(), "{status}: {stderr}");
    let records = inspect(&run, &store, None).await;
    assert_eq!(
        record(&records, "call-timeout")["error_code"],
        "EXECUTION_TIMEOUT"
    );
}

/// Waits until the server took the stop signal (signals arrive
/// asynchronously): it then refuses requests while it drains.
async fn wait_draining(session: &mut RawSession) {
    for n in 1000.. {
        let id = json!(format!("probe-{n}"));
        session
            .send(&json!({"jsonrpc": "2.0", "id": id, "method": "ping"}))
            .await;
        let reply = session.response(&id).await;
        if reply.get("error").is_some() {
            assert_eq!(rpc_error(&reply), -32_000, "{reply}");
            return;
        }
        assert!(n < 2000, "the stop signal is taken");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// Waits until `tool_call_id` has a record in `run` (bounded by the hang guard).
async fn wait_for_record(run: &str, store: &str, tool_call_id: &str) {
    tokio::time::timeout(HANG_GUARD, async {
        loop {
            if inspect(run, store, None)
                .await
                .iter()
                .any(|r| r["tool_call_id"] == tool_call_id)
            {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the call's record appears");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_recovers_its_run_at_start() {
    let silent = SilentServer::start().await;
    let store = store_redis::testing::shared_url();
    let run = unique("run-restart");
    let config = silent.config("restart", 60);
    let killed = session_with_slow_call(&config, &store, &run, "call-orphan").await;
    wait_for_record(&run, &store, "call-orphan").await;
    killed.signal("KILL");
    let (status, _, _) = killed.finish().await;
    assert!(!status.success());
    let records = inspect(&run, &store, None).await;
    assert_eq!(record(&records, "call-orphan")["status"], "PROJECTING");

    // With the default recovery age (30 s past the longest timeout) the
    // young orphan is left alone: a live process might still finish it.
    let young = RawSession::start(&run_args(&config, &store, &run)).await;
    let (status, _, _) = young.close().await;
    assert!(status.success());
    assert_eq!(
        record(&inspect(&run, &store, None).await, "call-orphan")["status"],
        "PROJECTING"
    );

    // Past the recovery age, the next server of the run finalizes it at start.
    let eager = config_file(
        "restart-eager",
        &format!(
            "{}\n[serve]\nrecover_older_than_secs = 0\n",
            std::fs::read_to_string(&config)
                .unwrap()
                .replace("[serve]\ndrain_secs = 60\n", "")
        ),
    );
    let mut restarted = RawSession::start(&run_args(&eager, &store, &run)).await;
    let records = inspect(&run, &store, None).await;
    let orphan = record(&records, "call-orphan");
    assert_eq!(orphan["status"], "ERROR", "{orphan}");
    assert_eq!(orphan["error_code"], "EXECUTION_ABANDONED", "{orphan}");
    // Never re-executed: a retry is a duplicate.
    let again = restarted
        .call(
            &json!(1),
            "query_mysql",
            mysql_arguments(),
            Some(call_id("call-orphan")),
        )
        .await;
    assert_eq!(again["error_code"], "DUPLICATE_TOOL_CALL", "{again}");
    let (status, _, _) = restarted.close().await;
    assert!(status.success());
}
