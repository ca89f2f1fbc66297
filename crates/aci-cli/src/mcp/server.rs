//! The MCP server handler: `tools/list` and `tools/call` over the boundary.
//!
//! Transport-neutral: the stdio transport ([`super::serve`]) and the HTTP
//! transport both serve [`AciServer`]. See the [module docs](super) for the
//! rules it follows.

use std::sync::Arc;

use aci_contracts::{ErrorCode, ErrorResult, RunId, ToolCallId, tool_definitions};
use invocation_core::{ModelObservation, ToolEnvelope};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorCode as RpcCode,
    Implementation, ListToolsResult, PaginatedRequestParams, ProtocolVersion, RequestId,
    RequestMetaObject, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData as McpError, ServerHandler};
use serde_json::Value;

use super::framing::{AdmittedCall, NonObjectArguments};
use super::shutdown::CallGate;
use crate::app::App;
use crate::error::CliError;

/// The `_meta` key of the run id.
pub(crate) const META_RUN_ID: &str = "aci/run_id";
/// The `_meta` key of the tool call id.
pub(crate) const META_TOOL_CALL_ID: &str = "aci/tool_call_id";

/// The code of an abandoned call's error result (the record's code too).
const ABANDONED: ErrorCode = ErrorCode::ExecutionAbandoned;

/// The MCP session a call arrived in, as its transport names it: the part of
/// a composed tool call id that keeps one session's JSON-RPC ids apart from
/// another's.
///
/// On stdio the session is the server process ([`McpSession::stdio`]); over
/// HTTP the transport names it (its session id, or the connection in
/// stateless mode) and either builds the server with it or puts it in the
/// request's extensions, where it wins over the server's.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct McpSession(String);

#[cfg_attr(
    not(test),
    allow(dead_code, reason = "the HTTP transport names its sessions with these")
)]
impl McpSession {
    /// Longest session name, in bytes (the composed id must stay a valid id).
    pub(crate) const MAX_BYTES: usize = 64;

    /// A fresh session for one stdio server process: `stdio-` and 16 random
    /// hex digits.
    pub(crate) fn stdio() -> Self {
        let random = uuid::Uuid::new_v4().simple().to_string();
        Self(format!("stdio-{}", &random[..16]))
    }

    /// A session named by the transport: 1 to [`Self::MAX_BYTES`] bytes of
    /// ASCII letters, digits and `_ - .` (no `:`, which separates the parts
    /// of a composed id).
    pub(crate) fn new(name: impl Into<String>) -> Result<Self, CliError> {
        let name = name.into();
        let valid = !name.is_empty()
            && name.len() <= Self::MAX_BYTES
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
        if valid {
            Ok(Self(name))
        } else {
            Err(CliError::config("invalid MCP session name"))
        }
    }

    /// The name.
    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }

    /// The tool call id of a call that brought no framework id:
    /// `mcp:<session>:<JSON-RPC id>` (a numeric id as its decimal text).
    pub(crate) fn compose(&self, request_id: &RequestId) -> String {
        format!("mcp:{}:{request_id}", self.0)
    }
}

/// The MCP server: the boundary, the server's run, its session, the gate its
/// calls pass, and the tool list.
#[derive(Debug, Clone)]
pub(crate) struct AciServer {
    app: Arc<App>,
    run_id: RunId,
    session: McpSession,
    gate: CallGate,
    tools: Arc<Vec<Tool>>,
}

impl AciServer {
    /// A server for `run_id` (the run of calls without `_meta` run id) in
    /// `session`, admitting calls through `gate`.
    pub(crate) fn new(
        app: Arc<App>,
        run_id: RunId,
        session: McpSession,
        gate: CallGate,
    ) -> Result<Self, CliError> {
        Ok(Self {
            app,
            run_id,
            session,
            gate,
            tools: Arc::new(
                mcp_tools().map_err(|e| {
                    CliError::config(format!("cannot build the MCP tool list: {e}"))
                })?,
            ),
        })
    }

    /// Runs one `tools/call` through the boundary, or gives it up when the
    /// server abandons running calls (dropping the boundary's future, whose
    /// guard then finalizes the record `ERROR / EXECUTION_ABANDONED`).
    async fn call(
        &self,
        request: &CallToolRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> Result<ModelObservation, McpError> {
        // Over stdio the transport admitted the call when it read it; over
        // HTTP it is admitted here.
        let admitted = context
            .extensions
            .get::<AdmittedCall>()
            .and_then(AdmittedCall::take);
        let Some(ticket) = admitted.or_else(|| self.gate.admit()) else {
            return Err(stopping());
        };
        let session = context
            .extensions
            .get::<McpSession>()
            .unwrap_or(&self.session);
        let ids = CallIds::resolve(
            &context.meta,
            request.meta.as_ref(),
            &context.id,
            session,
            &self.run_id,
        );
        tracing::debug!(
            tool_name = known_tool(&request.name),
            tool_call_id_from = ids.tool_call_id_from,
            run_id_from = ids.run_id_from,
            "tools/call"
        );
        let ctx = self
            .app
            .run_context(ids.run.clone().unwrap_or_else(|| self.run_id.clone()));
        // Arguments that were not an object travel as their JSON text (the
        // boundary answers INVALID_INPUT); no arguments are empty text.
        let arguments = match context.extensions.get::<NonObjectArguments>() {
            Some(NonObjectArguments(text)) => text.clone(),
            None => request
                .arguments
                .as_ref()
                .and_then(|object| serde_json::to_string(object).ok())
                .unwrap_or_default(),
        };
        let envelope = ToolEnvelope::new(
            ids.tool_call_id.clone(),
            ids.run_id.clone(),
            request.name.as_ref(),
            arguments,
        )
        .authorized(true)
        .read_only(true);
        let invoke = self.app.boundary.invoke(&ctx, envelope);
        Ok(tokio::select! {
            biased;
            outcome = invoke => outcome.observation,
            () = ticket.abandoned() => {
                tracing::info!("a running call was abandoned");
                ModelObservation::Error(ErrorResult::new(
                    ABANDONED,
                    ToolCallId::new(ids.tool_call_id).ok(),
                ))
            }
        })
    }
}

/// The tool name for logs: one of the three, never client text.
fn known_tool(name: &str) -> &'static str {
    ["lookup_knowledge", "query_logs", "query_mysql"]
        .into_iter()
        .find(|known| *known == name)
        .unwrap_or("(unknown)")
}

/// The protocol error of a request that arrives while the server stops.
pub(crate) fn stopping() -> McpError {
    McpError::new(RpcCode(-32_000), "the server is stopping", None)
}

/// What the server says of itself at the handshake.
pub(crate) fn server_config() -> ServerConfig {
    ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
        .with_server_info(Implementation::new("aci", env!("CARGO_PKG_VERSION")))
        .with_protocol_version(ProtocolVersion::LATEST)
}

impl ServerHandler for AciServer {
    fn get_info(&self) -> ServerConfig {
        server_config()
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(self.tools.to_vec()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let observation = self.call(&request, &context).await?;
        Ok(CallToolResponse::Complete(observation_result(&observation)))
    }
}

/// The MCP result of a call: the observation as `structuredContent` and as
/// one text block; `isError` when the call is ERROR. Nothing else.
pub(crate) fn observation_result(observation: &ModelObservation) -> CallToolResult {
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
pub(crate) fn mcp_tools() -> Result<Vec<Tool>, serde_json::Error> {
    tool_definitions()
        .iter()
        .map(|definition| serde_json::from_value(definition.to_mcp()))
        .collect()
}

/// The ids of one `tools/call`, as the boundary gets them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CallIds {
    /// The tool call id text.
    pub(crate) tool_call_id: String,
    /// The run id text of the envelope.
    pub(crate) run_id: String,
    /// The run whose context the call runs in, when it is not the server's.
    pub(crate) run: Option<RunId>,
    /// Where the tool call id came from (for logs).
    pub(crate) tool_call_id_from: &'static str,
    /// Where the run id came from (for logs).
    pub(crate) run_id_from: &'static str,
}

impl CallIds {
    /// Applies the id rules of the module docs. `context_meta` is the request's
    /// `_meta` as rmcp hands it to the handler; `params_meta` is whatever was
    /// left in the params (looked at second).
    pub(crate) fn resolve(
        context_meta: &RequestMetaObject,
        params_meta: Option<&RequestMetaObject>,
        request_id: &RequestId,
        session: &McpSession,
        server_run: &RunId,
    ) -> Self {
        let lookup = |key: &str| {
            context_meta
                .get(key)
                .or_else(|| params_meta.and_then(|meta| meta.get(key)))
        };
        let (tool_call_id, tool_call_id_from) = match lookup(META_TOOL_CALL_ID) {
            Some(value) => (meta_text(value), "_meta"),
            None => (session.compose(request_id), "session+jsonrpc_id"),
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
pub(crate) fn meta_text(value: &Value) -> String {
    value.as_str().map(str::to_owned).unwrap_or_default()
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

    fn session() -> McpSession {
        McpSession::new("s-1").unwrap()
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
            &session(),
            &server_run(),
        );
        assert_eq!(ids.tool_call_id, "mcp:s-1:7");
        assert_eq!(ids.run_id, "run-server");
        assert_eq!(ids.run, None);
        let ids = CallIds::resolve(
            &RequestMetaObject::new(),
            None,
            &RequestId::String(StdArc::from("req-1")),
            &session(),
            &server_run(),
        );
        assert_eq!(ids.tool_call_id, "mcp:s-1:req-1");
        // Another session's id 7 is another call.
        let other = CallIds::resolve(
            &RequestMetaObject::new(),
            None,
            &RequestId::Number(7),
            &McpSession::new("s-2").unwrap(),
            &server_run(),
        );
        assert_eq!(other.tool_call_id, "mcp:s-2:7");
    }

    #[test]
    fn meta_ids_are_used_as_given() {
        let m = meta(json!({"aci/tool_call_id": "call_01", "aci/run_id": "run-other"}));
        let ids = CallIds::resolve(&m, None, &RequestId::Number(1), &session(), &server_run());
        assert_eq!(ids.tool_call_id, "call_01");
        assert_eq!(ids.run_id, "run-other");
        assert_eq!(ids.run, Some(RunId::new("run-other").unwrap()));

        // Ids left in the params are read too.
        let params = meta(json!({"aci/tool_call_id": "call_02"}));
        let ids = CallIds::resolve(
            &RequestMetaObject::new(),
            Some(&params),
            &RequestId::Number(1),
            &session(),
            &server_run(),
        );
        assert_eq!(ids.tool_call_id, "call_02");
    }

    #[test]
    fn sessions_are_id_safe() {
        let stdio = McpSession::stdio();
        assert!(stdio.as_str().starts_with("stdio-"));
        assert_eq!(stdio.as_str().len(), "stdio-".len() + 16);
        assert_ne!(stdio, McpSession::stdio());
        let composed = stdio.compose(&RequestId::Number(i64::MAX));
        assert!(ToolCallId::new(composed).is_ok());
        for bad in ["", "a:b", "a b", "{x}", &"x".repeat(65)] {
            assert!(McpSession::new(bad).is_err(), "{bad:?}");
        }
        let longest = McpSession::new("x".repeat(McpSession::MAX_BYTES)).unwrap();
        assert!(ToolCallId::new(longest.compose(&RequestId::Number(i64::MIN))).is_ok());
    }

    #[test]
    fn invalid_meta_ids_are_never_replaced() {
        let m = meta(json!({"aci/tool_call_id": "bad id", "aci/run_id": "bad run"}));
        let ids = CallIds::resolve(&m, None, &RequestId::Number(1), &session(), &server_run());
        assert_eq!(ids.tool_call_id, "bad id");
        assert_eq!(ids.run_id, "bad run");
        assert_eq!(ids.run, None);

        for value in [json!(42), json!(true), json!(null), json!({"a": 1})] {
            let m = meta(json!({"aci/tool_call_id": value.clone(), "aci/run_id": value}));
            let ids = CallIds::resolve(&m, None, &RequestId::Number(1), &session(), &server_run());
            assert_eq!(ids.tool_call_id, "");
            assert_eq!(ids.run_id, "");
            assert_eq!(ids.run, None);
        }
    }
}
