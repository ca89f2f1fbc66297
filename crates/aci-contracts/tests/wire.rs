//! Golden JSON for every wire type, validation rules, and serde round trips.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use aci_contracts::*;
use serde_json::{Value, json};

fn id(s: &str) -> ToolCallId {
    ToolCallId::new(s).unwrap()
}

fn ts(s: &str) -> Timestamp {
    Timestamp::parse(s).unwrap()
}

fn round_trip<T>(value: &T) -> Value
where
    T: serde::Serialize + serde::de::DeserializeOwned + PartialEq + std::fmt::Debug,
{
    let text = serde_json::to_string(value).unwrap();
    let back: T = serde_json::from_str(&text).unwrap();
    assert_eq!(&back, value);
    serde_json::from_str(&text).unwrap()
}

fn knowledge_result() -> LookupKnowledgeResult {
    LookupKnowledgeResult {
        evidence_status: ReadyEvidenceStatus::EvidenceFound,
        tool_call_id: id("call_rag_1"),
        query: "连接池 timeout 😱".into(),
        evidence: vec![KnowledgeEvidence {
            document_id: "runbooks/db-pool.md#2".into(),
            source: "runbooks/db-pool.md".into(),
            title: "数据库连接池耗尽".into(),
            breadcrumb: "数据库连接池耗尽 > 排查步骤".into(),
            excerpt: "检查 max_pool_size 😱".into(),
        }],
        returned_count: 1,
        relevance_level: Some(RelevanceLevel::High),
        truncated: false,
        retrieval_legs: Vec::new(),
        retrieval_fallback: None,
    }
}

fn logs_result() -> QueryLogsResult {
    QueryLogsResult {
        evidence_status: ReadyEvidenceStatus::EvidenceFound,
        tool_call_id: id("call_logs_1"),
        source_kind: SourceKind::Mock,
        scope: LogScope {
            topic: LogTopic::Application,
            query: "timeout".into(),
            lookback_minutes: 60,
            start_time: ts("2026-11-30T09:00:00.000Z"),
            end_time: ts("2026-11-30T10:00:00.000Z"),
        },
        match_count: 3,
        returned_count: 2,
        patterns: vec![LogPattern {
            pattern: "pool timeout after <DURATION>".into(),
            level: LogLevel::Error,
            count: 3,
            first_seen: ts("2026-11-30T09:10:00.000Z"),
            last_seen: ts("2026-11-30T09:50:00.000Z"),
        }],
        events: vec![
            LogEvent {
                timestamp: ts("2026-11-30T09:10:00.000Z"),
                level: LogLevel::Error,
                message: "pool timeout after 30s".into(),
            },
            LogEvent {
                timestamp: ts("2026-11-30T09:50:00.000Z"),
                level: LogLevel::Error,
                message: "pool timeout after 31s".into(),
            },
        ],
        truncated: true,
    }
}

fn mysql_result() -> QueryMysqlResult {
    QueryMysqlResult {
        evidence_status: ReadyEvidenceStatus::EvidenceFound,
        tool_call_id: id("call_sql_1"),
        columns: vec![
            MysqlColumn {
                name: "id".into(),
                column_type: ColumnType::UnsignedInteger,
            },
            MysqlColumn {
                name: "amount".into(),
                column_type: ColumnType::Decimal,
            },
            MysqlColumn {
                name: "note".into(),
                column_type: ColumnType::String,
            },
        ],
        rows: vec![vec![
            SqlValue::UInt(u64::MAX),
            SqlValue::Text("12.50".into()),
            SqlValue::Null,
        ]],
        returned_count: 1,
        truncated: false,
    }
}

#[test]
fn golden_knowledge_result_and_observation() {
    let r = knowledge_result();
    assert_eq!(r.validate(), Ok(()));
    assert_eq!(
        round_trip(&r),
        json!({
            "evidence_status": "EVIDENCE_FOUND",
            "tool_call_id": "call_rag_1",
            "query": "连接池 timeout 😱",
            "evidence": [{
                "document_id": "runbooks/db-pool.md#2",
                "source": "runbooks/db-pool.md",
                "title": "数据库连接池耗尽",
                "breadcrumb": "数据库连接池耗尽 > 排查步骤",
                "excerpt": "检查 max_pool_size 😱"
            }],
            "returned_count": 1,
            "relevance_level": "HIGH",
            "truncated": false
        })
    );
    assert_eq!(
        round_trip(&r.observation()),
        json!({
            "evidence_status": "EVIDENCE_FOUND",
            "tool_call_id": "call_rag_1",
            "query": "连接池 timeout 😱",
            "evidence": [{
                "document_id": "runbooks/db-pool.md#2",
                "source": "runbooks/db-pool.md",
                "title": "数据库连接池耗尽",
                "breadcrumb": "数据库连接池耗尽 > 排查步骤",
                "excerpt": "检查 max_pool_size 😱"
            }],
            "relevance_level": "HIGH",
            "truncated": false
        })
    );
    let none = LookupKnowledgeResult {
        evidence_status: ReadyEvidenceStatus::NoEvidence,
        evidence: vec![],
        returned_count: 0,
        relevance_level: None,
        ..r
    };
    assert_eq!(none.validate(), Ok(()));
    assert_eq!(
        round_trip(&none),
        json!({
            "evidence_status": "NO_EVIDENCE",
            "tool_call_id": "call_rag_1",
            "query": "连接池 timeout 😱",
            "evidence": [],
            "returned_count": 0,
            "truncated": false
        })
    );
}

/// The retrieval legs and fallback are harness-only: in the stored result
/// and its counters (so in the control view), never in the observation.
#[test]
fn golden_knowledge_retrieval_trace() {
    let r = LookupKnowledgeResult {
        retrieval_legs: vec!["bm25".into()],
        retrieval_fallback: Some("EMBEDDER_TIMEOUT".into()),
        ..knowledge_result()
    };
    assert_eq!(r.validate(), Ok(()));
    let wire = round_trip(&r);
    assert_eq!(wire["retrieval_legs"], json!(["bm25"]));
    assert_eq!(wire["retrieval_fallback"], json!("EMBEDDER_TIMEOUT"));
    assert_eq!(
        serde_json::to_value(r.observation()).unwrap(),
        serde_json::to_value(knowledge_result().observation()).unwrap()
    );
    let counters = r.counters();
    assert_eq!(counters.retrieval_legs, ["bm25"]);
    assert_eq!(
        counters.retrieval_fallback.as_deref(),
        Some("EMBEDDER_TIMEOUT")
    );

    // A result written before the fields existed reads back without them.
    let old = serde_json::to_value(knowledge_result()).unwrap();
    assert!(old.get("retrieval_legs").is_none() && old.get("retrieval_fallback").is_none());
    let back: LookupKnowledgeResult = serde_json::from_value(old).unwrap();
    assert!(back.retrieval_legs.is_empty() && back.retrieval_fallback.is_none());
    assert_eq!(back.counters().retrieval_legs, Vec::<String>::new());
    assert_eq!(
        logs_result().counters().retrieval_legs,
        Vec::<String>::new()
    );
    assert_eq!(mysql_result().counters().retrieval_fallback, None);

    assert!(is_retrieval_leg("bm25") && is_retrieval_leg(&"v".repeat(MAX_RETRIEVAL_LEG_BYTES)));
    assert!(!is_retrieval_leg("") && !is_retrieval_leg("BM25") && !is_retrieval_leg("bm 25"));
    assert!(!is_retrieval_leg(&"v".repeat(MAX_RETRIEVAL_LEG_BYTES + 1)));
    assert!(is_retrieval_fallback("VECTORS_NOT_READY"));
    assert!(!is_retrieval_fallback("embedder timeout") && !is_retrieval_fallback(""));
    assert!(!is_retrieval_fallback(
        &"E".repeat(MAX_RETRIEVAL_FALLBACK_BYTES + 1)
    ));

    for (legs, fallback) in [
        (vec!["bm25", "bm25"], None),
        (vec!["a", "b", "c", "d", "e"], None),
        (vec!["Vector"], None),
        (vec![""], None),
        (vec!["bm25"], Some("timeout")),
        (vec!["bm25"], Some("")),
    ] {
        let bad = LookupKnowledgeResult {
            retrieval_legs: legs.iter().map(|&leg| leg.to_owned()).collect(),
            retrieval_fallback: fallback.map(str::to_owned),
            ..knowledge_result()
        };
        assert_eq!(
            bad.validate(),
            Err(ValidationError::InvalidRetrievalTrace),
            "{legs:?} {fallback:?}"
        );
    }
}

#[test]
fn golden_logs_result_and_observation() {
    let r = logs_result();
    assert_eq!(r.validate(), Ok(()));
    let expected_scope = json!({
        "topic": "APPLICATION",
        "query": "timeout",
        "lookback_minutes": 60,
        "start_time": "2026-11-30T09:00:00.000Z",
        "end_time": "2026-11-30T10:00:00.000Z"
    });
    let patterns = json!([{
        "pattern": "pool timeout after <DURATION>",
        "level": "ERROR",
        "count": 3,
        "first_seen": "2026-11-30T09:10:00.000Z",
        "last_seen": "2026-11-30T09:50:00.000Z"
    }]);
    let events = json!([
        {"timestamp": "2026-11-30T09:10:00.000Z", "level": "ERROR", "message": "pool timeout after 30s"},
        {"timestamp": "2026-11-30T09:50:00.000Z", "level": "ERROR", "message": "pool timeout after 31s"}
    ]);
    assert_eq!(
        round_trip(&r),
        json!({
            "evidence_status": "EVIDENCE_FOUND",
            "tool_call_id": "call_logs_1",
            "source_kind": "MOCK",
            "scope": expected_scope,
            "match_count": 3,
            "returned_count": 2,
            "patterns": patterns,
            "events": events,
            "truncated": true
        })
    );
    assert_eq!(
        round_trip(&r.observation()),
        json!({
            "evidence_status": "EVIDENCE_FOUND",
            "tool_call_id": "call_logs_1",
            "source_kind": "MOCK",
            "scope": expected_scope,
            "match_count": 3,
            "patterns": patterns,
            "events": events,
            "truncated": true
        })
    );
}

#[test]
fn golden_mysql_result_and_observation() {
    let r = mysql_result();
    assert_eq!(r.validate(), Ok(()));
    let columns = json!([
        {"name": "id", "type": "UNSIGNED_INTEGER"},
        {"name": "amount", "type": "DECIMAL"},
        {"name": "note", "type": "STRING"}
    ]);
    assert_eq!(
        round_trip(&r),
        json!({
            "evidence_status": "EVIDENCE_FOUND",
            "tool_call_id": "call_sql_1",
            "columns": columns,
            "rows": [[18446744073709551615u64, "12.50", null]],
            "returned_count": 1,
            "truncated": false
        })
    );
    assert_eq!(
        round_trip(&r.observation()),
        json!({
            "evidence_status": "EVIDENCE_FOUND",
            "tool_call_id": "call_sql_1",
            "columns": columns,
            "rows": [[18446744073709551615u64, "12.50", null]],
            "truncated": false
        })
    );
}

#[test]
fn golden_control_view() {
    let view = HarnessControlView {
        tool_call_id: Some(id("call_2")),
        run_id: RunId::new("run-1").unwrap(),
        tool_name: "query_logs".into(),
        status: InvocationStatus::Ready,
        evidence_status: EvidenceStatus::NoEvidence,
        error_code: None,
        retryable: None,
        returned_count: 0,
        match_count: Some(0),
        truncated: false,
        relevance_level: None,
        retrieval_legs: Vec::new(),
        retrieval_fallback: None,
        scope: json!({"topic": "APPLICATION", "query": "timeout", "lookback_minutes": 60}),
        scope_fingerprint: Some("ab".repeat(32)),
        duplicate_of: Some(id("call_1")),
        replayed_from: Some(id("call_1")),
        redactions: [("url_password".to_owned(), 2), ("jwt".to_owned(), 1)].into(),
    };
    assert_eq!(
        round_trip(&view),
        json!({
            "tool_call_id": "call_2",
            "run_id": "run-1",
            "tool_name": "query_logs",
            "status": "READY",
            "evidence_status": "NO_EVIDENCE",
            "returned_count": 0,
            "match_count": 0,
            "truncated": false,
            "scope": {"topic": "APPLICATION", "query": "timeout", "lookback_minutes": 60},
            "scope_fingerprint": "ab".repeat(32),
            "duplicate_of": "call_1",
            "replayed_from": "call_1",
            "redactions": {"jwt": 1, "url_password": 2}
        })
    );
    let knowledge = HarnessControlView {
        tool_name: "lookup_knowledge".into(),
        match_count: None,
        retrieval_legs: vec!["bm25".into(), "vector".into()],
        retrieval_fallback: Some("VECTORS_NOT_READY".into()),
        scope: json!({"query": "pool"}),
        duplicate_of: None,
        replayed_from: None,
        redactions: BTreeMap::new(),
        ..view.clone()
    };
    assert_eq!(
        round_trip(&knowledge),
        json!({
            "tool_call_id": "call_2",
            "run_id": "run-1",
            "tool_name": "lookup_knowledge",
            "status": "READY",
            "evidence_status": "NO_EVIDENCE",
            "returned_count": 0,
            "truncated": false,
            "retrieval_legs": ["bm25", "vector"],
            "retrieval_fallback": "VECTORS_NOT_READY",
            "scope": {"query": "pool"},
            "scope_fingerprint": "ab".repeat(32)
        })
    );
    let error = HarnessControlView {
        tool_call_id: None,
        status: InvocationStatus::Error,
        evidence_status: EvidenceStatus::Error,
        error_code: Some(ErrorCode::InvalidToolCallId),
        retryable: Some(false),
        match_count: None,
        scope: Value::Null,
        scope_fingerprint: None,
        duplicate_of: None,
        replayed_from: None,
        redactions: BTreeMap::new(),
        ..view
    };
    assert_eq!(
        round_trip(&error),
        json!({
            "run_id": "run-1",
            "tool_name": "query_logs",
            "status": "ERROR",
            "evidence_status": "ERROR",
            "error_code": "INVALID_TOOL_CALL_ID",
            "retryable": false,
            "returned_count": 0,
            "truncated": false,
            "scope": null
        })
    );
}

#[test]
fn golden_requests() {
    let r = LookupKnowledgeRequest {
        query: "磁盘 pressure 🚨".into(),
    };
    assert_eq!(round_trip(&r), json!({"query": "磁盘 pressure 🚨"}));
    let logs = QueryLogsRequest {
        topic: LogTopic::DatabaseSlowQuery,
        query: "orders".into(),
        lookback_minutes: Some(30),
    };
    assert_eq!(
        round_trip(&logs),
        json!({"topic": "DATABASE_SLOW_QUERY", "query": "orders", "lookback_minutes": 30})
    );
    let default_window = QueryLogsRequest {
        lookback_minutes: None,
        ..logs
    };
    assert_eq!(
        round_trip(&default_window),
        json!({"topic": "DATABASE_SLOW_QUERY", "query": "orders"})
    );
    let sql = QueryMysqlRequest {
        data_source: "orders".into(),
        sql: "SELECT status FROM orders WHERE id = ?".into(),
        params: vec![SqlValue::Int(42)],
    };
    assert_eq!(
        round_trip(&sql),
        json!({"data_source": "orders", "sql": "SELECT status FROM orders WHERE id = ?", "params": [42]})
    );
}

#[test]
fn validate_rejects_inconsistent_results() {
    // A READY result cannot say ERROR: the type has no such value, so the
    // wire form does not even decode.
    fn with_error_status(result: &impl serde::Serialize) -> Value {
        let mut wire = serde_json::to_value(result).unwrap();
        wire["evidence_status"] = json!("ERROR");
        wire
    }
    assert!(
        serde_json::from_value::<LookupKnowledgeResult>(with_error_status(&knowledge_result()))
            .is_err()
    );
    assert!(serde_json::from_value::<QueryLogsResult>(with_error_status(&logs_result())).is_err());
    assert!(
        serde_json::from_value::<QueryMysqlResult>(with_error_status(&mysql_result())).is_err()
    );
    let observation = knowledge_result().observation();
    assert!(
        serde_json::from_value::<LookupKnowledgeObservation>(with_error_status(&observation))
            .is_err()
    );

    let mut r = knowledge_result();
    r.evidence.clear();
    r.returned_count = 0;
    assert_eq!(r.validate(), Err(ValidationError::FoundWithoutEvidence));

    let mut r = knowledge_result();
    r.evidence_status = ReadyEvidenceStatus::NoEvidence;
    r.relevance_level = None;
    assert_eq!(r.validate(), Err(ValidationError::NoEvidenceWithEvidence));

    let mut r = knowledge_result();
    r.returned_count = 2;
    assert_eq!(
        r.validate(),
        Err(ValidationError::ReturnedCountMismatch {
            declared: 2,
            actual: 1
        })
    );

    let mut r = knowledge_result();
    r.evidence[0].excerpt = " \n".into();
    assert_eq!(
        r.validate(),
        Err(ValidationError::BlankField {
            index: 0,
            field: "excerpt"
        })
    );

    let mut l = logs_result();
    l.truncated = false;
    assert_eq!(l.validate(), Err(ValidationError::SilentTruncation));
    let mut l = logs_result();
    l.match_count = 1;
    assert_eq!(l.validate(), Err(ValidationError::MatchCountTooSmall));
    let mut l = logs_result();
    l.scope.lookback_minutes = 30;
    assert_eq!(l.validate(), Err(ValidationError::ScopeWindowMismatch));
    let mut l = logs_result();
    l.evidence_status = ReadyEvidenceStatus::NoEvidence;
    assert_eq!(l.validate(), Err(ValidationError::NoEvidenceWithEvidence));

    let mut m = mysql_result();
    m.rows[0].pop();
    assert_eq!(
        m.validate(),
        Err(ValidationError::RowWidthMismatch {
            row: 0,
            cells: 2,
            columns: 3
        })
    );
    let mut m = mysql_result();
    m.evidence_status = ReadyEvidenceStatus::NoEvidence;
    assert_eq!(m.validate(), Err(ValidationError::NoEvidenceWithEvidence));
}

#[test]
fn results_reject_unknown_fields() {
    let mut v = serde_json::to_value(knowledge_result()).unwrap();
    v["score"] = json!(0.97);
    assert!(serde_json::from_value::<LookupKnowledgeResult>(v).is_err());
    let mut v = serde_json::to_value(knowledge_result()).unwrap();
    v["evidence"][0]["metadata"] = json!({});
    assert!(serde_json::from_value::<LookupKnowledgeResult>(v).is_err());
}

#[test]
fn set_tool_call_id_restamps() {
    let mut r = logs_result();
    r.set_tool_call_id(id("call_new"));
    assert_eq!(r.tool_call_id().as_str(), "call_new");
    assert_eq!(r.observation().tool_call_id.as_str(), "call_new");
}
