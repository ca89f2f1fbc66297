//! `query_logs` over a generated 1 GiB JSON-lines file.
//!
//! `cargo bench -p projectors-logs --bench files` writes the file into a
//! temporary directory (removed at the end; `ACI_BENCH_LOG_MIB` changes the
//! size), spanning 72 hours of events with one `timeout` line in 50, then
//! measures in the same run (best of 3, page cache warm):
//!
//! - a plain sequential read of the whole file (2 MiB reads, and 256 KiB
//!   reads, the source's read size; the faster is the baseline);
//! - a `query_logs` call through the tool boundary with a one-hour window at
//!   the end of the file, and with one at its middle;
//! - `grep -c -i timeout` (ripgrep's `rg -c -i` when installed) over exactly
//!   the bytes of each window (copied to a file of their own first);
//!
//! and prints the ratios (`ACI_BENCH_LOG_REPEAT=N` then repeats the call at
//! the end N times, for a profiler). Goals: the window at the end at least 20 times
//! faster than reading the whole file; the scan of a window at most 1.5 times
//! `grep -c` over the same bytes.
//!
//! Then the same for multi-line events (`spring_boot`, module `spring`),
//! with the full scan against `json_lines` over the same events.
//! `ACI_BENCH_LOG_FORMATS=json` or `=spring_boot` runs one half only.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

#[path = "files/spring.rs"]
mod spring;

use std::fs::File;
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aci_contracts::{LogTopic, RunId, Timestamp};
use invocation_core::{Clock, ManualClock, RunContext, ToolBoundary, ToolEnvelope};
use projectors_logs::{
    FileLogSource, LogFormat, LogQuery, LogsConfig, TopicConfig, query_logs_tool,
};
use serde_json::json;
use store_memory::MemoryStore;

const HOUR_MS: i64 = 3_600_000;
const SPAN_HOURS: i64 = 72;
/// 2026-12-01T00:00:00Z, the first line.
const FIRST_MS: i64 = 1_796_083_200_000;

struct Generated {
    size: u64,
    lines: u64,
    last_ms: i64,
    /// (time, offset) of every line.
    line_starts: Vec<(i64, u64)>,
}

fn generate(path: &Path, target_bytes: u64) -> Generated {
    // ~190 bytes a line.
    let lines = target_bytes / 190;
    let step_ms = (SPAN_HOURS * HOUR_MS) as f64 / lines as f64;
    let mut out = BufWriter::with_capacity(4 << 20, File::create(path).unwrap());
    let mut offset = 0_u64;
    let mut line_starts = Vec::with_capacity(usize::try_from(lines).unwrap());
    let mut last_ms = FIRST_MS;
    let mut line = String::with_capacity(256);
    for i in 0..lines {
        let ms = FIRST_MS + (i as f64 * step_ms) as i64;
        line_starts.push((ms, offset));
        last_ms = ms;
        line.clear();
        let ts = Timestamp::from_unix_millis(ms).to_string();
        let (level, msg) = if i % 50 == 0 {
            (
                "ERROR",
                format!("upstream timeout after 30000ms calling payment-service order={i}"),
            )
        } else {
            (
                "INFO",
                format!("GET /api/v1/orders/{} 200 in {}ms", i % 100_000, i % 97),
            )
        };
        use std::fmt::Write as _;
        writeln!(
            line,
            "{{\"ts\":\"{ts}\",\"level\":\"{level}\",\"service\":\"order-service\",\"pod\":\"order-service-7d9f8b-x2k4q\",\"trace_id\":\"{:016x}\",\"msg\":\"{msg}\"}}",
            i.wrapping_mul(0x9e37_79b9_7f4a_7c15)
        )
        .unwrap();
        out.write_all(line.as_bytes()).unwrap();
        offset += line.len() as u64;
    }
    out.flush().unwrap();
    Generated {
        size: offset,
        lines,
        last_ms,
        line_starts,
    }
}

fn best_of<T>(runs: usize, mut f: impl FnMut() -> T) -> (Duration, T) {
    let mut best = Duration::MAX;
    let mut last = None;
    for _ in 0..runs {
        let started = Instant::now();
        let value = f();
        best = best.min(started.elapsed());
        last = Some(value);
    }
    (best, last.unwrap())
}

fn sequential_read(path: &Path, read_size: usize) -> u64 {
    let mut file = File::open(path).unwrap();
    let mut buf = vec![0_u8; read_size];
    let mut total = 0_u64;
    loop {
        let n = file.read(&mut buf).unwrap();
        if n == 0 {
            return total;
        }
        total += n as u64;
    }
}

/// Offsets of the lines with `start_ms <= time <= end_ms`.
fn window_bytes(generated: &Generated, start_ms: i64, end_ms: i64) -> (u64, u64) {
    let offset = |i: usize| {
        generated
            .line_starts
            .get(i)
            .map_or(generated.size, |(_, o)| *o)
    };
    let from = generated
        .line_starts
        .partition_point(|(t, _)| *t < start_ms);
    let to = generated.line_starts.partition_point(|(t, _)| *t <= end_ms);
    (offset(from), offset(to))
}

fn copy_range(from: &Path, to: &Path, start: u64, end: u64) {
    let mut source = File::open(from).unwrap();
    source.seek(SeekFrom::Start(start)).unwrap();
    let mut out = File::create(to).unwrap();
    std::io::copy(&mut source.take(end - start), &mut out).unwrap();
}

fn grep_count(path: &Path, word: &str) -> (String, u64) {
    let (tool, args): (&str, &[&str]) = if Command::new("rg").arg("--version").output().is_ok() {
        ("rg -c -i", &["-c", "-i", word])
    } else {
        ("grep -c -i", &["-c", "-i", word])
    };
    let program = tool.split(' ').next().unwrap();
    let out = Command::new(program)
        .args(args)
        .arg(path)
        .env("LC_ALL", "C")
        .output()
        .unwrap();
    let count = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or(0);
    (tool.to_owned(), count)
}

fn main() {
    // `cargo test --benches` / clippy only build it; `cargo bench` passes --bench.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let mib: u64 = std::env::var("ACI_BENCH_LOG_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1024);
    let formats = std::env::var("ACI_BENCH_LOG_FORMATS").unwrap_or_default();
    if formats.is_empty() || formats.contains("json") {
        json_lines(mib);
    }
    if formats.is_empty() || formats.contains("spring_boot") {
        spring::run(mib);
    }
}

/// The JSON-lines half.
fn json_lines(mib: u64) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.log");
    let started = Instant::now();
    let generated = generate(&path, mib << 20);
    println!(
        "generated {} MiB, {} lines over {SPAN_HOURS} h in {:.1?}",
        generated.size >> 20,
        generated.lines,
        started.elapsed()
    );

    let source = FileLogSource::new(&LogsConfig {
        topics: [(
            LogTopic::Application,
            TopicConfig {
                dir: dir.path().to_owned(),
                files: vec!["app.log".into()],
                format: LogFormat::JsonLines,
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
    .unwrap();
    let direct = source.clone();
    let clock = ManualClock::new(Timestamp::from_unix_millis(generated.last_ms));
    let shared: Arc<dyn Clock> = Arc::new(clock.clone());
    let boundary = ToolBoundary::builder(Arc::new(MemoryStore::with_clock(Arc::clone(&shared))))
        .clock(shared)
        .tool(query_logs_tool(source))
        .build()
        .unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut calls = 0_u32;
    let mut query_logs = |now_ms: i64| {
        clock.set(Timestamp::from_unix_millis(now_ms));
        calls += 1;
        let run = RunContext::new(
            RunId::new(format!("bench-{calls}")).unwrap(),
            invocation_core::CallPolicy::AUTHORIZED_READ_ONLY,
        );
        let envelope = ToolEnvelope::new(
            "call_1",
            run.run_id.as_str(),
            "query_logs",
            json!({"topic": "APPLICATION", "query": "timeout", "lookback_minutes": 60}).to_string(),
        );
        let outcome = runtime.block_on(boundary.invoke(&run, envelope));
        outcome.observation.to_json()["match_count"]
            .as_u64()
            .expect("a READY result")
    };

    // The baseline is the faster of 2 MiB and 256 KiB reads (the source's
    // read size: small reads stay in the CPU's cache).
    let mut read = Duration::MAX;
    for read_size in [2 << 20, 256 << 10] {
        let (took, bytes) = best_of(3, || sequential_read(&path, read_size));
        println!(
            "sequential read of the whole file, {} KiB reads: {took:.2?} ({:.0} MiB/s)",
            read_size >> 10,
            bytes as f64 / took.as_secs_f64() / 1_048_576.0
        );
        read = read.min(took);
    }
    let middle_ms = FIRST_MS + SPAN_HOURS * HOUR_MS / 2;
    for (name, end_ms) in [("end", generated.last_ms), ("middle", middle_ms)] {
        let (query, matches) = best_of(3, || query_logs(end_ms));
        let (direct_time, (_, stats)) = best_of(3, || {
            direct
                .query_blocking(&LogQuery {
                    topic: LogTopic::Application,
                    query: "timeout".into(),
                    start: Timestamp::from_unix_millis(end_ms - HOUR_MS),
                    end: Timestamp::from_unix_millis(end_ms),
                })
                .unwrap()
        });
        println!(
            "  the source alone: {direct_time:.2?}, read {} KiB ({} files read whole)",
            stats.bytes_read >> 10,
            stats.files_full_scan
        );
        let (absent_time, _) = best_of(3, || {
            direct
                .query_blocking(&LogQuery {
                    topic: LogTopic::Application,
                    query: "qzxv".into(),
                    start: Timestamp::from_unix_millis(end_ms - HOUR_MS),
                    end: Timestamp::from_unix_millis(end_ms),
                })
                .unwrap()
        });
        println!("  the source alone, a word that never occurs: {absent_time:.2?}");
        let (from, to) = window_bytes(&generated, end_ms - HOUR_MS, end_ms);
        let window = dir.path().join(format!("window-{name}.log"));
        copy_range(&path, &window, from, to);
        let (grep, (tool, grep_matches)) = best_of(3, || grep_count(&window, "timeout"));
        std::fs::remove_file(&window).unwrap();
        println!(
            "window at the {name}: {} MiB, {matches} matches (`{tool}`: {grep_matches})",
            (to - from) >> 20
        );
        println!(
            "  query_logs {query:.2?}; {tool} over the window's bytes {grep:.2?}: \
             query_logs / grep = {:.2} (goal <= 1.5)",
            query.as_secs_f64() / grep.as_secs_f64()
        );
        println!(
            "  sequential read of the whole file / query_logs = {:.1}x{}",
            read.as_secs_f64() / query.as_secs_f64(),
            if name == "end" { " (goal >= 20x)" } else { "" }
        );
        assert_eq!(matches, grep_matches, "both count the same lines");
    }
    // For a profiler (`perf record --delay`): the call at the end, repeated.
    let repeat: u32 = std::env::var("ACI_BENCH_LOG_REPEAT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    if repeat > 0 {
        let started = Instant::now();
        for _ in 0..repeat {
            query_logs(generated.last_ms);
        }
        println!(
            "{repeat} more calls at the end: {:.2?} each",
            started.elapsed() / repeat
        );
    }
}
