//! The TOML configuration file. Every key is optional; unknown keys are errors.
//!
//! ```toml
//! # Where canonical records live: "memory" (default, this process only),
//! # "redis://host:6379/0", "rediss://host:6380/0" (TLS),
//! # "redis+cluster://host1:7000,host2:7001" or "rediss+cluster://…" (TLS).
//! store = "memory"
//!
//! [redis]
//! key_prefix = "aci"        # prefix of every key
//! pool_size = 4             # shared multiplexed connections
//! timeout_ms = 2000         # per store operation
//! tls_ca_file = "/etc/aci/redis-ca.pem"        # rediss://: trust this CA bundle
//! tls_client_cert_file = "/etc/aci/client.pem" # rediss://: mutual TLS, with
//! tls_client_key_file = "/etc/aci/client.key"  #   the matching key
//!
//! [limits]
//! max_request_bytes = 16384
//! max_raw_bytes = 1048576
//! max_agent_result_bytes = 16384
//! max_record_bytes = 2097152
//! record_ttl_secs = 86400
//! timeout_secs = 30          # per tool execution
//!
//! [run]
//! deadline_secs = 900        # from the run's first call
//! budget = 50                # tool calls per run, all tools
//! [run.tool_budgets]
//! query_mysql = 10
//!
//! [serve]
//! drain_secs = 30            # at a stop, how long running calls may finish
//!                            # (default: the longest tool timeout)
//! recover_older_than_secs = 90  # at start, recover this run's PROJECTING records
//!                            # older than this (default: longest tool timeout + 30)
//!
//! [knowledge]
//! dir = "./runbooks"         # Markdown and .txt files; default: the bundled runbooks
//! index_dir = "/var/cache/aci/knowledge"  # persistent index; default: the platform cache dir
//! persistent = true          # false: index in RAM, rebuilt by every process
//!
//! [mysql]
//! connect_timeout_ms = 5000  # time to get a connection
//! max_value_bytes = 16384    # bytes kept of one text/JSON/binary value
//! max_raw_bytes = 262144     # budget of one raw result set
//! [mysql.data_sources.orders]   # the logical name agents use
//! url = "mysql://reader:secret@127.0.0.1:3306/shop"   # a SELECT-only account
//! allowed_schemas = ["shop", "information_schema"]  # default: the URL's database
//! max_rows = 100             # rows fetched per statement
//! timeout_ms = 10000         # server-side statement time limit
//! client_timeout_ms = 11000  # then the statement is killed (default: timeout_ms + 1000)
//!
//! [logs]                      # without topics, query_logs reads the mock incident
//! max_raw_events = 200        # most recent matches kept per call
//! [logs.topics.APPLICATION]   # APPLICATION | DATABASE_SLOW_QUERY | SYSTEM_EVENTS
//! dir = "/var/log/order-service"   # nothing outside it is opened
//! files = ["app.log*"]        # file-name globs in dir (rotated and .gz files)
//! format = "json_lines"       # json_lines | logfmt | syslog | mysql_slow
//! time_key = "ts"             # json_lines/logfmt keys; level_key, message_key too
//! timestamp = "rfc3339"       # or epoch_seconds, epoch_millis, a strftime layout
//! time_zone = "UTC"           # of times without an offset: UTC, ±HH:MM or an IANA name
//! ```
//!
//! `aci serve --http` adds `[auth]` and `[serve]`, documented in
//! [`crate::http::config`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use projectors_logs::LogsConfig;
use projectors_mysql::MysqlConfig;
use serde::Deserialize;

use crate::error::CliError;
pub(crate) use crate::http::config::AuthSection;

/// The whole configuration file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Config {
    /// `memory`, a `redis://`/`rediss://` URL, or `redis+cluster://h1:p1,h2:p2`.
    pub(crate) store: Option<String>,
    #[serde(default)]
    pub(crate) redis: RedisSection,
    #[serde(default)]
    pub(crate) limits: LimitsSection,
    #[serde(default)]
    pub(crate) run: RunSection,
    #[serde(default)]
    pub(crate) knowledge: KnowledgeSection,
    #[serde(default)]
    pub(crate) serve: ServeSection,
    #[serde(default)]
    pub(crate) mysql: MysqlConfig,
    #[serde(default)]
    pub(crate) logs: LogsConfig,
    /// `[auth]`: bearer tokens of `aci serve --http`.
    #[serde(default)]
    pub(crate) auth: AuthSection,
}

/// `[redis]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RedisSection {
    pub(crate) key_prefix: Option<String>,
    pub(crate) pool_size: Option<usize>,
    pub(crate) timeout_ms: Option<u64>,
    pub(crate) tls_ca_file: Option<PathBuf>,
    pub(crate) tls_client_cert_file: Option<PathBuf>,
    pub(crate) tls_client_key_file: Option<PathBuf>,
}

/// `[limits]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct LimitsSection {
    pub(crate) max_request_bytes: Option<usize>,
    pub(crate) max_raw_bytes: Option<usize>,
    pub(crate) max_agent_result_bytes: Option<usize>,
    pub(crate) max_record_bytes: Option<usize>,
    pub(crate) record_ttl_secs: Option<u64>,
    pub(crate) timeout_secs: Option<u64>,
}

/// `[run]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RunSection {
    pub(crate) deadline_secs: Option<u64>,
    pub(crate) budget: Option<u32>,
    #[serde(default)]
    pub(crate) tool_budgets: BTreeMap<String, u32>,
}

/// `[serve]`: the MCP server.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ServeSection {
    /// At a stop, how long running calls may still finish before they are
    /// abandoned (default: the longest tool timeout).
    pub(crate) drain_secs: Option<u64>,
    /// At start, this run's PROJECTING records older than this are finalized
    /// `ERROR / EXECUTION_ABANDONED` (default: the longest tool timeout plus
    /// a margin). Shorter is safe only when no other live process serves the
    /// run.
    pub(crate) recover_older_than_secs: Option<u64>,
    /// `--http`: calls running at once in this replica (default 64).
    pub(crate) max_in_flight: Option<usize>,
    /// `--http`: calls running at once per principal in this replica
    /// (default: only the replica's limit).
    pub(crate) max_in_flight_per_principal: Option<usize>,
    /// `--http`: `Host` header values accepted (DNS rebinding protection;
    /// default: the loopback names).
    pub(crate) allowed_hosts: Option<Vec<String>>,
}

/// `[knowledge]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct KnowledgeSection {
    pub(crate) dir: Option<PathBuf>,
    pub(crate) index_dir: Option<PathBuf>,
    pub(crate) persistent: Option<bool>,
}

impl Config {
    /// Reads and parses `path`.
    pub(crate) fn load(path: &Path) -> Result<Self, CliError> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            CliError::config(format!("cannot read config file {}: {e}", path.display()))
        })?;
        Self::parse(&text).map_err(|message| {
            CliError::config(format!("config file {}: {message}", path.display()))
        })
    }

    /// Parses TOML text. The error is one line.
    pub(crate) fn parse(text: &str) -> Result<Self, String> {
        toml::from_str(text).map_err(|e| {
            // toml's message spans several lines (with a source excerpt that could
            // echo a secret); keep its first line only.
            let message = e
                .message()
                .lines()
                .next()
                .unwrap_or("invalid TOML")
                .to_owned();
            match e.span() {
                Some(span) => {
                    let line = text[..span.start.min(text.len())].matches('\n').count() + 1;
                    format!("line {line}: {message}")
                }
                None => message,
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_documented_key_parses() {
        let doc: String = include_str!("config.rs")
            .lines()
            .take_while(|l| l.starts_with("//!"))
            .filter_map(|l| l.strip_prefix("//! "))
            .skip_while(|l| !l.starts_with("```toml"))
            .skip(1)
            .take_while(|l| !l.starts_with("```"))
            .collect::<Vec<_>>()
            .join("\n");
        let config = Config::parse(&doc).unwrap();
        assert_eq!(config.store.as_deref(), Some("memory"));
        assert_eq!(config.limits.timeout_secs, Some(30));
        assert_eq!(config.serve.drain_secs, Some(30));
        assert_eq!(config.run.tool_budgets.get("query_mysql"), Some(&10));
        let orders = &config.mysql.data_sources["orders"];
        assert_eq!(orders.max_rows, Some(100));
        assert_eq!(orders.client_timeout_ms, Some(11_000));
        assert_eq!(
            orders.allowed_schemas.as_deref(),
            Some(["shop".to_owned(), "information_schema".to_owned()].as_slice())
        );
        assert!(!format!("{config:?}").contains("secret"));
    }

    #[test]
    fn unknown_keys_are_one_line_errors() {
        let err = Config::parse("store = \"memory\"\n[limits]\nmax_bytes = 3\n").unwrap_err();
        assert!(
            err.starts_with("line 3: unknown field `max_bytes`"),
            "{err}"
        );
        assert!(!err.contains('\n'));
        let err = Config::parse("[run]\nbudget = \"lots\"\n").unwrap_err();
        assert!(err.starts_with("line 2:"), "{err}");
    }
}
