//! End to end: the real `aci serve` binary, driven by the rmcp client over the
//! child process's stdio (and, where the JSON-RPC framing itself is the
//! subject, by raw JSON lines).
//!
//! Every `structuredContent` is validated against the frozen schemas: READY
//! against `schemas/<tool>.observation.json` and the tool's `outputSchema`,
//! ERROR against `schemas/error.result.json`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::process::Stdio;

use rmcp::model::{CallToolRequest, ClientRequest, ProtocolVersion, ServerResult, Tool};
use rmcp::service::PeerRequestOptions;
use rmcp::transport::TokioChildProcess;
use rmcp::{ClientLifecycleMode, ClientServiceExt};
use serde_json::{Value, json};
use support::HANG_GUARD;
use support::contract::{
    self, McpClient, TOOLS, assert_clean, call_id, check, error_code, frozen_output_schema,
    frozen_tools, ids, params, read_schema, validator,
};
use support::files::config_file;
use support::stdio::{RawSession, mysql_arguments, serve_command};
use tokio::io::{AsyncBufReadExt, BufReader};

/// One `aci serve` child process and the rmcp client talking to it.
struct Server {
    client: McpClient,
    stderr: tokio::task::JoinHandle<String>,
}

impl Server {
    async fn start(args: &[&str]) -> Self {
        Self::start_with(args, ClientLifecycleMode::Initialize).await
    }

    async fn start_with(args: &[&str], lifecycle: ClientLifecycleMode) -> Self {
        let (transport, stderr) = TokioChildProcess::builder(serve_command(args, "info"))
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stderr = BufReader::new(stderr.unwrap());
        let stderr = tokio::spawn(async move {
            let mut text = String::new();
            let mut line = String::new();
            while stderr.read_line(&mut line).await.unwrap_or(0) > 0 {
                text.push_str(&line);
                line.clear();
            }
            text
        });
        // The client fails the handshake if stdout carries anything but the protocol.
        let client =
            tokio::time::timeout(HANG_GUARD, ().serve_with_lifecycle(transport, lifecycle))
                .await
                .unwrap()
                .unwrap();
        Self { client, stderr }
    }

    /// `tools/list`. Each tool's `outputSchema` is the frozen one, which
    /// [`check`] validates every result against.
    async fn tools(&self) -> Vec<Tool> {
        let tools = tokio::time::timeout(HANG_GUARD, self.client.list_all_tools())
            .await
            .unwrap()
            .unwrap();
        for tool in &tools {
            let name = tool.name.as_ref();
            let listed = Value::Object((*tool.output_schema.clone().unwrap()).clone());
            assert_eq!(
                Some(listed),
                frozen_output_schema(name),
                "{name} outputSchema"
            );
        }
        tools
    }

    /// Calls `name` with `arguments` (an object, or `null` for none) and
    /// `_meta` (an object, or `null`), and checks the result.
    async fn call(&self, name: &str, arguments: Value, meta: Value) -> Value {
        contract::call(&self.client, name, arguments, meta).await
    }

    /// Closes stdin and returns the server's stderr after it exits.
    async fn stop(self) -> String {
        tokio::time::timeout(HANG_GUARD, self.client.cancel())
            .await
            .unwrap()
            .unwrap();
        let stderr = tokio::time::timeout(HANG_GUARD, self.stderr)
            .await
            .unwrap()
            .unwrap();
        assert_clean(&stderr, "stderr");
        stderr
    }
}

/// Splits a composed tool call id `mcp:<session>:<JSON-RPC id>` into the
/// session and the JSON-RPC id text, checking its form.
fn split_composed(id: &str) -> (&str, &str) {
    let rest = id
        .strip_prefix("mcp:")
        .unwrap_or_else(|| panic!("not a composed id: {id}"));
    let (session, rpc_id) = rest.split_once(':').unwrap();
    let hex = session.strip_prefix("stdio-").unwrap();
    assert_eq!(hex.len(), 16, "{id}");
    assert!(hex.bytes().all(|b| b.is_ascii_hexdigit()), "{id}");
    (session, rpc_id)
}

#[tokio::test(flavor = "multi_thread")]
async fn lists_the_three_frozen_tools() {
    let server = Server::start(&[]).await;
    let info = server.client.peer_info().unwrap();
    let implementation = info.server_info.clone().unwrap();
    assert_eq!(implementation.name, "aci");
    assert_eq!(implementation.version, env!("CARGO_PKG_VERSION"));
    // The client asks for the newest revision; over `initialize` the server
    // answers with the newest one that still has the handshake.
    assert_eq!(
        info.protocol_version,
        ProtocolVersion::LATEST_WITH_INITIALIZE
    );
    assert!(info.capabilities.tools.is_some());
    assert!(info.capabilities.resources.is_none());
    assert!(info.capabilities.prompts.is_none());
    assert!(info.capabilities.completions.is_none());

    // The validators are not vacuous.
    let error = json!({"evidence_status": "ERROR", "error_code": "UNKNOWN_TOOL", "message": "m"});
    assert!(validator("error.result.json").is_valid(&error));
    assert!(!validator("error.result.json").is_valid(&json!({"evidence_status": "ERROR"})));
    for tool in TOOLS {
        assert!(!validator(&format!("{tool}.observation.json")).is_valid(&error));
    }

    let tools = server.tools().await;
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(names, TOOLS);
    let frozen = frozen_tools();
    for (tool, frozen) in tools.iter().zip(frozen.as_array().unwrap()) {
        let name = tool.name.as_ref();
        assert_eq!(
            tool.annotations.as_ref().unwrap().read_only_hint,
            Some(true),
            "{name}"
        );
        assert_eq!(
            Value::Object((*tool.input_schema).clone()),
            read_schema(&format!("{name}.request.json")),
            "{name} inputSchema"
        );
        let output = tool.output_schema.as_ref().unwrap();
        assert_eq!(output.get("type"), Some(&json!("object")), "{name}");
        assert_eq!(&serde_json::to_value(tool).unwrap(), frozen, "{name}");
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_newest_revision_works_without_a_handshake() {
    let server = Server::start_with(
        &[],
        ClientLifecycleMode::Discover {
            preferred_versions: vec![ProtocolVersion::LATEST],
        },
    )
    .await;
    let info = server.client.peer_info().unwrap();
    assert_eq!(info.protocol_version, ProtocolVersion::LATEST);
    assert_eq!(info.server_info.clone().unwrap().name, "aci");
    assert_eq!(server.tools().await.len(), 3);
    // `aci/*` keys live next to the revision's own `_meta` keys.
    let found = server
        .call(
            "lookup_knowledge",
            json!({"query": "connection pool exhausted"}),
            call_id("call-discover-1"),
        )
        .await;
    assert_eq!(found["evidence_status"], "EVIDENCE_FOUND");
    assert_eq!(found["tool_call_id"], "call-discover-1");
    // Without `_meta` ids the tool call id is the session's JSON-RPC id.
    let logs = server
        .call(
            "query_logs",
            json!({"topic": "APPLICATION", "query": "timeout"}),
            Value::Null,
        )
        .await;
    assert_eq!(logs["evidence_status"], "EVIDENCE_FOUND");
    let (_, rpc_id) = split_composed(logs["tool_call_id"].as_str().unwrap());
    assert!(rpc_id.parse::<u64>().is_ok(), "{logs}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn calls_each_tool() {
    let server = Server::start(&[]).await;
    server.tools().await;

    let found = server
        .call(
            "lookup_knowledge",
            json!({"query": "connection pool exhausted"}),
            Value::Null,
        )
        .await;
    assert_eq!(found["evidence_status"], "EVIDENCE_FOUND");
    assert!(!found["evidence"].as_array().unwrap().is_empty());

    let none = server
        .call(
            "lookup_knowledge",
            json!({"query": "quarterly marketing budget zebra"}),
            Value::Null,
        )
        .await;
    assert_eq!(none["evidence_status"], "NO_EVIDENCE"); // and isError false (checked)
    assert_eq!(none["evidence"], json!([]));

    let logs = server
        .call(
            "query_logs",
            json!({"topic": "APPLICATION", "query": "timeout"}),
            Value::Null,
        )
        .await;
    assert_eq!(logs["evidence_status"], "EVIDENCE_FOUND");

    let mysql = server
        .call("query_mysql", mysql_arguments(), Value::Null)
        .await;
    assert_eq!(error_code(&mysql), "DATA_SOURCE_UNKNOWN"); // and isError true (checked)
    assert!(mysql["tool_call_id"].is_string());
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn preflight_errors_are_error_results() {
    let server = Server::start(&[]).await;
    server.tools().await;
    let query = json!({"query": "disk pressure"});

    // An invalid id in `_meta`: no substitute, and no id in the result.
    let invalid = server
        .call("lookup_knowledge", query.clone(), call_id("bad id"))
        .await;
    assert_eq!(error_code(&invalid), "INVALID_TOOL_CALL_ID");
    assert!(invalid.get("tool_call_id").is_none(), "{invalid}");
    // A `_meta` id that is not a string is no id either.
    let numeric = server
        .call(
            "lookup_knowledge",
            query.clone(),
            json!({"aci/tool_call_id": 42}),
        )
        .await;
    assert_eq!(error_code(&numeric), "INVALID_TOOL_CALL_ID");
    assert!(numeric.get("tool_call_id").is_none(), "{numeric}");

    // The same `_meta` id twice.
    let first = server
        .call("lookup_knowledge", query.clone(), call_id("call-dup"))
        .await;
    assert_eq!(first["evidence_status"], "EVIDENCE_FOUND");
    let again = server
        .call("lookup_knowledge", query.clone(), call_id("call-dup"))
        .await;
    assert_eq!(error_code(&again), "DUPLICATE_TOOL_CALL");
    assert_eq!(again["tool_call_id"], "call-dup");

    // Unknown tools go through the boundary too.
    let unknown = server
        .call("drop_database", json!({}), call_id("call-unknown"))
        .await;
    assert_eq!(error_code(&unknown), "UNKNOWN_TOOL");
    assert_eq!(unknown["tool_call_id"], "call-unknown");

    // Bad arguments.
    let extra = server
        .call(
            "lookup_knowledge",
            json!({"query": "disk", "limit": 3}),
            call_id("call-extra"),
        )
        .await;
    assert_eq!(error_code(&extra), "INVALID_INPUT");
    let zero = server
        .call(
            "query_logs",
            json!({"topic": "APPLICATION", "query": "timeout", "lookback_minutes": 0}),
            call_id("call-zero"),
        )
        .await;
    assert_eq!(error_code(&zero), "INVALID_INPUT");
    let missing = server
        .call("lookup_knowledge", Value::Null, call_id("call-missing"))
        .await;
    assert_eq!(error_code(&missing), "INVALID_INPUT");
    let empty = server
        .call("lookup_knowledge", json!({}), call_id("call-empty"))
        .await;
    assert_eq!(error_code(&empty), "INVALID_INPUT");

    // An invalid `_meta` run id is checked against the server's run.
    let run = server
        .call(
            "lookup_knowledge",
            query.clone(),
            ids("bad run", "call-run"),
        )
        .await;
    assert_eq!(error_code(&run), "RUN_MISMATCH");
    let run = server
        .call(
            "lookup_knowledge",
            query.clone(),
            json!({"aci/tool_call_id": "call-run-2", "aci/run_id": 7}),
        )
        .await;
    assert_eq!(error_code(&run), "RUN_MISMATCH");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn oversized_requests_are_refused() {
    let config = config_file("limits", "[limits]\nmax_request_bytes = 200\n");
    let server = Server::start(&["--config", config.to_str().unwrap()]).await;
    server.tools().await;
    let long = "connection pool ".repeat(15); // 240 characters: valid, but too large
    let refused = server
        .call("lookup_knowledge", json!({"query": long}), Value::Null)
        .await;
    assert_eq!(error_code(&refused), "REQUEST_TOO_LARGE");
    let fine = server
        .call(
            "lookup_knowledge",
            json!({"query": "connection pool"}),
            Value::Null,
        )
        .await;
    assert_eq!(fine["evidence_status"], "EVIDENCE_FOUND");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_run_budget_is_enforced_per_run() {
    let config = config_file("budget", "[run]\nbudget = 2\n");
    let server = Server::start(&[
        "--config",
        config.to_str().unwrap(),
        "--run-id",
        "run-budget",
    ])
    .await;
    server.tools().await;
    let query = json!({"query": "slow queries"});
    for _ in 0..2 {
        let ready = server
            .call("lookup_knowledge", query.clone(), Value::Null)
            .await;
        assert_ne!(ready["evidence_status"], "ERROR", "{ready}");
    }
    let third = server
        .call("lookup_knowledge", query.clone(), Value::Null)
        .await;
    assert_eq!(error_code(&third), "RUN_BUDGET_EXHAUSTED");
    // Another run through the same server has a budget of its own.
    let other = server
        .call(
            "lookup_knowledge",
            query.clone(),
            ids("run-budget-other", "call-1"),
        )
        .await;
    assert_ne!(other["evidence_status"], "ERROR", "{other}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_meta_run_id_is_a_run_of_its_own() {
    let server = Server::start(&["--run-id", "run-main"]).await;
    server.tools().await;
    let query = json!({"query": "out of memory killed"});
    let in_b = ids("run-harness-b", "call-1");

    let first = server
        .call("lookup_knowledge", query.clone(), in_b.clone())
        .await;
    assert_ne!(first["evidence_status"], "ERROR", "{first}");
    assert_eq!(first["tool_call_id"], "call-1");
    // The same tool call id in the server's run is a different call.
    let main = server
        .call("lookup_knowledge", query.clone(), call_id("call-1"))
        .await;
    assert_ne!(main["evidence_status"], "ERROR", "{main}");
    // Naming the server's run explicitly is the same as leaving it out.
    let explicit = server
        .call("lookup_knowledge", query.clone(), ids("run-main", "call-1"))
        .await;
    assert_eq!(error_code(&explicit), "DUPLICATE_TOOL_CALL");
    // ...and the first call was recorded in run-harness-b.
    let again = server.call("lookup_knowledge", query, in_b).await;
    assert_eq!(error_code(&again), "DUPLICATE_TOOL_CALL");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_default_tool_call_id_is_the_sessions_jsonrpc_id() {
    let server = Server::start(&[]).await;
    server.tools().await;
    let mut seen = Vec::new();
    for query in ["connection pool exhausted", "no such thing zebra"] {
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params(
            "lookup_knowledge",
            json!({"query": query}),
            Value::Null,
        )));
        let handle = server
            .client
            .peer()
            .send_cancellable_request(request, PeerRequestOptions::no_options())
            .await
            .unwrap();
        let id = handle.id.to_string();
        let response = tokio::time::timeout(HANG_GUARD, handle.await_response())
            .await
            .unwrap()
            .unwrap();
        let ServerResult::CallToolResult(result) = response else {
            panic!("expected a tools/call result: {response:?}");
        };
        let observation = check("lookup_knowledge", &result);
        let composed = observation["tool_call_id"].as_str().unwrap().to_owned();
        let (session, rpc_id) = split_composed(&composed);
        assert_eq!(rpc_id, id.as_str());
        seen.push((session.to_owned(), id));
    }
    assert_ne!(seen[0].1, seen[1].1);
    assert_eq!(seen[0].0, seen[1].0, "one session per server process");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn jsonrpc_ids_are_composed_with_the_session_as_sent() {
    let mut session = RawSession::start(&[]).await;
    let query = json!({"query": "connection pool exhausted"});

    let by_string = lookup(&mut session, json!("rpc.7:a"), query.clone()).await;
    let composed = by_string["tool_call_id"].as_str().unwrap().to_owned();
    let (name, rpc_id) = split_composed(&composed);
    assert_eq!(rpc_id, "rpc.7:a");
    let by_number = lookup(&mut session, json!(42), query.clone()).await;
    assert_eq!(by_number["tool_call_id"], format!("mcp:{name}:42"));
    contract::assert_valid(
        validator("lookup_knowledge.observation.json"),
        &by_number,
        "observation",
    );
    // A JSON-RPC id that is not a valid tool call id is not replaced either.
    let invalid = lookup(&mut session, json!("has space"), query.clone()).await;
    assert_eq!(invalid["error_code"], "INVALID_TOOL_CALL_ID");
    assert!(invalid.get("tool_call_id").is_none());
    contract::assert_valid(validator("error.result.json"), &invalid, "error result");
    // The same JSON-RPC id twice is the same tool call twice.
    let again = lookup(&mut session, json!(42), query).await;
    assert_eq!(again["error_code"], "DUPLICATE_TOOL_CALL");

    let (status, rest, _) = session.close().await;
    // Nothing more may come on stdout after end of input.
    assert!(rest.is_empty(), "{rest:?}");
    assert!(
        status.success(),
        "stdin EOF ends the server cleanly: {status}"
    );
}

/// A raw `lookup_knowledge` call with JSON-RPC id `id`: its `structuredContent`.
async fn lookup(session: &mut RawSession, id: Value, arguments: Value) -> Value {
    session.call(&id, "lookup_knowledge", arguments, None).await
}

#[tokio::test(flavor = "multi_thread")]
async fn interrupt_ends_the_server_cleanly() {
    let session = RawSession::start(&[]).await;
    // Our own child, by its id.
    session.signal("INT");
    // stdin is still open: the interrupt alone must end the server.
    let (status, _, _) = session.finish().await;
    assert!(status.success(), "Ctrl-C ends the server cleanly: {status}");
}

#[tokio::test(flavor = "multi_thread")]
async fn data_source_failures_name_no_url_or_password() {
    // Port 1 on loopback refuses connections: the call fails at the source.
    let config = config_file(
        "mysql",
        "[mysql]\nconnect_timeout_ms = 2000\n\
         [mysql.data_sources.orders]\nurl = \"mysql://reader:secret@127.0.0.1:1/shop\"\n",
    );
    let server = Server::start(&["--config", config.to_str().unwrap()]).await;
    server.tools().await;
    let failed = server
        .call("query_mysql", mysql_arguments(), Value::Null)
        .await;
    // The result and stderr are checked for URLs and secrets on the way.
    assert_eq!(failed["evidence_status"], "ERROR", "{failed}");
    let stderr = server.stop().await;
    assert!(!stderr.contains("reader"), "{stderr}");
}
