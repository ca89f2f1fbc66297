//! The MCP service: `tools/list` and `tools/call` over the boundary, for
//! every transport. What a `tools/call` means is written here once
//! ([`McpService::call`]); a transport only supplies facts
//! ([`RequestFacts`]) and its own framing.
//!
//! # Tools
//!
//! `tools/list` gives the three frozen tools exactly as
//! [`ToolDefinition::to_mcp`](aci_contracts::ToolDefinition::to_mcp) writes
//! them: `name`, `title`, `description`, `inputSchema` and `outputSchema` from
//! the frozen schemas, and `annotations` with `readOnlyHint: true`.
//!
//! # A call, in order
//!
//! 1. **ids** from `_meta` and the transport's facts ([`super::ids`]);
//! 2. **run**: a call with no run (HTTP without `_meta`, header or path run)
//!    is refused `RUN_MISMATCH`, nothing run or recorded;
//! 3. **admission** through the [`CallGate`] (or the ticket the transport
//!    took when it read the call): over a limit `OVERLOADED`, once the server
//!    abandons calls `EXECUTION_ABANDONED`, nothing run or recorded;
//! 4. **run context**: the run's configured budgets and deadline, the
//!    principal (the store refuses a run owned by another principal with
//!    `UNAUTHORIZED`, atomically with the create) and the smaller of the run
//!    budget and the principal's;
//! 5. **envelope**: every name, known or not, and every argument value goes
//!    to the boundary, whose preflight answers unknown tools
//!    (`UNKNOWN_TOOL`) and bad arguments (`INVALID_INPUT`) with an error
//!    result rather than a protocol error. The arguments are the request's
//!    `arguments` as compact JSON text (an object, or, for arguments that are
//!    not an object, that value's text, which the boundary refuses); a
//!    request without `arguments` passes empty text (`INVALID_INPUT`), never
//!    an invented `{}`. The run context states the call policy: every
//!    call is authorized and read-only (the server exposes only the three
//!    read-only tools, and the boundary still refuses any tool that is not
//!    read-only);
//! 6. **boundary**, raced against abandonment: when the server gives up
//!    running calls the boundary's future is dropped (its guard finalizes the
//!    record `ERROR / EXECUTION_ABANDONED`) and the call answers that error;
//! 7. **observation result** ([`observation_result`]);
//! 8. **metrics**, through the transport's [`CallObserver`] (HTTP's
//!    Prometheus counters), with the call's whole duration;
//! 9. **spans**, when telemetry is on ([`crate::telemetry`]): the call's
//!    `tools/call` and `execute_tool` spans, made from the facts and times
//!    gathered in the steps above ([`CallTrace`]).
//!
//! # Results
//!
//! The result's `structuredContent` is the model's observation (the tool's
//! observation when READY, the error result when ERROR), and its one text
//! block carries the same JSON text, fields in the contract's order. `isError`
//! is `false` for READY (`EVIDENCE_FOUND` and `NO_EVIDENCE`) and `true` for
//! ERROR. The harness's control view, scopes and fingerprints never leave the
//! process; they are in the run's journal (`aci inspect` on a shared store).

use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use aci_contracts::{
    ErrorCode, ErrorResult, EvidenceStatus, InvocationStatus, RunId, ToolCallId, ToolName,
    tool_definitions,
};
use invocation_core::{BoundaryOutcome, CallPolicy, ModelObservation, RunContext, ToolEnvelope};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ProtocolVersion, ServerCapabilities, ServerConfig,
    Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData as McpError, ServerHandler};

use super::gate::{CallGate, CallTicket, Refusal};
use super::ids::{CallIds, IdFacts, McpSession};
use crate::app::App;
use crate::error::CliError;
use crate::telemetry::{CallTrace, NetworkTransport, ServerFacts};

/// What a transport knows of one request beyond its JSON-RPC message.
#[derive(Debug)]
pub(crate) struct TransportFacts<'a> {
    /// The session the request came in (the stdio process, the HTTP
    /// connection).
    pub(crate) session: &'a McpSession,
    /// The client's declared `Mcp-Session-Id`, as text.
    pub(crate) declared_session: Option<&'a str>,
    /// The `Aci-Tool-Call-Id` header's text (empty when it is not text).
    pub(crate) tool_call_id_header: Option<&'a str>,
    /// The `Aci-Run-Id` header's text (empty when it is not text).
    pub(crate) run_id_header: Option<&'a str>,
    /// The `<run_id>` of a `/runs/<run_id>/mcp` URL.
    pub(crate) path_run: Option<&'a str>,
    /// Who is calling, when the transport authenticated the request.
    pub(crate) principal: Option<&'a Principal>,
    /// The call's admission, when the transport admitted it as it read it.
    pub(crate) admitted: Option<CallTicket>,
    /// The JSON text of `arguments` that were not an object, when the
    /// transport took them out of the request so that rmcp could read it.
    pub(crate) non_object_arguments: Option<&'a str>,
    /// How the request came (`network.transport` of its span).
    pub(crate) transport: NetworkTransport,
    /// The HTTP client's address.
    pub(crate) client_address: Option<IpAddr>,
    /// The request's `MCP-Protocol-Version` header (HTTP).
    pub(crate) protocol_version: Option<&'a str>,
}

impl<'a> TransportFacts<'a> {
    /// A request in `session` and nothing else known.
    pub(crate) fn in_session(session: &'a McpSession) -> Self {
        Self {
            session,
            declared_session: None,
            tool_call_id_header: None,
            run_id_header: None,
            path_run: None,
            principal: None,
            admitted: None,
            non_object_arguments: None,
            transport: NetworkTransport::Pipe,
            client_address: None,
            protocol_version: None,
        }
    }
}

/// How a transport reads its facts off a request's context (rmcp's request
/// extensions, where the transport put them).
pub(crate) trait RequestFacts: fmt::Debug + Send + Sync + 'static {
    /// The facts of one request.
    fn read<'a>(&'a self, context: &'a RequestContext<RoleServer>) -> TransportFacts<'a>;
}

/// Who an authenticated call comes from.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Principal {
    name: Arc<str>,
    run_budget: Option<u32>,
    reviewer: bool,
}

impl Principal {
    /// The principal `name`, with its own per-run tool call budget.
    pub(crate) fn new(name: &str, run_budget: Option<u32>) -> Self {
        Self {
            name: Arc::from(name),
            run_budget,
            reviewer: false,
        }
    }

    /// The principal, allowed to review every run's page when `reviewer`
    /// (`review = true`), not only the runs it owns.
    pub(crate) const fn with_review(mut self, reviewer: bool) -> Self {
        self.reviewer = reviewer;
        self
    }

    /// Whether it may see every run's review page.
    pub(crate) const fn may_review_every_run(&self) -> bool {
        self.reviewer
    }

    /// The principal's name: a static token's table name, or a JWT's `sub`.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// The per-run tool call budget configured for this principal.
    pub(crate) const fn run_budget(&self) -> Option<u32> {
        self.run_budget
    }
}

impl fmt::Debug for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Principal").field(&self.name).finish()
    }
}

/// Sees every answered `tools/call` (HTTP's metrics).
pub(crate) trait CallObserver: fmt::Debug + Send + Sync + 'static {
    /// `tool` (the client's text) was answered with `answer` after `elapsed`.
    fn answered(&self, tool: &str, answer: &Answer, elapsed: Duration);
}

/// How a call ended.
#[derive(Debug, Clone)]
pub(crate) struct Answer {
    /// What the model sees.
    pub(crate) observation: ModelObservation,
    /// READY or ERROR.
    pub(crate) status: InvocationStatus,
    /// The evidence status.
    pub(crate) evidence_status: EvidenceStatus,
    /// The error code of an ERROR.
    pub(crate) code: Option<ErrorCode>,
}

impl Answer {
    /// A call refused or given up outside the boundary: the error result
    /// with the tool call id when it is a valid one.
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

impl From<BoundaryOutcome> for Answer {
    fn from(outcome: BoundaryOutcome) -> Self {
        Self {
            status: outcome.control.status,
            evidence_status: outcome.control.evidence_status,
            code: outcome.control.error_code,
            observation: outcome.observation,
        }
    }
}

/// What makes one service, besides the app and the gate.
#[derive(Debug)]
pub(crate) struct ServiceSetup {
    /// The run of calls that name none (stdio: `--run-id` or one made at
    /// start; HTTP: none).
    pub(crate) server_run: Option<RunId>,
    /// How the transport's facts are read.
    pub(crate) facts: Arc<dyn RequestFacts>,
    /// Who sees each answered call.
    pub(crate) observer: Option<Arc<dyn CallObserver>>,
}

/// The rmcp handler of every transport: a handle on what all requests of the
/// process share (cloning is cheap; it holds nothing a later request needs).
#[derive(Debug, Clone)]
pub(crate) struct McpService {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    app: Arc<App>,
    gate: CallGate,
    tools: Vec<Tool>,
    setup: ServiceSetup,
}

impl McpService {
    /// The service of `app`'s boundary, admitting calls through `gate`.
    pub(crate) fn new(
        app: Arc<App>,
        gate: CallGate,
        setup: ServiceSetup,
    ) -> Result<Self, CliError> {
        let tools = mcp_tools()
            .map_err(|e| CliError::config(format!("cannot build the MCP tool list: {e}")))?;
        Ok(Self {
            shared: Arc::new(Shared {
                app,
                gate,
                tools,
                setup,
            }),
        })
    }

    /// One `tools/call`, in the order of the module docs (but the metrics,
    /// which [`ServerHandler::call_tool`] records).
    async fn call(
        &self,
        request: &CallToolRequestParams,
        context: &RequestContext<RoleServer>,
        trace: &mut CallTrace,
    ) -> Answer {
        let shared = &*self.shared;
        let facts = shared.setup.facts.read(context);
        let ids = CallIds::resolve(&IdFacts {
            context_meta: &context.meta,
            params_meta: request.meta.as_ref(),
            request_id: &context.id,
            tool_call_id_header: facts.tool_call_id_header,
            run_id_header: facts.run_id_header,
            path_run: facts.path_run,
            declared_session: facts.declared_session,
            session: facts.session,
            server_run: shared.setup.server_run.as_ref(),
        });
        tracing::debug!(
            tool_name = known_tool(&request.name),
            tool_call_id_from = ids.tool_call_id_from,
            run_id_from = ids.run_id_from,
            "tools/call"
        );
        if trace.is_on() {
            trace.request(
                &server_facts(&facts, request, context),
                ids.run_id.as_deref(),
                &ids.tool_call_id,
            );
        }
        let (Some(run_id), Some(run)) = (ids.run_id, ids.context_run) else {
            return Answer::refused(ErrorCode::RunMismatch, &ids.tool_call_id);
        };
        let admitted = match facts.admitted {
            Some(ticket) => Ok(ticket),
            None => shared.gate.admit(facts.principal.map(Principal::name)),
        };
        let ticket = match admitted {
            Ok(ticket) => ticket,
            Err(Refusal::Overloaded) => {
                return Answer::refused(ErrorCode::Overloaded, &ids.tool_call_id);
            }
            Err(Refusal::Abandoned) => {
                return Answer::refused(ErrorCode::ExecutionAbandoned, &ids.tool_call_id);
            }
        };
        let ctx = self.run_context(run, facts.principal);
        // Arguments that were not an object travel as their JSON text (the
        // boundary answers INVALID_INPUT); no arguments are empty text.
        let arguments = match facts.non_object_arguments {
            Some(text) => text.to_owned(),
            None => request
                .arguments
                .as_ref()
                .and_then(|object| serde_json::to_string(object).ok())
                .unwrap_or_default(),
        };
        trace.arguments(&arguments);
        let envelope = ToolEnvelope::new(
            ids.tool_call_id.clone(),
            run_id,
            request.name.as_ref(),
            arguments,
        );
        let invoked = SystemTime::now();
        tokio::select! {
            biased;
            outcome = shared.app.boundary.invoke(&ctx, envelope) => {
                trace.outcome(invoked, &outcome);
                Answer::from(outcome)
            }
            () = ticket.abandoned() => {
                tracing::info!("a running call was abandoned");
                trace.abandoned(invoked);
                Answer::refused(ErrorCode::ExecutionAbandoned, &ids.tool_call_id)
            }
        }
    }

    /// The run context of `run`: the configured budgets and deadline, and
    /// the principal with its own run budget (the smaller one holds). Every
    /// call is authorized and read-only: a transport admits only
    /// authenticated callers (HTTP) or the process's own (stdio), the server
    /// exposes only the three read-only tools, and the boundary still refuses
    /// any tool that is not declared read-only.
    fn run_context(&self, run: RunId, principal: Option<&Principal>) -> RunContext {
        let mut ctx = self
            .shared
            .app
            .run_context(run, CallPolicy::AUTHORIZED_READ_ONLY);
        let Some(principal) = principal else {
            // Anonymous calls (stdio, `--insecure-no-auth`) claim no run.
            return ctx;
        };
        if let Some(budget) = principal.run_budget() {
            ctx.run_budget = Some(ctx.run_budget.map_or(budget, |b| b.min(budget)));
        }
        ctx.with_principal(principal.name())
    }
}

impl ServerHandler for McpService {
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
        let mut trace = CallTrace::start();
        let answer = self.call(&request, &context, &mut trace).await;
        if let Some(observer) = &self.shared.setup.observer {
            observer.answered(request.name.as_ref(), &answer, started.elapsed());
        }
        trace.end(request.name.as_ref(), &answer);
        Ok(CallToolResponse::Complete(observation_result(
            &answer.observation,
        )))
    }
}

/// What the server span of a call says of its request: the session is the
/// client's declared one, or the stdio process's (an HTTP connection is not
/// an MCP session); the protocol version is the request's header, or the
/// one of the session's handshake.
fn server_facts<'a>(
    facts: &TransportFacts<'a>,
    request: &'a CallToolRequestParams,
    context: &'a RequestContext<RoleServer>,
) -> ServerFacts<'a> {
    let session = facts.declared_session.or(match facts.transport {
        NetworkTransport::Pipe => Some(facts.session.as_str()),
        NetworkTransport::Tcp => None,
    });
    ServerFacts {
        request_id: &context.id,
        metas: [Some(&context.meta), request.meta.as_ref()],
        transport: facts.transport,
        client_address: facts.client_address,
        session,
        protocol_version: facts.protocol_version,
        handshake_version: context
            .peer
            .peer_info()
            .map(|info| info.protocol_version.as_str().to_owned()),
    }
}

/// The tool name for logs: one of the three, never client text.
fn known_tool(name: &str) -> &'static str {
    ToolName::parse(name).map_or("(unknown)", ToolName::as_str)
}

/// What the server says of itself at the handshake: `aci` with this crate's
/// version, tools only, the newest MCP revision rmcp knows
/// ([`ProtocolVersion::LATEST`]); over the `initialize` handshake rmcp agrees
/// to the client's version, or to the newest revision that still has a
/// handshake.
fn server_config() -> ServerConfig {
    ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
        .with_server_info(Implementation::new("aci", env!("CARGO_PKG_VERSION")))
        .with_protocol_version(ProtocolVersion::LATEST)
}

/// The MCP result of a call: the observation as `structuredContent` and as
/// one text block; `isError` when the call is ERROR. Nothing else.
fn observation_result(observation: &ModelObservation) -> CallToolResult {
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

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

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
    fn refusals_carry_only_a_valid_id() {
        let answer = Answer::refused(ErrorCode::Overloaded, "call_1");
        assert_eq!(
            answer.observation.to_json(),
            json!({"evidence_status": "ERROR", "error_code": "OVERLOADED", "message": ErrorCode::Overloaded.message(), "tool_call_id": "call_1"})
        );
        assert_eq!(
            (answer.status, answer.evidence_status, answer.code),
            (
                InvocationStatus::Error,
                EvidenceStatus::Error,
                Some(ErrorCode::Overloaded)
            )
        );
        let answer = Answer::refused(ErrorCode::RunMismatch, "bad id");
        assert_eq!(answer.observation.to_json()["tool_call_id"], Value::Null);
        let result = observation_result(&answer.observation);
        assert_eq!(result.is_error, Some(true));
        assert_eq!(
            result.structured_content,
            Some(answer.observation.to_json())
        );
    }

    #[test]
    fn logs_name_only_known_tools() {
        assert_eq!(known_tool("query_logs"), "query_logs");
        assert_eq!(known_tool("secret-tool-run-123"), "(unknown)");
    }
}
