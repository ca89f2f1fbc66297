//! `aci serve`: the MCP server on stdio.
//!
//! The server speaks the newest MCP revision rmcp knows
//! ([`ProtocolVersion::LATEST`], 2026-07-28, with its per-request `_meta`
//! lifecycle) and every older one rmcp supports; over the `initialize`
//! handshake it agrees to the client's version, or to the newest revision that
//! still has a handshake. It names itself `aci` with this crate's version and
//! offers tools only.
//!
//! # Tools
//!
//! `tools/list` gives the three frozen tools exactly as
//! [`ToolDefinition::to_mcp`](aci_contracts::ToolDefinition::to_mcp) writes
//! them: `name`, `title`, `description`, `inputSchema` and `outputSchema` from
//! the frozen schemas, and `annotations` with `readOnlyHint: true`.
//!
//! `tools/call` runs through the [`ToolBoundary`](invocation_core::ToolBoundary)
//! and nothing else: every name, known or not, and every argument object goes
//! to the boundary, whose preflight answers unknown tools (`UNKNOWN_TOOL`) and
//! bad arguments (`INVALID_INPUT`) with an error result rather than a protocol
//! error. The arguments are the request's `arguments` object as compact JSON
//! text; a request without `arguments` passes empty text (the boundary answers
//! `INVALID_INPUT`), never an invented `{}`. Every call is `authorized` and
//! `read_only`: the server exposes only the three read-only tools, and the
//! boundary still refuses any tool that is not read-only.
//!
//! # Ids
//!
//! The boundary never invents an id, and neither does this server:
//!
//! - **Tool call id**: the request's `_meta["aci/tool_call_id"]` when present;
//!   otherwise the JSON-RPC id of that `tools/call` request (the client's own
//!   id for the call; a numeric id becomes its decimal text, so the rmcp
//!   client's `4` is the tool call id `"4"`).
//! - **Run id**: the request's `_meta["aci/run_id"]` when present; otherwise
//!   the server's run (`--run-id`, or the one made at start and written to
//!   stderr). A valid `_meta` run id other than the server's is served as a run
//!   of its own (a harness may drive several runs through one server), with
//!   the configured budgets and deadline.
//! - An id in `_meta` is used exactly as given. An invalid tool call id gives
//!   `INVALID_TOOL_CALL_ID`; an invalid run id gives `RUN_MISMATCH` (the call is
//!   checked against the server's run). A `_meta` id that is not a JSON string
//!   is no id at all: the boundary gets empty text and answers the same way.
//!   Nothing is ever substituted.
//!
//! # Results
//!
//! The result's `structuredContent` is the model's observation (the tool's
//! observation when READY, the error result when ERROR), and its one text
//! block carries the same JSON text, fields in the contract's order. `isError`
//! is `false` for READY (`EVIDENCE_FOUND` and `NO_EVIDENCE`) and `true` for
//! ERROR. The harness's control view, scopes and fingerprints never leave the
//! process; they are in the run's journal (`aci inspect` on a shared store).
//!
//! # Process
//!
//! stdout carries only the protocol; logs go to stderr through `tracing`
//! (`RUST_LOG`). The server stops cleanly (exit status 0) when the client
//! closes stdin, or on Ctrl-C (SIGINT) or SIGTERM. stdin is read on a
//! dedicated thread so that stopping never waits for a pending terminal read.

use std::io::Read as _;
use std::pin::Pin;
use std::task::{Context, Poll};

use aci_contracts::{RunId, tool_definitions};
use invocation_core::{BoundaryOutcome, ToolEnvelope};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ProtocolVersion, RequestId, RequestMetaObject,
    ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{QuitReason, RequestContext, RoleServer, ServerInitializeError};
use rmcp::{ErrorData as McpError, ServerHandler, ServiceExt};
use serde_json::Value;
use tokio::io::{AsyncRead, ReadBuf};
use tokio::sync::mpsc;

use crate::app::App;
use crate::error::CliError;

/// The `_meta` key of the run id.
pub(crate) const META_RUN_ID: &str = "aci/run_id";
/// The `_meta` key of the tool call id.
pub(crate) const META_TOOL_CALL_ID: &str = "aci/tool_call_id";

/// Serves the boundary's tools over MCP on stdin/stdout until the client
/// disconnects or the process is asked to stop.
pub(crate) async fn serve(app: App, run_id: RunId) -> Result<(), CliError> {
    let _knowledge_watch = crate::knowledge_watch::watch(&app);
    let server = AciServer::new(app, run_id)?;
    let mut shutdown = Shutdown::listen();
    let transport = (ThreadStdin::spawn()?, tokio::io::stdout());
    let running = tokio::select! {
        started = server.serve(transport) => match started {
            Ok(running) => running,
            Err(error) => return handshake_end(error),
        },
        () = shutdown.requested() => {
            tracing::info!("stopped before the MCP handshake");
            return Ok(());
        }
    };
    tracing::info!("MCP session started");
    let cancel = running.cancellation_token();
    let waiting = running.waiting();
    tokio::pin!(waiting);
    let quit = tokio::select! {
        quit = &mut waiting => quit,
        () = shutdown.requested() => {
            tracing::info!("stop requested; closing the MCP session");
            cancel.cancel();
            waiting.await
        }
    };
    match quit {
        Ok(QuitReason::JoinError(_)) | Err(_) => {
            Err(CliError::config("the MCP session stopped unexpectedly"))
        }
        Ok(reason) => {
            tracing::info!(?reason, "MCP session ended");
            Ok(())
        }
    }
}

/// How a failed handshake ends the command: a client that leaves (or a stop
/// request) before initializing is a clean end; anything else is one line.
fn handshake_end(error: ServerInitializeError) -> Result<(), CliError> {
    let message = match error {
        ServerInitializeError::ConnectionClosed(_) | ServerInitializeError::Cancelled => {
            tracing::info!("the session ended before the MCP handshake");
            return Ok(());
        }
        // The variant carries the client's message; keep it out of the line.
        ServerInitializeError::ExpectedInitializeRequest(_) => {
            "MCP handshake failed: the client's first message was not a request".to_owned()
        }
        ServerInitializeError::InitializeFailed(error) => {
            format!("MCP handshake failed: {}", error.message)
        }
        ServerInitializeError::TransportError { context, .. } => {
            format!("MCP transport failed while {context}")
        }
        _ => "MCP handshake failed".to_owned(),
    };
    Err(CliError::config(message))
}

/// Stop requests: Ctrl-C (SIGINT) and, on Unix, SIGTERM.
///
/// The listeners are installed when this is made, before the session reads
/// anything, so a signal that arrives at any point of the session counts.
struct Shutdown {
    #[cfg(unix)]
    interrupt: Option<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    terminate: Option<tokio::signal::unix::Signal>,
}

impl Shutdown {
    #[cfg(unix)]
    fn listen() -> Self {
        use tokio::signal::unix::{SignalKind, signal};
        Self {
            interrupt: signal(SignalKind::interrupt()).ok(),
            terminate: signal(SignalKind::terminate()).ok(),
        }
    }

    #[cfg(not(unix))]
    fn listen() -> Self {
        Self {}
    }

    /// Resolves when a stop is requested; never when no listener could be
    /// installed.
    #[cfg(unix)]
    async fn requested(&mut self) {
        async fn next(signal: Option<&mut tokio::signal::unix::Signal>) {
            match signal {
                Some(signal) => {
                    signal.recv().await;
                }
                None => std::future::pending().await,
            }
        }
        tokio::select! {
            () = next(self.interrupt.as_mut()) => {}
            () = next(self.terminate.as_mut()) => {}
        }
    }

    /// Resolves when a stop is requested; never when no listener could be
    /// installed.
    #[cfg(not(unix))]
    async fn requested(&mut self) {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// The MCP server: the boundary, the server's run, and the tool list.
#[derive(Debug)]
struct AciServer {
    app: App,
    run_id: RunId,
    tools: Vec<Tool>,
}

impl AciServer {
    fn new(app: App, run_id: RunId) -> Result<Self, CliError> {
        Ok(Self {
            app,
            run_id,
            tools: mcp_tools()
                .map_err(|e| CliError::config(format!("cannot build the MCP tool list: {e}")))?,
        })
    }

    /// Runs one `tools/call` through the boundary.
    async fn call(
        &self,
        request: &CallToolRequestParams,
        meta: &RequestMetaObject,
        id: &RequestId,
    ) -> BoundaryOutcome {
        let ids = CallIds::resolve(meta, request.meta.as_ref(), id, &self.run_id);
        tracing::debug!(
            tool_name = %request.name,
            tool_call_id_from = ids.tool_call_id_from,
            run_id_from = ids.run_id_from,
            "tools/call"
        );
        let ctx = self
            .app
            .run_context(ids.run.unwrap_or_else(|| self.run_id.clone()));
        let arguments = request
            .arguments
            .as_ref()
            .and_then(|object| serde_json::to_string(object).ok())
            .unwrap_or_default();
        let envelope = ToolEnvelope::new(
            ids.tool_call_id,
            ids.run_id,
            request.name.as_ref(),
            arguments,
        )
        .authorized(true)
        .read_only(true);
        self.app.boundary.invoke(&ctx, envelope).await
    }
}

impl ServerHandler for AciServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("aci", env!("CARGO_PKG_VERSION")))
            .with_protocol_version(ProtocolVersion::LATEST)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(self.tools.clone()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let outcome = self.call(&request, &context.meta, &context.id).await;
        Ok(CallToolResponse::Complete(call_result(&outcome)))
    }
}

/// The MCP result of a call: the observation as `structuredContent` and as
/// one text block; `isError` when the call is ERROR. Nothing else.
fn call_result(outcome: &BoundaryOutcome) -> CallToolResult {
    let observation = &outcome.observation;
    let text = vec![ContentBlock::text(observation.to_json_string())];
    let mut result = if observation.is_error() {
        CallToolResult::error(text)
    } else {
        CallToolResult::success(text)
    };
    result.structured_content = Some(observation.to_json());
    result
}

/// The three frozen tools as rmcp tools, carrying exactly the JSON of
/// [`ToolDefinition::to_mcp`](aci_contracts::ToolDefinition::to_mcp).
fn mcp_tools() -> Result<Vec<Tool>, serde_json::Error> {
    tool_definitions()
        .iter()
        .map(|definition| serde_json::from_value(definition.to_mcp()))
        .collect()
}

/// The ids of one `tools/call`, as the boundary gets them.
#[derive(Debug, Clone, PartialEq, Eq)]
struct CallIds {
    /// The tool call id text.
    tool_call_id: String,
    /// The run id text of the envelope.
    run_id: String,
    /// The run whose context the call runs in, when it is not the server's.
    run: Option<RunId>,
    /// Where the tool call id came from (for logs).
    tool_call_id_from: &'static str,
    /// Where the run id came from (for logs).
    run_id_from: &'static str,
}

impl CallIds {
    /// Applies the id rules of the module docs. `context_meta` is the request's
    /// `_meta` as rmcp hands it to the handler; `params_meta` is whatever was
    /// left in the params (looked at second).
    fn resolve(
        context_meta: &RequestMetaObject,
        params_meta: Option<&RequestMetaObject>,
        request_id: &RequestId,
        server_run: &RunId,
    ) -> Self {
        let lookup = |key: &str| {
            context_meta
                .get(key)
                .or_else(|| params_meta.and_then(|meta| meta.get(key)))
        };
        let (tool_call_id, tool_call_id_from) = match lookup(META_TOOL_CALL_ID) {
            Some(value) => (meta_text(value), "_meta"),
            None => (request_id.to_string(), "jsonrpc_id"),
        };
        let (run_id, run, run_id_from) = match lookup(META_RUN_ID) {
            Some(value) => {
                let text = meta_text(value);
                // A valid run id gets its own context; an invalid one is checked
                // against the server's run, which it cannot match.
                let run = RunId::new(text.as_str()).ok();
                (text, run, "_meta")
            }
            None => (server_run.as_str().to_owned(), None, "server"),
        };
        Self {
            tool_call_id,
            run_id,
            run,
            tool_call_id_from,
            run_id_from,
        }
    }
}

/// The text of a `_meta` id: a JSON string as given; anything else is not an
/// id, so the boundary gets empty text (which no id rule accepts).
fn meta_text(value: &Value) -> String {
    value.as_str().map(str::to_owned).unwrap_or_default()
}

/// stdin, read on a dedicated thread.
///
/// A read on Tokio's stdin runs on the blocking pool and cannot be cancelled,
/// so a stop request would leave the runtime waiting for the next line from a
/// terminal. A plain thread blocked in `read` does not hold the process.
#[derive(Debug)]
struct ThreadStdin {
    chunks: mpsc::Receiver<std::io::Result<Vec<u8>>>,
    pending: Vec<u8>,
    offset: usize,
}

impl ThreadStdin {
    /// Bytes read ahead, at most (in chunks of up to 64 KiB).
    const CHUNKS: usize = 16;
    const CHUNK_BYTES: usize = 64 * 1024;

    fn spawn() -> Result<Self, CliError> {
        let (sender, chunks) = mpsc::channel(Self::CHUNKS);
        std::thread::Builder::new()
            .name("aci-mcp-stdin".to_owned())
            .spawn(move || read_stdin(&sender))
            .map_err(|e| CliError::config(format!("cannot start reading stdin: {e}")))?;
        Ok(Self {
            chunks,
            pending: Vec::new(),
            offset: 0,
        })
    }
}

/// Forwards stdin to `sender` until end of file, a read error, or the reader
/// goes away.
fn read_stdin(sender: &mpsc::Sender<std::io::Result<Vec<u8>>>) {
    let mut stdin = std::io::stdin().lock();
    let mut buffer = vec![0_u8; ThreadStdin::CHUNK_BYTES];
    loop {
        let chunk = match stdin.read(&mut buffer) {
            Ok(0) => return,
            Ok(n) => Ok(buffer[..n].to_vec()),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => Err(e),
        };
        let failed = chunk.is_err();
        if sender.blocking_send(chunk).is_err() || failed {
            return;
        }
    }
}

impl AsyncRead for ThreadStdin {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        while this.offset >= this.pending.len() {
            match this.chunks.poll_recv(cx) {
                Poll::Ready(Some(Ok(chunk))) => {
                    this.pending = chunk;
                    this.offset = 0;
                }
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Err(e)),
                // End of file: the reading thread is done.
                Poll::Ready(None) => return Poll::Ready(Ok(())),
                Poll::Pending => return Poll::Pending,
            }
        }
        let available = &this.pending[this.offset..];
        let n = available.len().min(buf.remaining());
        buf.put_slice(&available[..n]);
        this.offset += n;
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc as StdArc;

    use serde_json::json;

    use super::*;

    fn meta(value: Value) -> RequestMetaObject {
        match value {
            Value::Object(object) => RequestMetaObject::from(object),
            _ => RequestMetaObject::new(),
        }
    }

    fn server_run() -> RunId {
        RunId::new("run-server").unwrap()
    }

    #[test]
    fn tools_carry_exactly_the_contract_json() {
        let tools = mcp_tools().unwrap();
        let definitions = tool_definitions();
        assert_eq!(tools.len(), 3);
        for (tool, definition) in tools.iter().zip(&definitions) {
            assert_eq!(serde_json::to_value(tool).unwrap(), definition.to_mcp());
            assert_eq!(
                tool.annotations.as_ref().and_then(|a| a.read_only_hint),
                Some(true)
            );
        }
    }

    #[test]
    fn ids_default_to_the_jsonrpc_id_and_the_server_run() {
        let ids = CallIds::resolve(
            &RequestMetaObject::new(),
            None,
            &RequestId::Number(7),
            &server_run(),
        );
        assert_eq!(ids.tool_call_id, "7");
        assert_eq!(ids.run_id, "run-server");
        assert_eq!(ids.run, None);
        let ids = CallIds::resolve(
            &RequestMetaObject::new(),
            None,
            &RequestId::String(StdArc::from("req-1")),
            &server_run(),
        );
        assert_eq!(ids.tool_call_id, "req-1");
    }

    #[test]
    fn meta_ids_are_used_as_given() {
        let m = meta(json!({"aci/tool_call_id": "call_01", "aci/run_id": "run-other"}));
        let ids = CallIds::resolve(&m, None, &RequestId::Number(1), &server_run());
        assert_eq!(ids.tool_call_id, "call_01");
        assert_eq!(ids.run_id, "run-other");
        assert_eq!(ids.run, Some(RunId::new("run-other").unwrap()));

        // Ids left in the params are read too.
        let params = meta(json!({"aci/tool_call_id": "call_02"}));
        let ids = CallIds::resolve(
            &RequestMetaObject::new(),
            Some(&params),
            &RequestId::Number(1),
            &server_run(),
        );
        assert_eq!(ids.tool_call_id, "call_02");
    }

    #[test]
    fn invalid_meta_ids_are_never_replaced() {
        let m = meta(json!({"aci/tool_call_id": "bad id", "aci/run_id": "bad run"}));
        let ids = CallIds::resolve(&m, None, &RequestId::Number(1), &server_run());
        assert_eq!(ids.tool_call_id, "bad id");
        assert_eq!(ids.run_id, "bad run");
        assert_eq!(ids.run, None);

        for value in [json!(42), json!(true), json!(null), json!({"a": 1})] {
            let m = meta(json!({"aci/tool_call_id": value.clone(), "aci/run_id": value}));
            let ids = CallIds::resolve(&m, None, &RequestId::Number(1), &server_run());
            assert_eq!(ids.tool_call_id, "");
            assert_eq!(ids.run_id, "");
            assert_eq!(ids.run, None);
        }
    }
}
