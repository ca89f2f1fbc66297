//! The `lookup_knowledge` executor: the [`KnowledgeSource`] port adapted to
//! the boundary's [`Executor`](invocation_core::Executor).

use aci_contracts::LookupKnowledgeRequest;
use async_trait::async_trait;
use invocation_core::whitespace::collapse_whitespace;
use invocation_core::{ExecutionContext, ExecutionError, PortCall, PortExecutor};
use serde_json::Value;

use crate::KnowledgeSource;

/// The `lookup_knowledge` executor: sends the whitespace-collapsed query to a
/// [`KnowledgeSource`] and returns its response as the raw result
/// ([`Retrieve`]); `source()` gives the port back.
pub type KnowledgeExecutor<S> = PortExecutor<S, Retrieve>;

/// How `lookup_knowledge` asks a [`KnowledgeSource`]: the query with its
/// whitespace collapsed, the response as the raw result.
#[derive(Debug)]
pub enum Retrieve {}

#[async_trait]
impl<S: KnowledgeSource> PortCall<S> for Retrieve {
    type Request = LookupKnowledgeRequest;
    type Raw = Value;

    async fn call(
        source: &S,
        request: &LookupKnowledgeRequest,
        context: &ExecutionContext,
    ) -> Result<Value, ExecutionError> {
        let query = collapse_whitespace(&request.query);
        Ok(source.retrieve(&query, context).await?)
    }
}
