//! `cargo xtask bench redis`: the Redis store's cost per READY invocation.
//!
//! Spawns its own `redis-server` and prints, in one run:
//! - round trips per READY invocation, from `INFO commandstats` deltas
//!   (commands the scripts run inside Redis are listed apart: they are not
//!   round trips), cross-checked with `MONITOR`;
//! - memory per READY record (`MEMORY USAGE`, and `used_memory` growth
//!   including the run's index keys);
//! - invocations per second through the `ToolBoundary` at concurrency 1 and
//!   16 with a 1 KiB raw payload, and the baseline from the same run with the
//!   same client: the bare create and finalize scripts (`InvocationStore`
//!   calls with prebuilt payloads, no boundary logic); the ratio of the two.
//!
//! The last line is machine-readable:
//! `round_trips=2 ratio_c1=0.95 ratio_c16=0.92`.
//!
//! Run: `cargo run --release -p store-redis --features testing --example bench_redis`.

use std::error::Error;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aci_contracts::{
    InvocationStatus, KnowledgeEvidence, LookupKnowledgeResult, ReadyEvidenceStatus, RunId,
    ToolCallId,
};
use async_trait::async_trait;
use invocation_core::fingerprint::canonical_json;
use invocation_core::{
    Budgets, Clock, ExecutionContext, ExecutionError, Executor, Finalization, InvocationKey,
    InvocationStore, NewInvocation, ProjectionContext, ProjectionError, Projector, ReadyEvidence,
    RunContext, ScopeFingerprint, SystemClock, ToolBoundary, ToolEnvelope, ToolSpec,
};
use serde::{Deserialize, Serialize};
use store_redis::testing::{Admin, RedisServer, SCRIPT_INTERNAL_COMMANDS, monitor_port, unique_id};
use store_redis::{RedisConfig, RedisStore};

type Outcome<T> = Result<T, Box<dyn Error>>;

const TOOL: &str = "bench_lookup";
const PAYLOAD_BYTES: usize = 1024;
const POOL_SIZE: usize = 16;
const ROUND_TRIP_SAMPLE: usize = 200;
const MEMORY_SAMPLE: usize = 1000;
/// Boundary and baseline run in alternating chunks, so both see the same
/// machine load; rates are total invocations over total time per mode.
const CHUNKS: usize = 8;

#[derive(Debug, Clone, Serialize, Deserialize)]
struct BenchRequest {
    query: String,
}

#[derive(Debug, Clone, Serialize)]
struct BenchRaw {
    query: String,
    payload: String,
}

#[derive(Debug, Clone)]
struct BenchExecutor {
    payload: Arc<str>,
}

#[async_trait]
impl Executor for BenchExecutor {
    type Request = BenchRequest;
    type Raw = BenchRaw;

    async fn execute(
        &self,
        request: &BenchRequest,
        _context: &ExecutionContext,
    ) -> Result<BenchRaw, ExecutionError> {
        Ok(BenchRaw {
            query: request.query.clone(),
            payload: self.payload.to_string(),
        })
    }
}

#[derive(Debug, Clone, Copy)]
struct BenchProjector;

impl Projector for BenchProjector {
    type Request = BenchRequest;
    type Raw = BenchRaw;
    type Output = LookupKnowledgeResult;

    fn project(
        &self,
        context: &ProjectionContext<'_, BenchRequest>,
        raw: &BenchRaw,
    ) -> Result<LookupKnowledgeResult, ProjectionError> {
        Ok(result_for(
            context.tool_call_id.clone(),
            &raw.query,
            &raw.payload,
        ))
    }
}

fn result_for(tool_call_id: ToolCallId, query: &str, payload: &str) -> LookupKnowledgeResult {
    LookupKnowledgeResult {
        evidence_status: ReadyEvidenceStatus::EvidenceFound,
        tool_call_id,
        query: query.to_owned(),
        evidence: vec![KnowledgeEvidence {
            document_id: "doc-1".to_owned(),
            source: "bench".to_owned(),
            title: "Bench".to_owned(),
            breadcrumb: "Bench".to_owned(),
            excerpt: payload.chars().take(200).collect(),
        }],
        returned_count: 1,
        relevance_level: None,
        truncated: false,
    }
}

/// What the baseline sends: the same texts the boundary would, prebuilt.
struct Prebuilt {
    request_json: String,
    scope_json: String,
    fingerprint: ScopeFingerprint,
    raw_json: String,
    result_json: String,
}

fn main() -> Outcome<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(bench())
}

async fn bench() -> Outcome<()> {
    let server = RedisServer::spawn()?;
    let mut admin = Admin::connect(&server.url()).await?;
    let store = RedisStore::new(RedisConfig::single(server.url()).pool_size(POOL_SIZE))?;
    let payload: Arc<str> = "x".repeat(PAYLOAD_BYTES).into();
    let boundary = ToolBoundary::builder(Arc::new(store.clone()))
        .tool(
            ToolSpec::new(
                TOOL,
                "Benchmark tool.",
                BenchExecutor {
                    payload: Arc::clone(&payload),
                },
                BenchProjector,
            )
            .read_only(true),
        )
        .build()?;
    let query = "connection timeout in checkout";
    let request_json = serde_json::to_string(&BenchRequest {
        query: query.to_owned(),
    })?;
    let scope = serde_json::to_value(BenchRequest {
        query: query.to_owned(),
    })?;
    let prebuilt = Arc::new(Prebuilt {
        request_json: request_json.clone(),
        scope_json: canonical_json(&scope),
        fingerprint: ScopeFingerprint::of(TOOL, &scope),
        raw_json: serde_json::to_string(&BenchRaw {
            query: query.to_owned(),
            payload: payload.to_string(),
        })?,
        result_json: serde_json::to_string(&result_for(ToolCallId::new("c0")?, query, &payload))?,
    });

    println!(
        "redis bench: redis-server {} on 127.0.0.1, pool {POOL_SIZE}, raw payload {PAYLOAD_BYTES} B",
        admin.server_version().await?
    );

    // Warm up: open every pooled connection and cache both scripts.
    run_boundary(&boundary, &request_json, 16, 400).await?;
    run_baseline(&store, &prebuilt, 16, 400).await?;

    // Round trips: commandstats deltas, cross-checked with MONITOR.
    let before = admin.command_calls().await?;
    let monitor = monitor_port(server.port())?;
    run_boundary(&boundary, &request_json, 1, ROUND_TRIP_SAMPLE).await?;
    let seen = monitor.finish();
    let after = admin.command_calls().await?;
    let n = ROUND_TRIP_SAMPLE as f64;
    let mut client_commands = 0_u64;
    let mut client_listing = Vec::new();
    let mut internal_listing = Vec::new();
    for (name, calls) in &after {
        let delta = calls - before.get(name).copied().unwrap_or(0);
        // `info` and `monitor` are this bench's own admin connections.
        if delta == 0 || name == "info" || name == "monitor" {
            continue;
        }
        let per_call = format!("{name}={:.2}", delta as f64 / n);
        if SCRIPT_INTERNAL_COMMANDS.contains(&name.as_str()) {
            internal_listing.push(per_call);
        } else {
            client_commands += delta;
            client_listing.push(per_call);
        }
    }
    let round_trips = client_commands as f64 / n;
    println!(
        "round trips per READY invocation (INFO commandstats deltas over {ROUND_TRIP_SAMPLE} invocations): {:.2} [{}]",
        round_trips,
        client_listing.join(" ")
    );
    println!(
        "  run inside the scripts, not round trips: {}",
        internal_listing.join(" ")
    );
    let monitored: Vec<String> = seen
        .client
        .iter()
        .map(|(name, count)| format!("{name}={:.2}", *count as f64 / n))
        .collect();
    println!(
        "  MONITOR cross-check, commands sent by clients per invocation: {}",
        monitored.join(" ")
    );

    // Memory per READY record.
    let memory_run = RunId::new(unique_id("mem"))?;
    let used_before = admin.used_memory().await?;
    let ctx = RunContext::new(memory_run.clone());
    for i in 0..MEMORY_SAMPLE {
        let outcome = boundary
            .invoke(&ctx, envelope(&memory_run, &format!("c{i}"), &request_json))
            .await;
        if outcome.control.status != InvocationStatus::Ready {
            return Err(format!(
                "memory sample call failed: {:?}",
                outcome.control.error_code
            )
            .into());
        }
    }
    let used_after = admin.used_memory().await?;
    let record_key =
        store_redis::testing::record_key(store.key_prefix(), memory_run.as_str(), "c0");
    let record_bytes = admin.memory_usage(&record_key).await?.unwrap_or(0);
    let index_keys = store_redis::testing::run_keys(store.key_prefix(), memory_run.as_str());
    let mut index_bytes = 0;
    for key in &index_keys {
        index_bytes += admin.memory_usage(key).await?.unwrap_or(0);
    }
    let sample = &prebuilt;
    println!(
        "memory per READY record (request {} B, scope {} B, raw {} B, result {} B): \
         MEMORY USAGE {record_bytes} B for the record hash; run keys {index_bytes} B for \
         {MEMORY_SAMPLE} records; used_memory grew {} B per record",
        sample.request_json.len(),
        sample.scope_json.len(),
        sample.raw_json.len(),
        sample.result_json.len(),
        used_after.saturating_sub(used_before) / MEMORY_SAMPLE as u64,
    );

    // Throughput: boundary vs bare scripts, in alternating chunks.
    let mut ratios = Vec::new();
    for (concurrency, chunk) in [(1_usize, 400_usize), (16, 1600)] {
        let (mut boundary_time, mut baseline_time) = (Duration::ZERO, Duration::ZERO);
        let mut count = 0;
        for _ in 0..CHUNKS {
            baseline_time += run_baseline(&store, &prebuilt, concurrency, chunk).await?;
            boundary_time += run_boundary(&boundary, &request_json, concurrency, chunk).await?;
            count += chunk / concurrency * concurrency;
        }
        let boundary_rate = rate(count, boundary_time);
        let baseline_rate = rate(count, baseline_time);
        let ratio = boundary_rate / baseline_rate;
        println!(
            "concurrency {concurrency:>2}: boundary {boundary_rate:>8.0} inv/s, baseline (bare create + finalize scripts) {baseline_rate:>8.0} inv/s, ratio {ratio:.2} ({count} invocations each, {CHUNKS} alternating chunks)"
        );
        ratios.push(ratio);
    }

    println!(
        "round_trips={} ratio_c1={:.2} ratio_c16={:.2}",
        format_round_trips(round_trips),
        ratios[0],
        ratios[1]
    );
    drop(server);
    Ok(())
}

fn format_round_trips(value: f64) -> String {
    if (value - value.round()).abs() < f64::EPSILON {
        format!("{value:.0}")
    } else {
        format!("{value:.2}")
    }
}

fn envelope(run: &RunId, id: &str, arguments: &str) -> ToolEnvelope {
    ToolEnvelope::new(id, run.as_str(), TOOL, arguments)
}

/// `total` READY invocations through the boundary by `concurrency` tasks;
/// the time they took.
async fn run_boundary(
    boundary: &ToolBoundary,
    arguments: &str,
    concurrency: usize,
    total: usize,
) -> Outcome<Duration> {
    let run = RunId::new(unique_id("bench"))?;
    let ctx = RunContext::new(run.clone());
    let per_task = total / concurrency;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for task in 0..concurrency {
        let (boundary, ctx, run, arguments) = (
            boundary.clone(),
            ctx.clone(),
            run.clone(),
            arguments.to_owned(),
        );
        tasks.push(tokio::spawn(async move {
            for i in 0..per_task {
                let outcome = boundary
                    .invoke(&ctx, envelope(&run, &format!("t{task}-{i}"), &arguments))
                    .await;
                if outcome.control.status != InvocationStatus::Ready {
                    return Err(format!(
                        "invocation failed: {:?}",
                        outcome.control.error_code
                    ));
                }
            }
            Ok(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    Ok(started.elapsed())
}

/// The same count of bare create + finalize script calls with prebuilt
/// payloads; the time they took.
async fn run_baseline(
    store: &RedisStore,
    prebuilt: &Arc<Prebuilt>,
    concurrency: usize,
    total: usize,
) -> Outcome<Duration> {
    let run = RunId::new(unique_id("base"))?;
    let per_task = total / concurrency;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for task in 0..concurrency {
        let (store, prebuilt, run) = (store.clone(), Arc::clone(prebuilt), run.clone());
        tasks.push(tokio::spawn(async move {
            for i in 0..per_task {
                let key = InvocationKey::new(run.clone(), ToolCallId::new(format!("t{task}-{i}"))?);
                store
                    .create(NewInvocation {
                        key: key.clone(),
                        tool_name: TOOL.to_owned(),
                        request_json: prebuilt.request_json.clone(),
                        scope_json: prebuilt.scope_json.clone(),
                        scope_fingerprint: prebuilt.fingerprint,
                        created_at: SystemClock.now(),
                        ttl: invocation_core::DEFAULT_RECORD_TTL,
                        budgets: Budgets::default(),
                        claim_scope: false,
                        run: invocation_core::RunTerms::default(),
                        attempt: 1,
                    })
                    .await?;
                store
                    .finalize(
                        &key,
                        Finalization::Ready {
                            evidence: ReadyEvidence::Found,
                            raw_json: prebuilt.raw_json.clone(),
                            agent_result_json: prebuilt.result_json.clone(),
                            replayed_from: None,
                            finished_at: SystemClock.now(),
                        },
                    )
                    .await?;
            }
            Ok::<(), Box<dyn Error + Send + Sync>>(())
        }));
    }
    for task in tasks {
        task.await?.map_err(|e| -> Box<dyn Error> { e })?;
    }
    Ok(started.elapsed())
}

fn rate(count: usize, elapsed: Duration) -> f64 {
    count as f64 / elapsed.as_secs_f64().max(f64::MIN_POSITIVE)
}
