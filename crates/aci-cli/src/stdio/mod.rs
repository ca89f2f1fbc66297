//! `aci serve`: the MCP service ([`crate::server`]) over stdio.
//!
//! - [`framing`]: the line transport, which answers every request;
//! - [`scan`]: the id of a line that cannot be read whole;
//! - [`stdin`]: stdin on its own thread.
//!
//! # Session and run
//!
//! The server process is one MCP session, named at start (`stdio-` and 16
//! random hex digits, logged at `info`): a call without a `_meta` tool call
//! id gets `mcp:<session>:<JSON-RPC id>`. A call without a `_meta` run id
//! runs in the server's run (`--run-id`, or one made at start and written to
//! stderr). At start, with a shared store, the server recovers its run (see
//! [`crate::server::lifecycle`]).
//!
//! # Every request gets a reply
//!
//! The transport reads lines itself (see [`framing`]): a line that is not
//! JSON gets `-32700`, one over 16 MiB or one that is not a JSON-RPC message
//! gets `-32600`, a request whose params do not fit its method gets
//! `-32602`, a request reusing the id of a request still in flight gets
//! `-32600`, a request read once the server stops gets `-32000`, each with
//! the request's id when it can be read. A call is admitted when its line is
//! read, so a call the client sent before it closed stdin still runs.
//!
//! # Stopping
//!
//! The server stops when the client closes stdin, or on Ctrl-C (SIGINT) or
//! SIGTERM, through the lifecycle's drain, abandon and settle steps, and
//! exits (status 0) once the last responses reached stdout (or a client that
//! stopped reading held them for [`FLUSH_GRACE`]). stdio takes no new
//! requests from the drain on. stdin is read on a dedicated thread so that
//! stopping never waits for a pending terminal read.

pub(crate) mod framing;
pub(crate) mod scan;
pub(crate) mod stdin;

use std::sync::Arc;
use std::time::Duration;

use aci_contracts::RunId;
use rmcp::ServiceExt as _;
use rmcp::service::{QuitReason, RequestContext, RoleServer, ServerInitializeError};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;
use tokio::task::{JoinError, JoinHandle};

use self::framing::{AdmittedCall, LineTransport, LineWriter, NonObjectArguments};
use self::stdin::ThreadStdin;
use crate::app::App;
use crate::error::CliError;
use crate::server::{
    GateLimits, McpSession, RequestFacts, ServeOptions, Server, ServiceSetup, Transport,
    TransportFacts,
};

/// How long the last responses may take to reach stdout after the session
/// ended (a client that stopped reading must not hold the process).
const FLUSH_GRACE: Duration = Duration::from_secs(5);

/// Serves the boundary's tools over MCP on stdin/stdout until the client
/// disconnects or the process is asked to stop, then drains (see the module
/// docs).
pub(crate) async fn serve(app: App, run_id: RunId, options: ServeOptions) -> Result<(), CliError> {
    serve_on(
        app,
        run_id,
        options,
        ThreadStdin::spawn()?,
        tokio::io::stdout(),
    )
    .await
}

/// [`serve`] reading `input` and writing `output` instead of stdin and
/// stdout.
pub(crate) async fn serve_on<R, W>(
    app: App,
    run_id: RunId,
    options: ServeOptions,
    input: R,
    output: W,
) -> Result<(), CliError>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let session = McpSession::stdio();
    let setup = ServiceSetup {
        server_run: Some(run_id),
        facts: Arc::new(StdioFacts {
            session: session.clone(),
        }),
        observer: None,
    };
    let server = Server::start(app, options, GateLimits::UNBOUNDED, setup).await?;
    tracing::info!(session = session.as_str(), "MCP session");
    let transport = StdioTransport::start(&server, input, output);
    server.run(transport).await
}

/// The facts of a stdio request: the process's session, and what the line
/// transport put in the request's extensions.
#[derive(Debug)]
struct StdioFacts {
    session: McpSession,
}

impl RequestFacts for StdioFacts {
    fn read<'a>(&'a self, context: &'a RequestContext<RoleServer>) -> TransportFacts<'a> {
        TransportFacts {
            admitted: context
                .extensions
                .get::<AdmittedCall>()
                .and_then(AdmittedCall::take),
            non_object_arguments: context
                .extensions
                .get::<NonObjectArguments>()
                .map(|arguments| arguments.0.as_str()),
            ..TransportFacts::in_session(&self.session)
        }
    }
}

/// The stdio transport as the lifecycle sees it: the rmcp session over the
/// line transport, on a task of its own.
struct StdioTransport {
    /// The rmcp session, to its end: how the command ends.
    session: JoinHandle<Result<(), CliError>>,
    ended: Option<Result<Result<(), CliError>, JoinError>>,
    input_closed: watch::Receiver<bool>,
    written: JoinHandle<()>,
}

impl StdioTransport {
    /// Starts reading `input` and writing `output`, and the rmcp session
    /// (its handshake included) on a task.
    fn start<R, W>(server: &Server, input: R, output: W) -> Self
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let (writer, written) = LineWriter::spawn(output);
        let transport = LineTransport::new(input, writer, server.gate().clone());
        let input_closed = transport.input_closed();
        let service = server.service().clone();
        let session = tokio::spawn(async move {
            let running = match service.serve(transport).await {
                Ok(running) => running,
                Err(error) => return handshake_end(error),
            };
            tracing::info!("MCP session started");
            match running.waiting().await {
                Ok(QuitReason::JoinError(_)) | Err(_) => {
                    Err(CliError::config("the MCP session stopped unexpectedly"))
                }
                Ok(reason) => {
                    tracing::info!(?reason, "MCP session ended");
                    Ok(())
                }
            }
        });
        Self {
            session,
            ended: None,
            input_closed,
            written,
        }
    }
}

impl Transport for StdioTransport {
    async fn ended(&mut self) {
        if self.ended.is_some() {
            return;
        }
        tokio::select! {
            end = &mut self.session => self.ended = Some(end),
            _ = self.input_closed.wait_for(|closed| *closed) => {}
        }
    }

    /// Nothing to do: the line transport refuses requests once the gate
    /// drains.
    fn stop_taking(&mut self, _drain: Duration) {}

    /// The session's other requests need no wait: only calls are drained.
    async fn settled(&mut self) {}

    async fn abandon(&mut self) {}

    async fn close(self) -> Result<(), CliError> {
        // The gate is finished: the line transport ends the session.
        let end = match self.ended {
            Some(end) => end,
            None => self.session.await,
        };
        // Every sender is gone with the session: the writer ends after the
        // last queued line.
        if tokio::time::timeout(FLUSH_GRACE, self.written)
            .await
            .is_err()
        {
            tracing::warn!("stdout did not take the last responses in time");
        }
        end.unwrap_or_else(|_| Err(CliError::config("the MCP session stopped unexpectedly")))
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
