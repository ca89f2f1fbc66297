//! The real, read-only executor over `mysql_async`.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::OnceLock;
use std::time::Duration;

use async_trait::async_trait;
use mysql_async::consts::ColumnType;
use mysql_async::prelude::Queryable;
use mysql_async::{Column, Conn, Opts, Params, Pool, Transaction, TxOpts};
use tokio_util::task::TaskTracker;

use super::config::MysqlConfig;
use super::convert;
use crate::gate::{self, AllowedSchemas};
use crate::{
    Error, MysqlQuery, MysqlSource, RawCell, RawColumn, RawColumnKind, RawResultSet, Result,
};
use invocation_core::redact::connection_url;

/// How long a statement killed at the client timeout may take to hand its
/// connection back before it is abandoned to the pool.
const KILL_GRACE: Duration = Duration::from_secs(2);

/// SQL modes that change how statements are lexed (string quotes, backslash
/// escapes), or that imply one of those. They are cleared for the session so
/// that the server reads a statement the way the gate's parser did.
const LEXICAL_SQL_MODES: &[&str] = &[
    "ANSI_QUOTES",
    "NO_BACKSLASH_ESCAPES",
    "ANSI",
    "DB2",
    "MAXDB",
    "MSSQL",
    "ORACLE",
    "POSTGRESQL",
];

/// Which server dialect a data source speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flavor {
    /// `max_statement_time`, in seconds.
    MariaDb,
    /// `max_execution_time`, in milliseconds.
    MySql,
}

struct Source {
    pool: Pool,
    schemas: AllowedSchemas,
    fetch_rows: usize,
    timeout: Duration,
    client_timeout: Duration,
    redacted_url: String,
    flavor: OnceLock<Flavor>,
}

impl fmt::Debug for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Source")
            .field("url", &self.redacted_url)
            .field("schemas", &self.schemas)
            .field("fetch_rows", &self.fetch_rows)
            .field("timeout", &self.timeout)
            .field("client_timeout", &self.client_timeout)
            .finish_non_exhaustive()
    }
}

/// The read-only [`MysqlSource`] over `mysql_async` connection pools, one
/// per configured data source.
///
/// Each statement
/// 1. must name a configured data source (else [`Error::DataSourceUnknown`]);
/// 2. must pass the [SQL gate](crate::gate) (else [`Error::QueryRejected`] or
///    [`Error::ParamCountMismatch`]);
/// 3. then runs with the server-side defenses of [`run_read_only`](Self::run_read_only).
///
/// Pools connect lazily: building the executor does no I/O.
pub struct MysqlAsyncSource {
    sources: BTreeMap<String, Source>,
    connect_timeout: Duration,
    max_value_bytes: usize,
    max_raw_bytes: usize,
    /// The kills of cancelled statements still on their way (see
    /// [`MysqlSource::drain`]).
    kills: TaskTracker,
}

impl fmt::Debug for MysqlAsyncSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MysqlAsyncSource")
            .field("sources", &self.sources)
            .field("connect_timeout", &self.connect_timeout)
            .field("max_value_bytes", &self.max_value_bytes)
            .field("max_raw_bytes", &self.max_raw_bytes)
            .finish()
    }
}

impl MysqlAsyncSource {
    /// An executor over the data sources of `config`.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for a blank name, an unparsable URL (which is
    /// not repeated in the error), allowed schemas that are blank or leave
    /// out the URL's database, no database and no allowed schemas, or a zero
    /// row cap or time limit.
    pub fn new(config: &MysqlConfig) -> Result<Self> {
        let mut sources = BTreeMap::new();
        for (name, source) in &config.data_sources {
            let invalid = |problem| Error::InvalidConfig {
                data_source: name.clone(),
                problem,
            };
            if name.trim().is_empty() {
                return Err(invalid("the data source name is blank"));
            }
            let opts = Opts::from_url(&source.url)
                .map_err(|_| invalid("the url is not a valid MySQL URL"))?;
            if source.fetch_rows() == 0 {
                return Err(invalid("max_rows must be at least 1"));
            }
            if source.statement_timeout().is_zero() {
                return Err(invalid("timeout_ms must be at least 1"));
            }
            if source.client_time_limit().is_zero() {
                return Err(invalid("client_timeout_ms must be at least 1"));
            }
            let schemas = match (&source.allowed_schemas, opts.db_name()) {
                (Some(names), _) if names.iter().any(|n| n.trim().is_empty()) => {
                    return Err(invalid("allowed_schemas holds a blank name"));
                }
                (Some(names), Some(db)) if !names.iter().any(|n| n == db) => {
                    return Err(invalid(
                        "allowed_schemas must include the database of the url",
                    ));
                }
                (Some(names), _) => AllowedSchemas::new(names.iter().cloned()),
                (None, Some(db)) => AllowedSchemas::new([db]),
                (None, None) => {
                    return Err(invalid("name a database in the url or set allowed_schemas"));
                }
            };
            // No LOCAL INFILE handler is ever installed, so the driver never
            // sends a local file.
            sources.insert(
                name.clone(),
                Source {
                    pool: Pool::new(opts),
                    schemas,
                    fetch_rows: source.fetch_rows(),
                    timeout: source.statement_timeout(),
                    client_timeout: source.client_time_limit(),
                    redacted_url: connection_url(&source.url),
                    flavor: OnceLock::new(),
                },
            );
        }
        if config.connect_timeout().is_zero() {
            return Err(Error::InvalidConfig {
                data_source: String::new(),
                problem: "connect_timeout_ms must be at least 1",
            });
        }
        if config.value_bytes() == 0 || config.raw_bytes() == 0 {
            return Err(Error::InvalidConfig {
                data_source: String::new(),
                problem: "max_value_bytes and max_raw_bytes must be at least 1",
            });
        }
        Ok(Self {
            sources,
            connect_timeout: config.connect_timeout(),
            max_value_bytes: config.value_bytes(),
            max_raw_bytes: config.raw_bytes(),
            kills: TaskTracker::new(),
        })
    }

    /// The configured logical names, sorted.
    pub fn data_source_names(&self) -> impl Iterator<Item = &str> {
        self.sources.keys().map(String::as_str)
    }

    /// Runs `query` with the server-side defenses only, WITHOUT the SQL gate.
    ///
    /// This is the lower layer of [`MysqlSource::query`]; it exists so the
    /// server-side defenses can be shown to hold on their own (tests, audits).
    /// Never hand it agent input.
    ///
    /// Server-side defenses, in order:
    /// - a connection from the source's pool within the connect timeout;
    /// - session settings: the statement time limit (`max_statement_time` in
    ///   seconds on MariaDB, `max_execution_time` in milliseconds on MySQL),
    ///   `sql_select_limit` = row cap + 1, `time_zone` = UTC, and `sql_mode` without the modes
    ///   that change lexing (`ANSI_QUOTES`, `NO_BACKSLASH_ESCAPES`, ...);
    /// - `SET TRANSACTION READ ONLY` + `START TRANSACTION`, always rolled back;
    /// - the statement is prepared (and refused as `AMBIGUOUS_LEXING` when
    ///   the server counts other `?` placeholders than there are params) and
    ///   executed with its params (never interpolated), and rows are
    ///   streamed: at most row cap + 1 are read,
    ///   values longer than `max_value_bytes` are shortened, and reading stops
    ///   when the raw byte budget is reached; a statement stopped early has
    ///   its connection closed (which ends it on the server) rather than
    ///   drained;
    /// - everything after the connection is bounded by the client timeout;
    ///   when it passes, the statement is killed on the server with
    ///   `KILL QUERY <connection id>` from another connection of the pool
    ///   (an account may always kill its own statements) and the call fails
    ///   with [`Error::Timeout`]. The same kill is sent when the returned
    ///   future is dropped before the statement is done (for example by the
    ///   boundary's own execution timeout).
    ///
    /// # Errors
    /// [`Error::DataSourceUnknown`], [`Error::Connect`], [`Error::Query`]
    /// (see [`Error::server_code`]) or [`Error::Timeout`].
    pub async fn run_read_only(&self, query: MysqlQuery<'_>) -> Result<RawResultSet> {
        let source = self.source(query.data_source)?;
        let conn = tokio::time::timeout(self.connect_timeout, source.pool.get_conn())
            .await
            .map_err(|_| Error::Connect(None))?
            .map_err(|e| Error::Connect(Some(e.into())))?;
        // The guard owns the connection while the statement runs. Should this
        // future be dropped before the statement is done (an outer timeout, a
        // cancelled call), the guard kills the statement and only then lets
        // the connection go, so a kill can never reach a later statement of
        // a reused connection.
        let connection_id = conn.id();
        let mut guard = KillOnDrop {
            kills: self.kills.clone(),
            pool: source.pool.clone(),
            connection_id,
            connect_timeout: self.connect_timeout,
            conn: Some(conn),
        };
        // `work` borrows the guard's connection; the block ends that borrow.
        let ending = {
            let Some(conn) = guard.conn.as_mut() else {
                return Err(Error::Connect(None)); // the guard was just given it
            };
            let work = self.run(conn, source, query);
            tokio::pin!(work);
            match tokio::time::timeout(source.client_timeout, &mut work).await {
                Ok(result) => Ending::Finished(result),
                Err(_) => {
                    kill(&source.pool, connection_id, self.connect_timeout).await;
                    // Let the interrupted statement hand its connection back in a
                    // clean state; its own result no longer matters.
                    let settled = tokio::time::timeout(KILL_GRACE, work).await.is_ok();
                    Ending::Killed { settled }
                }
            }
        };
        match ending {
            Ending::Finished(Ok((raw, true))) => {
                guard.disarm();
                Ok(raw)
            }
            Ending::Finished(Ok((raw, false))) => {
                guard.close().await;
                Ok(raw)
            }
            Ending::Finished(Err(error)) => {
                guard.disarm();
                Err(error)
            }
            Ending::Killed { settled: true } => {
                guard.disarm();
                Err(Error::Timeout)
            }
            // Still busy after the kill: the guard discards the connection.
            Ending::Killed { settled: false } => Err(Error::Timeout),
        }
    }

    /// The schemas statements of `data_source` may name.
    ///
    /// # Errors
    /// [`Error::DataSourceUnknown`].
    pub fn allowed_schemas(&self, data_source: &str) -> Result<&AllowedSchemas> {
        self.source(data_source).map(|source| &source.schemas)
    }

    fn source(&self, name: &str) -> Result<&Source> {
        self.sources.get(name).ok_or(Error::DataSourceUnknown)
    }

    async fn run(
        &self,
        conn: &mut Conn,
        source: &Source,
        query: MysqlQuery<'_>,
    ) -> Result<(RawResultSet, bool)> {
        let flavor = match source.flavor.get() {
            Some(flavor) => *flavor,
            None => {
                let version: Option<String> = conn
                    .query_first("SELECT VERSION()")
                    .await
                    .map_err(query_error)?;
                let flavor = if version.is_some_and(|v| v.contains("MariaDB")) {
                    Flavor::MariaDb
                } else {
                    Flavor::MySql
                };
                *source.flavor.get_or_init(|| flavor)
            }
        };
        conn.query_drop(session_settings(flavor, source.timeout, source.fetch_rows))
            .await
            .map_err(query_error)?;

        let mut options = TxOpts::new();
        options.with_readonly(Some(true));
        let mut tx = conn.start_transaction(options).await.map_err(query_error)?;
        let params = if query.params.is_empty() {
            Params::Empty
        } else {
            Params::Positional(query.params.iter().map(convert::param).collect())
        };
        let statement = tx.prep(query.sql).await.map_err(query_error)?;
        // The server's count of `?` placeholders must be the gate's: if they
        // differ, the two lexers read the text differently (a `?` inside what
        // one takes for a literal or comment), so the gate's verdict is void.
        if usize::from(statement.num_params()) != query.params.len() {
            return Err(Error::rejected(crate::Rejection::AmbiguousLexing));
        }
        let mut columns: Vec<RawColumn> = statement.columns().iter().map(convert::column).collect();
        if flavor == Flavor::MariaDb {
            mark_json_columns(&mut tx, &statement.columns(), &mut columns).await?;
        }
        let mut result = tx
            .exec_iter(&statement, params)
            .await
            .map_err(query_error)?;

        let mut raw = RawResultSet {
            columns,
            ..RawResultSet::default()
        };
        let width = raw.columns.len().max(1);
        // Per value: the configured cap, shrunk for wide rows so one row stays
        // within half the byte budget.
        let value_bytes = self
            .max_value_bytes
            .min((self.max_raw_bytes / 2 / width).max(64));
        let mut raw_bytes = 0usize;
        let mut finished = false;
        loop {
            let Some(row) = result.next().await.map_err(query_error)? else {
                finished = true;
                break;
            };
            if raw.rows.len() == source.fetch_rows {
                raw.more_rows = true;
                break;
            }
            let mut values = Vec::with_capacity(raw.columns.len());
            let mut row_bytes = 0usize;
            for (value, column) in row.unwrap().into_iter().zip(&raw.columns) {
                let (value, cut) = convert::value(value, column.kind, value_bytes);
                raw.values_shortened |= cut;
                row_bytes += RawCell::recorded_bytes_upper_bound(&value);
                values.push(value);
            }
            // The first row is always kept, so rows found are never reported as none.
            if !raw.rows.is_empty() && raw_bytes + row_bytes > self.max_raw_bytes {
                raw.more_rows = true;
                break;
            }
            raw_bytes += row_bytes;
            raw.rows.push(values);
        }
        // Never a row more: when reading stopped early, the caller closes the
        // connection, which ends the statement and its transaction on the
        // server, instead of draining the rest.
        if finished {
            drop(result);
            tx.rollback().await.map_err(query_error)?;
        }
        Ok((raw, finished))
    }
}

/// How a statement run under the client timeout ended.
enum Ending {
    /// It finished: its rows (and whether they were read to the end), or its error.
    Finished(Result<(RawResultSet, bool)>),
    /// It was killed at the client timeout; `settled` when it then handed its
    /// connection back within the grace period.
    Killed { settled: bool },
}

/// Holds the connection of a running statement. Dropped while it still holds
/// it (the call was cancelled, or the statement outlived its kill), it kills
/// the statement from another connection, then closes this one instead of
/// returning it to the pool.
struct KillOnDrop {
    kills: TaskTracker,
    pool: Pool,
    connection_id: u32,
    connect_timeout: Duration,
    conn: Option<Conn>,
}

impl KillOnDrop {
    /// The statement is done: the connection goes back to the pool as usual.
    fn disarm(&mut self) {
        drop(self.conn.take());
    }

    /// The statement still has rows the executor will not read: close the
    /// connection (the server then stops the statement and rolls back)
    /// rather than let the pool drain them.
    async fn close(&mut self) {
        if let Some(conn) = self.conn.take() {
            let _ = tokio::time::timeout(KILL_GRACE, conn.disconnect()).await;
        }
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let Some(conn) = self.conn.take() else {
            return;
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                let (pool, connection_id, connect_timeout) =
                    (self.pool.clone(), self.connection_id, self.connect_timeout);
                self.kills.spawn_on(
                    async move {
                        kill(&pool, connection_id, connect_timeout).await;
                        // The connection may be mid-result: close it rather than
                        // hand it to the next call.
                        let _ = tokio::time::timeout(KILL_GRACE, conn.disconnect()).await;
                    },
                    &runtime,
                );
            }
            Err(_) => tracing::warn!(
                connection_id = self.connection_id,
                "a cancelled statement could not be killed: no runtime"
            ),
        }
    }
}

/// The JSON columns of one table on MariaDB: its JSON type is a `LONGTEXT`
/// alias with a `json_valid` column check, and the protocol the driver speaks
/// does not mark it.
const MARIADB_JSON_COLUMNS: &str = "SELECT CONSTRAINT_NAME FROM information_schema.CHECK_CONSTRAINTS \
     WHERE CONSTRAINT_SCHEMA = ? AND TABLE_NAME = ? AND LEVEL = 'Column' \
     AND CHECK_CLAUSE = CONCAT('json_valid(`', CONSTRAINT_NAME, '`)')";

/// Marks as JSON the text columns that come straight from a MariaDB table
/// column declared `JSON` (or with the same `json_valid` check). One lookup
/// per table, and only for statements that read `TEXT`-family columns of a
/// table; computed JSON (`JSON_OBJECT(...)`) stays text.
async fn mark_json_columns(
    tx: &mut Transaction<'_>,
    meta: &[Column],
    columns: &mut [RawColumn],
) -> Result<()> {
    let mut tables: BTreeMap<(String, String), Vec<usize>> = BTreeMap::new();
    for (index, (column, raw)) in meta.iter().zip(columns.iter()).enumerate() {
        let text_family = matches!(
            column.column_type(),
            ColumnType::MYSQL_TYPE_BLOB
                | ColumnType::MYSQL_TYPE_TINY_BLOB
                | ColumnType::MYSQL_TYPE_MEDIUM_BLOB
                | ColumnType::MYSQL_TYPE_LONG_BLOB
        );
        if raw.kind == RawColumnKind::Text
            && text_family
            && !column.schema_ref().is_empty()
            && !column.org_table_ref().is_empty()
            && !column.org_name_ref().is_empty()
        {
            tables
                .entry((
                    column.schema_str().into_owned(),
                    column.org_table_str().into_owned(),
                ))
                .or_default()
                .push(index);
        }
    }
    for ((schema, table), indexes) in tables {
        let json: Vec<String> = tx
            .exec(MARIADB_JSON_COLUMNS, (schema, table))
            .await
            .map_err(query_error)?;
        for index in indexes {
            if json.iter().any(|name| *name == meta[index].org_name_str()) {
                columns[index].kind = RawColumnKind::Json;
            }
        }
    }
    Ok(())
}

/// Kills the statement running on connection `connection_id`, from another
/// connection of the same pool (an account may always kill its own
/// statements). Failure is logged, not returned: the server-side time limit
/// still stops the statement.
async fn kill(pool: &Pool, connection_id: u32, connect_timeout: Duration) {
    let kill = async {
        let mut conn = pool.get_conn().await?;
        conn.query_drop(format!("KILL QUERY {connection_id}")).await
    };
    match tokio::time::timeout(connect_timeout, kill).await {
        Ok(Ok(())) => tracing::debug!(connection_id, "killed an unfinished statement"),
        Ok(Err(error)) => tracing::warn!(
            connection_id,
            server_code = Error::Query(error.into()).server_code(),
            "could not kill an unfinished statement"
        ),
        Err(_) => tracing::warn!(
            connection_id,
            "could not kill an unfinished statement: no connection in time"
        ),
    }
}

/// One `SET SESSION` statement with the time limit, the row cap, UTC (so
/// that `TIMESTAMP` values read as UTC) and a lexically neutral `sql_mode`.
fn session_settings(flavor: Flavor, timeout: Duration, fetch_rows: usize) -> String {
    let time_limit = match flavor {
        Flavor::MariaDb => format!(
            "max_statement_time = {:.3}",
            timeout.as_secs_f64().max(0.001)
        ),
        Flavor::MySql => format!(
            "max_execution_time = {}",
            timeout.as_millis().clamp(1, u128::from(u32::MAX))
        ),
    };
    let mut mode = "CONCAT(',', @@SESSION.sql_mode, ',')".to_owned();
    for name in LEXICAL_SQL_MODES {
        mode = format!("REPLACE({mode}, ',{name},', ',')");
    }
    format!(
        "SET SESSION {time_limit}, SESSION sql_select_limit = {}, SESSION time_zone = '+00:00', \
         SESSION sql_mode = TRIM(BOTH ',' FROM {mode})",
        fetch_rows.saturating_add(1)
    )
}

fn query_error(error: mysql_async::Error) -> Error {
    Error::Query(error.into())
}

#[async_trait]
impl MysqlSource for MysqlAsyncSource {
    async fn query(&self, query: MysqlQuery<'_>) -> Result<RawResultSet> {
        let source = self.source(query.data_source)?;
        gate::check_query(query.sql, query.params.len(), &source.schemas)?;
        self.run_read_only(query).await
    }

    /// Waits until every kill of a cancelled statement (a call whose future
    /// was dropped while its statement ran) has been sent to the server and
    /// its connection closed, or given up (each is bounded by the connect
    /// timeout and a short grace). A kill runs on a task of its own; a
    /// process that exits before it ran leaves the statement running.
    async fn drain(&self) {
        self.kills.close();
        self.kills.wait().await;
        self.kills.reopen();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DataSourceConfig;

    #[tokio::test]
    async fn no_data_sources_means_every_name_is_unknown() {
        let executor = MysqlAsyncSource::new(&MysqlConfig::new()).unwrap();
        let query = MysqlQuery {
            data_source: "orders",
            sql: "SELECT 1",
            params: &[],
        };
        let error = executor.query(query).await.unwrap_err();
        assert!(matches!(error, Error::DataSourceUnknown));
        assert_eq!(
            error.into_execution_error().error_code(),
            aci_contracts::ErrorCode::DataSourceUnknown
        );
    }

    #[test]
    fn bad_configuration_is_refused_without_echoing_the_url() {
        for (source, problem) in [
            (DataSourceConfig::new("postgres://u:hunter2@h/db"), "url"),
            (
                DataSourceConfig::new("mysql://u:hunter2@h/db").max_rows(0),
                "max_rows",
            ),
            (
                DataSourceConfig::new("mysql://u:hunter2@h/db").timeout(Duration::ZERO),
                "timeout_ms",
            ),
        ] {
            let error = MysqlAsyncSource::new(&MysqlConfig::new().data_source("orders", source))
                .unwrap_err();
            let text = format!("{error} {error:?}");
            assert!(text.contains(problem) && text.contains("orders"), "{text}");
            assert!(!text.contains("hunter2") && !text.contains("u:"), "{text}");
            assert_eq!(error.code(), "INVALID_CONFIG");
        }
        let error = MysqlAsyncSource::new(
            &MysqlConfig::new().data_source(" ", DataSourceConfig::new("mysql://h/db")),
        )
        .unwrap_err();
        assert_eq!(error.code(), "INVALID_CONFIG");
        for config in [
            MysqlConfig {
                connect_timeout_ms: Some(0),
                ..MysqlConfig::new()
            },
            MysqlConfig {
                max_raw_bytes: Some(0),
                ..MysqlConfig::new()
            },
            MysqlConfig::new().data_source(
                "orders",
                DataSourceConfig::new("mysql://h/db").client_timeout(Duration::ZERO),
            ),
        ] {
            let error = MysqlAsyncSource::new(&config).unwrap_err();
            assert_eq!(error.code(), "INVALID_CONFIG", "{config:?}");
        }
    }

    #[test]
    fn session_settings_per_flavor() {
        let maria = session_settings(Flavor::MariaDb, Duration::from_millis(1500), 100);
        assert!(maria.starts_with(
            "SET SESSION max_statement_time = 1.500, SESSION sql_select_limit = 101,"
        ));
        let mysql = session_settings(Flavor::MySql, Duration::from_millis(1500), 100);
        assert!(mysql.starts_with("SET SESSION max_execution_time = 1500,"));
        assert!(mysql.contains("REPLACE(") && mysql.contains(",ANSI_QUOTES,"));
    }
}
