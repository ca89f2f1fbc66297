//! The journal: a view of a run's canonical records for replay, inspection,
//! crash recovery and citation checks. Not a second store.
//!
//! bob-core's `ToolJournalPort` has `append`, `lookup` and `entries`. Here,
//! *append* is the boundary itself (a record is created before the tool runs
//! and finalized after), `lookup` finds the first READY record of a scope, and
//! `entries` lists a run's records in creation order.

use std::sync::Arc;

use aci_contracts::{ErrorCode, InvocationStatus, RunId, Timestamp, ToolCallId};
use serde::Serialize;
use serde_json::Value;

use crate::{
    Clock, Finalization, InvocationKey, InvocationRecord, InvocationStore, RecordFields,
    ScopeFingerprint, StoreError,
};

/// Why a citation does not stand.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(
    rename_all = "SCREAMING_SNAKE_CASE",
    tag = "reason",
    content = "error_code"
)]
pub enum NotCitable {
    /// The cited id is not a valid tool call id.
    InvalidId,
    /// The citation names another run.
    OtherRun,
    /// No such call in this run, or its record expired.
    UnknownOrExpired,
    /// The call has not finished (or was abandoned and not yet recovered).
    StillProjecting,
    /// The call failed; error results are never citable.
    Failed(ErrorCode),
    /// The store could not be read.
    StoreUnavailable,
}

/// The verdict on one citation.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE", tag = "verdict")]
pub enum CitationVerdict {
    /// READY with `EVIDENCE_FOUND`: citable as evidence.
    Evidence {
        /// The tool that produced it.
        tool_name: String,
    },
    /// READY with `NO_EVIDENCE`: citable only as a negative observation within
    /// `scope`, never as evidence and never as a statement about health.
    NegativeObservation {
        /// The tool that produced it.
        tool_name: String,
        /// The scope the query ran over: the result's own `scope` when it
        /// carries one (`query_logs`), otherwise the normalized request scope.
        scope: Value,
    },
    /// Not citable.
    NotCitable {
        /// Why.
        #[serde(flatten)]
        reason: NotCitable,
    },
}

/// One citation and its verdict.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CitationCheck {
    /// The citation as given: a tool call id, or `run_id/tool_call_id`.
    pub citation: String,
    /// The verdict.
    pub verdict: CitationVerdict,
}

/// A run's journal over a store.
#[derive(Debug, Clone)]
pub struct Journal {
    store: Arc<dyn InvocationStore>,
    clock: Arc<dyn Clock>,
}

impl Journal {
    /// A journal over `store`, timestamping recoveries with `clock`.
    #[must_use]
    pub fn new(store: Arc<dyn InvocationStore>, clock: Arc<dyn Clock>) -> Self {
        Self { store, clock }
    }

    /// The run's live records in creation order, with the payloads `fields` selects
    /// (raw only with [`RecordFields::All`]).
    ///
    /// # Errors
    /// [`StoreError`] from the store.
    pub async fn entries(
        &self,
        run_id: &RunId,
        fields: RecordFields,
    ) -> Result<Vec<InvocationRecord>, StoreError> {
        self.store.list(run_id, fields).await
    }

    /// The run's first READY record with `fingerprint`, if it is still live.
    ///
    /// # Errors
    /// [`StoreError`] from the store.
    pub async fn lookup(
        &self,
        run_id: &RunId,
        fingerprint: &ScopeFingerprint,
        fields: RecordFields,
    ) -> Result<Option<InvocationRecord>, StoreError> {
        let Some(id) = self
            .store
            .scope_index(run_id, fingerprint)
            .await?
            .first_ready
        else {
            return Ok(None);
        };
        let key = InvocationKey::new(run_id.clone(), id);
        Ok(self
            .store
            .get(&key, fields)
            .await?
            .filter(|r| r.status == InvocationStatus::Ready))
    }

    /// Crash recovery: moves the run's PROJECTING records created before
    /// `older_than` to `ERROR/EXECUTION_ABANDONED` with the same compare-and-set
    /// as any finalization. Executes nothing. Returns the ids it moved; records
    /// that finished meanwhile are left alone.
    ///
    /// # Errors
    /// [`StoreError`] from the store.
    pub async fn recover(
        &self,
        run_id: &RunId,
        older_than: Timestamp,
    ) -> Result<Vec<ToolCallId>, StoreError> {
        let mut recovered = Vec::new();
        for record in self.store.list(run_id, RecordFields::Metadata).await? {
            if record.status != InvocationStatus::Projecting || record.created_at >= older_than {
                continue;
            }
            let finalization = Finalization::Error {
                error_code: ErrorCode::ExecutionAbandoned,
                retryable: ErrorCode::ExecutionAbandoned.is_transient(),
                raw_json: None,
                finished_at: self.clock.now(),
                timings: None,
            };
            match self.store.finalize(&record.key, finalization).await {
                Ok(()) => recovered.push(record.key.tool_call_id),
                Err(StoreError::NotProjecting { .. } | StoreError::NotFound) => {}
                Err(error) => return Err(error),
            }
        }
        Ok(recovered)
    }

    /// Crash recovery by age: [`recover`](Self::recover) with the records
    /// created more than `min_age` ago (by this journal's clock).
    ///
    /// Safe only when no live process can still finish such a record: choose
    /// `min_age` longer than the longest tool timeout (plus the time a
    /// finalization takes), so every call a live process still runs is younger.
    ///
    /// # Errors
    /// [`StoreError`] from the store.
    pub async fn recover_run(
        &self,
        run_id: &RunId,
        min_age: std::time::Duration,
    ) -> Result<Vec<ToolCallId>, StoreError> {
        let older_than = crate::clock::sub(self.clock.now(), min_age);
        self.recover(run_id, older_than).await
    }

    /// The verdict on each citation, for `run_id`.
    ///
    /// A citation is a tool call id of the run, or `run_id/tool_call_id`.
    pub async fn verify_citations<S: AsRef<str>>(
        &self,
        run_id: &RunId,
        citations: &[S],
    ) -> Vec<CitationCheck> {
        let mut checks = Vec::with_capacity(citations.len());
        for citation in citations {
            let citation = citation.as_ref();
            let verdict = self.verdict(run_id, citation).await;
            checks.push(CitationCheck {
                citation: citation.to_owned(),
                verdict,
            });
        }
        checks
    }

    async fn verdict(&self, run_id: &RunId, citation: &str) -> CitationVerdict {
        let not = |reason| CitationVerdict::NotCitable { reason };
        let record = match self.citable_record(run_id, citation).await {
            Ok(record) => record,
            Err(reason) => return not(reason),
        };
        match record.evidence_status {
            Some(aci_contracts::EvidenceStatus::EvidenceFound) => CitationVerdict::Evidence {
                tool_name: record.tool_name,
            },
            Some(aci_contracts::EvidenceStatus::NoEvidence) => {
                let result_scope = record
                    .agent_result_json
                    .as_deref()
                    .and_then(|json| serde_json::from_str::<Value>(json).ok())
                    .and_then(|mut v| v.get_mut("scope").map(Value::take))
                    .filter(Value::is_object);
                let scope = result_scope.unwrap_or_else(|| {
                    record
                        .scope_json
                        .as_deref()
                        .and_then(|json| serde_json::from_str(json).ok())
                        .unwrap_or(Value::Null)
                });
                CitationVerdict::NegativeObservation {
                    tool_name: record.tool_name,
                    scope,
                }
            }
            _ => not(NotCitable::Failed(
                record.error_code.unwrap_or(ErrorCode::ExecutionFailed),
            )),
        }
    }

    /// The READY record a citation names, or why there is none.
    pub(crate) async fn citable_record(
        &self,
        run_id: &RunId,
        citation: &str,
    ) -> Result<InvocationRecord, NotCitable> {
        let (cited_run, id) = match citation.split_once('/') {
            Some((run, id)) => (Some(run), id),
            None => (None, citation),
        };
        if let Some(run) = cited_run {
            let run = RunId::new(run).map_err(|_| NotCitable::InvalidId)?;
            if &run != run_id {
                return Err(NotCitable::OtherRun);
            }
        }
        let id = ToolCallId::new(id).map_err(|_| NotCitable::InvalidId)?;
        let key = InvocationKey::new(run_id.clone(), id);
        let record = self
            .store
            .get(&key, RecordFields::WithoutRaw)
            .await
            .map_err(|_| NotCitable::StoreUnavailable)?
            .ok_or(NotCitable::UnknownOrExpired)?;
        match record.status {
            InvocationStatus::Ready => Ok(record),
            InvocationStatus::Projecting => Err(NotCitable::StillProjecting),
            InvocationStatus::Error => Err(NotCitable::Failed(
                record.error_code.unwrap_or(ErrorCode::ExecutionFailed),
            )),
        }
    }
}
