//! `aci serve` over stdio, spoken to in raw JSON-RPC lines ([`RawSession`]),
//! and a MySQL data source that never answers ([`SilentServer`]), so a call
//! stays in flight as long as a test needs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use super::HANG_GUARD;
use super::command::aci_command;
use super::files::config_file;

/// `aci serve` with `args`, logging at `rust_log`.
pub(crate) fn serve_command(args: &[&str], rust_log: &str) -> Command {
    let mut command = aci_command(&["serve"]);
    command.args(args).env("RUST_LOG", rust_log);
    command
}

/// `--config CONFIG --store STORE --run-id RUN`: a server of one run on a
/// shared store.
pub(crate) fn run_args<'a>(config: &'a Path, store: &'a str, run: &'a str) -> [&'a str; 6] {
    [
        "--config",
        config.to_str().unwrap(),
        "--store",
        store,
        "--run-id",
        run,
    ]
}

/// A raw JSON-RPC session with one `aci serve` child: lines in, lines out.
pub(crate) struct RawSession {
    pub(crate) child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    /// The child's stderr, collected to its end.
    stderr: Option<tokio::task::JoinHandle<String>>,
    /// Messages read ahead, by id (JSON text).
    responses: BTreeMap<String, Value>,
}

impl RawSession {
    /// Starts `aci serve args` and completes the handshake.
    pub(crate) async fn start(args: &[&str]) -> Self {
        Self::start_logging(args, "info").await
    }

    /// Starts `aci serve args` with `RUST_LOG=rust_log` and completes the
    /// handshake.
    pub(crate) async fn start_logging(args: &[&str], rust_log: &str) -> Self {
        let mut child = serve_command(args, rust_log)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut stderr = child.stderr.take().unwrap();
        let stderr = tokio::spawn(async move {
            let mut text = String::new();
            let _ = stderr.read_to_string(&mut text).await;
            text
        });
        let mut session = Self {
            child,
            stdin,
            stdout,
            stderr: Some(stderr),
            responses: BTreeMap::new(),
        };
        session
            .send(&json!({
                "jsonrpc": "2.0", "id": "init", "method": "initialize",
                "params": {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {},
                    "clientInfo": {"name": "raw", "version": "1"}
                }
            }))
            .await;
        let init = session.response(&json!("init")).await;
        assert_eq!(init["result"]["serverInfo"]["name"], "aci", "{init}");
        session
            .send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        session
    }

    /// The child's process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id().unwrap()
    }

    /// Sends one message as one line.
    pub(crate) async fn send(&mut self, message: &Value) {
        self.send_raw(format!("{message}\n").as_bytes()).await;
    }

    /// Sends bytes as they are.
    pub(crate) async fn send_raw(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(bytes).await.unwrap();
        stdin.flush().await.unwrap();
    }

    /// Sends a `tools/call` of `tool` with `arguments` (left out when `None`)
    /// and `meta` (left out when `None`).
    pub(crate) async fn send_call(
        &mut self,
        id: &Value,
        tool: &str,
        arguments: Option<Value>,
        meta: Option<Value>,
    ) {
        let mut params = json!({"name": tool});
        if let Some(arguments) = arguments {
            params["arguments"] = arguments;
        }
        if let Some(meta) = meta {
            params["_meta"] = meta;
        }
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params}))
            .await;
    }

    /// Calls `tool` and returns its `structuredContent`.
    pub(crate) async fn call(
        &mut self,
        id: &Value,
        tool: &str,
        arguments: Value,
        meta: Option<Value>,
    ) -> Value {
        self.send_call(id, tool, Some(arguments), meta).await;
        let response = self.response(id).await;
        response["result"]["structuredContent"].clone()
    }

    /// The next message, whatever its id.
    pub(crate) async fn next_message(&mut self) -> Option<Value> {
        let mut line = String::new();
        let n = tokio::time::timeout(HANG_GUARD, self.stdout.read_line(&mut line))
            .await
            .expect("the server answers within the hang guard")
            .unwrap();
        if n == 0 {
            return None;
        }
        // stdout carries only JSON-RPC messages, one per line.
        let message: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("stdout carried a non-JSON line ({e}): {line}"));
        assert_eq!(message["jsonrpc"], "2.0", "{line}");
        Some(message)
    }

    /// The message answering id `id` (responses to other ids are kept).
    pub(crate) async fn response(&mut self, id: &Value) -> Value {
        let key = id.to_string();
        loop {
            if let Some(response) = self.responses.remove(&key) {
                return response;
            }
            let message = self
                .next_message()
                .await
                .expect("the server answers before closing stdout");
            let id = message
                .get("id")
                .map_or_else(|| "<none>".to_owned(), Value::to_string);
            self.responses.insert(id, message);
        }
    }

    /// Whether a message with id `id` was read ahead.
    pub(crate) fn has_response(&self, id: &Value) -> bool {
        self.responses.contains_key(&id.to_string())
    }

    /// Sends `signal` (`TERM`, `INT`, `KILL`) to the child, by its id.
    pub(crate) fn signal(&self, signal: &str) {
        let sent = std::process::Command::new("kill")
            .args([format!("-{signal}"), self.pid().to_string()])
            .status()
            .unwrap();
        assert!(sent.success());
    }

    /// Closes stdin.
    pub(crate) fn close_stdin(&mut self) {
        drop(self.stdin.take());
    }

    /// Reads every message left until stdout closes, then waits for the exit:
    /// (exit status, the messages, stderr).
    pub(crate) async fn finish(mut self) -> (ExitStatus, Vec<Value>, String) {
        let mut rest: Vec<Value> = std::mem::take(&mut self.responses).into_values().collect();
        while let Some(message) = self.next_message().await {
            rest.push(message);
        }
        let status = tokio::time::timeout(HANG_GUARD, self.child.wait())
            .await
            .unwrap()
            .unwrap();
        let stderr = tokio::time::timeout(HANG_GUARD, self.stderr.take().unwrap())
            .await
            .unwrap()
            .unwrap();
        (status, rest, stderr)
    }

    /// Closes stdin and finishes.
    pub(crate) async fn close(mut self) -> (ExitStatus, Vec<Value>, String) {
        self.close_stdin();
        self.finish().await
    }
}

/// The JSON-RPC error code of `response`.
pub(crate) fn rpc_error(response: &Value) -> i64 {
    response["error"]["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("expected a JSON-RPC error: {response}"))
}

/// Asserts that `response` is the error result of an abandoned call
/// `tool_call_id`.
pub(crate) fn assert_abandoned(response: &Value, tool_call_id: &str) {
    let observation = &response["result"]["structuredContent"];
    assert_eq!(
        observation["error_code"], "EXECUTION_ABANDONED",
        "{response}"
    );
    assert_eq!(observation["tool_call_id"], tool_call_id, "{response}");
    assert_eq!(response["result"]["isError"], true);
}

/// A TCP listener that accepts connections and never says a word: a MySQL
/// data source whose handshake never comes, so a call to it stays in flight
/// until the connect timeout.
pub(crate) struct SilentServer {
    pub(crate) port: u16,
    task: tokio::task::JoinHandle<()>,
}

impl SilentServer {
    pub(crate) async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let task = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((socket, _)) = listener.accept().await {
                held.push(socket);
            }
        });
        Self { port, task }
    }

    /// A config whose `orders` data source is this server, with a connect
    /// timeout of a minute, and `[serve] drain_secs = drain_secs`.
    pub(crate) fn config(&self, name: &str, drain_secs: u64) -> PathBuf {
        config_file(
            name,
            &format!(
                "[serve]\ndrain_secs = {drain_secs}\n{}",
                self.mysql_config()
            ),
        )
    }

    /// The `[mysql]` section naming this server as the `orders` data
    /// source, with a connect timeout of a minute.
    pub(crate) fn mysql_config(&self) -> String {
        format!(
            "[mysql]\nconnect_timeout_ms = 60000\n\
             [mysql.data_sources.orders]\nurl = \"mysql://reader:pw@127.0.0.1:{}/shop\"\n",
            self.port
        )
    }
}

impl Drop for SilentServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A `query_mysql` call's arguments on the `orders` data source.
pub(crate) fn mysql_arguments() -> Value {
    json!({"data_source": "orders", "sql": "SELECT id FROM orders WHERE id = ?", "params": [1]})
}
