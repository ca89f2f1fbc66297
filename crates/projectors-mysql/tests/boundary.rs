//! `query_mysql` end to end through the ToolBoundary with the in-memory store
//! and a fake executor (canned rows behind the real SQL gate).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use aci_contracts::{ErrorCode, EvidenceStatus, InvocationStatus, RunId};
use async_trait::async_trait;
use invocation_core::{
    BoundaryOutcome, DEFAULT_MAX_AGENT_RESULT_BYTES, RunContext, ToolBoundary, ToolEnvelope,
};
use projectors_mysql::{
    Error, MysqlQuery, MysqlSource, RawCell, RawColumn, RawColumnKind, RawResultSet, gate,
    query_mysql_tool,
};
use serde_json::{Value, json};
use store_memory::MemoryStore;

#[derive(Debug, Default)]
struct FakeMysql {
    sources: HashMap<String, RawResultSet>,
    calls: AtomicUsize,
}

#[async_trait]
impl MysqlSource for FakeMysql {
    async fn query(&self, query: MysqlQuery<'_>) -> projectors_mysql::Result<RawResultSet> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let raw = self
            .sources
            .get(query.data_source)
            .ok_or(Error::DataSourceUnknown)?;
        gate::check_query(
            query.sql,
            query.params.len(),
            &gate::AllowedSchemas::new(["shop"]),
        )?;
        Ok(raw.clone())
    }
}

fn fake() -> Arc<FakeMysql> {
    let orders = RawResultSet {
        columns: vec![
            RawColumn::new("id", RawColumnKind::UnsignedInteger),
            RawColumn::new("state", RawColumnKind::Text),
            RawColumn::new("total", RawColumnKind::Decimal),
            RawColumn::new("updated_at", RawColumnKind::DateTime),
        ],
        rows: vec![
            vec![
                RawCell::UInt(18_446_744_073_709_551_615),
                RawCell::Text("PAYMENT_TIMEOUT".into()),
                RawCell::Decimal("99.500000".into()),
                RawCell::DateTime {
                    year: 2025,
                    month: 3,
                    day: 1,
                    hour: 12,
                    minute: 0,
                    second: 5,
                    micros: 0,
                },
            ],
            vec![
                RawCell::UInt(2),
                RawCell::Text("PAID".into()),
                RawCell::Null,
                RawCell::Null,
            ],
        ],
        more_rows: false,
        values_shortened: false,
    };
    let empty = RawResultSet {
        columns: vec![RawColumn::new("id", RawColumnKind::Integer)],
        ..RawResultSet::default()
    };
    // Wide rows of badly escaping text, still within the boundary's raw limit.
    let huge = RawResultSet {
        columns: (0..40)
            .map(|i| RawColumn::new(format!("c{i}"), RawColumnKind::Text))
            .collect(),
        rows: (0..40)
            .map(|_| {
                (0..40)
                    .map(|_| RawCell::Text("\"\u{1}".repeat(60)))
                    .collect()
            })
            .collect(),
        more_rows: true,
        values_shortened: false,
    };
    Arc::new(FakeMysql {
        sources: HashMap::from([
            ("orders".to_owned(), orders),
            ("empty".to_owned(), empty),
            ("huge".to_owned(), huge),
        ]),
        calls: AtomicUsize::new(0),
    })
}

fn boundary(executor: Arc<FakeMysql>) -> ToolBoundary {
    ToolBoundary::builder(Arc::new(MemoryStore::new()))
        .tool(query_mysql_tool(executor))
        .build()
        .unwrap()
}

async fn call(boundary: &ToolBoundary, id: &str, arguments: Value) -> BoundaryOutcome {
    let ctx = RunContext::new(
        RunId::new("run-mysql").unwrap(),
        invocation_core::CallPolicy::AUTHORIZED_READ_ONLY,
    );
    boundary
        .invoke(
            &ctx,
            ToolEnvelope::new(id, "run-mysql", "query_mysql", arguments.to_string()),
        )
        .await
}

#[tokio::test]
async fn evidence_found_end_to_end() {
    let boundary = boundary(fake());
    let outcome = call(
        &boundary,
        "call-found",
        json!({"data_source": "orders", "sql": "SELECT id, state, total, updated_at FROM orders WHERE state <> ?", "params": ["NEW"]}),
    )
    .await;
    assert_eq!(
        outcome.observation.to_json(),
        json!({
            "evidence_status": "EVIDENCE_FOUND",
            "tool_call_id": "call-found",
            "columns": [
                {"name": "id", "type": "UNSIGNED_INTEGER"},
                {"name": "state", "type": "STRING"},
                {"name": "total", "type": "DECIMAL"},
                {"name": "updated_at", "type": "DATETIME"}
            ],
            "rows": [
                [18_446_744_073_709_551_615u64, "PAYMENT_TIMEOUT", "99.500000", "2025-03-01T12:00:05"],
                [2, "PAID", null, null]
            ],
            "truncated": false
        })
    );
    let control = &outcome.control;
    assert_eq!(control.status, InvocationStatus::Ready);
    assert_eq!(control.evidence_status, EvidenceStatus::EvidenceFound);
    assert_eq!(control.returned_count, 2);
    assert!(!control.truncated);
    assert_eq!(control.tool_name, "query_mysql");
    assert_eq!(
        control.scope,
        json!({"data_source": "orders", "sql": "SELECT id, state, total, updated_at FROM orders WHERE state <> ?", "params": ["NEW"]})
    );
}

#[tokio::test]
async fn zero_rows_is_no_evidence() {
    let boundary = boundary(fake());
    let outcome = call(
        &boundary,
        "call-empty",
        json!({"data_source": "empty", "sql": "SELECT id FROM t WHERE 1 = 0"}),
    )
    .await;
    assert_eq!(
        outcome.observation.to_json(),
        json!({
            "evidence_status": "NO_EVIDENCE",
            "tool_call_id": "call-empty",
            "columns": [{"name": "id", "type": "INTEGER"}],
            "rows": [],
            "truncated": false
        })
    );
    assert_eq!(outcome.control.status, InvocationStatus::Ready);
    assert_eq!(outcome.control.evidence_status, EvidenceStatus::NoEvidence);
}

#[tokio::test]
async fn the_largest_input_is_truncated_not_refused() {
    let boundary = boundary(fake());
    let outcome = call(
        &boundary,
        "call-huge",
        json!({"data_source": "huge", "sql": "SELECT * FROM wide"}),
    )
    .await;
    assert_eq!(outcome.control.status, InvocationStatus::Ready);
    assert!(outcome.control.truncated);
    let observation = outcome.observation.to_json();
    assert_eq!(observation["truncated"], true);
    assert!(observation.to_string().len() <= DEFAULT_MAX_AGENT_RESULT_BYTES);
    assert_eq!(observation["columns"].as_array().unwrap().len(), 32);
}

#[tokio::test]
async fn errors_carry_only_their_code() {
    let fake = fake();
    let boundary = boundary(Arc::clone(&fake));
    for (id, arguments, code, executed) in [
        (
            "unknown",
            json!({"data_source": "billing", "sql": "SELECT 1"}),
            ErrorCode::DataSourceUnknown,
            true,
        ),
        (
            "write",
            json!({"data_source": "orders", "sql": "DELETE FROM orders WHERE id = ?", "params": [1]}),
            ErrorCode::QueryRejected,
            true,
        ),
        (
            "two",
            json!({"data_source": "orders", "sql": "SELECT 1; DROP TABLE orders"}),
            ErrorCode::QueryRejected,
            true,
        ),
        (
            "params",
            json!({"data_source": "orders", "sql": "SELECT * FROM orders WHERE id = ?"}),
            ErrorCode::InvalidInput,
            true,
        ),
        (
            "blank",
            json!({"data_source": "orders", "sql": "   "}),
            ErrorCode::InvalidInput,
            false,
        ),
        (
            "nosource",
            json!({"data_source": "", "sql": "SELECT 1"}),
            ErrorCode::InvalidInput,
            false,
        ),
        (
            "limit",
            json!({"data_source": "orders", "sql": "SELECT 1", "limit": 5}),
            ErrorCode::InvalidInput,
            false,
        ),
    ] {
        let before = fake.calls.load(Ordering::SeqCst);
        let outcome = call(&boundary, id, arguments.clone()).await;
        assert_eq!(outcome.control.error_code, Some(code), "{id}");
        assert_eq!(outcome.control.status, InvocationStatus::Error, "{id}");
        assert_eq!(
            outcome.observation.to_json(),
            json!({
                "evidence_status": "ERROR",
                "error_code": code.as_str(),
                "message": code.message(),
                "tool_call_id": id
            }),
            "{id}"
        );
        assert_eq!(fake.calls.load(Ordering::SeqCst) > before, executed, "{id}");
    }
}

#[tokio::test]
async fn equivalent_requests_share_a_fingerprint_and_different_ones_do_not() {
    let boundary = boundary(fake());
    let fingerprint = |outcome: BoundaryOutcome| outcome.control.scope_fingerprint.unwrap();
    let base = fingerprint(
        call(
            &boundary,
            "f1",
            json!({"data_source": "orders", "sql": "SELECT id FROM orders WHERE state = ?", "params": ["PAID"]}),
        )
        .await,
    );
    let same = fingerprint(
        call(
            &boundary,
            "f2",
            json!({"data_source": "orders", "sql": "  SELECT id\n  FROM orders\tWHERE state = ? ;", "params": ["PAID"]}),
        )
        .await,
    );
    assert_eq!(base, same);
    for (id, arguments) in [
        (
            "f3",
            json!({"data_source": "orders", "sql": "SELECT id FROM orders WHERE state = ?", "params": ["NEW"]}),
        ),
        (
            "f4",
            json!({"data_source": "empty", "sql": "SELECT id FROM orders WHERE state = ?", "params": ["PAID"]}),
        ),
        (
            "f5",
            json!({"data_source": "orders", "sql": "SELECT id FROM orders WHERE state = 'PAID'  AND ? = ?", "params": [1, 1]}),
        ),
        (
            "f6",
            json!({"data_source": "orders", "sql": "SELECT id FROM orders WHERE state = 'PAID' AND ? = ?", "params": [1, 1]}),
        ),
    ] {
        let other = fingerprint(call(&boundary, id, arguments).await);
        assert_ne!(base, other, "{id}");
    }
    // Whitespace inside a literal is significant.
    let a = fingerprint(
        call(
            &boundary,
            "f7",
            json!({"data_source": "orders", "sql": "SELECT 'a  b'"}),
        )
        .await,
    );
    let b = fingerprint(
        call(
            &boundary,
            "f8",
            json!({"data_source": "orders", "sql": "SELECT 'a b'"}),
        )
        .await,
    );
    assert_ne!(a, b);
}

#[test]
fn invalid_bounds_are_refused_when_the_tool_is_built() {
    let bad = projectors_mysql::MysqlBounds {
        max_rows: 0,
        ..projectors_mysql::MysqlBounds::default()
    };
    let error = projectors_mysql::query_mysql_tool_with(fake(), bad).unwrap_err();
    assert_eq!(error.to_string(), "max_rows must be at least 1");
    let tight = projectors_mysql::MysqlBounds {
        max_rows: 1,
        ..projectors_mysql::MysqlBounds::default()
    };
    assert!(projectors_mysql::query_mysql_tool_with(fake(), tight).is_ok());
}

#[test]
fn port_errors_keep_their_category_and_retryability() {
    use invocation_core::{ExecutionError, ExecutionErrorKind};
    let rejected = ExecutionError::from(Error::DataSourceUnknown);
    assert_eq!(rejected.kind(), ExecutionErrorKind::DataSourceUnknown);
    assert!(!rejected.retryable());
    let timeout = ExecutionError::from(Error::Timeout);
    assert_eq!(timeout.kind(), ExecutionErrorKind::Timeout);
    assert!(timeout.retryable());
}
