//! An attack corpus against `query_mysql` on a real MariaDB/MySQL server.
//!
//! Every statement is run twice as a SELECT-only account: through the whole
//! tool (gate and server-side defenses), where it must be rejected or
//! harmless, and again below the gate (`run_read_only`), where the
//! server-side layers alone must hold. A `CHECKSUM TABLE` of every table
//! before and after proves that nothing changed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use aci_contracts::{ErrorCode, InvocationStatus, RunId, SqlValue};
use invocation_core::{RunContext, ToolBoundary, ToolEnvelope};
use projectors_mysql::testing::TestDatabase;
use projectors_mysql::{
    DataSourceConfig, MysqlAsyncSource, MysqlConfig, MysqlQuery, query_mysql_tool,
};
use serde_json::{Value, json};
use store_memory::MemoryStore;

const SETUP: &[&str] = &[
    "CREATE TABLE evidence (
        id INT NOT NULL PRIMARY KEY,
        note VARCHAR(100) NOT NULL,
        small TINYINT NOT NULL
    ) DEFAULT CHARSET = utf8mb4",
    "INSERT INTO evidence VALUES (1, 'first', 1), (2, 'second', 2), (3, 'x''; DROP TABLE evidence; --', 3)",
    "CREATE TABLE audit (id INT NOT NULL PRIMARY KEY, what VARCHAR(40) NOT NULL)",
    "INSERT INTO audit VALUES (1, 'created')",
];

/// What the full tool must do with an attack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// `QUERY_REJECTED` (the gate) or `INVALID_INPUT` (params disagree).
    Rejected,
    /// Allowed to run: it reads, or fails on the server, and changes nothing.
    Harmless,
}
use Expect::{Harmless, Rejected};

/// (sql, params, expectation)
fn corpus() -> Vec<(&'static str, Value, Expect)> {
    let none = json!([]);
    vec![
        // Stacked queries.
        ("SELECT 1; DROP TABLE evidence", none.clone(), Rejected),
        ("SELECT 1;DELETE FROM evidence", none.clone(), Rejected),
        (
            "SELECT * FROM evidence WHERE id = 1; UPDATE evidence SET small = 0",
            none.clone(),
            Rejected,
        ),
        (
            "SELECT 1; -- \nINSERT INTO audit VALUES (2, 'x')",
            none.clone(),
            Rejected,
        ),
        (
            "SELECT 1 /* ; */ ; TRUNCATE evidence",
            none.clone(),
            Rejected,
        ),
        (
            "SELECT 1 -- ; DROP TABLE evidence\n; DROP TABLE evidence",
            none.clone(),
            Rejected,
        ),
        ("SELECT 1 # \n; DELETE FROM audit", none.clone(), Rejected),
        // Plain writes and DDL.
        ("UPDATE evidence SET small = 0", none.clone(), Rejected),
        ("DELETE FROM evidence", none.clone(), Rejected),
        ("INSERT INTO audit VALUES (3, 'x')", none.clone(), Rejected),
        (
            "INSERT INTO audit SELECT id + 10, note FROM evidence",
            none.clone(),
            Rejected,
        ),
        (
            "REPLACE INTO audit VALUES (1, 'replaced')",
            none.clone(),
            Rejected,
        ),
        ("DROP TABLE evidence", none.clone(), Rejected),
        ("TRUNCATE TABLE audit", none.clone(), Rejected),
        (
            "ALTER TABLE evidence ADD COLUMN x INT",
            none.clone(),
            Rejected,
        ),
        ("CREATE TABLE evil (a INT)", none.clone(), Rejected),
        (
            "CREATE TABLE evil AS SELECT * FROM evidence",
            none.clone(),
            Rejected,
        ),
        ("RENAME TABLE audit TO gone", none.clone(), Rejected),
        (
            "CREATE VIEW v AS SELECT * FROM evidence",
            none.clone(),
            Rejected,
        ),
        ("GRANT ALL ON *.* TO CURRENT_USER()", none.clone(), Rejected),
        // Session, procedures, prepared statements, handlers, locks, admin.
        ("SET SESSION max_statement_time = 0", none.clone(), Rejected),
        (
            "SET STATEMENT max_statement_time = 0 FOR SELECT 1",
            none.clone(),
            Rejected,
        ),
        (
            "SET @@session.sql_select_limit = 100000",
            none.clone(),
            Rejected,
        ),
        ("CALL mysql.some_procedure()", none.clone(), Rejected),
        (
            "PREPARE s FROM 'DELETE FROM evidence'",
            none.clone(),
            Rejected,
        ),
        ("EXECUTE s", none.clone(), Rejected),
        ("DEALLOCATE PREPARE s", none.clone(), Rejected),
        ("HANDLER evidence OPEN", none.clone(), Rejected),
        ("LOCK TABLES evidence WRITE", none.clone(), Rejected),
        ("UNLOCK TABLES", none.clone(), Rejected),
        ("KILL 1", none.clone(), Rejected),
        ("KILL QUERY 1", none.clone(), Rejected),
        (
            "LOAD DATA INFILE '/etc/passwd' INTO TABLE audit",
            none.clone(),
            Rejected,
        ),
        (
            "LOAD DATA LOCAL INFILE '/etc/passwd' INTO TABLE audit",
            none.clone(),
            Rejected,
        ),
        ("DO SLEEP(5)", none.clone(), Rejected),
        ("FLUSH TABLES", none.clone(), Rejected),
        ("START TRANSACTION", none.clone(), Rejected),
        ("COMMIT", none.clone(), Rejected),
        ("SHOW GRANTS", none.clone(), Rejected),
        (
            "EXPLAIN ANALYZE SELECT * FROM evidence",
            none.clone(),
            Rejected,
        ),
        // SELECT ... INTO.
        (
            "SELECT * FROM evidence INTO OUTFILE '/tmp/aci_attack_outfile'",
            none.clone(),
            Rejected,
        ),
        (
            "SELECT note FROM evidence LIMIT 1 INTO DUMPFILE '/tmp/aci_attack_dumpfile'",
            none.clone(),
            Rejected,
        ),
        (
            "SELECT id INTO @x FROM evidence LIMIT 1",
            none.clone(),
            Rejected,
        ),
        (
            "SELECT id FROM evidence LIMIT 1 INTO @x",
            none.clone(),
            Rejected,
        ),
        (
            "SELECT 1 UNION SELECT 2 INTO OUTFILE '/tmp/aci_attack_union'",
            none.clone(),
            Rejected,
        ),
        // Locking reads.
        ("SELECT * FROM evidence FOR UPDATE", none.clone(), Rejected),
        (
            "SELECT * FROM evidence LOCK IN SHARE MODE",
            none.clone(),
            Rejected,
        ),
        ("SELECT * FROM evidence FOR SHARE", none.clone(), Rejected),
        (
            "SELECT * FROM evidence FOR UPDATE NOWAIT",
            none.clone(),
            Rejected,
        ),
        (
            "SELECT * FROM evidence FOR UPDATE SKIP LOCKED",
            none.clone(),
            Rejected,
        ),
        (
            "SELECT * FROM (SELECT * FROM evidence FOR UPDATE) AS d",
            none.clone(),
            Rejected,
        ),
        // Executable comments and optimizer hints.
        (
            "SELECT 1 /*!50000 ; DROP TABLE evidence */",
            none.clone(),
            Rejected,
        ),
        ("/*!50000 DROP TABLE evidence */", none.clone(), Rejected),
        ("SELECT /*!99999 SLEEP(5), */ 1", none.clone(), Rejected),
        ("SELECT 1 /*M!100000 , SLEEP(5) */", none.clone(), Rejected),
        ("SELECT 1 /*m!100000 , SLEEP(5) */", none.clone(), Rejected),
        (
            "SELECT /*+ MAX_EXECUTION_TIME(0) */ * FROM evidence",
            none.clone(),
            Rejected,
        ),
        (
            "SELECT * FROM evidence WHERE note = '/*!' OR 1 = 1 /*!*/",
            none.clone(),
            Rejected,
        ),
        // Denied functions, however spelled.
        ("SELECT SLEEP(5)", none.clone(), Rejected),
        ("SELECT sLeEp (5)", none.clone(), Rejected),
        ("SELECT `sleep`(5)", none.clone(), Rejected),
        (
            "SELECT * FROM evidence WHERE SLEEP(5) = 0",
            none.clone(),
            Rejected,
        ),
        (
            "SELECT BENCHMARK(100000000, MD5('x'))",
            none.clone(),
            Rejected,
        ),
        ("SELECT GET_LOCK('aci', 10)", none.clone(), Rejected),
        ("SELECT RELEASE_LOCK('aci')", none.clone(), Rejected),
        ("SELECT LOAD_FILE('/etc/passwd')", none.clone(), Rejected),
        ("SELECT NEXTVAL(s)", none.clone(), Rejected),
        (
            "WITH x AS (SELECT SLEEP(5)) SELECT * FROM x",
            none.clone(),
            Rejected,
        ),
        // CTEs that wrap or front DML.
        (
            "WITH x AS (DELETE FROM evidence RETURNING id) SELECT * FROM x",
            none.clone(),
            Rejected,
        ),
        (
            "WITH x AS (UPDATE evidence SET small = 0) SELECT 1",
            none.clone(),
            Rejected,
        ),
        (
            "WITH x AS (SELECT 1) DELETE FROM evidence",
            none.clone(),
            Rejected,
        ),
        (
            "WITH x AS (SELECT 1) UPDATE evidence SET small = 0",
            none.clone(),
            Rejected,
        ),
        (
            "WITH x AS (SELECT 1) INSERT INTO audit VALUES (4, 'x')",
            none.clone(),
            Rejected,
        ),
        // Unicode and case tricks.
        ("sElEcT 1; dRoP tAbLe evidence", none.clone(), Rejected),
        (
            "SELECT 1\u{FF1B}DROP TABLE evidence",
            none.clone(),
            Rejected,
        ),
        (
            "\u{FF24}\u{FF25}\u{FF2C}\u{FF25}\u{FF34}\u{FF25} FROM evidence",
            none.clone(),
            Rejected,
        ),
        (
            "SELECT 1\u{200B}; DROP TABLE evidence",
            none.clone(),
            Rejected,
        ),
        ("DELETE\u{00A0}FROM evidence", none.clone(), Rejected),
        // A Cyrillic "Ѕ": not SLEEP, just an unknown function on the server.
        ("SELECT \u{0405}LEEP(5)", none.clone(), Harmless),
        // Tokens the server lexes differently from the gate's parser.
        (
            "SELECT b\"\\\" AS x, \" , note FROM evidence, (SELECT 1 AS b) d -- \"",
            none.clone(),
            Rejected,
        ),
        ("SELECT note, 1.5FROM(evidence)", none.clone(), Rejected),
        ("SELECT 1.5INTO @a", none.clone(), Rejected),
        (
            "SELECT 1 --\u{a0} UNION SELECT note FROM evidence",
            none.clone(),
            Rejected,
        ),
        ("SELECT 1 # x \0 , SLEEP(1)", none.clone(), Rejected),
        ("SELECT LAST_INSERT_ID(777)", none.clone(), Rejected),
        (
            "SELECT @@`version` AS v, (SELECT user FROM mysql.user LIMIT 1) AS x -- `",
            none.clone(),
            Rejected,
        ),
        (
            "SELECT @@`version` AS v, SLEEP(2), GET_LOCK('aci', 0) -- `",
            none.clone(),
            Rejected,
        ),
        (
            "SELECT id INTO@x FROM evidence LIMIT 1",
            none.clone(),
            Rejected,
        ),
        (
            "SELECT *, @a. FROM evidence, mysql.user",
            none.clone(),
            Rejected,
        ),
        ("SELECT note END FROM mysql.user", none.clone(), Rejected),
        ("SELECT 1 END; DROP TABLE evidence", none.clone(), Rejected),
        // Other schemas, stored functions, assignments, odd placeholders.
        ("SELECT * FROM mysql.user", none.clone(), Rejected),
        (
            "SELECT * FROM evidence WHERE id IN (SELECT 1 FROM mysql.user)",
            none.clone(),
            Rejected,
        ),
        (
            "(SELECT 1) UNION (SELECT user FROM mysql.user)",
            none.clone(),
            Rejected,
        ),
        ("SELECT mysql.some_function()", none.clone(), Rejected),
        (
            "SELECT * FROM (TABLE mysql.user) AS d",
            none.clone(),
            Rejected,
        ),
        (
            "SELECT * FROM evidence WHERE id IN (TABLE mysql.user)",
            none.clone(),
            Rejected,
        ),
        ("SELECT @a := 1", none.clone(), Rejected),
        (
            "SELECT * FROM evidence WHERE (@x := id) > 0",
            none.clone(),
            Rejected,
        ),
        ("SELECT * FROM evidence WHERE id = $1", json!([1]), Rejected),
        (
            "SELECT * FROM evidence PROCEDURE ANALYSE()",
            none.clone(),
            Rejected,
        ),
        ("", none.clone(), Rejected),
        (";;", none.clone(), Rejected),
        // Injection through params: bound as values, never parsed as SQL.
        (
            "SELECT id FROM evidence WHERE note = ?",
            json!(["'; DROP TABLE evidence; --"]),
            Harmless,
        ),
        (
            "SELECT id FROM evidence WHERE note = ?",
            json!(["x' OR '1'='1"]),
            Harmless,
        ),
        (
            "SELECT id FROM evidence WHERE id = ?",
            json!(["1 OR 1=1"]),
            Harmless,
        ),
        (
            "SELECT id FROM evidence WHERE note = ?",
            json!(["\\'; DELETE FROM evidence; #"]),
            Harmless,
        ),
        (
            "SELECT id FROM evidence WHERE note = ?",
            json!(["/*!50000 DROP TABLE evidence*/"]),
            Harmless,
        ),
        ("SELECT ? AS v", json!(["SLEEP(5)"]), Harmless),
        ("SELECT ? AS v", json!(["1; DROP TABLE evidence"]), Harmless),
        ("SELECT id FROM evidence WHERE id = ?", json!([]), Rejected),
        (
            "SELECT id FROM evidence",
            json!(["'; DROP TABLE evidence; --"]),
            Rejected,
        ),
        // Reading the infrastructure: host, paths, port, account.
        (
            "SELECT @@hostname, @@datadir, @@port, @@socket, @@pid_file, USER(), CURRENT_USER()",
            none.clone(),
            Rejected,
        ),
        ("SELECT @@hostname", none.clone(), Rejected),
        ("SELECT @@datadir", none.clone(), Rejected),
        ("SELECT @@port", none.clone(), Rejected),
        ("SELECT @@socket", none.clone(), Rejected),
        ("SELECT @@pid_file", none.clone(), Rejected),
        ("SELECT @@basedir, @@tmpdir", none.clone(), Rejected),
        ("SELECT @@global.hostname", none.clone(), Rejected),
        ("SELECT @@session.server_id", none.clone(), Rejected),
        ("SELECT USER()", none.clone(), Rejected),
        ("SELECT CURRENT_USER()", none.clone(), Rejected),
        ("SELECT CURRENT_USER", none.clone(), Rejected),
        ("SELECT SESSION_USER()", none.clone(), Rejected),
        ("SELECT SYSTEM_USER()", none.clone(), Rejected),
        ("SELECT CURRENT_ROLE()", none.clone(), Rejected),
        ("SELECT CONNECTION_ID()", none.clone(), Rejected),
        ("SELECT UUID(), UUID_SHORT()", none.clone(), Rejected),
        (
            "SELECT note FROM evidence WHERE note = @@hostname",
            none.clone(),
            Rejected,
        ),
        (
            "SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_VARIABLES WHERE VARIABLE_NAME = 'HOSTNAME'",
            none.clone(),
            Rejected,
        ),
        // The allow-listed variables still read.
        (
            "SELECT @@version, @@version_comment",
            none.clone(),
            Harmless,
        ),
        // Reads that look alarming but only read.
        ("SELECT 0x44524F50205441424C45", none.clone(), Harmless),
        (
            "SELECT CHAR(68, 82, 79, 80) AS word",
            none.clone(),
            Harmless,
        ),
        (
            "SELECT * FROM evidence WHERE id = 1 OR 1 = 1 -- ",
            none.clone(),
            Harmless,
        ),
        (
            "SELECT 'DROP TABLE evidence; --' AS s",
            none.clone(),
            Harmless,
        ),
        (
            "SELECT * FROM evidence e1, evidence e2, evidence e3",
            none.clone(),
            Harmless,
        ),
    ]
}

fn params(value: &Value) -> Vec<SqlValue> {
    serde_json::from_value(value.clone()).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_attack_corpus_is_rejected_or_harmless_and_changes_nothing() {
    let corpus = corpus();
    assert!(corpus.len() >= 50, "{} attacks", corpus.len());
    let rejected = corpus.iter().filter(|(_, _, e)| *e == Rejected).count();
    assert!(rejected >= 80, "{rejected} expected rejections");

    let db = TestDatabase::create(SETUP).await;
    let outcome = tokio::spawn(run_corpus(db.clone(), corpus)).await;
    db.drop().await;
    if let Err(error) = outcome {
        std::panic::resume_unwind(error.into_panic());
    }
}

async fn run_corpus(db: TestDatabase, corpus: Vec<(&'static str, Value, Expect)>) {
    let before = db.checksums().await;
    assert_eq!(before.len(), 2);
    assert!(before.values().all(Option::is_some), "{before:?}");

    let source = DataSourceConfig::new(db.reader_url())
        .timeout(Duration::from_millis(500))
        .client_timeout(Duration::from_secs(3));
    let executor =
        Arc::new(MysqlAsyncSource::new(&MysqlConfig::new().data_source("shop", source)).unwrap());
    let boundary = ToolBoundary::builder(Arc::new(MemoryStore::new()))
        .tool(query_mysql_tool(Arc::clone(&executor)))
        .build()
        .unwrap();
    let ctx = RunContext::new(
        RunId::new("run-attacks").unwrap(),
        invocation_core::CallPolicy::AUTHORIZED_READ_ONLY,
    );

    // 1. Through the tool.
    let mut wrong = Vec::new();
    for (index, (sql, params, expect)) in corpus.iter().enumerate() {
        let arguments = json!({"data_source": "shop", "sql": sql, "params": params});
        let outcome = boundary
            .invoke(
                &ctx,
                ToolEnvelope::new(
                    format!("attack-{index}"),
                    "run-attacks",
                    "query_mysql",
                    arguments.to_string(),
                ),
            )
            .await;
        let code = outcome.control.error_code;
        let rejected = matches!(
            code,
            Some(ErrorCode::QueryRejected | ErrorCode::InvalidInput)
        );
        match expect {
            Rejected if !rejected => wrong.push(format!("not rejected: {sql:?} -> {code:?}")),
            Harmless if rejected => wrong.push(format!("refused a harmless read: {sql:?}")),
            _ => {}
        }
        // Whatever happened, the agent sees no server text.
        let observation = outcome.observation.to_json().to_string();
        for secret in [db.reader(), db.reader_password(), db.database(), db.host()] {
            assert!(!observation.contains(secret), "{sql:?}: {observation}");
        }
        if outcome.control.status == InvocationStatus::Error && sql.len() > 12 {
            assert!(!observation.contains(sql), "{sql:?}: {observation}");
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
    assert_eq!(db.checksums().await, before, "the tool changed a table");

    // 2. Below the gate: the server-side layers alone (read-only transaction,
    // SELECT-only account, prepared statements, time limits).
    let mut outcomes = Vec::new();
    for (sql, params_json, _) in &corpus {
        let params = params(params_json);
        let result = executor
            .run_read_only(MysqlQuery {
                data_source: "shop",
                sql,
                params: &params,
            })
            .await;
        outcomes.push((
            *sql,
            result
                .map(|raw| raw.rows.len())
                .map_err(|e| e.server_code()),
        ));
    }
    assert_eq!(
        db.checksums().await,
        before,
        "a statement below the gate changed a table: {outcomes:#?}"
    );
    // Writes meet the missing privilege or the read-only transaction; stacked
    // statements do not even prepare.
    let writes = [
        "DROP",
        "DELETE",
        "UPDATE",
        "INSERT",
        "TRUNCATE",
        "ALTER",
        "CREATE",
        "RENAME",
        "REPLACE",
        "GRANT",
        "SELECT 1;",
        "SELECT 1 /* ; */ ;",
        "LOAD",
        "LOCK",
    ];
    for (sql, result) in &outcomes {
        if writes.iter().any(|verb| sql.starts_with(verb)) {
            assert!(result.is_err(), "{sql:?} ran below the gate: {result:?}");
        }
    }
    for path in [
        "/tmp/aci_attack_outfile",
        "/tmp/aci_attack_dumpfile",
        "/tmp/aci_attack_union",
    ] {
        assert!(!std::path::Path::new(path).exists(), "{path} was written");
    }

    // The pool still serves ordinary reads.
    let raw = executor
        .run_read_only(MysqlQuery {
            data_source: "shop",
            sql: "SELECT COUNT(*) FROM evidence",
            params: &[],
        })
        .await
        .unwrap();
    assert_eq!(raw.rows.len(), 1);
}
