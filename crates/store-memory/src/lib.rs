//! The embedded in-memory [`InvocationStore`]: the default store of the boundary.
//!
//! One mutex guards all runs; no lock is held across an `.await`. TTLs run
//! against the [`Clock`] the store is given (share the boundary's clock), so
//! tests move time without sleeping. Expired records are invisible to every
//! read and are purged on a sweep that runs every [`SWEEP_EVERY`] creations.
//!
//! Semantics match `store-redis` exactly; both pass the conformance suite in
//! `invocation_core::conformance`.
//!
//! # Outbox
//!
//! A store made [`with_outbox`](MemoryStore::with_outbox) queues the key of
//! every record that becomes `READY` or `ERROR` (finalize, settle, a settle's
//! tombstone) under the same lock as the transition, and
//! [`outbox`](MemoryStore::outbox) hands the queue to an archiver running in
//! this process, with the contract of [`Outbox`]: an entry leaves only when
//! acknowledged. The queue lives and dies with the process: what it still
//! holds at exit is not archived, and [`Outbox::backlog`] says how much that
//! is, for the process to report.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use aci_contracts::{ErrorCode, InvocationStatus, RunId, Timestamp, ToolCallId};
use async_trait::async_trait;
use invocation_core::clock::{add, between};
use invocation_core::{
    Backlog, Clock, Created, Finalization, InvocationKey, InvocationRecord, InvocationStore,
    MAX_REFUSALS, NewInvocation, Outbox, OutboxEntry, RecordFields, Refusal, RunState, SameScope,
    ScopeFingerprint, ScopeIndex, Settled, StoreError, SystemClock, Unsettled,
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
    /// `Some` when the store keeps an outbox.
    outbox: Option<Queue>,
}

/// The outbox queue, in finalization order.
#[derive(Debug, Default)]
struct Queue {
    entries: BTreeMap<u64, Queued>,
    next: u64,
}

#[derive(Debug)]
struct Queued {
    key: InvocationKey,
    enqueued_at: Timestamp,
    /// When a consumer last took it.
    taken_at: Option<Timestamp>,
}

impl State {
    fn enqueue(&mut self, key: &InvocationKey, now: Timestamp) {
        if let Some(queue) = &mut self.outbox {
            queue.entries.insert(
                queue.next,
                Queued {
                    key: key.clone(),
                    enqueued_at: now,
                    taken_at: None,
                },
            );
            queue.next += 1;
        }
    }
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
    /// Calls refused before they had a record, oldest first, and when they
    /// expire (the last note's TTL).
    refusals: Option<(std::collections::VecDeque<Refusal>, Timestamp)>,
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

    /// A store on `clock` that queues every finalized record for an
    /// archiver in this process ([`outbox`](Self::outbox)).
    #[must_use]
    pub fn with_outbox(clock: Arc<dyn Clock>) -> Self {
        let store = Self::with_clock(clock);
        store.lock().outbox = Some(Queue::default());
        store
    }

    /// The outbox of finalized records (empty for ever unless the store was
    /// made [`with_outbox`](Self::with_outbox)).
    #[must_use]
    pub fn outbox(&self) -> MemoryOutbox {
        MemoryOutbox {
            store: self.clone(),
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
        if run
            .refusals
            .as_ref()
            .is_some_and(|(_, expires_at)| *expires_at <= now)
        {
            run.refusals = None;
        }
        if run.records.is_empty() {
            run.first.clear();
            run.first_ready.clear();
            run.claims.clear();
        }
        !run.records.is_empty()
            || run.counters.is_some()
            || run.state.is_some()
            || run.refusals.is_some()
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
        state.enqueue(key, now);
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
                state.enqueue(&call.key, now);
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
                state.enqueue(&call.key, now);
                Ok(Settled::Tombstoned)
            }
        }
    }

    async fn note_refusal(
        &self,
        run_id: &RunId,
        principal: Option<&str>,
        refusal: &Refusal,
        ttl: Duration,
    ) -> Result<(), StoreError> {
        let now = self.clock.now();
        let mut state = self.lock();
        let run = state.runs.entry(run_id.clone()).or_default();
        if let Some(owner) = run.live_state(now).and_then(|s| s.owner.as_deref())
            && Some(owner) != principal
        {
            return Ok(());
        }
        let expires_at = add(now, ttl);
        let (list, expiry) = match &mut run.refusals {
            Some((list, expiry)) if *expiry > now => (list, expiry),
            slot => {
                let fresh = slot.insert((std::collections::VecDeque::new(), expires_at));
                (&mut fresh.0, &mut fresh.1)
            }
        };
        list.push_back(refusal.clone());
        while list.len() > MAX_REFUSALS {
            list.pop_front();
        }
        *expiry = expires_at;
        Ok(())
    }

    async fn refusals(&self, run_id: &RunId) -> Result<Vec<Refusal>, StoreError> {
        let now = self.clock.now();
        let state = self.lock();
        Ok(state
            .runs
            .get(run_id)
            .and_then(|run| run.refusals.as_ref())
            .filter(|(_, expires_at)| *expires_at > now)
            .map(|(list, _)| list.iter().cloned().collect())
            .unwrap_or_default())
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

/// The outbox of a [`MemoryStore`]; see the crate docs.
#[derive(Debug, Clone)]
pub struct MemoryOutbox {
    store: MemoryStore,
}

#[async_trait]
impl Outbox for MemoryOutbox {
    async fn take(
        &self,
        _consumer: &str,
        max: usize,
        reclaim_after: Duration,
    ) -> Result<Vec<OutboxEntry>, StoreError> {
        let now = self.store.clock.now();
        let mut state = self.store.lock();
        let Some(queue) = &mut state.outbox else {
            return Ok(Vec::new());
        };
        let free = |queued: &Queued| {
            queued
                .taken_at
                .is_none_or(|at| between(at, now) >= reclaim_after)
        };
        let mut taken = Vec::new();
        for (sequence, queued) in &mut queue.entries {
            if taken.len() >= max {
                break;
            }
            if free(queued) {
                queued.taken_at = Some(now);
                taken.push(OutboxEntry {
                    key: queued.key.clone(),
                    enqueued_at: queued.enqueued_at,
                    receipt: sequence.to_string(),
                });
            }
        }
        Ok(taken)
    }

    async fn ack(&self, entries: &[OutboxEntry]) -> Result<(), StoreError> {
        let mut state = self.store.lock();
        if let Some(queue) = &mut state.outbox {
            for entry in entries {
                let sequence: u64 = entry.receipt.parse().map_err(|_| StoreError::Corrupt {
                    what: "outbox receipt",
                })?;
                queue.entries.remove(&sequence);
            }
        }
        Ok(())
    }

    async fn backlog(&self) -> Result<Backlog, StoreError> {
        let state = self.store.lock();
        Ok(state
            .outbox
            .as_ref()
            .map_or_else(Backlog::default, |queue| Backlog {
                pending: u64::try_from(queue.entries.len()).unwrap_or(u64::MAX),
                oldest: queue.entries.values().next().map(|q| q.enqueued_at),
            }))
    }
}
