//! The `query_mysql` executor: the [`MysqlSource`] port adapted to the
//! boundary's [`Executor`].

use aci_contracts::QueryMysqlRequest;
use async_trait::async_trait;
use invocation_core::{ExecutionContext, ExecutionError, Executor};

use crate::{MysqlQuery, MysqlSource, RawResultSet};

/// Adapts a [`MysqlSource`] to the boundary's [`Executor`].
#[derive(Debug, Clone)]
pub struct QueryMysqlExecutor<S> {
    source: S,
}

impl<S: MysqlSource> QueryMysqlExecutor<S> {
    /// Wraps `source`.
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
impl<S: MysqlSource> Executor for QueryMysqlExecutor<S> {
    type Request = QueryMysqlRequest;
    type Raw = RawResultSet;

    async fn execute(
        &self,
        request: &QueryMysqlRequest,
        _context: &ExecutionContext,
    ) -> Result<RawResultSet, ExecutionError> {
        let query = MysqlQuery {
            data_source: &request.data_source,
            sql: &request.sql,
            params: &request.params,
        };
        Ok(self.source.query(query).await?)
    }

    async fn drain(&self) {
        self.source.drain().await;
    }
}
