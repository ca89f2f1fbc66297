//! The `lookup_knowledge` executor: the [`KnowledgeSource`] port adapted to
//! the boundary's [`Executor`].

use aci_contracts::LookupKnowledgeRequest;
use async_trait::async_trait;
use invocation_core::whitespace::collapse_whitespace;
use invocation_core::{ExecutionContext, ExecutionError, Executor};
use serde_json::Value;

use crate::KnowledgeSource;

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
