//! `cargo xtask bench archive`: whether one `aci archive` keeps up with the Redis
//! store's finalizations, against the finalize rate measured in the same run.
//!
//! Spawns its own `redis-server` on loopback (the store with its outbox on,
//! `RedisConfig::outbox(true)`) and uses the PostgreSQL server of
//! `ARCHIVE_URL`, else `DATABASE_URL`, else
//! `postgres://postgres@127.0.0.1:5432/postgres` (trust authentication), in
//! databases of its own (`store_archive::testing::TestDatabase`: a random
//! name, dropped when the measurement ends or fails). Prints, in one run:
//! 1. the **finalize rate**, the baseline: 16 callers creating and
//!    finalizing READY records with a 1 KiB raw payload (the bare
//!    `InvocationStore` calls of the redis bench's baseline), each caller
//!    starting a new run every 64 calls, `ACI_BENCH_RECORDS` records a
//!    round (default 6,144);
//! 2. the **archive throughput**: those records waiting in the outbox, the
//!    `store_archive::Archiver`s of one `aci archive` built as it builds
//!    them (`store_archive::DEFAULT_WORKERS` at once, each its own consumer
//!    and connection, default batching, raw redacted by the built-in rules)
//!    stepping until the outbox is empty, into a fresh database; archive /
//!    finalize per round.
//!    The two cannot run in a rotated order (the archive needs the
//!    finalized records), so each round measures both back to back;
//!    `ACI_BENCH_ROUNDS` rounds (default 5), rates are medians, the ratio
//!    the median of the per-round ratios (lowest-highest in brackets). CPU
//!    per record of this process, Redis and the database's backend (when it
//!    runs on this machine) is printed beside the rates;
//! 3. the **lag under steady load**: paced producers finalizing at half the
//!    median finalize rate of 1 for `ACI_BENCH_LOAD_SECS` seconds (default
//!    18) while those archivers step (when a step takes nothing, it sleeps
//!    `store_archive::DEFAULT_POLL_INTERVAL`, as `aci archive` does), then
//!    drains for at most 30 s. A record's lag is the time of its
//!    acknowledgement minus its `OutboxEntry::enqueued_at`, recorded by a
//!    bench-local [`Outbox`] that wraps the store's and delegates; p50, p99
//!    and the maximum over every record finalized. A record still pending
//!    when the drain gives up counts with the lag it has then (the figures
//!    are then lower bounds; `unarchived` says how many);
//! 4. the **bytes per archived call**: `pg_total_relation_size` of the
//!    `aci_calls` partitions (table, TOAST and indexes) over their rows,
//!    beside `MEMORY USAGE` of a record in Redis and of a pending outbox
//!    entry.
//!
//! It ends with what an idle archiver's look at the outbox costs over the
//! keyspace the run left (an empty take reads the set of busy streams).
//!
//! The last line is machine-readable:
//! `throughput_ratio=… lag_p50_s=… lag_p99_s=… lag_max_s=… unarchived=… bytes_per_call_pg=… bytes_per_record_redis=…`.
//!
//! Run: `cargo xtask bench archive`. Bounded: about a minute on 2 cores
//! when the archiver keeps up, two when it does not (the drain is capped).

use std::collections::BTreeMap;
use std::error::Error;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use aci_contracts::{RunId, ToolCallId};
use async_trait::async_trait;
use invocation_core::fingerprint::canonical_json;
use invocation_core::testing::fake::{self, FakeRaw, FakeRequest, Mode};
use invocation_core::{
    Backlog, Budgets, Clock, Finalization, InvocationKey, InvocationStore, NewInvocation, Outbox,
    OutboxEntry, ReadyEvidence, ScopeFingerprint, StoreError, SystemClock,
};
use store_archive::testing::TestDatabase;
use store_archive::{
    Archive, Archiver, DEFAULT_POLL_INTERVAL, DEFAULT_RECLAIM_AFTER, DEFAULT_WORKERS, Step,
};
use store_redis::testing::{Admin, RedisServer, record_key, unique_id};
use store_redis::{RedisConfig, RedisOutbox, RedisStore};

type Outcome<T> = Result<T, Box<dyn Error + Send + Sync>>;

const TOOL: &str = "bench_lookup";
const PAYLOAD_BYTES: usize = 1024;
/// Concurrent callers finalizing records.
const CALLERS: usize = 16;
/// Each caller starts a new run after this many calls, so that the outbox
/// holds many runs (its streams are per hash slot of the run).
const CALLS_PER_RUN: usize = 64;
/// Run and tool budgets: checked by every create, never reached.
const BUDGET: u32 = 1_000_000_000;
/// Records a round (`ACI_BENCH_RECORDS`).
const DEFAULT_RECORDS: usize = 6_144;
/// Rounds of finalize then archive (`ACI_BENCH_ROUNDS`).
const DEFAULT_ROUNDS: usize = 5;
/// Seconds of paced load (`ACI_BENCH_LOAD_SECS`).
const DEFAULT_LOAD_SECS: usize = 18;
/// Records finalized and archived before measuring (connections, scripts,
/// the database's caches).
const WARM_UP: usize = 1_024;
/// How long the archiver may drain after the load before the bench gives
/// up on the rest (their lag is then at least this).
const DRAIN_LIMIT: Duration = Duration::from_secs(30);
/// Looks at an empty outbox timed at the end.
const IDLE_TAKES: usize = 5;

/// What every record carries: the texts the boundary would write, prebuilt.
struct Prebuilt {
    request_json: String,
    scope_json: String,
    fingerprint: ScopeFingerprint,
    raw_json: String,
    result_json: String,
}

impl Prebuilt {
    fn new() -> Outcome<Self> {
        let payload: Arc<str> = "x".repeat(PAYLOAD_BYTES).into();
        let query = "connection timeout in checkout";
        let request = FakeRequest::new(Mode::Found, query);
        let scope = request.to_value();
        Ok(Self {
            request_json: request.to_arguments(),
            scope_json: canonical_json(&scope),
            fingerprint: ScopeFingerprint::of(TOOL, &scope),
            raw_json: serde_json::to_string(&FakeRaw {
                secret: fake::SENTINEL.to_owned(),
                fill: payload,
            })?,
            result_json: serde_json::to_string(&fake::found_result(
                &ToolCallId::new("c0")?,
                query,
                &format!("evidence about {query}"),
            ))?,
        })
    }

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

/// A caller's next record key: a new run every [`CALLS_PER_RUN`] calls.
struct Keys {
    run: RunId,
    calls: usize,
}

impl Keys {
    fn new() -> Outcome<Self> {
        Ok(Self {
            run: RunId::new(unique_id("archbench"))?,
            calls: 0,
        })
    }

    fn next(&mut self) -> Outcome<InvocationKey> {
        if self.calls == CALLS_PER_RUN {
            self.run = RunId::new(unique_id("archbench"))?;
            self.calls = 0;
        }
        let key = InvocationKey::new(
            self.run.clone(),
            ToolCallId::new(format!("c{}", self.calls))?,
        );
        self.calls += 1;
        Ok(key)
    }
}

/// One READY record: create, then finalize.
async fn finalize_one(store: &RedisStore, prebuilt: &Prebuilt, key: InvocationKey) -> Outcome<()> {
    store.create(prebuilt.new_invocation(key.clone())).await?;
    store.finalize(&key, prebuilt.ready()).await?;
    Ok(())
}

/// `total` READY records by [`CALLERS`] callers as fast as they go; the
/// time it took and the first record of every run.
async fn finalize_burst(
    store: &RedisStore,
    prebuilt: &Arc<Prebuilt>,
    total: usize,
) -> Outcome<(Duration, Vec<InvocationKey>)> {
    let per_caller = total / CALLERS;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..CALLERS {
        let (store, prebuilt) = (store.clone(), Arc::clone(prebuilt));
        tasks.push(tokio::spawn(async move {
            let mut keys = Keys::new()?;
            let mut firsts = Vec::new();
            for _ in 0..per_caller {
                let key = keys.next()?;
                if keys.calls == 1 {
                    firsts.push(key.clone());
                }
                finalize_one(&store, &prebuilt, key).await?;
            }
            Ok::<_, Box<dyn Error + Send + Sync>>(firsts)
        }));
    }
    let mut firsts = Vec::new();
    for task in tasks {
        firsts.extend(task.await??);
    }
    Ok((started.elapsed(), firsts))
}

/// READY records at `rate` per second in all, by [`CALLERS`] paced callers
/// (tokio intervals, staggered; a caller that fell behind catches up), for
/// `duration`; how many.
async fn finalize_paced(
    store: &RedisStore,
    prebuilt: &Arc<Prebuilt>,
    rate: f64,
    duration: Duration,
) -> Outcome<usize> {
    let period = Duration::from_secs_f64(CALLERS as f64 / rate);
    let started = tokio::time::Instant::now();
    let mut tasks = Vec::new();
    for caller in 0..CALLERS {
        let (store, prebuilt) = (store.clone(), Arc::clone(prebuilt));
        let first = started + period.mul_f64(caller as f64 / CALLERS as f64);
        tasks.push(tokio::spawn(async move {
            let mut ticks = tokio::time::interval_at(first, period);
            let mut keys = Keys::new()?;
            let mut done = 0;
            loop {
                ticks.tick().await;
                if started.elapsed() >= duration {
                    return Ok::<_, Box<dyn Error + Send + Sync>>(done);
                }
                finalize_one(&store, &prebuilt, keys.next()?).await?;
                done += 1;
            }
        }));
    }
    let mut done = 0;
    for task in tasks {
        done += task.await??;
    }
    Ok(done)
}

/// The store's outbox, recording at each acknowledgement how long every
/// acknowledged entry waited since it was enqueued.
#[derive(Debug)]
struct LagOutbox {
    inner: RedisOutbox,
    lags_ms: Mutex<Vec<i64>>,
}

#[async_trait]
impl Outbox for LagOutbox {
    async fn take(
        &self,
        consumer: &str,
        max: usize,
        reclaim_after: Duration,
    ) -> Result<Vec<OutboxEntry>, StoreError> {
        self.inner.take(consumer, max, reclaim_after).await
    }

    async fn ack(&self, entries: &[OutboxEntry]) -> Result<(), StoreError> {
        self.inner.ack(entries).await?;
        let now = SystemClock.now().unix_millis();
        self.lags_ms
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend(
                entries
                    .iter()
                    .map(|entry| now - entry.enqueued_at.unix_millis()),
            );
        Ok(())
    }

    async fn backlog(&self) -> Result<Backlog, StoreError> {
        self.inner.backlog().await
    }
}

/// A fresh archive database, migrated, and the archivers over `outbox`
/// into it, built as `aci archive` builds them: `DEFAULT_WORKERS` of them,
/// each its own consumer and connection (default batching and raw policy).
async fn archiver(
    store: &RedisStore,
    outbox: Arc<dyn Outbox>,
) -> Outcome<(TestDatabase, Vec<Archiver>)> {
    let db = TestDatabase::create().await;
    let mut archivers = Vec::new();
    for _ in 0..DEFAULT_WORKERS {
        let archive = Archive::connect(db.url()).await?;
        archive.migrate().await?;
        archivers.push(Archiver::new(
            Arc::new(store.clone()),
            Arc::clone(&outbox),
            archive,
            unique_id("archbench"),
        ));
    }
    Ok((db, archivers))
}

fn add(total: &mut Step, step: Step) {
    total.taken += step.taken;
    total.archived += step.archived;
    total.duplicates += step.duplicates;
    total.expired += step.expired;
    total.stale += step.stale;
}

/// Steps every archiver, all at once, each in its own task as `aci
/// archive` runs them, until a step takes nothing; what the steps did.
async fn drain(archivers: &[Archiver]) -> Outcome<Step> {
    let tasks: Vec<_> = archivers
        .iter()
        .cloned()
        .map(|archiver| {
            tokio::spawn(async move {
                let mut total = Step::default();
                loop {
                    let step = archiver.step().await?;
                    add(&mut total, step);
                    if step.taken == 0 {
                        return Ok::<_, store_archive::ArchiveError>(total);
                    }
                }
            })
        })
        .collect();
    let mut total = Step::default();
    for outcome in futures::future::join_all(tasks).await {
        add(&mut total, outcome??);
    }
    Ok(total)
}

/// Fails unless the archiver archived exactly `expected` new calls.
fn check(step: &Step, expected: usize, what: &str) -> Outcome<()> {
    if step.archived != expected as u64 || step.duplicates + step.expired + step.stale != 0 {
        return Err(format!(
            "{what}: {expected} records finalized, the archiver archived {} (duplicates {}, expired {}, stale {})",
            step.archived, step.duplicates, step.expired, step.stale
        )
        .into());
    }
    Ok(())
}

/// The `aci_calls` partitions' sizes: (rows, total, table with TOAST,
/// indexes) in bytes.
async fn call_sizes(client: &tokio_postgres::Client) -> Outcome<(i64, i64, i64, i64)> {
    let rows: i64 = client
        .query_one("SELECT count(*) FROM aci_calls", &[])
        .await?
        .get(0);
    let sizes = client
        .query_one(
            "SELECT coalesce(sum(pg_total_relation_size(i.inhrelid)), 0)::bigint,
                    coalesce(sum(pg_table_size(i.inhrelid)), 0)::bigint,
                    coalesce(sum(pg_indexes_size(i.inhrelid)), 0)::bigint
             FROM pg_inherits i WHERE i.inhparent = 'aci_calls'::regclass",
            &[],
        )
        .await?;
    Ok((rows, sizes.get(0), sizes.get(1), sizes.get(2)))
}

/// The database's other backends (the archive's connection) that run on
/// this machine, by PID.
async fn local_backends(client: &tokio_postgres::Client) -> Outcome<Vec<u32>> {
    let rows = client
        .query(
            "SELECT pid FROM pg_stat_activity
             WHERE datname = current_database() AND pid <> pg_backend_pid()",
            &[],
        )
        .await?;
    Ok(rows
        .iter()
        .filter_map(|row| u32::try_from(row.get::<_, i32>(0)).ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|name| name.starts_with("postgres"))
        })
        .collect())
}

/// User + system CPU seconds of process `pid` (`self` for this one) so far,
/// from `/proc/<pid>/stat` (clock ticks of 1/100 s).
fn cpu_seconds(pid: &str) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = stat.rsplit(')').next()?;
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // utime and stime are fields 14 and 15; `after_name` starts at field 3.
    let ticks = |i: usize| fields.get(i - 3).and_then(|f| f.parse::<f64>().ok());
    Some((ticks(14)? + ticks(15)?) / 100.0)
}

/// CPU used so far by this process, Redis and the database backends.
#[derive(Clone, Copy)]
struct Cpu {
    client: f64,
    redis: f64,
    database: Option<f64>,
}

impl Cpu {
    async fn now(redis: &mut redis::aio::MultiplexedConnection, backends: &[u32]) -> Outcome<Self> {
        let database = if backends.is_empty() {
            None
        } else {
            backends
                .iter()
                .map(|pid| cpu_seconds(&pid.to_string()))
                .sum::<Option<f64>>()
        };
        Ok(Self {
            client: cpu_seconds("self").ok_or("unreadable /proc/self/stat")?,
            redis: redis_cpu(redis).await?,
            database,
        })
    }

    /// CPU microseconds per record since `before`.
    fn per_record(self, before: Self, records: usize) -> CpuPerRecord {
        let per = |seconds: f64| seconds * 1e6 / records.max(1) as f64;
        CpuPerRecord {
            client: per(self.client - before.client),
            redis: per(self.redis - before.redis),
            database: self
                .database
                .zip(before.database)
                .map(|(now, then)| per(now - then)),
        }
    }
}

/// CPU microseconds per record of one phase.
#[derive(Clone, Copy)]
struct CpuPerRecord {
    client: f64,
    redis: f64,
    database: Option<f64>,
}

impl CpuPerRecord {
    /// Medians over rounds, as text.
    fn describe(samples: &[Self], with_database: bool) -> String {
        let median = |figure: fn(&Self) -> f64| {
            aci_bench::median(samples.iter().map(figure).collect::<Vec<_>>())
        };
        let mut text = format!(
            "this process {:.1} us, Redis {:.1} us",
            median(|s| s.client),
            median(|s| s.redis)
        );
        if with_database {
            let database: Vec<f64> = samples.iter().filter_map(|s| s.database).collect();
            if database.len() == samples.len() {
                text.push_str(&format!(
                    ", PostgreSQL backend {:.1} us",
                    aci_bench::median(database)
                ));
            } else {
                text.push_str(", PostgreSQL backend not on this machine");
            }
        }
        text
    }
}

/// The commands Redis served between two `INFO commandstats` readings,
/// per record, as text (the bench's own `INFO` left out).
fn commands_per_record(
    before: &BTreeMap<String, u64>,
    after: &BTreeMap<String, u64>,
    records: usize,
) -> String {
    after
        .iter()
        .filter(|(name, _)| name.as_str() != "info")
        .filter_map(|(name, calls)| {
            let delta = calls.saturating_sub(before.get(name).copied().unwrap_or(0));
            (delta > 0).then(|| format!("{name}={:.2}", delta as f64 / records.max(1) as f64))
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Redis's `used_cpu_sys` + `used_cpu_user`, in seconds.
async fn redis_cpu(conn: &mut redis::aio::MultiplexedConnection) -> Outcome<f64> {
    let info: String = redis::cmd("INFO").arg("cpu").query_async(conn).await?;
    let field = |name: &str| {
        info.lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|value| value.trim().parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    Ok(field("used_cpu_sys:") + field("used_cpu_user:"))
}

/// The bench's own connection to Redis (INFO, DBSIZE): no 500 ms driver
/// default on a busy machine.
async fn side_connection(url: &str) -> Outcome<redis::aio::MultiplexedConnection> {
    let config =
        redis::AsyncConnectionConfig::new().set_response_timeout(Some(Duration::from_secs(30)));
    Ok(redis::Client::open(url)?
        .get_multiplexed_async_connection_with_config(&config)
        .await?)
}

fn env_count(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .filter(|count| *count > 0)
        .unwrap_or(default)
}

fn rate(count: usize, elapsed: Duration) -> f64 {
    count as f64 / elapsed.as_secs_f64().max(f64::MIN_POSITIVE)
}

/// The nearest-rank percentile `q` (0..=1) of sorted `values`.
fn percentile(sorted: &[i64], q: f64) -> i64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// `median (lowest-highest)`.
fn format_spread((median, lowest, highest): (f64, f64, f64)) -> String {
    format!("{median:.2} ({lowest:.2}-{highest:.2})")
}

/// One round of 1 and 2.
struct Round {
    finalize_rate: f64,
    archive_rate: f64,
    finalize_cpu: CpuPerRecord,
    archive_cpu: CpuPerRecord,
    /// (rows, total, table with TOAST, indexes) of the call partitions.
    sizes: (i64, i64, i64, i64),
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
    let records = env_count("ACI_BENCH_RECORDS", DEFAULT_RECORDS) / CALLERS * CALLERS;
    let rounds = env_count("ACI_BENCH_ROUNDS", DEFAULT_ROUNDS);
    let load = Duration::from_secs(env_count("ACI_BENCH_LOAD_SECS", DEFAULT_LOAD_SECS) as u64);

    let server = RedisServer::spawn()?;
    let mut admin = Admin::connect(&server.url()).await?;
    let mut side = side_connection(&server.url()).await?;
    let store = RedisStore::new(RedisConfig::single(server.url()).outbox(true))?;
    let prebuilt = Arc::new(Prebuilt::new()?);

    // Warm up: the store's connections and scripts, a database's caches.
    let postgres_version = {
        finalize_burst(&store, &prebuilt, WARM_UP).await?;
        let (db, archiver) = archiver(&store, Arc::new(store.outbox())).await?;
        check(&drain(&archiver).await?, WARM_UP, "warm-up")?;
        let version: String = db
            .client()
            .await
            .query_one("SHOW server_version", &[])
            .await?
            .get(0);
        version
    };
    println!(
        "archive bench: redis-server {} on 127.0.0.1 (outbox on), PostgreSQL {postgres_version}, raw payload {PAYLOAD_BYTES} B, {CALLERS} callers, {CALLS_PER_RUN} calls per run, {} CPUs",
        admin.server_version().await?,
        std::thread::available_parallelism().map_or(0, usize::from),
    );

    // 1 and 2: finalize, then archive what was finalized.
    let mut results = Vec::new();
    let mut sample_keys = Vec::new();
    let mut entry_bytes = None;
    let mut redis_commands = String::new();
    for _ in 0..rounds {
        let cpu = Cpu::now(&mut side, &[]).await?;
        let (finalize_time, firsts) = finalize_burst(&store, &prebuilt, records).await?;
        let finalize_cpu = Cpu::now(&mut side, &[]).await?.per_record(cpu, records);
        if entry_bytes.is_none() {
            entry_bytes = Some(outbox_entry_bytes(&store, &mut admin, records).await?);
        }
        sample_keys = firsts;

        let (db, archiver) = archiver(&store, Arc::new(store.outbox())).await?;
        let client = db.client().await;
        let backends = local_backends(&client).await?;
        let calls = admin.command_calls().await?;
        let cpu = Cpu::now(&mut side, &backends).await?;
        let archive_started = Instant::now();
        let step = drain(&archiver).await?;
        let archive_time = archive_started.elapsed();
        let archive_cpu = Cpu::now(&mut side, &backends)
            .await?
            .per_record(cpu, records);
        redis_commands = commands_per_record(&calls, &admin.command_calls().await?, records);
        check(&step, records, "archive")?;
        let sizes = call_sizes(&client).await?;
        results.push(Round {
            finalize_rate: rate(records, finalize_time),
            archive_rate: rate(records, archive_time),
            finalize_cpu,
            archive_cpu,
            sizes,
        });
    }
    let median = |figure: fn(&Round) -> f64| {
        aci_bench::median(results.iter().map(figure).collect::<Vec<_>>())
    };
    let finalize_rate = median(|r| r.finalize_rate);
    let ratios: Vec<f64> = results
        .iter()
        .map(|r| r.archive_rate / r.finalize_rate)
        .collect();
    let throughput = aci_bench::spread(&ratios);
    println!(
        "finalize (the baseline): {finalize_rate:>7.0} records/s ({records} records a round, create + finalize READY, {CALLERS} callers); CPU per record: {}",
        CpuPerRecord::describe(
            &results.iter().map(|r| r.finalize_cpu).collect::<Vec<_>>(),
            false
        ),
    );
    println!(
        "archive, one aci archive ({DEFAULT_WORKERS} workers): {:>7.0} records/s (the outbox drained into a fresh database, batches of {}); CPU per record: {}",
        median(|r| r.archive_rate),
        store_archive::DEFAULT_BATCH_SIZE,
        CpuPerRecord::describe(
            &results.iter().map(|r| r.archive_cpu).collect::<Vec<_>>(),
            true
        ),
    );
    println!(
        "  archive / finalize {} ({rounds} rounds; goal >= 1.0)",
        format_spread(throughput)
    );
    println!(
        "  Redis commands per archived record (INFO commandstats, last round): {redis_commands}"
    );

    // 3: lag under a steady load at half the finalize rate.
    let load_rate = finalize_rate / 2.0;
    let lag = lag_under_load(&store, &prebuilt, load_rate, load).await?;
    let lag_s = |q: f64| percentile(&lag.lags_ms, q) as f64 / 1000.0;
    let (p50, p99, max) = (lag_s(0.5), lag_s(0.99), lag_s(1.0));
    println!(
        "lag under load: {} records finalized in {} s ({:.0}/s, half the finalize rate asked), one aci archive ({DEFAULT_WORKERS} workers) stepping beside (idle poll {} ms), {} archived: lag p50 {p50:.3} s, p99 {p99:.3} s, max {max:.3} s (goal p99 <= 2 s)",
        lag.produced,
        load.as_secs(),
        lag.produced as f64 / load.as_secs_f64(),
        DEFAULT_POLL_INTERVAL.as_millis(),
        lag.archived,
    );
    if lag.pending > 0 {
        println!(
            "  {} records were still in the outbox after {} s of draining: each counts with the lag it had then, so the figures are lower bounds",
            lag.pending,
            DRAIN_LIMIT.as_secs()
        );
    }

    // 4: bytes per call, archived and in Redis.
    let bytes_pg = aci_bench::median(
        results
            .iter()
            .map(|r| r.sizes.1 as f64 / r.sizes.0.max(1) as f64)
            .collect(),
    );
    let (rows, total, table, indexes) = results.last().map_or((0, 0, 0, 0), |r| r.sizes);
    let bytes_redis = record_bytes(&store, &mut admin, &sample_keys).await?;
    println!(
        "bytes per call: archived {bytes_pg:.0} B (call partitions {total} B for {rows} rows: table and TOAST {table} B, indexes {indexes} B); Redis record {bytes_redis:.0} B (MEMORY USAGE, mean of {} records), pending outbox entry {:.0} B",
        sample_keys.len(),
        entry_bytes.unwrap_or(f64::NAN),
    );

    idle_take(&store, &mut side).await?;

    println!("bench took {:.0} s", started.elapsed().as_secs_f64());
    println!(
        "throughput_ratio={:.2} lag_p50_s={p50:.3} lag_p99_s={p99:.3} lag_max_s={max:.3} unarchived={} bytes_per_call_pg={bytes_pg:.0} bytes_per_record_redis={bytes_redis:.0}",
        throughput.0, lag.pending,
    );
    drop(server);
    Ok(())
}

/// What 3 measured.
struct Lag {
    /// Every finalized record's lag, sorted; for a record still pending
    /// when the drain gave up, the lag it had then.
    lags_ms: Vec<i64>,
    produced: usize,
    archived: u64,
    /// Records still pending when the drain gave up.
    pending: usize,
}

/// The paced load of 3 with one archiver stepping beside it, then its
/// drain (at most [`DRAIN_LIMIT`]).
async fn lag_under_load(
    store: &RedisStore,
    prebuilt: &Arc<Prebuilt>,
    rate: f64,
    load: Duration,
) -> Outcome<Lag> {
    let outbox = Arc::new(LagOutbox {
        inner: store.outbox(),
        lags_ms: Mutex::default(),
    });
    let (_db, archivers) = archiver(store, Arc::clone(&outbox) as Arc<dyn Outbox>).await?;
    let finished = Arc::new(AtomicBool::new(false));
    let stepping: Vec<_> = archivers
        .into_iter()
        .map(|archiver| {
            let finished = Arc::clone(&finished);
            tokio::spawn(async move {
                let mut total = Step::default();
                let mut drain_started = None;
                loop {
                    // Read before the step: a step that started after the last
                    // finalize and took nothing leaves nothing behind.
                    let load_over = finished.load(Ordering::Acquire);
                    let step = archiver.step().await?;
                    add(&mut total, step);
                    if load_over {
                        let since = *drain_started.get_or_insert_with(Instant::now);
                        if step.taken == 0 || since.elapsed() >= DRAIN_LIMIT {
                            return Ok::<_, Box<dyn Error + Send + Sync>>(total);
                        }
                    }
                    if step.taken == 0 {
                        tokio::time::sleep(DEFAULT_POLL_INTERVAL).await;
                    }
                }
            })
        })
        .collect();
    let produced = finalize_paced(store, prebuilt, rate, load).await;
    finished.store(true, Ordering::Release);
    let mut total = Step::default();
    for task in stepping {
        add(&mut total, task.await??);
    }
    let produced = produced?;
    let mut lags_ms = std::mem::take(
        &mut *outbox
            .lags_ms
            .lock()
            .unwrap_or_else(PoisonError::into_inner),
    );
    // What the archiver left: read (and clear) it, each entry counting with
    // the lag it has now, a lower bound.
    let now = SystemClock.now().unix_millis();
    let reader = unique_id("archbench-rest");
    let mut pending = 0;
    loop {
        let entries = outbox
            .inner
            .take(&reader, 10_000, DEFAULT_RECLAIM_AFTER)
            .await?;
        if entries.is_empty() {
            break;
        }
        pending += entries.len();
        lags_ms.extend(
            entries
                .iter()
                .map(|entry| now - entry.enqueued_at.unix_millis()),
        );
        outbox.inner.ack(&entries).await?;
    }
    lags_ms.sort_unstable();
    Ok(Lag {
        lags_ms,
        produced,
        archived: total.archived,
        pending,
    })
}

/// `MEMORY USAGE` of the outbox streams over the `pending` entries they
/// hold.
async fn outbox_entry_bytes(store: &RedisStore, admin: &mut Admin, pending: usize) -> Outcome<f64> {
    let mut bytes = 0;
    for stream in store.outbox().streams().await? {
        bytes += admin.memory_usage(&stream).await?.unwrap_or(0);
    }
    Ok(bytes as f64 / pending.max(1) as f64)
}

/// Mean `MEMORY USAGE` of the records `keys`.
async fn record_bytes(
    store: &RedisStore,
    admin: &mut Admin,
    keys: &[InvocationKey],
) -> Outcome<f64> {
    let mut bytes = 0;
    for key in keys {
        bytes += admin
            .memory_usage(&record_key(
                store.key_prefix(),
                key.run_id.as_str(),
                key.tool_call_id.as_str(),
            ))
            .await?
            .ok_or("a sampled record is gone")?;
    }
    Ok(bytes as f64 / keys.len().max(1) as f64)
}

/// What an archiver's look at an empty outbox costs over the keyspace the
/// run left: on this single node the take reads the set of busy streams
/// (the store already made its first look at every stream, which it makes
/// again only every 5 minutes).
async fn idle_take(
    store: &RedisStore,
    side: &mut redis::aio::MultiplexedConnection,
) -> Outcome<()> {
    let keys: u64 = redis::cmd("DBSIZE").query_async(side).await?;
    let outbox = store.outbox();
    let consumer = unique_id("archbench-idle");
    let mut times = Vec::new();
    for _ in 0..IDLE_TAKES {
        let started = Instant::now();
        let taken = outbox
            .take(
                &consumer,
                store_archive::DEFAULT_BATCH_SIZE,
                DEFAULT_RECLAIM_AFTER,
            )
            .await?;
        times.push(started.elapsed().as_secs_f64() * 1e3);
        if !taken.is_empty() {
            return Err("the outbox was not empty at the end".into());
        }
    }
    println!(
        "an idle archiver's take (empty outbox): {:.1} ms over {keys} keys, median of {IDLE_TAKES}",
        aci_bench::median(times),
    );
    Ok(())
}
