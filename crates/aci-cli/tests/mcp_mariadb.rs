//! Stopping `aci serve` in the middle of a long MariaDB statement: the record
//! ends ERROR / EXECUTION_ABANDONED and the statement is killed on the server;
//! a server killed with SIGKILL is recovered by `aci recover`, without running
//! the statement twice. Real processes, real Redis, real MariaDB.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::Path;
use std::time::Duration;

use mysql_async::prelude::Queryable;
use projectors_mysql::testing::TestDatabase;
use serde_json::{Value, json};
use support::HANG_GUARD;
use support::command::{aci_async, inspect, record, stderr, stdout};
use support::contract::call_id;
use support::files::{config_file, unique, unique_suffix};
use support::stdio::{RawSession, run_args};

/// A database with `t` holding 2,500 rows, so that a three-way cross join
/// counts 1.5e10 rows: a legitimate read that runs far longer than any test,
/// under the statement time limit, through the SQL gate.
async fn database() -> TestDatabase {
    let values: Vec<String> = (0..50).map(|n| format!("({n})")).collect();
    let fill = format!("INSERT INTO t0 VALUES {}", values.join(","));
    TestDatabase::create(&[
        "CREATE TABLE t0 (n INT NOT NULL)",
        &fill,
        "CREATE TABLE t (n INT NOT NULL)",
        "INSERT INTO t SELECT a.n * 50 + b.n FROM t0 a CROSS JOIN t0 b",
    ])
    .await
}

/// The config: the database as `slow`, a minute of statement time, a tool
/// timeout longer than that, and one second of drain.
fn config(db: &TestDatabase, name: &str) -> std::path::PathBuf {
    config_file(
        name,
        &format!(
            "[limits]\ntimeout_secs = 120\n[serve]\ndrain_secs = 1\n\
             [mysql.data_sources.slow]\nurl = \"{}\"\ntimeout_ms = 60000\n",
            db.reader_url()
        ),
    )
}

/// The slow statement, marked by a column alias unique to the test.
fn slow_arguments(marker: &str) -> Value {
    json!({
        "data_source": "slow",
        "sql": format!("SELECT COUNT(*) AS {marker} FROM t a, t b, t c WHERE a.n + b.n + c.n > ?"),
        "params": [-1],
    })
}

/// How many statements carrying `marker` run on the server now (root's view).
async fn running(db: &TestDatabase, marker: &str) -> usize {
    let mut admin = db.admin().await;
    let count: Option<u64> = admin
        .exec_first(
            "SELECT COUNT(*) FROM information_schema.PROCESSLIST \
             WHERE INFO LIKE ? AND ID <> CONNECTION_ID()",
            (format!("%{marker}%"),),
        )
        .await
        .unwrap();
    let _ = admin.disconnect().await;
    usize::try_from(count.unwrap_or(0)).unwrap()
}

/// Waits (bounded) until `marker`'s statement count is `n`.
async fn wait_running(db: &TestDatabase, marker: &str, n: usize) -> usize {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let now = running(db, marker).await;
        if now == n || tokio::time::Instant::now() > deadline {
            return now;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A session of a server of `run` on `store` with `config`, and the slow
/// statement marked `marker` sent as call `call-slow`.
async fn session_with_slow_call(config: &Path, store: &str, run: &str, marker: &str) -> RawSession {
    let mut session = RawSession::start(&run_args(config, store, run)).await;
    session
        .send_call(
            &json!(1),
            "query_mysql",
            Some(slow_arguments(marker)),
            Some(call_id("call-slow")),
        )
        .await;
    session
}

#[derive(Debug, Clone, Copy)]
enum Stop {
    CloseStdin,
    Sigterm,
}

#[tokio::test(flavor = "multi_thread")]
async fn stopping_mid_statement_abandons_the_record_and_kills_the_statement() {
    let db = database().await;
    let store = store_redis::testing::shared_url();
    for stop in [Stop::Sigterm, Stop::CloseStdin] {
        let run = unique("run-stop");
        let marker = format!("mk_{}", unique_suffix());
        let config = config(&db, "stop");
        let mut session = session_with_slow_call(&config, &store, &run, &marker).await;
        assert_eq!(
            wait_running(&db, &marker, 1).await,
            1,
            "{stop:?}: the statement runs"
        );
        match stop {
            Stop::CloseStdin => session.close_stdin(),
            Stop::Sigterm => session.signal("TERM"),
        }
        let response = session.response(&json!(1)).await;
        assert_eq!(
            response["result"]["structuredContent"]["error_code"], "EXECUTION_ABANDONED",
            "{stop:?}: {response}"
        );
        let (status, rest, stderr) = session.finish().await;
        assert!(status.success(), "{stop:?}: {status}: {stderr}");
        assert!(rest.is_empty(), "{rest:?}");

        let records = inspect(&run, &store, None).await;
        let slow = record(&records, "call-slow");
        assert_eq!(slow["status"], "ERROR", "{stop:?}: {slow}");
        assert_eq!(
            slow["error_code"], "EXECUTION_ABANDONED",
            "{stop:?}: {slow}"
        );
        assert!(records.iter().all(|r| r["status"] != "PROJECTING"));
        assert_eq!(
            wait_running(&db, &marker, 0).await,
            0,
            "{stop:?}: the statement is no longer on the server"
        );
    }
    db.drop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_killed_server_is_recovered_without_running_twice() {
    let db = database().await;
    let store = store_redis::testing::shared_url();
    let run = unique("run-killed");
    let marker = format!("mk_{}", unique_suffix());
    let config = config(&db, "killed");
    let session = session_with_slow_call(&config, &store, &run, &marker).await;
    assert_eq!(wait_running(&db, &marker, 1).await, 1, "the statement runs");
    session.signal("KILL");
    let (status, _, _) = session.finish().await;
    assert!(!status.success(), "killed: {status}");
    let records = inspect(&run, &store, None).await;
    assert_eq!(record(&records, "call-slow")["status"], "PROJECTING");

    // Recovery finalizes it, and says so.
    let out = aci_async(&[
        "recover",
        "--run",
        &run,
        "--store",
        &store,
        "--older-than",
        "0",
    ])
    .await;
    assert!(out.status.success(), "{}: {}", out.status, stderr(&out));
    let printed = stdout(&out);
    assert!(
        printed.contains("call-slow"),
        "recover prints what it changed: {printed}"
    );
    let records = inspect(&run, &store, None).await;
    let slow = record(&records, "call-slow");
    assert_eq!(slow["status"], "ERROR", "{slow}");
    assert_eq!(slow["error_code"], "EXECUTION_ABANDONED", "{slow}");

    // A retry of the same call is a duplicate: nothing runs again.
    let mut retry = RawSession::start(&run_args(&config, &store, &run)).await;
    let again = retry
        .call(
            &json!(1),
            "query_mysql",
            slow_arguments(&marker),
            Some(call_id("call-slow")),
        )
        .await;
    assert_eq!(again["error_code"], "DUPLICATE_TOOL_CALL", "{again}");
    let (status, _, _) = retry.close().await;
    assert!(status.success());
    // At most the orphan of the killed server still runs: never a second one.
    assert!(running(&db, &marker).await <= 1, "the statement ran once");
    let records = inspect(&run, &store, None).await;
    assert_eq!(records.len(), 1, "{records:?}");
    // Ends the orphan too.
    tokio::time::timeout(HANG_GUARD, db.drop()).await.unwrap();
}
