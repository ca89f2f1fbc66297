//! No payload, key or URL in logs at any `RUST_LOG` level: `aci serve` at
//! `RUST_LOG=trace`, with a sentinel planted in the arguments and in the
//! results, on a real Redis store.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::json;
use support::files::{config_file, temp_dir, unique, unique_suffix, write_in};
use support::stdio::{RawSession, run_args};

#[tokio::test(flavor = "multi_thread")]
async fn trace_logs_carry_no_payload_and_no_url() {
    let sentinel = format!("zqxsentinel{}", unique_suffix());
    let dir = temp_dir("logs-kb");
    write_in(
        &dir,
        "sentinel.md",
        &format!(
            "# Sentinel runbook\n\nWhen the {sentinel} gauge spikes, restart the {sentinel} worker.\n"
        ),
    );
    let config = config_file(
        "logs",
        &format!("[knowledge]\ndir = \"{}\"\n", dir.display()),
    );
    let store = store_redis::testing::shared_url();
    let run = unique("run-logs");
    let mut session = RawSession::start_logging(&run_args(&config, &store, &run), "trace").await;
    // The sentinel in the arguments and, through the knowledge base, in the result.
    let found = session
        .call(
            &json!(1),
            "lookup_knowledge",
            json!({"query": format!("{sentinel} gauge spikes")}),
            None,
        )
        .await;
    assert_eq!(found["evidence_status"], "EVIDENCE_FOUND", "{found}");
    assert!(
        found.to_string().contains(&sentinel),
        "the result carries the sentinel: {found}"
    );
    // In an error result's request too.
    let refused = session
        .call(
            &json!(2),
            "lookup_knowledge",
            json!({"query": sentinel, "extra": sentinel}),
            None,
        )
        .await;
    assert_eq!(refused["error_code"], "INVALID_INPUT", "{refused}");
    let (status, _, stderr) = session.close().await;
    assert!(status.success(), "{status}");
    std::fs::remove_dir_all(&dir).unwrap();

    // Logging did happen at trace, and none of it names the payload or the store.
    assert!(
        stderr.contains("TRACE") || stderr.contains("DEBUG"),
        "{stderr}"
    );
    assert!(stderr.contains("tools/call"), "{stderr}");
    assert!(
        !stderr.contains(&sentinel),
        "a payload reached the logs:\n{stderr}"
    );
    assert!(
        !stderr.contains("redis://"),
        "the store URL reached the logs:\n{stderr}"
    );
}
