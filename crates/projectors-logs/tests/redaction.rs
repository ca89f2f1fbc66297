//! No credential reaches the model through `query_logs`: every built-in
//! rule's shape planted in a real log file, queried through the boundary
//! over a real Redis store. The observation carries the marker and the words
//! around it, never the secret; the control view counts what was planted;
//! the record keeps the raw events whole.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use aci_contracts::{LogTopic, RunId, Timestamp, ToolCallId};
use common::NOW_MILLIS;
use invocation_core::redact::marker;
use invocation_core::testing::secrets::{
    Example, examples, json_escaped, ready_observation_without,
};
use invocation_core::{
    Clock, InvocationKey, ManualClock, ModelObservation, RecordFields, RunContext, ToolBoundary,
    ToolEnvelope,
};
use projectors_logs::{FileLogSource, LogFormat, LogsConfig, TopicConfig, query_logs_tool};
use serde_json::{Value, json};
use store_redis::testing::{shared_store, unique_id};

fn line(minutes_ago: i64, msg: &str) -> String {
    let ts = Timestamp::from_unix_millis(NOW_MILLIS - minutes_ago * 60_000);
    json!({"ts": ts.to_string(), "level": "ERROR", "msg": msg}).to_string()
}

/// The message planted for example `i`: a word to find it by, then the text
/// on a line of its own (some forms, `key: value`, must start a line).
fn planted(i: usize, e: &Example) -> String {
    format!("planted{i:03}\n{}", e.text)
}

fn boundary(dir: &std::path::Path) -> ToolBoundary {
    let source = FileLogSource::new(&LogsConfig {
        topics: [(
            LogTopic::Application,
            TopicConfig {
                dir: dir.to_owned(),
                files: vec!["app.log".to_owned()],
                format: LogFormat::JsonLines,
                time_key: None,
                level_key: None,
                message_key: None,
                pattern: None,
                timestamp: None,
                time_zone: None,
            },
        )]
        .into_iter()
        .collect(),
        max_raw_events: None,
    })
    .unwrap();
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::at_default_start());
    ToolBoundary::builder(Arc::new(shared_store()))
        .clock(clock)
        .tool(query_logs_tool(source))
        .build()
        .unwrap()
}

#[tokio::test]
async fn every_planted_secret_is_redacted_counted_and_kept_raw() {
    let dir = tempfile::tempdir().unwrap();
    let examples = examples();
    let lines: Vec<String> = examples
        .iter()
        .enumerate()
        .map(|(i, e)| line(1, &planted(i, e)))
        .collect();
    std::fs::write(dir.path().join("app.log"), lines.join("\n") + "\n").unwrap();
    let boundary = boundary(dir.path());
    let run = RunContext::new(
        RunId::new(unique_id("run-redact-logs")).unwrap(),
        invocation_core::CallPolicy::AUTHORIZED_READ_ONLY,
    );

    for (i, e) in examples.iter().enumerate() {
        let id = format!("call_{i}");
        let args = json!({"topic": "APPLICATION", "query": format!("planted{i:03}"), "lookback_minutes": 60});
        let envelope = ToolEnvelope::new(&id, run.run_id.as_str(), "query_logs", args.to_string());
        let outcome = boundary.invoke(&run, envelope).await;
        let (observation, _) = ready_observation_without(&outcome, e);
        assert!(matches!(outcome.observation, ModelObservation::Ready(_)));
        let secret_json = json_escaped(&e.secret);
        let secret_json = secret_json.as_str();
        let expected = planted(i, e).replacen(&e.secret, &marker(e.rule), 1);
        let events = observation["events"].as_array().unwrap();
        assert_eq!(events.len(), 1, "{}", e.rule);
        assert_eq!(events[0]["message"], Value::from(expected), "{}", e.rule);
        assert_eq!(observation["truncated"], false, "{}", e.rule);
        let patterns = observation["patterns"].as_array().unwrap();
        assert_eq!(patterns.len(), 1);
        assert!(
            !patterns[0]["pattern"]
                .as_str()
                .unwrap()
                .contains(secret_json),
            "{}: the pattern shows the secret",
            e.rule
        );
        assert_eq!(
            outcome.control.redactions,
            BTreeMap::from([(e.rule.to_owned(), 1)]),
            "{}",
            e.rule
        );

        let key = InvocationKey::new(run.run_id.clone(), ToolCallId::new(id).unwrap());
        let record = boundary
            .store()
            .get(&key, RecordFields::All)
            .await
            .unwrap()
            .unwrap();
        assert!(
            record.raw_json.unwrap().contains(secret_json),
            "{}: the raw response is whole",
            e.rule
        );
        assert_eq!(record.redactions.get(e.rule), 1);
        assert!(!record.agent_result_json.unwrap().contains(secret_json));
    }
}

#[tokio::test]
async fn patterns_never_show_what_events_redact_and_counts_add_up() {
    let dir = tempfile::tempdir().unwrap();
    // Two lines of one shape whose passwords differ only in letters (the
    // masks keep words without digits): without redaction first, the
    // pattern would carry a password.
    let lines = [
        line(3, "login failed for app: password=hunterXyz retrying"),
        line(2, "login failed for app: password=swordfishQ retrying"),
        line(1, "login failed for app: password=swordfishQ retrying"),
    ];
    std::fs::write(dir.path().join("app.log"), lines.join("\n") + "\n").unwrap();
    let boundary = boundary(dir.path());
    let run = RunContext::new(
        RunId::new(unique_id("run-redact-logs")).unwrap(),
        invocation_core::CallPolicy::AUTHORIZED_READ_ONLY,
    );
    let args = json!({"topic": "APPLICATION", "query": "login failed", "lookback_minutes": 60});
    let envelope = ToolEnvelope::new(
        "call_1",
        run.run_id.as_str(),
        "query_logs",
        args.to_string(),
    );
    let outcome = boundary.invoke(&run, envelope).await;
    let observation = outcome.observation.to_json();
    let text = observation.to_string();
    assert!(
        !text.contains("hunterXyz") && !text.contains("swordfishQ"),
        "{text}"
    );
    assert_eq!(
        observation["patterns"],
        json!([{
            "pattern": "login failed for app: password=<redacted:kv_secret> retrying",
            "level": "ERROR",
            "count": 3,
            "first_seen": Timestamp::from_unix_millis(NOW_MILLIS - 3 * 60_000).to_string(),
            "last_seen": Timestamp::from_unix_millis(NOW_MILLIS - 60_000).to_string(),
        }])
    );
    assert_eq!(
        outcome.control.redactions,
        BTreeMap::from([("kv_secret".to_owned(), 3)])
    );
}
