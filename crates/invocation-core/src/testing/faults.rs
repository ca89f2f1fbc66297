//! A fault-injecting store decorator: [`FaultyStore`] wraps a real
//! [`InvocationStore`] and makes its writes fail the way a network does.
//!
//! A write (`create`, `finalize`, `settle`) may answer, stall, or lose its
//! answer, either after the inner store applied it (a response timeout: the
//! outcome is unknown to the caller) or before the inner store saw it. A lost
//! answer is [`StoreError::unavailable`], as a timed-out round trip is. Reads
//! always pass through unchanged, so a test inspects the real state.
//!
//! Which fault a write gets is planned, in this order:
//! 1. [`scripted`](FaultyStore::scripted): writes of any kind take the next
//!    fault of a list, until it runs out;
//! 2. [`first`](FaultyStore::first): the first `n` unscripted writes of one
//!    kind get a fault;
//! 3. [`always`](FaultyStore::always): every other write of that kind gets a
//!    fault (by default [`Fault::Answer`]).
//!
//! ```
//! # use invocation_core::testing::faults::{Fault, FaultyStore, Write};
//! # #[derive(Debug)] struct Real;
//! # let real = Real;
//! // Every create is applied and its answer lost; the first 5 settles fail
//! // before reaching the store, later ones go through.
//! let store = FaultyStore::new(real)
//!     .always(Write::Create, Fault::ApplyThenLose)
//!     .first(Write::Settle, 5, Fault::LoseBeforeApplying);
//! # let _ = store;
//! ```

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use aci_contracts::{ErrorCode, RunId, Timestamp};
use async_trait::async_trait;

use crate::{
    Created, Finalization, InvocationKey, InvocationRecord, InvocationStore, NewInvocation,
    RecordFields, RunState, ScopeFingerprint, ScopeIndex, Settled, StoreError, Unsettled,
};

/// What the decorator does to one write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Fault {
    /// The inner store runs the write and its answer is returned.
    #[default]
    Answer,
    /// As [`Answer`](Self::Answer), after a stall (see
    /// [`FaultyStore::stall`]): a future may be dropped while it waits.
    Stall,
    /// The inner store runs the write, then, after a stall, the caller hears
    /// `Unavailable` whatever the store answered: a reply lost after the
    /// write was applied.
    ApplyThenLose,
    /// The caller hears `Unavailable` at once; the inner store never sees the
    /// write.
    LoseBeforeApplying,
}

/// The writes a fault may hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Write {
    /// [`InvocationStore::create`].
    Create,
    /// [`InvocationStore::finalize`].
    Finalize,
    /// [`InvocationStore::settle`].
    Settle,
}

impl Write {
    const fn index(self) -> usize {
        match self {
            Self::Create => 0,
            Self::Finalize => 1,
            Self::Settle => 2,
        }
    }
}

/// The plan for one kind of write.
#[derive(Debug, Clone, Copy, Default)]
struct Rule {
    /// Unscripted writes of this kind that still get `first`.
    first_left: usize,
    first: Fault,
    always: Fault,
}

#[derive(Debug, Default)]
struct Plan {
    script: VecDeque<Fault>,
    rules: [Rule; 3],
}

/// A real store whose writes fail as planned (see the module docs).
#[derive(Debug)]
pub struct FaultyStore<S> {
    inner: S,
    stall: Duration,
    plan: Mutex<Plan>,
    /// Writes, per [`Write::index`], that reached the inner store.
    reached: [AtomicUsize; 3],
}

/// The error a lost answer is.
fn lost() -> StoreError {
    StoreError::unavailable(std::io::Error::other("reply lost"))
}

impl<S> FaultyStore<S> {
    /// `inner`, answering every write, stalling 2 ms where a fault stalls.
    pub fn new(inner: S) -> Self {
        Self {
            inner,
            stall: Duration::from_millis(2),
            plan: Mutex::new(Plan::default()),
            reached: Default::default(),
        }
    }

    /// Every `write` not planned otherwise gets `fault`.
    #[must_use]
    pub fn always(mut self, write: Write, fault: Fault) -> Self {
        self.plan_mut().rules[write.index()].always = fault;
        self
    }

    /// The first `n` unscripted `write`s get `fault`, later ones the
    /// [`always`](Self::always) fault.
    #[must_use]
    pub fn first(mut self, write: Write, n: usize, fault: Fault) -> Self {
        let rule = &mut self.plan_mut().rules[write.index()];
        rule.first_left = n;
        rule.first = fault;
        self
    }

    /// Writes of any kind take their fault from `faults`, in order, until it
    /// runs out; then the per-kind rules apply.
    #[must_use]
    pub fn scripted(mut self, faults: impl IntoIterator<Item = Fault>) -> Self {
        self.plan_mut().script.extend(faults);
        self
    }

    /// How long [`Fault::Stall`] and [`Fault::ApplyThenLose`] wait.
    #[must_use]
    pub const fn stall(mut self, stall: Duration) -> Self {
        self.stall = stall;
        self
    }

    /// The store underneath, untouched by faults (a later, healthy process
    /// would see it so).
    pub const fn inner(&self) -> &S {
        &self.inner
    }

    /// How many `write`s reached the inner store (whether or not their
    /// answer was then lost).
    pub fn reached(&self, write: Write) -> usize {
        self.reached[write.index()].load(Ordering::SeqCst)
    }

    fn plan_mut(&mut self) -> &mut Plan {
        self.plan.get_mut().unwrap_or_else(PoisonError::into_inner)
    }

    fn next(&self, write: Write) -> Fault {
        // Nothing panics while holding the lock; a poisoned plan is still one.
        let mut plan = self.plan.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(fault) = plan.script.pop_front() {
            return fault;
        }
        let rule = &mut plan.rules[write.index()];
        if rule.first_left > 0 {
            rule.first_left -= 1;
            rule.first
        } else {
            rule.always
        }
    }

    /// Runs `apply` (the inner write) under the next planned fault.
    async fn write<T, F>(&self, write: Write, apply: F) -> Result<T, StoreError>
    where
        F: Future<Output = Result<T, StoreError>>,
    {
        let fault = self.next(write);
        if fault == Fault::LoseBeforeApplying {
            return Err(lost());
        }
        if fault == Fault::Stall {
            tokio::time::sleep(self.stall).await;
        }
        self.reached[write.index()].fetch_add(1, Ordering::SeqCst);
        let answer = apply.await;
        if fault == Fault::ApplyThenLose {
            drop(answer);
            tokio::time::sleep(self.stall).await;
            return Err(lost());
        }
        answer
    }
}

#[async_trait]
impl<S: InvocationStore> InvocationStore for FaultyStore<S> {
    async fn create(&self, new: NewInvocation) -> Result<Created, StoreError> {
        self.write(Write::Create, self.inner.create(new)).await
    }
    async fn finalize(&self, key: &InvocationKey, f: Finalization) -> Result<(), StoreError> {
        self.write(Write::Finalize, self.inner.finalize(key, f))
            .await
    }
    async fn settle(
        &self,
        call: &Unsettled,
        code: ErrorCode,
        at: Timestamp,
    ) -> Result<Settled, StoreError> {
        self.write(Write::Settle, self.inner.settle(call, code, at))
            .await
    }
    async fn run_state(&self, run_id: &RunId) -> Result<Option<RunState>, StoreError> {
        self.inner.run_state(run_id).await
    }
    async fn note_refusal(
        &self,
        run_id: &RunId,
        principal: Option<&str>,
        refusal: &crate::Refusal,
        ttl: Duration,
    ) -> Result<(), StoreError> {
        self.inner
            .note_refusal(run_id, principal, refusal, ttl)
            .await
    }
    async fn refusals(&self, run_id: &RunId) -> Result<Vec<crate::Refusal>, StoreError> {
        self.inner.refusals(run_id).await
    }
    async fn get(
        &self,
        key: &InvocationKey,
        fields: RecordFields,
    ) -> Result<Option<InvocationRecord>, StoreError> {
        self.inner.get(key, fields).await
    }
    async fn list(
        &self,
        run_id: &RunId,
        fields: RecordFields,
    ) -> Result<Vec<InvocationRecord>, StoreError> {
        self.inner.list(run_id, fields).await
    }
    async fn scope_index(
        &self,
        run_id: &RunId,
        fingerprint: &ScopeFingerprint,
    ) -> Result<ScopeIndex, StoreError> {
        self.inner.scope_index(run_id, fingerprint).await
    }
    async fn remaining_ttl(&self, key: &InvocationKey) -> Result<Option<Duration>, StoreError> {
        self.inner.remaining_ttl(key).await
    }
}
