//! The tool boundary: preflight, the canonical record lifecycle, execution,
//! projection, and the two views of every call.
//!
//! [`ToolBoundary::invoke`] reads as the lifecycle: [`preflight`] admits a
//! call (or refuses it with no record), [`call`] creates its record and arms
//! the guard that finalizes it if the caller goes away, [`replay`] reuses a
//! READY result of the same scope where the tool allows it, [`execute`] runs
//! and projects, and [`call`] concludes with the one finalization.

mod call;
mod execute;
mod guard;
mod preflight;
mod replay;

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aci_contracts::{
    ErrorCode, ErrorResult, EvidenceStatus, HarnessControlView, InvocationStatus, ResultCounters,
    ToolCallId,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use serde_json::value::RawValue;
use tokio_util::task::TaskTracker;
use tracing::{Instrument, field};

use crate::limits::InvalidLimit;
use crate::redact::{Redactions, Redactor};
use crate::tool::{DynTool, erase};
use crate::{BoundaryOutcome, Journal};
use crate::{
    Clock, Executor, InvocationStore, Limits, ModelObservation, PhaseTimings, Projector,
    ReadyEvidence, RunContext, ScopeFingerprint, StoreError, SystemClock, ToolEnvelope, ToolSpec,
};

/// Why a boundary could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// Two tools share a name.
    #[error("tool `{0}` is registered twice")]
    DuplicateTool(String),
    /// A tool name is not 1 to 64 ASCII letters, digits, `_` or `-`.
    #[error("tool name `{0}` must be 1 to 64 ASCII letters, digits, `_` or `-`")]
    InvalidToolName(String),
    /// A global limit is zero.
    #[error("limits: {0}")]
    InvalidLimit(InvalidLimit),
    /// A tool's limits (global with its overrides) have a zero.
    #[error("tool `{tool}`: {limit}")]
    InvalidToolLimit {
        /// The tool.
        tool: String,
        /// The limit.
        limit: InvalidLimit,
    },
}

/// Runs every tool call through preflight, one canonical record, execution,
/// projection and finalization, and returns the model's and the harness's
/// views. Cheap to clone; clones share tools and store.
#[derive(Clone)]
pub struct ToolBoundary {
    inner: Arc<Inner>,
}

struct Inner {
    store: Arc<dyn InvocationStore>,
    clock: Arc<dyn Clock>,
    limits: Limits,
    tools: HashMap<String, Arc<dyn DynTool>>,
    redactor: Arc<Redactor>,
    /// Finalizations handed to tasks of their own: abandoned calls and
    /// writes whose answer was lost.
    settlements: TaskTracker,
}

impl fmt::Debug for ToolBoundary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut names: Vec<&String> = self.inner.tools.keys().collect();
        names.sort();
        f.debug_struct("ToolBoundary")
            .field("store", &self.inner.store)
            .field("clock", &self.inner.clock)
            .field("limits", &self.inner.limits)
            .field("tools", &names)
            .field("redactor", &self.inner.redactor)
            .finish()
    }
}

/// Builds a [`ToolBoundary`].
pub struct ToolBoundaryBuilder {
    store: Arc<dyn InvocationStore>,
    clock: Arc<dyn Clock>,
    limits: Limits,
    tools: Vec<Arc<dyn DynTool>>,
    redactor: Arc<Redactor>,
}

impl fmt::Debug for ToolBoundaryBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolBoundaryBuilder")
            .field("limits", &self.limits)
            .field("tools", &self.tools.len())
            .finish_non_exhaustive()
    }
}

impl ToolBoundaryBuilder {
    /// Uses `clock` for timestamps, deadlines and execution contexts
    /// (default: the system clock).
    #[must_use]
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Global limits (default: [`Limits::default`]).
    #[must_use]
    pub const fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// Redacts every text projectors put in the Model Observation with
    /// `redactor` (default: [`Redactor::builtin`], the built-in rules: a
    /// credential never reaches the model unless the configuration allows it).
    #[must_use]
    pub fn redactor(mut self, redactor: Arc<Redactor>) -> Self {
        self.redactor = redactor;
        self
    }

    /// Registers a tool.
    #[must_use]
    pub fn tool<E, P>(mut self, spec: ToolSpec<E, P>) -> Self
    where
        E: Executor,
        E::Request: Serialize + DeserializeOwned,
        P: Projector<Request = E::Request, Raw = E::Raw>,
    {
        self.tools.push(erase(spec));
        self
    }

    /// Builds the boundary.
    ///
    /// # Errors
    /// [`BuildError`] for a duplicate or malformed tool name, or a limit that
    /// is zero (globally or for a tool).
    pub fn build(self) -> Result<ToolBoundary, BuildError> {
        self.limits.validate().map_err(BuildError::InvalidLimit)?;
        let mut tools = HashMap::new();
        for tool in self.tools {
            let name = tool.name().to_owned();
            let valid = !name.is_empty()
                && name.len() <= 64
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
            if !valid {
                return Err(BuildError::InvalidToolName(name));
            }
            if let Err(limit) = self.limits.with(tool.limit_overrides()).validate() {
                return Err(BuildError::InvalidToolLimit { tool: name, limit });
            }
            if tools.insert(name.clone(), tool).is_some() {
                return Err(BuildError::DuplicateTool(name));
            }
        }
        Ok(ToolBoundary {
            inner: Arc::new(Inner {
                store: self.store,
                clock: self.clock,
                limits: self.limits,
                tools,
                redactor: self.redactor,
                settlements: TaskTracker::new(),
            }),
        })
    }
}

/// What is known about a call so far; becomes its control view.
struct Trail<'a> {
    ctx: &'a RunContext,
    tool_call_id: Option<ToolCallId>,
    tool_name: String,
    scope: Value,
    fingerprint: Option<ScopeFingerprint>,
    duplicate_of: Option<ToolCallId>,
    replayed_from: Option<ToolCallId>,
    timings: PhaseTimings,
}

impl<'a> Trail<'a> {
    const fn new(ctx: &'a RunContext, tool_name: String) -> Self {
        Self {
            ctx,
            tool_call_id: None,
            tool_name,
            scope: Value::Null,
            fingerprint: None,
            duplicate_of: None,
            replayed_from: None,
            timings: PhaseTimings {
                preflight: Duration::ZERO,
                execution: None,
                projection: None,
            },
        }
    }

    /// An error, retryable as its code says.
    fn error(self, code: ErrorCode) -> BoundaryOutcome {
        self.failed(code, code.is_transient())
    }

    /// An error; whether it is retryable goes to the control view only (the
    /// model gets the code's constant message).
    fn failed(self, code: ErrorCode, retryable: bool) -> BoundaryOutcome {
        let observation =
            ModelObservation::Error(ErrorResult::new(code, self.tool_call_id.clone()));
        self.outcome(
            observation,
            InvocationStatus::Error,
            EvidenceStatus::Error,
            Some((code, retryable)),
            ResultCounters::default(),
            Redactions::new(),
        )
    }

    fn ready(
        self,
        observation: Box<RawValue>,
        evidence: ReadyEvidence,
        counters: ResultCounters,
        redactions: Redactions,
    ) -> BoundaryOutcome {
        self.outcome(
            ModelObservation::Ready(observation),
            InvocationStatus::Ready,
            evidence.status(),
            None,
            counters,
            redactions,
        )
    }

    fn outcome(
        self,
        observation: ModelObservation,
        status: InvocationStatus,
        evidence_status: EvidenceStatus,
        error: Option<(ErrorCode, bool)>,
        counters: ResultCounters,
        redactions: Redactions,
    ) -> BoundaryOutcome {
        BoundaryOutcome {
            observation,
            control: HarnessControlView {
                tool_call_id: self.tool_call_id,
                run_id: self.ctx.run_id.clone(),
                tool_name: self.tool_name,
                status,
                evidence_status,
                error_code: error.map(|(code, _)| code),
                retryable: error.map(|(_, retryable)| retryable),
                returned_count: counters.returned_count,
                match_count: counters.match_count,
                truncated: counters.truncated,
                relevance_level: counters.relevance_level,
                retrieval_legs: counters.retrieval_legs,
                retrieval_fallback: counters.retrieval_fallback,
                scope: self.scope,
                scope_fingerprint: self.fingerprint.map(|f| f.to_hex()),
                duplicate_of: self.duplicate_of,
                replayed_from: self.replayed_from,
                redactions: redactions.into_map(),
            },
            timings: self.timings,
        }
    }
}

impl ToolBoundary {
    /// Starts building a boundary over `store`.
    #[must_use]
    pub fn builder(store: Arc<dyn InvocationStore>) -> ToolBoundaryBuilder {
        ToolBoundaryBuilder {
            store,
            clock: Arc::new(SystemClock),
            limits: Limits::default(),
            tools: Vec::new(),
            redactor: Redactor::builtin(),
        }
    }

    /// The redactor projectors put every observation text through.
    #[must_use]
    pub fn redactor(&self) -> &Arc<Redactor> {
        &self.inner.redactor
    }

    /// The store.
    #[must_use]
    pub fn store(&self) -> &Arc<dyn InvocationStore> {
        &self.inner.store
    }

    /// The clock.
    #[must_use]
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.inner.clock
    }

    /// The global limits.
    #[must_use]
    pub fn limits(&self) -> &Limits {
        &self.inner.limits
    }

    /// The limits `tool_name` runs under (global limits with its overrides).
    #[must_use]
    pub fn limits_for(&self, tool_name: &str) -> Option<Limits> {
        self.inner
            .tools
            .get(tool_name)
            .map(|t| self.inner.limits.with(t.limit_overrides()))
    }

    /// The longest execution timeout of any registered tool (the global
    /// timeout when no tool is registered).
    #[must_use]
    pub fn longest_timeout(&self) -> Duration {
        self.inner
            .tools
            .values()
            .map(|t| self.inner.limits.with(t.limit_overrides()).timeout)
            .max()
            .unwrap_or(self.inner.limits.timeout)
    }

    /// Names of the registered tools, sorted.
    #[must_use]
    pub fn tool_names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.inner.tools.keys().map(String::as_str).collect();
        names.sort_unstable();
        names
    }

    /// The journal over this boundary's store.
    #[must_use]
    pub fn journal(&self) -> Journal {
        Journal::new(Arc::clone(&self.inner.store), Arc::clone(&self.inner.clock))
    }

    pub(crate) fn tool(&self, name: &str) -> Option<&Arc<dyn DynTool>> {
        self.inner.tools.get(name)
    }

    /// Waits until every finalization this boundary handed to a task of its
    /// own has been answered by the store (or given up): those of calls whose
    /// `invoke` future was dropped after their record was created, and those
    /// settling a write whose answer was lost; and, at the same time, until
    /// every tool's [`Executor::drain`](crate::Executor::drain) returned (the
    /// cleanup of the dropped calls' work, such as killing their statements).
    ///
    /// A server calls it after it stopped taking calls and dropped the ones
    /// it abandons, before it exits. While the store is unreachable the tasks
    /// keep retrying (up to the record TTL): bound the wait with a timeout.
    pub async fn drain_abandoned(&self) {
        let tracker = &self.inner.settlements;
        tracker.close();
        let tools = futures::future::join_all(self.inner.tools.values().map(|tool| tool.drain()));
        tokio::join!(tracker.wait(), tools);
        tracker.reopen();
    }

    /// Finalizations still running on tasks of their own (see
    /// [`drain_abandoned`](Self::drain_abandoned)).
    #[must_use]
    pub fn pending_settlements(&self) -> usize {
        self.inner.settlements.len()
    }

    /// Runs one tool call through the boundary.
    ///
    /// Never panics and never returns raw data. Preflight failures return an
    /// error result with no record and no execution; later failures finalize
    /// the call's record as `ERROR`. If this future is dropped after the
    /// record was created, the record is finalized `ERROR /
    /// EXECUTION_ABANDONED` on a task of its own (see
    /// [`drain_abandoned`](Self::drain_abandoned)). See `docs/lifecycle.md`
    /// for the order of checks and which code is used when.
    pub async fn invoke(&self, ctx: &RunContext, envelope: ToolEnvelope) -> BoundaryOutcome {
        let started = Instant::now();
        let span = tracing::info_span!(
            "aci.invoke",
            run_id = %ctx.run_id,
            tool_call_id = field::Empty,
            tool_name = field::Empty,
            status = field::Empty,
            evidence_status = field::Empty,
            error_code = field::Empty,
            replayed = false,
            execute_ms = field::Empty,
            total_ms = field::Empty,
        );
        let outcome = self
            .run(ctx, envelope, &span)
            .instrument(span.clone())
            .await;
        let control = &outcome.control;
        span.record("status", control.status.as_str());
        span.record("evidence_status", control.evidence_status.as_str());
        if let Some(code) = control.error_code {
            span.record("error_code", code.as_str());
        }
        span.record("total_ms", millis(started.elapsed()));
        span.in_scope(|| tracing::info!("tool call finished"));
        outcome
    }

    /// The lifecycle of one call.
    async fn run(
        &self,
        ctx: &RunContext,
        mut envelope: ToolEnvelope,
        span: &tracing::Span,
    ) -> BoundaryOutcome {
        let mut trail = Trail::new(ctx, std::mem::take(&mut envelope.tool_name));
        let preflight_started = Instant::now();
        let admitted = self.preflight(ctx, envelope, &mut trail, span);
        trail.timings.preflight = preflight_started.elapsed();
        let admitted = match admitted {
            Ok(admitted) => admitted,
            Err(code) => {
                self.note_refusal(&trail, code).await;
                return trail.error(code);
            }
        };
        let call = match self.create(ctx, admitted, &mut trail).await {
            Ok(call) => call,
            Err(code) => {
                self.note_refusal(&trail, code).await;
                return trail.error(code);
            }
        };
        let decision = match self.replay(ctx, &call).await {
            Some(decision) => decision,
            None => {
                self.execute_and_project(ctx, &call, &mut trail.timings, span)
                    .await
            }
        };
        self.conclude(trail, call, decision, span).await
    }
}

impl ToolBoundary {
    /// Notes a call refused before it had a record in its run, for people
    /// reviewing the run: not a refusal that says the caller may not write
    /// into this run (another run, not authorized or not the owner's), nor
    /// one the store could not take; the store drops it for a run another
    /// principal owns. Best effort: a failure is logged, and the answer is
    /// the same.
    async fn note_refusal(&self, trail: &Trail<'_>, code: ErrorCode) {
        if matches!(
            code,
            ErrorCode::RunMismatch | ErrorCode::Unauthorized | ErrorCode::StoreUnavailable
        ) {
            return;
        }
        let ctx = trail.ctx;
        let refusal = crate::Refusal {
            tool_call_id: trail.tool_call_id.clone(),
            tool_name: self
                .inner
                .tools
                .contains_key(&trail.tool_name)
                .then(|| trail.tool_name.clone()),
            error_code: code,
            at: self.inner.clock.now(),
        };
        if let Err(error) = self
            .inner
            .store
            .note_refusal(
                &ctx.run_id,
                ctx.principal.as_deref(),
                &refusal,
                self.inner.limits.record_ttl,
            )
            .await
        {
            log_store_error("note_refusal", &error);
        }
    }
}

fn log_store_error(operation: &'static str, error: &StoreError) {
    tracing::warn!(operation, code = error.code(), "store operation failed");
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
