//! The `query_mysql` tool: row projector and a read-only MySQL executor.
//!
//! - [`query_mysql_tool`] builds the frozen tool for the
//!   [`ToolBoundary`](invocation_core::ToolBoundary) over any
//!   [`MysqlSource`] (the port: logical data source, SQL, params ->
//!   ordered columns and typed rows, [`RawResultSet`]).
//! - [`MysqlProjector`] turns raw rows into the bounded
//!   [`QueryMysqlResult`](aci_contracts::QueryMysqlResult) within
//!   [`MysqlBounds`]; the defaults fit the boundary's default agent result
//!   limit for any input.
//! - [`query_mysql_scope`] is the scope normalizer (what counts as the same query).
//! - [`gate`] is the SQL gate: one read-only query, nothing else.
//! - `MysqlAsyncSource` (feature `mysql`, on by default) is the real
//!   adapter: named data sources with allowed schemas, the gate, and
//!   server-side defenses (prepared statements, read-only transaction always
//!   rolled back, server and client time limits, row cap, streaming). See
//!   `docs/mysql.md`.
//!
//! Nothing agent-facing carries SQL text, URLs, credentials or limits: errors
//! reach the agent only as their [`ExecutionErrorKind`](invocation_core::ExecutionErrorKind).
//!
//! # Reference
//!
//! The rest of this page is the tool's reference (also the crate's
//! README.md).
#![doc = include_str!("../README.md")]

mod error;
mod executor;
pub mod gate;
mod projector;
mod raw;
mod scope;
#[cfg(feature = "mysql")]
mod server;
mod source;
#[cfg(feature = "testing")]
pub mod testing;

use aci_contracts::{QueryMysqlRequest, ToolName};
use invocation_core::ToolSpec;
use invocation_core::bounds::{InvalidBounds, ProjectionBounds};

pub use error::{Error, Rejection, Result};
pub use executor::{QueryMysqlExecutor, RunStatement};
pub use projector::{
    DEFAULT_MAX_CELL_BYTES, DEFAULT_MAX_COLUMN_NAME_BYTES, DEFAULT_MAX_COLUMNS, DEFAULT_MAX_ROWS,
    DEFAULT_MAX_ROWS_BYTES, MIN_CELL_BYTES, MysqlBounds, MysqlProjector, column_type,
};
pub use raw::{RawCell, RawColumn, RawColumnKind, RawResultSet};
pub use scope::{normalize_sql, query_mysql_scope};
#[cfg(feature = "mysql")]
pub use server::{
    DEFAULT_CLIENT_GRACE, DEFAULT_CONNECT_TIMEOUT, DEFAULT_FETCH_ROWS, DEFAULT_MAX_RAW_BYTES,
    DEFAULT_MAX_VALUE_BYTES, DEFAULT_STATEMENT_TIMEOUT, DataSourceConfig, MysqlAsyncSource,
    MysqlConfig,
};
pub use source::{MysqlQuery, MysqlSource};

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
