//! The `aci` binary end to end: golden outputs, exit statuses, configuration
//! errors, and a run on a real Redis inspected and verified by later commands.
//!
//! Regenerate the golden files with `UPDATE_GOLDEN=1 cargo test -p aci-cli --test cli`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::process::Output;

use serde_json::Value;
use support::command::{aci, json, json_lines, stderr, stdout};
use support::contract::frozen_tools;
use support::files::{config_file, temp_dir, temp_file, unique, write_in};

fn golden(name: &str, actual: &str) {
    testkit::golden!().check_text(name, actual);
}

#[test]
fn tools_golden_in_every_format() {
    for format in ["mcp", "openai", "anthropic"] {
        let out = aci(&["tools", "--format", format]);
        assert!(out.status.success(), "{}", stderr(&out));
        golden(&format!("tools.{format}.json"), &stdout(&out));
    }
    assert_eq!(
        json(&aci(&["tools"])),
        frozen_tools(),
        "the default format is the frozen MCP one"
    );
}

#[test]
fn call_lookup_knowledge_golden() {
    let out = aci(&[
        "call",
        "lookup_knowledge",
        r#"{"query":"connection pool exhausted"}"#,
        "--run-id",
        "run-golden",
        "--tool-call-id",
        "call-golden-1",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    golden("call.lookup_knowledge.json", &stdout(&out));
    let v = json(&out);
    assert_eq!(v["observation"]["evidence_status"], "EVIDENCE_FOUND");
    assert!(v["observation"].get("returned_count").is_none());
    assert!(v["control"]["returned_count"].as_u64().unwrap() >= 1);
    let text = stdout(&out).to_lowercase();
    for forbidden in ["score", "trace", "metadata"] {
        assert!(!text.contains(forbidden), "{forbidden} in {text}");
    }
    // Which retrieval legs ran is the harness's to see, never the model's.
    assert_eq!(v["control"]["retrieval_legs"], serde_json::json!(["bm25"]));
    let observation = v["observation"].to_string().to_lowercase();
    for forbidden in ["bm25", "retrieval", "legs"] {
        assert!(
            !observation.contains(forbidden),
            "{forbidden} in {observation}"
        );
    }
}

#[test]
fn call_query_logs_finds_the_timeouts() {
    let out = aci(&[
        "call",
        "query_logs",
        r#"{"topic":"APPLICATION","query":"timeout"}"#,
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v = json(&out);
    let observation = &v["observation"];
    assert_eq!(observation["evidence_status"], "EVIDENCE_FOUND");
    assert_eq!(observation["source_kind"], "MOCK");
    assert_eq!(observation["scope"]["lookback_minutes"], 60);
    assert!(observation["match_count"].as_u64().unwrap() > 0);
    assert!(
        observation["patterns"][0]["pattern"]
            .as_str()
            .unwrap()
            .contains("timeout")
    );
    // The command played the framework and made the ids; the control view shows them.
    let control = &v["control"];
    assert!(
        control["tool_call_id"]
            .as_str()
            .unwrap()
            .starts_with("call-")
    );
    assert!(control["run_id"].as_str().unwrap().starts_with("run-"));
    assert_eq!(observation["tool_call_id"], control["tool_call_id"]);
    assert_eq!(control["scope_fingerprint"].as_str().unwrap().len(), 64);
}

#[test]
fn error_results_exit_2_and_are_still_printed() {
    for (args, code) in [
        (
            vec![
                "call",
                "query_mysql",
                r#"{"data_source":"orders","sql":"SELECT 1"}"#,
            ],
            "DATA_SOURCE_UNKNOWN",
        ),
        (
            vec![
                "call",
                "query_logs",
                r#"{"topic":"APPLICATION","query":"x"}"#,
                "--tool-call-id",
                "bad id",
            ],
            "INVALID_TOOL_CALL_ID",
        ),
        (vec!["call", "delete_everything", "{}"], "UNKNOWN_TOOL"),
        (
            vec![
                "call",
                "query_logs",
                r#"{"topic":"APPLICATION","query":"x","lookback_minutes":0}"#,
            ],
            "INVALID_INPUT",
        ),
        (vec!["call", "lookup_knowledge", "[\"q\"]"], "INVALID_INPUT"),
    ] {
        let out = aci(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        let v = json(&out);
        assert_eq!(v["observation"]["evidence_status"], "ERROR", "{args:?}");
        assert_eq!(v["observation"]["error_code"], code, "{args:?}");
        assert_eq!(v["control"]["status"], "ERROR");
    }
    let out = aci(&[
        "call",
        "query_logs",
        r#"{"topic":"APPLICATION","query":"x"}"#,
        "--tool-call-id",
        "bad id",
    ]);
    assert!(
        json(&out)["observation"].get("tool_call_id").is_none(),
        "never a substitute id"
    );
}

#[test]
fn no_evidence_is_exit_0() {
    let out = aci(&[
        "call",
        "lookup_knowledge",
        r#"{"query":"quarterly marketing budget spreadsheet"}"#,
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(json(&out)["observation"]["evidence_status"], "NO_EVIDENCE");
}

fn assert_config_error(out: &Output, needle: &str) {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(stdout(out).is_empty(), "nothing on stdout: {}", stdout(out));
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    assert!(err.starts_with("aci: "), "{err}");
    assert!(err.contains(needle), "{needle} not in {err}");
    for forbidden in ["panicked", "backtrace", "s3cr3t"] {
        assert!(
            !err.to_lowercase().contains(forbidden),
            "{forbidden} in {err}"
        );
    }
}

#[test]
fn configuration_errors_are_one_line_and_exit_1() {
    let dir = temp_dir("config");
    let write = |name: &str, text: &str| write_in(&dir, name, text).to_string_lossy().into_owned();
    let unknown_key = write(
        "unknown.toml",
        "store = \"memory\"\n[limits]\nmax_bytes = 1\n",
    );
    let missing_dir = write(
        "missing.toml",
        "[knowledge]\ndir = \"/nonexistent/aci/runbooks\"\n",
    );
    let bad_url = write(
        "url.toml",
        "store = \"http://user:s3cr3t@example.invalid\"\n",
    );
    let not_toml = write("broken.toml", "store = [\n");
    let call = |extra: &[&str]| {
        let mut args = vec!["call", "lookup_knowledge", r#"{"query":"x"}"#];
        args.extend_from_slice(extra);
        aci(&args)
    };
    assert_config_error(
        &call(&["--config", &unknown_key]),
        "unknown field `max_bytes`",
    );
    assert_config_error(&call(&["--config", &missing_dir]), "knowledge directory");
    assert_config_error(&call(&["--config", &bad_url]), "store must be");
    assert_config_error(&call(&["--config", &not_toml]), "broken.toml");
    assert_config_error(
        &call(&["--config", "/nonexistent/aci.toml"]),
        "cannot read config file",
    );
    assert_config_error(
        &call(&["--store", "redis://:s3cr3t@127.0.0.1:1/0"]),
        "redis store",
    );
    assert_config_error(&call(&["--run-id", "not a run"]), "invalid run id");
    assert_config_error(
        &aci(&["inspect", "--run", "r1"]),
        "inspect reads records another process wrote",
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn usage_errors_exit_1_and_help_exits_0() {
    for args in [
        vec![],
        vec!["frobnicate"],
        vec!["call", "query_logs"],
        vec!["tools", "--format", "xml"],
        vec!["inspect", "--run", "r", "--raw"],
    ] {
        let out = aci(&args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert!(!stderr(&out).contains("panicked"));
    }
    for args in [vec!["--help"], vec!["call", "--help"], vec!["--version"]] {
        let out = aci(&args);
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        assert!(!stdout(&out).is_empty());
    }
    let help = stdout(&aci(&["call", "--help"]));
    assert!(
        help.contains("Exit status: 0 when the call is READY"),
        "{help}"
    );
}

#[test]
fn a_knowledge_directory_is_indexed_with_progress_on_stderr() {
    let dir = temp_dir("kb");
    for i in 0..25 {
        write_in(
            &dir,
            &format!("runbook-{i:02}.md"),
            &format!("# Runbook {i}\n\n## Symptoms\n\nThe flux capacitor {i} overheats.\n"),
        );
    }
    let config = config_file(
        "kb",
        &format!("[knowledge]\ndir = {:?}\n", dir.to_string_lossy()),
    );
    let out = aci(&[
        "call",
        "lookup_knowledge",
        r#"{"query":"flux capacitor overheats"}"#,
        "--config",
        config.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("indexing 25 knowledge files"), "{err}");
    assert!(err.contains("read 25/25"), "{err}");
    let v = json(&out);
    assert_eq!(v["observation"]["evidence_status"], "EVIDENCE_FOUND");
    assert_eq!(
        v["observation"]["evidence"][0]["breadcrumb"]
            .as_str()
            .unwrap()
            .split(" > ")
            .count(),
        2
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_run_on_redis_is_inspected_and_verified_by_later_commands() {
    let url = store_redis::testing::shared_url();
    let run = unique("run-cli");
    let call = |tool: &str, args: &str, id: &str| {
        aci(&[
            "call",
            tool,
            args,
            "--store",
            &url,
            "--run-id",
            &run,
            "--tool-call-id",
            id,
        ])
    };
    assert_eq!(
        call(
            "lookup_knowledge",
            r#"{"query":"disk pressure eviction"}"#,
            "c-ready"
        )
        .status
        .code(),
        Some(0)
    );
    assert_eq!(
        call(
            "query_logs",
            r#"{"topic":"SYSTEM_EVENTS","query":"no such event anywhere"}"#,
            "c-empty"
        )
        .status
        .code(),
        Some(0)
    );
    assert_eq!(
        call(
            "query_mysql",
            r#"{"data_source":"orders","sql":"SELECT 1"}"#,
            "c-error"
        )
        .status
        .code(),
        Some(2)
    );
    let duplicate = call("lookup_knowledge", r#"{"query":"again"}"#, "c-ready");
    assert_eq!(duplicate.status.code(), Some(2));
    assert_eq!(
        json(&duplicate)["observation"]["error_code"],
        "DUPLICATE_TOOL_CALL"
    );

    let table = aci(&["inspect", "--run", &run, "--store", &url]);
    assert_eq!(table.status.code(), Some(0), "{}", stderr(&table));
    let text = stdout(&table);
    // The run's state (held in the store) comes first, then the table.
    let (run_line, text) = text.split_once('\n').unwrap();
    assert!(
        run_line.starts_with(&format!("run {run}: started ")),
        "{run_line}"
    );
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("TIME"), "{text}");
    assert_eq!(lines.len(), 4, "{text}");
    assert!(
        lines[1].contains("lookup_knowledge")
            && lines[1].contains("c-ready")
            && lines[1].contains("EVIDENCE_FOUND")
    );
    assert!(lines[2].contains("c-empty") && lines[2].contains("NO_EVIDENCE"));
    assert!(lines[3].contains("c-error") && lines[3].contains("DATA_SOURCE_UNKNOWN"));

    let entries = json_lines(&aci(&["inspect", "--run", &run, "--store", &url, "--json"]));
    assert_eq!(entries.len(), 3);
    assert_eq!(entries[0]["tool_call_id"], "c-ready");
    assert_eq!(entries[0]["request"]["query"], "disk pressure eviction");
    assert!(
        entries[0]["agent_result"]["returned_count"]
            .as_u64()
            .unwrap()
            >= 1
    );
    assert!(
        entries.iter().all(|e| e.get("raw").is_none()),
        "raw only with --raw"
    );
    // Where each call's time went; an ERROR says whether to retry.
    for entry in &entries {
        let timings = &entry["timings_us"];
        assert!(timings["preflight"].is_u64(), "{entry}");
        assert!(timings["execution"].is_u64(), "{entry}");
    }
    assert_eq!(entries[2]["retryable"], false, "{}", entries[2]);
    let with_raw = aci(&["inspect", "--run", &run, "--store", &url, "--raw"]);
    let first: Value = serde_json::from_str(stdout(&with_raw).lines().next().unwrap()).unwrap();
    assert!(first["raw"].is_object(), "{first}");

    let verify = aci(&[
        "verify", "--run", &run, "--store", &url, "c-ready", "c-empty", "c-error", "c-none",
    ]);
    assert_eq!(verify.status.code(), Some(2), "not every citation stands");
    let verdicts = json_lines(&verify);
    assert_eq!(verdicts[0]["verdict"]["verdict"], "EVIDENCE");
    assert_eq!(verdicts[1]["verdict"]["verdict"], "NEGATIVE_OBSERVATION");
    assert_eq!(verdicts[1]["verdict"]["scope"]["topic"], "SYSTEM_EVENTS");
    assert_eq!(verdicts[2]["verdict"]["reason"], "FAILED");
    assert_eq!(verdicts[2]["verdict"]["error_code"], "DATA_SOURCE_UNKNOWN");
    assert_eq!(verdicts[3]["verdict"]["reason"], "UNKNOWN_OR_EXPIRED");
    let good = aci(&[
        "verify", "--run", &run, "--store", &url, "c-ready", "c-empty",
    ]);
    assert_eq!(good.status.code(), Some(0), "{}", stdout(&good));
}

#[test]
fn a_tls_redis_store_is_used_with_the_configured_ca() {
    let server = store_redis::testing::shared_tls_server();
    let ca = store_redis::testing::TestPki::shared()
        .unwrap()
        .ca_cert_pem()
        .to_owned();
    let ca_file = temp_file("ca.pem", &ca);
    let config = config_file(
        "tls",
        &format!("[redis]\ntls_ca_file = {:?}\n", ca_file.to_string_lossy()),
    );
    let url = server.url();
    assert!(url.starts_with("rediss://"), "{url}");
    let run = unique("run-tls");
    let out = aci(&[
        "call",
        "lookup_knowledge",
        r#"{"query":"dns resolution failure"}"#,
        "--store",
        &url,
        "--config",
        config.to_str().unwrap(),
        "--run-id",
        &run,
        "--tool-call-id",
        "c-tls",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let verify = aci(&[
        "verify",
        "--run",
        &run,
        "--store",
        &url,
        "--config",
        config.to_str().unwrap(),
        "c-tls",
    ]);
    assert_eq!(verify.status.code(), Some(0), "{}", stderr(&verify));

    // Without the CA, the server's certificate is not trusted: a configuration
    // error at start, naming neither the URL nor the certificate.
    let untrusted = aci(&[
        "call",
        "lookup_knowledge",
        r#"{"query":"x"}"#,
        "--store",
        &url,
    ]);
    assert_config_error(&untrusted, "redis store");
    assert!(
        !stderr(&untrusted).contains("127.0.0.1"),
        "{}",
        stderr(&untrusted)
    );
}

#[test]
fn call_query_mysql_reads_a_data_source_of_the_config_file() {
    use projectors_mysql::testing::TestDatabase;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let db = runtime.block_on(TestDatabase::create(&[
        "CREATE TABLE orders (id INT PRIMARY KEY, state VARCHAR(16) NOT NULL, total DECIMAL(10,2) NOT NULL)",
        "INSERT INTO orders VALUES (1, 'PAID', 10.50), (2, 'PAID', 20.00), (3, 'PAID', 0.99), (4, 'OPEN', 5.00)",
    ]));
    let outcome = std::panic::catch_unwind(|| {
        let config = config_file(
            "mysql",
            &format!(
                "[mysql]\nconnect_timeout_ms = 5000\n\
                 [mysql.data_sources.shop]\nurl = \"{}\"\nmax_rows = 2\ntimeout_ms = 5000\n",
                db.reader_url()
            ),
        );
        let config = config.to_str().unwrap();
        let call = |arguments: &str| aci(&["call", "query_mysql", arguments, "--config", config]);

        // A read with a bound param; the cap of the config file applies.
        let out = call(
            r#"{"data_source":"shop","sql":"SELECT id, total FROM orders WHERE state = ? ORDER BY id","params":["PAID"]}"#,
        );
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let v = json(&out);
        assert_eq!(v["observation"]["evidence_status"], "EVIDENCE_FOUND");
        assert_eq!(
            v["observation"]["columns"],
            serde_json::json!([
                {"name": "id", "type": "INTEGER"},
                {"name": "total", "type": "DECIMAL"}
            ])
        );
        assert_eq!(
            v["observation"]["rows"],
            serde_json::json!([[1, "10.50"], [2, "20.00"]])
        );
        assert_eq!(v["observation"]["truncated"], true);
        assert_eq!(v["control"]["status"], "READY");
        assert_eq!(v["control"]["returned_count"], 2);

        // Refused, unknown and failing calls exit 2 with only their code.
        for (arguments, code) in [
            (
                r#"{"data_source":"shop","sql":"DELETE FROM orders"}"#,
                "QUERY_REJECTED",
            ),
            (
                r#"{"data_source":"shop","sql":"SELECT 1; DROP TABLE orders"}"#,
                "QUERY_REJECTED",
            ),
            (
                r#"{"data_source":"billing","sql":"SELECT 1"}"#,
                "DATA_SOURCE_UNKNOWN",
            ),
            (
                r#"{"data_source":"shop","sql":"SELECT * FROM missing_table"}"#,
                "EXECUTION_FAILED",
            ),
        ] {
            let out = call(arguments);
            assert_eq!(out.status.code(), Some(2), "{arguments}: {}", stderr(&out));
            let v = json(&out);
            assert_eq!(v["observation"]["error_code"], code, "{arguments}");
            // Nothing printed names the account or the database; the agent's
            // view and the log do not repeat the statement either (the
            // harness's control view shows the request's scope).
            let printed = format!("{}{}", stdout(&out), stderr(&out));
            for secret in [db.reader_password(), db.reader(), db.database()] {
                assert!(
                    !printed.contains(secret),
                    "{secret} printed for {arguments}"
                );
            }
            let agent_and_log = format!("{}{}", v["observation"], stderr(&out));
            assert!(!agent_and_log.contains("missing_table"), "{agent_and_log}");
            assert!(!agent_and_log.contains("DROP TABLE"), "{agent_and_log}");
        }
        std::fs::remove_file(config).unwrap();
    });
    let checksums = runtime.block_on(db.checksums());
    assert_eq!(checksums.len(), 1);
    runtime.block_on(db.drop());
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}
