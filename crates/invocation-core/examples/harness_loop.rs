//! A minimal harness loop: register a tool, run the model's tool calls through
//! the boundary, hand the observations to the model, verify its citations.
//!
//! The tool is the workspace's fake tool (`invocation_core::testing::fake`,
//! feature `testing`), so the loop runs without any backend; the three real
//! tools (`lookup_knowledge_tool`, `query_logs_tool`, `query_mysql_tool`)
//! register the same way. How a tool is built is in docs/projectors.md ("One
//! shape for the three tools").
//!
//! Run with `cargo run -p invocation-core --example harness_loop`.

use std::sync::Arc;

use aci_contracts::RunId;
use invocation_core::testing::fake::{self, FakeExecutor, Mode};
use invocation_core::{RunContext, ToolBoundary, ToolEnvelope};
use store_memory::MemoryStore;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // 1. Register the tool with the boundary (in-memory store, default limits).
    let boundary = ToolBoundary::builder(Arc::new(MemoryStore::new()))
        .tool(fake::fake_tool("lookup", FakeExecutor::new()))
        .build()?;
    let run = RunContext::new(
        RunId::new("run-demo")?,
        invocation_core::CallPolicy::AUTHORIZED_READ_ONLY,
    )
    .with_run_budget(10);

    // 2. The model asked for three tool calls; the framework gave them ids.
    let calls = [
        (
            "toolu_01",
            fake::args(Mode::Found, "connection pool exhausted"),
        ),
        (
            "toolu_02",
            fake::args(Mode::NoEvidence, "certificate expiry"),
        ),
        ("toolu_03", fake::args(Mode::ExecError, "disk pressure")),
    ];
    for (id, arguments) in calls {
        let envelope = ToolEnvelope::new(id, "run-demo", "lookup", arguments);
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
        .verify_citations(&run, &["toolu_01", "toolu_02", "toolu_03", "toolu_99"])
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
