//! No credential reaches the model through `lookup_knowledge`: every
//! built-in rule's shape planted in a runbook directory, indexed and looked
//! up through the boundary over a real Redis store. Excerpts are exact
//! document text except for the markers; titles and breadcrumbs are
//! redacted too; the control view counts what was planted; the record keeps
//! the raw passages whole.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::Arc;

use aci_contracts::RunId;
use invocation_core::redact::marker;
use invocation_core::testing::secrets::{
    ALNUM, examples, fake, json_escaped, ready_observation_without, stored_raw,
};
use invocation_core::{BoundaryOutcome, RunContext, ToolBoundary, ToolEnvelope};
use projectors_rag::{MarkdownKnowledgeBase, lookup_knowledge_tool};
use serde_json::{Value, json};
use store_redis::testing::{shared_store, unique_id};

/// A word only runbook `i` holds (letters: the analyzers keep it whole).
fn tag(i: usize) -> String {
    let letter = |n: usize| char::from(b'a' + u8::try_from(n % 26).unwrap());
    format!("runbookprobe{}{}", letter(i / 26), letter(i))
}

fn boundary(dir: &std::path::Path) -> ToolBoundary {
    let base = MarkdownKnowledgeBase::from_dir(dir, |_| {}).unwrap();
    ToolBoundary::builder(Arc::new(shared_store()))
        .tool(lookup_knowledge_tool(base))
        .build()
        .unwrap()
}

async fn call(boundary: &ToolBoundary, run: &RunContext, id: &str, query: &str) -> BoundaryOutcome {
    let args = json!({"query": query}).to_string();
    let envelope = ToolEnvelope::new(id, run.run_id.as_str(), "lookup_knowledge", args);
    boundary.invoke(run, envelope).await
}

#[tokio::test]
async fn every_planted_secret_in_a_runbook_is_redacted_in_the_excerpt() {
    let dir = tempfile::tempdir().unwrap();
    let examples = examples();
    let mut documents = Vec::new();
    for (i, e) in examples.iter().enumerate() {
        let tag = tag(i);
        let document = format!(
            "# Runbook {tag}\n\nWhen {tag} fires, run this:\n\n```text\n{}\n```\n",
            e.text
        );
        std::fs::write(dir.path().join(format!("{tag}.md")), &document).unwrap();
        documents.push(document);
    }
    let boundary = boundary(dir.path());
    let run = RunContext::new(
        RunId::new(unique_id("run-redact-rag")).unwrap(),
        invocation_core::CallPolicy::AUTHORIZED_READ_ONLY,
    );

    for (i, e) in examples.iter().enumerate() {
        let id = format!("call_{i}");
        let outcome = call(&boundary, &run, &id, &tag(i)).await;
        let (observation, text) = ready_observation_without(&outcome, e);
        // The analyzers' n-grams may bring other runbooks along: each holds
        // one planted secret, and each is counted.
        let evidence = observation["evidence"].as_array().unwrap();
        let mut planted = BTreeMap::new();
        for item in evidence {
            let j = (0..examples.len())
                .find(|&j| item["document_id"] == tag(j))
                .unwrap();
            let other = &examples[j];
            assert!(
                !text.contains(&json_escaped(&other.secret)),
                "{}: {text}",
                other.rule
            );
            let excerpt = item["excerpt"].as_str().unwrap();
            let expected = other.text.replacen(&other.secret, &marker(other.rule), 1);
            assert!(excerpt.contains(&expected), "{}: {excerpt}", other.rule);
            // Exact document text except for the marker.
            let restored = excerpt.replacen(&marker(other.rule), &other.secret, 1);
            assert!(
                documents[j].contains(&restored),
                "{}: {excerpt}",
                other.rule
            );
            *planted.entry(other.rule.to_owned()).or_insert(0) += 1;
        }
        assert!(
            evidence.iter().any(|item| item["document_id"] == tag(i)),
            "{}: {text}",
            e.rule
        );
        assert_eq!(observation["truncated"], false, "{}", e.rule);
        assert_eq!(outcome.control.redactions, planted, "{}", e.rule);
        let raw = stored_raw(&boundary, &run, &id).await;
        assert!(
            raw.contains(&json_escaped(&e.secret)),
            "{}: raw is whole",
            e.rule
        );
    }
}

#[tokio::test]
async fn titles_and_breadcrumbs_are_redacted_too() {
    let dir = tempfile::tempdir().unwrap();
    let token = format!("ghp_{}", fake(ALNUM, 36, 11));
    std::fs::write(
        dir.path().join("deploy.md"),
        format!(
            "# Deploy with GITHUB_TOKEN={token}\n\n## Rotate {token}\n\nThe zebrafish deploy rotates the token weekly.\n"
        ),
    )
    .unwrap();
    let boundary = boundary(dir.path());
    let run = RunContext::new(
        RunId::new(unique_id("run-redact-rag")).unwrap(),
        invocation_core::CallPolicy::AUTHORIZED_READ_ONLY,
    );
    let outcome = call(&boundary, &run, "call_1", "zebrafish deploy").await;
    let observation = outcome.observation.to_json();
    let text = observation.to_string();
    assert!(!text.contains(&token), "{text}");
    let evidence = &observation["evidence"][0];
    assert_eq!(
        evidence["title"],
        Value::from("Deploy with GITHUB_TOKEN=<redacted:github_token>")
    );
    assert!(
        evidence["breadcrumb"]
            .as_str()
            .unwrap()
            .contains("Rotate <redacted:github_token>"),
        "{evidence}"
    );
    assert!(
        outcome.control.redactions["github_token"] >= 2,
        "{:?}",
        outcome.control
    );
    assert!(stored_raw(&boundary, &run, "call_1").await.contains(&token));
}
