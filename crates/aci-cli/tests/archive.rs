//! `aci archive`, `aci verify --archive` and `aci export` as real processes,
//! against a real Redis (spawned by store-redis's test support, or
//! `REDIS_URL`) and a real PostgreSQL (a database of their own, see
//! `store_archive::testing`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use aci_contracts::{ErrorCode, RunId, Timestamp};
use invocation_core::{
    Budgets, Clock, Finalization, InvocationKey, InvocationStore, Journal, NewInvocation,
    ReadyEvidence, RunTerms, ScopeFingerprint, Settled, SystemClock, Unsettled,
};
use store_archive::testing::TestDatabase;
use store_redis::testing::{shared_url, unique_prefix};
use store_redis::{RedisConfig, RedisStore};
use support::HANG_GUARD;
use support::command::{aci_async, aci_command, json, json_lines, stdout};
use support::files::config_file;

fn fresh_run_id() -> RunId {
    RunId::new(support::files::unique("archive-run")).unwrap()
}

/// A record to create: tool `tool_a`, scope `{"q": scope}`, one-hour TTL.
fn new_invocation(
    clock: &dyn Clock,
    run: &RunId,
    id: &str,
    tool: &str,
    scope: &str,
) -> NewInvocation {
    let scope_value = serde_json::json!({ "q": scope });
    NewInvocation {
        key: InvocationKey::new(run.clone(), aci_contracts::ToolCallId::new(id).unwrap()),
        tool_name: tool.to_owned(),
        request_json: serde_json::json!({ "query": scope }).to_string(),
        scope_json: scope_value.to_string(),
        scope_fingerprint: ScopeFingerprint::of(tool, &scope_value),
        created_at: clock.now(),
        ttl: Duration::from_secs(3600),
        budgets: Budgets::default(),
        claim_scope: false,
        run: RunTerms::default(),
        attempt: u64::from_str_radix(&support::files::unique_suffix(), 16).unwrap(),
    }
}

struct Env {
    db: TestDatabase,
    store: RedisStore,
    config: PathBuf,
}

impl Env {
    async fn new(extra: &str) -> Self {
        Self::on(RedisConfig::single(shared_url()), shared_url(), extra).await
    }

    /// On the shared 3-node Redis Cluster.
    async fn cluster(extra: &str) -> Self {
        let urls = store_redis::testing::shared_cluster_urls();
        let hosts: Vec<&str> = urls
            .iter()
            .map(|u| u.trim_start_matches("redis://").trim_end_matches('/'))
            .collect();
        let url = format!("redis+cluster://{}", hosts.join(","));
        Self::on(RedisConfig::cluster(urls.clone()), url, extra).await
    }

    async fn on(redis: RedisConfig, url: String, extra: &str) -> Self {
        Self::with_database(TestDatabase::create().await, redis, url, extra)
    }

    fn with_database(db: TestDatabase, redis: RedisConfig, url: String, extra: &str) -> Self {
        let prefix = unique_prefix();
        let store = RedisStore::new(redis.key_prefix(&prefix).outbox(true)).unwrap();
        let config = config_file(
            "archive",
            &format!(
                "store = \"{url}\"\n[redis]\nkey_prefix = \"{prefix}\"\n\
                 [archive]\nurl = \"{}\"\nraw = \"full\"\nreclaim_after_secs = 1\n\
                 poll_interval_ms = 50\n{extra}",
                db.url()
            ),
        );
        Self { db, store, config }
    }

    fn config(&self) -> &str {
        self.config.to_str().unwrap()
    }

    /// Rows per (run, call) in the archive.
    async fn rows(&self) -> Vec<(String, String)> {
        let client = self.db.client().await;
        client
            .query(
                "SELECT run_id, tool_call_id FROM aci_calls ORDER BY 1, 2",
                &[],
            )
            .await
            .map(|rows| rows.iter().map(|r| (r.get(0), r.get(1))).collect())
            .unwrap_or_default()
    }

    /// Waits (bounded by the hang guard) until the archive holds `n` rows.
    async fn wait_for_rows(&self, n: usize) {
        tokio::time::timeout(HANG_GUARD, async {
            while self.rows().await.len() < n {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await
        .expect("the rows arrive within the hang guard");
    }

    /// `aci archive --once` until it reports nothing pending (a killed
    /// archiver's entries become another's after `reclaim_after_secs`).
    async fn archive_until_done(&self) -> serde_json::Value {
        tokio::time::timeout(HANG_GUARD, async {
            loop {
                let output = aci_async(&["archive", "--once", "--config", self.config()]).await;
                let summary = json(&output);
                match output.status.code() {
                    Some(0) => return summary,
                    Some(2) => assert!(summary["pending"].as_u64().unwrap() > 0),
                    other => panic!("aci archive --once: {other:?} {summary}"),
                }
            }
        })
        .await
        .expect("the outbox drains within the hang guard")
    }

    async fn verify(&self, run: &RunId) -> (Option<i32>, serde_json::Value) {
        let output = aci_async(&[
            "verify",
            "--archive",
            "--run",
            run.as_str(),
            "--config",
            self.config(),
        ])
        .await;
        (output.status.code(), json(&output))
    }
}

fn ready(text: &str) -> Finalization {
    Finalization::Ready {
        evidence: ReadyEvidence::Found,
        raw_json: format!(r#"{{"raw":"{text}"}}"#),
        agent_result_json: format!(r#"{{"answer":"{text}"}}"#),
        redactions: Default::default(),
        replayed_from: None,
        finished_at: SystemClock.now(),
        timings: None,
    }
}

/// Finalize READY and ERROR, settle (an abandoned call), a settle's
/// tombstone (a lost create), recover, and a call through `aci call`: each
/// lands exactly once, and the chain verifies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_terminal_path_lands_exactly_one_row() {
    let env = Env::new("").await;
    let store: Arc<dyn InvocationStore> = Arc::new(env.store.clone());
    let clock = Arc::new(SystemClock);
    let run = fresh_run_id();
    let now = SystemClock.now();
    let new = |id: &str| new_invocation(&SystemClock, &run, id, "tool_a", id);
    let (a, b, c, lost) = (new("ready"), new("error"), new("abandoned"), new("lost"));
    let mut stale = new("stale");
    stale.created_at = Timestamp::from_unix_millis(now.unix_millis() - 600_000);
    for n in [&a, &b, &c, &stale] {
        store.create(n.clone()).await.unwrap();
    }
    store.finalize(&a.key, ready("a")).await.unwrap();
    store
        .finalize(
            &b.key,
            Finalization::Error {
                error_code: ErrorCode::ExecutionTimeout,
                retryable: false,
                raw_json: None,
                finished_at: now,
                timings: None,
            },
        )
        .await
        .unwrap();
    let settled = store
        .settle(&Unsettled::of(&c), ErrorCode::ExecutionAbandoned, now)
        .await
        .unwrap();
    assert_eq!(settled, Settled::Finalized);
    let tombstone = store
        .settle(&Unsettled::of(&lost), ErrorCode::StoreUnavailable, now)
        .await
        .unwrap();
    assert_eq!(tombstone, Settled::Tombstoned);
    Journal::new(Arc::clone(&store), clock)
        .recover(
            &run,
            Timestamp::from_unix_millis(now.unix_millis() - 300_000),
        )
        .await
        .unwrap();
    // Through the command: its store has the outbox on because the
    // configuration has an [archive] section.
    let call = aci_async(&[
        "call",
        "lookup_knowledge",
        r#"{"query":"connection pool timeout"}"#,
        "--run-id",
        run.as_str(),
        "--tool-call-id",
        "via-cli",
        "--config",
        env.config(),
    ])
    .await;
    assert_eq!(call.status.code(), Some(0), "{}", stdout(&call));

    let summary = env.archive_until_done().await;
    assert_eq!(summary["archived"], 6, "{summary}");
    assert_eq!(summary["pending"], 0);
    let rows: BTreeSet<String> = env.rows().await.into_iter().map(|(_, id)| id).collect();
    let expected: BTreeSet<String> = ["ready", "error", "abandoned", "lost", "stale", "via-cli"]
        .map(str::to_owned)
        .into();
    assert_eq!(rows, expected);
    assert_eq!(env.rows().await.len(), 6);
    let (code, verdict) = env.verify(&run).await;
    assert_eq!(code, Some(0), "{verdict}");
    assert_eq!(verdict["records"], 6);

    // Once more: nothing new, nothing doubled.
    let again = env.archive_until_done().await;
    assert_eq!(again["archived"], 0);
    assert_eq!(env.rows().await.len(), 6);

    // Export reads the archive alone.
    let export = aci_async(&[
        "export",
        "--run",
        run.as_str(),
        "--format",
        "jsonl",
        "--config",
        env.config(),
    ])
    .await;
    assert_eq!(export.status.code(), Some(0));
    let lines = json_lines(&export);
    assert_eq!(lines.len(), 6);
    assert_eq!(lines[0]["seq"], 1);
    let csv = aci_async(&[
        "export",
        "--run",
        run.as_str(),
        "--format",
        "csv",
        "--config",
        env.config(),
    ])
    .await;
    assert_eq!(stdout(&csv).lines().count(), 7);
    assert!(stdout(&csv).starts_with("seq,run_id,tool_call_id,"));

    // Tampering: an UPDATE of an agent result is named.
    let sql = env.db.client().await;
    sql.execute(
        "UPDATE aci_calls SET result = '{\"answer\":\"forged\"}' WHERE tool_call_id = 'ready'",
        &[],
    )
    .await
    .unwrap();
    let (code, verdict) = env.verify(&run).await;
    assert_eq!(code, Some(2));
    assert_eq!(verdict["problem"], "altered");
    assert_eq!(verdict["tool_call_id"], "ready");
}

fn finalized_batch(runs: &[RunId], calls: usize) -> Vec<invocation_core::NewInvocation> {
    (0..calls)
        .map(|n| {
            let run = &runs[n % runs.len()];
            new_invocation(
                &SystemClock,
                run,
                &format!("c{n}"),
                "tool_a",
                &format!("s{n}"),
            )
        })
        .collect()
}

async fn assert_exactly_once(env: &Env, runs: &[RunId], calls: usize) {
    let rows = env.rows().await;
    let unique: BTreeSet<_> = rows.iter().cloned().collect();
    assert_eq!(rows.len(), calls, "one row per call");
    assert_eq!(unique.len(), calls, "no duplicate");
    for run in runs {
        let (code, verdict) = env.verify(run).await;
        assert_eq!(code, Some(0), "{verdict}");
    }
}

/// An archiver SIGKILLed mid-batch; the next ones reclaim its entries:
/// every record archived exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_archiver_then_restarted_archives_everything_exactly_once() {
    let env = Env::new("batch_size = 4\n").await;
    let runs: Vec<RunId> = (0..4).map(|_| fresh_run_id()).collect();
    let news = finalized_batch(&runs, 200);
    for new in &news {
        env.store.create(new.clone()).await.unwrap();
        env.store.finalize(&new.key, ready("x")).await.unwrap();
    }
    let mut archiver = aci_command(&["archive", "--config", env.config()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    env.wait_for_rows(8).await;
    archiver.start_kill().unwrap();
    archiver.wait().await.unwrap();

    env.archive_until_done().await;
    assert_exactly_once(&env, &runs, 200).await;
}

/// Two archivers at once while 64 calls finalize concurrently: no duplicate
/// row, no gap in any chain; SIGTERM drains each and exits 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_archivers_under_64_concurrent_calls() {
    archivers_under_64_concurrent_calls(2).await;
}

/// The same with three archivers competing for the same entries.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_archivers_under_64_concurrent_calls() {
    archivers_under_64_concurrent_calls(3).await;
}

async fn archivers_under_64_concurrent_calls(count: usize) {
    let env = Env::new("batch_size = 8\n").await;
    let mut archivers: Vec<_> = (0..count)
        .map(|_| {
            aci_command(&["archive", "--config", env.config()])
                .env("RUST_LOG", "warn")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .kill_on_drop(true)
                .spawn()
                .unwrap()
        })
        .collect();
    // Each one started (connected, reading) before anything counts on it.
    for archiver in &mut archivers {
        started(archiver).await;
    }
    let runs: Vec<RunId> = (0..4).map(|_| fresh_run_id()).collect();
    let tasks: Vec<_> = finalized_batch(&runs, 64)
        .into_iter()
        .map(|new| {
            let store = env.store.clone();
            tokio::spawn(async move {
                store.create(new.clone()).await.unwrap();
                store.finalize(&new.key, ready("y")).await.unwrap();
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    env.wait_for_rows(64).await;
    for archiver in &archivers {
        let pid = archiver.id().unwrap().to_string();
        let status = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap();
        assert!(status.success());
    }
    let mut archived = 0;
    for archiver in archivers.drain(..) {
        let output = tokio::time::timeout(HANG_GUARD, archiver.wait_with_output())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(output.status.code(), Some(0), "SIGTERM drains and exits 0");
        let summary: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
        archived += summary["archived"].as_u64().unwrap();
    }
    assert_eq!(archived, 64, "each call inserted by exactly one archiver");
    assert_exactly_once(&env, &runs, 64).await;
}

/// Waits for `archiver`'s line saying it has started, then drains the rest
/// of its stderr.
async fn started(archiver: &mut tokio::process::Child) {
    use tokio::io::AsyncBufReadExt as _;
    let mut lines = tokio::io::BufReader::new(archiver.stderr.take().unwrap()).lines();
    tokio::time::timeout(HANG_GUARD, async {
        loop {
            let line = lines.next_line().await.unwrap().expect("the started line");
            if line.starts_with("aci: archiving with ") {
                return;
            }
        }
    })
    .await
    .expect("the archiver says it has started");
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
}

/// The RFC 8410 example Ed25519 key.
const SIGNING_KEY: &str = "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEINTuctv5E1hK1bbY8fdp+K06/nwoy/HU++CXqI9EdVhC\n-----END PRIVATE KEY-----\n";

/// Records archived and sealed, then expired from Redis: export and verify
/// (with the checkpoint signature) work from the archive alone, and the
/// last row of the sealed run deleted is named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_records_are_read_back_from_the_archive() {
    let key = support::files::temp_file("archive.pem", SIGNING_KEY);
    let env = Env::new(&format!(
        "signing_key_file = \"{}\"\nseal_idle_secs = 0\n",
        key.display()
    ))
    .await;
    let run = fresh_run_id();
    let mut new = new_invocation(&SystemClock, &run, "short", "tool_a", "x");
    new.ttl = Duration::from_millis(800);
    env.store.create(new.clone()).await.unwrap();
    env.store.finalize(&new.key, ready("kept")).await.unwrap();
    env.archive_until_done().await;
    tokio::time::timeout(HANG_GUARD, async {
        while env.store.remaining_ttl(&new.key).await.unwrap().is_some() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .unwrap();
    let (code, verdict) = env.verify(&run).await;
    assert_eq!(code, Some(0), "{verdict}");
    assert_eq!(verdict["sealed"], true, "{verdict}");
    let export = aci_async(&["export", "--run", run.as_str(), "--config", env.config()]).await;
    let lines = json_lines(&export);
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0]["result"], r#"{"answer":"kept"}"#);
    assert_eq!(lines[0]["raw"], r#"{"raw":"kept"}"#);
    // A citation of the archived READY record still stands.
    let cited = aci_async(&[
        "verify",
        "--run",
        run.as_str(),
        "short",
        "--config",
        env.config(),
    ])
    .await;
    assert_eq!(cited.status.code(), Some(0), "{}", stdout(&cited));
    assert_eq!(json(&cited)["verdict"]["verdict"], "EVIDENCE");
    let inspect = aci_async(&[
        "inspect",
        "--run",
        run.as_str(),
        "--json",
        "--config",
        env.config(),
    ])
    .await;
    assert_eq!(inspect.status.code(), Some(0));
    assert!(support::command::stderr(&inspect).contains("read from the archive"));
    let lines = json_lines(&inspect);
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0]["source"], "archive");
    assert_eq!(lines[0]["tool_call_id"], "short");
    assert!(lines[0].get("raw").is_none());

    let sql = env.db.client().await;
    sql.execute("DELETE FROM aci_calls WHERE run_id = $1", &[&run.as_str()])
        .await
        .unwrap();
    let (code, verdict) = env.verify(&run).await;
    assert_eq!(code, Some(2));
    assert_eq!(verdict["problem"], "missing", "{verdict}");
    assert_eq!(verdict["seq"], 1);
}

/// On a 3-node Redis Cluster, runs spread over every primary: an archiver
/// SIGKILLed mid-way and the next ones archive every record exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_outboxes_on_every_primary_are_archived_once() {
    let env = Env::cluster("batch_size = 4\n").await;
    let runs: Vec<RunId> = (0..12).map(|_| fresh_run_id()).collect();
    let news = finalized_batch(&runs, 60);
    for new in &news {
        env.store.create(new.clone()).await.unwrap();
        env.store.finalize(&new.key, ready("z")).await.unwrap();
    }
    let mut archiver = aci_command(&["archive", "--config", env.config()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    env.wait_for_rows(4).await;
    archiver.start_kill().unwrap();
    archiver.wait().await.unwrap();
    env.archive_until_done().await;
    assert_exactly_once(&env, &runs, 60).await;
}

/// A running `aci archive --metrics 127.0.0.1:0`: its metrics address (read
/// from its stderr, which is drained to the end).
struct ServedArchiver {
    child: tokio::process::Child,
    metrics: String,
    http: reqwest::Client,
}

impl ServedArchiver {
    async fn spawn(config: &str) -> Self {
        use tokio::io::AsyncBufReadExt as _;
        let mut child = aci_command(&["archive", "--config", config, "--metrics", "127.0.0.1:0"])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut lines = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
        let metrics = tokio::time::timeout(HANG_GUARD, async {
            loop {
                let line = lines.next_line().await.unwrap().expect("the address line");
                if let Some(rest) = line.strip_prefix("aci: archive metrics on ") {
                    return rest.to_owned();
                }
            }
        })
        .await
        .expect("the archiver says where its metrics are");
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Self {
            child,
            metrics,
            http: reqwest::Client::new(),
        }
    }

    /// The value of metric `name` (a series without labels).
    async fn metric(&self, name: &str) -> f64 {
        let text = self
            .http
            .get(&self.metrics)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        text.lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in {text}"))
    }

    /// Waits (bounded by the hang guard) until `holds` of metric `name`.
    async fn wait_for(&self, name: &str, holds: impl Fn(f64) -> bool) -> f64 {
        tokio::time::timeout(HANG_GUARD, async {
            loop {
                let value = self.metric(name).await;
                if holds(value) {
                    return value;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("{name} did not reach the expected value"))
    }

    /// SIGTERM; the summary line of a clean exit.
    async fn stop(self) -> serde_json::Value {
        let pid = self.child.id().unwrap().to_string();
        let sent = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap();
        assert!(sent.success());
        let output = tokio::time::timeout(HANG_GUARD, self.child.wait_with_output())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(output.status.code(), Some(0), "SIGTERM drains and exits 0");
        serde_json::from_slice(&output.stdout).unwrap()
    }
}

/// PostgreSQL (a server of the test's own) stopped for 30 s while calls go
/// on: the calls are unaffected, the backlog waits in Redis and the metrics
/// show it (pending, lag, errors), and everything lands exactly once after
/// the server is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_down_for_30_seconds_delays_but_loses_nothing() {
    const DOWN: Duration = Duration::from_secs(30);
    let server = store_archive::testing::PostgresServer::start();
    let db = TestDatabase::create_on(&server.url()).await;
    let env = Env::with_database(db, RedisConfig::single(shared_url()), shared_url(), "");
    let archiver = ServedArchiver::spawn(env.config()).await;
    let runs: Vec<RunId> = (0..3).map(|_| fresh_run_id()).collect();
    let news = finalized_batch(&runs, 60);
    let (before, during) = news.split_at(20);
    for new in before {
        env.store.create(new.clone()).await.unwrap();
        env.store.finalize(&new.key, ready("up")).await.unwrap();
    }
    env.wait_for_rows(20).await;
    archiver
        .wait_for("aci_archive_rows_total", |v| v >= 20.0)
        .await;
    archiver.wait_for("aci_archive_pending", |v| v == 0.0).await;
    assert_eq!(archiver.metric("aci_archive_lag_seconds").await, 0.0);

    server.stop();
    let down_at = std::time::Instant::now();
    // Calls go on, one every 3/4 s, all through the outage.
    let pace = DOWN / u32::try_from(during.len()).unwrap();
    let mut tick = tokio::time::interval(pace);
    for new in during {
        tick.tick().await;
        env.store.create(new.clone()).await.unwrap();
        env.store.finalize(&new.key, ready("down")).await.unwrap();
    }
    // One real call through the boundary too: READY, as if nothing happened.
    let cli_run = fresh_run_id();
    let output = aci_async(&[
        "call",
        "lookup_knowledge",
        r#"{"query":"connection pool timeout"}"#,
        "--run-id",
        cli_run.as_str(),
        "--tool-call-id",
        "during-outage",
        "--config",
        env.config(),
    ])
    .await;
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        support::command::stderr(&output)
    );
    let waiting = u64::try_from(during.len()).unwrap() + 1;
    archiver
        .wait_for("aci_archive_pending", |v| v >= waiting as f64)
        .await;
    let lag = archiver.metric("aci_archive_lag_seconds").await;
    assert!(
        lag >= (down_at.elapsed().as_secs_f64() - 5.0).max(DOWN.as_secs_f64() * 0.8),
        "the lag shows the outage: {lag}"
    );
    assert!(archiver.metric("aci_archive_errors_total").await > 0.0);

    server.start_again();
    archiver.wait_for("aci_archive_pending", |v| v == 0.0).await;
    env.wait_for_rows(61).await;
    assert_eq!(archiver.metric("aci_archive_lag_seconds").await, 0.0);
    assert_eq!(archiver.metric("aci_archive_rows_total").await, 61.0);
    let summary = archiver.stop().await;
    assert_eq!(summary["archived"], 61, "{summary}");
    let mut all = runs.clone();
    all.push(cli_run);
    let rows = env.rows().await;
    assert_eq!(rows.len(), 61);
    assert_eq!(
        rows.iter().collect::<BTreeSet<_>>().len(),
        61,
        "no duplicate"
    );
    for run in &all {
        let (code, verdict) = env.verify(run).await;
        assert_eq!(code, Some(0), "{verdict}");
    }
}

/// A memory store archives its own records from the `aci serve` process:
/// through the least-privileged archiver role (`SELECT, INSERT` only, the
/// grants README gives) with the owner's `admin_url` for the schema and the
/// month partitions; what it cannot archive by the end (INSERT revoked), it
/// says on stderr. `aci call` archives its one record before it exits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_store_processes_archive_their_own_records() {
    let db = TestDatabase::create().await;
    let owner = store_archive::Archive::connect(db.url()).await.unwrap();
    owner.migrate().await.unwrap();
    let role = db.archiver_role().await;
    let config = config_file(
        "archive-memory",
        &format!(
            "[archive]\nurl = \"{role}\"\nadmin_url = \"{}\"\npoll_interval_ms = 50\n\
             [serve]\ndrain_secs = 2\n",
            db.url()
        ),
    );
    let config = config.to_str().unwrap();
    let sql = db.client().await;
    let rows = |run: String| {
        let sql = &sql;
        async move {
            sql.query_one("SELECT count(*) FROM aci_calls WHERE run_id = $1", &[&run])
                .await
                .unwrap()
                .get::<_, i64>(0)
        }
    };

    // `aci call`: its record is archived before the process ends.
    let call_run = fresh_run_id();
    let output = aci_async(&[
        "call",
        "lookup_knowledge",
        r#"{"query":"disk full"}"#,
        "--run-id",
        call_run.as_str(),
        "--config",
        config,
    ])
    .await;
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        support::command::stderr(&output)
    );
    assert_eq!(rows(call_run.to_string()).await, 1);

    // `aci serve`: archived while it serves.
    let run = fresh_run_id();
    let mut session =
        support::stdio::RawSession::start(&["--config", config, "--run-id", run.as_str()]).await;
    for n in 0..3 {
        let result = session
            .call(
                &serde_json::json!(n),
                "lookup_knowledge",
                serde_json::json!({"query": format!("connection pool {n}")}),
                None,
            )
            .await;
        assert!(result["error_code"].is_null(), "{result}");
    }
    tokio::time::timeout(HANG_GUARD, async {
        while rows(run.to_string()).await < 3 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the serving process archives its records");
    // The owner made next month's partition ahead: the archiver role
    // cannot create one.
    let next_month: bool = sql
        .query_one(
            "SELECT count(*) = 2 FROM pg_inherits i JOIN pg_class p ON p.oid = i.inhparent \
             WHERE p.relname = 'aci_calls'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(next_month, "this month's and next month's partitions exist");

    // INSERT revoked: the next two records cannot be archived, and the
    // process says so when it ends.
    let role_name = role
        .split("://")
        .nth(1)
        .and_then(|rest| rest.split(':').next())
        .unwrap()
        .to_owned();
    sql.batch_execute(&format!("REVOKE INSERT ON aci_calls FROM {role_name}"))
        .await
        .unwrap();
    for n in 3..5 {
        let result = session
            .call(
                &serde_json::json!(n),
                "lookup_knowledge",
                serde_json::json!({"query": format!("slow query {n}")}),
                None,
            )
            .await;
        assert!(result["error_code"].is_null(), "{result}");
    }
    let (status, _, stderr) = session.close().await;
    assert!(status.success(), "{stderr}");
    assert!(
        stderr.contains("aci: 2 finalized records were not archived"),
        "{stderr}"
    );
    assert_eq!(rows(run.to_string()).await, 3);
}

/// The tokens of the run's owner and of another principal, for the review
/// routes of `aci serve --http`.
const OWNER_TOKEN: &str = "token-of-oncall-bot-archived-7c21";
const OTHER_TOKEN: &str = "token-of-other-bot-archived-93fe";

/// A run of three calls owned by `oncall-bot` (evidence, NO_EVIDENCE, an
/// ERROR), archived, then expired from Redis: `aci serve --http` serves its
/// review page, calls and citation check from the archive to its owner
/// only, and `aci report` writes the page from the archive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_run_is_reviewed_from_the_archive() {
    use support::http::replica::Replica;
    use support::http::{http_client, sha256_hex};

    let env = Env::new(&format!(
        "[auth.tokens.oncall-bot]\nsha256 = \"{}\"\n[auth.tokens.other-bot]\nsha256 = \"{}\"\n",
        sha256_hex(OWNER_TOKEN),
        sha256_hex(OTHER_TOKEN),
    ))
    .await;
    let run = fresh_run_id();
    // Long enough for `aci archive` to read every record before it expires
    // (a record expired unread is lost to the archive), short enough to
    // wait out.
    let ttl = Duration::from_secs(3);
    let mut news = Vec::new();
    for id in ["found", "none", "failed"] {
        let mut new = new_invocation(&SystemClock, &run, id, "tool_a", id);
        new.ttl = ttl;
        new.run = RunTerms {
            max_duration: None,
            owner: Some("oncall-bot".to_owned()),
        };
        env.store.create(new.clone()).await.unwrap();
        news.push(new);
    }
    env.store
        .finalize(&news[0].key, ready("found"))
        .await
        .unwrap();
    env.store
        .finalize(
            &news[1].key,
            Finalization::Ready {
                evidence: ReadyEvidence::NoEvidence,
                raw_json: r#"{"raw":"none"}"#.to_owned(),
                agent_result_json: r#"{"answer":"none","scope":{"q":"none"}}"#.to_owned(),
                redactions: Default::default(),
                replayed_from: None,
                finished_at: SystemClock.now(),
                timings: None,
            },
        )
        .await
        .unwrap();
    env.store
        .finalize(
            &news[2].key,
            Finalization::Error {
                error_code: ErrorCode::ExecutionTimeout,
                retryable: false,
                raw_json: None,
                finished_at: SystemClock.now(),
                timings: None,
            },
        )
        .await
        .unwrap();
    let summary = env.archive_until_done().await;
    assert_eq!(summary["archived"], 3, "{summary}");
    assert_eq!(summary["expired"], 0, "{summary}");
    // Gone from the store: every record and the run's state.
    tokio::time::timeout(HANG_GUARD, async {
        loop {
            let mut held = env.store.run_state(&run).await.unwrap().is_some();
            for new in &news {
                held |= env.store.remaining_ttl(&new.key).await.unwrap().is_some();
            }
            if !held {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("the records expire within the hang guard");

    let replica = Replica::start(&env.config, &shared_url(), &[]).await;
    let http = http_client();
    let get = |path: String, token: &'static str| {
        let request = http.get(replica.url(&path)).bearer_auth(token);
        async move {
            let response = tokio::time::timeout(HANG_GUARD, request.send())
                .await
                .unwrap()
                .unwrap();
            let status = response.status().as_u16();
            (status, response.text().await.unwrap())
        }
    };

    // The owner (from the archive's `aci_runs.owner`) sees the page.
    let (status, page) = get(format!("/runs/{run}"), OWNER_TOKEN).await;
    assert_eq!(status, 200, "{page}\n{}", replica.stderr());
    assert!(page.contains("read from the archive"), "{page}");
    assert!(page.contains(r#"data-source="archive""#), "{page}");
    assert!(page.contains("oncall-bot"), "{page}");
    for id in ["found", "none", "failed"] {
        assert!(
            page.contains(&format!(r#"data-tool-call-id="{id}""#)),
            "{id} listed: {page}"
        );
    }
    assert!(page.contains("EXECUTION_TIMEOUT"), "{page}");

    // Anyone else: 403, the same for the archived run as for no run at all.
    let (status, denied) = get(format!("/runs/{run}"), OTHER_TOKEN).await;
    assert_eq!((status, denied.as_str()), (403, "forbidden\n"));
    let (status, unknown) = get(format!("/runs/{}", fresh_run_id()), OTHER_TOKEN).await;
    assert_eq!((status, unknown.as_str()), (403, "forbidden\n"));
    let (status, _) = get(format!("/runs/{run}/calls"), OTHER_TOKEN).await;
    assert_eq!(status, 403);
    let (status, _) = get(format!("/runs/{run}/calls/found"), OTHER_TOKEN).await;
    assert_eq!(status, 403);

    // The calls as JSON lines, marked as read from the archive.
    let (status, body) = get(format!("/runs/{run}/calls"), OWNER_TOKEN).await;
    assert_eq!(status, 200, "{body}");
    let lines: Vec<serde_json::Value> = body
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let ids: BTreeSet<&str> = lines
        .iter()
        .map(|l| l["tool_call_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, BTreeSet::from(["found", "none", "failed"]));
    for line in &lines {
        assert_eq!(line["source"], "archive", "{line}");
        assert_eq!(line["run"]["owner"], "oncall-bot", "{line}");
        assert!(line.get("raw").is_none(), "{line}");
    }
    let failed = lines
        .iter()
        .find(|l| l["tool_call_id"] == "failed")
        .unwrap();
    assert_eq!(failed["status"], "ERROR");
    assert_eq!(failed["error_code"], "EXECUTION_TIMEOUT");

    // One call, with its raw response as archived (`raw = "full"`).
    let (status, body) = get(format!("/runs/{run}/calls/found"), OWNER_TOKEN).await;
    assert_eq!(status, 200, "{body}");
    let call: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(call["source"], "archive");
    assert_eq!(call["raw"], serde_json::json!({"raw": "found"}));
    assert_eq!(call["agent_result"], serde_json::json!({"answer": "found"}));
    let (status, _) = get(format!("/runs/{run}/calls/ghost"), OWNER_TOKEN).await;
    assert_eq!(status, 404);

    // The citation check judges archived calls as `aci verify` does.
    let response = tokio::time::timeout(
        HANG_GUARD,
        http.post(replica.url(&format!("/runs/{run}/citations")))
            .bearer_auth(OWNER_TOKEN)
            .header("content-type", "text/plain")
            .body("Pool exhausted [found]; nothing in [none]; [failed] timed out; [ghost].")
            .send(),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(response.status(), 200);
    let report: serde_json::Value = response.json().await.unwrap();
    let marks: Vec<(&str, &str)> = report["cited"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["citation"].as_str().unwrap(), c["mark"].as_str().unwrap()))
        .collect();
    assert_eq!(
        marks,
        [
            ("found", "stands"),
            ("none", "negative"),
            ("failed", "not-citable"),
            ("ghost", "unknown"),
        ]
    );
    assert_eq!(report["uncited"], serde_json::json!([]));
    let verified = aci_async(&[
        "verify",
        "--run",
        run.as_str(),
        "found",
        "none",
        "failed",
        "--config",
        env.config(),
    ])
    .await;
    let verified = json_lines(&verified);
    assert_eq!(verified.len(), 3);
    for (n, line) in verified.iter().enumerate() {
        assert_eq!(line["verdict"], report["cited"][n]["verdict"], "{line}");
    }
    let (status, stderr) = replica.stop().await;
    assert!(status.success(), "{stderr}");

    // `aci report` writes the page from the archive too.
    let out = support::files::temp_file("archived-run.html", "");
    let output = aci_async(&[
        "report",
        "--run",
        run.as_str(),
        "--config",
        env.config(),
        "--out",
        out.to_str().unwrap(),
    ])
    .await;
    assert!(
        output.status.success(),
        "{}",
        support::command::stderr(&output)
    );
    assert!(support::command::stderr(&output).contains("read from the archive"));
    let written = std::fs::read_to_string(&out).unwrap();
    assert!(written.contains("read from the archive"), "{written}");
    for id in ["found", "none", "failed"] {
        assert!(written.contains(&format!(r#"data-tool-call-id="{id}""#)));
    }
    // Its offline citation check carries the archived verdicts.
    assert!(written.contains(r#""found":"stands""#), "{written}");
    assert!(written.contains(r#""none":"negative""#), "{written}");
    assert!(written.contains(r#""failed":"not-citable""#), "{written}");
}
