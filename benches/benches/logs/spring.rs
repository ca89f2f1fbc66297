//! The multi-line half of the files bench: a generated 1 GiB `spring_boot`
//! file (stack traces in 5% of events), and the same events as JSON lines.
//!
//! Measured in the same run (best of 3, page cache warm):
//! - a plain sequential read of the whole file (the baseline of the window
//!   goal);
//! - `query_logs` through the boundary, a 60-minute window at the end of the
//!   file, for a word only on the stack traces' `Caused by:` lines;
//! - `grep -c -i` (`rg` when installed) over exactly that window's bytes;
//! - a full scan (every file read whole, the window over all of it) of
//!   `spring_boot`, of `format = "pattern"` with the same regular
//!   expression, and of `json_lines` over the same events (the baseline of
//!   the full-scan goal).
//!
//! Goals: window ≥ 20× faster than reading the whole file; window scan
//! ≤ 1.5× `grep -c`; full scan with a pattern ≤ 2× `json_lines`.

use std::fmt::Write as _;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use aci_contracts::{LogTopic, RunId, Timestamp};
use invocation_core::{Clock, ManualClock, RunContext, ToolBoundary, ToolEnvelope};
use projectors_logs::{
    FileLogSource, LogFormat, LogQuery, LogsConfig, TopicConfig, query_logs_tool,
};
use serde_json::json;
use store_memory::MemoryStore;

use super::{FIRST_MS, HOUR_MS, SPAN_HOURS, best_of, copy_range, grep_count, sequential_read};

/// The word searched: only on the `Caused by:` line of a stack trace.
const WORD: &str = "SQLTransientConnectionException";

/// Spring Boot's default regular expression, as a custom `pattern`.
const PATTERN: &str = r"^(?P<timestamp>\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d{1,9})?(?:Z|[+-]\d{2}(?::?\d{2})?)?)\s+(?P<level>TRACE|DEBUG|INFO|WARN|ERROR|FATAL)\s+(?P<pid>\d+)?\s*---\s+(?:\[(?P<application>[^\]]*)\]\s*)?\[\s*(?P<thread>[^\]]*?)\s*\]\s+(?:\[(?P<correlation>[^\]]*)\]\s+)?(?P<logger>\S+)\s+: ?(?P<message>.*)$";

struct Generated {
    size: u64,
    events: u64,
    traced: u64,
    last_ms: i64,
    /// (time, offset) of every event's head line.
    starts: Vec<(i64, u64)>,
}

/// One event as Spring Boot writes it, and as a JSON line.
fn event(i: u64, ms: i64, text: &mut String, json_line: &mut String) -> bool {
    text.clear();
    json_line.clear();
    let ts = chrono::DateTime::from_timestamp_millis(ms)
        .unwrap()
        .format("%Y-%m-%dT%H:%M:%S%.3f+00:00")
        .to_string();
    let thread = format!("http-nio-8080-exec-{}", i % 10);
    let traced = i % 20 == 3;
    let (level, logger, message) = if traced {
        let message = format!(
            "Order {i} failed\n\
java.lang.IllegalStateException: could not reserve stock for order {i}\n\
\tat com.example.order.OrderService.reserve(OrderService.java:88)\n\
\tat com.example.order.OrderService.place(OrderService.java:41)\n\
\tat com.example.order.OrderController.create(OrderController.java:33)\n\
\tat java.base/jdk.internal.reflect.DirectMethodHandleAccessor.invoke(DirectMethodHandleAccessor.java:103)\n\
Caused by: java.sql.{WORD}: HikariPool-1 - Connection is not available, request timed out after 30000ms.\n\
\tat com.zaxxer.hikari.pool.HikariPool.createTimeoutException(HikariPool.java:696)\n\
\tat com.zaxxer.hikari.pool.HikariPool.getConnection(HikariPool.java:181)\n\
\t... 9 common frames omitted"
        );
        ("ERROR", "c.e.order.OrderService", message)
    } else if i.is_multiple_of(50) {
        (
            "WARN",
            "c.e.order.PaymentClient",
            format!("upstream timeout after 30000ms calling payment-service order={i}"),
        )
    } else {
        (
            "INFO",
            "c.e.order.OrderController",
            format!("GET /api/v1/orders/{} 200 in {}ms", i % 100_000, i % 97),
        )
    };
    let mut lines = message.split('\n');
    let head = lines.next().unwrap_or("");
    let _ = writeln!(
        text,
        "{ts} {level:>5} 4242 --- [{thread}] {logger:<40} : {head}"
    );
    if traced {
        // Spring Boot's `%wEx`: the trace after an empty line, and one after it.
        text.push('\n');
        for line in lines {
            text.push_str(line);
            text.push('\n');
        }
        text.push('\n');
    }
    let _ = writeln!(
        json_line,
        "{}",
        json!({"ts": ts, "level": level, "pid": "4242", "thread": thread, "logger": logger, "msg": message})
    );
    traced
}

fn generate(spring: &Path, json_path: &Path, target_bytes: u64) -> Generated {
    // ~185 bytes an event on average.
    let events = target_bytes / 185;
    let step_ms = (SPAN_HOURS * HOUR_MS) as f64 / events as f64;
    let mut out = BufWriter::with_capacity(4 << 20, File::create(spring).unwrap());
    let mut json_out = BufWriter::with_capacity(4 << 20, File::create(json_path).unwrap());
    let (mut text, mut line) = (String::new(), String::new());
    let mut offset = 0_u64;
    let mut starts = Vec::with_capacity(usize::try_from(events).unwrap());
    let mut traced = 0;
    let mut last_ms = FIRST_MS;
    for i in 0..events {
        let ms = FIRST_MS + (i as f64 * step_ms) as i64;
        starts.push((ms, offset));
        last_ms = ms;
        traced += u64::from(event(i, ms, &mut text, &mut line));
        out.write_all(text.as_bytes()).unwrap();
        json_out.write_all(line.as_bytes()).unwrap();
        offset += text.len() as u64;
    }
    out.flush().unwrap();
    json_out.flush().unwrap();
    Generated {
        size: offset,
        events,
        traced,
        last_ms,
        starts,
    }
}

fn topic(dir: &Path, file: &str, format: LogFormat, pattern: Option<&str>) -> TopicConfig {
    TopicConfig {
        dir: dir.to_owned(),
        files: vec![file.to_owned()],
        format,
        pattern: pattern.map(str::to_owned),
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

/// Runs the multi-line measurements over a file of `mib` MiB.
pub(super) fn run(mib: u64) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.log");
    let json_path = dir.path().join("app.json.log");
    let started = Instant::now();
    let generated = generate(&path, &json_path, mib << 20);
    println!(
        "\nspring_boot: generated {} MiB, {} events ({} with a stack trace) over {SPAN_HOURS} h in {:.1?}; the same events as JSON lines: {} MiB",
        generated.size >> 20,
        generated.events,
        generated.traced,
        started.elapsed(),
        std::fs::metadata(&json_path).unwrap().len() >> 20
    );
    let spring = source(topic(dir.path(), "app.log", LogFormat::SpringBoot, None));
    let clock = ManualClock::new(Timestamp::from_unix_millis(generated.last_ms));
    let shared: Arc<dyn Clock> = Arc::new(clock.clone());
    let boundary = ToolBoundary::builder(Arc::new(MemoryStore::with_clock(Arc::clone(&shared))))
        .clock(shared)
        .tool(query_logs_tool(spring.clone()))
        .build()
        .unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut calls = 0_u32;
    let mut query_logs = || {
        calls += 1;
        let run = RunContext::new(
            RunId::new(format!("bench-spring-{calls}")).unwrap(),
            invocation_core::CallPolicy::AUTHORIZED_READ_ONLY,
        );
        let envelope = ToolEnvelope::new(
            "call_1",
            run.run_id.as_str(),
            "query_logs",
            json!({"topic": "APPLICATION", "query": WORD, "lookback_minutes": 60}).to_string(),
        );
        let outcome = runtime.block_on(boundary.invoke(&run, envelope));
        outcome.observation.to_json()["match_count"]
            .as_u64()
            .expect("a READY result")
    };

    let mut read = std::time::Duration::MAX;
    for read_size in [2 << 20, 256 << 10] {
        let (took, _) = best_of(3, || sequential_read(&path, read_size));
        read = read.min(took);
    }
    println!("  sequential read of the whole file (faster of 2 MiB / 256 KiB reads): {read:.2?}");
    let (query, matches) = best_of(3, &mut query_logs);
    let window_query = LogQuery {
        topic: LogTopic::Application,
        query: WORD.to_owned(),
        start: Timestamp::from_unix_millis(generated.last_ms - HOUR_MS),
        end: Timestamp::from_unix_millis(generated.last_ms),
    };
    let (alone, (_, window_stats)) = best_of(3, || spring.query_blocking(&window_query).unwrap());
    println!(
        "  the source alone: {alone:.2?}, read {} KiB ({} files read whole)",
        window_stats.bytes_read >> 10,
        window_stats.files_full_scan
    );
    let end_ms = generated.last_ms;
    let from = generated
        .starts
        .partition_point(|(t, _)| *t < end_ms - HOUR_MS);
    let (from, to) = (generated.starts[from].1, generated.size);
    let window = dir.path().join("window.log");
    copy_range(&path, &window, from, to);
    let (grep, (tool, grep_matches)) = best_of(3, || grep_count(&window, WORD));
    std::fs::remove_file(&window).unwrap();
    println!(
        "  window at the end: {} MiB, {matches} matching events (`{tool}`: {grep_matches} lines)",
        (to - from) >> 20
    );
    println!(
        "  query_logs {query:.2?}; {tool} over the window's bytes {grep:.2?}: query_logs / grep = {:.2} (goal <= 1.5)",
        query.as_secs_f64() / grep.as_secs_f64()
    );
    println!(
        "  sequential read of the whole file / query_logs = {:.1}x (goal >= 20x)",
        read.as_secs_f64() / query.as_secs_f64()
    );
    let window_line = format!(
        "spring_grep_end={:.2} spring_read_end={:.1}",
        query.as_secs_f64() / grep.as_secs_f64(),
        read.as_secs_f64() / query.as_secs_f64()
    );
    assert_eq!(
        matches, grep_matches,
        "one Caused by line per matching event"
    );

    // Full scans: every file read whole, the window over all of it.
    let everything = LogQuery {
        topic: LogTopic::Application,
        query: WORD.to_owned(),
        start: Timestamp::from_unix_millis(FIRST_MS),
        end: Timestamp::from_unix_millis(generated.last_ms),
    };
    let full = |section: TopicConfig| {
        let source = source(section).with_seek_threshold(u64::MAX);
        best_of(3, || source.query_blocking(&everything).unwrap())
    };
    let (json_time, (json_matches, _)) = full(topic(
        dir.path(),
        "app.json.log",
        LogFormat::JsonLines,
        None,
    ));
    let (spring_time, (spring_matches, stats)) =
        full(topic(dir.path(), "app.log", LogFormat::SpringBoot, None));
    let (pattern_time, (pattern_matches, _)) = full(topic(
        dir.path(),
        "app.log",
        LogFormat::Pattern,
        Some(PATTERN),
    ));
    assert_eq!(spring_matches.match_count, generated.traced);
    assert_eq!(json_matches.match_count, generated.traced);
    assert_eq!(pattern_matches.match_count, generated.traced);
    assert_eq!(stats.orphan_lines + stats.unparsed, 0);
    println!(
        "  full scan ({} matching events): json_lines {json_time:.2?} (baseline)",
        generated.traced
    );
    println!(
        "  full scan spring_boot {spring_time:.2?}: spring_boot / json_lines = {:.2} (goal <= 2)",
        spring_time.as_secs_f64() / json_time.as_secs_f64()
    );
    println!(
        "  full scan pattern (the same regex) {pattern_time:.2?}: pattern / json_lines = {:.2} (goal <= 2)",
        pattern_time.as_secs_f64() / json_time.as_secs_f64()
    );
    // For a profiler: the full spring_boot scan, repeated.
    let repeat: u32 = std::env::var("ACI_BENCH_LOG_REPEAT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    if repeat > 0 {
        let started = Instant::now();
        for _ in 0..repeat * 50 {
            spring.query_blocking(&window_query).unwrap();
        }
        println!(
            "  {} more window scans (the source alone): {:.2?} each",
            repeat * 50,
            started.elapsed() / (repeat * 50)
        );
        let source = source(topic(dir.path(), "app.log", LogFormat::SpringBoot, None))
            .with_seek_threshold(u64::MAX);
        let started = Instant::now();
        for _ in 0..repeat {
            source.query_blocking(&everything).unwrap();
        }
        println!(
            "  {repeat} more full spring_boot scans: {:.2?} each",
            started.elapsed() / repeat
        );
    }
    vec![
        window_line,
        format!(
            "spring_json={:.2} pattern_json={:.2}",
            spring_time.as_secs_f64() / json_time.as_secs_f64(),
            pattern_time.as_secs_f64() / json_time.as_secs_f64()
        ),
    ]
}
