//! The MCP handler behind `/mcp` and `/runs/<run_id>/mcp`.
//!
//! One handler value serves every request of the replica (rmcp's stateless
//! mode makes one per request from a clone); it holds nothing a later
//! request needs: runs, budgets, deadlines, owners and records are in the
//! store.
//!
//! # Ids over HTTP
//!
//! - **Run id**: `_meta["aci/run_id"]`, else the `Aci-Run-Id` header, else the
//!   `<run_id>` of a `/runs/<run_id>/mcp` URL. A call with none of them is
//!   refused with a `RUN_MISMATCH` error result (nothing run or recorded):
//!   the server never invents a run, and has no run of its own.
//! - **Tool call id**: `_meta["aci/tool_call_id"]`, else the
//!   `Aci-Tool-Call-Id` header, else the id the server composes from
//!   transport facts: `mcp:<session>:<JSON-RPC id>`, the session being the
//!   client's `Mcp-Session-Id` when it declares one, else the TCP connection
//!   (see [`fallback_tool_call_id`]).
//! - Ids are used exactly as given; invalid ones get the boundary's codes
//!   (`INVALID_TOOL_CALL_ID`; `RUN_MISMATCH` for a run id that is not one).
//!
//! # Order of a call
//!
//! ids -> `RUN_MISMATCH` when there is no run -> admission (`OVERLOADED` over
//! the replica's or the principal's limit) -> the boundary, with the run
//! context carrying the principal (the store refuses a run owned by another
//! principal with `UNAUTHORIZED`, atomically with the create).

use std::sync::Arc;
use std::time::Instant;

use aci_contracts::{ErrorCode, ErrorResult, EvidenceStatus, InvocationStatus, RunId, ToolCallId};
use axum::http::HeaderMap;
use axum::http::request::Parts;
use invocation_core::{ModelObservation, ToolEnvelope};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ListToolsResult, PaginatedRequestParams, RequestId,
    RequestMetaObject, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData as McpError, ServerHandler};

use super::admission::Admission;
use super::auth::Principal;
use super::metrics::Metrics;
use super::ownership;
use crate::app::App;
use crate::mcp::server::McpSession;
use crate::mcp::{META_RUN_ID, META_TOOL_CALL_ID, meta_text, observation_result, server_config};

/// The header that carries the framework's tool call id.
pub(crate) const HEADER_TOOL_CALL_ID: &str = "aci-tool-call-id";
/// The header that carries the run id.
pub(crate) const HEADER_RUN_ID: &str = "aci-run-id";
/// The MCP session header.
const HEADER_SESSION_ID: &str = "mcp-session-id";

/// The TCP connection a request came on, named once per connection: the MCP
/// session of a stateless client that declares none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Connection(pub(crate) Arc<str>);

impl Connection {
    /// A connection's fresh name: `http-` and 16 random hex digits.
    pub(crate) fn fresh() -> Self {
        let random = uuid::Uuid::new_v4().simple().to_string();
        Self(Arc::from(format!("http-{}", &random[..16])))
    }
}

/// The run of a `/runs/<run_id>/mcp` URL, put in the request by the router.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PathRun(pub(crate) String);

/// What every request of the replica shares.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) app: App,
    pub(crate) tools: Vec<Tool>,
    pub(crate) admission: Arc<Admission>,
    pub(crate) metrics: Arc<Metrics>,
    /// Set once when the server abandons the calls still in flight.
    pub(crate) abandon: tokio::sync::watch::Sender<bool>,
}

/// The rmcp handler: a handle on [`Shared`].
#[derive(Debug, Clone)]
pub(crate) struct HttpHandler {
    pub(crate) shared: Arc<Shared>,
}

/// The ids of one call over HTTP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HttpCallIds {
    /// The tool call id text, as the boundary gets it.
    pub(crate) tool_call_id: String,
    /// The run id text, when the call names a run at all.
    pub(crate) run_id: Option<String>,
}

impl HttpCallIds {
    /// Applies the id rules of the module docs.
    pub(crate) fn resolve(
        context_meta: &RequestMetaObject,
        params_meta: Option<&RequestMetaObject>,
        request_id: &RequestId,
        headers: Option<&HeaderMap>,
        path_run: Option<&PathRun>,
        connection: Option<&Connection>,
    ) -> Self {
        let meta = |key: &str| {
            context_meta
                .get(key)
                .or_else(|| params_meta.and_then(|m| m.get(key)))
                .map(meta_text)
        };
        // A header that is not visible ASCII is no id at all (empty text).
        let header = |name: &str| {
            headers
                .and_then(|h| h.get(name))
                .map(|v| v.to_str().map(str::to_owned).unwrap_or_default())
        };
        let tool_call_id = meta(META_TOOL_CALL_ID)
            .or_else(|| header(HEADER_TOOL_CALL_ID))
            .unwrap_or_else(|| {
                let declared = headers
                    .and_then(|h| h.get(HEADER_SESSION_ID))
                    .and_then(|v| v.to_str().ok())
                    .filter(|name| is_session_name(name));
                let session = declared.or(connection.map(|c| &*c.0)).unwrap_or("http");
                fallback_tool_call_id(session, request_id)
            });
        let run_id = meta(META_RUN_ID)
            .or_else(|| header(HEADER_RUN_ID))
            .or_else(|| path_run.map(|p| p.0.clone()));
        Self {
            tool_call_id,
            run_id,
        }
    }
}

/// The tool call id the server composes when the client sent none:
/// `mcp:<session>:<JSON-RPC id>`, so that two sessions' id `1` are two calls.
/// The session is the client's `Mcp-Session-Id` when it declares a usable
/// one, else the TCP connection the request came on.
pub(crate) fn fallback_tool_call_id(session: &str, request_id: &RequestId) -> String {
    match McpSession::new(session) {
        Ok(session) => session.compose(request_id),
        // Connection names and accepted declared sessions are always valid.
        Err(_) => format!("mcp:http:{request_id}"),
    }
}

/// Whether a declared session can be part of a composed id: 1 to 64 bytes
/// of ASCII letters, digits and `_ - .`.
fn is_session_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

/// How a call ended, for the metrics.
struct Answer {
    observation: ModelObservation,
    status: InvocationStatus,
    evidence_status: EvidenceStatus,
    code: Option<ErrorCode>,
}

impl Answer {
    /// A call refused before the boundary: nothing run or recorded.
    fn refused(code: ErrorCode, tool_call_id: &str) -> Self {
        Self {
            observation: ModelObservation::Error(ErrorResult::new(
                code,
                ToolCallId::new(tool_call_id).ok(),
            )),
            status: InvocationStatus::Error,
            evidence_status: EvidenceStatus::Error,
            code: Some(code),
        }
    }
}

impl HttpHandler {
    async fn call(
        &self,
        request: &CallToolRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> Answer {
        let parts = context.extensions.get::<Parts>();
        let principal = parts.and_then(|p| p.extensions.get::<Principal>());
        let ids = HttpCallIds::resolve(
            &context.meta,
            request.meta.as_ref(),
            &context.id,
            parts.map(|p| &p.headers),
            parts.and_then(|p| p.extensions.get::<PathRun>()),
            parts
                .and_then(|p| p.extensions.get::<axum::extract::ConnectInfo<Connection>>())
                .map(|c| &c.0),
        );
        let Some(run_text) = ids.run_id else {
            return Answer::refused(ErrorCode::RunMismatch, &ids.tool_call_id);
        };
        let Ok(run) = RunId::new(run_text.as_str()) else {
            return Answer::refused(ErrorCode::RunMismatch, &ids.tool_call_id);
        };
        let shared = &self.shared;
        let Some(_permit) = shared.admission.try_admit(principal.map(Principal::name)) else {
            return Answer::refused(ErrorCode::Overloaded, &ids.tool_call_id);
        };
        shared.metrics.call_started();
        let _in_flight = InFlight(&shared.metrics);
        let mut ctx = shared.app.run_context(run);
        if let Some(budget) = principal.and_then(Principal::run_budget) {
            ctx.run_budget = Some(ctx.run_budget.map_or(budget, |b| b.min(budget)));
        }
        let ctx = ownership::bind(ctx, principal);
        let arguments = request
            .arguments
            .as_ref()
            .and_then(|object| serde_json::to_string(object).ok())
            .unwrap_or_default();
        let tool_call_id = ids.tool_call_id.clone();
        let envelope =
            ToolEnvelope::new(ids.tool_call_id, run_text, request.name.as_ref(), arguments)
                .authorized(true)
                .read_only(true);
        let mut abandon = shared.abandon.subscribe();
        // Abandoning drops the call's future: the boundary's guard finalizes
        // its record ERROR / EXECUTION_ABANDONED on a task of its own.
        let outcome = tokio::select! {
            outcome = shared.app.boundary.invoke(&ctx, envelope) => outcome,
            _ = abandon.wait_for(|abandoned| *abandoned) => {
                return Answer::refused(ErrorCode::ExecutionAbandoned, &tool_call_id);
            }
        };
        Answer {
            status: outcome.control.status,
            evidence_status: outcome.control.evidence_status,
            code: outcome.control.error_code,
            observation: outcome.observation,
        }
    }
}

/// Keeps the in-flight gauge right when the call's future is dropped.
struct InFlight<'a>(&'a Metrics);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.call_ended();
    }
}

impl ServerHandler for HttpHandler {
    fn get_info(&self) -> ServerConfig {
        server_config()
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(self.shared.tools.clone()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let started = Instant::now();
        let answer = self.call(&request, &context).await;
        self.shared.metrics.call(
            request.name.as_ref(),
            answer.status,
            answer.evidence_status,
            answer.code,
            started.elapsed(),
        );
        Ok(CallToolResponse::Complete(observation_result(
            &answer.observation,
        )))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc as StdArc;

    use axum::http::HeaderValue;
    use serde_json::{Value, json};

    use super::*;

    fn meta(value: Value) -> RequestMetaObject {
        match value {
            Value::Object(object) => RequestMetaObject::from(object),
            _ => RequestMetaObject::new(),
        }
    }

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, HeaderValue::from_static(value));
        }
        map
    }

    #[test]
    fn meta_wins_then_headers_then_the_path() {
        let h = headers(&[("aci-tool-call-id", "call_H"), ("aci-run-id", "run-h")]);
        let path = PathRun("run-path".into());
        let m = meta(json!({"aci/tool_call_id": "call_M", "aci/run_id": "run-m"}));
        let ids =
            HttpCallIds::resolve(&m, None, &RequestId::Number(3), Some(&h), Some(&path), None);
        assert_eq!(ids.tool_call_id, "call_M");
        assert_eq!(ids.run_id.as_deref(), Some("run-m"));
        let none = RequestMetaObject::new();
        let ids = HttpCallIds::resolve(
            &none,
            None,
            &RequestId::Number(3),
            Some(&h),
            Some(&path),
            None,
        );
        assert_eq!(ids.tool_call_id, "call_H");
        assert_eq!(ids.run_id.as_deref(), Some("run-h"));
        let conn = Connection(Arc::from("http-c1"));
        let ids = HttpCallIds::resolve(
            &none,
            None,
            &RequestId::Number(3),
            None,
            Some(&path),
            Some(&conn),
        );
        assert_eq!(ids.tool_call_id, "mcp:http-c1:3");
        assert_eq!(ids.run_id.as_deref(), Some("run-path"));
        let ids = HttpCallIds::resolve(&none, None, &RequestId::Number(3), None, None, None);
        assert_eq!(ids.run_id, None);
    }

    #[test]
    fn the_fallback_is_qualified_by_the_session() {
        let none = RequestMetaObject::new();
        let h = headers(&[("mcp-session-id", "s-1")]);
        let conn = Connection(Arc::from("http-c1"));
        let ids = HttpCallIds::resolve(
            &none,
            None,
            &RequestId::Number(1),
            Some(&h),
            None,
            Some(&conn),
        );
        assert_eq!(ids.tool_call_id, "mcp:s-1:1");
        let bad = headers(&[("mcp-session-id", "a:b")]);
        let ids = HttpCallIds::resolve(
            &none,
            None,
            &RequestId::Number(1),
            Some(&bad),
            None,
            Some(&conn),
        );
        assert_eq!(ids.tool_call_id, "mcp:http-c1:1");
        let id = RequestId::String(StdArc::from("req-9"));
        assert_eq!(fallback_tool_call_id("http-c2", &id), "mcp:http-c2:req-9");
    }

    #[test]
    fn non_text_ids_are_no_ids() {
        let m = meta(json!({"aci/tool_call_id": 5, "aci/run_id": null}));
        let ids = HttpCallIds::resolve(&m, None, &RequestId::Number(1), None, None, None);
        assert_eq!(ids.tool_call_id, "");
        assert_eq!(ids.run_id.as_deref(), Some(""));
    }

    #[test]
    fn refusals_carry_only_a_valid_id() {
        let answer = Answer::refused(ErrorCode::Overloaded, "call_1");
        assert_eq!(
            answer.observation.to_json(),
            json!({"evidence_status": "ERROR", "error_code": "OVERLOADED", "message": ErrorCode::Overloaded.message(), "tool_call_id": "call_1"})
        );
        let answer = Answer::refused(ErrorCode::RunMismatch, "bad id");
        assert_eq!(answer.observation.to_json()["tool_call_id"], Value::Null);
    }
}
