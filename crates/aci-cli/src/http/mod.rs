//! `aci serve --http ADDR`: the boundary's tools over MCP Streamable HTTP,
//! for many agents and many replicas.
//!
//! The MCP transport is rmcp's Streamable HTTP server in stateless mode (no
//! `Mcp-Session-Id` is issued; every request is served on its own), on axum:
//! any replica answers any request, and nothing a later request needs lives
//! in a replica's memory. Cross-cutting concerns are tower layers around it,
//! outermost first:
//!
//! 1. bearer authentication ([`auth`]): 401 before anything else is read;
//! 2. the request body limit: `max_request_bytes` plus
//!    [`ENVELOPE_BYTES`] for the JSON-RPC envelope, 413 without reading a
//!    larger body whole;
//! 3. the run of a `/runs/<run_id>/mcp` URL, put in the request.
//!
//! Calls in flight are bounded per replica and per principal
//! ([`admission`]); a call over a limit gets an `OVERLOADED` error result at
//! once. `/healthz`, `/readyz`, `/metrics` and the protected resource
//! metadata need no token ([`ops`]).
//!
//! SIGTERM or SIGINT stops taking connections and lets calls in flight finish
//! for up to the drain time (`[serve] drain_secs`, default the longest tool
//! timeout); then, or on a second
//! signal, the rest are abandoned (the boundary finalizes them) and the
//! process exits once those finalizations were sent.

mod admission;
mod auth;
pub(crate) mod config;
mod handler;
mod metrics;
mod ops;
mod ownership;
mod workers;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::Request;
use axum::middleware::{self, Next};
use axum::response::Response;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use tower_http::limit::RequestBodyLimitLayer;

use self::admission::Admission;
use self::auth::{AuthLayerState, Authenticator, require_bearer};
use self::handler::{HttpHandler, PathRun, Shared};
use self::metrics::Metrics;
pub(crate) use self::metrics::execution_metrics_layer;
use self::ops::OpsState;
use self::workers::Workers;
use crate::app::App;
use crate::config::Config;
use crate::error::CliError;
use crate::mcp::mcp_tools;
use crate::mcp::shutdown::Signals;

/// Bytes allowed in a request body beyond `max_request_bytes`: the JSON-RPC
/// envelope, the tool name and `_meta`.
pub(crate) const ENVELOPE_BYTES: usize = 64 * 1024;

/// The default limit of calls in flight per replica.
pub(crate) const DEFAULT_MAX_IN_FLIGHT: usize = 64;

/// How the command was asked to serve.
#[derive(Debug, Clone)]
pub(crate) struct HttpOptions {
    /// The address to listen on, e.g. `127.0.0.1:8080`.
    pub(crate) addr: String,
    /// Serve without authentication (local development only).
    pub(crate) insecure_no_auth: bool,
    /// Whether the store is shared by replicas (not `memory`).
    pub(crate) shared_store: bool,
}

/// Serves until SIGTERM/SIGINT, then drains.
pub(crate) async fn serve(app: App, config: &Config, options: HttpOptions) -> Result<(), CliError> {
    // Settings are checked before anything is said at start: an error is
    // the one line on stderr.
    let max_in_flight = config.serve.max_in_flight.unwrap_or(DEFAULT_MAX_IN_FLIGHT);
    let worker_count = match config.serve.workers {
        Some(0) => return Err(CliError::config("serve: workers must be at least 1")),
        Some(n) => n,
        None => std::thread::available_parallelism().map_or(1, usize::from),
    };
    if max_in_flight == 0 || config.serve.max_in_flight_per_principal == Some(0) {
        return Err(CliError::config(
            "serve: max_in_flight limits must be at least 1",
        ));
    }
    let authenticator = Authenticator::from_config(&config.auth)?;
    match (&authenticator, options.insecure_no_auth) {
        (None, false) => {
            return Err(CliError::config(
                "--http needs [auth.tokens.NAME] or [auth.jwt] in the config file (or --insecure-no-auth for local development)",
            ));
        }
        (None, true) => eprintln!(
            "aci: WARNING: serving without authentication (--insecure-no-auth): anyone who reaches the port may call the tools"
        ),
        (Some(_), true) => {
            return Err(CliError::config(
                "--insecure-no-auth with [auth] configured: drop one of them",
            ));
        }
        (Some(_), false) => {}
    }
    if !options.shared_store {
        eprintln!(
            "aci: the memory store keeps records in this process only: run one replica (use a Redis store for several)"
        );
    }
    let metrics = Arc::new(Metrics::new().map_err(|e| CliError::config(format!("metrics: {e}")))?);
    let body_limit = app
        .boundary
        .limits()
        .max_request_bytes
        .saturating_add(ENVELOPE_BYTES);
    let drain = config
        .serve
        .drain_secs
        .map_or_else(|| app.boundary.longest_timeout(), Duration::from_secs);
    let store = Arc::clone(app.boundary.store());
    let (abandon, _) = tokio::sync::watch::channel(false);
    let shared = Arc::new(Shared {
        abandon,
        tools: mcp_tools()
            .map_err(|e| CliError::config(format!("cannot build the MCP tool list: {e}")))?,
        admission: Admission::new(max_in_flight, config.serve.max_in_flight_per_principal),
        metrics: Arc::clone(&metrics),
        app,
    });

    let mut mcp_config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_sse_keep_alive(None)
        .with_max_request_body_bytes(body_limit);
    if let Some(hosts) = &config.serve.allowed_hosts {
        mcp_config = mcp_config.with_allowed_hosts(hosts.clone());
    }
    let cancel = mcp_config.cancellation_token.clone();
    let handler = HttpHandler {
        shared: Arc::clone(&shared),
    };
    let mcp = StreamableHttpService::new(
        move || Ok(handler.clone()),
        Arc::new(NeverSessionManager::default()),
        mcp_config,
    );
    let auth_state = Arc::new(AuthLayerState {
        authenticator,
        resource: config.auth.resource.clone(),
        metrics: Arc::clone(&metrics),
    });
    let mcp_routes = Router::new()
        .route_service("/mcp", mcp.clone())
        .route_service("/runs/{run_id}/mcp", mcp)
        .layer(middleware::from_fn(path_run))
        .layer(RequestBodyLimitLayer::new(body_limit))
        .layer(middleware::map_response_with_state(
            Arc::clone(&metrics),
            count_too_large,
        ))
        .layer(middleware::from_fn_with_state(auth_state, require_bearer));
    let ops = ops::routes(Arc::new(OpsState {
        store,
        metrics,
        resource: config.auth.resource.clone(),
        issuer: config.auth.jwt.as_ref().map(|j| j.issuer.clone()),
    }));
    let router = mcp_routes.merge(ops);

    let mut signals = Signals::listen();
    let listener = tokio::net::TcpListener::bind(&options.addr)
        .await
        .map_err(|e| CliError::config(format!("cannot listen on {}: {e}", options.addr)))?;
    let local = listener
        .local_addr()
        .map_err(|e| CliError::config(format!("cannot listen on {}: {e}", options.addr)))?;
    eprintln!("aci: serving MCP over HTTP at http://{local}/mcp");

    let mut workers = Workers::start(worker_count, &router, local)
        .map_err(|e| CliError::config(format!("cannot start the HTTP workers: {e}")))?;
    tokio::select! {
        () = accept(&listener, &mut workers) => {}
        () = signals.requested() => {}
    }
    drop(listener);
    eprintln!(
        "aci: stopping: no new connections; calls in flight may finish for up to {}s",
        drain.as_secs()
    );
    workers.stop();
    let abandoned = tokio::select! {
        result = workers.finished() => {
            if let Err(e) = result {
                eprintln!("aci: the HTTP server failed: {e}");
            }
            false
        }
        () = tokio::time::sleep(drain) => true,
        () = signals.requested() => true,
    };
    if abandoned {
        eprintln!("aci: abandoning the calls still in flight");
        shared.abandon.send_replace(true);
        // Each abandoned call drops its boundary future and answers at once.
        let _ = tokio::time::timeout(Duration::from_secs(5), async {
            while shared.admission.total() > 0 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
        cancel.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(5), workers.finished()).await;
    }
    drain_abandoned(&shared.app).await;
    workers.exit(Duration::from_secs(5)).await;
    Ok(())
}

/// Accepts connections for ever, handing each to a worker.
async fn accept(listener: &tokio::net::TcpListener, workers: &mut Workers) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => workers.dispatch(stream),
            // A connection that failed before it was accepted: the next one.
            Err(e) if is_connection_error(&e) => {}
            // Out of file descriptors and the like: retry after a pause
            // rather than spin.
            Err(e) => {
                tracing::error!(error = %e, "accepting a connection failed");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

fn is_connection_error(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::ConnectionRefused
            | std::io::ErrorKind::ConnectionAborted
            | std::io::ErrorKind::ConnectionReset
    )
}

/// Waits until the boundary has sent the finalizations of abandoned calls
/// (bounded: while the store is unreachable they would retry for the TTL).
async fn drain_abandoned(app: &App) {
    let bound = app.boundary.longest_timeout().max(Duration::from_secs(10));
    if tokio::time::timeout(bound, app.boundary.drain_abandoned())
        .await
        .is_err()
    {
        eprintln!(
            "aci: some abandoned calls could not be finalized in time; `aci recover` finalizes them"
        );
    }
    // Abandoned MySQL statements are killed on the server, not left running.
    let _ = tokio::time::timeout(Duration::from_secs(5), projectors_mysql::drain_kills()).await;
}

/// Puts the run of a `/runs/<run_id>/mcp` URL into the request.
async fn path_run(mut request: Request, next: Next) -> Response {
    if let Some(run) = request
        .uri()
        .path()
        .strip_prefix("/runs/")
        .and_then(|rest| rest.strip_suffix("/mcp"))
    {
        let run = PathRun(run.to_owned());
        request.extensions_mut().insert(run);
    }
    next.run(request).await
}

async fn count_too_large(
    axum::extract::State(metrics): axum::extract::State<Arc<Metrics>>,
    response: Response,
) -> Response {
    if response.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
        metrics.body_too_large();
    }
    response
}
