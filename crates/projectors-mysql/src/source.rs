//! The `query_mysql` tool for the boundary: the source port
//! ([`MysqlSource`]), its adapter to the boundary's [`Executor`], and the
//! tool constructors (see docs/projectors.md, "One shape for the three tools").

use std::fmt::Debug;
use std::sync::Arc;

use aci_contracts::{QueryMysqlRequest, SqlValue, ToolName};
use async_trait::async_trait;
use invocation_core::bounds::{InvalidBounds, ProjectionBounds};
use invocation_core::{ExecutionContext, ExecutionError, Executor, ToolSpec};

use crate::{MysqlBounds, MysqlProjector, RawResultSet, Result, query_mysql_scope};

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
pub trait MysqlSource: Send + Sync + Debug + 'static {
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

    /// Waits for the cleanup of cancelled statements that runs on tasks of
    /// the source's own (their kills), so that a process exits only after
    /// it: the executor's [`Executor::drain`], which
    /// [`ToolBoundary::drain_abandoned`](invocation_core::ToolBoundary::drain_abandoned)
    /// waits for.
    ///
    /// # Behavior
    /// - Returns once every cleanup started before the call has finished or
    ///   given up; the source stays usable.
    /// - The default has nothing to wait for.
    async fn drain(&self) {}
}

#[async_trait]
impl<T: MysqlSource + ?Sized> MysqlSource for Arc<T> {
    async fn query(&self, query: MysqlQuery<'_>) -> Result<RawResultSet> {
        (**self).query(query).await
    }

    async fn drain(&self) {
        (**self).drain().await;
    }
}

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

    /// The wrapped source.
    pub const fn inner(&self) -> &S {
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

/// The tool type [`query_mysql_tool`] builds.
pub type QueryMysqlTool<S> = ToolSpec<QueryMysqlExecutor<S>, MysqlProjector>;

/// The frozen `query_mysql` tool over `source`, with the default projection
/// bounds, request validation (non-blank data source and SQL) and the scope
/// normalizer [`query_mysql_scope`].
pub fn query_mysql_tool<S: MysqlSource>(source: S) -> QueryMysqlTool<S> {
    tool(source, MysqlProjector::default())
}

/// [`query_mysql_tool`] with other projection bounds.
///
/// # Errors
/// [`InvalidBounds`] when `bounds` cannot guarantee a valid, bounded result;
/// bounds are refused, never clamped.
pub fn query_mysql_tool_with<S: MysqlSource>(
    source: S,
    bounds: MysqlBounds,
) -> Result<QueryMysqlTool<S>, InvalidBounds> {
    bounds.validate()?;
    Ok(tool(source, MysqlProjector::from_valid(bounds)))
}

fn tool<S: MysqlSource>(source: S, projector: MysqlProjector) -> QueryMysqlTool<S> {
    ToolSpec::frozen(
        ToolName::QueryMysql,
        QueryMysqlExecutor::new(source),
        projector,
    )
    .validate_with(|request: &QueryMysqlRequest| request.validate().is_ok())
    .scope_with(query_mysql_scope)
}
