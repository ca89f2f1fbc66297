//! Boundary overhead against the unavoidable work, measured in the same run.
//!
//! The workspace's fake tool (`invocation_core::testing::fake`) in two
//! sizes, both on the in-memory store:
//! - `1kib`: a ~1 KiB request and raw response, a ~2 KiB agent result (the
//!   fake echoes the query and quotes it in its excerpt);
//! - `1mib_raw`: a small request and result, and a 1 MiB raw response.
//!
//! The baseline does only what any recording boundary must: parse the
//! arguments once, serialize the request, the raw response and the result
//! once, one map insert and one map update. The boundary adds preflight,
//! fingerprinting, validation, the observation and the store's bookkeeping.
//! Targets: ratio at most 3x for `1kib`, at most 1.3x for `1mib_raw`.
//!
//! Run with `cargo bench -p invocation-core --bench boundary`.

// `criterion_group!` generates an undocumented function; a failed expectation
// aborts the benchmark.
#![allow(missing_docs, clippy::expect_used, clippy::unwrap_used)]

use std::cell::Cell;
use std::collections::HashMap;
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aci_contracts::RunId;
use criterion::{Criterion, criterion_group};
use invocation_core::testing::fake::{
    FakeExecutor, FakeRaw, FakeRequest, Mode, SENTINEL, fake_tool, found_result,
};
use invocation_core::{RunContext, ToolBoundary, ToolEnvelope};
use store_memory::MemoryStore;

struct Case {
    name: &'static str,
    query: String,
    raw: Arc<str>,
    target: f64,
}

const BATCH: u64 = 64;

fn boundary(case: &Case) -> ToolBoundary {
    ToolBoundary::builder(Arc::new(MemoryStore::new()))
        .tool(fake_tool(
            "bench_tool",
            FakeExecutor::new().with_fill(Arc::clone(&case.raw)),
        ))
        .build()
        .expect("boundary")
}

fn arguments(case: &Case) -> String {
    FakeRequest::new(Mode::Found, &case.query).to_arguments()
}

/// Mean time per iteration of `invoke` (fresh store every BATCH calls, untimed).
fn time_boundary(
    case: &Case,
    rt: &tokio::runtime::Runtime,
    iters: u64,
    seq: &Cell<u64>,
) -> Duration {
    let args = arguments(case);
    let ctx = RunContext::new(
        RunId::new("bench-run").expect("run id"),
        invocation_core::CallPolicy::AUTHORIZED_READ_ONLY,
    );
    rt.block_on(async {
        let mut total = Duration::ZERO;
        let mut b = boundary(case);
        for i in 0..iters {
            if i % BATCH == 0 {
                b = boundary(case);
            }
            let n = seq.get();
            seq.set(n + 1);
            let envelope =
                ToolEnvelope::new(format!("call-{n}"), "bench-run", "bench_tool", args.clone());
            let start = Instant::now();
            let outcome = b.invoke(&ctx, envelope).await;
            total += start.elapsed();
            assert!(
                !outcome.observation.is_error(),
                "{:?}",
                outcome.control.error_code
            );
            black_box(outcome);
        }
        total
    })
}

#[derive(Default)]
struct BaselineRecord {
    request: String,
    raw: Option<String>,
    result: Option<String>,
}

/// The unavoidable work: parse once, serialize request/raw/result once, one
/// map insert, one map update.
fn time_baseline(case: &Case, iters: u64, seq: &Cell<u64>) -> Duration {
    let args = arguments(case);
    let mut total = Duration::ZERO;
    let mut map: HashMap<(String, String), BaselineRecord> = HashMap::new();
    for i in 0..iters {
        if i % BATCH == 0 {
            map = HashMap::new();
        }
        let n = seq.get();
        seq.set(n + 1);
        let id = format!("call-{n}");
        let call_id = aci_contracts::ToolCallId::new(id.clone()).expect("id");
        let raw = FakeRaw {
            secret: SENTINEL.to_owned(),
            fill: Arc::clone(&case.raw),
        };
        let start = Instant::now();
        let request: FakeRequest = serde_json::from_str(&args).expect("parse");
        let request_json = serde_json::to_string(&request).expect("request");
        let key = ("bench-run".to_owned(), id);
        map.insert(
            key.clone(),
            BaselineRecord {
                request: request_json,
                ..BaselineRecord::default()
            },
        );
        let raw_json = serde_json::to_string(&raw).expect("raw");
        let excerpt = format!("evidence about {}", request.text);
        let result_json = serde_json::to_string(&found_result(&call_id, &request.text, &excerpt))
            .expect("result");
        if let Some(record) = map.get_mut(&key) {
            record.raw = Some(raw_json);
            record.result = Some(result_json);
        }
        total += start.elapsed();
        black_box(map.get(&key).map(|r| r.request.len()));
    }
    total
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "1kib",
            query: "connection pool timeout ".repeat(42),
            raw: "upstream retrieval payload ".repeat(38).into(),
            target: 3.0,
        },
        Case {
            name: "1mib_raw",
            query: "disk pressure".into(),
            // Just under the default 1 MiB raw limit once serialized.
            raw: "x".repeat(1024 * 1024 - 64).into(),
            target: 1.3,
        },
    ]
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let seq = Cell::new(0_u64);
    let mut summary = Vec::new();
    for case in cases() {
        let mut group = c.benchmark_group(case.name);
        let (base_time, base_iters) = (Cell::new(Duration::ZERO), Cell::new(0_u64));
        let (inv_time, inv_iters) = (Cell::new(Duration::ZERO), Cell::new(0_u64));
        group.bench_function("baseline", |b| {
            b.iter_custom(|iters| {
                let t = time_baseline(&case, iters, &seq);
                base_time.set(base_time.get() + t);
                base_iters.set(base_iters.get() + iters);
                t
            });
        });
        group.bench_function("invoke", |b| {
            b.iter_custom(|iters| {
                let t = time_boundary(&case, &rt, iters, &seq);
                inv_time.set(inv_time.get() + t);
                inv_iters.set(inv_iters.get() + iters);
                t
            });
        });
        group.finish();
        let per =
            |t: &Cell<Duration>, n: &Cell<u64>| t.get().as_secs_f64() * 1e9 / n.get().max(1) as f64;
        let (base, inv) = (per(&base_time, &base_iters), per(&inv_time, &inv_iters));
        let ratio = inv / base;
        println!(
            "{}: baseline {:.0} ns/call, boundary {:.0} ns/call, ratio {:.2} (target <= {})",
            case.name, base, inv, ratio, case.target
        );
        summary.push(format!("ratio_{}={ratio:.2}", case.name));
    }
    println!("{}", summary.join(" "));
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    targets = bench
}

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
}
