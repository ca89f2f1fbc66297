//! Traces end to end: a real `aci serve` (stdio and HTTP) and `aci call`
//! export their spans over OTLP/HTTP to a receiver inside the test, which
//! decodes the protobuf with `opentelemetry-proto`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeSet;

use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};
use support::HANG_GUARD;
use support::command::{aci_async, inspect, stderr};
use support::contract::call_id;
use support::files::{config_file, unique};
use support::http::http_client;
use support::http::replica::{Replica, mcp_post, tools_call_body};
use support::otlp::{Behaviour, ReceivedSpan, Receiver, find};
use support::stdio::{RawSession, SilentServer, assert_abandoned, mysql_arguments, run_args};

const SERVER: i32 = 2;
const INTERNAL: i32 = 1;
const STATUS_ERROR: i32 = 2;

/// The trace id of a run's calls that bring no trace context.
fn run_trace_id(run: &str) -> String {
    Sha256::digest(run.as_bytes())[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn set(keys: &[&str]) -> BTreeSet<String> {
    keys.iter().map(|k| (*k).to_owned()).collect()
}

fn keys(span: &ReceivedSpan) -> BTreeSet<String> {
    span.keys().into_iter().map(str::to_owned).collect()
}

/// The attributes of every execute_tool span.
const TOOL_BASE: [&str; 6] = [
    "aci.evidence_status",
    "aci.returned_count",
    "aci.run.id",
    "aci.truncated",
    "gen_ai.operation.name",
    "gen_ai.tool.name",
];

/// `TOOL_BASE` and `extra`.
fn tool_keys(extra: &[&str]) -> BTreeSet<String> {
    let mut keys = set(&TOOL_BASE);
    keys.extend(extra.iter().map(|k| (*k).to_owned()));
    keys
}

/// A known tool's execute_tool span of a call that has a record.
const RECORDED: [&str; 4] = [
    "aci.record.status",
    "gen_ai.tool.call.id",
    "gen_ai.tool.description",
    "gen_ai.tool.type",
];

/// The execute_tool span of `tool_call_id` and its parent, the server span.
fn call_spans<'a>(
    spans: &'a [ReceivedSpan],
    tool_call_id: &str,
) -> (&'a ReceivedSpan, &'a ReceivedSpan) {
    let tool = find(spans, "execute_tool", "gen_ai.tool.call.id", tool_call_id)
        .unwrap_or_else(|| panic!("no execute_tool span of {tool_call_id}: {spans:#?}"));
    let server = spans
        .iter()
        .find(|s| s.span_id == tool.parent_span_id)
        .unwrap_or_else(|| panic!("no parent of {tool_call_id}'s span"));
    assert_eq!(tool.kind, INTERNAL);
    assert_eq!(server.kind, SERVER);
    assert_eq!(server.trace_id, tool.trace_id);
    assert!(server.start_unix_nano <= tool.start_unix_nano);
    assert!(tool.end_unix_nano <= server.end_unix_nano);
    (tool, server)
}

/// The phase spans under `tool`, in order: their names, each within
/// `tool`'s time and without attributes.
fn phases<'a>(spans: &'a [ReceivedSpan], tool: &ReceivedSpan) -> Vec<&'a str> {
    let mut children: Vec<&ReceivedSpan> = spans
        .iter()
        .filter(|s| s.parent_span_id == tool.span_id)
        .collect();
    children.sort_by_key(|s| s.start_unix_nano);
    for child in &children {
        assert_eq!(child.kind, INTERNAL);
        assert_eq!(child.trace_id, tool.trace_id);
        assert!(child.attributes.is_empty(), "{child:#?}");
        assert!(tool.start_unix_nano <= child.start_unix_nano);
        assert!(child.start_unix_nano <= child.end_unix_nano);
        assert!(child.end_unix_nano <= tool.end_unix_nano);
    }
    children.iter().map(|s| s.name.as_str()).collect()
}

const ALL_PHASES: [&str; 3] = ["preflight", "execution", "projection"];

#[tokio::test]
async fn stdio_calls_are_spans_with_exact_attributes() {
    let receiver = Receiver::start(Behaviour::Accept).await;
    let silent = SilentServer::start().await;
    let config = config_file(
        "traces-stdio",
        &format!(
            "[telemetry]\notlp_endpoint = \"{}\"\n[limits]\ntimeout_secs = 1\n{}",
            receiver.endpoint,
            silent.mysql_config()
        ),
    );
    let run = unique("run");
    let mut session =
        RawSession::start(&["--config", config.to_str().unwrap(), "--run-id", &run]).await;
    let meta = |id: &str| Some(json!({"aci/tool_call_id": id}));
    let cases = [
        (
            "c-ready",
            "lookup_knowledge",
            json!({"query": "connection pool exhausted"}),
        ),
        (
            "c-empty",
            "lookup_knowledge",
            json!({"query": "quarterly marketing budget zebra"}),
        ),
        ("c-unknown", "no_such_tool", json!({"query": "x"})),
        ("c-invalid", "lookup_knowledge", json!({"question": "x"})),
        (
            "c-error",
            "query_mysql",
            json!({"data_source": "billing", "sql": "SELECT 1"}),
        ),
        ("c-timeout", "query_mysql", mysql_arguments()),
    ];
    let mut observations = Vec::new();
    for (i, (id, tool, arguments)) in cases.iter().enumerate() {
        let observation = session
            .call(&json!(i + 10), tool, arguments.clone(), meta(id))
            .await;
        observations.push(observation);
    }
    let expected = [
        "EVIDENCE_FOUND",
        "NO_EVIDENCE",
        "UNKNOWN_TOOL",
        "INVALID_INPUT",
        "DATA_SOURCE_UNKNOWN",
        "EXECUTION_TIMEOUT",
    ];
    for (observation, want) in observations.iter().zip(expected) {
        let got = observation["error_code"]
            .as_str()
            .or(observation["evidence_status"].as_str());
        assert_eq!(got, Some(want), "{observation}");
    }
    let (status, _, stderr) = session.close().await;
    assert!(status.success(), "{stderr}");
    // The endpoint never reaches the logs.
    assert!(!stderr.contains(&receiver.endpoint), "{stderr}");

    // Two spans per call, and a span per phase each call reached.
    let spans = receiver.wait_for("24 spans", |s| s.len() >= 24).await;
    assert_eq!(spans.len(), 24, "{spans:#?}");
    let trace = run_trace_id(&run);
    let server_keys = set(&[
        "gen_ai.tool.name",
        "jsonrpc.request.id",
        "mcp.method.name",
        "mcp.protocol.version",
        "mcp.session.id",
        "network.transport",
    ]);
    for span in &spans {
        // No traceparent: every call of the run is in the run's trace.
        assert_eq!(span.trace_id, trace, "{span:#?}");
        assert_eq!(span.service_name.as_deref(), Some("aci"));
    }

    let (tool, server) = call_spans(&spans, "c-ready");
    assert_eq!(phases(&spans, tool), ALL_PHASES);
    assert_eq!(keys(tool), tool_keys(&RECORDED));
    assert_eq!(tool.name, "execute_tool lookup_knowledge");
    assert_eq!(tool.attr("gen_ai.operation.name"), "execute_tool");
    assert_eq!(tool.attr("gen_ai.tool.name"), "lookup_knowledge");
    assert_eq!(tool.attr("gen_ai.tool.type"), "datastore");
    assert_eq!(tool.attr("aci.run.id"), &json!(run));
    assert_eq!(tool.attr("aci.record.status"), "READY");
    assert_eq!(tool.attr("aci.evidence_status"), "EVIDENCE_FOUND");
    assert!(tool.attr("aci.returned_count").as_i64().unwrap() > 0);
    assert_eq!(tool.attr("aci.truncated"), &json!(false));
    assert_eq!(tool.status_code, 0);
    assert_eq!(server.name, "tools/call lookup_knowledge");
    assert!(server.parent_span_id.is_empty(), "a root span");
    assert_eq!(keys(server), server_keys);
    assert_eq!(server.attr("mcp.method.name"), "tools/call");
    assert_eq!(server.attr("jsonrpc.request.id"), "10");
    assert_eq!(server.attr("network.transport"), "pipe");
    assert!(
        server
            .attr("mcp.session.id")
            .as_str()
            .unwrap()
            .starts_with("stdio-")
    );
    assert!(
        !server
            .attr("mcp.protocol.version")
            .as_str()
            .unwrap()
            .is_empty()
    );

    let (tool, server) = call_spans(&spans, "c-empty");
    assert_eq!(phases(&spans, tool), ALL_PHASES);
    assert_eq!(keys(tool), tool_keys(&RECORDED));
    assert_eq!(tool.attr("aci.evidence_status"), "NO_EVIDENCE");
    assert_eq!(tool.attr("aci.record.status"), "READY");
    assert_eq!(tool.attr("aci.returned_count"), &json!(0));
    assert_eq!((tool.status_code, server.status_code), (0, 0));

    // Preflight refusals: no record, their code, status ERROR.
    let (tool, server) = call_spans(&spans, "c-unknown");
    assert_eq!(phases(&spans, tool), ["preflight"]);
    assert_eq!(
        keys(tool),
        tool_keys(&["error.type", "gen_ai.tool.call.id"])
    );
    assert_eq!(tool.name, "execute_tool");
    assert_eq!(tool.attr("gen_ai.tool.name"), "no_such_tool");
    assert_eq!(tool.attr("error.type"), "UNKNOWN_TOOL");
    assert_eq!(tool.attr("aci.evidence_status"), "ERROR");
    assert_eq!(
        (tool.status_code, server.status_code),
        (STATUS_ERROR, STATUS_ERROR)
    );
    assert_eq!(tool.status_message, "UNKNOWN_TOOL");
    assert_eq!(server.name, "tools/call");
    let mut with_error = server_keys.clone();
    with_error.insert("error.type".to_owned());
    assert_eq!(keys(server), with_error);
    assert_eq!(server.attr("error.type"), "UNKNOWN_TOOL");

    let (tool, _) = call_spans(&spans, "c-invalid");
    assert_eq!(phases(&spans, tool), ["preflight"]);
    assert_eq!(
        keys(tool),
        tool_keys(&[
            "error.type",
            "gen_ai.tool.call.id",
            "gen_ai.tool.description",
            "gen_ai.tool.type"
        ])
    );
    assert_eq!(tool.attr("error.type"), "INVALID_INPUT");

    // ERRORs with a record.
    for (id, code) in [
        ("c-error", "DATA_SOURCE_UNKNOWN"),
        ("c-timeout", "EXECUTION_TIMEOUT"),
    ] {
        let (tool, server) = call_spans(&spans, id);
        // The executor failed or timed out: nothing to project.
        assert_eq!(phases(&spans, tool), ["preflight", "execution"], "{id}");
        let mut want = tool_keys(&RECORDED);
        want.insert("error.type".to_owned());
        assert_eq!(keys(tool), want, "{id}");
        assert_eq!(tool.name, "execute_tool query_mysql");
        assert_eq!(tool.attr("aci.record.status"), "ERROR");
        assert_eq!(tool.attr("error.type"), &json!(code));
        assert_eq!(tool.status_code, STATUS_ERROR);
        assert_eq!(server.attr("error.type"), &json!(code));
    }
    // Content is off by default.
    assert!(spans.iter().all(|s| {
        !s.attributes
            .keys()
            .any(|k| k.starts_with("gen_ai.tool.call.a") || k.starts_with("gen_ai.tool.call.r"))
    }));
}

#[tokio::test]
async fn traceparent_in_meta_becomes_the_parent() {
    let receiver = Receiver::start(Behaviour::Accept).await;
    let config = config_file(
        "traces-parent",
        &format!("[telemetry]\notlp_endpoint = \"{}\"\n", receiver.endpoint),
    );
    let run = unique("run");
    let mut session =
        RawSession::start(&["--config", config.to_str().unwrap(), "--run-id", &run]).await;
    let agent_trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let agent_span = "00f067aa0ba902b7";
    let meta = json!({
        "aci/tool_call_id": "c-child",
        "traceparent": format!("00-{agent_trace}-{agent_span}-01"),
        "tracestate": "vendor=opaque",
    });
    let observation = session
        .call(
            &json!(1),
            "lookup_knowledge",
            json!({"query": "connection pool exhausted"}),
            Some(meta),
        )
        .await;
    assert_eq!(observation["evidence_status"], "EVIDENCE_FOUND");
    let (status, _, stderr) = session.close().await;
    assert!(status.success(), "{stderr}");

    let spans = receiver.wait_for("5 spans", |s| s.len() >= 5).await;
    let (tool, server) = call_spans(&spans, "c-child");
    assert_eq!(server.trace_id, agent_trace);
    assert_eq!(server.parent_span_id, agent_span);
    assert_eq!(server.trace_state, "vendor=opaque");
    assert_eq!(tool.parent_span_id, server.span_id);
    assert_ne!(server.trace_id, run_trace_id(&run));
}

/// Posts a `tools/call` as any Streamable HTTP client does, naming the
/// protocol version; returns the `structuredContent`.
async fn post(replica: &Replica, id: u64, tool: &str, arguments: &Value, meta: &Value) -> Value {
    let body = tools_call_body(id, tool, arguments, meta).to_string();
    let request = mcp_post(&http_client(), &replica.url("/mcp"), None, body)
        .header("mcp-protocol-version", "2025-06-18");
    let response = tokio::time::timeout(HANG_GUARD, request.send())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    body["result"]["structuredContent"].clone()
}

#[tokio::test]
async fn http_replicas_put_a_runs_calls_in_one_trace_with_content_when_asked() {
    let receiver = Receiver::start(Behaviour::Accept).await;
    let config = config_file(
        "traces-http",
        &format!(
            "[telemetry]\notlp_endpoint = \"{}\"\ncapture_content = true\n",
            receiver.endpoint
        ),
    );
    let a = Replica::start(&config, "memory", &["--insecure-no-auth"]).await;
    let b = Replica::start(&config, "memory", &["--insecure-no-auth"]).await;
    let run = unique("run");
    let arguments = json!({"query": "connection pool exhausted"});
    let first = post(
        &a,
        1,
        "lookup_knowledge",
        &arguments,
        &json!({"aci/run_id": run, "aci/tool_call_id": "c-a"}),
    )
    .await;
    let second = post(
        &b,
        1,
        "lookup_knowledge",
        &arguments,
        &json!({"aci/run_id": run, "aci/tool_call_id": "c-b"}),
    )
    .await;
    assert_eq!(first["evidence_status"], "EVIDENCE_FOUND");

    let spans = receiver.wait_for("10 spans", |s| s.len() >= 10).await;
    let trace = run_trace_id(&run);
    for (id, observation) in [("c-a", &first), ("c-b", &second)] {
        let (tool, server) = call_spans(&spans, id);
        assert_eq!(tool.trace_id, trace);
        assert_eq!(
            keys(server),
            set(&[
                "client.address",
                "gen_ai.tool.name",
                "jsonrpc.request.id",
                "mcp.method.name",
                "mcp.protocol.version",
                "network.transport",
            ])
        );
        assert_eq!(server.attr("network.transport"), "tcp");
        assert_eq!(server.attr("client.address"), "127.0.0.1");
        assert_eq!(server.attr("mcp.protocol.version"), "2025-06-18");
        // Content capture: the arguments as sent and the model's
        // observation, nothing else (never the raw response).
        assert_eq!(
            keys(tool),
            tool_keys(&[
                "aci.record.status",
                "gen_ai.tool.call.arguments",
                "gen_ai.tool.call.id",
                "gen_ai.tool.call.result",
                "gen_ai.tool.description",
                "gen_ai.tool.type",
            ])
        );
        assert_eq!(
            tool.attr("gen_ai.tool.call.arguments"),
            &json!(arguments.to_string())
        );
        let result: Value =
            serde_json::from_str(tool.attr("gen_ai.tool.call.result").as_str().unwrap()).unwrap();
        assert_eq!(&result, observation);
    }
    a.stop().await;
    b.stop().await;
}

/// `aci_telemetry_dropped_spans_total` of `replica`'s `/metrics`.
async fn dropped(replica: &Replica) -> u64 {
    let text = http_client()
        .get(replica.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("aci_telemetry_dropped_spans_total "))
        .unwrap_or_else(|| panic!("no dropped spans counter: {text}"))
        .trim()
        .parse()
        .unwrap()
}

#[tokio::test]
async fn a_collector_down_failing_or_hanging_never_fails_a_call() {
    // A port nobody listens on.
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", listener.local_addr().unwrap())
    };
    let unavailable = Receiver::start(Behaviour::Unavailable).await;
    let hanging = Receiver::start(Behaviour::Hang).await;
    for (what, endpoint, receiver) in [
        ("down", closed.clone(), None),
        ("503", unavailable.endpoint.clone(), Some(&unavailable)),
        ("hanging", hanging.endpoint.clone(), Some(&hanging)),
    ] {
        let config = config_file("traces-down", "[serve]\ndrain_secs = 2\n");
        // The standard variables alone switch telemetry on.
        let replica = Replica::start_with_env(
            &config,
            "memory",
            &["--insecure-no-auth"],
            &[
                ("RUST_LOG", "info"),
                ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
                ("OTEL_EXPORTER_OTLP_TIMEOUT", "300"),
                (
                    "OTEL_EXPORTER_OTLP_HEADERS",
                    "authorization=Bearer secret-collector-token",
                ),
            ],
        )
        .await;
        let run = unique("run");
        for i in 0..5 {
            let observation = post(
                &replica,
                i,
                "lookup_knowledge",
                &json!({"query": "connection pool exhausted"}),
                &json!({"aci/run_id": run, "aci/tool_call_id": format!("c-{i}")}),
            )
            .await;
            assert_eq!(observation["evidence_status"], "EVIDENCE_FOUND", "{what}");
        }
        if let Some(receiver) = receiver {
            receiver.wait_for_request().await;
        }
        // The lost spans are counted (every call's five spans, once their
        // export failed or timed out).
        let counted = async {
            while dropped(&replica).await < 25 {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        };
        tokio::time::timeout(HANG_GUARD, counted)
            .await
            .unwrap_or_else(|_| panic!("{what}: dropped spans never counted"));
        let (status, stderr) = replica.stop().await;
        assert!(status.success(), "{what}: {stderr}");
        assert!(!stderr.contains("secret-collector-token"), "{stderr}");
        assert!(!stderr.contains(&endpoint), "{stderr}");
    }
}

#[tokio::test]
async fn aci_call_exports_its_span_before_it_exits() {
    let receiver = Receiver::start(Behaviour::Accept).await;
    let config = config_file(
        "traces-call",
        &format!("[telemetry]\notlp_endpoint = \"{}\"\n", receiver.endpoint),
    );
    let run = unique("run");
    let out = aci_async(&[
        "call",
        "lookup_knowledge",
        r#"{"query":"connection pool exhausted"}"#,
        "--run-id",
        &run,
        "--tool-call-id",
        "c-cli",
        "--config",
        config.to_str().unwrap(),
    ])
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // Exported before the exit: already here, the tool span and its phases.
    let spans = receiver.spans();
    assert_eq!(spans.len(), 4, "{spans:#?}");
    let span = find(&spans, "execute_tool", "gen_ai.tool.call.id", "c-cli").unwrap();
    assert_eq!(phases(&spans, span), ALL_PHASES);
    assert_eq!(span.name, "execute_tool lookup_knowledge");
    assert_eq!(span.kind, INTERNAL);
    assert!(span.parent_span_id.is_empty());
    assert_eq!(span.trace_id, run_trace_id(&run));
    assert_eq!(keys(span), tool_keys(&RECORDED));
    assert_eq!(span.attr("gen_ai.tool.call.id"), "c-cli");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_call_abandoned_at_shutdown_is_a_span_with_its_record() {
    let receiver = Receiver::start(Behaviour::Accept).await;
    let silent = SilentServer::start().await;
    let config = config_file(
        "traces-abandon",
        &format!(
            "[telemetry]\notlp_endpoint = \"{}\"\n[serve]\ndrain_secs = 1\n{}",
            receiver.endpoint,
            silent.mysql_config()
        ),
    );
    let store = store_redis::testing::shared_url();
    let run = unique("run");
    let mut session = RawSession::start(&run_args(&config, &store, &run)).await;
    session
        .send_call(
            &json!(1),
            "query_mysql",
            Some(mysql_arguments()),
            Some(call_id("c-slow")),
        )
        .await;
    // Running: its record exists.
    let running = async {
        while !inspect(&run, &store, None)
            .await
            .iter()
            .any(|r| r["tool_call_id"] == "c-slow")
        {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(HANG_GUARD, running).await.unwrap();
    session.signal("TERM");
    let abandoned = session.response(&json!(1)).await;
    assert_abandoned(&abandoned, "c-slow");
    let (status, _, stderr) = session.finish().await;
    assert!(status.success(), "{stderr}");

    // Exported at shutdown, within the drain time.
    let spans = receiver.wait_for("2 spans", |s| s.len() >= 2).await;
    let (tool, server) = call_spans(&spans, "c-slow");
    // The boundary gave no timings: it was given up.
    assert!(phases(&spans, tool).is_empty());
    let mut want = tool_keys(&RECORDED);
    want.insert("error.type".to_owned());
    assert_eq!(keys(tool), want);
    assert_eq!(tool.attr("error.type"), "EXECUTION_ABANDONED");
    assert_eq!(tool.attr("aci.record.status"), "ERROR");
    assert_eq!(
        (tool.status_code, server.status_code),
        (STATUS_ERROR, STATUS_ERROR)
    );
}
