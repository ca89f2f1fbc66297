//! Canonical bounded agent results, their model observations, and the error result.
//!
//! READY results (`EVIDENCE_FOUND` or `NO_EVIDENCE`) and the error result are
//! different types. [`EvidenceResult::validate`] rejects results whose status
//! disagrees with their content.

/// The accessors every result has alike (its `evidence_status`,
/// `tool_call_id`, `returned_count` and `truncated` fields, and its counters
/// with what [`Counted`] adds), written once for the [`EvidenceResult`]
/// impls of the three results.
macro_rules! evidence_identity {
    () => {
        fn counters(&self) -> crate::ResultCounters {
            crate::ResultCounters {
                returned_count: self.returned_count,
                match_count: super::Counted::match_count(self),
                truncated: self.truncated,
                relevance_level: super::Counted::relevance_level(self),
                retrieval_legs: super::Counted::retrieval_legs(self),
                retrieval_fallback: super::Counted::retrieval_fallback(self),
            }
        }

        fn evidence_status(&self) -> crate::ReadyEvidenceStatus {
            self.evidence_status
        }

        fn tool_call_id(&self) -> &crate::ToolCallId {
            &self.tool_call_id
        }

        fn set_tool_call_id(&mut self, id: crate::ToolCallId) {
            self.tool_call_id = id;
        }
    };
}

mod error;
mod knowledge;
mod logs;
mod mysql;

pub use error::ErrorResult;
pub use knowledge::{
    KnowledgeEvidence, LookupKnowledgeObservation, LookupKnowledgeResult,
    MAX_RETRIEVAL_FALLBACK_BYTES, MAX_RETRIEVAL_LEG_BYTES, MAX_RETRIEVAL_LEGS,
    is_retrieval_fallback, is_retrieval_leg,
};
pub use logs::{LogEvent, LogPattern, LogScope, QueryLogsObservation, QueryLogsResult};
pub use mysql::{ColumnType, MysqlColumn, QueryMysqlObservation, QueryMysqlResult, SqlValue};

use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::{ReadyEvidenceStatus, RelevanceLevel, ToolCallId};

/// A result breaks the contract's consistency rules.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ValidationError {
    /// `EVIDENCE_FOUND` with nothing to cite.
    #[error("EVIDENCE_FOUND requires at least one evidence item")]
    FoundWithoutEvidence,
    /// `NO_EVIDENCE` that still carries evidence, matches or a relevance level.
    #[error("NO_EVIDENCE must not carry evidence, matches or a relevance level")]
    NoEvidenceWithEvidence,
    /// `returned_count` differs from the length of the returned list.
    #[error("returned_count is {declared} but {actual} items are returned")]
    ReturnedCountMismatch {
        /// The declared count.
        declared: u64,
        /// The list's length.
        actual: u64,
    },
    /// Fewer matches than returned items, or pattern counts above the matches.
    #[error("match_count is smaller than what was returned or aggregated")]
    MatchCountTooSmall,
    /// Fewer items returned than matched, but `truncated` is false.
    #[error("returned fewer items than matched without setting truncated")]
    SilentTruncation,
    /// An evidence excerpt or an identifying field is empty or blank.
    #[error("evidence item {index} has a blank {field}")]
    BlankField {
        /// Position of the item.
        index: usize,
        /// The blank field.
        field: &'static str,
    },
    /// A row has a different number of cells than there are columns.
    #[error("row {row} has {cells} cells for {columns} columns")]
    RowWidthMismatch {
        /// Position of the row.
        row: usize,
        /// Its number of cells.
        cells: usize,
        /// The number of columns.
        columns: usize,
    },
    /// The log scope's window disagrees with its `lookback_minutes`.
    #[error("scope end_time - start_time must equal lookback_minutes")]
    ScopeWindowMismatch,
    /// A knowledge result's retrieval legs or fallback code break their
    /// bounds (too many or repeated legs, a name or code out of its alphabet
    /// or length).
    #[error("retrieval_legs or retrieval_fallback break their bounds")]
    InvalidRetrievalTrace,
}

/// Counters and flags of a result that the harness sees in its control view.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ResultCounters {
    /// Items returned to the model.
    pub returned_count: u64,
    /// All matches the source reported (log results only).
    pub match_count: Option<u64>,
    /// Whether anything was dropped or shortened.
    pub truncated: bool,
    /// Normalized relevance (knowledge results only).
    pub relevance_level: Option<RelevanceLevel>,
    /// The retrieval legs whose results were fused, in order (knowledge
    /// results only, when the source said; empty otherwise).
    pub retrieval_legs: Vec<String>,
    /// Why a configured retrieval leg did not run (knowledge results only,
    /// when the source said).
    pub retrieval_fallback: Option<String>,
}

/// A READY agent result of one evidence tool.
pub trait EvidenceResult:
    Serialize + DeserializeOwned + JsonSchema + Clone + Send + Sync + 'static
{
    /// What the model sees of this result.
    type Observation: Serialize + DeserializeOwned + JsonSchema + Clone + Send + Sync + 'static;

    /// `EVIDENCE_FOUND` or `NO_EVIDENCE`: a READY result cannot say `ERROR`.
    fn evidence_status(&self) -> ReadyEvidenceStatus;

    /// The framework's id of the call that produced this result.
    fn tool_call_id(&self) -> &ToolCallId;

    /// Puts another call's id on this result (used when a recorded result is
    /// replayed for a new call).
    fn set_tool_call_id(&mut self, id: ToolCallId);

    /// Checks status against content and counts against lists.
    ///
    /// # Errors
    /// [`ValidationError`] naming the first broken rule.
    fn validate(&self) -> Result<(), ValidationError>;

    /// The model observation: this result minus harness counters.
    fn observation(&self) -> Self::Observation;

    /// Counters for the harness control view.
    fn counters(&self) -> ResultCounters;
}

/// The counters a result has beyond `returned_count` and `truncated`
/// ([`ResultCounters`]); a result without one keeps the default (absent).
trait Counted {
    fn match_count(&self) -> Option<u64> {
        None
    }

    fn relevance_level(&self) -> Option<RelevanceLevel> {
        None
    }

    fn retrieval_legs(&self) -> Vec<String> {
        Vec::new()
    }

    fn retrieval_fallback(&self) -> Option<String> {
        None
    }
}

fn check_status_and_count(
    status: ReadyEvidenceStatus,
    has_evidence: bool,
    declared: u64,
    actual: usize,
) -> Result<(), ValidationError> {
    match status {
        ReadyEvidenceStatus::EvidenceFound if !has_evidence => {
            return Err(ValidationError::FoundWithoutEvidence);
        }
        ReadyEvidenceStatus::NoEvidence if has_evidence => {
            return Err(ValidationError::NoEvidenceWithEvidence);
        }
        _ => {}
    }
    let actual = actual as u64;
    if declared != actual {
        return Err(ValidationError::ReturnedCountMismatch { declared, actual });
    }
    Ok(())
}
