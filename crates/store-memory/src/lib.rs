//! The embedded in-memory [`InvocationStore`]: the default store of the boundary.
//!
//! One mutex guards all runs; no lock is held across an `.await`. TTLs run
//! against the [`Clock`] the store is given (share the boundary's clock), so
//! tests move time without sleeping. Expired records are invisible to every
//! read and are purged on a sweep that runs every [`SWEEP_EVERY`] creations.
//!
//! Semantics match `store-redis` exactly; both pass the conformance suite in
//! `invocation_core::conformance`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use aci_contracts::{ErrorCode, InvocationStatus, RunId, Timestamp, ToolCallId};
use async_trait::async_trait;
use invocation_core::clock::{add, between};
use invocation_core::{
    Clock, Created, Finalization, InvocationKey, InvocationRecord, InvocationStore, NewInvocation,
    RecordFields, RunState, SameScope, ScopeFingerprint, ScopeIndex, Settled, StoreError,
    SystemClock, Unsettled,
};

/// Creations between two sweeps of expired records.
pub const SWEEP_EVERY: u32 = 1024;

/// The in-memory store. Cheap to clone; clones share the records.
#[derive(Debug, Clone)]
pub struct MemoryStore {
    clock: Arc<dyn Clock>,
    state: Arc<Mutex<State>>,
}

#[derive(Debug, Default)]
struct State {
    runs: HashMap<RunId, Run>,
    creates_since_sweep: u32,
}

#[derive(Debug, Default)]
struct Run {
    records: HashMap<ToolCallId, Entry>,
    order: Vec<ToolCallId>,
    counters: Option<Counters>,
    /// Set by the run's first create; lives the record TTL.
    state: Option<(RunState, Timestamp)>,
    first: HashMap<ScopeFingerprint, ToolCallId>,
    first_ready: HashMap<ScopeFingerprint, ToolCallId>,
    claims: HashMap<ScopeFingerprint, ToolCallId>,
}

#[derive(Debug)]
struct Entry {
    record: InvocationRecord,
    expires_at: Timestamp,
    /// The create attempt's token.
    attempt: u64,
}

#[derive(Debug)]
struct Counters {
    run: u32,
    tools: HashMap<String, u32>,
    expires_at: Timestamp,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryStore {
    /// A store on the system clock.
    #[must_use]
    pub fn new() -> Self {
        Self::with_clock(Arc::new(SystemClock))
    }

    /// A store whose TTLs run against `clock`.
    #[must_use]
    pub fn with_clock(clock: Arc<dyn Clock>) -> Self {
        Self {
            clock,
            state: Arc::new(Mutex::new(State::default())),
        }
    }

    /// Number of records held, live or expired but not yet swept.
    #[must_use]
    pub fn stored_records(&self) -> usize {
        self.lock().runs.values().map(|r| r.records.len()).sum()
    }

    /// Removes every expired record, and every run left with nothing live.
    pub fn purge_expired(&self) {
        let now = self.clock.now();
        purge(&mut self.lock(), now);
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave a record half-written:
        // every mutation is a single insert or field update.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn purge(state: &mut State, now: Timestamp) {
    state.runs.retain(|_, run| {
        run.records.retain(|_, entry| entry.expires_at > now);
        run.order.retain(|id| run.records.contains_key(id));
        if run.counters.as_ref().is_some_and(|c| c.expires_at <= now) {
            run.counters = None;
        }
        if run
            .state
            .as_ref()
            .is_some_and(|(_, expires_at)| *expires_at <= now)
        {
            run.state = None;
        }
        if run.records.is_empty() {
            run.first.clear();
            run.first_ready.clear();
            run.claims.clear();
        }
        !run.records.is_empty() || run.counters.is_some() || run.state.is_some()
    });
    state.creates_since_sweep = 0;
}

impl Run {
    fn live(&self, id: &ToolCallId, now: Timestamp) -> Option<&Entry> {
        self.records.get(id).filter(|e| e.expires_at > now)
    }

    fn live_state(&self, now: Timestamp) -> Option<&RunState> {
        self.state
            .as_ref()
            .filter(|(_, expires_at)| *expires_at > now)
            .map(|(state, _)| state)
    }

    /// Releases a finalized record's scope claim, and records a READY one as
    /// its fingerprint's first READY record.
    fn finished(&mut self, id: &ToolCallId, fingerprint: ScopeFingerprint, ready: bool) {
        if ready {
            self.first_ready
                .entry(fingerprint)
                .or_insert_with(|| id.clone());
        }
        if self.claims.get(&fingerprint) == Some(id) {
            self.claims.remove(&fingerprint);
        }
    }
}

#[async_trait]
impl InvocationStore for MemoryStore {
    async fn create(&self, new: NewInvocation) -> Result<Created, StoreError> {
        let now = self.clock.now();
        let mut state = self.lock();
        state.creates_since_sweep += 1;
        if state.creates_since_sweep >= SWEEP_EVERY {
            purge(&mut state, now);
        }
        if new.ttl.is_zero() {
            return Err(StoreError::InvalidTtl);
        }
        let run = state.runs.entry(new.key.run_id.clone()).or_default();
        if let Some(held) = run.live_state(now) {
            if held.owner != new.run.owner {
                return Err(StoreError::RunOwnedByOther);
            }
            if held
                .deadline
                .is_some_and(|deadline| new.created_at >= deadline)
            {
                return Err(StoreError::RunDeadlineExceeded);
            }
        }
        if run.live(&new.key.tool_call_id, now).is_some() {
            return Err(StoreError::Duplicate);
        }
        if run.counters.as_ref().is_some_and(|c| c.expires_at <= now) {
            run.counters = None;
        }
        let (run_count, tool_count) = run.counters.as_ref().map_or((0, 0), |c| {
            (c.run, c.tools.get(&new.tool_name).copied().unwrap_or(0))
        });
        if new.budgets.tool.is_some_and(|b| tool_count >= b) {
            return Err(StoreError::ToolBudgetExhausted);
        }
        if new.budgets.run.is_some_and(|b| run_count >= b) {
            return Err(StoreError::RunBudgetExhausted);
        }

        let id = new.key.tool_call_id.clone();
        let fingerprint = new.scope_fingerprint;
        if run.live_state(now).is_none() {
            let held = RunState {
                started_at: new.created_at,
                deadline: new.run.max_duration.map(|d| add(new.created_at, d)),
                owner: new.run.owner.clone(),
            };
            run.state = Some((held, add(now, new.ttl)));
        }
        let run_state = run.live_state(now).cloned();
        let counters = run.counters.get_or_insert_with(|| Counters {
            run: 0,
            tools: HashMap::new(),
            expires_at: add(now, new.ttl),
        });
        counters.run += 1;
        *counters.tools.entry(new.tool_name.clone()).or_insert(0) += 1;

        let duplicate_of = run.first.get(&fingerprint).cloned();
        if duplicate_of.is_none() {
            run.first.insert(fingerprint, id.clone());
        }
        let same_scope = if new.claim_scope {
            if let Some(ready) = run.first_ready.get(&fingerprint) {
                Some(SameScope::Ready(ready.clone()))
            } else if let Some(leader) = run.claims.get(&fingerprint) {
                Some(SameScope::InFlight(leader.clone()))
            } else {
                run.claims.insert(fingerprint, id.clone());
                None
            }
        } else {
            None
        };
        // A key that expired and is created again moves to the end of the order.
        if run.records.contains_key(&id) {
            run.order.retain(|existing| existing != &id);
        }
        run.order.push(id.clone());
        let expires_at = add(now, new.ttl);
        let attempt = new.attempt;
        run.records.insert(
            id,
            Entry {
                record: InvocationRecord::from_new(new),
                expires_at,
                attempt,
            },
        );
        Ok(Created {
            duplicate_of,
            same_scope,
            run: run_state.ok_or(StoreError::Corrupt { what: "run state" })?,
        })
    }

    async fn finalize(
        &self,
        key: &InvocationKey,
        finalization: Finalization,
    ) -> Result<(), StoreError> {
        let now = self.clock.now();
        let mut state = self.lock();
        let run = state
            .runs
            .get_mut(&key.run_id)
            .ok_or(StoreError::NotFound)?;
        let entry = run
            .records
            .get_mut(&key.tool_call_id)
            .filter(|e| e.expires_at > now)
            .ok_or(StoreError::NotFound)?;
        if entry.record.status != InvocationStatus::Projecting {
            return Err(StoreError::NotProjecting {
                current: entry.record.status,
            });
        }
        let ready = finalization.status() == InvocationStatus::Ready;
        entry.record.apply(finalization);
        let fingerprint = entry.record.scope_fingerprint;
        run.finished(&key.tool_call_id, fingerprint, ready);
        Ok(())
    }

    async fn settle(
        &self,
        call: &Unsettled,
        error_code: ErrorCode,
        finished_at: Timestamp,
    ) -> Result<Settled, StoreError> {
        if call.ttl.is_zero() {
            return Err(StoreError::InvalidTtl);
        }
        let now = self.clock.now();
        let mut state = self.lock();
        let run = state.runs.entry(call.key.run_id.clone()).or_default();
        let finalization = Finalization::Error {
            error_code,
            retryable: error_code.is_transient(),
            raw_json: None,
            finished_at,
            timings: None,
        };
        let id = &call.key.tool_call_id;
        match run.records.get_mut(id).filter(|e| e.expires_at > now) {
            Some(entry) if entry.attempt != call.attempt => Ok(Settled::OtherAttempt),
            Some(entry) if entry.record.status != InvocationStatus::Projecting => {
                Ok(Settled::AlreadyFinal(entry.record.status))
            }
            Some(entry) => {
                entry.record.apply(finalization);
                let fingerprint = entry.record.scope_fingerprint;
                run.finished(id, fingerprint, false);
                Ok(Settled::Finalized)
            }
            None => {
                // A tombstone: not in the order, counted against no budget.
                let mut record = InvocationRecord::from_new(NewInvocation {
                    key: call.key.clone(),
                    tool_name: call.tool_name.clone(),
                    request_json: String::new(),
                    scope_json: String::new(),
                    scope_fingerprint: call.scope_fingerprint,
                    created_at: call.created_at,
                    ttl: call.ttl,
                    budgets: invocation_core::Budgets::default(),
                    claim_scope: false,
                    run: invocation_core::RunTerms::default(),
                    attempt: call.attempt,
                });
                record.request_json = None;
                record.scope_json = None;
                record.apply(finalization);
                run.order.retain(|existing| existing != id);
                run.records.insert(
                    id.clone(),
                    Entry {
                        record,
                        expires_at: add(now, call.ttl),
                        attempt: call.attempt,
                    },
                );
                Ok(Settled::Tombstoned)
            }
        }
    }

    async fn run_state(&self, run_id: &RunId) -> Result<Option<RunState>, StoreError> {
        let now = self.clock.now();
        let state = self.lock();
        Ok(state
            .runs
            .get(run_id)
            .and_then(|run| run.live_state(now))
            .cloned())
    }

    async fn get(
        &self,
        key: &InvocationKey,
        fields: RecordFields,
    ) -> Result<Option<InvocationRecord>, StoreError> {
        let now = self.clock.now();
        let state = self.lock();
        Ok(state
            .runs
            .get(&key.run_id)
            .and_then(|run| run.live(&key.tool_call_id, now))
            .map(|entry| entry.record.select(fields)))
    }

    async fn list(
        &self,
        run_id: &RunId,
        fields: RecordFields,
    ) -> Result<Vec<InvocationRecord>, StoreError> {
        let now = self.clock.now();
        let state = self.lock();
        let Some(run) = state.runs.get(run_id) else {
            return Ok(Vec::new());
        };
        Ok(run
            .order
            .iter()
            .filter_map(|id| run.live(id, now))
            .map(|entry| entry.record.select(fields))
            .collect())
    }

    async fn scope_index(
        &self,
        run_id: &RunId,
        fingerprint: &ScopeFingerprint,
    ) -> Result<ScopeIndex, StoreError> {
        let state = self.lock();
        Ok(state
            .runs
            .get(run_id)
            .map(|run| ScopeIndex {
                first: run.first.get(fingerprint).cloned(),
                first_ready: run.first_ready.get(fingerprint).cloned(),
            })
            .unwrap_or_default())
    }

    async fn remaining_ttl(&self, key: &InvocationKey) -> Result<Option<Duration>, StoreError> {
        let now = self.clock.now();
        let state = self.lock();
        Ok(state
            .runs
            .get(&key.run_id)
            .and_then(|run| run.live(&key.tool_call_id, now))
            .map(|entry| between(now, entry.expires_at)))
    }
}
