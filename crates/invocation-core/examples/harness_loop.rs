//! A minimal harness loop: register a tool, run the model's tool calls through
//! the boundary, hand the observations to the model, verify its citations.
//!
//! Run with `cargo run -p invocation-core --example harness_loop`.

use std::sync::Arc;

use aci_contracts::{
    EvidenceStatus, KnowledgeEvidence, LookupKnowledgeRequest, LookupKnowledgeResult, RunId,
    ToolName,
};
use async_trait::async_trait;
use invocation_core::{
    ExecutionContext, ExecutionError, Executor, ProjectionContext, ProjectionError, Projector,
    RunContext, ToolBoundary, ToolEnvelope, ToolSpec,
};
use serde::Serialize;
use store_memory::MemoryStore;

/// The raw response of our toy knowledge source (harness-only).
#[derive(Debug, Serialize)]
struct Hits {
    hits: Vec<(String, String, f32)>,
}

/// A toy knowledge source: two runbook passages, matched by keyword.
#[derive(Debug)]
struct ToySource;

#[async_trait]
impl Executor for ToySource {
    type Request = LookupKnowledgeRequest;
    type Raw = Hits;

    async fn execute(
        &self,
        request: &LookupKnowledgeRequest,
        _context: &ExecutionContext,
    ) -> Result<Hits, ExecutionError> {
        let passages = [
            (
                "db-pool",
                "When the connection pool is exhausted, check for long transactions.",
            ),
            (
                "disk",
                "Under disk pressure, the kubelet evicts pods with the largest usage.",
            ),
        ];
        let query = request.query.to_lowercase();
        let hits = passages
            .iter()
            .filter(|(_, text)| {
                query
                    .split_whitespace()
                    .any(|w| text.to_lowercase().contains(w))
            })
            .map(|(id, text)| ((*id).to_owned(), (*text).to_owned(), 0.87))
            .collect();
        Ok(Hits { hits })
    }
}

/// Projects hits into bounded evidence; the score never reaches the model.
#[derive(Debug)]
struct ToyProjector;

impl Projector for ToyProjector {
    type Request = LookupKnowledgeRequest;
    type Raw = Hits;
    type Output = LookupKnowledgeResult;

    fn project(
        &self,
        context: &ProjectionContext<'_, LookupKnowledgeRequest>,
        raw: &Hits,
    ) -> Result<LookupKnowledgeResult, ProjectionError> {
        let evidence: Vec<KnowledgeEvidence> = raw
            .hits
            .iter()
            .map(|(id, text, _score)| KnowledgeEvidence {
                document_id: id.clone(),
                source: format!("runbooks/{id}.md"),
                title: id.clone(),
                breadcrumb: id.clone(),
                excerpt: text.clone(),
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

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // 1. Register the tool with the boundary (in-memory store, default limits).
    let boundary = ToolBoundary::builder(Arc::new(MemoryStore::new()))
        .tool(
            ToolSpec::frozen(ToolName::LookupKnowledge, ToySource, ToyProjector)
                .validate_with(|r: &LookupKnowledgeRequest| r.validate().is_ok()),
        )
        .build()?;
    let run = RunContext::new(RunId::new("run-demo")?).with_run_budget(10);

    // 2. The model asked for two tool calls; the framework gave them ids.
    let calls = [
        ("toolu_01", r#"{"query":"connection pool exhausted"}"#),
        ("toolu_02", r#"{"query":"certificate expiry"}"#),
    ];
    for (id, arguments) in calls {
        let envelope = ToolEnvelope::new(id, "run-demo", "lookup_knowledge", arguments);
        let outcome = boundary.invoke(&run, envelope).await;
        // 3. Only the observation goes to the model; the control view stays here.
        println!(
            "to the model: {}",
            serde_json::to_string(&outcome.observation)?
        );
        println!(
            "harness: status={} evidence={} fingerprint={}",
            outcome.control.status.as_str(),
            outcome.control.evidence_status.as_str(),
            outcome.control.scope_fingerprint.as_deref().unwrap_or("-")
        );
    }

    // 4. The model's answer cites call ids; check each before trusting it.
    for check in boundary
        .verify_citations(&run, &["toolu_01", "toolu_02", "toolu_99"])
        .await
    {
        println!(
            "citation {}: {}",
            check.citation,
            serde_json::to_string(&check.verdict)?
        );
    }
    Ok(())
}
