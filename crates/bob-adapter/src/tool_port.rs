//! [`BoundaryToolPort`]: bob-core's `ToolPort` over a [`ToolBoundary`].

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use aci_contracts::{
    ErrorCode, ErrorResult, EvidenceStatus, HarnessControlView, InvocationStatus, ToolCallId,
    ToolName,
};
use bob_core::types::ToolKind;
use bob_core::{SessionId, ToolCall, ToolDescriptor, ToolError, ToolPort, ToolResult};
use invocation_core::{
    BoundaryOutcome, CallPolicy, InvocationKey, NotCitable, RecordFields, RunContext, ToolBoundary,
    ToolEnvelope,
};
use serde_json::Value;

use crate::{Error, run_id_for_session};

/// A callback that sees the harness control view of every call.
pub type ControlObserver = Arc<dyn Fn(&HarnessControlView) + Send + Sync>;

/// One call through [`BoundaryToolPort::call`]: what bob gets and what the
/// harness gets.
#[derive(Debug, Clone)]
pub struct BobCallOutcome {
    /// What `call_tool` returns to bob: the Model Observation as `output`,
    /// `is_error` exactly when its evidence status is `ERROR`.
    pub result: ToolResult,
    /// The boundary's Harness Control View of this call (never for the model).
    pub control: HarnessControlView,
    /// `true` when the call reused a `call_id` of an earlier call with the same
    /// tool and scope in this session: nothing ran, `result` is the earlier
    /// call's recorded result, and `control` says `DUPLICATE_TOOL_CALL`.
    pub recalled: bool,
}

/// bob-core's [`ToolPort`] (and so `ToolCatalogPort` and `ToolExecutorPort`)
/// over a [`ToolBoundary`], for one bob session.
///
/// # Behavior
/// - `list_tools`: one descriptor per registered tool, sorted by name: the
///   frozen name, description and input schema for the three contract tools,
///   the descriptor given with [`describe`](Self::describe) for any other; the
///   descriptor's `timeout_ms` is the tool's boundary timeout.
/// - `call_tool`: `call.call_id` is the boundary's exact `tool_call_id`, never
///   invented or replaced; a call without one (or with an invalid one) is an
///   error result `INVALID_TOOL_CALL_ID`, and nothing runs. The session is the
///   run ([`run_id_for_session`]). Arguments are sent as bob's JSON text.
/// - The result's `output` is the Model Observation and nothing else; `is_error`
///   is `true` exactly when its evidence status is `ERROR` (`NO_EVIDENCE` is
///   not an error). `name` is the requested tool name.
/// - A `call_id` already used in the session executes nothing: when the earlier
///   call had the same tool and scope and is READY, its recorded observation is
///   returned again (a retried step after a restart gets the same answer);
///   when it failed, its error result; when it is still running, the port waits
///   for it (up to the tool's timeout); with another tool or scope, the error
///   result `DUPLICATE_TOOL_CALL`.
/// - `call_tool` never returns `Err`: every failure is an error result, so bob
///   never shows the model a driver message.
/// - The harness control view: [`call`](Self::call) returns it with the result,
///   and [`on_control`](Self::on_control) registers a callback that sees it for
///   every call, `call_tool`'s included.
#[derive(Clone)]
pub struct BoundaryToolPort {
    boundary: ToolBoundary,
    run: RunContext,
    descriptors: BTreeMap<String, ToolDescriptor>,
    observer: Option<ControlObserver>,
}

impl fmt::Debug for BoundaryToolPort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BoundaryToolPort")
            .field("boundary", &self.boundary)
            .field("run", &self.run)
            .field("descriptors", &self.descriptors.keys().collect::<Vec<_>>())
            .field("observer", &self.observer.is_some())
            .finish()
    }
}

const POLL_START: Duration = Duration::from_millis(2);
const POLL_MAX: Duration = Duration::from_millis(50);

impl BoundaryToolPort {
    /// The port for bob session `session_id`: an active run with that id, no
    /// deadline and no budgets, its calls under the harness's `policy`
    /// (bob's own policy layer decides before a call reaches the port; the
    /// port states what it decided, it never assumes an authorized call).
    ///
    /// # Errors
    /// [`Error::InvalidSession`] when the session id is not a valid run id.
    pub fn new(
        boundary: ToolBoundary,
        session_id: &SessionId,
        policy: CallPolicy,
    ) -> Result<Self, Error> {
        let run = RunContext::new(run_id_for_session(session_id)?, policy);
        Ok(Self::with_run(boundary, run))
    }

    /// The port for an explicit run context (budgets, deadline, activity). The
    /// run's id is the session's ([`run_id_for_session`]).
    #[must_use]
    pub fn with_run(boundary: ToolBoundary, run: RunContext) -> Self {
        Self {
            boundary,
            run,
            descriptors: BTreeMap::new(),
            observer: None,
        }
    }

    /// The descriptor `list_tools` gives for a registered tool that is not one
    /// of the frozen contract tools (its `id` names the tool).
    #[must_use]
    pub fn describe(mut self, descriptor: ToolDescriptor) -> Self {
        self.descriptors.insert(descriptor.id.clone(), descriptor);
        self
    }

    /// Calls `observer` with the harness control view of every call.
    #[must_use]
    pub fn on_control(
        mut self,
        observer: impl Fn(&HarnessControlView) + Send + Sync + 'static,
    ) -> Self {
        self.observer = Some(Arc::new(observer));
        self
    }

    /// The run this port's calls belong to.
    #[must_use]
    pub const fn run(&self) -> &RunContext {
        &self.run
    }

    /// The boundary.
    #[must_use]
    pub const fn boundary(&self) -> &ToolBoundary {
        &self.boundary
    }

    /// The registered tools' descriptors, sorted by name.
    ///
    /// # Errors
    /// [`Error::MissingDescriptor`] when a registered tool is neither a frozen
    /// contract tool nor [described](Self::describe).
    pub fn descriptors(&self) -> Result<Vec<ToolDescriptor>, Error> {
        self.boundary
            .tool_names()
            .into_iter()
            .map(|name| {
                let descriptor = match ToolName::parse(name) {
                    Some(tool) => {
                        let definition = tool.definition();
                        let mut schema = definition.input_schema;
                        if let Some(object) = schema.as_object_mut() {
                            object.remove("$schema");
                        }
                        ToolDescriptor::new(name, tool.description()).with_input_schema(schema)
                    }
                    None => self
                        .descriptors
                        .get(name)
                        .cloned()
                        .ok_or(Error::MissingDescriptor)?,
                };
                let descriptor = descriptor.with_kind(ToolKind::Function);
                Ok(match self.boundary.limits_for(name) {
                    Some(limits) => descriptor.with_timeout_ms(
                        u64::try_from(limits.timeout.as_millis()).unwrap_or(u64::MAX),
                    ),
                    None => descriptor,
                })
            })
            .collect()
    }

    /// Runs one bob tool call through the boundary and returns bob's result
    /// with the harness control view.
    pub async fn call(&self, call: ToolCall) -> BobCallOutcome {
        let ToolCall {
            call_id,
            name,
            arguments,
        } = call;
        // A missing id goes to the boundary as an empty one: preflight refuses
        // it with INVALID_TOOL_CALL_ID before anything exists or runs.
        let envelope = ToolEnvelope::new(
            call_id.unwrap_or_default(),
            self.run.run_id.as_str(),
            name.as_str(),
            arguments.to_string(),
        );
        let outcome = self.boundary.invoke(&self.run, envelope).await;
        let mut recalled = false;
        let observation = if outcome.control.error_code == Some(ErrorCode::DuplicateToolCall) {
            match self.earlier_result(&outcome).await {
                Some(earlier) => {
                    recalled = true;
                    earlier
                }
                None => outcome.observation.to_json(),
            }
        } else {
            outcome.observation.to_json()
        };
        let is_error = evidence_status_of(&observation) == EvidenceStatus::Error;
        if let Some(observer) = &self.observer {
            observer(&outcome.control);
        }
        BobCallOutcome {
            result: ToolResult {
                name,
                output: observation,
                is_error,
            },
            control: outcome.control,
            recalled,
        }
    }

    /// For a DUPLICATE_TOOL_CALL: the earlier call's result when it was the
    /// same tool and scope (waiting while it runs), else `None`.
    async fn earlier_result(&self, outcome: &BoundaryOutcome) -> Option<Value> {
        let control = &outcome.control;
        let id: ToolCallId = control.tool_call_id.clone()?;
        let fingerprint = control.scope_fingerprint.as_deref()?;
        let key = InvocationKey::new(self.run.run_id.clone(), id.clone());
        let wait = self
            .boundary
            .limits_for(&control.tool_name)
            .map_or(Duration::ZERO, |l| l.timeout);
        let started = tokio::time::Instant::now();
        let mut delay = POLL_START;
        loop {
            let record = self
                .boundary
                .store()
                .get(&key, RecordFields::Metadata)
                .await
                .ok()??;
            if record.tool_name != control.tool_name
                || record.scope_fingerprint.to_hex() != fingerprint
            {
                return None;
            }
            match record.status {
                InvocationStatus::Projecting if started.elapsed() < wait => {
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(POLL_MAX);
                }
                InvocationStatus::Projecting => {
                    return error_json(ErrorCode::ExecutionTimeout, &id);
                }
                InvocationStatus::Ready => {
                    return match self.boundary.recall(&self.run.run_id, id.as_str()).await {
                        Ok(observation) => Some(observation),
                        Err(NotCitable::Failed(code)) => error_json(code, &id),
                        Err(_) => None,
                    };
                }
                InvocationStatus::Error => {
                    return error_json(
                        record.error_code.unwrap_or(ErrorCode::ExecutionFailed),
                        &id,
                    );
                }
            }
        }
    }
}

fn error_json(code: ErrorCode, id: &ToolCallId) -> Option<Value> {
    serde_json::to_value(ErrorResult::new(code, Some(id.clone()))).ok()
}

/// The evidence status an observation declares; `ERROR` when it has none.
fn evidence_status_of(observation: &Value) -> EvidenceStatus {
    observation
        .get("evidence_status")
        .cloned()
        .and_then(|status| serde_json::from_value(status).ok())
        .unwrap_or(EvidenceStatus::Error)
}

#[async_trait::async_trait]
impl ToolPort for BoundaryToolPort {
    async fn list_tools(&self) -> Result<Vec<ToolDescriptor>, ToolError> {
        self.descriptors()
            .map_err(|error| ToolError::Execution(error.to_string()))
    }

    async fn call_tool(&self, call: ToolCall) -> Result<ToolResult, ToolError> {
        Ok(self.call(call).await.result)
    }
}
