//! [`FileLogSource`] over files the tests write: every format, broken and
//! multi-byte lines, CRLF, rotation and gzip, the window search, the
//! directory fence, and the boundary's error codes and timeout.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use aci_contracts::{ErrorCode, InvocationStatus, LogTopic, RunId, SourceKind, Timestamp};
use common::{NOW_MILLIS, now};
use flate2::Compression;
use flate2::write::GzEncoder;
use invocation_core::{
    BoundaryOutcome, Clock, Limits, ManualClock, ModelObservation, RunContext, ToolBoundary,
    ToolEnvelope,
};
use projectors_logs::{
    FileLogSource, LogFormat, LogQuery, LogSource, LogsConfig, TopicConfig, query_logs_tool,
};
use serde_json::{Value, json};
use store_memory::MemoryStore;

const MINUTE: i64 = 60_000;

fn at(minutes_ago: i64) -> String {
    Timestamp::from_unix_millis(NOW_MILLIS - minutes_ago * MINUTE).to_string()
}

fn topic(dir: &Path, files: &[&str], format: LogFormat) -> TopicConfig {
    TopicConfig {
        dir: dir.to_owned(),
        files: files.iter().map(|f| (*f).to_owned()).collect(),
        format,
        time_key: None,
        level_key: None,
        message_key: None,
        pattern: None,
        timestamp: None,
        time_zone: None,
    }
}

fn source(topics: Vec<(LogTopic, TopicConfig)>) -> FileLogSource {
    FileLogSource::new(&LogsConfig {
        topics: topics.into_iter().collect(),
        max_raw_events: None,
    })
    .unwrap()
}

fn query(topic: LogTopic, words: &str, lookback_minutes: i64) -> LogQuery {
    LogQuery {
        topic,
        query: words.to_owned(),
        start: Timestamp::from_unix_millis(NOW_MILLIS - lookback_minutes * MINUTE),
        end: now(),
    }
}

fn json_line(minutes_ago: i64, level: &str, msg: &str) -> String {
    json!({"ts": at(minutes_ago), "level": level, "msg": msg, "pod": "order-7d9f"}).to_string()
}

fn gzip(path: &Path, text: &str) {
    let mut encoder = GzEncoder::new(std::fs::File::create(path).unwrap(), Compression::fast());
    encoder.write_all(text.as_bytes()).unwrap();
    encoder.finish().unwrap();
}

fn messages(
    source: &FileLogSource,
    q: &LogQuery,
) -> (Vec<String>, u64, projectors_logs::ScanStats) {
    let (matches, stats) = source.query_blocking(q).unwrap();
    for e in &matches.events {
        assert!(q.start <= e.timestamp && e.timestamp <= q.end, "{e:?}");
    }
    let messages = matches.events.iter().map(|e| e.message.clone()).collect();
    (messages, matches.match_count, stats)
}

#[test]
fn json_lines_with_rotation_gzip_crlf_broken_and_multibyte_lines() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // Oldest rotation, compressed: one match 3 hours ago, outside a 60-minute
    // window but inside a 240-minute one.
    gzip(
        &d.join("app.log.2.gz"),
        &format!("{}\n", json_line(180, "ERROR", "pool timeout in old file")),
    );
    // Previous rotation: CRLF line endings, a broken line, multi-byte text.
    std::fs::write(
        d.join("app.log.1"),
        format!(
            "{}\r\n{{\"ts\": broken\r\n{}\r\n",
            json_line(50, "WARN", "Pool TIMEOUT: 连接池 épuisé"),
            json_line(45, "INFO", "all fine"),
        ),
    )
    .unwrap();
    // Current file: a line out of time order and a last line without a newline.
    std::fs::write(
        d.join("app.log"),
        format!(
            "{}\n{}\nnot json at all\n{}",
            json_line(20, "ERROR", "pool timeout after 30000ms"),
            json_line(40, "ERROR", "pool timeout out of order"),
            json_line(1, "ERROR", "final pool timeout"),
        ),
    )
    .unwrap();
    std::fs::write(d.join("app.log.empty"), "").unwrap();
    std::fs::write(
        d.join("other.log"),
        json_line(1, "ERROR", "pool timeout elsewhere"),
    )
    .unwrap();
    let source = source(vec![(
        LogTopic::Application,
        topic(d, &["app.log", "app.log.*"], LogFormat::JsonLines),
    )]);
    assert_eq!(source.source_kind(), SourceKind::File);

    let (found, count, stats) =
        messages(&source, &query(LogTopic::Application, "timeout POOL", 60));
    assert_eq!(
        found,
        [
            "Pool TIMEOUT: 连接池 épuisé",
            "pool timeout out of order",
            "pool timeout after 30000ms",
            "final pool timeout",
        ]
    );
    assert_eq!(count, 4);
    assert_eq!(
        stats.unparsed, 0,
        "the broken lines hold no hit of the prefilter"
    );
    assert_eq!(stats.files_searched + stats.files_skipped, 4);

    // A line the prefilter hits but that does not parse is counted.
    let (found, _, stats) = messages(&source, &query(LogTopic::Application, "broken", 60));
    assert!(found.is_empty());
    assert_eq!(stats.unparsed, 1);

    // A longer window reaches into the compressed rotation.
    let (found, count, _) = messages(&source, &query(LogTopic::Application, "old file", 240));
    assert_eq!(
        (found.as_slice(), count),
        (&["pool timeout in old file".to_owned()][..], 1)
    );
    // Multi-byte words match without the ASCII prefilter.
    let (found, _, _) = messages(&source, &query(LogTopic::Application, "連接池 ÉPUISÉ", 60));
    assert!(found.is_empty(), "traditional characters differ");
    let (found, _, _) = messages(&source, &query(LogTopic::Application, "连接池 ÉPUISÉ", 60));
    assert_eq!(found.len(), 1);
    // Other files are never read.
    let (found, _, _) = messages(&source, &query(LogTopic::Application, "elsewhere", 60));
    assert!(found.is_empty());
}

#[test]
fn logfmt_and_syslog() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("svc.logfmt"),
        format!(
            "time={} level=error msg=\"upstream \\\"payment\\\" 503\" trace=ab12\n\
             time={} level=info msg=ok\n\
             time={} level=error msg=\"unterminated\n",
            at(5),
            at(4),
            at(3)
        ),
    )
    .unwrap();
    let bsd = |minutes_ago: i64| {
        chrono::DateTime::from_timestamp_millis(NOW_MILLIS - minutes_ago * MINUTE)
            .unwrap()
            .format("%b %e %H:%M:%S")
            .to_string()
    };
    std::fs::write(
        d.join("syslog"),
        format!(
            "<3>{} node-3 kernel: Out of memory: Killed process 23144 (java)\n\
             {} node-3 kubelet[812]: OOMKilled order-service-7d9f\n\
             <14>1 {} node-3 kubelet 812 - - Killed container again\n\
             garbage\n",
            bsd(10),
            bsd(9),
            at(8),
        ),
    )
    .unwrap();
    let source = source(vec![
        (
            LogTopic::Application,
            topic(d, &["*.logfmt"], LogFormat::Logfmt),
        ),
        (
            LogTopic::SystemEvents,
            topic(d, &["syslog"], LogFormat::Syslog),
        ),
    ]);
    let (found, _, stats) = messages(&source, &query(LogTopic::Application, "\"payment\"", 60));
    assert_eq!(found, ["upstream \"payment\" 503"]);
    assert_eq!(stats.unparsed, 0);
    let (found, _, stats) = messages(&source, &query(LogTopic::Application, "unterminated", 60));
    assert!(found.is_empty());
    assert_eq!(stats.unparsed, 1, "the unterminated quote");
    let (matches, _) = source
        .query_blocking(&query(LogTopic::SystemEvents, "killed", 60))
        .unwrap();
    let got: Vec<(&str, &str)> = matches
        .events
        .iter()
        .map(|e| (e.level.as_str(), e.message.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            ("err", "Out of memory: Killed process 23144 (java)"),
            ("", "OOMKilled order-service-7d9f"),
            ("info", "Killed container again"),
        ]
    );
    let (_, _, stats) = messages(&source, &query(LogTopic::SystemEvents, "a", 60));
    assert_eq!(stats.unparsed, 1, "garbage");
}

/// A file in time order, large enough to be searched by seeking.
fn ordered_file(path: &Path, lines: i64, step_ms: i64) -> Vec<(i64, String)> {
    let mut text = String::new();
    let mut all = Vec::new();
    let first = NOW_MILLIS - lines * step_ms;
    for i in 0..lines {
        let ts = first + i * step_ms;
        let msg = if i % 7 == 0 {
            format!("request {i} failed: pool timeout")
        } else {
            format!("request {i} ok")
        };
        text.push_str(
            &json!({"ts": Timestamp::from_unix_millis(ts).to_string(), "level": "INFO", "msg": msg})
                .to_string(),
        );
        text.push('\n');
        all.push((ts, msg));
    }
    std::fs::write(path, text).unwrap();
    all
}

#[test]
fn the_window_is_found_by_seeking_and_equals_a_full_scan() {
    let dir = tempfile::tempdir().unwrap();
    let all = ordered_file(&dir.path().join("app.log"), 40_000, 1_000);
    let size = std::fs::metadata(dir.path().join("app.log")).unwrap().len();
    let seeking = source(vec![(
        LogTopic::Application,
        topic(dir.path(), &["app.log"], LogFormat::JsonLines),
    )])
    .with_seek_threshold(0);
    let reading = seeking.clone().with_seek_threshold(u64::MAX);
    for lookback in [1, 7, 60, 600, 1440] {
        let q = query(LogTopic::Application, "timeout", lookback);
        let expected = all
            .iter()
            .filter(|(ts, m)| *ts >= q.start.unix_millis() && m.contains("timeout"))
            .count() as u64;
        let (fast, fast_count, fast_stats) = messages(&seeking, &q);
        let (slow, slow_count, slow_stats) = messages(&reading, &q);
        assert_eq!(fast_count, expected, "lookback {lookback}");
        assert_eq!(
            (fast, fast_count),
            (slow, slow_count),
            "lookback {lookback}"
        );
        assert_eq!(fast_stats.files_full_scan, 0);
        assert_eq!(slow_stats.files_full_scan, 1);
        if lookback <= 60 {
            assert!(
                fast_stats.bytes_read * 4 < size,
                "lookback {lookback}: read {} of {size}",
                fast_stats.bytes_read
            );
        }
    }
    // A window in the past: the end is found by seeking too.
    let mut q = query(LogTopic::Application, "timeout", 60);
    q.end = Timestamp::from_unix_millis(NOW_MILLIS - 300 * MINUTE);
    q.start = Timestamp::from_unix_millis(NOW_MILLIS - 360 * MINUTE);
    let (found, count, stats) = messages(&seeking, &q);
    assert_eq!(found.len(), 200, "the cap");
    let expected = all
        .iter()
        .filter(|(ts, m)| {
            q.start.unix_millis() <= *ts && *ts <= q.end.unix_millis() && m.contains("timeout")
        })
        .count() as u64;
    assert_eq!(count, expected);
    assert!(stats.bytes_read * 4 < size);
    // Before the file: skipped by its time range.
    q.end = Timestamp::from_unix_millis(NOW_MILLIS - 2000 * MINUTE);
    q.start = Timestamp::from_unix_millis(NOW_MILLIS - 2060 * MINUTE);
    let (_, count, stats) = messages(&seeking, &q);
    assert_eq!((count, stats.files_skipped), (0, 1));
}

#[test]
fn a_file_out_of_time_order_falls_back_to_a_full_scan() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.log");
    ordered_file(&path, 20_000, 1_000);
    // An old-looking block in the middle breaks the order: a match 3 minutes
    // ago written among lines of 3 hours ago.
    let mut text = std::fs::read_to_string(&path).unwrap();
    let middle = text.len() / 2;
    let cut = middle + text[middle..].find('\n').unwrap() + 1;
    let mut lines = String::new();
    for _ in 0..2000 {
        lines.push_str(&json_line(600, "INFO", "old noise"));
        lines.push('\n');
    }
    lines.push_str(&json_line(3, "ERROR", "misplaced pool timeout"));
    lines.push('\n');
    text.insert_str(cut, &lines);
    std::fs::write(&path, text).unwrap();
    let seeking = source(vec![(
        LogTopic::Application,
        topic(dir.path(), &["app.log"], LogFormat::JsonLines),
    )])
    .with_seek_threshold(0);
    let (found, _, stats) = messages(&seeking, &query(LogTopic::Application, "misplaced", 60));
    // The first probe lands in the block: older than the file's first line.
    assert_eq!(found, ["misplaced pool timeout"], "{stats:?}");
    assert_eq!(stats.files_full_scan, 1, "{stats:?}");
    let (found, _, stats) = messages(&seeking, &query(LogTopic::Application, "noise", 660));
    assert_eq!(found.len(), 200, "capped at the most recent");
    assert_eq!(stats.files_full_scan, 1, "{stats:?}");
}

fn boundary(source: FileLogSource, timeout: Duration) -> (ToolBoundary, RunContext) {
    let clock = ManualClock::at_default_start();
    let shared: Arc<dyn Clock> = Arc::new(clock);
    let boundary = ToolBoundary::builder(Arc::new(MemoryStore::with_clock(Arc::clone(&shared))))
        .clock(shared)
        .limits(Limits {
            timeout,
            ..Limits::default()
        })
        .tool(query_logs_tool(source))
        .build()
        .unwrap();
    let run = RunContext::new(
        RunId::new(format!("run-files-{}", fastrand_id())).unwrap(),
        invocation_core::CallPolicy::AUTHORIZED_READ_ONLY,
    );
    (boundary, run)
}

fn fastrand_id() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

async fn call(boundary: &ToolBoundary, run: &RunContext, id: &str, args: Value) -> BoundaryOutcome {
    let envelope = ToolEnvelope::new(id, run.run_id.as_str(), "query_logs", args.to_string());
    boundary.invoke(run, envelope).await
}

fn code(outcome: &BoundaryOutcome) -> ErrorCode {
    assert_eq!(outcome.control.status, InvocationStatus::Error);
    assert!(matches!(outcome.observation, ModelObservation::Error(_)));
    outcome.control.error_code.unwrap()
}

#[tokio::test]
async fn errors_are_errors_never_no_evidence() {
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(
        outside.path().join("secret.log"),
        json_line(1, "ERROR", "secret pool timeout"),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("app.log"),
        json_line(1, "ERROR", "pool timeout"),
    )
    .unwrap();
    std::os::unix::fs::symlink(
        outside.path().join("secret.log"),
        dir.path().join("app.log.1"),
    )
    .unwrap();
    let source = source(vec![
        (
            LogTopic::Application,
            topic(dir.path(), &["app.log"], LogFormat::JsonLines),
        ),
        (
            LogTopic::SystemEvents,
            topic(dir.path(), &["app.log*"], LogFormat::JsonLines),
        ),
        (
            LogTopic::DatabaseSlowQuery,
            topic(dir.path(), &["slow.log"], LogFormat::MysqlSlow),
        ),
    ]);
    let (boundary, run) = boundary(source.clone(), Duration::from_secs(30));
    let ok = call(
        &boundary,
        &run,
        "c1",
        json!({"topic": "APPLICATION", "query": "timeout"}),
    )
    .await;
    let shown = ok.observation.to_json();
    assert_eq!(shown["source_kind"], "FILE", "{shown}");
    assert_eq!(shown["match_count"], 1);
    // The symlink out of the directory: refused, its content never read.
    let escaped = call(
        &boundary,
        &run,
        "c2",
        json!({"topic": "SYSTEM_EVENTS", "query": "secret"}),
    )
    .await;
    assert_eq!(code(&escaped), ErrorCode::ExecutionFailed);
    assert!(!escaped.observation.to_json().to_string().contains("secret"));
    // A configured file that does not exist.
    let missing = call(
        &boundary,
        &run,
        "c3",
        json!({"topic": "DATABASE_SLOW_QUERY", "query": "x"}),
    )
    .await;
    assert_eq!(code(&missing), ErrorCode::ExecutionFailed);
    // Permanent (the deployment must fix its configuration), and still
    // permanent in the execution error the boundary receives.
    let error = source
        .query(&query(LogTopic::DatabaseSlowQuery, "x", 60))
        .await
        .unwrap_err();
    assert!(!invocation_core::SourceError::retryable(&error));
    let execution = invocation_core::ExecutionError::from(error);
    assert_eq!(execution.error_code(), ErrorCode::ExecutionFailed);
    assert!(!execution.retryable());
    let text = missing.observation.to_json().to_string();
    assert!(
        !text.contains("slow.log") && !text.contains(dir.path().to_str().unwrap()),
        "{text}"
    );

    // A topic without files.
    let partial = FileLogSource::new(&LogsConfig {
        topics: [(
            LogTopic::Application,
            topic(dir.path(), &["app.log"], LogFormat::JsonLines),
        )]
        .into_iter()
        .collect(),
        max_raw_events: Some(5),
    })
    .unwrap();
    let (boundary, run) = self::boundary(partial, Duration::from_secs(30));
    let unknown = call(
        &boundary,
        &run,
        "c4",
        json!({"topic": "SYSTEM_EVENTS", "query": "oom"}),
    )
    .await;
    assert_eq!(code(&unknown), ErrorCode::DataSourceUnknown);
}

#[test]
fn invalid_configurations_are_refused() {
    let dir = Path::new("/var/log");
    for (section, needle) in [
        (topic(dir, &[], LogFormat::JsonLines), "at least one"),
        (
            topic(dir, &["../etc/passwd"], LogFormat::JsonLines),
            "no `/`",
        ),
        (
            TopicConfig {
                time_zone: Some("Mars/Olympus_Mons".into()),
                ..topic(dir, &["a"], LogFormat::JsonLines)
            },
            "time_zone",
        ),
        (
            TopicConfig {
                timestamp: Some("iso".into()),
                ..topic(dir, &["a"], LogFormat::Logfmt)
            },
            "timestamp",
        ),
        (
            TopicConfig {
                message_key: Some("m".into()),
                ..topic(dir, &["a"], LogFormat::Syslog)
            },
            "syslog",
        ),
    ] {
        let error = FileLogSource::new(&LogsConfig {
            topics: [(LogTopic::Application, section)].into_iter().collect(),
            max_raw_events: None,
        })
        .unwrap_err();
        assert_eq!(error.code(), "INVALID_CONFIG");
        assert!(error.to_string().contains(needle), "{error}");
        assert!(error.to_string().contains("APPLICATION"), "{error}");
    }
    // `max_raw_events = 0` (the text the `logs_config` fuzz target found
    // outside the contract it asserted): invalid bounds, as documented.
    let config: LogsConfig = toml::from_str("\nmax_raw_events = 0").unwrap();
    let error = FileLogSource::new(&config).unwrap_err();
    assert_eq!(error.code(), "INVALID_BOUNDS");
    assert!(error.to_string().contains("max_raw_events"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tool_timeout_cuts_a_long_scan_off() {
    let dir = tempfile::tempdir().unwrap();
    // Many lines, a query without an ASCII word: every line is parsed.
    let mut text = String::new();
    for i in 0..200_000 {
        text.push_str(&json_line(30, "INFO", &format!("request {i} é")));
        text.push('\n');
    }
    for i in 0..4 {
        std::fs::write(dir.path().join(format!("app.log.{i}")), &text).unwrap();
    }
    let source = source(vec![(
        LogTopic::Application,
        topic(dir.path(), &["app.log.*"], LogFormat::JsonLines),
    )]);
    let (boundary, run) = boundary(source, Duration::from_millis(50));
    let outcome = call(
        &boundary,
        &run,
        "c1",
        json!({"topic": "APPLICATION", "query": "é"}),
    )
    .await;
    assert_eq!(code(&outcome), ErrorCode::ExecutionTimeout);
}

/// Named zones read local times with their daylight-saving rules (the tz
/// database compiled in): around Europe/Berlin's changes of 2026, a local
/// time in the repeated hour is its earlier instant, one in the skipped hour
/// does not exist and is counted as unparsed.
#[test]
fn named_time_zones_for_syslog_and_the_slow_log() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("syslog"),
        "<11>Mar 29 01:59:00 node-3 app[1]: disk full before the change\n\
         <11>Mar 29 02:30:00 node-3 app[1]: disk full in the gap\n\
         <11>Mar 29 03:01:00 node-3 app[1]: disk full after the change\n\
         <11>Oct 25 02:30:00 node-3 app[1]: disk full in the overlap\n",
    )
    .unwrap();
    std::fs::write(
        d.join("slow.log"),
        "# Time: 261025  2:30:00\n\
         # User@Host: app[app] @ localhost []\n\
         # Query_time: 1.5  Lock_time: 0.0  Rows_sent: 1  Rows_examined: 10\n\
         SELECT * FROM orders WHERE id = 1;\n\
         # Time: 260329  2:30:00\n\
         # User@Host: app[app] @ localhost []\n\
         # Query_time: 1.5  Lock_time: 0.0  Rows_sent: 1  Rows_examined: 10\n\
         SELECT * FROM orders WHERE id = 2;\n",
    )
    .unwrap();
    let berlin = |files: &[&str], format| TopicConfig {
        time_zone: Some("Europe/Berlin".into()),
        ..topic(d, files, format)
    };
    let source = source(vec![
        (
            LogTopic::SystemEvents,
            berlin(&["syslog"], LogFormat::Syslog),
        ),
        (
            LogTopic::DatabaseSlowQuery,
            berlin(&["slow.log"], LogFormat::MysqlSlow),
        ),
    ]);
    let window = |topic, start: &str, end: &str, words: &str| LogQuery {
        topic,
        query: words.to_owned(),
        start: Timestamp::parse(start).unwrap(),
        end: Timestamp::parse(end).unwrap(),
    };
    let spring = window(
        LogTopic::SystemEvents,
        "2026-03-29T00:00:00Z",
        "2026-03-29T02:00:00Z",
        "disk",
    );
    let (matches, stats) = source.query_blocking(&spring).unwrap();
    let found: Vec<(String, &str)> = matches
        .events
        .iter()
        .map(|e| (e.timestamp.to_string(), e.message.as_str()))
        .collect();
    assert_eq!(
        found,
        [
            (
                "2026-03-29T00:59:00.000Z".to_owned(),
                "disk full before the change"
            ),
            (
                "2026-03-29T01:01:00.000Z".to_owned(),
                "disk full after the change"
            ),
        ]
    );
    assert_eq!(stats.unparsed, 1, "the local time in the gap");
    let autumn = window(
        LogTopic::SystemEvents,
        "2026-10-25T00:00:00Z",
        "2026-10-25T02:00:00Z",
        "disk",
    );
    let (matches, _) = source.query_blocking(&autumn).unwrap();
    assert_eq!(matches.events.len(), 1);
    assert_eq!(
        matches.events[0].timestamp,
        Timestamp::parse("2026-10-25T00:30:00Z").unwrap(),
        "the earlier of the two instants"
    );
    let slow = window(
        LogTopic::DatabaseSlowQuery,
        "2026-03-01T00:00:00Z",
        "2026-10-31T00:00:00Z",
        "orders",
    );
    let (matches, stats) = source.query_blocking(&slow).unwrap();
    assert_eq!(matches.events.len(), 1);
    assert_eq!(
        matches.events[0].timestamp,
        Timestamp::parse("2026-10-25T00:30:00Z").unwrap()
    );
    assert_eq!(stats.unparsed, 1, "the slow log entry in the gap");
}

/// A window of several MiB is read as two halves in parallel: the same
/// matches, in the same order, as one sequential read, and a disorder in the
/// second half still falls back to reading the file whole.
#[test]
fn a_large_window_read_in_two_halves_equals_a_full_scan() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.log");
    let all = ordered_file(&path, 120_000, 1_000);
    let seeking = source(vec![(
        LogTopic::Application,
        topic(dir.path(), &["app.log"], LogFormat::JsonLines),
    )]);
    let reading = seeking.clone().with_seek_threshold(u64::MAX);
    for (words, lookback) in [("timeout", 1440), ("request", 1440), ("timeout", 1200)] {
        let q = query(LogTopic::Application, words, lookback);
        let expected = all
            .iter()
            .filter(|(ts, m)| *ts >= q.start.unix_millis() && m.contains(words))
            .count() as u64;
        let (fast, fast_count, fast_stats) = messages(&seeking, &q);
        let (slow, slow_count, _) = messages(&reading, &q);
        assert_eq!(fast_count, expected, "{words} {lookback}");
        assert_eq!((fast, fast_count), (slow, slow_count), "{words} {lookback}");
        assert_eq!(fast_stats.files_full_scan, 0);
        assert!(fast_stats.bytes_read > 4 << 20, "{}", fast_stats.bytes_read);
    }
    // Old lines written late in the window (in its second half).
    let mut text = std::fs::read_to_string(&path).unwrap();
    let late = text.len() * 7 / 8;
    let cut = late + text[late..].find('\n').unwrap() + 1;
    let mut old = String::new();
    for _ in 0..500 {
        old.push_str(&json_line(1400, "INFO", "old pool timeout"));
        old.push('\n');
    }
    text.insert_str(cut, &old);
    std::fs::write(&path, text).unwrap();
    let q = query(LogTopic::Application, "timeout", 1440);
    let (fast, fast_count, fast_stats) = messages(&seeking, &q);
    let (slow, slow_count, _) = messages(&reading, &q);
    assert_eq!(fast_stats.files_full_scan, 1, "the disorder was seen");
    assert_eq!((fast, fast_count), (slow, slow_count));
}

/// The halves of every large window share one pool of scan threads: many
/// callers at once (more than the pool has threads, each its own thread, as
/// tokio's blocking threads are) each get the answer of one sequential read.
#[test]
fn large_windows_read_at_once_by_many_callers_each_equal_a_full_scan() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.log");
    ordered_file(&path, 120_000, 1_000);
    let seeking = source(vec![(
        LogTopic::Application,
        topic(dir.path(), &["app.log"], LogFormat::JsonLines),
    )]);
    let reading = seeking.clone().with_seek_threshold(u64::MAX);
    let asks = [("timeout", 1440), ("request", 1440), ("timeout", 1200)];
    let expected: Vec<_> = asks
        .iter()
        .map(|&(words, lookback)| {
            messages(&reading, &query(LogTopic::Application, words, lookback))
        })
        .collect();
    let callers = 4 * std::thread::available_parallelism().map_or(2, usize::from);
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..callers)
            .map(|i| {
                let seeking = &seeking;
                let (words, lookback) = asks[i % asks.len()];
                scope.spawn(move || {
                    let q = query(LogTopic::Application, words, lookback);
                    (i % asks.len(), messages(seeking, &q))
                })
            })
            .collect();
        for handle in handles {
            let (ask, (found, count, stats)) = handle.join().unwrap();
            let (want, want_count, _) = &expected[ask];
            assert_eq!((&found, count), (want, *want_count), "{:?}", asks[ask]);
            assert_eq!(stats.files_full_scan, 0);
            assert!(stats.bytes_read > 4 << 20, "{}", stats.bytes_read);
        }
    });
}

/// Lines longer than one read (256 KiB) are assembled across reads and
/// found; a line longer than the buffer (2 MiB) is counted and skipped.
#[test]
fn long_lines_span_reads_and_overlong_lines_are_counted() {
    let dir = tempfile::tempdir().unwrap();
    let long = format!("pool timeout {}", "x".repeat(1 << 20));
    let overlong = format!("pool timeout {}", "y".repeat(3 << 20));
    let text = [
        json_line(5, "ERROR", "pool timeout first"),
        json_line(4, "ERROR", &long),
        json_line(3, "ERROR", &overlong),
        json_line(2, "ERROR", "pool timeout last"),
    ]
    .join("\n");
    std::fs::write(dir.path().join("app.log"), text).unwrap();
    let source = source(vec![(
        LogTopic::Application,
        topic(dir.path(), &["app.log"], LogFormat::JsonLines),
    )]);
    let (found, count, stats) = messages(&source, &query(LogTopic::Application, "timeout", 60));
    assert_eq!(count, 3);
    assert_eq!(found[0], "pool timeout first");
    assert!(
        found[1].starts_with("pool timeout xxx"),
        "cut for the raw record"
    );
    assert_eq!(found[2], "pool timeout last");
    assert_eq!(stats.overlong_lines, 1);
}
