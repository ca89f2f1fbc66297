//! A created call: its record's create (with the guard armed), and its one
//! conclusion (the finalization, settled when its answer is lost).

use std::sync::Arc;
use std::time::Duration;

use aci_contracts::{ErrorCode, InvocationStatus, ResultCounters, Timestamp, ToolCallId};
use serde_json::value::RawValue;

use super::guard::{Guard, settle_now_or_later};
use super::preflight::Admitted;
use super::{ToolBoundary, Trail, log_store_error};
use crate::redact::Redactions;
use crate::tool::{DynTool, PreparedCall};
use crate::{
    BoundaryOutcome, ExecutionError, Finalization, InvocationKey, Limits, ReadyEvidence,
    RunContext, SameScope, Settled, StoreError, Unsettled, clock,
};

/// A call whose record exists (`PROJECTING`), guarded until it concludes.
pub(super) struct Call {
    pub(super) key: InvocationKey,
    pub(super) id: ToolCallId,
    pub(super) tool: Arc<dyn DynTool>,
    pub(super) prepared: Box<dyn PreparedCall>,
    pub(super) limits: Limits,
    pub(super) request_bytes: usize,
    /// For a claiming create: what the store reported of the scope.
    pub(super) same_scope: Option<SameScope>,
    pub(super) claims_scope: bool,
    /// The earlier of the harness's deadline and the run's stored deadline.
    pub(super) deadline: Option<Timestamp>,
    /// The tool timeout, cut short by the deadline.
    pub(super) timeout: Duration,
    guard: Guard,
}

/// The finished agent result of a call, checked and serialized once.
pub(super) struct Checked {
    pub(super) evidence: ReadyEvidence,
    pub(super) json: String,
    pub(super) observation: Box<RawValue>,
    pub(super) counters: ResultCounters,
    /// What the projection redacted, per rule.
    pub(super) redactions: Redactions,
}

/// A failure after the record exists: its code, whether it is retryable,
/// and whatever raw data to keep.
pub(super) struct Failure {
    pub(super) code: ErrorCode,
    pub(super) retryable: bool,
    pub(super) raw_json: Option<String>,
}

impl Failure {
    /// A failure of `code`, retryable as the code says.
    pub(super) const fn bare(code: ErrorCode) -> Self {
        Self {
            code,
            retryable: code.is_transient(),
            raw_json: None,
        }
    }

    /// The executor's failure: its code, and its own verdict on retrying.
    pub(super) const fn execution(error: &ExecutionError) -> Self {
        Self {
            code: error.error_code(),
            retryable: error.retryable(),
            raw_json: None,
        }
    }
}

/// How a call ends, before it is recorded.
pub(super) enum Decision {
    /// READY with this result (replayed from another record, or not).
    Ready {
        checked: Checked,
        raw_json: String,
        replayed_from: Option<ToolCallId>,
    },
    /// ERROR.
    Failed(Failure),
}

impl ToolBoundary {
    /// Creates the call's record, atomically with the run's state, the
    /// duplicate and the budget checks. The guard is armed before the create
    /// is sent: a future dropped while the create is on its way still settles it.
    pub(super) async fn create(
        &self,
        ctx: &RunContext,
        admitted: Admitted,
        trail: &mut Trail<'_>,
    ) -> Result<Call, ErrorCode> {
        let Admitted {
            id,
            tool,
            prepared,
            limits,
            mut new,
        } = admitted;
        new.attempt = fastrand::u64(..);
        let unsettled = Unsettled::of(&new);
        let request_bytes = new.request_json.len();
        let claims_scope = new.claim_scope;
        let key = new.key.clone();
        let mut guard = Guard::arm(Arc::clone(&self.inner), unsettled);
        let created = match self.inner.store.create(new).await {
            Ok(created) => created,
            Err(error) => {
                log_store_error("create", &error);
                if let (Some(call), true) = (guard.call(), outcome_unknown(&error)) {
                    // The create may have been applied: it must not stay PROJECTING.
                    let call = call.clone();
                    settle_now_or_later(&self.inner, call, ErrorCode::StoreUnavailable).await;
                }
                guard.disarm();
                return Err(error.error_code());
            }
        };
        trail.duplicate_of = created.duplicate_of;
        let deadline = match (ctx.deadline, created.run.deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let timeout = deadline.map_or(limits.timeout, |d| {
            clock::between(self.inner.clock.now(), d).min(limits.timeout)
        });
        Ok(Call {
            key,
            id,
            tool,
            prepared,
            limits,
            request_bytes,
            same_scope: created.same_scope,
            claims_scope,
            deadline,
            timeout,
            guard,
        })
    }

    /// Records the decision: READY or ERROR, exactly once. The agent gets a
    /// READY result only if it is recorded. A finalization whose answer was
    /// lost is settled (the record never stays PROJECTING once the store
    /// answers again); the guard is disarmed only once that is handed off.
    pub(super) async fn conclude(
        &self,
        mut trail: Trail<'_>,
        mut call: Call,
        decision: Decision,
        span: &tracing::Span,
    ) -> BoundaryOutcome {
        let now = self.inner.clock.now();
        let outcome = match decision {
            Decision::Ready {
                checked,
                raw_json,
                replayed_from,
            } => {
                if replayed_from.is_some() {
                    span.record("replayed", true);
                }
                trail.replayed_from.clone_from(&replayed_from);
                let Checked {
                    evidence,
                    json,
                    observation,
                    counters,
                    redactions,
                } = checked;
                let finalization = Finalization::Ready {
                    evidence,
                    raw_json,
                    agent_result_json: json,
                    redactions: redactions.clone(),
                    replayed_from,
                    finished_at: now,
                    timings: Some(trail.timings),
                };
                match self.inner.store.finalize(&call.key, finalization).await {
                    Ok(()) => trail.ready(observation, evidence, counters, redactions),
                    Err(error) if outcome_unknown(&error) => {
                        log_store_error("finalize", &error);
                        match self.settle(&mut call, ErrorCode::StoreUnavailable).await {
                            // The lost READY write had applied: it is recorded.
                            Some(Settled::AlreadyFinal(InvocationStatus::Ready)) => {
                                trail.ready(observation, evidence, counters, redactions)
                            }
                            _ => trail.error(ErrorCode::StoreUnavailable),
                        }
                    }
                    Err(error) => {
                        log_store_error("finalize", &error);
                        trail.error(error.error_code())
                    }
                }
            }
            Decision::Failed(failure) => {
                let finalization = Finalization::Error {
                    error_code: failure.code,
                    retryable: failure.retryable,
                    raw_json: failure.raw_json,
                    finished_at: now,
                    timings: Some(trail.timings),
                };
                match self.inner.store.finalize(&call.key, finalization).await {
                    Ok(()) => {}
                    Err(error) if outcome_unknown(&error) => {
                        log_store_error("finalize error", &error);
                        self.settle(&mut call, failure.code).await;
                    }
                    // The call failed either way; the agent gets the original code.
                    Err(error) => log_store_error("finalize error", &error),
                }
                trail.failed(failure.code, failure.retryable)
            }
        };
        call.guard.disarm();
        outcome
    }

    /// Settles the call (one attempt now, more on a task of their own).
    async fn settle(&self, call: &mut Call, code: ErrorCode) -> Option<Settled> {
        let unsettled = call.guard.call()?.clone();
        let settled = settle_now_or_later(&self.inner, unsettled, code).await;
        call.guard.disarm();
        settled
    }
}

/// Whether a failed write may nevertheless have been applied.
const fn outcome_unknown(error: &StoreError) -> bool {
    matches!(
        error,
        StoreError::Unavailable { .. } | StoreError::Corrupt { .. }
    )
}
