//! End to end with bob-runtime 0.3.2 and a scripted model (a fake LLM port
//! that asks for tool calls), on a real Redis: a two-step diagnosis, a crash
//! (everything dropped) between or during steps, a restart on the same Redis,
//! and the first step replayed from the records without executing again.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bob_adapter::{BoundaryToolPort, StoreToolJournal};
use bob_core::{
    AgentEvent, AgentRequest, AgentRunResult, EventSink, FinishReason, LlmCapabilities, LlmError,
    LlmPort, LlmRequest, LlmResponse, LlmStream, RequestContext, SessionId, SessionState,
    SessionStore, TokenUsage, ToolCall, ToolDescriptor, ToolError, ToolJournalPort, ToolPort,
    ToolResult, TurnPolicy,
};
use bob_runtime::typestate::{AgentRunner, AgentStepResult};
use bob_runtime::{AgentBootstrap, RuntimeBuilder};
use invocation_core::InvocationStore;
use serde_json::json;
use store_redis::{RedisConfig, RedisStore};

use support::{boundary, session};

/// A model that answers its n-th request with the n-th scripted tool call,
/// then with a final answer.
#[derive(Debug)]
struct ScriptedLlm {
    calls: Vec<ToolCall>,
    asked: AtomicUsize,
}

impl ScriptedLlm {
    fn new(calls: Vec<ToolCall>) -> Self {
        Self {
            calls,
            asked: AtomicUsize::new(0),
        }
    }
}

#[async_trait::async_trait]
impl LlmPort for ScriptedLlm {
    fn capabilities(&self) -> LlmCapabilities {
        LlmCapabilities {
            native_tool_calling: true,
            streaming: false,
        }
    }

    async fn complete(&self, _req: LlmRequest) -> Result<LlmResponse, LlmError> {
        let n = self.asked.fetch_add(1, Ordering::SeqCst);
        let (content, tool_calls) = match self.calls.get(n) {
            Some(call) => (String::new(), vec![call.clone()]),
            None => (
                json!({"type": "final", "content": "pool exhaustion"}).to_string(),
                Vec::new(),
            ),
        };
        Ok(LlmResponse {
            content,
            usage: TokenUsage::default(),
            finish_reason: if tool_calls.is_empty() {
                FinishReason::Stop
            } else {
                FinishReason::ToolCall
            },
            tool_calls,
        })
    }

    async fn complete_stream(&self, _req: LlmRequest) -> Result<LlmStream, LlmError> {
        Err(LlmError::Provider(
            "the scripted model does not stream".into(),
        ))
    }
}

/// bob's session transcript, in this process's memory (lost in a crash).
#[derive(Debug, Default)]
struct ProcessSessions(Mutex<HashMap<SessionId, SessionState>>);

#[async_trait::async_trait]
impl SessionStore for ProcessSessions {
    async fn load(&self, id: &SessionId) -> Result<Option<SessionState>, bob_core::StoreError> {
        Ok(self.0.lock().unwrap().get(id).cloned())
    }
    async fn save(&self, id: &SessionId, state: &SessionState) -> Result<(), bob_core::StoreError> {
        self.0.lock().unwrap().insert(id.clone(), state.clone());
        Ok(())
    }
}

#[derive(Debug)]
struct NoEvents;

impl EventSink for NoEvents {
    fn emit(&self, _event: AgentEvent) {}
}

/// A "process": its own Redis connection pool on the shared key prefix.
fn redis_process(prefix: &str) -> Arc<dyn InvocationStore> {
    Arc::new(
        RedisStore::new(RedisConfig::single(store_redis::testing::shared_url()).key_prefix(prefix))
            .unwrap(),
    )
}

fn knowledge_step(id: &str) -> ToolCall {
    ToolCall::new(
        "lookup_knowledge",
        json!({"query": "connection pool exhausted"}),
    )
    .with_call_id(id)
}

fn logs_step(id: &str) -> ToolCall {
    ToolCall::new(
        "query_logs",
        json!({"topic": "APPLICATION", "query": "connection pool"}),
    )
    .with_call_id(id)
}

/// The whole transcript as the prompt (bob-runtime's window compactor is private).
#[derive(Debug)]
struct WholeTranscript;

#[async_trait::async_trait]
impl bob_core::ports::ContextCompactorPort for WholeTranscript {
    async fn compact(&self, session: &SessionState) -> Vec<bob_core::Message> {
        session.messages.clone()
    }
}

const fn compactor() -> WholeTranscript {
    WholeTranscript
}

/// bob-runtime's typestate runner (which keeps the model's call ids) over the
/// boundary on Redis.
#[tokio::test(flavor = "multi_thread")]
async fn a_two_step_diagnosis_survives_a_crash_between_steps() {
    let prefix = store_redis::testing::unique_prefix();
    let s = session("diag");

    // Process A: step 1 runs, step 2 is asked for, then the process dies.
    let first_observation = {
        let (boundary, counts) = boundary(redis_process(&prefix), None);
        let port = BoundaryToolPort::new(
            boundary,
            &s,
            invocation_core::CallPolicy::AUTHORIZED_READ_ONLY,
        )
        .unwrap();
        let llm = ScriptedLlm::new(vec![knowledge_step("toolu_1"), logs_step("toolu_2")]);
        let runner = AgentRunner::new(
            &s,
            "scripted",
            "",
            TurnPolicy::default(),
            SessionState::default(),
        );
        let AgentStepResult::RequiresTool(step1) =
            runner.infer(&llm, &port, &compactor()).await.unwrap()
        else {
            panic!("the model asks for a tool first");
        };
        let mut results = Vec::new();
        for call in step1.pending_calls() {
            results.push(ToolPort::call_tool(&port, call.clone()).await.unwrap());
        }
        assert_eq!(results.len(), 1);
        assert!(!results[0].is_error, "{}", results[0].output);
        assert_eq!(results[0].output["evidence_status"], "EVIDENCE_FOUND");
        let AgentStepResult::RequiresTool(step2) = step1
            .provide_tool_results(results.clone())
            .infer(&llm, &port, &compactor())
            .await
            .unwrap()
        else {
            panic!("the model asks for a second tool");
        };
        assert_eq!(step2.pending_calls()[0].name, "query_logs");
        assert_eq!((counts.knowledge(), counts.logs()), (1, 0));
        // Crash: runner, port, boundary and connection pool are dropped here.
        results[0].output.clone()
    };

    // Process B: a new boundary on the same Redis; bob's transcript is gone,
    // so the model starts the diagnosis again, with new call ids.
    let (boundary, counts) = boundary(redis_process(&prefix), None);
    let port = BoundaryToolPort::new(
        boundary,
        &s,
        invocation_core::CallPolicy::AUTHORIZED_READ_ONLY,
    )
    .unwrap();
    let llm = ScriptedLlm::new(vec![knowledge_step("toolu_3"), logs_step("toolu_4")]);
    let sessions = ProcessSessions::default();
    let finished = AgentRunner::new(
        &s,
        "scripted",
        "",
        TurnPolicy::default(),
        SessionState::default(),
    )
    .run_to_completion(&llm, &port, &compactor(), &sessions)
    .await
    .unwrap();
    let transcript = &finished.response().tool_transcript;
    assert_eq!(transcript.len(), 2);
    // Step 1 is replayed from process A's record: same evidence, its own id.
    let mut replayed = transcript[0].output.clone();
    assert_eq!(replayed["tool_call_id"], "toolu_3");
    replayed["tool_call_id"] = json!("toolu_1");
    assert_eq!(replayed, first_observation);
    assert_eq!(counts.knowledge(), 0, "step 1 was not executed again");
    // Step 2 ran here, once.
    assert_eq!(transcript[1].output["evidence_status"], "EVIDENCE_FOUND");
    assert_eq!(counts.logs(), 1);

    // The same id as process A's step 1 gets A's recorded answer; nothing runs.
    let again = port.call(knowledge_step("toolu_1")).await;
    assert!(again.recalled);
    assert_eq!(again.result.output, first_observation);
    assert_eq!(counts.knowledge(), 0);

    // The records say what happened.
    let records = port
        .boundary()
        .journal()
        .entries(&port.run().run_id, invocation_core::RecordFields::Metadata)
        .await
        .unwrap();
    let ids: Vec<&str> = records
        .iter()
        .map(|r| r.key.tool_call_id.as_str())
        .collect();
    assert_eq!(ids, ["toolu_1", "toolu_3", "toolu_4"]);
    assert_eq!(
        records[1].replayed_from.as_ref().map(|id| id.as_str()),
        Some("toolu_1")
    );
}

/// A tool for bob's scheduler, which drops call ids: counts calls per tool
/// and, when told to, hangs in one tool until the process is killed.
#[derive(Debug, Default)]
struct CountingTools {
    runs: Mutex<HashMap<String, usize>>,
    hang_in: Option<String>,
    entered: tokio::sync::Notify,
}

impl CountingTools {
    fn runs(&self, name: &str) -> usize {
        self.runs.lock().unwrap().get(name).copied().unwrap_or(0)
    }
}

#[async_trait::async_trait]
impl ToolPort for CountingTools {
    async fn list_tools(&self) -> Result<Vec<ToolDescriptor>, ToolError> {
        Ok(vec![
            ToolDescriptor::new("lookup_knowledge", "runbooks"),
            ToolDescriptor::new("query_logs", "logs"),
        ])
    }

    async fn call_tool(&self, call: ToolCall) -> Result<ToolResult, ToolError> {
        *self
            .runs
            .lock()
            .unwrap()
            .entry(call.name.clone())
            .or_default() += 1;
        if self.hang_in.as_deref() == Some(call.name.as_str()) {
            self.entered.notify_one();
            std::future::pending::<()>().await;
        }
        Ok(ToolResult {
            output: json!({"evidence_status": "EVIDENCE_FOUND", "tool": call.name, "args": call.arguments}),
            name: call.name,
            is_error: false,
        })
    }
}

fn request(s: &str) -> AgentRequest {
    AgentRequest {
        input: "why are orders timing out?".to_owned(),
        session_id: s.to_owned(),
        model: None,
        context: RequestContext::default(),
        cancel_token: None,
        output_schema: None,
        max_output_retries: 0,
    }
}

fn runtime(
    llm: ScriptedLlm,
    tools: Arc<dyn ToolPort>,
    journal: Arc<dyn ToolJournalPort>,
) -> Arc<dyn bob_runtime::AgentRuntime> {
    RuntimeBuilder::new()
        .with_llm(Arc::new(llm))
        .with_tools(tools)
        .with_store(Arc::new(ProcessSessions::default()))
        .with_events(Arc::new(NoEvents))
        .with_default_model("scripted")
        .with_journal(journal)
        .build()
        .unwrap()
}

fn transcript(result: AgentRunResult) -> Vec<ToolResult> {
    let AgentRunResult::Finished(response) = result;
    response.tool_transcript
}

/// bob-runtime's scheduler (`AgentRuntime::run`) with the journal on Redis:
/// the process dies while step 2's tool runs; the next process recovers,
/// replays step 1 from the journal and executes step 2 once.
#[tokio::test(flavor = "multi_thread")]
async fn the_scheduler_replays_journaled_steps_after_a_crash() {
    let prefix = store_redis::testing::unique_prefix();
    let s = session("sched");
    let steps = || vec![knowledge_step("a"), logs_step("b")];

    // Process A hangs in step 2 and is killed (its turn future dropped).
    let tools_a = Arc::new(CountingTools {
        hang_in: Some("query_logs".to_owned()),
        ..CountingTools::default()
    });
    let journal_a = Arc::new(StoreToolJournal::new(redis_process(&prefix)));
    let rt = runtime(ScriptedLlm::new(steps()), tools_a.clone(), journal_a);
    let turn = tokio::spawn({
        let s = s.clone();
        async move { rt.run(request(&s)).await }
    });
    tokio::time::timeout(Duration::from_secs(20), tools_a.entered.notified())
        .await
        .unwrap();
    turn.abort();
    assert!(turn.await.unwrap_err().is_cancelled());
    assert_eq!(
        (tools_a.runs("lookup_knowledge"), tools_a.runs("query_logs")),
        (1, 1)
    );

    // Process B: start-up recovery of the dead harness's session, then the turn again.
    tokio::time::sleep(Duration::from_millis(10)).await;
    let journal_b = StoreToolJournal::new(redis_process(&prefix));
    assert_eq!(
        journal_b.recover(&s, Duration::ZERO).await.unwrap().len(),
        1
    );
    let tools_b = Arc::new(CountingTools::default());
    let rt = runtime(
        ScriptedLlm::new(steps()),
        tools_b.clone(),
        Arc::new(journal_b.clone()),
    );
    let results = transcript(rt.run(request(&s)).await.unwrap());
    assert_eq!(results.len(), 2);
    assert_eq!(results[0].output["tool"], "lookup_knowledge");
    assert_eq!(results[1].output["tool"], "query_logs");
    assert!(results.iter().all(|r| !r.is_error));
    assert_eq!(
        tools_b.runs("lookup_knowledge"),
        0,
        "step 1 replayed from the journal"
    );
    assert_eq!(tools_b.runs("query_logs"), 1, "step 2 executed once");

    let entries = journal_b.entries(&s).await.unwrap();
    let summary: Vec<(String, bool)> = entries
        .iter()
        .map(|e| (e.tool_name.clone(), e.is_error))
        .collect();
    assert_eq!(
        summary,
        [
            ("lookup_knowledge".to_owned(), false),
            ("query_logs".to_owned(), true), // A's abandoned attempt
            ("query_logs".to_owned(), false),
        ]
    );
    assert_eq!(entries[1].result["error_code"], "EXECUTION_ABANDONED");
}

/// Pins bob-runtime 0.3.2's scheduler: it calls tools with
/// `ToolCall::new(name, arguments)`, dropping the model's call id, so the
/// boundary refuses every call (it never invents an id) and nothing runs.
/// When bob passes the id through, this test fails: then the scheduler can
/// serve `BoundaryToolPort` directly.
#[tokio::test(flavor = "multi_thread")]
async fn the_scheduler_drops_call_ids_so_the_boundary_refuses_its_calls() {
    let s = session("noids");
    let store = redis_process(&store_redis::testing::unique_prefix());
    let (boundary, counts) = boundary(Arc::clone(&store), None);
    let port = Arc::new(
        BoundaryToolPort::new(
            boundary,
            &s,
            invocation_core::CallPolicy::AUTHORIZED_READ_ONLY,
        )
        .unwrap(),
    );
    let journal = Arc::new(StoreToolJournal::new(store));
    let rt = runtime(
        ScriptedLlm::new(vec![knowledge_step("a"), logs_step("b")]),
        port.clone(),
        journal.clone(),
    );
    let results = transcript(rt.run(request(&s)).await.unwrap());
    assert_eq!(results.len(), 2);
    for result in &results {
        assert!(result.is_error);
        assert_eq!(result.output["error_code"], "INVALID_TOOL_CALL_ID");
    }
    assert_eq!(counts.total(), 0);
    // The refusals are journaled as attempts, never replayed.
    let fp =
        bob_core::JournalEntry::fingerprint("lookup_knowledge", &knowledge_step("a").arguments);
    let hex = bob_adapter::fingerprint::parse_fingerprint(&fp)
        .unwrap()
        .to_hex();
    assert!(journal.lookup(&s, &hex).await.unwrap().is_none());
}
