//! The knowledge source port and the executor that calls it.

use std::fmt::Debug;
use std::sync::Arc;

use aci_contracts::LookupKnowledgeRequest;
use async_trait::async_trait;
use invocation_core::{ExecutionContext, ExecutionError, Executor};
use serde_json::Value;

use crate::normalize_query;

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
    /// - `query` is already normalized (see [`normalize_query`]) and not blank.
    /// - The response is JSON in one of the shapes the projector accepts
    ///   (see docs/projectors.md); anything the projector does not know is
    ///   dropped, so a source may return its native response as it is.
    /// - Finding nothing is a success: an empty list of documents.
    ///
    /// # Errors
    /// [`ExecutionError`] with the agent-safe category; put the driver error in
    /// its source ([`ExecutionError::failed`]), never in anything agent-facing.
    async fn retrieve(
        &self,
        query: &str,
        context: &ExecutionContext,
    ) -> Result<Value, ExecutionError>;
}

#[async_trait]
impl<S: KnowledgeSource + ?Sized> KnowledgeSource for Arc<S> {
    async fn retrieve(
        &self,
        query: &str,
        context: &ExecutionContext,
    ) -> Result<Value, ExecutionError> {
        (**self).retrieve(query, context).await
    }
}

/// The `lookup_knowledge` executor: sends the normalized query to a
/// [`KnowledgeSource`] and returns its response as the raw result.
#[derive(Debug, Clone)]
pub struct KnowledgeExecutor {
    source: Arc<dyn KnowledgeSource>,
}

impl KnowledgeExecutor {
    /// An executor over `source`.
    pub fn new(source: impl KnowledgeSource) -> Self {
        Self {
            source: Arc::new(source),
        }
    }

    /// An executor over a shared source.
    #[must_use]
    pub fn shared(source: Arc<dyn KnowledgeSource>) -> Self {
        Self { source }
    }

    /// The source.
    #[must_use]
    pub fn source(&self) -> &Arc<dyn KnowledgeSource> {
        &self.source
    }
}

#[async_trait]
impl Executor for KnowledgeExecutor {
    type Request = LookupKnowledgeRequest;
    type Raw = Value;

    async fn execute(
        &self,
        request: &LookupKnowledgeRequest,
        context: &ExecutionContext,
    ) -> Result<Value, ExecutionError> {
        let query = normalize_query(&request.query);
        self.source.retrieve(&query, context).await
    }
}
