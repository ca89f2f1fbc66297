//! `aci call query_logs` over log files named by a `[logs]` configuration,
//! through the real binary.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{SystemTime, UNIX_EPOCH};

use aci_contracts::Timestamp;
use serde_json::{Value, json};

fn aci(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_aci"))
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .expect("the aci binary runs")
}

fn now_millis() -> i64 {
    i64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

fn temp_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "aci-cli-logs-{}-{}",
        std::process::id(),
        now_millis()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
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
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    let value = serde_json::from_str(&stdout).unwrap_or(Value::Null);
    (out.status.code(), value, stderr)
}

#[test]
fn query_logs_reads_the_configured_files() {
    let dir = temp_dir();
    let logs = dir.join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    std::fs::write(
        logs.join("app.log.1"),
        format!(
            "{}\n{}\n",
            line(
                30,
                "ERROR",
                "HikariPool-1 - Connection is not available, request timed out after 30000ms."
            ),
            line(29, "INFO", "GET /api/v1/orders 200"),
        ),
    )
    .unwrap();
    std::fs::write(
        logs.join("app.log"),
        format!(
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
    )
    .unwrap();
    let config = dir.join("aci.toml");
    std::fs::write(
        &config,
        format!(
            "[logs.topics.APPLICATION]\ndir = {:?}\nfiles = [\"app.log*\"]\nformat = \"json_lines\"\n",
            logs.to_str().unwrap()
        ),
    )
    .unwrap();

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
    let plain = dir.join("plain.toml");
    std::fs::write(&plain, "[logs]\nmax_raw_events = 10\n").unwrap();
    let (code, v, _) = call(&plain, r#"{"topic":"APPLICATION","query":"timeout"}"#);
    assert_eq!(code, Some(0));
    assert_eq!(v["observation"]["source_kind"], "MOCK");

    // A bad [logs] section is a one-line configuration error.
    let bad = dir.join("bad.toml");
    std::fs::write(
        &bad,
        "[logs.topics.APPLICATION]\ndir = \"/tmp\"\nfiles = [\"../etc/*\"]\nformat = \"json_lines\"\n",
    )
    .unwrap();
    let (code, _, stderr) = call(&bad, r#"{"topic":"APPLICATION","query":"x"}"#);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("logs topic APPLICATION"), "{stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    let unknown = dir.join("unknown.toml");
    std::fs::write(
        &unknown,
        "[logs.topics.APPLICATION]\ndir = \"/tmp\"\nfiles = [\"a\"]\nformat = \"json_lines\"\npath = \"/etc\"\n",
    )
    .unwrap();
    let (code, _, stderr) = call(&unknown, r#"{"topic":"APPLICATION","query":"x"}"#);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("unknown field `path`"), "{stderr}");
    std::fs::remove_dir_all(&dir).unwrap();
}
