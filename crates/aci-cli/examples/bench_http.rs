//! `cargo xtask bench http`: calls per second and p50/p99 latency of
//! `query_logs` calls through one and through three `aci serve --http`
//! replicas on one Redis, against the same calls made directly on a
//! `ToolBoundary` over the same Redis in the same run (the baseline), at 1
//! and 16 concurrent calls. Prints the ratios; the last line is
//! machine-readable (`ratio_1r_c16=… ratio_3r_c16=…`).
//!
//! Needs `ACI_BIN` (the release `aci` binary; the xtask sets it) and a
//! `redis-server` on PATH (spawned on a free loopback port). Loopback only,
//! bounded in count.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use invocation_core::{RunContext, ToolBoundary, ToolEnvelope};
use projectors_logs::{MockLogSource, query_logs_tool};
use rmcp::model::{CallToolRequestParams, RequestMetaObject, RequestParamsMeta as _};
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{RoleClient, ServiceExt as _};
use serde_json::json;
use store_redis::testing::RedisServer;
use store_redis::{RedisConfig, RedisStore};
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::{Child, Command};

const CALLS: usize = 2_000;
const ARGUMENTS: &str = r#"{"topic":"APPLICATION","query":"timeout"}"#;
const TOKEN: &str = "bench-token-5d1e";

#[derive(Debug, Clone, Copy)]
struct Stats {
    per_second: f64,
    p50_ms: f64,
    p99_ms: f64,
}

fn stats(mut latencies: Vec<Duration>, elapsed: Duration) -> Stats {
    latencies.sort();
    let at = |q: f64| {
        let i = ((latencies.len() as f64 - 1.0) * q).round() as usize;
        latencies[i].as_secs_f64() * 1000.0
    };
    Stats {
        per_second: latencies.len() as f64 / elapsed.as_secs_f64(),
        p50_ms: at(0.50),
        p99_ms: at(0.99),
    }
}

/// Runs `CALLS` calls of `one(i)` with `concurrency` workers.
async fn measure<F, Fut>(concurrency: usize, one: F) -> Stats
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = bool> + Send,
{
    let one = Arc::new(one);
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let started = Instant::now();
    let workers: Vec<_> = (0..concurrency)
        .map(|_| {
            let one = Arc::clone(&one);
            let next = Arc::clone(&next);
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if i >= CALLS {
                        return latencies;
                    }
                    let t = Instant::now();
                    assert!(one(i).await, "call {i} was not READY");
                    latencies.push(t.elapsed());
                }
            })
        })
        .collect();
    let mut latencies = Vec::with_capacity(CALLS);
    for worker in workers {
        latencies.extend(worker.await.unwrap());
    }
    stats(latencies, started.elapsed())
}

struct Replica {
    _child: Child,
    url: String,
}

async fn replica(bin: &str, store: &str, config: &std::path::Path) -> Replica {
    let mut child = Command::new(bin)
        .args([
            "serve",
            "--http",
            "127.0.0.1:0",
            "--store",
            store,
            "--config",
        ])
        .arg(config)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    loop {
        let line = lines
            .next_line()
            .await
            .unwrap()
            .expect("the replica did not start");
        if let Some(rest) = line.strip_prefix("aci: serving MCP over HTTP at ") {
            let url = rest.to_owned();
            tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
            return Replica { _child: child, url };
        }
    }
}

async fn client(url: &str) -> RunningService<RoleClient, ()> {
    let config = StreamableHttpClientTransportConfig::with_uri(url.to_owned())
        .auth_header(TOKEN)
        .max_concurrent_requests(64);
    let transport = StreamableHttpClientTransport::with_client(reqwest::Client::new(), config);
    ().serve(transport).await.unwrap()
}

async fn through(
    clients: Arc<Vec<RunningService<RoleClient, ()>>>,
    concurrency: usize,
    run: String,
) -> Stats {
    measure(concurrency, move |i| {
        let clients = Arc::clone(&clients);
        let run = run.clone();
        async move {
            let mut params = CallToolRequestParams::new("query_logs")
                .with_arguments(serde_json::from_str(ARGUMENTS).unwrap());
            let meta = json!({"aci/run_id": run, "aci/tool_call_id": format!("call_{i}")});
            params.set_meta(RequestMetaObject::from(meta.as_object().unwrap().clone()));
            let result = clients[i % clients.len()].call_tool(params).await.unwrap();
            result.is_error == Some(false)
        }
    })
    .await
}

fn print(label: &str, s: Stats, baseline: Stats) {
    println!(
        "{label:<28} {:>9.0} calls/s  p50 {:>7.2} ms  p99 {:>7.2} ms  ratio {:.2}",
        s.per_second,
        s.p50_ms,
        s.p99_ms,
        s.per_second / baseline.per_second
    );
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let bin = std::env::var("ACI_BIN").expect("ACI_BIN: the aci binary to benchmark");
    let server = RedisServer::spawn().unwrap();
    let store_url = server.url();
    let digest: String = {
        use sha2::Digest as _;
        sha2::Sha256::digest(TOKEN.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    };
    let prefix = store_redis::testing::unique_prefix();
    let config = std::env::temp_dir().join(format!("aci-bench-http-{}.toml", std::process::id()));
    std::fs::write(
        &config,
        format!("[redis]\nkey_prefix = \"{prefix}\"\n[serve]\nmax_in_flight = 256\n[auth.tokens.bench]\nsha256 = \"{digest}\"\n"),
    )
    .unwrap();

    let store =
        RedisStore::new(RedisConfig::single(store_url.clone()).key_prefix(prefix.clone())).unwrap();
    let boundary = Arc::new(
        ToolBoundary::builder(Arc::new(store))
            .tool(query_logs_tool(MockLogSource::new()))
            .build()
            .unwrap(),
    );
    let one = replica(&bin, &store_url, &config).await;
    let three = [
        replica(&bin, &store_url, &config).await,
        replica(&bin, &store_url, &config).await,
        replica(&bin, &store_url, &config).await,
    ];
    let one_clients = Arc::new(vec![client(&one.url).await]);
    let mut clients = Vec::new();
    for r in &three {
        clients.push(client(&r.url).await);
    }
    let three_clients = Arc::new(clients);

    println!("{CALLS} query_logs calls per row, distinct tool call ids, Redis at loopback");
    let mut last = Vec::new();
    for concurrency in [1, 16] {
        let run = format!(
            "run-direct-c{concurrency}-{}",
            store_redis::testing::unique_prefix()
        );
        let direct = {
            let boundary = Arc::clone(&boundary);
            measure(concurrency, move |i| {
                let boundary = Arc::clone(&boundary);
                let run = run.clone();
                async move {
                    let ctx = RunContext::new(aci_contracts::RunId::new(run.clone()).unwrap());
                    let envelope =
                        ToolEnvelope::new(format!("call_{i}"), run, "query_logs", ARGUMENTS);
                    !boundary.invoke(&ctx, envelope).await.observation.is_error()
                }
            })
            .await
        };
        let run = |tag: &str| {
            format!(
                "run-{tag}-c{concurrency}-{}",
                store_redis::testing::unique_prefix()
            )
        };
        let r1 = through(Arc::clone(&one_clients), concurrency, run("1r")).await;
        let r3 = through(Arc::clone(&three_clients), concurrency, run("3r")).await;
        println!("concurrency {concurrency}");
        print("  direct boundary (baseline)", direct, direct);
        print("  one replica over HTTP", r1, direct);
        print("  three replicas over HTTP", r3, direct);
        last.push(format!(
            "ratio_1r_c{concurrency}={:.2} ratio_3r_c{concurrency}={:.2}",
            r1.per_second / direct.per_second,
            r3.per_second / direct.per_second
        ));
    }
    let _ = std::fs::remove_file(&config);
    println!("{}", last.join(" "));
}
