//! `aci serve --http` child processes: start on a free loopback port, talk to
//! them with the rmcp client or raw HTTP, stop them with SIGTERM or SIGKILL.

use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};

use rmcp::ServiceExt as _;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::Child;

use super::http_client;
use crate::support::HANG_GUARD;
use crate::support::command::aci_command;
use crate::support::contract::McpClient;

/// One running replica.
pub(crate) struct Replica {
    child: Child,
    /// `http`, or `https` when it serves TLS.
    scheme: &'static str,
    /// `127.0.0.1:PORT`.
    pub(crate) addr: String,
    stderr: Arc<Mutex<String>>,
    stderr_done: tokio::task::JoinHandle<()>,
}

impl Replica {
    /// Starts `aci serve --http 127.0.0.1:0 --config CONFIG --store STORE ARGS`
    /// and waits until it listens.
    pub(crate) async fn start(config: &Path, store: &str, args: &[&str]) -> Self {
        Self::start_with_env(config, store, args, &[("RUST_LOG", "info")]).await
    }

    /// [`start`](Self::start) with environment variables.
    pub(crate) async fn start_with_env(
        config: &Path,
        store: &str,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Self {
        let config = config.to_str().unwrap();
        let mut command = aci_command(&[
            "serve",
            "--http",
            "127.0.0.1:0",
            "--config",
            config,
            "--store",
            store,
        ]);
        command
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = command.spawn().unwrap();
        let stderr_pipe = child.stderr.take().unwrap();
        let stderr = Arc::new(Mutex::new(String::new()));
        let (addr_tx, addr_rx) = tokio::sync::oneshot::channel();
        let sink = Arc::clone(&stderr);
        let stderr_done = tokio::spawn(async move {
            let mut lines = BufReader::new(stderr_pipe).lines();
            let mut addr_tx = Some(addr_tx);
            while let Ok(Some(line)) = lines.next_line().await {
                let served = [
                    ("http", "aci: serving MCP over HTTP at http://"),
                    ("https", "aci: serving MCP over HTTPS at https://"),
                ]
                .into_iter()
                .find_map(|(scheme, prefix)| Some((scheme, line.strip_prefix(prefix)?)));
                if let Some((scheme, rest)) = served
                    && let Some(tx) = addr_tx.take()
                {
                    let addr = rest.split_once("/mcp").map_or(rest, |(addr, _)| addr);
                    let _ = tx.send((scheme, addr.to_owned()));
                }
                let mut text = sink.lock().unwrap();
                text.push_str(&line);
                text.push('\n');
            }
        });
        let (scheme, addr) = match tokio::time::timeout(HANG_GUARD, addr_rx).await {
            Ok(Ok(served)) => served,
            _ => panic!(
                "the replica did not start: {}",
                stderr.lock().unwrap().as_str()
            ),
        };
        Self {
            child,
            scheme,
            addr,
            stderr,
            stderr_done,
        }
    }

    /// `http://ADDR{path}` (`https://` when it serves TLS).
    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}://{}{path}", self.scheme, self.addr)
    }

    /// An rmcp client of `path` (e.g. `/mcp`) with `token` (none: no header).
    pub(crate) async fn client(&self, path: &str, token: Option<&str>) -> McpClient {
        self.client_with(path, token, http_client()).await
    }

    /// [`client`](Self::client) over `http` (e.g. one that trusts a test CA).
    pub(crate) async fn client_with(
        &self,
        path: &str,
        token: Option<&str>,
        http: reqwest::Client,
    ) -> McpClient {
        let mut config = StreamableHttpClientTransportConfig::with_uri(self.url(path))
            .max_concurrent_requests(64);
        if let Some(token) = token {
            config = config.auth_header(token);
        }
        let transport = StreamableHttpClientTransport::with_client(http, config);
        tokio::time::timeout(HANG_GUARD, ().serve(transport))
            .await
            .unwrap()
            .unwrap()
    }

    /// What the replica wrote on stderr so far.
    pub(crate) fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// The process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id().unwrap()
    }

    /// The process's resident memory now and at its peak (`VmRSS`, `VmHWM`
    /// of `/proc/<pid>/status`), in KiB.
    pub(crate) fn memory(&self) -> Memory {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        let kib = |key: &str| -> u64 {
            status
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
                .unwrap_or_else(|| panic!("no {key} in /proc/<pid>/status"))
        };
        Memory {
            rss_kib: kib("VmRSS:"),
            peak_kib: kib("VmHWM:"),
        }
    }

    /// Sends `signal` (e.g. `-TERM`, `-KILL`).
    pub(crate) fn signal(&self, signal: &str) {
        let status = std::process::Command::new("kill")
            .args([signal, &self.pid().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// Waits for the process to exit; returns its status and all of stderr.
    pub(crate) async fn wait(mut self) -> (ExitStatus, String) {
        let status = tokio::time::timeout(HANG_GUARD, self.child.wait())
            .await
            .unwrap()
            .unwrap();
        let _ = tokio::time::timeout(HANG_GUARD, &mut self.stderr_done).await;
        let text = self.stderr.lock().unwrap().clone();
        (status, text)
    }

    /// SIGTERM, then the exit status and stderr.
    pub(crate) async fn stop(self) -> (ExitStatus, String) {
        self.signal("-TERM");
        self.wait().await
    }
}

/// A replica's resident memory, in KiB.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Memory {
    /// Resident now (`VmRSS`).
    pub(crate) rss_kib: u64,
    /// The peak so far (`VmHWM`).
    pub(crate) peak_kib: u64,
}

/// A JSON-RPC `tools/call` request of `tool` with `arguments` and `_meta`.
pub(crate) fn tools_call_body(
    id: impl Into<Value>,
    tool: &str,
    arguments: &Value,
    meta: &Value,
) -> Value {
    json!({
        "jsonrpc": "2.0", "id": id.into(), "method": "tools/call",
        "params": { "name": tool, "arguments": arguments, "_meta": meta },
    })
}

/// A POST of JSON-RPC `body` to `url` as any Streamable HTTP client sends
/// it, with `token` as its bearer (none: no header).
pub(crate) fn mcp_post(
    http: &reqwest::Client,
    url: &str,
    token: Option<&str>,
    body: String,
) -> reqwest::RequestBuilder {
    let request = http
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(body);
    match token {
        Some(token) => request.bearer_auth(token),
        None => request,
    }
}

/// A raw JSON-RPC `tools/call` POST (no MCP handshake): what any HTTP client
/// can send. Returns the status, the `WWW-Authenticate` header and the body.
pub(crate) async fn post_call(
    url: &str,
    token: Option<&str>,
    id: u64,
    tool: &str,
    arguments: &Value,
    meta: &Value,
) -> (u16, Option<String>, String) {
    let body = tools_call_body(id, tool, arguments, meta);
    post_json(url, token, &body.to_string()).await
}

/// POSTs `body` as JSON to `url`.
pub(crate) async fn post_json(
    url: &str,
    token: Option<&str>,
    body: &str,
) -> (u16, Option<String>, String) {
    let request = mcp_post(&http_client(), url, token, body.to_owned());
    let response = tokio::time::timeout(HANG_GUARD, request.send())
        .await
        .unwrap()
        .unwrap();
    let status = response.status().as_u16();
    let challenge = response
        .headers()
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_owned());
    let text = response.text().await.unwrap_or_default();
    (status, challenge, text)
}

/// Starts a raw `tools/call` POST with `token` on a task of its own, for a
/// call the test stops the replica under: the response, or the error of a
/// connection the replica dropped.
pub(crate) fn spawn_post_call(
    url: &str,
    token: &str,
    tool: &str,
    arguments: &Value,
    meta: &Value,
) -> tokio::task::JoinHandle<reqwest::Result<reqwest::Response>> {
    let body = tools_call_body(1, tool, arguments, meta);
    tokio::spawn(mcp_post(&http_client(), url, Some(token), body.to_string()).send())
}

/// GETs `url`: status and body.
pub(crate) async fn get(url: &str) -> (u16, String) {
    let response = tokio::time::timeout(HANG_GUARD, http_client().get(url).send())
        .await
        .unwrap()
        .unwrap();
    let status = response.status().as_u16();
    (status, response.text().await.unwrap_or_default())
}
