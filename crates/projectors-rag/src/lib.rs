//! The `lookup_knowledge` tool for the tool boundary: RAG projector, scope
//! normalizer, a knowledge source port, and a bundled Markdown knowledge base.
//!
//! - [`KnowledgeSource`] is the port to a retriever; it returns the upstream
//!   retrieval response as JSON. [`KnowledgeExecutor`] adapts it to the
//!   boundary's [`Executor`](invocation_core::Executor).
//! - [`RagProjector`] turns that response into a bounded
//!   [`LookupKnowledgeResult`](aci_contracts::LookupKnowledgeResult): only the
//!   five frozen evidence fields per passage, excerpts that are exact
//!   substrings of the upstream text, relevance normalized through the
//!   contracts, and `truncated` whenever anything was left out or shortened.
//!   Bounds are [`RagBounds`]; with the defaults the largest possible result
//!   fits the boundary's default agent result limit.
//! - [`knowledge_scope`] is the scope normalizer behind the duplicate
//!   fingerprint (see [`scope`] for what counts as the same scope).
//! - [`MarkdownKnowledgeBase`] (feature `knowledge-base`, on by default) is a
//!   [`KnowledgeSource`] over Markdown and plain-text runbooks in any
//!   language (the bundled ones, or a directory), chunked by headings and
//!   searched with BM25, in RAM or in a persistent index directory that later
//!   processes reuse.
//! - [`lookup_knowledge_tool`] puts it together as a frozen
//!   [`ToolSpec`].
//!
//! ```
//! # #[cfg(feature = "knowledge-base")]
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//!
//! use aci_contracts::RunId;
//! use invocation_core::{RunContext, ToolBoundary, ToolEnvelope};
//! use projectors_rag::{MarkdownKnowledgeBase, lookup_knowledge_tool};
//!
//! let boundary = ToolBoundary::builder(Arc::new(store_memory::MemoryStore::new()))
//!     .tool(lookup_knowledge_tool(MarkdownKnowledgeBase::bundled()?))
//!     .build()?;
//! let run = RunContext::new(RunId::new("run-1")?, invocation_core::CallPolicy::AUTHORIZED_READ_ONLY);
//! let call = ToolEnvelope::new(
//!     "call-1",
//!     "run-1",
//!     "lookup_knowledge",
//!     r#"{"query":"connection pool timeout"}"#,
//! );
//! let outcome = boundary.invoke(&run, call).await;
//! assert_eq!(outcome.observation.to_json()["evidence_status"], "EVIDENCE_FOUND");
//! # Ok(()) }
//! # #[cfg(feature = "knowledge-base")]
//! # tokio::runtime::Runtime::new().unwrap().block_on(demo()).unwrap();
//! ```
//!
//! # Reference
//!
//! The rest of this page is the tool's reference (also the crate's
//! README.md).
#![doc = include_str!("../README.md")]

pub mod embeddings;
#[cfg(feature = "knowledge-base")]
mod error;
mod executor;
#[cfg(feature = "knowledge-base")]
mod knowledge_base;
mod projector;
pub mod scope;
mod source;

use aci_contracts::{LookupKnowledgeRequest, ToolName};
use invocation_core::ToolSpec;
use invocation_core::bounds::InvalidBounds;

pub use embeddings::{EmbedError, EmbedRole, Embedder};
#[cfg(feature = "knowledge-base")]
pub use error::{Error, Result};
pub use executor::{KnowledgeExecutor, Retrieve};
#[cfg(feature = "knowledge-base")]
pub use knowledge_base::evaluation;
#[cfg(feature = "knowledge-base")]
pub use knowledge_base::{
    ANALYZER_VERSION, CHUNK_TARGET_BYTES, Change, CjkSegmenter, DEFAULT_TOP_K, DirOptions,
    EVIDENCE_SIMILARITY_CHINESE, EVIDENCE_SIMILARITY_JAPANESE, EVIDENCE_SIMILARITY_KOREAN,
    EVIDENCE_SIMILARITY_LATIN, EmbedReport, FUSION_CANDIDATES, FileChunk, FileFailure,
    HIGH_COVERAGE, IndexReport, Legs, MAX_QUERY_TERMS, MEDIUM_COVERAGE, MarkdownDocument,
    MarkdownKnowledgeBase, Progress, RRF_K, Rebuild, VECTORS_NOT_READY, VectorOptions,
    evidence_similarity, split_knowledge_file,
};
pub use projector::{
    BREADCRUMB_SEPARATOR, DEFAULT_MAX_EXCERPT_BYTES, DEFAULT_MAX_FIELD_BYTES, DEFAULT_MAX_ITEMS,
    HEADING_KEYS, ID_KEYS, LIST_KEYS, METADATA_KEY, MIN_TEXT_BYTES, RagBounds, RagProjector,
    SOURCE_KEYS, STATIC_QUERY_ALLOWANCE_BYTES, TEXT_KEYS, TITLE_KEYS,
};
pub use scope::knowledge_scope;
pub use source::{KnowledgeSource, KnowledgeSourceError};

/// The `lookup_knowledge` tool over the source `S`, as the boundary registers it.
pub type LookupKnowledgeTool<S> = ToolSpec<KnowledgeExecutor<S>, RagProjector>;

/// The frozen `lookup_knowledge` tool over `source`, with the default
/// [`RagBounds`]: read-only, the frozen name and description, requests
/// validated (non-blank query), scope normalized by [`knowledge_scope`].
pub fn lookup_knowledge_tool<S: KnowledgeSource>(source: S) -> LookupKnowledgeTool<S> {
    tool(source, RagProjector::default())
}

/// The frozen `lookup_knowledge` tool over `source` with `bounds`.
///
/// # Errors
/// [`InvalidBounds`] when a bound is below its minimum: refused, never
/// clamped.
pub fn lookup_knowledge_tool_with<S: KnowledgeSource>(
    source: S,
    bounds: RagBounds,
) -> Result<LookupKnowledgeTool<S>, InvalidBounds> {
    Ok(tool(source, RagProjector::new(bounds)?))
}

fn tool<S: KnowledgeSource>(source: S, projector: RagProjector) -> LookupKnowledgeTool<S> {
    ToolSpec::frozen(
        ToolName::LookupKnowledge,
        KnowledgeExecutor::new(source),
        projector,
    )
    .scope_with(knowledge_scope)
    .validate_with(|request: &LookupKnowledgeRequest| request.validate().is_ok())
}
