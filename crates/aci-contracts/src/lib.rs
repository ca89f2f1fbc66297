//! Frozen agent-computer interface (ACI) contracts for evidence tools.
//!
//! This crate is the wire vocabulary shared by the boundary, the projectors and
//! every agent adapter:
//!
//! - validated identifiers ([`ToolCallId`], [`RunId`]),
//! - the lifecycle and evidence enumerations and the closed list of
//!   [`ErrorCode`]s with their constant model-facing messages,
//! - the agent requests of `lookup_knowledge`, `query_logs` and `query_mysql`,
//! - their bounded results, model observations and the [`ErrorResult`],
//! - the [`HarnessControlView`],
//! - relevance normalization,
//! - the implementation-neutral tool descriptions and their MCP, OpenAI and
//!   Anthropic exports, and the JSON Schemas frozen under `schemas/`.
//!
//! It does no I/O and depends only on serde, serde_json, schemars and thiserror.

mod error_code;
pub mod frozen;
mod ids;
mod relevance;
mod requests;
mod results;
pub mod schema;
mod status;
mod time;
mod tool_name;
mod tools;
mod views;

pub use error_code::ErrorCode;
pub use ids::{IdError, MAX_ID_BYTES, RunId, ToolCallId, is_id_byte, validate_id};
pub use relevance::{RELEVANCE_FIELDS, normalize_relevance, relevance_in};
pub use requests::{
    DEFAULT_LOOKBACK_MINUTES, LookupKnowledgeRequest, MAX_LOOKBACK_MINUTES, MAX_QUERY_CHARS,
    MAX_QUERY_JSON_BYTES, MIN_LOOKBACK_MINUTES, QueryLogsRequest, QueryMysqlRequest, RequestError,
};
pub use results::{
    ColumnType, ErrorResult, EvidenceResult, KnowledgeEvidence, LogEvent, LogPattern, LogScope,
    LookupKnowledgeObservation, LookupKnowledgeResult, MAX_RETRIEVAL_FALLBACK_BYTES,
    MAX_RETRIEVAL_LEG_BYTES, MAX_RETRIEVAL_LEGS, MysqlColumn, QueryLogsObservation,
    QueryLogsResult, QueryMysqlObservation, QueryMysqlResult, ResultCounters, SqlValue,
    ValidationError, is_retrieval_fallback, is_retrieval_leg,
};
pub use status::{
    EvidenceStatus, InvocationStatus, LogLevel, LogTopic, ReadyEvidenceStatus, RelevanceLevel,
    SourceKind,
};
pub use time::{Timestamp, TimestampError};
pub use tool_name::ToolName;
pub use tools::{ToolDefinition, tool_definitions};
pub use views::HarnessControlView;
