//! The store port: one canonical record per (run, tool call id).

use std::fmt::Debug;
use std::time::Duration;

use aci_contracts::{ErrorCode, InvocationStatus, RunId, Timestamp, ToolCallId};
use async_trait::async_trait;

use crate::{
    Created, Finalization, InvocationKey, InvocationRecord, NewInvocation, RecordFields, Refusal,
    RunState, ScopeFingerprint,
};

/// A call whose create or finalize got no answer: what [`InvocationStore::settle`]
/// needs to make sure it does not stay `PROJECTING`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unsettled {
    /// Its key.
    pub key: InvocationKey,
    /// The tool's registered name.
    pub tool_name: String,
    /// Fingerprint of tool name and normalized scope.
    pub scope_fingerprint: ScopeFingerprint,
    /// When the boundary created (or tried to create) it.
    pub created_at: Timestamp,
    /// The record TTL it was created with.
    pub ttl: Duration,
    /// The create attempt's token ([`NewInvocation::attempt`]).
    pub attempt: u64,
}

impl Unsettled {
    /// What settling `new` needs.
    #[must_use]
    pub fn of(new: &NewInvocation) -> Self {
        Self {
            key: new.key.clone(),
            tool_name: new.tool_name.clone(),
            scope_fingerprint: new.scope_fingerprint,
            created_at: new.created_at,
            ttl: new.ttl,
            attempt: new.attempt,
        }
    }
}

/// What [`InvocationStore::settle`] found and did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    /// The record was `PROJECTING`; it is now `ERROR` with the given code.
    Finalized,
    /// The record had already left `PROJECTING` (the lost write had applied).
    AlreadyFinal(InvocationStatus),
    /// There was no record: a tombstone now holds the key, so a create of it
    /// that was still on its way is refused as a duplicate.
    Tombstoned,
    /// The key holds a record of another create attempt (this attempt's
    /// create was refused, for example as a duplicate): left alone.
    OtherAttempt,
}

/// A boxed error from a driver or executor. It never reaches the agent.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// What a store knows about one scope fingerprint of a run.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ScopeIndex {
    /// The first record of the run created with this fingerprint.
    pub first: Option<ToolCallId>,
    /// The first record of the run with this fingerprint that became READY.
    pub first_ready: Option<ToolCallId>,
}

/// Canonical invocation records, keyed by (run id, tool call id).
///
/// Implementations: `store-memory` (embedded default) and `store-redis`. Every
/// implementation passes the conformance suite in
/// `invocation_core::conformance` (feature `testing`), which asserts exactly the
/// `# Behavior` and `# Errors` bullets below.
#[async_trait]
pub trait InvocationStore: Send + Sync + Debug + 'static {
    /// Creates a `PROJECTING` record, atomically with its run and budget checks.
    ///
    /// # Behavior
    /// - The run's first create (no run state held) stores the run state:
    ///   `started_at = new.created_at`, `deadline = started_at +
    ///   new.run.max_duration`, `owner = new.run.owner`, living the record TTL.
    ///   Later creates never change it. [`Created::run`] reports it.
    /// - Creates the record iff its key is absent, the tool budget and the run
    ///   budget allow one more record; then counts one against each budget.
    ///   Counters are per run; a counter's lifetime starts with its first count
    ///   and lasts the record TTL.
    /// - Sets the record's TTL to `new.ttl`. This is the only place a TTL is set.
    /// - Appends the key to the run's creation-ordered index; records the
    ///   fingerprint's first record when it has none.
    /// - Reports in [`Created::duplicate_of`] the run's first earlier record
    ///   with the same fingerprint.
    /// - When `new.claim_scope` is set: reports the fingerprint's first READY
    ///   record, or else a record that claimed the scope and is still
    ///   PROJECTING, in [`Created::same_scope`]; when there is neither, this
    ///   record claims the scope. A claim ends when its record is finalized.
    ///
    /// # Errors
    /// Checked in this order; a refusal writes and counts nothing:
    /// - [`StoreError::InvalidTtl`]: `new.ttl` is zero.
    /// - [`StoreError::RunOwnedByOther`]: the run's stored owner differs from
    ///   `new.run.owner` (an owned run refuses calls without a principal, and a
    ///   run without owner refuses calls with one).
    /// - [`StoreError::RunDeadlineExceeded`]: the run's stored deadline is at
    ///   or before `new.created_at`.
    /// - [`StoreError::Duplicate`]: the key exists (a record or a tombstone).
    /// - [`StoreError::ToolBudgetExhausted`], then [`StoreError::RunBudgetExhausted`].
    /// - [`StoreError::Unavailable`]: the store could not be reached in time.
    ///   The create may or may not have been applied: callers settle it
    ///   ([`settle`](Self::settle)).
    async fn create(&self, new: NewInvocation) -> Result<Created, StoreError>;

    /// Makes sure a call whose create or finalize got no answer is not left
    /// `PROJECTING`.
    ///
    /// # Behavior
    /// - A record created by another attempt than `call.attempt` is left
    ///   alone: [`Settled::OtherAttempt`].
    /// - This attempt's `PROJECTING` record becomes `ERROR` with `error_code` (as
    ///   [`finalize`](Self::finalize) would, releasing its scope claim):
    ///   [`Settled::Finalized`].
    /// - This attempt's record that already left `PROJECTING` is left alone:
    ///   [`Settled::AlreadyFinal`].
    /// - No record: writes a tombstone under the key, an `ERROR` record with
    ///   `error_code` and no payloads that lives `call.ttl`, counts against no
    ///   budget and is not listed; a create of the key arriving later is
    ///   refused as [`StoreError::Duplicate`]: [`Settled::Tombstoned`].
    /// - Idempotent: settling again changes nothing.
    ///
    /// # Errors
    /// - [`StoreError::InvalidTtl`], [`StoreError::Unavailable`].
    async fn settle(
        &self,
        call: &Unsettled,
        error_code: ErrorCode,
        finished_at: Timestamp,
    ) -> Result<Settled, StoreError>;

    /// The run's state, set by its first create.
    ///
    /// # Behavior
    /// - `None` when the run has no state (never created, or expired).
    ///   Never refreshes a TTL.
    ///
    /// # Errors
    /// - [`StoreError::Unavailable`], [`StoreError::Corrupt`].
    async fn run_state(&self, run_id: &RunId) -> Result<Option<RunState>, StoreError>;

    /// Notes a call of `run_id` refused before it had a record, for people
    /// reviewing the run (the review page's marks).
    ///
    /// # Behavior
    /// - Dropped, silently, when the run has an owner other than
    ///   `principal`: nobody writes into another principal's run.
    /// - Kept in the order noted, at most [`MAX_REFUSALS`](crate::MAX_REFUSALS)
    ///   per run (the oldest go first), until `ttl` after the last one noted.
    /// - Nothing else of the run changes (no state, budget or record).
    ///
    /// # Errors
    /// - [`StoreError::Unavailable`].
    async fn note_refusal(
        &self,
        run_id: &RunId,
        principal: Option<&str>,
        refusal: &Refusal,
        ttl: Duration,
    ) -> Result<(), StoreError>;

    /// The refusals noted for `run_id`, oldest first (empty when none, or
    /// expired).
    ///
    /// # Errors
    /// - [`StoreError::Unavailable`], [`StoreError::Corrupt`].
    async fn refusals(&self, run_id: &RunId) -> Result<Vec<Refusal>, StoreError>;

    /// Moves a `PROJECTING` record to `READY` or `ERROR`, exactly once.
    ///
    /// # Behavior
    /// - Compare-and-set on the status: only `PROJECTING -> READY` and
    ///   `PROJECTING -> ERROR` happen.
    /// - Never touches the TTL: the record keeps what remains of it.
    /// - On READY, records the record as its fingerprint's first READY record
    ///   when there is none. Releases the record's scope claim, if it holds one.
    ///
    /// # Errors
    /// - [`StoreError::NotFound`]: no such record (never created, or expired);
    ///   it is not recreated.
    /// - [`StoreError::NotProjecting`]: already READY or ERROR; nothing changes.
    /// - [`StoreError::Unavailable`].
    async fn finalize(
        &self,
        key: &InvocationKey,
        finalization: Finalization,
    ) -> Result<(), StoreError>;

    /// Reads one record with the payloads `fields` selects.
    ///
    /// # Behavior
    /// - `None` when the record does not exist or has expired.
    /// - Never refreshes the TTL. [`RecordFields::Metadata`] never fetches payloads.
    ///
    /// # Errors
    /// - [`StoreError::Unavailable`], [`StoreError::Corrupt`].
    async fn get(
        &self,
        key: &InvocationKey,
        fields: RecordFields,
    ) -> Result<Option<InvocationRecord>, StoreError>;

    /// Reads several records, as [`get`](Self::get) reads each: the answer
    /// at `i` is the record of `keys[i]`, `None` when it does not exist or
    /// has expired. Records of any runs may be mixed.
    ///
    /// The default reads them concurrently; a store that can batch reads
    /// (Redis: pipelines) overrides it.
    ///
    /// # Errors
    /// - [`StoreError::Unavailable`], [`StoreError::Corrupt`]: for the whole
    ///   batch.
    async fn get_many(
        &self,
        keys: &[InvocationKey],
        fields: RecordFields,
    ) -> Result<Vec<Option<InvocationRecord>>, StoreError> {
        futures::future::try_join_all(keys.iter().map(|key| self.get(key, fields))).await
    }

    /// Lists a run's live records in creation order.
    ///
    /// # Behavior
    /// - Expired records are left out. Never refreshes any TTL.
    ///
    /// # Errors
    /// - [`StoreError::Unavailable`], [`StoreError::Corrupt`].
    async fn list(
        &self,
        run_id: &RunId,
        fields: RecordFields,
    ) -> Result<Vec<InvocationRecord>, StoreError>;

    /// The run's first record, and first READY record, with `fingerprint`.
    ///
    /// # Behavior
    /// - Ids may name records that have since expired; read them to be sure.
    ///
    /// # Errors
    /// - [`StoreError::Unavailable`].
    async fn scope_index(
        &self,
        run_id: &RunId,
        fingerprint: &ScopeFingerprint,
    ) -> Result<ScopeIndex, StoreError>;

    /// What remains of a record's TTL.
    ///
    /// # Behavior
    /// - `None` when the record does not exist or has expired. Never refreshes it.
    ///
    /// # Errors
    /// - [`StoreError::Unavailable`].
    async fn remaining_ttl(&self, key: &InvocationKey) -> Result<Option<Duration>, StoreError>;
}

/// Why a store operation failed.
///
/// Display and Debug never contain a connection URL, password, key or payload.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// A record with this key already exists.
    #[error("a record with this key already exists")]
    Duplicate,
    /// The run's budget for this tool is used up.
    #[error("the run's budget for this tool is used up")]
    ToolBudgetExhausted,
    /// The run's budget for all tools is used up.
    #[error("the run's budget is used up")]
    RunBudgetExhausted,
    /// The run's stored deadline has passed.
    #[error("the run's deadline has passed")]
    RunDeadlineExceeded,
    /// The run belongs to another principal.
    #[error("the run belongs to another principal")]
    RunOwnedByOther,
    /// A record TTL of zero was asked for.
    #[error("a record TTL must be positive")]
    InvalidTtl,
    /// No such record: never created, or expired.
    #[error("no such record (never created, or expired)")]
    NotFound,
    /// The record already left PROJECTING.
    #[error("the record is {current:?}, not PROJECTING")]
    NotProjecting {
        /// Its current status.
        current: InvocationStatus,
    },
    /// The store could not be reached, or did not answer in time.
    #[error("the invocation store is unavailable")]
    Unavailable {
        /// The driver's error, sanitized by the adapter.
        #[source]
        source: BoxError,
    },
    /// The store returned a record this version cannot read.
    #[error("the invocation store returned a malformed record ({what})")]
    Corrupt {
        /// Which part was malformed.
        what: &'static str,
    },
}

impl StoreError {
    /// Wraps a driver error as [`StoreError::Unavailable`].
    pub fn unavailable(source: impl Into<BoxError>) -> Self {
        Self::Unavailable {
            source: source.into(),
        }
    }

    /// Stable SCREAMING_SNAKE code.
    #[must_use]
    pub const fn code(&self) -> &'static str {
        match self {
            Self::Duplicate => "DUPLICATE_TOOL_CALL",
            Self::ToolBudgetExhausted => "TOOL_BUDGET_EXHAUSTED",
            Self::RunBudgetExhausted => "RUN_BUDGET_EXHAUSTED",
            Self::RunDeadlineExceeded => "RUN_DEADLINE_EXCEEDED",
            Self::RunOwnedByOther => "RUN_OWNED_BY_OTHER",
            Self::InvalidTtl => "INVALID_TTL",
            Self::NotFound => "RECORD_EXPIRED",
            Self::NotProjecting { .. } => "NOT_PROJECTING",
            Self::Unavailable { .. } => "STORE_UNAVAILABLE",
            Self::Corrupt { .. } => "STORE_CORRUPT",
        }
    }

    /// The agent-facing code for this failure.
    #[must_use]
    pub const fn error_code(&self) -> ErrorCode {
        match self {
            Self::Duplicate => ErrorCode::DuplicateToolCall,
            Self::ToolBudgetExhausted => ErrorCode::ToolBudgetExhausted,
            Self::RunBudgetExhausted => ErrorCode::RunBudgetExhausted,
            Self::RunDeadlineExceeded => ErrorCode::RunDeadlineExceeded,
            Self::RunOwnedByOther => ErrorCode::Unauthorized,
            Self::InvalidTtl => ErrorCode::StoreUnavailable,
            Self::NotFound => ErrorCode::RecordExpired,
            Self::NotProjecting { .. } => ErrorCode::ExecutionAbandoned,
            Self::Unavailable { .. } | Self::Corrupt { .. } => ErrorCode::StoreUnavailable,
        }
    }

    /// Whether the same operation may succeed later.
    #[must_use]
    pub const fn is_transient(&self) -> bool {
        matches!(self, Self::Unavailable { .. })
    }
}
