use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{EvidenceResult, ValidationError, check_status_and_count};
use crate::{ReadyEvidenceStatus, RelevanceLevel, ToolCallId};

/// One passage of knowledge evidence: exactly these five fields.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct KnowledgeEvidence {
    /// Stable id of the document the passage comes from.
    pub document_id: String,
    /// Where the document lives, for example its path or collection name.
    pub source: String,
    /// The document's title.
    pub title: String,
    /// The heading path of the passage, joined with ` > `.
    pub breadcrumb: String,
    /// The passage, an exact substring of the document's text.
    pub excerpt: String,
}

/// The bounded result of `lookup_knowledge`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "lookup_knowledge result")]
pub struct LookupKnowledgeResult {
    /// `EVIDENCE_FOUND` or `NO_EVIDENCE`.
    pub evidence_status: ReadyEvidenceStatus,
    /// The framework's id of this call; cite the evidence by it.
    pub tool_call_id: ToolCallId,
    /// The query as the agent sent it: the scope of this observation.
    pub query: String,
    /// Matching passages, best first.
    pub evidence: Vec<KnowledgeEvidence>,
    /// Number of passages in `evidence`.
    pub returned_count: u64,
    /// Coarse relevance of the passages, when the knowledge base gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relevance_level: Option<RelevanceLevel>,
    /// Whether passages were left out or shortened.
    pub truncated: bool,
}

/// What the model sees of a `lookup_knowledge` result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "lookup_knowledge observation")]
pub struct LookupKnowledgeObservation {
    /// `EVIDENCE_FOUND` or `NO_EVIDENCE`.
    pub evidence_status: ReadyEvidenceStatus,
    /// The framework's id of this call; cite the evidence by it.
    pub tool_call_id: ToolCallId,
    /// The query as the agent sent it: the scope of this observation.
    pub query: String,
    /// Matching passages, best first.
    pub evidence: Vec<KnowledgeEvidence>,
    /// Coarse relevance of the passages, when the knowledge base gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relevance_level: Option<RelevanceLevel>,
    /// Whether passages were left out or shortened.
    pub truncated: bool,
}

impl EvidenceResult for LookupKnowledgeResult {
    type Observation = LookupKnowledgeObservation;

    evidence_identity!();

    fn validate(&self) -> Result<(), ValidationError> {
        let has = !self.evidence.is_empty();
        if self.evidence_status == ReadyEvidenceStatus::NoEvidence && self.relevance_level.is_some()
        {
            return Err(ValidationError::NoEvidenceWithEvidence);
        }
        check_status_and_count(
            self.evidence_status,
            has,
            self.returned_count,
            self.evidence.len(),
        )?;
        for (index, item) in self.evidence.iter().enumerate() {
            for (field, value) in [
                ("document_id", &item.document_id),
                ("excerpt", &item.excerpt),
            ] {
                if value.trim().is_empty() {
                    return Err(ValidationError::BlankField { index, field });
                }
            }
        }
        Ok(())
    }

    fn observation(&self) -> LookupKnowledgeObservation {
        LookupKnowledgeObservation {
            evidence_status: self.evidence_status,
            tool_call_id: self.tool_call_id.clone(),
            query: self.query.clone(),
            evidence: self.evidence.clone(),
            relevance_level: self.relevance_level,
            truncated: self.truncated,
        }
    }
}

impl super::Counted for LookupKnowledgeResult {
    fn relevance_level(&self) -> Option<RelevanceLevel> {
        self.relevance_level
    }
}
