use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{EvidenceResult, ValidationError, check_status_and_count};
use crate::{ReadyEvidenceStatus, RelevanceLevel, ToolCallId};

/// Most names in [`LookupKnowledgeResult::retrieval_legs`].
pub const MAX_RETRIEVAL_LEGS: usize = 4;
/// Longest name of a retrieval leg, in bytes (see [`is_retrieval_leg`]).
pub const MAX_RETRIEVAL_LEG_BYTES: usize = 32;
/// Longest retrieval fallback code, in bytes (see [`is_retrieval_fallback`]).
pub const MAX_RETRIEVAL_FALLBACK_BYTES: usize = 64;

/// Whether `name` can name a retrieval leg (`bm25`, `vector`): 1 to
/// [`MAX_RETRIEVAL_LEG_BYTES`] bytes of `[a-z0-9_]`.
#[must_use]
pub fn is_retrieval_leg(name: &str) -> bool {
    (1..=MAX_RETRIEVAL_LEG_BYTES).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// Whether `code` can be a retrieval fallback code (`EMBEDDER_TIMEOUT`): 1 to
/// [`MAX_RETRIEVAL_FALLBACK_BYTES`] bytes of `[A-Z0-9_]`.
#[must_use]
pub fn is_retrieval_fallback(code: &str) -> bool {
    (1..=MAX_RETRIEVAL_FALLBACK_BYTES).contains(&code.len())
        && code
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
}

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
    /// Harness only, never in the observation: the retrieval legs whose
    /// results the knowledge source fused, in order (`["bm25", "vector"]`;
    /// `["bm25"]` when only BM25 ran). Empty (absent) when the source did not
    /// say. At most 4 distinct names of 1 to 32 bytes of `[a-z0-9_]`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = MAX_RETRIEVAL_LEGS),
        inner(regex(pattern = r"^[a-z0-9_]{1,32}$")),
        extend("uniqueItems" = true)
    )]
    pub retrieval_legs: Vec<String>,
    /// Harness only, never in the observation: why a configured retrieval leg
    /// did not run (`EMBEDDER_TIMEOUT`, `EMBEDDER_FAILED`, ...), when the
    /// source said so. 1 to 64 bytes of `[A-Z0-9_]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[A-Z0-9_]{1,64}$"))]
    pub retrieval_fallback: Option<String>,
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
        let legs = &self.retrieval_legs;
        let legs_valid = legs.len() <= MAX_RETRIEVAL_LEGS
            && legs.iter().all(|leg| is_retrieval_leg(leg))
            && legs
                .iter()
                .enumerate()
                .all(|(i, leg)| !legs[..i].contains(leg));
        let fallback_valid = self
            .retrieval_fallback
            .as_deref()
            .is_none_or(is_retrieval_fallback);
        if !(legs_valid && fallback_valid) {
            return Err(ValidationError::InvalidRetrievalTrace);
        }
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

    fn retrieval_legs(&self) -> Vec<String> {
        self.retrieval_legs.clone()
    }

    fn retrieval_fallback(&self) -> Option<String> {
        self.retrieval_fallback.clone()
    }
}
