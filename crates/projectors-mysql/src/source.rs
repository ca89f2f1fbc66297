//! The `query_mysql` source port ([`MysqlSource`]): one read-only statement
//! against a named data source.

use std::fmt::Debug;
use std::sync::Arc;

use aci_contracts::SqlValue;
use async_trait::async_trait;

use crate::{RawResultSet, Result};

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
    /// it: the executor's
    /// [`Executor::drain`](invocation_core::Executor::drain), which
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
