//! No credential reaches the model through `query_mysql`: every built-in
//! rule's shape planted in real MariaDB rows (text, JSON and binary
//! columns), read through the boundary by a SELECT-only account over a real
//! Redis store. The observation carries the marker and the words around it,
//! never the secret; the control view counts what was planted; the record
//! keeps the raw rows whole. Needs the server of `tests/mariadb.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::Arc;

use aci_contracts::{InvocationStatus, RunId};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use invocation_core::redact::marker;
use invocation_core::testing::secrets::{
    examples, json_escaped, ready_observation_without, stored_raw,
};
use invocation_core::{BoundaryOutcome, RunContext, ToolBoundary, ToolEnvelope};
use mysql_async::prelude::Queryable;
use projectors_mysql::testing::TestDatabase;
use projectors_mysql::{DataSourceConfig, MysqlAsyncSource, MysqlConfig, query_mysql_tool};
use serde_json::{Value, json};
use store_redis::testing::{shared_store, unique_id};

const SCHEMA: &[&str] = &[
    "CREATE TABLE planted (id INT NOT NULL PRIMARY KEY, note TEXT NULL, doc JSON NULL, payload BLOB NULL) DEFAULT CHARSET = utf8mb4",
    "CREATE TABLE accounts (id INT NOT NULL PRIMARY KEY, login VARCHAR(40) NOT NULL, password VARCHAR(100) NULL, api_key VARCHAR(100) NULL, password_expiry_days INT NULL)",
];

/// Runs `body` on a fresh database and account, and always drops both.
async fn with_db<F, Fut>(body: F)
where
    F: FnOnce(TestDatabase) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let db = TestDatabase::create(SCHEMA).await;
    let outcome = tokio::spawn(body(db.clone())).await;
    db.drop().await;
    if let Err(error) = outcome {
        std::panic::resume_unwind(error.into_panic());
    }
}

fn boundary(db: &TestDatabase) -> ToolBoundary {
    let config = MysqlConfig::new().data_source("shop", DataSourceConfig::new(db.reader_url()));
    let source = MysqlAsyncSource::new(&config).unwrap();
    ToolBoundary::builder(Arc::new(shared_store()))
        .tool(query_mysql_tool(source))
        .build()
        .unwrap()
}

async fn call(boundary: &ToolBoundary, run: &RunContext, id: &str, args: Value) -> BoundaryOutcome {
    let envelope = ToolEnvelope::new(id, run.run_id.as_str(), "query_mysql", args.to_string());
    boundary.invoke(run, envelope).await
}

#[tokio::test(flavor = "multi_thread")]
async fn every_planted_secret_in_text_json_and_binary_cells_is_redacted() {
    with_db(|db| async move {
        let examples = examples();
        let mut admin = db.admin().await;
        for (i, e) in examples.iter().enumerate() {
            let doc = json!({"log": e.text, "n": i}).to_string();
            admin
                .exec_drop(
                    "INSERT INTO planted VALUES (?, ?, ?, ?)",
                    (i, e.text.as_str(), doc, e.text.as_bytes()),
                )
                .await
                .unwrap();
        }
        drop(admin);
        let boundary = boundary(&db);
        let run = RunContext::new(
            RunId::new(unique_id("run-redact-mysql")).unwrap(),
            invocation_core::CallPolicy::AUTHORIZED_READ_ONLY,
        );

        for (i, e) in examples.iter().enumerate() {
            let id = format!("call_{i}");
            let sql = "SELECT id, note, doc, payload FROM planted WHERE id = ?";
            let outcome = call(
                &boundary,
                &run,
                &id,
                json!({"data_source": "shop", "sql": sql, "params": [i]}),
            )
            .await;
            let (observation, text) = ready_observation_without(&outcome, e);
            let encoded_secret = STANDARD.encode(e.secret.as_bytes());
            assert!(!text.contains(&encoded_secret[..encoded_secret.len() - 4]));

            let expected = e.text.replacen(&e.secret, &marker(e.rule), 1);
            let row = &observation["rows"][0];
            assert_eq!(row[0], json!(i), "{}", e.rule);
            assert_eq!(row[1], json!(expected), "{}", e.rule);
            let doc: Value = serde_json::from_str(row[2].as_str().unwrap()).unwrap();
            assert_eq!(doc, json!({"log": expected, "n": i}), "{}", e.rule);
            assert_eq!(
                row[3],
                json!(STANDARD.encode(expected.as_bytes())),
                "{}",
                e.rule
            );
            assert_eq!(observation["truncated"], false, "{}", e.rule);
            assert_eq!(
                outcome.control.redactions,
                BTreeMap::from([(e.rule.to_owned(), 3)]),
                "{}",
                e.rule
            );
            let raw = stored_raw(&boundary, &run, &id).await;
            assert!(
                raw.contains(&json_escaped(&e.secret)),
                "{}: raw is whole",
                e.rule
            );
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn columns_named_for_secrets_are_replaced_whole_and_no_row_or_column_is_lost() {
    with_db(|db| async move {
        let token = format!(
            "ghp_{}",
            invocation_core::testing::secrets::fake(
                invocation_core::testing::secrets::ALNUM,
                36,
                7
            )
        );
        let mut admin = db.admin().await;
        admin
            .exec_drop(
                "INSERT INTO accounts VALUES (1, 'app', 'hunter2!', ?, 90), (2, 'ops', NULL, NULL, 30), (3, 'ci', '********', '${CI_KEY}', 7)",
                (token.as_str(),),
            )
            .await
            .unwrap();
        drop(admin);
        let boundary = boundary(&db);
        let run = RunContext::new(RunId::new(unique_id("run-redact-mysql")).unwrap(), invocation_core::CallPolicy::AUTHORIZED_READ_ONLY);
        let outcome = call(
            &boundary,
            &run,
            "call_accounts",
            json!({"data_source": "shop", "sql": "SELECT login, password, api_key, password_expiry_days FROM accounts ORDER BY id"}),
        )
        .await;
        assert_eq!(outcome.control.status, InvocationStatus::Ready);
        let observation = outcome.observation.to_json();
        assert_eq!(
            observation["rows"],
            json!([
                ["app", "<redacted:kv_secret>", "<redacted:github_token>", 90],
                ["ops", null, null, 30],
                ["ci", "********", "${CI_KEY}", 7]
            ])
        );
        assert_eq!(observation["columns"].as_array().unwrap().len(), 4);
        assert_eq!(
            outcome.control.redactions,
            BTreeMap::from([("github_token".to_owned(), 1), ("kv_secret".to_owned(), 1)])
        );
        let raw = stored_raw(&boundary, &run, "call_accounts").await;
        assert!(raw.contains("hunter2!") && raw.contains(&token));
    })
    .await;
}
