//! `format = "pattern"` and the presets over files the tests write: stack
//! traces as continuation, the window search over event starts, rotations,
//! the bounds of one event, hostile input, and the configuration rules.
//! (The presets over lines their real writers wrote: `tests/writers`.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::Write;
use std::path::Path;

use aci_contracts::{LogTopic, Timestamp};
use common::NOW_MILLIS;
use flate2::Compression;
use flate2::write::GzEncoder;
use projectors_logs::{
    FileLogSource, LogFormat, LogQuery, LogsConfig, ScanStats, TopicConfig, parse_text,
};

const MINUTE: i64 = 60_000;

fn topic(dir: &Path, files: &[&str], format: LogFormat) -> TopicConfig {
    TopicConfig {
        dir: dir.to_owned(),
        files: files.iter().map(|f| (*f).to_owned()).collect(),
        format,
        pattern: None,
        time_key: None,
        level_key: None,
        message_key: None,
        timestamp: None,
        time_zone: None,
    }
}

fn source(section: TopicConfig) -> FileLogSource {
    FileLogSource::new(&LogsConfig {
        topics: [(LogTopic::Application, section)].into_iter().collect(),
        max_raw_events: None,
    })
    .unwrap()
}

fn window(words: &str, start_ms: i64, end_ms: i64) -> LogQuery {
    LogQuery {
        topic: LogTopic::Application,
        query: words.to_owned(),
        start: Timestamp::from_unix_millis(start_ms),
        end: Timestamp::from_unix_millis(end_ms),
    }
}

fn last(words: &str, minutes: i64) -> LogQuery {
    window(words, NOW_MILLIS - minutes * MINUTE, NOW_MILLIS)
}

fn run(source: &FileLogSource, q: &LogQuery) -> (Vec<String>, u64, ScanStats) {
    let (matches, stats) = source.query_blocking(q).unwrap();
    for e in &matches.events {
        assert!(q.start <= e.timestamp && e.timestamp <= q.end, "{e:?}");
    }
    let messages = matches.events.iter().map(|e| e.message.clone()).collect();
    (messages, matches.match_count, stats)
}

fn gzip(path: &Path, text: &str) {
    let mut encoder = GzEncoder::new(std::fs::File::create(path).unwrap(), Compression::fast());
    encoder.write_all(text.as_bytes()).unwrap();
    encoder.finish().unwrap();
}

fn iso(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .unwrap()
        .format("%Y-%m-%dT%H:%M:%S%.3f+00:00")
        .to_string()
}

/// One Spring Boot event at `ms`: every 20th with a stack trace whose
/// `Caused by:` (a continuation line) holds the words of a pool outage.
fn spring_event(out: &mut String, i: u64, ms: i64) -> bool {
    let traced = i % 20 == 7;
    if traced {
        out.push_str(&format!(
            "{} ERROR 4242 --- [nio-8080-exec-{}] c.e.order.PaymentClient                  : Payment call {i} failed\n\n\
java.lang.IllegalStateException: payment-service unreachable\n\
\tat com.example.order.PaymentClient.call(PaymentClient.java:88)\n\
\tat com.example.order.OrderService.place(OrderService.java:41)\n\
Caused by: java.sql.SQLTransientConnectionException: HikariPool-1 - Connection is not available, request timed out after 30000ms.\n\
\tat com.zaxxer.hikari.pool.HikariPool.createTimeoutException(HikariPool.java:696)\n\
\t... 2 common frames omitted\n\n",
            iso(ms),
            i % 10
        ));
    } else {
        out.push_str(&format!(
            "{}  INFO 4242 --- [nio-8080-exec-{}] c.e.order.OrderController                : GET /api/orders/{i} 200\n",
            iso(ms),
            i % 10
        ));
    }
    traced
}

/// A Spring Boot file in time order: (time, traced) of every event.
fn spring_file(path: &Path, events: u64, step_ms: i64) -> Vec<(i64, bool)> {
    let mut text = String::new();
    let mut all = Vec::new();
    let first = NOW_MILLIS - events as i64 * step_ms;
    for i in 0..events {
        let ms = first + i as i64 * step_ms;
        all.push((ms, spring_event(&mut text, i, ms)));
    }
    std::fs::write(path, text).unwrap();
    all
}

/// Words only on a continuation line are found; the window search lands
/// on event starts (never inside a stack trace) and finds what reading the
/// whole file finds; `match_count` counts events, not lines.
#[test]
fn stack_traces_are_searched_and_the_window_is_found_by_seeking() {
    let dir = tempfile::tempdir().unwrap();
    let all = spring_file(&dir.path().join("app.log"), 20_000, 2_000);
    let size = std::fs::metadata(dir.path().join("app.log")).unwrap().len();
    let seeking =
        source(topic(dir.path(), &["app.log"], LogFormat::SpringBoot)).with_seek_threshold(0);
    let reading = seeking.clone().with_seek_threshold(u64::MAX);
    for lookback in [2, 60, 600] {
        // A word on every event costs a parse of each: only in short windows
        // (tests run unoptimized).
        let words: &[&str] = match lookback {
            2 => &["connection NOT available", "GET 200"],
            60 => &["connection NOT available", "hikaripool-1 payment"],
            _ => &["hikaripool-1 payment"],
        };
        for &words in words {
            let q = last(words, lookback);
            let expected = all
                .iter()
                .filter(|(ms, traced)| {
                    *ms >= q.start.unix_millis() && (*traced == (words != "GET 200"))
                })
                .count() as u64;
            let (fast, fast_count, fast_stats) = run(&seeking, &q);
            let (slow, slow_count, slow_stats) = run(&reading, &q);
            assert_eq!(fast_count, expected, "{words} {lookback}");
            assert_eq!(
                (&fast, fast_count),
                (&slow, slow_count),
                "{words} {lookback}"
            );
            assert_eq!(
                (fast_stats.files_full_scan, slow_stats.files_full_scan),
                (0, 1)
            );
            assert_eq!(fast_stats.unparsed + slow_stats.unparsed, 0);
            assert_eq!(slow_stats.orphan_lines, 0);
            if lookback <= 60 {
                assert!(
                    fast_stats.bytes_read * 4 < size,
                    "{lookback}: {fast_stats:?}"
                );
            }
            if let Some(first) = fast.first()
                && words != "GET 200"
            {
                assert!(first.starts_with("Payment call"), "{first}");
                assert!(first.contains("\nCaused by: java.sql.SQLTransientConnectionException"));
            }
        }
    }
    // Windows in the past: their end is found by seeking too (a located
    // window that starts inside a stack trace counts those lines as orphans).
    for minutes_ago in [300, 301, 302] {
        let q = window(
            "connection not available",
            NOW_MILLIS - (minutes_ago + 60) * MINUTE - 7_500,
            NOW_MILLIS - minutes_ago * MINUTE,
        );
        let expected = all
            .iter()
            .filter(|(ms, t)| *t && q.start.unix_millis() <= *ms && *ms <= q.end.unix_millis())
            .count() as u64;
        let (_, fast_count, fast_stats) = run(&seeking, &q);
        let (_, slow_count, _) = run(&reading, &q);
        assert_eq!((fast_count, slow_count), (expected, expected));
        assert_eq!(fast_stats.files_full_scan, 0);
    }
}

/// A word in a head outside its message (the thread, the logger) does not
/// match; in the message or on a continuation line it does. The events found
/// (the most recent kept, the rest counted) are those that reading every
/// event with `parse_text` and searching each message finds.
#[test]
fn only_messages_and_their_continuations_are_searched() {
    let dir = tempfile::tempdir().unwrap();
    let mut text = String::new();
    let events = 3_000_i64;
    let first = NOW_MILLIS - events * 1_000;
    for i in 0..events {
        let (thread, logger, message, continuation) = match i % 6 {
            0 => ("timeout-pool-1", "c.e.Orders", "GET /api/orders 200", ""),
            1 => ("main", "c.e.TimeoutWatcher", "watching", ""),
            2 => ("main", "c.e.Orders", "read TIMEOUT after 30s", ""),
            3 => (
                "main",
                "c.e.Orders",
                "call failed",
                "java.net.SocketTimeoutException: Read timed out\n\tat c.e.Orders.call(Orders.java:9)\n",
            ),
            4 => ("timeout", "c.e.Timeout", "", ""),
            _ => ("main", "c.e.Orders", "retries: Timeouts=3", ""),
        };
        text.push_str(&format!(
            "{} ERROR 4242 --- [{thread}] {logger:<40} : {message} #{i}\n{continuation}",
            iso(first + i * 1_000)
        ));
    }
    std::fs::write(dir.path().join("app.log"), &text).unwrap();
    let section = topic(dir.path(), &["app.log"], LogFormat::SpringBoot);
    let seeking = FileLogSource::new(&LogsConfig {
        topics: [(LogTopic::Application, section.clone())]
            .into_iter()
            .collect(),
        max_raw_events: Some(7),
    })
    .unwrap()
    .with_seek_threshold(0);
    let reading = seeking.clone().with_seek_threshold(u64::MAX);
    let everything = parse_text(
        &section,
        text.as_bytes(),
        Timestamp::from_unix_millis(NOW_MILLIS),
    )
    .unwrap()
    .events;
    for minutes in [10, 100] {
        let q = last("timeout", minutes);
        let mut expected: Vec<String> = everything
            .iter()
            .filter(|e| q.start <= e.timestamp && e.timestamp <= q.end)
            .filter(|e| e.message.to_lowercase().contains("timeout"))
            .map(|e| e.message.clone())
            .collect();
        let count = expected.len() as u64;
        expected.drain(..expected.len().saturating_sub(7));
        expected.sort();
        assert!(count > 7, "{minutes}: {count}");
        for source in [&seeking, &reading] {
            let (mut found, found_count, stats) = run(source, &q);
            found.sort();
            assert_eq!((&found, found_count), (&expected, count), "{minutes}");
            assert_eq!(stats.unparsed, 0);
        }
    }
}

/// A located window of several MiB is read as two halves split at an event
/// start: the same as one sequential read.
#[test]
fn a_large_window_in_two_halves_equals_a_full_scan() {
    let dir = tempfile::tempdir().unwrap();
    let all = spring_file(&dir.path().join("app.log"), 120_000, 1_000);
    let seeking = source(topic(dir.path(), &["app.log"], LogFormat::SpringBoot));
    let reading = seeking.clone().with_seek_threshold(u64::MAX);
    {
        let (words, lookback) = ("not available", 1440);
        let q = last(words, lookback);
        let expected = all
            .iter()
            .filter(|(ms, t)| *t && *ms >= q.start.unix_millis())
            .count();
        let (fast, fast_count, fast_stats) = run(&seeking, &q);
        let (slow, slow_count, _) = run(&reading, &q);
        assert_eq!(fast_count, expected as u64);
        assert_eq!((fast, fast_count), (slow, slow_count));
        assert_eq!(fast_stats.files_full_scan, 0);
        assert!(fast_stats.bytes_read > 4 << 20);
        // Only a located start inside a stack trace leaves orphans (at most
        // one trace's lines); the split between the halves is at an event start.
        assert!(fast_stats.orphan_lines <= 7, "{fast_stats:?}");
    }
}

/// Rotations (gzip and plain), orphans at the start of a file, CRLF, and an
/// unparsable head counted once with its continuation.
#[test]
fn rotations_orphans_crlf_and_unparsed_heads() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut old = String::new();
    spring_event(&mut old, 7, NOW_MILLIS - 180 * MINUTE);
    gzip(&d.join("app.log.2.gz"), &old);
    let mut previous = String::from("\tat the.tail.of(AnEventInTheRotationBefore.java:1)\n");
    spring_event(&mut previous, 27, NOW_MILLIS - 50 * MINUTE);
    spring_event(&mut previous, 1, NOW_MILLIS - 49 * MINUTE);
    std::fs::write(d.join("app.log.1"), previous.replace('\n', "\r\n")).unwrap();
    let mut current = String::new();
    spring_event(&mut current, 47, NOW_MILLIS - 10 * MINUTE);
    current.push_str("2026-13-45T99:00:00.000+00:00 ERROR 1 --- [main] c.e.X : bad time\n\tat HikariPool-1 - Connection is not available\n");
    spring_event(&mut current, 67, NOW_MILLIS - MINUTE);
    std::fs::write(d.join("app.log"), current).unwrap();
    let source = source(topic(d, &["app.log*"], LogFormat::SpringBoot));
    let (found, count, stats) = run(&source, &last("connection not available", 60));
    assert_eq!(count, 3);
    assert!(found.iter().all(|m| m.starts_with("Payment call")));
    assert!(
        found[0].contains("HikariPool-1"),
        "CRLF stripped: {:?}",
        found[0]
    );
    assert!(!found[0].contains('\r'));
    assert_eq!(stats.orphan_lines, 1);
    assert_eq!(stats.unparsed, 1, "the head whose time does not parse");
    let (_, count, _) = run(&source, &last("connection not available", 240));
    assert_eq!(count, 4, "the compressed rotation too");
}

/// An event of 10 MB of continuation lines: bounded in the record, counted,
/// and still matched by a word on its last line; the events around it are
/// unaffected. Read whole and by seeking.
#[test]
fn a_ten_megabyte_event_is_bounded_counted_and_searched() {
    let dir = tempfile::tempdir().unwrap();
    let mut text = String::new();
    spring_event(&mut text, 1, NOW_MILLIS - 30 * MINUTE);
    text.push_str(&format!(
        "{} ERROR 1 --- [main] c.e.Dump : heap dump follows\n",
        iso(NOW_MILLIS - 20 * MINUTE)
    ));
    let frame = "\tat com.example.deep.Recursion.call(Recursion.java:12345678)\n";
    while text.len() < 10 << 20 {
        text.push_str(frame);
    }
    text.push_str("Caused by: java.lang.StackOverflowError: needle-at-the-end\n");
    spring_event(&mut text, 7, NOW_MILLIS - 10 * MINUTE);
    std::fs::write(dir.path().join("app.log"), &text).unwrap();
    for threshold in [0, u64::MAX] {
        let source = source(topic(dir.path(), &["app.log"], LogFormat::SpringBoot))
            .with_seek_threshold(threshold);
        if threshold == 0 {
            // Seeking lands before the big event: the same one match.
            let (_, count, _) = run(&source, &last("needle-at-the-end", 60));
            assert_eq!(count, 1);
            continue;
        }
        let (matches, stats) = source
            .query_blocking(&last("needle-at-the-end dump", 60))
            .unwrap();
        assert_eq!(matches.match_count, 1);
        let event = &matches.events[0];
        assert!(
            event
                .message
                .starts_with("heap dump follows\n\tat com.example")
        );
        assert!(event.message.len() <= 2048 + 64, "cut for the raw record");
        let dropped = event.fields["continuation_lines_dropped"].as_u64().unwrap();
        assert!(dropped > 100_000, "{dropped}");
        assert_eq!(stats.continuation_lines_dropped, dropped);
        let (_, count, _) = run(&source, &last("connection not available", 60));
        assert_eq!(count, 1, "the event after it");
    }
}

/// Hostile files: a binary file, a pattern that matches every line
/// (continuation included), a file truncated and appended to while queries
/// run. Each answers (counts, or an error code), never hangs or panics.
#[test]
fn hostile_input_is_counted_never_fatal() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // Binary: no line matches; every "line" is an orphan or overlong.
    let mut binary = Vec::new();
    let mut x = 0x9e37_79b9_u32;
    for _ in 0..(3 << 20) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        binary.push(x as u8);
    }
    std::fs::write(d.join("binary.log"), &binary).unwrap();
    let source_binary =
        source(topic(d, &["binary.log"], LogFormat::SpringBoot)).with_seek_threshold(0);
    for q in [last("a", 60), last("é", 60)] {
        let (found, _, stats) = run(&source_binary, &q);
        assert!(found.is_empty());
        assert!(
            stats.orphan_lines > 0 || stats.overlong_lines > 0,
            "{stats:?}"
        );
    }
    // A pattern that matches every non-empty line: each line is its own
    // event, the ones whose `timestamp` group is not a time are unparsed.
    let mut text = String::new();
    spring_event(&mut text, 7, NOW_MILLIS - MINUTE);
    std::fs::write(d.join("every.log"), &text).unwrap();
    let every = TopicConfig {
        pattern: Some(r"^(?P<timestamp>\S+)\s*(?P<message>.*)$".into()),
        ..topic(d, &["every.log"], LogFormat::Pattern)
    };
    let (found, count, stats) = run(&source(every), &last("hikaripool-1 failed", 60));
    assert_eq!(
        (found.len(), count),
        (0, 0),
        "the words are on different events now"
    );
    assert_eq!(stats.unparsed, 1, "the Caused by line, its head not a time");
    // Truncated and appended to while it is searched.
    let path = d.join("moving.log");
    spring_file(&path, 10_000, 100);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (path, stop) = (path.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut round = 0_u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                round += 1;
                if round.is_multiple_of(3) {
                    std::fs::OpenOptions::new()
                        .write(true)
                        .open(&path)
                        .unwrap()
                        .set_len(round * 997 % 400_000)
                        .unwrap();
                } else {
                    let mut text = String::new();
                    for i in 0..50 {
                        spring_event(&mut text, i, NOW_MILLIS - MINUTE);
                    }
                    std::fs::OpenOptions::new()
                        .append(true)
                        .open(&path)
                        .unwrap()
                        .write_all(text.as_bytes())
                        .unwrap();
                }
            }
        })
    };
    let moving = source(topic(d, &["moving.log"], LogFormat::SpringBoot)).with_seek_threshold(0);
    for i in 0..16 {
        let q = last(if i % 2 == 0 { "not available" } else { "é" }, 30);
        let (matches, _) = moving.query_blocking(&q).unwrap();
        assert!(matches.match_count >= matches.events.len() as u64);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.join().unwrap();
}

/// klog (hand-written lines: no kubelet here): levels, multi-line messages,
/// the year inferred from the window's end, rotation and seeking.
#[test]
fn klog_lines() {
    let dir = tempfile::tempdir().unwrap();
    let klog_time = |ms: i64| {
        chrono::DateTime::from_timestamp_millis(ms)
            .unwrap()
            .format("%m%d %H:%M:%S%.6f")
            .to_string()
    };
    let mut text = String::new();
    let mut expected = 0;
    for i in 0..30_000_i64 {
        let ms = NOW_MILLIS - (30_000 - i) * 1_000;
        if i % 50 == 0 {
            text.push_str(&format!(
                "E{}    1234 reflector.go:147] k8s.io/client-go: Failed to watch *v1.Pod: failed to list:\n  etcdserver: request timed out\n",
                klog_time(ms)
            ));
            expected += usize::from(ms >= NOW_MILLIS - 60 * MINUTE);
        } else {
            text.push_str(&format!(
                "I{}    1234 controller.go:{i}] Synced pod {i}\n",
                klog_time(ms)
            ));
        }
    }
    let cut = text.len() / 2 + text[text.len() / 2..].find("\nI").unwrap() + 1;
    gzip(&dir.path().join("kubelet.log.1.gz"), &text[..cut]);
    std::fs::write(dir.path().join("kubelet.log"), &text[cut..]).unwrap();
    let seeking =
        source(topic(dir.path(), &["kubelet.log*"], LogFormat::Klog)).with_seek_threshold(0);
    let reading = seeking.clone().with_seek_threshold(u64::MAX);
    let (matches, stats) = seeking
        .query_blocking(&last("etcdserver timed out", 60))
        .unwrap();
    assert_eq!(matches.match_count, expected as u64);
    assert_eq!(matches.events[0].level, "error");
    assert_eq!(matches.events[0].fields["source"], "reflector.go:147");
    assert!(stats.bytes_read < text.len() as u64 / 4, "{stats:?}");
    assert_eq!(
        stats.files_skipped, 1,
        "the rotation ends before the window"
    );
    for q in [
        last("etcdserver", 60),
        last("etcdserver", 500),
        last("synced", 3),
    ] {
        assert_eq!(run(&seeking, &q).1, run(&reading, &q).1);
    }
    let (all, _, _) = run(&reading, &last("failed", 600));
    assert_eq!(all.len(), 200);
}

/// A CRI tag written without the space before its message (`stdout Pin po`
/// is partial `in po`, as the line pattern reads it): the word split across
/// the joint is still found, seeking or reading whole (found by the
/// `log_text` fuzz target).
#[test]
fn cri_partial_tag_without_a_space_still_joins_for_the_search() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("app.log"),
        "2025-12-31T23:50:00.123456789Z stdout Pin po\n\
         2025-12-31T23:50:00.123413580Z stdout F ol exhausted\n",
    )
    .unwrap();
    let seeking = source(topic(dir.path(), &["app.log"], LogFormat::Cri)).with_seek_threshold(0);
    let reading = seeking.clone().with_seek_threshold(u64::MAX);
    let q = LogQuery {
        topic: LogTopic::Application,
        query: "pool".to_owned(),
        start: Timestamp::from_unix_millis(NOW_MILLIS - 4 * 3_600_000),
        end: Timestamp::from_unix_millis(NOW_MILLIS),
    };
    for source in [&seeking, &reading] {
        let (found, count, _) = run(source, &q);
        assert_eq!(count, 1);
        assert_eq!(found[0], "in pool exhausted");
    }
}

/// CRI (hand-written lines: no container runtime here): `P` lines joined to
/// the next line of their stream before anything else, a word split across
/// the joint still found, streams apart, rotation and seeking.
#[test]
fn cri_lines() {
    let dir = tempfile::tempdir().unwrap();
    let t = |ms: i64| {
        chrono::DateTime::from_timestamp_millis(ms)
            .unwrap()
            .format("%Y-%m-%dT%H:%M:%S%.9fZ")
            .to_string()
    };
    let mut text = String::new();
    let mut expected = 0_u64;
    for i in 0..20_000_i64 {
        let ms = NOW_MILLIS - (20_000 - i) * 1_000;
        if i % 40 == 0 {
            text.push_str(&format!("{} stderr F unrelated stderr line {i}\n", t(ms)));
            text.push_str(&format!(
                "{} stdout P Exception in thread main: connection ti\n",
                t(ms)
            ));
            text.push_str(&format!("{} stdout P meout after 30\n", t(ms + 1)));
            text.push_str(&format!("{} stdout F 000ms\n", t(ms + 2)));
            expected += u64::from(ms >= NOW_MILLIS - 60 * MINUTE);
        } else {
            text.push_str(&format!("{} stdout F request {i} served\n", t(ms)));
        }
    }
    let cut = text.len() / 2 + text[text.len() / 2..].find("Z stdout F request").unwrap();
    let cut = text[..cut].rfind('\n').unwrap() + 1;
    std::fs::write(
        dir.path().join("orders_default_api-1.log.20261201"),
        &text[..cut],
    )
    .unwrap();
    std::fs::write(dir.path().join("orders_default_api-1.log"), &text[cut..]).unwrap();
    let seeking = source(topic(
        dir.path(),
        &["orders_default_api-1.log*"],
        LogFormat::Cri,
    ))
    .with_seek_threshold(0);
    let reading = seeking.clone().with_seek_threshold(u64::MAX);
    let q = last("connection timeout", 60);
    let (found, count, _) = run(&seeking, &q);
    assert_eq!(count, expected);
    assert_eq!(
        found[0],
        "Exception in thread main: connection timeout after 30000ms"
    );
    assert_eq!(run(&reading, &q).1, expected);
    let (matches, _) = reading.query_blocking(&last("unrelated", 60)).unwrap();
    assert_eq!(matches.events[0].fields["stream"], "stderr");
    for lookback in [1, 7, 60, 600] {
        let q = last("000ms", lookback);
        assert_eq!(run(&seeking, &q).1, run(&reading, &q).1, "{lookback}");
    }
}

/// What the configuration refuses, naming the topic.
#[test]
fn pattern_configurations_are_checked() {
    let dir = Path::new("/var/log");
    let with = |format, pattern: Option<&str>| TopicConfig {
        pattern: pattern.map(str::to_owned),
        ..topic(dir, &["app.log"], format)
    };
    for (section, needle) in [
        (with(LogFormat::Pattern, None), "needs pattern"),
        (
            with(LogFormat::Pattern, Some("^(?P<timestamp>")),
            "not a valid regular expression",
        ),
        (
            with(LogFormat::Pattern, Some(r"^(?P<ts>\S+) (?P<message>.*)$")),
            "timestamp",
        ),
        (
            with(
                LogFormat::Pattern,
                Some(r"^(?P<timestamp>\S+) (?P<msg>.*)$"),
            ),
            "message",
        ),
        (
            with(
                LogFormat::Pattern,
                Some(r"(?P<timestamp>\d*)(?P<message>.*)"),
            ),
            "empty line",
        ),
        (
            with(
                LogFormat::SpringBoot,
                Some(r"^(?P<timestamp>\S+) (?P<message>.*)$"),
            ),
            "only for format",
        ),
        (
            with(
                LogFormat::JsonLines,
                Some(r"^(?P<timestamp>\S+) (?P<message>.*)$"),
            ),
            "only for format",
        ),
        (
            TopicConfig {
                timestamp: Some("%H".into()),
                ..with(LogFormat::Postgresql, None)
            },
            "only time_zone",
        ),
        (
            TopicConfig {
                message_key: Some("m".into()),
                ..with(
                    LogFormat::Pattern,
                    Some(r"^(?P<timestamp>\S+) (?P<message>.*)$"),
                )
            },
            "no *_key",
        ),
    ] {
        let error = FileLogSource::new(&LogsConfig {
            topics: [(LogTopic::SystemEvents, section)].into_iter().collect(),
            max_raw_events: None,
        })
        .unwrap_err();
        assert_eq!(error.code(), "INVALID_CONFIG");
        let shown = error.to_string();
        assert!(
            shown.contains(needle) && shown.contains("SYSTEM_EVENTS"),
            "{shown}"
        );
    }
    // A custom pattern with its own time layout, through parse_text.
    let section = TopicConfig {
        timestamp: Some("%d.%m.%Y %H:%M:%S".into()),
        time_zone: Some("Europe/Berlin".into()),
        ..with(
            LogFormat::Pattern,
            Some(
                r"^(?P<timestamp>\d\d\.\d\d\.\d{4} \d\d:\d\d:\d\d) \[(?P<level>\w+)\] (?P<message>.*)$",
            ),
        )
    };
    let parsed = parse_text(
        &section,
        b"01.12.2026 15:00:00 [WARN] disk almost full\n  /var at 97%\r\n\n01.12.2026 15:00:01 [INFO] ok",
        Timestamp::from_unix_millis(NOW_MILLIS),
    )
    .unwrap();
    assert_eq!(parsed.events.len(), 2);
    assert_eq!(parsed.events[0].message, "disk almost full\n  /var at 97%");
    assert_eq!(
        parsed.events[0].timestamp,
        Timestamp::parse("2026-12-01T14:00:00Z").unwrap()
    );
    assert_eq!(parsed.events[0].level, "WARN");
}

/// The README's `[logs]` example (every key, `pattern` among them) is a
/// configuration the source accepts, and its pattern reads Spring Boot's line.
#[test]
fn the_readme_logs_example_compiles() {
    #[derive(serde::Deserialize)]
    struct Example {
        logs: LogsConfig,
    }
    let readme = include_str!("../../../README.md");
    let block = readme
        .split("```toml")
        .skip(1)
        .filter_map(|b| b.split("```").next())
        .find(|b| b.contains("[logs]"))
        .expect("a TOML block with [logs]");
    let example: Example = toml::from_str(block).unwrap();
    let section = &example.logs.topics[&LogTopic::Application];
    assert_eq!(section.format, LogFormat::Pattern);
    FileLogSource::new(&example.logs).unwrap();
    let parsed = parse_text(
        section,
        b"2026-12-01T14:00:00.123+01:00 ERROR 4242 --- [nio-8080-exec-1] c.e.order.PaymentClient                  : Payment call failed\n\tat x.Y.z(Y.java:1)",
        Timestamp::from_unix_millis(NOW_MILLIS),
    )
    .unwrap();
    assert_eq!(parsed.events.len(), 1);
    assert_eq!(parsed.events[0].level, "ERROR");
    assert_eq!(
        parsed.events[0].message,
        "Payment call failed\n\tat x.Y.z(Y.java:1)"
    );
}

/// A PostgreSQL secondary line of another pid starts an event of its own;
/// when it is the file's last event, after the last line that certainly
/// starts one (a head), the window search still reads it: a file is skipped
/// as ending before the window only when no line that may start an event is
/// in it.
#[test]
fn a_secondary_line_after_the_last_head_is_searched() {
    let dir = tempfile::tempdir().unwrap();
    let head = NOW_MILLIS - 40 * MINUTE;
    let detail = NOW_MILLIS - 30 * MINUTE;
    let pg = |ms: i64, pid: u32, severity: &str, text: &str| {
        let at = chrono::DateTime::from_timestamp_millis(ms)
            .unwrap()
            .format("%Y-%m-%d %H:%M:%S%.3f");
        format!("{at} UTC [{pid}] {severity}:  {text}\n")
    };
    let text = [
        pg(head, 12, "ERROR", "pool exhausted"),
        pg(head + 1_000, 11, "DETAIL", "an orphan detail"),
        "\tat x.Y(F.java:1)\n".to_owned(),
        pg(detail, 12, "DETAIL", "caf\u{e9} detail"),
    ]
    .concat();
    std::fs::write(dir.path().join("app.log"), &text).unwrap();
    let section = topic(dir.path(), &["app.log"], LogFormat::Postgresql);
    for threshold in [0, u64::MAX] {
        let source = source(section.clone()).with_seek_threshold(threshold);
        let (found, count, stats) = run(&source, &last("caf\u{e9}", 30));
        assert_eq!(count, 1, "threshold {threshold}: {stats:?}");
        assert_eq!(found, ["caf\u{e9} detail"]);
    }
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    const WORDS: [&str; 6] = ["timeout", "pool", "é", "caused", "detail", "ti"];

    /// One piece of a file: a head of a format, a continuation line, a
    /// PostgreSQL secondary line, a CRI partial line, garbage.
    fn piece(format: usize, kind: u8, seed: u64, ms: i64) -> String {
        let w = WORDS[(seed % WORDS.len() as u64) as usize];
        let v = WORDS[(seed / 7 % WORDS.len() as u64) as usize];
        let pid = 10 + seed % 3;
        match (format, kind % 6) {
            (_, 0) => format!("\tat {w}.Frame(F.java:{seed})"),
            (_, 1) => format!("Caused by: {v} {w}"),
            (_, 2) => String::new(),
            (0, _) => format!(
                "{} ERROR {pid} --- [main] c.e.X : {w} happened {seed}",
                iso(ms)
            ),
            (1, 3) => format!("{} UTC [{pid}] DETAIL:  {v} detail", pg_time(ms)),
            (1, _) => format!("{} UTC [{pid}] ERROR:  {w} in {v}", pg_time(ms)),
            (_, 3) => format!("{} stdout P {w} t", cri_time(ms)),
            (_, 4) => format!("{} stderr F {v}", cri_time(ms)),
            (_, _) => format!("{} stdout F imeout {w}", cri_time(ms)),
        }
    }

    fn pg_time(ms: i64) -> String {
        chrono::DateTime::from_timestamp_millis(ms)
            .unwrap()
            .format("%Y-%m-%d %H:%M:%S%.3f")
            .to_string()
    }

    fn cri_time(ms: i64) -> String {
        chrono::DateTime::from_timestamp_millis(ms)
            .unwrap()
            .format("%Y-%m-%dT%H:%M:%S%.9fZ")
            .to_string()
    }

    const FORMATS: [LogFormat; 3] = [LogFormat::SpringBoot, LogFormat::Postgresql, LogFormat::Cri];

    fn file(format: usize, pieces: &[(u8, u64)]) -> String {
        let mut text = String::new();
        let first = NOW_MILLIS - 120 * MINUTE;
        for (i, (kind, seed)) in pieces.iter().enumerate() {
            // In time order: the window search may be used.
            let ms = first + i as i64 * 20_000;
            text.push_str(&piece(format, *kind, *seed, ms));
            text.push(if seed % 5 == 0 { '\r' } else { '\n' });
            if seed % 5 == 0 {
                text.push('\n');
            }
        }
        text
    }

    proptest! {
        #![proptest_config(testkit::proptest_config_with_default(24))]

        /// The scan (prefilter-guided, seeking or reading whole) finds
        /// exactly the events that reading every line in order and matching
        /// each event finds.
        #[test]
        fn the_guided_scan_equals_reading_every_event(
            format in 0..FORMATS.len(),
            pieces in prop::collection::vec((any::<u8>(), any::<u64>()), 0..400),
            words in prop::collection::vec(0..WORDS.len(), 1..3),
            lookback in 1_i64..150,
        ) {
            let dir = tempfile::tempdir().unwrap();
            let text = file(format, &pieces);
            std::fs::write(dir.path().join("app.log"), &text).unwrap();
            let section = topic(dir.path(), &["app.log"], FORMATS[format]);
            let words: Vec<&str> = words.iter().map(|i| WORDS[*i]).collect();
            let q = last(&words.join(" "), lookback);
            let parsed = parse_text(&section, text.as_bytes(), q.end).unwrap();
            let expected: Vec<String> = parsed
                .events
                .iter()
                .filter(|e| q.start <= e.timestamp && e.timestamp <= q.end)
                .filter(|e| {
                    let lower = e.message.to_lowercase();
                    words.iter().all(|w| lower.contains(w))
                })
                .map(|e| e.message.clone())
                .collect();
            for threshold in [0, u64::MAX] {
                let source = source(section.clone()).with_seek_threshold(threshold);
                let (found, count, _) = run(&source, &q);
                prop_assert_eq!(count, expected.len() as u64);
                // The timeline keeps the most recent; equal times keep file order.
                let tail = &expected[expected.len().saturating_sub(found.len())..];
                prop_assert_eq!(&found[..], tail);
            }
        }
    }
}
