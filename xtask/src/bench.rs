//! `cargo xtask bench <target>`: benchmarks that need more than criterion.
//!
//! `bench redis` builds and runs the `bench_redis` example of `store-redis`
//! in release mode; it spawns its own `redis-server` and prints round trips
//! per READY invocation, memory per record, throughput against a same-run
//! baseline, and a machine-readable last line
//! (`round_trips=2 ratio_c1=… ratio_c16=…`).

use std::path::Path;
use std::process::{Command, ExitCode};

/// Runs the Redis store benchmark from the workspace root. Its output is the
/// benchmark's own, so its last line stays the machine-readable one.
pub(crate) fn redis(workspace_root: &Path) -> ExitCode {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let status = Command::new(cargo)
        .current_dir(workspace_root)
        .args([
            "run",
            "--quiet",
            "--release",
            "--package",
            "store-redis",
            "--features",
            "testing",
            "--example",
            "bench_redis",
        ])
        .status();
    match status {
        Ok(status) if status.success() => ExitCode::SUCCESS,
        Ok(status) => {
            eprintln!("the Redis benchmark failed ({status})");
            ExitCode::FAILURE
        }
        Err(error) => {
            eprintln!("could not run cargo: {error}");
            ExitCode::FAILURE
        }
    }
}
