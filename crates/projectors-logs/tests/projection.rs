//! Golden results and projector behaviour.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;

use aci_contracts::{
    EvidenceResult, EvidenceStatus, LogLevel, LogTopic, MAX_ID_BYTES, SourceKind, Timestamp,
    ToolCallId,
};
use common::{NOW_MILLIS, check_golden, now, project_mock, request};
use invocation_core::DEFAULT_MAX_AGENT_RESULT_BYTES;
use projectors_logs::{
    Error, LogBounds, LogProjector, MAX_QUERY_BYTES, RawLogEvent, RawLogResponse,
};
use serde_json::{Value, json};

fn raw(events: Vec<RawLogEvent>, match_count: u64) -> RawLogResponse {
    RawLogResponse {
        source_kind: SourceKind::Mock,
        topic: LogTopic::Application,
        query: "timeout".into(),
        lookback_minutes: 60,
        start_time: Timestamp::from_unix_millis(NOW_MILLIS - 3_600_000),
        end_time: now(),
        match_count,
        events,
        stats: None,
    }
}

fn event(seconds_ago: i64, level: &str, message: &str) -> RawLogEvent {
    RawLogEvent {
        timestamp: Timestamp::from_unix_millis(NOW_MILLIS - seconds_ago * 1000),
        level: level.into(),
        message: message.into(),
        fields: BTreeMap::from([
            ("host".to_owned(), json!("ip-10-0-3-17")),
            (
                "trace_id".to_owned(),
                json!("4bf92f3577b34da6a3ce929d0e0e4736"),
            ),
        ]),
    }
}

fn id(text: &str) -> ToolCallId {
    ToolCallId::new(text).unwrap()
}

#[tokio::test]
async fn golden_evidence_found() {
    let result = project_mock(
        &LogProjector::default(),
        &request(LogTopic::SystemEvents, "OOM", None),
        "call_logs_found",
    )
    .await;
    assert_eq!(result.evidence_status, EvidenceStatus::EvidenceFound);
    assert!(!result.truncated);
    assert_eq!(result.match_count, result.returned_count);
    check_golden("evidence_found", &result);
}

#[tokio::test]
async fn golden_no_evidence() {
    let result = project_mock(
        &LogProjector::default(),
        &request(LogTopic::Application, "kafka rebalance", Some(1440)),
        "call_logs_none",
    )
    .await;
    assert_eq!(result.evidence_status, EvidenceStatus::NoEvidence);
    assert_eq!((result.match_count, result.returned_count), (0, 0));
    assert!(result.patterns.is_empty() && result.events.is_empty() && !result.truncated);
    check_golden("no_evidence", &result);
}

#[tokio::test]
async fn golden_truncated_by_event_bound() {
    let result = project_mock(
        &LogProjector::default(),
        &request(LogTopic::Application, "connection pool", Some(60)),
        "call_logs_truncated",
    )
    .await;
    assert_eq!(result.match_count, 39);
    assert_eq!(result.returned_count, 20);
    assert!(result.truncated);
    check_golden("truncated", &result);
}

#[tokio::test]
async fn golden_truncated_messages_and_patterns() {
    let bounds = LogBounds {
        max_events: 3,
        max_message_bytes: 90,
        max_patterns: 2,
        max_pattern_bytes: 100,
    };
    let result = project_mock(
        &LogProjector::new(bounds).unwrap(),
        &request(LogTopic::DatabaseSlowQuery, "query_time", Some(60)),
        "call_logs_tight",
    )
    .await;
    assert!(result.truncated);
    assert_eq!(result.patterns.len(), 2);
    assert!(result.patterns.iter().all(|p| p.pattern.len() <= 100));
    assert!(result.events.iter().all(|e| e.message.len() <= 90));
    check_golden("truncated_tight_bounds", &result);
}

#[test]
fn default_worst_case_fits_the_default_agent_result_limit() {
    let worst = LogBounds::DEFAULT.worst_case_result_bytes();
    println!("default worst case: {worst} of {DEFAULT_MAX_AGENT_RESULT_BYTES} bytes");
    assert!(worst <= DEFAULT_MAX_AGENT_RESULT_BYTES, "{worst}");
}

/// The most expensive input there is: every text escapes to 6 bytes per byte,
/// every message has its own shape, the id and the query are at their limits.
#[test]
fn adversarial_input_stays_within_the_worst_case() {
    let nasty = "\u{1}\"é\\".repeat(2000);
    let events: Vec<RawLogEvent> = (0..500)
        .map(|i| {
            // Letters only, so no two shapes collapse.
            let word: String = format!("{i:04}")
                .bytes()
                .map(|d| char::from(b'a' + d - b'0'))
                .collect();
            event(i % 3000, "verbose", &format!("{word}{nasty}"))
        })
        .collect();
    let mut raw = raw(events, u64::MAX);
    raw.lookback_minutes = 1440;
    raw.start_time = Timestamp::from_unix_millis(NOW_MILLIS - 1440 * 60_000);
    raw.topic = LogTopic::DatabaseSlowQuery;
    raw.query = "\u{2}".repeat(MAX_QUERY_BYTES / 6) + &"q".repeat(MAX_QUERY_BYTES % 6);
    let result = LogProjector::default()
        .project_raw(&id(&"x".repeat(MAX_ID_BYTES)), &raw)
        .unwrap();
    result.validate().unwrap();
    let size = serde_json::to_string(&result).unwrap().len();
    let worst = LogBounds::DEFAULT.worst_case_result_bytes();
    println!("adversarial result: {size} bytes, worst case {worst}");
    assert!(size <= worst && worst <= DEFAULT_MAX_AGENT_RESULT_BYTES);
    // The bound is tight: the adversarial result uses most of it.
    assert!(
        size + 400 >= worst - projectors_logs::SOURCE_KIND_SLACK_BYTES,
        "{size} vs {worst}"
    );
    assert!(result.truncated);
    assert_eq!(result.patterns.len(), 10);
    assert_eq!(result.events.len(), 20);
}

#[test]
fn query_echo_is_bounded() {
    let mut long = raw(vec![], 0);
    long.query = "a".repeat(MAX_QUERY_BYTES + 1);
    assert!(matches!(
        LogProjector::default().project_raw(&id("c1"), &long),
        Err(Error::QueryTooLong)
    ));
    long.query = "\n".repeat(MAX_QUERY_BYTES / 2 + 1);
    assert!(matches!(
        LogProjector::default().project_raw(&id("c1"), &long),
        Err(Error::QueryTooLong)
    ));
    long.query = "a".repeat(MAX_QUERY_BYTES);
    assert!(
        LogProjector::default()
            .project_raw(&id("c1"), &long)
            .is_ok()
    );
}

#[test]
fn inconsistent_raw_is_a_projection_error() {
    let projector = LogProjector::default();
    let mut window = raw(vec![], 0);
    window.start_time = Timestamp::from_unix_millis(NOW_MILLIS - 3_599_999);
    assert_eq!(
        projector.project_raw(&id("c"), &window).unwrap_err().code(),
        "INCONSISTENT_RAW"
    );
    let mut lookback = raw(vec![], 0);
    lookback.lookback_minutes = 0;
    lookback.start_time = now();
    assert_eq!(
        projector
            .project_raw(&id("c"), &lookback)
            .unwrap_err()
            .code(),
        "INCONSISTENT_RAW"
    );
    let phantom = raw(vec![], 3);
    assert_eq!(
        projector
            .project_raw(&id("c"), &phantom)
            .unwrap_err()
            .code(),
        "INCONSISTENT_RAW"
    );
}

#[test]
fn undercounting_source_cannot_shrink_match_count() {
    let result = LogProjector::default()
        .project_raw(
            &id("c"),
            &raw(vec![event(10, "WARN", "a"), event(5, "WARN", "b")], 1),
        )
        .unwrap();
    result.validate().unwrap();
    assert_eq!((result.match_count, result.returned_count), (2, 2));
    assert!(!result.truncated);
}

#[test]
fn patterns_aggregate_levels_times_and_order() {
    let events = vec![
        event(50, "INFO", "GET /orders/1 200 12ms"),
        event(40, "weird", "request timed out after 30000ms"),
        event(30, "ERROR", "request timed out after 30004ms"),
        event(20, "Note", "request timed out after 29998ms"),
        event(10, "INFO", "GET /orders/2 200 15ms"),
        event(5, "debug", "cache warm"),
    ];
    let result = LogProjector::default()
        .project_raw(&id("c"), &raw(events, 6))
        .unwrap();
    result.validate().unwrap();
    let shapes: Vec<(&str, LogLevel, u64)> = result
        .patterns
        .iter()
        .map(|p| (p.pattern.as_str(), p.level, p.count))
        .collect();
    assert_eq!(
        shapes,
        [
            ("request timed out after <duration>", LogLevel::Error, 3),
            ("GET /orders/<num> <num> <duration>", LogLevel::Info, 2),
            ("cache warm", LogLevel::Debug, 1),
        ]
    );
    let timeout = &result.patterns[0];
    assert_eq!(timeout.first_seen.unix_millis(), NOW_MILLIS - 40_000);
    assert_eq!(timeout.last_seen.unix_millis(), NOW_MILLIS - 20_000);
    // Events keep their own levels and exact messages, oldest first.
    let levels: Vec<LogLevel> = result.events.iter().map(|e| e.level).collect();
    assert_eq!(
        levels,
        [
            LogLevel::Info,
            LogLevel::Unknown,
            LogLevel::Error,
            LogLevel::Unknown,
            LogLevel::Info,
            LogLevel::Debug
        ]
    );
    assert_eq!(result.events[2].message, "request timed out after 30004ms");
}

#[test]
fn ties_in_count_break_by_level_then_recency_then_text() {
    let events = vec![
        event(50, "INFO", "b shape"),
        event(40, "INFO", "a shape"),
        event(30, "WARN", "c shape"),
        event(30, "INFO", "d shape"),
    ];
    let result = LogProjector::default()
        .project_raw(&id("c"), &raw(events, 4))
        .unwrap();
    let order: Vec<&str> = result.patterns.iter().map(|p| p.pattern.as_str()).collect();
    assert_eq!(order, ["c shape", "d shape", "a shape", "b shape"]);
}

#[test]
fn timeline_keeps_an_example_of_every_reported_pattern() {
    let mut events: Vec<RawLogEvent> = (0..50)
        .map(|i| event(100 - i, "WARN", &format!("retry {i}")))
        .collect();
    events.push(event(3000, "FATAL", "disk /dev/sda1 failed"));
    let bounds = LogBounds {
        max_events: 5,
        ..LogBounds::DEFAULT
    };
    let result = LogProjector::new(bounds)
        .unwrap()
        .project_raw(&id("c"), &raw(events, 51))
        .unwrap();
    result.validate().unwrap();
    let messages: Vec<&str> = result.events.iter().map(|e| e.message.as_str()).collect();
    assert_eq!(
        messages,
        [
            "disk /dev/sda1 failed",
            "retry 46",
            "retry 47",
            "retry 48",
            "retry 49"
        ]
    );
    assert!(result.truncated);
    assert_eq!(result.match_count, 51);
}

#[test]
fn extra_fields_never_reach_the_result() {
    let result = LogProjector::default()
        .project_raw(&id("c"), &raw(vec![event(1, "INFO", "hello")], 1))
        .unwrap();
    let text = serde_json::to_string(&result).unwrap();
    assert!(!text.contains("host") && !text.contains("trace") && !text.contains("ip-10-0-3-17"));
    let value: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        value["events"][0],
        json!({"timestamp": "2025-12-31T23:59:59.000Z", "level": "INFO", "message": "hello"})
    );
}

#[test]
fn invalid_bounds_are_refused() {
    for bounds in [
        LogBounds {
            max_events: 0,
            ..LogBounds::DEFAULT
        },
        LogBounds {
            max_patterns: 0,
            ..LogBounds::DEFAULT
        },
        LogBounds {
            max_message_bytes: 5,
            ..LogBounds::DEFAULT
        },
        LogBounds {
            max_pattern_bytes: 0,
            ..LogBounds::DEFAULT
        },
    ] {
        assert_eq!(
            LogProjector::new(bounds).unwrap_err().code(),
            "INVALID_BOUNDS"
        );
    }
}

#[test]
fn raw_events_round_trip_with_flattened_fields() {
    let text =
        r#"{"timestamp":"2026-01-01T00:00:00Z","level":"warning","message":"m","pod":"p-1","n":3}"#;
    let parsed: RawLogEvent = serde_json::from_str(text).unwrap();
    assert_eq!(parsed.fields["pod"], json!("p-1"));
    assert_eq!(parsed.fields["n"], json!(3));
    let again: RawLogEvent =
        serde_json::from_str(&serde_json::to_string(&parsed).unwrap()).unwrap();
    assert_eq!(again, parsed);
    let bare: RawLogEvent =
        serde_json::from_str(r#"{"timestamp":"2026-01-01T00:00:00Z"}"#).unwrap();
    assert_eq!((bare.level.as_str(), bare.message.as_str()), ("", ""));
}
