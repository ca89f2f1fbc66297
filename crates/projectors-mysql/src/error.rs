//! The crate's one error type.

use invocation_core::bounds::InvalidBounds;
use invocation_core::{BoxError, ExecutionError, ExecutionErrorKind, SourceError};

/// A `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why a `query_mysql` call, a configuration or a projection bound failed.
///
/// Display and Debug never carry SQL text, parameter values, URLs, user names
/// or passwords: only the category, the logical data source name where one is
/// known, counts, and the server's error number. Driver errors are kept as the
/// `source` (for the harness's deliberate diagnostics: server messages may
/// quote the statement) and never reach the agent:
/// [`Error::into_execution_error`] keeps only an agent-safe category.
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// No data source has the requested logical name.
    #[error("no data source has the requested name")]
    DataSourceUnknown,
    /// The SQL gate refused the statement.
    #[error("query rejected: {reason}")]
    QueryRejected {
        /// Which rule the statement broke.
        reason: Rejection,
    },
    /// The statement's `?` placeholders and the supplied params differ in number.
    #[error("the statement has {placeholders} placeholders but {params} params were given")]
    ParamCountMismatch {
        /// `?` placeholders in the statement.
        placeholders: usize,
        /// Values in `params`.
        params: usize,
    },
    /// A data source's configuration is invalid (the URL is not repeated here).
    #[error("data source `{data_source}` is misconfigured: {problem}")]
    InvalidConfig {
        /// The logical name of the data source.
        data_source: String,
        /// What is wrong, as a constant phrase.
        problem: &'static str,
    },
    /// Projection bounds that cannot guarantee a valid, bounded result.
    #[error("invalid projection bounds: {0}")]
    InvalidBounds(#[from] InvalidBounds),
    /// A raw response whose row has a different number of values than columns.
    #[error("raw row {row} has {values} values for {columns} columns")]
    RowWidthMismatch {
        /// Position of the row.
        row: usize,
        /// Its number of values.
        values: usize,
        /// The number of columns.
        columns: usize,
    },
    /// No connection could be had in time, or connecting failed.
    #[error("could not connect to the data source")]
    Connect(#[source] Option<BoxError>),
    /// The server or the driver failed while running the statement.
    #[error("the statement failed")]
    Query(#[source] BoxError),
    /// The executor's own time limit for the statement passed.
    #[error("the statement did not finish in time")]
    Timeout,
}

/// Which rule of the SQL gate a statement broke. Carries no SQL text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Rejection {
    /// The statement is empty or only whitespace and comments.
    Empty,
    /// The statement does not tokenize or parse as MySQL.
    Unparsable,
    /// More than one statement.
    MultipleStatements,
    /// Not a query (INSERT, UPDATE, DELETE, DDL, CALL, SET, LOCK, SHOW, EXPLAIN, ...).
    NotAQuery,
    /// A query part that is not SELECT, a set operation (UNION, ...) or a
    /// parenthesized query (for example VALUES, TABLE, or a data-modifying CTE).
    NotASelect,
    /// `INTO OUTFILE`, `INTO DUMPFILE` or `INTO @variable`.
    Into,
    /// A locking clause: `FOR UPDATE`, `FOR SHARE`, `LOCK IN SHARE MODE`.
    LockingClause,
    /// A clause the gate does not accept (FOR XML/JSON, SETTINGS, FORMAT, pipes, PROCEDURE).
    UnsupportedClause,
    /// An executable comment (`/*! ... */`, `/*M! ... */`) or an optimizer hint (`/*+ ... */`).
    ExecutableComment,
    /// A call of a function on the deny list (SLEEP, BENCHMARK, LOAD_FILE, GET_LOCK, ...).
    ForbiddenFunction,
    /// A variable assignment (`:=`).
    Assignment,
    /// A placeholder other than `?`.
    UnsupportedPlaceholder,
    /// A table in a schema the data source does not allow.
    SchemaNotAllowed,
    /// A table source that is not a named table, a subquery, a join or
    /// `JSON_TABLE` (table functions, `UNNEST`, `PIVOT`, three-part names, ...).
    UnsupportedTable,
    /// A schema-qualified (stored) function call.
    StoredFunction,
    /// A system variable (`@@name`) that is not on
    /// [`ALLOWED_SYSTEM_VARIABLES`](crate::gate::ALLOWED_SYSTEM_VARIABLES):
    /// host names, paths, ports and accounts must not reach the model.
    SystemVariable,
    /// An `information_schema` table on
    /// [`DENIED_INFORMATION_SCHEMA_TABLES`](crate::gate::DENIED_INFORMATION_SCHEMA_TABLES)
    /// (server variables, status, sessions, grants).
    ServerInformation,
    /// A construct known to crash a supported server version (MariaDB
    /// 10.11): an `IN`, `ANY` or `ALL` subquery that reads no
    /// table, a `GROUP BY` in a query that reads no table, a `LIMIT` in an
    /// `EXISTS` subquery, a grouped subquery inside an aggregate, `<=>`
    /// with a `JSON_*` call, a grouped `IN`, `ANY`, `ALL` or `EXISTS`
    /// subquery that selects a subquery.
    KnownServerCrash,
    /// A token the server may read differently from the gate's parser (a
    /// word starting with a digit, a number glued to a word, `--` without an
    /// ASCII space, a double-quoted byte string, a NUL byte, a token outside
    /// MySQL's grammar).
    AmbiguousLexing,
}

impl Rejection {
    /// A stable SCREAMING_SNAKE spelling of the rule, for logs and metrics.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Empty => "EMPTY",
            Self::Unparsable => "UNPARSABLE",
            Self::MultipleStatements => "MULTIPLE_STATEMENTS",
            Self::NotAQuery => "NOT_A_QUERY",
            Self::NotASelect => "NOT_A_SELECT",
            Self::Into => "INTO",
            Self::LockingClause => "LOCKING_CLAUSE",
            Self::UnsupportedClause => "UNSUPPORTED_CLAUSE",
            Self::ExecutableComment => "EXECUTABLE_COMMENT",
            Self::ForbiddenFunction => "FORBIDDEN_FUNCTION",
            Self::Assignment => "ASSIGNMENT",
            Self::UnsupportedPlaceholder => "UNSUPPORTED_PLACEHOLDER",
            Self::SchemaNotAllowed => "SCHEMA_NOT_ALLOWED",
            Self::SystemVariable => "SYSTEM_VARIABLE",
            Self::ServerInformation => "SERVER_INFORMATION",
            Self::UnsupportedTable => "UNSUPPORTED_TABLE",
            Self::StoredFunction => "STORED_FUNCTION",
            Self::KnownServerCrash => "KNOWN_SERVER_CRASH",
            Self::AmbiguousLexing => "AMBIGUOUS_LEXING",
        }
    }
}

impl std::fmt::Display for Rejection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Error {
    /// A stable SCREAMING_SNAKE code of the category.
    #[must_use]
    pub const fn code(&self) -> &'static str {
        match self {
            Self::DataSourceUnknown => "DATA_SOURCE_UNKNOWN",
            Self::QueryRejected { .. } => "QUERY_REJECTED",
            Self::ParamCountMismatch { .. } => "PARAM_COUNT_MISMATCH",
            Self::InvalidConfig { .. } => "INVALID_CONFIG",
            Self::InvalidBounds(_) => "INVALID_BOUNDS",
            Self::RowWidthMismatch { .. } => "ROW_WIDTH_MISMATCH",
            Self::Connect(_) => "CONNECT_FAILED",
            Self::Query(_) => "QUERY_FAILED",
            Self::Timeout => "TIMEOUT",
        }
    }

    /// Whether the same call may succeed later unchanged (connection trouble,
    /// a timeout, a server-side failure) rather than needing a different request.
    #[must_use]
    pub const fn is_retryable(&self) -> bool {
        matches!(self, Self::Connect(_) | Self::Query(_) | Self::Timeout)
    }

    /// The agent-safe execution category of this error.
    #[must_use]
    pub fn execution_kind(&self) -> ExecutionErrorKind {
        match self {
            Self::DataSourceUnknown => ExecutionErrorKind::DataSourceUnknown,
            Self::QueryRejected { .. } => ExecutionErrorKind::QueryRejected,
            Self::ParamCountMismatch { .. } => ExecutionErrorKind::InvalidInput,
            Self::Timeout => ExecutionErrorKind::Timeout,
            // The server aborted the statement at its time limit.
            Self::Query(_) if matches!(self.server_code(), Some(1969 | 3024)) => {
                ExecutionErrorKind::Timeout
            }
            Self::InvalidConfig { .. }
            | Self::InvalidBounds(_)
            | Self::RowWidthMismatch { .. }
            | Self::Connect(_)
            | Self::Query(_) => ExecutionErrorKind::Failed,
        }
    }

    /// The boundary's execution error: the agent-safe category, with this
    /// error kept as the source for the harness.
    #[must_use]
    pub fn into_execution_error(self) -> ExecutionError {
        ExecutionError::from(self)
    }

    /// The MySQL/MariaDB server error number, when the server refused or
    /// aborted the statement (for example 1142 for a missing privilege, 1792
    /// for a write in a read-only transaction, 1969 or 3024 for a statement
    /// timeout).
    #[must_use]
    pub fn server_code(&self) -> Option<u16> {
        #[cfg(feature = "mysql")]
        if let Self::Query(source) = self
            && let Some(mysql_async::Error::Server(server)) =
                source.downcast_ref::<mysql_async::Error>()
        {
            return Some(server.code);
        }
        None
    }

    pub(crate) const fn rejected(reason: Rejection) -> Self {
        Self::QueryRejected { reason }
    }
}

impl std::fmt::Debug for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Not derived: the driver source's Debug may quote SQL or server text.
        f.debug_struct("Error")
            .field("code", &self.code())
            .field("message", &format_args!("{self}"))
            .field("server_code", &self.server_code())
            .field("has_source", &std::error::Error::source(self).is_some())
            .finish()
    }
}

/// `Error` is the [`MysqlSource`](crate::MysqlSource) port's error: it
/// converts into the boundary's `ExecutionError` by invocation-core's one
/// blanket conversion, keeping its category and retryability.
impl SourceError for Error {
    fn kind(&self) -> ExecutionErrorKind {
        self.execution_kind()
    }

    fn retryable(&self) -> bool {
        self.is_retryable()
    }
}
