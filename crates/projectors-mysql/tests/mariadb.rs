//! `query_mysql` against a real MariaDB/MySQL server.
//!
//! The server is `MYSQL_URL` when set (an account that may create databases
//! and users), otherwise root without password at 127.0.0.1:3306. Each test
//! creates its own database (random name) and a least-privilege account
//! (SELECT on that database only), and drops both at the end. No server
//! reachable is a failure with a clear message, never a skip.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;
use std::time::Duration;

use aci_contracts::{ErrorCode, EvidenceStatus, InvocationStatus, RunId};
use invocation_core::{BoundaryOutcome, RunContext, ToolBoundary, ToolEnvelope};
use mysql_async::prelude::Queryable;
use mysql_async::{Opts, Pool};
use projectors_mysql::{
    DataSourceConfig, Error, MysqlAsyncExecutor, MysqlConfig, MysqlExecutor, MysqlQuery, RawValue,
    Rejection, query_mysql_tool, redact_url,
};
use serde_json::{Value, json};
use store_memory::MemoryStore;

const DEFAULT_ADMIN_URL: &str = "mysql://root@127.0.0.1:3306/?prefer_socket=false";

fn random_hex() -> String {
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos(),
    );
    hasher.write_u32(std::process::id());
    format!("{:016x}", hasher.finish())
}

fn encode(part: &str) -> String {
    part.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// A database and a SELECT-only account of one test.
#[derive(Debug, Clone)]
struct TestDb {
    admin_url: String,
    host: String,
    port: u16,
    database: String,
    reader: String,
    reader_password: String,
    mariadb: bool,
}

impl TestDb {
    fn reader_url(&self) -> String {
        format!(
            "mysql://{}:{}@{}:{}/{}?prefer_socket=false",
            self.reader, self.reader_password, self.host, self.port, self.database
        )
    }

    /// The admin account on the test database (to show the read-only
    /// transaction holds even for an account that may write).
    fn admin_db_url(&self) -> String {
        let opts = Opts::from_url(&self.admin_url).unwrap();
        let user = encode(opts.user().unwrap_or(""));
        let password = opts
            .pass()
            .map(|p| format!(":{}", encode(p)))
            .unwrap_or_default();
        format!(
            "mysql://{user}{password}@{}:{}/{}?prefer_socket=false",
            self.host, self.port, self.database
        )
    }

    async fn admin(&self) -> mysql_async::Conn {
        Pool::new(Opts::from_url(&self.admin_url).unwrap())
            .get_conn()
            .await
            .unwrap()
    }
}

const SCHEMA: &str = "CREATE TABLE evidence (
    id BIGINT UNSIGNED NOT NULL PRIMARY KEY,
    amount DECIMAL(20,6) NULL,
    ratio DOUBLE NULL,
    day DATE NULL,
    at TIME NULL,
    created DATETIME(6) NULL,
    note VARCHAR(100) CHARACTER SET utf8mb4 NULL,
    payload BLOB NULL,
    doc JSON NULL,
    flag BIT(1) NULL,
    small TINYINT NULL
) DEFAULT CHARSET = utf8mb4";

const ROWS: &str = "INSERT INTO evidence VALUES
    (18446744073709551615, 12345678901234.123456, 0.25, '2024-02-29', '-838:59:59',
     '2024-05-06 07:08:09.123456', '订单超时 ⏱️ 😀', X'0001FEFF', '{\"a\": [1, 2]}', b'1', -5),
    (1, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)";

async fn create() -> TestDb {
    let admin_url = std::env::var("MYSQL_URL").unwrap_or_else(|_| DEFAULT_ADMIN_URL.to_owned());
    let opts = Opts::from_url(&admin_url).unwrap_or_else(|_| {
        panic!(
            "MYSQL_URL is not a valid MySQL URL: {}",
            redact_url(&admin_url)
        )
    });
    let pool = Pool::new(opts.clone());
    let mut conn = match tokio::time::timeout(Duration::from_secs(10), pool.get_conn()).await {
        Ok(Ok(conn)) => conn,
        Ok(Err(error)) => panic!(
            "no MySQL/MariaDB server usable at {} ({error}). Start one (for example \
             `start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd`) \
             or set MYSQL_URL to an account that may create databases and users.",
            redact_url(&admin_url)
        ),
        Err(_) => panic!(
            "no MySQL/MariaDB server answered within 10 s at {}. Start one or set MYSQL_URL.",
            redact_url(&admin_url)
        ),
    };
    let version: String = conn.query_first("SELECT VERSION()").await.unwrap().unwrap();
    let suffix = random_hex();
    let db = TestDb {
        host: opts.ip_or_hostname().to_owned(),
        port: opts.tcp_port(),
        database: format!("aci_test_{suffix}"),
        reader: format!("aci_ro_{}", &suffix[..12]),
        reader_password: random_hex(),
        mariadb: version.contains("MariaDB"),
        admin_url,
    };
    conn.query_drop(format!("CREATE DATABASE `{}`", db.database))
        .await
        .unwrap();
    conn.query_drop(format!("USE `{}`", db.database))
        .await
        .unwrap();
    conn.query_drop(SCHEMA).await.unwrap();
    conn.query_drop(ROWS).await.unwrap();
    for host in ["%", "localhost"] {
        conn.query_drop(format!(
            "CREATE USER '{}'@'{host}' IDENTIFIED BY '{}'",
            db.reader, db.reader_password
        ))
        .await
        .unwrap();
        conn.query_drop(format!(
            "GRANT SELECT ON `{}`.* TO '{}'@'{host}'",
            db.database, db.reader
        ))
        .await
        .unwrap();
    }
    drop(conn);
    pool.disconnect().await.unwrap();
    db
}

async fn drop_db(db: &TestDb) {
    let mut conn = db.admin().await;
    conn.query_drop(format!("DROP DATABASE IF EXISTS `{}`", db.database))
        .await
        .unwrap();
    for host in ["%", "localhost"] {
        conn.query_drop(format!("DROP USER IF EXISTS '{}'@'{host}'", db.reader))
            .await
            .unwrap();
    }
}

/// Runs `body` on a fresh database and account, and always drops both.
async fn with_db<F, Fut>(body: F)
where
    F: FnOnce(TestDb) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let db = create().await;
    let outcome = tokio::spawn(body(db.clone())).await;
    drop_db(&db).await;
    if let Err(error) = outcome {
        std::panic::resume_unwind(error.into_panic());
    }
}

fn executor(sources: &[(&str, DataSourceConfig)]) -> MysqlAsyncExecutor {
    let mut config = MysqlConfig::new();
    for (name, source) in sources {
        config = config.data_source(*name, source.clone());
    }
    MysqlAsyncExecutor::new(&config).unwrap()
}

async fn call(boundary: &ToolBoundary, id: &str, arguments: Value) -> BoundaryOutcome {
    let ctx = RunContext::new(RunId::new("run-mariadb").unwrap());
    boundary
        .invoke(
            &ctx,
            ToolEnvelope::new(id, "run-mariadb", "query_mysql", arguments.to_string()),
        )
        .await
}

const SELECT_ALL: &str = "SELECT id, amount, ratio, day, at, created, note, payload, doc, flag, small FROM evidence WHERE id >= ? ORDER BY id DESC";

#[tokio::test(flavor = "multi_thread")]
async fn every_type_reads_through_the_tool_as_a_select_only_account() {
    with_db(|db| async move {
        let executor = Arc::new(executor(&[("shop", DataSourceConfig::new(db.reader_url()))]));
        let boundary = ToolBoundary::builder(Arc::new(MemoryStore::new()))
            .tool(query_mysql_tool(Arc::clone(&executor)))
            .build()
            .unwrap();

        let outcome = call(
            &boundary,
            "call-all",
            json!({"data_source": "shop", "sql": SELECT_ALL, "params": [0]}),
        )
        .await;
        assert_eq!(outcome.control.status, InvocationStatus::Ready, "{outcome:?}");
        // MariaDB keeps JSON as text; MySQL reports its own JSON type.
        let doc_type = if db.mariadb { "STRING" } else { "JSON" };
        assert_eq!(
            outcome.observation.to_json(),
            json!({
                "evidence_status": "EVIDENCE_FOUND",
                "tool_call_id": "call-all",
                "columns": [
                    {"name": "id", "type": "UNSIGNED_INTEGER"},
                    {"name": "amount", "type": "DECIMAL"},
                    {"name": "ratio", "type": "FLOAT"},
                    {"name": "day", "type": "DATE"},
                    {"name": "at", "type": "TIME"},
                    {"name": "created", "type": "DATETIME"},
                    {"name": "note", "type": "STRING"},
                    {"name": "payload", "type": "BINARY"},
                    {"name": "doc", "type": doc_type},
                    {"name": "flag", "type": "BOOLEAN"},
                    {"name": "small", "type": "INTEGER"}
                ],
                "rows": [
                    [
                        18_446_744_073_709_551_615u64,
                        "12345678901234.123456",
                        0.25,
                        "2024-02-29",
                        "-838:59:59",
                        "2024-05-06T07:08:09.123456",
                        "订单超时 ⏱️ 😀",
                        "AAH+/w==",
                        "{\"a\": [1, 2]}",
                        true,
                        -5
                    ],
                    [1, null, null, null, null, null, null, null, null, null, null]
                ],
                "truncated": false
            })
        );
        assert_eq!(outcome.control.returned_count, 2);

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
        assert_eq!(observation["rows"][0][0], "x' OR '1'='1");
        assert_eq!(observation["rows"][0][5], "订单超时 ⏱️ 😀");

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
                !text.contains("no_such_table") && !text.contains(&db.reader) && !text.contains(&db.host),
                "{text}"
            );
        }
        // The executor's Debug shows no password.
        assert!(!format!("{executor:?}").contains(&db.reader_password));
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

        // Nothing changed.
        let mut admin = db.admin().await;
        let (count, small): (u64, Option<i64>) = admin
            .query_first(format!(
                "SELECT COUNT(*), MAX(small) FROM `{}`.evidence",
                db.database
            ))
            .await
            .unwrap()
            .unwrap();
        assert_eq!((count, small), (2, Some(-5)));
        let tables: Vec<String> = admin
            .query(format!(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = '{}'",
                db.database
            ))
            .await
            .unwrap();
        assert_eq!(tables, ["evidence"]);
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
        let boundary = ToolBoundary::builder(Arc::new(MemoryStore::new()))
            .tool(query_mysql_tool(Arc::clone(&executor)))
            .build()
            .unwrap();
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
        if db.mariadb {
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
        assert_eq!(raw.rows, [[RawValue::UInt(101)]]);
        if db.mariadb {
            let raw = executor
                .run_read_only(MysqlQuery {
                    data_source: "shop",
                    sql: "SELECT @@SESSION.max_statement_time",
                    params: &[],
                })
                .await
                .unwrap();
            assert_eq!(raw.rows, [[RawValue::Double(0.2)]]);
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
