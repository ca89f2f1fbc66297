//! The router of `aci serve --http`: the MCP service behind `/mcp` and
//! `/runs/<run_id>/mcp` inside its tower layers, the operations endpoints
//! beside it, and the facts of a request the service reads ([`HttpFacts`]).
//!
//! The MCP transport is rmcp's Streamable HTTP server in stateless mode (no
//! `Mcp-Session-Id` is issued; every request is served on its own), so any
//! replica answers any request. The layers, outermost first:
//!
//! 1. bearer authentication ([`auth`](super::auth)): 401 before anything
//!    else is read; the principal goes into the request;
//! 2. the request body limit: `max_request_bytes` plus [`ENVELOPE_BYTES`]
//!    for the JSON-RPC envelope, 413 without reading a larger body whole;
//! 3. a body that could not be read is the client's error: 413 over the
//!    limit, 400 when it broke off (rmcp would answer 500);
//! 4. the run of a `/runs/<run_id>/mcp` URL, put in the request.
//!
//! The review routes (`/runs/<run_id>`, its calls and citation check,
//! [`crate::review`]) sit behind the same authentication.

use std::pin::Pin;
use std::sync::{Arc, LazyLock, OnceLock};
use std::task::{Context, Poll};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, Request, State};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse as _, Response};
use http_body::{Frame, SizeHint};
use http_body_util::LengthLimitError;
use rmcp::service::{RequestContext, RoleServer};
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use tower_http::limit::RequestBodyLimitLayer;

use tokio_util::sync::CancellationToken;

use super::auth::{AuthLayerState, Authenticator, require_bearer, require_reviewer};
use super::metrics::Metrics;
use super::ops::{self, OpsState};
use super::workers::Connection;
use crate::archive::ArchiveReader;
use crate::config::Config;
use crate::review::{MAX_ANSWER_BYTES, ReviewState};
use crate::server::{McpSession, Principal, RequestFacts, Server, TransportFacts};
use crate::telemetry::NetworkTransport;

/// Bytes allowed in a request body beyond `max_request_bytes`: the JSON-RPC
/// envelope, the tool name and `_meta`.
pub(crate) const ENVELOPE_BYTES: usize = 64 * 1024;

/// The header that carries the framework's tool call id.
const HEADER_TOOL_CALL_ID: &str = "aci-tool-call-id";
/// The header that carries the run id.
const HEADER_RUN_ID: &str = "aci-run-id";
/// The MCP session header.
const HEADER_SESSION_ID: &str = "mcp-session-id";
/// The MCP protocol version header.
const HEADER_PROTOCOL_VERSION: &str = "mcp-protocol-version";

/// The run of a `/runs/<run_id>/mcp` URL, put in the request by the router.
#[derive(Debug, Clone, PartialEq, Eq)]
struct PathRun(String);

/// The MCP routes of `server`'s service in their layers, the operations
/// endpoints and the review routes (reading expired runs through `archive`)
/// beside them; and the token that cancels rmcp's requests still
/// open once calls were abandoned.
pub(crate) fn routes(
    server: &Server,
    config: &Config,
    authenticator: Option<Authenticator>,
    metrics: Arc<Metrics>,
    archive: Option<Arc<ArchiveReader>>,
) -> (Router, CancellationToken) {
    let boundary = &server.app().boundary;
    let body_limit = boundary
        .limits()
        .max_request_bytes
        .saturating_add(ENVELOPE_BYTES);
    let mut mcp_config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_sse_keep_alive(None)
        .with_max_request_body_bytes(body_limit);
    if let Some(hosts) = &config.serve.allowed_hosts {
        mcp_config = mcp_config.with_allowed_hosts(hosts.clone());
    }
    let cancel = mcp_config.cancellation_token.clone();
    let service = server.service().clone();
    let mcp = StreamableHttpService::new(
        move || Ok(service.clone()),
        Arc::new(NeverSessionManager::default()),
        mcp_config,
    );
    let open = authenticator.is_none();
    let auth = Arc::new(AuthLayerState {
        authenticator,
        resource: config.auth.resource.clone(),
        metrics: Arc::clone(&metrics),
    });
    let ops = ops::routes(Arc::new(OpsState {
        store: Arc::clone(boundary.store()),
        gate: server.gate().clone(),
        metrics: Arc::clone(&metrics),
        resource: config.auth.resource.clone(),
        issuer: config.auth.jwt.as_ref().map(|j| j.issuer.clone()),
    }));
    let mcp_routes = Router::new()
        .route_service("/mcp", mcp.clone())
        .route_service("/runs/{run_id}/mcp", mcp)
        .layer(middleware::from_fn(path_run))
        .layer(middleware::from_fn(body_errors))
        .layer(RequestBodyLimitLayer::new(body_limit))
        .layer(middleware::map_response_with_state(
            metrics,
            count_too_large,
        ))
        .layer(middleware::from_fn_with_state(
            Arc::clone(&auth),
            require_bearer,
        ));
    let review = crate::review::routes(Arc::new(ReviewState::new(
        boundary.clone(),
        config,
        open,
        archive,
    )))
    .layer(RequestBodyLimitLayer::new(MAX_ANSWER_BYTES))
    .layer(middleware::from_fn_with_state(
        Arc::clone(&auth),
        require_reviewer,
    ));
    let login = super::login::routes(auth);
    (mcp_routes.merge(review).merge(login).merge(ops), cancel)
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

/// Why a request body could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BodyFailure {
    /// Over the body limit (a body without a length is cut as it is read).
    TooLarge,
    /// It broke off: the client closed its side, sent a malformed chunk, or
    /// the connection failed.
    Broken,
}

/// A request body that notes why reading it failed.
struct NotedBody {
    inner: Body,
    failure: Arc<OnceLock<BodyFailure>>,
}

impl http_body::Body for NotedBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(Some(Err(error))) = &polled {
            let too_large =
                std::iter::successors(Some(error as &(dyn std::error::Error + 'static)), |e| {
                    e.source()
                })
                .any(<dyn std::error::Error>::is::<LengthLimitError>);
            let _ = self.failure.set(if too_large {
                BodyFailure::TooLarge
            } else {
                BodyFailure::Broken
            });
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A request whose body could not be read is answered as the client's
/// error: rmcp answers 500 to any error reading it.
async fn body_errors(request: Request, next: Next) -> Response {
    let failure = Arc::new(OnceLock::new());
    let request = request.map(|inner| {
        Body::new(NotedBody {
            inner,
            failure: Arc::clone(&failure),
        })
    });
    let response = next.run(request).await;
    if response.status() != StatusCode::INTERNAL_SERVER_ERROR {
        return response;
    }
    match failure.get() {
        Some(BodyFailure::TooLarge) => {
            (StatusCode::PAYLOAD_TOO_LARGE, "request body too large\n").into_response()
        }
        Some(BodyFailure::Broken) => {
            (StatusCode::BAD_REQUEST, "malformed request body\n").into_response()
        }
        None => response,
    }
}

async fn count_too_large(State(metrics): State<Arc<Metrics>>, response: Response) -> Response {
    if response.status() == StatusCode::PAYLOAD_TOO_LARGE {
        metrics.body_too_large();
    }
    response
}

/// The facts of an HTTP request, from the request parts rmcp puts in the
/// context: the id headers, the declared session, the URL's run, the TCP
/// connection and the authenticated principal.
#[derive(Debug)]
pub(crate) struct HttpFacts;

impl RequestFacts for HttpFacts {
    fn read<'a>(&'a self, context: &'a RequestContext<RoleServer>) -> TransportFacts<'a> {
        /// The session of a request whose connection is not known (every
        /// served connection is).
        static UNKNOWN_CONNECTION: LazyLock<McpSession> =
            LazyLock::new(|| McpSession::new("http").unwrap_or_else(McpSession::connection));
        let Some(parts) = context.extensions.get::<Parts>() else {
            return TransportFacts::in_session(&UNKNOWN_CONNECTION);
        };
        let headers = &parts.headers;
        // A header that is not visible ASCII is no id at all (empty text).
        let id_header = |name| headers.get(name).map(|v| v.to_str().unwrap_or_default());
        let connection = parts.extensions.get::<ConnectInfo<Connection>>();
        TransportFacts {
            session: connection.map_or(&*UNKNOWN_CONNECTION, |c| &c.0.session),
            transport: NetworkTransport::Tcp,
            client_address: connection.map(|c| c.0.peer.ip()),
            protocol_version: headers
                .get(HEADER_PROTOCOL_VERSION)
                .and_then(|v| v.to_str().ok()),
            declared_session: headers.get(HEADER_SESSION_ID).and_then(|v| v.to_str().ok()),
            tool_call_id_header: id_header(HEADER_TOOL_CALL_ID),
            run_id_header: id_header(HEADER_RUN_ID),
            path_run: parts.extensions.get::<PathRun>().map(|run| run.0.as_str()),
            principal: parts.extensions.get::<Principal>(),
            ..TransportFacts::in_session(&UNKNOWN_CONNECTION)
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::io;

    use tower::ServiceExt as _;

    use super::super::{HttpOptions, Replica};
    use super::*;
    use crate::app::App;

    /// The router of an open replica on the default configuration.
    async fn open_router() -> Router {
        let config = Config::default();
        let app = App::build(&config, Some("memory")).await.unwrap();
        let options = HttpOptions {
            addr: String::new(),
            insecure_no_auth: true,
            shared_store: false,
        };
        Replica::start(app, &config, &options, || None)
            .await
            .unwrap()
            .router
    }

    /// A `POST /mcp` of `body`, without a length (as a chunked body).
    fn post(body: Body) -> Request {
        Request::post("/mcp")
            .header("host", "localhost")
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(body)
            .unwrap()
    }

    #[tokio::test]
    async fn a_request_body_that_breaks_off_is_the_clients_error() {
        let router = open_router().await;
        // As hyper's body of a client that closed its side, or sent a
        // malformed chunk, half way.
        let chunks = [
            Ok(Bytes::from_static(b"{\"jsonrpc\":\"2.0\",")),
            Err(io::Error::new(io::ErrorKind::UnexpectedEof, "cut")),
        ];
        let response = router
            .oneshot(post(Body::from_stream(futures::stream::iter(chunks))))
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    }

    #[tokio::test]
    async fn a_request_body_over_the_limit_without_a_length_is_413() {
        let router = open_router().await;
        let chunk = Bytes::from(vec![b' '; 16 * 1024]);
        let chunks = (0..64).map(move |_| Ok::<_, io::Error>(chunk.clone()));
        let response = router
            .oneshot(post(Body::from_stream(futures::stream::iter(chunks))))
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
    }
}
