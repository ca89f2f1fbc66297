//! The view model of a run's review page: what the store holds of the run
//! (or, once it no longer does, the archive), arranged for people (a
//! header, the calls in time order, per call both views and what the model
//! did not get).

use std::collections::BTreeMap;

use aci_contracts::{ErrorCode, EvidenceStatus, InvocationStatus, RunId, Timestamp};
use invocation_core::{
    CitationVerdict, InvocationRecord, NotCitable, RecordFields, Refusal, RunState, StoreError,
    ToolBoundary,
};
use serde_json::Value;
use store_archive::{ArchiveError, ArchivedCall};

use crate::config::Config;

/// Budgets the page compares a run's calls with: `[run] budget` and each
/// principal's `[auth.tokens.NAME] run_budget` (the smaller one holds).
#[derive(Debug, Clone, Default)]
pub(crate) struct Budgets {
    run: Option<u32>,
    per_principal: BTreeMap<String, u32>,
}

impl Budgets {
    /// The budgets of `config`.
    pub(crate) fn of(config: &Config) -> Self {
        Self {
            run: config.run.budget,
            per_principal: config
                .auth
                .tokens
                .iter()
                .filter_map(|(name, token)| token.run_budget.map(|b| (name.clone(), b)))
                .collect(),
        }
    }

    /// The budget of a run owned by `owner`.
    fn for_owner(&self, owner: Option<&str>) -> Option<u32> {
        let own = owner.and_then(|o| self.per_principal.get(o).copied());
        match (self.run, own) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// Where the page read the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    /// The live invocation store.
    Store,
    /// The archive: the store no longer holds the run.
    Archive,
}

/// Everything the page shows of one run.
#[derive(Debug, Clone)]
pub(crate) struct RunView {
    /// The run.
    pub(crate) run_id: RunId,
    /// Where it was read.
    pub(crate) source: Source,
    /// The run's state in the store (or the archive's `aci_runs`), when held.
    pub(crate) state: Option<RunState>,
    /// The run's call budget, when one is configured.
    pub(crate) budget: Option<u32>,
    /// The calls, in time order (creation, then journal order).
    pub(crate) calls: Vec<CallView>,
    /// The verdict of each call's id under `aci verify`'s rules.
    pub(crate) verdicts: BTreeMap<String, CitationVerdict>,
    /// The archived calls, when read from the archive (for the citation
    /// check); empty otherwise.
    pub(crate) archived: Vec<ArchivedCall>,
    /// Calls refused before they had a record (preflight, or the store at
    /// create), oldest first: kept by the store for the record TTL, never
    /// archived.
    pub(crate) refusals: Vec<Refusal>,
}

/// One call as the page shows it.
#[derive(Debug, Clone)]
pub(crate) struct CallView {
    /// The record, with every payload (raw included, as far as kept).
    pub(crate) record: InvocationRecord,
    /// For an archived call, the raw policy it was archived with (`none`,
    /// `redacted`, `full`).
    pub(crate) raw_mode: Option<String>,
}

/// Why a run could not be read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LoadError {
    /// The invocation store could not be read.
    #[error("cannot read the run's journal: {0}")]
    Store(#[from] StoreError),
    /// The archive could not be read (or holds a row this build cannot).
    #[error("cannot read the run from the archive: {0}")]
    Archive(String),
}

impl From<ArchiveError> for LoadError {
    fn from(error: ArchiveError) -> Self {
        Self::Archive(error.to_string())
    }
}

impl RunView {
    /// Reads `run_id` from the boundary's store.
    pub(crate) async fn load(
        boundary: &ToolBoundary,
        run_id: &RunId,
        budgets: &Budgets,
    ) -> Result<Self, LoadError> {
        let mut records = boundary
            .journal()
            .entries(run_id, RecordFields::All)
            .await?;
        let state = boundary.store().run_state(run_id).await?;
        let refusals = boundary.store().refusals(run_id).await?;
        // A stable sort: calls created in the same millisecond keep the
        // journal's creation order.
        records.sort_by_key(|r| r.created_at);
        let ids: Vec<String> = records
            .iter()
            .map(|r| r.key.tool_call_id.to_string())
            .collect();
        let verdicts = boundary
            .journal()
            .verify_citations(run_id, &ids)
            .await
            .into_iter()
            .map(|check| (check.citation, check.verdict))
            .collect();
        let budget = budgets.for_owner(state.as_ref().and_then(|s| s.owner.as_deref()));
        Ok(Self {
            run_id: run_id.clone(),
            source: Source::Store,
            state,
            budget,
            calls: records
                .into_iter()
                .map(|record| CallView {
                    record,
                    raw_mode: None,
                })
                .collect(),
            verdicts,
            archived: Vec::new(),
            refusals,
        })
    }

    /// The view of `run_id` from its archived `calls` (in chain order) and
    /// its archived `state`; each call's verdict by the archive's rules
    /// ([`crate::archive::archived_verdict`]).
    pub(crate) fn archived(
        run_id: &RunId,
        state: Option<RunState>,
        calls: Vec<ArchivedCall>,
        budgets: &Budgets,
    ) -> Result<Self, LoadError> {
        let mut views = calls
            .iter()
            .map(|call| {
                Ok(CallView {
                    record: call.to_record()?,
                    raw_mode: Some(call.raw_mode.clone()),
                })
            })
            .collect::<Result<Vec<CallView>, ArchiveError>>()?;
        // Chain order is archive order; the page shows creation order (a
        // stable sort keeps chain order within one millisecond).
        views.sort_by_key(|c| c.record.created_at);
        let verdicts = calls
            .iter()
            .map(|call| {
                (
                    call.tool_call_id.clone(),
                    crate::archive::archived_verdict(call),
                )
            })
            .collect();
        let budget = budgets.for_owner(state.as_ref().and_then(|s| s.owner.as_deref()));
        Ok(Self {
            run_id: run_id.clone(),
            source: Source::Archive,
            state,
            budget,
            calls: views,
            verdicts,
            archived: calls,
            refusals: Vec::new(),
        })
    }

    /// Whether the store (or the archive) holds anything of the run.
    pub(crate) fn exists(&self) -> bool {
        self.state.is_some() || !self.calls.is_empty() || !self.refusals.is_empty()
    }

    /// The run's owner, if it has one.
    pub(crate) fn owner(&self) -> Option<&str> {
        self.state.as_ref().and_then(|s| s.owner.as_deref())
    }

    /// The first call's start and the last call's end (or start).
    pub(crate) fn span(&self) -> Option<(Timestamp, Timestamp)> {
        let refused = self.refusals.iter().map(|r| r.at);
        let first = self
            .calls
            .iter()
            .map(|c| c.record.created_at)
            .chain(refused.clone())
            .min()?;
        let last = self
            .calls
            .iter()
            .map(|c| c.record.finished_at.unwrap_or(c.record.created_at))
            .chain(refused)
            .max()?;
        Some((first, last))
    }

    /// Calls per lifecycle status, in the order READY, ERROR, PROJECTING.
    pub(crate) fn count_by_status(&self) -> Vec<(&'static str, usize)> {
        [
            InvocationStatus::Ready,
            InvocationStatus::Error,
            InvocationStatus::Projecting,
        ]
        .into_iter()
        .map(|s| {
            let n = self.calls.iter().filter(|c| c.record.status == s).count();
            (s.as_str(), n)
        })
        .filter(|(_, n)| *n > 0)
        .collect()
    }

    /// Calls per evidence status and per error code, by name.
    pub(crate) fn count_by_outcome(&self) -> BTreeMap<&'static str, usize> {
        let mut counts = BTreeMap::new();
        for call in &self.calls {
            let name = match (call.record.error_code, call.record.evidence_status) {
                (Some(code), _) => code.as_str(),
                (None, Some(status)) => status.as_str(),
                (None, None) => InvocationStatus::Projecting.as_str(),
            };
            *counts.entry(name).or_insert(0) += 1;
        }
        counts
    }
}

/// How a call ended, for colours and labels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// READY with `EVIDENCE_FOUND`.
    Evidence,
    /// READY with `NO_EVIDENCE`.
    NoEvidence,
    /// ERROR.
    Error,
    /// Still PROJECTING.
    Projecting,
}

impl Outcome {
    /// The CSS class and short label.
    pub(crate) const fn class(self) -> &'static str {
        match self {
            Self::Evidence => "evidence",
            Self::NoEvidence => "no-evidence",
            Self::Error => "error",
            Self::Projecting => "projecting",
        }
    }
}

impl CallView {
    /// The call's framework id.
    pub(crate) fn id(&self) -> &str {
        self.record.key.tool_call_id.as_str()
    }

    /// How it ended.
    pub(crate) fn outcome(&self) -> Outcome {
        match (self.record.status, self.record.evidence_status) {
            (InvocationStatus::Projecting, _) => Outcome::Projecting,
            (InvocationStatus::Error, _) | (_, Some(EvidenceStatus::Error)) => Outcome::Error,
            (_, Some(EvidenceStatus::NoEvidence)) => Outcome::NoEvidence,
            _ => Outcome::Evidence,
        }
    }

    /// The error code of an ERROR call.
    pub(crate) fn error_code(&self) -> Option<ErrorCode> {
        self.record.error_code
    }

    /// Milliseconds from creation to finalization.
    pub(crate) fn duration_ms(&self) -> Option<u64> {
        self.record
            .duration()
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }

    /// The arguments, as JSON when they parse.
    pub(crate) fn arguments(&self) -> Option<Value> {
        self.record.request_json.as_deref().map(parse_or_text)
    }

    /// What the model got: the bounded result of a READY call, the error
    /// result (code and its constant sentence) of an ERROR call.
    pub(crate) fn observation(&self) -> Option<Value> {
        if let Some(code) = self.record.error_code {
            return Some(serde_json::json!({
                "evidence_status": "ERROR",
                "error_code": code.as_str(),
                "message": code.message(),
                "tool_call_id": self.id(),
            }));
        }
        self.record.agent_result_json.as_deref().map(parse_or_text)
    }

    /// The raw response, harness-only, when it was kept.
    pub(crate) fn raw(&self) -> Option<Value> {
        self.record.raw_json.as_deref().map(parse_or_text)
    }

    /// What the model did not get, in words: items beyond the bound, a
    /// result marked truncated, redactions. Empty when it got everything
    /// the projection kept (a projection always leaves out the raw's
    /// harness-only fields; that alone is not a bound).
    pub(crate) fn bounded(&self) -> Vec<String> {
        let mut notes = Vec::new();
        let Some(Value::Object(result)) =
            self.record.agent_result_json.as_deref().map(parse_or_text)
        else {
            return notes;
        };
        let number = |key: &str| result.get(key).and_then(Value::as_u64);
        let returned = number("returned_count");
        let matched = number("match_count").or_else(|| {
            // Without a match count, the raw's longest list is what the
            // source had.
            self.raw().as_ref().and_then(longest_list)
        });
        if let (Some(returned), Some(matched)) = (returned, matched)
            && matched > returned
        {
            notes.push(format!(
                "{} of {matched} items were not given to the model (it got {returned})",
                matched - returned
            ));
        }
        if result.get("truncated") == Some(&Value::Bool(true)) {
            notes.push(
                "the result is marked truncated: items or text were left out or shortened"
                    .to_owned(),
            );
        }
        for (rule, n) in self.record.redactions.iter() {
            notes.push(format!("{n} secret(s) redacted by rule {rule}"));
        }
        notes
    }
}

/// The verdict of a citation, as the page marks it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mark {
    /// READY with evidence: the citation stands.
    Stands,
    /// READY with `NO_EVIDENCE`: citable only as a scoped negative.
    Negative,
    /// The call failed (or never finished): not citable.
    Error,
    /// No such call in this run (or its record expired), or not an id.
    Unknown,
    /// The citation names another run.
    OtherRun,
}

impl Mark {
    /// Of a verdict.
    pub(crate) const fn of(verdict: &CitationVerdict) -> Self {
        match verdict {
            CitationVerdict::Evidence { .. } => Self::Stands,
            CitationVerdict::NegativeObservation { .. } => Self::Negative,
            CitationVerdict::NotCitable {
                reason: NotCitable::OtherRun,
            } => Self::OtherRun,
            CitationVerdict::NotCitable {
                reason: NotCitable::Failed(_) | NotCitable::StillProjecting,
            } => Self::Error,
            CitationVerdict::NotCitable { .. } => Self::Unknown,
        }
    }

    /// The CSS class (also the mark's machine name).
    pub(crate) const fn class(self) -> &'static str {
        match self {
            Self::Stands => "stands",
            Self::Negative => "negative",
            Self::Error => "not-citable",
            Self::Unknown => "unknown",
            Self::OtherRun => "other-run",
        }
    }

    /// The words shown beside the citation.
    pub(crate) const fn label(self) -> &'static str {
        match self {
            Self::Stands => "stands: evidence",
            Self::Negative => "NO_EVIDENCE: a negative observation within its scope only",
            Self::Error => "not citable: the call failed or did not finish",
            Self::Unknown => "unknown: no such call in this run (or its record expired)",
            Self::OtherRun => "another run: not evidence of this one",
        }
    }
}

/// The text as JSON, or as a JSON string when it does not parse.
fn parse_or_text(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned()))
}

/// The length of the longest top-level list of an object.
fn longest_list(value: &Value) -> Option<u64> {
    value
        .as_object()?
        .values()
        .filter_map(Value::as_array)
        .map(|a| a.len() as u64)
        .max()
}
