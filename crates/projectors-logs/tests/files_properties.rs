//! Properties of the file source over arbitrary file contents: no panic, no
//! event outside the window, every result within the agent result limit, and
//! seeking finds what reading the whole file finds.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use aci_contracts::{LogTopic, SourceKind, Timestamp, ToolCallId};
use common::NOW_MILLIS;
use invocation_core::DEFAULT_MAX_AGENT_RESULT_BYTES;
use projectors_logs::{
    FileLogSource, LogFormat, LogProjector, LogQuery, LogsConfig, RawLogResponse, TopicConfig,
};
use proptest::prelude::*;
use serde_json::json;

fn config() -> ProptestConfig {
    // Each case writes and searches files: half the usual count.
    testkit::proptest_config_with_default(32)
}

const WORDS: [&str; 8] = [
    "timeout", "pool", "é", "Killed", "\"q\"", "a/b", "k", "select",
];

fn word(seed: u64) -> &'static str {
    WORDS[(seed % WORDS.len() as u64) as usize]
}

fn ts(offset_s: i64) -> String {
    Timestamp::from_unix_millis(NOW_MILLIS + offset_s * 1000).to_string()
}

/// One line (or slow log piece) of a kind, from a seed: valid lines of every
/// format with hostile messages, and garbage.
fn piece(kind: u8, seed: u64, offset_s: i64) -> Vec<u8> {
    let w = word(seed);
    let msg = match seed % 5 {
        0 => format!("{w} after 30000ms on 10.0.0.{}", seed % 255),
        1 => format!(
            "\u{212a}ill \u{130} {w}\t\u{1} {}",
            "x".repeat((seed % 3000) as usize)
        ),
        2 => format!("连接池 {w} épuisé \"quoted\" \\ back"),
        3 => w.to_owned(),
        _ => String::new(),
    };
    match kind % 9 {
        0 => json!({"ts": ts(offset_s), "level": "ERROR", "msg": msg}).to_string().into_bytes(),
        1 => format!("time={} level=warn msg={:?} k=v", ts(offset_s), msg).into_bytes(),
        2 => format!("<{}>1 {} host app - - - {msg}", seed % 200, ts(offset_s)).into_bytes(),
        3 => format!(
            "# Time: {}\n# Query_time: 1.5  Lock_time: 0  Rows_sent: 1  Rows_examined: {seed}\nSET timestamp={};\nSELECT '{msg}' FROM t WHERE id = {seed};",
            ts(offset_s),
            NOW_MILLIS / 1000 + offset_s
        )
        .into_bytes(),
        4 => seed.to_le_bytes().to_vec(),
        5 => b"{\"ts\": \"2026-".to_vec(),
        6 => format!("{msg}\r").into_bytes(),
        7 => vec![0xff, 0xfe, b'\n', b'#'],
        _ => Vec::new(),
    }
}

fn contents() -> impl Strategy<Value = Vec<u8>> {
    (
        prop::collection::vec((any::<u8>(), any::<u64>(), -20_000_i64..600), 0..120),
        any::<bool>(),
    )
        .prop_map(|(pieces, final_newline)| {
            let mut out = Vec::new();
            for (kind, seed, offset) in pieces {
                out.extend(piece(kind, seed, offset));
                out.push(b'\n');
            }
            if !final_newline {
                out.pop();
            }
            out
        })
}

fn source(dir: &std::path::Path, format: LogFormat, seek_threshold: u64) -> FileLogSource {
    FileLogSource::new(&LogsConfig {
        topics: [(
            LogTopic::Application,
            TopicConfig {
                dir: dir.to_owned(),
                files: vec!["app.log*".into()],
                format,
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
    .unwrap()
    .with_seek_threshold(seek_threshold)
}

const FORMATS: [LogFormat; 4] = [
    LogFormat::JsonLines,
    LogFormat::Logfmt,
    LogFormat::Syslog,
    LogFormat::MysqlSlow,
];

proptest! {
    #![proptest_config(config())]

    #[test]
    fn arbitrary_files_never_panic_nor_leave_the_window_nor_the_limit(
        bytes in contents(),
        format in 0..4_usize,
        seed in any::<u64>(),
        lookback in 1..=1440_u32,
        seek in any::<bool>(),
    ) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("app.log"), &bytes).unwrap();
        let source = source(dir.path(), FORMATS[format], if seek { 0 } else { u64::MAX });
        let end = Timestamp::from_unix_millis(NOW_MILLIS);
        let start = Timestamp::from_unix_millis(NOW_MILLIS - i64::from(lookback) * 60_000);
        let query = LogQuery {
            topic: LogTopic::Application,
            query: format!("{} {}", word(seed), word(seed / 8)),
            start,
            end,
        };
        let (matches, _) = source.query_blocking(&query).unwrap();
        prop_assert!(matches.events.len() <= source.max_raw_events());
        prop_assert!(matches.match_count >= matches.events.len() as u64);
        for event in &matches.events {
            prop_assert!(start <= event.timestamp && event.timestamp <= end);
        }
        let raw = RawLogResponse {
            source_kind: SourceKind::File,
            topic: query.topic,
            query: query.query.clone(),
            lookback_minutes: lookback,
            start_time: start,
            end_time: end,
            match_count: matches.match_count,
            events: matches.events,
            stats: matches.stats,
        };
        let raw_json = serde_json::to_string(&raw).unwrap();
        prop_assert!(raw_json.len() <= invocation_core::Limits::default().max_raw_bytes);
        let result = LogProjector::default()
            .project_raw(&ToolCallId::new("call_1").unwrap(), &raw)
            .unwrap();
        prop_assert!(serde_json::to_string(&result).unwrap().len() <= DEFAULT_MAX_AGENT_RESULT_BYTES);
    }

    #[test]
    fn seeking_finds_what_a_full_read_finds_in_ordered_files(
        gaps in prop::collection::vec((0..400_i64, any::<u64>()), 1..600),
        lookback in 1..=240_u32,
        past in 0..300_i64,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let total: i64 = gaps.iter().map(|(g, _)| g).sum();
        let mut at = -total;
        let mut text = String::new();
        for (gap, seed) in &gaps {
            at += gap;
            // Padded so files span several probes of the window search.
            let pad = "x".repeat((seed % 500) as usize);
            let msg = if seed % 3 == 0 { format!("pool timeout {seed} {pad}") } else { format!("ok {seed} {pad}") };
            text.push_str(&json!({"ts": ts(at), "msg": msg}).to_string());
            text.push('\n');
        }
        std::fs::write(dir.path().join("app.log"), &text).unwrap();
        let seeking = source(dir.path(), LogFormat::JsonLines, 0);
        let reading = source(dir.path(), LogFormat::JsonLines, u64::MAX);
        let end = Timestamp::from_unix_millis(NOW_MILLIS - past * 60_000);
        let query = LogQuery {
            topic: LogTopic::Application,
            query: "timeout".into(),
            start: Timestamp::from_unix_millis(end.unix_millis() - i64::from(lookback) * 60_000),
            end,
        };
        let (fast, _) = seeking.query_blocking(&query).unwrap();
        let (slow, _) = reading.query_blocking(&query).unwrap();
        prop_assert_eq!(fast.match_count, slow.match_count);
        prop_assert_eq!(fast.events, slow.events);
    }
}
