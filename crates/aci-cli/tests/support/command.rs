//! One-shot `aci` runs: the binary with arguments, run to its end, blocking
//! (for plain `#[test]`s) or on the test's runtime, and what it printed.
//!
//! Both remove `RUST_LOG`: a run logs at the binary's default (`warn`)
//! whatever the environment of `cargo test` says, so assertions on stderr do
//! not depend on it.

use std::path::Path;
use std::process::Output;

use serde_json::Value;

use super::HANG_GUARD;

/// The `aci` command with `args`, not started yet (for children the test
/// keeps running, such as `aci serve`).
pub(crate) fn aci_command(args: &[&str]) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_aci"));
    command.args(args);
    command
}

/// Runs `aci args` to its end, blocking the thread.
pub(crate) fn aci(args: &[&str]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_aci"))
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .expect("the aci binary runs")
}

/// Runs `aci args` to its end on the test's runtime, bounded by the hang
/// guard (a server that should have refused to start is killed).
pub(crate) async fn aci_async(args: &[&str]) -> Output {
    let mut command = aci_command(args);
    command.env_remove("RUST_LOG").kill_on_drop(true);
    tokio::time::timeout(HANG_GUARD, command.output())
        .await
        .expect("aci ends within the hang guard")
        .expect("the aci binary runs")
}

/// What the command printed on stdout.
pub(crate) fn stdout(output: &Output) -> String {
    String::from_utf8(output.stdout.clone()).unwrap()
}

/// What the command printed on stderr.
pub(crate) fn stderr(output: &Output) -> String {
    String::from_utf8(output.stderr.clone()).unwrap()
}

/// stdout as one JSON value.
pub(crate) fn json(output: &Output) -> Value {
    serde_json::from_str(&stdout(output)).unwrap_or_else(|e| panic!("{e}: {}", stdout(output)))
}

/// stdout as JSON lines, one value per line.
pub(crate) fn json_lines(output: &Output) -> Vec<Value> {
    stdout(output)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

/// The records of `run` on `store`, as `aci inspect --json` prints them;
/// `config` (for a key prefix) when given.
pub(crate) async fn inspect(run: &str, store: &str, config: Option<&Path>) -> Vec<Value> {
    let mut args = vec!["inspect", "--run", run, "--json", "--store", store];
    if let Some(config) = config {
        args.extend(["--config", config.to_str().unwrap()]);
    }
    let output = aci_async(&args).await;
    assert!(
        output.status.success(),
        "aci inspect failed: {}",
        stderr(&output)
    );
    json_lines(&output)
}

/// The one record of `tool_call_id` among `records`.
pub(crate) fn record<'a>(records: &'a [Value], tool_call_id: &str) -> &'a Value {
    let found: Vec<&Value> = records
        .iter()
        .filter(|r| r["tool_call_id"] == tool_call_id)
        .collect();
    assert_eq!(found.len(), 1, "{records:?}");
    found[0]
}
