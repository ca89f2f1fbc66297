//! A counting fake tool for scenarios and adapter tests.
//!
//! The request is `{"query": "..."}`; the query's first word picks the
//! behaviour: `fail` (executor error), `panic` (executor panic), `none`
//! (no evidence); anything else finds one evidence item. Raw data and every
//! failure carry [`SENTINEL`], which must never reach an outcome.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use aci_contracts::{EvidenceStatus, KnowledgeEvidence, LookupKnowledgeResult};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::{
    ExecutionContext, ExecutionError, Executor, ProjectionContext, ProjectionError, Projector,
    ToolSpec,
};

/// Planted in raw data, executor errors and panic messages.
pub const SENTINEL: &str = "SENTINEL-7f3a-raw-secret";

/// The fake tool's request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FakeRequest {
    /// Picks the behaviour by its first word.
    pub query: String,
}

/// The fake tool's raw response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FakeRaw {
    /// The query.
    pub query: String,
    /// Evidence texts.
    pub hits: Vec<String>,
    /// Harness-only data that must never reach the model.
    pub secret: String,
}

/// Counts executions; optionally sleeps first.
#[derive(Debug, Clone, Default)]
pub struct FakeExecutor {
    calls: Arc<AtomicUsize>,
    delay: Duration,
}

impl FakeExecutor {
    /// A fresh executor with a zero count and no delay.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Sleeps `delay` before answering.
    #[must_use]
    pub fn with_delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    /// How many times it ran (panics and failures included).
    #[must_use]
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

#[derive(Debug, thiserror::Error)]
#[error("upstream failed: {0}")]
struct FakeFailure(String);

#[async_trait]
impl Executor for FakeExecutor {
    type Request = FakeRequest;
    type Raw = FakeRaw;

    async fn execute(
        &self,
        request: &FakeRequest,
        _context: &ExecutionContext,
    ) -> Result<FakeRaw, ExecutionError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if !self.delay.is_zero() {
            tokio::time::sleep(self.delay).await;
        }
        let first = request.query.split_whitespace().next().unwrap_or_default();
        match first {
            "fail" => Err(ExecutionError::failed(FakeFailure(SENTINEL.to_owned()))),
            "panic" => panic!("executor panicked with {SENTINEL}"),
            "none" => Ok(FakeRaw {
                query: request.query.clone(),
                hits: Vec::new(),
                secret: SENTINEL.to_owned(),
            }),
            _ => Ok(FakeRaw {
                query: request.query.clone(),
                hits: vec![format!("evidence for {}", request.query)],
                secret: SENTINEL.to_owned(),
            }),
        }
    }
}

/// Projects hits into a knowledge result.
#[derive(Debug, Clone, Copy, Default)]
pub struct FakeProjector;

impl Projector for FakeProjector {
    type Request = FakeRequest;
    type Raw = FakeRaw;
    type Output = LookupKnowledgeResult;

    fn project(
        &self,
        context: &ProjectionContext<'_, FakeRequest>,
        raw: &FakeRaw,
    ) -> Result<LookupKnowledgeResult, ProjectionError> {
        let evidence: Vec<KnowledgeEvidence> = raw
            .hits
            .iter()
            .enumerate()
            .map(|(i, hit)| KnowledgeEvidence {
                document_id: format!("doc-{i}"),
                source: "fake".to_owned(),
                title: "Fake".to_owned(),
                breadcrumb: "Fake".to_owned(),
                excerpt: hit.clone(),
            })
            .collect();
        Ok(LookupKnowledgeResult {
            evidence_status: if evidence.is_empty() {
                EvidenceStatus::NoEvidence
            } else {
                EvidenceStatus::EvidenceFound
            },
            tool_call_id: context.tool_call_id.clone(),
            query: context.request.query.clone(),
            returned_count: evidence.len() as u64,
            evidence,
            relevance_level: None,
            truncated: false,
        })
    }
}

/// The fake tool named `name`, read-only, around `executor`.
#[must_use]
pub fn fake_tool(name: &str, executor: FakeExecutor) -> ToolSpec<FakeExecutor, FakeProjector> {
    ToolSpec::new(
        name,
        "A fake evidence tool for tests.",
        executor,
        FakeProjector,
    )
    .read_only(true)
}
