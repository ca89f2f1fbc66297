//! `cargo xtask bench http`: calls per second and p50/p99 latency of
//! `query_logs` calls through one and through three `aci serve --http`
//! replicas on one Redis, against the same calls made directly on a
//! `ToolBoundary` over the same Redis in the same run (the baseline), at 1
//! and 16 concurrent calls. Prints the ratios, and a replica's CPU per call
//! over the direct boundary's; the last line is machine-readable
//! (`ratio_1r_c16=… ratio_raw1r_c16=… cpu_ratio_c16=…`).
//!
//! Two clients drive the replicas: the rmcp client (what an MCP framework
//! uses: its own service task, JSON-RPC (de)serialisation, reqwest), and a
//! lean HTTP/1.1 client (hyper, one keep-alive connection per worker and
//! replica, a JSON-RPC `tools/call` POSTed as text, READY read off the reply
//! bytes: about the least a client can pay, so that the row shows the
//! server rather than the client). The client, the replicas and Redis share
//! the machine's cores, so a client's own cost counts against the replica's
//! figure: each row also prints CPU time per call of the bench process (the
//! client; for the baseline, the boundary itself), of the replicas and of
//! Redis, read from `/proc/<pid>/task/*/schedstat` and Redis's `INFO cpu`.
//! A second direct row also renders each observation as JSON text once
//! (what any integration hands the model); the baseline row does not.
//!
//! Every row is measured `ACI_BENCH_ROUNDS` times (default 5), the rows of
//! a round in a rotated order, each round on a fresh run. A row's figures
//! are its median round's; a ratio is the median over the rounds of the
//! row's rate over the baseline's rate in the same round (with the lowest
//! and highest in brackets), so a slow spell of the machine moves both
//! sides of a ratio. `ACI_BENCH_CALLS` sets the calls per row and round
//! (default 4,000, after 300 warm-up calls); `ACI_BENCH_CONCURRENCY=16` and
//! `ACI_BENCH_ROWS=raw1r,1r` measure at that concurrency and those rows
//! (with the baseline) only.
//!
//! The bench process uses the allocator the `aci` binary uses, so the
//! baseline and the replicas run the boundary on the same allocator.
//!
//! Needs `ACI_BIN` (the release `aci` binary; the xtask sets it) and a
//! `redis-server` on PATH (spawned on a free loopback port). Loopback only,
//! bounded in count.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::net::SocketAddr;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use http_body_util::{BodyExt as _, Full};
use hyper::body::Bytes;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
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

#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

const DEFAULT_CALLS: usize = 4_000;
const DEFAULT_ROUNDS: usize = 5;
/// Calls before each measured row (connections, pools, caches).
const WARM_UP: usize = 300;
const ARGUMENTS: &str = r#"{"topic":"APPLICATION","query":"timeout"}"#;
const TOKEN: &str = "bench-token-5d1e";

fn env_count(name: &str, default: usize) -> usize {
    match std::env::var(name) {
        Ok(text) => text
            .parse()
            .ok()
            .filter(|n| *n > 0)
            .unwrap_or_else(|| panic!("{name} must be a positive whole number")),
        Err(_) => default,
    }
}

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

/// How a row's calls are made.
enum Driver {
    /// `ToolBoundary::invoke` in this process; `render` also turns each
    /// observation into its JSON text.
    Direct {
        boundary: Arc<ToolBoundary>,
        render: bool,
    },
    /// The rmcp client, call `i` on client `i % len`.
    Rmcp(Vec<RunningService<RoleClient, ()>>),
    /// The lean HTTP client: each worker holds a connection to every
    /// replica, call `i` goes to replica `i % len`.
    Raw(Vec<SocketAddr>),
}

/// One worker's means of calling: its row's driver and, for the lean
/// client, the worker's own connections (one per replica).
struct Caller {
    driver: Arc<Driver>,
    connections: Vec<(String, SendRequest<Full<Bytes>>)>,
}

impl Caller {
    async fn new(driver: &Arc<Driver>) -> Self {
        let mut connections = Vec::new();
        if let Driver::Raw(addrs) = &**driver {
            for addr in addrs {
                connections.push((addr.to_string(), connect(*addr).await));
            }
        }
        Self {
            driver: Arc::clone(driver),
            connections,
        }
    }
}

/// One keep-alive HTTP/1.1 connection.
async fn connect(addr: SocketAddr) -> SendRequest<Full<Bytes>> {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.set_nodelay(true).unwrap();
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(connection);
    sender
}

impl Caller {
    /// Call number `i` of `run`, with tool call id `id`; whether it was READY.
    async fn call(&mut self, i: usize, run: &str, id: String) -> bool {
        match &*self.driver {
            Driver::Direct { boundary, render } => {
                let ctx = RunContext::new(
                    aci_contracts::RunId::new(run).unwrap(),
                    invocation_core::CallPolicy::AUTHORIZED_READ_ONLY,
                );
                let envelope = ToolEnvelope::new(id, run, "query_logs", ARGUMENTS);
                let observation = boundary.invoke(&ctx, envelope).await.observation;
                !observation.is_error() && (!*render || !observation.to_json_string().is_empty())
            }
            Driver::Rmcp(clients) => {
                let mut params = CallToolRequestParams::new("query_logs")
                    .with_arguments(serde_json::from_str(ARGUMENTS).unwrap());
                let meta = json!({"aci/run_id": run, "aci/tool_call_id": id});
                params.set_meta(RequestMetaObject::from(meta.as_object().unwrap().clone()));
                let result = clients[i % clients.len()].call_tool(params).await.unwrap();
                result.is_error == Some(false)
            }
            Driver::Raw(_) => {
                let count = self.connections.len();
                let (authority, sender) = &mut self.connections[i % count];
                let body = format!(
                    r#"{{"jsonrpc":"2.0","id":{i},"method":"tools/call","params":{{"name":"query_logs","arguments":{ARGUMENTS},"_meta":{{"aci/run_id":"{run}","aci/tool_call_id":"{id}"}}}}}}"#
                );
                let request = hyper::Request::post("/mcp")
                    .header("host", authority.as_str())
                    .header("authorization", format!("Bearer {TOKEN}"))
                    .header("content-type", "application/json")
                    .header("accept", "application/json, text/event-stream")
                    .body(Full::new(Bytes::from(body)))
                    .unwrap();
                if sender.ready().await.is_err() {
                    return false;
                }
                let Ok(response) = sender.send_request(request).await else {
                    return false;
                };
                if response.status() != 200 {
                    return false;
                }
                let Ok(body) = response.into_body().collect().await else {
                    return false;
                };
                memchr::memmem::find(&body.to_bytes(), br#""isError":false"#).is_some()
            }
        }
    }
}

/// Makes `count` calls of `run` with `callers.len()` workers (tool call ids
/// `<tag><i>`); gives the callers back with every call's latency.
async fn phase(
    callers: Vec<Caller>,
    run: &Arc<str>,
    tag: &'static str,
    count: usize,
) -> (Vec<Caller>, Vec<Duration>) {
    let next = Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = callers
        .into_iter()
        .map(|mut caller| {
            let next = Arc::clone(&next);
            let run = Arc::clone(run);
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= count {
                        return (caller, latencies);
                    }
                    let started = Instant::now();
                    assert!(
                        caller.call(i, &run, format!("{tag}{i}")).await,
                        "{tag}{i} was not READY"
                    );
                    latencies.push(started.elapsed());
                }
            })
        })
        .collect();
    let mut callers = Vec::new();
    let mut latencies = Vec::with_capacity(count);
    for worker in workers {
        let (caller, mut own) = worker.await.unwrap();
        callers.push(caller);
        latencies.append(&mut own);
    }
    (callers, latencies)
}

/// [`WARM_UP`] calls, then `calls` measured calls, `concurrency` at a time,
/// in a fresh run.
async fn measure(
    driver: &Arc<Driver>,
    concurrency: usize,
    processes: &Processes,
    calls: usize,
) -> Stats {
    let run: Arc<str> = Arc::from(format!(
        "run-bench-{}",
        store_redis::testing::unique_prefix()
    ));
    let mut callers = Vec::new();
    for _ in 0..concurrency {
        callers.push(Caller::new(driver).await);
    }
    let (callers, _) = phase(callers, &run, "warm_", WARM_UP).await;
    let cpu = Cpu::read(&processes.servers, &processes.redis).await;
    let started = Instant::now();
    let (_, latencies) = phase(callers, &run, "call_", calls).await;
    let elapsed = started.elapsed();
    let end = Cpu::read(&processes.servers, &processes.redis).await;
    let per_call = |from: u64, to: u64| to.saturating_sub(from) as f64 / 1e3 / calls as f64;
    Stats {
        cpu_client_us: per_call(cpu.client, end.client),
        cpu_server_us: per_call(cpu.server, end.server),
        cpu_redis_us: per_call(cpu.redis, end.redis),
        ..stats(latencies, elapsed)
    }
}

/// One row: how its calls are made and whose CPU it reads.
struct Row {
    label: &'static str,
    /// The row's key in the last line (`ratio_<key>_c<concurrency>`).
    key: &'static str,
    driver: Arc<Driver>,
    processes: Processes,
}

/// A row's rounds, summed up against the baseline's rounds.
struct Summary {
    /// The round of the median rate.
    median: Stats,
    /// Median, lowest and highest of the per-round ratios to the baseline.
    ratio: (f64, f64, f64),
}

fn summarize(rounds: &[Stats], baseline: &[Stats]) -> Summary {
    let mut by_rate = rounds.to_vec();
    by_rate.sort_by(|a, b| a.per_second.total_cmp(&b.per_second));
    let ratios: Vec<f64> = rounds
        .iter()
        .zip(baseline)
        .map(|(row, base)| row.per_second / base.per_second)
        .collect();
    Summary {
        median: by_rate[by_rate.len() / 2],
        ratio: aci_bench::spread(&ratios),
    }
}

/// The replica's own CPU per call over the direct boundary's, per round
/// (median, lowest, highest), from the one-replica row of the lean client
/// (else of the rmcp client), with that row's key: the replica's CPU does
/// not depend on the client, and the baseline's process CPU is the boundary
/// itself (and the loop driving it).
fn replica_cpu_ratio(
    rows: &[Row],
    measured: &[Vec<Stats>],
) -> Option<(&'static str, (f64, f64, f64))> {
    let index = ["raw1r", "1r"]
        .iter()
        .find_map(|key| rows.iter().position(|row| row.key == *key))?;
    let ratios: Vec<f64> = measured[index]
        .iter()
        .zip(&measured[0])
        .map(|(replica, direct)| replica.cpu_server_us / direct.cpu_client_us)
        .collect();
    Some((rows[index].key, aci_bench::spread(&ratios)))
}

fn print(label: &str, summary: &Summary) {
    let s = summary.median;
    let (ratio, low, high) = summary.ratio;
    println!(
        "{label:<34} {:>6.0} calls/s {ratio:.2} ({low:.2}-{high:.2})  p50 {:>5.2} ms  p99 {:>5.2} ms  CPU/call: client {:>4.0} us, replicas {:>4.0} us, Redis {:>3.0} us",
        s.per_second, s.p50_ms, s.p99_ms, s.cpu_client_us, s.cpu_server_us, s.cpu_redis_us,
    );
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

/// The socket address of a replica's `http://ADDR/mcp` URL.
fn socket_addr(url: &str) -> SocketAddr {
    url.trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .parse()
        .unwrap()
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    if !aci_bench::full_run() {
        return;
    }
    let bin = std::env::var("ACI_BIN").expect("ACI_BIN: the aci binary to benchmark");
    let calls = env_count("ACI_BENCH_CALLS", DEFAULT_CALLS);
    let rounds = env_count("ACI_BENCH_ROUNDS", DEFAULT_ROUNDS);
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
    // `ACI_BENCH_COMPARE_BIN`: another `aci` binary, measured in the same
    // rounds as one more replica (a paired comparison of two builds).
    let compare = match std::env::var("ACI_BENCH_COMPARE_BIN") {
        Ok(other) => Some(replica(&other, &store_url, &config).await),
        Err(_) => None,
    };
    let one_clients = vec![client(&one.url).await];
    let mut three_clients = Vec::new();
    for r in &three {
        three_clients.push(client(&r.url).await);
    }

    let redis = store_url
        .trim_start_matches("redis://")
        .trim_end_matches('/')
        .to_owned();
    let direct = Processes {
        servers: Vec::new(),
        redis: redis.clone(),
    };
    let one_replica = Processes {
        servers: vec![one.pid()],
        redis: redis.clone(),
    };
    let three_replicas = Processes {
        servers: three.iter().map(Replica::pid).collect(),
        redis,
    };
    let mut rows = vec![
        Row {
            label: "  direct boundary (baseline)",
            key: "direct",
            driver: Arc::new(Driver::Direct {
                boundary: Arc::clone(&boundary),
                render: false,
            }),
            processes: direct.clone(),
        },
        Row {
            label: "  direct, observation as text",
            key: "rendered",
            driver: Arc::new(Driver::Direct {
                boundary: Arc::clone(&boundary),
                render: true,
            }),
            processes: direct,
        },
        Row {
            label: "  one replica, rmcp client",
            key: "1r",
            driver: Arc::new(Driver::Rmcp(one_clients)),
            processes: one_replica.clone(),
        },
        Row {
            label: "  three replicas, rmcp client",
            key: "3r",
            driver: Arc::new(Driver::Rmcp(three_clients)),
            processes: three_replicas.clone(),
        },
        Row {
            label: "  one replica, lean HTTP client",
            key: "raw1r",
            driver: Arc::new(Driver::Raw(vec![socket_addr(&one.url)])),
            processes: one_replica.clone(),
        },
        Row {
            label: "  three replicas, lean HTTP client",
            key: "raw3r",
            driver: Arc::new(Driver::Raw(
                three.iter().map(|r| socket_addr(&r.url)).collect(),
            )),
            processes: three_replicas,
        },
    ];

    if let Some(other) = &compare {
        let processes = Processes {
            servers: vec![other.pid()],
            redis: one_replica.redis.clone(),
        };
        rows.push(Row {
            label: "  compared replica, rmcp client",
            key: "cmp1r",
            driver: Arc::new(Driver::Rmcp(vec![client(&other.url).await])),
            processes: processes.clone(),
        });
        rows.push(Row {
            label: "  compared replica, lean HTTP client",
            key: "cmpraw1r",
            driver: Arc::new(Driver::Raw(vec![socket_addr(&other.url)])),
            processes,
        });
    }
    // `ACI_BENCH_ROWS=raw1r,1r` measures those rows (and the baseline) only.
    let wanted = std::env::var("ACI_BENCH_ROWS").ok();
    let rows: Vec<Row> = rows
        .into_iter()
        .filter(|row| {
            row.key == "direct"
                || wanted
                    .as_deref()
                    .is_none_or(|keys| keys.split(',').any(|k| k.trim() == row.key))
        })
        .collect();
    let concurrencies: Vec<usize> = std::env::var("ACI_BENCH_CONCURRENCY").map_or_else(
        |_| vec![1, 16],
        |text| {
            text.split(',')
                .map(|c| c.trim().parse().expect("ACI_BENCH_CONCURRENCY: numbers"))
                .collect()
        },
    );
    println!(
        "{calls} query_logs calls per row and round (after {WARM_UP} warm-up calls), {rounds} rounds, distinct tool call ids, Redis at loopback"
    );
    println!(
        "figures of the median round; ratio to the direct boundary: median of the rounds (lowest-highest)"
    );
    let mut last = Vec::new();
    for concurrency in concurrencies {
        let mut measured: Vec<Vec<Stats>> = rows.iter().map(|_| Vec::new()).collect();
        for round in 0..rounds {
            for index in aci_bench::rotated(rows.len(), round) {
                let row = &rows[index];
                let stats = measure(&row.driver, concurrency, &row.processes, calls).await;
                measured[index].push(stats);
            }
        }
        println!("concurrency {concurrency}");
        let baseline = &measured[0];
        for (row, rounds) in rows.iter().zip(&measured) {
            let summary = summarize(rounds, baseline);
            print(row.label, &summary);
            if row.key != "direct" {
                last.push(format!(
                    "ratio_{}_c{concurrency}={:.2}",
                    row.key, summary.ratio.0
                ));
            }
        }
        if let Some((key, (ratio, low, high))) = replica_cpu_ratio(&rows, &measured) {
            println!(
                "{:<34} {ratio:.2} ({low:.2}-{high:.2}) (goal <= 1.2; the {key} row's replica against the baseline's boundary)",
                "  replica CPU / direct CPU per call"
            );
            last.push(format!("cpu_ratio_c{concurrency}={ratio:.2}"));
        }
    }
    let _ = std::fs::remove_file(&config);
    println!("{}", last.join(" "));
}
