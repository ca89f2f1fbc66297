//! A tool of your own: an executor that asks its source, a projector that
//! turns the raw answer into bounded evidence, registered with the boundary.
//!
//! The source here is an in-process list of runbooks; a real one is a
//! database, an index or an API. The executor returns everything it got
//! (the raw response, recorded for the harness, never shown to the model);
//! the projector keeps what the model needs, within bounds. The three tools
//! of this workspace (`lookup_knowledge`, `query_logs`, `query_mysql`) are
//! built the same way (docs/projectors.md, "One shape for the three tools").
//!
//! Run with `cargo run -p invocation-core --example custom_tool`.

use std::sync::Arc;

use aci_contracts::{KnowledgeEvidence, LookupKnowledgeResult, ReadyEvidenceStatus, RunId};
use async_trait::async_trait;
use invocation_core::{
    CallPolicy, ExecutionContext, ExecutionError, Executor, ProjectionContext, ProjectionError,
    Projector, RunContext, ToolBoundary, ToolEnvelope, ToolSpec,
};
use serde::{Deserialize, Serialize};
use store_memory::MemoryStore;

/// What the model may ask: the tool's arguments.
#[derive(Debug, Serialize, Deserialize)]
struct RunbookRequest {
    query: String,
}

/// One runbook, whole: what the source answers.
#[derive(Debug, Clone, Serialize)]
struct Runbook {
    id: &'static str,
    title: &'static str,
    body: &'static str,
}

/// The executor: asks the source, returns its whole answer.
#[derive(Debug)]
struct RunbookExecutor {
    runbooks: Vec<Runbook>,
}

#[async_trait]
impl Executor for RunbookExecutor {
    type Request = RunbookRequest;
    type Raw = Vec<Runbook>;

    async fn execute(
        &self,
        request: &RunbookRequest,
        _context: &ExecutionContext,
    ) -> Result<Vec<Runbook>, ExecutionError> {
        let words: Vec<String> = request
            .query
            .split_whitespace()
            .map(str::to_lowercase)
            .collect();
        Ok(self
            .runbooks
            .iter()
            .filter(|runbook| {
                let text = format!("{} {}", runbook.title, runbook.body).to_lowercase();
                words.iter().any(|word| text.contains(word.as_str()))
            })
            .cloned()
            .collect())
    }
}

/// The projector: at most [`MAX_HITS`] hits, each cut to [`MAX_EXCERPT`]
/// characters; `truncated` says when something was cut.
#[derive(Debug)]
struct RunbookProjector;

const MAX_HITS: usize = 2;
const MAX_EXCERPT: usize = 60;

impl Projector for RunbookProjector {
    type Request = RunbookRequest;
    type Raw = Vec<Runbook>;
    type Output = LookupKnowledgeResult;

    fn project(
        &self,
        context: &ProjectionContext<'_, RunbookRequest>,
        raw: &Vec<Runbook>,
    ) -> Result<LookupKnowledgeResult, ProjectionError> {
        let evidence: Vec<KnowledgeEvidence> = raw
            .iter()
            .take(MAX_HITS)
            .map(|runbook| KnowledgeEvidence {
                document_id: runbook.id.into(),
                source: "runbooks".into(),
                title: runbook.title.into(),
                breadcrumb: runbook.title.into(),
                excerpt: runbook.body.chars().take(MAX_EXCERPT).collect(),
            })
            .collect();
        let truncated = raw.len() > MAX_HITS
            || raw
                .iter()
                .take(MAX_HITS)
                .any(|runbook| runbook.body.chars().count() > MAX_EXCERPT);
        Ok(LookupKnowledgeResult {
            evidence_status: if evidence.is_empty() {
                ReadyEvidenceStatus::NoEvidence
            } else {
                ReadyEvidenceStatus::EvidenceFound
            },
            tool_call_id: context.tool_call_id.clone(),
            query: context.request.query.clone(),
            returned_count: evidence.len() as u64,
            evidence,
            relevance_level: None,
            truncated,
            retrieval_legs: Vec::new(),
            retrieval_fallback: None,
        })
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let executor = RunbookExecutor {
        runbooks: vec![
            Runbook {
                id: "rb-1",
                title: "Connection pool exhausted",
                body: "Check the pool size against the database's max_connections, then look for leaked connections.",
            },
            Runbook {
                id: "rb-2",
                title: "Disk full",
                body: "Find the largest directories, rotate logs, then grow the volume.",
            },
        ],
    };
    // The boundary runs only tools declared read-only.
    let tool = ToolSpec::new(
        "lookup_runbook",
        "Finds runbooks whose title or text holds a word of the query.",
        executor,
        RunbookProjector,
    )
    .read_only(true);
    let boundary = ToolBoundary::builder(Arc::new(MemoryStore::new()))
        .tool(tool)
        .build()?;
    let run = RunContext::new(
        RunId::new("run-custom-tool")?,
        CallPolicy::AUTHORIZED_READ_ONLY,
    );
    for (id, query) in [("call_1", "pool"), ("call_2", "certificate")] {
        let arguments = serde_json::json!({ "query": query }).to_string();
        let envelope = ToolEnvelope::new(id, "run-custom-tool", "lookup_runbook", arguments);
        let outcome = boundary.invoke(&run, envelope).await;
        println!(
            "to the model: {}",
            serde_json::to_string(&outcome.observation)?
        );
        println!(
            "harness: status={} evidence={}",
            outcome.control.status.as_str(),
            outcome.control.evidence_status.as_str()
        );
    }
    Ok(())
}
