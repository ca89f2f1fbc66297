//! Same-scope replay: a call whose normalized scope matches a READY record
//! of its run reuses that record's result instead of executing again.

use std::time::Duration;

use aci_contracts::{ErrorCode, InvocationStatus, ToolCallId};

use super::call::{Call, Decision, Failure};
use super::execute::check_result;
use super::{ToolBoundary, log_store_error};
use crate::{InvocationKey, RecordFields, RunContext, SameScope};

const POLL_START: Duration = Duration::from_millis(2);
const POLL_MAX: Duration = Duration::from_millis(50);

enum Waited {
    Ready,
    Failed(ErrorCode),
    Gone,
}

impl ToolBoundary {
    /// The replayed decision, or `None` to execute (the tool does not replay,
    /// no READY record of the scope, or it went away).
    pub(super) async fn replay(&self, ctx: &RunContext, call: &Call) -> Option<Decision> {
        if !call.claims_scope {
            return None;
        }
        let source = match &call.same_scope {
            Some(SameScope::Ready(source)) => source.clone(),
            Some(SameScope::InFlight(leader)) => {
                match self.wait_for(ctx, leader, call.timeout).await {
                    Waited::Ready => leader.clone(),
                    Waited::Failed(code) => return Some(Decision::Failed(Failure::bare(code))),
                    Waited::Gone => return None,
                }
            }
            None => return None,
        };
        match self.replay_from(ctx, call, &source).await {
            Ok(Some((checked, raw_json))) => Some(Decision::Ready {
                checked,
                raw_json,
                replayed_from: Some(source),
            }),
            Ok(None) => None,
            Err(failure) => Some(Decision::Failed(failure)),
        }
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

    /// Loads a READY record of the same scope and re-stamps its result for
    /// this call. `Ok(None)` when there is nothing to replay (expired, not
    /// READY): execute instead.
    async fn replay_from(
        &self,
        ctx: &RunContext,
        call: &Call,
        source: &ToolCallId,
    ) -> Result<Option<(super::call::Checked, String)>, Failure> {
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
        let Some(mut result) = call.tool.parse_result(&result_json) else {
            return Err(Failure::bare(ErrorCode::InvalidEvidenceStatus));
        };
        result.set_tool_call_id(call.id.clone());
        let mut checked =
            check_result(result.as_ref(), call, raw_json.len()).map_err(Failure::bare)?;
        // The same result, so the same redactions.
        checked.redactions = record.redactions;
        Ok(Some((checked, raw_json)))
    }
}
