//! What the harness and the agent framework hand the boundary for one call.

use std::collections::BTreeMap;
use std::time::Duration;

use aci_contracts::{ErrorResult, EvidenceStatus, HarnessControlView, RunId, Timestamp};
use serde::{Serialize, Serializer};
use serde_json::Value;
use serde_json::value::RawValue;

/// What the harness's policy decided for a call: trusted data from the
/// harness, never read from the framework's [`ToolEnvelope`].
///
/// It has no default: every caller of the boundary states it, so no call is
/// authorized because someone forgot to say otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CallPolicy {
    /// Whether the harness authorized the call; `false` refuses it with
    /// `UNAUTHORIZED`.
    pub authorized: bool,
    /// Whether the harness classifies the call as read-only; `false` refuses
    /// it with `NOT_READ_ONLY`. The boundary also refuses any tool not
    /// declared read-only.
    pub read_only: bool,
}

impl CallPolicy {
    /// Authorized and read-only: a harness whose every call may run a
    /// read-only tool (the `aci` command, whose callers are authenticated
    /// before they reach the boundary).
    pub const AUTHORIZED_READ_ONLY: Self = Self::new(true, true);

    /// Refused: the harness did not authorize the call.
    pub const UNAUTHORIZED: Self = Self::new(false, true);

    /// A policy as stated.
    #[must_use]
    pub const fn new(authorized: bool, read_only: bool) -> Self {
        Self {
            authorized,
            read_only,
        }
    }
}

/// The harness's view of the run a call belongs to, and its policy for the
/// call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunContext {
    /// The run's id.
    pub run_id: RunId,
    /// The harness's policy for the call (authorization, read-only).
    pub policy: CallPolicy,
    /// Whether the run still accepts tool calls.
    pub active: bool,
    /// When the run must stop, as the harness knows it; calls at or after it
    /// are refused and running calls are cut off at it.
    pub deadline: Option<Timestamp>,
    /// How long the run may last from its start: its first call, as the
    /// store records it. The store holds the resulting deadline, so it holds
    /// for every process and replica that serves the run; later calls'
    /// values do not move it.
    pub max_duration: Option<Duration>,
    /// The authenticated principal making the call. The run's first call
    /// makes it the run's owner (in the store); calls of other principals,
    /// or without one, are then refused with `UNAUTHORIZED`.
    pub principal: Option<String>,
    /// Most records the run may create, all tools together.
    pub run_budget: Option<u32>,
    /// Most records the run may create per tool name.
    pub tool_budgets: BTreeMap<String, u32>,
}

impl RunContext {
    /// An active run with no deadline and no budgets, its calls under
    /// `policy`.
    #[must_use]
    pub const fn new(run_id: RunId, policy: CallPolicy) -> Self {
        Self {
            run_id,
            policy,
            active: true,
            deadline: None,
            max_duration: None,
            principal: None,
            run_budget: None,
            tool_budgets: BTreeMap::new(),
        }
    }

    /// Sets the policy for the next calls.
    #[must_use]
    pub const fn with_policy(mut self, policy: CallPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// Sets the deadline.
    #[must_use]
    pub const fn with_deadline(mut self, deadline: Timestamp) -> Self {
        self.deadline = Some(deadline);
        self
    }

    /// Sets the run's longest duration from its start (store-held deadline).
    #[must_use]
    pub const fn with_max_duration(mut self, max_duration: Duration) -> Self {
        self.max_duration = Some(max_duration);
        self
    }

    /// Sets the principal making the calls.
    #[must_use]
    pub fn with_principal(mut self, principal: impl Into<String>) -> Self {
        self.principal = Some(principal.into());
        self
    }

    /// Sets the run budget.
    #[must_use]
    pub const fn with_run_budget(mut self, budget: u32) -> Self {
        self.run_budget = Some(budget);
        self
    }

    /// Sets the budget of one tool.
    #[must_use]
    pub fn with_tool_budget(mut self, tool_name: impl Into<String>, budget: u32) -> Self {
        self.tool_budgets.insert(tool_name.into(), budget);
        self
    }

    /// Marks the run inactive.
    #[must_use]
    pub const fn inactive(mut self) -> Self {
        self.active = false;
        self
    }
}

/// One tool call exactly as the agent framework produced it.
///
/// Nothing here is trusted: the boundary validates every field. What the
/// harness decides about the call (authorization, read-only) is its
/// [`CallPolicy`], in the [`RunContext`], never here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolEnvelope {
    /// The framework's tool call id, as given (validated by the boundary, never
    /// replaced).
    pub tool_call_id: String,
    /// The run the framework says the call belongs to.
    pub run_id: String,
    /// The tool the model asked for.
    pub tool_name: String,
    /// The arguments as the framework's JSON text.
    pub arguments: String,
}

impl ToolEnvelope {
    /// A call as the framework made it.
    pub fn new(
        tool_call_id: impl Into<String>,
        run_id: impl Into<String>,
        tool_name: impl Into<String>,
        arguments: impl Into<String>,
    ) -> Self {
        Self {
            tool_call_id: tool_call_id.into(),
            run_id: run_id.into(),
            tool_name: tool_name.into(),
            arguments: arguments.into(),
        }
    }
}

/// All the model gets of a call.
#[derive(Debug, Clone)]
pub enum ModelObservation {
    /// The tool's observation of a READY result (`EVIDENCE_FOUND` or
    /// `NO_EVIDENCE`), serialized once, fields in the contract's order.
    Ready(Box<RawValue>),
    /// The error result.
    Error(ErrorResult),
}

impl ModelObservation {
    /// The observation as JSON.
    #[must_use]
    pub fn to_json(&self) -> Value {
        match self {
            Self::Ready(raw) => serde_json::from_str(raw.get()).unwrap_or(Value::Null),
            Self::Error(error) => serde_json::to_value(error).unwrap_or(Value::Null),
        }
    }

    /// The observation's JSON text, exactly as the model should get it.
    #[must_use]
    pub fn to_json_string(&self) -> String {
        match self {
            Self::Ready(raw) => raw.get().to_owned(),
            Self::Error(error) => serde_json::to_string(error).unwrap_or_default(),
        }
    }

    /// Whether the call failed.
    #[must_use]
    pub const fn is_error(&self) -> bool {
        matches!(self, Self::Error(_))
    }

    /// The observation's evidence status.
    #[must_use]
    pub fn evidence_status(&self) -> EvidenceStatus {
        match self {
            Self::Ready(raw) => {
                #[derive(serde::Deserialize)]
                struct Status {
                    evidence_status: EvidenceStatus,
                }
                serde_json::from_str::<Status>(raw.get())
                    .map_or(EvidenceStatus::Error, |s| s.evidence_status)
            }
            Self::Error(_) => EvidenceStatus::Error,
        }
    }
}

impl Serialize for ModelObservation {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Ready(raw) => raw.serialize(serializer),
            Self::Error(error) => error.serialize(serializer),
        }
    }
}

/// The result of one [`invoke`](crate::ToolBoundary::invoke): the model's view
/// and the harness's view of the same call.
#[derive(Debug, Clone, Serialize)]
pub struct BoundaryOutcome {
    /// The only thing to hand to the model.
    pub observation: ModelObservation,
    /// For the harness only.
    pub control: HarnessControlView,
    /// Where the boundary spent the call's time (for traces and metrics;
    /// not part of either view, so not serialized).
    #[serde(skip)]
    pub timings: crate::PhaseTimings,
}
