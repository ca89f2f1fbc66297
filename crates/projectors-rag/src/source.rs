//! The knowledge source port, its error, and the executor that calls it.

use std::fmt::Debug;
use std::sync::Arc;

use aci_contracts::LookupKnowledgeRequest;
use async_trait::async_trait;
use invocation_core::whitespace::collapse_whitespace;
use invocation_core::{ExecutionContext, ExecutionError, Executor, PortError};
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
    ///   [`collapse_whitespace`]) and not blank.
    /// - The response is JSON in one of the shapes the projector accepts
    ///   (see `docs/projectors.md`); anything the projector does not know is
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

/// The `lookup_knowledge` executor: sends the whitespace-collapsed query to a
/// [`KnowledgeSource`] and returns its response as the raw result.
#[derive(Debug, Clone)]
pub struct KnowledgeExecutor<S> {
    source: S,
}

impl<S: KnowledgeSource> KnowledgeExecutor<S> {
    /// An executor over `source`.
    pub const fn new(source: S) -> Self {
        Self { source }
    }

    /// The source.
    #[must_use]
    pub const fn source(&self) -> &S {
        &self.source
    }
}

#[async_trait]
impl<S: KnowledgeSource> Executor for KnowledgeExecutor<S> {
    type Request = LookupKnowledgeRequest;
    type Raw = Value;

    async fn execute(
        &self,
        request: &LookupKnowledgeRequest,
        context: &ExecutionContext,
    ) -> Result<Value, ExecutionError> {
        let query = collapse_whitespace(&request.query);
        Ok(self.source.retrieve(&query, context).await?)
    }
}
