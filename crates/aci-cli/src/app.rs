//! Builds the tool boundary the commands and the MCP server run through.

use std::sync::Arc;
use std::time::Duration;

use aci_contracts::RunId;
use invocation_core::{CallPolicy, Clock, InvocationStore, RunContext, SystemClock, ToolBoundary};
use projectors_logs::{FileLogSource, MockLogSource, query_logs_tool};
use projectors_mysql::{MysqlAsyncSource, query_mysql_tool};
use projectors_rag::{MarkdownKnowledgeBase, Progress, lookup_knowledge_tool};
use store_memory::MemoryStore;
use store_redis::{RedisConfig, RedisStore};

use crate::archive::LocalArchive;
use crate::config::Config;
use crate::error::CliError;

/// Where the canonical records live.
#[derive(Debug, Clone)]
pub(crate) enum StoreSpec {
    /// In this process only.
    Memory,
    /// One Redis server or a Redis Cluster, as store-redis parsed its URL.
    Redis(RedisConfig),
}

impl StoreSpec {
    /// `memory`, or a store URL for store-redis to parse: `redis://…`,
    /// `rediss://…`, `redis+cluster://h1:p1,h2:p2` or `rediss+cluster://…`.
    pub(crate) fn parse(text: &str) -> Result<Self, CliError> {
        if text == "memory" {
            return Ok(Self::Memory);
        }
        // store-redis's error never echoes the URL (it may carry a password).
        RedisConfig::from_url(text)
            .map(Self::Redis)
            .map_err(|e| CliError::config(format!("store must be `memory` or a Redis URL: {e}")))
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
    /// The knowledge base `lookup_knowledge` searches (a clone shares its
    /// index): the serve-time watcher refreshes it when it has a directory,
    /// and the metrics read its vector fallbacks.
    pub(crate) knowledge: MarkdownKnowledgeBase,
    /// With the memory store and `[archive]`: the archiver of its outbox,
    /// which this process runs (a Redis store's outbox is emptied by `aci
    /// archive` processes instead).
    pub(crate) archive: Option<LocalArchive>,
    run: RunSettings,
}

impl App {
    /// Another app sharing this one's boundary (its store) and knowledge
    /// base, without an archive: one per fuzzed session.
    #[cfg(feature = "fuzzing")]
    pub(crate) fn sharing(&self) -> Self {
        Self {
            boundary: self.boundary.clone(),
            knowledge: self.knowledge.clone(),
            archive: None,
            run: self.run.clone(),
        }
    }

    /// Builds the store, the tools and the boundary described by `config`,
    /// with `store` (from `--store`) overriding `config.store`.
    pub(crate) async fn build(config: &Config, store: Option<&str>) -> Result<Self, CliError> {
        let spec = StoreSpec::parse(store.or(config.store.as_deref()).unwrap_or("memory"))?;
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let (store, archive) = open_store(&spec, config, &clock).await?;
        if let Some(embeddings) = &config.knowledge.embeddings {
            embeddings.check()?;
        }
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
        crate::embeddings::attach(
            config.knowledge.embeddings.as_ref(),
            &knowledge,
            crate::embeddings::vectors_dir(&config.knowledge),
            |_, _| {},
        )
        .await?;
        let limits = config
            .limits
            .into_limits()
            .map_err(|e| CliError::config(format!("[limits] {e}")))?;
        if config.run.deadline_secs == Some(0) {
            return Err(CliError::config("[run] deadline_secs must be positive"));
        }
        let mysql = MysqlAsyncSource::new(&config.mysql)
            .map_err(|e| CliError::config(format!("mysql: {e}")))?;
        let redactor = config.redactor()?;
        let boundary = ToolBoundary::builder(store)
            .clock(Arc::clone(&clock))
            .redactor(redactor)
            .limits(limits)
            .tool(lookup_knowledge_tool(knowledge.clone()))
            .tool(logs_tool(config)?)
            .tool(query_mysql_tool(mysql))
            .build()
            .map_err(|e| CliError::config(format!("tools: {e}")))?;
        Ok(Self {
            boundary,
            knowledge,
            archive,
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
    pub(crate) fn run_context(&self, run_id: RunId, policy: CallPolicy) -> RunContext {
        let mut ctx = RunContext::new(run_id, policy);
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

async fn open_store(
    spec: &StoreSpec,
    config: &Config,
    clock: &Arc<dyn Clock>,
) -> Result<(Arc<dyn InvocationStore>, Option<LocalArchive>), CliError> {
    let redis = match spec {
        StoreSpec::Memory if config.archives() => {
            let store = MemoryStore::with_outbox(Arc::clone(clock));
            let archive = crate::archive::local(config, &store).await?;
            return Ok((Arc::new(store), archive));
        }
        StoreSpec::Memory => {
            return Ok((Arc::new(MemoryStore::with_clock(Arc::clone(clock))), None));
        }
        StoreSpec::Redis(redis) => config
            .redis
            .apply(redis.clone())
            .map_err(redis_error)?
            .outbox(config.archives()),
    };
    let store = RedisStore::new(redis).map_err(redis_error)?;
    store.ping().await.map_err(redis_error)?;
    Ok((Arc::new(store), None))
}

/// store-redis's errors name the problem (and a file's key and path), never
/// the URL or a file's contents.
pub(crate) fn redis_error(error: store_redis::RedisStoreError) -> CliError {
    CliError::config(format!("redis store: {error}"))
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
        assert!(matches!(
            StoreSpec::parse("memory").unwrap(),
            StoreSpec::Memory
        ));
        assert!(!StoreSpec::parse("memory").unwrap().is_shared());
        // store-redis parses the URLs (its tests check the nodes).
        for url in [
            "rediss://h:6380/0",
            "redis+cluster://a:7000,b:7001",
            "rediss+cluster://:pw@a:7000,b:7001",
        ] {
            assert!(StoreSpec::parse(url).unwrap().is_shared(), "{url}");
        }
        for bad in [
            "",
            "mem",
            "http://h",
            "redis+cluster://",
            "redis+cluster://pw@",
        ] {
            let err = StoreSpec::parse(bad).unwrap_err().to_string();
            assert!(!err.contains("pw"), "{err}");
            assert!(err.contains("store must be"), "{err}");
        }
    }
}
