//! Tools: an executor (`Request -> Raw`), a projector (`Raw -> bounded Result`),
//! a declared read-only flag, limits, a replay policy and a scope normalizer.

use std::borrow::Cow;
use std::fmt::{self, Debug};
use std::sync::Arc;

use aci_contracts::{
    ErrorCode, EvidenceResult, ReadyEvidenceStatus, ResultCounters, RunId, Timestamp, ToolCallId,
    ToolName, ValidationError,
};
use async_trait::async_trait;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use serde_json::value::RawValue;

use crate::redact::{RedactionPass, Redactions, Redactor};
use crate::{BoxError, LimitOverrides};

/// What an executor knows about the call it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutionContext {
    /// The run.
    pub run_id: RunId,
    /// The framework's id of the call.
    pub tool_call_id: ToolCallId,
    /// The boundary clock's instant when execution started. Sources that
    /// resolve relative windows ("the last 60 minutes") use it.
    pub now: Timestamp,
    /// The run's deadline, if any. The boundary enforces it; executors may use
    /// it to bound their own work.
    pub deadline: Option<Timestamp>,
}

/// Why an executor failed: an agent-safe category, whether calling again
/// unchanged may succeed, and a source kept for the harness. Its source never
/// reaches the agent.
///
/// Tool crates do not build it by hand: their port's error implements
/// [`SourceError`] and converts with `?` through the one blanket
/// `From<E: SourceError>`.
#[derive(Debug, thiserror::Error)]
#[error("{}", self.kind.error_code().as_str())]
pub struct ExecutionError {
    kind: ExecutionErrorKind,
    retryable: bool,
    #[source]
    source: Option<BoxError>,
}

/// The error of a tool's source port (`KnowledgeSource`, `LogSource`,
/// `MysqlSource`): it says its agent-safe category and whether it is
/// retryable, as data, and keeps driver detail in its `source()` chain.
///
/// Every `E: SourceError` converts into [`ExecutionError`] by the one blanket
/// `From` impl, keeping the category, the retryability and `E` itself as the
/// source; executors write `source.call(..).await?`.
///
/// # Behavior
/// - `kind()` is the category the agent sees (as its [`ErrorCode`]).
/// - `retryable()` says whether the same request may succeed later (a
///   connection refused, a timeout) or never will (a refused query, a missing
///   index).
/// - `Display` and `Debug` carry no payload, credentials, URLs or store keys.
pub trait SourceError: std::error::Error + Send + Sync + 'static {
    /// The agent-safe category.
    fn kind(&self) -> ExecutionErrorKind;

    /// Whether calling again later, unchanged, may succeed.
    fn retryable(&self) -> bool;
}

impl<E: SourceError> From<E> for ExecutionError {
    fn from(error: E) -> Self {
        Self {
            kind: error.kind(),
            retryable: error.retryable(),
            source: Some(Box::new(error)),
        }
    }
}

/// The agent-safe category of an execution failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ExecutionErrorKind {
    /// The tool failed (`EXECUTION_FAILED`).
    Failed,
    /// The request names an unknown data source (`DATA_SOURCE_UNKNOWN`).
    DataSourceUnknown,
    /// The request's query is refused (`QUERY_REJECTED`).
    QueryRejected,
    /// The request is invalid in a way only the executor can tell (`INVALID_INPUT`).
    InvalidInput,
    /// The source gave up on the request in time, for example a server-side
    /// statement timeout (`EXECUTION_TIMEOUT`).
    Timeout,
}

impl ExecutionErrorKind {
    /// The agent-facing code.
    #[must_use]
    pub const fn error_code(self) -> ErrorCode {
        match self {
            Self::Failed => ErrorCode::ExecutionFailed,
            Self::DataSourceUnknown => ErrorCode::DataSourceUnknown,
            Self::QueryRejected => ErrorCode::QueryRejected,
            Self::InvalidInput => ErrorCode::InvalidInput,
            Self::Timeout => ErrorCode::ExecutionTimeout,
        }
    }
}

impl ExecutionError {
    /// An error of `kind` with no further detail, retryable as `kind`'s code
    /// says ([`ErrorCode::is_transient`]).
    #[must_use]
    pub const fn new(kind: ExecutionErrorKind) -> Self {
        Self {
            kind,
            retryable: kind.error_code().is_transient(),
            source: None,
        }
    }

    /// `EXECUTION_FAILED` (retryable), keeping `source` for the harness's own
    /// diagnostics. A port error should rather implement [`SourceError`].
    pub fn failed(source: impl Into<BoxError>) -> Self {
        Self::with_source(ExecutionErrorKind::Failed, source)
    }

    /// An error of `kind` that keeps `source` for the harness, retryable as
    /// `kind`'s code says.
    pub fn with_source(kind: ExecutionErrorKind, source: impl Into<BoxError>) -> Self {
        Self {
            kind,
            retryable: kind.error_code().is_transient(),
            source: Some(source.into()),
        }
    }

    /// The same error, retryable or permanent as given.
    #[must_use]
    pub const fn with_retryable(mut self, retryable: bool) -> Self {
        self.retryable = retryable;
        self
    }

    /// The category.
    #[must_use]
    pub const fn kind(&self) -> ExecutionErrorKind {
        self.kind
    }

    /// Whether calling again later, unchanged, may succeed.
    #[must_use]
    pub const fn retryable(&self) -> bool {
        self.retryable
    }

    /// The agent-facing code.
    #[must_use]
    pub const fn error_code(&self) -> ErrorCode {
        self.kind.error_code()
    }
}

/// Why a projector failed. Its source never reaches the agent.
#[derive(Debug, thiserror::Error)]
#[error("PROJECTION_FAILED")]
pub struct ProjectionError {
    #[source]
    source: Option<BoxError>,
}

impl ProjectionError {
    /// A failure with a source kept for the harness.
    pub fn new(source: impl Into<BoxError>) -> Self {
        Self {
            source: Some(source.into()),
        }
    }

    /// A failure with no further detail.
    #[must_use]
    pub const fn bare() -> Self {
        Self { source: None }
    }
}

/// Runs a tool's request against its source and returns the raw response.
#[async_trait]
pub trait Executor: Send + Sync + Debug + 'static {
    /// The decoded agent request.
    type Request: Send + Sync + 'static;
    /// The complete raw response, recorded for the harness (never shown to the model).
    type Raw: Serialize + Send + Sync + 'static;

    /// Executes `request`.
    ///
    /// # Errors
    /// [`ExecutionError`] with the agent-safe category of the failure.
    async fn execute(
        &self,
        request: &Self::Request,
        context: &ExecutionContext,
    ) -> Result<Self::Raw, ExecutionError>;

    /// Waits for the work this executor handed to tasks of its own that must
    /// finish before the process exits: the cleanup of calls whose future was
    /// dropped (for example the kill of a statement still running on a
    /// server). [`ToolBoundary::drain_abandoned`](crate::ToolBoundary::drain_abandoned)
    /// waits for it, so a tool crate keeps no process-wide state for it.
    ///
    /// # Behavior
    /// - Returns once every such task started before the call has finished
    ///   or given up (each under a bound of its own); tasks started later may
    ///   still run.
    /// - The executor stays usable afterwards.
    /// - The default has nothing to wait for.
    async fn drain(&self) {}
}

/// What a projector knows about the call it projects, and the one redaction
/// pass every text it puts in the Model Observation goes through.
///
/// A projector redacts each such text with [`redact`](Self::redact) (or
/// [`redact_field`](Self::redact_field) / [`redact_json`](Self::redact_json))
/// **before** it bounds it, so sizes and `truncated` are those of the
/// redacted text. The pass counts what it replaced, per rule; the boundary
/// puts the counts in the record and the Harness Control View
/// (`redactions`).
#[derive(Debug)]
pub struct ProjectionContext<'a, Request> {
    /// The framework's id; the result must carry exactly this id.
    pub tool_call_id: &'a ToolCallId,
    /// The decoded request.
    pub request: &'a Request,
    redaction: RedactionPass<'a>,
}

impl<'a, Request> ProjectionContext<'a, Request> {
    /// A context whose texts go through `redaction` (the boundary's is
    /// [`RedactionPass::new`] over its redactor).
    #[must_use]
    pub const fn new(
        tool_call_id: &'a ToolCallId,
        request: &'a Request,
        redaction: RedactionPass<'a>,
    ) -> Self {
        Self {
            tool_call_id,
            request,
            redaction,
        }
    }

    /// The redaction pass.
    #[must_use]
    pub const fn redaction(&self) -> &RedactionPass<'a> {
        &self.redaction
    }

    /// [`RedactionPass::redact`].
    pub fn redact<'t>(&self, text: &'t str) -> Cow<'t, str> {
        self.redaction.redact(text)
    }

    /// [`RedactionPass::redact_field`].
    pub fn redact_field<'t>(&self, key: &str, value: &'t str) -> Cow<'t, str> {
        self.redaction.redact_field(key, value)
    }

    /// [`RedactionPass::redact_json`].
    pub fn redact_json(&self, value: &mut Value) -> bool {
        self.redaction.redact_json(value)
    }

    /// What the pass replaced, per rule.
    #[must_use]
    pub fn into_redactions(self) -> Redactions {
        self.redaction.into_redactions()
    }
}

/// Turns a raw response into a bounded agent result. Pure and deterministic.
pub trait Projector: Send + Sync + Debug + 'static {
    /// The decoded agent request.
    type Request: Send + Sync + 'static;
    /// The raw response it reads.
    type Raw: Send + Sync + 'static;
    /// The bounded result it produces.
    type Output: EvidenceResult;

    /// Projects `raw`.
    ///
    /// # Errors
    /// [`ProjectionError`] when `raw` cannot be turned into evidence.
    fn project(
        &self,
        context: &ProjectionContext<'_, Self::Request>,
        raw: &Self::Raw,
    ) -> Result<Self::Output, ProjectionError>;
}

/// Whether a new call may reuse a READY result of the same scope in the same run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ReplayPolicy {
    /// Every call executes (the default).
    #[default]
    Never,
    /// A call whose normalized scope matches a READY record of the same run
    /// replays that record instead of executing; concurrent calls with one scope
    /// execute at most once.
    SameScope,
}

type ValidateFn<R> = Arc<dyn Fn(&R) -> bool + Send + Sync>;
type ScopeFn<R> = Arc<dyn Fn(&R) -> Value + Send + Sync>;

/// A tool for the boundary: name, description, executor, projector, read-only
/// declaration, limits, replay policy, request validation and scope normalizer.
pub struct ToolSpec<E: Executor, P> {
    pub(crate) name: String,
    pub(crate) description: String,
    pub(crate) read_only: bool,
    pub(crate) limits: LimitOverrides,
    pub(crate) replay: ReplayPolicy,
    executor: E,
    projector: P,
    validate: Option<ValidateFn<E::Request>>,
    scope: Option<ScopeFn<E::Request>>,
}

impl<E, P> ToolSpec<E, P>
where
    E: Executor,
    E::Request: Serialize + DeserializeOwned,
    P: Projector<Request = E::Request, Raw = E::Raw>,
{
    /// A tool named `name`. It is not read-only until declared so with
    /// [`read_only`](Self::read_only); the boundary refuses to run it otherwise.
    pub fn new(
        name: impl Into<String>,
        description: impl Into<String>,
        executor: E,
        projector: P,
    ) -> Self {
        Self {
            name: name.into(),
            description: description.into(),
            read_only: false,
            limits: LimitOverrides::default(),
            replay: ReplayPolicy::Never,
            executor,
            projector,
            validate: None,
            scope: None,
        }
    }

    /// One of the frozen contract tools, with its frozen name and description,
    /// declared read-only.
    pub fn frozen(tool: ToolName, executor: E, projector: P) -> Self {
        Self::new(tool.as_str(), tool.description(), executor, projector).read_only(true)
    }

    /// Declares whether the tool only reads.
    #[must_use]
    pub fn read_only(mut self, read_only: bool) -> Self {
        self.read_only = read_only;
        self
    }

    /// Per-tool limit overrides.
    #[must_use]
    pub fn limits(mut self, limits: LimitOverrides) -> Self {
        self.limits = limits;
        self
    }

    /// Per-tool execution timeout.
    #[must_use]
    pub fn timeout(mut self, timeout: std::time::Duration) -> Self {
        self.limits.timeout = Some(timeout);
        self
    }

    /// The replay policy (default [`ReplayPolicy::Never`]).
    #[must_use]
    pub fn replay(mut self, policy: ReplayPolicy) -> Self {
        self.replay = policy;
        self
    }

    /// Extra request validation after decoding; `false` means `INVALID_INPUT`.
    #[must_use]
    pub fn validate_with(
        mut self,
        validate: impl Fn(&E::Request) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.validate = Some(Arc::new(validate));
        self
    }

    /// The scope normalizer: what counts as the same scope for duplicate
    /// detection and replay. Defaults to the request serialized as JSON.
    #[must_use]
    pub fn scope_with(
        mut self,
        scope: impl Fn(&E::Request) -> Value + Send + Sync + 'static,
    ) -> Self {
        self.scope = Some(Arc::new(scope));
        self
    }

    /// The tool's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The tool's description.
    #[must_use]
    pub fn description(&self) -> &str {
        &self.description
    }
}

impl<E: Executor, P> Debug for ToolSpec<E, P>
where
    P: Debug,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolSpec")
            .field("name", &self.name)
            .field("read_only", &self.read_only)
            .field("limits", &self.limits)
            .field("replay", &self.replay)
            .field("executor", &self.executor)
            .field("projector", &self.projector)
            .finish_non_exhaustive()
    }
}

// ---------------------------------------------------------------------------
// Type erasure: the boundary holds tools of different request/raw/result types.

/// A decoded call, ready to execute.
#[async_trait]
pub(crate) trait PreparedCall: Send + Sync {
    /// The normalized scope.
    fn scope(&self) -> &Value;
    /// Executes; panics propagate to the caller, which catches them.
    async fn execute(
        &self,
        context: &ExecutionContext,
    ) -> Result<Box<dyn RawOutput>, ExecutionError>;
}

/// A raw response, typed underneath.
pub(crate) trait RawOutput: Send + Sync {
    /// Serializes the raw response once.
    fn to_json(&self) -> Result<String, serde_json::Error>;
    /// Projects it; panics propagate to the caller, which catches them.
    fn project(
        &self,
        tool_call_id: &ToolCallId,
        redactor: &Redactor,
    ) -> Result<Projected, ProjectionError>;
}

/// A projected result and what its projection redacted.
pub(crate) struct Projected {
    pub(crate) result: Box<dyn ErasedResult>,
    pub(crate) redactions: Redactions,
}

/// A bounded result, typed underneath.
pub(crate) trait ErasedResult: Send + Sync {
    fn evidence_status(&self) -> ReadyEvidenceStatus;
    fn tool_call_id(&self) -> &ToolCallId;
    fn set_tool_call_id(&mut self, id: ToolCallId);
    fn validate(&self) -> Result<(), ValidationError>;
    fn to_json(&self) -> Result<String, serde_json::Error>;
    fn observation(&self) -> Result<Box<RawValue>, serde_json::Error>;
    fn counters(&self) -> ResultCounters;
}

impl<T: EvidenceResult> ErasedResult for T {
    fn evidence_status(&self) -> ReadyEvidenceStatus {
        EvidenceResult::evidence_status(self)
    }
    fn tool_call_id(&self) -> &ToolCallId {
        EvidenceResult::tool_call_id(self)
    }
    fn set_tool_call_id(&mut self, id: ToolCallId) {
        EvidenceResult::set_tool_call_id(self, id);
    }
    fn validate(&self) -> Result<(), ValidationError> {
        EvidenceResult::validate(self)
    }
    fn to_json(&self) -> Result<String, serde_json::Error> {
        serde_json::to_string(self)
    }
    fn observation(&self) -> Result<Box<RawValue>, serde_json::Error> {
        serde_json::value::to_raw_value(&EvidenceResult::observation(self))
    }
    fn counters(&self) -> ResultCounters {
        EvidenceResult::counters(self)
    }
}

/// A registered tool, erased.
pub(crate) trait DynTool: Send + Sync + Debug {
    fn name(&self) -> &str;
    fn read_only(&self) -> bool;
    fn limit_overrides(&self) -> &LimitOverrides;
    fn replay(&self) -> ReplayPolicy;
    /// The executor's [`Executor::drain`].
    fn drain(&self) -> futures::future::BoxFuture<'_, ()>;
    /// Decodes and validates arguments (already known to be a JSON object text).
    fn prepare(self: Arc<Self>, arguments: &str) -> Option<Box<dyn PreparedCall>>;
    /// Reads a stored agent result back into its type.
    fn parse_result(&self, json: &str) -> Option<Box<dyn ErasedResult>>;
}

struct Shared<E: Executor, P> {
    spec: ToolSpec<E, P>,
}

impl<E: Executor, P: Debug> Debug for Shared<E, P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.spec.fmt(f)
    }
}

pub(crate) fn erase<E, P>(spec: ToolSpec<E, P>) -> Arc<dyn DynTool>
where
    E: Executor,
    E::Request: Serialize + DeserializeOwned,
    P: Projector<Request = E::Request, Raw = E::Raw>,
{
    Arc::new(Shared { spec })
}

impl<E, P> DynTool for Shared<E, P>
where
    E: Executor,
    E::Request: Serialize + DeserializeOwned,
    P: Projector<Request = E::Request, Raw = E::Raw>,
{
    fn name(&self) -> &str {
        &self.spec.name
    }

    fn read_only(&self) -> bool {
        self.spec.read_only
    }

    fn limit_overrides(&self) -> &LimitOverrides {
        &self.spec.limits
    }

    fn replay(&self) -> ReplayPolicy {
        self.spec.replay
    }

    fn drain(&self) -> futures::future::BoxFuture<'_, ()> {
        self.spec.executor.drain()
    }

    fn prepare(self: Arc<Self>, arguments: &str) -> Option<Box<dyn PreparedCall>> {
        let request: E::Request = serde_json::from_str(arguments).ok()?;
        if let Some(validate) = &self.spec.validate
            && !validate(&request)
        {
            return None;
        }
        let scope = match &self.spec.scope {
            Some(normalize) => normalize(&request),
            None => serde_json::to_value(&request).ok()?,
        };
        Some(Box::new(Prepared {
            tool: self,
            request: Arc::new(request),
            scope,
        }))
    }

    fn parse_result(&self, json: &str) -> Option<Box<dyn ErasedResult>> {
        let result: P::Output = serde_json::from_str(json).ok()?;
        Some(Box::new(result))
    }
}

struct Prepared<E: Executor, P> {
    tool: Arc<Shared<E, P>>,
    request: Arc<E::Request>,
    scope: Value,
}

#[async_trait]
impl<E, P> PreparedCall for Prepared<E, P>
where
    E: Executor,
    E::Request: Serialize + DeserializeOwned,
    P: Projector<Request = E::Request, Raw = E::Raw>,
{
    fn scope(&self) -> &Value {
        &self.scope
    }

    async fn execute(
        &self,
        context: &ExecutionContext,
    ) -> Result<Box<dyn RawOutput>, ExecutionError> {
        let raw = self
            .tool
            .spec
            .executor
            .execute(&self.request, context)
            .await?;
        Ok(Box::new(Executed {
            tool: Arc::clone(&self.tool),
            request: Arc::clone(&self.request),
            raw,
        }))
    }
}

struct Executed<E: Executor, P> {
    tool: Arc<Shared<E, P>>,
    request: Arc<E::Request>,
    raw: E::Raw,
}

impl<E, P> RawOutput for Executed<E, P>
where
    E: Executor,
    E::Request: Serialize + DeserializeOwned,
    P: Projector<Request = E::Request, Raw = E::Raw>,
{
    fn to_json(&self) -> Result<String, serde_json::Error> {
        serde_json::to_string(&self.raw)
    }

    fn project(
        &self,
        tool_call_id: &ToolCallId,
        redactor: &Redactor,
    ) -> Result<Projected, ProjectionError> {
        let context =
            ProjectionContext::new(tool_call_id, &*self.request, RedactionPass::new(redactor));
        let result = self.tool.spec.projector.project(&context, &self.raw)?;
        Ok(Projected {
            result: Box::new(result),
            redactions: context.into_redactions(),
        })
    }
}
