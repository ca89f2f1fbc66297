//! `cargo xtask bench http`: calls per second and p50/p99 latency of
//! `query_logs` calls through one and through three `aci serve --http`
//! replicas on one Redis, against the same calls made directly on a
//! `ToolBoundary` over the same Redis in the same run (the baseline), at 1
//! and 16 concurrent calls. Prints the ratios; the last line is
//! machine-readable (`ratio_1r_c16=… ratio_3r_c16=…`).
//!
//! Two clients drive the replicas: the rmcp client (what an MCP framework
//! uses: its own service task, JSON-RPC (de)serialisation, reqwest), and raw
//! HTTP POSTs of a pre-serialised request over keep-alive connections (what
//! any HTTP client can send; its cost is close to the least a client pays).
//! The client, the replicas and Redis share the machine's cores, so a
//! client's own cost counts against the replica's figure: each row also
//! prints CPU time per call of the bench process (the client; for the
//! baseline, the boundary itself), of the replicas and of Redis, read from
//! `/proc/<pid>/task/*/schedstat` and Redis's `INFO cpu`. A second direct
//! row also renders each observation as JSON text once (what any
//! integration hands the model); the baseline row does not.
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

const CALLS: usize = 5_000;
/// Calls before each measured row (connections, pools, caches).
const WARM_UP: usize = 300;
const ARGUMENTS: &str = r#"{"topic":"APPLICATION","query":"timeout"}"#;
const TOKEN: &str = "bench-token-5d1e";

#[derive(Debug, Clone, Copy, Default)]
struct Stats {
    per_second: f64,
    p50_ms: f64,
    p99_ms: f64,
    /// CPU microseconds per call: this process, the replicas, Redis.
    cpu_client_us: f64,
    cpu_server_us: f64,
    cpu_redis_us: f64,
}

/// CPU time of every thread of process `pid` so far (`/proc/<pid>/task/*/schedstat`,
/// first field, nanoseconds).
fn cpu_ns(pid: u32) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .filter_map(Result::ok)
        .filter_map(|task| std::fs::read_to_string(task.path().join("schedstat")).ok())
        .filter_map(|line| line.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

/// Redis's own CPU time so far (`INFO cpu`: `used_cpu_sys` + `used_cpu_user`), in
/// nanoseconds.
async fn redis_cpu_ns(addr: &str) -> u64 {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let Ok(mut stream) = tokio::net::TcpStream::connect(addr).await else {
        return 0;
    };
    if stream.write_all(b"INFO cpu\r\n").await.is_err() {
        return 0;
    }
    let mut text = String::new();
    let mut buf = [0u8; 4096];
    while !text.contains("used_cpu_user:") || !text.ends_with("\r\n") {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => text.push_str(&String::from_utf8_lossy(&buf[..n])),
        }
    }
    let secs = |key: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0.0)
    };
    ((secs("used_cpu_sys:") + secs("used_cpu_user:")) * 1e9) as u64
}

/// CPU counters of the processes of one row.
struct Cpu {
    client: u64,
    server: u64,
    redis: u64,
}

impl Cpu {
    async fn read(servers: &[u32], redis: &str) -> Self {
        Self {
            client: cpu_ns(std::process::id()),
            server: servers.iter().map(|pid| cpu_ns(*pid)).sum(),
            redis: redis_cpu_ns(redis).await,
        }
    }
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
        ..Stats::default()
    }
}

/// The processes a row's CPU time is read from.
#[derive(Clone)]
struct Processes {
    servers: Vec<u32>,
    redis: String,
}

/// Runs [`WARM_UP`] calls, then `CALLS` measured calls of `one(i)` with
/// `concurrency` workers (call numbers go on from the warm-up's).
async fn measure<F, Fut>(concurrency: usize, processes: &Processes, one: F) -> Stats
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = bool> + Send,
{
    let one = Arc::new(one);
    for i in 0..WARM_UP {
        assert!(one(CALLS + i).await, "warm-up call {i} was not READY");
    }
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let cpu = Cpu::read(&processes.servers, &processes.redis).await;
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
    let elapsed = started.elapsed();
    let end = Cpu::read(&processes.servers, &processes.redis).await;
    let per_call = |from: u64, to: u64| to.saturating_sub(from) as f64 / 1e3 / CALLS as f64;
    Stats {
        cpu_client_us: per_call(cpu.client, end.client),
        cpu_server_us: per_call(cpu.server, end.server),
        cpu_redis_us: per_call(cpu.redis, end.redis),
        ..stats(latencies, elapsed)
    }
}

struct Replica {
    child: Child,
    url: String,
}

impl Replica {
    fn pid(&self) -> u32 {
        self.child.id().expect("the replica runs")
    }
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
            return Replica { child, url };
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
    processes: &Processes,
    run: String,
) -> Stats {
    measure(concurrency, processes, move |i| {
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

/// The same calls as raw HTTP POSTs of a pre-serialised JSON-RPC request,
/// over `urls` in turn, on one keep-alive client; a call is READY when the
/// reply is 200 with `"isError":false`.
async fn raw(
    urls: Arc<Vec<String>>,
    concurrency: usize,
    processes: &Processes,
    run: String,
) -> Stats {
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(64)
        .build()
        .unwrap();
    measure(concurrency, processes, move |i| {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":{i},"method":"tools/call","params":{{"name":"query_logs","arguments":{ARGUMENTS},"_meta":{{"aci/run_id":"{run}","aci/tool_call_id":"call_{i}"}}}}}}"#
        );
        let request = http
            .post(&urls[i % urls.len()])
            .bearer_auth(TOKEN)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(body);
        async move {
            let Ok(response) = request.send().await else {
                return false;
            };
            if response.status() != 200 {
                return false;
            }
            let body = response.bytes().await.unwrap_or_default();
            memchr_find(&body, br#""isError":false"#)
        }
    })
    .await
}

fn memchr_find(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

fn print(label: &str, s: Stats, baseline: Stats) {
    println!(
        "{label:<34} {:>7.0} calls/s ({:.2})  p50 {:>5.2} ms  p99 {:>5.2} ms  CPU/call: client {:>4.0} us, replicas {:>4.0} us, Redis {:>3.0} us",
        s.per_second,
        s.per_second / baseline.per_second,
        s.p50_ms,
        s.p99_ms,
        s.cpu_client_us,
        s.cpu_server_us,
        s.cpu_redis_us,
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

    let redis_addr = store_url
        .trim_start_matches("redis://")
        .trim_end_matches('/')
        .to_owned();
    let direct_processes = Processes {
        servers: Vec::new(),
        redis: redis_addr.clone(),
    };
    let one_processes = Processes {
        servers: vec![one.pid()],
        redis: redis_addr.clone(),
    };
    let three_processes = Processes {
        servers: three.iter().map(Replica::pid).collect(),
        redis: redis_addr,
    };
    let one_urls = Arc::new(vec![one.url.clone()]);
    let three_urls = Arc::new(three.iter().map(|r| r.url.clone()).collect::<Vec<_>>());

    println!(
        "{CALLS} query_logs calls per row (after {WARM_UP} warm-up calls), distinct tool call ids, Redis at loopback; ratio to the direct boundary in brackets"
    );
    let mut last = Vec::new();
    for concurrency in [1, 16] {
        let run = |tag: &str| {
            format!(
                "run-{tag}-c{concurrency}-{}",
                store_redis::testing::unique_prefix()
            )
        };
        let direct = {
            let boundary = Arc::clone(&boundary);
            let run = run("direct");
            measure(concurrency, &direct_processes, move |i| {
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
        // The same, handing the model its observation as JSON text once (what
        // any integration does with it, and the least a server sends).
        let rendered = {
            let boundary = Arc::clone(&boundary);
            let run = run("rendered");
            measure(concurrency, &direct_processes, move |i| {
                let boundary = Arc::clone(&boundary);
                let run = run.clone();
                async move {
                    let ctx = RunContext::new(aci_contracts::RunId::new(run.clone()).unwrap());
                    let envelope =
                        ToolEnvelope::new(format!("call_{i}"), run, "query_logs", ARGUMENTS);
                    let observation = boundary.invoke(&ctx, envelope).await.observation;
                    !observation.is_error() && !observation.to_json_string().is_empty()
                }
            })
            .await
        };
        let r1 = through(
            Arc::clone(&one_clients),
            concurrency,
            &one_processes,
            run("1r"),
        )
        .await;
        let r3 = through(
            Arc::clone(&three_clients),
            concurrency,
            &three_processes,
            run("3r"),
        )
        .await;
        let raw1 = raw(
            Arc::clone(&one_urls),
            concurrency,
            &one_processes,
            run("raw1r"),
        )
        .await;
        let raw3 = raw(
            Arc::clone(&three_urls),
            concurrency,
            &three_processes,
            run("raw3r"),
        )
        .await;
        println!("concurrency {concurrency}");
        print("  direct boundary (baseline)", direct, direct);
        print("  direct, observation as text", rendered, direct);
        print("  one replica, rmcp client", r1, direct);
        print("  three replicas, rmcp client", r3, direct);
        print("  one replica, raw HTTP client", raw1, direct);
        print("  three replicas, raw HTTP client", raw3, direct);
        let ratio = |s: Stats| s.per_second / direct.per_second;
        last.push(format!(
            "ratio_1r_c{concurrency}={:.2} ratio_3r_c{concurrency}={:.2} ratio_raw1r_c{concurrency}={:.2} ratio_raw3r_c{concurrency}={:.2} ratio_1r_rendered_c{concurrency}={:.2}",
            ratio(r1),
            ratio(r3),
            ratio(raw1),
            ratio(raw3),
            r1.per_second / rendered.per_second,
        ));
    }
    let _ = std::fs::remove_file(&config);
    println!("{}", last.join(" "));
}
