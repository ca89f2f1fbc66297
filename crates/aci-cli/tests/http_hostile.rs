//! `aci serve --http` under hostile clients, over real loopback sockets:
//! slowloris connections from several processes (more than the replica's
//! file descriptors), floods of unauthenticated requests, oversized heads,
//! and connections that stall at each step of a request.
//!
//! The hostile clients are `support/hostile_client.py` processes (each
//! binds its own 127.0.0.x source address, so they do not share ephemeral
//! ports); they stop by themselves.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::HANG_GUARD;
use support::files::{config_file, unique};
use support::http::replica::{Replica, get, mcp_post, tools_call_body};
use support::http::{http_client, sha256_hex};
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::{Child, Command};

const TOKEN: &str = "token-of-oncall-bot-5d1e";

fn config(extra: &str) -> PathBuf {
    config_file(
        "hostile",
        &format!(
            "{extra}\n[auth.tokens.oncall-bot]\nsha256 = \"{}\"\n",
            sha256_hex(TOKEN)
        ),
    )
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/hostile_client.py")
}

/// One hostile client process.
struct Attacker {
    child: Child,
    lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
}

impl Attacker {
    /// Starts `mode` against `addr` from `source` with `count` connections
    /// for `seconds`, and waits until it says it is ready.
    async fn start(mode: &str, addr: &str, source: &str, count: usize, seconds: u64) -> Self {
        let (host, port) = addr.rsplit_once(':').unwrap();
        let mut child = Command::new("python3")
            .arg(script())
            .args([
                mode,
                host,
                port,
                source,
                &count.to_string(),
                &seconds.to_string(),
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("python3 runs the hostile clients");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let ready = tokio::time::timeout(HANG_GUARD, lines.next_line())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(ready.as_deref(), Some("ready"), "{mode} from {source}");
        Self { child, lines }
    }

    /// Waits for its end; its counts.
    async fn finish(mut self) -> String {
        let counts = tokio::time::timeout(HANG_GUARD, self.lines.next_line())
            .await
            .unwrap()
            .unwrap()
            .unwrap_or_default();
        let status = tokio::time::timeout(HANG_GUARD, self.child.wait())
            .await
            .unwrap()
            .unwrap();
        assert!(status.success(), "{counts}");
        counts
    }
}

/// A count of an attacker's last line (`key=N ...`).
fn count(counts: &str, key: &str) -> u64 {
    counts
        .split_whitespace()
        .find_map(|pair| pair.strip_prefix(key)?.strip_prefix('='))
        .unwrap_or_else(|| panic!("no {key} in {counts}"))
        .parse()
        .unwrap()
}

/// The hard limit on open files of processes started from here.
fn open_files_limit() -> usize {
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap();
    let line = limits
        .lines()
        .find(|line| line.starts_with("Max open files"))
        .unwrap();
    let hard = line.split_whitespace().nth(4).unwrap();
    hard.parse().unwrap_or(usize::MAX)
}

/// The replica's open file descriptors.
fn descriptors(replica: &Replica) -> usize {
    std::fs::read_dir(format!("/proc/{}/fd", replica.pid()))
        .unwrap()
        .count()
}

/// An authenticated `lookup_knowledge` call over `http`'s keep-alive pool:
/// its latency. Panics unless it is answered with evidence.
async fn timed_call(http: &reqwest::Client, replica: &Replica, run: &str, n: usize) -> Duration {
    let body = tools_call_body(
        1,
        "lookup_knowledge",
        &json!({"query": "connection pool exhausted"}),
        &json!({"aci/run_id": run, "aci/tool_call_id": format!("call_{n}")}),
    );
    let started = Instant::now();
    let response = tokio::time::timeout(
        Duration::from_secs(30),
        mcp_post(http, &replica.url("/mcp"), Some(TOKEN), body.to_string()).send(),
    )
    .await
    .expect("an authenticated call is answered within 30 s")
    .unwrap();
    assert_eq!(response.status(), 200);
    let answer: Value = response.json().await.unwrap();
    let elapsed = started.elapsed();
    assert_eq!(
        answer["result"]["structuredContent"]["evidence_status"], "EVIDENCE_FOUND",
        "{answer}"
    );
    elapsed
}

fn p99(latencies: &mut [Duration]) -> Duration {
    latencies.sort();
    latencies[(latencies.len() * 99).div_ceil(100) - 1]
}

/// A metric's value in the replica's `/metrics` (0 when absent).
async fn metric(replica: &Replica, series: &str) -> f64 {
    let (status, text) = get(&replica.url("/metrics")).await;
    assert_eq!(status, 200);
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .map_or(0.0, |value| value.trim().parse().unwrap())
}

/// Sends `request` on a fresh connection and reads until the replica
/// answers or closes: what it answered (empty: closed without an answer).
fn send_raw(addr: &str, request: &[u8]) -> String {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(HANG_GUARD)).unwrap();
    stream.write_all(request).unwrap();
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    String::from_utf8_lossy(&answer).into_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn authenticated_calls_hold_under_slowloris_from_several_processes_and_a_flood() {
    let replica = Replica::start(&config(""), "memory", &[]).await;
    let addr = replica.addr.clone();
    let http = http_client();
    let run = unique("run");
    let mut n = 0;
    // The idle figure.
    let mut idle = Vec::new();
    for _ in 0..40 {
        n += 1;
        idle.push(timed_call(&http, &replica, &run, n).await);
    }
    let idle_descriptors = descriptors(&replica);
    let idle_memory = replica.memory();

    // 25,000 half-open connections from at least four processes (as many
    // as this machine's open-files limit needs): more than the default cap
    // of 10,000, and than a process may hold where the limit is 20,000.
    let per_process = 6_250.min(open_files_limit().saturating_sub(128));
    let processes = 25_000_usize.div_ceil(per_process);
    let mut attackers = Vec::new();
    for k in 0..processes {
        let source = format!("127.0.{}.{}", 1 + k / 200, 2 + k % 200);
        attackers.push(Attacker::start("slowloris", &addr, &source, per_process, 25).await);
    }
    let mut attacked = Vec::new();
    let mut most_descriptors = 0;
    for _ in 0..60 {
        n += 1;
        attacked.push(timed_call(&http, &replica, &run, n).await);
        most_descriptors = most_descriptors.max(descriptors(&replica));
    }
    // A client that connects during the attack gets in: at the cap an
    // attacker's connection is shed for it.
    let newcomer = http_client();
    let mut newcomer_calls = Vec::new();
    for _ in 0..5 {
        n += 1;
        newcomer_calls.push(timed_call(&newcomer, &replica, &run, n).await);
    }
    drop(newcomer);
    // And a flood of unauthenticated requests on top.
    let flood = Attacker::start("flood", &addr, "127.0.0.6", 200, 8).await;
    for _ in 0..40 {
        n += 1;
        attacked.push(timed_call(&http, &replica, &run, n).await);
        most_descriptors = most_descriptors.max(descriptors(&replica));
    }
    let attacked_memory = replica.memory();
    let flood_counts = flood.finish().await;
    let mut slowloris_counts = Vec::new();
    for attacker in attackers {
        slowloris_counts.push(attacker.finish().await);
    }
    eprintln!("slowloris: {slowloris_counts:?}\nflood: {flood_counts}");
    assert!(
        count(&flood_counts, "status_401") > 0,
        "the flood was answered 401: {flood_counts}"
    );

    // Descriptors stayed under the cap plus the reserve, and the replica
    // never ran out of them.
    assert!(
        most_descriptors <= 10_000 + 512,
        "{most_descriptors} descriptors open"
    );
    assert!(
        !replica.stderr().contains("out of file descriptors"),
        "{}",
        replica.stderr()
    );
    // Memory: at most 64 KiB per admitted connection over the idle figure.
    let grown_kib = attacked_memory.peak_kib.saturating_sub(idle_memory.rss_kib);
    assert!(
        grown_kib <= 10_000 * 64,
        "resident memory grew by {grown_kib} KiB"
    );
    assert!(
        metric(
            &replica,
            "aci_http_connections_closed_total{reason=\"shed\"}"
        )
        .await
            > 0.0
    );

    // The replica recovers by itself: the attackers' connections are gone.
    let deadline = Instant::now() + HANG_GUARD;
    while descriptors(&replica) > idle_descriptors + 64 {
        assert!(
            Instant::now() < deadline,
            "{} descriptors still open",
            descriptors(&replica)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut after = Vec::new();
    for _ in 0..20 {
        n += 1;
        after.push(timed_call(&http, &replica, &run, n).await);
    }
    let (idle_p99, attacked_p99) = (p99(&mut idle), p99(&mut attacked));
    eprintln!(
        "p99 of authenticated calls on a keep-alive connection: idle {idle_p99:?}, under attack {attacked_p99:?} ({:.2}x); a client connecting during the attack: {newcomer_calls:?}; descriptors at most {most_descriptors}; memory grew {grown_kib} KiB",
        attacked_p99.as_secs_f64() / idle_p99.as_secs_f64()
    );
    let (status, stderr) = replica.stop().await;
    assert!(status.success(), "{stderr}");
}

#[tokio::test(flavor = "multi_thread")]
async fn stalled_connections_are_closed_at_their_deadlines_and_oversized_heads_get_431() {
    let replica = Replica::start(
        &config("[serve]\nheader_timeout_secs = 1\nidle_timeout_secs = 2\nbody_timeout_secs = 1\nmax_header_count = 16\nmax_header_bytes = 8192\n"),
        "memory",
        &[],
    )
    .await;
    let addr = replica.addr.clone();

    // Nothing sent, and half a head: closed without an answer, after the
    // header timeout.
    for request in [
        &b""[..],
        b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ",
    ] {
        let started = Instant::now();
        assert_eq!(send_raw(&addr, request), "");
        assert!(started.elapsed() >= Duration::from_millis(900));
    }
    // A head trickled a byte at a time is due whole at the header timeout:
    // bytes arriving do not extend it.
    let mut stream = TcpStream::connect(&addr).unwrap();
    let started = Instant::now();
    let trickled = loop {
        if stream.write_all(b"X").is_err() {
            break true;
        }
        if started.elapsed() > Duration::from_secs(10) {
            break false;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(trickled, "a trickled head was not cut");
    assert!(
        metric(
            &replica,
            "aci_http_connections_closed_total{reason=\"header_timeout\"}"
        )
        .await
            >= 3.0
    );

    // A body announced and never sent: closed after the body timeout.
    let answer = send_raw(
        &addr,
        format!(
            "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: 1000\r\n\r\n{{"
        )
        .as_bytes(),
    );
    assert!(!answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(
        metric(
            &replica,
            "aci_http_connections_closed_total{reason=\"body_timeout\"}"
        )
        .await
            >= 1.0
    );

    // An idle keep-alive connection: open past the header timeout, closed
    // at the idle timeout.
    let mut stream = TcpStream::connect(&addr).unwrap();
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .unwrap();
    let mut buffer = [0_u8; 4096];
    let read = stream.read(&mut buffer).unwrap();
    assert!(buffer[..read].starts_with(b"HTTP/1.1 200"));
    let idle_from = Instant::now();
    stream.set_read_timeout(Some(HANG_GUARD)).unwrap();
    assert_eq!(stream.read(&mut buffer).unwrap(), 0, "closed");
    let idle_for = idle_from.elapsed();
    assert!(idle_for >= Duration::from_millis(1_900), "{idle_for:?}");
    assert!(
        metric(
            &replica,
            "aci_http_connections_closed_total{reason=\"idle_timeout\"}"
        )
        .await
            >= 1.0
    );

    // Too many headers, and too many bytes of them: 431.
    let many: String = (0..40).map(|i| format!("X-H{i}: v\r\n")).collect();
    let answer = send_raw(
        &addr,
        format!("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n{many}\r\n").as_bytes(),
    );
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer}");
    let big = "a".repeat(9_000);
    let answer = send_raw(
        &addr,
        format!("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: {big}\r\n\r\n").as_bytes(),
    );
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer}");

    // Through all of it, the replica answers.
    let (status, _) = get(&replica.url("/healthz")).await;
    assert_eq!(status, 200);
    let (status, stderr) = replica.stop().await;
    assert!(status.success(), "{stderr}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cap_larger_than_the_descriptors_allow_is_refused_at_start() {
    let output = support::command::aci_async(&[
        "serve",
        "--http",
        "127.0.0.1:0",
        "--config",
        config("[serve]\nmax_connections = 100000000\n")
            .to_str()
            .unwrap(),
        "--store",
        "memory",
    ])
    .await;
    assert!(!output.status.success());
    let stderr = support::command::stderr(&output);
    assert!(
        stderr.contains("max_connections = 100000000 leaves fewer than 512"),
        "{stderr}"
    );
    for (key, message) in [
        (
            "header_timeout_secs = 0",
            "header_timeout_secs must be at least 1",
        ),
        (
            "max_header_bytes = 100",
            "max_header_bytes must be at least 8192",
        ),
        ("max_connections = 0", "max_connections must be at least 1"),
    ] {
        let output = support::command::aci_async(&[
            "serve",
            "--http",
            "127.0.0.1:0",
            "--config",
            config(&format!("[serve]\n{key}\n")).to_str().unwrap(),
            "--store",
            "memory",
        ])
        .await;
        assert!(!output.status.success());
        let stderr = support::command::stderr(&output);
        assert!(stderr.contains(message), "{key}: {stderr}");
    }
}
