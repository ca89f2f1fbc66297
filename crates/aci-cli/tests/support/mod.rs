//! Test support for the `aci serve` tests: a raw JSON-RPC session over a real
//! child process's stdio, config files, and `aci` one-shot commands.

#![allow(dead_code, reason = "each test binary uses part of the support")]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

/// A guard against a hung server, not a timing assertion.
pub(crate) const HANG_GUARD: Duration = Duration::from_secs(120);

/// A config file with `toml` in the test's temporary directory.
pub(crate) fn config_file(name: &str, toml: &str) -> PathBuf {
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "serve-{name}-{}-{}.toml",
        std::process::id(),
        uuid_like()
    ));
    std::fs::write(&path, toml).unwrap();
    path
}

/// A fresh random hex string (for ids and names).
pub(crate) fn uuid_like() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos(),
    );
    format!("{:016x}", hasher.finish())
}

/// `aci serve` with `args`, logging at `rust_log`.
pub(crate) fn serve_command(args: &[&str], rust_log: &str) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_aci"));
    command.arg("serve").args(args).env("RUST_LOG", rust_log);
    command
}

/// Runs `aci <args>` to its end: (exit status, stdout, stderr).
pub(crate) async fn aci(args: &[&str]) -> (ExitStatus, String, String) {
    let output = tokio::time::timeout(
        HANG_GUARD,
        Command::new(env!("CARGO_BIN_EXE_aci"))
            .args(args)
            .env("RUST_LOG", "warn")
            .output(),
    )
    .await
    .unwrap()
    .unwrap();
    (
        output.status,
        String::from_utf8(output.stdout).unwrap(),
        String::from_utf8(output.stderr).unwrap(),
    )
}

/// The records of `run` on `store`, as `aci inspect --json` prints them.
pub(crate) async fn inspect(run: &str, store: &str) -> Vec<Value> {
    let (status, stdout, stderr) =
        aci(&["inspect", "--run", run, "--json", "--store", store]).await;
    assert!(status.success(), "aci inspect failed: {stderr}");
    stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
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
                "[serve]\ndrain_secs = {drain_secs}\n\
                 [mysql]\nconnect_timeout_ms = 60000\n\
                 [mysql.data_sources.orders]\nurl = \"mysql://reader:pw@127.0.0.1:{}/shop\"\n",
                self.port
            ),
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
