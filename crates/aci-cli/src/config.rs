//! The TOML configuration file. Every key is optional; unknown keys are errors.
//!
//! The file composes the adapters' own settings: `[redis]` is
//! [`store_redis::RedisSettings`], `[limits]` [`invocation_core::LimitsConfig`],
//! `[mysql]` [`projectors_mysql::MysqlConfig`], `[logs]`
//! [`projectors_logs::LogsConfig`], `[redaction]`
//! [`invocation_core::redact::RedactionConfig`], `[archive]`
//! [`store_archive::ArchiveSettings`]; `[run]`, `[knowledge]` and `[serve]` are
//! the CLI's own, `aci serve --http` adds `[auth]` ([`crate::http::config`]),
//! and `[telemetry]` is [`crate::telemetry::TelemetrySection`].
//!
//! The one example of every key is the README's "Configuration" section (and
//! its "Serving many agents over HTTP" section for `[auth]`); a test parses
//! every TOML block of the README.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use invocation_core::LimitsConfig;
use invocation_core::redact::{RedactionConfig, Redactor, RulesFile};
use projectors_logs::LogsConfig;
use projectors_mysql::MysqlConfig;
use serde::Deserialize;
use store_redis::RedisSettings;

use crate::error::CliError;
pub(crate) use crate::http::config::AuthSection;
use crate::telemetry::TelemetrySection;

/// The whole configuration file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Config {
    /// `memory`, a `redis://`/`rediss://` URL, or `redis+cluster://h1:p1,h2:p2`.
    pub(crate) store: Option<String>,
    #[serde(default)]
    pub(crate) redis: RedisSettings,
    #[serde(default)]
    pub(crate) limits: LimitsConfig,
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
    /// `[redaction]`: extra rules and the allowlist of the one redaction pass
    /// (the built-in rules always apply).
    #[serde(default)]
    pub(crate) redaction: RedactionConfig,
    /// `[archive]`: the PostgreSQL archive. With its `url`, every process
    /// that reads the file writes the Redis store's outbox (for `aci
    /// archive`), or archives its memory store's records itself.
    pub(crate) archive: Option<store_archive::ArchiveSettings>,
    /// `[telemetry]`: OpenTelemetry traces over OTLP/HTTP.
    #[serde(default)]
    pub(crate) telemetry: TelemetrySection,
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
    /// `--http`: threads serving connections, each on a runtime of its own
    /// (default: the available cores).
    pub(crate) workers: Option<usize>,
    /// `--http`: `Host` header values accepted (DNS rebinding protection;
    /// default: the loopback names).
    pub(crate) allowed_hosts: Option<Vec<String>>,
    /// `--http`: connections open at once; at the cap, idle connections are
    /// shed, unauthenticated ones first (default: 10,000, or fewer to keep
    /// 512 file descriptors of the process's limit for everything else).
    pub(crate) max_connections: Option<usize>,
    /// `--http`: seconds for a request head to arrive whole, from the
    /// accept or from its first byte (default 10).
    pub(crate) header_timeout_secs: Option<u64>,
    /// `--http`: seconds a keep-alive connection may sit idle between
    /// requests (default 60).
    pub(crate) idle_timeout_secs: Option<u64>,
    /// `--http`: seconds for a request body to arrive whole after its head
    /// (default 30).
    pub(crate) body_timeout_secs: Option<u64>,
    /// `--http`: headers in one request head; more is answered 431
    /// (default 64).
    pub(crate) max_header_count: Option<usize>,
    /// `--http`: bytes of one request head, request line included; more is
    /// answered 431 (default 16384, at least 8192).
    pub(crate) max_header_bytes: Option<usize>,
    /// `--http`: serve HTTPS with this certificate chain (PEM, leaf first);
    /// with `tls_key_file`. Re-read when the file changes.
    pub(crate) tls_cert_file: Option<PathBuf>,
    /// `--http`: the private key of `tls_cert_file` (PEM).
    pub(crate) tls_key_file: Option<PathBuf>,
    /// `--http`: require client certificates issued by these CAs (PEM).
    pub(crate) tls_client_ca_file: Option<PathBuf>,
}

/// `[knowledge]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct KnowledgeSection {
    pub(crate) dir: Option<PathBuf>,
    pub(crate) index_dir: Option<PathBuf>,
    pub(crate) persistent: Option<bool>,
    /// `[knowledge.embeddings]`: the vector leg (absent: BM25 only).
    pub(crate) embeddings: Option<crate::embeddings::EmbeddingsSection>,
}

impl Config {
    /// Whether finalized records are archived (`[archive] url` is set).
    pub(crate) fn archives(&self) -> bool {
        self.archive.as_ref().is_some_and(|a| a.url.is_some())
    }

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
        parse_toml(text)
    }

    /// The redactor of `[redaction]`: the built-in rules, then those of
    /// `rules_file`, with the `allow` list.
    pub(crate) fn redactor(&self) -> Result<Arc<Redactor>, CliError> {
        let section = &self.redaction;
        if section.rules_file.is_none() && section.allow.is_empty() {
            return Ok(Redactor::builtin());
        }
        let extra = match &section.rules_file {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    CliError::config(format!(
                        "[redaction] rules_file {}: cannot read: {e}",
                        path.display()
                    ))
                })?;
                let file: RulesFile = parse_toml(&text).map_err(|message| {
                    CliError::config(format!(
                        "[redaction] rules_file {}: {message}",
                        path.display()
                    ))
                })?;
                file.rules
            }
            None => Vec::new(),
        };
        let redactor = section.redactor(&extra).map_err(|e| {
            let key = if e.rule().is_some() {
                "rules_file"
            } else {
                "allow"
            };
            CliError::config(format!("[redaction] {key}: {e}"))
        })?;
        Ok(Arc::new(redactor))
    }
}

/// Parses TOML text into `T`. The error is one line.
fn parse_toml<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, String> {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Every ```toml block of the README, in order.
    fn readme_toml_blocks() -> Vec<String> {
        let mut blocks = Vec::new();
        let mut lines = include_str!("../../../README.md").lines();
        while lines.by_ref().any(|l| l.trim_end() == "```toml") {
            let block: Vec<&str> = lines
                .by_ref()
                .take_while(|l| !l.starts_with("```"))
                .collect();
            blocks.push(block.join("\n"));
        }
        blocks
    }

    #[test]
    fn every_readme_example_parses() {
        let blocks = readme_toml_blocks();
        assert!(blocks.len() >= 2, "README.md has no TOML examples");
        let configs: Vec<Config> = blocks
            .iter()
            .enumerate()
            .map(|(i, block)| {
                Config::parse(block).unwrap_or_else(|e| panic!("README TOML block {}: {e}", i + 1))
            })
            .collect();

        // The full example of the Configuration section.
        let config = configs
            .iter()
            .find(|c| !c.mysql.data_sources.is_empty())
            .expect("a README example with [mysql.data_sources]");
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
        assert_eq!(config.redis.pool_size, Some(4));
        assert!(config.redis.tls_client_key_file.is_some());
        assert_eq!(
            config.limits.into_limits(),
            Ok(invocation_core::Limits::default())
        );
        assert!(config.logs.is_configured());

        // The `aci serve --http` example of Serving many agents over HTTP.
        let config = configs
            .iter()
            .find(|c| !c.auth.tokens.is_empty())
            .expect("a README example with [auth.tokens]");
        let token = &config.auth.tokens["oncall-bot"];
        assert_eq!(token.run_budget, Some(50));
        let jwt = config.auth.jwt.as_ref().unwrap();
        assert_eq!(jwt.audience, "aci");
        assert_eq!(jwt.leeway_secs, Some(30));
        assert_eq!(config.serve.max_in_flight, Some(64));
        assert_eq!(config.serve.max_in_flight_per_principal, Some(16));

        // The two `[knowledge.embeddings]` examples are sections `aci`
        // accepts, and between them show every key (a new key fails to
        // compile here until the README shows it).
        let embeddings: Vec<&crate::embeddings::EmbeddingsSection> = configs
            .iter()
            .filter_map(|c| c.knowledge.embeddings.as_ref())
            .collect();
        let [local, http] = embeddings[..] else {
            panic!("README: one local and one http [knowledge.embeddings] example");
        };
        for section in [local, http] {
            section
                .check()
                .unwrap_or_else(|e| panic!("README [knowledge.embeddings]: {e}"));
        }
        let crate::embeddings::EmbeddingsSection {
            provider,
            library,
            model,
            query_timeout_ms,
            ..
        } = local;
        assert_eq!(provider.as_deref(), Some("local"));
        assert!(library.is_some() && model.is_some() && query_timeout_ms.is_some());
        let crate::embeddings::EmbeddingsSection {
            provider,
            library: None,
            model: Some(_),
            url: Some(_),
            api_key_env: Some(_),
            timeout_ms: Some(_),
            max_retries: Some(_),
            batch_size: Some(_),
            query_prefix: Some(_),
            passage_prefix: Some(_),
            dimensions: Some(_),
            query_timeout_ms: Some(_),
            min_similarity: Some(_),
        } = http
        else {
            panic!("README: the http example shows every key but `library`: {http:?}");
        };
        assert_eq!(provider.as_deref(), Some("http"));
    }

    #[test]
    fn redaction_rules_file_and_allowlist_build_the_redactor() {
        let dir = tempfile::tempdir().unwrap();
        let rules = dir.path().join("rules.toml");
        std::fs::write(
            &rules,
            r#"[[rules]]
name = "acme_token"
regex = '(?-u:\b)(acme_[a-z0-9]{32})'
keywords = ["acme_"]
"#,
        )
        .unwrap();
        let text = format!(
            "[redaction]\nrules_file = {:?}\nallow = [\"guestpass1\"]\n",
            rules.display().to_string()
        );
        let redactor = Config::parse(&text).unwrap().redactor().unwrap();
        let token = format!("acme_{}", "a1".repeat(16));
        assert_eq!(
            redactor.redact(&format!("key {token} and password=guestpass1")),
            "key <redacted:acme_token> and password=guestpass1"
        );
        assert!(Arc::ptr_eq(
            &Config::default().redactor().unwrap(),
            &Redactor::builtin()
        ));
    }

    #[test]
    fn redaction_errors_name_the_key_and_the_rule() {
        let err = Config::parse("[redaction]\nenabled = false\n").unwrap_err();
        assert!(err.starts_with("line 2: unknown field `enabled`"), "{err}");
        let dir = tempfile::tempdir().unwrap();
        let rules = dir.path().join("rules.toml");
        let config = Config::parse(&format!(
            "[redaction]\nrules_file = {:?}\n",
            rules.display().to_string()
        ))
        .unwrap();

        std::fs::write(&rules, "[[rules]]\nname = \"jwt\"\nregex = \"x+\"\n").unwrap();
        let err = config.redactor().unwrap_err().to_string();
        assert!(
            err.contains("[redaction] rules_file: redaction rule `jwt`: the name is taken"),
            "{err}"
        );
        std::fs::write(&rules, "[[rules]]\nname = \"x\"\nregexp = \"x+\"\n").unwrap();
        let err = config.redactor().unwrap_err().to_string();
        assert!(
            err.contains("[redaction] rules_file") && err.contains("unknown field `regexp`"),
            "{err}"
        );
        let missing =
            Config::parse("[redaction]\nrules_file = \"/nonexistent/rules.toml\"\n").unwrap();
        let err = missing.redactor().unwrap_err().to_string();
        assert!(
            err.starts_with("[redaction] rules_file /nonexistent/rules.toml: cannot read"),
            "{err}"
        );
        let empty = Config::parse("[redaction]\nallow = [\"\"]\n").unwrap();
        let err = empty.redactor().unwrap_err().to_string();
        assert!(err.starts_with("[redaction] allow:"), "{err}");
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
