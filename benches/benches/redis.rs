//! `cargo xtask bench redis`: the Redis store's cost per READY invocation,
//! against baselines measured in the same run.
//!
//! Spawns its own `redis-server` (and a 3-node cluster) on loopback and
//! prints, in one run:
//! - round trips per READY invocation, from `INFO commandstats` deltas
//!   (commands the scripts run inside Redis are listed apart: they are not
//!   round trips), cross-checked with `MONITOR`;
//! - memory per READY record (`MEMORY USAGE`, and `used_memory` growth
//!   including the run's index keys);
//! - invocations per second through the `ToolBoundary` at 1, 16, 64 and 256
//!   in flight with a 1 KiB raw payload, and the baseline with the same
//!   client: the bare create and finalize scripts (`InvocationStore` calls
//!   with prebuilt payloads, no boundary logic); the ratio boundary / bare;
//! - the physical anchor: `redis-benchmark` (redis-tools) against the same
//!   server, sending `EVALSHA` of the same two scripts with the same keys and
//!   arguments (built by `store_redis::wire`, the store's own call builder),
//!   1, 16 and 64 clients, no pipelining; create and finalize rates, the
//!   pair rate, and boundary / redis-benchmark (what a finalize did is
//!   counted on the records: READY ones among those it draws from);
//!
//!   each level runs `ACI_BENCH_ROUNDS` rounds (default 5), every row once
//!   a round in a rotated order; a rate is the median over the rounds, a
//!   ratio the median of the per-round ratios (lowest-highest in brackets),
//!   so that a slow spell of the machine moves both sides of a ratio;
//! - a 3-node cluster against the single node, 64 in flight, each caller on
//!   its own run (so calls spread over the nodes by hash tag), with the
//!   client and per-node server CPU per call for the scaling on paper.
//!
//! The last line is machine-readable:
//! `round_trips=2 ratio_c1=… ratio_c16=… ratio_c64=… anchor_c1=… anchor_c16=… anchor_c64=… cluster_c64=…`
//! (ratio = boundary / bare scripts, anchor = boundary / redis-benchmark,
//! cluster = cluster / single node at 64 in flight over many runs).
//!
//! Run: `cargo xtask bench redis` (`ACI_BENCH_ROUNDS=N` for more or fewer
//! rounds). Bounded: a few minutes on 2 cores.

use std::error::Error;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use aci_contracts::{InvocationStatus, RunId, ToolCallId};
use invocation_core::fingerprint::canonical_json;
use invocation_core::testing::fake::{self, FakeExecutor, FakeRaw, FakeRequest, Mode};
use invocation_core::{
    Budgets, Clock, Finalization, InvocationKey, InvocationStore, NewInvocation, ReadyEvidence,
    RunContext, ScopeFingerprint, SystemClock, ToolBoundary, ToolEnvelope,
};
use store_redis::testing::{
    Admin, RedisCluster, RedisServer, SCRIPT_INTERNAL_COMMANDS, monitor_port, record_key, unique_id,
};
use store_redis::{RedisConfig, RedisStore, wire};

type Outcome<T> = Result<T, Box<dyn Error>>;

const TOOL: &str = "bench_lookup";
const PAYLOAD_BYTES: usize = 1024;
/// Multiplexed connections per store: the default, or
/// `ACI_BENCH_POOL_SIZE` to compare sizes.
fn pool_size() -> usize {
    std::env::var("ACI_BENCH_POOL_SIZE")
        .ok()
        .and_then(|size| size.parse().ok())
        .unwrap_or(store_redis::DEFAULT_POOL_SIZE)
}
/// Run and tool budgets: checked by every create, never reached.
const BUDGET: u32 = 1_000_000_000;
const ROUND_TRIP_SAMPLE: usize = 200;
const MEMORY_SAMPLE: usize = 1000;
/// Rounds per level (`ACI_BENCH_ROUNDS`): every row once a round, in a
/// rotated order, so that all rows see the same machine load; a figure is
/// the median over the rounds, a ratio the median of the per-round ratios.
const DEFAULT_ROUNDS: usize = 5;
/// (in flight, invocations per row and round).
const LEVELS: [(usize, usize); 4] = [(1, 1000), (16, 3000), (64, 5120), (256, 8192)];
/// In-flight levels with a redis-benchmark anchor (as many clients).
const ANCHOR_LEVELS: [usize; 3] = [1, 16, 64];
/// Finalize draws a random record among this many times its request count
/// in all rounds, so few draws hit a record already finalized (the share is
/// printed).
const FINALIZE_SPREAD: usize = 8;
/// The 12 digits redis-benchmark writes for `__rand_int__`.
const TEMPLATE_ID: &str = "000000000000";
const RAND: &str = "__rand_int__";
const CLUSTER_NODES: usize = 3;
const CLUSTER_IN_FLIGHT: usize = 64;
const CLUSTER_CHUNK: usize = 3200;
const CLUSTER_CHUNKS: usize = 6;

/// What the baseline sends: the same texts the boundary would, prebuilt.
struct Prebuilt {
    request_json: String,
    scope_json: String,
    fingerprint: ScopeFingerprint,
    raw_json: String,
    result_json: String,
}

impl Prebuilt {
    fn new_invocation(&self, key: InvocationKey) -> NewInvocation {
        NewInvocation {
            key,
            tool_name: TOOL.to_owned(),
            request_json: self.request_json.clone(),
            scope_json: self.scope_json.clone(),
            scope_fingerprint: self.fingerprint,
            created_at: SystemClock.now(),
            ttl: invocation_core::DEFAULT_RECORD_TTL,
            budgets: Budgets {
                run: Some(BUDGET),
                tool: Some(BUDGET),
            },
            claim_scope: false,
            run: invocation_core::RunTerms::default(),
            attempt: 1,
        }
    }

    fn ready(&self) -> Finalization {
        Finalization::Ready {
            evidence: ReadyEvidence::Found,
            raw_json: self.raw_json.clone(),
            agent_result_json: self.result_json.clone(),
            redactions: Default::default(),
            replayed_from: None,
            finished_at: SystemClock.now(),
            timings: None,
        }
    }
}

/// One store and the boundary over it.
struct Rig {
    store: RedisStore,
    boundary: ToolBoundary,
}

impl Rig {
    fn new(config: RedisConfig, payload: &Arc<str>) -> Outcome<Self> {
        let store = RedisStore::new(config.pool_size(pool_size()))?;
        // The fake tool, returning `payload` (shared, never copied) as its raw padding.
        let tool = fake::fake_tool(TOOL, FakeExecutor::new().with_fill(Arc::clone(payload)));
        let boundary = ToolBoundary::builder(Arc::new(store.clone()))
            .tool(tool)
            .build()?;
        Ok(Self { store, boundary })
    }
}

fn main() -> Outcome<()> {
    if !aci_bench::full_run() {
        return Ok(());
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(bench())
}

async fn bench() -> Outcome<()> {
    let started = Instant::now();
    let server = RedisServer::spawn()?;
    let mut admin = Admin::connect(&server.url()).await?;
    // A port another process's server took first would answer PING too.
    let serving = info(&server.url(), "server")
        .await?
        .lines()
        .find_map(|line| line.strip_prefix("process_id:"))
        .and_then(|pid| pid.trim().parse::<u32>().ok());
    if serving.is_none() || serving != server.pid() {
        return Err("another redis-server answers on the spawned server's port".into());
    }
    let payload: Arc<str> = "x".repeat(PAYLOAD_BYTES).into();
    let rig = Rig::new(RedisConfig::single(server.url()), &payload)?;
    let query = "connection timeout in checkout";
    let request = FakeRequest::new(Mode::Found, query);
    let request_json = request.to_arguments();
    let scope = request.to_value();
    let prebuilt = Arc::new(Prebuilt {
        request_json: request_json.clone(),
        scope_json: canonical_json(&scope),
        fingerprint: ScopeFingerprint::of(TOOL, &scope),
        raw_json: serde_json::to_string(&FakeRaw {
            secret: fake::SENTINEL.to_owned(),
            fill: Arc::clone(&payload),
        })?,
        result_json: serde_json::to_string(&fake::found_result(
            &ToolCallId::new("c0")?,
            query,
            &format!("evidence about {query}"),
        ))?,
    });

    println!(
        "redis bench: redis-server {} on 127.0.0.1, {} multiplexed connections per store, raw payload {PAYLOAD_BYTES} B, {} CPUs",
        admin.server_version().await?,
        pool_size(),
        std::thread::available_parallelism().map_or(0, usize::from),
    );

    // Warm up: open every connection and cache both scripts.
    run_boundary(&rig.boundary, &request_json, 16, 400, false).await?;
    run_baseline(&rig.store, &prebuilt, 16, 400).await?;

    round_trips_and_memory(&mut admin, &server, &rig, &prebuilt, &request_json).await?;
    let round_trips = measured_round_trips(&mut admin, &server, &rig, &request_json).await?;

    // Throughput: the boundary, the bare scripts and redis-benchmark, one
    // row after another in a rotated order, round after round, so that all
    // three see the same machine load and none is always first or last.
    let rounds = rounds();
    let mut anchor = Anchor::prepare(&server, &rig.store, &prebuilt).await?;
    let mut ratios = Vec::new();
    let mut anchor_ratios = Vec::new();
    for (in_flight, chunk) in LEVELS {
        let anchored = ANCHOR_LEVELS.contains(&in_flight);
        let mut level = if anchored {
            Some(anchor.level(in_flight, chunk, rounds).await?)
        } else {
            None
        };
        let rows = if anchored { 3 } else { 2 };
        let mut boundary = Vec::new();
        let mut baseline = Vec::new();
        let mut benchmark = Vec::new();
        for round in 0..rounds {
            for row in aci_bench::rotated(rows, round) {
                match row {
                    0 => {
                        let cpu = Cpu::now(&server).await?;
                        let time = run_baseline(&rig.store, &prebuilt, in_flight, chunk).await?;
                        baseline.push(Sample::new(chunk, time, cpu.since(&server).await?));
                    }
                    1 => {
                        let cpu = Cpu::now(&server).await?;
                        let time =
                            run_boundary(&rig.boundary, &request_json, in_flight, chunk, false)
                                .await?;
                        boundary.push(Sample::new(chunk, time, cpu.since(&server).await?));
                    }
                    _ => {
                        if let Some(level) = &mut level {
                            benchmark.push(anchor.run(level, chunk, &server).await?);
                        }
                    }
                }
            }
        }
        let per_round = |other: &dyn Fn(usize) -> f64| -> Vec<f64> {
            (0..rounds)
                .map(|round| boundary[round].rate / other(round))
                .collect()
        };
        let ratio = aci_bench::spread(&per_round(&|round| baseline[round].rate));
        println!(
            "in flight {in_flight:>3}: boundary {:>7.0} inv/s, bare create + finalize scripts {:>7.0} inv/s, ratio {} ({chunk} invocations per row and round, {rounds} rounds in rotated order)",
            Sample::median(&boundary, |s| s.rate),
            Sample::median(&baseline, |s| s.rate),
            format_spread(ratio),
        );
        println!(
            "  CPU per invocation, client / server: boundary {}, bare scripts {}",
            Sample::cpu(&boundary),
            Sample::cpu(&baseline),
        );
        ratios.push((in_flight, ratio.0));
        if anchored {
            let anchor_ratio = aci_bench::spread(&per_round(&|round| benchmark[round].pair_rate()));
            let median = |figure: fn(&BenchmarkChunk) -> f64| {
                aci_bench::median(benchmark.iter().map(figure).collect())
            };
            println!(
                "  redis-benchmark, {in_flight} clients, same script calls: create {:>7.0}/s, finalize {:>7.0}/s ({:.1}% of finalize draws hit a finalized record), pairs {:>7.0}/s, server CPU per pair {:.1} us; boundary / redis-benchmark {}",
                median(|c| c.create_rate),
                median(|c| c.finalize_rate),
                median(BenchmarkChunk::repeat_share) * 100.0,
                median(BenchmarkChunk::pair_rate),
                median(BenchmarkChunk::server_us_per_pair),
                format_spread(anchor_ratio),
            );
            anchor_ratios.push((in_flight, anchor_ratio.0));
        }
        anchor.flush().await?;
    }

    let cluster_ratio = cluster(&server, &rig, &payload, &request_json).await?;

    let pick = |list: &[(usize, f64)], at: usize| {
        list.iter()
            .find(|(in_flight, _)| *in_flight == at)
            .map_or(f64::NAN, |(_, value)| *value)
    };
    println!("bench took {:.0} s", started.elapsed().as_secs_f64());
    println!(
        "round_trips={} ratio_c1={:.2} ratio_c16={:.2} ratio_c64={:.2} anchor_c1={:.2} anchor_c16={:.2} anchor_c64={:.2} cluster_c64={:.2}",
        format_round_trips(round_trips),
        pick(&ratios, 1),
        pick(&ratios, 16),
        pick(&ratios, 64),
        pick(&anchor_ratios, 1),
        pick(&anchor_ratios, 16),
        pick(&anchor_ratios, 64),
        cluster_ratio,
    );
    drop(server);
    Ok(())
}

/// Memory per READY record.
async fn round_trips_and_memory(
    admin: &mut Admin,
    _server: &RedisServer,
    rig: &Rig,
    prebuilt: &Prebuilt,
    request_json: &str,
) -> Outcome<()> {
    let memory_run = RunId::new(unique_id("mem"))?;
    let used_before = admin.used_memory().await?;
    let ctx = RunContext::new(
        memory_run.clone(),
        invocation_core::CallPolicy::AUTHORIZED_READ_ONLY,
    );
    for i in 0..MEMORY_SAMPLE {
        let outcome = rig
            .boundary
            .invoke(&ctx, envelope(&memory_run, &format!("c{i}"), request_json))
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
    let prefix = rig.store.key_prefix();
    let record_bytes = admin
        .memory_usage(&record_key(prefix, memory_run.as_str(), "c0"))
        .await?
        .unwrap_or(0);
    let mut index_bytes = 0;
    for key in &store_redis::testing::run_keys(prefix, memory_run.as_str()) {
        index_bytes += admin.memory_usage(key).await?.unwrap_or(0);
    }
    println!(
        "memory per READY record (request {} B, scope {} B, raw {} B, result {} B): \
         MEMORY USAGE {record_bytes} B for the record hash; run keys {index_bytes} B for \
         {MEMORY_SAMPLE} records; used_memory grew {} B per record",
        prebuilt.request_json.len(),
        prebuilt.scope_json.len(),
        prebuilt.raw_json.len(),
        prebuilt.result_json.len(),
        used_after.saturating_sub(used_before) / MEMORY_SAMPLE as u64,
    );
    Ok(())
}

/// Round trips: commandstats deltas, cross-checked with MONITOR.
async fn measured_round_trips(
    admin: &mut Admin,
    server: &RedisServer,
    rig: &Rig,
    request_json: &str,
) -> Outcome<f64> {
    let before = admin.command_calls().await?;
    let monitor = monitor_port(server.port())?;
    run_boundary(&rig.boundary, request_json, 1, ROUND_TRIP_SAMPLE, false).await?;
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
    Ok(round_trips)
}

/// One row's round: its rate and CPU per invocation.
struct Sample {
    rate: f64,
    /// CPU seconds per invocation, client and server.
    client_cpu: f64,
    server_cpu: f64,
}

impl Sample {
    fn new(count: usize, time: Duration, (client, server): (f64, f64)) -> Self {
        let per = |seconds: f64| seconds / count.max(1) as f64;
        Self {
            rate: rate(count, time),
            client_cpu: per(client),
            server_cpu: per(server),
        }
    }

    /// The median over the rounds of one figure.
    fn median(samples: &[Self], figure: fn(&Self) -> f64) -> f64 {
        aci_bench::median(samples.iter().map(figure).collect())
    }

    /// Median CPU per invocation, client and server, in microseconds.
    fn cpu(samples: &[Self]) -> String {
        format!(
            "{:.1} / {:.1} us",
            Self::median(samples, |s| s.client_cpu) * 1e6,
            Self::median(samples, |s| s.server_cpu) * 1e6,
        )
    }
}

/// `median (lowest-highest)`.
fn format_spread((median, lowest, highest): (f64, f64, f64)) -> String {
    format!("{median:.2} ({lowest:.2}-{highest:.2})")
}

/// Rounds per level: `ACI_BENCH_ROUNDS`, default [`DEFAULT_ROUNDS`].
fn rounds() -> usize {
    std::env::var("ACI_BENCH_ROUNDS")
        .ok()
        .and_then(|rounds| rounds.parse().ok())
        .filter(|rounds| *rounds > 0)
        .unwrap_or(DEFAULT_ROUNDS)
}

/// CPU used so far by this process and by the server.
struct Cpu {
    client: f64,
    server: f64,
}

impl Cpu {
    async fn now(server: &RedisServer) -> Outcome<Self> {
        Ok(Self {
            client: process_cpu_seconds()?,
            server: server_cpu(&server.url()).await?,
        })
    }

    /// (client, server) CPU seconds since `self`.
    async fn since(&self, server: &RedisServer) -> Outcome<(f64, f64)> {
        let now = Self::now(server).await?;
        Ok((now.client - self.client, now.server - self.server))
    }
}

/// One round of redis-benchmark: `requests` creates, then as many finalizes.
struct BenchmarkChunk {
    requests: usize,
    create_rate: f64,
    finalize_rate: f64,
    /// Records the finalizes turned from PROJECTING to READY, counted on
    /// the server.
    finalized: u64,
    server_cpu: f64,
}

impl BenchmarkChunk {
    /// create + finalize pairs per second: one of each, back to back.
    fn pair_rate(&self) -> f64 {
        1.0 / (1.0 / self.create_rate + 1.0 / self.finalize_rate)
    }

    fn repeat_share(&self) -> f64 {
        1.0 - self.finalized as f64 / self.requests.max(1) as f64
    }

    fn server_us_per_pair(&self) -> f64 {
        self.server_cpu * 1e6 / self.requests.max(1) as f64
    }
}

/// redis-benchmark with the store's own script calls (`store_redis::wire`):
/// create on a fresh random record key per request; finalize on a random
/// record among `FINALIZE_SPREAD` times as many PROJECTING records, each a
/// `COPY` of one record the store created (same fields, sizes, encoding and
/// TTL).
///
/// What a finalize did is counted on the records themselves (how many of
/// the level's records are READY, by [`COUNT_READY`]), not from `INFO
/// commandstats`: a statistic any client can reset (`CONFIG RESETSTAT`) and
/// any other traffic moves.
struct Anchor {
    binary: std::path::PathBuf,
    conn: redis::aio::MultiplexedConnection,
    prefix: String,
    store: RedisStore,
    prebuilt: Arc<Prebuilt>,
}

/// Counts the READY records `ARGV[1] .. <12 digits i> .. ARGV[2]` for i in
/// `0..ARGV[3]`: the finalize keyspace of one level, read on the server in
/// one call (the keys are spelled in the script, so single node only).
const COUNT_READY: &str = r"
local ready = 0
for i = 0, tonumber(ARGV[3]) - 1 do
  if redis.call('HGET', ARGV[1] .. string.format('%012d', i) .. ARGV[2], 'status') == 'READY' then
    ready = ready + 1
  end
end
return ready
";

/// One client count's prepared calls.
struct AnchorLevel {
    clients: usize,
    create: Vec<String>,
    create_index: String,
    finalize: Vec<String>,
    keyspace: usize,
    /// The finalize keyspace's record keys around the 12 digits.
    finalize_key: (String, String),
    /// READY records of the keyspace after the last round.
    ready: u64,
}

impl Anchor {
    async fn prepare(
        server: &RedisServer,
        store: &RedisStore,
        prebuilt: &Arc<Prebuilt>,
    ) -> Outcome<Self> {
        let binary = which("redis-benchmark")
            .ok_or("redis-benchmark is needed for the anchor (apt-get install redis-tools)")?;
        let mut anchor = Self {
            binary,
            conn: side_connection(&server.url()).await?,
            prefix: store.key_prefix().to_owned(),
            store: store.clone(),
            prebuilt: Arc::clone(prebuilt),
        };
        anchor.load_scripts().await?;
        Ok(anchor)
    }

    /// Caches both scripts: redis-benchmark sends `EVALSHA` only.
    async fn load_scripts(&mut self) -> Outcome<()> {
        for script in wire::scripts() {
            let sha: String = redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(script.source)
                .query_async(&mut self.conn)
                .await?;
            if sha != script.sha {
                return Err(format!("the {} script's SHA differs", script.name).into());
            }
        }
        Ok(())
    }

    /// The calls for `clients` clients and `rounds` rounds of `chunk`
    /// requests, and the PROJECTING records finalize draws from.
    async fn level(&mut self, clients: usize, chunk: usize, rounds: usize) -> Outcome<AnchorLevel> {
        let prefix = self.prefix.clone();
        let run = RunId::new(unique_id("anchor"))?;
        let template = InvocationKey::new(run.clone(), ToolCallId::new(TEMPLATE_ID)?);
        let create = randomized(
            wire::create_call(&prefix, &self.prebuilt.new_invocation(template)),
            &record_key(&prefix, run.as_str(), TEMPLATE_ID),
            &record_key(&prefix, run.as_str(), RAND),
        )?;
        let create_index = store_redis::testing::run_keys(&prefix, run.as_str())[1].clone();

        let run = RunId::new(unique_id("anchor"))?;
        let source = InvocationKey::new(run.clone(), ToolCallId::new("source")?);
        self.store
            .create(self.prebuilt.new_invocation(source))
            .await?;
        let keyspace = chunk * rounds * FINALIZE_SPREAD;
        let source_key = record_key(&prefix, run.as_str(), "source");
        for batch in (0..keyspace).collect::<Vec<_>>().chunks(2000) {
            let mut pipe = redis::pipe();
            for i in batch {
                pipe.cmd("COPY")
                    .arg(&source_key)
                    .arg(record_key(&prefix, run.as_str(), &format!("{i:012}")))
                    .ignore();
            }
            pipe.query_async::<()>(&mut self.conn).await?;
        }
        let template_key = record_key(&prefix, run.as_str(), TEMPLATE_ID);
        let finalize_key = template_key
            .split_once(TEMPLATE_ID)
            .map(|(head, tail)| (head.to_owned(), tail.to_owned()))
            .ok_or("the record key does not hold the tool call id")?;
        let template = InvocationKey::new(run.clone(), ToolCallId::new(TEMPLATE_ID)?);
        let finalize = randomized(
            wire::finalize_call(&prefix, &template, &self.prebuilt.ready()),
            &template_key,
            &record_key(&prefix, run.as_str(), RAND),
        )?;
        let mut level = AnchorLevel {
            clients,
            create,
            create_index,
            finalize,
            keyspace,
            finalize_key,
            ready: 0,
        };
        level.ready = self.count_ready(&level).await?;
        if level.ready != 0 {
            return Err(format!("{} of the fresh records are READY", level.ready).into());
        }
        Ok(level)
    }

    /// READY records in the level's finalize keyspace.
    async fn count_ready(&mut self, level: &AnchorLevel) -> Outcome<u64> {
        Ok(redis::cmd("EVAL")
            .arg(COUNT_READY)
            .arg(0)
            .arg(&level.finalize_key.0)
            .arg(&level.finalize_key.1)
            .arg(level.keyspace)
            .query_async(&mut self.conn)
            .await?)
    }

    /// One round: `requests` creates, then as many finalizes.
    async fn run(
        &mut self,
        level: &mut AnchorLevel,
        requests: usize,
        server: &RedisServer,
    ) -> Outcome<BenchmarkChunk> {
        self.load_scripts().await?;
        let cpu = server_cpu(&server.url()).await?;
        let indexed: u64 = redis::cmd("LLEN")
            .arg(&level.create_index)
            .query_async(&mut self.conn)
            .await?;
        let create = redis_benchmark(
            &self.binary,
            server.port(),
            level.clients,
            requests,
            1_000_000_000,
            &level.create,
        )?;
        let created = redis::cmd("LLEN")
            .arg(&level.create_index)
            .query_async::<u64>(&mut self.conn)
            .await?
            - indexed;
        if (created as f64) < 0.95 * requests as f64 {
            return Err(create.shortfall(&format!("created {created} of {requests} records")));
        }
        let finalize = redis_benchmark(
            &self.binary,
            server.port(),
            level.clients,
            requests,
            level.keyspace,
            &level.finalize,
        )?;
        let server_cpu = server_cpu(&server.url()).await? - cpu;
        let ready = self.count_ready(level).await?;
        let finalized = ready.saturating_sub(level.ready);
        level.ready = ready;
        // A draw hits an already finalized record at most about
        // 1 / FINALIZE_SPREAD of the time (in the last round).
        if (finalized as f64) < 0.8 * requests as f64 {
            return Err(finalize.shortfall(&format!(
                "finalized {finalized} of {requests} records ({ready} of {} READY)",
                level.keyspace
            )));
        }
        Ok(BenchmarkChunk {
            requests,
            create_rate: create.rate,
            finalize_rate: finalize.rate,
            finalized,
            server_cpu,
        })
    }

    /// Frees the server's memory between levels (scripts stay cached).
    async fn flush(&mut self) -> Outcome<()> {
        redis::cmd("FLUSHALL")
            .query_async::<()>(&mut self.conn)
            .await?;
        Ok(())
    }
}

/// `call` with the one word `exact` replaced by `with`.
fn randomized(call: Vec<Vec<u8>>, exact: &str, with: &str) -> Outcome<Vec<String>> {
    let mut words = call
        .into_iter()
        .map(String::from_utf8)
        .collect::<Result<Vec<_>, _>>()?;
    let hits: Vec<usize> = words
        .iter()
        .enumerate()
        .filter(|(_, word)| word.as_str() == exact)
        .map(|(i, _)| i)
        .collect();
    let [index] = hits[..] else {
        return Err(format!("the record key appears {} times in the call", hits.len()).into());
    };
    words[index] = with.to_owned();
    Ok(words)
}

/// What one redis-benchmark run reported.
struct BenchmarkRun {
    /// Requests per second.
    rate: f64,
}

impl BenchmarkRun {
    /// The error for a run that did less than asked (redis-benchmark stops
    /// at the first error reply, so one that finished saw none).
    fn shortfall(&self, what: &str) -> Box<dyn Error> {
        format!("redis-benchmark {what} with no error reply").into()
    }
}

/// Runs redis-benchmark quietly; its rate. It exits at the server's first
/// error reply, which the error then carries.
fn redis_benchmark(
    binary: &std::path::Path,
    port: u16,
    clients: usize,
    requests: usize,
    keyspace: usize,
    words: &[String],
) -> Outcome<BenchmarkRun> {
    let output = Command::new(binary)
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(["-c", &clients.to_string(), "-n", &requests.to_string()])
        .args(["-r", &keyspace.to_string(), "-P", "1", "-q"])
        .args(words)
        .stdin(Stdio::null())
        .output()?;
    let text = String::from_utf8_lossy(&output.stdout);
    let rate = text
        .split(['\r', '\n'])
        .rev()
        .find_map(|line| line.split_once(" requests per second"))
        .and_then(|(head, _)| head.rsplit(' ').next())
        .and_then(|number| number.parse::<f64>().ok());
    match rate {
        Some(rate) if output.status.success() => Ok(BenchmarkRun { rate }),
        _ => {
            let stderr = String::from_utf8_lossy(&output.stderr);
            let first = stderr.lines().find(|line| !line.trim().is_empty());
            Err(format!(
                "redis-benchmark printed no rate ({}): {}",
                output.status,
                first.unwrap_or("nothing on stderr")
            )
            .into())
        }
    }
}

fn which(name: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join(name))
            .find(|candidate| candidate.is_file())
    })
}

/// The 3-node cluster against the single node, 64 in flight, each caller
/// on its own run; CPU per call on both sides. Returns cluster / single.
async fn cluster(
    server: &RedisServer,
    single: &Rig,
    payload: &Arc<str>,
    request_json: &str,
) -> Outcome<f64> {
    let cluster = RedisCluster::spawn(CLUSTER_NODES)?;
    let rig = Rig::new(cluster.config(), payload)?;
    run_boundary(&rig.boundary, request_json, CLUSTER_IN_FLIGHT, 1600, true).await?;
    run_boundary(
        &single.boundary,
        request_json,
        CLUSTER_IN_FLIGHT,
        1600,
        true,
    )
    .await?;
    let single_cpu_before = server_cpu(&server.url()).await?;
    let nodes: Vec<String> = cluster.nodes().iter().map(RedisServer::url).collect();
    let mut nodes_before = Vec::new();
    for url in &nodes {
        nodes_before.push((server_cpu(url).await?, evalsha_calls(url).await?));
    }
    let (mut single_time, mut cluster_time) = (Duration::ZERO, Duration::ZERO);
    let (mut single_client, mut cluster_client) = (0.0, 0.0);
    let mut count = 0;
    for _ in 0..CLUSTER_CHUNKS {
        let cpu = process_cpu_seconds()?;
        single_time += run_boundary(
            &single.boundary,
            request_json,
            CLUSTER_IN_FLIGHT,
            CLUSTER_CHUNK,
            true,
        )
        .await?;
        let middle = process_cpu_seconds()?;
        cluster_time += run_boundary(
            &rig.boundary,
            request_json,
            CLUSTER_IN_FLIGHT,
            CLUSTER_CHUNK,
            true,
        )
        .await?;
        let end = process_cpu_seconds()?;
        single_client += middle - cpu;
        cluster_client += end - middle;
        count += CLUSTER_CHUNK;
    }
    let single_rate = rate(count, single_time);
    let cluster_rate = rate(count, cluster_time);
    let ratio = cluster_rate / single_rate;
    let per_call_us = |seconds: f64| seconds * 1e6 / count as f64;
    let single_server = server_cpu(&server.url()).await? - single_cpu_before;
    println!(
        "cluster of {CLUSTER_NODES} on this machine, {CLUSTER_IN_FLIGHT} in flight, each caller its own run: cluster {cluster_rate:>7.0} inv/s, single node {single_rate:>7.0} inv/s, cluster / single {ratio:.2} ({count} invocations each, {CLUSTER_CHUNKS} alternating chunks)"
    );
    println!(
        "  CPU per invocation: client {:.1} us (single) / {:.1} us (cluster); server {:.1} us (single node)",
        per_call_us(single_client),
        per_call_us(cluster_client),
        per_call_us(single_server),
    );
    let mut node_lines = Vec::new();
    let mut cluster_server = 0.0;
    for (url, (cpu_before, calls_before)) in nodes.iter().zip(nodes_before) {
        let cpu = server_cpu(url).await? - cpu_before;
        let calls = evalsha_calls(url).await? - calls_before;
        cluster_server += cpu;
        node_lines.push(format!(
            "{:.0}% of calls, {:.1} us CPU per call",
            calls as f64 / 2.0 / count as f64 * 100.0,
            cpu * 1e6 / (calls as f64 / 2.0).max(1.0),
        ));
    }
    println!("  per node: {}", node_lines.join("; "));
    let server_us = per_call_us(cluster_server);
    let client_us = per_call_us(cluster_client);
    println!(
        "  on paper, one core per node and enough client cores: the nodes serve {:.0} inv/s ({CLUSTER_NODES} x 1 s / {server_us:.1} us), each client core {:.0} inv/s (1 s / {client_us:.1} us)",
        CLUSTER_NODES as f64 * 1e6 / server_us,
        1e6 / client_us,
    );
    Ok(ratio)
}

/// A node's `used_cpu_sys` + `used_cpu_user`, in seconds.
async fn server_cpu(url: &str) -> Outcome<f64> {
    let info = info(url, "cpu").await?;
    let field = |name: &str| {
        info.lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|value| value.trim().parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    Ok(field("used_cpu_sys:") + field("used_cpu_user:"))
}

async fn evalsha_calls(url: &str) -> Outcome<u64> {
    let info = info(url, "commandstats").await?;
    Ok(store_redis::testing::parse_command_calls(&info)
        .get("evalsha")
        .copied()
        .unwrap_or(0))
}

async fn info(url: &str, section: &str) -> Outcome<String> {
    let mut conn = side_connection(url).await?;
    Ok(redis::cmd("INFO")
        .arg(section)
        .query_async(&mut conn)
        .await?)
}

/// A connection for the bench's own bulk work (`COPY` batches,
/// `FLUSHALL`): no 500 ms driver default on a busy machine.
async fn side_connection(url: &str) -> Outcome<redis::aio::MultiplexedConnection> {
    let config =
        redis::AsyncConnectionConfig::new().set_response_timeout(Some(Duration::from_secs(30)));
    Ok(redis::Client::open(url)?
        .get_multiplexed_async_connection_with_config(&config)
        .await?)
}

/// This process's user + system CPU time (Linux `/proc/self/stat`, in
/// clock ticks of 1/100 s).
fn process_cpu_seconds() -> Outcome<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat")?;
    let after_name = stat.rsplit(')').next().unwrap_or_default();
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // utime and stime are fields 14 and 15; `after_name` starts at field 3.
    let ticks = |i: usize| fields.get(i - 3).and_then(|f| f.parse::<f64>().ok());
    match (ticks(14), ticks(15)) {
        (Some(user), Some(system)) => Ok((user + system) / 100.0),
        _ => Err("unreadable /proc/self/stat".into()),
    }
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

/// `total` READY invocations through the boundary by `concurrency` tasks,
/// all in one run or (`spread`) each task in its own; the time they took.
async fn run_boundary(
    boundary: &ToolBoundary,
    arguments: &str,
    concurrency: usize,
    total: usize,
    spread: bool,
) -> Outcome<Duration> {
    let shared = RunId::new(unique_id("bench"))?;
    let per_task = total / concurrency;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for task in 0..concurrency {
        let run = if spread {
            RunId::new(unique_id("bench"))?
        } else {
            shared.clone()
        };
        let ctx = RunContext::new(
            run.clone(),
            invocation_core::CallPolicy::AUTHORIZED_READ_ONLY,
        )
        .with_run_budget(BUDGET)
        .with_tool_budget(TOOL, BUDGET);
        let (boundary, arguments) = (boundary.clone(), arguments.to_owned());
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
                store.create(prebuilt.new_invocation(key.clone())).await?;
                store.finalize(&key, prebuilt.ready()).await?;
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
