//! `query_mysql` against a real MariaDB/MySQL server.
//!
//! The server is `MYSQL_URL` when set (an account that may create databases
//! and users), otherwise root without password at 127.0.0.1:3306. Each test
//! creates its own database (random name) and a least-privilege account
//! (SELECT on that database only), and drops both at the end. No server
//! reachable is a failure with a clear message, never a skip.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use aci_contracts::{ErrorCode, EvidenceStatus, InvocationStatus, RunId};
use invocation_core::{BoundaryOutcome, RunContext, ToolBoundary, ToolEnvelope};
use mysql_async::prelude::Queryable;
use projectors_mysql::testing::TestDatabase;
use projectors_mysql::{
    DataSourceConfig, Error, MysqlAsyncSource, MysqlConfig, MysqlQuery, MysqlSource,
    QueryMysqlTool, RawCell, Rejection, query_mysql_tool,
};
use serde_json::{Value, json};
use store_memory::MemoryStore;

const SCHEMA: &str = "CREATE TABLE evidence (
    id BIGINT UNSIGNED NOT NULL PRIMARY KEY,
    amount DECIMAL(20,6) NULL,
    ratio DOUBLE NULL,
    approx FLOAT NULL,
    day DATE NULL,
    at TIME NULL,
    created DATETIME(6) NULL,
    stamped TIMESTAMP(3) NULL,
    note VARCHAR(100) CHARACTER SET utf8mb4 NULL,
    latin VARCHAR(40) CHARACTER SET latin1 NULL,
    folded VARCHAR(40) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci NULL,
    exact VARCHAR(40) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    payload BLOB NULL,
    code VARBINARY(8) NULL,
    doc JSON NULL,
    flag BIT(1) NULL,
    small TINYINT NULL,
    signed_big BIGINT NULL
) DEFAULT CHARSET = utf8mb4";

/// Written at UTC+02:00: the executor reads TIMESTAMP values in UTC.
const ROWS: &[&str] = &[
    "SET time_zone = '+02:00'",
    "INSERT INTO evidence VALUES
    (18446744073709551615, -12345678901234.123456, 0.25, 1.5, '2024-02-29', '-838:59:59',
     '2024-05-06 07:08:09.123456', '2024-05-06 09:08:09.250', '订单超时 ⏱️ 😀', 'café',
     'Straße', 'ÅNGSTRÖM', X'0001FEFF', X'DEADBEEF', '{\"a\": [1, 2]}', b'1', -5,
     -9223372036854775808),
    (1, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
     NULL, NULL)",
];

/// A table of 5000 numbers: big enough to be truncated, and a cross join of
/// it with itself runs for hours.
const NUMBERS: &[&str] = &[
    "CREATE TABLE numbers (n INT NOT NULL PRIMARY KEY)",
    "SET SESSION max_recursive_iterations = 10000",
    "INSERT INTO numbers (n) WITH RECURSIVE seq(n) AS \
     (SELECT 1 UNION ALL SELECT n + 1 FROM seq WHERE n < 5000) SELECT n FROM seq",
];

/// Long text next to JSON.
const NOTES: &[&str] = &[
    "CREATE TABLE notes (id INT NOT NULL PRIMARY KEY, doc JSON NULL, body LONGTEXT NULL)",
    "INSERT INTO notes VALUES (1, '[true, null]', '{\"not\": \"json-typed\"}')",
];

/// The set-up of every test: all tables.
fn setup() -> Vec<&'static str> {
    let mut statements = vec![SCHEMA];
    statements.extend_from_slice(NOTES);
    statements.extend_from_slice(ROWS);
    statements.extend_from_slice(NUMBERS);
    statements
}

/// Runs `body` on a fresh database and account, and always drops both.
async fn with_db<F, Fut>(body: F)
where
    F: FnOnce(TestDatabase) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let db = TestDatabase::create(&setup()).await;
    let outcome = tokio::spawn(body(db.clone())).await;
    db.drop().await;
    if let Err(error) = outcome {
        std::panic::resume_unwind(error.into_panic());
    }
}

fn executor(sources: &[(&str, DataSourceConfig)]) -> MysqlAsyncSource {
    let mut config = MysqlConfig::new();
    for (name, source) in sources {
        config = config.data_source(*name, source.clone());
    }
    MysqlAsyncSource::new(&config).unwrap()
}

fn boundary_over(executor: &Arc<MysqlAsyncSource>) -> ToolBoundary {
    boundary_with(query_mysql_tool(Arc::clone(executor)))
}

fn boundary_with(tool: QueryMysqlTool<Arc<MysqlAsyncSource>>) -> ToolBoundary {
    ToolBoundary::builder(Arc::new(MemoryStore::new()))
        .tool(tool)
        .build()
        .unwrap()
}

/// The data source `shop` still answers an ordinary read (after a timeout,
/// a kill or a closed connection).
async fn assert_serves_reads(executor: &MysqlAsyncSource) {
    let raw = executor
        .query(MysqlQuery {
            data_source: "shop",
            sql: "SELECT COUNT(*) FROM numbers",
            params: &[],
        })
        .await
        .unwrap();
    assert_eq!(raw.rows, [[RawCell::Int(5000)]]);
}

async fn call(boundary: &ToolBoundary, id: &str, arguments: Value) -> BoundaryOutcome {
    let ctx = RunContext::new(
        RunId::new("run-mariadb").unwrap(),
        invocation_core::CallPolicy::AUTHORIZED_READ_ONLY,
    );
    boundary
        .invoke(
            &ctx,
            ToolEnvelope::new(id, "run-mariadb", "query_mysql", arguments.to_string()),
        )
        .await
}

const SELECT_ALL: &str = "SELECT id, amount, ratio, approx, day, at, created, stamped, note, latin, folded, exact, payload, code, doc, flag, small, signed_big FROM evidence WHERE id >= ? ORDER BY id DESC";

#[tokio::test(flavor = "multi_thread")]
async fn every_type_reads_through_the_tool_as_a_select_only_account() {
    with_db(|db| async move {
        let executor = Arc::new(executor(&[("shop", DataSourceConfig::new(db.reader_url()))]));
        let boundary = boundary_over(&executor);

        let outcome = call(
            &boundary,
            "call-all",
            json!({"data_source": "shop", "sql": SELECT_ALL, "params": [0]}),
        )
        .await;
        assert_eq!(outcome.control.status, InvocationStatus::Ready, "{outcome:?}");
        assert_eq!(
            outcome.observation.to_json(),
            json!({
                "evidence_status": "EVIDENCE_FOUND",
                "tool_call_id": "call-all",
                "columns": [
                    {"name": "id", "type": "UNSIGNED_INTEGER"},
                    {"name": "amount", "type": "DECIMAL"},
                    {"name": "ratio", "type": "FLOAT"},
                    {"name": "approx", "type": "FLOAT"},
                    {"name": "day", "type": "DATE"},
                    {"name": "at", "type": "TIME"},
                    {"name": "created", "type": "DATETIME"},
                    {"name": "stamped", "type": "DATETIME"},
                    {"name": "note", "type": "STRING"},
                    {"name": "latin", "type": "STRING"},
                    {"name": "folded", "type": "STRING"},
                    {"name": "exact", "type": "STRING"},
                    {"name": "payload", "type": "BINARY"},
                    {"name": "code", "type": "BINARY"},
                    {"name": "doc", "type": "JSON"},
                    {"name": "flag", "type": "BOOLEAN"},
                    {"name": "small", "type": "INTEGER"},
                    {"name": "signed_big", "type": "INTEGER"}
                ],
                "rows": [
                    [
                        18_446_744_073_709_551_615u64,
                        // DECIMAL: exact, as a string.
                        "-12345678901234.123456",
                        0.25,
                        1.5,
                        "2024-02-29",
                        "-838:59:59",
                        "2024-05-06T07:08:09.123456",
                        // TIMESTAMP written at +02:00, read in UTC.
                        "2024-05-06T07:08:09.250000",
                        "订单超时 ⏱️ 😀",
                        // latin1 and other collations arrive as UTF-8.
                        "café",
                        "Straße",
                        "ÅNGSTRÖM",
                        "AAH+/w==",
                        "3q2+7w==",
                        "{\"a\": [1, 2]}",
                        true,
                        -5,
                        -9_223_372_036_854_775_808i64
                    ],
                    [1, null, null, null, null, null, null, null, null, null, null, null, null, null, null, null, null, null]
                ],
                "truncated": false
            })
        );
        assert_eq!(outcome.control.returned_count, 2);

        // JSON columns are JSON however they are named; computed JSON and
        // other long text are strings. (MariaDB: JSON is a LONGTEXT with a
        // json_valid check, which the executor looks up.)
        let outcome = call(
            &boundary,
            "call-json",
            json!({
                "data_source": "shop",
                "sql": "SELECT n.doc, n.doc AS again, n.body, JSON_OBJECT('a', n.id) AS computed, e.doc AS other \
                        FROM notes n JOIN evidence e ON e.id > n.id ORDER BY n.id",
            }),
        )
        .await;
        let observation = outcome.observation.to_json();
        assert_eq!(
            observation["columns"],
            json!([
                {"name": "doc", "type": "JSON"},
                {"name": "again", "type": "JSON"},
                {"name": "body", "type": "STRING"},
                {"name": "computed", "type": if db.is_mariadb() { "STRING" } else { "JSON" }},
                {"name": "other", "type": "JSON"}
            ]),
            "{observation}"
        );
        assert_eq!(observation["rows"][0][0], "[true, null]");
        assert_eq!(observation["rows"][0][2], "{\"not\": \"json-typed\"}");

        // Zero rows.
        let outcome = call(
            &boundary,
            "call-none",
            json!({"data_source": "shop", "sql": "SELECT id FROM evidence WHERE id = ?", "params": [42]}),
        )
        .await;
        assert_eq!(outcome.control.evidence_status, EvidenceStatus::NoEvidence);
        assert_eq!(
            outcome.observation.to_json(),
            json!({
                "evidence_status": "NO_EVIDENCE",
                "tool_call_id": "call-none",
                "columns": [{"name": "id", "type": "UNSIGNED_INTEGER"}],
                "rows": [],
                "truncated": false
            })
        );

        // Params of every kind bind as values, never as SQL.
        let outcome = call(
            &boundary,
            "call-params",
            json!({
                "data_source": "shop",
                "sql": "SELECT ? AS t, ? AS i, ? AS b, ? AS n, ? AS u, note FROM evidence WHERE note = ?",
                "params": ["x' OR '1'='1", -7, true, null, 18_446_744_073_709_551_615u64, "订单超时 ⏱️ 😀"]
            }),
        )
        .await;
        let observation = outcome.observation.to_json();
        assert_eq!(observation["evidence_status"], "EVIDENCE_FOUND", "{observation}");
        assert_eq!(
            observation["rows"],
            json!([["x' OR '1'='1", -7, 1, null, 18_446_744_073_709_551_615u64, "订单超时 ⏱️ 😀"]]),
            "{observation}"
        );

        // String params compare under each column's own character set and collation.
        for (index, (sql, param, found)) in [
            ("SELECT id FROM evidence WHERE folded = ?", "STRAßE", true),
            ("SELECT id FROM evidence WHERE exact = ?", "ångström", false),
            ("SELECT id FROM evidence WHERE exact = ?", "ÅNGSTRÖM", true),
            ("SELECT id FROM evidence WHERE latin = ?", "café", true),
            ("SELECT id FROM evidence WHERE note LIKE ?", "%⏱️%", true),
            ("SELECT id FROM evidence WHERE note = ?", "' OR 1=1 -- ", false),
            ("SELECT id FROM evidence WHERE note = ?", "订单超时 ⏱️ 😀' OR '1'='1", false),
        ]
        .into_iter()
        .enumerate()
        {
            let outcome = call(
                &boundary,
                &format!("call-collation-{index}"),
                json!({"data_source": "shop", "sql": sql, "params": [param]}),
            )
            .await;
            let rows = outcome.observation.to_json()["rows"].clone();
            let expected = if found { json!([[18_446_744_073_709_551_615u64]]) } else { json!([]) };
            assert_eq!(rows, expected, "{sql} with {param}");
        }

        // Errors through the boundary carry only their code.
        for (id, arguments, code) in [
            (
                "unknown",
                json!({"data_source": "billing", "sql": "SELECT 1"}),
                ErrorCode::DataSourceUnknown,
            ),
            (
                "write",
                json!({"data_source": "shop", "sql": "UPDATE evidence SET small = 1"}),
                ErrorCode::QueryRejected,
            ),
            (
                "sleep",
                json!({"data_source": "shop", "sql": "SELECT SLEEP(5)"}),
                ErrorCode::QueryRejected,
            ),
            (
                "params",
                json!({"data_source": "shop", "sql": "SELECT id FROM evidence WHERE id = ?"}),
                ErrorCode::InvalidInput,
            ),
            (
                "missing-table",
                json!({"data_source": "shop", "sql": "SELECT * FROM no_such_table"}),
                ErrorCode::ExecutionFailed,
            ),
        ] {
            let outcome = call(&boundary, id, arguments).await;
            assert_eq!(outcome.control.error_code, Some(code), "{id}");
            let text = outcome.observation.to_json().to_string();
            assert!(
                !text.contains("no_such_table") && !text.contains(db.reader()) && !text.contains(db.host()),
                "{text}"
            );
        }
        // The executor's Debug shows no password.
        assert!(!format!("{executor:?}").contains(db.reader_password()));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn writes_are_refused_by_the_server_even_without_the_gate() {
    with_db(|db| async move {
        let executor = executor(&[
            ("reader", DataSourceConfig::new(db.reader_url())),
            ("admin", DataSourceConfig::new(db.admin_db_url())),
        ]);
        // The gate refuses the write first.
        let write = MysqlQuery {
            data_source: "admin",
            sql: "UPDATE evidence SET small = 99 WHERE id = 1",
            params: &[],
        };
        assert!(matches!(
            executor.query(write).await,
            Err(Error::QueryRejected {
                reason: Rejection::NotAQuery
            })
        ));

        // Below the gate, an account that may write is stopped by the
        // read-only transaction (1792 ER_CANT_EXECUTE_IN_READ_ONLY_TRANSACTION).
        for sql in [
            "UPDATE evidence SET small = 99 WHERE id = 1",
            "INSERT INTO evidence (id) VALUES (5)",
            "DELETE FROM evidence",
        ] {
            let error = executor
                .run_read_only(MysqlQuery {
                    data_source: "admin",
                    sql,
                    params: &[],
                })
                .await
                .unwrap_err();
            assert_eq!(error.server_code(), Some(1792), "{sql}: {error:?}");
            assert_eq!(error.code(), "QUERY_FAILED");
        }

        // The SELECT-only account is refused by its privileges, including
        // DDL, which a read-only transaction cannot stop (it commits implicitly).
        for sql in [
            "INSERT INTO evidence (id) VALUES (6)",
            "UPDATE evidence SET small = 99",
            "CREATE TABLE sneaky (a INT)",
            "DROP TABLE evidence",
        ] {
            let error = executor
                .run_read_only(MysqlQuery {
                    data_source: "reader",
                    sql,
                    params: &[],
                })
                .await
                .unwrap_err();
            let code = error.server_code();
            assert!(matches!(code, Some(1142 | 1792)), "{sql}: {code:?}");
        }

        // The server's own count of placeholders must match the params: a
        // difference would mean the gate and the server read the text
        // differently.
        let error = executor
            .run_read_only(MysqlQuery {
                data_source: "reader",
                sql: "SELECT ? AS a, '?' AS b",
                params: &[],
            })
            .await
            .unwrap_err();
        assert!(
            matches!(
                error,
                Error::QueryRejected {
                    reason: Rejection::AmbiguousLexing
                }
            ),
            "{error:?}"
        );

        // Nothing changed.
        let mut admin = db.admin().await;
        let (count, small): (u64, Option<i64>) = admin
            .query_first(format!(
                "SELECT COUNT(*), MAX(small) FROM `{}`.evidence",
                db.database()
            ))
            .await
            .unwrap()
            .unwrap();
        assert_eq!((count, small), (2, Some(-5)));
        let tables: Vec<String> = admin
            .query(format!(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = '{}' ORDER BY 1",
                db.database()
            ))
            .await
            .unwrap();
        assert_eq!(tables, ["evidence", "notes", "numbers"]);
        // Driver errors stay out of Display and Debug of the executor's errors.
        let error = executor
            .run_read_only(MysqlQuery {
                data_source: "reader",
                sql: "SELECT * FROM secret_table_name",
                params: &[],
            })
            .await
            .unwrap_err();
        assert!(!error.to_string().contains("secret_table_name"));
        assert!(!format!("{error:?}").contains("secret_table_name"));
        assert_eq!(error.server_code(), Some(1146));
        // The source keeps the driver's detail for deliberate diagnostics.
        let source = std::error::Error::source(&error).unwrap().to_string();
        assert!(source.contains("secret_table_name"), "{source}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn rows_are_capped_server_side_and_the_pool_stays_usable() {
    with_db(|db| async move {
        let executor = Arc::new(executor(&[(
            "shop",
            DataSourceConfig::new(db.reader_url()).max_rows(5),
        )]));
        let boundary = boundary_over(&executor);
        let sequence = "WITH RECURSIVE seq(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM seq WHERE n < 1000) SELECT n FROM seq";
        for (id, sql) in [
            ("cap-no-limit", sequence.to_owned()),
            ("cap-own-limit", format!("{sequence} LIMIT 1000")),
            ("cap-again", sequence.to_owned()),
        ] {
            let outcome = call(&boundary, id, json!({"data_source": "shop", "sql": sql})).await;
            let observation = outcome.observation.to_json();
            assert_eq!(observation["rows"], json!([[1], [2], [3], [4], [5]]), "{id}: {observation}");
            assert_eq!(observation["truncated"], true, "{id}");
            assert_eq!(outcome.control.returned_count, 5);
        }
        // Exactly the cap: nothing left out.
        let raw = executor
            .query(MysqlQuery {
                data_source: "shop",
                sql: "WITH RECURSIVE seq(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM seq WHERE n < 5) SELECT n FROM seq",
                params: &[],
            })
            .await
            .unwrap();
        assert_eq!(raw.rows.len(), 5);
        assert!(!raw.more_rows);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_server_enforces_the_statement_time_limit() {
    with_db(|db| async move {
        let executor = executor(&[(
            "shop",
            DataSourceConfig::new(db.reader_url()).timeout(Duration::from_millis(200)),
        )]);
        // SLEEP never passes the gate; below it, the server stops the statement.
        let result = executor
            .run_read_only(MysqlQuery {
                data_source: "shop",
                sql: "SELECT SLEEP(5)",
                params: &[],
            })
            .await;
        if db.is_mariadb() {
            // ER_STATEMENT_TIMEOUT, which the agent sees as EXECUTION_TIMEOUT.
            let error = result.unwrap_err();
            assert_eq!(error.server_code(), Some(1969));
            assert_eq!(
                error.into_execution_error().error_code(),
                aci_contracts::ErrorCode::ExecutionTimeout
            );
        } else {
            // MySQL's max_execution_time interrupts SLEEP, which then returns 1.
            let raw = result.unwrap();
            assert_eq!(raw.rows.len(), 1);
        }
        // The session settings are in force for the statement.
        let raw = executor
            .run_read_only(MysqlQuery {
                data_source: "shop",
                sql: "SELECT @@SESSION.sql_select_limit",
                params: &[],
            })
            .await
            .unwrap();
        assert_eq!(raw.rows, [[RawCell::UInt(101)]]);
        if db.is_mariadb() {
            let raw = executor
                .run_read_only(MysqlQuery {
                    data_source: "shop",
                    sql: "SELECT @@SESSION.max_statement_time",
                    params: &[],
                })
                .await
                .unwrap();
            assert_eq!(raw.rows, [[RawCell::Double(0.2)]]);
        }
        // The connection is usable afterwards.
        let raw = executor
            .run_read_only(MysqlQuery {
                data_source: "shop",
                sql: "SELECT COUNT(*) FROM evidence",
                params: &[],
            })
            .await
            .unwrap();
        assert_eq!(raw.rows.len(), 1);
    })
    .await;
}

/// A statement that runs for hours unless stopped: a triple cross join.
const LONG_QUERY: &str =
    "SELECT COUNT(*) FROM numbers a, numbers b, numbers c WHERE a.n + b.n + c.n = ?";

#[tokio::test(flavor = "multi_thread")]
async fn a_big_table_is_read_up_to_its_cap_and_marked_truncated() {
    with_db(|db| async move {
        let executor = Arc::new(executor(&[
            ("shop", DataSourceConfig::new(db.reader_url())),
            ("small", DataSourceConfig::new(db.reader_url()).max_rows(7)),
        ]));
        let boundary = boundary_over(&executor);
        // Default cap (100 rows) on a 5000-row table, with and without LIMIT.
        for (id, sql) in [
            ("big", "SELECT n FROM numbers ORDER BY n"),
            ("big-limit", "SELECT n FROM numbers ORDER BY n LIMIT 4000"),
        ] {
            let outcome = call(&boundary, id, json!({"data_source": "shop", "sql": sql})).await;
            let observation = outcome.observation.to_json();
            let rows = observation["rows"].as_array().unwrap();
            assert_eq!(rows.len(), 100, "{id}");
            assert_eq!(rows[0], json!([1]));
            assert_eq!(rows[99], json!([100]));
            assert_eq!(observation["truncated"], true, "{id}");
        }
        // A configured cap; the executor reads cap + 1 rows at most.
        let raw = executor
            .query(MysqlQuery {
                data_source: "small",
                sql: "SELECT n FROM numbers WHERE n > ? ORDER BY n",
                params: &[aci_contracts::SqlValue::Int(10)],
            })
            .await
            .unwrap();
        assert_eq!(raw.rows.len(), 7);
        assert_eq!(raw.rows[0], [RawCell::Int(11)]);
        assert!(raw.more_rows);
        // Just under the cap: complete.
        let raw = executor
            .query(MysqlQuery {
                data_source: "small",
                sql: "SELECT n FROM numbers WHERE n > 4993 ORDER BY n",
                params: &[],
            })
            .await
            .unwrap();
        assert_eq!(raw.rows.len(), 7);
        assert!(!raw.more_rows);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_long_query_is_stopped_at_the_server_time_limit() {
    with_db(|db| async move {
        let executor = Arc::new(executor(&[(
            "shop",
            DataSourceConfig::new(db.reader_url()).timeout(Duration::from_millis(300)),
        )]));
        let boundary = boundary_over(&executor);
        let started = Instant::now();
        let outcome = call(
            &boundary,
            "long",
            json!({"data_source": "shop", "sql": LONG_QUERY, "params": [-1]}),
        )
        .await;
        assert_eq!(
            outcome.control.error_code,
            Some(ErrorCode::ExecutionTimeout)
        );
        // Stopped by the server (1969 / 3024), well before the client limit.
        let error = executor
            .query(MysqlQuery {
                data_source: "shop",
                sql: LONG_QUERY,
                params: &[aci_contracts::SqlValue::Int(-1)],
            })
            .await
            .unwrap_err();
        assert!(
            matches!(error.server_code(), Some(1969 | 3024)),
            "{error:?}"
        );
        assert!(started.elapsed() < Duration::from_secs(30));
        // The pool is usable afterwards.
        assert_serves_reads(&executor).await;
    })
    .await;
}

/// Statements of `user` that are running now.
async fn running_statements(db: &TestDatabase, user: &str) -> u64 {
    let mut admin = db.admin().await;
    let count: Option<u64> = admin
        .exec_first(
            "SELECT COUNT(*) FROM information_schema.processlist \
             WHERE user = ? AND command NOT IN ('Sleep', 'Daemon') AND info LIKE '%numbers a%'",
            (user,),
        )
        .await
        .unwrap();
    count.unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_client_timeout_kills_the_statement_on_the_server() {
    with_db(|db| async move {
        // The server would let the statement run for 10 minutes; the client
        // gives up after 400 ms and must kill it.
        let executor = Arc::new(executor(&[(
            "shop",
            DataSourceConfig::new(db.reader_url())
                .timeout(Duration::from_secs(600))
                .client_timeout(Duration::from_millis(400)),
        )]));
        let boundary = boundary_over(&executor);
        let started = Instant::now();
        let outcome = call(
            &boundary,
            "killed",
            json!({"data_source": "shop", "sql": LONG_QUERY, "params": [-2]}),
        )
        .await;
        assert_eq!(
            outcome.control.error_code,
            Some(ErrorCode::ExecutionTimeout)
        );
        assert!(started.elapsed() < Duration::from_secs(60));
        // Nothing of the reader's is still running on the server.
        assert_eq!(
            wait_until_nothing_runs(&db).await,
            0,
            "the statement still runs on the server"
        );
        // The executor's error is its own timeout, not the server's.
        let error = executor
            .query(MysqlQuery {
                data_source: "shop",
                sql: LONG_QUERY,
                params: &[aci_contracts::SqlValue::Int(-3)],
            })
            .await
            .unwrap_err();
        assert!(matches!(error, Error::Timeout), "{error:?}");
        // The pool is usable afterwards.
        assert_serves_reads(&executor).await;
    })
    .await;
}

/// Polls until no statement of the reader runs on the server (5 s at most).
async fn wait_until_nothing_runs(db: &TestDatabase) -> u64 {
    let mut running = running_statements(db, db.reader()).await;
    for _ in 0..50 {
        if running == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        running = running_statements(db, db.reader()).await;
    }
    running
}

/// The data source `shop` at `url`, which neither of its limits would stop
/// for 10 minutes, and a boundary whose own execution timeout cancels its
/// calls after 400 ms.
fn cancelled_at_400_ms(url: String) -> (Arc<MysqlAsyncSource>, ToolBoundary) {
    let executor = Arc::new(executor(&[(
        "shop",
        DataSourceConfig::new(url)
            .timeout(Duration::from_secs(600))
            .client_timeout(Duration::from_secs(600)),
    )]));
    let boundary =
        boundary_with(query_mysql_tool(Arc::clone(&executor)).timeout(Duration::from_millis(400)));
    (executor, boundary)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_call_cancelled_from_outside_kills_its_statement() {
    with_db(|db| async move {
        let (executor, boundary) = cancelled_at_400_ms(db.reader_url());
        let outcome = call(
            &boundary,
            "cancelled",
            json!({"data_source": "shop", "sql": LONG_QUERY, "params": [-4]}),
        )
        .await;
        assert_eq!(
            outcome.control.error_code,
            Some(ErrorCode::ExecutionTimeout)
        );
        assert_eq!(
            wait_until_nothing_runs(&db).await,
            0,
            "the cancelled statement still runs on the server"
        );
        // The pool is usable afterwards.
        assert_serves_reads(&executor).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn drain_abandoned_returns_only_after_a_cancelled_statement_was_killed() {
    with_db(|db| async move {
        let url = db.reader_url();
        // A runtime of its own that ends right after `drain_abandoned`, as a
        // process exits after it: a kill not finished by then is cancelled
        // with the runtime and the statement would run on for 10 minutes.
        let side = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                let (_executor, boundary) = cancelled_at_400_ms(url);
                let outcome = call(
                    &boundary,
                    "drained",
                    json!({"data_source": "shop", "sql": LONG_QUERY, "params": [-5]}),
                )
                .await;
                boundary.drain_abandoned().await;
                outcome
            })
        });
        let outcome = tokio::task::spawn_blocking(move || side.join().unwrap())
            .await
            .unwrap();
        assert_eq!(
            outcome.control.error_code,
            Some(ErrorCode::ExecutionTimeout)
        );
        assert_eq!(
            wait_until_nothing_runs(&db).await,
            0,
            "the runtime ended before the cancelled statement was killed"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn reading_stops_at_the_cap_and_the_statement_stops_too() {
    with_db(|db| async move {
        // No time limit would stop this statement for 10 minutes, and its
        // own LIMIT lifts the server-side row cap: only the executor's stop
        // at cap + 1 rows (closing the connection, not draining it) ends it.
        let executor = Arc::new(executor(&[(
            "shop",
            DataSourceConfig::new(db.reader_url())
                .max_rows(5)
                .timeout(Duration::from_secs(600))
                .client_timeout(Duration::from_secs(600)),
        )]));
        let started = Instant::now();
        let raw = executor
            .query(MysqlQuery {
                data_source: "shop",
                sql: "SELECT a.n FROM numbers a, numbers b, numbers c LIMIT 1000000000000",
                params: &[],
            })
            .await
            .unwrap();
        assert_eq!(raw.rows.len(), 5);
        assert!(raw.more_rows);
        assert!(started.elapsed() < Duration::from_secs(60));
        assert_eq!(
            wait_until_nothing_runs(&db).await,
            0,
            "the statement still runs after its rows were cut"
        );
        // The pool opens a new connection for the next call.
        assert_serves_reads(&executor).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn tables_must_be_in_the_allowed_schemas() {
    with_db(|db| async move {
        let executor = executor(&[
            ("shop", DataSourceConfig::new(db.reader_url())),
            (
                "catalog",
                DataSourceConfig::new(db.reader_url())
                    .allowed_schemas([db.database(), "information_schema"]),
            ),
        ]);
        let database = db.database().to_owned();
        let qualified = format!("SELECT COUNT(*) FROM `{database}`.numbers");
        let catalog_query = "SELECT table_name FROM information_schema.tables \
                             WHERE table_schema = DATABASE() ORDER BY table_name";
        for (source, sql, allowed) in [
            ("shop", "SELECT COUNT(*) FROM numbers", true),
            ("shop", qualified.as_str(), true),
            (
                "shop",
                "SELECT user, authentication_string FROM mysql.user",
                false,
            ),
            (
                "shop",
                "SELECT * FROM numbers WHERE n IN (SELECT 1 FROM mysql.user)",
                false,
            ),
            ("shop", catalog_query, false),
            ("catalog", catalog_query, true),
            ("catalog", "SELECT * FROM performance_schema.threads", false),
        ] {
            let result = executor
                .query(MysqlQuery {
                    data_source: source,
                    sql,
                    params: &[],
                })
                .await;
            if allowed {
                assert!(result.is_ok(), "{source}: {sql}: {result:?}");
            } else {
                assert!(
                    matches!(
                        result,
                        Err(Error::QueryRejected {
                            reason: Rejection::SchemaNotAllowed
                        })
                    ),
                    "{source}: {sql}: {result:?}"
                );
            }
        }
        // information_schema shows only what the account may see.
        let raw = executor
            .query(MysqlQuery {
                data_source: "catalog",
                sql: catalog_query,
                params: &[],
            })
            .await
            .unwrap();
        assert_eq!(
            raw.rows,
            [
                [RawCell::Text("evidence".into())],
                [RawCell::Text("notes".into())],
                [RawCell::Text("numbers".into())]
            ]
        );

        // Allowed schemas must include the URL's database, and a source
        // needs one or the other.
        for source in [
            DataSourceConfig::new(db.reader_url()).allowed_schemas(["information_schema"]),
            DataSourceConfig::new("mysql://reader@127.0.0.1:3306/"),
            DataSourceConfig::new(db.reader_url()).allowed_schemas([" "]),
        ] {
            let error =
                MysqlAsyncSource::new(&MysqlConfig::new().data_source("bad", source)).unwrap_err();
            assert_eq!(error.code(), "INVALID_CONFIG", "{error}");
        }
    })
    .await;
}
