//! Execute and project: the tool runs under its timeout, its raw response
//! is serialized once and bounded, the projector turns it into a bounded
//! result, and the result is checked. Every panic on this path is caught and
//! becomes an error code; nothing here writes to the store.

use std::panic::AssertUnwindSafe;
use std::time::Instant;

use aci_contracts::ErrorCode;
use futures::FutureExt;

use super::call::{Call, Checked, Decision, Failure};
use super::{ToolBoundary, millis};
use crate::redact::Redactions;
use crate::tool::{ErasedResult, Projected, RawOutput};
use crate::{ExecutionContext, Limits, PhaseTimings, ReadyEvidence, RunContext};

impl ToolBoundary {
    /// Runs the executor and the projector; the decision to record.
    pub(super) async fn execute_and_project(
        &self,
        ctx: &RunContext,
        call: &Call,
        timings: &mut PhaseTimings,
        span: &tracing::Span,
    ) -> Decision {
        let context = ExecutionContext {
            run_id: ctx.run_id.clone(),
            tool_call_id: call.id.clone(),
            now: self.inner.clock.now(),
            deadline: call.deadline,
        };
        let execute_started = Instant::now();
        let executed = tokio::time::timeout(
            call.timeout,
            AssertUnwindSafe(call.prepared.execute(&context)).catch_unwind(),
        )
        .await;
        let execution = execute_started.elapsed();
        timings.execution = Some(execution);
        span.record("execute_ms", millis(execution));
        let raw = match executed {
            Err(_elapsed) => return Decision::Failed(Failure::bare(ErrorCode::ExecutionTimeout)),
            Ok(Err(_panic)) => {
                tracing::warn!("executor panicked");
                return Decision::Failed(Failure::bare(ErrorCode::ExecutionFailed));
            }
            Ok(Ok(Err(error))) => {
                tracing::warn!(kind = ?error.kind(), "executor failed");
                return Decision::Failed(Failure::execution(&error));
            }
            Ok(Ok(Ok(raw))) => raw,
        };

        let projection_started = Instant::now();
        let decision = self.project(raw, call);
        timings.projection = Some(projection_started.elapsed());
        decision
    }

    /// Serializes the raw response once, projects it and checks the result.
    fn project(&self, raw: Box<dyn RawOutput>, call: &Call) -> Decision {
        // Serialize raw once; oversized raw is neither stored nor projected.
        let serialized = std::panic::catch_unwind(AssertUnwindSafe(|| raw.to_json()));
        let Ok(Ok(raw_json)) = serialized else {
            tracing::warn!("raw response could not be serialized");
            return Decision::Failed(Failure::bare(ErrorCode::SerializationFailed));
        };
        if raw_json.len() > call.limits.max_raw_bytes {
            return Decision::Failed(Failure::bare(ErrorCode::ResultTooLarge));
        }

        let projected = std::panic::catch_unwind(AssertUnwindSafe(|| {
            raw.project(&call.id, &self.inner.redactor)
        }));
        drop(raw);
        let Ok(Ok(Projected { result, redactions })) = projected else {
            tracing::warn!("projector failed");
            return Decision::Failed(keep_raw(ErrorCode::ProjectionFailed, raw_json, call));
        };
        let checked = std::panic::catch_unwind(AssertUnwindSafe(|| {
            check_result(result.as_ref(), call, raw_json.len())
        }));
        match checked {
            Ok(Ok(checked)) => Decision::Ready {
                checked: Checked {
                    redactions,
                    ..checked
                },
                raw_json,
                replayed_from: None,
            },
            Ok(Err(code)) => Decision::Failed(keep_raw(code, raw_json, call)),
            Err(_panic) => {
                tracing::warn!("projected result panicked while checked");
                Decision::Failed(keep_raw(ErrorCode::ProjectionFailed, raw_json, call))
            }
        }
    }
}

/// Validates, serializes and bounds a projected result.
pub(super) fn check_result(
    result: &dyn ErasedResult,
    call: &Call,
    raw_bytes: usize,
) -> Result<Checked, ErrorCode> {
    let limits: &Limits = &call.limits;
    if result.tool_call_id() != &call.id {
        return Err(ErrorCode::InvalidEvidenceStatus);
    }
    let evidence = ReadyEvidence::from(result.evidence_status());
    result
        .validate()
        .map_err(|_| ErrorCode::InvalidEvidenceStatus)?;
    let json = result
        .to_json()
        .map_err(|_| ErrorCode::SerializationFailed)?;
    if json.len() > limits.max_agent_result_bytes
        || call.request_bytes + raw_bytes + json.len() > limits.max_record_bytes
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
        redactions: Redactions::new(),
    })
}

/// Keeps the raw response in the ERROR record when the record still fits.
fn keep_raw(code: ErrorCode, raw_json: String, call: &Call) -> Failure {
    let fits = call.request_bytes + raw_json.len() <= call.limits.max_record_bytes;
    Failure {
        code,
        retryable: code.is_transient(),
        raw_json: fits.then_some(raw_json),
    }
}
