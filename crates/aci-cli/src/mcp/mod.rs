//! `aci serve`: the MCP server on stdio.
//!
//! The server speaks the newest MCP revision rmcp knows
//! ([`ProtocolVersion::LATEST`](rmcp::model::ProtocolVersion::LATEST),
//! 2026-07-28, with its per-request `_meta` lifecycle) and every older one
//! rmcp supports; over the `initialize` handshake it agrees to the client's
//! version, or to the newest revision that still has a handshake. It names
//! itself `aci` with this crate's version and offers tools only.
//!
//! - [`server`]: the handler ([`server::AciServer`]), shared with
//!   the HTTP transport;
//! - [`framing`]: the stdio line transport, which answers every request;
//! - [`shutdown`]: stop requests and the gate calls pass;
//! - [`stdin`]: stdin on its own thread.
//!
//! # Tools
//!
//! `tools/list` gives the three frozen tools exactly as
//! [`ToolDefinition::to_mcp`](aci_contracts::ToolDefinition::to_mcp) writes
//! them: `name`, `title`, `description`, `inputSchema` and `outputSchema` from
//! the frozen schemas, and `annotations` with `readOnlyHint: true`.
//!
//! `tools/call` runs through the [`ToolBoundary`](invocation_core::ToolBoundary)
//! and nothing else: every name, known or not, and every argument value goes
//! to the boundary, whose preflight answers unknown tools (`UNKNOWN_TOOL`) and
//! bad arguments (`INVALID_INPUT`) with an error result rather than a protocol
//! error. The arguments are the request's `arguments` as compact JSON text
//! (an object, or, for arguments that are not an object, that value's text,
//! which the boundary refuses); a request without `arguments` passes empty
//! text (the boundary answers `INVALID_INPUT`), never an invented `{}`. Every
//! call is `authorized` and `read_only`: the server exposes only the three
//! read-only tools, and the boundary still refuses any tool that is not
//! read-only.
//!
//! # Ids
//!
//! The boundary never invents an id, and neither does this server:
//!
//! - **Tool call id**: the request's `_meta["aci/tool_call_id"]` when present,
//!   used exactly. Otherwise the server composes one from transport facts
//!   only: **`mcp:<session>:<JSON-RPC id>`**, where `<session>` names the MCP
//!   session the request came in (on stdio the server process: `stdio-` and
//!   16 random hex digits made at start, logged at `info`; over HTTP the
//!   transport's session) and the JSON-RPC id is the request's id as text (a
//!   numeric id as its decimal text: id `4` of session `stdio-0123456789abcdef`
//!   is `mcp:stdio-0123456789abcdef:4`). A JSON-RPC id is unique only within
//!   its session, so two sessions of one run (two `aci serve` processes, or a
//!   client that opens a session per call) sending id `1` make two calls, not
//!   a duplicate. The composed id is what the record and the observation
//!   carry, and what the model cites. A JSON-RPC id with characters no tool
//!   call id allows (or too long a one) gives `INVALID_TOOL_CALL_ID`.
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
//! # Every request gets a reply
//!
//! The stdio transport reads lines itself (see [`framing`]): a line that is
//! not JSON gets `-32700`, one over 16 MiB or one that is not a JSON-RPC
//! message gets `-32600`, a request whose params do not fit its method gets
//! `-32602`, a request reusing the id of a request still in flight gets
//! `-32600`, each with the request's id when it can be read.
//!
//! # Process
//!
//! stdout carries only the protocol; logs go to stderr through `tracing`
//! (`RUST_LOG`; rmcp's and the drivers' events never below `warn`, since they
//! would carry payloads). At start, with a shared store, the server recovers
//! its own run: records of it left `PROJECTING` by a killed process, older
//! than the longest tool timeout plus a margin, are finalized
//! `ERROR / EXECUTION_ABANDONED`.
//!
//! The server stops when the client closes stdin, or on Ctrl-C (SIGINT) or
//! SIGTERM, in three steps (see [`shutdown`]): it stops taking calls (new
//! requests get `-32000`), lets running calls finish for up to
//! `[serve] drain_secs` (default: the longest tool timeout), then abandons
//! what still runs (each record becomes `ERROR / EXECUTION_ABANDONED`, a
//! running MySQL statement is killed, and the client gets that error result),
//! and exits (status 0) only after those finalizations and kills were sent. A second signal abandons at once. stdin is read
//! on a dedicated thread so that stopping never waits for a pending terminal
//! read.

pub(crate) mod framing;
pub(crate) mod server;
pub(crate) mod shutdown;
pub(crate) mod stdin;

#[allow(
    unused_imports,
    reason = "the paths the HTTP transport (src/http/) imports from"
)]
pub(crate) use self::server::{
    META_RUN_ID, META_TOOL_CALL_ID, mcp_tools, meta_text, observation_result, server_config,
};

use std::sync::Arc;
use std::time::Duration;

use aci_contracts::RunId;
use rmcp::ServiceExt as _;
use rmcp::service::{QuitReason, ServerInitializeError};

use self::framing::{LineTransport, LineWriter};
use self::server::{AciServer, McpSession};
use self::shutdown::{CallGate, Phase, Signals};
use self::stdin::ThreadStdin;
use crate::app::App;
use crate::error::CliError;

/// How long the store may take to accept the finalizations of abandoned
/// calls at a stop (they keep retrying while it is unreachable).
const FINALIZE_GRACE: Duration = Duration::from_secs(30);

/// How long the last responses may take to reach stdout after the session
/// ended (a client that stopped reading must not hold the process).
const FLUSH_GRACE: Duration = Duration::from_secs(5);

/// How `aci serve` stops and starts (from `[serve]`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ServeOptions {
    /// At a stop, how long running calls may still finish.
    pub(crate) drain: Duration,
    /// At start, the age past which this run's PROJECTING records are
    /// recovered.
    pub(crate) recovery_age: Duration,
}

/// Serves the boundary's tools over MCP on stdin/stdout until the client
/// disconnects or the process is asked to stop, then drains (see the module
/// docs).
pub(crate) async fn serve(app: App, run_id: RunId, options: ServeOptions) -> Result<(), CliError> {
    let _knowledge_watch = crate::knowledge_watch::watch(&app);
    let app = Arc::new(app);
    recover_own_run(&app, &run_id, options.recovery_age).await;
    let drain = options.drain;
    let gate = CallGate::new();
    let session = McpSession::stdio();
    tracing::info!(session = session.as_str(), "MCP session");
    let server = AciServer::new(Arc::clone(&app), run_id, session, gate.clone())?;
    let mut signals = Signals::listen();
    let (writer, written) = LineWriter::spawn(tokio::io::stdout());
    let transport = LineTransport::new(ThreadStdin::spawn()?, writer, gate.clone());
    let running = tokio::select! {
        started = server.serve(transport) => match started {
            Ok(running) => running,
            Err(error) => return handshake_end(error),
        },
        () = signals.requested() => {
            tracing::info!("stopped before the MCP handshake");
            return Ok(());
        }
        () = gate.input_closed() => {
            tracing::info!("the session ended before the MCP handshake");
            return Ok(());
        }
    };
    tracing::info!("MCP session started");
    let waiting = running.waiting();
    tokio::pin!(waiting);
    let ended = tokio::select! {
        quit = &mut waiting => Some(quit),
        () = signals.requested() => {
            tracing::info!("stop requested");
            None
        }
        () = gate.input_closed() => None,
    };
    stop(&app, &gate, &mut signals, drain).await;
    let quit = match ended {
        Some(quit) => quit,
        None => waiting.await,
    };
    // Every sender is gone with the session: the writer ends after the last
    // queued line.
    if tokio::time::timeout(FLUSH_GRACE, written).await.is_err() {
        tracing::warn!("stdout did not take the last responses in time");
    }
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

/// Finalizes the records of `run_id` that a killed process left PROJECTING
/// (older than the recovery age, so no live process still runs them).
/// A failure is logged, never fatal: the server still serves.
async fn recover_own_run(app: &App, run_id: &RunId, age: Duration) {
    match app.boundary.journal().recover_run(run_id, age).await {
        Ok(recovered) if recovered.is_empty() => {}
        Ok(recovered) => tracing::warn!(
            records = recovered.len(),
            older_than_secs = age.as_secs(),
            "recovered records of this run left PROJECTING: now ERROR / EXECUTION_ABANDONED"
        ),
        Err(error) => tracing::warn!(code = error.code(), "recovering this run failed"),
    }
}

/// The stop sequence: no new calls; running calls get up to `drain` (a stop
/// request cuts it short); then what still runs is abandoned and its
/// finalizations are awaited; then the transport ends the session.
async fn stop(app: &App, gate: &CallGate, signals: &mut Signals, drain: Duration) {
    gate.advance(Phase::Draining);
    let running = gate.in_flight();
    if running > 0 {
        tracing::info!(
            running,
            drain_secs = drain.as_secs(),
            "draining running calls"
        );
        tokio::select! {
            () = gate.idle() => {}
            () = tokio::time::sleep(drain) => {
                tracing::warn!(running = gate.in_flight(), "drain time over; abandoning running calls");
            }
            () = signals.requested() => {
                tracing::warn!(running = gate.in_flight(), "second stop request; abandoning running calls");
            }
        }
    }
    gate.advance(Phase::Abandoning);
    // Handlers give up at once; each dropped call hands its finalization to
    // the boundary, which `drain_abandoned` waits for.
    gate.idle().await;
    // The records and the statements of abandoned calls: both are settled
    // on tasks of their own, which a process exit would cancel.
    let settle = async {
        let (settled, _) = tokio::join!(
            tokio::time::timeout(FINALIZE_GRACE, app.boundary.drain_abandoned()),
            tokio::time::timeout(FINALIZE_GRACE, projectors_mysql::drain_kills()),
        );
        settled
    };
    tokio::select! {
        settled = settle => {
            if settled.is_err() {
                tracing::warn!(
                    pending = app.boundary.pending_settlements(),
                    "the store did not take every finalization in time; `aci recover` finishes them"
                );
            }
        }
        () = signals.requested() => {
            tracing::warn!("stop requested again; not waiting for finalizations");
        }
    }
    gate.advance(Phase::Finished);
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
