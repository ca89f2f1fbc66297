//! `cargo xtask bench traces`: the CPU cost of tracing per call. Two `aci
//! serve --http` replicas (memory store, no authentication) answer the same
//! `query_logs` calls: one with telemetry off (the baseline), one exporting
//! every call's spans (`[telemetry] sample_ratio = 1.0`) over OTLP/HTTP to a
//! live receiver in this process, which decodes every export request and
//! answers 200. A row's figure is the replica's CPU time per call (every
//! thread of the process, the export thread included, from
//! `/proc/<pid>/task/*/schedstat`), read once the receiver holds every span
//! of the calls so far (so the export of a row's calls is in its figure);
//! the ratio is on over off, the median over
//! `ACI_BENCH_ROUNDS` rounds (default 20) of `ACI_BENCH_CALLS` calls to each
//! replica (default 1,500, after 300 warm-up calls), at 4 concurrent calls
//! per replica over one keep-alive HTTP/1.1 connection per worker. The two
//! replicas take a round's calls side by side, over the same interval: on a
//! machine whose speed drifts within seconds, rows measured one after the
//! other differed by ±15 % between rounds, rows measured together move
//! together. Each round has two fresh replicas, started in turn first: two
//! processes of one binary differ by a few % in CPU per call for their whole
//! life (an A/A run, both untraced, kept for a whole run: 0.975; fresh each
//! round: 1.012, all rounds together 1.000).
//! The last line is machine-readable (`cpu_ratio_on_off=…`).
//!
//! Needs `ACI_BIN` (the release `aci` binary; the xtask sets it). Loopback
//! only.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::net::SocketAddr;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use http_body_util::{BodyExt as _, Full};
use hyper::body::Bytes;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::process::{Child, Command};

const DEFAULT_CALLS: usize = 1_500;
const DEFAULT_ROUNDS: usize = 20;
/// Spans of one READY `query_logs` call: `tools/call`, `execute_tool` and
/// its three phases.
const SPANS_PER_CALL: u64 = 5;
const WARM_UP: usize = 300;
const WORKERS: usize = 4;
const ARGUMENTS: &str = r#"{"topic":"APPLICATION","query":"timeout"}"#;

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

/// CPU time of every thread of process `pid` so far, in nanoseconds.
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

/// What the receiver took in: export requests, their bytes and spans.
#[derive(Default)]
struct Received {
    requests: AtomicU64,
    bytes: AtomicU64,
    spans: AtomicU64,
    arrived: tokio::sync::Notify,
}

/// A live OTLP/HTTP receiver: reads each request whole (headers, then
/// `content-length` bytes), decodes it, counts its spans and answers `200`
/// with an empty protobuf body.
async fn receiver() -> (String, Arc<Received>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let received = Arc::new(Received::default());
    let counts = Arc::clone(&received);
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            let counts = Arc::clone(&counts);
            tokio::spawn(async move {
                let mut socket = BufReader::new(socket);
                loop {
                    let mut length = 0_usize;
                    let mut line = String::new();
                    loop {
                        line.clear();
                        if socket.read_line(&mut line).await.unwrap_or(0) == 0 {
                            return;
                        }
                        if line == "\r\n" {
                            break;
                        }
                        if let Some((name, value)) = line.split_once(':')
                            && name.eq_ignore_ascii_case("content-length")
                        {
                            length = value.trim().parse().unwrap_or(0);
                        }
                    }
                    let mut body = vec![0_u8; length];
                    if socket.read_exact(&mut body).await.is_err() {
                        return;
                    }
                    let request =
                        <ExportTraceServiceRequest as prost::Message>::decode(body.as_slice())
                            .expect("an OTLP export request");
                    let spans: usize = request
                        .resource_spans
                        .iter()
                        .flat_map(|r| &r.scope_spans)
                        .map(|s| s.spans.len())
                        .sum();
                    counts.requests.fetch_add(1, Ordering::Relaxed);
                    counts.bytes.fetch_add(length as u64, Ordering::Relaxed);
                    counts.spans.fetch_add(spans as u64, Ordering::Relaxed);
                    counts.arrived.notify_waiters();
                    let reply = b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n";
                    if socket.get_mut().write_all(reply).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (endpoint, received)
}

struct Replica {
    child: Child,
    addr: SocketAddr,
}

async fn replica(bin: &str, config: &std::path::Path) -> Replica {
    let mut child = Command::new(bin)
        .args([
            "serve",
            "--http",
            "127.0.0.1:0",
            "--insecure-no-auth",
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
        if let Some(rest) = line.strip_prefix("aci: serving MCP over HTTP at http://") {
            let addr = rest.trim_end_matches("/mcp").parse().unwrap();
            tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
            return Replica { child, addr };
        }
    }
}

async fn connect(addr: SocketAddr) -> SendRequest<Full<Bytes>> {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.set_nodelay(true).unwrap();
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(connection);
    sender
}

/// `count` READY calls of run `run` to `addr` from [`WORKERS`] workers.
async fn calls(addr: SocketAddr, run: &str, count: usize) {
    let mut workers = Vec::new();
    for worker in 0..WORKERS {
        let run = run.to_owned();
        workers.push(tokio::spawn(async move {
            let mut sender = connect(addr).await;
            for i in (worker..count).step_by(WORKERS) {
                let body = format!(
                    r#"{{"jsonrpc":"2.0","id":{i},"method":"tools/call","params":{{"name":"query_logs","arguments":{ARGUMENTS},"_meta":{{"aci/run_id":"{run}","aci/tool_call_id":"c{i}"}}}}}}"#
                );
                let request = hyper::Request::post("/mcp")
                    .header("host", addr.to_string())
                    .header("content-type", "application/json")
                    .header("accept", "application/json, text/event-stream")
                    .body(Full::new(Bytes::from(body)))
                    .unwrap();
                sender.ready().await.unwrap();
                let response = sender.send_request(request).await.unwrap();
                assert_eq!(response.status(), 200);
                let body = response.into_body().collect().await.unwrap().to_bytes();
                assert!(
                    memchr::memmem::find(&body, br#""isError":false"#).is_some(),
                    "a call was not READY"
                );
            }
        }));
    }
    for worker in workers {
        worker.await.unwrap();
    }
}

/// `aci_telemetry_dropped_spans_total` of `replica`'s `/metrics`.
async fn dropped_spans(replica: &Replica) -> u64 {
    let mut sender = connect(replica.addr).await;
    let request = hyper::Request::get("/metrics")
        .header("host", replica.addr.to_string())
        .body(Full::new(Bytes::new()))
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8_lossy(&body)
        .lines()
        .find_map(|l| l.strip_prefix("aci_telemetry_dropped_spans_total "))
        .and_then(|n| n.trim().parse().ok())
        .expect("the dropped spans counter")
}

/// Waits until `received` holds `spans` spans (the replica exports within
/// its delay).
async fn exported(received: &Received, spans: u64) {
    let arrived = async {
        loop {
            let notified = received.arrived.notified();
            if received.spans.load(Ordering::Relaxed) >= spans {
                return;
            }
            notified.await;
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(60), arrived)
        .await
        .expect("the traced replica's spans never all arrived");
}

/// Both replicas take `count` calls of a fresh run each (named by `tag`),
/// side by side; returns once the receiver holds all their spans
/// (`expected`, the spans so far, counts these calls' in).
async fn both(
    rows: &[(&str, Replica); 2],
    tag: &str,
    count: usize,
    received: &Received,
    expected: &mut u64,
) {
    let [(off_tag, off), (on_tag, on)] = rows;
    let runs = [
        format!("run-{off_tag}-{tag}"),
        format!("run-{on_tag}-{tag}"),
    ];
    tokio::join!(
        calls(off.addr, &runs[0], count),
        calls(on.addr, &runs[1], count),
    );
    *expected += count as u64 * SPANS_PER_CALL;
    exported(received, *expected).await;
}

/// CPU microseconds per call of each replica (off, on) over `count` calls
/// of a fresh run each, made side by side: both replicas take their calls
/// over the same interval, so a slow spell of the machine falls on both.
/// The figures include every span of these calls: CPU is read once the
/// receiver holds them all (`expected`, the spans so far).
async fn side_by_side(
    rows: &[(&str, Replica); 2],
    tag: &str,
    count: usize,
    received: &Received,
    expected: &mut u64,
) -> [f64; 2] {
    let pids = rows
        .each_ref()
        .map(|(_, replica)| replica.child.id().expect("the replica runs"));
    both(rows, &format!("warm-{tag}"), WARM_UP, received, expected).await;
    let before = pids.map(cpu_ns);
    both(rows, tag, count, received, expected).await;
    let after = pids.map(cpu_ns);
    [0, 1].map(|row| (after[row] - before[row]) as f64 / 1_000.0 / count as f64)
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    if !aci_bench::full_run() {
        return;
    }
    let bin = std::env::var("ACI_BIN").expect("ACI_BIN: the release aci binary");
    let calls_per_round = env_count("ACI_BENCH_CALLS", DEFAULT_CALLS);
    let rounds = env_count("ACI_BENCH_ROUNDS", DEFAULT_ROUNDS);
    let dir = tempfile::tempdir().unwrap();
    let (endpoint, received) = receiver().await;
    let off_config = dir.path().join("off.toml");
    std::fs::write(&off_config, "").unwrap();
    let on_config = dir.path().join("on.toml");
    std::fs::write(
        &on_config,
        format!("[telemetry]\notlp_endpoint = \"{endpoint}\"\nsample_ratio = 1.0\n"),
    )
    .unwrap();
    println!(
        "traces: {rounds} rounds of {calls_per_round} query_logs calls, {WORKERS} concurrent, per replica"
    );
    let mut per_row = [Vec::new(), Vec::new()];
    let mut ratios = Vec::new();
    // Spans the traced replica has exported so far (when all have arrived).
    let mut expected = 0;
    let mut dropped = 0;
    for round in 0..rounds {
        // Fresh replicas each round, started in turn first: two processes
        // of the same binary differ by a few % in CPU per call (an A/A run
        // of two untraced replicas kept for the whole run gave 0.975).
        let (off, on) = if round % 2 == 0 {
            let off = replica(&bin, &off_config).await;
            (off, replica(&bin, &on_config).await)
        } else {
            let on = replica(&bin, &on_config).await;
            (replica(&bin, &off_config).await, on)
        };
        let rows = [("off", off), ("on", on)];
        let figures = side_by_side(
            &rows,
            &round.to_string(),
            calls_per_round,
            &received,
            &mut expected,
        )
        .await;
        // A dropped span would make tracing look cheaper than it is.
        dropped += dropped_spans(&rows[1].1).await;
        println!(
            "round {round}: off {:.1} us/call, on {:.1} us/call",
            figures[0], figures[1]
        );
        per_row[0].push(figures[0]);
        per_row[1].push(figures[1]);
        ratios.push(figures[1] / figures[0]);
    }
    let requests = received.requests.load(Ordering::Relaxed);
    assert!(requests > 0, "the receiver got no export");
    assert_eq!(
        received.spans.load(Ordering::Relaxed),
        expected,
        "the receiver got spans of no call"
    );
    println!("spans dropped by the traced replicas: {dropped}");
    let (ratio, low, high) = aci_bench::spread(&ratios);
    println!(
        "CPU per call (median): off {:.1} us, on {:.1} us; the receiver took {requests} exports, {} KiB",
        aci_bench::median(per_row[0].clone()),
        aci_bench::median(per_row[1].clone()),
        received.bytes.load(Ordering::Relaxed) / 1024
    );
    let overall = per_row[1].iter().sum::<f64>() / per_row[0].iter().sum::<f64>();
    println!(
        "tracing on / off, CPU per call: {ratio:.3} [{low:.3}, {high:.3}] (goal: at most 1.05); every round's CPU together: {overall:.3}"
    );
    println!("cpu_ratio_on_off={ratio:.3}");
}
