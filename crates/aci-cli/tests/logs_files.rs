//! `aci call query_logs` over log files named by a `[logs]` configuration,
//! through the real binary.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use aci_contracts::Timestamp;
use serde_json::{Value, json};
use support::command::{aci, stderr, stdout};
use support::files::{temp_dir, write_in};

fn now_millis() -> i64 {
    i64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

fn line(minutes_ago: i64, level: &str, msg: &str) -> String {
    let ts = Timestamp::from_unix_millis(now_millis() - minutes_ago * 60_000);
    json!({"time": ts.to_string(), "severity": level, "message": msg}).to_string()
}

fn call(config: &Path, arguments: &str) -> (Option<i32>, Value, String) {
    let out = aci(&[
        "call",
        "query_logs",
        arguments,
        "--config",
        config.to_str().unwrap(),
    ]);
    // Not JSON (a configuration error): null.
    let value = serde_json::from_str(&stdout(&out)).unwrap_or(Value::Null);
    (out.status.code(), value, stderr(&out))
}

#[test]
fn query_logs_reads_the_configured_files() {
    let dir = temp_dir("logs");
    let logs = dir.join("logs");
    write_in(
        &logs,
        "app.log.1",
        &format!(
            "{}\n{}\n",
            line(
                30,
                "ERROR",
                "HikariPool-1 - Connection is not available, request timed out after 30000ms."
            ),
            line(29, "INFO", "GET /api/v1/orders 200"),
        ),
    );
    write_in(
        &logs,
        "app.log",
        &format!(
            "{}\nnot a json line\n{}",
            line(
                10,
                "ERROR",
                "HikariPool-1 - Connection is not available, request timed out after 15000ms."
            ),
            line(
                2,
                "WARN",
                "HikariPool-1 - Connection is not available, request timed out after 5000ms."
            ),
        ),
    );
    let config = write_in(
        &dir,
        "aci.toml",
        &format!(
            "[logs.topics.APPLICATION]\ndir = {:?}\nfiles = [\"app.log*\"]\nformat = \"json_lines\"\n",
            logs.to_str().unwrap()
        ),
    );

    let (code, v, stderr) = call(
        &config,
        r#"{"topic":"APPLICATION","query":"request timed out"}"#,
    );
    assert_eq!(code, Some(0), "{stderr}");
    let observation = &v["observation"];
    assert_eq!(observation["source_kind"], "FILE");
    assert_eq!(observation["evidence_status"], "EVIDENCE_FOUND");
    assert_eq!(observation["match_count"], 3);
    assert_eq!(observation["patterns"].as_array().unwrap().len(), 1);
    assert_eq!(observation["patterns"][0]["count"], 3);
    assert_eq!(observation["patterns"][0]["level"], "ERROR");
    // Paths, globs and formats never reach the model.
    let shown = observation.to_string();
    for hidden in [logs.to_str().unwrap(), "app.log", "json_lines"] {
        assert!(!shown.contains(hidden), "{hidden} in {shown}");
    }

    // Nothing in the window: NO_EVIDENCE, exit 0.
    let (code, v, _) = call(
        &config,
        r#"{"topic":"APPLICATION","query":"OutOfMemoryError"}"#,
    );
    assert_eq!(code, Some(0));
    assert_eq!(v["observation"]["evidence_status"], "NO_EVIDENCE");
    assert_eq!(v["observation"]["source_kind"], "FILE");

    // A topic without files: an error result, never NO_EVIDENCE.
    let (code, v, _) = call(&config, r#"{"topic":"SYSTEM_EVENTS","query":"oom"}"#);
    assert_eq!(code, Some(2));
    assert_eq!(v["observation"]["error_code"], "DATA_SOURCE_UNKNOWN", "{v}");

    // The files are gone: an error, not an empty result.
    std::fs::remove_file(logs.join("app.log")).unwrap();
    std::fs::remove_file(logs.join("app.log.1")).unwrap();
    let (code, v, _) = call(&config, r#"{"topic":"APPLICATION","query":"timeout"}"#);
    assert_eq!(code, Some(2));
    assert_eq!(v["observation"]["error_code"], "EXECUTION_FAILED", "{v}");
    assert!(!v.to_string().contains(logs.to_str().unwrap()));

    // Without [logs] topics the mock stays the source.
    let plain = write_in(&dir, "plain.toml", "[logs]\nmax_raw_events = 10\n");
    let (code, v, _) = call(&plain, r#"{"topic":"APPLICATION","query":"timeout"}"#);
    assert_eq!(code, Some(0));
    assert_eq!(v["observation"]["source_kind"], "MOCK");

    // A bad [logs] section is a one-line configuration error.
    let bad = write_in(
        &dir,
        "bad.toml",
        "[logs.topics.APPLICATION]\ndir = \"/tmp\"\nfiles = [\"../etc/*\"]\nformat = \"json_lines\"\n",
    );
    let (code, _, stderr) = call(&bad, r#"{"topic":"APPLICATION","query":"x"}"#);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("logs topic APPLICATION"), "{stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    let unknown = write_in(
        &dir,
        "unknown.toml",
        "[logs.topics.APPLICATION]\ndir = \"/tmp\"\nfiles = [\"a\"]\nformat = \"json_lines\"\npath = \"/etc\"\n",
    );
    let (code, _, stderr) = call(&unknown, r#"{"topic":"APPLICATION","query":"x"}"#);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("unknown field `path`"), "{stderr}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn credentials_in_log_lines_never_reach_the_model_and_are_counted() {
    let dir = temp_dir("logs-redaction");
    let logs = dir.join("logs");
    let acme = format!("acme_{}", "k3".repeat(16));
    write_in(
        &logs,
        "app.log",
        &format!(
            "{}\n{}\n{}\n",
            line(
                3,
                "ERROR",
                "calling https://svc:S3cr3tPa55@api.internal/v1 failed"
            ),
            line(2, "ERROR", &format!("calling with key {acme} failed")),
            line(1, "ERROR", "calling with password=guestpass failed"),
        ),
    );
    let rules = write_in(
        &dir,
        "rules.toml",
        "[[rules]]\nname = \"acme_token\"\nregex = '(?-u:\\b)(acme_[a-z0-9]{32})'\nkeywords = [\"acme_\"]\n",
    );
    let config = write_in(
        &dir,
        "aci.toml",
        &format!(
            "[logs.topics.APPLICATION]\ndir = {:?}\nfiles = [\"app.log*\"]\nformat = \"json_lines\"\n\
             [redaction]\nrules_file = {:?}\nallow = [\"guestpass\"]\n",
            logs.to_str().unwrap(),
            rules.to_str().unwrap()
        ),
    );
    let (code, v, stderr) = call(
        &config,
        r#"{"topic":"APPLICATION","query":"calling failed"}"#,
    );
    assert_eq!(code, Some(0), "{stderr}");
    let shown = v["observation"].to_string();
    for secret in ["S3cr3tPa55", acme.as_str()] {
        assert!(!shown.contains(secret), "{secret} in {shown}");
    }
    let messages: Vec<&str> = v["observation"]["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["message"].as_str().unwrap())
        .collect();
    assert_eq!(
        messages,
        [
            "calling https://svc:<redacted:url_password>@api.internal/v1 failed",
            "calling with key <redacted:acme_token> failed",
            "calling with password=guestpass failed",
        ]
    );
    assert_eq!(
        v["control"]["redactions"],
        json!({"acme_token": 1, "url_password": 1}),
        "{v}"
    );

    // A rule that does not compile: a one-line error naming key and rule.
    write_in(
        &dir,
        "rules.toml",
        "[[rules]]\nname = \"broken\"\nregex = \"(\"\n",
    );
    let (code, _, stderr) = call(&config, r#"{"topic":"APPLICATION","query":"calling"}"#);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("[redaction] rules_file: redaction rule `broken`: invalid regex"),
        "{stderr}"
    );
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
}
