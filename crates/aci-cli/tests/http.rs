//! End to end over real sockets: `aci serve --http` child processes, driven by
//! the rmcp client over Streamable HTTP and by raw HTTP requests.
//!
//! Every `structuredContent` is validated against the frozen schemas.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::{Path, PathBuf};

use projectors_mysql::testing::TestDatabase;
use rmcp::model::Tool;
use serde_json::{Value, json};
use support::HANG_GUARD;
use support::command::{aci_async, inspect, stderr, stdout};
use support::contract::{McpClient, assert_clean, call, call_id, error_code, frozen_tools, ids};
use support::files::{config_file, temp_file, unique, unique_suffix};
use support::http::general_log::GeneralLog;
use support::http::keys::{SigningKey, claims, jwks, now};
use support::http::replica::{
    Memory, Replica, get, mcp_post, post_call, post_json, spawn_post_call, tools_call_body,
};
use support::http::{http_client, sha256_hex};

const ISSUER: &str = "https://login.example.test/";
const AUDIENCE: &str = "aci";

/// A static token and its principal.
const TOKEN_A: &str = "token-of-oncall-bot-7f3a";
const TOKEN_B: &str = "token-of-other-bot-91c2";

/// The issuer's keys: RS256, ES256 and EdDSA.
struct Keys {
    rsa: SigningKey,
    ec: SigningKey,
    ed: SigningKey,
}

impl Keys {
    fn new() -> Self {
        Self {
            rsa: SigningKey::rsa(),
            ec: SigningKey::es256("test-ec"),
            ed: SigningKey::ed25519("test-ed"),
        }
    }
}

/// A config with two static tokens (`oncall-bot`, `other-bot`) and the JWT
/// issuer of `keys`, plus `extra` TOML.
fn config(keys: &Keys, extra: &str) -> PathBuf {
    let jwks_file = temp_file("jwks.json", &jwks(&[&keys.rsa, &keys.ec, &keys.ed]));
    let toml = format!(
        r#"{extra}
[auth.tokens.oncall-bot]
sha256 = "{a}"
[auth.tokens.other-bot]
sha256 = "{b}"
[auth.jwt]
issuer = "{ISSUER}"
audience = "{AUDIENCE}"
jwks_file = "{jwks}"
leeway_secs = 5
"#,
        a = sha256_hex(TOKEN_A),
        b = sha256_hex(TOKEN_B),
        jwks = jwks_file.display(),
    );
    config_file("config", &toml)
}

/// `query_logs` arguments the mock log source has evidence for.
fn timeout_logs() -> Value {
    json!({"topic": "APPLICATION", "query": "timeout"})
}

/// The `[mysql.data_sources.shop]` section naming `db`, with a minute of
/// statement time.
fn shop_source(db: &TestDatabase) -> String {
    format!(
        "[mysql.data_sources.shop]\nurl = \"{}\"\ntimeout_ms = 60000\n",
        db.reader_url()
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn the_rmcp_client_lists_and_calls_each_tool() {
    let keys = Keys::new();
    let replica = Replica::start(&config(&keys, ""), "memory", &[]).await;
    let client = replica.client("/mcp", Some(TOKEN_A)).await;
    let info = client.peer_info().unwrap();
    assert_eq!(info.server_info.as_ref().unwrap().name, "aci");

    let tools: Vec<Tool> = client.list_all_tools().await.unwrap();
    let listed: Vec<Value> = tools
        .iter()
        .map(|t| serde_json::to_value(t).unwrap())
        .collect();
    assert!(
        Value::Array(listed) == frozen_tools(),
        "tools/list differs from schemas/tools.mcp.json"
    );

    let run = unique("run");
    let found = call(
        &client,
        "lookup_knowledge",
        json!({"query": "connection pool exhausted"}),
        ids(&run, "call_k1"),
    )
    .await;
    assert_eq!(found["evidence_status"], "EVIDENCE_FOUND");
    let none = call(
        &client,
        "lookup_knowledge",
        json!({"query": "quarterly marketing budget zebra"}),
        ids(&run, "call_k2"),
    )
    .await;
    assert_eq!(none["evidence_status"], "NO_EVIDENCE");
    let logs = call(&client, "query_logs", timeout_logs(), ids(&run, "call_l1")).await;
    assert_eq!(logs["evidence_status"], "EVIDENCE_FOUND");
    let mysql = call(&client, "query_mysql", json!({"data_source": "orders", "sql": "SELECT id FROM orders WHERE id = ?", "params": [1]}), ids(&run, "call_m1")).await;
    assert_eq!(error_code(&mysql), "DATA_SOURCE_UNKNOWN");
    assert_eq!(mysql["tool_call_id"], "call_m1");

    // Every preflight error is an error result.
    let cases = [
        (
            "no_such_tool",
            json!({"query": "x"}),
            ids(&run, "call_p1"),
            "UNKNOWN_TOOL",
        ),
        (
            "lookup_knowledge",
            json!({"qery": "x"}),
            ids(&run, "call_p2"),
            "INVALID_INPUT",
        ),
        (
            "lookup_knowledge",
            Value::Null,
            ids(&run, "call_p3"),
            "INVALID_INPUT",
        ),
        (
            "lookup_knowledge",
            json!({"query": "x"}),
            ids(&run, "bad id"),
            "INVALID_TOOL_CALL_ID",
        ),
        (
            "lookup_knowledge",
            json!({"query": "x"}),
            ids("bad run", "call_p4"),
            "RUN_MISMATCH",
        ),
        (
            "lookup_knowledge",
            json!({"query": "x"}),
            json!({"aci/tool_call_id": "call_p5"}),
            "RUN_MISMATCH",
        ),
        (
            "query_mysql",
            json!({"data_source": "orders", "sql": format!("SELECT {}1", "1+".repeat(10_000))}),
            ids(&run, "call_p6"),
            "REQUEST_TOO_LARGE",
        ),
        (
            "lookup_knowledge",
            json!({"query": "again"}),
            ids(&run, "call_k1"),
            "DUPLICATE_TOOL_CALL",
        ),
    ];
    for (tool, arguments, meta, code) in cases {
        let observation = call(&client, tool, arguments, meta.clone()).await;
        assert_eq!(error_code(&observation), code, "{tool} {meta}");
    }
    client.cancel().await.unwrap();

    // A generic client pointed at one run by its URL: the tool call id is the
    // JSON-RPC id.
    let path_run = unique("run");
    let client = replica
        .client(&format!("/runs/{path_run}/mcp"), Some(TOKEN_A))
        .await;
    let observation = call(&client, "query_logs", timeout_logs(), Value::Null).await;
    assert_eq!(observation["evidence_status"], "EVIDENCE_FOUND");
    let first_id = observation["tool_call_id"].as_str().unwrap().to_owned();
    assert!(first_id.starts_with("mcp:http-"), "{first_id}");
    client.cancel().await.unwrap();
    // A second client sends the same JSON-RPC ids: its calls are its own,
    // never DUPLICATE of the first client's.
    let client = replica
        .client(&format!("/runs/{path_run}/mcp"), Some(TOKEN_A))
        .await;
    let observation = call(&client, "query_logs", timeout_logs(), Value::Null).await;
    assert_eq!(
        observation["evidence_status"], "EVIDENCE_FOUND",
        "{observation}"
    );
    assert_ne!(
        observation["tool_call_id"].as_str(),
        Some(first_id.as_str())
    );
    client.cancel().await.unwrap();

    let (status, stderr) = replica.stop().await;
    assert!(status.success(), "{stderr}");
    let logs: String = stderr
        .lines()
        .filter(|l| !l.starts_with("aci: serving MCP over HTTP at http://"))
        .collect();
    assert_clean(&logs, "stderr");
    assert!(!stderr.contains(TOKEN_A));
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_credentials_are_401_and_record_nothing() {
    let keys = Keys::new();
    let replica = Replica::start(&config(&keys, ""), "memory", &[]).await;
    let url = replica.url("/mcp");
    let run = unique("run");
    let arguments = timeout_logs();
    let stranger = SigningKey::ed25519("test-ed");
    let expired = {
        let mut c = claims(ISSUER, AUDIENCE, "agent-1");
        c["exp"] = json!(now() - 120);
        c["nbf"] = json!(now() - 600);
        keys.ec.sign(&c)
    };
    let not_yet = {
        let mut c = claims(ISSUER, AUDIENCE, "agent-1");
        c["nbf"] = json!(now() + 600);
        keys.ec.sign(&c)
    };
    let refused: Vec<(&str, Option<String>)> = vec![
        ("no token", None),
        ("wrong token", Some("token-of-oncall-bot-7f3b".to_owned())),
        ("expired JWT", Some(expired)),
        ("JWT not yet valid", Some(not_yet)),
        (
            "wrong audience",
            Some(keys.rsa.sign(&claims(ISSUER, "someone-else", "agent-1"))),
        ),
        (
            "wrong issuer",
            Some(
                keys.ed
                    .sign(&claims("https://evil.test/", AUDIENCE, "agent-1")),
            ),
        ),
        (
            "JWT by another key",
            Some(stranger.sign(&claims(ISSUER, AUDIENCE, "agent-1"))),
        ),
        (
            "unsigned JWT",
            Some(format!(
                "{}.",
                keys.rsa
                    .sign(&claims(ISSUER, AUDIENCE, "agent-1"))
                    .rsplit_once('.')
                    .unwrap()
                    .0
            )),
        ),
    ];
    for (case, token) in &refused {
        let (status, challenge, body) = post_call(
            &url,
            token.as_deref(),
            1,
            "query_logs",
            &arguments,
            &ids(&run, "call_1"),
        )
        .await;
        assert_eq!(status, 401, "{case}: {body}");
        let challenge = challenge.unwrap_or_default();
        assert!(
            challenge.starts_with("Bearer ")
                && challenge.contains(&format!(
                    "resource_metadata=\"http://{}/.well-known/oauth-protected-resource\"",
                    replica.addr
                )),
            "{case}: {challenge}"
        );
        assert_eq!(
            token.is_some(),
            challenge.contains("invalid_token"),
            "{case}"
        );
    }

    // Nothing reached the boundary: the same ids are still fresh.
    let client = replica.client("/mcp", Some(TOKEN_A)).await;
    let first = call(
        &client,
        "query_logs",
        arguments.clone(),
        ids(&run, "call_1"),
    )
    .await;
    assert_eq!(first["evidence_status"], "EVIDENCE_FOUND", "{first}");
    client.cancel().await.unwrap();

    // Valid JWTs of each algorithm are accepted.
    for (n, key) in [&keys.rsa, &keys.ec, &keys.ed].into_iter().enumerate() {
        let token = key.sign(&claims(ISSUER, AUDIENCE, &format!("agent-{n}")));
        let client = replica.client("/mcp", Some(&token)).await;
        let run = unique("run");
        let observation = call(
            &client,
            "query_logs",
            arguments.clone(),
            ids(&run, "call_1"),
        )
        .await;
        assert_eq!(
            observation["evidence_status"], "EVIDENCE_FOUND",
            "{:?}",
            key.algorithm
        );
        client.cancel().await.unwrap();
    }

    // The protected resource metadata names the issuer.
    let (status, body) = get(&replica.url("/.well-known/oauth-protected-resource")).await;
    assert_eq!(status, 200);
    let metadata: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(metadata["resource"], format!("http://{}/mcp", replica.addr));
    assert_eq!(metadata["authorization_servers"], json!([ISSUER]));

    let (status, stderr) = replica.stop().await;
    assert!(status.success(), "{stderr}");
    for (_, token) in &refused {
        if let Some(token) = token {
            assert!(!stderr.contains(token.as_str()), "a token reached stderr");
        }
    }
}

/// `aci serve --http 127.0.0.1:0 [flags] --config <config>` run to its end:
/// its exit code and stderr (for a server that refuses to start).
async fn refused_start(config: &Path, flags: &[&str]) -> (Option<i32>, String) {
    let mut args = vec!["serve", "--http", "127.0.0.1:0"];
    args.extend_from_slice(flags);
    args.extend(["--config", config.to_str().unwrap()]);
    let output = aci_async(&args).await;
    (output.status.code(), stderr(&output))
}

#[tokio::test(flavor = "multi_thread")]
async fn it_refuses_to_start_without_auth_unless_told() {
    let plain = config_file("noauth", "");
    let (code, stderr) = refused_start(&plain, &[]).await;
    assert_eq!(code, Some(1));
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("--insecure-no-auth"), "{stderr}");

    let replica = Replica::start(&plain, "memory", &["--insecure-no-auth"]).await;
    assert!(replica.stderr().contains("without authentication"));
    assert!(replica.stderr().contains("memory store"));
    let client = replica.client("/mcp", None).await;
    let run = unique("run");
    let observation = call(&client, "query_logs", timeout_logs(), ids(&run, "call_1")).await;
    assert_eq!(observation["evidence_status"], "EVIDENCE_FOUND");
    client.cancel().await.unwrap();
    let (status, _) = replica.stop().await;
    assert!(status.success());
}

#[tokio::test(flavor = "multi_thread")]
async fn zero_serve_limits_are_one_line_errors() {
    for (body, needle) in [
        ("[serve]\nworkers = 0\n", "workers must be at least 1"),
        ("[serve]\nmax_in_flight = 0\n", "max_in_flight limits"),
        (
            "[serve]\nmax_in_flight_per_principal = 0\n",
            "max_in_flight limits",
        ),
    ] {
        let path = config_file("zero", body);
        let (code, stderr) = refused_start(&path, &["--insecure-no-auth"]).await;
        assert_eq!(code, Some(1), "{body}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{body}: {stderr}");
        assert!(stderr.contains(needle), "{body}: {stderr}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn operations_endpoints_and_body_limit() {
    let keys = Keys::new();
    let replica = Replica::start(&config(&keys, ""), "memory", &[]).await;
    assert_eq!(get(&replica.url("/healthz")).await.0, 200);
    assert_eq!(get(&replica.url("/readyz")).await.0, 200);

    // A body over max_request_bytes + the envelope is 413, refused on its
    // Content-Length.
    let huge = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "lookup_knowledge", "arguments": {"query": "x".repeat(200_000)}}});
    let (status, _, _) = post_json(&replica.url("/mcp"), Some(TOKEN_A), &huge.to_string()).await;
    assert_eq!(status, 413);
    // Without a token it is 401 first.
    let (status, _, _) = post_json(&replica.url("/mcp"), None, &huge.to_string()).await;
    assert_eq!(status, 401);

    let client = replica.client("/mcp", Some(TOKEN_A)).await;
    let run = unique("run");
    call(&client, "query_logs", timeout_logs(), ids(&run, "call_1")).await;
    call(
        &client,
        "lookup_knowledge",
        json!({"query": "x"}),
        call_id("call_2"),
    )
    .await;
    client.cancel().await.unwrap();

    let (status, metrics) = get(&replica.url("/metrics")).await;
    assert_eq!(status, 200);
    for line in [
        "aci_calls_total{code=\"\",evidence_status=\"EVIDENCE_FOUND\",status=\"READY\",tool=\"query_logs\"} 1",
        "aci_calls_total{code=\"RUN_MISMATCH\",evidence_status=\"ERROR\",status=\"ERROR\",tool=\"lookup_knowledge\"} 1",
        "aci_calls_in_flight 0",
        "aci_http_body_too_large_total 1",
        "aci_http_unauthorized_total 1",
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "no {line} in\n{metrics}"
        );
    }
    assert!(metrics.contains("aci_call_duration_seconds_bucket{tool=\"query_logs\""));
    assert!(
        metrics.contains("aci_execution_duration_seconds_count{tool=\"query_logs\"} 1"),
        "{metrics}"
    );
    assert!(
        !metrics.contains(&run) && !metrics.contains("call_1") && !metrics.contains("oncall-bot")
    );
    replica.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn readyz_follows_the_store() {
    let server = store_redis::testing::RedisServer::spawn().unwrap();
    let plain = config_file("ready", "");
    let replica = Replica::start(&plain, &server.url(), &["--insecure-no-auth"]).await;
    assert_eq!(get(&replica.url("/readyz")).await.0, 200);
    drop(server);
    let (status, _) = get(&replica.url("/readyz")).await;
    assert_eq!(status, 503);
    assert_eq!(get(&replica.url("/healthz")).await.0, 200);
    let (_, metrics) = get(&replica.url("/metrics")).await;
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("aci_store_errors_total ") && l != "aci_store_errors_total 0"),
        "{metrics}"
    );
    replica.stop().await;
}

/// `redis+cluster://…` of the shared test cluster, for `--store`.
fn cluster_store() -> String {
    let nodes: Vec<String> = store_redis::testing::shared_cluster_urls()
        .iter()
        .map(|u| u.trim_start_matches("redis://").to_owned())
        .collect();
    format!("redis+cluster://{}", nodes.join(","))
}

/// Three replicas on the shared cluster, with their own key prefix and `extra`.
async fn three_replicas(keys: &Keys, extra: &str) -> (String, PathBuf, Vec<Replica>) {
    let prefix = store_redis::testing::unique_prefix();
    let config = config(
        keys,
        &format!("[redis]\nkey_prefix = \"{prefix}\"\n{extra}"),
    );
    let store = cluster_store();
    let mut replicas = Vec::new();
    for _ in 0..3 {
        replicas.push(Replica::start(&config, &store, &[]).await);
    }
    (store, config, replicas)
}

/// An rmcp client of each of `replicas`, with [`TOKEN_A`].
async fn clients_of(replicas: &[Replica]) -> Vec<McpClient> {
    let mut clients = Vec::new();
    for replica in replicas {
        clients.push(replica.client("/mcp", Some(TOKEN_A)).await);
    }
    clients
}

/// A marker literal for one test's statements: what the general log is
/// searched for.
fn marker() -> String {
    unique("aci-marker")
}

#[tokio::test(flavor = "multi_thread")]
async fn one_tool_call_id_spread_over_three_replicas_executes_once() {
    let keys = Keys::new();
    let db = TestDatabase::create(&["CREATE TABLE t (n INT)", "INSERT INTO t VALUES (1)"]).await;
    let log = GeneralLog::enable().await;
    let extra = shop_source(&db);
    let (store, config, replicas) = three_replicas(&keys, &extra).await;
    let clients = clients_of(&replicas).await;
    let run = unique("run");
    let marker = marker();
    let sql = format!("SELECT n, '{marker}' AS m FROM t WHERE n = ?");
    let calls = (0..64).map(|i| {
        let client = &clients[i % clients.len()];
        call(
            client,
            "query_mysql",
            json!({"data_source": "shop", "sql": sql, "params": [1]}),
            ids(&run, "call_same"),
        )
    });
    let observations = futures::future::join_all(calls).await;
    let ready = observations
        .iter()
        .filter(|o| o["evidence_status"] == "EVIDENCE_FOUND")
        .count();
    let duplicates = observations
        .iter()
        .filter(|o| o["evidence_status"] == "ERROR" && o["error_code"] == "DUPLICATE_TOOL_CALL")
        .count();
    assert_eq!((ready, duplicates), (1, 63), "{observations:?}");
    // MariaDB ran the statement once: the boundary executes only after
    // winning the create, whichever replica wins it.
    assert_eq!(log.executions(&marker), 1, "executions of the statement");
    let records = inspect(&run, &store, Some(&config)).await;
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0]["status"], "READY", "{records:?}");
    for client in clients {
        client.cancel().await.unwrap();
    }
    for replica in replicas {
        let (status, stderr) = replica.stop().await;
        assert!(status.success(), "{stderr}");
    }
    drop(log);
    db.drop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_budget_holds_across_replicas() {
    let keys = Keys::new();
    let budget = 5;
    let (store, config, replicas) =
        three_replicas(&keys, &format!("[run]\nbudget = {budget}\n")).await;
    let clients = clients_of(&replicas).await;
    let run = unique("run");
    let calls = (0..64).map(|i| {
        let client = &clients[i % clients.len()];
        call(
            client,
            "query_logs",
            timeout_logs(),
            ids(&run, &format!("call_{i}")),
        )
    });
    let observations = futures::future::join_all(calls).await;
    let ready = observations
        .iter()
        .filter(|o| o["evidence_status"] != "ERROR")
        .count();
    let exhausted = observations
        .iter()
        .filter(|o| o["evidence_status"] == "ERROR" && o["error_code"] == "RUN_BUDGET_EXHAUSTED")
        .count();
    assert_eq!(
        (ready, exhausted),
        (budget, 64 - budget),
        "{observations:?}"
    );
    assert_eq!(inspect(&run, &store, Some(&config)).await.len(), budget);
    for client in clients {
        client.cancel().await.unwrap();
    }
    for replica in replicas {
        replica.stop().await;
    }
}

/// A MariaDB table whose three-way cross join takes about a second or more.
async fn slow_database() -> TestDatabase {
    let values: Vec<String> = (1..=200).map(|n| format!("({n})")).collect();
    let insert = format!("INSERT INTO t VALUES {}", values.join(","));
    TestDatabase::create(&["CREATE TABLE t (n INT)", &insert]).await
}

const SLOW_SQL: &str = "SELECT COUNT(*) AS c FROM t a, t b, t c WHERE a.n + b.n + c.n > ?";

/// [`SLOW_SQL`] with a marker literal, to be found in the general log.
fn marked_slow_sql(marker: &str) -> String {
    format!("SELECT COUNT(*) AS c, '{marker}' AS m FROM t a, t b, t c WHERE a.n + b.n + c.n > ?")
}

#[tokio::test(flavor = "multi_thread")]
async fn overload_is_refused_at_once_and_admitted_calls_finish() {
    let keys = Keys::new();
    let db = slow_database().await;
    let max = 4;
    let extra = format!("[serve]\nmax_in_flight = {max}\n{}", shop_source(&db));
    let replica = Replica::start(&config(&keys, &extra), "memory", &[]).await;
    let client = replica.client("/mcp", Some(TOKEN_A)).await;
    let run = unique("run");
    let warm = call(
        &client,
        "query_logs",
        timeout_logs(),
        ids(&run, "call_warm"),
    )
    .await;
    assert_eq!(warm["evidence_status"], "EVIDENCE_FOUND", "{warm}");
    let before = replica.memory();
    let calls = (0..4 * max).map(|i| {
        call(
            &client,
            "query_mysql",
            json!({"data_source": "shop", "sql": SLOW_SQL, "params": [i]}),
            ids(&run, &format!("call_{i}")),
        )
    });
    let observations = futures::future::join_all(calls).await;
    let ready = observations
        .iter()
        .filter(|o| o["evidence_status"] == "EVIDENCE_FOUND")
        .count();
    let overloaded = observations
        .iter()
        .filter(|o| o["evidence_status"] == "ERROR" && o["error_code"] == "OVERLOADED")
        .count();
    assert_eq!((ready, overloaded), (max, 3 * max), "{observations:?}");
    // The refused calls left no record: their ids are still fresh.
    let refused: Vec<usize> = (0..4 * max)
        .filter(|i| observations[*i]["error_code"] == "OVERLOADED")
        .collect();
    let again = call(
        &client,
        "query_logs",
        timeout_logs(),
        ids(&run, &format!("call_{}", refused[0])),
    )
    .await;
    assert_eq!(again["evidence_status"], "EVIDENCE_FOUND", "{again}");
    let (_, metrics) = get(&replica.url("/metrics")).await;
    assert!(
        metrics.lines().any(|l| l == "aci_calls_in_flight 0"),
        "{metrics}"
    );
    assert!(metrics.contains(&format!("code=\"OVERLOADED\",evidence_status=\"ERROR\",status=\"ERROR\",tool=\"query_mysql\"}} {}", 3 * max)), "{metrics}");

    // Memory stays bounded: while `max` slow calls hold every place, a flood
    // of large requests is refused, not queued; rounds of it leave the
    // replica's memory where one round left it.
    // The first floods grow the allocator's arenas to their working size.
    let warmed = flood_rounds(&replica, &client, &run, max, 3).await;
    let after_all = flood_rounds(&replica, &client, &run, max, 4).await;
    eprintln!(
        "replica memory (KiB): before {before:?}, after three floods {warmed:?}, after seven {after_all:?}"
    );
    assert!(
        after_all.peak_kib.saturating_sub(before.rss_kib) < OVERLOAD_PEAK_BOUND_KIB,
        "the peak grew from {before:?} to {after_all:?}"
    );
    assert!(
        after_all.rss_kib.saturating_sub(warmed.rss_kib) < ROUNDS_GROWTH_BOUND_KIB,
        "four more floods grew the replica from {warmed:?} to {after_all:?}"
    );
    client.cancel().await.unwrap();
    replica.stop().await;
    db.drop().await;
}

/// Requests of one flood, each about [`FLOOD_BODY_BYTES`].
const FLOOD_REQUESTS: usize = 256;
const FLOOD_BODY_BYTES: usize = 40_000;
/// How far the replica's peak may rise over seven floods of [`FLOOD_REQUESTS`]
/// (~10 MB of bodies each): generous, for the allocator's arenas and the
/// connections' buffers (debug builds measured 47 to 51 MiB on glibc's
/// malloc, 47 MiB on jemalloc, the `aci` binary's allocator now).
const OVERLOAD_PEAK_BOUND_KIB: u64 = 96 * 1024;
/// How far four more floods may move the resident memory once three have
/// run (debug builds measured 4 to 19 MiB on glibc's malloc, whose arenas
/// grow in steps and are not given back, and none on jemalloc: the memory
/// store's records and the allocator's caches); a replica
/// that queued the refused requests or kept their bodies would keep about a
/// flood's 10 MB each round, 40 MB over four (more with their parsed JSON).
const ROUNDS_GROWTH_BOUND_KIB: u64 = 32 * 1024;

/// `rounds` times: `max` slow calls take every place, then
/// [`FLOOD_REQUESTS`] large raw calls arrive at once. Returns the replica's
/// memory after the last round.
async fn flood_rounds(
    replica: &Replica,
    client: &McpClient,
    run: &str,
    max: usize,
    rounds: usize,
) -> Memory {
    let http = http_client();
    let url = replica.url("/mcp");
    let padding = "x".repeat(FLOOD_BODY_BYTES);
    for _ in 0..rounds {
        let round = unique_suffix();
        let holders = (0..max).map(|i| {
            call(
                client,
                "query_mysql",
                json!({"data_source": "shop", "sql": SLOW_SQL, "params": [i]}),
                ids(run, &format!("call_hold_{round}_{i}")),
            )
        });
        let flood = async {
            wait_in_flight(replica, max).await;
            let requests = (0..FLOOD_REQUESTS).map(|i| {
                let body = tools_call_body(
                    i,
                    "query_logs",
                    &json!({"topic": "APPLICATION", "query": padding}),
                    &ids(run, &format!("call_flood_{round}_{i}")),
                );
                let request = mcp_post(&http, &url, Some(TOKEN_A), body.to_string());
                async move {
                    let response = tokio::time::timeout(HANG_GUARD, request.send())
                        .await
                        .unwrap()
                        .unwrap();
                    assert_eq!(response.status(), 200);
                    let reply: Value =
                        serde_json::from_str(&response.text().await.unwrap()).unwrap();
                    reply["result"]["structuredContent"]["error_code"].clone()
                }
            });
            futures::future::join_all(requests).await
        };
        let (held, codes) = tokio::join!(futures::future::join_all(holders), flood);
        assert!(
            held.iter()
                .all(|o| o["evidence_status"] == "EVIDENCE_FOUND"),
            "{held:?}"
        );
        // Refused at once while the places are taken; a request that came
        // after a holder finished was admitted and refused by preflight.
        let overloaded = codes.iter().filter(|c| *c == "OVERLOADED").count();
        assert!(overloaded > 0, "{codes:?}");
        assert!(
            codes
                .iter()
                .all(|c| *c == "OVERLOADED" || *c == "INVALID_INPUT" || *c == "REQUEST_TOO_LARGE"),
            "{codes:?}"
        );
    }
    replica.memory()
}

/// Calls in the runs of the measured phase of the per-run memory test.
const MANY_RUNS: usize = 3_000;
/// How far [`MANY_RUNS`] new runs may move a replica's resident memory:
/// about 2.8 KiB a run. A replica that kept each run's record or
/// observation (a few KiB each) would pass it; the map of ids alone would
/// not be seen at this scale, which the admission map's structure rules out
/// (it holds only principals with calls in flight).
const MANY_RUNS_GROWTH_BOUND_KIB: u64 = 8 * 1024;

/// `count` calls, each in a run of its own, `concurrency` at a time, over
/// one HTTP client; every one must be READY.
async fn calls_in_fresh_runs(replica: &Replica, count: usize, concurrency: usize) {
    use futures::StreamExt as _;
    let http = http_client();
    let url = replica.url("/mcp");
    let tag = unique_suffix();
    futures::stream::iter(0..count)
        .map(|i| {
            let body = tools_call_body(
                i,
                "query_logs",
                &timeout_logs(),
                &ids(&format!("run-{tag}-{i}"), "call_1"),
            );
            let request = mcp_post(&http, &url, Some(TOKEN_A), body.to_string());
            async move {
                let response = tokio::time::timeout(HANG_GUARD, request.send())
                    .await
                    .unwrap()
                    .unwrap();
                let reply: Value = serde_json::from_str(&response.text().await.unwrap()).unwrap();
                let observation = &reply["result"]["structuredContent"];
                assert_eq!(observation["evidence_status"], "EVIDENCE_FOUND", "{reply}");
            }
        })
        .buffer_unordered(concurrency)
        .collect::<()>()
        .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn per_run_memory_of_a_replica_does_not_grow_with_runs() {
    let keys = Keys::new();
    let server = store_redis::testing::RedisServer::spawn().unwrap();
    let prefix = store_redis::testing::unique_prefix();
    let config = config(&keys, &format!("[redis]\nkey_prefix = \"{prefix}\"\n"));
    let replica = Replica::start(&config, &server.url(), &[]).await;
    // Warm up: pools, connections, the allocator's arenas.
    calls_in_fresh_runs(&replica, 500, 8).await;
    let before = replica.memory();
    calls_in_fresh_runs(&replica, MANY_RUNS, 8).await;
    let after = replica.memory();
    eprintln!("replica memory (KiB) before {MANY_RUNS} more runs {before:?}, after {after:?}");
    assert!(
        after.rss_kib.saturating_sub(before.rss_kib) < MANY_RUNS_GROWTH_BOUND_KIB,
        "{MANY_RUNS} runs grew the replica from {before:?} to {after:?}"
    );
    let (status, stderr) = replica.stop().await;
    assert!(status.success(), "{stderr}");
}

/// Polls `/metrics` until `aci_calls_in_flight` is `n` (bounded by the hang guard).
async fn wait_in_flight(replica: &Replica, n: usize) {
    let line = format!("aci_calls_in_flight {n}");
    tokio::time::timeout(HANG_GUARD, async {
        loop {
            let (_, metrics) = get(&replica.url("/metrics")).await;
            if metrics.lines().any(|l| l == line) {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_lets_calls_in_flight_finish() {
    let keys = Keys::new();
    let db = slow_database().await;
    let extra = shop_source(&db);
    let replica = Replica::start(&config(&keys, &extra), "memory", &[]).await;
    let client = replica.client("/mcp", Some(TOKEN_A)).await;
    let run = unique("run");
    let (observation, ()) = tokio::join!(
        call(
            &client,
            "query_mysql",
            json!({"data_source": "shop", "sql": SLOW_SQL, "params": [0]}),
            ids(&run, "call_slow")
        ),
        async {
            wait_in_flight(&replica, 1).await;
            replica.signal("-TERM");
        }
    );
    assert_eq!(
        observation["evidence_status"], "EVIDENCE_FOUND",
        "{observation}"
    );
    let (status, stderr) = replica.wait().await;
    assert!(status.success(), "{stderr}");
    assert!(stderr.contains("aci: stopping"), "{stderr}");
    drop(client);
    db.drop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_principals_run_budget_caps_its_runs() {
    let toml = format!(
        "[run]\nbudget = 10\n[auth.tokens.small-bot]\nsha256 = \"{}\"\nrun_budget = 2\n",
        sha256_hex(TOKEN_B)
    );
    let replica = Replica::start(&config_file("budget", &toml), "memory", &[]).await;
    let client = replica.client("/mcp", Some(TOKEN_B)).await;
    let run = unique("run");
    let mut codes = Vec::new();
    for i in 0..3 {
        let o = call(
            &client,
            "query_logs",
            timeout_logs(),
            ids(&run, &format!("call_{i}")),
        )
        .await;
        codes.push(o["error_code"].as_str().unwrap_or("READY").to_owned());
    }
    assert_eq!(codes, ["READY", "READY", "RUN_BUDGET_EXHAUSTED"]);
    client.cancel().await.unwrap();
    replica.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_belongs_to_its_first_principal_on_every_replica() {
    let keys = Keys::new();
    let (store, config, replicas) = three_replicas(&keys, "").await;
    let run = unique("run");
    let arguments = timeout_logs();
    let a = replicas[0].client("/mcp", Some(TOKEN_A)).await;
    let first = call(&a, "query_logs", arguments.clone(), ids(&run, "call_a1")).await;
    assert_eq!(first["evidence_status"], "EVIDENCE_FOUND");
    let jwt_b = keys.ec.sign(&claims(ISSUER, AUDIENCE, "other-bot"));
    for (n, replica) in replicas.iter().enumerate() {
        for token in [TOKEN_B, jwt_b.as_str()] {
            let b = replica.client("/mcp", Some(token)).await;
            let refused = call(
                &b,
                "query_logs",
                arguments.clone(),
                ids(&run, &format!("call_b{n}")),
            )
            .await;
            assert_eq!(error_code(&refused), "UNAUTHORIZED", "replica {n}");
            b.cancel().await.unwrap();
        }
        let a = replica.client("/mcp", Some(TOKEN_A)).await;
        let ok = call(
            &a,
            "query_logs",
            arguments.clone(),
            ids(&run, &format!("call_a{}", n + 2)),
        )
        .await;
        assert_eq!(ok["evidence_status"], "EVIDENCE_FOUND", "replica {n}");
        a.cancel().await.unwrap();
    }
    // Nothing of B's was recorded; A's calls were.
    let records = inspect(&run, &store, Some(&config)).await;
    assert_eq!(records.len(), 4, "{records:?}");
    assert!(
        records
            .iter()
            .all(|r| r["tool_call_id"].as_str().unwrap().starts_with("call_a"))
    );
    // `aci inspect` and `aci verify` show the owner.
    assert!(
        records.iter().all(|r| r["run"]["owner"] == "oncall-bot"),
        "{records:?}"
    );
    let output = aci_async(&[
        "verify",
        "--run",
        &run,
        "--store",
        &store,
        "--config",
        config.to_str().unwrap(),
        "call_a1",
    ])
    .await;
    assert!(output.status.success());
    let warning = stderr(&output);
    assert!(warning.contains("is owned by oncall-bot"), "{warning}");
    a.cancel().await.unwrap();
    for replica in replicas {
        replica.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_replica_killed_mid_call_is_recovered_and_never_reruns() {
    let keys = Keys::new();
    let db = slow_database().await;
    let extra = shop_source(&db);
    let log = GeneralLog::enable().await;
    let (store, config, mut replicas) = three_replicas(&keys, &extra).await;
    let run = unique("run");
    let marker = marker();
    let slow_sql = marked_slow_sql(&marker);
    let victim = replicas.remove(0);
    let slow = spawn_post_call(
        &victim.url("/mcp"),
        TOKEN_A,
        "query_mysql",
        &json!({"data_source": "shop", "sql": slow_sql, "params": [0]}),
        &ids(&run, "call_killed"),
    );
    // Kill it once MariaDB runs the statement (the call is executing).
    let killed = |records: &[Value]| {
        records
            .iter()
            .find(|r| r["tool_call_id"] == "call_killed")
            .cloned()
    };
    tokio::time::timeout(HANG_GUARD, async {
        while log.executions(&marker) == 0 {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap();
    victim.signal("-KILL");
    let (status, _) = victim.wait().await;
    assert!(!status.success());
    assert!(slow.await.unwrap().is_err(), "the killed replica answered");

    // The others keep serving.
    let other = replicas[0].client("/mcp", Some(TOKEN_A)).await;
    let ok = call(
        &other,
        "query_logs",
        timeout_logs(),
        ids(&run, "call_after"),
    )
    .await;
    assert_eq!(ok["evidence_status"], "EVIDENCE_FOUND");
    let record = killed(&inspect(&run, &store, Some(&config)).await).unwrap();
    assert_eq!(record["status"], "PROJECTING", "{record}");

    // `aci recover` finalizes it.
    let output = aci_async(&[
        "recover",
        "--run",
        &run,
        "--older-than",
        "0",
        "--store",
        &store,
        "--config",
        config.to_str().unwrap(),
    ])
    .await;
    assert!(output.status.success(), "{}", stderr(&output));
    let printed = stdout(&output);
    assert!(printed.contains("\"call_killed\""), "{printed}");
    assert_eq!(printed.lines().count(), 1, "{printed}");
    let record = killed(&inspect(&run, &store, Some(&config)).await).unwrap();
    assert_eq!(
        (record["status"].as_str(), record["error_code"].as_str()),
        (Some("ERROR"), Some("EXECUTION_ABANDONED")),
        "{record}"
    );
    // It is never run again: the id stays taken on every replica.
    for replica in &replicas {
        let client = replica.client("/mcp", Some(TOKEN_A)).await;
        let again = call(
            &client,
            "query_mysql",
            json!({"data_source": "shop", "sql": slow_sql, "params": [0]}),
            ids(&run, "call_killed"),
        )
        .await;
        assert_eq!(error_code(&again), "DUPLICATE_TOOL_CALL");
        client.cancel().await.unwrap();
    }
    // MariaDB ran the statement once: on the killed replica, never again.
    assert_eq!(log.executions(&marker), 1, "executions of the statement");
    other.cancel().await.unwrap();
    for replica in replicas {
        replica.stop().await;
    }
    drop(log);
    db.drop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_second_sigterm_abandons_calls_in_flight_and_finalizes_them() {
    let keys = Keys::new();
    let db = slow_database().await;
    let server = store_redis::testing::RedisServer::spawn().unwrap();
    let config = config(&keys, &shop_source(&db));
    let store = server.url();
    let replica = Replica::start(&config, &store, &[]).await;
    let run = unique("run");
    // A four-way join, far slower than the test waits: the stop abandons it.
    let slow = spawn_post_call(
        &replica.url("/mcp"),
        TOKEN_A,
        "query_mysql",
        &json!({"data_source": "shop", "sql": "SELECT COUNT(*) AS c FROM t a, t b, t c, t d WHERE a.n + b.n + c.n + d.n > ?", "params": [0]}),
        &ids(&run, "call_abandoned"),
    );
    wait_in_flight(&replica, 1).await;
    tokio::time::timeout(HANG_GUARD, async {
        while inspect(&run, &store, Some(&config)).await.is_empty() {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap();
    replica.signal("-TERM");
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    replica.signal("-TERM");
    let (status, stderr) = replica.wait().await;
    assert!(status.success(), "{stderr}");
    assert!(stderr.contains("abandoning"), "{stderr}");
    let _ = slow.await;
    let records = inspect(&run, &store, Some(&config)).await;
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(
        (
            records[0]["status"].as_str(),
            records[0]["error_code"].as_str()
        ),
        (Some("ERROR"), Some("EXECUTION_ABANDONED")),
        "{records:?}"
    );
    db.drop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn at_rust_log_trace_no_payload_token_or_claim_is_logged() {
    let keys = Keys::new();
    let replica =
        Replica::start_with_env(&config(&keys, ""), "memory", &[], &[("RUST_LOG", "trace")]).await;
    let run = unique("run");
    let sentinel = "sentinel-7c1d9e-payload";
    let client = replica.client("/mcp", Some(TOKEN_A)).await;
    call(
        &client,
        "query_logs",
        json!({"topic": "APPLICATION", "query": sentinel}),
        ids(&run, "call_1"),
    )
    .await;
    client.cancel().await.unwrap();
    let mut jwt_claims = claims(ISSUER, AUDIENCE, "agent-9");
    jwt_claims["email"] = json!("sentinel-claim-4f2a@example.test");
    let jwt = keys.ed.sign(&jwt_claims);
    let client = replica.client("/mcp", Some(&jwt)).await;
    call(&client, "query_logs", timeout_logs(), ids(&run, "call_2")).await;
    client.cancel().await.unwrap();
    let (status, _, _) = post_call(
        &replica.url("/mcp"),
        Some("sentinel-token-88aa"),
        1,
        "query_logs",
        &json!({}),
        &json!({}),
    )
    .await;
    assert_eq!(status, 401);
    let (status, stderr) = replica.stop().await;
    assert!(status.success());
    assert!(
        stderr.contains("tool call finished"),
        "the log is on:\n{stderr}"
    );
    for planted in [
        sentinel,
        "sentinel-claim-4f2a",
        "sentinel-token-88aa",
        TOKEN_A,
        jwt.as_str(),
    ] {
        assert!(
            !stderr.contains(planted),
            "{planted} reached the log:\n{stderr}"
        );
    }
}
