//! The Harness Control View: what the harness (never the model) sees of a call.
//!
//! The model's view of a READY result is its tool's
//! [`EvidenceResult::Observation`](crate::EvidenceResult::Observation); of a
//! failed call, the [`ErrorResult`](crate::ErrorResult).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{ErrorCode, EvidenceStatus, InvocationStatus, RelevanceLevel, RunId, ToolCallId};

/// The harness's view of one call: identity, lifecycle, counters, scope.
///
/// It may carry what the model must never see (the scope fingerprint, the
/// duplicate and replay identities, counters); it never carries raw data.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HarnessControlView {
    /// The framework's id, when it was valid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<ToolCallId>,
    /// The run of the harness's run context.
    pub run_id: RunId,
    /// The tool name the framework asked for.
    pub tool_name: String,
    /// Lifecycle of the call's record; `ERROR` also when no record was created.
    pub status: InvocationStatus,
    /// What the result means.
    pub evidence_status: EvidenceStatus,
    /// The failure's code, for `ERROR`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_code: Option<ErrorCode>,
    /// For `ERROR`: whether calling again later, unchanged, may succeed, as
    /// recorded with the error (a tool's own verdict when it failed). Never
    /// shown to the model, whose error result says only its code's constant
    /// message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retryable: Option<bool>,
    /// Items returned to the model.
    pub returned_count: u64,
    /// All matches the source reported (log results).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub match_count: Option<u64>,
    /// Whether anything was left out or shortened.
    pub truncated: bool,
    /// Normalized relevance (knowledge results).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relevance_level: Option<RelevanceLevel>,
    /// Which retrieval legs ran (knowledge results): the legs whose results
    /// the knowledge source fused, in order, `["bm25", "vector"]` or
    /// `["bm25"]` when retrieval fell back to BM25 alone; absent when the
    /// source does not say (an external retriever). Never shown to the model.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub retrieval_legs: Vec<String>,
    /// Why a configured retrieval leg did not run (knowledge results): a
    /// stable upper-case code such as `EMBEDDER_TIMEOUT`,
    /// `EMBEDDER_UNAVAILABLE` or `VECTORS_NOT_READY`; absent when every
    /// configured leg ran or the source does not say. Never shown to the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retrieval_fallback: Option<String>,
    /// The tool's normalized request scope; `null` when the arguments never decoded.
    pub scope: Value,
    /// SHA-256 (hex) of the canonical tool name and scope; absent when the
    /// arguments never decoded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope_fingerprint: Option<String>,
    /// The first earlier call of this run with the same scope fingerprint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duplicate_of: Option<ToolCallId>,
    /// The READY call whose recorded result this call replayed instead of running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replayed_from: Option<ToolCallId>,
    /// How many secrets the projection replaced by a `<redacted:RULE>`
    /// marker in the model's observation, per rule name (never the values);
    /// absent when none was. The raw response in the record is not redacted.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub redactions: BTreeMap<String, u32>,
}
