//! Projection of 100,000 raw log events (about 20 MB of JSON) against a plain
//! `serde_json` parse of the same bytes, measured in the same run.
//!
//! `cargo xtask bench log_projection` runs the criterion groups, then measures
//! both directly (interleaved rounds, medians) and prints, as its last line:
//! `events=… bytes=… parse_ms=… typed_parse_ms=… project_ms=… ratio=… typed_ratio=…`
//! where `ratio = project_ms / parse_ms` (parse into `serde_json::Value`) and
//! `typed_ratio = project_ms / typed_parse_ms` (parse into `RawLogResponse`).
//! Target: `ratio <= 2`. Then the cost of redaction, measured the same way:
//! `redaction: project_ms=… unredacted_ms=… share=…` where `unredacted_ms`
//! projects with a disabled redaction pass (the baseline) and
//! `share = (project_ms - unredacted_ms) / project_ms`. Target: `share <= 0.10`.
//! Without `--bench` (as a test) it runs on 1,000 events.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::{Duration, Instant};

use aci_contracts::{LogTopic, SourceKind, Timestamp, ToolCallId};
use criterion::{Criterion, Throughput};
use invocation_core::redact::RedactionPass;
use projectors_logs::{LogProjector, RawLogEvent, RawLogResponse};
use serde_json::Value;

const NOW: i64 = 1_767_225_600_000;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn hex(&mut self, digits: usize) -> String {
        let mut s = format!("{:016x}{:016x}", self.next(), self.next());
        s.truncate(digits);
        s
    }

    fn uuid(&mut self) -> String {
        let h = self.hex(32);
        format!(
            "{}-{}-{}-{}-{}",
            &h[..8],
            &h[8..12],
            &h[12..16],
            &h[16..20],
            &h[20..]
        )
    }
}

fn message(rng: &mut Rng) -> (&'static str, String) {
    match rng.below(12) {
        0 => (
            "WARN",
            format!(
                "HikariPool-1 - Connection is not available, request timed out after {}ms.",
                30_000 + rng.below(9)
            ),
        ),
        1 => (
            "ERROR",
            format!(
                "Failed to create order {}: CannotGetJdbcConnectionException: Failed to obtain \
                 JDBC Connection; request timed out after {}ms.",
                80_000 + rng.below(20_000),
                30_000 + rng.below(9)
            ),
        ),
        2 => (
            "INFO",
            format!(
                "GET /api/v1/orders/{} 200 {}ms",
                80_000 + rng.below(20_000),
                rng.below(900)
            ),
        ),
        3 => (
            "INFO",
            format!(
                "POST /api/v1/payments 201 {}ms (request_id={})",
                rng.below(900),
                rng.uuid()
            ),
        ),
        4 => (
            "ERROR",
            format!(
                "Upstream order-service returned 503 Service Unavailable for POST /api/v1/orders \
                 (request_id={}, latency={}ms)",
                rng.uuid(),
                30_000 + rng.below(50)
            ),
        ),
        5 => (
            "warning",
            format!(
                "Retrying POST http://order-service:8080/api/v1/orders/{}/confirm after 503 \
                 (attempt {}/3, backoff {}ms)",
                80_000 + rng.below(20_000),
                1 + rng.below(3),
                200 << rng.below(3)
            ),
        ),
        6 => (
            "debug",
            format!(
                "Cache miss for key product:{}:v{}, loading from 10.0.{}.{}:6379",
                rng.below(100_000),
                rng.below(9),
                rng.below(256),
                rng.below(256)
            ),
        ),
        7 => (
            "INFO",
            format!(
                "User {} logged in from 172.16.{}.{}",
                rng.uuid(),
                rng.below(256),
                rng.below(256)
            ),
        ),
        8 => (
            "WARN",
            format!(
                "Query_time: {}.{:03}s Lock_time: 0.000s Rows_sent: 20 Rows_examined: {} SELECT \
                 o.* FROM orders o WHERE o.customer_id = {}",
                1 + rng.below(20),
                rng.below(1000),
                1_800_000 + rng.below(50_000),
                rng.below(10_000)
            ),
        ),
        9 => (
            "err",
            format!(
                "Memory cgroup out of memory: Killed process {} (java) total-vm:{}kB, anon-rss:{}kB",
                rng.below(30_000),
                8_000_000 + rng.below(500_000),
                4_000_000 + rng.below(500_000)
            ),
        ),
        10 => (
            "INFO",
            format!(
                "Scheduled task report-export-{} completed in {}.{}s",
                rng.below(10),
                rng.below(100),
                rng.below(10)
            ),
        ),
        _ => (
            "INFO",
            format!(
                "GC pause (G1 Evacuation Pause) {}ms, heap {}M->{}M({}M)",
                rng.below(200),
                1000 + rng.below(3000),
                500 + rng.below(500),
                4096
            ),
        ),
    }
}

fn raw_response(events: usize) -> RawLogResponse {
    let mut rng = Rng(7);
    let events = (0..events)
        .map(|i| {
            let (level, message) = message(&mut rng);
            let fields = BTreeMap::from([
                (
                    "host".to_owned(),
                    Value::String(format!("ip-10-0-{}-{}", rng.below(8), rng.below(256))),
                ),
                ("trace_id".to_owned(), Value::String(rng.hex(32))),
            ]);
            // Mostly in order, with some jitter, as sources deliver them.
            let at = NOW - 3_600_000 + (i as i64 * 3_600_000 / 100_000) + rng.below(2000) as i64;
            RawLogEvent {
                timestamp: Timestamp::from_unix_millis(at.min(NOW)),
                level: level.to_owned(),
                message,
                fields,
            }
        })
        .collect::<Vec<_>>();
    RawLogResponse {
        source_kind: SourceKind::Mock,
        topic: LogTopic::Application,
        query: "order".to_owned(),
        lookback_minutes: 60,
        start_time: Timestamp::from_unix_millis(NOW - 3_600_000),
        end_time: Timestamp::from_unix_millis(NOW),
        match_count: events.len() as u64,
        events,
        stats: None,
    }
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let count = if full { 100_000 } else { 1_000 };
    let raw = raw_response(count);
    let bytes = serde_json::to_vec(&raw).unwrap();
    let projector = LogProjector::default();
    let id = ToolCallId::new("call_bench").unwrap();
    // Sanity: the projection is valid and what we project is what we parse.
    let parsed: RawLogResponse = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(parsed, raw);
    let result = projector.project_raw(&id, &raw).unwrap();
    aci_contracts::EvidenceResult::validate(&result).unwrap();

    let mut criterion = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4))
        .configure_from_args();
    {
        let mut group = criterion.benchmark_group("query_logs_100k");
        group.throughput(Throughput::Bytes(bytes.len() as u64));
        group.bench_function("serde_json_parse_value", |b| {
            b.iter_with_large_drop(|| serde_json::from_slice::<Value>(black_box(&bytes)).unwrap());
        });
        group.bench_function("serde_json_parse_typed", |b| {
            b.iter_with_large_drop(|| {
                serde_json::from_slice::<RawLogResponse>(black_box(&bytes)).unwrap()
            });
        });
        group.bench_function("project", |b| {
            b.iter(|| projector.project_raw(&id, black_box(&raw)).unwrap());
        });
        group.finish();
    }
    criterion.final_summary();

    // The same comparison measured directly: interleaved rounds, medians.
    let rounds = if full { 9 } else { 3 };
    let (mut parse, mut typed, mut project) = (Vec::new(), Vec::new(), Vec::new());
    let mut unredacted = Vec::new();
    for _ in 0..rounds {
        let started = Instant::now();
        let value = serde_json::from_slice::<Value>(black_box(&bytes)).unwrap();
        parse.push(started.elapsed());
        drop(black_box(value));

        let started = Instant::now();
        let typed_raw = serde_json::from_slice::<RawLogResponse>(black_box(&bytes)).unwrap();
        typed.push(started.elapsed());
        drop(black_box(typed_raw));

        let started = Instant::now();
        let projected = projector.project_raw(&id, black_box(&raw)).unwrap();
        project.push(started.elapsed());
        drop(black_box(projected));

        let started = Instant::now();
        let projected = projector
            .project_redacting(&id, black_box(&raw), &RedactionPass::disabled())
            .unwrap();
        unredacted.push(started.elapsed());
        drop(black_box(projected));
    }
    let unredacted = median(unredacted);
    let (parse, typed, project) = (median(parse), median(typed), median(project));
    let mib = bytes.len() as f64 / (1024.0 * 1024.0);
    println!(
        "projection: {:.1} MiB/s, {:.0} events/s; serde_json parse (Value): {:.1} MiB/s; \
         parse (RawLogResponse): {:.1} MiB/s; result {} bytes, {} patterns, {} events",
        mib / project.as_secs_f64(),
        count as f64 / project.as_secs_f64(),
        mib / parse.as_secs_f64(),
        mib / typed.as_secs_f64(),
        serde_json::to_string(&result).unwrap().len(),
        result.patterns.len(),
        result.events.len(),
    );
    println!(
        "redaction: project_ms={:.1} unredacted_ms={:.1} share={:.3}",
        ms(project),
        ms(unredacted),
        (ms(project) - ms(unredacted)) / ms(project),
    );
    println!(
        "events={count} bytes={} parse_ms={:.1} typed_parse_ms={:.1} project_ms={:.1} ratio={:.3} typed_ratio={:.3} unredacted_ms={:.1} redaction_share={:.3}",
        bytes.len(),
        ms(parse),
        ms(typed),
        ms(project),
        ms(project) / ms(parse),
        ms(project) / ms(typed),
        ms(unredacted),
        (ms(project) - ms(unredacted)) / ms(project),
    );
}
