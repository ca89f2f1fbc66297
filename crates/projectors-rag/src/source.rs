//! The knowledge source port and its error.

use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;
use invocation_core::{ExecutionContext, PortError};
use serde_json::Value;

/// The [`KnowledgeSource`] port's error: invocation-core's one port error
/// ([`PortError`]), with the agent-safe category and the retryability as
/// data.
pub type KnowledgeSourceError = PortError;

/// Where `lookup_knowledge` gets passages from: a retrieval service, a vector
/// store, or the bundled [`MarkdownKnowledgeBase`](crate::MarkdownKnowledgeBase).
///
/// The port returns the upstream retrieval response unchanged, as JSON. The
/// boundary records it as the raw response (the harness may inspect it; the
/// model never sees it) and [`RagProjector`](crate::RagProjector) turns it into
/// bounded evidence, dropping scores, traces and everything else.
#[async_trait]
pub trait KnowledgeSource: Send + Sync + Debug + 'static {
    /// Retrieves passages for `query`.
    ///
    /// # Behavior
    /// - `query` is already whitespace-collapsed (see
    ///   [`collapse_whitespace`](invocation_core::whitespace::collapse_whitespace))
    ///   and not blank.
    /// - The response is JSON in one of the shapes the projector accepts
    ///   (see the crate's README); anything the projector does not know is
    ///   dropped, so a source may return its native response as it is.
    /// - Finding nothing is a success: an empty list of documents. A source
    ///   that could not search (nothing indexed, retriever down) returns an
    ///   error instead, never an empty list.
    ///
    /// # Errors
    /// [`KnowledgeSourceError`] with the agent-safe category and its
    /// retryability; the driver error goes in its source, never in anything
    /// agent-facing.
    async fn retrieve(
        &self,
        query: &str,
        context: &ExecutionContext,
    ) -> Result<Value, KnowledgeSourceError>;
}

#[async_trait]
impl<S: KnowledgeSource + ?Sized> KnowledgeSource for Arc<S> {
    async fn retrieve(
        &self,
        query: &str,
        context: &ExecutionContext,
    ) -> Result<Value, KnowledgeSourceError> {
        (**self).retrieve(query, context).await
    }
}
