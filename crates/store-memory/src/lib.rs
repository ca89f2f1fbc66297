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

use aci_contracts::{InvocationStatus, RunId, Timestamp, ToolCallId};
use async_trait::async_trait;
use invocation_core::clock::{add, between};
use invocation_core::{
    Clock, Created, Finalization, InvocationKey, InvocationRecord, InvocationStore, NewInvocation,
    RecordFields, SameScope, ScopeFingerprint, ScopeIndex, StoreError, SystemClock,
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
    runs: HashMap<RunId, RunState>,
    creates_since_sweep: u32,
}

#[derive(Debug, Default)]
struct RunState {
    records: HashMap<ToolCallId, Entry>,
    order: Vec<ToolCallId>,
    counters: Option<Counters>,
    first: HashMap<ScopeFingerprint, ToolCallId>,
    first_ready: HashMap<ScopeFingerprint, ToolCallId>,
    claims: HashMap<ScopeFingerprint, ToolCallId>,
}

#[derive(Debug)]
struct Entry {
    record: InvocationRecord,
    expires_at: Timestamp,
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
        if run.records.is_empty() {
            run.first.clear();
            run.first_ready.clear();
            run.claims.clear();
        }
        !run.records.is_empty() || run.counters.is_some()
    });
    state.creates_since_sweep = 0;
}

impl RunState {
    fn live(&self, id: &ToolCallId, now: Timestamp) -> Option<&Entry> {
        self.records.get(id).filter(|e| e.expires_at > now)
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
        let run = state.runs.entry(new.key.run_id.clone()).or_default();
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
        run.records.insert(
            id,
            Entry {
                record: InvocationRecord::from_new(new),
                expires_at,
            },
        );
        Ok(Created {
            duplicate_of,
            same_scope,
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
        if ready {
            run.first_ready
                .entry(fingerprint)
                .or_insert_with(|| key.tool_call_id.clone());
        }
        if run.claims.get(&fingerprint) == Some(&key.tool_call_id) {
            run.claims.remove(&fingerprint);
        }
        Ok(())
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
