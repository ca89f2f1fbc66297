//! Properties of the projector, the masker and the scope over arbitrary
//! input, and the projector conformance suite.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};

use aci_contracts::{
    EvidenceResult, EvidenceStatus, LogTopic, QueryLogsRequest, QueryLogsResult, SourceKind,
    Timestamp, ToolCallId,
};
use invocation_core::conformance::ProjectorHarness;
use invocation_core::json_size::{escaped_len, escaped_prefix};
use invocation_core::{DEFAULT_MAX_AGENT_RESULT_BYTES, ScopeFingerprint};
use projectors_logs::mask::mask;
use projectors_logs::{
    LogBounds, LogProjector, MAX_QUERY_BYTES, RawLogEvent, RawLogResponse, query_logs_scope,
};
use proptest::prelude::*;
use serde_json::Value;

fn config() -> ProptestConfig {
    testkit::proptest_config()
}

/// Any text, weighted towards what breaks things: control characters,
/// quotes, multi-byte characters, numbers, ids and addresses. Pieces are built
/// from a kind and a seed (regex strategies are too slow for thousands of
/// strings per case in a debug build).
fn text(max: usize) -> impl Strategy<Value = String> {
    prop::collection::vec((0..10_u8, any::<u64>()), 0..max).prop_map(|pieces| {
        pieces
            .into_iter()
            .map(|(kind, seed)| piece(kind, seed))
            .collect()
    })
}

fn piece(kind: u8, seed: u64) -> String {
    let pick = |set: &[&str], i: u64| set[(i % set.len() as u64) as usize].to_owned();
    let digits = |n: u64| (seed >> 8) % 10_u64.pow(1 + (n % 9) as u32);
    match kind {
        0 => {
            // Arbitrary scalar values, including controls and astral planes.
            let mut out = String::new();
            let mut x = seed;
            for _ in 0..(seed % 5) {
                x = x
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                let raw = ((x >> 33) as u32) % 0x11_0000;
                let c = char::from_u32(raw).unwrap_or(char::from(((x >> 40) % 128) as u8));
                out.push(c);
            }
            out
        }
        1 => {
            let len = 1 + seed % 10;
            (0..len)
                .map(|i| char::from(b'a' + ((seed >> (i * 4)) % 26) as u8))
                .collect::<String>()
        }
        2 => format!(
            "{}{}",
            digits(seed),
            pick(&["", "ms", "s", "%", "kB", ".5s"], seed >> 4)
        ),
        3 => {
            let h = format!(
                "{:016x}{:016x}",
                seed,
                seed.rotate_left(17) ^ 0x9e37_79b9_7f4a_7c15
            );
            format!(
                "{}-{}-{}-{}-{}",
                &h[0..8],
                &h[8..12],
                &h[12..16],
                &h[16..20],
                &h[20..32]
            )
        }
        4 => format!(
            "{}.{}.{}.{}:{}",
            seed % 256,
            (seed >> 8) % 256,
            (seed >> 16) % 256,
            (seed >> 24) % 256,
            (seed >> 32) % 65536
        ),
        5 => pick(
            &[
                "\u{0}",
                "\u{1}",
                "\"",
                "\\",
                "\u{1f}\u{8}",
                "\u{7f}",
                "\r\n",
            ],
            seed,
        ),
        6 => pick(&["é", "中文", "😀", "\u{2028}", "ß", "\u{a0}"], seed),
        7 => pick(&[" ", "\t", "\n", "  ", " \n\t"], seed),
        8 => pick(
            &[
                "-", "_", ".", "/", ":", "#", "@", "=", ",", ";", "(", ")", "<", ">", "0x",
            ],
            seed,
        ),
        _ => format!("{:x}", seed),
    }
}

/// Mostly short messages, some long ones (a short text repeated) that
/// exceed every message and pattern bound.
fn message() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => text(12),
        1 => (text(8), 1..60_usize).prop_map(|(t, n)| t.repeat(n)),
    ]
}

fn level() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("INFO".to_owned()),
        Just("warning".to_owned()),
        Just("ERR".to_owned()),
        Just("crit".to_owned()),
        Just("debug".to_owned()),
        Just(String::new()),
        text(3),
    ]
}

fn fields() -> impl Strategy<Value = BTreeMap<String, Value>> {
    prop::collection::btree_map(
        prop_oneof![
            Just("host".to_owned()),
            Just("trace_id".to_owned()),
            Just("pod".to_owned()),
            Just("span_id".to_owned()),
            Just("thread".to_owned()),
            Just("node".to_owned()),
        ],
        any::<u64>().prop_map(|x| Value::String(format!("{x:x}"))),
        0..4,
    )
}

const END_MIN: i64 = 1_600_000_000_000;

fn raw() -> impl Strategy<Value = RawLogResponse> {
    (
        prop::sample::select(LogTopic::ALL.to_vec()),
        text(40),
        1..=1440_u32,
        END_MIN..END_MIN + 100_000_000_000,
        prop::collection::vec((0..=86_400_000_i64, level(), message(), fields()), 0..80),
        prop_oneof![
            Just(None),
            (0..2000_u64).prop_map(Some),
            Just(Some(u64::MAX))
        ],
    )
        .prop_map(|(topic, query, lookback, end, events, extra)| {
            let (query, _) = escaped_prefix(&query, MAX_QUERY_BYTES);
            let start = end - i64::from(lookback) * 60_000;
            let events: Vec<RawLogEvent> = events
                .into_iter()
                .map(|(offset, level, message, fields)| RawLogEvent {
                    timestamp: Timestamp::from_unix_millis(start + offset % (end - start + 1)),
                    level,
                    message,
                    fields,
                })
                .collect();
            let match_count = match extra {
                None => events.len() as u64 / 2,
                Some(extra) => (events.len() as u64).saturating_add(extra),
            };
            RawLogResponse {
                source_kind: SourceKind::Mock,
                topic,
                query: query.to_owned(),
                lookback_minutes: lookback,
                start_time: Timestamp::from_unix_millis(start),
                end_time: Timestamp::from_unix_millis(end),
                match_count,
                events,
                stats: None,
            }
        })
}

fn bounds() -> impl Strategy<Value = LogBounds> {
    (1..30_usize, 6..500_usize, 1..15_usize, 6..400_usize).prop_map(
        |(max_events, max_message_bytes, max_patterns, max_pattern_bytes)| LogBounds {
            max_events,
            max_message_bytes,
            max_patterns,
            max_pattern_bytes,
        },
    )
}

/// The projector conformance suite of invocation-core.
struct Logs;

impl ProjectorHarness for Logs {
    type Projector = LogProjector;

    fn projector(&self) -> LogProjector {
        LogProjector::default()
    }

    fn request(&self, raw: &RawLogResponse) -> QueryLogsRequest {
        QueryLogsRequest {
            topic: raw.topic,
            query: raw.query.clone(),
            lookback_minutes: Some(raw.lookback_minutes),
        }
    }

    /// Matches reported without a single event contradict themselves.
    fn refuses(&self, raw: &RawLogResponse) -> bool {
        raw.events.is_empty() && raw.match_count > 0
    }

    /// Cut: matches not all returned, patterns left out, or a message
    /// shortened. A masked pattern's shortening cannot be told from outside:
    /// `None` when a pattern is long enough to have been cut.
    fn was_cut(&self, raw: &RawLogResponse, result: &QueryLogsResult) -> Option<bool> {
        let bounds = LogBounds::DEFAULT;
        if result
            .patterns
            .iter()
            .any(|p| escaped_len(&p.pattern) + 6 > bounds.max_pattern_bytes)
        {
            return None;
        }
        let received = raw.events.len() as u64;
        let aggregated: u64 = result.patterns.iter().map(|p| p.count).sum();
        let mut messages_cut = false;
        for event in &result.events {
            let candidates: Vec<&RawLogEvent> = raw
                .events
                .iter()
                .filter(|r| r.timestamp == event.timestamp && r.message.starts_with(&event.message))
                .collect();
            let whole = candidates
                .iter()
                .filter(|r| r.message == event.message)
                .count();
            match whole {
                0 => messages_cut = true,
                n if n == candidates.len() => {}
                _ => return None,
            }
        }
        Some(result.match_count != result.returned_count || aggregated < received || messages_cut)
    }

    fn result_keys(&self) -> &'static [&'static str] {
        &ALLOWED_KEYS
    }
}

invocation_core::projector_conformance_tests!(Logs, raw());

const ALLOWED_KEYS: [&str; 21] = [
    "evidence_status",
    "tool_call_id",
    "source_kind",
    "scope",
    "match_count",
    "returned_count",
    "patterns",
    "events",
    "truncated",
    "topic",
    "query",
    "lookback_minutes",
    "start_time",
    "end_time",
    "pattern",
    "level",
    "count",
    "first_seen",
    "last_seen",
    "timestamp",
    "message",
];

/// Checks every invariant of one projection; returns the serialized size.
fn check(bounds: LogBounds, raw: &RawLogResponse) -> Result<usize, TestCaseError> {
    let id = ToolCallId::new("call_prop").unwrap();
    let projected = LogProjector::new(bounds).unwrap().project_raw(&id, raw);
    if raw.events.is_empty() && raw.match_count > 0 {
        prop_assert_eq!(projected.unwrap_err().code(), "INCONSISTENT_RAW");
        return Ok(0);
    }
    let result = projected.unwrap();
    prop_assert!(result.validate().is_ok(), "{:?}", result.validate());

    // Bounded.
    let json = serde_json::to_string(&result).unwrap();
    prop_assert!(json.len() <= bounds.worst_case_result_bytes());
    prop_assert!(result.events.len() <= bounds.max_events);
    prop_assert!(result.patterns.len() <= bounds.max_patterns);
    for e in &result.events {
        prop_assert!(escaped_len(&e.message) <= bounds.max_message_bytes);
    }
    for p in &result.patterns {
        prop_assert!(escaped_len(&p.pattern) <= bounds.max_pattern_bytes);
    }

    // Counts consistent with lists and with the raw response.
    let received = raw.events.len() as u64;
    prop_assert_eq!(result.match_count, raw.match_count.max(received));
    prop_assert_eq!(result.returned_count, result.events.len() as u64);
    prop_assert_eq!(
        result.evidence_status == EvidenceStatus::NoEvidence,
        result.match_count == 0
    );
    let aggregated: u64 = result.patterns.iter().map(|p| p.count).sum();
    prop_assert!(aggregated <= received);
    if result.match_count != result.returned_count {
        prop_assert!(result.truncated);
    }
    if !result.truncated {
        prop_assert_eq!(aggregated, received);
        prop_assert_eq!(result.returned_count, received);
    }
    prop_assert!(result.patterns.windows(2).all(|w| w[0].count >= w[1].count));
    for p in &result.patterns {
        prop_assert!(p.first_seen <= p.last_seen);
    }

    // The timeline is ordered, and each message is a prefix of its event's.
    prop_assert!(
        result
            .events
            .windows(2)
            .all(|w| w[0].timestamp <= w[1].timestamp)
    );
    for e in &result.events {
        prop_assert!(
            raw.events
                .iter()
                .any(|r| r.timestamp == e.timestamp && r.message.starts_with(&e.message)),
            "message is not a prefix of a raw message"
        );
    }

    // The scope is the raw's.
    prop_assert_eq!(&result.scope.query, &raw.query);
    prop_assert_eq!(result.scope.lookback_minutes, raw.lookback_minutes);
    prop_assert_eq!(result.scope.start_time, raw.start_time);
    prop_assert_eq!(result.scope.end_time, raw.end_time);

    Ok(json.len())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn default_projection_is_bounded_valid_and_clean(raw in raw()) {
        let size = check(LogBounds::DEFAULT, &raw)?;
        prop_assert!(size <= DEFAULT_MAX_AGENT_RESULT_BYTES);
    }

    #[test]
    fn any_bounds_hold(bounds in bounds(), raw in raw()) {
        check(bounds, &raw)?;
    }

    #[test]
    fn event_order_does_not_matter_for_distinct_times(raw in raw()) {
        let mut unique = raw.clone();
        let mut seen = BTreeSet::new();
        unique.events.retain(|e| seen.insert(e.timestamp));
        unique.match_count = unique.events.len() as u64;
        let mut reversed = unique.clone();
        reversed.events.reverse();
        let id = ToolCallId::new("c").unwrap();
        let projector = LogProjector::default();
        prop_assert_eq!(projector.project_raw(&id, &unique).unwrap(), projector.project_raw(&id, &reversed).unwrap());
    }

    #[test]
    fn masked_shapes_hold_no_digits_or_control_characters(message in text(60)) {
        let shape = mask(&message);
        prop_assert!(!shape.bytes().any(|b| b.is_ascii_digit() || b < 0x20 || b == 0x7f), "{:?}", shape);
        prop_assert!(!shape.starts_with(' ') && !shape.ends_with(' ') && !shape.contains("  "));
        prop_assert_eq!(mask(&shape), shape.clone(), "masking is idempotent");
        prop_assert!(escaped_len(&shape) <= 2 * shape.len());
    }

    #[test]
    fn equivalent_requests_share_a_fingerprint(
        topic in prop::sample::select(LogTopic::ALL.to_vec()),
        words in prop::collection::vec("[a-zA-Zé0-9_]{1,8}", 1..5),
        spacing in prop::collection::vec("[ \t\n]{1,3}", 6),
        upper in any::<bool>(),
        minutes in prop_oneof![Just(None), (1..=1440_u32).prop_map(Some)],
    ) {
        let plain = QueryLogsRequest { topic, query: words.join(" "), lookback_minutes: minutes };
        let mut spaced = format!("{}{}", spacing[0], words[0]);
        for (i, w) in words.iter().enumerate().skip(1) {
            spaced.push_str(&spacing[i % 6]);
            spaced.push_str(w);
        }
        spaced.push_str(&spacing[5]);
        if upper {
            spaced = spaced.to_uppercase();
        }
        let variant = QueryLogsRequest {
            topic,
            query: spaced,
            lookback_minutes: Some(minutes.unwrap_or(60)),
        };
        let fp = |r: &QueryLogsRequest| ScopeFingerprint::of("query_logs", &query_logs_scope(r));
        prop_assert_eq!(fp(&plain), fp(&variant));

        let other_lookback = QueryLogsRequest {
            lookback_minutes: Some(minutes.unwrap_or(60) % 1440 + 1),
            ..plain.clone()
        };
        prop_assert_ne!(fp(&plain), fp(&other_lookback));
        let other_topic = QueryLogsRequest {
            topic: LogTopic::ALL[(LogTopic::ALL.iter().position(|t| *t == topic).unwrap() + 1) % 3],
            ..plain.clone()
        };
        prop_assert_ne!(fp(&plain), fp(&other_topic));
        let other_words = QueryLogsRequest { query: format!("{} extra", plain.query), ..plain.clone() };
        prop_assert_ne!(fp(&plain), fp(&other_words));
    }
}
