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

mod error;
pub mod gate;
mod projector;
mod raw;
mod scope;
#[cfg(feature = "mysql")]
mod server;
mod source;
#[cfg(feature = "testing")]
pub mod testing;

pub use error::{Error, Rejection, Result};
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
pub use source::{
    MysqlQuery, MysqlSource, QueryMysqlExecutor, QueryMysqlTool, query_mysql_tool,
    query_mysql_tool_with,
};
