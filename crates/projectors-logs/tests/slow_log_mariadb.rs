//! A real MariaDB slow query log, queried through the boundary.
//!
//! The test points the local server's slow log (`MYSQL_URL`, or root without
//! password at 127.0.0.1:3306) at a file in a fresh directory, logs every
//! statement (`long_query_time = 0`), runs statements of two shapes, and
//! restores the server's previous settings afterwards, also when it fails.
//! The server must run on this machine: it writes the file the test reads.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;

use aci_contracts::{LogTopic, RunId};
use invocation_core::{RunContext, ToolBoundary, ToolEnvelope};
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Opts};
use projectors_logs::{FileLogSource, LogFormat, LogsConfig, TopicConfig, query_logs_tool};
use serde_json::json;
use store_memory::MemoryStore;

fn url() -> String {
    std::env::var("MYSQL_URL")
        .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/?prefer_socket=false".to_owned())
}

async fn connect() -> Conn {
    let opts = Opts::from_url(&url()).expect("MYSQL_URL is a mysql:// URL");
    match tokio::time::timeout(std::time::Duration::from_secs(10), Conn::new(opts)).await {
        Ok(Ok(conn)) => conn,
        Ok(Err(e)) => panic!(
            "cannot connect to MariaDB ({e}); start it (see .ci/run) or set MYSQL_URL to an \
             account that may SET GLOBAL"
        ),
        Err(_) => panic!("no MariaDB answered within 10 s; start it or set MYSQL_URL"),
    }
}

/// The server's slow log settings before the test.
#[derive(Debug, Clone)]
struct Previous {
    enabled: i64,
    long_query_time: f64,
    file: String,
    output: String,
}

/// Puts the previous settings back when dropped (on a thread of its own:
/// `Drop` cannot await, and the test's runtime may be unwinding).
struct Restore(Option<Previous>);

impl Drop for Restore {
    fn drop(&mut self) {
        let Some(previous) = self.0.take() else {
            return;
        };
        let restored = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                let mut conn = connect().await;
                conn.query_drop("SET GLOBAL slow_query_log = 0").await?;
                conn.exec_drop("SET GLOBAL slow_query_log_file = ?", (previous.file,))
                    .await?;
                conn.exec_drop(
                    "SET GLOBAL long_query_time = ?",
                    (previous.long_query_time,),
                )
                .await?;
                conn.exec_drop("SET GLOBAL log_output = ?", (previous.output,))
                    .await?;
                conn.exec_drop("SET GLOBAL slow_query_log = ?", (previous.enabled,))
                    .await?;
                conn.disconnect().await
            })
        })
        .join();
        match restored {
            Ok(Ok(())) => {}
            Ok(Err(e)) => eprintln!("could not restore the slow log settings: {e}"),
            Err(_) => eprintln!("could not restore the slow log settings"),
        }
    }
}

fn marker() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    // Letters only: digits would be masked out of the statement.
    let letters: String = format!("{nanos:x}")
        .bytes()
        .map(|b| char::from(b'a' + (b % 26)))
        .collect();
    format!("aciprobe{letters}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_query_log_statements_are_found_grouped_and_masked() {
    let dir = tempfile::tempdir().unwrap();
    // mariadbd runs as its own user: let it create the file here.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let file = dir.path().join("slow.log");

    let mut admin = connect().await;
    let (enabled, long_query_time, path, output): (i64, f64, String, String) = admin
        .query_first(
            "SELECT @@global.slow_query_log, @@global.long_query_time, \
             @@global.slow_query_log_file, @@global.log_output",
        )
        .await
        .unwrap()
        .unwrap();
    let _restore = Restore(Some(Previous {
        enabled,
        long_query_time,
        file: path,
        output,
    }));
    admin
        .exec_drop(
            "SET GLOBAL slow_query_log_file = ?",
            (file.to_str().unwrap(),),
        )
        .await
        .unwrap();
    admin
        .query_drop("SET GLOBAL log_output = 'FILE'")
        .await
        .unwrap();
    admin
        .query_drop("SET GLOBAL long_query_time = 0")
        .await
        .unwrap();
    admin
        .query_drop("SET GLOBAL slow_query_log = 1")
        .await
        .unwrap();

    // A new session picks up long_query_time = 0.
    let mark = marker();
    let mut conn = connect().await;
    for (n, email) in [
        (1, "alice@example.com"),
        (22, "bob@example.org"),
        (333, "carol@x.io"),
    ] {
        conn.query_drop(format!(
            "SELECT '{email}' AS {mark}_email,\n  {n} AS n FROM DUAL"
        ))
        .await
        .unwrap();
    }
    for n in [5, 6] {
        conn.query_drop(format!("SELECT {n} + 1 AS {mark}_sum"))
            .await
            .unwrap();
    }
    conn.disconnect().await.unwrap();
    admin.query_drop("FLUSH SLOW LOGS").await.unwrap();
    admin.disconnect().await.unwrap();
    assert!(
        file.exists(),
        "the server wrote no slow log at {}",
        file.display()
    );

    let source = FileLogSource::new(&LogsConfig {
        topics: [(
            LogTopic::DatabaseSlowQuery,
            TopicConfig {
                dir: dir.path().to_owned(),
                files: vec!["slow.log".into()],
                format: LogFormat::MysqlSlow,
                time_key: None,
                level_key: None,
                message_key: None,
                pattern: None,
                timestamp: None,
                time_zone: None,
            },
        )]
        .into_iter()
        .collect(),
        max_raw_events: None,
    })
    .unwrap();
    let boundary = ToolBoundary::builder(Arc::new(MemoryStore::new()))
        .tool(query_logs_tool(source))
        .build()
        .unwrap();
    let run = RunContext::new(
        RunId::new(format!("run-{mark}")).unwrap(),
        invocation_core::CallPolicy::AUTHORIZED_READ_ONLY,
    );
    let envelope = ToolEnvelope::new(
        "call_1",
        run.run_id.as_str(),
        "query_logs",
        json!({"topic": "DATABASE_SLOW_QUERY", "query": mark, "lookback_minutes": 10}).to_string(),
    );
    let outcome = boundary.invoke(&run, envelope).await;
    let shown = outcome.observation.to_json();
    assert_eq!(shown["evidence_status"], "EVIDENCE_FOUND", "{shown}");
    assert_eq!(shown["source_kind"], "FILE");
    assert_eq!(shown["match_count"], 5, "{shown}");
    let patterns = shown["patterns"].as_array().unwrap();
    assert_eq!(patterns.len(), 2, "{shown}");
    assert_eq!(patterns[0]["count"], 3);
    assert_eq!(patterns[1]["count"], 2);
    let first = patterns[0]["pattern"].as_str().unwrap();
    assert!(
        first.contains(&format!(
            "SELECT '<str>' AS {mark}_email, <num> AS n FROM DUAL"
        )),
        "{first}"
    );
    let text = shown.to_string();
    for literal in [
        "alice@example.com",
        "bob@example.org",
        "carol@x.io",
        " 333 ",
    ] {
        assert!(!text.contains(literal), "{literal} in {text}");
    }
}
