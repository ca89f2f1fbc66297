//! The boundary's redaction pass: the configured redactor reaches the
//! projector, its counts reach the record and the control view, the raw
//! response is never redacted, and a replay carries its source's counts.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::Arc;

use aci_contracts::{InvocationStatus, RunId, ToolCallId};
use invocation_core::redact::{Redactor, RuleSpec};
use invocation_core::testing::fake::{FakeExecutor, Mode, args, fake_tool};
use invocation_core::testing::secrets::{ALNUM, fake};
use invocation_core::{
    InvocationKey, InvocationStore, RecordFields, ReplayPolicy, RunContext, ToolBoundary,
    ToolEnvelope,
};
use store_memory::MemoryStore;

const TOOL: &str = "fake_lookup";

fn boundary(redactor: Option<Arc<Redactor>>) -> (ToolBoundary, Arc<MemoryStore>) {
    let store = Arc::new(MemoryStore::new());
    let mut builder = ToolBoundary::builder(Arc::clone(&store) as Arc<dyn InvocationStore>)
        .tool(fake_tool(TOOL, FakeExecutor::new()).replay(ReplayPolicy::SameScope));
    if let Some(redactor) = redactor {
        builder = builder.redactor(redactor);
    }
    (builder.build().unwrap(), store)
}

async fn call(boundary: &ToolBoundary, id: &str, text: &str) -> invocation_core::BoundaryOutcome {
    let ctx = RunContext::new(
        RunId::new("run-r").unwrap(),
        invocation_core::CallPolicy::AUTHORIZED_READ_ONLY,
    );
    let envelope = ToolEnvelope::new(id, "run-r", TOOL, args(Mode::Found, text));
    boundary.invoke(&ctx, envelope).await
}

fn excerpt(outcome: &invocation_core::BoundaryOutcome) -> String {
    outcome.observation.to_json()["evidence"][0]["excerpt"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[tokio::test]
async fn the_builtin_rules_are_on_by_default_and_counted() {
    let (boundary, store) = boundary(None);
    let token = format!("ghp_{}", fake(ALNUM, 36, 1));
    let text = format!("push failed with GITHUB_TOKEN={token} and password=hunter2!");
    let outcome = call(&boundary, "call_1", &text).await;
    assert_eq!(outcome.control.status, InvocationStatus::Ready);
    assert_eq!(
        excerpt(&outcome),
        "evidence about push failed with GITHUB_TOKEN=<redacted:github_token> and password=<redacted:kv_secret>"
    );
    let expected = BTreeMap::from([("github_token".to_owned(), 1), ("kv_secret".to_owned(), 1)]);
    assert_eq!(outcome.control.redactions, expected);
    let key = InvocationKey::new(
        RunId::new("run-r").unwrap(),
        ToolCallId::new("call_1").unwrap(),
    );
    let record = store.get(&key, RecordFields::All).await.unwrap().unwrap();
    assert_eq!(record.redactions.clone().into_map(), expected);
    // The raw response is never redacted (the fake's holds no secret shape).
    assert!(!record.raw_json.unwrap().contains("<redacted:"));
    // The stored agent result is the redacted one (its query echo is the
    // agent's own text).
    assert!(
        record
            .agent_result_json
            .unwrap()
            .contains("about push failed with GITHUB_TOKEN=<redacted:github_token>")
    );

    // Same scope: replayed, with the source's counts.
    let replayed = call(&boundary, "call_2", &text).await;
    assert_eq!(
        replayed.control.replayed_from,
        Some(ToolCallId::new("call_1").unwrap())
    );
    assert_eq!(replayed.control.redactions, expected);
    assert_eq!(excerpt(&replayed), excerpt(&outcome));

    // Nothing to redact: no counts, and none serialized.
    let clean = call(&boundary, "call_3", "pool timeout").await;
    assert!(clean.control.redactions.is_empty());
    assert!(
        !serde_json::to_string(&clean.control)
            .unwrap()
            .contains("redactions")
    );
}

#[tokio::test]
async fn the_configured_redactor_adds_rules_and_allows_values() {
    let rule = RuleSpec {
        name: "acme_token".into(),
        regex: r"(?-u:\b)(acme_[a-z0-9]{32})".into(),
        secret_group: None,
        keywords: vec!["acme_".into()],
        case_sensitive_keywords: false,
        description: None,
    };
    let redactor = Arc::new(Redactor::new(&[rule], ["guest-pass"]).unwrap());
    let (boundary, _) = boundary(Some(redactor));
    let token = format!("acme_{}", "x7".repeat(16));
    let outcome = call(&boundary, "call_1", &format!("{token} password=guest-pass")).await;
    assert_eq!(
        excerpt(&outcome),
        "evidence about <redacted:acme_token> password=guest-pass"
    );
    assert_eq!(
        outcome.control.redactions,
        BTreeMap::from([("acme_token".to_owned(), 1)])
    );
}
