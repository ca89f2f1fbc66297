//! Data source configuration of the real executor.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use invocation_core::redact::connection_url;
use serde::Deserialize;

use crate::DEFAULT_MAX_ROWS;

/// Default rows fetched per statement (one more is read to tell whether
/// there were more): the projector's default row bound.
pub const DEFAULT_FETCH_ROWS: usize = DEFAULT_MAX_ROWS;
/// Default server-side statement time limit.
pub const DEFAULT_STATEMENT_TIMEOUT: Duration = Duration::from_secs(10);
/// Default time the client waits beyond the server-side statement limit
/// before it kills the statement itself.
pub const DEFAULT_CLIENT_GRACE: Duration = Duration::from_secs(1);
/// Default time to get a connection.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Default bytes kept of one text, JSON or binary value in the raw response.
pub const DEFAULT_MAX_VALUE_BYTES: usize = 16 * 1024;
/// Default budget of the raw response (estimated JSON bytes); fetching stops
/// when it is reached. Well below the boundary's default raw limit (1 MiB).
pub const DEFAULT_MAX_RAW_BYTES: usize = 256 * 1024;

/// The real executor's configuration: named data sources and fetch limits.
///
/// Deserializes from the `[mysql]` table of the CLI's TOML file
/// (`connect_timeout_ms`, `max_value_bytes`, `max_raw_bytes`, and per
/// `[mysql.data_sources.NAME]` the [`DataSourceConfig`] keys); the README's
/// "Configuration" section has the example of every key.
///
/// Unknown keys are refused. Debug output redacts passwords.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MysqlConfig {
    /// Data sources by logical name (the name agents use).
    #[serde(default)]
    pub data_sources: BTreeMap<String, DataSourceConfig>,
    /// Time to get a connection, in milliseconds (default 5000).
    #[serde(default)]
    pub connect_timeout_ms: Option<u64>,
    /// Bytes kept of one text, JSON or binary value (default 16384).
    #[serde(default)]
    pub max_value_bytes: Option<usize>,
    /// Budget of one raw response in estimated JSON bytes (default 262144).
    #[serde(default)]
    pub max_raw_bytes: Option<usize>,
}

impl MysqlConfig {
    /// No data sources: every call is `DATA_SOURCE_UNKNOWN`.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds (or replaces) the data source `name`.
    #[must_use]
    pub fn data_source(mut self, name: impl Into<String>, source: DataSourceConfig) -> Self {
        self.data_sources.insert(name.into(), source);
        self
    }

    pub(crate) fn connect_timeout(&self) -> Duration {
        self.connect_timeout_ms
            .map_or(DEFAULT_CONNECT_TIMEOUT, Duration::from_millis)
    }

    pub(crate) fn value_bytes(&self) -> usize {
        self.max_value_bytes.unwrap_or(DEFAULT_MAX_VALUE_BYTES)
    }

    pub(crate) fn raw_bytes(&self) -> usize {
        self.max_raw_bytes.unwrap_or(DEFAULT_MAX_RAW_BYTES)
    }
}

/// One data source: where it is and how much one statement may take.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DataSourceConfig {
    /// `mysql://user:password@host:port/database?options` (mysql_async URL
    /// options, for example `require_ssl=true`, `pool_max=10`,
    /// `prefer_socket=false`). Use a least-privilege account.
    pub url: String,
    /// Schemas statements may name (`schema.table`); unqualified tables are
    /// in the URL's database, which must be one of them. Default: the URL's
    /// database alone. Add `information_schema` to let agents ask about
    /// tables and columns (the server shows only what the account may see).
    #[serde(default)]
    pub allowed_schemas: Option<Vec<String>>,
    /// Most rows fetched per statement (default [`DEFAULT_FETCH_ROWS`]).
    #[serde(default)]
    pub max_rows: Option<usize>,
    /// Server-side statement time limit in milliseconds (default 10000).
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// Client-side limit in milliseconds for the session set-up, the
    /// statement and reading its rows; when it passes, the executor kills the
    /// statement on the server (`KILL QUERY`) and reports a timeout. Default:
    /// the statement limit plus [`DEFAULT_CLIENT_GRACE`].
    #[serde(default)]
    pub client_timeout_ms: Option<u64>,
}

impl DataSourceConfig {
    /// A data source at `url` with default limits.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            allowed_schemas: None,
            max_rows: None,
            timeout_ms: None,
            client_timeout_ms: None,
        }
    }

    /// Sets the schemas statements may name.
    #[must_use]
    pub fn allowed_schemas<I, S>(mut self, schemas: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.allowed_schemas = Some(schemas.into_iter().map(Into::into).collect());
        self
    }

    /// Sets the client-side time limit.
    #[must_use]
    pub fn client_timeout(mut self, timeout: Duration) -> Self {
        self.client_timeout_ms = Some(u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX));
        self
    }

    /// Sets the row cap.
    #[must_use]
    pub const fn max_rows(mut self, max_rows: usize) -> Self {
        self.max_rows = Some(max_rows);
        self
    }

    /// Sets the statement time limit.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout_ms = Some(u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX));
        self
    }

    pub(crate) fn fetch_rows(&self) -> usize {
        self.max_rows.unwrap_or(DEFAULT_FETCH_ROWS)
    }

    pub(crate) fn statement_timeout(&self) -> Duration {
        self.timeout_ms
            .map_or(DEFAULT_STATEMENT_TIMEOUT, Duration::from_millis)
    }

    pub(crate) fn client_time_limit(&self) -> Duration {
        self.client_timeout_ms.map_or_else(
            || {
                self.statement_timeout()
                    .saturating_add(DEFAULT_CLIENT_GRACE)
            },
            Duration::from_millis,
        )
    }
}

impl fmt::Debug for DataSourceConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DataSourceConfig")
            .field("url", &connection_url(&self.url))
            .field("allowed_schemas", &self.allowed_schemas)
            .field("max_rows", &self.max_rows)
            .field("timeout_ms", &self.timeout_ms)
            .field("client_timeout_ms", &self.client_timeout_ms)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_redacts_the_password() {
        let config = MysqlConfig::new().data_source(
            "orders",
            DataSourceConfig::new("mysql://reader:s3cr3t-pw@db.example:3307/shop?require_ssl=true")
                .max_rows(5),
        );
        let debug = format!("{config:?}");
        // Neither credentials nor the host (invocation_core::redact).
        for secret in ["s3cr3t-pw", "reader", "db.example", "3307", "require_ssl"] {
            assert!(!debug.contains(secret), "{debug}");
        }
        assert!(debug.contains("mysql://***/shop"), "{debug}");
    }

    #[test]
    fn deserializes_and_refuses_unknown_keys() {
        let config: MysqlConfig = serde_json::from_value(serde_json::json!({
            "connect_timeout_ms": 100,
            "data_sources": {"orders": {"url": "mysql://u:p@h/db", "max_rows": 7, "timeout_ms": 250}}
        }))
        .unwrap();
        let orders = &config.data_sources["orders"];
        assert_eq!(orders.fetch_rows(), 7);
        assert_eq!(orders.statement_timeout(), Duration::from_millis(250));
        assert_eq!(config.connect_timeout(), Duration::from_millis(100));
        assert!(
            serde_json::from_value::<MysqlConfig>(serde_json::json!({
                "data_sources": {"orders": {"url": "mysql://h/db", "password": "x"}}
            }))
            .is_err()
        );
    }
}
