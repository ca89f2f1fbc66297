//! The operations endpoints: `/healthz`, `/readyz`, `/metrics` and the OAuth
//! Protected Resource Metadata document (RFC 9728). None needs a token, and
//! none shows an id, a principal, a URL of the store or a payload.

use std::sync::Arc;
use std::time::Duration;

use aci_contracts::{RunId, ToolCallId};
use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use invocation_core::{InvocationKey, InvocationStore};
use serde_json::json;

use super::auth::{METADATA_PATH, origin};
use super::metrics::Metrics;
use crate::server::CallGate;

/// How long `/readyz` waits for the store.
const READY_TIMEOUT: Duration = Duration::from_secs(2);

/// What the endpoints read.
#[derive(Debug)]
pub(crate) struct OpsState {
    pub(crate) store: Arc<dyn InvocationStore>,
    /// The server's gate: the calls in flight.
    pub(crate) gate: CallGate,
    pub(crate) metrics: Arc<Metrics>,
    /// The configured public URL of the MCP endpoint.
    pub(crate) resource: Option<String>,
    /// The JWT issuer, the authorization server of the metadata.
    pub(crate) issuer: Option<String>,
}

/// The routes.
pub(crate) fn routes(state: Arc<OpsState>) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route(METADATA_PATH, get(resource_metadata))
        .route(&format!("{METADATA_PATH}/mcp"), get(resource_metadata))
        .with_state(state)
}

async fn healthz() -> &'static str {
    "ok\n"
}

/// 200 when the store answers a read (one round trip) in time, else 503.
async fn readyz(State(state): State<Arc<OpsState>>) -> Response {
    if store_answers(state.store.as_ref()).await {
        (StatusCode::OK, "ready\n").into_response()
    } else {
        state.metrics.store_error();
        (StatusCode::SERVICE_UNAVAILABLE, "store unavailable\n").into_response()
    }
}

async fn store_answers(store: &dyn InvocationStore) -> bool {
    let (Ok(run), Ok(call)) = (RunId::new("aci-readyz"), ToolCallId::new("probe")) else {
        return false;
    };
    let key = InvocationKey::new(run, call);
    matches!(
        tokio::time::timeout(READY_TIMEOUT, store.remaining_ttl(&key)).await,
        Ok(Ok(_))
    )
}

async fn metrics(State(state): State<Arc<OpsState>>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        state.metrics.render(state.gate.in_flight()),
    )
        .into_response()
}

async fn resource_metadata(State(state): State<Arc<OpsState>>, headers: HeaderMap) -> Response {
    let resource = state
        .resource
        .clone()
        .unwrap_or_else(|| format!("{}/mcp", origin(None, &headers)));
    let mut document = json!({
        "resource": resource,
        "bearer_methods_supported": ["header"],
        "resource_name": "aci",
    });
    if let Some(issuer) = &state.issuer {
        document["authorization_servers"] = json!([issuer]);
    }
    (
        [(header::CONTENT_TYPE, "application/json")],
        document.to_string(),
    )
        .into_response()
}
