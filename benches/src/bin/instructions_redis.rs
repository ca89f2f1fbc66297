//! Client-side work per READY call on Redis, for `cargo xtask bench
//! instructions` (which runs this under `valgrind --tool=callgrind` or
//! `perf stat`, twice with different counts; the difference over the
//! difference in calls is the instructions per call).
//!
//! `instructions_redis <boundary|bare> <calls>`: spawns a `redis-server` (not
//! counted: another process), warms up (connects, caches the scripts), then
//! makes `<calls>` READY calls one after another on a current-thread
//! runtime, so the count does not depend on thread scheduling: through the
//! `ToolBoundary` with the fake tool of `invocation-core` (`boundary`), or
//! the bare create + finalize store calls with the same texts (`bare`).

use std::error::Error;
use std::sync::Arc;

use aci_contracts::{InvocationStatus, RunId, ToolCallId};
use invocation_core::testing::fake::{self, FakeExecutor, Mode, fake_tool};
use invocation_core::{
    Budgets, Clock, Finalization, InvocationKey, InvocationStore, NewInvocation, ReadyEvidence,
    RunContext, ScopeFingerprint, SystemClock, ToolBoundary, ToolEnvelope,
};
use store_redis::testing::{RedisServer, unique_id};
use store_redis::{RedisConfig, RedisStore};

type Outcome<T> = Result<T, Box<dyn Error>>;

const TOOL: &str = "lookup_fake";
const ARGUMENTS: &str = r#"{"query":"lookup timeout"}"#;
const WARM_UP: usize = 50;

fn main() -> Outcome<()> {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_default();
    let calls: usize = args.next().unwrap_or_default().parse()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let server = RedisServer::spawn()?;
    let store = RedisStore::new(RedisConfig::single(server.url()))?;
    runtime.block_on(async {
        match mode.as_str() {
            "boundary" => boundary(store, calls).await,
            "bare" => bare(&store, calls).await,
            _ => Err("usage: instructions_redis <boundary|bare> <calls>".into()),
        }
    })
}

async fn boundary(store: RedisStore, calls: usize) -> Outcome<()> {
    let boundary = ToolBoundary::builder(Arc::new(store))
        .tool(fake_tool(TOOL, FakeExecutor::new()))
        .build()?;
    let run = RunId::new(unique_id("instr"))?;
    let ctx = RunContext::new(
        run.clone(),
        invocation_core::CallPolicy::AUTHORIZED_READ_ONLY,
    );
    let arguments = fake::args(Mode::Found, "lookup timeout");
    for i in 0..WARM_UP + calls {
        let envelope = ToolEnvelope::new(format!("c{i}"), run.as_str(), TOOL, arguments.clone());
        let outcome = boundary.invoke(&ctx, envelope).await;
        if outcome.control.status != InvocationStatus::Ready {
            return Err(format!("call {i}: {:?}", outcome.control.error_code).into());
        }
    }
    Ok(())
}

async fn bare(store: &RedisStore, calls: usize) -> Outcome<()> {
    let run = RunId::new(unique_id("instr"))?;
    // Computed once: the boundary's work, not the store's.
    let fingerprint = ScopeFingerprint::of(TOOL, &serde_json::json!({"query": "lookup timeout"}));
    for i in 0..WARM_UP + calls {
        let key = InvocationKey::new(run.clone(), ToolCallId::new(format!("c{i}"))?);
        store
            .create(NewInvocation {
                key: key.clone(),
                tool_name: TOOL.to_owned(),
                request_json: ARGUMENTS.to_owned(),
                scope_json: ARGUMENTS.to_owned(),
                scope_fingerprint: fingerprint,
                created_at: SystemClock.now(),
                ttl: invocation_core::DEFAULT_RECORD_TTL,
                budgets: Budgets::default(),
                claim_scope: false,
                run: invocation_core::RunTerms::default(),
                attempt: 1,
            })
            .await?;
        store
            .finalize(
                &key,
                Finalization::Ready {
                    evidence: ReadyEvidence::Found,
                    raw_json: r#"{"query":"lookup timeout","hits":["evidence for lookup timeout"],"secret":"s"}"#.to_owned(),
                    agent_result_json: r#"{"evidence_status":"EVIDENCE_FOUND"}"#.to_owned(),
                    redactions: Default::default(),
                    replayed_from: None,
                    finished_at: SystemClock.now(),
                    timings: None,
                },
            )
            .await?;
    }
    Ok(())
}
