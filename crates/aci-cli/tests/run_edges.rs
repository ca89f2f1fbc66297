//! The `aci` binary at the edges of a run: zero limits refused, a run's
//! deadline held by the store across processes, and `aci recover`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use aci_contracts::{ErrorCode, InvocationStatus, RunId, ToolCallId};
use invocation_core::{
    Budgets, Clock, InvocationKey, InvocationStore, NewInvocation, RecordFields, RunTerms,
    ScopeFingerprint, SystemClock,
};
use serde_json::{Value, json};
use store_redis::{RedisConfig, RedisStore};
use support::command::{aci, stderr, stdout};
use support::files::{config_file, unique};

#[test]
fn zero_limits_are_one_line_configuration_errors() {
    for (body, needle) in [
        (
            "[limits]\nrecord_ttl_secs = 0\n",
            "[limits] record_ttl_secs must be positive",
        ),
        (
            "[limits]\ntimeout_secs = 0\n",
            "[limits] timeout_secs must be positive",
        ),
        (
            "[limits]\nmax_request_bytes = 0\n",
            "[limits] max_request_bytes must be positive",
        ),
        (
            "[limits]\nmax_agent_result_bytes = 0\n",
            "[limits] max_agent_result_bytes must be positive",
        ),
        (
            "[run]\ndeadline_secs = 0\n",
            "[run] deadline_secs must be positive",
        ),
    ] {
        let path = config_file("run-edges", body);
        let out = aci(&[
            "call",
            "lookup_knowledge",
            r#"{"query":"x"}"#,
            "--config",
            path.to_str().unwrap(),
        ]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{body}: {err}");
        assert!(out.stdout.is_empty(), "{body}");
        assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
        assert!(err.contains(needle), "{needle} not in {err}");
        std::fs::remove_file(path).unwrap();
    }
}

fn call(url: &str, config: &Path, run: &str, id: &str) -> Value {
    let out = aci(&[
        "call",
        "lookup_knowledge",
        r#"{"query":"connection pool timeout"}"#,
        "--store",
        url,
        "--config",
        config.to_str().unwrap(),
        "--run-id",
        run,
        "--tool-call-id",
        id,
    ]);
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", stderr(&out)))
}

#[test]
fn a_run_deadline_holds_across_processes() {
    let url = store_redis::testing::shared_url();
    let run = unique("run-deadline");
    let config = config_file("run-edges", "[run]\ndeadline_secs = 1\n");
    let first = call(&url, &config, &run, "c1");
    assert_eq!(first["control"]["status"], "READY", "{first}");
    std::thread::sleep(Duration::from_millis(1_300));
    // A new process: before, its own clock started the deadline again.
    let second = call(&url, &config, &run, "c2");
    assert_eq!(
        second["observation"]["error_code"], "RUN_DEADLINE_EXCEEDED",
        "{second}"
    );

    let out = aci(&["inspect", "--run", &run, "--store", &url]);
    let shown = stdout(&out);
    assert!(
        shown.starts_with(&format!("run {run}: started ")),
        "{shown}"
    );
    assert!(shown.contains(", owner -"), "{shown}");
    let out = aci(&["inspect", "--run", &run, "--store", &url, "--json"]);
    let line: Value = serde_json::from_str(stdout(&out).lines().next().unwrap()).unwrap();
    let run_state = &line["run"];
    let started = run_state["started_at"].as_str().unwrap();
    let deadline = run_state["deadline"].as_str().unwrap();
    assert!(deadline > started, "{run_state}");
    std::fs::remove_file(config).unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn recover_finalizes_what_a_killed_process_left_projecting() {
    let url = store_redis::testing::shared_url();
    let store = Arc::new(RedisStore::new(RedisConfig::single(url.clone())).unwrap());
    let run = RunId::new(unique("run-recover")).unwrap();
    // What a process killed mid-call leaves: a PROJECTING record.
    let scope = json!({"query": "stuck"});
    let key = InvocationKey::new(run.clone(), ToolCallId::new("stuck").unwrap());
    store
        .create(NewInvocation {
            key: key.clone(),
            tool_name: "lookup_knowledge".to_owned(),
            request_json: scope.to_string(),
            scope_json: invocation_core::fingerprint::canonical_json(&scope),
            scope_fingerprint: ScopeFingerprint::of("lookup_knowledge", &scope),
            created_at: SystemClock.now(),
            ttl: Duration::from_secs(600),
            budgets: Budgets::default(),
            claim_scope: false,
            run: RunTerms::default(),
            attempt: 1,
        })
        .await
        .unwrap();

    // The default threshold (longest tool timeout + margin) spares a young record.
    let out = aci(&["recover", "--run", run.as_str(), "--store", &url]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(out.stdout.is_empty());
    assert!(stderr(&out).contains("recovered 0 record(s)"));
    let record = store
        .get(&key, RecordFields::Metadata)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.status, InvocationStatus::Projecting);

    let out = aci(&[
        "recover",
        "--run",
        run.as_str(),
        "--store",
        &url,
        "--older-than",
        "0",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let line: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        line,
        json!({"tool_call_id": "stuck", "status": "ERROR", "error_code": "EXECUTION_ABANDONED"})
    );
    let record = store
        .get(&key, RecordFields::Metadata)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.status, InvocationStatus::Error);
    assert_eq!(record.error_code, Some(ErrorCode::ExecutionAbandoned));

    let out = aci(&["verify", "--run", run.as_str(), "--store", &url, "stuck"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stdout(&out).contains("EXECUTION_ABANDONED"));
    assert_config_error_recover_needs_a_shared_store();
}

fn assert_config_error_recover_needs_a_shared_store() {
    let out = aci(&["recover", "--run", "r1"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("recover reads records another process wrote"));
}
