//! Preflight: every check that can refuse a call before a record exists.
//!
//! The order is documented in `docs/lifecycle.md`; each refusal returns its
//! code, creates nothing and runs nothing.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use aci_contracts::{ErrorCode, Timestamp, ToolCallId};
use tracing::field;

use super::{ToolBoundary, Trail};
use crate::tool::{DynTool, PreparedCall};
use crate::{
    Budgets, InvocationKey, Limits, NewInvocation, ReplayPolicy, RunContext, RunTerms,
    ScopeFingerprint, ToolEnvelope, fingerprint::canonical_json,
};

/// Longest principal name, in bytes.
pub(crate) const MAX_PRINCIPAL_BYTES: usize = 256;

/// A call that passed preflight: what creating its record needs.
pub(super) struct Admitted {
    pub(super) id: ToolCallId,
    pub(super) tool: Arc<dyn DynTool>,
    pub(super) prepared: Box<dyn PreparedCall>,
    pub(super) limits: Limits,
    pub(super) new: NewInvocation,
}

impl ToolBoundary {
    /// Runs preflight in the documented order: tool call id, run ownership,
    /// run active, deadline, known tool, authorization (and principal),
    /// read-only, request size, then decoding the arguments.
    pub(super) fn preflight(
        &self,
        ctx: &RunContext,
        envelope: ToolEnvelope,
        trail: &mut Trail<'_>,
        span: &tracing::Span,
    ) -> Result<Admitted, ErrorCode> {
        let ToolEnvelope {
            tool_call_id,
            run_id,
            tool_name: _,
            arguments,
        } = envelope;
        let id = ToolCallId::new(tool_call_id).map_err(|_| ErrorCode::InvalidToolCallId)?;
        span.record("tool_call_id", field::display(&id));
        trail.tool_call_id = Some(id.clone());
        if run_id.as_bytes() != ctx.run_id.as_str().as_bytes() {
            return Err(ErrorCode::RunMismatch);
        }
        if !ctx.active {
            return Err(ErrorCode::RunInactive);
        }
        let now = self.inner.clock.now();
        if ctx.deadline.is_some_and(|deadline| now >= deadline) {
            return Err(ErrorCode::RunDeadlineExceeded);
        }
        let tool = self
            .inner
            .tools
            .get(&trail.tool_name)
            .cloned()
            .ok_or(ErrorCode::UnknownTool)?;
        span.record("tool_name", tool.name());
        if !ctx.policy.authorized || !ctx.principal.as_deref().is_none_or(valid_principal) {
            return Err(ErrorCode::Unauthorized);
        }
        if !ctx.policy.read_only || !tool.read_only() {
            return Err(ErrorCode::NotReadOnly);
        }
        // The size first: it costs nothing, and an oversized text is never decoded.
        let limits = self.inner.limits.with(tool.limit_overrides());
        if arguments.len() > limits.max_request_bytes {
            return Err(ErrorCode::RequestTooLarge);
        }
        let prepared = prepare(&tool, &arguments).ok_or(ErrorCode::InvalidInput)?;
        let scope_json = canonical_json(prepared.scope());
        let fingerprint = ScopeFingerprint::of_canonical(tool.name(), &scope_json);
        trail.scope = prepared.scope().clone();
        trail.fingerprint = Some(fingerprint);
        let new = new_invocation(
            ctx,
            &tool,
            &id,
            &limits,
            arguments,
            (scope_json, fingerprint),
            now,
        );
        Ok(Admitted {
            id,
            tool,
            prepared,
            limits,
            new,
        })
    }
}

fn new_invocation(
    ctx: &RunContext,
    tool: &Arc<dyn DynTool>,
    id: &ToolCallId,
    limits: &Limits,
    arguments: String,
    (scope_json, scope_fingerprint): (String, ScopeFingerprint),
    now: Timestamp,
) -> NewInvocation {
    NewInvocation {
        key: InvocationKey::new(ctx.run_id.clone(), id.clone()),
        tool_name: tool.name().to_owned(),
        request_json: arguments,
        scope_json,
        scope_fingerprint,
        created_at: now,
        ttl: limits.record_ttl,
        budgets: Budgets {
            run: ctx.run_budget,
            tool: ctx.tool_budgets.get(tool.name()).copied(),
        },
        claim_scope: tool.replay() == ReplayPolicy::SameScope,
        run: RunTerms {
            max_duration: ctx.max_duration,
            owner: ctx.principal.clone(),
        },
        // Drawn when the create is sent.
        attempt: 0,
    }
}

/// A principal is 1 to [`MAX_PRINCIPAL_BYTES`] bytes with no control character.
pub(crate) fn valid_principal(principal: &str) -> bool {
    !principal.is_empty()
        && principal.len() <= MAX_PRINCIPAL_BYTES
        && !principal.chars().any(char::is_control)
}

/// Decodes the arguments: a JSON object that decodes into the tool's request.
/// A panic while decoding (a request type's own `Deserialize`) is bad input.
fn prepare(tool: &Arc<dyn DynTool>, arguments: &str) -> Option<Box<dyn PreparedCall>> {
    // A struct also decodes from a JSON array; only objects are accepted.
    if !arguments.trim_start().starts_with('{') {
        return None;
    }
    let tool = Arc::clone(tool);
    std::panic::catch_unwind(AssertUnwindSafe(|| tool.prepare(arguments)))
        .ok()
        .flatten()
}
