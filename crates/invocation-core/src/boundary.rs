//! The tool boundary: preflight, the canonical record lifecycle, execution,
//! projection, and the two views of every call.

use std::collections::HashMap;
use std::fmt;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aci_contracts::{
    ErrorCode, ErrorResult, EvidenceStatus, HarnessControlView, InvocationStatus, ResultCounters,
    ToolCallId,
};
use futures::FutureExt;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use serde_json::value::RawValue;
use tracing::{Instrument, field};

use crate::tool::{DynTool, ErasedResult, PreparedCall, erase};
use crate::{BoundaryOutcome, Journal};
use crate::{
    Budgets, Clock, Created, ExecutionContext, Executor, Finalization, InvocationKey,
    InvocationStore, Limits, ModelObservation, NewInvocation, Projector, ReadyEvidence,
    RecordFields, ReplayPolicy, RunContext, SameScope, ScopeFingerprint, StoreError, SystemClock,
    ToolEnvelope, ToolSpec, clock, fingerprint::canonical_json,
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
            .finish()
    }
}

/// Builds a [`ToolBoundary`].
pub struct ToolBoundaryBuilder {
    store: Arc<dyn InvocationStore>,
    clock: Arc<dyn Clock>,
    limits: Limits,
    tools: Vec<Arc<dyn DynTool>>,
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
    /// [`BuildError`] for a duplicate or malformed tool name.
    pub fn build(self) -> Result<ToolBoundary, BuildError> {
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
}

impl Trail<'_> {
    fn error(self, code: ErrorCode) -> BoundaryOutcome {
        let observation =
            ModelObservation::Error(ErrorResult::new(code, self.tool_call_id.clone()));
        self.outcome(
            observation,
            InvocationStatus::Error,
            EvidenceStatus::Error,
            Some(code),
            ResultCounters::default(),
        )
    }

    fn ready(
        self,
        observation: Box<RawValue>,
        evidence: ReadyEvidence,
        counters: ResultCounters,
    ) -> BoundaryOutcome {
        self.outcome(
            ModelObservation::Ready(observation),
            InvocationStatus::Ready,
            evidence.status(),
            None,
            counters,
        )
    }

    fn outcome(
        self,
        observation: ModelObservation,
        status: InvocationStatus,
        evidence_status: EvidenceStatus,
        error_code: Option<ErrorCode>,
        counters: ResultCounters,
    ) -> BoundaryOutcome {
        BoundaryOutcome {
            observation,
            control: HarnessControlView {
                tool_call_id: self.tool_call_id,
                run_id: self.ctx.run_id.clone(),
                tool_name: self.tool_name,
                status,
                evidence_status,
                error_code,
                returned_count: counters.returned_count,
                match_count: counters.match_count,
                truncated: counters.truncated,
                relevance_level: counters.relevance_level,
                scope: self.scope,
                scope_fingerprint: self.fingerprint.map(|f| f.to_hex()),
                duplicate_of: self.duplicate_of,
                replayed_from: self.replayed_from,
            },
        }
    }
}

/// The finished agent result of a call, checked and serialized once.
struct Checked {
    evidence: ReadyEvidence,
    json: String,
    observation: Box<RawValue>,
    counters: ResultCounters,
}

/// A failure after the record exists: its code and whatever raw data to keep.
struct Failure {
    code: ErrorCode,
    raw_json: Option<String>,
}

impl Failure {
    const fn bare(code: ErrorCode) -> Self {
        Self {
            code,
            raw_json: None,
        }
    }
}

const POLL_START: Duration = Duration::from_millis(2);
const POLL_MAX: Duration = Duration::from_millis(50);

impl ToolBoundary {
    /// Starts building a boundary over `store`.
    #[must_use]
    pub fn builder(store: Arc<dyn InvocationStore>) -> ToolBoundaryBuilder {
        ToolBoundaryBuilder {
            store,
            clock: Arc::new(SystemClock),
            limits: Limits::default(),
            tools: Vec::new(),
        }
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

    /// Runs one tool call through the boundary.
    ///
    /// Never panics and never returns raw data. Preflight failures return an
    /// error result with no record and no execution; later failures finalize
    /// the call's record as `ERROR`. See `docs/lifecycle.md` for the order of
    /// checks and which code is used when.
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

    async fn run(
        &self,
        ctx: &RunContext,
        envelope: ToolEnvelope,
        span: &tracing::Span,
    ) -> BoundaryOutcome {
        let ToolEnvelope {
            tool_call_id,
            run_id,
            tool_name,
            arguments,
            authorized,
            read_only,
        } = envelope;
        let mut trail = Trail {
            ctx,
            tool_call_id: None,
            tool_name,
            scope: Value::Null,
            fingerprint: None,
            duplicate_of: None,
            replayed_from: None,
        };

        // Preflight, in the documented order. No record exists yet.
        let Ok(id) = ToolCallId::new(tool_call_id) else {
            return trail.error(ErrorCode::InvalidToolCallId);
        };
        span.record("tool_call_id", field::display(&id));
        trail.tool_call_id = Some(id.clone());
        if run_id.as_bytes() != ctx.run_id.as_str().as_bytes() {
            return trail.error(ErrorCode::RunMismatch);
        }
        if !ctx.active {
            return trail.error(ErrorCode::RunInactive);
        }
        let now = self.inner.clock.now();
        if ctx.deadline.is_some_and(|deadline| now >= deadline) {
            return trail.error(ErrorCode::RunDeadlineExceeded);
        }
        let Some(tool) = self.inner.tools.get(&trail.tool_name).cloned() else {
            return trail.error(ErrorCode::UnknownTool);
        };
        span.record("tool_name", tool.name());
        if !authorized {
            return trail.error(ErrorCode::Unauthorized);
        }
        if !read_only || !tool.read_only() {
            return trail.error(ErrorCode::NotReadOnly);
        }
        let Some(prepared) = prepare(&tool, &arguments) else {
            return trail.error(ErrorCode::InvalidInput);
        };
        let limits = self.inner.limits.with(tool.limit_overrides());
        if arguments.len() > limits.max_request_bytes {
            return trail.error(ErrorCode::RequestTooLarge);
        }
        let scope_json = canonical_json(prepared.scope());
        let fingerprint = ScopeFingerprint::of_canonical(tool.name(), &scope_json);
        trail.scope = prepared.scope().clone();
        trail.fingerprint = Some(fingerprint);

        // The one canonical record, created atomically with duplicate and budget checks.
        let key = InvocationKey::new(ctx.run_id.clone(), id.clone());
        let replay = tool.replay() == ReplayPolicy::SameScope;
        let new = NewInvocation {
            key: key.clone(),
            tool_name: tool.name().to_owned(),
            request_json: arguments,
            scope_json,
            scope_fingerprint: fingerprint,
            created_at: now,
            ttl: limits.record_ttl,
            budgets: Budgets {
                run: ctx.run_budget,
                tool: ctx.tool_budgets.get(tool.name()).copied(),
            },
            claim_scope: replay,
        };
        let request_bytes = new.request_json.len();
        let created = match self.inner.store.create(new).await {
            Ok(created) => created,
            Err(error) => {
                log_store_error("create", &error);
                return trail.error(error.error_code());
            }
        };
        let Created {
            duplicate_of,
            same_scope,
        } = created;
        trail.duplicate_of = duplicate_of;

        let deadline_left = ctx
            .deadline
            .map(|d| clock::between(self.inner.clock.now(), d));
        let timeout = deadline_left.map_or(limits.timeout, |left| left.min(limits.timeout));

        if replay {
            let source = match same_scope {
                Some(SameScope::Ready(source)) => Some(source),
                Some(SameScope::InFlight(leader)) => {
                    match self.wait_for(ctx, &leader, timeout).await {
                        Waited::Ready => Some(leader),
                        Waited::Failed(code) => {
                            return self.fail(trail, &key, Failure::bare(code)).await;
                        }
                        Waited::Gone => None,
                    }
                }
                None => None,
            };
            if let Some(source) = source {
                match self
                    .replay_from(&tool, ctx, &source, &id, &limits, request_bytes)
                    .await
                {
                    Ok(Some((checked, raw_json))) => {
                        span.record("replayed", true);
                        trail.replayed_from = Some(source.clone());
                        return self
                            .finish(trail, &key, checked, raw_json, Some(source))
                            .await;
                    }
                    Ok(None) => {}
                    Err(failure) => return self.fail(trail, &key, failure).await,
                }
            }
        }

        // Execute, bounded by the tool timeout and the run deadline.
        let context = ExecutionContext {
            run_id: ctx.run_id.clone(),
            tool_call_id: id.clone(),
            now: self.inner.clock.now(),
            deadline: ctx.deadline,
        };
        let execute_started = Instant::now();
        let executed = tokio::time::timeout(
            timeout,
            AssertUnwindSafe(prepared.execute(&context)).catch_unwind(),
        )
        .await;
        span.record("execute_ms", millis(execute_started.elapsed()));
        let raw = match executed {
            Err(_elapsed) => {
                return self
                    .fail(trail, &key, Failure::bare(ErrorCode::ExecutionTimeout))
                    .await;
            }
            Ok(Err(_panic)) => {
                tracing::warn!("executor panicked");
                return self
                    .fail(trail, &key, Failure::bare(ErrorCode::ExecutionFailed))
                    .await;
            }
            Ok(Ok(Err(error))) => {
                tracing::warn!(kind = ?error.kind(), "executor failed");
                return self
                    .fail(trail, &key, Failure::bare(error.error_code()))
                    .await;
            }
            Ok(Ok(Ok(raw))) => raw,
        };

        // Serialize raw once; oversized raw is neither stored nor projected.
        let Ok(raw_json) = raw.to_json() else {
            return self
                .fail(trail, &key, Failure::bare(ErrorCode::SerializationFailed))
                .await;
        };
        if raw_json.len() > limits.max_raw_bytes {
            drop(raw_json);
            return self
                .fail(trail, &key, Failure::bare(ErrorCode::ResultTooLarge))
                .await;
        }

        let projected = std::panic::catch_unwind(AssertUnwindSafe(|| raw.project(&id)));
        drop(raw);
        let result = match projected {
            Ok(Ok(result)) => result,
            Ok(Err(_)) | Err(_) => {
                tracing::warn!("projector failed");
                let failure = keep_raw(
                    ErrorCode::ProjectionFailed,
                    raw_json,
                    request_bytes,
                    &limits,
                );
                return self.fail(trail, &key, failure).await;
            }
        };
        let checked =
            match check_result(result.as_ref(), &id, request_bytes, raw_json.len(), &limits) {
                Ok(checked) => checked,
                Err(code) => {
                    let failure = keep_raw(code, raw_json, request_bytes, &limits);
                    return self.fail(trail, &key, failure).await;
                }
            };
        self.finish(trail, &key, checked, raw_json, None).await
    }

    /// Finalizes READY; the agent gets the result only if that succeeded.
    async fn finish(
        &self,
        trail: Trail<'_>,
        key: &InvocationKey,
        checked: Checked,
        raw_json: String,
        replayed_from: Option<ToolCallId>,
    ) -> BoundaryOutcome {
        let Checked {
            evidence,
            json,
            observation,
            counters,
        } = checked;
        let finalization = Finalization::Ready {
            evidence,
            raw_json,
            agent_result_json: json,
            replayed_from,
            finished_at: self.inner.clock.now(),
        };
        match self.inner.store.finalize(key, finalization).await {
            Ok(()) => trail.ready(observation, evidence, counters),
            Err(error) => {
                log_store_error("finalize", &error);
                trail.error(error.error_code())
            }
        }
    }

    /// Finalizes ERROR with `failure` and returns the error result.
    async fn fail(
        &self,
        trail: Trail<'_>,
        key: &InvocationKey,
        failure: Failure,
    ) -> BoundaryOutcome {
        let finalization = Finalization::Error {
            error_code: failure.code,
            raw_json: failure.raw_json,
            finished_at: self.inner.clock.now(),
        };
        if let Err(error) = self.inner.store.finalize(key, finalization).await {
            // The call failed either way; the agent gets the original code.
            log_store_error("finalize error", &error);
        }
        trail.error(failure.code)
    }

    /// Waits for an in-flight record of the same scope to leave PROJECTING.
    async fn wait_for(&self, ctx: &RunContext, leader: &ToolCallId, timeout: Duration) -> Waited {
        let key = InvocationKey::new(ctx.run_id.clone(), leader.clone());
        let poll = async {
            let mut delay = POLL_START;
            loop {
                match self.inner.store.get(&key, RecordFields::Metadata).await {
                    Ok(Some(record)) => match record.status {
                        InvocationStatus::Projecting => {}
                        InvocationStatus::Ready => return Waited::Ready,
                        InvocationStatus::Error => {
                            return Waited::Failed(
                                record.error_code.unwrap_or(ErrorCode::ExecutionFailed),
                            );
                        }
                    },
                    Ok(None) => return Waited::Gone,
                    Err(error) => {
                        log_store_error("wait", &error);
                        return Waited::Failed(error.error_code());
                    }
                }
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(POLL_MAX);
            }
        };
        tokio::time::timeout(timeout, poll)
            .await
            .unwrap_or(Waited::Failed(ErrorCode::ExecutionTimeout))
    }

    /// Loads a READY record of the same scope and re-stamps its result for `id`.
    /// `Ok(None)` when there is nothing to replay (expired, not READY): execute instead.
    async fn replay_from(
        &self,
        tool: &Arc<dyn DynTool>,
        ctx: &RunContext,
        source: &ToolCallId,
        id: &ToolCallId,
        limits: &Limits,
        request_bytes: usize,
    ) -> Result<Option<(Checked, String)>, Failure> {
        let key = InvocationKey::new(ctx.run_id.clone(), source.clone());
        let record = match self.inner.store.get(&key, RecordFields::All).await {
            Ok(Some(record)) if record.status == InvocationStatus::Ready => record,
            Ok(_) => return Ok(None),
            Err(error) => {
                log_store_error("replay read", &error);
                return Err(Failure::bare(error.error_code()));
            }
        };
        let (Some(result_json), Some(raw_json)) = (record.agent_result_json, record.raw_json)
        else {
            return Ok(None);
        };
        let Some(mut result) = tool.parse_result(&result_json) else {
            return Err(Failure::bare(ErrorCode::InvalidEvidenceStatus));
        };
        result.set_tool_call_id(id.clone());
        let checked = check_result(result.as_ref(), id, request_bytes, raw_json.len(), limits)
            .map_err(Failure::bare)?;
        Ok(Some((checked, raw_json)))
    }
}

enum Waited {
    Ready,
    Failed(ErrorCode),
    Gone,
}

/// Decodes the arguments: a JSON object that decodes into the tool's request.
fn prepare(tool: &Arc<dyn DynTool>, arguments: &str) -> Option<Box<dyn PreparedCall>> {
    // A struct also decodes from a JSON array; only objects are accepted.
    if !arguments.trim_start().starts_with('{') {
        return None;
    }
    Arc::clone(tool).prepare(arguments)
}

/// Validates, serializes and bounds a projected result.
fn check_result(
    result: &dyn ErasedResult,
    id: &ToolCallId,
    request_bytes: usize,
    raw_bytes: usize,
    limits: &Limits,
) -> Result<Checked, ErrorCode> {
    if result.tool_call_id() != id {
        return Err(ErrorCode::InvalidEvidenceStatus);
    }
    let evidence = ReadyEvidence::from_status(result.evidence_status())
        .ok_or(ErrorCode::InvalidEvidenceStatus)?;
    result
        .validate()
        .map_err(|_| ErrorCode::InvalidEvidenceStatus)?;
    let json = result
        .to_json()
        .map_err(|_| ErrorCode::SerializationFailed)?;
    if json.len() > limits.max_agent_result_bytes
        || request_bytes + raw_bytes + json.len() > limits.max_record_bytes
    {
        return Err(ErrorCode::ResultTooLarge);
    }
    let observation = result
        .observation()
        .map_err(|_| ErrorCode::SerializationFailed)?;
    Ok(Checked {
        evidence,
        json,
        observation,
        counters: result.counters(),
    })
}

/// Keeps the raw response in the ERROR record when the record still fits.
fn keep_raw(code: ErrorCode, raw_json: String, request_bytes: usize, limits: &Limits) -> Failure {
    let fits = request_bytes + raw_json.len() <= limits.max_record_bytes;
    Failure {
        code,
        raw_json: fits.then_some(raw_json),
    }
}

fn log_store_error(operation: &'static str, error: &StoreError) {
    tracing::warn!(operation, code = error.code(), "store operation failed");
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
