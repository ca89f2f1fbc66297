//! The guard that no created record outlives its call in `PROJECTING`, and
//! the settlements it hands to tasks of their own.
//!
//! A future may be dropped at any `.await` (`select!`, an outer timeout, a
//! server shutting down). The guard is armed before the record's create is
//! sent and disarmed once the call's outcome is settled; dropped while armed,
//! it hands [`InvocationStore::settle`] with `EXECUTION_ABANDONED` to a task
//! on the current Tokio runtime that does not depend on the dropped future,
//! tracked so a server can wait for it ([`ToolBoundary::drain_abandoned`]).
//!
//! Settling is keyed by the create's attempt token, so it can only ever
//! finalize the record this call created, never an earlier call's record
//! with the same id (a duplicate).

use std::sync::Arc;
use std::time::{Duration, Instant};

use aci_contracts::ErrorCode;

use super::{Inner, log_store_error};
use crate::{Clock, InvocationStore, Settled, Unsettled};

/// First pause between two settle attempts while the store is unreachable.
const RETRY_START: Duration = Duration::from_millis(20);
/// Longest pause between two settle attempts.
const RETRY_MAX: Duration = Duration::from_secs(1);

/// Settles its call with `EXECUTION_ABANDONED` if dropped while armed.
pub(super) struct Guard {
    inner: Arc<Inner>,
    call: Option<Unsettled>,
}

impl Guard {
    /// Armed: dropping it now settles `call`.
    pub(super) const fn arm(inner: Arc<Inner>, call: Unsettled) -> Self {
        Self {
            inner,
            call: Some(call),
        }
    }

    /// The call it guards, while armed.
    pub(super) const fn call(&self) -> Option<&Unsettled> {
        self.call.as_ref()
    }

    /// Disarms it: the call's outcome is settled, or handed to a task.
    pub(super) fn disarm(&mut self) {
        self.call = None;
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(call) = self.call.take() {
            tracing::warn!("tool call abandoned before it finished; finalizing its record");
            settle_later(&self.inner, call, ErrorCode::ExecutionAbandoned);
        }
    }
}

/// One settle attempt now; while the store is unreachable, more on a task
/// of their own. `None` when the outcome is not known yet.
pub(super) async fn settle_now_or_later(
    inner: &Arc<Inner>,
    call: Unsettled,
    code: ErrorCode,
) -> Option<Settled> {
    match inner.store.settle(&call, code, inner.clock.now()).await {
        Ok(settled) => Some(settled),
        Err(error) if error.is_transient() => {
            log_store_error("settle", &error);
            settle_later(inner, call, code);
            None
        }
        Err(error) => {
            log_store_error("settle", &error);
            None
        }
    }
}

/// Settles `call` on a tracked task of the current runtime.
pub(super) fn settle_later(inner: &Arc<Inner>, call: Unsettled, code: ErrorCode) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        tracing::error!(
            "no Tokio runtime to settle an unfinished call on; its record stays PROJECTING until `recover`"
        );
        return;
    };
    let store = Arc::clone(&inner.store);
    let clock = Arc::clone(&inner.clock);
    inner
        .settlements
        .spawn_on(settle_until_done(store, clock, call, code), &runtime);
}

/// Retries `settle` with backoff while the store is unreachable, for at most
/// the record TTL (after it, there is nothing left to settle).
async fn settle_until_done(
    store: Arc<dyn InvocationStore>,
    clock: Arc<dyn Clock>,
    call: Unsettled,
    code: ErrorCode,
) {
    let give_up = Instant::now() + call.ttl;
    let mut delay = RETRY_START;
    loop {
        match store.settle(&call, code, clock.now()).await {
            Ok(settled) => {
                tracing::info!(?settled, code = code.as_str(), "unfinished call settled");
                return;
            }
            Err(error) if error.is_transient() && Instant::now() + delay < give_up => {
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(RETRY_MAX);
            }
            Err(error) => {
                log_store_error("settle", &error);
                return;
            }
        }
    }
}
