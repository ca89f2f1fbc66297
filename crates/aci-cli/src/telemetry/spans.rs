//! The spans of one `tools/call`, following the OpenTelemetry MCP and GenAI
//! semantic conventions.
//!
//! - `tools/call {tool}`, kind SERVER: `mcp.method.name`,
//!   `jsonrpc.request.id`, `mcp.protocol.version`, `mcp.session.id` (when
//!   the call has a session), `network.transport` (`pipe` on stdio, `tcp`
//!   over HTTP), `client.address` (HTTP), `gen_ai.tool.name`; on ERROR
//!   `error.type` (our error code) and status ERROR. Its parent is the
//!   client's `params._meta.traceparent`/`tracestate` (the MCP
//!   convention); without one it is a root span in the run's trace
//!   ([`run_trace_id`]).
//! - its child `execute_tool {tool}`, kind INTERNAL: `gen_ai.operation.name =
//!   execute_tool`, `gen_ai.tool.name`, `gen_ai.tool.call.id` (the valid
//!   framework id the record is keyed by), `gen_ai.tool.type` and
//!   `gen_ai.tool.description` (the three tools), `aci.run.id`,
//!   `aci.record.status` (when the call has a record), `aci.evidence_status`,
//!   `aci.returned_count`, `aci.truncated`; on ERROR `error.type` and status
//!   ERROR. A call refused before it had a record (preflight, admission, no
//!   run) has this span too, with its code and no `aci.record.status`. With
//!   `capture_content`, `gen_ai.tool.call.arguments` (the arguments as the
//!   boundary got them) and `gen_ai.tool.call.result` (the model's
//!   observation); never the raw response.
//! - its children `preflight`, `execution` and `projection`, kind INTERNAL,
//!   one per phase the call reached, as long as the boundary measured it
//!   ([`PhaseTimings`]; see [`phases`] for where they sit).
//!
//! The spans are made when the call has been answered, from times taken as
//! it ran, on the telemetry thread ([`super::export`]): the call itself
//! only takes those times and queues them.

use std::collections::HashMap;
use std::time::SystemTime;

use aci_contracts::{ErrorCode, EvidenceStatus, InvocationStatus, ToolCallId, ToolName};
use invocation_core::{BoundaryOutcome, PhaseTimings};
use opentelemetry::propagation::{Extractor, TextMapPropagator as _};
use opentelemetry::trace::{Span as _, SpanKind, Status, TraceContextExt as _, Tracer as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracer;
use rmcp::model::{RequestId, RequestMetaObject};

use super::export::{CallSpans, run_trace_id, with_trace_id};
use super::{Telemetry, installed};
use crate::server::service::Answer;

/// How a request reached the server (`network.transport`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NetworkTransport {
    /// stdio.
    Pipe,
    /// HTTP.
    Tcp,
}

impl NetworkTransport {
    const fn as_str(self) -> &'static str {
        match self {
            Self::Pipe => "pipe",
            Self::Tcp => "tcp",
        }
    }
}

/// What a transport tells of a call's request, for its server span.
#[derive(Debug, Clone)]
pub(crate) struct ServerFacts<'a> {
    /// The JSON-RPC id.
    pub(crate) request_id: &'a RequestId,
    /// The request's `_meta` as rmcp hands it over, and what was left in the
    /// params.
    pub(crate) metas: [Option<&'a RequestMetaObject>; 2],
    /// `pipe` or `tcp`.
    pub(crate) transport: NetworkTransport,
    /// The HTTP client's address.
    pub(crate) client_address: Option<std::net::IpAddr>,
    /// The MCP session, when the call has one.
    pub(crate) session: Option<&'a str>,
    /// The MCP protocol version of the request (HTTP's header).
    pub(crate) protocol_version: Option<&'a str>,
    /// The protocol version of the session's handshake (stdio).
    pub(crate) handshake_version: Option<String>,
}

/// One call's trace facts, gathered as the call runs; inert (and free)
/// when telemetry is off.
#[derive(Debug, Default)]
pub(crate) struct CallTrace {
    gathered: Option<Box<Gathered>>,
}

#[derive(Debug)]
struct Gathered {
    telemetry: &'static Telemetry,
    started: SystemTime,
    server: Option<OwnedServerFacts>,
    run_id: Option<String>,
    /// The call's id when it is a valid one (the record's key), as the
    /// boundary gave it back when it ran.
    tool_call_id: Option<String>,
    /// Given up while the boundary ran: its guard finalizes the record.
    abandoned: bool,
    arguments: Option<String>,
    executed: Option<(SystemTime, SystemTime)>,
    outcome: Option<OutcomeFacts>,
    /// Set when the call was answered.
    answered: Option<AnsweredFacts>,
}

/// What the call's answer adds: its tool and how it ended.
#[derive(Debug)]
struct AnsweredFacts {
    at: SystemTime,
    /// The tool, when it is one of ours.
    known: Option<ToolName>,
    /// The client's tool name otherwise, bounded.
    client_tool: String,
    status: InvocationStatus,
    evidence_status: EvidenceStatus,
    /// The code of an ERROR.
    error: Option<ErrorCode>,
    /// The model's observation, with content capture.
    result: Option<String>,
}

#[derive(Debug)]
struct OwnedServerFacts {
    parent: Option<Context>,
    request_id: String,
    transport: NetworkTransport,
    client_address: Option<std::net::IpAddr>,
    session: Option<String>,
    protocol_version: Option<String>,
}

/// What the boundary's outcome adds to the execute_tool span.
#[derive(Debug)]
struct OutcomeFacts {
    returned_count: u64,
    truncated: bool,
    recorded: bool,
    timings: PhaseTimings,
}

impl CallTrace {
    /// A call starts now (nothing when telemetry is off).
    pub(crate) fn start() -> Self {
        Self {
            gathered: installed().map(|telemetry| {
                Box::new(Gathered {
                    telemetry,
                    started: SystemTime::now(),
                    server: None,
                    run_id: None,
                    tool_call_id: None,
                    abandoned: false,
                    arguments: None,
                    executed: None,
                    outcome: None,
                    answered: None,
                })
            }),
        }
    }

    /// Whether spans will be made of this call.
    pub(crate) const fn is_on(&self) -> bool {
        self.gathered.is_some()
    }

    /// The request's facts, as the transport and the id resolver know them.
    pub(crate) fn request(
        &mut self,
        facts: &ServerFacts<'_>,
        run_id: Option<&str>,
        tool_call_id: &str,
    ) {
        let Some(gathered) = &mut self.gathered else {
            return;
        };
        gathered.run_id = run_id.map(str::to_owned);
        gathered.tool_call_id = ToolCallId::new(tool_call_id)
            .ok()
            .map(ToolCallId::into_string);
        gathered.server = Some(OwnedServerFacts {
            parent: parent_context(facts.metas),
            request_id: facts.request_id.to_string(),
            transport: facts.transport,
            client_address: facts.client_address,
            session: facts.session.map(str::to_owned),
            protocol_version: facts
                .protocol_version
                .map(str::to_owned)
                .or_else(|| facts.handshake_version.clone()),
        });
    }

    /// The call runs in `run_id` and has no server span (`aci call`).
    pub(crate) fn run(&mut self, run_id: &str) {
        if let Some(gathered) = &mut self.gathered {
            gathered.run_id = Some(run_id.to_owned());
        }
    }

    /// The arguments text the boundary gets (kept only with content capture).
    pub(crate) fn arguments(&mut self, text: &str) {
        if let Some(gathered) = &mut self.gathered
            && gathered.telemetry.capture_content
        {
            gathered.arguments = Some(text.to_owned());
        }
    }

    /// The boundary ran from `started` until now and gave `outcome`.
    pub(crate) fn outcome(&mut self, started: SystemTime, outcome: &BoundaryOutcome) {
        let Some(gathered) = &mut self.gathered else {
            return;
        };
        gathered.executed = Some((started, SystemTime::now()));
        let control = &outcome.control;
        // The boundary's view of the id is the span's; it is the request's.
        match &control.tool_call_id {
            Some(id) if gathered.tool_call_id.as_deref() == Some(id.as_str()) => {}
            id => gathered.tool_call_id = id.as_ref().map(ToString::to_string),
        }
        gathered.outcome = Some(OutcomeFacts {
            returned_count: control.returned_count,
            truncated: control.truncated,
            recorded: recorded(control.error_code),
            timings: outcome.timings,
        });
    }

    /// The server gave the call up while the boundary ran it (since
    /// `started`): the boundary's guard finalizes its record.
    pub(crate) fn abandoned(&mut self, started: SystemTime) {
        if let Some(gathered) = &mut self.gathered {
            gathered.executed = Some((started, SystemTime::now()));
            gathered.abandoned = true;
        }
    }

    /// The call of `tool` (the client's text) was answered `answer`: queues
    /// it for its spans.
    pub(crate) fn end(self, tool: &str, answer: &Answer) {
        let Some(mut gathered) = self.gathered else {
            return;
        };
        let known = ToolName::parse(tool);
        gathered.answered = Some(AnsweredFacts {
            at: SystemTime::now(),
            known,
            client_tool: if known.is_some() {
                String::new()
            } else {
                bounded(tool)
            },
            status: answer.status,
            evidence_status: answer.evidence_status,
            error: answer
                .code
                .filter(|_| answer.status == InvocationStatus::Error),
            result: gathered
                .telemetry
                .capture_content
                .then(|| answer.observation.to_json_string()),
        });
        let telemetry = gathered.telemetry;
        telemetry.pipeline.submit(gathered);
    }
}

/// Whether a call that ended with `code` has a record. Refusals before the
/// record was created (preflight, the run's budgets, a duplicate id, the
/// server's admission) have none.
fn recorded(code: Option<ErrorCode>) -> bool {
    !matches!(
        code,
        Some(
            ErrorCode::InvalidToolCallId
                | ErrorCode::RunMismatch
                | ErrorCode::RunInactive
                | ErrorCode::RunDeadlineExceeded
                | ErrorCode::UnknownTool
                | ErrorCode::Unauthorized
                | ErrorCode::NotReadOnly
                | ErrorCode::InvalidInput
                | ErrorCode::RequestTooLarge
                | ErrorCode::DuplicateToolCall
                | ErrorCode::ToolBudgetExhausted
                | ErrorCode::RunBudgetExhausted
                | ErrorCode::Overloaded
        )
    )
}

/// The longest client tool name put on a span.
const MAX_TOOL_NAME_BYTES: usize = 128;

impl CallSpans for Gathered {
    fn spans(&self) -> usize {
        let phases = self.outcome.as_ref().map_or(0, |o| {
            1 + usize::from(o.timings.execution.is_some())
                + usize::from(o.timings.projection.is_some())
        });
        1 + usize::from(self.server.is_some()) + phases
    }

    fn emit(self: Box<Self>, tracer: &SdkTracer) {
        // Owned: its strings move into the attributes.
        let Gathered {
            started,
            server,
            run_id,
            tool_call_id,
            abandoned,
            arguments,
            executed,
            outcome,
            answered,
            ..
        } = *self;
        let Some(answered) = answered else {
            return;
        };
        let ended = answered.at;
        let known = answered.known;
        let tool_text: opentelemetry::Value = match known {
            Some(t) => t.as_str().into(),
            None => answered.client_tool.into(),
        };
        let error = answered.error;
        // The run's trace, for a root span (no client trace context).
        let root_trace = match &server {
            Some(server) if server.parent.is_some() => None,
            _ => run_id.as_deref().map(run_trace_id),
        };

        let parent = match server {
            Some(server) => {
                let name = known.map_or("tools/call", server_span_name);
                let mut span = server_span(
                    tracer,
                    server,
                    name,
                    tool_text.clone(),
                    error,
                    started,
                    root_trace,
                );
                if !span.is_recording() {
                    return;
                }
                if let Some(code) = error {
                    span.set_status(Status::error(code.as_str()));
                }
                Some(Context::new().with_span(span))
            }
            None => None,
        };

        let mut attributes = Vec::with_capacity(14);
        attributes.extend([
            KeyValue::new("gen_ai.operation.name", "execute_tool"),
            KeyValue::new("gen_ai.tool.name", tool_text),
            KeyValue::new("aci.evidence_status", answered.evidence_status.as_str()),
        ]);
        if let Some(t) = known {
            attributes.push(KeyValue::new("gen_ai.tool.type", "datastore"));
            attributes.push(KeyValue::new("gen_ai.tool.description", t.description()));
        }
        if let Some(run) = run_id {
            attributes.push(KeyValue::new("aci.run.id", run));
        }
        if let Some(id) = tool_call_id {
            attributes.push(KeyValue::new("gen_ai.tool.call.id", id));
        }
        let outcome = outcome.as_ref();
        if abandoned || outcome.is_some_and(|o| o.recorded) {
            attributes.push(KeyValue::new("aci.record.status", answered.status.as_str()));
        }
        attributes.push(KeyValue::new(
            "aci.returned_count",
            i64::try_from(outcome.map_or(0, |o| o.returned_count)).unwrap_or(i64::MAX),
        ));
        attributes.push(KeyValue::new(
            "aci.truncated",
            outcome.is_some_and(|o| o.truncated),
        ));
        if let Some(code) = error {
            attributes.push(KeyValue::new("error.type", code.as_str()));
        }
        if let Some(arguments) = arguments {
            attributes.push(KeyValue::new("gen_ai.tool.call.arguments", arguments));
        }
        if let Some(result) = answered.result {
            attributes.push(KeyValue::new("gen_ai.tool.call.result", result));
        }
        let (started, finished) = executed.unwrap_or((ended, ended));
        let builder = tracer
            .span_builder(known.map_or("execute_tool", tool_span_name))
            .with_kind(SpanKind::Internal)
            .with_start_time(started)
            .with_attributes(attributes);
        let mut execute = match (&parent, root_trace) {
            (Some(parent), _) => builder.start_with_context(tracer, parent),
            // `aci call`: the tool span is the root, in the run's trace.
            (None, Some(trace_id)) => with_trace_id(trace_id, || {
                builder.start_with_context(tracer, &Context::new())
            }),
            (None, None) => builder.start_with_context(tracer, &Context::new()),
        };
        if let Some(code) = error {
            execute.set_status(Status::error(code.as_str()));
        }
        let execute = Context::new().with_span(execute);
        if let Some(outcome) = outcome {
            for (name, start, end) in phases(&outcome.timings, started, finished) {
                tracer
                    .span_builder(name)
                    .with_kind(SpanKind::Internal)
                    .with_start_time(start)
                    .start_with_context(tracer, &execute)
                    .end_with_timestamp(end);
            }
        }
        execute.span().end_with_timestamp(finished);
        if let Some(parent) = parent {
            parent.span().end_with_timestamp(ended);
        }
    }
}

/// The started `tools/call` span of `server`, from `started`: the client's
/// trace context is its parent, or else it is a root span in the run's
/// trace (`root_trace`).
fn server_span(
    tracer: &SdkTracer,
    server: OwnedServerFacts,
    name: &'static str,
    tool: opentelemetry::Value,
    error: Option<ErrorCode>,
    started: SystemTime,
    root_trace: Option<opentelemetry::trace::TraceId>,
) -> opentelemetry_sdk::trace::Span {
    let mut attributes = Vec::with_capacity(8);
    attributes.extend([
        KeyValue::new("mcp.method.name", "tools/call"),
        KeyValue::new("gen_ai.tool.name", tool),
        KeyValue::new("jsonrpc.request.id", server.request_id),
        KeyValue::new("network.transport", server.transport.as_str()),
    ]);
    if let Some(version) = server.protocol_version {
        attributes.push(KeyValue::new("mcp.protocol.version", version));
    }
    if let Some(session) = server.session {
        attributes.push(KeyValue::new("mcp.session.id", session));
    }
    if let Some(address) = server.client_address {
        attributes.push(KeyValue::new("client.address", address.to_string()));
    }
    if let Some(code) = error {
        attributes.push(KeyValue::new("error.type", code.as_str()));
    }
    let builder = tracer
        .span_builder(name)
        .with_kind(SpanKind::Server)
        .with_start_time(started)
        .with_attributes(attributes);
    match (&server.parent, root_trace) {
        (Some(parent), _) => builder.start_with_context(tracer, parent),
        (None, Some(trace_id)) => with_trace_id(trace_id, || {
            builder.start_with_context(tracer, &Context::new())
        }),
        (None, None) => builder.start_with_context(tracer, &Context::new()),
    }
}

/// The `tools/call` span's name for one of our tools.
const fn server_span_name(tool: ToolName) -> &'static str {
    match tool {
        ToolName::LookupKnowledge => "tools/call lookup_knowledge",
        ToolName::QueryLogs => "tools/call query_logs",
        ToolName::QueryMysql => "tools/call query_mysql",
    }
}

/// The `execute_tool` span's name for one of our tools.
const fn tool_span_name(tool: ToolName) -> &'static str {
    match tool {
        ToolName::LookupKnowledge => "execute_tool lookup_knowledge",
        ToolName::QueryLogs => "execute_tool query_logs",
        ToolName::QueryMysql => "execute_tool query_mysql",
    }
}

/// The phase spans of a boundary run from `started` to `finished`: each
/// phase the call reached, with its measured duration. The boundary reports
/// durations, not instants: preflight starts the run, projection follows
/// execution at once, and the store's create (before execution) and
/// finalization (after projection) share what is left, half each.
fn phases(
    timings: &PhaseTimings,
    started: SystemTime,
    finished: SystemTime,
) -> Vec<(&'static str, SystemTime, SystemTime)> {
    let total = finished.duration_since(started).unwrap_or_default();
    let preflight = timings.preflight.min(total);
    let mut spans = vec![("preflight", started, started + preflight)];
    let execution = timings.execution.unwrap_or_default();
    let projection = timings.projection.unwrap_or_default();
    let measured = preflight + execution + projection;
    let store_half = total.saturating_sub(measured) / 2;
    let mut at = started + preflight + store_half;
    for (name, phase) in [
        ("execution", timings.execution),
        ("projection", timings.projection),
    ] {
        if let Some(phase) = phase {
            let end = (at + phase).min(finished);
            spans.push((name, at, end));
            at = end;
        }
    }
    spans
}

/// A client's tool name for a span: at most [`MAX_TOOL_NAME_BYTES`].
fn bounded(text: &str) -> String {
    let mut end = text.len().min(MAX_TOOL_NAME_BYTES);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

/// The client's trace context from `_meta` (`traceparent`, `tracestate`),
/// when it holds a valid one.
fn parent_context(metas: [Option<&RequestMetaObject>; 2]) -> Option<Context> {
    let mut fields = HashMap::new();
    for key in ["traceparent", "tracestate"] {
        if let Some(text) = metas
            .iter()
            .flatten()
            .find_map(|meta| meta.get(key))
            .and_then(serde_json::Value::as_str)
        {
            fields.insert(key, text.to_owned());
        }
    }
    if !fields.contains_key("traceparent") {
        return None;
    }
    let context = TraceContextPropagator::new().extract(&MetaFields(fields));
    context.span().span_context().is_valid().then_some(context)
}

struct MetaFields(HashMap<&'static str, String>);

impl Extractor for MetaFields {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().copied().collect()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn traceparent_from_meta_is_the_parent() {
        let meta = RequestMetaObject::from(
            json!({"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "tracestate": "k=v"})
                .as_object()
                .unwrap()
                .clone(),
        );
        let context = parent_context([None, Some(&meta)]).unwrap();
        let span = context.span();
        let parent = span.span_context();
        assert_eq!(
            parent.trace_id().to_string(),
            "0af7651916cd43dd8448eb211c80319c"
        );
        assert_eq!(parent.span_id().to_string(), "b7ad6b7169203331");
        assert!(parent.is_remote() && parent.is_sampled());
        assert_eq!(parent.trace_state().get("k"), Some("v"));
        let bad =
            RequestMetaObject::from(json!({"traceparent": "junk"}).as_object().unwrap().clone());
        assert!(parent_context([Some(&bad), None]).is_none());
        assert!(parent_context([None, None]).is_none());
    }

    #[test]
    fn refusals_before_the_record_have_none() {
        assert!(recorded(None));
        assert!(recorded(Some(ErrorCode::ExecutionTimeout)));
        assert!(!recorded(Some(ErrorCode::InvalidInput)));
        assert!(!recorded(Some(ErrorCode::Overloaded)));
    }

    #[test]
    fn phases_keep_their_durations_and_share_the_store_time() {
        use std::time::Duration;
        let ms = Duration::from_millis;
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
        let timings = PhaseTimings {
            preflight: ms(1),
            execution: Some(ms(5)),
            projection: Some(ms(2)),
        };
        // 10 ms in all: 2 ms of store writes, 1 ms before execution.
        let spans = phases(&timings, t0, t0 + ms(10));
        assert_eq!(
            spans,
            [
                ("preflight", t0, t0 + ms(1)),
                ("execution", t0 + ms(2), t0 + ms(7)),
                ("projection", t0 + ms(7), t0 + ms(9)),
            ]
        );
        let refused = PhaseTimings {
            preflight: ms(3),
            execution: None,
            projection: None,
        };
        // Never past the run's end.
        assert_eq!(
            phases(&refused, t0, t0 + ms(2)),
            [("preflight", t0, t0 + ms(2))]
        );
    }

    #[test]
    fn client_tool_names_are_bounded() {
        assert_eq!(bounded("abc"), "abc");
        assert_eq!(bounded(&"é".repeat(100)).len(), 128);
    }
}
