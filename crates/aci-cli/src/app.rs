//! Builds the tool boundary the commands and the MCP server run through.

use std::sync::Arc;
use std::time::Duration;

use aci_contracts::RunId;
use invocation_core::{
    Clock, InvalidLimit, InvocationStore, Limits, RunContext, SystemClock, ToolBoundary,
};
use projectors_logs::{FileLogSource, MockLogSource, query_logs_tool};
use projectors_mysql::{MysqlAsyncSource, query_mysql_tool};
use projectors_rag::{MarkdownKnowledgeBase, Progress, lookup_knowledge_tool};
use store_memory::MemoryStore;
use store_redis::{RedisConfig, RedisStore};

use crate::config::Config;
use crate::error::CliError;

/// Where the canonical records live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum StoreSpec {
    /// In this process only.
    Memory,
    /// One Redis server.
    Redis(String),
    /// A Redis Cluster, by its seed nodes.
    RedisCluster(Vec<String>),
}

impl StoreSpec {
    /// Parses `memory`, `redis://…`, `rediss://…`, `redis+cluster://h1:p1,h2:p2`
    /// or `rediss+cluster://h1:p1,h2:p2`.
    pub(crate) fn parse(text: &str) -> Result<Self, CliError> {
        if text == "memory" {
            return Ok(Self::Memory);
        }
        for (prefix, scheme) in [
            ("redis+cluster://", "redis"),
            ("rediss+cluster://", "rediss"),
        ] {
            let Some(nodes) = text.strip_prefix(prefix) else {
                continue;
            };
            // `user:password@` applies to every node.
            let (auth, hosts) = match nodes.rsplit_once('@') {
                Some((auth, hosts)) => (format!("{auth}@"), hosts),
                None => (String::new(), nodes),
            };
            let nodes: Vec<String> = hosts
                .split(',')
                .filter(|n| !n.is_empty())
                .map(|n| format!("{scheme}://{auth}{n}"))
                .collect();
            if nodes.is_empty() {
                return Err(CliError::config(format!(
                    "store {prefix} needs at least one host:port"
                )));
            }
            return Ok(Self::RedisCluster(nodes));
        }
        if text.starts_with("redis://") || text.starts_with("rediss://") {
            return Ok(Self::Redis(text.to_owned()));
        }
        Err(CliError::config(
            "store must be `memory`, a redis:// or rediss:// URL, or redis+cluster:// / rediss+cluster://host:port,…",
        ))
    }

    /// Whether records outlive this process.
    pub(crate) const fn is_shared(&self) -> bool {
        !matches!(self, Self::Memory)
    }
}

/// Per-run settings from `[run]`.
#[derive(Debug, Clone, Default)]
struct RunSettings {
    deadline: Option<Duration>,
    budget: Option<u32>,
    tool_budgets: std::collections::BTreeMap<String, u32>,
}

/// The boundary with its tools, and how runs are set up.
#[derive(Debug)]
pub(crate) struct App {
    pub(crate) boundary: ToolBoundary,
    /// The knowledge base of `[knowledge] dir` (shared with the tool), for the
    /// serve-time watcher; `None` for the bundled runbooks.
    pub(crate) knowledge: Option<MarkdownKnowledgeBase>,
    run: RunSettings,
}

impl App {
    /// Builds the store, the tools and the boundary described by `config`,
    /// with `store` (from `--store`) overriding `config.store`.
    pub(crate) async fn build(config: &Config, store: Option<&str>) -> Result<Self, CliError> {
        let spec = StoreSpec::parse(store.or(config.store.as_deref()).unwrap_or("memory"))?;
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let store = open_store(&spec, config, &clock).await?;
        let (knowledge, report) = crate::index::open_knowledge(&config.knowledge, report_progress)?;
        if let Some(report) = &report {
            eprintln!(
                "aci: knowledge index: {} reused, {} added, {} updated, {} removed, {} failed",
                report.reused,
                report.added,
                report.updated,
                report.removed,
                report.failed.len()
            );
        }
        let watched = report.is_some().then(|| knowledge.clone());
        let limits = limits(config)?;
        if config.run.deadline_secs == Some(0) {
            return Err(CliError::config("[run] deadline_secs must be positive"));
        }
        let mysql = MysqlAsyncSource::new(&config.mysql)
            .map_err(|e| CliError::config(format!("mysql: {e}")))?;
        let boundary = ToolBoundary::builder(store)
            .clock(Arc::clone(&clock))
            .limits(limits)
            .tool(lookup_knowledge_tool(knowledge))
            .tool(logs_tool(config)?)
            .tool(query_mysql_tool(mysql))
            .build()
            .map_err(|e| CliError::config(format!("tools: {e}")))?;
        Ok(Self {
            boundary,
            knowledge: watched,
            run: RunSettings {
                deadline: config.run.deadline_secs.map(Duration::from_secs),
                budget: config.run.budget,
                tool_budgets: config.run.tool_budgets.clone(),
            },
        })
    }

    /// The run context of `run_id`: active, with the configured budgets, and
    /// the configured longest duration. The store holds the run's deadline
    /// (its first call's time plus that duration), so every process and
    /// replica serving the run enforces the same one; nothing is kept here.
    pub(crate) fn run_context(&self, run_id: RunId) -> RunContext {
        let mut ctx = RunContext::new(run_id);
        ctx.max_duration = self.run.deadline;
        ctx.run_budget = self.run.budget;
        ctx.tool_budgets = self.run.tool_budgets.clone();
        ctx
    }
}

/// `query_logs` over the configured files, or over the mock without `[logs]` topics.
fn logs_tool(
    config: &Config,
) -> Result<projectors_logs::QueryLogsTool<Arc<dyn projectors_logs::LogSource>>, CliError> {
    let source: Arc<dyn projectors_logs::LogSource> = if config.logs.is_configured() {
        Arc::new(
            FileLogSource::new(&config.logs).map_err(|e| CliError::config(format!("logs: {e}")))?,
        )
    } else {
        Arc::new(MockLogSource::new())
    };
    Ok(query_logs_tool(source))
}

/// `[limits]` over the defaults; a zero is a configuration error naming its key.
fn limits(config: &Config) -> Result<Limits, CliError> {
    let l = &config.limits;
    let d = Limits::default();
    let limits = Limits {
        max_request_bytes: l.max_request_bytes.unwrap_or(d.max_request_bytes),
        max_raw_bytes: l.max_raw_bytes.unwrap_or(d.max_raw_bytes),
        max_agent_result_bytes: l.max_agent_result_bytes.unwrap_or(d.max_agent_result_bytes),
        max_record_bytes: l.max_record_bytes.unwrap_or(d.max_record_bytes),
        record_ttl: l.record_ttl_secs.map_or(d.record_ttl, Duration::from_secs),
        timeout: l.timeout_secs.map_or(d.timeout, Duration::from_secs),
    };
    limits.validate().map_err(|InvalidLimit(limit)| {
        let key = match limit {
            "record_ttl" => "record_ttl_secs",
            "timeout" => "timeout_secs",
            other => other,
        };
        CliError::config(format!("[limits] {key} must be positive"))
    })?;
    Ok(limits)
}

async fn open_store(
    spec: &StoreSpec,
    config: &Config,
    clock: &Arc<dyn Clock>,
) -> Result<Arc<dyn InvocationStore>, CliError> {
    let redis = match spec {
        StoreSpec::Memory => return Ok(Arc::new(MemoryStore::with_clock(Arc::clone(clock)))),
        StoreSpec::Redis(url) => RedisConfig::single(url.clone()),
        StoreSpec::RedisCluster(urls) => RedisConfig::cluster(urls.clone()),
    };
    let section = &config.redis;
    let mut redis = redis;
    if let Some(prefix) = &section.key_prefix {
        redis = redis.key_prefix(prefix.clone());
    }
    if let Some(size) = section.pool_size {
        redis = redis.pool_size(size);
    }
    if let Some(ms) = section.timeout_ms {
        redis = redis.operation_timeout(Duration::from_millis(ms));
    }
    if let Some(path) = &section.tls_ca_file {
        redis = redis.tls_root_ca_pem(read_pem(path, "tls_ca_file")?);
    }
    match (&section.tls_client_cert_file, &section.tls_client_key_file) {
        (Some(cert), Some(key)) => {
            redis = redis.tls_client_cert_pem(
                read_pem(cert, "tls_client_cert_file")?,
                read_pem(key, "tls_client_key_file")?,
            );
        }
        (None, None) => {}
        _ => {
            return Err(CliError::config(
                "redis: tls_client_cert_file and tls_client_key_file go together",
            ));
        }
    }
    // Errors name the problem, never the URL (it may carry a password).
    let store =
        RedisStore::new(redis).map_err(|e| CliError::config(format!("redis store: {e}")))?;
    store
        .ping()
        .await
        .map_err(|e| CliError::config(format!("redis store: {e}")))?;
    Ok(Arc::new(store))
}

fn read_pem(path: &std::path::Path, key: &str) -> Result<Vec<u8>, CliError> {
    std::fs::read(path)
        .map_err(|e| CliError::config(format!("redis: cannot read {key} {}: {e}", path.display())))
}

/// Prints knowledge-base indexing progress on stderr (every tenth of the files).
fn report_progress(progress: Progress) {
    match progress {
        Progress::Found { files } => eprintln!("aci: indexing {files} knowledge files"),
        Progress::Read { done, total } => {
            let step = (total / 10).max(1);
            if done % step == 0 || done == total {
                eprintln!("aci: read {done}/{total} knowledge files");
            }
        }
        Progress::Failed { path, code } => {
            eprintln!("aci: skipped knowledge file {path} ({code})");
        }
        Progress::Indexed { documents, chunks } => {
            eprintln!("aci: indexed {documents} documents in {chunks} chunks");
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::StoreSpec;

    #[test]
    fn store_specs() {
        assert_eq!(StoreSpec::parse("memory").unwrap(), StoreSpec::Memory);
        assert_eq!(
            StoreSpec::parse("rediss://h:6380/0").unwrap(),
            StoreSpec::Redis("rediss://h:6380/0".into())
        );
        assert_eq!(
            StoreSpec::parse("redis+cluster://a:7000,b:7001").unwrap(),
            StoreSpec::RedisCluster(vec!["redis://a:7000".into(), "redis://b:7001".into()])
        );
        assert_eq!(
            StoreSpec::parse("rediss+cluster://:pw@a:7000,b:7001").unwrap(),
            StoreSpec::RedisCluster(vec![
                "rediss://:pw@a:7000".into(),
                "rediss://:pw@b:7001".into()
            ])
        );
        for bad in [
            "",
            "mem",
            "http://h",
            "redis+cluster://",
            "redis+cluster://pw@",
        ] {
            let err = StoreSpec::parse(bad).unwrap_err().to_string();
            assert!(!err.contains("pw"), "{err}");
        }
    }
}
