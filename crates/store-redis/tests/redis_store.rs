//! Redis-specific behaviour on real servers: TTLs read back with `PTTL`,
//! races through a real `ToolBoundary` on separate connections, round trips
//! seen by `MONITOR`, `NOSCRIPT` recovery, and faults (a killed, paused or
//! unreachable server) that must surface as `STORE_UNAVAILABLE` with nothing
//! sensitive in any error or outcome.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::error::Error as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aci_contracts::{ErrorCode, EvidenceStatus, InvocationStatus, RunId, Timestamp, ToolCallId};
use invocation_core::testing::fake::{self, FakeExecutor, SENTINEL, fake_tool};
use invocation_core::{
    BoundaryOutcome, Budgets, Clock, Finalization, InvocationKey, InvocationStore, Limits,
    NewInvocation, ReadyEvidence, RecordFields, RunContext, ScopeFingerprint, StoreError,
    SystemClock, ToolBoundary, ToolEnvelope,
};
use serde_json::json;
use store_redis::testing::{
    Admin, RedisServer, monitor_port, record_key, run_keys, shared_cluster_store,
    shared_cluster_urls, shared_store, shared_url, unique_id, unique_prefix,
};
use store_redis::{ConfigProblem, Failure, RedisConfig, RedisStore, RedisStoreError};

const TOOL: &str = "fake_lookup";

fn run_id() -> RunId {
    RunId::new(unique_id("run")).unwrap()
}

fn boundary(store: RedisStore, executor: FakeExecutor, limits: Limits) -> ToolBoundary {
    ToolBoundary::builder(Arc::new(store))
        .limits(limits)
        .tool(fake_tool(TOOL, executor))
        .build()
        .unwrap()
}

fn envelope(run: &RunId, id: &str, query: &str) -> ToolEnvelope {
    ToolEnvelope::new(id, run.as_str(), TOOL, fake::words(query))
}

fn new_invocation(run: &RunId, id: &str, ttl: Duration) -> NewInvocation {
    let scope = json!({ "query": id });
    NewInvocation {
        key: InvocationKey::new(run.clone(), ToolCallId::new(id).unwrap()),
        tool_name: TOOL.to_owned(),
        request_json: scope.to_string(),
        scope_json: invocation_core::fingerprint::canonical_json(&scope),
        scope_fingerprint: ScopeFingerprint::of(TOOL, &scope),
        created_at: SystemClock.now(),
        ttl,
        budgets: Budgets::default(),
        claim_scope: false,
        run: invocation_core::RunTerms::default(),
        attempt: 1,
    }
}

fn ready() -> Finalization {
    Finalization::Ready {
        evidence: ReadyEvidence::Found,
        raw_json: "{\"raw\":1}".to_owned(),
        agent_result_json: "{\"result\":1}".to_owned(),
        redactions: Default::default(),
        replayed_from: None,
        finished_at: Timestamp::from_unix_millis(SystemClock.now().unix_millis()),
        timings: None,
    }
}

fn error_code(outcome: &BoundaryOutcome) -> Option<ErrorCode> {
    outcome.control.error_code
}

// ---------------------------------------------------------------------------
// TTL, read back with PTTL.

async fn ttl_is_set_once_and_never_grows(store: RedisStore, mut admin: Admin) {
    let run = run_id();
    let ttl = Duration::from_secs(60);
    let new = new_invocation(&run, "ttl-1", ttl);
    let key = record_key(store.key_prefix(), run.as_str(), "ttl-1");
    store.create(new.clone()).await.unwrap();

    let after_create = admin.pttl(&key).await.unwrap();
    assert!(
        after_create <= 60_000 && after_create > 59_000,
        "PTTL after create is the configured TTL: {after_create}"
    );
    for run_key in run_keys(store.key_prefix(), run.as_str()) {
        let pttl = admin.pttl(&run_key).await.unwrap();
        assert!(
            pttl > 59_000,
            "{run_key} lives at least as long as the record: {pttl}"
        );
    }

    let mut last = after_create;
    for i in 0..100 {
        let fields = [
            RecordFields::Metadata,
            RecordFields::WithoutRaw,
            RecordFields::All,
        ][i % 3];
        store.get(&new.key, fields).await.unwrap().unwrap();
        store.list(&run, fields).await.unwrap();
        store
            .scope_index(&run, &new.scope_fingerprint)
            .await
            .unwrap();
        store.remaining_ttl(&new.key).await.unwrap().unwrap();
        let now = admin.pttl(&key).await.unwrap();
        assert!(now <= last, "read {i} grew the TTL: {now} > {last}");
        last = now;
    }

    let before = admin.pttl(&key).await.unwrap();
    store.finalize(&new.key, ready()).await.unwrap();
    let after = admin.pttl(&key).await.unwrap();
    assert!(after <= before, "finalize grew the TTL: {after} > {before}");
    assert!(after > 0, "finalize kept a TTL: {after}");
}

#[tokio::test(flavor = "multi_thread")]
async fn ttl_is_set_once_and_never_grows_single_node() {
    let admin = Admin::connect(&shared_url()).await.unwrap();
    ttl_is_set_once_and_never_grows(shared_store(), admin).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn ttl_is_set_once_and_never_grows_cluster() {
    let admin = Admin::connect_cluster(&shared_cluster_urls())
        .await
        .unwrap();
    ttl_is_set_once_and_never_grows(shared_cluster_store(), admin).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_record_that_expires_during_execution_is_not_recreated() {
    let store = shared_store();
    let mut admin = Admin::connect(&shared_url()).await.unwrap();
    let executor = FakeExecutor::new().with_delay(Duration::from_millis(900));
    let limits = Limits {
        record_ttl: Duration::from_millis(300),
        ..Limits::default()
    };
    let boundary = boundary(store.clone(), executor.clone(), limits);
    let run = run_id();
    let outcome = boundary
        .invoke(
            &RunContext::new(
                run.clone(),
                invocation_core::CallPolicy::AUTHORIZED_READ_ONLY,
            ),
            envelope(&run, "slow", "slow lookup"),
        )
        .await;
    assert_eq!(executor.calls(), 1);
    assert_eq!(outcome.control.status, InvocationStatus::Error);
    assert_eq!(error_code(&outcome), Some(ErrorCode::RecordExpired));
    let key = record_key(store.key_prefix(), run.as_str(), "slow");
    assert!(
        !admin.exists(&key).await.unwrap(),
        "finalize recreated the record"
    );
    assert!(
        store
            .list(&run, RecordFields::All)
            .await
            .unwrap()
            .is_empty()
    );
}

// ---------------------------------------------------------------------------
// Races through the boundary, one connection per caller.

async fn one_store_per_caller(count: usize) -> Vec<RedisStore> {
    let prefix = unique_prefix();
    (0..count)
        .map(|_| {
            RedisStore::new(
                RedisConfig::single(shared_url())
                    .key_prefix(prefix.clone())
                    .pool_size(1),
            )
            .unwrap()
        })
        .collect()
}

async fn invoke_all(
    stores: Vec<RedisStore>,
    executor: &FakeExecutor,
    ctx: &RunContext,
    envelope_for: impl Fn(usize) -> ToolEnvelope,
) -> Vec<BoundaryOutcome> {
    let barrier = Arc::new(tokio::sync::Barrier::new(stores.len()));
    let mut tasks = Vec::new();
    for (i, store) in stores.into_iter().enumerate() {
        // Open each connection before the race starts.
        store.ping().await.unwrap();
        let boundary = boundary(store, executor.clone(), Limits::default());
        let (barrier, ctx, envelope) = (Arc::clone(&barrier), ctx.clone(), envelope_for(i));
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            boundary.invoke(&ctx, envelope).await
        }));
    }
    let mut outcomes = Vec::new();
    for task in tasks {
        outcomes.push(task.await.expect("no invocation panics"));
    }
    outcomes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_tool_call_id_on_64_connections_executes_once() {
    let stores = one_store_per_caller(64).await;
    let reader = stores[0].clone();
    let executor = FakeExecutor::new().with_delay(Duration::from_millis(20));
    let run = run_id();
    let ctx = RunContext::new(
        run.clone(),
        invocation_core::CallPolicy::AUTHORIZED_READ_ONLY,
    );
    let outcomes = invoke_all(stores, &executor, &ctx, |i| {
        envelope(&run, "contended", &format!("variant {i}"))
    })
    .await;
    assert_eq!(executor.calls(), 1, "executed exactly once");
    let ready = outcomes
        .iter()
        .filter(|o| o.control.status == InvocationStatus::Ready)
        .count();
    let duplicates = outcomes
        .iter()
        .filter(|o| error_code(o) == Some(ErrorCode::DuplicateToolCall))
        .count();
    assert_eq!((ready, duplicates), (1, 63));
    let records = reader.list(&run, RecordFields::Metadata).await.unwrap();
    assert_eq!(records.len(), 1, "one record");
    assert_eq!(records[0].status, InvocationStatus::Ready);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn budget_b_with_64_distinct_calls_executes_exactly_b() {
    for (budget, ctx_for, refusal) in [
        (
            5_u32,
            (|run: RunId| {
                RunContext::new(run, invocation_core::CallPolicy::AUTHORIZED_READ_ONLY)
                    .with_run_budget(5)
            }) as fn(RunId) -> RunContext,
            ErrorCode::RunBudgetExhausted,
        ),
        (
            3,
            |run: RunId| {
                RunContext::new(run, invocation_core::CallPolicy::AUTHORIZED_READ_ONLY)
                    .with_tool_budget(TOOL, 3)
            },
            ErrorCode::ToolBudgetExhausted,
        ),
    ] {
        let stores = one_store_per_caller(64).await;
        let reader = stores[0].clone();
        let executor = FakeExecutor::new();
        let run = run_id();
        let ctx = ctx_for(run.clone());
        let outcomes = invoke_all(stores, &executor, &ctx, |i| {
            envelope(&run, &format!("call-{i}"), &format!("query {i}"))
        })
        .await;
        let budget = budget as usize;
        assert_eq!(executor.calls(), budget, "executed exactly B");
        let ready = outcomes
            .iter()
            .filter(|o| o.control.status == InvocationStatus::Ready)
            .count();
        let refused = outcomes
            .iter()
            .filter(|o| error_code(o) == Some(refusal))
            .count();
        assert_eq!((ready, refused), (budget, 64 - budget));
        assert_eq!(
            reader
                .list(&run, RecordFields::Metadata)
                .await
                .unwrap()
                .len(),
            budget
        );
    }
}

// ---------------------------------------------------------------------------
// Round trips and scripts.

#[tokio::test(flavor = "multi_thread")]
async fn a_ready_invocation_is_two_evalsha_round_trips() {
    let server = RedisServer::spawn().unwrap();
    let store = RedisStore::new(RedisConfig::single(server.url())).unwrap();
    let boundary = boundary(store, FakeExecutor::new(), Limits::default());
    let run = run_id();
    let ctx = RunContext::new(
        run.clone(),
        invocation_core::CallPolicy::AUTHORIZED_READ_ONLY,
    );
    // Warm up: open the connection and cache both scripts.
    let warm = boundary.invoke(&ctx, envelope(&run, "warm", "warm")).await;
    assert_eq!(warm.control.status, InvocationStatus::Ready);

    let mut admin = Admin::connect(&server.url()).await.unwrap();
    let before = admin.command_calls().await.unwrap();
    let monitor = monitor_port(server.port()).unwrap();
    for i in 0..20 {
        let outcome = boundary
            .invoke(&ctx, envelope(&run, &format!("c{i}"), &format!("q {i}")))
            .await;
        assert_eq!(outcome.control.status, InvocationStatus::Ready);
    }
    let seen = monitor.finish();
    let after = admin.command_calls().await.unwrap();
    let delta = |name: &str| after.get(name).unwrap_or(&0) - before.get(name).unwrap_or(&0);
    assert_eq!(
        delta("evalsha"),
        40,
        "commandstats: two EVALSHA per invocation"
    );
    assert_eq!(delta("eval"), 0);
    assert_eq!(
        seen.client.into_iter().collect::<Vec<_>>(),
        vec![("evalsha".to_owned(), 40)],
        "MONITOR: the client sent nothing but two EVALSHA per invocation"
    );
    assert!(seen.script_internal > 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn after_script_flush_the_next_call_still_works() {
    let server = RedisServer::spawn().unwrap();
    let store = RedisStore::new(RedisConfig::single(server.url())).unwrap();
    let boundary = boundary(store, FakeExecutor::new(), Limits::default());
    let run = run_id();
    let ctx = RunContext::new(
        run.clone(),
        invocation_core::CallPolicy::AUTHORIZED_READ_ONLY,
    );
    let mut admin = Admin::connect(&server.url()).await.unwrap();
    assert_eq!(
        boundary
            .invoke(&ctx, envelope(&run, "a", "a"))
            .await
            .control
            .status,
        InvocationStatus::Ready
    );
    admin.script_flush().await.unwrap();
    assert_eq!(
        boundary
            .invoke(&ctx, envelope(&run, "b", "b"))
            .await
            .control
            .status,
        InvocationStatus::Ready,
        "NOSCRIPT is handled"
    );
    // The fallback cached both scripts again: the next call is EVALSHA only.
    let before = admin.command_calls().await.unwrap();
    assert_eq!(
        boundary
            .invoke(&ctx, envelope(&run, "c", "c"))
            .await
            .control
            .status,
        InvocationStatus::Ready
    );
    let after = admin.command_calls().await.unwrap();
    let delta = |name: &str| after.get(name).unwrap_or(&0) - before.get(name).unwrap_or(&0);
    assert_eq!((delta("evalsha"), delta("eval")), (2, 0));
    assert!(
        before.get("eval").copied().unwrap_or(0) >= 2,
        "EVAL was the fallback"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn after_script_flush_on_every_cluster_node_the_next_call_still_works() {
    let boundary = boundary(
        shared_cluster_store(),
        FakeExecutor::new(),
        Limits::default(),
    );
    let mut admin = Admin::connect_cluster(&shared_cluster_urls())
        .await
        .unwrap();
    let run = run_id();
    let ctx = RunContext::new(
        run.clone(),
        invocation_core::CallPolicy::AUTHORIZED_READ_ONLY,
    );
    for (i, flush) in [false, true, false].into_iter().enumerate() {
        if flush {
            admin.script_flush().await.unwrap();
        }
        let outcome = boundary
            .invoke(&ctx, envelope(&run, &format!("c{i}"), "lookup"))
            .await;
        assert_eq!(outcome.control.status, InvocationStatus::Ready, "call {i}");
    }
}

// ---------------------------------------------------------------------------
// Faults.

const PASSWORD: &str = "s3cr3t";

/// Nothing sensitive in an outcome the agent or harness sees.
fn assert_clean(outcome: &BoundaryOutcome, port: u16) {
    let text = serde_json::to_string(outcome).unwrap();
    let debug = format!("{outcome:?}");
    for haystack in [&text, &debug] {
        let lower = haystack.to_lowercase();
        for needle in [
            PASSWORD,
            "127.0.0.1",
            "localhost",
            "redis",
            SENTINEL,
            ":inv:",
        ] {
            assert!(
                !lower.contains(&needle.to_lowercase()),
                "{needle} leaked: {haystack}"
            );
        }
        assert!(
            !haystack.contains(&port.to_string()),
            "the port leaked: {haystack}"
        );
    }
}

fn fault_store(server: &RedisServer, pool_size: usize) -> RedisStore {
    RedisStore::new(
        RedisConfig::single(server.url())
            .pool_size(pool_size)
            .connect_timeout(Duration::from_millis(300))
            .operation_timeout(Duration::from_millis(500)),
    )
    .unwrap()
}

/// Well above the 500 ms operation timeout: catches a hang, not a slow run.
const HANG: Duration = Duration::from_secs(3);

#[tokio::test(flavor = "multi_thread")]
async fn a_killed_server_is_store_unavailable_and_a_restarted_one_works_again() {
    let mut server = RedisServer::builder().password(PASSWORD).spawn().unwrap();
    let port = server.port();
    let store = fault_store(&server, 4);
    let executor = FakeExecutor::new().with_delay(Duration::from_millis(400));
    let boundary = boundary(store, executor.clone(), Limits::default());
    let run = run_id();
    let ctx = RunContext::new(
        run.clone(),
        invocation_core::CallPolicy::AUTHORIZED_READ_ONLY,
    );

    let ok = boundary
        .invoke(&ctx, envelope(&run, "before", "lookup"))
        .await;
    assert_eq!(ok.control.status, InvocationStatus::Ready);

    // Killed while a call executes: its record exists, its finalize fails.
    let in_flight = {
        let (boundary, ctx, env) = (
            boundary.clone(),
            ctx.clone(),
            envelope(&run, "mid", "lookup"),
        );
        tokio::spawn(async move { boundary.invoke(&ctx, env).await })
    };
    tokio::time::sleep(Duration::from_millis(150)).await;
    server.stop();
    let outcome = in_flight.await.expect("no panic");
    assert_eq!(error_code(&outcome), Some(ErrorCode::StoreUnavailable));
    assert_clean(&outcome, port);

    // Calls while it is down fail fast, never execute, never panic.
    let calls_before = executor.calls();
    for i in 0..3 {
        let started = Instant::now();
        let outcome = boundary
            .invoke(&ctx, envelope(&run, &format!("down-{i}"), "lookup"))
            .await;
        assert!(started.elapsed() < HANG, "took {:?}", started.elapsed());
        assert_eq!(outcome.control.status, InvocationStatus::Error);
        assert_eq!(error_code(&outcome), Some(ErrorCode::StoreUnavailable));
        assert!(outcome.observation.is_error());
        assert_clean(&outcome, port);
    }
    assert_eq!(
        executor.calls(),
        calls_before,
        "nothing executes without a record"
    );

    // Same port again: the same boundary object works.
    server.restart().unwrap();
    assert_eq!(server.port(), port);
    for i in 0..3 {
        let outcome = boundary
            .invoke(&ctx, envelope(&run, &format!("after-{i}"), "lookup"))
            .await;
        assert_eq!(
            outcome.control.status,
            InvocationStatus::Ready,
            "call {i} after the restart: {:?}",
            outcome.control.error_code
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_frozen_server_times_out_and_an_exhausted_pool_fails_within_the_timeout() {
    let server = RedisServer::spawn().unwrap();
    let store = fault_store(&server, 1);
    store.ping().await.unwrap();
    let run = run_id();
    server.pause().unwrap();

    let started = Instant::now();
    let (first, second) = tokio::join!(
        store.create(new_invocation(&run, "frozen-1", Duration::from_secs(60))),
        store.create(new_invocation(&run, "frozen-2", Duration::from_secs(60))),
    );
    assert!(started.elapsed() < HANG, "took {:?}", started.elapsed());
    let mut failures = Vec::new();
    for result in [first, second] {
        let error = result.expect_err("a frozen server answers nothing");
        assert!(matches!(error, StoreError::Unavailable { .. }));
        assert_eq!(error.code(), "STORE_UNAVAILABLE");
        assert!(error.is_transient());
        let source = error
            .source()
            .and_then(|s| s.downcast_ref::<RedisStoreError>())
            .expect("a sanitized adapter error");
        failures.push(source.failure().unwrap());
    }
    failures.sort_by_key(|f| format!("{f:?}"));
    assert!(
        failures.contains(&Failure::Timeout),
        "the request in flight times out: {failures:?}"
    );
    assert!(
        failures
            .iter()
            .all(|f| matches!(f, Failure::Timeout | Failure::PoolExhausted)),
        "{failures:?}"
    );

    server.resume().unwrap();
    store
        .create(new_invocation(&run, "thawed", Duration::from_secs(60)))
        .await
        .expect("works again after the server thaws");
}

#[tokio::test(flavor = "multi_thread")]
async fn errors_never_show_url_password_host_or_key() {
    // A free port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("redis://admin:{PASSWORD}@127.0.0.1:{port}/0");
    let run = run_id();
    let new = new_invocation(&run, "leak-check", Duration::from_secs(60));
    for config in [
        RedisConfig::single(url.clone()),
        RedisConfig::cluster([url.clone()]),
    ] {
        let config = config
            .key_prefix("leakprefix")
            .connect_timeout(Duration::from_millis(200))
            .operation_timeout(Duration::from_millis(400));
        let config_debug = format!("{config:?}");
        let store = RedisStore::new(config).unwrap();
        let store_debug = format!("{store:?}");
        let started = Instant::now();
        let error = store
            .create(new.clone())
            .await
            .expect_err("nothing listens");
        assert!(started.elapsed() < HANG, "took {:?}", started.elapsed());
        assert_eq!(error.code(), "STORE_UNAVAILABLE");
        let mut texts = vec![
            config_debug,
            store_debug,
            format!("{error}"),
            format!("{error:?}"),
        ];
        let mut source = error.source();
        while let Some(s) = source {
            texts.push(format!("{s}"));
            texts.push(format!("{s:?}"));
            source = s.source();
        }
        assert!(texts.len() >= 6, "the adapter error is kept as the source");
        for text in texts {
            for needle in [
                PASSWORD,
                "admin",
                "127.0.0.1",
                &port.to_string(),
                "leak-check",
                run.as_str(),
                ":inv:",
            ] {
                assert!(!text.contains(needle), "{needle} leaked: {text}");
            }
        }
    }
}

#[test]
fn invalid_configurations_are_refused_without_echoing_them() {
    let secret_url = format!("http://admin:{PASSWORD}@example.invalid:6379");
    let cases = [
        (RedisConfig::single(""), ConfigProblem::MissingUrl),
        (
            RedisConfig::cluster(Vec::<String>::new()),
            ConfigProblem::MissingUrl,
        ),
        (
            RedisConfig::single(secret_url),
            ConfigProblem::UnsupportedScheme,
        ),
        (
            RedisConfig::cluster(["redis://a:1", "rediss://b:2"]),
            ConfigProblem::MixedSchemes,
        ),
        (
            RedisConfig::single(format!("redis://:{PASSWORD}@127.0.0.1:notaport")),
            ConfigProblem::MalformedUrl,
        ),
        (
            RedisConfig::single("redis://127.0.0.1").pool_size(0),
            ConfigProblem::ZeroPoolSize,
        ),
        (
            RedisConfig::single("redis://127.0.0.1").operation_timeout(Duration::ZERO),
            ConfigProblem::ZeroTimeout,
        ),
        (
            RedisConfig::single("redis://127.0.0.1").key_prefix("bad{prefix}"),
            ConfigProblem::InvalidKeyPrefix,
        ),
        (
            RedisConfig::single("redis://127.0.0.1").key_prefix("x".repeat(65)),
            ConfigProblem::InvalidKeyPrefix,
        ),
    ];
    for (config, problem) in cases {
        let error = RedisStore::new(config).expect_err("refused");
        assert_eq!(error, RedisStoreError::Config(problem));
        assert_eq!(error.code(), "REDIS_CONFIG_INVALID");
        assert!(!error.is_transient());
        let text = format!("{error} {error:?}");
        assert!(
            !text.contains(PASSWORD) && !text.contains("example.invalid"),
            "{text}"
        );
    }
    let store = RedisStore::new(RedisConfig::single("redis://127.0.0.1:1")).unwrap();
    assert_eq!(store.key_prefix(), "aci", "the default prefix");
}

#[tokio::test(flavor = "multi_thread")]
async fn outcomes_and_records_round_trip_through_the_boundary() {
    // A READY and an ERROR invocation, read back as the journal would.
    let store = shared_store();
    let executor = FakeExecutor::new();
    let boundary = boundary(store.clone(), executor, Limits::default());
    let run = run_id();
    let ctx = RunContext::new(
        run.clone(),
        invocation_core::CallPolicy::AUTHORIZED_READ_ONLY,
    );
    let found = boundary
        .invoke(&ctx, envelope(&run, "found", "timeout"))
        .await;
    let failed = boundary
        .invoke(&ctx, envelope(&run, "failed", "fail now"))
        .await;
    assert_eq!(found.control.evidence_status, EvidenceStatus::EvidenceFound);
    assert_eq!(error_code(&failed), Some(ErrorCode::ExecutionFailed));
    let records = store.list(&run, RecordFields::All).await.unwrap();
    let ids: Vec<&str> = records
        .iter()
        .map(|r| r.key.tool_call_id.as_str())
        .collect();
    assert_eq!(ids, ["found", "failed"]);
    assert!(
        records[0].raw_json.as_deref().unwrap().contains(SENTINEL),
        "raw is kept for the harness"
    );
    assert_eq!(records[1].error_code, Some(ErrorCode::ExecutionFailed));
    for outcome in [&found, &failed] {
        assert!(!serde_json::to_string(outcome).unwrap().contains(SENTINEL));
    }
}
