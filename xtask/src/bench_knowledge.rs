//! `cargo xtask bench knowledge`: builds the release `aci` binary, then runs
//! the `bench_knowledge` example of `projectors-rag` in release mode (with the
//! `jieba` feature, to compare the CJK segmenters) with `ACI_BIN` pointing at
//! that binary. It prints recall@1, recall@5 and MRR per language, index
//! build and reopen times and query latency p50/p99 over a generated
//! 3,000-file directory, and the second-process `aci call` time against a
//! same-run rebuild baseline; its last line is machine-readable.

use std::path::Path;
use std::process::{Command, ExitCode};

/// Runs the knowledge benchmark from the workspace root.
pub(crate) fn knowledge(workspace_root: &Path) -> ExitCode {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let built = Command::new(&cargo)
        .current_dir(workspace_root)
        .args([
            "build",
            "--quiet",
            "--release",
            "--package",
            "aci-cli",
            "--bin",
            "aci",
        ])
        .status();
    if !matches!(built, Ok(status) if status.success()) {
        eprintln!("could not build the release aci binary");
        return ExitCode::FAILURE;
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| workspace_root.join("target"), Into::into);
    let status = Command::new(&cargo)
        .current_dir(workspace_root)
        .env("ACI_BIN", target.join("release").join("aci"))
        .args([
            "run",
            "--quiet",
            "--release",
            "--package",
            "projectors-rag",
            "--features",
            "jieba",
            "--example",
            "bench_knowledge",
        ])
        .status();
    match status {
        Ok(status) if status.success() => ExitCode::SUCCESS,
        Ok(status) => {
            eprintln!("the knowledge benchmark failed ({status})");
            ExitCode::FAILURE
        }
        Err(error) => {
            eprintln!("could not run cargo: {error}");
            ExitCode::FAILURE
        }
    }
}
