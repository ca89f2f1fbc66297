//! [`StoreToolJournal`]: bob-core's `ToolJournalPort` on any [`InvocationStore`].

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use aci_contracts::{ErrorCode, ErrorResult, EvidenceStatus, InvocationStatus, RunId, ToolCallId};
use bob_core::{JournalEntry, SessionId, ToolJournalPort};
use invocation_core::fingerprint::canonical_json;
use invocation_core::{
    Budgets, Clock, Finalization, InvocationKey, InvocationRecord, InvocationStore, Journal,
    Limits, NewInvocation, ReadyEvidence, RecordFields, RunContext, RunTerms, ScopeFingerprint,
    StoreError, SystemClock, ToolBoundary,
};
use serde_json::Value;

use crate::fingerprint::{call_fingerprint, parse_fingerprint, split_bob_fingerprint};
use crate::{Error, run_id_for_session};

/// The first bytes of every journal entry's record id.
pub const ENTRY_ID_PREFIX: &str = "bobj-";

/// Most attempts of one call journaled per session: each transient failure
/// takes one, a success or a replayable failure ends the series.
pub const MAX_ATTEMPTS: u32 = 16;

const POLL_START: Duration = Duration::from_millis(2);
const POLL_MAX: Duration = Duration::from_millis(50);

/// bob-core's [`ToolJournalPort`] on any [`InvocationStore`] (memory, Redis,
/// Redis Cluster): durable, canonical, bounded and safe under concurrency.
///
/// Each entry is one canonical invocation record of the session's run
/// ([`run_id_for_session`]), under the id `bobj-<fingerprint>-<attempt>`
/// (ids with that prefix are the journal's: the framework should not use
/// them as call ids). Its scope fingerprint is domain-separated, so the
/// boundary's same-scope replay never takes a journal entry for a READY
/// record of its own.
///
/// # Behavior
/// - `append` records a finished call. The fingerprint is the canonical
///   SHA-256 of tool name and arguments ([`crate::fingerprint`]); the entry's
///   `call_fingerprint` (bob's `name:json` text, or 64 hex digits) must belong
///   to its tool name and arguments. Appending a call that already has an
///   entry (a success or a replayable failure) adds nothing: concurrent
///   appends of one call give one entry. A transient failure is recorded as
///   an attempt of its own, so a later success is recorded beside it.
/// - `lookup` returns the call's recorded success, or its recorded failure
///   when that failure is a deterministic consequence of the request
///   (`INVALID_INPUT`, `REQUEST_TOO_LARGE`, `NOT_READ_ONLY`, `QUERY_REJECTED`).
///   Transient failures (timeouts, `STORE_UNAVAILABLE`, `EXECUTION_FAILED`,
///   abandoned calls, bob's own `{"error": …}` outputs) and failures that
///   depend on the run's state are never replayed.
/// - `lookup` of a call that has no entry, given bob's `name:json` text,
///   **claims** it: until the claimant appends (or [`claim_wait`](Self::claim_wait)
///   passes), concurrent lookups of the same call wait and then replay the
///   claimant's result, so concurrent duplicates execute once. A lookup by
///   hex fingerprint only reads.
/// - `entries` lists the session's finished journal entries in the order
///   they were first claimed or appended; claims still in flight are left
///   out. Records the boundary itself made are read with
///   [`invocation_core::Journal`].
/// - Records present [`with_run_terms`](Self::with_run_terms) to the store:
///   the run's owner and duration, which its first create fixes.
/// - Entries expire with the record TTL ([`Limits::record_ttl`]); no read
///   extends it. Size limits: arguments over `max_request_bytes`, a result over
///   `max_agent_result_bytes` (a failure's output over `max_raw_bytes`), or an
///   entry over `max_record_bytes` is refused and nothing is written.
/// - Arguments and results come back as JSON values equal to the appended
///   ones; `call_fingerprint` comes back in bob's `name:json` form and
///   `timestamp_ms` is the journal clock's time of the append.
///
/// # Errors
/// bob's `StoreError::Other` holding this crate's [`Error`]:
/// `INVALID_SESSION`, `INVALID_FINGERPRINT`, `FINGERPRINT_MISMATCH`,
/// `REQUEST_TOO_LARGE`, `RESULT_TOO_LARGE`, `TOO_MANY_ATTEMPTS`, and the
/// store's codes (`STORE_UNAVAILABLE`, …).
#[derive(Clone)]
pub struct StoreToolJournal {
    store: Arc<dyn InvocationStore>,
    clock: Arc<dyn Clock>,
    limits: Limits,
    claim_wait: Duration,
    run_terms: RunTerms,
}

impl fmt::Debug for StoreToolJournal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoreToolJournal")
            .field("store", &self.store)
            .field("limits", &self.limits)
            .field("claim_wait", &self.claim_wait)
            .field("run_terms", &self.run_terms)
            .finish_non_exhaustive()
    }
}

/// What a finished call becomes.
enum Outcome {
    Ready {
        evidence: ReadyEvidence,
        result_json: String,
    },
    Failed {
        code: ErrorCode,
        output_json: String,
    },
}

impl StoreToolJournal {
    /// A journal on `store` with the system clock and [`Limits::default`]
    /// (give a [`MemoryStore`](https://docs.rs/store-memory) the same clock).
    #[must_use]
    pub fn new(store: Arc<dyn InvocationStore>) -> Self {
        let limits = Limits::default();
        Self {
            store,
            clock: Arc::new(SystemClock),
            claim_wait: limits.timeout,
            limits,
            run_terms: RunTerms::default(),
        }
    }

    /// A journal on `boundary`'s store, with its clock and limits.
    #[must_use]
    pub fn for_boundary(boundary: &ToolBoundary) -> Self {
        let limits = *boundary.limits();
        Self {
            store: Arc::clone(boundary.store()),
            clock: Arc::clone(boundary.clock()),
            claim_wait: limits.timeout,
            limits,
            run_terms: RunTerms::default(),
        }
    }

    /// The run terms the journal's records present to the store (default:
    /// none). The first create of a run fixes its owner and duration for every
    /// later one, the boundary's included, so give the journal the terms of
    /// the harness's [`RunContext`] for the session ([`for_run`](Self::for_run));
    /// a journal without an owner is refused (`RUN_OWNED_BY_OTHER`) on a run
    /// that has one, and vice versa.
    #[must_use]
    pub fn with_run_terms(mut self, terms: RunTerms) -> Self {
        self.run_terms = terms;
        self
    }

    /// [`with_run_terms`](Self::with_run_terms) from a run context: its
    /// `max_duration` and `principal`.
    #[must_use]
    pub fn for_run(self, run: &RunContext) -> Self {
        self.with_run_terms(RunTerms {
            max_duration: run.max_duration,
            owner: run.principal.clone(),
        })
    }

    /// The clock for timestamps and claim ages.
    #[must_use]
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Size limits and the record TTL (`timeout` is unused; see
    /// [`claim_wait`](Self::claim_wait)).
    #[must_use]
    pub const fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// How long a claim holds (default: the limits' tool timeout): a lookup
    /// waits at most until the claim is this old, then treats it as abandoned
    /// and lets its caller execute.
    #[must_use]
    pub const fn claim_wait(mut self, wait: Duration) -> Self {
        self.claim_wait = wait;
        self
    }

    /// Records a finished call (see the type's `# Behavior`).
    ///
    /// # Errors
    /// See the type's `# Errors`.
    pub async fn append_entry(&self, entry: JournalEntry) -> Result<(), Error> {
        let run = run_id_for_session(&entry.session_id)?;
        let fingerprint = call_fingerprint(&entry.tool_name, &entry.arguments);
        if parse_fingerprint(&entry.call_fingerprint)? != fingerprint {
            return Err(Error::FingerprintMismatch);
        }
        let checked = self
            .request_json(&entry.arguments)
            .and_then(|request| Ok((self.outcome(&entry, request.len())?, request)));
        let (outcome, request_json) = match checked {
            Ok(checked) => checked,
            Err(error) => {
                self.release_claims(&run, &fingerprint, &error).await;
                return Err(error);
            }
        };
        let mut steps = 0;
        let mut attempt = 0;
        while attempt < MAX_ATTEMPTS && steps < 4 * MAX_ATTEMPTS {
            steps += 1;
            let key = slot(&run, &fingerprint, attempt)?;
            match self.store.get(&key, RecordFields::Metadata).await? {
                None => {
                    let new = self.new_record(
                        key.clone(),
                        &entry.tool_name,
                        &entry.arguments,
                        request_json.clone(),
                    );
                    match self.store.create(new).await {
                        Ok(_) => {}
                        Err(StoreError::Duplicate) => continue,
                        Err(error) => return Err(error.into()),
                    }
                    if self.finalize(&key, &outcome).await? {
                        return Ok(());
                    }
                }
                Some(record) => match record.status {
                    InvocationStatus::Projecting => {
                        if self.finalize(&key, &outcome).await? {
                            return Ok(());
                        }
                    }
                    InvocationStatus::Ready => return Ok(()),
                    InvocationStatus::Error if replays(record.error_code) => return Ok(()),
                    InvocationStatus::Error => attempt += 1,
                },
            }
        }
        Err(Error::TooManyAttempts)
    }

    /// The call's replayable entry, if any (see the type's `# Behavior`).
    ///
    /// # Errors
    /// See the type's `# Errors`.
    pub async fn lookup_entry(
        &self,
        session_id: &SessionId,
        fingerprint: &str,
    ) -> Result<Option<JournalEntry>, Error> {
        let run = run_id_for_session(session_id)?;
        let parsed = parse_fingerprint(fingerprint)?;
        // Only bob's text says which call it is, so only it can claim.
        let claim = split_bob_fingerprint(fingerprint).and_then(|(name, arguments)| {
            let request_json = self.request_json(&arguments).ok()?;
            Some((name.to_owned(), arguments, request_json))
        });
        let mut steps = 0;
        let mut attempt = 0;
        let mut delay = POLL_START;
        let started = tokio::time::Instant::now();
        while attempt < MAX_ATTEMPTS && steps < 4 * MAX_ATTEMPTS {
            let key = slot(&run, &parsed, attempt)?;
            let Some(record) = self.store.get(&key, RecordFields::All).await? else {
                steps += 1;
                let Some((name, arguments, request_json)) = &claim else {
                    return Ok(None);
                };
                let new = self.new_record(key, name, arguments, request_json.clone());
                match self.store.create(new).await {
                    // Claimed: the caller executes and appends.
                    Ok(_) => return Ok(None),
                    Err(StoreError::Duplicate) => continue,
                    Err(error) => return Err(error.into()),
                }
            };
            match record.status {
                InvocationStatus::Ready => return Ok(Some(to_entry(record))),
                InvocationStatus::Error if replays(record.error_code) => {
                    return Ok(Some(to_entry(record)));
                }
                InvocationStatus::Error => {
                    steps += 1;
                    attempt += 1;
                }
                InvocationStatus::Projecting => {
                    // The claim's age on the journal clock, and this wait on
                    // the local one (a clock that stands still ends it too).
                    let age = invocation_core::clock::between(record.created_at, self.clock.now());
                    let waited = started.elapsed();
                    if age >= self.claim_wait || waited >= self.claim_wait {
                        // Abandoned claim: execute; the append finalizes it.
                        return Ok(None);
                    }
                    let left = (self.claim_wait - age).min(self.claim_wait - waited);
                    tokio::time::sleep(delay.min(left)).await;
                    delay = (delay * 2).min(POLL_MAX);
                }
            }
        }
        Ok(None)
    }

    /// The session's finished entries in order (see the type's `# Behavior`).
    ///
    /// # Errors
    /// See the type's `# Errors`.
    pub async fn list_entries(&self, session_id: &SessionId) -> Result<Vec<JournalEntry>, Error> {
        let run = run_id_for_session(session_id)?;
        Ok(self
            .store
            .list(&run, RecordFields::All)
            .await?
            .into_iter()
            .filter(|r| {
                r.key.tool_call_id.as_str().starts_with(ENTRY_ID_PREFIX)
                    && r.status != InvocationStatus::Projecting
            })
            .map(to_entry)
            .collect())
    }

    /// Crash recovery for a session whose harness is gone: claims at least
    /// `older_than` old (`Duration::ZERO`: all of them) become `ERROR/EXECUTION_ABANDONED` (never replayed, so the
    /// next lookup claims the call again and its caller executes it). Returns
    /// the record ids it moved. Also moves the run's other PROJECTING records
    /// of that age, as [`Journal::recover`] does.
    ///
    /// # Errors
    /// See the type's `# Errors`.
    pub async fn recover(
        &self,
        session_id: &SessionId,
        older_than: Duration,
    ) -> Result<Vec<ToolCallId>, Error> {
        let run = run_id_for_session(session_id)?;
        let now = self.clock.now();
        // Records at least `older_than` old: created before `now - older_than + 1 ms`.
        let cutoff = aci_contracts::Timestamp::from_unix_millis(
            now.unix_millis()
                .saturating_add(1)
                .saturating_sub(i64::try_from(older_than.as_millis()).unwrap_or(i64::MAX)),
        );
        Ok(
            Journal::new(Arc::clone(&self.store), Arc::clone(&self.clock))
                .recover(&run, cutoff)
                .await?,
        )
    }

    /// After a refused append: a claim of the call still in flight becomes a
    /// failed attempt (`RESULT_TOO_LARGE`, never replayed),
    /// so lookups stop waiting for it. Best effort.
    async fn release_claims(&self, run: &RunId, fingerprint: &ScopeFingerprint, error: &Error) {
        // RESULT_TOO_LARGE for both: the entry did not fit, whatever the tool
        // said. (REQUEST_TOO_LARGE would replay, as if the tool had refused.)
        if !matches!(error, Error::RequestTooLarge | Error::ResultTooLarge) {
            return;
        }
        let code = ErrorCode::ResultTooLarge;
        for attempt in 0..MAX_ATTEMPTS {
            let Ok(key) = slot(run, fingerprint, attempt) else {
                return;
            };
            match self.store.get(&key, RecordFields::Metadata).await {
                Ok(Some(record)) if record.status == InvocationStatus::Projecting => {
                    let finalization = Finalization::Error {
                        error_code: code,
                        retryable: code.is_transient(),
                        raw_json: None,
                        finished_at: self.clock.now(),
                        timings: None,
                    };
                    let _ = self.store.finalize(&key, finalization).await;
                    return;
                }
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => return,
            }
        }
    }

    /// Finalizes a slot; `Ok(false)` when someone else finished (or it
    /// expired) first, so the caller looks again.
    async fn finalize(&self, key: &InvocationKey, outcome: &Outcome) -> Result<bool, Error> {
        let finished_at = self.clock.now();
        let finalization = match outcome {
            Outcome::Ready {
                evidence,
                result_json,
            } => Finalization::Ready {
                evidence: *evidence,
                // The journal sees only what the model saw; there is no raw response.
                raw_json: "null".to_owned(),
                agent_result_json: result_json.clone(),
                redactions: Default::default(),
                replayed_from: None,
                finished_at,
                timings: None,
            },
            Outcome::Failed { code, output_json } => Finalization::Error {
                error_code: *code,
                retryable: code.is_transient(),
                raw_json: Some(output_json.clone()),
                finished_at,
                timings: None,
            },
        };
        match self.store.finalize(key, finalization).await {
            Ok(()) => Ok(true),
            Err(StoreError::NotProjecting { .. } | StoreError::NotFound) => Ok(false),
            Err(error) => Err(error.into()),
        }
    }

    fn request_json(&self, arguments: &Value) -> Result<String, Error> {
        let text = serde_json::to_string(arguments).map_err(|_| Error::RequestTooLarge)?;
        if text.len() > self.limits.max_request_bytes {
            return Err(Error::RequestTooLarge);
        }
        Ok(text)
    }

    fn outcome(&self, entry: &JournalEntry, request_bytes: usize) -> Result<Outcome, Error> {
        let json = serde_json::to_string(&entry.result).map_err(|_| Error::ResultTooLarge)?;
        let (outcome, limit) = if entry.is_error {
            let code = entry
                .result
                .get("error_code")
                .and_then(Value::as_str)
                .and_then(ErrorCode::parse)
                .unwrap_or_else(|| bob_error_code(&entry.result));
            (
                Outcome::Failed {
                    code,
                    output_json: json,
                },
                self.limits.max_raw_bytes,
            )
        } else {
            let evidence = match entry.result.get("evidence_status").and_then(Value::as_str) {
                Some("NO_EVIDENCE") => ReadyEvidence::NoEvidence,
                _ => ReadyEvidence::Found,
            };
            (
                Outcome::Ready {
                    evidence,
                    result_json: json,
                },
                self.limits.max_agent_result_bytes,
            )
        };
        let own = match &outcome {
            Outcome::Ready { result_json, .. } => result_json.len(),
            Outcome::Failed { output_json, .. } => output_json.len(),
        };
        // A READY record also stores the 4-byte `null` raw response.
        let raw = if entry.is_error { 0 } else { "null".len() };
        if own > limit || request_bytes + own + raw > self.limits.max_record_bytes {
            return Err(Error::ResultTooLarge);
        }
        Ok(outcome)
    }

    fn new_record(
        &self,
        key: InvocationKey,
        tool_name: &str,
        arguments: &Value,
        request_json: String,
    ) -> NewInvocation {
        let scope_json = canonical_json(arguments);
        // The record's scope fingerprint is domain-separated from the
        // boundary's (`bobj-` before the tool name): the store's scope index
        // must never offer a journal entry to the boundary's same-scope replay
        // (its result is bob's output, not the tool's bounded result). The
        // journal finds its entries by id, not by this index.
        let journal_scope = format!("{ENTRY_ID_PREFIX}{tool_name}");
        NewInvocation {
            scope_fingerprint: ScopeFingerprint::of_canonical(&journal_scope, &scope_json),
            key,
            tool_name: tool_name.to_owned(),
            request_json,
            scope_json,
            created_at: self.clock.now(),
            ttl: self.limits.record_ttl,
            budgets: Budgets::default(),
            claim_scope: false,
            run: self.run_terms.clone(),
            attempt: fastrand::u64(..),
        }
    }
}

/// The record key of attempt `attempt` of a call.
fn slot(run: &RunId, fingerprint: &ScopeFingerprint, attempt: u32) -> Result<InvocationKey, Error> {
    let id = ToolCallId::new(format!("{ENTRY_ID_PREFIX}{fingerprint}-{attempt}"))
        .map_err(|_| Error::InvalidFingerprint)?;
    Ok(InvocationKey::new(run.clone(), id))
}

/// Failures that follow from the request alone, so replaying them is sound.
fn replays(code: Option<ErrorCode>) -> bool {
    matches!(
        code,
        Some(
            ErrorCode::InvalidInput
                | ErrorCode::RequestTooLarge
                | ErrorCode::NotReadOnly
                | ErrorCode::QueryRejected
        )
    )
}

/// The code of one of bob's own error outputs (`{"error": "<text>"}`):
/// timeouts are `EXECUTION_TIMEOUT`, anything else `EXECUTION_FAILED`; both transient.
fn bob_error_code(output: &Value) -> ErrorCode {
    let text = output
        .get("error")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_ascii_lowercase();
    if text.contains("timed out") || text.contains("timeout") {
        ErrorCode::ExecutionTimeout
    } else {
        ErrorCode::ExecutionFailed
    }
}

fn parse_json(text: Option<&str>) -> Option<Value> {
    text.and_then(|t| serde_json::from_str(t).ok())
}

fn to_entry(record: InvocationRecord) -> JournalEntry {
    let arguments = parse_json(record.request_json.as_deref()).unwrap_or(Value::Null);
    let is_error = record.status != InvocationStatus::Ready
        || record.evidence_status == Some(EvidenceStatus::Error);
    let result = if is_error {
        parse_json(record.raw_json.as_deref()).unwrap_or_else(|| {
            let code = record.error_code.unwrap_or(ErrorCode::ExecutionFailed);
            serde_json::to_value(ErrorResult::new(code, None)).unwrap_or(Value::Null)
        })
    } else {
        parse_json(record.agent_result_json.as_deref()).unwrap_or(Value::Null)
    };
    let timestamp = record.finished_at.unwrap_or(record.created_at);
    JournalEntry {
        session_id: record.key.run_id.into_string(),
        call_fingerprint: JournalEntry::fingerprint(&record.tool_name, &arguments),
        tool_name: record.tool_name,
        arguments,
        result,
        is_error,
        timestamp_ms: u64::try_from(timestamp.unix_millis()).unwrap_or(0),
    }
}

#[async_trait::async_trait]
impl ToolJournalPort for StoreToolJournal {
    async fn append(&self, entry: JournalEntry) -> Result<(), bob_core::StoreError> {
        Ok(self.append_entry(entry).await?)
    }

    async fn lookup(
        &self,
        session_id: &SessionId,
        fingerprint: &str,
    ) -> Result<Option<JournalEntry>, bob_core::StoreError> {
        Ok(self.lookup_entry(session_id, fingerprint).await?)
    }

    async fn entries(
        &self,
        session_id: &SessionId,
    ) -> Result<Vec<JournalEntry>, bob_core::StoreError> {
        Ok(self.list_entries(session_id).await?)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn only_request_determined_failures_replay() {
        for code in ErrorCode::ALL {
            let expected = matches!(
                code,
                ErrorCode::InvalidInput
                    | ErrorCode::RequestTooLarge
                    | ErrorCode::NotReadOnly
                    | ErrorCode::QueryRejected
            );
            assert_eq!(replays(Some(*code)), expected, "{code}");
            // No transient code ever replays.
            assert!(!(code.is_transient() && replays(Some(*code))));
        }
        assert!(!replays(None));
    }

    #[test]
    fn bob_error_outputs_are_transient() {
        assert_eq!(
            bob_error_code(&json!({"error": "tool call timed out"})),
            ErrorCode::ExecutionTimeout
        );
        assert_eq!(
            bob_error_code(&json!({"error": "tool timeout: x"})),
            ErrorCode::ExecutionTimeout
        );
        assert_eq!(
            bob_error_code(&json!({"error": "boom"})),
            ErrorCode::ExecutionFailed
        );
        assert_eq!(bob_error_code(&json!("x")), ErrorCode::ExecutionFailed);
    }
}
