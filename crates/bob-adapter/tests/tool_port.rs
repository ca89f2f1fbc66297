//! `BoundaryToolPort` through bob-core's `ToolPort`, on the in-memory store
//! and on a real Redis, with the three frozen tools over real sources.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::{Arc, Mutex};

use aci_contracts::{ErrorCode, EvidenceStatus, HarnessControlView, InvocationStatus, RunId};
use bob_adapter::{BoundaryToolPort, Error};
use bob_core::{ToolCall, ToolCatalogPort, ToolDescriptor, ToolExecutorPort, ToolPort};
use invocation_core::{InvocationStore, RecordFields};
use projectors_mysql::testing::TestDatabase;
use serde_json::{Value, json};
use store_memory::MemoryStore;

use support::{SHOP, boundary, session};

fn call(id: Option<&str>, name: &str, arguments: Value) -> ToolCall {
    let call = ToolCall::new(name, arguments);
    match id {
        Some(id) => call.with_call_id(id),
        None => call,
    }
}

async fn records(port: &BoundaryToolPort) -> usize {
    port.boundary()
        .store()
        .list(&port.run().run_id, RecordFields::Metadata)
        .await
        .unwrap()
        .len()
}

async fn lists_the_frozen_tools(store: Arc<dyn InvocationStore>) {
    let (boundary, _) = boundary(store, None);
    let port = BoundaryToolPort::new(
        boundary,
        &session("list"),
        invocation_core::CallPolicy::AUTHORIZED_READ_ONLY,
    )
    .unwrap();
    let listed = ToolCatalogPort::list_tools(&port).await.unwrap();
    let names: Vec<&str> = listed.iter().map(|d| d.id.as_str()).collect();
    assert_eq!(names, ["lookup_knowledge", "query_logs"]);
    for descriptor in &listed {
        let frozen = aci_contracts::ToolName::parse(&descriptor.id).unwrap();
        assert_eq!(descriptor.description, frozen.description());
        let mut schema = frozen.definition().input_schema;
        schema.as_object_mut().unwrap().remove("$schema");
        assert_eq!(descriptor.input_schema, schema);
        assert_eq!(descriptor.input_schema["type"], "object");
        assert_eq!(descriptor.timeout_ms, Some(30_000));
    }
}

async fn three_tools_through_the_port(store: Arc<dyn InvocationStore>) {
    let db = TestDatabase::create(SHOP).await;
    let (boundary, counts) = boundary(store, Some(&db));
    let controls = Arc::new(Mutex::new(Vec::<HarnessControlView>::new()));
    let seen = Arc::clone(&controls);
    let port = BoundaryToolPort::new(
        boundary,
        &session("three"),
        invocation_core::CallPolicy::AUTHORIZED_READ_ONLY,
    )
    .unwrap()
    .on_control(move |view| seen.lock().unwrap().push(view.clone()));
    assert_eq!(ToolPort::list_tools(&port).await.unwrap().len(), 3);

    let knowledge = ToolExecutorPort::call_tool(
        &port,
        call(
            Some("toolu_k1"),
            "lookup_knowledge",
            json!({"query": "connection pool exhausted"}),
        ),
    )
    .await
    .unwrap();
    let logs = ToolExecutorPort::call_tool(
        &port,
        call(
            Some("toolu_l1"),
            "query_logs",
            json!({"topic": "APPLICATION", "query": "timeout"}),
        ),
    )
    .await
    .unwrap();
    let mysql = ToolExecutorPort::call_tool(
        &port,
        call(
            Some("toolu_m1"),
            "query_mysql",
            json!({"data_source": "shop", "sql": "SELECT id FROM orders WHERE status = ? ORDER BY id", "params": ["timeout"]}),
        ),
    )
    .await
    .unwrap();
    db.drop().await;

    for (result, name, id) in [
        (&knowledge, "lookup_knowledge", "toolu_k1"),
        (&logs, "query_logs", "toolu_l1"),
        (&mysql, "query_mysql", "toolu_m1"),
    ] {
        assert_eq!(result.name, name);
        assert!(!result.is_error, "{name}: {}", result.output);
        assert_eq!(result.output["evidence_status"], "EVIDENCE_FOUND", "{name}");
        assert_eq!(result.output["tool_call_id"], id);
        // The observation only: no harness fields reach the model.
        let text = result.output.to_string();
        for harness_only in ["scope_fingerprint", "run_id", "raw"] {
            assert!(!text.contains(harness_only), "{name}: {harness_only}");
        }
    }
    assert_eq!(mysql.output["rows"], json!([[1], [3]]));
    assert_eq!(
        (counts.knowledge(), counts.logs(), counts.mysql()),
        (1, 1, 1)
    );

    // The callback saw each call's control view, READY with a fingerprint.
    let controls = controls.lock().unwrap().clone();
    assert_eq!(controls.len(), 3);
    for view in &controls {
        assert_eq!(view.status, InvocationStatus::Ready);
        assert_eq!(view.run_id.as_str(), port.run().run_id.as_str());
        assert!(view.scope_fingerprint.is_some());
    }
    assert_eq!(records(&port).await, 3);
}

async fn missing_call_id_is_an_error_result_and_runs_nothing(store: Arc<dyn InvocationStore>) {
    let (boundary, counts) = boundary(store, None);
    let port = BoundaryToolPort::new(
        boundary,
        &session("noid"),
        invocation_core::CallPolicy::AUTHORIZED_READ_ONLY,
    )
    .unwrap();
    for id in [None, Some(""), Some("has space"), Some("{tag}")] {
        let outcome = port
            .call(call(
                id,
                "query_logs",
                json!({"topic": "APPLICATION", "query": "timeout"}),
            ))
            .await;
        assert!(outcome.result.is_error);
        assert_eq!(outcome.result.output["evidence_status"], "ERROR");
        assert_eq!(outcome.result.output["error_code"], "INVALID_TOOL_CALL_ID");
        assert!(outcome.result.output.get("tool_call_id").is_none());
        assert_eq!(
            outcome.control.error_code,
            Some(ErrorCode::InvalidToolCallId)
        );
        assert!(!outcome.recalled);
    }
    assert_eq!(counts.total(), 0);
    assert_eq!(records(&port).await, 0);
}

async fn duplicate_call_id_executes_once(store: Arc<dyn InvocationStore>) {
    let (boundary, counts) = boundary(store, None);
    let port = BoundaryToolPort::new(
        boundary,
        &session("dup"),
        invocation_core::CallPolicy::AUTHORIZED_READ_ONLY,
    )
    .unwrap();
    let args = json!({"topic": "APPLICATION", "query": "timeout"});
    let first = port
        .call(call(Some("call-1"), "query_logs", args.clone()))
        .await;
    assert!(!first.result.is_error);
    assert!(!first.recalled);

    // The same call again (bob retrying a step): the recorded answer, not a run.
    let again = port
        .call(call(Some("call-1"), "query_logs", args.clone()))
        .await;
    assert!(again.recalled);
    assert!(!again.result.is_error);
    assert_eq!(again.result.output, first.result.output);
    assert_eq!(again.control.error_code, Some(ErrorCode::DuplicateToolCall));

    // Concurrent duplicates of a new id: one runs, the others wait for it.
    let tasks: Vec<_> = (0..4)
        .map(|_| {
            let port = port.clone();
            let args = args.clone();
            tokio::spawn(async move { port.call(call(Some("call-2"), "query_logs", args)).await })
        })
        .collect();
    let mut outputs = Vec::new();
    for task in tasks {
        let outcome = task.await.unwrap();
        assert!(!outcome.result.is_error, "{}", outcome.result.output);
        outputs.push(outcome.result.output);
    }
    assert!(outputs.windows(2).all(|w| w[0] == w[1]));

    // The id with other arguments is refused; nothing runs.
    let other = port
        .call(call(
            Some("call-1"),
            "query_logs",
            json!({"topic": "APPLICATION", "query": "oom"}),
        ))
        .await;
    assert!(other.result.is_error);
    assert!(!other.recalled);
    assert_eq!(other.result.output["error_code"], "DUPLICATE_TOOL_CALL");
    let other_tool = port
        .call(call(
            Some("call-1"),
            "lookup_knowledge",
            json!({"query": "timeout"}),
        ))
        .await;
    assert_eq!(
        other_tool.result.output["error_code"],
        "DUPLICATE_TOOL_CALL"
    );

    assert_eq!(counts.logs(), 2);
    assert_eq!(counts.knowledge(), 0);
    assert_eq!(records(&port).await, 2);
}

async fn is_error_is_exactly_evidence_status_error(store: Arc<dyn InvocationStore>) {
    let (boundary, _) = boundary(store, None);
    let port = BoundaryToolPort::new(
        boundary,
        &session("status"),
        invocation_core::CallPolicy::AUTHORIZED_READ_ONLY,
    )
    .unwrap();
    let cases = [
        (
            "query_logs",
            json!({"topic": "APPLICATION", "query": "zebra-unicorn-nothing"}),
            EvidenceStatus::NoEvidence,
        ),
        (
            "query_logs",
            json!({"topic": "APPLICATION", "query": "timeout"}),
            EvidenceStatus::EvidenceFound,
        ),
        (
            "query_logs",
            json!({"topic": "NOPE", "query": "x"}),
            EvidenceStatus::Error,
        ),
        (
            "query_logs",
            json!(["not", "an", "object"]),
            EvidenceStatus::Error,
        ),
        ("no_such_tool", json!({}), EvidenceStatus::Error),
        // Registered only when a MySQL server is configured.
        (
            "query_mysql",
            json!({"data_source": "shop", "sql": "SELECT 1"}),
            EvidenceStatus::Error,
        ),
    ];
    for (i, (name, args, status)) in cases.into_iter().enumerate() {
        let outcome = port.call(call(Some(&format!("c{i}")), name, args)).await;
        assert_eq!(outcome.control.evidence_status, status, "{name} {i}");
        assert_eq!(
            outcome.result.is_error,
            status == EvidenceStatus::Error,
            "{i}"
        );
        let wire = serde_json::to_value(status).unwrap();
        assert_eq!(outcome.result.output["evidence_status"], wire, "{i}");
    }
}

macro_rules! on_both_stores {
    ($($scenario:ident),* $(,)?) => {
        mod memory {
            $(
                #[tokio::test(flavor = "multi_thread")]
                async fn $scenario() {
                    super::$scenario(std::sync::Arc::new(super::MemoryStore::new())).await;
                }
            )*
        }
        mod redis {
            $(
                #[tokio::test(flavor = "multi_thread")]
                async fn $scenario() {
                    super::$scenario(std::sync::Arc::new(store_redis::testing::shared_store())).await;
                }
            )*
        }
    };
}

on_both_stores!(
    lists_the_frozen_tools,
    three_tools_through_the_port,
    missing_call_id_is_an_error_result_and_runs_nothing,
    duplicate_call_id_executes_once,
    is_error_is_exactly_evidence_status_error,
);

#[test]
fn a_session_that_is_not_a_run_id_is_refused() {
    let (boundary, _) = boundary(Arc::new(MemoryStore::new()), None);
    for bad in ["", "a b", "a/b", "{x}"] {
        assert!(matches!(
            BoundaryToolPort::new(
                boundary.clone(),
                &bad.to_owned(),
                invocation_core::CallPolicy::AUTHORIZED_READ_ONLY
            ),
            Err(Error::InvalidSession)
        ));
    }
    let port = BoundaryToolPort::new(
        boundary,
        &"incident-7".to_owned(),
        invocation_core::CallPolicy::AUTHORIZED_READ_ONLY,
    )
    .unwrap();
    assert_eq!(port.run().run_id, RunId::new("incident-7").unwrap());
}

#[tokio::test]
async fn other_tools_need_a_descriptor() {
    use invocation_core::ToolBoundary;
    use invocation_core::testing::fake::{FakeExecutor, fake_tool};
    let boundary = ToolBoundary::builder(Arc::new(MemoryStore::new()))
        .tool(fake_tool("echo_facts", FakeExecutor::new()))
        .build()
        .unwrap();
    let port = BoundaryToolPort::new(
        boundary,
        &"s-1".to_owned(),
        invocation_core::CallPolicy::AUTHORIZED_READ_ONLY,
    )
    .unwrap();
    assert!(matches!(port.descriptors(), Err(Error::MissingDescriptor)));
    assert!(ToolPort::list_tools(&port).await.is_err());
    let schema = json!({"type": "object", "properties": {"topic": {"type": "string"}}});
    let port = port.describe(
        ToolDescriptor::new("echo_facts", "Echoes facts.").with_input_schema(schema.clone()),
    );
    let listed = ToolPort::list_tools(&port).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].description, "Echoes facts.");
    assert_eq!(listed[0].input_schema, schema);
    assert_eq!(listed[0].timeout_ms, Some(30_000));
}

/// The boundary's records and the journal's share a run but never a scope:
/// a journal entry is not a READY record the boundary could replay from.
async fn journal_entries_never_feed_boundary_replay(store: Arc<dyn InvocationStore>) {
    use bob_core::{JournalEntry, ToolJournalPort};
    let (boundary, counts) = boundary(store, None);
    let s = session("mixed");
    let journal = bob_adapter::StoreToolJournal::for_boundary(&boundary);
    // Raw arguments equal to lookup_knowledge's normalized scope.
    let args = json!({"query": "connection pool exhausted"});
    journal
        .append(JournalEntry {
            session_id: s.clone(),
            call_fingerprint: JournalEntry::fingerprint("lookup_knowledge", &args),
            tool_name: "lookup_knowledge".to_owned(),
            arguments: args.clone(),
            result: json!({"evidence_status": "EVIDENCE_FOUND", "from": "bob"}),
            is_error: false,
            timestamp_ms: 0,
        })
        .await
        .unwrap();
    let port = BoundaryToolPort::new(
        boundary,
        &s,
        invocation_core::CallPolicy::AUTHORIZED_READ_ONLY,
    )
    .unwrap();
    let outcome = port.call(call(Some("k1"), "lookup_knowledge", args)).await;
    assert!(!outcome.result.is_error, "{}", outcome.result.output);
    assert_eq!(outcome.control.replayed_from, None);
    assert_eq!(outcome.control.duplicate_of, None);
    assert_eq!(counts.knowledge(), 1);
}

mod mixed {
    #[tokio::test(flavor = "multi_thread")]
    async fn memory() {
        super::journal_entries_never_feed_boundary_replay(std::sync::Arc::new(
            super::MemoryStore::new(),
        ))
        .await;
    }
    #[tokio::test(flavor = "multi_thread")]
    async fn redis() {
        super::journal_entries_never_feed_boundary_replay(std::sync::Arc::new(
            store_redis::testing::shared_store(),
        ))
        .await;
    }
}

/// The port runs under the harness's run context, and a replay (a new call
/// of a READY scope) is never a way around it: bob's journal replays before
/// any check, the boundary replays only after the full preflight.
async fn replay_does_not_skip_policy(store: Arc<dyn InvocationStore>) {
    use invocation_core::RunContext;
    let (boundary, counts) = boundary(store, None);
    let s = session("policy");
    let run = RunId::new(s.as_str()).unwrap();
    let args = json!({"query": "connection pool exhausted"});
    let open = BoundaryToolPort::with_run(
        boundary.clone(),
        RunContext::new(
            run.clone(),
            invocation_core::CallPolicy::AUTHORIZED_READ_ONLY,
        )
        .with_tool_budget("lookup_knowledge", 2),
    );
    let first = open
        .call(call(Some("k1"), "lookup_knowledge", args.clone()))
        .await;
    assert!(!first.result.is_error);
    // Same scope, new id: replayed through the boundary (lookup_knowledge is
    // SameScope in these tests), counted against the budget, not executed.
    let second = open
        .call(call(Some("k2"), "lookup_knowledge", args.clone()))
        .await;
    assert_eq!(
        second.control.replayed_from.as_ref().map(|id| id.as_str()),
        Some("k1")
    );
    let third = open
        .call(call(Some("k3"), "lookup_knowledge", args.clone()))
        .await;
    assert_eq!(third.result.output["error_code"], "TOOL_BUDGET_EXHAUSTED");
    assert!(third.result.is_error);
    // A run the harness stopped gets no replay either.
    let closed = BoundaryToolPort::with_run(
        boundary,
        RunContext::new(run, invocation_core::CallPolicy::AUTHORIZED_READ_ONLY).inactive(),
    );
    let refused = closed
        .call(call(Some("k4"), "lookup_knowledge", args))
        .await;
    assert_eq!(refused.result.output["error_code"], "RUN_INACTIVE");
    assert_eq!(counts.knowledge(), 1);
}

mod policy {
    #[tokio::test(flavor = "multi_thread")]
    async fn memory() {
        super::replay_does_not_skip_policy(std::sync::Arc::new(super::MemoryStore::new())).await;
    }
    #[tokio::test(flavor = "multi_thread")]
    async fn redis() {
        super::replay_does_not_skip_policy(std::sync::Arc::new(
            store_redis::testing::shared_store(),
        ))
        .await;
    }
}

/// The store holds a run's owner, fixed by its first create: the journal must
/// present the harness's terms for the session (`for_run`), or it is refused.
async fn the_journal_shares_the_runs_owner(store: Arc<dyn InvocationStore>) {
    use bob_core::{JournalEntry, ToolJournalPort};
    use invocation_core::RunContext;
    let (boundary, _) = boundary(store, None);
    let s = session("owned");
    let ctx = RunContext::new(
        RunId::new(s.as_str()).unwrap(),
        invocation_core::CallPolicy::AUTHORIZED_READ_ONLY,
    )
    .with_principal("alice");
    let port = BoundaryToolPort::with_run(boundary.clone(), ctx.clone());
    let first = port
        .call(call(
            Some("c1"),
            "query_logs",
            json!({"topic": "APPLICATION", "query": "timeout"}),
        ))
        .await;
    assert!(!first.result.is_error, "{}", first.result.output);
    let args = json!({"topic": "APPLICATION", "query": "oom"});
    let entry = JournalEntry {
        session_id: s.clone(),
        call_fingerprint: JournalEntry::fingerprint("query_logs", &args),
        tool_name: "query_logs".to_owned(),
        arguments: args,
        result: json!({"evidence_status": "EVIDENCE_FOUND"}),
        is_error: false,
        timestamp_ms: 0,
    };
    let anonymous = bob_adapter::StoreToolJournal::for_boundary(&boundary);
    let Err(bob_core::StoreError::Other(error)) = anonymous.append(entry.clone()).await else {
        panic!("a journal without the run's owner is refused");
    };
    assert_eq!(
        error.downcast_ref::<Error>().unwrap().code(),
        "RUN_OWNED_BY_OTHER"
    );
    let owned = bob_adapter::StoreToolJournal::for_boundary(&boundary).for_run(&ctx);
    owned.append(entry).await.unwrap();
    assert_eq!(owned.entries(&s).await.unwrap().len(), 1);
}

mod owner {
    #[tokio::test(flavor = "multi_thread")]
    async fn memory() {
        super::the_journal_shares_the_runs_owner(std::sync::Arc::new(super::MemoryStore::new()))
            .await;
    }
    #[tokio::test(flavor = "multi_thread")]
    async fn redis() {
        super::the_journal_shares_the_runs_owner(std::sync::Arc::new(
            store_redis::testing::shared_store(),
        ))
        .await;
    }
}
