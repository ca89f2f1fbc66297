//! The `query_mysql` tool for the boundary: the executor port, its adapter to
//! the boundary's [`Executor`], and the tool constructor.

use std::fmt::Debug;
use std::sync::Arc;

use aci_contracts::{QueryMysqlRequest, SqlValue, ToolName};
use async_trait::async_trait;
use invocation_core::{ExecutionContext, ExecutionError, Executor, ToolSpec};

use crate::{MysqlProjector, RawResultSet, Result, query_mysql_scope};

/// One statement to run against a logical data source.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MysqlQuery<'a> {
    /// The logical data source name, exactly as the agent gave it.
    pub data_source: &'a str,
    /// The statement, with `?` placeholders.
    pub sql: &'a str,
    /// The placeholder values, in order.
    pub params: &'a [SqlValue],
}

/// Runs one read-only statement against a named data source and returns its
/// ordered columns and typed rows.
#[async_trait]
pub trait MysqlExecutor: Send + Sync + Debug + 'static {
    /// Runs `query`.
    ///
    /// # Behavior
    /// - Returns the columns in the statement's order and each row with one
    ///   value per column.
    /// - May stop fetching early (its own row or byte caps); then it sets
    ///   [`RawResultSet::more_rows`]. Values it shortens set
    ///   [`RawResultSet::values_shortened`].
    /// - Never writes: adapters refuse anything but one read-only query.
    ///
    /// # Errors
    /// - [`Error::DataSourceUnknown`](crate::Error::DataSourceUnknown) when no
    ///   data source has that name;
    /// - [`Error::QueryRejected`](crate::Error::QueryRejected) when the
    ///   statement is not one read-only query;
    /// - [`Error::ParamCountMismatch`](crate::Error::ParamCountMismatch) when
    ///   placeholders and params differ in number;
    /// - other variants when connecting or running fails.
    async fn query(&self, query: MysqlQuery<'_>) -> Result<RawResultSet>;
}

#[async_trait]
impl<T: MysqlExecutor + ?Sized> MysqlExecutor for Arc<T> {
    async fn query(&self, query: MysqlQuery<'_>) -> Result<RawResultSet> {
        (**self).query(query).await
    }
}

/// Adapts a [`MysqlExecutor`] to the boundary's [`Executor`].
#[derive(Debug, Clone)]
pub struct QueryMysqlExecutor<X> {
    executor: X,
}

impl<X: MysqlExecutor> QueryMysqlExecutor<X> {
    /// Wraps `executor`.
    pub const fn new(executor: X) -> Self {
        Self { executor }
    }

    /// The wrapped executor.
    pub const fn inner(&self) -> &X {
        &self.executor
    }
}

#[async_trait]
impl<X: MysqlExecutor> Executor for QueryMysqlExecutor<X> {
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
        self.executor
            .query(query)
            .await
            .map_err(crate::Error::into_execution_error)
    }
}

/// The tool type [`query_mysql_tool`] builds.
pub type QueryMysqlTool<X> = ToolSpec<QueryMysqlExecutor<X>, MysqlProjector>;

/// The frozen `query_mysql` tool over `executor`, with the default projection
/// bounds, request validation (non-blank data source and SQL) and the scope
/// normalizer [`query_mysql_scope`].
pub fn query_mysql_tool<X: MysqlExecutor>(executor: X) -> QueryMysqlTool<X> {
    query_mysql_tool_with(executor, MysqlProjector::default())
}

/// [`query_mysql_tool`] with a custom projector (for example tighter bounds).
pub fn query_mysql_tool_with<X: MysqlExecutor>(
    executor: X,
    projector: MysqlProjector,
) -> QueryMysqlTool<X> {
    ToolSpec::frozen(
        ToolName::QueryMysql,
        QueryMysqlExecutor::new(executor),
        projector,
    )
    .validate_with(|request: &QueryMysqlRequest| request.validate().is_ok())
    .scope_with(query_mysql_scope)
}
