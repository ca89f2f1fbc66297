//! Shared by the bob-adapter tests: the three frozen tools over real sources
//! (the bundled knowledge base, the mock log source, a real MariaDB), each
//! wrapped to count executions, and boundaries over memory or Redis.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use aci_contracts::SourceKind;
use async_trait::async_trait;
use invocation_core::{ExecutionContext, InvocationStore, ReplayPolicy, ToolBoundary};
use projectors_logs::{LogMatches, LogQuery, LogSource, MockLogSource, query_logs_tool};
use projectors_mysql::testing::TestDatabase;
use projectors_mysql::{
    DataSourceConfig, MysqlAsyncSource, MysqlConfig, MysqlQuery, MysqlSource, RawResultSet,
    query_mysql_tool,
};
use projectors_rag::{KnowledgeSource, MarkdownKnowledgeBase, lookup_knowledge_tool};
use serde_json::Value;

/// How often each tool's source ran.
#[derive(Debug, Default)]
pub struct Executions {
    pub knowledge: AtomicUsize,
    pub logs: AtomicUsize,
    pub mysql: AtomicUsize,
}

impl Executions {
    pub fn knowledge(&self) -> usize {
        self.knowledge.load(Ordering::SeqCst)
    }
    pub fn logs(&self) -> usize {
        self.logs.load(Ordering::SeqCst)
    }
    pub fn mysql(&self) -> usize {
        self.mysql.load(Ordering::SeqCst)
    }
    pub fn total(&self) -> usize {
        self.knowledge() + self.logs() + self.mysql()
    }
}

#[derive(Debug)]
struct CountingKnowledge {
    inner: MarkdownKnowledgeBase,
    counts: Arc<Executions>,
}

#[async_trait]
impl KnowledgeSource for CountingKnowledge {
    async fn retrieve(
        &self,
        query: &str,
        context: &ExecutionContext,
    ) -> Result<Value, projectors_rag::KnowledgeSourceError> {
        self.counts.knowledge.fetch_add(1, Ordering::SeqCst);
        self.inner.retrieve(query, context).await
    }
}

#[derive(Debug)]
struct CountingLogs {
    inner: MockLogSource,
    counts: Arc<Executions>,
}

#[async_trait]
impl LogSource for CountingLogs {
    fn source_kind(&self) -> SourceKind {
        self.inner.source_kind()
    }
    async fn query(&self, query: &LogQuery) -> Result<LogMatches, projectors_logs::LogSourceError> {
        self.counts.logs.fetch_add(1, Ordering::SeqCst);
        self.inner.query(query).await
    }
}

#[derive(Debug)]
struct CountingMysql {
    inner: Arc<MysqlAsyncSource>,
    counts: Arc<Executions>,
}

#[async_trait]
impl MysqlSource for CountingMysql {
    async fn query(&self, query: MysqlQuery<'_>) -> projectors_mysql::Result<RawResultSet> {
        self.counts.mysql.fetch_add(1, Ordering::SeqCst);
        self.inner.query(query).await
    }
}

/// A boundary over `store` with `lookup_knowledge` (bundled runbooks) and
/// `query_logs` (mock source), and `query_mysql` on `mysql` when given.
pub fn boundary(
    store: Arc<dyn InvocationStore>,
    mysql: Option<&TestDatabase>,
) -> (ToolBoundary, Arc<Executions>) {
    let counts = Arc::new(Executions::default());
    let mut builder = ToolBoundary::builder(store)
        // Knowledge lookups of the same scope may be reused within a run (the
        // harness's choice); log queries always run (their default).
        .tool(
            lookup_knowledge_tool(CountingKnowledge {
                inner: MarkdownKnowledgeBase::bundled().unwrap(),
                counts: Arc::clone(&counts),
            })
            .replay(ReplayPolicy::SameScope),
        )
        .tool(query_logs_tool(CountingLogs {
            inner: MockLogSource::new(),
            counts: Arc::clone(&counts),
        }));
    if let Some(db) = mysql {
        let config = MysqlConfig::new().data_source("shop", DataSourceConfig::new(db.reader_url()));
        builder = builder.tool(query_mysql_tool(CountingMysql {
            inner: Arc::new(MysqlAsyncSource::new(&config).unwrap()),
            counts: Arc::clone(&counts),
        }));
    }
    (builder.build().unwrap(), counts)
}

/// The tables the MySQL tests read.
pub const SHOP: &[&str] = &[
    "CREATE TABLE orders (id INT PRIMARY KEY, status VARCHAR(20) NOT NULL)",
    "INSERT INTO orders VALUES (1, 'timeout'), (2, 'ok'), (3, 'timeout')",
];

/// A fresh session id (valid as a run id).
pub fn session(tag: &str) -> String {
    store_redis::testing::unique_id(tag)
}
